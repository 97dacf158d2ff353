"""The DVPP engines' rules as data: what JPEGD, PNGD, JPEGE, VPC and CSC accept (see `xgraph.ops.dvpp`)."""
from __future__ import annotations

from dataclasses import dataclass


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
