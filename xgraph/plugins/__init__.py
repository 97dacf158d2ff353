"""Partition plugins: the `Plugin` base class, name resolution, and the plugin chain."""
from xgraph.plugins.base import Plugin
from xgraph.plugins.chain import run_plugin_chain
from xgraph.plugins.loader import load_plugin

__all__ = ["Plugin", "load_plugin", "run_plugin_chain"]
