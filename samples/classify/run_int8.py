"""Classify JPEG files with the float sample model and its int8 version, top-5 side by side.

    xgraph quantize samples/classify/classifier.onnx --calibration samples/classify/images \\
        -o samples/classify/classifier.int8.onnx --compare probs --exclude sub_mean,scale,hwc_to_chw,add_batch
    xcompile samples/classify/classifier.int8.onnx
    python samples/classify/run_int8.py [IMAGE.jpg ...] [--model samples/classify/classifier.int8.xmodel]

The int8 model runs DVPP (decode, resize) -> AI Core (the int8 Conv/Gemm units, Softmax) ->
AI CPU (TopK) -> CPU (labels), the float one as `run.py` does. Prints the int8 model's
subgraphs and int8 units, then per image the two top-5 lists, and how often the top-1 agrees.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import xgraph

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import load_model, print_partition  # noqa: E402


def print_int8_units(graph: xgraph.Graph) -> None:
    """The QDQ units of the compiled model, each with its device (the report's int8_units)."""
    units = [u for u in xgraph.report(graph).get("int8_units", []) if "int8" in u["label"]]
    print(f"int8 units: {len(units)}")
    for unit in units:
        print(f"  {unit['device']:<7} {unit['op']:<12} {unit['label']}")


def top5(runner, image: Path) -> tuple[np.ndarray, list[str]]:
    """The model's top-5 scores and labels for one JPEG file."""
    scores, labels = runner.run({"jpeg": np.frombuffer(image.read_bytes(), dtype=np.uint8)})
    return scores[0], [str(x) for x in labels[0]]


def main(argv: list[str] | None = None) -> int:
    """Run both models on every image and print their top-5 side by side (exit 0; 2 if the int8 model is missing)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("images", nargs="*", type=Path, default=sorted((HERE / "images").glob("*.jpg")))
    ap.add_argument("--model", type=Path, default=HERE / "classifier.int8.onnx", help="the int8 model (.onnx/.xmodel)")
    ap.add_argument("--float-model", type=Path, default=HERE / "classifier.onnx")
    ap.add_argument("--kernels", default="auto", choices=("auto", "numpy", "onnxruntime"))
    args = ap.parse_args(argv)
    if not args.model.exists() and not args.model.with_suffix(".xmodel").exists():
        print(f"{args.model} not found; make it first with the xgraph quantize command in this file's docstring")
        return 2
    int8_graph, float_graph = load_model(args.model), load_model(args.float_model)
    print_partition(int8_graph)
    print_int8_units(int8_graph)
    agree = 0
    with xgraph.create_graph_runner(float_graph, kernels=args.kernels) as float_runner, \
            xgraph.create_graph_runner(int8_graph, kernels=args.kernels) as int8_runner:
        for image in args.images:
            (f_scores, f_labels), (q_scores, q_labels) = top5(float_runner, image), top5(int8_runner, image)
            agree += f_labels[0] == q_labels[0]
            print(f"\n{image.name}: top-5\n            {'float':<26}{'int8':<26}")
            for fs, fl, qs, ql in zip(f_scores, f_labels, q_scores, q_labels):
                print(f"            {fs:.4f}  {fl:<18}{qs:.4f}  {ql:<18}")
    print(f"\ntop-1 agrees on {agree} of {len(args.images)} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
