"""The op-info rule model: what one device accepts for one op type, parsed from its TOML table.

An op-info library is data (see the `*.toml` files beside this module).
This module turns one parsed TOML document into frozen rule objects and refuses, with the
file and key named, anything it does not understand: a typo in a device table must fail
loudly at load time rather than silently accept or refuse ops.

Vocabulary of a rule (all keys optional unless said):

- op entry (``[ops.Conv]`` or one ``[[group]]`` with ``ops = [...]``): ``domain``, ``dtypes``
  (list of dtype names, or "any"), ``dtype_input`` (which input carries the compute dtype,
  default 0), ``needs_fp16`` (dtypes accepted only when precision_mode lets them run in
  float16), ``static_shapes``, ``dynamic_dims`` (with ``static_shapes``: dims may still be
  symbolic, as long as every rank is known, as for Ascend's dynamic-shape operators),
  ``dynamic_range`` (``[low, high]``, with ``dynamic_dims``: the sizes each dynamic dim may take,
  as the operator declares them; a dim whose input_shape range can leave it is refused), ``max_rank``,
  ``max_outputs``, ``inputs``/``outputs`` (index -> tensor rule), ``attrs`` (name -> value rule),
  ``checks`` (names of built-in checks), ``note``.
- tensor rule: ``dtypes``, ``rank`` (allowed ranks), ``const`` (must be a weight), ``static``,
  ``present`` (true: required; false: must be omitted), ``dims`` (index -> value rule),
  ``values`` (value rule on every element of a weight), ``elements`` (index -> value rule on
  one element of a weight), ``why``.
- value rule: ``in``/``not_in`` (allowed/refused values; for a list attribute, each element),
  ``min``/``max``/``multiple_of`` (ints and each element of int lists), ``len`` (allowed list
  lengths), ``default`` (when the attribute is absent; else the ONNX schema default), ``why``.
  Values in ``in`` may refer to a tensor dim: ``"input0.shape[1]"`` (channels of input 0).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from xgraph.errors import PluginError

#: dtype names a table may use, as numpy dtypes ("string" is numpy's object dtype, as imported).
DTYPE_NAMES: dict[str, np.dtype] = {
    name: np.dtype(name) for name in (
        "float16", "float32", "float64", "int8", "int16", "int32", "int64",
        "uint8", "uint16", "uint32", "uint64", "bool", "complex64", "complex128")
}
DTYPE_NAMES["string"] = np.dtype(object)

_REF = re.compile(r"^(input|output)(\d+)\.shape\[(-?\d+)\]$")
NO_DEFAULT = object()


@dataclass(frozen=True)
class Ref:
    """A dim of one of the op's tensors, used as a value in a rule: "input0.shape[1]"."""

    kind: str  # "input" | "output"
    index: int
    dim: int

    def __str__(self) -> str:
        return f"{self.kind}{self.index}.shape[{self.dim}]"


@dataclass(frozen=True)
class ValueRule:
    """Constraints on one attribute value or one dim."""

    allowed: tuple | None = None  # "in"; items may be Ref
    refused: tuple | None = None  # "not_in"
    min: float | None = None
    max: float | None = None
    multiple_of: int | None = None
    lengths: tuple[int, ...] | None = None  # "len"
    default: Any = NO_DEFAULT
    why: str = ""


@dataclass(frozen=True)
class TensorRule:
    """Constraints on one input or output tensor of an op."""

    dtypes: frozenset | None = None
    rank: tuple[int, ...] | None = None
    const: bool | None = None
    static: bool | None = None
    present: bool | None = None
    dims: Mapping[int, ValueRule] = field(default_factory=dict)
    values: ValueRule | None = None
    elements: Mapping[int, ValueRule] = field(default_factory=dict)
    why: str = ""


@dataclass(frozen=True)
class OpRule:
    """What a device accepts for one op type ("*" for the device's catch-all rule)."""

    op_type: str
    domain: str = ""
    dtypes: frozenset | None = None  # None: any dtype
    dtype_input: int = 0
    needs_fp16: frozenset = frozenset()
    static_shapes: bool = False
    dynamic_dims: bool = False
    dynamic_range: tuple[int, int] | None = None  # (low, high) every dynamic dim must stay within
    max_rank: int | None = None
    max_outputs: int | None = None
    inputs: Mapping[int, TensorRule] = field(default_factory=dict)
    outputs: Mapping[int, TensorRule] = field(default_factory=dict)
    attrs: Mapping[str, ValueRule] = field(default_factory=dict)
    checks: tuple[str, ...] = ()
    note: str = ""
    source: str = ""  # "file.toml: ops.Conv", for messages


@dataclass(frozen=True)
class ShapeValues:
    """The `[shape_values]` of a table: small integer tensors (a shape, a dim, an offset) the device's
    dynamic-shape executor computes on the host in line with the device work, as Ascend's Graph
    Engine runs Shape and the arithmetic on it (host CPU kernels) inside the model it executes.

    An op of one of `ops` qualifies when each output has a dtype of `dtypes` and a known element
    count of at most `max_elements`, and so has each data input, except the input of Shape and
    Size, of which only the descriptor is read.
    """

    ops: frozenset[str] = frozenset()
    dtypes: frozenset = frozenset()
    max_elements: int = 8
    note: str = ""
    source: str = ""


@dataclass(frozen=True)
class OpTable:
    """A device's op-info library: rules by (domain, op type), an optional catch-all, exclusions,
    and the shape values it computes in line (`[shape_values]`)."""

    rules: Mapping[tuple[str, str], OpRule] = field(default_factory=dict)
    any_op: OpRule | None = None
    exclude: Mapping[str, str] = field(default_factory=dict)  # op type -> why
    shape_values: ShapeValues | None = None

    def rule_for(self, op_type: str, domain: str) -> OpRule | None:
        """The rule that governs `op_type` in `domain`: its own entry, else the catch-all (unless excluded)."""
        rule = self.rules.get((domain, op_type))
        if rule is not None:
            return rule
        if self.any_op is not None and op_type not in self.exclude:
            return self.any_op
        return None

    def op_types(self) -> list[str]:
        """Sorted op types listed explicitly (domain-qualified outside the default domain)."""
        return sorted(t if not d else f"{d}.{t}" for d, t in self.rules)


# ---------------------------------------------------------------------------------------- parsing

class Location:
    """Where a value came from, for error messages: file and dotted key."""

    def __init__(self, source: str, key: str = ""):
        self.source, self.key = source, key

    def __truediv__(self, part: Any) -> "Location":
        return Location(self.source, f"{self.key}.{part}" if self.key else str(part))

    def error(self, problem: str) -> PluginError:
        """A PluginError naming the file and key."""
        at = f" key {self.key!r}" if self.key else ""
        return PluginError(f"device table {self.source}:{at} {problem}")


def check_keys(table: Any, allowed: tuple[str, ...], where: Location) -> dict:
    """`table` itself, once it is a table whose keys are all in `allowed`; PluginError naming the others."""
    if not isinstance(table, dict):
        raise where.error(f"must be a table, got {type(table).__name__} {table!r:.60}")
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise where.error(f"unknown key(s) {unknown}; valid keys are {sorted(allowed)}")
    return table


def _int(value: Any, where: Location, minimum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise where.error(f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise where.error(f"must be >= {minimum}, got {value}")
    return value


def _number(value: Any, where: Location) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise where.error(f"must be a number, got {value!r}")
    return value


def _bool(value: Any, where: Location) -> bool:
    if not isinstance(value, bool):
        raise where.error(f"must be true or false, got {value!r}")
    return value


def _str(value: Any, where: Location) -> str:
    if not isinstance(value, str):
        raise where.error(f"must be a string, got {value!r}")
    return value


def _list(value: Any, where: Location) -> list:
    if not isinstance(value, list):
        raise where.error(f"must be a list, got {value!r}")
    return value


def parse_dtypes(value: Any, where: Location) -> frozenset | None:
    """A list of dtype names (or "any" -> None) as a frozenset of numpy dtypes."""
    if value == "any":
        return None
    names = _list(value, where)
    unknown = [n for n in names if n not in DTYPE_NAMES]
    if unknown:
        raise where.error(f"unknown dtype(s) {unknown}; use \"any\" or names from {sorted(DTYPE_NAMES)}")
    return frozenset(DTYPE_NAMES[n] for n in names)


def _index_map(table: Any, where: Location, parse) -> dict[int, Any]:
    if not isinstance(table, dict):
        raise where.error(f"must be a table of index -> rule, got {table!r:.60}")
    out = {}
    for key, value in table.items():
        try:
            index = int(key)
        except ValueError:
            raise (where / key).error("must be an integer index such as 0, 1 or -1") from None
        out[index] = parse(value, where / key)
    return out


def _value_item(item: Any, where: Location) -> Any:
    if isinstance(item, str):
        m = _REF.match(item)
        if m:
            return Ref(m.group(1), int(m.group(2)), int(m.group(3)))
    if isinstance(item, (str, int, float, bool)):
        return item
    raise where.error(f"values must be strings, numbers or dim references like \"input0.shape[1]\", got {item!r}")


def parse_value_rule(table: Any, where: Location) -> ValueRule:
    """One value rule (attribute or dim constraint)."""
    t = check_keys(table, ("in", "not_in", "min", "max", "multiple_of", "len", "default", "why"), where)
    allowed = tuple(_value_item(v, where / "in") for v in _list(t["in"], where / "in")) if "in" in t else None
    refused = tuple(_value_item(v, where / "not_in") for v in _list(t["not_in"], where / "not_in")) \
        if "not_in" in t else None
    lengths = tuple(_int(v, where / "len", 0) for v in _list(t["len"], where / "len")) if "len" in t else None
    return ValueRule(
        allowed=allowed, refused=refused,
        min=_number(t["min"], where / "min") if "min" in t else None,
        max=_number(t["max"], where / "max") if "max" in t else None,
        multiple_of=_int(t["multiple_of"], where / "multiple_of", 1) if "multiple_of" in t else None,
        lengths=lengths, default=t.get("default", NO_DEFAULT),
        why=_str(t.get("why", ""), where / "why"))


def parse_tensor_rule(table: Any, where: Location) -> TensorRule:
    """One tensor rule (an entry of `inputs` or `outputs`)."""
    t = check_keys(table, ("dtypes", "rank", "const", "static", "present", "dims", "values", "elements", "why"),
                    where)
    return TensorRule(
        dtypes=parse_dtypes(t["dtypes"], where / "dtypes") if "dtypes" in t else None,
        rank=tuple(_int(r, where / "rank", 0) for r in _list(t["rank"], where / "rank")) if "rank" in t else None,
        const=_bool(t["const"], where / "const") if "const" in t else None,
        static=_bool(t["static"], where / "static") if "static" in t else None,
        present=_bool(t["present"], where / "present") if "present" in t else None,
        dims=_index_map(t.get("dims", {}), where / "dims", parse_value_rule),
        values=parse_value_rule(t["values"], where / "values") if "values" in t else None,
        elements=_index_map(t.get("elements", {}), where / "elements", parse_value_rule),
        why=_str(t.get("why", ""), where / "why"))


OP_KEYS = ("domain", "dtypes", "dtype_input", "needs_fp16", "static_shapes", "dynamic_dims", "dynamic_range", "max_rank",
           "max_outputs", "inputs", "outputs", "attrs", "checks", "note")


def _dynamic_range(entry: dict, where: Location) -> tuple[int, int] | None:
    """`dynamic_range = [low, high]` (0 <= low <= high), only beside `dynamic_dims = true`."""
    if "dynamic_range" not in entry:
        return None
    value = _list(entry["dynamic_range"], where)
    if len(value) != 2:
        raise where.error(f"must be [low, high], got {value!r}")
    low, high = _int(value[0], where, 0), _int(value[1], where, 0)
    if high < low:
        raise where.error(f"must be [low, high] with low <= high, got {value!r}")
    if entry.get("dynamic_dims") is not True:
        raise where.error("bounds the dims of a dynamic-shape operator; set dynamic_dims = true beside it")
    return low, high


def parse_op_rule(op_type: str, entry: dict, where: Location, known_checks: frozenset[str]) -> OpRule:
    """One op entry (already merged with the table's [defaults])."""
    e = check_keys(entry, OP_KEYS, where)
    checks = tuple(_str(c, where / "checks") for c in _list(e.get("checks", []), where / "checks"))
    unknown = [c for c in checks if c not in known_checks]
    if unknown:
        raise (where / "checks").error(f"unknown check(s) {unknown}; built-in checks are {sorted(known_checks)}")
    attrs = e.get("attrs", {})
    if not isinstance(attrs, dict):
        raise (where / "attrs").error("must be a table of attribute name -> value rule")
    return OpRule(
        op_type=op_type,
        domain=_domain(_str(e.get("domain", ""), where / "domain")),
        dtypes=parse_dtypes(e.get("dtypes", "any"), where / "dtypes"),
        dtype_input=_int(e.get("dtype_input", 0), where / "dtype_input", 0),
        needs_fp16=parse_dtypes(e.get("needs_fp16", []), where / "needs_fp16") or frozenset(),
        static_shapes=_bool(e.get("static_shapes", False), where / "static_shapes"),
        dynamic_dims=_bool(e.get("dynamic_dims", False), where / "dynamic_dims"),
        dynamic_range=_dynamic_range(e, where / "dynamic_range"),
        max_rank=_int(e["max_rank"], where / "max_rank", 0) if "max_rank" in e else None,
        max_outputs=_int(e["max_outputs"], where / "max_outputs", 1) if "max_outputs" in e else None,
        inputs=_index_map(e.get("inputs", {}), where / "inputs", parse_tensor_rule),
        outputs=_index_map(e.get("outputs", {}), where / "outputs", parse_tensor_rule),
        attrs={k: parse_value_rule(v, where / "attrs" / k) for k, v in attrs.items()},
        checks=checks, note=_str(e.get("note", ""), where / "note"),
        source=f"{where.source}: {where.key}")


def _domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def parse_op_table(doc: dict, source: str, known_checks: frozenset[str]) -> OpTable:
    """The [defaults], [ops.*], [[group]], [any_op] and [exclude] parts of a device document."""
    root = Location(source)
    defaults = check_keys(doc.get("defaults", {}), OP_KEYS, root / "defaults")
    rules: dict[tuple[str, str], OpRule] = {}

    def add(op_type: str, entry: dict, where: Location) -> None:
        rule = parse_op_rule(op_type, {**defaults, **entry}, where, known_checks)
        key = (rule.domain, op_type)
        if key in rules:
            raise where.error(f"op {op_type!r} (domain {rule.domain!r}) is already defined at "
                              f"{rules[key].source}; define each op once")
        rules[key] = rule

    ops = doc.get("ops", {})
    if not isinstance(ops, dict):
        raise (root / "ops").error("must be a table of op type -> entry, e.g. [ops.Conv]")
    for op_type, entry in ops.items():
        if not isinstance(entry, dict):
            raise (root / "ops" / op_type).error(f"must be a table ([ops.{op_type}]), got {entry!r:.60}")
        add(op_type, entry, root / "ops" / op_type)
    groups = doc.get("group", [])
    for i, group in enumerate(_list(groups, root / "group")):
        where = root / f"group[{i}]"
        if not isinstance(group, dict) or "ops" not in group:
            raise where.error("each [[group]] needs ops = [\"OpType\", ...] plus the shared rule keys")
        entry = dict(group)
        names = _list(entry.pop("ops"), where / "ops")
        for name in names:
            add(_str(name, where / "ops"), entry, where / name)
    any_op = None
    exclude: dict[str, str] = {}
    if "any_op" in doc:
        where = root / "any_op"
        entry = dict(check_keys(doc["any_op"], OP_KEYS + ("any", "exclude"), where))
        if _bool(entry.pop("any", False), where / "any"):
            raw = entry.pop("exclude", {})
            if not isinstance(raw, dict):
                raise (where / "exclude").error("must be a table of op type -> reason")
            exclude = {k: _str(v, where / "exclude" / k) for k, v in raw.items()}
            any_op = parse_op_rule("*", {**defaults, **entry}, where, known_checks)
        elif entry:
            raise where.error("has rule keys but any = false; set any = true or remove the table")
    return OpTable(rules=rules, any_op=any_op, exclude=exclude,
                   shape_values=_shape_values(doc["shape_values"], root / "shape_values") if "shape_values" in doc else None)


def _shape_values(table: Any, where: Location) -> ShapeValues:
    t = check_keys(table, ("ops", "dtypes", "max_elements", "note"), where)
    if "ops" not in t or "dtypes" not in t:
        raise where.error('needs ops = ["Shape", ...] and dtypes = ["int64", ...]')
    dtypes = parse_dtypes(t["dtypes"], where / "dtypes")
    if not dtypes:
        raise (where / "dtypes").error("must list the integer dtypes of shape values, e.g. [\"int32\", \"int64\"]")
    return ShapeValues(ops=frozenset(_str(o, where / "ops") for o in _list(t["ops"], where / "ops")),
                       dtypes=dtypes, max_elements=_int(t.get("max_elements", 8), where / "max_elements", 1),
                       note=_str(t.get("note", ""), where / "note"), source=str(where))
