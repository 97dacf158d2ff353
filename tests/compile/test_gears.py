"""Gears (ATC's dynamic_batch_size / dynamic_image_size / dynamic_dims): options, compile, file, runner."""
from __future__ import annotations

import json

import pytest

from xgraph.compiler.options import parse_options
from xgraph.errors import OptionError

DEVICES = ["AICORE", "AICPU", "DVPP", "CPU"]


# ----------------------------------------------------------------------------- options

@pytest.mark.parametrize("options, shapes", [
    ({"input_shape": "x:-1,3,8,8", "dynamic_batch_size": "1,2,4"},
     [{"x": (1, 3, 8, 8)}, {"x": (2, 3, 8, 8)}, {"x": (4, 3, 8, 8)}]),
    ({"input_shape": "a:-1,4;b:-1,2", "dynamic_batch_size": [2, 8]},
     [{"a": (2, 4), "b": (2, 2)}, {"a": (8, 4), "b": (8, 2)}]),
    ({"input_shape": "ids:1,-1;mask:1,-1", "dynamic_dims": "8,8;16,16"},
     [{"ids": (1, 8), "mask": (1, 8)}, {"ids": (1, 16), "mask": (1, 16)}]),
    ({"input_shape": "x:-1,-1", "dynamic_dims": "1,16;2,32"}, [{"x": (1, 16)}, {"x": (2, 32)}]),
    ({"input_shape": "x:1,3,-1,-1", "dynamic_image_size": "8,8;16,12"}, [{"x": (1, 3, 8, 8)}, {"x": (1, 3, 16, 12)}]),
])
def test_gear_shapes_fill_the_minus_ones_in_order(options, shapes):
    o = parse_options(options, DEVICES)
    assert o.gear_shapes() == shapes
    assert parse_options(o.to_json(), DEVICES) == o  # the ATC form round-trips


def test_no_gear_option_means_no_gears_and_minus_one_keeps_a_dim():
    o = parse_options({"input_shape": "x:1,-1"}, DEVICES)
    assert (o.gear_option, o.gears, o.gear_shapes()) == ("", (), [])
    assert "dynamic_dims" not in json.loads(o.to_json())


@pytest.mark.parametrize("options, message", [
    ({"input_shape": "x:1,3,8,8", "dynamic_batch_size": "1,2"}, r"option 'dynamic_batch_size' needs -1 in option "
                                                                 r"'input_shape'.*x:1,3,8,8"),
    ({"dynamic_dims": "8;16"}, r"option 'dynamic_dims' needs -1 in option 'input_shape'.*input_shape is none"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;8;16"}, r"'dynamic_dims'.*each gear once \(repeated: 8\)"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8"}, r"'dynamic_dims'.*1 gear\(s\) given; give 2 to 100"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": ",".join(str(i) for i in range(1, 102))},
     r"'dynamic_batch_size'.*101 gear\(s\) given; give 2 to 100"),
    ({"input_shape": "x:1,-1;y:-1", "dynamic_dims": "8,1;3"}, r"'dynamic_dims'.*gear 2 has 1 value\(s\), each gear "
                                                              r"needs 2 value\(s\), one per -1 of input_shape \(x\[1\], y\[0\]\)"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "0;3"}, r"'dynamic_dims'.*0 is not a positive size"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "-2;3"}, r"'dynamic_dims'.*-2 is not a positive size"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "a;3"}, r"'dynamic_dims'.*'a' is not an integer"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "4;;3"}, r"'dynamic_dims'.*a value is empty"),
    ({"input_shape": "x:1,-1", "dynamic_dims": ""}, r"'dynamic_dims'.*it is empty"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": "1,4096"}, r"batch size 4096 is over 2048"),
    ({"input_shape": "x:-1,-1", "dynamic_batch_size": "1,2"}, r"'dynamic_batch_size' needs -1 only as the first dim.*"
                                                              r"dim 1 of 'x'; use 'dynamic_dims'"),
    ({"input_shape": "x:1,3,-1,8", "dynamic_image_size": "8,8;16,16"}, r"'dynamic_image_size' needs exactly two -1.*"
                                                                       r"gives 'x' 1"),
    ({"input_shape": "x:1,3,-1,-1", "dynamic_image_size": "8;16"}, r"gear 1 has 1 value\(s\), each gear needs two"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": "1,2", "dynamic_dims": "1;2"},
     r"options 'dynamic_batch_size', 'dynamic_dims' exclude each other"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": {"a": 1}}, r"'dynamic_batch_size'.*not a gear list"),
])
def test_bad_gear_options_name_the_option_and_the_fix(options, message):
    with pytest.raises(OptionError, match=message):
        parse_options(options, DEVICES)


def test_gear_keys_are_valid_option_keys():
    with pytest.raises(OptionError) as e:
        parse_options({"dynamic_dim": "1;2"}, DEVICES)
    assert "did you mean 'dynamic_dims'" in str(e.value)
