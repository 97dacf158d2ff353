"""Run one kernel on one ONNX node: the glue kernel tests and the conformance harness share."""
from __future__ import annotations

import contextlib
import functools
import importlib
import warnings
from typing import Iterator, Sequence

import numpy as np
import onnx

from xgraph.ir.attribute_values import node_attributes
from xgraph.kernels import load_builtin_kernels


def opset_of(model: onnx.ModelProto, domain: str = "") -> int:
    """The opset version `model` imports for `domain`."""
    for o in model.opset_import:
        if o.domain in (domain, "ai.onnx" if domain == "" else domain):
            return o.version
    return onnx.defs.onnx_opset_version()


def run_node(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], opset: int,
             device: str | None = None) -> list[np.ndarray]:
    """Call the registered kernel for `node` on `inputs`; returns as many outputs as the node names."""
    registry = load_builtin_kernels()
    dtype = next((a.dtype for a in inputs if isinstance(a, np.ndarray)), None)
    k = registry.lookup(node.op_type, node.domain, opset, device, dtype)
    result = k.invoke(inputs, node_attributes(node), len(node.output))
    return [r if r is None or isinstance(r, list) else np.asarray(r) for r in result]


def case_array(value) -> np.ndarray:
    """A conformance-case value (TensorProto or array-like) as a numpy array."""
    return onnx.numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


def assert_matches(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-7, atol: float = 0.0) -> None:
    """Same dtype and shape, values within tolerance (NaN equals NaN); integers, booleans and strings exactly."""
    assert actual.dtype == expected.dtype, f"dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    if expected.dtype == object:
        assert actual.tolist() == expected.tolist()
    elif expected.dtype.kind in "biu":
        np.testing.assert_array_equal(actual, expected)
    else:  # numpy and ml_dtypes floats (and ml_dtypes small ints) compare as float64
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True)


def check_node_case(case) -> None:
    """Run a one-node ONNX conformance case through the registered kernel; assert every data set matches."""
    node = case.model.graph.node[0]
    opset = opset_of(case.model, node.domain)
    graph_inputs = [i.name for i in case.model.graph.input]
    for inputs, outputs in case.data_sets:
        by_name = dict(zip(graph_inputs, (case_array(v) for v in inputs)))
        results = run_node(node, [by_name[name] if name else None for name in node.input], opset)
        assert len(results) == len(outputs)
        for actual, expected in zip(results, outputs):
            assert_matches(actual, case_array(expected), rtol=case.rtol, atol=case.atol)


@functools.lru_cache(maxsize=None)
def one_node_cases(case_modules: tuple[str, ...] | None = None) -> tuple:
    """ONNX's node conformance cases whose model is a single node (expanded function cases are skipped).

    `case_modules` names the `onnx.backend.test.case.node` modules to import: each generates its
    own cases when imported, which is much faster than `collect_testcases()` generating every
    op's (pooling alone takes seconds). None collects them all.
    """
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some case generators divide by zero or overflow on purpose
        cases = None
        if case_modules is not None:
            for name in case_modules:
                importlib.import_module(f"{node_cases.__name__}.{name}")
            cases = getattr(node_cases, "_NodeTestCases", None)
        if cases is None:  # everything asked for, or the private list moved: the public API
            cases = node_cases.collect_testcases()
    return tuple(c for c in cases if c.model is not None and len(c.model.graph.node) == 1)


def conformance_params(cases, xfail: dict[str, str]) -> list:
    """pytest parameters, one per case and named by it; a case in `xfail` must fail, for the reason given."""
    import pytest

    return [pytest.param(c, id=c.name, marks=[pytest.mark.xfail(reason=xfail[c.name], strict=True)]
                         if c.name in xfail else []) for c in cases]


def single_node_cases(cases, op_types) -> list:
    """The one-node standard-domain cases among `cases` whose op type is in `op_types`, sorted by name."""
    return sorted((c for c in cases if c.model is not None and len(c.model.graph.node) == 1
                   and c.model.graph.node[0].op_type in op_types
                   and c.model.graph.node[0].domain in ("", "ai.onnx")), key=lambda c: c.name)


@contextlib.contextmanager
def intra_op_blocks(threads: int) -> Iterator[None]:
    """Every parallel kernel cut into `threads` blocks, however small its work (restored afterwards)."""
    from xgraph.kernels import parallel

    old = parallel.intra_op_threads(), parallel.MIN_PARALLEL_MACS, parallel.MIN_PARALLEL_ELEMENTS
    parallel.set_intra_op_threads(threads)
    parallel.MIN_PARALLEL_MACS = parallel.MIN_PARALLEL_ELEMENTS = 0
    try:
        yield
    finally:
        parallel.MIN_PARALLEL_MACS, parallel.MIN_PARALLEL_ELEMENTS = old[1], old[2]
        parallel.set_intra_op_threads(old[0])
