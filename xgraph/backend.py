"""`xgraph.backend`: the ONNX backend interface (`onnx.backend.base.Backend`) over compile + graph runner.

    import xgraph.backend as backend
    rep = backend.prepare(model)                 # xgraph.compile + create_graph_runner, once
    (y,) = rep.run([x])                          # list in graph-input order, or {name: array}
    outputs = backend.run_model(model, [x])      # one-off: prepare, run, close

so that ``onnx.backend.test.BackendTest(xgraph.backend, __name__)`` runs ONNX's conformance
suite against xgraph. The ONNX device is where the results come back: only "CPU" (the host)
is supported; which xgraph devices (AICORE, AICPU, CPU, ...) run the ops is decided by the
compile `options`, as for `xcompile`.

Keyword arguments of `prepare`/`run_model`/`run_node`: `options` (compile options, dict or
JSON str), `plugin_path`, `mode` ("run", "sim" or "ref"), `kernels` ("auto", "numpy" or
"onnxruntime") and `registries` (an `xgraph.registries.Registries`; the default one when not
given), all passed on to `xgraph.compile` / `create_graph_runner`.

Values follow onnx's backend conventions: tensors are numpy arrays, sequences are lists of
arrays, an empty optional is None.
"""
from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.backend.base import Backend, BackendRep, Device, DeviceType

from xgraph.errors import ModelFileError, RunnerError, XGraphError
from xgraph.modes import AUTO, RUN
from xgraph.registries import resolve

if TYPE_CHECKING:
    from xgraph.ir import Graph
    from xgraph.runners.graph_runner import GraphRunner

#: Keyword arguments `prepare` understands (anything else is an error naming these).
PREPARE_KWARGS = ("options", "plugin_path", "mode", "kernels", "registries")
#: Keyword arguments onnx's test runner passes to `prepare` that only concern its own comparison.
_RUNNER_KWARGS = frozenset({"rtol", "atol"})


def _to_value(value: Any) -> Any:
    """A feed in xgraph's conventions: TensorProto/SequenceProto/OptionalProto decoded, lists kept."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, (onnx.SequenceProto, onnx.OptionalProto, onnx.MapProto)):
        return _decode_proto(value)
    if isinstance(value, (list, tuple)):
        return [_to_value(v) for v in value]
    return value


def _decode_proto(value: Any) -> Any:
    """Sequence/optional/map protos as Python values (onnx's `to_list`/`to_optional`/`to_dict`)."""
    if isinstance(value, onnx.SequenceProto):
        return numpy_helper.to_list(value)
    if isinstance(value, onnx.OptionalProto):
        return numpy_helper.to_optional(value)
    return numpy_helper.to_dict(value)


def _check_device(device: str) -> None:
    if not XGraphBackend.supports_device(device):
        raise RunnerError(f"xgraph.backend: device {device!r} is not supported; results come back on the host, "
                          f"so pass device='CPU' (choose the xgraph devices that run the ops with "
                          f"options={{'devices': ...}})")


def _split_kwargs(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - set(PREPARE_KWARGS) - _RUNNER_KWARGS)
    if unknown:
        raise RunnerError(f"xgraph.backend: unknown keyword argument {unknown[0]!r}; "
                          f"valid ones are: {', '.join(PREPARE_KWARGS)}")
    return {k: v for k, v in kwargs.items() if k in PREPARE_KWARGS}


def _close_runner(runner: "GraphRunner") -> None:
    runner.close()


class XGraphBackendRep(BackendRep):
    """A prepared model: the compiled graph and its graph runner, run as often as needed."""

    def __init__(self, model: onnx.ModelProto, compiled: "Graph", runner: "GraphRunner") -> None:
        """Remember the model's input/output names; the runner is closed with `close()` or on collection."""
        self.graph = compiled
        self.runner = runner
        weights = {t.name for t in model.graph.initializer} | {s.values.name for s in model.graph.sparse_initializer}
        #: Every declared graph input, and those that are not weights (what a caller must feed).
        self.model_inputs = [i.name for i in model.graph.input]
        self.feed_names = [n for n in self.model_inputs if n not in weights]
        self.output_names = [o.name for o in model.graph.output]
        self._runner_inputs = [t.name for t in runner.get_input_tensors()]
        self._runner_outputs = {t.name: i for i, t in enumerate(runner.get_output_tensors())}
        missing = [n for n in self.output_names if n not in self._runner_outputs]
        if missing:
            raise RunnerError(f"xgraph.backend: model output {missing[0]!r} is not an output of the compiled "
                              f"graph {compiled.name!r}")
        unknown = [n for n in self._runner_inputs if n not in self.model_inputs]
        if unknown:
            raise RunnerError(f"xgraph.backend: the compiled graph {compiled.name!r} reads input {unknown[0]!r}, "
                              f"which the model does not declare")
        self._finalizer = weakref.finalize(self, _close_runner, runner)

    def _feeds(self, inputs: Any) -> dict[str, Any]:
        """`inputs` (list in graph-input order, dict by name, or one array) as {name: value}.

        A list may leave out the weights a model (IR < 4) lists among its inputs, or hold a
        value for each; values given for weights are not used (the compiled weights are).
        """
        if isinstance(inputs, Mapping):
            unknown = sorted(set(inputs) - set(self.model_inputs))
            if unknown:
                raise RunnerError(f"xgraph.backend: unknown input {unknown[0]!r}; the model's inputs are: "
                                  f"{', '.join(self.feed_names) or 'none'}")
            feeds = {k: _to_value(v) for k, v in inputs.items()}
        else:
            if isinstance(inputs, np.ndarray) or inputs is None:
                inputs = [inputs]
            values = [_to_value(v) for v in inputs]
            if len(values) == len(self.feed_names):
                feeds = dict(zip(self.feed_names, values))
            elif len(values) == len(self.model_inputs):
                feeds = dict(zip(self.model_inputs, values))
            else:
                raise RunnerError(f"xgraph.backend: expected {len(self.feed_names)} inputs "
                                  f"({', '.join(self.feed_names) or 'none'}), got {len(values)}")
        missing = [n for n in self._runner_inputs if n not in feeds]
        if missing:
            raise RunnerError(f"xgraph.backend: input {missing[0]!r} is missing; the model's inputs are: "
                              f"{', '.join(self.feed_names)}")
        return {n: feeds[n] for n in self._runner_inputs}

    def run(self, inputs: Any, **kwargs: Any) -> list[Any]:
        """Run once; returns the outputs in the model's graph-output order (sequences as lists)."""
        feeds = self._feeds(inputs)
        try:
            results = self.runner.run(feeds)
        except XGraphError:
            raise
        except Exception as e:  # a kernel or the scheduler raised something other than an XGraphError
            raise RunnerError(f"xgraph.backend: running graph {self.graph.name!r} failed: "
                              f"{type(e).__name__}: {e}") from e
        return [results[self._runner_outputs[n]] for n in self.output_names]

    def close(self) -> None:
        """Stop the graph runner's streams (also done when the rep is garbage collected)."""
        self._finalizer()

    def __enter__(self) -> "XGraphBackendRep":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class XGraphBackend(Backend):
    """ONNX backend running models through `xgraph.compile` and the graph runner."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        """True when `device` is supported (whether every op can run is known only after compiling)."""
        return cls.supports_device(device)

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> XGraphBackendRep:
        """Compile `model` (ModelProto, bytes or path) and create its graph runner."""
        import xgraph
        _check_device(device)
        args = _split_kwargs(kwargs)
        if isinstance(model, (bytes, str)) or hasattr(model, "__fspath__"):
            from xgraph.ir.onnx.safe_reader import read_model
            model = read_model(model)[0]
        if not isinstance(model, onnx.ModelProto):
            raise ModelFileError(f"xgraph.backend.prepare takes an onnx.ModelProto, bytes or a path, got "
                                 f"{type(model).__name__}")
        try:
            registries = resolve(args.get("registries"))
            compiled = xgraph.compile(model, args.get("options"), args.get("plugin_path"), registries=registries)
            runner = xgraph.create_graph_runner(compiled, args.get("mode", RUN), args.get("kernels", AUTO),
                                                registries=registries)
        except XGraphError:
            raise
        except Exception as e:  # onnx or numpy raised while importing or planning the model
            raise RunnerError(f"xgraph.backend: preparing model {model.graph.name!r} failed: "
                              f"{type(e).__name__}: {e}") from e
        try:
            return XGraphBackendRep(model, compiled, runner)
        except BaseException:
            runner.close()
            raise

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> list[Any]:
        """Prepare, run once and close: the outputs in graph-output order."""
        with cls.prepare(model, device, **kwargs) as rep:
            return rep.run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info: Sequence[tuple[Any, tuple[int, ...]]] | None = None, **kwargs: Any) -> list[Any]:
        """Run one node: `inputs` in the order of its (non-empty) inputs, or {name: value}."""
        opset = kwargs.pop("opset_version", None)
        model = node_model(node, inputs, outputs_info, opset)
        return cls.run_model(model, inputs, device, **kwargs)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        """Only the host ("CPU", "CPU:0") receives results."""
        try:
            return Device(device).type == DeviceType.CPU
        except (AttributeError, ValueError):
            return False


def _value_type(value: Any) -> onnx.TypeProto | None:
    """The TypeProto of a run-time value (tensor, sequence of tensors); None when it cannot be told."""
    if value is None:
        return None
    if isinstance(value, onnx.TensorProto):
        return helper.make_tensor_type_proto(value.data_type, list(value.dims))
    if isinstance(value, (list, tuple)):
        element = _value_type(value[0]) if value else helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None)
        return None if element is None else helper.make_sequence_type_proto(element)
    array = np.asarray(value)
    code = onnx.TensorProto.STRING if array.dtype.kind in "OUS" else helper.np_dtype_to_tensor_dtype(array.dtype)
    return helper.make_tensor_type_proto(code, list(array.shape))


def node_model(node: onnx.NodeProto, inputs: Any, outputs_info: Sequence | None = None,
               opset: int | None = None) -> onnx.ModelProto:
    """A one-node model for `node`, typed from `inputs` (and `outputs_info` as (dtype, shape) pairs)."""
    names = [n for n in node.input if n]
    if isinstance(inputs, Mapping):
        values = [inputs.get(n) for n in names]
    else:
        values = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
        if len(values) != len(names):
            raise RunnerError(f"xgraph.backend.run_node: node {node.name or node.op_type!r} has {len(names)} "
                              f"inputs ({', '.join(names)}), got {len(values)} values")
    graph_inputs = []
    for name, value in zip(names, values):
        info = onnx.ValueInfoProto(name=name)
        tp = _value_type(value)
        if tp is None:
            raise RunnerError(f"xgraph.backend.run_node: cannot tell the type of input {name!r} of node "
                              f"{node.name or node.op_type!r} from {type(value).__name__}; pass an array")
        info.type.CopyFrom(tp)
        graph_inputs.append(info)
    outputs = []
    for i, name in enumerate(n for n in node.output if n):
        if outputs_info is not None and i < len(outputs_info):
            dtype, shape = outputs_info[i]
            outputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                         list(shape)))
        else:
            outputs.append(onnx.ValueInfoProto(name=name))
    graph = helper.make_graph([node], f"{node.op_type}_node", graph_inputs, outputs)
    domain = node.domain or ""
    version = opset if opset is not None else onnx.defs.onnx_opset_version()
    opsets = [helper.make_opsetid("", version if domain in ("", "ai.onnx") else onnx.defs.onnx_opset_version())]
    if domain not in ("", "ai.onnx"):
        opsets.append(helper.make_opsetid(domain, opset or 1))
    return helper.make_model(graph, opset_imports=opsets)


def _as_array(value: Any) -> np.ndarray:
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def compare_outputs(expected: Sequence[Any], got: Sequence[Any], rtol: float = 1e-3, atol: float = 1e-7,
                    name: str = "output", *, values: bool = True) -> str:
    """'' when `got` matches `expected` as onnx's backend tests compare them, else what differs.

    Shapes must agree; numeric dtypes must agree and values lie within `rtol`/`atol` (NaN equals
    NaN; bfloat16 gets at least two ulps of relative tolerance, like onnx's runner); strings
    must be equal; sequences (lists) are compared element by element; an empty optional
    (None) must be None. values=False compares only that structure (outputs of random ops).
    """
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}"
    for i, (e, g) in enumerate(zip(expected, got)):
        problem = _compare_value(_to_value(e), g, rtol, atol, f"{name} {i}", values)
        if problem:
            return problem
    return ""


def _compare_value(expected: Any, got: Any, rtol: float, atol: float, where: str, values: bool = True) -> str:
    if expected is None:
        return "" if got is None else f"{where}: expected an empty optional (None), got {type(got).__name__}"
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"{where}: expected a sequence of {len(expected)} tensors, got {type(got).__name__}"
        if len(got) != len(expected):
            return f"{where}: sequence of {len(got)} tensors, expected {len(expected)}"
        for j, (e, g) in enumerate(zip(expected, got)):
            problem = _compare_value(e, g, rtol, atol, f"{where}[{j}]", values)
            if problem:
                return problem
        return ""
    if got is None or isinstance(got, (list, tuple)):
        return f"{where}: expected a tensor, got {'None' if got is None else 'a sequence'}"
    expected, got = _as_array(expected), np.asarray(got)
    if got.shape != expected.shape:
        return f"{where}: shape {got.shape}, expected {expected.shape}"
    if expected.dtype.kind in "OUS":
        if got.dtype.kind not in "OUS" or got.tolist() != expected.tolist():
            return f"{where}: strings differ: {got.ravel()[:8].tolist()} vs {expected.ravel()[:8].tolist()}"
        return ""
    if got.dtype != expected.dtype:
        return f"{where}: dtype {got.dtype}, expected {expected.dtype}"
    if not values:
        return ""
    if expected.dtype.kind == "b":
        bad = int(np.count_nonzero(got != expected))
        return f"{where}: {bad} of {expected.size} booleans differ" if bad else ""
    if expected.dtype.name == "bfloat16":
        rtol = max(rtol, 2.0 ** -6)
    if expected.dtype.kind not in "fc":  # ml_dtypes floats and small ints compare as float64
        expected, got = expected.astype(np.float64), got.astype(np.float64)
    close = np.isclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)
    if close.all():
        return ""
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(got.astype(np.complex128 if got.dtype.kind == "c" else np.float64)
                      - expected.astype(np.complex128 if expected.dtype.kind == "c" else np.float64))
    worst = np.unravel_index(int(np.nanargmax(np.where(close, -1.0, np.nan_to_num(diff, nan=np.inf)))), diff.shape)
    return (f"{where}: {int(close.size - close.sum())} of {close.size} values differ beyond rtol={rtol:g}, "
            f"atol={atol:g}; worst at {tuple(int(i) for i in worst)}: {got[worst]!r} vs {expected[worst]!r}")


prepare = XGraphBackend.prepare
run_model = XGraphBackend.run_model
run_node = XGraphBackend.run_node
supports_device = XGraphBackend.supports_device
is_compatible = XGraphBackend.is_compatible

__all__ = ["PREPARE_KWARGS", "XGraphBackend", "XGraphBackendRep", "compare_outputs", "is_compatible", "node_model",
           "prepare", "run_model", "run_node", "supports_device"]
