"""xgraph.backend: the onnx.backend.base.Backend interface on hand-made models, onnx's BackendTest, the zoo.

Oracles are independent of xgraph: numpy one-liners, onnxruntime, or onnx's own test data.
"""
from __future__ import annotations

import threading
import unittest
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
import onnx.backend.test
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
import xgraph.backend as backend
from testing.runtime import randomize_zoo_weights
from xgraph.errors import RunnerError, XGraphError

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def make_model(nodes, inputs, outputs, initializers=(), opset: int = 18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def tensor(name: str, code: int = TensorProto.FLOAT, shape=(2, 3)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, code, None if shape is None else list(shape))


def two_output_model() -> onnx.ModelProto:
    """Outputs declared as (neg, relu) although relu is computed first: results must follow the declaration."""
    return make_model([helper.make_node("Relu", ["x"], ["relu"]),
                       helper.make_node("Add", ["relu", "y"], ["sum"]),
                       helper.make_node("Neg", ["sum"], ["neg"])],
                      [tensor("x"), tensor("y")], [tensor("neg"), tensor("relu")])


X = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
Y = np.full((2, 3), 0.5, np.float32)


# -- the Backend interface ------------------------------------------------------------------

def test_prepare_runs_with_a_list_a_dict_and_keeps_output_order():
    with backend.prepare(two_output_model()) as rep:
        neg, relu = rep.run([X, Y])
        np.testing.assert_array_equal(relu, np.maximum(X, 0))
        np.testing.assert_array_equal(neg, -(np.maximum(X, 0) + Y))
        by_name = rep.run({"y": Y, "x": X})
        np.testing.assert_array_equal(by_name[0], neg)
        assert rep.output_names == ["neg", "relu"] and rep.feed_names == ["x", "y"]


def test_run_model_and_run_node():
    (out,) = backend.run_model(make_model([helper.make_node("Sqrt", ["x"], ["y"])], [tensor("x")], [tensor("y")]),
                               [np.abs(X)])
    np.testing.assert_allclose(out, np.sqrt(np.abs(X)), rtol=1e-6)
    node = helper.make_node("Add", ["a", "b"], ["c"])
    (c,) = backend.run_node(node, [X, Y], opset_version=13)
    np.testing.assert_array_equal(c, X + Y)
    (c,) = backend.run_node(node, {"a": X, "b": Y}, outputs_info=[(np.float32, (2, 3))])
    np.testing.assert_array_equal(c, X + Y)
    (top, index) = backend.run_node(helper.make_node("TopK", ["x", "k"], ["v", "i"]),
                                    [X, np.array([1], np.int64)])
    np.testing.assert_array_equal(index[:, 0], X.argmax(axis=1))


def test_devices_kwargs_and_errors():
    assert backend.supports_device("CPU") and backend.supports_device("CPU:0")
    assert not backend.supports_device("CUDA") and not backend.supports_device("NPU")
    model = two_output_model()
    with pytest.raises(XGraphError, match="device 'CUDA'"):
        backend.prepare(model, "CUDA")
    with pytest.raises(XGraphError, match="unknown keyword argument 'kernel'.*kernels"):
        backend.prepare(model, kernel="numpy")
    with pytest.raises(XGraphError, match="mode"):
        backend.prepare(model, mode="fast")
    with pytest.raises(XGraphError, match="OptionError|unknown|valid"):
        backend.prepare(model, options={"no_such_option": 1})
    with pytest.raises(XGraphError, match="ModelProto"):
        backend.prepare(42)
    with backend.prepare(model) as rep:
        with pytest.raises(RunnerError, match=r"expected 2 inputs \(x, y\), got 1"):
            rep.run([X])
        with pytest.raises(RunnerError, match="unknown input 'z'"):
            rep.run({"x": X, "z": Y})
        with pytest.raises(RunnerError, match="input 'y' is missing"):
            rep.run({"x": X})
        with pytest.raises(XGraphError, match="'x'.*float32"):
            rep.run([X.astype(np.int32), Y])


def test_prepare_leaves_the_model_unchanged_and_honours_options_and_modes():
    model = two_output_model()
    before = model.SerializeToString()
    with backend.prepare(model, options={"devices": "cpu"}, mode="ref", kernels="numpy") as rep:
        devices = {sg.get_attr("device") for sg in rep.graph.get_root_subgraph().get_children()}
        assert devices == {"CPU"}
        assert rep.run([X, Y])[1].tolist() == np.maximum(X, 0).tolist()
    assert model.SerializeToString() == before
    with backend.prepare(model, mode="sim", options={"precision_mode": "force_fp16"}) as rep:
        np.testing.assert_allclose(rep.run([X, Y])[0], -(np.maximum(X, 0) + Y), rtol=1e-3)


def test_close_stops_the_graph_runner_streams():
    before = set(threading.enumerate())
    rep = backend.prepare(two_output_model())
    rep.run([X, Y])  # runs on this thread: no stream has started yet
    assert not [t for t in threading.enumerate() if t not in before and t.name.startswith("xgraph-")]
    rep.runner.wait(rep.runner.execute_async(rep._feeds([X, Y])))  # an asynchronous job starts the streams
    streams = [t for t in threading.enumerate() if t not in before and t.name.startswith("xgraph-")]
    assert streams
    rep.close()
    for t in streams:
        t.join(5)
    assert not any(t.is_alive() for t in streams)
    with pytest.raises(RunnerError, match="closed"):
        rep.run([X, Y])


def test_initializers_listed_as_inputs_need_no_feed():
    """IR-3 models list weights among the graph inputs; callers feed only the real inputs (or all of them)."""
    w = numpy_helper.from_array(Y, "w")
    model = make_model([helper.make_node("Mul", ["x", "w"], ["y"])], [tensor("w"), tensor("x")], [tensor("y")], [w])
    with backend.prepare(model) as rep:
        assert rep.feed_names == ["x"]
        np.testing.assert_array_equal(rep.run([X])[0], X * Y)
        np.testing.assert_array_equal(rep.run([Y, X])[0], X * Y)


# -- sequences, optionals, special dtypes ----------------------------------------------------

def test_sequence_inputs_and_outputs_are_lists():
    seq_type = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    seq_in = helper.make_value_info("seq", seq_type)
    model = make_model([helper.make_node("SequenceInsert", ["seq", "x"], ["longer"]),
                        helper.make_node("SequenceLength", ["longer"], ["n"]),
                        helper.make_node("ConcatFromSequence", ["longer"], ["joined"], axis=0)],
                       [seq_in, tensor("x", shape=(1, 3))],
                       [helper.make_value_info("longer", seq_type), tensor("n", TensorProto.INT64, ()),
                        tensor("joined", shape=None)])
    parts = [np.ones((2, 3), np.float32), np.zeros((1, 3), np.float32)]
    x = np.full((1, 3), 7, np.float32)
    for kernels in ("numpy", "auto"):
        with backend.prepare(model, kernels=kernels) as rep:
            longer, n, joined = rep.run([parts, x])
        assert isinstance(longer, list) and len(longer) == 3
        np.testing.assert_array_equal(longer[2], x)
        assert int(n) == 3
        np.testing.assert_array_equal(joined, np.concatenate(parts + [x]))


def test_optional_inputs_take_none():
    opt_type = helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3]))
    model = make_model([helper.make_node("OptionalHasElement", ["maybe"], ["has"])],
                       [helper.make_value_info("maybe", opt_type)], [tensor("has", TensorProto.BOOL, ())])
    with backend.prepare(model, kernels="numpy") as rep:
        assert rep.run([None])[0].item() is False
        assert rep.run([X])[0].item() is True


def test_optional_built_in_the_graph_holds_the_value_itself():
    """Optional -> OptionalGetElement gives the tensor back (the reference evaluator alone would wrap it in a list)."""
    empty_type = helper.make_tensor_type_proto(TensorProto.FLOAT, [2, 3])
    model = make_model([helper.make_node("Optional", [], ["none"], type=empty_type),
                        helper.make_node("OptionalHasElement", ["none"], ["has_none"]),
                        helper.make_node("Optional", ["x"], ["some"]),
                        helper.make_node("OptionalGetElement", ["some"], ["back"])],
                       [tensor("x")], [tensor("has_none", TensorProto.BOOL, ()), tensor("back")])
    for mode in ("run", "ref"):
        has_none, back = backend.run_model(model, [X], mode=mode, kernels="numpy")
        assert has_none.item() is False
        np.testing.assert_array_equal(back, X)


def test_bfloat16_models_run_with_auto_kernels():
    """onnxruntime's Python API cannot take bfloat16 arrays: "auto" must fall back to numpy, not fail."""
    model = make_model([helper.make_node("Cast", ["x"], ["h"], to=TensorProto.BFLOAT16),
                        helper.make_node("Relu", ["h"], ["r"]),
                        helper.make_node("Cast", ["r"], ["y"], to=TensorProto.FLOAT)],
                       [tensor("x")], [tensor("y"), tensor("r", TensorProto.BFLOAT16)])
    y, r = backend.run_model(model, [X], kernels="auto")
    assert r.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y, np.maximum(X, 0).astype(ml_dtypes.bfloat16).astype(np.float32))


def test_loop_scan_outputs_are_stacked_like_onnxruntime():
    """Scan outputs of scalar and 2-D iterations stack on a new axis (the evaluator alone vstacks them)."""
    import onnxruntime as ort
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]),
         helper.make_node("Add", ["acc", "one"], ["acc_out"]),
         helper.make_node("Identity", ["acc"], ["scalar_scan"]),
         helper.make_node("Expand", ["acc", "shape"], ["matrix_scan"])],
        "body", [tensor("i", TensorProto.INT64, ()), tensor("cond", TensorProto.BOOL, ()), tensor("acc", shape=())],
        [tensor("cond_out", TensorProto.BOOL, ()), tensor("acc_out", shape=()), tensor("scalar_scan", shape=()),
         tensor("matrix_scan", shape=(2, 3))],
        initializer=[numpy_helper.from_array(np.array(1, np.float32), "one"),
                     numpy_helper.from_array(np.array([2, 3], np.int64), "shape")])
    model = make_model([helper.make_node("Loop", ["n", "go", "start"], ["final", "scalars", "matrices"], body=body)],
                       [tensor("n", TensorProto.INT64, ()), tensor("go", TensorProto.BOOL, ()), tensor("start", shape=())],
                       [tensor("final", shape=()), tensor("scalars", shape=None), tensor("matrices", shape=None)])
    feeds = [np.array(4, np.int64), np.array(True), np.array(0.5, np.float32)]
    expected = ort.InferenceSession(model.SerializeToString()).run(None, dict(zip(("n", "go", "start"), feeds)))
    got = backend.run_model(model, feeds, kernels="numpy")
    assert got[1].shape == (4,) and got[2].shape == (4, 2, 3)
    assert backend.compare_outputs(expected, got) == ""


def test_compare_outputs_reports_what_differs():
    assert backend.compare_outputs([X], [X.copy()]) == ""
    assert "dtype float64" in backend.compare_outputs([X], [X.astype(np.float64)])
    assert "shape (3, 2)" in backend.compare_outputs([X], [X.reshape(3, 2)])
    assert "1 of 6 values" in backend.compare_outputs([X], [np.where(X == 6, 7, X).astype(np.float32)])
    assert backend.compare_outputs([np.array([np.nan], np.float32)], [np.array([np.nan], np.float32)]) == ""
    assert "sequence" in backend.compare_outputs([[X]], [X])
    assert "empty optional" in backend.compare_outputs([None], [X])
    assert "strings differ" in backend.compare_outputs([np.array(["a"], object)], [np.array(["b"], object)])
    assert "2 outputs" in backend.compare_outputs([X], [X, X])
    assert backend.compare_outputs([X], [X + 1], values=False) == ""  # random ops: structure only
    assert "dtype float64" in backend.compare_outputs([X], [X.astype(np.float64)], values=False)


# -- onnx's own BackendTest over its data-backed model tests -----------------------------------

class NumpyKernelsBackend(backend.XGraphBackend):
    """xgraph.backend with xgraph's own kernels, so onnx's tests check them rather than onnxruntime."""

    @classmethod
    def prepare(cls, model, device="CPU", **kwargs):
        return super().prepare(model, device, **{"kernels": "numpy", **kwargs})


#: Data-backed BackendTest cases xgraph cannot pass, with the reason.
BACKEND_TEST_FAILURES = {
    "test_gradient_of_add_cpu": "Gradient (ai.onnx.preview.training) has no kernel: the reference evaluator lacks it too",
    "test_gradient_of_add_and_mul_cpu": "Gradient (ai.onnx.preview.training) has no kernel, as above",
}


def test_onnx_backend_test_runs_against_xgraph():
    """onnx.backend.test.BackendTest drives xgraph: the simple and PyTorch model tests shipped with onnx."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tests = onnx.backend.test.BackendTest(NumpyKernelsBackend, __name__)
    suite = unittest.TestSuite()
    for kind in ("OnnxBackendSimpleModelTest", "OnnxBackendPyTorchOperatorModelTest",
                 "OnnxBackendPyTorchConvertedModelTest"):
        cls = tests.test_cases[kind]
        suite.addTests(cls(name) for name in unittest.defaultTestLoader.getTestCaseNames(cls) if name.endswith("_cpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        result = unittest.TestResult()
        suite.run(result)
    failed = {test.id().rsplit(".", 1)[-1]: trace.splitlines()[-1] for test, trace in result.failures + result.errors}
    assert result.testsRun >= 130
    assert set(failed) == set(BACKEND_TEST_FAILURES), failed


# -- the zoo ---------------------------------------------------------------------------------

@pytest.mark.zoo
def test_squeezenet_matches_onnxruntime():
    """light SqueezeNet (weights listed as inputs, IR 3): final and pre-softmax outputs against onnxruntime."""
    import onnxruntime as ort
    # Seeded random weights: the zoo's constant weights make every logit equal up to rounding, so the
    # softmax of two correct results can differ by 100% (logits of 6.8e9 whose last bits differ).
    model = randomize_zoo_weights(onnx.load(ZOO / "light_squeezenet.onnx"))
    model.graph.output.append(helper.make_tensor_value_info("r65", TensorProto.FLOAT, None))  # GlobalAveragePool
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"data_0": x})
    with backend.prepare(model, kernels="numpy") as rep:
        assert rep.feed_names == ["data_0"]
        got = rep.run([x])
        assert backend.compare_outputs(expected, got, rtol=1e-4, atol=1e-5) == ""
        assert float(np.std(got[1])) > 0  # the comparison is not vacuous
        report = xgraph.report(rep.graph)
        assert {op["device"] for op in report["ops"]} >= {"AICORE"}
