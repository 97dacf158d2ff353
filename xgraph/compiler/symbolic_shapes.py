"""Symbolic shape propagation: dims as symbols and expressions through the shape arithmetic.

onnx's shape inference keeps a symbolic dim through elementwise ops and MatMul, but loses it at
the first piece of shape arithmetic: `Shape -> Gather -> Concat -> Reshape`, a `Slice` whose
bounds are run-time lengths, a `Concat` along a dynamic axis. It then invents a fresh dim
(`unk__23`) that equals nothing else, and everything after it stays dynamic, even where the
arithmetic gives a static dim back (`total - past` is the new tokens' count). This pass does what
onnxruntime's `symbolic_shape_infer` does (which needs sympy, not a dependency here) for the ops
exporters use in shape arithmetic:

- the *value* of every small integer tensor computed from shapes (`Shape`, `Size`, `Gather`,
  `Slice`, `Concat`, `Unsqueeze`, `Squeeze`, `Reshape`, `Cast`, `Add`/`Sub`/`Mul`/`Div`, ...),
  each element a dim (`symbolic_dims`: an int, a canonical expression such as `past + 1`, or
  unknown);
- the *shape* of op outputs from those values (`Reshape`, `Expand`, `ConstantOfShape`, `Slice`,
  `Range`) and through the ops between them (elementwise broadcasting, `MatMul`, `Gemm`,
  `Transpose`, `Concat`, `Gather`, `Split`, reductions, ...).

`propagate(graph)` is pure: it returns the better shapes and the values it knows; the caller
(`shape_fixpoint`) writes the shapes and folds ops whose value is fully known. A dim is better
when it is an int, or a computed expression where the graph had a name (an invented `unk__`, or a
name the model declared on an output), so equal dims get equal names. Ops it has no rule for keep the shape inference gave them.
Complexity O(V + E) times the rank.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from xgraph.ir import Graph, Op, Tensor
from xgraph.ir.symbolic_dims import Dim, dim_add, dim_div, dim_mul, dim_product
from xgraph.compiler.symbolic_values import (MAX_VALUE_LENGTH, Shape, ShapeState, Values, attr_of, input_at, ints_of,
                                             norm_axis, value_of)

#: a Slice end at least this large means "to the end" (exporters write INT64_MAX or INT32_MAX)
_TO_END = 1 << 30

SAME_SHAPE = frozenset({
    "Abs", "Acos", "Asin", "Atan", "BatchNormalization", "Cast", "CastLike", "Ceil", "Celu", "Clip", "Cos", "Cosh",
    "Dropout", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Hardmax", "Identity",
    "InstanceNormalization", "IsInf", "IsNaN", "LayerNormalization", "LeakyRelu", "Log", "LogSoftmax", "LpNormalization",
    "Mish", "Neg", "Not", "RMSNormalization", "Reciprocal", "Relu", "Round", "RotaryEmbedding", "Selu", "Shrink",
    "Sigmoid", "Sign", "Sin", "Sinh", "Softmax", "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu",
    "Trilu", "GroupNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization"})
BROADCAST = frozenset({"Add", "And", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Div", "Equal", "Greater",
                       "GreaterOrEqual", "Less", "LessOrEqual", "Max", "Mean", "Min", "Mod", "Mul", "Or", "PRelu", "Pow",
                       "Sub", "Sum", "Where", "Xor", "BitShift"})
REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin"})


# ------------------------------------------------------------------------------------ shapes

def broadcast(*shapes: Shape | None) -> Shape | None:
    """numpy broadcasting over dims: 1 gives way, equal dims stay, an int beats a symbol."""
    if not shapes or any(s is None for s in shapes):
        return None
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        dims = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0} - {1}
        if not dims:
            out.append(1)
        elif len(dims) == 1:
            out.append(next(iter(dims)))
        else:
            ints = {d for d in dims if isinstance(d, int)}
            out.append(next(iter(ints)) if len(ints) == 1 else None)
    return tuple(out)


def _reshape(data: Shape | None, target: Values, allowzero: int) -> Shape:
    """Reshape's output: 0 copies the input's dim (unless `allowzero`), one -1 takes what is left."""
    out = list(target)
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            out[i] = data[i] if data is not None and i < len(data) else None
    if -1 in out:
        i = out.index(-1)
        known = dim_product(d for j, d in enumerate(out) if j != i)
        out[i] = dim_div(dim_product(data), known) if data is not None else None
    return tuple(out)


def _slice_shape(op: Op, st: ShapeState) -> Shape | None:
    data = st.shape(input_at(op, 0))
    starts, ends = st.value(input_at(op, 1)), st.value(input_at(op, 2))
    if data is None or starts is None or ends is None or len(starts) != len(ends):
        return None
    axes = ints_of(st.value(input_at(op, 3))) or list(range(len(starts)))
    steps = ints_of(st.value(input_at(op, 4))) or [1] * len(starts)
    out = list(data)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = norm_axis(axis, len(data))
        dim = data[axis]
        if isinstance(dim, int) and isinstance(start, int) and isinstance(end, int):
            out[axis] = len(range(*slice(start, end, step).indices(dim)))
        elif step != 1 or start is None or end is None:
            out[axis] = None
        elif isinstance(end, int) and end >= _TO_END:
            out[axis] = dim_add(dim, start, -1) if isinstance(start, int) and start >= 0 else None
        elif isinstance(start, int) and start < 0 or isinstance(end, int) and end < 0:
            out[axis] = None
        else:  # symbolic bounds: a model slices inside the tensor (a mask's rows for the run-time lengths)
            out[axis] = dim_add(end, start, -1)
    return tuple(out)


def _matmul(a: Shape | None, b: Shape | None) -> Shape | None:
    if a is None or b is None or len(a) < 1 or len(b) < 1:
        return None
    if len(a) == 1 or len(b) == 1:
        return None
    batch = broadcast(a[:-2], b[:-2])
    return None if batch is None else (*batch, a[-2], b[-1])


def _reduce(op: Op, st: ShapeState, shape: Shape) -> Shape | None:
    rank = len(shape)
    if op.type in ("ArgMax", "ArgMin"):
        axes = [attr_of(op, "axis", 0)]
    else:
        axes = ints_of(st.value(input_at(op, 1))) if input_at(op, 1) is not None else attr_of(op, "axes")
    if axes is None:
        if input_at(op, 1) is not None:
            return None
        if attr_of(op, "noop_with_empty_axes", 0):
            return shape
        axes = list(range(rank))
    axes = {norm_axis(a, rank) for a in axes}
    keep = attr_of(op, "keepdims", 1)
    return tuple(1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes)


def shapes_of(op: Op, st: ShapeState) -> list[Shape | None]:
    """The shape of each output of `op` from the shapes and values known; None where there is no rule."""
    t = op.type
    inputs = op.get_input_tensors()
    first = st.shape(inputs[0]) if inputs else None
    n_out = len(op.get_output_tensors())
    one: Shape | None = None
    if t in SAME_SHAPE:
        return [first] + [None] * (n_out - 1)
    if t in BROADCAST:
        one = broadcast(*(st.shape(x) for x in inputs if x is not None))
    elif t == "MatMul":
        one = _matmul(first, st.shape(input_at(op, 1)))
    elif t == "Gemm" and first is not None and st.shape(input_at(op, 1)) is not None:
        b = st.shape(input_at(op, 1))
        one = (first[1] if attr_of(op, "transA", 0) else first[0], b[0] if attr_of(op, "transB", 0) else b[1])
    elif t == "Transpose" and first is not None:
        perm = attr_of(op, "perm", list(range(len(first)))[::-1])
        one = tuple(first[p] for p in perm)
    elif t == "Reshape":
        target = st.value(input_at(op, 1))
        one = None if target is None else _reshape(first, target, attr_of(op, "allowzero", 0))
    elif t == "Expand":
        target = st.value(input_at(op, 1))
        one = None if target is None else broadcast(first, tuple(target))
    elif t == "ConstantOfShape":
        target = st.value(input_at(op, 0))
        one = None if target is None else tuple(target)
    elif t == "Concat" and first is not None:
        parts = [st.shape(x) for x in inputs]
        if all(p is not None and len(p) == len(first) for p in parts):
            axis = norm_axis(attr_of(op, "axis", 0), len(first))
            total: Dim = 0
            for p in parts:
                total = dim_add(total, p[axis])
            one = tuple(total if i == axis else d for i, d in enumerate(first))
    elif t == "Slice":
        one = _slice_shape(op, st)
    elif t in ("Unsqueeze", "Squeeze") and first is not None:
        axes = ints_of(st.value(input_at(op, 1))) if input_at(op, 1) is not None else attr_of(op, "axes")
        if t == "Unsqueeze" and axes is not None:
            rank = len(first) + len(axes)
            rest = iter(first)
            norm = {norm_axis(a, rank) for a in axes}
            one = tuple(1 if i in norm else next(rest) for i in range(rank))
        elif t == "Squeeze":
            norm = {norm_axis(a, len(first)) for a in axes} if axes is not None else {i for i, d in enumerate(first)
                                                                                  if d == 1}
            one = tuple(d for i, d in enumerate(first) if i not in norm)
    elif t == "Gather" and first is not None and st.shape(input_at(op, 1)) is not None:
        axis = norm_axis(attr_of(op, "axis", 0), len(first))
        one = (*first[:axis], *st.shape(input_at(op, 1)), *first[axis + 1:])
    elif t == "Flatten" and first is not None:
        axis = norm_axis(attr_of(op, "axis", 1), len(first))
        one = (dim_product(first[:axis]), dim_product(first[axis:]))
    elif t in REDUCE and first is not None:
        one = _reduce(op, st, first)
    elif t == "Range":
        start, limit, delta = (st.value(x) for x in inputs[:3])
        if start and limit and delta and delta[0] == 1:
            one = (dim_add(limit[0], start[0], -1),)
    elif t == "Split" and first is not None:
        return _split(op, st, first, n_out)
    elif t == "Attention" and first is not None:
        return _attention(op, st, first, n_out)
    elif t == "Shape":
        value = value_of(op, st)
        one = None if value is None else (len(value),)
    elif t == "Size":
        one = ()
    return [one] + [None] * (n_out - 1)


def _attention(op: Op, st: ShapeState, q: Shape, n_out: int) -> list[Shape | None]:
    """Attention-23: Y, present_key, present_value, qk_matmul_output (onnx's inference leaves the cache outputs
    untyped)."""
    k, v = st.shape(input_at(op, 1)), st.shape(input_at(op, 2))
    past = st.shape(input_at(op, 4))
    if k is None or v is None or len(q) not in (3, 4) or len(k) != len(q) or len(v) != len(q):
        return [None] * n_out
    if len(q) == 4:
        y, k4, v4 = (*q[:3], v[3]), k, v
    else:
        heads, kv_heads = attr_of(op, "q_num_heads"), attr_of(op, "kv_num_heads")
        if not heads or not kv_heads:
            return [None] * n_out
        v_head = dim_div(v[2], kv_heads)
        y = (q[0], q[1], dim_mul(heads, v_head))
        k4 = (k[0], kv_heads, k[1], dim_div(k[2], kv_heads))
        v4 = (v[0], kv_heads, v[1], v_head)
    grow = (lambda s: s) if past is None or len(past) != 4 else (lambda s: (*s[:2], dim_add(past[2], s[2]), s[3]))
    present_k, present_v = grow(k4), grow(v4)
    heads = q[1] if len(q) == 4 else attr_of(op, "q_num_heads")
    qk = (q[0], heads, q[2] if len(q) == 4 else q[1], present_k[2])
    return [y, present_k, present_v, qk][:n_out] + [None] * (n_out - 4)


def _split(op: Op, st: ShapeState, first: Shape, n_out: int) -> list[Shape | None]:
    axis = norm_axis(attr_of(op, "axis", 0), len(first))
    sizes = st.value(input_at(op, 1)) if input_at(op, 1) is not None else attr_of(op, "split")
    if sizes is None:
        whole = first[axis]
        if not isinstance(whole, int) or whole % n_out:
            return [None] * n_out
        sizes = [whole // n_out] * n_out
    if len(sizes) != n_out:
        return [None] * n_out
    return [tuple(s if i == axis else d for i, d in enumerate(first)) for s in sizes]


# ---------------------------------------------------------------------------------- the pass

def better(new: Shape | None, old: Sequence | None) -> Shape | None:
    """`new` laid over `old` dim by dim (ints first, then computed over invented names); None if no gain."""
    if new is None:
        return None
    if old is None:
        return new if any(d is not None for d in new) else None
    if len(new) != len(old):
        return None
    merged = tuple(_pick(n, o) for n, o in zip(new, old))
    return merged if merged != tuple(old) else None


def _pick(new: Dim, old: Dim) -> Dim:
    """An int stays; otherwise the computed dim, which relates the tensor to the inputs' dims."""
    return old if isinstance(old, int) or new is None else new


def propagate(graph: Graph) -> tuple[dict[Tensor, Shape], dict[Tensor, Values]]:
    """({op output: better shape}, {op output: its elements}) over the graph in topological order. Pure."""
    st = ShapeState()
    changed: dict[Tensor, Shape] = {}
    for op in graph.toposort():
        if op.domain not in ("", "ai.onnx") or not op.get_output_tensors():
            continue
        for out, shape in zip(op.get_output_tensors(), _guarded(shapes_of, op, st) or []):
            merged = better(shape, out.shape)
            if merged is not None:
                st.shapes[out] = changed[out] = merged
        out = op.get_output_tensor()
        if out.dtype is not None and out.dtype.kind in "iu":
            shape = st.shape(out)
            if shape is None or (len(shape) <= 1 and all(isinstance(d, int) for d in shape)
                                 and int(np.prod(shape)) <= MAX_VALUE_LENGTH):
                value = _guarded(value_of, op, st)
                if value is not None:
                    st.values[out] = value
    return changed, st.values


def _guarded(rule, op: Op, st: ShapeState):
    """`rule(op, st)`, or None (unknown) for an op the model writes inconsistently (an axis or perm out of
    range, ranks that do not broadcast): this pass only adds what it can prove; the runtime names the op."""
    try:
        return rule(op, st)
    except (IndexError, ValueError, TypeError, KeyError, ZeroDivisionError, OverflowError):
        return None


__all__ = ["MAX_VALUE_LENGTH", "broadcast", "better", "propagate", "shapes_of", "value_of"]
