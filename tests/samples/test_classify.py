"""The classify sample: DVPP -> AI Core -> AI CPU -> CPU, equal to Pillow + onnxruntime, and robust to bad JPEGs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xgraph
from xgraph.errors import XGraphError
from testing.runtime import load_script

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "classify"


def _module(name: str):
    return load_script(SAMPLE / f"{name}.py", f"classify_{name}")


def test_checked_in_models_are_what_the_generator_makes():
    make = _module("make_sample")
    assert make.classifier_model().SerializeToString() == (SAMPLE / "classifier.onnx").read_bytes()
    assert make.reference_model().SerializeToString() == (SAMPLE / "reference.onnx").read_bytes()


@pytest.fixture(scope="module")
def compiled():
    return xgraph.compile(SAMPLE / "classifier.onnx")


def test_partition_spans_the_four_devices(compiled):
    devices = [sg.get_attr("device") for sg in compiled.get_root_subgraph().toposort_child_subgraph()]
    assert devices == ["DVPP", "AICORE", "AICPU", "CPU"]
    by_device = {sg.get_attr("device"): {op.type for op in sg.get_ops()}
                 for sg in compiled.get_root_subgraph().get_children()}
    assert by_device["DVPP"] == {"JpegDecode", "VpcResize"}
    assert {"Conv", "Gemm", "Softmax"} <= by_device["AICORE"]
    assert by_device["AICPU"] == {"TopK"} and by_device["CPU"] == {"LabelEncoder"}


def test_run_prints_top5_equal_to_pillow_and_onnxruntime(capsys):
    pytest.importorskip("onnxruntime")
    assert _module("run").main([]) == 0
    out = capsys.readouterr().out
    assert out.count("Pillow + onnxruntime: same top-5") == 3
    assert "DIFFERENT" not in out
    for device in ("DVPP", "AICORE", "AICPU", "CPU"):
        assert f"\n  {device}" in out  # a time line per device


def test_damaged_jpeg_fails_its_job_and_the_runner_keeps_serving(compiled):
    good = np.frombuffer((SAMPLE / "images" / "sample0.jpg").read_bytes(), np.uint8)
    truncated = good[: 200]  # header intact, the picture cut off
    with xgraph.create_graph_runner(compiled) as runner:
        expected = runner.run({"jpeg": good})
        for bad in (truncated, np.frombuffer(b"not a jpeg at all", np.uint8)):
            with pytest.raises(XGraphError, match="decode|JpegDecode"):
                runner.run({"jpeg": bad})
        again = runner.run({"jpeg": good})
    np.testing.assert_array_equal(expected[0], again[0])
    assert list(expected[1][0]) == list(again[1][0])


def test_ref_mode_runs_dvpp_subgraphs_through_their_kernels(compiled):
    encoded = np.frombuffer((SAMPLE / "images" / "sample2.jpg").read_bytes(), np.uint8)
    with xgraph.create_graph_runner(compiled, mode="ref") as ref, xgraph.create_graph_runner(compiled) as run:
        (ref_scores, ref_labels), (scores, labels) = ref.run({"jpeg": encoded}), run.run({"jpeg": encoded})
    assert {r.backend for r in ref.runners.values()} == {"reference"}
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-5)
    assert labels.dtype == ref_labels.dtype == object and list(labels[0]) == list(ref_labels[0])
