"""The graph and its subgraphs as the IR's lower modules see them: structural types (`typing.Protocol`).

`GraphCore` (xgraph/ir/graph_core.py) imports the modules that write, index, capture and copy it
(`builder`, `index`, `state`, `copying`) and the template matcher; `Subgraph` (xgraph/ir/subgraph.py)
imports the writer and the merge cycle test (`quotient`). Those modules cannot name GraphCore or
Subgraph back, not even for annotations only, without tying the IR into one import cycle. They
annotate with these types instead, and GraphCore and Subgraph are their one implementation:

* `GraphTables`: a graph's tables and model-level facts, which the writer, the index and the state
  capture read and write, and the public readers the copy and the template matcher use;
* `TreeNode`: a subgraph's fields, which the writer writes, and what the merge cycle test reads;
* `IndexFacts`: the answers of the graph's index (`xgraph.ir.index.GraphIndex`) those modules ask for.

Each lists only what its users touch. Op and Tensor, the bottom of the IR, are named as they are.
"""
from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

if TYPE_CHECKING:
    import onnx
    from typing_extensions import Self

    from xgraph.ir.op import Op
    from xgraph.ir.tensor import Tensor


class IndexFacts(Protocol):
    """What the writer, the merge cycle test and the template matcher ask of `graph.index()` (a `GraphIndex`)."""

    def positions(self) -> "Mapping[Op, int]": ...

    def output_set(self) -> "AbstractSet[Tensor]": ...

    def implicit_reads(self) -> "tuple[Mapping[Op, list[Tensor]], Mapping[Tensor, list[Op]]]": ...

    def nested_read_tensors(self) -> "AbstractSet[Tensor]": ...

    def input_ops(self, op: "Op") -> "list[Op]": ...

    def fanout_ops(self, op: "Op") -> "list[Op]": ...

    def reads_from(self, op: "Op", producer: "Op") -> bool: ...


class GraphTables(Protocol):
    """A graph (a `GraphCore`) as the writer, the index, the state capture, the copy and the matcher see it."""

    name: str
    #: ONNX model-level facts
    opset_imports: dict[str, int]
    ir_version: int
    model_info: dict[str, Any]
    functions: "list[onnx.FunctionProto]"
    #: the tables: ops and tensors by name (in creation order), the graph inputs and outputs, attrs
    _ops: "dict[str, Op]"
    _tensors: "dict[str, Tensor]"
    _inputs: "list[Tensor]"
    _outputs: "list[Tensor]"
    _attrs: dict[str, Any]
    _nested_ops: "set[Op]"  # ops with graph attributes (If/Loop/Scan bodies)
    _seq: int  # the next op's creation number
    _version: int  # bumped by every structural change
    _index: Any  # the index of this version (a GraphIndex), None until asked for
    _root: Any  # the root of the subgraph tree (a TreeNode: the Subgraph)
    _leaf_of: "dict[Op, Any]"  # each op's leaf subgraph (a TreeNode)

    def __init__(self, name: str = "graph") -> None: ...

    def _touch(self, keeps_order: bool = False) -> None: ...

    def _resolve_op(self, op: "Op | str", strict: bool = True) -> "Op | None": ...

    def index(self) -> IndexFacts: ...

    def get_ops(self) -> "list[Op]": ...

    def toposort(self) -> "list[Op]": ...

    def get_tensors(self) -> "list[Tensor]": ...

    def get_input_tensors(self) -> "list[Tensor]": ...

    def get_output_tensors(self) -> "list[Tensor]": ...

    def get_attrs(self) -> dict[str, Any]: ...

    def set_attr(self, key: str, value: Any) -> None: ...


class TreeNode(Protocol):
    """A subgraph (a `Subgraph`) as the writer and the merge cycle test see it."""

    _ops: "set[Op]"
    _attrs: dict[str, Any]

    def __init__(self, graph: GraphTables, name: str, parent: "Self | None", ops: "Iterable[Op]" = ()) -> None: ...

    @property
    def _graph(self) -> GraphTables: ...

    @property
    def _parent(self) -> "Self | None": ...

    @property
    def _children(self) -> "dict[Self, None]": ...  # the children, in insertion order

    @property
    def name(self) -> str: ...

    @property
    def graph(self) -> GraphTables: ...

    def get_ops(self) -> "AbstractSet[Op]": ...

    def get_children(self) -> "AbstractSet[Self]": ...

    def child_map(self) -> "Mapping[Op, Self]": ...

    def find_child_subgraph_by_op(self, op: "Op | str") -> "Self | None": ...


__all__ = ["GraphTables", "IndexFacts", "TreeNode"]
