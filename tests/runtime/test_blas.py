"""BLAS threading under the numpy kernels: single-threaded by default, configurable, errors named."""
from __future__ import annotations

import subprocess
import sys

import pytest

from xgraph.errors import XGraphError
from xgraph.kernels import blas

PROBE = """
import numpy as np, threadpoolctl, xgraph
from onnx import TensorProto, helper
m = helper.make_model(helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "g",
    [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 4]) for n in "ab"],
    [helper.make_tensor_value_info("c", TensorProto.FLOAT, [4, 4])]), opset_imports=[helper.make_opsetid("", 17)])
with xgraph.create_graph_runner(xgraph.compile(m), kernels="numpy") as r:
    r.run({"a": np.eye(4, dtype=np.float32), "b": np.eye(4, dtype=np.float32)})
print(max(i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"))
"""


def _blas_threads_after_a_run(env_value: str | None) -> int:
    import os
    env = {k: v for k, v in os.environ.items() if k not in ("XGRAPH_BLAS_THREADS", "OPENBLAS_NUM_THREADS",
                                                             "OMP_NUM_THREADS")}
    if env_value is not None:
        env["XGRAPH_BLAS_THREADS"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_numpy_runners_use_one_blas_thread_by_default_and_the_env_var_otherwise():
    import os
    cores = os.cpu_count() or 1
    assert _blas_threads_after_a_run(None) == 1
    if cores > 1:
        assert _blas_threads_after_a_run("0") == cores  # left alone: BLAS's own default
        assert _blas_threads_after_a_run("2") == 2


def test_bad_values_are_named(monkeypatch):
    monkeypatch.setattr(blas, "_configured", False)
    monkeypatch.setenv("XGRAPH_BLAS_THREADS", "lots")
    with pytest.raises(XGraphError, match="XGRAPH_BLAS_THREADS='lots'"):
        blas.configure_blas_once()
    with pytest.raises(XGraphError, match="int >= 0"):
        blas.set_blas_threads(-1)


def test_a_bad_intra_op_thread_count_is_named_when_the_runner_is_made(monkeypatch, make):
    import xgraph
    from xgraph.kernels import parallel

    graph = make.place(xgraph.Graph.from_onnx(make.chain_model(2)), lambda op: "AICORE")
    for value, message in (("many", "is not a whole number"), ("0", "must be at least 1")):
        monkeypatch.setattr(parallel, "_threads", None)
        monkeypatch.setenv("XGRAPH_INTRA_OP_THREADS", value)
        with pytest.raises(XGraphError, match=f"XGRAPH_INTRA_OP_THREADS='{value}' {message}"):
            xgraph.create_graph_runner(graph, kernels="numpy")
    monkeypatch.setattr(parallel, "_threads", None)
    monkeypatch.setenv("XGRAPH_INTRA_OP_THREADS", "3")
    assert parallel.intra_op_threads() == 3
    with pytest.raises(XGraphError, match="int >= 1"):
        parallel.set_intra_op_threads(0)
    monkeypatch.setattr(parallel, "_threads", None)
