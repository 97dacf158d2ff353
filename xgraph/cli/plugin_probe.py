"""`xgraph plugins --check [NAME ...] [--model MODEL]`: probe plugins (import them, check their interface),
dry-run them on a model.

One line per problem, "NAME: problem", with the plugin file's line (where its code raised,
or where the method that returned a bad value is defined); warnings ("NAME: warning: ...")
do not count as problems. Without names, only plugin-path files whose source defines a
top-level ``get_plugin`` are imported; the others are listed as skipped. With --model, one
line per plugin saying what it would take, and each runner the plugin's own files define is
created on the first subgraph it took, so a failing ``__init__`` is named. Exit 1 when any
problem was found, 0 otherwise.
"""
from __future__ import annotations

import sys
from typing import Any

from xgraph.plugins.location import at, code_location, inside
from xgraph.plugins.probe import PluginProbe, probe_plugin

EXIT_PROBLEMS = 1


def runner_registration_problems(probe: PluginProbe) -> list[str]:
    """A problem per mode whose runner name is not registered (after importing the plugin, which may register it)."""
    from xgraph.runners.runner import registered_runners
    registered = registered_runners()
    return [f"get_runner() names runner {name!r} for mode {mode!r}, which is not registered (registered: "
            f"{', '.join(sorted(registered))}); register it with xgraph.register_runner({name!r}, RunnerClass) "
            f"when the plugin is imported{probe.runner_at}" for mode, name in probe.runner.items() if name not in registered]


def probe_all(names: list[str], plugin_path: list[str] | None,
              options: dict[str, Any] | None = None) -> list[PluginProbe]:
    """probe_plugin for each name, plus the runner registration check."""
    probes = []
    for name in names:
        probe = probe_plugin(name, plugin_path, (options or {}).get(name))
        if probe.loaded is not None:
            probe.problems += runner_registration_problems(probe)
        probes.append(probe)
    return probes


def runner_start_problems(probe: PluginProbe, result: dict[str, Any]) -> list[str]:
    """Create each runner the plugin's own files define on the first subgraph it took in the dry run; a problem per
    runner that fails to start, at the line of the plugin that raised."""
    from xgraph.runners.runner import Runner, registered_runners
    if not result["subgraphs"] or probe.loaded is None:
        return []
    roots = probe.loaded.code_roots()
    registered = registered_runners()
    subgraph = result["graph"].get_subgraph(result["subgraphs"][0])
    problems = []
    for mode, name in probe.runner.items():
        file = getattr(sys.modules.get(getattr(registered.get(name), "__module__", "")), "__file__", None)
        if not isinstance(file, str) or not inside(file, roots):
            continue  # built-in or third-party runners are not the plugin's to check
        try:
            Runner.create_runner(subgraph, mode)
        except Exception as e:
            cause = e.__cause__ if e.__cause__ is not None else e
            problems.append(f"runner {name!r} (mode {mode!r}) failed to start on subgraph {subgraph.name!r}: "
                            f"{type(cause).__name__}: {cause}{at(code_location(cause, roots))}")
    return problems


def _options(text: str | None) -> dict[str, Any]:
    from xgraph.compiler.options import parse_options
    if not text:
        return {}
    return {k: dict(v) for k, v in parse_options(text).plugin_options.items()}


def run_probe(names: list[str], plugin_path: list[str] | None, model: str | None, options: str | None) -> int:
    """Check the plugins (every discovered one when `names` is empty) and print the result lines."""
    from xgraph.plugins.loader import discover_plugins
    if not names:
        skipped: list[str] = []
        names = [name for name, _ in discover_plugins(plugin_path, skipped)]
        for path in skipped:
            print(f"skipped {path}: no top-level get_plugin, so not a plugin (not imported)")
    if not names:
        print("no plugins found to check (give NAME ... or --plugin-path DIR)")
        return EXIT_PROBLEMS
    probes = probe_all(names, plugin_path, _options(options))
    problems = 0
    for probe in probes:
        for problem in probe.problems:
            print(f"{probe.name}: {problem}")
            problems += 1
        for warning in probe.warnings:
            print(f"{probe.name}: warning: {warning}")
        if probe.ok:
            runner = ", ".join(f"{m}={n}" for m, n in probe.runner.items())
            declared = f"; options {probe.options}" if probe.options not in ("", "(undeclared)") else ""
            print(f"{probe.name}: ok (device {probe.device}, runner {runner}, memory {probe.memory}{declared}; "
                  f"{probe.source})")
    good = {p.name: p for p in probes if p.ok}
    if model and good:
        from xgraph.compiler.dry_run import dry_run_plugins
        for result in dry_run_plugins(model, list(good), plugin_path, options):
            if not result["ok"]:
                print(f"{result['name']}: on {model}: {result['problem']}")
                problems += 1
                continue
            tried = ", ".join(f"{t['name']} ({t['matches']} match{'es' * (t['matches'] != 1)})"
                              for t in result["templates"])
            print(f"{result['name']}: on {model} would take {result['ops']} op(s) in {len(result['subgraphs'])} "
                  f"subgraph(s) for {result['device']}" + (f"; templates: {tried}" if tried else ""))
            for declined in result.get("declined", []):
                print(f"{result['name']}: on {model} declined subgraph {declined['subgraph']!r} "
                      f"({len(declined['ops'])} op(s)): {declined['reason']}")
            for problem in runner_start_problems(good[result["name"]], result):
                print(f"{result['name']}: on {model}: {problem}")
                problems += 1
    print(f"{len(probes)} plugin(s) checked, {problems} problem(s)")
    return EXIT_PROBLEMS if problems else 0


__all__ = ["probe_all", "run_probe", "runner_registration_problems"]
