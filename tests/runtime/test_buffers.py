"""Output buffers reused across runs: reused when free, never while anything still refers to them."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from xgraph import Graph
from xgraph.runners.buffers import MAX_BUFFERS_PER_LAYOUT, BufferPool
from xgraph.runners.executor import SubgraphExecutor
from xgraph.runners.testing import place

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
    assert fused.steps[0].output_buffer == ((1, 4, 6, 6), np.dtype(np.float32))
    for k in range(4):
        x = RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
        np.testing.assert_allclose(fused.run([x])[0], plain.run([x])[0], rtol=1e-5, atol=1e-6)
        if k == 0:
            held = fused._buffers.nbytes()
    assert fused._buffers.nbytes() == held == 4 * 6 * 6 * 4  # one buffer, made once


def test_a_buffer_a_returned_view_still_uses_is_not_handed_out_again():
    fused, plain = executors(conv_model("Reshape"))
    x1, x2 = (RNG.standard_normal((1, 3, 6, 6)).astype(np.float32) for _ in range(2))
    (first,) = fused.run([x1])
    kept = first.copy()
    (second,) = fused.run([x2])
    np.testing.assert_array_equal(first, kept)  # the first result (a view of a buffer) is untouched
    np.testing.assert_allclose(second, plain.run([x2])[0], rtol=1e-5, atol=1e-6)
    del first
    fused.run([x1])
    assert fused._buffers.nbytes() == 2 * 4 * 6 * 6 * 4  # two buffers while the first result lived; no more


def test_the_pool_hands_out_only_free_buffers_and_keeps_a_bounded_number():
    pool = BufferPool()
    a = pool.take((2, 3), np.float32)
    b = pool.take((2, 3), np.float32)
    assert a is not b and a.shape == (2, 3) and a.dtype == np.float32 and a.flags.c_contiguous
    view = a[0]
    del a
    c = pool.take((2, 3), np.float32)
    assert c is not b and c is not view.base  # `a` lives on through its view
    del view, c
    assert pool.take((2, 3), np.float32).shape == (2, 3)
    held = [pool.take((5,), np.float64) for _ in range(MAX_BUFFERS_PER_LAYOUT + 3)]
    assert len({id(h) for h in held}) == len(held)
    assert pool.nbytes() <= (2 + 1 + MAX_BUFFERS_PER_LAYOUT) * 6 * 8
