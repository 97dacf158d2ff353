"""Support checks: does a device accept an op, and if not, why (in words a deployment engineer reads).

A check is a function ``Op -> Verdict``; the verdict, the combinators (`all_of`, `any_of`,
`labelled`) and the simple dtype and shape checks are in `xgraph.compiler.checks`.
`op_info(spec)` is the composition a device's op-info table describes (dtype, shapes, ranks,
attributes, named checks), built once per table entry:

    >>> check = all_of(op_info(get_devices()["AICORE"]), not_dtype("float64"))
    >>> check(conv)                        # doctest: +SKIP
    Verdict(ok=False, reason='AICORE: Conv with group=3 unsupported: grouped conv needs group == 1 or ...')

Checks are pure: they read the op, its tensors and the rule, never the rest of the graph.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import onnx

from xgraph.compiler.checks import (
    ACCEPT, Check, Verdict, all_of, compute_dtype, dtype_in, dtype_name, dtype_names, format_value, max_outputs,
    known_ranks, max_rank, refuse, shape_text, static_shapes, within_range)
from xgraph.ir.dim_ranges import DimRanges
from xgraph.compiler.host import host_runnable
from xgraph.devices import CHECK_NAMES, DeviceSpec
from xgraph.devices.oprules import NO_DEFAULT, OpRule, Ref, ShapeValues, TensorRule, ValueRule

if TYPE_CHECKING:
    from xgraph.ir import Op

#: precision_mode values under which float32 work may be computed in float16 (ATC's names).
FP16_MODES = frozenset({"force_fp16", "allow_fp32_to_fp16"})
DEFAULT_PRECISION = "must_keep_origin_dtype"


def precision(rule: OpRule, precision_mode: str) -> Check:
    """The rule's dtypes, plus its needs_fp16 dtypes when precision_mode allows float16 compute."""
    if rule.dtypes is None:
        return lambda op: ACCEPT
    fp16_ok = precision_mode in FP16_MODES
    plain = dtype_in(rule.dtypes | (rule.needs_fp16 if fp16_ok else frozenset()), rule.dtype_input)

    def check(op: "Op") -> Verdict:
        d = compute_dtype(op, rule.dtype_input)
        if d is not None and d in rule.needs_fp16 and not fp16_ok:
            return refuse(f"{op.type} with dtype {dtype_name(d)} unsupported under precision_mode={precision_mode}: "
                          "runs in float16 only; set precision_mode to allow_fp32_to_fp16 or force_fp16")
        return plain(op)
    return check


def _resolve(item: Any, op: "Op") -> Any:
    if not isinstance(item, Ref):
        return item
    tensors = op.get_input_tensors() if item.kind == "input" else op.get_output_tensors()
    t = tensors[item.index] if item.index < len(tensors) else None
    if t is None or t.shape is None or not -len(t.shape) <= item.dim < len(t.shape):
        return None
    d = t.shape[item.dim]
    return d if isinstance(d, int) else None


def _describe_allowed(allowed: tuple, op: "Op") -> str:
    parts = []
    for a in allowed:
        if isinstance(a, Ref):
            v = _resolve(a, op)
            parts.append(f"{a} (={'unknown' if v is None else v})")
        else:
            parts.append(format_value(a))
    return ", ".join(parts)


def value_problem(value: Any, rule: ValueRule, op: "Op") -> str | None:
    """Why `value` breaks `rule` (auto-worded), or None when it satisfies it."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if rule.lengths is not None and isinstance(value, (list, tuple)) and len(value) not in rule.lengths:
        return f"length {len(value)}, allowed {format_value(list(rule.lengths))}"
    if rule.allowed is not None:
        allowed = [_resolve(a, op) for a in rule.allowed]
        if any(i not in allowed for i in items):
            return f"allowed: {_describe_allowed(rule.allowed, op)}"
    if rule.refused is not None:
        refused = [_resolve(a, op) for a in rule.refused]
        if any(i in refused for i in items):
            return f"refused: {_describe_allowed(rule.refused, op)}"
    numbers = [i for i in items if isinstance(i, (int, float)) and not isinstance(i, bool)]
    if rule.min is not None and any(i < rule.min for i in numbers):
        return f"must be >= {format_value(rule.min)}"
    if rule.max is not None and any(i > rule.max for i in numbers):
        return f"must be <= {format_value(rule.max)}"
    if rule.multiple_of is not None and any(i % rule.multiple_of for i in numbers):
        return f"must be a multiple of {rule.multiple_of}"
    return None


@functools.lru_cache(maxsize=4096)
def _schema_default(op_type: str, domain: str, opset: int | None, name: str) -> Any:
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain) if opset else onnx.defs.get_schema(op_type, domain)
    except Exception:  # onnx raises SchemaError (not exported under a stable name) for unknown ops
        return NO_DEFAULT
    attr = schema.attributes.get(name)
    if attr is None or attr.default_value is None or attr.default_value.type == 0:
        return NO_DEFAULT
    value = onnx.helper.get_attribute_value(attr.default_value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, list):
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value]
    return value


def attr_rule(name: str, rule: ValueRule) -> Check:
    """Accept when attribute `name` (or its default, when absent) satisfies `rule`."""
    def check(op: "Op") -> Verdict:
        if op.has_attr(name) and not op.is_annotation(name):
            value = op.get_attr(name)
        else:
            value = rule.default if rule.default is not NO_DEFAULT else \
                _schema_default(op.type, op.domain, op.opset(), name)
            if value is NO_DEFAULT:
                return ACCEPT
        problem = value_problem(value, rule, op)
        if problem is None:
            return ACCEPT
        return refuse(f"{op.type} with {name}={format_value(value)} unsupported: {rule.why or problem}")
    return check


def tensor_rule(kind: str, index: int, rule: TensorRule) -> Check:
    """Accept when input/output `index` satisfies `rule` (kind is "input" or "output")."""
    def check(op: "Op") -> Verdict:
        tensors = op.get_input_tensors() if kind == "input" else op.get_output_tensors()
        t = tensors[index] if -len(tensors) <= index < len(tensors) else None
        what = f"{kind} {index}"

        def no(problem: str) -> Verdict:
            return refuse(f"{op.type} with {what} {problem} unsupported: {rule.why or 'see its op-info entry'}")

        if rule.present is True and t is None:
            return refuse(f"{op.type} without {what} unsupported: {rule.why or 'the input is required'}")
        if t is None:
            return ACCEPT
        if rule.present is False:
            return no("given")
        if rule.dtypes is not None and t.dtype not in rule.dtypes:
            return refuse(f"{op.type} with {what} of dtype {dtype_name(t.dtype)} unsupported: "
                          f"{rule.why or 'takes ' + dtype_names(rule.dtypes)}")
        if rule.rank is not None and t.shape is None:
            return refuse(f"{op.type} with {what} of unknown rank unsupported: needs static shapes; fix them with "
                          "the input_shape option")
        if rule.rank is not None and len(t.shape) not in rule.rank:
            return refuse(f"{op.type} with rank-{len(t.shape)} {what} unsupported: "
                          f"{rule.why or 'takes rank ' + format_value(list(rule.rank))}")
        if rule.const is True and not t.is_const:
            return refuse(f"{op.type} with non-constant {what} ({t.name!r}) unsupported: {rule.why or 'needs a weight'}",
                          (t.name,))
        if rule.static is True and not t.is_static():
            return no(f"of dynamic shape {shape_text(t)}")
        for dim, vr in rule.dims.items():
            if t.shape is None or not -len(t.shape) <= dim < len(t.shape) or not isinstance(t.shape[dim], int):
                continue  # unknown dims skip dim checks (static_shapes makes them known)
            problem = value_problem(t.shape[dim], vr, op)
            if problem:
                return refuse(f"{op.type} with {what} dim {dim} = {t.shape[dim]} unsupported: {vr.why or rule.why or problem}")
        if rule.values is not None or rule.elements:
            if not t.is_const:
                return refuse(f"{op.type} with non-constant {what} ({t.name!r}) unsupported: "
                              f"{rule.why or 'its values must be known'}", (t.name,))
            flat = np.asarray(t.data).reshape(-1).tolist()
            if rule.values is not None:
                problem = value_problem(flat, rule.values, op)
                if problem:
                    return refuse(f"{op.type} with {what} = {format_value(flat)} unsupported: {rule.values.why or rule.why or problem}")
            for i, vr in rule.elements.items():
                if -len(flat) <= i < len(flat):
                    problem = value_problem(flat[i], vr, op)
                    if problem:
                        return refuse(f"{op.type} with {what}[{i}] = {format_value(flat[i])} unsupported: "
                                      f"{vr.why or rule.why or problem}")
        return ACCEPT
    return check


# ------------------------------------------------------------------------------ named checks

def dvpp_image_rules() -> Check:
    """Accept DVPP ops whose input shape and attributes keep the engine's rules (xgraph.ops.dvpp.DVPP_RULES)."""
    def check(op: "Op") -> Verdict:
        from xgraph.ops.dvpp import image_rule_violations
        inputs = op.get_input_tensors()
        shape = inputs[0].shape if inputs and inputs[0] is not None else None
        problems = image_rule_violations(op.type, shape, op.get_onnx_attrs())
        return refuse("; ".join(problems)) if problems else ACCEPT
    return check


def int8_weights() -> Check:
    """Accept a DequantizeLinear an int8 cube unit can fold: int32 only as a constant bias, and a constant
    weight only as int8 and symmetric (zero points all 0; Ascend and Vitis quantize weights without
    offset; a uint8 weight always has one)."""
    def check(op: "Op") -> Verdict:
        inputs = op.get_input_tensors()
        x = inputs[0]
        zp = inputs[2] if len(inputs) > 2 else None
        if x is None:
            return ACCEPT
        if x.dtype == np.int32 and not x.is_const:
            return refuse(f"{op.type} of non-constant int32 {x.name!r} unsupported: int32 dequantizes only as a "
                          "constant bias of an int8 unit", (x.name,))
        if x.is_const and x.dtype == np.uint8:
            return refuse(f"{op.type} of weight {x.name!r} as uint8 unsupported: AI Core takes int8 weights with "
                          "zero point 0; quantize weights symmetric int8 (xgraph quantize does)", (x.name,))
        if x.is_const and x.dtype == np.int8 and zp is not None:
            if not zp.is_const:
                return refuse(f"{op.type} of weight {x.name!r} with a computed zero point unsupported", (x.name,))
            if np.any(np.asarray(zp.data) != 0):
                return refuse(f"{op.type} of weight {x.name!r} with non-zero zero points unsupported: asymmetric "
                              "int8 weights; quantize weights symmetric (xgraph quantize does)", (x.name,))
        return ACCEPT
    return check


#: The checks a device table may name under `checks`.
NAMED_CHECKS: dict[str, Callable[[], Check]] = {"host_runnable": host_runnable, "dvpp_image_rules": dvpp_image_rules,
                                                "int8_weights": int8_weights}
if set(NAMED_CHECKS) != set(CHECK_NAMES):  # the table loader validates names against CHECK_NAMES
    raise ImportError(f"named checks {sorted(NAMED_CHECKS)} disagree with CHECK_NAMES {sorted(CHECK_NAMES)}")


# ------------------------------------------------------------------------------ op-info tables

def op_rule(rule: OpRule, precision_mode: str = DEFAULT_PRECISION, dims: DimRanges | None = None) -> Check:
    """One table entry as a composed check (without the device label); `dims`: the compile's dim ranges, which a
    `dynamic_range` checks (None: none given, every dynamic dim unbounded)."""
    checks: list[Check] = [precision(rule, precision_mode)]
    if rule.max_outputs is not None:
        checks.append(max_outputs(rule.max_outputs))
    # what the op is given (operands, attributes) before what follows from it (shapes), so a
    # non-constant operand is named rather than the unknown shapes it causes
    checks += [tensor_rule("input", i, r) for i, r in rule.inputs.items()]
    checks += [attr_rule(name, r) for name, r in rule.attrs.items()]
    if rule.static_shapes:
        checks.append(known_ranks() if rule.dynamic_dims else static_shapes())
    if rule.dynamic_range is not None:
        checks.append(within_range(*rule.dynamic_range, dims if dims is not None else DimRanges()))
    if rule.max_rank is not None:
        checks.append(max_rank(rule.max_rank))
    checks += [tensor_rule("output", i, r) for i, r in rule.outputs.items()]
    checks += [NAMED_CHECKS[name]() for name in rule.checks]
    return all_of(*checks)


#: Ops that read only their input's descriptor (its shape), never its data.
DESCRIPTOR_OPS = frozenset({"Shape", "Size"})


def _small_int(t: Any, values: ShapeValues) -> bool:
    if t is None or t.dtype is None or np.dtype(t.dtype) not in values.dtypes or t.shape is None:
        return False
    if not all(isinstance(d, int) and d >= 0 for d in t.shape):
        return False
    return int(np.prod(t.shape, dtype=np.int64)) <= values.max_elements


def shape_value(op: "Op", values: ShapeValues) -> bool:
    """True when `op` computes a shape value the table's `[shape_values]` takes (see ShapeValues)."""
    if op.type not in values.ops or op.domain:
        return False
    if not all(_small_int(t, values) for t in op.get_output_tensors()):
        return False
    if op.type in DESCRIPTOR_OPS:
        return True
    return all(t is None or _small_int(t, values) for t in op.get_input_tensors())


def op_info(spec: DeviceSpec, precision_mode: str = DEFAULT_PRECISION, dims: DimRanges | None = None) -> Check:
    """The device's op-info library as a check; refusals start with the device name. `dims`: as for `op_rule`.

    An op its own rule refuses (or that has none) is still taken as a shape value when the
    table's `[shape_values]` covers it."""
    compiled: dict[int, Check] = {}
    values = spec.ops.shape_values

    def check(op: "Op") -> Verdict:
        if values is not None and shape_value(op, values):
            return ACCEPT
        rule = spec.ops.rule_for(op.type, op.domain)
        if rule is None:
            why = spec.ops.exclude.get(op.type)
            if why is not None:
                return refuse(f"{spec.name}: {op.type} excluded: {why}")
            domain = f" (domain {op.domain!r})" if op.domain else ""
            return refuse(f"{spec.name}: {op.type}{domain} is not in its op-info library")
        c = compiled.get(id(rule))
        if c is None:
            c = compiled[id(rule)] = op_rule(rule, precision_mode, dims)
        v = c(op)
        return v if v.ok else refuse(f"{spec.name}: {v.reason}", v.names)
    return check


__all__ = ["NAMED_CHECKS", "attr_rule", "dvpp_image_rules", "op_info", "op_rule", "precision", "tensor_rule",
           "value_problem"]
