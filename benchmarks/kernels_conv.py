"""Conv kernel speed against onnxruntime on ResNet50's convolution shapes, measured in the same run.

Every distinct Conv of the model-zoo ResNet50 (light_resnet50.onnx, input 1x3x224x224) is timed
twice on random data: xgraph's numpy kernel called directly, and onnxruntime running a model that
holds just that Conv (weights as initializers, `--threads` intra-op threads). Times are the best
of `--runs` runs (ms); `ratio` is numpy / onnxruntime, and the total weighs each shape by how often
the model uses it. BLAS picks its own thread count: pin it with OPENBLAS_NUM_THREADS (or
OMP_NUM_THREADS) to compare like with like.

    OPENBLAS_NUM_THREADS=2 python benchmarks/kernels_conv.py [--runs 20] [--threads 2] [--model path.onnx]
"""
from __future__ import annotations

import argparse
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper, shape_inference

from xgraph.ir.attribute_values import node_attributes
from xgraph.kernels import load_builtin_kernels

RESNET50 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


def conv_shapes(model: onnx.ModelProto) -> Counter:
    """{(input shape, weight shape, has bias, sorted attributes): count} over the model's Conv nodes."""
    inferred = shape_inference.infer_shapes(model)
    shapes = {vi.name: tuple(d.dim_value for d in vi.type.tensor_type.shape.dim)
              for vi in list(inferred.graph.value_info) + list(inferred.graph.input)}
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:  # the light zoo models build their weights with ConstantOfShape
        if node.op_type == "ConstantOfShape" and node.input[0] in constants:
            shapes[node.output[0]] = tuple(int(v) for v in constants[node.input[0]])
    for name, value in constants.items():
        shapes.setdefault(name, value.shape)
    found: Counter = Counter()
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        attrs = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in node_attributes(node).items()))
        has_bias = len(node.input) > 2 and bool(node.input[2])
        found[(shapes[node.input[0]], shapes[node.input[1]], has_bias, attrs)] += 1
    return found


def best_time(fn, runs: int) -> float:
    fn()
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def ort_conv(x, w, b, attrs: dict, threads: int):
    """A callable running one Conv in onnxruntime (weights as initializers, like a real model)."""
    inputs = ["x", "w"] + (["b"] if b is not None else [])
    node = helper.make_node("Conv", inputs, ["y"], **attrs)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if b is not None else [])
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, {"x": x})[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=RESNET50)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    args = parser.parse_args()

    conv = load_builtin_kernels().lookup("Conv", "", 13, dtype=np.float32)
    rng = np.random.default_rng(0)
    header = f"{'input':>18} {'weight':>18} {'stride':>6} {'pad':>4} {'n':>3} {'numpy ms':>9} {'ort ms':>8} {'ratio':>6}"
    print(header)
    print("-" * len(header))
    total_numpy = total_ort = 0.0
    for (x_shape, w_shape, has_bias, attrs), count in sorted(conv_shapes(onnx.load(args.model)).items(),
                                                             key=lambda item: -np.prod(item[0][0])):
        attrs = dict(attrs)
        attrs = {k: list(v) if isinstance(v, tuple) else v for k, v in attrs.items()}
        x = rng.standard_normal(x_shape).astype(np.float32)
        w = (rng.standard_normal(w_shape) / np.sqrt(np.prod(w_shape[1:]))).astype(np.float32)
        b = rng.standard_normal(w_shape[0]).astype(np.float32) if has_bias else None
        ours = (lambda: conv(x, w, b, **attrs)) if has_bias else (lambda: conv(x, w, **attrs))
        t_numpy = best_time(ours, args.runs)
        # onnxruntime's pool threads spin after each run: time it second and drop the session after,
        # so its threads never compete with BLAS's
        theirs = ort_conv(x, w, b, attrs, args.threads)
        t_ort = best_time(theirs, args.runs)
        np.testing.assert_allclose(ours(), theirs(), rtol=1e-3, atol=1e-3)
        del theirs
        total_numpy += count * t_numpy
        total_ort += count * t_ort
        stride = "x".join(str(s) for s in attrs.get("strides", [1]))
        pad = str(max(attrs.get("pads", [0])))
        print(f"{str(x_shape):>18} {str(w_shape):>18} {stride:>6} {pad:>4} {count:>3} "
              f"{t_numpy * 1e3:9.2f} {t_ort * 1e3:8.2f} {t_numpy / t_ort:6.2f}")
    print("-" * len(header))
    print(f"{'all convs, weighted by use':>52} {total_numpy * 1e3:9.2f} {total_ort * 1e3:8.2f} "
          f"{total_numpy / total_ort:6.2f}")


if __name__ == "__main__":
    main()
