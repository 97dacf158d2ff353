"""Support verdicts: each device's op-info library on single ops, with the reasons users read."""
from __future__ import annotations

import numpy as np

from xgraph.compiler.checks import (
    ACCEPT, Verdict, all_of, any_of, dtype_in, labelled, not_dtype, refuse, static_shapes)
from xgraph.compiler.support import op_info
from xgraph.devices import get_devices

F32, I64, U8 = np.float32, np.int64, np.uint8


def verdicts(graph, precision_mode="must_keep_origin_dtype") -> dict[str, Verdict]:
    op = graph.get_op("op")
    return {name: op_info(spec, precision_mode)(op) for name, spec in get_devices().items()}


def conv(models, group=1, channels=6, kernel=3, **attrs):
    w = np.zeros((channels, channels // group, kernel, kernel), np.float32)
    return models.one_op("Conv", [(F32, [1, channels, 16, 16]), w], {"group": group, **attrs})


def test_conv_on_ai_core_and_its_limits(models):
    assert verdicts(conv(models))["AICORE"] == ACCEPT
    assert verdicts(conv(models, group=6))["AICORE"] == ACCEPT  # depthwise
    assert verdicts(conv(models, group=3))["AICORE"] == ACCEPT  # grouped
    v = verdicts(conv(models, dilations=[300, 1], kernel=1))
    assert not v["AICORE"].ok
    assert v["AICPU"].ok and v["CPU"].ok
    assert v["DVPP"] == refuse("DVPP: Conv is not in its op-info library")
    big = verdicts(models.one_op("Conv", [(F32, [1, 1, 300, 300]), np.zeros((1, 1, 256, 3), np.float32)]))
    assert big["AICORE"].reason == "AICORE: Conv with input 1 dim 2 = 256 unsupported: kernels up to 255 x 255"
    dil = verdicts(conv(models, dilations=[300, 1], kernel=1))["AICORE"]
    assert dil.reason == "AICORE: Conv with dilations=[300, 1] unsupported: dilations 1..255"
    conv3d = models.one_op("Conv", [(F32, [1, 2, 4, 4, 4]), np.zeros((2, 2, 1, 1, 1), np.float32)])
    assert verdicts(conv3d)["AICORE"].reason == \
        "AICORE: Conv with rank-5 input 0 unsupported: AI Core convolves 1-D (NCW) and 2-D (NCHW) only"


def test_dynamic_shapes_go_past_ai_core_with_a_hint(models):
    v = verdicts(models.one_op("MatMul", [(F32, ["batch", 8]), np.ones((8, 4), np.float32)]))
    assert v["AICORE"] == ACCEPT  # a dynamic-shape op (dynamic_dims in aicore.toml): symbolic dims of known rank
    v = verdicts(models.one_op("MatMul", [(F32, None), np.ones((8, 4), np.float32)]))
    assert v["AICORE"].reason == ("AICORE: MatMul with unknown rank on 'in0' unsupported: needs known ranks; fix the "
                                  "inputs' shapes with the input_shape option")
    v = verdicts(models.one_op("ConvTranspose", [(F32, ["batch", 2, 4, 4]), np.ones((2, 2, 3, 3), np.float32)]))
    assert v["AICORE"].reason == ("AICORE: ConvTranspose with dynamic shape (batch, 2, 4, 4) on 'in0' unsupported: "
                                  "needs static shapes; fix them with the input_shape option")
    assert v["AICPU"].ok


def test_shape_values_are_taken_by_ai_core_and_larger_integer_math_is_not(models):
    # a shape, a dim, an offset: computed in line by the dynamic-shape executor ([shape_values])
    assert verdicts(models.one_op("Add", [(I64, [2]), np.array([1, 1], np.int64)]))["AICORE"].ok
    for op_type in ("Shape", "Size"):  # only the descriptor of the input is read, whatever its size
        assert verdicts(models.one_op(op_type, [(F32, [1, 3, 800, 800])]))["AICORE"].ok
        assert verdicts(models.one_op(op_type, [(F32, [1, "seq", 8])]))["AICORE"].ok
    gather = verdicts(models.one_op("Gather", [(I64, [3]), np.array(0, np.int64)], {"axis": 0}))
    assert gather["AICORE"].ok and gather["AICPU"].ok
    # beyond 8 elements int64 arithmetic is data, not a shape: the op rule decides, and refuses
    v = verdicts(models.one_op("Add", [(I64, [16]), np.ones(16, np.int64)]))
    assert v["AICORE"].reason == "AICORE: Add with dtype int64 unsupported: takes float16, float32, int8, int32"
    assert v["AICPU"].ok
    # an unknown element count is not a shape value either
    v = verdicts(models.one_op("Sub", [(I64, ["n"]), np.array([1], np.int64)]))
    assert v["AICORE"].reason == "AICORE: Sub with dtype int64 unsupported: takes float16, float32, int8, int32"
    # nor is an op the section does not list
    v = verdicts(models.one_op("CumSum", [(I64, [4]), np.array(0, np.int64)]))
    assert not v["AICORE"].ok


def test_a_bool_mask_slice_with_computed_offsets_is_on_ai_core(models):
    tril = np.tril(np.ones((64, 64), bool))
    v = verdicts(models.one_op("Slice", [tril, (I64, [1]), (I64, [1]), np.array([0], np.int64)]))
    assert v["AICORE"] == ACCEPT
    steps = verdicts(models.one_op("Slice", [tril, (I64, [1]), (I64, [1]), np.array([0], np.int64), (I64, [1])]))
    assert steps["AICORE"].reason == ("AICORE: Slice with non-constant input 4 ('in4') unsupported: "
                                        "steps must be constant")


def test_embedding_gather_is_on_ai_core_whatever_the_index_width(models):
    table = np.zeros((64, 32), np.float32)
    for ids in (I64, np.int32):
        v = verdicts(models.one_op("Gather", [table, (ids, [1, 16])], {"axis": 0}))
        assert v["AICORE"] == ACCEPT  # the ids only address rows: no int64 arithmetic on the core
    float_ids = verdicts(models.one_op("Gather", [table, (U8, [1, 16])], {"axis": 0}))["AICORE"]
    assert float_ids.reason == ("AICORE: Gather with input 1 of dtype uint8 unsupported: "
                                "AI Core gathers with int32 or int64 indices")
    dynamic = verdicts(models.one_op("Gather", [table, (I64, [1, "seq"])], {"axis": 0}))
    assert dynamic["AICORE"] == ACCEPT  # a dynamic-shape op: the sequence length may vary


def test_constant_operand_requirements(models):
    axes = models.one_op("Unsqueeze", [(F32, [2, 3]), (I64, [1])])
    assert verdicts(axes)["AICORE"].reason == \
        "AICORE: Unsqueeze with non-constant input 1 ('in1') unsupported: axes must be constant"
    assert verdicts(models.one_op("Unsqueeze", [(F32, [2, 3]), np.array([0], np.int64)]))["AICORE"].ok


def test_attribute_choices_and_schema_defaults(models):
    cubic = models.one_op("Resize", [(F32, [1, 3, 8, 8]), None, np.array([1, 1, 2, 2], np.float32)], {"mode": "cubic"})
    assert verdicts(cubic)["AICORE"].reason == ("AICORE: Resize with mode=cubic unsupported: cubic interpolation "
                                                "runs on AI CPU")
    pool = models.one_op("MaxPool", [(F32, [1, 3, 8, 8])], {"kernel_shape": [2, 2]})
    assert verdicts(pool)["AICORE"].ok  # storage_order absent: the schema default 0 is checked
    pool_idx = models.one_op("MaxPool", [(F32, [1, 3, 8, 8])], {"kernel_shape": [2, 2], "storage_order": 1})
    assert verdicts(pool_idx)["AICORE"].reason == "AICORE: MaxPool with storage_order=1 unsupported: allowed: 0"


def test_precision_mode_decides_fp16_only_ops(models):
    lrn = models.one_op("LRN", [(F32, [1, 4, 8, 8])], {"size": 3})
    assert verdicts(lrn)["AICORE"].reason == (
        "AICORE: LRN with dtype float32 unsupported under precision_mode=must_keep_origin_dtype: runs in float16 "
        "only; set precision_mode to allow_fp32_to_fp16 or force_fp16")
    assert verdicts(lrn, "force_fp16")["AICORE"].ok
    assert verdicts(lrn, "allow_fp32_to_fp16")["AICORE"].ok


def test_dvpp_takes_uint8_nhwc_pictures_only(models):
    scales = np.array([1, 0.5, 0.5, 1], np.float32)
    picture = verdicts(models.one_op("Resize", [(U8, [1, 64, 64, 3]), None, scales], {"mode": "linear"}))
    assert picture["DVPP"].ok
    assert picture["AICPU"].reason.startswith("AICPU: Resize with dtype uint8 unsupported")
    nearest = verdicts(models.one_op("Resize", [(U8, [1, 64, 64, 3]), None, scales], {"mode": "nearest"}))
    assert nearest["DVPP"].reason == "DVPP: Resize with mode=nearest unsupported: VPC interpolates bilinearly"
    nchw = verdicts(models.one_op("Resize", [(F32, [1, 3, 64, 64]), None, np.array([1, 1, 2, 2], np.float32)],
                                  {"mode": "linear"}))
    assert nchw["DVPP"].reason.startswith("DVPP: Resize with dtype float32 unsupported: takes uint8")
    crop = models.one_op("Slice", [(U8, [1, 64, 64, 3]), np.array([2, 4], np.int64), np.array([34, 36], np.int64),
                                   np.array([1, 2], np.int64)])
    assert verdicts(crop)["DVPP"].ok
    odd = models.one_op("Slice", [(U8, [1, 64, 64, 3]), np.array([1, 4], np.int64), np.array([33, 36], np.int64),
                                  np.array([1, 2], np.int64)])
    assert verdicts(odd)["DVPP"].reason == ("DVPP: Slice with input 1 = [1, 4] unsupported: VPC crop boxes start at "
                                            "even, non-negative offsets")


def test_dvpp_domain_ops_are_checked_against_the_engine_rules(models):
    ok = models.one_op("VpcResize", [(U8, [64, 64, 3])], {"width": 32, "height": 32}, domain="xgraph.dvpp")
    assert verdicts(ok)["DVPP"].ok
    tiny = models.one_op("VpcResize", [(U8, [64, 64, 3])], {"width": 8, "height": 8}, domain="xgraph.dvpp")
    v = verdicts(tiny)
    assert v["DVPP"].reason.startswith("DVPP: VpcResize: output size 8x8 (width x height) breaks the DVPP rule")
    assert v["AICORE"].reason == "AICORE: VpcResize (domain 'xgraph.dvpp') is not in its op-info library"
    assert v["CPU"].ok  # the numpy kernel runs it on the host


def test_cpu_runs_what_a_kernel_or_the_reference_evaluator_runs(models):
    det = verdicts(models.one_op("Det", [(F32, [3, 3])]))
    assert det["CPU"].ok and not det["AICPU"].ok
    custom = verdicts(models.one_op("Frobnicate", [(F32, [3])], domain="my.ops"))
    assert custom["CPU"].reason == ("CPU: Frobnicate (domain 'my.ops') has no numpy kernel and the ONNX reference "
                                    "evaluator cannot run it; register a kernel with @kernel or place it with a plugin")


def test_checks_compose(models):
    op = conv(models, dilations=[300, 1], kernel=1).get_op("op")
    aicore = op_info(get_devices()["AICORE"])
    aicpu = op_info(get_devices()["AICPU"])
    assert all_of(aicpu, not_dtype("float32"))(op) == refuse("Conv with dtype float32 unsupported")
    assert any_of(aicore, aicpu)(op).ok
    assert any_of(aicore, not_dtype("float32"))(op).reason.startswith("AICORE: Conv with dilations=[300, 1]")
    assert labelled("MYNPU", dtype_in(["float16"]))(op) == refuse("MYNPU: Conv with dtype float32 unsupported: "
                                                                 "takes float16")
    assert static_shapes()(op).ok
    assert bool(ACCEPT) and not bool(refuse("x"))
