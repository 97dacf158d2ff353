"""Protobuf wire encoding of the many small, alike messages an export appends to one GraphProto.

`graph.value_info.add(name=..., type=tp)` copies `tp` into a new message for every tensor; on
a 100k-op graph those calls cost more than encoding the same ValueInfoProtos as bytes here
(each distinct type encoded once) and merging them into the graph in one `MergeFromString`.
The message that results is the one the calls build, field for field (same presence, same
order), so its serialized bytes are the same too.

Wire format (https://protobuf.dev/programming-guides/encoding/): a length-delimited field is
its key ``(field_number << 3) | 2`` as a varint, the payload's length as a varint, the payload.
"""
from __future__ import annotations

from typing import Iterable

#: GraphProto.value_info and ValueInfoProto.name / .type (onnx.proto)
GRAPH_VALUE_INFO, VALUE_INFO_NAME, VALUE_INFO_TYPE = 13, 1, 2

_ONE_BYTE = [bytes([n]) for n in range(128)]


def varint(n: int) -> bytes:
    """`n` (>= 0) as a protobuf varint."""
    if n < 128:
        return _ONE_BYTE[n]
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def field(number: int, payload: bytes) -> bytes:
    """One length-delimited field (a string, bytes or embedded message) with its key."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def type_field(type_bytes: bytes) -> bytes:
    """The ``type`` field of a ValueInfoProto holding the serialized TypeProto `type_bytes`."""
    return field(VALUE_INFO_TYPE, type_bytes)


def value_infos(entries: Iterable[tuple[str, bytes]]) -> bytes:
    """GraphProto bytes holding one ``value_info`` per (name, encoded type field from `type_field`), in order:
    ``graph.MergeFromString`` appends them as ``graph.value_info.add(name=name, type=tp)`` would."""
    one, name_key, key = _ONE_BYTE, varint(VALUE_INFO_NAME << 3 | 2), varint(GRAPH_VALUE_INFO << 3 | 2)
    parts = []
    append = parts.append
    for name, typed in entries:
        encoded = name.encode("utf-8")
        n = len(encoded)
        body = name_key + (one[n] if n < 128 else varint(n)) + encoded + typed
        n = len(body)
        append(key + (one[n] if n < 128 else varint(n)) + body)
    return b"".join(parts)


__all__ = ["field", "type_field", "value_infos", "varint"]
