"""Shared fixtures: the ONNX model zoo that ships with the onnx package.

The repository root goes on sys.path so the tests import the shared fixtures of `testing/`
(outside the installed package), whichever directory pytest is started from.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import onnx
import pytest

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
ZOO = sorted((ONNX_DATA / "light").glob("*.onnx"))


@pytest.fixture(scope="session")
def zoo_models() -> list[Path]:
    """Paths of the 9 model-zoo architectures (light versions with constant weights)."""
    return ZOO


@pytest.fixture(scope="session")
def doc_plugin(tmp_path_factory):
    """write(doc, first_line, module) -> a fresh folder holding the ```python block of `doc` whose first line starts
    with `first_line`, saved as module.py: a plugin shown in the docs, to run as written."""
    def write(doc: Path, first_line: str, module: str) -> Path:
        code = re.search(r"```python\n(" + re.escape(first_line) + r".*?)```", doc.read_text(), re.S).group(1)
        folder = tmp_path_factory.mktemp("my_plugins")
        (folder / f"{module}.py").write_text(code)
        return folder
    return write


#: Node ids of the ONNX conformance cases (tests/backend/test_conformance.py), one test per case.
CONFORMANCE_CASE = "test_conformance.py::test_case["


def pytest_terminal_summary(terminalreporter) -> None:
    """'conformance: N passed, M expected failures of T' when conformance cases ran, and the same for kernels="auto".

    It lives in the root conftest because under pytest-xdist only the controller prints, and
    the controller loads no conftest below tests/.
    """
    counts = {key: sum(1 for r in terminalreporter.stats.get(key, ())
                       if CONFORMANCE_CASE in getattr(r, "nodeid", "") and getattr(r, "when", "call") == "call")
              for key in ("passed", "xfailed", "failed", "skipped")}
    total = sum(counts.values())
    if total:
        line = f"conformance: {counts['passed']} passed, {counts['xfailed']} expected failures of {total}"
        if counts["failed"]:
            line += f", {counts['failed']} unexpected failures"
        terminalreporter.write_line(line)
        auto = [dict(r.user_properties).get("kernels_auto") for key in ("passed", "xfailed", "failed")
                for r in terminalreporter.stats.get(key, ())
                if CONFORMANCE_CASE in getattr(r, "nodeid", "") and getattr(r, "when", "call") == "call"]
        if any(auto):
            terminalreporter.write_line(f"conformance, kernels auto: {auto.count('passed')} passed, "
                                        f"{auto.count('expected')} expected failures, "
                                        f"{auto.count('failed')} unexpected failures of {len(auto)}")
