"""A plugin's compile() may decline a subgraph: its ops go back to placement with the reason recorded,
the plugin's other subgraphs stand, and "strict_plugins" makes a decline an error."""
from __future__ import annotations

import textwrap

import pytest

import xgraph
from xgraph.cli.xcompile import main as xcompile_main
from xgraph.compiler.explain import explain_text
from xgraph.errors import PluginError

# a=Relu(x) -> b=Neg(a) -> c=Sigmoid(b) -> d=Relu(c) -> e=Neg(d): the plugin takes Relu+Neg as two
# subgraphs ({a, b} and {d, e}; c between them keeps them apart) and declines the one holding op d.
PLUGIN = '''
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Decline, Plugin

CALLS = []

class OV(Plugin):
    def get_plugin_name(self):
        return "ov"

    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, ["Relu", "Neg"]))

    def compile(self, subgraph):
        CALLS.append(subgraph.name)
        if subgraph.has_op("d"):
            raise Decline("OpenVINO rejected Relu 'd': unsupported layout")
        subgraph.set_attr("blob_name", "ov_" + subgraph.name)

def get_plugin():
    return OV()
'''

BROKEN = PLUGIN.replace('raise Decline("OpenVINO rejected Relu \'d\': unsupported layout")',
                        'raise ValueError("vendor compiler crashed")').replace('"ov"', '"ov_broken"')


@pytest.fixture
def model(tmp_path, chain_model):
    chain = [("Relu", "x", "a"), ("Neg", "a", "b"), ("Sigmoid", "b", "c"), ("Relu", "c", "d"), ("Neg", "d", "e")]
    return chain_model(tmp_path, chain, {"ov": PLUGIN, "ov_broken": BROKEN})


def _owner(compiled, op):
    sg = compiled.get_root_subgraph().find_child_subgraph_by_op(op)
    return sg, sg.get_attr("device")


def test_declined_subgraph_goes_to_placement_and_the_rest_stands(model):
    compiled = xgraph.compile(model, {"plugins": "ov"}, plugin_path=[str(model.parent)])
    kept, device = _owner(compiled, "a")
    assert device == "OV" and kept.get_attr("blob_name") == "ov_subgraph_a" and kept.has_op("b")
    for name in ("d", "e"):
        sg, device = _owner(compiled, name)
        assert device != "OV" and not sg.has_attr("plugin")
        reason = compiled.get_op(name).get_attr("placement_reason")
        assert reason.startswith("plugin 'ov' declined: OpenVINO rejected Relu 'd': unsupported layout")
    [run] = compiled.get_attr("plugin_runs")
    assert run["subgraphs"] == ["subgraph_a"] and run["ops"] == 2
    assert run["declined"] == [{"subgraph": "subgraph_d", "ops": ["d", "e"],
                                "reason": "OpenVINO rejected Relu 'd': unsupported layout"}]
    report = xgraph.report(compiled)
    assert report["plugins"][0]["declined"] == run["declined"]
    assert any(f["reason"].startswith("plugin 'ov' declined:") and f["ops"] == ["d", "e"] for f in report["fallbacks"])


def test_declined_ops_are_placed_one_by_one(model):
    """The declined {d, e} is split back into its ops: placement may put them on different devices."""
    compiled = xgraph.compile(model, {"plugins": "ov", "devices": "cpu"}, plugin_path=[str(model.parent)])
    names = {sg.name for sg in compiled.get_root_subgraph().get_children()}
    assert "subgraph_a" in names
    assert {op.name for op in compiled.get_root_subgraph().find_child_subgraph_by_op("d").get_ops()} >= {"c", "d", "e"}


def test_explain_names_the_decline(model):
    [entry] = xgraph.explain(model, ["d"], {"plugins": "ov"}, plugin_path=[str(model.parent)])
    assert entry["taken_by"] == "placement"
    assert entry["reason"].startswith("plugin 'ov' declined: OpenVINO rejected")
    text = explain_text([entry])
    assert "plugin ov (device OV): declined it: OpenVINO rejected Relu 'd': unsupported layout" in text


def test_strict_plugins_makes_a_decline_an_error(model):
    with pytest.raises(PluginError) as caught:
        xgraph.compile(model, {"plugins": "ov", "strict_plugins": True}, plugin_path=[str(model.parent)])
    message = str(caught.value)
    assert "plugin 'ov'" in message and "'subgraph_d'" in message and "unsupported layout" in message
    assert "strict_plugins" in message


def test_strict_plugins_must_be_a_bool():
    from xgraph.compiler.options import parse_options
    from xgraph.errors import OptionError
    assert parse_options({"strict_plugins": True}).strict_plugins is True
    assert parse_options({}).strict_plugins is False
    with pytest.raises(OptionError, match="strict_plugins"):
        parse_options({"strict_plugins": "yes"})


def test_any_other_exception_still_fails_the_whole_plugin(model):
    with pytest.raises(PluginError, match="ValueError: vendor compiler crashed"):
        xgraph.compile(model, {"plugins": "ov_broken"}, plugin_path=[str(model.parent)])


def test_decline_outside_compile_is_an_error(tmp_path, model):
    (tmp_path / "early.py").write_text(textwrap.dedent('''
        from xgraph.plugins import Decline, Plugin
        class Early(Plugin):
            def partition(self, graph):
                raise Decline("not today")
        def get_plugin():
            return Early()
    '''))
    with pytest.raises(PluginError, match=r"partition\(graph\) raised Decline\('not today'\).*only compile"):
        xgraph.compile(model, {"plugins": "early"}, plugin_path=[str(tmp_path)])


def test_summary_prints_the_decline(model, capsys):
    out = model.parent / "m.xmodel"
    assert xcompile_main([str(model), "-o", str(out), "--options", '{"plugins": "ov"}',
                          "--plugin-path", str(model.parent)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert ("plugin 'ov' declined subgraph 'subgraph_d' (2 op(s)): OpenVINO rejected Relu 'd': unsupported layout; "
            "placement took its ops") in printed
