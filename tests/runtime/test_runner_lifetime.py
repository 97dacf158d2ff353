"""A runner's threads live no longer than the runner, and a thread that cannot start fails only its job.

Runners dropped without close() are collected and their worker threads end; a failure to start
a thread (the process's thread or memory limit) is an XGraphError and gives the job's slot back.
Every wait is bounded; nothing is timed.
"""
from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import xgraph
from xgraph.errors import RunnerError, XGraphError
from xgraph.runners.jobs import JobStatus

from tests.security.test_limits import BOUND, chain, x_of

DROPPED = 60


def _cpu(graph):
    return next(c for c in graph.get_root_subgraph().get_children() if c.get_attr("device") == "CPU")


def _threads_settle_at(most: int) -> int:
    """The thread count once it is at most `most` (or after BOUND seconds): threads end asynchronously."""
    deadline = time.monotonic() + BOUND
    while threading.active_count() > most and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.02)
    return threading.active_count()


def _use_graph_runner(**options):
    runner = xgraph.create_graph_runner(chain(), **options)
    assert runner.wait(runner.execute_async({"x": x_of(1.0)}), timeout=BOUND) == JobStatus.OK  # streams started
    runner.run({"x": x_of(2.0)})


def _use_runner():
    runner = xgraph.Runner.create_runner(_cpu(chain()))
    out = np.empty((1, 4), np.float32)
    assert runner.wait(runner.execute_async([x_of(1.0)], [out]), timeout=BOUND) == JobStatus.OK  # worker started


@pytest.mark.parametrize("use", [_use_graph_runner, lambda: _use_graph_runner(job_timeout=BOUND), _use_runner],
                         ids=["graph", "graph-with-watchdog", "single"])
def test_dropped_runners_end_their_threads(use):
    gc.collect()
    baseline = threading.active_count()
    for _ in range(DROPPED):
        use()
    assert _threads_settle_at(baseline + 3) <= baseline + 3


@pytest.fixture
def no_new_threads(monkeypatch):
    """Thread.start raises as it does when the process can start no more threads."""
    def refuse(thread):
        raise RuntimeError("can't start new thread")
    monkeypatch.setattr(threading.Thread, "start", refuse)
    return monkeypatch


def test_a_thread_that_cannot_start_fails_the_job_and_gives_its_slot_back(no_new_threads):
    runner = xgraph.create_graph_runner(chain(), max_jobs_in_flight=1, block_when_full=False)
    with pytest.raises(RunnerError, match=r"graph runner for 'limits'.*cannot start thread .*can't start new thread"):
        runner.execute_async({"x": x_of(1.0)})
    no_new_threads.undo()
    job = runner.execute_async({"x": x_of(3.0)})  # the only slot was given back
    assert runner.wait(job, timeout=BOUND) == JobStatus.OK
    np.testing.assert_array_equal(runner.get_outputs(job)[0], -x_of(3.0))
    assert runner.get_stats()["jobs"]["CANCELLED"] == 1
    runner.close()


def test_a_worker_that_cannot_start_fails_the_job_and_gives_its_slot_back(no_new_threads):
    runner = xgraph.Runner.create_runner(_cpu(chain()))
    runner.max_jobs_in_flight, runner.block_when_full = 1, False
    out = np.empty((1, 4), np.float32)
    with pytest.raises(XGraphError, match=r"CPURunner for subgraph .*cannot start thread"):
        runner.execute_async([x_of(1.0)], [out])
    no_new_threads.undo()
    assert runner.wait(runner.execute_async([x_of(3.0)], [out]), timeout=BOUND) == JobStatus.OK
    np.testing.assert_array_equal(out, -x_of(3.0))
    runner.close()


def test_a_watchdog_that_cannot_start_fails_creation_with_an_xgraph_error(no_new_threads):
    with pytest.raises(RunnerError, match=r"cannot start thread 'xgraph-limits-timeouts'"):
        xgraph.create_graph_runner(chain(), job_timeout=5.0)
