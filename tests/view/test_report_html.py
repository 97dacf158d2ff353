"""The compile report page: summary per device, crossings, fallbacks by reason, ops, picture; self-contained."""
from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import xgraph
from xgraph.view.report_html import _fallback_report, render_html_report, write_html_report


class _Collect(HTMLParser):
    """Tags with their attributes, and the text of table cells."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _tags(text: str) -> list[tuple[str, dict]]:
    parser = _Collect()
    parser.feed(text)
    return parser.tags


def test_report_sections(toy, tmp_path):
    path = tmp_path / "report.html"
    write_html_report(toy, str(path))
    text = path.read_text(encoding="utf-8")
    for heading in ("Devices", "Host/device crossings", "Fallbacks: why ops did not get the cheapest device",
                    "Partition", "Device subgraphs", "Ops"):
        assert f"<h2>{heading}</h2>" in text
    assert '<span id="xg-report-crossings">2</span>' in text
    assert "AICORE: Neg &lt;&amp;&gt; &quot;quoted&quot; not here" in text  # escaped, not markup
    assert "chosen by plugin &#x27;smfc&#x27;" in text
    tags = _tags(text)
    assert sum(1 for tag, a in tags if tag == "g" and a.get("class") == "op") == 6
    op_rows = re.search(r'<table class="xg-table" id="xg-op-table">.*?</table>', text).group(0)
    assert op_rows.count("<tr>") == 1 + 6


def test_fallbacks_grouped_by_reason(resnet50_path):
    compiled = xgraph.compile(resnet50_path.parent / "light_bvlc_alexnet.onnx")  # grouped conv, LRN: not AICORE
    rep = xgraph.report(compiled)
    assert len(rep["fallbacks"]) >= 2
    text = render_html_report(compiled)
    table = re.search(r'<table class="xg-table" id="xg-fallbacks">.*?</table>', text).group(0)
    assert table.count("<tr>") == 1 + len(rep["fallbacks"])
    for group in rep["fallbacks"]:
        assert f"<td class=num>{group['count']}</td>" in table
        assert group["reason"] in html.unescape(table)


def test_estimated_times_are_shown_when_present(toy):
    root = toy.get_root_subgraph()
    assert "est. device time" not in render_html_report(toy).split("<h2>Partition</h2>")[0]
    root.find_child_subgraph_by_op("conv").set_attr("estimated_time_us", 40.0)
    root.find_child_subgraph_by_op("add").set_attr("estimated_time_us", 2.5)
    text = render_html_report(toy)
    summary = text.split("<h2>Host/device crossings</h2>")[0]
    assert "est. device time (µs)" in summary and "<td class=num>42.5</td>" in summary
    subgraphs = text.split("<h2>Device subgraphs</h2>")[1].split("<h2>")[0]
    assert "<td class=num>40.0</td>" in subgraphs and "<td class=num>2.5</td>" in subgraphs


def test_page_is_self_contained(toy):
    text = render_html_report(toy)
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", text)
    assert all(u in ("#", "data:,") for u in urls)
    assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", text)
    assert not [a for tag, a in _tags(text) if tag in ("script", "link", "img") and ("src" in a)]


def test_fallback_report_matches_the_report_module(toy):
    ours, theirs = _fallback_report(toy), xgraph.report(toy)
    for key in ("subgraphs", "devices", "crossings", "crossing_tensors", "fallbacks"):
        assert ours[key] == theirs[key], key
    assert [{k: o[k] for k in ("name", "type", "device", "subgraph", "reason")} for o in ours["ops"]] == \
           [{k: o[k] for k in ("name", "type", "device", "subgraph", "reason")} for o in theirs["ops"]]
