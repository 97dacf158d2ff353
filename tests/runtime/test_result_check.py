"""Runner outputs are checked everywhere: Runner.run, execute_async, the graph runner and the CLI
refuse a value whose dtype or shape is not its tensor's, naming subgraph, runner and output."""
from __future__ import annotations

import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.errors import RunnerError
from xgraph.runners.result_check import ResultCheck

BAD = {"wrong_dtype_shape": lambda x: [np.zeros(3)], "not_an_array": lambda x: ["hello"],
       "scalar_matrix": lambda x: [np.full((9, 9), 9.0)], "good": lambda x: [np.abs(x)]}


class Returns(xgraph.Runner):
    """Returns whatever BAD[self.kind] makes of the input."""
    kind = "good"

    def execute(self, inputs):
        return BAD[self.kind](inputs[0])


for kind in BAD:
    xgraph.register_runner(f"returns_{kind}", type(f"Returns_{kind}", (Returns,), {"kind": kind}))


def model(batch="batch") -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"), helper.make_node("Abs", ["a"], ["y"], name="abs")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 1000])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 1000])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def plugin_dir(tmp_path):
    for kind in BAD:
        (tmp_path / f"abs_{kind}.py").write_text(textwrap.dedent(f'''
            from xgraph.partition import filter_by_type
            from xgraph.plugins import Plugin

            class AbsIP(Plugin):
                def get_plugin_name(self):
                    return "abs_{kind}"

                def get_device(self):
                    return "ABSIP"

                def get_runner(self):
                    return {{"run": "returns_{kind}"}}

                def partition(self, graph):
                    return filter_by_type(graph, "Abs")

            def get_plugin():
                return AbsIP()
        '''))
    return tmp_path


def compiled(plugin_dir, kind: str, batch="batch"):
    return xgraph.compile(model(batch), {"plugins": f"abs_{kind}"}, plugin_path=[str(plugin_dir)])


def abs_subgraph(graph):
    return graph.get_root_subgraph().find_child_subgraph_by_op("abs")


@pytest.mark.parametrize("kind, returned", [("wrong_dtype_shape", "got float64 of shape (3,)"),
                                            ("not_an_array", "got a str ('hello')"),
                                            ("scalar_matrix", "got float64 of shape (9, 9)")])
def test_runner_run_refuses_a_wrong_result(plugin_dir, kind, returned):
    runner = xgraph.Runner.create_runner(abs_subgraph(compiled(plugin_dir, kind, batch=1)), "run")
    with pytest.raises(RunnerError) as e:
        runner.run([np.ones((1, 1000), np.float32)])
    message = str(e.value)
    assert "subgraph 'subgraph_abs'" in message and f"runner Returns_{kind}" in message
    assert "output 'y' must be float32 of shape (1, 1000)" in message and returned in message
    assert runner.get_stats()["failures"] == 1


def test_execute_async_and_graph_runner_fail_the_job(plugin_dir):
    graph = compiled(plugin_dir, "wrong_dtype_shape", batch=1)
    runner = xgraph.Runner.create_runner(abs_subgraph(graph), "run")
    job = runner.execute_async([np.ones((1, 1000), np.float32)], [np.empty((1, 1000), np.float32)])
    assert runner.wait(job, timeout=10) != 0
    assert "output 'y' must be float32 of shape (1, 1000), got float64 of shape (3,)" in str(runner.get_error(job))
    with xgraph.create_graph_runner(graph) as graph_runner, pytest.raises(RunnerError, match="output 'y' must be"):
        graph_runner.run({"x": np.ones((1, 1000), np.float32)})


def test_symbolic_dims_are_bound_once_per_run(plugin_dir):
    graph = compiled(plugin_dir, "good")
    with xgraph.create_graph_runner(graph) as runner:
        (y,) = runner.run({"x": -np.ones((3, 1000), np.float32)})
    np.testing.assert_array_equal(y, np.zeros((3, 1000), np.float32))
    check = ResultCheck("R", [("y", np.dtype(np.float32), ("batch", 1000))], [("x", np.dtype(np.float32), ("batch", 4))])
    check([np.zeros((3, 4), np.float32)], [np.zeros((3, 1000), np.float32)])
    with pytest.raises(RunnerError, match=r"output 'y' has batch=2, but this run bound batch=3"):
        check([np.zeros((3, 4), np.float32)], [np.zeros((2, 1000), np.float32)])


def test_outputs_declared_alike_are_checked_as_one_but_each_is_named_when_wrong():
    # a decoder's presents: one declared signature, its dim bound by the pasts
    present = (np.dtype(np.float32), (1, 4, "past", 8))
    outputs = [("logits", np.dtype(np.float32), (1, 1, 64))] + [(f"present{i}", *present) for i in range(4)]
    inputs = [("ids", np.dtype(np.int64), (1, 1))] + [(f"past{i}", *present) for i in range(4)]
    check = ResultCheck("R", outputs, inputs)
    pasts = [np.zeros((1, 4, 5, 8), np.float32) for _ in range(4)]
    ids = np.zeros((1, 1), np.int64)
    good = [np.zeros((1, 1, 64), np.float32)] + [np.zeros((1, 4, 5, 8), np.float32) for _ in range(4)]
    for _ in range(2):  # the second time from the memo
        check([ids, *pasts], good)
    for wrong, message in [(np.zeros((1, 4, 6, 8), np.float32), r"output 'present2' has past=6, but this run bound past=5"),
                           (np.zeros((1, 4, 5, 8), np.float64), r"output 'present2' must be float32"),
                           (np.zeros((1, 4, 5), np.float32), r"output 'present2' must be float32 of shape")]:
        with pytest.raises(RunnerError, match=message):
            check([ids, *pasts], good[:3] + [wrong] + good[4:])
    alike_but_wrong = [good[0]] + [np.zeros((1, 4, 7, 8), np.float32) for _ in range(4)]
    with pytest.raises(RunnerError, match=r"output 'present0' has past=7, but this run bound past=5"):
        check([ids, *pasts], alike_but_wrong)  # all four alike: the first of them is checked, and named


def test_cli_run_exits_non_zero_on_a_wrong_result(plugin_dir, tmp_path, capsys):
    from xgraph.cli.main import main
    path = tmp_path / "m.xmodel"
    compiled(plugin_dir, "scalar_matrix", batch=1).serialize(path)
    code = main(["run", str(path), "--random", "--plugin-path", str(plugin_dir)])
    assert code != 0
    assert "output 'y' must be float32 of shape (1, 1000), got float64 of shape (9, 9)" in capsys.readouterr().err
