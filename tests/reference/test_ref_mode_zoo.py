"""`ref` mode is a golden reference: the 9 zoo models, seeded random weights, against onnxruntime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import xgraph
from testing.runtime import randomize_zoo_weights

ort = pytest.importorskip("onnxruntime")
ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


@pytest.mark.zoo
@pytest.mark.parametrize("path", sorted(ZOO.glob("light_*.onnx")), ids=lambda p: p.stem)
def test_ref_mode_matches_onnxruntime(path):
    """Within 1e-4 of the output's range, same top-1; the reference output is not degenerate."""
    model = randomize_zoo_weights(onnx.load(path))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    x = np.random.default_rng(1).standard_normal([d if isinstance(d, int) else 1 for d in feed.shape]).astype(np.float32)
    (expected,) = session.run(None, {feed.name: x})[:1]
    with xgraph.create_graph_runner(xgraph.compile(model), mode="ref") as runner:
        got = runner.run({feed.name: x})[0]
    assert np.unique(expected).size > 1  # random weights: the comparison is not vacuous
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-4 * float(np.abs(expected).max()))
    assert int(got.argmax()) == int(expected.argmax())
