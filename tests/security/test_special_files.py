"""Model paths and external data that are not regular files: refused on one no-follow,
non-blocking handle, checked with fstat before a byte is read (never read until memory runs
out, never a hang), also when the file is swapped after the path checks."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import xgraph
from xgraph.errors import ModelFileError
from xgraph.ir.onnx import external_data

from tests.security.test_hostile_files import add_model, external, save

# Each case runs in a child with a 20 s CPU and 1 GiB address-space limit: reading /dev/zero
# or blocking on a FIFO would hit the limit (or the timeout) instead of passing.
CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
import xgraph
from xgraph.errors import XGraphError
try:
    {call}
except XGraphError as e:
    print(type(e).__name__, e)
"""


def child(call: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD.format(call=call)], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


@pytest.fixture
def traps(tmp_path):
    (tmp_path / "zero.onnx").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.onnx")
    (tmp_path / "dir.onnx").mkdir()
    return tmp_path


@pytest.mark.parametrize("name, kind", [("zero.onnx", "character device"), ("fifo.onnx", "FIFO"),
                                        ("dir.onnx", "folder")])
@pytest.mark.parametrize("call", ["xgraph.load({p!r})", "xgraph.Graph.from_onnx({p!r})",
                                  "xgraph.compile({p!r})", "xgraph.Graph.deserialize({p!r})"])
def test_model_paths_that_are_not_regular_files_are_refused_at_once(traps, name, kind, call):
    r = child(call.format(p=name), traps)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ModelFileError") and name in r.stdout and kind in r.stdout, r.stdout


def test_xcompile_refuses_a_fifo_model_without_hanging(traps):
    r = subprocess.run([sys.executable, "-m", "xgraph.cli.xcompile", "fifo.onnx", "-q"], cwd=traps,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "FIFO" in r.stderr and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("swap", ["fifo", "folder", "device"])
def test_external_data_swapped_after_the_checks_is_refused(tmp_path, monkeypatch, swap):
    """weights.bin passes every path check, then becomes a FIFO/folder/device before it is opened."""
    if swap == "device" and os.geteuid() != 0:
        pytest.skip("mknod needs root")
    model = tmp_path / "model"
    model.mkdir()
    weights = model / "weights.bin"
    weights.write_bytes(np.arange(16, dtype=np.float32).tobytes())
    path = save(add_model(external("w", "weights.bin")), model)
    checked = external_data._check_range
    swapped = []

    def check_then_swap(*args):
        result = checked(*args)
        if not swapped:
            weights.unlink()
            if swap == "fifo":
                os.mkfifo(weights)
            elif swap == "folder":
                weights.mkdir()
            else:
                os.mknod(weights, 0o666 | 0o020000, os.makedev(1, 5))  # a /dev/zero of our own
            swapped.append(swap)
        return result
    monkeypatch.setattr(external_data, "_check_range", check_then_swap)
    with pytest.raises(ModelFileError, match="not a regular file") as e:
        xgraph.Graph.from_onnx(path)
    assert "'w'" in str(e.value) and swapped
