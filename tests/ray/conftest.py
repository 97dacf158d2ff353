"""Shared by the Ray tests: one simulated Ray cluster for the whole session, and the models they run.

The cluster (ray.cluster_utils.Cluster) is started once per test process: a head node with
2 CPUs is the "local Ray" every test uses; tests that need nodes with custom resources add
them and remove them again. Starting Ray takes seconds, so no test starts its own.
Under pytest-xdist each worker that runs Ray tests starts a cluster of its own (new ports,
its own session directory; every address is passed explicitly, none is discovered), so two
workers never share or fight over one. The tests carry xdist group "ray", which would keep
them on one worker under --dist loadgroup; pytest 9 with pytest-xdist 3.8 ignores the group
(xdist tags node ids in a way pytest 9 no longer reads), so the suite does not rely on it.
"""
from __future__ import annotations

import os
import types
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from testing.runtime import load_script

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "classify"


def _compile_models():
    """The compile tests' model builders (import mode "importlib" has no sibling imports)."""
    return load_script(Path(__file__).parents[1] / "compile" / "conftest.py", "ray_compile_models")


_builders = _compile_models()
#: The encoder the Ray tests run: a one-layer BERT-style encoder with fixed (1, 16) inputs.
ENCODER_OUTPUT = "l0_ln2"
#: Seconds any wait on Ray may take before the test fails instead of hanging the suite.
WAIT = 60.0


@pytest.fixture(scope="session")
def cluster():
    """A running simulated cluster (head: 2 CPUs), the driver connected to it; shut down at the end."""
    ray = pytest.importorskip("ray", reason="xgraph.ray needs Ray (pip install 'xgraph[ray]')")
    from ray.cluster_utils import Cluster
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if ray.is_initialized():
        ray.shutdown()
    started = Cluster(initialize_head=True, connect=False,
                      head_node_args={"num_cpus": 2, "include_dashboard": False})
    ray.init(address=started.address, logging_level="WARNING", log_to_driver=False)
    yield started
    ray.shutdown()
    started.shutdown()


def encoder_feeds(seed: int) -> dict[str, np.ndarray]:
    """Random token ids and a padding mask for the encoder (vocabulary of 40)."""
    rng = np.random.default_rng(seed)
    length = int(rng.integers(4, 17))
    return {"input_ids": rng.integers(0, 40, (1, 16)).astype(np.int64),
            "attention_mask": (np.arange(16) < length).astype(np.int64)[None]}


def jpegs() -> dict[str, np.ndarray]:
    """The sample images as encoded bytes (the classifier's input), by file name."""
    return {p.name: np.frombuffer(p.read_bytes(), np.uint8) for p in sorted((SAMPLE / "images").glob("*.jpg"))}


def same(got, expected) -> bool:
    """True when two runs' outputs are equal, array by array, exactly (dtype, shape and values)."""
    return len(got) == len(expected) and all(
        np.asarray(a).dtype == np.asarray(b).dtype and np.array_equal(a, b) for a, b in zip(got, expected))


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """The compiled classifier (DVPP -> AICORE -> AICPU -> CPU, also as an .xmodel file) and the encoder."""
    folder = tmp_path_factory.mktemp("models")
    classifier = xgraph.compile(SAMPLE / "classifier.onnx")
    classifier.serialize(folder / "classifier.xmodel")
    encoder = xgraph.compile(_builders.bert_like_encoder(hidden=16, heads=2, vocab=40), options=_builders.BERT_STATIC)
    return types.SimpleNamespace(classifier=classifier, classifier_path=folder / "classifier.xmodel",
                                 encoder=encoder, encoder_output=ENCODER_OUTPUT, encoder_feeds=encoder_feeds, jpegs=jpegs(), same=same,
                                 sample=SAMPLE)


@pytest.fixture(scope="session")
def expected(models):
    """Local graph runner outputs: the oracle the Ray runs must equal exactly."""
    with xgraph.create_graph_runner(models.classifier) as runner:
        classifier = {name: runner.run({"jpeg": x}) for name, x in models.jpegs.items()}
    with xgraph.create_graph_runner(models.encoder) as runner:
        encoder = {seed: runner.run(encoder_feeds(seed)) for seed in range(200)}
    return types.SimpleNamespace(classifier=classifier, encoder=encoder)


# -- gates: runners that wait for, or signal, events in other actors (overlap shown by events, not timing)

class Gate:
    """A Ray actor holding named events: one actor's runner opens one, another's waits for it."""

    def __init__(self) -> None:
        import asyncio
        self._asyncio = asyncio
        self._events: dict = {}
        self.seen: dict = {}

    def _event(self, name: str):
        return self._events.setdefault(name, self._asyncio.Event())

    async def open(self, name: str) -> None:
        self._event(name).set()

    async def wait(self, name: str, timeout: float) -> bool:
        """True once `name` is open; False after `timeout` s. The answer is also kept in `seen`."""
        try:
            await self._asyncio.wait_for(self._event(name).wait(), timeout)
            opened = True
        except self._asyncio.TimeoutError:
            opened = False
        self.seen.setdefault(name, []).append(opened)
        return opened

    async def results(self) -> dict:
        return dict(self.seen)


def gated_setup(gate, rules: dict):
    """A worker_setup registering runner 'test_gated': passes its first input through, and for input value
    V on device D opens the gates rules["open"]["D:V"] and waits for rules["wait"]["D:V"] first."""
    def setup() -> None:
        import ray as ray_in_worker

        import xgraph as xgraph_in_worker

        class GatedRunner(xgraph_in_worker.Runner):
            def execute(self, inputs):
                key = f"{self.subgraph.get_attr('device')}:{float(inputs[0].flat[0]):g}"
                for name in rules.get("open", {}).get(key, ()):
                    ray_in_worker.get(gate.open.remote(name))
                for name in rules.get("wait", {}).get(key, ()):
                    ray_in_worker.get(gate.wait.remote(name, rules.get("timeout", 20.0)))
                return [inputs[0] for _ in self.get_output_tensors()]

        xgraph_in_worker.register_runner("test_gated", GatedRunner)
    return setup


def chain_graph(devices: list[str], runner: str = "test_gated") -> xgraph.Graph:
    """x (1, 4) -> op000 -> op001 ... (Relu each), one subgraph per op on the given devices."""
    from testing.runtime import place
    k = len(devices)
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < k - 1 else "y"],
                              name=f"op{i:03d}") for i in range(k)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    graph = xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    return place(graph, {f"op{i:03d}": d for i, d in enumerate(devices)}, runner=runner, merge=False)


@pytest.fixture(scope="session")
def gates(cluster):
    """Makes (gate actor, worker_setup) pairs; this file's classes travel to the workers by value."""
    import sys

    import ray
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    remote_gate = ray.remote(Gate)

    def make(rules: dict):
        gate = remote_gate.remote()
        return gate, gated_setup(gate, rules)
    return types.SimpleNamespace(make=make, chain_graph=chain_graph)
