"""Concurrency soak (short): one graph runner, many threads submitting at once.

Every result must equal a single-threaded run of the same input (inputs differ per job, so a
lost or swapped result shows), every wait is bounded (a deadlock fails the test instead of
hanging it), a failing kernel fails only its own job, and closing the runner with jobs in
flight cancels them with an error. fuzz/soak.py runs the same checks for 1,000+ jobs and
watches memory.
"""
from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

import xgraph
from xgraph.errors import KernelError, RunnerError
from xgraph.runners.device_runners import CPURunner
from xgraph.runners.jobs import JobStatus

from fuzz.models import squeezenet_graph, squeezenet_input, transformer_graph, transformer_input

BOUND = 60.0  # seconds any single wait or join may take before the test calls it a deadlock


def squeezenet_feeds(job: int) -> dict[str, np.ndarray]:
    return {"data_0": squeezenet_input(job)}


MODELS = {"transformer": (transformer_graph, transformer_input, 200),
          "squeezenet": (squeezenet_graph, squeezenet_feeds, 40)}


def run_threads(target, n: int) -> None:
    """Start n threads on target(k) together; fail (not hang) if one is still running after BOUND."""
    barrier = threading.Barrier(n, timeout=BOUND)
    errors: list[BaseException] = []

    def body(k: int) -> None:
        try:
            barrier.wait()
            target(k)
        except BaseException as e:  # reported in the main thread
            errors.append(e)

    threads = [threading.Thread(target=body, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND)
    assert not any(t.is_alive() for t in threads), "a submitting thread is stuck: deadlock?"
    if errors:
        raise errors[0]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_concurrent_jobs_equal_single_threaded_runs(model):
    build, feeds_of, jobs = MODELS[model]
    graph = build()
    threads = 8
    with xgraph.create_graph_runner(graph, kernels="auto", max_jobs_in_flight=8) as runner:
        reference = [runner.run(feeds_of(j)) for j in range(jobs)]
        out_shapes = [(r.shape, r.dtype) for r in reference[0]]
        results: dict[int, list[np.ndarray]] = {}
        ids: list[int] = []
        lock = threading.Lock()

        def submit(j: int, preallocate: bool):
            if preallocate:
                buffers = [np.full(shape, np.nan, dtype) for shape, dtype in out_shapes]
                return runner.execute_async(feeds_of(j), buffers), buffers
            return runner.execute_async(feeds_of(j)), None

        def collect(j: int, job, buffers) -> None:
            assert runner.wait(job, timeout=BOUND) == 0, runner.get_error(job)
            with lock:
                results[j] = buffers if buffers is not None else runner.get_outputs(job)
                ids.append(job[0])

        def worker(k: int) -> None:
            mine = list(range(k, jobs, threads))
            pattern = k % 3
            if pattern == 0:  # one at a time
                for j in mine:
                    collect(j, *submit(j, preallocate=False))
            elif pattern == 1:  # a burst, then wait in reverse order
                pending = [(j, *submit(j, preallocate=True)) for j in mine]
                for j, job, buffers in reversed(pending):
                    collect(j, job, buffers)
            else:  # a window of three, polling with short timeouts in between
                window: list = []
                for j in mine:
                    window.append((j, *submit(j, preallocate=j % 2 == 0)))
                    if len(window) == 3:
                        j0, job, buffers = window.pop(0)
                        try:
                            runner.wait(job, timeout=0.001)
                        except RunnerError as e:
                            assert "did not finish within 0.001 s" in str(e)
                        collect(j0, job, buffers)
                for item in window:
                    collect(*item)

        run_threads(worker, threads)
        assert sorted(results) == list(range(jobs)), "a job result is missing"
        assert len(set(ids)) == jobs, "two submissions got the same job id"
        for j in range(jobs):
            for got, want in zip(results[j], reference[j]):
                np.testing.assert_array_equal(got, want, err_msg=f"job {j}: result differs from the single-threaded run")
        assert runner.get_stats()["jobs"]["OK"] == 2 * jobs


class FlakyRunner(CPURunner):
    """The host runner, failing on purpose for jobs whose first input starts with 0 (a poisoned job)."""

    def execute(self, inputs):
        if inputs[0].flat[0] == 0:
            raise KernelError(f"injected failure in {self.subgraph.name!r}")
        return super().execute(inputs)


def _flaky_transformer():
    """The transformer with its attention-mask subgraph on a test device served by FlakyRunner."""
    xgraph.register_runner("test_security_flaky", FlakyRunner)
    graph = transformer_graph()
    mask = next(c for c in graph.get_root_subgraph().get_children() if any(op.name == "mask_inv" for op in c.get_ops()))
    mask.set_attr("device", "FLAKY")
    mask.set_attr("runner", {"run": "test_security_flaky"})
    return graph, mask


def test_a_failing_kernel_fails_only_its_own_jobs():
    graph, flaky = _flaky_transformer()
    jobs, threads = 120, 8

    def feeds_of(j):
        feeds = transformer_input(j)
        if j % 5 == 3:
            feeds["attention_mask"][0, 0] = 0  # poisoned: FlakyRunner raises
        return feeds

    with xgraph.create_graph_runner(graph, kernels="auto", max_jobs_in_flight=6) as runner:
        reference = {j: runner.run(feeds_of(j)) for j in range(jobs) if j % 5 != 3}
        status: dict[int, tuple] = {}

        def worker(k):
            for j in range(k, jobs, threads):
                job = runner.execute_async(feeds_of(j))
                code = runner.wait(job, timeout=BOUND)
                status[j] = (code, runner.get_error(job), runner.get_outputs(job))

        run_threads(worker, threads)
        for j in range(jobs):
            code, error, outputs = status[j]
            if j % 5 == 3:
                assert code == JobStatus.FAILED and isinstance(error, KernelError)
                assert "injected failure" in str(error) and flaky.name in str(error)
            else:
                assert code == 0, error
                np.testing.assert_array_equal(outputs[0], reference[j][0])
        later = [runner.execute_async(transformer_input(1000 + j)) for j in range(6)]
        assert [runner.wait(job, timeout=BOUND) for job in later] == [0] * 6
        assert runner.get_stats()["jobs"]["FAILED"] == jobs // 5


class SlowRunner(CPURunner):
    """The host runner, slowed down so that jobs pile up in flight."""

    def execute(self, inputs):
        time.sleep(0.002)
        return super().execute(inputs)


def test_close_with_jobs_in_flight_cancels_them_and_never_hangs():
    xgraph.register_runner("test_security_slow", SlowRunner)
    graph = transformer_graph()
    for child in graph.get_root_subgraph().get_children():
        if child.get_attr("device") == "CPU":
            child.set_attr("runner", {"run": "test_security_slow"})
    runner = xgraph.create_graph_runner(graph, kernels="auto", max_jobs_in_flight=4)
    submitted: list[tuple[int, tuple]] = []
    refusals: Counter = Counter()
    started = threading.Event()
    counter = iter(range(10 ** 6))
    lock = threading.Lock()

    def worker(k):
        while True:
            with lock:
                j = next(counter)
            try:
                job = runner.execute_async(transformer_input(j))
            except RunnerError as e:
                assert "closed" in str(e), e
                refusals["closed while waiting" if "waiting" in str(e) else "closed"] += 1
                return
            submitted.append((j, job))
            if len(submitted) >= 20:
                started.set()

    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(8)]
    for t in threads:
        t.start()
    assert started.wait(BOUND)
    t0 = time.perf_counter()
    runner.close(timeout=5)
    for t in threads:
        t.join(BOUND)
    assert not any(t.is_alive() for t in threads), "a submitting thread hangs after close()"
    assert time.perf_counter() - t0 < 10
    statuses = Counter()
    with xgraph.create_graph_runner(transformer_graph(), kernels="auto") as fresh:
        for j, job in submitted:
            code = runner.wait(job, timeout=BOUND)  # never a timeout: every job is final
            statuses[JobStatus(code).name] += 1
            if code == JobStatus.CANCELLED:
                assert "cancelled: the runner was closed" in str(runner.get_error(job))
            else:
                assert code == 0
                np.testing.assert_array_equal(runner.get_outputs(job)[0], fresh.run(transformer_input(j))[0])
    assert statuses["CANCELLED"] >= 1 and set(statuses) <= {"OK", "CANCELLED"}, statuses
    assert sum(refusals.values()) == 8  # every thread learnt about the close from an error
    with pytest.raises(RunnerError, match="closed"):
        runner.execute_async(transformer_input(0))
    streams = [t for t in threading.enumerate() if t.name.startswith(f"xgraph-{graph.name}-stream")]
    deadline = time.perf_counter() + BOUND
    while any(t.is_alive() for t in streams) and time.perf_counter() < deadline:
        time.sleep(0.01)
    assert not any(t.is_alive() for t in streams), "stream threads still run after close()"
