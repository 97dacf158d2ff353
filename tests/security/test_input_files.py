"""Hostile input files given to `xgraph run --input`, `--input-dir`, `verify`, `bench` and `quantize
--calibration`: every image goes through the one image reader (allow-listed formats, never Ghostscript;
Pillow's decompression-bomb limit as one line naming the file), every .npy/.npz through the one array
reader; `--input-dir` reports a bad file on one line, skips it and counts it in the exit code, and
never writes outside --output-dir."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from PIL import EpsImagePlugin

from fuzz.input_cases import EPS, HUGE_NPY, encrypted_npz, npy_of, pickled_npz, png_declaring, png_of, sparse_npy
from xgraph.cli.main import main as xgraph_main
from xgraph.ir.array_reader import max_input_bytes

ROOT = Path(__file__).resolve().parents[2]
vi = helper.make_tensor_value_info


def _model(path: Path, dtype: int, dims: list) -> str:
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT) if dtype == TensorProto.UINT8 \
        else helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "m", [vi("x", dtype, dims)], [vi("y", TensorProto.FLOAT, dims)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.fixture
def image_model(tmp_path) -> str:
    """One uint8 HWC picture in, the same as float out."""
    return _model(tmp_path / "image.onnx", TensorProto.UINT8, ["h", "w", 3])


@pytest.fixture
def array_model(tmp_path) -> str:
    return _model(tmp_path / "array.onnx", TensorProto.FLOAT, [1, 4])


@pytest.fixture
def eps_opened(monkeypatch) -> list:
    """Records every EPS file Pillow starts to open (the plugin that runs Ghostscript)."""
    opened: list = []
    original = EpsImagePlugin.EpsImageFile._open

    def record(self):
        opened.append(self)
        return original(self)
    monkeypatch.setattr(EpsImagePlugin.EpsImageFile, "_open", record)
    return opened


def _xgraph(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = xgraph_main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(code: int, err: str, *words: str) -> None:
    assert code == 2 and "Traceback" not in err, err
    line = err.strip()
    assert "\n" not in line and all(w in line for w in words), err


def test_an_eps_named_png_is_refused_unopened_by_run_input(tmp_path, capsys, image_model, eps_opened):
    (tmp_path / "evil.png").write_bytes(EPS)
    code, _, err = _xgraph(capsys, "run", image_model, "--input", tmp_path / "evil.png")
    _one_line_error(code, err, "evil.png", "not a JPEG/PNG")
    assert eps_opened == []


def test_an_eps_named_png_is_skipped_unopened_by_run_input_dir(tmp_path, capsys, image_model, eps_opened):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "evil.png").write_bytes(EPS)
    (folder / "good.png").write_bytes(png_of(np.full((4, 5, 3), 7, np.uint8)))
    code, out, err = _xgraph(capsys, "run", image_model, "--input-dir", folder, "-o", tmp_path / "out")
    assert code == 1 and "Traceback" not in out + err
    assert "evil.png: error:" in out and "not a JPEG/PNG" in out and "1 of 2 files ran" in out
    assert eps_opened == []
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "good" / "y.npy"), np.full((4, 5, 3), 7, np.float32))


def test_ghostscript_never_runs_for_run_input(tmp_path, image_model):
    """End to end: a `gs` first on PATH would leave a mark if anything ran it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    mark = tmp_path / "gs-ran"
    (fake / "gs").write_text(f"#!/bin/sh\necho ran >> {mark}\nexit 1\n")
    (fake / "gs").chmod(0o755)
    (tmp_path / "evil.png").write_bytes(EPS)
    env = {**os.environ, "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "xgraph.cli.main", "run", image_model, "--input",
                           str(tmp_path / "evil.png")], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert not mark.exists()


@pytest.mark.parametrize("command", ["run", "verify", "bench"])
def test_a_png_declaring_20000x20000_is_one_line_naming_the_file(tmp_path, capsys, image_model, command):
    (tmp_path / "bomb.png").write_bytes(png_declaring(20000, 20000))
    extra = ["--runs", "1"] if command == "bench" else []
    code, _, err = _xgraph(capsys, command, image_model, "--input", f"x={tmp_path / 'bomb.png'}", *extra)
    _one_line_error(code, err, "bomb.png", "decompression-bomb limit")


def test_a_picture_just_over_the_pixel_limit_is_refused_too(tmp_path, capsys, image_model, monkeypatch):
    """Between the limit and twice it Pillow only warns; the reader refuses it the same way."""
    from PIL import Image
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    (tmp_path / "big.png").write_bytes(png_of(np.zeros((30, 40, 3), np.uint8)))  # 1200 pixels
    code, _, err = _xgraph(capsys, "run", image_model, "--input", tmp_path / "big.png")
    _one_line_error(code, err, "big.png", "larger than 1000 pixels")


def test_a_folder_of_bad_files_skips_each_with_one_line_and_runs_the_rest(tmp_path, capsys, array_model):
    folder = tmp_path / "in"
    folder.mkdir()
    good = np.array([[1, -2, 3, -4]], np.float32)
    (folder / "a_good.npy").write_bytes(npy_of(good))
    (folder / "pickled.npz").write_bytes(pickled_npz())
    (folder / "huge.npy").write_bytes(HUGE_NPY)
    (folder / "notzip.npz").write_bytes(b"this is not a zip archive")
    sparse_npy(folder / "sparse.npy", max_input_bytes() + 4)
    (folder / "bomb.png").write_bytes(png_declaring(20000, 20000))
    (folder / "locked.npz").write_bytes(encrypted_npz())
    (folder / "z_good.npz").write_bytes(npy_of(good))  # an .npy under an .npz name: read by its content
    code, out, err = _xgraph(capsys, "run", array_model, "--input-dir", folder, "-o", tmp_path / "out")
    assert code == 1 and "Traceback" not in out + err, out + err
    lines = out.splitlines()
    for name, problem in [("pickled.npz", "unpickling"), ("huge.npy", "declares an array of 4398046511104 bytes"),
                          ("notzip.npz", "not a .npy or .npz file"), ("sparse.npy", "limit for an input file"),
                          ("bomb.png", "decompression-bomb limit"), ("locked.npz", "is encrypted")]:
        (line,) = [x for x in lines if x.startswith(f"  {name}: error:")]
        assert problem in line, line
    assert "2 of 8 files ran" in out and "6 failed" in out
    for stem in ("a_good", "z_good"):
        np.testing.assert_array_equal(np.load(tmp_path / "out" / stem / "y.npy"), np.maximum(good, 0))
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a_good", "z_good"]


def test_outputs_never_leave_the_output_folder_nor_overwrite_each_other(tmp_path, capsys, array_model):
    folder = tmp_path / "in"
    folder.mkdir()
    values = {"...npy": 1, "..npy": 2, "a.npy": 3, "a.npz": 4, "A.npy": 5, "-x.npy": 6}
    for name, v in values.items():
        data = npy_of(np.full((1, 4), v, np.float32))
        (folder / name).write_bytes(data)
    out = tmp_path / "deep" / "out"
    code, stdout, err = _xgraph(capsys, "run", array_model, "--input-dir", folder, "-o", out)
    assert code == 0, stdout + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["array.onnx", "deep", "in"]
    assert [p.name for p in (tmp_path / "deep").iterdir()] == ["out"]
    written = sorted(out.rglob("*.npy"))
    assert len(written) == len(values)  # one folder each: nothing overwritten
    assert all(p.resolve().parent.parent == out.resolve() for p in written)
    assert sorted(float(np.load(p)[0, 0]) for p in written) == sorted(values.values())


def test_an_output_folder_that_is_a_link_out_is_refused_before_anything_runs(tmp_path, capsys, array_model):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "x.npy").write_bytes(npy_of(np.ones((1, 4), np.float32)))
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "x").symlink_to(elsewhere)
    code, _, err = _xgraph(capsys, "run", array_model, "--input-dir", folder, "-o", out)
    _one_line_error(code, err, "x.npy", "outside --output-dir")
    assert list(elsewhere.iterdir()) == []
