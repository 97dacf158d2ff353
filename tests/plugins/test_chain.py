"""The plugin chain: call order, attrs it sets, and every misbehaviour leaving the graph as it was."""
from __future__ import annotations

import re
import sys
import textwrap
import types
from pathlib import Path

import pytest

from xgraph import Graph, XGraphError
from xgraph.errors import PartitionError, PluginError
from xgraph.ir.links import check_links
from xgraph.plugins import run_plugin_chain
from xgraph.plugins.loader import PATH_ENV

HEADER = """
import xgraph_chain_log as log
from xgraph import Graph
from xgraph.partition import filter_by_name, filter_by_type, merge_subgraph
from xgraph.plugins import Plugin
"""


@pytest.fixture(autouse=True)
def call_log(monkeypatch) -> list:
    """A module the inline plugins import to record their calls (`log.LOG`)."""
    module = types.ModuleType("xgraph_chain_log")
    module.LOG = []
    monkeypatch.setitem(sys.modules, "xgraph_chain_log", module)
    monkeypatch.delenv(PATH_ENV, raising=False)
    return module.LOG


def write(directory: Path, name: str, source: str) -> None:
    """Write plugin `name` (HEADER + source) into `directory`."""
    (directory / f"{name}.py").write_text(HEADER + textwrap.dedent(source))


def make_graph() -> Graph:
    """x -> a(Relu) -> b(Softmax) -> c(Relu) -> d(Softmax); x -> e(Sigmoid); x -> dangle (unused)."""
    g = Graph("chain")
    x = g.create_input("x", (2, 3))
    a = g.create_op("a", "Relu", inputs=[x])
    b = g.create_op("b", "Softmax", {"axis": 1}, inputs=[a.get_output_tensor()])
    c = g.create_op("c", "Relu", inputs=[b.get_output_tensor()])
    d = g.create_op("d", "Softmax", inputs=[c.get_output_tensor()])
    e = g.create_op("e", "Sigmoid", inputs=[x])
    g.create_op("dangle", "Relu", inputs=[x])
    g.set_outputs([d.get_output_tensor(), e.get_output_tensor()])
    g.set_attr("origin", "test")
    g.get_root_subgraph().create_child_subgraph()
    return g


def snapshot(g: Graph):
    """An independent record of everything a failed plugin must leave alone."""
    root = g.get_root_subgraph()
    children = sorted((c.name, tuple(sorted(op.name for op in c.get_ops())), repr(sorted(c.get_attrs().items())),
                       c.get_children_num(), id(c)) for c in root.get_children())
    ops = sorted((op.name, op.type, repr(sorted(op.get_attrs().items())),
                  tuple(t.name if t is not None else None for t in op.get_input_tensors()),
                  tuple(sorted(c.name for c in op.get_output_tensor().consumers)))
                 for op in g.get_ops())
    tensors = sorted((t.name, repr(sorted(t.get_attrs().items()))) for t in g.get_tensors())
    return repr(sorted(g.get_attrs().items())), children, ops, tensors


FIRST = """
class P(Plugin):
    def partition(self, graph):
        return {filter_by_name(graph, "e")}

def get_plugin():
    return P()
"""


# -- behaviour ---------------------------------------------------------------------------------
def test_call_order_partition_then_compile_once_per_subgraph(tmp_path, call_log):
    write(tmp_path, "order", """
        class P(Plugin):
            def __init__(self):
                log.LOG.append("get_plugin")
            def get_plugin_name(self):
                log.LOG.append("get_plugin_name")
                return "order"
            def get_device(self):
                log.LOG.append("get_device")
                return "ORDER"
            def get_runner(self):
                log.LOG.append("get_runner")
                return {"run": "cpu"}
            def partition(self, graph):
                log.LOG.append("partition")
                return filter_by_type(graph, "Softmax")
            def compile(self, sg):
                log.LOG.append(("compile", sg.name, sg.has_attr("device")))

        def get_plugin():
            return P()
    """)
    g = make_graph()
    records = run_plugin_chain(g, ["order"], [str(tmp_path)])
    assert call_log == ["get_plugin", "get_plugin_name", "get_device", "get_runner", "partition",
                        ("compile", "subgraph_b", False), ("compile", "subgraph_d", False)]
    assert records[0].pop("seconds") >= 0
    assert records == [{"name": "order", "device": "ORDER", "runner": {"run": "cpu"}, "memory": "device",
                        "claims": "claim", "device_spec": None, "subgraphs": ["subgraph_b", "subgraph_d"], "source": str(tmp_path / "order.py"),
                        "options": {}, "ops": 2, "templates": [], "declined": [], "warnings": []}]
    for name in ("subgraph_b", "subgraph_d"):
        sg = g.get_subgraph(name)
        assert sg.get_attr("device") == "ORDER" and sg.get_attr("runner") == {"run": "cpu"}
    records[0]["runner"]["run"] = "changed"
    assert g.get_subgraph("subgraph_b").get_attr("runner") == {"run": "cpu"}
    check_links(g)


def test_plugins_run_in_the_given_order_and_later_ones_see_earlier_assignments(tmp_path, call_log):
    for name, op_type in (("p_softmax", "Softmax"), ("p_relu", "Relu")):
        write(tmp_path, name, f"""
            class P(Plugin):
                def partition(self, graph):
                    seen = sorted(c.get_attr("device") for c in graph.get_root_subgraph().get_children()
                                  if c.has_attr("device"))
                    log.LOG.append(({name!r}, seen))
                    return merge_subgraph(filter_by_type(graph, {op_type!r}))

            def get_plugin():
                return P()
        """)
    g = make_graph()
    records = run_plugin_chain(g, "p_relu, p_softmax", [str(tmp_path)])
    assert call_log == [("p_relu", []), ("p_softmax", ["P_RELU", "P_RELU"])]
    assert [r["name"] for r in records] == ["p_relu", "p_softmax"]
    devices = {op.name: g.get_root_subgraph().find_child_subgraph_by_op(op.name).get_attrs().get("device")
               for op in g.get_ops()}
    assert devices == {"a": "P_RELU", "c": "P_RELU", "dangle": "P_RELU", "b": "P_SOFTMAX", "d": "P_SOFTMAX",
                       "e": None}
    assert records[0]["runner"] == {"run": "cpu", "sim": "cpu", "ref": "cpu"}


def test_duck_typed_plugin_without_the_base_class(tmp_path):
    write(tmp_path, "duck", """
        class Duck:
            def get_plugin_name(self): return "duck"
            def get_device(self): return "DUCK"
            def get_runner(self): return {"run": "duckrunner", "ref": "cpu"}
            def partition(self, graph): return [filter_by_name(graph, "a")]
            def compile(self, sg): sg.set_attr("compiled", True)

        def get_plugin():
            return Duck()
    """)
    g = make_graph()
    [record] = run_plugin_chain(g, ["duck"], [str(tmp_path)])
    sg = g.get_subgraph("subgraph_a")
    assert record["subgraphs"] == ["subgraph_a"]
    assert sg.get_attrs() == {"compiled": True, "device": "DUCK", "runner": {"run": "duckrunner", "ref": "cpu"},
                              "memory": "device", "plugin": "duck"}


def test_compile_may_touch_its_own_subgraph_ops_and_children(tmp_path):
    write(tmp_path, "deep", """
        class P(Plugin):
            def partition(self, graph):
                return merge_subgraph({filter_by_name(graph, "c"), filter_by_name(graph, "d")})
            def compile(self, sg):
                sg.set_attr("blob", [1, 2, 3])
                for op in sg.get_ops():
                    op.set_attr("fused", True)
                    op.get_output_tensor().set_attr("scale", 0.5)
                sg.create_child_subgraph()

        def get_plugin():
            return P()
    """)
    g = make_graph()
    run_plugin_chain(g, ["deep"], [str(tmp_path)])
    sg = g.get_subgraph("subgraph_c")
    assert sg.get_attr("blob") == [1, 2, 3] and sg.get_children_num() == 2
    assert g.get_op("d").get_attr("fused") is True and g.get_tensor("c").get_attr("scale") == 0.5


def test_empty_partition_and_empty_chain(tmp_path, call_log):
    write(tmp_path, "nothing", """
        class P(Plugin):
            def compile(self, sg):
                log.LOG.append("compile")

        def get_plugin():
            return P()
    """)
    g = make_graph()
    before = snapshot(g)
    assert run_plugin_chain(g, ["nothing"], [str(tmp_path)])[0]["subgraphs"] == []
    assert run_plugin_chain(g, [], [str(tmp_path)]) == []
    assert call_log == [] and snapshot(g) == before


def test_every_name_is_resolved_before_any_plugin_runs(tmp_path, call_log):
    write(tmp_path, "first", FIRST.replace("return {", "log.LOG.append('ran')\n        return {"))
    g = make_graph()
    before = snapshot(g)
    with pytest.raises(PluginError, match="no plugin named 'missing_one'"):
        run_plugin_chain(g, ["first", "missing_one"], [str(tmp_path)])
    assert call_log == [] and snapshot(g) == before


def test_preconditions():
    g = Graph("fresh")
    x = g.create_input("x", (1,))
    g.create_op("r", "Relu", inputs=[x])
    with pytest.raises(PartitionError, match="create_child_subgraph"):
        run_plugin_chain(g, ["anything"])
    assert run_plugin_chain(Graph("empty"), []) == []
    with pytest.raises(PluginError, match="needs an xgraph.Graph"):
        run_plugin_chain("model.onnx", ["a"])
    g.get_root_subgraph().create_child_subgraph()
    with pytest.raises(PluginError, match="listed twice"):
        run_plugin_chain(g, "a,a")
    with pytest.raises(PluginError, match="non-empty str"):
        run_plugin_chain(g, ["a", ""])


# -- misbehaviour: PluginError naming the plugin, graph exactly as before ----------------------
def plugin_with(method: str, body: str) -> str:
    """A plugin taking the Softmax ops whose `method` is replaced by `body`."""
    methods = {
        "get_plugin_name": "return 'bad'",
        "get_device": "return 'BAD'",
        "get_runner": "return {'run': 'cpu'}",
        "partition": "return merge_subgraph(filter_by_type(graph, 'Softmax'))",
        "compile": "sg.set_attr('compiled', True)",
    }
    methods[method] = body
    args = {"partition": "self, graph", "compile": "self, sg"}
    lines = ["class P(Plugin):"]
    for name, code in methods.items():
        lines.append(f"    def {name}({args.get(name, 'self')}):")
        lines += ["        " + line for line in textwrap.dedent(code).strip().splitlines()]
    return "\n".join(lines) + "\n\ndef get_plugin():\n    return P()\n"


MERGE_A_B = "merged = merge_subgraph({filter_by_name(graph, 'a'), filter_by_name(graph, 'b')})\n"

BAD = {
    "get_plugin raises": ("def get_plugin():\n    raise RuntimeError('no licence')\n",
                          r"get_plugin\(\) raised RuntimeError: no licence"),
    "get_plugin returns junk": ("def get_plugin():\n    return object()\n",
                                "without get_plugin_name, get_device, get_runner, partition, compile"),
    "get_plugin_name raises": (plugin_with("get_plugin_name", "raise KeyError('n')"), r"get_plugin_name\(\) raised"),
    "get_plugin_name not str": (plugin_with("get_plugin_name", "return 3"), r"get_plugin_name\(\) returned 3"),
    "get_device raises": (plugin_with("get_device", "raise OSError('no device')"), r"get_device\(\) raised OSError"),
    "get_device empty": (plugin_with("get_device", "return ''"), r"get_device\(\) returned ''"),
    "get_device not str": (plugin_with("get_device", "return None"), r"get_device\(\) returned None"),
    "get_runner raises": (plugin_with("get_runner", "raise ValueError('r')"), r"get_runner\(\) raised ValueError"),
    "get_runner not dict": (plugin_with("get_runner", "return ['cpu']"), r"get_runner\(\) returned a list"),
    "get_runner non-str name": (plugin_with("get_runner", "return {'run': 1}"), "not str -> non-empty str"),
    "get_runner unknown mode": (plugin_with("get_runner", "return {'run': 'cpu', 'debug': 'x'}"),
                                r"unknown mode\(s\) \['debug'\]"),
    "partition raises after merging": (plugin_with("partition", MERGE_A_B + "raise RuntimeError('late')"),
                                       r"partition\(graph\) raised RuntimeError: late"),
    "partition merge makes a cycle": (plugin_with("partition", "root = graph.get_root_subgraph()\n"
                                                  "return {root.merge_children({filter_by_name(graph, 'a'), "
                                                  "filter_by_name(graph, 'c')})}"),
                                      r"partition\(graph\) raised GraphError: .*cycle"),
    "partition returns None": (plugin_with("partition", MERGE_A_B + "pass"), "forget to return"),
    "partition returns int": (plugin_with("partition", MERGE_A_B + "return 5"), r"partition\(\) returned int"),
    "partition returns a Subgraph": (plugin_with("partition", MERGE_A_B + "return filter_by_name(graph, 'b')"),
                                     r"returned a single Subgraph 'subgraph_a'; return a set"),
    "partition returns strs": (plugin_with("partition", MERGE_A_B + "return ['subgraph_b']"), "returned a str"),
    "partition generator raises": (plugin_with("partition", MERGE_A_B + "yield filter_by_name(graph, 'b')\n"
                                               "raise LookupError('midway')"),
                                   "iterating what partition.. returned raised LookupError"),
    "returns an assigned subgraph": (plugin_with("partition", MERGE_A_B + "return {filter_by_name(graph, 'b'), "
                                                 "graph.get_subgraph('subgraph_e')}"),
                                     "subgraph_e', which is already assigned to device 'FIRST'"),
    "returns a duplicate": (plugin_with("partition", MERGE_A_B + "sg = filter_by_name(graph, 'b')\nreturn [sg, sg]"),
                            "subgraph 'subgraph_a' twice"),
    "returns the root": (plugin_with("partition", MERGE_A_B + "return {graph.get_root_subgraph()}"), "the root itself"),
    "returns a depth-2 subgraph": (plugin_with("partition", "sg = filter_by_name(graph, 'b')\n"
                                               "sg.create_child_subgraph()\nreturn sg.get_children()"),
                                   r"at depth 2 \(a child of 'subgraph_b'\)"),
    "returns a merged-away subgraph": (plugin_with("partition", "a = filter_by_name(graph, 'a')\n"
                                                   "merge_subgraph({a, filter_by_name(graph, 'b')})\nreturn {a}"),
                                       "no longer in the tree"),
    "returns another graph's subgraph": (plugin_with("partition", MERGE_A_B + "other = Graph('other')\n"
                                                     "other.create_op('q', 'Relu', inputs=[other.create_input('i')])\n"
                                                     "other.get_root_subgraph().create_child_subgraph()\n"
                                                     "return other.get_root_subgraph().get_children()"),
                                         "of another graph .'other'."),
    "partition sets device": (plugin_with("partition", "sg = filter_by_name(graph, 'b')\n"
                                          "sg.set_attr('device', 'X')\nreturn {sg}"),
                              "already assigned to device 'X'"),
    "partition sets an op attr": (plugin_with("partition", "graph.get_op('a').set_attr('note', 1)\n"
                                              "return filter_by_type(graph, 'Softmax')"),
                                  r"partition\(\) changed attrs \['note'\] of op 'a'"),
    "partition sets a graph attr": (plugin_with("partition", "graph.set_attr('origin', 'plugin')\n"
                                                "return filter_by_type(graph, 'Softmax')"),
                                    r"partition\(\) changed graph attrs \['origin'\]"),
    "partition labels another subgraph": (plugin_with("partition", "filter_by_name(graph, 'a').set_attr('k', 1)\n"
                                                      "return filter_by_type(graph, 'Softmax')"),
                                          r"attrs \['k'\] of subgraph 'subgraph_a'"),
    "partition merges an assigned subgraph": (plugin_with("partition", "root = graph.get_root_subgraph()\n"
                                                          "root.merge_children({graph.get_subgraph('subgraph_e'), "
                                                          "filter_by_name(graph, 'dangle')})\n"
                                                          "return filter_by_type(graph, 'Softmax')"),
                                              "assigned earlier were merged away: 'subgraph_e' .device 'FIRST'."),
    "partition adds an op": (plugin_with("partition", "graph.create_op('extra', 'Relu', inputs=['x'])\n"
                                         "return filter_by_type(graph, 'Softmax')"),
                             "changed the graph's ops or tensors"),
    "partition removes an op": (plugin_with("partition", "graph.remove_op('dangle')\n"
                                            "return filter_by_type(graph, 'Softmax')"),
                                "changed the graph's ops or tensors"),
    "partition rewires an op": (plugin_with("partition", "graph.get_op('c').set_input(0, graph.get_tensor('x'))\n"
                                            "return filter_by_type(graph, 'Softmax')"),
                                "changed the graph's ops or tensors"),
    "compile raises": (plugin_with("compile", "sg.set_attr('half', True)\nraise ArithmeticError('overflow')"),
                       r"compile\('subgraph_b'\) raised ArithmeticError: overflow"),
    "compile sets a graph attr": (plugin_with("compile", "sg.get_graph().set_attr('compiled_by', 'bad')"),
                                  r"compile\(\) changed graph attrs \['compiled_by'\]"),
    "compile labels an earlier subgraph": (plugin_with("compile", "sg.get_graph().get_subgraph('subgraph_e')"
                                                       ".set_attr('device', 'STOLEN')"),
                                           r"compile\(\) changed attrs \['device'\] of subgraph 'subgraph_e'"),
    "compile sets an outside op attr": (plugin_with("compile", "sg.get_graph().get_op('a').set_attr('note', 1)"),
                                        r"compile\(\) changed attrs \['note'\] of op 'a'"),
    "compile merges children": (plugin_with("compile", "g = sg.get_graph()\n"
                                            "merge_subgraph({filter_by_name(g, 'a'), filter_by_name(g, 'dangle')})"),
                                r"compile\(\) changed the root's children"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_misbehaving_plugin_raises_and_leaves_the_graph_as_it_was(tmp_path, case):
    source, message = BAD[case]
    write(tmp_path, "first", FIRST)
    (tmp_path / "bad.py").write_text(HEADER + source)
    g = make_graph()
    run_plugin_chain(g, ["first"], [str(tmp_path)])
    before = snapshot(g)
    with pytest.raises(PluginError, match=r"plugin 'bad'") as info:
        run_plugin_chain(g, ["bad"], [str(tmp_path)])
    assert re.search(message, str(info.value)), str(info.value)
    assert isinstance(info.value, XGraphError)
    assert snapshot(g) == before
    check_links(g)
    assert g.get_subgraph("subgraph_e").get_attr("device") == "FIRST"


def test_exceptions_are_chained(tmp_path):
    (tmp_path / "bad.py").write_text(HEADER + plugin_with("compile", "raise ZeroDivisionError('x')"))
    with pytest.raises(PluginError) as info:
        run_plugin_chain(make_graph(), ["bad"], [str(tmp_path)])
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_plugin_name_of_its_own_is_shown_beside_the_requested_one(tmp_path):
    (tmp_path / "alias.py").write_text(HEADER + plugin_with("partition", "raise RuntimeError('x')"))
    with pytest.raises(PluginError, match=r"plugin 'alias' \('bad'\): partition"):
        run_plugin_chain(make_graph(), ["alias"], [str(tmp_path)])


def test_interrupt_restores_the_graph_and_is_not_wrapped(tmp_path):
    (tmp_path / "bad.py").write_text(HEADER + plugin_with("partition", MERGE_A_B + "raise KeyboardInterrupt"))
    g = make_graph()
    before = snapshot(g)
    with pytest.raises(KeyboardInterrupt):
        run_plugin_chain(g, ["bad"], [str(tmp_path)])
    assert snapshot(g) == before


def test_earlier_plugins_keep_their_subgraphs_when_a_later_one_fails(tmp_path):
    write(tmp_path, "first", FIRST)
    (tmp_path / "bad.py").write_text(HEADER + plugin_with("compile", "raise RuntimeError('x')"))
    g = make_graph()
    with pytest.raises(PluginError, match="plugin 'bad'"):
        run_plugin_chain(g, ["first", "bad"], [str(tmp_path)])
    assert g.get_subgraph("subgraph_e").get_attr("device") == "FIRST"
    assert not g.get_subgraph("subgraph_b").has_attr("device")
