"""One constant-folding pass: a worklist in topological order, the results kept in memory, the IR
edited once at the end.

Ops are tried in topological order, as one sweep would, but only those whose inputs are all
weights: the ones that were so from the start, and the readers of each fold's results as they
become so (a heap of numbers rising along the order: creation numbers when the order is the
table's, else positions), so the ops no fold can reach are looked at once.
A fold's results are not made weights at once: they are kept as the values of the tensors they
replace (`pending`), which later folds read, and every fold of the pass is applied in one edit
(`xgraph.ir.builder.replace_ops_by_weights`), which leaves the graph as folding one op at a
time would. For the stage, which drops unread weights next, a transformer's shape arithmetic
(`Shape -> Gather -> Unsqueeze -> Concat`) then costs one weight per `Concat` a `Reshape` reads
instead of a weight per op of the chain.

Folds of one kind on the same small values are evaluated once (`fold_memo.FoldKeys`).
"""
from __future__ import annotations

import heapq
from typing import Sequence

import numpy as np

from xgraph.ir import Graph, Op, Tensor
from xgraph.ir.tensor import frozen
from xgraph.ir.builder import replace_ops_by_weights
from xgraph.compiler.fold_eval import fold_values, foldable_reading_values, refused_type
from xgraph.compiler.fold_memo import FoldKeys

_UNSEEN = object()


def fold_pass(graph: Graph, keep: "set[Tensor]", max_bytes: int, keep_unread: bool = True,
              seeds: "Sequence[tuple[Op, list[np.ndarray]]]" = ()) -> int:
    """Fold every op that can fold (`fold_eval.foldable`, `fold_eval.fold_values`); returns ops folded.

    `keep`: tensors that must stay op outputs. `keep_unread=False` does not make the weights that
    only folded ops read (they would be left unread: for a caller that drops unread weights next).
    `seeds`: (op, arrays) replaced first, in the same edit, as if `replace_op_by_weights` had been
    called for each before this pass (the shape queries of `shape_fixpoint`); only for a graph
    whose order survives removals (`GraphIndex.table_order_is_topological`), so that the order
    taken here is the one the pass would take after them."""
    ops = graph.get_ops()
    index = graph.index()
    pending: dict[Tensor, np.ndarray] = {}  # outputs of folded ops -> their values (read-only)
    for op, arrays in seeds:
        for t, a in zip(op.get_output_tensors(), arrays):
            if t.consumers:
                pending[t] = frozen(a)
    if seeds:
        seeded = {op for op, _ in seeds}
        ready = index.fed_positions(ops, pending, seeded)
    else:
        ready = index.fed_positions(ops)
    if not ready:
        if seeds:
            replace_ops_by_weights(graph, seeds, keep_unread)
        return 0  # nothing to fold: no order needed
    order = index.toposort()
    if order != ops:  # the table order is mostly topological already (compared object by object, in C)
        ready = index.fed_positions(order, pending, seeded) if seeds else index.fed_positions(order)
    # the heap holds numbers rising along `order`: creation numbers when the order is the table's
    # (no position map of every op to build), else positions
    number = index.creation_number if index.table_order_is_topological() else index.positions().__getitem__
    at = {number(order[i]): order[i] for i in ready}  # number -> op, for the ops queued
    ready = list(at)  # ascending: already a heap
    queued = set(ready)
    if seeds:  # a seed reading what this pass folds was replaced before it: never tried again
        queued.update(map(number, seeded))
    folds: list = list(seeds)
    keys = FoldKeys(index)
    memo: dict = {}  # fold key -> (arrays, read-only views), or None when that fold is refused
    kernels: dict = {}  # one reference evaluator per kind of node, for this pass
    pop, push = heapq.heappop, heapq.heappush
    key_of = keys.key
    refused: dict[str, bool] = {}  # op type -> `fold_eval.refused_type`
    nested = index.has_nested_graphs()
    known_values, reads_only_values = index.known_values, index.reads_only_values
    while ready:
        op = at[pop(ready)]
        values = known_values(op, pending)
        if values is None:
            continue
        kind = op.type
        no = refused.get(kind)
        if no is None:
            no = refused[kind] = refused_type(kind)
        outputs = op.get_output_tensors()
        if no or (nested and not foldable_reading_values(op, keep)) or not keep.isdisjoint(outputs):
            continue  # `fold_eval.foldable`, asked in parts
        key = key_of(op, values)
        entry = memo.get(key, _UNSEEN) if key is not None else _UNSEEN
        if entry is _UNSEEN:
            arrays = fold_values(op, values, kernels, max_bytes)
            entry = None if arrays is None else (arrays, [frozen(a) for a in arrays])
            if key is not None:
                memo[key] = entry
        if entry is None:
            continue
        folds.append((op, entry[0]))
        for t, view in zip(outputs, entry[1]):
            readers = t.consumers
            if not readers:
                continue
            pending[t] = view
            for reader in readers:
                i = number(reader)
                if i not in queued and reads_only_values(reader, pending):
                    queued.add(i)
                    at[i] = reader
                    push(ready, i)
    replace_ops_by_weights(graph, folds, keep_unread)
    return len(folds) - len(seeds)


__all__ = ["fold_pass"]
