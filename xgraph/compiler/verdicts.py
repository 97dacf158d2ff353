"""Verdicts and kernel choices computed once per op signature, not once per op.

A support check (`xgraph.compiler.support`) reads only what an op *is*: its type, domain and
opset, its ONNX attributes, and for each input and output the dtype, the shape, whether it
is a weight (and then its values) and, for outputs, whether anything uses it. Two ops equal
in all of that get the same verdict from every check, so a 100,000-op model with a few
hundred distinct kinds of op needs a few hundred checks per device, not 100,000.

`op_signature` is that "what it is" as a hashable value. Where equality could be wrong or
expensive, the signature gives up sharing instead of guessing: nested graphs and other
protobuf attributes, large attribute tensors and object arrays make an op's signature unique,
and large weights count by identity (two ops share a verdict only when they read the same
weight). A verdict whose reason quotes a tensor name (`Verdict.names`) belongs to its op
alone and is never shared.

    >>> memo = VerdictMemo({"AICORE": op_info(get_devices()["AICORE"])})   # doctest: +SKIP
    >>> [memo.verdict("AICORE", op).ok for op in graph.get_ops()]            # doctest: +SKIP
    >>> memo.stats                                                          # doctest: +SKIP
    {'checks': 7}

Cost: O(size of the op's attributes, tensor shapes and small weights) per op to sign, one
dict lookup per verdict; each check runs once per (device, distinct signature). A memo
lives for one stage of one graph: it assumes the ops and tensors it signed do not change.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Mapping

import numpy as np

from xgraph.compiler.checks import Check, Verdict
from xgraph.ir.index import TensorFacts

if TYPE_CHECKING:
    from xgraph.ir import Graph, Op, Subgraph, Tensor

#: Arrays (attribute tensors, weights) up to this many bytes are compared by value; larger
#: attribute arrays make the signature unique, larger weights compare by identity.
SMALL_ARRAY_BYTES = 4096
#: ops signed per block of `Signatures._sign` (their rows are dropped block by block)
_SIGN_BLOCK = 4096


class _Unique:
    """A signature part equal only to itself: the op shares its verdicts with no other op."""

    __slots__ = ()


#: Element types a list of one of which freezes to one flat tuple, tagged with the type (1 == 1.0 in Python)
#: and a marker, so it never equals a general list's key.
_PLAIN = frozenset({int, float, str})
_PLAIN_LIST = "plain"


def _freeze(value: Any) -> Hashable:
    """An attribute value as a hashable key that keeps what formatting and comparisons tell apart.

    Scalars carry their type (True, 1 and 1.0 compare equal in Python but print differently).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        kinds = set(map(type, value))
        if len(kinds) == 1 and kinds <= _PLAIN:  # the usual list: all ints (or all floats, or all strs)
            return (type(value), _PLAIN_LIST, kinds.pop(), tuple(value))
        return (type(value), tuple(_freeze(v) for v in value))
    if isinstance(value, np.ndarray):
        if value.dtype == object or value.nbytes > SMALL_ARRAY_BYTES:
            return _Unique()
        return (np.ndarray, value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, (bool, int, float, bytes, np.generic)):
        return (type(value), value)
    return _Unique()  # nested graphs, sparse tensors, type protos: not worth comparing


def _weight_key(t: "Tensor") -> Hashable:
    data = t.data
    if data.dtype != object and data.nbytes <= SMALL_ARRAY_BYTES:
        return (data.dtype.str, data.shape, data.tobytes())
    return t  # a large weight: the same tensor object, or no sharing


class _TensorKeys:
    """Tensor -> a small int naming (dtype, shape, weight key or None, used), in the plain dict `numbers`.

    "Used" (read by an op or a graph output) is what `max_outputs` and the static-shape and
    rank checks look at for outputs; for an input it is always true. None (an omitted
    optional input) maps to -1. Ints keep op signatures cheap to hash; a plain dict keeps
    the lookups C calls.
    """

    def __init__(self, graph_outputs: "set[Tensor] | frozenset[Tensor]"):
        self._outputs = graph_outputs
        self._ids: dict[Hashable, int] = {}
        self._next = count()  # numbers are unique and rise in first-seen order (not dense)
        self.numbers: dict["Tensor | None", int] = {None: -1}

    def fill(self, facts: "TensorFacts") -> None:
        """Key every tensor of `facts` from its columns: one C pass (`setdefault` keeps a known key's number)."""
        weights = [_weight_key(t) if const else None for t, const in zip(facts.tensors, facts.is_const)]
        keys = zip(facts.dtypes, facts.shapes, weights, facts.used)
        self.numbers.update(zip(facts.tensors, map(self._ids.setdefault, keys, self._next)))

    def add(self, tensors: "Iterable[Tensor | None]") -> None:
        """Key each of `tensors` not keyed yet through its accessors (the same numbers `fill` gives)."""
        ids, numbers = self._ids, self.numbers
        for t in tensors:
            if t not in numbers:
                numbers[t] = ids.setdefault(_tensor_key(t, self._outputs), next(self._next))


def _tensor_key(t: "Tensor | None", graph_outputs: "set[Tensor] | frozenset[Tensor]") -> Hashable:
    if t is None:
        return None
    return (t.dtype, t.shape, _weight_key(t) if t.is_const else None, bool(t.consumers) or t in graph_outputs)


def _attr_key(items: "Iterable[tuple[str, Any]]") -> Hashable:
    """ONNX attributes as a key independent of their order."""
    return tuple(sorted([(k, _freeze(v)) for k, v in items]))


def _signature(op: "Op", tensor_key: Callable[["Tensor | None"], Hashable], opsets: Mapping[str, int]) -> Hashable:
    attrs = op.get_onnx_attrs()
    attr_key = _attr_key(attrs.items()) if attrs else ()
    domain = op.domain
    return (op.type, domain, opsets.get(domain), attr_key, tuple(map(tensor_key, op.get_input_tensors())),
            tuple(map(tensor_key, op.get_output_tensors())))


def op_signature(op: "Op") -> Hashable:
    """Everything about `op` that support checks and kernel resolution read, as a hashable key."""
    outputs = set(op.graph.get_output_tensors())
    return _signature(op, lambda t: _tensor_key(t, outputs), op.graph.opset_imports)


class Signatures:
    """Op -> a small int naming its signature, for one graph, computed on first use.

    Equal ints mean equal `op_signature`s (within one graph the opset follows from the
    domain, so the key leaves it out); the int keeps later lookups from hashing the nested
    signature again. Ops are signed in bulk from rows of their facts (`xgraph.ir.index.GraphIndex.op_rows`),
    every tensor of the graph keyed in one pass on the first call: `ids(ops)` for many ops.
    """

    def __init__(self, graph: "Graph"):
        self._graph = graph
        self._tensor_keys = _TensorKeys(set(graph.get_output_tensors()))
        self._all_tensors_keyed = False
        self._ids: dict[Hashable, int] = {}
        self._next = count()
        self._by_op: dict["Op", int] = {}

    def __call__(self, op: "Op") -> int:
        sig = self._by_op.get(op)
        return sig if sig is not None else self.ids([op])[0]

    def ids(self, ops: "list[Op]") -> list[int]:
        """The signature ids of `ops`, in order (as `[self(op) for op in ops]`), signed in bulk."""
        by_op = self._by_op
        if not by_op:  # the first call: sign them all
            ops = list(ops)
            return self._sign(ops)
        try:
            return list(map(by_op.__getitem__, ops))  # the usual call after the first: all signed
        except KeyError:
            self._sign([op for op in ops if op not in by_op])
        return list(map(by_op.__getitem__, ops))

    def _key_all_tensors(self) -> None:
        self._tensor_keys.fill(self._graph.index().tensor_facts())
        self._all_tensors_keyed = True

    def _sign(self, ops: "list[Op]") -> list[int]:
        """Sign `ops` from one row of facts each (built in C, the attributes' order-free key called only for
        ops that have attributes); the ids are unique per signature and rise in first-seen order.

        The rows are built `_SIGN_BLOCK` ops at a time: a row is three tuples, and only the few of
        distinct signatures outlive their block, so a 100k-op graph never holds 300k of them at once
        (which the collector would walk)."""
        if not self._all_tensors_keyed:
            self._key_all_tensors()
        numbers = self._tensor_keys.numbers
        op_rows = self._graph.index().op_rows
        sigs: list[int] = []
        for at in range(0, len(ops), _SIGN_BLOCK):
            block = ops[at:at + _SIGN_BLOCK]
            try:
                keys = op_rows(block, numbers, _attr_key)
            except KeyError:  # a tensor the graph's table does not list: keyed through its accessors
                self._tensor_keys.add(t for op in block for t in op.get_input_tensors() + op.get_output_tensors())
                keys = op_rows(block, numbers, _attr_key)
            sigs += map(self._ids.setdefault, keys, self._next)
        self._by_op.update(zip(ops, sigs))
        return sigs

    def __len__(self) -> int:
        """Number of distinct signatures seen."""
        return len(self._ids)


class VerdictMemo:
    """Each device's check, asked at most once per op signature (per op when its verdict names a tensor)."""

    def __init__(self, checks: Mapping[str, Check], signatures: Signatures):
        self._checks = dict(checks)
        self._signatures = signatures
        self._cache: dict[tuple[str, Hashable], Verdict] = {}
        self._per_op: dict[tuple[str, "Op"], Verdict] = {}
        self._specific: set["Op"] = set()
        self.stats = {"checks": 0}

    def signature(self, op: "Op") -> int:
        """The id of `op`'s signature."""
        return self._signatures(op)

    def signatures(self, ops: "list[Op]") -> list[int]:
        """The ids of the signatures of `ops`, in order (signed in bulk where not yet signed)."""
        return self._signatures.ids(ops)

    def sign(self, ops: "list[Op]") -> None:
        """Sign `ops` in one bulk pass now, so later verdicts only look their signatures up."""
        self._signatures.ids(ops)

    def is_specific(self, op: "Op") -> bool:
        """True when some verdict on `op` quoted a tensor name (it holds for this op only)."""
        return op in self._specific

    def verdict(self, device: str, op: "Op") -> Verdict:
        """The verdict of `device`'s check on `op`."""
        key = (device, self._signatures(op))
        v = self._cache.get(key)
        if v is not None:
            return v
        v = self._per_op.get((device, op))
        if v is not None:
            return v
        self.stats["checks"] += 1
        v = self._checks[device](op)
        if v.names:
            self._per_op[(device, op)] = v
            self._specific.add(op)
        else:
            self._cache[key] = v
        return v


@dataclass(eq=False, slots=True)
class PlacementUnit:
    """What placement places: one unassigned child, its ops, and the verdicts of the candidates (asked when
    first needed). Placement makes them; its island passes (`xgraph.compiler.islands`) read them."""

    child: "Subgraph"
    ops: list["Op"]
    memo: VerdictMemo

    def verdict(self, device: str, op: "Op") -> Verdict:
        return self.memo.verdict(device, op)

    def accepts(self, device: str) -> bool:
        verdict = self.memo.verdict
        return all(verdict(device, op).ok for op in self.ops)


class KernelMemo:
    """`choose(op, device)` memoised per (op signature, device): the kernel resolution asked once per kind of op."""

    def __init__(self, choose: Callable[["Op", str], str], signatures: Signatures):
        self._choose = choose
        self._signatures = signatures
        self._by_device: dict[str, dict[int, str]] = {}  # device -> signature id -> kernel
        self.stats = {"resolutions": 0}

    def __call__(self, op: "Op", device: str) -> str:
        return self.choose_many([op], device)[0]

    def choose_many(self, ops: "list[Op]", device: str) -> list[str]:
        """`[self(op, device) for op in ops]`: one resolution per signature not seen on `device` yet (asked
        with its first op), then one lookup per op."""
        sigs = self._signatures.ids(ops)
        known = self._by_device.setdefault(device, {})
        if not known.keys() >= set(sigs):
            for sig, op in dict(zip(reversed(sigs), reversed(ops))).items():  # each signature's first op
                if sig not in known:
                    self.stats["resolutions"] += 1
                    known[sig] = self._choose(op, device)
        return list(map(known.__getitem__, sigs))


__all__ = ["KernelMemo", "PlacementUnit", "SMALL_ARRAY_BYTES", "Signatures", "VerdictMemo", "op_signature"]
