"""The Ray actors of one graph runner: starting them, noticing one died, restarting it or giving up.

Each actor (one per device, or per subgraph) is a StageWorker placed by its resource demand.
xgraph restarts actors itself instead of Ray's `max_restarts`, for two reasons: a restart must
first check that some live node still offers the device's resources (Ray would wait forever
for a node that is gone), and the jobs the dead actor held must fail with an error naming it,
not be retried behind the caller's back.

States of an actor slot: "starting" (created, not yet answered `ready`), "ready", "lost" (no
node can host it; re-checked at most every LOST_RECHECK_S when a job needs it), "closed".
Jobs submitted while an actor is starting queue in Ray and run once it is up.
"""
from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from xgraph.errors import RunnerError
from xgraph.ray.errors import DeviceUnavailableError
from xgraph.ray.session import actor_options, alive_nodes, describe_node, require_ray, unmet
from xgraph.ray.stages import Stage
from xgraph.ray.worker import StageWorker

#: Seconds between two checks whether a lost device's resources came back.
LOST_RECHECK_S = 1.0


@dataclass
class ActorSpec:
    """What one actor runs and where it may run."""

    key: str                    # the device (group_by="device") or the subgraph name
    device: str
    subgraphs: list[str]
    demand: dict[str, float]
    stages: list[Stage] = field(default_factory=list)


@dataclass
class ActorSlot:
    """One actor's current Ray handle, its generation (restarts so far) and where it runs."""

    spec: ActorSpec
    handle: Any = None
    generation: int = 0
    state: str = "starting"
    info: dict = field(default_factory=dict)   # StageWorker.ready(): node, pid, xgraph path
    reason: str = ""                           # why it is lost (cannot be restarted)
    died_because: str = ""                     # what Ray said when it last died
    retry: bool = False                        # lost for want of resources: restart once a node offers them
    restarts: int = 0
    deadline: float = 0.0                      # when a starting actor counts as failed to start
    checked: float = 0.0                       # last time a lost device's resources were checked

    @property
    def who(self) -> str:
        """'actor AICORE (subgraphs a, b)' for messages."""
        return f"the Ray actor for {self.spec.key} (subgraph{'s' if len(self.spec.subgraphs) > 1 else ''} " \
               f"{', '.join(repr(s) for s in self.spec.subgraphs)} on {self.spec.device})"

    def where(self) -> str:
        """'node 10.0.0.5 (3f2a1b9c), pid 123' or 'not started' for messages."""
        if not self.info:
            return "before it reported its node"
        return f"{describe_node(self.info['node_id'], self.info['node_ip'])}, pid {self.info['pid']}"


def death_reason(error: BaseException) -> str:
    """The part of a Ray actor error that says why the actor died (Ray's message has many lines)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if getattr(error, "actor_init_failed", False) and lines:  # the last line is the constructor's own error
        return lines[-1][:500]
    for i, line in enumerate(lines):
        if "because" in line:
            detail = lines[i + 1] if i + 1 < len(lines) and ":" in lines[i + 1] and "_" not in \
                lines[i + 1].split(":")[0] else ""
            reason = re.sub(r"\s*Node Id: [0-9a-f]+\.?", "", f"{line} {detail}".strip())  # errors name the node
            return reason.split(" Some common causes")[0][:300]
    return (lines[-1] if lines else type(error).__name__)[:300]


class ActorSet:
    """Starts, tracks and restarts the actors; `post(event)` feeds the owner's event loop."""

    def __init__(self, specs: list[ActorSpec], model_ref: Any, mode: str, kernels: str, *, owner: str,
                 start_timeout: float, runtime_env: dict | None, setup: Callable | None,
                 post: Callable[[tuple], None]) -> None:
        """Remember how to make each actor; `start()` makes them."""
        self.ray = require_ray()
        self._worker_class = self.ray.remote(StageWorker)
        self.slots = {s.key: ActorSlot(s) for s in specs}
        self._model_ref, self._mode, self._kernels = model_ref, mode, kernels
        self._owner, self._start_timeout = owner, start_timeout
        self._runtime_env, self._setup, self._post = runtime_env, setup, post
        self._lock = threading.RLock()
        self._actor_ids: dict[str, tuple[ActorSlot, int]] = {}  # every actor that reported ready

    # -- starting -------------------------------------------------------------------------------
    def _create(self, slot: ActorSlot) -> None:
        spec = slot.spec
        options = {**actor_options(spec.demand), "max_restarts": 0, "max_task_retries": 0}
        if self._runtime_env:
            options["runtime_env"] = self._runtime_env
        slot.handle = self._worker_class.options(**options).remote(
            self._model_ref, spec.key, spec.device, spec.stages, self._mode, self._kernels, self._setup,
            threads=int(spec.demand.get("CPU", 0)))
        slot.state, slot.info, slot.reason = "starting", {}, ""
        slot.deadline = time.monotonic() + self._start_timeout

    def start(self) -> None:
        """Create every actor and wait (up to start_timeout) until each reports where it runs."""
        ray = self.ray
        try:
            for slot in self.slots.values():
                missing = unmet(slot.spec.demand, slot.spec.key)
                if missing:
                    raise DeviceUnavailableError(f"{self._owner}: {slot.who} cannot start: {missing}")
                self._create(slot)
            pending = {slot.handle.ready.remote(): slot for slot in self.slots.values()}
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=self._start_timeout)
            for ref, slot in pending.items():
                if ref not in ready:
                    raise RunnerError(f"{self._owner}: {slot.who} did not start within {self._start_timeout} s "
                                      f"(Ray could not place it or load the model there); raise start_timeout or "
                                      f"check the cluster with `ray status`")
                self._ready(slot, self._get(ref, slot, "start"))
        except BaseException:
            self.close()
            raise

    def _get(self, ref: Any, slot: ActorSlot, doing: str) -> dict:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            raise RunnerError(f"{self._owner}: {slot.who} could not {doing}: {death_reason(e)}") from e

    def _ready(self, slot: ActorSlot, info: dict) -> None:
        import xgraph
        if info.get("xgraph") != xgraph.__version__:
            raise RunnerError(f"{self._owner}: {slot.who} on {describe_node(info['node_id'], info['node_ip'])} "
                              f"imports xgraph {info.get('xgraph')} from {info.get('xgraph_path')}, but this "
                              f"program runs xgraph {xgraph.__version__}; install the same xgraph on every node")
        slot.info, slot.state = info, "ready"
        self._actor_ids[info["actor_id"]] = (slot, slot.generation)

    # -- jobs -----------------------------------------------------------------------------------
    def target(self, key: str) -> tuple[Any, int, ActorSlot]:
        """(handle, generation, slot) to send a job's stage to; DeviceUnavailableError when the device is lost."""
        with self._lock:
            slot = self.slots[key]
            if slot.state == "lost":
                now = time.monotonic()
                if slot.retry and now - slot.checked >= LOST_RECHECK_S:
                    slot.checked = now
                    if not unmet(slot.spec.demand, slot.spec.key):
                        self._restart(slot)
                if slot.state == "lost":
                    raise DeviceUnavailableError(f"{self._owner}: {slot.who} is unavailable: it died "
                                                 f"({slot.died_because}) and cannot be restarted: {slot.reason}")
            if slot.state == "closed":
                raise RunnerError(f"{self._owner}: the runner is closed; create a new one")
            return slot.handle, slot.generation, slot

    def _restart(self, slot: ActorSlot) -> None:
        """A fresh actor for `slot` (it reloads the model); readiness arrives as a ("ready", ...) event."""
        slot.generation += 1
        slot.restarts += 1
        self._create(slot)
        ref = slot.handle.ready.remote()
        generation = slot.generation
        ref.future().add_done_callback(lambda f: self._post(("ready", slot, generation, f)))

    def died(self, slot: ActorSlot, generation: int, error: BaseException) -> str:
        """Record that generation `generation` of `slot` died; restart it if a node can host it.

        Returns what happens next, for the failed jobs' messages. Only the first report of a
        generation acts; later ones (other jobs it held) get the same answer. When the actor's
        node is gone, the other actors that ran there are replaced too, before a job finds
        them dead.
        """
        with self._lock:
            if generation != slot.generation or slot.state in ("lost", "closed"):
                return self._next_step(slot)
            node = slot.info.get("node_id")
            self._replace(slot, death_reason(error))
            if node and node not in {n["NodeID"] for n in alive_nodes()}:
                for other in self.slots.values():
                    if other is not slot and other.state == "ready" and other.info.get("node_id") == node:
                        self._replace(other, f"its node {node[:8]} died")
            return self._next_step(slot)

    def _replace(self, slot: ActorSlot, reason: str) -> None:
        """Kill what is left of `slot`'s actor and restart it, or mark it lost saying why."""
        never_started = slot.state == "starting"
        self._kill(slot)
        missing = unmet(slot.spec.demand, slot.spec.key)
        slot.died_because = reason
        if never_started:  # restarting again would likely fail the same way: stop here
            self._lose(slot, "its restart died before it was ready", retry=False)
        elif missing:
            self._lose(slot, missing, retry=True)
        else:
            self._restart(slot)

    def _lose(self, slot: ActorSlot, reason: str, retry: bool) -> None:
        """Give `slot` up (its jobs fail at once), saying why; `retry`: try again when resources return."""
        self._kill(slot)
        slot.state, slot.reason, slot.retry, slot.checked = "lost", reason, retry, time.monotonic()

    @staticmethod
    def _next_step(slot: ActorSlot) -> str:
        if slot.state == "lost":
            return f"it cannot be restarted: {slot.reason}"
        if slot.state == "closed":
            return "the runner was closed"
        return "the runner restarted it (the model is reloaded) for later jobs"

    def on_ready(self, slot: ActorSlot, generation: int, future) -> None:
        """A restarted actor answered `ready` (or failed to start): record where it runs, or lose it."""
        with self._lock:
            if generation != slot.generation or slot.state != "starting":
                return
            try:
                self._ready(slot, future.result())
            except (RunnerError, self.ray.exceptions.RayError) as e:
                self._lose(slot, f"its restart failed: {death_reason(e)}", retry=False)

    def poll(self) -> None:
        """Give up on restarted actors that did not come up within start_timeout (their queued jobs fail)."""
        now = time.monotonic()
        with self._lock:
            for slot in self.slots.values():
                if slot.state == "starting" and slot.generation > 0 and now > slot.deadline:
                    missing = unmet(slot.spec.demand, slot.spec.key)
                    self._lose(slot, f"its restart did not finish within {self._start_timeout} s"
                               + (f": {missing}" if missing else ""), retry=bool(missing))

    def owner_of(self, actor_id: str | None) -> tuple[ActorSlot, int] | None:
        """(slot, generation) of the actor with Ray actor id `actor_id` (hex), if it ever reported ready."""
        return self._actor_ids.get(actor_id) if actor_id else None

    # -- lifetime -------------------------------------------------------------------------------
    def _kill(self, slot: ActorSlot) -> None:
        if slot.handle is not None:
            try:
                self.ray.kill(slot.handle, no_restart=True)
            except (ValueError, self.ray.exceptions.RayError):
                pass  # already gone: nothing left to release
            slot.handle = None

    def close(self) -> None:
        """Kill every actor (jobs still queued on them fail; the owner has cancelled them)."""
        with self._lock:
            for slot in self.slots.values():
                self._kill(slot)
                slot.state = "closed"

    def describe(self) -> dict[str, dict]:
        """Per actor: device, subgraphs, state, node, pid, restarts, resources, the xgraph it imported."""
        with self._lock:
            return {key: {"device": s.spec.device, "subgraphs": list(s.spec.subgraphs), "state": s.state,
                          "node_id": s.info.get("node_id"), "node_ip": s.info.get("node_ip"),
                          "pid": s.info.get("pid"), "actor_id": s.info.get("actor_id"),
                          "restarts": s.restarts, "resources": dict(s.spec.demand),
                          "xgraph_path": s.info.get("xgraph_path"), "reason": s.reason}
                    for key, s in self.slots.items()}
