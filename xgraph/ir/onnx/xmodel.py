"""The .xmodel file: an ONNX ModelProto (so onnx and Netron open it) plus xgraph's own state.

Layout:
- the graph and its weights, as ordinary ONNX (nodes, initializers, value_info);
- ``metadata_props["xgraph.meta"]``: JSON with the format version, graph attrs, op
  annotations and order, tensor attrs, and the subgraph tree with every subgraph's attrs;
- numpy arrays found in attrs, as initializers named ``xgraph.attr/<n>`` (referenced from the
  JSON as ``["a", "<n>"]``).

Attr values are tagged in the JSON (`xgraph.ir.onnx.attr_json`) so loading restores exactly the
Python types that were saved. Loading never unpickles and
never imports or executes anything named in the file; every field is type-checked and the
tree must partition the ops, else a ModelFileError names the file and the problem.
"""
from __future__ import annotations

import json
import os
from itertools import chain
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import EncodeError

from xgraph.errors import GraphError, ModelFileError
from xgraph.ir.blob import blob_arrays
from xgraph.ir.builder import GraphBuilder, write_op_annotations
from xgraph.ir.files import all_or_nothing, check_target, on_commit, write_bytes, write_new
from xgraph.ir.graph_core import GraphCore
from xgraph.ir.onnx.attr_columns import MISSING, DecodedValues, ValueTable, op_annotation_columns
from xgraph.ir.onnx.attr_json import ARRAY_PREFIX, MAX_JSON_DEPTH, Decoder, Encoder
from xgraph.ir.onnx.attr_schema import check_known_attrs
from xgraph.ir.onnx.exporter import graph_to_onnx
from xgraph.ir.onnx.gears_file import add_gears, read_gears
from xgraph.ir.onnx.importer import check_text, graph_from_model_proto
from xgraph.ir.onnx.nodes import Nodes, is_text
from xgraph.ir.arguments import require_graph, require_path
from xgraph.ir.onnx.safe_reader import read_model_inventory
from xgraph.ir.onnx.shape_inference import largest_declared_dim
from xgraph.ir.onnx.side_file import (TOKEN_TENSOR, SideLayout, goes_external, read_consistently,
                                      remove_superseded, side_name)
from xgraph.ir.subgraph import Subgraph

META_KEY = "xgraph.meta"
FORMAT = "xgraph.xmodel"
#: the format written: 2 stores attr values once in a table (`xgraph.ir.onnx.attr_columns`)
VERSION = 2
#: Weights adding up to more than this many bytes go to a side file (the `external_data_threshold` default).
DEFAULT_EXTERNAL_DATA_THRESHOLD = 1 << 28
#: Past this many bytes of weights the side file is used whatever the threshold: one protobuf
#: message holds at most 2 GiB, and the graph and metadata need room too.
INLINE_LIMIT = (1 << 31) - (1 << 26)


_NAME = attrgetter("name")


def _tree_to_json(sg: Subgraph, table: ValueTable) -> dict:
    """The tree from `sg` down: per subgraph its name, its attrs as value indices and either its children (in
    dependency order) or, for a leaf other than the root, its op names (sorted)."""
    node: dict[str, Any] = {"name": sg.name, "attrs": table.attrs(sg.get_attrs())}
    if not sg.is_leaf:
        _children_to_json(sg, node, table, sg.graph.index())
    elif not sg.is_root:
        node["ops"] = sorted(map(_NAME, sg.get_ops()))
    return node


def _children_to_json(sg: Subgraph, node: dict, table: ValueTable, index: Any) -> None:
    """`node["children"]`: the children of `sg`, a level at a time from the index (attrs, and the op names of
    the leaves), and below each child that has children of its own."""
    children = sg.toposort_child_subgraph()
    found = node["children"] = []
    for child, attrs, ops in zip(children, index.attr_dicts(children), index.leaf_op_names(children)):
        entry: dict[str, Any] = {"name": child.name, "attrs": table.attrs(attrs) if attrs else {}}
        if ops is None:
            _children_to_json(child, entry, table, index)
        else:
            entry["ops"] = ops
        found.append(entry)


def _dump_json(meta: dict) -> str:
    """The metadata as compact JSON. Attr values are checked acyclic when set (`check_attr_value` bounds their
    depth), so the encoder's own cycle bookkeeping is skipped: on a 100k-op graph it is a third of the time."""
    return json.dumps(meta, allow_nan=False, check_circular=False, separators=(",", ":"))


def to_model_proto(graph: GraphCore, side: SideLayout | None = None) -> onnx.ModelProto:
    """The .xmodel content of `graph` as a ModelProto; with `side`, its large weights are
    references into that side file (filled in here: nothing is written)."""
    tensors = graph.get_tensors()
    clash = next((t.name for t in tensors if t.name.startswith(ARRAY_PREFIX)), None)
    if clash is not None:
        raise GraphError(f"graph {graph.name!r}: tensor {clash!r} uses the name prefix {ARRAY_PREFIX!r}, which "
                         ".xmodel files reserve for attribute arrays; rename the tensor before saving")
    external = None
    if side is not None:
        external = {t.name: side.add(t.name, t.data) for t in tensors if t.is_const and goes_external(t.data)}
    model = graph_to_onnx(graph, external=external)
    enc = Encoder(None if side is None else _blob_to_side(side))
    table = ValueTable(enc)
    ops = graph.get_ops()
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "graph": {"name": graph.name, "attrs": enc.encode_attrs(graph.get_attrs())},
        "op_order": [op.name for op in ops],
        "tensor_order": [t.name for t in tensors if ":unused:" not in t.name],
        "op_annotations": {},  # always empty in version 2 (annotations are columns); required by every reader
        "op_annotation_columns": op_annotation_columns(graph, ops, table),
        "tensor_attrs": {t.name: enc.encode_attrs(attrs) for t, attrs in graph.index().attributed(tensors)},
        "inputs": [t.name for t in graph.get_input_tensors()],
        "tree": _tree_to_json(graph.get_root_subgraph(), table),
    }
    meta["values"] = table.entries
    model.graph.initializer.extend(enc.arrays)
    if side is not None:
        meta["side_file"] = {"location": side.location, "token": side.token.hex(), "bytes": side.size}
        model.graph.initializer.append(side.token_reference())
    model.metadata_props.append(onnx.StringStringEntryProto(key=META_KEY, value=_dump_json(meta)))
    add_gears(model, graph, to_model_proto)  # gears after gear 0 (this graph), as functions: gears_file.py
    return model


def _blob_to_side(side: SideLayout) -> "Callable[[str, np.ndarray], onnx.TensorProto | None]":
    """Large compiled blobs (uint8 attr arrays, `xgraph.ir.blob`) go to the side file beside the weights."""
    def external(key: str, array: np.ndarray) -> "onnx.TensorProto | None":
        return side.add(key, array) if array.dtype == np.uint8 and goes_external(array) else None
    return external


def serialize(graph: GraphCore, path: str | os.PathLike, external_data_threshold: int | None = None) -> None:
    """Write `graph` to `path` atomically: on any error the old file (if any) is left untouched.

    When the weights add up to more than `external_data_threshold` bytes (None: the compile
    option of that name the graph was compiled with, else `DEFAULT_EXTERNAL_DATA_THRESHOLD`),
    or to more than one protobuf message can hold, the large ones go to a side file of this
    save (`xgraph.ir.onnx.side_file.side_name`), written before the .xmodel that names it is
    renamed into place: readers see the old pair or the new one, whatever happens in between.
    Side files the new .xmodel no longer names are removed afterwards. Only `path`, its side
    files and temporary files beside them are ever written: no name from the graph becomes a
    path. The rules of every file xgraph writes apply (`xgraph.ir.files`): a target that is a
    link, folder, device or FIFO is refused.
    """
    require_graph(graph, "serialize")
    require_path(path, "serialize")
    check_target(path)
    threshold = external_threshold(graph, external_data_threshold)
    weights = [t.data for t in graph.get_const_tensors()] + blob_arrays(graph)
    total = sum(int(a.nbytes) for a in weights)
    external = (total > threshold or total > INLINE_LIMIT) and any(goes_external(a) for a in weights)
    with all_or_nothing():
        side_file = None
        for _ in range(_NAME_TRIES):
            side = None
            if external:
                side = SideLayout("")
                side_file = side_name(path, side.token)
                side.location = side_file.name
            data = _encode(graph, side, path)
            if side is None or _write_side_file(side_file, side):
                break
        else:
            raise ModelFileError(f"{path}: no free side data file name beside it after {_NAME_TRIES} tries; "
                                 "remove the stray files named like it")
        written = write_bytes(path, data)
        on_commit(lambda: remove_superseded(path, side_file, written))


#: Tries at a side file name no entry has (a 64-bit token: a second try is already unlikely).
_NAME_TRIES = 8


def _encode(graph: GraphCore, side: SideLayout | None, path: str | os.PathLike) -> bytes:
    try:
        return to_model_proto(graph, side).SerializeToString()
    except (ValueError, RuntimeError, EncodeError) as e:  # e.g. over protobuf's 2 GiB message limit
        raise ModelFileError(f"{path}: the graph cannot be encoded as one ONNX file ({e}); weights of "
                             "fixed-size types go to a side file above external_data_threshold, other data "
                             "must fit in 2 GiB") from None


def _write_side_file(side_file: Path, side: SideLayout) -> bool:
    """Write this save's side file under its own name, before the .xmodel names it; False if the name is taken."""
    try:
        write_new(side_file, side.writer(), "side data file")
    except FileExistsError:
        return False
    return True


def external_threshold(graph: GraphCore, given: int | None) -> int:
    """The external-data threshold in bytes: `given`, else the graph's compile option, else the default."""
    if given is not None:
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise GraphError(f"external_data_threshold {given!r}: give a number of bytes >= 0")
        return given
    try:
        recorded = json.loads(graph.get_attrs().get("compile_options") or "{}").get("external_data_threshold")
    except (ValueError, AttributeError, TypeError):
        recorded = None
    if isinstance(recorded, int) and not isinstance(recorded, bool) and recorded >= 0:
        return recorded
    return DEFAULT_EXTERNAL_DATA_THRESHOLD


def _read_meta(model: onnx.ModelProto, label: str) -> dict:
    entries = [p.value for p in model.metadata_props if p.key == META_KEY]
    if not entries:
        raise ModelFileError(f"{label}: not an .xmodel (no {META_KEY!r} metadata); "
                             "load a plain ONNX model with Graph.from_onnx or xgraph.load")
    if len(entries) > 1:
        raise ModelFileError(f"{label}: {META_KEY!r} metadata appears {len(entries)} times")
    try:
        meta = json.loads(entries[0])
    except (ValueError, RecursionError) as e:  # ValueError: JSONDecodeError, or an int of too many digits
        raise ModelFileError(f"{label}: xgraph metadata is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ModelFileError(f"{label}: xgraph metadata does not declare format {FORMAT!r}")
    version = meta.get("version")
    if type(version) is int and version < VERSION:
        raise ModelFileError(f"{label}: .xmodel version {version} was written by an older xgraph, which this one "
                             f"does not read (it reads version {VERSION}); compile the model again with this xgraph")
    if version != VERSION or type(version) is not int:
        raise ModelFileError(f"{label}: .xmodel version {repr(version)[:40]} is not supported (this xgraph reads "
                             f"version {VERSION}); compile the model again with this xgraph")
    required = (("graph", dict), ("op_order", list), ("op_annotations", dict), ("tensor_attrs", dict),
                ("inputs", list), ("tree", dict), ("op_annotation_columns", dict), ("values", list))
    for key, kind in required:
        if not isinstance(meta.get(key), kind):
            raise ModelFileError(f"{label}: xgraph metadata key {key!r} is missing or not a {kind.__name__}")
    return meta


def _check_side_file(side: Any, arrays: dict[str, np.ndarray], label: str) -> None:
    """Refuse a side file written by another save than the .xmodel (its token differs)."""
    if not (isinstance(side, dict) and isinstance(side.get("location"), str) and isinstance(side.get("token"), str)):
        raise ModelFileError(f"{label}: xgraph metadata is damaged: 'side_file' is not a location and token")
    token = arrays.get(TOKEN_TENSOR)
    if token is None or token.tobytes().hex() != side["token"]:
        raise ModelFileError(f"{label}: side data file {side['location']!r} was not written with this .xmodel "
                             "(its token differs): the pair is mismatched; save or compile the model again")


def _restore_tree(build: GraphBuilder, node: dict, dec: DecodedValues) -> None:
    """The subgraph tree; `dec` (the value table) reads node attrs."""
    graph = build.graph
    root = graph.get_root_subgraph()
    build.set_annotations(root, dec.attrs(node.get("attrs", {}), "the root subgraph"))
    child_names: dict[Subgraph, set[str]] = {}
    leaves: list[tuple[Subgraph, Any]] = []  # each leaf with what its "ops" holds, in the order of the walk

    def add(parent: Subgraph, spec: Any, depth: int) -> None:
        if depth > MAX_JSON_DEPTH:
            dec.fail(f"subgraph tree deeper than {MAX_JSON_DEPTH}")
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            dec.fail(f"a subgraph under {parent.name!r} has no name")
        siblings = child_names.setdefault(parent, set())
        if spec["name"] in siblings:
            dec.fail(f"two subgraphs under {parent.name!r} are named {spec['name']!r}")
        siblings.add(spec["name"])
        sg = build.add_subgraph(parent, spec["name"], dec.attrs(spec.get("attrs", {}), f"subgraph {spec['name']!r}"))
        if "children" in spec:
            kids = spec["children"]
            if not isinstance(kids, list) or not kids:
                dec.fail(f"subgraph {sg.name!r} has an empty or malformed children list")
            for k in kids:
                add(sg, k, depth + 1)
            return
        leaves.append((sg, spec.get("ops")))

    kids = node.get("children")
    if kids is None:
        return
    if not isinstance(kids, list):
        dec.fail("the root's children are not a list")
    for k in kids:
        add(root, k, 1)
    _place_leaves(build, leaves, dec)


def _place_leaves(build: GraphBuilder, leaves: "list[tuple[Subgraph, Any]]", dec: DecodedValues) -> None:
    """Put each op in the leaf that names it: every op of the graph in exactly one leaf. Checked for all the
    leaves at once (C passes over one list of every name); a problem is then named leaf by leaf, in order."""
    ops = {op.name: op for op in build.graph.get_ops()}
    lists = [names for _, names in leaves]
    if all(type(names) is list and names for names in lists):
        every = list(chain.from_iterable(lists))
        if is_text(*every) and len(every) == len(ops) and len(set(every)) == len(every):
            found = list(map(ops.get, every))
            if None not in found:  # each op of the graph named once: placed leaf by leaf
                at = 0
                for sg, names in leaves:
                    build.place_ops(sg, found[at:at + len(names)])
                    at += len(names)
                return
    claimed: set[str] = set()  # ops placed in a leaf already (which leaf: `leaf_of`)
    leaf_of = build.graph.get_leaf_subgraph
    for sg, names in leaves:
        if not isinstance(names, list) or not names or not is_text(*names):
            dec.fail(f"leaf subgraph {sg.name!r} has no op list")
        for n in names:
            op = ops.get(n)
            if op is None:
                dec.fail(f"subgraph {sg.name!r} names op {n!r}, which the graph does not have")
            if n in claimed:
                dec.fail(f"op {n!r} is in both subgraph {leaf_of(op).name!r} and {sg.name!r}")
            claimed.add(n)
            build.place_ops(sg, [op])
    if len(claimed) != len(ops):  # claimed names are distinct ops of the graph
        missing = [name for name in ops if name not in claimed]
        dec.fail(f"the subgraph tree leaves ops out: {missing[:5]}")


def from_model_proto(model: onnx.ModelProto, label: str, graph_class: type[GraphCore] = GraphCore,
                     mapped: dict[str, np.ndarray] | None = None, nodes: "Nodes | None" = None) -> GraphCore:
    """Rebuild a `graph_class` graph from an .xmodel ModelProto (data inline and checked, or for
    the weights named in `mapped`, mapped from the side file); `nodes`: its nodes as the safe
    reader read them."""
    check_text(model, label)
    meta = _read_meta(model, label)
    arrays: dict[str, np.ndarray] = {}
    reserved = frozenset(i.name for i in model.graph.initializer if i.name.startswith(ARRAY_PREFIX))
    for init in model.graph.initializer:
        if init.name in reserved:
            try:
                mapped_array = (mapped or {}).get(init.name) if init.data_location == onnx.TensorProto.EXTERNAL else None
                arrays[init.name] = onnx.numpy_helper.to_array(init) if mapped_array is None else mapped_array
            except Exception as e:  # malformed tensor data
                raise ModelFileError(f"{label}: attribute array {init.name!r} cannot be read: {e}") from None
    dec = Decoder(arrays, label)
    if "side_file" in meta:
        _check_side_file(meta["side_file"], arrays, label)
    if reserved:
        keep = [i for i in model.graph.initializer if i.name not in reserved]
        keep_inputs = [i for i in model.graph.input if i.name not in reserved]
        del model.graph.initializer[:]
        model.graph.initializer.extend(keep)
        del model.graph.input[:]
        model.graph.input.extend(keep_inputs)
    graph = graph_from_model_proto(model, label, infer_shapes=False, graph_class=graph_class, mapped=mapped,
                                   nodes=nodes)
    graph.model_info["metadata"].pop(META_KEY, None)
    g = meta["graph"]
    if not isinstance(g.get("name"), str):
        dec.fail("graph name missing")
    graph.name = g["name"]
    build = GraphBuilder(graph)
    build.set_annotations(graph, dec.attrs(g.get("attrs", {}), "the graph"))
    order = meta["op_order"]
    ops = {op.name: op for op in graph.get_ops()}  # name -> op, as the import keyed them
    if not is_text(*order) or len(order) != len(ops) or set(order) != set(ops):
        dec.fail("op order does not list exactly the graph's ops")
    tensor_order = meta.get("tensor_order")
    if not isinstance(tensor_order, list) or not is_text(*tensor_order) \
            or not {t.name for t in graph.get_tensors()} >= set(tensor_order):
        dec.fail("tensor order is missing or names unknown tensors")
    build.reorder(order, tensor_order)
    for name in meta["op_annotations"]:  # always empty in version 2: annotations are columns
        dec.fail(f"annotations for unknown op {name!r}" if name not in ops else
                 f"op {name!r} has a per-op annotation record, which version 2 keeps in 'op_annotation_columns'")
    values = DecodedValues(meta["values"], dec)
    op_list = graph.get_ops()  # in op_order now
    for key, column in meta["op_annotation_columns"].items():
        write_op_annotations(graph, op_list, {key: values.column(key, column, len(op_list))}, MISSING)
    for name, attrs in meta["tensor_attrs"].items():
        if not isinstance(name, str) or not graph.has_tensor(name):
            dec.fail(f"attrs for unknown tensor {name!r}")
        build.set_annotations(graph.get_tensor(name), dec.attrs(attrs, f"tensor {name!r}"))
    if [t.name for t in graph.get_input_tensors()] != meta["inputs"]:
        dec.fail("graph inputs do not match the recorded inputs")
    _restore_tree(build, meta["tree"], values)
    build.finish()
    check_known_attrs(graph, label)  # attrs xgraph reads back hold what it writes
    read_gears(model, graph, label, lambda gear, where: from_model_proto(gear, where, graph_class))
    return graph


def deserialize(src: str | os.PathLike | bytes, graph_class: type[GraphCore] = GraphCore) -> GraphCore:
    """Load an .xmodel from a path or bytes, as a `graph_class` graph."""
    def once() -> GraphCore:
        mapped: dict[str, np.ndarray] = {}
        model, _, label, inv = read_model_inventory(src, mapped=mapped)
        nodes = inv.nodes
        del inv
        return from_model_proto(model, label, graph_class, mapped, nodes)
    return read_consistently(src, once)


def load(src: str | os.PathLike | bytes | onnx.ModelProto, graph_class: type[GraphCore] = GraphCore) -> GraphCore:
    """Load an .onnx or .xmodel (by content: .xmodel files carry xgraph metadata), as a `graph_class` graph.

    `xgraph.load` is this with `graph_class=xgraph.Graph`.
    """
    def once() -> GraphCore:
        mapped: dict[str, np.ndarray] = {}
        model, _, label, inv = read_model_inventory(src, mapped=mapped)
        if any(p.key == META_KEY for p in model.metadata_props):
            nodes = inv.nodes
            del inv
            return from_model_proto(model, label, graph_class, mapped, nodes)
        # the reader's inventory is not handed on: held through the build, it raised a 100k-op compile's peak
        # memory by a tenth (measured); the one fact the inference budget reads from it is taken here instead
        largest, nodes = largest_declared_dim(model, label, inv), inv.nodes
        del inv
        return graph_from_model_proto(model, label, graph_class=graph_class, mapped=mapped, largest_dim=largest,
                                      nodes=nodes)
    return read_consistently(src, once)


__all__ = ["deserialize", "load", "serialize", "to_model_proto", "from_model_proto"]
