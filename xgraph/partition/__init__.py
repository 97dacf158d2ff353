"""Partitioning helpers for plugins: select unassigned subgraphs, and merge them without cycles."""
from xgraph.partition.filters import filter, filter_by_name, filter_by_template, filter_by_type
from xgraph.partition.merge import merge_subgraph, plan_merge

__all__ = ["filter", "filter_by_name", "filter_by_template", "filter_by_type", "merge_subgraph", "plan_merge"]
