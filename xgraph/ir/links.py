"""Invariant checks over a Graph (links agree both ways, the subgraph tree partitions the ops): `check_links`,
kept with the state it checks in `xgraph.ir.state`."""
from __future__ import annotations

from xgraph.ir.state import check_links, check_tree

__all__ = ["check_links", "check_tree"]
