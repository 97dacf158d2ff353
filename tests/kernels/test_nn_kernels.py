"""NN kernels (conv, pool, norm, activation, image) against the ONNX node conformance cases and numpy oracles."""
from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import helper

from xgraph.errors import KernelError
from testing.kernels import (
    check_node_case, conformance_params, intra_op_blocks, one_node_cases, run_node, single_node_cases)

CONV_OPS = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "DeformConv"}
POOL_OPS = {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool", "MaxUnpool",
            "MaxRoiPool", "RoiAlign"}
NORM_OPS = {"BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LRN",
            "LpNormalization", "MeanVarianceNormalization", "RMSNormalization"}
ACTIVATION_OPS = {"Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish",
                  "Softplus", "Softsign", "Tanh", "Gelu", "Mish", "ThresholdedRelu", "Swish", "Softmax", "LogSoftmax",
                  "Hardmax", "Clip", "Shrink", "Dropout"}
IMAGE_OPS = {"Resize", "Upsample", "DepthToSpace", "SpaceToDepth", "GridSample", "Col2Im", "AffineGrid",
             "CenterCropPad"}
OPS = CONV_OPS | POOL_OPS | NORM_OPS | ACTIVATION_OPS | IMAGE_OPS
#: Ops the conformance suite has no single-node case for; they are covered by the oracle tests below.
WITHOUT_CASES = {"GlobalLpPool", "MaxRoiPool"}

#: onnx.backend.test.case.node modules that generate the cases for OPS. Importing only these (instead of
#: collect_testcases(), which generates every op's cases) keeps collection to a few seconds.
CASE_MODULES = (
    "affinegrid", "averagepool", "batch_normalization", "celu", "center_crop_pad", "clip", "col2im", "conv",
    "convinteger", "convtranspose", "deformconv", "depthtospace", "dropout", "elu", "gelu", "globalaveragepool",
    "globalmaxpool", "gridsample", "groupnormalization", "hardmax", "hardsigmoid", "hardswish",
    "instance_normalization", "layernormalization", "leakyrelu", "logsoftmax", "lpnormalization", "lppool", "lrn",
    "maxpool", "maxunpool", "meanvariancenormalization", "mish", "prelu", "qlinearconv", "relu", "resize",
    "rmsnormalization", "roialign", "selu", "shrink", "sigmoid", "softmax", "softplus", "softsign", "spacetodepth",
    "swish", "tanh", "thresholdedrelu", "upsample",
)

#: Conformance cases that cannot pass, with the reason.
XFAIL: dict[str, str] = {}


CASES = single_node_cases(one_node_cases(CASE_MODULES), OPS)


@pytest.mark.parametrize("case", conformance_params(CASES, XFAIL))
def test_conformance(case):
    check_node_case(case)


def test_every_op_has_conformance_cases():
    covered = {c.model.graph.node[0].op_type for c in CASES}
    assert covered == OPS - WITHOUT_CASES


# --------------------------------------------------------------------------- helpers for oracle tests


def run(op_type: str, inputs, opset: int = 22, n_outputs: int = 1, **attrs) -> list[np.ndarray]:
    """Run one node through the registry, with absent optional inputs given as None."""
    node = helper.make_node(op_type, [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)],
                            [f"out{i}" for i in range(n_outputs)], **attrs)
    return run_node(node, list(inputs), opset)


def same_pads(spatial, kernel, strides, dilations, upper: bool) -> list[int]:
    """Explicit pads for auto_pad SAME_*: output = ceil(in / stride), the odd pad at the end (UPPER) or start."""
    begin, end = [], []
    for n, k, s, d in zip(spatial, kernel, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begin.append(small if upper else big)
        end.append(big if upper else small)
    return begin + end


def naive_conv(x, w, b, strides, dilations, pads, group):
    """Direct convolution: for every output element, the dot product of its (strided, dilated) window."""
    rank = x.ndim - 2
    n_img, c = x.shape[:2]
    m = w.shape[0]
    ks = w.shape[2:]
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0)] + [(pads[i], pads[i + rank]) for i in range(rank)])
    out = [(xp.shape[2 + i] - dilations[i] * (ks[i] - 1) - 1) // strides[i] + 1 for i in range(rank)]
    y = np.zeros((n_img, m) + tuple(out))
    cg, mg = c // group, m // group
    for n, oc in itertools.product(range(n_img), range(m)):
        g = oc // mg
        for o in itertools.product(*(range(v) for v in out)):
            window = xp[(n, slice(g * cg, (g + 1) * cg)) + tuple(
                slice(o[i] * strides[i], o[i] * strides[i] + dilations[i] * (ks[i] - 1) + 1, dilations[i])
                for i in range(rank))]
            y[(n, oc) + o] = np.sum(window * w[oc]) + (0.0 if b is None else b[oc])
    return y


def naive_conv_transpose(x, w, b, strides, dilations, pads, output_padding, group):
    """Direct transposed convolution: every input element scatters weight * value into the output."""
    rank = x.ndim - 2
    n_img, c = x.shape[:2]
    ks = w.shape[2:]
    mg = w.shape[1]
    cg = c // group
    full = [strides[i] * (x.shape[2 + i] - 1) + output_padding[i] + (ks[i] - 1) * dilations[i] + 1
            for i in range(rank)]
    y = np.zeros((n_img, mg * group) + tuple(full))
    for n, ic in itertools.product(range(n_img), range(c)):
        g = ic // cg
        for i_pos in itertools.product(*(range(v) for v in x.shape[2:])):
            for k in itertools.product(*(range(v) for v in ks)):
                o = tuple(i_pos[d] * strides[d] + k[d] * dilations[d] for d in range(rank))
                y[(n, slice(g * mg, (g + 1) * mg)) + o] += x[(n, ic) + i_pos] * w[(ic, slice(None)) + k]
    y = y[(slice(None), slice(None)) + tuple(slice(pads[i], full[i] - pads[i + rank]) for i in range(rank))]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * rank)
    return y


def naive_pool(x, kind, ks, strides, dilations, pads, ceil_mode=0, count_include_pad=0, p=2, storage_order=0):
    """Direct pooling over the taps that land on the input; returns (values, flat argmax indices)."""
    rank = len(ks)
    spatial = x.shape[2:]
    out = []
    for i in range(rank):
        span = spatial[i] + pads[i] + pads[i + rank] - dilations[i] * (ks[i] - 1) - 1
        o = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (o - 1) * strides[i] >= spatial[i] + pads[i]:
            o -= 1
        out.append(o)
    y = np.zeros(x.shape[:2] + tuple(out))
    idx = np.zeros(x.shape[:2] + tuple(out), dtype=np.int64)
    for n, c in itertools.product(*(range(v) for v in x.shape[:2])):
        for o in itertools.product(*(range(v) for v in out)):
            values, flats, padded = [], [], 0
            for k in itertools.product(*(range(v) for v in ks)):
                pos = [o[i] * strides[i] + k[i] * dilations[i] - pads[i] for i in range(rank)]
                if all(-pads[i] <= pos[i] < spatial[i] + pads[i + rank] for i in range(rank)):
                    padded += 1
                if all(0 <= pos[i] < spatial[i] for i in range(rank)):
                    values.append(float(x[(n, c) + tuple(pos)]))
                    order = pos[::-1] if storage_order else pos
                    dims = spatial[::-1] if storage_order else spatial
                    flats.append(((n * x.shape[1] + c) * int(np.prod(spatial))) + int(np.ravel_multi_index(order, dims)))
            if not values:
                return None, None  # a window wholly in padding: no defined result
            if kind == "max":
                y[(n, c) + o] = max(values)
                idx[(n, c) + o] = flats[int(np.argmax(values))]
            elif kind == "avg":
                y[(n, c) + o] = sum(values) / (padded if count_include_pad else len(values))
            else:
                y[(n, c) + o] = sum(abs(v) ** p for v in values) ** (1.0 / p)
    return y, idx


@st.composite
def conv_cases(draw, max_rank=2):
    rank = draw(st.integers(1, max_rank))
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cg = draw(st.integers(1, 3))
    mg = draw(st.integers(1, 3))
    n = draw(st.integers(1, 2))
    ks = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)]
    pads = [draw(st.integers(0, 2)) for _ in range(2 * rank)]
    spatial = [draw(st.integers(max(1, (k - 1) * d + 1 - p - q), 7))
               for k, d, p, q in zip(ks, dilations, pads[:rank], pads[rank:])]
    seed = draw(st.integers(0, 2 ** 16))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, cg * group, *spatial)).astype(np.float32)
    w = rng.standard_normal((mg * group, cg, *ks)).astype(np.float32)
    b = rng.standard_normal(mg * group).astype(np.float32) if draw(st.booleans()) else None
    return x, w, b, strides, dilations, pads, group


# --------------------------------------------------------------------------- Conv family oracles


@settings(max_examples=40, deadline=None)
@given(conv_cases())
def test_conv_matches_direct_convolution(case):
    x, w, b, strides, dilations, pads, group = case
    (y,) = run("Conv", [x, w, b], strides=strides, dilations=dilations, pads=pads, group=group)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, naive_conv(x, w, b, strides, dilations, pads, group), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize("spatial,kernel,strides,dilations", [
    ((7, 6), (3, 2), (2, 1), (1, 2)),
    ((5, 8), (2, 3), (3, 2), (2, 1)),
    ((9,), (4,), (2,), (1,)),
])
def test_conv_auto_pad_equals_explicit_pads(auto_pad, spatial, kernel, strides, dilations):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, *spatial)).astype(np.float32)
    w = rng.standard_normal((3, 2, *kernel)).astype(np.float32)
    (y,) = run("Conv", [x, w], auto_pad=auto_pad, strides=strides, dilations=dilations)
    pads = [0] * (2 * len(spatial)) if auto_pad == "VALID" else same_pads(spatial, kernel, strides, dilations,
                                                                         auto_pad == "SAME_UPPER")
    np.testing.assert_allclose(y, naive_conv(x, w, None, strides, dilations, pads, 1), rtol=1e-4, atol=1e-4)
    if auto_pad != "VALID":
        assert y.shape[2:] == tuple(-(-n // s) for n, s in zip(spatial, strides))


@pytest.mark.parametrize("channels,multiplier,kernel,strides,pads", [
    (4, 1, (3, 3), (1, 1), [1, 1, 1, 1]),   # depthwise
    (3, 2, (3, 3), (2, 2), [1, 0, 1, 0]),   # depthwise with a channel multiplier
    (6, 1, (1, 1), (2, 2), [0, 0, 0, 0]),   # strided 1x1, grouped
    (2, 3, (2, 2, 2), (1, 2, 1), [0, 1, 0, 1, 0, 1]),  # 3-D depthwise
])
def test_depthwise_and_grouped_conv(channels, multiplier, kernel, strides, pads):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, channels, *([6] * len(kernel)))).astype(np.float32)
    w = rng.standard_normal((channels * multiplier, 1, *kernel)).astype(np.float32)
    b = rng.standard_normal(channels * multiplier).astype(np.float32)
    (y,) = run("Conv", [x, w, b], group=channels, strides=strides, pads=pads)
    np.testing.assert_allclose(y, naive_conv(x, w, b, strides, [1] * len(kernel), pads, channels),
                               rtol=1e-4, atol=1e-4)


def test_conv_float16_keeps_dtype_and_matches_float32():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 8, 9, 9)).astype(np.float16)
    w = (rng.standard_normal((4, 8, 3, 3)) * 0.2).astype(np.float16)
    (y16,) = run("Conv", [x, w], pads=[1, 1, 1, 1], strides=[2, 2])
    (y32,) = run("Conv", [x.astype(np.float32), w.astype(np.float32)], pads=[1, 1, 1, 1], strides=[2, 2])
    assert y16.dtype == np.float16
    np.testing.assert_allclose(y16.astype(np.float32), y32, rtol=2e-2, atol=2e-2)


@settings(max_examples=25, deadline=None)
@given(conv_cases(max_rank=2), st.integers(0, 2))
def test_conv_transpose_matches_direct_scatter(case, extra):
    x, w_conv, b, strides, dilations, pads, group = case
    # ConvTranspose weights are (C, M/group, *K); reuse the drawn tensor with the roles swapped
    w = np.ascontiguousarray(w_conv.reshape(group, -1, *w_conv.shape[1:]).swapaxes(1, 2)
                             .reshape(x.shape[1], -1, *w_conv.shape[2:]))
    output_padding = [min(extra, max(s, d) - 1) for s, d in zip(strides, dilations)]  # must be < stride or dilation
    ks = w.shape[2:]
    pads = [min(p, (k - 1) * d) for p, k, d in zip(pads, list(ks) * 2, list(dilations) * 2)]
    b = None if b is None else np.resize(b, w.shape[1] * group).astype(np.float32)
    expected = naive_conv_transpose(x, w, b, strides, dilations, pads, output_padding, group)
    assume(min(expected.shape[2:]) >= 1)
    (y,) = run("ConvTranspose", [x, w, b], strides=strides, dilations=dilations, pads=pads,
               output_padding=output_padding, group=group)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_conv_transpose_output_shape_sets_the_pads():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng.standard_normal((2, 3, 3, 3)).astype(np.float32)
    full = naive_conv_transpose(x, w, None, [2, 2], [1, 1], [0, 0, 0, 0], [0, 0], 1)  # 9 x 9
    (upper,) = run("ConvTranspose", [x, w], strides=[2, 2], auto_pad="SAME_UPPER")  # 8 x 8: one pad, at the end
    np.testing.assert_allclose(upper, full[:, :, :8, :8], rtol=1e-5, atol=1e-5)
    (lower,) = run("ConvTranspose", [x, w], strides=[2, 2], auto_pad="SAME_LOWER")
    np.testing.assert_allclose(lower, full[:, :, 1:, 1:], rtol=1e-5, atol=1e-5)
    (bigger,) = run("ConvTranspose", [x, w], strides=[2, 2], output_shape=[10, 11])  # zero-extended at the end
    assert bigger.shape == (1, 3, 10, 11)
    np.testing.assert_allclose(bigger[:, :, :9, :9], full, rtol=1e-5, atol=1e-5)
    assert not bigger[:, :, 9:, :].any() and not bigger[:, :, :, 9:].any()


def test_conv_integer_and_qlinear_conv_against_float_oracle():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 256, (1, 3, 6, 6), dtype=np.uint8)
    w = rng.integers(-128, 128, (4, 3, 3, 3), dtype=np.int8)
    x_zp, w_zp = np.uint8(128), np.int8(3)
    (acc,) = run("ConvInteger", [x, w, x_zp, w_zp], opset=10, pads=[1, 1, 1, 1])
    exact = naive_conv(x.astype(np.int64) - 128, w.astype(np.int64) - 3, None, [1, 1], [1, 1], [1, 1, 1, 1], 1)
    assert acc.dtype == np.int32
    np.testing.assert_array_equal(acc, exact)
    bias = rng.integers(-500, 500, 4).astype(np.int32)
    x_scale, w_scale, y_scale, y_zp = np.float32(0.02), np.float32(0.01), np.float32(0.5), np.uint8(100)
    (q,) = run("QLinearConv", [x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias], opset=10,
               pads=[1, 1, 1, 1])
    real = (exact + bias.reshape(1, -1, 1, 1)) * (0.02 * 0.01 / 0.5)
    expected = np.clip(np.rint(real.astype(np.float64)) + 100, 0, 255).astype(np.uint8)
    assert q.dtype == np.uint8
    assert np.abs(q.astype(int) - expected.astype(int)).max() <= 1  # float32 scales may round differently


@pytest.mark.parametrize("op,inputs,attrs,message", [
    ("Conv", [np.zeros((1, 3, 5, 5), np.float32), np.zeros((2, 2, 3, 3), np.float32)], {}, "channel"),
    ("Conv", [np.zeros((1, 4, 5, 5), np.float32), np.zeros((3, 2, 3, 3), np.float32)], {"group": 2}, "group"),
    ("Conv", [np.zeros((1, 2, 5, 5), np.float32), np.zeros((2, 2, 3, 3), np.float32)], {"auto_pad": "SAME"},
     "auto_pad"),
    ("Conv", [np.zeros((1, 2, 5, 5), np.float32), np.zeros((2, 2, 3, 3), np.float32)], {"kernel_shape": [2, 2]},
     "kernel_shape"),
    ("Conv", [np.zeros((1, 2, 2, 2), np.float32), np.zeros((2, 2, 3, 3), np.float32)], {}, "smaller"),
    ("Conv", [np.zeros((1, 2, 5, 5), np.float32), np.zeros((2, 2, 3, 3), np.float32),
              np.zeros(3, np.float32)], {}, "bias"),
    ("ConvTranspose", [np.zeros((1, 3, 5, 5), np.float32), np.zeros((2, 2, 3, 3), np.float32)], {}, "channel"),
    ("MaxPool", [np.zeros((1, 2, 5, 5), np.float32)], {"kernel_shape": [2]}, "kernel_shape"),
    ("BatchNormalization", [np.zeros((1, 3, 2, 2), np.float32)] + [np.ones(4, np.float32)] * 4, {}, "channels"),
    ("Resize", [np.zeros((1, 1, 2, 2), np.float32), None, np.ones(4, np.float32), np.ones(4, np.int64)], {},
     "exactly one"),
    ("DepthToSpace", [np.zeros((1, 6, 2, 2), np.float32)], {"blocksize": 2}, "divisible"),
])
def test_bad_input_raises_kernel_error_naming_the_op(op, inputs, attrs, message):
    with pytest.raises(KernelError, match=message) as err:
        run(op, inputs, opset=19, **attrs)
    assert op in str(err.value)


# --------------------------------------------------------------------------- pooling oracles


@st.composite
def pool_cases(draw):
    rank = draw(st.integers(1, 3))
    ks = [draw(st.integers(1, 3)) for _ in range(rank)]
    strides = [draw(st.integers(1, 3)) for _ in range(rank)]
    dilations = [draw(st.integers(1, 2)) for _ in range(rank)]
    pads = [draw(st.integers(0, k - 1)) for k in ks * 2]  # a window never lies wholly in padding
    lows = [max(1, (k - 1) * d + 1 - p - q) for k, d, p, q in zip(ks, dilations, pads[:rank], pads[rank:])]
    spatial = [draw(st.integers(lo, max(lo, 7 if rank < 3 else 4))) for lo in lows]
    ceil_mode = draw(st.integers(0, 1))
    seed = draw(st.integers(0, 2 ** 16))
    x = np.random.default_rng(seed).permutation(np.prod([2, 2, *spatial])).reshape(2, 2, *spatial)
    return x.astype(np.float32), ks, strides, dilations, pads, ceil_mode


@settings(max_examples=40, deadline=None)
@given(pool_cases(), st.integers(0, 1))
def test_max_pool_values_and_indices_match_direct_loop(case, storage_order):
    x, ks, strides, dilations, pads, ceil_mode = case
    x = np.floor(x / 5)  # ties: the first maximum in row-major window order must win
    y, indices = run("MaxPool", [x], n_outputs=2, kernel_shape=ks, strides=strides, dilations=dilations, pads=pads,
                     ceil_mode=ceil_mode, storage_order=storage_order)
    expected, expected_idx = naive_pool(x, "max", ks, strides, dilations, pads, ceil_mode,
                                        storage_order=storage_order)
    assume(expected is not None)
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(indices, expected_idx)
    assert indices.dtype == np.int64


@settings(max_examples=40, deadline=None)
@given(pool_cases(), st.integers(0, 1))
def test_average_pool_matches_direct_loop(case, count_include_pad):
    x, ks, strides, dilations, pads, ceil_mode = case
    (y,) = run("AveragePool", [x], kernel_shape=ks, strides=strides, dilations=dilations, pads=pads,
               ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    expected, _ = naive_pool(x, "avg", ks, strides, dilations, pads, ceil_mode, count_include_pad)
    assume(expected is not None)
    np.testing.assert_allclose(y, expected, rtol=1e-5)


@settings(max_examples=25, deadline=None)
@given(pool_cases(), st.sampled_from([1, 2, 3]))
def test_lp_pool_matches_direct_loop(case, p):
    x, ks, strides, dilations, pads, ceil_mode = case
    x = x - x.mean()
    (y,) = run("LpPool", [x], kernel_shape=ks, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil_mode,
               p=p)
    expected, _ = naive_pool(x, "lp", ks, strides, dilations, pads, ceil_mode, p=p)
    assume(expected is not None)
    np.testing.assert_allclose(y, expected, rtol=1e-4)


def test_max_pool_integers_and_float16_keep_dtype_and_padding_never_wins():
    x = np.arange(2 * 3 * 5 * 5).reshape(2, 3, 5, 5)
    for dtype, values in ((np.uint8, x % 100), (np.int8, x % 100 - 50), (np.float16, x % 100),
                          (np.uint8, np.zeros_like(x)), (np.int8, np.full_like(x, -128))):
        xs = values.astype(dtype)
        y, idx = run("MaxPool", [xs], n_outputs=2, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2])
        expected, expected_idx = naive_pool(xs, "max", [3, 3], [2, 2], [1, 1], [1, 1, 1, 1])
        assert y.dtype == dtype
        np.testing.assert_array_equal(y.astype(np.float64), expected)
        np.testing.assert_array_equal(idx, expected_idx)


def test_global_pools():
    x = np.random.default_rng(6).standard_normal((2, 3, 4, 5)).astype(np.float32)
    (avg,) = run("GlobalAveragePool", [x])
    (mx,) = run("GlobalMaxPool", [x])
    (lp,) = run("GlobalLpPool", [x], p=3)
    (lp_legacy,) = run("GlobalLpPool", [x], opset=1, p=1.0)
    np.testing.assert_allclose(avg, x.mean(axis=(2, 3), keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(mx, x.max(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(lp, (np.abs(x) ** 3).sum(axis=(2, 3), keepdims=True) ** (1 / 3), rtol=1e-5)
    np.testing.assert_allclose(lp_legacy, np.abs(x).sum(axis=(2, 3), keepdims=True), rtol=1e-5)


def test_max_roi_pool_matches_direct_bins():
    x = np.random.default_rng(7).standard_normal((2, 3, 8, 10)).astype(np.float32)
    rois = np.array([[0, 1, 1, 6, 5], [1, 0, 0, 9, 7], [1, 2.4, 3.6, 4.4, 3.6]], dtype=np.float32)
    (y,) = run("MaxRoiPool", [x, rois], pooled_shape=[2, 3], spatial_scale=1.0)
    assert y.shape == (3, 3, 2, 3)
    for r, (b, x1, y1, x2, y2) in enumerate(rois):
        x1, y1, x2, y2 = (int(np.floor(v + 0.5)) for v in (x1, y1, x2, y2))
        h, w = y2 - y1 + 1, x2 - x1 + 1
        for i, j in itertools.product(range(2), range(3)):
            hs, he = y1 + int(np.floor(i * h / 2)), y1 + int(np.ceil((i + 1) * h / 2))
            ws, we = x1 + int(np.floor(j * w / 3)), x1 + int(np.ceil((j + 1) * w / 3))
            np.testing.assert_array_equal(y[r, :, i, j], x[int(b), :, hs:he, ws:we].max(axis=(1, 2)))


def test_max_unpool_inverts_max_pool():
    x = np.random.default_rng(8).permutation(64).reshape(1, 1, 8, 8).astype(np.float32)
    y, idx = run("MaxPool", [x], n_outputs=2, kernel_shape=[2, 2], strides=[2, 2])
    (back,) = run("MaxUnpool", [y, idx], kernel_shape=[2, 2], strides=[2, 2])
    assert back.shape == x.shape
    np.testing.assert_array_equal(back, np.where(back != 0, x, 0))
    assert (back != 0).sum() == 16 and back.max() == x.max()


# --------------------------------------------------------------------------- normalization


def test_batch_normalization_legacy_attributes_and_per_activation_statistics():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    stats = [rng.random((3, 4)).astype(np.float32) + 0.5 for _ in range(4)]  # spatial=0: one value per activation
    outs = run("BatchNormalization", [x, *stats], opset=1, n_outputs=5, consumed_inputs=[0, 0, 0, 1, 1], is_test=1,
               spatial=0, epsilon=1e-3)
    scale, bias, mean, var = stats
    np.testing.assert_allclose(outs[0], scale * (x - mean) / np.sqrt(var + 1e-3) + bias, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(outs[1], mean)
    (y9,) = run("BatchNormalization", [x, *(s[:, 0] for s in stats)], opset=9)
    col = [s[:, :1] for s in stats]
    np.testing.assert_allclose(y9, col[0] * (x - col[2]) / np.sqrt(col[3] + 1e-5) + col[1], rtol=1e-5, atol=1e-6)


def test_batch_normalization_training_mode_uses_batch_statistics():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    scale, bias = np.array([1.5, 0.5], np.float32), np.array([0.1, -0.2], np.float32)
    mean, var = np.zeros(2, np.float32), np.ones(2, np.float32)
    y, running_mean, running_var = run("BatchNormalization", [x, scale, bias, mean, var], opset=15, n_outputs=3,
                                       training_mode=1, momentum=0.8)
    m, v = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(y, scale[:, None, None] * (x - m[:, None, None]) / np.sqrt(v[:, None, None] + 1e-5)
                               + bias[:, None, None], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(running_mean, 0.2 * m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(running_var, 0.8 + 0.2 * v, rtol=1e-5)


def test_layer_normalization_float16_keeps_statistics_in_float32():
    x = np.random.default_rng(11).standard_normal((3, 8)).astype(np.float16) * 50
    y, mean, inv_std = run("LayerNormalization", [x, np.ones(8, np.float16)], opset=17, n_outputs=3)
    assert y.dtype == np.float16 and mean.dtype == np.float32 and inv_std.dtype == np.float32
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(mean[:, 0], x64.mean(axis=1), rtol=1e-5)
    np.testing.assert_allclose(y, (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5),
                               rtol=1e-2, atol=1e-2)


def test_group_normalization_18_scales_per_group_21_per_channel():
    x = np.random.default_rng(12).standard_normal((2, 4, 3)).astype(np.float32)
    groups = x.reshape(2, 2, -1)
    normed = ((groups - groups.mean(-1, keepdims=True)) / np.sqrt(groups.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    (y18,) = run("GroupNormalization", [x, np.array([2.0, 3.0], np.float32), np.array([0.5, -1.0], np.float32)],
                 opset=18, num_groups=2)
    per_channel = np.array([2, 2, 3, 3], np.float32)[:, None], np.array([0.5, 0.5, -1, -1], np.float32)[:, None]
    np.testing.assert_allclose(y18, normed * per_channel[0] + per_channel[1], rtol=1e-5, atol=1e-5)
    (y21,) = run("GroupNormalization", [x, per_channel[0].ravel(), per_channel[1].ravel()], opset=21, num_groups=2)
    np.testing.assert_allclose(y21, y18, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("size", [1, 2, 4, 5])
def test_lrn_matches_channel_window_loop(size):
    x = np.random.default_rng(13).standard_normal((2, 6, 3, 2)).astype(np.float32)
    (y,) = run("LRN", [x], opset=13, size=size, alpha=0.01, beta=0.6, bias=1.5)
    expected = np.empty_like(x)
    for c in range(6):
        lo, hi = max(0, c - (size - 1) // 2), min(6, c + size - 1 - (size - 1) // 2 + 1)
        expected[:, c] = x[:, c] / (1.5 + 0.01 / size * (x[:, lo:hi] ** 2).sum(axis=1)) ** 0.6
    np.testing.assert_allclose(y, expected, rtol=1e-5)


# --------------------------------------------------------------------------- activations


def test_softmax_family_before_opset_13_normalizes_the_flattened_tail():
    x = np.random.default_rng(14).standard_normal((2, 3, 4)).astype(np.float32)
    rows = x.reshape(2, 12)
    (s11,) = run("Softmax", [x], opset=11)  # default axis=1: rows of 3*4 values
    np.testing.assert_allclose(s11.reshape(2, 12), np.exp(rows) / np.exp(rows).sum(1, keepdims=True), rtol=1e-5)
    (s13,) = run("Softmax", [x], opset=13)  # default axis=-1
    np.testing.assert_allclose(s13, np.exp(x) / np.exp(x).sum(-1, keepdims=True), rtol=1e-5)
    (ls11,) = run("LogSoftmax", [x], opset=11, axis=1)
    np.testing.assert_allclose(np.exp(ls11), s11, rtol=1e-5)
    (h11,) = run("Hardmax", [x], opset=11)
    assert h11.reshape(2, 12).sum(1).tolist() == [1, 1] and h11.reshape(2, 12).argmax(1).tolist() == rows.argmax(1).tolist()


def test_hardmax_picks_the_first_of_tied_maxima():
    (y,) = run("Hardmax", [np.array([[1, 3, 3, 2]], np.float32)], opset=13)
    np.testing.assert_array_equal(y, [[0, 1, 0, 0]])


def test_gelu_erf_is_accurate_in_both_tails():
    import math

    x = np.linspace(-9, 9, 721)
    (y,) = run("Gelu", [x], opset=20)
    expected = np.array([0.5 * v * math.erfc(-v / math.sqrt(2)) for v in x])
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-30)


def test_clip_legacy_attributes_and_float16_defaults():
    x = np.array([-70000.0, -2, 0.5, 3, 70000], np.float32)
    (c1,) = run("Clip", [x], opset=1, min=-1.0)
    np.testing.assert_array_equal(c1, [-1, -1, 0.5, 3, 70000])
    x16 = np.array([-np.inf, -2, 0.5, 3, np.inf], np.float16)  # the float32-range defaults are +-inf in float16
    (c6,) = run("Clip", [x16], opset=6)
    assert c6.dtype == np.float16
    np.testing.assert_array_equal(c6, x16)
    (c13,) = run("Clip", [x.astype(np.int32), None, np.int32(2)], opset=13)
    np.testing.assert_array_equal(c13, [-70000, -2, 0, 2, 2])


def test_dropout_is_identity_at_inference_and_seeded_in_training():
    x = np.random.default_rng(15).standard_normal((50, 40)).astype(np.float32)
    y7, mask7 = run("Dropout", [x], opset=7, n_outputs=2, ratio=0.3)
    np.testing.assert_array_equal(y7, x)
    assert mask7.dtype == np.float32 and mask7.all()
    y, mask = run("Dropout", [x, np.float32(0.25), np.bool_(True)], opset=13, n_outputs=2, seed=7)
    y_again, _ = run("Dropout", [x, np.float32(0.25), np.bool_(True)], opset=13, n_outputs=2, seed=7)
    assert mask.dtype == bool and 0.65 < mask.mean() < 0.85
    np.testing.assert_array_equal(y, y_again)
    np.testing.assert_allclose(y, x * mask / 0.75, rtol=1e-6)


# --------------------------------------------------------------------------- image


def test_resize_10_and_upsample_truncate_nearest_coordinates():
    x = np.arange(12, dtype=np.float32).reshape(1, 1, 3, 4)
    (up,) = run("Upsample", [x], opset=7, scales=[1.0, 1.0, 2.0, 1.5])
    np.testing.assert_array_equal(up[0, 0], x[0, 0][np.floor(np.arange(6) / 2).astype(int)][:, [0, 0, 1, 2, 2, 3]])
    (down,) = run("Resize", [x, np.array([1, 1, 0.5, 0.5], np.float32)], opset=10)
    np.testing.assert_array_equal(down[0, 0], x[0, 0][[0], :][:, [0, 2]])
    (lin,) = run("Upsample", [x, np.array([1, 1, 1, 2], np.float32)], opset=9, mode="linear")
    np.testing.assert_allclose(lin[0, 0, 0], [0, 0.5, 1, 1.5, 2, 2.5, 3, 3])


def test_resize_uint8_linear_rounds_and_sizes_with_empty_scales():
    x = np.array([[[[0, 255], [255, 0]]]], dtype=np.uint8)
    (y,) = run("Resize", [x, np.zeros(0, np.float32), np.zeros(0, np.float32), np.array([1, 1, 3, 3], np.int64)],
               opset=11, mode="linear", coordinate_transformation_mode="align_corners")
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y[0, 0], [[0, 128, 255], [128, 128, 128], [255, 128, 0]])


def test_depth_space_round_trip_in_both_orders():
    x = np.arange(2 * 8 * 2 * 3, dtype=np.float32).reshape(2, 8, 2, 3)
    for mode in ("DCR", "CRD"):
        (space,) = run("DepthToSpace", [x], opset=13, blocksize=2, mode=mode)
        (depth,) = run("SpaceToDepth", [space], opset=28, blocksize=2, mode=mode)
        assert space.shape == (2, 2, 4, 6)
        np.testing.assert_array_equal(depth, x)


@pytest.mark.parametrize("align_corners", [0, 1])
def test_identity_affine_grid_samples_the_input_back(align_corners):
    x = np.random.default_rng(16).standard_normal((2, 3, 5, 4)).astype(np.float32)
    theta = np.tile(np.array([[1, 0, 0], [0, 1, 0]], np.float32), (2, 1, 1))
    (grid,) = run("AffineGrid", [theta, np.array(x.shape, np.int64)], opset=20, align_corners=align_corners)
    assert grid.shape == (2, 5, 4, 2)
    for opset, mode in ((16, "bilinear"), (20, "linear"), (20, "cubic"), (20, "nearest")):
        (y,) = run("GridSample", [x, grid], opset=opset, mode=mode, align_corners=align_corners)
        np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-5)


def test_col2im_sums_overlapping_blocks():
    x = np.random.default_rng(17).standard_normal((1, 2, 5, 6)).astype(np.float32)
    pads, strides, dil = [1, 0, 1, 2], [2, 1], [1, 2]
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (0, 2)])
    oh, ow = (xp.shape[2] - 3) // 2 + 1, (xp.shape[3] - 2 * 2 - 1) // 1 + 1
    cols = np.stack([xp[:, :, i * 2:i * 2 + 3, j:j + 5:2].reshape(1, -1)
                     for i in range(oh) for j in range(ow)], axis=-1)  # (1, C*3*3, L) im2col
    (y,) = run("Col2Im", [cols, np.array([5, 6], np.int64), np.array([3, 3], np.int64)], opset=18,
               pads=pads, strides=strides, dilations=dil)
    coverage = np.zeros_like(xp[0, 0])
    for i, j in itertools.product(range(oh), range(ow)):
        coverage[i * 2:i * 2 + 3, j:j + 5:2] += 1
    np.testing.assert_allclose(y, x * coverage[1:-1, :6], rtol=1e-5)


# --------------------------------------------------------------------------- golden comparisons with onnxruntime


GOLDEN = [  # (op, inputs: a shape for random normal data or a fixed array, attributes, opset)
    ("Conv", [(1, 16, 15, 15), (32, 16, 3, 3), (32,)], dict(pads=[1, 1, 1, 1], strides=[2, 2]), 19),
    ("Conv", [(2, 12, 9, 9), (12, 3, 3, 3)], dict(group=4, dilations=[2, 2], pads=[2, 1, 2, 3]), 19),
    ("Conv", [(1, 8, 10, 10), (16, 1, 3, 3), (16,)], dict(group=8, pads=[1, 1, 1, 1]), 19),
    ("Conv", [(1, 4, 6, 7, 5), (6, 4, 3, 2, 3)], dict(strides=[1, 2, 1], pads=[1, 0, 1, 1, 1, 0]), 19),
    ("ConvTranspose", [(1, 6, 5, 5), (6, 2, 3, 3), (6,)], dict(group=3, strides=[2, 2], output_padding=[1, 1]), 19),
    ("ConvTranspose", [(2, 4, 4, 6), (4, 3, 2, 3)], dict(strides=[3, 2], dilations=[2, 1], pads=[1, 0, 0, 1]), 19),
    # output_shape wins over explicit pads
    ("ConvTranspose", [(1, 2, 4, 3), (2, 3, 3, 3)], dict(strides=[2, 3], output_shape=[7, 6], pads=[1, 0, 0, 2]),
     19),
    ("MaxPool", [(1, 3, 11, 11)], dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1), 19),
    ("AveragePool", [(1, 3, 9, 9)], dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1), 19),
    ("Resize", [(1, 2, 5, 7), None, np.array([1, 1, 1.6, 0.7], np.float32)], dict(mode="cubic"), 19),
    # float32 coordinates: 1.5 / 0.6 - 0.5 is exactly 2, so floor picks pixel 2
    ("Resize", [(1, 2, 5, 7), None, np.array([1, 1, 1.7, 0.6], np.float32)],
     dict(mode="nearest", nearest_mode="floor"), 19),
    ("GridSample", [(2, 3, 5, 6), np.linspace(-1.6, 1.6, 2 * 4 * 7 * 2, dtype=np.float32).reshape(2, 4, 7, 2)],
     dict(mode="cubic", padding_mode="border"), 20),
    # an adaptive sampling grid whose size depends on float32 rounding of the scaled box
    ("RoiAlign", [(2, 3, 12, 10), np.array([[-2, -1, 3, 4], [1.5, 2.2, 7.3, 11.9]], np.float32),
                  np.array([1, 0], np.int64)],
     dict(coordinate_transformation_mode="output_half_pixel", output_height=3, output_width=4, spatial_scale=0.8),
     16),
    ("MaxRoiPool", [(2, 3, 8, 10), np.array([[0, 1, 1, 6, 5], [1, -3, -2, 20, 14]], np.float32)],
     dict(pooled_shape=[2, 3], spatial_scale=0.9), 16),
    ("LRN", [(1, 7, 4, 4)], dict(size=3), 19),
]


@pytest.mark.parametrize("op,specs,attrs,opset", GOLDEN, ids=[f"{g[0]}-{i}" for i, g in enumerate(GOLDEN)])
def test_matches_onnxruntime(op, specs, attrs, opset):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(18)
    inputs = [s if s is None or isinstance(s, np.ndarray) else rng.standard_normal(s).astype(np.float32)
              for s in specs]
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    node = helper.make_node(op, names, ["out0"], **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                      for n, v in zip(names, inputs) if v is not None],
        [helper.make_tensor_value_info("out0", onnx.TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    (expected,) = session.run(None, {n: v for n, v in zip(names, inputs) if v is not None})
    (actual,) = run_node(node, inputs, opset)
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- registration


def test_kernels_accept_every_attribute_and_input_of_the_opsets_they_claim():
    import inspect

    from xgraph.kernels import load_builtin_kernels

    registry = load_builtin_kernels()
    schemas: dict[str, list] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "" and schema.name in OPS:
            schemas.setdefault(schema.name, []).append(schema)
    problems = []
    for op in sorted(OPS):
        versions = sorted(k.since for k in registry if k.op_type == op and k.domain == "")
        assert versions, f"no kernel registered for {op}"
        for schema in schemas[op]:
            k = registry.find(op, "", schema.since_version)
            if k is None:
                problems.append(f"{op}-{schema.since_version}: no kernel")
                continue
            params = inspect.signature(k.fn).parameters.values()
            keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
            positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            missing = set(schema.attributes) - keywords
            if missing:
                problems.append(f"{op}-{schema.since_version} ({k.fn.__name__}): attributes {sorted(missing)}")
            if len(positional) < len(schema.inputs):
                problems.append(f"{op}-{schema.since_version} ({k.fn.__name__}): {len(schema.inputs)} inputs")
    assert not problems, problems


@pytest.mark.parametrize("activation,params,oracle", [
    ("Relu", None, lambda v: np.maximum(v, 0)),
    ("LeakyRelu", [0.2], lambda v: np.where(v > 0, v, 0.2 * v)),
    ("Sigmoid", None, lambda v: 1 / (1 + np.exp(-v))),
    ("Tanh", None, np.tanh),
    ("Clip", [-0.5, 0.7], lambda v: np.clip(v, -0.5, 0.7)),
    ("HardSigmoid", [0.3, 0.4], lambda v: np.clip(0.3 * v + 0.4, 0, 1)),
])
def test_fused_conv_is_activation_of_conv_plus_residual(activation, params, oracle):
    rng = np.random.default_rng(19)
    x = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4, 3, 3)).astype(np.float32) * 0.3
    b = rng.standard_normal(6).astype(np.float32)
    z = rng.standard_normal((2, 6, 6, 6)).astype(np.float32)
    attrs = {"activation": activation, "pads": [1, 1, 1, 1]}
    if params:
        attrs["activation_params"] = params
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft", **attrs)
    (y,) = run_node(node, [x, w, b, z], 1)
    expected = oracle(naive_conv(x, w, b, [1, 1], [1, 1], [1, 1, 1, 1], 1) + z)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_batch_norm_folded_into_fused_conv_equals_conv_batch_norm_relu():
    from xgraph.kernels.op_nn_norm import batch_norm_scale_shift

    rng = np.random.default_rng(20)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    scale, bias, mean = (rng.standard_normal(5).astype(np.float32) for _ in range(3))
    var = rng.random(5).astype(np.float32) + 0.5
    (conv_out,) = run("Conv", [x, w], pads=[1, 1, 1, 1])
    (normed,) = run("BatchNormalization", [conv_out, scale, bias, mean, var], opset=15)
    (expected,) = run("Relu", [normed], opset=14)
    a, b = batch_norm_scale_shift(scale, bias, mean, var)
    node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft", activation="Relu",
                            pads=[1, 1, 1, 1])
    (fused,) = run_node(node, [x, (w * a[:, None, None, None]).astype(np.float32), b.astype(np.float32)], 1)
    np.testing.assert_allclose(fused, expected, rtol=1e-4, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(conv_cases(), st.sampled_from([2, 3]))
def test_conv_cut_into_blocks_matches_direct_convolution(case, threads):
    x, w, b, strides, dilations, pads, group = case
    with intra_op_blocks(threads):
        (y,) = run("Conv", [x, w, b], strides=strides, dilations=dilations, pads=pads, group=group)
    np.testing.assert_allclose(y, naive_conv(x, w, b, strides, dilations, pads, group), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape,w_shape,pads,strides", [
    ((2, 8, 9, 7), (5, 8, 3, 3), [1, 1, 1, 1], [1, 1]),   # more positions than channels: blocks of rows
    ((1, 16, 3, 3), (32, 16, 3, 3), [1, 1, 1, 1], [1, 1]),  # more channels than positions: blocks of channels
    ((1, 6, 8, 8), (12, 6, 1, 1), [0, 0, 0, 0], [2, 2]),  # 1x1 with a stride
    ((2, 6, 5, 5), (40, 6, 1, 1), [0, 0, 0, 0], [1, 1]),
])
def test_fused_conv_epilogue_per_block_matches_whole_output(x_shape, w_shape, pads, strides):
    rng = np.random.default_rng(21)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    expected_conv = naive_conv(x, w, b, strides, [1, 1], pads, 1)
    z = rng.standard_normal(expected_conv.shape).astype(np.float32)
    node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft", activation="Relu",
                            pads=pads, strides=strides)
    for threads in (1, 2, 3):
        with intra_op_blocks(threads):
            (y,) = run_node(node, [x, w, b, z], 1)
        np.testing.assert_allclose(y, np.maximum(expected_conv + z, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,per_channel", [((2, 5, 7, 3), True), ((1, 3, 11), True), ((4, 6), True),
                                               ((2, 3, 5, 5), False), ((0, 3, 4), True)])
def test_channel_affine_in_blocks_matches_broadcast(monkeypatch, shape, per_channel):
    from xgraph.kernels import op_nn_norm

    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape).astype(np.float32)
    size = shape[1] if per_channel else 1
    scale, shift = rng.standard_normal(size).astype(np.float32), rng.standard_normal(size).astype(np.float32)
    view = (1, size) + (1,) * (len(shape) - 2) if per_channel else ()
    expected = np.maximum(x * scale.reshape(view) + shift.reshape(view), 0)
    monkeypatch.setattr(op_nn_norm, "AFFINE_BLOCK_BYTES", 24)  # several blocks per thread
    relu = lambda y: np.maximum(y, 0, out=y)  # noqa: E731
    for threads in (1, 2, 3):
        with intra_op_blocks(threads):
            np.testing.assert_allclose(op_nn_norm.channel_affine(x, scale, shift, relu), expected, rtol=1e-6)
            into = np.full(shape, np.nan, np.float32)
            assert op_nn_norm.channel_affine(x, scale, shift, relu, into=into) is into
            np.testing.assert_allclose(into, expected, rtol=1e-6)
    if len(shape) > 2 and shape[0]:  # a strided input view
        wide = np.repeat(x, 2, axis=-1)[..., ::2]
        np.testing.assert_allclose(op_nn_norm.channel_affine(wide, scale, shift, relu), expected, rtol=1e-6)


def test_a_failing_block_raises_after_every_block_is_done():
    from xgraph.kernels import parallel

    done = []

    def ok(i):
        return lambda: done.append(i)

    def bad():
        raise ValueError("block 1 failed")
    with intra_op_blocks(3), pytest.raises(ValueError, match="block 1 failed"):
        parallel.run_parallel([ok(0), bad, ok(2)])
    assert sorted(done) == [0, 2]
    assert parallel.chunks(10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert parallel.chunks(2, 4) == [(0, 1), (1, 2)]


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_a_forked_child_gets_its_own_intra_op_pool():
    import multiprocessing

    from xgraph.kernels import parallel

    x = np.random.default_rng(3).standard_normal((1, 4, 9, 9)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((3, 4, 3, 3)).astype(np.float32)
    with intra_op_blocks(2):
        (expected,) = run("Conv", [x, w], pads=[1, 1, 1, 1])  # the parent's pool now has a thread
        assert parallel._pool is not None
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(1) as pool:  # would hang if the child reused the parent's (threadless) pool
            result = pool.apply_async(_conv_in_child, (x, w))
            got = result.get(timeout=60)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def _conv_in_child(x, w):
    from xgraph.kernels import parallel
    parallel.MIN_PARALLEL_MACS = 0
    (y,) = run("Conv", [x, w], pads=[1, 1, 1, 1])
    return y


@settings(max_examples=30, deadline=None)
@given(pool_cases(), st.sampled_from([2, 3]), st.sampled_from(["max", "avg"]))
def test_pools_cut_into_channel_blocks_match_direct_loop(case, threads, kind):
    x, ks, strides, dilations, pads, ceil_mode = case
    op = "MaxPool" if kind == "max" else "AveragePool"
    with intra_op_blocks(threads):
        (y,) = run(op, [x], kernel_shape=ks, strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil_mode)
    expected, _ = naive_pool(x, kind, ks, strides, dilations, pads, ceil_mode)
    assume(expected is not None)
    np.testing.assert_allclose(y, expected, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 2), st.tuples(st.integers(1, 4), st.integers(1, 4)),
       st.tuples(st.integers(1, 3), st.integers(1, 3)), st.lists(st.integers(0, 2), min_size=4, max_size=4),
       st.integers(4, 9), st.sampled_from([1, 2, 3]), st.integers(0, 2 ** 16))
def test_depthwise_rows_match_direct_convolution(channels, n, kernel, dilations, pads, size, threads, seed):
    """Stride-1 2-D depthwise convolutions (the flattened-rows path), with dilations, pads and blocks."""
    assume(all(size + pads[i] + pads[i + 2] >= (k - 1) * d + 1 for i, (k, d) in enumerate(zip(kernel, dilations))))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, channels, size, size + 1)).astype(np.float32)
    w = rng.standard_normal((channels, 1, *kernel)).astype(np.float32)
    with intra_op_blocks(threads):
        (y,) = run("Conv", [x, w], group=channels, dilations=list(dilations), pads=pads)
    np.testing.assert_allclose(y, naive_conv(x, w, None, [1, 1], list(dilations), pads, channels),
                               rtol=1e-4, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(2, 5), st.integers(1, 2), st.tuples(st.integers(2, 3), st.integers(1, 3)),
       st.tuples(st.integers(1, 2), st.integers(1, 2)), st.lists(st.integers(0, 2), min_size=4, max_size=4),
       st.sampled_from([1, 2, 3]), st.booleans(), st.integers(0, 2 ** 16))
def test_few_output_channels_shifted_products_match_direct_convolution(m, extra, n, kernel, dilations, pads,
                                                                       threads, fused, seed):
    """Stride-1 2-D convolutions with at most half as many output as input channels (no im2col)."""
    c = 2 * m + extra
    size = 7
    assume(all(size + pads[i] + pads[i + 2] >= (k - 1) * d + 1 for i, (k, d) in enumerate(zip(kernel, dilations))))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, size, size + 2)).astype(np.float32)
    w = rng.standard_normal((m, c, *kernel)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    expected = naive_conv(x, w, b, [1, 1], list(dilations), pads, 1)
    from xgraph.kernels import conv_lowering

    with intra_op_blocks(threads), pytest.MonkeyPatch.context() as patch:
        patch.setattr(conv_lowering, "SHIFTED_MIN_POSITIONS", 0)  # small images take the path too
        if fused:
            z = rng.standard_normal(expected.shape).astype(np.float32)
            node = helper.make_node("FusedConv", ["x", "w", "b", "z"], ["y"], domain="com.microsoft",
                                    activation="Relu", pads=pads, dilations=list(dilations))
            (y,) = run_node(node, [x, w, b, z], 1)
            expected = np.maximum(expected + z, 0)
        else:
            (y,) = run("Conv", [x, w, b], dilations=list(dilations), pads=pads)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
