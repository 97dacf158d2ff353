"""Gears in the .xmodel: gear 0 is the file's graph, every other gear a model-local ONNX function.

Layout (docs/xmodel.md, "Gears"):
- the ModelProto's graph, initializers and ``xgraph.meta`` are gear 0, as in any .xmodel;
- gear k > 0 is a FunctionProto in domain ``xgraph.gear`` named after the gear: its nodes and
  value_info are the gear's graph, its inputs the graph inputs followed by the names of the
  weights it shares with gear 0 (read from the file's initializers: each weight is stored
  once), its own weights (constants prepare folded differently for that shape, attribute
  arrays) as Constant nodes named ``xgraph.gear.weight/<tensor>``, and the gear's own
  ``xgraph.meta`` in the function's metadata_props;
- ``metadata_props["xgraph.gears"]``: JSON ``{"version": 1, "gears": [{"name",
  "input_shapes": {input: [dims]}, "function": name or "" for gear 0}]}``.

No node calls the functions, so onnx, Netron and onnxruntime still see gear 0 as the model;
Netron lists each gear as a function. The codec only builds and checks protos: the gear's
graph itself is rebuilt by the .xmodel decoder it is handed, with all its checks.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable

import onnx
from onnx import helper

from xgraph.errors import GraphError, ModelFileError
from xgraph.ir.gears import Gear, bind_weights, gear_record

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore

META_KEY = "xgraph.meta"  # the .xmodel's own metadata key (xmodel.py), here inside a gear's function
GEARS_KEY = "xgraph.gears"
GEAR_DOMAIN = "xgraph.gear"
WEIGHT_NODE_PREFIX = "xgraph.gear.weight/"
GEARS_VERSION = 1
#: A file listing more gears than the compile options allow (ATC's limit) is refused.
MAX_FILE_GEARS = 100

Encode = Callable[["GraphCore"], onnx.ModelProto]
Decode = Callable[[onnx.ModelProto, str], "GraphCore"]


def _shared_weights(graph: "GraphCore", carrier: "GraphCore") -> set[str]:
    """Names of `graph`'s weights that are the carrier's array of the same name (stored once, in the carrier)."""
    carrier_data = {t.name: t.data for t in carrier.get_const_tensors()}
    return {t.name for t in graph.get_const_tensors() if carrier_data.get(t.name) is t.data}


def _to_function(sub: onnx.ModelProto, gear: Gear, shared: set[str]) -> onnx.FunctionProto:
    g = sub.graph
    fn = onnx.FunctionProto(name=gear.name, domain=GEAR_DOMAIN,
                            doc_string=f"xgraph gear {gear.describe()}: run by xgraph for inputs of these shapes")
    fn.opset_import.extend(sub.opset_import)
    weights = sorted(i.name for i in g.initializer if i.name in shared)
    fn.input.extend([vi.name for vi in g.input] + weights)
    fn.output.extend(vi.name for vi in g.output)
    own = [helper.make_node("Constant", [], [i.name], name=WEIGHT_NODE_PREFIX + i.name, value=i)
           for i in g.initializer if i.name not in shared]
    if g.sparse_initializer:
        raise GraphError(f"gear {gear.name!r}: sparse weights cannot be stored in a gear; keep them dense")
    fn.node.extend(own)
    fn.node.extend(g.node)
    fn.value_info.extend(list(g.input) + list(g.output) + list(g.value_info))
    fn.metadata_props.extend(sub.metadata_props)
    return fn


def add_gears(model: onnx.ModelProto, graph: "GraphCore", encode: Encode) -> None:
    """Store `graph`'s gears (if any) in `model`, the .xmodel of gear 0 that `encode` built."""
    gears = graph.get_gears()
    if not gears:
        return
    record = gear_record(gears)
    record[0]["function"] = ""
    for entry, gear in zip(record[1:], gears[1:]):
        fn = _to_function(encode(gear.graph), gear, _shared_weights(gear.graph, graph))
        model.functions.append(fn)
        entry["function"] = fn.name
    if not any(o.domain == GEAR_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(GEAR_DOMAIN, 1))
    model.metadata_props.append(onnx.StringStringEntryProto(
        key=GEARS_KEY, value=json.dumps({"version": GEARS_VERSION, "gears": record}, allow_nan=False)))


def _read_record(model: onnx.ModelProto, label: str) -> list[dict[str, Any]] | None:
    entries = [p.value for p in model.metadata_props if p.key == GEARS_KEY]
    if not entries:
        return None

    def fail(what: str) -> None:
        raise ModelFileError(f"{label}: the gear list ({GEARS_KEY!r} metadata) is damaged: {what}")

    if len(entries) > 1:
        fail(f"it appears {len(entries)} times")
    try:
        doc = json.loads(entries[0])
    except (ValueError, RecursionError) as e:
        fail(f"not valid JSON ({str(e)[:120]})")
    if not isinstance(doc, dict) or doc.get("version") != GEARS_VERSION or not isinstance(doc.get("gears"), list):
        fail(f"expected {{'version': {GEARS_VERSION}, 'gears': [...]}}")
    gears = doc["gears"]
    if not 2 <= len(gears) <= MAX_FILE_GEARS:
        fail(f"{len(gears)} gear(s) listed; a geared model has 2 to {MAX_FILE_GEARS}")
    for i, entry in enumerate(gears):
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and entry["name"]
                and isinstance(entry.get("function"), str) and isinstance(entry.get("input_shapes"), dict)):
            fail(f"gear {i} has no name, function or input_shapes")
        for name, dims in entry["input_shapes"].items():
            if not (isinstance(dims, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                   for d in dims)):
                fail(f"gear {entry['name']!r} gives input {name!r} the shape {str(dims)[:60]}")
        if (entry["function"] == "") != (i == 0):
            fail(f"gear {entry['name']!r}: gear 0 is the file's graph and every other gear a function")
    return gears


def _gear_model(model: onnx.ModelProto, fn: onnx.FunctionProto, inputs: list[str], label: str) -> onnx.ModelProto:
    """A standalone .xmodel ModelProto of one gear: its function's nodes, its weights as initializers."""
    def fail(what: str) -> None:
        raise ModelFileError(f"{label}: gear function {fn.name!r} is damaged: {what}")

    if list(fn.input[:len(inputs)]) != inputs:
        fail(f"its inputs {list(fn.input)[:len(inputs)]} are not the model's {inputs}")
    types = {vi.name: vi for vi in fn.value_info}
    missing = [n for n in list(inputs) + list(fn.output) if n not in types]
    if missing:
        fail(f"no type for {missing[:3]}")
    stored = {i.name: i for i in model.graph.initializer}
    sub = onnx.ModelProto(ir_version=model.ir_version, producer_name=model.producer_name,
                          producer_version=model.producer_version)
    sub.opset_import.extend(fn.opset_import)
    sub.functions.extend(f for f in model.functions if f.domain != GEAR_DOMAIN)
    sub.metadata_props.extend(fn.metadata_props)
    g = sub.graph
    g.name = model.graph.name
    shared = list(fn.input[len(inputs):])
    for name in shared:  # placeholders (type only): `bind_weights` gives them gear 0's arrays after decoding
        if name not in stored or name in types:
            fail(f"it shares weight {name!r}, which the file does not carry")
        init = stored[name]
        types[name] = helper.make_tensor_value_info(name, init.data_type, list(init.dims))
    meta = [p for p in sub.metadata_props if p.key == META_KEY]
    if len(meta) != 1:
        fail(f"it carries {len(meta)} {META_KEY!r} entries, not one")
    try:
        gear_meta = json.loads(meta[0].value)
        gear_meta["inputs"] = list(gear_meta["inputs"]) + shared
    except (ValueError, RecursionError, TypeError, KeyError) as e:
        fail(f"its {META_KEY!r} metadata is damaged ({str(e)[:80]})")
    meta[0].value = json.dumps(gear_meta, allow_nan=False)
    boundary = set(inputs) | set(fn.output)
    for node in fn.node:
        if node.name.startswith(WEIGHT_NODE_PREFIX) and node.op_type == "Constant" and node.domain == "":
            if len(node.attribute) != 1 or node.attribute[0].name != "value" or len(node.output) != 1:
                fail(f"weight node {node.name!r} is not one Constant value")
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            g.initializer.append(tensor)
        else:
            g.node.append(node)
    g.input.extend(types[n] for n in list(inputs) + shared)
    g.output.extend(types[n] for n in fn.output)
    g.value_info.extend(vi for vi in fn.value_info if vi.name not in boundary)
    return sub


def read_gears(model: onnx.ModelProto, graph: "GraphCore", label: str, decode: Decode) -> None:
    """Rebuild and attach the gears stored in `model` (gear 0 being `graph`); ModelFileError if damaged."""
    record = _read_record(model, label)
    graph.functions = [f for f in graph.functions if f.domain != GEAR_DOMAIN]
    graph.opset_imports.pop(GEAR_DOMAIN, None)
    if record is None:
        return
    functions = {f.name: f for f in model.functions if f.domain == GEAR_DOMAIN}
    inputs = [t.name for t in graph.get_input_tensors()]
    gears = [Gear(record[0]["name"], {k: tuple(v) for k, v in record[0]["input_shapes"].items()}, graph)]
    for entry in record[1:]:
        fn = functions.get(entry["function"])
        if fn is None:
            raise ModelFileError(f"{label}: gear {entry['name']!r} names function {entry['function']!r}, which the "
                                 "file does not carry")
        where = f"{label} (gear {entry['name']})"
        gear_graph = decode(_gear_model(model, fn, inputs, label), where)
        try:
            bind_weights(gear_graph, graph, fn.input[len(inputs):])  # gear 0's arrays: each weight held once
        except GraphError as e:
            raise ModelFileError(f"{where}: {e}") from None
        gears.append(Gear(entry["name"], {k: tuple(v) for k, v in entry["input_shapes"].items()}, gear_graph))
    try:
        graph.set_gears(gears)
    except GraphError as e:
        raise ModelFileError(f"{label}: the gears do not fit the model: {e}") from None


__all__ = ["GEARS_KEY", "GEAR_DOMAIN", "add_gears", "read_gears"]
