"""The collapsed picture: one box per device subgraph, edges labelled with the tensors and bytes that cross.

A compiled graph above `COLLAPSE_ABOVE` ops is drawn collapsed by default (`choose_view`):
ResNet50's 176 ops are a 15,000-pixel-tall strip at readable size, its subgraphs a handful
of boxes. Nodes are the depth-1 subgraphs (key ("subgraph", name)) plus the graph inputs
and outputs; an edge joins two of them when tensors flow between them, labelled with how
many tensors and how many bytes per run (when the shapes are static), and marked "H2D" /
"D2H" when the runtime copies one of them between host and device memory. In the HTML page
a click on a box expands it: the op-level picture, zoomed to that subgraph.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Hashable

import networkx as nx
import numpy as np

from xgraph.ir import Graph, Tensor
from xgraph.view.describe import (crossing_copies, device_subgraphs, estimated_time_us, safe, subgraph_device,
                                  subgraph_runner, tensor_text, type_text)
from xgraph.view.layout import Layout, LayoutStyle, layered_layout
from xgraph.view.scene import Edge, Node

#: Compiled graphs with more ops than this are drawn collapsed unless a view is asked for.
COLLAPSE_ABOVE = 120
#: The views a picture can show.
VIEWS = ("auto", "ops", "subgraphs")
#: Box sizes of the collapsed picture.
STYLE = LayoutStyle(node_width=210.0, node_height=50.0, x_gap=40.0, y_gap=64.0)


@dataclass(frozen=True)
class CollapsedScene:
    """Subgraph boxes, inputs and outputs (`nodes`), the edges between them (with bytes), legend counts."""

    title: str
    nodes: list[Node]
    edges: list[Edge]
    bytes: dict[tuple[Hashable, Hashable], int | None]
    device_ops: dict[str, int]
    crossings: int


def choose_view(graph: Graph, view: str = "auto") -> str:
    """"ops" or "subgraphs": `view` itself, or for "auto" collapsed when compiled and above COLLAPSE_ABOVE ops."""
    if view not in VIEWS:
        from xgraph.errors import XGraphError
        raise XGraphError(f"view {view!r} is not one of {', '.join(VIEWS)}")
    compiled = not graph.get_root_subgraph().is_leaf
    if view == "subgraphs" and not compiled:
        from xgraph.errors import XGraphError
        raise XGraphError(f"graph {graph.name!r} is not compiled, so it has no device subgraphs to draw; compile it "
                          "first (xcompile, or --compile) or draw the ops view")
    if view != "auto":
        return view
    return "subgraphs" if compiled and graph.get_op_num() > COLLAPSE_ABOVE else "ops"


def tensor_bytes(t: Tensor) -> int | None:
    """Bytes of one value of `t` when its shape and dtype are known and static, else None."""
    if t.shape is None or t.dtype is None or any(not isinstance(d, int) or d < 0 for d in t.shape):
        return None
    if t.dtype == np.dtype(object):
        return None
    return int(np.prod(t.shape, dtype=np.int64)) * np.dtype(t.dtype).itemsize


def size_text(n: int | None) -> str:
    """1.2 MB, 3.4 kB, 512 B; "? B" when unknown."""
    if n is None:
        return "? B"
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    if n >= 1e3:
        return f"{n / 1e3:.1f} kB"
    return f"{n} B"


def build_collapsed_scene(graph: Graph) -> CollapsedScene:
    """The collapsed picture's content for a compiled `graph`."""
    children = device_subgraphs(graph)
    owner = {op: child for child in children for op in child.get_ops()}
    copies = crossing_copies(graph)
    direction = {(c["tensor"], to): c["direction"] for c in copies for to in c["to"]}
    nodes = [Node(("input", t.name), "input", safe(t.name), type_text(t),
                  details={"name": safe(t.name), "type": "graph input", "outputs": [tensor_text(t)]})
             for t in dict.fromkeys(graph.get_input_tensors())]
    device_ops: dict[str, int] = {}
    for child in children:
        device = subgraph_device(child)
        device_ops[device] = device_ops.get(device, 0) + child.get_op_num()
        runner = ", ".join(f"{m}={n}" for m, n in subgraph_runner(child).items()) or "none"
        details = {"name": safe(child.name), "type": "subgraph", "device": device, "ops": child.get_op_num(),
                   "runner": runner, "estimated_time_us": estimated_time_us(child),
                   "inputs": [tensor_text(t) for t in child.get_input_tensors()],
                   "outputs": [tensor_text(t) for t in child.get_output_tensors()]}
        nodes.append(Node(("subgraph", child.name), "subgraph", safe(child.name), device or "no device", device,
                          child.name, details))
    nodes += [Node(("output", t.name), "output", safe(t.name), type_text(t),
                   details={"name": safe(t.name), "type": "graph output", "inputs": [tensor_text(t)]})
              for t in dict.fromkeys(graph.get_output_tensors())]
    carried: dict[tuple[Hashable, Hashable], dict[str, Tensor]] = {}
    inputs = set(graph.get_input_tensors())

    def source_of(t: Tensor) -> Hashable | None:
        if t.producer is not None:
            return ("subgraph", owner[t.producer].name)
        return ("input", t.name) if t in inputs else None

    for child in children:
        for t in child.get_input_tensors():
            source = source_of(t)
            if source is not None and source != ("subgraph", child.name):
                carried.setdefault((source, ("subgraph", child.name)), {})[t.name] = t
    for t in dict.fromkeys(graph.get_output_tensors()):
        source = source_of(t)
        if source is not None:
            carried.setdefault((source, ("output", t.name)), {})[t.name] = t
    edges, sizes = [], {}
    for (source, target), tensors in carried.items():
        name = target[1] if target[0] == "subgraph" else ""
        crossing = next((direction[(n, name)] for n in tensors if (n, name) in direction), "")
        edges.append(Edge(source, target, tuple(safe(n) for n in tensors), crossing))
        each = [tensor_bytes(t) for t in tensors.values()]
        sizes[(source, target)] = None if any(b is None for b in each) else sum(each)
    return CollapsedScene(graph.name, nodes, edges, sizes, device_ops, len(copies))


def layout_collapsed(scene: CollapsedScene) -> Layout:
    """The layered layout of the collapsed scene (nodes in scene order break ties)."""
    dag = nx.DiGraph()
    dag.add_nodes_from(n.key for n in scene.nodes)
    dag.add_edges_from((e.source, e.target) for e in scene.edges)
    return layered_layout(dag, STYLE)


def edge_label(scene: CollapsedScene, edge: Edge) -> str:
    """"D2H · 2 tensors · 1.2 MB" (direction only for host/device copies)."""
    count = len(edge.tensors)
    what = edge.tensors[0] if count == 1 else f"{count} tensors"
    parts = ([edge.crossing] if edge.crossing else []) + [what, size_text(scene.bytes.get((edge.source, edge.target)))]
    return " \u00b7 ".join(parts)


__all__ = ["COLLAPSE_ABOVE", "CollapsedScene", "STYLE", "VIEWS", "build_collapsed_scene", "choose_view", "edge_label",
           "layout_collapsed", "size_text", "tensor_bytes"]
