"""Attr values in .xmodel metadata: tagged JSON (``["s", "text"]``, ``["i", 3]``, ``["l", [...]]``...)
so loading restores exactly the Python types that were saved, with numpy arrays stored as
initializers named ``xgraph.attr/<n>`` and referenced as ``["a", "<n>"]``. Decoding type-checks
every value and bounds the nesting; it never unpickles or imports anything."""
from __future__ import annotations

import base64
from typing import Any, Callable

import numpy as np
import onnx

from xgraph.errors import GraphError, ModelFileError
from xgraph.ir.attribute_values import array_to_tensor

ARRAY_PREFIX = "xgraph.attr/"
MAX_JSON_DEPTH = 64


class Encoder:
    """Tags Python attr values for JSON; collects arrays to store as initializers."""

    def __init__(self, external: "Callable[[str, np.ndarray], onnx.TensorProto | None] | None" = None) -> None:
        self.arrays: list[onnx.TensorProto] = []
        #: given a key and an array, its external-data reference (a large compiled blob in the side file), or None
        self._external = external
        #: attrs of text values only (op annotations: device, reason, kernel) -> their encoding, shared: a
        #: 100k-op graph repeats a few such dicts, and json.dumps writes a shared dict like separate ones
        self._text_attrs: dict[tuple, dict[str, list]] = {}

    def encode(self, v: Any) -> list:
        kind = type(v)  # the exact builtin types, most attrs of a 100k-op graph, skip the isinstance chain
        if kind is str:
            return ["s", v]
        if kind is bool:
            return ["b", v]
        if kind is int:
            return ["i", v]
        if kind is dict:  # a str item, the usual one, tagged in place (no call)
            return ["d", {k: ["s", x] if type(x) is str else self.encode(x) for k, x in v.items()}]
        if kind is list:
            return ["l", [["s", x] if type(x) is str else self.encode(x) for x in v]]
        if v is None:
            return ["n", None]
        if isinstance(v, (bool, np.bool_)):
            return ["b", bool(v)]
        if isinstance(v, (int, np.integer)):
            return ["i", int(v)]
        if isinstance(v, (float, np.floating)):
            f = float(v)
            return ["f", f if np.isfinite(f) else repr(f)]
        if isinstance(v, str):
            return ["s", v]
        if isinstance(v, bytes):
            return ["y", base64.b64encode(v).decode("ascii")]
        if isinstance(v, np.ndarray):
            key = f"{ARRAY_PREFIX}{len(self.arrays)}"
            reference = self._external(key, v) if self._external is not None else None
            self.arrays.append(array_to_tensor(v, key) if reference is None else reference)
            return ["a", key]
        if isinstance(v, tuple):
            return ["t", [self.encode(x) for x in v]]
        if isinstance(v, list):
            return ["l", [self.encode(x) for x in v]]
        if isinstance(v, dict):
            return ["d", {k: self.encode(x) for k, x in v.items()}]
        raise GraphError(f"cannot store a {type(v).__name__} attribute in an .xmodel")

    def encode_attrs(self, attrs: dict[str, Any]) -> dict[str, list]:
        for v in attrs.values():
            if type(v) is not str:
                return {k: self.encode(v) for k, v in attrs.items()}
        key = tuple(attrs.items())
        hit = self._text_attrs.get(key)
        if hit is None:
            hit = self._text_attrs[key] = {k: ["s", v] for k, v in key}
        return hit


#: tag -> does the JSON value fit it
_TAG_CHECKS = {"n": lambda x: x is None, "b": lambda x: isinstance(x, bool),
               "i": lambda x: isinstance(x, int) and not isinstance(x, bool),
               "f": lambda x: isinstance(x, (int, float, str)) and not isinstance(x, bool),
               "s": lambda x: isinstance(x, str), "y": lambda x: isinstance(x, str),
               "a": lambda x: isinstance(x, str), "t": lambda x: isinstance(x, list),
               "l": lambda x: isinstance(x, list), "d": lambda x: isinstance(x, dict)}


class Decoder:
    """Checks and untags JSON attr values; arrays come from the reserved initializers."""

    def __init__(self, arrays: dict[str, np.ndarray], label: str) -> None:
        self.arrays = arrays
        self.label = label

    def fail(self, what: str) -> None:
        raise ModelFileError(f"{self.label}: xgraph metadata is damaged: {what}")

    def decode(self, v: Any, depth: int = 0) -> Any:
        if type(v) is list and len(v) == 2 and depth <= MAX_JSON_DEPTH:  # json.loads makes exact builtin types: the common tags first
            tag, x = v
            kind = type(x)
            if (tag == "s" and kind is str) or (tag == "i" and kind is int) or (tag == "b" and kind is bool):
                return x
            if tag == "d" and kind is dict and depth < MAX_JSON_DEPTH:
                return {k: self.decode(e, depth + 1) for k, e in x.items()}
        return self._decode_checked(v, depth)

    def _decode_checked(self, v: Any, depth: int) -> Any:
        if depth > MAX_JSON_DEPTH:
            self.fail(f"attribute values nested more than {MAX_JSON_DEPTH} levels")
        if not (isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)):
            self.fail(f"attribute value {str(v)[:60]!r} is not a [tag, value] pair")
        tag, x = v
        check = _TAG_CHECKS.get(tag)
        if check is None or not check(x):
            self.fail(f"attribute value tagged {tag!r} holds {type(x).__name__}")
        if tag == "f":
            try:
                return float(x)
            except (ValueError, OverflowError):
                self.fail(f"{str(x)[:60]!r} is not a float")
        if tag == "y":
            try:
                return base64.b64decode(x, validate=True)
            except ValueError:
                self.fail("bytes attribute is not base64")
        if tag == "a":
            if x not in self.arrays:
                self.fail(f"attribute refers to array {x!r}, which the file does not carry")
            return self.arrays[x]
        if tag == "t":
            return tuple(self.decode(e, depth + 1) for e in x)
        if tag == "l":
            return [self.decode(e, depth + 1) for e in x]
        if tag == "d":
            return {k: self.decode(e, depth + 1) for k, e in x.items()}
        return x

    def attrs(self, d: Any, where: str) -> dict[str, Any]:
        if not isinstance(d, dict):
            self.fail(f"attrs of {where} are not an object")
        return {k: self.decode(v) for k, v in d.items()}


__all__ = ["ARRAY_PREFIX", "Decoder", "Encoder", "MAX_JSON_DEPTH"]
