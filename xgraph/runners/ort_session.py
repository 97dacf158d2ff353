"""One onnxruntime session for a whole standard-ONNX subgraph: when it can be used, and how it is made.

onnxruntime is an optional extra (`pip install 'xgraph[onnxruntime]'`); nothing here imports
it until a session is asked for.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np
import onnx

from xgraph.devices.cost import op_flops
from xgraph.errors import ModelFileError
from xgraph.ir.dim_ranges import DimRanges
from xgraph.ir.onnx.mapped import MappedFile, origin

if TYPE_CHECKING:
    from xgraph.ir import Subgraph, Tensor

#: Op domains onnxruntime implements itself (standard ONNX).
STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})
#: Threads one onnxruntime session may use inside an op when devices run side by side (a
#: subgraph with siblings); a subgraph that is the whole graph uses onnxruntime's default.
ORT_INTRA_OP_THREADS = 2
#: A session whose heaviest op does fewer FLOPs than this runs on one intra-op thread: handing
#: such an op to a second thread costs more than the thread saves. onnxruntime alone, a GPT-2-like
#: decoder step (past 32) on 2 cores, default threads -> one: hidden 32 (heaviest op 8k FLOPs)
#: 68 -> 60 us at 2 layers, 252-258 -> 215-218 us at 8; hidden 64 (33k) 130-143 -> 116-124 us;
#: hidden 128 (131k) 234-237 -> 258-306 us; hidden 256 (524k) 831-891 -> 1110-1180 us.
ONE_THREAD_BELOW_FLOPS = 65_536
#: onnxruntime's graph rewrites left out of those one-thread sessions. Once a MatMul's shapes are
#: static (xgraph's compile makes a decoder's projections so; onnxruntime's own session of the
#: exported model, with its dynamic dims, does not), MatMulAddFusion turns a 3-D MatMul and its
#: bias Add into Reshape -> Gemm -> Reshape: one node fewer for the Add, two more for the reshapes,
#: each costing more than it saves when every op is small. GPT-2-like decoder step, one thread,
#: past lengths 0..33 in turn: 2 layers of hidden 32 51.5 -> 49.4 us, 8 layers 185 -> 174 us.
SMALL_OPS_DISABLED_OPTIMIZERS = ("MatMulAddFusion",)


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


class GearSessions:
    """The onnxruntime sessions made inside one `sessions_take_turns()` block (the gears of a model).

    Subgraphs that are one graph but for their shapes (`shape_free_key`) get one session, made over
    the graph without shapes. Whether whole-graph sessions stop spinning at the end of each run
    depends on what runs between two runs of one: when every gear is one subgraph and all of them
    share one session, nothing else does (the session is as lone as a model without gears, and
    keeps spinning like one); otherwise another session runs next and must get the cores.
    """

    def __init__(self, gears: "Sequence[Subgraph | None]" = ()) -> None:
        #: per gear: its one device subgraph, or None for a gear of several (sibling sessions)
        self._gears = list(gears)
        self._exported: dict[int, tuple] = {}  # id(subgraph) -> (model without shapes, key)
        self.sessions: dict[tuple, object] = {}  # (key, session config) -> session
        self._turns: bool | None = None

    def export(self, subgraph: "Subgraph") -> tuple:
        """(the subgraph's ONNX without shapes, external weights left out; its `shape_free_key`), made once."""
        found = self._exported.get(id(subgraph))
        if found is None:
            model = without_shapes(weights_as_constants(subgraph.to_onnx(external_weights=True)))
            found = self._exported[id(subgraph)] = (model, shape_free_key(model, subgraph))
        return found

    def take_turns(self) -> bool:
        """True unless every gear is one subgraph and they are all one session (unknown gears: True)."""
        if self._turns is None:
            gears = self._gears
            self._turns = not gears or any(g is None for g in gears) or len({self.export(g)[1] for g in gears}) > 1
        return self._turns


_TAKING_TURNS: ContextVar["GearSessions | None"] = ContextVar("xgraph_sessions_take_turns", default=None)


@contextmanager
def sessions_take_turns(gears: "Sequence[Subgraph | None]" = ()) -> Iterator[GearSessions]:
    """Sessions `ort_session` makes in this block belong to the gears of one model (`GearSessions`):
    gears that are one graph but for their shapes share one session, and whole-graph sessions that
    alternate stop spinning at the end of each run. `gears`: each gear's one device subgraph (None
    for a gear of several); without them, sessions are assumed to alternate."""
    pool = GearSessions(gears)
    token = _TAKING_TURNS.set(pool)
    try:
        yield pool
    finally:
        _TAKING_TURNS.reset(token)


def without_shapes(model: "onnx.ModelProto") -> "onnx.ModelProto":
    """`model` with no shape written anywhere: no value_info, every input and output dim unknown.

    The gears of a model are one graph specialised to different input shapes; what ONNX computes
    does not depend on the shapes a graph declares, so one session over the graph without them
    computes every gear's results."""
    del model.graph.value_info[:]
    for vi in (*model.graph.input, *model.graph.output):
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            for dim in vi.type.tensor_type.shape.dim:
                dim.Clear()
    model.graph.name = ""
    return model


def shape_free_key(model: "onnx.ModelProto", subgraph: "Subgraph") -> tuple:
    """What makes two subgraphs one session: their ONNX without shapes (`without_shapes`, weights
    under 4 KiB included by value) and each external weight's memory (the gears' weights are
    one shared array each, `xgraph.ir.gears.share_weights`).

    Weights are compared by address, not by value: equal weights in different arrays give two
    sessions, never a session reading another gear's array after that gear changed it."""
    memory = sorted((name, data.__array_interface__["data"][0], data.shape, data.strides, data.dtype.str)
                    for name, data in left_out_weights(model, subgraph).items())
    return model.SerializeToString(deterministic=True), tuple(memory)


def left_out_weights(model: "onnx.ModelProto", subgraph: "Subgraph") -> "dict[str, np.ndarray]":
    """name -> array of the weights `subgraph.to_onnx(external_weights=True)` (`model`) left out."""
    external = {t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    return {t.name: t.data for t in subgraph.get_const_tensors() if t.name in external}


def splits_pay(subgraph: "Subgraph") -> bool:
    """Whether some op of `subgraph` is big enough to be worth splitting across intra-op threads: one
    of at least `ONE_THREAD_BELOW_FLOPS` FLOPs (`xgraph.devices.cost.op_flops`, at the graph's
    shapes, a dynamic dim at the size the compile's estimates assume: the top of its `input_shape`
    range, else 1), or one whose work is not known from the graph (an unknown shape, a nested
    graph's body)."""
    graph = subgraph.graph
    dims, index = DimRanges.of_graph(graph), graph.index()
    for op in subgraph.get_ops():
        if index.has_nested_graphs(op):
            return True
        args = [None if t is None else t.shape for t in op.get_input_tensors()]
        results = [t.shape for t in op.get_output_tensors()]
        if any(shape is None for shape in results):
            return True
        sized = [None if shape is None else dims.shape(shape) for shape in args]
        if op_flops(op.type, op.get_onnx_attrs(), sized, [dims.shape(shape) for shape in results]) \
                >= ONE_THREAD_BELOW_FLOPS:
            return True
    return False


def ort_session(subgraph: "Subgraph"):
    """An onnxruntime InferenceSession for the whole subgraph (CPU, a small thread pool).

    A subgraph none of whose ops is worth splitting (`splits_pay`: a small decoder's step, a chain
    of small ops) runs on the calling thread alone, whatever its siblings: waking a second thread
    for an op of a few thousand FLOPs costs more than it saves (`ONE_THREAD_BELOW_FLOPS`), and so
    does a graph rewrite that adds nodes around such ops (`SMALL_OPS_DISABLED_OPTIMIZERS`). Gears
    that share a session (below) share it per thread count: a decoder whose past-length gears lie
    on both sides of the threshold has two sessions, not one per gear.

    When the subgraph has siblings, its threads do not spin-wait after an op: several sessions
    (one per subgraph) share the cores, and a spinning pool would steal them from the session
    running next. A subgraph that is the whole graph keeps onnxruntime's spinning within a run,
    which saves a thread wake-up per op (DenseNet121: 47 ms instead of 51), and onnxruntime's
    own thread count (one per physical core): nothing runs beside it, and a fixed small pool
    would make the graph runner slower than onnxruntime itself on a machine with more cores.
    Whole-graph sessions made inside `sessions_take_turns()` that alternate (gears that are not
    one session) stop spinning at the end of each run (`session.force_spinning_stop`): a pool
    still spinning after its gear's step would take a core from the next step's gear (a decoding
    loop over past-length gears ran at half speed, and onnxruntime's own session beside it at a
    third). A lone whole-graph session keeps spinning between runs, which its next run gains
    from (SqueezeNet: 12 ms instead of 15), and so does one session shared by every gear.

    Inside `sessions_take_turns()`, a subgraph that is another's graph but for its shapes gets
    that subgraph's session (made over the graph without shapes): the past-length gears of a
    decoder are then one warm session with one copy of onnxruntime's prepacked weights, not one
    per gear (a gear's first run in a decoding loop was 2x its next; 50 gears of an 8-layer
    decoder held 50 packed copies of its weights).
    """
    import onnxruntime as ort
    pool = _TAKING_TURNS.get()
    parent = subgraph.get_parent()
    if not splits_pay(subgraph):  # no op worth splitting: the calling thread alone, no pool to spin
        threads, config = 1, ()  # (and no rewrite that adds nodes: SMALL_OPS_DISABLED_OPTIMIZERS)
    elif parent is None or parent.get_children_num() > 1:
        threads, config = ORT_INTRA_OP_THREADS, (("session.intra_op.allow_spinning", "0"),)
    elif pool is not None and pool.take_turns():
        threads, config = None, (("session.force_spinning_stop", "1"),)
    else:
        threads, config = None, ()
    if pool is not None:
        model, key = pool.export(subgraph)
        shared = pool.sessions.get((key, config, threads))
        if shared is not None:
            return shared
    else:
        model = weights_as_constants(subgraph.to_onnx(external_weights=True))
    options = ort.SessionOptions()
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    for entry, value in config:
        options.add_session_config_entry(entry, value)
    kept = add_weights(options, model, subgraph)
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"],
                                   disabled_optimizers=list(SMALL_OPS_DISABLED_OPTIMIZERS) if threads == 1 else None)
    check_files(kept)
    session.xgraph_weights = kept  # onnxruntime may read these buffers: they live as long as the session
    if pool is not None:
        pool.sessions[(key, config, threads)] = session
    return session


def add_weights(options, model: "onnx.ModelProto", subgraph: "Subgraph") -> list:
    """Point onnxruntime at the weights `model` leaves external, without copying them.

    A weight that is a memory map of a data file (an external-data model, an .xmodel's side
    file) becomes a reference to that file at its offset: onnxruntime maps or reads it itself,
    as it does for a model opened from a path (its memory stays what its own loading costs).
    Others are handed over as OrtValues over the graph's own arrays. Either way the model
    proto stays small (no 2 GiB protobuf limit). Returns what must live as long as the
    session (the OrtValues, and the mapped files whose identity `check_files` checks after).
    """
    import onnxruntime as ort
    external = {t.name: t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
    if not external:
        return []
    names, values, files, folder = [], [], {}, None
    for t in subgraph.get_const_tensors():
        proto = external.get(t.name)
        if proto is None:
            continue
        found = origin(t.data)
        if found is not None and folder in (None, found[0].path.parent):
            mapped, offset = found
            folder = mapped.path.parent
            files[id(mapped)] = mapped
            del proto.external_data[:]
            for key, value in (("location", mapped.path.name), ("offset", str(offset)), ("length", str(t.data.nbytes))):
                entry = proto.external_data.add()
                entry.key, entry.value = key, value
            continue
        # onnxruntime takes only buffers it does not own: an OrtValue over a strided view (a folded
        # Transpose of a weight) would be a copy it owns, so such a weight is made contiguous first
        array = t.data if t.data.flags.c_contiguous else np.ascontiguousarray(t.data)
        names.append(t.name)
        values.append(ort.OrtValue.ortvalue_from_numpy(array))
    if folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    if names:
        options.add_external_initializers(names, values)
    return [*values, *files.values()]


def check_files(kept: list) -> None:
    """Refuse a session whose data files were replaced between xgraph's checks and onnxruntime's opening
    (onnxruntime opens them by path; the mapped descriptor is the file xgraph checked)."""
    for item in kept:
        if not isinstance(item, MappedFile):
            continue
        try:
            now, checked = os.stat(item.path), os.fstat(item.fd)
        except OSError as e:
            raise ModelFileError(f"external data file {str(item.path)!r} cannot be checked after onnxruntime "
                                 f"opened it ({e.strerror or e})") from None
        if (now.st_dev, now.st_ino, now.st_size) != (checked.st_dev, checked.st_ino, checked.st_size):
            raise ModelFileError(f"external data file {str(item.path)!r} was replaced while the model was "
                                 "loading; load it again")


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
