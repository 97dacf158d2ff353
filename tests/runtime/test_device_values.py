"""Values kept on the device between runs (`keep_on_device`, `DeviceValue`: xgraph/runners/device_values.py).

The sample decoder (AI Core and AI CPU alternating, both in device memory) is the model: its
presents kept on the device and fed back as pasts must give onnxruntime's tokens while the cache
is never copied (asserted on `get_stats()["copies"]`), a handle must say its shape and dtype,
copy to the host only through `.numpy()` (counted), and be refused by another runner and after
its runner closed.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import xgraph
from xgraph.errors import RunnerError
from xgraph.runners import DeviceValue
from testing.runtime import load_script

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "generate"
PASTS = [f"past_l{i}_{kv}" for i in range(2) for kv in "kv"]
PRESENTS = ["present" + p[len("past"):] for p in PASTS]


@pytest.fixture(scope="module")
def gen():
    return load_script(SAMPLE / "generate.py", "generate_device_values")


@pytest.fixture(scope="module")
def compiled(gen):
    return xgraph.compile(SAMPLE / "decoder.onnx", gen.cache_shape_option())


@pytest.fixture(scope="module")
def session():
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(SAMPLE / "decoder.onnx"), so)


def _feeds(position: int, past: int | None = None, token: int = 5) -> dict:
    rng = np.random.default_rng(position)
    past = position if past is None else past
    feeds = {"input_ids": np.array([[token]], np.int64), "position_ids": np.array([[position]], np.int64)}
    feeds.update({p: rng.standard_normal((1, 4, past, 8)).astype(np.float32) for p in PASTS})
    return feeds


def _names(graph) -> list[str]:
    return [t.name for t in graph.get_output_tensors()]


@pytest.mark.parametrize("kernels", ["numpy", "auto"])
def test_kept_presents_round_trip_and_equal_a_plain_run(compiled, kernels):
    names = _names(compiled)
    with xgraph.create_graph_runner(compiled, kernels=kernels) as runner:
        plain = dict(zip(names, runner.run(_feeds(3))))
        kept = dict(zip(names, runner.run(_feeds(3), keep_on_device=PRESENTS)))
        assert type(kept["logits"]) is np.ndarray  # not kept: a host array as always
        np.testing.assert_array_equal(kept["logits"], plain["logits"])
        for name in PRESENTS:
            value = kept[name]
            assert type(value) is DeviceValue and value.memory == "device"
            assert value.shape == plain[name].shape == (1, 4, 4, 8) and value.dtype == np.float32
            before = runner.get_stats()["copies"]
            host = value.numpy()
            after = runner.get_stats()["copies"]
            np.testing.assert_array_equal(host, plain[name])
            assert after["count"] == before["count"] + 1 and after["bytes"] == before["bytes"] + host.nbytes
            host[...] = 0  # the host copy is the caller's: the value on the device is untouched
            np.testing.assert_array_equal(value.numpy(), plain[name])


def test_a_device_value_is_never_turned_into_an_array_implicitly(compiled):
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        value = runner.run(_feeds(1), keep_on_device=["present_l0_k"])[1]
        with pytest.raises(RunnerError, match=r"present_l0_k.*never copied implicitly.*\.numpy\(\)"):
            np.asarray(value)
        with pytest.raises(RunnerError, match="never copied implicitly"):
            np.add(value, 1)
        with pytest.raises(TypeError):
            value + 1


def test_a_decoder_step_with_the_cache_on_the_device_copies_no_cache(compiled):
    names = _names(compiled)
    with xgraph.create_graph_runner(compiled, kernels="auto") as runner:
        out = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        pasts = {"past" + n[len("present"):]: out[n] for n in PRESENTS}
        before = runner.get_stats()["copies"]
        step = {"input_ids": np.array([[7]], np.int64), "position_ids": np.array([[3]], np.int64), **pasts}
        out = dict(zip(names, runner.run(step, keep_on_device=PRESENTS)))
        after = runner.get_stats()["copies"]
        # only input_ids and position_ids go in and logits comes out: 0 of the 8 cache copies
        assert after["count"] - before["count"] == 3
        assert after["bytes"] - before["bytes"] == 2 * 8 + out["logits"].nbytes
        assert after["saved"] - before["saved"] == 8
        assert after["saved_bytes"] - before["saved_bytes"] == sum(v.nbytes for v in pasts.values()) + \
            sum(out[n].nbytes for n in PRESENTS)
        # the same step with the cache as host arrays copies all of it, each way
        host = {k: v.numpy() for k, v in pasts.items()}
        before = runner.get_stats()["copies"]
        runner.run({**step, **host})
        assert runner.get_stats()["copies"]["count"] - before["count"] == 3 + 8


@pytest.mark.parametrize("kernels, options", [("numpy", {}), ("auto", {}),
                                              ("auto", {"job_timeout": 60.0})])  # through the streams
def test_greedy_generation_with_the_cache_on_the_device_equals_onnxruntime(gen, compiled, session, kernels, options):
    names = _names(compiled)
    prompt = [3, 17, 42]
    expected = gen.greedy(lambda feeds: session.run(names, dict(feeds)), names, prompt, 12)
    with xgraph.create_graph_runner(compiled, kernels=kernels, **options) as runner:
        got = gen.greedy(gen.device_step(runner, names), names, prompt, 12)
        copies = runner.get_stats()["copies"]
    assert got == expected and len(set(got)) > 1
    steps = len(prompt) + 11
    # the first step's empty pasts go in from the host; after that only the token, position and logits
    assert copies["count"] == 3 * steps + len(PASTS)
    assert copies["saved"] == 2 * len(PASTS) * steps - len(PASTS)


def test_async_jobs_take_and_keep_device_values(compiled):
    names = _names(compiled)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        first = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        feeds = {"input_ids": np.array([[7]], np.int64), "position_ids": np.array([[3]], np.int64),
                 **{"past" + n[len("present"):]: first[n] for n in PRESENTS}}
        job = runner.execute_async(feeds, keep_on_device=["present_l1_v"])
        assert runner.wait(job, timeout=60) == 0
        outs = dict(zip(names, runner.get_outputs(job)))
        assert type(outs["present_l1_v"]) is DeviceValue and type(outs["present_l0_k"]) is np.ndarray
        expected = dict(zip(names, runner.run({**feeds, **{k: v.numpy() for k, v in feeds.items()
                                                            if type(v) is DeviceValue}})))
        np.testing.assert_array_equal(outs["present_l1_v"].numpy(), expected["present_l1_v"])
        # DeviceValue inputs with preallocated outputs: filled in place
        buffers = [np.empty_like(v) for v in expected.values()]
        assert runner.wait(runner.execute_async(feeds, buffers), timeout=60) == 0
        np.testing.assert_array_equal(buffers[0], expected["logits"])
        with pytest.raises(RunnerError, match="'present_l0_k' cannot both stay on the device"):
            runner.execute_async(feeds, buffers, keep_on_device=["present_l0_k"])


def test_device_values_are_refused_by_another_runner_and_after_close(compiled):
    names = _names(compiled)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as other:
        runner = xgraph.create_graph_runner(compiled, kernels="numpy")
        out = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        feeds = {"input_ids": np.array([[7]], np.int64), "position_ids": np.array([[3]], np.int64),
                 **{"past" + n[len("present"):]: out[n] for n in PRESENTS}}
        before = other.get_stats()
        with pytest.raises(RunnerError, match=r"input 'past_l0_k'.*belongs to another runner.*\.numpy\(\)"):
            other.run(feeds)
        with pytest.raises(RunnerError, match="belongs to another runner"):
            other.execute_async(feeds)
        assert other.get_stats()["jobs"] == before["jobs"]  # refused before any job started
        runner.close()
        with pytest.raises(RunnerError, match="runner is closed"):
            runner.run(feeds)
        for call in (lambda: out["present_l0_k"].numpy(), lambda: other.run(feeds)):
            with pytest.raises(RunnerError, match="(freed when its runner closed|belongs to another runner)"):
                call()
        with pytest.raises(RunnerError, match="freed when its runner closed"):
            out["present_l0_k"].numpy()


def test_keep_on_device_names_only_outputs(compiled):
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        with pytest.raises(RunnerError, match="keep_on_device names 'past_l0_k', which is not an output; "
                                              "the outputs are: logits, present_l0_k"):
            runner.run(_feeds(1), keep_on_device=["past_l0_k"])
        with pytest.raises(RunnerError, match="keep_on_device must be a list of output names"):
            runner.run(_feeds(1), keep_on_device="present_l0_k")
        with pytest.raises(RunnerError, match=r"keep_on_device names \['present_l0_k'\], which is not an output"):
            runner.run(_feeds(1), keep_on_device=[["present_l0_k"]])
        assert runner.get_stats()["jobs"]["OK"] == 0


def test_a_device_value_of_the_wrong_shape_is_refused_as_an_array_would_be(compiled):
    names = _names(compiled)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        out = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        feeds = dict(_feeds(3), past_l0_k=out["present_l0_k"], past_l0_v=out["logits"])
        with pytest.raises(RunnerError, match="past_l0_v"):
            runner.run(feeds)


def test_past_length_gears_pass_the_cache_from_gear_to_gear(gen, session):
    steps = 6
    graph = xgraph.compile(SAMPLE / "decoder.onnx", gen.gear_options(range(steps)))
    names = _names(graph)
    expected = gen.greedy(lambda feeds: session.run(names, dict(feeds)), names, [3], steps)
    with xgraph.create_graph_runner(graph, kernels="auto") as runner:
        got = gen.greedy(functools.partial(runner.run, keep_on_device=PRESENTS), names, [3], steps)
        stats = runner.get_stats()["copies"]
    assert got == expected
    assert stats["saved"] == 2 * len(PASTS) * steps - len(PASTS)


@pytest.mark.parametrize("kernels", ["numpy", "onnxruntime"])
def test_a_one_device_model_keeping_an_output_runs_as_the_general_loop_does(make, kernels):
    """A plan of one subgraph runs as straight-line code (`inline.Chain`), also when it reads a value
    kept on the device beside its copied inputs and leaves a result uncopied; the oracle is the
    general loop over the same steps (a runner with profile=True records spans, so it takes that loop)."""
    graph = xgraph.compile(make.small_cnn(), {})
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    names = _names(graph)
    with xgraph.create_graph_runner(graph, kernels=kernels) as fast, \
            xgraph.create_graph_runner(graph, kernels=kernels, profile=True) as general:
        plain = fast.run({"x": x})
        for runner in (fast, general):
            for _ in range(2):
                got = dict(zip(names, runner.run({"x": x}, keep_on_device=["logits"])))
                assert type(got["logits"]) is DeviceValue and type(got["prob"]) is np.ndarray
                np.testing.assert_array_equal(got["logits"].numpy(), plain[names.index("logits")])
                np.testing.assert_array_equal(got["prob"], plain[names.index("prob")])
        fast_copies, general_copies = fast.get_stats()["copies"], general.get_stats()["copies"]
        # fast: 3 copies in its plain run; then per kept run x in and prob out, plus logits' .numpy()
        assert fast_copies["count"] - 3 == general_copies["count"] == 2 * (2 + 1)
        assert fast_copies["saved"] == general_copies["saved"] == 2


def test_handles_fed_in_a_list_run_as_in_a_dict_and_stay_checked(compiled):
    """Feeds of exactly the inputs are bound as a list in input order (a dict of their names or a list);
    a handle among feeds that are not exactly the inputs still leaves the input check to name the fault."""
    names = _names(compiled)
    inputs = [t.name for t in compiled.get_input_tensors()]
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        out = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        feeds = {"input_ids": np.array([[7]], np.int64), "position_ids": np.array([[2]], np.int64),
                 **{"past" + n[len("present"):]: out[n] for n in PRESENTS}}
        by_name = runner.run(feeds, keep_on_device=PRESENTS)
        in_order = runner.run([feeds[n] for n in inputs], keep_on_device=PRESENTS)
        host = runner.run({k: v.numpy() if type(v) is DeviceValue else v for k, v in feeds.items()})
        for a, b, c in zip(by_name, in_order, host):
            a, b = (v.numpy() if type(v) is DeviceValue else v for v in (a, b))
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, c)
        with pytest.raises(RunnerError, match="unknown input 'past_l9_k'"):
            runner.run(dict(feeds, past_l9_k=out["present_l0_k"]), keep_on_device=PRESENTS)
        with pytest.raises(RunnerError, match="expected 6 inputs"):
            runner.run([feeds[n] for n in inputs] + [out["present_l0_k"]])
        # a handle of the right runner but the wrong shape for its input, after runs that passed
        logits = runner.run(feeds, keep_on_device=["logits"])[0]
        with pytest.raises(RunnerError, match="input 'past_l1_v' must have shape"):
            runner.run(dict(feeds, past_l1_v=logits), keep_on_device=PRESENTS)


def test_counts_stay_exact_over_many_runs(compiled):
    """Jobs, copies and saved copies are recorded per run and folded when read (`GraphCounts`):
    the totals over more runs than a fold holds are each run's counts times the runs."""
    names = _names(compiled)
    runs = 300  # more than `run_stats.FOLD_EVERY` records
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        out = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        feeds = {"input_ids": np.array([[7]], np.int64), "position_ids": np.array([[2]], np.int64),
                 **{"past" + n[len("present"):]: out[n] for n in PRESENTS}}
        before = runner.get_stats()
        for _ in range(runs):
            last = dict(zip(names, runner.run(feeds, keep_on_device=PRESENTS)))
        host = last["present_l0_k"].numpy()
        after = runner.get_stats()
    assert after["jobs"]["OK"] - before["jobs"]["OK"] == runs
    copies = {k: after["copies"][k] - before["copies"][k] for k in after["copies"]}
    assert copies["count"] == 3 * runs + 1  # token, position and logits per run, and the .numpy()
    assert copies["bytes"] == (2 * 8 + last["logits"].nbytes) * runs + host.nbytes
    assert copies["saved"] == 8 * runs
    assert copies["saved_bytes"] == runs * (sum(v.nbytes for k, v in feeds.items() if k.startswith("past_")) +
                                            sum(last[n].nbytes for n in PRESENTS))


def test_another_runners_handles_are_refused_after_this_runner_ran_the_same_binding(compiled):
    """A run fed handles finds its binding by the outputs they were kept from (`KeptOutput`), and the
    handles' memory is checked when a binding is made: handles of another runner of the same graph,
    alike in names, memories and shapes, never find this runner's binding."""
    names = _names(compiled)

    def step(runner, out):
        return {"input_ids": np.array([[7]], np.int64), "position_ids": np.array([[2]], np.int64),
                **{"past" + n[len("present"):]: out[n] for n in PRESENTS}}

    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner, \
            xgraph.create_graph_runner(compiled, kernels="numpy") as other:
        mine = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        for _ in range(2):  # the binding of handles kept by this runner, made then found
            runner.run(step(runner, mine), keep_on_device=PRESENTS)
        theirs = dict(zip(names, other.run(_feeds(2), keep_on_device=PRESENTS)))
        jobs = runner.get_stats()["jobs"]
        with pytest.raises(RunnerError, match=r"input 'past_l0_k': DeviceValue 'present_l0_k' belongs to another"):
            runner.run(step(other, theirs), keep_on_device=PRESENTS)
        mixed = dict(step(runner, mine), past_l1_v=theirs["present_l1_v"])
        with pytest.raises(RunnerError, match=r"input 'past_l1_v': DeviceValue 'present_l1_v' belongs to another"):
            runner.run(mixed, keep_on_device=PRESENTS)
        assert runner.get_stats()["jobs"] == jobs
        other.close()
        with pytest.raises(RunnerError, match="belongs to another runner"):
            runner.run(step(other, theirs), keep_on_device=PRESENTS)
        runner.run(step(runner, mine), keep_on_device=PRESENTS)  # its own handles still run


def test_handles_of_outputs_that_fit_their_inputs_skip_the_check_and_the_rest_is_checked(compiled):
    """A present passed its result check against a declaration that fits its past (`fits_input`), so a
    run fed presents checks only its other inputs (`InputCheck.trusting`); those are refused or
    converted as in any run, and a handle of an output that does not fit (the logits) is checked."""
    from xgraph.runners.io_checks import fits_input
    names = _names(compiled)
    outputs = {t.name: t for t in compiled.get_output_tensors()}
    inputs = {t.name: t for t in compiled.get_input_tensors()}
    assert all(fits_input(outputs[n], inputs["past" + n[len("present"):]]) for n in PRESENTS)
    assert not fits_input(outputs["logits"], inputs["past_l0_k"])
    assert not fits_input(outputs["present_l0_k"], inputs["input_ids"])  # another dtype and rank
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        out = dict(zip(names, runner.run(_feeds(2), keep_on_device=PRESENTS)))
        feeds = {"input_ids": np.array([[7]], np.int64), "position_ids": np.array([[2]], np.int64),
                 **{"past" + n[len("present"):]: out[n] for n in PRESENTS}}
        expected = runner.run({k: v.numpy() if type(v) is DeviceValue else v for k, v in feeds.items()})[0]
        np.testing.assert_array_equal(runner.run(feeds, keep_on_device=PRESENTS)[0], expected)
        (binding,) = [b for b in runner._bindings._found.values() if b.check is not runner._check_inputs]
        values, found, _ = runner._bindings.bind(feeds, PRESENTS)  # the handles unwrapped, in input order
        assert found is binding and binding.check(values) is values  # passed as they are
        with pytest.raises(RunnerError, match="input 'input_ids' must be int64, got float32"):
            runner.run(dict(feeds, input_ids=np.array([[7]], np.float32)), keep_on_device=PRESENTS)
        with pytest.raises(RunnerError, match=r"input 'position_ids' must have shape \(1, 1\)"):
            runner.run(dict(feeds, position_ids=np.array([2], np.int64)), keep_on_device=PRESENTS)
        converted = runner.run(dict(feeds, position_ids=[[2]]), keep_on_device=PRESENTS)[0]
        np.testing.assert_array_equal(converted, expected)  # a nested list, converted as any run converts it
        logits = runner.run(feeds, keep_on_device=["logits"] + PRESENTS)[0]
        with pytest.raises(RunnerError, match="input 'past_l0_k' must have shape"):
            runner.run(dict(feeds, past_l0_k=logits), keep_on_device=PRESENTS)
