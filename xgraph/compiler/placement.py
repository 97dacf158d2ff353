"""Device placement: propose a device (with the reason) for every op no plugin took, then apply it.

`propose_placement` is pure. It works on the unassigned depth-1 children of the root (one
op each after `create_child_subgraph`, unless a plugin merged some without taking them):

1. **First fit.** Devices are tried in cost order (cheapest first); a child goes to the
   first device whose op-info library accepts all its ops. The reason recorded for an op
   says why every cheaper device refused it ("" when the first choice took it). With
   ``fallback: "cpu"`` the host takes what nobody accepts; with ``"error"`` such ops are a
   PartitionError listing each op and every device's refusal.
2. **Small islands.** With ``min_subgraph_ops: n``, every device-memory subgraph the merge
   would form (`group_children`, per device) with fewer than n ops goes back to the host, unless
   that adds host/device copies (an island between device-memory neighbours): then it stays,
   and its reason says how many copies the move would have added.
3. **No ping-pong.** Every host island (connected host ops) whose ops a device-memory
   device also accepts moves back to the device side when that strictly reduces the
   tensors crossing between host and device memory. So a small device island between
   device ops (a shape computation such as Shape -> Gather -> Unsqueeze -> Concat feeding
   a Reshape) stays on the device even when it is smaller than min_subgraph_ops: sending
   it to the host would cost two copies to save one launch.

`apply_placement` is the one place that mutates: it merges each device's children with
`group_children` and sets "device"/"runner" on the subgraphs and "device"/"placement_reason"
annotations on the ops. Before proposing, `bind_nested_graph_inputs` merges every op whose
nested graphs (If/Loop/Scan bodies) read tensors by name with those tensors' producers: such
reads are invisible edges, and a runner only sees what its own subgraph holds.
"""
from __future__ import annotations

from itertools import repeat
from typing import TYPE_CHECKING, Any, Mapping

from xgraph.errors import GraphError, PartitionError
from xgraph.compiler.checks import Verdict
from xgraph.ir.dim_ranges import DimRanges
from xgraph.partition.merge import group_children
from xgraph.compiler.options import CompileOptions, parse_options
from xgraph.compiler.prepare import outer_scope_inputs
from xgraph.compiler.support import op_info
from xgraph.compiler.verdicts import PlacementUnit, Signatures, VerdictMemo
from xgraph.compiler.islands import count_copies, count_crossings, demote_small_islands, promote_host_islands
from xgraph.devices import DeviceSpec
from xgraph.ir import Subgraph

if TYPE_CHECKING:
    from xgraph.ir import Graph, Op

Proposal = dict["Op", tuple[str, str]]


def candidate_devices(devices: Mapping[str, DeviceSpec], options: CompileOptions) -> tuple[list[DeviceSpec], DeviceSpec | None]:
    """(devices first fit tries, cheapest first; the host fallback, or None under fallback "error").

    Devices without an op-info library (a plugin's free-text device) are never tried: their
    plugin places their ops. Under fallback "error" the host is tried only when "devices"
    names it explicitly.
    """
    placeable = [s for s in devices.values() if s.ops.rules or s.ops.any_op is not None]
    if options.devices is not None:
        chosen = [devices[name] for name in options.devices if name in devices]
        chosen = [s for s in chosen if s in placeable]
    else:
        chosen = [s for s in placeable if options.fallback == "cpu" or not s.is_host]
    chosen.sort(key=lambda s: (s.cost_rank, s.name))
    host = None
    if options.fallback == "cpu":
        hosts = sorted((s for s in placeable if s.is_host), key=lambda s: (s.cost_rank, s.name))
        if not hosts:
            raise PartitionError("fallback is 'cpu' but no host device is registered; register one (memory = "
                                 "\"host\") or use fallback \"error\"")
        host = hosts[0]
    return chosen, host


def _bare(device: str, reason: str) -> str:
    prefix = f"{device}: "
    return reason[len(prefix):] if reason.startswith(prefix) else reason


def join_refusals(refusals: list[tuple[str, str]]) -> str:
    """"AICORE, AICPU: X is not in its op-info library; DVPP: ..." from (device, reason) pairs in cost order."""
    if not refusals:
        return ""
    merged: list[tuple[list[str], str]] = []
    for device, reason in refusals:
        bare = _bare(device, reason)
        if merged and merged[-1][1] == bare:
            merged[-1][0].append(device)
        else:
            merged.append(([device], bare))
    return "; ".join(f"{', '.join(names)}: {bare}" for names, bare in merged)


def _reason(unit: PlacementUnit, op: "Op", cheaper: list[DeviceSpec]) -> str:
    """Why each device in `cheaper` did not take the unit, for this op."""
    refusals = []
    for spec in cheaper:
        v = unit.verdict(spec.name, op)
        if not v.ok:
            refusals.append((spec.name, v.reason))
        else:
            other = next(o for o in unit.ops if not unit.verdict(spec.name, o).ok)
            refusals.append((spec.name, f"refused {other.name!r}, which shares its subgraph"))
    return join_refusals(refusals)


def _memo(graph: "Graph", specs: list[DeviceSpec], options: CompileOptions, signatures: Signatures | None,
          dims: DimRanges) -> VerdictMemo:
    """One verdict memo over `specs`' op-info checks (one check per op signature and device)."""
    checks = {s.name: op_info(s, options.precision_mode, dims) for s in specs}
    return VerdictMemo(checks, signatures if signatures is not None else Signatures(graph))


def _units(graph: "Graph", specs: list[DeviceSpec], options: CompileOptions,
           signatures: Signatures | None, dims: DimRanges, ordered: bool = True) -> list[PlacementUnit]:
    """The unassigned children in dependency order (`ordered`), else in the order of their first ops (which
    costs no walk over the links); verdicts come from one memo (one check per op signature)."""
    memo = _memo(graph, specs, options, signatures, dims)
    root = graph.get_root_subgraph()
    children = graph.index().children_in_op_order(root, graph.get_ops()) if not ordered else []
    if len(children) != root.get_children_num():  # ordered, or a child without ops
        children = root.toposort_child_subgraph()
    children, op_lists = graph.index().unlabelled_children(children, "device")
    units = list(map(PlacementUnit, children, op_lists, repeat(memo)))
    memo.sign([op for unit in units for op in unit.ops])  # every op signed in one bulk pass
    return units


def _fit(unit: PlacementUnit, candidates: list[DeviceSpec], host: DeviceSpec | None) -> tuple[str | None, tuple]:
    """(device, the reason per op of the unit, in `unit.ops` order) by first fit; (None, ()) when no candidate
    accepts and there is no host."""
    for i, spec in enumerate(candidates):
        if unit.accepts(spec.name):
            return spec.name, tuple(_reason(unit, op, candidates[:i]) for op in unit.ops)
    if host is None:
        return None, ()
    reasons = []
    for op in unit.ops:
        refusals = [(s.name, unit.verdict(s.name, op).reason) for s in candidates
                    if s is not host and not unit.verdict(s.name, op).ok]
        if not unit.verdict(host.name, op).ok:
            refusals.append((host.name, unit.verdict(host.name, op).reason +
                             " (placed there anyway: fallback is cpu)"))
        reasons.append(join_refusals(refusals))
    return host.name, tuple(reasons)


def _first_fit(units: list[PlacementUnit], candidates: list[DeviceSpec],
               host: DeviceSpec | None) -> tuple[dict, list[str]]:
    """First fit per unit. A one-op unit's (device, reason) follows from its op's verdicts alone, so it is
    worked out once per op signature (unless a verdict quoted a tensor name of that op)."""
    choice: dict[PlacementUnit, tuple[str, tuple[str, ...]]] = {}
    failures = []
    single: dict[int, tuple[str, tuple[str]]] = {}  # signature -> the choice of its one-op units (one shared tuple)
    signatures = units[0].memo.signatures([unit.ops[0] for unit in units]) if units else []
    for unit, sig in zip(units, signatures):
        if len(unit.ops) == 1:
            hit = single.get(sig)
            if hit is not None:
                choice[unit] = hit
                continue
        else:
            sig = None
        device, reasons = _fit(unit, candidates, host)
        if device is None:
            failures += [f"{op.name!r} ({op.type}): {_reason(unit, op, candidates) or 'no device is allowed'}"
                         for op in unit.ops]
            continue
        choice[unit] = (device, reasons)
        if sig is not None and not unit.memo.is_specific(unit.ops[0]):
            single[sig] = choice[unit]
    return choice, failures


def _hull(sources: list["Op"], target: "Op") -> set["Op"]:
    """`sources`, `target` and every op on a path from a source to the target (a convex set)."""
    def reach(start: list["Op"], step) -> set["Op"]:
        seen: set["Op"] = set()
        stack = list(start)
        while stack:
            op = stack.pop()
            if op not in seen:
                seen.add(op)
                stack.extend(step(op))
        return seen

    return (reach(sources, lambda op: op.get_fanout_ops()) & reach([target], lambda op: op.get_input_ops())) | \
        set(sources) | {target}


def bind_nested_graph_inputs(graph: "Graph") -> list["Subgraph"]:
    """Merge each op whose nested graphs read graph tensors by name with their producers (and the ops between)
    into one unassigned child, so placement keeps them on one device in one subgraph. Returns the merged children."""
    root = graph.get_root_subgraph()
    merged: list["Subgraph"] = []
    if not graph.index().nested_read_tensors():
        return merged  # the usual case: no nested graph reads anything from outside (known without a walk)
    for op in graph.toposort():
        producers = [t.producer for t in outer_scope_inputs(op) if t.producer is not None]
        if not producers:
            continue
        children = {root.find_child_subgraph_by_op(o) for o in _hull(producers, op)}
        if len(children) == 1 or any(c.has_attr("device") for c in children):
            continue  # already together, or a plugin took part of it (its runner must cope)
        try:
            merged.append(root.merge_children(children))
        except GraphError as e:
            raise PartitionError(f"op {op.name!r} ({op.type}) reads {[t.name for t in outer_scope_inputs(op)]} from "
                                 f"its nested graphs, so it must share a subgraph with their producers, but: {e}") from e
    return merged


def _propose(graph: "Graph", devices: Mapping[str, DeviceSpec], options: Any, signatures: Signatures | None,
             dims: DimRanges, ordered: bool = True
             ) -> tuple[list[PlacementUnit], dict[PlacementUnit, tuple[str, tuple[str, ...]]]]:
    """(the units, {unit: (device, the reason per op in `unit.ops` order)}): `propose_placement`'s decisions. The units come in
    dependency order when `ordered`; else in whatever order let first fit skip the walk (its decisions do
    not depend on the order; the failure message and the host islands are worked out in dependency order)."""
    options = parse_options(options, devices)
    candidates, host = candidate_devices(devices, options)
    specs = candidates + ([host] if host is not None and host not in candidates else [])
    units = _units(graph, specs, options, signatures, dims, ordered)
    choice, failures = _first_fit(units, candidates, host)
    if failures and not ordered:  # the message lists them in dependency order
        units = _in_dependency_order(graph, units)
        choice, failures = _first_fit(units, candidates, host)
    if failures:
        shown = " | ".join(failures[:50]) + (f" | ... and {len(failures) - 50} more" if len(failures) > 50 else "")
        raise PartitionError(f"fallback is 'error' and no allowed device accepts {len(failures)} op(s): {shown}. "
                             "Allow the host with fallback \"cpu\", add a device to \"devices\", or place these ops "
                             "with a plugin")
    demote_small_islands(graph, units, choice, devices, host, options.min_subgraph_ops)  # any order of units
    if not ordered and host is not None and any(device == host.name for device, _ in choice.values()):
        units = _in_dependency_order(graph, units)  # host islands are decided in dependency order
    promote_host_islands(graph, units, choice, candidates, devices, host, _reason)
    return units, choice


def _in_dependency_order(graph: "Graph", units: list[PlacementUnit]) -> list[PlacementUnit]:
    rank = {child: i for i, child in enumerate(graph.get_root_subgraph().toposort_child_subgraph())}
    return sorted(units, key=lambda unit: rank[unit.child])


def propose_placement(graph: "Graph", devices: Mapping[str, DeviceSpec],
                      options: "CompileOptions | Mapping[str, Any] | str | None" = None, *,
                      signatures: Signatures | None = None, dims: DimRanges | None = None) -> Proposal:
    """{op: (device, reason)} for every op of an unassigned child; pure. PartitionError under fallback "error".

    Devices are asked lazily, cheapest first, and each device's op-info check runs once per
    distinct op signature (`xgraph.compiler.verdicts`); `signatures` lets a caller share the
    signatures with later stages. `dims`: the ranges of the dynamic dims (prepare's), which an
    op-info rule's `dynamic_range` checks (None: no range given, every dynamic dim unbounded).
    Cost: O(V + E) signing, one check per (signature, device asked), plus one `group_children` when
    min_subgraph_ops > 1: O(V * D + (V + E) log V) at worst.

        >>> g = Graph.from_onnx("net.onnx"); g.get_root_subgraph().create_child_subgraph()  # doctest: +SKIP
        >>> propose_placement(g, get_devices(), {"devices": "aicpu,cpu"})[g.get_op("conv")]  # doctest: +SKIP
        ('AICPU', '')
    """
    units, choice = _propose(graph, devices, options, signatures, dims if dims is not None else DimRanges())
    proposal: Proposal = {}
    for unit in units:
        device, reasons = choice[unit]
        for op, reason in zip(unit.ops, reasons):
            proposal[op] = (device, reason)
    return proposal


def place(graph: "Graph", devices: Mapping[str, DeviceSpec],
          options: "CompileOptions | Mapping[str, Any] | str | None" = None, *,
          signatures: Signatures | None = None, dims: DimRanges | None = None) -> list["Subgraph"]:
    """`apply_placement(graph, propose_placement(graph, devices, options), devices)` in one step (what compile
    runs): the decisions go straight to the merge and the annotations, without a proposal to build and check.
    Under ``"placement": "latency"`` or ``"throughput"`` the solver decides instead of first fit
    (`xgraph.compiler.cost_placement`), and the graph attr "placement_estimate" records its arithmetic.
    `dims`: as for `propose_placement`; the cost model also sizes the dynamic dims from them."""
    options = parse_options(options, devices)
    dims = dims if dims is not None else DimRanges()
    units, choice = _propose(graph, devices, options, signatures, dims, ordered=False)
    if options.placement != "first_fit":
        return _place_by_cost(graph, devices, options, units, choice, dims)
    decisions = list(map(choice.__getitem__, units))
    labels = dict(zip([unit.child for unit in units], [device for device, _ in decisions]))
    ops = [op for unit in units for op in unit.ops]
    placed = [device for device, why in decisions for _ in why]
    reasons = [reason for _, why in decisions for reason in why]
    return _apply(graph, labels, ops, placed, reasons, devices)


def _place_by_cost(graph: "Graph", devices: Mapping[str, DeviceSpec], options: CompileOptions,
                   units: list[PlacementUnit], choice: dict, dims: DimRanges) -> list["Subgraph"]:
    """The solver's split of `units` (first fit's verdicts say which devices may take each), plugin subgraphs fixed."""
    from xgraph.compiler.cost_model import Unit
    from xgraph.compiler.cost_placement import place_by_cost, plugin_units
    candidates, host = candidate_devices(devices, options)
    order = {child: i for i, child in enumerate(graph.get_root_subgraph().toposort_child_subgraph())}

    def allowed(unit: PlacementUnit) -> list[DeviceSpec]:
        specs = [spec for spec in candidates if unit.accepts(spec.name)]
        return specs + ([host] if host is not None and host not in specs else [])

    def offer(child: "Subgraph") -> list[DeviceSpec] | None:
        """The built-in devices that may take a plugin's preference whole (None: it stays a claim)."""
        if not child.is_leaf:  # the plugin built deeper children for its device
            return None
        memo = units[0].memo if units else _memo(graph, candidates + ([host] if host else []), options, None, dims)
        unit = PlacementUnit(child, sorted(child.get_ops(), key=lambda op: op.name), memo)
        memo.sign(unit.ops)
        return allowed(unit)

    free = [Unit(unit.child, unit.ops, allowed(unit)) for unit in units]
    every = sorted(free + plugin_units(graph, devices, offer), key=lambda u: order[u.key])
    own = {unit.child: unit for unit in units}
    first_fit = [choice[own[u.key]][0] if u.key in own else u.allowed[0].name for u in every]
    places, cost_reasons, estimate = place_by_cost(graph, every, first_fit, options.placement, devices,
                                                   table=options.cost_table, dims=dims)
    labels, ops, placed, reasons = {}, [], [], []
    for u, (device, instance), why in zip(every, places, cost_reasons):
        if u.fixed or (u.key not in own and device == u.allowed[0].name):
            if u.allowed[0].instances > 1:  # a plugin's claim, or a preference the solver took: its instance
                u.key.set_attr("instance", instance)
            continue
        if u.key not in own:  # a declined preference: the plugin's attrs (blob included) go with it
            for key in list(u.key.get_attrs()):
                u.key.del_attr(key)
        labels[u.key] = (device, instance)
        first_reasons = choice[own[u.key]][1] if u.key in own else repeat("")
        for op, first_reason in zip(u.ops, first_reasons):
            ops.append(op)
            placed.append(device)
            reasons.append("; ".join(r for r in (why, first_reason) if r))
    graph.set_attr("placement_estimate", estimate)
    return _apply(graph, labels, ops, placed, reasons, devices)


def apply_placement(graph: "Graph", proposal: Proposal, devices: Mapping[str, DeviceSpec]) -> list["Subgraph"]:
    """Merge each device's children (`group_children`), set subgraph "device"/"runner" and op annotations
    ("device", "placement_reason"; an ONNX attribute of either name is left alone)."""
    root = graph.get_root_subgraph()
    labels: dict["Subgraph", str] = {}
    for child in root.get_children():
        if child.has_attr("device"):
            continue
        ops = child.get_ops()
        if len(ops) == 1:  # the usual child: its one op's device
            entry = proposal.get(next(iter(ops)))
            placed = {None if entry is None else entry[0]}
        else:
            placed = {proposal[op][0] if op in proposal else None for op in ops}
        if None in placed:
            missing = sorted(op.name for op in ops if op not in proposal)
            raise PartitionError(f"the placement proposal has no device for op(s) {missing[:5]}; propose again")
        if len(placed) != 1:
            raise PartitionError(f"the placement proposal splits subgraph {child.name!r} over {sorted(placed)}; "
                                 "a subgraph goes to one device")
        device = placed.pop()
        if device not in devices:
            raise PartitionError(f"the placement proposal names unknown device {device!r}; known: {', '.join(devices)}")
        labels[child] = device
    return _apply(graph, labels, list(proposal), [device for device, _ in proposal.values()],
                  [reason for _, reason in proposal.values()], devices)


def _apply(graph: "Graph", labels: "dict[Subgraph, str] | dict[Subgraph, tuple[str, int]]", ops: list["Op"], placed: list[str], reasons: list[str],
           devices: Mapping[str, DeviceSpec]) -> list["Subgraph"]:
    """Merge the labelled children per device, label the merged subgraphs, annotate `ops` (columns by op)."""
    root = graph.get_root_subgraph()
    groups = group_children(root, labels)
    merged = root.merge_child_groups(groups, check_cycles=False)
    by_label: dict[Any, list["Subgraph"]] = {}
    for group, sg in zip(groups, merged):
        by_label.setdefault(labels[group[0]], []).append(sg)
    for label, subgraphs in by_label.items():
        device, instance = label if isinstance(label, tuple) else (label, None)
        spec = devices[device]
        attrs: dict[str, Any] = {"device": spec.name, "runner": dict(spec.runner)}
        if instance is not None and spec.instances > 1:
            attrs["instance"] = instance
        root.set_children_attrs(subgraphs, attrs)
    graph.set_op_annotation_columns(ops, {"device": placed, "placement_reason": reasons})
    return merged


__all__ = ["Proposal", "apply_placement", "bind_nested_graph_inputs", "candidate_devices", "count_copies", "count_crossings",
           "join_refusals", "place", "propose_placement"]
