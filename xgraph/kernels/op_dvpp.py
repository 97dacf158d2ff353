"""DVPP kernels: JPEG/PNG codecs through Pillow; VPC resize, crop, paste and colour in vectorised numpy.

Each kernel first checks the device rules of `xgraph.ops.dvpp` (a DvppError names the op, the value
and the rule) on DVPP and on the host alike, so a model fails or succeeds the same way on both.
The standard ONNX ImageDecoder keeps the ONNX contract instead: every format ONNX lists, no DVPP rules.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageOps

from xgraph.errors import DvppError
from xgraph.ir.image_reader import decode, open_image
from xgraph.ops.dvpp import COLOR_CODES, DOMAIN, JPEGD, PNGD, VPC, align_up, check_image_rules, crop_box
from xgraph.kernels.registry import builtin_kernel as kernel

DEVICES = ("DVPP", "CPU")
UINT8 = (np.uint8,)


def _uint8(op: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype != np.uint8:
        raise DvppError(f"{op}: input dtype {x.dtype} breaks the DVPP rule: DVPP tensors are uint8")
    return x


def _pad_picture(x: np.ndarray, height: int, width: int) -> np.ndarray:
    """`x` (..., h, w, c) top-left in a zero (..., height, width, c) buffer."""
    if x.shape[-3:-1] == (height, width):
        return x
    out = np.zeros(x.shape[:-3] + (height, width, x.shape[-1]), np.uint8)
    out[..., : x.shape[-3], : x.shape[-2], :] = x
    return out


def _to_stride(x: np.ndarray, aligned: int, rule=VPC) -> np.ndarray:
    """`x` in a buffer padded to the rule's strides when `aligned` is 1."""
    if aligned != 1:
        return x
    sw, sh = rule.stride_align
    return _pad_picture(x, align_up(x.shape[-3], sh), align_up(x.shape[-2], sw))


# ----------------------------------------------------------------------------- codecs

#: Formats each decoder lets the one image reader try: never plugins that shell out (EPS) or that ONNX does not list.
_DVPP_FORMATS = ("JPEG", "PNG")  # the rules then name a JPEG given to PngDecode, and the reverse
_ONNX_FORMATS = ("JPEG", "PNG", "BMP", "TIFF", "WEBP", "JPEG2000", "PPM")


def _open(op: str, encoded, formats) -> Image.Image:
    data = _uint8(op, encoded)
    if data.ndim != 1:
        raise DvppError(f"{op}: input rank {data.ndim} breaks the DVPP rule: encoded pictures are 1-D uint8 bytes")
    return open_image(data.tobytes(), op, formats=formats, error=DvppError)


def _pixels(op: str, img: Image.Image, mode: str, exif: bool = False) -> np.ndarray:
    """Decode `img` fully and convert it to Pillow `mode` ('RGB' or 'L') as an HWC array."""
    pic = decode(img, op, mode, error=DvppError, transform=ImageOps.exif_transpose if exif else None)
    return pic[:, :, None] if pic.ndim == 2 else pic


def _decode(op: str, encoded, pixel_format: str, aligned: int, rule) -> np.ndarray:
    attrs = {"pixel_format": pixel_format, "aligned": aligned}
    check_image_rules(op, np.shape(encoded), attrs)
    img = _open(op, encoded, _DVPP_FORMATS)
    header = {"format": img.format, "mode": img.mode, "width": img.width, "height": img.height,
              "progressive": bool(img.info.get("progressive"))}
    check_image_rules(op, np.shape(encoded), attrs, image=header)
    pic = _pixels(op, img, "L" if pixel_format == "GRAY" else "RGB", exif=op == "JpegDecode")
    if pixel_format == "BGR":
        pic = pic[..., ::-1]
    return np.ascontiguousarray(_to_stride(pic, aligned, rule))


@kernel("JpegDecode", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def jpeg_decode(encoded, *, pixel_format: str = "RGB", aligned: int = 0) -> np.ndarray:
    """JPEGD: baseline JPEG bytes -> HWC picture, EXIF orientation applied as the device does."""
    return _decode("JpegDecode", encoded, pixel_format, aligned, JPEGD)


@kernel("PngDecode", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def png_decode(encoded, *, pixel_format: str = "RGB", aligned: int = 0) -> np.ndarray:
    """PNGD: PNG bytes -> HWC picture; alpha is dropped (RGBA -> RGB) as the device does."""
    return _decode("PngDecode", encoded, pixel_format, aligned, PNGD)


@kernel("ImageDecoder", since=20, devices=DEVICES, dtypes=UINT8)
def image_decoder(encoded, *, pixel_format: str = "RGB") -> np.ndarray:
    """ONNX ImageDecoder-20: JPEG, PNG, BMP, TIFF, WebP, JPEG 2000 or PNM -> HWC RGB, BGR or (H, W, 1) grey."""
    if pixel_format not in ("RGB", "BGR", "Grayscale"):
        raise DvppError(f"ImageDecoder: pixel_format {pixel_format!r} is not one of RGB, BGR, Grayscale")
    img = _open("ImageDecoder", encoded, _ONNX_FORMATS)
    pic = _pixels("ImageDecoder", img, "L" if pixel_format == "Grayscale" else "RGB")
    return np.ascontiguousarray(pic[..., ::-1]) if pixel_format == "BGR" else pic


@kernel("JpegEncode", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def jpeg_encode(image, *, quality: int = 75) -> np.ndarray:
    """JPEGE: HWC RGB or grey picture -> baseline JPEG bytes with 4:2:0 chroma."""
    image = _uint8("JpegEncode", image)
    check_image_rules("JpegEncode", image.shape, {"quality": quality})
    picture = Image.fromarray(np.ascontiguousarray(image[..., 0] if image.shape[-1] == 1 else image))
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=int(quality), subsampling=2)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8).copy()


# ----------------------------------------------------------------------------- VPC geometry

def _source_coords(n_out: int, n_in: int) -> np.ndarray:
    """ONNX half_pixel source coordinates, in float32 exactly as onnxruntime computes them."""
    scale = np.float32(n_out) / np.float32(n_in)
    return (np.arange(n_out, dtype=np.float32) + np.float32(0.5)) / scale - np.float32(0.5)


def _nearest_index(n_out: int, n_in: int) -> np.ndarray:
    """nearest_mode=round_prefer_ceil (C's round: halves away from zero), clamped to the picture."""
    x = _source_coords(n_out, n_in)
    r = np.floor(x)
    r += (x - r) >= 0.5
    return np.clip(r, 0, n_in - 1).astype(np.intp)


def _linear_taps(n_out: int, n_in: int):
    """Both source indices and their 10-bit weights (summing to 1024) per output position."""
    x = np.clip(_source_coords(n_out, n_in), np.float32(0), np.float32(n_in - 1))
    fixed = (x * np.float32(1024)).astype(np.int32)
    i1 = np.minimum(x.astype(np.intp), n_in - 1)
    i2 = np.minimum(i1 + 1, n_in - 1)
    edge = i1 == i2
    w2 = np.where(edge, 512, fixed - i1 * 1024).astype(np.int32)
    w1 = np.where(edge, 512, 1024 - w2).astype(np.int32)
    return i1, i2, w1, w2


def resize_image(x: np.ndarray, height: int, width: int, mode: str = "bilinear") -> np.ndarray:
    """(..., H, W, C) uint8 -> (..., height, width, C), as ONNX Resize half_pixel on uint8 NHWC."""
    in_h, in_w = x.shape[-3], x.shape[-2]
    if (in_h, in_w) == (height, width):
        return x.copy()
    if mode == "nearest":
        return np.take(np.take(x, _nearest_index(height, in_h), axis=-3), _nearest_index(width, in_w), axis=-2)
    y1, y2, wy1, wy2 = _linear_taps(height, in_h)
    x1, x2, wx1, wx2 = _linear_taps(width, in_w)
    wide = x.astype(np.int32)

    def horizontal(rows: np.ndarray) -> np.ndarray:
        return np.take(rows, x1, axis=-2) * wx1[:, None] + np.take(rows, x2, axis=-2) * wx2[:, None]

    top = horizontal(np.take(wide, y1, axis=-3))
    bottom = horizontal(np.take(wide, y2, axis=-3))
    # Integer arithmetic is exact, so this equals the 4-term sum of onnxruntime's uint8 kernel.
    return ((top * wy1[:, None, None] + bottom * wy2[:, None, None]) >> 20).astype(np.uint8)


def _paste(x: np.ndarray, box, canvas_hw, paste, fill_value, mode: str) -> np.ndarray:
    cx, cy, ch, cw = box
    px, py, ph, pw = paste
    patch = resize_image(x[..., cy: cy + ch, cx: cx + cw, :], ph, pw, mode)
    fill = np.asarray(fill_value, dtype=np.uint8).reshape(-1)
    canvas = np.empty(x.shape[:-3] + tuple(canvas_hw) + (x.shape[-1],), np.uint8)
    canvas[...] = fill
    canvas[..., py: py + ph, px: px + pw, :] = patch
    return canvas


@kernel("VpcResize", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def vpc_resize(image, *, height: int, width: int, mode: str = "bilinear", aligned: int = 0) -> np.ndarray:
    """VPC resize of HWC/NHWC pictures (ONNX Resize half_pixel numerics, see xgraph.ops.dvpp)."""
    x = _uint8("VpcResize", image)
    check_image_rules("VpcResize", x.shape, {"height": height, "width": width, "mode": mode, "aligned": aligned})
    return _to_stride(resize_image(x, height, width, mode), aligned)


@kernel("VpcCrop", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def vpc_crop(image, *, x: int, y: int, height: int, width: int, aligned: int = 0) -> np.ndarray:
    """VPC crop of the box at column x, row y, of height x width."""
    pic = _uint8("VpcCrop", image)
    check_image_rules("VpcCrop", pic.shape, {"x": x, "y": y, "height": height, "width": width, "aligned": aligned})
    return _to_stride(np.ascontiguousarray(pic[..., y: y + height, x: x + width, :]), aligned)


@kernel("VpcCropAndPaste", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def vpc_crop_and_paste(image, *, height: int, width: int, crop_x: int = 0, crop_y: int = 0,
                       crop_height: int = 0, crop_width: int = 0, paste_x: int = 0, paste_y: int = 0,
                       paste_height: int = 0, paste_width: int = 0, fill_value=(0,),
                       mode: str = "bilinear", aligned: int = 0) -> np.ndarray:
    """VPC crop-resize-paste: the crop box, resized to the paste box, on a filled canvas."""
    x = _uint8("VpcCropAndPaste", image)
    attrs = dict(height=height, width=width, crop_x=crop_x, crop_y=crop_y, crop_height=crop_height,
                 crop_width=crop_width, paste_x=paste_x, paste_y=paste_y, paste_height=paste_height,
                 paste_width=paste_width, fill_value=fill_value, mode=mode, aligned=aligned)
    check_image_rules("VpcCropAndPaste", x.shape, attrs)
    box = crop_box(attrs, x.shape[-3], x.shape[-2])
    paste = (paste_x, paste_y, paste_height or box[2], paste_width or box[3])
    canvas = _paste(x, box, (height, width), paste, fill_value, mode)
    return _to_stride(canvas, aligned)


@kernel("VpcPad", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def vpc_pad(image, *, top: int = 0, bottom: int = 0, left: int = 0, right: int = 0, fill_value=(0,),
            aligned: int = 0) -> np.ndarray:
    """VPC pad: the picture pasted at (left, top) of a canvas filled with fill_value."""
    x = _uint8("VpcPad", image)
    check_image_rules("VpcPad", x.shape, dict(top=top, bottom=bottom, left=left, right=right,
                                              fill_value=fill_value, aligned=aligned))
    h, w = x.shape[-3], x.shape[-2]
    canvas = _paste(x, (0, 0, h, w), (h + top + bottom, w + left + right), (left, top, h, w),
                    fill_value, "nearest")
    return _to_stride(canvas, aligned)


# ----------------------------------------------------------------------------- colour

_KR, _KB = 0.299, 0.114
_FULL = np.array([[_KR, 1 - _KR - _KB, _KB],
                  [-_KR / (2 - 2 * _KB), -(1 - _KR - _KB) / (2 - 2 * _KB), 0.5],
                  [0.5, -(1 - _KR - _KB) / (2 - 2 * _KR), -_KB / (2 - 2 * _KR)]])
_YUV = {  # color_range -> (RGB -> YUV matrix, YUV offset), BT.601
    "full": (_FULL, np.array([0.0, 128.0, 128.0])),
    "limited": (np.diag([219 / 255, 224 / 255, 224 / 255]) @ _FULL, np.array([16.0, 128.0, 128.0])),
}


def _round_uint8(v: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(v), 0, 255).astype(np.uint8)


def rgb_to_yuv420sp(rgb: np.ndarray, layout: str = "NV12", color_range: str = "full") -> np.ndarray:
    """(..., H, W, 3) RGB -> (..., H*3/2, W) NV12/NV21; chroma is the mean of each 2x2 block."""
    matrix, offset = _YUV[color_range]
    m, off = matrix.astype(np.float32), offset.astype(np.float32)
    f = rgb.astype(np.float32)
    h, w = f.shape[-3], f.shape[-2]
    luma = _round_uint8(f @ m[0] + off[0])
    blocks = f.reshape(f.shape[:-3] + (h // 2, 2, w // 2, 2, 3)).mean(axis=(-4, -2))
    chroma = _round_uint8(blocks @ m[1:].T + off[1:])
    if layout == "NV21":
        chroma = chroma[..., ::-1]
    return np.concatenate([luma, chroma.reshape(f.shape[:-3] + (h // 2, w))], axis=-2)


def yuv420sp_to_rgb(buffer: np.ndarray, layout: str = "NV12", color_range: str = "full") -> np.ndarray:
    """(..., H*3/2, W) NV12/NV21 -> (..., H, W, 3) RGB; each chroma sample covers its 2x2 block."""
    matrix, offset = _YUV[color_range]
    h, w = buffer.shape[-2] * 2 // 3, buffer.shape[-1]
    lead = buffer.shape[:-2]
    chroma = buffer[..., h:, :].reshape(lead + (h // 2, w // 2, 2)).astype(np.float32)
    if layout == "NV21":
        chroma = chroma[..., ::-1]
    chroma = np.repeat(np.repeat(chroma, 2, axis=-3), 2, axis=-2)
    yuv = np.concatenate([buffer[..., :h, :, None].astype(np.float32), chroma], axis=-1) - offset.astype(np.float32)
    return _round_uint8(yuv @ np.linalg.inv(matrix).T.astype(np.float32))


@kernel("CvtColor", domain=DOMAIN, devices=DEVICES, dtypes=UINT8)
def cvt_color(image, *, code: str, color_range: str = "full", aligned: int = 0) -> np.ndarray:
    """VPC colour space conversion; see COLOR_CODES for the codes and xgraph.ops.dvpp for the layouts."""
    x = _uint8("CvtColor", image)
    check_image_rules("CvtColor", x.shape, {"code": code, "color_range": color_range, "aligned": aligned})
    source, target = COLOR_CODES[code]
    # The picture keeps its size, so an aligned (strided) input is already an aligned output.
    if source.startswith("NV"):
        rgb = yuv420sp_to_rgb(x, source, color_range)
        return np.ascontiguousarray(rgb[..., ::-1]) if target == "BGR" else rgb
    rgb = x[..., ::-1] if source == "BGR" else x
    if target.startswith("NV"):
        return rgb_to_yuv420sp(rgb, target, color_range)
    if target == "GRAY":
        return _round_uint8(rgb.astype(np.float32) @ _FULL[0].astype(np.float32))[..., None]
    return np.ascontiguousarray(rgb[..., ::-1])
