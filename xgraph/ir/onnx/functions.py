"""Model-local functions expanded at import, each op named by the call chain that made it.

Exporters write repeated blocks (a decoder layer, an attention) as ONNX local functions. A call
stays one opaque op that no device and no kernel knows, so the importer expands every call with
onnx's own inliner (`onnx.inliner.inline_selected_functions`: renaming, attribute references and
nested calls are its job). What the inliner does not keep is *where* an op came from: it names
the expanded nodes `mul__4`. Before inlining, every call site therefore gets its own copy of the
function whose nodes carry their full name in node metadata, and afterwards each node takes that
name: the op `mul` of function `Scale`, called as `scale` inside the `Block` called as `block0`,
is named `block0/scale/mul`. The call chain is the name's prefix up to the last `/`, so
`op.name.startswith("block0/")` selects one block in `xgraph.partition.filter` and in template
filters (docs/plugins.md). Names that would clash are made unique by the importer as usual.

Functions that no node calls (such as the `.xmodel`'s gear records) are left as they are.
"""
from __future__ import annotations

from typing import Iterable

import onnx
import onnx.inliner

from xgraph.errors import ModelFileError

#: node metadata key holding the node's chained name while the inliner runs (removed afterwards)
_NAME_KEY = "xgraph.function_path"
#: separator between the call names of a chain and the node's own name
SCOPE_SEPARATOR = "/"


def _key(domain: str, name: str) -> tuple[str, str]:
    return ("" if domain == "ai.onnx" else domain, name)


def called_functions(model: onnx.ModelProto) -> set[tuple[str, str]]:
    """(domain, name) of the local functions the main graph calls, directly or through other functions."""
    local = {_key(f.domain, f.name): f for f in model.functions}
    if not local:
        return set()
    called: set[tuple[str, str]] = set()
    stack = [n for n in _all_nodes(model.graph.node)]
    while stack:
        node = stack.pop()
        key = _key(node.domain, node.op_type)
        if key in local and key not in called:
            called.add(key)
            stack.extend(_all_nodes(local[key].node))
    return called


def _all_nodes(nodes: Iterable[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """`nodes` and the nodes of their If/Loop/Scan bodies, at any depth."""
    out = []
    stack = list(nodes)
    while stack:
        node = stack.pop()
        out.append(node)
        for a in node.attribute:
            if a.HasField("g"):
                stack.extend(a.g.node)
            for g in a.graphs:
                stack.extend(g.node)
    return out


def _node_name(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"{node.op_type}_{index}"


def _specialise(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[onnx.FunctionProto]]:
    """(a copy of `model` where every call site of the main graph calls its own copy of its function,
    whose nodes carry their chained names in metadata (`_NAME_KEY`), those copies). Calls inside
    If/Loop/Scan bodies keep calling the original functions (their ops keep the inliner's names)."""
    local = {_key(f.domain, f.name): f for f in model.functions}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    made: list[onnx.FunctionProto] = []

    def rewrite(nodes, prefix: str) -> None:
        for index, node in enumerate(nodes):
            name = prefix + _node_name(node, index)
            if prefix:
                entry = node.metadata_props.add()
                entry.key, entry.value = _NAME_KEY, name
            function = local.get(_key(node.domain, node.op_type))
            if function is None:
                continue
            copy = onnx.FunctionProto()
            copy.CopyFrom(function)
            copy.name = f"{function.name}@{len(made)}"
            made.append(copy)
            node.op_type = copy.name
            rewrite(copy.node, name + SCOPE_SEPARATOR)

    rewrite(out.graph.node, "")
    out.functions.extend(made)
    return out, made


def _check_calls(model: onnx.ModelProto, label: str) -> None:
    """Refuse a call that passes more inputs or outputs than its function declares (the inliner would abort)."""
    local = {_key(f.domain, f.name): f for f in model.functions}
    for owner, nodes in (("the main graph", model.graph.node), *((f"function {f.name!r}", f.node)
                                                                 for f in model.functions)):
        for node in _all_nodes(nodes):
            f = local.get(_key(node.domain, node.op_type))
            if f is not None and (len(node.input) > len(f.input) or len(node.output) > len(f.output)):
                raise ModelFileError(f"{label}: node {node.name or node.op_type!r} in {owner} calls function "
                                     f"{f.name!r} with {len(node.input)} input(s) and {len(node.output)} output(s), "
                                     f"but it declares {len(f.input)} and {len(f.output)}; fix the call")


def inline_functions(model: onnx.ModelProto, label: str = "model") -> onnx.ModelProto:
    """`model` with every call of a local function expanded and named by its call chain; `model`
    itself when nothing calls one (the caller's proto is never changed). Callers check the expanded
    size first (`inference_budget.expanded_node_count`). ModelFileError for calls that cannot expand."""
    called = called_functions(model)
    if not called:
        return model
    _check_calls(model, label)
    special, made = _specialise(model)
    ids = [(f.domain, f.name) for f in (*model.functions, *made) if _key(f.domain, f.name) in called or f in made]
    try:
        inlined = onnx.inliner.inline_selected_functions(special, ids)
    except Exception as e:  # onnx's C++ inliner raises RuntimeError (and others) for malformed functions
        raise ModelFileError(f"{label}: its local functions cannot be expanded ({str(e).splitlines()[0][:200]}); "
                             "check each function's opset imports and calls against the model's") from None
    for node in inlined.graph.node:
        path = [p.value for p in node.metadata_props if p.key == _NAME_KEY]
        if path:
            node.name = path[-1]
            kept = [p for p in node.metadata_props if p.key != _NAME_KEY]
            del node.metadata_props[:]
            node.metadata_props.extend(kept)
    return inlined


__all__ = ["SCOPE_SEPARATOR", "called_functions", "inline_functions"]
