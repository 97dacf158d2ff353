"""The DVPP op domain ``xgraph.dvpp`` (version 1): ONNX schemas, the device's rules, a model builder.

DVPP is the Ascend AI processor's media engine: JPEGD and PNGD decode, JPEGE encodes, and VPC
resizes, crops, pastes and converts colour before the AI Core runs the network. The ops below
describe those jobs on uint8 pictures, HWC (one picture) or NHWC (a batch). Their kernels
(``xgraph/kernels/op_dvpp.py``) enforce the rules on every device, so a model behaves
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


Modules: ``engines`` (the rule table as data), ``specs`` (ops, attributes, output shapes, ONNX
schemas, registered on import), ``rules`` (the checks), ``builder`` (DvppModelBuilder).
"""
from xgraph.ops.dvpp.builder import DvppModelBuilder
from xgraph.ops.dvpp.engines import (COLOR_CODES, COLOR_RANGES, CSC, DVPP_RULES, JPEGD, JPEGE, LAYOUT_CHANNELS,
                                     PIXEL_FORMATS, PNGD, RESIZE_MODES, VPC, DvppRule, align_up)
from xgraph.ops.dvpp.rules import check_image_rules, image_rule_violations
from xgraph.ops.dvpp.specs import (DOMAIN, DOMAIN_VERSION, OP_SPECS, REQUIRED, AttrSpec, OpSpec, attrs_with_defaults,
                                   crop_box, output_shape, register_schemas)

__all__ = ["COLOR_CODES", "COLOR_RANGES", "CSC", "DOMAIN", "DOMAIN_VERSION", "DVPP_RULES", "JPEGD", "JPEGE",
           "LAYOUT_CHANNELS", "OP_SPECS", "PIXEL_FORMATS", "PNGD", "REQUIRED", "RESIZE_MODES", "VPC", "AttrSpec",
           "DvppModelBuilder", "DvppRule", "OpSpec", "align_up", "attrs_with_defaults", "check_image_rules",
           "crop_box", "image_rule_violations", "output_shape", "register_schemas"]
