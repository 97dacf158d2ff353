"""Greedy generation with a KV cache through a partitioned model, token for token against onnxruntime.

    python samples/generate/make_model.py      # once: the tiny random-weight decoder
    python samples/generate/generate.py [--tokens 16] [--prompt 3,17,42] [--gears]

The decoder is compiled once with one token per step and batch 1 fixed (`input_shape`); the past
length stays dynamic (-1). Shapes resolve to a fixpoint; the attention over the cache, whose
shapes grow with every step, runs on AI Core's dynamic-shape operators and the causal mask's
shape values (the cache's length, the mask's first row) with it: one AI Core subgraph per step.
With --gears the past length is a gear instead (`dynamic_dims`, one static partition per past
length the loop reaches), so every step is static and the whole step is one AI Core subgraph.
The presents of one step are the next step's pasts, kept on the device in between (`keep_on_device`:
no cache copies to the host and back); the prompt is fed one token per step too.
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

import numpy as np

HERE = Path(__file__).resolve().parent

Step = Callable[[Mapping[str, np.ndarray]], Sequence[np.ndarray]]


def cache_shape_option(layers: int = 2, heads: int = 4) -> dict[str, str]:
    """The compile options: one token per step, batch 1, past length dynamic."""
    pasts = ";".join(f"past_l{i}_{kv}:1,{heads},-1,-1" for i in range(layers) for kv in "kv")
    return {"input_shape": f"input_ids:1,1;position_ids:1,1;{pasts}"}


def gear_options(past_lengths: Sequence[int], layers: int = 2, heads: int = 4, head: int = 8) -> dict[str, str]:
    """The compile options with one gear per past length (ATC's `dynamic_dims`): every step static."""
    pasts = ";".join(f"past_l{i}_{kv}:1,{heads},-1,{head}" for i in range(layers) for kv in "kv")
    dims = ";".join(",".join([str(p)] * (2 * layers)) for p in past_lengths)
    return {"input_shape": f"input_ids:1,1;position_ids:1,1;{pasts}", "dynamic_dims": dims}


def device_step(runner, output_names: Sequence[str]) -> Step:
    """`runner.run` keeping the presents on the device: they come back as DeviceValues and go in
    as the next step's pasts without a copy to the host and back (docs/runtime.md)."""
    presents = [name for name in output_names if name.startswith("present_")]
    return functools.partial(runner.run, keep_on_device=presents)


def greedy(step: Step, output_names: Sequence[str], prompt: Sequence[int], tokens: int, *, layers: int = 2,
           heads: int = 4, head: int = 8) -> list[int]:
    """Feed `prompt` then generate `tokens` argmax tokens, one token per step, presents -> pasts."""
    past = {f"past_l{i}_{kv}": np.zeros((1, heads, 0, head), np.float32) for i in range(layers) for kv in "kv"}
    pending, generated, position = list(prompt), [], 0
    while len(generated) < tokens:
        token = pending.pop(0) if pending else generated[-1]
        outputs = dict(zip(output_names, step({"input_ids": np.array([[token]], np.int64),
                                               "position_ids": np.array([[position]], np.int64), **past})))
        position += 1
        past = {name.replace("present_", "past_", 1): value for name, value in outputs.items()
                if name.startswith("present_")}
        if not pending:
            generated.append(int(np.argmax(outputs["logits"][0, -1])))
    return generated


def main(argv: list[str]) -> int:
    import onnxruntime as ort
    import xgraph

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(HERE / "decoder.onnx"))
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--prompt", default="3,17,42")
    parser.add_argument("--gears", action="store_true", help="one gear per past length instead of a dynamic past")
    args = parser.parse_args(argv)
    prompt = [int(t) for t in args.prompt.split(",")]
    if not Path(args.model).exists():
        print(f"{args.model} is missing; run samples/generate/make_model.py first", file=sys.stderr)
        return 2
    steps = len(prompt) + args.tokens - 1
    graph = xgraph.compile(args.model, gear_options(range(steps)) if args.gears else cache_shape_option())
    gears = graph.get_gears()
    report = xgraph.report(gears[-1].graph if gears else graph)
    print(f"placement{f' (each of {len(gears)} gears)' if gears else ''}:",
          {d: v["ops"] for d, v in report["devices"].items()}, "crossings:", report["crossings"])
    names = [t.name for t in graph.get_output_tensors()]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(args.model, so)
    start = time.perf_counter()
    expected = greedy(lambda feeds: session.run(names, dict(feeds)), names, prompt, args.tokens)
    ort_s = time.perf_counter() - start
    with xgraph.create_graph_runner(graph, kernels="auto") as runner:
        start = time.perf_counter()
        got = greedy(device_step(runner, names), names, prompt, args.tokens)
        xg_s = time.perf_counter() - start
    print("xgraph     :", got)
    print("onnxruntime:", expected)
    print(f"steps: {steps}; xgraph {steps / xg_s:.0f} tokens/s, onnxruntime {steps / ort_s:.0f} tokens/s "
          f"(xgraph/onnxruntime {ort_s / xg_s:.2f}x)")
    return 0 if got == expected else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
