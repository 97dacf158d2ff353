"""StateDiff: what differs between a graph now and a `GraphState` captured earlier (`Graph.changes_since`).

One pass over the live graph, comparing in place (nothing is captured a second time), so a
before/after check costs about what a snapshot does: O(ops + tensors + subgraphs). The diff
is complete and neutral: it says what changed, per op, tensor and subgraph; what is allowed
is the caller's policy (the plugin chain's is in `xgraph.plugins.snapshot`).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from xgraph.ir.snapshot import GraphState, ModelState, type_bytes

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph
    from xgraph.ir.tensor import Tensor


@dataclass
class StateDiff:
    """What differs now from a captured state; every field empty/False when nothing does."""

    #: ops or tensors added, removed or rewired, or graph inputs/outputs changed
    structure: bool = False
    name: bool = False
    graph_attrs: list[str] = field(default_factory=list)
    #: model-level facts, described ("the model's IR version (8 -> 3)", ...)
    model: list[str] = field(default_factory=list)
    root_replaced: bool = False
    #: the root's children now
    root_children: "tuple[Subgraph, ...]" = ()
    #: captured subgraphs (still in the tree) whose attrs changed -> the keys
    subgraph_attrs: "dict[Subgraph, list[str]]" = field(default_factory=dict)
    #: captured subgraphs (still in the tree) whose children or name changed
    subgraph_children: "set[Subgraph]" = field(default_factory=set)
    #: subgraphs in the tree now that were not captured -> whether they carry attrs or children
    new_subgraphs: "dict[Subgraph, bool]" = field(default_factory=dict)
    #: op -> what changed ("the name/type/domain", "the doc string", "attrs [...]")
    ops: "dict[Op, list[str]]" = field(default_factory=dict)
    #: tensor -> its most serious change: "the name", "the dtype/shape (was ..., now ...)", "the weight or value
    #: type", else "attrs [...]"
    tensors: "dict[Tensor, str]" = field(default_factory=dict)


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


def changes_since(g: "GraphCore", state: GraphState) -> StateDiff:
    """What differs in `g` now from `state` (see `StateDiff`)."""
    diff = StateDiff()
    diff.structure = (g._version != state.version or g._ops.keys() != state.ops.keys()
                      or g._tensors.keys() != state.tensors.keys())
    diff.name = g.name != state.name
    diff.graph_attrs = changed_keys(state.attrs, g._attrs)
    diff.model = _model_changes(state.model, g)
    _tree_diff(g, state, diff)
    _op_diff(g, state, diff)
    _tensor_diff(g, state, diff)
    return diff


def _model_changes(before: ModelState, g: "GraphCore") -> list[str]:
    found = []
    if before.opset_imports != g.opset_imports:
        found.append(f"the model's opset imports ({before.opset_imports} -> {g.opset_imports})")
    if before.ir_version != g.ir_version:
        found.append(f"the model's IR version ({before.ir_version} -> {g.ir_version})")
    keys = changed_keys(before.model_info, g.model_info) if isinstance(g.model_info, dict) else ["(replaced)"]
    if keys:
        found.append(f"the model info {keys}")
    functions = tuple(g.functions) if isinstance(g.functions, list) else None
    if functions is None or before.functions != functions or any(f.SerializeToString(deterministic=True) != data
                                            for f, data in zip(functions, before.function_bytes)):
        found.append("the model's functions")
    return found


def _tree_diff(g: "GraphCore", state: GraphState, diff: StateDiff) -> None:
    root = g._root
    diff.root_replaced = root is not state.root
    diff.root_children = tuple(root._children)
    get = state.subgraph_index.get
    cols = state.subgraph_columns
    names, children, attrs = cols.names, cols.children, cols.attrs
    level = [root]
    while level:
        below = []
        for sg in level:
            i = get(sg)
            kids = sg._children
            if i is None:
                diff.new_subgraphs[sg] = bool(sg._attrs or kids)
            else:
                old_attrs = attrs[i]
                if old_attrs or sg._attrs:
                    keys = changed_keys(old_attrs, sg._attrs)
                    if keys:
                        diff.subgraph_attrs[sg] = keys
                if names[i] != sg._name or ((kids or children[i]) and children[i] != tuple(kids)):
                    diff.subgraph_children.add(sg)
            if kids:
                below.extend(kids)
        level = below


def _same_columns(now: list, before: list) -> bool:
    """list ==, in C (identical items compare equal at once); False when items refuse to compare (arrays)."""
    try:
        return bool(now == before)
    except (TypeError, ValueError):
        return False


def _op_diff(g: "GraphCore", state: GraphState, diff: StateDiff) -> None:
    c = state.op_columns
    ops = c.ops
    if (_same_columns([op.name for op in ops], c.names) and _same_columns([op.type for op in ops], c.types)
            and _same_columns([op.domain for op in ops], c.domains)
            and _same_columns([op.doc_string for op in ops], c.docs)
            and _same_columns([op._attrs for op in ops], c.attrs)):
        return  # the usual case, compared column by column; else op by op, as below
    for op, name, op_type, domain, doc, attrs in zip(ops, c.names, c.types, c.domains, c.docs, c.attrs):
        found = []
        if op.name != name or op.type != op_type or op.domain != domain:
            found.append(f"the name/type/domain of op {name!r}")
        if op.doc_string != doc:
            found.append(f"the doc string of op {name!r}")
        if not _plainly_equal(attrs, op._attrs):
            keys = changed_keys(attrs, op._attrs)
            if keys:
                found.append(f"attrs {keys} of op {name!r}")
        if found:
            diff.ops[op] = found


def _tensor_diff(g: "GraphCore", state: GraphState, diff: StateDiff) -> None:
    c = state.tensor_columns
    ts = c.tensors
    if (_same_columns([t.name for t in ts], c.names) and _same_columns([t._attrs for t in ts], c.attrs)
            and _same_columns([t._shape for t in ts], c.shapes) and _same_columns([t._dtype for t in ts], c.dtypes)
            and all(map(operator.is_, [t._data for t in ts], c.data))
            and [t._type_proto for t in ts].count(None) == len(ts) and c.type_protos.count(None) == len(ts)):
        return  # the usual case, compared column by column; else tensor by tensor, as below
    for t, name, shape, dtype, data, attrs, type_proto in zip(ts, c.names, c.shapes, c.dtypes, c.data, c.attrs,
                                                              c.type_protos):
        # the most serious change is the one named: a caller may allow attrs changes only
        if t.name != name:
            diff.tensors[t] = f"the name of tensor {name!r} (now {t.name!r})"
        elif shape != t._shape or dtype != t._dtype:
            diff.tensors[t] = (f"the dtype/shape of tensor {name!r} (was {_type_text(dtype, shape)}, now "
                               f"{_type_text(t._dtype, t._shape)})")
        elif data is not t._data or (type_proto is not None or t._type_proto is not None) \
                and type_proto != type_bytes(t._type_proto):
            diff.tensors[t] = f"the weight or value type of tensor {name!r}"
        elif (attrs or t._attrs) and changed_keys(attrs, t._attrs):
            diff.tensors[t] = f"attrs {changed_keys(attrs, t._attrs)} of tensor {name!r}"


def _type_text(dtype, shape) -> str:
    """'float32 [1, 7]' ('unknown' for what is not known)."""
    return f"{dtype if dtype is not None else 'unknown dtype'} {list(shape) if shape is not None else 'unknown shape'}"
