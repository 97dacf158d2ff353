"""Batch inference over a Ray Dataset: replicas of a compiled model, one local graph runner each.

    ds = ray.data.read_binary_files("photos/", include_paths=True)     # JPEG bytes, decoded by DVPP
    out = xgraph.ray.map_batches(ds, "classifier.xmodel", batch_size=32, concurrency=2)
    out.write_parquet("scores/")

A replica is a Ray Data actor holding a `GraphRunner` for the whole model (its subgraphs on
the replica's own device streams, as on one host); scale comes from replicas, each on the CPUs
(or custom resources) it reserves. For subgraphs on different hosts use
`xgraph.ray.create_graph_runner` instead.

Rows are runs: the model's inputs come from columns named like them (or the only data
column for a one-input model: "bytes" from `read_binary_files`, "image" from `read_images`,
"data" from `read_numpy`). A row without the model's leading batch dim of 1 gets it, and
loses it again on the outputs. A batch's rows go through the runner several at a time, so
a replica's devices pipeline as they do locally.
"""
from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from xgraph.errors import ModelFileError, RunnerError, XGraphError
from xgraph.ray.graph_runner import model_bytes
from xgraph.ray.session import connect, require_ray

if TYPE_CHECKING:
    from xgraph.ir import Graph, Tensor

#: Columns that describe a row rather than feed the model (kept in the output by default).
DESCRIPTIVE = ("path",)
#: A column whose non-empty value says the row's input could not be read (`read_files`): the row fails
#: with that message instead of running.
READ_ERROR = "read_error"
#: What a replica does with a row that fails: fail the batch, drop the row, or keep it with its error
#: in an "error" column ("" for rows that ran) and None for its outputs.
ON_ERROR = ("raise", "skip", "record")


def check_replica(graph: "Graph", columns: Mapping[str, str], on_error: str) -> None:
    """RunnerError (naming the option) unless a replica of `graph` can start with these settings."""
    from xgraph.runners.graph_runner import device_subgraphs
    if on_error not in ON_ERROR:
        raise RunnerError(f"on_error must be one of {', '.join(ON_ERROR)}, got {on_error!r}")
    device_subgraphs(graph)  # compiled: XGraphError saying to compile first otherwise
    names = [t.name for t in graph.get_input_tensors()]
    unknown = sorted(set(columns) - set(names))
    if unknown:
        raise RunnerError(f"columns maps {unknown[0]!r}, which is not an input of {graph.name!r}; inputs: "
                          f"{', '.join(names)}")


def _cell(value: Any, tensor: "Tensor") -> tuple[Any, bool]:
    """A dataset cell as the input's value; True when a leading batch dim of 1 was added."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        value = np.frombuffer(value, dtype=np.uint8)
    if isinstance(value, np.ndarray) and tensor.shape is not None and value.ndim == len(tensor.shape) - 1 \
            and tensor.shape[0] == 1:
        return value[np.newaxis], True
    return value, False


def _column(values: list[Any]) -> Any:
    """Per-row outputs as one column: stacked when they share shape and dtype, else a list (ragged)."""
    if any(v is None for v in values):
        return list(values)  # rows that failed under on_error="record"
    arrays = [np.asarray(v) for v in values]
    if arrays and all(a.dtype == object for a in arrays) and all(isinstance(x, str) for a in arrays for x in a.flat):
        arrays = [a.astype(str) for a in arrays]  # strings (a LabelEncoder's names) as a fixed-width column
    if arrays and all(a.shape == arrays[0].shape and a.dtype == arrays[0].dtype for a in arrays):
        return np.stack(arrays)
    return arrays


class ModelReplica:
    """One replica of a compiled model, callable on a Ray Data batch (dict of columns -> dict of columns).

    Use it with `Dataset.map_batches(ModelReplica, fn_constructor_kwargs={"model": ...},
    compute=ray.data.ActorPoolStrategy(size=n), batch_format="numpy")`, or call
    `xgraph.ray.map_batches`, which does that.
    """

    def __init__(self, model: Any, *, mode: str = "run", kernels: str = "auto",
                 columns: Mapping[str, str] | None = None, keep_columns: Sequence[str] = DESCRIPTIVE,
                 on_error: str = "raise", max_jobs_in_flight: int = 4, threads: int | None = None) -> None:
        """Load the model (.xmodel path, bytes, Graph or an object ref of .xmodel bytes) and start its runner."""
        import os

        import xgraph
        if threads:
            os.environ.setdefault("XGRAPH_INTRA_OP_THREADS", str(int(threads)))  # read when the first kernel runs
        if type(model).__name__ == "ObjectRef":
            model = require_ray().get(model)
        graph = model if isinstance(model, xgraph.Graph) else xgraph.load(model)
        self.graph: "Graph" = graph
        self.inputs = graph.get_input_tensors()
        self.outputs = [t.name for t in graph.get_output_tensors()]
        self.columns = dict(columns or {})
        check_replica(graph, self.columns, on_error)
        self.keep_columns = tuple(keep_columns)
        self.on_error = on_error
        self.runner = xgraph.create_graph_runner(graph, mode, kernels, max_jobs_in_flight=max_jobs_in_flight)

    def _sources(self, batch: Mapping[str, Any]) -> dict[str, str]:
        """The column feeding each input: named in `columns`, named like the input, or the only data column."""
        sources = {}
        data = [c for c in batch if c not in self.keep_columns and c not in DESCRIPTIVE and c != READ_ERROR]
        for t in self.inputs:
            column = self.columns.get(t.name) or (t.name if t.name in batch else None)
            if column is None and len(self.inputs) == 1 and len(data) == 1:
                column = data[0]
            if column is None or column not in batch:
                raise RunnerError(f"model {self.graph.name!r}: no column for input {t.name!r}; the batch has "
                                  f"{', '.join(batch) or 'no columns'}; name the column like the input or pass "
                                  f"columns={{{t.name!r}: COLUMN}}")
            sources[t.name] = column
        return sources

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Run every row of `batch`: the outputs by name, the kept columns, and "error" under on_error="record"."""
        sources = self._sources(batch)
        rows = len(next(iter(batch.values()))) if batch else 0
        outcomes: list[tuple[list | None, str]] = [(None, "")] * rows
        window: deque = deque()  # (row, job, batch dim added) in flight, a few at a time
        read_errors = batch.get(READ_ERROR)
        for i in range(rows):
            try:
                if read_errors is not None and str(read_errors[i]):
                    raise ModelFileError(str(read_errors[i]))
                feeds, added = {}, False
                for t in self.inputs:
                    feeds[t.name], grew = _cell(batch[sources[t.name]][i], t)
                    added |= grew
                window.append((i, self.runner.execute_async(feeds), added))
            except XGraphError as e:  # a row the model cannot take (dtype, shape): as if its run failed
                outcomes[i] = self._failed(i, e)
            while window and (len(window) >= self.runner.max_jobs_in_flight or i == rows - 1):
                row, job, added = window.popleft()
                outcomes[row] = self._collect(row, job, added)
        kept = [i for i, (values, error) in enumerate(outcomes) if values is not None or error]
        out: dict[str, Any] = {}
        for column in self.keep_columns:
            if column in batch:
                out[column] = np.asarray(batch[column])[kept]
        clash = sorted(set(out) & set(self.outputs))
        if clash:
            raise RunnerError(f"model {self.graph.name!r}: output {clash[0]!r} has the name of a kept column; "
                              f"pass keep_columns without it")
        for k, name in enumerate(self.outputs):
            out[name] = _column([None if outcomes[i][0] is None else outcomes[i][0][k] for i in kept])
        if self.on_error == "record":
            if "error" in out:
                raise RunnerError(f"model {self.graph.name!r} has an output named 'error', which on_error='record' "
                                  f"needs for its column; use on_error='skip' or 'raise'")
            out["error"] = np.array([outcomes[i][1] for i in kept], dtype=object)
        return out

    def _collect(self, row: int, job: tuple[int, int], added: bool) -> tuple[list | None, str]:
        """(outputs, "") of a finished row, or what `_failed` says; drops the batch dim the row was given."""
        if self.runner.wait(job) != 0:
            return self._failed(row, self.runner.get_error(job) or RunnerError(f"row {row} of the batch failed"))
        values = self.runner.get_outputs(job)
        if added:
            values = [v[0] if isinstance(v, np.ndarray) and v.ndim and v.shape[0] == 1 else v for v in values]
        return values, ""

    def _failed(self, row: int, error: BaseException) -> tuple[None, str]:
        """A failed row under on_error: raise it, drop it (None, ""), or keep its message (None, message)."""
        if self.on_error == "raise":
            raise error
        return None, (str(error) or type(error).__name__) if self.on_error == "record" else ""

    def __del__(self) -> None:
        runner = getattr(self, "runner", None)
        if runner is not None:
            runner.close()


def _warn_if_no_cpu_left(concurrency: int | tuple[int, int], num_cpus: float) -> None:
    """Warn when the replicas would reserve every CPU: reads before them could never run."""
    import warnings
    ray = require_ray()
    replicas = concurrency[1] if isinstance(concurrency, tuple) else concurrency
    total = ray.cluster_resources().get("CPU", 0.0)
    if num_cpus and replicas * num_cpus >= total:
        warnings.warn(f"{replicas} replica(s) x {num_cpus:g} CPU reserve all {total:g} CPUs of the Ray cluster; "
                      f"tasks that feed them (reads) need CPUs too, and Ray Data then waits forever "
                      f"(ray-project/ray#44687) unless those take num_cpus=0 (xgraph.ray.read_files does)",
                      RuntimeWarning, stacklevel=3)


def map_batches(dataset: Any, model: "Graph | str | Path | bytes", *, batch_size: int = 16,
                concurrency: int | tuple[int, int] = 1, num_cpus: float = 1,
                resources: Mapping[str, float] | None = None,
                mode: str = "run", kernels: str = "auto", columns: Mapping[str, str] | None = None,
                keep_columns: Sequence[str] = DESCRIPTIVE, on_error: str = "raise", progress: bool | None = None,
                **ray_options: Any) -> Any:
    """Run `model` over every row of a Ray Dataset with `concurrency` replicas; returns the output Dataset.

    Each replica reserves `num_cpus` (and `resources`) and computes on that many threads; the
    .xmodel goes to the object store once and every replica loads it from there. `progress`
    turns Ray Data's progress bars on or off (None: leave Ray's setting). Other keyword
    arguments go to `Dataset.map_batches`.
    """
    ray = require_ray()
    import ray.data
    if not isinstance(batch_size, int) or batch_size < 1:
        raise RunnerError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if isinstance(concurrency, tuple):
        if len(concurrency) != 2 or not all(isinstance(c, int) and c >= 1 for c in concurrency):
            raise RunnerError(f"concurrency must be an int >= 1 or (min, max), got {concurrency!r}")
        compute = ray.data.ActorPoolStrategy(min_size=concurrency[0], max_size=concurrency[1])
    elif isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency >= 1:
        compute = ray.data.ActorPoolStrategy(size=concurrency)
    else:
        raise RunnerError(f"concurrency must be an int >= 1 or (min, max), got {concurrency!r}")
    if not isinstance(dataset, ray.data.Dataset):
        raise RunnerError(f"map_batches needs a Ray Dataset (ray.data.read_binary_files, from_numpy, ...), "
                          f"got {type(dataset).__name__}")
    connect()
    _warn_if_no_cpu_left(concurrency, num_cpus)
    if progress is not None:
        ray.data.DataContext.get_current().enable_progress_bars = bool(progress)
    import xgraph
    data = model_bytes(model)
    check_replica(model if isinstance(model, xgraph.Graph) else xgraph.load(data), dict(columns or {}), on_error)
    kwargs = {"model": ray.put(data), "mode": mode, "kernels": kernels, "columns": dict(columns or {}),
              "keep_columns": tuple(keep_columns), "on_error": on_error, "threads": int(num_cpus) or None}
    return dataset.map_batches(ModelReplica, fn_constructor_kwargs=kwargs, batch_size=batch_size, compute=compute,
                               num_cpus=num_cpus, resources=dict(resources) if resources else None,
                               batch_format="numpy", **ray_options)
