"""Cost of checking runner results against their tensors, per output (target: < 2 us).

Baseline: an empty loop over the same outputs (what not checking costs). Prints both and the
difference per output, for static and symbolic shapes.

    python benchmarks/result_check.py
"""
from __future__ import annotations

import time

import numpy as np

from xgraph.runners.result_check import ResultCheck


def best_of(fn, repeat: int = 7, number: int = 20000) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def main() -> None:
    for label, shape, values in [("static (1, 1000)", (1, 1000), np.zeros((1, 1000), np.float32)),
                                 ("symbolic (batch, 128, 768)", ("batch", 128, 768), np.zeros((2, 128, 768), np.float32))]:
        for n in (1, 4):
            check = ResultCheck("bench", [(f"y{i}", np.dtype(np.float32), shape) for i in range(n)],
                                [("x", np.dtype(np.float32), shape)])
            results = [values] * n
            inputs = [values]
            checked = best_of(lambda: check(inputs, results))
            empty = best_of(lambda: [None for _ in results])
            print(f"{label:28} outputs={n}: check {checked * 1e6:6.2f} us, empty loop {empty * 1e6:5.2f} us, "
                  f"per output {(checked - empty) / n * 1e6:5.2f} us")


if __name__ == "__main__":
    main()
