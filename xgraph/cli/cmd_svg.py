"""`xgraph svg`: the partition picture as an SVG file (no Graphviz needed)."""
from __future__ import annotations

import argparse

from xgraph.cli.common import check_output_path
from xgraph.cli.cmd_inspect import add_model_arguments, load_model, warn_if_not_compiled


def add_parser(subparsers) -> None:
    """Register the `svg` sub-command."""
    p = subparsers.add_parser("svg", help="draw the partition as SVG (ops coloured by device)",
                              description="Draw the op graph in layers, ops coloured by device, each device "
                              "subgraph boxed, host/device copies marked, with a legend.")
    add_model_arguments(p)
    p.add_argument("output", metavar="OUT.svg", help="the SVG file to write")
    p.add_argument("--view", choices=("auto", "ops", "subgraphs"), default="auto",
                   help="every op, one box per device subgraph, or auto (default: subgraphs for a compiled graph "
                   "above 120 ops)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Draw and write."""
    from xgraph.view.picture import write_svg
    check_output_path("output", args.output)
    graph = load_model(args)
    warn_if_not_compiled(graph, args)
    write_svg(graph, args.output, view=args.view)
    print(f"wrote {args.output}")
    return 0
