"""inspect and dump: snapshot-style checks on ResNet50 and the hand-built graph; stable across runs."""
from __future__ import annotations

import json

import xgraph
from xgraph.view.describe import value_text
from xgraph.view.text import dump_text, inspect_data, inspect_text


def test_inspect_and_dump_are_stable_across_compiles(resnet50_compiled, resnet50_path):
    again = xgraph.compile(resnet50_path)
    assert inspect_text(again) == inspect_text(resnet50_compiled)
    assert dump_text(again) == dump_text(resnet50_compiled)
    assert json.dumps(inspect_data(again)) == json.dumps(inspect_data(resnet50_compiled))


def test_resnet50_inspect_lines(resnet50_compiled):
    lines = inspect_text(resnet50_compiled).splitlines()
    assert lines[0] == "resnet50: 176 ops, 1 device subgraph, 0 host/device crossings"
    assert "  input   gpu_0/data_0 float32[1,3,224,224]" in lines
    assert "  AICORE  1 subgraph  176 ops" in lines
    i = lines.index("  subgraph_n0  AICORE  176 ops  runner: run=aicore sim=aicore ref=aicore")
    assert lines[i + 1:i + 3] == ["      in   gpu_0/data_0 float32[1,3,224,224]",
                                  "      out  gpu_0/softmax_1 float32[1,1000]"]


def test_resnet50_dump_first_ops(resnet50_compiled):
    blocks = dump_text(resnet50_compiled).split("\n\n")
    assert blocks[0].splitlines()[0] == "# resnet50: 176 ops"
    conv = blocks[1].splitlines()
    assert conv[:4] == ["op n0: Conv", "  device: AICORE  subgraph: subgraph_n0  kernel: numpy", "  reason: -",
                        "  in:   gpu_0/data_0 float32[1,3,224,224]"]
    assert conv[4].startswith("  in:   gpu_0/conv1_w_0 (weight) float32[64,3,7,7] {")
    assert conv[5:] == ["  out:  r0 float32[1,64,112,112]", "  attr: kernel_shape = [7, 7]",
                        "  attr: pads = [3, 3, 3, 3]", "  attr: strides = [2, 2]"]
    assert [b.splitlines()[0] for b in blocks[2:5]] == ["op n1: BatchNormalization", "op n2: Relu", "op n3: MaxPool"]
    assert all(b.splitlines()[1].startswith("  device: AICORE  ") for b in blocks[1:])
    assert len(blocks) == 1 + 176


def test_uncompiled_model(resnet50_raw):
    text = inspect_text(resnet50_raw)
    assert text.splitlines()[0] == "resnet50: 415 ops, not compiled (no device subgraphs; compile it with xcompile)"
    assert inspect_data(resnet50_raw)["subgraphs"] == []
    first = dump_text(resnet50_raw).split("\n\n")[1].splitlines()
    assert first == ["op ConstantOfShape: ConstantOfShape", "  device: -  subgraph: -", "  reason: -",
                     "  in:   gpu_0/conv1_w_0__SHAPE (weight) int64[4] {64, 3, 7, 7}",
                     "  out:  gpu_0/conv1_w_0 float32[64,3,7,7]", "  attr: value = float32[1] {0.02}"]


def test_dump_shows_devices_and_reasons(toy):
    text = dump_text(toy)
    assert "op topk_like: Abs\n  device: CPU  subgraph: subgraph_topk_like  kernel: numpy\n" \
           "  reason: AICORE: Abs with dtype float64 unsupported; AICPU: not in its op-info library\n" in text
    assert "  reason: chosen by plugin 'smfc'" in text
    assert "  in:   w (weight) float32[2,2,1,1] {0, 1, 2, 3}" in text


def test_inspect_json_keys_and_estimated_time(toy):
    sg = toy.get_root_subgraph().find_child_subgraph_by_op("conv")
    sg.set_attr("estimated_time_us", 12.5)
    toy.get_root_subgraph().find_child_subgraph_by_op("add").set_attr("estimated_time_us", 2.0)
    data = inspect_data(toy)
    assert list(data) == ["model", "ops", "compiled", "inputs", "outputs", "crossings", "devices", "subgraphs"]
    assert list(data["subgraphs"][0]) == ["name", "depth", "device", "ops", "runner", "estimated_time_us", "inputs",
                                          "outputs", "children"]
    assert data["crossings"] == 2
    assert data["devices"]["AICORE"] == {"subgraphs": 2, "ops": 3, "estimated_time_us": 14.5}
    assert data["devices"]["CPU"]["estimated_time_us"] is None
    assert data["subgraphs"][0]["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 2, 4, 4]}]
    text = inspect_text(toy)
    assert "  subgraph_conv  AICORE  2 ops  runner: run=aicore sim=aicore ref=aicore  est. 12.5 us" in text
    assert "  AICORE  2 subgraphs  3 ops  est. 14.5 us" in text


def test_deeper_levels_are_indented(toy):
    sg = toy.get_root_subgraph().find_child_subgraph_by_op("conv")
    sg.create_child_subgraph()
    lines = inspect_text(toy).splitlines()
    i = lines.index("  subgraph_conv  AICORE  2 ops  runner: run=aicore sim=aicore ref=aicore")
    assert lines[i + 3].startswith("    subgraph_conv  (no device)  1 op")
    assert [c["depth"] for c in inspect_data(toy)["subgraphs"][0]["children"]] == [2, 2]


def test_value_text_summarises():
    import numpy as np
    assert value_text(np.arange(10, dtype=np.int64).reshape(2, 5)) == "int64[2,5] {0, 1, 2, 3, ...}"
    assert value_text(list(range(20))) == "[0, 1, 2, 3, 4, 5, 6, 7, ... (20 items)]"
    assert value_text({"b": 1.5, "a": "x"}) == '{a: "x", b: 1.5}'
    assert value_text(b"\x00\x01") == "bytes[2]"
    assert value_text(1 / 3) == "0.333333"
    assert value_text("bad\udc80") == '"bad\\udc80"'
