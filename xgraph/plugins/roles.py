"""The template roles a plugin's `compile` reads: attr "template_matches" on each subgraph it returned.

Each entry is one match of a template found during the plugin's `partition` that lies wholly
inside the subgraph: ``{"template": name, "roles": {template op: graph op name}}``. Matches are
what `xgraph.ir.template.record_matches` saw (through `filter_by_template` or
`graph.isomorphism`); a subgraph holding no whole match gets no attr.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from xgraph.ir import Op, Subgraph


def set_template_matches(subgraphs: "list[Subgraph]",
                         matches: "list[tuple[str, str, dict[str, Op]]]") -> None:
    """Attr "template_matches" on each subgraph: the template matches lying wholly inside it, each once."""
    if not subgraphs:
        return
    owner: "dict[Op, Subgraph]" = {}
    for sg in subgraphs:
        owner.update(dict.fromkeys(sg.get_ops(), sg))
    holder = owner.get
    found: dict[Subgraph, list[dict[str, Any]]] = {}
    seen: dict[Subgraph, set[tuple]] = {}  # keys of the entries, for the subgraphs holding more than one
    for _, template, match in matches:
        holders = set(map(holder, match.values()))
        if len(holders) != 1 or None in holders:
            continue
        sg = holders.pop()
        entry = {"template": template, "roles": {role: op.name for role, op in match.items()}}
        entries = found.get(sg)
        if entries is None:  # the usual subgraph: one match
            found[sg] = [entry]
            continue
        keys = seen.get(sg)
        if keys is None:
            keys = seen[sg] = {_key(e) for e in entries}
        key = _key(entry)
        if key not in keys:
            keys.add(key)
            entries.append(entry)
    for sg in subgraphs:  # in the order returned
        entries = found.get(sg)
        if entries:
            sg.set_attr("template_matches", entries)


def _key(entry: dict[str, Any]) -> tuple:
    """What makes two entries the same match (a template found twice, e.g. by two calls, is listed once)."""
    return entry["template"], tuple(sorted(entry["roles"].items()))


__all__ = ["set_template_matches"]
