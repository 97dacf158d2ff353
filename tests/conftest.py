"""Shared fixtures: the ONNX model zoo that ships with the onnx package."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

ONNX_DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
ZOO = sorted((ONNX_DATA / "light").glob("*.onnx"))


@pytest.fixture(scope="session")
def zoo_models() -> list[Path]:
    """Paths of the 9 model-zoo architectures (light versions with constant weights)."""
    return ZOO


#: Node ids of the ONNX conformance cases (tests/backend/test_conformance.py), one test per case.
CONFORMANCE_CASE = "test_conformance.py::test_case["


def pytest_terminal_summary(terminalreporter) -> None:
    """'conformance: N passed, M expected failures of T' when conformance cases ran.

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
