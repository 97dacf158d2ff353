"""The IR's orders (`Graph.toposort`, `Subgraph.toposort_child_subgraph`, `Subgraph.child_dependencies`, the
index's op producers) against what the general algorithms give: each
is checked here against a few-line oracle written from the public API (Kahn's algorithm with
a heap, smallest insertion number first), on random DAGs built in order and rewired out of
order, with random merges of the root's children.
"""
from __future__ import annotations

import heapq
import random

import pytest

from xgraph import Graph
from xgraph.ir.links import check_links


def _random_graph(seed: int, n: int = 40, rewire: bool = False) -> Graph:
    rng = random.Random(seed)
    g = Graph(f"g{seed}")
    g.create_input("x", [1])
    names = ["x"]
    for i in range(n):
        sources = rng.sample(names, k=min(len(names), rng.choice([1, 1, 2])))
        g.create_op(f"op{i}", "Add" if len(sources) == 2 else "Relu", inputs=sources)
        names.append(f"op{i}")
    if rewire:  # point an early op at a later tensor: insertion order stops being topological
        for _ in range(3):
            i = rng.randrange(1, n // 2)
            j = rng.randrange(i + 1, n)
            op, later = g.get_op(f"op{i}"), g.get_op(f"op{j}")
            if not _reaches(op, later):  # else the rewiring would make a cycle
                op.set_input(0, later.get_output_tensor())
    check_links(g)
    return g


def _descendants(op):
    seen, stack = set(), [op]
    while stack:
        for c in stack.pop().get_fanout_ops():
            if c not in seen:
                seen.add(c)
                stack.append(c)
    return seen


def _reaches(src, dst) -> bool:
    return dst is src or dst in _descendants(src)


def _kahn(nodes, preds, key):
    """Kahn's algorithm over `nodes`, popping the smallest `key` among the ready ones."""
    waiting = {v: len(set(preds[v])) for v in nodes}
    users = {v: [] for v in nodes}
    for v in nodes:
        for u in set(preds[v]):
            users[u].append(v)
    heap = [(key(v), i, v) for i, v in enumerate(nodes) if waiting[v] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, _, v = heapq.heappop(heap)
        order.append(v)
        for w in users[v]:
            waiting[w] -= 1
            if waiting[w] == 0:
                heapq.heappush(heap, (key(w), nodes.index(w), w))
    return order


@pytest.mark.parametrize("rewire", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_toposort_is_kahns_order_by_insertion(seed, rewire):
    g = _random_graph(seed, rewire=rewire)
    ops = g.get_ops()
    insertion = {op: i for i, op in enumerate(ops)}
    expected = _kahn(ops, {op: op.get_input_ops() for op in ops}, insertion.__getitem__)
    assert [op.name for op in g.toposort()] == [op.name for op in expected]


def _merged_root(g: Graph, seed: int):
    """The root split into leaves, then random acyclic merges of neighbouring pairs."""
    rng = random.Random(seed + 1000)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    for op in rng.sample(g.get_ops(), k=len(g.get_ops()) // 3):
        a = g.get_leaf_subgraph(op.name)
        fanout = op.get_fanout_ops()
        if not fanout:
            continue
        b = g.get_leaf_subgraph(rng.choice(fanout).name)
        if a is not b:
            try:
                root.merge_children({a, b})
            except Exception:  # noqa: BLE001 - a merge that would make a cycle is refused; skip it
                pass
    check_links(g)
    return root


@pytest.mark.parametrize("rewire", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_child_toposort_and_dependencies_match_oracles(seed, rewire):
    g = _random_graph(seed, rewire=rewire)
    root = _merged_root(g, seed)
    topo = {op: i for i, op in enumerate(g.toposort())}
    insertion = {op: i for i, op in enumerate(g.get_ops())}
    children = list(root.get_children())
    child_of = {op: c for c in children for op in c.get_ops()}
    preds = {c: [child_of[p] for op in c.get_ops() for p in op.get_input_ops() if child_of[p] is not c]
             for c in children}
    first_topo = {c: min(topo[op] for op in c.get_ops()) for c in children}
    expected = _kahn(children, preds, first_topo.__getitem__)
    assert [c.name for c in root.toposort_child_subgraph()] == [c.name for c in expected]

    numbered, numbered_preds = root.child_dependencies()
    by_first_insertion = sorted(children, key=lambda c: min(insertion[op] for op in c.get_ops()))
    assert numbered == by_first_insertion
    index = {c: i for i, c in enumerate(numbered)}
    for c, sources in zip(numbered, numbered_preds):
        reads = {index[child_of[p]] for op in c.get_ops() for p in op.get_input_ops()} - {index[c]}
        assert set(sources) == reads
        assert index[c] not in sources


@pytest.mark.parametrize("seed", range(16))
def test_toposort_stays_kahns_order_through_edits_that_keep_and_break_the_table_order(seed):
    """Edits that keep a topological table order so (weights added, ops and tensors removed, ops
    folded into weights) let `toposort` skip its check; every other edit makes it check again."""
    import numpy as np
    from xgraph.ir.builder import remove_unused_weights, replace_op_by_weights
    rng = random.Random(seed + 7)
    g = _random_graph(seed, rewire=False)
    for step in range(30):
        g.toposort()  # cached (and the table order known topological) before each edit
        ops = g.get_ops()
        kind = rng.choice(["const", "remove", "fold", "rewire", "create", "weights"])
        if kind == "const":
            g.create_const(f"c{step}", np.ones(1, np.float32))
        elif kind == "remove":
            dead = [op for op in ops if not any(t.consumers for t in op.get_output_tensors())]
            if dead:
                g.remove_op(rng.choice(dead))
        elif kind == "fold" and ops:
            replace_op_by_weights(g, rng.choice(ops), [np.zeros(1, np.float32)])
        elif kind == "rewire" and len(ops) > 2:
            i = rng.randrange(0, len(ops) - 1)
            j = rng.randrange(i + 1, len(ops))
            if ops[i].get_input_num() and not _reaches(ops[i], ops[j]):
                ops[i].set_input(0, ops[j].get_output_tensor())
        elif kind == "create":
            tensors = [t for t in g.get_tensors()]
            g.create_op(f"new{step}", "Relu", inputs=[rng.choice(tensors)])
        elif kind == "weights":
            remove_unused_weights(g)
        ops = g.get_ops()
        insertion = {op: i for i, op in enumerate(ops)}
        expected = _kahn(ops, {op: op.get_input_ops() for op in ops}, insertion.__getitem__)
        assert [op.name for op in g.toposort()] == [op.name for op in expected], (step, kind)
    check_links(g)


def _wide_random_graph(seed: int, n: int = 60) -> Graph:
    """Ops of 0 to 5 input slots: repeated inputs, omitted ones, weights and graph inputs among them."""
    rng = random.Random(seed)
    g = Graph(f"wide{seed}")
    g.create_input("x", [1])
    g.create_const("w", [1.0])
    names = ["x", "w"]
    for i in range(n):
        slots = rng.choice([0, 1, 1, 2, 2, 3, 5])
        inputs = [None if rng.random() < 0.1 else rng.choice(names[-6:] if rng.random() < 0.5 else names)
                  for _ in range(slots)]
        g.create_op(f"op{i}", "Sum" if slots else "RandomNormal", inputs=inputs)
        names.append(f"op{i}")
    return g


def _with_gaps(g: Graph, seed: int) -> Graph:
    """`g` less some ops nobody reads (gaps in the creation numbers)."""
    rng = random.Random(seed)
    for op in reversed(g.get_ops()):
        if not any(t.consumers for t in op.get_output_tensors()) and op not in g.get_output_tensors() \
                and rng.random() < 0.5:
            g.remove_op(op)
    return g


def _after_churn(seed: int) -> Graph:
    """A graph whose creation numbers are spread far apart: thousands of ops made and removed first."""
    g = Graph("churn")
    x = g.create_input("x0", [1])
    for i in range(3000):
        g.remove_op(g.create_op(f"tmp{i}", "Relu", inputs=[x]))
    rng = random.Random(seed)
    names = ["x0"]
    for i in range(40):
        g.create_op(f"op{i}", "Sum", inputs=rng.sample(names, k=min(len(names), rng.choice([1, 2, 3]))))
        names.append(f"op{i}")
        if i % 7 == 0:
            for j in range(400):
                g.remove_op(g.create_op(f"tmp{i}_{j}", "Relu", inputs=[x]))
    return g


@pytest.mark.parametrize("kind", ["fresh", "gaps", "churn", "reloaded"])
@pytest.mark.parametrize("seed", range(20))
def test_op_producers_match_their_definition(seed, kind):
    from xgraph.ir.index import MANY, NONE
    if kind == "churn":
        g = _after_churn(seed)
    else:
        g = _wide_random_graph(seed)
        if kind == "gaps":
            g = _with_gaps(g, seed)
        elif kind == "reloaded":  # numbered again in the file's order
            for op in g.get_ops():
                op.get_output_tensor().dtype = "float32"
            g.set_outputs([g.get_ops()[-1].get_output_tensor()])
            g.get_root_subgraph().create_child_subgraph()
            g = _reloaded(g)
    position = {op: i for i, op in enumerate(g.get_ops())}
    first, more = g.index().producers()
    assert len(first) == g.get_op_num()
    kinds = set()
    for op, code in zip(g.get_ops(), first):
        reads = tuple(dict.fromkeys(position[t.producer] for t in op.get_input_tensors()
                                    if t is not None and t.producer is not None))
        if not reads:
            assert code == NONE
        elif len(reads) == 1:
            assert code == reads[0]
        else:
            assert code <= MANY and more[MANY - code] == reads
        kinds.add(min(len(reads), 2))
    assert kinds == {0, 1, 2} or kind == "churn"  # every kind of op was met
    assert sorted(MANY - c for c in first if c <= MANY) == list(range(len(more)))  # `more` in op order


@pytest.mark.parametrize("rewire", [False, True])
def test_topo_positions_are_the_toposort_and_follow_edits(rewire):
    g = _random_graph(3, rewire=rewire)
    positions = g.topo_positions()
    assert dict(positions) == {op: i for i, op in enumerate(g.toposort())}
    with pytest.raises(TypeError):
        positions[g.get_ops()[0]] = 7  # read-only: the cached table cannot be changed through it
    last = g.toposort()[-1]
    g.create_op("after", "Relu", inputs=[last.get_output_tensor()])
    assert g.topo_positions()[g.get_op("after")] == g.get_op_num() - 1


def _reloaded(g: Graph) -> Graph:
    import tempfile
    import os
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "g.xmodel")
        g.serialize(path)
        return Graph.deserialize(path)
