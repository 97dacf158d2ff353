"""The chain's cost hooks: estimate() after compile(), the device spec, the claim mode, all-or-nothing."""
from __future__ import annotations

import textwrap

import pytest

from xgraph import Graph
from xgraph.errors import PluginError
from xgraph.ir.links import check_links
from xgraph.plugins import run_plugin_chain

SOURCE = """
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin

CALLS = []

class P(Plugin):
    claims = "prefer"

    def get_plugin_name(self):
        return "costly"

    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, "Relu"))

    def compile(self, subgraph):
        CALLS.append(("compile", subgraph.name))
        subgraph.set_attr("compiled", True)

    def estimate(self, subgraph):
        CALLS.append(("estimate", subgraph.name, subgraph.get_attr("compiled")))
        return {estimate}

    def get_device_spec(self):
        return {{"device": {{"instances": 3}}, "link": {{"bandwidth_gbps": 12.0}}}}

def get_plugin():
    return P()
"""


def _graph(chain_model, tmp_path, estimate: str) -> Graph:
    path = chain_model(tmp_path, [("Neg", "x", "a"), ("Relu", "a", "b"), ("Relu", "b", "y")],
                       {"costly": textwrap.dedent(SOURCE).format(estimate=estimate)})
    graph = Graph.from_onnx(str(path))
    graph.get_root_subgraph().create_child_subgraph()
    return graph


def test_estimate_runs_after_compile_and_lands_on_the_subgraph(chain_model, tmp_path):
    graph = _graph(chain_model, tmp_path, "0.5")
    [record] = run_plugin_chain(graph, ["costly"], [str(tmp_path)])
    sg = graph.get_root_subgraph().find_child_subgraph_by_op("b")
    assert sg.get_attr("estimated_seconds") == 0.5 and sg.get_attr("plugin_preference") is True
    import costly  # the loaded plugin module, for its call log
    assert costly.CALLS == [("compile", sg.name), ("estimate", sg.name, True)]
    assert record["claims"] == "prefer"
    assert record["device_spec"]["device"] | {"name": "COSTLY", "memory": "device", "instances": 3} == \
        record["device_spec"]["device"]
    assert record["device_spec"]["link"] == {"bandwidth_gbps": 12.0, "latency_us": 0.0}


@pytest.mark.parametrize("estimate, message", [("1 / 0", "estimate('subgraph_b') raised ZeroDivisionError"),
                                               ("float('nan')", "estimate('subgraph_b') returned nan")])
def test_a_bad_estimate_leaves_the_graph_as_it_was(chain_model, tmp_path, estimate, message):
    graph = _graph(chain_model, tmp_path, estimate)
    before = graph.snapshot()
    with pytest.raises(PluginError, match="plugin 'costly'") as info:
        run_plugin_chain(graph, ["costly"], [str(tmp_path)])
    assert message in str(info.value)
    check_links(graph)
    assert graph.get_root_subgraph().get_children_num() == 3
    assert not any(c.get_attrs() for c in graph.get_root_subgraph().get_children())
    assert graph.snapshot().subgraph_columns == before.subgraph_columns
