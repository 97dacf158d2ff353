"""Gears on the command line: `--gear NAME` and which gears `run`, `bench` and `verify` use.

A model compiled with a gear option holds one static partition per gear. Inputs from files
pick their gear by shape (as the graph runner does); random inputs are made in a gear's
shapes: `--gear NAME`, else gear 0 for `run` and every gear in turn for `bench` and `verify`.
"""
from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import numpy as np

from xgraph.errors import XGraphError
from xgraph.ir.gears import describe_gears

if TYPE_CHECKING:
    from xgraph.ir import Gear, Graph


def add_gear_argument(p: argparse.ArgumentParser, default: str) -> None:
    """--gear NAME, for models compiled with gears."""
    p.add_argument("--gear", metavar="NAME", help="for a model compiled with gears (dynamic_batch_size, "
                   f"dynamic_dims): the gear whose input shapes random inputs take (default: {default}; inputs "
                   "from files pick the gear of their shapes)")


def _named(graph: "Graph", name: str) -> "Gear":
    gears = graph.get_gears()
    if not gears:
        raise XGraphError(f"--gear {name}: model {graph.name!r} was not compiled with gears; drop --gear")
    found = next((g for g in gears if g.name == name), None)
    if found is None:
        raise XGraphError(f"--gear {name}: model {graph.name!r} has no such gear; its gears are: "
                          f"{', '.join(g.describe() for g in gears)}")
    return found


def gear_of_files(graph: "Graph", feeds: dict[str, Any]) -> "Gear | None":
    """The gear matching inputs that all came from files (None when some are missing or there are no gears)."""
    names = [t.name for t in graph.get_input_tensors()]
    if not graph.get_gears() or any(n not in feeds for n in names):
        return None
    found = graph.find_gear({n: np.shape(feeds[n]) for n in names})
    if found is None:
        shown = ", ".join(f"{n}:{','.join(map(str, np.shape(feeds[n])))}" for n in names)
        raise XGraphError(f"model {graph.name!r}: the input files have shapes {shown}, which match no gear; its gears "
                          f"are: {describe_gears(graph.get_gears())}")
    return found


def gears_to_use(graph: "Graph", args: argparse.Namespace, feeds: dict[str, Any], every: bool) -> "list[Gear | None]":
    """The gears to run: `[None]` without gears; the files' gear; `--gear`; else every gear or gear 0."""
    if getattr(args, "gear", None):
        return [_named(graph, args.gear)]
    if not graph.get_gears():
        return [None]
    by_files = gear_of_files(graph, feeds)
    if by_files is not None:
        return [by_files]
    return graph.get_gears() if every else graph.get_gears()[:1]


def gear_title(gear: "Gear | None") -> str:
    """" gear gear1 (x:2,16)" for headers, "" without gears."""
    return "" if gear is None else f" gear {gear.describe()}"


__all__ = ["add_gear_argument", "gear_of_files", "gear_title", "gears_to_use"]
