"""The layering of docs/architecture.md holds: stages import only the stages beneath them, and no
module imports itself back through others. Imports inside functions count (grimp reads them all);
imports under `if TYPE_CHECKING:` do not, since they never run."""
from __future__ import annotations

from pathlib import Path

import grimp
import networkx as nx
import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_import_linter_contracts_hold(monkeypatch):
    """The contracts in pyproject.toml ([tool.importlinter]) are all kept."""
    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


@pytest.fixture(scope="module")
def import_graph():
    return grimp.build_graph("xgraph", exclude_type_checking_imports=True, cache_dir=None)


def test_no_module_import_cycles(import_graph):
    """No cycle between modules, at any depth: every strongly connected component is one module."""
    g = nx.DiGraph()
    for module in import_graph.modules:
        g.add_node(module)
        for imported in import_graph.find_modules_directly_imported_by(module):
            g.add_edge(module, imported)
    # A package's __init__ re-exporting its own modules is not a cycle of design: drop edges from a
    # package to modules inside it, then look for cycles.
    g.remove_edges_from([(a, b) for a, b in list(g.edges) if b.startswith(a + ".")])
    cycles = [sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1]
    assert cycles == []
