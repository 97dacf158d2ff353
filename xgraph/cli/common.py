"""What every xgraph command line shares: one error line and exit code 2 for user errors, --version,
consoles that use the full width of a pipe or file, and output paths checked before any work."""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import re
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, TextIO

from xgraph.errors import XGraphError
from xgraph.ir.files import check_target
from xgraph.registries import active, resolve

if TYPE_CHECKING:
    from xgraph.registries import Registries

EXIT_USER_ERROR = 2

#: the cyclic collector's thresholds while a command runs: a command builds a graph of up to millions of
#: long-lived objects, which the default young-generation threshold (700) would re-walk every few thousand
#: allocations. A 100k-op `xcompile` allocates about 3M tracked objects: at mypy's 200k its collections
#: walked 1.2-1.4M of them (0.10-0.14 s of 2.2-2.7 s, `benchmarks/compile_scale.py`), at 1M they walk the
#: ~0.7M of the graph being read once (0.06-0.08 s), with the same max RSS. The library itself never
#: touches the collector.
COLLECTOR_THRESHOLD = (1_000_000, 30, 30)


def tune_collector() -> None:
    """Raise the collector's young-generation threshold for the rest of this command-line process."""
    gc.set_threshold(*COLLECTOR_THRESHOLD)


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


def positive_int(value: str) -> int:
    """A count such as --seeds: an integer from 1 to 1000."""
    try:
        n = int(value) if len(value) < 8 else None
    except ValueError:
        n = None
    if n is None or not 1 <= n <= 1000:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count; give an integer from 1 to 1000")
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


#: Width of tables written to a pipe or file: wide enough that rich never wraps a row.
PIPE_WIDTH = 400


def add_debug_flag(parser: argparse.ArgumentParser) -> None:
    """--debug: show the traceback instead of the one-line error."""
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")


def add_version_flag(parser: argparse.ArgumentParser) -> None:
    """--version: print the xgraph version and exit."""
    from xgraph import __version__
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")


def console(stderr: bool = False, markup: bool = True) -> Any:
    """A rich Console: the terminal's width on a TTY, else (a pipe or a file) no wrapping at 80 columns."""
    from rich.console import Console
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() or os.environ.get("COLUMNS") else PIPE_WIDTH
    # rich writes its colours to the raw stream; names reach it as escaped Text (see `shown`)
    return Console(file=raw_stream(stream), highlight=False, width=width, markup=markup)


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
    check_target(path, flag)  # the rules of every file xgraph writes: regular file or absent, no link


# -- what reaches the terminal -------------------------------------------------------------------
#: C0 controls but newline and tab, DEL, and C1 controls: ESC/OSC/CSI sequences start with these.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def shown(text: object) -> str:
    """`text` safe for a terminal: control characters as \\xNN escapes, lone surrogates as \\udcNN.

    Op, tensor and graph names and paths come from model files; printed raw, an ESC or OSC
    sequence in a name would drive the user's terminal (retitle it, hide text, write links).
    """
    value = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


class _Escaping:
    """A text stream that escapes control characters in everything written to it."""

    def __init__(self, stream: TextIO) -> None:
        self.raw = stream

    def write(self, text: str) -> int:
        self.raw.write(shown(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self.raw, name)


def raw_stream(stream: TextIO) -> TextIO:
    """The stream under an escaping wrapper (for rich, which escapes names itself and writes colours)."""
    return stream.raw if isinstance(stream, _Escaping) else stream


@contextlib.contextmanager
def escaped_output() -> Iterator[None]:
    """Within the block, everything printed to stdout and stderr has its control characters escaped."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _Escaping(raw_stream(sys.stdout)), _Escaping(raw_stream(sys.stderr))
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


class Terminated(BaseException):
    """SIGTERM or SIGHUP reached a command: unwinds like KeyboardInterrupt, so every cleanup runs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


#: The signals a command turns into a clean exit (what `kill` and a closed terminal send).
CLEAN_EXIT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def signals_as_exit() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Terminated` in the main thread, so a write in
    progress removes its temporary files (`xgraph.ir.files`) before the process ends. A second
    signal while that runs is ignored. Only the command-line entry points install this (the
    library never touches process-wide signal handlers); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        for sig in CLEAN_EXIT_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)  # already leaving: let the cleanup finish
        raise Terminated(signum)

    previous = {sig: signal.signal(sig, handler) for sig in CLEAN_EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def run_cli(body: Callable[[], int | None], debug: bool, prog: str, registries: "Registries | None" = None) -> int:
    """Run `body` with escaped output; an XGraphError (or bad input file) becomes one line on stderr, exit code 2.

    Inside `body`, compile, placement and the runners use `registries` (the default ones when None).
    SIGTERM and SIGHUP end it cleanly (`signals_as_exit`), with exit code 128 + the signal's number.
    """
    with escaped_output():
        try:
            with signals_as_exit(), active(resolve(registries)):
                return int(body() or 0)
        except Terminated as e:
            print(f"{prog}: terminated by {signal.Signals(e.signum).name}", file=sys.stderr)
            return 128 + e.signum
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
