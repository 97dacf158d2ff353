"""`xgraph verify --bisect` / `xgraph.bisect`: the subgraph (and op) that differs, found on every seed."""
from __future__ import annotations

import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.cli.main import main
from xgraph.kernels.registry import kernel
from xgraph.registries import Registries
from xgraph.runners.bisect import compare

#: A plugin whose runner computes its MatMul right and returns it transposed: the right shape, the
#: wrong layout (a square output, so nothing downstream notices the shape).
TRANSPOSER = textwrap.dedent('''
    import xgraph
    from xgraph.partition import filter_by_type, merge_subgraph
    from xgraph.plugins import Plugin

    class TransposingRunner(xgraph.Runner):
        def __init__(self, subgraph, mode="run"):
            super().__init__(subgraph, mode)
            self.w = subgraph.get_const_tensors()[0].data

        def execute(self, inputs):
            return [(inputs[0] @ self.w).T.copy()]

    xgraph.register_runner("transposer", TransposingRunner)

    class TransposerPlugin(Plugin):
        def get_plugin_name(self):
            return "transposer"

        def get_runner(self):
            return {"run": "transposer", "sim": "transposer", "ref": "transposer"}

        def partition(self, graph):
            return merge_subgraph(filter_by_type(graph, "MatMul"))

    def get_plugin():
        return TransposerPlugin()
''')


def square_model(path):
    """x[16,16] -> MatMul(w) -> Tanh -> Add(c) -> y; random weights."""
    rng = np.random.default_rng(3)
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Tanh", ["h"], ["t"], name="tanh"),
         helper.make_node("Add", ["t", "c"], ["y"], name="add")],
        "square", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [16, 16])],
        [numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) * 0.1, "w"),
         numpy_helper.from_array(rng.standard_normal((16,)).astype(np.float32), "c")]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)
    return path


@pytest.fixture
def transposer(tmp_path, monkeypatch):
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "transposer.py").write_text(TRANSPOSER)
    return square_model(tmp_path / "square.onnx"), str(folder)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_a_transposing_runner_is_found_on_every_seed(transposer, seed):
    path, plugins = transposer
    compiled = xgraph.compile(path, {"plugins": "transposer"}, plugin_path=[plugins])
    report = xgraph.bisect(compiled, seeds=[seed], plugin_path=[plugins])
    bad = report.first_failure
    assert bad is not None and bad.device == "TRANSPOSER" and bad.runner == "transposer"
    assert bad.failed_seeds == [seed]
    assert [s.ok for s in report.subgraphs if s is not bad] == [True] * (len(report.subgraphs) - 1)
    assert "bisect: FAIL: first subgraph out of tolerance: 'subgraph_mm' (TRANSPOSER, runner transposer)" in report.table()


def test_verify_bisect_prints_the_table_and_exits_non_zero(transposer, capsys):
    path, plugins = transposer
    code = main(["verify", str(path), "--plugin-path", plugins, "--options", '{"plugins": "transposer"}',
                 "--bisect", "--seed", "7"])
    out = capsys.readouterr().out
    assert code == 1
    assert "seeds 7, 8, 9" in out and "FAIL on seed 7,8,9" in out
    row = next(line for line in out.splitlines() if line.strip().startswith("subgraph_mm"))
    assert "TRANSPOSER" in row and "transposer" in row and "float32" in row


def test_a_clean_model_passes_bisect_with_exit_zero(tmp_path, capsys):
    path = square_model(tmp_path / "clean.onnx")
    assert main(["verify", str(path), "--bisect"]) == 0
    assert "bisect: PASS" in capsys.readouterr().out


def test_the_first_differing_op_is_named_inside_a_kernel_runner(tmp_path):
    path = square_model(tmp_path / "m.onnx")
    registries = Registries()

    @kernel("Tanh", devices=("CPU", "AICORE"), dtypes=(np.float32,), registry=registries.kernels, since=13)
    def wrong_tanh(x):
        return np.tanh(x) * 1.01

    compiled = xgraph.compile(path, {"devices": "cpu"})
    report = xgraph.bisect(compiled, kernels="numpy", registries=registries)
    bad = report.first_failure
    assert bad is not None and "'tanh'" in bad.first_op and "Tanh" in bad.first_op


def test_the_tolerance_scales_with_the_reference_and_the_dtype():
    ref = np.array([1000.0, 1e-3, 0.0], np.float32)
    assert compare("y", ref * (1 + 5e-5), ref).ok
    assert not compare("y", ref * (1 + 5e-4), ref).ok
    assert compare("y", ref.astype(np.float16) * np.float16(1.005), ref.astype(np.float16)).ok
    assert not compare("i", np.array([1, 2]), np.array([1, 3])).ok
    check = compare("y", np.nextafter(ref, np.float32(np.inf)), ref)
    assert check.ok and check.max_ulp == pytest.approx(1.0)


def test_verify_falls_back_to_onnxruntime_when_the_evaluator_cannot_run_the_model(tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnxruntime")
    import onnx.reference

    class Refusing:
        def __init__(self, *args, **kwargs):
            raise NotImplementedError("no kernel for this op")

    monkeypatch.setattr(onnx.reference, "ReferenceEvaluator", Refusing)
    path = square_model(tmp_path / "m.onnx")
    code = main(["verify", str(path)])
    out = capsys.readouterr().out
    assert code == 0 and out.count("verify: PASS") == 2
    assert "onnxruntime (the ONNX reference evaluator cannot run this model: no kernel for this op" in out


def test_verify_prints_no_verdict_when_a_later_check_fails(tmp_path, capsys, monkeypatch):
    pytest.importorskip("onnxruntime")
    import onnx.reference

    import xgraph.runners.reference_run as reference_run

    class Refusing:
        def __init__(self, *args, **kwargs):
            raise NotImplementedError("no kernel for this op")

    def no_onnxruntime(*args, **kwargs):
        raise ImportError("onnxruntime")

    path = square_model(tmp_path / "m.onnx")
    monkeypatch.setattr(onnx.reference, "ReferenceEvaluator", Refusing)
    real = reference_run.run_onnxruntime
    calls = []

    def first_only(*args, **kwargs):  # the numpy path's reference runs; the auto path's cannot
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("session failed")
        return real(*args, **kwargs)

    monkeypatch.setattr(reference_run, "run_onnxruntime", first_only)
    code = main(["verify", str(path)])
    out = capsys.readouterr()
    assert code == 2 and "PASS" not in out.out
