"""Graph edits constant folding makes thousands of times, each done in one step.

Folding a 100k-op transformer turns ~18k ops into weights and drops the weights nobody reads
afterwards. Spelled with the general methods (`create_const` + `replace_uses` per output, then
`remove_op`, `remove_tensor` per weight) each edit checks and relinks more than it needs to and
drops the graph's caches several times; these functions do the same edits with one check and one
cache drop each, and leave the graph exactly as the general methods would (the same tensor
table order, the same consumer order, the same input slots).

They are what `xgraph.compiler.prepare` calls; like every IR write they go through
`xgraph.ir.builder`.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Container, Iterable, Sequence

import numpy as np

from xgraph.errors import GraphError
from xgraph.ir.builder import GraphBuilder, link_input, unlink_input

_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_NAME, _OUTPUTS = attrgetter("name"), attrgetter("_outputs")

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore
    from xgraph.ir.op import Op
    from xgraph.ir.tensor import Tensor


def replace_op_by_weights(graph: "GraphCore", op: "Op", arrays: "Sequence[np.ndarray]") -> "list[Tensor]":
    """Remove `op` and make each of its outputs that has readers a weight of the same name holding
    `arrays[i]` (a read-only view, as `create_const` keeps it), read by the same ops in the same
    slots. Returns the new weights.

    The result is what `create_const` (a temporary name) + `replace_uses` per output, `remove_op`,
    then `create_const` (the output's name) + `replace_uses` + `remove_tensor` per output leave
    behind. GraphError, changing nothing, when `op` is not of this graph, `arrays` has not one array
    per output, or an output is a graph output or read by a nested graph.
    """
    op = graph._resolve_op(op)
    outputs = op._outputs
    if len(arrays) != len(outputs):
        raise GraphError(f"op {op.name!r} has {len(outputs)} output(s) but {len(arrays)} array(s) were given "
                         "to replace them; give one array per output")
    index = graph.index()
    exposed, implicit = index.output_set(), index.implicit_reads()[1]
    for t in outputs:
        if t in exposed or t in implicit:
            kept = [t.name for t in outputs if t in exposed or t in implicit]
            raise GraphError(f"cannot replace op {op.name!r} by weights: its output(s) {kept} are graph outputs "
                             "or read by a nested graph")
    # checks done: nothing below can fail
    moved = [(t, list(t._consumers), a) for t, a in zip(outputs, arrays) if t._consumers]
    builder = GraphBuilder(graph)
    builder.remove_op(op)
    made = []
    for old, readers, array in moved:
        weight = builder.add_const(old.name, np.asarray(array))
        _rewire(readers, old, weight)
        made.append(weight)
    graph._touch(keeps_order=True)  # an op and its outputs gone, weights (no producer) added
    return made


def replace_ops_by_weights(graph: "GraphCore", folds: "Sequence[tuple[Op, Sequence[np.ndarray]]]",
                           keep_unread: bool = True) -> "list[Tensor]":
    """`replace_op_by_weights` for each (op, arrays) of `folds` in turn, as one edit: the same tables,
    links and weights (names, order, readers, values) those calls leave, with one check of everything
    first and one cache drop. Returns the new weights, in the order the calls would have made them.

    A weight some later op of `folds` is the only reader of would be made and then be left unread;
    with `keep_unread=False` it is not made at all (what `remove_unused_weights` would do to it next),
    and no reader is relinked only to be removed. GraphError, changing nothing, on what
    `replace_op_by_weights` refuses or an op given twice.
    """
    ops = list(map(_FIRST, folds))
    table = graph._ops
    try:
        known = list(map(table.get, map(_NAME, ops))) == ops  # each op the one of its name here (in C)
    except (AttributeError, TypeError):
        known = False
    if not known:
        for op in ops:
            graph._resolve_op(op)  # raises, naming what it is
    rank = dict(zip(ops, range(len(ops))))  # the order of the calls
    if len(rank) != len(ops):
        twice = next(op for op in ops if ops.count(op) > 1)
        raise GraphError(f"op {twice.name!r} is given twice to replace by weights; give each op once")
    if list(map(len, map(_SECOND, folds))) != list(map(len, map(_OUTPUTS, ops))):
        for op, (_, arrays) in zip(ops, folds):
            if len(arrays) != len(op._outputs):
                raise GraphError(f"op {op.name!r} has {len(op._outputs)} output(s) but {len(arrays)} array(s) were "
                                 "given to replace them; give one array per output")
    index = graph.index()
    exposed, implicit = index.output_set(), index.implicit_reads()[1].keys()
    every = list(chain.from_iterable(map(_OUTPUTS, ops)))
    if not (exposed.isdisjoint(every) and implicit.isdisjoint(every)):  # asked in C; the op named below
        for op in ops:
            kept = [t.name for t in op._outputs if t in exposed or t in implicit]
            if kept:
                raise GraphError(f"cannot replace op {op.name!r} by weights: its output(s) {kept} are graph outputs "
                                 "or read by a nested graph")
    # checks done: nothing below can fail
    arrays = list(chain.from_iterable(map(_SECOND, folds)))  # one per output, as `every`
    if keep_unread:  # whether a weight is made depends on the readers when its producer's call runs
        calls = list(chain.from_iterable([i] * len(op._outputs) for i, op in enumerate(ops)))
        moved = [(call, t, list(t._consumers), a) for call, t, a in zip(calls, every, arrays) if t._consumers]
    builder = GraphBuilder(graph)
    builder.remove_ops(ops)  # an op removed later than a producer reads the old tensor: never relinked
    if not keep_unread:  # an output's readers now are those no call removes, in their order: the weight's
        moved = [(0, t, t._consumers, a) for t, a in zip(every, arrays) if t._consumers]
    add_const, asarray, last = builder.add_const, np.asarray, len(ops)
    made = []
    for call, old, consumers, array in moved:
        if keep_unread:
            readers = [c for c in consumers if c not in rank]  # the readers no call removes: the weight keeps them
            if not readers and all(rank.get(c, last) < call for c in consumers):
                continue  # every reader was removed by an earlier call: that call made no weight
        else:
            readers = list(consumers)
        weight = add_const(old.name, asarray(array))
        _rewire(readers, old, weight)
        made.append(weight)
    if ops:
        graph._touch(keeps_order=True)  # ops and their outputs gone, weights (no producer) added
    return made


def remove_unused_weights(graph: "GraphCore", keep: "Iterable[Tensor]" = ()) -> int:
    """Remove every weight nobody reads (not consumed, not a graph output, not read by a nested graph,
    not in `keep`), in one step; returns how many went."""
    index = graph.index()
    keep = set(keep) | index.output_set() | index.nested_read_tensors()
    unused = [t for t in graph._tensors.values() if t._data is not None and not t._consumers and t not in keep]
    if unused:
        builder = GraphBuilder(graph)
        for t in unused:
            builder.remove_tensor(t)
        graph._touch(keeps_order=True)
    return len(unused)


def _rewire(readers: "Iterable[Op]", old: "Tensor", weight: "Tensor") -> None:
    """Every input slot of `readers` that reads `old` reads `weight` instead."""
    for c in readers:
        for i, t in enumerate(c._inputs):
            if t is old:
                unlink_input(c, i)
                link_input(c, i, weight)

__all__ = ["remove_unused_weights", "replace_op_by_weights", "replace_ops_by_weights"]
