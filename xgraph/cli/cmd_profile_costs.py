"""`xgraph profile-costs`: time each op on each device runner that accepts it, and each plugin subgraph.

    xgraph profile-costs MODEL.onnx [--options JSON] [--plugin-path DIR] [-o TABLE.json] [--repeat N]
                         [--kernels auto|numpy|onnxruntime]

Writes the cost table the compile option ``"costs"`` reads (`xgraph.profiling`; the format in
docs/devices.md, "Measured costs").
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from xgraph.cli.cmd_run import add_compile_arguments, plugin_path_of
from xgraph.cli.common import check_output_path, model_path, positive_int


def add_parser(subparsers) -> None:
    """Register the `profile-costs` sub-command."""
    p = subparsers.add_parser("profile-costs", help="measure each op's cost on each device; write a cost table",
                              description="Compile the model (first fit, with its plugins), then run each op on "
                              "each device runner that accepts it and each plugin subgraph on its runner, in run "
                              "mode on the values a reference run gives, and write the median times as the cost "
                              'table the compile option {"costs": TABLE} reads.')
    p.add_argument("model", metavar="MODEL", type=model_path, help="the .onnx model")
    add_compile_arguments(p)
    p.add_argument("-o", "--output", metavar="TABLE", help="the table (default: MODEL.costs.json)")
    p.add_argument("--repeat", type=positive_int, default=10, metavar="N", help="timed runs per measurement (median)")
    p.add_argument("--kernels", default="auto", choices=("auto", "numpy", "onnxruntime"),
                   help="what runs the built-in devices' ops, as for the graph runner (default auto)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Profile and write the table; print where it went and what it covers."""
    from xgraph.cli.cmd_inspect import write_stdout
    from xgraph.ir.files import write_text
    from xgraph.profiling import profile_costs
    output = args.output or str(Path(args.model).with_suffix(".costs.json"))
    check_output_path("-o", output)
    table = profile_costs(args.model, args.options, plugin_path_of(args), repeat=args.repeat,
                          kernels=args.kernels)
    write_text(output, json.dumps(table, indent=1, sort_keys=True) + "\n", "cost table")
    measured = sum(len(entry["seconds"]) for entry in table["ops"].values())
    write_stdout(f"{output}: {len(table['ops'])} ops, {measured} op/device times, "
                 f"{len(table['candidates'])} plugin subgraph(s), median of {args.repeat} runs\n")
    return 0
