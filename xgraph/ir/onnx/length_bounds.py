"""The one pass of `inference_budget.data_propagation_is_bounded` over the length cone, when its ops come in
producer order: each op computes only the bounds the cone wants of its outputs (`length_cone.cone_wants`).

The iterated fixpoint computes a value bound and a dim bound for every op of the cone. Once every
producer comes before its readers, one pass in order reaches that fixpoint, and a bound no length
depends on (the value of an op kept for its dims, the dims of an op kept for its values) is never
read by one that does: computing only the wanted ones decides the same, with the same arithmetic in
the same order, for a fraction of the work on a 100k-op model (whose cone is its shape arithmetic).
"""
from __future__ import annotations

import math
from itertools import chain
from typing import Sequence

from xgraph.ir.onnx.length_cone import LENGTH_FROM_VALUES, value_bound


def decide_in_order(types: Sequence[str], inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]],
                    cone: Sequence[int], need_value: set[str], need_dim: set[str], values: dict[str, float],
                    dims: dict[str, float], default_dim: float, attr_values: dict[int, float], tiny: set[str],
                    limit: int) -> "bool | None":
    """Whether every length the ops `cone` (indices, ascending) make stays within `limit`; None when an op
    of the cone reads what the cone makes at or after it, or the cone makes "" (the names of omitted
    outputs, all alike): then the iterated fixpoint decides. Names are made by one op each.

    `values` / `dims`: the bounds known before the pass (filled in here); `attr_values`: the bound of
    each Constant/ConstantOfShape by op index; `tiny`: tensors holding a fraction (a Range step). Until
    the pass stops, it computes what the first pass of the iterated fixpoint computes, so a length over
    `limit` found before an op out of order decides as that pass would."""
    get_value, get_dim = values.get, dims.get
    pending = set(chain.from_iterable(outputs[i] for i in cone))  # made by an op of the cone not yet passed
    if "" in pending:
        return None
    for i in cone:
        t, names, outs = types[i], inputs[i], outputs[i]
        if not pending.isdisjoint(names):
            return None
        pending.difference_update(outs)
        if not need_value.isdisjoint(outs):
            if t == "Constant" or t == "ConstantOfShape":
                v = attr_values.get(i, 0.0)
            elif t == "Shape" or t == "Size":
                in_dims = [get_dim(x, default_dim) for x in names if x]
                if t == "Shape":
                    v = in_dims[0] if in_dims else default_dim
                else:
                    v = math.inf if (in_dims and in_dims[0] > 1) else 1.0
            else:
                v = value_bound(t, [get_value(x, 0.0) for x in names])
            for o in outs:
                if get_value(o, 0.0) < v:
                    values[o] = v
        if t == "Range" and len(names) > 2 and names[2] in tiny:
            return False
        rule = LENGTH_FROM_VALUES.get(t)
        wanted = not need_dim.isdisjoint(outs)
        if rule is None:
            if not wanted:
                continue
            in_dims = [get_dim(x, default_dim) for x in names if x]
            out_dim = sum(in_dims) if t == "Concat" else max(in_dims, default=0.0)
        else:
            value_inputs, scaled = rule
            length = sum([get_value(names[k], 0.0) for k in value_inputs if k < len(names)]) or 0.0
            if scaled or wanted:  # else only the length counts: these outputs' dims are no bound's input
                in_dims = [get_dim(x, default_dim) for x in names if x]
                if scaled:
                    length = length * max(in_dims, default=1.0) + max(in_dims, default=0.0)
            if length > limit:
                return False
            if not wanted:
                continue
            out_dim = max(sum(in_dims) if t == "Concat" else max(in_dims, default=0.0), length)
        for o in outs:
            if get_dim(o, 0.0) < out_dim:
                dims[o] = out_dim
    return True


__all__ = ["decide_in_order"]
