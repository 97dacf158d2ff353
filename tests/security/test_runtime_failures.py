"""Runners that misbehave cannot hang or kill the runtime, results do not pile up, and graphs
with nothing to run still run. Every wait is bounded; nothing is timed."""
from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import RunnerError
from xgraph.runners import jobs as jobs_module
from xgraph.runners.device_runners import CPURunner
from xgraph.runners.jobs import JobStatus

from tests.security.test_limits import BOUND, chain, x_of

#: What the executor's buffer frames may still hold of finished runs: a few frames, never one per job.
FEW = 8


class Exit(BaseException):
    """A BaseException that is neither Exception nor KeyboardInterrupt (like GeneratorExit or a library's own)."""


RAISES = {"SystemExit": lambda: SystemExit(3), "BaseException": lambda: Exit("custom"),
          "ValueError": lambda: ValueError("bad value")}


def with_cpu_runner(klass, name: str):
    """The chain graph whose CPU subgraph runs `klass`, registered as `name`."""
    xgraph.register_runner(name, klass)
    graph = chain()
    for child in graph.get_root_subgraph().get_children():
        if child.get_attr("device") == "CPU":
            child.set_attr("runner", {"run": name})
    return graph


def hostile_graph(kind: str):
    """The chain graph whose CPU subgraph raises `kind` when its input (the Relu output) starts with 0 or less."""
    class Raising(CPURunner):
        def execute(self, inputs):
            if inputs[0].flat[0] <= 0:
                raise RAISES[kind]()
            return super().execute(inputs)
    return with_cpu_runner(Raising, f"test_raising_{kind}_{id(Raising)}")


@pytest.mark.parametrize("kind", sorted(RAISES))
def test_a_raising_runner_fails_its_job_and_the_stream_keeps_serving(kind):
    with xgraph.create_graph_runner(hostile_graph(kind)) as runner:
        for _ in range(3):  # the same stream, again and again: it must still be alive
            bad = runner.execute_async({"x": x_of(-1.0)})
            assert runner.wait(bad, timeout=BOUND) == JobStatus.FAILED
            error = runner.get_error(bad)
            assert isinstance(error, RunnerError) and type(RAISES[kind]()).__name__ in str(error), error
            with pytest.raises(RunnerError):
                runner.run({"x": x_of(-2.0)})
            (y,) = runner.run({"x": x_of(2.0)})
            np.testing.assert_array_equal(y, -np.maximum(x_of(2.0), 0))


@pytest.mark.parametrize("kind", sorted(RAISES))
def test_a_single_runner_wraps_what_execute_raises(kind):
    graph = hostile_graph(kind)
    cpu = next(c for c in graph.get_root_subgraph().get_children() if c.get_attr("device") == "CPU")
    with xgraph.Runner.create_runner(cpu) as runner:
        with pytest.raises(RunnerError) as e:
            runner.run([x_of(-1.0)])
        assert cpu.name in str(e.value) and "Raising" in str(e.value)
        out = np.empty((1, 4), np.float32)
        job = runner.execute_async([x_of(-1.0)], [out])
        assert runner.wait(job, timeout=BOUND) == JobStatus.FAILED
        job = runner.execute_async([x_of(3.0)], [out])
        assert runner.wait(job, timeout=BOUND) == 0  # the worker thread survived
        np.testing.assert_array_equal(out, -x_of(3.0))


STARTS = {**RAISES, "GeneratorExit": lambda: GeneratorExit("closed"), "KeyboardInterrupt": lambda: KeyboardInterrupt()}


@pytest.mark.parametrize("kind", sorted(STARTS))
def test_a_runner_that_raises_while_starting_is_a_runner_error_naming_it(kind):
    class Refusing(CPURunner):
        def __init__(self, subgraph, mode="run", **kwargs):
            raise STARTS[kind]()
    graph = with_cpu_runner(Refusing, f"test_refusing_{kind}")
    if kind == "KeyboardInterrupt":  # Ctrl-C is the user's, not the runner's: it goes through
        with pytest.raises(KeyboardInterrupt):
            xgraph.create_graph_runner(graph)
        return
    with pytest.raises(RunnerError, match=rf"subgraph 'subgraph_neg' \(device CPU\): runner 'test_refusing_{kind}' "
                                          rf"\(Refusing\) failed to start in mode 'run': {type(STARTS[kind]()).__name__}"):
        xgraph.create_graph_runner(graph)


@pytest.mark.parametrize("kind", sorted(RAISES))
def test_a_runner_that_raises_while_releasing_is_a_runner_error_and_the_others_still_close(kind):
    released = []

    class Leaving(CPURunner):
        def release(self):
            released.append(self.subgraph.name)
            raise RAISES[kind]()
    runner = xgraph.create_graph_runner(with_cpu_runner(Leaving, f"test_leaving_{kind}"))
    runner.run({"x": x_of(1.0)})
    with pytest.raises(RunnerError, match=rf"Leaving for subgraph 'subgraph_neg'.*release\(\) failed while closing: "
                                          rf"{type(RAISES[kind]()).__name__}"):
        runner.close()
    assert released == ["subgraph_neg"]
    with pytest.raises(RunnerError, match="closed"):
        runner.run({"x": x_of(1.0)})


def test_results_are_released_once_collected():
    with xgraph.create_graph_runner(chain((256, 1024))) as runner:  # 1 MiB outputs
        refs = []
        for k in range(40):
            job = runner.execute_async({"x": x_of(float(k), (256, 1024))})
            assert runner.wait(job, timeout=BOUND) == 0
            (y,) = runner.get_outputs(job)
            assert y[0, 0] == -k
            refs.append(weakref.ref(y))
            del y
            with pytest.raises(RunnerError, match="already collected"):
                runner.get_outputs(job)
        gc.collect()
        # the job records keep none of them; only the executor's buffer frames may (a fixed few)
        assert sum(r() is not None for r in refs) <= FEW < len(refs)


def test_uncollected_results_are_bounded_in_bytes(monkeypatch):
    monkeypatch.setattr(jobs_module, "MAX_KEPT_RESULT_BYTES", 4 << 20)
    with xgraph.create_graph_runner(chain((256, 1024))) as runner:
        submitted = []
        for k in range(12):
            job = runner.execute_async({"x": x_of(float(k), (256, 1024))})
            assert runner.wait(job, timeout=BOUND) == 0
            submitted.append(job)
        kept = [j for j in submitted[-4:]]
        for k, job in zip(range(8, 12), kept):  # the newest 4 MiB are still there
            assert runner.get_outputs(job)[0][0, 0] == -k
        with pytest.raises(RunnerError, match="dropped"):
            runner.get_outputs(submitted[0])
        assert runner.get_error(submitted[0]) is None and runner.wait(submitted[0]) == 0  # status still known


def _noop_model():
    vi = helper.make_tensor_value_info
    w = numpy_helper.from_array(np.array([1.5, -2.0], np.float32), "w")
    graph = helper.make_graph([], "noop", [vi("x", TensorProto.FLOAT, [2])],
                              [vi("x", TensorProto.FLOAT, [2]), vi("w", TensorProto.FLOAT, [2])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_compiled_graph_without_ops_runs(tmp_path):
    compiled = xgraph.compile(_noop_model().SerializeToString())
    compiled.serialize(tmp_path / "noop.xmodel")
    x = np.array([3.0, 4.0], np.float32)
    for graph in (compiled, xgraph.load(tmp_path / "noop.xmodel")):
        with xgraph.create_graph_runner(graph) as runner:
            got_x, got_w = runner.run({"x": x})
            np.testing.assert_array_equal(got_x, x)
            np.testing.assert_array_equal(got_w, [1.5, -2.0])
            job = runner.execute_async({"x": x})
            assert runner.wait(job, timeout=BOUND) == 0
            np.testing.assert_array_equal(runner.get_outputs(job)[1], [1.5, -2.0])


def test_an_uncompiled_graph_with_ops_still_says_compile_first():
    graph = chain()
    fresh = xgraph.Graph.from_onnx(graph.to_onnx())
    with pytest.raises(xgraph.XGraphError, match="compile it first"):
        xgraph.create_graph_runner(fresh)
