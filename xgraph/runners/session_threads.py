"""How many threads one onnxruntime session for a subgraph gets: one for small work, else a pool.

A session's intra-op pool pays off when an op has enough work to split. A subgraph that does
little per run (a KV-cache decoding step: one token through a layer's projections, or the
attention over the cache) gains nothing from it and pays for it on every run: with spinning
off (several sessions share the cores), a pool thread woken for a split op costs a futex
wake-up and a scheduling delay, more than the op. On the generate sample's six subgraphs, one
thread each made the chain of sessions 25% faster (benchmarks/generate.py).

The work is estimated from the declared shapes, before any session exists: 2 FLOPs per
multiply-add for MatMul/Gemm/Conv, one per output element for every other op. A dim unknown at
compile time (a dynamic batch or sequence) is assumed to be `ASSUMED_DYNAMIC_DIM`, so a dynamic
model keeps its pool unless its ops are small whatever that dim is; an unknown rank counts as large.

    >>> threads_for_flops(10_000), threads_for_flops(10 ** 9)
    (1, 2)
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from xgraph.ir import Op, Subgraph, Tensor

#: Threads of a session whose subgraph has enough work (devices run side by side on the host).
POOL_THREADS = 2
#: Below this many FLOPs per run a session runs its ops on the calling thread only.
SMALL_WORK_FLOPS = 2_000_000
#: What a dim unknown at compile time is assumed to be (a batch x sequence sized guess).
ASSUMED_DYNAMIC_DIM = 64

_MULTIPLY_ADD = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger", "ConvInteger"})


def _elements(t: "Tensor | None") -> int | None:
    if t is None or t.shape is None:
        return None
    return math.prod(d if isinstance(d, int) and d >= 0 else ASSUMED_DYNAMIC_DIM for d in t.shape)


def _reduction_length(op: "Op") -> int:
    """The multiply-adds per output element of a dense op (1 when its shapes do not say)."""
    inputs = op.get_input_tensors()
    if op.type in ("Conv", "ConvInteger", "ConvTranspose") and len(inputs) > 1 and inputs[1] is not None \
            and inputs[1].shape is not None:
        return max(_elements_of(inputs[1].shape[1:]), 1)
    a = inputs[0] if inputs else None
    if a is None or not a.shape:
        return 1
    transposed = op.type == "Gemm" and op.has_attr("transA") and op.get_attr("transA")
    d = a.shape[0] if transposed else a.shape[-1]
    return d if isinstance(d, int) and d > 0 else ASSUMED_DYNAMIC_DIM


def _elements_of(dims) -> int:
    return math.prod(d if isinstance(d, int) and d >= 0 else ASSUMED_DYNAMIC_DIM for d in dims)


def estimated_flops(subgraph: "Subgraph") -> float:
    """FLOPs of one run of the subgraph, from its declared shapes (inf when a rank is unknown)."""
    total = 0
    for op in subgraph.get_ops():
        outputs = op.get_output_tensors()
        n = _elements(outputs[0]) if outputs else 0
        if n is None:
            return math.inf
        total += 2 * n * _reduction_length(op) if op.type in _MULTIPLY_ADD else n
    return total


def threads_for_flops(flops: float) -> int:
    """1 for small work, else POOL_THREADS."""
    return 1 if flops < SMALL_WORK_FLOPS else POOL_THREADS


def session_threads(subgraph: "Subgraph") -> int:
    """The intra-op threads of the subgraph's onnxruntime session."""
    return threads_for_flops(estimated_flops(subgraph))


__all__ = ["ASSUMED_DYNAMIC_DIM", "POOL_THREADS", "SMALL_WORK_FLOPS", "estimated_flops", "session_threads",
           "threads_for_flops"]
