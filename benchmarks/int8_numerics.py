"""Int8 numerics of xgraph's modes against onnxruntime's integer kernels and onnx's reference evaluator.

Per model (QDQ ResNet50 at opset 13 as quantize_static leaves it, with BatchNormalization as float
ops between quantizers; "resnet50-pre" the same after onnxruntime's quant_pre_process, which folds
them into the Convs; a QDQ MobileNet-style net; a hand-built QOperator net; see
`xgraph.runners.int8_models`) and per mode, on --inputs seeded random inputs:

  int8 run    largest error on any integer tensor over the whole run, in steps of that tensor
              (differences carried from earlier tensors included; `xgraph.runners.int8_numerics`)
  int8 unit   the same, each unit fed the oracle's own integer inputs (`xgraph.runners.int8_units`):
              what the unit itself gets wrong
  out steps   largest error of the float outputs, in steps of their final DequantizeLinear
  top-1       inputs on which the argmax of the first output agrees

Modes: run (numpy integer units), sim (fixed-point requantization), auto (onnxruntime sessions
where they load; its run-wide int8 column is blank because a probed tensor stops onnxruntime's
fusion, see int8_numerics) against onnxruntime; ref against onnxruntime and against the
reference evaluator (on --ref-inputs inputs: it is slow).

    python benchmarks/int8_numerics.py [--models resnet50,resnet50-pre,mobilenet,qoperator] [--inputs 100]
                                       [--ref-inputs 10] [--no-units]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import xgraph
from xgraph.kernels.reference_fixes import evaluator_fixes
from xgraph.runners.int8_models import qdq_mobilenet, qdq_resnet50, qoperator_net, random_inputs
from xgraph.runners.int8_numerics import (Probe, compare, contrib_reference_ops, graph_runner_runs,
                                          onnxruntime_runs, reference_runs, with_quantized_outputs)
from xgraph.runners.int8_units import runs_with_feeds, unit_errors

MODELS = {"resnet50": qdq_resnet50, "resnet50-pre": lambda: qdq_resnet50(pre_process=True),
          "mobilenet": qdq_mobilenet, "qoperator": qoperator_net}
MODES = (("run", "numpy"), ("sim", "numpy"), ("auto", "auto"), ("ref", "auto"))


def _row(model: str, mode: str, oracle: str, run_steps, unit_steps, errors, seconds: float) -> str:
    def cell(v):
        return "-" if v is None else str(v)
    return (f"{model:<11}{mode:<6}{oracle:<13}{cell(run_steps):>9}{cell(unit_steps):>10}"
            f"{errors.max_output_steps():>11.2f}{errors.top1:>6}/{errors.runs:<5}{seconds:>7.1f}s")


def measure(name: str, inputs: int, ref_inputs: int, units: bool) -> list[str]:
    model = MODELS[name]()
    probe = with_quantized_outputs(model)
    plain = Probe(model, model, probe.outputs, (), probe.output_scales)
    x = model.graph.input[0]
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    feeds = [{x.name: v} for v in random_inputs(shape, inputs, seed=7)]
    expected = runs_with_feeds(onnxruntime_runs(probe, feeds), feeds)
    compiled = xgraph.compile(probe.model)
    compiled_plain = xgraph.compile(model)
    rows = []
    for mode, kernels in MODES:
        start = time.perf_counter()
        run_mode = "run" if mode == "auto" else mode
        count = ref_inputs if mode == "ref" else inputs
        if mode == "auto":
            errors = compare(plain, expected, graph_runner_runs(plain, compiled_plain, feeds, run_mode, kernels))
            run_steps = None
        else:
            errors = compare(probe, expected[:count], graph_runner_runs(probe, compiled, feeds[:count], run_mode, kernels))
            run_steps = errors.max_int8_steps()
        unit = None
        if units:
            unit = max(unit_errors(probe, expected[:min(count, 3)], xgraph.compile, run_mode, kernels).values(),
                       default=0)
        rows.append(_row(name, mode, "onnxruntime", run_steps, unit, errors, time.perf_counter() - start))
    start = time.perf_counter()
    oracle = reference_runs(probe, feeds[:ref_inputs], evaluator_fixes() + contrib_reference_ops())
    errors = compare(probe, oracle, graph_runner_runs(probe, compiled, feeds[:ref_inputs], "ref", "auto"))
    rows.append(_row(name, "ref", "reference", errors.max_int8_steps(), None, errors, time.perf_counter() - start))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,resnet50-pre,mobilenet,qoperator")
    parser.add_argument("--inputs", type=int, default=100)
    parser.add_argument("--ref-inputs", type=int, default=10)
    parser.add_argument("--no-units", action="store_true", help="skip the per-unit column (one compile per tensor)")
    args = parser.parse_args()
    print(f"{args.inputs} random inputs ({args.ref_inputs} for ref); errors in quantization steps; "
          "int8 unit on the first 3 inputs")
    print(f"{'model':<11}{'mode':<6}{'oracle':<13}{'int8 run':>9}{'int8 unit':>10}{'out steps':>11}{'top-1':>11}")
    for name in args.models.split(","):
        for line in measure(name, args.inputs, args.ref_inputs, not args.no_units):
            print(line, flush=True)


if __name__ == "__main__":
    main()
