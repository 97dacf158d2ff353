"""Checks of the DVPP engines' rules: every rule an op's input shape, attributes and picture break."""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from xgraph.errors import DvppError
from xgraph.ops.dvpp.engines import COLOR_CODES, COLOR_RANGES, DVPP_RULES, LAYOUT_CHANNELS, PIXEL_FORMATS, RESIZE_MODES
from xgraph.ops.dvpp.specs import OP_SPECS, REQUIRED, attrs_with_defaults, crop_box, known_int, picture_dims


def _broke(op: str, subject: str, value, rule: str) -> str:
    return f"{op}: {subject} {value} breaks the DVPP rule: {rule}"


def _size_range(op, what, w, h, lo, hi, engine) -> list[str]:
    if not (known_int(w) and known_int(h)) or (lo[0] <= w <= hi[0] and lo[1] <= h <= hi[1]):
        return []
    return [_broke(op, f"{what} size", f"{w}x{h} (width x height)",
                   f"{engine} {what}s must be {lo[0]}x{lo[1]} to {hi[0]}x{hi[1]}")]


def _multiples(op, what, values: Mapping[str, Any], multiples: Sequence[int], engine) -> list[str]:
    out = []
    for (name, v), m in zip(values.items(), multiples):
        if known_int(v) and m > 1 and v % m:
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
    if known_int(w) and w % sw:
        out.append(_broke(op, "input width", w, f"with aligned=1 the input is a {rule.engine} buffer whose "
                                                 f"width stride is aligned to {sw}"))
    if known_int(h) and h % sh:
        out.append(_broke(op, "input height", h, f"with aligned=1 the input is a {rule.engine} buffer whose "
                                                  f"height stride is aligned to {sh}"))
    return out


def _box_inside(op, what, x, y, bh, bw, h, w) -> list[str]:
    if any(not known_int(v) for v in (x, y, bh, bw)):
        return []
    if x < 0 or y < 0 or bh <= 0 or bw <= 0 or (known_int(w) and x + bw > w) or (known_int(h) and y + bh > h):
        return [_broke(op, what, f"(x={x}, y={y}, width={bw}, height={bh})",
                       f"the {what} must be non-empty and inside the {w}x{h} (width x height) picture")]
    return []


def _scale(op, rule, what, src, dst) -> list[str]:
    lo, hi = rule.scale_range
    if known_int(src) and known_int(dst) and src > 0 and not lo <= dst / src <= hi:
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
    pic = picture_dims(input_shape)
    if input_shape is not None and pic is None:
        return out + [_broke(op_type, "input rank", len(input_shape), "VPC takes HWC or NHWC pictures")]
    _, h, w, c = pic if pic else ([], None, None, None)
    if known_int(c) and c not in rule.channels:
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
        canvas_h = h + a["top"] + a["bottom"] if known_int(h) else None
        canvas_w = w + a["left"] + a["right"] if known_int(w) else None
        paste = (a["left"], a["top"], h, w)
    else:
        out += _choice(op, "mode", a["mode"], RESIZE_MODES)
        box = crop_box(a, h, w)
        out += _crop_violations(op, rule, box, h, w)
        canvas_h, canvas_w = a["height"], a["width"]
        paste = (a["paste_x"], a["paste_y"], a["paste_height"] or box[2], a["paste_width"] or box[3])
    fill = [int(v) for v in np.atleast_1d(a["fill_value"])]
    if not all(0 <= v <= 255 for v in fill) or (len(fill) != 1 and known_int(c) and len(fill) != c):
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
        if known_int(rows) and rows % 3:
            return [_broke(op, "YUV420SP rows", rows, "a YUV420SP tensor has H*3/2 rows with H even")]
        h = rows * 2 // 3 if known_int(rows) else None
    else:
        pic = picture_dims(shape)
        if pic is None:
            return [_broke(op, "input rank", len(shape), "VPC takes HWC or NHWC pictures")]
        _, h, w, c = pic
        if known_int(c) and c != LAYOUT_CHANNELS[src]:
            out.append(_broke(op, "channel count", c, f"{a['code']} reads {LAYOUT_CHANNELS[src]}-channel pictures"))
    if rule.even_size and (src.startswith("NV") or dst.startswith("NV")):
        out += [_broke(op, f"YUV420SP {n}", v, f"YUV420SP {n}s must be even")
                for n, v in (("width", w), ("height", h)) if known_int(v) and v % 2]
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
    pic = picture_dims(shape)
    if shape is not None and (pic is None or len(shape) != 3):
        return out + [_broke(op, "input rank", len(shape), "JPEGE encodes one HWC picture")]
    if pic is None:
        return out
    _, h, w, c = pic
    if known_int(c) and c not in rule.channels:
        out.append(_broke(op, "channel count", c, "JPEGE encodes grey (1) or RGB (3) pictures"))
    if rule.even_size:
        out += [_broke(op, n, v, "JPEGE reads YUV420SP, whose width and height are even")
                for n, v in (("width", w), ("height", h)) if known_int(v) and v % 2]
    return out + _size_range(op, "input", w, h, rule.input_min, rule.input_max, rule.engine)


def check_image_rules(op_type: str, input_shape: Sequence | None, attrs: Mapping[str, Any],
                      image: Mapping[str, Any] | None = None) -> None:
    """Raise DvppError naming the op, the value and the rule when `image_rule_violations` finds any."""
    problems = image_rule_violations(op_type, input_shape, attrs, image)
    if problems:
        raise DvppError("; ".join(problems))
