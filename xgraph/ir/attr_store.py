"""Attribute storage shared by Graph, Subgraph and Tensor (Op has its own, ONNX-typed), and the copy of attr
values that snapshots and subgraph attrs take."""
from __future__ import annotations

from typing import Any

import numpy as np

from xgraph.errors import GraphError

_SCALARS = (str, bool, int, float, np.integer, np.floating, np.bool_)


def check_attr_value(owner: str, key: str, value: Any, depth: int = 0) -> None:
    """Raise GraphError unless `value` is storable in an .xmodel (str, numbers, bools, lists, dicts, arrays)."""
    if not isinstance(key, str):
        raise GraphError(f"{owner}: attribute names must be str, got {key!r}")
    if depth > 32:
        raise GraphError(f"{owner}: attribute {key!r} is nested more than 32 levels deep")
    if value is None or isinstance(value, _SCALARS + (np.ndarray, bytes)):
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            check_attr_value(owner, key, v, depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise GraphError(f"{owner}: attribute {key!r} is a dict with a non-str key {k!r}")
            check_attr_value(owner, key, v, depth + 1)
        return
    raise GraphError(f"{owner}: attribute {key!r} has unsupported type {type(value).__name__}; "
                     "use str, int, float, bool, lists, dicts or numpy arrays")


def copy_value(value: Any) -> Any:
    """Dicts and lists copied (recursively) so in-place edits of them can be undone and seen; the rest shared."""
    if isinstance(value, dict):
        return {k: copy_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [copy_value(v) for v in value]
    return value


def copy_attrs(attrs: dict[str, Any]) -> dict[str, Any]:
    """`copy_value` of each attribute (a plain copy when no value is a container, the usual case)."""
    if not attrs:
        return {}
    for v in attrs.values():
        if isinstance(v, (dict, list)):
            return {k: copy_value(v) for k, v in attrs.items()}
    return attrs.copy()


class AttrsMixin:
    """has_attr/get_attr/set_attr/get_attrs over `self._attrs`, as in XIR's Python binding."""

    __slots__ = ()

    _attrs: dict[str, Any]

    def _owner(self) -> str:
        return f"{type(self).__name__} {getattr(self, 'name', '?')!r}"

    def has_attr(self, key: str) -> bool:
        """True when attribute `key` is set."""
        return key in self._attrs

    def get_attr(self, key: str) -> Any:
        """The value of attribute `key`; GraphError naming the attributes that exist if absent."""
        try:
            return self._attrs[key]
        except KeyError:
            have = ", ".join(sorted(self._attrs)) or "none"
            raise GraphError(f"{self._owner()} has no attribute {key!r} (it has: {have})") from None

    def set_attr(self, key: str, value: Any) -> None:
        """Set attribute `key` (str, numbers, bools, lists, dicts, numpy arrays)."""
        check_attr_value(self._owner(), key, value)
        self._attrs[key] = value

    def get_attrs(self) -> dict[str, Any]:
        """A copy of all attributes."""
        return dict(self._attrs)

    def del_attr(self, key: str) -> None:
        """Remove attribute `key` if present."""
        self._attrs.pop(key, None)
