"""Device colours: a fixed palette for the built-in devices, stable hashed colours for plugin devices."""
from __future__ import annotations

import colorsys
import hashlib

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


def text_colour(background: str) -> str:
    """Black or white, whichever reads better on `background` (#rrggbb)."""
    r, g, b = (int(background[i:i + 2], 16) / 255.0 for i in (1, 3, 5))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "#1b1b1b" if luminance > 0.55 else "#ffffff"


__all__ = ["BUILTIN_COLOURS", "CROSSING_COLOUR", "UNASSIGNED_COLOUR", "device_colour", "text_colour"]
