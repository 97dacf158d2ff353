"""Concurrency soak (long run): one graph runner, many threads, thousands of jobs, memory watched.

    python fuzz/soak.py                       # squeezenet and the transformer, 1,000 measured jobs each
    python fuzz/soak.py --model transformer --jobs 5000 --threads 32

Per model: a warm-up (longer than the runner keeps finished job records, so the record table
is full before measuring), then `--jobs` measured jobs submitted by `--threads` threads at
once with wait(timeout) mixed in. Every job has its own input; every result is compared with
a single-threaded run of the same input; every `--poison`-th job hits an injected kernel
failure that must fail that job alone. Memory (tracemalloc and RSS) is read after the
warm-up and at the end. Finally the runner is closed with jobs in flight: every job must end
OK or CANCELLED and every thread must return.

Prints jobs, time, jobs/s, failures, mismatches, the longest wait and memory growth; exit
status 1 if any check failed.
"""
from __future__ import annotations

import argparse
import gc
import hashlib
import os
import sys
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import xgraph  # noqa: E402
from xgraph.errors import KernelError, RunnerError  # noqa: E402
from xgraph.runners.jobs import JobStatus  # noqa: E402
from xgraph.runners.runner import get_runner_class  # noqa: E402

from fuzz.models import squeezenet_graph, squeezenet_input, transformer_graph, transformer_input  # noqa: E402

BOUND = 120.0  # seconds a wait may take before it counts as a deadlock
KEEP_FINISHED = 1024  # finished job records a runner keeps (xgraph.runners.jobs.JobTable)

MODELS = {
    "squeezenet": (squeezenet_graph, lambda j: {"data_0": squeezenet_input(j)}),
    # a larger configuration than the CI test's: 4 layers, width 64, 32 tokens
    "transformer": (lambda: transformer_graph(seq=32, dim=64, layers=4), lambda j: transformer_input(j, seq=32)),
}


def rss_mib() -> float:
    """Resident set size of this process in MiB (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)
    except (OSError, ValueError):
        return 0.0


def poison(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Mark a job for the injected failure: the first element of its first input becomes a sentinel."""
    first = next(iter(feeds.values()))
    first.flat[0] = np.nan if first.dtype.kind == "f" else -7
    return feeds


def is_poisoned(x: np.ndarray) -> bool:
    v = x.flat[0]
    return bool(v != v) if x.dtype.kind == "f" else v == -7


def inject_failures(graph: xgraph.Graph) -> str:
    """Serve the first subgraph reading a graph input with a copy of its runner that fails on poisoned jobs."""
    inputs = {t.name for t in graph.get_input_tensors()}
    first = next(c for c in graph.get_root_subgraph().toposort_child_subgraph()
                 if any(t.name in inputs for t in c.get_input_tensors()))
    base = get_runner_class(first.get_attr("runner")["run"])
    graph_inputs = [t.name in inputs for t in first.get_input_tensors()]

    def execute(self, arrays):
        if any(flag and is_poisoned(x) for flag, x in zip(graph_inputs, arrays)):
            raise KernelError(f"injected failure in {self.subgraph.name!r}")
        return base.execute(self, arrays)

    name = f"soak_flaky_{base.__name__}"
    xgraph.register_runner(name, type(f"Flaky{base.__name__}", (base,), {"execute": execute}))
    first.set_attr("runner", {"run": name})
    return first.name


def digest(arrays) -> str:
    """A fingerprint of a job's outputs (so thousands of results need not be kept to compare)."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class Soak:
    """Drives one runner with many threads and checks every job as it finishes."""

    def __init__(self, runner, feeds_of, poison_every: int, threads: int, flaky: str):
        self.runner = runner
        self.feeds_of = feeds_of
        self.poison_every = poison_every
        self.threads = threads
        self.flaky = flaky
        self.expected: dict[int, str] = {}
        self.outcome: Counter = Counter()
        self.lock = threading.Lock()
        self.longest_wait = 0.0

    def poisoned(self, j: int) -> bool:
        return bool(self.poison_every) and j % self.poison_every == self.poison_every - 1

    def feeds(self, j: int) -> dict[str, np.ndarray]:
        feeds = self.feeds_of(j)
        return poison(feeds) if self.poisoned(j) else feeds

    def expect(self, reference_runner, jobs: range) -> float:
        """Single-threaded runs of every job's input, on a separate runner; returns seconds taken."""
        start = time.perf_counter()
        for j in jobs:
            if not self.poisoned(j):
                self.expected[j] = digest(reference_runner.run(self.feeds(j)))
        return time.perf_counter() - start

    def wait(self, job) -> int:
        """wait() in 1 s slices (timeouts mixed in on purpose); -99 after BOUND seconds."""
        t0 = time.perf_counter()
        while True:
            try:
                code = self.runner.wait(job, timeout=1.0)
                break
            except RunnerError as e:
                if "did not finish" not in str(e):
                    raise
                if time.perf_counter() - t0 > BOUND:
                    return -99
        with self.lock:
            self.longest_wait = max(self.longest_wait, time.perf_counter() - t0)
        return code

    def run(self, first: int, count: int) -> float:
        """Jobs first..first+count-1 from all threads at once; returns the seconds taken."""
        counter = iter(range(first, first + count))
        take = threading.Lock()
        barrier = threading.Barrier(self.threads)

        def worker(k: int) -> None:
            barrier.wait()
            window: list = []
            while True:
                with take:
                    j = next(counter, None)
                if j is None:
                    break
                window.append((j, self.runner.execute_async(self.feeds(j))))
                if len(window) > k % 4:  # threads keep 0..3 jobs of their own in flight
                    self.collect(*window.pop(0))
            for item in window:
                self.collect(*item)

        start = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(self.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND * 4)
        if any(t.is_alive() for t in threads):
            raise RuntimeError("a submitting thread never returned: deadlock")
        return time.perf_counter() - start

    def collect(self, j: int, job) -> None:
        code = self.wait(job)
        if code == -99:
            verdict = "deadlock (no result within the bound)"
        elif self.poisoned(j):
            error = str(self.runner.get_error(job))
            good = code == JobStatus.FAILED and "injected failure" in error and self.flaky in error
            verdict = "failed as injected" if good else "poisoned job not failed right"
        elif code != 0:
            verdict = f"unexpected status {code}: {str(self.runner.get_error(job))[:80]}"
        else:
            verdict = "ok" if digest(self.runner.get_outputs(job)) == self.expected[j] else "MISMATCH"
        with self.lock:
            self.outcome[verdict] += 1


def close_in_flight(runner, feeds_of, threads: int) -> Counter:
    """Close while threads submit: every job ends OK or CANCELLED, every thread returns."""
    jobs: list = []
    stop = Counter()
    lock = threading.Lock()

    def worker(k):
        j = 0
        while True:
            try:
                job = runner.execute_async(feeds_of(10 ** 6 + k * 10 ** 4 + j))
            except RunnerError as e:
                with lock:
                    stop["refused: " + ("closed while waiting" if "waiting" in str(e) else "closed")] += 1
                return
            with lock:
                jobs.append(job)
            j += 1

    ts = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(threads)]
    for t in ts:
        t.start()
    while len(jobs) < 4 * threads:
        time.sleep(0.001)
    t0 = time.perf_counter()
    runner.close(timeout=10)
    for t in ts:
        t.join(BOUND)
    stop["threads still running"] = sum(t.is_alive() for t in ts)
    stop["close seconds"] = round(time.perf_counter() - t0, 2)
    for job in jobs:
        try:
            stop[JobStatus(runner.wait(job, timeout=10)).name] += 1
        except RunnerError:
            stop["never finished"] += 1
    return stop


def soak_model(name: str, jobs: int, warmup: int, threads: int, poison_every: int, kernels: str) -> bool:
    """Run the soak for one model; prints a report; True when every check passed."""
    build, feeds_of = MODELS[name]
    graph = build()
    flaky = inject_failures(graph) if poison_every else ""
    runner = xgraph.create_graph_runner(graph, kernels=kernels, max_jobs_in_flight=8)
    soak = Soak(runner, feeds_of, poison_every, threads, flaky)
    with xgraph.create_graph_runner(build(), kernels=kernels) as reference:
        ref_s = soak.expect(reference, range(warmup + jobs))
    print(f"{name}: {len(graph.get_root_subgraph().get_children())} device subgraphs, {threads} threads, "
          f"warm-up {warmup} jobs, then {jobs} measured jobs, every {poison_every}th failing on purpose "
          f"(single-threaded references: {ref_s:.1f} s)")
    tracemalloc.start()  # on from the start, so records the warm-up filled are seen leaving too
    warm_s = soak.run(0, warmup)
    samples = []
    gc.collect()
    rss0 = rss_mib()
    traced0 = tracemalloc.get_traced_memory()[0]
    step = max(1, jobs // 4)
    run_s = 0.0
    for first in range(warmup, warmup + jobs, step):
        run_s += soak.run(first, min(step, warmup + jobs - first))
        gc.collect()
        samples.append((tracemalloc.get_traced_memory()[0] - traced0) / (1 << 20))
    tracemalloc.stop()
    rss1 = rss_mib()
    closing = close_in_flight(runner, feeds_of, threads)
    outcome = soak.outcome
    print(f"  {sum(outcome.values())} jobs checked against single-threaded runs: {dict(outcome)}")
    print(f"  measured: {jobs} jobs in {run_s:.1f} s ({jobs / run_s:.0f} jobs/s, tracemalloc on), warm-up "
          f"{warm_s:.1f} s, longest wait {soak.longest_wait:.2f} s")
    print(f"  memory during the measured jobs (each quarter, traced MiB over the post-warm-up baseline): "
          f"{', '.join(f'{m:+.2f}' for m in samples)}; RSS {rss0:.0f} -> {rss1:.0f} MiB")
    print(f"  close with jobs in flight: {dict(closing)}")
    bad = {k: v for k, v in outcome.items() if k not in ("ok", "failed as injected")}
    lost = warmup + jobs - sum(outcome.values())
    closed_ok = (closing["threads still running"] == 0 and closing["never finished"] == 0
                 and all(k in ("OK", "CANCELLED", "threads still running", "never finished", "close seconds")
                         or k.startswith("refused") for k in closing))
    flat = max(samples) - min(samples) < 4
    passed = not bad and lost == 0 and flat and closed_ok
    print(f"  {'PASS' if passed else 'FAIL'}" + (f" ({lost} jobs lost)" if lost else "")
          + ("" if flat else " (memory not flat)"))
    return passed


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and soak each model."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=[*MODELS, "all"], default="all")
    parser.add_argument("--jobs", type=int, default=1000, help="measured jobs per model")
    parser.add_argument("--warmup", type=int, default=KEEP_FINISHED + 76, help="jobs before memory is measured")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--poison", type=int, default=37, help="every Nth job fails on purpose (0: none)")
    parser.add_argument("--kernels", default="auto", choices=("auto", "numpy", "onnxruntime"))
    args = parser.parse_args(argv)
    names = list(MODELS) if args.model == "all" else [args.model]
    ok = all([soak_model(n, args.jobs, args.warmup, args.threads, args.poison, args.kernels) for n in names])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
