"""What every xgraph command line shares: one error line and exit code 2 for user errors, --version,
consoles that use the full width of a pipe or file, and output paths checked before any work."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable

from xgraph.errors import XGraphError

EXIT_USER_ERROR = 2


#: Width of tables written to a pipe or file: wide enough that rich never wraps a row.
PIPE_WIDTH = 400


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """--debug: show the traceback instead of the one-line error."""
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """--version: print the xgraph version and exit."""
    from xgraph import __version__
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


def console(stderr: bool = False) -> Any:
    """A rich Console: the terminal's width on a TTY, else (a pipe or a file) no wrapping at 80 columns."""
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    return Console(highlight=False, stderr=stderr, width=width)


def check_output_path(flag: str, path: "str | os.PathLike | None") -> None:
    """Fail before any work when `path` (given with `flag`) cannot be written: no folder, a folder, not writable."""
    if path is None:
        return
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise XGraphError(f"{flag} {path}: is a folder; give a file name")
    if not folder.is_dir():
        raise XGraphError(f"{flag} {path}: folder {str(folder)!r} does not exist; create it or choose another path")
    if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise XGraphError(f"{flag} {path}: not writable; choose another path")


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
