"""The SVG picture, parsed as XML: one element per op, device colours, boxes, crossings, legend."""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from xgraph import Graph
from xgraph.view.palette import BUILTIN_COLOURS, CROSSING_COLOUR, device_colours
from xgraph.view.scene import layout_graph
from xgraph.view.picture import render_svg, write_svg

NS = {"svg": "http://www.w3.org/2000/svg"}


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text.encode("utf-8"))


def _ops(root: ET.Element) -> list[ET.Element]:
    return [g for g in root.iter("{%s}g" % NS["svg"]) if g.get("class") == "op"]


def _fills(element: ET.Element) -> set[str]:
    return {r.get("fill") for r in element.iter("{%s}rect" % NS["svg"])}


def test_one_element_per_op_coloured_by_device(toy):
    root = _parse(render_svg(toy))
    ops = _ops(root)
    assert sorted(g.get("data-op") for g in ops) == sorted(op.name for op in toy.get_ops())
    colours = device_colours(op.get_attr("device") for op in toy.get_ops())
    for g in ops:
        device = toy.get_op(g.get("data-op")).get_attr("device")
        assert g.get("data-device") == device
        assert colours[device] in _fills(g)
    fills = _fills(root)
    for device in ("AICORE", "AICPU", "CPU"):
        assert BUILTIN_COLOURS[device] in fills
    assert colours["SMFC"] in fills and colours["SMFC"] not in BUILTIN_COLOURS.values()


def test_weights_are_not_nodes_but_inputs_and_outputs_are(toy):
    root = _parse(render_svg(toy))
    assert "w" not in {g.get("data-op") for g in _ops(root)}
    io = {(g.get("class"), g.get("data-tensor")) for g in root.iter("{%s}g" % NS["svg"])
          if (g.get("class") or "").startswith("io")}
    assert io == {("io input", "x"), ("io output", "shape_op")}


def test_device_subgraphs_are_boxed_with_their_label(toy):
    root = _parse(render_svg(toy))
    boxes = [g for g in root.iter("{%s}g" % NS["svg"]) if g.get("class") == "subgraph"]
    assert [(b.get("data-subgraph"), b.get("data-device")) for b in boxes] == [
        ("subgraph_conv", "AICORE"), ("subgraph_topk_like", "CPU"), ("subgraph_softmax", "SMFC"),
        ("subgraph_add", "AICORE"), ("subgraph_shape_op", "AICPU")]
    label = "".join(boxes[0].find("svg:text", NS).itertext())
    assert label == "subgraph_conv \u00b7 2 ops"  # the full label does not fit above one op: name and size
    assert boxes[0].find("svg:title", NS).text.startswith("subgraph_conv \u00b7 AICORE \u00b7 2 ops")
    # the region is made of rectangles around its own ops: each op lies in one of them
    rects = [tuple(float(r.get(k)) for k in ("x", "y", "width", "height"))
             for r in boxes[0].iter("{%s}rect" % NS["svg"])]
    layout = layout_graph(toy)
    for name in ("conv", "relu"):
        x, y = layout.positions[name]
        assert any(rx < x < rx + rw and ry < y < ry + rh for rx, ry, rw, rh in rects), name


def test_host_device_crossings_are_marked_and_counted(toy):
    root = _parse(render_svg(toy))
    crossings = [g for g in root.iter("{%s}g" % NS["svg"]) if g.get("class") == "crossing"]
    # relu -> topk_like (AICORE -> CPU) and softmax -> add (SMFC, host memory -> AICORE)
    assert sorted(g.get("data-direction") for g in crossings) == ["D2H", "H2D"]
    for g in crossings:
        assert g.find("svg:path", NS).get("stroke") == CROSSING_COLOUR
    plain = [p for p in root.iter("{%s}path" % NS["svg"]) if p.get("class") == "edge"]
    assert all(p.get("stroke") != CROSSING_COLOUR for p in plain)
    # x->conv, conv->relu, relu->topk_like, relu->add, topk_like->softmax, softmax->add, add->shape_op, ->output
    assert len(plain) + len(crossings) == 8
    legend = "".join(root.find(".//svg:g[@class='legend']", NS).itertext())
    assert "host/device copy (2)" in legend and "2 host/device crossings" in legend


def test_uncompiled_graph_draws_grey_ops_and_no_boxes(resnet50_raw):
    text = render_svg(resnet50_raw)
    root = _parse(text)
    assert len(_ops(root)) == resnet50_raw.get_op_num() == 415
    assert not [g for g in root.iter("{%s}g" % NS["svg"]) if g.get("class") == "subgraph"]
    assert {g.get("data-device") for g in _ops(root)} == {""}
    assert "not compiled" in "".join(root.find(".//svg:g[@class='legend']", NS).itertext())


def test_compiled_resnet50(resnet50_compiled):
    root = _parse(render_svg(resnet50_compiled, view="ops"))
    ops = _ops(root)
    assert len(ops) == resnet50_compiled.get_op_num()
    assert {g.get("data-device") for g in ops} == {"AICORE"}
    first = next(g for g in ops if g.get("data-op") == "n0")
    assert first.get("data-type") == "Conv"
    assert float(root.get("width")) > 0 and float(root.get("height")) > 0


def test_large_compiled_graphs_are_collapsed_by_default(resnet50_compiled):
    root = _parse(render_svg(resnet50_compiled))
    assert "collapsed" in root.get("class") and not _ops(root)
    [box] = [g for g in root.iter("{%s}g" % NS["svg"]) if g.get("class") == "sg-node"]
    assert (box.get("data-subgraph"), box.get("data-device")) == ("subgraph_n0", "AICORE")
    assert "".join(box.itertext()) == "subgraph_n0AICORE \u00b7 176 ops"
    labels = ["".join(g.itertext()) for g in root.iter("{%s}g" % NS["svg"]) if g.get("class") == "sg-edge-label"]
    # 1 x 3 x 224 x 224 float32 in, 1 x 1000 float32 out
    assert sorted(labels) == ["gpu_0/data_0 \u00b7 602.1 kB", "gpu_0/softmax_1 \u00b7 4.0 kB"]


def test_collapsed_edges_carry_tensors_bytes_and_copies(toy):
    root = _parse(render_svg(toy, view="subgraphs"))
    edges = {(g.get("data-source"), g.get("data-target")): g for g in root.iter("{%s}g" % NS["svg"])
             if (g.get("class") or "").startswith("sg-edge") and g.get("data-source")}
    # relu (AICORE) -> topk_like (CPU): a D2H copy of relu's 1x2x4x4 float32 output
    d2h = edges[("subgraph:subgraph_conv", "subgraph:subgraph_topk_like")]
    assert d2h.get("class") == "sg-edge crossing" and d2h.get("data-direction") == "D2H"
    assert "".join(d2h.find("svg:g", NS).itertext()) == "D2H \u00b7 relu \u00b7 128 B"
    plain = edges[("subgraph:subgraph_conv", "subgraph:subgraph_add")]
    assert plain.get("class") == "sg-edge"
    assert sorted(g.get("data-direction") for g in edges.values() if g.get("data-direction")) == ["D2H", "H2D"]


def test_awkward_names_are_escaped(tmp_path):
    g = Graph('we<ird> & "name"')
    g.create_input("in<&>", (2,), np.float32)
    g.create_op('op "<1>" & \x01', "Relu", inputs=["in<&>"])
    g.set_outputs(['op "<1>" & \x01'])
    path = tmp_path / "weird.svg"
    write_svg(g, str(path))
    root = _parse(path.read_text(encoding="utf-8"))
    assert [o.get("data-op") for o in _ops(root)] == ['op "<1>" & \ufffd']


def test_render_is_stable(toy):
    assert render_svg(toy) == render_svg(toy)
    assert not re.search(r"0x[0-9a-f]{6,}", render_svg(toy))  # no object ids


def test_collapsed_view_of_an_uncompiled_graph_says_to_compile(resnet50_raw):
    from xgraph import XGraphError
    with pytest.raises(XGraphError, match="not compiled, so it has no device subgraphs"):
        render_svg(resnet50_raw, view="subgraphs")
    assert "collapsed" not in _parse(render_svg(resnet50_raw)).get("class")  # auto: the ops view
