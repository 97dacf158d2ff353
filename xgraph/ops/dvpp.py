"""The DVPP op domain ``xgraph.dvpp`` (version 1): ONNX schemas, the device's rules, a model builder.

DVPP is the Ascend AI processor's media engine: JPEGD and PNGD decode, JPEGE encodes, and VPC
resizes, crops, pastes and converts colour before the AI Core runs the network. The ops below
describe those jobs on uint8 pictures, HWC (one picture) or NHWC (a batch). Their kernels
(``xgraph/runners/kernels/op_dvpp.py``) enforce the rules on every device, so a model behaves
on the host exactly as it would on the card, and placement reads the same table (`DVPP_RULES`).

Device rules, as documented for the Ascend 310 (Atlas 200/300/500 inference products);
sizes are width x height:

======  ==============================  ==========================  =======================================
engine  picture size                    strided buffer (aligned=1)  other rules
======  ==============================  ==========================  =======================================
JPEGD   32x32 .. 8192x8192              align(w,128) x align(h,16)  baseline JPEG only: progressive and
                                                                    CMYK streams are rejected; EXIF
                                                                    orientation is applied
PNGD    32x32 .. 4096x4096              align(w,128) x align(h,16)  8-bit grey, RGB, RGBA, palette; the
                                                                    alpha channel is dropped
JPEGE   32x32 .. 8192x8192              -                           width and height even (the encoder
                                                                    reads YUV420SP); quality 1..100
VPC     in 32x6 .. 4096x4096,           align(w,16) x align(h,2)    scale 1/32 .. 16 per axis; crop box
        out (and boxes) 10x6 .. 4096x                               x, y, w, h even; paste box x a
        4096                                                        multiple of 16 and y, w, h even;
                                                                    1, 3 or 4 channels
CSC     as VPC                          as VPC                      the YUV420SP side has even width and
                                                                    height (CvtColor runs on VPC)
======  ==============================  ==========================  =======================================

``aligned`` (default 0): with 0 every tensor is exactly the picture. With 1 tensors are device
buffers laid out with the engine's strides: a decoder returns its picture top-left in an
``align(h,16) x align(w,128)`` buffer; a VPC op requires its input to be such a buffer already
(width a multiple of 16, height a multiple of 2, padding included in the picture) and returns its
output top-left in an ``align(h,2) x align(w,16)`` buffer (CvtColor keeps the size, so its
output is the input's layout). Padding is 0.

VpcCropAndPaste resizes its crop box to the paste box (VpcResize numerics); a 0 crop height or
width reaches the picture's edge rounded down to even. VpcPad pastes the whole picture, so it
follows the paste rules: ``left`` a multiple of 16, ``top`` and the picture's size even. The
standard ONNX ``ImageDecoder`` (the builder's ``image_decode``) keeps the ONNX contract on every
device: any format ONNX lists, no DVPP rules.

VpcResize numerics are those of ONNX ``Resize`` with ``coordinate_transformation_mode=
"half_pixel"``: "bilinear" is ``mode="linear"`` with 10-bit fixed-point weights and truncation,
bit-exact with onnxruntime's uint8 NHWC kernel (its float paths, used for 3-D inputs or when one
scale is 1, and the ONNX reference differ by at most 1); "nearest" is ``mode="nearest",
nearest_mode="round_prefer_ceil"``, i.e. the source pixel ``floor((i + 0.5) * in / out)``.

CvtColor uses BT.601: ``color_range="full"`` (JFIF, what JPEGD produces; Y, U, V in 0..255) or
``"limited"`` (video range; Y 16..235, U, V 16..240). YUV420SP is one uint8 tensor of shape
``(H*3/2, W)`` (leading batch dims allowed): the Y plane, then H/2 rows of interleaved chroma,
U first for NV12 and V first for NV21. Chroma is the mean of each 2x2 block and is replicated back.

Every schema has a Python type and shape inference function, so ``onnx.checker.check_model
(full_check=True)`` and ``onnx.shape_inference.infer_shapes(strict_mode=True)`` handle the ops.
Decoded sizes depend on the data and are left unknown; everything else is inferred.

    >>> b = DvppModelBuilder("pre")
    >>> img = b.jpeg_decode(b.input("jpeg", "uint8", ["N"]))
    >>> model = b.build(outputs=[b.cvt_color(b.resize(img, 224, 224), "RGB2NV12")])
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from xgraph.errors import DvppError

DOMAIN = "xgraph.dvpp"
DOMAIN_VERSION = 1


# ----------------------------------------------------------------------------- device rules

@dataclass(frozen=True)
class DvppRule:
    """What one DVPP engine accepts; sizes are (width, height), as the device documents them."""

    engine: str
    input_min: tuple[int, int]
    input_max: tuple[int, int]
    output_min: tuple[int, int] | None = None
    output_max: tuple[int, int] | None = None
    stride_align: tuple[int, int] = (1, 1)
    scale_range: tuple[float, float] | None = None
    crop_align: tuple[int, int, int, int] | None = None  # x, y, width, height multiples
    paste_align: tuple[int, int, int, int] | None = None
    channels: tuple[int, ...] = (1, 3, 4)
    even_size: bool = False
    quality_range: tuple[int, int] | None = None
    formats: tuple[str, ...] = ()
    modes: tuple[str, ...] = ()  # accepted Pillow modes of the encoded picture
    progressive: bool = True


JPEGD = DvppRule("JPEGD", (32, 32), (8192, 8192), stride_align=(128, 16), channels=(1, 3),
                 formats=("JPEG",), modes=("L", "RGB"), progressive=False)
PNGD = DvppRule("PNGD", (32, 32), (4096, 4096), stride_align=(128, 16), channels=(1, 3),
                formats=("PNG",), modes=("1", "L", "LA", "P", "PA", "RGB", "RGBA"))
JPEGE = DvppRule("JPEGE", (32, 32), (8192, 8192), channels=(1, 3), even_size=True, quality_range=(1, 100))
VPC = DvppRule("VPC", (32, 6), (4096, 4096), output_min=(10, 6), output_max=(4096, 4096),
               stride_align=(16, 2), scale_range=(1 / 32, 16.0), crop_align=(2, 2, 2, 2),
               paste_align=(16, 2, 2, 2))
CSC = DvppRule("CSC", VPC.input_min, VPC.input_max, VPC.output_min, VPC.output_max,
               stride_align=VPC.stride_align, channels=(1, 3), even_size=True)

#: The rule table: DVPP op type -> the engine rule its kernel enforces (placement reads it too).
DVPP_RULES: dict[str, DvppRule] = {
    "JpegDecode": JPEGD, "PngDecode": PNGD, "JpegEncode": JPEGE, "VpcResize": VPC, "VpcCrop": VPC,
    "VpcCropAndPaste": VPC, "VpcPad": VPC, "CvtColor": CSC,
}

#: CvtColor codes -> (source layout, target layout); layouts are RGB, BGR, GRAY, NV12, NV21.
COLOR_CODES: dict[str, tuple[str, str]] = {
    "RGB2NV12": ("RGB", "NV12"), "BGR2NV12": ("BGR", "NV12"), "RGB2NV21": ("RGB", "NV21"),
    "BGR2NV21": ("BGR", "NV21"), "NV122RGB": ("NV12", "RGB"), "NV122BGR": ("NV12", "BGR"),
    "NV212RGB": ("NV21", "RGB"), "NV212BGR": ("NV21", "BGR"), "RGB2BGR": ("RGB", "BGR"),
    "BGR2RGB": ("BGR", "RGB"), "RGB2GRAY": ("RGB", "GRAY"), "BGR2GRAY": ("BGR", "GRAY"),
}
LAYOUT_CHANNELS = {"RGB": 3, "BGR": 3, "GRAY": 1}
PIXEL_FORMATS = {"RGB": 3, "BGR": 3, "GRAY": 1}
RESIZE_MODES = ("bilinear", "nearest")
COLOR_RANGES = ("full", "limited")


def align_up(value: int, multiple: int) -> int:
    """`value` rounded up to a multiple of `multiple`."""
    return -(-value // multiple) * multiple


# ----------------------------------------------------------------------------- op specs

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

def _picture(shape: Sequence | None):
    """(leading dims, H, W, C) of an HWC/NHWC shape, or None when the rank is not 3 or 4."""
    if shape is None or len(shape) not in (3, 4):
        return None
    return list(shape[:-3]), shape[-3], shape[-2], shape[-1]


def _int(d) -> bool:
    return isinstance(d, (int, np.integer)) and not isinstance(d, bool)


def _stride(d, multiple: int, aligned) -> Any:
    return align_up(int(d), multiple) if aligned == 1 and _int(d) else d


def crop_box(attrs: Mapping[str, Any], h, w) -> tuple:
    """(x, y, height, width) of a VpcCropAndPaste crop box; None where the picture size is unknown."""
    # A 0 height or width reaches the picture's edge rounded down to even: the device's crop boxes
    # have even sizes (as JPEGD rounds odd YUV420SP pictures down).
    x, y = attrs.get("crop_x", 0), attrs.get("crop_y", 0)
    ch = attrs.get("crop_height", 0) or ((h - y) // 2 * 2 if _int(h) else None)
    cw = attrs.get("crop_width", 0) or ((w - x) // 2 * 2 if _int(w) else None)
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
    pic = _picture(input_shape)
    if pic is None:
        return None
    lead, h, w, c = pic
    if op_type in ("VpcResize", "VpcCrop", "VpcCropAndPaste"):
        oh, ow = a.get("height"), a.get("width")
    elif op_type == "VpcPad":
        oh = h + a["top"] + a["bottom"] if _int(h) else None
        ow = w + a["left"] + a["right"] if _int(w) else None
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
        return list(shape[:-2]) + [rows * 2 // 3 if _int(rows) else None, w, LAYOUT_CHANNELS[dst]]
    pic = _picture(shape)
    if pic is None:
        return None
    lead, h, w, _ = pic
    if dst.startswith("NV"):
        return lead + [h * 3 // 2 if _int(h) else None, w]
    return lead + [h, w, LAYOUT_CHANNELS[dst]]


# ----------------------------------------------------------------------------- rule checks

def _broke(op: str, subject: str, value, rule: str) -> str:
    return f"{op}: {subject} {value} breaks the DVPP rule: {rule}"


def _size_range(op, what, w, h, lo, hi, engine) -> list[str]:
    if not (_int(w) and _int(h)) or (lo[0] <= w <= hi[0] and lo[1] <= h <= hi[1]):
        return []
    return [_broke(op, f"{what} size", f"{w}x{h} (width x height)",
                   f"{engine} {what}s must be {lo[0]}x{lo[1]} to {hi[0]}x{hi[1]}")]


def _multiples(op, what, values: Mapping[str, Any], multiples: Sequence[int], engine) -> list[str]:
    out = []
    for (name, v), m in zip(values.items(), multiples):
        if _int(v) and m > 1 and v % m:
            out.append(_broke(op, f"{what} {name}", v, f"{engine} needs {what} {name} to be a multiple of {m}"))
    return out


def _choice(op, name, value, allowed) -> list[str]:
    if value in allowed:
        return []
    return [_broke(op, f"attribute {name}", repr(value), f"{name} must be one of {', '.join(map(str, allowed))}")]


def _strided_input(op, rule, h, w, aligned) -> list[str]:
    if aligned != 1:
        return []
    sw, sh = rule.stride_align
    out = []
    if _int(w) and w % sw:
        out.append(_broke(op, "input width", w, f"with aligned=1 the input is a {rule.engine} buffer whose "
                                                 f"width stride is aligned to {sw}"))
    if _int(h) and h % sh:
        out.append(_broke(op, "input height", h, f"with aligned=1 the input is a {rule.engine} buffer whose "
                                                  f"height stride is aligned to {sh}"))
    return out


def _box_inside(op, what, x, y, bh, bw, h, w) -> list[str]:
    if any(not _int(v) for v in (x, y, bh, bw)):
        return []
    if x < 0 or y < 0 or bh <= 0 or bw <= 0 or (_int(w) and x + bw > w) or (_int(h) and y + bh > h):
        return [_broke(op, what, f"(x={x}, y={y}, width={bw}, height={bh})",
                       f"the {what} must be non-empty and inside the {w}x{h} (width x height) picture")]
    return []


def _scale(op, rule, what, src, dst) -> list[str]:
    lo, hi = rule.scale_range
    if _int(src) and _int(dst) and src > 0 and not lo <= dst / src <= hi:
        return [_broke(op, f"{what} scale", f"{dst}/{src}",
                       f"{rule.engine} scales each axis by 1/{round(1 / lo)} to {hi:g}")]
    return []


def image_rule_violations(op_type: str, input_shape: Sequence | None, attrs: Mapping[str, Any],
                          image: Mapping[str, Any] | None = None) -> list[str]:
    """Every DVPP rule broken by this input shape, these attributes and (decoders) `image` header."""
    # Unknown dims (None or symbolic) skip the checks that need them, so placement can ask before
    # shapes are known. `image` holds format, mode, width, height, progressive of an encoded picture.
    rule = DVPP_RULES.get(op_type)
    if rule is None:
        return []
    a = attrs_with_defaults(op_type, attrs)
    missing = [s.name for s in OP_SPECS[op_type].attrs if s.default is REQUIRED and s.name not in a]
    if missing:
        return [f"{op_type}: missing required attribute(s) {', '.join(missing)}"]
    out = _choice(op_type, "aligned", a.get("aligned", 0), (0, 1)) if "aligned" in a else []
    if op_type in ("JpegDecode", "PngDecode"):
        return out + _decoder_violations(op_type, rule, input_shape, a, image)
    if op_type == "JpegEncode":
        return out + _encoder_violations(op_type, rule, input_shape, a)
    if op_type == "CvtColor":
        return out + _cvt_violations(op_type, rule, input_shape, a)
    pic = _picture(input_shape)
    if input_shape is not None and pic is None:
        return out + [_broke(op_type, "input rank", len(input_shape), "VPC takes HWC or NHWC pictures")]
    _, h, w, c = pic if pic else ([], None, None, None)
    if _int(c) and c not in rule.channels:
        out.append(_broke(op_type, "channel count", c, f"VPC pictures have {rule.channels} channels"))
    out += _size_range(op_type, "input", w, h, rule.input_min, rule.input_max, rule.engine)
    out += _strided_input(op_type, rule, h, w, a.get("aligned", 0))
    if op_type == "VpcResize":
        out += _choice(op_type, "mode", a["mode"], RESIZE_MODES)
        out += _size_range(op_type, "output", a["width"], a["height"], rule.output_min, rule.output_max, rule.engine)
        out += _scale(op_type, rule, "width", w, a["width"]) + _scale(op_type, rule, "height", h, a["height"])
    elif op_type == "VpcCrop":
        out += _crop_violations(op_type, rule, (a["x"], a["y"], a["height"], a["width"]), h, w)
    else:
        out += _paste_violations(op_type, rule, a, h, w, c)
    return out


def _crop_violations(op, rule, box, h, w) -> list[str]:
    x, y, bh, bw = box
    out = _box_inside(op, "crop box", x, y, bh, bw, h, w)
    out += _multiples(op, "crop box", {"x": x, "y": y, "width": bw, "height": bh}, rule.crop_align, rule.engine)
    return out + _size_range(op, "crop box", bw, bh, rule.output_min, rule.output_max, rule.engine)


def _paste_violations(op, rule, a, h, w, c) -> list[str]:
    out = []
    if op == "VpcPad":
        pads = (a["top"], a["bottom"], a["left"], a["right"])
        if min(pads) < 0:
            return [_broke(op, "pads (top, bottom, left, right)", pads, "pads are >= 0")]
        box = (0, 0, h, w)
        canvas_h = h + a["top"] + a["bottom"] if _int(h) else None
        canvas_w = w + a["left"] + a["right"] if _int(w) else None
        paste = (a["left"], a["top"], h, w)
    else:
        out += _choice(op, "mode", a["mode"], RESIZE_MODES)
        box = crop_box(a, h, w)
        out += _crop_violations(op, rule, box, h, w)
        canvas_h, canvas_w = a["height"], a["width"]
        paste = (a["paste_x"], a["paste_y"], a["paste_height"] or box[2], a["paste_width"] or box[3])
    fill = [int(v) for v in np.atleast_1d(a["fill_value"])]
    if not all(0 <= v <= 255 for v in fill) or (len(fill) != 1 and _int(c) and len(fill) != c):
        out.append(_broke(op, "fill_value", fill, "one uint8 value, or one per channel"))
    out += _size_range(op, "output", canvas_w, canvas_h, rule.output_min, rule.output_max, rule.engine)
    px, py, ph, pw = paste
    out += _box_inside(op, "paste box", px, py, ph, pw, canvas_h, canvas_w)
    out += _multiples(op, "paste box", {"x": px, "y": py, "width": pw, "height": ph}, rule.paste_align, rule.engine)
    out += _size_range(op, "paste box", pw, ph, rule.output_min, rule.output_max, rule.engine)
    return out + _scale(op, rule, "width", box[3], pw) + _scale(op, rule, "height", box[2], ph)


def _cvt_violations(op, rule, shape, a) -> list[str]:
    out = _choice(op, "code", a["code"], tuple(COLOR_CODES))
    out += _choice(op, "color_range", a["color_range"], COLOR_RANGES)
    if out or shape is None:
        return out
    src, dst = COLOR_CODES[a["code"]]
    if src.startswith("NV"):
        if len(shape) < 2:
            return [_broke(op, "input rank", len(shape), "a YUV420SP tensor is (..., H*3/2, W)")]
        rows, w = shape[-2], shape[-1]
        if _int(rows) and rows % 3:
            return [_broke(op, "YUV420SP rows", rows, "a YUV420SP tensor has H*3/2 rows with H even")]
        h = rows * 2 // 3 if _int(rows) else None
    else:
        pic = _picture(shape)
        if pic is None:
            return [_broke(op, "input rank", len(shape), "VPC takes HWC or NHWC pictures")]
        _, h, w, c = pic
        if _int(c) and c != LAYOUT_CHANNELS[src]:
            out.append(_broke(op, "channel count", c, f"{a['code']} reads {LAYOUT_CHANNELS[src]}-channel pictures"))
    if rule.even_size and (src.startswith("NV") or dst.startswith("NV")):
        out += [_broke(op, f"YUV420SP {n}", v, f"YUV420SP {n}s must be even")
                for n, v in (("width", w), ("height", h)) if _int(v) and v % 2]
    out += _size_range(op, "input", w, h, rule.input_min, rule.input_max, rule.engine)
    return out + _strided_input(op, rule, h, w, a["aligned"])


def _decoder_violations(op, rule, shape, a, image) -> list[str]:
    out = _choice(op, "pixel_format", a["pixel_format"], tuple(PIXEL_FORMATS))
    if shape is not None and len(shape) != 1:
        out.append(_broke(op, "input rank", len(shape), "encoded pictures are 1-D uint8 byte tensors"))
    if image is None:
        return out
    if image.get("format") not in rule.formats:
        return out + [_broke(op, "input format", image.get("format"),
                              f"{rule.engine} decodes {'/'.join(rule.formats)} only")]
    if image.get("mode") not in rule.modes:
        out.append(_broke(op, "picture mode", image.get("mode"),
                          f"{rule.engine} decodes {', '.join(rule.modes)} pictures"))
    if image.get("progressive") and not rule.progressive:
        out.append(_broke(op, "stream", "progressive JPEG", f"{rule.engine} decodes baseline (sequential) JPEG only"))
    return out + _size_range(op, "input", image.get("width"), image.get("height"),
                             rule.input_min, rule.input_max, rule.engine)


def _encoder_violations(op, rule, shape, a) -> list[str]:
    lo, hi = rule.quality_range
    out = [] if lo <= a["quality"] <= hi else [_broke(op, "quality", a["quality"], f"quality is {lo}..{hi}")]
    pic = _picture(shape)
    if shape is not None and (pic is None or len(shape) != 3):
        return out + [_broke(op, "input rank", len(shape), "JPEGE encodes one HWC picture")]
    if pic is None:
        return out
    _, h, w, c = pic
    if _int(c) and c not in rule.channels:
        out.append(_broke(op, "channel count", c, "JPEGE encodes grey (1) or RGB (3) pictures"))
    if rule.even_size:
        out += [_broke(op, n, v, "JPEGE reads YUV420SP, whose width and height are even")
                for n, v in (("width", w), ("height", h)) if _int(v) and v % 2]
    return out + _size_range(op, "input", w, h, rule.input_min, rule.input_max, rule.engine)


def check_image_rules(op_type: str, input_shape: Sequence | None, attrs: Mapping[str, Any],
                      image: Mapping[str, Any] | None = None) -> None:
    """Raise DvppError naming the op, the value and the rule when `image_rule_violations` finds any."""
    problems = image_rule_violations(op_type, input_shape, attrs, image)
    if problems:
        raise DvppError("; ".join(problems))


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


def _shape_of(type_proto) -> list | None:
    if type_proto is None or not type_proto.HasField("tensor_type") or not type_proto.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in type_proto.tensor_type.shape.dim]


def _inference(op_type: str):
    def infer(ctx) -> None:
        """Output uint8 with the shape `output_shape` gives; never raises on odd input."""
        in_type = ctx.get_input_type(0) if ctx.get_num_inputs() > 0 and ctx.has_input(0) else None
        try:
            shape = output_shape(op_type, _shape_of(in_type), _node_attrs(ctx, op_type))
        except (TypeError, ValueError, KeyError):  # attributes of the wrong type: the checker reports them
            shape = None
        out = onnx.TypeProto()
        out.tensor_type.elem_type = onnx.TensorProto.UINT8
        if shape is not None:
            dims = out.tensor_type.shape.dim
            for d in shape:
                dim = dims.add()
                if _int(d):
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


# ----------------------------------------------------------------------------- builder

class DvppModelBuilder:
    """Write a preprocessing model in a few lines; each method returns its output's name, `build` the model."""

    def __init__(self, name: str, opset: int = 21) -> None:
        self.name, self.opset = name, opset
        self.inputs: list[onnx.ValueInfoProto] = []
        self.nodes: list[onnx.NodeProto] = []
        self._used: set[str] = set()

    def _fresh(self, stem: str) -> str:
        i = 0
        while f"{stem}_{i}" in self._used:
            i += 1
        self._used.add(f"{stem}_{i}")
        return f"{stem}_{i}"

    def input(self, name: str, dtype: str = "uint8", shape: Sequence | None = None) -> str:
        """Declare a graph input; `shape` holds ints, symbolic names or None."""
        elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        self._used.add(name)
        return name

    def node(self, op_type: str, inputs: Sequence[str], *, domain: str = "", name: str | None = None,
             **attrs) -> str:
        """Add any single-output node (a standard op unless `domain` says otherwise)."""
        out = name or self._fresh(op_type.lower())
        self._used.add(out)
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=self._fresh(f"{op_type}_node"),
                                           domain=domain, **attrs))
        return out

    def _dvpp(self, op_type: str, image: str, name: str | None, **attrs) -> str:
        return self.node(op_type, [image], domain=DOMAIN, name=name, **attrs)

    def jpeg_decode(self, encoded: str, pixel_format: str = "RGB", aligned: int = 0, name: str | None = None) -> str:
        """JpegDecode: JPEG bytes -> HWC picture."""
        return self._dvpp("JpegDecode", encoded, name, pixel_format=pixel_format, aligned=aligned)

    def png_decode(self, encoded: str, pixel_format: str = "RGB", aligned: int = 0, name: str | None = None) -> str:
        """PngDecode: PNG bytes -> HWC picture."""
        return self._dvpp("PngDecode", encoded, name, pixel_format=pixel_format, aligned=aligned)

    def image_decode(self, encoded: str, pixel_format: str = "RGB", name: str | None = None) -> str:
        """The standard ONNX ImageDecoder (opset >= 20): any common format -> HWC picture."""
        return self.node("ImageDecoder", [encoded], name=name, pixel_format=pixel_format)

    def jpeg_encode(self, image: str, quality: int = 75, name: str | None = None) -> str:
        """JpegEncode: HWC picture -> JPEG bytes."""
        return self._dvpp("JpegEncode", image, name, quality=quality)

    def resize(self, image: str, height: int, width: int, mode: str = "bilinear", aligned: int = 0,
               name: str | None = None) -> str:
        """VpcResize to height x width."""
        return self._dvpp("VpcResize", image, name, height=height, width=width, mode=mode, aligned=aligned)

    def crop(self, image: str, x: int, y: int, height: int, width: int, aligned: int = 0,
             name: str | None = None) -> str:
        """VpcCrop of the box at (x, y) of height x width."""
        return self._dvpp("VpcCrop", image, name, x=x, y=y, height=height, width=width, aligned=aligned)

    def crop_and_paste(self, image: str, height: int, width: int, crop: Sequence[int] = (0, 0, 0, 0),
                       paste: Sequence[int] = (0, 0, 0, 0), fill_value: int | Sequence[int] = 0,
                       mode: str = "bilinear", aligned: int = 0, name: str | None = None) -> str:
        """VpcCropAndPaste: crop (x, y, height, width) -> paste (x, y, height, width) on a height x width canvas."""
        (cx, cy, ch, cw), (px, py, ph, pw) = crop, paste
        return self._dvpp("VpcCropAndPaste", image, name, height=height, width=width, crop_x=cx, crop_y=cy,
                          crop_height=ch, crop_width=cw, paste_x=px, paste_y=py, paste_height=ph,
                          paste_width=pw, fill_value=list(np.atleast_1d(fill_value)), mode=mode, aligned=aligned)

    def pad(self, image: str, top: int = 0, bottom: int = 0, left: int = 0, right: int = 0,
            fill_value: int | Sequence[int] = 0, aligned: int = 0, name: str | None = None) -> str:
        """VpcPad: the picture in a larger canvas filled with `fill_value`."""
        return self._dvpp("VpcPad", image, name, top=top, bottom=bottom, left=left, right=right,
                          fill_value=list(np.atleast_1d(fill_value)), aligned=aligned)

    def cvt_color(self, image: str, code: str, color_range: str = "full", aligned: int = 0,
                  name: str | None = None) -> str:
        """CvtColor with a code such as RGB2NV12 or NV122BGR."""
        return self._dvpp("CvtColor", image, name, code=code, color_range=color_range, aligned=aligned)

    def build(self, outputs: Sequence[str], check: bool = True) -> onnx.ModelProto:
        """The model with `outputs` typed by shape inference; checked (onnx + DVPP rules) unless check=False."""
        graph = helper.make_graph(self.nodes, self.name, self.inputs, [onnx.ValueInfoProto(name=o) for o in outputs])
        opsets = [helper.make_opsetid("", self.opset), helper.make_opsetid(DOMAIN, DOMAIN_VERSION)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="xgraph")
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=check)
        types = {v.name: v.type for v in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]}
        for out in model.graph.output:
            if out.name not in types or not types[out.name].HasField("tensor_type"):
                raise DvppError(f"model {self.name!r}: output {out.name!r} is neither an input nor made by a node")
            out.type.CopyFrom(types[out.name])
        if check:
            self._check_rules(inferred)
            onnx.checker.check_model(model, full_check=True)
        return model

    @staticmethod
    def _check_rules(inferred: onnx.ModelProto) -> None:
        shapes = {v.name: _shape_of(v.type) for v in list(inferred.graph.input) + list(inferred.graph.value_info)}
        for node in inferred.graph.node:
            if node.domain != DOMAIN:
                continue
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
            problems = image_rule_violations(node.op_type, shapes.get(node.input[0]), attrs)
            if problems:
                raise DvppError(f"node {node.name!r}: " + "; ".join(problems))
