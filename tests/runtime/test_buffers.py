"""Output buffers reused across runs, laid out by the plan's liveness: never overwriting what a caller holds."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from xgraph import Graph
from xgraph.runners.buffers import BufferFrames
from xgraph.runners.executor import SubgraphExecutor
from testing.runtime import place

RNG = np.random.default_rng(11)


def conv_model(tail: str = "Relu"):
    """x -> Conv(+bias) -> Relu -> tail; the tail (Relu or Reshape) output is the model output."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(RNG.standard_normal(4).astype(np.float32), "b")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    if tail == "Reshape":
        nodes.append(helper.make_node("Reshape", ["r", "shape"], ["y"], name="flat"))
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4 * 6 * 6])
    else:
        nodes.append(helper.make_node("Neg", ["r"], ["y"], name="neg"))
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])
    graph = helper.make_graph(nodes, "buffers", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
                              [out], [w, b, shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def executors(model):
    (sg,) = place(Graph.from_onnx(model), lambda op: "AICORE").get_root_subgraph().toposort_child_subgraph()
    return SubgraphExecutor(sg, "AICORE", fuse=True), SubgraphExecutor(sg, "AICORE", fuse=False)


def test_a_fused_step_writes_into_the_same_buffer_every_run():
    fused, plain = executors(conv_model())
    assert fused.steps[0].layout == ((1, 4, 6, 6), np.dtype(np.float32)) and fused.steps[0].buffer == 0
    assert fused.plan.buffers == (((1, 4, 6, 6), np.dtype(np.float32)),)
    for k in range(4):
        x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
        np.testing.assert_allclose(fused.run([x])[0], plain.run([x])[0], rtol=1e-5, atol=1e-6)
        if k == 0:
            held = fused.stats()["buffer_bytes"]
    stats = fused.stats()
    assert stats["buffer_bytes"] == held == 4 * 6 * 6 * 4 and stats["buffer_frames"] == 1  # one buffer, made once


def test_a_buffer_a_returned_view_still_uses_is_not_handed_out_again():
    fused, plain = executors(conv_model("Reshape"))
    x1, x2 = (RNG.standard_normal((1, 3, 6, 6)).astype(np.float32) for _ in range(2))
    (first,) = fused.run([x1])
    kept = first.copy()
    (second,) = fused.run([x2])
    np.testing.assert_array_equal(first, kept)  # the first result (a view of a buffer) is untouched
    np.testing.assert_allclose(second, plain.run([x2])[0], rtol=1e-5, atol=1e-6)
    assert fused.plan.escaping_buffers == {0}  # the output may be a view of the buffer: it is copied out
    (third,) = fused.run([x1])
    np.testing.assert_array_equal(third, kept)
    np.testing.assert_array_equal(first, kept)
    assert fused.stats()["buffer_bytes"] == 4 * 6 * 6 * 4  # still one buffer: no result is ever a view of it


def test_frames_are_reused_one_per_run_in_flight():
    frames = BufferFrames([((2, 3), np.float32), ((5,), np.float64)])
    a = frames.take()
    b = frames.take()  # a second run at the same time gets its own frame
    x = frames.array(a, 0)
    assert x.shape == (2, 3) and x.dtype == np.float32 and x.flags.c_contiguous and frames.array(a, 0) is x
    assert b[0] is None and frames.frames() == 2
    frames.give_back(a)
    assert frames.take() is a and frames.nbytes() == 0  # held bytes count the frames not in use
    frames.give_back(a)
    frames.give_back(b)
    assert frames.nbytes() == 2 * 3 * 4 and frames.frames() == 2


def test_steps_whose_buffers_are_busy_at_once_get_different_buffers():
    """Fused Conv+Relu chains of one layout: a buffer is reused once nothing can still read a view of it."""
    w = numpy_helper.from_array(RNG.standard_normal((3, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Add", ["r1", "r2"], ["s"], name="add"),
             helper.make_node("Conv", ["s", "w"], ["c3"], name="conv3", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c3"], ["r3"], name="relu3"),
             helper.make_node("Conv", ["r3", "w"], ["c4"], name="conv4", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c4"], ["r4"], name="relu4"),
             helper.make_node("Neg", ["r4"], ["y"], name="neg")]
    shape = [1, 3, 6, 6]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [w])
    fused, plain = executors(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    buffers = {s.op.name: s.buffer for s in fused.steps if s.fused}
    assert buffers["conv1"] != buffers["conv2"]  # r1 is read by the Add after conv2 wrote its output
    # the Add's output may be a view of either (a kernel may return one): conv3, reading it, needs a third
    assert buffers["conv3"] not in (buffers["conv1"], buffers["conv2"])
    assert buffers["conv4"] in (buffers["conv1"], buffers["conv2"]) and len(fused.plan.buffers) == 3
    for _ in range(3):
        x = RNG.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(fused.run([x])[0], plain.run([x])[0], rtol=1e-5, atol=1e-5)
