"""The openvino reference plugin: .xmodel size against the .onnx, and latency against OpenVINO and onnxruntime alone.

Per model (the zoo's ResNet50 with seeded random weights; the BERT-style encoder of tests/compile,
batch 1, sequence 128):
  size         .xmodel bytes / .onnx bytes, with the plugin's blob holding the weights ("embedded":
               `export_model()`) and holding none ("shared": the IR, weights taken from the graph)
  load         seconds to load the .xmodel and create the graph runner (the shared blob is compiled again)
  xgraph       the graph runner over the loaded .xmodel (every op on OpenVINO)
  openvino     OpenVINO alone: `compile_model` of the .onnx, same precision (f32) and device (CPU)
  onnxruntime  onnxruntime alone on the .onnx (default session options)
Latencies are the median of --runs runs, contenders taking turns (runtime_vs_ort.median_times); ratios
are against OpenVINO alone.

    python benchmarks/openvino_plugin.py [--runs 20] [--models resnet50,bert]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino as ov

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's xgraph and testing/
import xgraph  # noqa: E402

from testing.runtime import load_script, zoo_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PLUGINS = str(ROOT / "plugins")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_vs_ort import median_times  # noqa: E402


def models() -> dict:
    """name -> (ModelProto, feeds)."""
    bert = load_script(ROOT / "tests" / "compile" / "conftest.py", "compile_models").bert_like_encoder(
        hidden=256, heads=4, vocab=1000, layers=4)
    rng = np.random.default_rng(0)
    return {
        "resnet50": (zoo_model("resnet50"), {"gpu_0/data_0": rng.standard_normal((1, 3, 224, 224)).astype(np.float32)}),
        "bert": (bert, {"input_ids": rng.integers(0, 1000, (1, 128)).astype(np.int64),
                        "attention_mask": np.ones((1, 128), np.int64)}),
    }


def measure(name: str, model: onnx.ModelProto, feeds: dict, runs: int, folder: str) -> list[str]:
    path = os.path.join(folder, f"{name}.onnx")
    onnx.save(model, path)
    onnx_bytes = os.path.getsize(path)
    shape = ";".join(f"{k}:{','.join(map(str, v.shape))}" for k, v in feeds.items())
    rows, sizes = [], {}
    for weights in ("embedded", "shared"):
        compiled = xgraph.compile(path, {"plugins": "openvino", "input_shape": shape,
                                         "plugin_options": {"openvino": {"weights": weights}}}, plugin_path=[PLUGINS])
        out = os.path.join(folder, f"{name}_{weights}.xmodel")
        compiled.serialize(out)
        sizes[weights] = os.path.getsize(out) + (os.path.getsize(out + ".data") if os.path.exists(out + ".data") else 0)
    started = time.perf_counter()
    runner = xgraph.create_graph_runner(xgraph.load(out), plugin_path=[PLUGINS])
    load_s = time.perf_counter() - started
    devices = sorted({sg.get_attr("device") for sg in runner.graph.get_root_subgraph().get_children()})
    core = ov.Core()
    compiled_ov = core.compile_model(path, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled_ov.create_infer_request()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    with runner:
        times = median_times({"xgraph": lambda: runner.run(feeds), "openvino": lambda: request.infer(feeds),
                              "onnxruntime": lambda: session.run(None, feeds)}, runs)
        got = runner.run(feeds)[0]
    expected = session.run(None, feeds)[0]
    rows.append(f"{name}: .onnx {onnx_bytes / 1e6:.1f} MB; .xmodel/.onnx embedded {sizes['embedded'] / onnx_bytes:.3f}, "
                f"shared {sizes['shared'] / onnx_bytes:.3f}; load+runner (shared) {load_s:.2f} s; devices {devices}; "
                f"max|xgraph - onnxruntime| {float(np.abs(got - expected).max()):.3g}")
    base = times["openvino"]
    for contender in ("xgraph", "openvino", "onnxruntime"):
        rows.append(f"  {contender:<12} {times[contender] * 1e3:8.2f} ms  x{times[contender] / base:5.2f} vs openvino "
                    f"(best {times[contender + ' best'] * 1e3:.2f} ms)")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--models", default="resnet50,bert")
    args = parser.parse_args()
    print(f"openvino {ov.__version__}, onnxruntime {ort.__version__}, {os.cpu_count()} CPUs")
    chosen = models()
    with tempfile.TemporaryDirectory() as folder:
        for name in args.models.split(","):
            model, feeds = chosen[name]
            print("\n".join(measure(name, model, feeds, args.runs, folder)), flush=True)


if __name__ == "__main__":
    main()
