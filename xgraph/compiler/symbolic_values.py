"""The values of shape arithmetic: small integer tensors computed from shapes, element by element.

`Shape`, `Size`, `Gather`, `Slice`, `Concat`, `Unsqueeze`, `Squeeze`, `Reshape`, `Cast` and integer
`Add`/`Sub`/`Mul`/`Div` over such tensors give lists of dims (`symbolic_dims`: ints, canonical
expressions such as `past + 1`, or None for unknown). `symbolic_shapes` reads them to give the
shapes of the `Reshape`/`Expand`/`Slice`/`ConstantOfShape` they feed.
"""
from __future__ import annotations

from xgraph.ir import Op, Tensor
from xgraph.ir.symbolic_dims import dim_add, dim_div, dim_mul, dim_product

#: integer tensors longer than this are data, not shape arithmetic: their values are not tracked
MAX_VALUE_LENGTH = 64

Shape = tuple
Values = list  # list[Dim]


class ShapeState:
    """Shapes and values known so far (tensor -> shape / element list), over the graph's own."""

    def __init__(self) -> None:
        self.shapes: dict[Tensor, Shape] = {}
        self.values: dict[Tensor, Values] = {}

    def shape(self, t: Tensor | None) -> Shape | None:
        if t is None:
            return None
        if t in self.shapes:
            return self.shapes[t]
        return None if t.shape is None else tuple(t.shape)

    def value(self, t: Tensor | None) -> Values | None:
        if t is None:
            return None
        if t in self.values:
            return self.values[t]
        if t.is_const and t.data is not None and t.data.dtype.kind in "iu" and t.data.ndim <= 1 \
                and t.data.size <= MAX_VALUE_LENGTH:
            return [int(v) for v in t.data.reshape(-1)]
        return None


def ints_of(values: Values | None) -> list[int] | None:
    return values if values is not None and all(isinstance(v, int) for v in values) else None


def attr_of(op: Op, name: str, default=None):
    return op.get_attr(name) if op.has_attr(name) else default


def input_at(op: Op, i: int) -> Tensor | None:
    inputs = op.get_input_tensors()
    return inputs[i] if i < len(inputs) else None


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# ------------------------------------------------------------------------------------ values

def _elementwise(op_type: str, a: Values, b: Values) -> Values | None:
    if len(a) != len(b) and 1 not in (len(a), len(b)):
        return None
    n = max(len(a), len(b))
    a, b = (a * n if len(a) == 1 else a), (b * n if len(b) == 1 else b)
    out: Values = []
    for x, y in zip(a, b):
        if op_type == "Add":
            out.append(dim_add(x, y))
        elif op_type == "Sub":
            out.append(dim_add(x, y, -1))
        elif op_type == "Mul":
            out.append(dim_mul(x, y))
        elif op_type == "Div":
            out.append(x // y if isinstance(x, int) and isinstance(y, int) and y else dim_div(x, y))
        elif op_type in ("Max", "Min") and isinstance(x, int) and isinstance(y, int):
            out.append(max(x, y) if op_type == "Max" else min(x, y))
        else:
            out.append(None)
    return out


def _slice_values(v: Values, starts, ends, steps) -> Values | None:
    if starts is None or ends is None or len(starts) != 1 or len(ends) != 1:
        return None
    step = steps[0] if steps else 1
    if not isinstance(step, int) or not isinstance(starts[0], int) or not isinstance(ends[0], int):
        return None
    return v[slice(starts[0], ends[0], step)]


def value_of(op: Op, st: ShapeState) -> Values | None:
    """The elements of `op`'s first output, when it is shape arithmetic over known elements."""
    t, inputs = op.type, op.get_input_tensors()
    first = st.value(inputs[0]) if inputs else None
    if t == "Shape":
        shape = st.shape(inputs[0])
        if shape is None:
            return None
        rank = len(shape)
        start, end = attr_of(op, "start", 0), attr_of(op, "end", rank)
        return list(shape[slice(max(0, norm_axis(start, rank)), max(0, norm_axis(end, rank)))])
    if t == "Size":
        shape = st.shape(inputs[0])
        return None if shape is None else [dim_product(shape)]
    if t == "Constant" and op.has_attr("value_ints"):
        return list(op.get_attr("value_ints"))
    if t == "Constant" and op.has_attr("value_int"):
        return [op.get_attr("value_int")]
    if first is None:
        return None
    if t in ("Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Cast"):
        return list(first)  # `propagate` asks only for integer outputs
    if t == "Neg":
        return [dim_mul(v, -1) for v in first]
    if t == "Gather" and attr_of(op, "axis", 0) == 0:
        idx = ints_of(st.value(input_at(op, 1)))
        if idx is None or any(not -len(first) <= i < len(first) for i in idx):
            return None
        return [first[i] for i in idx]
    if t == "Concat":
        parts = [st.value(x) for x in inputs]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if t == "Slice":
        return _slice_values(first, ints_of(st.value(input_at(op, 1))), ints_of(st.value(input_at(op, 2))),
                             ints_of(st.value(input_at(op, 4))))
    if t in ("Add", "Sub", "Mul", "Div", "Max", "Min") and len(inputs) == 2:
        other = st.value(inputs[1])
        return None if other is None else _elementwise(t, first, other)
    return None


__all__ = ["MAX_VALUE_LENGTH", "Shape", "ShapeState", "Values", "attr_of", "input_at", "ints_of", "norm_axis", "value_of"]
