"""Shapes to a fixpoint: alternate shape inference and constant folding until nothing changes.

Once every input shape is fixed, the shape arithmetic of an exported transformer or CNN
(`Shape -> Gather -> Unsqueeze -> Concat -> Reshape`, `Size`, `Range` over a sequence length,
mask `Slice`s) is constant, but one folding pass cannot see it: `Shape` reads a tensor computed at
run time, and the `Reshape` its result feeds has an unknown output shape until the shape tensor is
a weight. This loop does what onnx-simplifier does:

1. `Shape` / `Size` of a tensor whose inferred shape is fully static becomes a weight
   (`fold_shape_queries`), since its value does not depend on the data;
2. ops whose inputs are all weights fold (`prepare.fold_constants`, with its memory bounds from
   `fold_sizes`), and ops nobody reads any more are removed;
3. shapes are inferred again, with the symbolic dims inference invented (`unk__17`) cleared
   first so that the newly constant shape tensors can fix them;

and repeats until a round folds nothing or every op output has a static shape (at most
`MAX_ROUNDS`). Tensors inference cannot type again keep the shape they had. A fully static graph
costs one folding pass and no extra inference (inference exports the graph, weights included).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xgraph.ir import Graph, Op, Tensor
from xgraph.ir.builder import replace_ops_by_weights
from xgraph.compiler.symbolic_shapes import propagate

#: `prepare.replace_by_weights`: turn an op's outputs into weights of the same names.
Replace = Callable[[Graph, Op, "list[np.ndarray]"], None]
#: One folding pass (`prepare.fold_constants`) or dead-op removal: returns ops changed.
Step = Callable[[Graph], int]

#: The stage's fold given the foldable shape queries (op, [value]) to replace in the same edit: returns ops
#: folded besides the queries.
FoldWithQueries = Callable[[Graph, "list[tuple[Op, list[np.ndarray]]]"], int]

#: Rounds of (fold, infer); each round that changes something removes at least one op, so this
#: only bounds pathological graphs.
MAX_ROUNDS = 16

_QUERIES = frozenset({"Shape", "Size"})


def _static(t: Tensor | None) -> bool:
    return t is not None and t.shape is not None and all(isinstance(d, int) and d >= 0 for d in t.shape)


def _query_value(op: Op, pending: "dict[Tensor, np.ndarray] | None" = None) -> np.ndarray | None:
    """The value of a Shape/Size op whose input shape is static (None when it is not); an input in
    `pending` (a query folded earlier in the same pass) has the shape of its value."""
    inputs = op.get_input_tensors()
    if op.domain not in ("", "ai.onnx") or len(inputs) != 1:
        return None
    value = pending.get(inputs[0]) if pending else None
    if value is not None:
        shape = [int(d) for d in value.shape]
    elif not _static(inputs[0]):
        return None
    else:
        shape = [int(d) for d in inputs[0].shape]
    if op.type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    rank = len(shape)
    start = op.get_attr("start") if op.has_attr("start") else 0
    end = op.get_attr("end") if op.has_attr("end") else rank
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return np.array(shape[start:end], dtype=np.int64)


def _known_value(op: Op, known: "dict[Tensor, list]") -> np.ndarray | None:
    """The value symbolic propagation found for `op`'s only output, when every element is an int."""
    outputs = op.get_output_tensors()
    if len(outputs) != 1 or outputs[0] not in known or op.type in _NOT_FOLDED:
        return None
    elements, t = known[outputs[0]], outputs[0]
    if not all(isinstance(v, int) for v in elements) or t.shape is None or len(t.shape) > 1 or t.dtype is None:
        return None
    if len(t.shape) == 0 and len(elements) != 1 or len(t.shape) == 1 and t.shape[0] != len(elements):
        return None
    return np.array(elements, dtype=t.dtype).reshape(t.shape)


#: ops whose known value is left to constant folding (their inputs are weights already)
_NOT_FOLDED = frozenset({"Constant"})


def foldable_shape_queries(graph: Graph,
                           known: "dict[Tensor, list] | None" = None) -> "list[tuple[Op, list[np.ndarray]]]":
    """(op, [value]) for each `Shape`/`Size` of a statically shaped tensor, and with `known` (the values
    `symbolic_shapes.propagate` found) each op whose integer value is fully known, in topological
    order: what `fold_shape_queries` replaces (a query of a query's result reads its value's shape). Pure."""
    queries = [op for op in graph.get_ops() if op.type in _QUERIES]
    valued = [op for op in graph.get_ops() if _known_value(op, known) is not None] if known else []
    if not valued and not any(_query_value(op) is not None for op in queries):
        return []  # nothing to fold: no need to order the graph
    keep = set(graph.get_output_tensors()) | graph.index().nested_read_tensors()
    if valued:
        chosen = set(valued) | set(queries)
        walk = [op for op in graph.toposort() if op in chosen]
    else:
        walk = queries if graph.index().table_order_is_topological() else \
            [op for op in graph.toposort() if op.type in _QUERIES]
    replacements: list = []
    pending: dict[Tensor, np.ndarray] = {}
    for op in walk:
        if not keep.isdisjoint(op.get_output_tensors()):
            continue
        value = _query_value(op, pending) if op.type in _QUERIES else None
        if value is None and known:
            value = _known_value(op, known)
        if value is None:
            continue
        pending[op.get_output_tensor()] = value
        replacements.append((op, [value]))
    return replacements


def fold_shape_queries(graph: Graph, replace: "Replace | None" = None,
                       known: "dict[Tensor, list] | None" = None) -> int:
    """Turn `Shape`/`Size` of statically shaped tensors (and, with `known`, shape arithmetic of known
    value) into weights. Returns ops folded.

    With `replace` each op is replaced by that call, in topological order; without, all of them in
    one edit (`replace_ops_by_weights`), which leaves the graph those calls would."""
    replacements = foldable_shape_queries(graph, known)
    if replace is not None:
        for op, value in replacements:
            replace(graph, op, value)
    elif replacements:
        replace_ops_by_weights(graph, replacements)
    return len(replacements)


def _reinfer(graph: Graph) -> None:
    """Infer shapes again with invented symbolic dims cleared; a tensor keeps its old shape unless the new one fixes more dims."""
    cleared = {}
    for op in graph.get_ops():
        for t in op.get_output_tensors():
            if t.shape is not None and not _static(t):
                cleared[t] = t.shape
                t.shape = None
    graph.infer_shapes()
    for t, old in cleared.items():
        new = t.shape
        if new is None or len(new) != len(old) or _known(new) <= _known(old):
            t.shape = old  # not better: keep the model's own dim names rather than invented ones


def refine_shapes(graph: Graph) -> "dict[Tensor, list]":
    """Write the shapes symbolic propagation improves (`symbolic_shapes`); returns the integer values it knows."""
    changed, values = propagate(graph)
    for t, shape in changed.items():
        t.shape = shape
    return values


def _known(shape) -> int:
    return sum(isinstance(d, int) for d in shape)


def _has_dynamic_outputs(graph: Graph) -> bool:
    """True when some op output's shape is not fully static (asked once per distinct shape)."""
    shapes = graph.index().distinct_output_shapes(graph.get_ops())
    return None in shapes or not all(all(isinstance(d, int) and d >= 0 for d in shape) for shape in shapes)


def resolve_shapes(graph: Graph, fold: Step, remove_dead: Step, replace: "Replace | None" = None, *,
                   fold_with_queries: "FoldWithQueries | None" = None) -> dict[str, Any]:
    """Fold and infer until nothing changes; returns {"rounds", "shape_ops", "folded_ops", "dead_ops"}.

    `fold`, `remove_dead` and `replace` are the prepare stage's own steps (passed in, so this module
    does not import the stage that calls it); without `replace` the shape queries of a round are
    replaced in one edit. With `fold_with_queries` (and no `replace`) a round whose topological order
    is the table order hands it the foldable queries (`foldable_shape_queries`) to replace within its
    folding edit, instead of replacing them first: the same graph, with one edit less."""
    summary = {"rounds": 0, "shape_ops": 0, "folded_ops": 0, "dead_ops": 0}
    dynamic: "bool | None" = None  # whether some output shape is not static, when known for the graph as it is
    for _ in range(MAX_ROUNDS):
        dynamic = _has_dynamic_outputs(graph)
        known = refine_shapes(graph) if dynamic else None
        if fold_with_queries is not None and replace is None:
            # ordered (and the order's kind known) only when there are queries
            replacements = foldable_shape_queries(graph, known)
            queries = len(replacements)
            if replacements and not graph.index().table_order_is_topological():
                replace_ops_by_weights(graph, replacements)  # removing them may change the order: replaced first
                replacements = []
            folded = fold_with_queries(graph, replacements)
        else:
            queries = fold_shape_queries(graph, replace, known)
            folded = fold(graph)
        dead = remove_dead(graph)
        summary["rounds"] += 1
        summary["shape_ops"] += queries
        summary["folded_ops"] += folded
        summary["dead_ops"] += dead
        if not (queries or folded):  # nothing changed: inference has nothing to add
            if dynamic:  # refining may have made them static: asked again below (static shapes stay static:
                dynamic = None  # refining did not run, and removing dead ops leaves the other ops' shapes)
            break
        dynamic = _has_dynamic_outputs(graph)
        if not dynamic:
            break  # every shape is known: inference has nothing to add (and would copy weights)
        _reinfer(graph)
        dynamic = None
    if dynamic is None:
        dynamic = _has_dynamic_outputs(graph)
    if dynamic:
        refine_shapes(graph)  # what the last round's inference found, related to the inputs' dims again
    return summary


__all__ = ["MAX_ROUNDS", "fold_shape_queries", "foldable_shape_queries", "refine_shapes", "resolve_shapes"]
