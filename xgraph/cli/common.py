"""What every xgraph command line shares: one error line and exit code 2 for user errors."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Callable

from xgraph.errors import XGraphError

EXIT_USER_ERROR = 2


# -- argument types: every command line value is checked here, as argparse reads it -------------
#: Seeds are handed to numpy's generators, which take non-negative integers of up to 128 bits.
MAX_SEED = (1 << 128) - 1


def model_path(value: str) -> str:
    """A MODEL argument: a file name (not empty, not a folder such as `.` or `/`)."""
    if not value or "\0" in value:
        raise argparse.ArgumentTypeError(f"{value!r} is not a model file name; give the path of an .onnx or .xmodel file")
    path = Path(value)
    if not path.name or path.name == ".." or os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value!r} is a folder, not a model file; give the path of an .onnx or "
                                         ".xmodel file")
    return value


def seed(value: str) -> int:
    """A --seed: an integer from 0 to 2**128 - 1."""
    try:
        n = int(value) if len(value) < 50 else None
    except ValueError:
        n = None
    if n is None or not 0 <= n <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"{value!r} is not a seed; give an integer from 0 to 2**128 - 1")
    return n


def tolerance(value: str) -> float:
    """A --rtol/--atol: a finite number >= 0."""
    try:
        x = float(value)
    except ValueError:
        x = math.nan
    if not math.isfinite(x) or x < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a tolerance; give a finite number >= 0 (e.g. 1e-4)")
    return x


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """--debug: show the traceback instead of the one-line error."""
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")


def run_cli(body: Callable[[], int | None], debug: bool, prog: str) -> int:
    """Run `body`; an XGraphError (or bad input file) becomes one line on stderr and exit code 2."""
    try:
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
