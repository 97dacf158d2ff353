"""One runner for every gear of a model whose gears are one onnxruntime session but for shapes.

The past-length gears of a KV-cache decoder are one graph specialised to G input shapes: each
gear is one device subgraph, and all of them run one shared onnxruntime session
(`ort_session.sessions_take_turns`). A decoding loop steps through a different gear every
token, and running each step through that gear's own GraphRunner touches a different set of
runner objects every time (job table, schedule, device runner, checks): with 50 gears that
cold state cost more per step than the dispatch code itself (a stubbed step measured 37-53 us
on one gear's runner and 63-108 us cycling through 50).

The shared runner (`serve_gears`) is one GraphRunner over gear 0's graph that runs every gear's `run`. Its
checks are every gear's own: the input check accepts exactly the gears' input signatures (any
other input goes through the gear `select_gear` picks, whose own checks convert or refuse it),
and the subgraph's results are checked against the tensors of the gear the inputs belong to
(`GearResults`). Its subgraph runner uses onnxruntime only (kernels="onnxruntime"): a run
onnxruntime fails raises instead of re-planning on numpy kernels for gear 0's shapes, and the
GearRunner then runs the gears on their own runners, which may fall back per gear.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from xgraph.runners.io_checks import DTYPE_SHAPE, ONLY_ARRAYS
from xgraph.runners.result_check import ResultCheck

if TYPE_CHECKING:
    from xgraph.ir.gears import Gear
    from xgraph.runners.graph_runner import GraphRunner
    from xgraph.runners.runner import Runner


def _signature(tensors) -> tuple:
    return tuple((t.dtype, tuple(t.shape)) for t in tensors)


def one_session_runners(runners: "Sequence[GraphRunner]") -> "list[Runner] | None":
    """Each gear runner's one subgraph runner when every gear is one onnxruntime session but for
    shapes (same runner class, one shared session, same input and output names); else None."""
    found = []
    for runner in runners:
        if runner.mode != "run" or runner.profile or len(runner.runners) != 1:
            return None
        (device_runner,) = runner.runners.values()
        executor = getattr(device_runner, "_executor", None)
        if executor is None or executor.backend != "onnxruntime":
            return None
        found.append(device_runner)
    first = found[0]
    names = ([t.name for t in first.get_input_tensors()], [t.name for t in first.get_output_tensors()])
    session = first._executor._backend._session
    if all(type(r) is type(first) and r._executor._backend._session is session
           and ([t.name for t in r.get_input_tensors()], [t.name for t in r.get_output_tensors()]) == names
           for r in found):
        return found
    return None


class GearInputs:
    """The shared runner's input check: a dict (or list) of arrays whose dtypes and shapes are one
    gear's passes with one set lookup; anything else is `route`d to that gear's own check."""

    __slots__ = ("names", "by_keys", "accepted", "route")

    def __init__(self, names: Sequence[str], signatures: "Sequence[tuple]",
                 route: "Callable[[Sequence | dict], list[np.ndarray]]") -> None:
        self.names = tuple(names)
        self.by_keys = frozenset(self.names)
        self.accepted = frozenset(signatures)
        self.route = route

    def __call__(self, inputs: "Sequence | dict") -> list[np.ndarray]:
        kind = type(inputs)
        if kind is dict and inputs.keys() == self.by_keys:
            values = list(map(inputs.__getitem__, self.names))
        elif (kind is list or kind is tuple) and len(inputs) == len(self.names):
            values = list(inputs)
        else:
            return self.route(inputs)
        if {*map(type, values)} == ONLY_ARRAYS and tuple(map(DTYPE_SHAPE, values)) in self.accepted:
            return values
        return self.route(inputs)


class GearResults:
    """The shared subgraph runner's result check: the check of the gear whose inputs the run has
    (each gear's own `ResultCheck`, static, so one comparison of lists).

    The gear is found by the shape of one input whose shape differs from gear to gear (`at`: a
    past key of a decoder), when there is one; by the whole input signature otherwise. The shared
    runner's inputs have passed `GearInputs`, so they are exactly one gear's."""

    __slots__ = ("at", "by_key", "exact", "fallback", "size")

    def __init__(self, by_inputs: "dict[tuple, ResultCheck]", fallback: ResultCheck) -> None:
        self.fallback, self.size = fallback, fallback.size
        signatures = list(by_inputs)
        width = len(signatures[0]) if signatures else 0
        #: an input whose shape alone tells the gears apart, else None (the whole signature)
        self.at = next((i for i in range(width) if len({sig[i][1] for sig in signatures}) == len(signatures)), None)
        #: key (that input's shape, or the whole signature) -> the gear's check
        self.by_key = {self._key_of(sig): check for sig, check in by_inputs.items()}
        #: key -> the [(dtype, shape), ...] the gear's outputs have (its check's own list)
        self.exact = {key: check.exact for key, check in self.by_key.items() if check.exact is not None}

    def _key_of(self, signature: tuple) -> tuple:
        return signature if self.at is None else signature[self.at][1]

    def __call__(self, inputs: Sequence, results: Sequence) -> None:
        at = self.at
        if at is not None and len(inputs) > at and type(inputs[at]) is np.ndarray:
            key = inputs[at].shape
        elif at is None and {*map(type, inputs)} <= ONLY_ARRAYS:
            key = tuple(map(DTYPE_SHAPE, inputs))
        else:
            key = None
        if {*map(type, results)} == ONLY_ARRAYS and list(map(DTYPE_SHAPE, results)) == self.exact.get(key):
            return  # the common case, as the gear's ResultCheck decides it
        (self.by_key.get(key) or self.fallback)(inputs, results)


def serve_gears(runner: "GraphRunner", gears: "Sequence[Gear]", gear_runners: "Sequence[Runner]",
                route: "Callable[[Sequence | dict], list[np.ndarray]]") -> "GraphRunner":
    """`runner` (a GraphRunner over gear 0's graph, kernels="onnxruntime", made inside the gears'
    `sessions_take_turns()` block so that its subgraph runner has the session the gears share),
    made to run the jobs of every gear: its input check takes each gear's signature (`route` checks
    anything else: the GearRunner's gear selection and that gear's input check), and its subgraph's
    results are checked against the gear the inputs belong to (`gear_runners`: each gear's one
    subgraph runner, `one_session_runners`)."""
    names = [t.name for t in runner.get_input_tensors()]
    runner._check_inputs = GearInputs(  # type: ignore[assignment]
        names, [_signature(g.graph.get_input_tensors()) for g in gears], route)
    (device_runner,) = runner.runners.values()
    checks = {}
    for own in gear_runners:
        inputs, outputs = own.get_input_tensors(), own.get_output_tensors()
        checks[_signature(inputs)] = ResultCheck.of(f"{own._owner()}, runner {type(own).__name__}", outputs, inputs)
    device_runner._rt.result_check = GearResults(checks, next(iter(checks.values())))  # type: ignore[assignment]
    return runner


__all__ = ["GearInputs", "GearResults", "one_session_runners", "serve_gears"]
