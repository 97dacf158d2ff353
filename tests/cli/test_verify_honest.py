"""`xgraph verify` is honest: it runs xgraph's own kernels, never compares a path with itself,
trusts a corrected reference (BatchNormalization before opset 14), and says when a match proves little."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xgraph.cli.main import main

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def conv_bn_relu(path: Path, opset: int = 9) -> Path:
    """Conv -> BatchNormalization (random statistics) -> Relu at an old opset, random weights."""
    rng = np.random.default_rng(0)
    c = 8
    inits = [numpy_helper.from_array(rng.standard_normal((c, 3, 3, 3)).astype(np.float32) * 0.3, "w"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "s"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), "m"),
             numpy_helper.from_array(rng.uniform(0.5, 2.0, c).astype(np.float32), "v")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"]),
             helper.make_node("Relu", ["n"], ["y"])]
    graph = helper.make_graph(nodes, "cbr", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    onnx.save(model, path)
    return path


def test_default_checks_numpy_and_auto_each_against_an_independent_reference(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    assert main(["verify", str(conv_bn_relu(tmp_path / "m.onnx"))]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("verify ")]
    assert len(lines) == 2
    numpy_line, auto_line = lines
    assert "kernels numpy (numpy)" in numpy_line and "reference onnxruntime" in numpy_line
    # the auto path runs on onnxruntime, so onnxruntime cannot be its reference
    assert "kernels auto (onnxruntime)" in auto_line and "reference ONNX reference evaluator" in auto_line


def test_explicit_onnxruntime_path_is_not_compared_with_onnxruntime(tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    assert main(["verify", str(conv_bn_relu(tmp_path / "m.onnx")), "--kernels", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    assert "reference ONNX reference evaluator" in out and "reference onnxruntime" not in out


def test_old_batch_norm_verifies_without_onnxruntime(tmp_path, capsys, monkeypatch):
    """The evaluator alone (as on a default install) is a correct reference for BatchNormalization-9."""
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # `import onnxruntime` now raises ImportError
    assert main(["verify", str(conv_bn_relu(tmp_path / "m.onnx"))]) == 0
    out = capsys.readouterr().out
    assert "kernels numpy" in out and "reference ONNX reference evaluator" in out and "MISMATCH" not in out


@pytest.mark.zoo
def test_constant_zoo_weights_are_flagged_as_degenerate(capsys):
    """The zoo's constant weights make every logit equal up to rounding: whatever the verdict, verify says
    why it means little (here the last bits of logits of 6.8e9 decide a softmax, so it even mismatches)."""
    assert main(["verify", str(ZOO / "light_squeezenet.onnx"), "--kernels", "numpy"]) in (0, 1)
    out = capsys.readouterr().out
    assert "warning: reference output" in out and "elements equal" in out
    assert "do not change with the random inputs" in out


def test_random_weights_are_not_flagged(tmp_path, capsys):
    assert main(["verify", str(conv_bn_relu(tmp_path / "m.onnx")), "--kernels", "numpy"]) == 0
    assert "warning" not in capsys.readouterr().out


def _external_data_model(folder: Path) -> Path:
    """MatMul -> Relu -> MatMul with 64 KiB weights in a data file beside the model."""
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((128, 128)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((128, 64)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])], inits)
    path = folder / "ext.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path,
              save_as_external_data=True, location="ext.onnx.data", size_threshold=0)
    return path


@pytest.mark.parametrize("kernels, reference", [("numpy", "onnxruntime"), ("auto", "ONNX reference evaluator")])
def test_external_weights_reach_both_references_without_being_loaded(tmp_path, capsys, kernels, reference):
    """The references read the weights from their data file (onnxruntime) or its memory map (the
    evaluator, as extra inputs), so a model of several GB is verified without a copy of them."""
    pytest.importorskip("onnxruntime")
    from xgraph.cli.cmd_verify import reference_model
    import xgraph
    path = _external_data_model(tmp_path)
    ref = reference_model(path, xgraph.compile(path))
    assert set(ref.weights) == {"w1", "w2"} and ref.folder == tmp_path
    assert all(t.data_location == TensorProto.EXTERNAL for t in ref.model.graph.initializer)
    assert ref.model.ByteSize() < 4096  # the proto carries no weight bytes
    assert main(["verify", str(path), "--kernels", kernels]) == 0
    out = capsys.readouterr().out
    assert f"vs reference {reference}" in out and "verify: PASS" in out


def test_a_data_file_replaced_after_the_check_is_refused_by_the_onnxruntime_reference(tmp_path):
    pytest.importorskip("onnxruntime")
    import os
    import xgraph
    from xgraph.cli.cmd_verify import reference_model, run_reference
    from xgraph.errors import ModelFileError
    path = _external_data_model(tmp_path)
    ref = reference_model(path, xgraph.compile(path))
    data = tmp_path / "ext.onnx.data"
    swapped = tmp_path / "other.data"
    swapped.write_bytes(data.read_bytes())
    os.replace(swapped, data)  # same bytes, another file: not the one the reader checked and mapped
    with pytest.raises(ModelFileError, match="was replaced"):
        run_reference(ref, {"x": np.zeros((2, 128), np.float32)}, ["y"], "m")



def test_an_xmodel_is_recognised_whatever_the_case_of_its_suffix(tmp_path):
    """`M.XMODEL` is read as an .xmodel: the reference is the gear of the checked graph's shapes
    (read as a plain .onnx it would be gear 0, of another batch size)."""
    import xgraph
    from xgraph.cli.cmd_verify import reference_model
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    compiled = xgraph.compile(model, {"input_shape": "x:-1,8", "dynamic_batch_size": "1,2"})
    compiled.serialize(tmp_path / "M.XMODEL")
    second = compiled.get_gears()[1].graph
    ref = reference_model(tmp_path / "M.XMODEL", second)
    assert [d.dim_value for d in ref.model.graph.input[0].type.tensor_type.shape.dim] == [2, 8]
