"""The execution plan: a pure function of (subgraph, device, kernel table, options), frozen, passes over it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import xgraph
from xgraph import Graph, Runner
from xgraph.registries import Registries
from xgraph.runners.executor import SubgraphExecutor, make_plan
from xgraph.runners.plan import PlanOptions


def cpu_subgraph(make, device="AICORE"):
    graph = make.place(Graph.from_onnx(make.small_cnn()), lambda op: device)
    (sg,) = graph.get_root_subgraph().get_children()
    return graph, sg


def test_the_plan_is_a_pure_function_of_its_inputs(make):
    graph, sg = cpu_subgraph(make)
    before = {op.name: dict(op.get_attrs()) for op in graph.get_ops()}
    kernels = Registries().kernels
    a = make_plan(sg, "AICORE", kernels, PlanOptions(fuse=True))
    b = make_plan(sg, "AICORE", kernels, PlanOptions(fuse=True))
    assert {op.name: dict(op.get_attrs()) for op in graph.get_ops()} == before  # the graph is untouched
    assert a.kernels == b.kernels and a.buffers == b.buffers and a.fused_into == b.fused_into
    assert [(s.op.name, s.inputs, s.outputs, s.release, s.buffer) for s in a.steps] == \
        [(s.op.name, s.inputs, s.outputs, s.release, s.buffer) for s in b.steps]
    assert a.backend == "numpy" and a.fused_into == {"conv": "conv", "relu": "conv"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.backend = "onnxruntime"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.steps[0].fn = None
    with pytest.raises(TypeError):
        a.kernels["conv"] = None  # a read-only mapping


def test_each_op_knows_what_runs_it_and_why(make):
    _, sg = cpu_subgraph(make)
    plan = make_plan(sg, "AICORE", Registries().kernels)
    conv = plan.kernels["conv"]
    assert (conv.source, conv.device, conv.label) == ("numpy", "AICORE", "numpy:AICORE")
    assert "Conv" in conv.reason and conv.kernel is not None
    assert plan.kernel_sources == {name: c.label for name, c in plan.kernels.items()}


def test_onnxruntime_plans_name_it_for_every_op_and_ref_plans_the_evaluator(make):
    _, sg = cpu_subgraph(make)
    kernels = Registries().kernels
    ort_plan = make_plan(sg, "AICORE", kernels, PlanOptions(kernels="auto"))
    assert ort_plan.backend == "onnxruntime" and not ort_plan.steps
    assert {c.source for c in ort_plan.kernels.values()} == {"onnxruntime"}
    ref_plan = make_plan(sg, "AICORE", kernels, PlanOptions(reference=True))
    assert ref_plan.backend == "reference" and {c.source for c in ref_plan.kernels.values()} == {"reference"}


def test_force_fp16_stores_float32_weights_in_float16(make):
    _, sg = cpu_subgraph(make)
    plan = make_plan(sg, "AICORE", Registries().kernels, PlanOptions(storage_dtype=np.dtype(np.float16)))
    weights = [v for v in plan.template if isinstance(v, np.ndarray)]
    assert weights and {w.dtype for w in weights} == {np.dtype(np.float16)}
    assert not plan.fused_into  # fusion never runs with float16 numerics
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    fp16 = SubgraphExecutor(sg, "AICORE", storage_dtype=np.float16).run([x])
    fp32 = SubgraphExecutor(sg, "AICORE").run([x])
    assert fp16[0].dtype == np.float32
    np.testing.assert_allclose(fp16[0], fp32[0], rtol=2e-2, atol=2e-3)
    assert not np.array_equal(fp16[0], fp32[0])


def test_auto_falls_back_at_creation_when_onnxruntime_cannot_load_the_subgraph(make, monkeypatch):
    import xgraph.runners.ort_session as ort_session

    def refuse(subgraph):
        raise RuntimeError("[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : no kernel for this node\nmore")

    monkeypatch.setattr(ort_session, "ort_session", refuse)
    graph, sg = cpu_subgraph(make)
    with Runner.create_runner(sg, kernels="auto") as runner:
        assert runner.backend == "numpy"
        assert runner.backend_reason == "onnxruntime cannot load it: [ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : " \
                                        "no kernel for this node"
        assert runner.plan.kernels["conv"].source == "numpy"
        x = np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)
        got = dict(zip((t.name for t in runner.get_output_tensors()), runner.run([x])))
        with xgraph.create_graph_runner(graph, kernels="numpy") as plain:
            expected = dict(zip((t.name for t in plain.get_output_tensors()), plain.run({"x": x})))
        assert set(got) == {"prob", "logits"}
        for name in got:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-6)
    with pytest.raises(xgraph.XGraphError, match="onnxruntime cannot load this subgraph: .*NOT_IMPLEMENTED"):
        Runner.create_runner(sg, kernels="onnxruntime")


def test_auto_switches_to_xgraphs_kernels_when_a_session_fails_a_run(make, monkeypatch):
    from xgraph.errors import KernelError
    from xgraph.runners import backends

    def fail(self, inputs, on_step=None):
        raise KernelError(f"{self.plan.where}: onnxruntime failed: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
                          "Non-zero status code returned while running Foo node\ndetails")

    monkeypatch.setattr(backends.OnnxruntimeBackend, "run", fail)
    _, sg = cpu_subgraph(make)
    x = np.random.default_rng(4).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = SubgraphExecutor(sg, "AICORE").run([x])
    with Runner.create_runner(sg, kernels="auto") as runner:
        assert runner.backend == "onnxruntime"
        got = runner.run([x])  # the failed job is run again on xgraph's kernels
        assert runner.backend == "numpy" and runner.plan.kernels["conv"].source == "numpy"
        assert runner.backend_reason == ("onnxruntime failed on a run: [ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : "
                                         "Non-zero status code returned while running Foo node")
        assert runner.get_stats()["backend_reason"] == runner.backend_reason
        for a, b in zip(got, expected):
            np.testing.assert_allclose(a, b, rtol=1e-6)
    with Runner.create_runner(sg, kernels="onnxruntime") as runner, pytest.raises(KernelError, match="RUNTIME_EXC"):
        runner.run([x])  # asked for onnxruntime explicitly: its failure is the answer


def test_auto_keeps_ops_onnxruntime_gets_wrong_on_xgraphs_kernels():
    from onnx import TensorProto, helper
    node = helper.make_node("DFT", ["x"], ["y"], name="dft")
    g = helper.make_graph([node], "dft", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 2])])
    compiled = xgraph.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]))
    with xgraph.create_graph_runner(compiled, kernels="auto") as runner:
        (sub,) = runner.runners.values()
        assert sub.backend == "numpy" and sub.backend_reason.startswith("op 'dft' (DFT): onnxruntime's DFT")
        x = np.random.default_rng(5).standard_normal((1, 8, 1)).astype(np.float32)
        (y,) = runner.run({"x": x})
    spectrum = np.fft.fft(x[0, :, 0])
    np.testing.assert_allclose(y[0, :, 0] + 1j * y[0, :, 1], spectrum, rtol=1e-5, atol=1e-5)
