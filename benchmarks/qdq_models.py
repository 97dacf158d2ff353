"""The QDQ int8 models the benchmarks run, built the way a user of onnxruntime's quantizer gets them.

- `qdq_resnet50()`: the ONNX zoo ResNet50 architecture (onnx/backend/test/data/light, seeded
  random weights), converted to opset 13, its weights no longer graph inputs (IR 7),
  BatchNormalization folded into the convolutions by onnxruntime's documented pre-processing
  step (`onnxruntime.quantization.shape_inference.quant_pre_process`), then
  `quantize_static` (QDQ, int8 activations and per-channel int8 weights, reduce_range, four
  seeded random calibration inputs): 53 Conv + 1 Gemm units with int32 biases; built by
  `testing.int8_models.qdq_resnet50(pre_process=True)`, the int8 tests' model.
- `qdq_small_cnn()`: tests/quant/models.py's small CNN (Conv, MaxPool, residual Add, Gemm),
  quantized the same way.

Both need onnxruntime with its quantization tools (`xgraph[quantize]`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.quant.models import calibration_inputs, quantize, small_cnn  # noqa: E402
from testing import int8_models  # noqa: E402


def qdq_resnet50(seed: int = 0) -> onnx.ModelProto:
    """QDQ ResNet50 with BatchNormalization folded first (see the module docstring); about 10 s to build."""
    return int8_models.qdq_resnet50(seed, pre_process=True)


def qdq_small_cnn() -> onnx.ModelProto:
    """tests/quant/models.py's small CNN, QDQ int8 (1x3x16x16 in, 10 logits out)."""
    return quantize(small_cnn(), calib=calibration_inputs((1, 3, 16, 16)))


#: name -> builder, as the benchmarks' --int8-models option names them.
QDQ_MODELS = {"qdq_resnet50": qdq_resnet50, "qdq_small_cnn": qdq_small_cnn}
