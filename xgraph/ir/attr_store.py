"""Attribute storage shared by Graph, Subgraph and Tensor (Op has its own, ONNX-typed), and the copy of attr
values that snapshots and subgraph attrs take."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xgraph.errors import GraphError

_SCALARS = (str, bool, int, float, np.integer, np.floating, np.bool_)
#: the exact types most attr values are made of: accepted without a call or an isinstance chain
_PLAIN = frozenset({str, bool, int, float, bytes, type(None)})
#: every other type of value an attr may hold besides lists, tuples and dicts
_STORABLE = _SCALARS + (np.ndarray, bytes)
#: how deep lists and dicts may nest
MAX_DEPTH = 32


def check_attr_value(owner: "str | Callable[[], str]", key: str, value: Any, depth: int = 0) -> None:
    """Raise GraphError unless `value` is storable in an .xmodel (str, numbers, bools, lists, dicts, arrays).

    `owner` names the object for the message: a str, or what makes one (called only when there is a message)."""
    if type(key) is not str and not isinstance(key, str):
        raise GraphError(f"{_named(owner)}: attribute names must be str, got {key!r}")
    if depth > MAX_DEPTH:
        _too_deep(owner, key)
    if type(value) in _PLAIN:
        return
    if isinstance(value, (list, tuple)):
        if value and depth == MAX_DEPTH:  # its items would lie deeper than allowed
            _too_deep(owner, key)
        for v in value:
            if type(v) not in _PLAIN:  # a plain item needs no call
                check_attr_value(owner, key, v, depth + 1)
        return
    if isinstance(value, dict):
        if value and depth == MAX_DEPTH:
            _too_deep(owner, key)
        for k, v in value.items():
            if type(k) is not str and not isinstance(k, str):
                raise GraphError(f"{_named(owner)}: attribute {key!r} is a dict with a non-str key {k!r}")
            if type(v) not in _PLAIN:
                check_attr_value(owner, key, v, depth + 1)
        return
    if isinstance(value, _STORABLE):
        return
    raise GraphError(f"{_named(owner)}: attribute {key!r} has unsupported type {type(value).__name__}; "
                     "use str, int, float, bool, lists, dicts or numpy arrays")


def _named(owner: "str | Callable[[], str]") -> str:
    return owner if isinstance(owner, str) else owner()


def _too_deep(owner: "str | Callable[[], str]", key: str) -> None:
    raise GraphError(f"{_named(owner)}: attribute {key!r} is nested more than {MAX_DEPTH} levels deep")


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
        check_attr_value(self._owner, key, value)
        self._attrs[key] = value

    def get_attrs(self) -> dict[str, Any]:
        """A copy of all attributes."""
        return dict(self._attrs)

    def del_attr(self, key: str) -> None:
        """Remove attribute `key` if present."""
        self._attrs.pop(key, None)
