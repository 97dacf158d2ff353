"""GraphRunner scheduling: DAG order, pipelining, one task per device at a time, failures, close, copies, traces.

Overlap is shown by events (a stage waits until another stage has provably started), never by timing.
"""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph import Graph, Runner
from xgraph.errors import KernelError, RunnerError, XGraphError
from xgraph.runners.jobs import JobStatus
from xgraph.kernels import KERNELS, kernel

WAIT = 5.0  # seconds an event-based check waits before concluding "it did not happen"


@kernel("Boom", domain="test.runtime", devices=("AICPU", "CPU"), registry=KERNELS)
def boom(x: np.ndarray) -> np.ndarray:
    """Doubles x, and fails on NaN input: the injected failing kernel."""
    if np.isnan(x).any():
        raise KernelError("Boom: NaN input")
    return x * 2


def diamond_model():
    """x -> Relu (a) and x -> Neg (b), y = a + b."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Neg", ["x"], ["b"], name="b"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    g = helper.make_graph(nodes, "diamond", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def boom_model():
    """x -> Relu -> Boom (custom domain) -> Relu -> y."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu1"),
             helper.make_node("Boom", ["r"], ["bm"], name="boom", domain="test.runtime"),
             helper.make_node("Relu", ["bm"], ["y"], name="relu2")]
    g = helper.make_graph(nodes, "boom", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("test.runtime", 1)])


class PassRunner(Runner):
    """Returns its first input as every output (no copy); hooks let tests observe or block it."""

    on_execute = None  # callable(runner, inputs) set by a test

    def execute(self, inputs):
        hook = type(self).on_execute
        if hook is not None:
            hook(self, inputs)
        return [inputs[0] for _ in self.get_output_tensors()]


@pytest.fixture
def pass_runner():
    """A fresh PassRunner subclass registered as 'test_pass'."""
    cls = type("TestPass", (PassRunner,), {"on_execute": None})
    xgraph.register_runner("test_pass", cls)
    return cls


def chain_graph(make, devices: list[str], runner="test_pass", shape=(1, 4)) -> Graph:
    """x -> op000 -> op001 ... one subgraph per op on the given devices."""
    graph = Graph.from_onnx(make.chain_model(len(devices), shape))
    return make.place(graph, {f"op{i:03d}": d for i, d in enumerate(devices)}, runner=runner, merge=False)


def x_of(value: float) -> np.ndarray:
    return np.full((1, 4), value, np.float32)


# -- basics ---------------------------------------------------------------------------------------
def test_uncompiled_graph_is_refused_with_a_hint_to_compile(make):
    graph = Graph.from_onnx(make.chain_model(2))
    with pytest.raises(XGraphError, match="compile it first"):
        xgraph.create_graph_runner(graph)


def test_null_runner_chain_returns_zeros_of_declared_shapes(make):
    graph = chain_graph(make, ["AICORE", "AICPU", "CPU"], runner="null", shape=(2, 5))
    with xgraph.create_graph_runner(graph) as runner:
        (y,) = runner.run({"x": np.ones((2, 5), np.float32)})
    assert y.shape == (2, 5) and y.dtype == np.float32 and not y.any()


def test_results_follow_the_dag_and_graph_output_order(make):
    graph = make.place(Graph.from_onnx(diamond_model()), {"a": "AICORE", "b": "AICPU", "add": "CPU"})
    x = np.array([[-2, -1, 1, 2]], np.float32)
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        (y,) = runner.run({"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0) - x)


def test_many_jobs_in_flight_each_get_their_own_results(make):
    model = make.small_cnn()
    graph = make.place(Graph.from_onnx(model), lambda op: "CPU" if op.type in ("Flatten", "Softmax") else "AICORE")
    session = ort.InferenceSession(model.SerializeToString())
    xs = [np.random.default_rng(i).standard_normal((1, 3, 8, 8)).astype(np.float32) for i in range(8)]
    with xgraph.create_graph_runner(graph, kernels="numpy", max_jobs_in_flight=8) as runner:
        buffers = [[np.empty((1, 10), np.float32), np.empty((1, 10), np.float32)] for _ in xs]
        jobs = [runner.execute_async({"x": x}, out) for x, out in zip(xs, buffers)]
        assert [runner.wait(j, timeout=30) for j in jobs] == [0] * len(xs)
    for x, (prob, logits) in zip(xs, buffers):
        ref_prob, ref_logits = session.run(None, {"x": x})
        np.testing.assert_allclose(logits, ref_logits, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(prob, ref_prob, rtol=1e-5, atol=1e-6)


# -- overlap and ordering ---------------------------------------------------------------------------
def test_successive_jobs_overlap_across_devices(make, pass_runner):
    """Stage B (AICPU) of job 1 waits until stage A (AICORE) has started job 2: only pipelining lets that happen."""
    graph = chain_graph(make, ["AICORE", "AICPU"])
    second_job_started = threading.Event()
    seen_by_b = []

    def hook(runner, inputs):
        value = float(inputs[0].flat[0])
        if runner.subgraph.get_attr("device") == "AICORE" and value == 2:
            second_job_started.set()
        if runner.subgraph.get_attr("device") == "AICPU" and value == 1:
            seen_by_b.append(second_job_started.wait(WAIT))

    pass_runner.on_execute = hook
    with xgraph.create_graph_runner(graph) as runner:
        jobs = [runner.execute_async({"x": x_of(v)}) for v in (1, 2)]
        assert [runner.wait(j, timeout=30) for j in jobs] == [0, 0]
        assert [runner.get_outputs(j)[0][0, 0] for j in jobs] == [1, 2]
    assert seen_by_b == [True]


def test_independent_subgraphs_on_different_devices_overlap(make, pass_runner):
    graph = make.place(Graph.from_onnx(diamond_model()), {"a": "AICORE", "b": "AICPU", "add": "CPU"},
                          runner=lambda d: "test_pass" if d != "CPU" else "cpu")
    barrier = threading.Barrier(2, timeout=WAIT)
    pass_runner.on_execute = lambda runner, inputs: barrier.wait()  # both branches must be inside at once
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        (y,) = runner.run({"x": x_of(3)})
    assert not barrier.broken
    np.testing.assert_array_equal(y, x_of(6))


def test_one_device_runs_one_subgraph_at_a_time(make, pass_runner):
    graph = make.place(Graph.from_onnx(diamond_model()), {"a": "AICORE", "b": "AICORE", "add": "CPU"},
                          runner=lambda d: "test_pass" if d != "CPU" else "cpu", merge=False)
    lock = threading.Lock()
    active, peak = [0], [0]
    entered = threading.Event()

    def hook(runner, inputs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        entered.wait(0.05)  # linger, so a second task on the same device would be caught inside
        with lock:
            active[0] -= 1

    pass_runner.on_execute = hook
    with xgraph.create_graph_runner(graph, kernels="numpy", max_jobs_in_flight=4) as runner:
        jobs = [runner.execute_async({"x": x_of(v)}) for v in range(4)]
        assert all(runner.wait(j, timeout=30) == 0 for j in jobs)
    assert peak == [1]


# -- failures, timeouts, close ----------------------------------------------------------------------
def test_kernel_failure_fails_only_its_job(make):
    graph = make.place(Graph.from_onnx(boom_model()), {"relu1": "AICORE", "boom": "AICPU", "relu2": "CPU"})
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        good1 = runner.execute_async({"x": x_of(1)})
        bad = runner.execute_async({"x": x_of(np.nan)})
        good2 = runner.execute_async({"x": x_of(2)})
        assert runner.wait(bad, timeout=30) == JobStatus.FAILED
        assert runner.wait(good1, timeout=30) == 0 and runner.wait(good2, timeout=30) == 0
        message = str(runner.get_error(bad))
        for part in ("subgraph_boom", "'boom'", "Boom", "AICPU", "NaN input"):
            assert part in message
        assert isinstance(runner.get_error(bad), KernelError)
        np.testing.assert_array_equal(runner.get_outputs(good2)[0], x_of(4))
        np.testing.assert_array_equal(runner.run({"x": x_of(3)})[0], x_of(6))
        with pytest.raises(KernelError, match="NaN input"):
            runner.run({"x": x_of(np.nan)})
        assert runner.get_stats()["jobs"] == {"OK": 3, "FAILED": 2, "CANCELLED": 0, "TIMED_OUT": 0}


@pytest.fixture
def gated(make, pass_runner):
    """A two-stage graph whose AICORE stage blocks until `gate` is set."""
    gate, started = threading.Event(), threading.Semaphore(0)

    def hook(runner, inputs):
        if runner.subgraph.get_attr("device") == "AICORE":
            started.release()
            gate.wait(WAIT)

    pass_runner.on_execute = hook
    yield chain_graph(make, ["AICORE", "CPU"]), gate, started
    gate.set()


def test_wait_timeout_raises_naming_the_job(gated):
    graph, gate, _ = gated
    with xgraph.create_graph_runner(graph) as runner:
        job = runner.execute_async({"x": x_of(1)})
        with pytest.raises(RunnerError, match=rf"job {job[0]} did not finish within 0.05 s"):
            runner.wait(job, timeout=0.05)
        gate.set()
        assert runner.wait(job, timeout=WAIT) == 0


def test_job_timeout_abandons_a_stuck_job_and_later_jobs_run(gated):
    graph, gate, started = gated
    with xgraph.create_graph_runner(graph, job_timeout=0.2) as runner:
        stuck = runner.execute_async({"x": x_of(1)})
        assert runner.wait(stuck, timeout=WAIT) == JobStatus.TIMED_OUT
        assert "exceeded job_timeout=0.2 s" in str(runner.get_error(stuck))
        gate.set()
        np.testing.assert_array_equal(runner.run({"x": x_of(5)})[0], x_of(5))


def test_max_jobs_in_flight_raises_when_not_blocking(gated):
    graph, gate, started = gated
    with xgraph.create_graph_runner(graph, max_jobs_in_flight=2, block_when_full=False) as runner:
        runner.execute_async({"x": x_of(1)})
        runner.execute_async({"x": x_of(2)})
        with pytest.raises(RunnerError, match="2 jobs are already in flight"):
            runner.execute_async({"x": x_of(3)})
        gate.set()


def test_max_jobs_in_flight_blocks_until_a_job_finishes(gated):
    graph, gate, started = gated
    with xgraph.create_graph_runner(graph, max_jobs_in_flight=1) as runner:
        first = runner.execute_async({"x": x_of(1)})
        submitted = threading.Event()
        thread = threading.Thread(target=lambda: (runner.execute_async({"x": x_of(2)}), submitted.set()), daemon=True)
        thread.start()
        assert started.acquire(timeout=WAIT)
        assert not submitted.wait(0.1)  # the second submit waits for a free slot
        gate.set()
        assert submitted.wait(WAIT) and runner.wait(first, timeout=WAIT) == 0
        thread.join(WAIT)


def test_close_cancels_jobs_in_flight_and_does_not_hang(gated):
    graph, gate, started = gated
    runner = xgraph.create_graph_runner(graph)
    jobs = [runner.execute_async({"x": x_of(v)}) for v in range(3)]
    assert started.acquire(timeout=WAIT)
    runner.close(timeout=0.2)
    assert [runner.wait(j, timeout=1) for j in jobs] == [JobStatus.CANCELLED] * 3
    assert all("cancelled" in str(runner.get_error(j)) for j in jobs)
    with pytest.raises(RunnerError, match="closed"):
        runner.execute_async({"x": x_of(1)})
    gate.set()
    for thread in runner._scheduler._threads:
        thread.join(WAIT)
        assert not thread.is_alive()


# -- copies and traces ------------------------------------------------------------------------------
def test_host_device_copies_are_performed_and_counted(make, pass_runner):
    graph = chain_graph(make, ["CPU", "AICORE", "AICPU", "CPU"])
    received = {}
    pass_runner.on_execute = lambda runner, inputs: received.setdefault(runner.subgraph.name, []).append(inputs[0])
    x = x_of(7)
    with xgraph.create_graph_runner(graph) as runner:
        for _ in range(3):
            (y,) = runner.run({"x": x})
        copies = runner.get_stats()["copies"]
    # CPU -> AICORE is a host-to-device copy and AICPU -> CPU a device-to-host one; AICORE -> AICPU shares memory
    assert copies["count"] == 2 * 3 and copies["bytes"] == 2 * 3 * x.nbytes
    cpu_out = received["subgraph_op000"][0]
    assert cpu_out is x  # host to host: no copy
    assert not np.shares_memory(received["subgraph_op001"][0], x)  # really copied to the device
    assert received["subgraph_op002"][0] is received["subgraph_op001"][0]  # device to device: shared
    np.testing.assert_array_equal(y, x)


def test_chrome_trace_has_one_track_per_device_and_copy_engine(make, tmp_path):
    graph = chain_graph(make, ["CPU", "AICORE", "AICPU", "CPU"], runner="null")
    with xgraph.create_graph_runner(graph, profile=True) as runner:
        for _ in range(2):
            runner.run({"x": x_of(1)})
        path = tmp_path / "trace.json"
        runner.export_chrome_trace(path)
        num_tasks = len(runner.plan.tasks)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    tracks = {e["args"]["name"]: e["tid"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert set(tracks) == {"CPU", "AICORE", "AICPU", "H2D", "D2H"} and len(set(tracks.values())) == 5
    spans = [e for e in events if e["ph"] == "X"]
    assert len(spans) == 2 * num_tasks
    for e in spans:
        assert {"name", "ph", "ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0 and e["ts"] >= 0
    copies = [e for e in spans if e["cat"] == "copy"]
    assert {e["tid"] for e in copies} == {tracks["H2D"], tracks["D2H"]}
    assert all(e["args"]["bytes"] == 16 for e in copies)
    assert {e["tid"] for e in spans if e["name"] == "subgraph_op001"} == {tracks["AICORE"]}


def test_trace_export_needs_profiling(make, tmp_path):
    with xgraph.create_graph_runner(chain_graph(make, ["CPU"], runner="null")) as runner:
        with pytest.raises(RunnerError, match="profile=True"):
            runner.export_chrome_trace(tmp_path / "t.json")


def test_plugin_devices_use_their_registered_memory_kind(make):
    from xgraph.devices import DeviceSpec, register_device, unregister_device
    register_device(DeviceSpec("TEST_NPU", memory="device", runner={"run": "null"}))
    try:
        with xgraph.create_graph_runner(chain_graph(make, ["CPU", "TEST_NPU", "CPU"], runner="null")) as runner:
            runner.run({"x": x_of(1)})
            assert runner.get_stats()["copies"]["count"] == 2  # host -> TEST_NPU -> host
    finally:
        unregister_device("TEST_NPU")
    with xgraph.create_graph_runner(chain_graph(make, ["CPU", "UNKNOWN_DEV", "CPU"], runner="null")) as runner:
        runner.run({"x": x_of(1)})
        assert runner.get_stats()["copies"]["count"] == 0  # a device the table does not know runs in host memory


@pytest.mark.parametrize("any_thread", [True, False])
def test_an_idle_stream_task_runs_on_the_thread_that_made_it_ready_only_if_its_runner_allows(
        make, pass_runner, any_thread):
    seen: list[tuple[str, str]] = []
    pass_runner.any_thread = any_thread
    pass_runner.on_execute = lambda runner, inputs: seen.append(
        (str(runner.subgraph.get_attr("device")), threading.current_thread().name))
    devices = ["AICORE", "AICPU"] * 3
    with xgraph.create_graph_runner(chain_graph(make, devices)) as runner:
        np.testing.assert_array_equal(runner.run({"x": x_of(3)})[0], x_of(3))
    assert [d for d, _ in seen] == devices
    threads = {d: {t for dd, t in seen if dd == d} for d in ("AICORE", "AICPU")}
    if any_thread:  # one thread ran the whole chain: no wake-up per hop
        assert len({t for _, t in seen}) == 1
    else:  # every task on its own device's stream thread
        assert all(len(names) == 1 and d in next(iter(names)) for d, names in threads.items())


def test_jobs_in_flight_through_any_thread_runners_keep_their_results_and_use_the_device_streams(make, pass_runner):
    """With other jobs queued, a stream's tasks are not taken over: some AICPU task runs on its own stream."""
    seen: list[tuple[str, str]] = []
    pass_runner.any_thread = True
    gate = threading.Event()

    def hook(runner, inputs):
        seen.append((str(runner.subgraph.get_attr("device")), threading.current_thread().name))
        gate.wait(5)
    pass_runner.on_execute = hook
    with xgraph.create_graph_runner(chain_graph(make, ["AICORE", "AICPU"] * 2), max_jobs_in_flight=4) as runner:
        jobs = [runner.execute_async({"x": x_of(i)}) for i in range(3)]
        time.sleep(0.05)
        gate.set()
        for i, job in enumerate(jobs):
            assert runner.wait(job, timeout=10) == 0
            np.testing.assert_array_equal(runner.get_outputs(job)[0], x_of(i))
    assert any("AICPU" in t for d, t in seen if d == "AICPU")
