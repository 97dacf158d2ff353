"""The partition picture as a file: the op view (`svg.py`) or the subgraph view (`collapsed_svg.py`),
chosen by size. Sits above both, so the two drawings share primitives without importing each other."""
from __future__ import annotations

from xgraph.ir.arguments import require_graph, require_path
from xgraph.ir import Graph
from xgraph.view.collapsed import choose_view
from xgraph.view.collapsed_svg import render_collapsed_svg
from xgraph.view.layout import Layout
from xgraph.view.scene import build_scene
from xgraph.view.scene import layout_scene
from xgraph.view.svg import scene_svg


def render_svg(graph: Graph, layout: Layout | None = None, view: str = "auto") -> str:
    """The partition picture of `graph` as an SVG document.

    `view`: "ops" (every op; `layout` is `layout_graph(graph)`, computed when None),
    "subgraphs" (one box per device subgraph) or "auto" (subgraphs for a compiled graph
    above COLLAPSE_ABOVE ops, else ops).
    """
    if choose_view(graph, view) == "subgraphs":
        return render_collapsed_svg(graph)
    scene = build_scene(graph)
    return scene_svg(scene, layout or layout_scene(scene))


def write_svg(graph: Graph, path: str, view: str = "auto") -> None:
    """Write the partition picture of `graph` to `path` (atomically); `view` as for `render_svg`."""
    from xgraph.view.files import write_text
    require_graph(graph, "xgraph.write_svg")
    require_path(path, "xgraph.write_svg")
    write_text(path, render_svg(graph, view=view))


__all__ = ["render_svg", "write_svg"]
