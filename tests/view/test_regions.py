"""Subgraph regions never overlap, edges stay in the gaps between rows, crossing labels never touch titles."""
from __future__ import annotations

from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xgraph
from xgraph.view.layout import layered_layout
from xgraph.view.regions import PAD, TITLE_PAD, overlap, subgraph_regions
from xgraph.view.scene import build_scene, layout_scene
from xgraph.view.svg import box_regions, label_point

PLUGINS = str(Path(__file__).resolve().parents[2] / "plugins")


def assert_regions_apart(regions) -> None:
    for i, a in enumerate(regions):
        for b in regions[i + 1:]:
            for ra in a.rects:
                for rb in b.rects:
                    assert not overlap(ra, rb), (a.name, ra, b.name, rb)


def title_box(region) -> tuple[float, float, float, float]:
    """Where a region's title text is drawn (11 px font, left-aligned at title_at)."""
    x, y = region.title_at
    return (x, y - 11, region.title_width, 13)


def node_boxes(layout):
    w, h = layout.style.node_width, layout.style.node_height
    return {k: (x - w / 2, y - h / 2, w, h) for k, (x, y) in layout.positions.items()}


@given(st.integers(2, 40), st.data())
@settings(max_examples=60, deadline=None)
def test_random_groupings_never_overlap(n, data):
    edges = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    dag = nx.DiGraph()
    dag.add_nodes_from(range(n))
    dag.add_edges_from((min(a, b), max(a, b)) for a, b in edges if a != b)
    groups = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
    layout = layered_layout(dag)
    members = {}
    for node, g in enumerate(groups):
        members.setdefault(f"sg{g}", []).append(node)
    regions = subgraph_regions(layout, {k: tuple(v) for k, v in members.items()})
    assert_regions_apart(regions)
    boxes = node_boxes(layout)
    for region in regions:  # every member inside its region, no other node touched
        for node in members[region.name]:
            x, y = layout.positions[node]
            assert any(rx <= x <= rx + rw and ry <= y <= ry + rh for rx, ry, rw, rh in region.rects)
        for node, box in boxes.items():
            if node not in members[region.name]:
                assert not any(overlap(box, r) for r in region.rects), (region.name, node)


@pytest.fixture(scope="module", params=["resnet50+conv_ip", "densenet121+act_npu", "inception_v2+act_npu"])
def interleaved(request):
    """Zoo models with plugins whose subgraphs interleave with the built-in placement's."""
    import onnx
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    model, plugin = request.param.split("+")
    options = {"plugins": plugin}
    if plugin == "act_npu":
        options["plugin_options"] = {"act_npu": {"types": "Conv,Relu"}}
    compiled = xgraph.compile(light / f"light_{model}.onnx", options, [PLUGINS])
    scene = build_scene(compiled)
    return scene, layout_scene(scene)


def test_zoo_regions_never_overlap_and_hold_only_their_ops(interleaved):
    scene, layout = interleaved
    regions = box_regions(scene, layout)
    assert len(regions) == len(scene.boxes) > 1
    assert_regions_apart(list(regions.values()))
    owner = {m: b.name for b in scene.boxes for m in b.members}
    for key, box in node_boxes(layout).items():
        for name, region in regions.items():
            if owner.get(key) != name:
                assert not any(overlap(box, r) for r in region.rects), (key, name)


def test_zoo_edges_run_between_rows_and_crossing_labels_miss_titles(interleaved):
    scene, layout = interleaved
    row_height = layout.style.node_height + layout.style.y_gap
    for edge in scene.edges:
        points = layout.edges[(edge.source, edge.target)]
        ys = [y for _, y in points]
        # one bend per row crossed: consecutive points never skip a row, so a curve never crosses a node
        for a, b in zip(ys, ys[1:]):
            assert 0 < b - a <= row_height + 1e-6, (edge.source, edge.target, ys)
    titles = [title_box(r) for r in box_regions(scene, layout).values()]
    for edge in scene.edges:
        if edge.crossing:
            x, y = label_point(layout.edges[(edge.source, edge.target)])
            label = (x + 6, y - 6, 8 * 3, 12)
            assert not any(overlap(label, t) for t in titles)


def test_padding_leaves_a_gap_between_rows():
    from xgraph.view.layout import LayoutStyle
    style = LayoutStyle()
    assert PAD + TITLE_PAD < style.y_gap and 2 * PAD < style.x_gap


def test_toy_crossing_labels_sit_in_the_gap_above_their_target(toy):
    scene = build_scene(toy)
    layout = layout_scene(scene)
    titles = [title_box(r) for r in box_regions(scene, layout).values()]
    crossings = [e for e in scene.edges if e.crossing]
    assert len(crossings) == 2
    half = layout.style.node_height / 2
    for edge in crossings:
        x, y = label_point(layout.edges[(edge.source, edge.target)])
        target_top = layout.positions[edge.target][1] - half
        assert target_top - layout.style.y_gap < y - 6 and y + 6 < target_top - TITLE_PAD
        assert not any(overlap((x + 6, y - 6, 24, 12), t) for t in titles)
