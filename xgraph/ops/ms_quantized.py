"""ONNX schemas for onnxruntime's quantized contrib ops (com.microsoft) that its quantizer writes in
QOperator models: QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QGemm.

onnx knows no com.microsoft ops, so without a schema shape inference leaves their outputs
untyped and every later stage (kernel choice by dtype, placement by op-info dtypes) sees an
unknown tensor. Each schema types the output as onnxruntime's does: the output zero point's type
(else the first input's; QGemm without y_scale gives float32), with the broadcast, pooled or
product shape. Registered on import (idempotent); the kernels are in
`xgraph.kernels.op_qlinear_contrib`.
"""
from __future__ import annotations

import onnx

DOMAIN = "com.microsoft"
VERSION = 1
#: op -> its inputs (optional ones end in "?") and attributes (name -> default)
OPS: dict[str, tuple[tuple[str, ...], dict]] = {
    "QLinearAdd": (("A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale", "C_zero_point?"), {}),
    "QLinearMul": (("A", "A_scale", "A_zero_point?", "B", "B_scale", "B_zero_point?", "C_scale", "C_zero_point?"), {}),
    "QLinearGlobalAveragePool": (("X", "x_scale", "x_zero_point?", "y_scale", "y_zero_point?"), {"channels_last": 0}),
    "QGemm": (("A", "a_scale", "a_zero_point?", "B", "b_scale", "b_zero_point?", "C?", "y_scale?", "y_zero_point?"),
              {"alpha": 1.0, "transA": 0, "transB": 0}),
}


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


def _attr(ctx, name: str, default):
    proto = ctx.get_attribute(name)
    return default if proto is None else onnx.helper.get_attribute_value(proto)


def _binary(ctx):
    a_type, a_dims = _dims(ctx, 0)
    zp_type, _ = _dims(ctx, 7)
    return zp_type or a_type, broadcast_dims(a_dims, _dims(ctx, 3)[1])


def _pool(ctx):
    x_type, dims = _dims(ctx, 0)
    zp_type, _ = _dims(ctx, 4)
    if dims is not None and len(dims) >= 3:
        dims = [dims[0]] + [1] * (len(dims) - 2) + [dims[-1]] if _attr(ctx, "channels_last", 0) else \
            dims[:2] + [1] * (len(dims) - 2)
    return zp_type or x_type, dims


def _gemm(ctx):
    a_type, a_dims = _dims(ctx, 0)
    _, b_dims = _dims(ctx, 3)
    zp_type, _ = _dims(ctx, 8)
    has_scale = ctx.get_num_inputs() > 7 and ctx.has_input(7)
    elem = (zp_type or a_type) if has_scale else onnx.TensorProto.FLOAT
    dims = None
    if a_dims is not None and b_dims is not None and len(a_dims) == 2 and len(b_dims) == 2:
        m = a_dims[1] if _attr(ctx, "transA", 0) else a_dims[0]
        n = b_dims[0] if _attr(ctx, "transB", 0) else b_dims[1]
        dims = [m, n]
    return elem, dims


_OUTPUT = {"QLinearAdd": _binary, "QLinearMul": _binary, "QLinearGlobalAveragePool": _pool, "QGemm": _gemm}


def _inference(op_type: str):
    def infer(ctx) -> None:
        """The output's element type and shape (see the module docstring); never raises on odd input."""
        try:
            elem, dims = _OUTPUT[op_type](ctx)
        except (TypeError, ValueError, IndexError):
            return
        if not elem:
            return
        out = onnx.TypeProto()
        out.tensor_type.elem_type = elem
        if dims is not None:
            shape = out.tensor_type.shape
            for d in dims:
                dim = shape.dim.add()
                if isinstance(d, int):
                    dim.dim_value = d
                elif isinstance(d, str):
                    dim.dim_param = d
        ctx.set_output_type(0, out)
    return infer


def _schema(op_type: str) -> onnx.defs.OpSchema:
    param = onnx.defs.OpSchema.FormalParameter
    option = onnx.defs.OpSchema.FormalParameterOption
    inputs, attrs = OPS[op_type]
    quantized = {"A", "B", "X"}
    formal = []
    for name in inputs:
        bare = name.rstrip("?")
        kind = "T" if bare in quantized or bare.endswith("zero_point") else (
            "tensor(int32)" if bare == "C" else "tensor(float)")
        formal.append(param(bare, kind, param_option=option.Optional if name.endswith("?") else option.Single))
    out_type = "tensor(float)" if op_type == "QGemm" else "T"
    schema = onnx.defs.OpSchema(
        op_type, DOMAIN, VERSION, f"onnxruntime's {op_type} (QOperator models); see xgraph.ops.ms_quantized.",
        inputs=formal, outputs=[param("Y", "TY" if op_type == "QGemm" else out_type)],
        type_constraints=[("T", ["tensor(int8)", "tensor(uint8)"], "quantized tensors")] + (
            [("TY", ["tensor(int8)", "tensor(uint8)", "tensor(float)"], "quantized, or float without y_scale")]
            if op_type == "QGemm" else []),
        attributes=[onnx.defs.OpSchema.Attribute(k, onnx.helper.make_attribute(k, v), k) for k, v in attrs.items()])
    schema.set_type_and_shape_inference_function(_inference(op_type))
    return schema


def register_schemas() -> None:
    """Register the schemas with onnx unless onnx (or someone) already has them."""
    for op_type in OPS:
        if not onnx.defs.has(op_type, VERSION, DOMAIN):
            onnx.defs.register_schema(_schema(op_type))


register_schemas()
