"""Device instances at run time: each instance its own stream, each card its own memory (copies between
cards counted as the report predicts), queues from max_concurrency, and today's streams by default.

Overlap is shown by events (a call waits until another has provably started), never by timing.
"""
from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph import Graph, Runner
from xgraph.devices import DeviceSpec
from xgraph.devices.instances import copy_stream, residences

WAIT = 5.0  # seconds an event-based check waits before concluding "it did not happen"
TWO_INSTANCES = {"devices": {"AICORE": {"instances": 2}}, "placement": "throughput"}


def conv_chain(n: int = 6, channels: int = 16, side: int = 32, seed: int = 0):
    """x -> (Conv 3x3 -> Relu) * n -> y, random weights: heavy enough that two AI Cores share it."""
    rng = np.random.default_rng(seed)
    nodes, inits, current = [], [], "x"
    for i in range(n):
        w = (rng.standard_normal((channels, channels, 3, 3)) / np.sqrt(9 * channels)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("Conv", [current, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        current = "y" if i == n - 1 else f"r{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [current], name=f"relu{i}"))
    shape = [1, channels, side, side]
    g = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled():
    """The conv chain compiled for two AI Core instances, for one, and by first fit."""
    model = conv_chain()
    return {"two": xgraph.compile(model, TWO_INSTANCES),
            "one": xgraph.compile(model, {"placement": "throughput"}),
            "first_fit": xgraph.compile(model, {})}


def _inputs(n: int) -> list[np.ndarray]:
    return [np.random.default_rng(i).standard_normal((1, 16, 32, 32)).astype(np.float32) for i in range(n)]


def test_the_two_instance_compile_uses_both_instances(compiled):
    instances = {c.get_attr("instance") for c in compiled["two"].get_root_subgraph().get_children()
                 if c.get_attr("device") == "AICORE"}
    assert instances == {0, 1}


def test_two_instances_run_bit_identical_to_one_with_jobs_in_flight(compiled):
    xs = _inputs(6)
    with xgraph.create_graph_runner(compiled["one"], kernels="numpy") as one:
        want = [one.run({"x": x})[0] for x in xs]
    with xgraph.create_graph_runner(compiled["first_fit"], kernels="numpy") as first_fit:
        for x, w in zip(xs, want):
            np.testing.assert_array_equal(first_fit.run({"x": x})[0], w)
    with xgraph.create_graph_runner(compiled["two"], kernels="numpy", max_jobs_in_flight=4) as two:
        np.testing.assert_array_equal(two.run({"x": xs[0]})[0], want[0])  # on the caller's thread
        jobs = [two.execute_async({"x": x}) for x in xs]  # on the streams, pipelined
        assert [two.wait(j, timeout=60) for j in jobs] == [0] * len(xs)
        for job, w in zip(jobs, want):
            np.testing.assert_array_equal(two.get_outputs(job)[0], w)


def test_each_instance_is_its_own_stream_and_copies_between_cards_are_counted(compiled):
    graph = compiled["two"]
    report = xgraph.report(graph)
    assert "D2D" in {c["direction"] for c in report["crossing_tensors"]}
    runs = 3
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        assert {"AICORE:0", "AICORE:1", "D2D:0>1"} <= set(runner.plan.streams())
        jobs = [runner.execute_async({"x": x}) for x in _inputs(runs)]
        assert [runner.wait(j, timeout=60) for j in jobs] == [0] * runs
        stats = runner.get_stats()
        threads = {t.name.rsplit("-stream-", 1)[1] for t in threading.enumerate() if "-stream-" in t.name
                   and t.name.startswith("xgraph-convs")}
    assert {"AICORE:0", "AICORE:1"} <= threads
    assert stats["copies"]["count"] == runs * report["copies_per_run"]["total"]
    by_stream = stats["streams"]
    for k in (0, 1):
        names = [c.name for c in graph.get_root_subgraph().get_children()
                 if c.get_attr("device") == "AICORE" and c.get_attr("instance") == k]
        assert sorted(by_stream[f"AICORE:{k}"]["subgraphs"]) == sorted(names)
        assert by_stream[f"AICORE:{k}"]["runs"] == runs * len(names)


def test_sim_mode_estimates_device_time_per_instance(compiled):
    with xgraph.create_graph_runner(compiled["two"], mode="sim") as runner:
        runner.run({"x": _inputs(1)[0]})
        streams = runner.get_stats()["streams"]
    assert streams["AICORE:0"]["estimated_device_s"] > 0 and streams["AICORE:1"]["estimated_device_s"] > 0


def test_default_specs_give_todays_streams(make):
    placed = make.place(Graph.from_onnx(make.small_cnn()), lambda op: {"Flatten": "AICPU", "Softmax": "CPU"}.get(
        op.type, "AICORE"))
    cases = [(xgraph.compile(make.small_cnn(), {}), ["H2D", "AICORE", "D2H"]),
             (xgraph.compile(make.small_cnn(), {"placement": "throughput"}), None),
             (placed, ["H2D", "AICORE", "AICPU", "D2H", "CPU"])]
    for graph, want in cases:
        with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
            runner.execute_async({"x": np.ones((1, 3, 8, 8), np.float32)})  # starts the stream threads
            streams = runner.plan.streams()
            threads = [t.name for t in threading.enumerate() if t.name.startswith("xgraph-small_cnn-stream-")]
            assert runner.plan.queues == {} and not any(":" in s for s in streams)
            assert sorted(threads) == sorted(f"xgraph-small_cnn-stream-{s}" for s in streams)
            if want is not None:
                assert streams == want


def test_memory_domains_and_copy_streams():
    spec = {"AICORE": DeviceSpec("AICORE", instances=2, max_concurrency=3), "AICPU": DeviceSpec("AICPU"),
            "CPU": DeviceSpec("CPU", memory="host")}
    graph = Graph.from_onnx(conv_chain(3))
    from testing.runtime import place
    place(graph, {"conv0": "AICORE", "relu0": "AICORE", "conv1": "AICPU", "relu1": "AICORE", "conv2": "CPU",
                  "relu2": "CPU"})
    first, second, third, last = graph.get_root_subgraph().toposort_child_subgraph()
    third.set_attr("instance", 1)
    where = residences([first, second, third, last], spec)
    assert [(where[s].stream, where[s].memory, where[s].queues) for s in (first, second, third, last)] == [
        ("AICORE:0", "device:0", 3), ("AICPU", "device:0", 1), ("AICORE:1", "device:1", 3), ("CPU", "host", 1)]
    one_card = {**spec, "AICORE": DeviceSpec("AICORE")}  # a table of one instance, a subgraph on instance 1
    assert [residences([first, third], one_card)[s].stream for s in (first, third)] == ["AICORE:0", "AICORE:1"]
    assert [copy_stream(*pair) for pair in [("host", "device"), ("device", "host"), ("host", "device:1"),
                                            ("device:0", "host"), ("device:0", "device:1")]] == [
        "H2D", "D2H", "H2D:1", "D2H:0", "D2D:0>1"]


# -- queues ---------------------------------------------------------------------------------------
class GateRunner(Runner):
    """Passes x through; the first call waits until a second call has entered (only overlap allows that)."""

    reentrant = True
    any_thread = True
    entered: threading.Semaphore
    second_entered: threading.Event
    first_saw_second: list

    def execute(self, inputs):
        cls = type(self)
        if cls.entered.acquire(blocking=False):  # the first call
            cls.first_saw_second.append(cls.second_entered.wait(WAIT))
        else:
            cls.second_entered.set()
        return [inputs[0]]


def _gate_runner(reentrant: bool) -> type:
    cls = type("Gate", (GateRunner,), {"reentrant": reentrant, "entered": threading.Semaphore(1),
                                       "second_entered": threading.Event(), "first_saw_second": []})
    xgraph.register_runner("test_gate", cls)
    return cls


def _gated_graph(make, max_concurrency: int) -> Graph:
    options = {"devices": {"AICORE": {"max_concurrency": max_concurrency}}} if max_concurrency > 1 else {}
    graph = xgraph.compile(make.chain_model(1), options)
    (only,) = graph.get_root_subgraph().get_children()
    assert only.get_attr("device") == "AICORE"
    only.set_attr("runner", {"run": "test_gate", "sim": "test_gate", "ref": "test_gate"})
    return graph


def test_max_concurrency_two_lets_two_jobs_overlap_on_one_instance(make):
    gate = _gate_runner(reentrant=True)
    with xgraph.create_graph_runner(_gated_graph(make, 2)) as runner:
        assert runner.plan.queues == {"AICORE": 2} and runner.plan.streams() == ["H2D", "AICORE", "D2H"]
        x = np.ones((1, 4), np.float32)
        jobs = [runner.execute_async({"x": x * k}) for k in (1, 2)]
        assert [runner.wait(j, timeout=2 * WAIT) for j in jobs] == [0, 0]
        assert [float(runner.get_outputs(j)[0][0, 0]) for j in jobs] == [1.0, 2.0]
        assert runner.get_stats()["streams"]["AICORE"]["queues"] == 2
    assert gate.first_saw_second == [True]


def test_a_runner_that_is_not_reentrant_takes_turns_on_several_queues(make):
    gate = _gate_runner(reentrant=False)
    gate.second_entered.set()  # nothing to wait for: the calls must not overlap, not be stuck
    active, peak, lock = [0], [0], threading.Lock()
    plain = gate.execute

    def counted(self, inputs):
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            return plain(self, inputs)
        finally:
            with lock:
                active[0] -= 1

    gate.execute = counted
    with xgraph.create_graph_runner(_gated_graph(make, 2)) as runner:
        jobs = [runner.execute_async({"x": np.full((1, 4), k, np.float32)}) for k in range(6)]
        assert [runner.wait(j, timeout=2 * WAIT) for j in jobs] == [0] * 6
    assert peak == [1]


# -- pipelining -----------------------------------------------------------------------------------
class PassRunner(Runner):
    """Returns its input; calls `hook(runner, inputs)` first."""

    any_thread = True
    hook = None

    def execute(self, inputs):
        type(self).hook(self, inputs)
        return [inputs[0]]


def test_jobs_pipeline_across_instances(make):
    """Job 1's stage on instance 1 waits until job 2 has started on instance 0: only pipelining allows it."""
    graph = make.place(Graph.from_onnx(make.chain_model(2)), {"op000": "AICORE", "op001": "AICORE"},
                       runner="test_pipe", merge=False)
    first, second = graph.get_root_subgraph().toposort_child_subgraph()
    first.set_attr("instance", 0)
    second.set_attr("instance", 1)
    graph.set_attr("compile_options", json.dumps({"devices": {"AICORE": {"instances": 2}}}))  # as a compile records
    second_job_on_0, seen_on_1 = threading.Event(), []

    def hook(runner, inputs):
        value = float(inputs[0].flat[0])
        if runner.subgraph is first and value == 2:
            second_job_on_0.set()
        if runner.subgraph is second and value == 1:
            seen_on_1.append(second_job_on_0.wait(WAIT))

    xgraph.register_runner("test_pipe", type("Pipe", (PassRunner,), {"hook": staticmethod(hook)}))
    with xgraph.create_graph_runner(graph) as runner:
        assert runner.plan.streams() == ["H2D:0", "AICORE:0", "D2D:0>1", "AICORE:1", "D2H:1"]
        jobs = [runner.execute_async({"x": np.full((1, 4), v, np.float32)}) for v in (1, 2)]
        assert [runner.wait(j, timeout=2 * WAIT) for j in jobs] == [0, 0]
        assert [float(runner.get_outputs(j)[0][0, 0]) for j in jobs] == [1.0, 2.0]
        assert runner.get_stats()["copies"]["count"] == 2 * xgraph.report(graph)["copies_per_run"]["total"] == 6
    assert seen_on_1 == [True]


def test_recorded_settings_of_a_device_the_table_lacks_are_left_out(compiled):
    from xgraph.devices import get_devices
    from xgraph.devices.settings import compiled_devices
    graph = compiled["two"].copy()
    graph.set_attr("compile_options", json.dumps({"devices": {"AICORE": {"instances": 2}, "SMFC": {"instances": 3}}}))
    table = compiled_devices(graph, get_devices())
    assert "SMFC" not in table and table["AICORE"].instances == 2 and table["AICPU"].instances == 2
    graph.set_attr("compile_options", "{")
    with pytest.raises(xgraph.XGraphError, match="compile_options"):
        compiled_devices(graph, get_devices())
