"""The IR's own layering: no import cycle inside xgraph.ir, and the codec below the public Graph.

Imports inside functions count (grimp reads every import statement); imports under
`if TYPE_CHECKING:` do not, since they never run.
"""
from __future__ import annotations

import subprocess
import sys

import grimp
import networkx as nx
import pytest

CODEC = "xgraph.ir.onnx"
#: the modules defining the public Graph (with its codec methods) and xgraph.load
ABOVE_CODEC = {"xgraph.ir", "xgraph.ir.graph"}


@pytest.fixture(scope="module")
def imports() -> nx.DiGraph:
    graph = grimp.build_graph("xgraph", exclude_type_checking_imports=True, cache_dir=None)
    ir = {m for m in graph.modules if m == "xgraph.ir" or m.startswith("xgraph.ir.")}
    edges = nx.DiGraph()
    edges.add_nodes_from(ir)
    for m in ir:
        for target in graph.find_modules_directly_imported_by(m):
            if target in ir:
                edges.add_edge(m, target)
    return edges


def test_no_import_cycle_inside_the_ir(imports):
    cycles = [sorted(c) for c in nx.strongly_connected_components(imports) if len(c) > 1]
    cycles += [[m] for m in imports if imports.has_edge(m, m)]
    assert cycles == []


def test_the_codec_never_reaches_the_public_graph_module(imports):
    codec = [m for m in imports if m == CODEC or m.startswith(CODEC + ".")]
    assert len(codec) >= 6  # importer, exporter, nodes, safe reader, shape inference, value types, xmodel
    reached = {m: sorted(nx.descendants(imports, m) & ABOVE_CODEC) for m in codec}
    assert {m: r for m, r in reached.items() if r} == {}
    # and the core below the codec never imports the codec
    core = [m for m in imports if m not in ABOVE_CODEC and m not in codec]
    assert {m: sorted(t for t in imports.successors(m) if t.startswith(CODEC)) for m in core
            if any(t.startswith(CODEC) for t in imports.successors(m))} == {}


@pytest.mark.parametrize("module", ["xgraph.ir.onnx.importer", "xgraph.ir.onnx.exporter", "xgraph.ir.onnx.xmodel",
                                    "xgraph.ir.graph_core", "xgraph.ir.builder", "xgraph.ir.state",
                                    "xgraph.ir.index", "xgraph.ir.subgraph"])
def test_each_module_imports_first_in_a_fresh_process(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
