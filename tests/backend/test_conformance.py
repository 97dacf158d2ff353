"""ONNX's node conformance suite (every case of onnx.backend.test.case.node) run through xgraph.backend.

Each case's model is compiled with the default options (placement spreads its ops over AICORE,
AICPU and CPU) and run in mode "run" on xgraph's own kernels (kernels="numpy": the registry,
with the ONNX reference evaluator as fallback), so the count measures xgraph, not onnxruntime.
Outputs are compared as onnx's BackendTest compares them (`xgraph.backend.compare_outputs`), and
each op's saved "kernel" annotation must equal what the runner's plan runs (one kernel resolution).

Every case also runs with kernels="auto" (standard-ONNX subgraphs in onnxruntime, except where
xgraph/runners/ort_deviations.toml says onnxruntime deviates), which must pass every case the
numpy path passes; the summary counts both paths.

Cases that cannot pass are listed in expected_failures.txt, one per line with the reason. A
listed case that passes fails the test (stale entry), as does an unlisted case that fails.
The session ends with "conformance: N passed, M expected failures of T" (printed by the
root tests/conftest.py, the only conftest the pytest-xdist controller loads).
benchmarks/conformance_ort.py counts onnxruntime's passes on the same cases for comparison.
"""
from __future__ import annotations

import functools
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import xgraph
import xgraph.backend as backend
from xgraph.errors import XGraphError
from testing.runtime import kernel_annotation_mismatches

EXPECTED_FAILURES_FILE = Path(__file__).with_name("expected_failures.txt")
#: xgraph's own kernels; "auto" would hand standard-ONNX subgraphs to onnxruntime.
KERNELS = "numpy"


RANDOM_TAG = "[random]"


def read_expected_failures(path: Path = EXPECTED_FAILURES_FILE) -> tuple[dict[str, str], frozenset[str]]:
    """({case name: reason}, names tagged [random]) from lines "test_name [random]: reason" ('#': comment)."""
    failures: dict[str, str] = {}
    random: set[str] = set()
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        head, sep, reason = line.partition(":")
        name, _, tag = head.strip().partition(" ")
        if not sep or not reason.strip() or tag.strip() not in ("", RANDOM_TAG):
            raise ValueError(f"{path}:{number}: expected 'test_name: reason' or 'test_name {RANDOM_TAG}: reason', "
                             f"got {line!r}")
        failures[name] = reason.strip()
        if tag.strip():
            random.add(name)
    return failures, frozenset(random)


def _case_modules(package) -> list[str]:
    return sorted(name for name in sys.modules if name.startswith(package.__name__ + "."))


def _export_again(module_names: list[str], node_cases) -> list:
    """The cases of already imported case modules, generated afresh into a private list.

    A module's cases are made once, when it is first imported, and only for the op that
    `collect_testcases(op_type)` last asked for; re-running each case class's export methods
    (as its metaclass did, after seeding numpy the same way) recovers all of them.
    """
    from onnx.backend.test.case.base import Base
    saved = node_cases._NodeTestCases, node_cases._existing_names
    node_cases._NodeTestCases, node_cases._existing_names = [], {}
    try:
        for name in module_names:
            module = sys.modules[name]
            for cls in list(vars(module).values()):
                if isinstance(cls, type) and issubclass(cls, Base) and cls.__module__ == name:
                    for attr, value in list(vars(cls).items()):
                        if attr.startswith("export") and isinstance(value, staticmethod):
                            np.random.seed(seed=0)
                            getattr(cls, attr)()
        return node_cases._NodeTestCases
    finally:
        node_cases._NodeTestCases, node_cases._existing_names = saved


@functools.lru_cache(maxsize=1)
def node_cases() -> tuple:
    """Every node conformance case, whichever op filter an earlier `collect_testcases(op)` left set."""
    import onnx.backend.test.case.node as node_package
    from onnx.backend.test.case.utils import import_recursive

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # some case generators overflow or divide by zero on purpose
        if not hasattr(node_package, "_NodeTestCases"):  # the private state moved: trust the public API
            return tuple(node_package.collect_testcases())
        before = _case_modules(node_package)
        saved_filter, node_package._TargetOpType = node_package._TargetOpType, None
        try:
            start = len(node_package._NodeTestCases)
            import_recursive(node_package)
            fresh = list(node_package._NodeTestCases[start:])
            earlier = _export_again(before, node_package) if before else []
        finally:
            node_package._TargetOpType = saved_filter
    cases = {c.name: c for c in earlier + fresh if c.model is not None}
    return tuple(sorted(cases.values(), key=lambda c: c.name))


CASES = {c.name: c for c in node_cases()}
EXPECTED, RANDOM = read_expected_failures()


def run_case(case, values: bool = True, kernels: str = KERNELS, compiled=None) -> str:
    """'' when xgraph reproduces every data set of `case`, else the first problem.

    values=False checks only what a random op fixes: output count, dtypes and shapes. Every
    op's saved "kernel" annotation must also be what the runners' plans run (kernels="numpy").
    `compiled` reuses a compile of the case's model (the paths differ only in their runners).
    """
    if compiled is None:
        compiled = xgraph.compile(case.model)
    runner = xgraph.create_graph_runner(compiled, kernels=kernels)
    with backend.XGraphBackendRep(case.model, compiled, runner) as rep:
        if kernels == "numpy":
            mismatches = kernel_annotation_mismatches(rep.graph, rep.runner)
            if mismatches:
                return "kernel annotation differs from what runs: " + "; ".join(mismatches)
        for index, (inputs, outputs) in enumerate(case.data_sets):
            problem = backend.compare_outputs(outputs, rep.run(inputs), case.rtol, case.atol, values=values)
            if problem:
                return f"data set {index}: {problem}"
    return ""


def _outcome(case, values: bool, kernels: str, compiled) -> str:
    try:
        return run_case(case, values, kernels, compiled)
    except Exception as e:  # an unexpected failure is reported as the case's problem
        return f"{type(e).__name__}: {e}"


def test_expected_failures_name_real_cases():
    unknown = sorted(set(EXPECTED) - set(CASES))
    assert not unknown, f"{EXPECTED_FAILURES_FILE.name} lists cases onnx does not have: {unknown}"
    assert RANDOM <= set(EXPECTED)


def test_the_suite_is_all_there():
    """Guards against a collection that silently lost cases (the parametrisation would still pass)."""
    assert len(CASES) >= 1800
    ops = {c.model.graph.node[0].op_type for c in CASES.values() if len(c.model.graph.node) == 1}
    assert {"Conv", "Loop", "Resize", "SequenceMap", "Attention", "Cast"} <= ops


@pytest.mark.conformance
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # cases feed inf, NaN and fully masked rows on purpose
@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name: str, record_property) -> None:
    """The case on xgraph's kernels ("numpy"), then on "auto", which must pass wherever "numpy" does.

    The "auto" outcome is recorded as the test's `kernels_auto` property (counted in the summary).
    """
    case = CASES[name]
    values = name not in RANDOM  # a random op's values may match by chance: only the structure counts
    try:
        compiled = xgraph.compile(case.model)
    except Exception as e:  # any failure of a listed case is what the entry expects
        if name not in EXPECTED:
            raise
        compiled, problem = None, f"{type(e).__name__}: {e}"
    else:
        try:
            problem = run_case(case, values, KERNELS, compiled)
        except Exception as e:
            if name not in EXPECTED:
                raise
            problem = f"{type(e).__name__}: {e}"
    auto = _outcome(case, values, "auto", compiled) if compiled is not None else problem
    record_property("kernels_auto", "passed" if not auto else ("expected" if name in EXPECTED else "failed"))
    if name in RANDOM:
        assert not problem, f"{name}: {problem}"
        assert not auto, f"{name} (kernels auto): {auto}"
        pytest.xfail(EXPECTED[name])
    if name in EXPECTED:
        if not problem:
            pytest.fail(f"{name} passes now: remove its stale entry from {EXPECTED_FAILURES_FILE.name}")
        pytest.xfail(f"{EXPECTED[name]} ({problem.splitlines()[0][:200]})")
    assert not problem, f"{name}: {problem}"
    assert not auto, f"{name} passes on xgraph's kernels but not with kernels='auto': {auto}"


def test_backend_errors_are_xgraph_errors():
    """A wrong feed surfaces as an XGraphError naming the input, not as a bare numpy error."""
    case = CASES["test_abs"]
    (x,) = case.data_sets[0][0]
    with backend.prepare(case.model, kernels=KERNELS) as rep:
        with pytest.raises(XGraphError, match="input 'x'"):
            rep.run([np.zeros((2, 2), np.int32)])
        assert rep.run([x])[0].shape == x.shape
