"""`xgraph plugins --check [NAME ...] [--model MODEL]`: import and check plugins, dry-run them on a model.

One line per problem, "NAME: problem", with the plugin file's line when its own code raised;
then, with --model, one line per plugin saying what it would take. Exit 1 when any problem
was found, 0 otherwise.
"""
from __future__ import annotations

from typing import Any

from xgraph.plugins.check import PluginCheck, check_plugin

EXIT_PROBLEMS = 1


def runner_registration_problems(check: PluginCheck) -> list[str]:
    """A problem per mode whose runner name is not registered (after importing the plugin, which may register it)."""
    from xgraph.runners.runner import registered_runners
    registered = registered_runners()
    return [f"get_runner() names runner {name!r} for mode {mode!r}, which is not registered (registered: "
            f"{', '.join(sorted(registered))}); register it with xgraph.register_runner({name!r}, RunnerClass) "
            "when the plugin is imported" for mode, name in check.runner.items() if name not in registered]


def check_all(names: list[str], plugin_path: list[str] | None,
              options: dict[str, Any] | None = None) -> list[PluginCheck]:
    """check_plugin for each name, plus the runner registration check."""
    checks = []
    for name in names:
        check = check_plugin(name, plugin_path, (options or {}).get(name))
        if check.loaded is not None:
            check.problems += runner_registration_problems(check)
        checks.append(check)
    return checks


def _options(text: str | None) -> dict[str, Any]:
    from xgraph.compiler.options import parse_options
    if not text:
        return {}
    return {k: dict(v) for k, v in parse_options(text).plugin_options.items()}


def run_check(names: list[str], plugin_path: list[str] | None, model: str | None, options: str | None) -> int:
    """Check the plugins (every discovered one when `names` is empty) and print the result lines."""
    from xgraph.plugins.loader import discover_plugins
    if not names:
        names = [name for name, _ in discover_plugins(plugin_path)]
    if not names:
        print("no plugins found to check (give NAME ... or --plugin-path DIR)")
        return EXIT_PROBLEMS
    checks = check_all(names, plugin_path, _options(options))
    problems = 0
    for check in checks:
        for problem in check.problems:
            print(f"{check.name}: {problem}")
            problems += 1
        if check.ok:
            runner = ", ".join(f"{m}={n}" for m, n in check.runner.items())
            print(f"{check.name}: ok (device {check.device}, runner {runner}, memory {check.memory}; {check.source})")
    good = [c.name for c in checks if c.ok]
    if model and good:
        from xgraph.compiler.dry_run import dry_run_plugins
        for result in dry_run_plugins(model, good, plugin_path, options):
            if not result["ok"]:
                print(f"{result['name']}: on {model}: {result['problem']}")
                problems += 1
                continue
            tried = ", ".join(f"{t['name']} ({t['matches']} match{'es' * (t['matches'] != 1)})"
                              for t in result["templates"])
            print(f"{result['name']}: on {model} would take {result['ops']} op(s) in {len(result['subgraphs'])} "
                  f"subgraph(s) for {result['device']}" + (f"; templates: {tried}" if tried else ""))
    print(f"{len(checks)} plugin(s) checked, {problems} problem(s)")
    return EXIT_PROBLEMS if problems else 0


__all__ = ["check_all", "run_check", "runner_registration_problems"]
