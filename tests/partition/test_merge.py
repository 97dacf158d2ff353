"""merge_subgraph, group_children and their algorithm: few groups, never a cycle, deterministic, all-or-nothing.

Oracles are independent of the code under test: networkx for cycles among the root's
children, and a few-line topological-wave count for the "never worse than waves" bound.
"""
from __future__ import annotations

import doctest
from collections import Counter

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import xgraph.partition.joins as joins_module
import xgraph.partition.levels as levels_module
import xgraph.partition.merge as merge_module
from xgraph import Graph, Subgraph
from xgraph.errors import GraphError, PartitionError
from xgraph.partition import filter_by_type, group_children, merge_subgraph
from xgraph.partition.levels import FIXED, coalesce_groups, group_nodes, level_partition


# -- helpers and oracles -----------------------------------------------------------------------
def build(spec, *, assigned=(), merged=()) -> Graph:
    """A graph from (name, type, inputs); `merged` groups of ops share a child; `assigned` ops get "device"."""
    g = Graph("g")
    g.create_input("x", [4])
    for name, op_type, inputs in spec:
        g.create_op(name, op_type, inputs=inputs or ["x"])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    for group in merged:
        root.merge_children({g.get_leaf_subgraph(n) for n in group})
    for name in assigned:
        root.find_child_subgraph_by_op(name).set_attr("device", "DPU")
    return g


def children_of(graph: Graph, names) -> set[Subgraph]:
    """The root children holding the named ops."""
    root = graph.get_root_subgraph()
    return {root.find_child_subgraph_by_op(n) for n in names}


def partition(graph: Graph) -> frozenset[frozenset[str]]:
    """The root's children as op-name sets."""
    return frozenset(frozenset(op.name for op in c.get_ops()) for c in graph.get_root_subgraph().get_children())


def snapshot(graph: Graph):
    """Everything a failed merge must leave as it was: children (identity, ops, attrs)."""
    return sorted((c.name, id(c), sorted(op.name for op in c.get_ops()), repr(sorted(c.get_attrs().items())))
                  for c in graph.get_root_subgraph().get_children())


def quotient(graph: Graph) -> nx.DiGraph:
    """The root's children as a networkx DiGraph: an edge where an op of one reads an op of another."""
    root = graph.get_root_subgraph()
    child_of = {op: c for c in root.get_children() for op in c.get_ops()}
    q = nx.DiGraph()
    q.add_nodes_from(root.get_children())
    q.add_edges_from((child_of[p], child_of[op]) for op in graph.get_ops() for p in op.get_input_ops()
                     if child_of[p] is not child_of[op])
    return q


def wave_counts(graph: Graph, labels: dict[Subgraph, str]) -> Counter:
    """Groups per label of the plain topological-wave partition (computed before merging)."""
    q = quotient(graph)
    wave: dict[Subgraph, int] = {}
    for c in nx.topological_sort(q):
        mine = labels.get(c)
        wave[c] = max((wave[p] + (0 if mine is not None and labels.get(p) == mine else 1)
                       for p in q.predecessors(c)), default=0)
    return Counter(label for label, _ in {(labels[c], wave[c]) for c in labels})


def assert_partition_sound(graph: Graph) -> None:
    """Every op in exactly one child of the root, and no cycle among the children."""
    counts = Counter(op for c in graph.get_root_subgraph().get_children() for op in c.get_ops())
    assert set(counts) == set(graph.get_ops()) and set(counts.values()) == {1}
    assert nx.is_directed_acyclic_graph(quotient(graph))


# -- merge_subgraph: tables --------------------------------------------------------------------
CHAIN = [("a", "Relu", []), ("b", "Relu", ["a"]), ("u", "TopK", ["b"]), ("c", "Relu", ["u"]), ("d", "Relu", ["c"])]
DIAMOND = [("a", "Relu", []), ("b", "TopK", ["a"]), ("c", "Relu", ["a"]), ("d", "Add", ["b", "c"])]
SIDE_BRANCH = [("c", "Relu", []), ("u", "TopK", []), ("b", "Relu", ["u"])]
TWO_PATHS = [("a", "Relu", []), ("u", "TopK", ["a"]), ("b", "Relu", ["u"]), ("e", "Relu", []), ("f", "Relu", ["e"])]

MERGE_CASES = [
    # (name, spec, build options, ops to merge, expected groups of merged ops)
    ("chain", CHAIN[:2], {}, "ab", ["ab"]),
    ("cut by an unselected op", CHAIN, {}, "abcd", ["ab", "cd"]),
    ("cut by an assigned op", CHAIN, {"assigned": "u"}, "abcd", ["ab", "cd"]),
    ("diamond around a foreign op", DIAMOND, {}, "acd", ["ac", "d"]),
    ("independent op joins the later group", SIDE_BRANCH, {}, "cb", ["bc"]),
    ("disconnected parts share groups", TWO_PATHS, {}, "abef", ["aef", "b"]),
    ("unselected same-type ops stay apart", CHAIN, {}, "cd", ["cd"]),
    ("pre-merged child counts as one", CHAIN, {"merged": ["cd"]}, "abcd", ["ab", "cd"]),
    ("single subgraph", CHAIN, {}, "a", ["a"]),
]


@pytest.mark.parametrize("spec, options, selected, expected",
                         [case[1:] for case in MERGE_CASES], ids=[case[0] for case in MERGE_CASES])
def test_merge_subgraph_table(spec, options, selected, expected):
    g = build(spec, **options)
    untouched = partition(g) - {frozenset(op.name for op in c.get_ops()) for c in children_of(g, selected)}
    result = merge_subgraph(children_of(g, selected))
    assert sorted("".join(sorted(op.name for op in sg.get_ops())) for sg in result) == expected
    assert result <= g.get_root_subgraph().get_children()
    assert untouched <= partition(g)
    assert_partition_sound(g)


def test_merge_subgraph_beats_waves_on_an_independent_branch():
    g = build(SIDE_BRANCH)  # c first: waves put it at level 0, b (after the foreign u) at level 1
    selected = children_of(g, "cb")
    assert wave_counts(g, dict.fromkeys(selected, "A"))["A"] == 2
    assert len(merge_subgraph(selected)) == 1
    assert_partition_sound(g)


def test_merge_subgraph_of_nothing_changes_nothing():
    g = build(CHAIN)
    before = snapshot(g)
    assert merge_subgraph(set()) == set()
    assert snapshot(g) == before


def test_merge_subgraph_names_merged_subgraphs_after_their_smallest_op():
    g = build(CHAIN)
    assert {sg.name for sg in merge_subgraph(children_of(g, "abcd"))} == {"subgraph_a", "subgraph_c"}


def test_merge_subgraph_takes_filter_results_and_lists():
    g = build(CHAIN)
    assert len(merge_subgraph(filter_by_type(g, "Relu"))) == 2
    g = build(CHAIN)
    assert len(merge_subgraph(sorted(children_of(g, "abcd"), key=lambda s: s.name))) == 2


# -- merge_subgraph: errors leave the tree as it was ---------------------------------------------
def stale(g: Graph, first: str = "a", second: str = "b") -> Subgraph:
    """A child that a merge has replaced."""
    old = g.get_leaf_subgraph(first)
    g.get_root_subgraph().merge_children({old, g.get_leaf_subgraph(second)})
    return old


def deeper(g: Graph, first: str = "a", second: str = "b") -> Subgraph:
    """A depth-2 subgraph."""
    child = g.get_leaf_subgraph(first)
    child.create_child_subgraph()
    return next(iter(child.get_children()))


def split(g: Graph, first: str = "a", second: str = "b") -> Subgraph:
    """A depth-1 child that has children of its own."""
    child = g.get_leaf_subgraph(first)
    child.create_child_subgraph()
    return child


def assigned(g: Graph, first: str = "a", second: str = "b") -> Subgraph:
    """A depth-1 child with a "device"."""
    child = g.get_leaf_subgraph(first)
    child.set_attr("device", "DPU")
    return child


BAD_INPUTS = [
    (assigned, "already assigned to device 'DPU'"),
    (lambda g: build(CHAIN).get_leaf_subgraph("a"), "belongs to graph"),
    (lambda g: g.get_root_subgraph(), "is the root"),
    (deeper, "depth 2"),
    (split, "has children"),
    (stale, "no longer in graph"),
    (lambda g: "subgraph_a", "not a Subgraph"),
]


@pytest.mark.parametrize("make_bad, message", BAD_INPUTS)
def test_merge_subgraph_rejects_bad_input_and_changes_nothing(make_bad, message):
    g = build(CHAIN)
    bad = make_bad(g)
    good = {c for c in g.get_root_subgraph().get_children() if c.is_leaf and not c.has_attr("device")} - {bad}
    before = snapshot(g)
    with pytest.raises(PartitionError, match=message):
        merge_subgraph([*good, bad])
    assert snapshot(g) == before


@pytest.mark.parametrize("arg, message", [(None, "set of subgraphs"), ("subgraph_a", "set of subgraphs")])
def test_merge_subgraph_rejects_non_collections(arg, message):
    with pytest.raises(PartitionError, match=message):
        merge_subgraph(arg)


def test_merge_subgraph_rejects_a_single_subgraph_with_a_hint():
    g = build(CHAIN)
    with pytest.raises(PartitionError, match=r"pass \{sg\}"):
        merge_subgraph(g.get_leaf_subgraph("a"))


# -- group_children ----------------------------------------------------------------------------
def test_group_children_several_labels():
    spec = [("a", "Conv", []), ("b", "NonZero", ["a"]), ("c", "Conv", ["b"]), ("d", "Relu", ["a"]),
            ("e", "Gather", ["d"]), ("f", "Add", ["c", "e"])]
    g = build(spec)
    device = {"a": "AICORE", "b": "AICPU", "c": "AICORE", "d": "AICORE", "e": "AICPU", "f": "AICORE"}
    labels = {g.get_leaf_subgraph(n): dev for n, dev in device.items()}
    groups = group_children(g.get_root_subgraph(), labels)
    assert [sorted(sg.name[-1] for sg in group) for group in groups] == [["a", "d"], ["b", "e"], ["c", "f"]]
    g.get_root_subgraph().merge_child_groups(groups, check_cycles=False)
    assert_partition_sound(g)


def test_group_children_leaves_unlabelled_children_out_and_changes_nothing():
    g = build(CHAIN)
    before = snapshot(g)
    groups = group_children(g.get_root_subgraph(), dict.fromkeys(children_of(g, "acd"), "X"))
    assert sorted(sorted(sg.name[-1] for sg in grp) for grp in groups) == [["a"], ["c", "d"]]
    assert snapshot(g) == before
    assert group_children(g.get_root_subgraph(), {}) == []


@pytest.mark.parametrize("make_call, message", [
    (lambda g: (g.get_leaf_subgraph("a"), {}), "not a root subgraph"),
    (lambda g: (g.get_root_subgraph(), [g.get_leaf_subgraph("a")]), "must map"),
    (lambda g: (g.get_root_subgraph(), {build(CHAIN).get_leaf_subgraph("a"): "X"}), "not a child of the root"),
    (lambda g: (g.get_root_subgraph(), {split(g): "X"}), "has children"),
    (lambda g: (g.get_root_subgraph(), {g.get_leaf_subgraph("a"): ["X"]}), "not hashable"),
])
def test_group_children_rejects_bad_input(make_call, message):
    g = build(CHAIN)
    root, labels = make_call(g)
    before = snapshot(g)
    with pytest.raises(PartitionError, match=message):
        group_children(root, labels)
    assert snapshot(g) == before


# -- level_partition ---------------------------------------------------------------------------
LEVEL_CASES = [
    # (preds, labels, expected levels)
    ([], [], []),
    ([[], [0], [1]], [0, 0, 0], [0, 0, 0]),
    ([[], [0], [1]], [0, FIXED, 0], [0, 1, 2]),
    ([[], [0], []], [1, 0, 0], [0, 1, 1]),
    ([[], [], [0, 1]], [FIXED, FIXED, FIXED], [0, 0, 1]),
]


@pytest.mark.parametrize("preds, labels, expected", LEVEL_CASES)
def test_level_partition_table(preds, labels, expected):
    assert level_partition(preds, labels) == expected


@pytest.mark.parametrize("preds, labels, message", [
    ([[], [2], []], [0, 0, 0], "topological order"),
    ([[1], []], [0, 0], "topological order"),
    ([[]], [0, 0], "one of each"),
])
def test_level_partition_rejects_bad_numbering(preds, labels, message):
    with pytest.raises(PartitionError, match=message):
        level_partition(preds, labels)


COALESCE_CASES = [
    # (preds, labels, levels, expected group ids)
    ([[], [0]], [0, 0], [0, 1], [0, 0]),                        # only a direct edge links them
    ([[], [0], [1]], [0, FIXED, 0], [0, 1, 2], [0, 1, 2]),       # a FIXED node lies on the path
    ([[], [], [0], [1]], [0, 1, 0, 1], [0, 0, 1, 1], [0, 1, 0, 1]),  # labels never mix
    ([[], [0], [1]], [0, 0, 0], [0, 1, 2], [0, 0, 0]),
    # a -> f -> b -> g -> c: c's second attempt (with a) is refused from what the first searches found
    ([[], [0], [1], [2], [3]], [0, FIXED, 0, FIXED, 0], [0, 1, 2, 3, 4], [0, 1, 2, 3, 4]),
    # b is linked to a (through f); the unrelated d still joins b (a join forgets what the searches found)
    ([[], [0], [1], [], [2, 3]], [0, FIXED, 0, 0, FIXED], [0, 1, 2, 3, 4], [0, 1, 2, 2, 4]),
]


@pytest.mark.parametrize("preds, labels, levels, expected", COALESCE_CASES)
def test_coalesce_groups_table(preds, labels, levels, expected):
    assert coalesce_groups(preds, labels, levels) == expected


@st.composite
def integer_dags(draw, max_nodes: int = 40):
    """Nodes 0..n-1 in topological order, up to 3 predecessors each, labels 0, 1 or FIXED."""
    n = draw(st.integers(0, max_nodes))
    preds = [draw(st.lists(st.integers(0, v - 1), max_size=3, unique=True)) if v else [] for v in range(n)]
    labels = draw(st.lists(st.sampled_from([0, 1, FIXED]), min_size=n, max_size=n))
    return preds, labels


@settings(max_examples=300, deadline=None)
@given(integer_dags(), st.integers(1, 64))
def test_level_partition_and_coalescing_on_integer_dags(dag, budget):
    preds, labels = dag
    levels = level_partition(preds, labels)
    groups = coalesce_groups(preds, labels, levels, budget=budget)
    group_of = [(labels[v], groups[v]) if labels[v] != FIXED else ("fixed", v) for v in range(len(labels))]
    contracted = nx.DiGraph()
    contracted.add_nodes_from(group_of)
    contracted.add_edges_from((group_of[u], group_of[v]) for v in range(len(preds)) for u in preds[v]
                              if group_of[u] != group_of[v])
    assert nx.is_directed_acyclic_graph(contracted)
    for label in (0, 1):  # plain waves, grouped the same way, never give fewer groups
        wave = []
        for v, sources in enumerate(preds):
            wave.append(max((wave[u] + (labels[u] != labels[v] or labels[v] == FIXED) for u in sources), default=0))
        waves = {wave[v] for v in range(len(labels)) if labels[v] == label}
        level_groups = {levels[v] for v in range(len(labels)) if labels[v] == label}
        joined = {groups[v] for v in range(len(labels)) if labels[v] == label}
        assert len(joined) <= len(level_groups) <= len(waves)


@settings(max_examples=300, deadline=None)
@given(integer_dags(max_nodes=60), st.integers(1, 64), st.integers(1, 3))
def test_group_nodes_is_levels_then_coalescing(dag, budget, attempts):
    preds, labels = dag  # the one-pass path group_children runs against the two public steps it fuses
    levels = level_partition(preds, labels)
    expected = coalesce_groups(preds, labels, levels, attempts=attempts, budget=budget)
    assert group_nodes(preds, labels, attempts=attempts, budget=budget) == expected


@settings(max_examples=300, deadline=None)
@given(integer_dags(max_nodes=60), st.integers(1, 64), st.integers(1, 3))
def test_joins_refused_by_a_path_found_backwards_are_the_ones_the_search_refuses(dag, budget, attempts):
    preds, labels = dag  # with the backward look disabled every attempt goes to the contracted graph's search
    quick = group_nodes(preds, labels, attempts=attempts, budget=budget)
    saved = joins_module._LOOK_BACK
    joins_module._LOOK_BACK = 0
    try:
        searched = group_nodes(preds, labels, attempts=attempts, budget=budget)
    finally:
        joins_module._LOOK_BACK = saved
    assert quick == searched


@pytest.mark.parametrize("preds, labels, message", [
    ([[], [2], []], [0, 0, 0], "node 1 lists predecessor 2"),
    ([[], [-1]], [0, 0], "node 1 lists predecessor -1"),
    ([[]], [0, 0], "one of each"),
])
def test_group_nodes_rejects_bad_numbering(preds, labels, message):
    with pytest.raises(PartitionError, match=message):
        group_nodes(preds, labels)


def test_docstring_examples_run():
    assert doctest.testmod(levels_module).failed == 0
    assert doctest.testmod(merge_module).failed == 0


# -- properties on random DAGs -----------------------------------------------------------------
KINDS = ("A", "B", "free", "assigned")


@st.composite
def random_graphs(draw, max_ops: int = 14):
    """A random DAG with a kind per op, some children pre-merged and some inputs rewired backwards."""
    n = draw(st.integers(1, max_ops))
    inputs = [draw(st.lists(st.integers(0, i - 1), max_size=3, unique=True)) if i else [] for i in range(n)]
    kinds = draw(st.lists(st.sampled_from(KINDS), min_size=n, max_size=n))
    pairs = st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
    merges = draw(st.lists(pairs, max_size=3))
    rewires = draw(st.lists(pairs, max_size=2))
    return inputs, kinds, merges, rewires


def make_random(case) -> tuple[Graph, dict[Subgraph, str]]:
    """Build a case: the graph (children created, some merged, some assigned) and the label of each child."""
    inputs, kinds, merges, rewires = case
    g = Graph("random")
    g.create_input("x", [4])
    ops = [g.create_op(f"n{i:02d}", "Relu", inputs=[f"n{j:02d}" for j in ins] or ["x"])
           for i, ins in enumerate(inputs)]
    for i, j in rewires:  # make insertion order non-topological where the DAG allows it
        try:
            ops[i].set_input(0, ops[j].get_output_tensor())
        except GraphError:
            pass
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    for i, j in merges:  # multi-op children, only between ops of one kind
        a, b = g.get_leaf_subgraph(ops[i]), g.get_leaf_subgraph(ops[j])
        if a is not b and kinds[i] == kinds[j]:
            try:
                root.merge_children({a, b})
            except GraphError:
                pass
    labels = {}
    for op, kind in zip(ops, kinds):
        child = g.get_leaf_subgraph(op)
        if kind == "assigned":
            child.set_attr("device", "DPU")
        elif kind in ("A", "B"):
            labels[child] = kind
    return g, labels


FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(random_graphs())
def test_merge_subgraph_properties(case):
    g, labels = make_random(case)
    selected = {c for c, label in labels.items() if label == "A"}
    others = g.get_root_subgraph().get_children() - selected
    bound = wave_counts(g, dict.fromkeys(selected, "A"))["A"]
    selected_ops = {op for c in selected for op in c.get_ops()}

    result = merge_subgraph(selected)

    assert_partition_sound(g)
    assert len(result) <= bound
    assert {op for sg in result for op in sg.get_ops()} == selected_ops
    assert sum(sg.get_op_num() for sg in result) == len(selected_ops)
    root = g.get_root_subgraph()
    assert all(root.is_child(sg) and sg.is_leaf and not sg.has_attr("device") for sg in result)
    assert others <= root.get_children()  # children not passed in are the very same objects


@FAST
@given(random_graphs())
def test_merge_subgraph_is_deterministic(case):
    first, labels = make_random(case)
    second, labels2 = make_random(case)
    merge_subgraph({c for c, label in labels.items() if label == "A"})
    merge_subgraph(sorted((c for c, label in labels2.items() if label == "A"), key=lambda c: c.name, reverse=True))
    assert partition(first) == partition(second)


@FAST
@given(random_graphs())
def test_group_children_with_several_labels(case):
    g, labels = make_random(case)
    root = g.get_root_subgraph()
    bound = wave_counts(g, labels)
    unlabelled = root.get_children() - set(labels)

    groups = group_children(root, labels)

    assert sorted(id(c) for group in groups for c in group) == sorted(id(c) for c in labels)
    assert all(len({labels[c] for c in group}) == 1 for group in groups)
    per_label = Counter(labels[group[0]] for group in groups)
    assert all(per_label[label] <= bound[label] for label in bound)
    root.merge_child_groups(groups, check_cycles=False)
    assert_partition_sound(g)
    assert unlabelled <= root.get_children()


@FAST
@given(random_graphs(), st.sampled_from([assigned, stale, split, deeper]))
def test_merge_subgraph_failure_changes_nothing(case, make_bad):
    inputs, kinds, _, _ = case
    # ops n00 -> n01 stay unselected, so the bad subgraph is made from them
    g, labels = make_random(([[], [0], *inputs[2:]], ["free", "free", *kinds[2:]], [], []))
    bad = make_bad(g, "n00", "n01")
    good = {c for c, label in labels.items() if label == "A"}
    before = snapshot(g)
    with pytest.raises(PartitionError, match="nothing was merged"):
        merge_subgraph([*good, bad])
    assert snapshot(g) == before
