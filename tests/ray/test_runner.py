"""RayGraphRunner on a local Ray: equal to the local graph runner, pipelined, and robust to failures.

Every result is checked against the local graph runner's output for the same input. Overlap
is shown by events between actors (a gate actor), never by timing.
"""
from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="xgraph.ray needs Ray (pip install 'xgraph[ray]')")

import xgraph  # noqa: E402
import xgraph.ray  # noqa: E402
from xgraph.errors import RunnerError, XGraphError  # noqa: E402
from xgraph.ray import ActorLostError, DeviceUnavailableError  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")
WAIT = 60.0


def actors_of(runner) -> dict:
    return runner.get_stats()["ray"]["actors"]


@pytest.fixture(scope="module")
def classifier_runner(cluster, models):
    """One Ray runner of the classifier (from its .xmodel file), shared: starting actors takes seconds."""
    with xgraph.ray.create_graph_runner(models.classifier_path, profile=True) as runner:
        yield runner


@pytest.fixture(scope="module")
def encoder_runner(cluster, models):
    with xgraph.ray.create_graph_runner(models.encoder, max_jobs_in_flight=200) as runner:
        yield runner


def test_classifier_equals_the_local_runner_with_an_actor_per_device(classifier_runner, models, expected):
    runner = classifier_runner
    before = runner.get_stats()
    for name, jpeg in models.jpegs.items():
        assert models.same(runner.run({"jpeg": jpeg}), expected.classifier[name])
    stats = runner.get_stats()
    actors = stats["ray"]["actors"]
    assert sorted(actors) == ["AICORE", "AICPU", "CPU", "DVPP"]
    assert {a["state"] for a in actors.values()} == {"ready"}
    assert len({a["pid"] for a in actors.values()}) == 4  # four processes, not one
    # the actors imported this very xgraph (PYTHONPATH or the installed package), not another copy
    assert {a["xgraph_path"] for a in actors.values()} == {str(Path(xgraph.__file__).parent)}
    # the same host<->device copies as the local runner: jpeg H2D, top_index D2H, scores D2H per image
    images = len(models.jpegs)
    assert stats["copies"]["count"] - before["copies"]["count"] == 3 * images
    assert stats["jobs"]["OK"] - before["jobs"]["OK"] == images
    assert stats["ray"]["stages_per_job"] == 4
    assert stats["ray"]["calls"] - before["ray"]["calls"] == 4 * images
    assert {name: s["runs"] - before["subgraphs"][name]["runs"] for name, s in stats["subgraphs"].items()} == \
        {sg.name: images for sg in models.classifier.get_root_subgraph().get_children()}
    moved = stats["ray"]["transfers"]["bytes"] - before["ray"]["transfers"]["bytes"]
    assert moved > sum(x.nbytes for x in models.jpegs.values())


def test_encoder_equals_the_local_runner(encoder_runner, models, expected):
    for seed in range(5):
        assert models.same(encoder_runner.run(models.encoder_feeds(seed)), expected.encoder[seed])
    devices = {str(sg.get_attr("device")) for sg in models.encoder.get_root_subgraph().get_children()}
    assert sorted(actors_of(encoder_runner)) == sorted(devices)  # one actor per device (the mask ops: AI Core)


def test_encoder_with_an_actor_per_subgraph_equals_the_local_runner(cluster, models, expected):
    with xgraph.ray.create_graph_runner(models.encoder, group_by="subgraph") as runner:
        for seed in range(5, 8):
            assert models.same(runner.run(models.encoder_feeds(seed)), expected.encoder[seed])
        actors = actors_of(runner)
    subgraphs = sorted(sg.name for sg in models.encoder.get_root_subgraph().get_children())
    assert sorted(actors) == subgraphs and all(actors[name]["subgraphs"] == [name] for name in subgraphs)


def test_a_model_with_gears_runs_each_gear_in_its_own_actors_like_the_local_gear_runner(cluster, tmp_path):
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    k = helper.make_tensor_value_info("k", TensorProto.INT64, ["batch", 2])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),  # AI Core, then TopK on AI CPU
             helper.make_node("TopK", ["r", "two"], ["k_v", "k"], name="topk", axis=-1)]
    two = helper.make_tensor("two", TensorProto.INT64, [1], [2])
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [k], [two]),
                              opset_imports=[helper.make_opsetid("", 17)])
    graph = xgraph.compile(model, {"input_shape": "x:-1,4", "dynamic_batch_size": "1,3"})
    graph.serialize(tmp_path / "gears.xmodel")
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((b, 4)).astype(np.float32)} for b in (1, 3, 3, 1)]
    with xgraph.create_graph_runner(graph) as local:
        expected = [local.run(f) for f in feeds]
    for source in (graph, tmp_path / "gears.xmodel"):
        with xgraph.ray.create_graph_runner(source) as runner:
            assert [runner.select_gear(f).name for f in feeds] == ["gear0", "gear1", "gear1", "gear0"]
            for f, want in zip(feeds, expected):
                got = runner.run(f)
                assert len(got) == 1 and np.array_equal(got[0], want[0])
            with pytest.raises(RunnerError, match="match no gear"):
                runner.run({"x": np.zeros((2, 4), np.float32)})
            stats = runner.get_stats()
        assert stats["jobs"]["OK"] == 4 and all("ray" in gear for gear in stats["gears"].values())


def test_200_jobs_in_flight_each_get_their_own_results(encoder_runner, models, expected):
    runner = encoder_runner
    jobs = [runner.execute_async(models.encoder_feeds(seed)) for seed in range(200)]
    assert [runner.wait(job, timeout=WAIT) for job in jobs] == [0] * 200
    for seed, job in enumerate(jobs):
        assert models.same(runner.get_outputs(job), expected.encoder[seed]), seed


def test_preallocated_outputs_are_filled(encoder_runner, models, expected):
    out = np.empty((1, 16, 16), np.float32)
    job = encoder_runner.execute_async(models.encoder_feeds(3), [out])
    assert encoder_runner.wait(job, timeout=WAIT) == 0
    np.testing.assert_array_equal(out, expected.encoder[3][0])


def test_successive_jobs_overlap_across_actors(cluster, gates):
    """The AICPU actor runs job 1 only once the AICORE actor has started job 2: only pipelining allows that."""
    gate, setup = gates.make({"open": {"AICORE:2": ["second started"]}, "wait": {"AICPU:1": ["second started"]}})
    with xgraph.ray.create_graph_runner(gates.chain_graph(["AICORE", "AICPU"]), worker_setup=setup) as runner:
        jobs = [runner.execute_async({"x": np.full((1, 4), v, np.float32)}) for v in (1, 2)]
        assert [runner.wait(job, timeout=WAIT) for job in jobs] == [0, 0]
        assert [float(runner.get_outputs(job)[0][0, 0]) for job in jobs] == [1, 2]
    assert ray.get(gate.results.remote(), timeout=WAIT) == {"second started": [True]}


def test_kernel_error_fails_its_job_only_and_the_actor_keeps_serving(classifier_runner, models, expected):
    runner, good = classifier_runner, models.jpegs["sample0.jpg"]
    before = runner.get_stats()
    pid = before["ray"]["actors"]["DVPP"]["pid"]
    for bad in (good[:200], np.frombuffer(b"not a jpeg", np.uint8)):  # cut off after its header; not a JPEG
        job = runner.execute_async({"jpeg": bad})
        assert runner.wait(job, timeout=WAIT) == 1
        error = runner.get_error(job)
        assert isinstance(error, XGraphError)
        message = str(error)
        assert message.startswith(f"job {job[0]}: subgraph 'subgraph_decode' on DVPP") and "(Ray node " in message
        assert "JpegDecode" in message or "decode" in message
        assert models.same(runner.run({"jpeg": good}), expected.classifier["sample0.jpg"])
    print(f"\nkernel error: {message}")
    stats = runner.get_stats()
    assert stats["ray"]["actors"]["DVPP"]["pid"] == pid and stats["ray"]["actors"]["DVPP"]["restarts"] == 0
    assert stats["subgraphs"]["subgraph_decode"]["failures"] - before["subgraphs"]["subgraph_decode"]["failures"] == 2
    assert stats["jobs"]["FAILED"] - before["jobs"]["FAILED"] == 2
    assert stats["jobs"]["OK"] - before["jobs"]["OK"] == 2


def test_an_actor_killed_mid_run_fails_the_jobs_it_held_and_is_restarted(cluster, models, expected):
    names = list(models.jpegs)
    with xgraph.ray.create_graph_runner(models.classifier, max_jobs_in_flight=200) as runner:
        before = actors_of(runner)["AICORE"]
        jobs = [runner.execute_async({"jpeg": models.jpegs[names[i % 3]]}) for i in range(200)]
        runner.wait(jobs[0], timeout=WAIT)
        os.kill(before["pid"], signal.SIGKILL)
        statuses = [runner.wait(job, timeout=WAIT) for job in jobs]
        failed = [job for job, status in zip(jobs, statuses) if status != 0]
        assert failed, "the kill came after every job had passed the actor"
        for i, (job, status) in enumerate(zip(jobs, statuses)):
            if status == 0:
                assert models.same(runner.get_outputs(job), expected.classifier[names[i % 3]])
            else:
                error = runner.get_error(job)
                assert isinstance(error, ActorLostError), error
                message = str(error)
                assert "subgraph 'subgraph_add_batch' on AICORE" in message
                assert f"node {before['node_ip']} ({before['node_id'][:8]}), pid {before['pid']}" in message
                assert "died" in message and "restarted" in message
        print(f"\n{len(failed)} of 200 jobs failed with: {runner.get_error(failed[0])}")
        # later jobs run on the restarted actor, which reloaded the model
        for i in range(6):
            assert models.same(runner.run({"jpeg": models.jpegs[names[i % 3]]}), expected.classifier[names[i % 3]])
        after = actors_of(runner)["AICORE"]
        assert after["restarts"] == 1 and after["state"] == "ready" and after["pid"] != before["pid"]


def test_waits_and_job_timeouts_never_hang_and_close_cancels_jobs_and_releases_every_actor(cluster, gates):
    gate, setup = gates.make({"wait": {"AICORE:9": ["never"]}, "timeout": 30.0})
    runner = xgraph.ray.create_graph_runner(gates.chain_graph(["AICORE", "AICPU", "CPU"]), worker_setup=setup,
                                            job_timeout=1.0)
    pids = [a["pid"] for a in actors_of(runner).values()]
    stuck = runner.execute_async({"x": np.full((1, 4), 9, np.float32)})  # its AICORE stage waits for ever
    with pytest.raises(RunnerError, match=f"job {stuck[0]} did not finish within 0.2 s"):
        runner.wait(stuck, timeout=0.2)
    assert runner.wait(stuck, timeout=WAIT) == 3
    assert "exceeded job_timeout=1.0 s" in str(runner.get_error(stuck))
    queued = runner.execute_async({"x": np.full((1, 4), 5, np.float32)})  # behind the stuck one on AICORE
    runner.close()
    assert runner.wait(queued, timeout=WAIT) == 2 and "cancelled" in str(runner.get_error(queued))
    assert {a["state"] for a in actors_of(runner).values()} == {"closed"}
    deadline = time.monotonic() + WAIT
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        for pid in list(alive):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                alive.discard(pid)
        time.sleep(0.1)
    assert not alive, f"actor processes {sorted(alive)} outlived close()"
    with pytest.raises(RunnerError, match="closed"):
        runner.execute_async({"x": np.zeros((1, 4), np.float32)})


def test_a_device_no_node_can_host_fails_at_creation_naming_it(cluster, models):
    with pytest.raises(DeviceUnavailableError, match=r"AICORE.*NPU=1.*ray start --resources"):
        xgraph.ray.create_graph_runner(models.classifier, resources={"AICORE": {"NPU": 1}})


def test_an_actor_that_cannot_start_fails_the_runner_with_its_own_error(cluster, gates):
    graph = gates.chain_graph(["AICORE", "AICPU"])  # runner 'test_gated', which no worker_setup registers here
    with pytest.raises(RunnerError, match=r"could not start: .*no runner is registered as 'test_gated'"):
        xgraph.ray.create_graph_runner(graph)


def test_bad_options_are_refused_naming_them(cluster, models):
    with pytest.raises(RunnerError, match="neither a device nor a subgraph.*AICORE"):
        xgraph.ray.create_graph_runner(models.classifier, resources={"TPU": {"CPU": 1}})
    with pytest.raises(RunnerError, match="group_by"):
        xgraph.ray.create_graph_runner(models.classifier, group_by="node")
    with pytest.raises(RunnerError, match="non-negative"):
        xgraph.ray.create_graph_runner(models.classifier, resources={"AICORE": {"CPU": -1}})
    with pytest.raises(XGraphError, match="compile it first"):
        xgraph.ray.create_graph_runner(xgraph.Graph.from_onnx(models.sample / "classifier.onnx"))


def test_chrome_trace_has_spans_of_every_device_and_copy_engine(classifier_runner, models, tmp_path):
    for jpeg in models.jpegs.values():
        classifier_runner.run({"jpeg": jpeg})
    classifier_runner.export_chrome_trace(tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert tracks == {"DVPP", "AICORE", "AICPU", "CPU", "H2D", "D2H"}
    spans = [e for e in events if e["ph"] == "X"]
    by_job: dict = {}
    for e in spans:
        by_job.setdefault(e["args"]["job"], []).append(e["name"])
    complete = [names for names in by_job.values() if len(names) == 7]  # 4 subgraphs and 3 copies per image
    assert len(complete) >= len(models.jpegs)
    assert all(e["dur"] >= 0 for e in spans)


def test_values_kept_on_the_device_are_refused_naming_why(encoder_runner, models, expected):
    names = [t.name for t in encoder_runner.get_output_tensors()]
    before = encoder_runner.get_stats()["jobs"]
    with pytest.raises(RunnerError, match="executes its subgraphs elsewhere.*keeps no values on the device"):
        encoder_runner.run(models.encoder_feeds(3), keep_on_device=names[:1])
    assert encoder_runner.get_stats()["jobs"] == before
