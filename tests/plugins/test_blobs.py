"""Compiled blobs: stored once in the .xmodel, weightless when shared, checked by their plugin at load."""
from __future__ import annotations

import os
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import GraphError, PluginError
from xgraph.ir.onnx.mapped import origin
from xgraph.ir.onnx.side_file import side_files
from xgraph.plugins.blobs import BlobError

#: A toy vendor SDK: its "compiler" writes the MatMul's weight name (and, embedded, its bytes) into the
#: blob; its version comes from TOYSDK_VERSION; a blob of another minor version is recompiled, of
#: another major version refused.
PLUGIN = textwrap.dedent('''
    import os
    import numpy as np
    import xgraph
    from xgraph.partition import filter_by_type, merge_subgraph
    from xgraph.plugins import Plugin

    COMPILES = []

    def sdk():
        return os.environ.get("TOYSDK_VERSION", "1.0")

    class ToyRunner(xgraph.Runner):
        def __init__(self, subgraph, mode="run"):
            super().__init__(subgraph, mode)
            blob = subgraph.get_blob()
            name, _, payload = blob.tobytes().partition(b"\\0")
            if blob.weights == "shared":
                self.weight = {t.name: t.data for t in subgraph.get_const_tensors()}[name.decode()]
            else:
                self.weight = np.frombuffer(payload, np.float32).reshape(
                    subgraph.get_const_tensors()[0].shape)

        def execute(self, inputs):
            return [inputs[0] @ self.weight]

    xgraph.register_runner("toy", ToyRunner)

    class ToyPlugin(Plugin):
        def __init__(self, weights="shared"):
            self.weights = weights

        def get_plugin_name(self):
            return "toy"

        def get_runner(self):
            return {"run": "toy", "sim": "toy", "ref": "toy"}

        def partition(self, graph):
            return merge_subgraph(filter_by_type(graph, "MatMul"))

        def compile(self, subgraph):
            COMPILES.append(subgraph.name)
            w = subgraph.get_const_tensors()[0]
            data = w.name.encode() + b"\\0" + (w.data.tobytes() if self.weights == "embedded" else b"")
            subgraph.set_blob(data, weights=self.weights, compat=self.blob_compat())

        def blob_compat(self):
            return f"toysdk-{sdk()};opset=17"

        def check_blob(self, compat):
            if os.environ.get("TOYSDK_BROKEN"):
                raise KeyError("boom")
            built = compat.split(";")[0].removeprefix("toysdk-")
            if built == sdk():
                return "ok"
            return "recompile" if built.split(".")[0] == sdk().split(".")[0] else "unsupported"

    def get_plugin(options=None):
        return ToyPlugin(**(options or {}))
''')


@pytest.fixture
def toy(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "toy.py").write_text(PLUGIN)
    monkeypatch.setenv("XGRAPH_PLUGIN_PATH", str(folder))
    monkeypatch.setenv("TOYSDK_VERSION", "1.0")
    rng = np.random.default_rng(0)
    w = rng.standard_normal((256, 256)).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="r")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])], [numpy_helper.from_array(w, "w")]),
        opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = rng.standard_normal((4, 256)).astype(np.float32)
    return path, w, x, tmp_path


def _blob_subgraph(graph):
    return next(sg for sg in graph.get_root_subgraph().get_children() if sg.get_blob() is not None)


def test_set_blob_checks_its_arguments_and_keeps_a_read_only_copy():
    g = xgraph.Graph("g")
    g.create_input("x", [1])
    g.create_op("a", "Relu", inputs=["x"])
    g.get_root_subgraph().create_child_subgraph()
    sg = g.get_leaf_subgraph("a")
    mine = np.arange(4, dtype=np.uint8)
    blob = sg.set_blob(mine, weights="embedded", compat="sdk-1")
    mine[0] = 9
    assert sg.get_blob().tobytes() == bytes([0, 1, 2, 3]) and not blob.data.flags.writeable
    for bad in ({"weights": "both"}, {"compat": ""}):
        with pytest.raises(GraphError, match="subgraph 'subgraph_a'"):
            sg.set_blob(b"x", **{"weights": "shared", "compat": "v", **bad})
    with pytest.raises(GraphError, match="empty"):
        sg.set_blob(b"", compat="v")


def test_a_blob_file_path_is_read(tmp_path):
    g = xgraph.Graph("g")
    g.create_input("x", [1])
    g.create_op("a", "Relu", inputs=["x"])
    g.get_root_subgraph().create_child_subgraph()
    (tmp_path / "out.bin").write_bytes(b"compiled")
    g.get_leaf_subgraph("a").set_blob(tmp_path / "out.bin", compat="v")
    assert g.get_leaf_subgraph("a").get_blob().tobytes() == b"compiled"


def test_the_blob_round_trips_and_the_runner_gets_the_graph_weights_mapped(toy):
    path, w, x, tmp = toy
    compiled = xgraph.compile(path, {"plugins": "toy"})
    out = tmp / "m.xmodel"
    compiled.serialize(out, external_data_threshold=0)
    loaded = xgraph.load(out)
    blob = _blob_subgraph(loaded).get_blob()
    assert blob.compat == "toysdk-1.0;opset=17" and blob.weights == "shared"
    with xgraph.create_graph_runner(loaded) as runner:
        [y] = runner.run({"x": x})
        toy_runner = next(r for r in runner.runners.values() if type(r).__name__ == "ToyRunner")
        assert origin(toy_runner.weight) is not None  # the side file's map, not a copy
        assert [c.verdict for c in runner.blob_checks] == ["ok"]
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)


def test_shared_blobs_keep_no_second_copy_of_the_weights(toy):
    path, w, _, tmp = toy
    sizes = {}
    for weights in ("shared", "embedded"):
        compiled = xgraph.compile(path, {"plugins": "toy", "plugin_options": {"toy": {"weights": weights}}})
        out = tmp / f"{weights}.xmodel"
        compiled.serialize(out)
        sizes[weights] = os.path.getsize(out)
    assert sizes["shared"] < w.nbytes * 1.1 < 2 * w.nbytes < sizes["embedded"]


def test_a_large_blob_goes_to_the_side_file_with_the_weights(toy):
    path, w, _, tmp = toy
    compiled = xgraph.compile(path, {"plugins": "toy", "plugin_options": {"toy": {"weights": "embedded"}}})
    out = tmp / "side.xmodel"
    compiled.serialize(out, external_data_threshold=0)
    assert os.path.getsize(out) < 8192  # both the weight and the blob are in the side file
    (side,) = side_files(out)
    assert os.path.getsize(side) > 2 * w.nbytes
    assert origin(_blob_subgraph(xgraph.load(out)).get_blob().data) is not None


def _saved_then_loaded_under(toy, monkeypatch, version):
    """The toy model compiled with TOYSDK 1.0, saved, and loaded again once TOYSDK is `version`."""
    path, _, _, tmp = toy
    out = tmp / "m.xmodel"
    xgraph.compile(path, {"plugins": "toy"}).serialize(out)
    monkeypatch.setenv("TOYSDK_VERSION", version)
    return xgraph.load(out), out


def test_a_stale_blob_is_recompiled_at_load_and_can_be_saved_back(toy, monkeypatch):
    _, w, x, _ = toy
    loaded, out = _saved_then_loaded_under(toy, monkeypatch, "1.3")
    with xgraph.create_graph_runner(loaded) as runner:
        [check] = runner.blob_checks
        [y] = runner.run({"x": x})
    assert (check.verdict, check.compat, check.now) == ("recompile", "toysdk-1.0;opset=17", "toysdk-1.3;opset=17")
    np.testing.assert_allclose(y, np.maximum(x @ w, 0), rtol=1e-5, atol=1e-5)
    loaded.serialize(out)
    assert _blob_subgraph(xgraph.load(out)).get_blob().compat == "toysdk-1.3;opset=17"
    with xgraph.create_graph_runner(xgraph.load(out)) as runner:
        assert [c.verdict for c in runner.blob_checks] == ["ok"]


def test_an_unsupported_blob_is_one_error_naming_plugin_subgraph_and_both_versions(toy, monkeypatch):
    loaded, _ = _saved_then_loaded_under(toy, monkeypatch, "2.0")
    name = _blob_subgraph(loaded).name
    with pytest.raises(BlobError) as e:
        xgraph.create_graph_runner(loaded)
    message = str(e.value)
    for part in ("plugin 'toy'", repr(name), "toysdk-1.0;opset=17", "toysdk-2.0;opset=17"):
        assert part in message
    assert _blob_subgraph(loaded).get_blob().compat == "toysdk-1.0;opset=17"  # refused: nothing changed


def test_a_check_blob_that_raises_is_a_plugin_error_naming_it(toy, monkeypatch):
    loaded, _ = _saved_then_loaded_under(toy, monkeypatch, "1.0")
    monkeypatch.setenv("TOYSDK_BROKEN", "1")
    with pytest.raises(PluginError, match=r"plugin 'toy'.*check_blob\('toysdk-1.0;opset=17'\) raised KeyError: 'boom'"):
        xgraph.create_graph_runner(loaded)


def test_a_damaged_blob_attr_is_refused_at_load(toy):
    path, _, _, tmp = toy
    compiled = xgraph.compile(path, {"plugins": "toy"})
    sg = _blob_subgraph(compiled)
    sg.set_attr("blob", {"data": "not bytes", "weights": "shared", "compat": "v"})
    out = tmp / "bad.xmodel"
    compiled.serialize(out)
    with pytest.raises(xgraph.XGraphError, match="attr 'blob'"):
        xgraph.load(out)
