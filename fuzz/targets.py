"""Fuzz targets for xgraph and the invariant each one checks.

Every target turns a seed into one case (deterministically) and runs it. The invariant is
the same everywhere: only `XGraphError` escapes (no IndexError, KeyError, RecursionError,
MemoryError, protobuf errors...), and a failed operation leaves the graph and the files on
disk exactly as they were. Accepted inputs get extra checks (links consistent, subgraph
tree a partition, nothing read from outside the model's folder).

    target = TARGETS["from_onnx"]()
    outcome = target.run(target.case(seed))   # "accepted" / "refused", or raises Finding

Targets: from_onnx (mutated zoo-model bytes), from_onnx_file (mutated models with external
data, loaded from a folder with traps around it), deserialize (mutated .xmodel bytes and
metadata), compile (random option objects, plugins included), plugin_chain (generated
plugins that select at random, misbehave or raise at random points).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import traceback
import types
import weakref
from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph import Graph, XGraphError
from xgraph.ir.links import check_links
from xgraph.plugins import Plugin

from fuzz.mutators import mutate_bytes, mutate_json, mutate_model, random_json

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: The small zoo models the byte-level targets start from.
ZOO_SEEDS = ("squeezenet", "bvlc_alexnet", "zfnet512")
SECRET = b"XGRAPH-FUZZ-SECRET!"


class Finding(AssertionError):
    """An invariant broke: an exception other than XGraphError escaped, or state changed on failure."""

    def __init__(self, kind: str, message: str, detail: str = ""):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.detail = detail


def escaped(what: str, e: BaseException) -> Finding:
    """A Finding for an exception that is not an XGraphError."""
    tb = "".join(traceback.format_exception(type(e), e, e.__traceback__, limit=-6))
    return Finding(f"escaped {type(e).__name__}", f"{what}: {str(e)[:300]}", tb)


def call(what: str, fn: Callable[[], Any]) -> tuple[bool, Any]:
    """(True, result) or (False, the XGraphError); any other exception becomes a Finding."""
    try:
        return True, fn()
    except XGraphError as e:
        return False, e
    except KeyboardInterrupt:
        raise
    except Finding:
        raise
    except BaseException as e:  # the invariant under test: nothing but XGraphError escapes
        raise escaped(what, e) from None


# -- graph state, to check "a failed operation changes nothing" ---------------------------------------
def check_disk(before: dict, after: dict, what: str) -> None:
    """A Finding naming the files that differ between two snapshots of a folder, if any do."""
    if after != before:
        changed = sorted(k for k in set(after) | set(before) if after.get(k) != before.get(k))
        raise Finding("disk changed", f"{what} changed files: {changed}")


def _norm(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, tuple(_norm(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _norm(x)) for k, x in v.items())))
    if isinstance(v, (onnx.GraphProto, onnx.TensorProto, onnx.SparseTensorProto, onnx.TypeProto)):
        return (type(v).__name__, v.SerializeToString(deterministic=True))
    if isinstance(v, float) and v != v:
        return ("nan",)
    return (type(v).__name__, v)


def graph_state(g: Graph, identity: bool = False) -> tuple:
    """Everything observable about a graph; with `identity`, also which Python objects make it up."""
    ident = (lambda o: id(o)) if identity else (lambda o: None)
    ops = tuple((op.name, op.type, op.domain, tuple(t and t.name for t in op.get_input_tensors()),
                 tuple(t.name for t in op.get_output_tensors()), _norm(op.get_attrs()), ident(op))
                for op in g.get_ops())
    tensors = tuple((t.name, t.shape, str(t.dtype), _norm(t.data) if t.is_const else None,
                     _norm(t.get_attrs()), t.producer and t.producer.name,
                     tuple(sorted(o.name for o in t.consumers)), ident(t)) for t in g.get_tensors())
    tree = []
    for s in g.iter_subgraphs():
        parent = s.get_parent()
        tree.append((s.name, s.depth, parent and parent.name, tuple(sorted(o.name for o in s.get_ops())),
                     _norm(s.get_attrs()), ident(s)))
    return (g.name, _norm(g.get_attrs()), ops, tensors, tuple(sorted(tree, key=repr)),
            tuple(t.name for t in g.get_input_tensors()), tuple(t.name for t in g.get_output_tensors()))


def first_difference(a: tuple, b: tuple) -> str:
    """A short description of where two graph_state tuples differ."""
    parts = ("name", "graph attrs", "ops", "tensors", "subgraph tree", "inputs", "outputs")
    for label, x, y in zip(parts, a, b):
        if x != y:
            if isinstance(x, tuple) and isinstance(y, tuple):
                for i, (u, v) in enumerate(zip(x, y)):
                    if u != v:
                        return f"{label}[{i}]: {str(u)[:150]} != {str(v)[:150]}"
                return f"{label}: {len(x)} entries != {len(y)}"
            return f"{label}: {str(x)[:150]} != {str(y)[:150]}"
    return "no difference"


def check_consistent(g: Graph, what: str) -> None:
    """check_links on an accepted graph; a failure is a Finding (the graph was accepted broken)."""
    try:
        check_links(g)
        g.toposort()
    except Exception as e:
        raise Finding("inconsistent graph", f"{what} accepted a graph that fails check_links: {e}") from None


# -- seed corpora ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def zoo_bytes(name: str) -> bytes:
    """A light zoo model's bytes."""
    return (ZOO / f"light_{name}.onnx").read_bytes()


def feature_model() -> onnx.ModelProto:
    """A small model using what the byte corpora lack: If bodies, Constant, sparse initializer, a function."""
    vi = helper.make_tensor_value_info
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", TensorProto.FLOAT, [4])])
    other = helper.make_graph([helper.make_node("Constant", [], ["e"], value=numpy_helper.from_array(
        np.arange(4, dtype=np.float32), "ce"))], "else", [], [vi("e", TensorProto.FLOAT, [4])])
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.5, 2.5], np.float32), "sv"),
                                       numpy_helper.from_array(np.array([0, 3], np.int64), "si"), [4])
    func = helper.make_function("fz", "AddTwice", ["a", "b"], ["c"],
                                [helper.make_node("Add", ["a", "b"], ["ab"]), helper.make_node("Add", ["ab", "b"], ["c"])],
                                [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other, name="if"),
             helper.make_node("AddTwice", ["y", "sv"], ["z"], domain="fz", name="f"),
             helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones(4, np.float32), "kv"), name="k"),
             helper.make_node("Mul", ["z", "k"], ["out"], name="mul")]
    g = helper.make_graph(nodes, "features", [vi("cond", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [4])],
                          [vi("out", TensorProto.FLOAT, [4])], sparse_initializer=[sparse])
    return helper.make_model(g, functions=[func], opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("fz", 1)])


def small_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax with small random weights; input 'x' (1,3,8,8)."""
    rng = np.random.default_rng(0)
    weights = {"w": rng.standard_normal((4, 3, 3, 3)), "b": rng.standard_normal(4),
               "fc": rng.standard_normal((10, 16)), "fcb": rng.standard_normal(10)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[3, 3], strides=[3, 3]),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], name="fc", transB=1),
             helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])],
                          [numpy_helper.from_array(a.astype(np.float32), n) for n, a in weights.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@functools.lru_cache(maxsize=None)
def onnx_corpus() -> tuple[bytes, ...]:
    """Seed models (bytes) for the ONNX targets."""
    return tuple(zoo_bytes(n) for n in ZOO_SEEDS) + (feature_model().SerializeToString(),)


@functools.lru_cache(maxsize=None)
def onnx_protos() -> tuple[onnx.ModelProto, ...]:
    """The seed models parsed once (mutation works on copies)."""
    out = []
    for b in onnx_corpus():
        m = onnx.ModelProto()
        m.ParseFromString(b)
        out.append(m)
    return tuple(out)


@functools.lru_cache(maxsize=None)
def xmodel_corpus() -> tuple[bytes, ...]:
    """Seed .xmodel files: a compiled zoo model (device/runner attrs) and a graph with every attr tag and a deep tree."""
    from xgraph.ir.onnx.xmodel import to_model_proto
    compiled = xgraph.compile(small_cnn())
    g = Graph.from_onnx(zoo_bytes("bvlc_alexnet"))
    g.set_attr("every_tag", {"n": None, "b": True, "i": 3, "f": float("inf"), "s": "x", "y": b"\x00\xff",
                             "a": np.arange(3, dtype=np.int64), "t": (1, "2"), "l": [1.5, [None]]})
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    kids = root.toposort_child_subgraph()
    half = root.merge_children(set(kids[: len(kids) // 2]))
    half.set_attr("device", "AICORE")
    half.set_attr("runner", {"run": "aicore", "sim": "aicore", "ref": "aicore"})
    half.create_child_subgraph()
    g.get_ops()[0].set_attr("note", "annotation", onnx_type=None)
    g.get_input_tensors()[0].set_attr("layout", "NCHW")
    return tuple(to_model_proto(x).SerializeToString() for x in (compiled, g))


# -- targets ---------------------------------------------------------------------------------------
class Target:
    """One fuzz target: `case(seed)` makes an input, `run(input)` checks the invariant on it."""

    name = ""

    def case(self, seed: int) -> Any:
        """The input for `seed` (deterministic)."""
        raise NotImplementedError

    def run(self, case: Any) -> str:
        """'accepted' or 'refused'; raises Finding when an invariant breaks."""
        raise NotImplementedError

    def describe(self, case: Any) -> bytes:
        """The case as bytes, to save next to a finding."""
        return case if isinstance(case, bytes) else repr(case).encode()


class FromOnnx(Target):
    """Graph.from_onnx on mutated bytes of the small zoo models (byte- and structure-level)."""

    name = "from_onnx"

    def case(self, seed: int) -> bytes:
        rng = random.Random(seed)
        corpus = onnx_corpus()
        i = rng.randrange(len(corpus))
        if rng.random() < 0.4:
            return mutate_bytes(corpus[i], rng, list(corpus))
        data = mutate_model(onnx_protos()[i], rng).SerializeToString()
        return mutate_bytes(data, rng) if rng.random() < 0.1 else data

    def run(self, case: bytes) -> str:
        ok, g = call("Graph.from_onnx", lambda: Graph.from_onnx(case))
        if not ok:
            return "refused"
        check_consistent(g, "Graph.from_onnx")
        from xgraph.ir.onnx.xmodel import from_model_proto, to_model_proto
        ok, proto = call("to_model_proto of an imported graph", lambda: to_model_proto(g))
        if ok:
            ok, h = call("from_model_proto of a saved graph",
                         lambda: from_model_proto(onnx.ModelProto.FromString(proto.SerializeToString()), "fuzz"))
            if not ok:
                raise Finding("round trip", f"an imported graph saved as .xmodel does not load back: {h}")
        return "accepted"


class FromOnnxFile(Target):
    """Graph.from_onnx on a path: mutated models with external data, in a folder with traps around it.

    The folder holds weights.bin (the real external data), link.bin (a symlink to a secret
    file outside), hard.bin (a hard link to it) and a sub-folder. Nothing may be read from the
    secret, and no file in or around the folder may change.
    """

    name = "from_onnx_file"

    def __init__(self) -> None:
        self.top = Path(tempfile.mkdtemp(prefix="xgraph-fuzz-"))
        self.folder = self.top / "model"
        self.folder.mkdir()
        (self.folder / "sub").mkdir()
        secret = self.top / "secret.bin"
        secret.write_bytes(SECRET * 4096)
        try:
            (self.folder / "link.bin").symlink_to(secret)
            os.link(secret, self.folder / "hard.bin")
        except OSError:  # no links on this file system: those traps are skipped
            pass
        from onnx.external_data_helper import convert_model_to_external_data
        model = onnx.ModelProto()
        model.ParseFromString(zoo_bytes("zfnet512"))
        weights = [numpy_helper.from_array(np.arange(n, dtype=np.float32) + 1, f"extra{n}") for n in (16, 64)]
        model.graph.initializer.extend(weights)
        model.graph.node.extend([helper.make_node("Identity", [w.name], [w.name + "_out"]) for w in weights])
        convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
        from onnx.external_data_helper import write_external_data_tensors
        model = write_external_data_tensors(model, str(self.folder))
        self.seed_model = model
        self.model_path = self.folder / "model.onnx"
        self.model_path.write_bytes(model.SerializeToString())
        self.before = self._disk_state()
        weakref.finalize(self, shutil.rmtree, self.top, True)

    def _disk_state(self) -> dict[str, tuple]:
        state = {}
        for p in sorted(self.top.rglob("*")):
            if p == self.model_path:
                continue
            st = p.lstat()
            digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None
            state[str(p.relative_to(self.top))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
        return state

    def case(self, seed: int) -> bytes:
        rng = random.Random(seed)
        data = mutate_model(self.seed_model, rng).SerializeToString()
        return mutate_bytes(data, rng) if rng.random() < 0.15 else data

    def run(self, case: bytes) -> str:
        self.model_path.write_bytes(case)
        ok, g = call("Graph.from_onnx(path)", lambda: Graph.from_onnx(self.model_path))
        check_disk(self.before, self._disk_state(), "loading a model")
        if not ok:
            return "refused"
        check_consistent(g, "Graph.from_onnx(path)")
        for t in g.get_tensors():
            if t.is_const and SECRET[:8] in np.ascontiguousarray(t.data).tobytes():
                raise Finding("traversal", f"tensor {t.name!r} holds bytes of the secret file outside the model folder")
        return "accepted"


class Deserialize(Target):
    """Graph.deserialize on mutated .xmodel bytes: JSON metadata edits, protobuf edits, byte edits.

    Accepted graphs must be consistent, and creating runners or a report from them may only
    fail with an XGraphError (runner names resolve through the registry only).
    """

    name = "deserialize"

    def __init__(self, check_report: bool = True) -> None:
        #: Also build `xgraph.report` of accepted graphs (a consumer of loaded attrs outside the IR).
        self.check_report = check_report

    def case(self, seed: int) -> bytes:
        rng = random.Random(seed)
        corpus = xmodel_corpus()
        data = corpus[rng.randrange(len(corpus))]
        r = rng.random()
        if r < 0.25:
            return mutate_bytes(data, rng, list(corpus))
        model = onnx.ModelProto.FromString(data)
        if r < 0.45:
            return mutate_model(model, rng).SerializeToString()
        from xgraph.ir.onnx.xmodel import META_KEY
        entry = next(p for p in model.metadata_props if p.key == META_KEY)
        meta = json.loads(entry.value)
        ops = [n.name for n in model.graph.node]
        entry.value = json.dumps(mutate_json(meta, rng, ops))
        return model.SerializeToString()

    def run(self, case: bytes) -> str:
        ok, g = call("Graph.deserialize", lambda: Graph.deserialize(case))
        if not ok:
            return "refused"
        check_consistent(g, "Graph.deserialize")
        before = graph_state(g, identity=True)
        root = g.get_root_subgraph()
        modules = set(sys.modules)
        named: set[str] = set()
        for sg in list(root.get_children())[:4]:
            runners = sg.get_attr("runner") if sg.has_attr("runner") else None
            if isinstance(runners, dict):
                named |= {str(v) for v in runners.values()}
            ok, runner = call(f"create_runner({sg.name!r})", lambda: xgraph.Runner.create_runner(sg, "run", "numpy"))
            if ok:
                runner.close()
        # xgraph may import its own dependencies lazily; a module named in the file must never load
        imported = {m for m in set(sys.modules) - modules if m in named or m.split(".")[0] in named}
        if imported:
            raise Finding("import", f"creating runners from a loaded file imported {sorted(imported)}")
        if self.check_report and root.get_children_num():
            call("xgraph.report", lambda: xgraph.report(g))
        if graph_state(g, identity=True) != before:
            raise Finding("mutation", "creating runners or a report changed the loaded graph")
        return "accepted"


# -- generated plugins -----------------------------------------------------------------------------
RAISE_POINTS = ("get_plugin", "get_plugin_name", "get_device", "get_runner", "partition",
                "partition_after_merge", "compile_first", "compile_last", "iterate")
RETURNS = ("list", "none", "single", "duplicate", "root", "assigned", "other_graph", "junk_item", "generator", "stale")
COMPILE_ACTIONS = ("own_attr", "op_annotation", "create_child", "graph_attr", "other_subgraph_attr", "remove_op",
                   "tensor_attr", "merge_rest")
EXCEPTIONS = (ValueError, KeyError, IndexError, TypeError, RecursionError, MemoryError, ZeroDivisionError,
              RuntimeError, xgraph.XGraphError)
PLUGIN_MODULES = tuple(f"xgraph_fuzz_plugin_{i}" for i in range(4))


def plugin_script(rng: random.Random) -> dict[str, Any]:
    """What one generated plugin will do: where it raises, what it selects and returns, what compile touches."""
    def sometimes(good, bad, p: float = 0.08):
        return rng.choice(bad) if rng.random() < p else rng.choice(good)

    return {
        "raise_at": sometimes((None,), RAISE_POINTS, 0.2),
        "exception": rng.randrange(len(EXCEPTIONS)),
        "name": sometimes(("p", "x" * 200), ("", None, 3)),
        "device": sometimes(("FUZZ", "SMFC"), ("", None, ["A"])),
        "runner": sometimes(({"run": "cpu"}, {"run": "cpu", "sim": "cpu", "ref": "cpu"}, {"run": "null"},
                             {"run": "unregistered"}), ({"sim": "cpu"}, {"run": ""}, {"fast": "cpu"}, "cpu", None)),
        "types": rng.sample(("Conv", "Relu", "MaxPool", "Gemm", "LRN", "Softmax", "Reshape", "Add", "Mul",
                             "Neg", "Constant", "Dropout", "Flatten"), rng.randint(1, 3)),
        "take": rng.choice((1, 2, 3, None)),
        "merge": rng.random() < 0.6,
        "returns": sometimes(("selected",), RETURNS, 0.15),
        "compile": sometimes(("nothing",), COMPILE_ACTIONS, 0.2),
    }


class GeneratedPlugin(Plugin):
    """A plugin driven by a script; every choice depends only on the script and the graph."""

    def __init__(self, script: dict[str, Any], other_graph: Graph):
        self.s = script
        self.other_graph = other_graph
        self.compiled = 0

    def _maybe_raise(self, point: str) -> None:
        if self.s["raise_at"] == point:
            raise EXCEPTIONS[self.s["exception"]](f"generated failure at {point}")

    def get_plugin_name(self):
        self._maybe_raise("get_plugin_name")
        return self.s["name"] if self.s["name"] != "p" else super().get_plugin_name()

    def get_device(self):
        self._maybe_raise("get_device")
        return self.s["device"]

    def get_runner(self):
        self._maybe_raise("get_runner")
        return self.s["runner"]

    def partition(self, graph):
        from xgraph.partition import filter_by_type, merge_subgraph
        self._maybe_raise("partition")
        picked = set()
        for t in self.s["types"]:
            picked |= filter_by_type(graph, t)
        ordered = sorted(picked, key=lambda sg: min(op.name for op in sg.get_ops()))
        if self.s["take"] is not None:
            ordered = ordered[: self.s["take"]]
        chosen = set(ordered)
        stale = set(chosen)
        if self.s["merge"] and chosen:
            chosen = merge_subgraph(chosen)
        self._maybe_raise("partition_after_merge")
        root = graph.get_root_subgraph()
        kind = self.s["returns"]
        first = sorted(chosen, key=lambda sg: sg.name)[:1]
        if kind == "list":
            return sorted(chosen, key=lambda sg: sg.name)
        if kind == "none":
            return None
        if kind == "single":
            return first[0] if first else set()
        if kind == "duplicate":
            return first * 2
        if kind == "root":
            return chosen | {root}
        if kind == "assigned":
            taken = [c for c in root.get_children() if c.has_attr("device")]
            return chosen | set(taken[:1])
        if kind == "other_graph":
            return {self.other_graph.get_root_subgraph()}
        if kind == "junk_item":
            return [*chosen, "subgraph_conv"]
        if kind == "generator":
            return (sg for sg in sorted(chosen, key=lambda sg: sg.name))
        if kind == "stale":
            return stale if self.s["merge"] and len(stale) > 1 else chosen
        if kind == "selected" and self.s["raise_at"] == "iterate":
            return _RaisingIterable(chosen)
        return chosen

    def compile(self, subgraph):
        self.compiled += 1
        if self.compiled == 1:
            self._maybe_raise("compile_first")
        graph = subgraph.graph
        action = self.s["compile"]
        if action == "own_attr":
            subgraph.set_attr("fuzz_blob", {"n": self.compiled, "data": np.arange(3)})
        elif action == "op_annotation":
            next(iter(sorted(subgraph.get_ops()))).set_attr("fuzz_note", "x", onnx_type=None)
        elif action == "create_child" and subgraph.is_leaf:
            subgraph.create_child_subgraph()
        elif action == "graph_attr":
            graph.set_attr("fuzz_touched", True)
        elif action == "other_subgraph_attr":
            others = sorted((c for c in graph.get_root_subgraph().get_children() if c is not subgraph),
                            key=lambda c: c.name)
            if others:
                others[0].set_attr("fuzz_touched", True)
        elif action == "remove_op":
            ends = [op for op in sorted(subgraph.get_ops()) if not op.get_fanout_ops()
                    and op.get_output_tensor() not in graph.get_output_tensors()]
            if ends:
                graph.remove_op(ends[0])
        elif action == "tensor_attr":
            t = graph.get_input_tensors()[0] if graph.get_input_tensors() else None
            if t is not None:
                t.set_attr("fuzz_touched", 1)
        elif action == "merge_rest":
            from xgraph.partition import filter, merge_subgraph
            rest = filter(graph, lambda subgraphs: set(sorted(subgraphs, key=lambda c: c.name)[:2]))
            if len(rest) > 1:
                merge_subgraph(rest)
        self._maybe_raise("compile_last")


class _RaisingIterable:
    """An iterable whose iteration fails half way: a plugin returning a broken container."""

    def __init__(self, items):
        self.items = sorted(items, key=lambda sg: sg.name)

    def __iter__(self):
        yield from self.items[:1]
        raise RuntimeError("generated failure while iterating the returned subgraphs")


def install_plugins(scripts: list[dict[str, Any]], other_graph: Graph) -> list[str]:
    """Put generated plugins in sys.modules under fixed names; returns the names to ask for."""
    names = []
    for i, script in enumerate(scripts):
        name = PLUGIN_MODULES[i]
        module = sys.modules.get(name)
        if module is None:
            module = types.ModuleType(name)
            module.__file__ = None
            sys.modules[name] = module

        def get_plugin(script=script):
            if script["raise_at"] == "get_plugin":
                raise EXCEPTIONS[script["exception"]]("generated failure in get_plugin")
            return GeneratedPlugin(script, other_graph)

        module.get_plugin = get_plugin
        names.append(name)
    return names


@functools.lru_cache(maxsize=None)
def chain_models() -> tuple[bytes, ...]:
    """Small models for the chain and compile targets (compile uses the first two: no large weights to fold)."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Neg", ["x"], ["b"], name="b"),
             helper.make_node("Add", ["a", "b"], ["c"], name="c"), helper.make_node("Mul", ["c", "a"], ["d"], name="d"),
             helper.make_node("Relu", ["d"], ["e"], name="e"), helper.make_node("Neg", ["c"], ["f"], name="f"),
             helper.make_node("Add", ["e", "f"], ["y"], name="g")]
    branchy = helper.make_model(helper.make_graph(nodes, "branchy", [vi("x", TensorProto.FLOAT, [1, 4])],
                                                  [vi("y", TensorProto.FLOAT, [1, 4])]),
                                opset_imports=[helper.make_opsetid("", 17)])
    return (branchy.SerializeToString(), small_cnn().SerializeToString(), zoo_bytes("zfnet512"))


def fresh_chain_graph(index: int, pre_assign: bool) -> Graph:
    """A graph ready for plugins (one child per op), optionally with one subgraph already assigned."""
    g = Graph.from_onnx(chain_models()[index])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    if pre_assign:
        first = root.toposort_child_subgraph()[0]
        first.set_attr("device", "EARLIER")
        first.set_attr("runner", {"run": "cpu"})
    return g


class PluginChain(Target):
    """run_plugin_chain with 1-3 generated plugins; checked against running them one at a time.

    Each plugin is all-or-nothing: run alone, a failing plugin leaves the graph exactly as it
    was (same objects). Run as a chain, the chain fails at the same plugin and leaves the
    graph as the earlier plugins left it.
    """

    name = "plugin_chain"

    def case(self, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        return {"model": rng.randrange(len(chain_models())), "pre_assign": rng.random() < 0.3,
                "scripts": [plugin_script(rng) for _ in range(rng.randint(1, 3))]}

    def run(self, case: dict[str, Any]) -> str:
        from xgraph.plugins.chain import run_plugin_chain
        other = Graph.from_onnx(chain_models()[0])
        other.get_root_subgraph().create_child_subgraph()
        names = install_plugins(case["scripts"], other)
        stepwise = fresh_chain_graph(case["model"], case["pre_assign"])
        failed_at = None
        for i, name in enumerate(names):
            before = graph_state(stepwise, identity=True)
            ok, err = call(f"run_plugin_chain([{name}])", lambda: run_plugin_chain(stepwise, [name]))
            check_consistent(stepwise, "run_plugin_chain")
            if not ok:
                after = graph_state(stepwise, identity=True)
                if after != before:
                    raise Finding("not restored", f"plugin {i} failed ({str(err)[:120]}) but changed the graph: "
                                  f"{first_difference(before, after)}")
                failed_at = i
                break
            self._check_assigned(stepwise)
        whole = fresh_chain_graph(case["model"], case["pre_assign"])
        ok, err = call("run_plugin_chain(all)", lambda: run_plugin_chain(whole, names))
        check_consistent(whole, "run_plugin_chain")
        if ok != (failed_at is None):
            raise Finding("chain disagrees", f"plugins one by one {'failed at %s' % failed_at if failed_at is not None else 'succeeded'}"
                          f", as one chain {'succeeded' if ok else 'failed: ' + str(err)[:160]}")
        a, b = graph_state(stepwise), graph_state(whole)
        if a != b:
            raise Finding("chain disagrees", f"the chain left a different graph than plugins one by one: {first_difference(a, b)}")
        return "accepted" if ok else "refused"

    @staticmethod
    def _check_assigned(g: Graph) -> None:
        for child in g.get_root_subgraph().get_children():
            if child.has_attr("device") and not isinstance(child.get_attr("runner"), dict):
                raise Finding("bad attrs", f"subgraph {child.name!r} got device without a runner dict")


class Compile(Target):
    """xgraph.compile with random option objects (plugins included); the input is never changed."""

    name = "compile"

    def case(self, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        return {"model": rng.randrange(2), "as": rng.choice(("graph", "graph", "bytes", "proto")),
                "options": random_options(rng), "plugin_path": rng.choice((None, None, [], ["/nonexistent"], "/tmp")),
                "scripts": [plugin_script(rng) for _ in range(2)]}

    def run(self, case: dict[str, Any]) -> str:
        g = Graph.from_onnx(chain_models()[case["model"]])
        other = Graph.from_onnx(chain_models()[0])
        other.get_root_subgraph().create_child_subgraph()
        install_plugins(case["scripts"], other)
        source: Any = g
        if case["as"] == "bytes":
            source = chain_models()[case["model"]]
        elif case["as"] == "proto":
            source = onnx.ModelProto.FromString(chain_models()[case["model"]])
        before = graph_state(g, identity=True)
        proto_before = source.SerializeToString() if case["as"] == "proto" else None
        ok, compiled = call("xgraph.compile", lambda: xgraph.compile(source, case["options"], case["plugin_path"]))
        if graph_state(g, identity=True) != before:
            raise Finding("input changed", f"compile changed the graph it was given: "
                          f"{first_difference(before, graph_state(g, identity=True))}")
        if proto_before is not None and source.SerializeToString() != proto_before:
            raise Finding("input changed", "compile changed the ModelProto it was given")
        if not ok:
            return "refused"
        check_consistent(compiled, "xgraph.compile")
        root = compiled.get_root_subgraph()
        for child in root.get_children():
            if not child.has_attr("device") or not child.has_attr("runner"):
                raise Finding("unplaced", f"compiled subgraph {child.name!r} has no device/runner")
        if compiled.get_op_num() and root.is_leaf:
            raise Finding("unplaced", "compile returned a graph without device subgraphs")
        return "accepted"


class CompileModel(Target):
    """xgraph.compile on mutated small models: a hostile file must fail with an XGraphError at any stage."""

    name = "compile_model"

    def case(self, seed: int) -> bytes:
        rng = random.Random(seed)
        models = [onnx.ModelProto.FromString(b) for b in chain_models()[:2]] + [feature_model()]
        data = mutate_model(models[rng.randrange(len(models))], rng).SerializeToString()
        return mutate_bytes(data, rng) if rng.random() < 0.1 else data

    def run(self, case: bytes) -> str:
        ok, compiled = call("xgraph.compile(bytes)", lambda: xgraph.compile(case))
        if not ok:
            return "refused"
        check_consistent(compiled, "xgraph.compile")
        return "accepted"


def random_options(rng: random.Random) -> Any:
    """Option objects: mostly dicts of known keys with valid or junk values, sometimes junk whole."""
    r = rng.random()
    if r < 0.08:
        return rng.choice((None, "", "{", "[]", "3", b'{"fallback": "cpu"}', 3.5, ["plugins"], '{"plugins": 1}'))
    if r < 0.12:
        return random_json(rng)
    values = {
        "plugins": lambda: rng.choice(list(PLUGIN_MODULES[:2]) + [",".join(PLUGIN_MODULES[:2]), "", "no_such_plugin",
                                      "os", "../evil", [PLUGIN_MODULES[0]], 3, PLUGIN_MODULES[0] + "," + PLUGIN_MODULES[0]]),
        "devices": lambda: rng.choice(("aicore,cpu", "cpu", "AICORE", "aicpu,dvpp", "gpu", "", "cpu,cpu", ["cpu"], 1)),
        "fallback": lambda: rng.choice(("cpu", "error", "gpu", None, 0)),
        "output_ops": lambda: rng.choice(("a", "c,e", "conv_0", "nope", "", [], ["a", 1])),
        "min_subgraph_ops": lambda: rng.choice((0, 1, 2, 5, 10 ** 6, -1, "3", "x", True, 2.5, None)),
        "precision_mode": lambda: rng.choice(("force_fp16", "allow_fp32_to_fp16", "must_keep_origin_dtype", "fp8", 1)),
        "input_shape": lambda: rng.choice(("x:1,4", "x:2,4", "data_0:1,3,224,224", "x:-1,4", "x:0,4", "x:1e3",
                                           "x:;", "y:1", ":1", {"x": [1, 4]}, {"x": "a"}, 5, "x:99999999999,4")),
    }
    opts: dict[Any, Any] = {}
    for key in rng.sample(sorted(values), rng.randint(0, len(values))):
        opts[key] = values[key]() if rng.random() < 0.9 else random_json(rng)
    if rng.random() < 0.1:
        opts[rng.choice(("plugin", "Devices", "extra", 3))] = "x"
    if rng.random() < 0.3:
        return json.dumps(opts, default=str)
    return opts


TARGETS: dict[str, Callable[[], Target]] = {t.name: t for t in (FromOnnx, FromOnnxFile, Deserialize, Compile,
                                                                 CompileModel, PluginChain)}


def run_case(target: Target, seed: int) -> tuple[str, Finding | None]:
    """(outcome, finding) for one seed: outcome is 'accepted', 'refused' or 'finding'."""
    try:
        case = target.case(seed)
    except Exception as e:  # a mutator bug, not an xgraph finding: report it plainly
        raise RuntimeError(f"{target.name}: building the case for seed {seed} failed") from e
    try:
        return target.run(case), None
    except Finding as f:
        return "finding", f


from fuzz.targets_api import API_TARGETS  # noqa: E402 - they build on the helpers above

TARGETS.update({t.name: t for t in API_TARGETS})

from fuzz.targets_files import FILE_TARGETS  # noqa: E402

TARGETS.update({t.name: t for t in FILE_TARGETS})

from fuzz.targets_inputs import INPUT_TARGETS  # noqa: E402 - they build on the helpers above

TARGETS.update({t.name: t for t in INPUT_TARGETS})
