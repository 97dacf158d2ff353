"""KV-cache decoding: a GPT-2-style decoder with past key/values compiles (static ops on AI Core, the
attention over the growing cache on AI CPU), runs step by step through create_graph_runner with
the presents fed back as pasts, and greedy generation equals onnxruntime token for token."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import xgraph
from testing.runtime import load_script

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "generate"
DYNAMIC = {"present_l0_k", "present_l0_v", "l0_kt", "l0_scores", "l0_scaled", "l0_masked", "l0_probs", "l0_ctx"}


def _module(name: str):
    return load_script(SAMPLE / f"{name}.py", f"generate_{name}")


@pytest.fixture(scope="module")
def sample():
    return _module("make_model"), _module("generate")


@pytest.fixture(scope="module")
def compiled(sample):
    _, gen = sample
    return xgraph.compile(SAMPLE / "decoder.onnx", gen.cache_shape_option())


def _session(path):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so)


def test_checked_in_decoder_is_what_the_generator_makes(sample):
    make, _ = sample
    assert make.gpt2_like(past=True).SerializeToString() == (SAMPLE / "decoder.onnx").read_bytes()


def test_static_ops_and_the_cache_attention_go_to_ai_core(compiled):
    r = xgraph.report(compiled)
    device = {o["name"]: o["device"] for o in r["ops"]}
    reason = {o["name"]: o["reason"] for o in r["ops"]}
    for op in compiled.get_ops():
        static = all(t is None or t.is_static() for t in op.get_input_tensors())
        if op.type in ("MatMul", "LayerNormalization") and static:
            assert device[op.name] == "AICORE", (op.name, reason[op.name])
    # the attention over the dynamic past: AI Core's dynamic-shape ops, its length now `past + 1`
    assert {n for n in DYNAMIC if device[n] == "AICORE"} == DYNAMIC
    assert reason["l0_probs"] == "" and compiled.get_tensor("l0_probs").shape[-1] == "past_sequence + 1"
    for name in ("l0_qkv_mm", "l0_o_mm", "l0_fc_mm", "l0_proj_mm", "logits", "ln_f"):
        assert device[name] == "AICORE"
    assert r["crossings"] == 0  # AI CPU shares device memory with AI Core
    assert not any(op.type == "Shape" and op.get_input_tensors()[0].is_static() for op in compiled.get_ops())


@pytest.mark.parametrize("kernels", ["numpy", "auto"])
def test_greedy_generation_of_16_tokens_equals_onnxruntime(sample, compiled, kernels):
    _, gen = sample
    names = [t.name for t in compiled.get_output_tensors()]
    session = _session(SAMPLE / "decoder.onnx")
    prompt = [3, 17, 42]
    expected = gen.greedy(lambda feeds: session.run(names, dict(feeds)), names, prompt, 16)
    logits = []
    with xgraph.create_graph_runner(compiled, kernels=kernels) as runner:
        def step(feeds):
            out = runner.run(feeds)
            ref = session.run(names, dict(feeds))
            for a, b in zip(out, ref):  # every step, every output (logits and presents) matches
                np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
            logits.append(out[0])
            return out
        got = gen.greedy(step, names, prompt, 16)
        if kernels == "auto":  # every subgraph is standard ONNX: none fell back to xgraph's kernels
            assert {name: r.backend for name, r in runner.runners.items()} == \
                {name: "onnxruntime" for name in runner.runners}, \
                {name: getattr(r, "backend_reason", "") for name, r in runner.runners.items()}
    assert got == expected and len(got) == 16
    assert len(set(got)) > 1  # not a degenerate model that repeats one token
    assert len(logits) == len(prompt) + 15


def test_presents_grow_by_one_position_per_step(sample, compiled):
    _, gen = sample
    names = [t.name for t in compiled.get_output_tensors()]
    shapes = []
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        def step(feeds):
            out = runner.run(feeds)
            shapes.append(dict(zip(names, out))["present_l1_v"].shape)
            return out
        gen.greedy(step, names, [5], 4)
    assert shapes == [(1, 4, n, 8) for n in range(1, 5)]


@pytest.mark.parametrize("gears", [[], ["--gears"]])
def test_the_sample_script_runs_and_agrees(sample, capsys, gears):
    _, gen = sample
    assert gen.main(["--tokens", "4", *gears]) == 0
    out = capsys.readouterr().out
    assert "xgraph     :" in out and "tokens/s" in out
    if gears:  # one gear per past length the 6 steps reach, each one AI Core subgraph
        assert "placement (each of 6 gears): {'AICORE': 77} crossings: 0" in out


def test_bench_generate_reports_tokens_per_second_against_onnxruntime(sample, capsys):
    import json
    from xgraph.cli.main import main
    _, gen = sample
    code = main(["bench", str(SAMPLE / "decoder.onnx"), "--generate", "6", "--kernels", "numpy",
                 "--options", json.dumps(gen.cache_shape_option())])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "tokens/s" in out and "tokens equal" in out and "dispatch" in out


def test_bench_generate_refuses_a_model_without_a_cache(tmp_path, tmodels, capsys):
    import onnx
    from xgraph.cli.main import main
    path = tmp_path / "nocache.onnx"
    onnx.save(tmodels.gpt2_like(), path)
    code = main(["bench", str(path), "--generate", "4", "--options", '{"input_shape": "input_ids:1,1"}'])
    err = capsys.readouterr().err
    assert code != 0 and "past_*/present_* pairs" in err and "KV cache" in err
