"""GraphSnapshot: a graph's state before a plugin step, to undo the step and to see what it changed.

A plugin is user code run in the middle of compilation; when it raises or misbehaves the
graph must be exactly as before it ran (CONVENTIONS: a failed operation changes nothing).
The IR captures and restores the state (`Graph.snapshot()` / `Graph.restore(state)`,
`xgraph.ir.state.GraphState`, named fields) and says what differs since
(`Graph.changes_since(state)`, a `StateDiff`); this module holds the chain's policy:
`changes` lists what differs outside what a plugin step may touch, which is how the chain catches a `partition` or `compile`
that reaches beyond its own subgraphs. Every piece of graph state is compared: the ops and
tensors (names included, so a renamed tensor is caught), attrs everywhere, shapes and dtypes,
the subgraph tree, and the model-level facts (opset imports, IR version, model info,
functions). Weights and ONNX tensor attributes are read-only arrays, so a plugin writing into
one fails at the write instead of changing the caller's graph.

Cost: O(ops + tensors + subgraphs) time per snapshot or comparison; a comparison allocates
only for what changed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from xgraph.ir import Graph, GraphState, Op, Subgraph
    from xgraph.ir.state import StateDiff

#: at most this many op/tensor findings are listed (the rest are the same mistake, repeated)
_MAX_FINDINGS = 6


class GraphSnapshot:
    """The state of a graph when constructed; `restore` puts it back, `changes` says what differs now."""

    def __init__(self, graph: "Graph"):
        self.graph = graph
        self.state: GraphState = graph.snapshot()

    def restore(self) -> None:
        """Put the graph back exactly as captured (the same objects: ops, tensors, subgraphs)."""
        self.graph.restore(self.state)

    def children_before(self, ops: Iterable["Op"]) -> list["Subgraph"]:
        """The subgraphs that held `ops` when captured (for unassigned ops: the root's children then), in op order."""
        leaf_of = self.state.leaf_of
        return list(dict.fromkeys(leaf_of[op] for op in ops))

    def changes(self, *, merges_allowed: bool = False, children: "Iterable[Subgraph] | None" = None,
                free_subgraphs: Iterable["Subgraph"] = (), free_ops: Iterable["Op"] = ()) -> list[str]:
        """What differs from the snapshot, outside the given allowances; empty when nothing else changed.

        `merges_allowed` lets depth-1 children without a "device" attr be merged; `children`
        instead names the root's children expected now (a later check after allowed
        merges). New children must carry no attrs or children unless free. `free_subgraphs`
        may change their attrs and everything below them; `free_ops` may change their
        attrs and their output tensors' attrs.
        """
        before, diff = self.state, self.graph.changes_since(self.state)
        found: list[str] = []
        if diff.structure:
            found.append("the graph's ops or tensors (ops added, removed or rewired)")
        if diff.graph_attrs or diff.name:
            found.append(f"graph attrs {diff.graph_attrs}" if diff.graph_attrs else "the graph's name")
        found += diff.model
        found += _tree_changes(before, diff, set(free_subgraphs), merges_allowed, children)
        found += _op_changes(before, diff, set(free_ops))
        return found


def _tree_changes(before: "GraphState", diff: "StateDiff", free: set["Subgraph"], merges_allowed: bool,
                  expected: "Iterable[Subgraph] | None") -> list[str]:
    if diff.root_replaced:
        return ["the root subgraph was replaced"]
    children = diff.root_children
    reference = before.subgraph_columns.children[0] if expected is None else tuple(expected)  # the root's
    found: list[str] = []
    reference_set, now_set = set(reference), set(children)
    gone = [c for c in reference if c not in now_set]
    new = [c for c in children if c not in reference_set]
    if gone or new:
        if not merges_allowed or expected is not None:
            found.append(f"the root's children (merged or split: {_names(gone + new)})")
        else:  # the captured attrs of the children merged away, read from the columns (no state per child)
            index, attrs = before.subgraph_index, before.subgraph_columns.attrs
            was = [attrs[index[c]] for c in gone]
            assigned = [f"{c.name!r} (device {a['device']!r})" for c, a in zip(gone, was) if "device" in a]
            if assigned:
                found.append(f"subgraphs assigned earlier were merged away: {', '.join(assigned[:5])}")
    touched = _touched_children(diff, before.root)  # the root now too: it was not replaced
    # elsewhere (a captured child no subgraph change reached) the loop below finds nothing: skipped in C
    for child in filter((touched | set(new)).__contains__, children):
        if child in free:
            continue
        if child in before.subgraph_index:
            if child in touched:  # elsewhere `_subtree_changes` finds nothing
                found += _subtree_changes(diff, child)
        elif diff.new_subgraphs.get(child):
            found.append(f"attrs or children of subgraph {child.name!r}, which it did not return")
    return found


def _touched_children(diff: "StateDiff", root: "Subgraph") -> set["Subgraph"]:
    """The root's children now holding (as themselves or below) a subgraph whose attrs or children changed or
    that is new: the only ones where `_subtree_changes` can find something. O(changed subgraphs x depth)."""
    touched: set["Subgraph"] = set()
    for sg in (*diff.subgraph_attrs, *diff.subgraph_children, *diff.new_subgraphs):
        parent = sg.get_parent()
        while parent is not None and parent is not root:
            sg, parent = parent, parent.get_parent()
        if parent is root:
            touched.add(sg)
    return touched


def _subtree_changes(diff: "StateDiff", sg: "Subgraph") -> list[str]:
    if sg in diff.new_subgraphs:
        return [f"subgraph {sg.name!r} (created)"]
    found = []
    if sg in diff.subgraph_attrs:
        found.append(f"attrs {diff.subgraph_attrs[sg]} of subgraph {sg.name!r}")
    if sg in diff.subgraph_children:
        found.append(f"the children of subgraph {sg.name!r}")
    if diff.subgraph_attrs or diff.subgraph_children or diff.new_subgraphs:
        for child in sg.get_children():
            found += _subtree_changes(diff, child)
    return found


def _op_changes(before: "GraphState", diff: "StateDiff", free_ops: set["Op"]) -> list[str]:
    """Changed ops and tensors, except the free ops and the attrs of their output tensors (a rename, a new
    dtype or shape, a new value type always count: the ops after them were placed for the old ones)."""
    found: list[str] = []
    for op, changes in diff.ops.items():
        if op not in free_ops:
            found += changes
    captured = before.tensor_columns
    producers = dict(zip(captured.tensors, captured.producers)) if diff.tensors else {}
    for t, change in diff.tensors.items():
        producer = producers[t]
        if producer is None or producer not in free_ops or not change.startswith("attrs"):
            found.append(change)
    return found[:_MAX_FINDINGS]


def _names(subgraphs: list["Subgraph"]) -> str:
    names = sorted(sg.name for sg in subgraphs)
    return ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")
