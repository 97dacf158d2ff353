"""Names from a model reach the terminal escaped: an ESC/OSC sequence in an op, tensor or graph
name (or in a path) never reaches stdout/stderr raw, rich markup never parses a name, and the
HTML page's embedded JSON cannot end its script element."""
from __future__ import annotations

import json
import re

import pytest
from onnx import TensorProto, helper

from xgraph.cli.common import shown
from xgraph.cli.main import main as xgraph_main
from xgraph.cli.xcompile import main as xcompile_main

vi = helper.make_tensor_value_info
ESC = "\x1b]0;PWNED\x07\x1b[31m\x9b2J"


@pytest.fixture
def hostile(tmp_path):
    """A model whose names carry terminal escapes and markup, in a folder whose name is markup too."""
    folder = tmp_path / "x["
    folder.mkdir()
    graph = helper.make_graph([helper.make_node("Relu", [f"x{ESC}"], [f"y{ESC}"], name=f"[/nz]{ESC}"),
                               helper.make_node("Neg", [f"y{ESC}"], ["z"], name="<!--<script>")], f"g{ESC}",
                              [vi(f"x{ESC}", TensorProto.FLOAT, [2])], [vi("z", TensorProto.FLOAT, [2])])
    path = folder / "y].onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return tmp_path, path


def no_raw_controls(text: str) -> None:
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", text), repr(text[:400])


def test_shown_escapes_controls_and_keeps_text():
    assert shown("a\x1b[31mb\x07\tc\nd\x9b") == "a\\x1b[31mb\\x07\tc\nd\\x9b"
    assert shown("[/nz] ok") == "[/nz] ok"


def test_every_command_prints_names_escaped(hostile, capsys):
    tmp, model = hostile
    xmodel = tmp / "esc.xmodel"
    assert xcompile_main([str(model), "-o", str(xmodel)]) == 0
    out = capsys.readouterr()
    no_raw_controls(out.out + out.err)
    assert "x[/y].onnx" in out.out.replace("\n", "")  # the path printed as itself (rich may wrap it), not eaten as markup
    for argv in (["inspect", str(xmodel)], ["inspect", str(xmodel), "--json"], ["dump", str(xmodel)],
                 ["run", str(xmodel), "--random"], ["verify", str(model)],
                 ["bench", str(xmodel), "--runs", "1", "--warmup", "0"]):
        assert xgraph_main(argv) == 0, argv
        out = capsys.readouterr()
        no_raw_controls(out.out + out.err)
        if "--json" in argv:  # still valid JSON, the name intact inside it
            assert [i["name"] for i in json.loads(out.out)["inputs"]] == [f"x{ESC}"]
        elif argv[0] in ("inspect", "dump", "run"):  # these print the input's name: escaped, not dropped
            assert "\\x1b]0;PWNED\\x07" in out.out or "\\u001b]0;PWNED" in out.out, (argv, out.out[:300])


def test_errors_naming_a_hostile_name_are_escaped(hostile, capsys):
    tmp, model = hostile
    assert xgraph_main(["run", str(model), "--input", f"nope{ESC}=x.npy"]) == 2
    err = capsys.readouterr().err
    no_raw_controls(err)
    assert err.count("\n") == 1


def test_dump_files_are_escaped_too(hostile):
    tmp, model = hostile
    assert xgraph_main(["dump", str(model), str(tmp / "dump.txt")]) == 0
    text = (tmp / "dump.txt").read_text()
    no_raw_controls(text)
    assert "[/nz]\\x1b]0;PWNED" in text


def test_html_embedded_json_cannot_close_its_script(hostile):
    tmp, model = hostile
    assert xgraph_main(["html", str(model), str(tmp / "page.html")]) == 0
    page = (tmp / "page.html").read_text()
    data = re.search(r'<script type="application/json" id="xg-data">(.*?)</script>', page, re.S).group(1)
    assert "<" not in data and ">" not in data
    names = json.dumps(json.loads(data))
    assert "<!--<script>" in json.loads(json.dumps(names))  # the name survives, escaped only in the markup
    assert page.count("<script") == 2 and page.count("</script>") == 2  # the data and the viewer, nothing else
