"""Audit of xgraph's golden reference: every op of the zoo models and of the test exports, one
node at a time, the ONNX reference evaluator (with xgraph's fixes) against onnxruntime.

Inputs are random (normal floats, positive variances), constant inputs (shapes, axes, the
model's initializers) keep their model values. A disagreement here means `ref` mode and
`xgraph verify` would report a wrong golden result for that op; fix it in
`xgraph/kernels/reference_fixes.py`, or list it in KNOWN with the reason.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, shape_inference
from onnx.reference import ReferenceEvaluator

from xgraph.kernels.reference_fixes import evaluator_fixes

ort = pytest.importorskip("onnxruntime")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compile"))
from conftest import bert_like_encoder, cnn_with_lstm  # noqa: E402

ZOO = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
#: (op type, reason) pairs where the evaluator and onnxruntime legitimately differ; empty today.
KNOWN: dict[str, str] = {}


def _models() -> dict[str, onnx.ModelProto]:
    models = {p.stem.removeprefix("light_"): onnx.load(p) for p in sorted(ZOO.glob("light_*.onnx"))}
    models["bert_like"] = bert_like_encoder()
    models["cnn_lstm"] = cnn_with_lstm()
    return models


def _static(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with symbolic input dims fixed (batch 1, others 8), so every node's shape is known."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    for vi in model.graph.input:
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            if not d.HasField("dim_value"):
                d.dim_value = 1 if i == 0 else 8
    return model


def _integer_values(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Every integer tensor of one onnxruntime run on random inputs: shapes and indices computed
    inside the model (Shape -> Concat -> Reshape) must be the model's own, not random."""
    rng = np.random.default_rng(0)
    wanted = [vi for vi in model.graph.value_info if vi.type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)]
    if not wanted:
        return {}
    probe = onnx.ModelProto.FromString(model.SerializeToString())
    probe.graph.output.extend(wanted)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {vi.name: _random_feed(vi.name, vi.type, ("", 0), rng) for vi in model.graph.input if vi.name not in initializers}
    values = ort.InferenceSession(probe.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    names = [o.name for o in probe.graph.output]
    return {n: v for n, v in zip(names, values) if n in {w.name for w in wanted}}


def _signature(node: onnx.NodeProto) -> tuple:
    return (node.op_type, node.domain, tuple(sorted((a.name, str(helper.get_attribute_value(a))) for a in node.attribute)))


def _one_node_cases():
    """(model name, one-node model, feeds) per distinct (op type, attributes) of every model."""
    cases = []
    for name, model in _models().items():
        model = _static(model)
        inferred = shape_inference.infer_shapes(model)
        types = {vi.name: vi.type for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)}
        constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        for node in model.graph.node:
            if node.op_type == "Constant":
                constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
        constants.update(_integer_values(inferred))
        seen = set()
        for node in model.graph.node:
            sig = _signature(node)
            if node.op_type in ("Constant", "ConstantOfShape") or sig in seen:
                continue
            seen.add(sig)
            cases.append(pytest.param(name, node, types, constants, id=f"{name}-{node.op_type}-{len(seen)}"))
    return cases


def _random_feed(name: str, type_proto: onnx.TypeProto, role: tuple[str, int], rng) -> np.ndarray:
    t = type_proto.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
    dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
    if role == ("BatchNormalization", 4):
        return rng.uniform(0.5, 2.0, shape).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 4, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.zoo
@pytest.mark.parametrize("model_name, node, types, constants", _one_node_cases())
def test_reference_agrees_with_onnxruntime(model_name, node, types, constants):
    """One node: reference evaluator (fixed) == onnxruntime within 1e-4 relative."""
    rng = np.random.default_rng(0)
    inputs, inits, feeds = [], [], {}
    for i, x in enumerate(node.input):
        if not x or x in {v.name for v in inputs} or x in {t.name for t in inits}:
            continue
        if x in constants:
            inits.append(numpy_helper.from_array(constants[x], x))
            continue
        inputs.append(helper.make_value_info(x, types[x]))
        feeds[x] = _random_feed(x, types[x], (node.op_type, i), rng)
    outputs = [helper.make_value_info(y, types[y]) for y in node.output if y in types]
    graph = helper.make_graph([node], "one", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=_models_opsets(model_name))
    model.ir_version = min(model.ir_version, 8)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = ReferenceEvaluator(model, new_ops=evaluator_fixes()).run(None, feeds)
    if node.op_type in KNOWN:
        pytest.xfail(KNOWN[node.op_type])
    for e, g, y in zip(expected, got, [o.name for o in outputs]):
        scale = max(float(np.abs(e).max()), 1e-6) if e.size else 1.0
        np.testing.assert_allclose(np.asarray(g, dtype=e.dtype), e, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"{model_name}: {node.op_type} output {y}")


_OPSETS: dict[str, list] = {}


def _models_opsets(name: str) -> list:
    if not _OPSETS:
        for n, m in _models().items():
            _OPSETS[n] = list(m.opset_import)
    return _OPSETS[name]
