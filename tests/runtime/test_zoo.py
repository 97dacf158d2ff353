"""Model-zoo architectures through the graph runner, against onnxruntime on the same random weights.

The zoo's "light" models carry constant weights (ConstantOfShape 0.02), which make outputs
uniform enough that a broken kernel could still match; the weights are replaced by seeded
random values first, and the pre-softmax logits are compared as well as the probabilities.
CI runs three architectures; XGRAPH_ZOO_ALL=1 runs all nine.
"""
from __future__ import annotations

import os

import numpy as np
import onnxruntime as ort
import pytest

import xgraph
from xgraph import Graph
from testing.runtime import (ZOO, kernel_annotation_mismatches, place, with_logits_output, zoo_device_of,
                                    zoo_model)

CI_MODELS = ["resnet50", "squeezenet", "inception_v1"]
ALL_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
              "squeezenet", "vgg19", "zfnet512"]
MODELS = ALL_MODELS if os.environ.get("XGRAPH_ZOO_ALL") else CI_MODELS


@pytest.mark.zoo
@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_matches_onnxruntime(name):
    model = with_logits_output(zoo_model(name, seed=0))
    graph = place(Graph.from_onnx(model), zoo_device_of)
    rng = np.random.default_rng(1)
    feeds = {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.get_input_tensors()}
    options = ort.SessionOptions()
    options.log_severity_level = 3
    expected = ort.InferenceSession(model.SerializeToString(), options).run(None, feeds)
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        assert {r.backend for r in runner.runners.values()} == {"numpy"}
        got = runner.run(feeds)
    assert len(got) == len(expected)
    logits = expected[-1]
    assert np.std(logits) > 1e-3 * np.abs(logits).max()  # the random weights make the logits informative
    for name_, g, e in zip(("prob", "logits")[-len(got):], got, expected):
        assert g.shape == e.shape and g.dtype == e.dtype
        err = np.abs(g - e).max()
        assert err <= 1e-4 * np.abs(e).max(), f"{name} {name_}: max abs err {err:.3g}, max |ref| {np.abs(e).max():.3g}"


@pytest.mark.zoo
@pytest.mark.parametrize("name", ALL_MODELS)
def test_the_saved_kernel_annotation_is_what_the_runner_runs(name):
    """Every op's "kernel" annotation (saved as is in the .xmodel) equals the source the runner's plan reports."""
    compiled = xgraph.compile(ZOO / f"light_{name}.onnx")
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:  # created (planned), not run
        assert kernel_annotation_mismatches(compiled, runner) == []
        assert len(runner.kernel_choices()) == compiled.get_op_num()
        assert {c.source for c in runner.kernel_choices().values()} == {"numpy"}
