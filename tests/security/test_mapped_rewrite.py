"""Weights mapped from a data file: writing into that file in place under a running model is refused
at the next run (the file's size or modification time changed), naming the file; replacing the
file by a rename (what saving does) leaves the running model as it was."""
from __future__ import annotations

import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import ModelFileError
from xgraph.ir.onnx.mapped import CHECK_INTERVAL
from xgraph.ir.onnx.side_file import side_files

N = 64


def mlp_proto(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    w = [numpy_helper.from_array(rng.standard_normal((N, N)).astype(np.float32), f"w{i}") for i in range(2)]
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["h"], name="mm0"), helper.make_node("Relu", ["h"], ["r"], name="r"),
             helper.make_node("MatMul", ["r", "w1"], ["y"], name="mm1")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])], initializer=w)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def rewrite_in_place(path, offset: int) -> None:
    """Double the first weight's values inside the file, as an editor or a careless copy would."""
    time.sleep(max(2 * CHECK_INTERVAL, 0.05))  # past the last check, and past the file system's time granularity
    with open(path, "r+b") as f:
        f.seek(offset)
        w = np.frombuffer(f.read(N * N * 4), np.float32) * 2
        f.seek(offset)
        f.write(w.tobytes())


@pytest.fixture
def pair(tmp_path):
    out = tmp_path / "m.xmodel"
    xgraph.compile(mlp_proto(), {"external_data_threshold": 0}).serialize(out)
    return out


X = {"x": np.ones((1, N), np.float32)}


@pytest.mark.parametrize("kernels", ["numpy", "auto"])
def test_side_file_written_in_place_under_a_running_model_is_refused(pair, kernels):
    runner = xgraph.create_graph_runner(xgraph.load(pair), kernels=kernels)
    try:
        runner.run(X)
        (side,) = side_files(pair)
        rewrite_in_place(side, 4096)
        for _ in range(2):  # refused from then on, not once
            with pytest.raises(ModelFileError, match=f"{side.name}' was written in place after the model was loaded"):
                runner.run(X)
    finally:
        runner.close()


def test_saving_over_the_pair_leaves_a_running_model_as_it_was(pair):
    runner = xgraph.create_graph_runner(xgraph.load(pair), kernels="numpy")
    try:
        before = runner.run(X)[0]
        time.sleep(2 * CHECK_INTERVAL)
        xgraph.compile(mlp_proto(seed=1), {"external_data_threshold": 0}).serialize(pair)  # other weights
        np.testing.assert_array_equal(runner.run(X)[0], before)
    finally:
        runner.close()


def test_external_data_of_a_plain_onnx_written_in_place_is_refused(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(mlp_proto(), path, save_as_external_data=True, location="m.bin", size_threshold=0)
    runner = xgraph.create_graph_runner(xgraph.compile(path), kernels="numpy")
    try:
        runner.run(X)
        model = onnx.load(str(path), load_external_data=False)
        offset = next(int(e.value) for t in model.graph.initializer if t.name == "w0" for e in t.external_data
                      if e.key == "offset")
        rewrite_in_place(tmp_path / "m.bin", offset)
        with pytest.raises(ModelFileError, match="m.bin' was written in place"):
            runner.run(X)
    finally:
        runner.close()
