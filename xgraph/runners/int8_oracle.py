"""A QDQ model onnxruntime runs with every DQ -> op -> Q unit as its integer kernel: the integer oracle.

onnxruntime (CPU, x86) runs 20 of QDQ ResNet50's 53 Conv units in float (DQ -> Conv -> Q), both
with and without BatchNormalization folded. Measured on its optimized model
(`SessionOptions.optimized_model_filepath`) and read against its QDQ selectors, the chain is:

1. A block's input (Sum -> Relu -> Q, or MaxPool -> Q) is read by two Convs, or by a Conv and the
   residual Sum, through one DequantizeLinear. `EnsureUniqueDQForNodeUnit` gives each reader
   its own DQ, so that Q now has two DQ readers.
2. On x86 onnxruntime moves int8 activations to uint8 (`QDQS8ToU8Transformer`, zero point
   + 128) one Q -> DQ pair at a time: only a Q with a single DQ reader is converted. The 16
   block-input Qs stay int8, every other Q becomes uint8.
3. The Conv reading a block input then has an int8 input and a uint8 output, and
   `ConvNodeGroupSelector::Check` refuses the group ("input and output types need to be
   same"; int8 activations are not allowed for QLinearConv without VNNI either). It stays a
   float Conv between a DQ and a Q: the first Conv of each of the 16 blocks and the 4
   projection shortcuts, 20 of 53. (The same happens to a Conv whose own output Q has two
   readers, as in the MobileNet-style net's residual.)

Those 20 are onnxruntime's choice, not ONNX semantics: computed in float, their results round
differently from the exact integer unit near half steps (at most one step each), and the
difference grows through the rest of the network. An int8 device runs every unit in integers,
so xgraph's `run` does. To still have onnxruntime's integers as the oracle for every unit,
`unsigned_activations` does step 2 for every activation at once, as an exact rewrite: an int8
activation quantized with zero point z and the uint8 one with z + 128 hold the same values
shifted by 128 (the saturation bounds shift with them), and dequantize to the same floats.
onnxruntime then fuses every unit (all 53 Convs of ResNet50 into QLinearConv), and
`onnxruntime_runs(..., every_unit_integer=True)` shifts its integers back.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import numpy_helper


def unsigned_activations(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose int8 activations (QuantizeLinear outputs, per-tensor) are uint8, zero points + 128.

    Each such Q and every DequantizeLinear reading its output take a new uint8 zero point
    initializer ("<zero point>/u8"); weights (DQs of constants) and graph inputs and outputs are
    left alone, as are Qs whose output is a graph output. `model` itself is not changed."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    constants = {t.name: t for t in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    outputs = {o.name for o in graph.output}
    shifted: dict[str, str] = {}  # int8 zero point -> its uint8 counterpart
    moved: set[str] = set()
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx") or len(q.input) < 3:
            continue
        zero_point = constants.get(q.input[2])
        if zero_point is None or zero_point.data_type != onnx.TensorProto.INT8 or q.output[0] in outputs:
            continue
        value = numpy_helper.to_array(zero_point)
        if value.size != 1 or any(r.op_type != "DequantizeLinear" or len(r.input) < 3 or r.input[2] != q.input[2]
                                  for r in readers[q.output[0]]):
            continue  # per-axis, or read by something that is not its own DQ: left as it is
        signed = q.input[2]
        if signed not in shifted:
            shifted[signed] = f"{signed}/u8"
            graph.initializer.append(numpy_helper.from_array((value.astype(np.int16) + 128).astype(np.uint8),
                                                             shifted[signed]))
        for node in (q, *readers[q.output[0]]):
            node.input[2] = shifted[signed]
        moved.add(q.output[0])
    for info in graph.value_info:  # declared types of the moved tensors follow
        if info.name in moved and info.type.tensor_type.elem_type == onnx.TensorProto.INT8:
            info.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    return out


__all__ = ["unsigned_activations"]
