"""Loading by name: a plugin file as a plugin-path entry, "did you mean", the class-for-instance mistake,
discovery by reading the source (never running it), and problems located at the plugin's lines."""
from __future__ import annotations

import textwrap

import pytest

import xgraph
from xgraph.errors import PluginError
from xgraph.plugins.loader import defines_get_plugin, discover_plugins, load_plugin



@pytest.fixture
def plugin_dir(tmp_path):
    (tmp_path / "smfc.py").write_text("from xgraph.plugins import Plugin\n\ndef get_plugin():\n    return Plugin()\n")
    (tmp_path / "as_class.py").write_text(textwrap.dedent('''
        from xgraph.plugins import Plugin

        class AsClass(Plugin):
            pass

        def get_plugin():
            return AsClass
    '''))
    (tmp_path / "garbage.py").write_text(textwrap.dedent('''
        from xgraph.plugins import Plugin

        class Garbage(Plugin):
            def get_device(self):
                return 3

        def get_plugin():
            return Garbage()
    '''))
    (tmp_path / "tool.py").write_text("raise SystemExit('run')\n")
    (tmp_path / "reexport.py").write_text("from smfc import get_plugin\n")
    return tmp_path


def _model():
    g = xgraph.Graph("g")
    g.create_input("x", [1, 4])
    g.create_op("r", "Relu", inputs=["x"])
    return g


def test_a_plugin_file_is_a_plugin_path_entry(plugin_dir):
    loaded = load_plugin("smfc", [str(plugin_dir / "smfc.py")])
    assert loaded.source == str(plugin_dir / "smfc.py")
    with pytest.raises(PluginError) as caught:
        load_plugin("other", [str(plugin_dir / "smfc.py")])
    assert "(a file, providing 'smfc')" in str(caught.value) and "does not exist" not in str(caught.value)


def test_a_misspelt_name_gets_did_you_mean(plugin_dir):
    with pytest.raises(PluginError, match=r"no plugin named 'smcf' \(did you mean 'smfc'\?\)"):
        load_plugin("smcf", [str(plugin_dir)])


def test_discovery_reads_sources_and_runs_nothing(plugin_dir):
    skipped: list[str] = []
    names = [name for name, _ in discover_plugins([str(plugin_dir)], skipped)]
    assert names == ["as_class", "garbage", "reexport", "smfc"]
    assert skipped == [str(plugin_dir / "tool.py")]
    assert defines_get_plugin(str(plugin_dir / "reexport.py")) and not defines_get_plugin(str(plugin_dir / "tool.py"))


def test_get_plugin_returning_the_class_is_named_as_such(plugin_dir):
    with pytest.raises(PluginError) as caught:
        xgraph.compile(_model(), {"plugins": "as_class"}, plugin_path=[str(plugin_dir)])
    assert (f"get_plugin() returned the class AsClass; return an instance: AsClass() at "
            f"{plugin_dir / 'as_class.py'}:7") in str(caught.value)


def test_a_bad_return_value_is_located_at_the_method(plugin_dir):
    with pytest.raises(PluginError) as caught:
        xgraph.compile(_model(), {"plugins": "garbage"}, plugin_path=[str(plugin_dir)])
    assert f"get_device() returned 3; return a non-empty str such as 'SMFC' at {plugin_dir / 'garbage.py'}:5" \
        in str(caught.value)
