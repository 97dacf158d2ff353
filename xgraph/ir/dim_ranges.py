"""The ranges of a compile's dynamic dims, and the size the cost model assumes for each.

`input_shape` bounds a dynamic dim with a range (`"past:0..2048"`); prepare records the ranges
by symbol (`report["prepare"]["dim_ranges"]`). Shapes after prepare hold symbols and expressions
over them (`symbolic_dims`: `past + 1`, `2*batch`), so a dim's range follows from its symbols'
by interval arithmetic: with `past` in 0..2048, `past + 1` is in 1..2049. A symbol without a
range (and a dim shape inference left unnamed) may be anything from 0 up, unbounded.

Two questions use the ranges, each answered here once:

- *may a device take it*: an op-info rule's `dynamic_range` refuses an op whose dynamic dims
  can leave it (`xgraph.compiler.support`), from `bounds`;
- *what does it cost*: the roofline needs one size per dim (`size`). A symbol with a finite
  range is assumed at its top, the shape the device must be ready for (a TensorRT engine sizes
  its memory for a profile's max shapes) and the one the range check passed; a symbol without
  an upper bound at the smallest non-empty size it allows, `max(low, DEFAULT_SIZE)`, as trtexec
  fills dynamic dims given no shapes. An expression is evaluated at its symbols' sizes
  (`past + 1` at 2049). docs/devices.md ("Dynamic shapes on AI Core") says why the top and not
  the midpoint.

    >>> dims = DimRanges({"past": (0, 2048)})
    >>> dims.bounds("past + 1"), dims.size("past + 1"), dims.size("batch"), dims.shape(("batch", "past", 64))
    ((1, 2049), 2049, 1, (1, 2048, 64))
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from xgraph.ir.symbolic_dims import Dim, poly
from xgraph.errors import GraphError

if TYPE_CHECKING:
    from xgraph.ir import Graph, Tensor

#: The size assumed for a dynamic dim with no upper bound: the smallest non-empty one, as trtexec
#: substitutes 1 for each dynamic dim of an input given no shapes (and as the cost model always did).
DEFAULT_SIZE = 1
#: The key `assumed` uses for dims shape inference left unnamed (no range can name them).
UNNAMED = "?"


def _checked(ranges: Mapping[str, Any], where: str) -> dict[str, tuple[int, int]]:
    out = {}
    for name, value in ranges.items():
        ok = (isinstance(name, str) and isinstance(value, (list, tuple)) and len(value) == 2
              and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
              and value[0] >= 0 and (value[1] == -1 or value[1] >= value[0]))
        if not ok:
            raise GraphError(f"{where}: range {value!r:.60} of dim {name!r} is not [low, high] with 0 <= low <= high "
                             "(high -1: unbounded); the compiled graph is damaged, compile the model again")
        out[name] = (value[0], value[1])
    return out


class DimRanges:
    """{symbol: (low, high)} (high -1: unbounded), asked for the range and the assumed size of any dim."""

    def __init__(self, ranges: "Mapping[str, Sequence[int]] | None" = None, where: str = "dim ranges") -> None:
        self.ranges = _checked(ranges or {}, where)
        #: `size` of each dynamic dim asked so far: a model repeats a few dims over all its tensors, and parsing
        #: one costs more than the roofline of the op it sizes (a 20k-op dynamic chain's report: 1.18 s
        #: without, 0.54 s with)
        self._sizes: dict[Dim, int] = {}

    @classmethod
    def of_graph(cls, graph: "Graph") -> "DimRanges":
        """The ranges a compiled graph was compiled with (its "prepare_summary" attr; none before a compile)."""
        summary = graph.get_attr("prepare_summary") if graph.has_attr("prepare_summary") else {}
        ranges = summary.get("dim_ranges") if isinstance(summary, dict) else None
        if ranges is not None and not isinstance(ranges, dict):
            raise GraphError(f"graph {graph.name!r}: its 'prepare_summary' attr has 'dim_ranges' {ranges!r:.60}, not "
                             "a table of dim -> [low, high]; the compiled graph is damaged, compile the model again")
        return cls(ranges, f"graph {graph.name!r}: its 'prepare_summary' attr")

    def __repr__(self) -> str:
        return f"DimRanges({self.ranges})"

    # -- one symbol ---------------------------------------------------------------------------------------------------
    def symbol_bounds(self, name: str) -> tuple[int, float]:
        """(low, high) of one symbol, high `math.inf` when unbounded or not given."""
        low, high = self.ranges.get(name, (0, -1))
        return low, (math.inf if high == -1 else high)

    def symbol_size(self, name: str) -> int:
        """The size assumed for one symbol: the top of its range, else `max(low, DEFAULT_SIZE)`."""
        low, high = self.ranges.get(name, (0, -1))
        return high if high != -1 else max(low, DEFAULT_SIZE)

    @staticmethod
    def is_symbol(dim: Dim) -> bool:
        """True for a dim that is one symbol (`past`), not an int or an expression (`past + 1`)."""
        return isinstance(dim, str) and poly(dim) == {(dim,): 1}

    # -- any dim ------------------------------------------------------------------------------------------------------
    def bounds(self, dim: Dim) -> tuple[int, int | None]:
        """(low, high) a dim may take (high None: unbounded), by interval arithmetic over its symbols (each >= 0)."""
        if isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0:
            return dim, dim
        terms = poly(dim) if isinstance(dim, str) else None
        if terms is None:
            return 0, None
        low, high = 0.0, 0.0
        for names, coefficient in terms.items():
            lows, highs = zip(*map(self.symbol_bounds, names)) if names else ((), ())
            small, large = _product(lows), _product(highs)
            low += coefficient * (small if coefficient > 0 else large)
            high += coefficient * (large if coefficient > 0 else small)
        low = max(low, 0.0)
        return int(low), (None if high == math.inf else int(max(high, low)))

    def size(self, dim: Dim) -> int:
        """The size the cost model assumes for a dim: an int as it is, an expression at its symbols' sizes (kept
        within its bounds), an unnamed dim `DEFAULT_SIZE`."""
        if type(dim) is int and dim >= 0:
            return dim
        known = self._sizes.get(dim)
        if known is None:
            known = self._sizes[dim] = self._size(dim)
        return known

    def _size(self, dim: Dim) -> int:
        terms = poly(dim) if isinstance(dim, str) else None
        if terms is None:
            return DEFAULT_SIZE
        value = sum(coefficient * math.prod(map(self.symbol_size, names)) for names, coefficient in terms.items())
        low, high = self.bounds(dim)
        return max(low, value if high is None else min(value, high))

    def shape(self, shape: "Sequence[Dim]") -> tuple[int, ...]:
        """`size` of each dim."""
        return tuple(d if type(d) is int and d >= 0 else self.size(d) for d in shape)

    # -- what a report says -------------------------------------------------------------------------------------------
    def assumed(self, dims: "Iterable[Dim]") -> dict[str, dict[str, Any]]:
        """{symbol: {"size", "range"}} for the symbols of the dynamic `dims` (range None: none given;
        [low, -1]: unbounded), plus `UNNAMED` for dims without a name; sorted by symbol."""
        out: dict[str, dict[str, Any]] = {}
        for dim in dict.fromkeys(dims):  # each distinct dim once
            if isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0:
                continue
            terms = poly(dim) if isinstance(dim, str) else None
            names = {name for key in terms for name in key} if terms is not None else {UNNAMED}
            for name in names:
                if name not in out:
                    given = self.ranges.get(name)
                    out[name] = {"size": DEFAULT_SIZE if name == UNNAMED else self.symbol_size(name),
                                 "range": list(given) if given is not None else None}
        return dict(sorted(out.items()))


def _product(values: "Sequence[float]") -> float:
    """The product of non-negative bounds, where 0 times unbounded is 0 (an empty dim stays empty)."""
    return 0.0 if 0 in values else math.prod(values)


def tensor_dims(tensors: "Iterable[Tensor | None]") -> list[Dim]:
    """Every dim of the non-weight tensors with a known rank, in order (the input of `DimRanges.assumed`)."""
    return [d for t in tensors if t is not None and not t.is_const and t.shape is not None for d in t.shape]


def assumed_text(assumed: Mapping[str, Mapping[str, Any]]) -> str:
    """One phrase for `DimRanges.assumed`: "past = 2048 (top of 0..2048), batch = 1 (no range given)"."""
    parts = []
    for name, entry in assumed.items():
        given = entry.get("range")
        if name == UNNAMED:
            why = "unnamed dims: no range can bound them"
        elif given is None:
            why = "no range given"
        elif given[1] == -1:
            why = f"{given[0]}..inf has no top"
        else:
            why = f"top of {given[0]}..{given[1]}"
        parts.append(f"{name} = {entry['size']} ({why})")
    return ", ".join(parts)


__all__ = ["DEFAULT_SIZE", "DimRanges", "UNNAMED", "assumed_text", "tensor_dims"]
