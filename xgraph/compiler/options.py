"""Compile options: the JSON object `xcompile --options` and `xgraph.compile(options=...)` take.

`parse_options` validates everything before the graph is touched, so a bad option changes
nothing. Unknown keys name the valid ones; bad values name the expected form.

    >>> parse_options('{"devices": "aicore,cpu", "input_shape": "ids:1,16"}').input_shape
    {'ids': (1, 16)}
"""
from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from xgraph.compiler.gears import GEAR_OPTIONS, MAX_DIM, Gears, format_gears, gear_shapes, parse_gear_options
from xgraph.devices import parse_bytes
from xgraph.errors import OptionError

#: ATC's precision modes (the default keeps every op in its original dtype).
PRECISION_MODES = ("must_keep_origin_dtype", "allow_fp32_to_fp16", "force_fp16")
#: What happens to an op no accelerator accepts: the host runs it, or compilation fails.
FALLBACKS = ("cpu", "error")
OPTION_KEYS = ("plugins", "devices", "fallback", "output_ops", "min_subgraph_ops", "precision_mode", "input_shape",
               "plugin_options", "strict_plugins", "external_data_threshold", "placement", "costs") + GEAR_OPTIONS
#: How placement decides: first fit by op-info (cheapest device that accepts), or by cost for one objective.
PLACEMENTS = ("first_fit", "latency", "throughput")
_EXAMPLE = '{"plugins": "a,b", "devices": "aicore,aicpu,cpu", "input_shape": "input_ids:1,16"}'


@dataclass(frozen=True)
class CompileOptions:
    """Validated compile options (defaults are what an empty options object means)."""

    plugins: tuple[str, ...] = ()
    devices: tuple[str, ...] | None = None  # None: every registered device
    fallback: str = "cpu"
    output_ops: tuple[str, ...] = ()
    min_subgraph_ops: int = 1
    precision_mode: str = "must_keep_origin_dtype"
    input_shape: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    #: the dims input_shape gives as ranges ("0..2048"): {input: {dim index: (low, high)}}, high -1 = unbounded;
    #: those dims are -1 in input_shape (they stay dynamic)
    input_shape_ranges: Mapping[str, Mapping[int, tuple[int, int]]] = field(default_factory=dict)
    plugin_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # plugin name -> its settings
    #: A plugin declining a subgraph (`xgraph.plugins.Decline`) fails the compile instead of handing it back.
    strict_plugins: bool = False
    #: Weights adding up to more than this many bytes are saved in a side file next to the
    #: .xmodel (None: the default of `xgraph.ir.onnx.xmodel`, 256 MiB; always past 2 GiB).
    external_data_threshold: int | None = None
    gear_option: str = ""  # which of GEAR_OPTIONS was given ("" = none)
    gears: Gears = ()  # its gears: the values of input_shape's -1 dims, one tuple per gear
    #: "devices" in its object form: {device: {setting: value}} (xgraph.devices.settings)
    device_settings: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    placement: str = "first_fit"
    #: the measured cost table's path ("" = none) and the table, read and checked when the options are parsed
    costs: str = ""
    cost_table: Any = field(default=None, compare=False, repr=False)

    def gear_shapes(self) -> list[dict[str, tuple[int, ...]]]:
        """Each gear's fully static input_shape (empty without a gear option)."""
        return gear_shapes(self.input_shape, self.gears, self.gear_option) if self.gears else []

    def to_dict(self) -> dict[str, Any]:
        """The options in their JSON form (what `parse_options` reads back to the same value)."""
        out: dict[str, Any] = {"fallback": self.fallback, "min_subgraph_ops": self.min_subgraph_ops,
                               "precision_mode": self.precision_mode}
        if self.plugins:
            out["plugins"] = ",".join(self.plugins)
        if self.devices is not None:
            out["devices"] = ",".join(self.devices)
        elif self.device_settings:
            out["devices"] = {name: dict(entry) for name, entry in self.device_settings.items()}
        if self.placement != "first_fit":
            out["placement"] = self.placement
        if self.costs:
            out["costs"] = self.costs
        if self.output_ops:
            out["output_ops"] = ",".join(self.output_ops)
        if self.input_shape:
            out["input_shape"] = format_input_shape(self.input_shape, self.input_shape_ranges)
        if self.plugin_options:
            out["plugin_options"] = {name: dict(value) for name, value in self.plugin_options.items()}
        if self.strict_plugins:
            out["strict_plugins"] = True
        if self.external_data_threshold is not None:
            out["external_data_threshold"] = self.external_data_threshold
        if self.gears:
            out[self.gear_option] = format_gears(self.gear_option, self.gears)
        return out

    def to_json(self) -> str:
        """`to_dict` as a JSON string (the graph's "compile_options" attr)."""
        return json.dumps(self.to_dict(), sort_keys=True)


def _bad(key: str, value: Any, expected: str) -> OptionError:
    return OptionError(f"option {key!r} has invalid value {value!r}: expected {expected}")


def _names(key: str, value: Any, expected: str) -> tuple[str, ...]:
    """A comma-separated string or a list of strings, as a tuple of stripped names."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
        if value.strip() == "":
            return ()
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise _bad(key, value, expected)
    if any(not v for v in items):
        raise _bad(key, value, f"{expected} (an empty name is not allowed)")
    if len(set(items)) != len(items):
        dup = sorted({v for v in items if items.count(v) > 1})
        raise _bad(key, value, f"{expected}, each name once (repeated: {', '.join(dup)})")
    return tuple(items)


def parse_input_shape(value: Any) -> dict[str, tuple[int, ...]]:
    """ATC's "name:1,16;mask:1,16" (or {"name": [1, 16]}) as {name: dims}; -1 keeps a dim as it is, and
    so does a range ("0..2048", ATC's "0~2048"; `parse_input_shape_ranges` reads those)."""
    return {name: tuple(-1 if isinstance(d, tuple) else d for d in dims)
            for name, dims in _parse_shape_dims(value).items()}


def parse_input_shape_ranges(value: Any) -> dict[str, dict[int, tuple[int, int]]]:
    """The ranges of an input_shape value: {name: {dim index: (low, high)}} (high -1: unbounded).

    >>> parse_input_shape_ranges("ids:1,1;past:1,2,0..2048,8")
    {'past': {2: (0, 2048)}}
    """
    out: dict[str, dict[int, tuple[int, int]]] = {}
    for name, dims in _parse_shape_dims(value).items():
        ranges = {i: d for i, d in enumerate(dims) if isinstance(d, tuple)}
        if ranges:
            out[name] = ranges
    return out


def _range(text: Any) -> tuple[int, int] | None:
    """"lo..hi" / "lo~hi" (ATC) as (lo, hi), hi -1 meaning unbounded; None when `text` is not a range."""
    if not isinstance(text, str):
        return None
    for sep in ("..", "~"):
        lo, found, hi = text.partition(sep)
        if found:
            try:
                low, high = int(lo), int(hi)
            except ValueError:
                return None
            return (low, high) if low >= 0 and (high == -1 or high >= low) else None
    return None


def _parse_shape_dims(value: Any) -> dict[str, tuple]:
    """{name: dims} with each dim an int >= -1 or a (low, high) range; OptionError naming the bad part."""
    expected = ('"name:d0,d1,...;name2:..." with integer dims (-1 keeps a dim) or ranges (0..2048, ATC\'s 0~2048; '
                '-1 as the high end: unbounded), e.g. "input_ids:1,16;attention_mask:1,16"')
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, str):
        pairs = []
        for part in (p.strip() for p in value.split(";")):
            if not part:
                continue
            name, sep, dims = part.rpartition(":")
            if not sep or not name.strip():
                raise _bad("input_shape", value, expected)
            pairs.append((name.strip(), [d.strip() for d in dims.split(",")] if dims.strip() else []))
    else:
        raise _bad("input_shape", value, expected)
    shapes: dict[str, tuple[int, ...]] = {}
    for name, dims in pairs:
        if not isinstance(name, str) or not name or name in shapes or not isinstance(dims, (list, tuple)):
            raise _bad("input_shape", value, expected + " (each input named once)")
        parsed: list = []
        for d in dims:
            bounds = _range(d.strip() if isinstance(d, str) else d)
            if bounds is not None:
                parsed.append(bounds)
                continue
            if isinstance(d, str) and ("~" in d or ".." in d):
                raise _bad("input_shape", value, f"{expected}; range {d!r} of {name!r} needs 0 <= low <= high "
                                                 "(or high -1)")
            try:
                n = int(d) if not isinstance(d, bool) else None
            except (TypeError, ValueError, OverflowError):  # OverflowError: an infinite float
                n = None
            if n is None or n < -1 or (isinstance(d, float) and not d.is_integer()):
                raise _bad("input_shape", value, f"{expected}; dim {d!r} of {name!r} is not an integer >= -1")
            if n > MAX_DIM:
                raise _bad("input_shape", value, f"{expected}; dim {d!r} of {name!r} is beyond int64 (ONNX dims "
                           f"are int64, at most {MAX_DIM})")
            parsed.append(n)
        shapes[name] = tuple(parsed)
    return shapes


def format_input_shape(shapes: Mapping[str, tuple[int, ...]],
                       ranges: "Mapping[str, Mapping[int, tuple[int, int]]] | None" = None) -> str:
    """{name: dims} (and the ranges of its -1 dims) back in ATC's form."""
    ranges = ranges or {}

    def dim(name: str, i: int, d: int) -> str:
        bounds = ranges.get(name, {}).get(i)
        return f"{bounds[0]}..{bounds[1]}" if bounds is not None else str(d)
    return ";".join(f"{name}:{','.join(dim(name, i, d) for i, d in enumerate(dims))}" for name, dims in shapes.items())


#: Option JSON nested deeper than this, or with integers longer than this many digits, is refused.
MAX_JSON_DEPTH = 32
MAX_JSON_DIGITS = 30


def _json_depth(text: str) -> int:
    """The deepest nesting of [ and { outside strings (a scan, so deep nesting cannot recurse)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_DIGITS:
        raise OptionError(f"options: the integer {text[:20]}... has {len(text)} digits; no option takes one this large")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise OptionError(f"options: the number {text[:40]} is out of range; options take finite numbers")
    return value


def _json_constant(text: str) -> float:
    raise OptionError(f"options: {text} is not a number JSON allows; options take finite numbers")


def load_json(text: str) -> Any:
    """Option JSON, with nesting depth, integer length and non-finite numbers bounded (OptionError)."""
    if _json_depth(text) > MAX_JSON_DEPTH:
        raise OptionError(f"options: JSON nested more than {MAX_JSON_DEPTH} levels deep; options are a flat object "
                          f"such as {_EXAMPLE}")
    return json.loads(text, parse_int=_json_int, parse_float=_json_float, parse_constant=_json_constant)


def _load(options: "Mapping[str, Any] | str | None") -> dict[str, Any]:
    if options is None:
        return {}
    if isinstance(options, (bytes, bytearray)):
        options = options.decode("utf-8", "replace")
    if isinstance(options, str):
        if not options.strip():
            return {}
        try:
            options = load_json(options)
        except json.JSONDecodeError as e:
            raise OptionError(f"options are not valid JSON ({e.msg} at line {e.lineno} column {e.colno}); "
                              f"write a JSON object such as {_EXAMPLE}") from None
    if not isinstance(options, Mapping):
        raise OptionError(f"options must be a JSON object (dict), got {type(options).__name__}; e.g. {_EXAMPLE}")
    return dict(options)


def parse_plugin_options(value: Any, plugins: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """{"a": {...}} for plugins listed in "plugins"; OptionError for any other shape or name."""
    expected = 'a JSON object of plugin name -> object, e.g. {"plugins": "a", "plugin_options": {"a": {"ops": "n1"}}}'
    if not isinstance(value, Mapping):
        raise _bad("plugin_options", value, expected)
    result: dict[str, dict[str, Any]] = {}
    for name, settings in value.items():
        if not isinstance(name, str) or not isinstance(settings, Mapping):
            raise OptionError(f"option 'plugin_options' entry {name!r}: {settings!r:.60} is not an object; "
                              f"expected {expected}")
        if name not in plugins:
            listed = ", ".join(plugins) if plugins else 'none ("plugins" is empty)'
            hint = difflib.get_close_matches(name, plugins, 1)
            raise OptionError(f"option 'plugin_options' names plugin {name!r}"
                              f"{f' (did you mean {hint[0]!r}?)' if hint else ''}, which is not in \"plugins\" "
                              f"(listed: {listed}); add it to \"plugins\" or drop its entry")
        try:
            settings = json.loads(json.dumps(dict(settings)))  # plain JSON values: they are stored in the .xmodel
        except (TypeError, ValueError) as e:
            raise OptionError(f"option 'plugin_options' entry {name!r} is not plain JSON ({e}); use strings, "
                              "numbers, booleans, lists and objects") from None
        result[name] = settings
    return result


def _devices(value: Any, known_devices: Iterable[str]) -> tuple[str, ...]:
    known = list(known_devices)
    by_upper = {k.upper(): k for k in known}
    names = _names("devices", value, 'comma-separated device names such as "aicore,aicpu,cpu"')
    if not names:
        raise _bad("devices", value, f"at least one device of {', '.join(known)}")
    unknown = [n for n in names if n.upper() not in by_upper]
    if unknown:
        raise OptionError(f"option 'devices' names unknown device(s) {', '.join(unknown)}; "
                          f"known devices: {', '.join(known)}")
    return tuple(by_upper[n.upper()] for n in names)


def parse_options(options: "Mapping[str, Any] | str | CompileOptions | None",
                  known_devices: Iterable[str] | None = None) -> CompileOptions:
    """Validate an options dict or JSON string; OptionError naming the key and the expected form."""
    if isinstance(options, CompileOptions):
        return options
    raw = _load(options)
    unknown = [k for k in raw if k not in OPTION_KEYS]
    if unknown:
        hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(str(k), OPTION_KEYS, 1))
                 else repr(k) for k in unknown]
        raise OptionError(f"unknown compile option(s) {', '.join(hints)}; valid options: {', '.join(OPTION_KEYS)}")
    kwargs: dict[str, Any] = {}
    if "plugins" in raw:
        kwargs["plugins"] = _names("plugins", raw["plugins"], 'comma-separated plugin names such as "a,b"')
    if "devices" in raw:
        if known_devices is None:
            from xgraph.devices import get_devices
            known_devices = get_devices()
        if isinstance(raw["devices"], Mapping):
            from xgraph.devices.settings import parse_device_settings
            kwargs["device_settings"] = parse_device_settings(raw["devices"], list(known_devices))
        else:
            kwargs["devices"] = _devices(raw["devices"], known_devices)
    if "placement" in raw:
        if raw["placement"] not in PLACEMENTS:
            hint = difflib.get_close_matches(str(raw["placement"]), PLACEMENTS, 1)
            raise _bad("placement", raw["placement"], " or ".join(map(repr, PLACEMENTS)) +
                       (f" (did you mean {hint[0]!r}?)" if hint else ""))
        kwargs["placement"] = raw["placement"]
    if "costs" in raw:
        from xgraph.compiler.cost_table import parse_costs_option
        kwargs["costs"], kwargs["cost_table"] = parse_costs_option(raw["costs"], known_devices)
    if "fallback" in raw:
        if raw["fallback"] not in FALLBACKS:
            raise _bad("fallback", raw["fallback"], " or ".join(f'"{f}"' for f in FALLBACKS))
        kwargs["fallback"] = raw["fallback"]
    if "output_ops" in raw:
        kwargs["output_ops"] = _names("output_ops", raw["output_ops"], 'comma-separated op names such as "fc1,prob"')
    if "min_subgraph_ops" in raw:
        n = raw["min_subgraph_ops"]
        if isinstance(n, str) and n.strip().isdigit():
            n = int(n)
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise _bad("min_subgraph_ops", raw["min_subgraph_ops"], "an integer >= 0 (0 or 1: keep every island)")
        kwargs["min_subgraph_ops"] = max(n, 1)
    if "precision_mode" in raw:
        if raw["precision_mode"] not in PRECISION_MODES:
            raise _bad("precision_mode", raw["precision_mode"], "one of " + ", ".join(PRECISION_MODES))
        kwargs["precision_mode"] = raw["precision_mode"]
    if "input_shape" in raw:
        kwargs["input_shape"] = parse_input_shape(raw["input_shape"])
        kwargs["input_shape_ranges"] = parse_input_shape_ranges(raw["input_shape"])
    if "plugin_options" in raw:
        kwargs["plugin_options"] = parse_plugin_options(raw["plugin_options"], kwargs.get("plugins", ()))
    if "strict_plugins" in raw:
        if not isinstance(raw["strict_plugins"], bool):
            raise _bad("strict_plugins", raw["strict_plugins"], "true (a plugin declining a subgraph fails the "
                       "compile) or false (its ops go back to placement)")
        kwargs["strict_plugins"] = raw["strict_plugins"]
    if "external_data_threshold" in raw:
        kwargs["external_data_threshold"] = parse_byte_count("external_data_threshold", raw["external_data_threshold"])
    kwargs["gear_option"], kwargs["gears"] = parse_gear_options(raw, kwargs.get("input_shape", {}))
    if kwargs["gears"] and kwargs.get("input_shape_ranges"):
        ranged = ", ".join(f"{name}[{i}]" for name, dims in kwargs["input_shape_ranges"].items() for i in dims)
        raise OptionError(f"option 'input_shape' gives ranges ({ranged}), which exclude option "
                          f"{kwargs['gear_option']!r}: a range keeps a dim dynamic, a gear makes it static; "
                          "use -1 for the gear dims")
    return CompileOptions(**kwargs)


def parse_byte_count(key: str, value: Any) -> int:
    """A number of bytes >= 0: an int, or a string such as "1024", "64K", "512M", "2G", "8GiB" (powers of 1024)."""
    n = parse_bytes(value)
    if n is None:
        raise _bad(key, value, 'a number of bytes >= 0, such as 0 (every large weight in the side file), '
                   '1048576 or "512M"')
    return n


__all__ = ["CompileOptions", "FALLBACKS", "OPTION_KEYS", "PLACEMENTS", "PRECISION_MODES", "format_input_shape",
           "parse_input_shape", "parse_input_shape_ranges", "parse_options", "parse_plugin_options"]
