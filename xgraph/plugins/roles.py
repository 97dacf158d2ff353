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
    owner = {op: sg for sg in subgraphs for op in sg.get_ops()}
    found: dict[Subgraph, dict[tuple, dict[str, Any]]] = {sg: {} for sg in subgraphs}
    for _, template, match in matches:
        holders = {owner.get(op) for op in match.values()}
        if len(holders) == 1 and None not in holders:
            roles = {role: op.name for role, op in match.items()}
            found[holders.pop()].setdefault((template, tuple(sorted(roles.items()))),
                                            {"template": template, "roles": roles})
    for sg, entries in found.items():
        if entries:
            sg.set_attr("template_matches", list(entries.values()))


__all__ = ["set_template_matches"]
