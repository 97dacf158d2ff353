"""The ACTNPU runner: the activation unit runs Relu and Clip, xgraph's kernels run every other op.

"sim" models the unit's float16 datapath (activations rounded to float16 and back);
"run" and "ref" compute in the input's precision.
"""
from __future__ import annotations

import numpy as np

from xgraph import register_runner
from xgraph.runners.kernel_runner import KernelRunner

RUNNER = "act_npu"
#: The op types the activation unit executes.
ACCELERATED = frozenset({"Relu", "Clip"})


def _clip_bounds(op, inputs) -> tuple[float | None, float | None]:
    """Clip's bounds: inputs 1 and 2 (opset >= 11) or the min/max attributes (older opsets)."""
    low = inputs[1] if len(inputs) > 1 and inputs[1] is not None else op.get_attrs().get("min")
    high = inputs[2] if len(inputs) > 2 and inputs[2] is not None else op.get_attrs().get("max")
    return low, high


class ActNpuRunner(KernelRunner):
    """Activations on the unit; the rest through `KernelRunner` (xgraph's kernels)."""

    def __init__(self, subgraph, mode="run"):
        super().__init__(subgraph, mode)
        self.unit_calls = 0  # how many ops the activation unit ran (tests read it)

    def accelerates(self, op) -> bool:
        """Relu and Clip run on the unit."""
        return op.type in ACCELERATED

    def run_op(self, op, inputs):
        """The unit's activation, in float16 in "sim" mode."""
        self.unit_calls += 1
        x = inputs[0]
        work = x.astype(np.float16) if self.mode == "sim" else x
        if op.type == "Relu":
            y = np.maximum(work, 0)
        else:
            low, high = _clip_bounds(op, inputs)
            y = np.clip(work, -np.inf if low is None else low, np.inf if high is None else high)
        return [y.astype(x.dtype, copy=False)]


register_runner(RUNNER, ActNpuRunner)
