"""The chain's before/after check covers every piece of graph state, and weights cannot be written.

Each plugin below changes one thing it may not (or writes into a weight) inside partition()
or compile(); the chain must raise a PluginError naming the plugin and what changed, and
leave the graph exactly as it was (compared as .xmodel bytes: ops, tensors, attrs, tree,
opsets, IR version, model info, functions).
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import onnx
import pytest

from xgraph import Graph
from xgraph.errors import PluginError
from xgraph.ir.links import check_links
from xgraph.ir.onnx.xmodel import to_model_proto
from xgraph.plugins import run_plugin_chain
from xgraph.plugins.loader import PATH_ENV

TEMPLATE = """
import numpy as np
import onnx
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin

class P(Plugin):
    def get_plugin_name(self):
        return "meddler"

    def get_device(self):
        return "MEDDLE"

    def get_runner(self):
        return {{"run": "cpu"}}

    def partition(self, graph):
        taken = merge_subgraph(filter_by_type(graph, "Conv"))
{partition}
        return taken

    def compile(self, sg):
        graph = sg.graph
{compile}

def get_plugin():
    return P()
"""


@pytest.fixture(autouse=True)
def no_plugin_path_env(monkeypatch):
    monkeypatch.delenv(PATH_ENV, raising=False)


def make_graph() -> Graph:
    """x -> conv(w, b) -> relu -> y, with model-level facts a plugin might reach for."""
    g = Graph("net")
    x = g.create_input("x", (1, 2, 4, 4), np.float32)
    w = g.create_const("w", np.ones((2, 2, 1, 1), np.float32))
    conv = g.create_op("conv", "Conv", inputs=[x, w])
    relu = g.create_op("relu", "Relu", inputs=[conv.get_output_tensor()])
    g.set_outputs([relu.get_output_tensor()])
    g.model_info = {"producer_name": "test", "metadata": {"k": "v"}}
    g.functions.append(onnx.helper.make_function("custom", "twice", ["a"], ["b"],
                                                 [onnx.helper.make_node("Add", ["a", "a"], ["b"])],
                                                 [onnx.helper.make_opsetid("", 17)]))
    g.get_root_subgraph().create_child_subgraph()
    return g


def saved(g: Graph) -> bytes:
    return to_model_proto(g).SerializeToString(deterministic=True)


def write_plugin(directory: Path, partition: str = "pass", compile: str = "pass") -> None:
    indent = lambda code: textwrap.indent(textwrap.dedent(code).strip(), " " * 8)  # noqa: E731
    (directory / "meddler.py").write_text(TEMPLATE.format(partition=indent(partition), compile=indent(compile)))


CASES = {
    # in partition(): what it does, what the error must name
    "rename a tensor": ("graph.get_tensor('relu').name = 'renamed'", r"the name of tensor 'relu' \(now 'renamed'\)"),
    "rename an op": ("graph.get_op('relu').name = 'renamed'", r"the name/type/domain of op 'relu'"),
    "change opset_imports": ("graph.opset_imports[''] = 9", r"opset imports"),
    "replace opset_imports": ("graph.opset_imports = {'': 13}", r"opset imports"),
    "change ir_version": ("graph.ir_version = 3", r"IR version \(\d+ -> 3\)"),
    "change model info": ("graph.model_info['producer_name'] = 'me'", r"model info \['producer_name'\]"),
    "edit model metadata": ("graph.model_info['metadata']['k'] = 'w'", r"model info \['metadata'\]"),
    "add a function": ("graph.functions.append(onnx.FunctionProto(name='f', domain='d'))", "the model's functions"),
    "edit a function in place": ("graph.functions[0].name = 'thrice'", "the model's functions"),
    "drop the functions": ("graph.functions = []", "the model's functions"),
    "replace the functions by junk": ("graph.functions = None", "the model's functions"),
    "replace the model info by junk": ("graph.model_info = 3", r"the model info \['\(replaced\)'\]"),
    "annotate an op it did not take": ("graph.get_op('relu').set_attr('note', [1], onnx_type=None)",
                                       r"attrs \['note'\] of op 'relu'"),
    "change a doc string": ("graph.get_op('relu').doc_string = 'mine'", "doc string of op 'relu'"),
    "retype its own output": ("t = graph.get_tensor('conv'); t.dtype = np.int8; t.shape = (7, 7, 7)",
                              r"the dtype/shape of tensor 'conv' \(was unknown dtype unknown shape, now int8 \[7, 7, 7\]\)"),
    "reshape an input": ("graph.get_tensor('x').shape = (1, 2, 8, 8)",
                         r"the dtype/shape of tensor 'x' \(was float32 \[1, 2, 4, 4\], now float32 \[1, 2, 8, 8\]\)"),
    "retype and annotate its own output": (
        "t = graph.get_tensor('conv'); t.set_attr('note', 1); t.dtype = np.int8",
        r"the dtype/shape of tensor 'conv' \(was unknown dtype unknown shape, now int8 unknown shape\)"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_partition_changing_graph_state_is_caught_and_undone(tmp_path, case):
    code, message = CASES[case]
    write_plugin(tmp_path, partition=code)
    g = make_graph()
    before, ops, tensors = saved(g), g.get_ops(), g.get_tensors()
    with pytest.raises(PluginError, match=rf"plugin 'meddler'.*partition\(\) changed.*{message}"):
        run_plugin_chain(g, ["meddler"], [str(tmp_path)])
    assert saved(g) == before
    assert g.get_ops() == ops and g.get_tensors() == tensors
    check_links(g)


@pytest.mark.parametrize("case", ["rename a tensor", "change opset_imports", "change ir_version",
                                  "change model info", "edit a function in place", "retype its own output",
                                  "retype and annotate its own output", "reshape an input"])
def test_compile_changing_graph_state_is_caught_and_undone(tmp_path, case):
    code, message = CASES[case]
    write_plugin(tmp_path, compile=code)
    g = make_graph()
    before = saved(g)
    with pytest.raises(PluginError, match=rf"plugin 'meddler'.*compile\(\) changed.*{message}"):
        run_plugin_chain(g, ["meddler"], [str(tmp_path)])
    assert saved(g) == before
    check_links(g)


def test_an_in_place_attr_list_edit_is_caught(tmp_path):
    g = make_graph()
    g.get_op("relu").set_attr("note", [1], onnx_type=None)
    write_plugin(tmp_path, partition="graph.get_op('relu').get_attr('note').append(2)")
    before = saved(g)
    with pytest.raises(PluginError, match=r"attrs \['note'\] of op 'relu'"):
        run_plugin_chain(g, ["meddler"], [str(tmp_path)])
    assert saved(g) == before and g.get_op("relu").get_attr("note") == [1]


@pytest.mark.parametrize("where", ["partition", "compile"])
def test_a_plugin_writing_into_a_weight_then_raising_leaves_the_weights_alone(tmp_path, where):
    body = """
    W = graph.get_tensor('w').data
    try:
        W[...] = 42
    finally:
        raise RuntimeError('gave up')
    """
    write_plugin(tmp_path, **{where: body})
    g = make_graph()
    before = saved(g)
    with pytest.raises(PluginError, match=rf"plugin 'meddler'.*{where}.*raised RuntimeError: gave up") as info:
        run_plugin_chain(g, ["meddler"], [str(tmp_path)])
    write = info.value.__cause__.__context__  # the write itself was refused
    assert isinstance(write, ValueError) and "read-only" in str(write)
    assert np.array_equal(g.get_tensor("w").data, np.ones((2, 2, 1, 1), np.float32))
    assert saved(g) == before


def test_a_plugin_that_only_merges_and_annotates_its_own_still_passes(tmp_path):
    write_plugin(tmp_path, compile="sg.set_attr('blob', b'x')\nfor op in sg.get_ops(): op.set_attr('tiled', 1, onnx_type=None)")
    g = make_graph()
    [record] = run_plugin_chain(g, ["meddler"], [str(tmp_path)])
    sg = g.get_subgraph(record["subgraphs"][0])
    assert sg.get_attr("device") == "MEDDLE" and sg.get_attr("blob") == b"x"
    assert g.get_op("conv").get_attr("tiled") == 1
    check_links(g)


def test_only_the_base_class_compile_skips_the_after_compile_check():
    """The after-compile check is skipped only where compile cannot run code: Plugin.compile itself."""
    from xgraph.plugins import Plugin
    from xgraph.plugins.chain import _compile_does_nothing

    class Plain(Plugin):
        pass

    class Own(Plugin):
        def compile(self, subgraph):
            subgraph.set_attr("x", 1)

    class Inherits(Own):
        pass

    class Lookup(Plugin):
        def __getattribute__(self, name):
            return object.__getattribute__(self, name)

    patched = Plain()
    patched.compile = lambda sg: sg.set_attr("x", 1)
    assert _compile_does_nothing(Plain())
    assert [_compile_does_nothing(p) for p in (Own(), Inherits(), Lookup(), patched)] == [False] * 4
