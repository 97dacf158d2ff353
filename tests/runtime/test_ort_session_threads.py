"""The onnxruntime session behind kernels="auto": onnxruntime's own thread pool for a whole-graph
subgraph, a small non-spinning one when device subgraphs run side by side, and the calling thread
alone when no op is worth splitting."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime")

import xgraph  # noqa: E402
from xgraph.runners.ort_session import (ONE_THREAD_BELOW_FLOPS, ORT_INTRA_OP_THREADS, ort_session,  # noqa: E402
                                        splits_pay)
from xgraph.errors import RunnerError  # noqa: E402
from testing.runtime import place  # noqa: E402


#: ops of this many elements are worth splitting across threads
ROWS = 2 * ONE_THREAD_BELOW_FLOPS // 8


def _graph(rows: int = ROWS) -> xgraph.Graph:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, 8])])
    return xgraph.Graph.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _sessions(graph: xgraph.Graph):
    return [ort_session(sg) for sg in graph.get_root_subgraph().toposort_child_subgraph()]


def test_a_whole_graph_subgraph_keeps_onnxruntimes_thread_defaults():
    (session,) = _sessions(place(_graph(), {"relu": "AICORE", "softmax": "AICORE"}))
    options = session.get_session_options()
    assert options.intra_op_num_threads == 0  # onnxruntime's default: one thread per physical core
    with pytest.raises(RuntimeError):  # the spinning entry is not set: onnxruntime's default (spin)
        options.get_session_config_entry("session.intra_op.allow_spinning")
    with pytest.raises(RuntimeError):  # and it keeps spinning between runs
        options.get_session_config_entry("session.force_spinning_stop")


def test_sessions_taking_turns_stop_spinning_at_the_end_of_each_run():
    from xgraph.runners.ort_session import sessions_take_turns
    with sessions_take_turns():
        (session,) = _sessions(place(_graph(), {"relu": "AICORE", "softmax": "AICORE"}))
    (after,) = _sessions(place(_graph(), {"relu": "AICORE", "softmax": "AICORE"}))
    assert session.get_session_options().get_session_config_entry("session.force_spinning_stop") == "1"
    with pytest.raises(RuntimeError):  # outside the block: a lone session again
        after.get_session_options().get_session_config_entry("session.force_spinning_stop")
    x = np.random.default_rng(0).standard_normal((ROWS, 8)).astype(np.float32)
    e = np.exp(np.maximum(x, 0))
    np.testing.assert_allclose(session.run(None, {"x": x})[0], e / e.sum(1, keepdims=True), rtol=1e-6)


def test_sibling_subgraphs_share_the_cores():
    sessions = _sessions(place(_graph(), {"relu": "AICORE", "softmax": "CPU"}))
    assert len(sessions) == 2
    for session in sessions:
        options = session.get_session_options()
        assert options.intra_op_num_threads == ORT_INTRA_OP_THREADS
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_the_gears_of_a_model_take_turns():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = xgraph.compile(model, {"input_shape": "x:-1,8", "dynamic_batch_size": "1,2"})
    with xgraph.create_graph_runner(graph, kernels="onnxruntime") as runner:
        sessions = [r._executor._backend._session for r in runner.runners.values()]
        np.testing.assert_array_equal(runner.run({"x": -np.ones((2, 8), np.float32)})[0], np.zeros((2, 8)))
    # one graph but for shapes: one session, for both gears and the runner they share (serve_gears)
    assert len(sessions) == 3 and all(s is sessions[0] for s in sessions)
    with pytest.raises(RuntimeError):  # nothing runs between its runs: it keeps spinning, as a lone session
        sessions[0].get_session_options().get_session_config_entry("session.force_spinning_stop")


def test_gears_that_differ_by_more_than_shapes_keep_their_own_sessions():
    """y = x + ramp, the ramp a Range over x's length: folded per gear, a different weight in each."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])
    nodes = [helper.make_node("Shape", ["x"], ["len"]),
             helper.make_node("Squeeze", ["len"], ["n"]),
             helper.make_node("Cast", ["n"], ["nf"], to=TensorProto.FLOAT),
             helper.make_node("Range", ["zero", "nf", "one"], ["ramp"]),
             helper.make_node("Add", ["x", "ramp"], ["y"])]
    init = [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]), helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=init),
                              opset_imports=[helper.make_opsetid("", 17)])
    sizes = (ONE_THREAD_BELOW_FLOPS, ONE_THREAD_BELOW_FLOPS + 2, 2 * ONE_THREAD_BELOW_FLOPS)  # worth splitting
    graph = xgraph.compile(model, {"input_shape": "x:-1", "dynamic_dims": ";".join(map(str, sizes))})
    with xgraph.create_graph_runner(graph, kernels="onnxruntime") as runner:
        sessions = {r._executor._backend._session for r in runner.runners.values()}
        for n in sizes:
            np.testing.assert_array_equal(runner.run({"x": np.ones(n, np.float32)})[0], np.arange(n) + 1.0)
    assert len(sessions) == 3  # they alternate: each stops spinning when its run ends
    assert all(s.get_session_options().get_session_config_entry("session.force_spinning_stop") == "1"
               for s in sessions)


def test_closing_a_runner_frees_its_onnxruntime_session():
    """The backend's bound run method held the session: a closed runner kept its memory (a 2.4 GB
    model's packed weights) until the runner object itself went away."""
    import gc
    import weakref
    graph = place(_graph(), {"relu": "AICORE", "softmax": "AICORE"})
    runner = xgraph.create_graph_runner(graph, kernels="onnxruntime")
    (device_runner,) = runner.runners.values()
    session = weakref.ref(device_runner._executor._backend._session._sess)  # the native session itself
    runner.run({"x": np.ones((ROWS, 8), np.float32)})
    runner.close()
    gc.collect()
    assert session() is None
    with pytest.raises(RunnerError, match="closed"):
        runner.run({"x": np.ones((ROWS, 8), np.float32)})


def _matmul(k: int, n: int, rows: "int | str" = 1) -> "onnx.ModelProto":
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])
    w = helper.make_tensor("w", TensorProto.FLOAT, [k, n], np.ones(k * n, np.float32))
    return helper.make_model(helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "g", [x], [y],
                                               initializer=[w]), opset_imports=[helper.make_opsetid("", 17)])


def test_a_graph_of_small_ops_runs_on_the_calling_thread_alone():
    """A small decoder's step: waking a second thread for an op of a few thousand FLOPs costs more than it saves."""
    small = place(_graph(rows=2), {"relu": "AICORE", "softmax": "AICORE"})
    (session,) = _sessions(small)
    options = session.get_session_options()
    assert options.intra_op_num_threads == 1
    with pytest.raises(RuntimeError):  # one thread: no pool to spin or stop
        options.get_session_config_entry("session.force_spinning_stop")
    for session in _sessions(place(_graph(rows=2), {"relu": "AICORE", "softmax": "CPU"})):  # siblings too
        assert session.get_session_options().intra_op_num_threads == 1
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    with xgraph.create_graph_runner(small, kernels="onnxruntime") as runner:
        e = np.exp(np.maximum(x, 0))
        np.testing.assert_allclose(runner.run({"x": x})[0], e / e.sum(1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("k, n, options, pays", [
    (32, 64, {}, False),  # 2 * 32 * 64 FLOPs
    (256, 256, {}, True),  # 2 * 256 * 256 = 131k
    (32, 64, {"input_shape": "x:-1,32"}, False),  # a dynamic dim without a range: sized 1, as the estimates do
    (32, 64, {"input_shape": "x:1..64,32"}, True),  # ... with one: at its top, 64 rows (262k FLOPs)
])
def test_the_heaviest_op_decides_at_the_sizes_the_estimates_assume(k, n, options, pays):
    graph = xgraph.compile(_matmul(k, n, rows="m" if options else 1), options)
    (child,) = graph.get_root_subgraph().get_children()
    assert splits_pay(child) is pays
    assert ort_session(child).get_session_options().intra_op_num_threads == (0 if pays else 1)


def test_ops_of_unknown_size_keep_the_threads():
    graph = xgraph.Graph.from_onnx(_matmul(32, 64), infer_shapes=False)
    graph.get_op("mm").get_output_tensors()[0].shape = None
    graph.get_root_subgraph().create_child_subgraph()
    (child,) = graph.get_root_subgraph().get_children()
    assert splits_pay(child)


def _projection(k: int, n: int) -> "onnx.ModelProto":
    """A decoder's projection: a 3-D activation times a weight, plus a bias (static shapes)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, n])
    rng = np.random.default_rng(2)
    init = [helper.make_tensor("w", TensorProto.FLOAT, [k, n], rng.standard_normal(k * n).astype(np.float32)),
            helper.make_tensor("b", TensorProto.FLOAT, [n], rng.standard_normal(n).astype(np.float32))]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"),
             helper.make_node("Add", ["xw", "b"], ["y"], name="add")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=init),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("k, n, left_out", [(32, 96, ["MatMulAddFusion"]), (256, 768, None)])
def test_small_op_sessions_leave_out_rewrites_that_add_nodes(monkeypatch, k, n, left_out):
    """onnxruntime turns a static 3-D MatMul + Add into Reshape -> Gemm -> Reshape: two more nodes,
    which cost more than they save around ops too small to split (one-thread sessions)."""
    import onnxruntime as ort
    made = []
    real = ort.InferenceSession

    def record(*args, **kwargs):
        made.append(kwargs.get("disabled_optimizers"))
        return real(*args, **kwargs)
    monkeypatch.setattr(ort, "InferenceSession", record)
    graph = xgraph.compile(_projection(k, n))
    (child,) = graph.get_root_subgraph().get_children()
    assert splits_pay(child) is (left_out is None)
    x = np.random.default_rng(3).standard_normal((1, 1, k)).astype(np.float32)
    with xgraph.create_graph_runner(graph, kernels="onnxruntime") as runner:
        got = runner.run({"x": x})[0]
    assert made == [left_out]
    expected = real(_projection(k, n).SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_every_run_passes_the_same_run_options():
    """Given None, onnxruntime's binding makes default RunOptions on every call (about 1 us of a small
    decoder's 44 us step): the backend hands its one RunOptions to every run."""
    import onnxruntime as ort
    graph = place(_graph(rows=2), {"relu": "AICORE", "softmax": "AICORE"})
    with xgraph.create_graph_runner(graph, kernels="onnxruntime") as runner:
        (device_runner,) = runner.runners.values()
        backend = device_runner._executor._backend
        seen = []
        real = backend._run

        def spy(outputs, feeds, options):
            seen.append(options)
            return real(outputs, feeds, options)
        backend._run = spy
        for _ in range(3):
            runner.run({"x": np.ones((2, 8), np.float32)})
    assert len(seen) == 3 and isinstance(seen[0], ort.RunOptions) and all(o is seen[0] for o in seen)
