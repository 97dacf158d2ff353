"""`xgraph html`: the partition picture as one self-contained, interactive HTML page."""
from __future__ import annotations

from xgraph.cli.picture_command import picture_command

add_parser, run = picture_command(
    "html", help="draw the partition as an interactive HTML page",
    description="Write one HTML file (nothing fetched from the network) with the partition picture: drag to pan, "
    "wheel to zoom, hover an op for its shapes, attributes and placement reason, search ops by name.",
    suffix="html", writer="html:write_html")
