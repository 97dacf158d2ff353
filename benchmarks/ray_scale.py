"""Ray scaling: replicas over a dataset, the Ray graph runner's cost per job and per hop, bytes moved.

1. Throughput: the sample classifier (JPEG bytes, decoded by its DVPP subgraph) and ResNet50
   (random weights) over --inputs inputs through `xgraph.ray.map_batches` with 1 and 2
   replicas (each reserving 1 CPU and computing on 1 intra-op thread), beside the local graph
   runner in this process on 1 thread. Inputs sit in memory (ray.data.from_items), so no read
   task competes for the CPUs. "end to end" includes starting the replicas; "steady" counts
   the rows over the replicas' busy window (first batch start to last batch end, stamped in
   the replicas), which leaves start-up out. Each case runs --repeats times, taking turns,
   and keeps its best: on a shared host the others' load comes and goes. "cores busy" is the
   replicas' CPU time over that window: 2 replicas of a compute-bound model keep 2 cores
   busy unless other processes take them.
2. Per job: one job at a time through the local graph runner and the Ray graph runner (median
   ms per job, the two taking turns in blocks of 5), for a chain of null-runner subgraphs
   alternating AICORE/AICPU (pure dispatch), the classifier and ResNet50; the difference over
   the stages (actor calls) a job makes is the cost of a hop. In brackets: the time the
   subgraph runners themselves took (in the actors, for Ray). Then jobs per second with 8
   jobs in flight, both runners.
   The baseline: a chain of 8 bare Ray actor calls passing a (1, 4) array, no xgraph at all.
3. Bytes per job that Ray moved (feeds and every stage output, in the object store or inline),
   from the Ray graph runner's stats.

    python benchmarks/ray_scale.py [--inputs 256] [--jobs 40] [--models classifier,resnet50]
                                   [--repeats 2] [--only throughput|per-job]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("XGRAPH_INTRA_OP_THREADS", "1")  # the local baseline and every actor: one thread each
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

import numpy as np  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's xgraph and testing/
import xgraph  # noqa: E402
import xgraph.ray  # noqa: E402

from testing.runtime import in_flight_rate, place, zoo_model  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "classify"
#: Rows per replica call: enough to spread Ray Data's per-batch cost over a small model's runs.
BATCH = {"classifier": 16, "resnet50": 8}


def classifier_case(n: int):
    """The compiled classifier and n JPEG inputs (the three sample images, repeated)."""
    graph = xgraph.compile(SAMPLE / "classifier.onnx")
    images = [np.frombuffer(p.read_bytes(), np.uint8) for p in sorted((SAMPLE / "images").glob("*.jpg"))]
    return graph, [{"jpeg": images[i % len(images)]} for i in range(n)]


def resnet_case(n: int):
    """Compiled ResNet50 (seeded random weights) and n random (1, 3, 224, 224) inputs."""
    graph = xgraph.compile(zoo_model("resnet50"))
    (t,) = graph.get_input_tensors()
    rng = np.random.default_rng(0)
    base = [rng.standard_normal(t.shape).astype(np.float32) for _ in range(8)]
    return graph, [{t.name: base[i % len(base)]} for i in range(n)]


def null_chain(hops: int):
    """x -> Relu x hops, one null-runner subgraph per op, alternating AICORE and AICPU (no copies)."""
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < hops - 1 else "y"],
                              name=f"op{i:03d}") for i in range(hops)]
    g = helper.make_graph(nodes, "null_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    graph = xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    place(graph, {f"op{i:03d}": ("AICORE", "AICPU")[i % 2] for i in range(hops)}, runner="null", merge=False)
    return graph, [{"x": np.zeros((1, 4), np.float32)}]


# -- 1. replicas ---------------------------------------------------------------------------------

def local_throughput(graph, feeds, kernels: str) -> float:
    """Inputs per second through the local graph runner (4 jobs in flight, this process, 1 thread)."""
    with xgraph.create_graph_runner(graph, kernels=kernels) as runner:
        runner.run(feeds[0])
        start = time.perf_counter()
        pending = []
        for f in feeds:
            pending.append(runner.execute_async(f))
            if len(pending) == 4:
                runner.wait(pending.pop(0))
        for job in pending:
            runner.wait(job)
        return len(feeds) / (time.perf_counter() - start)


class TimedReplica(xgraph.ray.ModelReplica):
    """The replica map_batches runs, also stamping each batch with the wall-clock time it ran in."""

    def __call__(self, batch):
        start, cpu = time.time(), time.process_time()
        out = super().__call__(batch)
        rows = len(next(iter(out.values())))
        out["batch_start"], out["batch_end"] = np.full(rows, start), np.full(rows, time.time())
        out["cpu_share"] = np.full(rows, (time.process_time() - cpu) / rows)  # this process's CPU s, all threads
        return out


def replica_throughput(graph, feeds, replicas: int, kernels: str, batch_size: int) -> dict[str, float]:
    """Inputs/s end to end (from the call to the last row), and steady: rows over the replicas' busy window.

    The busy window runs from the first batch's start to the last batch's end in the replicas
    themselves, so it leaves out starting Ray Data's pool and loading the model. The replica
    is map_batches' own ModelReplica with the same options, plus the two time stamps.
    """
    import ray
    (t,) = graph.get_input_tensors()
    dataset = ray.data.from_items([{t.name: f[t.name]} for f in feeds])
    start = time.perf_counter()
    kwargs = {"model": ray.put(graph_bytes(graph)), "kernels": kernels, "threads": 1}
    out = dataset.map_batches(TimedReplica, fn_constructor_kwargs=kwargs, batch_size=batch_size,
                              compute=ray.data.ActorPoolStrategy(size=replicas), num_cpus=1, batch_format="numpy")
    rows, first, last, cpu = 0, float("inf"), 0.0, 0.0
    for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
        rows += len(batch["batch_start"])
        first, last = min(first, float(batch["batch_start"].min())), max(last, float(batch["batch_end"].max()))
        cpu += float(batch["cpu_share"].sum())
    end = time.perf_counter()
    assert rows == len(feeds), (rows, len(feeds))
    return {"end to end": rows / (end - start), "steady": rows / (last - first), "cores": cpu / (last - first)}


def graph_bytes(graph) -> bytes:
    """The .xmodel bytes of a compiled graph (what map_batches puts in the object store)."""
    from xgraph.ray.graph_runner import model_bytes
    return model_bytes(graph)


# -- 2. and 3. the Ray graph runner --------------------------------------------------------------

def alternating_ms(runners: dict, feeds, jobs: int, block: int = 5) -> dict[str, float]:
    """Median ms per job (one at a time) of each runner, taking turns in blocks so load spells hit all alike."""
    times: dict[str, list[float]] = {name: [] for name in runners}
    for runner in runners.values():
        runner.run(feeds)
    while min(len(t) for t in times.values()) < jobs:
        for name, runner in runners.items():
            for _ in range(block):
                start = time.perf_counter()
                runner.run(feeds)
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def per_job(graph, feeds, jobs: int, kernels: str) -> dict[str, float]:
    """Local vs Ray: ms per job (one at a time), ms per hop, jobs/s with 8 in flight, bytes per job."""
    row: dict[str, float] = {}
    with xgraph.create_graph_runner(graph, kernels=kernels, max_jobs_in_flight=8) as local, \
            xgraph.ray.create_graph_runner(graph, kernels=kernels, max_jobs_in_flight=8) as remote:
        before = remote.get_stats()["ray"]
        ms = alternating_ms({"local": local, "ray": remote}, feeds, jobs)
        after = remote.get_stats()["ray"]
        row["in actors ms"] = compute_ms(remote)
        row["in runners ms"] = compute_ms(local)
        row["local ms"], row["ray ms"] = ms["local"], ms["ray"]
        row["local jobs/s"] = in_flight_rate(local, feeds, jobs)
        row["ray jobs/s"] = in_flight_rate(remote, feeds, jobs)
        done = after["calls"] // after["stages_per_job"] - before["calls"] // before["stages_per_job"]
        row["stages"] = after["stages_per_job"]
        row["objects/job"] = (after["transfers"]["count"] - before["transfers"]["count"]) / done
        row["bytes/job"] = (after["transfers"]["bytes"] - before["transfers"]["bytes"]) / done
    row["ms/hop"] = (row["ray ms"] - row["local ms"]) / row["stages"]
    return row


def compute_ms(runner) -> float:
    """Mean ms per job the subgraph runners themselves took (in the actors, for the Ray runner)."""
    subgraphs = runner.get_stats()["subgraphs"].values()
    return sum(s["total_s"] / s["runs"] for s in subgraphs if s.get("runs")) * 1e3


class _Pass:
    """A bare Ray actor passing its input on: what one actor call costs before xgraph adds anything."""

    def step(self, x):
        return x


def bare_ray(hops: int, jobs: int) -> dict[str, float]:
    """ms per job (one at a time) and jobs/s (8 in flight) through a chain of `hops` bare actor calls."""
    import ray
    actors = [ray.remote(_Pass).remote() for _ in range(hops)]
    x = np.zeros((1, 4), np.float32)

    def job():
        value = x
        for actor in actors:
            value = actor.step.remote(value)
        return value

    ray.get(job())
    times = []
    for _ in range(jobs):
        start = time.perf_counter()
        ray.get(job())
        times.append(time.perf_counter() - start)
    start, pending = time.perf_counter(), []
    for _ in range(jobs):
        pending.append(job())
        if len(pending) == 8:
            ray.get(pending.pop(0))
    ray.get(pending)
    rate = jobs / (time.perf_counter() - start)
    for actor in actors:
        ray.kill(actor)
    return {"ms": statistics.median(times) * 1e3, "jobs/s": rate}


def throughput_part(args: argparse.Namespace, cases: dict) -> None:
    """Section 1: the local runner, 1 and 2 replicas, each the best of --repeats turns."""
    print(f"## 1. Throughput over {args.inputs} inputs (inputs/s; best of {args.repeats} runs each)\n")
    print("| model | batch | local runner | 1 replica (steady) | 2 replicas (steady) | 2 vs 1 | "
          "cores busy (1 / 2 replicas) | 1 replica end to end | 2 replicas end to end | load average |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, (graph, feeds) in cases.items():
        batch = BATCH[name] if args.batch_size is None else args.batch_size
        local, best = 0.0, {1: {"steady": 0.0}, 2: {"steady": 0.0}}
        for _ in range(args.repeats):  # taking turns, keeping each one's best: a shared host's load comes and goes
            local = max(local, local_throughput(graph, feeds, args.kernels))
            for replicas in (1, 2):
                got = replica_throughput(graph, feeds, replicas, args.kernels, batch)
                if got["steady"] > best[replicas]["steady"]:
                    best[replicas] = got
        one, two = best[1], best[2]
        print(f"| {name} | {batch} | {local:.1f} | {one['steady']:.1f} | {two['steady']:.1f} | "
              f"{two['steady'] / one['steady']:.2f}x | {one['cores']:.2f} / {two['cores']:.2f} | "
              f"{one['end to end']:.1f} | {two['end to end']:.1f} | {os.getloadavg()[0]:.1f} |", flush=True)


def per_job_part(args: argparse.Namespace, cases: dict) -> None:
    """Sections 2 and 3: one job at a time and 8 in flight, local vs Ray, and the bare Ray baseline."""
    print(f"\n## 2./3. One job at a time, and 8 in flight ({args.jobs} jobs; Ray graph runner, an actor per device)\n")
    print("| model | subgraphs | stages | local ms/job (runners) | Ray ms/job (in actors) | Ray ms per hop | "
          "local jobs/s (8 in flight) | Ray jobs/s (8 in flight) | objects/job | bytes/job |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, (graph, feeds) in cases.items():
        jobs = args.jobs if name != "resnet50" else max(5, args.jobs // 4)
        r = per_job(graph, feeds[0], jobs, args.kernels)
        print(f"| {name} | {graph.get_root_subgraph().get_children_num()} | {r['stages']:.0f} | {r['local ms']:.2f} "
              f"({r['in runners ms']:.2f}) | {r['ray ms']:.2f} ({r['in actors ms']:.2f}) | {r['ms/hop']:.2f} | "
              f"{r['local jobs/s']:.1f} | {r['ray jobs/s']:.1f} | {r['objects/job']:.1f} | {r['bytes/job']:,.0f} |",
              flush=True)
    bare = bare_ray(8, args.jobs)
    print(f"| bare Ray, 8 actor calls (baseline) | - | 8 | - | {bare['ms']:.2f} | {bare['ms'] / 8:.2f} | - | "
          f"{bare['jobs/s']:.1f} | 8 | - |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=256, help="inputs per throughput run (default 256)")
    parser.add_argument("--jobs", type=int, default=40, help="jobs per per-job measurement (default 40)")
    parser.add_argument("--kernels", default="numpy", help="kernels of every runner (default numpy: one thread)")
    parser.add_argument("--batch-size", type=int, default=None, help="rows per replica call (default: per model)")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each throughput case, best kept (default 2)")
    parser.add_argument("--models", default="classifier,resnet50", help="of classifier,resnet50 (default both)")
    parser.add_argument("--only", choices=("throughput", "per-job"), help="run one of the two parts")
    args = parser.parse_args()

    import ray
    ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, logging_level="WARNING",
             log_to_driver=False)
    import ray.data
    ray.data.DataContext.get_current().enable_progress_bars = False
    makers = {"classifier": classifier_case, "resnet50": resnet_case}
    cases = {name: makers[name] for name in args.models.split(",")}
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, kernels {args.kernels}, "
          f"1 intra-op thread per runner\n")

    built = {name: make(args.inputs) for name, make in cases.items()}
    if args.only != "per-job":
        throughput_part(args, built)
    if args.only != "throughput":
        per_job_part(args, {"null chain (8)": null_chain(8), **built})
    ray.shutdown()


if __name__ == "__main__":
    main()
