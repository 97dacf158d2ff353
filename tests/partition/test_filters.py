"""Filters: each one returns exactly the unassigned depth-1 leaf children that hold what was asked for."""
from __future__ import annotations

import pytest

from xgraph import Graph, GraphTemplate, Subgraph
from xgraph.errors import PartitionError
from xgraph.partition import filter, filter_by_name, filter_by_template, filter_by_type

# x -> conv1 -> bn1 -> relu1 -> conv2 -> relu2 -> add(relu1, relu2) -> softmax
NET = [
    ("conv1", "Conv", ["x"]),
    ("bn1", "BatchNormalization", ["conv1"]),
    ("relu1", "Relu", ["bn1"]),
    ("conv2", "Conv", ["relu1"]),
    ("relu2", "Relu", ["conv2"]),
    ("add", "Add", ["relu1", "relu2"]),
    ("softmax", "Softmax", ["add"]),
]


def build(spec=NET, *, children: bool = True, assigned: tuple[str, ...] = (), merged: tuple[str, ...] = (),
          split: tuple[str, ...] = ()) -> Graph:
    """A graph from (name, type, inputs); `assigned` ops get "device", `merged` ops share one child,
    `split` ops' children get children of their own (so they are no longer leaves)."""
    g = Graph("net")
    g.create_input("x", [1, 3, 8, 8])
    for name, op_type, inputs in spec:
        g.create_op(name, op_type, inputs=inputs)
    if children:
        root = g.get_root_subgraph()
        root.create_child_subgraph()
        if merged:
            root.merge_children({g.get_leaf_subgraph(n) for n in merged})
        for name in split:
            g.get_leaf_subgraph(name).create_child_subgraph()
        for name in assigned:
            root.find_child_subgraph_by_op(name).set_attr("device", "DPU")
    return g


def ops_of(result) -> list[list[str]]:
    """A filter's result as sorted lists of op names, one per subgraph."""
    if result is None:
        return []
    if isinstance(result, Subgraph):
        result = {result}
    return sorted(sorted(op.name for op in sg.get_ops()) for sg in result)


def assert_all_unassigned(graph: Graph, result) -> None:
    """Independent oracle of the unassigned rule: depth-1, leaf, child of the root, no "device"."""
    root = graph.get_root_subgraph()
    for sg in ({result} if isinstance(result, Subgraph) else result or ()):
        assert sg.depth == 1 and root.is_child(sg) and sg.is_leaf and not sg.has_attr("device"), sg


# -- filter_by_type ----------------------------------------------------------------------------
TYPE_CASES = [
    # (op type(s), build options, expected op names per returned subgraph)
    ("Conv", {}, [["conv1"], ["conv2"]]),
    ("Conv", {"assigned": ("conv2",)}, [["conv1"]]),
    ("Relu", {}, [["relu1"], ["relu2"]]),
    ("Softmax", {"assigned": ("softmax",)}, []),
    ("Gemm", {}, []),
    (["Conv", "Relu"], {"assigned": ("relu1",)}, [["conv1"], ["conv2"], ["relu2"]]),
    ({"Add", "Softmax"}, {}, [["add"], ["softmax"]]),
    # a merged child holding one op of the type is returned whole
    ("BatchNormalization", {"merged": ("conv1", "bn1")}, [["bn1", "conv1"]]),
    # a child split into deeper children is not a leaf: neither it nor its children are returned
    ("Conv", {"split": ("conv1",)}, [["conv2"]]),
]


@pytest.mark.parametrize("op_type, options, expected", TYPE_CASES)
def test_filter_by_type(op_type, options, expected):
    g = build(**options)
    result = filter_by_type(g, op_type)
    assert isinstance(result, set)
    assert ops_of(result) == expected
    assert_all_unassigned(g, result)


@pytest.mark.parametrize("bad", [3, None, [""], ["Conv", 7]])
def test_filter_by_type_rejects_non_str_types(bad):
    with pytest.raises(PartitionError, match="op type"):
        filter_by_type(build(), bad)


# -- filter_by_name ----------------------------------------------------------------------------
NAME_CASES = [
    ("conv1", {}, [["conv1"]]),
    ("conv2", {"assigned": ("conv2",)}, []),
    ("bn1", {"merged": ("conv1", "bn1")}, [["bn1", "conv1"]]),
    ("conv1", {"split": ("conv1",)}, []),
    ("no_such_op", {}, []),
]


@pytest.mark.parametrize("name, options, expected", NAME_CASES)
def test_filter_by_name(name, options, expected):
    g = build(**options)
    result = filter_by_name(g, name)
    assert result is None or isinstance(result, Subgraph)
    assert ops_of(result) == expected
    assert_all_unassigned(g, result)


def test_filter_by_name_rejects_a_non_str_name():
    with pytest.raises(PartitionError, match="str"):
        filter_by_name(build(), 42)


# -- filter_by_template ------------------------------------------------------------------------
def conv_bn_relu() -> GraphTemplate:
    t = GraphTemplate("conv_bn_relu")
    conv = t.add_op("conv", {"Conv"})
    bn = t.add_op("bn", {"BatchNormalization"}, inputs=[conv])
    t.add_op("act", {"Relu", "Clip"}, inputs=[bn])
    return t


def conv_relu() -> GraphTemplate:
    t = GraphTemplate("conv_relu")
    t.add_op("act", {"Relu"}, inputs=[t.add_op("conv", {"Conv"})])
    return t


def conv_relu_on_second_conv_only() -> GraphTemplate:
    t = conv_relu()
    t.get_op("conv").set_filter(lambda op: op.name == "conv2")
    return t


def relu_feeding_add() -> GraphTemplate:
    t = GraphTemplate("relu_add")
    t.add_op("add", {"Add"}, inputs=[t.add_op("relu", {"Relu"})])
    return t


TEMPLATE_CASES = [
    (conv_bn_relu, {}, [["bn1"], ["conv1"], ["relu1"]]),
    (conv_relu, {}, [["conv2"], ["relu2"]]),
    (conv_relu_on_second_conv_only, {}, [["conv2"], ["relu2"]]),
    # two matches (relu1 -> add, relu2 -> add) share the add
    (relu_feeding_add, {}, [["add"], ["relu1"], ["relu2"]]),
    # a match touching an assigned subgraph is skipped whole; the other match stays
    (relu_feeding_add, {"assigned": ("relu2",)}, [["add"], ["relu1"]]),
    (conv_relu, {"assigned": ("relu2",)}, []),
    (conv_bn_relu, {"merged": ("conv1", "bn1")}, [["bn1", "conv1"], ["relu1"]]),
    (conv_bn_relu, {"split": ("bn1",)}, []),
]


@pytest.mark.parametrize("make_template, options, expected", TEMPLATE_CASES)
def test_filter_by_template(make_template, options, expected):
    g = build(**options)
    result = filter_by_template(g, make_template())
    assert ops_of(result) == expected
    assert_all_unassigned(g, result)


def test_filter_by_template_rejects_a_non_template():
    with pytest.raises(PartitionError, match="GraphTemplate"):
        filter_by_template(build(), "conv_relu")


# -- filter ------------------------------------------------------------------------------------
def test_filter_hands_func_exactly_the_unassigned_children():
    g = build(assigned=("conv2", "softmax"), split=("bn1",))
    seen = []
    result = filter(g, lambda candidates: seen.append(set(candidates)) or candidates)
    assert ops_of(seen[0]) == [["add"], ["conv1"], ["relu1"], ["relu2"]]
    assert result == seen[0]


def test_filter_returns_the_subset_func_chose():
    g = build()
    result = filter(g, lambda sgs: {sg for sg in sgs if any(op.type == "Relu" for op in sg.get_ops())})
    assert ops_of(result) == [["relu1"], ["relu2"]]


def test_filter_is_not_fooled_by_func_mutating_its_argument():
    g = build(assigned=("conv1",))
    assigned = g.get_leaf_subgraph("conv1")

    def sneaky(candidates: set) -> set:
        candidates.add(assigned)
        return candidates

    with pytest.raises(PartitionError, match="subgraph_conv1"):
        filter(g, sneaky)


@pytest.mark.parametrize("returned, match", [
    (lambda g: {g.get_leaf_subgraph("conv2")}, "already assigned to device 'DPU'"),
    (lambda g: {build().get_leaf_subgraph("conv1")}, "belongs to graph"),
    (lambda g: {g.get_root_subgraph()}, "is the root"),
    (lambda g: None, "must return"),
    (lambda g: g.get_leaf_subgraph("conv1"), "must return"),
    (lambda g: {"subgraph_conv1"}, "not a Subgraph"),
])
def test_filter_rejects_what_it_did_not_give(returned, match):
    g = build(assigned=("conv2",))
    with pytest.raises(PartitionError, match=match):
        filter(g, lambda candidates: returned(g))


# -- graphs without children -------------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda g: filter_by_name(g, "conv1"),
    lambda g: filter_by_type(g, "Conv"),
    lambda g: filter_by_template(g, conv_relu()),
    lambda g: filter(g, lambda s: s),
])
def test_helpers_ask_for_create_child_subgraph_first(call):
    with pytest.raises(PartitionError, match=r"create_child_subgraph\(\) first"):
        call(build(children=False))


def test_helpers_on_an_empty_graph_find_nothing():
    g = Graph("empty")
    assert filter_by_name(g, "a") is None
    assert filter_by_type(g, "Conv") == set()
    assert filter_by_template(g, conv_relu()) == set()
    assert filter(g, lambda s: s) == set()


@pytest.mark.parametrize("call", [
    lambda: filter_by_type("not a graph", "Conv"),
    lambda: filter_by_name(None, "conv1"),
])
def test_helpers_reject_a_non_graph(call):
    with pytest.raises(PartitionError, match="xgraph.Graph"):
        call()
