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
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterable

from xgraph.errors import GraphError

if TYPE_CHECKING:
    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.op import Op


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


def _components(template: GraphTemplate) -> list[list[TemplateOp]]:
    neighbours: dict[TemplateOp, set[TemplateOp]] = {t: set() for t in template._ops.values()}
    for t in template._ops.values():
        for i in t.inputs:
            neighbours[t].add(i)
            neighbours[i].add(t)
    seen, result = set(), []
    for t in template._ops.values():
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


def _search_order(comp: list[TemplateOp], type_count: dict[str, int]) -> list[TemplateOp]:
    """Rarest type first, then breadth-first along edges, so each step is anchored."""
    rarity = {t: sum(type_count.get(x, 0) for x in t.types) for t in comp}
    consumers: dict[TemplateOp, list[TemplateOp]] = {t: [] for t in comp}
    for t in comp:
        for i in t.inputs:
            consumers[i].append(t)
    start = min(comp, key=lambda t: (rarity[t], t.name))
    order, placed = [start], {start}
    while len(order) < len(comp):
        frontier = [t for t in comp if t not in placed and
                    (any(i in placed for i in t.inputs) or any(c in placed for c in consumers[t]))]
        nxt = min(frontier, key=lambda t: (rarity[t], t.name))
        order.append(nxt)
        placed.add(nxt)
    return order


def _match_component(graph: "Graph", order: list[TemplateOp], by_type: dict[str, list["Op"]]) -> list[dict[str, "Op"]]:
    consumers: dict[TemplateOp, list[TemplateOp]] = {t: [] for t in order}
    for t in order:
        for i in t.inputs:
            consumers[i].append(t)
    results: list[dict[str, Op]] = []
    mapping: dict[TemplateOp, Op] = {}
    used: set[Op] = set()

    def candidates(t: TemplateOp) -> Iterable["Op"]:
        for i in t.inputs:
            if i in mapping:
                return mapping[i].get_fanout_ops()
        for c in consumers[t]:
            if c in mapping:
                return mapping[c].get_input_ops()
        return [op for ty in sorted(t.types) for op in by_type.get(ty, ())]

    def consistent(t: TemplateOp, op: "Op") -> bool:
        if op in used or not t.accepts(op):
            return False
        producers = None
        for i in t.inputs:
            if i in mapping:
                producers = producers if producers is not None else set(op.get_input_ops())
                if mapping[i] not in producers:
                    return False
        for c in consumers[t]:
            if c in mapping and op not in mapping[c].get_input_ops():
                return False
        return True

    def extend(k: int) -> None:
        if k == len(order):
            results.append({t.name: op for t, op in mapping.items()})
            return
        t = order[k]
        for op in candidates(t):
            if consistent(t, op):
                mapping[t] = op
                used.add(op)
                extend(k + 1)
                used.discard(op)
                del mapping[t]

    extend(0)
    return results


def find_matches(graph: "Graph", template: GraphTemplate) -> list[dict[str, "Op"]]:
    """Every match of `template` in `graph`, deterministic (anchors in graph insertion order)."""
    if not template._ops:
        return []
    by_type: dict[str, list[Op]] = {}
    for op in graph._ops.values():
        by_type.setdefault(op.type, []).append(op)
    type_count = {k: len(v) for k, v in by_type.items()}
    partial: list[dict[str, Op]] = [{}]
    for comp in _components(template):
        found = _match_component(graph, _search_order(comp, type_count), by_type)
        partial = [dict(p, **f) for p in partial for f in found
                   if not (set(p.values()) & set(f.values()))]
        if not partial:
            return []
    if template.filter is not None:
        partial = [m for m in partial if template.filter(dict(m))]
    order = {name: i for i, name in enumerate(template._ops)}
    return [dict(sorted(m.items(), key=lambda kv: order[kv[0]])) for m in partial]
