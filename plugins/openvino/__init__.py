"""openvino: a partition plugin with a real vendor compiler behind it (Intel OpenVINO).

`partition` asks OpenVINO which ops the configured device supports
(`Core().query_model(model, device)`) and takes those ops, merged; `compile` hands each
subgraph (`Subgraph.to_onnx()`: the runner's inputs and outputs, in order) to
`Core().compile_model` and stores the result with `Subgraph.set_blob`:

- ``weights="shared"`` (default): OpenVINO's IR of the subgraph without its weights; the runner
  rebuilds the weights file from the graph's own arrays at load (`blob_format.py` says why it
  is not a weightless export);
- ``weights="embedded"``: `CompiledModel.export_model()`, weights included.

The compatibility string names the OpenVINO version, the device and the precision; at load
`check_blob` answers "ok" for the same version, "recompile" for another one (the subgraph is
compiled again from the graph), "unsupported" when the blob's device is not on this host.

Options (``{"plugin_options": {"openvino": {...}}}``): ``device`` ("CPU"), ``precision``
("f32", pinned with ``INFERENCE_PRECISION_HINT``; "bf16" or "f16" let the device compute in
lower precision, which ``xgraph verify`` then flags with the error it measures), ``weights``
("shared" | "embedded"), ``claims`` ("claim" | "prefer": offer the subgraphs to a cost placement,
which may leave them to the built-in devices), ``merge`` (true; false: one subgraph per op, the
finest candidates for a cost placement). Needs ``pip install 'xgraph[openvino]'``.

Use it:  xcompile model.onnx --plugin-path plugins --options '{"plugins": "openvino"}'
"""
from __future__ import annotations

from typing import Any

from xgraph import Graph, Subgraph, XGraphError
from xgraph.partition import filter as filter_subgraphs
from xgraph.partition import merge_subgraph
from xgraph.plugins import Plugin

from .blob_format import ir_parts, pack

DEVICE = "OPENVINO"
RUNNER = "openvino"
#: The subgraph attr naming the precision OpenVINO computes in (read by `xgraph verify`).
PRECISION_ATTR = "inference_precision"
PRECISIONS = ("f32", "bf16", "f16")
WEIGHTS = ("shared", "embedded")

try:
    import openvino as ov
except ImportError:  # the plugin still loads (and says what to install when used)
    ov = None

if ov is not None:
    import xgraph

    from .runner import OpenVinoRunner

    xgraph.register_runner(RUNNER, OpenVinoRunner)


def _need_openvino() -> Any:
    if ov is None:
        raise XGraphError("plugin 'openvino' needs the openvino package: pip install 'xgraph[openvino]'")
    return ov


def sdk_version() -> str:
    """The installed OpenVINO version, e.g. "2026.4.1" (the build suffix dropped)."""
    return _need_openvino().__version__.split("-")[0]


class OpenVinoPlugin(Plugin):
    """Ops OpenVINO supports on `device`, compiled by OpenVINO."""

    def __init__(self, device: str = "CPU", precision: str = "f32", weights: str = "shared",
                 claims: str = "claim", merge: bool = True) -> None:
        if precision not in PRECISIONS:
            raise XGraphError(f"plugin 'openvino': precision {precision!r} is not one of {', '.join(PRECISIONS)}")
        if weights not in WEIGHTS:
            raise XGraphError(f"plugin 'openvino': weights {weights!r} is not one of {', '.join(WEIGHTS)}")
        if not isinstance(device, str) or not device:
            raise XGraphError(f"plugin 'openvino': device {device!r}; name an OpenVINO device such as 'CPU'")
        if claims not in ("claim", "prefer"):
            raise XGraphError(f"plugin 'openvino': claims {claims!r} is not 'claim' or 'prefer'")
        self.device, self.precision, self.weights, self.claims = device, precision, weights, claims
        self.merge = bool(merge)
        self._core = None

    @property
    def core(self) -> Any:
        """The OpenVINO Core (made on first use)."""
        if self._core is None:
            self._core = _need_openvino().Core()
        return self._core

    def get_plugin_name(self) -> str:
        """The plugin's name in {"plugins": ...}."""
        return "openvino"

    def get_device(self) -> str:
        """The device name set on its subgraphs."""
        return DEVICE

    def get_memory(self) -> str:
        """OpenVINO's CPU device reads host memory: crossings are plain host buffers."""
        return "host"

    def get_runner(self) -> dict[str, str]:
        """OpenVINO for run and sim; xgraph's own CPU kernels for the golden reference."""
        return {"run": RUNNER, "sim": RUNNER, "ref": "cpu"}

    def config(self) -> dict[str, str]:
        """The compile configuration: precision pinned by `INFERENCE_PRECISION_HINT`."""
        return {"INFERENCE_PRECISION_HINT": self.precision}

    def partition(self, graph: Graph) -> "set[Subgraph]":
        """The unassigned ops whose every output OpenVINO's `query_model` places on the device, merged."""
        model = self.core.read_model(graph.to_onnx().SerializeToString())
        supported = set(self.core.query_model(model, self.device, self.config()))
        producer = {name: op.get_friendly_name() for op in model.get_ordered_ops() if op.get_type_name() != "Result"
                    for port in op.outputs() for name in port.get_names()}

        def takes(op) -> bool:
            # an output OpenVINO folded away has no producer left: its op converted, so it is taken too
            return all(producer.get(t.name) in supported for t in op.get_output_tensors() if t.name in producer)

        taken = filter_subgraphs(graph, lambda free: {sg for sg in free if all(map(takes, sg.get_ops()))})
        return merge_subgraph(taken) if self.merge else taken

    def blob_compat(self) -> str:
        """What this plugin writes: OpenVINO version, device and precision."""
        return f"openvino-{sdk_version()};device={self.device};precision={self.precision}"

    def check_blob(self, compat: str) -> str:
        """ok (same OpenVINO), recompile (another OpenVINO), unsupported (its device is not on this host)."""
        fields = dict(part.split("=", 1) for part in compat.split(";")[1:] if "=" in part)
        built = compat.split(";")[0]
        if fields.get("device", self.device).split(".")[0] not in self.core.available_devices + ["AUTO", "HETERO"]:
            return "unsupported"
        return "ok" if built == f"openvino-{sdk_version()}" else "recompile"

    def compile(self, subgraph: Subgraph) -> None:
        """Compile the subgraph with OpenVINO and store the blob (weightless IR, or the export)."""
        model = self.core.read_model(subgraph.to_onnx().SerializeToString())
        compiled = self.core.compile_model(model, self.device, self.config())
        header = {"device": self.device, "precision": self.precision}
        if self.weights == "embedded":
            exported = compiled.export_model()
            data = exported.getvalue() if hasattr(exported, "getvalue") else bytes(exported)
            blob = pack({**header, "kind": "export"}, data)
        else:
            weights = {t.name: t.data for t in subgraph.get_const_tensors()}
            fields, xml, residue = ir_parts(model, weights)
            blob = pack({**header, "kind": "ir", **fields}, xml, residue)
        subgraph.set_blob(blob, weights=self.weights, compat=self.blob_compat())
        subgraph.set_attr(PRECISION_ATTR, self.precision)


def get_plugin(options: "dict[str, Any] | None" = None) -> OpenVinoPlugin:
    """The plugin, configured by its plugin_options."""
    return OpenVinoPlugin(**(options or {}))
