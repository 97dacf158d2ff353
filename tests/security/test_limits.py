"""Resource limits of the runtime: max_jobs_in_flight and the per-job timeout hold under concurrency.

Runners are gated by events (a job blocks until the test lets it go), so every check is about
what happened, never about how long it took; every wait is bounded.
"""
from __future__ import annotations

import threading
import time
import tracemalloc

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph import Graph
from xgraph.errors import RunnerError
from xgraph.runners.device_runners import CPURunner
from xgraph.runners.jobs import JobStatus
from testing.runtime import place

BOUND = 30.0


def chain(shape=(1, 4)) -> Graph:
    """x -> Relu (AICORE) -> Neg (CPU, gated) -> y."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")]
    model = helper.make_model(helper.make_graph(
        nodes, "limits", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]), opset_imports=[helper.make_opsetid("", 17)])
    return place(Graph.from_onnx(model), {"relu": "AICORE", "neg": "CPU"})


@pytest.fixture
def gated():
    """(graph whose CPU subgraph blocks until `gate` is set, gate, semaphore released as each job starts there)."""
    gate, started = threading.Event(), threading.Semaphore(0)

    class Gated(CPURunner):
        def execute(self, inputs):
            started.release()
            gate.wait(BOUND)
            return super().execute(inputs)

    name = f"test_security_gated_{id(Gated)}"
    xgraph.register_runner(name, Gated)

    def build(shape=(1, 4)) -> Graph:
        graph = chain(shape)
        for child in graph.get_root_subgraph().get_children():
            if child.get_attr("device") == "CPU":
                child.set_attr("runner", {"run": name})
        return graph

    yield build, gate, started
    gate.set()


def x_of(v: float, shape=(1, 4)) -> np.ndarray:
    return np.full(shape, v, np.float32)


def submit_together(n: int, submit) -> list:
    """n threads call submit(k) at the same moment; returns each result or the exception it raised."""
    barrier = threading.Barrier(n, timeout=BOUND)
    out: list = [None] * n

    def body(k):
        barrier.wait()
        try:
            out[k] = submit(k)
        except RunnerError as e:
            out[k] = e

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    assert not any(t.is_alive() for t in threads)
    return out


def test_max_jobs_in_flight_is_a_hard_limit_for_concurrent_submitters(gated):
    build, gate, started = gated
    with xgraph.create_graph_runner(build(), max_jobs_in_flight=3, block_when_full=False) as runner:
        out = submit_together(12, lambda k: runner.execute_async({"x": x_of(k)}))
        accepted = [(k, job) for k, job in enumerate(out) if not isinstance(job, RunnerError)]
        refused = [e for e in out if isinstance(e, RunnerError)]
        assert len(accepted) == 3 and len(refused) == 9
        assert all("3 jobs are already in flight" in str(e) and "max_jobs_in_flight" in str(e) for e in refused)
        gate.set()
        for k, job in accepted:
            assert runner.wait(job, timeout=BOUND) == 0
            np.testing.assert_array_equal(runner.get_outputs(job)[0], -x_of(k))
        assert runner.wait(runner.execute_async({"x": x_of(7)}), timeout=BOUND) == 0  # the slots came back


def test_blocking_submitters_wait_for_a_slot_and_never_exceed_the_limit(gated):
    build, gate, started = gated
    with xgraph.create_graph_runner(build(), max_jobs_in_flight=3) as runner:
        accepted: list = []
        lock = threading.Lock()

        def submit(k):
            job = runner.execute_async({"x": x_of(k)})
            with lock:
                accepted.append((k, job))
            return job

        threads = [threading.Thread(target=submit, args=(k,), daemon=True) for k in range(10)]
        for t in threads:
            t.start()
        assert started.acquire(timeout=BOUND)  # the first job reached the gated stage
        deadline = time.perf_counter() + BOUND
        while len(accepted) < 3 and time.perf_counter() < deadline:
            time.sleep(0.005)
        time.sleep(0.1)  # would a fourth submitter get in? (it must not)
        assert len(accepted) == 3
        assert sum(t.is_alive() for t in threads) >= 7  # the others wait for a slot, they are not queued
        gate.set()
        for t in threads:
            t.join(BOUND)
        assert len(accepted) == 10
        for k, job in accepted:
            assert runner.wait(job, timeout=BOUND) == 0
            np.testing.assert_array_equal(runner.get_outputs(job)[0], -x_of(k))


def test_job_timeout_fails_stuck_jobs_clearly_and_frees_their_slots(gated):
    build, gate, started = gated
    with xgraph.create_graph_runner(build(), max_jobs_in_flight=2, job_timeout=0.2) as runner:
        stuck = submit_together(4, lambda k: runner.execute_async({"x": x_of(k)}))  # 2 admitted, 2 wait for slots
        for job in stuck:
            assert runner.wait(job, timeout=BOUND) == JobStatus.TIMED_OUT
            assert f"job {job[0]} exceeded job_timeout=0.2 s" in str(runner.get_error(job))
        gate.set()
        job = runner.execute_async({"x": x_of(5)})
        assert runner.wait(job, timeout=BOUND) == 0
        np.testing.assert_array_equal(runner.get_outputs(job)[0], -x_of(5))
        assert runner.get_stats()["jobs"]["TIMED_OUT"] == 4


def test_wait_timeout_and_bad_limits_are_clear_errors(gated):
    build, gate, started = gated
    graph = build()
    for bad in (0, -1, 2.5, None):
        with pytest.raises(RunnerError, match="max_jobs_in_flight must be an int >= 1"):
            xgraph.create_graph_runner(graph, max_jobs_in_flight=bad)
    with pytest.raises(RunnerError, match="job_timeout must be > 0"):
        xgraph.create_graph_runner(graph, job_timeout=0)
    with xgraph.create_graph_runner(graph) as runner:
        job = runner.execute_async({"x": x_of(1)})
        with pytest.raises(RunnerError, match=rf"job {job[0]} did not finish within 0.05 s"):
            runner.wait(job, timeout=0.05)
        with pytest.raises(RunnerError, match="timeout must be >= 0"):
            runner.wait(job, timeout=-1)
        gate.set()
        assert runner.wait(job, timeout=BOUND) == 0


def test_single_subgraph_runner_limits_concurrent_submitters(gated):
    """Runner.execute_async (one device subgraph) has the same bound as the graph runner."""
    build, gate, started = gated
    graph = build()
    sg = next(c for c in graph.get_root_subgraph().get_children() if c.get_attr("device") == "CPU")
    runner = xgraph.Runner.create_runner(sg)
    runner.max_jobs_in_flight, runner.block_when_full = 2, False
    try:
        out = submit_together(6, lambda k: runner.execute_async([x_of(k)], [np.empty((1, 4), np.float32)]))
        accepted = [job for job in out if not isinstance(job, RunnerError)]
        assert len(accepted) == 2
        assert all("2 jobs are already in flight" in str(e) for e in out if isinstance(e, RunnerError))
        gate.set()
        assert [runner.wait(job, timeout=BOUND) for job in accepted] == [0, 0]
    finally:
        runner.close()


def test_jobs_abandoned_behind_a_stuck_kernel_do_not_pile_up(gated):
    build, gate, started = gated
    shape = (1, 256, 1024)  # 1 MiB per input
    with xgraph.create_graph_runner(build(shape), max_jobs_in_flight=2, job_timeout=0.05) as runner:
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            for k in range(24):
                job = runner.execute_async({"x": x_of(k, shape)})
                assert runner.wait(job, timeout=BOUND) == JobStatus.TIMED_OUT
            held = tracemalloc.get_traced_memory()[0] - base
        finally:
            tracemalloc.stop()
            gate.set()
        assert held < 8 * (1 << 20), f"{held / (1 << 20):.0f} MiB held by {24} abandoned jobs"
