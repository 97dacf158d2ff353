"""The data file of onnxruntime's deviations from the ONNX spec, re-checked against the installed onnxruntime.

Every listed case must still fail in a plain onnxruntime session (ONNX's own comparison,
`onnx.backend.test.runner.Runner.assert_similar_outputs`), or its entry is stale; and every
entry must select the op of each case it lists, so `kernels="auto"` keeps those on xgraph's
kernels. That "auto" then passes every case "numpy" passes is checked by test_conformance.py.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import xgraph.backend as backend
from xgraph import Graph
from xgraph.runners.ort_deviations import deviation, deviations
from testing.runtime import load_script

ort = pytest.importorskip("onnxruntime")

_conformance = load_script(Path(__file__).with_name("test_conformance.py"), "xgraph_conformance_cases")
CASES = _conformance.CASES
LISTED = sorted((case, entry) for entry in deviations() for case in entry.cases)


def onnxruntime_problem(case) -> str:
    """'' when a plain onnxruntime session reproduces every data set of `case`, else what went wrong."""
    from onnx.backend.test.runner import Runner
    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(case.model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        names = [i.name for i in session.get_inputs()]
        for inputs, outputs in case.data_sets:
            feeds = {n: np.asarray(v) if isinstance(v, np.generic) else v
                     for n, v in zip(names, (backend._to_value(x) for x in inputs))}
            got = session.run(None, feeds)
            Runner.assert_similar_outputs(outputs, got, rtol=case.rtol, atol=case.atol)
    except Exception as e:  # onnxruntime's errors and the comparison's AssertionError alike
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return ""


def test_every_entry_names_real_cases_and_a_reason():
    assert deviations()
    for entry in deviations():
        assert entry.reason and entry.cases, entry
        unknown = [c for c in entry.cases if c not in CASES]
        assert not unknown, f"{entry.op}: cases onnx does not have: {unknown}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("name, entry", LISTED, ids=[name for name, _ in LISTED])
def test_a_listed_case_still_deviates_and_its_entry_selects_it(name, entry):
    case = CASES[name]
    graph = Graph.from_onnx(case.model)
    matched = [op for op in graph.get_ops() if deviation(op) is entry]
    assert matched, f"{name}: the {entry.op} entry selects no op of the case's model"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        problem = onnxruntime_problem(case)
    assert problem, (f"onnxruntime {ort.__version__} passes {name} now: remove it from "
                     f"xgraph/runners/ort_deviations.toml (and the entry, once it lists no case)")


def test_ops_onnxruntime_gets_right_are_left_to_it():
    """An entry is as narrow as the suite shows: the sibling cases onnxruntime passes do not match."""
    for name in ("test_convinteger_without_padding", "test_maxunpool_export_without_output_shape",
                 "test_dropout_default", "test_resize_upsample_scales_nearest", "test_attention_4d_causal",
                 "test_resize_downsample_scales_linear"):
        graph = Graph.from_onnx(CASES[name].model)
        assert all(deviation(op) is None for op in graph.get_ops()), name
        assert not onnxruntime_problem(CASES[name]), name
