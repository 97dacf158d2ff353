"""The installed package holds no test fixtures: the helpers tests, benchmarks and the fuzz
harness share live in testing/ at the repository root, which setuptools does not ship."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "xgraph"
#: Fixture-module names: a file of the package with one of these names holds test glue.
FIXTURE_MODULES = {"testing.py", "conftest.py", "fixtures.py", "int8_models.py"}
#: Names defined by testing/ that the package also defines with a meaning of its own.
OWN_MEANING = {"place": "xgraph.compiler.placement.place, the partitioner's placement"}


def _modules(folder: Path) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(folder.rglob("*.py"))}


def _top_level_functions(tree: ast.Module) -> set[str]:
    return {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_no_fixture_module_in_the_package():
    named = [str(p.relative_to(ROOT)) for p in PACKAGE.rglob("*.py")
             if p.name in FIXTURE_MODULES or p.name.startswith("test_")]
    assert named == []


def test_the_package_never_imports_testing():
    importing = []
    for path, tree in _modules(PACKAGE).items():
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            importing += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] == "testing"]
    assert importing == []


def test_no_fixture_is_defined_in_the_package():
    fixtures = set().union(*(_top_level_functions(t) for t in _modules(ROOT / "testing").values()))
    fixtures = {name for name in fixtures if not name.startswith("_")} - set(OWN_MEANING)
    assert {"place", "zoo_model", "run_node", "load_script", "qdq_resnet50"} - set(OWN_MEANING) <= fixtures
    defined = [f"{path.relative_to(ROOT)}: {name}" for path, tree in _modules(PACKAGE).items()
               for name in sorted(_top_level_functions(tree) & fixtures)]
    assert defined == []
