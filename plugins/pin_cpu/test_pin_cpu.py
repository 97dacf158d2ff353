"""The pin_cpu sample plugin: op names from the environment or configure(), loud about bad names."""
from __future__ import annotations

from pathlib import Path

import pytest

from xgraph import Graph
from xgraph.errors import PluginError
from xgraph.plugins import load_plugin, run_plugin_chain

PLUGINS = str(Path(__file__).resolve().parents[1])


@pytest.fixture
def pin_cpu(monkeypatch):
    """The plugin module, with no names configured and no environment variable, reset afterwards."""
    module = load_plugin("pin_cpu", [PLUGINS]).module
    monkeypatch.delenv(module.ENV, raising=False)
    module.configure(None)
    yield module
    module.configure(None)


def chain_graph() -> Graph:
    """x -> a(Relu) -> b(Softmax) -> c(Relu) -> d(Softmax); x -> e(Relu)."""
    g = Graph("pins")
    x = g.create_input("x", (2, 3))
    t = x
    for name, op_type in (("a", "Relu"), ("b", "Softmax"), ("c", "Relu"), ("d", "Softmax")):
        t = g.create_op(name, op_type, inputs=[t]).get_output_tensor()
    e = g.create_op("e", "Relu", inputs=[x])
    g.set_outputs([t, e.get_output_tensor()])
    g.get_root_subgraph().create_child_subgraph()
    return g


def pinned(g: Graph) -> list[list[str]]:
    """Op names of each CPU subgraph, sorted."""
    return sorted(sorted(op.name for op in c.get_ops()) for c in g.get_root_subgraph().get_children()
                  if c.get_attrs().get("device") == "CPU")


def test_names_from_the_environment(pin_cpu, monkeypatch):
    monkeypatch.setenv(pin_cpu.ENV, " a, d ,e,")
    g = chain_graph()
    [record] = run_plugin_chain(g, ["pin_cpu"], [PLUGINS])
    assert record["device"] == "CPU" and record["runner"] == {"run": "cpu", "sim": "cpu", "ref": "cpu"}
    assert pinned(g) == [["a", "e"], ["d"]]  # a and e merge (both read x); d cannot join them


def test_configure_wins_over_the_environment_until_reset(pin_cpu, monkeypatch):
    monkeypatch.setenv(pin_cpu.ENV, "a")
    pin_cpu.configure(["c"])
    g = chain_graph()
    run_plugin_chain(g, ["pin_cpu"], [PLUGINS])
    assert pinned(g) == [["c"]]
    pin_cpu.configure("b, c")
    assert pin_cpu.pinned_names() == ["b", "c"]
    pin_cpu.configure(None)
    assert pin_cpu.pinned_names() == ["a"]
    with pytest.raises(PluginError, match="op names must be str"):
        pin_cpu.configure([1])


def test_nothing_configured_takes_nothing(pin_cpu):
    g = chain_graph()
    assert run_plugin_chain(g, ["pin_cpu"], [PLUGINS])[0]["subgraphs"] == []


def test_unknown_name_fails_with_a_suggestion_and_changes_nothing(pin_cpu):
    pin_cpu.configure(["a", "dd"])
    g = chain_graph()
    with pytest.raises(PluginError, match=r"plugin 'pin_cpu'.*op 'dd' .* is not in graph 'pins'; did you mean 'd'"):
        run_plugin_chain(g, ["pin_cpu"], [PLUGINS])
    assert pinned(g) == []


def test_pinning_first_keeps_an_op_from_a_later_plugin(pin_cpu):
    pin_cpu.configure(["b"])
    g = chain_graph()
    records = run_plugin_chain(g, ["pin_cpu", "smfc"], [PLUGINS])
    assert pinned(g) == [["b"]]
    assert records[1]["subgraphs"] == ["subgraph_d"]


def test_pinning_after_the_owner_says_to_list_it_first(pin_cpu):
    pin_cpu.configure(["b"])
    g = chain_graph()
    with pytest.raises(PluginError, match="already assigned to device 'SMFC' .* list pin_cpu first"):
        run_plugin_chain(g, ["smfc", "pin_cpu"], [PLUGINS])
    assert g.get_subgraph("subgraph_b").get_attr("device") == "SMFC"


def test_names_from_plugin_options_win_over_the_environment(pin_cpu, monkeypatch):
    monkeypatch.setenv(pin_cpu.ENV, "e")
    g = chain_graph()
    [record] = run_plugin_chain(g, ["pin_cpu"], [PLUGINS], {"pin_cpu": {"ops": ["a", "c"]}})
    assert record["options"] == {"ops": ["a", "c"]}
    assert pinned(g) == [["a"], ["c"]]  # b sits between them, so they stay apart


def test_plugin_options_reach_pin_cpu_through_compile_and_the_xmodel(pin_cpu, tmp_path):
    import json

    import xgraph
    g = chain_graph()
    options = {"plugins": "pin_cpu", "plugin_options": {"pin_cpu": {"ops": "b,d"}}}
    compiled = xgraph.compile(g, options, [PLUGINS])
    [run] = compiled.get_attr("plugin_runs")
    taken = sorted(sorted(op.name for op in compiled.get_subgraph(n).get_ops()) for n in run["subgraphs"])
    assert taken == [["b"], ["d"]] and run["options"] == {"ops": "b,d"}
    compiled.serialize(tmp_path / "pins.xmodel")
    stored = json.loads(xgraph.load(tmp_path / "pins.xmodel").get_attr("compile_options"))
    assert stored["plugin_options"] == {"pin_cpu": {"ops": "b,d"}}


def test_unknown_pin_cpu_option_is_named(pin_cpu):
    with pytest.raises(PluginError, match=r"unknown plugin option\(s\) \['op'\]"):
        run_plugin_chain(chain_graph(), ["pin_cpu"], [PLUGINS], {"pin_cpu": {"op": "a"}})
