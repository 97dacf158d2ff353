"""QOperator models as onnxruntime's quantizer writes them (QLinearConv, com.microsoft QLinearAdd,
QLinearGlobalAveragePool, QGemm): every integer tensor within one step of onnxruntime on 100 inputs."""
from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from testing.int8_models import mobilenet_float, random_inputs  # noqa: E402
from xgraph.runners.int8_numerics import (compare, graph_runner_runs, onnxruntime_runs, runs_with_feeds,  # noqa: E402
                                          unit_errors, with_quantized_outputs)
from tests.quant.models import quantize, small_cnn  # noqa: E402


@pytest.mark.parametrize("per_channel", [True, False], ids=["per-channel", "per-tensor"])
@pytest.mark.parametrize("name", ["small_cnn", "mobilenet"])
def test_onnxruntime_qoperator_model_within_one_step_on_every_integer_tensor(name, per_channel):
    float_model, shape = (small_cnn(), (1, 3, 16, 16)) if name == "small_cnn" else (mobilenet_float(), (1, 3, 32, 32))
    model = quantize(float_model, fmt="qoperator", calib=random_inputs(shape, 8, 1), per_channel=per_channel)
    types = {(n.domain, n.op_type) for n in model.graph.node}
    assert {("", "QLinearConv"), ("com.microsoft", "QLinearAdd"), ("com.microsoft", "QGemm"),
            ("com.microsoft", "QLinearGlobalAveragePool")} <= types
    probe = with_quantized_outputs(model)
    feeds = [{"x": x} for x in random_inputs(shape, 100, 2)]
    expected = runs_with_feeds(onnxruntime_runs(probe, feeds), feeds)
    assert all(t in expected[0] for t in probe.quantized)
    compiled = xgraph.compile(probe.model)
    for mode, kernels in (("run", "numpy"), ("sim", "numpy"), ("ref", "auto")):
        errors = compare(probe, expected, graph_runner_runs(probe, compiled, feeds, mode, kernels))
        assert errors.max_int8_steps() <= 1 and errors.top1 == 100, (mode, errors.worst())
        assert max(errors.output_abs.values()) <= 1e-5 or errors.max_output_steps() <= 2 + 1e-4
    assert max(unit_errors(probe, expected[:2], xgraph.compile).values()) <= 1
