"""CONVIP: a template plugin for a fused convolution IP (Conv -> BatchNormalization? -> activation).

The IP runs convolution chains fused the way DPU-style accelerators do: a Conv, an optional
BatchNormalization folded into it, and a Relu/Clip, plus the residual Add of a ResNet block
(the block's last Conv -> BN, added to the shortcut, then activated). Each pattern is a
`GraphTemplate`; `filter_by_template` finds the unassigned subgraphs of every match, and
`merge_subgraph` merges them into as few device subgraphs as the dependencies allow.

This sample ships no IP runtime, so it keeps the `Plugin` default runner map (the host "cpu"
runner for every mode) and its subgraphs run anywhere; a real IP registers its own runner
with `xgraph.register_runner` and returns it from `get_runner`, as plugins/smfc does.

Use it:  xcompile model.onnx --plugin-path plugins --options '{"plugins": "conv_ip"}'
"""
from __future__ import annotations

from xgraph import Graph, GraphTemplate, Op, Subgraph
from xgraph.partition import filter_by_template, merge_subgraph
from xgraph.plugins import Plugin

DEVICE = "CONVIP"
ACTIVATIONS = ("Relu", "Clip")
ADDS = ("Add", "Sum")  # opset < 8 models (e.g. the ONNX zoo ResNet50) spell the residual add "Sum"


def is_2d_conv(op: Op) -> bool:
    """The IP only has a 2-D mode: 4-D output (N, C, H, W), or unknown rank taken on trust."""
    shape = op.get_output_tensor().shape
    return shape is None or len(shape) == 4


def _conv(t: GraphTemplate, name: str = "conv"):
    conv = t.add_op(name, "Conv")
    conv.set_filter(is_2d_conv)
    return conv


def conv_bn_act() -> GraphTemplate:
    """Conv -> BatchNormalization -> Relu/Clip."""
    t = GraphTemplate("conv_bn_act")
    bn = t.add_op("bn", "BatchNormalization", inputs=[_conv(t)])
    t.add_op("act", ACTIVATIONS, inputs=[bn])
    return t


def conv_act() -> GraphTemplate:
    """Conv -> Relu/Clip (no BatchNormalization, or one folded away already)."""
    t = GraphTemplate("conv_act")
    t.add_op("act", ACTIVATIONS, inputs=[_conv(t)])
    return t


def residual_identity() -> GraphTemplate:
    """A residual Add fed by an activation branch (the identity shortcut), with the block's
    last Conv -> BN on the other input and the activation after the Add."""
    t = GraphTemplate("residual_identity")
    bn = t.add_op("bn", "BatchNormalization", inputs=[_conv(t)])
    shortcut = t.add_op("shortcut", ACTIVATIONS)
    add = t.add_op("add", ADDS, inputs=[bn, shortcut])
    t.add_op("act", ACTIVATIONS, inputs=[add])
    return t


def residual_projection() -> GraphTemplate:
    """A residual Add of two Conv -> BN branches (the projection shortcut), then the activation."""
    t = GraphTemplate("residual_projection")
    bn = t.add_op("bn", "BatchNormalization", inputs=[_conv(t)])
    shortcut_bn = t.add_op("shortcut_bn", "BatchNormalization", inputs=[_conv(t, "shortcut_conv")])
    add = t.add_op("add", ADDS, inputs=[bn, shortcut_bn])
    t.add_op("act", ACTIVATIONS, inputs=[add])
    return t


ANCHORS = ("Conv",) + ADDS
TEMPLATES = (conv_bn_act, conv_act, residual_identity, residual_projection)


class ConvIpPlugin(Plugin):
    """Fused Conv/BN/activation chains and residual blocks on the CONVIP IP."""

    def get_plugin_name(self) -> str:
        """The plugin's name in {"plugins": ...}."""
        return "conv_ip"

    def get_device(self) -> str:
        """The device name set on its subgraphs."""
        return DEVICE

    def partition(self, graph: Graph) -> set[Subgraph]:
        """The subgraphs of every template match, merged into as few as dependencies allow."""
        selected: set[Subgraph] = set()
        for make_template in TEMPLATES:
            selected |= filter_by_template(graph, make_template())
        return merge_subgraph(selected) if selected else set()

    def compile(self, subgraph: Subgraph) -> None:
        """Record the layers the IP executes: each Conv or Add with the BN/activations fused into it."""
        ops = subgraph.get_ops()
        layers: dict[str, dict] = {}
        for op in subgraph.toposort():
            if op.type in ANCHORS:
                layers[op.name] = {"op": op.name, "type": op.type, "fused": []}
                continue
            anchor = _anchor(op, ops)
            if anchor is not None:
                layers[anchor.name]["fused"].append(op.name)
        subgraph.set_attr("convip_layers", list(layers.values()))


def _anchor(op: Op, ops: set[Op]) -> Op | None:
    """The Conv or Add a BN/activation is fused into: up its single in-subgraph producer chain."""
    while op.type not in ANCHORS:
        producers = [p for p in op.get_input_ops() if p in ops]
        if len(producers) != 1:
            return None
        op = producers[0]
    return op


def get_plugin() -> ConvIpPlugin:
    """The plugin object the chain runs."""
    return ConvIpPlugin()
