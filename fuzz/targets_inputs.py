"""Fuzz targets for input files: `input_dir` (a folder of mutated .npy/.npz/image files run through
`xgraph run --input-dir`) and `calibration` (a mutated calibration folder through `xgraph.quantize`).

Invariants: nothing but an XGraphError escapes (the CLI: exit code 0, 1 or 2, no traceback, no
warning printed);
`--input-dir` names every file on exactly one line, runs the good ones and writes only inside
--output-dir, one folder per file that ran; Pillow never opens an EPS file (the plugin that runs
Ghostscript); a failed quantize writes nothing.
"""
from __future__ import annotations

import functools
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper

from fuzz.input_cases import EPS, HUGE_NPY, npy_header, npy_of, npz_of, pickled_npz, png_declaring
from fuzz.mutators import mutate_bytes
from fuzz.targets import Finding, Target, call
from fuzz.targets_api import _captured

SUFFIXES = (".npy", ".npz", ".png", ".jpg", ".bmp", ".gif", ".tif", ".webp", ".ppm")
#: names that try to leave the output folder or collide with each other
ODD_STEMS = ("..", ".", "...", "a", "A", ".hidden", "-x", "a b", "a\u0301", "x" * 300, "a/..", "con", "~")


@functools.lru_cache(maxsize=None)
def seed_files() -> tuple[tuple[str, bytes], ...]:
    """(suffix, bytes) of well-formed and hostile input files."""
    from PIL import Image
    import io
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 255, (6, 7, 3), dtype=np.uint8)
    images = []
    for fmt, suffix in (("PNG", ".png"), ("JPEG", ".jpg"), ("BMP", ".bmp"), ("GIF", ".gif"), ("TIFF", ".tif"),
                        ("WEBP", ".webp"), ("PPM", ".ppm")):
        buffer = io.BytesIO()
        Image.fromarray(pixels).save(buffer, format=fmt)
        images.append((suffix, buffer.getvalue()))
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    return tuple(images) + (
        (".npy", npy_of(x)), (".npz", npz_of(x=x)), (".npz", npz_of(x=x, y=x)), (".npy", npy_of(x.astype(np.int64))),
        (".npy", npy_of(np.zeros((1, 3, 16, 16), np.float32))), (".npz", npz_of(x=np.zeros((1, 3, 16, 16), np.float32))),
        (".png", EPS), (".png", png_declaring(20000, 20000)), (".png", png_declaring(9000, 9000)),
        (".npz", pickled_npz()), (".npy", HUGE_NPY), (".npy", npy_header((1 << 62,), "<f8")),
        (".npy", npy_header((2, 2), "|O") + b"\x80\x04N."), (".npz", b"PK\x03\x04" + b"\0" * 40))


def folder_case(seed: int, mutated: float = 0.6) -> list[tuple[str, bytes]]:
    """1-4 (file name, bytes): seed files, a `mutated` share of them mutated, under ordinary or odd names."""
    rng = random.Random(seed)
    corpus = seed_files()
    files = []
    for i in range(rng.randint(1, 4)):
        suffix, data = corpus[rng.randrange(len(corpus))]
        if rng.random() < mutated:
            data = mutate_bytes(data, rng, [d for _, d in corpus])
        if rng.random() < 0.15:
            suffix = rng.choice(SUFFIXES)
        stem = rng.choice(ODD_STEMS) if rng.random() < 0.3 else f"f{i}"
        files.append((stem.replace("/", "_") + suffix, data))
    return files


def _write(folder: Path, files: list[tuple[str, bytes]]) -> list[str]:
    written = []
    for name, data in files:
        try:
            (folder / name).write_bytes(data)
            written.append(name)
        except OSError:  # a name this file system refuses (too long): not a case
            continue
    return sorted(set(written))


class _EpsWatch:
    """Counts the EPS files Pillow starts to open while the watch is on."""

    def __enter__(self) -> "_EpsWatch":
        from PIL import EpsImagePlugin
        self.opened, self.plugin = 0, EpsImagePlugin.EpsImageFile
        self.original = self.plugin._open
        watch = self

        def record(image):
            watch.opened += 1
            return watch.original(image)
        self.plugin._open = record
        return self

    def __exit__(self, *exc) -> None:
        self.plugin._open = self.original


def _model(path: Path, dtype: int, dims: list) -> None:
    node = helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT) if dtype == TensorProto.UINT8 \
        else helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "m", [helper.make_tensor_value_info("x", dtype, dims)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


class InputDir(Target):
    """`xgraph run MODEL --input-dir DIR -o OUT` on a folder of mutated input files."""

    name = "input_dir"

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="xgraph-fuzz-inputs-"))
        _model(self.root / "array.onnx", TensorProto.FLOAT, [1, 4])
        _model(self.root / "image.onnx", TensorProto.UINT8, ["h", "w", 3])

    def case(self, seed: int) -> dict[str, Any]:
        return {"model": random.Random(seed).choice(("array.onnx", "image.onnx")), "files": folder_case(seed)}

    def describe(self, case: Any) -> bytes:
        return repr({"model": case["model"], "files": [(n, d[:2000]) for n, d in case["files"]]}).encode()

    def run(self, case: dict[str, Any]) -> str:
        from xgraph.cli.main import main as xgraph_main
        work = self.root / "case"
        shutil.rmtree(work, ignore_errors=True)
        (work / "in").mkdir(parents=True)
        (work / "out").mkdir()
        names = _write(work / "in", case["files"])
        if not names:
            return "refused"
        argv = ["run", str(self.root / case["model"]), "--input-dir", str(work / "in"), "-o", str(work / "out" / "o")]
        with _EpsWatch() as eps, _captured() as (out, err):
            try:
                code = xgraph_main(argv)
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 2
            except BaseException as e:  # the invariant: nothing but XGraphError (turned into exit 2) escapes
                raise Finding(f"escaped {type(e).__name__}", f"--input-dir {names!r}: {str(e)[:200]}") from None
        text = out.getvalue() + err.getvalue()
        if code not in (0, 1, 2) or "Traceback" in text:
            raise Finding("exit code" if code not in (0, 1, 2) else "traceback", f"{names!r}: {text[-300:]}")
        if eps.opened:
            raise Finding("EPS opened", f"{names!r}: Pillow opened an EPS file (Ghostscript)")
        if "Warning" in err.getvalue():
            raise Finding("warning printed", f"{names!r}: {err.getvalue()[-300:]}")
        ran = self._check_outputs(work, names, out.getvalue(), code)
        return "accepted" if ran else "refused"  # accepted: at least one file of the folder ran

    @staticmethod
    def _check_outputs(work: Path, names: list[str], stdout: str, code: int) -> int:
        """How many files ran; a Finding when the outputs or the report do not say the same."""
        outside = sorted(str(p.relative_to(work)) for p in work.rglob("*")
                         if not (p.is_relative_to(work / "in") or p.is_relative_to(work / "out")))
        if outside or [p.name for p in (work / "out").iterdir()] not in ([], ["o"]):
            raise Finding("wrote outside", f"{names!r}: wrote {outside or list((work / 'out').iterdir())}")
        if code == 2:
            return 0
        ran = [n for n in names if any(line.startswith(f"  {n}: ") and not line.startswith(f"  {n}: error:")
                                       for line in stdout.splitlines())]
        reported = [n for n in names if sum(line.startswith(f"  {n}: ") for line in stdout.splitlines()) == 1]
        if len(reported) != len(names) and all(n.isprintable() for n in names):
            raise Finding("files not reported", f"{names!r}: not one line each in {stdout[-300:]!r}")
        folders = list((work / "out" / "o").iterdir()) if (work / "out" / "o").exists() else []
        if len(folders) != len(ran) or any(f.resolve().parent != (work / "out" / "o").resolve() for f in folders):
            raise Finding("outputs", f"{names!r}: {len(ran)} ran, output folders {sorted(f.name for f in folders)}")
        if (code == 1) != (len(ran) < len(names)):
            raise Finding("exit code", f"{names!r}: exit {code} with {len(ran)} of {len(names)} run")
        return len(ran)


class Calibration(Target):
    """`xgraph.quantize` of a small CNN with a mutated calibration folder."""

    name = "calibration"

    def __init__(self) -> None:
        from tests.quant.models import small_cnn
        self.root = Path(tempfile.mkdtemp(prefix="xgraph-fuzz-calibration-"))
        onnx.save(small_cnn(), str(self.root / "cnn.onnx"))

    def case(self, seed: int) -> list[tuple[str, bytes]]:
        return folder_case(seed, mutated=0.3)  # one bad file refuses the whole set: fewer, so more sets run

    def run(self, case: list[tuple[str, bytes]]) -> str:
        from xgraph.compiler.quantize import quantize_model
        work = self.root / "case"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        names = _write(work, case)
        out = self.root / "out.onnx"
        out.unlink(missing_ok=True)
        with _EpsWatch() as eps, _captured():
            ok, _ = call("quantize", lambda: quantize_model(self.root / "cnn.onnx", work, out))
        if eps.opened:
            raise Finding("EPS opened", f"{names!r}: Pillow opened an EPS file (Ghostscript)")
        if not ok and out.exists():
            raise Finding("file written", f"{names!r}: quantize failed but wrote {out.name}")
        return "accepted" if ok else "refused"


INPUT_TARGETS = (InputDir, Calibration)

__all__ = ["Calibration", "INPUT_TARGETS", "InputDir", "folder_case", "seed_files"]
