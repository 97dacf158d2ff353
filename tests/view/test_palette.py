"""Device colours: fixed for built-ins, stable and distinct hashed colours for plugin devices."""
from __future__ import annotations

import re

from xgraph.view.palette import BUILTIN_COLOURS, UNASSIGNED_COLOUR, device_colour, text_colour


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
