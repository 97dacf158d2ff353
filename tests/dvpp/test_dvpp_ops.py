"""DVPP ops: codecs vs Pillow, VPC vs onnxruntime and numpy oracles, every device rule, schemas, builder."""
from __future__ import annotations

import inspect
import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from xgraph.errors import DvppError, KernelError
from xgraph.ops import dvpp
from xgraph.ops.dvpp import DOMAIN, DVPP_RULES, OP_SPECS, DvppModelBuilder, image_rule_violations, output_shape
from xgraph.kernels import load_builtin_kernels
from xgraph.kernels import op_dvpp as k
from testing.kernels import run_node


# ----------------------------------------------------------------------------- helpers

def picture(h: int, w: int, c: int = 3, seed: int = 0) -> np.ndarray:
    """A smooth test picture (gradients plus a soft pattern), which JPEG keeps close."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    base = [xx / max(w - 1, 1) * 255, yy / max(h - 1, 1) * 255, 127 + 100 * np.sin((xx + yy + seed) / 9)]
    return np.clip(np.stack(base[:c] if c <= 3 else base + [xx * 0 + 200], axis=-1), 0, 255).astype(np.uint8)


def noise(shape, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)


def encode(arr: np.ndarray, fmt: str, **save) -> np.ndarray:
    img = Image.fromarray(np.ascontiguousarray(arr[..., 0] if arr.ndim == 3 and arr.shape[-1] == 1 else arr))
    buffer = io.BytesIO()
    img.save(buffer, format=fmt, **save)
    return np.frombuffer(buffer.getvalue(), dtype=np.uint8)


def pillow_decode(data: np.ndarray, mode: str) -> np.ndarray:
    out = np.asarray(Image.open(io.BytesIO(data.tobytes())).convert(mode))
    return out[..., None] if out.ndim == 2 else out


def ort_resize(x: np.ndarray, sizes, mode: str) -> np.ndarray:
    attrs = {"coordinate_transformation_mode": "half_pixel"}
    if mode == "nearest":
        attrs["nearest_mode"] = "round_prefer_ceil"
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear" if mode == "bilinear" else mode,
                            **attrs)
    graph = helper.make_graph([node], "resize", [helper.make_tensor_value_info("x", TensorProto.UINT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              initializer=[numpy_helper.from_array(np.array(sizes, np.int64), "sizes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


# ----------------------------------------------------------------------------- decoders

@pytest.mark.parametrize("h, w", [(32, 32), (45, 67), (33, 100), (240, 320)])
@pytest.mark.parametrize("pixel_format", ["RGB", "BGR", "GRAY"])
def test_jpeg_decode_matches_pillow(h, w, pixel_format):
    src = picture(h, w)
    data = encode(src, "JPEG", quality=95)
    out = k.jpeg_decode(data, pixel_format=pixel_format)
    oracle = pillow_decode(data, "L" if pixel_format == "GRAY" else "RGB")
    np.testing.assert_array_equal(out, oracle[..., ::-1] if pixel_format == "BGR" else oracle)
    assert out.shape == (h, w, 1 if pixel_format == "GRAY" else 3) and out.dtype == np.uint8
    if pixel_format == "RGB":
        assert np.abs(out.astype(int) - src).mean() < 4  # and it is really the picture we encoded


def test_greyscale_jpeg_decodes_to_grey_and_to_equal_rgb_channels():
    src = picture(40, 50)[..., :1]
    data = encode(src, "JPEG", quality=95)
    grey = k.jpeg_decode(data, pixel_format="GRAY")
    rgb = k.jpeg_decode(data, pixel_format="RGB")
    np.testing.assert_array_equal(grey, pillow_decode(data, "L"))
    assert rgb.shape == (40, 50, 3) and (rgb == grey).all()


@pytest.mark.parametrize("h, w", [(32, 32), (37, 91), (64, 129)])
def test_png_decode_is_lossless(h, w):
    src = noise((h, w, 3), seed=h)
    data = encode(src, "PNG")
    np.testing.assert_array_equal(k.png_decode(data), src)
    np.testing.assert_array_equal(k.png_decode(data, pixel_format="BGR"), src[..., ::-1])


def test_png_rgba_grey_and_palette_decode_to_rgb():
    rgba = noise((40, 41, 4), seed=1)
    np.testing.assert_array_equal(k.png_decode(encode(rgba, "PNG")), rgba[..., :3])  # alpha dropped
    grey = noise((40, 41, 1), seed=2)
    out = k.png_decode(encode(grey, "PNG"))
    assert out.shape == (40, 41, 3) and (out == grey).all()
    palette = Image.fromarray(picture(40, 41)).convert("P")
    buffer = io.BytesIO()
    palette.save(buffer, format="PNG")
    data = np.frombuffer(buffer.getvalue(), np.uint8)
    np.testing.assert_array_equal(k.png_decode(data), np.asarray(palette.convert("RGB")))


@pytest.mark.parametrize("op, fmt, h, w, stride", [
    ("jpeg", "JPEG", 45, 67, (48, 128)), ("jpeg", "JPEG", 32, 128, (32, 128)), ("jpeg", "JPEG", 100, 130, (112, 256)),
    ("png", "PNG", 37, 91, (48, 128)), ("png", "PNG", 33, 300, (48, 384)),
])
def test_aligned_decode_pads_to_the_decoder_strides(op, fmt, h, w, stride):
    decode = k.jpeg_decode if op == "jpeg" else k.png_decode
    data = encode(picture(h, w), fmt, quality=90) if fmt == "JPEG" else encode(picture(h, w), fmt)
    plain, padded = decode(data), decode(data, aligned=1)
    assert padded.shape == stride + (3,)
    np.testing.assert_array_equal(padded[:h, :w], plain)
    assert not padded[h:].any() and not padded[:, w:].any()
    assert DVPP_RULES[f"{op.capitalize()}Decode"].stride_align == (128, 16)


def test_jpeg_decode_applies_exif_orientation_like_jpegd():
    src = picture(40, 64)
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise on display
    data = encode(src, "JPEG", quality=95, exif=exif.tobytes())
    out = k.jpeg_decode(data)
    assert out.shape == (64, 40, 3)
    assert np.abs(out.astype(int) - np.rot90(src, -1)).mean() < 4
    assert k.image_decoder(data).shape == (40, 64, 3)  # ONNX ImageDecoder leaves orientation alone


@pytest.mark.parametrize("damage", ["truncated", "half", "garbage", "header", "empty", "png_cut"])
def test_damaged_bytes_raise_dvpp_error_not_pillow_errors(damage):
    data = encode(picture(64, 64), "JPEG", quality=90)
    bad = {
        "truncated": data[: len(data) - 200],
        "half": data[: len(data) // 2],
        "garbage": noise(500, seed=3),
        "header": np.concatenate([np.array([0xFF, 0xD8, 0xFF, 0xC0, 0, 3], np.uint8), noise(40, seed=4)]),
        "empty": np.zeros(0, np.uint8),
        "png_cut": encode(noise((64, 64, 3)), "PNG")[:300],
    }[damage]
    decoder = k.png_decode if damage == "png_cut" else k.jpeg_decode
    with pytest.raises(DvppError, match="PngDecode" if damage == "png_cut" else "JpegDecode"):
        decoder(bad)
    with pytest.raises(DvppError, match="ImageDecoder"):
        k.image_decoder(bad)


def test_decoders_only_let_pillow_try_the_formats_they_accept():
    gif = encode(picture(40, 40), "GIF")
    with pytest.raises(DvppError, match="JpegDecode: the .* input bytes are not a JPEG/PNG picture"):
        k.jpeg_decode(gif)
    with pytest.raises(DvppError, match="ImageDecoder: .* not a JPEG/PNG/BMP/TIFF/WEBP/JPEG2000/PPM picture"):
        k.image_decoder(gif)
    eps = np.frombuffer(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 40 40\nshowpage\n", np.uint8)
    with pytest.raises(DvppError, match="not a JPEG/PNG/BMP"):  # never handed to Ghostscript
        k.image_decoder(eps)
    np.testing.assert_array_equal(k.image_decoder(encode(noise((40, 41, 3)), "BMP")), noise((40, 41, 3)))


def test_jpeg_encode_round_trips_through_jpeg_decode():
    src = picture(64, 96)
    data = k.jpeg_encode(src, quality=95)
    assert data.ndim == 1 and data.dtype == np.uint8 and bytes(data[:2]) == b"\xff\xd8"
    out = k.jpeg_decode(data)
    assert out.shape == src.shape and np.abs(out.astype(int) - src).mean() < 3
    assert len(k.jpeg_encode(src, quality=10)) < len(data)  # quality is honoured
    grey = k.jpeg_decode(k.jpeg_encode(src[..., :1]), pixel_format="GRAY")
    assert grey.shape == (64, 96, 1) and np.abs(grey.astype(int) - src[..., :1]).mean() < 3


# ----------------------------------------------------------------------------- rules

def _progressive() -> np.ndarray:
    return encode(picture(64, 64), "JPEG", progressive=True)


def _cmyk() -> np.ndarray:
    buffer = io.BytesIO()
    Image.new("CMYK", (40, 40), (10, 20, 30, 0)).save(buffer, format="JPEG")
    return np.frombuffer(buffer.getvalue(), np.uint8)


def _png16() -> np.ndarray:
    buffer = io.BytesIO()
    Image.fromarray(np.full((40, 40), 1000, np.uint16)).save(buffer, format="PNG")
    return np.frombuffer(buffer.getvalue(), np.uint8)


IMG = picture(64, 96)
ODD = picture(45, 67)

#: (case, call, fragments the message must hold: op, value, rule)
VIOLATIONS = [
    ("jpeg too small", lambda: k.jpeg_decode(encode(picture(16, 16), "JPEG")),
     ["JpegDecode", "16x16", "32x32 to 8192x8192"]),
    ("jpeg too wide", lambda: k.jpeg_decode(encode(np.zeros((32, 8200, 3), np.uint8), "JPEG")),
     ["JpegDecode", "8200x32", "8192x8192"]),
    ("png too big", lambda: k.png_decode(encode(np.zeros((40, 4100, 3), np.uint8), "PNG")),
     ["PngDecode", "4100x40", "4096x4096"]),
    ("png into jpeg", lambda: k.jpeg_decode(encode(IMG, "PNG")),
     ["JpegDecode", "format PNG", "JPEGD decodes JPEG only"]),
    ("jpeg into png", lambda: k.png_decode(encode(IMG, "JPEG")), ["PngDecode", "format JPEG", "PNGD decodes PNG only"]),
    ("progressive", lambda: k.jpeg_decode(_progressive()), ["JpegDecode", "progressive JPEG", "baseline"]),
    ("cmyk", lambda: k.jpeg_decode(_cmyk()), ["JpegDecode", "mode CMYK", "JPEGD decodes L, RGB"]),
    ("png 16 bit", lambda: k.png_decode(_png16()), ["PngDecode", "mode I", "PNGD decodes"]),
    ("pixel format", lambda: k.jpeg_decode(encode(IMG, "JPEG"), pixel_format="YUV"),
     ["JpegDecode", "'YUV'", "RGB, BGR, GRAY"]),
    ("aligned value", lambda: k.png_decode(encode(IMG, "PNG"), aligned=2), ["PngDecode", "aligned 2", "one of 0, 1"]),
    ("encoded rank", lambda: k.jpeg_decode(encode(IMG, "JPEG")[None]), ["JpegDecode", "rank 2", "1-D"]),
    ("dtype", lambda: k.jpeg_decode(encode(IMG, "JPEG").astype(np.int32)), ["JpegDecode", "int32", "uint8"]),
    ("encode odd", lambda: k.jpeg_encode(ODD), ["JpegEncode", "width 67", "even"]),
    ("encode quality", lambda: k.jpeg_encode(IMG, quality=0), ["JpegEncode", "quality 0", "1..100"]),
    ("encode small", lambda: k.jpeg_encode(picture(16, 16)), ["JpegEncode", "16x16", "32x32 to 8192x8192"]),
    ("encode rgba", lambda: k.jpeg_encode(picture(32, 32, 4)),
     ["JpegEncode", "channel count 4", "grey (1) or RGB (3)"]),
    ("resize out small", lambda: k.vpc_resize(IMG, height=4, width=64), ["VpcResize", "64x4", "10x6 to 4096x4096"]),
    ("resize out big", lambda: k.vpc_resize(IMG, height=64, width=5000), ["VpcResize", "5000x64", "4096x4096"]),
    ("resize upscale", lambda: k.vpc_resize(picture(6, 40), height=100, width=40),
     ["VpcResize", "height scale 100/6", "1/32 to 16"]),
    ("resize downscale", lambda: k.vpc_resize(picture(64, 4000), height=64, width=100),
     ["VpcResize", "width scale 100/4000", "1/32 to 16"]),
    ("resize mode", lambda: k.vpc_resize(IMG, height=32, width=32, mode="cubic"),
     ["VpcResize", "'cubic'", "bilinear, nearest"]),
    ("resize input small", lambda: k.vpc_resize(picture(20, 20), height=32, width=32),
     ["VpcResize", "20x20", "32x6 to 4096x4096"]),
    ("resize strided input", lambda: k.vpc_resize(ODD, height=32, width=32, aligned=1),
     ["VpcResize", "input width 67", "aligned to 16"]),
    ("resize channels", lambda: k.vpc_resize(picture(32, 32, 2), height=32, width=40),
     ["VpcResize", "channel count 2", "(1, 3, 4)"]),
    ("resize rank", lambda: k.vpc_resize(IMG[..., 0], height=32, width=32), ["VpcResize", "rank 2", "HWC or NHWC"]),
    ("crop odd x", lambda: k.vpc_crop(IMG, x=3, y=0, height=20, width=20),
     ["VpcCrop", "crop box x 3", "multiple of 2"]),
    ("crop odd width", lambda: k.vpc_crop(IMG, x=0, y=0, height=20, width=21),
     ["VpcCrop", "crop box width 21", "multiple of 2"]),
    ("crop outside", lambda: k.vpc_crop(IMG, x=80, y=0, height=20, width=20), ["VpcCrop", "x=80", "inside the 96x64"]),
    ("crop too small", lambda: k.vpc_crop(IMG, x=0, y=0, height=8, width=8), ["VpcCrop", "8x8", "10x6 to 4096x4096"]),
    ("paste x", lambda: k.vpc_crop_and_paste(IMG, height=64, width=64, paste_x=8, paste_height=32, paste_width=32),
     ["VpcCropAndPaste", "paste box x 8", "multiple of 16"]),
    ("paste outside",
     lambda: k.vpc_crop_and_paste(IMG, height=64, width=64, paste_x=48, paste_height=32, paste_width=32),
     ["VpcCropAndPaste", "x=48", "inside the 64x64"]),
    ("paste canvas", lambda: k.vpc_crop_and_paste(IMG, height=4, width=64, paste_height=2, paste_width=32),
     ["VpcCropAndPaste", "output size 64x4", "10x6 to 4096x4096"]),
    ("paste fill", lambda: k.vpc_crop_and_paste(IMG, height=64, width=96, fill_value=[300]),
     ["VpcCropAndPaste", "[300]", "uint8"]),
    ("paste fill count", lambda: k.vpc_crop_and_paste(IMG, height=64, width=96, fill_value=[1, 2]),
     ["VpcCropAndPaste", "[1, 2]", "one per channel"]),
    ("pad odd picture", lambda: k.vpc_pad(ODD, top=2, left=16), ["VpcPad", "paste box width 67", "multiple of 2"]),
    ("pad left", lambda: k.vpc_pad(IMG, left=8), ["VpcPad", "paste box x 8", "multiple of 16"]),
    ("pad negative", lambda: k.vpc_pad(IMG, top=-2), ["VpcPad", "(-2, 0, 0, 0)", ">= 0"]),
    ("nv12 odd", lambda: k.cvt_color(ODD, code="RGB2NV12"), ["CvtColor", "YUV420SP width 67", "even"]),
    ("nv12 rows", lambda: k.cvt_color(noise((100, 64)), code="NV122RGB"), ["CvtColor", "rows 100", "H*3/2"]),
    ("nv12 channels", lambda: k.cvt_color(IMG[..., :1], code="RGB2NV12"), ["CvtColor", "channel count 1", "3-channel"]),
    ("cvt code", lambda: k.cvt_color(IMG, code="RGB2HSV"), ["CvtColor", "'RGB2HSV'", "RGB2NV12"]),
    ("cvt range", lambda: k.cvt_color(IMG, code="RGB2NV12", color_range="pc"), ["CvtColor", "'pc'", "full, limited"]),
    ("cvt strided", lambda: k.cvt_color(picture(64, 40), code="RGB2NV12", aligned=1),
     ["CvtColor", "width 40", "aligned to 16"]),
]


@pytest.mark.parametrize("case, call, fragments", VIOLATIONS, ids=[v[0] for v in VIOLATIONS])
def test_rule_violation_raises_dvpp_error_naming_op_value_and_rule(case, call, fragments):
    with pytest.raises(DvppError) as info:
        call()
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))
    assert "breaks the DVPP rule" in str(info.value)


def test_rules_skip_unknown_dims_and_report_without_raising():
    assert image_rule_violations("VpcResize", [None, "W", 3], {"height": 224, "width": 224}) == []
    problems = image_rule_violations("VpcResize", ["N", 4096, 4096, 3], {"height": 100, "width": 100})
    assert len(problems) == 2 and all("scale" in p for p in problems)
    missing = image_rule_violations("VpcCrop", None, {"x": 0})
    assert missing == ["VpcCrop: missing required attribute(s) y, height, width"]
    assert set(DVPP_RULES) == set(OP_SPECS)


# ----------------------------------------------------------------------------- colour

def blocky(h: int, w: int, seed: int) -> np.ndarray:
    """Random colours, constant on each 2x2 block: 4:2:0 subsampling then loses nothing."""
    return np.repeat(np.repeat(noise((h // 2, w // 2, 3), seed), 2, axis=0), 2, axis=1)


@pytest.mark.parametrize("forward, backward", [("RGB2NV12", "NV122RGB"), ("RGB2NV21", "NV212RGB"),
                                               ("BGR2NV12", "NV122BGR"), ("BGR2NV21", "NV212BGR")])
@pytest.mark.parametrize("color_range", ["full", "limited"])
def test_yuv420sp_round_trip_within_2(forward, backward, color_range):
    src = blocky(64, 96, seed=len(forward) + len(color_range))
    yuv = k.cvt_color(src, code=forward, color_range=color_range)
    assert yuv.shape == (96, 96) and yuv.dtype == np.uint8
    back = k.cvt_color(yuv, code=backward, color_range=color_range)
    assert back.shape == src.shape
    assert np.abs(back.astype(int) - src).max() <= 2


@pytest.mark.parametrize("color_range, rgb, yuv", [
    ("full", (255, 0, 0), (76, 85, 255)), ("full", (255, 255, 255), (255, 128, 128)),
    ("full", (0, 0, 0), (0, 128, 128)),
    ("full", (0, 0, 255), (29, 255, 107)), ("limited", (255, 0, 0), (81, 90, 240)),
    ("limited", (255, 255, 255), (235, 128, 128)), ("limited", (0, 0, 0), (16, 128, 128)),
    ("limited", (0, 255, 0), (145, 54, 34)),
])
def test_bt601_reference_colours_and_nv12_nv21_layout(color_range, rgb, yuv):
    flat = np.broadcast_to(np.array(rgb, np.uint8), (32, 32, 3))
    nv12 = k.cvt_color(flat, code="RGB2NV12", color_range=color_range)
    nv21 = k.cvt_color(flat, code="RGB2NV21", color_range=color_range)
    assert (nv12[:32] == yuv[0]).all()
    assert (nv12[32:, 0::2] == yuv[1]).all() and (nv12[32:, 1::2] == yuv[2]).all()  # NV12: U, V
    assert (nv21[32:, 0::2] == yuv[2]).all() and (nv21[32:, 1::2] == yuv[1]).all()  # NV21: V, U


def test_luma_plane_matches_pillow_ycbcr_and_batches_match_single_pictures():
    src = noise((2, 32, 48, 3), seed=5)
    yuv = k.cvt_color(src, code="RGB2NV12")
    assert yuv.shape == (2, 48, 48)
    for i in range(2):
        pillow_y = np.asarray(Image.fromarray(src[i]).convert("YCbCr"))[..., 0]
        assert np.abs(yuv[i, :32].astype(int) - pillow_y).max() <= 1
        np.testing.assert_array_equal(yuv[i], k.cvt_color(src[i], code="RGB2NV12"))
    grey = k.cvt_color(src[0], code="RGB2GRAY")
    pillow_grey = np.asarray(Image.fromarray(src[0]).convert("L")).astype(int)
    assert grey.shape == (32, 48, 1) and np.abs(grey[..., 0].astype(int) - pillow_grey).max() <= 1
    np.testing.assert_array_equal(k.cvt_color(src, code="RGB2BGR"), src[..., ::-1])


def test_aligned_cvt_color_takes_strided_buffers_and_keeps_their_size():
    src = blocky(32, 48, seed=6)
    yuv = k.cvt_color(src, code="RGB2NV12", color_range="limited", aligned=1)
    np.testing.assert_array_equal(yuv, k.cvt_color(src, code="RGB2NV12", color_range="limited"))
    assert k.cvt_color(yuv, code="NV122RGB", aligned=1).shape == (32, 48, 3)


# ----------------------------------------------------------------------------- VPC geometry

RESIZE_CASES = [((37, 53, 3), (20, 31)), ((40, 40, 3), (97, 61)), ((33, 50, 1), (224, 224)), ((64, 64, 3), (32, 32)),
                ((480, 640, 3), (224, 224)), ((50, 48, 4), (13, 300))]


@pytest.mark.parametrize("shape, size", RESIZE_CASES)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_resize_is_bit_exact_with_onnxruntime_nhwc(shape, size, mode):
    x = noise((2,) + shape, seed=shape[0])
    ours = k.vpc_resize(x, height=size[0], width=size[1], mode=mode)
    np.testing.assert_array_equal(ours, ort_resize(x, [2, size[0], size[1], shape[2]], mode))
    np.testing.assert_array_equal(ours[1], k.vpc_resize(x[1], height=size[0], width=size[1], mode=mode))


@pytest.mark.parametrize("shape, size", RESIZE_CASES + [((100, 80, 3), (100, 37)), ((60, 80, 3), (30, 80))])
def test_resize_within_1_of_onnxruntime_float_paths_and_the_onnx_reference(shape, size):
    """3-D inputs and unit scales take onnxruntime's float kernels; the ONNX reference computes in float too."""
    from onnx.reference import ReferenceEvaluator

    x = noise(shape, seed=7)
    ours = k.vpc_resize(x, height=size[0], width=size[1]).astype(int)
    assert np.abs(ours - ort_resize(x, [size[0], size[1], shape[2]], "bilinear")).max() <= 1
    assert np.abs(ours - ort_resize(x[None], [1, size[0], size[1], shape[2]], "bilinear")[0]).max() <= 1
    node = helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode="half_pixel")
    reference = ReferenceEvaluator(node).run(None, {"x": x, "sizes": np.array([size[0], size[1], shape[2]])})[0]
    assert np.abs(ours - reference.astype(int)).max() <= 1
    nearest = k.vpc_resize(x, height=size[0], width=size[1], mode="nearest")
    np.testing.assert_array_equal(nearest, ort_resize(x, [size[0], size[1], shape[2]], "nearest"))


def test_nearest_samples_pixel_centres():
    x = noise((40, 64, 3), seed=8)
    out = k.vpc_resize(x, height=20, width=16, mode="nearest")
    rows, cols = np.floor((np.arange(20) + 0.5) * 2).astype(int), np.floor((np.arange(16) + 0.5) * 4).astype(int)
    np.testing.assert_array_equal(out, x[rows][:, cols])


def test_aligned_resize_pads_output_to_vpc_strides():
    x = noise((2, 64, 96, 3), seed=9)
    out = k.vpc_resize(x, height=51, width=100, aligned=1)
    assert out.shape == (2, 52, 112, 3)
    np.testing.assert_array_equal(out[:, :51, :100], k.vpc_resize(x, height=51, width=100))
    assert not out[:, 51:].any() and not out[:, :, 100:].any()


def test_crop_is_a_slice_and_aligned_crop_is_strided():
    x = noise((2, 64, 96, 3), seed=10)
    np.testing.assert_array_equal(k.vpc_crop(x, x=10, y=4, height=30, width=50), x[:, 4:34, 10:60])
    strided = k.vpc_crop(x[0], x=10, y=4, height=30, width=50, aligned=1)
    assert strided.shape == (30, 64, 3) and (strided[:, :50] == x[0, 4:34, 10:60]).all() and not strided[:, 50:].any()


def test_crop_and_paste_resizes_the_box_into_a_filled_canvas():
    x = noise((64, 96, 3), seed=11)
    out = k.vpc_crop_and_paste(x, height=80, width=128, crop_x=8, crop_y=6, crop_height=40, crop_width=60,
                               paste_x=32, paste_y=10, paste_height=60, paste_width=90, fill_value=[1, 2, 3])
    expected = np.empty((80, 128, 3), np.uint8)
    expected[...] = [1, 2, 3]
    expected[10:70, 32:122] = ort_resize(np.ascontiguousarray(x[None, 6:46, 8:68]), [1, 60, 90, 3], "bilinear")[0]
    np.testing.assert_array_equal(out, expected)


def test_crop_and_paste_defaults_letterbox_an_odd_picture():
    x = noise((45, 67, 3), seed=12)
    out = k.vpc_crop_and_paste(x, height=64, width=96, paste_x=16, paste_y=2, fill_value=114)
    np.testing.assert_array_equal(out[2:46, 16:82], x[:44, :66])  # whole picture, rounded down to even
    assert (out[:2] == 114).all() and (out[:, :16] == 114).all() and (out[46:] == 114).all()


def test_pad_places_the_picture_and_fills_per_channel():
    x = noise((2, 32, 48, 3), seed=13)
    out = k.vpc_pad(x, top=2, bottom=4, left=16, right=3, fill_value=[0, 128, 255])
    assert out.shape == (2, 38, 67, 3)
    np.testing.assert_array_equal(out[:, 2:34, 16:64], x)
    assert (out[:, :2] == [0, 128, 255]).all() and (out[:, :, 64:] == [0, 128, 255]).all()
    assert k.vpc_pad(x, left=16, aligned=1).shape == (2, 32, 64, 3)


# ----------------------------------------------------------------------------- schemas, inference, registry

SHAPE_CASES = [
    ("VpcResize", (2, 64, 96, 3), {"height": 51, "width": 100, "aligned": 1}),
    ("VpcResize", (64, 96, 1), {"height": 30, "width": 40, "mode": "nearest"}),
    ("VpcCrop", (64, 96, 3), {"x": 2, "y": 4, "height": 20, "width": 30, "aligned": 1}),
    ("VpcCropAndPaste", (45, 67, 3), {"height": 64, "width": 96, "paste_x": 16}),
    ("VpcPad", (32, 48, 4), {"top": 2, "bottom": 1, "left": 16, "right": 5}),
    ("CvtColor", (2, 32, 48, 3), {"code": "RGB2NV21", "aligned": 1}),
    ("CvtColor", (2, 48, 48), {"code": "NV122BGR"}),
    ("CvtColor", (32, 48, 3), {"code": "BGR2GRAY"}),
]


@pytest.mark.parametrize("op, shape, attrs", SHAPE_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SHAPE_CASES)])
def test_inferred_shape_matches_the_kernel_and_onnx_shape_inference(op, shape, attrs):
    kernel = load_builtin_kernels().lookup(op, DOMAIN, 1, "DVPP", np.uint8)
    out = kernel(noise(shape, seed=14), **attrs)
    assert list(out.shape) == output_shape(op, shape, attrs)
    node = helper.make_node(op, ["x"], ["y"], domain=DOMAIN, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    dims = [d.dim_value for d in inferred.graph.output[0].type.tensor_type.shape.dim]
    assert dims == list(out.shape)


def test_symbolic_and_unknown_dims_survive_inference():
    assert output_shape("VpcResize", ["N", None, "W", 3], {"height": 8, "width": 8}) == ["N", 8, 8, 3]
    assert output_shape("JpegDecode", [None], {"pixel_format": "GRAY"}) == [None, None, 1]
    assert output_shape("CvtColor", ["N", 6, 4], {"code": "NV122RGB"}) == ["N", 4, 4, 3]
    assert output_shape("VpcCrop", [10, 3], {"x": 0, "y": 0, "height": 2, "width": 2}) is None


def test_shape_inference_tolerates_bad_attributes_and_the_checker_reports_them():
    node = helper.make_node("VpcResize", ["x"], ["y"], domain=DOMAIN, height="tall", width=32)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [64, 64, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [None] * 3)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(DOMAIN, 1)])
    dims = onnx.shape_inference.infer_shapes(model).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims] == [0, 32, 3] and not dims[0].dim_param.startswith("tall")
    with pytest.raises(onnx.checker.ValidationError, match="height"):
        onnx.checker.check_model(model)


def test_kernel_defaults_equal_schema_defaults_and_devices():
    registry = load_builtin_kernels()
    for op, spec in OP_SPECS.items():
        schema = onnx.defs.get_schema(op, 1, DOMAIN)
        assert set(schema.attributes) == {a.name for a in spec.attrs}
        kernel = registry.lookup(op, DOMAIN, 1, "DVPP", np.uint8)
        assert registry.lookup(op, DOMAIN, 1, "CPU", np.uint8) is kernel
        params = inspect.signature(kernel.fn).parameters
        for a in spec.attrs:
            default = params[a.name].default
            if a.default is dvpp.REQUIRED:
                assert default is inspect.Parameter.empty, (op, a.name)
            else:
                assert list(np.atleast_1d(default)) == list(np.atleast_1d(a.default)), (op, a.name)
                assert schema.attributes[a.name].default_value.type != 0
    decoder = registry.lookup("ImageDecoder", "", 20, "DVPP", np.uint8)
    assert decoder.since == 20 and set(decoder.devices) == {"DVPP", "CPU"}
    with pytest.raises(KernelError):
        registry.lookup("ImageDecoder", "", 19, "DVPP", np.uint8)
    dvpp.register_schemas()  # idempotent


# ----------------------------------------------------------------------------- builder

def _run(model: onnx.ModelProto, feeds: dict) -> dict:
    values = dict(feeds)
    opsets = {o.domain: o.version for o in model.opset_import}
    for node in model.graph.node:
        inputs = [values[i] for i in node.input]
        if node.domain == DOMAIN or node.op_type == "ImageDecoder":
            outs = run_node(node, inputs, opsets[node.domain], device="DVPP")
        else:  # plain ONNX ops around the DVPP ones: the ONNX reference is the oracle
            from onnx.reference import ReferenceEvaluator
            outs = ReferenceEvaluator(node).run(None, dict(zip(node.input, inputs)))
        values.update(zip(node.output, outs))
    return {o.name: values[o.name] for o in model.graph.output}


def test_builder_writes_a_checked_model_in_a_few_lines_and_it_runs():
    b = DvppModelBuilder("pre")
    jpeg = b.input("jpeg", "uint8", ["N"])
    img = b.jpeg_decode(jpeg)
    boxed = b.crop_and_paste(img, 256, 256, paste=(16, 8, 224, 224), fill_value=114)
    small = b.crop(b.resize(boxed, 240, 240), 8, 8, 224, 224, name="rgb224")
    nv12 = b.cvt_color(small, "RGB2NV12", name="nv12")
    model = b.build(outputs=[small, nv12, b.jpeg_encode(small, quality=90, name="thumb")])
    onnx.checker.check_model(model, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert inferred.graph.output[1].type.tensor_type.shape.dim[0].dim_value == 336
    assert {o.name: [d.dim_value for d in o.type.tensor_type.shape.dim] for o in model.graph.output} == {
        "rgb224": [224, 224, 3], "nv12": [336, 224], "thumb": [0]}
    src = picture(300, 400)
    out = _run(model, {"jpeg": encode(src, "JPEG", quality=95)})
    assert out["rgb224"].shape == (224, 224, 3) and out["nv12"].shape == (336, 224)
    assert k.jpeg_decode(out["thumb"]).shape == (224, 224, 3)


def test_builder_supports_png_standard_image_decoder_and_plain_onnx_ops():
    b = DvppModelBuilder("mixed")
    data = b.input("data", "uint8", [None])
    a = b.resize(b.image_decode(data, "BGR"), 32, 32, mode="nearest")
    c = b.pad(b.png_decode(data, "GRAY", aligned=1), left=16)
    f = b.node("Cast", [a], to=TensorProto.FLOAT, name="as_float")
    model = b.build(outputs=[f, c])
    dims = model.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_value for d in dims[:2]] == [32, 32] and not dims[2].HasField("dim_value")  # ONNX leaves C open
    out = _run(model, {"data": encode(noise((48, 50, 3), seed=15), "PNG")})
    assert out["as_float"].dtype == np.float32 and out["as_float"].shape == (32, 32, 3)
    assert out[c].shape == (48, 16 + 128, 1)  # PNGD strides 48 x 128, then 16 columns of padding


def test_builder_rejects_rule_breaking_models_at_build_time():
    b = DvppModelBuilder("bad")
    img = b.jpeg_decode(b.input("jpeg", "uint8", ["N"]))
    with pytest.raises(DvppError, match=r"VpcResize: output size 5000x224 .* 4096x4096"):
        b.build(outputs=[b.resize(img, 224, 5000)])
    b2 = DvppModelBuilder("bad2")
    x = b2.input("x", "uint8", [64, 96, 3])
    with pytest.raises(DvppError, match="crop box x 3"):
        b2.build(outputs=[b2.crop(x, 3, 0, 20, 20)])
    assert b2.build(outputs=[b2.crop(x, 2, 0, 20, 20)], check=False).graph.output


# ----------------------------------------------------------------------------- ONNX conformance

@pytest.fixture(scope="module")
def image_decoder_cases():
    import importlib

    from onnx.backend.test.case import node as node_cases

    def ours(cases):
        return [c for c in cases if c.model is not None and c.model.graph.node[0].op_type == "ImageDecoder"]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = ours(node_cases.collect_testcases("ImageDecoder"))
        if not found:  # an earlier collect_testcases(other op) already ran, and filtered out, these exports
            node_cases._TargetOpType = "ImageDecoder"
            importlib.reload(importlib.import_module("onnx.backend.test.case.node.image_decoder"))
            found = ours(node_cases._NodeTestCases)
    return found


@pytest.mark.parametrize("device", ["DVPP", "CPU"])
def test_image_decoder_conformance_cases(image_decoder_cases, device):
    names = sorted(c.name for c in image_decoder_cases)
    assert len(names) >= 9 and "test_image_decoder_decode_jpeg_rgb" in names
    for case in image_decoder_cases:
        node = case.model.graph.node[0]
        opset = next(o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
        for inputs, outputs in case.data_sets:
            (got,) = run_node(node, inputs, opset, device=device)
            assert got.dtype == outputs[0].dtype, case.name
            np.testing.assert_allclose(got, outputs[0], rtol=case.rtol, atol=case.atol, err_msg=case.name)
