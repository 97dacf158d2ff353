"""What every xgraph command line shares: one error line and exit code 2 for user errors."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Callable

from xgraph.errors import XGraphError
from xgraph.registries import active, resolve

if TYPE_CHECKING:
    from xgraph.registries import Registries

EXIT_USER_ERROR = 2


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """--debug: show the traceback instead of the one-line error."""
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")


def run_cli(body: Callable[[], int | None], debug: bool, prog: str, registries: "Registries | None" = None) -> int:
    """Run `body`; an XGraphError (or bad input file) becomes one line on stderr and exit code 2.

    Inside `body`, compile, placement and the runners use `registries` (the default ones when None).
    """
    try:
        with active(resolve(registries)):
            return int(body() or 0)
    except XGraphError as e:
        if debug:
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except (OSError, json.JSONDecodeError) as e:
        if debug:
            raise
        print(f"{prog}: error: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
