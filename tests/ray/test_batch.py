"""Batch inference over Ray Datasets (xgraph.ray.map_batches, ModelReplica) and `xgraph run --input-dir --ray`.

Every output row is checked against the local graph runner's output for the same input.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray", reason="xgraph.ray needs Ray (pip install 'xgraph[ray]')")

import xgraph  # noqa: E402
import xgraph.ray  # noqa: E402
from xgraph.errors import RunnerError, XGraphError  # noqa: E402

pytestmark = pytest.mark.xdist_group("ray")


def test_jpeg_files_through_the_dvpp_subgraph_equal_the_local_runner(cluster, models, expected):
    files = [str(models.sample / "images" / name) for name in models.jpegs] * 4
    dataset = ray.data.read_binary_files(files, include_paths=True, num_cpus=0)
    with pytest.warns(RuntimeWarning, match="reserve all 2 CPUs"):  # harmless here: the reads take no CPU
        out = xgraph.ray.map_batches(dataset, models.classifier_path, batch_size=5, concurrency=2, progress=False)
    rows = out.take_all()
    assert len(rows) == len(files)
    for row in rows:
        scores, labels = expected.classifier[Path(row["path"]).name]
        np.testing.assert_array_equal(row["scores"], scores)
        assert row["scores"].dtype == scores.dtype
        assert row["labels"].tolist() == labels.tolist()
    assert set(rows[0]) == {"path", "scores", "labels"}


def test_rows_without_the_batch_dim_get_it_and_lose_it_on_the_outputs(cluster, models, expected):
    feeds = [models.encoder_feeds(seed) for seed in range(12)]
    dataset = ray.data.from_items([{"seed": seed, "input_ids": f["input_ids"][0],
                                    "attention_mask": f["attention_mask"][0]} for seed, f in enumerate(feeds)])
    out = xgraph.ray.map_batches(dataset, models.encoder, batch_size=4, keep_columns=("seed",), progress=False)
    rows = out.take_all()
    assert sorted(r["seed"] for r in rows) == list(range(12))
    for row in rows:
        (want,) = expected.encoder[row["seed"]]
        assert row[models.encoder_output].shape == want.shape[1:]
        np.testing.assert_array_equal(row[models.encoder_output], want[0])


def test_failed_rows_are_recorded_and_the_others_run(cluster, models, expected):
    good = models.jpegs["sample1.jpg"]
    dataset = ray.data.from_items([{"name": "good", "jpeg": good}, {"name": "cut", "jpeg": good[:300]},
                                   {"name": "good2", "jpeg": good}])
    recorded = xgraph.ray.map_batches(dataset, models.classifier, keep_columns=("name",), on_error="record",
                                      progress=False).take_all()
    by_name = {r["name"]: r for r in recorded}
    assert by_name["good"]["error"] == "" and by_name["good2"]["error"] == ""
    np.testing.assert_array_equal(by_name["good"]["scores"], expected.classifier["sample1.jpg"][0])
    assert "subgraph 'subgraph_decode' on DVPP" in by_name["cut"]["error"] and by_name["cut"]["scores"] is None


def test_model_replica_is_a_plain_callable_for_dataset_map_batches(models, expected):
    good = models.jpegs["sample2.jpg"].tobytes()
    batch = {"bytes": np.array([good, good[:300], good], dtype=object), "path": np.array(["a.jpg", "b.jpg", "c.jpg"])}
    out = xgraph.ray.ModelReplica(models.classifier_path.read_bytes(), on_error="skip")(batch)
    assert list(out) == ["path", "scores", "labels"] and out["path"].tolist() == ["a.jpg", "c.jpg"]
    for scores in out["scores"]:
        np.testing.assert_array_equal(scores, expected.classifier["sample2.jpg"][0])
    with pytest.raises(XGraphError, match="JpegDecode"):
        xgraph.ray.ModelReplica(models.classifier)(batch)  # on_error="raise": the batch fails, naming the op


def test_bad_arguments_are_refused_before_any_work(cluster, models):
    dataset = ray.data.from_items([{"x": 1}])
    with pytest.raises(RunnerError, match="concurrency"):
        xgraph.ray.map_batches(dataset, models.classifier, concurrency=0)
    with pytest.raises(RunnerError, match="on_error"):
        xgraph.ray.map_batches(dataset, models.classifier, on_error="ignore")
    with pytest.raises(RunnerError, match="not an input"):
        xgraph.ray.map_batches(dataset, models.classifier, columns={"pixels": "x"})
    with pytest.raises(RunnerError, match="Ray Dataset"):
        xgraph.ray.map_batches([1, 2], models.classifier)
    with pytest.raises(XGraphError, match="compile it first"):
        xgraph.ray.map_batches(dataset, xgraph.Graph.from_onnx(models.sample / "classifier.onnx"))
    with pytest.raises(RunnerError, match="no column for input 'jpeg'"):
        xgraph.ray.ModelReplica(models.classifier)({"a": np.zeros(1), "b": np.zeros(1)})


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xgraph.cli.main", "run", *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})


def test_cli_runs_a_folder_on_ray_with_the_outputs_of_the_local_run(cluster, models, tmp_path):
    images = tmp_path / "images"
    images.mkdir()
    for name, jpeg in models.jpegs.items():
        (images / name).write_bytes(jpeg.tobytes())
    (images / "broken.jpg").write_bytes(b"not a picture")
    local = _cli(str(models.classifier_path), "--input-dir", str(images), "--output-dir", str(tmp_path / "local"))
    on_ray = _cli(str(models.classifier_path), "--input-dir", str(images), "--output-dir", str(tmp_path / "ray"),
                  "--ray", cluster.address, "--concurrency", "2", "--batch-size", "2")
    for result in (local, on_ray):
        assert result.returncode == 1, result.stderr  # broken.jpg failed; the others ran
        assert "3 of 4 files ran" in result.stdout and "failed: broken.jpg" in result.stdout
        assert "broken.jpg: error:" in result.stdout and "subgraph 'subgraph_decode' on DVPP" in result.stdout
    assert "on Ray (2 replicas)" in on_ray.stdout
    for name in models.jpegs:
        stem = Path(name).stem
        for output in ("scores", "labels"):
            want = np.load(tmp_path / "local" / stem / f"{output}.npy")
            np.testing.assert_array_equal(np.load(tmp_path / "ray" / stem / f"{output}.npy"), want)
    assert not (tmp_path / "ray" / "broken").exists()


def test_cli_on_ray_reports_each_unreadable_file_on_one_line_and_runs_the_rest(cluster, models, tmp_path):
    from fuzz.input_cases import HUGE_NPY, pickled_npz
    images = tmp_path / "images"
    images.mkdir()
    for name, jpeg in models.jpegs.items():
        (images / name).write_bytes(jpeg.tobytes())
    bad = {"pickled.npz": (pickled_npz(), "unpickling"), "huge.npy": (HUGE_NPY, "declares an array of"),
           "notzip.npz": (b"not a zip", "not a .npy or .npz file")}
    for name, (data, _) in bad.items():
        (images / name).write_bytes(data)
    result = _cli(str(models.classifier_path), "--input-dir", str(images), "--output-dir", str(tmp_path / "ray"),
                  "--ray", cluster.address, "--batch-size", "2")
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr, result.stderr
    assert f"{len(models.jpegs)} of {len(models.jpegs) + 3} files ran" in result.stdout and "3 failed" in result.stdout
    for name, (_, problem) in bad.items():
        (line,) = [x for x in result.stdout.splitlines() if x.startswith(f"  {name}: error:")]
        assert problem in line, line
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == sorted(Path(n).stem for n in models.jpegs)


def test_cli_runs_one_input_through_the_ray_graph_runner(cluster, models, tmp_path):
    feeds = models.encoder_feeds(11)
    for name, value in feeds.items():
        np.save(tmp_path / f"{name}.npy", value)
    models.encoder.serialize(tmp_path / "encoder.xmodel")
    args = [str(tmp_path / "encoder.xmodel"), *[f"--input={name}={tmp_path / name}.npy" for name in feeds]]
    local, on_ray = _cli(*args, "-o", str(tmp_path / "local")), _cli(*args, "-o", str(tmp_path / "ray"),
                                                                      "--ray", cluster.address)
    assert local.returncode == 0 and on_ray.returncode == 0, on_ray.stderr
    assert "(a Ray actor per device)" in on_ray.stdout
    out = f"{models.encoder_output}.npy"
    np.testing.assert_array_equal(np.load(tmp_path / "ray" / out), np.load(tmp_path / "local" / out))
