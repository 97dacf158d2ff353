"""The nine model-zoo architectures (onnx/backend/test/data/light) through xgraph.compile."""
from __future__ import annotations

import pytest

import xgraph

#: model -> {device: (subgraphs, ops)}. AI CPU gets grouped (not depthwise) convs, float32 LRN under the
#: default precision mode, and the weights too large to fold (> 64 MB, made by ConstantOfShape).
EXPECTED = {
    "bvlc_alexnet": {"AICORE": (3, 22), "AICPU": (2, 3)},
    "densenet121": {"AICORE": (1, 668)},
    "inception_v1": {"AICORE": (3, 141), "AICPU": (2, 2)},
    "inception_v2": {"AICORE": (1, 371)},
    "resnet50": {"AICORE": (1, 176)},
    "shufflenet": {"AICORE": (1, 203)},
    "squeezenet": {"AICORE": (1, 66)},
    "vgg19": {"AICORE": (1, 46), "AICPU": (1, 1)},
    "zfnet512": {"AICORE": (3, 20), "AICPU": (2, 3)},
}


def light(models, name):
    return next(p for p in models.LIGHT if p.stem == f"light_{name}")


@pytest.mark.zoo
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_zoo_model_compiles_to_the_expected_partition(models, name):
    g = xgraph.compile(light(models, name))
    models.check_compiled(g)
    r = xgraph.report(g)
    assert {d: (v["subgraphs"], v["ops"]) for d, v in r["devices"].items()} == EXPECTED[name]
    assert r["crossings"] == 0 and r["reference_ops"] == [] and r["unrunnable_ops"] == []
    assert not any(op.type == "ConstantOfShape" and op.get_output_tensor().numel() * 4 <= 64 << 20
                   for op in g.get_ops())  # every weight small enough was folded
    names = [o["name"] for o in r["ops"]]
    assert len(names) == len(set(names)) == g.get_op_num()
    assert sum(len(s["ops"]) for s in r["subgraphs"]) == g.get_op_num()
    assert sum(f["count"] for f in r["fallbacks"]) == sum(1 for o in r["ops"] if o["reason"])
    for f in r["fallbacks"]:
        assert f["reason"].startswith("AICORE: ") and f["device"] == "AICPU"


@pytest.mark.zoo
def test_zoo_lrn_moves_to_ai_core_when_fp16_is_allowed(models):
    r = xgraph.report(xgraph.compile(light(models, "zfnet512"), {"precision_mode": "force_fp16"}))
    assert {d: (v["subgraphs"], v["ops"]) for d, v in r["devices"].items()} == {"AICORE": (1, 22), "AICPU": (1, 1)}
