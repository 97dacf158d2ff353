"""StageWorker: the Ray actor that owns one device's subgraph runners and runs its stages of each job.

It receives the compiled model once, as .xmodel bytes from the object store, when it starts
(and again when the graph runner restarts it), so no job carries the graph. Each call runs one
stage of one job: its copies and subgraphs in plan order, values passed by tensor name. A
failing task raises an error naming the subgraph, device and node; the actor itself stays up
and serves the next job, as a local runner does.

The class is plain Python; the graph runner makes it a Ray actor with `ray.remote`, so this
module imports without Ray and its logic can be read (and called) as ordinary code.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Any, Callable, Sequence

import numpy as np

from xgraph.errors import RunnerError, XGraphError
from xgraph.ray.stages import Stage, StageTask


def _copy_value(value):
    """A host<->device copy of a tensor, of each tensor of a sequence (list), or None (an empty optional)."""
    if isinstance(value, list):
        return [_copy_value(v) for v in value]
    return None if value is None else np.copy(value)


def nbytes(value) -> int:
    """Bytes of a tensor or of a sequence of tensors (0 for None)."""
    if isinstance(value, list):
        return sum(nbytes(v) for v in value)
    return int(getattr(value, "nbytes", 0))


def _where_am_i() -> dict[str, Any]:
    """This process's Ray node id and address, pid and host name (for placement reports and errors)."""
    import ray
    context = ray.get_runtime_context()
    return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(),
            "actor_id": context.get_actor_id(),
            "pid": os.getpid(), "host": socket.gethostname()}


def _same_type_error(error: BaseException, message: str) -> BaseException:
    """`message` as an error of `error`'s XGraphError class when it can take a message, else a RunnerError."""
    if isinstance(error, XGraphError):
        try:
            return type(error)(message)
        except TypeError:
            pass
    return RunnerError(message)


class StageWorker:
    """Runs the stages of one actor (one device, or one subgraph) for every job."""

    def __init__(self, model: bytes, actor: str, device: str, stages: Sequence[Stage], mode: str, kernels: str,
                 setup: Callable[[], Any] | None = None, threads: int = 0) -> None:
        """Load the model, create a runner for each subgraph this actor runs; failures name the actor.

        `threads` (the CPUs the actor reserved) caps the intra-op threads of its kernels, unless
        XGRAPH_INTRA_OP_THREADS says otherwise: an actor computes on what it holds.
        """
        import xgraph
        from xgraph.runners.runner import Runner
        if threads >= 1:
            os.environ.setdefault("XGRAPH_INTRA_OP_THREADS", str(threads))  # read when the first kernel runs
        self.actor, self.device = actor, device
        self.place = _where_am_i()
        self._node = f"Ray node {self.place['node_ip']} ({self.place['node_id'][:8]}), actor pid {self.place['pid']}"
        if setup is not None:
            setup()
        graph = xgraph.load(model)
        self.stages = {s.index: s for s in stages}
        self.runners: dict[str, Runner] = {}
        self.devices: dict[str, str] = {}
        try:
            for stage in stages:
                for task in stage.subgraphs:
                    subgraph = graph.get_subgraph(task)
                    self.devices[task] = str(subgraph.get_attr("device"))
                    self.runners[task] = Runner.create_runner(subgraph, mode, kernels)
        except XGraphError as e:
            self.close()
            raise _same_type_error(e, f"{self._node}: {e}") from e
        # per subgraph task: the runner's own input/output order, by tensor name
        self._orders = {}
        for stage in stages:
            for task in stage.tasks:
                if task.kind == "subgraph":
                    runner = self.runners[task.name]
                    by_name_in = {k[0]: k for k in task.inputs}
                    by_name_out = {k[0]: k for k in task.outputs}
                    self._orders[task.index] = ([by_name_in[t.name] for t in runner.get_input_tensors()],
                                                [by_name_out[t.name] for t in runner.get_output_tensors()])

    def ready(self) -> dict[str, Any]:
        """Where this actor runs and which xgraph it imported (the driver checks the versions match)."""
        import xgraph
        return {**self.place, "xgraph": xgraph.__version__, "xgraph_path": os.path.dirname(xgraph.__file__),
                "subgraphs": sorted(self.runners)}

    def run_stage(self, index: int, job_id: int, *args: Any) -> tuple:
        """Run stage `index` of job `job_id` on `args` (its inputs); returns its outputs, then a receipt.

        The receipt carries, per task, wall-clock start and end and the bytes read and made,
        and the bytes of each output: the driver's stats and trace come from it.
        """
        stage = self.stages[index]
        values = dict(zip(stage.inputs, args))
        spans = []
        for task in stage.tasks:
            start = time.time()
            try:
                outs = self._run_task(task, values)
            except Exception as e:
                raise self._task_error(task, job_id, e) from e
            end = time.time()
            spans.append((task.index, start, end, sum(nbytes(values[k]) for k in task.inputs),
                          sum(nbytes(o) for o in outs)))
            values.update(zip(task.outputs if task.kind == "copy" else self._orders[task.index][1], outs))
        outputs = [values[k] for k in stage.outputs]
        receipt = {"spans": spans, "out_bytes": [nbytes(v) for v in outputs], "pid": self.place["pid"]}
        return (*outputs, receipt) if outputs else receipt

    def _run_task(self, task: StageTask, values: dict) -> list:
        if task.kind == "copy":
            return [_copy_value(values[task.inputs[0]])]
        inputs, _ = self._orders[task.index]
        return self.runners[task.name].timed_execute([values[k] for k in inputs])

    def _task_error(self, task: StageTask, job_id: int, error: Exception) -> BaseException:
        what = (f"subgraph {task.name!r} on {self.devices.get(task.name, self.device)}" if task.kind == "subgraph"
                else f"{task.name} on {self.device}")
        if str(error).startswith(what):  # the runner's own message already names subgraph and device
            message = f"job {job_id}: {error} ({self._node}; {type(error).__name__})"
        else:
            message = f"job {job_id}: {what} ({self._node}) failed: {type(error).__name__}: {error}"
        failure = _same_type_error(error, message)
        failure.subgraph = task.name if task.kind == "subgraph" else None  # travels with the pickled error
        return failure

    def stats(self) -> dict[str, dict]:
        """Each subgraph runner's own stats, as this actor process sees them."""
        return {name: r.get_stats() for name, r in self.runners.items()}

    def close(self) -> None:
        """Close every subgraph runner (the graph runner calls this before killing the actor)."""
        for runner in getattr(self, "runners", {}).values():
            runner.close()
