"""QDQ models of older opsets (10, 11) and per-tensor weights: import, place as units, run in every mode."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from tests.quant.models import quantize, small_cnn  # noqa: E402


@pytest.mark.parametrize("opset", [10, 11])
def test_per_tensor_qdq_of_an_old_opset_runs_in_every_mode(opset):
    q = quantize(small_cnn(opset=opset), per_channel=False)
    assert q.opset_import[0].version == opset or any(o.version == opset for o in q.opset_import)
    step = next(float(onnx.numpy_helper.to_array(i)) for i in q.graph.initializer if i.name == "logits_scale")
    compiled = xgraph.compile(q)
    rep = xgraph.report(compiled)
    assert set(rep["devices"]) == {"AICORE"}
    assert {u["label"] for u in rep["int8_units"]} >= {"Conv (int8, per-tensor)", "Gemm (int8, per-tensor)"}
    sess = ort.InferenceSession(q.SerializeToString())
    x = np.random.default_rng(opset).uniform(0, 1, (1, 3, 16, 16)).astype(np.float32)
    want = sess.run(None, {"x": x})[0]
    for mode, kernels in (("run", "numpy"), ("sim", "numpy"), ("ref", "auto")):
        with xgraph.create_graph_runner(compiled, mode=mode, kernels=kernels) as runner:
            assert np.abs(runner.run({"x": x})[0] - want).max() <= 2 * step + 1e-6, mode
