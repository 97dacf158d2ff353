"""Backend tests: registers the marker of the ONNX conformance cases."""
from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "conformance: one ONNX node conformance case run through xgraph.backend")
