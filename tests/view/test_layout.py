"""Layered layout: layers respect edges, side inputs sink, rows do not overlap, crossings are counted right."""
from __future__ import annotations

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from xgraph.view.layout import LayoutStyle, assign_layers, count_edge_crossings, layered_layout

STYLE = LayoutStyle()


def _rows(layout):
    rows: dict[float, list[tuple[float, object]]] = {}
    for node, (x, y) in layout.positions.items():
        rows.setdefault(y, []).append((x, node))
    return rows


def _check(dag: nx.DiGraph) -> None:
    layout = layered_layout(dag)
    for u, v in dag.edges:
        assert layout.layer_of[v] > layout.layer_of[u]
        route = layout.edges[(u, v)]
        assert route[0] == (layout.positions[u][0], layout.positions[u][1] + STYLE.node_height / 2)
        assert route[-1] == (layout.positions[v][0], layout.positions[v][1] - STYLE.node_height / 2)
        assert all(a[1] < b[1] for a, b in zip(route, route[1:]))  # edges only go down
    for row in _rows(layout).values():
        xs = sorted(x for x, _ in row)
        assert all(b - a >= STYLE.node_width + STYLE.x_gap - 1e-6 for a, b in zip(xs, xs[1:]))
    for x, y in layout.positions.values():
        assert STYLE.node_width / 2 - 1e-6 <= x <= layout.width - STYLE.node_width / 2 + 1e-6
        assert 0 < y < layout.height


def test_diamond_has_three_layers_and_no_crossings():
    layout = layered_layout(nx.DiGraph([("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]))
    assert [layout.layer_of[n] for n in "abcd"] == [0, 1, 1, 2]
    assert layout.crossings == 0
    assert layout.positions["b"][1] == layout.positions["c"][1]


def test_side_inputs_sink_next_to_their_consumer():
    # w -> u -> far: a weight generator chain feeding an op deep in the main chain
    dag = nx.DiGraph([(f"m{i}", f"m{i + 1}") for i in range(6)] + [("w", "u"), ("u", "m5")])
    layers = assign_layers(dag)
    assert layers["m5"] == 5 and layers["u"] == 4 and layers["w"] == 3
    assert layers["m0"] == 0  # the main chain stays put


def test_main_chain_stays_straight_beside_side_inputs():
    dag = nx.DiGraph([("input", "m0")])  # as drawn: the graph input feeds the first op
    for i in range(20):
        dag.add_edge(f"m{i}", f"m{i + 1}")
        for k in range(3):  # each op of the chain reads three generated weights
            dag.add_edge(f"w{i}_{k}", f"m{i + 1}")
    layout = layered_layout(dag)
    xs = {round(layout.positions[f"m{i}"][0], 3) for i in range(21)}
    assert len(xs) == 1


def test_crossing_count_of_a_twisted_pair():
    up = {"c": ["b"], "d": ["a"]}
    assert count_edge_crossings([["a", "b"], ["c", "d"]], up) == 1
    assert count_edge_crossings([["a", "b"], ["d", "c"]], up) == 0


def test_ordering_removes_avoidable_crossings():
    # initial insertion order crosses (a->y, b->x); the sweeps must untangle it
    dag = nx.DiGraph()
    dag.add_nodes_from(["a", "b", "x", "y"])
    dag.add_edges_from([("a", "y"), ("b", "x")])
    assert layered_layout(dag).crossings == 0


def test_long_edges_bend_through_every_row():
    dag = nx.DiGraph([("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")])
    layout = layered_layout(dag)
    assert len(layout.edges[("a", "d")]) == 2 + 2  # ends plus one bend per row crossed
    _check(dag)


def test_layout_is_deterministic_and_handles_empty_graphs():
    dag = nx.gn_graph(60, seed=3).reverse()
    a, b = layered_layout(dag), layered_layout(dag)
    assert a.positions == b.positions and a.edges == b.edges
    empty = layered_layout(nx.DiGraph())
    assert empty.positions == {} and empty.width > 0


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 40), st.lists(st.tuples(st.integers(0, 39), st.integers(0, 39)), max_size=90))
def test_random_dags_lay_out_validly(n, pairs):
    dag = nx.DiGraph()
    dag.add_nodes_from(range(n))
    dag.add_edges_from((min(a, b), max(a, b)) for a, b in pairs if a != b and max(a, b) < n)
    _check(dag)


def test_docstring_example_runs():
    import doctest

    import xgraph.view.layout as module
    assert doctest.testmod(module).failed == 0
