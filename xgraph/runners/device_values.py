"""Values kept in device memory between runs: `DeviceValue` handles and the memory they live in.

A graph runner returns graph inputs from and takes graph outputs to host memory, so a value that
goes from one run straight into the next (a decoder's present key/values, fed back as the next
step's pasts) would be copied device -> host and host -> device every step. Naming it in
`keep_on_device` leaves it where its subgraph made it: the run returns a `DeviceValue`, and a run
of the same runner that is given that handle as an input reads it in place. As onnxruntime's
OrtValue on a device, the handle says its shape and dtype, never turns into an array behind the
caller's back (`np.asarray(handle)` raises) and is copied to the host only by `.numpy()`, which
counts in the runner's copies.

A handle is valid in the `DeviceMemory` of the runner that made it (a model's gear runners share
one) while that memory is open: closing the runner frees it, and any later use of the handle,
or its use by another runner, raises a RunnerError.

    runner = xgraph.create_graph_runner(compiled)
    logits, present = runner.run({"x": x, "past": past}, keep_on_device=["present"])
    logits, present = runner.run({"x": x, "past": present}, keep_on_device=["present"])  # no cache copies
    host = present.numpy()   # one device -> host copy, counted in runner.get_stats()["copies"]
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np

from xgraph.devices.instances import HOST
from xgraph.errors import RunnerError

_new = object.__new__


class DeviceMemory:
    """The memory of one runner (or of the gear runners of one model) that its `DeviceValue`s live in."""

    __slots__ = ("owner", "closed")

    def __init__(self, owner: str) -> None:
        """`owner`: the runner, as errors name it."""
        self.owner = owner
        self.closed = False

    def close(self) -> None:
        """Free the memory: every handle in it is refused from now on."""
        self.closed = True

    def check(self, value: "DeviceValue | KeptOutput", use: str) -> None:
        """RunnerError unless `value` (a handle, or the output its handles are kept from) lives in this
        memory and it is open; `use` says what was asked."""
        if value.device_memory is not self:
            raise RunnerError(f"{self.owner}: {use}: DeviceValue {value.name!r} belongs to another runner "
                              f"({value.device_memory.owner}); a value kept on the device is valid only in the "
                              f"runner that made it: pass a host copy (.numpy()) instead")
        if self.closed:
            raise RunnerError(f"{self.owner}: {use}: DeviceValue {value.name!r} was freed when its runner closed; "
                              f"copy values to the host with .numpy() before closing the runner")


class KeptOutput:
    """Where the handles of one output kept on the device come from and live: the output's name, the
    memory domain it stays in ("host", "device", "device:1": `xgraph.devices.instances`), the
    `DeviceMemory` of its runner and `count_copy(nbytes, seconds)`, which records a copy to the host
    in that runner's stats. One per output and memory domain of a runner, shared by that output's
    handles of every run: a run fed handles knows where they live by which of these they have."""

    __slots__ = ("name", "memory", "device_memory", "count_copy")

    def __init__(self, name: str, memory: str, device_memory: DeviceMemory,
                 count_copy: "Callable[[int, float], None]") -> None:
        self.name, self.memory, self.device_memory, self.count_copy = name, memory, device_memory, count_copy


class DeviceValue:
    """A graph output left in a runner's memory (`run(..., keep_on_device=[name])`), fed to later runs as is."""

    __slots__ = ("_array", "_kept")

    def __init__(self, array: np.ndarray, kept: KeptOutput) -> None:
        """`array`: the value (never handed out); `kept`: the output it was kept from, and where."""
        self._array, self._kept = array, kept

    @property
    def name(self) -> str:
        """The graph output it was kept from."""
        return self._kept.name

    @property
    def memory(self) -> str:
        """The memory domain it lives in ("host", "device", "device:1": `xgraph.devices.instances`)."""
        return self._kept.memory

    @property
    def device_memory(self) -> DeviceMemory:
        """The memory of the runner that made it (a model's gear runners share one)."""
        return self._kept.device_memory

    @property
    def shape(self) -> tuple[int, ...]:
        """The value's shape."""
        return self._array.shape

    @property
    def dtype(self) -> np.dtype:
        """The value's element type."""
        return self._array.dtype

    @property
    def nbytes(self) -> int:
        """The bytes it takes in its memory."""
        return self._array.nbytes

    def numpy(self) -> np.ndarray:
        """A copy in host memory (counted in the making runner's copies when it lives in device memory)."""
        self.device_memory.check(self, ".numpy()")
        start = time.perf_counter()
        array = self._array.copy()
        if self.memory != HOST:
            self._kept.count_copy(array.nbytes, time.perf_counter() - start)
        return array

    def unwrap_in(self, device_memory: DeviceMemory, input_name: str) -> "tuple[np.ndarray, KeptOutput]":
        """The value itself and the output it was kept from, fed as input `input_name` of a run in
        `device_memory` (RunnerError when it lives elsewhere or was freed)."""
        if self.device_memory is not device_memory or device_memory.closed:  # the check, named only on failure
            device_memory.check(self, f"input {input_name!r}")
        return self._array, self._kept

    def __array__(self, *args, **kwargs):
        raise RunnerError(f"DeviceValue {self.name!r} lives in {self.memory} memory of {self.device_memory.owner}; "
                          f"it is never copied implicitly: call .numpy() for a host copy, or feed it to that runner")

    def __repr__(self) -> str:
        return (f"DeviceValue({self.name!r}, shape={self.shape}, dtype={self.dtype}, memory={self.memory!r}"
                f"{', freed' if self.device_memory.closed else ''})")


def unwrap(values: list) -> "list[KeptOutput | None] | None":
    """Replace each DeviceValue among `values` by its array, in place, and say per value the output its
    handle was kept from (None for the others); None when there was no handle. Where they may be read
    is the caller's to check (`DeviceMemory.check` on those outputs): a decoding step unwraps one
    handle per cache tensor, and checks the outputs they were kept from once per binding."""
    homes = None
    for i, value in enumerate(values):
        if type(value) is DeviceValue:
            if homes is None:
                homes = [None] * len(values)
            homes[i] = value._kept
            values[i] = value._array
    return homes


def keep_as_handles(values: list, homes: "tuple[tuple[int, KeptOutput, bool], ...]") -> int:
    """Replace, in place, the value at each (index, the output it is kept as, whether that is device
    memory) of `homes` by its DeviceValue; the bytes of those in device memory. A decoding step keeps
    one handle per cache tensor: they are made here without a call each."""
    on_device = 0
    for i, kept, in_device_memory in homes:
        array = values[i]
        if in_device_memory:
            on_device += array.nbytes
        handle = _new(DeviceValue)
        handle._array, handle._kept = array, kept
        values[i] = handle
    return on_device


def has_device_values(values: "dict | list | tuple") -> bool:
    """True when a feed (a dict by name, or a list in input order) holds a DeviceValue."""
    if type(values) is dict:
        return DeviceValue in set(map(type, values.values()))
    return isinstance(values, (list, tuple)) and DeviceValue in set(map(type, values))


__all__ = ["DeviceMemory", "DeviceValue", "KeptOutput", "has_device_values", "keep_as_handles", "unwrap"]
