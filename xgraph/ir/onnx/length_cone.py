"""Which ops' value bounds reach a length data propagation makes from values, and the op tables saying
how a bound flows through each op (`inference_budget.data_propagation_is_bounded` iterates over these).

The cone is computed on plain sequences (op types, inputs, a producer lookup), so the importer's
node columns and the rows read from protos (nested graphs, function bodies) share one algorithm.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Sequence

#: Ops whose integer output data onnx propagates, and how a bound of their values follows.
SUM = frozenset({"Add", "Sub"})
PRODUCT = frozenset({"Mul"})
FIRST = frozenset({"Div", "Mod", "Cast", "CastLike", "Identity", "Squeeze", "Unsqueeze", "Gather", "GatherElements",
                   "Slice", "Reshape", "Flatten", "Expand", "Neg", "Abs", "Tile", "Transpose"})
MAX = frozenset({"Concat", "Max", "Min", "Where"})


def value_bound(op_type: str, bound: "list[float]") -> float:
    """The bound of the values an arithmetic op computes from its inputs' value bounds `bound`, in input
    order (0 for an op type that computes no values from values: Shape, Size and constants are the callers')."""
    if op_type in SUM:
        return sum(bound)
    if op_type in PRODUCT:
        return math.prod(bound) if bound else 0.0
    if op_type in FIRST:
        return bound[0] if bound else 0.0
    if op_type in MAX:
        return max(bound, default=0.0)
    if op_type == "Range":
        return max(bound[:2], default=0.0)
    return 0.0
#: Ops whose output length comes from an input's values: {op: (value inputs, also scaled by a dim?)}.
LENGTH_FROM_VALUES = {"ConstantOfShape": ((0,), False), "Expand": ((1,), False), "Reshape": ((1,), False),
                      "Range": ((0, 1), False), "OneHot": ((1,), False), "Resize": ((3,), False),
                      "Upsample": ((1,), True), "TopK": ((1,), False), "CenterCropPad": ((1,), False),
                      "Tile": ((1,), True), "Pad": ((1,), True), "RandomNormal": ((), False)}
VALUE_FROM_INPUT_VALUES = SUM | PRODUCT | FIRST | MAX | {"Range"}


def producers_first(rows: list[tuple]) -> bool:
    """Whether each tensor the rows make is made by one row and read only by later rows: then one pass in
    order sees every input's final bound before it reads it, and reaches the fixpoint."""
    made = {o: k for k, (_, _, outputs, _) in enumerate(rows) for o in outputs}
    if len(made) != sum(len(outputs) for _, _, outputs, _ in rows):
        return False  # a tensor made twice
    return all(made.get(x, -1) < k for k, (_, inputs, _, _) in enumerate(rows) for x in inputs)


def length_cone(types: Sequence[str], inputs: Sequence[Sequence[str]], starts: Iterable[int],
                producers: Callable[[str], Iterable[int]]) -> list[int]:
    """Indices (sorted) of the ops the lengths depend on: the `starts` (every op of `LENGTH_FROM_VALUES`),
    and backwards from what they read, the producers of each value bound and dim bound that feeds one. O(V+E).

    `types[i]`, `inputs[i]`: op `i`'s type and input names; `producers(name)`: the ops writing `name`.
    The bounds of the other ops' outputs reach no length, so the fixpoint skips them (on a 100k-op
    chain with a TopK every 97 ops, the TopKs alone instead of every Add/Abs/Neg).

    >>> length_cone(["Shape", "Relu", "Reshape"], [["x"], ["x"], ["x", "s"]], [2], {"s": [0]}.get)
    [0, 2]
    """
    return cone_wants(types, inputs, starts, producers)[0]


def cone_wants(types: Sequence[str], inputs: Sequence[Sequence[str]], starts: Iterable[int],
               producers: Callable[[str], Iterable[int]]) -> tuple[list[int], set[str], set[str]]:
    """(`length_cone`, the tensors whose value bound it wants, the tensors whose dim bound it wants):
    only those bounds reach a length."""
    keep = set(starts)
    need_value: set[str] = set()
    need_dim: set[str] = set()
    values: list[str] = []  # names whose value bound is wanted, their producers not yet followed
    dims: list[str] = []  # the same for dim bounds

    def want(wanted: set[str], stack: list[str], names: Iterable[str]) -> None:
        fresh = set(names) - wanted
        if fresh:
            fresh.discard("")
            wanted |= fresh
            stack.extend(fresh)

    def want_length_inputs(t: str, names: Sequence[str]) -> None:
        value_inputs, scaled = LENGTH_FROM_VALUES[t]
        want(need_value, values, [names[k] for k in value_inputs if k < len(names)])
        if scaled:
            want(need_dim, dims, names)

    for i in keep:
        want_length_inputs(types[i], inputs[i])
    while values or dims:  # the wanted sets are a closure: the order they are followed in does not matter
        while values:
            for j in producers(values.pop()) or ():
                keep.add(j)
                t = types[j]
                if t == "Shape" or t == "Size":
                    want(need_dim, dims, inputs[j])
                elif t in VALUE_FROM_INPUT_VALUES:
                    want(need_value, values, inputs[j])
        while dims:
            for j in producers(dims.pop()) or ():
                keep.add(j)
                t = types[j]
                want(need_dim, dims, inputs[j])
                if t in LENGTH_FROM_VALUES:
                    want_length_inputs(t, inputs[j])
    return sorted(keep), need_value, need_dim


def row_cone(rows: list[tuple]) -> list[int]:
    """`length_cone` over rows of (op type, inputs, outputs, constant bound), in order."""
    producers: dict[str, list[int]] = {}
    for i, (_, _, outputs, _) in enumerate(rows):
        for o in outputs:
            producers.setdefault(o, []).append(i)
    types = [row[0] for row in rows]
    return length_cone(types, [row[1] for row in rows], [i for i, t in enumerate(types) if t in LENGTH_FROM_VALUES],
                       producers.get)


__all__ = ["FIRST", "LENGTH_FROM_VALUES", "MAX", "PRODUCT", "SUM", "VALUE_FROM_INPUT_VALUES", "cone_wants", "value_bound",
           "length_cone", "producers_first", "row_cone"]
