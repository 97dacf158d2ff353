"""The xcompile summary: every plugin of the chain in the placement table (0 ops included), then the
built-in placement per device; --version; output paths checked before any work; no wrap when piped."""
from __future__ import annotations

import json
import os
import subprocess
import sys


#: The environment of a pipe with no width set (pytest sets COLUMNS for its children).
PIPE_ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def xcompile(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xgraph.cli.xcompile", *args], capture_output=True, text=True,
                          timeout=300, env=PIPE_ENV)


def table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if line.startswith("│")]


def test_a_plugin_that_takes_nothing_is_listed_with_its_templates(tmp_path, light, cbr_dir):
    report = tmp_path / "r.json"
    done = xcompile(str(light / "light_inception_v2.onnx"), "-o", str(tmp_path / "i2.xmodel"), "--plugin-path",
                    str(cbr_dir), "--options", json.dumps({"plugins": "cbr"}), "--report", str(report))
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert rows[0][:4] == ["plugin cbr", "CBR", "0", "0"]
    assert rows[1][:5] == ["placement", "AICORE", "1", "371", "0"]
    assert "plugin 'cbr' took no ops (its templates: conv_bn_relu (0 matches)); `xgraph explain " in done.stdout
    assert "--type Conv` with the same --options and --plugin-path says why" in done.stdout
    [plugin] = json.loads(report.read_text())["plugins"]
    assert (plugin["name"], plugin["ops"], plugin["subgraphs"]) == ("cbr", 0, [])
    assert plugin["templates"] == [{"name": "conv_bn_relu", "calls": 1, "matches": 0, "types": ["Conv"]}]
    assert plugin["seconds"] >= 0


def test_plugin_rows_and_placement_rows_add_up_on_resnet50(tmp_path, light, cbr_dir):
    done = xcompile(str(light / "light_resnet50.onnx"), "-o", str(tmp_path / "r50.xmodel"), "--plugin-path",
                    str(cbr_dir), "--options", json.dumps({"plugins": "cbr"}))
    assert done.returncode == 0, done.stderr
    rows = table_rows(done.stdout)
    assert rows[0][:2] == ["plugin cbr", "CBR"] and int(rows[0][3]) == 3 * 33  # 33 Conv-BN-Relu matches
    assert rows[1][:4] == ["placement", "AICORE", "17", "77"]
    assert "176 ops in 34 subgraph(s)" in done.stdout and 99 + 77 == 176


def test_version():
    import xgraph
    for module in ("xgraph.cli.xcompile", "xgraph.cli.main"):
        done = subprocess.run([sys.executable, "-m", module, "--version"], capture_output=True, text=True)
        assert done.returncode == 0 and done.stdout.strip().endswith(xgraph.__version__)


def test_bad_report_path_fails_before_compiling(tmp_path, light):
    out = tmp_path / "never.xmodel"
    done = xcompile(str(light / "light_resnet50.onnx"), "-o", str(out), "--report", "/nonexistent/r.html")
    assert done.returncode == 2
    assert done.stderr == ("xcompile: error: --report /nonexistent/r.html: folder '/nonexistent' does not exist; "
                           "create it or choose another path\n")
    assert not out.exists()
    done = xcompile(str(light / "light_resnet50.onnx"), "-o", str(tmp_path))
    assert done.returncode == 2 and "is a folder" in done.stderr
