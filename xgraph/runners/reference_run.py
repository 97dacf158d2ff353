"""Golden values for a whole ONNX model: the ONNX reference evaluator (with xgraph's inference fixes) or
onnxruntime, in the order the caller prefers, each standing in for the other when it cannot run the model.

`xgraph verify` compares the compiled graph's outputs with these; `xgraph.bisect` asks them for every
intermediate tensor too (any tensor name of the model may be asked for). Which reference ran, and why
the preferred one did not, is returned so the caller can say so.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import XGraphError
from xgraph.ir.onnx.mapped import origin
from xgraph.runners.ort_session import check_files

if TYPE_CHECKING:
    import onnx

ONNXRUNTIME = "onnxruntime"
EVALUATOR = "ONNX reference evaluator"


@dataclass
class ReferenceResult:
    """Which reference ran (`ONNXRUNTIME` or `EVALUATOR`), its values for the names asked, and why the
    references tried before it could not run (empty when the preferred one ran)."""

    reference: str
    values: list[Any]
    problems: list[str] = field(default_factory=list)


def _first_line(e: BaseException) -> str:
    return str(e).splitlines()[0][:200] if str(e) else type(e).__name__


def _with_outputs(model: "onnx.ModelProto", names: Sequence[str]) -> "onnx.ModelProto":
    """`model` declaring every one of `names` as an output (onnxruntime returns only declared outputs)."""
    from onnx import helper
    declared = {o.name for o in model.graph.output}
    missing = [n for n in dict.fromkeys(names) if n not in declared]
    if not missing:
        return model
    copy = type(model)()
    copy.CopyFrom(model)
    for n in missing:
        copy.graph.output.append(helper.make_empty_tensor_value_info(n))
    return copy


def run_onnxruntime(model: "onnx.ModelProto", feeds: dict[str, Any], names: Sequence[str],
                    weights: "dict[str, np.ndarray] | None" = None, folder: "Path | None" = None) -> list[Any]:
    """onnxruntime's values for `names` (intermediates included); the large external weights, if any, are
    read from their data file in `folder` by onnxruntime itself."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if weights:  # the data file the safe reader checked, opened by onnxruntime (OrtValues over the maps would
        # make it keep a packed copy beside another of its own: 3x the weights)
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    model = _with_outputs(model, names)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    check_files([found[0] for found in map(origin, (weights or {}).values()) if found is not None])
    wanted = {i.name for i in session.get_inputs()}
    return session.run(list(names), {k: v for k, v in feeds.items() if k in wanted})


def run_evaluator(model: "onnx.ModelProto", feeds: dict[str, Any], names: Sequence[str],
                  weights: "dict[str, np.ndarray] | None" = None) -> list[Any]:
    """The ONNX reference evaluator's values for `names` (intermediates included), with xgraph's fixes."""
    from onnx.reference import ReferenceEvaluator

    from xgraph.kernels.reference import weights_as_inputs
    from xgraph.kernels.reference_fixes import evaluator_fixes
    model = weights_as_inputs(model, weights) if weights else model
    evaluator = ReferenceEvaluator(model, new_ops=evaluator_fixes())
    return evaluator.run(list(names), {**feeds, **(weights or {})})


def run_reference(model: "onnx.ModelProto", feeds: dict[str, Any], names: Sequence[str], label: str, *,
                  order: Sequence[str] = (ONNXRUNTIME, EVALUATOR), weights: "dict[str, np.ndarray] | None" = None,
                  folder: "Path | None" = None) -> ReferenceResult:
    """The first reference of `order` that runs the model; XGraphError naming `label` when none can."""
    problems: list[str] = []
    for reference in order:
        try:
            if reference == ONNXRUNTIME:
                values = run_onnxruntime(model, feeds, names, weights, folder)
            else:
                values = run_evaluator(model, feeds, names, weights)
            return ReferenceResult(reference, values, problems)
        except ImportError:
            problems.append(f"{reference}: not installed")
        except XGraphError:  # a data file replaced while checking: an error, not a reason to try another
            raise
        except Exception as e:  # both raise many types for models they cannot run
            problems.append(f"{reference}: {_first_line(e)}")
    raise XGraphError(f"{label}: no reference can run this model, so it cannot be verified ({'; '.join(problems)})")


__all__ = ["EVALUATOR", "ONNXRUNTIME", "ReferenceResult", "run_evaluator", "run_onnxruntime", "run_reference"]
