"""RayGraphRunner on a simulated multi-node cluster: devices placed by custom resources, nodes lost.

Nodes are added to the session's cluster (ray.cluster_utils.Cluster) with resources such as
{"AICORE": 1}, and removed again, while the runner is in use. A job held on a node when it
goes is kept there by a gate (an event it waits for), so "in flight" is certain, not timed.
"""
from __future__ import annotations

import time

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="xgraph.ray needs Ray (pip install 'xgraph[ray]')")

import xgraph  # noqa: E402
import xgraph.ray  # noqa: E402
from xgraph.ray import ActorLostError, DeviceUnavailableError  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")
WAIT = 60.0
AICORE = {"AICORE": {"AICORE": 1}}


@pytest.fixture
def nodes(cluster):
    """add(**resources) adds a 1-CPU node offering them; nodes still there at the end are removed."""
    added = []

    def add(**resources):
        node = cluster.add_node(num_cpus=1, resources=resources)
        cluster.wait_for_nodes()
        added.append(node)
        return node

    yield add
    for node in added:
        if node in cluster.worker_nodes:
            cluster.remove_node(node)


def x_of(value: float) -> np.ndarray:
    return np.full((1, 4), value, np.float32)


def run_until_ok(runner, feeds, deadline_s: float = WAIT):
    """Submit `feeds` until a job succeeds (a lost device comes back only once its node is seen)."""
    deadline = time.monotonic() + deadline_s
    while True:
        job = runner.execute_async(feeds)
        if runner.wait(job, timeout=WAIT) == 0:
            return runner.get_outputs(job)
        if time.monotonic() > deadline:
            raise AssertionError(f"no job succeeded within {deadline_s} s: {runner.get_error(job)}")
        time.sleep(0.2)


def test_devices_go_to_the_nodes_offering_their_resources(cluster, nodes, models, expected):
    accelerator, preprocessor = nodes(AICORE=1), nodes(DVPP=1)
    with xgraph.ray.create_graph_runner(models.classifier, resources={**AICORE, "DVPP": {"DVPP": 1}}) as runner:
        for name, jpeg in models.jpegs.items():
            assert models.same(runner.run({"jpeg": jpeg}), expected.classifier[name])
        actors = runner.get_stats()["ray"]["actors"]
    assert actors["AICORE"]["node_id"] == accelerator.node_id and actors["AICORE"]["resources"] == {"AICORE": 1.0}
    assert actors["DVPP"]["node_id"] == preprocessor.node_id
    assert actors["AICORE"]["node_id"] != actors["DVPP"]["node_id"]  # tensors crossed nodes


def test_a_lost_node_fails_its_jobs_then_fails_fast_until_a_node_offers_the_device_again(
        cluster, nodes, gates):
    gate, setup = gates.make({"wait": {"AICORE:9": ["never"]}, "timeout": 30.0})
    first = nodes(AICORE=1)
    graph = gates.chain_graph(["AICORE", "AICPU"])
    with xgraph.ray.create_graph_runner(graph, worker_setup=setup, resources=AICORE) as runner:
        assert float(runner.run({"x": x_of(1)})[0][0, 0]) == 1
        # the AICPU actor needs no custom resource: Ray may place it on the AICORE node too, and then
        # the held job may fail on either actor's loss, whichever Ray reports first
        on_first = {device for device, actor in runner.get_stats()["ray"]["actors"].items()
                    if actor["node_id"] == first.node_id}
        assert "AICORE" in on_first
        held = runner.execute_async({"x": x_of(9)})  # waits on the AICORE node for a gate nobody opens
        cluster.remove_node(first)
        assert runner.wait(held, timeout=WAIT) == 1
        error = runner.get_error(held)
        assert isinstance(error, ActorLostError)
        message = str(error)
        assert f"({first.node_id[:8]})" in message
        if "subgraph 'subgraph_op001' on AICPU" in message:  # lost with the node, restarted on the head
            assert "AICPU" in on_first and "the runner restarted it" in message
        else:
            assert f"subgraph 'subgraph_op000' on AICORE: its Ray actor on node " in message
            assert "cannot be restarted" in message
        print(f"\nnode lost: {message}")
        # no node offers AICORE now: jobs fail at once, saying so
        job = runner.execute_async({"x": x_of(2)})
        assert runner.wait(job, timeout=5.0) == 1
        refused = runner.get_error(job)
        assert isinstance(refused, DeviceUnavailableError)
        assert "AICORE=1" in str(refused) and "ray start --resources" in str(refused)
        print(f"fail fast: {refused}")
        with pytest.raises(DeviceUnavailableError):
            runner.run({"x": x_of(3)})
        # a node with the resource joins: the runner restarts the actor there
        second = nodes(AICORE=1)
        (y,) = run_until_ok(runner, {"x": x_of(4)})
        assert float(y[0, 0]) == 4
        actor = runner.get_stats()["ray"]["actors"]["AICORE"]
        assert actor["node_id"] == second.node_id and actor["restarts"] == 1 and actor["state"] == "ready"


def test_an_actor_whose_node_is_lost_restarts_on_another_node_with_the_resource(cluster, nodes, gates, models,
                                                                                 expected):
    gate, setup = gates.make({"wait": {"AICORE:9": ["never"]}, "timeout": 30.0})
    spare_a, spare_b = nodes(AICORE=1), nodes(AICORE=1)
    graph = gates.chain_graph(["AICORE", "CPU"])
    with xgraph.ray.create_graph_runner(graph, worker_setup=setup, resources=AICORE) as runner:
        before = runner.get_stats()["ray"]["actors"]["AICORE"]
        hosting, other = (spare_a, spare_b) if before["node_id"] == spare_a.node_id else (spare_b, spare_a)
        held = runner.execute_async({"x": x_of(9)})
        cluster.remove_node(hosting)
        assert runner.wait(held, timeout=WAIT) == 1
        assert "restarted it (the model is reloaded)" in str(runner.get_error(held))
        for v in (5, 6, 7):
            assert float(runner.run({"x": x_of(v)})[0][0, 0]) == v
        after = runner.get_stats()["ray"]["actors"]["AICORE"]
    assert after["node_id"] == other.node_id and after["restarts"] == 1 and after["pid"] != before["pid"]
