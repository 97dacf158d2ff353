"""A plugin's declared settings: read its `get_options()`, check the user's values against it.

A plugin module may define ``get_options()`` beside ``get_plugin()``, returning a list of
`xgraph.plugins.PluginOption`. The chain then checks ``{"plugin_options": {"name": {...}}}``
before the plugin is made: a key it does not declare is an error with a "did you mean", a
value of the wrong type is an error naming the option and the type, a missing key gets its
default (or is an error when the option is required). The plugin's ``get_plugin(options)``
receives the complete, checked dict, and the compiled graph records it ("plugin_runs").
A module without ``get_options()`` gets the user's dict as given, unchecked.

    >>> from xgraph.plugins.base import PluginOption
    >>> schema = [PluginOption("types", str, "Softmax", "op types to take")]
    >>> apply_options("sm", schema, {})
    {'types': 'Softmax'}
"""
from __future__ import annotations

import difflib
from types import ModuleType
from typing import Any

from xgraph.errors import OptionError, PluginError
from xgraph.plugins.base import PluginOption

#: The JSON types a declared option may have (what json.loads produces, plus float accepting an int).
_JSON_TYPES = (str, int, float, bool, list, dict)


def declared_options(name: str, module: ModuleType | None, call: Any = None) -> list[PluginOption] | None:
    """The plugin module's `get_options()` checked, or None when it declares none.

    `call(what, func)` runs plugin code (the chain's wrapper that names the plugin); plain call when None.
    """
    getter = getattr(module, "get_options", None) if module is not None else None
    if getter is None:
        return None
    if not callable(getter):
        raise PluginError(f"plugin {name!r}: get_options is a {type(getter).__name__}, not a function; define "
                          "`def get_options(): return [PluginOption(...), ...]`")
    schema = call("get_options()", getter) if call is not None else getter()
    if not isinstance(schema, (list, tuple)) or not all(isinstance(o, PluginOption) for o in schema):
        raise PluginError(f"plugin {name!r}: get_options() returned {schema!r:.80}; return a list of "
                          "xgraph.plugins.PluginOption")
    seen: set[str] = set()
    for option in schema:
        if not isinstance(option.name, str) or not option.name or option.name in seen:
            raise PluginError(f"plugin {name!r}: get_options() declares option {option.name!r} "
                              f"{'twice' if option.name in seen else 'without a usable name'}; name each option once")
        if option.type not in _JSON_TYPES:
            raise PluginError(f"plugin {name!r}: option {option.name!r} has type {option.type!r}; use one of "
                              f"{', '.join(t.__name__ for t in _JSON_TYPES)}")
        if not option.required and option.default is not None and not _fits(option.default, option.type):
            raise PluginError(f"plugin {name!r}: option {option.name!r} defaults to {option.default!r}, which is "
                              f"not {_a(option.type)}; fix the default in get_options()")
        seen.add(option.name)
    return list(schema)


def _a(expected: type) -> str:
    name = expected.__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def _fits(value: Any, expected: type) -> bool:
    if expected is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def apply_options(name: str, schema: list[PluginOption], given: dict[str, Any]) -> dict[str, Any]:
    """The plugin's settings: `given` checked against `schema`, with defaults for what it leaves out."""
    names = [o.name for o in schema]
    unknown = [k for k in given if k not in names]
    if unknown:
        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(str(k), names, 1)) else repr(k)
                 for k in unknown]
        declared = ", ".join(names) or "none"
        raise OptionError(f"plugin_options for plugin {name!r}: unknown option(s) {', '.join(hints)}; "
                          f"plugin {name!r} takes: {declared} (see `xgraph plugins`)")
    values: dict[str, Any] = {}
    for option in schema:
        if option.name not in given:
            if option.required:
                raise OptionError(f"plugin_options for plugin {name!r}: option {option.name!r} is required "
                                  f"({option.help or option.type.__name__}); give it in \"plugin_options\"")
            values[option.name] = option.default
            continue
        value = given[option.name]
        if not _fits(value, option.type):
            raise OptionError(f"plugin_options for plugin {name!r}: option {option.name!r} is "
                              f"{type(value).__name__} {value!r:.60}; expected {_a(option.type)}"
                              f"{f' ({option.help})' if option.help else ''}")
        values[option.name] = float(value) if option.type is float else value
    return values


def describe_options(schema: list[PluginOption] | None) -> str:
    """"types: str = 'Softmax' (op types to take); ..." for listings; "-" when none is declared."""
    if schema is None:
        return "(undeclared)"
    if not schema:
        return "-"
    return "; ".join(f"{o.name}: {o.type.__name__}" + (" (required)" if o.required else f" = {o.default!r}")
                     + (f" ({o.help})" if o.help else "") for o in schema)


__all__ = ["apply_options", "declared_options", "describe_options"]
