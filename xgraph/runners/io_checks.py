"""A runner's inputs and outputs checked against its declared tensors: the arrays a caller
passes (a list in input order or a dict by name), the preallocated output buffers, and the
copy of results into them. Each refusal is a RunnerError naming the tensor and the fix."""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Callable, Collection, Sequence

import numpy as np

from xgraph.errors import RunnerError

if TYPE_CHECKING:
    from xgraph.ir import Tensor


def _shape_ok(declared, actual: tuple) -> bool:
    if declared is None:
        return True
    if len(declared) != len(actual):
        return False
    return all(not isinstance(d, int) or d == a for d, a in zip(declared, actual))


def check_inputs(owner: str, tensors: "Sequence[Tensor]", inputs: "Sequence | dict") -> list[np.ndarray]:
    """`inputs` (a list in tensor order or a dict by name) as arrays checked against the declared tensors."""
    names = [t.name for t in tensors]
    if not isinstance(inputs, (dict, list, tuple)):
        raise RunnerError(f"{owner}: inputs must be a list of arrays in input order ({', '.join(names)}) or a dict "
                          f"name -> array, got {type(inputs).__name__}")
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise RunnerError(f"{owner}: unknown input {unknown[0]!r}; the inputs are: {', '.join(names)}")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise RunnerError(f"{owner}: input {missing[0]!r} is missing; the inputs are: {', '.join(names)}")
        inputs = [inputs[n] for n in names]
    elif len(inputs) != len(tensors):
        raise RunnerError(f"{owner}: expected {len(tensors)} inputs ({', '.join(names)}), got {len(inputs)}")
    arrays = []
    for t, x in zip(tensors, inputs):
        if t.type_proto is not None:  # a sequence (list) or optional (None) value
            arrays.append(x)
            continue
        if not isinstance(x, np.ndarray):
            try:
                x = np.asarray(x, dtype=t.dtype)
            except (TypeError, ValueError, OverflowError) as e:
                raise RunnerError(f"{owner}: input {t.name!r} must be a numpy array (or convertible to "
                                  f"{t.dtype}), got {type(x).__name__} {str(x)[:40]!r}: {e}") from None
        if t.dtype is not None and x.dtype != t.dtype:
            raise RunnerError(f"{owner}: input {t.name!r} must be {t.dtype}, got {x.dtype}; "
                              f"convert it with .astype(np.{t.dtype})")
        if not _shape_ok(t.shape, x.shape):
            raise RunnerError(f"{owner}: input {t.name!r} must have shape {t.shape}, got {x.shape}")
        arrays.append(x)
    return arrays


_MISSING = object()
#: signatures remembered per input or result check (a gear per shape, a dynamic dim's values seen so far)
SIGNATURES_KEPT = 256
#: what `{*map(type, values)}` is when every value is a plain numpy array
ONLY_ARRAYS = {np.ndarray}
#: (dtype, shape) of an array, read in C
DTYPE_SHAPE = operator.attrgetter("dtype", "shape")
#: the dtype, the shape of an array, read in C
DTYPE = operator.attrgetter("dtype")
SHAPE = operator.attrgetter("shape")


def shape_key(values: list, dtypes: "list | None") -> "tuple | None":
    """What a check remembers of arrays it passed: their shapes when their dtypes are `dtypes` (each
    check's one dtype per value, once known), (dtype, shape) pairs while `dtypes` is None; None when
    a dtype differs (the full check then names the value)."""
    if dtypes is None:
        return tuple(map(DTYPE_SHAPE, values))
    return tuple(map(SHAPE, values)) if list(map(DTYPE, values)) == dtypes else None


class InputCheck:
    """`check_inputs` for one runner's tensors, with what it checks worked out once.

    The common call (a dict of exactly the input names, or a list in input order, of numpy
    arrays whose dtypes and shapes passed before) is a few C calls and one set lookup: a
    decoding step calls it once per token. A new signature is checked input by input (and
    remembered when it passes); anything else goes through `check_inputs`, which converts what
    it can and names what is wrong."""

    __slots__ = ("owner", "tensors", "names", "specs", "by_keys", "exact", "accepted", "dtypes", "groups", "firsts")

    def __init__(self, owner: str, tensors: "Sequence[Tensor]") -> None:
        self.owner, self.tensors = owner, list(tensors)
        self.names = tuple(t.name for t in self.tensors)
        #: per input: None for a sequence/optional value (passed as is), else (dtype or None, rank or
        #: None, the declared shape when every dim is an int or None, the (index, dim) pairs that are)
        self.specs = tuple(None if t.type_proto is not None else _spec(t) for t in self.tensors)
        #: a dict of exactly these names is read in input order with one C call
        self.by_keys = frozenset(self.names) if len(set(self.names)) == len(self.names) else None
        #: every input a tensor of declared dtype and static shape (a decoder's token and position):
        #: [(dtype, shape), ...], compared as one list built in C
        self.exact = [(s[0], s[2]) for s in self.specs] \
            if all(s is not None and s[0] is not None and s[2] is not None for s in self.specs) else None
        #: every input a tensor of a declared dtype: the dtypes, compared as one list (C calls)
        self.dtypes = [s[0] for s in self.specs] if all(s is not None and s[0] is not None for s in self.specs) \
            else None
        #: every input a tensor: the signatures of inputs that passed, so the same signature again (a
        #: decoding loop's next step) is one set lookup of a key built in C; None otherwise. A signature
        #: is the shapes when every dtype is declared (`dtypes`, compared on every call), else the
        #: (dtype, shape) pairs
        self.accepted: "set | None" = set() if all(s is not None for s in self.specs) else None
        #: inputs of one spec (a decoder's pasts): when their values' dtypes and shapes are alike too,
        #: the first of each group (`firsts`) is checked for all; None when no two share a spec
        self.groups: "tuple[Callable, ...] | None" = None
        self.firsts: "tuple[int, ...]" = ()
        if self.accepted is not None:
            alike: dict = {}
            for i, spec in enumerate(self.specs):
                alike.setdefault(spec, []).append(i)
            if len(alike) < len(self.specs):
                self.groups = tuple(operator.itemgetter(*m) for m in alike.values() if len(m) > 1)
                self.firsts = tuple(m[0] for m in alike.values())

    def __call__(self, inputs: "Sequence | dict") -> list[np.ndarray]:
        kind = type(inputs)
        if kind is dict and inputs.keys() == self.by_keys:
            values = list(map(inputs.__getitem__, self.names))
        elif kind is dict and len(inputs) == len(self.names):
            values = [inputs.get(n, _MISSING) for n in self.names]
            if any(v is _MISSING for v in values):
                return check_inputs(self.owner, self.tensors, inputs)
        elif (kind is list or kind is tuple) and len(inputs) == len(self.names):
            values = list(inputs)
        else:
            return check_inputs(self.owner, self.tensors, inputs)
        return values if self.passes(values) else check_inputs(self.owner, self.tensors, inputs)

    def passes(self, values: list) -> bool:
        """Whether `values` (one per input, in input order) pass as they are: numpy arrays of their
        inputs' dtypes, ranks and fixed dims (sequence inputs: anything). False says nothing more:
        `check_inputs` converts what it can and names what is wrong."""
        if self.exact is not None:
            return {*map(type, values)} <= ONLY_ARRAYS and list(map(DTYPE_SHAPE, values)) == self.exact
        accepted = self.accepted
        if accepted is None or {*map(type, values)} != ONLY_ARRAYS:
            return accepted is None and self._fits(values)
        key = shape_key(values, self.dtypes)
        if key is None:
            return False  # an input of another dtype
        if key in accepted:
            return True
        groups = self.groups
        if self._fits(values) if groups is None or not all(len(set(pick(key))) == 1 for pick in groups) \
                else self._fits(values, self.firsts):
            if len(accepted) >= SIGNATURES_KEPT:
                accepted.clear()
            accepted.add(key)
            return True
        return False

    def trusting(self, trusted: "Collection[int]") -> "Callable[[Sequence | dict], list[np.ndarray]]":
        """This check for runs whose inputs at the positions `trusted` are known to pass (DeviceValues of
        outputs declared to fit those inputs, `fits_input`): a list of a value per input is checked at
        the other positions only; anything else, or a list that does not pass, goes through this
        check, which names what is wrong."""
        if not trusted:
            return self
        rest = [i for i in range(len(self.tensors)) if i not in set(trusted)]
        size = len(self.tensors)
        part = InputCheck(self.owner, [self.tensors[i] for i in rest]).passes
        pick = picker(rest)

        def check_rest(inputs: "Sequence | dict") -> list[np.ndarray]:
            if type(inputs) is list and len(inputs) == size and part(list(pick(inputs))):
                return inputs
            return self(inputs)
        return check_rest

    def _fits(self, values: list, at: "Sequence[int] | None" = None) -> bool:
        """Every value (or those `at` these positions) a numpy array of its input's dtype, rank and fixed
        dims (sequence inputs: anything)."""
        pairs = zip(values, self.specs) if at is None else ((values[i], self.specs[i]) for i in at)
        for x, spec in pairs:
            if spec is None:
                continue
            dtype, rank, exact, fixed = spec
            if type(x) is not np.ndarray or (dtype is not None and x.dtype != dtype) or (rank is not None and (
                    x.shape != exact if exact is not None else
                    x.ndim != rank or any(x.shape[i] != d for i, d in fixed))):
                return False
        return True


def picker(positions: "Sequence[int]") -> "Callable[[Sequence], Sequence]":
    """What picks the values at `positions` of a sequence, in that order, as a sequence, in one C call."""
    if len(positions) == 1:  # an itemgetter of one index would return the value, not a sequence of it
        return operator.itemgetter(slice(positions[0], positions[0] + 1))
    return operator.itemgetter(*positions) if positions else operator.itemgetter(slice(0, 0))


def fits_input(output: "Tensor", target: "Tensor") -> bool:
    """Whether every value of `output` that passed its result check (`xgraph.runners.result_check`: a
    numpy array of the output's dtype, rank and fixed dims) passes `input`'s check too: both declared
    tensors of one dtype and rank, each fixed dim of the input (`target`) fixed alike in the output."""
    if not (output.is_tensor_value and target.is_tensor_value) or output.dtype is None or output.dtype != target.dtype:
        return False
    if target.shape is None:
        return True
    if output.shape is None or len(output.shape) != len(target.shape):
        return False
    return all(not isinstance(d, int) or (isinstance(o, int) and o == d) for o, d in zip(output.shape, target.shape))


def _spec(t: "Tensor") -> tuple:
    shape = t.shape
    if shape is None:
        return t.dtype, None, None, ()
    fixed = tuple((i, d) for i, d in enumerate(shape) if isinstance(d, int))
    return t.dtype, len(shape), tuple(shape) if len(fixed) == len(shape) else None, fixed


def check_outputs(owner: str, tensors: "Sequence[Tensor]", outputs: Sequence) -> list[np.ndarray]:
    """Preallocated output buffers checked against the declared output tensors (count, shape, dtype)."""
    if not isinstance(outputs, (list, tuple)):
        raise RunnerError(f"{owner}: outputs must be a list of preallocated numpy arrays, one per output "
                          f"({', '.join(t.name for t in tensors)}), got {type(outputs).__name__}")
    if len(outputs) != len(tensors):
        names = ", ".join(t.name for t in tensors)
        raise RunnerError(f"{owner}: expected {len(tensors)} preallocated outputs ({names}), got {len(outputs)}")
    for t, out in zip(tensors, outputs):
        if not isinstance(out, np.ndarray) or not out.flags.writeable:
            raise RunnerError(f"{owner}: output {t.name!r} must be a writeable numpy array, got {type(out).__name__}")
        if t.dtype is not None and out.dtype != t.dtype:
            raise RunnerError(f"{owner}: output buffer for {t.name!r} must be {t.dtype}, got {out.dtype}")
        if not _shape_ok(t.shape, out.shape):
            raise RunnerError(f"{owner}: output buffer for {t.name!r} must have shape {t.shape}, got {out.shape}")
    return list(outputs)


def fill_outputs(owner: str, tensors: "Sequence[Tensor]", outputs: list[np.ndarray], results: list) -> None:
    """Copy `results` into the preallocated `outputs`, refusing a shape or dtype that does not fit."""
    for t, out, r in zip(tensors, outputs, results):
        if r.shape != out.shape:
            raise RunnerError(f"{owner}: output {t.name!r} has shape {r.shape}, but its buffer has shape {out.shape}")
        if r.dtype != out.dtype:
            raise RunnerError(f"{owner}: output {t.name!r} came out as {r.dtype}, but its buffer is {out.dtype}")
        np.copyto(out, r)


__all__ = ["InputCheck", "check_inputs", "check_outputs", "fill_outputs", "fits_input", "picker", "shape_key"]
