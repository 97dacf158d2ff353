"""How many bytes a constant-folded op will produce, known from its input values before it runs.

Constant folding evaluates an op whose inputs are all weights. Its result can be far larger
than its inputs (`Expand` of a two-number shape, `ConstantOfShape`, `Tile`, `Range`, a broadcast
`Add` of `[n, 1]` and `[1, n]`), and inferred shapes may be missing or wrong (a model declares
what it likes in value_info), so the estimate is computed from the input arrays themselves:

- ops that make their output shape from input values (`Expand`, `ConstantOfShape`, `Tile`,
  `Range`, `Pad`, `OneHot`, `Resize`/`Upsample`, `EyeLike`...): from those values;
- broadcasting ops (elementwise, `Where`, `MatMul`, `Gemm`, `Sum`...): from the input shapes;
- ops whose output is never larger than their inputs (reshapes, slices, reductions, casts
  up to 8 bytes an element): the inputs' sizes;
- anything else: the inferred static shapes, else unknown (the op is then not folded).
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from xgraph.ir import Op

_ELEMENT = 8  # bytes per element assumed when a dtype is unknown or may widen (Cast to int64/double)

_BROADCAST = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Greater", "Less", "GreaterOrEqual",
    "LessOrEqual", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Max", "Min", "Mean", "Sum", "Where",
    "PRelu", "BitwiseNot", "Clip"})
#: Output never larger (in elements) than the largest input or the inputs together.
_NOT_LARGER = frozenset({
    "Identity", "Cast", "CastLike", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Shape",
    "Size", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round",
    "Sign", "Not", "Erf", "Sin", "Cos", "Softmax", "LogSoftmax", "ReduceSum", "ReduceMean", "ReduceMax",
    "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
    "Split", "Concat", "GatherElements", "ScatterElements", "ScatterND", "CumSum",
    "QuantizeLinear", "DequantizeLinear", "IsNaN", "IsInf", "Unique", "TopK", "Trilu",
    "SequenceConstruct", "SplitToSequence", "ConcatFromSequence", "DepthToSpace", "SpaceToDepth", "Compress"})


def _numel(shape: Sequence[int]) -> int:
    return math.prod(int(d) for d in shape)


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dims = [s[len(s) - rank + i] for s in shapes if len(s) - rank + i >= 0]
        out.append(max(dims, default=1) if 0 not in dims else 0)
    return tuple(out)


def _ints(a: np.ndarray | None) -> list[int] | None:
    if a is None or a.dtype.kind not in "iu" or a.size > 64:
        return None
    return [int(v) for v in a.reshape(-1)]


#: What a shape-from-values rule returns when the op is not one it can size (then the input shapes decide).
_NOT_FROM_VALUES = -1


def _constant_of_shape(t: str, data: list, first: np.ndarray | None) -> int | None:
    dims = _ints(first) if first is not None else []
    return None if dims is None else _numel([max(d, 0) for d in dims])


def _expand(t: str, data: list, first: np.ndarray | None) -> int | None:
    if len(data) <= 1:
        return _NOT_FROM_VALUES
    dims = _ints(data[1])
    if dims is None or first is None:
        return None
    return _numel(_broadcast([first.shape, tuple(max(d, 0) for d in dims)]))


def _tile(t: str, data: list, first: np.ndarray | None) -> int | None:
    if len(data) <= 1 or first is None:
        return _NOT_FROM_VALUES
    repeats = _ints(data[1])
    return None if repeats is None else first.size * _numel([max(r, 0) for r in repeats])


def _range(t: str, data: list, first: np.ndarray | None) -> int | None:
    if len(data) != 3 or not all(d is not None and d.size == 1 for d in data):
        return _NOT_FROM_VALUES
    start, limit, delta = (float(d.reshape(-1)[0]) for d in data)
    if delta == 0 or not all(map(math.isfinite, (start, limit, delta))):
        return None
    return max(math.ceil((limit - start) / delta), 0)


def _pad(t: str, data: list, first: np.ndarray | None) -> int | None:
    if len(data) <= 1 or first is None:
        return _NOT_FROM_VALUES
    pads = _ints(data[1])
    if pads is None:
        return None
    rank = len(pads) // 2
    grow = [max(pads[i], 0) + max(pads[i + rank], 0) for i in range(rank)]
    padded = _numel([d + g for d, g in zip(first.shape[-rank:] if rank else (), grow)])
    return padded * _numel(first.shape[:-rank] if rank else first.shape)


def _one_hot(t: str, data: list, first: np.ndarray | None) -> int | None:
    if len(data) <= 1 or first is None:
        return _NOT_FROM_VALUES
    depth = data[1]
    if depth is None or depth.size != 1 or not math.isfinite(float(depth.reshape(-1)[0])):
        return None
    return first.size * max(int(float(depth.reshape(-1)[0])), 0)


def _resize(t: str, data: list, first: np.ndarray | None) -> int | None:
    """Resize and Upsample: from the sizes input when given, else the scales (Resize's third input, Upsample's second)."""
    if first is None:
        return _NOT_FROM_VALUES
    sizes = _ints(data[3]) if len(data) > 3 and data[3] is not None and data[3].size else None
    if sizes is not None:
        return _numel([max(s, 0) for s in sizes])
    scales = data[2] if t == "Resize" and len(data) > 2 else (data[1] if len(data) > 1 else None)
    if scales is None or scales.size > 64 or not np.isfinite(scales).all():
        return None
    return math.prod(math.ceil(d * max(float(s), 0.0)) for d, s in zip(first.shape, scales.reshape(-1)))


def _eye_like(t: str, data: list, first: np.ndarray | None) -> int | None:
    return _NOT_FROM_VALUES if first is None else first.size


def _gather(t: str, data: list, first: np.ndarray | None) -> int | None:
    if len(data) <= 1 or first is None or data[1] is None:
        return _NOT_FROM_VALUES
    return data[1].size * max(first.size, 1)  # each index picks at most the whole data


def _non_zero(t: str, data: list, first: np.ndarray | None) -> int | None:
    return _NOT_FROM_VALUES if first is None else first.size * max(first.ndim, 1)


#: op type -> its output elements from its input values: fn(op type, input arrays, first input).
_SHAPE_FROM_VALUES = {
    "ConstantOfShape": _constant_of_shape, "Expand": _expand, "Tile": _tile, "Range": _range, "Pad": _pad,
    "OneHot": _one_hot, "Resize": _resize, "Upsample": _resize, "EyeLike": _eye_like, "Gather": _gather,
    "GatherND": _gather, "NonZero": _non_zero,
}


def _from_values(op: Op, data: list[np.ndarray | None]) -> int | None:
    """Output elements of ops that build their shape from input values (None: unknown; -1: not such an op)."""
    rule = _SHAPE_FROM_VALUES.get(op.type)
    return _NOT_FROM_VALUES if rule is None else rule(op.type, data, data[0] if data else None)


def _matmul(shapes: list[tuple[int, ...]]) -> int | None:
    a, b = shapes[0], shapes[1]
    if len(a) < 1 or len(b) < 1:
        return None
    a2 = a if len(a) > 1 else (1,) + a
    b2 = b if len(b) > 1 else b + (1,)
    batch = _broadcast([a2[:-2], b2[:-2]])
    return _numel(batch) * a2[-2] * b2[-1]


def estimated_output_bytes(op: Op, data: "list[np.ndarray | None] | None" = None) -> int | None:
    """Bytes the op's outputs will take when evaluated on its (constant) inputs; None when unknown.

    `data`: the input arrays (None for omitted ones) when they are not the inputs' weights yet (a
    folding pass that makes its weights at the end)."""
    if data is None:
        data = [None if t is None else t.data for t in op.get_input_tensors()]
    present = [d for d in data if d is not None]
    shapes = [tuple(d.shape) for d in present]
    elements = _from_values(op, data)
    if elements == _NOT_FROM_VALUES:
        elements = None
        if op.type in _BROADCAST and shapes:
            elements = _numel(_broadcast(shapes))
        elif op.type in ("MatMul", "MatMulInteger") and len(shapes) >= 2:
            elements = _matmul(shapes)
        elif op.type == "Gemm" and len(shapes) >= 2 and len(shapes[0]) == 2 and len(shapes[1]) == 2:
            trans_a, trans_b = op.get_attrs().get("transA", 0), op.get_attrs().get("transB", 0)
            m = shapes[0][1] if trans_a else shapes[0][0]
            n = shapes[1][0] if trans_b else shapes[1][1]
            elements = m * n
        elif op.type in _NOT_LARGER:
            elements = sum(d.size for d in present) * max(len(op.get_output_tensors()), 1)
        else:
            return _inferred_bytes(op)
    if elements is None:
        return None
    return sum(elements * (t.dtype.itemsize if t.dtype is not None else _ELEMENT) for t in op.get_output_tensors())


def _inferred_bytes(op: Op) -> int | None:
    total = 0
    for t in op.get_output_tensors():
        if not (t.is_static() and t.dtype is not None):
            return None
        total += t.numel() * t.dtype.itemsize
    return total


__all__ = ["estimated_output_bytes"]
