"""Partition plugins: the `Plugin` base class, `Decline`, `PluginOption`, name resolution, and the plugin chain."""
from xgraph.plugins.base import Decline, Plugin, PluginOption
from xgraph.plugins.chain import run_plugin_chain
from xgraph.plugins.loader import load_plugin

__all__ = ["Decline", "Plugin", "PluginOption", "load_plugin", "run_plugin_chain"]
