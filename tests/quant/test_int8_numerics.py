"""Int8 numerics per tensor: every integer tensor of xgraph's run against onnxruntime's integer kernels.

Models: the QDQ MobileNet-style net and the hand-built QOperator net of
`testing.int8_models` (CI), QDQ ResNet50 (marked zoo). Oracles: onnxruntime (its fused
integer kernels, read through `onnxruntime_runs`) and onnx's reference evaluator.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from xgraph.kernels.reference_fixes import evaluator_fixes  # noqa: E402
from testing.int8_models import qdq_mobilenet, qdq_resnet50, qoperator_net, random_inputs  # noqa: E402
from xgraph.runners.int8_numerics import (Probe, compare, contrib_reference_ops, graph_runner_runs,  # noqa: E402
                                          onnxruntime_runs, reference_runs, runs_with_feeds, tap_name,
                                          unit_errors, with_quantized_outputs)

BUILDERS = {"mobilenet": qdq_mobilenet, "qoperator": qoperator_net}


class Case:
    def __init__(self, name: str, inputs: int = 100) -> None:
        self.model = BUILDERS[name]()
        self.probe = with_quantized_outputs(self.model)
        x = self.model.graph.input[0]
        shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
        self.feeds = [{x.name: v} for v in random_inputs(shape, inputs, seed=3)]
        self.expected = runs_with_feeds(onnxruntime_runs(self.probe, self.feeds), self.feeds)
        self.integer = onnxruntime_runs(self.probe, self.feeds, every_unit_integer=True)
        self.compiled = xgraph.compile(self.probe.model)


@pytest.fixture(scope="module", params=sorted(BUILDERS))
def case(request) -> Case:
    return Case(request.param)


def test_the_probe_finds_every_integer_tensor_and_onnxruntime_shows_them():
    probe = with_quantized_outputs(qoperator_net())
    names = [t[len(tap_name("")):] for t in probe.quantized]
    assert names == ["xq", "c1", "c2", "a", "aq", "c3", "fq", "m4", "m4q", "lq"]
    assert probe.output_scales == {"logits": pytest.approx(0.1)}
    feeds = [{"x": random_inputs((1, 3, 12, 12), 1, 0)[0]}]
    shown = onnxruntime_runs(probe, feeds)[0]
    # onnxruntime fuses the int32 ConvInteger/MatMulInteger results into its float ops; the rest stay
    assert {t for t in probe.quantized if t in shown} >= {tap_name(n) for n in ("xq", "c1", "c2", "a", "lq")}


def test_probes_change_neither_side(case):
    plain = Probe(case.model, case.model, case.probe.outputs, (), case.probe.output_scales)
    feeds = case.feeds[:10]
    session = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed, run in zip(feeds, case.expected):
        out = case.probe.outputs[0]
        assert np.abs(session.run(None, feed)[0] - run[out]).max() <= case.probe.output_scales[out] + 1e-6
    probed = graph_runner_runs(case.probe, case.compiled, feeds, "run", "numpy")
    unprobed = graph_runner_runs(plain, xgraph.compile(case.model), feeds, "run", "numpy")
    for a, b in zip(probed, unprobed):
        for name in case.probe.outputs:
            np.testing.assert_array_equal(a[name], b[name])


@pytest.mark.parametrize("mode", ["run", "sim"])
def test_every_int8_tensor_within_one_step_of_onnxruntime_on_100_inputs(case, mode):
    errors = compare(case.probe, case.expected, graph_runner_runs(case.probe, case.compiled, case.feeds, mode, "numpy"))
    assert errors.runs == 100 and len(errors.tensor_steps) >= 8
    assert errors.max_int8_steps() <= 1, errors.worst()
    assert all(v == 0 for k, v in errors.tensor_steps.items() if k.startswith("int32:")), errors.worst()
    assert errors.max_output_steps() <= 2 + 1e-4
    assert errors.top1 == 100


@pytest.mark.parametrize("mode", ["run", "sim"])
def test_every_int8_tensor_within_one_step_of_onnxruntime_running_every_unit_in_integers(case, mode):
    """The oracle with int8 activations moved to uint8 (exact), so onnxruntime fuses every unit
    (unsigned_activations in xgraph/runners/int8_numerics.py); `run` requantizes as its kernels do."""
    errors = compare(case.probe, case.integer, graph_runner_runs(case.probe, case.compiled, case.feeds, mode, "numpy"))
    assert errors.runs == 100 and len(errors.tensor_steps) >= 8
    assert errors.max_int8_steps() <= 1, errors.worst()
    assert errors.max_output_steps() <= 2 + 1e-4
    assert errors.top1 == 100


def test_the_integer_oracle_fuses_every_conv_and_gives_the_same_integers_where_both_fuse(tmp_path):
    from xgraph.runners.int8_numerics import unsigned_activations
    model = qdq_mobilenet()
    moved = unsigned_activations(model)
    kinds = {}
    for name, source in (("as_is", model), ("moved", moved)):
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(tmp_path / f"{name}.onnx")
        ort.InferenceSession(source.SerializeToString(), options, providers=["CPUExecutionProvider"])
        kinds[name] = [n.op_type for n in onnx.load(options.optimized_model_filepath).graph.node]
    assert kinds["as_is"].count("Conv") == 2  # the residual's Conv units: int8 in or out, see unsigned_activations
    assert kinds["moved"].count("QLinearConv") == 6 and "Conv" not in kinds["moved"] and "QLinearAdd" in kinds["moved"]
    for source, dtype in ((model, np.int8), (moved, np.uint8)):  # the model itself is not changed
        zero_points = {t.name: onnx.numpy_helper.to_array(t) for t in source.graph.initializer}
        assert {zero_points[n.input[2]].dtype for n in source.graph.node if n.op_type == "QuantizeLinear"} == {np.dtype(dtype)}
    probe = with_quantized_outputs(model)
    feeds = [{"x": v} for v in random_inputs((1, 3, 32, 32), 5, seed=4)]
    as_is, integer = onnxruntime_runs(probe, feeds), onnxruntime_runs(probe, feeds, every_unit_integer=True)
    session = ort.InferenceSession(moved.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed, a, b in zip(feeds, as_is, integer):
        assert set(b) >= set(a)
        np.testing.assert_allclose(session.run(None, feed)[0], b["logits"], rtol=0, atol=1e-6)
        input_tap = tap_name("x_QuantizeLinear_Output")
        np.testing.assert_array_equal(a[input_tap], b[input_tap])  # the same int8 integers after the shift back


def test_each_unit_fed_onnxruntimes_integers_is_within_one_step(case):
    errors = unit_errors(case.probe, case.expected[:3], xgraph.compile, "run", "numpy")
    assert len(errors) >= 8
    assert max(errors.values()) <= 1, errors


def test_ref_equals_the_reference_evaluator_on_every_tensor(case):
    feeds = case.feeds[:5]
    oracle = reference_runs(case.probe, feeds, evaluator_fixes() + contrib_reference_ops())
    got = graph_runner_runs(case.probe, case.compiled, feeds, "ref", "auto")
    for want, have in zip(oracle, got):
        assert set(have) == set(want)
        for name, value in want.items():
            np.testing.assert_array_equal(have[name], value, err_msg=name)


@pytest.mark.zoo
def test_qdq_resnet50_every_int8_tensor_within_one_step_of_onnxruntimes_integer_units():
    """With every unit as onnxruntime's integer kernel (the integer oracle of unsigned_activations), `run` gives its
    integers on every tensor of the whole run (one step at most: the final QLinearSoftmax's table); against
    onnxruntime as it optimizes the model (20 Convs in float) each unit is within one step and the
    differences grow over the run (benchmarks/int8_numerics.py measures both on 100 inputs)."""
    model = qdq_resnet50()
    probe = with_quantized_outputs(model)
    x = model.graph.input[0].name
    feeds = [{x: v} for v in random_inputs((1, 3, 224, 224), 2, seed=3)]
    integer = onnxruntime_runs(probe, feeds, every_unit_integer=True)
    assert sum(t in integer[0] for t in probe.quantized) == len(probe.quantized) == 126
    compiled = xgraph.compile(probe.model)
    errors = compare(probe, integer, graph_runner_runs(probe, compiled, feeds, "run", "numpy"))
    assert errors.max_int8_steps() <= 1 and errors.max_output_steps() <= 1 + 1e-4, errors.worst()
    assert sum(v > 0 for v in errors.tensor_steps.values()) <= 1, errors.worst()  # the others: the same integers
    assert errors.top1 == 2
    expected = runs_with_feeds(onnxruntime_runs(probe, feeds), feeds)
    assert sum(t in expected[0] for t in probe.quantized) == len(probe.quantized)
    for mode in ("run", "sim"):
        errors = compare(probe, expected, graph_runner_runs(probe, compiled, feeds, mode, "numpy"))
        assert errors.top1 == 2 and errors.max_output_steps() <= 4 + 1e-4, (mode, errors.output_steps)
        units = unit_errors(probe, expected[:1], xgraph.compile, mode, "numpy")
        assert len(units) == 126 and max(units.values()) <= 1, (mode, sorted(units.items(), key=lambda kv: -kv[1])[:3])


def test_first_difference_is_the_earliest_differing_tensor_in_node_order():
    from xgraph.runners.int8_numerics import Int8Errors
    probe = with_quantized_outputs(qoperator_net())
    errors = Int8Errors({"lq": 3, "c2": 1, "xq": 0, "int32:c3": 0}, {}, {}, 1, 1)
    assert errors.first_difference(probe) == "c2"
    assert Int8Errors({"int32:c3": 2, "lq": 1}, {}, {}, 1, 1).first_difference(probe) == "c3"
    assert Int8Errors({"xq": 0}, {}, {}, 1, 1).first_difference(probe) is None
