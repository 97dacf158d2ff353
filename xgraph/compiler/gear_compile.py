"""Compiling with gears: the whole pipeline once per gear, weights shared between the results.

Each gear is `input_shape` with its -1 dims filled (`CompileOptions.gear_shapes`), so every
gear is a fully static model: prepare fixes the input dims, folds shape arithmetic to a
fixpoint, and placement can put the dense ops on AI Core. The gears start from one loaded
graph (copies share its weight arrays); after compiling, weights that came out equal are
made one array again (`xgraph.ir.gears.share_weights`), so constants prepare folded the
same way in every gear are stored and held once too.

The result is gear 0's compiled graph carrying all gears (`graph.get_gears()`). Every gear's
graph, gear 0's included, records its own static options in "compile_options" (so compiling
or explaining the saved gear 0 again reproduces it); gear 0 also keeps the options as given,
gear option included, in "gear_options", and the weight sharing counts in "gear_weights".
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from xgraph.compiler.options import CompileOptions, format_input_shape
from xgraph.compiler.prepare import copy_graph
from xgraph.errors import OptionError, XGraphError
from xgraph.ir import Graph
from xgraph.ir.gears import Gear, share_weights

CompileOne = Callable[[Graph, CompileOptions], Graph]


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
        shown = format_input_shape(gear_shape)
        gear_opts = replace(opts, input_shape=gear_shape, gear_option="", gears=())
        source = graph if index == len(shapes) - 1 else copy_graph(graph)
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


__all__ = ["compile_gears", "gear_name"]
