"""What onnx's shape inference may cost on a model, bounded before it is called.

onnx's inference is C++ that cannot be interrupted, so a small file must not be able to
ask it for hours or gigabytes. Two costs grow far beyond the file's size:

- **Local functions** are expanded at every call: functions that each call the next twice
  make a 2 KB model expand to millions of nodes. `expanded_node_count` counts what inference
  would expand (memoised per function, so the count itself is linear) and the import refuses
  a model over `MAX_EXPANDED_NODES`.
- **Data propagation** (which resolves ``Shape -> Gather -> Reshape`` chains) spends about
  150 bytes per element of every 1-D tensor that reaches an arithmetic op, and the length of
  such a tensor can come from a value: ``Constant([n]) -> ConstantOfShape -> Add``, or a value
  data propagation computes itself (``Mul`` of two constants). `data_propagation_is_bounded`
  follows a bound of every integer value propagation could know (constants, shape dims,
  arithmetic on them) to every op whose output length comes from a value, and says no when a
  length could exceed the limit: the model then gets shape inference without propagation.

Both are static over-estimates: a model they turn down may in fact be cheap, never the
other way round for the ops listed here.
"""
from __future__ import annotations

import math
from itertools import chain, compress
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from xgraph.errors import ModelFileError
from xgraph.ir.onnx.length_cone import FIRST as _FIRST
from xgraph.ir.onnx.length_cone import LENGTH_FROM_VALUES as _LENGTH_FROM_VALUES
from xgraph.ir.onnx.length_cone import MAX as _MAX
from xgraph.ir.onnx.length_cone import PRODUCT as _PRODUCT
from xgraph.ir.onnx.length_cone import SUM as _SUM
from xgraph.ir.onnx.length_bounds import decide_in_order
from xgraph.ir.onnx.length_cone import cone_wants, row_cone, value_bound
from xgraph.ir.onnx.length_cone import producers_first as _producers_first

if TYPE_CHECKING:
    from xgraph.ir.onnx.nodes import Nodes

#: A model whose local functions, expanded, add more nodes than this to its own is refused before inference.
MAX_EXPANDED_NODES = 1 << 18
#: Constant tensors larger than this are not read for value bounds (shape arithmetic is small).
_SMALL = 4096

def _function_key(domain: str, name: str, overload: str = "") -> tuple[str, str, str]:
    return (domain or "", name, overload or "")


def _nested_node_lists(top: "Nodes"):
    """The node lists of every graph nested in the attributes of the main graph's nodes, read through the
    importer's columns (only nodes with attributes are looked at)."""
    for i in top.nested:
        for a in top.attributes[i]:
            if a.HasField("g"):
                yield from _node_lists(a.g.node)
            for g in a.graphs:
                yield from _node_lists(g.node)


def _node_lists(nodes):
    """`nodes` and the nodes of every graph nested in their attributes."""
    stack = [nodes]
    while stack:
        current = stack.pop()
        yield current
        for node in current:
            for a in node.attribute:
                if a.HasField("g"):
                    stack.append(a.g.node)
                stack.extend(g.node for g in a.graphs)


def expanded_node_count(model: onnx.ModelProto, label: str, limit: int = MAX_EXPANDED_NODES,
                        top: "Nodes | None" = None) -> int:
    """How many nodes the model has once every local function call is expanded.

    Refused (ModelFileError) when the expansion adds more than `limit` nodes to those the file
    itself holds: the file's own nodes were read already and cost what the file's size allows,
    so a 1,000,000-node model without functions loads, while a 2 KB function bomb does not.
    `top`: the main graph's nodes already read into columns (the importer's), so they are not walked again.
    """
    functions = {_function_key(f.domain, f.name, getattr(f, "overload", "")): f for f in model.functions}
    if not functions:  # nothing expands: the count is the file's own
        if top is not None:
            return len(top) + sum(len(group) for group in _nested_node_lists(top))
        return sum(len(group) for group in _node_lists(model.graph.node))
    sizes: dict[tuple, int] = {}
    visiting: set[tuple] = set()

    def size_of(nodes, own_allowed: bool = False) -> int:
        """Expanded size of `nodes`; stops once it exceeds `limit` (plus their own count when `own_allowed`)."""
        total = own = 0
        for group in _node_lists(nodes):
            for node in group:
                key = _function_key(node.domain, node.op_type, getattr(node, "overload", ""))
                total += function_size(key) if key in functions else 1
                own += own_allowed
                if total - own > limit:
                    return total
        return total

    def function_size(key: tuple) -> int:
        if key in sizes:
            return sizes[key]
        if key in visiting:
            raise ModelFileError(f"{label}: local function {key[1]!r} (domain {key[0]!r}) calls itself; "
                                 "ONNX functions may not be recursive")
        visiting.add(key)
        sizes[key] = size_of(functions[key].node)
        visiting.discard(key)
        return sizes[key]

    if functions:
        # A chain of functions is walked bottom-up so the recursion stays shallow.
        for key in functions:
            function_size(key)
    total = size_of(model.graph.node, own_allowed=True)
    own = sum(len(group) for group in _node_lists(model.graph.node))
    if total - own > limit:
        raise ModelFileError(f"{label}: the model's local functions expand to more than {limit} nodes (each call "
                             "is inlined for shape inference); refusing a model that small files make this large")
    return total


def _magnitude(array: np.ndarray) -> float:
    if array.size == 0 or array.dtype.kind not in "biuf":
        return 0.0
    with np.errstate(all="ignore"):
        m = float(np.max(np.abs(array.astype(np.float64))))
    return m if math.isfinite(m) else math.inf


def _constant_bound(node: onnx.NodeProto) -> float:
    for a in node.attribute:
        if a.name == "value" and a.HasField("t"):
            n = math.prod(a.t.dims)
            return _magnitude(numpy_helper.to_array(a.t)) if n <= _SMALL else math.inf
        if a.name in ("value_int", "value_float"):
            return abs(a.i if a.name == "value_int" else a.f)
        if a.name in ("value_ints", "value_floats"):
            values = a.ints if a.name == "value_ints" else a.floats
            return max((abs(v) for v in values), default=0.0)
    return 0.0


def _attr_bound(node: onnx.NodeProto) -> float:
    """The magnitude of ConstantOfShape's `value` (its output's values)."""
    for a in node.attribute:
        if a.name == "value" and a.HasField("t") and math.prod(a.t.dims) <= _SMALL:
            return _magnitude(numpy_helper.to_array(a.t))
    return 0.0


_INT_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16, onnx.TensorProto.INT8,
                        onnx.TensorProto.UINT64, onnx.TensorProto.UINT32, onnx.TensorProto.UINT16,
                        onnx.TensorProto.UINT8})
_FLOAT_TO_INT = frozenset({"Cast", "CastLike", "Range"})


def _makes_ints(node: onnx.NodeProto) -> bool:
    """Whether a Constant/ConstantOfShape node makes integers (no value attr: ConstantOfShape's float zeros)."""
    for a in node.attribute:
        if a.name in ("value_int", "value_ints"):
            return True
        if a.name == "value" and a.HasField("t"):
            return a.t.data_type in _INT_TYPES
    return False


_RELEVANT = _SUM | _PRODUCT | _FIRST | _MAX | frozenset(_LENGTH_FROM_VALUES) | {"Constant", "Shape", "Size"}


def _has_fraction(array: np.ndarray) -> bool:
    if array.dtype.kind != "f" or array.size == 0:
        return False
    with np.errstate(all="ignore"):
        a = np.abs(array.astype(np.float64))
    return bool(((a > 0) & (a < 1)).any())


def _constant_has_fraction(node: onnx.NodeProto) -> bool:
    for a in node.attribute:
        if a.name == "value" and a.HasField("t") and math.prod(a.t.dims) <= _SMALL:
            return _has_fraction(numpy_helper.to_array(a.t))
        if a.name in ("value_float", "value_floats"):
            return _has_fraction(np.array([a.f] if a.name == "value_float" else list(a.floats), np.float64))
    return False


_CONSTANTS = frozenset({"Constant", "ConstantOfShape"})


def _relevant_nodes(model: onnx.ModelProto, top: "Nodes | None") -> list[tuple]:
    """(op type, inputs, outputs, NodeProto or None) of every node data propagation reads values through.

    With `top` (the importer's columns of the main graph) its nodes are read from the columns and
    only Constant/ConstantOfShape keep their NodeProto (their attributes are read); nested graphs
    and function bodies are read from the protos.
    """
    found = []
    groups = [*(f.node for f in model.functions)]
    if top is None:
        groups.insert(0, model.graph.node)
    else:
        protos = model.graph.node
        for i, (t, domain) in enumerate(zip(top.op_types, top.domains)):
            if t in _RELEVANT and domain in ("", "ai.onnx"):
                found.append((t, top.inputs[i], top.outputs[i], protos[i] if t in _CONSTANTS else None))
        groups += [group for group in _nested_node_lists(top)]
    nodes = [n for group in groups for nodes in _node_lists(group) for n in nodes
             if n.op_type in _RELEVANT and n.domain in ("", "ai.onnx")]
    return found + [(n.op_type, n.input[:], n.output[:], n) for n in nodes]  # protobuf fields read once


def _columns_suffice(model: onnx.ModelProto, top: "Nodes") -> bool:
    """Whether the main graph's columns are all the rows there are: no function bodies, no nested graphs,
    no tensor written twice (then each name has one producer, found in the columns' index)."""
    return not model.functions and not top.nested and top.produced_by() is not None


def _value_facts(model: onnx.ModelProto, constants: list[tuple], read: set[str], read_any: set[str]
                 ) -> tuple[dict[str, float], set[str], dict[int, float]]:
    """(value bound per initializer, names holding a fraction, bound per constant row) for the values some
    relevant op reads. Data propagation carries integers: a float value matters only where it becomes one
    (Cast, Range). `constants`: (row, op type, outputs, NodeProto) of each Constant/ConstantOfShape."""
    values: dict[str, float] = {}
    tiny: set[str] = set()  # constants holding a fraction: a Range step that makes long outputs
    for init in model.graph.initializer:
        if (init.name in read_any or (init.name in read and init.data_type in _INT_TYPES)) \
                and math.prod(init.dims) <= _SMALL:
            if init.data_location == onnx.TensorProto.EXTERNAL:  # mapped, not read: its values are unknown here
                values[init.name] = math.inf
                continue
            try:
                array = numpy_helper.to_array(init)
            except Exception:  # malformed data is refused later, by the importer
                values[init.name] = math.inf
                continue
            values[init.name] = _magnitude(array)
            tiny.update([init.name] if _has_fraction(array) else [])
    for _, t, outputs, n in constants:
        if t == "Constant" and _constant_has_fraction(n):
            tiny.update(outputs)
    # read once, not per pass, and only for values some relevant op reads
    attr_values = {i: (_constant_bound(n) if t == "Constant" else _attr_bound(n))
                   if any(o in read_any or (o in read and _makes_ints(n)) for o in outputs) else 0.0
                   for i, t, outputs, n in constants}
    return values, tiny, attr_values


def _from_protos(model: onnx.ModelProto, top: "Nodes | None") -> tuple | None:
    """(rows of the length cone, value bounds, fraction names) over every graph and function body, or None
    when no op makes a length from values."""
    entries = _relevant_nodes(model, top)
    if not any(t in _LENGTH_FROM_VALUES for t, _, _, _ in entries):
        return None
    read_any = {x for t, inputs, _, _ in entries if t in _FLOAT_TO_INT for x in inputs}
    read = {x for _, inputs, _, _ in entries for x in inputs}
    constants = [(i, t, outputs, n) for i, (t, _, outputs, n) in enumerate(entries) if t in _CONSTANTS]
    values, tiny, attr_values = _value_facts(model, constants, read, read_any)
    rows = [(t, inputs, outputs, attr_values.get(i, 0.0)) for i, (t, inputs, outputs, _) in enumerate(entries)]
    return [rows[i] for i in row_cone(rows)], values, tiny


def _from_columns(model: onnx.ModelProto, top: "Nodes", largest_dim: int, limit: int) -> "bool | tuple | None":
    """For a model whose main graph is all there is (`_columns_suffice`), read from the importer's columns:
    the decision itself when the length cone's ops come in producer order (`length_bounds`), else what
    `_from_protos` returns, with only the ops of the length cone as rows. O(V+E), with the per-op work in
    comprehensions and set operations."""
    types, inputs, outputs = top.op_types, top.inputs, top.outputs
    plain = set(top.domains) <= {"", "ai.onnx"}  # the usual case: the op type alone decides, mapped in C

    def ops_of(kinds) -> list[bool]:
        if plain:
            return list(map(kinds.__contains__, types))
        return [t in kinds and d in ("", "ai.onnx") for t, d in zip(types, top.domains)]

    relevant = ops_of(_RELEVANT)
    starts = list(compress(range(len(types)), ops_of(_LENGTH_FROM_VALUES)))
    if not starts:
        return None
    read = set(chain.from_iterable(compress(inputs, relevant)))
    read_any = set(chain.from_iterable(compress(inputs, ops_of(_FLOAT_TO_INT))))
    protos = model.graph.node
    constants = [(i, types[i], outputs[i], protos[i]) for i in compress(range(len(types)), ops_of(_CONSTANTS))]
    values, tiny, attr_values = _value_facts(model, constants, read, read_any)
    produced = top.produced_by().get  # one producer each: `_columns_suffice`

    def producers(name: str) -> "tuple[int] | None":  # asked only for the names the cone wants, not every output
        j = produced(name)
        return (j,) if j is not None and relevant[j] else None

    cone, need_value, need_dim = cone_wants(types, inputs, starts, producers)
    decided = decide_in_order(types, inputs, outputs, cone, need_value, need_dim, dict(values),
                              _declared_dims(model), float(max(largest_dim, 1)), attr_values, tiny, limit)
    if decided is not None:
        return decided
    return [(types[i], inputs[i], outputs[i], attr_values.get(i, 0.0)) for i in cone], values, tiny


def data_propagation_is_bounded(model: onnx.ModelProto, largest_dim: int, limit: int,
                                top: "Nodes | None" = None) -> bool:
    """Whether no 1-D tensor that data propagation meets can be longer than `limit` elements.

    `largest_dim` is the largest dimension the model declares. Bounds are per tensor name,
    over every graph and function body (names of different scopes merge, which only makes
    the bound larger), iterated to a fixpoint: a tensor's values (constants, `Shape` of a
    tensor whose dims are bounded, arithmetic on them) and its largest dim (declared, or the
    length an op makes from values). `top`: the main graph's nodes already read into columns.
    """
    prepared = _from_columns(model, top, largest_dim, limit) if top is not None and _columns_suffice(model, top) \
        else _from_protos(model, top)
    if prepared is None:
        return True
    if type(prepared) is bool:  # decided in one pass over the cone, in producer order
        return prepared
    rows, values, tiny = prepared
    dims = _declared_dims(model)  # per tensor: a bound of its largest dimension
    default_dim = float(max(largest_dim, 1))
    settled = _producers_first(rows)  # then one pass reaches the fixpoint: a second would change nothing
    get_value, get_dim = values.get, dims.get
    for _ in range(8):
        changed = False
        for t, inputs, outputs, attr_value in rows:
            bound = [get_value(x, 0.0) for x in inputs]
            in_dims = [get_dim(x, default_dim) for x in inputs if x]
            if t == "Constant" or t == "ConstantOfShape":
                v = attr_value
            elif t == "Shape":
                v = in_dims[0] if in_dims else default_dim
            elif t == "Size":
                v = math.inf if (in_dims and in_dims[0] > 1) else 1.0
            else:
                if t == "Range" and len(inputs) > 2 and inputs[2] in tiny:
                    return False
                v = value_bound(t, bound)
            out_dim = sum(in_dims) if t == "Concat" else max(in_dims, default=0.0)
            rule = _LENGTH_FROM_VALUES.get(t)
            if rule is not None:
                value_inputs, scaled = rule
                length = sum(bound[i] for i in value_inputs if i < len(bound)) or 0.0
                if scaled:
                    length = length * max(in_dims, default=1.0) + max(in_dims, default=0.0)
                if length > limit:
                    return False
                out_dim = max(out_dim, length)
            for o in outputs:
                if get_value(o, 0.0) < v:
                    values[o] = v
                    changed = True
                if get_dim(o, 0.0) < out_dim:
                    dims[o] = out_dim
                    changed = True
        if not changed or settled:
            return True
    return False


def _declared_dims(model: onnx.ModelProto) -> dict[str, float]:
    """The largest declared dimension of each graph input, initializer and value_info of the main graph."""
    dims: dict[str, float] = {}
    g = model.graph
    for init in g.initializer:
        dims[init.name] = float(max(init.dims, default=1))
    for vi in (*g.input, *g.output, *g.value_info):
        if vi.type.WhichOneof("value") == "tensor_type":
            dims[vi.name] = float(max((d.dim_value for d in vi.type.tensor_type.shape.dim), default=1))
    return dims


__all__ = ["MAX_EXPANDED_NODES", "data_propagation_is_bounded", "expanded_node_count"]
