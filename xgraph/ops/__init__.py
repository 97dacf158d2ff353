"""Custom ONNX op domains; importing this package registers their schemas with onnx."""
from __future__ import annotations

from xgraph.ops import ms_quantized  # noqa: F401 - registers com.microsoft QLinearAdd/QLinearMul schemas
from xgraph.ops.dvpp import DOMAIN as DVPP_DOMAIN, DvppModelBuilder, check_image_rules

__all__ = ["DVPP_DOMAIN", "DvppModelBuilder", "check_image_rules"]
