"""Liveness over an execution plan: when each value dies, and which steps share a reused buffer.

Release. Each step lists the slots whose last reader it is (a value written and never read
dies at once), so a run drops intermediates as soon as they are dead and peak memory stays
close to the live set. Slot 0, the weights and the outputs are never released.

Buffers. A step with a static output `layout` (set by the fusion pass) may write into an
array kept across runs. Which steps may share one array follows from the plan alone, not
from reference counts: a buffer is busy from the step that writes it until the last read of
any value that may be a view of it. Kernels may return views of their inputs (Reshape,
Identity, ...), so every value a step makes from a buffered value is taken to be a view of
that buffer too (conservative: it only keeps buffers busy longer), except the outputs of
xgraph's own kernels for the op types in `FRESH_OUTPUT_OPS`, which always make new arrays. Steps of the same layout
whose busy ranges do not overlap get the same buffer (greedy interval colouring, O(steps)).
A buffer an output may be a view of "escapes": the backend copies such an output out of it
at the end of a run, so nothing a caller holds is ever overwritten.

    >>> plan = assign_liveness(plan)                       # doctest: +SKIP
    >>> [s.release for s in plan.steps], plan.buffers      # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import replace

from xgraph.kernels.resolution import NUMPY
from xgraph.runners.plan import ExecutionPlan, Step

#: Op types whose built-in kernels always return new arrays, never a view of an input
#: (np.concatenate, matrix products, reductions): their outputs keep no buffer busy.
FRESH_OUTPUT_OPS = frozenset({"Concat", "Gemm", "GlobalAveragePool", "GlobalMaxPool"})


def _fresh(step: Step) -> bool:
    return step.choice.source == NUMPY and step.op.type in FRESH_OUTPUT_OPS and step.op.domain == ""


def assign_liveness(plan: ExecutionPlan) -> ExecutionPlan:
    """`plan` with every step's `release` and `buffer` set, and the plan's `buffers` listed."""
    steps = plan.steps
    last_reader: dict[int, int] = {}
    for i, step in enumerate(steps):
        for s in step.inputs:
            last_reader[s] = i
        for s in step.outputs:
            last_reader.setdefault(s, i)  # written and never read: dead right away
    dying: dict[int, list[int]] = {}
    for s, i in last_reader.items():
        if s not in plan.keep:
            dying.setdefault(i, []).append(s)
    end = len(steps)
    outputs = set(plan.output_slots)
    # which buffered steps' arrays each value may be a view of
    views: dict[int, frozenset[int]] = {}
    busy_until: dict[int, int] = {}  # buffered step index -> last step reading a view of its array
    escapes: set[int] = set()
    for i, step in enumerate(steps):
        if step.layout is not None:
            made = frozenset((i,))
        elif _fresh(step):
            continue
        else:
            made = frozenset().union(*(views.get(s, frozenset()) for s in step.inputs))
        for s in step.outputs:
            if made:
                views[s] = made
    for s, owners in views.items():
        until = end if s in outputs else last_reader.get(s, end)
        for owner in owners:
            busy_until[owner] = max(busy_until.get(owner, owner), until)
            if s in outputs:
                escapes.add(owner)
    buffers: list[tuple] = []
    free_after: list[int] = []  # per buffer: the last step that still uses it
    escaping: set[int] = set()
    new_steps = []
    for i, step in enumerate(steps):
        buffer = None
        if step.layout is not None:
            buffer = next((b for b, layout in enumerate(buffers)
                           if layout == step.layout and free_after[b] < i), None)
            if buffer is None:
                buffer = len(buffers)
                buffers.append(step.layout)
                free_after.append(-1)
            free_after[buffer] = busy_until.get(i, i)
            if i in escapes:
                escaping.add(buffer)
        new_steps.append(replace(step, release=tuple(dying.get(i, ())), buffer=buffer))
    return plan.with_steps(new_steps, buffers=tuple(buffers), escaping_buffers=frozenset(escaping))


__all__ = ["assign_liveness"]
