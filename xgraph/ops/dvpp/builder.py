"""DvppModelBuilder: preprocessing models with DVPP and standard ops in a few lines."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx
from onnx import helper

from xgraph.errors import DvppError
from xgraph.ops.dvpp.rules import image_rule_violations
from xgraph.ops.dvpp.specs import DOMAIN, DOMAIN_VERSION, proto_shape


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
        shapes = {v.name: proto_shape(v.type) for v in list(inferred.graph.input) + list(inferred.graph.value_info)}
        for node in inferred.graph.node:
            if node.domain != DOMAIN:
                continue
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
            problems = image_rule_violations(node.op_type, shapes.get(node.input[0]), attrs)
            if problems:
                raise DvppError(f"node {node.name!r}: " + "; ".join(problems))
