"""`xgraph svg`: the partition picture as an SVG file (no Graphviz needed)."""
from __future__ import annotations

from xgraph.cli.picture_command import picture_command

add_parser, run = picture_command(
    "svg", help="draw the partition as SVG (ops coloured by device)",
    description="Draw the op graph in layers, ops coloured by device, each device subgraph boxed, host/device "
    "copies marked, with a legend.", suffix="svg", writer="picture:write_svg")
