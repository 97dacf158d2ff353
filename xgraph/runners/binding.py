"""Where a run's inputs come from and where its outputs stay: the graph runner's plan per binding.

The graph runner's plan (`build_plan`) assumes graph inputs arrive in host memory and graph
outputs leave from it. A run given `DeviceValue`s as inputs, or asked to keep outputs on the
device (`keep_on_device`), takes another way through the same subgraphs: the inputs start in
the memory their handles live in, the kept outputs stay in the memory their subgraph wrote,
and only the copies that way still needs are made. `Bindings` builds that plan once per
combination (which inputs are handles, in which memory; which outputs are kept) and reuses it:
a decoding loop has one, the same every step.

    bindings = Bindings(owner, base_plan, build, input_names, output_names, memory, schedule_for, count_copy)
    arrays, binding, fed = bindings.bind(feeds, keep_on_device)   # handles unwrapped, checked
    results = ... run binding.plan (binding.schedule on the caller's thread) ...
    saved_bytes = fed + keep_as_handles(results, binding.handles)  # kept outputs as DeviceValues

A handle knows the output it was kept from (`KeptOutput`, one per output and memory of a
runner), so a run fed handles finds its binding by which of those it has, per input: the
binding is made, and the handles found to live in this runner's memory, once.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Collection, Mapping, Sequence

from xgraph.errors import RunnerError
from xgraph.devices.instances import HOST
from xgraph.runners.device_values import DeviceMemory, DeviceValue, KeptOutput, unwrap
from xgraph.runners.io_checks import picker
from xgraph.runners.jobs import nbytes_of

if TYPE_CHECKING:
    from xgraph.runners.inline import InlineSchedule
    from xgraph.runners.scheduler import TaskPlan

_NOTHING: frozenset = frozenset()

#: bindings remembered per runner (a loop uses one; a cap keeps a caller that varies them bounded)
BINDINGS_KEPT = 64


def copy_count(plan: "TaskPlan") -> int:
    """Host<->device copy tasks in `plan` (one per value copied per run)."""
    return sum(1 for t in plan.tasks if t.kind == "copy")


class Binding:
    """One combination of handle inputs and kept outputs: its plan and what it saves per run."""

    __slots__ = ("plan", "schedule", "kept", "saved", "check", "handles", "_fed_at")

    def __init__(self, plan: "TaskPlan", schedule: "InlineSchedule | None", kept: Collection[str], saved: int,
                 home: "Callable[[str, str], KeptOutput]", fed_at: "tuple[int, ...]" = (),
                 check: "Callable[[dict | Sequence], list] | None" = None) -> None:
        """`home(name, memory)`: the `KeptOutput` of a kept output; `fed_at`: the inputs fed as handles
        in device memory (their bytes are not copied); `check`: the input check of its runs."""
        self.plan, self.schedule, self.saved, self.check = plan, schedule, saved, check
        #: (result index, output name, memory) of each kept output
        self.kept = tuple((i, name, memory) for i, (name, memory) in enumerate(plan.results) if name in kept)
        #: (result index, its KeptOutput, whether it stays in device memory) of each kept output: a run's
        #: results become handles with `device_values.keep_as_handles(results, handles)`
        self.handles = tuple((i, home(name, memory), memory != HOST) for i, name, memory in self.kept)
        #: picks the handles fed in device memory from a run's inputs, in one C call
        self._fed_at = picker(fed_at) if fed_at else None


class Bindings:
    """A graph runner's plans per binding, built on first use (`bind`)."""

    def __init__(self, owner: str, base: "TaskPlan", build: "Callable[[Mapping[str, str], Collection[str]], TaskPlan]",
                 input_names: Sequence[str], output_names: Sequence[str], device_memory: DeviceMemory,
                 schedule_for: "Callable[[TaskPlan], InlineSchedule | None]",
                 count_copy: "Callable[[int, float], None]",
                 check_for: "Callable[[tuple], Callable[[dict | Sequence], list]]") -> None:
        """`build(input memory by name, kept output names)`: the plan for a binding (`build_plan`);
        `schedule_for(plan)`: its schedule on the caller's thread, or None when it has none;
        `count_copy(nbytes, seconds)`: counts a handle's copy to the host in the runner's stats;
        `check_for(homes)`: the input check of runs fed handles kept from `homes` (see `binding`)."""
        self.owner, self.base, self.build, self.schedule_for = owner, base, build, schedule_for
        self.count_copy, self.check_for = count_copy, check_for
        #: (output name, memory) -> the KeptOutput every handle of that output kept there has
        self._homes: dict[tuple[str, str], KeptOutput] = {}
        self.input_names, self.output_names = tuple(input_names), tuple(output_names)
        #: feeds of exactly these names are read in input order in C (none when two inputs share a name)
        self._name_set = frozenset(self.input_names) if len(set(self.input_names)) == len(self.input_names) \
            else None
        self.device_memory = device_memory
        self._base_copies = copy_count(base)
        self._found: dict[tuple, Binding] = {}
        self._kept_sets: dict[tuple, frozenset] = {}  # keep_on_device given as a list or tuple -> checked set

    def bind(self, feeds: "dict | Sequence", keep_on_device: "Collection[str] | None"
             ) -> "tuple[dict | list, Binding, int]":
        """The feeds with every DeviceValue replaced by its array (checked to live in this runner's
        open memory), the binding for them and `keep_on_device`, and the bytes of the handles fed
        in device memory. Feeds of exactly the inputs (a dict of their names, a list of as many
        values) come back as a list in input order, which the input check reads as it is."""
        if type(keep_on_device) is list:
            try:
                kept = self._kept_sets[tuple(keep_on_device)]  # a loop's list, checked on its first step
            except (KeyError, TypeError):  # not seen before, or an unhashable name (which the check names)
                kept = self._kept(keep_on_device)
        else:
            kept = self._kept(keep_on_device)
        kind = type(feeds)
        if kind is dict and feeds.keys() == self._name_set:  # exactly the inputs: a list in input order
            values = list(map(feeds.__getitem__, self.input_names))
        elif (kind is list or kind is tuple) and len(feeds) == len(self.input_names):
            values = list(feeds)
        else:
            return self._bind_each(feeds, kept)
        homes = unwrap(values)
        if homes is None:
            return values, self._found.get(((), kept)) or self.binding((), kept), 0
        if self.device_memory.closed:  # refused as the first handle's own use would be
            first = next(i for i, home in enumerate(homes) if home is not None)
            self.device_memory.check(homes[first], f"input {self.input_names[first]!r}")
        homes = tuple(homes)
        binding = self._found.get((homes, kept)) or self.binding(homes, kept)
        fed_at = binding._fed_at
        return values, binding, 0 if fed_at is None else nbytes_of(fed_at(values))

    def _bind_each(self, feeds: "dict | Sequence", kept: frozenset) -> "tuple[dict | list, Binding, int]":
        """`bind` value by value, for feeds that are not exactly the inputs (the input check names why)."""
        if type(feeds) is dict:
            pairs = feeds.items()
        elif isinstance(feeds, (list, tuple)):
            pairs = zip(self.input_names, feeds)
        else:
            return feeds, self.binding((), kept), 0  # the input check names what is wrong with them
        arrays: dict = {}
        homes = {}
        fed = 0
        for name, value in pairs:
            if type(value) is DeviceValue:
                array, homes[name] = value.unwrap_in(self.device_memory, name)
                if value.memory != HOST:
                    fed += array.nbytes
                value = array
            arrays[name] = value
        if type(feeds) is not dict:
            arrays = list(arrays.values()) + list(feeds[len(arrays):])  # too many values: the check says so
        # handles fed under names that are no input are not placed: the input check refuses those feeds
        return arrays, self.binding(tuple(map(homes.get, self.input_names)) if homes else (), kept), fed

    def binding(self, homes: tuple, kept: frozenset) -> Binding:
        """The binding with the inputs given as handles kept from `homes` (per input in input order, the
        `KeptOutput` of its handle or None for an array; () for no handle) and outputs `kept` (made on
        first use, once every handle is found to live in this runner's memory: a binding is never made
        for another runner's handles, so finding one is that check)."""
        key = (homes, kept)
        found = self._found.get(key)
        if found is None:
            placed = {}
            for name, home in zip(self.input_names, homes):
                if home is not None:
                    if home.device_memory is not self.device_memory:
                        self.device_memory.check(home, f"input {name!r}")
                    placed[name] = home.memory
            plan = self.build(placed, kept)
            missing = set(plan.streams()) - set(self.base.streams())
            if missing:
                raise RunnerError(f"{self.owner}: these device inputs would need a copy on stream "
                                  f"{', '.join(sorted(missing))}, which this runner does not have; feed them "
                                  f"as arrays (.numpy())")
            saved = max(0, self._base_copies - copy_count(plan))
            fed_at = tuple(i for i, home in enumerate(homes) if home is not None and home.memory != HOST)
            found = Binding(plan, self.schedule_for(plan), kept, saved, self._home, fed_at, self.check_for(homes))
            if len(self._found) >= BINDINGS_KEPT:
                self._found.clear()
            self._found[key] = found
        return found

    def _home(self, name: str, memory: str) -> KeptOutput:
        """The KeptOutput of output `name` kept in `memory` (one per pair: every binding's handles share it)."""
        home = self._homes.get((name, memory))
        if home is None:
            home = self._homes[(name, memory)] = KeptOutput(name, memory, self.device_memory, self.count_copy)
        return home

    def _kept(self, keep_on_device: "Collection[str] | None") -> frozenset:
        """`keep_on_device` as a set of output names, checked (a loop's list: one lookup after the first step)."""
        if keep_on_device is None:
            return _NOTHING
        kind = type(keep_on_device)
        if kind is list or kind is tuple:
            key = tuple(keep_on_device)
            try:
                found = self._kept_sets.get(key)
            except TypeError:  # an unhashable name: the check says what is wrong
                return self._checked(keep_on_device)
            if found is None:
                found = self._checked(keep_on_device)
                if len(self._kept_sets) >= BINDINGS_KEPT:
                    self._kept_sets.clear()
                self._kept_sets[key] = found
            return found
        return self._checked(keep_on_device)

    def _checked(self, keep_on_device: "Collection[str]") -> frozenset:
        if isinstance(keep_on_device, str) or not isinstance(keep_on_device, Collection):
            raise RunnerError(f"{self.owner}: keep_on_device must be a list of output names, got "
                              f"{keep_on_device!r}; the outputs are: {', '.join(self.output_names)}")
        unknown = [n for n in keep_on_device if n not in self.output_names]
        if unknown:
            raise RunnerError(f"{self.owner}: keep_on_device names {unknown[0]!r}, which is not an output; "
                              f"the outputs are: {', '.join(self.output_names)}")
        return frozenset(keep_on_device)


__all__ = ["BINDINGS_KEPT", "Binding", "Bindings", "copy_count"]
