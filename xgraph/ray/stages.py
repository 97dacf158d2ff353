"""Cutting a graph runner's task plan into stages: the calls one job makes on each Ray actor.

The local scheduler runs every task (device subgraph, host<->device copy) on its stream. Over
Ray, every call to an actor costs a hop through the object store, so the tasks an actor runs
back to back become one call, a *stage*. Copies run in an actor too: a host-to-device copy on
the device that reads the value (the accelerator's DMA pulls it in), a device-to-host copy on
the device that made it; so the copies the local runner counts are the same ones here.

A task joins the last stage of its actor when everything it reads comes from that stage or
earlier ones; otherwise it opens a new stage. Stages are therefore in dependency order, each
reading only what earlier stages made. O(tasks + values).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Mapping

from xgraph.errors import RunnerError
from xgraph.runners.scheduler import Task, TaskPlan

Key = Hashable  # (tensor name, memory kind), as in the plan


@dataclass(frozen=True)
class StageTask:
    """One plan task as an actor runs it: what it is, what it reads and what it makes."""

    index: int            # the task's index in the plan
    kind: str             # "subgraph" | "copy"
    name: str             # subgraph name, or the copy's name ("copy x H2D")
    inputs: tuple[Key, ...]
    outputs: tuple[Key, ...]


@dataclass
class Stage:
    """The tasks one job runs in a row on one actor, with the values that cross its boundary."""

    index: int
    actor: str
    tasks: list[StageTask] = field(default_factory=list)
    inputs: tuple[Key, ...] = ()    # read here, made elsewhere (feeds or earlier stages)
    outputs: tuple[Key, ...] = ()   # made here, read by later stages or returned

    @property
    def subgraphs(self) -> list[str]:
        """Names of the device subgraphs this stage runs."""
        return [t.name for t in self.tasks if t.kind == "subgraph"]


def actor_of_tasks(plan: TaskPlan, actor_of_subgraph: Mapping[str, str]) -> list[str]:
    """The actor of every plan task: a subgraph's own; a copy's on the device side of the crossing."""
    producer = {k: t for t in plan.tasks for k in t.outputs}
    readers: dict[Key, list[Task]] = {}
    for t in plan.tasks:
        for k in t.inputs:
            readers.setdefault(k, []).append(t)
    actors: list[str] = [""] * len(plan.tasks)

    def subgraph_actor(task: Task) -> str:
        try:
            return actor_of_subgraph[task.name]
        except KeyError:
            raise RunnerError(f"subgraph {task.name!r} has no Ray actor; every device subgraph needs one") from None

    for t in plan.tasks:  # subgraphs first: copies are placed by them
        if t.kind == "subgraph":
            actors[t.index] = subgraph_actor(t)
    for t in plan.tasks:
        if t.kind == "subgraph":
            continue
        if t.stream == "H2D":
            side = [r for k in t.outputs for r in readers.get(k, []) if r.kind == "subgraph"]
        else:
            side = [producer[k] for k in t.inputs if k in producer]
        if not side:
            raise RunnerError(f"task {t.name!r} has no device subgraph on its device side, so no Ray actor "
                              f"can run it")
        actors[t.index] = actors[side[0].index] or subgraph_actor(side[0])
    return actors


def cut_stages(plan: TaskPlan, actor_of_subgraph: Mapping[str, str]) -> list[Stage]:
    """The plan's tasks grouped into stages (see the module docstring), in dependency order.

    >>> from xgraph.runners.scheduler import Task, TaskPlan
    >>> f = lambda args: args
    >>> tasks = [Task(0, "copy x H2D", "H2D", "copy", f, (("x", "host"),), (("x", "device"),)),
    ...          Task(1, "a", "AICORE", "subgraph", f, (("x", "device"),), (("y", "device"),)),
    ...          Task(2, "copy y D2H", "D2H", "copy", f, (("y", "device"),), (("y", "host"),))]
    >>> plan = TaskPlan(tasks, [("x", "host")], [("y", "host")]); plan.link()
    >>> [(s.actor, [t.name for t in s.tasks], s.inputs, s.outputs) for s in cut_stages(plan, {"a": "AICORE"})]
    [('AICORE', ['copy x H2D', 'a', 'copy y D2H'], (('x', 'host'),), (('y', 'host'),))]
    """
    actors = actor_of_tasks(plan, actor_of_subgraph)
    stages: list[Stage] = []
    last_of_actor: dict[str, Stage] = {}
    made_in: dict[Key, int] = {}   # value -> index of the stage that makes it
    for t in plan.tasks:
        actor = actors[t.index]
        after = max((made_in[k] for k in t.inputs if k in made_in), default=-1)
        stage = last_of_actor.get(actor)
        if stage is None or stage.index < after:
            stage = Stage(len(stages), actor)
            stages.append(stage)
            last_of_actor[actor] = stage
        stage.tasks.append(StageTask(t.index, t.kind, t.name, tuple(t.inputs), tuple(t.outputs)))
        for k in t.outputs:
            made_in[k] = stage.index
    _link(stages, plan)
    return stages


def _link(stages: list[Stage], plan: TaskPlan) -> None:
    """Fill each stage's inputs (made outside it) and outputs (read outside it, or results)."""
    made_in = {k: s.index for s in stages for t in s.tasks for k in t.outputs}
    read_elsewhere: set[Key] = set(plan.results)
    for s in stages:
        inputs: dict[Key, None] = {}
        for t in s.tasks:
            for k in t.inputs:
                if made_in.get(k) != s.index:
                    inputs[k] = None
                    read_elsewhere.add(k)
        s.inputs = tuple(inputs)
    for s in stages:
        s.outputs = tuple(dict.fromkeys(k for t in s.tasks for k in t.outputs
                                        if k in read_elsewhere))
