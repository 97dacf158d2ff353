"""CLI polish: sim estimates "n/a" without a cost profile, CLI-speaking input errors, output paths checked
before any work, the HTML report header, xgraph.write_html / xgraph.write_svg."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import Image

import xgraph
from xgraph.cli.main import main

RELU_PLUGIN = """
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin


class P(Plugin):
    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, "Relu"))


def get_plugin():
    return P()
"""


@pytest.fixture
def relu_model(tmp_path) -> Path:
    """x (1,3,4,4) float32 -> Relu -> Sigmoid -> y."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    graph = helper.make_graph(nodes, "relu_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "boomdev.py").write_text(RELU_PLUGIN)
    return path


def test_sim_estimate_is_na_for_a_device_without_cost_profile(relu_model, capsys):
    argv = ["bench", str(relu_model), "--runs", "2", "--warmup", "0", "--mode", "sim", "--options",
            '{"plugins": "boomdev"}', "--plugin-path", str(relu_model.parent / "plugins")]
    assert main(argv) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert lines["BOOMDEV"].endswith("estimated on device n/a (no cost profile)")
    assert re.search(r"estimated on device \d+\.\d{3}$", lines["AICORE"])


def test_an_image_for_a_float_input_speaks_cli(relu_model, tmp_path, capsys):
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "image.png")
    assert main(["run", str(relu_model), "-i", str(tmp_path / "image.png")]) == 2
    err = capsys.readouterr().err
    assert "input 'x' takes float32, but an image file gives uint8 pixels" in err
    assert "--input x=FILE.npy" in err and "astype" not in err


@pytest.mark.parametrize("argv, flag", [
    (["svg", "{model}", "/nonexistent/out.svg"], "output /nonexistent/out.svg"),
    (["html", "{model}", "/nonexistent/out.html"], "output /nonexistent/out.html"),
    (["bench", "{model}", "--trace", "/nonexistent/t.json"], "--trace /nonexistent/t.json"),
])
def test_output_paths_are_checked_before_loading(argv, flag, tmp_path, capsys):
    missing_model = tmp_path / "not_there.onnx"  # the model is never opened: the path fails first
    assert main([a.format(model=missing_model) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"xgraph: error: {flag}: folder '/nonexistent' does not exist"), err


def test_report_header_names_model_version_options_and_plugin_chain(relu_model, tmp_path):
    options = {"plugins": "boomdev", "min_subgraph_ops": 1}
    compiled = xgraph.compile(relu_model, options, [str(relu_model.parent / "plugins")])
    path = tmp_path / "report.html"
    xgraph.write_html(compiled, str(path))
    text = path.read_text()
    header = text[text.index('id="xg-header"'):text.index("</table>", text.index('id="xg-header"'))]
    assert f"<th>xgraph</th><td>{xgraph.__version__}</td>" in header
    assert "&quot;plugins&quot;: &quot;boomdev&quot;" in header and "(not recorded)" in header
    chain = text[text.index('id="xg-plugin-chain"'):]
    chain = chain[:chain.index("</table>")]
    assert "<td>boomdev</td>" in chain and "BOOMDEV" in chain and "<td class=num>1</td>" in chain
    from xgraph.view.report_html import write_html_report
    write_html_report(compiled, str(path), model=str(relu_model))
    assert f"<th>model</th><td>{relu_model}</td>" in path.read_text()


def test_write_svg_is_public(relu_model, tmp_path):
    xgraph.write_svg(xgraph.compile(relu_model), str(tmp_path / "p.svg"))
    svg = (tmp_path / "p.svg").read_text()
    assert svg.count('class="op"') == 2 and 'data-op="relu"' in svg


BOOM_RUNNER = """
from xgraph import Runner, register_runner
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin


class R(Runner):
    def execute(self, inputs):
        scale = len(inputs)
        raise ValueError("kernel exploded")


register_runner("boom_runner", R)


class P(Plugin):
    def get_runner(self):
        return {"run": "boom_runner"}

    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, "Relu"))


def get_plugin():
    return P()
"""


def test_a_plugin_runner_error_names_its_line(relu_model, tmp_path, capsys):
    (tmp_path / "plugins" / "boom.py").write_text(BOOM_RUNNER)
    np.save(tmp_path / "x.npy", np.ones((1, 3, 4, 4), np.float32))
    argv = ["run", str(relu_model), "-i", f"x={tmp_path / 'x.npy'}", "--options", '{"plugins": "boom"}',
            "--plugin-path", str(tmp_path / "plugins")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "execute failed: ValueError: kernel exploded at " + str(tmp_path / "plugins" / "boom.py") + ":10 " \
        "(--debug shows the traceback)" in err and err.count("\n") == 1
