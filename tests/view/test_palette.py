"""Device colours: fixed for built-ins, stable and distinct hashed colours for plugin devices."""
from __future__ import annotations

import re

import pytest

from xgraph.view.palette import BUILTIN_COLOURS, CROSSING_COLOUR, UNASSIGNED_COLOUR, device_colour, device_colours, \
    text_colour


def _hue(colour: str) -> float:
    import colorsys
    r, g, b = (int(colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return colorsys.rgb_to_hls(r, g, b)[0] * 360


def test_builtins_are_fixed_and_distinct():
    assert device_colour("AICORE") == BUILTIN_COLOURS["AICORE"] == "#4e79a7"
    assert len(set(BUILTIN_COLOURS.values())) == 4
    assert device_colour("") == UNASSIGNED_COLOUR


def test_plugin_devices_get_stable_colours_away_from_builtin_hues():
    names = ["SMFC", "DPU", "NPU0", "my-ip", "FPGA_CONV", "X"] + [f"dev{i}" for i in range(40)]
    builtin_hues = [_hue(c) for c in BUILTIN_COLOURS.values()]
    for name in names:
        colour = device_colour(name)
        assert re.fullmatch(r"#[0-9a-f]{6}", colour)
        assert colour == device_colour(name)
        assert all(min(abs(_hue(colour) - h), 360 - abs(_hue(colour) - h)) > 15 for h in builtin_hues)
    assert len({device_colour(n) for n in names}) > 30


def test_text_colour_contrasts():
    assert text_colour("#000000") == "#ffffff"
    assert text_colour("#ffffff") == "#1b1b1b"
    assert text_colour(BUILTIN_COLOURS["AICORE"]) == "#ffffff"


def _lab(colour: str) -> tuple[float, float, float]:
    """CIE L*a*b* (D65) of an sRGB #rrggbb: the independent oracle for colour distance."""
    def linear(c: float) -> float:
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (linear(int(colour[i:i + 2], 16) / 255) for i in (1, 3, 5))
    x = (0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047
    y = 0.2126 * r + 0.7152 * g + 0.0722 * b
    z = (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883

    def f(t: float) -> float:
        return t ** (1 / 3) if t > 216 / 24389 else (24389 / 27 * t + 16) / 116
    return 116 * f(y) - 16, 500 * (f(x) - f(y)), 200 * (f(y) - f(z))


def _delta_e(a: str, b: str) -> float:
    """CIE76 delta E."""
    import math
    return math.dist(_lab(a), _lab(b))


@pytest.mark.parametrize("plugin_devices", [
    ["OV", "OV_GPU"],                               # two plugin devices: once drawn near alike
    [f"NPU{i}" for i in range(8)],                  # 4 built-ins + 8 plugin devices = 12
    ["SMFC", "DPU", "my-ip", "FPGA_CONV", "X", "ZZ", "A1", "B2"],
])
def test_up_to_twelve_devices_stay_distinct(plugin_devices):
    colours = device_colours([*BUILTIN_COLOURS, *plugin_devices])
    assert colours["AICORE"] == BUILTIN_COLOURS["AICORE"]
    shown = list(colours.values()) + [CROSSING_COLOUR, UNASSIGNED_COLOUR]
    worst = min(_delta_e(a, b) for i, a in enumerate(shown) for b in shown[i + 1:])
    assert worst >= 20, worst


def test_the_old_hashed_pair_is_now_distinct():
    """Two devices once coloured #bead2d and #ccd035 (delta E about 17)."""
    assert _delta_e("#bead2d", "#ccd035") < 20
    colours = device_colours(["OV", "OV_GPU"])
    assert _delta_e(colours["OV"], colours["OV_GPU"]) >= 20


def test_colours_do_not_depend_on_the_order_given():
    assert device_colours(["B", "A", "CPU"]) == device_colours(["CPU", "A", "B"])
