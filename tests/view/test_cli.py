"""xgraph inspect / dump / svg / html from the command line."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from xgraph import Graph
from xgraph.cli.main import main
from xgraph.view.text import dump_text, inspect_text


@pytest.fixture
def toy_xmodel(toy, tmp_path):
    path = tmp_path / "toy.xmodel"
    toy.serialize(path)
    return path


def test_inspect_xmodel(toy_xmodel, capsys):
    assert main(["inspect", str(toy_xmodel)]) == 0
    out = capsys.readouterr().out
    assert out == inspect_text(Graph.deserialize(toy_xmodel))
    assert "  subgraph_softmax  SMFC  1 op  runner: run=smfc sim=smfc ref=smfc" in out.splitlines()


def test_inspect_json(toy_xmodel, capsys):
    assert main(["inspect", str(toy_xmodel), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["device"], s["ops"]) for s in data["subgraphs"]] == [
        ("subgraph_conv", "AICORE", 2), ("subgraph_topk_like", "CPU", 1), ("subgraph_softmax", "SMFC", 1),
        ("subgraph_add", "AICORE", 1), ("subgraph_shape_op", "AICPU", 1)]


def test_inspect_onnx_with_compile(resnet50_path, capsys):
    assert main(["inspect", str(resnet50_path), "--compile"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "resnet50: 176 ops, 1 device subgraph, 0 host/device crossings"


def test_dump_to_file_and_stdout_agree(toy_xmodel, tmp_path, capsys):
    out = tmp_path / "dump.txt"
    assert main(["dump", str(toy_xmodel), str(out)]) == 0
    assert main(["dump", str(toy_xmodel)]) == 0
    text = out.read_text(encoding="utf-8")
    assert text == capsys.readouterr().out == dump_text(Graph.deserialize(toy_xmodel))
    assert "op shape_op: Neg\n  device: AICPU" in text


def test_svg_and_html(toy_xmodel, tmp_path, capsys):
    svg, page = tmp_path / "toy.svg", tmp_path / "toy.html"
    assert main(["svg", str(toy_xmodel), str(svg)]) == 0
    assert main(["html", str(toy_xmodel), str(page)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"wrote {svg}", f"wrote {page}"]
    root = ET.parse(svg).getroot()
    assert len([g for g in root.iter("{http://www.w3.org/2000/svg}g") if g.get("class") == "op"]) == 6
    assert page.read_text(encoding="utf-8").count('class="op"') == 6


def test_svg_of_uncompiled_model_notes_it(resnet50_path, tmp_path, capsys):
    out = tmp_path / "r.svg"
    assert main(["svg", str(resnet50_path), str(out)]) == 0
    assert "is not compiled" in capsys.readouterr().err
    assert out.read_text(encoding="utf-8").count('class="op"') == 415


def test_user_errors_are_one_line_and_leave_files_alone(tmp_path, capsys, toy_xmodel):
    existing = tmp_path / "old.svg"
    existing.write_text("keep me")
    assert main(["svg", str(tmp_path / "missing.xmodel"), str(existing)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.xmodel" in err and "Traceback" not in err
    assert existing.read_text() == "keep me"
    assert main(["html", str(toy_xmodel), str(tmp_path / "no" / "such" / "x.html")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "x.html" in err and "does not exist" in err
    assert main(["dump", str(toy_xmodel), str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.svg", "toy.xmodel"]  # no temporary files left
