"""`xgraph.quantize`: a float ONNX model and a calibration set in, a QDQ int8 model and an accuracy summary out.

Calibration itself is onnxruntime's (`onnxruntime.quantization.quantize_static`, the optional
extra ``xgraph[quantize]``); xgraph adds

- the calibration data reader (`calibration_inputs`): a folder of ``.npy`` files (one array,
  for a one-input model), ``.npz`` files (one array per input name) or images (``.png``,
  ``.jpg``, ``.jpeg``, ``.bmp``: resized to the input's H x W, RGB, scaled to [0, 1], NCHW; or
  through ``preprocess``, a Python file defining ``preprocess(path, shape) -> np.ndarray``;
  for a model whose input is a 1-D uint8 tensor, the file's encoded bytes);
- the model's own preprocessing (`xgraph.compiler.quantize_front`): a model that starts with
  custom-domain ops (DVPP's JpegDecode, VpcResize) is cut after them; each calibration input
  goes through that front, the standard-ONNX rest is calibrated and quantized, and the front is
  put back unchanged before it;
- the device rules: only op types the target's op-info library runs in int8 are quantized
  (``op_types_to_quantize``), the others stay float; weights are symmetric int8, per output
  channel by default, as Ascend and Vitis AI require;
- the summary (`QuantizeResult.summary`): float vs int8 on held-out inputs (the last quarter of
  the calibration set, at least one; all of it when it has one input): top-1 agreement, max and
  mean absolute error of the first output (or of the tensor `compare` names, e.g. the
  probabilities before a TopK), and that tensor's range.

Ops named in `exclude` stay float (onnxruntime's ``nodes_to_exclude``), e.g. an input
normalization whose constants would be quantized asymmetrically, which an int8 device refuses.

    >>> xgraph.quantize("net.onnx", calibration="calib/", output="net.int8.onnx")  # doctest: +SKIP
    'net.int8.onnx'
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from xgraph.compiler.quantize_front import split_front
from xgraph.errors import OptionError, XGraphError
from xgraph.ir.arguments import require_path
from xgraph.ir.array_reader import ARRAY_SUFFIXES, read_arrays, read_input_file
from xgraph.ir.image_reader import IMAGE_SUFFIXES, read_pixels
from xgraph.ir.onnx.safe_reader import read_model

METHODS = ("minmax", "entropy", "percentile")
#: Op types onnxruntime's QDQ quantizer handles that an int8 device table may accept.
QUANTIZABLE = ("Conv", "ConvTranspose", "MatMul", "Gemm", "Add", "Mul", "Concat", "MaxPool", "AveragePool",
               "GlobalAveragePool", "Relu", "Clip", "Resize", "Reshape", "Transpose", "Flatten", "Squeeze",
               "Unsqueeze", "Softmax", "Sigmoid", "LeakyRelu", "Split", "Gather", "Pad")


@dataclass
class QuantizeResult:
    """Where the QDQ model went and how it compares with the float one."""

    output: str
    summary: dict[str, Any] = field(default_factory=dict)


def _need_ort():
    try:
        import onnxruntime  # noqa: F401
        from onnxruntime import quantization  # noqa: F401
    except ImportError:
        raise XGraphError("xgraph quantize needs onnxruntime's quantization tools: pip install 'xgraph[quantize]'") \
            from None


def _inputs_of(model) -> list[tuple[str, list]]:
    inits = {i.name for i in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]
        out.append((vi.name, dims))
    return out


def _load_preprocess(path: str | None) -> Callable | None:
    if path is None:
        return None
    spec = importlib.util.spec_from_file_location("xgraph_quantize_preprocess", path)
    if spec is None or spec.loader is None or not os.path.isfile(path):
        raise OptionError(f"preprocess {path!r}: not a Python file; give a .py defining preprocess(path, shape)")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "preprocess", None)
    if not callable(fn):
        raise OptionError(f"preprocess {path!r} defines no preprocess(path, shape) function")
    return fn


def _image(data: bytes, what: str, shape: Sequence[int]) -> np.ndarray:
    """The picture resized to the input's H x W, RGB scaled to [0, 1], NCHW."""
    from PIL import Image
    h, w = (int(shape[2]), int(shape[3])) if len(shape) == 4 else (224, 224)
    pixels = Image.fromarray(read_pixels(data, what, "RGB")).resize((w, h))
    return (np.asarray(pixels, dtype=np.float32) / 255.0).transpose(2, 0, 1)[None]


def _takes_encoded_bytes(model) -> bool:
    """True when the model's one input is a 1-D uint8 tensor: an encoded file (e.g. JPEG bytes)."""
    import onnx
    inits = {i.name for i in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    return len(inputs) == 1 and inputs[0].type.tensor_type.elem_type == onnx.TensorProto.UINT8 \
        and len(inputs[0].type.tensor_type.shape.dim) == 1


def calibration_inputs(directory: "str | os.PathLike", model, preprocess: str | None = None) -> list[dict[str, np.ndarray]]:
    """One feed dict per calibration file of `directory` (sorted by name)."""
    folder = Path(directory)
    if not folder.is_dir():
        raise OptionError(f"calibration {str(folder)!r} is not a directory; give a folder of .npy/.npz files or images")
    inputs = _inputs_of(model)
    if not inputs:
        raise XGraphError("quantize: the model has no inputs to calibrate")
    fn = _load_preprocess(preprocess)
    encoded = fn is None and _takes_encoded_bytes(model)
    feeds, files = [], []
    for path in sorted(folder.iterdir()):
        suffix = path.suffix.lower()
        if suffix not in ARRAY_SUFFIXES and suffix not in IMAGE_SUFFIXES:
            continue
        files.append(path)
        what = f"calibration file {str(path)!r}"
        loaded = read_arrays(path, what) if suffix in ARRAY_SUFFIXES else None
        if isinstance(loaded, dict):
            missing = [n for n, _ in inputs if n not in loaded]
            if missing:
                raise XGraphError(f"{what} has no array for input(s) {missing}; it has {list(loaded)}")
            feeds.append({n: loaded[n] for n, _ in inputs})
            continue
        if len(inputs) != 1:
            raise XGraphError(f"{what}: the model has {len(inputs)} inputs; give .npz files with one array per "
                              "input name")
        name, shape = inputs[0]
        if loaded is not None:
            arr = loaded
        elif encoded:
            arr = np.frombuffer(read_input_file(path, what), dtype=np.uint8)
        else:
            arr = fn(str(path), shape) if fn is not None else _image(read_input_file(path, what), what, shape)
        feeds.append({name: np.asarray(arr)})
    for feed, path in zip(feeds, files):
        for name, shape in inputs:
            got = np.shape(feed[name])
            if len(got) != len(shape) or any(s > 1 and g != s for g, s in zip(got, shape)):
                raise XGraphError(f"calibration file {str(path)!r}: input {name!r} has shape {list(got)}; the model "
                                  f"takes {shape}")
    if not feeds:
        raise OptionError(f"calibration {str(folder)!r} holds no .npy, .npz or image files")
    return feeds


def int8_op_types(device: str = "AICORE") -> list[str]:
    """The op types of QUANTIZABLE whose rule on `device` lists int8."""
    from xgraph.devices import get_devices
    devices = get_devices()
    if device not in devices:
        raise OptionError(f"quantize: unknown target device {device!r}; known: {', '.join(devices)}")
    table = devices[device].ops
    out = []
    for op_type in QUANTIZABLE:
        rule = table.rule_for(op_type, "")
        if rule is not None and (rule.dtypes is None or np.dtype(np.int8) in rule.dtypes):
            out.append(op_type)
    return out


class _Reader:
    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._feeds = iter(feeds)

    def get_next(self):
        return next(self._feeds, None)


def _session(model, compare: str | None):
    """An onnxruntime session on `model` (a proto, not changed), with tensor `compare` made an output when it is not one."""
    import onnx
    import onnxruntime as ort
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if compare is not None and compare not in {o.name for o in model.graph.output}:
        inferred = onnx.shape_inference.infer_shapes(model)
        info = next((v for v in inferred.graph.value_info if v.name == compare), None)
        if info is None:
            raise OptionError(f"quantize: compare tensor {compare!r} is not a float tensor of the model; name one "
                              f"of its tensors, e.g. an output: {', '.join(o.name for o in model.graph.output)}")
        model.graph.output.append(info)
    options = ort.SessionOptions()
    options.log_severity_level = 4  # a failed session raises (one XGraphError); no native log line on stderr
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _save(model, path: str) -> None:
    """`model` at `path` for onnxruntime's quantizer, its weights in a side file past protobuf's 2 GiB."""
    import onnx
    onnx.save_model(model, path, save_as_external_data=model.ByteSize() >= (1 << 31) - 1)


def _summary(float_model, int8_model, held_out: list[dict[str, np.ndarray]],
             compare: str | None = None) -> dict[str, Any]:
    import onnxruntime as ort
    f, q = _session(float_model, compare), _session(int8_model, compare)
    name = compare if compare is not None else f.get_outputs()[0].name
    quiet = ort.RunOptions()
    quiet.log_severity_level = 4  # a failed run raises (one XGraphError); no native log line on stderr
    agree, max_err, errs, lo, hi = 0, 0.0, [], np.inf, -np.inf
    for feed in held_out:
        a, b = f.run([name], feed, quiet)[0], q.run([name], feed, quiet)[0]
        agree += int(np.array_equal(a.reshape(a.shape[0], -1).argmax(-1), b.reshape(b.shape[0], -1).argmax(-1)))
        d = np.abs(a.astype(np.float64) - b.astype(np.float64))
        max_err = max(max_err, float(d.max()))
        errs.append(float(d.mean()))
        lo, hi = min(lo, float(a.min())), max(hi, float(a.max()))
    return {"inputs": len(held_out), "compared": name, "top1_agreement": agree / len(held_out),
            "max_abs_error": max_err, "mean_abs_error": float(np.mean(errs)), "output_range": hi - lo}


def quantize_model(model: "str | os.PathLike", calibration: "str | os.PathLike", output: "str | os.PathLike | None" = None,
                   *, method: str = "minmax", per_channel: bool = True, device: str = "AICORE",
                   activation: str = "int8", preprocess: str | None = None, reduce_range: bool = False,
                   compare: str | None = None, exclude: Sequence[str] = ()) -> QuantizeResult:
    """Quantize `model` to QDQ with `calibration`; see the module docstring. Nothing is written on failure."""
    _need_ort()
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    if method not in METHODS:
        raise OptionError(f"quantize: method {method!r} is not one of {', '.join(METHODS)}")
    if activation not in ("int8", "uint8"):
        raise OptionError(f"quantize: activation {activation!r} is not int8 or uint8")
    require_path(model, "quantize", "model", error=OptionError)
    require_path(calibration, "quantize", "calibration", error=OptionError)
    if output is not None:
        require_path(output, "quantize", "output", error=OptionError)
    src = str(model)
    if not os.path.isfile(src):
        raise OptionError(f"quantize: model {src!r} is not a file")
    out = str(output) if output is not None else str(Path(src).with_suffix(".int8.onnx"))
    proto = read_model(src)[0]  # checked, external data inside the model's folder and inline: never onnx.load
    unknown = sorted(set(exclude) - {n.name for n in proto.graph.node})
    if unknown:
        raise OptionError(f"quantize: exclude names op(s) {unknown} the model does not have; name ops of "
                          f"{src!r} (xgraph dump lists them)")
    feeds = calibration_inputs(calibration, proto, preprocess)
    front = split_front(proto)
    if front is not None:  # the model's own preprocessing makes the calibration inputs of the rest
        feeds = [front.run(feed) for feed in feeds]
    n_held = max(1, len(feeds) // 4) if len(feeds) > 1 else 0
    calib, held = (feeds[:len(feeds) - n_held], feeds[len(feeds) - n_held:]) if n_held else (feeds, feeds)
    ops = int8_op_types(device)
    calibrate = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                 "percentile": CalibrationMethod.Percentile}[method]
    with tempfile.TemporaryDirectory() as tmp:
        staged = os.path.join(tmp, "model.int8.onnx")
        # what onnxruntime quantizes: the model as read above, or its body after the preprocessing
        calibrated_model = proto if front is None else front.body(feeds[0])
        calibrated = os.path.join(tmp, "model.onnx")
        _save(calibrated_model, calibrated)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the histogram calibrators print their progress
                quantize_static(calibrated, staged, _Reader(calib), quant_format=QuantFormat.QDQ, op_types_to_quantize=ops,
                                per_channel=per_channel, reduce_range=reduce_range,
                                activation_type=QuantType.QInt8 if activation == "int8" else QuantType.QUInt8,
                                weight_type=QuantType.QInt8, calibrate_method=calibrate,
                                nodes_to_exclude=list(exclude),
                                extra_options={"WeightSymmetric": True})
            quantized = read_model(staged)[0]
            summary = _summary(calibrated_model, quantized, held, compare)
        except OptionError:
            raise
        except Exception as e:  # onnxruntime raises its own exception types; say which model and what to fix
            raise XGraphError(f"quantize: onnxruntime's calibration of {src!r} failed: {str(e)[:500]}; check that "
                              "the calibration arrays match the model's inputs (names, shapes, dtypes)") from e
        summary.update(method=method, per_channel=per_channel, device=device, op_types=ops,
                       calibration_inputs=len(calib), held_out=bool(n_held), excluded=list(exclude))
        from xgraph.ir.files import check_target, write_bytes
        check_target(out)
        if front is not None:
            write_bytes(out, front.join(quantized).SerializeToString())
            summary["preprocessing"] = [n.op_type for n in front.front.graph.node]
        else:
            with open(staged, "rb") as fh:
                write_bytes(out, fh.read())
    return QuantizeResult(out, summary)


def quantize(model: "str | os.PathLike", calibration: "str | os.PathLike", output: "str | os.PathLike | None" = None,
             **options: Any) -> str:
    """The QDQ int8 model's path (API.md section 4); options as `quantize_model`."""
    return quantize_model(model, calibration, output, **options).output


def summary_text(result: QuantizeResult) -> str:
    s = result.summary
    return (f"wrote {result.output} (QDQ int8, {s['method']}, {'per-channel' if s['per_channel'] else 'per-tensor'} "
            f"symmetric weights; quantized for {s['device']}: {', '.join(s['op_types'])})\n"
            + (f"calibrated through the model's own preprocessing ({', '.join(s['preprocessing'])})\n"
               if s.get("preprocessing") else "")
            + f"float vs int8 ({s['compared']}) on {s['inputs']} {'held-out' if s['held_out'] else 'calibration'} "
            f"input(s): top-1 agreement {100 * s['top1_agreement']:.1f}%, max abs error {s['max_abs_error']:.4g}, "
            f"mean abs error {s['mean_abs_error']:.4g} (output range {s['output_range']:.4g})")


__all__ = ["METHODS", "QuantizeResult", "calibration_inputs", "int8_op_types", "quantize", "quantize_model",
           "summary_text"]
