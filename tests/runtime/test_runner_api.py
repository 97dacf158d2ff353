"""The Runner API (API.md §5): creation through the registry, execute_async/wait, outputs, errors, close."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph import Graph, Runner
from xgraph.errors import RunnerError, XGraphError
from xgraph.runners.jobs import JobStatus


def relu_add_graph() -> Graph:
    """y = Relu(a) + b on (2, 3) float32, one CPU subgraph."""
    nodes = [helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "relu_add",
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    graph = Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    root = graph.get_root_subgraph()
    root.create_child_subgraph()
    sg = root.merge_children(root.get_children())
    sg.set_attr("device", "CPU")
    sg.set_attr("runner", {"run": "cpu", "ref": "cpu"})
    return graph


def only_child(graph: Graph):
    (sg,) = graph.get_root_subgraph().get_children()
    return sg


def inputs(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2)]


def oracle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, 0) + b


class GateRunner(Runner):
    """Waits for `gate` before answering; counts starts (a user-written runner that skips super().__init__)."""

    gate = threading.Event()
    started = threading.Semaphore(0)

    def __init__(self, subgraph, mode):
        self.sg = subgraph

    def get_input_tensors(self):
        return self.sg.get_input_tensors()

    def get_output_tensors(self):
        return self.sg.get_output_tensors()

    def execute(self, inputs):
        type(self).started.release()
        if not type(self).gate.wait(10):
            raise RuntimeError("gate never opened")
        return [oracle(*inputs)]


class FailingRunner(Runner):
    """Fails when the first input has a negative first element; otherwise computes the oracle."""

    def execute(self, inputs):
        if inputs[0].flat[0] < 0:
            raise ValueError("negative first element")
        return [oracle(*inputs)]


@pytest.fixture
def gate_runner():
    xgraph.register_runner("test_gate", GateRunner)
    GateRunner.gate = threading.Event()
    GateRunner.started = threading.Semaphore(0)
    graph = relu_add_graph()
    only_child(graph).set_attr("runner", {"run": "test_gate"})
    runner = Runner.create_runner(only_child(graph))
    yield runner
    GateRunner.gate.set()
    runner.close()


# -- creation -------------------------------------------------------------------------------------
def test_create_runner_without_runner_attr_names_subgraph_and_device():
    graph = relu_add_graph()
    sg = only_child(graph)
    sg.del_attr("runner")
    with pytest.raises(RunnerError, match=rf"subgraph '{sg.name}' \(device CPU\).*compile"):
        Runner.create_runner(sg)


def test_create_runner_missing_mode_lists_the_modes_it_has():
    sg = only_child(relu_add_graph())
    with pytest.raises(RunnerError, match=rf"{sg.name}.*CPU.*no runner for mode 'sim'.*modes: ref, run"):
        Runner.create_runner(sg, mode="sim")


def test_create_runner_unknown_name_lists_registered_runners():
    sg = only_child(relu_add_graph())
    sg.set_attr("runner", {"run": "no_such_runner"})
    with pytest.raises(RunnerError, match=r"registered as 'no_such_runner'.*registered runners: .*aicore.*cpu.*null"):
        Runner.create_runner(sg)


def test_create_runner_never_imports_a_path_from_the_model():
    sg = only_child(relu_add_graph())
    sg.set_attr("runner", {"run": "os.system"})
    with pytest.raises(RunnerError, match="no runner is registered as 'os.system'"):
        Runner.create_runner(sg)


def test_create_runner_rejects_unknown_kernels_choice():
    with pytest.raises(RunnerError, match="kernels='gpu'"):
        Runner.create_runner(only_child(relu_add_graph()), kernels="gpu")


def test_register_runner_refuses_non_runner_classes():
    with pytest.raises(RunnerError, match="not a subclass of xgraph.Runner"):
        xgraph.register_runner("test_bad", dict)


def test_builtin_runner_is_created_from_the_registry_and_runs():
    graph = relu_add_graph()
    with Runner.create_runner(only_child(graph), kernels="numpy") as runner:
        assert type(runner).__name__ == "CPURunner"
        a, b = inputs()
        (y,) = runner.run([a, b])
        np.testing.assert_allclose(y, oracle(a, b), rtol=1e-6)
        (y2,) = runner.run({"b": b, "a": a})
        np.testing.assert_array_equal(y, y2)
        stats = runner.get_stats()
        assert stats["runs"] == 2 and stats["bytes_in"] == 2 * 2 * a.nbytes and stats["bytes_out"] == 2 * y.nbytes


# -- execute_async / wait -------------------------------------------------------------------------
def test_execute_async_fills_preallocated_outputs_and_wait_takes_tuple_or_id():
    with Runner.create_runner(only_child(relu_add_graph())) as runner:
        outs = [np.empty((2, 3), np.float32) for _ in range(4)]
        jobs = [runner.execute_async(inputs(i), [outs[i]]) for i in range(4)]
        assert all(isinstance(j, tuple) and j[1] == 0 for j in jobs)
        assert len({j[0] for j in jobs}) == 4
        assert runner.wait(jobs[0]) == 0
        assert runner.wait(jobs[1][0], timeout=10) == 0
        assert runner.wait(jobs[2], timeout=10) == 0 and runner.wait(jobs[3][0]) == 0
        for i in range(4):
            np.testing.assert_allclose(outs[i], oracle(*inputs(i)), rtol=1e-6)
        assert runner.get_error(jobs[0]) is None


def test_execute_async_returns_before_the_job_runs(gate_runner):
    out = np.empty((2, 3), np.float32)
    job = gate_runner.execute_async(inputs(), [out])
    assert GateRunner.started.acquire(timeout=5)
    assert not gate_runner._rt.jobs.get(job).done
    GateRunner.gate.set()
    assert gate_runner.wait(job, timeout=10) == JobStatus.OK
    np.testing.assert_allclose(out, oracle(*inputs()))


def test_wait_timeout_raises_naming_the_job(gate_runner):
    job = gate_runner.execute_async(inputs(), [np.empty((2, 3), np.float32)])
    with pytest.raises(RunnerError, match=rf"job {job[0]} did not finish within 0.05 s"):
        gate_runner.wait(job, timeout=0.05)
    GateRunner.gate.set()
    assert gate_runner.wait(job, timeout=10) == 0


def test_wait_on_unknown_job_is_an_error():
    with Runner.create_runner(only_child(relu_add_graph())) as runner:
        with pytest.raises(RunnerError, match="unknown job 12345"):
            runner.wait(12345)
        with pytest.raises(RunnerError, match="job_id"):
            runner.wait("7")


@pytest.mark.parametrize("buffer, message", [
    (np.empty((3, 2), np.float32), r"output buffer for 'y' must have shape \(2, 3\), got \(3, 2\)"),
    (np.empty((2, 3), np.float64), r"output buffer for 'y' must be float32, got float64"),
])
def test_wrong_output_buffer_is_refused_naming_the_tensor(buffer, message):
    with Runner.create_runner(only_child(relu_add_graph())) as runner:
        with pytest.raises(RunnerError, match=message):
            runner.execute_async(inputs(), [buffer])


def test_wrong_inputs_are_refused_naming_the_tensor():
    with Runner.create_runner(only_child(relu_add_graph())) as runner:
        a, b = inputs()
        with pytest.raises(RunnerError, match=r"input 'a' must be float32, got float64"):
            runner.run([a.astype(np.float64), b])
        with pytest.raises(RunnerError, match=r"input 'b' must have shape \(2, 3\), got \(3,\)"):
            runner.run([a, b[0]])
        with pytest.raises(RunnerError, match=r"input 'b' is missing"):
            runner.run({"a": a})
        with pytest.raises(RunnerError, match=r"expected 2 inputs \(a, b\), got 1"):
            runner.run([a])


def test_failed_job_has_nonzero_status_and_error_and_runner_keeps_serving():
    xgraph.register_runner("test_failing", FailingRunner)
    graph = relu_add_graph()
    only_child(graph).set_attr("runner", {"run": "test_failing"})
    with Runner.create_runner(only_child(graph)) as runner:
        a, b = inputs()
        bad = runner.execute_async([-np.abs(a), b], [np.empty((2, 3), np.float32)])
        good_out = np.empty((2, 3), np.float32)
        good = runner.execute_async([np.abs(a), b], [good_out])
        assert runner.wait(bad, timeout=10) == JobStatus.FAILED
        error = runner.get_error(bad)
        assert isinstance(error, RunnerError) and "negative first element" in str(error)
        assert f"job {bad[0]}" in str(error)
        assert runner.wait(good, timeout=10) == 0
        np.testing.assert_allclose(good_out, oracle(np.abs(a), b))
        assert runner.get_stats()["failures"] == 1


def test_full_queue_raises_when_not_blocking(gate_runner):
    gate_runner.max_jobs_in_flight = 2
    gate_runner.block_when_full = False
    buffers = [np.empty((2, 3), np.float32) for _ in range(3)]
    gate_runner.execute_async(inputs(), [buffers[0]])
    gate_runner.execute_async(inputs(), [buffers[1]])
    with pytest.raises(RunnerError, match="2 jobs are already in flight"):
        gate_runner.execute_async(inputs(), [buffers[2]])


def test_close_cancels_queued_and_running_jobs_without_hanging(gate_runner):
    gate_runner.close_timeout = 0.2
    jobs = [gate_runner.execute_async(inputs(), [np.empty((2, 3), np.float32)]) for _ in range(3)]
    assert GateRunner.started.acquire(timeout=5)  # the first job is inside execute
    start = time.perf_counter()
    gate_runner.close()
    assert time.perf_counter() - start < 3
    for job in jobs:
        assert gate_runner.wait(job, timeout=1) == JobStatus.CANCELLED
        assert "cancelled" in str(gate_runner.get_error(job))
    with pytest.raises(RunnerError, match="closed"):
        gate_runner.execute_async(inputs(), [np.empty((2, 3), np.float32)])
    GateRunner.gate.set()
    gate_runner._rt.worker.join(5)
    assert not gate_runner._rt.worker.is_alive()
    assert gate_runner.wait(jobs[0], timeout=1) == JobStatus.CANCELLED  # the late finish does not overwrite it


def test_context_manager_closes_and_stops_the_worker():
    with Runner.create_runner(only_child(relu_add_graph())) as runner:
        job = runner.execute_async(inputs(), [np.empty((2, 3), np.float32)])
        assert runner.wait(job, timeout=10) == 0
        worker = runner._rt.worker
    assert not worker.is_alive() and worker.daemon


def test_runner_errors_are_xgraph_errors():
    assert issubclass(RunnerError, XGraphError)


def test_ref_mode_runs_the_reference_evaluator():
    graph = relu_add_graph()
    with Runner.create_runner(only_child(graph), mode="ref") as runner:
        a, b = inputs(3)
        np.testing.assert_allclose(runner.run([a, b])[0], oracle(a, b), rtol=1e-6)
        assert runner.backend == "reference"
