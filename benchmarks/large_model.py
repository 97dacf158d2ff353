"""Large models: `xcompile` and the graph runner on external-data models of 2.4 GB and 4 GB.

The model is the one of issue 16: N layers of MatMul(1x4096 @ 4096x4096) + Relu, float32,
saved with external data (36 layers: 2.4 GB; 60 layers: 4.0 GB), generated layer by layer
into a temporary folder (deleted afterwards) so generating it needs 64 MiB at a time.

Side by side, each in a fresh subprocess (max RSS from `wait4`, so one run never pollutes the
next; RSS counts the pages of mapped files a process touched, as the kernel does):

* baseline: `onnx.load` (external data loaded) + `onnx.save(..., save_as_external_data=True)`
  of the same model, the least any ONNX tool does to read and write it;
* `xcompile MODEL -o OUT.xmodel -q`: its time and ratio to the baseline (target <= 2x), and
  its max RSS against the weight bytes (target <= 1.3x, goal <= 0.3x);
* run: load the .xmodel and run one input through `create_graph_runner` (`--kernels`,
  default `auto` and `numpy`), against onnxruntime's own session over the original model:
  outputs compared (max abs difference), max RSS ratio (target <= 1.5x), time.

    python benchmarks/large_model.py [--sizes 2.4,4] [--kernels auto,numpy] [--dir DIR] [--quick]

`--quick` runs a 0.5 GB model (8 layers). Memory: the 4 GB case needs about 2x the weights
in the onnxruntime and baseline subprocesses (one at a time), and the data files on disk.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

N = 4096
LAYER_BYTES = N * N * 4
ROOT = Path(__file__).resolve().parents[1]


def generate(path: Path, layers: int, seed: int = 0) -> int:
    """Write the model and its data file (one layer's weights in memory at a time); the weight bytes."""
    data_name = path.name + ".data"
    rng = np.random.default_rng(seed)
    inits, nodes, x = [], [], "x"
    with open(path.parent / data_name, "wb") as f:
        for i in range(layers):
            w = rng.standard_normal((N, N), dtype=np.float32)
            w *= np.float32(1.4 / np.sqrt(N))  # keeps activations O(1) through the Relus
            offset = f.tell()
            f.write(w.tobytes())
            t = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[N, N],
                                 data_location=TensorProto.EXTERNAL)
            for k, v in (("location", data_name), ("offset", str(offset)), ("length", str(w.nbytes))):
                e = t.external_data.add()
                e.key, e.value = k, v
            inits.append(t)
            nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
            nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
            x = f"r{i}"
    g = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, N])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path.write_bytes(model.SerializeToString())
    return layers * LAYER_BYTES


BASELINE = """
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.save(m, sys.argv[2], save_as_external_data=True, all_tensors_to_one_file=True, location=sys.argv[3])
"""

ORT_RUN = """
import sys, time, numpy as np, onnxruntime as ort
x = np.load(sys.argv[2])
t = time.perf_counter()
s = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
y = s.run(None, {"x": x})[0]
print("SECONDS", time.perf_counter() - t)
np.save(sys.argv[3], y)
"""

XGRAPH_RUN = """
import sys, time, numpy as np, xgraph
x = np.load(sys.argv[2])
t = time.perf_counter()
g = xgraph.load(sys.argv[1])
y = xgraph.create_graph_runner(g, mode="run", kernels=sys.argv[4]).run({"x": x})[0]
print("SECONDS", time.perf_counter() - t)
np.save(sys.argv[3], y)
"""


def _seconds_line(out: str) -> float | None:
    for line in out.splitlines():
        if line.startswith("SECONDS"):
            return float(line.split()[1])
    return None


class Child:
    """One measured subprocess at a time, each with its own max RSS (ru_maxrss of a fresh process)."""

    @staticmethod
    def run(argv: list[str]) -> tuple[float, float, str]:
        wrapper = ("import resource, subprocess, sys, json, time\n"
                   "t = time.perf_counter()\n"
                   "p = subprocess.run(sys.argv[1:], capture_output=True)\n"
                   "s = time.perf_counter() - t\n"
                   "sys.stderr.buffer.write(p.stderr)\n"
                   "print(json.dumps({'rc': p.returncode, 'seconds': s, 'out': p.stdout.decode(),\n"
                   "  'maxrss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n")
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.run([sys.executable, "-c", wrapper, *argv], capture_output=True, env=env)
        if proc.returncode != 0 or not proc.stdout.strip():
            raise RuntimeError(f"{' '.join(argv[:3])}: {proc.stderr.decode()[-2000:]}")
        result = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        if result["rc"] != 0:
            raise RuntimeError(f"{' '.join(argv[:4])} failed ({result['rc']}):\n{proc.stderr.decode()[-3000:]}")
        return result["seconds"], result["maxrss_kb"] / 1e6, result["out"]


def case(folder: Path, gigabytes: float, kernels: list[str]) -> list[str]:
    layers = max(1, round(gigabytes * 1e9 / LAYER_BYTES))
    model = folder / "big.onnx"
    weight_bytes = generate(model, layers)
    gb = weight_bytes / 1e9
    lines = [f"## {layers} layers, {gb:.2f} GB of weights"]
    py = sys.executable
    base_s, base_rss, _ = Child.run([py, "-c", BASELINE, str(model), str(folder / "copy.onnx"), "copy.onnx.data"])
    for p in (folder / "copy.onnx", folder / "copy.onnx.data"):
        p.unlink(missing_ok=True)
    xmodel = folder / "big.xmodel"
    xc_s, xc_rss, _ = Child.run([py, "-m", "xgraph.cli.xcompile", str(model), "-o", str(xmodel), "-q"])
    lines.append("| step | seconds | x baseline | max RSS GB | RSS / weights |")
    lines.append("|---|---|---|---|---|")
    lines.append(f"| baseline: onnx.load + onnx.save (external data) | {base_s:.2f} | 1.00 | {base_rss:.2f} | "
                 f"{base_rss / gb:.2f} |")
    lines.append(f"| xcompile -> .xmodel + side file | {xc_s:.2f} | {xc_s / base_s:.2f} | {xc_rss:.2f} | "
                 f"{xc_rss / gb:.2f} |")
    x = np.random.default_rng(1).standard_normal((1, N)).astype(np.float32)
    np.save(folder / "x.npy", x)
    ort_s, ort_rss, out = Child.run([py, "-c", ORT_RUN, str(model), str(folder / "x.npy"), str(folder / "ort.npy")])
    ort_inner = _seconds_line(out)
    reference = np.load(folder / "ort.npy")
    lines.append("")
    lines.append("| run (load + 1 input) | seconds | max RSS GB | RSS x onnxruntime | max abs diff vs onnxruntime |")
    lines.append("|---|---|---|---|---|")
    lines.append(f"| onnxruntime on the original | {ort_inner:.2f} | {ort_rss:.2f} | 1.00 | 0 |")
    for k in kernels:
        s, rss, out = Child.run([py, "-c", XGRAPH_RUN, str(xmodel), str(folder / "x.npy"), str(folder / "xg.npy"), k])
        diff = float(np.abs(np.load(folder / "xg.npy") - reference).max())
        lines.append(f"| xgraph graph runner, kernels={k} | {_seconds_line(out):.2f} | {rss:.2f} | "
                     f"{rss / ort_rss:.2f} | {diff:.2e} |")
    lines.append(f"(output max |y| = {float(np.abs(reference).max()):.3g})")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2.4,4", help="weight sizes in GB, comma-separated")
    p.add_argument("--kernels", default="auto,numpy")
    p.add_argument("--dir", help="folder for the temporary models (default: the system's temp folder)")
    p.add_argument("--quick", action="store_true", help="one 0.5 GB model")
    args = p.parse_args()
    sizes = [0.5] if args.quick else [float(s) for s in args.sizes.split(",")]
    kernels = [k for k in args.kernels.split(",") if k]
    for gigabytes in sizes:
        folder = Path(tempfile.mkdtemp(prefix="xgraph-large-", dir=args.dir))
        try:
            print("\n".join(case(folder, gigabytes, kernels)), flush=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        print()


if __name__ == "__main__":
    main()
