"""Op: one ONNX node (type, domain, ordered inputs, several outputs, typed attributes)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from xgraph.errors import GraphError
from xgraph.ir import attribute_values as onnx_attrs
from xgraph.ir.attr_store import AttrsMixin, check_attr_value
from xgraph.ir.tensor import frozen

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.tensor import Tensor

#: Attribute-type marker for xgraph annotations: kept in .xmodel metadata, never emitted as ONNX.
ANNOTATION = None
_GRAPH_KINDS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def _schema(op_type: str, domain: str, opset: int | None):
    try:
        if opset is None:
            return onnx.defs.get_schema(op_type, domain)
        return onnx.defs.get_schema(op_type, opset, domain)
    except Exception:  # onnx raises SchemaError (not exported under a stable name) for unknown ops
        return None


class Op(AttrsMixin):
    """An operation. Attributes are ONNX attributes (typed) plus xgraph annotations.

    Links are written only by the graph's builder (`xgraph.ir.builder`), on behalf of
    `Graph.create_op`, `Op.set_input`, `Graph.replace_uses` and the readers, so producer
    and consumer lists can never disagree.
    """

    __slots__ = ("name", "type", "domain", "_attrs", "_attr_types", "_inputs", "_outputs", "_graph",
                 "_seq", "doc_string", "__weakref__")

    def __init__(self, graph: "Graph", name: str, op_type: str, domain: str, seq: int):
        self._graph = graph
        self.name = name
        self.type = op_type
        self.domain = "" if domain == "ai.onnx" else domain
        self._attrs: dict[str, Any] = {}
        self._attr_types: dict[str, int | None] = {}
        self._inputs: list[Tensor | None] = []
        self._outputs: list[Tensor] = []
        self._seq = seq
        self.doc_string = ""

    def __repr__(self) -> str:
        return f"Op({self.name!r}, {self.type!r})"

    def __lt__(self, other: "Op") -> bool:
        index = self._graph.index()  # creation order
        return index.creation_number(self) < index.creation_number(other)

    @property
    def graph(self) -> "Graph":
        """The graph this op belongs to."""
        return self._graph

    # -- links -------------------------------------------------------------------------------
    def get_input_tensors(self) -> "list[Tensor | None]":
        """Inputs in ONNX order; None marks an omitted optional input."""
        return list(self._inputs)

    def get_input_num(self) -> int:
        """Number of input slots (omitted optionals included)."""
        return len(self._inputs)

    def get_output_num(self) -> int:
        """Number of outputs."""
        return len(self._outputs)

    def get_output_tensors(self) -> "list[Tensor]":
        """Outputs in ONNX order."""
        return list(self._outputs)

    def get_output_tensor(self) -> "Tensor":
        """The first output."""
        return self._outputs[0]

    def get_input_ops(self) -> "list[Op]":
        """Producers of the inputs, in input order, without duplicates (implicit inputs last)."""
        return self._graph.index().input_ops(self)

    def get_fanout_ops(self) -> "list[Op]":
        """Consumers of any output, without duplicates (ops reading it from nested graphs included)."""
        return self._graph.index().fanout_ops(self)

    def get_implicit_input_tensors(self) -> "list[Tensor]":
        """Outer tensors this op's nested graphs (If/Loop/Scan bodies) read by name, sorted by name."""
        index = self._graph.index()
        if not index.has_nested_graphs(self):
            return []
        return list(index.implicit_reads()[0].get(self, ()))

    def set_input(self, index: int, tensor: "Tensor | None") -> None:
        """Point input slot `index` at `tensor` (None omits it); refuses a tensor of another graph or a cycle."""
        self._graph._set_input(self, index, tensor)

    # -- attributes ---------------------------------------------------------------------------
    def _owner(self) -> str:
        return f"op {self.name!r} ({self.type})"

    def del_attr(self, key: str) -> None:
        """Remove attribute `key` (ONNX attribute or annotation) if present."""
        if key in self._attrs:
            del self._attrs[key]
            kind = self._attr_types.pop(key, None)
            self._note_nested(kind)

    def get_onnx_attrs(self) -> dict[str, Any]:
        """Only the ONNX attributes (what a kernel receives as keyword arguments)."""
        return {k: v for k, v in self._attrs.items() if self._attr_types.get(k) is not ANNOTATION}

    def get_attr_kind(self, key: str) -> int | None:
        """The kind of attribute `key`: its ONNX type (an `onnx.AttributeProto.AttributeType`), or None
        for an xgraph annotation. Pass it to `set_attr(..., onnx_type=kind)` to copy the attribute
        as it is; GraphError naming the attributes that exist if `key` is absent."""
        if key not in self._attrs:
            self.get_attr(key)  # raises, listing what exists
        return self._attr_types.get(key)

    def has_onnx_attrs(self) -> bool:
        """True when the op has an ONNX attribute (annotations are never exported)."""
        kinds = self._attr_types
        return bool(kinds) and list(kinds.values()).count(ANNOTATION) < len(kinds)

    def is_annotation(self, key: str) -> bool:
        """True when `key` is an xgraph annotation rather than an ONNX attribute."""
        return key in self._attrs and self._attr_types.get(key) is ANNOTATION

    def set_attr(self, key: str, value: Any, onnx_type: int | None | bool = True) -> None:
        """Set attribute `key`.

        An existing ONNX attribute keeps its ONNX type. A new key is an ONNX attribute when
        the op's schema declares it (or the op has no known schema), else an annotation that
        travels in .xmodel metadata and never reaches exported ONNX nodes.
        """
        if key in self._attr_types:
            kind = self._attr_types[key]
        elif onnx_type is True:
            schema = _schema(self.type, self.domain, self._graph.opset_imports.get(self.domain))
            kind = 0 if (schema is None or key in schema.attributes) else ANNOTATION
        else:
            kind = onnx_type
        if kind is ANNOTATION:
            check_attr_value(f"op {self.name!r}", key, value)
        else:
            value = _frozen_value(value)
            try:
                inferred = onnx_attrs.infer_attribute_type(value)
            except TypeError as e:
                raise GraphError(f"op {self.name!r}: {e}") from None
            if kind in (0, -1) or not _compatible(kind, inferred):
                kind = inferred
        self._attrs[key] = value
        self._attr_types[key] = kind
        self._note_nested(kind)

    def _set_onnx_attr(self, key: str, value: Any, attr_type: int) -> None:
        self._attrs[key] = _frozen_value(value)
        self._attr_types[key] = attr_type
        self._note_nested(attr_type)

    def _note_nested(self, kind: int | None) -> None:
        graph = self._graph
        if kind in _GRAPH_KINDS or graph.index().has_nested_graphs(self):
            graph._mark_nested(self, any(t in _GRAPH_KINDS for t in self._attr_types.values()))

    def attribute_protos(self) -> list[onnx.AttributeProto]:
        """The ONNX attributes as AttributeProtos (annotations left out)."""
        return [onnx_attrs.python_to_attribute(k, v, self._attr_types[k])
                for k, v in self._attrs.items() if self._attr_types[k] is not ANNOTATION]

    def opset(self) -> int | None:
        """The opset version the graph imports for this op's domain."""
        return self._graph.opset_imports.get(self.domain)


def _frozen_value(value: Any) -> Any:
    """ONNX tensor attributes (a Constant's value) are data like weights: stored read-only."""
    if isinstance(value, np.ndarray):
        return frozen(value)
    if isinstance(value, list) and value and isinstance(value[0], np.ndarray):
        return [frozen(v) if isinstance(v, np.ndarray) else v for v in value]
    return value


def _compatible(declared: int, inferred: int) -> bool:
    A = onnx.AttributeProto
    if declared == inferred:
        return True
    # an int where a float is declared, or an empty list, keeps the declared type
    return (declared, inferred) in {(A.FLOAT, A.INT), (A.FLOATS, A.INTS), (A.STRINGS, A.INTS),
                                    (A.TENSORS, A.INTS), (A.GRAPHS, A.INTS)}
