"""The report page lists plugin choices apart from fallbacks, and its copy count is what the graph runner performs."""
from __future__ import annotations

import re
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.view.report_html import render_html_report

# x -> Relu (AICORE) -> Sigmoid (plugin on CPU: host memory) -> Relu (AICORE) -> y: the runtime copies x in,
# Relu's output out, Sigmoid's output in and y out.
HOSTPIN = '''
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin

class HostPin(Plugin):
    def get_device(self):
        return "CPU"

    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, "Sigmoid"))

def get_plugin():
    return HostPin()
'''


@pytest.fixture
def compiled(tmp_path):
    chain = [("Relu", "x", "a"), ("Sigmoid", "a", "b"), ("Relu", "b", "y")]
    nodes = [helper.make_node(t, [i], [o], name=f"n_{o}") for t, i, o in chain]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (tmp_path / "hostpin.py").write_text(textwrap.dedent(HOSTPIN))
    return xgraph.compile(model, {"plugins": "hostpin", "devices": "aicore,cpu"}, plugin_path=[str(tmp_path)])


def test_header_copy_count_is_what_the_runtime_performs(compiled):
    text = render_html_report(compiled)
    shown = int(re.search(r'<span id="xg-report-copies">(\d+)</span>', text).group(1))
    with xgraph.create_graph_runner(compiled) as runner:
        runner.run({"x": np.ones((2, 3), np.float32)})
        performed = runner.get_stats()["copies"]["count"]
    assert performed == 4 and shown == performed
    assert '<span id="xg-report-crossings">2</span> between subgraphs' in text


def test_plugin_choices_are_not_fallbacks(compiled):
    text = render_html_report(compiled)
    choices = text.split("<h2>Plugin choices: ops the plugins took</h2>", 1)[1].split("<h2>", 1)[0]
    assert "chosen by plugin &#x27;hostpin&#x27;" in choices and "n_b" in choices
    fallbacks = text.split("<h2>Fallbacks", 1)[1].split("<h2>", 1)[0]
    assert "chosen by plugin" not in fallbacks
