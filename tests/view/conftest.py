"""Fixtures for the view tests: a hand-built compiled graph with four devices and two host/device
copies, and ResNet50 from the ONNX model zoo (raw and compiled)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import xgraph
from xgraph import Graph

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
RESNET50 = LIGHT / "light_resnet50.onnx"

#: op -> (type, inputs, device, placement reason)
TOY_OPS = {
    "conv": ("Conv", ["x", "w"], "AICORE", ""),
    "relu": ("Relu", ["conv"], "AICORE", ""),
    "topk_like": ("Abs", ["relu"], "CPU", "AICORE: Abs with dtype float64 unsupported; AICPU: not in its op-info "
                                          "library"),
    "softmax": ("Softmax", ["topk_like"], "SMFC", "chosen by plugin 'smfc'"),
    "add": ("Add", ["softmax", "relu"], "AICORE", ""),
    "shape_op": ("Neg", ["add"], "AICPU", "AICORE: Neg <&> \"quoted\" not here"),
}
#: device subgraphs of the toy graph, in topological order
TOY_GROUPS = [("AICORE", ["conv", "relu"]), ("CPU", ["topk_like"]), ("SMFC", ["softmax"]),
              ("AICORE", ["add"]), ("AICPU", ["shape_op"])]
RUNNERS = {"AICORE": "aicore", "AICPU": "aicpu", "CPU": "cpu", "SMFC": "smfc"}


def build_toy() -> Graph:
    """x -> conv -> relu -> [CPU] -> [SMFC] -> add(relu) -> [AICPU]: every device kind, built by hand."""
    g = Graph("toy")
    g.create_input("x", (1, 2, 4, 4), np.float32)
    g.create_const("w", np.arange(2 * 2 * 1 * 1, dtype=np.float32).reshape(2, 2, 1, 1))
    for name, (op_type, inputs, _, _) in TOY_OPS.items():
        attrs = {"kernel_shape": [1, 1]} if op_type == "Conv" else None
        g.create_op(name, op_type, attrs=attrs, inputs=inputs)
    g.set_outputs(["shape_op"])
    g.infer_shapes()
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    for device, names in TOY_GROUPS:
        children = {root.find_child_subgraph_by_op(n) for n in names}
        sg = root.merge_children(children) if len(children) > 1 else children.pop()
        sg.set_attr("device", device)
        sg.set_attr("runner", {"run": RUNNERS[device], "sim": RUNNERS[device], "ref": RUNNERS[device]})
    for name, (_, _, device, reason) in TOY_OPS.items():
        op = g.get_op(name)
        op.set_attr("device", device, onnx_type=None)
        op.set_attr("placement_reason", reason, onnx_type=None)
        op.set_attr("kernel", "numpy", onnx_type=None)
    return g


@pytest.fixture
def toy() -> Graph:
    """A fresh hand-built compiled graph (AICORE, CPU, SMFC, AICORE, AICPU; 2 host/device copies)."""
    return build_toy()


@pytest.fixture(scope="session")
def resnet50_path() -> Path:
    """The model-zoo ResNet50 (light version: constant weights)."""
    return RESNET50


@pytest.fixture(scope="session")
def resnet50_compiled() -> Graph:
    """ResNet50 compiled with the built-in placement (do not mutate)."""
    return xgraph.compile(RESNET50)


@pytest.fixture(scope="session")
def resnet50_raw() -> Graph:
    """ResNet50 as imported, not compiled (do not mutate)."""
    return xgraph.load(RESNET50)
