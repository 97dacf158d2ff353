"""`xgraph html`: the partition picture as one self-contained, interactive HTML page."""
from __future__ import annotations

import argparse

from xgraph.cli.common import check_output_path
from xgraph.cli.cmd_inspect import add_model_arguments, load_model, warn_if_not_compiled


def add_parser(subparsers) -> None:
    """Register the `html` sub-command."""
    p = subparsers.add_parser("html", help="draw the partition as an interactive HTML page",
                              description="Write one HTML file (nothing fetched from the network) with the "
                              "partition picture: drag to pan, wheel to zoom, hover an op for its shapes, "
                              "attributes and placement reason, search ops by name.")
    add_model_arguments(p)
    p.add_argument("output", metavar="OUT.html", help="the HTML file to write")
    p.add_argument("--view", choices=("auto", "ops", "subgraphs"), default="auto",
                   help="every op, one box per device subgraph, or auto (default: subgraphs for a compiled graph "
                   "above 120 ops)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Draw and write."""
    from xgraph.view.html import write_html
    check_output_path("output", args.output)
    graph = load_model(args)
    warn_if_not_compiled(graph, args)
    write_html(graph, args.output, view=args.view)
    print(f"wrote {args.output}")
    return 0
