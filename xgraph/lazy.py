"""Names a package re-exports, resolved on first use (PEP 562), so importing the package stays cheap."""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_names(package: str, table: "Mapping[str, str | tuple[str, str]]") -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: a name of `table` is imported from its module (a module name,
    or (module, attribute) when the attribute is named differently) on first use, then kept in the
    package's namespace; any other name raises AttributeError as usual."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        where = table.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = where if isinstance(where, tuple) else (where, name)
        value = getattr(importlib.import_module(module), attr)
        namespace[name] = value
        return value

    return __getattr__


__all__ = ["lazy_names"]
