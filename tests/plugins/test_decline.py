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


def test_the_html_report_names_the_decline(model):
    from xgraph.view.report_html import render_html_report
    text = render_html_report(xgraph.compile(model, {"plugins": "ov"}, plugin_path=[str(model.parent)]))
    chain = text.split('id="xg-plugin-chain"', 1)[1].split("</table>", 1)[0]
    assert "subgraph_d (2 ops): OpenVINO rejected Relu &#x27;d&#x27;: unsupported layout" in chain
    fallbacks = text.split('id="xg-fallbacks"', 1)[1].split("</table>", 1)[0]
    assert "plugin &#x27;ov&#x27; declined: OpenVINO rejected Relu" in fallbacks


def test_declined_ops_are_placed_one_by_one(model):
    """The declined {d, e} is split back into the children the plugin merged, one per op, as they were."""
    from xgraph.plugins import run_plugin_chain
    graph = xgraph.Graph.from_onnx(str(model))
    root = graph.get_root_subgraph()
    root.create_child_subgraph()
    [run] = run_plugin_chain(graph, ["ov"], [str(model.parent)])
    assert run["subgraphs"] == ["subgraph_a"]
    children = {sg.name: sg for sg in root.get_children()}
    assert sorted(children) == ["subgraph_a", "subgraph_c", "subgraph_d", "subgraph_e"]
    for name in ("subgraph_d", "subgraph_e"):
        assert children[name].get_attrs() == {} and children[name].get_op_num() == 1
        assert graph.get_leaf_subgraph(name.removeprefix("subgraph_")) is children[name]


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


def test_an_unmerged_subgraph_declines_with_its_attrs_dropped(tmp_path, model):
    (tmp_path / "single.py").write_text(textwrap.dedent('''
        from xgraph.partition import filter_by_type
        from xgraph.plugins import Decline, Plugin

        class Single(Plugin):
            def partition(self, graph):
                return filter_by_type(graph, "Sigmoid")

            def compile(self, subgraph):
                subgraph.set_attr("half_done", 1)
                raise Decline("changed my mind")

        def get_plugin():
            return Single()
    '''))
    compiled = xgraph.compile(model, {"plugins": "single"}, plugin_path=[str(tmp_path)])
    sg = compiled.get_root_subgraph().find_child_subgraph_by_op("c")
    assert not sg.has_attr("half_done") and sg.get_attr("device") != "SINGLE"
    assert compiled.get_attr("plugin_runs")[0]["declined"][0]["ops"] == ["c"]


def test_unmerge_child_checks_then_changes_nothing():
    from xgraph.errors import GraphError
    g = xgraph.Graph("g")
    g.create_input("x", [1])
    for name, source in [("a", "x"), ("b", "a"), ("c", "b")]:
        g.create_op(name, "Relu", inputs=[source])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    parts = [g.get_leaf_subgraph("a"), g.get_leaf_subgraph("b")]
    merged = root.merge_children(set(parts))
    with pytest.raises(GraphError, match="not exactly those of 'subgraph_a'"):
        root.unmerge_child(merged, parts[:1])
    with pytest.raises(GraphError, match="not a leaf it held"):
        root.unmerge_child(merged, [g.get_leaf_subgraph("c")])
    assert root.is_child(merged) and g.get_leaf_subgraph("a") is merged
    root.unmerge_child(merged, parts)
    assert not root.is_child(merged) and g.get_leaf_subgraph("a") is parts[0] and root.get_children_num() == 3
