"""Measured costs (`xgraph profile-costs`): time each op on each device runner that accepts it.

The way MNN and Collage pick backends: instead of trusting a roofline, run every candidate.

1. The model is compiled once (first fit, with the given plugins) so the ops are those a
   compile places (after constant folding and fusions) and the plugins' subgraphs exist.
2. One reference run (onnxruntime over the prepared graph, every tensor an output) gives each
   op its real inputs; where onnxruntime cannot run the graph, each op gets seeded random
   inputs of its input's dtype and shape (unknown dims as 1).
3. Each op, as a one-op model (its node, the weights it reads), is compiled for each device with an
   op-info library (``{"devices": d, "fallback": "error"}``: a device that refuses it is
   skipped) and its device runner timed in run mode: the median of `repeat` runs after one
   warm-up.
4. Each plugin subgraph (claim or preference) is timed on its plugin's runner the same way.

The result is the cost table of `xgraph.compiler.cost_table` (JSON, docs/devices.md
"Measured costs"). Compile and run both: this module sits above `xgraph.compiler` and
`xgraph.runners`.
"""
from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping

import numpy as np
import onnx
import onnx.numpy_helper

from xgraph.compiler.cost_table import COST_TABLE_VERSION, op_signature
from xgraph.compiler.options import parse_options
from xgraph.compiler.pipeline import compile as compile_graph
from xgraph.errors import XGraphError
from xgraph.registries import Registries, resolve
from xgraph.runners import Runner
from xgraph.runners.random_inputs import random_value
from xgraph.runners.reference_run import run_onnxruntime

if TYPE_CHECKING:
    from xgraph.ir import Graph, Op, Subgraph, Tensor

#: Timed runs per measurement unless the caller says otherwise.
DEFAULT_REPEAT = 10


def reference_values(graph: "Graph", seed: int = 0) -> dict[str, np.ndarray]:
    """Every tensor's value in one onnxruntime run of `graph` on seeded random inputs; just the inputs when
    onnxruntime is missing or cannot run the graph (each op then gets seeded random inputs)."""
    rng = np.random.default_rng(seed)
    feeds = {t.name: random_value(t, rng) for t in graph.get_input_tensors()}
    wanted = [t.name for op in graph.toposort() for t in op.get_output_tensors() if t.dtype is not None]
    try:
        values = dict(zip(wanted, run_onnxruntime(graph.to_onnx(), feeds, wanted)))
    except Exception:  # no engine, an op it lacks, a graph it refuses: onnxruntime's errors have no common base
        return dict(feeds)
    return {**feeds, **values}


def time_runner(runner: Runner, inputs: list[np.ndarray], repeat: int) -> float:
    """The median seconds of `repeat` runs of `runner` on `inputs`, after one warm-up run."""
    runner.run(inputs)
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        runner.run(inputs)
        times.append(time.perf_counter() - started)
    return float(statistics.median(times))


def _inputs(tensors: "list[Tensor]", values: Mapping[str, np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    return [values[t.name] if t.name in values else random_value(t, rng) for t in tensors]


def _device_subgraph(compiled: "Graph", op_name: str) -> "Subgraph | None":
    return compiled.get_root_subgraph().find_child_subgraph_by_op(op_name) if compiled.has_op(op_name) else None


def _value_info(tensor: "Tensor") -> onnx.ValueInfoProto:
    shape = None if tensor.shape is None else [d if isinstance(d, (int, str)) else None for d in tensor.shape]
    dtype = onnx.helper.np_dtype_to_tensor_dtype(tensor.dtype) if tensor.dtype is not None else onnx.TensorProto.FLOAT
    return onnx.helper.make_tensor_value_info(tensor.name, dtype, shape)


def _op_model(full: onnx.ModelProto, nodes: Mapping[str, onnx.NodeProto], op: "Op") -> onnx.ModelProto:
    """`op` alone as a model: its node, the weights it reads, its other inputs as graph inputs."""
    inputs = [t for t in op.get_input_tensors() if t is not None]
    weights = [onnx.numpy_helper.from_array(np.asarray(t.data), t.name) for t in dict.fromkeys(inputs) if t.is_const]
    graph = onnx.helper.make_graph([nodes[op.name]], op.name,
                                   [_value_info(t) for t in dict.fromkeys(inputs) if not t.is_const],
                                   [_value_info(t) for t in op.get_output_tensors()], weights)
    return onnx.helper.make_model(graph, opset_imports=full.opset_import, ir_version=full.ir_version,
                                  functions=full.functions)


def profile_costs(model: Any, options: "Mapping[str, Any] | str | None" = None,
                  plugin_path: "list[str] | None" = None, repeat: int = DEFAULT_REPEAT, kernels: str = "auto",
                  registries: Registries | None = None,
                  progress: "Callable[[str], None] | None" = None) -> dict[str, Any]:
    """The cost table of `model` (see the module doc): seconds per op per accepting device, per plugin subgraph."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise XGraphError(f"profile-costs: repeat must be an int >= 1, got {repeat!r}")
    registries = resolve(registries)
    opts = parse_options(options, registries.devices).to_dict()
    opts.pop("placement", None)
    compiled = compile_graph(model, opts, plugin_path, registries=registries)
    values = reference_values(compiled)
    rng = np.random.default_rng(1)
    devices = [s.name for s in registries.devices.values() if s.ops.rules or s.ops.any_op is not None]
    full = compiled.to_onnx()
    nodes = {node.name: node for node in full.graph.node}
    base = {"precision_mode": opts["precision_mode"]}  # the graph's shapes are static by now
    ops: dict[str, dict[str, Any]] = {}
    for op in compiled.toposort():
        if progress is not None:
            progress(op.name)
        one = _op_model(full, nodes, op)
        seconds: dict[str, float] = {}
        for device in devices:
            try:
                single = compile_graph(one, {**base, "devices": device.lower(), "fallback": "error"},
                                       registries=registries)
            except XGraphError:
                continue  # the device does not take the op
            sg = _device_subgraph(single, op.name)
            if sg is None or str(sg.get_attr("device")) != device:
                continue
            seconds[device] = _time_subgraph(sg, kernels, registries, None, values, rng, repeat)
        ops[op.name] = {"signature": op_signature(op), "seconds": seconds}
    candidates = []
    for sg in compiled.get_root_subgraph().toposort_child_subgraph():
        if not sg.has_attr("plugin"):
            continue
        candidates.append({"plugin": str(sg.get_attr("plugin")), "device": str(sg.get_attr("device")),
                           "ops": sorted(op.name for op in sg.get_ops()),
                           "seconds": _time_subgraph(sg, kernels, registries, plugin_path, values, rng, repeat)})
    return {"version": COST_TABLE_VERSION, "model": compiled.name, "repeat": repeat, "kernels": kernels,
            "ops": ops, "signatures": _by_signature(ops), "candidates": candidates}


def _time_subgraph(sg: "Subgraph", kernels: str, registries: Registries, plugin_path: "list[str] | None",
                   values: Mapping[str, np.ndarray], rng: np.random.Generator, repeat: int) -> float:
    """The median run time of `sg` on its own runner, which is closed afterwards (its sessions go with it)."""
    runner = Runner.create_runner(sg, "run", kernels, registries=registries, plugin_path=plugin_path)
    try:
        return time_runner(runner, _inputs(runner.get_input_tensors(), values, rng), repeat)
    finally:
        runner.close()


def _by_signature(ops: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per signature and device, the median of its ops' times (ops of one kind and size cost alike)."""
    collected: dict[str, dict[str, list[float]]] = {}
    for entry in ops.values():
        for device, seconds in entry["seconds"].items():
            collected.setdefault(entry["signature"], {}).setdefault(device, []).append(seconds)
    return {sig: {device: float(statistics.median(times)) for device, times in by_device.items()}
            for sig, by_device in collected.items()}


__all__ = ["DEFAULT_REPEAT", "profile_costs", "reference_values", "time_runner"]
