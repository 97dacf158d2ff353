"""`xgraph bench --generate N`: tokens per second of a KV-cache decoder's greedy loop, against onnxruntime.

The model follows the usual export convention of decoders with a cache: an `input_ids` input
(one token per step), optionally `position_ids`, inputs `past_*` each paired with an output
`present_*` of the same suffix (the presents of one step are the pasts of the next), and a
`logits` output. The pasts start empty (their dynamic dims 0); xgraph's loop keeps the presents on
the device (`keep_on_device`) and feeds them back as they are, as onnxruntime users do with IO binding. Both loops run side by side on the
same model in the same process: xgraph's graph runner on the compiled graph, and one onnxruntime
session on the same graph as ONNX (`Graph.to_onnx`). Dispatch overhead per step is
the runner's wall time per step minus the execute time its subgraphs report.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from xgraph.errors import XGraphError


def cache_pairs(input_names: Sequence[str], output_names: Sequence[str]) -> dict[str, str]:
    """{present output: past input}; XGraphError naming what is missing when the model has no cache."""
    outputs = set(output_names)
    pairs = {"present" + name[len("past"):]: name for name in input_names
             if name.startswith("past") and "present" + name[len("past"):] in outputs}
    missing = [n for n in ("input_ids",) if n not in input_names] + [n for n in ("logits",) if n not in outputs]
    if missing or not pairs:
        raise XGraphError(f"bench --generate: the model needs inputs input_ids and past_* paired with outputs "
                          f"present_*, and an output logits (missing: {', '.join(missing) or 'past_*/present_* pairs'}"
                          f"); export the decoder with its KV cache")
    return pairs


def empty_pasts(shapes: Mapping[str, Sequence[Any]], dtypes: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Zero-length pasts: dynamic (symbolic or unknown) dims are 0."""
    return {name: np.zeros([d if isinstance(d, int) else 0 for d in shape], dtypes[name])
            for name, shape in shapes.items()}


def greedy_loop(step: Callable[[dict], Sequence[np.ndarray]], output_names: Sequence[str], pairs: Mapping[str, str],
                pasts: Mapping[str, np.ndarray], tokens: int, positions: bool, first_token: int = 0) -> list[int]:
    """Greedy decoding of `tokens` tokens from `first_token`, one token per step."""
    past = dict(pasts)
    token, generated = first_token, []
    for position in range(tokens):
        feeds = {"input_ids": np.array([[token]], np.int64), **past}
        if positions:
            feeds["position_ids"] = np.array([[position]], np.int64)
        out = dict(zip(output_names, step(feeds)))
        past = {pairs[name]: value for name, value in out.items() if name in pairs}
        token = next_token(out["logits"])
        generated.append(token)
    return generated


def _logits_error(shape: Any, dtype: Any) -> XGraphError:
    return XGraphError(f"bench --generate: output 'logits' has shape {shape} ({dtype}), but greedy decoding needs "
                       "[batch, seq, vocab] logits with every dim >= 1; export the decoder with its logits output "
                       "unsqueezed to that layout")


def check_logits(shape: Sequence[Any] | None, dtype: Any) -> None:
    """XGraphError naming output 'logits' when its declared shape cannot be [batch, seq, vocab]."""
    if shape is not None and (len(shape) != 3 or any(isinstance(d, int) and d < 1 for d in shape)):
        raise _logits_error(list(shape), dtype)


def next_token(logits: Any) -> int:
    """The greedy choice: argmax over the vocabulary of the last position of the first sequence."""
    array = np.asarray(logits)
    if array.ndim != 3 or 0 in array.shape or array.dtype.kind not in "fiub":
        raise _logits_error(list(array.shape), array.dtype)
    return int(np.argmax(array[0, -1]))


def bench_generate(graph: Any, model_proto: Any, tokens: int, mode: str, kernels: str) -> dict[str, Any]:
    """Both loops timed once each after a warm-up loop of the same length: tokens/s, ratio, equality, dispatch overhead per step."""
    import onnxruntime as ort

    import xgraph
    inputs = {t.name: t for t in graph.get_input_tensors()}
    output_names = [t.name for t in graph.get_output_tensors()]
    pairs = cache_pairs(list(inputs), output_names)
    logits = next(t for t in graph.get_output_tensors() if t.name == "logits")
    check_logits(logits.shape, logits.dtype)
    pasts = empty_pasts({name: inputs[name].shape or () for name in pairs.values()},
                        {name: inputs[name].dtype for name in pairs.values()})
    positions = "position_ids" in inputs
    so = ort.SessionOptions()
    so.log_severity_level = 3
    session = ort.InferenceSession(model_proto.SerializeToString(), so)

    def ort_step(feeds):
        return session.run(output_names, feeds)

    greedy_loop(ort_step, output_names, pairs, pasts, tokens, positions)  # warm-up: every past length once
    start = time.perf_counter()
    expected = greedy_loop(ort_step, output_names, pairs, pasts, tokens, positions)
    ort_s = time.perf_counter() - start
    with xgraph.create_graph_runner(graph, mode, kernels) as runner:
        def xgraph_step(feeds):  # the presents stay on the device and go back in as they are
            return runner.run(feeds, keep_on_device=kept)

        kept = list(pairs)
        # warm-up over the whole loop: with past-length gears each step runs a gear of its own
        greedy_loop(xgraph_step, output_names, pairs, pasts, tokens, positions)
        before = runner.get_stats()
        start = time.perf_counter()
        got = greedy_loop(xgraph_step, output_names, pairs, pasts, tokens, positions)
        xg_s = time.perf_counter() - start
        after = runner.get_stats()
    execute = sum(s.get("total_s", 0.0) - before["subgraphs"].get(n, {}).get("total_s", 0.0)
                  for n, s in after["subgraphs"].items())
    return {"tokens": tokens, "xgraph_tokens_per_s": tokens / xg_s, "onnxruntime_tokens_per_s": tokens / ort_s,
            "ratio": ort_s / xg_s, "equal": got == expected, "dispatch_ms_per_step": (xg_s - execute) / tokens * 1e3,
            "execute_ms_per_step": execute / tokens * 1e3,
            "copies_per_step": (after["copies"]["count"] - before["copies"]["count"]) / tokens,
            "saved_copies_per_step": (after["copies"]["saved"] - before["copies"]["saved"]) / tokens}


__all__ = ["bench_generate", "cache_pairs", "check_logits", "empty_pasts", "greedy_loop", "next_token"]
