"""The pluggy plugin manager for xgraph's extension hooks (devices, runners, kernels), of the default registries.

The manager belongs to a `xgraph.registries.Registries` object; these functions are the
default instance's, kept for code that registers extensions without passing registries.
"""
from __future__ import annotations

import pluggy

from xgraph.registries import PROJECT, default_registries


def get_plugin_manager() -> pluggy.PluginManager:
    """The default registries' manager: hook specs, the built-ins, then installed `xgraph` entry points."""
    return default_registries().plugin_manager


def register_extension(module_or_object, name: str | None = None) -> None:
    """Register an object with @hookimpl functions (as an installed package would) at run time.

    It takes effect on the next compile or run: the default registries rebuild their device,
    runner and kernel tables from the hooks.
    """
    default_registries().register_extension(module_or_object, name=name)


__all__ = ["PROJECT", "get_plugin_manager", "register_extension"]
