"""`xgraph inspect`: the subgraph tree of a model (device, ops, runner, inputs/outputs per subgraph).

The model options here (`--compile`, `--options`, `--plugin-path`) and the helpers below are
shared by the other viewing commands (dump, svg, html).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from xgraph.cli.common import model_path
from xgraph.ir import Graph


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL plus the options that compile it first."""
    p.add_argument("model", metavar="MODEL", type=model_path, help="the model: an .xmodel (compiled by xcompile) or an .onnx")
    p.add_argument("--compile", action="store_true",
                   help="compile the model first (built-in placement, or the plugins of --options)")
    p.add_argument("--options", metavar="JSON", help="compile options as for xcompile --options (implies --compile)")
    p.add_argument("--plugin-path", action="append", default=[], metavar="DIR",
                   help=f"directory to find plugins in when compiling (repeatable, or {os.pathsep!r}-separated)")


def load_model(args: argparse.Namespace) -> Graph:
    """The model of `args`, compiled first when asked."""
    import xgraph
    if args.compile or args.options:
        plugin_path = [d for entry in args.plugin_path for d in entry.split(os.pathsep) if d]
        return xgraph.compile(args.model, args.options, plugin_path or None)
    return xgraph.load(args.model)


def write_stdout(text: str) -> None:
    """Print `text`; a reader that stops early (`| head`) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error when Python flushes at exit


def warn_if_not_compiled(graph: Graph, args: argparse.Namespace) -> None:
    """A note on stderr when the picture will have no device subgraphs."""
    if graph.get_root_subgraph().is_leaf:
        print(f"xgraph: note: {args.model} is not compiled, so ops are drawn without devices "
              "(compile it with xcompile, or pass --compile)", file=sys.stderr)


def add_parser(subparsers) -> None:
    """Register the `inspect` sub-command."""
    p = subparsers.add_parser("inspect", help="show the subgraph tree: device, ops, runner, inputs/outputs",
                              description="Show a model's device subgraphs in topological order (deeper levels "
                              "indented): device, op count, runner modes, estimated device time when known, and "
                              "input/output tensors with dtypes and shapes.")
    add_model_arguments(p)
    p.add_argument("--json", action="store_true", help="print JSON (stable keys) instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the tree."""
    from xgraph.view.text import inspect_data, inspect_text
    graph = load_model(args)
    write_stdout(json.dumps(inspect_data(graph), indent=2, ensure_ascii=True) + "\n" if args.json
                 else inspect_text(graph))
    return 0
