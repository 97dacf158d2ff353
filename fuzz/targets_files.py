"""Fuzz targets for what sits around an .xmodel: its side file, and the gear records in its metadata.

- `side_file`: a valid pair in a folder with traps (a symlink and a hard link to a secret outside,
  a sub-folder, another save's side file); each case mutates the side file's bytes, its name or
  kind (link, folder, FIFO, hard link), the token, or the locations the .xmodel names. Loading
  must give a graph or an XGraphError, read nothing of the secret and change no file; a graph
  that loads must save again as a pair (nothing else left beside it) that loads to the same weights.
- `gears_meta`: a compiled model with two gears; each case mutates the ``xgraph.gears`` record,
  a gear's function or its own ``xgraph.meta``. Loading must give a graph or an XGraphError, and
  a loaded graph's gear runner must run each listed gear or fail with an XGraphError.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph import Graph

from fuzz.mutators import INTERESTING_STRINGS, mutate_bytes, mutate_json, mutate_model, random_json
from fuzz.targets import Finding, Target, call, check_consistent, check_disk

SECRET = b"SECRET-SIDE!"
KINDS = ("file", "file", "file", "file", "missing", "symlink", "folder", "fifo", "hardlink", "other_save")


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), f"w{i}") for i in range(3)]
    inits.append(numpy_helper.from_array(np.full((32,), 0.5, np.float32), "bias"))
    nodes, x = [], "x"
    for i in range(3):
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        x = f"m{i}"
    nodes.append(helper.make_node("Add", [x, "bias"], ["y"], name="add"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _folder_state(top: Path, skip: set[Path]) -> dict[str, tuple]:
    state = {}
    for p in sorted(top.rglob("*")):
        if p in skip or any(s in p.parents for s in skip):
            continue
        st = p.lstat()
        if p.is_dir() and not p.is_symlink():  # a folder's times change with the files the case places
            state[str(p.relative_to(top))] = (st.st_mode,)
            continue
        digest = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() and not p.is_symlink() else None
        state[str(p.relative_to(top))] = (st.st_mode, st.st_size, st.st_mtime_ns, digest)
    return state


class SideFile(Target):
    """xgraph.load of an .xmodel whose side file, its name, kind or token is mutated (see the module doc)."""

    name = "side_file"

    def __init__(self) -> None:
        from xgraph.ir.onnx.side_file import side_files
        self.top = Path(tempfile.mkdtemp(prefix="xgraph-fuzz-side-"))
        weakref.finalize(self, shutil.rmtree, self.top, True)
        self.folder, self.saved = self.top / "model", self.top / "saved"
        self.folder.mkdir()
        (self.folder / "sub").mkdir()
        secret = self.top / "secret.bin"
        secret.write_bytes(SECRET * 8192)
        (self.folder / "link.data").symlink_to(secret)
        os.link(secret, self.folder / "hard.data")
        graph = Graph.from_onnx(_mlp())
        graph.serialize(self.folder / "other.xmodel", external_data_threshold=0)  # another save's pair
        (self.other_side,) = side_files(self.folder / "other.xmodel")
        self.model_path = self.folder / "m.xmodel"
        graph.serialize(self.model_path, external_data_threshold=0)
        (side,) = side_files(self.model_path)
        self.side_name, self.side_bytes = side.name, side.read_bytes()
        self.xmodel_bytes = self.model_path.read_bytes()
        self.names = [self.side_name, "m.xmodel.data", "link.data", "hard.data", "sub", "../secret.bin",
                      str(secret), self.other_side.name, "nothing.data", "x" * 300, "a\0b", "sub/../link.data",
                      self.side_name.upper(), "./" + self.side_name]
        self.before = _folder_state(self.top, {self.model_path, self.folder / self.side_name, self.saved})

    def case(self, seed: int) -> dict[str, Any]:
        rng = random.Random(seed)
        case: dict[str, Any] = {"xmodel": self.xmodel_bytes, "side": self.side_bytes, "kind": "file"}
        for _ in range(rng.randint(1, 2)):
            r = rng.random()
            if r < 0.3:
                case["side"] = mutate_bytes(case["side"], rng)
            elif r < 0.45:
                case["kind"] = rng.choice(KINDS)
            elif r < 0.75:
                case["xmodel"] = self._edit_references(onnx.ModelProto.FromString(case["xmodel"]), rng)
            elif r < 0.9:
                case["xmodel"] = self._edit_record(onnx.ModelProto.FromString(case["xmodel"]), rng)
            else:
                case["xmodel"] = mutate_model(onnx.ModelProto.FromString(case["xmodel"]), rng).SerializeToString()
        return case

    def _edit_references(self, model: onnx.ModelProto, rng: random.Random) -> bytes:
        """Other locations, offsets or lengths in the external-data entries (one tensor, or all)."""
        tensors = [t for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL and t.external_data]
        if not tensors:  # an earlier edit left no reference to aim at
            return model.SerializeToString()
        for t in tensors if rng.random() < 0.3 else [rng.choice(tensors)]:
            entry = rng.choice(list(t.external_data))
            if entry.key == "location":
                entry.value = rng.choice(self.names)
            else:
                entry.value = rng.choice(["0", "16", "-1", "4096", "99999999999", "", "1e3", str(rng.randrange(1 << 16))])
            if rng.random() < 0.1:
                t.data_location = TensorProto.DEFAULT
        return model.SerializeToString()

    def _edit_record(self, model: onnx.ModelProto, rng: random.Random) -> bytes:
        """The "side_file" record of the metadata: its token, location or size, or the whole record."""
        entry = next((p for p in model.metadata_props if p.key == "xgraph.meta"), None)
        try:
            meta = json.loads(entry.value) if entry is not None else None
        except ValueError:  # an earlier edit broke the JSON: nothing left to aim at
            meta = None
        if not isinstance(meta, dict):
            return model.SerializeToString()
        record = meta.get("side_file")
        key = rng.choice(["token", "location", "bytes", None]) if isinstance(record, dict) else None
        if key is None and "side_file" in meta and rng.random() < 0.3:
            del meta["side_file"]
        elif key is None:
            meta["side_file"] = random_json(rng)
        elif key == "token":
            token = record.get("token") if isinstance(record.get("token"), str) else ""
            record["token"] = rng.choice([token[::-1], "00" * 16, "", token.upper(), "zz", token + "00", random_json(rng)])
        else:
            record[key] = rng.choice([*self.names, *INTERESTING_STRINGS, random_json(rng)])
        entry.value = json.dumps(meta)
        return model.SerializeToString()

    def _place(self, case: dict[str, Any]) -> None:
        side = self.folder / self.side_name
        if side.is_dir() and not side.is_symlink():
            shutil.rmtree(side)
        else:
            side.unlink(missing_ok=True)
        kind = case["kind"]
        if kind == "file":
            side.write_bytes(case["side"])
        elif kind == "symlink":
            side.symlink_to(self.top / "secret.bin")
        elif kind == "folder":
            side.mkdir()
        elif kind == "fifo":
            os.mkfifo(side)
        elif kind == "hardlink":
            os.link(self.top / "secret.bin", side)
        elif kind == "other_save":
            side.write_bytes(self.other_side.read_bytes())
        self.model_path.write_bytes(case["xmodel"])

    def run(self, case: dict[str, Any]) -> str:
        self._place(case)
        ok, g = call("xgraph.load(pair)", lambda: xgraph.load(self.model_path))
        check_disk(self.before, _folder_state(self.top, {self.model_path, self.folder / self.side_name, self.saved}),
                   "loading a pair")
        if not ok:
            return "refused"
        check_consistent(g, "xgraph.load(pair)")
        weights = {t.name: np.array(t.data) for t in g.get_tensors() if t.is_const}
        if any(SECRET[:8] in w.tobytes() for w in weights.values()):
            raise Finding("traversal", "a weight holds bytes of the secret file outside the model's folder")
        self._save_again(g, weights)
        return "accepted"

    def _save_again(self, g: Graph, weights: dict[str, np.ndarray]) -> None:
        shutil.rmtree(self.saved, ignore_errors=True)
        self.saved.mkdir()
        out = self.saved / "again.xmodel"
        ok, _ = call("serialize(loaded pair)", lambda: g.serialize(out, external_data_threshold=0))
        if not ok:
            return
        ok, again = call("xgraph.load(saved again)", lambda: xgraph.load(out))
        if not ok:
            raise Finding("save", "a graph loaded from a pair saved to a pair that does not load")
        for name, w in weights.items():
            if not np.array_equal(np.array(again.get_tensor(name).data), w, equal_nan=True):
                raise Finding("save", f"weight {name!r} changed through a save and a load")
        files = sorted(p.name for p in self.saved.iterdir())
        if len(files) > 2:
            raise Finding("temp left", f"saving left more than the pair: {files}")

    def describe(self, case: Any) -> bytes:
        if not isinstance(case, dict):
            return bytes(case)
        return repr({"kind": case["kind"], "side": case["side"][:256], "xmodel": case["xmodel"]}).encode()


class GearsMeta(Target):
    """xgraph.load of a two-gear .xmodel whose gear records, functions or per-gear metadata are mutated."""

    name = "gears_meta"

    def __init__(self) -> None:
        w = numpy_helper.from_array(np.full((1,), 2.0, np.float32), "two")
        g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                               helper.make_node("Mul", ["r", "two"], ["m"], name="mul"),
                               helper.make_node("ReduceSum", ["m"], ["y"], name="sum", keepdims=1)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=[w])
        model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        compiled = xgraph.compile(model, {"input_shape": "x:1,-1", "dynamic_dims": "4;8"})
        top = Path(tempfile.mkdtemp(prefix="xgraph-fuzz-gears-"))
        try:
            compiled.serialize(top / "g.xmodel")
            self.seed = onnx.ModelProto.FromString((top / "g.xmodel").read_bytes())
        finally:
            shutil.rmtree(top, ignore_errors=True)

    def case(self, seed: int) -> bytes:
        rng = random.Random(seed)
        model = onnx.ModelProto()
        model.CopyFrom(self.seed)
        for _ in range(rng.randint(1, 2)):
            r = rng.random()
            if r < 0.45:
                entry = next((p for p in model.metadata_props if p.key == "xgraph.gears"), None)
                if entry is None:
                    continue
                try:
                    record = json.loads(entry.value)
                except ValueError:
                    continue
                names = [gear.get("name", "") for gear in record.get("gears", []) if isinstance(gear, dict)] \
                    if isinstance(record, dict) and isinstance(record.get("gears"), list) else []
                entry.value = json.dumps(mutate_json(record, rng, [n for n in names if isinstance(n, str)] or ["gear0"]))
            elif r < 0.65 and model.functions:
                fn = rng.choice(list(model.functions))
                meta = next((p for p in fn.metadata_props if p.key == "xgraph.meta"), None)
                if meta is not None:
                    try:
                        meta.value = json.dumps(mutate_json(json.loads(meta.value), rng, [n.name for n in fn.node]))
                    except ValueError:
                        pass
            elif r < 0.85 and model.functions:
                self._edit_function(rng.choice(list(model.functions)), rng)
            else:
                model = mutate_model(model, rng)
        return model.SerializeToString()

    @staticmethod
    def _edit_function(fn: onnx.FunctionProto, rng: random.Random) -> None:
        """A gear function's name, inputs, outputs or nodes edited the way a hand edit or a bad tool would."""
        what = rng.choice(["name", "domain", "input", "output", "drop_node", "node_input", "weight_node"])
        if what == "name":
            fn.name = rng.choice(["gear0", "", "gear1", "x" * 300, "gear\x00"])
        elif what == "domain":
            fn.domain = rng.choice(["", "ai.onnx", "xgraph.gearz"])
        elif what in ("input", "output") and getattr(fn, what):
            field = getattr(fn, what)
            field[rng.randrange(len(field))] = rng.choice(["x", "y", "two", "nope", ""])
        elif what == "drop_node" and fn.node:
            del fn.node[rng.randrange(len(fn.node))]
        elif what == "node_input" and fn.node:
            node = rng.choice(list(fn.node))
            if node.input:
                node.input[rng.randrange(len(node.input))] = rng.choice(["x", "two", "r", "missing", ""])
        elif what == "weight_node":
            fn.node.add().CopyFrom(helper.make_node("Constant", [], ["two"], name="xgraph.gear.weight/two",
                                                    value=numpy_helper.from_array(np.ones((3,), np.float32))))

    def run(self, case: bytes) -> str:
        ok, g = call("Graph.deserialize(gears)", lambda: Graph.deserialize(case))
        if not ok:
            return "refused"
        check_consistent(g, "Graph.deserialize(gears)")
        ok, gears = call("get_gears", g.get_gears)
        if not ok or not gears:
            return "accepted"
        ok, runner = call("create_graph_runner(gears)", lambda: xgraph.create_graph_runner(g, kernels="numpy"))
        if not ok:
            return "accepted"
        try:
            for gear in gears:
                feeds = {}
                for name, shape in gear.input_shapes.items():
                    dims = [d if isinstance(d, int) and 0 <= d <= 64 else 1 for d in shape]
                    feeds[name] = np.ones(dims, np.float32)
                call(f"run({gear.name})", lambda: runner.run(feeds))
        finally:
            runner.close()
        return "accepted"


FILE_TARGETS = (SideFile, GearsMeta)

__all__ = ["FILE_TARGETS", "GearsMeta", "SideFile"]
