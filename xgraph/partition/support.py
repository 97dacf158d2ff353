"""Support checks: does a device accept an op, and if not, why (in words a deployment engineer reads).

A check is a function ``Op -> Verdict``. Small checks compose with `all_of` / `any_of` and get
a device prefix with `labelled`; `op_info(spec)` is the composition a device's op-info table
describes (dtype, shapes, ranks, attributes, named checks), built once per table entry:

    >>> check = all_of(op_info(get_devices()["AICORE"]), not_dtype("float64"))
    >>> check(conv)                        # doctest: +SKIP
    Verdict(ok=False, reason='AICORE: Conv with group=3 unsupported: grouped conv needs group == 1 or ...')

Checks are pure: they read the op, its tensors and the rule, never the rest of the graph.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

import numpy as np
import onnx

from xgraph.plugins.devices import CHECK_NAMES, DeviceSpec
from xgraph.plugins.devices.oprules import DTYPE_NAMES, NO_DEFAULT, OpRule, Ref, TensorRule, ValueRule

if TYPE_CHECKING:
    from xgraph.ir import Op, Tensor

#: precision_mode values under which float32 work may be computed in float16 (ATC's names).
FP16_MODES = frozenset({"force_fp16", "allow_fp32_to_fp16"})
DEFAULT_PRECISION = "must_keep_origin_dtype"


@dataclass(frozen=True)
class Verdict:
    """A support answer: ok, or not ok with the reason."""

    ok: bool
    reason: str = ""

    def __bool__(self) -> bool:
        return self.ok


ACCEPT = Verdict(True)
Check = Callable[["Op"], Verdict]


def refuse(reason: str) -> Verdict:
    """A negative verdict."""
    return Verdict(False, reason)


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
        reasons = []
        for c in checks:
            v = c(op)
            if v.ok:
                return v
            reasons.append(v.reason)
        return refuse("; ".join(reasons) or f"{op.type}: no alternative accepts it")
    return check


def labelled(label: str, check: Check) -> Check:
    """The same check with "LABEL: " in front of its reasons."""
    def labelled_check(op: "Op") -> Verdict:
        v = check(op)
        return v if v.ok else refuse(f"{label}: {v.reason}")
    return labelled_check


# ------------------------------------------------------------------------------ formatting

def dtype_name(dtype: np.dtype | None) -> str:
    """The table's name for a dtype ("string" for object)."""
    if dtype is None:
        return "unknown"
    return "string" if np.dtype(dtype) == np.dtype(object) else np.dtype(dtype).name


def _names(dtypes: Iterable[np.dtype]) -> str:
    order = list(DTYPE_NAMES)
    return ", ".join(sorted((dtype_name(d) for d in dtypes), key=lambda n: order.index(n) if n in order else 99))


def _fmt(value: Any) -> str:
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _shape(t: "Tensor") -> str:
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
        return refuse(f"{op.type} with dtype {dtype_name(d)} unsupported: {why or 'takes ' + _names(allowed)}")
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
                return refuse(f"{op.type} with dynamic shape {_shape(t)} on {t.name!r} unsupported: needs static "
                              "shapes; fix them with the input_shape option")
        return ACCEPT
    return check


def max_rank(limit: int) -> Check:
    """Accept when no input or used output has a rank above `limit`."""
    def check(op: "Op") -> Verdict:
        for t in [t for t in op.get_input_tensors() if t is not None] + _used_outputs(op):
            if t.shape is not None and len(t.shape) > limit:
                return refuse(f"{op.type} with rank {len(t.shape)} on {t.name!r} unsupported: rank <= {limit}")
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
            parts.append(_fmt(a))
    return ", ".join(parts)


def value_problem(value: Any, rule: ValueRule, op: "Op") -> str | None:
    """Why `value` breaks `rule` (auto-worded), or None when it satisfies it."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if rule.lengths is not None and isinstance(value, (list, tuple)) and len(value) not in rule.lengths:
        return f"length {len(value)}, allowed {_fmt(list(rule.lengths))}"
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
        return f"must be >= {_fmt(rule.min)}"
    if rule.max is not None and any(i > rule.max for i in numbers):
        return f"must be <= {_fmt(rule.max)}"
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
        return refuse(f"{op.type} with {name}={_fmt(value)} unsupported: {rule.why or problem}")
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
                          f"{rule.why or 'takes ' + _names(rule.dtypes)}")
        if rule.rank is not None and t.shape is None:
            return refuse(f"{op.type} with {what} of unknown rank unsupported: needs static shapes; fix them with "
                          "the input_shape option")
        if rule.rank is not None and len(t.shape) not in rule.rank:
            return refuse(f"{op.type} with rank-{len(t.shape)} {what} unsupported: "
                          f"{rule.why or 'takes rank ' + _fmt(list(rule.rank))}")
        if rule.const is True and not t.is_const:
            return refuse(f"{op.type} with non-constant {what} ({t.name!r}) unsupported: {rule.why or 'needs a weight'}")
        if rule.static is True and not t.is_static():
            return no(f"of dynamic shape {_shape(t)}")
        for dim, vr in rule.dims.items():
            if t.shape is None or not -len(t.shape) <= dim < len(t.shape) or not isinstance(t.shape[dim], int):
                continue  # unknown dims skip dim checks (static_shapes makes them known)
            problem = value_problem(t.shape[dim], vr, op)
            if problem:
                return refuse(f"{op.type} with {what} dim {dim} = {t.shape[dim]} unsupported: {vr.why or rule.why or problem}")
        if rule.values is not None or rule.elements:
            if not t.is_const:
                return refuse(f"{op.type} with non-constant {what} ({t.name!r}) unsupported: "
                              f"{rule.why or 'its values must be known'}")
            flat = np.asarray(t.data).reshape(-1).tolist()
            if rule.values is not None:
                problem = value_problem(flat, rule.values, op)
                if problem:
                    return refuse(f"{op.type} with {what} = {_fmt(flat)} unsupported: {rule.values.why or rule.why or problem}")
            for i, vr in rule.elements.items():
                if -len(flat) <= i < len(flat):
                    problem = value_problem(flat[i], vr, op)
                    if problem:
                        return refuse(f"{op.type} with {what}[{i}] = {_fmt(flat[i])} unsupported: "
                                      f"{vr.why or rule.why or problem}")
        return ACCEPT
    return check


# ------------------------------------------------------------------------------ named checks

@functools.lru_cache(maxsize=4096)
def _reference_implements(op_type: str, domain: str, opset: int | None) -> bool:
    if domain == "ai.onnx.ml":
        from onnx.reference.ops.aionnxml import load_op as load_ml_op
        try:
            load_ml_op(domain, op_type, opset)
            return True
        except Exception:  # the evaluator raises assorted errors for "not implemented"
            return False
    if domain != "":
        return False
    from onnx.reference.ops import load_op
    try:
        load_op(domain, op_type, opset)
        return True
    except Exception:  # same: any failure means "no implementation"
        pass
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain) if opset else onnx.defs.get_schema(op_type, domain)
    except Exception:  # unknown op
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def reference_can_run(op: "Op") -> bool:
    """True when the ONNX reference evaluator runs `op` (built in, a schema function, or a model-local function)."""
    if any(f.domain == op.domain and f.name == op.type for f in op.graph.functions):
        return True
    return _reference_implements(op.type, op.domain, op.opset())


def numpy_kernel(op: "Op", device: str) -> bool:
    """True when the kernel registry has a numpy kernel for `op` on `device` (or on the host, as runners fall back)."""
    from xgraph.runners.executor import kernel_registry
    registry = kernel_registry()
    dtype = compute_dtype(op)
    return any(registry.find(op.type, op.domain, op.opset(), d, dtype) is not None for d in dict.fromkeys((device, "CPU")))


def host_runnable() -> Check:
    """Accept ops the host can run: a numpy kernel, else the ONNX reference evaluator."""
    def check(op: "Op") -> Verdict:
        if numpy_kernel(op, "CPU") or reference_can_run(op):
            return ACCEPT
        domain = f" (domain {op.domain!r})" if op.domain else ""
        return refuse(f"{op.type}{domain} has no numpy kernel and the ONNX reference evaluator cannot run it; "
                      "register a kernel with @kernel or place it with a plugin")
    return check


def dvpp_image_rules() -> Check:
    """Accept DVPP ops whose input shape and attributes keep the engine's rules (xgraph.ops.dvpp.DVPP_RULES)."""
    def check(op: "Op") -> Verdict:
        from xgraph.ops.dvpp import image_rule_violations
        inputs = op.get_input_tensors()
        shape = inputs[0].shape if inputs and inputs[0] is not None else None
        problems = image_rule_violations(op.type, shape, op.get_onnx_attrs())
        return refuse("; ".join(problems)) if problems else ACCEPT
    return check


#: The checks a device table may name under `checks`.
NAMED_CHECKS: dict[str, Callable[[], Check]] = {"host_runnable": host_runnable, "dvpp_image_rules": dvpp_image_rules}
if set(NAMED_CHECKS) != set(CHECK_NAMES):  # the table loader validates names against CHECK_NAMES
    raise ImportError(f"named checks {sorted(NAMED_CHECKS)} disagree with CHECK_NAMES {sorted(CHECK_NAMES)}")


# ------------------------------------------------------------------------------ op-info tables

def op_rule(rule: OpRule, precision_mode: str = DEFAULT_PRECISION) -> Check:
    """One table entry as a composed check (without the device label)."""
    checks: list[Check] = [precision(rule, precision_mode)]
    if rule.max_outputs is not None:
        checks.append(max_outputs(rule.max_outputs))
    # what the op is given (operands, attributes) before what follows from it (shapes), so a
    # non-constant operand is named rather than the unknown shapes it causes
    checks += [tensor_rule("input", i, r) for i, r in rule.inputs.items()]
    checks += [attr_rule(name, r) for name, r in rule.attrs.items()]
    if rule.static_shapes:
        checks.append(static_shapes())
    if rule.max_rank is not None:
        checks.append(max_rank(rule.max_rank))
    checks += [tensor_rule("output", i, r) for i, r in rule.outputs.items()]
    checks += [NAMED_CHECKS[name]() for name in rule.checks]
    return all_of(*checks)


def op_info(spec: DeviceSpec, precision_mode: str = DEFAULT_PRECISION) -> Check:
    """The device's op-info library as a check; refusals start with the device name."""
    compiled: dict[int, Check] = {}

    def check(op: "Op") -> Verdict:
        rule = spec.ops.rule_for(op.type, op.domain)
        if rule is None:
            why = spec.ops.exclude.get(op.type)
            if why is not None:
                return refuse(f"{spec.name}: {op.type} excluded: {why}")
            domain = f" (domain {op.domain!r})" if op.domain else ""
            return refuse(f"{spec.name}: {op.type}{domain} is not in its op-info library")
        c = compiled.get(id(rule))
        if c is None:
            c = compiled[id(rule)] = op_rule(rule, precision_mode)
        v = c(op)
        return v if v.ok else refuse(f"{spec.name}: {v.reason}")
    return check


__all__ = ["ACCEPT", "Check", "NAMED_CHECKS", "Verdict", "all_of", "any_of", "attr_rule", "compute_dtype",
           "dtype_in", "dvpp_image_rules", "host_runnable", "labelled", "max_outputs", "max_rank", "not_dtype",
           "numpy_kernel", "op_info", "op_rule", "precision", "reference_can_run", "refuse", "static_shapes",
           "tensor_rule", "value_problem"]
