"""Fixtures for the plugin tests: a one-input, one-output chain of unary ops as an ONNX file, with plugin sources
written beside it."""
from __future__ import annotations

import textwrap
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper


@pytest.fixture
def chain_model():
    """`write_chain`, for tests to call with their own chain and plugins."""
    return write_chain


def write_chain(folder: Path, chain: list[tuple[str, str, str]], plugins: dict[str, str]) -> Path:
    """m.onnx in `folder`: ops (type, input, output) named after their output, float [1, 4] from the first input to
    the last output; each plugins[name] source dedented into name.py. Returns the model's path."""
    nodes = [helper.make_node(t, [i], [o], name=o) for t, i, o in chain]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(chain[0][1], TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(chain[-1][2], TensorProto.FLOAT, [1, 4])])
    path = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    for name, source in plugins.items():
        (folder / f"{name}.py").write_text(textwrap.dedent(source))
    return path
