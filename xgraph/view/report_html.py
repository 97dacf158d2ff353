"""The compile report as one self-contained HTML page (`xcompile --report out.html`, `xgraph.write_html`).

A header names the model file, the xgraph version, the compile options and the plugin
chain (each plugin with its device, the ops and subgraphs it took, the templates it tried
and its time). Sections: per-device summary (with estimated device time when the runtime recorded one),
host/device crossings, ops that did not get the cheapest device grouped by reason, the
interactive partition picture, the device subgraphs, and every op with its reason.
The content comes from `xgraph.report(compiled)`; without the report module, the same
keys are computed from the graph.
"""
from __future__ import annotations

from typing import Any

from xgraph.ir.arguments import require_graph, require_path
from xgraph.ir import Graph
from xgraph.view.describe import crossing_copies, device_subgraphs, estimated_time_us, placement, subgraph_device, \
    subgraph_runner
from xgraph.view.html import legend_html, page, picture_html
from xgraph.view.palette import device_colour, device_colours
from xgraph.view.scene import build_scene, layout_scene
from xgraph.view.svg import summary_line, xml

#: Op names listed per fallback group before the rest fold away.
SHOWN_OPS = 12

_REPORT_CSS = """
body { padding: 14px 18px 40px; max-width: 1500px; margin: 0 auto; }
.xg-report .xg-picture { height: 78vh; }
.xg-muted { color: #607080; }
details summary { cursor: pointer; color: #37474f; }
#xg-op-filter { width: 320px; padding: 4px 8px; margin-bottom: 6px; border: 1px solid #b9c0c8; border-radius: 4px;
                font: inherit; }
.xg-scroll { max-height: 70vh; overflow: auto; border: 1px solid #e0e3e7; }
code { font-size: 12px; }
table.xg-facts th { text-align: left; width: 140px; }
"""

_FILTER_JS = """
(function () {
  "use strict";
  var box = document.getElementById("xg-op-filter");
  if (!box) { return; }
  var rows = Array.prototype.slice.call(document.querySelectorAll("#xg-op-table tbody tr"));
  var count = document.getElementById("xg-op-count");
  box.addEventListener("input", function () {
    var q = box.value.trim().toLowerCase(), shown = 0;
    rows.forEach(function (r) {
      var hit = !q || r.textContent.toLowerCase().indexOf(q) >= 0;
      r.hidden = !hit;
      shown += hit ? 1 : 0;
    });
    count.textContent = shown + " of " + rows.length;
  });
})();
"""


def _fallback_report(compiled: Graph) -> dict[str, Any]:
    """The report keys this page uses, computed from the graph alone."""
    where = placement(compiled)
    ops = [{"name": op.name, "type": op.type, "device": where[op][0], "subgraph": where[op][1],
            "reason": str(op.get_attr("placement_reason")) if op.is_annotation("placement_reason") else "",
            "kernel": str(op.get_attr("kernel")) if op.is_annotation("kernel") else ""} for op in compiled.toposort()]
    subgraphs = [{"name": sg.name, "device": subgraph_device(sg), "runner": subgraph_runner(sg),
                  "ops": [op.name for op in sg.toposort()], "inputs": [t.name for t in sg.get_input_tensors()],
                  "outputs": [t.name for t in sg.get_output_tensors()]} for sg in device_subgraphs(compiled)]
    devices: dict[str, dict[str, int]] = {}
    for sg in subgraphs:
        entry = devices.setdefault(sg["device"], {"subgraphs": 0, "ops": 0})
        entry["subgraphs"] += 1
        entry["ops"] += len(sg["ops"])
    groups: dict[tuple[str, str], list[str]] = {}
    for o in ops:
        if o["reason"]:
            groups.setdefault((o["device"], o["reason"]), []).append(o["name"])
    fallbacks = [{"device": d, "reason": r, "count": len(n), "ops": n}
                 for (d, r), n in sorted(groups.items(), key=lambda item: -len(item[1]))]
    copies = crossing_copies(compiled)
    return {"ops": ops, "subgraphs": subgraphs, "devices": devices, "crossings": len(copies),
            "crossing_tensors": copies, "fallbacks": fallbacks,
            "reference_ops": [o for o in ops if o["kernel"] == "reference"]}


def report_data(compiled: Graph) -> dict[str, Any]:
    """`xgraph.report(compiled)`, or the same keys computed here when the report module is absent."""
    try:
        from xgraph.compiler.report import report
    except ModuleNotFoundError as e:
        if e.name != "xgraph.compiler.report":
            raise
        return _fallback_report(compiled)
    return report(compiled)


def _swatch(device: str, colours: dict[str, str] | None = None) -> str:
    colour = (colours or {}).get(device) or device_colour(device)
    return f'<span class="xg-swatch" style="background:{colour}"></span>{xml(device or "-")}'


def _table(headers: list[str], rows: list[list[str]], numeric: tuple[int, ...] = (), attrs: str = "") -> str:
    """An HTML table; columns in `numeric` are right-aligned."""
    head = "".join(f'<th{" class=num" if i in numeric else ""}>{xml(h)}</th>' for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(f'<td{" class=num" if i in numeric else ""}>{cell}</td>'
                                    for i, cell in enumerate(row)) + "</tr>" for row in rows)
    return f'<table class="xg-table"{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _names(names: list[str]) -> str:
    shown = ", ".join(xml(n) for n in names[:SHOWN_OPS])
    if len(names) <= SHOWN_OPS:
        return shown
    rest = ", ".join(xml(n) for n in names[SHOWN_OPS:])
    return f"{shown} <details><summary>{len(names) - SHOWN_OPS} more</summary>{rest}</details>"


def _time(us: float | None) -> str:
    return "" if us is None else f"{us:.1f}"


def device_section(rep: dict[str, Any], times: dict[str, float | None], colours: dict[str, str] | None = None) -> str:
    """Per device: subgraphs, ops, ops on reference kernels, estimated device time."""
    reference: dict[str, int] = {}
    for o in rep.get("reference_ops", []):
        reference[o["device"]] = reference.get(o["device"], 0) + 1
    show_time = any(t is not None for t in times.values())
    rows = []
    for device, counts in rep["devices"].items():
        row = [_swatch(device, colours), str(counts["subgraphs"]), str(counts["ops"]), str(reference.get(device, 0))]
        if show_time:
            total = [times[sg["name"]] for sg in rep["subgraphs"]
                     if sg["device"] == device and times.get(sg["name"]) is not None]
            row.append(_time(sum(total)) if total else "")
        rows.append(row)
    headers = ["device", "subgraphs", "ops", "ops on reference kernels"] + (["est. device time (µs)"] * show_time)
    return f'<h2>Devices</h2>{_table(headers, rows, (1, 2, 3, 4))}'


def crossing_section(rep: dict[str, Any]) -> str:
    """How many host/device copies the graph runner makes per run (as its stats count them), and of which tensors."""
    copies = rep.get("crossing_tensors", [])
    per_run = rep.get("copies_per_run") or {"total": rep["crossings"], "crossings": rep["crossings"],
                                            "graph_inputs": 0, "graph_outputs": 0}
    total = per_run["total"]
    text = (f'<p><span id="xg-report-copies">{total}</span> host/device cop{"y" if total == 1 else "ies"} per run: '
            f'<span id="xg-report-crossings">{per_run["crossings"]}</span> between subgraphs (a host (CPU) subgraph '
            f'and device memory), {per_run["graph_inputs"]} graph input(s) copied in and {per_run["graph_outputs"]} '
            f'graph output(s) copied out of device memory.</p>')
    if not copies:
        return f"<h2>Host/device crossings</h2>{text}"
    rows = [[xml(c["tensor"]), xml(c["direction"]), xml(c["from"]), xml(", ".join(c["to"]))] for c in copies]
    return f'<h2>Host/device crossings</h2>{text}{_table(["tensor", "direction", "from", "to"], rows)}'


def _plugin_ops(rep: dict[str, Any]) -> set[str]:
    """Names of the ops in subgraphs a plugin took."""
    taken = {name for run in rep.get("plugins") or [] for name in run.get("subgraphs", [])}
    return {op for sg in rep.get("subgraphs", []) if sg["name"] in taken for op in sg["ops"]}


def plugin_choice_section(rep: dict[str, Any], colours: dict[str, str] | None = None) -> str:
    """Ops the plugins chose (not fallbacks: a plugin asked for them), grouped by (device, reason)."""
    chosen = _plugin_ops(rep)
    groups = [f for f in rep.get("fallbacks", []) if chosen.issuperset(f["ops"])]
    if not groups:
        return ""
    rows = [[_swatch(f["device"], colours), str(f["count"]), xml(f["reason"]), _names(f["ops"])] for f in groups]
    table = _table(["device", "ops", "reason", "which"], rows, (1,), ' id="xg-plugin-choices"')
    return f'<h2>Plugin choices: ops the plugins took</h2>{table}'


def fallback_section(rep: dict[str, Any], colours: dict[str, str] | None = None) -> str:
    """Ops placement did not give the cheapest device, grouped by (device, reason), largest group first (ops a
    plugin chose are listed apart, by `plugin_choice_section`)."""
    chosen = _plugin_ops(rep)
    groups = [f for f in rep.get("fallbacks", []) if not chosen.issuperset(f["ops"])]
    if not groups:
        return "<h2>Fallbacks</h2><p>Every op placement placed got its first-choice device.</p>"
    rows = [[_swatch(f["device"], colours), str(f["count"]), xml(f["reason"]), _names(f["ops"])] for f in groups]
    table = _table(["device", "ops", "reason", "which"], rows, (1,), ' id="xg-fallbacks"')
    return f'<h2>Fallbacks: why ops did not get the cheapest device</h2>{table}'


def subgraph_section(rep: dict[str, Any], times: dict[str, float | None], colours: dict[str, str] | None = None) -> str:
    """Every device subgraph in topological order (with its estimated device time when any is known)."""
    show_time = any(t is not None for t in times.values())
    rows = [[f'<a href="#" data-goto-subgraph="{xml(sg["name"])}">{xml(sg["name"])}</a>', _swatch(sg["device"], colours),
             xml(", ".join(f"{m}={n}" for m, n in sg["runner"].items())), str(len(sg["ops"])),
             _names(sg["inputs"]), _names(sg["outputs"])] + [_time(times.get(sg["name"]))] * show_time
            for sg in rep["subgraphs"]]
    headers = ["subgraph", "device", "runner", "ops", "inputs", "outputs"] + ["est. device time (µs)"] * show_time
    return f'<h2>Device subgraphs</h2>{_table(headers, rows, (3, 6))}'


def op_section(rep: dict[str, Any], colours: dict[str, str] | None = None) -> str:
    """Every op in topological order with its device, subgraph, kernel and reason; filterable."""
    rows = [[str(i), xml(o["name"]), xml(o["type"]), _swatch(o["device"], colours), xml(o["subgraph"]),
             xml(o.get("kernel", "")), xml(o["reason"])] for i, o in enumerate(rep["ops"])]
    table = _table(["#", "op", "type", "device", "subgraph", "kernel", "reason"], rows, (0,), ' id="xg-op-table"')
    return (f'<h2>Ops</h2><input id="xg-op-filter" type="search" placeholder="filter ops (name, type, device, '
            f'reason)"> <span id="xg-op-count" class="xg-muted">{len(rows)} of {len(rows)}</span>'
            f'<div class="xg-scroll">{table}</div>')


def header_section(rep: dict[str, Any], model: str | None, colours: dict[str, str] | None = None) -> str:
    """Model path, xgraph version, compile options and the plugin chain."""
    import json

    from xgraph import __version__
    options = json.dumps(rep.get("options") or {}, sort_keys=True)
    facts = [("model", xml(model) if model else '<span class="xg-muted">(not recorded)</span>'),
             ("xgraph", xml(__version__)), ("compile options", f"<code>{xml(options)}</code>")]
    rows = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts)
    plugins = rep.get("plugins") or []
    if not plugins:
        chain = '<p id="xg-plugin-chain">Plugin chain: none (the built-in placement placed every op).</p>'
    else:
        body = []
        for run in plugins:
            tried = ", ".join(f"{t['name']} ({t['matches']})" for t in run.get("templates", [])) or "-"
            seconds = run.get("seconds")
            declined = "; ".join(f"{d['subgraph']} ({len(d['ops'])} ops): {d['reason']}"
                                 for d in run.get("declined", [])) or "-"
            body.append([xml(run["name"]), _swatch(run["device"], colours), str(run["ops"]), str(len(run["subgraphs"])),
                         xml(tried), xml(declined), "" if seconds is None else f"{seconds:.3f}"])
        chain = ("<h2>Plugin chain</h2>" +
                 _table(["plugin", "device", "ops taken", "subgraphs", "templates tried (matches)", "declined", "seconds"],
                        body, (2, 3, 6), ' id="xg-plugin-chain"'))
    return f'<table class="xg-table xg-facts" id="xg-header">{rows}</table>{chain}'


def render_html_report(compiled: Graph, model: str | None = None) -> str:
    """The compile report page of `compiled` (`model`: the model file's path, shown in the header)."""
    from xgraph.view.collapsed import choose_view
    rep = report_data(compiled)
    times = {sg.name: estimated_time_us(sg) for sg in device_subgraphs(compiled)}
    scene = build_scene(compiled)
    view = choose_view(compiled)
    colours = device_colours(scene.device_ops)
    body = (f'<div class="xg-report"><h1>Compile report: {xml(summary_line(scene))}</h1>'
            f'{header_section(rep, model, colours)}{device_section(rep, times, colours)}{crossing_section(rep)}'
            f'{plugin_choice_section(rep, colours)}{fallback_section(rep, colours)}'
            f'<h2>Partition</h2>{legend_html(scene)}{picture_html(scene, layout_scene(scene), compiled, view)}'
            f'{subgraph_section(rep, times, colours)}{op_section(rep, colours)}</div>')
    return page(f"{compiled.name} \u2014 xgraph compile report", body, _REPORT_CSS, _FILTER_JS)


def write_html_report(compiled: Graph, path: str, model: str | None = None) -> None:
    """Write the compile report of `compiled` as a self-contained HTML page to `path` (atomically)."""
    from xgraph.view.files import write_text
    require_graph(compiled, "xgraph.write_html", "compiled", compiled=True)
    require_path(path, "xgraph.write_html")
    write_text(path, render_html_report(compiled, model))


__all__ = ["render_html_report", "report_data", "write_html_report"]
