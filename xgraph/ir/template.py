"""GraphTemplate: a small pattern of op types, and the matcher that finds it in a Graph.

A template op matches a graph op when the op's type is among the template op's types and its
filter (if any) accepts it. A template edge a -> b (b lists a in `inputs`) matches when the
graph op matched to b reads an output of the one matched to a; input positions are not
constrained (so Add(x, y) matches either way round). Matches are monomorphisms: distinct
template ops map to distinct graph ops.

The matcher anchors each connected component of the template on its rarest op type, then
grows the match along template edges, drawing candidates only from producers/consumers of
ops already matched. Cost is O(anchors x local branching), independent of graph size for
sparse patterns.

Near misses. Inside ``with record_matches(near_misses=True) as log:`` every matching also
records, per anchor op and in two passes (anchored on the rarest op type, and on the
template's first op in data-flow order), the deepest partial match that broke: which template ops matched
which graph ops, the template op where it broke and the ops it found there instead
(`NearMiss.text()`: "conv matched n4 (Conv), bn matched n5 (BatchNormalization), act
expected one of {Clip, Relu}, found n6 (Mul)"). Without near misses the log only counts
calls and matches per template (what the compile report lists as "templates tried").
Recording keeps one record per anchor, so it stays O(anchors x template size).
"""
from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import compress
from typing import TYPE_CHECKING, Any, Callable, Iterable

from xgraph.errors import GraphError

if TYPE_CHECKING:
    from xgraph.ir.op import Op
    from xgraph.ir.protocols import GraphTables, IndexFacts


class TemplateOp:
    """One op of a template: a name, the op types it accepts, its inputs, an optional filter."""

    def __init__(self, template: "GraphTemplate", name: str, types: frozenset[str], inputs: "list[TemplateOp]"):
        self.template = template
        self.name = name
        self.types = types
        self.inputs = inputs
        self.filter: Callable[["Op"], bool] | None = None

    def __repr__(self) -> str:
        return f"TemplateOp({self.name!r}, {sorted(self.types)})"

    def set_filter(self, func: Callable[["Op"], bool]) -> None:
        """Only match graph ops for which `func(op)` is true."""
        self.filter = func

    def accepts(self, op: "Op") -> bool:
        """True when `op` may stand for this template op."""
        return op.type in self.types and (self.filter is None or bool(self.filter(op)))


class GraphTemplate:
    """A pattern of ops to look for with `Graph.isomorphism` or `filter_by_template`."""

    def __init__(self, name: str):
        self.name = name
        self._ops: dict[str, TemplateOp] = {}
        self.filter: Callable[[dict[str, "Op"]], bool] | None = None

    def __repr__(self) -> str:
        return f"GraphTemplate({self.name!r}, {list(self._ops)})"

    def add_op(self, name: str, types: "Iterable[str] | str", inputs: "Iterable[TemplateOp] | None" = None) -> TemplateOp:
        """Add a template op accepting any of `types`, reading the outputs of `inputs`."""
        if not isinstance(name, str) or not name:
            raise GraphError(f"template {self.name!r}: an op name must be a non-empty str, got {name!r}")
        if name in self._ops:
            raise GraphError(f"template {self.name!r} already has an op named {name!r}")
        given = types
        try:
            types = frozenset([types] if isinstance(types, str) else types)
        except TypeError:
            types = None
        if types is None or not all(isinstance(t, str) and t for t in types):
            raise GraphError(f"template {self.name!r}: op {name!r} takes its op types as a str or a set of str "
                             f"(e.g. {{'Conv'}}), got {given!r}")
        if not types:
            raise GraphError(f"template {self.name!r}: op {name!r} needs at least one op type")
        try:
            ins = list(inputs or [])
        except TypeError:
            raise GraphError(f"template {self.name!r}: inputs of {name!r} must be a list of template ops, "
                             f"got {type(inputs).__name__}") from None
        for i in ins:
            if not isinstance(i, TemplateOp) or i.template is not self:
                raise GraphError(f"template {self.name!r}: input {i!r} of {name!r} is not an op of this template")
        op = TemplateOp(self, name, types, ins)
        self._ops[name] = op
        return op

    def get_op(self, name: str) -> TemplateOp:
        """The template op called `name`."""
        try:
            return self._ops[name]
        except KeyError:
            raise GraphError(f"template {self.name!r} has no op named {name!r}") from None

    def get_ops(self) -> list[TemplateOp]:
        """Template ops in the order they were added."""
        return list(self._ops.values())

    def set_filter(self, func: Callable[[dict[str, "Op"]], bool]) -> None:
        """Only keep whole matches for which `func(match)` is true (match: template op name -> Op)."""
        self.filter = func

#: Candidate ops a near miss lists at the template op where it broke.
SHOWN_CANDIDATES = 3


@dataclass(slots=True)  # not frozen: one is made per anchor op, and a frozen dataclass is slow to build
class NearMiss:
    """A partial match that broke: the template ops matched so far (search order) and where it stopped."""

    template: str
    matched: tuple[tuple[str, "Op"], ...]
    expected: str
    expected_types: frozenset[str]
    found: tuple["Op", ...]
    why: str  # "type", "filter", "edge", "taken", "none" (no candidate), "match filter"
    label: str = ""  # who was matching (the plugin), set by the recorder

    def ops(self) -> set["Op"]:
        """Every graph op this near miss touched (matched or found at the break)."""
        return {op for _, op in self.matched} | set(self.found)

    def text(self) -> str:
        """E.g. "conv matched n4 (Conv), bn matched n5 (BatchNormalization), act expected one of {Clip, Relu},
        found n6 (Mul)"."""
        steps = [f"{name} matched {op.name} ({op.type})" for name, op in self.matched]
        if self.why == "match filter":
            return ", ".join(steps) + ", then the template's match filter refused the match"
        types = sorted(self.expected_types)
        wanted = types[0] if len(types) == 1 else "one of {" + ", ".join(types) + "}"
        shown = ", ".join(f"{op.name} ({op.type})" for op in self.found[:SHOWN_CANDIDATES])
        if len(self.found) > SHOWN_CANDIDATES:
            shown += f" and {len(self.found) - SHOWN_CANDIDATES} more"
        found = {"type": f"found {shown}",
                 "filter": f"found {shown}, which its op filter refused",
                 "edge": f"found {shown}, not wired to the ops matched so far",
                 "taken": f"found {shown}, already matched to another template op",
                 "none": "found no op there"}[self.why]
        return ", ".join(steps + [f"{self.expected} expected {wanted}, {found}"])


@dataclass
class MatchLog:
    """What template matching did inside `record_matches`: per template calls and matches, near misses."""

    near_misses: bool = False
    label: str = ""
    #: template name -> {"calls", "matches", "types": op types of its first op (what to ask `explain` about),
    #: "op_types": {template op: its op types}}
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    misses: list[NearMiss] = field(default_factory=list)
    #: (label, template, match) of every match found, near misses or not (the chain tells plugins their roles)
    matches: list[tuple[str, str, dict[str, "Op"]]] = field(default_factory=list)

    def _called(self, template: GraphTemplate, found: int) -> None:
        first = template.get_ops()[0] if template.get_ops() else None
        entry = self.templates.setdefault(template.name, {"calls": 0, "matches": 0,
                                                          "types": sorted(first.types) if first else []})
        entry["op_types"] = {t.name: sorted(t.types) for t in template.get_ops()}
        entry["calls"] += 1
        entry["matches"] += found

    def absorb(self, inner: "MatchLog") -> None:
        """Take over what an inner recorder saw (its label wins where it set one)."""
        for name, entry in inner.templates.items():
            mine = self.templates.setdefault(name, {"calls": 0, "matches": 0, "types": entry.get("types", [])})
            mine["op_types"] = dict(entry.get("op_types", {}))
            mine["calls"] += entry["calls"]
            mine["matches"] += entry["matches"]
        self.matches += inner.matches
        if self.near_misses:
            self.misses += inner.misses


_ACTIVE: contextvars.ContextVar["MatchLog | None"] = contextvars.ContextVar("xgraph_match_log", default=None)


@contextmanager
def record_matches(near_misses: bool | None = None, label: str = "") -> Iterator[MatchLog]:
    """Record template matching in this context; an enclosing recorder gets everything too.

    `near_misses` None inherits the enclosing recorder's setting (off when there is none);
    `label` (e.g. the plugin's name) tags what is recorded.
    """
    outer = _ACTIVE.get()
    keep = near_misses if near_misses is not None else bool(outer is not None and outer.near_misses)
    log = MatchLog(keep, label or (outer.label if outer is not None else ""))
    token = _ACTIVE.set(log)
    try:
        yield log
    finally:
        _ACTIVE.reset(token)
        if outer is not None:
            outer.absorb(log)


def _components(template: GraphTemplate) -> list[list[TemplateOp]]:
    neighbours: dict[TemplateOp, set[TemplateOp]] = {t: set() for t in template.get_ops()}
    for t in template.get_ops():
        for i in t.inputs:
            neighbours[t].add(i)
            neighbours[i].add(t)
    seen, result = set(), []
    for t in template.get_ops():
        if t in seen:
            continue
        comp, stack = [], [t]
        seen.add(t)
        while stack:
            u = stack.pop()
            comp.append(u)
            for v in neighbours[u]:
                if v not in seen:
                    seen.add(v)
                    stack.append(v)
        result.append(comp)
    return result


def _search_order(comp: list[TemplateOp], type_count: dict[str, int] | None) -> list[TemplateOp]:
    """Rarest type first, then breadth-first along edges, so each step is anchored.

    With `type_count` None: the data-flow order instead (the template's first source op,
    then ops in the order they were added), which is how near misses read best.
    """
    added = {t: i for i, t in enumerate(comp[0].template.get_ops())} if comp else {}
    if type_count is None:
        rank = {t: (added[t], t.name) for t in comp}
    else:
        rank = {t: (sum(type_count.get(x, 0) for x in t.types), t.name) for t in comp}
    consumers: dict[TemplateOp, list[TemplateOp]] = {t: [] for t in comp}
    for t in comp:
        for i in t.inputs:
            consumers[i].append(t)
    sources = [t for t in comp if not t.inputs] if type_count is None else comp
    start = min(sources or comp, key=rank.__getitem__)
    order, placed = [start], {start}
    while len(order) < len(comp):
        frontier = [t for t in comp if t not in placed and
                    (any(i in placed for i in t.inputs) or any(c in placed for c in consumers[t]))]
        nxt = min(frontier, key=rank.__getitem__)
        order.append(nxt)
        placed.add(nxt)
    return order


def _match_component(graph: "GraphTables", order: list[TemplateOp], by_type: dict[str, list["Op"]],
                     misses: "dict[Op, NearMiss] | None" = None, label: str = "") -> list[dict[str, "Op"]]:
    """Every match of one connected template component (`order`: its ops, each after one it touches), found by
    backtracking from each anchor candidate; the deepest broken partial match per anchor goes to `misses`."""
    return _ComponentSearch(order, by_type, misses, label, graph.index()).run()


class _ComponentSearch:
    """The state of one backtracking search: the template ops matched so far and the graph ops they took."""

    def __init__(self, order: list[TemplateOp], by_type: dict[str, list["Op"]],
                 misses: "dict[Op, NearMiss] | None", label: str, index: "IndexFacts") -> None:
        self.order, self.by_type, self.misses, self.label = order, by_type, misses, label
        #: the links, asked of the graph's index (the search changes nothing, so it stays the graph's)
        self.input_ops, self.fanout_ops, self.reads_from = index.input_ops, index.fanout_ops, index.reads_from
        self.consumers: dict[TemplateOp, list[TemplateOp]] = {t: [] for t in order}
        for t in order:
            for i in t.inputs:
                self.consumers[i].append(t)
        self.results: list[dict[str, Op]] = []
        self.mapping: dict[TemplateOp, Op] = {}
        self.used: set[Op] = set()
        self.template = order[0].template.name if order else ""

    def run(self) -> list[dict[str, "Op"]]:
        self.extend(0)
        return self.results

    def candidates(self, t: TemplateOp) -> Iterable["Op"]:
        """The graph ops that may stand for `t`: neighbours of a matched neighbour, else every op of its types."""
        for i in t.inputs:
            if i in self.mapping:
                return self.fanout_ops(self.mapping[i])
        for c in self.consumers[t]:
            if c in self.mapping:
                return self.input_ops(self.mapping[c])
        return [op for ty in sorted(t.types) for op in self.by_type.get(ty, ())]

    def problem(self, t: TemplateOp, op: "Op") -> str:
        """"" when `op` may stand for `t` here, else what is wrong (the near-miss kinds)."""
        if op.type not in t.types:
            return "type"
        if op in self.used:
            return "taken"
        for i in t.inputs:
            if i in self.mapping and self.mapping[i] not in self.input_ops(op):
                return "edge"
        for c in self.consumers[t]:
            if c in self.mapping and op not in self.input_ops(self.mapping[c]):
                return "edge"
        if t.filter is not None and not t.filter(op):
            return "filter"
        return ""

    def consistent(self, t: TemplateOp, op: "Op") -> bool:
        """`problem(t, op) == ""`, asked the fast way (the search's hot path)."""
        if op in self.used or op.type not in t.types or (t.filter is not None and not t.filter(op)):
            return False
        for i in t.inputs:
            if i in self.mapping and not self.reads_from(op, self.mapping[i]):
                return False
        for c in self.consumers[t]:
            if c in self.mapping and not self.reads_from(self.mapping[c], op):
                return False
        return True

    def note_miss(self, k: int, t: TemplateOp, tried: list["Op"]) -> None:
        """Keep the deepest broken partial match per anchor (one record each: linear)."""
        anchor = self.mapping[self.order[0]]
        best = self.misses.get(anchor)
        if best is not None and len(best.matched) >= k:
            return
        kinds = [self.problem(t, op) for op in tried]
        why = next((w for w in ("filter", "edge", "taken", "type") if w in kinds), "none")
        found = tuple(op for op, w in zip(tried, kinds) if w == why) if tried else ()
        self.misses[anchor] = NearMiss(self.template, tuple((u.name, self.mapping[u]) for u in self.order[:k]),
                                       t.name, t.types, found, why, self.label)

    def extend(self, k: int) -> None:
        """Match template op `k` onwards, every way the ops matched so far allow."""
        if k == len(self.order):
            self.results.append({t.name: op for t, op in self.mapping.items()})
            return
        t = self.order[k]
        recording = self.misses is not None and k > 0
        tried = list(self.candidates(t)) if recording else self.candidates(t)
        grew = False
        consistent, mapping, used, extend = self.consistent, self.mapping, self.used, self.extend  # the hot loop
        for op in tried:
            if consistent(t, op):
                grew = True
                mapping[t] = op
                used.add(op)
                extend(k + 1)
                used.discard(op)
                del mapping[t]
        if recording and not grew:
            self.note_miss(k, t, tried)


def find_matches(graph: "GraphTables", template: GraphTemplate) -> list[dict[str, "Op"]]:
    """Every match of `template` in `graph`, deterministic (anchors in graph insertion order)."""
    if not isinstance(template, GraphTemplate):
        raise GraphError(f"isomorphism: argument 'template' must be an xgraph.GraphTemplate, got "
                         f"{type(template).__name__}")
    log = _ACTIVE.get()
    if log is None or not log.near_misses:
        matches = _find_matches(graph, template)
        if log is not None:
            log._called(template, len(matches))
            log.matches += [(log.label, template.name, m) for m in matches]
        return matches
    # Near misses from two passes: the matching pass (anchored on the rarest op type, so it breaks
    # on the way up from e.g. a Relu) and one in data-flow order (anchored on the template's first
    # op, breaking on the way down from e.g. a Conv). Each keeps one record per anchor op.
    rare: dict[Op, NearMiss] = {}
    flow: dict[Op, NearMiss] = {}
    matches = _find_matches(graph, template, rare, label=log.label)
    _find_matches(graph, template, flow, flow_order=True, label=log.label)
    log._called(template, len(matches))
    seen = set()
    for miss in list(flow.values()) + list(rare.values()):
        key = (miss.matched, miss.expected, miss.found, miss.why)
        if key not in seen:
            seen.add(key)
            log.misses.append(miss)
    log.matches += [(log.label, template.name, m) for m in matches]
    return matches


def _find_matches(graph: "GraphTables", template: GraphTemplate, misses: "dict[Op, NearMiss] | None" = None,
                  flow_order: bool = False, label: str = "") -> list[dict[str, "Op"]]:
    if not template.get_ops():
        return []
    ops = graph.get_ops()
    by_type: dict[str, list[Op]] = {ty: [] for t in template.get_ops() for ty in t.types}
    for op in compress(ops, map(by_type.__contains__, [op.type for op in ops])):  # the types the template names
        by_type[op.type].append(op)
    type_count = {ty: len(found) for ty, found in by_type.items()}  # all the search order asks about
    partial: list[dict[str, Op]] = [{}]
    for comp in _components(template):
        found = _match_component(graph, _search_order(comp, None if flow_order else type_count), by_type, misses,
                                 label)
        if partial == [{}]:  # the first component (the only one, usually): its matches as they are
            partial = found
        else:
            partial = [dict(p, **f) for p in partial for f in found
                       if not (set(p.values()) & set(f.values()))]
        if not partial:
            return []
    if template.filter is not None:
        kept = [m for m in partial if template.filter(dict(m))]
        if misses is not None:
            kept_ids = {id(m) for m in kept}
            for m in partial:
                if id(m) not in kept_ids:
                    first = next(iter(m.values()))
                    misses[first] = NearMiss(template.name, tuple(m.items()), "", frozenset(), (), "match filter",
                                             label)
        partial = kept
    order = {t.name: i for i, t in enumerate(template.get_ops())}
    keys = list(order)
    if all(list(m) == keys for m in partial):  # searched in template order (one component, usually): as they are
        return partial
    return [dict(sorted(m.items(), key=lambda kv: order[kv[0]])) for m in partial]
