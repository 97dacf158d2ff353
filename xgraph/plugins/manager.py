"""The pluggy plugin manager for xgraph's extension hooks (devices, runners, kernels)."""
from __future__ import annotations

import threading

import pluggy

from xgraph import hookspecs
from xgraph.errors import PluginError

PROJECT = "xgraph"
_lock = threading.Lock()
_manager: pluggy.PluginManager | None = None


def get_plugin_manager() -> pluggy.PluginManager:
    """The process-wide manager: hook specs, the built-ins, then installed `xgraph` entry points."""
    global _manager
    with _lock:
        if _manager is None:
            from xgraph.plugins import builtin
            pm = pluggy.PluginManager(PROJECT)
            pm.add_hookspecs(hookspecs)
            pm.register(builtin, name="xgraph.builtin")
            try:
                pm.load_setuptools_entrypoints(PROJECT)
            except Exception as e:  # a broken third-party package must not hide which one it was
                raise PluginError(f"loading an installed '{PROJECT}' entry point failed: {e}") from e
            try:
                pm.check_pending()
            except pluggy.PluginValidationError as e:
                raise PluginError(f"an installed xgraph extension implements an unknown hook: {e}") from e
            _manager = pm
        return _manager


def register_extension(module_or_object, name: str | None = None) -> None:
    """Register an object with @hookimpl functions (as an installed package would) at run time."""
    pm = get_plugin_manager()
    try:
        pm.register(module_or_object, name=name)
        pm.check_pending()
    except (ValueError, pluggy.PluginValidationError) as e:
        raise PluginError(f"cannot register xgraph extension {name or module_or_object!r}: {e}") from e
