"""`xcompile`: compile a model into device subgraphs, print why each op went where, write the .xmodel.

    xcompile MODEL.onnx [-o OUT.xmodel] [--options JSON] [--plugin-path DIR] [--report OUT.json|OUT.html]

A thin CLI: parse arguments, call `xgraph.compile`, print the summary, write the files.
User errors (bad options, unknown plugin, missing or damaged file) print one line and exit 2.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from xgraph.cli.common import add_debug_flag, escaped_output, model_path, raw_stream, run_cli, shown
from xgraph.errors import XGraphError

if TYPE_CHECKING:
    from xgraph.registries import Registries

PROG = "xcompile"
#: The progress bar appears only when compiling takes longer than this (seconds).
PROGRESS_DELAY = 1.0
#: How many fallback reasons the summary lists.
TOP_REASONS = 8


def build_parser() -> argparse.ArgumentParser:
    """The argument parser."""
    p = argparse.ArgumentParser(prog=PROG, description="Partition an ONNX model into device subgraphs "
                                "(AI Core, AI CPU, DVPP, CPU and plugin devices) and write an .xmodel.")
    p.add_argument("model", type=model_path, help="the model to compile (.onnx, or an .xmodel to compile again)")
    p.add_argument("-o", "--output", help="the .xmodel to write (default: MODEL.xmodel next to the input)")
    p.add_argument("--options", help='compile options as a JSON object, e.g. \'{"plugins": "a,b", '
                   '"devices": "aicore,cpu", "fallback": "error", "input_shape": "x:1,3,224,224"}\'')
    p.add_argument("--plugin-path", action="append", default=[], metavar="DIR",
                   help=f"directory to find plugins in (repeatable, or {os.pathsep!r}-separated); "
                   "XGRAPH_PLUGIN_PATH is searched too")
    p.add_argument("--report", metavar="OUT.json|OUT.html", help="write the placement report")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")
    add_debug_flag(p)
    return p


def _report_writer(path: str | None):
    """The function that writes the report to `path`, checked before compiling; XGraphError if unsupported."""
    if path is None:
        return None
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        from xgraph.compiler.report import write_report
        return write_report
    if suffix in (".html", ".htm"):
        from xgraph.view.report_html import write_html_report
        return write_html_report
    raise XGraphError(f"--report {path}: unknown report format {suffix or '(no suffix)'!r}; use .json or .html")


def _output_path(model: str, output: str | None) -> Path:
    if output:
        return Path(output)
    src = Path(model)
    out = src.with_suffix(".xmodel")
    return out.with_name(f"{src.stem}.compiled.xmodel") if out == src else out


class _ProgressBar:
    """A rich progress bar on stderr, shown only on a TTY and only once compiling outlasts PROGRESS_DELAY."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self._lock = threading.Lock()
        self._progress: Any = None
        self._task: Any = None
        self._timer: threading.Timer | None = None
        self._state = ("load", 0, 1)

    def __call__(self, stage: str, index: int, total: int) -> None:
        if not self.enabled:
            return
        with self._lock:
            self._state = (stage, index, total)
            if self._progress is None and self._timer is None:
                self._timer = threading.Timer(PROGRESS_DELAY, self._start)
                self._timer.daemon = True
                self._timer.start()
            elif self._progress is not None:
                self._progress.update(self._task, description=stage, completed=index, total=total)

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
        with self._lock:
            if self._timer is None:
                return  # closed meanwhile
            stage, index, total = self._state
            self._progress = Progress(TextColumn("compiling: {task.description:<10}"), BarColumn(),
                                      TimeElapsedColumn(), console=Console(file=raw_stream(sys.stderr)),
                                      transient=True)
            self._progress.start()
            self._task = self._progress.add_task(stage, completed=index, total=total)

    def close(self) -> None:
        """Stop the timer and remove the bar."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._progress is not None:
                self._progress.stop()
                self._progress = None


def print_summary(report: dict[str, Any], model: str, output: Path, seconds: float) -> None:
    """The device table, crossings and the most common fallback reasons, printed with rich.

    Everything taken from the model or the command line (names, paths, reasons) goes in as a
    `Text` with its control characters escaped: never through rich markup, so a name such as
    `[/nz]` prints as itself and an ESC in a name never reaches the terminal.
    """
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table
    from rich.text import Text

    def t(value: Any, style: str = "") -> Text:
        return Text(shown(value), style=style)

    console = Console(file=raw_stream(sys.stdout), highlight=False)
    n_ops, n_sg = len(report["ops"]), len(report["subgraphs"])
    console.print(Text.assemble(t(model, "bold"), " -> ", t(output),
                                f": {n_ops} ops in {n_sg} subgraph(s), {seconds:.2f} s"))
    prep = report.get("prepare") or {}
    if prep.get("folded_ops") or prep.get("dead_ops") or prep.get("cut_ops"):
        console.print(t(f"prepare: {prep.get('folded_ops', 0)} constant op(s) folded into weights, "
                        f"{prep.get('dead_ops', 0)} dead and {prep.get('cut_ops', 0)} cut op(s) removed"))
    table = Table(title="Placement")
    for column in ("device", "subgraphs", "ops", "reference kernels"):
        table.add_column(column, justify="left" if column == "device" else "right")
    reference: dict[str, int] = {}
    for o in report["reference_ops"]:
        reference[o["device"]] = reference.get(o["device"], 0) + 1
    for device, counts in report["devices"].items():
        table.add_row(t(device or "(none)"), str(counts["subgraphs"]), str(counts["ops"]),
                      str(reference.get(device, 0)))
    console.print(table)
    console.print(t(f"host/device crossings: {report['crossings']}"))
    for warning in report.get("warnings", []):
        console.print(t("warning: " + warning))
    if report["unrunnable_ops"]:
        names = ", ".join(o["name"] for o in report["unrunnable_ops"][:5])
        console.print(Text.assemble(t(f"{len(report['unrunnable_ops'])} op(s) nothing on this host can run", "red"),
                                    ": ", t(names)))
    fallbacks = report["fallbacks"]
    if fallbacks:
        reasons = Table(title=f"Why ops did not get the cheapest device (top {min(TOP_REASONS, len(fallbacks))} "
                              f"of {len(fallbacks)})")
        reasons.add_column("ops", justify="right")
        reasons.add_column("device")
        reasons.add_column("reason", overflow="fold")
        reasons.add_column("e.g.")
        for f in fallbacks[:TOP_REASONS]:
            reasons.add_row(str(f["count"]), t(f["device"]), t(f["reason"]), t(f["ops"][0]))
        console.print(reasons)


def _run(args: argparse.Namespace) -> int:
    import xgraph
    from xgraph.compiler.report import report as make_report

    from xgraph.ir.files import all_or_nothing, check_target
    writer = _report_writer(args.report)
    output = _output_path(args.model, args.output)
    check_target(output, "-o")  # every target checked before any work: a bad one costs nothing
    if args.report is not None:
        check_target(args.report, "--report")
    plugin_path = [d for entry in args.plugin_path for d in entry.split(os.pathsep) if d]
    bar = _ProgressBar(enabled=not args.quiet and sys.stderr.isatty())
    start = time.perf_counter()
    try:
        compiled = xgraph.compile(args.model, args.options, plugin_path or None, progress=bar)
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    rep = make_report(compiled)
    with all_or_nothing():  # the .xmodel and the report are replaced together, or neither is
        compiled.serialize(output)
        if writer is not None:
            writer(compiled, args.report)
    if not args.quiet:
        print_summary(rep, args.model, output, seconds)
    return 0


def main(argv: list[str] | None = None, *, registries: "Registries | None" = None) -> int:
    """Entry point of the `xcompile` console script; `registries` default to the default ones."""
    with escaped_output():  # argparse echoes unknown arguments, which may carry control characters
        args = build_parser().parse_args(argv)
    return run_cli(lambda: _run(args), args.debug, PROG, registries)


if __name__ == "__main__":
    sys.exit(main())
