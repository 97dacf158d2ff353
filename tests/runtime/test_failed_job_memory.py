"""A failed job's stored error keeps its text, type and cause chain, never the job's arrays.

The error of a job run through `execute_async` is kept for `get_error`; its traceback's frames
held the job's inputs and intermediates, so 1,000 failed jobs of 4 MiB kept gigabytes. RSS is
measured in a child process; the child stops as soon as the growth passes the margin, so a
regression fails quickly instead of filling the machine.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: RSS growth allowed between the 50th and the 1,000th failed job (one job's input is 4 MiB)
MARGIN_MB = 100

CHILD = textwrap.dedent("""
    import gc, sys, traceback
    import numpy as np
    import xgraph
    from xgraph.runners.device_runners import CPURunner
    from xgraph.runners.jobs import JobStatus
    from tests.security.test_limits import chain

    def rss_mb():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096 / 2**20

    class Raising(CPURunner):
        def execute(self, inputs):
            doubled = inputs[0] * 2  # an intermediate a kept frame would hold
            raise ValueError(f"refused {doubled.shape}")

    xgraph.register_runner("test_raising", Raising)
    graph = chain((1, 1 << 20))  # 4 MiB float32 input
    cpu = next(c for c in graph.get_root_subgraph().get_children() if c.get_attr("device") == "CPU")
    cpu.set_attr("runner", {"run": "test_raising"})
    kind = sys.argv[1]
    if kind == "graph":
        runner = xgraph.create_graph_runner(graph)
        submit = lambda x: runner.execute_async({"x": x})
    else:
        runner = xgraph.Runner.create_runner(cpu)
        out = np.empty((1, 1 << 20), np.float32)
        submit = lambda x: runner.execute_async([x], [out])
    base = None
    for i in range(1, 1001):
        job = submit(np.full((1, 1 << 20), i, np.float32))
        assert runner.wait(job, timeout=60) == JobStatus.FAILED
        if i == 50:
            gc.collect()
            base = rss_mb()
        elif base is not None and i % 50 == 0:
            grown = rss_mb() - base
            if grown > MARGIN:
                print(f"GREW {grown:.0f} MB after {i} failed jobs")
                sys.exit(1)
    error = runner.get_error(job)
    chain_text = "".join(traceback.format_exception(error))
    print("TYPE", type(error).__name__, type(error.__cause__).__name__)
    print("TEXT", str(error))
    print("TRACE", "ValueError: refused (1, 1048576)" in chain_text and "direct cause" in chain_text)
    print("GREW", round(rss_mb() - base))
""").replace("MARGIN", str(MARGIN_MB))


@pytest.mark.parametrize("kind", ["graph", "single"])
def test_failed_jobs_keep_no_arrays(kind):
    r = subprocess.run([sys.executable, "-c", CHILD, kind], cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    lines = dict(line.split(" ", 1) for line in r.stdout.splitlines())
    # the error is still useful: its type, its text naming the runner and the cause, the cause's trace
    assert lines["TYPE"] == "RunnerError ValueError", r.stdout
    assert "Raising" in lines["TEXT"] and "ValueError: refused (1, 1048576)" in lines["TEXT"], r.stdout
    assert lines["TRACE"] == "True", r.stdout
    assert int(lines["GREW"]) < MARGIN_MB, r.stdout
