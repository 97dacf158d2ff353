"""Run-mode fusion of Conv chains: same results as op-by-op execution, and no fusion where it could show."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph import Graph
from xgraph.errors import KernelError
from xgraph.runners.executor import SubgraphExecutor
from testing.runtime import place

RNG = np.random.default_rng(7)
C = 6


def const(name: str, value) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)


def block_model(*, residual_shape=(1, C, 5, 5), tail: str = "Relu", opset: int = 17, extra_outputs=(),
                training_mode: int = 0, clip_from_input: bool = False):
    """x -> Conv -> BatchNormalization -> Add(r) -> tail -> y, with random constants."""
    w = RNG.standard_normal((C, 3, 3, 3)).astype(np.float32) / 5
    params = [RNG.uniform(0.5, 1.5, C), RNG.standard_normal(C) * 0.1, RNG.standard_normal(C) * 0.1,
              RNG.uniform(0.5, 1.5, C)]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn", epsilon=1e-3,
                         **({"training_mode": training_mode} if training_mode else {})),
        helper.make_node("Add", ["n", "r"], ["a"], name="add"),
    ]
    inits = [numpy_helper.from_array(w, "w"), const("b", RNG.standard_normal(C) * 0.1)]
    inits += [const(n, p) for n, p in zip(("s", "bb", "m", "v"), params)]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5]),
              helper.make_tensor_value_info("r", TensorProto.FLOAT, list(residual_shape))]
    if tail == "Clip":
        if clip_from_input:
            nodes.append(helper.make_node("Clip", ["a", "lo"], ["y"], name="tail"))
            inputs.append(helper.make_tensor_value_info("lo", TensorProto.FLOAT, []))
        else:
            nodes.append(helper.make_node("Clip", ["a", "lo", "hi"], ["y"], name="tail"))
            inits += [const("lo", -0.25), const("hi", 0.5)]
    elif tail == "LeakyRelu":
        nodes.append(helper.make_node("LeakyRelu", ["a"], ["y"], name="tail", alpha=0.3))
    else:
        nodes.append(helper.make_node(tail, ["a"], ["y"], name="tail"))
    out_shape = list(np.broadcast_shapes((1, C, 5, 5), residual_shape))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)]
    outputs += [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in extra_outputs]
    graph = helper.make_graph(nodes, "block", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def feeds_for(model, residual_shape=(1, C, 5, 5)) -> dict[str, np.ndarray]:
    feeds = {"x": RNG.standard_normal((1, 3, 5, 5)).astype(np.float32),
             "r": RNG.standard_normal(residual_shape).astype(np.float32)}
    if any(i.name == "lo" for i in model.graph.input):
        feeds["lo"] = np.array(-0.1, dtype=np.float32)
    return feeds


def run_both(model, feeds):
    """(fused executor, its outputs, outputs op by op, onnxruntime's outputs)."""
    graph = place(Graph.from_onnx(model), lambda op: "AICORE")
    (sg,) = graph.get_root_subgraph().toposort_child_subgraph()
    names = [t.name for t in sg.get_input_tensors()]
    inputs = [feeds[n] for n in names]
    fused = SubgraphExecutor(sg, "AICORE", fuse=True)
    plain = SubgraphExecutor(sg, "AICORE", fuse=False)
    ref = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    return fused, fused.run(inputs), plain.run(inputs), ref


@pytest.mark.parametrize("tail", ["Relu", "LeakyRelu", "Sigmoid", "Tanh", "HardSigmoid", "Clip"])
def test_conv_bn_add_activation_fuses_into_one_step_with_the_same_result(tail):
    model = block_model(tail=tail)
    fused, got, plain, ref = run_both(model, feeds_for(model))
    assert len(fused.steps) == 1
    assert [op.type for op in fused.steps[0].fused] == ["Conv", "BatchNormalization", "Add", tail]
    assert fused.fused_into == {"conv": "conv", "bn": "conv", "add": "conv", "tail": "conv"}
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("residual_shape", [(1, C, 1, 1), (C, 1, 1), (2, C, 5, 5)])
def test_a_broadcasting_residual_keeps_add_semantics(residual_shape):
    model = block_model(residual_shape=residual_shape)
    fused, got, plain, ref = run_both(model, feeds_for(model, residual_shape))
    assert got[0].shape == ref[0].shape == np.broadcast_shapes((1, C, 5, 5), residual_shape)
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)


def test_an_intermediate_that_is_a_subgraph_output_stops_the_chain():
    model = block_model(extra_outputs=("n",))
    fused, got, plain, ref = run_both(model, feeds_for(model))
    assert [[op.type for op in s.fused] for s in fused.steps] == [["Conv", "BatchNormalization"], [], []]
    for a, b in zip(got, plain):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_clip_bound_that_is_not_constant_is_not_fused():
    model = block_model(tail="Clip", clip_from_input=True)
    fused, got, plain, ref = run_both(model, feeds_for(model))
    assert [op.type for op in fused.steps[0].fused] == ["Conv", "BatchNormalization", "Add"]
    assert fused.steps[-1].op.type == "Clip" and not fused.steps[-1].fused
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)


def test_batch_norm_in_training_mode_is_not_folded():
    model = block_model(training_mode=1)
    graph = place(Graph.from_onnx(model), lambda op: "AICORE")
    sg = graph.get_root_subgraph().toposort_child_subgraph()[0]
    fused = SubgraphExecutor(sg, "AICORE", fuse=True)
    assert not any(op.type == "BatchNormalization" for s in fused.steps for op in s.fused)


def test_the_residual_produced_after_the_conv_is_waited_for():
    """Sum(BN(Conv1(x)), BN(Conv2(x))): the fused step must run after the second chain produced its input."""
    w1, w2 = (RNG.standard_normal((C, 3, 1, 1)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1"),
             helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"], name="bn1"),
             helper.make_node("Conv", ["x", "w2"], ["c2"], name="conv2"),
             helper.make_node("BatchNormalization", ["c2", "s", "bb", "m", "v"], ["n2"], name="bn2"),
             helper.make_node("Sum", ["n1", "n2"], ["a"], name="sum"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"), const("s", np.ones(C)),
             const("bb", np.zeros(C) + 0.1), const("m", np.zeros(C) - 0.2), const("v", np.ones(C) * 2)]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C, 4, 4])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    x = RNG.standard_normal((1, 3, 4, 4)).astype(np.float32)
    fused, got, plain, ref = run_both(model, {"x": x})
    assert sorted(len(s.fused) for s in fused.steps) == [2, 4]
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)


def test_a_failing_fused_step_names_every_op_in_it():
    model = block_model()
    graph = place(Graph.from_onnx(model), lambda op: "AICORE")
    sg = graph.get_root_subgraph().toposort_child_subgraph()[0]
    fused = SubgraphExecutor(sg, "AICORE", fuse=True)
    names = [t.name for t in sg.get_input_tensors()]
    bad = {"x": np.zeros((1, 4, 5, 5), np.float32), "r": np.zeros((1, C, 5, 5), np.float32)}
    with pytest.raises(KernelError, match=r"ops 'conv', 'bn', 'add', 'tail' \(Conv\+BatchNormalization\+Add\+Relu "
                                          r"fused, numpy:AICORE kernel\) failed: Conv: channel mismatch"):
        fused.run([bad[n] for n in names])


def test_run_mode_fuses_sim_mode_and_xgraph_fusion_0_do_not(monkeypatch):
    model = block_model()
    feeds = feeds_for(model)
    graph = place(Graph.from_onnx(model), lambda op: "AICORE")
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        (device_runner,) = runner.runners.values()
        assert device_runner.fused_into == {"conv": "conv", "bn": "conv", "add": "conv", "tail": "conv"}
        assert len(device_runner.plan.steps) == 1
        fused_y = runner.run(feeds)[0]
    with xgraph.create_graph_runner(graph, mode="sim") as runner:
        (device_runner,) = runner.runners.values()
        assert not device_runner.fused_into and len(device_runner.plan.steps) == 4
        sim_y = runner.run(feeds)[0]
    monkeypatch.setenv("XGRAPH_FUSION", "0")
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        (device_runner,) = runner.runners.values()
        assert not device_runner.fused_into and len(device_runner.plan.steps) == 4
    np.testing.assert_allclose(fused_y, sim_y, rtol=1e-5, atol=1e-6)


def affine_model(ops, *, conv: bool, x_shape=(1, C, 5, 5)):
    """x [-> Conv] -> ops... where each op is (type, constant or None); constants are initializers."""
    nodes, inits, prev = [], [], "x"
    if conv:
        inits.append(numpy_helper.from_array(RNG.standard_normal((C, C, 3, 3)).astype(np.float32) / 5, "w"))
        nodes.append(helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]))
        prev = "c"
    for i, (op_type, value) in enumerate(ops):
        out = f"t{i}"
        if op_type == "BatchNormalization":
            names = [f"bn{i}_{k}" for k in "sbmv"]
            for n, v in zip(names, (RNG.uniform(0.5, 1.5, C), RNG.standard_normal(C), RNG.standard_normal(C),
                                    RNG.uniform(0.5, 1.5, C))):
                inits.append(const(n, v))
            nodes.append(helper.make_node(op_type, [prev] + names, [out], name=f"op{i}"))
        elif value is None:
            nodes.append(helper.make_node(op_type, [prev], [out], name=f"op{i}"))
        else:
            inits.append(const(f"k{i}", value))
            nodes.append(helper.make_node(op_type, [f"k{i}", prev] if i % 2 else [prev, f"k{i}"], [out], name=f"op{i}"))
        prev = out
    graph = helper.make_graph(nodes, "affine", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


PER_CHANNEL = RNG.uniform(0.5, 1.5, (C, 1, 1))


@pytest.mark.parametrize("conv", [True, False])
@pytest.mark.parametrize("ops, fused", [
    ([("BatchNormalization", None), ("Mul", PER_CHANNEL), ("Add", PER_CHANNEL - 1), ("Relu", None)], 4),
    ([("Mul", np.float32(1.5)), ("Add", PER_CHANNEL.reshape(1, C, 1, 1)), ("Sigmoid", None)], 3),
    ([("Add", PER_CHANNEL.reshape(C)[None, :, None, None]), ("Mul", PER_CHANNEL)], 2),
])
def test_per_channel_affine_ops_fold_into_one_step(conv, ops, fused):
    model = affine_model(ops, conv=conv)
    x = RNG.standard_normal((1, C, 5, 5)).astype(np.float32)
    executor, got, plain, ref = run_both(model, {"x": x})
    assert len(executor.steps) == 1 and len(executor.steps[0].fused) == fused + conv
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("value", [
    RNG.standard_normal((1, C, 5, 5)),  # one value per element, not per channel
    RNG.standard_normal((C, 5, 1)),     # varies along a spatial axis
    RNG.standard_normal((2, C, 1, 1)),  # grows the batch
])
def test_constants_that_are_not_per_channel_are_left_alone(value):
    model = affine_model([("Mul", value), ("Add", PER_CHANNEL)], conv=False)
    x = RNG.standard_normal((1, C, 5, 5)).astype(np.float32)
    executor, got, plain, ref = run_both(model, {"x": x})
    assert executor.steps[0].op.type == "Mul" and not executor.steps[0].fused
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)


def test_a_full_shape_constant_after_a_conv_is_added_as_a_residual():
    model = affine_model([("Add", RNG.standard_normal((1, C, 5, 5))), ("Relu", None)], conv=True)
    x = RNG.standard_normal((1, C, 5, 5)).astype(np.float32)
    executor, got, plain, ref = run_both(model, {"x": x})
    assert [op.type for op in executor.steps[0].fused] == ["Conv", "Add", "Relu"]
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-5)


def test_an_op_whose_kernel_was_replaced_runs_its_own_kernel():
    import dataclasses

    from xgraph.registries import default_registries

    table = default_registries().kernels
    replacements = [dataclasses.replace(k, fn=lambda x: -x) for k in table if k.op_type == "Relu"]
    for k in replacements:
        table.add(k)  # an obviously different "Relu", found before the built-in one
    try:
        model = block_model()
        feeds = feeds_for(model)
        executor, got, plain, ref = run_both(model, feeds)
    finally:
        for k in replacements:
            table.remove(k)
    assert [op.type for op in executor.steps[0].fused] == ["Conv", "BatchNormalization", "Add"]
    assert executor.steps[-1].op.type == "Relu" and not executor.steps[-1].fused
    np.testing.assert_allclose(got[0], plain[0], rtol=1e-5, atol=1e-6)  # both ran the replacement
    np.testing.assert_allclose(np.maximum(-got[0], 0), ref[0], rtol=1e-5, atol=1e-5)  # got = -(Relu's input)
