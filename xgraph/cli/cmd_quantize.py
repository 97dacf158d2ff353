"""`xgraph quantize`: a float ONNX model and a calibration folder to a QDQ int8 model, with an accuracy summary.

    xgraph quantize MODEL.onnx --calibration DIR [-o OUT.onnx] [--method minmax|entropy|percentile]
                    [--per-tensor] [--device AICORE] [--activation int8|uint8] [--preprocess SCRIPT.py] [--compare TENSOR] [--exclude OP,...] [--json]

See `xgraph.compiler.quantize` (needs the optional extra ``xgraph[quantize]``).
"""
from __future__ import annotations

import argparse
import json

from xgraph.cli.common import model_path


def add_parser(subparsers) -> None:
    """Register the `quantize` sub-command."""
    p = subparsers.add_parser("quantize", help="quantize a float model to QDQ int8 from a calibration set",
                              description="Calibrate with onnxruntime.quantization (symmetric int8 weights, per "
                              "channel by default), quantize only the ops the target device runs in int8, write a "
                              "QDQ model and print float vs int8 accuracy on held-out calibration inputs.")
    p.add_argument("model", metavar="MODEL", type=model_path, help="the float .onnx model")
    p.add_argument("--calibration", required=True, metavar="DIR",
                   help="folder of .npy / .npz files or images (.png, .jpg, .bmp)")
    p.add_argument("-o", "--output", metavar="OUT", help="the QDQ model (default: MODEL.int8.onnx)")
    p.add_argument("--method", default="minmax", choices=("minmax", "entropy", "percentile"),
                   help="calibration method (default minmax)")
    p.add_argument("--per-tensor", action="store_true", help="one weight scale per tensor instead of per channel")
    p.add_argument("--device", default="AICORE", help="target device whose int8 ops are quantized (default AICORE)")
    p.add_argument("--activation", default="int8", choices=("int8", "uint8"), help="activation type (default int8)")
    p.add_argument("--preprocess", metavar="SCRIPT", help="a .py defining preprocess(path, shape) for images")
    p.add_argument("--compare", metavar="TENSOR",
                   help="the tensor the float vs int8 summary compares (default: the first output), e.g. the "
                   "probabilities before a TopK")
    p.add_argument("--exclude", metavar="OP,...", default="",
                   help="comma-separated op names to leave float (e.g. an input normalization)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Quantize and print the summary."""
    from xgraph.cli.cmd_inspect import write_stdout
    from xgraph.compiler.quantize import quantize_model, summary_text
    result = quantize_model(args.model, args.calibration, args.output, method=args.method,
                            per_channel=not args.per_tensor, device=args.device, activation=args.activation,
                            preprocess=args.preprocess, compare=args.compare,
                            exclude=[n for n in args.exclude.split(",") if n])
    text = json.dumps({"output": result.output, **result.summary}, indent=2) if args.json else summary_text(result)
    write_stdout(text + "\n")
    return 0
