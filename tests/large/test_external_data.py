"""External data without copies: weights mapped from their data file on import, never copied by
compile, and .xmodel files that keep large weights in a side file (forced here with a small
`external_data_threshold`, so the models stay tiny)."""
from __future__ import annotations

import mmap
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import ModelFileError
from xgraph.ir.onnx.mapped import is_mapped, origin

N = 64  # 64x64 float32 weights: 16 KiB each, above the mapping minimum


def mlp_model(layers: int = 3, n: int = N, seed: int = 0) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """x -> (MatMul w_i -> Relu) * layers, with a small inline bias to keep a non-mapped weight around."""
    rng = np.random.default_rng(seed)
    weights = [(rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(layers)]
    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
    inits.append(numpy_helper.from_array(np.full((n,), 0.5, np.float32), "bias"))
    nodes, x = [], "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    nodes.append(helper.make_node("Add", [x, "bias"], ["y"], name="add_bias"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), weights


def oracle(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    for w in weights:
        x = np.maximum(x @ w, 0)
    return x + np.float32(0.5)


@pytest.fixture
def external_model(tmp_path):
    model, weights = mlp_model()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="mlp.onnx.data",
              size_threshold=1024)
    return path, weights


def _weights(graph) -> dict[str, np.ndarray]:
    return {t.name: t.data for t in graph.get_tensors() if t.is_const}


# -- import ---------------------------------------------------------------------------------------

def test_import_maps_large_weights_read_only_over_the_file(external_model):
    path, weights = external_model
    g = xgraph.load(path)
    data = _weights(g)
    data_file = path.parent / "mlp.onnx.data"
    for i, w in enumerate(weights):
        a = data[f"w{i}"]
        np.testing.assert_array_equal(a, w)
        assert is_mapped(a) and not a.flags.writeable
        mapped, offset = origin(a)
        assert mapped.path == data_file.resolve()
        # the array is the file's bytes at its recorded offset, not a copy of them
        assert bytes(mapped[offset:offset + a.nbytes]) == w.tobytes()
        with pytest.raises(ValueError):
            a[0, 0] = 1.0
    assert not is_mapped(data["bias"])  # small tensors stay inline


def test_import_shares_one_mapping_per_file(external_model):
    path, _ = external_model
    data = _weights(xgraph.load(path))
    files = {id(origin(data[f"w{i}"])[0]) for i in range(3)}
    assert len(files) == 1


def test_compile_keeps_weights_mapped(external_model):
    path, weights = external_model
    compiled = xgraph.compile(path)
    data = _weights(compiled)
    for i, w in enumerate(weights):
        assert is_mapped(data[f"w{i}"])
        np.testing.assert_array_equal(data[f"w{i}"], w)


def test_truncated_data_file_is_a_model_file_error(external_model):
    path, _ = external_model
    data_file = path.parent / "mlp.onnx.data"
    size = data_file.stat().st_size
    os.truncate(data_file, size - 100)
    with pytest.raises(ModelFileError, match=r"mlp\.onnx\.data"):
        xgraph.load(path)


def test_data_file_with_two_hard_links_is_refused(external_model):
    path, _ = external_model
    os.link(path.parent / "mlp.onnx.data", path.parent / "alias.data")
    with pytest.raises(ModelFileError, match="hard link"):
        xgraph.load(path)


def test_symlink_out_of_the_folder_is_refused(external_model, tmp_path_factory):
    path, _ = external_model
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "real.data"
    data_file = path.parent / "mlp.onnx.data"
    os.replace(data_file, elsewhere)
    os.symlink(elsewhere, data_file)
    with pytest.raises(ModelFileError, match="outside"):
        xgraph.load(path)
