"""`xgraph.compile`: load, prepare, plugin chain, device placement and merge, device compile.

Every stage reads the Graph and its attrs and hands it on (DESIGN.md, "Data flow"). The
caller's graph, ModelProto or file is never changed: compiling works on a fresh graph.

The compiled graph carries, besides the subgraph tree with "device"/"runner" attrs:

- graph attrs "compile_options" (the options as a JSON str), "precision_mode",
  "prepare_summary" (what prepare did) and "plugin_runs" (one record per plugin);
- op annotations "device", "placement_reason" (why not a cheaper device) and "kernel": the
  source `xgraph.kernels.resolution.resolve_kernel` names, the same function the runners plan
  with, so the annotation is what runs with xgraph's kernels: "numpy" (xgraph's own kernel),
  "plugin" (a kernel an extension contributed, or the plugin's runner decides), "reference"
  (the ONNX reference evaluator fallback) or "none" (nothing on this host can run it). With
  ``kernels="auto"`` a runner may still hand a whole standard-ONNX subgraph to onnxruntime.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

import onnx

from xgraph.errors import XGraphError
from xgraph.ir import Graph
from xgraph.devices.settings import apply_device_settings
from xgraph.compiler.gears import compile_gears
from xgraph.compiler.options import CompileOptions, parse_options
from xgraph.compiler.placement import bind_nested_graph_inputs, place
from xgraph.devices.settings import with_plugin_devices
from xgraph.compiler.qdq_units import bind_qdq_units
from xgraph.ir.dim_ranges import DimRanges
from xgraph.compiler.prepare import copy_graph, prepare
from xgraph.compiler.verdicts import KernelMemo, Signatures
from xgraph.devices import DeviceSpec
from xgraph.kernels import KernelRegistry
from xgraph.kernels.resolution import PLUGIN, op_device, resolve_kernel
from xgraph.registries import Registries, active, resolve

#: Op annotations a compile writes (dropped when an already compiled graph is compiled again).
COMPILE_ANNOTATIONS = ("device", "placement_reason", "kernel")
#: The stages, in order, as the progress callback names them.
STAGES = ("load", "prepare", "plugins", "placement", "kernels")

Progress = Callable[[str, int, int], None]


def load_for_compile(graph_or_path: "Graph | onnx.ModelProto | bytes | str | os.PathLike") -> Graph:
    """A fresh Graph to compile: a copy of a Graph, or a new one from a path (.onnx/.xmodel), bytes or ModelProto."""
    if isinstance(graph_or_path, Graph):
        return copy_graph(graph_or_path, drop_annotations=COMPILE_ANNOTATIONS)
    if isinstance(graph_or_path, onnx.ModelProto):
        proto = onnx.ModelProto()
        proto.CopyFrom(graph_or_path)
        graph_or_path = proto
    elif not isinstance(graph_or_path, (str, bytes, os.PathLike)):
        raise XGraphError(f"compile takes a Graph, an onnx.ModelProto, bytes or a path, got "
                          f"{type(graph_or_path).__name__}")
    from xgraph.ir.graph import load
    graph = load(graph_or_path)
    if not graph.get_root_subgraph().is_leaf or graph.index().carries_annotations(COMPILE_ANNOTATIONS):
        graph = copy_graph(graph, drop_annotations=COMPILE_ANNOTATIONS)
    return graph


def choose_kernel(op: Any, device: str, kernels: KernelRegistry | None = None) -> str:
    """What will run `op` on `device`: "numpy", "plugin", "reference" or "none" (`resolve_kernel`'s source)."""
    table = kernels if kernels is not None else resolve(None).kernels
    return resolve_kernel(op, op_device(op, device), table).source


def annotate_kernels(graph: Graph, devices: Mapping[str, DeviceSpec], kernels: KernelRegistry | None = None, *,
                     signatures: Signatures | None = None, placed: "list[Any] | None" = None) -> None:
    """Record the chosen kernel per op ("kernel" annotation); ops of plugin subgraphs get "plugin".

    `choose_kernel` (the one kernel resolution) runs once per (op signature, device); `signatures`
    can be the placement's. `placed` (what `place` returned: subgraphs it labelled with a device
    and that device's runner) spares those children the check of their attrs. An ONNX attribute
    named "kernel" is left alone.
    """
    table = kernels if kernels is not None else resolve(None).kernels
    choose = KernelMemo(lambda op, device: choose_kernel(op, device, table),
                        signatures if signatures is not None else Signatures(graph))
    runners = {name: dict(spec.runner) for name, spec in devices.items()}
    by_device: dict[str, list[Any]] = {}  # the subgraphs on each device's own runner
    others: list[Any] = []  # the others (plugin subgraphs): their runner decides
    children = graph.get_root_subgraph().get_children()
    index = graph.index()
    attr_column, ops_of = index.attr_column, index.ops_of
    if placed:  # labelled per device with the same attrs: one check per device
        children -= set(placed)
        known: dict[Any, str | None] = {}
        for sg, label in zip(placed, attr_column(placed, "device", _ABSENT)):
            if label not in known:
                known[label] = _own_runner(label, sg.get_attrs().get("runner"), runners)
            device = known[label]
            (by_device.setdefault(device, []) if device is not None else others).append(sg)
    children = list(children)
    for child, label, runner in zip(children, attr_column(children, "device", _ABSENT), attr_column(children, "runner")):
        device = _own_runner(label, runner, runners)
        (by_device.setdefault(device, []) if device is not None else others).append(child)
    ops = ops_of(others)
    kernels = [PLUGIN] * len(ops)
    for device, subgraphs in by_device.items():  # one bulk lookup per device
        device_ops = ops_of(subgraphs)
        ops += device_ops
        kernels += choose.choose_many(device_ops, device)
    graph.set_op_annotation_columns(ops, {"kernel": kernels})


_ABSENT = object()


def _own_runner(label: Any, runner: Any, runners: Mapping[str, dict]) -> str | None:
    """The device a subgraph labelled `label` (`_ABSENT`: no "device" attr) with attr "runner" `runner` is on, when
    it runs on that device's own runner (then xgraph's kernels run its ops); else None."""
    if label is _ABSENT:
        return None
    device = str(label)
    if device not in runners or runner is None:
        return None
    return device if (runner if type(runner) is dict else dict(runner)) == runners[device] else None


def annotate_precision(graph: Graph, devices: Mapping[str, DeviceSpec], precision_mode: str) -> None:
    """Mark ops that compute in float16 only because precision_mode allowed it ("precision" annotation).

    ATC's allow_fp32_to_fp16: an op keeps float32 where its device supports float32, and drops
    to float16 where the device takes float32 data only as float16 (`needs_fp16` in the op-info
    library). The sim runner rounds exactly those ops to float16. Under force_fp16 every float
    op of an fp16 device runs in float16, which the runner applies to whole subgraphs.
    """
    if precision_mode != "allow_fp32_to_fp16":
        return
    for child in graph.get_root_subgraph().get_children():
        spec = devices.get(str(child.get_attr("device"))) if child.has_attr("device") else None
        if spec is None:
            continue
        for op in child.get_ops():
            rule = spec.ops.rule_for(op.type, op.domain)
            dtype = next((t.dtype for t in op.get_input_tensors() if t is not None and t.dtype is not None), None)
            if rule is not None and dtype is not None and dtype in rule.needs_fp16 and dtype not in rule.dtypes:
                op.set_attr("precision", "float16", onnx_type=None)


def _annotate_plugin_ops(graph: Graph, runs: list[dict[str, Any]]) -> None:
    children = {c.name: c for c in graph.get_root_subgraph().get_children()}
    ops: list[Any] = []
    devices: list[str] = []
    reasons: list[str] = []
    for run in runs:
        found = [children[name] for name in run["subgraphs"] if name in children]
        run_ops = [op for sg in found for op in sg.get_ops()]
        ops += run_ops
        devices += [run["device"]] * len(run_ops)
        reasons += [f"chosen by plugin {run['name']!r}"] * len(run_ops)
    graph.set_op_annotation_columns(ops, {"device": devices, "placement_reason": reasons})


def _annotate_declined_ops(graph: Graph, runs: list[dict[str, Any]]) -> None:
    """Put "plugin 'p' declined: <reason>" first in the placement reason of each op a plugin handed back."""
    ops: list[Any] = []
    reasons: list[str] = []
    for run in runs:
        for entry in run.get("declined", []):
            for name in entry["ops"]:
                op = graph.get_op(name)
                placed = str(op.get_attr("placement_reason")) if op.is_annotation("placement_reason") else ""
                ops.append(op)
                reasons.append(f"plugin {run['name']!r} declined: {entry['reason']}" + (f"; {placed}" if placed else ""))
    if ops:
        graph.set_op_annotation_columns(ops, {"placement_reason": reasons})


def compile(graph_or_path: "Graph | onnx.ModelProto | bytes | str | os.PathLike",
            options: "Mapping[str, Any] | str | CompileOptions | None" = None,
            plugin_path: "list[str] | str | None" = None, *, progress: Progress | None = None,
            registries: Registries | None = None) -> Graph:
    """Partition a model into device subgraphs; returns the compiled Graph (the input is not changed).

    `progress(stage, index, total)` is called as each stage of `STAGES` starts. `registries`
    (devices, kernels; the default `xgraph.registries.Registries` when None) is read when the
    compile starts, so extensions registered before it count.
    """
    registries = resolve(registries)
    with active(registries):
        return _compile(graph_or_path, options, plugin_path, progress, registries)


def _report_stage(progress: Progress | None, name: str) -> None:
    """Tell `progress` that stage `name` of `STAGES` starts."""
    if progress is not None:
        progress(name, STAGES.index(name), len(STAGES))


def _compile(graph_or_path: Any, options: Any, plugin_path: Any, progress: Progress | None,
             registries: Registries) -> Graph:
    devices = registries.devices
    opts = parse_options(options, devices)
    if isinstance(plugin_path, (str, Path)):
        plugin_path = [str(plugin_path)]
    _report_stage(progress, "load")
    graph = load_for_compile(graph_or_path)
    if opts.gears:  # one static partition per gear, each through the stages below
        return compile_gears(graph, opts, lambda g, o: _compile_loaded(g, o, plugin_path, progress, registries))
    return _compile_loaded(graph, opts, plugin_path, progress, registries)


def _compile_loaded(graph: Graph, opts: CompileOptions, plugin_path: Any, progress: Progress | None,
                    registries: Registries) -> Graph:
    devices = apply_device_settings(registries.devices, opts.device_settings)
    _report_stage(progress, "prepare")
    summary = prepare(graph, opts)
    root = graph.get_root_subgraph()
    if root.is_leaf and graph.get_op_num():
        root.create_child_subgraph()
    bind_qdq_units(graph)  # a DQ -> op -> Q pattern is one child: plugins' filters and placement see one op
    _report_stage(progress, "plugins")
    runs: list[dict[str, Any]] = []
    if opts.plugins:
        from xgraph.plugins.chain import run_plugin_chain
        runs = run_plugin_chain(graph, list(opts.plugins), plugin_path, opts.plugin_options,
                                strict=opts.strict_plugins)
        _annotate_plugin_ops(graph, runs)
        devices = with_plugin_devices(devices, runs)
    _report_stage(progress, "placement")
    bind_nested_graph_inputs(graph)
    signatures = Signatures(graph)  # shared by placement and kernel choice: one signature per op
    placed = place(graph, devices, opts, signatures=signatures, dims=DimRanges(summary.get("dim_ranges")))
    _annotate_declined_ops(graph, runs)
    _report_stage(progress, "kernels")
    annotate_kernels(graph, devices, registries.kernels, signatures=signatures, placed=placed)
    annotate_precision(graph, devices, opts.precision_mode)
    graph.set_attr("compile_options", opts.to_json())
    graph.set_attr("precision_mode", opts.precision_mode)
    graph.set_attr("prepare_summary", summary)
    graph.set_attr("plugin_runs", runs)
    if progress is not None:
        progress("done", len(STAGES), len(STAGES))
    return graph


__all__ = ["COMPILE_ANNOTATIONS", "STAGES", "annotate_kernels", "choose_kernel", "compile", "load_for_compile"]
