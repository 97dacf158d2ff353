"""The classify sample's int8 variant: the README's commands, DVPP -> AICORE int8 -> AICPU -> CPU, checked
against onnxruntime's integer kernels on the same quantized model and against the float model's answers."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from xgraph.compiler.quantize_front import split_front  # noqa: E402
from testing.runtime import load_script  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "classify"
IMAGES = sorted((SAMPLE / "images").glob("*.jpg"))


def _module(name: str):
    return load_script(SAMPLE / f"{name}.py", f"classify_{name}")


def _readme_quantize_command(output: Path) -> list[str]:
    """The README's `xgraph quantize` command, with the output redirected to `output`."""
    text = (SAMPLE / "README.md").read_text()
    line = re.search(r"^xgraph quantize .*?(?<!\\)$", text, re.S | re.M).group(0).replace("\\\n", " ")
    args = shlex.split(line)[2:]
    args[args.index("-o") + 1] = str(output)
    root = SAMPLE.parents[1]
    return [sys.executable, "-m", "xgraph.cli.main", "quantize"] + [
        str(root / a) if a.startswith("samples/") else a for a in args]


@pytest.fixture(scope="module")
def quantized(tmp_path_factory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("classify_int8") / "classifier.int8.onnx"
    proc = subprocess.run(_readme_quantize_command(out), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out, proc.stdout


def test_quantize_calibrates_through_the_dvpp_front_and_prints_the_summary(quantized):
    path, stdout = quantized
    assert "calibrated through the model's own preprocessing (JpegDecode, VpcResize)" in stdout
    summary = re.search(r"float vs int8 \(probs\) on 1 held-out input\(s\): top-1 agreement ([\d.]+)%, "
                        r"max abs error ([\d.e-]+), mean abs error ([\d.e-]+)", stdout)
    assert summary is not None, stdout
    agreement, max_err, mean_err = map(float, summary.groups())
    assert agreement == 100.0 and 0 < mean_err <= max_err < 0.02
    model = onnx.load(str(path))
    assert [n.op_type for n in model.graph.node[:2]] == ["JpegDecode", "VpcResize"]
    assert [i.name for i in model.graph.input] == ["jpeg"]


def test_int8_model_runs_dvpp_aicore_int8_aicpu_cpu(quantized):
    compiled = xgraph.compile(quantized[0])
    devices = [sg.get_attr("device") for sg in compiled.get_root_subgraph().toposort_child_subgraph()]
    assert devices == ["DVPP", "AICORE", "AICPU", "CPU"]
    units = {u["op"]: (u["device"], u["label"]) for u in xgraph.report(compiled)["int8_units"]}
    for conv in ("conv1", "conv2", "conv3"):
        assert units[conv] == ("AICORE", "Conv (int8, per-channel)")
    assert units["fc"] == ("AICORE", "Gemm (int8, per-channel)")


def test_exact_integer_run_equals_onnxruntime_on_the_quantized_body(quantized):
    """xgraph (numpy kernels: exact integer units) vs onnxruntime's integer kernels, both after DVPP."""
    path, _ = quantized
    split = split_front(onnx.load(str(path)))
    compiled = xgraph.compile(path)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        for image in IMAGES:
            feed = {"jpeg": np.frombuffer(image.read_bytes(), np.uint8)}
            pictures = split.run(feed)
            session = ort.InferenceSession(split.body(pictures).SerializeToString(),
                                           providers=["CPUExecutionProvider"])
            want_scores, want_labels = session.run(None, pictures)
            scores, labels = runner.run(feed)
            assert np.abs(scores - want_scores).max() <= 1 / 255 + 1e-6  # one step of the probabilities' scale
            assert labels[0][0] == want_labels[0][0]


def test_run_int8_prints_float_and_int8_top5_side_by_side(quantized, capsys):
    float_top1 = {image.name: _module("run").reference_answer(image)[1][0] for image in IMAGES}
    assert _module("run_int8").main(["--model", str(quantized[0])]) == 0
    out = capsys.readouterr().out
    assert "int8 units: " in out and "AICORE  conv1        Conv (int8, per-channel)" in out
    for image in IMAGES:
        block = out.split(f"{image.name}: top-5\n", 1)[1].split("\n\n", 1)[0].splitlines()
        assert block[0].split() == ["float", "int8"]
        rows = [re.match(r"\s+([\d.]+)  (.+?)\s+([\d.]+)  (.+?)\s*$", r).groups() for r in block[1:6]]
        assert len(rows) == 5
        assert rows[0][1] == rows[0][3] == float_top1[image.name]  # Pillow + onnxruntime's float answer
        assert all(abs(float(f) - float(q)) < 0.02 for f, _, q, _ in rows)
    assert f"top-1 agrees on {len(IMAGES)} of {len(IMAGES)} images" in out
