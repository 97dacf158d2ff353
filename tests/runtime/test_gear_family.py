"""One shared runner for the gears of a model that are one onnxruntime session (xgraph/runners/gears.py).

The oracle is onnxruntime on the original model, and each gear's own runner: the shared runner
must give the same tokens, accept exactly what the gears accept, refuse what they refuse with
the same messages, check results against the gear the inputs belong to, and hand the gears back
to their own runners when onnxruntime fails a run.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xgraph
from xgraph.errors import KernelError, RunnerError
from testing.runtime import load_script

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 10
PASTS = [f"past_l{i}_{kv}" for i in range(2) for kv in "kv"]


def _module(name: str, path: str):
    return load_script(ROOT / path, name)


@pytest.fixture(scope="module")
def decoder():
    model = _module("gear_family_model", "samples/generate/make_model.py").gpt2_like(past=True)
    options = {"input_shape": "input_ids:1,1;position_ids:1,1;" + ";".join(f"{p}:1,4,-1,8" for p in PASTS),
               "dynamic_dims": ";".join(",".join([str(n)] * len(PASTS)) for n in range(TOKENS))}
    return model, xgraph.compile(model, options)


def _feeds(past: int, token: int = 5, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": np.array([[token]], np.int64), "position_ids": np.array([[past]], np.int64)}
    feeds.update({p: rng.standard_normal((1, 4, past, 8)).astype(np.float32) for p in PASTS})
    return feeds


def _greedy(step, names, tokens=TOKENS):
    past = {p: np.zeros((1, 4, 0, 8), np.float32) for p in PASTS}
    token, generated = 0, []
    for position in range(tokens):
        out = dict(zip(names, step({"input_ids": np.array([[token]]), "position_ids": np.array([[position]]), **past})))
        past = {"past" + k[len("present"):]: v for k, v in out.items() if k.startswith("present")}
        token = int(np.argmax(out["logits"][0, -1]))
        generated.append(token)
    return generated


def test_past_length_gears_share_one_runner_and_generate_as_onnxruntime(decoder):
    import onnxruntime as ort
    model, g = decoder
    names = [t.name for t in g.get_output_tensors()]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = _greedy(lambda feeds: session.run(names, feeds), names)
    assert len(set(expected)) > 1
    with xgraph.create_graph_runner(g) as runner:
        assert runner.shared is not None
        assert _greedy(runner.run, names) == expected
        stats = runner.get_stats()
        assert stats["shared"]["jobs"]["OK"] == TOKENS and stats["jobs"]["OK"] == TOKENS
        assert all(s["jobs"]["OK"] == 0 for s in stats["gears"].values())  # the gears' own runners stayed idle
        (shared,) = [v for k, v in stats["subgraphs"].items() if k.startswith("shared/")]
        assert shared["runs"] == TOKENS
        # one onnxruntime session for every gear and for the shared runner
        assert len({id(r._executor._backend._session) for r in runner.runners.values()}) == 1
        # async jobs still go to each gear's own runner (preallocated outputs have that gear's shapes)
        job = runner.execute_async(_feeds(3))
        assert runner.wait(job, timeout=60) == 0
        np.testing.assert_array_equal(runner.get_outputs(job)[0], runner.run(_feeds(3))[0])
        assert runner.get_stats()["gears"]["gear3"]["jobs"]["OK"] == 1


def test_the_shared_runner_accepts_and_refuses_what_the_gears_do(decoder):
    _, g = decoder
    with xgraph.create_graph_runner(g) as shared, xgraph.create_graph_runner(g) as own:
        own.shared = None  # every run on its gear's own runner: the oracle
        feeds = _feeds(4, seed=1)
        for a, b in zip(shared.run(feeds), own.run(feeds)):
            np.testing.assert_array_equal(a, b)
        as_lists = {**feeds, "input_ids": [[5]], "position_ids": [[4]]}  # converted by the gear's own check
        np.testing.assert_array_equal(shared.run(as_lists)[0], own.run(feeds)[0])
        in_order = [feeds[t.name] for t in shared.get_input_tensors()]
        np.testing.assert_array_equal(shared.run(in_order)[0], own.run(feeds)[0])
        wrong = [
            {**feeds, "input_ids": feeds["input_ids"].astype(np.int32)},        # dtype
            {**feeds, "past_l0_k": np.zeros((1, 4, 5, 8), np.float32)},         # no gear has these shapes
            {**feeds, "past_l0_k": np.zeros((1, 4, TOKENS, 8), np.float32)},   # past the last gear
            {k: v for k, v in feeds.items() if k != "past_l1_v"},                # missing input
            {**feeds, "extra": np.zeros(1)},                                     # unknown input
            in_order[:-1],                                                       # too few
        ]
        for bad in wrong:
            with pytest.raises(RunnerError) as by_shared:
                shared.run(bad)
            with pytest.raises(RunnerError) as by_own:
                own.run(bad)
            assert str(by_shared.value) == str(by_own.value)
        assert shared.shared is not None  # refused inputs do not give the gears back


def test_results_are_checked_against_the_gear_the_inputs_belong_to(decoder, monkeypatch):
    _, g = decoder
    with xgraph.create_graph_runner(g) as runner:
        (device_runner,) = runner.shared.runners.values()
        backend = device_runner._executor._backend
        real = backend._run

        def present_of_gear_2(names, feeds, options):  # right for gear 2 only
            out = real(names, feeds, options)
            return [np.zeros((1, 4, 3, 8), np.float32) if n == "present_l0_k" else v for n, v in zip(names, out)]

        monkeypatch.setattr(backend, "_run", present_of_gear_2)
        runner.run(_feeds(2))  # gear 2's presents have past length 3: the check passes
        with pytest.raises(RunnerError, match=r"output 'present_l0_k' must be float32 of shape \(1, 4, 6, 8\), "
                                              r"got float32 of shape \(1, 4, 3, 8\)"):
            runner.run(_feeds(5))
        assert runner.shared is not None  # a wrong result fails the job; it is not onnxruntime failing


def test_a_failed_onnxruntime_run_gives_the_gears_back_to_their_own_runners(decoder, monkeypatch):
    _, g = decoder
    with xgraph.create_graph_runner(g) as runner:
        expected = runner.run(_feeds(6))
        shared = runner.shared
        (device_runner,) = shared.runners.values()
        backend = device_runner._executor._backend

        def fails(*_args):
            raise RuntimeError("simulated kernel failure")

        monkeypatch.setattr(backend, "_run", fails)
        with pytest.raises(KernelError, match="simulated kernel failure"):
            shared.run(_feeds(6))  # the shared runner itself never re-plans for gear 0's shapes
        got = runner.run(_feeds(6))  # the gear runner catches it and runs the gear on its own runner
        assert runner.shared is None
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
        stats = runner.get_stats()
        assert stats["gears"]["gear6"]["jobs"]["OK"] == 1
        # the closed shared runner's jobs still count: the first run, and the two onnxruntime failed
        assert stats["shared"]["jobs"]["OK"] == 1 and stats["shared"]["jobs"]["FAILED"] == 2
        assert stats["jobs"]["OK"] == 2 and stats["jobs"]["FAILED"] == 2
        assert not [k for k in runner.runners if k.startswith("shared/")]


def test_gears_that_are_not_one_session_or_are_profiled_keep_their_own_runners(decoder):
    _, g = decoder
    with xgraph.create_graph_runner(g, profile=True) as runner:
        assert runner.shared is None
        runner.run(_feeds(1))
        assert runner.get_stats()["gears"]["gear1"]["jobs"]["OK"] == 1
    with xgraph.create_graph_runner(g, kernels="numpy") as runner:  # no onnxruntime session at all
        assert runner.shared is None
    # AI Core | AI CPU (int64 Neg) | AI Core: three subgraphs per gear
    sandwich = _module("gear_family_sandwich", "tests/compile/conftest.py").sandwich(["Neg"])
    for value in (*sandwich.graph.input, *sandwich.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "n"
    gears = xgraph.compile(sandwich, {"input_shape": "x:-1,16", "dynamic_batch_size": "1,2"})
    assert all(gear.graph.get_root_subgraph().get_children_num() == 3 for gear in gears.get_gears())
    with xgraph.create_graph_runner(gears) as runner:  # several subgraphs per gear: each gear's own plan
        assert runner.shared is None
        runner.run({"x": np.ones((1, 16), np.float32)})
        assert runner.get_stats()["gears"]["gear0"]["jobs"]["OK"] == 1


@pytest.mark.parametrize("shapes", [
    [(1, 8), (1, 16), (1, 32)],                    # one input tells the gears apart: found by its shape
    [((1, 1), (1, 1)), ((1, 1), (1, 2)), ((1, 2), (1, 1))],  # no single input does: the whole signature
])
def test_the_gear_result_check_finds_each_gears_check(shapes):
    from xgraph.runners.gears import GearResults
    from xgraph.runners.result_check import ResultCheck
    f32 = np.dtype(np.float32)
    gears = [s if isinstance(s[0], tuple) else (s, (1, 1)) for s in shapes]
    checks = {tuple((f32, shape) for shape in gear): ResultCheck(f"gear {i}", [("y", f32, (i + 1, 3))], [])
              for i, gear in enumerate(gears)}
    results = GearResults(checks, next(iter(checks.values())))
    assert (results.at is None) == isinstance(shapes[0][0], tuple)
    for i, gear in enumerate(gears):
        inputs = [np.zeros(shape, np.float32) for shape in gear]
        results(inputs, [np.zeros((i + 1, 3), np.float32)])  # this gear's output shape passes
        with pytest.raises(RunnerError, match=rf"gear {i}: output 'y' must be float32 of shape \({i + 1}, 3\)"):
            results(inputs, [np.zeros((i + 2, 3), np.float32)])  # the next gear's does not
        with pytest.raises(RunnerError, match=rf"gear {i}: output 'y' must be float32"):
            results(inputs, [np.zeros((i + 1, 3), np.float64)])
