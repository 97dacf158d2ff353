"""`xgraph quantize` on hostile files: the model goes through the safe ONNX reader (never onnx.load),
calibration files through the one array and image readers; each problem is one line naming the file."""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import EpsImagePlugin

pytest.importorskip("onnxruntime.quantization")

from fuzz.input_cases import EPS, HUGE_NPY, pickled_npz, png_declaring  # noqa: E402
from xgraph.cli.main import main as xgraph_main  # noqa: E402
from tests.quant.models import small_cnn  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def model(tmp_path) -> Path:
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    return path


def _quantize(capsys, model: Path, calibration: Path, out: Path) -> tuple[int, str]:
    try:
        code = xgraph_main(["quantize", str(model), "--calibration", str(calibration), "-o", str(out)])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


def _folder(tmp_path: Path, name: str, data: bytes) -> Path:
    folder = tmp_path / "calib"
    folder.mkdir()
    np.save(folder / "a_good.npy", np.zeros((1, 3, 16, 16), np.float32))
    (folder / name).write_bytes(data)
    return folder


@pytest.mark.parametrize("name, data, problem", [
    ("pickled.npz", pickled_npz(), "unpickling"),
    ("huge.npy", HUGE_NPY, "declares an array of 4398046511104 bytes"),
    ("notzip.npz", b"garbage", "not a .npy or .npz file"),
    ("bomb.png", png_declaring(20000, 20000), "decompression-bomb limit"),
    ("evil.png", EPS, "not a JPEG/PNG"),
])
def test_a_bad_calibration_file_is_one_line_naming_it(tmp_path, capsys, model, monkeypatch, name, data, problem):
    opened: list = []
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", lambda self: opened.append(self))
    out = tmp_path / "never.onnx"
    code, err = _quantize(capsys, model, _folder(tmp_path, name, data), out)
    assert code == 2 and "Traceback" not in err and "\n" not in err.strip(), err
    assert name in err and problem in err, err
    assert opened == [] and not out.exists()


def test_a_garbage_model_is_one_line(tmp_path, capsys):
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(b"\x08\x07garbage" * 100)
    code, err = _quantize(capsys, bad, _folder(tmp_path, "b.npy", b""), tmp_path / "never.onnx")
    assert code == 2 and "Traceback" not in err and "garbage.onnx" in err and "not" in err, err


def _overlapping_model(folder: Path, tensors: int = 2000, nbytes: int = 1 << 20) -> Path:
    """A model of `tensors` initializers that all read the same `nbytes` of one external data file."""
    (folder / "data.bin").write_bytes(b"\0" * nbytes)
    inits = []
    for i in range(tensors):
        t = onnx.TensorProto(name=f"w{i}", data_type=TensorProto.FLOAT, dims=[nbytes // 4])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "data.bin"), ("offset", "0"), ("length", str(nbytes))):
            t.external_data.add(key=k, value=v)
        inits.append(t)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    path = folder / "overlap.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def test_overlapping_external_tensors_are_refused_in_bounded_memory(tmp_path):
    """2,000 tensors over one 1 MiB file: refused before reading, under a 2 GiB address-space limit."""
    path = _overlapping_model(tmp_path)
    calib = tmp_path / "calib"
    calib.mkdir()
    np.save(calib / "a.npy", np.zeros((1, 4), np.float32))
    limit = 2 << 30

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    err_file = tmp_path / "stderr"
    with open(err_file, "w") as err_out:  # `timeout` waits for the CLI, so its rusage holds the CLI's peak RSS
        proc = subprocess.Popen(["timeout", "300", sys.executable, "-m", "xgraph.cli.main", "quantize", str(path),
                                 "--calibration", str(calib), "-o", str(tmp_path / "never.onnx")],
                                stdout=subprocess.DEVNULL, stderr=err_out, preexec_fn=cap,
                                env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
        _, status, usage = os.wait4(proc.pid, 0)
    err = err_file.read_text()
    assert os.waitstatus_to_exitcode(status) == 2, err
    assert "overlap.onnx" in err and "overlapping bytes" in err and "Traceback" not in err, err
    assert usage.ru_maxrss * 1024 < 1 << 30  # under 1 GiB: the 2,000 MiB the tensors ask for were never read
    assert not (tmp_path / "never.onnx").exists()
