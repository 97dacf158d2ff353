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

from xgraph.cli.common import model_path, seed
from xgraph.cli.gears import add_gear_argument, gear_title, gears_to_use
from xgraph.cli.outputs import encode_output, output_file_name, output_files, save_outputs, summarize  # noqa: F401
from xgraph.cli.input_files import IMAGE_SUFFIXES, read_inputs  # noqa: F401 - shared with verify and bench
from xgraph.errors import ModelFileError, XGraphError
from xgraph.modes import KERNEL_CHOICES, MODES as RUNNER_MODES
from xgraph.runners.random_inputs import (MAX_RANDOM_BYTES, MAX_RANK, complete_inputs,  # noqa: F401 - shared
                                          concrete_shape, random_value)

if TYPE_CHECKING:
    from xgraph.ir import Graph, Tensor

MODES = RUNNER_MODES
KERNELS = KERNEL_CHOICES


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


def add_kernels_argument(p: argparse.ArgumentParser, default: str | None = "auto",
                         help_default: str = "default: auto") -> None:
    """--kernels: what runs the ops in "run" mode."""
    p.add_argument("--kernels", choices=KERNELS, default=default,
                   help="run mode's kernels: xgraph's numpy kernels, onnxruntime sessions for standard-ONNX "
                   f"subgraphs, or auto (onnxruntime where installed and applicable); {help_default}")


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

def missing_inputs_error(missing: "Sequence[Tensor]", model: str) -> XGraphError:
    """The error for inputs not given: each with its dtype and shape, and how to give it."""
    described = "; ".join(f"{t.name} ({t.dtype}, shape {t.shape})" for t in missing)
    return XGraphError(f"{model}: no value for input(s) {described}; pass --input NAME=FILE (.npy, .npz or image) "
                       f"or --random for seeded random values")


# -- the command ---------------------------------------------------------------------------------

def add_parser(subparsers) -> None:
    """Register the `run` sub-command."""
    p = subparsers.add_parser("run", help="run a model on inputs from .npy/.npz/image files and print its outputs",
                              description="Run a compiled .xmodel (or an .onnx, compiled first) once through the "
                              "graph runner; print every output's name, shape, dtype and a short summary, and save "
                              "them as .npy files with --output-dir.")
    p.add_argument("model", metavar="MODEL", type=model_path, help="the model: an .xmodel (from xcompile) or an .onnx")
    add_input_argument(p, "Every input needs a value unless --random is given.")
    p.add_argument("--random", action="store_true", help="fill inputs not given with seeded random values")
    p.add_argument("--seed", type=seed, default=0, help="seed of --random (default 0)")
    p.add_argument("--mode", choices=MODES, default="run",
                   help="run: fastest on this host (default); sim: device numerics (AI Core fp16 when the "
                   "precision_mode asks); ref: the ONNX reference evaluator")
    add_kernels_argument(p)
    p.add_argument("--output-dir", "-o", metavar="DIR", help="save each output as DIR/NAME.npy")
    add_compile_arguments(p)
    add_gear_argument(p, "gear 0")
    from xgraph.cli import run_dir
    run_dir.add_arguments(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compile if needed, run once, print the outputs, save them when asked."""
    import xgraph
    if args.output_dir and Path(args.output_dir).exists() and not Path(args.output_dir).is_dir():
        raise XGraphError(f"--output-dir {args.output_dir}: is a file, not a folder; give a folder to save outputs in")
    from xgraph.cli import run_dir
    graph = load_compiled(args)
    if args.input_dir:
        return run_dir.run_directory(args, graph)
    inputs = graph.get_input_tensors()
    feeds = read_inputs(args.input, inputs)
    (gear,) = gears_to_use(graph, args, feeds, every=False)
    if gear is not None:  # compiled with gears: random inputs take this gear's shapes, the runner picks by shape
        inputs = gear.graph.get_input_tensors()
    missing = [t for t in inputs if t.name not in feeds]
    filled: list[str] = []
    if missing:
        if not args.random:
            raise missing_inputs_error(missing, args.model)
        feeds, filled = complete_inputs(feeds, inputs, args.seed)
    on_ray = args.ray is not None
    with (run_dir.ray_graph_runner(args, graph) if on_ray else
          xgraph.create_graph_runner(graph, args.mode, args.kernels, plugin_path=plugin_path_of(args))) as runner:
        outputs = runner.run(feeds)
        ran = runner.select_gear(feeds) if graph.get_gears() and not on_ray else None
    part = graph if ran is None else ran.graph
    devices = sorted({str(sg.get_attr("device")) for sg in part.get_root_subgraph().get_children()})
    print(f"{args.model}:{gear_title(ran)} mode {args.mode}, kernels {args.kernels}, "
          f"{part.get_root_subgraph().get_children_num()} subgraphs on {', '.join(devices)}"
          + (" (a Ray actor per device)" if on_ray else ""))
    for name in feeds:
        note = f" (random, seed {args.seed})" if name in filled else ""
        print(f"  input   {name}: {summarize(feeds[name])}{note}")
    values = {t.name: value for t, value in zip(graph.get_output_tensors(), outputs)}
    saved = save_outputs(Path(args.output_dir), values) if args.output_dir else {}
    for name, value in values.items():
        print(f"  output  {name}: {summarize(value)}")
        if args.output_dir:
            print(f"          saved to {saved[name]}" if saved[name] else "          not saved (empty optional)")
    return 0
