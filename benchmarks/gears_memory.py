"""Memory cost per gear: .xmodel size and runtime RSS against the number of gears.

Baseline: the same model compiled once with a static `input_shape` (one partition, "1
static"), measured side by side in the same run. Each configuration compiles a BERT-style
encoder (tests/compile/conftest.py's builder, dynamic batch and sequence) with `dynamic_dims`
over N sequence lengths, then, each step in a fresh subprocess so one never inherits
another's memory:

* compile: `xgraph.compile` + `serialize`; the .xmodel size and the process's max RSS;
* run: `xgraph.load` + `create_graph_runner` + one run of every gear; max RSS, and the RSS
  left after the runs (the steady cost of holding the model and every gear's runners).

Columns give MB and, in brackets, the ratio to the static baseline; "+/gear" is the growth
per gear beyond the first. The weights are stored and held once for every N, so the file
grows only by each gear's nodes and metadata, and the runtime by each gear's execution
plans, runners and activation buffers.

    python benchmarks/gears_memory.py [--hidden 256] [--layers 4] [--gears 1,2,4,8] [--kernels auto]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

COMPILE = r"""
import json, resource, sys, os
import onnx, xgraph
from testing.runtime import load_script
m = load_script(sys.argv[1], "m")
model = m.bert_like_encoder(hidden=int(sys.argv[2]), heads=4, vocab=1000, layers=int(sys.argv[3]))
weights = sum(onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer)
g = xgraph.compile(model, json.loads(sys.argv[4]))
g.serialize(sys.argv[5])
print(json.dumps({"weights": weights, "size": os.path.getsize(sys.argv[5]),
                  "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""

RUN = r"""
import json, resource, sys, os
import numpy as np, xgraph
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
base = rss()
g = xgraph.load(sys.argv[1])
loaded = rss()
gears = g.get_gears() or []
shapes = [dict(x.input_shapes) for x in gears] or [{t.name: t.shape for t in g.get_input_tensors()}]
with xgraph.create_graph_runner(g, kernels=sys.argv[2]) as runner:
    for shape in shapes:
        feeds = {n: np.ones(s, np.int64) for n, s in shape.items()}
        runner.run(feeds)
    steady = rss()
print(json.dumps({"import_rss": base, "loaded_rss": loaded, "steady_rss": steady,
                  "max_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def _child(code: str, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _options(gears: int, batch: int = 1) -> dict:
    if gears == 1:
        return {"input_shape": f"input_ids:{batch},16;attention_mask:{batch},16"}
    seqs = [16 * (i + 1) for i in range(gears)]
    return {"input_shape": "input_ids:-1,-1;attention_mask:-1,-1",
            "dynamic_dims": ";".join(f"{batch},{s},{batch},{s}" for s in seqs)}


def main() -> int:
    """Measure and print the table."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--gears", default="1,2,4,8", help="gear counts (1 = the static baseline)")
    p.add_argument("--kernels", default="auto")
    args = p.parse_args()
    counts = sorted({int(n) for n in args.gears.split(",")} | {1})
    builders = str(ROOT / "tests" / "compile" / "conftest.py")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            path = str(Path(tmp) / f"bert_{n}.xmodel")
            c = _child(COMPILE, builders, str(args.hidden), str(args.layers), json.dumps(_options(n)), path)
            r = _child(RUN, path, args.kernels)
            rows.append((n, c, r))
    mb = 1e6
    weights = rows[0][1]["weights"]
    print(f"gears_memory: BERT-style encoder, hidden {args.hidden}, {args.layers} layers, weights "
          f"{weights / mb:.1f} MB; dynamic_dims over sequence 16, 32, ...; kernels {args.kernels}; "
          "baseline: 1 static partition (input_shape)")
    head = (f"{'gears':>5}  {'.xmodel MB':>16}  {'+/gear':>7}  {'compile max RSS':>16}  {'run: loaded RSS':>16}  "
            f"{'after runs':>16}  {'+/gear':>7}  {'run max RSS':>16}")
    print(head)
    _, c0, r0 = rows[0]
    base = {"size": c0["size"], "cmax": c0["max_rss"], "loaded": r0["loaded_rss"] - r0["import_rss"],
            "steady": r0["steady_rss"] - r0["import_rss"], "rmax": r0["max_rss"]}
    for n, c, r in rows:
        loaded, steady = r["loaded_rss"] - r["import_rss"], r["steady_rss"] - r["import_rss"]
        per_file = (c["size"] - base["size"]) / (n - 1) / mb if n > 1 else 0.0
        per_run = (steady - base["steady"]) / (n - 1) / mb if n > 1 else 0.0

        def cell(value: float, baseline: float) -> str:
            return f"{value / mb:8.1f} ({value / baseline:4.2f}x)"
        print(f"{n:>5}  {cell(c['size'], base['size']):>16}  {per_file:7.2f}  {cell(c['max_rss'], base['cmax']):>16}  "
              f"{cell(loaded, base['loaded']):>16}  {cell(steady, base['steady']):>16}  {per_run:7.2f}  "
              f"{cell(r['max_rss'], base['rmax']):>16}")
    print("RSS columns after 'import xgraph' (loaded, after runs) are the model's own; max RSS is the whole process.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
