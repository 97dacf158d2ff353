"""External data without copies: weights mapped from their data file on import, never copied by
compile, and .xmodel files that keep large weights in a side file (forced here with a small
`external_data_threshold`, so the models stay tiny)."""
from __future__ import annotations

import os
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import ModelFileError
from xgraph.ir.onnx.mapped import is_mapped, origin
from xgraph.ir.onnx.side_file import side_files


def side_of(xmodel):
    """The one side file beside `xmodel` (named by the save that wrote it), or None."""
    found = side_files(xmodel)
    assert len(found) <= 1, found
    return found[0] if found else None

N = 64  # 64x64 float32 weights: 16 KiB each, above the mapping minimum


def mlp_model(layers: int = 3, n: int = N, seed: int = 0) -> tuple[onnx.ModelProto, list[np.ndarray]]:
    """x -> (MatMul w_i -> Relu) * layers, with a small inline bias to keep a non-mapped weight around."""
    rng = np.random.default_rng(seed)
    weights = [(rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32) for _ in range(layers)]
    inits = [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)]
    inits.append(numpy_helper.from_array(np.full((n,), 0.5, np.float32), "bias"))
    nodes, x = [], "x"
    for i in range(layers):
        nodes.append(helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        x = f"r{i}"
    nodes.append(helper.make_node("Add", [x, "bias"], ["y"], name="add_bias"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, n])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), weights


def oracle(weights: list[np.ndarray], x: np.ndarray) -> np.ndarray:
    for w in weights:
        x = np.maximum(x @ w, 0)
    return x + np.float32(0.5)


@pytest.fixture
def external_model(tmp_path):
    model, weights = mlp_model()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="mlp.onnx.data",
              size_threshold=1024)
    return path, weights


def _weights(graph) -> dict[str, np.ndarray]:
    return {t.name: t.data for t in graph.get_tensors() if t.is_const}


# -- import ---------------------------------------------------------------------------------------

def test_import_maps_large_weights_read_only_over_the_file(external_model):
    path, weights = external_model
    g = xgraph.load(path)
    data = _weights(g)
    data_file = path.parent / "mlp.onnx.data"
    for i, w in enumerate(weights):
        a = data[f"w{i}"]
        np.testing.assert_array_equal(a, w)
        assert is_mapped(a) and not a.flags.writeable
        mapped, offset = origin(a)
        assert mapped.path == data_file.resolve()
        # the array is the file's bytes at its recorded offset, not a copy of them
        assert bytes(mapped[offset:offset + a.nbytes]) == w.tobytes()
        with pytest.raises(ValueError):
            a[0, 0] = 1.0
    assert not is_mapped(data["bias"])  # small tensors stay inline


def test_import_shares_one_mapping_per_file(external_model):
    path, _ = external_model
    data = _weights(xgraph.load(path))
    files = {id(origin(data[f"w{i}"])[0]) for i in range(3)}
    assert len(files) == 1


def test_compile_keeps_weights_mapped(external_model):
    path, weights = external_model
    compiled = xgraph.compile(path)
    data = _weights(compiled)
    for i, w in enumerate(weights):
        assert is_mapped(data[f"w{i}"])
        np.testing.assert_array_equal(data[f"w{i}"], w)


def test_compile_and_save_allocate_less_than_one_weight(tmp_path):
    """Import, compile (folding, placement, kernels, report) and saving with a side file never
    copy a weight: traced allocations stay under the size of a single one."""
    import tracemalloc

    from xgraph.compiler.report import report
    model, weights = mlp_model(layers=4, n=1024)
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.onnx.data")
    one_weight = weights[0].nbytes
    tracemalloc.start()
    try:
        compiled = xgraph.compile(tmp_path / "m.onnx")
        report(compiled)
        compiled.serialize(tmp_path / "m.xmodel", external_data_threshold=0)
        again = xgraph.compile(xgraph.load(tmp_path / "m.xmodel"))  # compiling an .xmodel again
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < one_weight, f"{peak} bytes allocated at peak, a weight is {one_weight}"
    assert all(is_mapped(a) for name, a in _weights(again).items() if name != "bias")


def test_small_integer_tensors_are_read_not_mapped(tmp_path, monkeypatch):
    """Shape-like integer tensors (up to 4096 elements) are read as before: shape inference's
    checks read their values, and they must never be looked up relative to the working folder."""
    idx = np.arange(1000, dtype=np.int64) % 7
    g = helper.make_graph([helper.make_node("Gather", ["x", "idx"], ["y"], name="g", axis=1)], "gather",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 7])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(idx, "idx")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    (tmp_path / "m").mkdir()
    onnx.save(model, tmp_path / "m" / "g.onnx", save_as_external_data=True, location="g.data", size_threshold=0)
    monkeypatch.chdir(tmp_path)  # a working folder without g.data
    loaded = xgraph.load(tmp_path / "m" / "g.onnx")
    data = _weights(loaded)["idx"]
    np.testing.assert_array_equal(data, idx)
    assert not is_mapped(data)
    assert loaded.get_tensor("y").shape == (1, 1000)


def test_truncated_data_file_is_a_model_file_error(external_model):
    path, _ = external_model
    data_file = path.parent / "mlp.onnx.data"
    size = data_file.stat().st_size
    os.truncate(data_file, size - 100)
    with pytest.raises(ModelFileError, match=r"mlp\.onnx\.data"):
        xgraph.load(path)


def test_data_file_with_two_hard_links_is_refused(external_model):
    path, _ = external_model
    os.link(path.parent / "mlp.onnx.data", path.parent / "alias.data")
    with pytest.raises(ModelFileError, match="hard link"):
        xgraph.load(path)


def test_symlink_out_of_the_folder_is_refused(external_model, tmp_path_factory):
    path, _ = external_model
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "real.data"
    data_file = path.parent / "mlp.onnx.data"
    os.replace(data_file, elsewhere)
    os.symlink(elsewhere, data_file)
    with pytest.raises(ModelFileError, match="outside"):
        xgraph.load(path)


# -- .xmodel with a side file ---------------------------------------------------------------------

def _ort(model_path, x):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.fixture
def compiled_pair(external_model, tmp_path):
    """The external-data model compiled with the side file forced on, saved as out.xmodel + its side file."""
    path, weights = external_model
    compiled = xgraph.compile(path, {"external_data_threshold": 0})
    out = tmp_path / "out.xmodel"
    compiled.serialize(out)
    return out, weights


@pytest.mark.parametrize("kernels", ["numpy", "auto"])
def test_round_trip_runs_like_onnxruntime(external_model, compiled_pair, kernels):
    path, weights = external_model
    out, _ = compiled_pair
    side = side_of(out)
    assert side.is_file() and side.stat().st_size > sum(w.nbytes for w in weights)
    loaded = xgraph.load(out)
    data = _weights(loaded)
    for i, w in enumerate(weights):
        assert is_mapped(data[f"w{i}"]) and origin(data[f"w{i}"])[0].path == side.resolve()
    x = np.random.default_rng(1).standard_normal((1, N)).astype(np.float32)
    got = xgraph.create_graph_runner(loaded, mode="run", kernels=kernels).run({"x": x})[0]
    np.testing.assert_allclose(got, _ort(path, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, oracle(weights, x), rtol=1e-4, atol=1e-5)


def test_side_file_follows_onnx_external_data_convention(compiled_pair):
    out, weights = compiled_pair
    model = onnx.load(str(out))  # onnx's own loader reads the side file
    arrays = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for i, w in enumerate(weights):
        np.testing.assert_array_equal(arrays[f"w{i}"], w)
    header = onnx.load(str(out), load_external_data=False)
    refs = {t.name: {e.key: e.value for e in t.external_data} for t in header.graph.initializer
            if t.data_location == TensorProto.EXTERNAL}
    assert {refs[f"w{i}"]["location"] for i in range(3)} == {side_of(out).name}
    assert all(int(refs[f"w{i}"]["offset"]) % 4096 == 0 for i in range(3))
    assert "bias" not in refs  # small weights stay inline


def test_default_threshold_keeps_small_models_inline(external_model, tmp_path):
    path, _ = external_model
    out = tmp_path / "inline.xmodel"
    xgraph.compile(path).serialize(out)
    assert side_of(tmp_path / "inline.xmodel") is None
    model = onnx.load(str(out), load_external_data=False)
    assert all(t.data_location != TensorProto.EXTERNAL for t in model.graph.initializer)


def test_serialize_threshold_argument_overrides_the_compile_option(external_model, tmp_path):
    path, _ = external_model
    compiled = xgraph.compile(path, {"external_data_threshold": 0})
    compiled.serialize(tmp_path / "a.xmodel", external_data_threshold=1 << 40)
    assert side_of(tmp_path / "a.xmodel") is None
    xgraph.compile(path).serialize(tmp_path / "b.xmodel", external_data_threshold=0)
    assert side_of(tmp_path / "b.xmodel") is not None


def test_saving_mapped_weights_copies_file_to_file(compiled_pair, tmp_path):
    """Saving a loaded pair again gives the same weights (read back through a fresh mapping)."""
    out, weights = compiled_pair
    again = tmp_path / "again.xmodel"
    xgraph.load(out).serialize(again, external_data_threshold=0)
    data = _weights(xgraph.load(again))
    for i, w in enumerate(weights):
        np.testing.assert_array_equal(data[f"w{i}"], w)
        assert origin(data[f"w{i}"])[0].path == side_of(again).resolve()


def test_truncated_side_file_is_a_model_file_error_naming_it(compiled_pair):
    out, _ = compiled_pair
    side = side_of(out)
    os.truncate(side, side.stat().st_size - 1)
    with pytest.raises(ModelFileError, match=re.escape(side.name)):
        xgraph.load(out)


def test_side_file_symlink_out_of_the_folder_is_refused(compiled_pair, tmp_path_factory):
    out, _ = compiled_pair
    side = side_of(out)
    elsewhere = tmp_path_factory.mktemp("other") / "stolen.data"
    os.replace(side, elsewhere)
    os.symlink(elsewhere, side)
    with pytest.raises(ModelFileError, match="outside"):
        xgraph.load(out)


def test_side_file_location_with_traversal_is_refused(compiled_pair, tmp_path):
    out, _ = compiled_pair
    model = onnx.load(str(out), load_external_data=False)
    for t in model.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../out.xmodel.data"
    evil = tmp_path / "evil.xmodel"
    evil.write_bytes(model.SerializeToString())
    with pytest.raises(ModelFileError, match=r"'\.\.'"):
        xgraph.load(evil)


def test_side_file_of_another_save_is_refused(external_model, tmp_path):
    path, _ = external_model
    compiled = xgraph.compile(path, {"external_data_threshold": 0})
    compiled.serialize(tmp_path / "one.xmodel")
    compiled.serialize(tmp_path / "two.xmodel")
    one = side_of(tmp_path / "one.xmodel")
    os.replace(side_of(tmp_path / "two.xmodel"), one)  # same layout, other save
    os.rename(tmp_path / "two.xmodel", tmp_path / "spare.xmodel")
    with pytest.raises(ModelFileError, match=f"side data file '{one.name}' was not written with this"):
        xgraph.load(tmp_path / "one.xmodel")


def test_failed_save_leaves_the_previous_pair(external_model, compiled_pair, monkeypatch):
    out, weights = compiled_pair
    side = side_of(out)
    before = (out.read_bytes(), side.read_bytes())
    other, _ = mlp_model(seed=7)
    changed = xgraph.compile(other, {"external_data_threshold": 0})

    from xgraph.ir.onnx import side_file

    def fail(fd, array, offset):  # the disk fills up halfway through the side file
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(side_file, "copy_array", fail)
    with pytest.raises(xgraph.errors.OutputFileError, match="No space left"):
        changed.serialize(out)
    assert (out.read_bytes(), side.read_bytes()) == before
    assert sorted(p.name for p in out.parent.iterdir() if p.name.startswith(".")) == []
    np.testing.assert_array_equal(_weights(xgraph.load(out))["w0"], weights[0])


def test_failed_xmodel_write_after_the_side_file_leaves_the_previous_pair(compiled_pair, monkeypatch):
    out, weights = compiled_pair
    side = side_of(out)
    before = (out.read_bytes(), side.read_bytes())
    other, _ = mlp_model(seed=7)
    changed = xgraph.compile(other, {"external_data_threshold": 0})

    from xgraph.ir import files
    real_replace = os.replace
    calls = []

    def replace(src, dst, *args, **kwargs):  # the one rename (the .xmodel's) fails
        calls.append(dst)
        if len(calls) == 1:
            raise OSError(5, "Input/output error")
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(files.os, "replace", replace)
    with pytest.raises(xgraph.errors.OutputFileError):
        changed.serialize(out)
    monkeypatch.undo()
    assert (out.read_bytes(), side.read_bytes()) == before
    assert side_files(out) == [side]  # the new side file went with the failed save
    np.testing.assert_array_equal(_weights(xgraph.load(out))["w0"], weights[0])


def test_links_named_like_side_files_are_never_written_through(external_model, tmp_path, monkeypatch):
    """A link where the save's side file would go makes it pick another name; a link with the old
    naming is left as it is (never followed, never removed)."""
    from xgraph.ir.onnx import side_file, xmodel
    path, _ = external_model
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.symlink(victim, tmp_path / "out2.xmodel.data")
    taken = side_file.side_name(tmp_path / "out2.xmodel", bytes(16))
    os.symlink(victim, taken)
    names = iter([bytes(16)])
    real = side_file.SideLayout

    def first_token_taken(location):  # the first save's token names the planted link
        layout = real(location)
        layout.token = next(names, layout.token)
        return layout

    monkeypatch.setattr(xmodel, "SideLayout", first_token_taken)
    compiled = xgraph.compile(path, {"external_data_threshold": 0})
    compiled.serialize(tmp_path / "out2.xmodel")
    assert victim.read_text() == "keep me"
    assert os.path.islink(tmp_path / "out2.xmodel.data") and os.path.islink(taken)
    written = [p for p in side_files(tmp_path / "out2.xmodel") if not p.is_symlink()]
    assert len(written) == 1 and written[0] != taken
    assert _weights(xgraph.load(tmp_path / "out2.xmodel"))["w0"].shape == (64, 64)


def test_xcompile_option_writes_the_pair(external_model, tmp_path):
    from xgraph.cli.xcompile import main
    path, weights = external_model
    out = tmp_path / "cli.xmodel"
    assert main([str(path), "-o", str(out), "-q", "--options", '{"external_data_threshold": "1K"}']) == 0
    assert side_of(tmp_path / "cli.xmodel").is_file()
    data = _weights(xgraph.load(out))
    np.testing.assert_array_equal(data["w2"], weights[2])


def test_bad_threshold_is_an_option_error(external_model):
    path, _ = external_model
    with pytest.raises(xgraph.errors.OptionError, match="external_data_threshold"):
        xgraph.compile(path, {"external_data_threshold": "lots"})


# -- subgraph export and onnxruntime sessions -----------------------------------------------------

def test_subgraph_export_with_external_weights_leaves_large_weights_out(external_model):
    path, weights = external_model
    compiled = xgraph.compile(path)
    (sg,) = compiled.get_root_subgraph().get_children()
    inline = sg.to_onnx()
    light = sg.to_onnx(external_weights=True)
    refs = {t.name for t in light.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    assert refs == {"w0", "w1", "w2"}
    assert light.ByteSize() < inline.ByteSize() - sum(w.nbytes for w in weights) + 4096
    assert {t.name for t in inline.graph.initializer} == {t.name for t in light.graph.initializer}


def test_onnxruntime_session_takes_the_mapped_weights(compiled_pair, external_model):
    pytest.importorskip("onnxruntime")
    path, weights = external_model
    out, _ = compiled_pair
    runner = xgraph.create_graph_runner(xgraph.load(out), mode="run", kernels="onnxruntime")
    x = np.random.default_rng(2).standard_normal((1, N)).astype(np.float32)
    np.testing.assert_allclose(runner.run({"x": x})[0], oracle(weights, x), rtol=1e-4, atol=1e-5)
    assert {choice.source for choice in runner.kernel_choices().values()} == {"onnxruntime"}


def test_onnxruntime_session_takes_in_memory_weights_as_ort_values():
    pytest.importorskip("onnxruntime")
    model, weights = mlp_model(seed=3)
    runner = xgraph.create_graph_runner(xgraph.compile(model), mode="run", kernels="onnxruntime")
    x = np.random.default_rng(4).standard_normal((1, N)).astype(np.float32)
    np.testing.assert_allclose(runner.run({"x": x})[0], oracle(weights, x), rtol=1e-4, atol=1e-5)


def test_data_file_replaced_before_the_session_opens_it_is_refused(compiled_pair, tmp_path):
    pytest.importorskip("onnxruntime")
    out, weights = compiled_pair
    loaded = xgraph.load(out)
    side = side_of(out)
    swapped = tmp_path / "swapped.data"
    swapped.write_bytes(side.read_bytes())  # the same bytes, another file
    os.replace(swapped, side)
    with pytest.raises(xgraph.errors.XGraphError, match=r"out\.xmodel\.[0-9a-f]{16}\.data' was replaced"):
        xgraph.create_graph_runner(loaded, mode="run", kernels="onnxruntime")
    # auto falls back to xgraph's kernels, which read the mapped file: the one that was checked
    x = np.random.default_rng(5).standard_normal((1, N)).astype(np.float32)
    runner = xgraph.create_graph_runner(loaded, mode="run", kernels="auto")
    np.testing.assert_allclose(runner.run({"x": x})[0], oracle(weights, x), rtol=1e-4, atol=1e-5)


# -- over 2 GiB -----------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("XGRAPH_RUN_SLOW"), reason="writes 4.4 GB to disk; set XGRAPH_RUN_SLOW=1")
def test_model_over_two_gib_compiles_saves_loads_and_runs(tmp_path):
    """33 layers of 4096x4096 float32 (2.2 GB, past protobuf's 2 GiB): the side file is used even
    with a threshold above the weights, and the run equals numpy over the original data file."""
    from pathlib import Path

    from testing.runtime import load_script
    bench = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "large_model.py", "large_model")
    layers, n = 33, bench.N
    weight_bytes = bench.generate(tmp_path / "big.onnx", layers)
    assert weight_bytes > 1 << 31
    compiled = xgraph.compile(tmp_path / "big.onnx", {"external_data_threshold": 1 << 40})
    compiled.serialize(tmp_path / "big.xmodel")
    assert (tmp_path / "big.xmodel").stat().st_size < 1 << 20
    assert side_of(tmp_path / "big.xmodel").stat().st_size >= weight_bytes
    from xgraph.cli.main import main  # verify: both kernels paths against references over the data file
    assert main(["verify", str(tmp_path / "big.onnx")]) == 0
    (tmp_path / "big.onnx.data").rename(tmp_path / "original.data")  # the loaded pair must not need it
    loaded = xgraph.load(tmp_path / "big.xmodel")
    x = np.random.default_rng(1).standard_normal((1, n)).astype(np.float32)
    got = xgraph.create_graph_runner(loaded, mode="run", kernels="numpy").run({"x": x})[0]
    reference = xgraph.create_graph_runner(loaded, mode="ref").run({"x": x})[0]  # the evaluator, weights as inputs
    original = np.memmap(tmp_path / "original.data", dtype=np.float32, mode="r", shape=(layers, n, n))
    want = x
    for i in range(layers):
        want = np.maximum(want @ original[i], 0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(reference, want, rtol=1e-4, atol=1e-4)


def test_ray_actors_get_the_weights_inline(compiled_pair, tmp_path):
    """The Ray runner ships .xmodel bytes to its actors: a pair becomes one inline .xmodel."""
    from xgraph.ray.graph_runner import model_bytes
    out, weights = compiled_pair
    for source in (out, xgraph.load(out)):
        data = model_bytes(source)
        model = onnx.ModelProto.FromString(data)
        assert all(t.data_location != TensorProto.EXTERNAL for t in model.graph.initializer)
        np.testing.assert_array_equal(_weights(xgraph.load(data))["w1"], weights[1])
