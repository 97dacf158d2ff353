"""`xgraph run`, `xgraph verify` and `xgraph bench`: in-process through main([...]), plus one subprocess each.

The model spans three devices (AICORE: Conv..Softmax; AICPU: TopK; CPU: Einsum), so runs cross
host/device memory; outputs are checked against onnxruntime on the same model.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

import xgraph
from xgraph.cli.main import main
from xgraph.runners.executor import kernel_registry

SAMPLES = Path(__file__).resolve().parents[2] / "samples" / "classify"


def tiny_model(seed: int = 0) -> onnx.ModelProto:
    """x (1,3,8,8) -> Conv, MaxPool, MatMul, Add, Relu, Softmax -> prob; TopK -> index; Einsum (CPU) -> total."""
    rng = np.random.default_rng(seed)
    weights = {"w": (rng.standard_normal((4, 3, 3, 3)) / 5).astype(np.float32),
               "fc": (rng.standard_normal((16, 10)) / 4).astype(np.float32),
               "shift": (rng.standard_normal(10) * 0.5).astype(np.float32),
               "k": np.array([3], np.int64)}
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[3, 3], strides=[3, 3]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc"], ["m"], name="fc"),
        helper.make_node("Add", ["m", "shift"], ["a"], name="shift"),
        helper.make_node("Relu", ["a"], ["act"], name="relu"),
        helper.make_node("Softmax", ["act"], ["prob"], name="softmax"),
        helper.make_node("TopK", ["prob", "k"], ["top", "index"], name="top3"),
        helper.make_node("Einsum", ["act"], ["total"], name="total", equation="ij->i"),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10]),
         helper.make_tensor_value_info("index", TensorProto.INT64, [1, 3]),
         helper.make_tensor_value_info("total", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(a, n) for n, a in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.onnx"
    onnx.save(tiny_model(), path)
    return path


@pytest.fixture
def x(tmp_path: Path) -> np.ndarray:
    value = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", value)
    return value


def ort_outputs(model: Path, feeds: dict) -> list[np.ndarray]:
    import onnxruntime as ort
    return ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.fixture
def broken_relu():
    """Every registered Relu kernel replaced by one that returns its input unchanged (restored after)."""
    originals = [k for k in kernel_registry() if k.op_type == "Relu"]
    assert originals
    for k in originals:
        kernel_registry().add(dataclasses.replace(k, fn=lambda x: x))
    yield
    for k in originals:
        kernel_registry().add(k)


def test_model_spans_host_and_device():
    devices = {op["device"] for op in xgraph.report(xgraph.compile(tiny_model()))["ops"]}
    assert devices == {"AICORE", "AICPU", "CPU"}


# -- run -------------------------------------------------------------------------------------

def test_run_prints_outputs_and_saves_them(model, x, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", str(out)]) == 0
    text = capsys.readouterr().out
    for line in ("output  prob: float32 (1, 10)", "output  index: int64 (1, 3)", "output  total: float32 (1,)"):
        assert line in text
    expected = ort_outputs(model, {"x": x})
    for name, want in zip(("prob", "index", "total"), expected):
        got = np.load(out / f"{name}.npy")
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_run_reads_npz_and_xmodel_in_every_mode(model, x, tmp_path, capsys):
    np.savez(tmp_path / "feeds.npz", x=x)
    xmodel = tmp_path / "tiny.xmodel"
    xgraph.compile(model).serialize(xmodel)
    (prob, *_) = ort_outputs(model, {"x": x})
    for mode in ("run", "sim", "ref"):
        out = tmp_path / mode
        assert main(["run", str(xmodel), "--input", str(tmp_path / "feeds.npz"), "--mode", mode,
                     "--kernels", "numpy", "-o", str(out)]) == 0
        np.testing.assert_allclose(np.load(out / "prob.npy"), prob, rtol=1e-4, atol=1e-6)
    assert "mode ref" in capsys.readouterr().out


def test_run_image_inputs_decode_or_stay_bytes(tmp_path, capsys):
    """reference.onnx takes HWC pixels (Pillow decodes); classifier.onnx takes the JPEG bytes (DVPP decodes)."""
    image = SAMPLES / "images" / "sample0.jpg"
    pixels = np.asarray(Image.open(image).convert("RGB"))
    assert main(["run", str(SAMPLES / "reference.onnx"), "--input", str(image), "-o", str(tmp_path / "a")]) == 0
    assert f"input   picture: uint8 {pixels.shape}" in capsys.readouterr().out
    (labels_ref,) = [np.load(tmp_path / "a" / "labels.npy")]
    assert main(["run", str(SAMPLES / "classifier.onnx"), "--input", f"jpeg={image}", "-o", str(tmp_path / "b")]) == 0
    text = capsys.readouterr().out
    assert f"input   jpeg: uint8 ({image.stat().st_size},)" in text and "output  labels: object (1, 5)" in text
    assert np.load(tmp_path / "b" / "labels.npy")[0, 0] == labels_ref[0, 0]


def test_run_user_errors_are_one_line_with_exit_2(model, tmp_path, capsys):
    cases = [
        (["run", str(model)], "no value for input(s) x (float32, shape (1, 3, 8, 8))"),
        (["run", str(model), "--input", f"y={tmp_path / 'x.npy'}"], "has no input 'y'; its inputs are: x"),
        (["run", str(model), "--input", f"x={tmp_path / 'missing.npy'}"], "no such file"),
        (["run", str(tmp_path / "nope.onnx")], "nope.onnx: no such file"),
        (["run", str(model), "--options", '{"colour": 1}'], "colour"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    np.save(tmp_path / "wrong.npy", np.zeros((1, 3, 8, 8), np.float64))
    assert main(["run", str(model), "--input", f"x={tmp_path / 'wrong.npy'}"]) == 2
    assert "the file holds a float64 array but input 'x' takes float32" in capsys.readouterr().err


def test_run_random_fills_missing_inputs(model, capsys):
    assert main(["run", str(model), "--random", "--seed", "3"]) == 0
    assert "input   x: float32 (1, 3, 8, 8)" in capsys.readouterr().out


# -- verify ----------------------------------------------------------------------------------

def test_verify_passes_and_reports_errors_per_output(model, capsys):
    assert main(["verify", str(model), "--kernels", "numpy"]) == 0
    text = capsys.readouterr().out
    assert "reference onnxruntime" in text and "verify: PASS: 3 outputs" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:5]}
    assert set(rows) == {"prob", "index", "total"}
    for name, row in rows.items():
        max_err, max_ref, limit = (float(v) for v in row[3:6])
        assert max_err <= limit and row[-1] == "ok"
        assert max_ref > 0


def test_verify_fails_when_a_kernel_is_wrong(model, capsys, broken_relu):
    assert main(["verify", str(model), "--kernels", "numpy"]) == 1
    text = capsys.readouterr().out
    assert "verify: FAIL" in text
    prob = next(line for line in text.splitlines() if line.strip().startswith("prob"))
    assert "MISMATCH" in prob and float(prob.split()[3]) > 1e-3


def test_verify_sim_fp16_uses_looser_tolerance_and_options(model, capsys):
    assert main(["verify", str(model), "--mode", "sim", "--options", '{"precision_mode": "force_fp16"}']) == 0
    assert "0.01 * max|ref| + 0.001" in capsys.readouterr().out
    assert main(["verify", str(model), "--mode", "sim", "--options", '{"precision_mode": "force_fp16"}',
                 "--rtol", "1e-9", "--atol", "0"]) == 1


def test_verify_without_any_reference_is_a_user_error(capsys):
    assert main(["verify", str(SAMPLES / "classifier.onnx")]) == 2
    assert "no reference can run this model" in capsys.readouterr().err


# -- bench -----------------------------------------------------------------------------------

def check_trace(path: Path, devices: set[str]) -> None:
    """Chrome trace-event JSON: metadata names every track; 'X' spans have ts and dur on known tracks."""
    events = json.loads(path.read_text())["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert {"ph", "pid", "tid", "name"} <= set(e), e
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    spans = [e for e in events if e["ph"] == "X"]
    assert spans and all(isinstance(e["ts"], (int, float)) and e["dur"] >= 0 for e in spans)
    assert {e["tid"] for e in spans} <= set(tracks)
    assert set(tracks.values()) == devices | {"H2D", "D2H"}
    assert {e["cat"] for e in spans} == {"subgraph", "copy"}


def test_bench_reports_latency_devices_copies_and_throughput(model, tmp_path, capsys):
    trace = tmp_path / "trace.json"
    assert main(["bench", str(model), "--runs", "6", "--warmup", "1", "--jobs", "3", "--trace", str(trace),
                 "--kernels", "numpy"]) == 0
    text = capsys.readouterr().out
    assert "latency over 6 runs (after 1 warm-up), ms: p50" in text and "p90" in text and "p99" in text
    for device in ("AICORE", "AICPU", "CPU"):
        assert any(line.split()[:1] == [device] for line in text.splitlines()), device
    copies = next(line for line in text.splitlines() if line.strip().startswith("copies"))
    assert "host<->device copies" in copies and float(copies.split("(")[1].split()[0]) >= 2
    assert "with 3 jobs in flight" in text
    check_trace(trace, {"AICORE", "AICPU", "CPU"})


def test_bench_sim_mode_shows_estimated_device_time(model, capsys):
    assert main(["bench", str(model), "--runs", "2", "--warmup", "0", "--mode", "sim"]) == 0
    assert "estimated on device" in capsys.readouterr().out
    assert main(["bench", str(model), "--jobs", "0"]) == 2
    assert "--jobs must be >= 1" in capsys.readouterr().err


# -- exit codes from a real process ----------------------------------------------------------

def xgraph_process(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xgraph.cli.main", *argv], capture_output=True, text=True,
                          timeout=120)


def test_run_exit_code_in_a_process(model):
    done = xgraph_process("run", str(model))
    assert done.returncode == 2
    assert done.stderr.startswith("xgraph: error:") and "Traceback" not in done.stderr


def test_verify_exit_code_in_a_process(model):
    done = xgraph_process("verify", str(model), "--kernels", "numpy")
    assert done.returncode == 0 and "verify: PASS" in done.stdout


def test_bench_exit_code_in_a_process(model, tmp_path):
    trace = tmp_path / "t.json"
    done = xgraph_process("bench", str(model), "--runs", "3", "--warmup", "1", "--trace", str(trace))
    assert done.returncode == 0, done.stderr
    check_trace(trace, {"AICORE", "AICPU", "CPU"})


def test_run_xmodel_compiled_with_a_plugin_loads_it_from_the_plugin_path(tmp_path):
    plugins = Path(__file__).resolve().parents[2] / "plugins"
    zoo = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_squeezenet.onnx"
    xgraph.compile(zoo, {"plugins": "smfc"}, [str(plugins)]).serialize(tmp_path / "sq.xmodel")
    cmd = [sys.executable, "-m", "xgraph.cli.main", "run", str(tmp_path / "sq.xmodel"), "--random"]
    alone = subprocess.run(cmd, capture_output=True, text=True, timeout=120)  # a fresh process: smfc not loaded
    assert alone.returncode == 2 and "smfc" in alone.stderr and "Traceback" not in alone.stderr
    loaded = subprocess.run(cmd + ["--plugin-path", str(plugins)], capture_output=True, text=True, timeout=120)
    assert loaded.returncode == 0 and "SMFC" in loaded.stdout
