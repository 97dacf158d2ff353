"""Saving an .xmodel with a side file: readers see the whole old pair or the whole new one, a kill at
any point leaves a loadable pair, leftovers of killed saves go with the next save, and any legal
file name gets a side file. Weights go to the side file because the tests force it
(`external_data_threshold=0`), so the models stay tiny."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.ir.onnx.side_file import side_files

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="kills a forked saver")

N = 64
LAYERS = 3
#: Loads checked while another process keeps saving (the report measured 2,000).
CONCURRENT_LOADS = 200
CHILD_SECONDS = 60


def mlp(seed: int) -> xgraph.Graph:
    """x -> (MatMul w_i -> Relu) * LAYERS: every weight 16 KiB, so each goes to the side file."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(rng.standard_normal((N, N)).astype(np.float32), f"w{i}") for i in range(LAYERS)]
    nodes, x = [], "x"
    for i in range(LAYERS):
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, N])], initializer=inits)
    return xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def weights(g: xgraph.Graph) -> list[np.ndarray]:
    return [np.array(g.get_tensor(f"w{i}").data) for i in range(LAYERS)]


@pytest.fixture(scope="module")
def versions():
    """Two graphs with the same structure and different weights: what a reader may see."""
    a, b = mlp(1), mlp(2)
    return {"a": (a, weights(a)), "b": (b, weights(b))}


def which(loaded: xgraph.Graph, versions) -> str:
    """'a' or 'b' when every weight is that version's; else the mix is named."""
    got = weights(loaded)
    for name, (_, ws) in versions.items():
        if all(np.array_equal(x, y) for x, y in zip(got, ws)):
            return name
    return "mixed"


def leftovers(folder: Path, out: Path) -> list[str]:
    """Everything beside the .xmodel but the one side file it names."""
    keep = {out.name} | {p.name for p in side_files(out)[:1]}
    return sorted(p.name for p in folder.iterdir() if p.name not in keep)


# -- a reader concurrent with saves ----------------------------------------------------------------
SAVER = """
import sys, numpy as np
sys.path.insert(0, {root!r})
from tests.security.test_save_pairs import mlp
from pathlib import Path
graphs = [mlp(1), mlp(2)]
out, stop = Path({out!r}), Path({stop!r})
i = 0
while not stop.exists():
    graphs[i % 2].serialize(out, external_data_threshold=0)
    i += 1
    if i == 2:
        Path({started!r}).touch()
print(i)
"""


def test_loads_concurrent_with_saves_see_a_whole_pair(versions, tmp_path):
    out, stop, started = tmp_path / "m.xmodel", tmp_path / "stop", tmp_path / "started"
    versions["a"][0].serialize(out, external_data_threshold=0)
    root = str(Path(__file__).resolve().parents[2])
    code = SAVER.format(root=root, out=str(out), stop=str(stop), started=str(started))
    saver = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen, failures = {"a": 0, "b": 0, "mixed": 0}, []
    try:
        deadline = time.monotonic() + CHILD_SECONDS
        while not started.exists() and saver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        for _ in range(CONCURRENT_LOADS):
            try:
                seen[which(xgraph.load(out), versions)] += 1
            except xgraph.XGraphError as e:
                failures.append(str(e))
    finally:
        stop.touch()
        saved, err = saver.communicate(timeout=CHILD_SECONDS)
    assert saver.returncode == 0, err
    assert failures == [] and seen["mixed"] == 0, (failures[:3], seen)
    assert int(saved) > 10 and seen["a"] and seen["b"], (saved, seen)  # the loads really overlapped the saves
    stop.unlink()
    started.unlink()
    versions["b"][0].serialize(out, external_data_threshold=0)
    assert leftovers(tmp_path, out) == []


# -- a kill at every step of a save ------------------------------------------------------------------
#: The calls through which a save changes the disk: the saver is killed just before the k-th one.
STEPS = ("open", "write", "pwrite", "ftruncate", "fsync", "copy_file_range", "replace", "rename", "link", "unlink")


def _save_killed_at(step: int, graph: xgraph.Graph, out: Path) -> bool:
    """Save `graph` to `out` in a forked child that SIGKILLs itself before its `step`-th changing call;
    True when the save ran to its end first."""
    pid = os.fork()
    if pid == 0:  # the child: count the calls, die at the chosen one
        try:  # noqa: SIM105 - the child must never return into pytest
            count = [0]

            def counted(real):
                def call(*args, **kwargs):
                    if real is os.open and not (len(args) > 1 and args[1] & os.O_CREAT):
                        return real(*args, **kwargs)  # opening to read changes nothing
                    count[0] += 1
                    if count[0] == step:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return real(*args, **kwargs)
                return call

            for name in STEPS:
                if hasattr(os, name):
                    setattr(os, name, counted(getattr(os, name)))
            graph.serialize(out, external_data_threshold=0)
        except BaseException:
            os._exit(3)
        os._exit(0)
    deadline = time.monotonic() + CHILD_SECONDS
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            pytest.fail(f"the saver killed at step {step} did not end in {CHILD_SECONDS} s")
        time.sleep(0.005)
    if os.WIFSIGNALED(status):
        assert os.WTERMSIG(status) == signal.SIGKILL
        return False
    assert os.WEXITSTATUS(status) == 0
    return True


def test_a_kill_at_any_step_of_a_save_leaves_a_loadable_pair(versions, tmp_path):
    steps = 0
    for step in range(1, 200):
        folder = tmp_path / f"k{step}"
        folder.mkdir()
        out = folder / "m.xmodel"
        versions["a"][0].serialize(out, external_data_threshold=0)
        finished = _save_killed_at(step, versions["b"][0], out)
        got = which(xgraph.load(out), versions)  # before the rename the old pair, after it the new one
        assert got == "b" if finished else got in ("a", "b"), f"killed at step {step}: {got}"
        versions["a"][0].serialize(out, external_data_threshold=0)  # the next save cleans what the kill left
        assert leftovers(folder, out) == [], f"killed at step {step}"
        assert which(xgraph.load(out), versions) == "a"
        if finished:
            break
        steps += 1
    assert finished and steps >= 8, steps  # the side file, the .xmodel, the rename and the clean-up were all hit


# -- stale files of our naming ----------------------------------------------------------------------------
def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_next_save_removes_temporaries_of_dead_writers_only(versions, tmp_path):
    out = tmp_path / "m.xmodel"
    versions["a"][0].serialize(out, external_data_threshold=0)
    dead = tmp_path / f".m.xmodel.{_dead_pid()}.0123456789ab.tmp"
    alive = tmp_path / f".m.xmodel.{os.getppid()}.0123456789ab.tmp"  # a writer still running
    other = [tmp_path / ".m.xmodel.0123456789ab.tmp", tmp_path / ".m.xmodel.tmp", tmp_path / ".other.123.0123456789ab.tmp"]
    for p in (dead, alive, *other):
        p.write_bytes(b"x" * 100)
    versions["b"][0].serialize(out, external_data_threshold=0)
    assert not dead.exists()
    assert alive.exists() and all(p.exists() for p in other)


def test_a_side_file_being_written_is_never_removed(versions, tmp_path):
    """A save still writing its side file holds its lock: another save's clean-up leaves it."""
    from xgraph.ir.temp_files import create_exclusive
    from xgraph.ir.onnx.side_file import side_name
    out = tmp_path / "m.xmodel"
    in_flight = side_name(out, bytes(range(16)))
    fd = create_exclusive(str(in_flight))
    try:
        versions["a"][0].serialize(out, external_data_threshold=0)
        assert in_flight.exists()
    finally:
        os.close(fd)
    versions["b"][0].serialize(out, external_data_threshold=0)
    assert not in_flight.exists() and len(side_files(out)) == 1


def test_saving_over_the_old_side_file_naming_replaces_it(versions, tmp_path):
    """Pairs written before side files were named by their save (``NAME.xmodel.data``) still load, and
    the next save removes the old side file."""
    import onnx
    out = tmp_path / "m.xmodel"
    versions["a"][0].serialize(out, external_data_threshold=0)
    (side,) = side_files(out)
    legacy = tmp_path / "m.xmodel.data"
    os.rename(side, legacy)
    model = onnx.load(str(out), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = legacy.name
    meta = next(p for p in model.metadata_props if p.key == "xgraph.meta")
    meta.value = meta.value.replace(side.name, legacy.name)
    out.write_bytes(model.SerializeToString())
    assert which(xgraph.load(out), versions) == "a"
    versions["b"][0].serialize(out, external_data_threshold=0)
    assert not legacy.exists() and which(xgraph.load(out), versions) == "b"
    versions["a"][0].serialize(out, external_data_threshold=1 << 40)  # inline now: no side file left
    assert side_files(out) == [] and which(xgraph.load(out), versions) == "a"


# -- long names ---------------------------------------------------------------------------------------------
def test_a_255_byte_name_gets_a_side_file(versions, tmp_path):
    name = "m" * (255 - len(".xmodel")) + ".xmodel"
    out = tmp_path / name
    for version in ("a", "b", "a"):
        versions[version][0].serialize(out, external_data_threshold=0)
        assert which(xgraph.load(out), versions) == version
    (side,) = side_files(out)
    assert len(os.fsencode(side.name)) <= 255
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, side.name])
    killed = not _save_killed_at(9, versions["b"][0], out)  # its temporary name is shortened too
    assert killed and all(len(os.fsencode(p.name)) <= 255 for p in tmp_path.iterdir())
    versions["b"][0].serialize(out, external_data_threshold=0)
    assert leftovers(tmp_path, out) == [] and which(xgraph.load(out), versions) == "b"


def test_a_load_retries_when_only_the_side_files_show_the_replacement(tmp_path):
    """A file system may give the next save's .xmodel the inode its old one freed, with the same size and,
    within its timestamps' granularity, the same time: the side files' names (a new random token per
    save) still tell that the pair was replaced, so the load is tried again; a pair that did not change
    keeps its error."""
    from xgraph.errors import ModelFileError
    from xgraph.ir.onnx.side_file import read_consistently
    out = tmp_path / "m.xmodel"
    mlp(1).serialize(out, external_data_threshold=0)
    (side,) = side_files(out)
    calls = []

    def once():
        calls.append(1)
        if len(calls) == 1:  # a save replaced the pair meanwhile; the .xmodel's stat reads the same
            stat = os.stat(out)
            side.rename(side.with_name(side.name.replace(side.name.split(".")[-2], "0" * 16)))
            os.utime(out, ns=(stat.st_atime_ns, stat.st_mtime_ns))
            raise ModelFileError("external data file is gone")
        return "loaded"

    assert read_consistently(out, once) == "loaded" and len(calls) == 2

    def damaged():
        calls.append(1)
        raise ModelFileError("damaged")

    calls.clear()
    with pytest.raises(ModelFileError, match="damaged"):
        read_consistently(out, damaged)
    assert len(calls) == 1
