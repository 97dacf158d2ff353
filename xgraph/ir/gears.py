"""Gears of a compiled graph: one static partition per input shape, weights shared.

A graph compiled with a gear option (`dynamic_batch_size`, `dynamic_image_size`,
`dynamic_dims`) is gear 0's compiled graph, carrying the list of all its gears
(`graph.get_gears()`). Each `Gear` names its static input shapes and holds its own compiled
graph (ops, tensors and subgraph tree of that shape); gear 0's graph is the carrier itself.
The gears' graphs have the same input and output names, and a weight that is the same in
every gear is one read-only array shared by all of them (`share_weights`), so a gear costs
its own ops, plans and activations, not another copy of the weights.

    >>> gear = graph.find_gear({"input_ids": (1, 16)})  # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from xgraph.errors import GraphError
from xgraph.ir.builder import set_weights

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore


@dataclass(frozen=True)
class Gear:
    """One gear: its name, the static shape of each graph input, and its compiled graph."""

    name: str
    input_shapes: Mapping[str, tuple[int, ...]]
    graph: "GraphCore" = field(repr=False, compare=False)

    def describe(self) -> str:
        """"name (x:1,16; mask:1,16)", as errors and `xgraph inspect` list it."""
        shapes = "; ".join(f"{n}:{','.join(str(d) for d in s)}" for n, s in self.input_shapes.items())
        return f"{self.name} ({shapes})"


#: Gears an error lists in full; beyond it, the first and last few and the dims that differ.
GEARS_LISTED = 8


def describe_gears(gears: "Sequence[Gear]") -> str:
    """The gears as errors list them: "gear0 (x:1,8), gear1 (x:1,16)".

    More than `GEARS_LISTED` (50 past-length gears of a decoder) are summed up: the first
    three and the last two in full, then the dims that differ between gears and their values
    ("past_k dim 2: 0..49"), so the message stays readable and still says what every gear takes.
    """
    if len(gears) <= GEARS_LISTED:
        return ", ".join(g.describe() for g in gears)
    head, tail = gears[:3], gears[-2:]
    listed = ", ".join([*(g.describe() for g in head), f"... {len(gears) - 5} more ...",
                        *(g.describe() for g in tail)])
    varying = []
    for name, shape in gears[0].input_shapes.items():
        for axis in range(len(shape)):
            values = sorted({g.input_shapes[name][axis] for g in gears if len(g.input_shapes[name]) > axis})
            if len(values) > 1:
                varying.append(f"{name} dim {axis}: {_int_set(values)}")
    return f"{listed} ({len(gears)} gears; " + ("; ".join(varying) or "every dim the same") + ")"


def _int_set(values: "list[int]") -> str:
    """Sorted ints as "0..49" when they are a run, else "1,2,4,8" (at most 12 shown)."""
    if values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}..{values[-1]}"
    shown = ",".join(map(str, values[:12]))
    return shown if len(values) <= 12 else f"{shown},... ({len(values)} values)"


def input_shapes_of(graph: "GraphCore") -> dict[str, tuple[int, ...]]:
    """{input name: its static shape}; GraphError naming an input whose shape is not fully static."""
    shapes: dict[str, tuple[int, ...]] = {}
    for t in graph.get_input_tensors():
        if t.shape is None or not all(isinstance(d, int) for d in t.shape):
            raise GraphError(f"graph {graph.name!r}: input {t.name!r} has shape {t.shape!r}; every input of a gear "
                             "must be static (fill its dims with the gear's input_shape)")
        shapes[t.name] = tuple(t.shape)
    return shapes


def check_gears(carrier: "GraphCore", gears: Sequence[Gear]) -> tuple[Gear, ...]:
    """The gears as a tuple, after checking they can serve one model; GraphError naming the gear otherwise.

    Gear 0's graph is `carrier`; every gear has a distinct name and distinct input shapes, the
    carrier's input and output names, and input shapes equal to what it records.
    """
    gears = tuple(gears)
    if not gears:
        return ()
    if gears[0].graph is not carrier:
        raise GraphError(f"graph {carrier.name!r}: gear 0 ({gears[0].name!r}) must be the graph itself")
    inputs = [t.name for t in carrier.get_input_tensors()]
    outputs = [t.name for t in carrier.get_output_tensors()]
    names: set[str] = set()
    shapes: dict[tuple, str] = {}
    for gear in gears:
        if not isinstance(gear, Gear) or not isinstance(gear.name, str) or not gear.name:
            raise GraphError(f"graph {carrier.name!r}: gears must be xgraph.ir.gears.Gear objects with a name, "
                             f"got {gear!r:.80}")
        if gear.name in names:
            raise GraphError(f"graph {carrier.name!r}: two gears are named {gear.name!r}")
        names.add(gear.name)
        g = gear.graph
        if [t.name for t in g.get_input_tensors()] != inputs or [t.name for t in g.get_output_tensors()] != outputs:
            raise GraphError(f"graph {carrier.name!r}: gear {gear.name!r} has inputs/outputs "
                             f"{[t.name for t in g.get_input_tensors()]} -> {[t.name for t in g.get_output_tensors()]}"
                             f", not the model's {inputs} -> {outputs}")
        actual = input_shapes_of(g)
        if actual != {k: tuple(v) for k, v in gear.input_shapes.items()}:
            raise GraphError(f"graph {carrier.name!r}: gear {gear.name!r} records input shapes "
                             f"{dict(gear.input_shapes)}, but its graph's inputs are {actual}")
        key = tuple(sorted(actual.items()))
        if key in shapes:
            raise GraphError(f"graph {carrier.name!r}: gears {shapes[key]!r} and {gear.name!r} have the same input "
                             f"shapes {actual}")
        shapes[key] = gear.name
    return gears


def find_gear(gears: Sequence[Gear], shapes: Mapping[str, Sequence[int]]) -> Gear | None:
    """The gear whose input shapes equal `shapes` (every input named), or None."""
    wanted = {k: tuple(int(d) for d in v) for k, v in shapes.items()}
    return next((g for g in gears if dict(g.input_shapes) == wanted), None)


def _same_array(a: np.ndarray, b: np.ndarray) -> bool:
    if a is b:
        return True
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    pointer = a.__array_interface__["data"][0]
    if pointer == b.__array_interface__["data"][0] and a.strides == b.strides:
        return True
    return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def share_weights(graphs: Sequence["GraphCore"]) -> dict[str, int]:
    """Make every weight of graphs[1:] that equals graphs[0]'s weight of that name the same array. O(weight bytes).

    Weights are read-only, so sharing changes no value; it only keeps one copy in memory (and
    the .xmodel writer stores a shared weight once). Returns {"shared": n, "own": n}: how
    many weights of the later graphs now share, and how many stay their own (a constant
    prepare folded differently for that shape).
    """
    if not graphs:
        return {"shared": 0, "own": 0}
    first = {t.name: t for t in graphs[0].get_const_tensors()}
    counts = {"shared": 0, "own": 0}
    for graph in graphs[1:]:
        shared = []  # equal read-only arrays become one
        for t in graph.get_const_tensors():
            source = first.get(t.name)
            if source is not None and _same_array(t.data, source.data):
                if t.data is not source.data:
                    shared.append((t, source))
                counts["shared"] += 1
            else:
                counts["own"] += 1
        if shared:
            set_weights(graph, shared)
    return counts


def bind_weights(graph: "GraphCore", carrier: "GraphCore", names: Sequence[str]) -> None:
    """Turn `graph`'s inputs `names` into weights holding `carrier`'s arrays of those names (no copy).

    The .xmodel loader builds a stored gear with its shared weights as placeholder inputs, so
    their bytes are decoded once (for gear 0) however many gears there are; this binds them.
    GraphError naming the tensor when a placeholder does not match the carrier's weight.
    """
    inputs = {t.name: t for t in graph.get_input_tensors()}
    bound = []
    for name in names:
        t = inputs.get(name)
        source = carrier.get_tensor(name) if carrier.has_tensor(name) else None
        if t is None or source is None or not source.is_const:
            raise GraphError(f"graph {graph.name!r}: shared weight {name!r} is not a placeholder input matched by a "
                             f"weight of {carrier.name!r}")
        if t.shape != source.data.shape or t.dtype != source.data.dtype:
            raise GraphError(f"graph {graph.name!r}: shared weight {name!r} is declared {t.dtype}{list(t.shape or ())}"
                             f" but {carrier.name!r} holds {source.data.dtype}{list(source.data.shape)}")
        bound.append((t, source))  # the carrier's read-only array, shared
    set_weights(graph, bound)


def gear_record(gears: Sequence[Gear]) -> list[dict[str, Any]]:
    """The gears as plain JSON: [{"name", "input_shapes": {input: [dims]}}], in gear order."""
    return [{"name": g.name, "input_shapes": {k: list(v) for k, v in g.input_shapes.items()}} for g in gears]


__all__ = ["GEARS_LISTED", "Gear", "bind_weights", "check_gears", "describe_gears", "find_gear", "gear_record", "input_shapes_of", "share_weights"]
