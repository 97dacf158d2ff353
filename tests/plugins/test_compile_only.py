"""A plugin without a runner compiles: "show me what my IP would take" before any runner exists.
The report and summary warn per subgraph; inspect/svg/html work; running fails with one clear error."""
from __future__ import annotations

import re
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.cli.main import main
from xgraph.errors import RunnerError


@pytest.fixture
def setup(tmp_path):
    (tmp_path / "future_ip.py").write_text(textwrap.dedent('''
        from xgraph.partition import filter_by_type, merge_subgraph
        from xgraph.plugins import Plugin

        class FutureIP(Plugin):
            def get_plugin_name(self):
                return "future_ip"

            def get_device(self):
                return "FUTURE"

            def get_runner(self):
                return {}

            def partition(self, graph):
                return merge_subgraph(filter_by_type(graph, "Relu"))

        def get_plugin():
            return FutureIP()
    '''))
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Neg", ["a"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    model_path = tmp_path / "m.onnx"
    import onnx
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model_path)
    return tmp_path, model_path


WARNING = "subgraph 'subgraph_relu' runs nowhere yet: plugin 'future_ip' registered no runner for mode 'run'"


def test_compiles_and_the_report_warns(setup):
    plugin_dir, model_path = setup
    compiled = xgraph.compile(model_path, {"plugins": "future_ip"}, plugin_path=[str(plugin_dir)])
    report = xgraph.report(compiled)
    assert {s["name"]: s["device"] for s in report["subgraphs"]}["subgraph_relu"] == "FUTURE"
    assert report["warnings"] == [WARNING]


def test_running_fails_naming_subgraph_device_plugin_and_mode(setup):
    plugin_dir, model_path = setup
    compiled = xgraph.compile(model_path, {"plugins": "future_ip"}, plugin_path=[str(plugin_dir)])
    expected = ("subgraph 'subgraph_relu' (device FUTURE): plugin 'future_ip' registered no runner for mode 'run'")
    with pytest.raises(RunnerError, match=re.escape(expected)):
        xgraph.Runner.create_runner(compiled.get_subgraph("subgraph_relu"), "run")
    with pytest.raises(RunnerError, match=re.escape(expected)):
        xgraph.create_graph_runner(compiled)
    # the rest of the graph is unaffected: its own subgraphs still run
    neg = compiled.get_root_subgraph().find_child_subgraph_by_op("neg")
    (y,) = xgraph.Runner.create_runner(neg, "run").run([np.ones((1, 4), np.float32)])
    np.testing.assert_array_equal(y, -np.ones((1, 4), np.float32))


def test_cli_compiles_warns_and_inspects_but_run_fails(setup, capsys):
    plugin_dir, model_path = setup
    out = plugin_dir / "m.xmodel"
    args = ["--plugin-path", str(plugin_dir), "--options", '{"plugins": "future_ip"}']
    from xgraph.cli.xcompile import main as xcompile
    assert xcompile([str(model_path), "-o", str(out), *args]) == 0
    assert WARNING in " ".join(capsys.readouterr().out.split())
    assert main(["inspect", str(out)]) == 0
    assert "FUTURE" in capsys.readouterr().out
    assert main(["svg", str(out), str(plugin_dir / "m.svg")]) == 0
    assert (plugin_dir / "m.svg").read_text().startswith("<")
    assert main(["run", str(out), "--random", "--plugin-path", str(plugin_dir)]) == 2
    assert "plugin 'future_ip' registered no runner for mode 'run'" in capsys.readouterr().err


def test_a_runner_name_nobody_registered_compiles_with_a_warning(setup):
    plugin_dir, model_path = setup
    source = (plugin_dir / "future_ip.py").read_text().replace("return {}", "return {'run': 'npu_not_yet'}")
    (plugin_dir / "named_ip.py").write_text(source.replace('"future_ip"', '"named_ip"'))
    compiled = xgraph.compile(model_path, {"plugins": "named_ip"}, plugin_path=[str(plugin_dir)])
    [warning] = xgraph.report(compiled)["warnings"]
    assert warning.startswith("subgraph 'subgraph_relu' runs nowhere yet: plugin 'named_ip' names runner "
                              "'npu_not_yet' for mode 'run', which is not registered")
    with pytest.raises(RunnerError, match="npu_not_yet"):
        xgraph.create_graph_runner(compiled)
