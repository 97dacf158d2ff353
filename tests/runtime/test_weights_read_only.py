"""Weights reach runners and kernels read-only: a runner writing into one fails, and no graph changes."""
from __future__ import annotations

import numpy as np
import pytest

import xgraph
from xgraph import Graph, XGraphError
from xgraph.runners.runner import Runner

W = np.arange(6, dtype=np.float32).reshape(2, 3)


def weighted_graph() -> Graph:
    g = Graph("weighted")
    x = g.create_input("x", (2, 3), np.float32)
    w = g.create_const("w", W.copy())
    add = g.create_op("add", "Add", inputs=[x, w])
    g.set_outputs([add.get_output_tensor()])
    return g


class WeightWriter(Runner):
    """Writes into the subgraph's weight, then would return x + w."""

    def execute(self, inputs):
        [w] = self.subgraph.get_const_tensors()
        w.data[...] = 42
        return [inputs[0] + w.data]


def test_a_runner_writing_into_a_weight_fails_and_changes_no_graph():
    original = weighted_graph()
    compiled = xgraph.compile(original)
    [sg] = compiled.get_root_subgraph().get_children()
    sg.set_attr("runner", {"run": "test_weight_writer"})
    xgraph.register_runner("test_weight_writer", WeightWriter)
    with Runner.create_runner(sg) as runner, pytest.raises((XGraphError, ValueError), match="read-only"):
        runner.run([np.zeros((2, 3), np.float32)])
    assert np.array_equal(compiled.get_tensor("w").data, W)
    assert np.array_equal(original.get_tensor("w").data, W)


@pytest.mark.parametrize("mode", ["run", "sim", "ref"])
def test_built_in_runners_compute_with_read_only_weights(mode):
    original = weighted_graph()
    compiled = xgraph.compile(original)
    assert not compiled.get_tensor("w").data.flags.writeable
    x = np.ones((2, 3), np.float32)
    [y] = xgraph.create_graph_runner(compiled, mode=mode).run({"x": x})
    np.testing.assert_allclose(y, x + W)
    assert np.array_equal(original.get_tensor("w").data, W)
