"""The CPU fallback: run any op the ONNX reference evaluator knows, one node at a time.

`make_reference_kernel` wraps one node in a one-node model (placeholder tensor names, ""
for omitted optional inputs and outputs) and builds an ``onnx.reference.ReferenceEvaluator``
for it; the returned kernel is then called per run.

    >>> k = make_reference_kernel("BitShift", "", [onnx.helper.make_attribute("direction", "LEFT")],
    ...                           {"": 18}, num_inputs=2, num_outputs=1)
    >>> k(np.array([1, 2], np.uint8), np.array([1, 2], np.uint8))[0].tolist()
    [2, 8]

Types. Some ops (GroupNormalization, ...) are defined by a function body the evaluator
builds from the input types, so the one-node model must carry them. Pass `input_types` (the
graph's types) to build the evaluator once, at creation. Without them the kernel builds one
evaluator per input signature (element type and rank of each input), on the first call that
has it; a graph node sees one signature, so that is still one build.

Outer scope. Nested graphs (If, Loop, Scan, SequenceMap, ...) may read tensors of the
enclosing graph by name. The kernel lists those names in `outer_names` (found once,
recursively, from the graph attributes) and every call must supply their values through
``outer_scope={name: value}``; they become extra inputs of the one-node model.

Limits: the evaluator is pure Python and numpy (slow, but exact); an op it does not implement
fails when the kernel is made. Calls on one kernel are serialised by a lock, because evaluator
nodes may keep state between runs (random ops, nested evaluators); separate kernels run in
parallel. Sequences are lists and empty optionals None, as in the evaluator; string tensors
come back as object arrays.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper

from xgraph.errors import KernelError
from xgraph.ir.nested import free_names
from xgraph.kernels.reference_fixes import evaluator_fixes

if TYPE_CHECKING:
    from xgraph.kernels.registry import KernelRegistry


def _graphs(attributes: Iterable[onnx.AttributeProto]) -> list[onnx.GraphProto]:
    out: list[onnx.GraphProto] = []
    for a in attributes:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _all_names(graph: onnx.GraphProto) -> set[str]:
    names = {v.name for v in graph.input} | {v.name for v in graph.output} | {t.name for t in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for g in _graphs(node.attribute):
            names |= _all_names(g)
    return names


def outer_scope_names(attributes: Iterable[onnx.AttributeProto]) -> tuple[str, ...]:
    """Sorted names that an op's graph attributes read from the enclosing graph."""
    names: set[str] = set()
    for g in _graphs(attributes):
        names |= free_names(g)
    return tuple(sorted(names))


def _signature(value: Any):
    """The part of a value's type a one-node model needs: (element type, rank), nested for sequences."""
    if value is None:
        return None
    if isinstance(value, list):
        return ("sequence", _signature(value[0]) if value else None)
    a = np.asarray(value)
    try:
        code = onnx.TensorProto.STRING if a.dtype.kind in "OUS" else helper.np_dtype_to_tensor_dtype(a.dtype)
    except (KeyError, ValueError, TypeError):
        return ("untyped",)
    return (int(code), a.ndim)


def _type_proto(signature) -> onnx.TypeProto | None:
    if signature is None or signature == ("untyped",):
        return None
    if signature[0] == "sequence":
        element = _type_proto(signature[1])
        return None if element is None else helper.make_sequence_type_proto(element)
    code, rank = signature
    return helper.make_tensor_type_proto(code, [None] * rank)


def _value_info(name: str, type_proto: onnx.TypeProto | None) -> onnx.ValueInfoProto:
    info = onnx.ValueInfoProto(name=name)
    if type_proto is not None:
        info.type.CopyFrom(type_proto)
    return info


def plain_value(value: Any) -> Any:
    """Evaluator output in xgraph's conventions: numpy str arrays become object arrays."""
    if isinstance(value, np.ndarray) and value.dtype.kind in "US":
        return value.astype(object)
    if isinstance(value, list):
        return [plain_value(v) for v in value]
    return value


#: Domains the ONNX reference evaluator implements itself.
EVALUATOR_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})


def registry_ops(op_keys: Iterable[tuple[str, str]], registry: "KernelRegistry") -> list:
    """Evaluator op classes (pass as `new_ops=`) for custom-domain ops, backed by the kernels of `registry`.

    The evaluator knows only the standard domains; for the others (xgraph.dvpp, plugin
    domains) the registered kernel is the reference implementation. `registry` is the
    session's kernel table (`Registries.kernels`: built-ins and the `xgraph_kernels` hook's
    kernels alike). `op_keys` holds (domain, op type) pairs; pairs without a registered kernel
    are skipped (the evaluator then reports them as unknown).
    """
    from onnx.reference.op_run import OpRun

    from xgraph.ir.attribute_values import node_attributes
    classes = []
    for domain, op_type in sorted(set(op_keys)):
        if domain in EVALUATOR_DOMAINS:
            continue
        k = registry.find(op_type, domain)
        if k is None:
            continue

        def _run(self, *inputs, _kernel=k, **_evaluator_attrs):  # attributes are read from the node, typed as xgraph does
            return tuple(_kernel.invoke(list(inputs), node_attributes(self.onnx_node), len(self.onnx_node.output)))

        classes.append(type(op_type, (OpRun,), {"op_domain": domain, "_run": _run,
                                                 "__doc__": f"{domain}:{op_type} through xgraph's kernel"}))
    return classes


class ReferenceKernel:
    """One node run by the ONNX reference evaluator; call it like a kernel (None for omitted inputs).

    `outer_names` lists the enclosing-graph tensors nested graphs read; pass their values with
    ``outer_scope=`` on every call. The result is a list with one entry per output (None for
    omitted ones).
    """

    def __init__(self, op_type: str, domain: str, attributes: Sequence[onnx.AttributeProto],
                 opset_imports: Mapping[str, int], num_inputs: int, num_outputs: int,
                 functions: Sequence[onnx.FunctionProto] = (), omitted_inputs: Iterable[int] = (),
                 omitted_outputs: Iterable[int] = (), input_types: Sequence[onnx.TypeProto | None] | None = None,
                 outer_types: Mapping[str, onnx.TypeProto] | None = None) -> None:
        self.op_type, self.domain = op_type, domain
        self.num_inputs, self.num_outputs = num_inputs, num_outputs
        self._attributes = list(attributes)
        self._functions = list(functions)
        self._opsets = self._opset_imports(opset_imports)
        self.outer_names = outer_scope_names(self._attributes)
        taken = set(self.outer_names)
        for g in _graphs(self._attributes):
            taken |= _all_names(g)
        prefix = "xgraph_ref"
        while any(name.startswith(prefix) for name in taken):
            prefix += "_"
        self._inputs = [f"{prefix}_in{i}" for i in range(num_inputs)]
        omitted = set(omitted_outputs)
        self._outputs = ["" if i in omitted else f"{prefix}_out{i}" for i in range(num_outputs)]
        self._lock = threading.Lock()
        self._evaluators: dict[Any, Any] = {}
        self._declared_present = frozenset(range(num_inputs)) - frozenset(omitted_inputs)
        declared = list(input_types or [])
        types = {i: declared[i] if i < len(declared) else None for i in self._declared_present}
        outer = [(outer_types or {}).get(n) for n in self.outer_names]
        self._declared = self._build(self._declared_present, types, outer)  # fails now, not mid-run
        self._typed = all(t is not None for t in types.values()) and all(t is not None for t in outer)

    def __repr__(self) -> str:
        return f"ReferenceKernel({self.op_type!r}, domain={self.domain!r}, opsets={self._opsets})"

    def _opset_imports(self, opset_imports: Mapping[str, int]) -> dict[str, int]:
        opsets = {("" if d == "ai.onnx" else d): int(v) for d, v in opset_imports.items()}
        opsets.setdefault("", onnx.defs.onnx_opset_version())
        for f in self._functions:
            opsets.setdefault(f.domain, 1)
            for o in f.opset_import:
                opsets.setdefault(o.domain, o.version)
        if ("" if self.domain == "ai.onnx" else self.domain) not in opsets:
            raise KernelError(f"{self.op_type}: no opset version for domain {self.domain!r}; "
                              f"opset_imports has {sorted(opsets)}")
        return opsets

    def _build(self, present: frozenset[int], input_types: Mapping[int, onnx.TypeProto | None],
               outer_types: Sequence[onnx.TypeProto | None]):
        """A ReferenceEvaluator for the one-node model with the inputs at `present` positions."""
        from onnx.reference import ReferenceEvaluator

        names = [n if i in present else "" for i, n in enumerate(self._inputs)]
        while names and names[-1] == "":
            names.pop()
        node = helper.make_node(self.op_type, names, self._outputs, domain=self.domain)
        node.attribute.extend(self._attributes)
        inputs = [_value_info(n, input_types.get(i)) for i, n in enumerate(names) if n]
        inputs += [_value_info(n, t) for n, t in zip(self.outer_names, outer_types)]
        graph = helper.make_graph([node], f"reference_{self.op_type}", inputs,
                                  [_value_info(n, None) for n in self._outputs if n])
        model = helper.make_model(graph, functions=self._functions,
                                  opset_imports=[helper.make_opsetid(d, v) for d, v in sorted(self._opsets.items())])
        try:
            return ReferenceEvaluator(model, new_ops=evaluator_fixes())
        except Exception as e:  # the evaluator raises many types; all mean "cannot run this node"
            raise KernelError(f"{self.op_type}: the ONNX reference evaluator cannot run this node "
                              f"(domain {self.domain!r}, opsets {self._opsets}): {e}") from e

    def __call__(self, *inputs: Any, outer_scope: Mapping[str, Any] | None = None) -> list[Any]:
        """Run the node; inputs positionally (None or missing for omitted ones)."""
        if len(inputs) > self.num_inputs:
            raise KernelError(f"{self.op_type}: got {len(inputs)} inputs, the node has {self.num_inputs}")
        outer = dict(outer_scope or {})
        missing = [n for n in self.outer_names if n not in outer]
        if missing:
            raise KernelError(f"{self.op_type}: nested graphs read outer-scope tensors {missing}; "
                              "pass their values with outer_scope=")
        values = list(inputs) + [None] * (self.num_inputs - len(inputs))
        feeds = {self._inputs[i]: v for i, v in enumerate(values) if v is not None}
        feeds.update((n, outer[n]) for n in self.outer_names)
        present = frozenset(i for i, v in enumerate(values) if v is not None)
        with self._lock:
            evaluator = self._evaluator(values, [outer[n] for n in self.outer_names], present)
            try:
                results = evaluator.run(None, feeds)
            except Exception as e:  # numpy and evaluator errors alike: report the op that failed
                raise KernelError(f"{self.op_type}: reference evaluator failed: {e}") from e
        results = iter(results)
        return [plain_value(next(results)) if n else None for n in self._outputs]

    def _evaluator(self, values: list, outer_values: list, present: frozenset[int]):
        """The evaluator built at creation when it was fully typed, else the one for these values' types."""
        if self._typed and present == self._declared_present:
            return self._declared
        key = (tuple(_signature(v) for v in values), tuple(_signature(v) for v in outer_values))
        evaluator = self._evaluators.get(key)
        if evaluator is None:
            evaluator = self._evaluators[key] = self._build(
                present, {i: _type_proto(_signature(values[i])) for i in present},
                [_type_proto(_signature(v)) for v in outer_values])
        return evaluator


def make_reference_kernel(op_type: str, domain: str, attributes: Sequence[onnx.AttributeProto],
                          opset_imports: Mapping[str, int], num_inputs: int, num_outputs: int,
                          functions: Sequence[onnx.FunctionProto] = (), *,
                          omitted_inputs: Iterable[int] = (), omitted_outputs: Iterable[int] = (),
                          input_types: Sequence[onnx.TypeProto | None] | None = None,
                          outer_types: Mapping[str, onnx.TypeProto] | None = None) -> ReferenceKernel:
    """A kernel running one `op_type` node through the ONNX reference evaluator.

    `functions` are the model's local functions (custom-domain ops defined by them);
    `omitted_inputs`/`omitted_outputs` are positions the node leaves empty; `input_types` and
    `outer_types` (the graph's types, if known) let the evaluator be built once, here.
    """
    return ReferenceKernel(op_type, domain, attributes, opset_imports, num_inputs, num_outputs, functions,
                           omitted_inputs, omitted_outputs, input_types, outer_types)


def weights_as_inputs(model: onnx.ModelProto, weights: Mapping[str, np.ndarray]) -> onnx.ModelProto:
    """A copy of `model` in which the initializers named in `weights` are graph inputs instead.

    The reference evaluator turns every initializer into a numpy copy of its bytes when it is
    built; weights fed as inputs on each run are used as they are (a read-only memory map of a
    data file, the graph's own arrays), so a model of several GB is evaluated without another
    copy of its weights. `model` should leave those initializers external (no bytes to copy)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    kept = [t for t in copy.graph.initializer if t.name not in weights]
    del copy.graph.initializer[:]
    copy.graph.initializer.extend(kept)
    listed = {i.name for i in copy.graph.input}
    for name, array in weights.items():
        if name not in listed:
            copy.graph.input.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape)))
    return copy
