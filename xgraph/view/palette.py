"""Device colours: a fixed palette for the built-in devices, a categorical one for the plugin devices of a drawing.

`device_colours(devices)` gives every device of one picture or report its colour: the
built-ins their fixed ones, the other devices (sorted by name) the `PLUGIN_COLOURS` in turn,
so up to 4 + len(PLUGIN_COLOURS) devices stay far apart (CIE76 delta E >= 20, with the
crossing red and the unassigned grey too; tests/view/test_palette.py measures it). Past
that, and for a device drawn alone (`device_colour`), a hue hashed from the name.
"""
from __future__ import annotations

import colorsys
import hashlib
from collections.abc import Iterable

#: Built-in devices (Tableau 10 colours, readable on white and distinct for colour-blind readers).
BUILTIN_COLOURS = {
    "AICORE": "#4e79a7",
    "AICPU": "#f28e2b",
    "DVPP": "#b07aa1",
    "CPU": "#59a14f",
}
#: Ops that no device subgraph holds (a graph that is not compiled).
UNASSIGNED_COLOUR = "#bab0ac"
#: Edges that copy between host and device memory.
CROSSING_COLOUR = "#e15759"
#: Plugin devices of one drawing, in name order: distinct from the built-ins, each other, red and grey.
PLUGIN_COLOURS = ("#edc948", "#76b7b2", "#ff9da7", "#9c755f", "#2a3f8f", "#cc00cc", "#663300", "#e7298a",
                  "#006d6d", "#00441b")
_BUILTIN_HUES = (212.0, 30.0, 315.0, 110.0, 359.0)  # the palette above and the crossing red
_MIN_HUE_DISTANCE = 22.0


def _hue_distance(a: float, b: float) -> float:
    d = abs(a - b) % 360.0
    return min(d, 360.0 - d)


def device_colour(device: str) -> str:
    """#rrggbb for `device`: fixed for built-ins, else a hue hashed from the name, kept away from built-in hues."""
    if device in BUILTIN_COLOURS:
        return BUILTIN_COLOURS[device]
    if not device:
        return UNASSIGNED_COLOUR
    digest = hashlib.sha256(device.encode("utf-8", "surrogatepass")).digest()
    hue = digest[0] * 360.0 / 256.0
    while any(_hue_distance(hue, h) < _MIN_HUE_DISTANCE for h in _BUILTIN_HUES):
        hue = (hue + _MIN_HUE_DISTANCE) % 360.0
    lightness = 0.42 + (digest[1] % 16) / 100.0
    r, g, b = colorsys.hls_to_rgb(hue / 360.0, lightness, 0.62)
    return "#{:02x}{:02x}{:02x}".format(round(r * 255), round(g * 255), round(b * 255))


def device_colours(devices: Iterable[str]) -> dict[str, str]:
    """device -> #rrggbb for the devices drawn together: built-ins fixed, the rest PLUGIN_COLOURS by name."""
    names = sorted(set(devices))
    others = [d for d in names if d and d not in BUILTIN_COLOURS]
    colours = {d: device_colour(d) for d in names}
    colours.update(zip(others, PLUGIN_COLOURS))
    return colours


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on `background` (#rrggbb)."""
    r, g, b = (int(background[i:i + 2], 16) / 255.0 for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#1b1b1b" if luminance > 0.55 else "#ffffff"


__all__ = ["BUILTIN_COLOURS", "CROSSING_COLOUR", "PLUGIN_COLOURS", "UNASSIGNED_COLOUR", "device_colour", "device_colours",
           "text_colour"]
