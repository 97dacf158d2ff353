"""Compile options: every key's accepted forms, and errors that name the key and the expected form."""
from __future__ import annotations

import json

import pytest

from xgraph.errors import OptionError
from xgraph.compiler.options import OPTION_KEYS, CompileOptions, parse_input_shape, parse_options

DEVICES = ["AICORE", "AICPU", "DVPP", "CPU"]


def test_empty_and_none_mean_defaults():
    for empty in (None, {}, "", "  ", "{}"):
        assert parse_options(empty, DEVICES) == CompileOptions()
    d = CompileOptions()
    assert (d.fallback, d.min_subgraph_ops, d.precision_mode, d.devices) == ("cpu", 1, "must_keep_origin_dtype", None)


def test_json_string_and_dict_agree():
    text = ('{"plugins": "a, b", "devices": "aicore,CPU", "fallback": "error", "output_ops": "fc,prob", '
            '"min_subgraph_ops": 3, "precision_mode": "force_fp16", "input_shape": "ids:1,16;mask:1,16"}')
    o = parse_options(text, DEVICES)
    assert o == parse_options(json.loads(text), DEVICES)
    assert o.plugins == ("a", "b")
    assert o.devices == ("AICORE", "CPU")  # case-insensitive, canonical names
    assert o.output_ops == ("fc", "prob")
    assert o.input_shape == {"ids": (1, 16), "mask": (1, 16)}
    assert (o.fallback, o.min_subgraph_ops, o.precision_mode) == ("error", 3, "force_fp16")


def test_to_json_round_trips():
    o = parse_options({"plugins": ["p"], "devices": ["aicpu"], "input_shape": {"x": [1, -1]},
                       "min_subgraph_ops": "4"}, DEVICES)
    assert parse_options(o.to_json(), DEVICES) == o
    assert json.loads(o.to_json())["input_shape"] == "x:1,-1"


def test_unknown_key_names_the_valid_ones_and_suggests():
    with pytest.raises(OptionError) as e:
        parse_options({"plugin": "a"}, DEVICES)
    msg = str(e.value)
    assert "'plugin'" in msg and "did you mean 'plugins'" in msg
    assert all(k in msg for k in OPTION_KEYS)


def test_bad_json_is_one_clear_error():
    with pytest.raises(OptionError, match=r"not valid JSON .*line 1 column 2.*JSON object such as"):
        parse_options("{plugins: a}", DEVICES)
    with pytest.raises(OptionError, match="must be a JSON object"):
        parse_options("[1, 2]", DEVICES)


@pytest.mark.parametrize("key, value, expected", [
    ("fallback", "maybe", '"cpu" or "error"'),
    ("precision_mode", "fp16", "one of must_keep_origin_dtype, allow_fp32_to_fp16, force_fp16"),
    ("min_subgraph_ops", -1, "an integer >= 0"),
    ("min_subgraph_ops", True, "an integer >= 0"),
    ("min_subgraph_ops", "many", "an integer >= 0"),
    ("plugins", 3, "comma-separated plugin names"),
    ("plugins", "a,,b", "an empty name is not allowed"),
    ("plugins", "a,a", "each name once (repeated: a)"),
    ("output_ops", {"x": 1}, "comma-separated op names"),
    ("devices", "", "at least one device"),
    ("input_shape", "x=1,2", "name:d0,d1"),
    ("input_shape", "x:1,two", "dim 'two' of 'x' is not an integer"),
    ("input_shape", "x:1,-2", "dim '-2' of 'x'"),
    ("input_shape", 5, "name:d0,d1"),
])
def test_bad_values_name_key_and_expected_form(key, value, expected):
    with pytest.raises(OptionError) as e:
        parse_options({key: value}, DEVICES)
    assert f"option {key!r}" in str(e.value) and expected in str(e.value)


def test_unknown_device_lists_known_devices():
    with pytest.raises(OptionError, match=r"unknown device\(s\) npu; known devices: AICORE, AICPU, DVPP, CPU"):
        parse_options({"devices": "aicore,npu"}, DEVICES)


def test_devices_are_checked_against_the_registered_table_by_default():
    assert parse_options({"devices": "dvpp"}).devices == ("DVPP",)


def test_input_shape_forms():
    assert parse_input_shape("a:1,3;b:2") == {"a": (1, 3), "b": (2,)}
    assert parse_input_shape("in:0:1,3,224,224") == {"in:0": (1, 3, 224, 224)}  # TF-style names keep their colon
    assert parse_input_shape("scalar:") == {"scalar": ()}
    assert parse_input_shape({"a": [1, -1]}) == {"a": (1, -1)}
    with pytest.raises(OptionError, match="each input named once"):
        parse_input_shape("a:1;a:2")


def test_compile_options_pass_through():
    o = CompileOptions(fallback="error")
    assert parse_options(o) is o
