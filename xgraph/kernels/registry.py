"""The kernel registry: numpy implementations keyed by (op type, domain, device, dtype), versioned by opset.

A kernel is a plain function. Its positional parameters are the op's inputs in ONNX order
(``None`` for an omitted optional input; trailing omitted inputs are simply not passed, so
Python defaults stand in for them); its keyword-only parameters are the op's ONNX attributes
under their ONNX names, with the ONNX defaults. It returns one array, or a tuple of arrays for
ops with several outputs (the caller keeps as many as the op declares).

    >>> @kernel("Relu", since=14, dtypes=(np.float32,))
    ... def relu(x):
    ...     return np.maximum(x, 0)

Lookup takes the kernel with the largest ``since <= opset`` for the op's domain.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from xgraph.errors import KernelError

#: Devices a kernel runs on when its decorator does not say (numpy runs on this host for all of them).
DEFAULT_DEVICES = ("AICORE", "AICPU", "CPU")


@dataclass(frozen=True)
class Kernel:
    """One registered implementation of one op type from one opset version on."""

    op_type: str
    domain: str
    since: int
    devices: tuple[str, ...]
    dtypes: tuple[np.dtype, ...] | None  # None: any dtype
    fn: Callable
    wants_num_outputs: bool = field(default=False, compare=False)

    def __call__(self, *inputs, **attrs):
        """Run the kernel: inputs positionally, attributes by keyword."""
        return self.fn(*inputs, **attrs)

    def invoke(self, inputs: Sequence[Any], attrs: dict[str, Any], num_outputs: int) -> list:
        """Call with an op's inputs (None = omitted) and attributes; returns exactly `num_outputs` values.

        Trailing omitted inputs are dropped so Python defaults apply. A kernel whose output
        count is not fixed by its attributes (Split before opset 18) declares a keyword-only
        `num_outputs` parameter and receives the op's output count there.
        """
        args = list(inputs)
        while args and args[-1] is None:
            args.pop()
        if self.wants_num_outputs and "num_outputs" not in attrs:
            attrs = dict(attrs, num_outputs=num_outputs)
        result = self.fn(*args, **attrs)
        if not isinstance(result, (tuple, list)):
            result = (result,)
        return list(result[:num_outputs])

    def accepts(self, device: str | None, dtype: np.dtype | None) -> bool:
        """True when this kernel serves `device` and `dtype` (None means "any")."""
        if device is not None and device not in self.devices:
            return False
        if dtype is not None and self.dtypes is not None and np.dtype(dtype) not in self.dtypes:
            return False
        return True


def _domain(domain: str) -> str:
    return "" if domain in ("", "ai.onnx") else domain


class KernelRegistry:
    """Kernels by (domain, op type); each list kept sorted by `since`, newest last.

    A registry may stand on `bases` (other registries it reads through, live): a lookup sees
    its own kernels and those of its bases, its own winning a tie. The registries object of a
    session (`xgraph.registries`) stands on `KERNELS`, which stands on `BUILTIN_KERNELS`, so a
    kernel declared later with a bare ``@kernel`` is still found.
    """

    def __init__(self, bases: Iterable["KernelRegistry"] = ()) -> None:
        self._kernels: dict[tuple[str, str], list[Kernel]] = {}
        self._bases: list[KernelRegistry] = list(bases)

    def include(self, base: "KernelRegistry") -> None:
        """Read through `base` too (live: kernels added to it later are found); idempotent."""
        if base is self or any(b is base for b in self._bases):
            return
        self._bases.append(base)

    def add(self, k: Kernel) -> None:
        """Register `k`; a later kernel with the same key and `since` replaces the earlier one."""
        versions = self._kernels.setdefault((_domain(k.domain), k.op_type), [])
        versions[:] = [v for v in versions if not (v.since == k.since and v.devices == k.devices and v.dtypes == k.dtypes)]
        versions.append(k)
        versions.sort(key=lambda v: v.since)

    def remove(self, k: Kernel) -> None:
        """Forget `k` (a kernel of this registry itself, not of its bases); a no-op if absent."""
        versions = self._kernels.get((_domain(k.domain), k.op_type))
        if versions is not None:
            versions[:] = [v for v in versions if v != k]

    def holds(self, k: Kernel) -> bool:
        """True when `k` itself was registered here (not in a base): how "built-in" is decided."""
        return any(v == k for v in self._kernels.get((_domain(k.domain), k.op_type), ()))

    def _versions(self, domain: str, op_type: str) -> list[Kernel]:
        """Own kernels then the bases', each group sorted by `since` (the sort below is stable)."""
        key = (_domain(domain), op_type)
        found = list(self._kernels.get(key, ()))
        for base in self._bases:
            found += [k for k in base._versions(domain, op_type) if k not in found]
        return found

    def find(self, op_type: str, domain: str = "", opset: int | None = None,
             device: str | None = None, dtype=None) -> Kernel | None:
        """The best kernel for the key, or None (see `lookup` for the error form).

        Best: the largest `since <= opset` that serves `device` and `dtype`; on a tie, this
        registry's own kernel before its bases'.
        """
        best: Kernel | None = None
        for k in self._versions(domain, op_type):
            if opset is not None and k.since > opset:
                continue
            if (best is None or k.since > best.since) and k.accepts(device, dtype):
                best = k
        return best

    def lookup(self, op_type: str, domain: str = "", opset: int | None = None,
               device: str | None = None, dtype=None) -> Kernel:
        """The best kernel for the key; a KernelError that lists what the device has otherwise."""
        k = self.find(op_type, domain, opset, device, dtype)
        if k is not None:
            return k
        where = device or "any device"
        have = ", ".join(self.op_types(device)) or "nothing"
        versions = self._versions(domain, op_type)
        detail = ""
        if versions:
            detail = " (registered: " + "; ".join(
                f"since {v.since} on {'/'.join(v.devices)} for "
                f"{'any dtype' if v.dtypes is None else '/'.join(str(d) for d in v.dtypes)}" for v in versions) + ")"
        raise KernelError(
            f"No kernel for {op_type!r} (domain {domain!r}, opset {opset}, dtype {dtype}) on {where}{detail}; "
            f"{where} has: {have}. Add one with @kernel({op_type!r}, ...) or allow the CPU fallback.")

    def _keys(self) -> set[tuple[str, str]]:
        keys = set(self._kernels)
        for base in self._bases:
            keys |= base._keys()
        return keys

    def op_types(self, device: str | None = None, domain: str | None = None) -> list[str]:
        """Sorted op types with at least one kernel on `device` (and in `domain`, if given)."""
        return sorted({t for (d, t) in self._keys()
                       if (domain is None or d == _domain(domain))
                       and any(k.accepts(device, None) for k in self._versions(d, t))})

    def __iter__(self):
        for domain, op_type in sorted(self._keys()):
            yield from self._versions(domain, op_type)

    def __len__(self) -> int:
        return sum(1 for _ in self)


#: xgraph's own kernels: the op-family modules of `xgraph.kernels` fill it (`builtin_kernel`).
BUILTIN_KERNELS = KernelRegistry()
#: What a bare ``@kernel`` fills (a plugin module, a test), standing on the built-ins.
KERNELS = KernelRegistry(bases=(BUILTIN_KERNELS,))


def kernel(op_type: str, *, domain: str = "", since: int = 1,
           devices: Iterable[str] = DEFAULT_DEVICES, dtypes: Iterable | None = None,
           registry: KernelRegistry | None = None) -> Callable[[Callable], Callable]:
    """Decorator registering a function as the kernel for `op_type` from opset `since` on."""

    def register(fn: Callable) -> Callable:
        try:
            wants = "num_outputs" in inspect.signature(fn).parameters
        except (TypeError, ValueError):  # builtins without a signature
            wants = False
        (registry if registry is not None else KERNELS).add(Kernel(
            op_type=op_type, domain=_domain(domain), since=since, devices=tuple(devices),
            dtypes=None if dtypes is None else tuple(np.dtype(d) for d in dtypes), fn=fn,
            wants_num_outputs=wants))
        return fn

    return register


def builtin_kernel(op_type: str, **options: Any) -> Callable[[Callable], Callable]:
    """`kernel` for xgraph's own op-family modules: registers into `BUILTIN_KERNELS`."""
    return kernel(op_type, registry=BUILTIN_KERNELS, **options)
