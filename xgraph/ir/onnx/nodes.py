"""Reading a GraphProto's nodes for import: their fields as Python columns, refused non-UTF-8 text,
a topological order (file order when it already is one) and unique op names."""
from __future__ import annotations

from itertools import chain
from typing import Any

import onnx
from onnx import helper

from xgraph.errors import ModelFileError
from xgraph.ir.nested import GRAPH_TYPES, free_names, graphs_of


def is_text(*values: Any) -> bool:
    """True when every value is a str: protobuf hands over a string field that is not valid UTF-8
    as bytes, and str.join refuses anything but str, at C speed."""
    try:
        "".join(values)
    except TypeError:
        return False
    return True


def columns_are_text(*columns: Any) -> bool:
    """`is_text` over every value of several iterables, one str.join per column (no argument tuple of them all)."""
    try:
        for column in columns:
            "".join(column)
    except TypeError:
        return False
    return True


#: nodes read per block: a block's rows (a tuple per node) are dropped before the next is read, so a 100k-node
#: graph never holds 100k of them at once (which the collector would walk)
_BLOCK = 4096


class Nodes:
    """The fields of a graph's NodeProtos read once into Python columns (protobuf field access is slow).

    One comprehension reads every node; the columns are checked for non-UTF-8 text with
    str.join over whole columns (C speed); only nodes with attributes are looked at one by one.
    """

    __slots__ = ("names", "op_types", "domains", "inputs", "outputs", "attributes", "docs", "implicit", "nested",
                 "_produced_by", "_checked", "omitted_outputs")

    def __init__(self, protos, label: str | None):
        """Read `protos` and, with a `label` (for messages), check them (`check`)."""
        columns: list[list] = [[] for _ in range(7)]
        for at in range(0, len(protos), _BLOCK):
            # slicing a repeated field is about twice as fast as list(); most nodes have no attributes
            rows = [(n.name, n.op_type, n.domain, n.input[:], n.output[:], a[:] if (a := n.attribute) else None,
                     n.doc_string) for n in protos[at:at + _BLOCK]]
            for column, values in zip(columns, zip(*rows)):
                column += values
        self.names, self.op_types, self.domains, self.inputs, self.outputs, self.attributes, self.docs = columns
        #: node index -> outer tensors its If/Loop/Scan bodies read by name (dependencies like inputs)
        self.implicit: dict[int, list[str]] = {}
        #: indices of the nodes with an attribute holding a graph in its `g` or `graphs` field, whatever its type says
        self.nested: list[int] = []
        self._produced_by: dict[str, int] | None = None
        #: how many outputs are "" (omitted optionals), counted by `produced_by`
        self.omitted_outputs: int | None = None
        self._checked = False
        if label is not None:
            self.check(label)

    def check(self, label: str) -> "Nodes":
        """Refuse text that is not valid UTF-8 and find what nested graphs read (once, on columns read
        unchecked: the safe reader reads them first, for its walk over attribute contents)."""
        if self._checked:
            return self
        self._checked = True
        if not columns_are_text(self.names, self.op_types, self.domains, self.docs, chain.from_iterable(self.inputs),
                                chain.from_iterable(self.outputs)):
            bad = next(i for i in range(len(self)) if not is_text(self.names[i], self.op_types[i], self.domains[i],
                                                                  self.docs[i], *self.inputs[i], *self.outputs[i]))
            self._refuse_text(bad, label)
        rows = [(i, attributes) for i, attributes in enumerate(self.attributes) if attributes]
        if not is_text(*[a.name for _, attributes in rows for a in attributes]):
            marked = [i for i, _ in rows]  # one node at a time, so the first bad one is named
        else:  # only nodes holding a graph have more to check and record
            marked = sorted({i for i, attributes in rows for a in attributes
                             if a.type in GRAPH_TYPES or a.HasField("g") or a.graphs})
        for i in marked:
            self._scan_attributes(i, self.attributes[i], label)
        return self

    def __len__(self) -> int:
        return len(self.names)

    def label(self, i: int) -> str:
        return self.names[i] or self.op_types[i]

    def _refuse_text(self, i: int, label: str) -> None:
        raise ModelFileError(f"{label}: node {self.names[i]!r} ({self.op_types[i]!r}) has a name, input, output "
                             "or attribute name that is not valid UTF-8")

    def _scan_attributes(self, i: int, attributes: list[onnx.AttributeProto], label: str) -> None:
        if not is_text(*(a.name for a in attributes)):
            self._refuse_text(i, label)
        if any(a.HasField("g") or a.graphs for a in attributes):
            self.nested.append(i)
        graphs = graphs_of(helper.get_attribute_value(a) for a in attributes if a.type in GRAPH_TYPES)
        if graphs:
            outer = set().union(*(free_names(g) for g in graphs))
            if not is_text(*outer):
                raise ModelFileError(f"{label}: node {self.names[i]!r} ({self.op_types[i]!r}) has a nested graph "
                                     "whose names are not valid UTF-8")
            self.implicit[i] = sorted(outer - set(self.outputs[i]))

    def produced_by(self) -> dict[str, int] | None:
        """Output name -> index of the node writing it, or None when a name is written twice (the importer
        refuses such a model; `node_order` says which name)."""
        if self._produced_by is None:
            names = list(chain.from_iterable(self.outputs))
            made = {o: i for i, outputs in enumerate(self.outputs) for o in outputs}
            made.pop("", None)
            omitted = names.count("")
            if len(made) != len(names) - omitted:
                return None
            self._produced_by, self.omitted_outputs = made, omitted
        return self._produced_by

    def dependencies(self, i: int) -> list[str]:
        """Inputs then implicit inputs of node `i` (omitted optionals included as "")."""
        extra = self.implicit.get(i)
        return self.inputs[i] + extra if extra else self.inputs[i]


def node_order(nodes: Nodes, known: set[str], label: str) -> list[int]:
    """Indices of nodes in a topological order (file order when it already is one)."""
    produced_by = nodes.produced_by()
    if produced_by is None or not known.isdisjoint(produced_by):
        _refuse_defined_twice(nodes, known, label)
    in_file_order = True
    get = produced_by.get
    for i, inputs in enumerate(nodes.inputs):
        for x in inputs:
            if x:
                j = get(x, -1)
                if j >= i or (j < 0 and x not in known):
                    in_file_order = _check_defined(nodes, i, x, j, label) and in_file_order
    for i, extra in nodes.implicit.items():
        for x in extra:
            j = get(x, -1)
            if j >= i or (j < 0 and x not in known):
                in_file_order = _check_defined(nodes, i, x, j, label) and in_file_order
    if in_file_order:
        return list(range(len(nodes)))
    indeg = [0] * len(nodes)
    users: dict[int, list[int]] = {}
    for i in range(len(nodes)):
        deps = {produced_by[x] for x in nodes.dependencies(i) if x and x in produced_by}
        indeg[i] = len(deps)
        for d in deps:
            users.setdefault(d, []).append(i)
    ready = [i for i in range(len(nodes)) if indeg[i] == 0]
    ready.reverse()
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for u in sorted(users.get(i, []), reverse=True):
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        stuck = [nodes.label(i) for i in range(len(nodes)) if indeg[i] > 0][:5]
        raise ModelFileError(f"{label}: the graph has a cycle through nodes {stuck}")
    return order


def _refuse_defined_twice(nodes: Nodes, known: set[str], label: str) -> None:
    """Name the first tensor (in file order) written by two nodes, or by a node and an initializer or input."""
    seen: set[str] = set()
    for i, outputs in enumerate(nodes.outputs):
        for o in outputs:
            if not o:
                continue
            if o in seen or o in known:
                raise ModelFileError(f"{label}: tensor name {o!r} is defined twice (node {nodes.label(i)!r} "
                                     "and an earlier node, initializer or input); names must be unique")
            seen.add(o)


def _check_defined(nodes: Nodes, i: int, x: str, j: int, label: str) -> bool:
    """False for a tensor produced later in the file (the file is not in topological order); refuses an undefined one."""
    if j >= 0:
        return False
    how = "reads" if x in nodes.inputs[i] else "has a nested graph that reads"
    raise ModelFileError(f"{label}: node {nodes.label(i)!r} {how} tensor {x!r}, which no node, "
                         "initializer or graph input defines")


def unique_op_names(nodes: Nodes, order: list[int], stats: dict[str, int] | None = None) -> list[str]:
    """A unique op name per node: its own when unique, else "<name or op type>_<k>" with the smallest free k.

    Nodes are named in `order`. The smallest free suffix only grows for a base (names are only
    ever taken), so each base remembers where its last search ended: O(nodes) probes in all,
    where searching from "_1" every time is quadratic on models with thousands of unnamed
    nodes of one type. `stats`, when given, receives the number of candidate names probed.
    """
    given = nodes.names
    if "" not in given and len(set(given)) == len(given):  # the usual case: every node named, no clashes
        return list(given)
    counts: dict[str, int] = {}
    for name in given:
        counts[name] = counts.get(name, 0) + 1
    taken: set[str] = set()
    next_suffix: dict[str, int] = {}  # base -> the smallest k >= 1 that may still be free
    names = list(given)
    probes = 0
    for i in order:
        given_name = given[i]
        if given_name and counts[given_name] == 1:
            taken.add(given_name)
            continue
        base = given_name or nodes.op_types[i] or "op"
        probes += 1
        if base in taken or (base != given_name and base in counts):
            k = next_suffix.get(base, 1)
            name = f"{base}_{k}"
            probes += 1
            while name in taken or name in counts:  # base_k never equals given_name: no exemption here
                k += 1
                name = f"{base}_{k}"
                probes += 1
            next_suffix[base] = k + 1
        else:
            name = base
        taken.add(name)
        names[i] = name
    if stats is not None:
        stats["probes"] = probes
    return names
