"""Dry run of partition plugins on a model: what each plugin would take, without compiling or writing.

The model is loaded and prepared as `xgraph.compile` does, split into one subgraph per op,
then each plugin runs in chain order on that graph. A plugin that fails is recorded with its
problem and its changes are undone (the chain restores the graph), and the next plugin runs
on: a check wants every problem, not the first. Nothing is placed and nothing is written.
"""
from __future__ import annotations

from typing import Any, Mapping

from xgraph.errors import XGraphError
from xgraph.compiler.options import parse_options
from xgraph.compiler.pipeline import load_for_compile
from xgraph.compiler.prepare import prepare
from xgraph.devices import get_devices


def dry_run_plugins(model: Any, names: list[str], plugin_path: list[str] | None = None,
                    options: "Mapping[str, Any] | str | None" = None) -> list[dict[str, Any]]:
    """Per plugin, in order: {"name", "ok", "ops", "subgraphs", "problem", "graph"} from running it on the prepared
    model ("graph": the dry-run graph, shared by the plugins, whose subgraphs carry their "runner" attrs)."""
    from xgraph.plugins.chain import run_plugin_chain
    opts = parse_options(options, get_devices())
    graph = load_for_compile(model)
    prepare(graph, opts)
    root = graph.get_root_subgraph()
    if root.is_leaf and graph.get_op_num():
        root.create_child_subgraph()
    results = []
    for name in names:
        settings = {name: opts.plugin_options[name]} if name in opts.plugin_options else None
        try:
            [record] = run_plugin_chain(graph, [name], plugin_path, settings)
        except XGraphError as e:
            results.append({"name": name, "ok": False, "ops": 0, "subgraphs": [], "problem": str(e), "graph": graph})
            continue
        results.append({"name": name, "ok": True, "ops": record["ops"], "subgraphs": record["subgraphs"],
                        "templates": record["templates"], "device": record["device"], "problem": "",
                        "declined": record["declined"], "graph": graph})
    return results


__all__ = ["dry_run_plugins"]
