"""Real signals delivered to a child `xcompile` while it writes its .xmodel and side file: SIGTERM and
SIGHUP end it cleanly (exit 128 + signal, nothing left, the old pair untouched); what a SIGKILL
leaves is removed by the next write to the same target. The child's disk is made slow at a chosen
fsync, so the signal reliably lands inside the write."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xgraph.cli.xcompile import main

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")

ROOT = str(Path(__file__).resolve().parents[2])
#: Seconds the child may take to start, compile and reach the write; and to end after the signal.
START_LIMIT, END_LIMIT = 120, 30
OPTIONS = '{"external_data_threshold": 0}'

CHILD = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
real, calls = os.fsync, [0]

def slow_disk(fd):  # the {pause}-th flush of the write takes a minute: the signal arrives during it
    calls[0] += 1
    if calls[0] == {pause}:
        Path({marker!r}).touch()
        time.sleep(60)
    real(fd)

os.fsync = slow_disk
from xgraph.cli.xcompile import main
sys.exit(main([{model!r}, "-o", {out!r}, "-q", "--options", {options!r}]))
"""


@pytest.fixture
def model(tmp_path):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 256])], initializer=[w])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def _interrupt(model: Path, out: Path, pause: int, sig: int) -> subprocess.CompletedProcess:
    """Run xcompile in a child, send `sig` once it is inside the `pause`-th fsync of its write."""
    marker = out.parent.parent / f"writing-{os.getpid()}"
    marker.unlink(missing_ok=True)
    code = CHILD.format(root=ROOT, pause=pause, marker=str(marker), model=str(model), out=str(out), options=OPTIONS)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + START_LIMIT
    while not marker.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"xcompile did not reach its write: {child.communicate()[1][-500:]}")
        time.sleep(0.02)
    child.send_signal(sig)
    try:
        stdout, stderr = child.communicate(timeout=END_LIMIT)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail(f"xcompile did not end within {END_LIMIT} s of signal {sig}")
    marker.unlink()
    return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("pause", [1, 2], ids=["side-file", "xmodel"])
def test_sigterm_and_sighup_during_the_write_leave_the_old_pair_and_nothing_else(model, tmp_path, sig, pause):
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "m.xmodel"
    assert main([str(model), "-o", str(out), "-q", "--options", OPTIONS]) == 0
    before = _listing(folder)
    assert len(before) == 2  # the .xmodel and its side file
    done = _interrupt(model, out, pause, sig)
    assert done.returncode == 128 + sig, done.stderr
    assert f"terminated by {signal.Signals(sig).name}" in done.stderr and "Traceback" not in done.stderr
    assert _listing(folder) == before  # no temporary file, no new side file, the old pair as it was


def test_what_a_sigkill_leaves_goes_with_the_next_write(model, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "m.xmodel"
    assert main([str(model), "-o", str(out), "-q", "--options", OPTIONS]) == 0
    before = _listing(folder)
    for pause in (1, 2):  # killed inside the side file's write, then inside the .xmodel's
        done = _interrupt(model, out, pause, signal.SIGKILL)
        assert done.returncode == -signal.SIGKILL
    left = set(_listing(folder)) - set(before)
    assert len(left) == 3, left  # two side files of the killed saves, the second one's temporary .xmodel
    assert main([str(model), "-o", str(out), "-q", "--options", OPTIONS]) == 0
    after = _listing(folder)
    assert len(after) == 2 and not set(after) & left  # the new pair only
