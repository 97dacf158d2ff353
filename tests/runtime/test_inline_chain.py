"""A plan that is one subgraph between the copies of its inputs and results runs as straight-line
code (`xgraph.runners.inline.Chain`): the oracle is the same runner with the chain turned off, which
runs the general loop over the same steps. Results, copies, job counts, runner stats and errors must
be the same; plans of any other shape must not get a chain. Also the run counters (`RunStats`)
that every subgraph run records."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph import Graph, Runner
from xgraph.errors import RunnerError
from xgraph.runners.run_stats import FOLD_EVERY, RunStats


def _without_chain(runner):
    runner._scheduler._inline.chain = None
    return runner


def _comparable(stats: dict) -> dict:
    """The stats without times (which differ from run to run)."""
    subgraphs = {name: {k: v for k, v in s.items() if not k.endswith("_s")} for name, s in stats["subgraphs"].items()}
    return {"jobs": stats["jobs"], "copies": {k: stats["copies"][k] for k in ("count", "bytes")}, "subgraphs": subgraphs}


@pytest.mark.parametrize("kernels", ["numpy", "onnxruntime"])
def test_a_model_on_one_device_runs_as_a_chain_with_the_general_loops_results_and_stats(make, kernels):
    pytest.importorskip("onnxruntime")
    graph = xgraph.compile(make.small_cnn(), {})
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    with xgraph.create_graph_runner(graph, kernels=kernels) as fast, \
            _without_chain(xgraph.create_graph_runner(graph, kernels=kernels)) as general:
        chain = fast._scheduler._inline.chain
        assert chain is not None and chain.copy_in is not None and chain.copy_out is not None
        for _ in range(3):
            got, want = fast.run({"x": x}), general.run({"x": x})
            assert [t.name for t in fast.get_output_tensors()] == ["prob", "logits"]
            for a, b in zip(got, want):
                np.testing.assert_array_equal(a, b)
        assert _comparable(fast.get_stats()) == _comparable(general.get_stats())
        assert fast.get_stats()["copies"]["count"] == 3 * 3  # x in, prob and logits out


class _Doubler(Runner):
    """y = 2x for each output; raises what `fail` holds when set (an independent oracle)."""

    any_thread = True
    fail: BaseException | None = None

    def execute(self, inputs):
        if type(self).fail is not None:
            raise type(self).fail
        return [inputs[0] * 2 for _ in self.get_output_tensors()]


@pytest.fixture
def doubler():
    cls = type("ChainDoubler", (_Doubler,), {"fail": None})
    xgraph.register_runner("test_chain_doubler", cls)
    return cls


def _placed(make, device: str) -> Graph:
    graph = Graph.from_onnx(make.chain_model(1))
    return make.place(graph, {"op000": device}, runner="test_chain_doubler", merge=False)


def test_a_host_subgraph_is_a_chain_without_copies(make, doubler):
    with xgraph.create_graph_runner(_placed(make, "CPU")) as runner:
        chain = runner._scheduler._inline.chain
        assert chain is not None and chain.copy_in is None and chain.copy_out is None
        np.testing.assert_array_equal(runner.run({"x": np.ones((1, 4), np.float32)})[0], np.full((1, 4), 2, np.float32))
        assert runner.get_stats()["copies"]["count"] == 0 and runner.get_stats()["jobs"]["OK"] == 1


def test_plans_of_another_shape_get_no_chain_and_still_run(make, doubler):
    # y from the subgraph, and x handed back as it came: a result that is no output of the subgraph
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="op000")], "passthrough", [x_info],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]), x_info]),
        opset_imports=[helper.make_opsetid("", 17)])
    passthrough = make.place(Graph.from_onnx(model), {"op000": "AICORE"}, runner="test_chain_doubler", merge=False)
    two = make.place(Graph.from_onnx(make.chain_model(2)), {"op000": "AICORE", "op001": "CPU"},
                     runner="test_chain_doubler", merge=False)
    x = np.full((1, 4), 1.5, np.float32)
    with xgraph.create_graph_runner(passthrough) as runner:
        assert runner._scheduler._inline.chain is None
        y, same = runner.run({"x": x})
        np.testing.assert_array_equal(y, 2 * x)
        np.testing.assert_array_equal(same, x)
    with xgraph.create_graph_runner(two) as runner:
        assert runner._scheduler._inline.chain is None
        np.testing.assert_array_equal(runner.run({"x": x})[0], 4 * x)


@pytest.mark.parametrize("chained", [True, False])
def test_a_failure_in_a_chain_is_counted_and_named_as_in_the_general_loop(make, doubler, chained):
    doubler.fail = ValueError("broken device")
    with xgraph.create_graph_runner(_placed(make, "AICORE")) as runner:
        if not chained:
            _without_chain(runner)
        with pytest.raises(RunnerError, match=r"ChainDoubler.*ValueError: broken device") as caught:
            runner.run({"x": np.ones((1, 4), np.float32)})
        assert isinstance(caught.value.__cause__, ValueError)  # the runner's own exception stays attached
        doubler.fail = None
        np.testing.assert_array_equal(runner.run({"x": np.ones((1, 4), np.float32)})[0], np.full((1, 4), 2, np.float32))
        stats = runner.get_stats()
    assert stats["jobs"]["FAILED"] == 1 and stats["jobs"]["OK"] == 1
    assert stats["copies"]["count"] == 1 + 2  # the failed run's input copy, then the good run's two
    assert list(stats["subgraphs"].values())[0]["failures"] == 1


@pytest.mark.parametrize("chained", [True, False])
def test_ctrl_c_in_a_chain_reaches_the_caller_and_frees_the_slot(make, doubler, chained):
    doubler.fail = KeyboardInterrupt()
    with xgraph.create_graph_runner(_placed(make, "AICORE"), max_jobs_in_flight=1) as runner:
        if not chained:
            _without_chain(runner)
        with pytest.raises(KeyboardInterrupt):
            runner.run({"x": np.ones((1, 4), np.float32)})
        doubler.fail = None
        runner.run({"x": np.ones((1, 4), np.float32)})
        assert runner.get_stats()["jobs"] == {"OK": 1, "FAILED": 1, "CANCELLED": 0, "TIMED_OUT": 0}


@pytest.mark.parametrize("chained", [True, False])
def test_a_run_the_runner_was_closed_under_is_cancelled(make, doubler, chained):
    with xgraph.create_graph_runner(_placed(make, "AICORE")) as runner:
        if not chained:
            _without_chain(runner)
        runner._is_closed = lambda: True  # close() seen by the run, before its subgraph
        with pytest.raises(RunnerError, match=r"job 1 cancelled: the runner was closed"):
            runner.run({"x": np.ones((1, 4), np.float32)})
        assert runner.get_stats()["jobs"]["CANCELLED"] == 1


def test_run_stats_fold_every_record_exactly_also_from_many_threads():
    stats = RunStats()
    per_thread = 3 * FOLD_EVERY + 7

    three, five = np.zeros(3, np.int8), np.zeros(5, np.int8)

    def work() -> None:
        for i in range(per_thread):
            stats.ran(0.5, [three], [five])
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stats.failed()
    snap = stats.snapshot()
    runs = 4 * per_thread
    assert snap == {"runs": runs, "failures": 1, "total_s": 0.5 * runs, "last_s": 0.5,
                    "bytes_in": 3 * runs, "bytes_out": 5 * runs}
    stats.ran(0.25, [np.zeros(1, np.int8)], [np.zeros(1, np.int8)])
    assert stats.snapshot()["last_s"] == 0.25 and stats.snapshot()["runs"] == runs + 1


def test_a_run_records_the_bytes_of_its_arrays_and_of_sequence_values():
    """`RunStats.ran` sums the arrays' bytes in C, and a sequence value's arrays (an empty optional: 0)
    as `nbytes_of` does; records fold as they come due."""
    stats = RunStats()
    a, b = np.zeros(3, np.float32), np.zeros((2, 2), np.int64)
    for _ in range(FOLD_EVERY + 1):
        stats.ran(0.5, [a, b], [b])
    stats.ran(0.25, [a, [a, b], None], [[b, b]])
    snap = stats.snapshot()
    assert snap["runs"] == FOLD_EVERY + 2 and snap["last_s"] == 0.25
    assert snap["bytes_in"] == (FOLD_EVERY + 1) * 44 + 12 + 44 and snap["bytes_out"] == (FOLD_EVERY + 1) * 32 + 64
