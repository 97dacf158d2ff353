"""Checks of what callers hand the public entry points: a Graph where a Graph is expected, a path
where a path is. Each refusal is one XGraphError naming the function, the argument and what it
takes, instead of an AttributeError or TypeError from deep inside."""
from __future__ import annotations

import os
from typing import Any

from xgraph.errors import XGraphError


def require_graph(value: Any, function: str, argument: str = "graph", *, compiled: bool = False,
                  error: type[XGraphError] = XGraphError) -> None:
    """`error` naming `function` and `argument` unless `value` is an xgraph.Graph."""
    from xgraph.ir.graph_core import GraphCore
    if not isinstance(value, GraphCore):
        what = "a compiled xgraph.Graph (what xgraph.compile returns)" if compiled else "an xgraph.Graph"
        raise error(f"{function}: argument {argument!r} must be {what}, got {type(value).__name__}")


def require_path(value: Any, function: str, argument: str = "path", *, error: type[XGraphError] = XGraphError) -> None:
    """`error` naming `function` and `argument` unless `value` is a str or os.PathLike path."""
    if not isinstance(value, (str, os.PathLike)):
        raise error(f"{function}: argument {argument!r} must be a file path (str or os.PathLike), got "
                    f"{type(value).__name__}")


def require_names(value: Any, function: str, argument: str, *, error: type[XGraphError] = XGraphError) -> list[str]:
    """`value` (one name or an iterable of names) as a list of names; `error` naming the argument otherwise."""
    if isinstance(value, str):
        return [value]
    try:
        names = list(value)
    except TypeError:
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise error(f"{function}: argument {argument!r} must be a name or a list of names (str), got "
                    f"{type(value).__name__ if names is None else repr(names)[:80]}")
    return names


__all__ = ["require_graph", "require_names", "require_path"]
