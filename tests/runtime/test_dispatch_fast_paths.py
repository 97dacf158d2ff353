"""The per-run fast paths of a synchronous `GraphRunner.run`: copies on one stream run as one step
(`xgraph.runners.inline.CopyRun`) and inputs are checked by a precomputed `InputCheck`. Each gives
what the general path gives: the same results, copy counts and bytes, spans and errors."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.errors import RunnerError
from xgraph.runners.inline import CopyRun, InlineSchedule
from xgraph.runners.io_checks import InputCheck, check_inputs


def _adds(n_inputs: int = 6) -> onnx.ModelProto:
    """y_i = x_i + x_{i+1}: n inputs and n - 1 outputs, all ops on AI Core (device memory)."""
    ins = [helper.make_tensor_value_info(f"x{i}", TensorProto.FLOAT, [1, 4]) for i in range(n_inputs)]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 4]) for i in range(n_inputs - 1)]
    nodes = [helper.make_node("Add", [f"x{i}", f"x{i + 1}"], [f"y{i}"], name=f"add{i}") for i in range(n_inputs - 1)]
    return helper.make_model(helper.make_graph(nodes, "adds", ins, outs), opset_imports=[helper.make_opsetid("", 17)])


def _feeds(n: int = 6) -> dict[str, np.ndarray]:
    return {f"x{i}": np.full((1, 4), i + 0.5, np.float32) for i in range(n)}


@pytest.fixture(scope="module")
def compiled():
    return xgraph.compile(_adds(), {})


def test_consecutive_copies_are_one_step_and_count_as_one_copy_each(compiled):
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        schedule = runner._scheduler._inline
        runs = [step[0] for step in schedule.fused if isinstance(step[0], CopyRun)]
        assert [(r.stream, len(r.tasks)) for r in runs] == [("H2D", 6), ("D2H", 5)]
        assert len(schedule.fused) == 3 and len(schedule.steps) == 12
        feeds = _feeds()
        got = runner.run(feeds)
        stats = runner.get_stats()["copies"]
    for i, y in enumerate(got):
        np.testing.assert_array_equal(y, feeds[f"x{i}"] + feeds[f"x{i + 1}"])
    assert stats["count"] == 11 and stats["bytes"] == 11 * 16


def test_results_are_copies_the_caller_owns(compiled):
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        feeds = _feeds()
        first = runner.run(feeds)
        first[0][...] = -1  # the caller's array: changing it changes nothing the runner holds
        feeds["x0"][...] = 100  # nor does changing an input after the run
        second = runner.run(_feeds())
    np.testing.assert_array_equal(second[0], np.full((1, 4), 2.0, np.float32))


def test_profile_records_one_span_per_copy(compiled, tmp_path):
    with xgraph.create_graph_runner(compiled, kernels="numpy", profile=True) as runner:
        runner.run(_feeds())
        runner.export_chrome_trace(tmp_path / "trace.json")
        stats = runner.get_stats()["copies"]
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    copies = sorted(e["name"] for e in events if e.get("cat") == "copy")
    assert copies == sorted([f"copy x{i} H2D" for i in range(6)] + [f"copy y{i} D2H" for i in range(5)])
    assert stats["count"] == 11


def test_an_ended_run_stops_before_its_next_step(compiled):
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        schedule = runner._scheduler._inline
        values = list(_feeds().values())
        reported: list = []

        def on_end(copied, seconds, status):
            reported.append((len(copied), status))
        # one subgraph between copies: asked once, before the subgraph (after the six input copies)
        assert schedule.chain is not None
        assert schedule.run(values, lambda: True, on_end) is None
        # task by task (with spans): asked before each; ended after the first copy
        asked: list = []

        def ended() -> bool:
            asked.append(True)
            return len(asked) > 1
        spans: list = []
        assert schedule.run(values, ended, on_end, lambda task, *_: spans.append(task.name)) is None
    assert reported == [(6, "CANCELLED"), (1, "CANCELLED")] and spans == ["copy x0 H2D"]


def _tensors(compiled):
    return compiled.get_input_tensors()


@pytest.mark.parametrize("bad", [
    lambda f: {**f, "x0": f["x0"].astype(np.float64)},            # wrong dtype
    lambda f: {**f, "x1": np.zeros((2, 4), np.float32)},           # wrong shape
    lambda f: {**f, "extra": f["x0"]},                              # unknown name
    lambda f: {k: v for k, v in f.items() if k != "x2"},            # missing name
    lambda f: {**{k: v for k, v in f.items() if k != "x2"}, "z": f["x2"]},  # right count, wrong name
    lambda f: list(f.values())[:-1],                                # too few in a list
    lambda f: "not inputs",                                         # not a list or dict
])
def test_input_check_refuses_what_check_inputs_refuses_with_the_same_message(compiled, bad):
    tensors = _tensors(compiled)
    inputs = bad(_feeds())
    with pytest.raises(RunnerError) as general:
        check_inputs("runner", tensors, inputs)
    with pytest.raises(RunnerError) as fast:
        InputCheck("runner", tensors)(inputs)
    assert str(fast.value) == str(general.value)


def test_input_check_accepts_dicts_lists_and_convertible_values_as_check_inputs_does(compiled):
    tensors, feeds = _tensors(compiled), _feeds()
    check = InputCheck("runner", tensors)
    assert all(a is b for a, b in zip(check(feeds), feeds.values()))
    assert all(a is b for a, b in zip(check(tuple(feeds.values())), feeds.values()))
    as_lists = {k: v.tolist() for k, v in feeds.items()}  # nested lists: converted, as check_inputs does
    for got, want in zip(check(as_lists), check_inputs("runner", tensors, as_lists)):
        assert got.dtype == want.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_input_check_honours_symbolic_dims():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    tensors = xgraph.Graph.from_onnx(model).get_input_tensors()
    check = InputCheck("runner", tensors)
    assert check({"x": np.zeros((3, 4), np.float32)})[0].shape == (3, 4)
    with pytest.raises(RunnerError, match="must have shape"):
        check({"x": np.zeros((3, 5), np.float32)})
    with pytest.raises(RunnerError, match="must have shape"):
        check({"x": np.zeros((4,), np.float32)})


def test_inline_schedule_fuses_only_single_value_copies_of_one_stream(compiled):
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        plan = runner.plan
    schedule = InlineSchedule(plan)
    kinds = [getattr(step[0], "kind") for step in schedule.fused]
    assert kinds == ["copies", "subgraph", "copies"]
    fused_tasks = [t for step in schedule.fused for t in (step[0].tasks if step[0].kind == "copies" else (step[0],))]
    assert fused_tasks == [step[0] for step in schedule.steps]  # same tasks, same order


def test_a_wrong_name_is_refused_without_a_chained_key_error(compiled):
    feeds = _feeds()
    feeds["z"] = feeds.pop("x3")
    with pytest.raises(RunnerError) as caught:
        InputCheck("runner", _tensors(compiled))(feeds)
    assert caught.value.__context__ is None and "unknown input 'z'" in str(caught.value)


def test_a_remembered_signature_never_lets_another_one_through():
    """The input check remembers signatures that passed, the result check the results that passed per input
    signature; a value of another dtype or shape after those is still refused with the general message."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["past", 4])
    graph = xgraph.Graph.from_onnx(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["past", 4])]), opset_imports=[helper.make_opsetid("", 17)]))
    tensors = graph.get_input_tensors()
    check = InputCheck("runner", tensors)
    for past in (1, 2, 1, 2):  # the second round hits the remembered signatures
        assert check({"x": np.zeros((past, 4), np.float32)})[0].shape == (past, 4)
    for bad in ({"x": np.zeros((2, 4), np.float64)}, {"x": np.zeros((2, 5), np.float32)}, {"x": np.zeros(4, np.float32)}):
        with pytest.raises(RunnerError) as fast:
            check(bad)
        with pytest.raises(RunnerError) as general:
            check_inputs("runner", tensors, bad)
        assert str(fast.value) == str(general.value)

    from xgraph.runners.result_check import ResultCheck
    results = ResultCheck.of("runner R", graph.get_output_tensors(), tensors)
    inputs = [np.zeros((3, 4), np.float32)]
    for _ in range(2):
        results(inputs, [np.zeros((3, 4), np.float32)])  # passes, then passes from the memo
    for wrong in ([np.zeros((2, 4), np.float32)], [np.zeros((3, 4), np.float64)], [np.zeros((3, 4), np.float32).tolist()]):
        with pytest.raises(RunnerError, match="output 'y'"):
            results(inputs, wrong)
    results(inputs, [np.zeros((3, 4), np.float32)])  # what passed still passes


def test_inputs_of_one_spec_are_checked_as_one_only_when_alike():
    """A decoder's pasts share a spec: alike values are checked through the first, and a wrong one among
    them, or all of them wrong alike, is refused with the general message."""
    pasts = [helper.make_tensor_value_info(f"past{i}", TensorProto.FLOAT, [1, 4, "past", 8]) for i in range(4)]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 1])
    nodes = [helper.make_node("Relu", [f"past{i}"], [f"y{i}"]) for i in range(4)]
    outs = [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [1, 4, "past", 8]) for i in range(4)]
    nodes.append(helper.make_node("Identity", ["ids"], ["z"]))
    outs.append(helper.make_tensor_value_info("z", TensorProto.INT64, [1, 1]))
    graph = xgraph.Graph.from_onnx(helper.make_model(helper.make_graph(nodes, "g", [ids, *pasts], outs),
                                                     opset_imports=[helper.make_opsetid("", 17)]))
    tensors = graph.get_input_tensors()
    check = InputCheck("runner", tensors)
    assert check.groups is not None and len(check.firsts) == 2
    good = {"ids": np.zeros((1, 1), np.int64), **{f"past{i}": np.zeros((1, 4, 5, 8), np.float32) for i in range(4)}}
    assert len(check(good)) == 5
    for bad in (dict(good, past2=np.zeros((1, 3, 5, 8), np.float32)),
                dict(good, past2=np.zeros((1, 4, 5, 8), np.float64)),
                dict(good, **{f"past{i}": np.zeros((1, 3, 6, 8), np.float32) for i in range(4)})):
        with pytest.raises(RunnerError) as fast:
            check(bad)
        with pytest.raises(RunnerError) as general:
            check_inputs("runner", tensors, bad)
        assert str(fast.value) == str(general.value)


def test_a_result_check_remembers_results_only_with_the_input_dims_they_are_bound_to():
    """Outputs whose symbolic dims no input has (a decoder's presents, "past + 1") are remembered by
    their own shapes: another past length passes, unlike presents do not. Outputs bound to an input's
    dim are remembered with that input's shape: the same results after another input are refused."""
    from xgraph.runners.result_check import ResultCheck
    f32 = np.dtype(np.float32)
    presents = ResultCheck("runner R", [(f"present{i}", f32, (1, "past + 1")) for i in range(3)],
                           [("past", f32, (1, "past"))])
    for past in (2, 3, 2, 3):  # the second round passes from the memo
        presents([np.zeros((1, past), np.float32)], [np.zeros((1, past + 1), np.float32)] * 3)
    for wrong, named in (([np.zeros((1, 3))] * 3, "present0"),
                         ([np.zeros((1, 3), np.float32)] * 2 + [np.zeros((1, 4), np.float32)], "present2"),
                         ([np.zeros((1, 3), np.float32)] * 2 + [np.zeros((1, 3), np.int32)], "present2")):
        with pytest.raises(RunnerError, match=f"output '{named}'"):
            presents([np.zeros((1, 2), np.float32)], wrong)

    bound = ResultCheck("runner R", [("y", f32, ("past", 4))], [("x", f32, ("past", 4))])
    bound([np.zeros((3, 4), np.float32)], [np.zeros((3, 4), np.float32)])
    bound([np.zeros((3, 4), np.float32)], [np.zeros((3, 4), np.float32)])  # from the memo
    with pytest.raises(RunnerError, match="output 'y' has past=3, but this run bound past=2"):
        bound([np.zeros((2, 4), np.float32)], [np.zeros((3, 4), np.float32)])
    with pytest.raises(RunnerError, match="output 'y'"):  # too few inputs to bind from: checked, not remembered
        bound([], [np.zeros((3, 4), np.float64)])


def test_an_input_of_another_dtype_after_remembered_ones_is_refused_with_the_general_message():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["past", 4])
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1])
    graph = xgraph.Graph.from_onnx(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Identity", ["ids"], ["z"])], "g", [x, ids],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["past", 4]),
         helper.make_tensor_value_info("z", TensorProto.INT64, [1])]),
        opset_imports=[helper.make_opsetid("", 17)]))
    tensors = graph.get_input_tensors()
    check = InputCheck("runner", tensors)
    good = {"x": np.zeros((2, 4), np.float32), "ids": np.zeros(1, np.int64)}
    for _ in range(2):
        assert [v.shape for v in check(good)] == [(2, 4), (1,)]
    for bad in (dict(good, ids=np.zeros(1, np.int32)), dict(good, x=np.zeros((2, 4), np.float16))):
        with pytest.raises(RunnerError) as fast:
            check(bad)
        with pytest.raises(RunnerError) as general:
            check_inputs("runner", tensors, bad)
        assert str(fast.value) == str(general.value)


@pytest.mark.parametrize("rest_shape", [[1, 1], ["m", 1]])  # static (compared as one list) or with a symbolic dim
def test_a_trusting_check_checks_the_other_inputs_as_the_full_check_does(rest_shape):
    """`InputCheck.trusting`: the trusted input is passed as it is (a handle that fits it), the others
    pass or fail with the full check's messages and conversions."""
    graph = xgraph.Graph.from_onnx(helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["cache"], ["out"], name="id"),
         helper.make_node("Cast", ["token"], ["t"], to=TensorProto.FLOAT, name="cast")], "g",
        [helper.make_tensor_value_info("cache", TensorProto.FLOAT, ["past", 4]),
         helper.make_tensor_value_info("token", TensorProto.INT64, rest_shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["past", 4]),
         helper.make_tensor_value_info("t", TensorProto.FLOAT, rest_shape)]),
        opset_imports=[helper.make_opsetid("", 17)]))
    full = InputCheck("runner", graph.get_input_tensors())
    check = full.trusting([0])
    token = np.ones((1, 1), np.int64)
    for past in (3, 4, 3):
        values = [np.zeros((past, 4), np.float32), token]
        assert check(values) is values
    assert full.trusting([]) is full
    everything = full.trusting([0, 1])  # nothing left to check in a list of one value per input
    values = [np.zeros((2, 4), np.float32), token]
    assert everything(values) is values
    with pytest.raises(RunnerError, match="unknown input 'extra'"):
        everything({"cache": values[0], "token": token, "extra": token})
    for bad in ([np.zeros((3, 4), np.float32), token.astype(np.int32)],
                [np.zeros((3, 4), np.float32), np.ones((1, 1, 1), np.int64)],
                {"cache": np.zeros((3, 4), np.float32), "token": token, "extra": token}):
        with pytest.raises(RunnerError) as trusting:
            check(bad)
        with pytest.raises(RunnerError) as general:
            check_inputs("runner", graph.get_input_tensors(), bad)
        assert str(trusting.value) == str(general.value)
    converted = check([np.zeros((3, 4), np.float32), [[7]]])  # converted as any run converts it
    assert converted[1].dtype == np.int64 and converted[1].tolist() == [[7]]
