"""The xcompile and `xgraph plugins` command lines: files written, summary printed, one-line user errors."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import onnx
import pytest

import xgraph
from xgraph.cli.main import main as xgraph_main
from xgraph.cli.xcompile import main


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    """rich wraps tables at the terminal width; a wide one keeps each reason on one line."""
    monkeypatch.setenv("COLUMNS", "250")


@pytest.fixture
def model_path(models, tmp_path):
    path = tmp_path / "net.onnx"
    onnx.save(models.cnn_with_lstm(), path)
    return path


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xgraph.cli.xcompile", *args], capture_output=True, text=True,
                          timeout=120)


def test_compile_writes_xmodel_and_report_and_prints_the_summary(model_path, tmp_path, capsys):
    out, rep = tmp_path / "out.xmodel", tmp_path / "r.json"
    assert main([str(model_path), "-o", str(out), "--report", str(rep)]) == 0
    printed = capsys.readouterr().out
    assert "Placement" in printed and "host/device crossings: 2" in printed
    assert "AICORE, AICPU, DVPP: LSTM is not in its op-info library" in printed
    loaded = xgraph.Graph.deserialize(out)
    report = json.loads(rep.read_text())
    assert xgraph.report(loaded) == report
    assert report["devices"] == {"AICORE": {"subgraphs": 2, "ops": 6}, "CPU": {"subgraphs": 1, "ops": 1}}
    assert loaded.get_op("lstm").get_attr("placement_reason") == "AICORE, AICPU, DVPP: LSTM is not in its op-info library"


def test_default_output_is_next_to_the_model_and_quiet_prints_nothing(model_path, capsys):
    assert main([str(model_path), "-q", "--options", '{"devices": "aicpu,cpu"}']) == 0
    assert capsys.readouterr().out == ""
    compiled = xgraph.Graph.deserialize(model_path.with_suffix(".xmodel"))
    assert json.loads(compiled.get_attr("compile_options"))["devices"] == "AICPU,CPU"


def test_html_report_is_written(model_path, tmp_path):
    out = tmp_path / "r.html"
    assert main([str(model_path), "--report", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "data-op=" in page


@pytest.mark.parametrize("args, message", [
    (["--options", '{"plugin": "a"}'], "unknown compile option(s) 'plugin' (did you mean 'plugins'?)"),
    (["--options", '{"fallback": "error"}'], "no allowed device accepts 1 op(s): 'lstm' (LSTM)"),
    (["--options", '{"plugins": "nosuchplugin"}'], "nosuchplugin"),
    (["--options", '{"input_shape": "x:1,3,4"}'], "gives 'x' 3 dims"),
    (["--report", "r.txt"], "unknown report format '.txt'"),
])
def test_user_errors_are_one_line_and_exit_2(model_path, capsys, args, message):
    assert main([str(model_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("xcompile: error: ") and message in err and err.count("\n") == 1
    assert not model_path.with_suffix(".xmodel").exists()


def test_missing_and_damaged_files(tmp_path, capsys):
    assert main([str(tmp_path / "none.onnx")]) == 2
    assert "none.onnx: no such file" in capsys.readouterr().err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07garbage that is not protobuf")
    assert main([str(bad)]) == 2
    assert "not a valid ONNX model" in capsys.readouterr().err


def test_bad_json_in_a_real_process_is_one_line_without_traceback(model_path):
    result = run_cli(str(model_path), "--options", "{bad json")
    assert result.returncode == 2
    assert result.stderr.startswith("xcompile: error: options are not valid JSON")
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr and result.stdout == ""


def test_debug_shows_the_traceback(model_path):
    result = run_cli(str(model_path), "--options", "{bad json", "--debug")
    assert result.returncode != 0 and "Traceback" in result.stderr and "OptionError" in result.stderr


def test_xgraph_plugins_lists_plugins_devices_and_runners(tmp_path, capsys):
    (tmp_path / "my_npu.py").write_text(textwrap.dedent("""
        from xgraph.plugins import Plugin
        class P(Plugin):
            def partition(self, graph):
                return set()
        def get_plugin():
            return P()
        """))
    assert xgraph_main(["plugins", "--plugin-path", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "my_npu" in out
    for device in ("AICORE", "AICPU", "DVPP", "CPU"):
        assert device in out and device.lower() in out  # the device and its runner
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│ ")]
    assert [r for r in rows if r in ("AICORE", "AICPU", "DVPP", "CPU")] == ["AICORE", "AICPU", "DVPP", "CPU"]


def test_progress_bar_appears_only_after_the_delay(monkeypatch):
    import time

    from xgraph.cli import xcompile
    monkeypatch.setattr(xcompile, "PROGRESS_DELAY", 0.05)
    quick = xcompile._ProgressBar(enabled=True)
    quick("load", 0, 5)
    quick.close()  # finished before the delay: no bar ever
    time.sleep(0.1)
    assert quick._progress is None
    slow = xcompile._ProgressBar(enabled=True)
    slow("load", 0, 5)
    slow._timer.join(timeout=30)  # the delay has passed once the timer has fired, however loaded the machine
    slow("placement", 3, 5)
    assert slow._progress is not None and slow._progress.tasks[0].completed == 3
    slow.close()
    assert slow._progress is None
    off = xcompile._ProgressBar(enabled=False)
    off("load", 0, 5)
    assert off._timer is None
