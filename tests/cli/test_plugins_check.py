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
    assert done.stdout.splitlines()[-1] == "12 plugin(s) checked, 11 problem(s)"


@pytest.mark.parametrize("name, expected", [
    ("syntax_error", "importing {dir}/syntax_error.py failed: SyntaxError: invalid syntax (syntax_error.py, line 3) "
                     "at {dir}/syntax_error.py:3"),
    ("returns_class", "get_plugin() returned the class P; return an instance: P() at {dir}/returns_class.py:8"),
    ("import_fails", "ModuleNotFoundError: No module named 'no_such_module_for_xgraph_checks' at "
                     "{dir}/import_fails.py:2"),
    ("factory_raises", "get_plugin() raised RuntimeError: no licence for this IP at {dir}/factory_raises.py:5"),
    ("missing_methods", "get_plugin() returned a Half without partition, compile"),
    ("empty_device", "get_device() returned ''; return a non-empty device name such as 'NPU' at "
                     "{dir}/empty_device.py:5"),
    ("bad_memory", "get_memory() returned 'shared'; return 'device', 'host' or None (as its device) at "
                   "{dir}/bad_memory.py:5"),
    ("unregistered_runner", "get_runner() names runner 'npu_runner_nobody_registered' for mode 'run', which is not "
                            "registered"),
    ("unregistered_runner", "when the plugin is imported at {dir}/unregistered_runner.py:5"),
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
    assert (f"partition_returns_garbage: on {model}: plugin 'partition_returns_garbage': partition() returned int; "
            f"return a set of Subgraphs (empty when it takes nothing) at {broken_dir}/partition_returns_garbage.py:5"
            ) in done.stdout
    assert (f"runner_init_fails: on {model}: runner 'npu_needs_device' (mode 'run') failed to start on subgraph "
            f"'subgraph_n73': RuntimeError: no /dev/npu0: is the driver loaded? at "
            f"{broken_dir}/runner_init_fails.py:8") in done.stdout


def test_only_files_defining_get_plugin_are_imported(checked, broken_dir):
    done, _ = checked
    assert "helper_script.py was run" not in done.stdout + done.stderr
    assert (f"skipped {broken_dir}/helper_script.py: no top-level get_plugin, so not a plugin (not imported)"
            in done.stdout.splitlines())
    assert f"skipped {broken_dir}/no_factory.py: no top-level get_plugin, so not a plugin (not imported)" in done.stdout


def test_a_plugin_without_get_plugin_named_explicitly_is_located(broken_dir):
    done = xgraph_cli("plugins", "--check", "no_factory", "--plugin-path", str(broken_dir))
    assert done.returncode == 1
    assert f"has no get_plugin() function at {broken_dir}/no_factory.py:1" in done.stdout


def test_a_misspelt_name_gets_did_you_mean(broken_dir):
    done = xgraph_cli("plugins", "--check", "fien", "--plugin-path", str(broken_dir))
    assert done.returncode == 1 and "no plugin named 'fien' (did you mean 'fine'?)" in done.stdout


def test_listing_shows_declared_options(tmp_path):
    (tmp_path / "smfc.py").write_text(
        "from xgraph.plugins import Plugin, PluginOption\n"
        "def get_options():\n"
        "    return [PluginOption('types', str, 'Softmax', 'op types')]\n"
        "def get_plugin(options):\n"
        "    return Plugin()\n")
    done = xgraph_cli("plugins", "--check", "--plugin-path", str(tmp_path / "smfc.py"))
    assert "options types: str = 'Softmax' (op types)" in done.stdout, done.stdout
    done = xgraph_cli("plugins", "--plugin-path", str(tmp_path))
    assert "types: str = 'Softmax' (op types)" in " ".join(done.stdout.split()), done.stdout


def test_plugin_path_may_be_a_file(broken_dir):
    done = xgraph_cli("plugins", "--check", "--plugin-path", str(broken_dir / "fine.py"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1] == "1 plugin(s) checked, 0 problem(s)"
    assert "does not exist" not in done.stdout


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
    assert rows["fine"][1:5] == ["FINE", "run=cpu, sim=cpu, ref=cpu", "(undeclared)", "ok"]  # not wrapped although piped
    assert rows["syntax_error"][4] == "1 problem(s): xgraph plugins --check syntax_error"
