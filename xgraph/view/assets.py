"""The stylesheet and script inlined into every HTML view (no network, no CDN).

The script reads the node facts from `<script type="application/json" id="xg-data">` and
works on the SVG `#xg-canvas` whose `#xg-scene` group it pans (drag) and zooms (wheel).
Hovering an element with `data-index` (an op) or `data-sg-index` (a collapsed subgraph box)
shows its facts; `#xg-search` finds an op by name (exact, then substring; Enter steps through
the matches), centres and highlights it. `#xg-scene` holds `#xg-view-ops` and, for compiled
graphs, `#xg-view-subgraphs`; one is shown at a time (`#xg-view-toggle`, key v), and a click
on a subgraph box expands it: the op view, zoomed to that subgraph's region.
"""
from __future__ import annotations

CSS = """
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1b1b1b;
       background: #f5f6f8; }
h1 { font-size: 17px; margin: 0; }
h2 { font-size: 15px; margin: 22px 0 8px; }
.xg-swatch { display: inline-block; width: 12px; height: 12px; border-radius: 3px; margin-right: 6px;
             vertical-align: -1px; }
.xg-legend { display: flex; flex-wrap: wrap; gap: 4px 16px; margin: 6px 0 0; padding: 0; list-style: none; }
.xg-legend .xg-crossing-key { color: #e15759; font-weight: 600; }
.xg-picture { display: flex; flex-direction: column; min-height: 0; background: #fff;
              border: 1px solid #d6dae0; border-radius: 6px; overflow: hidden; }
.xg-toolbar { display: flex; align-items: center; gap: 8px; padding: 6px 8px; border-bottom: 1px solid #e3e6ea;
              background: #fafbfc; }
.xg-toolbar input { width: 260px; padding: 4px 8px; border: 1px solid #b9c0c8; border-radius: 4px; font: inherit; }
.xg-toolbar button { padding: 3px 10px; border: 1px solid #b9c0c8; border-radius: 4px; background: #fff;
                     font: inherit; cursor: pointer; }
.xg-status { color: #546e7a; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.xg-stage { position: relative; flex: 1; min-height: 0; }
#xg-canvas { display: block; width: 100%; height: 100%; cursor: grab; touch-action: none; user-select: none; }
#xg-canvas.xg-dragging { cursor: grabbing; }
#xg-canvas .op, #xg-canvas .io, #xg-canvas .sg-node { cursor: pointer; }
#xg-canvas .sg-node:hover rect { stroke: #111; stroke-width: 2.5px; }
#xg-canvas .subgraph.xg-hit .region { fill-opacity: 0.28; }
#xg-canvas .op:hover rect { stroke: #111; stroke-width: 2px; }
#xg-canvas .op.xg-hit rect { stroke: #ffb000; stroke-width: 5px; }
#xg-canvas .subgraph.xg-hit rect { stroke-width: 4px; }
#xg-tooltip { position: absolute; z-index: 10; max-width: 460px; padding: 8px 10px; pointer-events: none;
              background: rgba(255, 255, 255, 0.97); border: 1px solid #9aa5b1; border-radius: 6px;
              box-shadow: 0 3px 12px rgba(0, 0, 0, 0.18); font-size: 12px; }
#xg-tooltip .xg-tip-title { font-weight: 700; font-size: 13px; margin-bottom: 4px; word-break: break-all; }
#xg-tooltip dl { display: grid; grid-template-columns: auto 1fr; gap: 2px 8px; margin: 0; }
#xg-tooltip dt { color: #546e7a; }
#xg-tooltip dd { margin: 0; word-break: break-word; }
#xg-tooltip .xg-reason { font-weight: 600; }
table.xg-table { border-collapse: collapse; background: #fff; min-width: 40%; font-size: 13px; }
#xg-op-table { width: 100%; }
table.xg-table th, table.xg-table td { border: 1px solid #e0e3e7; padding: 3px 8px; text-align: left;
                                       vertical-align: top; }
table.xg-table th { background: #eef1f4; position: sticky; top: 0; }
table.xg-table td.num, table.xg-table th.num { text-align: right; }
"""

JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("xg-data").textContent);
  var svg = document.getElementById("xg-canvas");
  var scene = document.getElementById("xg-scene");
  var stage = svg.parentNode;
  var tip = document.getElementById("xg-tooltip");
  var search = document.getElementById("xg-search");
  var status = document.getElementById("xg-status");
  var MIN_ZOOM = 0.01, MAX_ZOOM = 8;
  var view = { x: 0, y: 0, k: 1 };
  var hits = [], hitAt = -1, marked = [];
  var views = data.views || { ops: { width: data.width, height: data.height } };
  var shown = data.view || "ops";
  var toggle = document.getElementById("xg-view-toggle");

  function showView(name) {
    if (!views[name]) { return; }
    shown = name;
    Array.prototype.forEach.call(scene.children, function (g) {
      if (g.id && g.id.indexOf("xg-view-") === 0) { g.style.display = g.id === "xg-view-" + name ? "" : "none"; }
    });
    svg.parentNode.parentNode.setAttribute("data-view", name);
    if (toggle) { toggle.textContent = name === "subgraphs" ? "Show ops" : "Show subgraphs"; }
  }

  function apply() {
    scene.setAttribute("transform", "translate(" + view.x + "," + view.y + ") scale(" + view.k + ")");
  }
  function clamp(k) { return Math.max(MIN_ZOOM, Math.min(MAX_ZOOM, k)); }
  function box() { return svg.getBoundingClientRect(); }

  function fit(all) {
    var size = views[shown], r = box(), k = clamp(Math.min(1, (r.width - 16) / size.width));
    if (all) { k = clamp(Math.min(k, (r.height - 16) / size.height)); }
    view.k = k;
    view.x = (r.width - size.width * k) / 2;
    view.y = size.height * k < r.height ? (r.height - size.height * k) / 2 : 8;
    apply();
  }
  function centreOn(x, y, k) {
    var r = box();
    view.k = clamp(k);
    view.x = r.width / 2 - x * view.k;
    view.y = r.height / 2 - y * view.k;
    apply();
  }

  var drag = null;
  svg.addEventListener("pointerdown", function (e) {
    if (e.button !== 0) { return; }
    drag = { x: e.clientX, y: e.clientY, vx: view.x, vy: view.y, id: e.pointerId, moved: false };
  });
  svg.addEventListener("pointermove", function (e) {
    if (!drag) { return; }
    var dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 3) { return; }
    if (!drag.moved) { drag.moved = true; svg.setPointerCapture(drag.id); svg.classList.add("xg-dragging"); hide(); }
    view.x = drag.vx + dx;
    view.y = drag.vy + dy;
    apply();
  });
  var dragged = false;
  function endDrag() {
    dragged = !!(drag && drag.moved);
    if (drag && drag.moved && svg.hasPointerCapture(drag.id)) { svg.releasePointerCapture(drag.id); }
    drag = null;
    svg.classList.remove("xg-dragging");
  }
  svg.addEventListener("pointerup", endDrag);
  svg.addEventListener("pointercancel", endDrag);
  svg.addEventListener("wheel", function (e) {
    e.preventDefault();
    var r = box(), cx = e.clientX - r.left, cy = e.clientY - r.top;
    var scale = e.deltaMode === 1 ? 0.05 : 0.0015;
    var k = clamp(view.k * Math.exp(-e.deltaY * scale));
    view.x = cx - (cx - view.x) * k / view.k;
    view.y = cy - (cy - view.y) * k / view.k;
    view.k = k;
    apply();
  }, { passive: false });

  function row(list, term, value, cls) {
    var dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = term;
    dd.textContent = value;
    if (cls) { dd.className = cls; }
    list.appendChild(dt);
    list.appendChild(dd);
  }
  function show(node, e) {
    tip.textContent = "";
    if (node.kind === "subgraph") { return showSubgraph(node, e); }
    var title = document.createElement("div");
    title.className = "xg-tip-title";
    title.textContent = node.type + " " + node.name;
    tip.appendChild(title);
    var list = document.createElement("dl");
    if (node.kind === "op") {
      row(list, "device", (node.device || "not placed") + (node.subgraph ? " (" + node.subgraph + ")" : ""));
      row(list, "why", node.reason, "xg-reason");
      if (node.kernel) { row(list, "kernel", node.kernel); }
    }
    (node.inputs || []).forEach(function (t) { row(list, "in", t); });
    (node.outputs || []).forEach(function (t) { row(list, "out", t); });
    (node.attributes || []).forEach(function (a) { row(list, "attr", a); });
    tip.appendChild(list);
    tip.hidden = false;
    place(e);
  }
  function place(e) {
    var r = stage.getBoundingClientRect(), x = e.clientX - r.left + 14, y = e.clientY - r.top + 14;
    if (x + tip.offsetWidth > r.width) { x = Math.max(0, e.clientX - r.left - tip.offsetWidth - 14); }
    if (y + tip.offsetHeight > r.height) { y = Math.max(0, e.clientY - r.top - tip.offsetHeight - 14); }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function showSubgraph(node, e) {
    var title = document.createElement("div");
    title.className = "xg-tip-title";
    title.textContent = "subgraph " + node.name;
    tip.appendChild(title);
    var list = document.createElement("dl");
    row(list, "device", node.device || "not placed");
    row(list, "ops", String(node.ops) + " (click to expand)");
    row(list, "runner", node.runner);
    if (node.estimated_time_us !== null && node.estimated_time_us !== undefined) {
      row(list, "est. time", node.estimated_time_us.toFixed(1) + " \u00b5s");
    }
    (node.inputs || []).slice(0, 8).forEach(function (t) { row(list, "in", t); });
    (node.outputs || []).slice(0, 8).forEach(function (t) { row(list, "out", t); });
    tip.appendChild(list);
    tip.hidden = false;
    place(e);
  }
  function hide() { tip.hidden = true; }
  function nodeOf(target) { return target && target.closest ? target.closest("[data-index],[data-sg-index]") : null; }
  function factsOf(el) {
    return el.hasAttribute("data-sg-index") ? data.sg_nodes[+el.getAttribute("data-sg-index")]
                                            : data.nodes[+el.getAttribute("data-index")];
  }
  scene.addEventListener("mouseover", function (e) {
    var el = nodeOf(e.target);
    if (el && !drag) { show(factsOf(el), e); }
  });
  scene.addEventListener("mousemove", function (e) { if (!tip.hidden) { place(e); } });
  scene.addEventListener("mouseout", function (e) { if (!nodeOf(e.relatedTarget)) { hide(); } });

  function unmark() {
    marked.forEach(function (el) { el.classList.remove("xg-hit"); });
    marked = [];
  }
  function mark(el) { el.classList.add("xg-hit"); marked.push(el); }
  function focusNode(index) {
    var node = data.nodes[index], el = scene.querySelector('[data-index="' + index + '"]');
    if (shown !== "ops") { showView("ops"); }
    unmark();
    if (el) { mark(el); }
    centreOn(node.x, node.y, Math.max(view.k, 1));
  }
  function find(query) {
    var q = query.trim().toLowerCase(), exact = [], partial = [];
    if (!q) { return []; }
    data.nodes.forEach(function (n, i) {
      if (n.kind !== "op") { return; }
      var name = n.name.toLowerCase();
      if (name === q) { exact.push(i); } else if (name.indexOf(q) >= 0) { partial.push(i); }
    });
    return exact.concat(partial);
  }
  function step(forward) {
    if (!hits.length) { return; }
    hitAt = (hitAt + (forward ? 1 : hits.length - 1)) % hits.length;
    var node = data.nodes[hits[hitAt]];
    focusNode(hits[hitAt]);
    status.textContent = node.name + " (" + node.type + ", " + (node.device || "not placed") + ")  " +
      (hitAt + 1) + " of " + hits.length;
  }
  function runSearch() {
    hits = find(search.value);
    hitAt = -1;
    if (hits.length) { step(true); return; }
    unmark();
    status.textContent = search.value.trim() ? "no op named like \u201c" + search.value.trim() + "\u201d" : "";
  }
  search.addEventListener("input", runSearch);
  search.addEventListener("keydown", function (e) {
    if (e.key === "Enter") { e.preventDefault(); step(!e.shiftKey); }
    if (e.key === "Escape") { search.value = ""; runSearch(); }
  });
  document.getElementById("xg-fit").addEventListener("click", function () { fit(true); });
  document.getElementById("xg-actual").addEventListener("click", function () {
    var r = box();
    centreOn((r.width / 2 - view.x) / view.k, (r.height / 2 - view.y) / view.k, 1);
  });
  document.addEventListener("keydown", function (e) {
    if (e.target === search) { return; }
    if (e.key === "/") { e.preventDefault(); search.focus(); }
    if (e.key === "f") { fit(true); }
  });
  function expand(name) {
    var b = data.boxes.filter(function (x) { return x.name === name; })[0];
    if (!b) { return false; }
    showView("ops");
    hide();
    // the whole region when it fits at a readable size, else its full width from its top
    var r = box(), k = Math.min(1, (r.width - 40) / b.bounds[2]);
    var whole = Math.min(k, (r.height - 40) / b.bounds[3]);
    unmark();
    Array.prototype.forEach.call(scene.querySelectorAll(".subgraph"), function (el) {
      if (el.getAttribute("data-subgraph") === name) { mark(el); }
    });
    if (whole >= 0.5 || whole === k) {
      centreOn(b.bounds[0] + b.bounds[2] / 2, b.bounds[1] + b.bounds[3] / 2, whole);
    } else {
      centreOn(b.bounds[0] + b.bounds[2] / 2, b.bounds[1] + (r.height / 2 - 20) / k, k);
    }
    status.textContent = "subgraph " + name + " (" + b.device + ", " + b.ops + " ops)";
    return true;
  }
  Array.prototype.forEach.call(document.querySelectorAll("[data-goto-subgraph]"), function (link) {
    link.addEventListener("click", function (e) {
      e.preventDefault();
      if (expand(link.getAttribute("data-goto-subgraph"))) { svg.scrollIntoView({ block: "nearest" }); }
    });
  });
  scene.addEventListener("click", function (e) {
    var el = e.target && e.target.closest ? e.target.closest(".sg-node") : null;
    if (el && !dragged) { expand(el.getAttribute("data-subgraph")); }
  });
  function switchView() {
    showView(shown === "ops" ? "subgraphs" : "ops");
    unmark();
    fit(true);
  }
  if (toggle) { toggle.addEventListener("click", switchView); }
  document.addEventListener("keydown", function (e) {
    if (e.target !== search && e.key === "v" && views.subgraphs) { switchView(); }
  });
  window.xgraphView = { fit: fit, centreOn: centreOn, find: find, view: view, expand: expand,
                       showView: showView, shown: function () { return shown; } };
  function fitReadable() {
    // the whole picture when it stays readable (half size or more), else its full width from the top
    var size = views[shown], r = box();
    var k = Math.min(1, (r.width - 16) / size.width, (r.height - 16) / size.height);
    fit(k >= 0.5);
  }
  showView(shown);
  fitReadable();
})();
"""

__all__ = ["CSS", "JS"]
