"""The "smfc" runner: executes the program `SmfcPlugin.compile` attached to a subgraph.

Modes: "run" computes in the input's precision (fast path), "sim" models an IP with a
half-precision datapath (exp and sum in float16), "ref" computes in float64 as the golden
reference. Results are cast back to the input dtype in every mode.
"""
from __future__ import annotations

import numpy as np

from xgraph import Runner, Subgraph, register_runner
from xgraph.errors import RunnerError

PROGRAM_ATTR = "smfc_program"
_COMPUTE_DTYPE = {"run": None, "sim": np.float16, "ref": np.float64}


def softmax(x: np.ndarray, *, axis: int = -1, coerce_2d: bool = False) -> np.ndarray:
    """ONNX Softmax; `coerce_2d` gives opset < 13 semantics (reduce over every dim from `axis` on)."""
    if coerce_2d:
        axis = axis % max(x.ndim, 1)
        flat = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
        return softmax(flat, axis=1).reshape(x.shape)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


class SmfcRunner(Runner):
    """Runs an SMFC subgraph's program step by step."""

    def __init__(self, subgraph: Subgraph, mode: str = "run"):
        super().__init__(subgraph, mode)
        if mode not in _COMPUTE_DTYPE:
            raise RunnerError(f"smfc runner: unknown mode {mode!r}; use one of {sorted(_COMPUTE_DTYPE)}")
        if not subgraph.has_attr(PROGRAM_ATTR):
            raise RunnerError(f"smfc runner: subgraph {subgraph.name!r} has no {PROGRAM_ATTR!r} attr; compile "
                              'the graph with {"plugins": "smfc"} so the smfc plugin attaches it')
        self.program = list(subgraph.get_attr(PROGRAM_ATTR))
        self.input_names = [t.name for t in subgraph.get_input_tensors()]
        self.output_names = [t.name for t in subgraph.get_output_tensors()]
        self.compute_dtype = _COMPUTE_DTYPE[mode]

    def execute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run every step in order; returns the subgraph outputs."""
        values = dict(zip(self.input_names, inputs))
        for step in self.program:
            x = values[step["input"]]
            work = x if self.compute_dtype is None else x.astype(self.compute_dtype)
            y = softmax(work, axis=step["axis"], coerce_2d=step["coerce_2d"])
            values[step["output"]] = y.astype(x.dtype, copy=False)
        return [values[name] for name in self.output_names]


register_runner("smfc", SmfcRunner)
