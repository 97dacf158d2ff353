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

from xgraph.cli.common import (add_debug_flag, add_version_flag, check_output_path, escaped_output, model_path,
                               raw_stream, run_cli, shown, tune_collector)
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
    add_version_flag(p)
    return p


def _report_writer(path: str | None):
    """The function that writes the report to `path`, checked before compiling; XGraphError if unsupported."""
    if path is None:
        return None
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        from xgraph.compiler.report import write_report
        return lambda compiled, out, model: write_report(compiled, out)
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


def placement_rows(report: dict[str, Any]) -> list[tuple[str, str, int, int, str, str]]:
    """(taken by, device, subgraphs, ops, ops on reference kernels, seconds) per plugin (0 ops included), then per
    device of the built-in placement."""
    reference: dict[str, int] = {}
    for o in report["reference_ops"]:
        reference[o["device"]] = reference.get(o["device"], 0) + 1
    rows = []
    for run in report.get("plugins", []):
        seconds = run.get("seconds")
        rows.append((f"plugin {run['name']}", run["device"], len(run["subgraphs"]), run["ops"], "-",
                     f"{seconds:.3f}" if isinstance(seconds, (int, float)) else ""))
    taken = {name for run in report.get("plugins", []) for name in run["subgraphs"]}
    per_device: dict[str, list[int]] = {}
    for sg in report["subgraphs"]:
        if sg["name"] not in taken:
            entry = per_device.setdefault(sg["device"], [0, 0])
            entry[0] += 1
            entry[1] += len(sg["ops"])
    for device in report["devices"]:  # cheapest first
        if device in per_device:
            n_sg, n_ops = per_device[device]
            rows.append(("placement", device or "(none)", n_sg, n_ops, str(reference.get(device, 0)), ""))
    return rows


def idle_plugin_notes(report: dict[str, Any], model: str) -> list[str]:
    """One line per plugin that took nothing: the templates it tried, and how to see why they missed."""
    notes = []
    for run in report.get("plugins", []):
        if run["ops"]:
            continue
        tried = ", ".join(f"{t['name']} ({t['matches']} match{'es' * (t['matches'] != 1)})"
                          for t in run.get("templates", []))
        what = f"its templates: {tried}" if tried else "it matched no template"
        types = next((t.get("types") for t in run.get("templates", []) if t.get("types")), None) or ["TYPE"]
        notes.append(f"plugin {run['name']!r} took no ops ({what}); `xgraph explain {model} --type {types[0]}` "
                     "with the same --options and --plugin-path says why")
    return notes


def declined_notes(report: dict[str, Any]) -> list[str]:
    """One line per subgraph a plugin declined: its ops went back to placement."""
    return [f"plugin {run['name']!r} declined subgraph {d['subgraph']!r} ({len(d['ops'])} op(s)): {d['reason']}; "
            "placement took its ops" for run in report.get("plugins", []) for d in run.get("declined", [])]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def cost_lines(cost: "dict[str, Any] | None") -> list[str]:
    """The cost model's estimate of the split: latency, throughput, copies; per instance for a cost placement,
    beside first fit's; the note when first fit loses much to copies."""
    if not cost or "chosen" not in cost:
        return []
    chosen = cost["chosen"]
    lines = [f"estimated ({cost.get('placement', 'first_fit')}): latency {_ms(chosen['latency_seconds'])}, "
             f"one job every {_ms(chosen['throughput_seconds'])} when streaming, "
             f"{chosen.get('copy_share', 0.0):.0%} of the time in host/device copies"]
    first = cost.get("first_fit")
    if first:
        lines.append(f"first fit would take: latency {_ms(first['latency_seconds'])}, one job every "
                     f"{_ms(first['throughput_seconds'])}, {first.get('copy_share', 0.0):.0%} in copies")
        for name, entry in chosen["instances"].items():
            capacity = entry.get("capacity")
            memory = f"{entry['memory'] / 2**20:.1f} MiB" + (f" of {capacity / 2**30:.3g} GiB" if capacity else "")
            copies = f"{entry['copies']} cop{'y' if entry['copies'] == 1 else 'ies'}"
            lines.append(f"  {name}: busy {_ms(entry['busy_seconds'])}, {memory}, {copies} ({_ms(entry['copy_seconds'])})")
    if cost.get("assumed_dims"):
        from xgraph.ir.dim_ranges import assumed_text
        lines.append(f"dynamic dims estimated at: {assumed_text(cost['assumed_dims'])}")
    if cost.get("sources"):
        counts = ", ".join(f"{source} {n}" for source, n in cost["sources"].items())
        lines.append(f"unit costs: {counts}" + (f" (table {cost['costs']})" if cost.get("costs") else ""))
    if cost.get("note"):
        lines.append("note: " + cost["note"])
    return lines


def print_summary(report: dict[str, Any], model: str, output: Path, seconds: float) -> None:
    """Who took what (each plugin, then the built-in placement per device), crossings, top fallback reasons.

    Everything taken from the model or the command line (names, paths, reasons) goes in as a
    `Text` with its control characters escaped: never through rich markup, so a name such as
    `[/nz]` prints as itself and an ESC in a name never reaches the terminal.
    """
    from rich.table import Table
    from rich.text import Text

    from xgraph.cli.common import console as make_console
    from xgraph.cli.int8_summary import int8_unit_lines

    def t(value: Any, style: str = "") -> Text:
        return Text(shown(value), style=style)

    console = make_console()
    n_ops, n_sg = len(report["ops"]), len(report["subgraphs"])
    console.print(Text.assemble(t(model, "bold"), " -> ", t(output),
                                f": {n_ops} ops in {n_sg} subgraph(s), {seconds:.2f} s"))
    prep = report.get("prepare") or {}
    if prep.get("folded_ops") or prep.get("dead_ops") or prep.get("cut_ops"):
        console.print(t(f"prepare: {prep.get('folded_ops', 0)} constant op(s) folded into weights, "
                        f"{prep.get('dead_ops', 0)} dead and {prep.get('cut_ops', 0)} cut op(s) removed"))
    table = Table(title="Placement")
    for column in ("taken by", "device", "subgraphs", "ops", "reference kernels", "seconds"):
        table.add_column(column, justify="left" if column in ("taken by", "device") else "right")
    for row in placement_rows(report):
        table.add_row(*(t(v) for v in row))
    console.print(table)
    for note in idle_plugin_notes(report, model) + declined_notes(report):
        console.print(t(note))
    console.print(t(f"host/device crossings: {report['crossings']}"))
    if report.get("dynamic"):
        console.print(t(report["dynamic"]["line"]), soft_wrap=True)
    for line in cost_lines(report.get("cost")):
        console.print(t(line), soft_wrap=True)
    for line in int8_unit_lines(report):
        console.print(t(line), soft_wrap=True)  # one line per device, however wide
    for warning in report.get("warnings", []):
        console.print(t("warning: " + warning))
    if report["unrunnable_ops"]:
        names = ", ".join(o["name"] for o in report["unrunnable_ops"][:5])
        console.print(Text.assemble(t(f"{len(report['unrunnable_ops'])} op(s) nothing on this host can run", "red"),
                                    ": ", t(names)))
    taken = {name for run in report.get("plugins", []) for name in run["subgraphs"]}
    by_plugin = {o["name"] for o in report["ops"] if o["subgraph"] in taken}
    fallbacks = [f for f in report["fallbacks"] if not by_plugin.issuperset(f["ops"])]  # plugins chose, not fell back
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

    from xgraph.ir.files import all_or_nothing
    writer = _report_writer(args.report)
    output = _output_path(args.model, args.output)
    check_output_path("-o", output)  # every target checked before any work: a bad one costs nothing
    check_output_path("--report", args.report)
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
            writer(compiled, args.report, args.model)
    if not args.quiet:
        print_summary(rep, args.model, output, seconds)
        if compiled.get_gears():
            from xgraph.view.text import gear_facts, gear_lines
            lines = gear_lines(compiled, gear_facts(compiled))
            print("\n".join(lines[:-1] + [f"  (the summary above is {compiled.get_gears()[0].name}'s; "
                                           f"xgraph inspect {output} shows every gear)"]))
    return 0


def main(argv: list[str] | None = None, *, registries: "Registries | None" = None) -> int:
    """Entry point of the `xcompile` console script; `registries` default to the default ones."""
    tune_collector()
    with escaped_output():  # argparse echoes unknown arguments, which may carry control characters
        args = build_parser().parse_args(argv)
    return run_cli(lambda: _run(args), args.debug, PROG, registries)


if __name__ == "__main__":
    sys.exit(main())
