"""`xgraph plugins`: the partition plugins (with their device and runner), devices and runners this
installation can find; `--check` imports and checks plugins (`xgraph.cli.plugin_probe`)."""
from __future__ import annotations

import argparse
import os

from xgraph.cli.common import shown

from xgraph.errors import XGraphError


def add_parser(subparsers) -> None:
    """Register the `plugins` sub-command."""
    p = subparsers.add_parser("plugins", help="list discovered partition plugins, devices and runners",
                              description="List the partition plugins found on the plugin path and as entry "
                              "points, the devices placement can use (cheapest first), and the registered runners.")
    p.add_argument("names", nargs="*", metavar="NAME", help="with --check: the plugins to check (default: every "
                   "plugin found)")
    p.add_argument("--plugin-path", action="append", default=[], metavar="DIR",
                   help=f"directory to look for plugins in, or a plugin .py file (repeatable, or "
                   f"{os.pathsep!r}-separated)")
    p.add_argument("--check", action="store_true", help="import each plugin and check its interface (methods, "
                   "device, memory, registered runners); exit 1 naming each problem")
    p.add_argument("--model", metavar="MODEL", help="with --check: dry-run the plugins on this model and say what "
                   "each would take")
    p.add_argument("--options", metavar="JSON", help='with --check --model: compile options, for "plugin_options"')
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the three tables, or with --check the problems found."""
    from rich.table import Table
    from rich.text import Text

    from xgraph.cli.common import console as make_console
    from xgraph.plugins.loader import discover_plugins, plugin_search_path
    from xgraph.registries import resolve
    registries = resolve(None)  # the command's registries (see xgraph.cli.common.run_cli)

    plugin_path = [d for entry in args.plugin_path for d in entry.split(os.pathsep) if d] or None
    if args.check or args.model:
        from xgraph.cli.plugin_probe import run_probe
        return run_probe(args.names, plugin_path, args.model, args.options)
    if args.names:
        raise XGraphError("plugin names are for --check: xgraph plugins --check NAME ...")
    from xgraph.cli.plugin_probe import probe_all
    console = make_console(markup=False)  # names print as they are

    plugins = Table(title="Partition plugins")
    for column in ("name", "device", "runner", "options", "status", "found at"):
        plugins.add_column(column, overflow="fold")
    found = discover_plugins(plugin_path)
    for (name, source), probe in zip(found, probe_all([n for n, _ in found], plugin_path)):
        runner = ", ".join(f"{m}={n}" for m, n in probe.runner.items())
        status = "ok" if probe.ok else f"{len(probe.problems)} problem(s): xgraph plugins --check {name}"
        plugins.add_row(*(Text(shown(v)) for v in (name, probe.device, runner, probe.options or "-", status, source)))
    console.print(plugins if found else Text(shown("No partition plugins found (searched entry points and "
                  f"{os.pathsep.join(plugin_search_path(plugin_path)) or 'no plugin path'}).")))

    devices = Table(title="Devices (placement tries them cheapest first)")
    for column in ("device", "cost rank", "memory", "runner", "op-info entries", "source"):
        devices.add_column(column, overflow="fold")
    for spec in registries.devices.values():
        runner = ", ".join(f"{mode}={name}" for mode, name in spec.runner.items()) or "-"
        entries = str(len(spec.ops.rules)) + (" + any op" if spec.ops.any_op is not None else "")
        devices.add_row(shown(spec.name), str(spec.cost_rank), shown(spec.memory), shown(runner), entries,
                        shown(spec.source))
    console.print(devices)

    runners = Table(title="Runners")
    runners.add_column("name")
    runners.add_column("class", overflow="fold")
    for name, cls in sorted(registries.runners.items()):
        runners.add_row(shown(name), shown(f"{cls.__module__}.{cls.__qualname__}"))
    console.print(runners)
    return 0
