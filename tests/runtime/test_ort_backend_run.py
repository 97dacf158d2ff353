"""The onnxruntime backend runs the bound session under the Python wrapper: results stay onnxruntime's,
and a real failure on a run is still a KernelError naming the subgraph (auto then re-plans on xgraph's kernels)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import KernelError

DATA = np.arange(12, dtype=np.float32).reshape(4, 3)


def _gather_graph():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Gather", ["data", "idx"], ["y"], name="pick", axis=0)], "g",
        [helper.make_tensor_value_info("idx", TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(DATA, "data")]), opset_imports=[helper.make_opsetid("", 17)])
    return xgraph.compile(model)


def test_results_are_onnxruntimes_and_a_run_failure_names_the_subgraph_then_falls_back():
    graph = _gather_graph()
    with xgraph.create_graph_runner(graph, kernels="auto") as runner:
        (sub,) = runner.runners.values()
        assert sub.backend == "onnxruntime"
        np.testing.assert_array_equal(runner.run({"idx": np.array([3, 1])})[0], DATA[[3, 1]])
        with pytest.raises(KernelError, match=r"(?s)Gather.*out of range"):  # onnxruntime fails, then numpy does
            runner.run({"idx": np.array([0, 7])})
        assert sub.backend == "numpy" and sub.backend_reason.startswith("onnxruntime failed on a run:")
        assert "indices element out of data bounds" in sub.backend_reason
        np.testing.assert_array_equal(runner.run({"idx": np.array([2, 0])})[0], DATA[[2, 0]])
    with xgraph.create_graph_runner(graph, kernels="onnxruntime") as runner:
        with pytest.raises(KernelError, match=r"subgraph .* onnxruntime failed: .*out of data bounds"):
            runner.run({"idx": np.array([0, 7])})


def test_a_folded_transpose_of_a_weight_runs_on_onnxruntime_from_the_strided_view():
    # the tied LM head of a GPT-2 export: MatMul(x, Transpose(wte)); folding leaves a strided view of wte
    rng = np.random.default_rng(0)
    wte = rng.standard_normal((64, 32)).astype(np.float32)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Transpose", ["wte"], ["wte_t"], name="tied", perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wte_t"], ["logits"], name="head")], "tied_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 64])],
        initializer=[numpy_helper.from_array(wte, "wte")]), opset_imports=[helper.make_opsetid("", 17)])
    graph = xgraph.compile(model)
    folded = graph.get_tensor("wte_t").data
    assert not folded.flags.c_contiguous  # the case: a view, not a copy
    x = rng.standard_normal((1, 32)).astype(np.float32)
    with xgraph.create_graph_runner(graph, kernels="auto") as runner:
        (got,) = runner.run({"x": x})
        assert [r.backend for r in runner.runners.values()] == ["onnxruntime"], \
            [getattr(r, "backend_reason", "") for r in runner.runners.values()]
    np.testing.assert_allclose(got, x @ wte.T, rtol=1e-5, atol=1e-5)
