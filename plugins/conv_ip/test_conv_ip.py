"""The CONVIP sample plugin: which ops its templates take, how they merge, what compile records."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

import xgraph
from xgraph import Graph
from xgraph.plugins import load_plugin, run_plugin_chain

PLUGINS = str(Path(__file__).resolve().parents[1])
RESNET50 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


class Builder:
    """Adds Conv/BN ops with small random weights to a graph."""

    def __init__(self, g: Graph):
        self.g = g
        self.rng = np.random.default_rng(0)

    def const(self, name: str, shape: tuple) -> str:
        self.g.create_const(name, self.rng.uniform(0.5, 1.0, shape).astype(np.float32))
        return name

    def conv(self, name: str, x, channels: int = 4, kernel: tuple = (3, 3)):
        w = self.const(f"{name}_w", (channels, 4 if name != "c1" else 3, *kernel))
        pads = [1] * (2 * len(kernel))
        return self.g.create_op(name, "Conv", {"pads": pads}, [x, w]).get_output_tensor()

    def bn(self, name: str, x):
        params = [self.const(f"{name}_{p}", (4,)) for p in ("scale", "bias", "mean", "var")]
        return self.g.create_op(name, "BatchNormalization", None, [x, *params]).get_output_tensor()

    def op(self, name: str, op_type: str, *inputs):
        return self.g.create_op(name, op_type, None, list(inputs)).get_output_tensor()


def blocks_graph() -> Graph:
    """c1-bn1-r1 | c2-clip | c3-bn3 + clip -> add -> r3 | c4-bn4 (no act) ; 1-D conv c5-r5 on its own input."""
    g = Graph("blocks")
    b = Builder(g)
    r1 = b.op("r1", "Relu", b.bn("bn1", b.conv("c1", g.create_input("x", (1, 3, 8, 8)))))
    clip = b.op("clip", "Clip", b.conv("c2", r1))
    r3 = b.op("r3", "Relu", b.op("add", "Add", b.bn("bn3", b.conv("c3", clip)), clip))
    out = b.bn("bn4", b.conv("c4", r3))
    w5 = b.const("c5_w", (4, 4, 3))
    one_d = g.create_op("c5", "Conv", None, [g.create_input("y", (1, 4, 8)), w5]).get_output_tensor()
    r5 = b.op("r5", "Relu", one_d)
    g.set_outputs([out, r5])
    g.infer_shapes()
    return g


def devices(g: Graph) -> dict[str, str | None]:
    root = g.get_root_subgraph()
    return {op.name: root.find_child_subgraph_by_op(op).get_attrs().get("device") for op in g.get_ops()}


def test_templates_take_fused_chains_and_the_residual_block():
    g = blocks_graph()
    g.get_root_subgraph().create_child_subgraph()
    [record] = run_plugin_chain(g, ["conv_ip"], [PLUGINS])
    taken = sorted(name for name, device in devices(g).items() if device == "CONVIP")
    assert taken == sorted(["c1", "bn1", "r1", "c2", "clip", "c3", "bn3", "add", "r3"])
    assert record["subgraphs"] == ["subgraph_add"]  # one subgraph: the chain is connected
    assert record["runner"] == {"run": "cpu", "sim": "cpu", "ref": "cpu"}
    layers = g.get_subgraph("subgraph_add").get_attr("convip_layers")
    assert layers == [{"op": "c1", "type": "Conv", "fused": ["bn1", "r1"]},
                      {"op": "c2", "type": "Conv", "fused": ["clip"]},
                      {"op": "c3", "type": "Conv", "fused": ["bn3"]},
                      {"op": "add", "type": "Add", "fused": ["r3"]}]


def test_projection_shortcut_block():
    g = Graph("projection")
    b = Builder(g)
    x = b.op("r0", "Relu", g.create_input("x", (1, 4, 8, 8)))
    main = b.bn("bn_main", b.conv("c_main", x))
    short = b.bn("bn_short", b.conv("c_short", x))
    g.set_outputs([b.op("act", "Relu", b.op("sum", "Sum", main, short))])
    g.infer_shapes()
    g.get_root_subgraph().create_child_subgraph()
    run_plugin_chain(g, ["conv_ip"], [PLUGINS])
    assert devices(g) == {"r0": None, "c_main": "CONVIP", "bn_main": "CONVIP", "c_short": "CONVIP",
                          "bn_short": "CONVIP", "sum": "CONVIP", "act": "CONVIP"}


def test_compiled_graph_runs_like_the_uncompiled_model():
    g = blocks_graph()
    with_plugin = xgraph.compile(g, {"plugins": "conv_ip"}, plugin_path=[PLUGINS])
    assert "CONVIP" in {c.get_attr("device") for c in with_plugin.get_root_subgraph().get_children()}
    rng = np.random.default_rng(3)
    feeds = {"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
             "y": rng.standard_normal((1, 4, 8)).astype(np.float32)}
    got = xgraph.create_graph_runner(with_plugin).run(feeds)
    want = xgraph.create_graph_runner(xgraph.compile(g)).run(feeds)
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.zoo
def test_resnet50_body_is_two_convip_subgraphs():
    g = Graph.from_onnx(RESNET50)
    module = load_plugin("conv_ip", [PLUGINS]).module
    counts = {make().name: len(g.isomorphism(make())) for make in module.TEMPLATES}
    # 16 bottleneck blocks: 4 open a stage with a projection shortcut, 12 are identity blocks;
    # each has two Conv-BN-Relu before the residual; plus the stem's Conv-BN-Relu. A projection
    # block matches twice: its two Conv-BN branches are interchangeable in the template.
    assert counts == {"conv_bn_act": 33, "conv_act": 0, "residual_identity": 12, "residual_projection": 8}
    g.get_root_subgraph().create_child_subgraph()
    [record] = run_plugin_chain(g, ["conv_ip"], [PLUGINS])
    assert len(record["subgraphs"]) == 2  # the stem, then MaxPool (not an IP op) cuts to the body
    stem, body = sorted((g.get_subgraph(n) for n in record["subgraphs"]), key=lambda s: s.get_op_num())
    assert Counter(op.type for op in stem.get_ops()) == {"Conv": 1, "BatchNormalization": 1, "Relu": 1}
    assert Counter(op.type for op in body.get_ops()) == {"Conv": 52, "BatchNormalization": 52, "Relu": 48,
                                                         "Sum": 16}
    left = Counter(op.type for c in g.get_root_subgraph().get_children() if not c.has_attr("device")
                   for op in c.get_ops())
    assert set(left) == {"ConstantOfShape", "MaxPool", "AveragePool", "Reshape", "Gemm", "Softmax"}
    layers = stem.get_attr("convip_layers") + body.get_attr("convip_layers")
    fused = [name for layer in layers for name in layer["fused"]]
    assert len(layers) == 53 + 16 and len(fused) == len(set(fused)) == 53 + 49
