"""Resource bombs in small files: each runs in a child process under an address-space and CPU-time
limit, and must end with a clean result (an XGraphError message, or a load/compile that stays
small) instead of hitting the limit. No timing asserts: the limits are the bound."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

vi = helper.make_tensor_value_info
OPSET = helper.make_opsetid("", 17)

CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({memory}, {memory}))
resource.setrlimit(resource.RLIMIT_CPU, ({cpu}, {cpu}))
import xgraph
from xgraph.errors import XGraphError
try:
    result = {call}
    print("ok", {show})
except XGraphError as e:
    print("refused", type(e).__name__, e)
"""


def run_limited(call: str, path: Path, show: str = "''", memory: int = 1 << 30, cpu: int = 30) -> str:
    """Run `call` (`{path!r}` is replaced by the model path) in a child under the limits; its one output line."""
    code = CHILD.format(memory=memory, cpu=cpu, call=call.format(path=str(path)), show=show)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"child failed (limit hit?): rc {r.returncode}\n{r.stderr[-2000:]}"
    return r.stdout.strip()


def save(model, path: Path) -> Path:
    path.write_bytes(model.SerializeToString())
    return path


def function_bomb(depth: int):
    """Local functions f0..f(depth-1), each calling the one below twice: 2**depth nodes once expanded."""
    local = [OPSET, helper.make_opsetid("local", 1)]
    functions = [helper.make_function("local", "f0", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])], local)]
    for i in range(1, depth):
        calls = [helper.make_node(f"f{i - 1}", ["x"], ["t"], domain="local"),
                 helper.make_node(f"f{i - 1}", ["t"], ["y"], domain="local")]
        functions.append(helper.make_function("local", f"f{i}", ["x"], ["y"], calls, local))
    graph = helper.make_graph([helper.make_node(f"f{depth - 1}", ["x"], ["y"], domain="local")], "bomb",
                              [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, functions=functions, opset_imports=local)


def test_nested_local_functions_are_bounded_before_inference(tmp_path):
    path = save(function_bomb(22), tmp_path / "functions.onnx")
    assert path.stat().st_size < 2000
    out = run_limited("xgraph.load({path!r})", path)
    assert out.startswith("refused ModelFileError") and "expand to more than" in out and "functions.onnx" in out, out


def test_modest_local_functions_still_load_with_inferred_shapes(tmp_path):
    from xgraph.ir.onnx.inference_budget import expanded_node_count
    model = function_bomb(6)
    assert expanded_node_count(model, "m") == 2 ** 5  # f5 expands to 32 Relu nodes
    import xgraph
    graph = xgraph.load(model.SerializeToString())
    assert graph.get_tensor("y").shape == (4,)  # inference ran through the functions


def test_recursive_local_functions_are_refused():
    import xgraph
    from xgraph.errors import ModelFileError
    local = [OPSET, helper.make_opsetid("local", 1)]
    f = helper.make_function("local", "f", ["x"], ["y"], [helper.make_node("f", ["x"], ["y"], domain="local")], local)
    graph = helper.make_graph([helper.make_node("f", ["x"], ["y"], domain="local")], "rec",
                              [vi("x", TensorProto.FLOAT, [4])], [vi("y", TensorProto.FLOAT, None)])
    with pytest.raises(ModelFileError, match="calls itself"):
        xgraph.load(helper.make_model(graph, functions=[f], opset_imports=local).SerializeToString())


def data_prop_bomb(n: int, how: str):
    """A length-n 1-D tensor reaching Add, its length coming from a constant value or a product of two."""
    if how == "constant":
        nodes = [helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([n], np.int64)))]
    elif how == "value_ints":
        nodes = [helper.make_node("Constant", [], ["s"], value_ints=[n])]
    else:  # data propagation computes the length itself
        root = int(round(n ** 0.5))
        nodes = [helper.make_node("Constant", [], ["a"], value_ints=[root]), helper.make_node("Mul", ["a", "a"], ["s"])]
    nodes += [helper.make_node("ConstantOfShape", ["s"], ["c"]), helper.make_node("Add", ["c", "c"], ["y"])]
    graph = helper.make_graph(nodes, "bomb", [], [vi("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[OPSET])


@pytest.mark.parametrize("how", ["constant", "value_ints", "product"])
def test_data_propagation_cannot_be_fed_lengths_by_constant_values(tmp_path, how):
    # 2**26 elements: about 9 GiB inside onnx's data propagation, far over the child's 1 GiB
    path = save(data_prop_bomb(1 << 26, how), tmp_path / f"{how}.onnx")
    out = run_limited("xgraph.load({path!r})", path, show="result.get_op_num() if hasattr(result, 'get_op_num') "
                      "else len(result.get_ops())")
    assert out == "ok 3" if how != "product" else out == "ok 4", out


def test_data_propagation_still_resolves_small_shape_arithmetic():
    """Shape -> Gather -> Mul -> Reshape: the bounded case keeps data propagation."""
    import xgraph
    from xgraph.ir.onnx.inference_budget import data_propagation_is_bounded
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Constant", [], ["i"], value_ints=[0]), helper.make_node("Gather", ["s", "i"], ["d0"]),
             helper.make_node("Constant", [], ["k"], value_ints=[6]), helper.make_node("Mul", ["d0", "k"], ["n"]),
             helper.make_node("Reshape", ["x", "n"], ["y"])]
    graph = helper.make_graph(nodes, "shapes", [vi("x", TensorProto.FLOAT, [2, 3, 2])], [vi("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[OPSET])
    assert data_propagation_is_bounded(model, 3, 1 << 20)
    assert xgraph.load(model.SerializeToString()).get_tensor("y").shape == (12,)
    assert not data_propagation_is_bounded(data_prop_bomb(1 << 26, "product"), 1, 1 << 20)


def fold_bomb(n: int):
    """Concat of two constants -> Expand, plus an input declaring 2**21 (which turns off data propagation)."""
    a = numpy_helper.from_array(np.array([n], np.int64), "a")
    one = numpy_helper.from_array(np.array([1.0], np.float32), "one")
    nodes = [helper.make_node("Concat", ["a", "a"], ["s"], axis=0), helper.make_node("Expand", ["one", "s"], ["e"]),
             helper.make_node("Add", ["e", "x"], ["y"])]
    graph = helper.make_graph(nodes, "fold", [vi("x", TensorProto.FLOAT, [1 << 21])], [vi("y", TensorProto.FLOAT, None)],
                              [a, one])
    return helper.make_model(graph, opset_imports=[OPSET])


def test_constant_folding_estimates_sizes_from_values_before_evaluating(tmp_path):
    path = save(fold_bomb(50000), tmp_path / "fold.onnx")  # 50000 x 50000 floats: 10 GB if folded
    assert path.stat().st_size < 400
    out = run_limited("xgraph.compile({path!r})", path, show="sorted(o.type for o in result.get_ops())")
    assert out == "ok ['Add', 'Expand']", out  # the Concat folded; the Expand stays an op


def test_folding_estimates_match_what_evaluation_produces():
    """The estimate is an upper bound of the real result (oracle: the reference evaluator's output)."""
    import xgraph
    from xgraph.compiler.fold_sizes import estimated_output_bytes
    g = xgraph.Graph("sizes")
    cases = {
        "Expand": ([np.ones((3, 1), np.float32), np.array([2, 3, 4], np.int64)], np.ones((2, 3, 4), np.float32)),
        "Tile": ([np.ones((2, 3), np.float32), np.array([4, 5], np.int64)], np.ones((8, 15), np.float32)),
        "ConstantOfShape": ([np.array([7, 9], np.int64)], np.zeros((7, 9), np.float32)),
        "Add": ([np.ones((5, 1), np.float32), np.ones((1, 6), np.float32)], np.ones((5, 6), np.float32)),
        "MatMul": ([np.ones((2, 5, 3), np.float32), np.ones((3, 7), np.float32)], np.ones((2, 5, 7), np.float32)),
        "Range": ([np.array(0, np.int64), np.array(10, np.int64), np.array(3, np.int64)], np.arange(0, 10, 3)),
    }
    for op_type, (inputs, expected) in cases.items():
        consts = [g.create_const(f"{op_type}_in{i}", a) for i, a in enumerate(inputs)]
        op = g.create_op(f"{op_type}_op", op_type, inputs=consts)
        estimate = estimated_output_bytes(op)
        assert estimate is not None and expected.nbytes <= estimate <= 8 * expected.size + 64, (op_type, estimate)


def test_sparse_tensors_of_high_rank_are_expanded_or_refused_cleanly():
    import xgraph
    from xgraph.errors import ModelFileError
    for rank in (40, 64, 65, 70):
        dims = [2, 2] + [1] * (rank - 2)
        indices = np.zeros((2, rank), np.int64)
        indices[1, :2] = 1
        sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "s"),
                                           numpy_helper.from_array(indices, "i"), dims)
        graph = helper.make_graph([helper.make_node("Identity", ["s"], ["y"])], "sparse", [],
                                  [vi("y", TensorProto.FLOAT, None)], sparse_initializer=[sparse])
        data = helper.make_model(graph, opset_imports=[OPSET]).SerializeToString()
        if rank <= 64:
            dense = xgraph.Graph.from_onnx(data).get_tensor("s").data
            expected = np.zeros(dims, np.float32)
            expected[(0,) * rank] = 1.0
            expected[(1, 1) + (0,) * (rank - 2)] = 2.0
            assert np.array_equal(dense, expected)
        else:
            with pytest.raises(ModelFileError, match=f"rank {rank}"):
                xgraph.Graph.from_onnx(data)


def test_models_larger_than_the_expansion_limit_load_when_nothing_expands():
    """The limit bounds what expansion adds: a plain model longer than it is counted, never refused."""
    from xgraph.errors import ModelFileError
    from xgraph.ir.onnx.inference_budget import expanded_node_count
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(50)]
    plain = helper.make_model(helper.make_graph(nodes, "long", [vi("t0", TensorProto.FLOAT, [4])],
                                                [vi("t50", TensorProto.FLOAT, [4])]))
    assert expanded_node_count(plain, "m", limit=10) == 50
    bomb = function_bomb(6)  # one call expanding to 32 nodes: 31 added
    assert expanded_node_count(bomb, "m", limit=31) == 32
    with pytest.raises(ModelFileError, match="expand to more than 30 nodes"):
        expanded_node_count(bomb, "m", limit=30)


def _nested_bomb():
    """The product bomb inside an If branch: the budget must find it through the columns' attributes too."""
    inner = data_prop_bomb(1 << 26, "product").graph
    inner.ClearField("input")
    node = helper.make_node("If", ["cond"], ["y"], then_branch=inner, else_branch=inner)
    graph = helper.make_graph([node], "nested", [vi("cond", TensorProto.BOOL, [])], [vi("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[OPSET])


@pytest.mark.parametrize("case", ["constant", "value_ints", "product", "small", "nested", "functions"])
def test_budget_from_the_importers_columns_equals_the_budget_from_the_protos(case):
    """The importer hands its node columns to the budget checks; they must decide what the protos decide."""
    from xgraph.ir.onnx.inference_budget import data_propagation_is_bounded, expanded_node_count
    from xgraph.ir.onnx.nodes import Nodes
    if case == "nested":
        model = _nested_bomb()
    elif case == "functions":
        model = function_bomb(4)
    elif case == "small":
        model = data_prop_bomb(16, "product")
    else:
        model = data_prop_bomb(1 << 26, case)
    columns = Nodes(model.graph.node, "m")
    assert expanded_node_count(model, "m", top=columns) == expanded_node_count(model, "m")
    for limit in (1 << 20, 8):
        assert data_propagation_is_bounded(model, 1, limit, top=columns) == data_propagation_is_bounded(model, 1, limit)
    assert data_propagation_is_bounded(model, 1, 1 << 20, top=columns) == (case in ("small", "functions"))


def _doubling_chain(steps: int, reverse: bool):
    """Constant [1] doubled `steps` times by Add, then ConstantOfShape -> Add: a length of 2**steps."""
    nodes = [helper.make_node("Constant", [], ["v0"], value_ints=[1])]
    nodes += [helper.make_node("Add", [f"v{i}", f"v{i}"], [f"v{i + 1}"]) for i in range(steps)]
    nodes += [helper.make_node("ConstantOfShape", [f"v{steps}"], ["c"]), helper.make_node("Add", ["c", "c"], ["y"])]
    graph = helper.make_graph(nodes[::-1] if reverse else nodes, "doubling", [], [vi("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[OPSET])


@pytest.mark.parametrize("case", ["constant", "value_ints", "product", "small", "nested", "shapes", "doubling",
                                  "doubling_reversed", "long_reversed"])
def test_one_pass_over_rows_in_producer_order_decides_what_the_iterated_fixpoint_decides(case, monkeypatch):
    """Rows whose producers all come first settle in one pass; the answer equals the up-to-8-pass iteration."""
    from xgraph.ir.onnx import inference_budget
    from xgraph.ir.onnx.nodes import Nodes
    models = {"nested": _nested_bomb, "small": lambda: data_prop_bomb(16, "product"),
              "doubling": lambda: _doubling_chain(12, False), "doubling_reversed": lambda: _doubling_chain(5, True),
              "long_reversed": lambda: _doubling_chain(12, True)}
    if case == "shapes":
        nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Constant", [], ["k"], value_ints=[6]),
                 helper.make_node("Mul", ["s", "k"], ["n"]), helper.make_node("Reshape", ["x", "n"], ["y"])]
        graph = helper.make_graph(nodes, "shapes", [vi("x", TensorProto.FLOAT, [2, 3])], [vi("y", TensorProto.FLOAT, None)])
        model = helper.make_model(graph, opset_imports=[OPSET])
    else:
        model = models.get(case, lambda: data_prop_bomb(1 << 26, case))()
    columns = Nodes(model.graph.node, "m")
    decided = {limit: inference_budget.data_propagation_is_bounded(model, 3, limit, top=columns)
               for limit in (1 << 20, 1 << 10, 8)}
    monkeypatch.setattr(inference_budget, "_producers_first", lambda rows: False)
    monkeypatch.setattr(inference_budget, "decide_in_order", lambda *args: None)  # the one pass over wants
    assert decided == {limit: inference_budget.data_propagation_is_bounded(model, 3, limit, top=columns)
                       for limit in decided}
    if case.startswith("doubling"):  # 2**12 = 4096 elements; the reversed 5-step chain settles within 8 passes
        assert decided == {1 << 20: True, 1 << 10: case == "doubling_reversed", 8: False}
    if case == "long_reversed":  # 12 steps in reverse file order need more than 8 passes: refused
        assert decided == {1 << 20: False, 1 << 10: False, 8: False}


@pytest.mark.parametrize("case", ["constant", "value_ints", "product", "small", "nested", "shapes", "doubling",
                                  "doubling_reversed", "long_reversed", "transformer", "chain"])
def test_the_importers_columns_decide_what_the_protos_decide(case):
    """The main graph's columns (only the length cone read) and the proto walk give the same answer."""
    import sys
    from pathlib import Path

    from xgraph.ir.onnx import inference_budget
    from xgraph.ir.onnx.nodes import Nodes
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import compile_scale
    models = {"nested": _nested_bomb, "small": lambda: data_prop_bomb(16, "product"),
              "doubling": lambda: _doubling_chain(12, False), "doubling_reversed": lambda: _doubling_chain(5, True),
              "long_reversed": lambda: _doubling_chain(12, True),
              "transformer": lambda: compile_scale.transformer(400, True),
              "chain": lambda: compile_scale.chain(400, False)}
    model = models.get(case, lambda: data_prop_bomb(1 << 26, case))()
    columns = Nodes(model.graph.node, "m")
    for limit in (1 << 20, 1 << 10, 64, 8, 2):
        assert inference_budget.data_propagation_is_bounded(model, 3, limit, top=columns) \
            == inference_budget.data_propagation_is_bounded(model, 3, limit), limit
