"""Template near misses at scale: matching with near-miss recording against plain matching, same run.

Graphs: the 1k/10k/100k-op families of `partition_scale.py` (chains of Relu; ladders and
random local DAGs of Relu/Add). Templates: "relu_add_relu" (Relu -> Add -> Relu: matches on
ladders and random DAGs, breaks at the Add on chains) and "relu_relu_softmax" (breaks at the
Softmax everywhere: one near miss per anchor, the worst case for recording).

Columns (seconds, best of --repeat, garbage collector paused):

* plain s: `graph.isomorphism(template)` with no recorder (the baseline);
* counts s: inside `record_matches()` (what every compile does: calls and matches per template);
* near s: inside `record_matches(near_misses=True)` (what `xgraph explain` does);
* near/plain: the cost of recording near misses; per-op us: near s per op, which stays flat
  from 1k to 100k ops when recording is linear;
* misses: near misses recorded (at most one per anchor op).

    python benchmarks/template_near_misses.py [--sizes 1000,10000,100000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import gc
import time
from typing import Any, Callable

from partition_scale import FAMILIES, build

from xgraph import GraphTemplate
from xgraph.ir.template import record_matches


def templates() -> list[GraphTemplate]:
    """The two templates measured."""
    rar = GraphTemplate("relu_add_relu")
    a = rar.add_op("a", "Relu")
    b = rar.add_op("b", "Add", inputs=[a])
    rar.add_op("c", "Relu", inputs=[b])
    rrs = GraphTemplate("relu_relu_softmax")
    x = rrs.add_op("x", "Relu")
    y = rrs.add_op("y", "Relu", inputs=[x])
    rrs.add_op("z", "Softmax", inputs=[y])
    return [rar, rrs]


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """(best wall time of `repeat` calls, last result), with the garbage collector paused."""
    times, result = [], None
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            start = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return min(times), result


def measure(graph, template: GraphTemplate, repeat: int) -> dict[str, Any]:
    """The three timings of one template on one graph."""
    plain, matches = best(lambda: graph.isomorphism(template), repeat)

    def counted():
        with record_matches() as log:
            graph.isomorphism(template)
        return log

    def near():
        with record_matches(near_misses=True) as log:
            graph.isomorphism(template)
        return log

    counts, _ = best(counted, repeat)
    near_s, log = best(near, repeat)
    n = graph.get_op_num()
    return {"graph": graph.name, "template": template.name, "ops": n, "matches": len(matches), "plain s": plain,
            "counts s": counts, "near s": near_s, "near/plain": near_s / plain if plain else float("nan"),
            "per-op us": near_s / n * 1e6, "misses": len(log.misses)}


def print_table(rows: list[dict[str, Any]]) -> None:
    """Rows as an aligned text table."""
    columns = list(rows[0])
    cells = [[f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for row in cells:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def main() -> None:
    """Measure every family x size x template and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows = []
    for family in args.families.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            graph = build(family, n)
            for template in templates():
                rows.append(measure(graph, template, args.repeat))
            print(f"  measured {family} {n} ops", flush=True)
    print_table(rows)


if __name__ == "__main__":
    main()
