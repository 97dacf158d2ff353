"""The one image reader: every picture xgraph decodes (input files, calibration sets, the DVPP and
ImageDecoder kernels) is opened here.

Pillow is asked only for the formats on an allow-list (`formats=` on `Image.open`), so a file
that merely carries an image suffix can never reach a plugin that shells out (EPS runs
Ghostscript) or one nobody asked for. Pillow's decompression-bomb limit (`Image.MAX_IMAGE_PIXELS`,
which the caller may set) refuses a picture whose header declares more pixels than that, before
its pixels are allocated; the refusal, like every codec failure, is one error naming the source.

    >>> read_pixels(Path("cat.png").read_bytes(), "--input cat.png")   # doctest: +SKIP
    array(..., dtype=uint8)    # (H, W, 3)
"""
from __future__ import annotations

import contextlib
import io
import struct
import warnings
from pathlib import Path  # noqa: F401 - the doctest's
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from xgraph.errors import ModelFileError, XGraphError

if TYPE_CHECKING:
    from PIL import Image as PILImage

#: File suffixes read as images.
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
#: The Pillow formats those suffixes stand for: the only ones an image file may be.
IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "TIFF", "WEBP", "PPM")


def _codec_errors() -> tuple[type[BaseException], ...]:
    """What Pillow raises on damaged or hostile bytes (the bomb refusal included)."""
    from PIL import Image
    return (OSError, ValueError, SyntaxError, EOFError, struct.error, IndexError, Image.DecompressionBombError,
            Image.DecompressionBombWarning)


@contextlib.contextmanager
def _codec_warnings() -> Iterator[None]:
    """Pillow's warnings while it reads: over the pixel limit (a warning below twice the limit) is an error,
    refused like a bomb; its notes on damage it tolerates (a TIFF tag past the end) are not printed."""
    from PIL import Image
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module=r"PIL\.")
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        yield


def _bomb(what: str, exc: BaseException, error: type[XGraphError]) -> XGraphError:
    from PIL import Image
    return error(f"{what}: the picture is larger than {Image.MAX_IMAGE_PIXELS} pixels, Pillow's decompression-bomb "
                 f"limit ({exc}); give a smaller image")


def open_image(data: bytes, what: str, *, formats: Sequence[str] = IMAGE_FORMATS,
               error: type[XGraphError] = ModelFileError) -> "PILImage.Image":
    """The picture in `data`, header read and checked, pixels not decoded yet.

    Only `formats` are tried; a picture over the decompression-bomb limit is refused here.
    `what` starts every message ("--input cat.png", "JpegDecode"); `error` is the class raised.
    """
    from PIL import Image, UnidentifiedImageError
    try:
        with _codec_warnings():
            return Image.open(io.BytesIO(data), formats=list(formats))
    except UnidentifiedImageError:
        raise error(f"{what}: the {len(data)} input bytes are not a {'/'.join(formats)} picture") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _bomb(what, exc, error) from None
    except _codec_errors() as exc:
        raise error(f"{what}: cannot read the encoded picture ({len(data)} bytes): {exc}") from None


def decode(image: "PILImage.Image", what: str, mode: str, *, error: type[XGraphError] = ModelFileError,
           transform=None) -> np.ndarray:
    """`image`'s pixels as uint8, converted to Pillow `mode` ("RGB": HWC, "L": HW), after `transform(image)`."""
    from PIL import Image
    try:
        with _codec_warnings():
            image.load()
            if transform is not None:
                image = transform(image)
            return np.asarray(image.convert(mode), dtype=np.uint8)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
        raise _bomb(what, exc, error) from None
    except _codec_errors() as exc:
        raise error(f"{what}: the encoded picture is damaged: {exc}") from None


def read_pixels(data: bytes, what: str, mode: str = "RGB", *, formats: Sequence[str] = IMAGE_FORMATS,
                error: type[XGraphError] = ModelFileError) -> np.ndarray:
    """The uint8 pixels of the encoded picture `data` in Pillow `mode`; `error` naming `what` when it is not one."""
    with open_image(data, what, formats=formats, error=error) as image:
        return decode(image, what, mode, error=error)


__all__ = ["IMAGE_FORMATS", "IMAGE_SUFFIXES", "decode", "open_image", "read_pixels"]
