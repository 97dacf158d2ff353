"""`xgraph dump`: every op in topological order as text that diffs cleanly between runs and compiles."""
from __future__ import annotations

import argparse

from xgraph.cli.cmd_inspect import add_model_arguments, load_model, write_stdout
from xgraph.cli.common import shown


def add_parser(subparsers) -> None:
    """Register the `dump` sub-command."""
    p = subparsers.add_parser("dump", help="print every op: type, attributes, inputs, outputs, device, reason",
                              description="Write every op in topological order with its type, device, subgraph, "
                              "placement reason, inputs and outputs (dtype and shape) and attributes (arrays "
                              "summarised). The text is stable across runs, so two dumps can be diffed.")
    add_model_arguments(p)
    p.add_argument("output", nargs="?", metavar="OUT.txt", help="file to write (default: standard output)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the dump."""
    from xgraph.ir.files import check_target, write_text
    from xgraph.view.text import dump_text
    if args.output:
        check_target(args.output)  # a bad target fails before the model is loaded
    text = dump_text(load_model(args))
    if args.output:
        write_text(args.output, shown(text))  # the file is as safe to `cat` as the terminal output
    else:
        write_stdout(text)
    return 0
