"""Corrections to onnx's reference evaluator: op classes passed as ``new_ops=`` wherever the
evaluator is xgraph's golden reference (the `ref` mode, the CPU fallback kernel, `xgraph verify`).

Each class replaces an evaluator op whose result disagrees with the ONNX specification as
inference engines (onnxruntime) implement it. Each is found by running the op against
onnxruntime one node at a time on random data (tests/backend/test_reference_audit.py keeps
that audit running, so a fix that onnx makes upstream shows up as a redundant override):

- BatchNormalization: the evaluator runs opsets 6-9 as in training mode (opset 6 when
  ``is_test`` is 0, its default; opset 9 whenever ``momentum`` is set, which its schema default
  always does): it normalises with the batch's own statistics, mixed with the running ones.
  An inference graph means the running statistics (inputs 3 and 4); only opset 14's explicit
  ``training_mode=1`` asks for batch statistics. Max error on one opset-9 node with random
  statistics was 0.21 before this fix.
- Softmax, LogSoftmax, Hardmax: before opset 13 the evaluator applies them along `axis`
  alone, while opsets 1-11 coerce the input to 2-D at `axis` ([N, C, 1, 1] with axis=1 is a
  softmax over C*1*1 values); on the zoo classifiers' final [1, 1000, 1, 1] Softmax the
  evaluator returned 1.0 for every class.
- LRN: the evaluator's window sum disagrees with the specification's square_sum (max error
  0.69 against a float64 oracle of the spec's formula with alpha=0.01; onnxruntime: 5e-7).
- Loop: the evaluator joins scan outputs with ``np.vstack``, which turns scalar iterations
  into shape (N, 1) and concatenates, instead of stacking, iterations of rank >= 2; the
  replacement records each iteration's scan values and stacks them on a new first axis.
- Optional: the evaluator wraps the value in a list (``[x]``, ``[None]`` when empty), which
  OptionalHasElement/OptionalGetElement then read as a present sequence; the replacement
  returns the value itself (None when empty), the convention every other op follows.
- DequantizeLinear before opset 19: the evaluator has no implementation of opsets 10 and 13
  (QDQ models as onnxruntime's quantize_static writes them fail to load); the replacement is
  the evaluator's newest class, whose attributes (axis, block_size, output_dtype) default to
  the older opsets' behaviour (per tensor, or per axis 1).
"""
from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_fixed_ops: list | None = None


def _inference_batch_norm(x, scale, bias, mean, var, epsilon: float) -> np.ndarray:
    """Y = scale * (X - mean) / sqrt(var + epsilon) + bias, per channel (axis 1)."""
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = scale.reshape(shape) * (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + epsilon) + bias.reshape(shape)
    return y.astype(x.dtype, copy=False)


def _lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """ONNX LRN: X / (bias + alpha / size * square_sum) ** beta, the window over channels
    [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] clipped to the channel range."""
    square = np.square(x.astype(np.float64))
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    padded = np.pad(np.cumsum(square, axis=1), [(0, 0), (1, 0)] + [(0, 0)] * (x.ndim - 2))
    channels = x.shape[1]
    hi = np.minimum(np.arange(channels) + after, channels - 1) + 1
    lo = np.maximum(np.arange(channels) - before, 0)
    square_sum = np.take(padded, hi, axis=1) - np.take(padded, lo, axis=1)
    return (x / (bias + alpha / size * square_sum) ** beta).astype(x.dtype)


def _coerced_2d(fn, x: np.ndarray, axis: int) -> np.ndarray:
    """Opsets 1-11's Softmax family: apply `fn` along the last axis of x flattened to 2-D at `axis`."""
    axis = axis + x.ndim if axis < 0 else axis
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    return fn(x.reshape(rows, -1)).reshape(x.shape)


def _along_axis(fn, x: np.ndarray, axis: int) -> np.ndarray:
    """Opset 13's Softmax family: apply `fn` (which works on the last axis of a 2-D array) along `axis`."""
    moved = np.moveaxis(x, axis, -1)
    return np.moveaxis(fn(moved.reshape(-1, moved.shape[-1])).reshape(moved.shape), -1, axis)


def _softmax_2d(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _log_softmax_2d(x: np.ndarray) -> np.ndarray:
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def _hardmax_2d(x: np.ndarray) -> np.ndarray:
    out = np.zeros_like(x)
    out[np.arange(x.shape[0]), np.argmax(x, axis=1)] = 1
    return out


def _opset(op) -> int:
    """The default-domain opset of the model an evaluator op belongs to."""
    opsets = op.run_params.get("opsets") or {}
    return int(opsets.get("", opsets.get("ai.onnx", 21)))


def _build() -> list:
    from onnx.reference.op_run import OpRun
    from onnx.reference.ops.op_batch_normalization import BatchNormalization_14
    from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_25
    from onnx.reference.ops.op_hardmax import Hardmax as EvaluatorHardmax
    from onnx.reference.ops.op_log_softmax import LogSoftmax as EvaluatorLogSoftmax
    from onnx.reference.ops.op_softmax import Softmax as EvaluatorSoftmax

    def coerced(base, fn_2d, name):
        """The Softmax family, every opset: along `axis` from 13 on, on x coerced to 2-D before."""
        def _run(self, x, axis=None):
            given = [a for a in self.onnx_node.attribute if a.name == "axis"]  # the node's own, not a schema default
            axis = int(given[0].i) if given else None
            if _opset(self) >= 13:
                return (_along_axis(fn_2d, x, -1 if axis is None else axis),)
            return (_coerced_2d(fn_2d, x, 1 if axis is None else axis),)
        return type(name, (base,), {"_run": _run, "__doc__": f"ONNX {name}, every opset (2-D coercion before 13)."})

    class LRN(OpRun):
        """ONNX LRN, as the specification's formula."""

        def _run(self, x, alpha=None, beta=None, bias=None, size=None):
            return (_lrn(x, int(size), 1e-4 if alpha is None else float(alpha),
                         0.75 if beta is None else float(beta), 1.0 if bias is None else float(bias)),)
    from onnx.reference.ops.op_loop import Loop as EvaluatorLoop
    from onnx.reference.ops.op_optional import Optional as EvaluatorOptional

    class BatchNormalization(OpRun):
        """ONNX BatchNormalization, every opset: running statistics unless training_mode=1."""

        def _run(self, x, scale, bias, mean, var, epsilon=None, momentum=None, training_mode=None,
                 is_test=None, spatial=None):  # noqa: ARG002 - opset 6's attributes, meaningless at inference
            eps = 1e-5 if epsilon is None else float(epsilon)
            if training_mode == 1:  # opset >= 14 only: batch statistics and updated running ones
                return BatchNormalization_14._run(self, x, scale, bias, mean, var, epsilon=eps,
                                                  momentum=0.9 if momentum is None else momentum,
                                                  training_mode=1)
            return (_inference_batch_norm(x, scale, bias, mean, var, eps),)

    class Optional(EvaluatorOptional):
        """ONNX Optional: the value itself, or None for an empty optional."""

        def run(self, *args, **kwargs):  # the base class's output check refuses None, so unwrap after it
            (wrapped,) = super().run(*args, **kwargs)
            return (wrapped[0],)

    class Loop(EvaluatorLoop):
        """ONNX Loop with scan outputs stacked along a new first axis."""

        def __init__(self, onnx_node, run_params):
            super().__init__(onnx_node, run_params)
            self._scans: list | None = None
            run_body = self._run_body

            def recording_body(inputs, attributes=None, bindings=None):
                outputs = run_body(inputs, attributes=attributes, bindings=bindings)
                if self._scans is not None and self.K > 0:
                    self._scans.append(outputs[len(outputs) - self.K:])
                return outputs

            self._run_body = recording_body

        def _run(self, M, cond, *args, **kwargs):
            self._scans = []
            try:
                results = super()._run(M, cond, *args, **kwargs)
                scans = self._scans
            finally:
                self._scans = None
            if not self.K or not scans:
                return results
            results = list(results)
            for k in range(self.K):
                results[self.N + k] = np.stack([np.asarray(s[k]) for s in scans])
            return tuple(results)

    class DequantizeLinear(DequantizeLinear_25):
        """ONNX DequantizeLinear of every opset (10 and 13 included)."""

        op_domain = ""

    return [BatchNormalization, DequantizeLinear, LRN, Loop, Optional,
            coerced(EvaluatorSoftmax, _softmax_2d, "Softmax"),
            coerced(EvaluatorLogSoftmax, _log_softmax_2d, "LogSoftmax"),
            coerced(EvaluatorHardmax, _hardmax_2d, "Hardmax")]


def evaluator_fixes() -> list:
    """The op classes above, built once (importing onnx.reference is slow); pass as ``new_ops=``."""
    global _fixed_ops
    with _lock:
        if _fixed_ops is None:
            _fixed_ops = _build()
        return list(_fixed_ops)
