"""The children of a subgraph that carry no attr of a given name, with their ops: what placement works on.

Placement starts from the root's children no plugin labelled with a device, each with its ops
in dependency order. Through the public accessors that is a method call per child to test the
attr and a copied set per child to list its ops; a 100,000-op graph has about as many
children. `unlabelled_children` reads the same from the subgraphs' own tables in one
comprehension per list; kernel annotation reads the labels and ops of many subgraphs the same
way (`attr_column`, `ops_of`). All pure and O(number of subgraphs and ops asked about), the
lists new (the caller cannot change the graph through them).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

if TYPE_CHECKING:
    from xgraph.ir.op import Op
    from xgraph.ir.subgraph import Subgraph


def unlabelled_children(children: "Iterable[Subgraph]", key: str) -> "tuple[list[Subgraph], list[list[Op]]]":
    """(the subgraphs of `children`, in order, without attr `key`; each one's ops, as `Subgraph.toposort` orders
    them: a one-op subgraph's one op without a sort)."""
    kept = [c for c in children if key not in c._attrs]
    return kept, [list(c._ops) if len(c._ops) == 1 else c.toposort() for c in kept]



def attr_column(subgraphs: "Iterable[Subgraph]", key: str, default: object = None) -> list:
    """`[s.get_attrs().get(key, default) for s in subgraphs]`, without a copy of each subgraph's attrs."""
    return [s._attrs.get(key, default) for s in subgraphs]


def ops_of(subgraphs: "Iterable[Subgraph]") -> "list[Op]":
    """The ops of each of `subgraphs` in turn (`get_ops()` order within each), in one list."""
    return [op for s in subgraphs for op in s._ops]


__all__ = ["attr_column", "ops_of", "unlabelled_children"]
