"""A geared runner's limits are the model's, not one per gear: one pool of job slots, one close deadline.

Every wait is bounded; nothing is timed (the close deadline is checked on the timeouts the
stream threads are joined with).
"""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.errors import RunnerError
from xgraph.runners.device_runners import CPURunner
from xgraph.runners.jobs import JobStatus

BOUND = 30.0
GEARS = (1, 2, 3, 4)


@pytest.fixture
def gated_gears():
    """(a model compiled with a gear per batch size in GEARS whose every subgraph blocks until `gate` is set, gate)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Neg", ["r"], ["y"], name="neg")]
    model = helper.make_model(helper.make_graph(
        nodes, "geared", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4])]), opset_imports=[helper.make_opsetid("", 17)])
    graph = xgraph.compile(model, {"input_shape": "x:-1,4", "dynamic_batch_size": ",".join(map(str, GEARS))})
    gate = threading.Event()

    class Gated(CPURunner):
        def execute(self, inputs):
            gate.wait(BOUND)
            return super().execute(inputs)

    name = f"test_gated_gears_{id(Gated)}"
    xgraph.register_runner(name, Gated)
    for gear in graph.get_gears():
        for child in gear.graph.get_root_subgraph().get_children():
            child.set_attr("runner", {"run": name})
    yield graph, gate
    gate.set()


def _x(batch: int) -> np.ndarray:
    return np.full((batch, 4), float(batch), np.float32)


def test_max_jobs_in_flight_holds_for_all_gears_together(gated_gears):
    graph, gate = gated_gears
    runner = xgraph.create_graph_runner(graph, max_jobs_in_flight=1, block_when_full=False)
    first = runner.execute_async({"x": _x(1)})
    for batch in GEARS[1:]:  # another gear has slots of its own no more
        with pytest.raises(RunnerError, match="1 jobs are already in flight"):
            runner.execute_async({"x": _x(batch)})
    gate.set()
    assert runner.wait(first, timeout=BOUND) == JobStatus.OK
    job = runner.execute_async({"x": _x(3)})  # the slot came back, to any gear
    assert runner.wait(job, timeout=BOUND) == JobStatus.OK
    np.testing.assert_array_equal(runner.get_outputs(job)[0], -_x(3))
    runner.close()


def test_close_waits_for_stuck_gears_until_one_deadline(gated_gears, monkeypatch):
    graph, gate = gated_gears
    runner = xgraph.create_graph_runner(graph, max_jobs_in_flight=len(GEARS))
    jobs = [runner.execute_async({"x": _x(b)}) for b in GEARS]  # a kernel stuck in every gear
    joins: list[tuple[float, bool]] = []  # (timeout given, thread still alive after it)
    join = threading.Thread.join

    def recording_join(thread, timeout=None):
        join(thread, timeout)
        if thread.name.startswith("xgraph-geared"):
            joins.append((timeout, thread.is_alive()))
    monkeypatch.setattr(threading.Thread, "join", recording_join)
    runner.close(timeout=0.5)
    monkeypatch.undo()
    assert all(runner.wait(job, timeout=BOUND) == JobStatus.CANCELLED for job in jobs)
    gave_up = next(i for i, (_, alive) in enumerate(joins) if alive)  # the first stuck stream: the deadline passed
    later = [timeout for timeout, _ in joins[gave_up + 1:]]
    assert later and max(later) < 0.05, joins  # every gear after it was given what was left of the one timeout
