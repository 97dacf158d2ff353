"""`xgraph quantize` / `xgraph.quantize`: calibration folders, device rules, the accuracy summary, then xcompile."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from xgraph.compiler.quantize import int8_op_types, quantize_model  # noqa: E402
from xgraph.errors import XGraphError  # noqa: E402
from tests.quant.models import small_cnn  # noqa: E402


@pytest.fixture()
def float_model(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(4)
    for i in range(8):
        np.save(calib / f"{i:02d}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    return path, calib


def _weight_zero_points(model: onnx.ModelProto) -> list[np.ndarray]:
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    out = []
    for n in model.graph.node:
        if n.op_type == "DequantizeLinear" and n.input[0] in inits and inits[n.input[0]].dtype == np.int8:
            out.append(inits[n.input[2]] if len(n.input) > 2 else np.zeros(1, np.int8))
    return out


def test_quantize_writes_a_qdq_model_with_symmetric_per_channel_weights_and_a_summary(float_model, tmp_path):
    path, calib = float_model
    result = quantize_model(path, calib, tmp_path / "cnn.int8.onnx")
    q = onnx.load(result.output)
    assert any(n.op_type == "QuantizeLinear" for n in q.graph.node)
    zps = _weight_zero_points(q)
    assert zps and all(not np.any(z) for z in zps)
    s = result.summary
    assert s["calibration_inputs"] == 6 and s["inputs"] == 2 and s["held_out"]
    # the summary's numbers, recomputed independently with onnxruntime on the held-out files
    f, i8 = ort.InferenceSession(str(path)), ort.InferenceSession(result.output)
    errs = []
    for name in ("06.npy", "07.npy"):
        x = np.load(calib / name)
        errs.append(np.abs(f.run(None, {"x": x})[0] - i8.run(None, {"x": x})[0]).max())
    assert s["max_abs_error"] == pytest.approx(max(errs), rel=1e-5)
    assert 0 <= s["top1_agreement"] <= 1
    assert s["max_abs_error"] < 0.1 * s["output_range"] + 0.1


def test_only_ops_the_device_runs_in_int8_are_quantized():
    ops = int8_op_types("AICORE")
    assert {"Conv", "Gemm", "MatMul"} <= set(ops)
    with pytest.raises(XGraphError, match="unknown target device"):
        int8_op_types("NOPE")


def test_xcompile_of_the_quantized_model_puts_convs_and_gemms_on_aicore_as_int8_units(float_model, tmp_path):
    path, calib = float_model
    out = xgraph.quantize(str(path), calibration=str(calib), output=str(tmp_path / "q.onnx"))
    rep = xgraph.report(xgraph.compile(out))
    heavy = [o for o in rep["ops"] if o["type"] in ("Conv", "MatMul", "Gemm")]
    units = {u["op"]: u for u in rep["int8_units"]}
    on_aicore_int8 = [o for o in heavy if o["device"] == "AICORE" and "int8" in units.get(o["name"], {}).get("label", "")]
    assert len(on_aicore_int8) >= 0.95 * len(heavy) and heavy


def test_cli_prints_the_summary_and_refuses_an_empty_folder(float_model, tmp_path):
    path, calib = float_model
    out = tmp_path / "cli.int8.onnx"
    proc = subprocess.run([sys.executable, "-m", "xgraph.cli.main", "quantize", str(path), "--calibration", str(calib),
                           "-o", str(out), "--method", "percentile", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["method"] == "percentile" and out.is_file()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "xgraph.cli.main", "quantize", str(path), "--calibration", str(empty),
                           "-o", str(tmp_path / "never.onnx")], capture_output=True, text=True)
    assert proc.returncode != 0 and "holds no .npy" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "never.onnx").exists()


def test_images_are_calibration_inputs_too(tmp_path):
    from PIL import Image
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    calib = tmp_path / "imgs"
    calib.mkdir()
    rng = np.random.default_rng(5)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(calib / f"{i}.png")
    result = quantize_model(path, calib, tmp_path / "img.int8.onnx", method="entropy")
    assert result.summary["calibration_inputs"] == 2


def test_calibration_arrays_of_the_wrong_shape_are_named(float_model, tmp_path):
    path, _ = float_model
    bad = tmp_path / "bad"
    bad.mkdir()
    np.save(bad / "a.npy", np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(XGraphError, match=r"a\.npy.*input 'x' has shape \[1, 3, 8, 8\]"):
        quantize_model(path, bad, tmp_path / "never.onnx")
    assert not (tmp_path / "never.onnx").exists()
