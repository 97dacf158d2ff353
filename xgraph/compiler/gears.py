"""Gears: ATC's way of compiling a dynamic model as a few static ones, from the gear option to
the compiled gears.

The option: `input_shape` marks the dynamic dims with -1 and one gear option lists the values they take:

- `dynamic_batch_size` "1,2,4,8": every -1 is the first dim (the batch) of its input; one
  value per gear;
- `dynamic_image_size` "224,224;448,448": every input with -1s has exactly two (height, then
  width); one "H,W" pair per gear;
- `dynamic_dims` "16;32;64" or "1,16;2,32": one value per -1, in `input_shape` order, per gear.
  Unlike ATC, a value may be 0: an empty dim, such as the past of a KV-cache decoder's first
  step, so a decoder can run every step of a short generation on static gears.

The options exclude each other, as in ATC, and take 2 to `MAX_GEARS` gears. Each gear is
`input_shape` with its -1s filled in: a fully static shape, compiled as its own partition.

    >>> shape = {"ids": (1, -1), "mask": (1, -1)}
    >>> gear_shapes(shape, parse_gears("dynamic_dims", "8,8;16,16", shape))
    [{'ids': (1, 8), 'mask': (1, 8)}, {'ids': (1, 16), 'mask': (1, 16)}]

Compiling (`compile_gears`): the whole pipeline once per gear, weights shared between the
results. Every gear is a fully static model: prepare fixes the input dims, folds shape
arithmetic to a fixpoint, and placement can put the dense ops on AI Core. The gears start from
one loaded graph (copies share its weight arrays); after compiling, weights that came out equal
are made one array again (`xgraph.ir.gears.share_weights`), so constants prepare folded the
same way in every gear are stored and held once too.

The result is gear 0's compiled graph carrying all gears (`graph.get_gears()`). Every gear's
graph, gear 0's included, records its own static options in "compile_options" (so compiling
or explaining the saved gear 0 again reproduces it); gear 0 also keeps the options as given,
gear option included, in "gear_options", and the weight sharing counts in "gear_weights".

`xgraph.compiler.options` parses the gear option with this module's parsers, and
`compile_gears` takes those parsed options, so it names `CompileOptions` for type checking only.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from xgraph.errors import OptionError, XGraphError
from xgraph.ir import Graph
from xgraph.ir.gears import Gear, share_weights

if TYPE_CHECKING:
    from xgraph.compiler.options import CompileOptions

#: The largest dim ONNX can hold (dims are int64): input_shape and gear values beyond it are refused.
MAX_DIM = (1 << 63) - 1

#: The gear options, in the order ATC documents them.
GEAR_OPTIONS = ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims")
#: ATC's limits: at least two gears (one would just be `input_shape`), at most 100.
MIN_GEARS, MAX_GEARS = 2, 100
#: ATC's range for a batch size.
MAX_BATCH = 2048

_EXAMPLES = {
    "dynamic_batch_size": '"input_shape": "x:-1,3,224,224", "dynamic_batch_size": "1,2,4,8"',
    "dynamic_image_size": '"input_shape": "x:1,3,-1,-1", "dynamic_image_size": "224,224;448,448"',
    "dynamic_dims": '"input_shape": "input_ids:1,-1", "dynamic_dims": "16;32;64"',
}
_FORMS = {
    "dynamic_batch_size": 'comma-separated batch sizes, e.g. "1,2,4,8"',
    "dynamic_image_size": '"H,W" pairs separated by ";", e.g. "224,224;448,448"',
    "dynamic_dims": 'gears separated by ";", each one value per -1 of input_shape, e.g. "16;32;64" or "1,16;2,32"',
}

Gears = tuple[tuple[int, ...], ...]
#: Compiles one static gear: (a fresh graph it may consume, the gear's own options) -> the compiled graph.
CompileOne = Callable[[Graph, "CompileOptions"], Graph]


def _bad(key: str, value: Any, why: str) -> OptionError:
    return OptionError(f"option {key!r} has invalid value {str(value)[:200]!r}: {why}; expected {_FORMS[key]}")


def _dynamic_positions(input_shape: Mapping[str, Sequence[int]]) -> list[tuple[str, int]]:
    """(input name, dim index) of every -1, in input_shape order."""
    return [(name, i) for name, dims in input_shape.items() for i, d in enumerate(dims) if d == -1]


def _split_gears(key: str, value: Any) -> list[list[str]]:
    """The text of each gear's values: "1,2;3,4" -> [["1", "2"], ["3", "4"]] (a list form is accepted too)."""
    if isinstance(value, str):
        if key == "dynamic_batch_size":
            return [[v] for v in value.split(",")]
        return [part.split(",") for part in value.split(";")]
    if isinstance(value, (list, tuple)):
        gears = []
        for gear in value:
            gears.append([str(v) for v in gear] if isinstance(gear, (list, tuple)) else [str(gear)])
        return gears
    raise _bad(key, value, f"a {type(value).__name__} is not a gear list")


def _as_int(key: str, value: Any, text: str) -> int:
    text = text.strip()
    if not text:
        raise _bad(key, value, "a value is empty")
    try:
        n = int(text)
    except ValueError:
        raise _bad(key, value, f"{text[:20]!r} is not an integer") from None
    if n > MAX_DIM:
        raise _bad(key, value, f"{n} is beyond int64 (ONNX dims are int64, at most {MAX_DIM})")
    if n < 0 or (n == 0 and key != "dynamic_dims"):
        smallest = 0 if key == "dynamic_dims" else 1
        raise _bad(key, value, f"{n} is not a size >= {smallest} (gear values fill -1 dims)")
    if key == "dynamic_batch_size" and n > MAX_BATCH:
        raise _bad(key, value, f"batch size {n} is over {MAX_BATCH}, the largest ATC takes")
    return n


def _check_positions(key: str, input_shape: Mapping[str, Sequence[int]], positions: list[tuple[str, int]]) -> None:
    """The -1s where the option needs them: the batch dim, or (H, W) pairs."""
    if not positions:
        shown = ";".join(f"{n}:{','.join(map(str, d))}" for n, d in input_shape.items()) or "none"
        raise OptionError(f"option {key!r} needs -1 in option 'input_shape' for each dynamic dim (input_shape is "
                          f"{shown}); e.g. {_EXAMPLES[key]}")
    if key == "dynamic_batch_size":
        wrong = [(n, i) for n, i in positions if i != 0]
        if wrong:
            name, i = wrong[0]
            raise OptionError(f"option 'dynamic_batch_size' needs -1 only as the first dim (the batch) of each input, "
                              f"but option 'input_shape' has -1 at dim {i} of {name!r}; use 'dynamic_dims' for "
                              f"other dims")
    if key == "dynamic_image_size":
        for name in dict.fromkeys(n for n, _ in positions):
            count = sum(1 for n, _ in positions if n == name)
            if count != 2:
                raise OptionError(f"option 'dynamic_image_size' needs exactly two -1 dims (height and width) in each "
                                  f"dynamic input, but option 'input_shape' gives {name!r} {count}; use "
                                  f"'dynamic_dims' for other dims")


def parse_gears(key: str, value: Any, input_shape: Mapping[str, Sequence[int]]) -> Gears:
    """The gears of one gear option, checked against `input_shape`'s -1 dims (OptionError naming the option)."""
    positions = _dynamic_positions(input_shape)
    _check_positions(key, input_shape, positions)
    if isinstance(value, str) and not value.strip():
        raise _bad(key, value, "it is empty")
    texts = _split_gears(key, value)
    if key == "dynamic_batch_size":
        per_gear = 1
    elif key == "dynamic_image_size":
        per_gear = 2
    else:
        per_gear = len(positions)
    gears: list[tuple[int, ...]] = []
    for index, gear in enumerate(texts):
        if len(gear) != per_gear:
            what = {"dynamic_batch_size": "one batch size", "dynamic_image_size": "two values (H,W)"}.get(
                key, f"{per_gear} value(s), one per -1 of input_shape ({', '.join(f'{n}[{i}]' for n, i in positions)})")
            raise _bad(key, value, f"gear {index + 1} has {len(gear)} value(s), each gear needs {what}")
        gears.append(tuple(_as_int(key, value, t) for t in gear))
    if not MIN_GEARS <= len(gears) <= MAX_GEARS:
        raise _bad(key, value, f"{len(gears)} gear(s) given; give {MIN_GEARS} to {MAX_GEARS} (one shape needs no "
                   f"gears: put it in 'input_shape')")
    repeated = sorted({g for g in gears if gears.count(g) > 1})
    if repeated:
        raise _bad(key, value, "each gear once (repeated: " + "; ".join(",".join(map(str, g)) for g in repeated) + ")")
    return tuple(gears)


def parse_gear_options(raw: Mapping[str, Any], input_shape: Mapping[str, Sequence[int]]) -> tuple[str, Gears]:
    """(the gear option given or "", its gears); OptionError when two are given together."""
    given = [k for k in GEAR_OPTIONS if k in raw]
    if len(given) > 1:
        raise OptionError(f"options {', '.join(repr(k) for k in given)} exclude each other (as in ATC); give one: "
                          f"'dynamic_dims' covers the batch and image cases too")
    if not given:
        return "", ()
    return given[0], parse_gears(given[0], raw[given[0]], input_shape)


def gear_shapes(input_shape: Mapping[str, Sequence[int]], gears: Gears, key: str = "dynamic_dims"
                ) -> list[dict[str, tuple[int, ...]]]:
    """Each gear's input_shape: its -1s filled in order (the batch option fills every -1 with one value)."""
    positions = _dynamic_positions(input_shape)
    shapes = []
    for gear in gears:
        if key == "dynamic_batch_size":
            values = list(gear) * len(positions)
        elif key == "dynamic_image_size":
            values = list(gear) * (len(positions) // 2)
        else:
            values = list(gear)
        filled = {name: list(dims) for name, dims in input_shape.items()}
        for (name, i), v in zip(positions, values):
            filled[name][i] = v
        shapes.append({name: tuple(dims) for name, dims in filled.items()})
    return shapes


def format_gears(key: str, gears: Gears) -> str:
    """Gears back in the option's ATC form."""
    if key == "dynamic_batch_size":
        return ",".join(str(g[0]) for g in gears)
    return ";".join(",".join(str(v) for v in g) for g in gears)


# -- compiling the gears ----------------------------------------------------------------------------

def gear_name(index: int) -> str:
    """The name of gear `index` ("gear0", "gear1", ...)."""
    return f"gear{index}"


def _in_gear(error: XGraphError, index: int, shapes: str) -> XGraphError:
    """The same error, its message saying which gear it came from."""
    message = f"gear {gear_name(index)} (input_shape {shapes}): {error}"
    try:
        return type(error)(message)
    except TypeError:  # an error class that takes other arguments
        return XGraphError(message)


def _static_inputs(graph: Graph, index: int, shapes: str) -> dict[str, tuple[int, ...]]:
    """Each input's static shape; OptionError naming an input the gear leaves dynamic."""
    result: dict[str, tuple[int, ...]] = {}
    for t in graph.get_input_tensors():
        if t.shape is None or not all(isinstance(d, int) for d in t.shape):
            shown = "unknown" if t.shape is None else "(" + ", ".join(str(d) for d in t.shape) + ")"
            raise OptionError(f"gear {gear_name(index)} (input_shape {shapes}) leaves input {t.name!r} with dynamic "
                              f"shape {shown}; name every input in option 'input_shape' (-1 for the gear dims) so "
                              "each gear is static")
        result[t.name] = tuple(t.shape)
    return result


def compile_gears(graph: Graph, opts: CompileOptions, compile_one: CompileOne) -> Graph:
    """Compile `graph` once per gear of `opts` with `compile_one(graph, static options)`; gear 0 carries all.

    `graph` is a fresh graph this call may consume. Any gear's error is raised naming the
    gear, and nothing is returned half-built.
    """
    shapes = opts.gear_shapes()
    compiled: list[Graph] = []
    records: list[dict[str, tuple[int, ...]]] = []
    for index, gear_shape in enumerate(shapes):
        gear_opts = replace(opts, input_shape=gear_shape, gear_option="", gears=())
        shown = gear_opts.to_dict()["input_shape"]  # the gear's input_shape option, as its compile records it
        source = graph if index == len(shapes) - 1 else graph.copy()
        try:
            result = compile_one(source, gear_opts)
        except XGraphError as e:
            raise _in_gear(e, index, shown) from e
        records.append(_static_inputs(result, index, shown))
        compiled.append(result)
    sharing = share_weights(compiled)
    primary = compiled[0]
    primary.set_gears([Gear(gear_name(i), records[i], g) for i, g in enumerate(compiled)])
    primary.set_attr("gear_options", opts.to_json())  # as given; "compile_options" stays gear 0's own
    primary.set_attr("gear_weights", sharing)
    return primary


__all__ = ["GEAR_OPTIONS", "Gears", "MAX_GEARS", "MIN_GEARS", "compile_gears", "format_gears", "gear_name",
           "gear_shapes", "parse_gear_options", "parse_gears"]
