"""The prepare stage: fix input shapes, cut at output ops, fold constants, drop dead ops.

Runs on the graph in place, before any subgraph exists; `xgraph.compile` hands it a copy
(`copy_graph`) so the caller's graph is never changed. Option problems (unknown input or op
names, conflicting dims) are found before anything is modified.

Constant folding evaluates each op whose inputs are all weights with the ONNX reference
evaluator (one node at a time, in topological order, so chains fold), and replaces its outputs
by weights of the same names. It skips nondeterministic ops (Random*, Bernoulli, Multinomial),
ops with nested graphs, ops producing graph outputs or tensors a nested graph reads by name, and
results larger than `MAX_FOLD_BYTES` or of a size not known before evaluating (`fold_sizes`).
A `Where` whose condition folded to all true (or all false) becomes the input it selects
(`select_fold`: a decoder's causal mask for one new token).
"""
from __future__ import annotations

import difflib
from typing import Any, Mapping, Sequence

import numpy as np

from xgraph.errors import OptionError
from xgraph.ir import Graph, Op, Tensor
from xgraph.ir.builder import remove_unused_weights, replace_op_by_weights
from xgraph.compiler.fold_pass import fold_pass
from xgraph.compiler.options import CompileOptions
from xgraph.compiler.select_fold import fold_constant_selects
from xgraph.compiler.shape_fixpoint import resolve_shapes

#: Results larger than this stay computed at run time rather than becoming weights.
MAX_FOLD_BYTES = 64 << 20


# ------------------------------------------------------------------------------------ copy

def copy_graph(graph: Graph, drop_annotations: Sequence[str] = ()) -> Graph:
    """A deep copy for compiling (`Graph.copy`): everything but the subgraph tree, which compiling
    builds anew; op annotations named in `drop_annotations` (an earlier compile's) are left out."""
    return graph.copy(drop_annotations=drop_annotations)


# ---------------------------------------------------------------------------- nested graphs

def outer_scope_inputs(op: Op) -> list[Tensor]:
    """Tensors of the graph that `op`'s nested graphs (If/Loop/Scan bodies) read by name: hidden inputs."""
    return op.get_implicit_input_tensors()


def _read_by_nested_graphs(graph: Graph) -> set[Tensor]:
    return graph.index().nested_read_tensors()


# ----------------------------------------------------------------------------- input shape

def _input_symbols(graph: Graph) -> set[str]:
    return {d for t in graph.get_input_tensors() if t.shape is not None for d in t.shape if isinstance(d, str)}


def input_shape_changes(graph: Graph, shapes: Mapping[str, Sequence[int]]) -> tuple[dict[str, tuple], dict[str, int]]:
    """({input name: new shape}, {symbolic dim: value}) for ATC-style input shapes; OptionError if they do not fit.

    A name that is no input but a symbolic dim of the inputs (`past:16`) with one value fixes that dim."""
    inputs = {t.name: t for t in graph.get_input_tensors()}
    new_shapes: dict[str, tuple] = {}
    symbols: dict[str, int] = {}
    for name, dims in shapes.items():
        t = inputs.get(name)
        if t is None and len(dims) == 1 and name in _input_symbols(graph):
            if dims[0] != -1:
                if symbols.get(name, dims[0]) != dims[0]:
                    raise OptionError(f"option 'input_shape' gives symbolic dim {name!r} two values "
                                      f"({symbols[name]} and {dims[0]}); inputs sharing a dim need the same value")
                symbols[name] = dims[0]
            continue
        if t is None:
            names = sorted(_input_symbols(graph))
            dims_hint = f"; their symbolic dims (one value or range each): {', '.join(names)}" if names else ""
            raise OptionError(f"option 'input_shape' names {name!r}, which is not a graph input; "
                              f"the inputs are: {', '.join(inputs) or 'none'}{dims_hint}")
        old = t.shape
        if old is not None and len(old) != len(dims):
            raise OptionError(f"option 'input_shape' gives {name!r} {len(dims)} dims, but the model declares rank "
                              f"{len(old)} {_fmt_shape(old)}; give one value per dim (-1 keeps a dim)")
        shape = []
        for i, d in enumerate(dims):
            before = None if old is None else old[i]
            if d == -1:
                shape.append(before)
                continue
            if isinstance(before, int) and before != d:
                raise OptionError(f"option 'input_shape' sets dim {i} of {name!r} to {d}, but the model fixes it at "
                                  f"{before}; use {before} or -1")
            if isinstance(before, str):
                if symbols.get(before, d) != d:
                    raise OptionError(f"option 'input_shape' gives symbolic dim {before!r} two values "
                                      f"({symbols[before]} and {d}); inputs sharing a dim need the same value")
                symbols[before] = d
            shape.append(d)
        new_shapes[name] = tuple(shape)
    return new_shapes, symbols


def symbolic_dim_ranges(graph: Graph, ranges: Mapping[str, Mapping[int, tuple[int, int]]]) -> dict[str, list[int]]:
    """{symbolic dim: [low, high]} from input_shape's ranges (by input and dim, or by the dim's own name);
    a ranged dim the model left unnamed is named `<input>_<index>`. OptionError when the model fixes it."""
    inputs = {t.name: t for t in graph.get_input_tensors()}
    out: dict[str, list[int]] = {}
    for name, dims in ranges.items():
        t = inputs.get(name)
        for i, (low, high) in dims.items():
            if t is None:
                symbol = name  # `past:0..2048`: input_shape_changes checked that it is a dim name of the inputs
            elif t.shape is None or i >= len(t.shape):
                raise OptionError(f"option 'input_shape' gives dim {i} of {name!r} a range, but its rank is "
                                  f"{'unknown' if t.shape is None else len(t.shape)}; give the input's full shape")
            elif isinstance(t.shape[i], int):
                raise OptionError(f"option 'input_shape' gives dim {i} of {name!r} the range {low}..{high}, but the "
                                  f"model fixes it at {t.shape[i]}; use {t.shape[i]} or -1")
            else:
                symbol = t.shape[i] if isinstance(t.shape[i], str) else f"{name}_{i}"
            if out.get(symbol, [low, high]) != [low, high]:
                raise OptionError(f"option 'input_shape' gives symbolic dim {symbol!r} two ranges "
                                  f"({out[symbol][0]}..{out[symbol][1]} and {low}..{high})")
            out[symbol] = [low, high]
    return out


def _name_ranged_dims(graph: Graph, ranges: Mapping[str, Mapping[int, tuple[int, int]]]) -> None:
    """Give the unnamed dims that have a range the name `symbolic_dim_ranges` uses for them."""
    for t in graph.get_input_tensors():
        dims = ranges.get(t.name, {})
        if t.shape is not None and any(t.shape[i] is None for i in dims if i < len(t.shape)):
            t.shape = tuple(f"{t.name}_{i}" if i in dims and d is None else d for i, d in enumerate(t.shape))


def apply_input_shape(graph: Graph, shapes: Mapping[str, Sequence[int]]) -> None:
    """Fix input dims (and the symbolic dims they name, everywhere), then re-infer shapes."""
    new_shapes, symbols = input_shape_changes(graph, shapes)
    if not new_shapes and not symbols:
        return
    for name, shape in new_shapes.items():
        graph.get_tensor(name).shape = shape
    if symbols:
        for t in graph.get_tensors():
            if not t.is_const and t.shape is not None and any(isinstance(d, str) and d in symbols for d in t.shape):
                t.shape = tuple(symbols.get(d, d) if isinstance(d, str) else d for d in t.shape)
    graph.infer_shapes()


def _fmt_shape(shape: Sequence) -> str:
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


# ------------------------------------------------------------------------------ output cut

def output_cut(graph: Graph, names: Sequence[str]) -> tuple[list[Op], set[Op]]:
    """(the named ops, every op they depend on); OptionError naming an unknown op."""
    targets = []
    for name in names:
        if not graph.has_op(name):
            close = difflib.get_close_matches(name, [op.name for op in graph.get_ops()], 3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise OptionError(f"option 'output_ops' names {name!r}, which is not an op of graph {graph.name!r}{hint}")
        targets.append(graph.get_op(name))
    keep: set[Op] = set()
    stack = list(targets)
    while stack:
        op = stack.pop()
        if op not in keep:
            keep.add(op)
            stack.extend(op.get_input_ops())
            stack.extend(t.producer for t in outer_scope_inputs(op) if t.producer is not None)
    return targets, keep


def cut_at_output_ops(graph: Graph, names: Sequence[str]) -> int:
    """Keep only the named ops and what they depend on; their outputs become the graph outputs. Returns ops removed."""
    targets, keep = output_cut(graph, names)
    graph.set_outputs([t for op in targets for t in op.get_output_tensors() if not _unused_placeholder(t)])
    removed = 0
    for op in reversed(graph.toposort()):
        if op not in keep:
            graph.remove_op(op)
            removed += 1
    _remove_unused_weights(graph)
    return removed


def _unused_placeholder(t: Tensor) -> bool:
    return ":unused:" in t.name and not t.consumers


# ------------------------------------------------------------------------- constant folding

def replace_by_weights(graph: Graph, op: Op, arrays: list[np.ndarray]) -> None:
    """Turn `op`'s outputs into weights of the same names, one array per output (one IR edit:
    `xgraph.ir.builder.replace_op_by_weights`)."""
    replace_op_by_weights(graph, op, arrays)


def fold_constants(graph: Graph, max_bytes: int = MAX_FOLD_BYTES, keep_unread: bool = True,
                   queries: "Sequence[tuple[Op, list[np.ndarray]]]" = ()) -> int:
    """Evaluate ops whose inputs are all weights and make their results weights, then drop the
    `Where`s a weight condition decides (`select_fold`). Returns ops folded or dropped.

    One worklist pass in topological order, the IR edited once at the end (`fold_pass`).
    `keep_unread=False` leaves out the weights only folded ops read (for a caller that removes
    unread weights next, as the stage does): the graph is then what folding and
    `remove_unused_weights` leave. `queries`: the foldable shape queries
    (`shape_fixpoint.foldable_shape_queries`) to replace in the same edit, as if they had been replaced
    first; not counted in the result."""
    keep = set(graph.get_output_tensors()) | _read_by_nested_graphs(graph)  # tensors that must stay op outputs
    folded = fold_pass(graph, keep, max_bytes, keep_unread, queries)
    return folded + fold_constant_selects(graph, keep)


def _fold_for_stage(graph: Graph, queries: "Sequence[tuple[Op, list[np.ndarray]]]" = ()) -> int:
    """`fold_constants` as the stage runs it: dead-op removal (and with it unread weights) comes next."""
    return fold_constants(graph, keep_unread=False, queries=queries)


# ----------------------------------------------------------------------------- dead ops

def remove_dead_ops(graph: Graph) -> int:
    """Remove ops whose results nobody reads (repeatedly), then unused weights. Returns ops removed.

    A tensor a nested graph (If/Loop/Scan body) reads by name counts as read. The ops unread from
    the start go first, then each removed op's producers once nothing reads them any more (the
    same ops a sweep in reverse topological order removes)."""
    used = set(graph.get_output_tensors()) | _read_by_nested_graphs(graph)
    ops = graph.get_ops()
    stack = [ops[i] for i in reversed(graph.index().unread_positions(ops, used))]
    gone: set[Op] = set(stack)
    while stack:
        op = stack.pop()
        producers = {t.producer: None for t in op.get_input_tensors() if t is not None and t.producer is not None}
        graph.remove_op(op)
        for producer in producers:
            if producer not in gone and not any(o.consumers or o in used for o in producer.get_output_tensors()):
                gone.add(producer)
                stack.append(producer)
    removed = len(gone)
    _remove_unused_weights(graph)
    return removed


def _remove_unused_weights(graph: Graph) -> int:
    return remove_unused_weights(graph)


# ---------------------------------------------------------------------------------- stage

def prepare(graph: Graph, options: CompileOptions) -> dict[str, Any]:
    """Run the whole stage in place; returns what it did (for the compile report)."""
    new_shapes, _ = input_shape_changes(graph, options.input_shape)
    ranges = symbolic_dim_ranges(graph, options.input_shape_ranges)
    if options.output_ops:
        output_cut(graph, options.output_ops)
    summary: dict[str, Any] = {"input_shape": {k: list(v) for k, v in new_shapes.items()}}
    if ranges:
        summary["dim_ranges"] = ranges
    _name_ranged_dims(graph, options.input_shape_ranges)
    apply_input_shape(graph, options.input_shape)
    summary["cut_ops"] = cut_at_output_ops(graph, options.output_ops) if options.output_ops else 0
    fixpoint = resolve_shapes(graph, _fold_for_stage, remove_dead_ops, fold_with_queries=_fold_for_stage)  # infer <-> fold
    summary["folded_ops"] = fixpoint["folded_ops"] + fixpoint["shape_ops"]
    summary["dead_ops"] = fixpoint["dead_ops"]
    return summary


__all__ = ["MAX_FOLD_BYTES", "apply_input_shape", "copy_graph", "cut_at_output_ops", "fold_constants",
           "input_shape_changes", "outer_scope_inputs", "output_cut", "prepare", "remove_dead_ops",
           "replace_by_weights", "symbolic_dim_ranges"]
