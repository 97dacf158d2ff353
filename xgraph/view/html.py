"""The partition picture as one self-contained HTML page: inline SVG, CSS and script, nothing fetched.

The page pans (drag) and zooms (wheel); hovering an op shows its type, shapes, attributes
and why it was placed where it is; the search box finds an op by name. `picture_html` is
the interactive picture alone, which the compile report embeds too.
"""
from __future__ import annotations

import json
from typing import Any

from xgraph.ir import Graph
from xgraph.view.assets import CSS, JS
from xgraph.view.layout import Layout
from xgraph.view.palette import CROSSING_COLOUR
from xgraph.view.scene import Scene, build_scene, layout_scene
from xgraph.view.svg import DEFS, FONT, SVG_NS, box_bounds, box_label, drawing, legend_entries, summary_line, xml


def _round(value: float) -> float:
    return round(value, 1)


def view_data(scene: Scene, layout: Layout) -> dict[str, Any]:
    """What the script needs: per node (same index as data-index) its facts and centre, per box its bounds."""
    nodes = []
    for node in scene.nodes:
        x, y = layout.positions[node.key]
        nodes.append({"kind": node.kind, **node.details, "x": _round(x), "y": _round(y)})
    boxes = [{"name": b.name, "device": b.device, "ops": len(b.members), "runner": b.runner,
              "estimated_time_us": b.estimated_time_us, "bounds": [_round(v) for v in box_bounds(b, layout)]}
             for b in scene.boxes]
    return {"title": scene.title, "width": _round(layout.width), "height": _round(layout.height),
            "nodes": nodes, "boxes": boxes, "crossings": scene.crossings}


def script_json(value: Any) -> str:
    """JSON safe inside a `<script>` element: every `<`, `>` and `&` as a \\u escape, so no name
    (`</script>`, `<!--<script>`) can end the element early or switch the parser's script state."""
    text = json.dumps(value, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def legend_html(scene: Scene) -> str:
    """Device colours with op counts, and the crossing count."""
    items = [f'<li data-device="{xml(device)}"><span class="xg-swatch" style="background:{colour}"></span>'
             f'{xml(device)} <small>({count} op{"s" * (count != 1)})</small></li>'
             for device, colour, count in legend_entries(scene)]
    if scene.compiled:
        items.append(f'<li class="xg-crossing-key"><span class="xg-swatch" style="background:{CROSSING_COLOUR}">'
                     f'</span>host/device copies: <span id="xg-crossings">{scene.crossings}</span></li>')
    return f'<ul class="xg-legend">{"".join(items)}</ul>'


def picture_html(scene: Scene, layout: Layout) -> str:
    """The interactive picture: toolbar (search, fit, 1:1), the SVG stage with its tooltip, and the node data."""
    return (f'<section class="xg-picture">'
            f'<div class="xg-toolbar"><input id="xg-search" type="search" placeholder="find op by name  (/)" '
            f'autocomplete="off" spellcheck="false"><button id="xg-fit" type="button" title="fit all (f)">Fit</button>'
            f'<button id="xg-actual" type="button">1:1</button><span id="xg-status" class="xg-status"></span></div>'
            f'<div class="xg-stage"><svg xmlns="{SVG_NS}" id="xg-canvas" font-family="{xml(FONT)}" '
            f'role="img" aria-label="{xml(summary_line(scene))}">{DEFS}{drawing(scene, layout, titles=False)}</svg>'
            f'<div id="xg-tooltip" hidden></div></div>'
            f'<script type="application/json" id="xg-data">{script_json(view_data(scene, layout))}</script>'
            f'</section>')


def page(title: str, body: str, extra_css: str = "", extra_js: str = "") -> str:
    """A complete HTML document with the view stylesheet and script inlined."""
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<link rel="icon" href="data:,"><title>{xml(title)}</title>'
            f'<style>{CSS}{extra_css}</style></head><body>{body}<script>{JS}{extra_js}</script></body></html>\n')


_PAGE_CSS = """
body { display: flex; flex-direction: column; height: 100vh; }
header { padding: 10px 14px 8px; background: #fff; border-bottom: 1px solid #d6dae0; }
main { flex: 1; min-height: 0; display: flex; padding: 8px; gap: 8px; }
main .xg-picture { flex: 1; }
aside { width: 280px; overflow: auto; background: #fff; border: 1px solid #d6dae0; border-radius: 6px;
        padding: 8px 10px; font-size: 13px; }
aside ol { margin: 0; padding-left: 20px; }
aside a { color: inherit; text-decoration: none; }
aside a:hover { text-decoration: underline; }
"""


def subgraph_list_html(scene: Scene) -> str:
    """The device subgraphs in topological order, each a link that zooms to its box."""
    if not scene.boxes:
        return "<p>Not compiled: the graph has no device subgraphs yet (compile it with xcompile).</p>"
    items = []
    for b in scene.boxes:
        label = xml(box_label(b))
        items.append(f'<li><a href="#" data-goto-subgraph="{xml(b.name)}">{label}</a></li>')
    return f'<ol class="xg-subgraphs">{"".join(items)}</ol>'


def scene_html(scene: Scene, layout: Layout) -> str:
    """The full picture page of a scene."""
    body = (f'<header><h1>{xml(summary_line(scene))}</h1>{legend_html(scene)}</header>'
            f'<main>{picture_html(scene, layout)}<aside><h2 style="margin-top:0">Device subgraphs</h2>'
            f'{subgraph_list_html(scene)}</aside></main>')
    return page(f"{scene.title} \u2014 xgraph", body, _PAGE_CSS)


def render_html(graph: Graph, layout: Layout | None = None) -> str:
    """The partition picture of `graph` as a self-contained HTML page (`layout` computed when None)."""
    scene = build_scene(graph)
    return scene_html(scene, layout or layout_scene(scene))


def write_html(graph: Graph, path: str) -> None:
    """Write the partition picture page of `graph` to `path` (atomically)."""
    from xgraph.view.files import write_text
    write_text(path, render_html(graph))


__all__ = ["legend_html", "page", "picture_html", "render_html", "scene_html", "script_json", "subgraph_list_html",
           "view_data", "write_html"]
