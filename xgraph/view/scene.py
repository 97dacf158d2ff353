"""What a partition picture shows, independent of the output format: nodes, edges, subgraph boxes, legend.

Nodes are the ops plus one node per graph input and output; weights are not nodes. Op
nodes are keyed by op name, input/output nodes by ("input", tensor) / ("output", tensor).
An edge joins a producer to a consumer (one per pair, with the tensors it carries); it is a
crossing when the runtime copies one of them between host and device memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Hashable

import networkx as nx

from xgraph.ir import Graph, Op
from xgraph.view.describe import (annotation, attribute_texts, crossing_copies, device_subgraphs, estimated_time_us,
                                  placement, reason_text, safe, subgraph_device, subgraph_runner, tensor_text,
                                  type_text)
from xgraph.view.layout import Layout, LayoutStyle, layered_layout


@dataclass(frozen=True)
class Node:
    """One drawn node: an op (kind "op") or a graph input/output (kind "input"/"output")."""

    key: Hashable
    kind: str
    name: str
    label: str
    device: str = ""
    subgraph: str = ""
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Edge:
    """Producer -> consumer, with the tensors it carries; `crossing` is "H2D"/"D2H" when the runtime
    copies one of them between host and device memory on the way, else ""."""

    source: Hashable
    target: Hashable
    tensors: tuple[str, ...]
    crossing: str = ""


@dataclass(frozen=True)
class Box:
    """A device subgraph drawn around its ops."""

    name: str
    device: str
    members: tuple[str, ...]
    runner: dict[str, str]
    estimated_time_us: float | None


@dataclass(frozen=True)
class Scene:
    """Everything to draw: nodes (inputs, ops in topological order, outputs), edges, boxes, legend counts."""

    title: str
    nodes: list[Node]
    edges: list[Edge]
    boxes: list[Box]
    device_ops: dict[str, int]
    crossings: int
    compiled: bool


def op_details(op: Op, device: str, subgraph: str) -> dict[str, Any]:
    """What hovering an op shows: type, device, subgraph, reason, kernel, inputs, outputs, attributes."""
    return {
        "name": safe(op.name),
        "type": safe(op.type if not op.domain else f"{op.domain}.{op.type}"),
        "device": device,
        "subgraph": subgraph,
        "reason": reason_text(annotation(op, "placement_reason"), device),
        "kernel": annotation(op, "kernel"),
        "inputs": [tensor_text(t) if t is not None else "(omitted)" for t in op.get_input_tensors()],
        "outputs": [tensor_text(t) for t in op.get_output_tensors()],
        "attributes": [f"{k} = {v}" for k, v in attribute_texts(op)],
    }


def build_scene(graph: Graph) -> Scene:
    """The picture's content for `graph` (compiled or not)."""
    where = placement(graph)
    copies = crossing_copies(graph)
    directions = {(c["tensor"], target): c["direction"] for c in copies for target in c["to"]}
    nodes = [Node(("input", t.name), "input", safe(t.name), type_text(t),
                  details={"name": safe(t.name), "type": "graph input", "outputs": [tensor_text(t)]})
             for t in dict.fromkeys(graph.get_input_tensors())]
    device_ops: dict[str, int] = {}
    for op in graph.toposort():
        device, subgraph = where[op]
        device_ops[device] = device_ops.get(device, 0) + 1
        nodes.append(Node(op.name, "op", safe(op.name), safe(op.type), device, subgraph,
                          op_details(op, device, subgraph)))
    nodes += [Node(("output", t.name), "output", safe(t.name), type_text(t),
                   details={"name": safe(t.name), "type": "graph output", "inputs": [tensor_text(t)]})
              for t in dict.fromkeys(graph.get_output_tensors())]
    edges = _edges(graph, where, directions)
    boxes = [Box(sg.name, subgraph_device(sg), tuple(op.name for op in sg.toposort()), subgraph_runner(sg),
                 estimated_time_us(sg)) for sg in device_subgraphs(graph)]
    return Scene(graph.name, nodes, edges, boxes, device_ops, len(copies), bool(boxes))


def _edges(graph: Graph, where: dict[Op, tuple[str, str]], directions: dict[tuple[str, str], str]) -> list[Edge]:
    carried: dict[tuple[Hashable, Hashable], list[str]] = {}
    inputs = set(graph.get_input_tensors())
    for op in graph.toposort():
        for t in op.get_input_tensors():
            if t is None or t.is_const:
                continue
            source = t.producer.name if t.producer is not None else ("input", t.name) if t in inputs else None
            if source is not None and t.name not in carried.setdefault((source, op.name), []):
                carried[(source, op.name)].append(t.name)
    for t in dict.fromkeys(graph.get_output_tensors()):
        source = t.producer.name if t.producer is not None else ("input", t.name) if t in inputs else None
        if source is not None:
            carried[(source, ("output", t.name))] = [t.name]
    edges = []
    for (source, target), names in carried.items():
        subgraph = where[graph.get_op(target)][1] if isinstance(target, str) else ""
        crossing = next((directions[(n, subgraph)] for n in names if (n, subgraph) in directions), "")
        edges.append(Edge(source, target, tuple(safe(n) for n in names), crossing))
    return edges


def scene_dag(scene: Scene) -> nx.DiGraph:
    """The scene as a DAG over node keys, nodes in scene order (the layout's tie-breaking order)."""
    dag = nx.DiGraph()
    dag.add_nodes_from(n.key for n in scene.nodes)
    dag.add_edges_from((e.source, e.target) for e in scene.edges)
    return dag


def layout_scene(scene: Scene, style: LayoutStyle | None = None) -> Layout:
    """The layered layout of the scene's nodes."""
    return layered_layout(scene_dag(scene), style)


def layout_graph(graph: Graph, style: LayoutStyle | None = None) -> Layout:
    """The layered layout of `graph` as the picture draws it (ops keyed by name, plus inputs/outputs)."""
    return layout_scene(build_scene(graph), style)


__all__ = ["Box", "Edge", "Node", "Scene", "build_scene", "layout_graph", "layout_scene", "op_details", "scene_dag"]
