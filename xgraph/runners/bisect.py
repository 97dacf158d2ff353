"""`xgraph.bisect`: which device subgraph (and which op in it) makes a compiled model differ from the reference.

Every device subgraph is run alone, fed the reference's own values of its inputs, and its outputs are
compared with the reference's values of them, so an error does not carry over to the subgraphs after
it (ExecuTorch's ``calculate_numeric_gap`` does the same per op). The reference runs the compiled
graph's ONNX (prepare's folding and fusions included, so every subgraph boundary has a value): the
ONNX reference evaluator with xgraph's fixes, else onnxruntime (the report says which, and why).

Several seeded random inputs are tried (3 by default): a layout bug whose error happens to be small
on one input is still found on the others. An element passes when

    |got - ref| <= rtol(dtype) * (|ref| + mean|ref|)

so the tolerance scales with the element's own magnitude and, for elements near zero, with the
output's typical magnitude; ``rtol`` is 1e-9 for float64, 1e-4 for float32, 1e-2 for float16 and
5e-2 for bfloat16 (a subgraph whose plugin computes in a lower precision, attr
"inference_precision", gets that precision's rtol, and the report flags it). Integers, bools and
strings must match exactly. The ulp error is |got - ref| in units of the spacing of the output's float
type (float32 for narrower ones) at max(|ref|, mean|ref|).

For the first subgraph out of tolerance, a runner that exposes its steps (xgraph's own kernel
runners on the numpy backend) is run once more and each step's outputs are compared with the
reference's: the first op that differs is named.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import RunnerError, XGraphError
from xgraph.runners.graph_runner import device_subgraphs
from xgraph.runners.random_inputs import complete_inputs
from xgraph.runners.reference_run import EVALUATOR, ONNXRUNTIME, run_reference
from xgraph.runners.runner import Runner

if TYPE_CHECKING:
    from xgraph.ir import Graph, Subgraph

#: Relative tolerance by dtype name (see the module docstring).
RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}
#: The "inference_precision" attr values of plugins (OpenVINO's names) -> the dtype whose rtol applies.
PRECISION_DTYPES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16", "fp16": "float16"}


@dataclass
class TensorComparison:
    """One output of one subgraph on one seed, against the reference."""

    name: str
    dtype: str
    max_abs: float
    max_rel: float
    max_ulp: float  # float outputs; for exact types, the number of elements that differ
    exact: bool
    ok: bool
    note: str = ""


@dataclass
class SubgraphComparison:
    """One device subgraph over every seed: its worst output and where it first differed."""

    name: str
    device: str
    runner: str
    precision: str = ""
    outputs: list[TensorComparison] = field(default_factory=list)
    failed_seeds: list[int] = field(default_factory=list)
    first_op: str = ""  # the first op whose output differs (runners that expose their steps)

    @property
    def ok(self) -> bool:
        """True when every output was within tolerance on every seed."""
        return not self.failed_seeds

    def worst(self) -> TensorComparison | None:
        """The output comparison with the largest relative error (a failing one first)."""
        return max(self.outputs, key=lambda c: (not c.ok, c.max_rel, c.max_abs), default=None)


@dataclass
class BisectReport:
    """What `bisect` found: one row per device subgraph, in run order, and the first one out of tolerance."""

    reference: str
    reference_note: str
    seeds: list[int]
    subgraphs: list[SubgraphComparison]

    @property
    def first_failure(self) -> SubgraphComparison | None:
        """The first subgraph (in run order) out of tolerance, or None."""
        return next((s for s in self.subgraphs if not s.ok), None)

    @property
    def ok(self) -> bool:
        """True when every subgraph is within tolerance on every seed."""
        return self.first_failure is None

    def table(self) -> str:
        """The report as text: a row per subgraph, then the verdict."""
        rows = [("subgraph", "device", "runner", "dtype", "max|abs|", "max|rel|", "ulp/diff", "result")]
        for s in self.subgraphs:
            w = s.worst()
            kind = (w.dtype + (f" ({s.precision})" if s.precision and s.precision != "f32" else "")) if w else "-"
            metric = "-" if w is None else (f"{int(w.max_ulp)} diff" if w.exact else f"{w.max_ulp:.3g}")
            result = "ok" if s.ok else "FAIL on seed " + ",".join(map(str, s.failed_seeds))
            rows.append((s.name, s.device, s.runner, kind, "-" if w is None else f"{w.max_abs:.3g}",
                         "-" if w is None else f"{w.max_rel:.3g}", metric, result))
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines = ["  " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows]
        lines.insert(0, f"bisect: {len(self.subgraphs)} device subgraphs vs reference {self.reference} on the "
                        f"compiled graph, seeds {', '.join(map(str, self.seeds))}" +
                     (f" ({self.reference_note})" if self.reference_note else ""))
        for s in self.subgraphs:
            if s.precision and s.precision != "f32":
                w = s.worst()
                lines.append(f"note: subgraph {s.name!r} computes in {s.precision} (its plugin's precision option): "
                             f"measured max|rel| {w.max_rel if w else 0:.3g}, tolerance rtol "
                             f"{RTOL[PRECISION_DTYPES.get(s.precision, 'float32')]:g}")
        bad = self.first_failure
        if bad is None:
            lines.append("bisect: PASS: every device subgraph matches the reference on its own inputs")
        else:
            w = bad.worst()
            where = f", first differing op {bad.first_op}" if bad.first_op else ""
            lines.append(f"bisect: FAIL: first subgraph out of tolerance: {bad.name!r} ({bad.device}, runner "
                         f"{bad.runner}){where}; output {w.name!r} max|abs| {w.max_abs:.3g}, max|rel| {w.max_rel:.3g}")
        return "\n".join(lines)


def _rtol(dtype: np.dtype, precision: str) -> float:
    base = RTOL.get(str(dtype), RTOL["float32"])
    lowered = RTOL.get(PRECISION_DTYPES.get(precision, ""), 0.0)
    return max(base, lowered)


def compare(name: str, got: Any, ref: Any, precision: str = "") -> TensorComparison:
    """One tensor against the reference (see the module docstring for the rule)."""
    if got is None or ref is None or isinstance(got, list) or isinstance(ref, list):
        same = (got is None and ref is None) or (isinstance(got, list) and isinstance(ref, list) and len(got) == len(ref)
                                                 and all(np.array_equal(a, b) for a, b in zip(got, ref)))
        return TensorComparison(name, "sequence/optional", 0.0, 0.0, 0.0 if same else 1.0, True, same)
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape or got.dtype != ref.dtype:
        return TensorComparison(name, str(ref.dtype), float("inf"), float("inf"), float("inf"),
                                ref.dtype.kind not in "fc", False,
                                f"shape/dtype {got.shape} {got.dtype}, reference {ref.shape} {ref.dtype}")
    if ref.dtype.kind not in "fc":
        differ = int(np.count_nonzero(got != ref)) if ref.dtype.kind != "O" else \
            sum(str(a) != str(b) for a, b in zip(got.ravel().tolist(), ref.ravel().tolist()))
        return TensorComparison(name, str(ref.dtype), float(differ > 0), float(differ > 0), float(differ), True,
                                differ == 0)
    if ref.size == 0:
        return TensorComparison(name, str(ref.dtype), 0.0, 0.0, 0.0, False, True)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(g - r)
        same = (np.isnan(g) & np.isnan(r)) | (np.isinf(g) & (g == r))
        diff = np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))
        magnitude = np.abs(r[np.isfinite(r)])
        scale = float(magnitude.mean()) if magnitude.size else 0.0
        limit = _rtol(ref.dtype, precision) * (np.abs(r) + scale)
        rel = diff / np.maximum(np.abs(r), scale if scale > 0 else 1.0)
        floor = np.maximum(np.abs(r), scale)  # as for the relative error: near zero, the output's typical size
        spacing = np.spacing(floor.astype(ref.dtype if ref.dtype.itemsize >= 4 else np.float32)).astype(np.float64)
        ulp = diff / np.where(spacing > 0, spacing, np.finfo(np.float32).tiny)
    ok = bool(np.all(diff <= np.where(np.isfinite(limit), limit, np.inf)))
    return TensorComparison(name, str(ref.dtype), float(diff.max()), float(np.nanmax(rel)), float(np.nanmax(ulp)),
                            False, ok)


def _precision(sg: "Subgraph") -> str:
    value = sg.get_attr("inference_precision") if sg.has_attr("inference_precision") else ""
    return value if isinstance(value, str) else ""


def _first_differing_op(runner: Runner, inputs: list, values: dict[str, Any], precision: str) -> str:
    """The first step of a runner that exposes them whose outputs differ from the reference, as it names it."""
    trace = getattr(runner, "trace_steps", None)
    if not callable(trace):
        return ""
    try:
        steps = trace(inputs)
    except XGraphError:
        return ""
    if steps is None:
        return ""
    for label, outputs in steps:
        for name, got in outputs.items():
            if name in values and not compare(name, got, values[name], precision).ok:
                return label
    return ""


def _reference_values(graph: "Graph", feeds: dict[str, Any], names: list[str]) -> tuple[str, str, dict[str, Any]]:
    model = graph.to_onnx()
    result = run_reference(model, feeds, names, f"graph {graph.name!r}", order=(EVALUATOR, ONNXRUNTIME))
    note = ""
    if result.reference == ONNXRUNTIME:
        note = f"the {EVALUATOR} cannot run this graph: {result.problems[0].split(': ', 1)[-1]}"
    return result.reference, note, dict(zip(names, result.values))


def bisect(compiled: "Graph", inputs: "dict[str, np.ndarray] | None" = None, seeds: "int | Sequence[int]" = 3, *,
           seed: int = 0, mode: str = "run", kernels: str = "auto", plugin_path: "list[str] | None" = None,
           registries: Any = None) -> BisectReport:
    """Run every device subgraph of `compiled` on the reference's own values of its inputs and compare.

    `inputs` fixes some graph inputs (the others are random); `seeds`: how many seeded random inputs
    (from `seed` on), or the seeds themselves. Returns a `BisectReport`; `report.table()` is what
    ``xgraph verify --bisect`` prints. O(subgraphs) runner creations, one reference run per seed.
    """
    subgraphs = device_subgraphs(compiled)
    if not subgraphs:
        raise RunnerError(f"graph {compiled.name!r} has no device subgraphs; compile it first (xgraph.compile)")
    seed_list = list(range(seed, seed + seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise RunnerError("bisect needs at least one seed")
    names = list(dict.fromkeys(t.name for op in compiled.toposort() for t in op.get_output_tensors()))
    rows = [SubgraphComparison(sg.name, str(sg.get_attr("device")) if sg.has_attr("device") else "?",
                               str((sg.get_attr("runner") or {}).get(mode, "?")) if sg.has_attr("runner") else "?",
                               _precision(sg)) for sg in subgraphs]
    runners: list[Runner] = []
    try:
        runners = [Runner.create_runner(sg, mode, kernels, registries=registries, plugin_path=plugin_path)
                   for sg in subgraphs]
        reference, note = "", ""
        for s in seed_list:
            feeds = complete_inputs(dict(inputs or {}), compiled.get_input_tensors(), s)[0]
            reference, note, values = _reference_values(compiled, feeds, names)
            values.update(feeds)
            for sg, runner, row in zip(subgraphs, runners, rows):
                _compare_subgraph(sg, runner, row, values, s)
        return BisectReport(reference, note, seed_list, rows)
    finally:
        for r in runners:
            r.close()


def _compare_subgraph(sg: "Subgraph", runner: Runner, row: SubgraphComparison, values: dict[str, Any],
                      seed: int) -> None:
    args = [values[t.name] for t in sg.get_input_tensors()]
    got = runner.run(args)
    results = [compare(t.name, g, values.get(t.name), row.precision) for t, g in zip(sg.get_output_tensors(), got)]
    worst = max(results, key=lambda c: (not c.ok, c.max_rel, c.max_abs), default=None)
    if worst is not None:
        previous = row.worst()
        if previous is None or (not worst.ok, worst.max_rel, worst.max_abs) > (not previous.ok, previous.max_rel,
                                                                                previous.max_abs):
            row.outputs = results
    if any(not r.ok for r in results):
        row.failed_seeds.append(seed)
        if not row.first_op:
            row.first_op = _first_differing_op(runner, args, values, row.precision)


__all__ = ["BisectReport", "RTOL", "SubgraphComparison", "TensorComparison", "bisect", "compare"]
