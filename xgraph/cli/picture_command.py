"""What `xgraph svg` and `xgraph html` share: the arguments, loading the model and writing one picture file."""
from __future__ import annotations

import argparse
import importlib
from typing import Callable

from xgraph.cli.common import check_output_path
from xgraph.cli.cmd_inspect import add_model_arguments, load_model, warn_if_not_compiled


def picture_command(name: str, help: str, description: str, suffix: str,
                    writer: str) -> tuple[Callable[..., None], Callable[[argparse.Namespace], int]]:
    """`add_parser` and `run` of a sub-command that draws the partition into one file.

    `writer` is "module:function" in `xgraph.view`, called as `function(graph, path, view=...)`;
    it is imported when the command runs, so `xgraph --help` does not load the view.
    """
    def add_parser(subparsers) -> None:
        p = subparsers.add_parser(name, help=help, description=description)
        add_model_arguments(p)
        p.add_argument("output", metavar=f"OUT.{suffix}", help=f"the {suffix.upper()} file to write")
        p.add_argument("--view", choices=("auto", "ops", "subgraphs"), default="auto",
                       help="every op, one box per device subgraph, or auto (default: subgraphs for a compiled "
                       "graph above 120 ops)")
        p.set_defaults(func=run)

    def run(args: argparse.Namespace) -> int:
        module, function = writer.split(":")
        write = getattr(importlib.import_module(f"xgraph.view.{module}"), function)
        check_output_path("output", args.output)
        graph = load_model(args)
        warn_if_not_compiled(graph, args)
        write(graph, args.output, view=args.view)
        print(f"wrote {args.output}")
        return 0

    add_parser.__doc__ = f"Register the `{name}` sub-command."
    run.__doc__ = "Draw and write."
    return add_parser, run
