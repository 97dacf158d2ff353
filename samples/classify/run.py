"""Classify JPEG files with the sample model, across DVPP, AI Core, AI CPU and the host CPU.

    python samples/classify/run.py [IMAGE.jpg ...] [--model samples/classify/classifier.xmodel]

Compiles classifier.onnx (unless an .xmodel exists next to it, e.g. from `xcompile`), runs
every image through the graph runner, and prints the top-5 classes, the subgraph on each
device, and the time each device spent. It then runs the equivalent steps directly: Pillow
decodes, onnxruntime runs the standard-ONNX reference model (Resize in place of VpcResize),
and shows both answers agree.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

import xgraph

HERE = Path(__file__).resolve().parent


def load_model(path: Path) -> xgraph.Graph:
    """The compiled model: the .xmodel when given/present, else compile the .onnx now."""
    if path.suffix == ".xmodel" and path.exists():
        return xgraph.load(path)
    xmodel = path.with_suffix(".xmodel")
    if xmodel.exists() and xmodel.stat().st_mtime >= path.stat().st_mtime:
        return xgraph.load(xmodel)
    return xgraph.compile(path)


def print_partition(graph: xgraph.Graph) -> None:
    """One line per device subgraph, in execution order."""
    print("subgraphs:")
    for sg in graph.get_root_subgraph().toposort_child_subgraph():
        ops = ", ".join(op.type for op in sg.toposort())
        print(f"  {sg.get_attr('device'):<7} {sg.name:<24} {sg.get_op_num():>3} ops: {ops}")


def device_times(graph: xgraph.Graph, runner) -> dict[str, float]:
    """Seconds each device spent, summed over its subgraphs."""
    per_subgraph = runner.get_stats()["subgraphs"]
    totals: dict[str, float] = defaultdict(float)
    for sg in graph.get_root_subgraph().get_children():
        totals[sg.get_attr("device")] += per_subgraph.get(sg.name, {}).get("total_s", 0.0)
    return dict(totals)


def reference_answer(image: Path) -> tuple[np.ndarray, list[str]]:
    """Pillow decode + onnxruntime on the standard-ONNX reference model."""
    import onnxruntime as ort

    from xgraph.ir.array_reader import read_input_file
    from xgraph.ir.image_reader import read_pixels
    pixels = read_pixels(read_input_file(image, str(image)), str(image), "RGB")  # Pillow, allow-listed formats
    session = ort.InferenceSession(str(HERE / "reference.onnx"), providers=["CPUExecutionProvider"])
    scores, labels = session.run(None, {"picture": pixels})
    return scores[0], [str(x) for x in labels[0]]


def main(argv: list[str] | None = None) -> int:
    """Run the sample; exit 1 if xgraph and the direct reference disagree."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("images", nargs="*", type=Path, default=sorted((HERE / "images").glob("*.jpg")))
    ap.add_argument("--model", type=Path, default=HERE / "classifier.onnx")
    args = ap.parse_args(argv)
    graph = load_model(args.model)
    print_partition(graph)
    agree = True
    with xgraph.create_graph_runner(graph) as runner:
        for image in args.images:
            encoded = np.frombuffer(image.read_bytes(), dtype=np.uint8)
            scores, labels = runner.run({"jpeg": encoded})
            scores, labels = scores[0], [str(x) for x in labels[0]]
            print(f"\n{image.name}: top-5")
            for s, label in zip(scores, labels):
                print(f"  {s:.4f}  {label}")
            try:
                ref_scores, ref_labels = reference_answer(image)
            except ImportError:
                print("  (onnxruntime not installed: skipping the direct Pillow + onnxruntime check)")
                continue
            same = ref_labels == labels and np.allclose(ref_scores, scores, rtol=1e-4, atol=1e-5)
            agree &= same
            print(f"  Pillow + onnxruntime: {'same top-5' if same else 'DIFFERENT: ' + str(ref_labels)}"
                  f" (max score difference {np.abs(ref_scores - scores).max():.2e})")
        times = device_times(graph, runner)
        copies = runner.get_stats()["copies"]
    print("\ntime per device (all images):")
    for device, seconds in sorted(times.items(), key=lambda kv: -kv[1]):
        print(f"  {device:<7} {seconds * 1e3:8.2f} ms")
    print(f"  host<->device copies: {copies['count']} ({copies['bytes']} bytes)")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
