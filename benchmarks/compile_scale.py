"""Compile scale: `xgraph.compile` + serialize on 1k/10k/100k-op models against onnx load + infer_shapes.

Baseline: `onnx.load` + `onnx.shape_inference.infer_shapes` of the same file, the least any
ONNX tool does with a model. Every configuration (model family, size, named or unnamed
nodes) runs baseline and xgraph alternately, each in a fresh subprocess (so the max RSS of
one run never pollutes the next, and a slow spell of the shared machine hits both alike);
every time is the best of --repeat runs, per stage.

Models (opset 17, static shapes, built here and saved to a temporary folder):

* chain: Relu/Sigmoid/Tanh/Abs/Neg, a residual Add every 8 ops and a TopK every 97.
* ladder: two rails of unary ops with an Add/Mul rung every 4 ops and, every 50 ops, a
  Cast to int64 -> Abs -> Cast back that AI Core refuses (an AI CPU island in an AI Core sea).
* transformer: repeated attention blocks (LayerNormalization, MatMul + bias, Reshape with
  shapes computed by Shape -> Gather -> Unsqueeze -> Concat, Transpose, Softmax, an Erf GELU
  feed-forward), weights shared between blocks so memory measures the graph, not the weights.

Named models call node i "n{i}"; unnamed ones leave every node name empty (the importer
then derives unique names from the op types).

xgraph stages (seconds): load (import + its shape inference), prepare (folding, fusions),
plugins (a template plugin taking Tanh -> Abs and Softmax -> MatMul pairs), placement
(propose + apply: first fit, merge), kernels (kernel and precision annotation), compile
(the `xgraph.compile` call), serialize and deserialize (.xmodel), xcompile (compile +
serialize). Ratios ("x onnx") divide by the baseline of the same configuration.
Floor ("col x", "obj x"; off with --no-floor): the least pure-Python work any compile does,
in a third worker alternating with the other two (`work_floor`): onnx load + infer_shapes and
the nodes read into columns, then one linked object per op and tensor and one grouping
pass, with none of xgraph's checks, plugins or reasons: what is left is xgraph's own stages.
The baseline's time includes onnx's first-use cost (about 30
ms), which the xgraph and floor workers pay when they import xgraph, before their clocks
start: it shows only at 1k ops, where the floor ratios read below 1.
Memory: max RSS of each subprocess (MB; xgraph's is measured after serialize) and the
tracemalloc peak (MB, one extra untimed run each, since tracing slows Python down).
Guard (printed last): with --before TREE (a checkout of the tree to compare with), compile and
xcompile at 100k ops stay within 10% of that tree's, both measured in the same run; max RSS
within 2.5x onnx's. `--clock cpu` is steadier when other jobs share the cores.

    python benchmarks/compile_scale.py [--quick] [--sizes 1000,10000,100000]
        [--models chain,ladder,transformer] [--naming named,unnamed] [--repeat 3]
        [--timeout 900] [--no-tracemalloc] [--before TREE] [--clock wall|cpu] [--no-floor]

`--quick` runs chain and transformer at 1k and 10k ops, named and unnamed, best of 1.
Measured on this 2-core machine, a 1,000,000-op chain (`--sizes 1000000 --models chain
--naming named --repeat 1`) completes in 87-97 s of compile (wall clock, machine shared; onnx
load + infer_shapes 8.7-10.5 s in the same runs), serialize 23 s, deserialize 36 s, max RSS 3.5
GB (onnx: 1.5-2.2 GB). The current 100k-op table is in docs/devices.md ("Compile cost at scale").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import onnx
from onnx import TensorProto, helper, numpy_helper

FAMILIES = ("chain", "ladder", "transformer")
STAGES = ("load", "prepare", "plugins", "placement", "kernels")
#: the guard at 100k ops: compile and xcompile within 10% of the --before tree of the same run (xgraph
#: already compiles faster than the tools a user would pick instead, so speed is kept, not chased), max RSS
#: within 2.5x onnx's, and each stage scaling near-linearly from 10k to 100k ops
TARGETS = {"regression": 0.10, "scaling": 12.0, "rss": 2.5}

PLUGIN = '''
"""Benchmark template plugin: Tanh -> Abs and Softmax -> MatMul pairs on the BENCHIP device."""
from xgraph import GraphTemplate
from xgraph.partition import filter_by_template, merge_subgraph
from xgraph.plugins import Plugin


def pair(name, first, second):
    t = GraphTemplate(name)
    t.add_op("b", second, inputs=[t.add_op("a", first)])
    return t


class BenchPlugin(Plugin):
    def get_plugin_name(self):
        return "bench_template"

    def partition(self, graph):
        selected = filter_by_template(graph, pair("tanh_abs", "Tanh", "Abs"))
        selected |= filter_by_template(graph, pair("softmax_matmul", "Softmax", "MatMul"))
        return merge_subgraph(selected) if selected else set()


def get_plugin():
    return BenchPlugin()
'''


# ------------------------------------------------------------------------------------ models

class _Builder:
    """Nodes of one model, named "n{i}" or left unnamed; tensors are "t{i}"."""

    def __init__(self, named: bool):
        self.named, self.nodes = named, []

    def add(self, op: str, inputs: list[str], n_outputs: int = 1, **attrs) -> str:
        i = len(self.nodes)
        outputs = [f"t{i}"] + [f"t{i}_{k}" for k in range(1, n_outputs)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=f"n{i}" if self.named else "", **attrs))
        return outputs[0]


def _model(name: str, b: _Builder, inputs, output: str, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(b.nodes, name, inputs, [onnx.ValueInfoProto(name=output)],
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def chain(n: int, named: bool, width: int = 64) -> onnx.ModelProto:
    """The issue's chain: unary ops, a residual Add every 8 ops, a TopK (k = width: shapes stay) every 97."""
    b = _Builder(named)
    unary = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg")
    k = numpy_helper.from_array(__import__("numpy").array([width], "int64"), "k")
    prev = skip = "x"
    for i in range(n):
        if i % 97 == 96:
            prev = b.add("TopK", [prev, "k"], 2, axis=-1)
        elif i % 8 == 7:
            prev = skip = b.add("Add", [prev, skip])
        else:
            prev = b.add(unary[i % len(unary)], [prev])
    return _model(f"chain{n}", b, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])], prev, [k])


def ladder(n: int, named: bool, width: int = 32) -> onnx.ModelProto:
    """Two rails with rungs, and every 50 ops an int64 detour (Cast -> Abs -> Cast) for the AI CPU."""
    b = _Builder(named)
    a = c = "x"
    while len(b.nodes) < n:
        i = len(b.nodes)
        if i % 50 == 46 and n - i >= 3:
            a = b.add("Cast", [b.add("Abs", [b.add("Cast", [a], to=TensorProto.INT64)])], to=TensorProto.FLOAT)
        elif i % 4 == 3:
            a, c = b.add("Add", [a, c]), (b.add("Mul", [a, c]) if n - i >= 2 else c)
        elif i % 2:
            a = b.add("Relu" if i % 3 else "Sigmoid", [a])
        else:
            c = b.add("Tanh" if i % 3 else "Neg", [c])
    return _model(f"ladder{n}", b, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                  b.nodes[-1].output[0])


def transformer(n: int, named: bool, seq: int = 8, hidden: int = 16, heads: int = 2) -> onnx.ModelProto:
    """Whole attention blocks, then Relus on the data path up to `n` ops (a block cut short could end in shape
    arithmetic, and the whole model would fold to a constant)."""
    import numpy as np
    rng = np.random.default_rng(0)
    head = hidden // heads

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    inits = [w("wq", hidden, hidden), w("wk", hidden, hidden), w("wv", hidden, hidden), w("wo", hidden, hidden),
             w("bq", hidden), w("bo", hidden), w("f1", hidden, 4 * hidden), w("f2", 4 * hidden, hidden),
             w("g", hidden), w("beta", hidden)]
    for name, value in (("i0", np.array(0)), ("i1", np.array(1)), ("ax0", np.array([0])),
                        ("split", np.array([heads, head])), ("merge", np.array([hidden]))):
        inits.append(numpy_helper.from_array(value.astype(np.int64), name))
    for name, value in (("scale", np.sqrt(head)), ("sqrt2", np.sqrt(2.0)), ("one", 1.0), ("half", 0.5)):
        inits.append(numpy_helper.from_array(np.array(value, np.float32), name))
    b = _Builder(named)
    x = "x"
    while len(b.nodes) + BLOCK_OPS <= n:
        x = _block(b, x)
    while len(b.nodes) < n:  # every op stays live
        x = b.add("Relu", [x])
    return _model(f"transformer{n}", b, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden])],
                  x, inits)


def _block(b: _Builder, x: str) -> str:
    """One attention block (`BLOCK_OPS` ops) reading `x`; returns its output."""
    add = b.add
    h = add("LayerNormalization", [x, "g", "beta"], axis=-1)
    shape = add("Shape", [h])
    batch = add("Unsqueeze", [add("Gather", [shape, "i0"], axis=0), "ax0"])
    length = add("Unsqueeze", [add("Gather", [shape, "i1"], axis=0), "ax0"])
    split = add("Concat", [batch, length, "split"], axis=0)
    merge = add("Concat", [batch, length, "merge"], axis=0)
    parts = {}
    for part, weight in (("q", "wq"), ("k", "wk"), ("v", "wv")):
        y = add("Add", [add("MatMul", [h, weight]), "bq"])
        perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
        parts[part] = add("Transpose", [add("Reshape", [y, split])], perm=perm)
    scores = add("Div", [add("MatMul", [parts["q"], parts["k"]]), "scale"])
    context = add("MatMul", [add("Softmax", [scores], axis=-1), parts["v"]])
    merged = add("Reshape", [add("Transpose", [context], perm=[0, 2, 1, 3]), merge])
    x = add("Add", [add("Add", [add("MatMul", [merged, "wo"]), "bo"]), x])
    f = add("MatMul", [add("LayerNormalization", [x, "g", "beta"], axis=-1), "f1"])
    gelu = add("Mul", [add("Mul", [f, add("Add", [add("Erf", [add("Div", [f, "sqrt2"])]), "one"])]), "half"])
    x = add("Add", [add("MatMul", [gelu, "f2"]), x])
    return x


def _block_ops() -> int:
    b = _Builder(True)
    _block(b, "x")
    return len(b.nodes)


#: ops per attention block
BLOCK_OPS = _block_ops()


BUILDERS = {"chain": chain, "ladder": ladder, "transformer": transformer}
#: the version of the builders in model file names: `--folder` never reuses a model an older version wrote
GENERATOR = hashlib.sha1(Path(__file__).read_bytes()).hexdigest()[:8]


# ----------------------------------------------------------------------------------- workers

def _max_rss_mb() -> float:
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


#: the clock every worker reads: wall time (perf_counter) or the process's CPU time (process_time, steadier
#: on a machine shared with other jobs); set by --clock
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter
CLOCK_NAME = ["wall"]


def work_baseline(path: str, trace: bool) -> dict:
    """onnx.load + infer_shapes of `path`."""
    import tracemalloc
    if trace:
        tracemalloc.start()
    t = clock()
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    row = {"onnx": clock() - t, "onnx_rss": _max_rss_mb(), "nodes": len(model.graph.node)}
    if trace:
        row["onnx_traced"] = tracemalloc.get_traced_memory()[1] / 2**20
    return row


def work_xgraph(path: str, plugin_dir: str, trace: bool) -> dict:
    """compile (stage by stage, through the progress callback), serialize, deserialize.

    `plugin_dir` "-" compiles without the template plugin."""
    import tracemalloc

    import xgraph
    from xgraph.cli import common
    if hasattr(common, "tune_collector"):  # the collector as `xcompile` runs it (a tree that predates it tunes its own)
        common.tune_collector()
    if trace:
        tracemalloc.start()
    marks: list[tuple[str, float]] = []
    start = clock()
    options = {"plugins": "bench_template"} if plugin_dir != "-" else {}
    compiled = xgraph.compile(path, options, [plugin_dir] if plugin_dir != "-" else None,
                              progress=lambda stage, i, total: marks.append((stage, clock())))
    end = clock()
    row = {"compile": end - start, "ops": compiled.get_op_num()}
    marks.append(("end", end))
    for (stage, t0), (_, t1) in zip(marks, marks[1:]):
        if stage in STAGES:
            row[stage] = t1 - t0
    row["load"] += marks[0][1] - start  # option parsing and device tables, before the first mark
    out = os.path.join(tempfile.mkdtemp(dir=os.path.dirname(path)), "model.xmodel")
    t = clock()
    compiled.serialize(out)
    row["serialize"] = clock() - t
    row["xcompile"] = row["compile"] + row["serialize"]
    row["rss"] = _max_rss_mb()
    if trace:
        row["traced"] = tracemalloc.get_traced_memory()[1] / 2**20
    del compiled
    t = clock()
    xgraph.Graph.deserialize(out)
    row["deserialize"] = clock() - t
    return row


class _FloorOp:
    __slots__ = ("type", "name", "inputs", "outputs", "device", "group")

    def __init__(self, op_type: str, name: str):
        self.type, self.name, self.inputs, self.outputs, self.device, self.group = op_type, name, [], [], None, None


class _FloorTensor:
    __slots__ = ("name", "producer", "consumers", "type")

    def __init__(self, name: str):
        self.name, self.producer, self.consumers, self.type = name, None, [], None


#: the floor's device per op type (anything else: the host CPU); the floor does not check support
_FLOOR_DEVICES = dict.fromkeys(("Relu", "Sigmoid", "Tanh", "Abs", "Neg", "Add", "Mul", "MatMul", "Softmax", "Erf",
                                "Div", "Sub", "Transpose", "Reshape", "LayerNormalization"), "AICORE")


def work_floor(path: str, trace: bool) -> dict:
    """The least pure-Python work any compile of `path` does, in two steps after onnx load + infer_shapes:

    * columns: the nodes' fields read into Python columns (xgraph's reader, one comprehension) and
      every tensor's inferred type keyed by name (one C call per value);
    * objects: then one slotted object per op and per tensor, linked both ways through one
      name -> tensor dict (what an IR with an object per op, like the public `Op`/`Tensor`, must
      build), and one pass giving each op a device by its type and cutting runs of one device
      into groups (a partition with no support checks, reasons, plugins, merge checks or
      annotations).

    The cyclic collector is off after onnx's part (with it on at its default thresholds, its collections
    over the new objects double the objects step at 100k ops; the xgraph worker runs with the threshold
    the command lines set). Nothing here is part of xgraph; it says how much of a
    ratio to the baseline is spent before any of xgraph's own work. `trace` is the workers' common
    signature; the floor is only timed."""
    import gc

    from xgraph.ir.onnx.nodes import Nodes
    from xgraph.ir.onnx.value_types import value_type_keys
    t = clock()
    model = onnx.shape_inference.infer_shapes(onnx.load(path))
    gc.disable()
    nodes = Nodes(model.graph.node, None)
    types, _ = value_type_keys(model.graph)
    columns_done = clock()
    tensors: dict[str, _FloorTensor] = {}
    ops = []
    get = tensors.get
    for op_type, name, inputs, outputs in zip(nodes.op_types, nodes.names, nodes.inputs, nodes.outputs):
        op = _FloorOp(op_type, name)
        for n in inputs:
            tensor = get(n)
            if tensor is None:
                tensor = tensors[n] = _FloorTensor(n)
            tensor.consumers.append(op)
            op.inputs.append(tensor)
        for n in outputs:
            tensor = get(n)
            if tensor is None:
                tensor = tensors[n] = _FloorTensor(n)
            tensor.producer = op
            op.outputs.append(tensor)
        ops.append(op)
    for n, key in types.items():
        tensor = get(n)
        if tensor is not None:
            tensor.type = key
    groups: list[list] = []
    device = None
    for op in ops:  # the benchmark's models are written in topological order
        op.device = _FLOOR_DEVICES.get(op.type, "CPU")
        if op.device != device:
            device = op.device
            groups.append([])
        groups[-1].append(op)
        op.group = len(groups) - 1
    end = clock()
    gc.enable()
    return {"floor_columns": columns_done - t, "floor_objects": end - t}


def byte_compile(before: str | None) -> None:
    """Write the bytecode of the xgraph package(s) measured, as pip does for an installed package.

    A source checkout run with PYTHONDONTWRITEBYTECODE would otherwise compile every module it
    imports lazily inside the timed stages, in every fresh worker."""
    import compileall
    import importlib.util
    trees = [os.path.dirname(importlib.util.find_spec("xgraph").origin)]
    trees += [os.path.join(os.path.abspath(before), "xgraph")] if before else []
    for tree in trees:
        compileall.compile_dir(tree, quiet=1)


def run_worker(kind: str, path: str, plugin_dir: str, trace: bool, timeout: float,
               tree: str | None = None) -> dict | None:
    """One measurement in a fresh interpreter (importing xgraph from `tree` when given); None when it ran past
    `timeout` seconds or failed."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, path, plugin_dir, "--clock", CLOCK_NAME[0]]
    cmd += ["--trace"] if trace else []
    env = dict(os.environ)
    if tree is not None:
        env["PYTHONPATH"] = os.path.abspath(tree)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        print(f"  {kind} worker failed on {os.path.basename(path)}: {done.stderr.strip()[-400:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------- table

def best_of(rows: list[dict]) -> dict:
    """Per key, the smallest value over the runs (times and RSS)."""
    out: dict = {}
    for row in rows:
        for k, v in row.items():
            out[k] = v if k not in out else min(out[k], v)
    return out


def measure(family: str, n: int, named: bool, folder: str, args) -> list[dict]:
    """One row per xgraph tree (the current one, and --before's when given), each with the baseline of the run."""
    path = os.path.join(folder, f"{family}{n}_{'named' if named else 'unnamed'}_{GENERATOR}.onnx")
    if not os.path.exists(path):  # a model of another version of this script has another name
        onnx.save(BUILDERS[family](n, named), path)
    trees = {"after": None, "before": args.before} if args.before else {"": None}
    base_rows: list[dict] = []
    own_rows: dict[str, list[dict]] = {name: [] for name in trees}
    given_up: set[str] = set()
    for _ in range(args.repeat):
        b = run_worker("baseline", path, folder, False, args.timeout)
        base_rows += [b] if b else []
        if args.floor:
            f = run_worker("floor", path, folder, False, args.timeout)
            base_rows += [f] if f else []
        for name, tree in trees.items():
            if name in given_up:
                continue
            o = run_worker("xgraph", path, folder if args.plugin else "-", False, args.timeout, tree)
            if o is None:
                given_up.add(name)  # past the timeout once: the next runs would be too
            else:
                own_rows[name].append(o)
    traced_base = run_worker("baseline", path, folder, True, args.timeout) if args.tracemalloc else None
    rows = []
    for name, tree in trees.items():
        row = {"family": family, "size": n, "naming": "named" if named else "unnamed", "tree": name}
        row.update(best_of(base_rows))
        row.update(best_of(own_rows[name]))
        row["timed_out"] = not own_rows[name]
        if traced_base:
            row["onnx_traced"] = traced_base["onnx_traced"]
        if args.tracemalloc and own_rows[name]:
            traced = run_worker("xgraph", path, folder if args.plugin else "-", True, args.timeout * 3, tree)
            if traced:
                row["traced"] = traced["traced"]
        rows.append(row)
    return rows


COLUMNS = [("tree", "tree", "{:<6}"), ("family", "model", "{:<11}"), ("size", "ops", "{:>7}"), ("naming", "names", "{:<7}"),
           ("onnx", "onnx s", "{:>7.2f}"), ("load", "load", "{:>6.2f}"), ("prepare", "prep", "{:>6.2f}"),
           ("plugins", "plugin", "{:>6.2f}"), ("placement", "place", "{:>6.2f}"), ("kernels", "kern", "{:>6.2f}"),
           ("compile", "compile", "{:>7.2f}"), ("compile_x", "x onnx", "{:>6.1f}"),
           ("floor_columns_x", "col x", "{:>5.1f}"), ("floor_objects_x", "obj x", "{:>5.1f}"), ("serialize", "ser", "{:>6.2f}"),
           ("xcompile_x", "xc x", "{:>6.1f}"), ("deserialize", "deser", "{:>6.2f}"),
           ("onnx_rss", "rss0 MB", "{:>7.0f}"), ("rss", "rss MB", "{:>7.0f}"), ("rss_x", "rss x", "{:>5.1f}"),
           ("onnx_traced", "tm0 MB", "{:>7.0f}"), ("traced", "tm MB", "{:>7.0f}")]


def _width(fmt: str) -> int:
    return int("".join(ch for ch in fmt.split(":")[1].split(".")[0] if ch.isdigit()))


def _cell(row: dict, key: str, fmt: str) -> str:
    ratios = {"compile_x": ("compile", "onnx"), "xcompile_x": ("xcompile", "onnx"), "rss_x": ("rss", "onnx_rss"),
              "floor_columns_x": ("floor_columns", "onnx"), "floor_objects_x": ("floor_objects", "onnx")}
    if key in ratios:
        top, bottom = ratios[key]
        if top in row and row.get(bottom):
            return fmt.format(row[top] / row[bottom])
    elif key in row:
        return fmt.format(row[key])
    return (">t/o" if row.get("timed_out") else "-").rjust(_width(fmt))


def print_table(rows: list[dict]) -> None:
    """One line per configuration."""
    print(" ".join(f"{title:{'<' if '<' in fmt else '>'}{_width(fmt)}}" for _, title, fmt in COLUMNS))
    for row in rows:
        print(" ".join(_cell(row, key, fmt) for key, _, fmt in COLUMNS))


def print_scaling(rows: list[dict]) -> None:
    """Per model and naming, time(100k) / time(10k) for every stage (linear would be 10)."""
    keys = ("onnx",) + STAGES + ("compile", "serialize", "deserialize")
    by = {(r["tree"], r["family"], r["naming"], r["size"]): r for r in rows}
    lines = []
    for (tree, family, naming, size), big in by.items():
        small = by.get((tree, family, naming, size // 10))
        if small is None or size // 10 < 1000:
            continue
        factors = [f"{k} {big[k] / small[k]:.1f}" if k in big and k in small and small[k] > 0 else f"{k} -"
                   for k in keys]
        lines.append(f"  {tree + ' ' if tree else ''}{family} {naming} {size // 10}->{size}: " + ", ".join(factors))
    if lines:
        print(f"\nScaling factor per stage (linear = 10, target <= {TARGETS['scaling']:.0f}):")
        print("\n".join(lines))


def print_targets(rows: list[dict]) -> None:
    """The guard at 100k ops, per configuration: the change against --before's tree, and the memory ratio."""
    big = [r for r in rows if r["size"] == 100_000 and "compile" in r]
    if not big:
        return
    before = {(r["family"], r["naming"]): r for r in big if r["tree"] == "before"}
    limit = TARGETS["regression"]
    print(f"\nGuard at 100k ops: compile and xcompile within +{limit:.0%} of --before's (same run), "
          f"max RSS <= {TARGETS['rss']}x onnx's:")
    for r in big:
        if r["tree"] == "before":
            continue
        checks = []
        old = before.get((r["family"], r["naming"]))
        for stage in ("compile", "xcompile"):
            if old is not None and stage in old:
                change = r[stage] / old[stage] - 1
                checks.append(f"{stage} {old[stage]:.2f} -> {r[stage]:.2f} s ({change:+.1%}, "
                              f"{'ok' if change <= limit else 'MISSED'})")
            else:
                checks.append(f"{stage} {r[stage]:.2f} s ({r[stage] / r['onnx']:.1f}x onnx; no --before to compare)")
        rss = r["rss"] / r["onnx_rss"]
        checks.append(f"rss {rss:.2f}x ({'ok' if rss <= TARGETS['rss'] else 'MISSED'})")
        print(f"  {r['family']} {r['naming']}: " + ", ".join(checks))
        if "floor_objects" in r:
            print(f"    floor (no xgraph work): columns {r['floor_columns'] / r['onnx']:.2f}x, one object per op and "
                  f"tensor {r['floor_objects'] / r['onnx']:.2f}x onnx; xgraph spends "
                  f"{r['compile'] - r['floor_objects']:.2f} s past the objects floor")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="chain and transformer, 1k and 10k ops, best of 1")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--models", default=",".join(FAMILIES))
    parser.add_argument("--naming", default="named,unnamed")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per xgraph run before giving up")
    parser.add_argument("--no-tracemalloc", dest="tracemalloc", action="store_false")
    parser.add_argument("--folder", help="keep the models (and reuse them) in this folder")
    parser.add_argument("--json", help="also write the rows as JSON to this file")
    parser.add_argument("--before", metavar="TREE", help="also measure the xgraph package under TREE (a source "
                        "checkout, e.g. `git worktree add /tmp/before main`), alternating with this one")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall time, or CPU time of each run (steadier when other jobs share the machine)")
    parser.add_argument("--no-plugin", dest="plugin", action="store_false",
                        help="compile without the template plugin (the plugins stage then only creates children)")
    parser.add_argument("--no-floor", dest="floor", action="store_false",
                        help="skip the pure-Python floor runs (the least work any object-per-op compile does)")
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    CLOCK_NAME[0] = args.clock
    if args.worker:
        kind, path, plugin_dir = args.worker
        work = {"baseline": work_baseline, "floor": work_floor}.get(kind)
        row = work(path, args.trace) if work else work_xgraph(path, plugin_dir, args.trace)
        print(json.dumps(row))
        return
    if args.quick:
        args.sizes, args.models, args.repeat = "1000,10000", "chain,transformer", 1
    sizes = [int(s) for s in args.sizes.split(",")]
    families = [f for f in args.models.split(",") if f]
    unknown = sorted(set(families) - set(FAMILIES))
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(FAMILIES)}")
    namings = [n == "named" for n in args.naming.split(",")]
    folder = args.folder or tempfile.mkdtemp(prefix="compile_scale_")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "bench_template.py"), "w", encoding="utf-8") as f:
        f.write(PLUGIN)
    byte_compile(args.before)
    print(f"compile_scale: python {sys.version.split()[0]}, onnx {onnx.__version__}, {os.cpu_count()} cores, "
          f"best of {args.repeat}, {args.clock} clock, {'with' if args.plugin else 'without'} the template plugin, "
          f"models in {folder}\n")
    rows = []
    for n in sizes:
        for family in families:
            for named in namings:
                rows += measure(family, n, named, folder, args)
                print(f"  measured {family} {n} {'named' if named else 'unnamed'}", file=sys.stderr, flush=True)
    print_table(rows)
    print_scaling(rows)
    print_targets(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
