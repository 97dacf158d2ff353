"""Gears (ATC's dynamic_batch_size / dynamic_image_size / dynamic_dims): options, compile, file, runner."""
from __future__ import annotations

import json

import pytest

from xgraph.compiler.options import parse_options
from xgraph.errors import OptionError

DEVICES = ["AICORE", "AICPU", "DVPP", "CPU"]


# ----------------------------------------------------------------------------- options

@pytest.mark.parametrize("options, shapes", [
    ({"input_shape": "x:-1,3,8,8", "dynamic_batch_size": "1,2,4"},
     [{"x": (1, 3, 8, 8)}, {"x": (2, 3, 8, 8)}, {"x": (4, 3, 8, 8)}]),
    ({"input_shape": "a:-1,4;b:-1,2", "dynamic_batch_size": [2, 8]},
     [{"a": (2, 4), "b": (2, 2)}, {"a": (8, 4), "b": (8, 2)}]),
    ({"input_shape": "ids:1,-1;mask:1,-1", "dynamic_dims": "8,8;16,16"},
     [{"ids": (1, 8), "mask": (1, 8)}, {"ids": (1, 16), "mask": (1, 16)}]),
    ({"input_shape": "x:-1,-1", "dynamic_dims": "1,16;2,32"}, [{"x": (1, 16)}, {"x": (2, 32)}]),
    ({"input_shape": "x:1,3,-1,-1", "dynamic_image_size": "8,8;16,12"}, [{"x": (1, 3, 8, 8)}, {"x": (1, 3, 16, 12)}]),
])
def test_gear_shapes_fill_the_minus_ones_in_order(options, shapes):
    o = parse_options(options, DEVICES)
    assert o.gear_shapes() == shapes
    assert parse_options(o.to_json(), DEVICES) == o  # the ATC form round-trips


def test_no_gear_option_means_no_gears_and_minus_one_keeps_a_dim():
    o = parse_options({"input_shape": "x:1,-1"}, DEVICES)
    assert (o.gear_option, o.gears, o.gear_shapes()) == ("", (), [])
    assert "dynamic_dims" not in json.loads(o.to_json())


@pytest.mark.parametrize("options, message", [
    ({"input_shape": "x:1,3,8,8", "dynamic_batch_size": "1,2"}, r"option 'dynamic_batch_size' needs -1 in option "
                                                                 r"'input_shape'.*x:1,3,8,8"),
    ({"dynamic_dims": "8;16"}, r"option 'dynamic_dims' needs -1 in option 'input_shape'.*input_shape is none"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8;8;16"}, r"'dynamic_dims'.*each gear once \(repeated: 8\)"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "8"}, r"'dynamic_dims'.*1 gear\(s\) given; give 2 to 100"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": ",".join(str(i) for i in range(1, 102))},
     r"'dynamic_batch_size'.*101 gear\(s\) given; give 2 to 100"),
    ({"input_shape": "x:1,-1;y:-1", "dynamic_dims": "8,1;3"},
     r"'dynamic_dims'.*gear 2 has 1 value\(s\), each gear needs 2 value\(s\), one per -1 of input_shape "
     r"\(x\[1\], y\[0\]\)"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": "0,3"}, r"'dynamic_batch_size'.*0 is not a size >= 1"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "-2;3"}, r"'dynamic_dims'.*-2 is not a size >= 0"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "a;3"}, r"'dynamic_dims'.*'a' is not an integer"),
    ({"input_shape": "x:1,-1", "dynamic_dims": "4;;3"}, r"'dynamic_dims'.*a value is empty"),
    ({"input_shape": "x:1,-1", "dynamic_dims": ""}, r"'dynamic_dims'.*it is empty"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": "1,4096"}, r"batch size 4096 is over 2048"),
    ({"input_shape": "x:-1,-1", "dynamic_batch_size": "1,2"}, r"'dynamic_batch_size' needs -1 only as the first dim.*"
                                                              r"dim 1 of 'x'; use 'dynamic_dims'"),
    ({"input_shape": "x:1,3,-1,8", "dynamic_image_size": "8,8;16,16"}, r"'dynamic_image_size' needs exactly two -1.*"
                                                                       r"gives 'x' 1"),
    ({"input_shape": "x:1,3,-1,-1", "dynamic_image_size": "8;16"}, r"gear 1 has 1 value\(s\), each gear needs two"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": "1,2", "dynamic_dims": "1;2"},
     r"options 'dynamic_batch_size', 'dynamic_dims' exclude each other"),
    ({"input_shape": "x:-1,2", "dynamic_batch_size": {"a": 1}}, r"'dynamic_batch_size'.*not a gear list"),
])
def test_bad_gear_options_name_the_option_and_the_fix(options, message):
    with pytest.raises(OptionError, match=message):
        parse_options(options, DEVICES)


def test_gear_keys_are_valid_option_keys():
    with pytest.raises(OptionError) as e:
        parse_options({"dynamic_dim": "1;2"}, DEVICES)
    assert "did you mean 'dynamic_dims'" in str(e.value)


# ----------------------------------------------------------------------------- compile

from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import onnx  # noqa: E402

import xgraph  # noqa: E402
from xgraph.errors import ModelFileError, RunnerError  # noqa: E402
from xgraph.ir.onnx.side_file import side_files  # noqa: E402
from testing.runtime import load_script  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BERT_GEARS = {"input_shape": "input_ids:-1,-1;attention_mask:-1,-1", "dynamic_dims": "1,8,1,8;2,16,2,16;1,32,1,32"}
BERT_SHAPES = [(1, 8), (2, 16), (1, 32)]
DENSE = {"MatMul", "Gemm", "Softmax", "LayerNormalization", "Conv"}


def _builders(name: str, path: str):
    return load_script(ROOT / path, name)


@pytest.fixture(scope="module")
def bert():
    return _builders("gear_compile_models", "tests/compile/conftest.py").bert_like_encoder(hidden=64, layers=2)


@pytest.fixture(scope="module")
def bert_gears(bert):
    return xgraph.compile(bert, BERT_GEARS)


def _weight_bytes(model: onnx.ModelProto) -> int:
    return sum(onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer)


def _devices(graph) -> dict[str, str]:
    return {op.name: str(op.get_attr("device")) for op in graph.get_ops()}


def _bert_feeds(shape, seed=0):
    rng = np.random.default_rng(seed)
    mask = np.ones(shape, np.int64)
    mask[:, -2:] = 0
    return {"input_ids": rng.integers(0, 50, shape).astype(np.int64), "attention_mask": mask}


def test_each_gear_is_static_and_puts_the_dense_ops_on_aicore(bert_gears):
    gears = bert_gears.get_gears()
    assert [g.name for g in gears] == ["gear0", "gear1", "gear2"]
    assert gears[0].graph is bert_gears
    for gear, shape in zip(gears, BERT_SHAPES):
        g = gear.graph
        assert dict(gear.input_shapes) == {"input_ids": shape, "attention_mask": shape}
        assert [t.shape for t in g.get_input_tensors()] == [shape, shape]
        assert g.get_output_tensors()[0].shape == (*shape, 64)
        assert not [op.name for op in g.get_ops() if op.type in ("Shape", "Size")]  # shape arithmetic folded away
        devices = _devices(g)
        dense = {op.name for op in g.get_ops() if op.type in DENSE}
        assert dense and all(devices[n] == "AICORE" for n in dense), {n: devices[n] for n in dense}
        assert sum(d == "AICORE" for d in devices.values()) >= 0.9 * len(devices)
        assert json.loads(g.get_attr("compile_options"))["input_shape"] == \
            f"input_ids:{shape[0]},{shape[1]};attention_mask:{shape[0]},{shape[1]}"  # each gear its own
    assert json.loads(bert_gears.get_attr("gear_options"))["dynamic_dims"] == BERT_GEARS["dynamic_dims"]
    report = xgraph.report(bert_gears)
    assert [(g["name"], g["input_shapes"]["input_ids"]) for g in report["gears"]] == [
        ("gear0", [1, 8]), ("gear1", [2, 16]), ("gear2", [1, 32])]
    assert report["gears"][0]["devices"] == report["devices"]
    assert report["gears"][2]["devices"] == xgraph.report(gears[2].graph)["devices"]


def test_gears_share_one_array_per_weight(bert_gears, bert):
    names = [i.name for i in bert.graph.initializer if i.name.endswith("_w")]
    gears = bert_gears.get_gears()
    for name in names:
        arrays = [g.graph.get_tensor(name).data for g in gears]
        assert all(a is arrays[0] for a in arrays), name
    counts = bert_gears.get_attr("gear_weights")
    assert counts["shared"] >= 2 * len(names) and counts["own"] <= 8  # only a few folded constants differ per gear


def test_a_vit_with_dynamic_batch_compiles_per_batch_size():
    tm = _builders("gear_large_models", "tests/large/conftest.py")
    model = tm.vit_like()
    g = xgraph.compile(model, {"input_shape": "pixel_values:-1,3,32,32", "dynamic_batch_size": "1,4"})
    for gear, batch in zip(g.get_gears(), (1, 4)):
        assert dict(gear.input_shapes) == {"pixel_values": (batch, 3, 32, 32)}
        assert gear.graph.get_output_tensors()[0].shape == (batch, 10)
        devices = _devices(gear.graph)
        assert all(devices[op.name] == "AICORE" for op in gear.graph.get_ops() if op.type in DENSE)
    with xgraph.create_graph_runner(g) as runner:
        import onnxruntime as ort
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for batch in (1, 4):
            x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
            (got,) = runner.run({"pixel_values": x})
            np.testing.assert_allclose(got, session.run(None, {"pixel_values": x})[0], rtol=1e-4, atol=1e-5)


def test_a_gear_error_names_the_gear():
    model = _builders("gear_compile_models2", "tests/compile/conftest.py").bert_like_encoder()
    # the mask shares the ids' symbolic dims, so naming the ids is enough to make the mask static too
    g = xgraph.compile(model, {"input_shape": "input_ids:-1,-1", "dynamic_dims": "1,8;2,8"})
    assert [t.shape for t in g.get_gears()[1].graph.get_input_tensors()] == [(2, 8), (2, 8)]
    with pytest.raises(OptionError, match=r"gear gear0 .*symbolic dim 'batch' two values"):
        xgraph.compile(model, {"input_shape": "input_ids:-1,8;attention_mask:-1,8", "dynamic_dims": "1,2;2,4"})
    two = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Concat", ["x", "y"], ["z"], axis=0)], "two",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["a", 4]),
         onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["b", 4])],
        [onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, None)]))
    with pytest.raises(OptionError, match=r"gear gear0 \(input_shape x:1,4\) leaves input 'y' with dynamic shape "
                                          r"\(b, 4\); name every input in option 'input_shape'"):
        xgraph.compile(two, {"input_shape": "x:-1,4", "dynamic_batch_size": "1,2"})
    fixed = _builders("gear_compile_models3", "tests/compile/conftest.py").chain([("Relu", {})])
    with pytest.raises(OptionError, match=r"gear gear0 .*sets dim 0 of 'x' to 2, but the model fixes it at 1"):
        xgraph.compile(fixed, {"input_shape": "x:-1,4,8,8", "dynamic_batch_size": "2,4"})


# ----------------------------------------------------------------------------- the .xmodel

def test_xmodel_stores_each_weight_once(bert, bert_gears, tmp_path):
    one = xgraph.compile(bert, {"input_shape": "input_ids:1,8;attention_mask:1,8"})
    one.serialize(tmp_path / "one.xmodel")
    bert_gears.serialize(tmp_path / "three.xmodel")
    weights = _weight_bytes(bert)
    single, geared = (tmp_path / "one.xmodel").stat().st_size, (tmp_path / "three.xmodel").stat().st_size
    assert single > weights  # the weights dominate the file
    # two more gears cost their nodes and metadata, far less than one more copy of the weights
    assert geared - single < 0.5 * weights, (single, geared, weights)


def test_xmodel_round_trip_keeps_every_gear_and_shares_weights_again(bert, bert_gears, tmp_path):
    path = tmp_path / "bert.xmodel"
    bert_gears.serialize(path)
    model = onnx.load(path)
    onnx.checker.check_model(model)  # onnx (and Netron) open it: gear 0 is the graph, the others functions
    import onnxruntime as ort
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])  # and runs it as gear 0
    with xgraph.create_graph_runner(bert_gears) as runner:
        np.testing.assert_allclose(session.run(None, _bert_feeds((1, 8)))[0], runner.run(_bert_feeds((1, 8)))[0],
                                   rtol=1e-4, atol=1e-5)
    assert [f.name for f in model.functions] == ["gear1", "gear2"]
    loaded = xgraph.load(path)
    assert [g.describe() for g in loaded.get_gears()] == [g.describe() for g in bert_gears.get_gears()]
    for before, after in zip(bert_gears.get_gears(), loaded.get_gears()):
        assert xgraph.report(after.graph)["subgraphs"] == xgraph.report(before.graph)["subgraphs"]
        assert [op.name for op in after.graph.get_ops()] == [op.name for op in before.graph.get_ops()]
    arrays = [g.graph.get_tensor("l0_q_w").data for g in loaded.get_gears()]
    assert all(a is arrays[0] for a in arrays)
    np.testing.assert_array_equal(arrays[0], bert_gears.get_tensor("l0_q_w").data)
    assert not loaded.functions and "xgraph.gear" not in loaded.opset_imports  # the gears are not model functions
    again = tmp_path / "again.xmodel"
    loaded.serialize(again)
    assert [g.describe() for g in xgraph.load(again).get_gears()] == [g.describe() for g in loaded.get_gears()]


def test_a_file_whose_gear_function_is_missing_is_refused(bert_gears, tmp_path):
    path = tmp_path / "bert.xmodel"
    bert_gears.serialize(path)
    model = onnx.load(path)
    del model.functions[1]
    damaged = tmp_path / "damaged.xmodel"
    onnx.save(model, damaged)
    with pytest.raises(ModelFileError, match=r"gear 'gear2' names function 'gear2', which the file does not carry"):
        xgraph.load(damaged)
    model = onnx.load(path)
    model.functions[0].input[2] = "no_such_weight"
    onnx.save(model, damaged)
    with pytest.raises(ModelFileError, match=r"gear function 'gear1' is damaged: it shares weight 'no_such_weight', "
                                             r"which the file does not carry"):
        xgraph.load(damaged)
    model = onnx.load(path)
    entry = next(p for p in model.metadata_props if p.key == "xgraph.gears")
    entry.value = entry.value.replace('"version": 1', '"version": 7')
    onnx.save(model, damaged)
    with pytest.raises(ModelFileError, match=r"gear list .* is damaged"):
        xgraph.load(damaged)


# ----------------------------------------------------------------------------- the runner

def test_the_runner_picks_the_gear_and_matches_onnxruntime(bert, bert_gears, tmp_path):
    import onnxruntime as ort
    session = ort.InferenceSession(bert.SerializeToString(), providers=["CPUExecutionProvider"])
    path = tmp_path / "bert.xmodel"
    bert_gears.serialize(path)
    for graph in (bert_gears, xgraph.load(path)):
        with xgraph.create_graph_runner(graph) as runner:
            for shape in BERT_SHAPES:
                feeds = _bert_feeds(shape)
                assert runner.select_gear(feeds).input_shapes["input_ids"] == shape
                (got,) = runner.run(feeds)
                (want,) = session.run(None, feeds)
                assert got.shape == (*shape, 64)
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
            stats = runner.get_stats()
            assert stats["jobs"]["OK"] == 3 and all(s["jobs"]["OK"] == 1 for s in stats["gears"].values())


def test_numpy_kernels_and_async_jobs_on_several_gears(bert, bert_gears):
    import onnxruntime as ort
    session = ort.InferenceSession(bert.SerializeToString(), providers=["CPUExecutionProvider"])
    with xgraph.create_graph_runner(bert_gears, kernels="numpy") as runner:
        feeds = [_bert_feeds(s, seed=i) for i, s in enumerate(BERT_SHAPES)]
        jobs = [runner.execute_async(f) for f in feeds]
        assert len({j[0] for j in jobs}) == 3
        for job, f in zip(jobs, feeds):
            assert runner.wait(job, timeout=60) == 0
            np.testing.assert_allclose(runner.get_outputs(job)[0], session.run(None, f)[0], rtol=1e-4, atol=1e-5)


def test_an_input_matching_no_gear_is_refused_with_the_gear_list(bert_gears):
    with xgraph.create_graph_runner(bert_gears) as runner:
        with pytest.raises(RunnerError, match=r"input shapes input_ids:1,9, attention_mask:1,9 match no gear; the "
                                              r"gears are: gear0 \(input_ids:1,8; attention_mask:1,8\), gear1 "
                                              r"\(input_ids:2,16; attention_mask:2,16\), gear2 \(input_ids:1,32; "
                                              r"attention_mask:1,32\)"):
            runner.run(_bert_feeds((1, 9)))
        mixed = {"input_ids": _bert_feeds((1, 8))["input_ids"],
                 "attention_mask": _bert_feeds((2, 16))["attention_mask"]}
        with pytest.raises(RunnerError, match="match no gear"):
            runner.execute_async(mixed)
        with pytest.raises(RunnerError, match="input 'attention_mask' is missing"):
            runner.run({"input_ids": _bert_feeds((1, 8))["input_ids"]})
        assert runner.get_stats()["jobs"]["OK"] == 0


# ----------------------------------------------------------------------------- command line

@pytest.fixture(scope="module")
def bert_xmodel(bert_gears, tmp_path_factory):
    path = tmp_path_factory.mktemp("gears") / "bert.xmodel"
    bert_gears.serialize(path)
    return path


def test_inspect_shows_each_gear_with_its_shapes_and_devices(bert_xmodel, capsys):
    from xgraph.cli.main import main
    assert main(["inspect", str(bert_xmodel)]) == 0
    lines = capsys.readouterr().out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("gears (3; the runtime picks the gear"))
    assert lines[start + 1].split() == ["gear0", "input_ids:1,8", "attention_mask:1,8"]
    assert lines[start + 3].split() == ["gear1", "input_ids:2,16", "attention_mask:2,16"]
    assert lines[start + 5].split() == ["gear2", "input_ids:1,32", "attention_mask:1,32"]
    loaded = xgraph.load(bert_xmodel)
    for i, gear in enumerate(loaded.get_gears()):
        report = xgraph.report(gear.graph)["devices"]
        per_device = ", ".join(f"{d} {e['subgraphs']} subgraph{'s' * (e['subgraphs'] != 1)} {e['ops']} op{'s' * (e['ops'] != 1)}"
                               for d, e in sorted(report.items(), key=lambda kv: kv[0] != "AICPU"))
        assert lines[start + 2 + 2 * i].strip() == \
            f"{gear.graph.get_op_num()} ops, {sum(e['subgraphs'] for e in report.values())} subgraphs: {per_device}"
    assert main(["inspect", str(bert_xmodel), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(g["name"], [t["shape"] for t in g["inputs"]]) for g in data["gears"]] == [
        ("gear0", [[1, 8], [1, 8]]), ("gear1", [[2, 16], [2, 16]]), ("gear2", [[1, 32], [1, 32]])]
    assert all(g["devices"]["AICORE"]["ops"] > g["devices"].get("AICPU", {"ops": 0})["ops"] for g in data["gears"])


def test_run_bench_and_verify_use_the_gears(bert, bert_xmodel, tmp_path, capsys):
    import onnxruntime as ort
    from xgraph.cli.main import main
    feeds = _bert_feeds((2, 16), seed=3)
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
    args = [f"--input={n}={tmp_path / (n + '.npy')}" for n in feeds]
    assert main(["run", str(bert_xmodel), *args, "-o", str(tmp_path / "out")]) == 0
    assert "gear gear1 (input_ids:2,16; attention_mask:2,16)" in capsys.readouterr().out
    session = ort.InferenceSession(bert.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(np.load(tmp_path / "out" / "l1_ln2.npy"), session.run(None, feeds)[0],
                               rtol=1e-4, atol=1e-5)
    assert main(["run", str(bert_xmodel), "--random", "--gear", "gear2"]) == 0
    assert "input_ids: int64 (1, 32)" in capsys.readouterr().out
    assert main(["run", str(bert_xmodel), "--random", "--gear", "gear9"]) == 2
    assert "--gear gear9: model 'bert_like' has no such gear; its gears are: gear0" in capsys.readouterr().err
    assert main(["verify", str(bert_xmodel), "--kernels", "numpy"]) == 0
    out = capsys.readouterr().out
    assert out.count("verify: PASS") == 3 and "gear gear2 (input_ids:1,32; attention_mask:1,32)" in out
    assert main(["bench", str(bert_xmodel), "--runs", "2", "--warmup", "0", "--jobs", "1", *args]) == 0
    out = capsys.readouterr().out
    assert out.count("latency over 2 runs") == 1 and "gear gear1" in out  # the files' gear only
    assert main(["explain", str(bert_xmodel), "l0_probs"]) == 0  # explains gear 0, compiled again from its options
    assert "AICORE" in capsys.readouterr().out


# ----------------------------------------------------------------------------- more shapes

def _cnn_dynamic_image() -> onnx.ModelProto:
    h = onnx.helper
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [h.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["r"], name="relu"),
             h.make_node("GlobalAveragePool", ["r"], ["y"], name="pool")]
    graph = h.make_graph(nodes, "cnn", [h.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, "h", "w"])],
                         [h.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 4, 1, 1])], initializer=[w])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def test_dynamic_image_size_compiles_each_resolution_and_runs_it():
    import onnxruntime as ort
    model = _cnn_dynamic_image()
    g = xgraph.compile(model, {"input_shape": "x:1,3,-1,-1", "dynamic_image_size": "8,8;16,12"})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [dict(gear.input_shapes) for gear in g.get_gears()] == [{"x": (1, 3, 8, 8)}, {"x": (1, 3, 16, 12)}]
    with xgraph.create_graph_runner(g) as runner:
        for gear in g.get_gears():
            assert _devices(gear.graph)["conv"] == "AICORE"
            x = np.random.default_rng(1).standard_normal(gear.input_shapes["x"]).astype(np.float32)
            np.testing.assert_allclose(runner.run({"x": x})[0], session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)
            np.testing.assert_allclose(runner.run([x.tolist()])[0], session.run(None, {"x": x})[0], rtol=1e-4,
                                       atol=1e-5)  # nested lists, in input order, pick their gear too
        with pytest.raises(RunnerError, match=r"input shapes x:1,3,12,16 match no gear"):
            runner.run({"x": np.zeros((1, 3, 12, 16), np.float32)})


def test_compiling_with_gears_leaves_the_model_unchanged(bert):
    before = bert.SerializeToString()
    xgraph.compile(bert, {"input_shape": "input_ids:1,-1;attention_mask:1,-1", "dynamic_dims": "4,4;8,8"})
    assert bert.SerializeToString() == before


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([-1, 1, 2, 3]), min_size=1, max_size=4), min_size=1, max_size=3),
       st.data())
def test_dynamic_dims_round_trip_and_fill_every_minus_one_in_order(dims, data):
    dims = [d if -1 in d else [*d, -1] for d in dims]  # every input has a dynamic dim
    shape = {f"in{i}": tuple(d) for i, d in enumerate(dims)}
    count = sum(d.count(-1) for d in dims)
    gears = data.draw(st.lists(st.tuples(*[st.integers(1, 64)] * count), min_size=2, max_size=6, unique=True))
    text = ";".join(",".join(map(str, g)) for g in gears)
    o = parse_options({"input_shape": shape, "dynamic_dims": text}, DEVICES)
    assert o.gears == tuple(gears) and parse_options(o.to_json(), DEVICES) == o
    for gear, filled in zip(gears, o.gear_shapes()):
        values = iter(gear)
        assert filled == {name: tuple(next(values) if d == -1 else d for d in s) for name, s in shape.items()}


def test_set_gears_checks_the_gears_fit_the_model(bert_gears):
    from xgraph.errors import GraphError
    from xgraph.ir.gears import Gear
    gears = bert_gears.get_gears()
    with pytest.raises(GraphError, match=r"gear 0 \('gear1'\) must be the graph itself"):
        bert_gears.set_gears(gears[1:])
    with pytest.raises(GraphError, match=r"two gears are named 'gear0'"):
        bert_gears.set_gears([gears[0], Gear("gear0", gears[1].input_shapes, gears[1].graph)])
    with pytest.raises(GraphError, match=r"gear 'gear1' records input shapes .* but its graph's inputs are"):
        bert_gears.set_gears([gears[0], Gear("gear1", gears[2].input_shapes, gears[1].graph)])
    with pytest.raises(GraphError, match=r"gears 'gear0' and 'again' have the same input shapes"):
        bert_gears.set_gears([gears[0], Gear("again", gears[0].input_shapes, gears[0].graph)])
    assert [g.graph for g in bert_gears.get_gears()] == [g.graph for g in gears]  # a refused set_gears changes nothing
    assert bert_gears.find_gear({"input_ids": (2, 16), "attention_mask": (2, 16)}) is gears[1]
    assert bert_gears.find_gear({"input_ids": (2, 17), "attention_mask": (2, 17)}) is None


def test_gpt2_with_dynamic_sequence_gears_on_aicore_and_equal_to_onnxruntime(tmp_path):
    import onnxruntime as ort
    tm = _builders("gear_large_models2", "tests/large/conftest.py")
    model = tm.gpt2_like()
    g = xgraph.compile(model, {"input_shape": "input_ids:1,-1", "dynamic_dims": "8;16"})
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    folded = [gear.graph.get_tensor("wte_t") for gear in g.get_gears() if gear.graph.has_tensor("wte_t")]
    if len(folded) == 2:  # the tied head's Transpose of the embedding, folded in each gear alike: held once
        assert folded[0].data is folded[1].data
    path = tmp_path / "gpt2.xmodel"
    g.serialize(path)
    with xgraph.create_graph_runner(xgraph.load(path)) as runner:
        for gear, seq in zip(runner.gears, (8, 16)):
            devices = _devices(gear.graph)
            assert not [op for op in gear.graph.get_ops() if op.type == "Shape"]
            assert all(devices[op.name] == "AICORE" for op in gear.graph.get_ops() if op.type in DENSE)
            ids = np.random.default_rng(seq).integers(0, 64, (1, seq)).astype(np.int64)
            np.testing.assert_allclose(runner.run({"input_ids": ids})[0], session.run(None, {"input_ids": ids})[0],
                                       rtol=1e-4, atol=1e-4)


def test_array_attrs_of_a_gear_survive_the_round_trip(bert, tmp_path):
    g = xgraph.compile(bert, {"input_shape": "input_ids:1,-1;attention_mask:1,-1", "dynamic_dims": "4,4;8,8"})
    gear1 = g.get_gears()[1].graph
    child = gear1.get_root_subgraph().toposort_child_subgraph()[-1]
    child.set_attr("calibration", np.arange(6, dtype=np.float32).reshape(2, 3))
    g.get_root_subgraph().toposort_child_subgraph()[-1].set_attr("calibration", np.ones(2, np.float32))
    g.serialize(tmp_path / "m.xmodel")
    loaded = xgraph.load(tmp_path / "m.xmodel")
    again = loaded.get_gears()[1].graph.get_subgraph(child.name).get_attr("calibration")
    np.testing.assert_array_equal(again, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(loaded.get_subgraph(child.name).get_attr("calibration"), np.ones(2, np.float32))


# ----------------------------------------------------------------------------- KV-cache decoding over past-length gears

TOKENS = 16


def _decoder_gears() -> tuple[onnx.ModelProto, dict]:
    model = _builders("gear_generate_model", "samples/generate/make_model.py").gpt2_like(past=True)
    pasts = [f"past_l{i}_{kv}" for i in range(2) for kv in "kv"]
    options = {"input_shape": "input_ids:1,1;position_ids:1,1;" + ";".join(f"{p}:1,4,-1,8" for p in pasts),
               "dynamic_dims": ";".join(",".join([str(n)] * len(pasts)) for n in range(TOKENS))}
    return model, options


def _greedy(step, names, tokens=TOKENS):
    past = {f"past_l{i}_{kv}": np.zeros((1, 4, 0, 8), np.float32) for i in range(2) for kv in "kv"}
    token, generated = 0, []
    for position in range(tokens):
        out = dict(zip(names, step({"input_ids": np.array([[token]]), "position_ids": np.array([[position]]),
                                    **past})))
        past = {"past" + k[len("present"):]: v for k, v in out.items() if k.startswith("present")}
        token = int(np.argmax(out["logits"][0, -1]))
        generated.append(token)
    return generated


def test_a_kv_cache_decoder_generates_on_past_length_gears_token_for_token_as_onnxruntime():
    import onnxruntime as ort
    model, options = _decoder_gears()
    g = xgraph.compile(model, options)  # the first step's empty past is gear 0 (a dim of 0)
    assert [gear.input_shapes["past_l0_k"][2] for gear in g.get_gears()] == list(range(TOKENS))
    for gear in g.get_gears():  # static at every step: the whole step, embeddings included, is on AI Core
        devices = _devices(gear.graph)
        assert set(devices.values()) == {"AICORE"} and gear.graph.get_root_subgraph().get_children_num() == 1
    names = [t.name for t in g.get_output_tensors()]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = _greedy(lambda feeds: session.run(names, feeds), names)
    assert len(set(expected)) > 1  # the random weights do not settle on one token: equality means something
    with xgraph.create_graph_runner(g) as runner:
        assert _greedy(runner.run, names) == expected
        # one graph but for shapes (the one-token causal mask folded away): one onnxruntime session
        assert len({id(r._executor._backend._session) for r in runner.runners.values()}) == 1
        with pytest.raises(RunnerError, match=r"match no gear.*gear15 \(input_ids:1,1; position_ids:1,1; "
                                              r"past_l0_k:1,4,15,8"):
            _greedy(runner.run, names, tokens=TOKENS + 1)  # one step past the last gear


def test_bench_generate_runs_the_past_length_gears(tmp_path, capsys):
    from xgraph.cli.main import main
    model, options = _decoder_gears()
    path = tmp_path / "decoder.onnx"
    onnx.save(model, path)
    assert main(["bench", str(path), "--generate", "8", "--options", json.dumps(options)]) == 0
    assert "tokens equal" in capsys.readouterr().out
    xmodel = tmp_path / "decoder.xmodel"
    xgraph.compile(model, options).serialize(xmodel)
    assert main(["bench", str(xmodel), "--generate", "8"]) == 2
    assert "was compiled with gears, and onnxruntime's loop needs the dynamic model" in capsys.readouterr().err


def test_a_profiled_gear_runner_writes_one_trace_process_per_gear(bert_gears, tmp_path):
    with xgraph.create_graph_runner(bert_gears, profile=True) as runner:
        for shape in BERT_SHAPES[:2]:
            runner.run(_bert_feeds(shape))
        runner.export_chrome_trace(tmp_path / "trace.json")
    events = json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {1: "xgraph bert_like gear0", 2: "xgraph bert_like gear1", 3: "xgraph bert_like gear2"}
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {1, 2}  # gear2 never ran


def test_gears_with_weights_in_the_side_file_round_trip_and_run(bert, bert_gears, tmp_path):
    import onnxruntime as ort
    path = tmp_path / "bert.xmodel"
    bert_gears.serialize(path, external_data_threshold=0)  # every weight of 4 KiB or more to the side file
    (side,) = side_files(path)
    assert side.stat().st_size >= 0.9 * _weight_bytes(bert)  # the shared weights went there, once
    assert path.stat().st_size < 0.2 * _weight_bytes(bert)  # nodes of 3 gears, small weights, folded constants
    loaded = xgraph.load(path)
    assert [g.describe() for g in loaded.get_gears()] == [g.describe() for g in bert_gears.get_gears()]
    arrays = [g.graph.get_tensor("l0_q_w").data for g in loaded.get_gears()]
    assert all(a is arrays[0] for a in arrays) and not arrays[0].flags.writeable  # one read-only mapping
    session = ort.InferenceSession(bert.SerializeToString(), providers=["CPUExecutionProvider"])
    with xgraph.create_graph_runner(loaded) as runner:
        for shape in BERT_SHAPES:
            feeds = _bert_feeds(shape)
            np.testing.assert_allclose(runner.run(feeds)[0], session.run(None, feeds)[0], rtol=1e-4, atol=1e-5)


def test_many_gears_are_listed_in_short_with_the_dims_that_differ():
    from xgraph.ir.gears import GEARS_LISTED, Gear, describe_gears
    few = [Gear(f"gear{i}", {"x": (1, 8 * (i + 1))}, None) for i in range(3)]
    assert describe_gears(few) == "gear0 (x:1,8), gear1 (x:1,16), gear2 (x:1,24)"
    many = [Gear(f"gear{i}", {"ids": (1, 1), "past": (1, 4, i, 8), "b": (2 ** (i % 4), 3)}, None) for i in range(50)]
    text = describe_gears(many)
    assert len(many) > GEARS_LISTED and text.count("gear") == 5 + 1  # 3 first, 2 last, "(50 gears"
    assert text.startswith("gear0 (ids:1,1; past:1,4,0,8; b:1,3), gear1 (") and "... 45 more ..." in text
    assert "gear49 (ids:1,1; past:1,4,49,8; b:2,3)" in text
    assert text.endswith("(50 gears; past dim 2: 0..49; b dim 0: 1,2,4,8)")
