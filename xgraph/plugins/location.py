"""Where in a plugin's own code an exception was raised: ``path:line`` of the innermost frame there.

A plugin's error is only useful with the line of the plugin that raised it. The traceback
usually ends inside xgraph, numpy or the standard library (the plugin called a helper with a
bad argument), so the location is the innermost frame whose file is one of the plugin's
files: its module file, or any file below its package folder.

    >>> try:
    ...     1 / 0
    ... except ZeroDivisionError as e:
    ...     code_location(e, ["/nowhere"]) is None
    True
"""
from __future__ import annotations

import inspect
import os
import traceback
from collections.abc import Iterable
from types import ModuleType

#: Appended to error messages about user code: the command lines show the traceback with --debug.
DEBUG_HINT = "(--debug shows the traceback)"


def module_roots(module: ModuleType | None) -> list[str]:
    """The files of a module's code: its file, or the folder of a package's ``__init__.py``."""
    file = getattr(module, "__file__", None)
    if not isinstance(file, str):
        return []
    if os.path.basename(file) == "__init__.py":
        return [os.path.dirname(file)]
    return [file]


def inside(filename: str, roots: Iterable[str]) -> bool:
    """True when `filename` is one of `roots` (files or folders) or below one of them."""
    real = os.path.realpath(filename)
    return any(real == root or real.startswith(root + os.sep) for root in map(os.path.realpath, roots))


def code_location(error: BaseException, roots: Iterable[str]) -> str | None:
    """``path:line`` of the innermost frame of `error`'s traceback inside `roots` (files or folders), else None.

    A SyntaxError in a plugin file has no frame there; its own filename and line are used.
    Complexity: O(frames).
    """
    real_roots = [os.path.realpath(r) for r in roots if r]
    if not real_roots:
        return None
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename and inside(frame.filename, real_roots):
            found = f"{frame.filename}:{frame.lineno}"
    if isinstance(error, SyntaxError) and error.filename and inside(error.filename, real_roots):
        found = f"{error.filename}:{error.lineno}"
    return found


def innermost_location(error: BaseException) -> str | None:
    """``path:line`` of the innermost frame of `error` that is a real file (not ``<frozen importlib...>``)."""
    found = None
    for frame in traceback.extract_tb(error.__traceback__):
        if frame.filename and not frame.filename.startswith("<"):
            found = f"{frame.filename}:{frame.lineno}"
    if isinstance(error, SyntaxError) and error.filename:
        found = f"{error.filename}:{error.lineno}"
    return found


def defined_at(obj: object) -> str | None:
    """``path:line`` where a function, method or class is defined (a bound method: its function), else None."""
    target = getattr(obj, "__func__", obj)
    try:
        path = inspect.getsourcefile(target)  # type: ignore[arg-type]
        _, line = inspect.getsourcelines(target)  # type: ignore[arg-type]
    except (TypeError, OSError):
        return None
    return f"{path}:{max(line, 1)}" if path else None


def at(where: str | None) -> str:
    """" at path:line" when known, else ""."""
    return f" at {where}" if where else ""


__all__ = ["DEBUG_HINT", "at", "code_location", "defined_at", "inside", "innermost_location", "module_roots"]
