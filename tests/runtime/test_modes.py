"""Runner modes and kernel choice: run (numpy / onnxruntime), sim (fp16 numerics + roofline), ref (golden)."""
from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph import Graph, Runner
from xgraph.devices import get_devices
from xgraph.runners.executor import SubgraphExecutor

AICORE_UNLESS_HOST = (lambda op: "CPU" if op.type in ("Flatten", "Softmax") else "AICORE")


def cnn(make, precision_mode: str | None = None, device_of=AICORE_UNLESS_HOST):
    model = make.small_cnn()
    graph = make.place(Graph.from_onnx(model), device_of)
    if precision_mode:
        graph.set_attr("precision_mode", precision_mode)
    return model, graph


def x_cnn(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((1, 3, 8, 8)).astype(np.float32)


def ort_outputs(model, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)


# -- run: numpy and onnxruntime ----------------------------------------------------------------------
@pytest.mark.parametrize("kernels, backend",
                         [("numpy", "numpy"), ("onnxruntime", "onnxruntime"), ("auto", "onnxruntime")])
def test_run_mode_backends_match_onnxruntime(make, kernels, backend):
    model, graph = cnn(make)
    x = x_cnn()
    with xgraph.create_graph_runner(graph, kernels=kernels) as runner:
        prob, logits = runner.run({"x": x})
        assert {r.backend for r in runner.runners.values()} == {backend}
    ref_prob, ref_logits = ort_outputs(model, {"x": x})
    np.testing.assert_allclose(logits, ref_logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(prob, ref_prob, rtol=1e-5, atol=1e-6)


def test_numpy_kernel_choice_is_recorded_per_op(make):
    _, graph = cnn(make)
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        sources = {op: src for r in runner.runners.values() for op, src in r.kernel_sources.items()}
    assert sources["conv"] == "numpy:AICORE" and sources["softmax"] == "numpy:CPU"


def test_auto_falls_back_to_numpy_for_non_standard_ops():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Boom2", ["r"], ["y"], name="boom", domain="test.modes")]
    g = helper.make_graph(nodes, "custom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    from xgraph.kernels import KERNELS, kernel
    kernel("Boom2", domain="test.modes", devices=("CPU",), registry=KERNELS)(lambda x: x + 1)
    graph = Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                                helper.make_opsetid("test.modes", 1)]))
    root = graph.get_root_subgraph()
    root.create_child_subgraph()
    sg = root.merge_children(root.get_children())
    sg.set_attr("device", "CPU")
    sg.set_attr("runner", {"run": "cpu"})
    with Runner.create_runner(sg, kernels="auto") as runner:
        assert runner.backend == "numpy"
        assert "boom" in runner.backend_reason and "not a standard ONNX op" in runner.backend_reason
        np.testing.assert_array_equal(runner.run([np.array([-1, 2], np.float32)])[0], [1, 3])


def test_reference_fallback_runs_ops_without_a_numpy_kernel():
    """A model-local function op has no numpy kernel: the reference evaluator runs it, and that is recorded."""
    body = [helper.make_node("Mul", ["a", "a"], ["sq"]), helper.make_node("Add", ["sq", "a"], ["out"])]
    fn = helper.make_function("test.fn", "SquarePlus", ["a"], ["out"], body, [helper.make_opsetid("", 17)])
    graph = Graph("fn")  # built directly: import expands calls of local functions
    graph.opset_imports = {"": 17, "test.fn": 1}
    graph.functions.append(fn)
    op = graph.create_op("sqp", "SquarePlus", inputs=[graph.create_input("x", (3,))], domain="test.fn")
    graph.set_outputs([op.get_output_tensor()])
    root = graph.get_root_subgraph()
    root.create_child_subgraph()
    (sg,) = root.get_children()
    sg.set_attr("device", "CPU")
    executor = SubgraphExecutor(sg, "CPU", kernels="auto")
    assert executor.backend == "numpy" and executor.kernel_sources == {"sqp": "reference"}
    x = np.array([1, 2, -3], np.float32)
    np.testing.assert_array_equal(executor.run([x])[0], x * x + x)


def if_model():
    """r = Relu(x); y = If(c, then: Identity(r), else: Neg(r)): the branches read 'r' from the outer scope."""
    then_g = helper.make_graph([helper.make_node("Identity", ["r"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "ifg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                                         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("placement", [{"relu": "CPU", "if": "CPU"}, {"relu": "AICORE", "if": "CPU"}],
                         ids=["same subgraph", "across subgraphs"])
def test_nested_graph_reading_an_outer_scope_tensor(make, placement):
    """The If's branches read 'r' by name; its value reaches the reference kernel wherever Relu ran."""
    graph = make.place(Graph.from_onnx(if_model()), placement)
    x = np.array([-1, 2], np.float32)
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        np.testing.assert_array_equal(runner.run({"x": x, "c": np.array(True)})[0], [0, 2])
        np.testing.assert_array_equal(runner.run({"x": x, "c": np.array(False)})[0], [0, -2])


def test_intermediates_are_released_after_their_last_reader(make):
    _, graph = cnn(make, device_of=lambda op: "CPU")
    (sg,) = graph.get_root_subgraph().get_children()
    executor = SubgraphExecutor(sg, "CPU", kernels="numpy")
    plan = executor.plan
    released = [s for step in plan.steps for s in step.release]
    intermediates = {s for step in plan.steps for s in step.outputs} - set(plan.output_slots)
    assert sorted(released) == sorted(intermediates | set(plan.input_slots))  # once each; never outputs or weights


# -- ref ------------------------------------------------------------------------------------------
def test_ref_mode_agrees_with_run_mode(make):
    _, graph = cnn(make)
    x = x_cnn(2)
    with xgraph.create_graph_runner(graph, mode="ref") as ref, \
            xgraph.create_graph_runner(graph, kernels="numpy") as run:
        assert {r.backend for r in ref.runners.values()} == {"reference"}
        for a, b in zip(ref.run({"x": x}), run.run({"x": x})):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


# -- sim ------------------------------------------------------------------------------------------
def test_sim_mode_computes_aicore_in_fp16(make):
    model, graph = cnn(make, "force_fp16")
    x = x_cnn(3)
    with xgraph.create_graph_runner(graph, mode="sim") as sim:
        prob, logits = sim.run({"x": x})
    ref_prob, ref_logits = ort_outputs(model, {"x": x})
    assert logits.dtype == np.float32  # cast back to the declared dtype
    np.testing.assert_array_equal(logits.astype(np.float16).astype(np.float32), logits)  # computed on fp16 values
    err = np.abs(logits - ref_logits).max()
    assert 0 < err <= 1e-2 * np.abs(ref_logits).max()  # really rounded, within fp16 tolerance
    np.testing.assert_allclose(prob, ref_prob, atol=1e-2)


def test_allow_fp32_to_fp16_rounds_only_ops_the_device_takes_in_fp16_alone():
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 4, 1, 1)).astype(np.float32), "w")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("LRN", ["x"], ["n"], size=3, name="lrn"), helper.make_node("Conv", ["n", "w"], ["y"], name="conv")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w]),
        opset_imports=[helper.make_opsetid("", 17)])
    graph = xgraph.compile(model, {"precision_mode": "allow_fp32_to_fp16"})
    assert graph.get_op("lrn").get_attr("device") == "AICORE"  # LRN is fp16-only on AI Core: allowed here
    assert graph.get_op("lrn").get_attr("precision") == "float16" and not graph.get_op("conv").has_attr("precision")
    x = rng.standard_normal((1, 4, 8, 8)).astype(np.float32)
    expected = ort_outputs(model, {"x": x})[0]
    with xgraph.create_graph_runner(graph, mode="sim") as sim, xgraph.create_graph_runner(graph) as run:
        (y_sim,), (y_run,) = sim.run({"x": x}), run.run({"x": x})
    np.testing.assert_allclose(y_run, expected, rtol=1e-5, atol=1e-6)
    err = np.abs(y_sim - expected).max()
    assert 0 < err <= 1e-2 * np.abs(expected).max()  # the LRN really rounded to fp16, the Conv did not add more
    assert not np.array_equal(y_sim.astype(np.float16).astype(np.float32), y_sim)  # Conv output kept float32


def test_sim_mode_keeps_fp32_without_an_fp16_precision_mode(make):
    model, graph = cnn(make, "must_keep_origin_dtype")
    x = x_cnn(3)
    with xgraph.create_graph_runner(graph, mode="sim") as sim:
        _, logits = sim.run({"x": x})
    np.testing.assert_allclose(logits, ort_outputs(model, {"x": x})[1], rtol=1e-5, atol=1e-6)


def test_sim_mode_estimates_device_time_with_the_roofline(make):
    _, graph = cnn(make, "force_fp16")
    cost = get_devices()["AICORE"].cost
    with xgraph.create_graph_runner(graph, mode="sim") as sim:
        sim.run({"x": x_cnn()})
        sim.run({"x": x_cnn(4)})
        conv_runner = sim.runners["subgraph_conv"]
        estimate = conv_runner.last_estimate
        stats = conv_runner.get_stats()
        fc_estimate = sim.runners["subgraph_fc"].last_estimate
    conv = {o.op: o for o in estimate.ops}["conv"]
    assert conv.flops == 2 * (4 * 8 * 8) * (3 * 3 * 3) + 4 * 8 * 8  # MACs x 2 + bias adds
    assert conv.bytes == 2 * (3 * 8 * 8 + 4 * 3 * 3 * 3 + 4 + 4 * 8 * 8)  # fp16 storage: x, W, B, output
    expected = max(conv.flops / (cost.peak_gflops["float16"] * 1e9), conv.bytes / (cost.bandwidth_gbps * 1e9))
    assert conv.seconds == pytest.approx(expected + cost.launch_overhead_us * 1e-6)
    assert estimate.seconds == pytest.approx(sum(o.seconds for o in estimate.ops))
    assert stats["estimated_device_s"] == pytest.approx(2 * estimate.seconds)
    (gemm,) = fc_estimate.ops
    assert gemm.flops == 2 * 10 * 16 + 10


def test_onnxruntime_sessions_see_weights_as_constants():
    """An IR 3 model lists its initializers as graph inputs; the session model must not (so they can be fused)."""
    from xgraph.runners.ort_session import weights_as_constants

    rng = np.random.default_rng(5)
    w = onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "ir3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6]),
                                             helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 3, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=3)
    fixed = weights_as_constants(onnx.ModelProto.FromString(model.SerializeToString()))
    assert fixed.ir_version == 4 and [i.name for i in fixed.graph.input] == ["x"]
    onnx.checker.check_model(fixed, full_check=True)
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    np.testing.assert_array_equal(ort_outputs(fixed, {"x": x})[0], ort_outputs(model, {"x": x})[0])
    graph = Graph.from_onnx(model)
    assert graph.get_input_tensors()[0].name == "x"  # the weight stays a weight on import too
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    newer = helper.make_model(helper.make_graph(nodes, "ir8", [x_info], [y_info], [w]),
                              opset_imports=[helper.make_opsetid("", 13)])
    assert weights_as_constants(newer) is newer and [i.name for i in newer.graph.input] == ["x"]
