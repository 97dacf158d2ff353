"""Seeing the partition: text views (inspect, dump), SVG and HTML pictures, the HTML compile report.

Modules, in data-flow order: `describe` (facts and short forms of values), `layout` and
`coordinates` (layered DAG layout), `scene` (what a picture shows), `regions` (subgraph
regions that never overlap), `collapsed` (the one-box-per-subgraph view) and
`collapsed_svg`, `palette` (device colours), `svg`, `html` (+ `assets`), `report_html`,
`text`, `files` (atomic writes).
Every renderer takes a graph (and optionally a layout) and returns text.
"""
from xgraph.view.html import render_html, write_html
from xgraph.view.layout import Layout, LayoutStyle, layered_layout
from xgraph.view.report_html import render_html_report, write_html_report
from xgraph.view.scene import layout_graph
from xgraph.view.picture import render_svg, write_svg
from xgraph.view.text import dump_text, inspect_data, inspect_text

__all__ = ["Layout", "LayoutStyle", "dump_text", "inspect_data", "inspect_text", "layered_layout", "layout_graph",
           "render_html", "render_html_report", "render_svg", "write_html", "write_html_report", "write_svg"]
