"""ONNX node conformance: how many cases onnxruntime passes beside xgraph, in the same run.

Every case of onnx.backend.test.case.node, compared the same way for each engine
(`xgraph.backend.compare_outputs`: the case's rtol/atol, NaN equal, dtypes checked,
sequences element by element):

  onnxruntime       onnxruntime.backend (the whole model in one session, CPU provider)
  xgraph numpy      xgraph.backend with kernels="numpy" (what tests/backend/test_conformance.py runs)
  xgraph auto       xgraph.backend with kernels="auto" (standard-ONNX subgraphs in onnxruntime)

Prints the pass count per engine, the failure categories of each (first words of the error),
and the cases onnxruntime fails that xgraph passes and vice versa. onnxruntime is measured
through its Python API, which cannot exchange bfloat16, float8 or int4 arrays: most of its
failures are that, not its kernels. Random-op cases (Bernoulli) count by value here, so a
lucky draw can add one to a count; tests/backend/test_conformance.py never counts them.

    python benchmarks/conformance_ort.py [--engines onnxruntime,numpy,auto] [--show 20]
"""
from __future__ import annotations

import argparse
import collections
import os
import re
import time
import warnings
from typing import Any, Callable

import onnx

import xgraph.backend as backend


def cases() -> list:
    """Every node conformance case (this script runs in its own process: no op filter is set)."""
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return sorted((c for c in collect_testcases() if c.model is not None), key=lambda c: c.name)


def ort_prepare(model: onnx.ModelProto) -> Any:
    """onnxruntime's own ONNX backend, errors only (no warnings on stderr)."""
    import onnxruntime
    import onnxruntime.backend as ort_backend
    onnxruntime.set_default_logger_severity(3)
    return ort_backend.prepare(model, "CPU")


def run_engine(prepare: Callable[[onnx.ModelProto], Any], suite: list) -> dict[str, str]:
    """{case name: "" when it passes, else the problem} for one engine."""
    results: dict[str, str] = {}
    for case in suite:
        try:
            rep = prepare(case.model)
            problem = ""
            for inputs, outputs in case.data_sets:
                got = rep.run([backend._to_value(v) for v in inputs])
                problem = backend.compare_outputs(outputs, list(got), case.rtol, case.atol)
                if problem:
                    break
            close = getattr(rep, "close", None)
            if close is not None:
                close()
        except Exception as e:  # every engine raises its own types; all count as a failure
            problem = f"{type(e).__name__}: {e}"
        results[case.name] = problem
    return results


def category(problem: str) -> str:
    """A short label for a failure: the error type and its first words, numbers removed."""
    first = problem.splitlines()[0] if problem else ""
    first = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", first)
    first = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", first)
    return first[:90]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="onnxruntime,numpy,auto",
                        help="comma-separated: onnxruntime, numpy (xgraph kernels=numpy), auto (xgraph kernels=auto)")
    parser.add_argument("--show", type=int, default=15, help="how many case names to print per difference list")
    args = parser.parse_args()
    engines: dict[str, Callable] = {
        "onnxruntime": ort_prepare,
        "numpy": lambda m: backend.prepare(m, kernels="numpy"),
        "auto": lambda m: backend.prepare(m, kernels="auto"),
    }
    chosen = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = [e for e in chosen if e not in engines]
    if unknown:
        parser.error(f"unknown engine {unknown[0]!r}; choose from {', '.join(engines)}")
    start = time.perf_counter()
    suite = cases()
    print(f"{len(suite)} node cases (onnx {onnx.__version__}), collected in {time.perf_counter() - start:.1f} s, "
          f"{os.cpu_count()} cores")
    results: dict[str, dict[str, str]] = {}
    for name in chosen:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            results[name] = run_engine(engines[name], suite)
        passed = sum(1 for p in results[name].values() if not p)
        print(f"{name:12s} {passed:5d} passed of {len(suite)}  ({time.perf_counter() - start:.1f} s)")
    for name, res in results.items():
        failures = collections.Counter(category(p) for p in res.values() if p)
        print(f"\n{name}: {sum(failures.values())} failures by category")
        for label, n in failures.most_common(12):
            print(f"  {n:4d}  {label}")
    if "onnxruntime" in results:
        ort = results["onnxruntime"]
        for name, res in results.items():
            if name == "onnxruntime":
                continue
            only_xgraph = sorted(c for c in res if not res[c] and ort[c])
            only_ort = sorted(c for c in res if res[c] and not ort[c])
            print(f"\nxgraph {name} passes {len(only_xgraph)} cases onnxruntime fails, e.g. "
                  f"{', '.join(only_xgraph[:args.show])}")
            print(f"onnxruntime passes {len(only_ort)} cases xgraph {name} fails: {', '.join(only_ort[:args.show])}")


if __name__ == "__main__":
    main()
