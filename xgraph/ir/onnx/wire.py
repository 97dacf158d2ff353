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
#: GraphProto.node and NodeProto.input / .output / .name / .op_type / .domain (onnx.proto)
GRAPH_NODE, NODE_INPUT, NODE_OUTPUT, NODE_NAME, NODE_OP_TYPE, NODE_DOMAIN = 1, 1, 2, 3, 4, 7

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


def nodes(rows: Iterable[tuple[list[str], list[str], str, str, str]]) -> bytes:
    """GraphProto bytes holding one ``node`` per (inputs, outputs, name, op_type, domain), in order:
    ``graph.MergeFromString`` appends them as ``graph.node.add(op_type=..., domain=..., name=..., input=...,
    output=...)`` would (the three strings present even when empty, as the keyword arguments set them).
    A name that is not valid Unicode raises UnicodeEncodeError."""
    one = _ONE_BYTE
    k_in, k_out = varint(NODE_INPUT << 3 | 2), varint(NODE_OUTPUT << 3 | 2)
    k_name = varint(NODE_NAME << 3 | 2)
    key = varint(GRAPH_NODE << 3 | 2)
    kinds: dict[tuple[str, str], bytes] = {}  # the op_type and domain fields: a few pairs, each encoded once
    parts = []
    append = parts.append
    for inputs, outputs, name, op_type, domain in rows:
        fields = []
        add = fields.append
        for text in inputs:
            encoded = text.encode("utf-8")
            n = len(encoded)
            add(k_in + (one[n] if n < 128 else varint(n)) + encoded)
        for text in outputs:
            encoded = text.encode("utf-8")
            n = len(encoded)
            add(k_out + (one[n] if n < 128 else varint(n)) + encoded)
        encoded = name.encode("utf-8")
        n = len(encoded)
        add(k_name + (one[n] if n < 128 else varint(n)) + encoded)
        kind = kinds.get((op_type, domain))
        if kind is None:
            kind = kinds[(op_type, domain)] = field(NODE_OP_TYPE, op_type.encode("utf-8")) + \
                field(NODE_DOMAIN, domain.encode("utf-8"))
        add(kind)
        body = b"".join(fields)
        n = len(body)
        append(key + (one[n] if n < 128 else varint(n)) + body)
    return b"".join(parts)


__all__ = ["field", "nodes", "type_field", "value_infos", "varint"]
