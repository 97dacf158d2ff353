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
