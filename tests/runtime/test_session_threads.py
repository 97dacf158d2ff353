"""Threads of an onnxruntime session per subgraph: one for little work per run, a pool for more,
estimated from the declared shapes with dynamic dims assumed typical and unknown ranks large."""
from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.runners.session_threads import (ASSUMED_DYNAMIC_DIM, POOL_THREADS, estimated_flops, session_threads,
                                            threads_for_flops)


def _matmul_graph(m, k: int, n: int):
    """x [m, k] @ w [k, n] -> Relu, compiled to one subgraph."""
    w = numpy_helper.from_array(np.zeros((k, n), np.float32), "w")
    model = helper.make_model(helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), helper.make_node("Relu", ["y"], ["z"], name="relu")],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [m, k])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [m, n])], initializer=[w]),
        opset_imports=[helper.make_opsetid("", 17)])
    graph = xgraph.compile(model)
    (subgraph,) = graph.get_root_subgraph().toposort_child_subgraph()
    return subgraph


@pytest.mark.parametrize("m, k, n, threads", [
    (1, 32, 128, 1),  # one token through a projection: 8 kFLOP
    (256, 512, 512, POOL_THREADS),  # 134 MFLOP
])
def test_work_from_the_declared_shapes_decides_the_threads(m, k, n, threads):
    subgraph = _matmul_graph(m, k, n)
    assert estimated_flops(subgraph) == 2 * m * k * n + m * n  # multiply-adds twice, Relu once per element
    assert session_threads(subgraph) == threads


def test_a_dynamic_dim_is_assumed_typical_so_a_dynamic_model_with_real_work_keeps_its_pool():
    subgraph = _matmul_graph("batch", 512, 512)
    assert estimated_flops(subgraph) == ASSUMED_DYNAMIC_DIM * 512 * (2 * 512 + 1)
    assert session_threads(subgraph) == POOL_THREADS


def test_an_unknown_rank_counts_as_large_work():
    assert threads_for_flops(math.inf) == POOL_THREADS and threads_for_flops(0) == 1


def test_the_generate_samples_sessions_run_on_the_calling_thread():
    import importlib.util
    from pathlib import Path
    sample = Path(__file__).resolve().parents[2] / "samples" / "generate"
    spec = importlib.util.spec_from_file_location("generate_threads", sample / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    graph = xgraph.compile(sample / "decoder.onnx", gen.cache_shape_option())
    with xgraph.create_graph_runner(graph, kernels="auto") as runner:
        backends = {name: r.backend for name, r in runner.runners.items()}
        assert set(backends.values()) == {"onnxruntime"} and len(backends) == 6
    assert all(session_threads(sg) == 1 for sg in graph.get_root_subgraph().toposort_child_subgraph())
