"""Fuzz targets for the surfaces people type into: the command lines, the runner API, and
.xmodel files whose attrs were edited by hand.

    cli           random argv for `xcompile` and every `xgraph` sub-command: odd paths (folders,
                  FIFOs, devices, links, names with control characters or markup), junk JSON
                  options, out-of-range numbers. Only exit codes 0/1/2, no traceback, no raw
                  control character in the output, one error line, and no file outside the
                  expected outputs changes (special files stay what they were).
    runner_api    random calls on a graph runner and a subgraph runner with arguments of every
                  type (None, ints, generators, strings, arrays of the wrong dtype/shape, odd job
                  ids and timeouts), and misbehaving runners. Only XGraphError escapes, and after
                  each call a good run still returns the oracle's result.
    xmodel_attrs  a compiled .xmodel whose graph, subgraph and op attrs get random tagged values
                  under the keys xgraph reads (and others); loading refuses it with an XGraphError,
                  or everything that reads attrs (report, views, runner) works.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

import xgraph
from xgraph import Graph

from fuzz.mutators import INTERESTING_INTS, INTERESTING_STRINGS, random_json
from fuzz.targets import Finding, Target, call, check_consistent

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
ODD_TEXT = ("\x1b]0;pwn\x07", "[/nz]", "[bold]x", "x" * 300, "", " ", "-", "--", "\udcff", "a\nb", "é")


def _tiny_model(names=("x", "y")) -> onnx.ModelProto:
    x, y = names
    nodes = [helper.make_node("Relu", [x], ["r"], name="relu"), helper.make_node("Neg", ["r"], [y], name="neg")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _oracle(x: np.ndarray) -> np.ndarray:
    return -np.maximum(x, 0)


# -- cli ---------------------------------------------------------------------------------------------
class _Sandbox:
    """A temporary folder with a model, a compiled model, inputs and every kind of special file."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="xgraph-fuzz-cli-"))
        (self.root / "m.onnx").write_bytes(_tiny_model().SerializeToString())
        xgraph.compile(_tiny_model()).serialize(self.root / "m.xmodel")
        np.save(self.root / "x.npy", np.ones((1, 4), np.float32))
        np.save(self.root / "bad.npy", np.ones((3,), np.int64))
        (self.root / "dir").mkdir()
        os.mkfifo(self.root / "fifo")
        (self.root / "link").symlink_to(self.root / "m.onnx")
        (self.root / "dangling").symlink_to(self.root / "nowhere")
        if os.geteuid() == 0:
            os.mknod(self.root / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        (self.root / "junk.onnx").write_bytes(b"not a model")

    def snapshot(self) -> dict[str, tuple]:
        out = {}
        for p in self.root.rglob("*"):
            st = os.lstat(p)
            body = p.read_bytes() if stat.S_ISREG(st.st_mode) else None
            out[str(p.relative_to(self.root))] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), body)
        return out


@contextlib.contextmanager
def _captured():
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        yield out, err


PATHS = ("m.onnx", "m.xmodel", "junk.onnx", "dir", "fifo", "link", "dangling", "null", "missing.onnx", ".", "/",
         "", "x[/y].onnx", "dir/", "m.onnx\x1b[2J", "../m.onnx")
OUTPUTS = ("out.xmodel", "out.json", "out.html", "out.svg", "out.txt", "outdir", "dir", "fifo", "null", "link",
           "dangling", "m.onnx", "missing/out.xmodel", "o" * 250 + ".xmodel", "", "x" * 300)
NUMBERS = ("0", "1", "-1", "3", "nan", "inf", "-inf", "1e400", "9" * 60, "0x10", "1.5", "", "abc")
JSON = ('{"plugins": "nope"}', '{"devices": "cpu"}', '{"fallback": "error"}', "[" * 100 + "]" * 100, "{",
        '{"input_shape": {"x": [1e400, 4]}}', '{"input_shape": "x:1,4"}', '{"min_subgraph_ops": ' + "9" * 50 + "}",
        "NaN", '{"x": Infinity}', "")
SUBCOMMANDS = ("inspect", "dump", "svg", "html", "run", "verify", "bench", "plugins")
#: flag -> (sensible values, odd values)
VALUES = {
    "-o": (("out.xmodel", "outdir", "o" * 250 + ".xmodel"), OUTPUTS), "--report": (("out.json", "out.html"), OUTPUTS),
    "--options": (('{"devices": "cpu"}', '{"fallback": "cpu"}', '{"input_shape": "x:1,4"}'), JSON),
    "--seed": (("0", "7", str(2 ** 64)), NUMBERS), "--rtol": (("1e-4", "0"), NUMBERS), "--atol": (("1e-6",), NUMBERS),
    "--runs": (("1", "2"), NUMBERS), "--warmup": (("0", "1"), NUMBERS), "--jobs": (("1", "2"), NUMBERS),
    "--mode": (("run", "sim", "ref"), ("x", "")), "--kernels": (("numpy", "auto"), ("gpu", "")),
    "--input": (("x=x.npy", "x.npy"), ("x=bad.npy", "x=fifo", "x=dir", "x=null", "nope=x.npy", "x=missing.npy",
                                       "=x.npy", "x=junk.onnx")),
    "--trace": (("out.json",), OUTPUTS), "--plugin-path": (("dir",), ("fifo", "/nonexistent", "")),
}
FLAGS = {
    "xcompile": ("-o", "--options", "--report", "-q", "--plugin-path"),
    "inspect": ("--json", "--compile", "--options"), "dump": ("--compile", "--options"),
    "svg": ("--compile", "--options"), "html": ("--compile", "--options"),
    "run": ("--input", "--random", "--random", "--seed", "--mode", "--kernels", "-o", "--options"),
    "verify": ("--input", "--seed", "--rtol", "--atol", "--mode", "--kernels", "--options"),
    "bench": ("--runs", "--warmup", "--jobs", "--trace", "--seed", "--mode", "--kernels", "--input"),
    "plugins": ("--plugin-path",),
}


class Cli(Target):
    """Random argv for the two console scripts, in a sandbox folder with traps."""

    name = "cli"

    def __init__(self) -> None:
        self._sandbox: _Sandbox | None = None

    def sandbox(self) -> _Sandbox:
        if self._sandbox is None:
            self._sandbox = _Sandbox()
        return self._sandbox

    def case(self, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        prog = "xcompile" if rng.random() < 0.35 else "xgraph"
        command = "xcompile" if prog == "xcompile" else rng.choice(SUBCOMMANDS + ("nope",))
        argv: list[str] = [] if prog == "xcompile" else [command]
        if command != "plugins":
            argv.append(rng.choice(("m.onnx", "m.xmodel", "link")) if rng.random() < 0.6 else rng.choice(PATHS))
        if command in ("svg", "html", "dump") and rng.random() < 0.9:
            argv.append(rng.choice(OUTPUTS[:5]) if rng.random() < 0.6 else rng.choice(OUTPUTS))
        flags = FLAGS.get(command, ("--bogus",))
        for _ in range(rng.randint(0, 4)):
            flag = rng.choice(flags) if rng.random() < 0.9 else rng.choice(sorted(VALUES) + ["--bogus", "--json"])
            argv.append(flag)
            if flag in VALUES:
                good, odd = VALUES[flag]
                argv.append(rng.choice(good) if rng.random() < 0.6 else rng.choice(odd + ODD_TEXT))
        return {"prog": prog, "argv": argv}

    def run(self, case: dict[str, Any]) -> str:
        from xgraph.cli.main import main as xgraph_main
        from xgraph.cli.xcompile import main as xcompile_main
        box = self.sandbox()
        before = box.snapshot()
        entry = xcompile_main if case["prog"] == "xcompile" else xgraph_main
        cwd = os.getcwd()
        os.chdir(box.root)
        try:
            with _captured() as (out, err):
                try:
                    code = entry(list(case["argv"]))
                except SystemExit as e:  # argparse: usage errors and --help/--version
                    code = e.code if isinstance(e.code, int) else 2
                except BaseException as e:  # the invariant: a CLI never raises out of main()
                    raise Finding(f"escaped {type(e).__name__}", f"{case['prog']} {case['argv']!r}: {str(e)[:200]}")
        finally:
            os.chdir(cwd)
        text = out.getvalue() + err.getvalue()
        if code not in (0, 1, 2):
            raise Finding("exit code", f"{case['prog']} {case['argv']!r} exited {code}")
        if "Traceback" in text:
            raise Finding("traceback", f"{case['prog']} {case['argv']!r} printed a traceback: {text[-300:]}")
        if _CONTROL.search(text):  # the output is not a terminal: not even colours may appear
            raise Finding("raw control", f"{case['prog']} {case['argv']!r} printed a raw control character")
        after = box.snapshot()
        self._check_files(case, before, after)
        self._reset(box, before, after)
        return "accepted" if code == 0 else "refused"

    @staticmethod
    def _check_files(case: dict[str, Any], before: dict, after: dict) -> None:
        named = {a.split("=", 1)[-1] for a in case["argv"]}
        if case["prog"] == "xcompile" and case["argv"]:  # the default output beside the model
            stem = Path(case["argv"][0]).stem
            named |= {f"{stem}.xmodel", f"{stem}.compiled.xmodel"}
        for name, (kind, mode, body) in before.items():
            now = after.get(name)
            if now is None:
                raise Finding("file removed", f"{case['argv']!r} removed {name!r}")
            if now[0] != kind:
                raise Finding("file replaced", f"{case['argv']!r} turned {name!r} into another kind of file")
            if body != now[2] and name not in named:
                raise Finding("file changed", f"{case['argv']!r} changed {name!r}, which it was not asked to write")
        for name in after:
            if name not in before and Path(name).name.startswith(".") and name.endswith(".tmp"):
                raise Finding("temp left", f"{case['argv']!r} left the temporary file {name!r}")

    @staticmethod
    def _reset(box: _Sandbox, before: dict, after: dict) -> None:
        for name in sorted(set(after) - set(before), reverse=True):
            p = box.root / name
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        for name, (kind, mode, body) in before.items():
            if body is not None and after.get(name, (None, None, None))[2] != body:
                (box.root / name).write_bytes(body)


# -- runner API ----------------------------------------------------------------------------------------
def _odd_value(rng: random.Random) -> Any:
    good = np.ones((1, 4), np.float32)
    return rng.choice((None, 3, -1, 2.5, "abc", b"x", [], [good], [good, good], (good,), {"x": good}, {"nope": good},
                       {"x": "abc"}, {"x": None}, iter([good]), (v for v in [good]), np.ones((2, 4), np.float32),
                       np.ones((1, 4), np.int64), np.array(["a"]), np.full((1, 4), np.nan, np.float32), {3: good},
                       [np.ones((1, 4), np.float64)], [[1, 2, 3, 4]], [[[1.0, 2.0, 3.0, 4.0]]], object()))


def _odd_timeout(rng: random.Random) -> Any:
    return rng.choice((None, 0, 0.01, 5, -1, float("nan"), float("inf"), "1", True, [], np.float64(0.5), 10 ** 400))


def _odd_job(rng: random.Random, jobs: list) -> Any:
    choices = [(), (1,), (10 ** 9, 0), -1, 0, 10 ** 30, "1", None, 1.0, True, object()]
    return rng.choice(jobs + choices) if jobs and rng.random() < 0.6 else rng.choice(choices)


class RunnerApi(Target):
    """Random calls on `create_graph_runner` / `Runner.create_runner` objects; the runners keep serving."""

    name = "runner_api"

    def __init__(self) -> None:
        self._graph: Graph | None = None

    def graph(self) -> Graph:
        if self._graph is None:
            self._graph = xgraph.compile(_tiny_model(), {"devices": "cpu"})
        return self._graph

    def case(self, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        return {"seed": seed, "calls": rng.randint(1, 6), "single": rng.random() < 0.3,
                "options": rng.choice(({}, {"max_jobs_in_flight": rng.choice((1, 2, 0, -1, True, "2", 2.0))},
                                       {"job_timeout": _odd_timeout(rng)}, {"block_when_full": rng.choice((True, False))},
                                       {"profile": True})),
                "graph": rng.choice(("graph", "graph", "graph", None, "path", 3, "uncompiled"))}

    def run(self, case: dict[str, Any]) -> str:
        rng = random.Random(case["seed"] + 1)
        source: Any = {"graph": self.graph(), None: None, "path": "m.xmodel", 3: 3,
                       "uncompiled": Graph.from_onnx(_tiny_model())}[case["graph"]]
        if case["single"] and case["graph"] == "graph":
            sg = self.graph().get_root_subgraph().toposort_child_subgraph()[0]
            ok, runner = call("Runner.create_runner", lambda: xgraph.Runner.create_runner(sg, "run", "numpy"))
        else:
            ok, runner = call("create_graph_runner", lambda: xgraph.create_graph_runner(source, **case["options"]))
        if not ok:
            return "refused"
        try:
            jobs: list = []
            x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
            for _ in range(case["calls"]):
                what = rng.randrange(6)
                if what == 0:
                    ok, job = call("execute_async", lambda: runner.execute_async(_odd_value(rng), _odd_value(rng))
                                   if case["single"] else runner.execute_async(_odd_value(rng)))
                    if ok:
                        jobs.append(job)
                elif what == 1:
                    call("wait", lambda: runner.wait(_odd_job(rng, jobs), _odd_timeout(rng)))
                elif what == 2:
                    call("get_error", lambda: runner.get_error(_odd_job(rng, jobs)))
                elif what == 3 and not case["single"]:
                    call("get_outputs", lambda: runner.get_outputs(_odd_job(rng, jobs)))
                elif what == 4:
                    call("run", lambda: runner.run(_odd_value(rng)))
                else:
                    call("get_stats", runner.get_stats)
                # whatever happened, a good run still gives the oracle's answer
                ok, got = call("run (good)", lambda: runner.run([x]))
                if not ok and "exceeded job_timeout" in str(got):  # a tiny job_timeout on a busy host
                    continue
                if not ok:
                    raise Finding("runner broken", f"a good run failed after odd calls: {got}")
                if not np.array_equal(got[0], _oracle(x)):
                    raise Finding("wrong result", f"a good run returned {got[0]!r}")
            for job in jobs:
                call("wait (drain)", lambda: runner.wait(job, 30))
        finally:
            call("close", runner.close)
        return "accepted"


# -- hand-edited .xmodel attrs -----------------------------------------------------------------------
KNOWN_KEYS = ("device", "runner", "memory", "estimated_time_us", "placement_reason", "kernel", "precision",
              "precision_mode", "compile_options", "plugin_runs", "prepare_summary")


def _tagged(rng: random.Random, depth: int = 0) -> list:
    """A random value in the .xmodel JSON tag form (arrays by reference to a reserved initializer)."""
    tag = rng.choice("nbifsyatld" if depth < 3 else "nbifs")
    if tag == "n":
        return ["n", None]
    if tag == "b":
        return ["b", rng.random() < 0.5]
    if tag == "i":
        return ["i", rng.choice(INTERESTING_INTS + (10 ** 400, -(10 ** 30)))]
    if tag == "f":
        return ["f", rng.choice((0.0, -1.5, 1e308, "inf", "-inf", "nan", 12.5))]
    if tag == "s":
        return ["s", rng.choice(INTERESTING_STRINGS + ODD_TEXT + ("host", "device", "CPU", "{}", "[1]", "{\"a\":"))]
    if tag == "y":
        return ["y", "AAEC"]
    if tag == "a":
        return ["a", "xgraph.attr/fuzz"]
    if tag in "tl":
        return [tag, [_tagged(rng, depth + 1) for _ in range(rng.randint(0, 3))]]
    keys = rng.sample(("run", "sim", "ref", "name", "device", "subgraphs", "x"), rng.randint(0, 3))
    return ["d", {k: _tagged(rng, depth + 1) for k in keys}]


class XmodelAttrs(Target):
    """A compiled .xmodel with random values under known (and other) keys of graph, subgraph and op attrs."""

    name = "xmodel_attrs"

    def __init__(self) -> None:
        self._base: bytes | None = None

    def base(self) -> bytes:
        if self._base is None:
            from xgraph.ir.attribute_values import array_to_tensor
            from xgraph.ir.onnx.xmodel import to_model_proto
            model = to_model_proto(xgraph.compile(_tiny_model(), {"devices": "aicore,cpu"}))
            model.graph.initializer.append(array_to_tensor(np.arange(3, dtype=np.float32), "xgraph.attr/fuzz"))
            self._base = model.SerializeToString()
        return self._base

    def case(self, seed: int) -> bytes:
        from xgraph.ir.onnx.xmodel import META_KEY
        rng = random.Random(seed)
        model = onnx.ModelProto.FromString(self.base())
        entry = next(p for p in model.metadata_props if p.key == META_KEY)
        meta = json.loads(entry.value)
        places = [meta["graph"]["attrs"], *(c.setdefault("attrs", {}) for c in meta["tree"].get("children", []))]
        ops = [n.name for n in model.graph.node]
        for _ in range(rng.randint(1, 3)):
            key = rng.choice(KNOWN_KEYS) if rng.random() < 0.85 else rng.choice(("note", "", "x" * 100))
            if rng.random() < 0.4:
                meta["op_annotations"].setdefault(rng.choice(ops), {})[key] = _tagged(rng)
            else:
                rng.choice(places)[key] = _tagged(rng)
        entry.value = json.dumps(meta)
        return model.SerializeToString()

    def run(self, case: bytes) -> str:
        ok, g = call("xgraph.load", lambda: xgraph.load(case))
        if not ok:
            return "refused"
        check_consistent(g, "xgraph.load")
        from xgraph.view.html import render_html
        from xgraph.view.picture import render_svg
        from xgraph.view.text import dump_text, inspect_data, inspect_text
        for what, fn in (("report", lambda: xgraph.report(g)), ("inspect_text", lambda: inspect_text(g)),
                         ("inspect_data", lambda: json.dumps(inspect_data(g))), ("dump_text", lambda: dump_text(g)),
                         ("render_svg", lambda: render_svg(g)), ("render_html", lambda: render_html(g))):
            call(what, fn)
        ok, runner = call("create_graph_runner", lambda: xgraph.create_graph_runner(g, kernels="numpy"))
        if ok:
            try:
                x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
                ok, got = call("run", lambda: runner.run({"x": x}))
                if ok and not np.allclose(got[0], _oracle(x)):
                    raise Finding("wrong result", f"a hand-edited attr changed the result: {got[0]!r}")
            finally:
                runner.close()
        return "accepted"


API_TARGETS = (Cli, RunnerApi, XmodelAttrs)

__all__ = ["API_TARGETS", "Cli", "RunnerApi", "XmodelAttrs"]
