"""Every file xgraph writes goes through one writer (`xgraph.ir.files`), and it keeps the same rules:
the target is a regular file or absent, writes are atomic, modes are kept, long names work,
nothing is left behind on failure, and files that belong together are written as a unit."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.errors import OutputFileError, XGraphError
from xgraph.ir import files

vi = helper.make_tensor_value_info


def small_model(path: Path, names=("x", "y")) -> Path:
    x, y = names
    graph = helper.make_graph([helper.make_node("Relu", [x], [y], name="relu")], "small",
                              [vi(x, TensorProto.FLOAT, [2, 3])], [vi(y, TensorProto.FLOAT, [2, 3])])
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def listing(folder: Path) -> dict[str, tuple]:
    """Every entry of `folder`: (kind, mode, size) — the oracle that nothing changed."""
    out = {}
    for p in sorted(folder.iterdir()):
        st = os.lstat(p)
        out[p.name] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_size, getattr(st, "st_rdev", 0))
    return out


@pytest.fixture
def specials(tmp_path):
    """A folder holding a character device, a FIFO, a folder and a symlink: none may be written."""
    d = tmp_path / "specials"
    d.mkdir()
    if os.geteuid() == 0:
        os.mknod(d / "chardev", 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # like /dev/null, but ours
    os.mkfifo(d / "fifo")
    (d / "folder").mkdir()
    (d / "real.txt").write_text("precious")
    (d / "link").symlink_to(d / "real.txt")
    return d


SPECIAL = ["chardev", "fifo", "folder", "link"]


@pytest.mark.parametrize("name", SPECIAL)
def test_the_writer_refuses_every_target_that_is_not_a_regular_file(specials, name):
    if not (specials / name).exists() and not (specials / name).is_symlink():
        pytest.skip("mknod needs root")
    before = listing(specials)
    with pytest.raises(OutputFileError) as e:
        files.write_bytes(specials / name, b"data")
    assert name in str(e.value)
    assert listing(specials) == before


@pytest.mark.parametrize("name", SPECIAL)
def test_xcompile_and_dump_refuse_special_targets(tmp_path, specials, name):
    if not (specials / name).exists() and not (specials / name).is_symlink():
        pytest.skip("mknod needs root")
    model = small_model(tmp_path / "small.onnx")
    before = listing(specials)
    r = cli("xgraph.cli.xcompile", str(model), "-o", str(specials / name), "-q", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr and name in r.stderr, r.stderr
    assert listing(specials) == before
    xgraph.compile(model).serialize(tmp_path / "m.xmodel")
    r = cli("xgraph.cli.main", "dump", str(tmp_path / "m.xmodel"), str(specials / name), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert listing(specials) == before
    assert (specials / "real.txt").read_text() == "precious"


def test_overwriting_keeps_the_mode_of_the_existing_file(tmp_path):
    model = small_model(tmp_path / "small.onnx")
    out = tmp_path / "m.xmodel"
    out.write_bytes(b"old")
    os.chmod(out, 0o600)
    xgraph.compile(model).serialize(out)
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert xgraph.load(out).get_op("relu").type == "Relu"


def test_a_legal_long_file_name_can_be_written(tmp_path):
    model = small_model(tmp_path / "small.onnx")
    name = "m" * (255 - len(".xmodel")) + ".xmodel"  # the longest name most file systems take
    xgraph.compile(model).serialize(tmp_path / name)
    assert xgraph.load(tmp_path / name).get_op("relu").type == "Relu"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "small.onnx"])


def test_report_never_writes_through_a_symlink_and_fails_as_a_unit(tmp_path):
    model = small_model(tmp_path / "small.onnx")
    precious = tmp_path / "precious.json"
    precious.write_text("keep")
    (tmp_path / "r.json").symlink_to(precious)
    before = listing(tmp_path)
    r = cli("xgraph.cli.xcompile", str(model), "-o", "new.xmodel", "--report", "r.json", "-q", cwd=tmp_path)
    assert r.returncode == 2 and "symbolic link" in r.stderr, r.stderr
    assert listing(tmp_path) == before  # no new .xmodel either
    assert precious.read_text() == "keep"


def test_a_report_that_fails_late_leaves_neither_file(tmp_path, monkeypatch):
    """The .xmodel and the report are one unit: a failure writing the report keeps the old .xmodel."""
    from xgraph.cli import xcompile
    from xgraph.compiler import report as report_module
    model = small_model(tmp_path / "small.onnx")
    (tmp_path / "m.xmodel").write_bytes(b"old model")
    (tmp_path / "r.json").write_text('{"old": true}')
    before = listing(tmp_path)

    def broken_writer(compiled, path):
        files.write_text(path, "partial")
        raise XGraphError("report failed on purpose")
    monkeypatch.setattr(report_module, "write_report", broken_writer)
    monkeypatch.setattr(xcompile, "print_summary", lambda *a: None)
    code = xcompile.main([str(model), "-o", str(tmp_path / "m.xmodel"), "--report", str(tmp_path / "r.json"), "-q"])
    assert code == 2
    assert listing(tmp_path) == before
    assert (tmp_path / "m.xmodel").read_bytes() == b"old model"
    assert json.loads((tmp_path / "r.json").read_text()) == {"old": True}


def test_a_unit_puts_back_files_already_replaced_when_a_later_one_fails(tmp_path):
    (tmp_path / "a").write_text("old a")
    (tmp_path / "c").write_text("old c")
    with pytest.raises(RuntimeError):
        with files.all_or_nothing():
            files.write_text(tmp_path / "a", "new a")
            files.write_text(tmp_path / "b", "new b")
            raise RuntimeError("late failure")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "old a", "c": "old c"}
    with files.all_or_nothing():
        files.write_text(tmp_path / "a", "new a")
        files.write_text(tmp_path / "b", "new b")
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"a": "new a", "b": "new b", "c": "old c"}


def test_write_report_never_empties_an_existing_file_on_failure(tmp_path, monkeypatch):
    from xgraph.compiler import report as report_module
    out = tmp_path / "r.json"
    out.write_text('{"old": 1}')

    def broken(compiled):
        raise XGraphError("a damaged attr")
    monkeypatch.setattr(report_module, "report", broken)
    with pytest.raises(XGraphError):
        report_module.write_report(xgraph.Graph("g"), str(out))
    assert out.read_text() == '{"old": 1}'
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_run_output_names_never_collide(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y/0"], name="a"),
                               helper.make_node("Neg", ["x"], ["y_0"], name="b"),
                               helper.make_node("Abs", ["x"], ["Y_0"], name="c")], "collide",
                              [vi("x", TensorProto.FLOAT, [3])],
                              [vi(n, TensorProto.FLOAT, [3]) for n in ("y/0", "y_0", "Y_0")])
    model = tmp_path / "collide.onnx"
    model.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    np.save(tmp_path / "x.npy", x)
    from xgraph.cli.main import main
    assert main(["run", str(model), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out")]) == 0
    saved = sorted((tmp_path / "out").iterdir())
    assert len(saved) == 3 and len({p.name.lower() for p in saved}) == 3
    got = sorted(np.load(p).tolist() for p in saved)
    assert got == sorted([np.maximum(x, 0).tolist(), (-x).tolist(), np.abs(x).tolist()])
    assert np.array_equal(np.load(tmp_path / "out" / "y_0.npy"), -x)  # the clean name keeps its plain file


def test_trace_goes_through_the_writer(tmp_path):
    model = small_model(tmp_path / "small.onnx")
    (tmp_path / "t.json").symlink_to(tmp_path / "small.onnx")
    with xgraph.create_graph_runner(xgraph.compile(model), profile=True) as runner:
        runner.run({"x": np.ones((2, 3), np.float32)})
        with pytest.raises(OutputFileError):
            runner.export_chrome_trace(tmp_path / "t.json")
        runner.export_chrome_trace(tmp_path / "trace.json")
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
