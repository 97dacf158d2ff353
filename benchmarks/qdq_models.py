"""The QDQ int8 models the benchmarks run, built the way a user of onnxruntime's quantizer gets them.

- `qdq_resnet50()`: the ONNX zoo ResNet50 architecture (onnx/backend/test/data/light, seeded
  random weights), converted to opset 13, its weights no longer graph inputs (IR 7),
  BatchNormalization folded into the convolutions by onnxruntime's documented pre-processing
  step (`onnxruntime.quantization.shape_inference.quant_pre_process`), then
  `quantize_static` (QDQ, int8 activations and per-channel int8 weights, reduce_range, four
  seeded random calibration inputs): 53 Conv + 1 Gemm units with int32 biases.
- `qdq_small_cnn()`: tests/quant/models.py's small CNN (Conv, MaxPool, residual Add, Gemm),
  quantized the same way.

Both need onnxruntime with its quantization tools (`xgraph[quantize]`).
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.quant.models import calibration_inputs, quantize, small_cnn  # noqa: E402
from xgraph.runners.ort_session import weights_as_constants  # noqa: E402
from xgraph.runners.testing import zoo_model  # noqa: E402


def qdq_resnet50(seed: int = 0) -> onnx.ModelProto:
    """QDQ ResNet50 (see the module docstring); about 10 s to build."""
    from onnx import version_converter
    from onnxruntime.quantization.shape_inference import quant_pre_process
    model = version_converter.convert_version(weights_as_constants(zoo_model("resnet50", seed)), 13)
    model.ir_version = 7
    with tempfile.TemporaryDirectory() as tmp:
        src, folded = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "folded.onnx")
        onnx.save(model, src)
        quant_pre_process(src, folded, skip_symbolic_shape=True)
        model = onnx.load(folded)
    del model.opset_import[:]
    model.opset_import.extend([onnx.helper.make_opsetid("", 13)])  # pre-processing lists every domain it knows
    name = model.graph.input[0].name
    rng = np.random.default_rng(1)
    calib = [rng.standard_normal((1, 3, 224, 224)).astype(np.float32) for _ in range(4)]
    return quantize(model, calib=calib, input_name=name)


def qdq_small_cnn() -> onnx.ModelProto:
    """tests/quant/models.py's small CNN, QDQ int8 (1x3x16x16 in, 10 logits out)."""
    return quantize(small_cnn(), calib=calibration_inputs((1, 3, 16, 16)))


#: name -> builder, as the benchmarks' --int8-models option names them.
QDQ_MODELS = {"qdq_resnet50": qdq_resnet50, "qdq_small_cnn": qdq_small_cnn}
