"""ONNX schemas for onnxruntime's quantized elementwise contrib ops (com.microsoft QLinearAdd, QLinearMul).

QOperator models written by onnxruntime's quantizer use them. onnx knows no com.microsoft ops,
so without a schema shape inference leaves their outputs untyped and every later stage (kernel
choice by dtype, placement by op-info dtypes) sees an unknown tensor. The schemas here give the
output C the type of C_zero_point (else A's) and the numpy-broadcast shape of A and B, as
onnxruntime's own schema does. Registered on import (idempotent); the kernels are in
`xgraph.kernels.op_qlinear_binary`.
"""
from __future__ import annotations

import onnx

DOMAIN = "com.microsoft"
VERSION = 1
OPS = ("QLinearAdd", "QLinearMul")
_INPUTS = ("A", "A_scale", "A_zero_point", "B", "B_scale", "B_zero_point", "C_scale", "C_zero_point")


def _dims(ctx, index: int):
    """(elem_type, dims or None) of input `index`, dims as int / str / None; (0, None) when absent."""
    if index >= ctx.get_num_inputs() or not ctx.has_input(index):
        return 0, None
    tp = ctx.get_input_type(index)
    if tp is None or not tp.HasField("tensor_type"):
        return 0, None
    tt = tp.tensor_type
    if not tt.HasField("shape"):
        return tt.elem_type, None
    return tt.elem_type, [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]


def broadcast_dims(a: list | None, b: list | None) -> list | None:
    """Numpy broadcasting of two dim lists (None: unknown rank; a None dim stays unknown).

    >>> broadcast_dims([1, 8, 4, 4], [8, 1, 1])
    [1, 8, 4, 4]
    """
    if a is None or b is None:
        return None
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        out.append(y if x == 1 else x if y == 1 or x == y else None)
    return out[::-1]


def _infer(ctx) -> None:
    """C: C_zero_point's element type (A's without one), shape broadcast(A, B); never raises on odd input."""
    a_type, a_dims = _dims(ctx, 0)
    zp_type, _ = _dims(ctx, 7)
    _, b_dims = _dims(ctx, 3)
    out = onnx.TypeProto()
    out.tensor_type.elem_type = zp_type or a_type
    if not out.tensor_type.elem_type:
        return
    dims = broadcast_dims(a_dims, b_dims)
    if dims is not None:
        shape = out.tensor_type.shape
        for d in dims:
            dim = shape.dim.add()
            if isinstance(d, int):
                dim.dim_value = d
            elif isinstance(d, str):
                dim.dim_param = d
    ctx.set_output_type(0, out)


def _schema(op_type: str) -> onnx.defs.OpSchema:
    param = onnx.defs.OpSchema.FormalParameter
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    inputs = [param(name, "T" if name in ("A", "B", "A_zero_point", "B_zero_point", "C_zero_point") else "tensor(float)",
                    param_option=optional if name.endswith("zero_point") else
                    onnx.defs.OpSchema.FormalParameterOption.Single) for name in _INPUTS]
    schema = onnx.defs.OpSchema(
        op_type, DOMAIN, VERSION, f"onnxruntime's quantized {op_type[7:]}: dequantize A and B, "
        f"{op_type[7:].lower()}, quantize to C_scale / C_zero_point (round half to even, saturate).",
        inputs=inputs, outputs=[param("C", "T")],
        type_constraints=[("T", ["tensor(int8)", "tensor(uint8)"], "quantized tensors")])
    schema.set_type_and_shape_inference_function(_infer)
    return schema


def register_schemas() -> None:
    """Register the schemas with onnx unless onnx (or someone) already has them."""
    for op_type in OPS:
        if not onnx.defs.has(op_type, VERSION, DOMAIN):
            onnx.defs.register_schema(_schema(op_type))


register_schemas()
