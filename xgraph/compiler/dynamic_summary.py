"""What dynamic inputs did to placement, in one line for `xcompile` and as data in the report.

A model compiled with dynamic dims left (no `input_shape`, or `-1`s and ranges in it) goes to
AI Core only where its op-info library marks an op `dynamic_dims` (Ascend's dynamic-shape
operators); the ops that need static shapes go to AI CPU. Users meet this as a share of AI Core
lower than they expected, so the summary names the dynamic inputs, the share on AI Core, how
many ops fell back for want of static shapes, and the three options that change it.
"""
from __future__ import annotations

from typing import Any, Sequence

from xgraph.ir import Graph

#: the placement reason of an op refused for want of static shapes (`compiler.checks.static_shapes`)
STATIC_REASON = "needs static shapes"


def _shape_text(shape: Sequence | None) -> str:
    if shape is None:
        return "(?)"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def dynamic_inputs(graph: Graph) -> list[dict[str, Any]]:
    """[{"name", "shape"}] of the graph inputs whose shape is not fully static, in model order."""
    return [{"name": t.name, "shape": None if t.shape is None else list(t.shape)}
            for t in graph.get_input_tensors() if not t.is_static()]


def dynamic_summary(graph: Graph, ops: list[dict[str, Any]], prepare: dict[str, Any]) -> dict[str, Any] | None:
    """{"inputs", "ranges", "aicore_ops", "ops", "static_fallbacks", "line"}; None when every input is static."""
    inputs = dynamic_inputs(graph)
    if not inputs:
        return None
    ranges = dict(prepare.get("dim_ranges") or {})
    on_core = sum(o["device"] == "AICORE" for o in ops)
    static = sum(STATIC_REASON in o["reason"] for o in ops)
    shown = ", ".join(f"{i['name']} {_shape_text(i['shape'])}" for i in inputs[:4])
    more = f" and {len(inputs) - 4} more" if len(inputs) > 4 else ""
    bounds = ", ".join(f"{name} in {lo}..{'inf' if hi == -1 else hi}" for name, (lo, hi) in ranges.items())
    share = f"{on_core}/{len(ops)} ops ({100 * on_core / max(len(ops), 1):.0f}%) on AI Core"
    fell = f"{static} op(s) needed static shapes and went elsewhere" if static else "none needed static shapes"
    symbols = [d for i in inputs for d in (i["shape"] or []) if isinstance(d, str)]
    example = symbols[0] if symbols else inputs[0]["name"]
    line = (f"dynamic inputs: {shown}{more}{' (' + bounds + ')' if bounds else ''}: {share} (its dynamic-shape "
            f"ops take the dynamic dims; {fell}); options: input_shape fixes dims (\"{example}:1\"), ranges bound "
            f"them (\"{example}:1..2048\"), dynamic_dims compiles a static gear per listed shape")
    return {"inputs": inputs, "ranges": ranges, "aicore_ops": on_core, "ops": len(ops), "static_fallbacks": static,
            "line": line}


__all__ = ["dynamic_inputs", "dynamic_summary"]
