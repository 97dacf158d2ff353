"""Where a device subgraph runs and keeps its tensors: its instance, memory domain, stream and queues.

A device with several instances (`DeviceSpec.instances`: cards of one kind) runs a subgraph on
the instance its "instance" attr names (absent: 0; placement by cost sets it). The devices of
memory kind "device" on card i (AICORE:i, AICPU:i, DVPP:i; a plugin device with device memory
sits on card 0 unless its subgraph says otherwise) share card i's memory; card i's memory is
separate from card j's, and the host's is one for every host device. So a tensor is copied
whenever it crosses between two memory domains: host and a card (H2D, D2H) or two cards (D2D).

Memory domains are named "host" and, for the cards, "device" when the table has one card (as
before instances existed) or "device:0", "device:1", ... when it has several. Each instance of
a device is one stream (its own worker): "AICORE" for a device with one instance, "AICORE:0",
"AICORE:1", ... for one with several; `max_concurrency` queues serve that stream.

Both the runtime (`xgraph.runners.graph_runner.build_plan`) and the copy count of the report
(`xgraph.compiler.islands.count_copies`) read these functions, so what the report predicts is
what the runtime copies.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from xgraph.devices import DeviceSpec, memory_of
from xgraph.errors import GraphError

HOST = "host"


@dataclass(frozen=True)
class Residence:
    """Where one device subgraph runs: device, instance, stream (its worker), memory domain and queues."""

    device: str
    instance: int
    stream: str
    memory: str  # "host", "device" (one card) or "device:<card>"
    queues: int = 1


def instance_of(subgraph: Any) -> int:
    """The subgraph's "instance" attr (0 when absent); GraphError naming it when it is not an int >= 0."""
    if not subgraph.has_attr("instance"):
        return 0
    value = subgraph.get_attr("instance")
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 4096:
        raise GraphError(f"subgraph {subgraph.name!r}: its 'instance' attr {value!r:.40} is not an int from 0 to "
                         "4095; the compiled graph is damaged, compile the model again")
    return value


def card_count(subgraphs: Iterable[Any], devices: Mapping[str, DeviceSpec]) -> int:
    """How many cards hold device memory: the most instances a device-memory device has, or more when a
    device-memory subgraph names a higher instance."""
    cards = max((s.instances for s in devices.values() if s.memory == "device"), default=1)
    for sg in subgraphs:
        if memory_of(sg, devices) == "device":
            cards = max(cards, instance_of(sg) + 1)
    return cards


def residences(subgraphs: Iterable[Any], devices: Mapping[str, DeviceSpec]) -> dict[Any, Residence]:
    """subgraph -> its Residence, for the device subgraphs of one graph (the domain names depend on
    how many cards they use, so they are decided together)."""
    subgraphs = list(subgraphs)
    several = card_count(subgraphs, devices) > 1
    device_of = {sg: str(sg.get_attr("device")) if sg.has_attr("device") else "CPU" for sg in subgraphs}
    numbered = {name for name, spec in devices.items() if spec.instances > 1}
    numbered.update(device_of[sg] for sg in subgraphs if instance_of(sg))
    out = {}
    for sg in subgraphs:
        device, instance = device_of[sg], instance_of(sg)
        spec = devices.get(device)
        stream = f"{device}:{instance}" if device in numbered else device
        memory = HOST if memory_of(sg, devices) == HOST else f"device:{instance}" if several else "device"
        out[sg] = Residence(device, instance, stream, memory, spec.max_concurrency if spec is not None else 1)
    return out


def _card(memory: str) -> str:
    return memory.partition(":")[2]


def copy_direction(source: str, target: str) -> str:
    """"H2D", "D2H" or "D2D" for a copy between two different memory domains."""
    return "H2D" if source == HOST else "D2H" if target == HOST else "D2D"


def copy_stream(source: str, target: str) -> str:
    """The copy engine that moves a tensor from memory domain `source` to `target`: "H2D" / "D2H" with one
    card, "H2D:1" / "D2H:1" per card with several, "D2D:0>1" per ordered pair of cards."""
    direction = copy_direction(source, target)
    if direction == "D2D":
        return f"D2D:{_card(source)}>{_card(target)}"
    card = _card(target if direction == "H2D" else source)
    return f"{direction}:{card}" if card else direction


__all__ = ["HOST", "Residence", "card_count", "copy_direction", "copy_stream", "instance_of", "residences"]
