"""The "openvino" runner: loads the subgraph's blob into OpenVINO and runs it."""
from __future__ import annotations

import io
import threading

import numpy as np

import xgraph

from .blob_format import ir_weights, unpack


class OpenVinoRunner(xgraph.Runner):
    """Runs one subgraph compiled by the openvino plugin (its blob: an export, or an IR over the graph's weights)."""

    any_thread = True

    def __init__(self, subgraph: "xgraph.Subgraph", mode: str = "run") -> None:
        super().__init__(subgraph, mode)
        import openvino as ov
        blob = subgraph.get_blob()
        where = f"subgraph {subgraph.name!r}"
        if blob is None:
            raise xgraph.XGraphError(f"{where} has no openvino blob; compile the model with the openvino plugin")
        header, payload = unpack(blob.data, where)
        config = {"INFERENCE_PRECISION_HINT": header["precision"]}
        core = ov.Core()
        if header["kind"] == "export":
            self.compiled = core.import_model(io.BytesIO(payload), header["device"], config)
        else:
            weights = {t.name: t.data for t in subgraph.get_const_tensors()}
            xml, binary = ir_weights(header, payload, weights)
            model = core.read_model(xml.decode(), ov.Tensor(binary, shared_memory=True))
            self.compiled = core.compile_model(model, header["device"], config)
            self._binary = binary  # the model's constants point into it
        self._inputs = [t.name for t in subgraph.get_input_tensors()]
        self._outputs = [self._port(t.name) for t in subgraph.get_output_tensors()]
        self._request = self.compiled.create_infer_request()
        self._lock = threading.Lock()

    def _port(self, name: str):
        for port in self.compiled.outputs:
            if name in port.get_names():
                return port
        raise xgraph.XGraphError(f"subgraph {self.subgraph.name!r}: the OpenVINO model has no output {name!r}; "
                                 "compile the model again")

    def execute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        with self._lock:
            # by position (the model's parameters are the subgraph's inputs, in order): a lone identity op
            # (Dropout) leaves OpenVINO a parameter named after its output, not its input
            results = self._request.infer(dict(enumerate(inputs)), share_inputs=True)
            return [np.array(results[port]) for port in self._outputs]
