"""A synchronous `GraphRunner.run` with nothing else in flight runs the tasks on the caller's thread
(`ThreadScheduler.claim_inline`, `xgraph.runners.inline`): same results, copies, stats and errors as the
streams give, the streams still used when other jobs are in flight or a runner is bound to its thread."""
from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

import xgraph
from xgraph import Graph, Runner
from xgraph.errors import RunnerError
from xgraph.runners.inline import InlineSchedule, dependency_order
from xgraph.runners.scheduler import Task, TaskPlan


class ScaleRunner(Runner):
    """Multiplies its one input by 2 (an independent oracle: a chain of k gives x * 2**k)."""

    any_thread = True
    on_execute = None  # callable(runner) set by a test

    def __init__(self, subgraph, mode="run"):
        super().__init__(subgraph, mode)

    def execute(self, inputs):
        hook = type(self).on_execute
        if hook is not None:
            hook(self)
        return [inputs[0] * 2 for _ in self.get_output_tensors()]


@pytest.fixture
def scale_runner():
    cls = type("TestScale", (ScaleRunner,), {"on_execute": None, "any_thread": True})
    xgraph.register_runner("test_scale", cls)
    return cls


def _chain(make, devices) -> Graph:
    graph = Graph.from_onnx(make.chain_model(len(devices)))
    return make.place(graph, {f"op{i:03d}": d for i, d in enumerate(devices)}, runner="test_scale", merge=False)


DEVICES = ["AICORE", "AICPU", "CPU", "AICORE"]  # host memory in the middle: H2D and D2H copies


def _x(value: float) -> np.ndarray:
    return np.full((1, 4), value, np.float32)


def _fail_second_subgraph(cls) -> list[str]:
    """Make the second subgraph run raise ValueError("broken device"); returns the subgraphs run."""
    calls: list[str] = []

    def hook(runner):
        calls.append(runner.subgraph.name)
        if len(calls) == 2:
            raise ValueError("broken device")
    cls.on_execute = hook
    return calls


def _threads_seen(cls) -> list[str]:
    seen: list[str] = []
    cls.on_execute = lambda runner: seen.append(threading.current_thread().name)
    return seen


def test_run_executes_every_subgraph_on_the_callers_thread_with_the_streams_results_and_copies(make, scale_runner):
    seen = _threads_seen(scale_runner)
    graph = _chain(make, DEVICES)
    with xgraph.create_graph_runner(graph) as runner:
        here = runner.run({"x": _x(1.5)})
        here_stats = runner.get_stats()
        job = runner.execute_async({"x": _x(1.5)})  # the same job through the stream threads
        assert runner.wait(job, timeout=10) == 0
        streamed = runner.get_outputs(job)
        stats = runner.get_stats()
    assert seen[:4] == [threading.current_thread().name] * 4
    assert all(name != threading.current_thread().name for name in seen[4:])
    np.testing.assert_array_equal(here[0], _x(1.5 * 2 ** 4))
    np.testing.assert_array_equal(streamed[0], here[0])
    # x H2D, AICPU -> CPU D2H, CPU -> AICORE H2D, y D2H: four copies each way of running
    assert here_stats["copies"]["count"] == 4 and stats["copies"]["count"] == 8
    assert stats["copies"]["bytes"] == 2 * here_stats["copies"]["bytes"] == 8 * _x(0).nbytes
    assert here_stats["jobs"]["OK"] == 1 and stats["jobs"]["OK"] == 2
    assert all(s["runs"] == 2 for s in stats["subgraphs"].values())


def test_runners_bound_to_their_thread_keep_the_streams(make, scale_runner):
    scale_runner.any_thread = False
    seen = _threads_seen(scale_runner)
    with xgraph.create_graph_runner(_chain(make, ["AICORE", "AICPU"])) as runner:
        np.testing.assert_array_equal(runner.run({"x": _x(1)})[0], _x(4))
    assert seen == ["xgraph-chain-stream-AICORE", "xgraph-chain-stream-AICPU"]


def test_with_a_job_in_flight_run_goes_through_the_streams_and_both_results_are_right(make, scale_runner):
    gate = threading.Event()
    seen: list[str] = []

    def hook(runner):
        seen.append(threading.current_thread().name)
        if not gate.is_set() and len(seen) == 1:
            gate.wait(5)  # hold the first job on its first subgraph
    scale_runner.on_execute = hook
    with xgraph.create_graph_runner(_chain(make, ["AICORE", "AICPU"])) as runner:
        first = runner.execute_async({"x": _x(1)})
        time.sleep(0.05)
        threading.Timer(0.1, gate.set).start()
        np.testing.assert_array_equal(runner.run({"x": _x(3)})[0], _x(12))
        assert runner.wait(first, timeout=10) == 0
        np.testing.assert_array_equal(runner.get_outputs(first)[0], _x(4))
    assert threading.current_thread().name not in seen


def test_a_failure_on_the_callers_thread_fails_the_job_with_the_runner_named_and_the_runner_keeps_working(
        make, scale_runner):
    calls = _fail_second_subgraph(scale_runner)
    with xgraph.create_graph_runner(_chain(make, ["AICORE", "AICPU", "AICORE"])) as runner:
        with pytest.raises(RunnerError, match=r"AICPU.*ValueError: broken device"):
            runner.run({"x": _x(1)})
        np.testing.assert_array_equal(runner.run({"x": _x(1)})[0], _x(8))
        assert runner.get_stats()["jobs"]["FAILED"] == 1 and runner.get_stats()["jobs"]["OK"] == 1
    assert len(calls) == 5  # the failed job stopped at its second subgraph


def test_ctrl_c_on_the_callers_thread_reaches_the_caller_and_frees_the_jobs_slot(make, scale_runner):
    calls = []

    def hook(runner):
        calls.append(runner.subgraph.name)
        if len(calls) == 1:
            raise KeyboardInterrupt
    scale_runner.on_execute = hook
    with xgraph.create_graph_runner(_chain(make, ["AICORE", "AICPU"]), max_jobs_in_flight=1) as runner:
        with pytest.raises(KeyboardInterrupt):
            runner.run({"x": _x(1)})
        np.testing.assert_array_equal(runner.run({"x": _x(1)})[0], _x(4))  # the one slot is free again
        assert runner.get_stats()["jobs"]["FAILED"] == 1


def test_a_job_timeout_keeps_runs_on_the_streams(make, scale_runner):
    seen = _threads_seen(scale_runner)
    with xgraph.create_graph_runner(_chain(make, ["AICORE"]), job_timeout=10.0) as runner:
        runner.run({"x": _x(1)})
    assert len(seen) == 1 and seen[0] != threading.current_thread().name  # a stuck kernel must not hold the caller


def test_profiled_runs_on_the_callers_thread_record_every_task(make, scale_runner, tmp_path):
    with xgraph.create_graph_runner(_chain(make, DEVICES), profile=True) as runner:
        runner.run({"x": _x(1)})
        runner.export_chrome_trace(tmp_path / "trace.json")
    events = [e for e in json.loads((tmp_path / "trace.json").read_text())["traceEvents"] if e["ph"] == "X"]
    assert sorted(e["cat"] for e in events) == ["copy"] * 4 + ["subgraph"] * 4


def _task(index, inputs, outputs, fn):
    return Task(index, f"t{index}", "S", "subgraph", fn, tuple(inputs), tuple(outputs), any_thread=True)


def test_inline_schedule_orders_by_dependencies_and_frees_each_value_after_its_last_reader():
    # listed out of order: t0 reads what t2 makes; t1 is the first to run
    plus = lambda args: [args[0] + args[1]]  # noqa: E731
    tasks = [_task(0, ["b", "a"], ["c"], plus), _task(1, ["x", "w"], ["a"], plus), _task(2, ["a", "x"], ["b"], plus)]
    plan = TaskPlan(tasks, ["x"], ["c"], {"w": np.float32(10)})
    plan.link()
    assert [t.name for t in dependency_order(plan)] == ["t1", "t2", "t0"]
    schedule = InlineSchedule(plan, {"S": threading.Lock()})
    frees = {task.name: len(freed) for task, _, _, _, freed in schedule.steps}
    assert frees == {"t1": 1, "t2": 1, "t0": 2}  # w after t1; x after t2; a and b after t0
    x = np.float32(1)
    ends: list = []
    assert schedule.run([x], lambda: False, lambda *end: ends.append(end)) == ([(x + 10 + x) + (x + 10)], [], 0.0)
    assert schedule.run([x], lambda: True, lambda *end: ends.append(end)) is None  # a run ended meanwhile runs nothing
    assert ends == [([], 0.0, "CANCELLED")]  # no copy tasks; a finished run returns what it copied


def test_synchronous_runs_leave_no_job_records_and_count_their_jobs(make, scale_runner):
    with xgraph.create_graph_runner(_chain(make, DEVICES)) as runner:
        for i in range(50):
            np.testing.assert_array_equal(runner.run({"x": _x(i)})[0], _x(i * 2 ** 4))
        kept = dict(runner._jobs._finished), dict(runner._jobs._pending), runner._jobs._result_bytes
        stats = runner.get_stats()
    assert kept == ({}, {}, 0)  # run() hands the results over itself; nothing waits in the table
    assert stats["jobs"]["OK"] == 50 and stats["copies"]["count"] == 4 * 50


def test_the_copies_a_failed_run_made_are_counted(make, scale_runner):
    _fail_second_subgraph(scale_runner)
    with xgraph.create_graph_runner(_chain(make, DEVICES)) as runner:
        with pytest.raises(RunnerError, match="broken device"):
            runner.run({"x": _x(1)})
        copies = runner.get_stats()["copies"]
    # x H2D before AICORE, nothing between AICORE and AICPU (both device memory): one copy, then the failure
    assert copies["count"] == 1 and copies["bytes"] == _x(0).nbytes


def _streams(graph_name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"xgraph-{graph_name}-stream-")]


def test_stream_threads_start_with_the_first_asynchronous_job_only_once_and_stop_on_close(make, scale_runner):
    graph = _chain(make, ["AICORE", "AICPU"])
    graph.name = "lazy_streams"
    runner = xgraph.create_graph_runner(graph)
    for i in range(5):  # synchronous runs on the caller's thread need no stream
        np.testing.assert_array_equal(runner.run({"x": _x(i)})[0], _x(4 * i))
    assert _streams("lazy_streams") == []
    jobs: list = []
    start = threading.Barrier(4)

    def submit(i: int) -> None:  # four threads race to start the streams with their first jobs
        start.wait(5)
        jobs.append((i, runner.execute_async({"x": _x(i)})))
    threads = [threading.Thread(target=submit, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    for i, job in jobs:
        assert runner.wait(job, timeout=10) == 0
        np.testing.assert_array_equal(runner.get_outputs(job)[0], _x(4 * i))
    streams = _streams("lazy_streams")
    assert len(jobs) == 4  # one thread per device and copy engine, started once
    assert sorted(t.name.rsplit("-", 1)[1] for t in streams) == ["AICORE", "AICPU", "D2H", "H2D"]
    runner.close()
    assert not any(t.is_alive() for t in streams)


def test_a_runner_closed_before_any_asynchronous_job_closes_cleanly(make, scale_runner):
    runner = xgraph.create_graph_runner(_chain(make, ["AICORE", "AICPU"]))
    runner.run({"x": _x(1)})
    runner.close()
    with pytest.raises(RunnerError, match="closed"):
        runner.execute_async({"x": _x(1)})
