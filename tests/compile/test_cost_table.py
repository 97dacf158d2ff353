"""Measured costs in the cost model: the "costs" option, lookups by name and signature, bad tables refused."""
from __future__ import annotations

import json

import onnx
import pytest

import xgraph
from xgraph.compiler.cost_table import load_cost_table, op_signature
from xgraph.compiler.options import parse_options
from xgraph.errors import OptionError


def _saved(models, path) -> str:
    """Three MatMuls mm0..mm2 saved at `path`: roofline puts them all on AI Core."""
    onnx.save(models.matmul_chain(3), path)
    return str(path)


def _table(path, ops=None, signatures=None, **extra):
    path.write_text(json.dumps({"version": 1, "model": "chain", "ops": ops or {}, "signatures": signatures or {},
                                **extra}))
    return str(path)


def _devices(compiled):
    return {op: str(compiled.get_root_subgraph().find_child_subgraph_by_op(op).get_attr("device"))
            for op in ("mm0", "mm1", "mm2")}


def test_a_measured_table_moves_ops_the_roofline_would_keep(tmp_path, models):
    model = _saved(models, tmp_path / "m.onnx")
    roofline = xgraph.compile(model, {"placement": "latency"})
    assert set(_devices(roofline).values()) == {"AICORE"}
    assert xgraph.report(roofline)["cost"]["sources"] == {"roofline": 3}
    slow_card = {f"mm{i}": {"seconds": {"AICORE": 1.0, "AICPU": 1.0, "CPU": 1e-6}} for i in range(3)}
    table = _table(tmp_path / "t.json", ops=slow_card)
    measured = xgraph.compile(model, {"placement": "latency", "costs": table})
    assert set(_devices(measured).values()) == {"CPU"}
    cost = xgraph.report(measured)["cost"]
    assert cost["sources"] == {"measured": 3} and cost["costs"] == table
    assert cost["chosen"]["latency_seconds"] == pytest.approx(3e-6, rel=0.01)
    assert all(u["source"] == "measured" and u["device"] == "CPU" for u in cost["unit_sources"])
    reason = next(op["reason"] for op in xgraph.report(measured)["ops"] if op["name"] == "mm0")
    assert reason.startswith("by latency: CPU, not AICORE: CPU is "), reason


def test_signatures_cover_ops_the_table_does_not_name_and_roofline_fills_the_rest(tmp_path, models):
    model = _saved(models, tmp_path / "m.onnx")
    graph = xgraph.Graph.from_onnx(model)
    signature = op_signature(graph.get_op("mm0"))  # mm0 alone reads x [64, 256]; mm1 and mm2 read the same shape
    assert signature == "MatMul||float32[64,256];float32[256,256]"
    table = _table(tmp_path / "t.json", ops={"mm2": {"seconds": {"CPU": 2.0}}},
                   signatures={signature: {"CPU": 1e-6}})
    compiled = xgraph.compile(model, {"placement": "latency", "costs": table})
    cost = xgraph.report(compiled)["cost"]
    # mm0, mm1: measured on the host by signature (1 us); mm2 by name (2 s there): the card's roofline wins
    assert _devices(compiled) == {"mm0": "CPU", "mm1": "CPU", "mm2": "AICORE"}
    assert cost["sources"] == {"measured": 2, "roofline": 1}


def test_first_fit_records_the_table_but_places_as_before(tmp_path, models):
    model = _saved(models, tmp_path / "m.onnx")
    table = _table(tmp_path / "t.json", ops={"mm0": {"seconds": {"AICORE": 9.0}}})
    compiled = xgraph.compile(model, {"costs": table})
    assert set(_devices(compiled).values()) == {"AICORE"}
    assert parse_options(compiled.get_attr("compile_options")).costs == table


@pytest.mark.parametrize("content, key", [
    ("{not json", "is not JSON"),
    ('{"version": 2, "ops": {}}', "version is 2"),
    ('[1, 2]', "the document is not a JSON object"),
    ('{"version": 1, "ops": {"mm0": {"seconds": {"CPU": -1.0}}}}', "ops.mm0.seconds.CPU is -1.0"),
    ('{"version": 1, "ops": {"mm0": {"seconds": {"GPU": 1.0}}}}', "ops.mm0.seconds.GPU names unknown device 'GPU'"),
    ('{"version": 1, "signatures": {"Relu||": {"CPU": "fast"}}}', "signatures.Relu||.CPU is 'fast'"),
    ('{"version": 1, "candidates": [{"plugin": "p", "ops": ["a"], "seconds": -2}]}', "candidates[0].seconds"),
    ('{"version": 1, "extra": 1}', "extra is not a key of a cost table"),
])
def test_bad_tables_are_one_line_option_errors_naming_file_and_key(tmp_path, content, key):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(OptionError) as info:
        parse_options({"costs": str(path)})
    message = str(info.value)
    assert "\n" not in message and str(path) in message and key in message, message


def test_the_option_must_be_a_path():
    with pytest.raises(OptionError, match="option 'costs' has invalid value 3"):
        parse_options({"costs": 3})


def test_a_missing_table_names_the_file(tmp_path, models):
    with pytest.raises(OptionError, match="cannot read .*nope.json"):
        xgraph.compile(_saved(models, tmp_path / "m.onnx"), {"costs": str(tmp_path / "nope.json")})


def test_a_candidate_time_costs_a_plugin_preference(tmp_path):
    table = load_cost_table(_table(tmp_path / "t.json", candidates=[{"plugin": "p", "device": "P", "ops": ["b", "a"],
                                                                         "seconds": 0.5}]))
    assert table.candidate_seconds("p", ["a", "b"]) == 0.5 and table.candidate_seconds("p", ["a"]) is None
