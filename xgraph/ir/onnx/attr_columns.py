"""Attr values of .xmodel format 2: one table of distinct values, referenced by index.

A compiled 100k-op graph repeats a handful of annotation values (a device name, a kernel
source, a few reasons) on every op, and a few attr dicts (device, runner, memory) on every
subgraph. Format 2 writes each distinct value once, in ``"values"`` (tagged as in `xgraph.ir.onnx.attr_json`), and:

- ``"op_annotation_columns"``: annotation key -> one int per op of ``"op_order"``: the index
  of its value in ``"values"``, or -1 where the op has no such annotation;
- in the subgraph tree, a node's ``"attrs"`` maps each key to an index into ``"values"``.

Loading decodes each distinct value once and gives every owner its own copy of a dict or
list (they are mutable: an edit on one subgraph's runner map must not reach another's).
Values that cannot be compared for sharing (numpy arrays) get an entry of their own, and so do the
values of a subgraph attr key that keeps giving new ones (`UNSHARED_AFTER`).
"""
from __future__ import annotations

from typing import Any, Sequence

from xgraph.ir.onnx.attr_json import Decoder, Encoder

#: the JSON index of "no value": the op has no annotation of this key
ABSENT = -1
#: what `DecodedValues.column` gives for an op without the annotation (any JSON value may be a real one)
MISSING = object()

#: the tag of each plain value type in a share key (True == 1 == 1.0 in Python; their keys differ)
_TAGS = {str: "s", int: "i", bool: "b", float: "f", type(None): "n"}


def _share_key(v: Any) -> "tuple | None":
    """A hashable key equal only for values that encode alike, or None when `v` is not shared (arrays, ...).

    One flat tuple per value (containers written prefix-first with their sizes, every plain value after its
    type's tag): the table keeps a key per distinct value, and a nested key would be a tuple per part."""
    out: list = []
    return tuple(out) if _flatten(v, out) else None


def _flatten(v: Any, out: list) -> bool:
    """Append the key parts of `v` to `out`; False when some part cannot be shared."""
    kind = type(v)
    if kind is dict:
        out += ("d", len(v))
        for k, x in v.items():
            if type(k) is not str:
                return False
            tag = _TAGS.get(type(x))
            if tag is not None:  # the usual item, without a call
                out += (k, tag, x)
            else:
                out.append(k)
                if not _flatten(x, out):
                    return False
        return True
    if kind is list or kind is tuple:
        out += ("l" if kind is list else "t", len(v))
        for x in v:
            tag = _TAGS.get(type(x))
            if tag is not None:
                out += (tag, x)
            elif not _flatten(x, out):
                return False
        return True
    tag = _TAGS.get(kind)
    if tag is None:
        return False
    out += (tag, v)
    return True


#: distinct values in a row after which an attr key's values are no longer looked up for sharing: a key whose
#: values name ops or tensors ("template_matches": the roles of one match) never repeats, and its share keys
#: would cost more than writing each value (a 100k-op chain: 14.7k of them)
UNSHARED_AFTER = 64


class ValueTable:
    """Encode side: each distinct value once; `index(v)` is its position in `entries`."""

    def __init__(self, enc: Encoder) -> None:
        self.enc = enc
        self.entries: list[list] = []
        self._text: dict[str, int] = {}  # the usual value: a str, looked up without building a key
        self._keyed: dict[Any, int] = {}
        #: attr key -> how many of its non-text values in a row were new (reset by a repeat)
        self._new_in_row: dict[str, int] = {}

    def index(self, v: Any) -> int:
        """The index of `v` in the table (added on first sight)."""
        if type(v) is str:
            i = self._text.get(v)
            if i is None:
                i = self._text[v] = len(self.entries)
                self.entries.append(["s", v])
            return i
        key = _share_key(v)
        i = self._keyed.get(key) if key is not None else None
        if i is None:
            i = len(self.entries)
            self.entries.append(self.enc.encode(v))
            if key is not None:
                self._keyed[key] = i
        return i

    def attrs(self, attrs: dict[str, Any]) -> dict[str, int]:
        """An attr dict as key -> index (a str seen before, the usual value, without a call)."""
        text = self._text
        return {k: i if type(v) is str and (i := text.get(v)) is not None else self._attr(k, v)
                for k, v in attrs.items()}

    def _attr(self, name: str, v: Any) -> int:
        """`index(v)` for attr `name`, or a new entry without a lookup once `name` had `UNSHARED_AFTER` new
        values in a row (sharing is only a saving: a value written twice decodes the same)."""
        if type(v) is str:
            return self.index(v)
        row = self._new_in_row.get(name, 0)
        if row >= UNSHARED_AFTER:
            self.entries.append(self.enc.encode(v))
            return len(self.entries) - 1
        size = len(self.entries)
        i = self.index(v)
        self._new_in_row[name] = row + 1 if i == size else 0
        return i


def op_annotation_columns(graph: Any, ops: Sequence[Any], table: ValueTable) -> dict[str, list[int]]:
    """Annotation key -> per op (in `ops` order) the index of its value, or `ABSENT`. O(ops * annotations)."""
    index = table.index
    columns = graph.index().annotation_columns(ops, MISSING)
    for key, values in columns.items():
        if set(map(type, values)) <= {str, object}:  # the usual column (devices, kernels, reasons): C-level passes
            codes = {v: ABSENT if v is MISSING else index(v) for v in dict.fromkeys(values)}
            columns[key] = list(map(codes.__getitem__, values))
        else:
            columns[key] = [ABSENT if v is MISSING else index(v) for v in values]
    return columns


def _fresh(v: Any) -> Any:
    """A copy of the containers in `v` (dicts, lists, tuples of them); the rest is immutable or shared read-only."""
    kind = type(v)
    if kind is dict:
        return {k: _fresh(x) for k, x in v.items()}
    if kind is list:
        return [_fresh(x) for x in v]
    if kind is tuple:
        return tuple(_fresh(x) for x in v)
    return v


class DecodedValues:
    """Load side: the table's entries, each checked and decoded on first use; `get(i)` gives an owner its value."""

    def __init__(self, entries: Any, dec: Decoder) -> None:
        if not isinstance(entries, list):
            dec.fail("'values' is not a list")
        self._entries = entries
        self._decoded: list[Any] = [None] * len(entries)
        self._done = [False] * len(entries)
        self._mutable = [False] * len(entries)
        self.dec = dec
        #: attrs objects of table indices only, already decoded: the (key, index, mutable) of each entry
        self._attrs_seen: dict[tuple, list[tuple[str, int, bool]]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def fail(self, what: str) -> None:
        """ModelFileError: the metadata is damaged (`what`)."""
        self.dec.fail(what)

    def get(self, i: Any) -> Any:
        """The value at index `i` (a fresh copy of containers); ModelFileError for an index not in the table."""
        if type(i) is not int or not 0 <= i < len(self._entries):
            self.dec.fail(f"attribute value index {str(i)[:40]} is not in the value table "
                          f"({len(self._entries)} values)")
        if not self._done[i]:
            value = self._decoded[i] = self.dec.decode(self._entries[i])
            self._mutable[i] = type(value) in (dict, list, tuple)
            self._done[i] = True
        value = self._decoded[i]
        return _fresh(value) if self._mutable[i] else value

    def attrs(self, d: Any, where: str) -> dict[str, Any]:
        """A node's attrs: each key -> an index into the table."""
        if not isinstance(d, dict):
            self.dec.fail(f"attrs of {where} are not an object")
        if not set(map(type, d.values())) <= {int}:  # (not bool either: True == 1 would share a memo entry)
            self.dec.fail(f"attrs of {where} hold something other than value indices")
        key = tuple(d.items())
        seen = self._attrs_seen.get(key)
        if seen is not None:  # the same indices as a node before (a tree repeats a few attr dicts): checked
            decoded = self._decoded
            return {k: _fresh(decoded[i]) if mutable else decoded[i] for k, i, mutable in seen}
        get = self.get
        attrs = {k: get(v) for k, v in d.items()}
        self._attrs_seen[key] = [(k, i, self._mutable[i]) for k, i in d.items()]
        return attrs

    def column(self, key: Any, column: Any, n: int) -> list[Any]:
        """One annotation column, checked: per op the value, or `MISSING` where the op has none."""
        if not isinstance(key, str) or not isinstance(column, list) or len(column) != n:
            self.dec.fail(f"op annotation column {str(key)[:40]!r} is not a list of one index per op")
        if not all(type(i) is int for i in column) or (column and min(column) < ABSENT):
            self.dec.fail(f"op annotation column {key!r} holds something other than value indices")
        get = self.get
        table = {i: get(i) for i in dict.fromkeys(column) if i != ABSENT}  # each distinct index checked, decoded once
        if any(self._mutable[i] for i in table):
            return [MISSING if i == ABSENT else get(i) for i in column]  # every owner its own container
        table[ABSENT] = MISSING
        return list(map(table.__getitem__, column))


__all__ = ["ABSENT", "MISSING", "UNSHARED_AFTER", "DecodedValues", "ValueTable", "op_annotation_columns"]
