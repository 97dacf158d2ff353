"""`xgraph plugins --check` on a directory of broken plugins: each problem named, with file:line where the
plugin's own code raised; with --model, a dry run saying what each plugin would take."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


#: The environment of a pipe with no width set (pytest sets COLUMNS for its children).
PIPE_ENV = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}


def xgraph_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xgraph.cli.main", *args], capture_output=True, text=True,
                          timeout=300, env=PIPE_ENV)


@pytest.fixture(scope="module")
def checked(broken_dir, light):
    done = xgraph_cli("plugins", "--check", "--plugin-path", str(broken_dir), "--model",
                      str(light / "light_inception_v2.onnx"))
    return done, {line.split(": ", 1)[0]: line.split(": ", 1)[1] for line in done.stdout.splitlines()
                  if ": " in line and not line.startswith(("fine: on", "raises_in_partition: ok"))}


def test_exit_code_and_count(checked):
    done, _ = checked
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines()[-1] == "10 plugin(s) checked, 9 problem(s)"


@pytest.mark.parametrize("name, expected", [
    ("syntax_error", "importing {dir}/syntax_error.py failed: SyntaxError: invalid syntax (syntax_error.py, line 3) "
                     "at {dir}/syntax_error.py:3"),
    ("no_factory", "has no get_plugin() function"),
    ("import_fails", "ModuleNotFoundError: No module named 'no_such_module_for_xgraph_checks' at "
                     "{dir}/import_fails.py:2"),
    ("factory_raises", "get_plugin() raised RuntimeError: no licence for this IP at {dir}/factory_raises.py:5"),
    ("missing_methods", "get_plugin() returned a Half without partition, compile"),
    ("empty_device", "get_device() returned ''"),
    ("bad_memory", "get_memory() returned 'shared'; return 'device', 'host' or None (as its device)"),
    ("unregistered_runner", "get_runner() names runner 'npu_runner_nobody_registered' for mode 'run', which is not "
                            "registered"),
])
def test_each_problem_is_named(checked, broken_dir, name, expected):
    _, lines = checked
    assert expected.format(dir=broken_dir) in lines[name]


def test_dry_run_locates_the_partition_bug_and_says_what_fine_takes(checked, broken_dir, light):
    done, _ = checked
    model = light / "light_inception_v2.onnx"
    assert (f"raises_in_partition: on {model}: plugin 'raises_in_partition': partition(graph) raised "
            f"ZeroDivisionError: division by zero at {broken_dir}/raises_in_partition.py:7 (--debug shows the "
            f"traceback)") in done.stdout
    assert f"fine: on {model} would take 69 op(s) in 33 subgraph(s) for FINE" in done.stdout  # its 69 Relus


def test_a_clean_plugin_passes(broken_dir):
    done = xgraph_cli("plugins", "--check", "fine", "--plugin-path", str(broken_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"fine: ok (device FINE, runner run=cpu, sim=cpu, ref=cpu, memory device; {broken_dir}/fine.py)",
        "1 plugin(s) checked, 0 problem(s)"]


def test_listing_shows_device_runner_and_status_on_one_line_per_plugin(broken_dir):
    done = xgraph_cli("plugins", "--plugin-path", str(broken_dir))
    assert done.returncode == 0, done.stderr
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[1:-1]]
            for line in done.stdout.splitlines() if line.startswith("│")}
    assert rows["fine"][1:4] == ["FINE", "run=cpu, sim=cpu, ref=cpu", "ok"]  # not wrapped although piped
    assert rows["syntax_error"][3] == "1 problem(s): xgraph plugins --check syntax_error"
