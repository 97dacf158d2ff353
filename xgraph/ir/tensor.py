"""Tensor: a named value flowing between ops (or a weight, when it carries data)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from xgraph.ir.attr_store import AttrsMixin

if TYPE_CHECKING:
    import onnx

    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.op import Op

Shape = tuple  # tuple[int | str | None, ...]


def frozen(array: np.ndarray) -> np.ndarray:
    """`array` as a read-only array: itself when already read-only, else a read-only view.

    Weights are shared, never copied (a 1 GB model stays memory-mapped); freezing them is
    what lets plugins, kernels and runners receive them without a copy and without being able
    to change the caller's graph. The caller's own array keeps its flags.
    """
    if array.flags.writeable:
        array = array.view()
        array.flags.writeable = False
    return array


class Tensor(AttrsMixin):
    """A value: graph input, op output, or weight (const, no producer, with data).

    Links are written only by the graph's builder (`xgraph.ir.builder`): `producer` and
    `consumers` are read-only views of them.
    `shape` is None when even the rank is unknown; a dim is int, a symbolic str, or None.
    """

    __slots__ = ("name", "_shape", "_dtype", "_producer", "_consumers", "_data", "_attrs", "_graph",
                 "_type_proto")

    def __init__(self, graph: "Graph", name: str, shape=None, dtype=None, data: np.ndarray | None = None):
        self._graph = graph
        self.name = name
        if data is not None:
            data = frozen(data)
            shape, dtype = data.shape, data.dtype
        self._data = data
        self._shape = None if shape is None else tuple(shape)
        self._dtype = None if dtype is None else np.dtype(dtype)
        self._producer: Op | None = None
        self._consumers: dict[Op, int] = {}  # op -> number of input slots it uses this tensor in
        self._attrs: dict[str, Any] = {}
        self._type_proto = None  # onnx.TypeProto for non-tensor values (sequences, maps, optionals)

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, shape={self._shape}, dtype={self._dtype})"

    @property
    def graph(self) -> "Graph":
        """The graph this tensor belongs to."""
        return self._graph

    @property
    def shape(self) -> Shape | None:
        """Dims as ints, symbolic names (str) or None (unknown); None when the rank is unknown."""
        return self._shape

    @shape.setter
    def shape(self, value) -> None:
        self._shape = None if value is None else tuple(value)

    @property
    def dtype(self) -> np.dtype | None:
        """Element type as a numpy dtype (None when unknown)."""
        return self._dtype

    @dtype.setter
    def dtype(self, value) -> None:
        self._dtype = None if value is None else np.dtype(value)

    @property
    def producer(self) -> "Op | None":
        """The op writing this tensor; None for graph inputs and weights."""
        return self._producer

    @property
    def consumers(self) -> "list[Op]":
        """Ops reading this tensor, in the order they started reading it."""
        return list(self._consumers)

    @property
    def type_proto(self) -> "onnx.TypeProto | None":
        """The ONNX type of a non-tensor value (sequence, map, optional), as a copy; None for tensors."""
        if self._type_proto is None:
            return None
        copy = type(self._type_proto)()
        copy.CopyFrom(self._type_proto)
        return copy

    @property
    def is_const(self) -> bool:
        """True for weights (data carried in the graph)."""
        return self._data is not None

    @property
    def data(self) -> np.ndarray | None:
        """The weight's values (a read-only array, shared, never copied), or None for non-const tensors."""
        return self._data

    @property
    def is_tensor_value(self) -> bool:
        """True for a plain tensor; False for ONNX's other value types (sequences, maps, optionals),
        whose values are lists, dicts or None rather than arrays."""
        return self._type_proto is None

    def is_static(self) -> bool:
        """True when the shape is fully known (every dim an int)."""
        return self._shape is not None and all(isinstance(d, int) for d in self._shape)

    def numel(self) -> int | None:
        """Number of elements when the shape is static, else None."""
        if not self.is_static():
            return None
        return int(np.prod(self._shape, dtype=np.int64))
