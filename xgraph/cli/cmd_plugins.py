"""`xgraph plugins`: the partition plugins, devices and runners this installation can find."""
from __future__ import annotations

import argparse
import os
import sys

from xgraph.cli.common import raw_stream, shown


def add_parser(subparsers) -> None:
    """Register the `plugins` sub-command."""
    p = subparsers.add_parser("plugins", help="list discovered partition plugins, devices and runners",
                              description="List the partition plugins found on the plugin path and as entry "
                              "points, the devices placement can use (cheapest first), and the registered runners.")
    p.add_argument("--plugin-path", action="append", default=[], metavar="DIR",
                   help=f"directory to look for plugins in (repeatable, or {os.pathsep!r}-separated)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the three tables."""
    from rich.console import Console
    from rich.table import Table

    from xgraph.plugins.loader import discover_plugins, plugin_search_path
    from xgraph.registries import resolve
    registries = resolve(None)  # the command's registries (see xgraph.cli.common.run_cli)

    plugin_path = [d for entry in args.plugin_path for d in entry.split(os.pathsep) if d] or None
    console = Console(file=raw_stream(sys.stdout), highlight=False, markup=False)  # names print as they are

    plugins = Table(title="Partition plugins")
    plugins.add_column("name")
    plugins.add_column("found at", overflow="fold")
    found = discover_plugins(plugin_path)
    for name, source in found:
        plugins.add_row(shown(name), shown(source))
    console.print(plugins if found else shown("No partition plugins found (searched entry points and "
                  f"{os.pathsep.join(plugin_search_path(plugin_path)) or 'no plugin path'})."))

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
