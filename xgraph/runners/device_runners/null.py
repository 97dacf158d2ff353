"""The null runner: allocates zero outputs of the declared shapes and returns, running no kernel.

Scheduling, pipelining and copy tests use it so they need no kernels; `delay` (seconds)
makes each execute sleep first, to keep jobs in flight long enough to observe overlap.
"""
from __future__ import annotations

import time

import numpy as np

from xgraph.errors import RunnerError
from xgraph.runners.runner import Runner, describe


class NullRunner(Runner):
    """Returns zeros shaped like the subgraph's outputs (unknown dims count as 1)."""

    delay: float = 0.0
    any_thread = True
    reentrant = True

    def __init__(self, subgraph, mode: str = "run") -> None:
        """Precompute the output shapes and dtypes."""
        super().__init__(subgraph, mode)
        self._layouts = []
        for t in subgraph.get_output_tensors():
            if t.shape is None:
                raise RunnerError(f"null runner for {describe(subgraph)}: output {t.name!r} has unknown rank, "
                                  f"so no zeros can be shaped for it")
            shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
            self._layouts.append((shape, t.dtype or np.dtype(np.float32)))

    def execute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Zeros for every output (after `delay` seconds)."""
        if self.delay:
            time.sleep(self.delay)
        return [np.zeros(shape, dtype) for shape, dtype in self._layouts]
