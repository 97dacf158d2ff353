"""Who touches the IR's private fields: the index, the writer and the state capture, and no other module.

Scans the package source (ast) for every `x._field` where `_field` is a private field of an IR class
(`Op`, `Tensor`, `Subgraph`, `GraphCore`, `Graph`: their `__slots__` and the `self._field` they
assign) and `x` is not `self`/`cls`: one object reading or writing another's fields. Only the three
modules in `OWNERS` may; everything else goes through `graph.index()`, `xgraph/ir/builder.py` or the
public API.
"""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "xgraph"
CLASSES = {"Op": "ir/op.py", "Tensor": "ir/tensor.py", "Subgraph": "ir/subgraph.py",
           "GraphCore": "ir/graph_core.py", "Graph": "ir/graph.py"}
#: the derived index, the one writer, the state capture
OWNERS = {"ir/index.py", "ir/builder.py", "ir/state.py"}


def private_fields() -> set[str]:
    """The underscore fields the IR classes declare in `__slots__` or assign on `self`."""
    fields: set[str] = set()
    for cls, path in CLASSES.items():
        for node in ast.walk(ast.parse((PACKAGE / path).read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ClassDef) and node.name == cls):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__slots__"
                                                       for t in sub.targets):
                    fields |= {c.value for c in ast.walk(sub.value) if isinstance(c, ast.Constant)
                               and isinstance(c.value, str) and c.value.startswith("_")
                               and not c.value.startswith("__")}
                targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] \
                    if isinstance(sub, ast.AnnAssign) else []
                fields |= {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                           and t.value.id == "self" and t.attr.startswith("_") and not t.attr.startswith("__")}
    return fields


#: the calls that reach a field by its name as a string
BY_NAME = {"getattr", "setattr", "hasattr", "delattr", "attrgetter"}


def _names_a_field(node: ast.AST, fields: set[str]) -> bool:
    """`getattr(x, "_field")`, `attrgetter("_field")` and the like: a private field reached by its name."""
    if not isinstance(node, ast.Call):
        return False
    func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
    return func in BY_NAME and any(isinstance(a, ast.Constant) and a.value in fields for a in node.args)


def touching(fields: set[str]) -> dict[str, list[str]]:
    """Module (relative to the package) -> the lines where it touches another object's private IR field."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and node.attr in fields \
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")) \
                    or _names_a_field(node, fields):
                found.setdefault(path.relative_to(PACKAGE).as_posix(), []).append(
                    f"{node.lineno}: {ast.get_source_segment(source, node)}")
    return found


def test_the_scan_finds_the_fields_of_every_ir_class():
    assert {"_inputs", "_outputs", "_consumers", "_producer", "_children", "_leaf_of", "_attrs"} <= private_fields()


def test_only_the_index_the_writer_and_the_state_capture_touch_ir_private_fields():
    found = touching(private_fields())
    strangers = {m: lines[:3] for m, lines in found.items() if m not in OWNERS}
    assert strangers == {}, "read and write IR state through graph.index(), xgraph/ir/builder.py or the public API"
    assert set(found) == OWNERS  # the scan sees the owners' own accesses: it is looking in the right place


def test_the_scan_sees_fields_reached_by_name():
    fields = private_fields()
    calls = [node for node in ast.walk(ast.parse(
        'map(attrgetter("_attr_types"), ops); getattr(op, "_inputs"); operator.attrgetter("_children")(sg); '
        'getattr(runner, "_executor"); attrgetter("name")')) if isinstance(node, ast.Call)]
    assert sorted(ast.unparse(c) for c in calls if _names_a_field(c, fields)) == [
        "attrgetter('_attr_types')", "getattr(op, '_inputs')", "operator.attrgetter('_children')"]
