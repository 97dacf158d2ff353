"""Probing a partition plugin before it runs (`xgraph plugins --check`): import it, call its interface, list
every problem.

`probe_plugin(name)` does what the chain does up to (not including) `partition`: resolve and
import the module, call ``get_plugin()`` (``get_plugin({})`` when it takes options), then
check that the object has all five methods, and call ``get_plugin_name``, ``get_device``,
``get_runner`` and ``get_memory`` checking each result. Unlike the chain it does not stop at
the first problem: it returns every problem it can find, each one line, with the file and
line of the plugin's code: where it raised, else where the method that returned the bad
value is defined. It also checks the options the module declares (`get_options()`, against
the given ones) and warns about template op types nothing knows. Whether the runner names it
declares are registered, and whether its runners can be made, is the caller's to check (the
runner registry lives above this layer), from `PluginProbe.runner`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xgraph.errors import PluginError, XGraphError
from xgraph.plugins.base import RUNNER_MODES
from xgraph.plugins.loader import LoadedPlugin, load_plugin
from xgraph.devices import get_devices
from xgraph.plugins.location import at, code_location, defined_at
from xgraph.plugins.settings import apply_options, declared_options, describe_options
from xgraph.plugins.template_types import op_types_of, templates_held, unknown_type_warnings

#: The methods every plugin object must have (get_memory is optional, with "device" as default).
METHODS = ("get_plugin_name", "get_device", "get_runner", "partition", "compile")


@dataclass
class PluginProbe:
    """What probing one plugin found: where it came from, what it declared, and its problems."""

    name: str
    source: str = ""
    plugin_name: str = ""
    device: str = ""
    runner: dict[str, str] = field(default_factory=dict)
    memory: str = ""
    problems: list[str] = field(default_factory=list)
    loaded: LoadedPlugin | None = None
    options: str = ""  # the declared options, described (`describe_options`)
    runner_at: str = ""  # " at path:line" of its get_runner, for problems about the runners it names
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


def _call(probe: PluginProbe, what: str, func: Any, *args: Any) -> tuple[bool, Any]:
    """(True, result) of func(*args), or (False, None) with the exception recorded as a located problem."""
    try:
        return True, func(*args)
    except Exception as e:
        roots = probe.loaded.code_roots() if probe.loaded is not None else []
        probe.problems.append(f"{what} raised {type(e).__name__}: {e}{at(code_location(e, roots))}")
        return False, None


def _at(func: Any) -> str:
    """" at path:line" of where `func` (a plugin method or get_plugin) is defined, when known."""
    return at(defined_at(func)) if func is not None else ""


def runner_problems(runner: Any) -> list[str]:
    """What is wrong with a get_runner() result (shape only; registration is checked by the caller)."""
    if not isinstance(runner, dict):
        return [f"get_runner() returned a {type(runner).__name__}; return a dict of mode -> runner name such as "
                '{"run": "cpu"}']
    problems = [f"get_runner() maps {k!r} to {v!r}; map mode names to non-empty runner names"
                for k, v in runner.items() if not isinstance(k, str) or not isinstance(v, str) or not v]
    unknown = sorted(str(k) for k in set(runner) - set(RUNNER_MODES))
    if unknown:
        problems.append(f"get_runner() has unknown mode(s) {unknown}; valid modes are {list(RUNNER_MODES)}")
    if "run" not in runner:
        problems.append("get_runner() has no 'run' entry; every plugin needs a 'run' runner")
    return problems


def probe_plugin(name: str, plugin_path: list[str] | None = None, options: dict[str, Any] | None = None) -> PluginProbe:
    """Import plugin `name` and check its interface; every problem found, one line each."""
    from xgraph.plugins.chain import takes_options
    probe = PluginProbe(name)
    try:
        probe.loaded = load_plugin(name, plugin_path)
    except PluginError as e:
        probe.problems.append(str(e))
        return probe
    probe.source = probe.loaded.source
    factory = probe.loaded.get_plugin
    given = dict(options or {})
    try:
        schema = declared_options(name, probe.loaded.module)
        if schema is not None:
            given = apply_options(name, schema, given)
        probe.options = describe_options(schema)
    except XGraphError as e:
        probe.problems.append(str(e))
        return probe
    except Exception as e:  # get_options() itself raised
        probe.problems.append(f"get_options() raised {type(e).__name__}: {e}"
                              f"{at(code_location(e, probe.loaded.code_roots()))}")
        return probe
    if takes_options(factory):
        ok, plugin = _call(probe, "get_plugin(options)", factory, given)
    else:
        ok, plugin = _call(probe, "get_plugin()", factory)
    held = templates_held(probe.loaded.module, plugin if ok and not isinstance(plugin, type) else None)
    probe.warnings = unknown_type_warnings(name, op_types_of(held))
    if not ok:
        return probe
    if isinstance(plugin, type):
        probe.problems.append(f"get_plugin() returned the class {plugin.__name__}; return an instance: "
                              f"{plugin.__name__}(){_at(factory)}")
        return probe
    _probe_interface(probe, plugin)
    return probe


def _probe_interface(probe: PluginProbe, plugin: Any) -> None:
    """Call the plugin's get_* methods, recording what they declare and every problem, located."""
    missing = [m for m in METHODS if not callable(getattr(plugin, m, None))]
    if missing:
        probe.problems.append(f"get_plugin() returned a {type(plugin).__name__} without {', '.join(missing)}; "
                              f"return an instance of a subclass of xgraph.plugins.Plugin{_at(type(plugin))}")
    if "get_plugin_name" not in missing:
        ok, value = _call(probe, "get_plugin_name()", plugin.get_plugin_name)
        if ok and (not isinstance(value, str) or not value):
            probe.problems.append(f"get_plugin_name() returned {value!r}; return a non-empty str"
                                  f"{_at(plugin.get_plugin_name)}")
        elif ok:
            probe.plugin_name = value
    if "get_device" not in missing:
        ok, value = _call(probe, "get_device()", plugin.get_device)
        if ok and (not isinstance(value, str) or not value.strip()):
            probe.problems.append(f"get_device() returned {value!r}; return a non-empty device name such as 'NPU'"
                                  f"{_at(plugin.get_device)}")
        elif ok:
            probe.device = value
    if "get_runner" not in missing:
        ok, value = _call(probe, "get_runner()", plugin.get_runner)
        if ok:
            shape = runner_problems(value)
            probe.problems += [problem + _at(plugin.get_runner) for problem in shape]
            if not shape:
                probe.runner = dict(value)
                probe.runner_at = _at(plugin.get_runner)
    memory = getattr(plugin, "get_memory", None)
    if callable(memory):
        ok, value = _call(probe, "get_memory()", memory)
        if ok and value is None:  # the default: where its device lives (host for "CPU"), else device memory
            spec = get_devices().get(probe.device) if isinstance(probe.device, str) else None
            probe.memory = spec.memory if spec is not None else "device"
        elif ok and value not in ("device", "host"):
            probe.problems.append(f"get_memory() returned {value!r}; return 'device', 'host' or None (as its device)"
                                  f"{_at(memory)}")
        elif ok:
            probe.memory = value
    else:
        probe.memory = "device"


__all__ = ["METHODS", "PluginProbe", "probe_plugin", "runner_problems"]
