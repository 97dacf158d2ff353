"""Plugin name resolution: entry point, then plugin path, then importable module; loading rules."""
from __future__ import annotations

import importlib.metadata
import os
import sys
import textwrap
from pathlib import Path

import pytest

from xgraph import XGraphError
from xgraph.errors import PluginError
from xgraph.plugins import Plugin, load_plugin
from xgraph.plugins.loader import ENTRY_POINT_GROUP, PATH_ENV, discover_plugins, plugin_search_path

PLUGIN = """
from xgraph.plugins import Plugin
ORIGIN = {origin!r}
RUNS = globals().get("RUNS", 0) + 1

class P(Plugin):
    pass

def get_plugin():
    return P()
"""


def write_plugin(directory: Path, name: str, origin: str, package: bool = False) -> Path:
    """A plugin module (file or package) whose ORIGIN says which copy was loaded."""
    directory.mkdir(parents=True, exist_ok=True)
    if package:
        (directory / name).mkdir()
        path = directory / name / "__init__.py"
    else:
        path = directory / f"{name}.py"
    path.write_text(PLUGIN.format(origin=origin))
    return path


def fake_entry_points(monkeypatch, *entries: tuple[str, str]) -> None:
    """Make importlib.metadata report `entries` (name, value) in the xgraph.plugins group."""
    eps = [importlib.metadata.EntryPoint(name=n, value=v, group=ENTRY_POINT_GROUP) for n, v in entries]

    def entry_points(**params):
        assert params == {"group": ENTRY_POINT_GROUP}
        return eps

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


@pytest.fixture(autouse=True)
def no_environment(monkeypatch):
    """Tests start with no XGRAPH_PLUGIN_PATH and no installed plugin entry points."""
    monkeypatch.delenv(PATH_ENV, raising=False)
    fake_entry_points(monkeypatch)


def origin(name: str, plugin_path=None) -> str:
    return load_plugin(name, plugin_path).module.ORIGIN


# -- resolution order --------------------------------------------------------------------------
def test_entry_point_beats_plugin_path_beats_module(tmp_path, monkeypatch):
    """The same name provided three ways resolves in API order; removing each reveals the next."""
    importable = tmp_path / "site"
    write_plugin(importable, "order_ep_impl", "entry point")
    write_plugin(importable, "order_dup", "module")
    monkeypatch.syspath_prepend(str(importable))
    write_plugin(tmp_path / "dir", "order_dup", "plugin path")

    fake_entry_points(monkeypatch, ("order_dup", "order_ep_impl"))
    loaded = load_plugin("order_dup", [str(tmp_path / "dir")])
    assert loaded.module.ORIGIN == "entry point"
    assert loaded.source.startswith("entry point order_dup = order_ep_impl")

    fake_entry_points(monkeypatch)
    assert origin("order_dup", [str(tmp_path / "dir")]) == "plugin path"
    assert origin("order_dup", []) == "module"


def test_plugin_path_list_comes_before_environment(tmp_path, monkeypatch):
    write_plugin(tmp_path / "a", "env_order", "list")
    write_plugin(tmp_path / "b", "env_order", "env")
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "b"))
    assert origin("env_order", [str(tmp_path / "a")]) == "list"
    assert origin("env_order") == "env"


def test_environment_path_is_pathsep_separated_and_skips_empty_entries(tmp_path, monkeypatch):
    first, second = tmp_path / "first", tmp_path / "second"
    monkeypatch.setenv(PATH_ENV, os.pathsep.join(["", str(first), "", str(second), ""]))
    assert plugin_search_path(["given"]) == ["given", str(first), str(second)]
    assert plugin_search_path() == [str(first), str(second)]
    write_plugin(second, "in_second", "second")
    write_plugin(first, "in_first", "first")
    assert origin("in_second") == "second"
    assert origin("in_first") == "first"


def test_earlier_directory_wins_and_package_beats_file(tmp_path):
    write_plugin(tmp_path / "one", "shadowed", "one")
    write_plugin(tmp_path / "two", "shadowed", "two")
    assert origin("shadowed", [str(tmp_path / "one"), str(tmp_path / "two")]) == "one"
    write_plugin(tmp_path / "three", "both", "file")
    write_plugin(tmp_path / "three", "both", "package", package=True)
    assert origin("both", [str(tmp_path / "three")]) == "package"


# -- loading -----------------------------------------------------------------------------------
def test_same_file_name_in_two_directories_do_not_collide(tmp_path):
    write_plugin(tmp_path / "x", "twin", "x")
    write_plugin(tmp_path / "y", "twin", "y")
    mx = load_plugin("twin", [str(tmp_path / "x")]).module
    my = load_plugin("twin", [str(tmp_path / "y")]).module
    assert (mx.ORIGIN, my.ORIGIN) == ("x", "y")
    assert mx.__name__ != my.__name__ and sys.modules["twin"] is mx  # the first keeps its own name
    assert sys.modules[mx.__name__] is mx and sys.modules[my.__name__] is my


def test_a_file_is_imported_once(tmp_path):
    write_plugin(tmp_path, "once", "once")
    first = load_plugin("once", [str(tmp_path)])
    second = load_plugin("once", [str(tmp_path), str(tmp_path / "other")])
    assert first.module is second.module and first.module.RUNS == 1


def test_a_file_already_imported_under_another_name_is_reused(tmp_path, monkeypatch):
    write_plugin(tmp_path, "reused_mod", "reused")
    monkeypatch.syspath_prepend(str(tmp_path))
    import reused_mod  # noqa: F401  (as pytest or a user script would)
    loaded = load_plugin("reused_mod", [str(tmp_path)])
    assert loaded.module is sys.modules["reused_mod"] and loaded.module.RUNS == 1


def test_package_plugin_with_relative_import(tmp_path):
    pkg = tmp_path / "pkgplug"
    pkg.mkdir()
    (pkg / "impl.py").write_text(textwrap.dedent("""
        from xgraph.plugins import Plugin

        class P(Plugin):
            def get_device(self):
                return "HELPED"
    """))
    (pkg / "__init__.py").write_text("from .impl import P\n\ndef get_plugin():\n    return P()\n")
    plugin = load_plugin("pkgplug", [str(tmp_path)]).get_plugin()
    assert plugin.get_device() == "HELPED"
    assert plugin.get_plugin_name() == "pkgplug"


def test_module_plugin_by_dotted_name(tmp_path, monkeypatch):
    pkg = tmp_path / "dotted_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    write_plugin(pkg, "inner", "dotted")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = load_plugin("dotted_pkg.inner")
    assert loaded.module.ORIGIN == "dotted" and loaded.source.startswith("module dotted_pkg.inner")
    assert loaded.get_plugin().get_plugin_name() == "dotted_pkg.inner"


def test_entry_point_to_a_get_plugin_callable(tmp_path, monkeypatch):
    write_plugin(tmp_path, "ep_callable_impl", "callable")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_entry_points(monkeypatch, ("ep_callable", "ep_callable_impl:get_plugin"))
    loaded = load_plugin("ep_callable")
    assert isinstance(loaded.get_plugin(), Plugin)
    assert loaded.module.ORIGIN == "callable"


# -- errors ------------------------------------------------------------------------------------
def test_unknown_name_says_everywhere_it_looked(tmp_path, monkeypatch):
    write_plugin(tmp_path / "site", "other_ep_impl", "x")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    fake_entry_points(monkeypatch, ("other_ep", "other_ep_impl"))
    missing = tmp_path / "missing"
    monkeypatch.setenv(PATH_ENV, str(tmp_path))
    with pytest.raises(PluginError) as info:
        load_plugin("no_such_plugin_xyz", [str(missing)])
    msg = str(info.value)
    assert "no plugin named 'no_such_plugin_xyz'" in msg
    assert ENTRY_POINT_GROUP in msg and "other_ep" in msg
    assert f"{missing} (does not exist)" in msg and str(tmp_path) in msg
    assert "no_such_plugin_xyz.py" in msg and "importable module" in msg
    assert isinstance(info.value, XGraphError)


@pytest.mark.parametrize("name", ["../outside", "a/b", "/abs/path", ".hidden"])
def test_path_like_names_never_leave_the_plugin_directories(tmp_path, name):
    (tmp_path / "dir").mkdir()
    write_plugin(tmp_path, "outside", "escaped")
    with pytest.raises(PluginError, match="no plugin named"):
        load_plugin(name, [str(tmp_path / "dir")])


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_name_must_be_a_non_empty_str(name):
    with pytest.raises(PluginError, match="non-empty str"):
        load_plugin(name)


def test_module_without_get_plugin(tmp_path):
    (tmp_path / "no_factory.py").write_text("X = 1\n")
    with pytest.raises(PluginError, match=r"plugin 'no_factory' .* has no get_plugin\(\)"):
        load_plugin("no_factory", [str(tmp_path)])


def test_get_plugin_that_is_not_callable(tmp_path):
    (tmp_path / "bad_factory.py").write_text("get_plugin = 42\n")
    with pytest.raises(PluginError, match="'bad_factory'.*get_plugin is a int"):
        load_plugin("bad_factory", [str(tmp_path)])


def test_import_error_names_the_file_chains_the_cause_and_leaves_no_module(tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("raise RuntimeError('plugin is broken')\n")
    before = set(sys.modules)
    with pytest.raises(PluginError, match=r"plugin 'broken': importing .*broken.py failed: RuntimeError") as info:
        load_plugin("broken", [str(tmp_path)])
    assert isinstance(info.value.__cause__, RuntimeError)
    assert set(sys.modules) == before
    path.write_text(PLUGIN.format(origin="fixed"))
    assert origin("broken", [str(tmp_path)]) == "fixed"


def test_entry_point_failing_to_import(monkeypatch):
    fake_entry_points(monkeypatch, ("ep_broken", "no_such_module_for_xgraph_tests"))
    with pytest.raises(PluginError, match="plugin 'ep_broken': importing entry point ep_broken") as info:
        load_plugin("ep_broken")
    assert isinstance(info.value.__cause__, ImportError)


def test_entry_point_to_a_non_callable(tmp_path, monkeypatch):
    (tmp_path / "ep_value_impl.py").write_text("VALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    fake_entry_points(monkeypatch, ("ep_value", "ep_value_impl:VALUE"))
    with pytest.raises(PluginError, match="not a module or get_plugin callable"):
        load_plugin("ep_value")


def test_two_entry_points_with_one_name_are_ambiguous(monkeypatch):
    fake_entry_points(monkeypatch, ("twice", "pkg_a.plugin"), ("twice", "pkg_b.plugin"))
    with pytest.raises(PluginError, match=r"ambiguous.*pkg_a\.plugin.*pkg_b\.plugin"):
        load_plugin("twice")


def test_module_failing_to_import_is_not_reported_as_missing(tmp_path, monkeypatch):
    (tmp_path / "mod_broken_import.py").write_text("import no_such_dependency_for_xgraph_tests\n")
    monkeypatch.syspath_prepend(str(tmp_path / "nowhere"))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match="importing module 'mod_broken_import' failed: ModuleNotFoundError"):
        load_plugin("mod_broken_import")


# -- discovery and default names ---------------------------------------------------------------
def test_discover_lists_entry_points_then_path_plugins(tmp_path, monkeypatch):
    fake_entry_points(monkeypatch, ("ep_listed", "somewhere.listed"))
    write_plugin(tmp_path, "file_plugin", "f")
    write_plugin(tmp_path, "pkg_plugin", "p", package=True)
    (tmp_path / "test_not_a_plugin.py").write_text("")
    (tmp_path / "_private.py").write_text("")
    (tmp_path / "notes.txt").write_text("")
    found = discover_plugins([str(tmp_path), str(tmp_path / "missing")])
    assert [n for n, _ in found] == ["ep_listed", "file_plugin", "pkg_plugin"]
    assert found[1][1] == str(tmp_path / "file_plugin.py")


def test_default_plugin_name_and_device():
    class Inline(Plugin):
        pass

    plugin = Inline()
    assert plugin.get_plugin_name() == __name__
    assert plugin.get_device() == __name__.upper()
    assert plugin.get_runner() == {"run": "cpu", "sim": "cpu", "ref": "cpu"}
    assert plugin.partition(None) == set() and plugin.compile(None) is None
    Inline.__module__ = "__main__"
    assert Inline().get_plugin_name() == "Inline"


# -- plugins are ordinary Python ---------------------------------------------------------------
def test_file_plugin_imports_its_sibling_module(tmp_path):
    (tmp_path / "sibling_helpers.py").write_text("DEVICE = 'FROM_SIBLING'\n")
    (tmp_path / "uses_sibling.py").write_text(textwrap.dedent("""
        from sibling_helpers import DEVICE
        from xgraph.plugins import Plugin

        class P(Plugin):
            def get_device(self):
                return DEVICE

        def get_plugin():
            return P()
    """))
    plugin = load_plugin("uses_sibling", [str(tmp_path)]).get_plugin()
    assert plugin.get_device() == "FROM_SIBLING"


def test_package_plugin_imports_itself_by_name_without_a_second_copy(tmp_path):
    pkg = tmp_path / "selfpkg"
    pkg.mkdir()
    (pkg / "runner.py").write_text("COUNT = globals().get('COUNT', 0) + 1\nNAME = 'R'\n")
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        from selfpkg.runner import NAME
        from . import runner as relative_runner
        from xgraph.plugins import Plugin

        class P(Plugin):
            def get_device(self):
                return NAME

        def get_plugin():
            return P()
    """))
    loaded = load_plugin("selfpkg", [str(tmp_path)])
    assert loaded.get_plugin().get_device() == "R"
    assert loaded.module.relative_runner is sys.modules["selfpkg.runner"]  # one copy, both import styles
    assert loaded.module.relative_runner.COUNT == 1


def test_failed_import_leaves_neither_modules_nor_the_path_entry(tmp_path):
    (tmp_path / "half_helper.py").write_text("X = 1\n")
    (tmp_path / "half.py").write_text("import half_helper\nraise ValueError('no')\n")
    before, path_before = set(sys.modules), list(sys.path)
    with pytest.raises(PluginError, match=r"half.py:2 \(--debug shows the traceback\)"):
        load_plugin("half", [str(tmp_path)])
    assert set(sys.modules) == before and sys.path == path_before


def test_syntax_error_is_located(tmp_path):
    (tmp_path / "bad_syntax.py").write_text("x = 1\ndef f(:\n")
    with pytest.raises(PluginError, match=r"SyntaxError.*bad_syntax.py:2 "):
        load_plugin("bad_syntax", [str(tmp_path)])


def test_plugin_error_names_the_line_of_the_plugin_that_raised(tmp_path):
    from xgraph import Graph
    from xgraph.plugins import run_plugin_chain
    (tmp_path / "divides.py").write_text(textwrap.dedent("""
        from xgraph.plugins import Plugin

        def ratio(graph):
            return len(graph.get_ops()) / 0

        class P(Plugin):
            def partition(self, graph):
                return ratio(graph)

        def get_plugin():
            return P()
    """))
    g = Graph("g")
    g.create_input("x", (1,))
    g.create_op("a", "Relu", inputs=["x"])
    g.get_root_subgraph().create_child_subgraph()
    with pytest.raises(PluginError) as info:
        run_plugin_chain(g, ["divides"], [str(tmp_path)])
    message = str(info.value)
    assert f"ZeroDivisionError: division by zero at {tmp_path / 'divides.py'}:5 (--debug shows the traceback)" \
        in message


def test_plugin_options_reach_get_plugin_and_need_a_parameter(tmp_path):
    from xgraph import Graph
    from xgraph.plugins import run_plugin_chain
    (tmp_path / "with_options.py").write_text(textwrap.dedent("""
        from xgraph.plugins import Plugin

        class P(Plugin):
            def __init__(self, options):
                self.options = options
            def get_device(self):
                return self.options.get("device", "DEFAULT")

        def get_plugin(options):
            return P(options)
    """))
    (tmp_path / "no_options.py").write_text(PLUGIN.format(origin="x"))
    g = Graph("g")
    g.create_input("x", (1,))
    g.create_op("a", "Relu", inputs=["x"])
    g.get_root_subgraph().create_child_subgraph()
    [record] = run_plugin_chain(g, ["with_options"], [str(tmp_path)], {"with_options": {"device": "NPU7"}})
    assert record["device"] == "NPU7" and record["options"] == {"device": "NPU7"}
    [record] = run_plugin_chain(g, ["with_options"], [str(tmp_path)])
    assert record["device"] == "DEFAULT"
    with pytest.raises(PluginError, match=r"get_plugin\(\) takes no argument; define get_plugin\(options\)"):
        run_plugin_chain(g, ["no_options"], [str(tmp_path)], {"no_options": {"a": 1}})
    with pytest.raises(PluginError, match=r"plugin options given for 'other'"):
        run_plugin_chain(g, ["no_options"], [str(tmp_path)], {"other": {}})


@pytest.mark.parametrize("options, message", [
    ({"plugins": "a", "plugin_options": {"b": {}}}, r"names plugin 'b'.*not in \"plugins\" \(listed: a\)"),
    ({"plugin_options": {"a": {}}}, r"names plugin 'a'.*listed: none"),
    ({"plugins": "a", "plugin_options": {"a": 3}}, r"entry 'a': 3 is not an object"),
    ({"plugins": "a", "plugin_options": ["a"]}, r"'plugin_options' has invalid value"),
])
def test_plugin_options_are_validated(options, message):
    from xgraph.compiler.options import parse_options
    from xgraph.errors import OptionError
    with pytest.raises(OptionError, match=message):
        parse_options(options)


def test_plugin_options_round_trip_through_to_dict():
    from xgraph.compiler.options import parse_options
    options = parse_options({"plugins": "a,b", "plugin_options": {"b": {"k": [1, "x"]}}})
    assert options.plugin_options == {"b": {"k": [1, "x"]}}
    assert parse_options(options.to_json()) == options


@pytest.mark.parametrize("source, takes", [
    ("def get_plugin(): pass", False),
    ("def get_plugin(options): pass", True),
    ("def get_plugin(options=None): pass", True),
    ("def get_plugin(script={'k': 1}): pass", False),  # a closure default, not an options parameter
    ("def get_plugin(*args): pass", False),
    ("def get_plugin(cfg, extra=2): pass", True),
])
def test_which_factories_take_options(source, takes):
    from xgraph.plugins.chain import takes_options
    namespace: dict = {}
    exec(source, namespace)
    assert takes_options(namespace["get_plugin"]) is takes
