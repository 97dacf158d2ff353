"""GraphCore: the graph structure (ops, tensors, weights, inputs/outputs, links, the subgraph
tree) with its queries and mutations, and nothing that reads or writes files.

The public `xgraph.Graph` (`xgraph/ir/graph.py`) is this class plus the ONNX/.xmodel codec
methods. Keeping the codec out of here is what lets `xgraph/ir/onnx/` build and read graphs
while importing only the core: the codec is handed the class to build (`graph_class`).
All writes of tables, links and tree membership go through `xgraph.ir.builder`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import onnx

from xgraph.errors import GraphError
from xgraph.ir import attribute_values
from xgraph.ir.attr_store import AttrsMixin
from xgraph.ir.builder import GraphBuilder, mark_nested, rewire, set_input, write_op_annotations
from xgraph.ir.copying import copy_graph
from xgraph.ir.gears import Gear, check_gears, find_gear
from xgraph.ir.op import Op
from xgraph.ir.index import GraphIndex
from xgraph.ir.state import GraphState, capture_state, restore_state
from xgraph.ir.state import StateDiff, changes_since
from xgraph.ir.subgraph import Subgraph
from xgraph.ir.template import find_matches
from xgraph.ir.tensor import Tensor

if TYPE_CHECKING:
    import networkx as nx

    from xgraph.ir.template import GraphTemplate


class GraphCore(AttrsMixin):
    """A framework-neutral computation graph (see `xgraph.Graph`, which adds ONNX and .xmodel I/O).

    Ops are kept in insertion order. Since `create_op` needs its inputs to exist, insertion
    order is topological unless `Op.set_input` rewires an op to a later tensor; `toposort`
    is deterministic either way (Kahn's algorithm, ties broken by insertion order).
    """

    def __init__(self, name: str = "graph"):
        self.name = name
        self._ops: dict[str, Op] = {}
        self._tensors: dict[str, Tensor] = {}
        self._inputs: list[Tensor] = []
        self._outputs: list[Tensor] = []
        self._attrs: dict[str, Any] = {}
        self._seq = 0
        self._version = 0
        self._tree_version = 0  # counts edits of the subgraph tree (which do not drop the index)
        self._index: GraphIndex | None = None  # the derived facts of this version, built on first ask
        self._leaf_of: dict[Op, Subgraph] = {}
        self._nested_ops: set[Op] = set()  # ops with graph attributes (If/Loop/Scan bodies)
        self._root = Subgraph(self, "root", None)
        #: ONNX model-level facts kept for a faithful export.
        self.opset_imports: dict[str, int] = {"": onnx.defs.onnx_opset_version()}
        self.ir_version: int = onnx.IR_VERSION
        self.model_info: dict[str, Any] = {}
        self.functions: list[onnx.FunctionProto] = []
        self._gears: tuple[Gear, ...] = ()  # set on gear 0 of a graph compiled with gears (xgraph/ir/gears.py)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, ops={len(self._ops)}, tensors={len(self._tensors)})"

    def _touch(self, keeps_order: bool = False) -> None:
        """A new version: the index is dropped. `keeps_order`: the edit (removing ops or tensors, adding weights)
        keeps a table order known topological so."""
        self._version += 1
        self._index = self._index.after_order_keeping_edit() if keeps_order and self._index is not None else None

    @property
    def tree_version(self) -> int:
        """A number every edit of the subgraph tree changes (merges, splits, ops leaving, restores): what
        is derived from the tree may be kept while it stays the same."""
        return self._tree_version

    def _mark_nested(self, op: Op, nested: bool) -> None:
        """`op` has (or no longer has) a graph attribute: a new version (`Op.set_attr`, `del_attr`)."""
        mark_nested(self, op, nested)
        self._touch()

    def index(self) -> GraphIndex:
        """The derived facts of this version of the graph (orders, links, children, op facts: `xgraph.ir.index`),
        worked out on first ask and kept until the next structural change."""
        index = self._index
        if index is None:
            index = self._index = GraphIndex(self)
        return index

    def _check_new_name(self, name: str, what: str) -> None:
        if not isinstance(name, str) or not name:
            raise GraphError(f"graph {self.name!r}: {what} needs a non-empty str name, got {name!r}")

    def _check_own_tensor(self, t: Any, where: str) -> Tensor:
        if isinstance(t, str):
            t = self.get_tensor(t)
        if not isinstance(t, Tensor) or self._tensors.get(t.name) is not t:
            raise GraphError(f"graph {self.name!r}: {where} is {t!r}, which is not a tensor of this graph")
        return t

    def create_input(self, name: str, shape: Sequence | None = None, dtype=np.float32) -> Tensor:
        """Add a graph input tensor."""
        self._check_new_name(name, "an input")
        if name in self._tensors:
            raise GraphError(f"graph {self.name!r} already has a tensor named {name!r}")
        t = GraphBuilder(self).add_input(name, shape, dtype)
        self._touch()
        return t

    def create_const(self, name: str, array) -> Tensor:
        """Add a weight: a const tensor with data and no producer (its `data` is a read-only view)."""
        self._check_new_name(name, "a const")
        if name in self._tensors:
            raise GraphError(f"graph {self.name!r} already has a tensor named {name!r}")
        t = GraphBuilder(self).add_const(name, np.asarray(array))
        self._touch(keeps_order=True)
        return t

    def create_op(self, name: str, type: str, attrs: dict[str, Any] | None = None,
                  inputs: Sequence["Tensor | str | None"] | None = None, domain: str = "",
                  num_outputs: int = 1, outputs: Sequence[str] | None = None) -> Op:
        """Add an op reading `inputs` (Tensor, name or None) and writing new output tensors.

        Outputs are named `outputs` when given, else the op's name (one output) or
        "<name>:<i>". The op joins the root and, if the root already has children, a new
        leaf child of its own, so every level still partitions its parent.
        """
        self._check_new_name(name, "an op")
        if name in self._ops:
            raise GraphError(f"graph {self.name!r} already has an op named {name!r}")
        if not isinstance(type, str) or not type:
            raise GraphError(f"op {name!r}: type must be a non-empty str, got {type!r}")
        in_tensors = [None if t is None or t == "" else self._check_own_tensor(t, f"input {i} of op {name!r}")
                      for i, t in enumerate(inputs or [])]
        if outputs is None:
            outputs = [name] if num_outputs == 1 else [f"{name}:{i}" for i in range(num_outputs)]
        outputs = list(outputs)
        if len(set(outputs)) != len(outputs) or any(not isinstance(o, str) or not o for o in outputs):
            raise GraphError(f"op {name!r}: output names must be distinct non-empty strs, got {outputs!r}")
        taken = [o for o in outputs if o in self._tensors]
        if taken:
            raise GraphError(f"op {name!r}: output tensor name(s) {taken} already exist in graph {self.name!r}")
        attrs = dict(attrs or {})
        attribute_values.check_inferable(attrs, f"op {name!r}")
        # plan done: nothing below can fail
        op = GraphBuilder(self).add_op(name, type, domain, in_tensors, outputs)
        for k, v in attrs.items():
            op.set_attr(k, v, onnx_type=0)
        self._touch()
        return op

    def remove_op(self, op: "Op | str") -> None:
        """Remove an op whose outputs nobody reads (and that are not graph outputs)."""
        op = self._resolve_op(op)
        index = self.index()
        readers = index.implicit_reads()[1]
        used = [t.name for t in op.get_output_tensors() if t.consumers or t in readers]
        if used:
            raise GraphError(f"cannot remove op {op.name!r}: its output(s) {used} still have consumers")
        exposed = [t.name for t in op.get_output_tensors() if t in index.output_set()]
        if exposed:
            raise GraphError(f"cannot remove op {op.name!r}: its output(s) {exposed} are graph outputs")
        GraphBuilder(self).remove_ops([op])
        self._touch(keeps_order=True)

    def remove_tensor(self, tensor: "Tensor | str") -> None:
        """Remove an unused weight or graph input."""
        t = self._check_own_tensor(tensor, "the tensor to remove")
        index = self.index()
        if t.producer is not None or t.consumers or t in index.implicit_reads()[1] or t in index.output_set():
            raise GraphError(f"cannot remove tensor {t.name!r}: it is produced, consumed, or a graph output")
        GraphBuilder(self).remove_tensor(t)
        self._touch(keeps_order=True)

    def replace_uses(self, old: "Tensor | str", new: "Tensor | str") -> None:
        """Make every reader of `old` (ops and graph outputs) read `new` instead.

        The op producing `new` keeps reading `old`, so inserting an op after a tensor is
        `create_op(..., inputs=[old])` followed by `replace_uses(old, new_op_output)`.
        """
        old = self._check_own_tensor(old, "the tensor to replace")
        new = self._check_own_tensor(new, "the replacement tensor")
        if old is new:
            return
        producer = new.producer
        readers = [c for c in old.consumers if c is not producer]
        if producer is not None:
            for c in readers:
                if self.index().reaches(c, producer):
                    raise GraphError(f"replacing {old.name!r} by {new.name!r} would create a cycle through {c.name!r}")
        rewire(readers, old, new)
        GraphBuilder(self).set_outputs([new if t is old else t for t in self._outputs])
        self._touch()

    def _set_input(self, op: Op, index: int, tensor: "Tensor | None") -> None:
        """`Op.set_input`: checked (slot exists, tensor of this graph, no cycle), then linked."""
        slots = op.get_input_num()
        if not 0 <= index < slots:
            raise GraphError(f"op {op.name!r} has no input slot {index} (it has {slots})")
        if tensor is not None:
            self._check_own_tensor(tensor, f"input {index} of op {op.name!r}")
            if tensor.producer is not None and self.index().reaches(op, tensor.producer):
                raise GraphError(f"connecting tensor {tensor.name!r} to op {op.name!r} would create a cycle")
        set_input(op, index, tensor)
        self._touch()

    def set_outputs(self, tensors: Iterable["Tensor | str"]) -> None:
        """Declare the graph outputs, in order."""
        GraphBuilder(self).set_outputs([self._check_own_tensor(t, "a graph output") for t in tensors])
        self._touch()

    def add_output(self, tensor: "Tensor | str") -> None:
        """Append a graph output."""
        self.set_outputs(self._outputs + [self._check_own_tensor(tensor, "a graph output")])

    def set_inputs(self, tensors: Iterable["Tensor | str"]) -> None:
        """Reorder the graph inputs (the same tensors, or a subset of producer-less non-const tensors)."""
        ts = [self._check_own_tensor(t, "a graph input") for t in tensors]
        bad = [t.name for t in ts if t.producer is not None or t.is_const]
        if bad:
            raise GraphError(f"graph {self.name!r}: {bad} cannot be graph inputs (produced by an op, or weights)")
        GraphBuilder(self).set_inputs(ts)
        self._touch()

    # -- queries -------------------------------------------------------------------------------
    def set_op_annotations(self, key: str, values: "dict[Op, Any]") -> None:
        """Set annotation `key` on many ops at once, as `op.set_attr(key, v, onnx_type=None)` would; all or nothing.

        An op carrying an ONNX attribute named `key` keeps it (the annotation is skipped there).
        Checks every op and value first, then writes: O(len(values)).
        """
        write_op_annotations(self, list(values), {key: list(values.values())})

    def set_op_annotation_columns(self, ops: "Sequence[Op]", columns: "dict[str, Sequence[Any]]") -> None:
        """`set_op_annotations(key, dict(zip(ops, values)))` for each (key, values) of `columns`, in one bulk pass
        (`xgraph.ir.builder.write_op_annotations`); all or nothing. Each column has one value per op of `ops`."""
        write_op_annotations(self, ops, columns)

    def get_name(self) -> str:
        """The graph's name."""
        return self.name

    def get_ops(self) -> list[Op]:
        """All ops in insertion order."""
        return list(self._ops.values())

    def get_op_num(self) -> int:
        """Number of ops."""
        return len(self._ops)

    def get_op(self, name: str) -> Op:
        """The op called `name`; GraphError if there is none."""
        try:
            return self._ops[name]
        except (KeyError, TypeError):
            raise GraphError(f"graph {self.name!r} has no op named {name!r}") from None

    def has_op(self, name: str) -> bool:
        """True when an op called `name` exists."""
        return name in self._ops

    def _resolve_op(self, op: "Op | str", strict: bool = True) -> Op | None:
        if isinstance(op, Op):
            if self._ops.get(op.name) is op:
                return op
            if strict:
                raise GraphError(f"op {op.name!r} does not belong to graph {self.name!r}")
            return None
        found = self._ops.get(op) if isinstance(op, str) else None
        if found is None and strict:
            raise GraphError(f"graph {self.name!r} has no op named {op!r}")
        return found

    def get_tensors(self) -> list[Tensor]:
        """All tensors (inputs, weights, op outputs) in creation order."""
        return list(self._tensors.values())

    def get_tensor(self, name: str) -> Tensor:
        """The tensor called `name`; GraphError if there is none."""
        try:
            return self._tensors[name]
        except (KeyError, TypeError):
            raise GraphError(f"graph {self.name!r} has no tensor named {name!r}") from None

    def has_tensor(self, name: str) -> bool:
        """True when a tensor called `name` exists."""
        return name in self._tensors

    def get_const_tensors(self) -> list[Tensor]:
        """The weights."""
        return [t for t in self._tensors.values() if t.is_const]

    def get_input_tensors(self) -> list[Tensor]:
        """Graph inputs (not weights), in model order."""
        return list(self._inputs)

    def get_output_tensors(self) -> list[Tensor]:
        """Graph outputs, in model order."""
        return list(self._outputs)

    def toposort(self) -> list[Op]:
        """Ops in a deterministic topological order (insertion order breaks ties). O((V+E) log V)."""
        return list(self.index().toposort())

    def topo_positions(self) -> "Mapping[Op, int]":
        """Op -> its position in `toposort()`, read-only, kept until the next structural change (no dict per call)."""
        return self.index().positions()

    def op_graph(self) -> "nx.DiGraph":
        """The op-to-op dependency graph as a networkx.DiGraph over Op objects (cached until a mutation)."""
        return self.index().op_graph()

    def isomorphism(self, template: "GraphTemplate") -> list[dict[str, Op]]:
        """Every match of `template`: template op name -> Op."""
        return find_matches(self, template)

    # -- subgraph tree -------------------------------------------------------------------------
    def get_root_subgraph(self) -> Subgraph:
        """The root of the subgraph tree (all ops)."""
        return self._root

    def get_leaf_subgraph(self, op: "Op | str") -> Subgraph:
        """The leaf subgraph holding `op`."""
        return self._leaf_of[self._resolve_op(op)]

    def get_leaf_subgraphs(self, ops: "Iterable[Op | str]") -> list[Subgraph]:
        """`[get_leaf_subgraph(op) for op in ops]`: the ops of this graph found in one C pass over its op -> leaf
        table (which holds exactly its ops), a name or a stranger resolved one by one (GraphError naming it)."""
        ops = list(ops)
        try:
            return list(map(self._leaf_of.__getitem__, ops))
        except (KeyError, TypeError):
            return [self.get_leaf_subgraph(op) for op in ops]

    def get_subgraph(self, name: str) -> Subgraph:
        """The shallowest subgraph called `name`; GraphError if there is none."""
        index = self.index()
        level = [self._root]
        while level:
            for s in level:
                if s.name == name:
                    return s
            level = [c for s in level for c in index.children(s)]
        raise GraphError(f"graph {self.name!r} has no subgraph named {name!r}")

    def iter_subgraphs(self) -> Iterable[Subgraph]:
        """Every subgraph, breadth first from the root."""
        index = self.index()
        level = [self._root]
        while level:
            yield from level
            level = [c for s in level for c in index.children(s)]

    # -- whole-graph operations ---------------------------------------------------------------
    def get_gears(self) -> list[Gear]:
        """The gears of a graph compiled with a gear option (gear 0's graph is this one); [] without gears."""
        return list(self._gears)

    def set_gears(self, gears: Sequence[Gear]) -> None:
        """Attach the gears (checked first: gear 0 is this graph, same inputs/outputs, static distinct shapes)."""
        self._gears = check_gears(self, gears)

    def find_gear(self, shapes: "dict[str, Sequence[int]]") -> Gear | None:
        """The gear whose input shapes equal `shapes` ({input name: dims}), or None."""
        return find_gear(self._gears, shapes)

    def copy(self, drop_annotations: Iterable[str] = ()) -> "GraphCore":
        """A deep copy without the subgraph tree; op annotations named in `drop_annotations` are left out.

        Copied: ops (typed attributes, annotations, doc strings), tensors (shapes, dtypes,
        attrs), inputs/outputs, opsets, functions, model info and graph attrs. Weights are
        shared (they are read-only). The copy is of the same class as this graph. O(V+E).
        """
        return copy_graph(self, frozenset(drop_annotations))

    def snapshot(self) -> "GraphState":
        """Everything about this graph that its API can change, captured for `restore` (and compared by callers).

        O(ops + tensors + subgraphs); weights and attribute arrays are shared (they are read-only).
        """
        return capture_state(self)

    def restore(self, state: "GraphState") -> None:
        """Put this graph back exactly as `state` (from `snapshot()`) recorded it, the same objects included."""
        restore_state(self, state)

    def changes_since(self, state: "GraphState") -> StateDiff:
        """What differs now from `state` (from `snapshot()`), per op, tensor, subgraph and model fact.

        Compares in place, O(ops + tensors + subgraphs); nothing is captured again.
        """
        return changes_since(self, state)

    def _export_subgraph(self, subgraph: Subgraph, external_weights: bool = False) -> onnx.ModelProto:
        """`Subgraph.to_onnx`, provided by the class that knows the ONNX codec (`xgraph.Graph`)."""
        raise GraphError(f"graph {self.name!r} is a {type(self).__name__}, which cannot export ONNX; "
                         "build it as an xgraph.Graph")
