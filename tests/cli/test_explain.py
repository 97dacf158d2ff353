"""`xgraph explain` and `xgraph.explain`: who took an op, every device's verdict, template near misses."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import xgraph
from xgraph.errors import XGraphError

INCEPTION_V2 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_inception_v2.onnx"
OPTIONS = {"plugins": "cbr"}


@pytest.fixture(scope="module")
def inception_entries(cbr_dir):
    return xgraph.explain(INCEPTION_V2, ["n0", "n1", "n3", "n6", "n7"], OPTIONS, [str(cbr_dir)]), cbr_dir


def test_near_miss_names_where_the_template_broke_on_inception_v2(inception_entries):
    entries, _ = inception_entries
    by_name = {e["name"]: e for e in entries}
    expected = ("conv matched n0 (Conv), bn matched n1 (BatchNormalization), act expected one of {Clip, Relu}, "
                "found n3 (Mul)")
    for name in ("n0", "n1", "n3"):  # the conv, the bn and the op found where the Relu should be
        [plugin] = by_name[name]["plugins"]
        assert plugin["plugin"] == "cbr" and plugin["took"] is False
        [template] = plugin["templates"]
        assert template["template"] == "conv_bn_relu" and template["matched"] == []
        assert template["near_misses"] == [expected]
    [plugin] = by_name["n6"]["plugins"]  # the Relu: the match anchored on it breaks on the way up
    assert plugin["templates"][0]["near_misses"] == [
        "act matched n6 (Relu), bn expected BatchNormalization, found n5 (Add)"]
    [plugin] = by_name["n7"]["plugins"]  # the MaxPool after the Relu is in no partial match
    assert plugin["templates"][0]["near_misses"] == []


def test_who_took_it_and_each_device_verdict(inception_entries):
    entries, _ = inception_entries
    conv = entries[0]
    assert (conv["name"], conv["type"], conv["device"], conv["taken_by"]) == ("n0", "Conv", "AICORE", "placement")
    verdicts = {v["device"]: v for v in conv["devices"]}
    assert [v["device"] for v in conv["devices"]] == ["AICORE", "AICPU", "DVPP", "CPU"]
    assert verdicts["AICORE"]["accepts"] and not verdicts["DVPP"]["accepts"]
    assert verdicts["DVPP"]["reason"] == "Conv is not in its op-info library"


def test_a_plugin_that_takes_the_op_and_the_full_match(cbr_dir):
    resnet = INCEPTION_V2.parent / "light_resnet50.onnx"
    [entry] = xgraph.explain(resnet, ["n1"], OPTIONS, [str(cbr_dir)])
    assert entry["taken_by"] == "plugin cbr" and entry["device"] == "CBR"
    [template] = entry["plugins"][0]["templates"]
    assert template["matched"] == [{"conv": "n0", "bn": "n1", "act": "n2"}]


def test_explain_of_an_xmodel_uses_its_recorded_options(tmp_path, cbr_dir):
    compiled = xgraph.compile(INCEPTION_V2, OPTIONS, [str(cbr_dir)])
    compiled.serialize(tmp_path / "i2.xmodel")
    entries = xgraph.explain(tmp_path / "i2.xmodel", types=["Mul"], plugin_path=[str(cbr_dir)])
    assert entries and {e["type"] for e in entries} == {"Mul"}
    assert all(e["plugins"][0]["plugin"] == "cbr" for e in entries)


def test_unknown_op_says_what_exists(cbr_dir):
    with pytest.raises(XGraphError, match=r"has no op 'n00'.*did you mean"):
        xgraph.explain(INCEPTION_V2, ["n00"])


def test_cli_prints_the_near_miss_and_exits_zero(inception_entries):
    _, directory = inception_entries
    done = subprocess.run([sys.executable, "-m", "xgraph.cli.main", "explain", str(INCEPTION_V2), "n0",
                           "--options", json.dumps(OPTIONS), "--plugin-path", str(directory)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "n0 (Conv): AICORE, subgraph subgraph_n0, taken by the built-in placement"
    assert "    DVPP: Conv is not in its op-info library" in lines
    assert ("    template conv_bn_relu: partial match: conv matched n0 (Conv), bn matched n1 (BatchNormalization), "
            "act expected one of {Clip, Relu}, found n3 (Mul)") in lines


def test_cli_without_ops_is_a_one_line_error():
    done = subprocess.run([sys.executable, "-m", "xgraph.cli.main", "explain", str(INCEPTION_V2)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith("xgraph: error: explain: name the ops")


def test_plugin_names_recorded_in_an_xmodel_never_import_arbitrary_modules(tmp_path):
    from xgraph.errors import PluginError
    compiled = xgraph.compile(INCEPTION_V2)
    compiled.set_attr("compile_options", json.dumps({"plugins": "json"}))  # an importable module, not a plugin
    compiled.serialize(tmp_path / "hostile.xmodel")
    with pytest.raises(PluginError, match="no plugin named 'json'"):
        xgraph.explain(tmp_path / "hostile.xmodel", ["n0"])


def test_explain_of_an_xmodel_whose_input_shape_fixed_a_named_dim(tmp_path):
    # "N:2" fixed the dim named N: the compiled inputs no longer name it, the recompile must not ask for it
    from testing.runtime import load_script  # noqa: PLC0415
    mobilenet_like = load_script(Path(__file__).parents[1] / "compile" / "dynamic_models.py",
                                 "cli_explain_dynamic_models").mobilenet_like
    path = tmp_path / "cnn.xmodel"
    xgraph.compile(mobilenet_like(), {"input_shape": "N:2"}).serialize(path)
    [entry] = xgraph.explain(path, types=["Gemm"])
    assert entry["device"] == "AICORE" and not entry.get("assumed_dims")
    # a range keeps its dim named: it is applied again, and the estimate says where it sized the dim
    ranged = tmp_path / "ranged.xmodel"
    xgraph.compile(mobilenet_like(), {"input_shape": "N:1..64"}).serialize(ranged)
    entries = xgraph.explain(ranged, types=["Conv"])
    assert entries and all(e["assumed_dims"] for e in entries)
