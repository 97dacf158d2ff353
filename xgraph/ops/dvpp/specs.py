"""The ops of the ``xgraph.dvpp`` domain: attributes, output shapes, and their ONNX schemas."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from xgraph.ops.dvpp.engines import COLOR_CODES, DVPP_RULES, LAYOUT_CHANNELS, PIXEL_FORMATS, align_up

DOMAIN = "xgraph.dvpp"
DOMAIN_VERSION = 1


REQUIRED = object()


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: ONNX type name ('int', 'ints', 'string'), default (or REQUIRED), meaning."""

    name: str
    kind: str
    default: Any
    doc: str


@dataclass(frozen=True)
class OpSpec:
    """One op of the domain: its doc, input and output names, and attributes."""

    doc: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: tuple[AttrSpec, ...] = field(default_factory=tuple)


_ALIGNED = AttrSpec("aligned", "int", 0, "1: tensors are strided device buffers (see module doc)")
_DECODE = (AttrSpec("pixel_format", "string", "RGB", "RGB, BGR or GRAY"),
           AttrSpec("aligned", "int", 0, "1: pad the output to the decoder's strides with 0"))
_MODE = AttrSpec("mode", "string", "bilinear", "bilinear or nearest (ONNX Resize half_pixel)")
_FILL = AttrSpec("fill_value", "ints", [0], "canvas colour: one value or one per channel")

OP_SPECS: dict[str, OpSpec] = {
    "JpegDecode": OpSpec("Decode a baseline JPEG (1-D uint8 bytes) into an HWC uint8 picture on JPEGD.",
                         ("encoded",), ("image",), _DECODE),
    "PngDecode": OpSpec("Decode a PNG (1-D uint8 bytes) into an HWC uint8 picture on PNGD.",
                        ("encoded",), ("image",), _DECODE),
    "JpegEncode": OpSpec("Encode an HWC uint8 picture (RGB or grey) into JPEG bytes (4:2:0) on JPEGE.",
                         ("image",), ("encoded",),
                         (AttrSpec("quality", "int", 75, "JPEG quality 1..100"),)),
    "VpcResize": OpSpec("Resize HWC/NHWC uint8 pictures on VPC (ONNX Resize half_pixel numerics).",
                        ("image",), ("resized",),
                        (AttrSpec("height", "int", REQUIRED, "output height"),
                         AttrSpec("width", "int", REQUIRED, "output width"), _MODE, _ALIGNED)),
    "VpcCrop": OpSpec("Crop the box (x, y, width, height) out of HWC/NHWC uint8 pictures on VPC.",
                      ("image",), ("cropped",),
                      (AttrSpec("x", "int", REQUIRED, "left column of the box"),
                       AttrSpec("y", "int", REQUIRED, "top row of the box"),
                       AttrSpec("height", "int", REQUIRED, "box height"),
                       AttrSpec("width", "int", REQUIRED, "box width"), _ALIGNED)),
    "VpcCropAndPaste": OpSpec(
        "Crop a box, resize it to the paste box and paste it into a filled canvas on VPC.",
        ("image",), ("canvas",),
        (AttrSpec("height", "int", REQUIRED, "canvas height"),
         AttrSpec("width", "int", REQUIRED, "canvas width"),
         AttrSpec("crop_x", "int", 0, "left column of the crop box"),
         AttrSpec("crop_y", "int", 0, "top row of the crop box"),
         AttrSpec("crop_height", "int", 0, "crop box height; 0: to the bottom edge (rounded down to even)"),
         AttrSpec("crop_width", "int", 0, "crop box width; 0: to the right edge (rounded down to even)"),
         AttrSpec("paste_x", "int", 0, "left column of the paste box in the canvas"),
         AttrSpec("paste_y", "int", 0, "top row of the paste box in the canvas"),
         AttrSpec("paste_height", "int", 0, "paste box height; 0: the crop height"),
         AttrSpec("paste_width", "int", 0, "paste box width; 0: the crop width"),
         _FILL, _MODE, _ALIGNED)),
    "VpcPad": OpSpec("Place HWC/NHWC uint8 pictures in a larger filled canvas on VPC (a paste).",
                     ("image",), ("padded",),
                     (AttrSpec("top", "int", 0, "rows above"), AttrSpec("bottom", "int", 0, "rows below"),
                      AttrSpec("left", "int", 0, "columns left"), AttrSpec("right", "int", 0, "columns right"),
                      _FILL, _ALIGNED)),
    "CvtColor": OpSpec("Convert colour (RGB/BGR/GRAY <-> YUV420SP NV12/NV21, BT.601) on VPC.",
                       ("image",), ("converted",),
                       (AttrSpec("code", "string", REQUIRED, ", ".join(COLOR_CODES)),
                        AttrSpec("color_range", "string", "full", "BT.601 full or limited range"),
                        _ALIGNED)),
}


def attrs_with_defaults(op_type: str, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """`attrs` completed with the schema defaults of `op_type` (required ones left out if absent)."""
    out = {a.name: a.default for a in OP_SPECS[op_type].attrs if a.default is not REQUIRED}
    out.update(attrs)
    return out


# ----------------------------------------------------------------------------- shapes

def picture_dims(shape: Sequence | None):
    """(leading dims, H, W, C) of an HWC/NHWC shape, or None when the rank is not 3 or 4."""
    if shape is None or len(shape) not in (3, 4):
        return None
    return list(shape[:-3]), shape[-3], shape[-2], shape[-1]


def known_int(d) -> bool:
    """True for a known (integer) dimension, False for None, symbolic names and bools."""
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool)


def _stride(d, multiple: int, aligned) -> Any:
    return align_up(int(d), multiple) if aligned == 1 and known_int(d) else d


def crop_box(attrs: Mapping[str, Any], h, w) -> tuple:
    """(x, y, height, width) of a VpcCropAndPaste crop box; None where the picture size is unknown."""
    # A 0 height or width reaches the picture's edge rounded down to even: the device's crop boxes
    # have even sizes (as JPEGD rounds odd YUV420SP pictures down).
    x, y = attrs.get("crop_x", 0), attrs.get("crop_y", 0)
    ch = attrs.get("crop_height", 0) or ((h - y) // 2 * 2 if known_int(h) else None)
    cw = attrs.get("crop_width", 0) or ((w - x) // 2 * 2 if known_int(w) else None)
    return x, y, ch, cw


def output_shape(op_type: str, input_shape: Sequence | None, attrs: Mapping[str, Any]) -> list | None:
    """The output shape (dims int, symbolic str or None) for `input_shape`, or None when unknown."""
    a = attrs_with_defaults(op_type, attrs)
    aligned = a.get("aligned", 0)
    if op_type in ("JpegDecode", "PngDecode"):
        return [None, None, PIXEL_FORMATS.get(a["pixel_format"])]
    if op_type == "JpegEncode":
        return [None]
    if op_type == "CvtColor":
        return _cvt_shape(input_shape, a)
    pic = picture_dims(input_shape)
    if pic is None:
        return None
    lead, h, w, c = pic
    if op_type in ("VpcResize", "VpcCrop", "VpcCropAndPaste"):
        oh, ow = a.get("height"), a.get("width")
    elif op_type == "VpcPad":
        oh = h + a["top"] + a["bottom"] if known_int(h) else None
        ow = w + a["left"] + a["right"] if known_int(w) else None
    else:
        return None
    sw, sh = DVPP_RULES[op_type].stride_align
    return lead + [_stride(oh, sh, aligned), _stride(ow, sw, aligned), c]


def _cvt_shape(shape, a) -> list | None:
    """CvtColor keeps the picture size (an aligned input is already strided), so only the layout changes."""
    src, dst = COLOR_CODES.get(a.get("code"), (None, None))
    if src is None or shape is None:
        return None
    if src.startswith("NV"):
        if len(shape) < 2:
            return None
        rows, w = shape[-2], shape[-1]
        return list(shape[:-2]) + [rows * 2 // 3 if known_int(rows) else None, w, LAYOUT_CHANNELS[dst]]
    pic = picture_dims(shape)
    if pic is None:
        return None
    lead, h, w, _ = pic
    if dst.startswith("NV"):
        return lead + [h * 3 // 2 if known_int(h) else None, w]
    return lead + [h, w, LAYOUT_CHANNELS[dst]]


# ----------------------------------------------------------------------------- schemas

_ATTR_TYPES = {"int": onnx.defs.OpSchema.AttrType.INT, "ints": onnx.defs.OpSchema.AttrType.INTS,
               "string": onnx.defs.OpSchema.AttrType.STRING}


def _schema_attr(a: AttrSpec) -> onnx.defs.OpSchema.Attribute:
    if a.default is REQUIRED:
        return onnx.defs.OpSchema.Attribute(a.name, _ATTR_TYPES[a.kind], a.doc, required=True)
    return onnx.defs.OpSchema.Attribute(a.name, helper.make_attribute(a.name, a.default), a.doc)


def _node_attrs(ctx, op_type: str) -> dict[str, Any]:
    out = {}
    for spec in OP_SPECS[op_type].attrs:
        proto = ctx.get_attribute(spec.name)
        if proto is not None and proto.type == _ATTR_TYPES[spec.kind].value:  # wrong types: the checker says so
            value = helper.get_attribute_value(proto)
            out[spec.name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
    return out


def proto_shape(type_proto) -> list | None:
    """The dims of a TypeProto's tensor shape (int, symbolic str or None), or None when it has none."""
    if type_proto is None or not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in type_proto.tensor_type.shape.dim]


def _inference(op_type: str):
    def infer(ctx) -> None:
        """Output uint8 with the shape `output_shape` gives; never raises on odd input."""
        in_type = ctx.get_input_type(0) if ctx.get_num_inputs() > 0 and ctx.has_input(0) else None
        try:
            shape = output_shape(op_type, proto_shape(in_type), _node_attrs(ctx, op_type))
        except (TypeError, ValueError, KeyError):  # attributes of the wrong type: the checker reports them
            shape = None
        out = onnx.TypeProto()
        out.tensor_type.elem_type = onnx.TensorProto.UINT8
        if shape is not None:
            dims = out.tensor_type.shape.dim
            for d in shape:
                dim = dims.add()
                if known_int(d):
                    dim.dim_value = int(d)
                elif isinstance(d, str):
                    dim.dim_param = d
        ctx.set_output_type(0, out)

    return infer


def _make_schema(op_type: str, spec: OpSpec) -> onnx.defs.OpSchema:
    param = onnx.defs.OpSchema.FormalParameter
    schema = onnx.defs.OpSchema(
        op_type, DOMAIN, DOMAIN_VERSION, spec.doc,
        inputs=[param(n, "T") for n in spec.inputs], outputs=[param(n, "T") for n in spec.outputs],
        type_constraints=[("T", ["tensor(uint8)"], "pictures and encoded bytes are uint8")],
        attributes=[_schema_attr(a) for a in spec.attrs])
    schema.set_type_and_shape_inference_function(_inference(op_type))
    return schema


def register_schemas() -> None:
    """Register every schema of the domain with onnx (idempotent)."""
    for op_type, spec in OP_SPECS.items():
        if not onnx.defs.has(op_type, DOMAIN_VERSION, DOMAIN):
            onnx.defs.register_schema(_make_schema(op_type, spec))


register_schemas()
