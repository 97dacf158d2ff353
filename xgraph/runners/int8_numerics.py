"""Int8 numerics measured per tensor: every quantized tensor of a run against an oracle, in quantization steps.

A quantized model's final float outputs hide where a difference started. Here every integer
tensor a quantizing op writes (QuantizeLinear's output in a QDQ model; QLinearConv,
QLinearMatMul, QLinearAdd/Mul, DynamicQuantizeLinear, ConvInteger and MatMulInteger outputs in
a QOperator model) is read on both sides in the same run:

    probe = with_quantized_outputs(model)             # names the integer tensors, taps them
    compiled = xgraph.compile(probe.model)            # xgraph's side, compiled as usual
    expected = onnxruntime_runs(probe, feeds)         # or reference_runs(probe, feeds)
    got = graph_runner_runs(probe, compiled, feeds, mode="run", kernels="numpy")
    errors = compare(probe, expected, got)            # Int8Errors: steps per tensor, output steps, top-1

An integer tensor's error is the largest |a - b| of its integers: one unit is one quantization
step of that tensor (for ConvInteger/MatMulInteger, one unit of the int32 accumulator). A float
output written by a DequantizeLinear is measured in steps of that DequantizeLinear's scale.

How each side is observed without changing what it computes:

- xgraph and the reference evaluator run `probe.model`: the model with an Identity per integer
  tensor ("probe.<name>") as an extra output. xgraph's integer units read and write the
  integer tensors themselves, so a reader more (the Identity) changes nothing there.
- onnxruntime fuses DQ -> Conv -> Q into QLinearConv only while nothing else reads the Q's
  output (a probe on it stopped all 53 fusions in QDQ ResNet50). So onnxruntime first
  optimizes the untouched model (level "extended": the QDQ fusions, no hardware layouts) and
  writes the result; the probes go on that optimized model, which then runs with optimization
  off. A fused QLinearConv writes the tensor its Q wrote, under the same name; a tensor the
  optimizer removed is missing from onnxruntime's runs and from the comparison.

`tests/quant/test_int8_numerics.py` checks that the own outputs are the same with and without
the probes, on both sides.

Two readings more: `unit_errors` measures each unit alone, fed the oracle's own integer inputs
(a difference carried from an earlier tensor does not count), and `unsigned_activations`
rewrites a QDQ model so onnxruntime runs every unit as its integer kernel (the integer oracle).
"""
from __future__ import annotations

import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import onnx
import onnx.utils
from onnx import helper, numpy_helper

#: op type -> output indices that hold integers computed by the op (domain '' or com.microsoft).
QUANTIZED_OUTPUTS: dict[str, tuple[int, ...]] = {
    "QuantizeLinear": (0,), "DynamicQuantizeLinear": (0,), "QLinearConv": (0,), "QLinearMatMul": (0,),
    "ConvInteger": (0,), "MatMulInteger": (0,), "QLinearAdd": (0,), "QLinearMul": (0,),
    "QLinearConcat": (0,), "QLinearGlobalAveragePool": (0,), "QLinearAveragePool": (0,), "QLinearSigmoid": (0,),
    "QLinearLeakyRelu": (0,), "QLinearSoftmax": (0,),
}
_INTEGER_TYPES = {onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16,
                  onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.INT32}


@dataclass(frozen=True)
class Probe:
    """A model (`source`) and the same model with its integer tensors tapped as outputs (`model`).

    `outputs` are the model's own outputs (in order); `quantized` the appended probe outputs
    (`tap_name` of each integer tensor, in node order); `output_scales` the DequantizeLinear scale
    of each own output written by one (others are absent).
    """

    model: onnx.ModelProto
    source: onnx.ModelProto
    outputs: tuple[str, ...]
    quantized: tuple[str, ...]
    output_scales: dict[str, float] = field(default_factory=dict)


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    types = {}
    for vi in (*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    types.update({t.name: t.data_type for t in model.graph.initializer})
    return types


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            values[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    return values


def tap_name(tensor: str) -> str:
    """The graph output that shows integer tensor `tensor` in a probe."""
    return f"probe.{tensor}"


def with_quantized_outputs(model: onnx.ModelProto) -> Probe:
    """The Probe of `model`: a copy with an Identity per integer tensor of QUANTIZED_OUTPUTS as an extra
    graph output ("probe.<name>"); `model` itself is not changed."""
    types = _elem_types(model)
    own = tuple(o.name for o in model.graph.output)
    seen = set(own) | {i.name for i in model.graph.input}
    quantized = []
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx", "com.microsoft"):
            continue
        for index in QUANTIZED_OUTPUTS.get(node.op_type, ()):
            name = node.output[index] if index < len(node.output) else ""
            if name and name not in seen and types.get(name) in _INTEGER_TYPES:
                seen.add(name)
                quantized.append(name)
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    taps = [tap_name(n) for n in quantized]
    probe.graph.node.extend(helper.make_node("Identity", [n], [t], name=t) for n, t in zip(quantized, taps))
    probe.graph.output.extend(helper.make_tensor_value_info(t, types[n], None) for n, t in zip(quantized, taps))
    constants = _constants(model)
    scales = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] in own and len(node.input) > 1:
            scale = constants.get(node.input[1])
            if scale is not None and scale.size == 1:
                scales[node.output[0]] = float(scale.reshape(()))
    return Probe(probe, model, own, tuple(taps), scales)


def onnxruntime_runs(probe: Probe, feeds: Iterable[dict], every_unit_integer: bool = False) -> list[dict[str, np.ndarray]]:
    """onnxruntime's values of the own outputs and of every integer tensor its optimized model still has.

    DQ -> op -> Q groups run as onnxruntime's integer kernels (QLinearConv, QGemm, ...): the
    model is optimized first and probed after (see the module docstring). Some groups it leaves
    in float (QDQ ResNet50: 20 of 53 Convs); `every_unit_integer` moves the int8 activations to
    uint8 first (an exact rewrite), so every group runs as an integer kernel
    (`unsigned_activations`); the integers are shifted back."""
    import onnxruntime as ort
    source = unsigned_activations(probe.source) if every_unit_integer else probe.source
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "optimized.onnx")
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = path
        ort.InferenceSession(source.SerializeToString(), options, providers=["CPUExecutionProvider"])
        optimized = onnx.load(path)
    located = _locate(probe, optimized)
    optimized.graph.output.extend(onnx.ValueInfoProto(name=name) for name in located.values())
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(optimized.SerializeToString(), options, providers=["CPUExecutionProvider"])
    types = {o.name: helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type) for o in probe.model.graph.output
             if o.type.tensor_type.elem_type}
    runs = []
    for feed in feeds:
        values = session.run(None, feed)
        run = dict(zip(probe.outputs, values))
        for tap, value in zip(located, values[len(probe.outputs):]):
            if value.dtype == types.get(tap):
                run[tap] = value
            elif value.dtype == np.uint8 and types.get(tap) == np.int8:  # QDQS8ToU8: uint8 = int8 + 128
                run[tap] = (value.astype(np.int16) - 128).astype(np.int8)
        runs.append(run)
    return runs


def _locate(probe: Probe, optimized: onnx.ModelProto) -> dict[str, str]:
    """tap -> the tensor of onnxruntime's optimized model that holds the same integers.

    onnxruntime keeps node names: a Q it left in place keeps its own, and the op it fused a
    DQ -> op -> Q group into (QLinearConv, QGemm, ...) takes the group's op name. Its x86
    QDQS8ToU8 pass moves int8 activations to uint8 with the zero point shifted by 128 (every
    integer + 128) and renames the tensors; `onnxruntime_runs` shifts them back."""
    by_name = {node.name: node for node in optimized.graph.node if node.name}
    producer = {o: node for node in probe.source.graph.node for o in node.output}
    located = {}
    for tap in probe.quantized:
        node = producer[tap[len(tap_name("")):]]
        candidates = [node.name]
        if node.op_type == "QuantizeLinear" and node.input[0] in producer:
            candidates.append(producer[node.input[0]].name)
        found = next((by_name[name] for name in candidates if name in by_name), None)
        if found is not None and found.output and found.op_type != "DequantizeLinear":
            located[tap] = found.output[0]
    return located


def contrib_reference_ops() -> list:
    """Reference-evaluator classes for com.microsoft QLinearAdd/QLinearMul, written from onnxruntime's
    schema text (float64, round half to even, saturate), for QOperator models the evaluator cannot run."""
    from onnx.reference.op_run import OpRun

    def requantize(value, c_scale, c_zp):
        info = np.iinfo(c_zp.dtype)
        return np.clip(np.rint(value / np.float64(c_scale)) + np.float64(c_zp), info.min, info.max).astype(c_zp.dtype)

    def real(q, scale, zp):
        return (q.astype(np.float64) - np.float64(zp)) * np.float64(scale)

    class QLinearAdd(OpRun):
        op_domain = "com.microsoft"

        def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp):  # noqa: PLR0913 - the op's inputs
            return (requantize(real(a, a_scale, a_zp) + real(b, b_scale, b_zp), c_scale, c_zp),)

    class QLinearMul(OpRun):
        op_domain = "com.microsoft"

        def _run(self, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp):  # noqa: PLR0913 - the op's inputs
            return (requantize(real(a, a_scale, a_zp) * real(b, b_scale, b_zp), c_scale, c_zp),)

    return [QLinearAdd, QLinearMul]


def reference_runs(probe: Probe, feeds: Iterable[dict], new_ops: Sequence = ()) -> list[dict[str, np.ndarray]]:
    """onnx's reference evaluator's values of every output of `probe.model`, per feed.

    `new_ops` are passed on (xgraph's `evaluator_fixes()` and `contrib_reference_ops()`, typically)."""
    from onnx.reference import ReferenceEvaluator
    evaluator = ReferenceEvaluator(probe.model, new_ops=list(new_ops) or None)
    names = [o.name for o in probe.model.graph.output]
    return [dict(zip(names, evaluator.run(None, feed))) for feed in feeds]


def graph_runner_runs(probe: Probe, compiled, feeds: Iterable[dict], mode: str = "run", kernels: str = "numpy",
                      registries=None) -> Iterator[dict[str, np.ndarray]]:
    """xgraph's values of every output, per feed, lazily (one run's tensors alive at a time when
    consumed by `compare`): `compiled` is `xgraph.compile(probe.model)`."""
    from xgraph.runners.graph_runner import create_graph_runner
    options = {} if registries is None else {"registries": registries}
    with create_graph_runner(compiled, mode=mode, kernels=kernels, **options) as runner:
        names = [t.name for t in runner.get_output_tensors()]
        for feed in feeds:
            yield dict(zip(names, runner.run(feed)))


@dataclass(frozen=True)
class Int8Errors:
    """What `compare` measured over all feeds.

    `tensor_steps`: integer tensor -> largest |difference| (steps); `output_steps`: own output ->
    largest |difference| in its DequantizeLinear's steps (float outputs without one: absent);
    `output_abs`: own output -> largest |difference|; `top1`: feeds on which the first output's
    argmax agrees, of `runs`.
    """

    tensor_steps: dict[str, int]
    output_steps: dict[str, float]
    output_abs: dict[str, float]
    top1: int
    runs: int

    def max_int8_steps(self) -> int:
        """Largest error over the 8-bit (and 16/4-bit) tensors; the int32 accumulators are not steps."""
        return max((v for k, v in self.tensor_steps.items() if not k.startswith("int32:")), default=0)

    def max_output_steps(self) -> float:
        return max(self.output_steps.values(), default=0.0)

    def merged(self, other: "Int8Errors") -> "Int8Errors":
        """The errors of both measurements together (runs of several batches of feeds)."""
        def larger(a: dict, b: dict) -> dict:
            return {k: max(a.get(k, 0), b.get(k, 0)) for k in {**a, **b}}
        return Int8Errors(larger(self.tensor_steps, other.tensor_steps), larger(self.output_steps, other.output_steps),
                          larger(self.output_abs, other.output_abs), self.top1 + other.top1, self.runs + other.runs)

    def first_difference(self, probe: "Probe") -> str | None:
        """The first integer tensor, in the model's node order, that differs on some feed (None: all equal):
        where two engines part, before the difference is carried on."""
        for tap in probe.quantized:
            tensor = tap[len(tap_name("")):]
            if self.tensor_steps.get(tensor, 0) or self.tensor_steps.get(f"int32:{tensor}", 0):
                return tensor
        return None

    def worst(self, n: int = 5) -> list[tuple[str, int]]:
        """The `n` integer tensors with the largest errors, largest first."""
        return sorted(self.tensor_steps.items(), key=lambda kv: -kv[1])[:n]


def compare(probe: Probe, expected: Iterable[dict], got: Iterable[dict]) -> Int8Errors:
    """Errors of `got` against `expected` (per-feed dicts of output values, as the *_runs functions return)."""
    types = {o.name: o.type.tensor_type.elem_type for o in probe.model.graph.output}
    tensor_steps: dict[str, int] = {}
    output_steps: dict[str, float] = {}
    output_abs: dict[str, float] = {}
    top1 = runs = 0
    for want, have in zip(expected, got):
        runs += 1
        for name in probe.quantized:
            if name not in want:
                continue
            tensor = name[len(tap_name("")):]
            key = f"int32:{tensor}" if types.get(name) == onnx.TensorProto.INT32 else tensor
            diff = np.abs(want[name].astype(np.int64) - np.asarray(have[name]).astype(np.int64))
            tensor_steps[key] = max(tensor_steps.get(key, 0), int(diff.max(initial=0)))
        for name in probe.outputs:
            diff = float(np.abs(np.asarray(want[name], np.float64) - np.asarray(have[name], np.float64)).max(initial=0))
            output_abs[name] = max(output_abs.get(name, 0.0), diff)
            if name in probe.output_scales:
                output_steps[name] = max(output_steps.get(name, 0.0), diff / probe.output_scales[name])
        first = probe.outputs[0]
        top1 += int(np.argmax(want[first]) == np.argmax(have[first]))
    return Int8Errors(tensor_steps, output_steps, output_abs, top1, runs)


# A QDQ model onnxruntime runs with every DQ -> op -> Q unit as its integer kernel: the integer oracle.
#
# onnxruntime (CPU, x86) runs 20 of QDQ ResNet50's 53 Conv units in float (DQ -> Conv -> Q), both
# with and without BatchNormalization folded. Measured on its optimized model
# (`SessionOptions.optimized_model_filepath`) and read against its QDQ selectors, the chain is:
#
# 1. A block's input (Sum -> Relu -> Q, or MaxPool -> Q) is read by two Convs, or by a Conv and the
#    residual Sum, through one DequantizeLinear. `EnsureUniqueDQForNodeUnit` gives each reader
#    its own DQ, so that Q now has two DQ readers.
# 2. On x86 onnxruntime moves int8 activations to uint8 (`QDQS8ToU8Transformer`, zero point
#    + 128) one Q -> DQ pair at a time: only a Q with a single DQ reader is converted. The 16
#    block-input Qs stay int8, every other Q becomes uint8.
# 3. The Conv reading a block input then has an int8 input and a uint8 output, and
#    `ConvNodeGroupSelector::Check` refuses the group ("input and output types need to be
#    same"; int8 activations are not allowed for QLinearConv without VNNI either). It stays a
#    float Conv between a DQ and a Q: the first Conv of each of the 16 blocks and the 4
#    projection shortcuts, 20 of 53. (The same happens to a Conv whose own output Q has two
#    readers, as in the MobileNet-style net's residual.)
#
# Those 20 are onnxruntime's choice, not ONNX semantics: computed in float, their results round
# differently from the exact integer unit near half steps (at most one step each), and the
# difference grows through the rest of the network. An int8 device runs every unit in integers,
# so xgraph's `run` does. To still have onnxruntime's integers as the oracle for every unit,
# `unsigned_activations` does step 2 for every activation at once, as an exact rewrite: an int8
# activation quantized with zero point z and the uint8 one with z + 128 hold the same values
# shifted by 128 (the saturation bounds shift with them), and dequantize to the same floats.
# onnxruntime then fuses every unit (all 53 Convs of ResNet50 into QLinearConv), and
# `onnxruntime_runs(..., every_unit_integer=True)` shifts its integers back.


def unsigned_activations(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose int8 activations (QuantizeLinear outputs, per-tensor) are uint8, zero points + 128.

    Each such Q and every DequantizeLinear reading its output take a new uint8 zero point
    initializer ("<zero point>/u8"); weights (DQs of constants) and graph inputs and outputs are
    left alone, as are Qs whose output is a graph output. `model` itself is not changed."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    constants = {t.name: t for t in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    outputs = {o.name for o in graph.output}
    shifted: dict[str, str] = {}  # int8 zero point -> its uint8 counterpart
    moved: set[str] = set()
    for q in graph.node:
        if q.op_type != "QuantizeLinear" or q.domain not in ("", "ai.onnx") or len(q.input) < 3:
            continue
        zero_point = constants.get(q.input[2])
        if zero_point is None or zero_point.data_type != onnx.TensorProto.INT8 or q.output[0] in outputs:
            continue
        value = numpy_helper.to_array(zero_point)
        if value.size != 1 or any(r.op_type != "DequantizeLinear" or len(r.input) < 3 or r.input[2] != q.input[2]
                                  for r in readers[q.output[0]]):
            continue  # per-axis, or read by something that is not its own DQ: left as it is
        signed = q.input[2]
        if signed not in shifted:
            shifted[signed] = f"{signed}/u8"
            graph.initializer.append(numpy_helper.from_array((value.astype(np.int16) + 128).astype(np.uint8),
                                                             shifted[signed]))
        for node in (q, *readers[q.output[0]]):
            node.input[2] = shifted[signed]
        moved.add(q.output[0])
    for info in graph.value_info:  # declared types of the moved tensors follow
        if info.name in moved and info.type.tensor_type.elem_type == onnx.TensorProto.INT8:
            info.type.tensor_type.elem_type = onnx.TensorProto.UINT8
    return out


# Int8 error per unit: each integer tensor recomputed from the oracle's own integer inputs.
#
# Compared over a whole run (`compare`), a one-step difference in an early tensor is carried
# into every later one and grows where a float op between two quantizers scales it (QDQ
# ResNet50's BatchNormalization, kept in float by quantize_static without pre-processing,
# doubles it). That accumulated error says how far two engines drift
# apart, not whether either computes a unit wrongly. `unit_errors` measures the latter:
#
#     for each integer tensor T the oracle run shows,
#         cut the model from the integer tensors (or graph inputs) T is computed from, to T
#         run xgraph on that cut, fed the oracle's values of those integer tensors
#         compare with the oracle's T (in steps of T)
#
# So each unit (DQ -> op -> Q, or a QOperator op) sees exactly the integers the oracle's unit saw,
# and the error is that unit's alone. The cut is onnx's `onnx.utils.Extractor`; `compile` is
# passed in (usually `xgraph.compile`) because the runtime does not import the compiler.


def _sources(model: onnx.ModelProto, tensor: str, known: set[str]) -> list[str]:
    """The tensors `tensor` is computed from: known (oracle-shown) integer tensors and graph inputs, walking back.

    A known tensor written by a node the cut runs anyway (DynamicQuantizeLinear's data beside the
    zero point the cut needs) is recomputed, not fed: a tensor cannot be both."""
    producer = {o: node for node in model.graph.node for o in node.output}
    weights = {t.name for t in model.graph.initializer}
    inputs = {i.name for i in model.graph.input} - weights
    found: list[str] = []
    cut_nodes: set[int] = {id(producer[tensor])}
    seen: set[str] = set()
    stack = list(producer[tensor].input)
    while stack:
        name = stack.pop()
        if not name or name in seen or name in weights:
            continue
        seen.add(name)
        if name in known or name in inputs:
            found.append(name)
        elif name in producer:
            cut_nodes.add(id(producer[name]))
            stack.extend(producer[name].input)
    recomputed = [n for n in found if n in producer and id(producer[n]) in cut_nodes]  # its inputs are walked
    return sorted(set(found) - set(recomputed))


def unit_errors(probe: Probe, expected: Sequence[dict], compile: Callable, mode: str = "run",
                kernels: str = "numpy", registries=None) -> dict[str, int]:
    """Integer tensor -> largest |difference| (steps) of xgraph's unit fed the oracle's integer inputs.

    `expected` are the oracle's per-feed values (`onnxruntime_runs` / `reference_runs` of `probe`),
    which must include the graph inputs' feeds under their own names (as `runs_with_feeds` adds)."""
    from xgraph.runners.graph_runner import create_graph_runner
    shown = {tap[len(tap_name("")):] for tap in probe.quantized if tap in expected[0]}
    extractor = onnx.utils.Extractor(onnx.shape_inference.infer_shapes(probe.source))  # cuts need value types
    errors: dict[str, int] = {}
    options = {} if registries is None else {"registries": registries}
    for tensor in [t for t in (tap[len(tap_name("")):] for tap in probe.quantized) if t in shown]:
        sources = _sources(probe.source, tensor, shown - {tensor})
        cut = extractor.extract_model(sources, [tensor])
        compiled = compile(cut)
        worst = 0
        with create_graph_runner(compiled, mode=mode, kernels=kernels, **options) as runner:
            for run in expected:
                feed = {s: run[tap_name(s)] if tap_name(s) in run else run[s] for s in sources}
                (got,) = runner.run(feed)
                want = run[tap_name(tensor)]
                worst = max(worst, int(np.abs(want.astype(np.int64) - got.astype(np.int64)).max(initial=0)))
        errors[tensor] = worst
    return errors


def runs_with_feeds(runs: Sequence[dict], feeds: Sequence[dict]) -> list[dict]:
    """Each run's values plus the feed it was run on (the cuts that start at a graph input need it)."""
    return [{**feed, **run} for run, feed in zip(runs, feeds)]


__all__ = ["Int8Errors", "Probe", "QUANTIZED_OUTPUTS", "compare", "contrib_reference_ops", "graph_runner_runs",
           "onnxruntime_runs", "reference_runs", "runs_with_feeds", "tap_name", "unit_errors",
           "unsigned_activations", "with_quantized_outputs"]
