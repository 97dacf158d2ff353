"""GraphSnapshot: a graph's state before a plugin step, to undo the step and to see what it changed.

A plugin is user code run in the middle of compilation; when it raises or misbehaves the
graph must be exactly as before it ran (CONVENTIONS: a failed operation changes nothing).
The IR captures and restores the state (`Graph.snapshot()` / `Graph.restore(state)`,
`xgraph.ir.snapshot.GraphState`, named fields); this module holds the chain's policy:
`changes` compares the state before with the state now and lists what differs outside
what a plugin step may touch, which is how the chain catches a `partition` or `compile`
that reaches beyond its own subgraphs. Every piece of graph state is compared: the ops and
tensors (names included, so a renamed tensor is caught), attrs everywhere, shapes and dtypes,
the subgraph tree, and the model-level facts (opset imports, IR version, model info,
functions). Weights and ONNX tensor attributes are read-only arrays, so a plugin writing into
one fails at the write instead of changing the caller's graph.

Cost: O(ops + tensors + subgraphs) time and memory per snapshot or comparison.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

import numpy as np

if TYPE_CHECKING:
    from xgraph.ir import Graph, GraphState, Op, Subgraph
    from xgraph.ir.snapshot import ModelState, TensorState


def same_value(a: Any, b: Any) -> bool:
    """Equality that works for numpy arrays and nested containers of them."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except (TypeError, ValueError):
        return False


def _plainly_equal(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """dict ==, which skips identical values; False when it has to compare numpy arrays."""
    try:
        return bool(before == after)
    except (TypeError, ValueError):
        return False


def changed_keys(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Attribute names added, removed or given a different value."""
    if _plainly_equal(before, after):
        return []
    keys = set(before) | set(after)
    return sorted(k for k in keys if k not in before or k not in after or not same_value(before[k], after[k]))


class GraphSnapshot:
    """The state of a graph when constructed; `restore` puts it back, `changes` says what differs now."""

    def __init__(self, graph: "Graph"):
        self.graph = graph
        self.state: GraphState = graph.snapshot()

    def restore(self) -> None:
        """Put the graph back exactly as captured (the same objects: ops, tensors, subgraphs)."""
        self.graph.restore(self.state)

    def changes(self, *, merges_allowed: bool = False, children: "Iterable[Subgraph] | None" = None,
                free_subgraphs: Iterable["Subgraph"] = (), free_ops: Iterable["Op"] = ()) -> list[str]:
        """What differs from the snapshot, outside the given allowances; empty when nothing else changed.

        `merges_allowed` lets depth-1 children without a "device" attr be merged; `children`
        instead names the root's children expected now (a later check after allowed
        merges). New children must carry no attrs or children unless free. `free_subgraphs`
        may change their attrs and everything below them; `free_ops` may change their
        attrs and their output tensors' attrs.
        """
        before, now = self.state, self.graph.snapshot()
        found: list[str] = []
        if now.version != before.version or now.ops.keys() != before.ops.keys() \
                or now.tensors.keys() != before.tensors.keys():
            found.append("the graph's ops or tensors (ops added, removed or rewired)")
        keys = changed_keys(before.attrs, now.attrs)
        if keys or now.name != before.name:
            found.append(f"graph attrs {keys}" if keys else "the graph's name")
        found += _model_changes(before.model, now.model)
        found += _tree_changes(before, now, set(free_subgraphs), merges_allowed, children)
        found += _op_changes(before, now, set(free_ops))
        found += _tensor_changes(before, now)
        return found


def _model_changes(before: "ModelState", now: "ModelState") -> list[str]:
    found = []
    if before.opset_imports != now.opset_imports:
        found.append(f"the model's opset imports ({before.opset_imports} -> {now.opset_imports})")
    if before.ir_version != now.ir_version:
        found.append(f"the model's IR version ({before.ir_version} -> {now.ir_version})")
    keys = changed_keys(before.model_info, now.model_info)
    if keys:
        found.append(f"the model info {keys}")
    if before.functions != now.functions or before.function_bytes != now.function_bytes:
        found.append("the model's functions")
    return found


def _tree_changes(before: "GraphState", now: "GraphState", free: set["Subgraph"], merges_allowed: bool,
                  expected: "Iterable[Subgraph] | None") -> list[str]:
    root = now.root
    if root is not before.root:
        return ["the root subgraph was replaced"]
    children = now.subgraphs[root].children
    reference = before.subgraphs[root].children if expected is None else tuple(expected)
    found: list[str] = []
    reference_set, now_set = set(reference), set(children)
    gone = [c for c in reference if c not in now_set]
    new = [c for c in children if c not in reference_set]
    if gone or new:
        assigned = [f"{c.name!r} (device {before.subgraphs[c].attrs['device']!r})" for c in gone
                    if c in before.subgraphs and "device" in before.subgraphs[c].attrs]
        if not merges_allowed or expected is not None:
            found.append(f"the root's children (merged or split: {_names(gone + new)})")
        elif assigned:
            found.append(f"subgraphs assigned earlier were merged away: {', '.join(assigned[:5])}")
    for child in children:
        if child in free:
            continue
        if child in before.subgraphs:
            found += _subtree_changes(before, now, child)
        elif now.subgraphs[child].attrs or now.subgraphs[child].children:
            found.append(f"attrs or children of subgraph {child.name!r}, which it did not return")
    return found


def _subtree_changes(before: "GraphState", now: "GraphState", sg: "Subgraph") -> list[str]:
    old = before.subgraphs.get(sg)
    if old is None:
        return [f"subgraph {sg.name!r} (created)"]
    state = now.subgraphs[sg]
    found = []
    keys = changed_keys(old.attrs, state.attrs)
    if keys:
        found.append(f"attrs {keys} of subgraph {state.name!r}")
    if old.children != state.children or old.name != state.name:
        found.append(f"the children of subgraph {state.name!r}")
    for child in state.children:
        found += _subtree_changes(before, now, child)
    return found


def _op_changes(before: "GraphState", now: "GraphState", free_ops: set["Op"]) -> list[str]:
    found: list[str] = []
    now_ops, now_tensors = now.op_states, now.tensor_states
    for op, old in before.op_states.items():
        if op in free_ops:
            continue
        state = now_ops.get(op)
        if state is None:
            continue  # removed: reported with the structure
        if (state.name, state.type, state.domain) != (old.name, old.type, old.domain):
            found.append(f"the name/type/domain of op {old.name!r}")
        if state.doc_string != old.doc_string:
            found.append(f"the doc string of op {old.name!r}")
        if not _plainly_equal(old.attrs, state.attrs) and changed_keys(old.attrs, state.attrs):
            found.append(f"attrs {changed_keys(old.attrs, state.attrs)} of op {old.name!r}")
        for t in old.outputs:
            change = _tensor_change(before.tensor_states[t], now_tensors.get(t))
            if change:
                found.append(change)
        if len(found) > 5:
            break
    for t, old in before.tensor_states.items():
        if old.producer is None:
            change = _tensor_change(old, now_tensors.get(t))
            if change:
                found.append(change)
                break
    return found


def _tensor_change(old: "TensorState", now: "TensorState | None") -> str:
    """What changed in a tensor's attrs, shape, dtype, weight or type ("" when nothing did)."""
    if now is None:
        return ""  # removed: reported with the structure
    keys = changed_keys(old.attrs, now.attrs)
    if keys:
        return f"attrs {keys} of tensor {old.name!r}"
    if (old.shape, old.dtype) != (now.shape, now.dtype):
        return f"the shape or dtype of tensor {old.name!r}"
    if old.data is not now.data or old.type_proto != now.type_proto:
        return f"the weight or value type of tensor {old.name!r}"
    return ""


def _tensor_changes(before: "GraphState", now: "GraphState") -> list[str]:
    """Renamed tensors (a name is the key of every link and of the exported model)."""
    now_tensors = now.tensor_states
    renamed = [(old.name, now_tensors[t].name) for t, old in before.tensor_states.items()
               if t in now_tensors and now_tensors[t].name != old.name]
    return [f"the name of tensor {a!r} (now {b!r})" for a, b in renamed[:5]]


def _names(subgraphs: list["Subgraph"]) -> str:
    names = sorted(sg.name for sg in subgraphs)
    return ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
