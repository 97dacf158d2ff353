"""Int8 numerics of xgraph's modes against onnxruntime's integer kernels and onnx's reference evaluator.

Per model (QDQ ResNet50 at opset 13 as quantize_static leaves it, with BatchNormalization as float
ops between quantizers; "resnet50-pre" the same after onnxruntime's quant_pre_process, which folds
them into the Convs; a QDQ MobileNet-style net; a hand-built QOperator net; see
`testing.int8_models`) and per mode, on --inputs seeded random inputs:

  int8 run    largest error on any integer tensor over the whole run, in steps of that tensor
              (differences carried from earlier tensors included; `xgraph.runners.int8_numerics`)
  int8 unit   the same, each unit fed the oracle's own integer inputs (`xgraph.runners.int8_numerics.unit_errors`):
              what the unit itself gets wrong
  out steps   largest error of the float outputs, in steps of their final DequantizeLinear
  top-1       inputs on which the argmax of the first output agrees
  first       the first integer tensor, in node order, that differs on some input: where the
              engines part before a difference is carried on

Modes: run (numpy integer units, requantized in float32 as onnxruntime's kernels), sim
(fixed-point requantization), auto (onnxruntime sessions where they load; its run-wide int8
column is blank because a probed tensor stops onnxruntime's fusion, see int8_numerics), ref
(float-simulated QDQ), each against two onnxruntime oracles:

  onnxruntime   the model as onnxruntime optimizes it: on x86 some units stay float ops between a
                DQ and a Q (QDQ ResNet50: 20 of 53 Convs, `xgraph.runners.int8_numerics.unsigned_activations` says why)
  ort-integer   the same model with its int8 activations moved to uint8 (an exact rewrite), so
                onnxruntime runs every unit as its integer kernel

and ref also against the reference evaluator (on --ref-inputs inputs: it is slow).

    python benchmarks/int8_numerics.py [--models resnet50,resnet50-pre,mobilenet,qoperator] [--inputs 100]
                                       [--ref-inputs 10] [--no-units]
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's xgraph and testing/
import xgraph  # noqa: E402
from xgraph.kernels.reference_fixes import evaluator_fixes  # noqa: E402
from xgraph.runners.int8_numerics import (  # noqa: E402
    Int8Errors, Probe, compare, contrib_reference_ops, graph_runner_runs, onnxruntime_runs, reference_runs,
    runs_with_feeds, unit_errors, with_quantized_outputs)

from testing.int8_models import qdq_mobilenet, qdq_resnet50, qoperator_net, random_inputs  # noqa: E402

MODELS = {"resnet50": qdq_resnet50, "resnet50-pre": lambda: qdq_resnet50(pre_process=True),
          "mobilenet": qdq_mobilenet, "qoperator": qoperator_net}
MODES = (("run", "numpy"), ("sim", "numpy"), ("auto", "auto"), ("ref", "auto"))
#: (name, every_unit_integer): onnxruntime as it optimizes the model (QDQ ResNet50: 20 of 53 Convs in
#: float), and with int8 activations moved to uint8 so that it runs every unit as an integer kernel.
ORACLES = (("onnxruntime", False), ("ort-integer", True))


def _row(model: str, mode: str, oracle: str, run_steps, unit_steps, errors, seconds: float, first=None) -> str:
    def cell(v):
        return "-" if v is None else str(v)
    return (f"{model:<14}{mode:<6}{oracle:<13}{cell(run_steps):>9}{cell(unit_steps):>10}"
            f"{errors.max_output_steps():>11.2f}{errors.top1:>6}/{errors.runs:<5}{seconds:>7.1f}s  {cell(first)}")


def _batches(feeds: list, size: int = 10):
    """Feeds in batches: one batch's integer tensors alive at a time (ResNet50's are ~10 MB per input)."""
    return [feeds[i:i + size] for i in range(0, len(feeds), size)]


def _add(total: dict, key, errors: Int8Errors) -> None:
    total[key] = errors if key not in total else total[key].merged(errors)


def measure(name: str, inputs: int, ref_inputs: int, units: bool) -> list[str]:
    """The table's rows for one model: each mode against both onnxruntime oracles, ref against the evaluator."""
    model = MODELS[name]()
    probe = with_quantized_outputs(model)
    plain = Probe(model, model, probe.outputs, (), probe.output_scales)
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    feeds = [{x.name: v} for v in random_inputs(shape, inputs, seed=7)]
    compiled = {"probe": xgraph.compile(probe.model), "plain": xgraph.compile(model)}
    new_ops = evaluator_fixes() + contrib_reference_ops()
    totals: dict = {}
    seconds = dict.fromkeys([m for m, _ in MODES] + ["reference"], 0.0)
    done = 0
    for batch in _batches(feeds):
        expected = {oracle: onnxruntime_runs(probe, batch, every_unit_integer=every) for oracle, every in ORACLES}
        for mode, kernels in MODES:
            if mode == "ref" and done >= ref_inputs:
                continue
            part = batch if mode != "ref" else batch[:ref_inputs - done]
            start = time.perf_counter()
            which, graph = (plain, compiled["plain"]) if mode == "auto" else (probe, compiled["probe"])
            got = list(graph_runner_runs(which, graph, part, "run" if mode == "auto" else mode, kernels))
            seconds[mode] += time.perf_counter() - start
            for oracle, _ in ORACLES:
                _add(totals, (mode, oracle), compare(which, expected[oracle][:len(part)], got))
        if done < ref_inputs:
            part = batch[:ref_inputs - done]
            start = time.perf_counter()
            got = graph_runner_runs(probe, compiled["probe"], part, "ref", "auto")
            _add(totals, ("ref", "reference"), compare(probe, reference_runs(probe, part, new_ops), got))
            seconds["reference"] += time.perf_counter() - start
        done += len(batch)
    first = {oracle: runs_with_feeds(onnxruntime_runs(probe, feeds[:3], every_unit_integer=every), feeds[:3])
             for oracle, every in ORACLES}  # the per-unit column's oracles
    rows = []
    for oracle, _ in ORACLES:
        for mode, kernels in MODES:
            start = time.perf_counter()
            unit = None
            if units:
                unit = max(unit_errors(probe, first[oracle], xgraph.compile, "run" if mode == "auto" else mode,
                                       kernels).values(), default=0)
            errors = totals[(mode, oracle)]
            probed = mode != "auto"
            rows.append(_row(name, mode, oracle, errors.max_int8_steps() if probed else None, unit, errors,
                             seconds[mode] + time.perf_counter() - start, errors.first_difference(probe) if probed else None))
    errors = totals[("ref", "reference")]
    rows.append(_row(name, "ref", "reference", errors.max_int8_steps(), None, errors, seconds["reference"],
                     errors.first_difference(probe)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,resnet50-pre,mobilenet,qoperator")
    parser.add_argument("--inputs", type=int, default=100)
    parser.add_argument("--ref-inputs", type=int, default=10)
    parser.add_argument("--no-units", action="store_true", help="skip the per-unit column (one compile per tensor)")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization's advice to pre-process, per model
    print(f"{args.inputs} random inputs ({args.ref_inputs} for ref); errors in quantization steps; "
          "int8 unit on the first 3 inputs")
    print(f"{'model':<14}{'mode':<6}{'oracle':<13}{'int8 run':>9}{'int8 unit':>10}{'out steps':>11}{'top-1':>11}"
          f"{'':>9}first differing tensor")
    for name in args.models.split(","):
        for line in measure(name, args.inputs, args.ref_inputs, not args.no_units):
            print(line, flush=True)


if __name__ == "__main__":
    main()
