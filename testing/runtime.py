"""Glue the runtime tests and benchmarks share: hand-made placement, zoo models with random weights,
and the jobs-in-flight loop the throughput benchmarks time.

`place` builds what `xgraph.compile` produces (device subgraphs with "device" and "runner"
attrs) from a plain op -> device function, so runtime behaviour can be tested without the
partitioner. `zoo_model` loads an ONNX model-zoo architecture from onnx's test data.
`load_script` loads a file of the repository (a sample's script, another test folder's model
builders) as a module, for tests and benchmarks that use it without installing it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from xgraph.ir import Graph, Op

def load_script(path: "str | Path", name: str | None = None):
    """The Python file at `path`, executed as a fresh module named `name` (default: from the path).

    Only for the repository's own files (samples, test builders, benchmarks): running a file is
    running its code."""
    import importlib.util
    path = Path(path)
    spec = importlib.util.spec_from_file_location(name or f"xgraph_script_{path.parent.name}_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: The "light" model-zoo architectures shipped in onnx's backend test data.
ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: Built-in device -> the runner that serves it in every mode.
BUILTIN_RUNNER = {"AICORE": "aicore", "AICPU": "aicpu", "DVPP": "dvpp", "CPU": "cpu"}


def place(graph: Graph, device_of: Callable | dict, runner: Callable | str | None = None, merge: bool = True) -> Graph:
    """Hand-made placement (what xgraph.compile produces): runs of same-device ops become device subgraphs.

    A run of consecutive ops in topological order is convex, so merging it never makes a cycle.
    `device_of` maps an op (or its name, for a dict) to a device; `runner` names the runner for
    every mode (default: the built-in runner of the device). `merge=False` keeps one subgraph per op.
    """
    pick = (lambda op: device_of[op.name]) if isinstance(device_of, dict) else device_of
    root = graph.get_root_subgraph()
    root.create_child_subgraph()
    runs: list[tuple[str, list]] = []
    for op in graph.toposort():
        device = pick(op)
        if merge and runs and runs[-1][0] == device:
            runs[-1][1].append(op)
        else:
            runs.append((device, [op]))
    for device, ops in runs:
        sg = root.merge_children({graph.get_leaf_subgraph(op) for op in ops})
        name = runner(device) if callable(runner) else (runner or BUILTIN_RUNNER.get(device, "cpu"))
        sg.set_attr("device", device)
        sg.set_attr("runner", {"run": name, "sim": name, "ref": name})
    return graph


def randomize_zoo_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """The zoo model with every ConstantOfShape (its 0.02 "weights") replaced by a seeded random initializer.

    Weights of a node that multiplies (Conv/Gemm) are scaled by 1/sqrt(fan-in) so activations stay O(1);
    BatchNormalization variances stay positive. Uniform weights would let a broken kernel still "match".
    """
    rng = np.random.default_rng(seed)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    role: dict[str, tuple[str, int]] = {}
    for n in model.graph.node:
        for i, x in enumerate(n.input):
            role.setdefault(x, (n.op_type, i))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    replaced = set()
    for n in model.graph.node:
        if n.op_type != "ConstantOfShape":
            out.graph.node.append(n)
            continue
        shape = tuple(int(d) for d in inits[n.input[0]])
        op_type, index = role.get(n.output[0], ("", 0))
        if op_type in ("Conv", "Gemm") and index == 1:
            fan_in = int(np.prod(shape[1:])) if op_type == "Conv" else shape[-1]
            value = rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)
        elif op_type == "BatchNormalization" and index == 4:
            value = rng.uniform(0.5, 1.5, shape)
        elif op_type == "BatchNormalization" and index == 1:
            value = rng.uniform(0.5, 1.0, shape)
        else:
            value = rng.standard_normal(shape) * 0.1
        out.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), n.output[0]))
        replaced.add(n.output[0])
    read = {x for n in out.graph.node for x in n.input}
    inits = [t for t in out.graph.initializer if t.name in read]
    del out.graph.initializer[:]
    out.graph.initializer.extend(inits)
    kept = [vi for vi in out.graph.input if vi.name not in replaced and vi.name in read]
    if out.ir_version < 4:  # before IR 4 every initializer is also a graph input (shape inference needs its type)
        kept += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in inits if t.name in replaced]
    del out.graph.input[:]
    out.graph.input.extend(kept)
    return out


def zoo_model(name: str, seed: int = 0) -> onnx.ModelProto:
    """A light zoo model (e.g. 'resnet50') with random weights."""
    return randomize_zoo_weights(onnx.load(str(ZOO / f"light_{name}.onnx")), seed)


def zoo_device_of(op: Op) -> str:
    """A plausible placement: dense math on AI Core, reshapes on AI CPU, the final Softmax on the host."""
    if op.type == "Softmax":
        return "CPU"
    if op.type in ("Reshape", "Flatten", "Transpose"):
        return "AICPU"
    return "AICORE"


def with_logits_output(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with the Softmax input (the logits) added as a graph output (models without one end in logits)."""
    softmax = [n for n in model.graph.node if n.op_type == "Softmax"]
    if softmax:
        logits = softmax[-1].input[0]
        model.graph.output.append(onnx.helper.make_tensor_value_info(logits, onnx.TensorProto.FLOAT, None))
    return model


def kernel_annotation_mismatches(compiled: Graph, runner) -> list[str]:
    """Ops whose saved "kernel" annotation is not what `runner` (a GraphRunner, kernels="numpy") runs.

    The annotation and the runners' plans both come from `xgraph.kernels.resolution.resolve_kernel`,
    so this list is empty unless they drifted apart.
    """
    running = runner.kernel_choices()
    problems = []
    for op in compiled.get_ops():
        if not op.is_annotation("kernel"):
            continue
        saved, choice = op.get_attr("kernel"), running.get(op.name)
        if choice is None:
            problems.append(f"op {op.name!r} ({op.type}): annotated {saved!r}, but no runner's plan has it")
        elif choice.source != saved:
            problems.append(f"op {op.name!r} ({op.type}): annotated {saved!r}, runs {choice.label} ({choice.reason})")
    return problems


def in_flight_rate(runner: Any, feeds: Any, jobs: int, in_flight: int = 8) -> float:
    """Jobs per second of `runner` (anything with execute_async/wait) running `jobs` jobs of `feeds`,
    keeping `in_flight` of them submitted at a time (the oldest waited for first)."""
    import time
    start = time.perf_counter()
    pending = []
    for _ in range(jobs):
        pending.append(runner.execute_async(feeds))
        if len(pending) == in_flight:
            runner.wait(pending.pop(0))
    for job in pending:
        runner.wait(job)
    return jobs / (time.perf_counter() - start)
