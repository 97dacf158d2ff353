"""Declared plugin options (get_options()): typos and wrong types are errors, defaults apply, the .xmodel
records the values used; undeclared plugins keep getting their dict unchecked. Template op types
nothing knows are warned about."""
from __future__ import annotations

import textwrap

import pytest

import xgraph
from xgraph.errors import OptionError, PluginError
from xgraph.plugins import PluginOption
from xgraph.plugins.settings import apply_options, describe_options

SMFC = '''
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin, PluginOption

def get_options():
    return [PluginOption("types", str, "Softmax", "comma-separated op types to take"),
            PluginOption("max_ops", int, 8, "largest subgraph"),
            PluginOption("scale", float, 1.0)]

class SMFC(Plugin):
    def __init__(self, options):
        self.options_seen = dict(options)

    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, self.options_seen["types"].split(",")))

    def compile(self, subgraph):
        subgraph.set_attr("seen", sorted(self.options_seen))

def get_plugin(options):
    return SMFC(options)
'''

LOOSE = '''
from xgraph.plugins import Plugin
SEEN = []
def get_plugin(options=None):
    SEEN.append(dict(options or {}))
    return Plugin()
'''

TYPO_TEMPLATE = '''
from xgraph import GraphTemplate
from xgraph.partition import filter_by_template, merge_subgraph
from xgraph.plugins import Plugin

ATTN = GraphTemplate("attn")
ATTN.add_op("mm", "MatMul")
ATTN.add_op("sm", "Softmx", inputs=[ATTN.get_op("mm")])

class Late(Plugin):
    def partition(self, graph):
        t = GraphTemplate("late")
        t.add_op("act", {"Relu", "Reluu"})
        return merge_subgraph(filter_by_template(graph, t))

def get_plugin():
    return Late()
'''


@pytest.fixture
def setup(tmp_path, chain_model):
    path = chain_model(tmp_path, [("Relu", "x", "relu"), ("Softmax", "relu", "sm")],
                       {"smfc": SMFC, "loose": LOOSE, "typo_template": TYPO_TEMPLATE})
    return tmp_path, path


def _compile(setup, options):
    plugin_dir, model = setup
    return xgraph.compile(model, options, plugin_path=[str(plugin_dir)])


def test_defaults_apply_and_the_xmodel_records_the_values(setup, tmp_path):
    compiled = _compile(setup, {"plugins": "smfc", "plugin_options": {"smfc": {"max_ops": 3, "scale": 2}}})
    [run] = compiled.get_attr("plugin_runs")
    assert run["options"] == {"types": "Softmax", "max_ops": 3, "scale": 2.0}
    sg = compiled.get_root_subgraph().find_child_subgraph_by_op("sm")
    assert sg.get_attr("device") == "SMFC" and sg.get_attr("seen") == ["max_ops", "scale", "types"]
    compiled.serialize(str(tmp_path / "m.xmodel"))
    loaded = xgraph.Graph.deserialize(str(tmp_path / "m.xmodel"))
    assert loaded.get_attr("plugin_runs")[0]["options"] == {"types": "Softmax", "max_ops": 3, "scale": 2.0}


def test_a_typo_is_an_error_with_did_you_mean(setup):
    with pytest.raises(OptionError) as caught:
        _compile(setup, {"plugins": "smfc", "plugin_options": {"smfc": {"typs": "Relu"}}})
    message = str(caught.value)
    assert "plugin 'smfc'" in message and "'typs' (did you mean 'types'?)" in message
    assert "types, max_ops, scale" in message


def test_a_wrong_type_is_an_error(setup):
    with pytest.raises(OptionError, match=r"option 'max_ops' is str '3'; expected an int \(largest subgraph\)"):
        _compile(setup, {"plugins": "smfc", "plugin_options": {"smfc": {"max_ops": "3"}}})
    with pytest.raises(OptionError, match="option 'max_ops' is bool"):
        _compile(setup, {"plugins": "smfc", "plugin_options": {"smfc": {"max_ops": True}}})


def test_undeclared_plugins_get_their_dict_unchecked(setup):
    compiled = _compile(setup, {"plugins": "loose", "plugin_options": {"loose": {"anything": [1, 2]}}})
    assert compiled.get_attr("plugin_runs")[0]["options"] == {"anything": [1, 2]}


def test_schema_checks():
    schema = [PluginOption("n", int, required=True, help="count")]
    with pytest.raises(OptionError, match="option 'n' is required"):
        apply_options("p", schema, {})
    assert apply_options("p", schema, {"n": 2}) == {"n": 2}
    assert describe_options(schema) == "n: int (required) (count)"
    assert describe_options(None) == "(undeclared)"


def test_bad_schema_is_a_plugin_error(setup, tmp_path):
    (tmp_path / "badschema.py").write_text(textwrap.dedent('''
        from xgraph.plugins import Plugin, PluginOption
        def get_options():
            return [PluginOption("n", int, "eight")]
        def get_plugin(options):
            return Plugin()
    '''))
    with pytest.raises(PluginError, match="option 'n' defaults to 'eight', which is not an int"):
        _compile(setup, {"plugins": "badschema"})


def test_unknown_template_op_types_are_warned_about(setup):
    compiled = _compile(setup, {"plugins": "typo_template"})
    warnings = xgraph.report(compiled)["warnings"]
    assert ("plugin 'typo_template': template 'attn' op 'sm' has type 'Softmx', which no ONNX schema, kernel or "
            "device knows (did you mean 'Softmax'?); it will match no op") in warnings
    assert any("template 'late' op 'act' has type 'Reluu'" in w and "'Relu'" in w for w in warnings)
    assert not any("'MatMul'" in w for w in warnings)


def test_probe_plugin_warns_about_template_types_at_load_and_reports_options(setup):
    from xgraph.plugins.probe import probe_plugin
    plugin_dir, _ = setup
    probe = probe_plugin("typo_template", [str(plugin_dir)])
    assert probe.ok and len(probe.warnings) == 1 and "'Softmx'" in probe.warnings[0]  # 'late' is built in partition
    probe = probe_plugin("smfc", [str(plugin_dir)], {"typs": "x"})
    assert probe.problems == ["plugin_options for plugin 'smfc': unknown option(s) 'typs' (did you mean 'types'?); "
                              "plugin 'smfc' takes: types, max_ops, scale (see `xgraph plugins`)"]
