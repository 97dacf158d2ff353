"""GraphSnapshot (over Graph.snapshot/restore): any sequence of API mutations, model-level facts and
renames included, is undone exactly, and reported by `changes`."""
from __future__ import annotations

import contextlib
import itertools

import numpy as np
import onnx
from hypothesis import given, settings
from hypothesis import strategies as st

from xgraph import Graph, XGraphError
from xgraph.ir.links import check_links
from xgraph.partition import merge_subgraph
from xgraph.plugins.snapshot import GraphSnapshot


def random_graph(seed: int, n: int) -> Graph:
    """n ops; op i reads one or two earlier ops (or the input); every op output is a graph output."""
    rng = np.random.default_rng(seed)
    g = Graph(f"g{seed}")
    outs = [g.create_input("x", (2,))]
    for i in range(n):
        k = int(rng.integers(1, 3))
        inputs = [outs[int(j)] for j in rng.choice(len(outs), size=min(k, len(outs)), replace=False)]
        outs.append(g.create_op(f"op{i:02d}", "Sum", inputs=inputs).get_output_tensor())
    g.set_outputs(outs[1:])
    g.get_root_subgraph().create_child_subgraph()
    g.get_root_subgraph().get_children().pop().set_attr("device", "EARLIER")
    return g


def full_state(g: Graph):
    """Every subgraph (by identity), op, tensor and attr, read through the public API."""
    tree = sorted((s.name, s.depth, id(s), id(s.get_parent()), tuple(sorted(op.name for op in s.get_ops())),
                   repr(sorted(s.get_attrs().items()))) for s in g.iter_subgraphs())
    ops = [(op.name, repr(sorted(op.get_attrs().items())), tuple(t.name for t in op.get_input_tensors()))
           for op in g.toposort()]
    tensors = sorted((t.name, t.shape, repr(sorted(t.get_attrs().items())), tuple(c.name for c in t.consumers))
                     for t in g.get_tensors())
    model = (g.name, sorted(g.opset_imports.items()), g.ir_version, repr(g.model_info),
             [f.SerializeToString() for f in g.functions], [op.doc_string for op in g.get_ops()])
    return repr(sorted(g.get_attrs().items())), tree, ops, tensors, [t.name for t in g.get_output_tensors()], model


MUTATIONS = st.lists(st.tuples(st.sampled_from(["merge", "graph_attr", "sg_attr", "op_attr", "tensor_attr",
                                                "add_op", "split_leaf", "shape", "rename_tensor", "opset",
                                                "ir_version", "model_info", "function", "doc"]),
                               st.integers(0, 10_000)), min_size=1, max_size=8)


def mutate(g: Graph, kind: str, pick: int) -> None:
    children = sorted(g.get_root_subgraph().get_children(), key=lambda s: s.name)
    ops = g.get_ops()
    if kind == "merge":
        free = [c for c in children if not c.has_attr("device") and c.is_leaf]
        group = {free[(pick + i * 7) % len(free)] for i in range(3)} if free else set()
        if group:
            merge_subgraph(group)
    elif kind == "graph_attr":
        g.set_attr("k", pick)
    elif kind == "sg_attr":
        children[pick % len(children)].set_attr("device" if pick % 2 else "note", "X")
    elif kind == "op_attr":
        ops[pick % len(ops)].set_attr("note", [pick])
    elif kind == "tensor_attr":
        g.get_tensors()[pick % len(g.get_tensors())].set_attr("scale", float(pick))
    elif kind == "add_op":
        g.create_op(f"new{pick}_{len(ops)}", "Relu", inputs=[ops[pick % len(ops)].get_output_tensor()])
    elif kind == "split_leaf":
        leaf = children[pick % len(children)]
        if leaf.is_leaf:
            leaf.create_child_subgraph()
    elif kind == "shape":
        g.get_tensors()[pick % len(g.get_tensors())].shape = (pick,)
    elif kind == "rename_tensor":
        t = g.get_tensors()[pick % len(g.get_tensors())]
        t.name = f"renamed{pick}_{t.name}"  # never the name of another tensor
    elif kind == "opset":
        g.opset_imports["custom"] = pick % 5 + 1
    elif kind == "ir_version":
        g.ir_version = pick % 3 + 3
    elif kind == "model_info":
        g.model_info.setdefault("metadata", {})["k"] = str(pick)
    elif kind == "function":
        if g.functions and pick % 2:
            g.functions[0].name = f"f{pick}"  # in place
        else:
            g.functions.append(onnx.FunctionProto(name=f"f{pick}", domain="custom"))
    elif kind == "doc":
        ops[pick % len(ops)].doc_string = f"doc {pick}"


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 14), mutations=MUTATIONS)
def test_restore_undoes_any_sequence_of_mutations(seed, n, mutations):
    g = random_graph(seed, n)
    before = full_state(g)
    snap = GraphSnapshot(g)
    assert snap.changes() == []
    for kind, pick in mutations:
        with contextlib.suppress(XGraphError):  # a refused mutation (a merge that would cycle) changes nothing
            mutate(g, kind, pick)
    assert bool(snap.changes()) == (full_state(g) != before)
    snap.restore()
    assert full_state(g) == before
    check_links(g)
    g.toposort()


def test_changes_names_what_changed_outside_the_allowance():
    g = random_graph(1, 6)
    snap = GraphSnapshot(g)
    op = g.get_ops()[0]
    op.set_attr("note", 1)
    assert snap.changes() == [f"attrs ['note'] of op {op.name!r}"]
    assert snap.changes(free_ops=[op]) == []
    earlier = next(c for c in g.get_root_subgraph().get_children() if c.has_attr("device"))
    earlier.set_attr("device", "OTHER")
    assert f"attrs ['device'] of subgraph {earlier.name!r}" in snap.changes(free_ops=[op])
    assert snap.changes(free_ops=[op], free_subgraphs=[earlier]) == []


def test_changes_below_a_child_are_found_however_deep_and_only_there():
    """A change two levels down is reported under its own name; untouched children report nothing."""
    g = random_graph(2, 8)
    root = g.get_root_subgraph()
    free = sorted((c for c in root.get_children() if not c.has_attr("device")), key=lambda sg: sg.name)
    for a, b in itertools.combinations(free, 2):  # the first pair (by name) that merges without a cycle
        merged = merge_subgraph({a, b})
        if len(merged) == 1:
            break
    assert len(merged) == 1
    (child,) = merged
    child.create_child_subgraph()
    deep = min(child.get_children(), key=lambda sg: sg.name)
    snap = GraphSnapshot(g)
    deep.set_attr("k", 1)
    assert snap.changes() == [f"attrs ['k'] of subgraph {deep.name!r}"]
    assert snap.changes(free_subgraphs=[child]) == []
    deep.del_attr("k")
    deep.create_child_subgraph()  # a new grandchild, made outside what the step returned
    (new,) = deep.get_children()
    assert snap.changes() == [f"the children of subgraph {deep.name!r}", f"subgraph {new.name!r} (created)"]
    assert snap.changes(free_subgraphs=[child]) == []
