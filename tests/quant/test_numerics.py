"""Numerics of a QDQ CNN against independent oracles: onnxruntime and onnx's reference evaluator."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from xgraph.kernels.reference_fixes import evaluator_fixes  # noqa: E402
from tests.quant.models import quantize, small_cnn  # noqa: E402


@pytest.fixture(scope="module")
def case():
    q = quantize(small_cnn())
    step = next(float(onnx.numpy_helper.to_array(i)) for i in q.graph.initializer if i.name == "logits_scale")
    rng = np.random.default_rng(0)
    xs = [rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32) for _ in range(100)]
    return q, xgraph.compile(q), step, xs


def test_ref_equals_the_reference_evaluator_on_opset_13_qdq(case):
    q, compiled, _, xs = case
    oracle = ReferenceEvaluator(q, new_ops=evaluator_fixes())
    with xgraph.create_graph_runner(compiled, mode="ref") as runner:
        for x in xs[:10]:
            np.testing.assert_array_equal(runner.run({"x": x})[0], oracle.run(None, {"x": x})[0])


def test_run_auto_matches_onnxruntime_within_two_output_steps(case):
    q, compiled, step, xs = case
    sess = ort.InferenceSession(q.SerializeToString())
    with xgraph.create_graph_runner(compiled, mode="run", kernels="auto") as runner:
        for x in xs[:20]:
            out, want = runner.run({"x": x})[0], sess.run(None, {"x": x})[0]
            assert np.abs(out - want).max() <= 2 * step + 1e-7


def test_run_numpy_top1_agrees_with_onnxruntime_on_100_inputs(case):
    q, compiled, step, xs = case
    sess = ort.InferenceSession(q.SerializeToString())
    agree = 0
    with xgraph.create_graph_runner(compiled, mode="run", kernels="numpy") as runner:
        for x in xs:
            out, want = runner.run({"x": x})[0], sess.run(None, {"x": x})[0]
            agree += int(out.argmax() == want.argmax())
            # integer units (run) vs onnxruntime's fused integer kernels
            assert np.abs(out - want).max() <= 2 * step + 1e-6
            # every output is on the output quantization grid (the final DQ of an int8 tensor)
            np.testing.assert_allclose(np.round(out / step) * step, out, atol=1e-6)
    assert agree == 100
