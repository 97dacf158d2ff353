"""The bytes the openvino plugin stores with `Subgraph.set_blob`, and how its runner reads them back.

A blob is ``MAGIC``, one line of JSON (the header), then the payload:

- kind "export" (``weights="embedded"``): the payload is `CompiledModel.export_model()`, weights
  included; the runner hands it to `Core.import_model`.
- kind "ir" (``weights="shared"``): the payload is OpenVINO's IR of the subgraph, its ``.xml``
  without the ``.bin``, then the few constant bytes that are not graph weights (OpenVINO's
  own folded constants). The header lists every constant of the ``.bin`` as ``[offset, size,
  weight name or null]``: at load the runner lays the subgraph's weights (the graph's own
  arrays) and those few bytes out as the ``.bin`` and compiles the IR again.

OpenVINO 2026.4's CPU plugin cannot import a weightless export of a model read from ONNX
(``CACHE_MODE=OPTIMIZE_SIZE`` gives a blob of 94 MB for ResNet50 that `import_model` refuses with
"Attribute and shape size are inconsistent for Const op", with ``WEIGHTS_PATH`` or the model
given as ``MODEL_PTR``), hence the IR for shared weights.
"""
from __future__ import annotations

import json
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

import numpy as np

MAGIC = b"XGRAPH-OPENVINO\n"


def pack(header: dict[str, Any], *parts: bytes) -> bytes:
    """The blob: magic, the header line, the payload parts."""
    return MAGIC + json.dumps(header, separators=(",", ":")).encode() + b"\n" + b"".join(parts)


def unpack(data: np.ndarray, where: str) -> tuple[dict[str, Any], memoryview]:
    """(header, payload) of a blob (a uint8 array); ValueError naming `where` when it is not one of ours."""
    view = memoryview(data).cast("B")
    if bytes(view[:len(MAGIC)]) != MAGIC:
        raise ValueError(f"{where}: the blob is not an openvino plugin blob (no {MAGIC!r} header)")
    end = bytes(view[len(MAGIC):len(MAGIC) + (1 << 20)]).find(b"\n")
    if end < 0:
        raise ValueError(f"{where}: the openvino blob's header line is damaged")
    header = json.loads(bytes(view[len(MAGIC):len(MAGIC) + end]))
    return header, view[len(MAGIC) + end + 1:]


def ir_parts(model: Any, weights: dict[str, np.ndarray]) -> tuple[dict[str, Any], bytes, bytes]:
    """(header fields, xml, residue) of an OpenVINO model whose constants are mostly the graph's `weights`."""
    import openvino as ov
    with tempfile.TemporaryDirectory() as folder:
        xml_path = Path(folder) / "subgraph.xml"
        ov.save_model(model, xml_path, compress_to_fp16=False)
        xml = xml_path.read_bytes()
        binary = xml_path.with_suffix(".bin").read_bytes()
    consts, residue = [], []
    for layer in ElementTree.fromstring(xml).iter("layer"):
        data = layer.find("data")
        if layer.get("type") != "Const" or data is None or data.get("offset") is None:
            continue
        offset, size = int(data.get("offset")), int(data.get("size"))
        name = layer.get("name")
        weight = weights.get(name)
        if weight is not None and weight.nbytes == size and weight.tobytes() == binary[offset:offset + size]:
            consts.append([offset, size, name])
        else:
            consts.append([offset, size, None])
            residue.append(binary[offset:offset + size])
    return {"consts": consts, "bin": len(binary), "xml": len(xml)}, xml, b"".join(residue)


def ir_weights(header: dict[str, Any], payload: memoryview, weights: dict[str, np.ndarray]) -> tuple[bytes, np.ndarray]:
    """(xml, bin) of a kind "ir" blob, the bin laid out from the graph's `weights` and the blob's residue."""
    xml = bytes(payload[:header["xml"]])
    residue = payload[header["xml"]:]
    binary = np.zeros(header["bin"], np.uint8)
    at = 0
    for offset, size, name in header["consts"]:
        if name is None:
            binary[offset:offset + size] = np.frombuffer(residue[at:at + size], np.uint8)
            at += size
        else:
            binary[offset:offset + size] = np.ascontiguousarray(weights[name]).reshape(-1).view(np.uint8)
    return xml, binary
