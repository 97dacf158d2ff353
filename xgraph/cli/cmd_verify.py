"""`xgraph verify`: compile and run a model, and compare every output against an independent reference.

    xgraph verify MODEL.onnx [--options JSON] [--plugin-path DIR] [--mode run|sim]
                  [--kernels ...] [--input NAME=FILE ...] [--seed N] [--rtol R] [--atol A]

Inputs not given are seeded random values. By default xgraph's own kernels (`numpy`) run the
compiled partition and, where onnxruntime is installed, the default `auto` path does too. Each
path is compared with a reference independent of it: onnxruntime on the original, uncompiled
model, or the ONNX reference evaluator (with xgraph's inference fixes) when onnxruntime cannot
run the model or runs the path itself. A warning says when the reference output is degenerate
(every element equal, or unchanged by a second random input). Each output
passes when max|err| <= rtol * max|ref| + atol; the defaults are rtol 1e-4, atol 1e-6, and
rtol 1e-2, atol 1e-3 in "sim" mode when the precision_mode makes AI Core compute in float16.
Strings must match exactly; sequences are compared element by element. Exit code 0 when
every output passes, 1 when one differs, 2 for a user error.
"""
from __future__ import annotations

import argparse
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.cli.common import model_path, positive_int, seed, tolerance
from xgraph.cli.gears import add_gear_argument, gear_title, gears_to_use
from xgraph.cli.cmd_run import (add_compile_arguments, add_input_argument, add_kernels_argument, complete_inputs,
                                load_compiled, plugin_path_of, read_inputs)
from xgraph.errors import XGraphError
from xgraph.runners.reference_run import EVALUATOR, ONNXRUNTIME
from xgraph.runners.reference_run import run_reference as run_reference_model

if TYPE_CHECKING:
    import onnx

    from xgraph.ir import Graph

#: Tolerances: (rtol, atol) by numerics.
EXACT_TOLERANCE = (1e-4, 1e-6)
FP16_TOLERANCE = (1e-2, 1e-3)
FP16_PRECISION_MODES = frozenset({"force_fp16", "allow_fp32_to_fp16"})
EXIT_MISMATCH = 1


@dataclass
class OutputComparison:
    """The comparison of one output against the reference."""

    name: str
    dtype: str
    shape: str
    max_err: float
    max_ref: float
    limit: float
    ok: bool
    note: str = ""


def _describe(value: Any) -> tuple[str, str]:
    if value is None:
        return "optional", "None"
    if isinstance(value, list):
        return "sequence", f"[{len(value)}]"
    a = np.asarray(value)
    return str(a.dtype), "x".join(str(d) for d in a.shape) or "scalar"


def _errors(got: Any, ref: Any) -> tuple[float, float, str]:
    """(max |got - ref|, max |ref|, a note when they cannot be compared as numbers)."""
    if ref is None or got is None:
        return (0.0, 0.0, "") if ref is None and got is None else \
            (float("inf"), 0.0, f"{'reference' if ref is None else 'xgraph'} gave an empty optional")
    if isinstance(ref, list) or isinstance(got, list):
        if not (isinstance(ref, list) and isinstance(got, list)):
            return float("inf"), 0.0, "one side is a sequence, the other is not"
        if len(ref) != len(got):
            return float("inf"), 0.0, f"sequence of {len(got)} tensors, reference has {len(ref)}"
        worst_err, worst_ref, notes = 0.0, 0.0, ""
        for g, r in zip(got, ref):
            err, mag, note = _errors(g, r)
            worst_err, worst_ref, notes = max(worst_err, err), max(worst_ref, mag), notes or note
        return worst_err, worst_ref, notes
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        return float("inf"), 0.0, f"shape {got.shape}, reference {ref.shape}"
    if ref.dtype.kind in "OUS" or got.dtype.kind in "OUS":
        differ = int(sum(1 for a, b in zip(got.ravel().tolist(), ref.ravel().tolist()) if str(a) != str(b)))
        return (0.0 if not differ else float("inf")), float("nan"), f"{differ} strings differ" if differ else ""
    if got.dtype != ref.dtype:
        return float("inf"), 0.0, f"dtype {got.dtype}, reference {ref.dtype}"
    if ref.size == 0:
        return 0.0, 0.0, ""
    kind = np.complex128 if ref.dtype.kind == "c" else np.float64
    g, r = got.astype(kind), ref.astype(kind)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(g - r)
        both_nan = np.isnan(g) & np.isnan(r)
        same_inf = np.isinf(g) & np.isinf(r) & (g == r)
        diff = np.where(both_nan | same_inf, 0.0, np.where(np.isnan(diff), np.inf, diff))
        finite = np.abs(r)[np.isfinite(r)]
    note = ""
    if not np.isfinite(g).all() and np.isfinite(r).all():
        note = "inf/NaN where the reference is finite (float16 overflow?)"
    return float(diff.max()), float(finite.max()) if finite.size else 0.0, note


def compare_output(name: str, got: Any, ref: Any, rtol: float, atol: float) -> OutputComparison:
    """Compare one output: ok when max|err| <= rtol * max|ref| + atol and nothing structural differs."""
    err, mag, note = _errors(got, ref)
    limit = rtol * (0.0 if np.isnan(mag) else mag) + atol
    dtype, shape = _describe(got)
    return OutputComparison(name, dtype, shape, err, mag, limit, err <= limit and (not note or err == 0.0), note)


@dataclass
class ReferenceModel:
    """The original model for the references: `model` with its large external-data weights left
    external, and those weights as read-only maps of their data file (`weights`, name -> array).

    A model of several GB is then never copied into memory for the comparison: onnxruntime reads the
    weights from their data file in `folder` itself (as when it opens the model by path), the
    reference evaluator gets the maps as extra inputs."""

    model: "onnx.ModelProto"
    weights: dict[str, np.ndarray]
    folder: Path | None = None


def reference_model(path: Path, graph: "Graph") -> ReferenceModel:
    """The model as ONNX, asked for every output of the compiled graph (output_ops may cut elsewhere)."""
    from onnx import helper
    weights: dict[str, np.ndarray] = {}
    folder = None
    if path.suffix.lower() == ".xmodel":
        import xgraph
        loaded = xgraph.load(path)
        gear = loaded.find_gear({t.name: t.shape for t in graph.get_input_tensors()}) if loaded.get_gears() else None
        model = (loaded if gear is None else gear.graph).to_onnx()  # a geared file: the gear of `graph`'s shapes
    else:
        from xgraph.ir.onnx.safe_reader import read_model
        model, folder = read_model(path, mapped=weights)[:2]  # the checked reader; large external weights stay mapped
    declared = {o.name for o in model.graph.output}
    for t in graph.get_output_tensors():
        if t.name not in declared and t.dtype is not None:
            code = helper.np_dtype_to_tensor_dtype(t.dtype)
            model.graph.output.append(helper.make_tensor_value_info(t.name, code, None))
    return ReferenceModel(model, weights, folder)


def run_reference(ref: ReferenceModel, feeds: dict[str, Any], names: Sequence[str],
                  label: str, allow_onnxruntime: bool = True) -> tuple[str, list[Any]]:
    """(which reference ran, its outputs): onnxruntime, else the ONNX reference evaluator with xgraph's
    inference fixes. When onnxruntime runs the path being verified the evaluator comes first, and
    onnxruntime stands in only when the evaluator cannot run the model (the name then says so)."""
    order = (ONNXRUNTIME, EVALUATOR) if allow_onnxruntime else (EVALUATOR, ONNXRUNTIME)
    result = run_reference_model(ref.model, feeds, names, label, order=order, weights=ref.weights, folder=ref.folder)
    if not allow_onnxruntime and result.reference == ONNXRUNTIME:
        return (f"{ONNXRUNTIME} (the {EVALUATOR} cannot run this model: {result.problems[0].split(': ', 1)[-1]}; "
                "so the reference is not independent of this path)"), result.values
    return result.reference, result.values


def tolerances(args: argparse.Namespace, graph: "Graph") -> tuple[float, float]:
    """(rtol, atol): the flags, else the defaults for the mode and precision."""
    precision = str(graph.get_attr("precision_mode")) if graph.has_attr("precision_mode") else ""
    rtol, atol = FP16_TOLERANCE if args.mode == "sim" and precision in FP16_PRECISION_MODES else EXACT_TOLERANCE
    return (rtol if args.rtol is None else args.rtol), (atol if args.atol is None else args.atol)


def add_parser(subparsers) -> None:
    """Register the `verify` sub-command."""
    p = subparsers.add_parser("verify", help="compile + run a model and compare its outputs with onnxruntime",
                              description="Compile a model, run it through the graph runner on seeded random "
                              "inputs (or --input files), and compare every output with onnxruntime on the "
                              "original model (the ONNX reference evaluator when onnxruntime cannot run it). "
                              "Prints max|err| and max|ref| per output; exit code 1 on a mismatch.")
    p.add_argument("model", metavar="MODEL", type=model_path, help="the model: an .onnx (or an .xmodel, whose graph is the reference)")
    add_compile_arguments(p)
    p.add_argument("--mode", choices=("run", "sim"), default="run",
                   help="run: fastest on this host (default); sim: device numerics (fp16 on AI Core when asked)")
    add_kernels_argument(p, default=None, help_default="default: numpy, and auto too where onnxruntime is installed; "
                         "a path running on onnxruntime is compared with the ONNX reference evaluator, never "
                         "with onnxruntime itself")
    add_input_argument(p, "Inputs not given get seeded random values.")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--rtol", type=tolerance, help="relative tolerance against max|ref| (default 1e-4; 1e-2 for sim fp16)")
    p.add_argument("--atol", type=tolerance, help="absolute tolerance (default 1e-6; 1e-3 for sim fp16)")
    add_gear_argument(p, "every gear in turn")
    p.add_argument("--bisect", action="store_true",
                   help="also run every device subgraph alone on the reference's own values of its inputs and name "
                   "the first subgraph (and op) out of tolerance (docs/cli.md#verify---bisect)")
    p.add_argument("--seeds", type=positive_int, default=3,
                   help="with --bisect: how many seeded random inputs, from --seed on (default 3)")
    p.set_defaults(func=run)


def _onnxruntime_installed() -> bool:
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def kernel_paths(args: argparse.Namespace) -> list[str]:
    """The kernels choices to verify: the one asked for, else xgraph's own (numpy) and, where
    onnxruntime is installed, also the default `auto` path."""
    if args.kernels is not None:
        return [args.kernels]
    return ["numpy", "auto"] if args.mode == "run" and _onnxruntime_installed() else ["numpy"]


class References:
    """The independent references, each computed once: onnxruntime on the original model (when
    it can run it) and the corrected ONNX reference evaluator."""

    def __init__(self, model: ReferenceModel, feeds: dict[str, Any], names: Sequence[str], label: str):
        self.model, self.feeds, self.names, self.label = model, feeds, names, label
        self._results: dict[bool, tuple[str, list[Any]]] = {}

    def get(self, avoid_onnxruntime: bool) -> tuple[str, list[Any]]:
        """(which reference ran, its outputs); never onnxruntime when the verified path runs on it."""
        if avoid_onnxruntime not in self._results:
            self._results[avoid_onnxruntime] = run_reference(self.model, self.feeds, self.names, self.label,
                                                             allow_onnxruntime=not avoid_onnxruntime)
        return self._results[avoid_onnxruntime]


def degenerate_warnings(refs: References, filled: Sequence[str], graph: "Graph", seed: int) -> list[str]:
    """Why a match against this reference would prove little: outputs whose elements are all
    equal, or that stay the same for two different random inputs (constant weights do that)."""
    reference, expected = refs.get(False)
    notes = [f"warning: reference output {name!r} has all {np.size(v)} elements equal; a match proves little"
             for name, v in zip(refs.names, expected)
             if isinstance(v, np.ndarray) and v.size > 1 and v.dtype.kind in "fc" and np.all(v == v.flat[0])]
    if filled:
        other = dict(refs.feeds)
        other.update(complete_inputs({}, [t for t in graph.get_input_tensors() if t.name in filled], seed + 1)[0])
        try:
            _, again = run_reference(refs.model, other, refs.names, refs.label,
                                     allow_onnxruntime=reference == "onnxruntime")
        except XGraphError as e:  # only a warning depends on it: say so, the verdict stands
            return notes + [f"note: the reference could not run a second random input ({e}), so constant "
                            "weights were not checked for"]
        same = [n for n, a, b in zip(refs.names, expected, again)
                if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.shape == b.shape and np.array_equal(a, b)]
        if same and len(same) == len(refs.names):
            notes.append(f"warning: the reference outputs do not change with the random inputs (seed {seed} vs "
                         f"{seed + 1}): the model's weights are probably constant, so a match proves little and "
                         f"rounding alone can decide a mismatch; give it real or random weights")
    return notes


def verify_path(args: argparse.Namespace, graph: "Graph", refs: References, kernels: str,
                rtol: float, atol: float, source: str, out: list[str]) -> bool:
    """Run the compiled graph on one kernels choice, compare with a reference independent of it; the
    report goes to `out` (printed once every path has run, so an error never follows a verdict)."""
    print = out.append
    import xgraph
    with warnings.catch_warnings(), xgraph.create_graph_runner(graph, args.mode, kernels,
                                                                plugin_path=plugin_path_of(args)) as runner:
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow shows in the table as inf, not as noise
        got = runner.run(refs.feeds)
        backends = sorted({getattr(r, "backend", type(r).__name__) for r in runner.runners.values()})
    reference, expected = refs.get(avoid_onnxruntime="onnxruntime" in backends)
    where = "on the original model" if reference.startswith("onnxruntime") else "on the original model, fixed for inference"
    print(f"verify {args.model}: mode {args.mode}, kernels {kernels} ({', '.join(backends)}) on the compiled "
          f"partition vs reference {reference} {where}; inputs: {source}")
    comparisons = [compare_output(n, g, e, rtol, atol) for n, g, e in zip(refs.names, got, expected)]
    width = max([len(c.name) for c in comparisons] + [6])
    print(f"  {'output':<{width}}  {'dtype':<9} {'shape':<16} {'max|err|':>10} {'max|ref|':>10} {'limit':>10}  result")
    for c in comparisons:
        result = "ok" if c.ok else "MISMATCH" + (f" ({c.note})" if c.note else "")
        print(f"  {c.name:<{width}}  {c.dtype:<9} {c.shape:<16} {c.max_err:>10.3g} {c.max_ref:>10.3g} "
              f"{c.limit:>10.3g}  {result}")
    bad = [c.name for c in comparisons if not c.ok]
    if bad:
        print(f"verify: FAIL: kernels {kernels}: {len(bad)} of {len(comparisons)} outputs differ from {reference} "
              f"({', '.join(bad)}); tolerance max|err| <= {rtol:g} * max|ref| + {atol:g}")
        return False
    print(f"verify: PASS: {len(comparisons)} outputs match {reference} within max|err| <= {rtol:g} * max|ref| + {atol:g} "
          f"(kernels {kernels})")
    return True


def bisect_command(args: argparse.Namespace, graph: "Graph", given: dict[str, Any], out: list[str]) -> int:
    """`--bisect`: the per-subgraph table of `xgraph.bisect`; 0 when every subgraph is within tolerance."""
    from xgraph.runners.bisect import bisect
    kernels = args.kernels or "auto"
    report = bisect(graph, given, args.seeds, seed=args.seed, mode=args.mode, kernels=kernels,
                    plugin_path=plugin_path_of(args))
    out.append(report.table())
    return 0 if report.ok else EXIT_MISMATCH


def precision_notes(graph: "Graph") -> list[str]:
    """A warning per device subgraph whose plugin lets it compute below float32 (its measured error is in
    the table above; `--bisect` measures it subgraph by subgraph)."""
    return [f"warning: subgraph {sg.name!r} ({sg.get_attr('device')}) computes in {sg.get_attr('inference_precision')} "
            f"(plugin {sg.get_attr('plugin') if sg.has_attr('plugin') else '?'!r} precision option): the errors "
            "above include its rounding; --bisect measures it alone"
            for sg in graph.get_root_subgraph().get_children()
            if sg.has_attr("inference_precision") and sg.get_attr("inference_precision") not in ("f32", "float32")]


def run(args: argparse.Namespace) -> int:
    """Compile, run each kernels path, compare each with an independent reference, print; 0 when all pass.

    A model compiled with gears is verified gear by gear (`--gear`, or the gear of the input files).
    """
    graph = load_compiled(args)
    given = read_inputs(args.input, graph.get_input_tensors())
    out: list[str] = []
    results = [verify_graph(args, graph if gear is None else gear.graph, given, gear_title(gear), out)
               for gear in gears_to_use(graph, args, given, every=True)]
    if getattr(args, "bisect", False):
        results.append(bisect_command(args, graph, given, out))
    print("\n".join(out))
    return 0 if all(r == 0 for r in results) else EXIT_MISMATCH


def verify_graph(args: argparse.Namespace, graph: "Graph", given: dict[str, Any], title: str = "",
                 out: "list[str] | None" = None) -> int:
    """Verify one (static, for a gear) partition: 0 when every kernels path matches its reference. The
    report is appended to `out` (printed here when None)."""
    lines: list[str] = [] if out is None else out
    if title:
        lines.append(f"verify {args.model}:{title}")
    inputs = graph.get_input_tensors()
    feeds, filled = complete_inputs(given, inputs, args.seed)
    rtol, atol = tolerances(args, graph)
    names = [t.name for t in graph.get_output_tensors()]
    refs = References(reference_model(Path(args.model), graph), feeds, names, args.model)
    refs.get(avoid_onnxruntime=False)  # a model no reference can run fails here, before any work
    given = [n for n in feeds if n not in filled]
    source = ", ".join(filter(None, [f"{len(filled)} random (seed {args.seed})" if filled else "",
                                     f"{len(given)} from files" if given else ""])) or "none"
    results = [verify_path(args, graph, refs, kernels, rtol, atol, source, lines) for kernels in kernel_paths(args)]
    lines.extend(degenerate_warnings(refs, filled, graph, args.seed))
    lines.extend(precision_notes(graph))
    if out is None:
        print("\n".join(lines))
    return 0 if all(results) else EXIT_MISMATCH
