"""The runner modes and the kernel choices of the "run" mode, defined once for every layer.

A subgraph's "runner" attr maps each mode to a registered runner name:

- ``"run"``: the fastest correct execution on this host;
- ``"sim"``: device-faithful numerics (e.g. AI Core in float16) plus an estimated device time;
- ``"ref"``: the golden reference (the ONNX reference evaluator).

`kernels` picks what runs the ops in "run" mode: ``"numpy"`` (xgraph's kernels),
``"onnxruntime"`` (one onnxruntime session per standard-ONNX subgraph) or ``"auto"``
(onnxruntime where installed and applicable, else numpy).
"""
from __future__ import annotations

RUN, SIM, REF = "run", "sim", "ref"
#: Runner modes, in the order reports list them.
MODES = (RUN, SIM, REF)

AUTO, NUMPY, ONNXRUNTIME = "auto", "numpy", "onnxruntime"
#: What may run the ops in "run" mode (`create_runner(..., kernels=...)`).
KERNEL_CHOICES = (AUTO, NUMPY, ONNXRUNTIME)

__all__ = ["AUTO", "KERNEL_CHOICES", "MODES", "NUMPY", "ONNXRUNTIME", "REF", "RUN", "SIM"]
