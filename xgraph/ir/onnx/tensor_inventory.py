"""What an ONNX model holds, walked without trusting it: its graphs (nesting depth bounded),
its tensors and sparse tensors, and the bytes each tensor declares (sizes checked against
the limits before anything is allocated)."""
from __future__ import annotations

from typing import Iterator

import numpy as np
import onnx
from onnx import TensorProto, helper

from xgraph.errors import ModelFileError


#: A tensor declaring more bytes than this is refused before any allocation (1 TiB).
MAX_TENSOR_BYTES = 1 << 40
#: Nested graphs (If/Loop/Scan bodies) deeper than this are refused.
MAX_GRAPH_DEPTH = 64
#: Sparse tensors are expanded to dense arrays, so a few bytes of indices could ask for gigabytes:
#: the dense sizes of all sparse tensors in one model may add up to at most this (1 GiB).
MAX_SPARSE_DENSE_BYTES = 1 << 30
#: Arrays (numpy's limit) and so sparse tensors, which are expanded to arrays, have at most this many dims.
MAX_RANK = 64
#: attribute types whose values are scalars, strings or lists of them: what repeats on thousands of nodes
_SCALAR_TYPES = frozenset({onnx.AttributeProto.INT, onnx.AttributeProto.FLOAT, onnx.AttributeProto.STRING,
                           onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS, onnx.AttributeProto.STRINGS})

_BITS = {TensorProto.INT4: 4, TensorProto.UINT4: 4}
if hasattr(TensorProto, "FLOAT4E2M1"):
    _BITS[TensorProto.FLOAT4E2M1] = 4
if hasattr(TensorProto, "INT2"):
    _BITS[TensorProto.INT2] = 2
    _BITS[TensorProto.UINT2] = 2


def element_bits(elem_type: int) -> int | None:
    """Bits per element of an ONNX tensor type (None for strings and unknown types)."""
    if elem_type in _BITS:
        return _BITS[elem_type]
    if elem_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize * 8
    except Exception:  # onnx raises KeyError/ValueError for types it cannot map
        return None


class Inventory:
    """Everything a model carries in nested places, found in one walk over its nodes.

    Protobuf field access from Python is slow, and hostile-file checks need the graphs,
    tensors and sparse tensors of every scope: one walk collects them all.
    """

    __slots__ = ("graphs", "tensors", "sparse", "nodes")

    def __init__(self) -> None:
        self.graphs: list[onnx.GraphProto] = []
        self.tensors: list[onnx.TensorProto] = []
        self.sparse: list[onnx.SparseTensorProto] = []
        #: the main graph's nodes read into columns (`xgraph.ir.onnx.nodes.Nodes`, not yet checked) when
        #: the safe reader read them for this walk; the importer checks and builds from them
        self.nodes = None

    def add_graph(self, graph: onnx.GraphProto, label: str, depth: int, attribute_lists=None) -> None:
        """Record `graph` (refusing absurd nesting), its initializers and everything in its nodes.

        `attribute_lists`: its nodes' attribute lists already read (None for a node without any), so
        the nodes are not read again."""
        if depth > MAX_GRAPH_DEPTH:
            raise ModelFileError(f"{label}: graphs nested more than {MAX_GRAPH_DEPTH} levels deep (If/Loop/Scan bodies)")
        self.graphs.append(graph)
        self.tensors.extend(graph.initializer)
        self.sparse.extend(graph.sparse_initializer)
        if attribute_lists is None:
            self.add_nodes(graph.node, label, depth)
        else:
            self.add_attribute_lists(attribute_lists, label, depth)

    def add_nodes(self, nodes, label: str, depth: int) -> None:
        """Record the attribute contents of `nodes`."""
        self.add_attribute_lists((node.attribute for node in nodes), label, depth)

    def add_attribute_lists(self, attribute_lists, label: str, depth: int) -> None:
        """Record the contents of the attributes of nodes, given as one attribute list per node.

        Fields are read whatever an attribute's declared type says: a graph or tensor hidden
        behind a wrong type tag is still checked.
        """
        plain: set[bytes] = set()  # attributes (of a scalar or list type) found to hold none of these, by their bytes
        for attributes in attribute_lists:
            if not attributes:
                continue
            for a in attributes:
                key = a.SerializeToString() if a.type in _SCALAR_TYPES else None
                if key in plain:  # the same bytes as one found empty: empty too (a model repeats a few axes)
                    continue
                if key is not None and not (a.HasField("t") or a.tensors or a.HasField("sparse_tensor")
                                            or a.sparse_tensors or a.HasField("g") or a.graphs):
                    plain.add(key)
                    continue
                if a.HasField("t"):
                    self.tensors.append(a.t)
                self.tensors.extend(a.tensors)
                if a.HasField("sparse_tensor"):
                    self.sparse.append(a.sparse_tensor)
                self.sparse.extend(a.sparse_tensors)
                if a.HasField("g"):
                    self.add_graph(a.g, label, depth + 1)
                for g in a.graphs:
                    self.add_graph(g, label, depth + 1)


def inventory(model: onnx.ModelProto, label: str, attribute_lists=None) -> Inventory:
    """The graphs (main first), tensors and sparse tensors of the model, function bodies included
    (`attribute_lists`: those of the main graph's nodes, already read)."""
    inv = Inventory()
    inv.add_graph(model.graph, label, 0, attribute_lists)
    for f in model.functions:
        inv.add_nodes(f.node, label, 1)
    return inv


def iter_graphs(graph: onnx.GraphProto, label: str) -> Iterator[onnx.GraphProto]:
    """The graph and every graph nested in node attributes, refusing absurd nesting."""
    inv = Inventory()
    inv.add_graph(graph, label, 0)
    yield from inv.graphs


def iter_sparse_tensors(model: onnx.ModelProto, label: str, inv: Inventory | None = None) -> Iterator[onnx.SparseTensorProto]:
    """Every SparseTensorProto: sparse initializers and sparse attribute values, in every scope."""
    yield from (inv or inventory(model, label)).sparse


def iter_tensors(model: onnx.ModelProto, label: str, inv: Inventory | None = None) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, sparse tensors' parts and attribute tensors, in
    the main graph, nested graphs and function bodies."""
    inv = inv or inventory(model, label)
    yield from inv.tensors
    for s in inv.sparse:
        yield s.values
        yield s.indices


def declared_bytes(t: onnx.TensorProto, label: str) -> int | None:
    """Bytes the tensor's dims and type call for (None for strings); refuses negative or absurd dims."""
    numel = 1
    for d in t.dims:
        if d < 0:
            raise ModelFileError(f"{label}: tensor {t.name!r} has a negative dimension {d}")
        numel *= d
    bits = element_bits(t.data_type)
    if bits is None:
        return None
    nbytes = (numel * bits + 7) // 8
    if nbytes > MAX_TENSOR_BYTES:
        raise ModelFileError(f"{label}: tensor {t.name!r} declares {nbytes} bytes (dims {list(t.dims)}), "
                             f"over the {MAX_TENSOR_BYTES}-byte limit")
    return nbytes
