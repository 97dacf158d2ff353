"""`xgraph run`: run a model once on given inputs and print (and save) its outputs.

    xgraph run MODEL(.xmodel|.onnx) --input NAME=FILE ... [--mode run|sim|ref]
               [--kernels auto|numpy|onnxruntime] [--output-dir DIR] [--ray [ADDRESS]]
    xgraph run MODEL --input-dir DIR [--output-dir OUT] [--ray [ADDRESS] --concurrency N --batch-size N]

Inputs come from .npy files, .npz archives (one array, the array named like the input, or,
without NAME=, every array by its name) and image files: an image becomes uint8 HWC pixels
through Pillow, or stays the file's raw bytes when the input is a 1-D uint8 tensor (an
encoded-image input such as DVPP's decoder takes). An .onnx model (or an .xmodel that was
never compiled) is compiled first with --options / --plugin-path. --input-dir and --ray are
in run_dir.py.

The helpers here (model loading, input files, random inputs, value summaries) are shared by
`xgraph verify` and `xgraph bench`.
"""
from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import ModelFileError, XGraphError

if TYPE_CHECKING:
    from xgraph.ir import Graph, Tensor

#: File suffixes read as images (through Pillow).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
MODES = ("run", "sim", "ref")
KERNELS = ("auto", "numpy", "onnxruntime")


# -- arguments shared with verify and bench ------------------------------------------------------

def add_compile_arguments(p: argparse.ArgumentParser) -> None:
    """--options and --plugin-path: how an .onnx model is compiled first."""
    p.add_argument("--options", metavar="JSON", help="compile options as for xcompile --options (used when MODEL "
                   "is an .onnx or an uncompiled .xmodel)")
    p.add_argument("--plugin-path", action="append", default=[], metavar="DIR",
                   help=f"directory to find plugins in (repeatable, or {os.pathsep!r}-separated): when compiling, "
                        "and for an .xmodel compiled with plugins, to load them so their runners exist")


def add_input_argument(p: argparse.ArgumentParser, missing: str) -> None:
    """--input NAME=FILE (repeatable); `missing` says what happens to inputs not given."""
    p.add_argument("--input", "-i", action="append", default=[], metavar="NAME=FILE",
                   help="an input from a .npy, .npz or image file (repeatable); NAME= may be left out for a "
                   f"model with one input, or for an .npz whose arrays are named like the inputs. {missing}")


def add_kernels_argument(p: argparse.ArgumentParser) -> None:
    """--kernels: what runs the ops in "run" mode."""
    p.add_argument("--kernels", choices=KERNELS, default="auto",
                   help="run mode's kernels: xgraph's numpy kernels, onnxruntime sessions for standard-ONNX "
                   "subgraphs, or auto (onnxruntime where installed and applicable; default)")


def plugin_path_of(args: argparse.Namespace) -> list[str] | None:
    """The --plugin-path entries, split on os.pathsep."""
    return [d for entry in args.plugin_path for d in entry.split(os.pathsep) if d] or None


def load_plugins_of(graph: "Graph", plugin_path: list[str] | None) -> None:
    """Import the plugins a compiled graph was made with, so the runners they register exist.

    The names come from the file, so they resolve only through installed entry points and the
    user's plugin path, never as arbitrary importable modules.
    """
    from xgraph.plugins import load_plugin
    runs = graph.get_attr("plugin_runs") if graph.has_attr("plugin_runs") else []
    for run in runs if isinstance(runs, list) else []:
        if isinstance(run, dict) and isinstance(run.get("name"), str):
            load_plugin(run["name"], plugin_path, importable=False)


def load_compiled(args: argparse.Namespace) -> "Graph":
    """The model of `args.model`, compiled (an .xmodel that already has device subgraphs is used as is)."""
    import xgraph
    path = Path(args.model)
    if not path.exists():
        raise ModelFileError(f"{args.model}: no such file")
    if path.suffix.lower() == ".xmodel" and not args.options:
        graph = xgraph.load(path)
        if not graph.get_root_subgraph().is_leaf:
            load_plugins_of(graph, plugin_path_of(args))
            return graph
    return xgraph.compile(path, args.options, plugin_path_of(args))


# -- inputs --------------------------------------------------------------------------------------

def _is_tensor(t: "Tensor") -> bool:
    return getattr(t, "_type_proto", None) is None


def _load_array_file(path: Path, what: str) -> np.ndarray | dict[str, np.ndarray]:
    """An .npy array or the arrays of an .npz, refusing pickled objects."""
    if not path.exists():
        raise ModelFileError(f"{what}: no such file {str(path)!r}")
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError as e:
        raise ModelFileError(f"{what}: {path} cannot be read without unpickling ({e}); save it with plain "
                             f"dtypes (np.save of a numeric or fixed-width string array)") from e
    except OSError as e:
        raise ModelFileError(f"{what}: {path} is not a .npy/.npz file: {e}") from e
    if isinstance(loaded, np.ndarray):
        return loaded
    with loaded:
        return {k: loaded[k] for k in loaded.files}


def _load_image(path: Path, tensor: "Tensor", what: str) -> np.ndarray:
    """Raw bytes for a 1-D uint8 input (encoded image), else decoded uint8 pixels (HWC, or HW for rank 2)."""
    if not path.exists():
        raise ModelFileError(f"{what}: no such file {str(path)!r}")
    if tensor.dtype == np.uint8 and tensor.shape is not None and len(tensor.shape) == 1:
        return np.frombuffer(path.read_bytes(), dtype=np.uint8).copy()
    from PIL import Image, UnidentifiedImageError
    rank = None if tensor.shape is None else len(tensor.shape)
    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L" if rank == 2 else "RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise ModelFileError(f"{what}: {path} is not an image Pillow can decode: {e}") from e
    return pixels[np.newaxis] if rank == 4 else pixels


def read_inputs(specs: Sequence[str], tensors: "Sequence[Tensor]") -> dict[str, Any]:
    """{input name: value} from --input specs ("NAME=FILE" or "FILE") for the model's input tensors."""
    by_name = {t.name: t for t in tensors}
    names = ", ".join(by_name) or "none"
    feeds: dict[str, Any] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or (name not in by_name and Path(spec).exists()):
            name, file = "", spec
        path = Path(file)
        what = f"--input {spec}"
        if name and name not in by_name:
            raise XGraphError(f"{what}: the model has no input {name!r}; its inputs are: {names}")
        if path.suffix.lower() in IMAGE_SUFFIXES:
            if not name:
                if len(by_name) != 1:
                    raise XGraphError(f"{what}: say which input the image is for (NAME=FILE); inputs: {names}")
                name = next(iter(by_name))
            feeds[name] = _load_image(path, by_name[name], what)
            continue
        loaded = _load_array_file(path, what)
        if isinstance(loaded, dict):
            if name:
                if name in loaded:
                    feeds[name] = loaded[name]
                elif len(loaded) == 1:
                    feeds[name] = next(iter(loaded.values()))
                else:
                    raise XGraphError(f"{what}: {path.name} holds {len(loaded)} arrays ({', '.join(loaded)}) and "
                                      f"none is named {name!r}")
                continue
            unknown = [k for k in loaded if k not in by_name]
            if unknown:
                raise XGraphError(f"{what}: {path.name} holds array {unknown[0]!r}, which is not a model input; "
                                  f"the inputs are: {names}")
            feeds.update(loaded)
            continue
        if not name:
            if len(by_name) != 1:
                raise XGraphError(f"{what}: say which input the array is for (NAME=FILE); inputs: {names}")
            name = next(iter(by_name))
        feeds[name] = loaded
    return feeds


def concrete_shape(t: "Tensor") -> tuple[int, ...]:
    """The tensor's shape with every unknown or symbolic dim taken as 1."""
    if t.shape is None:
        raise XGraphError(f"input {t.name!r} has unknown rank, so no random value can be made for it; "
                          f"pass it with --input {t.name}=FILE")
    return tuple(d if isinstance(d, int) else 1 for d in t.shape)


def random_value(t: "Tensor", rng: np.random.Generator) -> np.ndarray:
    """A seeded random value for input `t`: normal floats, small non-negative ints, random bools."""
    if not _is_tensor(t) or t.dtype is None:
        raise XGraphError(f"input {t.name!r} is not a plain tensor (a sequence, optional or untyped value), so no "
                          f"random value can be made for it; pass it with --input {t.name}=FILE")
    shape = concrete_shape(t)
    dtype = t.dtype
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind in "iu":
        high = 256 if dtype == np.uint8 else 4
        return rng.integers(0, high, shape).astype(dtype)
    if dtype.kind in "OUS":
        return np.full(shape, "x", dtype=object)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def complete_inputs(feeds: dict[str, Any], tensors: "Sequence[Tensor]", seed: int) -> tuple[dict[str, Any], list[str]]:
    """`feeds` with every missing input filled by `random_value` (seeded); also the names filled."""
    rng = np.random.default_rng(seed)
    filled = [t.name for t in tensors if t.name not in feeds]
    feeds = dict(feeds)
    for t in tensors:
        if t.name not in feeds:
            feeds[t.name] = random_value(t, rng)
    return feeds, filled


def missing_inputs_error(missing: "Sequence[Tensor]", model: str) -> XGraphError:
    """The error for inputs not given: each with its dtype and shape, and how to give it."""
    described = "; ".join(f"{t.name} ({t.dtype}, shape {t.shape})" for t in missing)
    return XGraphError(f"{model}: no value for input(s) {described}; pass --input NAME=FILE (.npy, .npz or image) "
                       f"or --random for seeded random values")


# -- outputs -------------------------------------------------------------------------------------

def summarize(value: Any) -> str:
    """A one-line summary: shape, dtype and a few statistics or values."""
    if value is None:
        return "empty optional (None)"
    if isinstance(value, list):
        inner = ", ".join(f"{np.asarray(v).dtype}{list(np.shape(v))}" for v in value[:4])
        return f"sequence of {len(value)} tensors [{inner}{', ...' if len(value) > 4 else ''}]"
    a = np.asarray(value)
    head = f"{a.dtype} {tuple(a.shape)}"
    if a.size == 0:
        return f"{head} (empty)"
    if a.dtype.kind in "OUS":
        return f"{head} values {[str(v) for v in a.ravel()[:5]]}{' ...' if a.size > 5 else ''}"
    if a.size <= 6:
        return f"{head} values {np.array2string(a.ravel(), precision=5, separator=', ')}"
    numeric = a.astype(np.float64) if a.dtype.kind not in "fc" or a.dtype.isbuiltin != 1 else a
    if numeric.dtype.kind == "c":
        return f"{head} max|x| {np.abs(numeric).max():.6g}"
    with np.errstate(all="ignore"):
        flat = numeric.ravel()
        if np.isnan(flat).all():
            return f"{head} all NaN"
        extra = ""
        if a.ndim == 2 and a.shape[-1] > 1 and a.dtype.kind == "f":  # (batch, classes): the top class
            extra = f" argmax(last axis)[0] {int(np.nanargmax(numeric.reshape(-1, a.shape[-1])[0]))}"
        return (f"{head} min {np.nanmin(flat):.6g} max {np.nanmax(flat):.6g} mean {np.nanmean(flat):.6g}"
                f"{extra}{' (has NaN)' if np.isnan(flat).any() else ''}")


def output_file_name(name: str) -> str:
    """A file name for tensor `name` (characters other than letters, digits, '.', '_', '-' become '_')."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "output"
    return safe


def save_output(directory: Path, name: str, value: Any) -> Path | None:
    """Write `value` as NAME.npy (a sequence as NAME.npz, arr_0...); None for an empty optional."""
    directory.mkdir(parents=True, exist_ok=True)
    stem = output_file_name(name)
    if value is None:
        return None
    if isinstance(value, list):
        path = directory / f"{stem}.npz"
        np.savez(path, *[np.asarray(v) for v in value])
        return path
    path = directory / f"{stem}.npy"
    array = np.asarray(value)
    if array.dtype == object:
        array = array.astype(str)  # np.save of an object array would need pickle to load
    np.save(path, array)
    return path


# -- the command ---------------------------------------------------------------------------------

def add_parser(subparsers) -> None:
    """Register the `run` sub-command."""
    p = subparsers.add_parser("run", help="run a model on inputs from .npy/.npz/image files and print its outputs",
                              description="Run a compiled .xmodel (or an .onnx, compiled first) once through the "
                              "graph runner; print every output's name, shape, dtype and a short summary, and save "
                              "them as .npy files with --output-dir.")
    p.add_argument("model", metavar="MODEL", help="the model: an .xmodel (from xcompile) or an .onnx")
    add_input_argument(p, "Every input needs a value unless --random is given.")
    p.add_argument("--random", action="store_true", help="fill inputs not given with seeded random values")
    p.add_argument("--seed", type=int, default=0, help="seed of --random (default 0)")
    p.add_argument("--mode", choices=MODES, default="run",
                   help="run: fastest on this host (default); sim: device numerics (AI Core fp16 when the "
                   "precision_mode asks); ref: the ONNX reference evaluator")
    add_kernels_argument(p)
    p.add_argument("--output-dir", "-o", metavar="DIR", help="save each output as DIR/NAME.npy")
    add_compile_arguments(p)
    from xgraph.cli import run_dir
    run_dir.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compile if needed, run once, print the outputs, save them when asked."""
    import xgraph
    from xgraph.cli import run_dir
    graph = load_compiled(args)
    if args.input_dir:
        return run_dir.run_directory(args, graph)
    inputs = graph.get_input_tensors()
    feeds = read_inputs(args.input, inputs)
    missing = [t for t in inputs if t.name not in feeds]
    filled: list[str] = []
    if missing:
        if not args.random:
            raise missing_inputs_error(missing, args.model)
        feeds, filled = complete_inputs(feeds, inputs, args.seed)
    on_ray = args.ray is not None
    with (run_dir.ray_graph_runner(args, graph) if on_ray else
          xgraph.create_graph_runner(graph, args.mode, args.kernels)) as runner:
        outputs = runner.run(feeds)
    devices = sorted({str(sg.get_attr("device")) for sg in graph.get_root_subgraph().get_children()})
    print(f"{args.model}: mode {args.mode}, kernels {args.kernels}, "
          f"{graph.get_root_subgraph().get_children_num()} subgraphs on {', '.join(devices)}"
          + (" (a Ray actor per device)" if on_ray else ""))
    for name in feeds:
        note = f" (random, seed {args.seed})" if name in filled else ""
        print(f"  input   {name}: {summarize(feeds[name])}{note}")
    directory = Path(args.output_dir) if args.output_dir else None
    for t, value in zip(graph.get_output_tensors(), outputs):
        print(f"  output  {t.name}: {summarize(value)}")
        if directory is not None:
            saved = save_output(directory, t.name, value)
            print(f"          saved to {saved}" if saved else "          not saved (empty optional)")
    return 0
