"""`xgraph explain`: why each named op went where it went, and why the other candidates did not take it.

    xgraph explain MODEL(.onnx|.xmodel) [OP ...] [--type TYPE ...] [--options JSON] [--plugin-path DIR] [--json]

The model is compiled again with template near-miss recording (an .xmodel with the options it
was compiled with, unless --options is given); see `xgraph.compiler.explain`.
"""
from __future__ import annotations

import argparse
import json
import os

from xgraph.errors import XGraphError


def add_parser(subparsers) -> None:
    """Register the `explain` sub-command."""
    p = subparsers.add_parser("explain", help="why ops went where they went (devices, plugins, template near misses)",
                              description="For each named op (or every op of --type), say which plugin or device "
                              "took it and why, every built-in device's verdict (cheapest first), and for each "
                              "template of each plugin whether the op was in a match or where a partial match broke.")
    p.add_argument("model", metavar="MODEL", help="the model: an .onnx, or an .xmodel (explained with the options it "
                   "was compiled with unless --options is given)")
    p.add_argument("ops", nargs="*", metavar="OP", help="op names to explain")
    p.add_argument("--type", action="append", default=[], metavar="TYPE", dest="types",
                   help="explain every op of this type (repeatable), e.g. --type Conv")
    p.add_argument("--options", metavar="JSON", help="compile options as for xcompile --options")
    p.add_argument("--plugin-path", action="append", default=[], metavar="DIR",
                   help=f"directory to find plugins in (repeatable, or {os.pathsep!r}-separated)")
    p.add_argument("--json", action="store_true", help="print the explanations as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Explain and print."""
    from xgraph.cli.cmd_inspect import write_stdout
    from xgraph.compiler.explain import explain, explain_text
    if not args.ops and not args.types:
        raise XGraphError("explain: name the ops to explain (xgraph explain MODEL n0 n5) or a type (--type Conv)")
    plugin_path = [d for entry in args.plugin_path for d in entry.split(os.pathsep) if d] or None
    entries = explain(args.model, args.ops or [], args.options, plugin_path, types=args.types or None)
    write_stdout(json.dumps(entries, indent=2) + "\n" if args.json else explain_text(entries) + "\n")
    return 0
