"""`xgraph`: sub-commands to inspect, draw, run, verify and benchmark models.

Each sub-command lives in its own module `xgraph/cli/cmd_<name>.py` exposing
`add_parser(subparsers)` (which registers it and sets `func`) and is listed in COMMANDS.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

from xgraph.cli.common import add_debug_flag, add_version_flag, escaped_output, run_cli, tune_collector

if TYPE_CHECKING:
    from xgraph.registries import Registries

#: Sub-command modules, in the order `xgraph --help` lists them.
COMMANDS = ("inspect", "dump", "svg", "html", "run", "verify", "bench", "plugins", "explain", "quantize",
            "profile_costs")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every available sub-command."""
    parser = argparse.ArgumentParser(prog="xgraph", description="Inspect, draw, run and verify xgraph models.")
    add_debug_flag(parser)
    add_version_flag(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"xgraph.cli.cmd_{name}")
        except ModuleNotFoundError as e:
            if e.name != f"xgraph.cli.cmd_{name}":
                raise
            continue
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None, *, registries: "Registries | None" = None) -> int:
    """Entry point of the `xgraph` console script; `registries` (default: the default ones) serve every command."""
    tune_collector()
    parser = build_parser()
    with escaped_output():  # argparse echoes unknown arguments, which may carry control characters
        args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return run_cli(lambda: args.func(args), args.debug, "xgraph", registries)


if __name__ == "__main__":
    sys.exit(main())
