"""Drawing speed: DenseNet121 (1,746 ops as imported) laid out and rendered to SVG and HTML.

Baseline: importing the same model (`xgraph.load`: ONNX parse + shape inference), measured
in the same run. Prints seconds (best of `--repeat`) and each step's ratio to the import.

    python benchmarks/view_render.py [--model PATH] [--repeat 3] [--compiled]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import onnx

import xgraph
from xgraph.view.html import scene_html
from xgraph.view.scene import build_scene, layout_scene
from xgraph.view.svg import scene_svg

DENSENET121 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_densenet121.onnx"


def best(fn, repeat: int):
    """(best seconds, last result) of `repeat` calls."""
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DENSENET121), help="the model to draw (default: DenseNet121)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--compiled", action="store_true", help="also draw the compiled model")
    args = parser.parse_args()

    load_s, graph = best(lambda: xgraph.load(args.model), args.repeat)
    graphs = [("as imported", graph)]
    if args.compiled:
        graphs.append(("compiled", xgraph.compile(args.model)))
    print(f"{Path(args.model).name}: import (baseline) {load_s:.3f} s")
    print(f"{'graph':<12} {'ops':>5} {'scene':>8} {'layout':>8} {'svg':>8} {'html':>8} {'total svg':>10} "
          f"{'total html':>10} {'html/import':>11}")
    for label, g in graphs:
        scene_s, scene = best(lambda: build_scene(g), args.repeat)
        layout_s, layout = best(lambda: layout_scene(scene), args.repeat)
        svg_s, svg = best(lambda: scene_svg(scene, layout), args.repeat)
        html_s, html = best(lambda: scene_html(scene, layout), args.repeat)
        total_svg, total_html = scene_s + layout_s + svg_s, scene_s + layout_s + html_s
        print(f"{label:<12} {g.get_op_num():>5} {scene_s:>8.3f} {layout_s:>8.3f} {svg_s:>8.3f} {html_s:>8.3f} "
              f"{total_svg:>10.3f} {total_html:>10.3f} {total_html / load_s:>10.2f}x")
        print(f"{'':<12} crossings after ordering: {layout.crossings}; svg {len(svg) / 1e6:.2f} MB, "
              f"html {len(html) / 1e6:.2f} MB, drawing {layout.width:.0f} x {layout.height:.0f} px")


if __name__ == "__main__":
    main()
