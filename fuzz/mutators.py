"""Input mutators for the fuzz targets: raw bytes, ONNX protobuf structure, .xmodel JSON metadata.

Every mutator takes a `random.Random` and is deterministic for a given seed, so a failing
case is reproduced from (target, seed) alone. Byte mutations find parser bugs; structure
mutations (protobuf fields changed through reflection, libprotobuf-mutator style) get past
the parser and reach the importer's checks; JSON mutations do the same for .xmodel metadata.
"""
from __future__ import annotations

import json
import random
from typing import Any

import onnx
from google.protobuf.descriptor import FieldDescriptor

INTERESTING_INTS = (0, 1, -1, 2, 3, 7, 255, 256, 1 << 15, (1 << 31) - 1, -(1 << 31), 1 << 32,
                    (1 << 40), (1 << 62), (1 << 63) - 1, -(1 << 63))
INTERESTING_STRINGS = ("", "..", "../x", "/etc/passwd", "a/../../b", "x" * 300, "nul\0byte", ":unused:0",
                       "xgraph.attr/0", "xgraph.meta", "root", "\udcff", "C:\\w.bin", "weights.bin")
INTERESTING_BYTES = (b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff" * 10, b"\x00" * 8)


# -- raw bytes -------------------------------------------------------------------------------------
def mutate_bytes(data: bytes, rng: random.Random, corpus: list[bytes] | None = None) -> bytes:
    """1-4 libFuzzer-style edits: bit flips, byte sets, inserts, erases, copies, truncation, splices."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        n = len(b)
        if op == 0 and n:
            i = rng.randrange(n)
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1 and n:
            b[rng.randrange(n)] = rng.choice((0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)))
        elif op == 2:
            i = rng.randrange(n + 1)
            b[i:i] = rng.choice(INTERESTING_BYTES) if rng.random() < 0.5 else rng.randbytes(rng.randint(1, 16))
        elif op == 3 and n:
            i = rng.randrange(n)
            del b[i:i + rng.randint(1, min(64, n - i))]
        elif op == 4 and n:
            i, j = rng.randrange(n), rng.randrange(n)
            k = rng.randint(1, min(64, n - max(i, j)))
            b[j:j] = b[i:i + k]
        elif op == 5 and n:
            del b[rng.randrange(n):]
        elif op == 6 and n > 8:
            i = rng.randrange(n - 8)
            b[i:i + 8] = rng.choice(INTERESTING_INTS).to_bytes(8, "little", signed=True)
        elif op == 7 and corpus:
            other = rng.choice(corpus)
            i, j = rng.randrange(n + 1), rng.randrange(len(other) + 1)
            b = b[:i] + other[j:j + rng.randint(1, 256)]
        elif op == 8 and n:
            i = rng.randrange(n)
            b[i:i + 1] = b"\xff" * rng.randint(1, 10)  # an over-long varint
    return bytes(b)


# -- protobuf structure ----------------------------------------------------------------------------
def _repeated(field) -> bool:
    # protobuf >= 6 has `is_repeated`; older releases only `label`
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else field.label == FieldDescriptor.LABEL_REPEATED


def _collect(msg, out: list, names: set[str], depth: int = 0, limit: int = 20000) -> None:
    """(message, field, index or None) triples for every set field, plus the strings seen."""
    if depth > 40 or len(out) > limit:
        return
    for field, value in msg.ListFields():
        if _repeated(field):
            out.append((msg, field, None))
            for i, item in enumerate(value):
                if field.type == FieldDescriptor.TYPE_MESSAGE:
                    _collect(item, out, names, depth + 1, limit)
                else:
                    out.append((msg, field, i))
                    if field.type == FieldDescriptor.TYPE_STRING:
                        names.add(item)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            out.append((msg, field, None))
            _collect(value, out, names, depth + 1, limit)
        else:
            out.append((msg, field, None))
            if field.type == FieldDescriptor.TYPE_STRING:
                names.add(value)


def _new_scalar(field, old: Any, rng: random.Random, names: list[str]) -> Any:
    t = field.type
    if t == FieldDescriptor.TYPE_STRING:
        return rng.choice(names) if names and rng.random() < 0.6 else rng.choice(INTERESTING_STRINGS)
    if t == FieldDescriptor.TYPE_BYTES:
        old = old or b""
        choice = rng.randrange(4)
        if choice == 0:
            return old[: rng.randrange(len(old) + 1)]
        if choice == 1:
            return old + rng.randbytes(rng.randint(1, 64))
        if choice == 2:
            return b""
        return mutate_bytes(old, rng) if old else rng.randbytes(8)
    if t == FieldDescriptor.TYPE_BOOL:
        return not old
    if t in (FieldDescriptor.TYPE_FLOAT, FieldDescriptor.TYPE_DOUBLE):
        return rng.choice((0.0, -1.0, 1e38, float("inf"), float("nan"), (old or 0.0) * 2))
    if t == FieldDescriptor.TYPE_ENUM:
        values = [v.number for v in field.enum_type.values]
        return rng.choice(values + [max(values) + 1, 0])
    if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED32,
             FieldDescriptor.TYPE_FIXED64):
        bits = 32 if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32) else 64
        return rng.choice([v for v in INTERESTING_INTS if 0 <= v < (1 << bits)])
    bits = 32 if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32) else 64
    small = [v for v in INTERESTING_INTS if -(1 << (bits - 1)) <= v < (1 << (bits - 1))]
    if isinstance(old, int) and rng.random() < 0.3:
        return max(min(old + rng.choice((-1, 1, -2, 2)), (1 << (bits - 1)) - 1), -(1 << (bits - 1)))
    return rng.choice(small)


def _mutate_field(msg, field, index, rng: random.Random, names: list[str]) -> None:
    container = getattr(msg, field.name)
    repeated = _repeated(field)
    if repeated and index is None:
        n = len(container)
        op = rng.randrange(5)
        if op == 0 and n:
            del container[rng.randrange(n)]
        elif op == 1 and n:  # duplicate an element: name collisions, double definitions
            item = container[rng.randrange(n)]
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                container.add().CopyFrom(item)
            else:
                container.append(item)
        elif op == 2 and n > 1:  # reorder: breaks topological order, shuffles inputs
            items = list(container)
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                copies = [type(m)() for m in items]
                for c, m in zip(copies, items):
                    c.CopyFrom(m)
                rng.shuffle(copies)
                del container[:]
                container.extend(copies)
            else:
                rng.shuffle(items)
                del container[:]
                container.extend(items)
        elif op == 3:
            del container[:]
        elif field.type != FieldDescriptor.TYPE_MESSAGE:
            container.append(_new_scalar(field, None, rng, names))
        else:
            container.add()
        return
    if repeated:
        container[index] = _new_scalar(field, container[index], rng, names)
    elif field.type == FieldDescriptor.TYPE_MESSAGE:
        msg.ClearField(field.name)
    else:
        setattr(msg, field.name, _new_scalar(field, getattr(msg, field.name), rng, names))


_SPECIAL = ("external", "bad_dims", "wrong_type", "attribute_type", "cycle", "dangling", "nest")


def _special(model: onnx.ModelProto, rng: random.Random, names: list[str]) -> None:
    """Targeted edits the reflective mutator rarely hits: each is one of the refusal rules."""
    g = model.graph
    kind = rng.choice(_SPECIAL)
    inits = list(g.initializer)
    if kind == "external" and inits:
        t = rng.choice(g.initializer)
        t.data_location = onnx.TensorProto.EXTERNAL
        t.ClearField("raw_data")
        del t.external_data[:]
        t.external_data.add(key="location", value=rng.choice(("weights.bin", "../secret.bin", "/etc/passwd",
                                                               "link.bin", "hard.bin", "sub/../weights.bin",
                                                               "missing.bin", "", "weights.bin\0x")))
        if rng.random() < 0.5:
            t.external_data.add(key="offset", value=str(rng.choice((0, 4, -4, 1 << 40))))
        if rng.random() < 0.5:
            t.external_data.add(key="length", value=str(rng.choice((0, 4, 64, 1 << 40, -1))))
    elif kind == "bad_dims" and inits:
        t = rng.choice(g.initializer)
        del t.dims[:]
        t.dims.extend(rng.choice(([1 << 20, 1 << 20, 1 << 20], [-1], [0], [3, 5], [1 << 62, 4])))
    elif kind == "wrong_type" and inits:
        rng.choice(g.initializer).data_type = rng.choice((0, 8, 16, 17, 22, 23, 40))
    elif kind == "attribute_type" and g.node:
        node = rng.choice(g.node)
        a = node.attribute.add()
        a.name = rng.choice(("value", "axis", "then_branch", "kernel_shape", "x"))
        a.type = rng.choice([v.number for v in onnx.AttributeProto.AttributeType.DESCRIPTOR.values])
        if rng.random() < 0.5:
            a.t.CopyFrom(onnx.TensorProto(name="c", data_type=1, dims=[4, 4], raw_data=b"\0" * 8))
    elif kind == "cycle" and len(g.node) > 1:
        a, b = rng.sample(range(len(g.node)), 2)
        if g.node[a].output and g.node[b].input:
            g.node[b].input[0] = g.node[a].output[0]
            g.node[a].input.append(g.node[b].output[0] if g.node[b].output else "nowhere")
    elif kind == "dangling" and g.node:
        node = rng.choice(g.node)
        node.input.append(rng.choice(("nowhere", "") + tuple(names[:5])))
    elif kind == "nest" and g.node:
        node = rng.choice(g.node)
        inner = onnx.GraphProto()
        inner.CopyFrom(g)
        del inner.initializer[:]
        a = node.attribute.add()
        a.name = "body"
        a.type = onnx.AttributeProto.GRAPH
        a.g.CopyFrom(inner)


def mutate_model(model: onnx.ModelProto, rng: random.Random) -> onnx.ModelProto:
    """A mutated copy of `model`: 1-3 reflective field edits, sometimes a targeted one."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for _ in range(rng.randint(1, 3)):
        fields: list = []
        names: set[str] = set()
        _collect(out, fields, names)
        name_list = sorted(names)
        if rng.random() < 0.25 or not fields:
            _special(out, rng, name_list)
            continue
        msg, field, index = rng.choice(fields)
        try:
            _mutate_field(msg, field, index, rng, name_list)
        except (ValueError, TypeError):  # the value does not fit the field (e.g. invalid UTF-8)
            pass
    return out


# -- JSON (the .xmodel metadata) -------------------------------------------------------------------
def random_json(rng: random.Random, depth: int = 0) -> Any:
    """A random JSON value: scalars of every type, tagged pairs, containers, and deep nesting."""
    kind = rng.randrange(10 if depth < 3 else 7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice((True, False))
    if kind == 2:
        return rng.choice(INTERESTING_INTS + (10 ** 400,))
    if kind == 3:
        return rng.choice((0.5, -1e308, 1e308))
    if kind == 4:
        return rng.choice(INTERESTING_STRINGS)
    if kind == 5:
        return [rng.choice("nbifsyatld" + "qz"), random_json(rng, depth + 1)]
    if kind == 6:
        return []
    if kind == 7:
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == 8:
        return {rng.choice(("name", "ops", "children", "attrs", "x")): random_json(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    nested: Any = []
    for _ in range(rng.randint(60, 300)):
        nested = [nested]
    return nested


def _json_paths(node: Any, path: tuple = (), out: list | None = None) -> list:
    out = [] if out is None else out
    out.append(path)
    if isinstance(node, dict):
        for k, v in node.items():
            _json_paths(v, path + (k,), out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _json_paths(v, path + (i,), out)
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def mutate_json(meta: Any, rng: random.Random, op_names: list[str]) -> Any:
    """1-3 edits of the metadata tree: replace, delete, duplicate, swap op names, rename, re-tag."""
    for _ in range(rng.randint(1, 3)):
        paths = _json_paths(meta)
        path = rng.choice(paths)
        op = rng.randrange(7)
        if not path or op == 0:
            if path:
                parent = _get(meta, path[:-1])
                parent[path[-1]] = random_json(rng)
            else:
                meta = random_json(rng) if rng.random() < 0.1 else meta
            continue
        parent = _get(meta, path[:-1])
        key = path[-1]
        if op == 1:  # delete
            del parent[key]
        elif op == 2 and isinstance(parent, list):  # duplicate an element
            parent.insert(key, json.loads(json.dumps(parent[key])))
        elif op == 3 and op_names:  # an op name where another (or a ghost) was
            parent[key] = rng.choice(op_names + ["ghost"])
        elif op == 4 and isinstance(parent, dict):  # an unknown or duplicated key
            parent[rng.choice(("children", "ops", "name", "attrs", "device", "runner"))] = parent[key]
        elif op == 5 and isinstance(parent[key], list) and len(parent[key]) == 2 and isinstance(parent[key][0], str):
            parent[key][0] = rng.choice("nbifsyatldq")  # re-tag an attr value
        else:
            parent[key] = random_json(rng)
    return meta
