"""One constant-folding pass: a worklist in topological order, the results kept in memory, the IR
edited once at the end.

Ops are tried in topological order, as one sweep would, but only those whose inputs are all
weights: the ones that were so from the start, and the readers of each fold's results as they
become so (a heap of topological positions), so the ops no fold can reach are looked at once.
A fold's results are not made weights at once: they are kept as the values of the tensors they
replace (`pending`), which later folds read, and every fold of the pass is applied in one edit
(`xgraph.ir.weight_edits.replace_ops_by_weights`), which leaves the graph as folding one op at a
time would. A transformer's shape arithmetic (`Shape -> Gather -> Unsqueeze -> Concat`) then
costs one weight per `Concat` a `Reshape` reads instead of a weight per op of the chain.

Folds of one kind on the same small values are evaluated once (`fold_memo.FoldKeys`).
"""
from __future__ import annotations

import heapq

import numpy as np

from xgraph.ir import Graph, Tensor
from xgraph.ir.op_facts import known_values, reads_only_values
from xgraph.ir.tensor import frozen
from xgraph.ir.weight_edits import replace_ops_by_weights, weight_fed_positions
from xgraph.compiler.fold_eval import fold_values, foldable_reading_values
from xgraph.compiler.fold_memo import FoldKeys

_UNSEEN = object()


def fold_pass(graph: Graph, keep: "set[Tensor]", max_bytes: int, keep_unread: bool = True) -> int:
    """Fold every op that can fold (`fold_eval.foldable`, `fold_eval.fold_values`); returns ops folded.

    `keep`: tensors that must stay op outputs. `keep_unread=False` does not make the weights that
    only folded ops read (they would be left unread: for a caller that drops unread weights next)."""
    ops = graph.get_ops()
    ready = weight_fed_positions(ops)
    if not ready:
        return 0  # nothing to fold: no order needed
    order = graph.toposort()
    if order != ops:  # the table order is mostly topological already (compared object by object, in C)
        ready = weight_fed_positions(order)  # ascending: already a heap
    queued = set(ready)
    position: "dict | None" = None
    pending: dict[Tensor, np.ndarray] = {}  # outputs of folded ops -> their values (read-only)
    folds: list = []
    keys = FoldKeys()
    memo: dict = {}  # fold key -> (arrays, read-only views), or None when that fold is refused
    kernels: dict = {}  # one reference evaluator per kind of node, for this pass
    pop, push = heapq.heappop, heapq.heappush
    key_of = keys.key
    while ready:
        op = order[pop(ready)]
        values = known_values(op, pending)
        if values is None or not foldable_reading_values(op, keep):
            continue
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
        if position is None:
            position = dict(zip(order, range(len(order))))
        for t, view in zip(op.get_output_tensors(), entry[1]):
            readers = t.consumers
            if not readers:
                continue
            pending[t] = view
            for reader in readers:
                i = position[reader]
                if i not in queued and reads_only_values(reader, pending):
                    queued.add(i)
                    push(ready, i)
    replace_ops_by_weights(graph, folds, keep_unread)
    return len(folds)


__all__ = ["fold_pass"]
