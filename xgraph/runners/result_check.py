"""Checking what a runner returns against the tensors it declares, on every run.

A runner (built-in or a plugin's) returns one value per output tensor. Before those values
reach a caller, the next subgraph or a preallocated buffer, each is checked: a numpy array of
the declared dtype, of the declared rank, with every fixed dim equal and every symbolic dim
("batch") bound to one value for the whole run, inputs included. A mismatch fails the job with
a message naming the subgraph, the runner, the output and what was expected vs returned.

Cost: the expected signature is built once per runner; a check is a few attribute reads per
output (about 0.5 us each; `benchmarks/result_check.py` measures it).

    >>> import numpy as np
    >>> check = ResultCheck("runner R", [("y", np.dtype(np.float32), (1, 1000))], [])
    >>> check([], [np.zeros(3)])
    Traceback (most recent call last):
    ...
    xgraph.errors.RunnerError: runner R: output 'y' must be float32 of shape (1, 1000), got float64 of shape (3,)
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import numpy as np

from xgraph.errors import RunnerError
from xgraph.runners.io_checks import DTYPE_SHAPE, ONLY_ARRAYS, SHAPE, SIGNATURES_KEPT, shape_key
#: (tensor name, dtype or None, shape tuple or None (unknown rank)); dims: int | str | None.
Signature = tuple[str, "np.dtype | None", "tuple | None"]


def _describe(dtype: "np.dtype | None", shape: "tuple | None") -> str:
    return f"{dtype if dtype is not None else 'any dtype'} of shape {shape if shape is not None else '(any)'}"


def _returned(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"{value.dtype} of shape {value.shape}"
    return f"a {type(value).__name__} ({value!r:.60})"


class _Output:
    """One output's expected value, precomputed so the per-run check is a few comparisons."""

    __slots__ = ("name", "dtype", "shape", "static", "rank", "fixed_at", "fixed", "symbolic")

    def __init__(self, name: str, dtype: "np.dtype | None", shape: "tuple | None"):
        self.name, self.dtype, self.shape = name, dtype, shape
        self.static = shape if shape is not None and all(isinstance(d, int) for d in shape) else None
        self.rank = None if shape is None else len(shape)
        self.fixed_at = () if shape is None else tuple(i for i, d in enumerate(shape) if isinstance(d, int))
        self.fixed = tuple(shape[i] for i in self.fixed_at)
        self.symbolic = () if shape is None else tuple((i, d) for i, d in enumerate(shape) if isinstance(d, str))


class ResultCheck:
    """The output signature of one runner, and the check of one run's results against it."""

    __slots__ = ("owner", "outputs", "inputs", "size", "_symbolic", "exact", "_dtypes", "_passed", "_groups",
                 "_firsts", "_reduced", "_keyed")

    def __init__(self, owner: str, outputs: "Sequence[Signature | None]", inputs: Sequence[Signature]):
        self.owner = owner
        self.outputs = tuple(None if sig is None else _Output(*sig) for sig in outputs)
        self.size = len(self.outputs)
        #: per symbolic dim of the inputs, in order of first appearance: where it may be read, as
        #: ((input index, rank, position), ...) in input and position order; a run binds it from the
        #: first of them whose value has that rank (a decoder's 2 x layers pasts share one dim: one read)
        where: dict[str, list[tuple[int, int, int]]] = {}
        for i, (_, _, shape) in enumerate(inputs):
            for k, d in enumerate(shape or ()):
                if isinstance(d, str):
                    where.setdefault(d, []).append((i, len(shape), k))
        self.inputs = tuple((d, tuple(places)) for d, places in where.items())
        self._symbolic = any(out is not None and out.symbolic for out in self.outputs)
        #: the inputs that may bind a symbolic dim an output has: the check depends on the inputs only
        #: through their shapes (a decoder's presents, "past + 1", depend on none: its memo has one key)
        used = {d for out in self.outputs if out is not None for _, d in out.symbolic}
        self._keyed = tuple(sorted({i for d, places in self.inputs if d in used for i, _, _ in places}))
        #: every output a tensor of known dtype and static shape: [(dtype, shape), ...], checked as one
        #: comparison of lists built in C (the general loop below runs only to name a mismatch)
        self.exact = ([(out.dtype, out.static) for out in self.outputs]
                       if all(out is not None and out.dtype is not None and out.static is not None
                              for out in self.outputs) else None)
        #: every output a tensor of a declared dtype: the dtypes, compared as one list (C calls)
        self._dtypes = [out.dtype for out in self.outputs] \
            if all(out is not None and out.dtype is not None for out in self.outputs) else None
        #: the results' (shape, ...) (with `_dtypes`; else ((dtype, shape), ...)) that passed, with the
        #: shapes of the `_keyed` inputs when there are any: the same again (a batch loop's next batch, a
        #: decoding loop's step at a past length seen before) is one set lookup of a key built in C
        self._passed: "set | None" = set() if self.exact is None else None
        #: outputs declared alike (a decoder's presents: one dtype and shape, `past + 1` in it): when each
        #: group's results are alike too, checking the first of each group is checking them all, so a run
        #: checks (C calls over every result, then) one output per group through `_reduced`, a check of
        #: the firsts (`_firsts`) with the same inputs. None when no two outputs are declared alike.
        self._groups: "tuple[Callable, ...] | None" = None
        self._firsts: "tuple[int, ...]" = ()
        self._reduced: "ResultCheck | None" = None
        if self.exact is None and all(sig is not None for sig in outputs):
            alike: dict = {}
            for i, (_, dtype, shape) in enumerate(outputs):
                alike.setdefault((dtype, shape), []).append(i)
            if len(alike) < len(outputs):
                self._groups = tuple(operator.itemgetter(*members) for members in alike.values() if len(members) > 1)
                self._firsts = tuple(members[0] for members in alike.values())
                self._reduced = ResultCheck(owner, [outputs[i] for i in self._firsts], inputs)

    @classmethod
    def of(cls, owner: str, outputs: Sequence, inputs: Sequence) -> "ResultCheck":
        """The check for tensors (xgraph Tensors); sequence and optional values are not checked."""
        def signature(t) -> Signature | None:
            if not t.is_tensor_value:
                return None
            return (t.name, t.dtype, None if t.shape is None else tuple(t.shape))
        return cls(owner, [signature(t) for t in outputs], [signature(t) or (t.name, None, None) for t in inputs])

    def __call__(self, inputs: Sequence, results: Sequence) -> None:
        """Raise RunnerError naming the first output that does not match its tensor."""
        exact = self.exact
        if exact is not None and len(results) == len(exact) and {*map(type, results)} == ONLY_ARRAYS \
                and list(map(DTYPE_SHAPE, results)) == exact:
            return
        passed = self._passed
        # the check reads only the shapes of the inputs that may bind an output's dims (`_keyed`) and the
        # types, dtypes and shapes of the results: a memo of it is exact
        keyed = self._keyed
        if keyed:
            if len(inputs) <= keyed[-1]:
                self._check(inputs, results)
                return
            keyed = [inputs[i] for i in keyed]
        if passed is not None and {*map(type, results)} == ONLY_ARRAYS \
                and (not keyed or {*map(type, keyed)} <= ONLY_ARRAYS):
            got = shape_key(results, self._dtypes)
            if got is None:
                self._check(inputs, results)  # names the output of another dtype
                return
            key = (tuple(map(SHAPE, keyed)), got) if keyed else got
            if key in passed:
                return
            groups = self._groups
            if groups is not None and len(got) == self.size and all(len(set(pick(got))) == 1 for pick in groups):
                self._reduced._check(inputs, [results[i] for i in self._firsts])  # alike: one of each group
            else:
                self._check(inputs, results)
            if len(passed) >= SIGNATURES_KEPT:
                passed.clear()
            passed.add(key)
            return
        self._check(inputs, results)

    def _check(self, inputs: Sequence, results: Sequence) -> None:
        """The check output by output, naming the first that does not match."""
        bound: dict[str, int] | None = self._bind_inputs(inputs) if self._symbolic else None
        for out, value in zip(self.outputs, results):
            if out is None:
                continue
            if value.__class__ is not np.ndarray and not isinstance(value, np.ndarray):
                self._fail(out, value)
            if out.dtype is not None and value.dtype != out.dtype:
                self._fail(out, value)
            if out.static is not None:
                if value.shape != out.static:
                    self._fail(out, value)
                continue
            if out.rank is None:
                continue
            actual = value.shape
            if len(actual) != out.rank or tuple([actual[i] for i in out.fixed_at]) != out.fixed:
                self._fail(out, value)
            for i, d in out.symbolic:
                if bound.setdefault(d, actual[i]) != actual[i]:
                    raise RunnerError(f"{self.owner}: output {out.name!r} has {d}={actual[i]}, but this run bound "
                                      f"{d}={bound[d]} (shape {out.shape}, got {actual})")

    def _bind_inputs(self, inputs: Sequence) -> dict[str, int]:
        bound: dict[str, int] = {}
        count = len(inputs)
        for d, places in self.inputs:
            for index, rank, k in places:
                value = inputs[index] if index < count else None
                if isinstance(value, np.ndarray) and value.ndim == rank:
                    bound[d] = value.shape[k]
                    break
        return bound

    def _fail(self, out: _Output, value) -> None:
        raise RunnerError(f"{self.owner}: output {out.name!r} must be {_describe(out.dtype, out.shape)}, "
                          f"got {_returned(value)}")
