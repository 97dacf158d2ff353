"""One onnxruntime session for a whole standard-ONNX subgraph: when it can be used, and how it is made.

onnxruntime is an optional extra (`pip install 'xgraph[onnxruntime]'`); nothing here imports
it until a session is asked for.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import onnx

if TYPE_CHECKING:
    from xgraph.ir import Subgraph, Tensor

#: Op domains onnxruntime implements itself (standard ONNX).
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})
#: Threads one onnxruntime session may use inside an op when devices run side by side (a
#: subgraph with siblings); a subgraph that is the whole graph uses onnxruntime's default.
ORT_INTRA_OP_THREADS = 2


def onnxruntime_available() -> bool:
    """True when the optional onnxruntime package can be imported."""
    try:
        import onnxruntime  # noqa: F401  (only whether it imports)
    except ImportError:
        return False
    return True


def is_standard_onnx(subgraph: "Subgraph") -> str:
    """'' when every op is standard ONNX (onnxruntime can run the subgraph), else why not."""
    local = {(f.domain, f.name) for f in subgraph.graph.functions}
    for op in subgraph.toposort():
        if op.domain not in STANDARD_DOMAINS or (op.domain, op.type) in local:
            return f"op {op.name!r} ({op.domain}:{op.type}) is not a standard ONNX op"
    return ""


def ort_unexchangeable(tensors: "Sequence[Tensor]") -> str:
    """'' when onnxruntime's Python API can take and return every tensor, else why not.

    It has no numpy mapping for the ml_dtypes types (bfloat16, float8, int4, ...): a session
    over them loads, then fails on the first run.
    """
    for t in tensors:
        if t.dtype is not None and t.dtype.isbuiltin != 1:  # 2: a dtype registered by ml_dtypes
            return f"onnxruntime's Python API cannot exchange {t.dtype} tensors (tensor {t.name!r})"
    return ""


def ort_session(subgraph: "Subgraph"):
    """An onnxruntime InferenceSession for the whole subgraph (CPU, a small thread pool).

    When the subgraph has siblings, its threads do not spin-wait after an op: several sessions
    (one per subgraph) share the cores, and a spinning pool would steal them from the session
    running next. A subgraph that is the whole graph keeps onnxruntime's spinning, which saves
    a thread wake-up per op (DenseNet121: 47 ms instead of 51), and onnxruntime's own thread
    count (one per physical core): nothing runs beside it, and a fixed small pool would make
    the graph runner slower than onnxruntime itself on a machine with more cores.
    """
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    parent = subgraph.get_parent()
    if parent is None or parent.get_children_num() > 1:
        options.intra_op_num_threads = ORT_INTRA_OP_THREADS
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    model = weights_as_constants(subgraph.to_onnx())
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def weights_as_constants(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """`model` with its initializers no longer listed as graph inputs (IR version 4 at least).

    Before IR 4 every initializer was also a graph input, a default a caller may override, so
    onnxruntime may not fold or fuse anything that reads one (Conv + BatchNormalization, the
    NCHWc layout). A subgraph's weights are constants in xgraph: nothing ever overrides them.
    """
    if model.ir_version >= 4:
        return model
    weights = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    model.ir_version = 4
    return model
