"""The HTML views in a real headless Chromium (Debian's chromium + chromium-driver, driven by Selenium)."""
from __future__ import annotations

import os
import re
import shutil
import tempfile

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)),
    reason=f"browser tests need {CHROMIUM} and chromedriver (apt-get install chromium chromium-driver)")

BROWSER_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,900")


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in BROWSER_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="xgraph-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _errors(browser) -> list[dict]:
    return [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _load(browser, path) -> list[dict]:
    """Open `path`; the console errors it logged while loading."""
    browser.get(path.as_uri())
    return _errors(browser)


def _scene_transform(browser) -> tuple[float, float, float]:
    text = browser.find_element("id", "xg-scene").get_attribute("transform")
    x, y, k = map(float, re.fullmatch(r"translate\(([-\d.e]+),([-\d.e]+)\) scale\(([-\d.e]+)\)", text).groups())
    return x, y, k


@pytest.fixture(scope="module")
def resnet_page(tmp_path_factory, resnet50_compiled):
    from xgraph.view.html import write_html
    path = tmp_path_factory.mktemp("html") / "resnet50.html"
    write_html(resnet50_compiled, str(path))
    return path


@pytest.fixture
def toy_page(tmp_path, toy):
    from xgraph.view.html import write_html
    path = tmp_path / "toy.html"
    write_html(toy, str(path))
    return path


def test_page_loads_clean_with_one_node_per_op(browser, resnet_page, resnet50_compiled):
    assert _load(browser, resnet_page) == []
    ops = browser.find_elements("css selector", "#xg-canvas g.op")
    assert len(ops) == resnet50_compiled.get_op_num() == 176
    assert {o.get_attribute("data-device") for o in ops} == {"AICORE"}
    assert browser.title.startswith("resnet50")
    legend = browser.find_element("css selector", ".xg-legend").text
    assert "AICORE (176 ops)" in legend and "host/device copies: 0" in legend


def test_hover_shows_type_shapes_and_reason(browser, toy_page):
    from selenium.webdriver.common.action_chains import ActionChains
    assert _load(browser, toy_page) == []
    tip = browser.find_element("id", "xg-tooltip")
    assert not tip.is_displayed()
    op = browser.find_element("css selector", 'g.op[data-op="topk_like"]')
    ActionChains(browser).move_to_element(op).perform()
    assert tip.is_displayed()
    text = tip.text
    assert text.splitlines()[0] == "Abs topk_like"
    assert "AICORE: Abs with dtype float64 unsupported; AICPU: not in its op-info library" in text
    assert "CPU (subgraph_topk_like)" in text and "relu float32[1,2,4,4]" in text
    ActionChains(browser).move_to_element(browser.find_element("css selector", 'g.op[data-op="shape_op"]')).perform()
    assert 'AICORE: Neg <&> "quoted" not here' in tip.text  # shown as text, not parsed as markup
    ActionChains(browser).move_to_element(browser.find_element("id", "xg-search")).perform()
    assert not tip.is_displayed()
    assert _errors(browser) == []


def test_search_centres_and_highlights_an_op(browser, resnet_page):
    assert _load(browser, resnet_page) == []
    search = browser.find_element("id", "xg-search")
    search.send_keys("n150")
    target = browser.find_element("css selector", 'g.op[data-op="n150"]')
    assert "xg-hit" in target.get_attribute("class")
    assert browser.find_element("id", "xg-status").text.startswith("n150 (")
    assert len(browser.find_elements("css selector", "g.op.xg-hit")) == 1
    stage = browser.find_element("id", "xg-canvas").rect
    node = target.rect
    assert abs(node["x"] + node["width"] / 2 - (stage["x"] + stage["width"] / 2)) < 3
    assert abs(node["y"] + node["height"] / 2 - (stage["y"] + stage["height"] / 2)) < 3
    search.clear()
    search.send_keys("no such op")
    assert browser.find_element("id", "xg-status").text.startswith("no op named like")
    assert browser.find_elements("css selector", "g.op.xg-hit") == []
    assert _errors(browser) == []


def test_drag_pans_and_wheel_zooms(browser, resnet_page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
    assert _load(browser, resnet_page) == []
    canvas = browser.find_element("id", "xg-canvas")
    x0, y0, k0 = _scene_transform(browser)
    ActionChains(browser).move_to_element_with_offset(canvas, 300, 0).click_and_hold() \
        .move_by_offset(-40, -60).move_by_offset(-40, -60).release().perform()
    x1, y1, k1 = _scene_transform(browser)
    assert (round(x1 - x0), round(y1 - y0), k1) == (-80, -120, k0)
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas), 0, -300).perform()
    assert _scene_transform(browser)[2] > k1
    ActionChains(browser).scroll_from_origin(ScrollOrigin.from_element(canvas), 0, 600).perform()
    assert _scene_transform(browser)[2] < k1
    assert _errors(browser) == []


def test_compile_report_page(browser, tmp_path, toy):
    from selenium.webdriver.common.keys import Keys

    from xgraph.view.report_html import write_html_report
    path = tmp_path / "report.html"
    write_html_report(toy, str(path))
    assert _load(browser, path) == []
    assert len(browser.find_elements("css selector", "#xg-canvas g.op")) == 6
    rows = browser.find_elements("css selector", "#xg-op-table tbody tr")
    assert len(rows) == 6
    box = browser.find_element("id", "xg-op-filter")
    def shown():
        return [r.find_elements("tag name", "td")[1].text for r in rows if r.is_displayed()]

    box.send_keys("AICORE")  # on AICORE, or AICORE named in the reason
    assert shown() == ["conv", "relu", "topk_like", "add", "shape_op"]
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("smfc")
    assert shown() == ["softmax"]
    assert browser.find_element("id", "xg-op-count").text == "1 of 6"
    browser.find_element("css selector", 'a[data-goto-subgraph="subgraph_softmax"]').click()
    hit = browser.find_elements("css selector", "g.subgraph.xg-hit")
    assert [h.get_attribute("data-subgraph") for h in hit] == ["subgraph_softmax"]
    assert _errors(browser) == []


# -- the collapsed view ---------------------------------------------------------------------------
READABLE = (1600, 1000)


def _screen(browser) -> tuple[int, int]:
    """The size of a screenshot of the page, in pixels."""
    import io

    from PIL import Image
    return Image.open(io.BytesIO(browser.get_screenshot_as_png())).size


def _rect(el) -> tuple[float, float, float, float]:
    r = el.rect
    return r["x"], r["y"], r["width"], r["height"]


def _inside(inner, outer) -> bool:
    return (inner[0] >= outer[0] - 1 and inner[1] >= outer[1] - 1 and inner[0] + inner[2] <= outer[0] + outer[2] + 1
            and inner[1] + inner[3] <= outer[1] + outer[3] + 1)


@pytest.fixture
def readable(browser):
    """The viewport at exactly READABLE pixels (the window size would include the browser's frame)."""
    width, height = READABLE
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    yield browser
    browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def _visible_view(browser) -> str:
    return browser.execute_script("return window.xgraphView.shown()")


@pytest.fixture(scope="module")
def zoo_pages(tmp_path_factory):
    """ResNet50 (conv_ip plugin: 4 subgraphs) and DenseNet121 (act_npu plugin: 367 subgraphs) as HTML pages."""
    from pathlib import Path

    import onnx

    import xgraph
    from xgraph.view.html import write_html
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    plugins = str(Path(__file__).resolve().parents[2] / "plugins")
    folder = tmp_path_factory.mktemp("zoo_html")
    pages = {}
    for model, plugin in (("resnet50", "conv_ip"), ("densenet121", "act_npu")):
        compiled = xgraph.compile(light / f"light_{model}.onnx", {"plugins": plugin}, [plugins])
        path = folder / f"{model}.html"
        write_html(compiled, str(path))
        pages[model] = (path, compiled)
    return pages


@pytest.mark.parametrize("model, subgraphs", [("resnet50", 4), ("densenet121", 367)])
def test_large_models_open_collapsed_and_readable(readable, zoo_pages, model, subgraphs):
    browser = readable
    path, compiled = zoo_pages[model]
    assert _load(browser, path) == []
    assert _screen(browser) == READABLE
    assert _visible_view(browser) == "subgraphs"
    assert not browser.find_element("id", "xg-view-ops").is_displayed()
    boxes = browser.find_elements("css selector", "#xg-view-subgraphs g.sg-node")
    assert len(boxes) == subgraphs == compiled.get_root_subgraph().get_children_num()
    stage = _rect(browser.find_element("id", "xg-canvas"))
    shown = [b for b in boxes if _inside(_rect(b), stage)]
    assert len(shown) >= min(subgraphs, 4)  # the first boxes are on screen ...
    for b in shown:
        _, _, width, height = _rect(b)
        assert width >= 150 and height >= 36  # ... at a readable size (12 px titles or larger)
    name = shown[0].find_element("css selector", "text").rect
    assert name["height"] >= 11
    # no two boxes on screen overlap
    rects = [_rect(b) for b in shown]
    for i, a in enumerate(rects):
        for c in rects[i + 1:]:
            assert a[0] + a[2] <= c[0] + 1 or c[0] + c[2] <= a[0] + 1 or a[1] + a[3] <= c[1] + 1 or \
                c[1] + c[3] <= a[1] + 1
    assert _errors(browser) == []


def test_click_expands_a_subgraph_and_the_button_collapses_again(readable, zoo_pages):
    from selenium.webdriver.common.action_chains import ActionChains
    browser = readable
    path, compiled = zoo_pages["resnet50"]
    assert _load(browser, path) == []
    box = browser.find_element("css selector", '#xg-view-subgraphs g.sg-node[data-subgraph="subgraph_n10"]')
    ActionChains(browser).move_to_element(box).perform()
    tip = browser.find_element("id", "xg-tooltip")
    assert tip.text.splitlines()[0] == "subgraph subgraph_n10" and "168 (click to expand)" in tip.text
    box.click()
    assert _visible_view(browser) == "ops"
    assert browser.find_element("id", "xg-status").text == "subgraph subgraph_n10 (CONVIP, 168 ops)"
    hit = browser.find_elements("css selector", "#xg-view-ops g.subgraph.xg-hit")
    assert [h.get_attribute("data-subgraph") for h in hit] == ["subgraph_n10"]
    first = browser.find_element("css selector", '#xg-view-ops g.op[data-op="n4"]')  # its first op
    stage = _rect(browser.find_element("id", "xg-canvas"))
    assert _inside(_rect(first), stage) and _rect(first)[2] >= 100  # on screen, readable
    assert _screen(browser) == READABLE
    toggle = browser.find_element("id", "xg-view-toggle")
    assert toggle.text == "Show subgraphs"
    toggle.click()
    assert _visible_view(browser) == "subgraphs" and toggle.text == "Show ops"
    assert _errors(browser) == []


@pytest.mark.parametrize("model", ["resnet50", "densenet121"])
def test_subgraph_regions_do_not_overlap_as_drawn(browser, zoo_pages, model):
    path, _ = zoo_pages[model]
    assert _load(browser, path) == []
    browser.execute_script("window.xgraphView.showView('ops')")
    # the layout data, and the rectangles the browser actually drew (in scene coordinates)
    drawn = browser.execute_script("""
        return Array.prototype.map.call(document.querySelectorAll('#xg-view-ops g.subgraph'), function (g) {
          return [g.getAttribute('data-subgraph'), Array.prototype.map.call(g.querySelectorAll('.region rect'),
            function (r) { var b = r.getBBox(); return [b.x, b.y, b.width, b.height]; })];
        });""")
    data = browser.execute_script("return JSON.parse(document.getElementById('xg-data').textContent).boxes")
    assert [name for name, _ in drawn] == [b["name"] for b in data]
    for (name, rects), b in zip(drawn, data):
        assert [[round(v, 1) for v in r] for r in rects] == b["rects"], name
    cells = [(name, r) for name, rects in drawn for r in rects]
    cells.sort(key=lambda c: c[1][1])
    for i, (name, a) in enumerate(cells):  # sweep by top edge
        for other, c in cells[i + 1:]:
            if c[1] >= a[1] + a[3]:
                break
            if other != name:
                assert a[0] + a[2] <= c[0] or c[0] + c[2] <= a[0], (name, a, other, c)
    assert _errors(browser) == []


def test_small_graphs_open_on_the_ops_view(browser, toy_page):
    assert _load(browser, toy_page) == []
    assert _visible_view(browser) == "ops"
    assert browser.find_element("id", "xg-view-ops").is_displayed()
    assert not browser.find_element("id", "xg-view-subgraphs").is_displayed()
