"""Public entry points given something that is not what they take: one XGraphError naming the function,
the argument and what it expects, never an AttributeError or TypeError from inside."""
from __future__ import annotations

import numpy as np
import pytest

import xgraph
from xgraph.errors import XGraphError
from xgraph.partition import filter_by_name, filter_by_type


def _graph() -> xgraph.Graph:
    g = xgraph.Graph("g")
    x = g.create_input("x", (1, 4), np.float32)
    g.set_outputs([g.create_op("relu", "Relu", inputs=[x]).get_output_tensor()])
    return g


def _onnx(tmp_path) -> str:
    """The model saved outside `tmp_path` (which must stay empty)."""
    path = tmp_path.parent / f"{tmp_path.name}.onnx"
    path.write_bytes(_graph().to_onnx().SerializeToString())
    return str(path)


CASES = [
    ("report(None)", lambda t: xgraph.report(None), "xgraph.report: argument 'compiled' must be a compiled xgraph.Graph"),
    ("report(3)", lambda t: xgraph.report(3), "got int"),
    ("write_html(None)", lambda t: xgraph.write_html(None, str(t / "r.html")), "xgraph.write_html: argument 'compiled'"),
    ("write_html path None", lambda t: xgraph.write_html(xgraph.compile(_graph()), None),
     "xgraph.write_html: argument 'path' must be a file path"),
    ("write_svg(None)", lambda t: xgraph.write_svg(None, str(t / "p.svg")), "xgraph.write_svg: argument 'graph'"),
    ("serialize path None", lambda t: _graph().serialize(None), "serialize: argument 'path' must be a file path"),
    ("serialize path 3", lambda t: _graph().serialize(3), "got int"),
    ("serialize unbound None", lambda t: xgraph.Graph.serialize(None, str(t / "m.xmodel")),
     "serialize: argument 'graph' must be an xgraph.Graph, got NoneType"),
    ("isomorphism(None)", lambda t: _graph().isomorphism(None), "argument 'template' must be an xgraph.GraphTemplate"),
    ("filter_by_type(None)", lambda t: filter_by_type(None, "Relu"), "filter_by_type: argument 'graph'"),
    ("filter_by_name(3)", lambda t: filter_by_name(3, "relu"), "got int"),
    ("explain ops=3", lambda t: xgraph.explain(xgraph.compile(_graph()), ops=3),
     "explain: argument 'ops' must be a name or a list of names"),
    ("explain ops=[None]", lambda t: xgraph.explain(xgraph.compile(_graph()), ops=[None]), "[None]"),
    ("quantize calibration None", lambda t: xgraph.quantize(_onnx(t), None),
     "quantize: argument 'calibration' must be a file path"),
    ("quantize model 3", lambda t: xgraph.quantize(3, str(t)), "quantize: argument 'model' must be a file path"),
]


@pytest.mark.parametrize("case, call, message", CASES, ids=[c[0] for c in CASES])
def test_a_wrong_argument_is_an_xgraph_error_naming_it(tmp_path, case, call, message):
    with pytest.raises(XGraphError) as e:
        call(tmp_path)
    assert message in str(e.value)
    assert list(tmp_path.iterdir()) == []
