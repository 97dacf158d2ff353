"""Int8 error per unit: each integer tensor recomputed from the oracle's own integer inputs.

Compared over a whole run (`xgraph.runners.int8_numerics.compare`), a one-step difference in an
early tensor is carried into every later one and grows where a float op between two
quantizers scales it (QDQ ResNet50's BatchNormalization, kept in float by quantize_static
without pre-processing, doubles it). That accumulated error says how far two engines drift
apart, not whether either computes a unit wrongly. `unit_errors` measures the latter:

    for each integer tensor T the oracle run shows,
        cut the model from the integer tensors (or graph inputs) T is computed from, to T
        run xgraph on that cut, fed the oracle's values of those integer tensors
        compare with the oracle's T (in steps of T)

So each unit (DQ -> op -> Q, or a QOperator op) sees exactly the integers the oracle's unit saw,
and the error is that unit's alone. The cut is onnx's `onnx.utils.Extractor`; `compile` is
passed in (usually `xgraph.compile`) because the runtime does not import the compiler.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import onnx
import onnx.utils

from xgraph.runners.int8_numerics import Probe, tap_name


def _sources(model: onnx.ModelProto, tensor: str, known: set[str]) -> list[str]:
    """The tensors `tensor` is computed from: known (oracle-shown) integer tensors and graph inputs, walking back.

    A known tensor written by a node the cut runs anyway (DynamicQuantizeLinear's data beside the
    zero point the cut needs) is recomputed, not fed: a tensor cannot be both."""
    producer = {o: node for node in model.graph.node for o in node.output}
    weights = {t.name for t in model.graph.initializer}
    inputs = {i.name for i in model.graph.input} - weights
    found: list[str] = []
    cut_nodes: set[int] = {id(producer[tensor])}
    seen: set[str] = set()
    stack = list(producer[tensor].input)
    while stack:
        name = stack.pop()
        if not name or name in seen or name in weights:
            continue
        seen.add(name)
        if name in known or name in inputs:
            found.append(name)
        elif name in producer:
            cut_nodes.add(id(producer[name]))
            stack.extend(producer[name].input)
    recomputed = [n for n in found if n in producer and id(producer[n]) in cut_nodes]  # its inputs are walked
    return sorted(set(found) - set(recomputed))


def unit_errors(probe: Probe, expected: Sequence[dict], compile: Callable, mode: str = "run",
                kernels: str = "numpy", registries=None) -> dict[str, int]:
    """Integer tensor -> largest |difference| (steps) of xgraph's unit fed the oracle's integer inputs.

    `expected` are the oracle's per-feed values (`onnxruntime_runs` / `reference_runs` of `probe`),
    which must include the graph inputs' feeds under their own names (as `runs_with_feeds` adds)."""
    from xgraph.runners.graph_runner import create_graph_runner
    shown = {tap[len(tap_name("")):] for tap in probe.quantized if tap in expected[0]}
    extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(probe.source))  # cuts need value types
    errors: dict[str, int] = {}
    options = {} if registries is None else {"registries": registries}
    for tensor in [t for t in (tap[len(tap_name("")):] for tap in probe.quantized) if t in shown]:
        sources = _sources(probe.source, tensor, shown - {tensor})
        cut = extractor.extract_model(sources, [tensor])
        compiled = compile(cut)
        worst = 0
        with create_graph_runner(compiled, mode=mode, kernels=kernels, **options) as runner:
            for run in expected:
                feed = {s: run[tap_name(s)] if tap_name(s) in run else run[s] for s in sources}
                (got,) = runner.run(feed)
                want = run[tap_name(tensor)]
                worst = max(worst, int(np.abs(want.astype(np.int64) - got.astype(np.int64)).max(initial=0)))
        errors[tensor] = worst
    return errors


def runs_with_feeds(runs: Sequence[dict], feeds: Sequence[dict]) -> list[dict]:
    """Each run's values plus the feed it was run on (the cuts that start at a graph input need it)."""
    return [{**feed, **run} for run, feed in zip(runs, feeds)]


__all__ = ["runs_with_feeds", "unit_errors"]
