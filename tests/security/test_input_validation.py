"""Bad input from the command line or through the API: one clear XGraphError (or argparse usage
error), exit code 2, never a traceback. Each surface validates in one place."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.cli.main import main as xgraph_main
from xgraph.cli.xcompile import main as xcompile_main
from xgraph.errors import GraphError, OptionError, RunnerError, XGraphError

from tests.security.test_limits import BOUND, chain

vi = helper.make_tensor_value_info


def model(path, dims=(2, 3)):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "small",
                              [vi("x", TensorProto.FLOAT, list(dims))], [vi("y", TensorProto.FLOAT, None)])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return str(path)


def exit_code(entry, argv) -> int:
    try:
        return entry(argv)
    except SystemExit as e:  # argparse's usage errors
        return e.code


def huge_npy(path):
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    header += " " * (117 - len(header)) + "\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode())
    return str(path)


DEEP = "[" * 60000 + "]" * 60000


@pytest.mark.parametrize("case, args, message", [
    ("folder", lambda t: [".", "-q"], "is a folder"),
    ("root", lambda t: ["/", "-q"], "is a folder"),
    ("empty", lambda t: ["", "-q"], "not a model file name"),
    ("deep JSON", lambda t: [model(t / "m.onnx"), "-q", "--options", DEEP], "nested more than"),
    ("huge int", lambda t: [model(t / "m.onnx"), "-q", "--options", '{"min_subgraph_ops": ' + "9" * 5000 + "}"],
     "5000 digits"),
    ("1e400", lambda t: [model(t / "m.onnx"), "-q", "--options", '{"input_shape": {"x": [1e400, 4]}}'],
     "out of range"),
    ("Infinity", lambda t: [model(t / "m.onnx"), "-q", "--options", '{"input_shape": {"x": [Infinity, 4]}}'],
     "Infinity"),
    ("input_shape > int64", lambda t: [model(t / "m.onnx", ("n", 3)), "-q", "--options",
                                       '{"input_shape": "x:99999999999999999999,3"}'], "'x' is beyond int64"),
    ("input_shape 2**63", lambda t: [model(t / "m.onnx", ("n", 3)), "-q", "--options",
                                     '{"input_shape": {"x": [9223372036854775808, 3]}}'], "beyond int64"),
    ("dynamic_dims > int64", lambda t: [model(t / "m.onnx", ("n", 3)), "-q", "--options",
                                        '{"input_shape": "x:-1,3", "dynamic_dims": "2;99999999999999999999"}'],
     "option 'dynamic_dims' has invalid value '2;99999999999999999999': 99999999999999999999 is beyond int64"),
])
def test_xcompile_bad_arguments(tmp_path, capsys, case, args, message):
    assert exit_code(xcompile_main, args(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
    assert not list(tmp_path.glob("*.xmodel"))


@pytest.mark.parametrize("case, args, message", [
    ("negative dim", lambda t: ["run", model(t / "m.onnx", (-3, 2)), "--random"], "no random value"),
    ("2**40 dim", lambda t: ["run", model(t / "m.onnx", (1 << 40,)), "--random"], "no random value"),
    ("rank 70", lambda t: ["verify", model(t / "m.onnx", (1,) * 70)], "no random value"),
    ("bench negative", lambda t: ["bench", model(t / "m.onnx", (-1,)), "--runs", "1"], "no random value"),
    ("seed -1", lambda t: ["run", model(t / "m.onnx"), "--random", "--seed", "-1"], "not a seed"),
    ("4 TiB npy", lambda t: ["run", model(t / "m.onnx"), "--input", f"x={huge_npy(t / 'x.npy')}"],
     "declares an array of 4398046511104 bytes"),
    ("rtol -1", lambda t: ["verify", model(t / "m.onnx"), "--rtol", "-1"], "not a tolerance"),
    ("atol nan", lambda t: ["verify", model(t / "m.onnx"), "--atol", "nan"], "not a tolerance"),
])
def test_xgraph_bad_arguments(tmp_path, capsys, case, args, message):
    assert exit_code(xgraph_main, args(tmp_path)) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_option_json_bounds_hold_for_the_api_too():
    for options, message in ((DEEP, "nested"), ('{"x": NaN}', "NaN"), ('{"min_subgraph_ops": 1e999}', "range")):
        with pytest.raises(OptionError, match=message):
            xgraph.compile(xgraph.Graph("g"), options)


@pytest.fixture
def runner():
    with xgraph.create_graph_runner(chain()) as r:
        yield r


def _generator():
    yield np.ones((1, 4), np.float32)


X = np.ones((1, 4), np.float32)
API_CASES = [
    ("string input", lambda r: r.execute_async(["abc"]), "input 'x'"),
    ("None inputs", lambda r: r.execute_async(None), "inputs must be"),
    ("int inputs", lambda r: r.execute_async(3), "inputs must be"),
    ("generator inputs", lambda r: r.execute_async(_generator()), "inputs must be"),
    ("int outputs", lambda r: r.execute_async([X], 3), "outputs must be"),
    ("generator outputs", lambda r: r.execute_async([X], _generator()), "outputs must be"),
    ("string timeout", lambda r: r.wait(r.execute_async([X]), "1"), "number of seconds"),
    ("NaN timeout", lambda r: r.wait(r.execute_async([X]), float("nan")), "got nan"),
    ("empty job", lambda r: r.wait(()), "a job is the"),
    ("string run input", lambda r: r.run({"x": "abc"}), "input 'x'"),
]


@pytest.mark.parametrize("case, call, message", API_CASES, ids=[c[0] for c in API_CASES])
def test_graph_runner_api_arguments(runner, case, call, message):
    with pytest.raises(RunnerError, match=message):
        call(runner)
    (y,) = runner.run({"x": X})  # and the runner still works
    np.testing.assert_array_equal(y, -X)


def test_single_runner_api_arguments():
    sg = next(c for c in chain().get_root_subgraph().get_children() if c.get_attr("device") == "CPU")
    with xgraph.Runner.create_runner(sg) as r:
        for call, message in ((lambda: r.execute_async([X], None), "outputs must be"),
                              (lambda: r.execute_async("x", [np.empty((1, 4), np.float32)]), "inputs must be"),
                              (lambda: r.run(["abc"]), "input 'r'"), (lambda: r.wait(()), "a job is the"),
                              (lambda: r.wait(1, "1"), "number of seconds")):
            with pytest.raises(RunnerError, match=message):
                call()
        out = np.empty((1, 4), np.float32)
        assert r.wait(r.execute_async([X], [out]), timeout=BOUND) == 0
        np.testing.assert_array_equal(out, -X)


@pytest.mark.parametrize("graph, options, message", [
    (None, {}, "needs a compiled xgraph.Graph, got NoneType"),
    ("model.xmodel", {}, "xgraph.load(path)"),
    ("chain", {"job_timeout": "1"}, "job_timeout must be a number"),
    ("chain", {"job_timeout": float("nan")}, "job_timeout must be > 0"),
    ("chain", {"max_jobs_in_flight": True}, "max_jobs_in_flight"),
])
def test_create_graph_runner_arguments(graph, options, message):
    with pytest.raises(RunnerError) as e:
        xgraph.create_graph_runner(chain() if graph == "chain" else graph, **options)
    assert message in str(e.value)


@pytest.mark.parametrize("args, message", [(("c", 3), "str or a set of str"), (("c", [3]), "str or a set of str"),
                                           ((3, "Conv"), "non-empty str"), (("c", "Conv", 5), "list of template ops")])
def test_template_add_op_types(args, message):
    with pytest.raises(GraphError, match=message):
        xgraph.GraphTemplate("t").add_op(*args)


def test_to_onnx_of_an_invalid_graph_is_an_xgraph_error(tmp_path):
    g = xgraph.Graph("broken")
    g.create_op("id", "Identity")  # Identity needs one input
    with pytest.raises(XGraphError, match=r"op 'id' \(Identity\) has 0 inputs"):
        g.to_onnx()
    with pytest.raises(XGraphError):
        g.serialize(tmp_path / "broken.xmodel")
    assert not list(tmp_path.iterdir())
