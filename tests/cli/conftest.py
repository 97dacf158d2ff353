"""Fixtures for the command-line tests: zoo models and the sample plugin directories next to this file."""
from __future__ import annotations

from pathlib import Path

import onnx
import pytest

LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def light() -> Path:
    """The folder of the light model-zoo models shipped with onnx."""
    return LIGHT


@pytest.fixture(scope="session")
def cbr_dir() -> Path:
    """A plugin directory holding cbr.py, whose only template is Conv -> BatchNormalization -> Relu|Clip."""
    return HERE / "plugins"


@pytest.fixture(scope="session")
def broken_dir() -> Path:
    """A plugin directory of broken plugins, one problem each (see its README)."""
    return HERE / "broken_plugins"
