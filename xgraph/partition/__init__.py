"""Partitioning helpers for plugins: select unassigned subgraphs, merge them without cycles, place by cost.

The placement solver (`PlacementProblem`, `solve_placement`) is loaded on first use, so
importing this package does not import scipy.
"""
from xgraph.partition.filters import filter, filter_by_name, filter_by_template, filter_by_type
from xgraph.partition.merge import group_children, merge_subgraph

_LAZY = {
    "PlacementProblem": "xgraph.partition.placement_problem",
    "PlacementSolution": "xgraph.partition.placement_problem",
    "solve_placement": "xgraph.partition.placement_solver",
}

__all__ = ["filter", "filter_by_name", "filter_by_template", "filter_by_type", "group_children", "merge_subgraph",
           *_LAZY]


def __getattr__(name: str):
    """The solver's names, imported when first asked for."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'xgraph.partition' has no attribute {name!r}")
