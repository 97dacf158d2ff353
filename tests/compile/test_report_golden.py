"""The full `xgraph.report` of the zoo models and of the test-built transformer and CNN, against golden files.

Placement and kernel choice are memoised per op signature for speed (see
`xgraph.compiler.verdicts`); these reports were captured before that memoisation existed,
so any change in a device, a subgraph, a reason or a kernel shows up here as a diff.

Regenerate (only when a change of placement is intended, and review the diff):

    XGRAPH_REGENERATE_GOLDEN=1 python -m pytest -q tests/compile/test_report_golden.py
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

import xgraph

GOLDEN = Path(__file__).parent / "golden"
REGENERATE = os.environ.get("XGRAPH_REGENERATE_GOLDEN") == "1"

#: zoo model -> option sets compiled (each gives one golden report)
ZOO_CASES = {
    "bvlc_alexnet": [{}, {"devices": "aicpu,cpu"}],
    "densenet121": [{}],
    "inception_v1": [{}, {"min_subgraph_ops": 4}],
    "inception_v2": [{}],
    "resnet50": [{}, {"precision_mode": "allow_fp32_to_fp16"}],
    "shufflenet": [{}],
    "squeezenet": [{}, {"devices": "aicore,cpu"}],
    "vgg19": [{}],
    "zfnet512": [{}, {"precision_mode": "force_fp16"}],
}

BERT_OPTIONS = [{}, "static", {"min_subgraph_ops": 8}, {"devices": "aicore,cpu"}, {"min_subgraph_ops": 100},
                {"precision_mode": "allow_fp32_to_fp16"}]
CNN_OPTIONS = [{}, {"min_subgraph_ops": 3}, {"devices": "aicpu,dvpp,cpu"}]


def mixed_chain(n: int = 240) -> onnx.ModelProto:
    """The benchmark's chain in small: unary ops, a residual Add every 8 ops, a TopK every 97 (with k as a
    weight), some ops in float64 and a Cast round trip, so equal-looking ops differ by dtype, shape and weight."""
    ops = ("Relu", "Sigmoid", "Tanh", "Abs", "Neg")
    nodes, inits = [], [helper.make_tensor("k", TensorProto.INT64, [1], [4])]
    prev, skip = "x", "x"
    for i in range(n):
        name = f"n{i}"
        if i % 97 == 96:
            nodes.append(helper.make_node("TopK", [prev, "k"], [name, name + "_idx"], name=name, axis=-1))
        elif i % 8 == 7:
            nodes.append(helper.make_node("Add", [prev, skip], [name], name=name))
            skip = name
        elif (i // 8) % 6 == 1 and i % 8 == 2:
            nodes.append(helper.make_node("Cast", [prev], [name], name=name, to=TensorProto.DOUBLE))
        elif (i // 8) % 6 == 1 and i % 8 == 4:
            nodes.append(helper.make_node("Cast", [prev], [name], name=name, to=TensorProto.FLOAT))
        else:
            nodes.append(helper.make_node(ops[i % len(ops)], [prev], [name], name=name))
        prev = name
        if i % 97 == 96:
            skip = name  # the TopK narrows the last dim: later residuals add to it
    g = helper.make_graph(nodes, "mixed_chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                          [helper.make_tensor_value_info(prev, TensorProto.UNDEFINED, None)], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def cases(light: list[Path]):
    """(case id, model, options, marks)."""
    found = {p.stem.removeprefix("light_"): p for p in light}
    for name, option_sets in ZOO_CASES.items():
        for i, options in enumerate(option_sets):
            yield f"zoo_{name}_{i}", ("zoo", name), options, [pytest.mark.zoo]
    for i, options in enumerate(BERT_OPTIONS):
        yield f"bert_like_encoder_{i}", ("bert",), options, []
    for i, options in enumerate(CNN_OPTIONS):
        yield f"cnn_with_lstm_{i}", ("cnn",), options, []
    for i, options in enumerate([{}, {"devices": "aicpu,cpu"}, {"min_subgraph_ops": 5}]):
        yield f"mixed_chain_{i}", ("mixed",), options, []


def _light_paths() -> list[Path]:
    return sorted((Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("*.onnx"))


CASES = [pytest.param(model, options, id=case_id, marks=marks)
         for case_id, model, options, marks in cases(_light_paths())]


def _build(models, model, options):
    if options == "static":
        options = models.BERT_STATIC
    elif model[0] == "bert" and options:
        options = {**models.BERT_STATIC, **options}
    if model[0] == "zoo":
        source = next(p for p in models.LIGHT if p.stem == f"light_{model[1]}")
    elif model[0] == "bert":
        source = models.bert_like_encoder()
    elif model[0] == "cnn":
        source = models.cnn_with_lstm()
    else:
        source = mixed_chain()
    return source, options


def canonical(report: dict) -> dict:
    """The report as JSON would store it (tuples as lists, numpy scalars as text)."""
    return json.loads(json.dumps(report, default=str))


@pytest.mark.parametrize("model, options", CASES)
def test_report_is_unchanged(models, request, model, options):
    source, options = _build(models, model, options)
    got = canonical(xgraph.report(xgraph.compile(source, options)))
    got.pop("cost")  # the cost model's estimate is checked in test_cost_placement.py; this file guards placement
    path = GOLDEN / f"{request.node.callspec.id}.json"
    if REGENERATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(json.dumps(got, separators=(",", ":"), sort_keys=True) + "\n", encoding="utf-8")
        pytest.skip("golden report regenerated")
    expected = json.loads(path.read_text(encoding="utf-8"))
    assert got["ops"] == expected["ops"]  # per op first: the diff pytest shows is then readable
    assert got == expected
