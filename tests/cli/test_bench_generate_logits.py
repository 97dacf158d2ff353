"""`xgraph bench --generate` on a decoder whose `logits` output is not [batch, seq, vocab]: one line naming
the output and its shape (declared, or as the run produced it), never an IndexError or ValueError."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from xgraph.cli.main import main as xgraph_main

pytest.importorskip("onnxruntime")


def _decoder(path, logits: np.ndarray, declared: list | None) -> str:
    """input_ids and past_k in; present_k (the past as is) and a constant logits out."""
    vi = helper.make_tensor_value_info
    nodes = [helper.make_node("Identity", ["past_k"], ["present_k"], name="cache"),
             helper.make_node("Constant", [], ["logits"], name="logits",
                              value=numpy_helper.from_array(logits, "l"))]
    graph = helper.make_graph(nodes, "decoder",
                              [vi("input_ids", TensorProto.INT64, [1, 1]), vi("past_k", TensorProto.FLOAT, [1, "p", 4])],
                              [vi("logits", TensorProto.FLOAT, declared), vi("present_k", TensorProto.FLOAT, [1, "p", 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return str(path)


@pytest.mark.parametrize("logits, declared, shown", [
    (np.zeros(5, np.float32), None, "[5]"),                  # rank 1: was an IndexError
    (np.zeros((1, 1, 0), np.float32), None, "[1, 1, 0]"),    # empty vocabulary: was a ValueError
    (np.zeros((1, 5), np.float32), [1, 5], "[1, 5]"),        # declared rank 2: refused before running
])
def test_logits_that_are_not_batch_seq_vocab_are_named(tmp_path, capsys, logits, declared, shown):
    model = _decoder(tmp_path / "decoder.onnx", logits, declared)
    try:
        code = xgraph_main(["bench", model, "--generate", "3"])
    except SystemExit as e:
        code = e.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert f"output 'logits' has shape {shown}" in err and "[batch, seq, vocab]" in err, err
