"""The IR's own layering: no import cycle inside xgraph.ir, and the codec below the public Graph.

Imports inside functions count (grimp reads every import statement); imports under
`if TYPE_CHECKING:` do not, since they never run. Type checkers follow those too: counted as well,
they make no cycle except through the object model's back references (`BACK_REFERENCES`); the modules
beneath the graph and its subgraphs see them through `xgraph.ir.protocols`.
"""
from __future__ import annotations

import subprocess
import sys
from typing import Protocol

import grimp
import networkx as nx
import pytest

CODEC = "xgraph.ir.onnx"
#: the modules defining the public Graph (with its codec methods) and xgraph.load
ABOVE_CODEC = {"xgraph.ir", "xgraph.ir.graph"}
#: The type-only imports that point up the IR's layers, each the type of a public accessor of the object
#: model: what callers get is the concrete class, which a Protocol in its place would hide from them. The
#: graph holds its ops, tensors, subgraphs and gears, and each of them names the graph it belongs to.
BACK_REFERENCES = {
    ("xgraph.ir.tensor", "xgraph.ir.op"): "Tensor.producer and Tensor.consumers (Op's inputs, outputs: Tensors)",
    ("xgraph.ir.tensor", "xgraph.ir.graph_core"): "Tensor.graph",
    ("xgraph.ir.op", "xgraph.ir.graph_core"): "Op.graph",
    ("xgraph.ir.subgraph", "xgraph.ir.graph_core"): "Subgraph.graph and get_graph()",
    ("xgraph.ir.gears", "xgraph.ir.graph_core"): "Gear.graph",
}


def ir_imports(exclude_type_checking_imports: bool) -> nx.DiGraph:
    graph = grimp.build_graph("xgraph", exclude_type_checking_imports=exclude_type_checking_imports, cache_dir=None)
    ir = {m for m in graph.modules if m == "xgraph.ir" or m.startswith("xgraph.ir.")}
    edges = nx.DiGraph()
    edges.add_nodes_from(ir)
    for m in ir:
        for target in graph.find_modules_directly_imported_by(m):
            if target in ir:
                edges.add_edge(m, target)
    return edges


@pytest.fixture(scope="module")
def imports() -> nx.DiGraph:
    return ir_imports(exclude_type_checking_imports=True)


@pytest.fixture(scope="module")
def typed_imports() -> nx.DiGraph:
    """The IR's imports, those under `if TYPE_CHECKING:` included."""
    return ir_imports(exclude_type_checking_imports=False)


def test_no_import_cycle_inside_the_ir(imports):
    cycles = [sorted(c) for c in nx.strongly_connected_components(imports) if len(c) > 1]
    cycles += [[m] for m in imports if imports.has_edge(m, m)]
    assert cycles == []


def test_type_only_imports_make_no_cycle_inside_the_ir_but_through_the_back_references(imports, typed_imports):
    for source, target in BACK_REFERENCES:  # each still there, and for type checkers only
        assert typed_imports.has_edge(source, target) and not imports.has_edge(source, target), (source, target)
    rest = typed_imports.copy()
    rest.remove_edges_from(BACK_REFERENCES)
    cycles = [sorted(c) for c in nx.strongly_connected_components(rest) if len(c) > 1]
    cycles += [[m] for m in rest if rest.has_edge(m, m)]
    assert cycles == [], "annotate with xgraph.ir.protocols instead of importing a module above"


def test_the_protocols_name_only_what_the_ir_classes_have():
    from xgraph import Graph
    from xgraph.ir.protocols import GraphTables, IndexFacts, TreeNode

    class Empty(Protocol):
        """What typing puts in every Protocol class."""

    g = Graph("g")
    g.create_op("a", "Relu", inputs=[g.create_input("x", [1])])
    g.get_root_subgraph().create_child_subgraph()
    missing = {}
    for protocol, instance in ((GraphTables, g), (TreeNode, g.get_leaf_subgraph("a")), (IndexFacts, g.index())):
        members = {m for m in set(protocol.__annotations__) | (set(vars(protocol)) - set(vars(Empty)))
                   if not m.endswith("__")}
        assert len(members) >= 4, protocol
        missing[protocol.__name__] = sorted(m for m in members if not hasattr(instance, m))
    assert missing == {"GraphTables": [], "TreeNode": [], "IndexFacts": []}


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
                                    "xgraph.ir.index", "xgraph.ir.subgraph", "xgraph.ir.protocols"])
def test_each_module_imports_first_in_a_fresh_process(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
