"""Ctrl-C while jobs are submitted never leaves a runner hung.

A child process sends itself real SIGINTs (from a timer thread) while its main thread submits
the first jobs of a fresh runner, the moment its worker threads start. After each storm, every
job it was given an id for must finish, and `run` and a new job must answer. Every wait is
bounded; nothing is timed.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STORMS = 8

CHILD = textwrap.dedent("""
    import os, signal, sys, threading, time
    import numpy as np
    import xgraph
    from tests.security.test_limits import chain, x_of

    kind, storms = sys.argv[1], int(sys.argv[2])
    x = x_of(1.0)

    def fresh():
        graph = chain()
        if kind == "graph":
            runner = xgraph.create_graph_runner(graph)
            return runner, lambda: runner.execute_async({"x": x}), lambda: runner.run({"x": x})
        cpu = next(c for c in graph.get_root_subgraph().get_children() if c.get_attr("device") == "CPU")
        runner = xgraph.Runner.create_runner(cpu)
        out = np.empty((1, 4), np.float32)
        return runner, lambda: runner.execute_async([x], [out]), lambda: runner.run([x])

    hangs = interrupts = 0
    for _ in range(storms):
        runner, submit, run = fresh()
        go = threading.Event()

        def storm():
            go.wait()
            end = time.monotonic() + 0.3
            while time.monotonic() < end:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.0002)

        jobs = []
        storming = threading.Thread(target=storm, daemon=True)
        storming.start()
        while True:
            try:
                go.set()
                if not storming.is_alive():
                    time.sleep(0.05)  # the storm's last signal arrives meanwhile
                    break
                jobs.append(submit())
            except KeyboardInterrupt:
                interrupts += 1
        answered = threading.Event()

        def check():
            for job in jobs[-200:]:
                runner.wait(job)  # every job given an id ends (ok, or cancelled by the interrupt)
            run()
            runner.wait(submit())
            answered.set()

        threading.Thread(target=check, daemon=True).start()
        if not answered.wait(20):
            hangs += 1
    print("HANGS", hangs, "INTERRUPTS", interrupts)
""")


@pytest.mark.parametrize("kind", ["graph", "single"])
def test_a_ctrl_c_storm_while_the_first_jobs_start_leaves_the_runner_answering(kind):
    r = subprocess.run([sys.executable, "-c", CHILD, kind, str(STORMS)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    words = r.stdout.split()
    assert words[:2] == ["HANGS", "0"] and int(words[3]) > STORMS, r.stdout  # interrupted often, never hung


def test_a_job_whose_submission_ctrl_c_cut_short_is_cancelled_and_its_slot_given_back(monkeypatch):
    """The same, deterministic: Ctrl-C while the second stream thread starts."""
    import threading

    import numpy as np

    import xgraph
    from xgraph.runners.jobs import JobStatus
    from tests.security.test_limits import BOUND, chain, x_of

    start, calls = threading.Thread.start, []

    def interrupted_second_start(thread):
        calls.append(thread.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        start(thread)
    runner = xgraph.create_graph_runner(chain(), max_jobs_in_flight=1, block_when_full=False)
    monkeypatch.setattr(threading.Thread, "start", interrupted_second_start)
    with pytest.raises(KeyboardInterrupt):
        runner.execute_async({"x": x_of(1.0)})
    monkeypatch.undo()
    assert runner.get_stats()["jobs"]["CANCELLED"] == 1
    job = runner.execute_async({"x": x_of(2.0)})  # the one slot is free again, every stream thread runs
    assert runner.wait(job, timeout=BOUND) == JobStatus.OK
    np.testing.assert_array_equal(runner.get_outputs(job)[0], -x_of(2.0))
    runner.close()
