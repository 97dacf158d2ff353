"""Calibrating a model that does its own preprocessing: split off the front, quantize the body, join them.

A model such as the classify sample takes JPEG bytes and starts with DVPP ops (xgraph.dvpp
JpegDecode, VpcResize). onnxruntime, which calibrates and quantizes, cannot run those ops, and
its calibration data would be the encoded pictures. So `xgraph quantize` cuts such a model in
two (`split_front`):

- the front: every op of a custom (non-standard-ONNX) domain that reads only the graph inputs
  or other front ops, i.e. the model's own preprocessing;
- the body: everything else, a standard-ONNX model whose inputs are the tensors the front
  hands over (their types and shapes taken from the front's results on the calibration set).

Each calibration file goes through the front (`FrontSplit.run`: the ONNX reference evaluator
with xgraph's own kernels for the custom ops, so a picture is decoded and resized exactly as
DVPP does at run time); onnxruntime calibrates and quantizes the body on the front's results;
`FrontSplit.join` puts the untouched front back before the quantized body. A model without such
a front is quantized whole, as before.

    >>> split = split_front(read_model("classifier.onnx")[0])      # doctest: +SKIP
    >>> [n.op_type for n in split.front.graph.node], split.cut      # doctest: +SKIP
    (['JpegDecode', 'VpcResize'], ['pixels'])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper

from xgraph.errors import XGraphError

#: Domains onnxruntime runs itself; ops of any other domain at the model's start are its front.
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


@dataclass
class FrontSplit:
    """A model cut after its preprocessing front: the front model, the cut tensors, the body's parts."""

    model: onnx.ModelProto
    front: onnx.ModelProto
    cut: list[str]  # tensors the front hands to the body, in first-use order
    body_nodes: list[onnx.NodeProto]
    body_initializers: list[onnx.TensorProto]
    _evaluator: Any = field(default=None, init=False, repr=False, compare=False)

    def run(self, feed: dict[str, np.ndarray], registries: Any = None) -> dict[str, np.ndarray]:
        """The cut tensors for one model input feed (the front run by the reference evaluator)."""
        evaluator = self._evaluator
        if evaluator is None:
            from onnx.reference import ReferenceEvaluator

            from xgraph.kernels.reference import evaluator_fixes, registry_ops
            from xgraph.registries import resolve
            kernels = resolve(registries).kernels
            custom = registry_ops(((n.domain, n.op_type) for n in self.front.graph.node), kernels)
            evaluator = self._evaluator = ReferenceEvaluator(self.front, new_ops=evaluator_fixes() + custom)
        try:
            values = evaluator.run(self.cut, feed)
        except Exception as e:  # the evaluator and the kernels raise many types: name the front and the cause
            ops = ", ".join(n.op_type for n in self.front.graph.node)
            raise XGraphError(f"quantize: the model's preprocessing ({ops}) failed on a calibration input: "
                              f"{type(e).__name__}: {e}; check the calibration files are what the model's "
                              f"input {', '.join(feed)} takes") from e
        return {name: np.asarray(v) for name, v in zip(self.cut, values)}

    def body(self, example: dict[str, np.ndarray]) -> onnx.ModelProto:
        """The standard-ONNX body, its inputs the cut tensors typed like `example` (one front result)."""
        graph = self.model.graph
        inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(example[name].dtype),
                                                list(example[name].shape)) for name in self.cut]
        body = helper.make_graph(self.body_nodes, graph.name, inputs, list(graph.output), self.body_initializers)
        model = helper.make_model(body, opset_imports=[o for o in self.model.opset_import
                                                       if o.domain in STANDARD_DOMAINS])
        model.ir_version = self.model.ir_version
        return model

    def join(self, quantized_body: onnx.ModelProto) -> onnx.ModelProto:
        """The front (as it was) followed by `quantized_body`: the whole model again, quantized."""
        graph = self.model.graph
        qgraph = quantized_body.graph
        taken = {t.name for t in self.front.graph.initializer}
        inits = list(self.front.graph.initializer) + [t for t in qgraph.initializer if t.name not in taken]
        joined = helper.make_graph(list(self.front.graph.node) + list(qgraph.node), graph.name, list(graph.input),
                                   list(qgraph.output), inits, value_info=list(qgraph.value_info))
        opsets = {o.domain: o.version for o in self.model.opset_import}
        for o in quantized_body.opset_import:
            opsets[o.domain] = max(o.version, opsets.get(o.domain, 0))
        model = helper.make_model(joined, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()],
                                  producer_name=quantized_body.producer_name or self.model.producer_name)
        model.ir_version = max(self.model.ir_version, quantized_body.ir_version)
        return model


def split_front(model: onnx.ModelProto) -> FrontSplit | None:
    """`model` cut after its custom-domain preprocessing, or None when it starts with standard ONNX.

    Raises XGraphError when a custom-domain op sits after standard ones (onnxruntime could not
    calibrate through it) or when a graph output comes straight from the front.
    """
    graph = model.graph
    inputs = {vi.name for vi in graph.input} - {t.name for t in graph.initializer}
    front_tensors = set(inputs)
    front, body = [], []
    for node in graph.node:  # ONNX nodes are topologically sorted
        reads = [n for n in node.input if n]
        custom = node.domain not in STANDARD_DOMAINS
        if custom and all(n in front_tensors or n in {t.name for t in graph.initializer} for n in reads):
            front.append(node)
            front_tensors.update(node.output)
        else:
            if custom:
                raise XGraphError(f"quantize: op {node.name or node.op_type!r} ({node.domain}:{node.op_type}) comes "
                                  "after standard ONNX ops; only a model's leading preprocessing may use custom "
                                  "domains (onnxruntime calibrates the rest)")
            body.append(node)
    if not front:
        return None
    produced = {o for n in front for o in n.output}
    direct = [o.name for o in graph.output if o.name in produced]
    if direct:
        raise XGraphError(f"quantize: graph output(s) {direct} come straight from the preprocessing; nothing to "
                          "quantize there")
    cut = list(dict.fromkeys(n for node in body for n in node.input if n in produced))
    front_inits = {n for node in front for n in node.input}
    front_model = helper.make_model(
        helper.make_graph(front, f"{graph.name}_front", list(vi for vi in graph.input if vi.name in inputs),
                          [helper.make_value_info(name, onnx.TypeProto()) for name in cut],
                          [t for t in graph.initializer if t.name in front_inits]),
        opset_imports=list(model.opset_import))
    front_model.ir_version = model.ir_version
    body_reads = {n for node in body for n in node.input} | {o.name for o in graph.output}
    return FrontSplit(model, front_model, cut, body, [t for t in graph.initializer if t.name in body_reads])


__all__ = ["FrontSplit", "STANDARD_DOMAINS", "split_front"]
