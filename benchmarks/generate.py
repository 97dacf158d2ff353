"""Greedy KV-cache generation: tokens/s through the graph runner against onnxruntime's own loop.

The generate sample's decoder (samples/generate/decoder.onnx, GPT-2-style, 2 layers, past
key/values in, presents out) is compiled as the sample does (one token per step, batch 1, past
length dynamic: one AI Core subgraph, its attention on dynamic-shape operators). Both loops decode
the same prompt, feeding each step's presents back as the next step's pasts:

  onnxruntime   one InferenceSession on the original model (default options), `session.run` per step
  xgraph        `create_graph_runner(compiled, kernels=...)` and `runner.run` per step, the presents
                kept on the device (`keep_on_device`) and fed back as they are

The two take turns in blocks (a slow spell of a shared machine hits both alike); the table shows
the median and the best loop of each in tokens/s, the process CPU time per step (steadier than
wall time when other processes share the cores), the ratio xgraph / onnxruntime, and the
per-step split of xgraph's time: inside the subgraph runners' `execute` (the onnxruntime sessions
or numpy kernels) and the dispatch overhead around them (graph-runner wall time per step minus
that: input checks, job records, scheduling, host<->device copies, result checks). The timed
loops call `runner.run` as a user's loop does; the split comes from as many loops after them
that time each call.

    python benchmarks/generate.py [--tokens 48] [--rounds 15] [--kernels auto] [--layers 4 --hidden 256] [--gears]

With --gears the decoder is compiled with one gear per past length (`dynamic_dims`), so every
step is static and one AI Core subgraph. With --devices aicpu the whole step is one AI CPU
subgraph with the past dynamic.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's xgraph and testing/
import xgraph  # noqa: E402

from testing.runtime import load_script  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "generate"
PROMPT = [3, 17, 42]
SETTLE_S = 0.05  # pause between contenders: onnxruntime's spinning pool would slow the next one
FLOOR_PAST = 32  # the past length of the fixed-length step


def _sample_module(name: str):
    return load_script(SAMPLE / f"{name}.py", f"generate_{name}")


def _execute_seconds(runner) -> float:
    return sum(s.get("total_s", 0.0) for s in runner.get_stats()["subgraphs"].values())


def measure(tokens: int, rounds: int, kernels: str, layers: int = 0, hidden: int = 0, heads: int = 4,
            gears: bool = False, vocab: int = 0, devices: str = "") -> dict:
    """Per contender: loop times (s); for xgraph also the time in `runner.run` and inside subgraph runners.

    layers/hidden/vocab 0: the sample's checked-in decoder; else a decoder of that size made by the
    sample's builder (random weights; vocabulary 64 unless given). `gears`: compiled with one gear
    per past length the loop and the fixed-length step reach, instead of the past length left
    dynamic."""
    gen, make = _sample_module("generate"), _sample_module("make_model")
    if layers or hidden or vocab:
        layers, hidden, vocab = layers or 2, hidden or 32, vocab or 64
        model = make.gpt2_like(layers=layers, hidden=hidden, heads=heads, vocab=vocab, past=True).SerializeToString()
    else:
        layers, hidden, vocab = 2, 32, 64
        model = (SAMPLE / "decoder.onnx").read_bytes()
    shape = {"layers": layers, "heads": heads, "head": hidden // heads}
    steps = len(PROMPT) + tokens - 1
    options = gen.gear_options(range(max(steps, FLOOR_PAST + 1)), layers, heads, hidden // heads) if gears \
        else gen.cache_shape_option(layers, heads)
    if devices:
        options["devices"] = devices
    graph = xgraph.compile(model, options)
    names = [t.name for t in graph.get_output_tensors()]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(model, so)

    def ort_step(feeds):
        return session.run(names, dict(feeds))

    times = {"onnxruntime": [], "xgraph": []}
    cpu = {"onnxruntime": [], "xgraph": []}  # process CPU time per loop: the work, whatever the load
    inside: list[float] = []
    in_run: list[float] = []
    with xgraph.create_graph_runner(graph, kernels=kernels) as runner:
        spent = [0.0]

        run = gen.device_step(runner, names)

        def xgraph_step(feeds):
            start = time.perf_counter()
            out = run(feeds)
            spent[0] += time.perf_counter() - start
            return out
        expected = gen.greedy(ort_step, names, PROMPT, tokens, **shape)
        got = gen.greedy(xgraph_step, names, PROMPT, tokens, **shape)
        for _ in range(rounds):  # the loops as a user writes them, nothing timed inside
            time.sleep(SETTLE_S)
            start, start_cpu = time.perf_counter(), time.process_time()
            gen.greedy(ort_step, names, PROMPT, tokens, **shape)
            times["onnxruntime"].append(time.perf_counter() - start)
            cpu["onnxruntime"].append(time.process_time() - start_cpu)
            time.sleep(SETTLE_S)
            start, start_cpu = time.perf_counter(), time.process_time()
            gen.greedy(run, names, PROMPT, tokens, **shape)
            times["xgraph"].append(time.perf_counter() - start)
            cpu["xgraph"].append(time.process_time() - start_cpu)
        for _ in range(rounds):  # where xgraph's step goes: each runner.run timed (which costs a little)
            time.sleep(SETTLE_S)
            before, spent[0] = _execute_seconds(runner), 0.0
            gen.greedy(xgraph_step, names, PROMPT, tokens, **shape)
            inside.append(_execute_seconds(runner) - before)
            in_run.append(spent[0])
        copies = runner.get_stats()["copies"]["count"]
        gen.greedy(xgraph_step, names, PROMPT, tokens, **shape)
        copies = (runner.get_stats()["copies"]["count"] - copies) / steps
        floor = step_floor(runner, run, ort_step, shape, rounds)
        subgraphs = len(runner.runners)
        if getattr(runner, "shared", None) is not None:  # one runner serving every gear's run
            subgraphs = f"{subgraphs - len(runner.shared.runners)} (+{len(runner.shared.runners)} shared by the gears)"
        backends = sorted({getattr(r, "backend", "?") for r in runner.runners.values()})
    past = f", {len(graph.get_gears())} past-length gears" if gears else ", past length dynamic"
    past += f", devices {devices}" if devices else ""
    return {"times": times, "cpu": cpu, "inside": inside, "in_run": in_run, "equal": got == expected, "copies": copies,
            "steps": len(PROMPT) + tokens - 1, "tokens": tokens, "subgraphs": subgraphs, "backends": backends,
            "model": f"{layers} layers, hidden {hidden}, vocabulary {vocab}{past}", "floor": floor}


def step_floor(runner, run, ort_step, shape: dict, rounds: int, past: int = FLOOR_PAST, block: int = 10) -> dict:
    """One decoding step at a fixed past length, each contender's fastest block of `block` steps (us).

    On a shared machine the loops above wander with the load; the fastest of many short blocks
    is close to what an idle machine gives, and the two contenders' blocks alternate."""
    import numpy as np
    feeds = {"input_ids": np.array([[5]], np.int64), "position_ids": np.array([[past]], np.int64)}
    feeds.update({f"past_l{i}_{kv}": np.zeros((1, shape["heads"], past, shape["head"]), np.float32)
                  for i in range(shape["layers"]) for kv in "kv"})
    # xgraph's pasts as the loop has them: left on the device by the step before (`keep_on_device`)
    names = [t.name for t in runner.get_output_tensors()]
    ahead = dict(feeds, position_ids=np.array([[past - 1]], np.int64))
    ahead.update({name: value[:, :, 1:] for name, value in feeds.items() if name.startswith("past_")})
    on_device = dict(feeds, **{name.replace("present_", "past_", 1): value
                               for name, value in zip(names, run(ahead)) if name.startswith("present_")})
    best = {"onnxruntime": float("inf"), "xgraph": float("inf"), "inside": float("inf")}
    for _ in range(rounds * 4):
        time.sleep(SETTLE_S / 5)
        start = time.perf_counter()
        for _ in range(block):
            ort_step(feeds)
        best["onnxruntime"] = min(best["onnxruntime"], (time.perf_counter() - start) / block * 1e6)
        time.sleep(SETTLE_S / 5)
        before = _execute_seconds(runner)
        start = time.perf_counter()
        for _ in range(block):
            run(on_device)
        elapsed = (time.perf_counter() - start) / block * 1e6
        if elapsed < best["xgraph"]:
            best["xgraph"], best["inside"] = elapsed, (_execute_seconds(runner) - before) / block * 1e6
    return best


def report(r: dict) -> str:
    steps, tokens = r["steps"], r["tokens"]
    ort_t, xg_t = r["times"]["onnxruntime"], r["times"]["xgraph"]
    lines = [f"decoder: {r['model']}; greedy generation, {tokens} tokens ({steps} decoder steps of one token), {len(ort_t)} rounds; "
             f"xgraph: {r['subgraphs']} subgraphs on {', '.join(r['backends'])}; tokens equal: {r['equal']}",
             f"{'':<14}{'median tok/s':>14}{'best tok/s':>12}{'ms/step':>10}{'CPU ms/step':>13}"]
    for name, t in (("onnxruntime", ort_t), ("xgraph", xg_t)):
        lines.append(f"{name:<14}{tokens / statistics.median(t):>14.0f}{tokens / min(t):>12.0f}"
                     f"{statistics.median(t) / steps * 1e3:>10.3f}{statistics.median(r['cpu'][name]) / steps * 1e3:>13.3f}")
    ratio = statistics.median(ort_t) / statistics.median(xg_t)
    best = min(ort_t) / min(xg_t)
    per_round = statistics.median(o / x for o, x in zip(ort_t, xg_t))
    lines.append(f"xgraph / onnxruntime tokens/s: {ratio:.2f}x (medians), {best:.2f}x (best loops), "
                 f"{per_round:.2f}x (median of per-round ratios); CPU time per token "
                 f"{statistics.median(r['cpu']['onnxruntime']) / statistics.median(r['cpu']['xgraph']):.2f}x")
    inside = statistics.median(i / steps for i in r["inside"]) * 1e3
    run = statistics.median(i / steps for i in r["in_run"]) * 1e3
    lines.append(f"xgraph per step: {run:.3f} ms in runner.run = {inside:.3f} ms inside subgraph runners + "
                 f"{run - inside:.3f} ms dispatch overhead (onnxruntime's whole step, loop included: "
                 f"{statistics.median(ort_t) / steps * 1e3:.3f} ms); host<->device copies per step: "
                 f"{r['copies']:.2f} (presents kept on the device)")
    f = r["floor"]
    lines.append(f"one step at past length 32, fastest block of 10: onnxruntime {f['onnxruntime']:.0f} us, "
                 f"xgraph {f['xgraph']:.0f} us ({f['onnxruntime'] / f['xgraph']:.2f}x) = {f['inside']:.0f} us "
                 f"inside subgraph runners + {f['xgraph'] - f['inside']:.0f} us dispatch overhead")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=48, help="tokens to generate per loop (prompt + tokens <= 64)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--kernels", default="auto")
    parser.add_argument("--layers", type=int, default=0, help="a decoder of this many layers instead of the sample's")
    parser.add_argument("--hidden", type=int, default=0, help="... and of this width (a multiple of 4)")
    parser.add_argument("--vocab", type=int, default=0, help="... and of this vocabulary (default 64)")
    parser.add_argument("--devices", default="", help="the compile option 'devices' (e.g. aicpu: the whole step on "
                        "AI CPU, one subgraph with the past dynamic)")
    parser.add_argument("--gears", action="store_true", help="compile one gear per past length (all on AI Core) "
                        "instead of leaving the past length dynamic")
    args = parser.parse_args(argv)
    r = measure(args.tokens, args.rounds, args.kernels, args.layers, args.hidden, gears=args.gears, vocab=args.vocab,
                devices=args.devices)
    print(report(r))
    return 0 if r["equal"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
