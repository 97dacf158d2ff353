"""The ranges of dynamic dims through symbolic expressions, and the size the cost model assumes for each."""
from __future__ import annotations

import doctest
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xgraph.ir import dim_ranges
from xgraph.ir.dim_ranges import DEFAULT_SIZE, UNNAMED, DimRanges, assumed_text
from xgraph.ir.symbolic_dims import render
from xgraph.errors import GraphError

RANGES = {"past": (0, 2048), "batch": (1, 8), "total": (1, 10), "seq": (4, -1)}


@pytest.mark.parametrize("dim, bounds, size", [
    (16, (16, 16), 16),
    ("past", (0, 2048), 2048),  # a range: its top
    ("past + 1", (1, 2049), 2049),  # through the symbolic shapes
    ("2*batch*past", (0, 32768), 32768),
    ("total - past", (0, 10), 0),  # at the symbols' tops 10 - 2048, kept within the bounds
    ("seq", (4, None), 4),  # no top: its low end
    ("seq + past", (4, None), 2052),
    ("heads", (0, None), DEFAULT_SIZE),  # no range given
    ("batch*heads", (0, None), 8),
    (None, (0, None), DEFAULT_SIZE),  # unnamed
    (-1, (0, None), DEFAULT_SIZE),
])
def test_bounds_and_assumed_size_of_a_dim(dim, bounds, size):
    dims = DimRanges(RANGES)
    assert dims.bounds(dim) == bounds
    assert dims.size(dim) == size


def _value(terms: dict, values: dict[str, int]) -> int:
    """The value of the generated polynomial {names: coefficient} for `values` of its symbols."""
    return sum(c * math.prod(values[n] for n in names) for names, c in terms.items())


@settings(max_examples=150, deadline=None)
@given(terms=st.lists(st.tuples(st.integers(-3, 3), st.lists(st.sampled_from(["a", "b", "c"]), max_size=2)),
                      min_size=1, max_size=4),
       ranges=st.fixed_dictionaries({name: st.tuples(st.integers(0, 5), st.integers(0, 5))
                                     for name in ("a", "b", "c")}))
def test_bounds_hold_every_value_the_symbols_can_give(terms, ranges):
    """Brute force: for every assignment of the symbols in their ranges, the dim's value (clamped at 0: a dim is never
    negative) lies within `bounds`, and `size` is one of the values the bounds allow."""
    ranges = {n: (min(lo, hi), max(lo, hi)) for n, (lo, hi) in ranges.items()}
    p: dict = {}
    for coefficient, names in terms:
        key = tuple(sorted(names))
        p[key] = p.get(key, 0) + coefficient
    p = {k: v for k, v in p.items() if v}
    dim = render(p)
    if not isinstance(dim, str):
        return
    dims = DimRanges(ranges)
    low, high = dims.bounds(dim)
    names = sorted({n for key in p for n in key})
    for combo in itertools.product(*(range(ranges[n][0], ranges[n][1] + 1) for n in names)):
        value = max(_value(p, dict(zip(names, combo))), 0)
        assert low <= value <= high, (dim, combo, value, (low, high))
    assert low <= dims.size(dim) <= high


def test_assumed_names_each_symbol_once_with_its_range():
    dims = DimRanges(RANGES)
    assumed = dims.assumed(["past + 1", "past", 64, None, "2*batch*heads", "seq"])
    assert assumed == {UNNAMED: {"size": 1, "range": None}, "batch": {"size": 8, "range": [1, 8]},
                       "heads": {"size": 1, "range": None}, "past": {"size": 2048, "range": [0, 2048]},
                       "seq": {"size": 4, "range": [4, -1]}}
    assert assumed_text(assumed) == ("? = 1 (unnamed dims: no range can bound them), batch = 8 (top of 1..8), "
                                     "heads = 1 (no range given), past = 2048 (top of 0..2048), "
                                     "seq = 4 (4..inf has no top)")
    assert dims.assumed([1, 3, 224, 224]) == {}


@pytest.mark.parametrize("ranges", [{"past": [5, 2]}, {"past": [0]}, {"past": "0..8"}, {"past": [-1, 4]},
                                    {"past": [True, 4]}])
def test_a_damaged_range_is_refused_naming_it(ranges):
    with pytest.raises(GraphError, match="range .* of dim 'past' is not \\[low, high\\]"):
        DimRanges(ranges)


def test_docstring_example_runs():
    result = doctest.testmod(dim_ranges)
    assert result.attempted > 0 and result.failed == 0
