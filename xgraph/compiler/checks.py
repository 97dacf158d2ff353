"""Support checks and how they compose: a check is a function ``Op -> Verdict``.

A verdict is ok, or not ok with the reason a deployment engineer reads. Small checks compose
with `all_of` / `any_of` and get a device prefix with `labelled`; the simple checks here
(compute dtype, static shapes, rank, used outputs) are the pieces `xgraph.compiler.support`
assembles from a device's op-info table:

    >>> check = all_of(dtype_in(["float32", "float16"]), static_shapes(), max_rank(4))
    >>> check(op)                          # doctest: +SKIP
    Verdict(ok=False, reason='Conv with dtype float64 unsupported: takes float16, float32')

Checks are pure: they read the op, its tensors and the rule, never the rest of the graph (a
check built for one compile may also read what that compile was given: `within_range` its
dims' ranges).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np

from xgraph.devices.oprules import DTYPE_NAMES

if TYPE_CHECKING:
    from xgraph.ir.dim_ranges import DimRanges
    from xgraph.ir import Op, Tensor


@dataclass(frozen=True)
class Verdict:
    """A support answer: ok, or not ok with the reason.

    `names`: the tensor names the reason quotes. Such a verdict speaks of one op only, so
    `xgraph.compiler.verdicts` never hands it to another op of the same signature.
    """

    ok: bool
    reason: str = ""
    names: tuple[str, ...] = field(default=(), compare=False)

    def __bool__(self) -> bool:
        return self.ok


ACCEPT = Verdict(True)
Check = Callable[["Op"], Verdict]


def refuse(reason: str, names: tuple[str, ...] = ()) -> Verdict:
    """A negative verdict (`names`: the tensor names `reason` quotes)."""
    return Verdict(False, reason, names)


# ------------------------------------------------------------------------------ combinators

def all_of(*checks: Check) -> Check:
    """Accept when every check accepts; else the first refusal."""
    def check(op: "Op") -> Verdict:
        for c in checks:
            v = c(op)
            if not v.ok:
                return v
        return ACCEPT
    return check


def any_of(*checks: Check) -> Check:
    """Accept when one check accepts; else every refusal, joined."""
    def check(op: "Op") -> Verdict:
        reasons, names = [], []
        for c in checks:
            v = c(op)
            if v.ok:
                return v
            reasons.append(v.reason)
            names += v.names
        return refuse("; ".join(reasons) or f"{op.type}: no alternative accepts it", tuple(dict.fromkeys(names)))
    return check


def labelled(label: str, check: Check) -> Check:
    """The same check with "LABEL: " in front of its reasons."""
    def labelled_check(op: "Op") -> Verdict:
        v = check(op)
        return v if v.ok else refuse(f"{label}: {v.reason}", v.names)
    return labelled_check


# ------------------------------------------------------------------------------ formatting

def dtype_name(dtype: np.dtype | None) -> str:
    """The table's name for a dtype ("string" for object)."""
    if dtype is None:
        return "unknown"
    return "string" if np.dtype(dtype) == np.dtype(object) else np.dtype(dtype).name


def dtype_names(dtypes: Iterable[np.dtype]) -> str:
    """Dtype names, comma-separated, in the order of DTYPE_NAMES (for messages)."""
    order = list(DTYPE_NAMES)
    return ", ".join(sorted((dtype_name(d) for d in dtypes), key=lambda n: order.index(n) if n in order else 99))


def format_value(value: Any) -> str:
    """An attribute or constant value as a message shows it."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def shape_text(t: "Tensor") -> str:
    """A tensor's shape as a message shows it: (1, ?, 224) or 'unknown rank'."""
    return "unknown rank" if t.shape is None else "(" + ", ".join("?" if d is None else str(d) for d in t.shape) + ")"


def _used_outputs(op: "Op") -> list["Tensor"]:
    outputs = set(op.graph.get_output_tensors())
    return [t for t in op.get_output_tensors() if t.consumers or t in outputs]


def compute_dtype(op: "Op", index: int = 0) -> np.dtype | None:
    """The dtype an op computes in: that of input `index` (else the first known input or output)."""
    inputs = op.get_input_tensors()
    if index < len(inputs) and inputs[index] is not None and inputs[index].dtype is not None:
        return inputs[index].dtype
    for t in list(inputs) + op.get_output_tensors():
        if t is not None and t.dtype is not None:
            return t.dtype
    return None


# ------------------------------------------------------------------------------- primitives

def dtype_in(dtypes: Iterable, index: int = 0, why: str = "") -> Check:
    """Accept when the compute dtype (input `index`) is one of `dtypes`."""
    allowed = frozenset(np.dtype(DTYPE_NAMES.get(d, d) if isinstance(d, str) else d) for d in dtypes)

    def check(op: "Op") -> Verdict:
        d = compute_dtype(op, index)
        if d is None:
            return refuse(f"{op.type} with unknown dtype unsupported: needs a known dtype on input {index}")
        if d in allowed:
            return ACCEPT
        return refuse(f"{op.type} with dtype {dtype_name(d)} unsupported: {why or 'takes ' + dtype_names(allowed)}")
    return check


def not_dtype(*dtypes: Any) -> Check:
    """Refuse ops whose compute dtype is one of `dtypes`."""
    refused = frozenset(np.dtype(DTYPE_NAMES.get(d, d) if isinstance(d, str) else d) for d in dtypes)

    def check(op: "Op") -> Verdict:
        d = compute_dtype(op)
        if d is not None and d in refused:
            return refuse(f"{op.type} with dtype {dtype_name(d)} unsupported")
        return ACCEPT
    return check


def static_shapes() -> Check:
    """Accept when every input and used output has a fully known shape."""
    def check(op: "Op") -> Verdict:
        for t in [t for t in op.get_input_tensors() if t is not None] + _used_outputs(op):
            if not t.is_static():
                return refuse(f"{op.type} with dynamic shape {shape_text(t)} on {t.name!r} unsupported: needs static "
                              "shapes; fix them with the input_shape option", (t.name,))
        return ACCEPT
    return check


def known_ranks() -> Check:
    """Accept when every input and used output has a known rank (dims may be symbolic): what a
    dynamic-shape operator needs, its dims' ranges coming from the input_shape option."""
    def check(op: "Op") -> Verdict:
        for t in [t for t in op.get_input_tensors() if t is not None] + _used_outputs(op):
            if t.shape is None:
                return refuse(f"{op.type} with unknown rank on {t.name!r} unsupported: needs known ranks; fix the "
                              "inputs' shapes with the input_shape option", (t.name,))
        return ACCEPT
    return check


def max_rank(limit: int) -> Check:
    """Accept when no input or used output has a rank above `limit`."""
    def check(op: "Op") -> Verdict:
        for t in [t for t in op.get_input_tensors() if t is not None] + _used_outputs(op):
            if t.shape is not None and len(t.shape) > limit:
                return refuse(f"{op.type} with rank {len(t.shape)} on {t.name!r} unsupported: rank <= {limit}",
                              (t.name,))
        return ACCEPT
    return check


def within_range(low: int, high: int, dims: "DimRanges") -> Check:
    """Accept when every dynamic dim of the inputs and used outputs stays within `low..high` whatever values
    its symbols take in the ranges `dims` gives them (a dim without an upper bound does not), as Ascend
    refuses a shape outside a dynamic-shape operator's declared range."""
    declared = f"its dynamic range {low}..{high}"

    def problem(op: "Op", where: str, dim: Any) -> str | None:
        if not isinstance(dim, str):  # None: a dim shape inference left unnamed, which no range can bound
            return (f"{op.type} dim {where} is unnamed and unbounded, beyond {declared}; fix or name the input's "
                    "dims with the input_shape option")
        least, most = dims.bounds(dim)
        if most is None:
            hint = f'"{dim}:{low}..{high}"' if dims.is_symbol(dim) else "a range for each of its symbols"
            return f"{op.type} dim {dim} has no upper bound, beyond {declared}; bound it with input_shape ({hint})"
        if most > high:
            return f"{op.type} dim {dim} up to {most} exceeds {declared}"
        if least < low:
            return f"{op.type} dim {dim} down to {least} is below {declared}"
        return None

    def check(op: "Op") -> Verdict:
        tensors = [(f"input {i}", t) for i, t in enumerate(op.get_input_tensors())] + \
            [(f"output {op.get_output_tensors().index(t)}", t) for t in _used_outputs(op)]
        for label, t in tensors:
            if t is None or t.is_const or t.shape is None:
                continue
            for axis, dim in enumerate(t.shape):
                if isinstance(dim, int) and dim >= 0:
                    continue
                why = problem(op, f"{axis} of {label}", dim)
                if why is not None:
                    return refuse(why)
        return ACCEPT
    return check


def max_outputs(limit: int) -> Check:
    """Accept when at most `limit` outputs are used."""
    def check(op: "Op") -> Verdict:
        used = set(_used_outputs(op))
        n = max((i + 1 for i, t in enumerate(op.get_output_tensors()) if t in used), default=0)
        if n > limit:
            return refuse(f"{op.type} with {n} used outputs unsupported: takes at most {limit}")
        return ACCEPT
    return check


__all__ = ["ACCEPT", "Check", "Verdict", "all_of", "any_of", "compute_dtype", "dtype_in", "dtype_name", "dtype_names",
           "format_value", "known_ranks", "labelled", "max_outputs", "max_rank", "not_dtype", "refuse", "shape_text",
           "static_shapes", "within_range"]
