"""The onnxruntime session behind kernels="auto": onnxruntime's own thread pool for a whole-graph
subgraph, a small non-spinning one when device subgraphs run side by side."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime")

import xgraph  # noqa: E402
from xgraph.runners.ort_session import ORT_INTRA_OP_THREADS, ort_session  # noqa: E402
from xgraph.errors import RunnerError  # noqa: E402
from testing.runtime import place  # noqa: E402


def _graph() -> xgraph.Graph:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="softmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
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
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
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
    graph = xgraph.compile(model, {"input_shape": "x:-1", "dynamic_dims": "3;5;3000"})
    with xgraph.create_graph_runner(graph, kernels="onnxruntime") as runner:
        sessions = {r._executor._backend._session for r in runner.runners.values()}
        for n in (3, 5, 3000):
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
    runner.run({"x": np.ones((2, 8), np.float32)})
    runner.close()
    gc.collect()
    assert session() is None
    with pytest.raises(RunnerError, match="closed"):
        runner.run({"x": np.ones((2, 8), np.float32)})
