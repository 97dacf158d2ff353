"""Symbolic dims: integer polynomials over the model's dim names, written as canonical strings.

A dim is an `int`, a `str` (a symbol such as `"past"`, or an expression such as `"past + 1"` or
`"batch*heads"`) or `None` (unknown). Shape arithmetic only needs sums, differences and products
of dims, and exact division by a monomial (a `Reshape` with `-1`), so a dim is kept as a
polynomial with integer coefficients, `{monomial: coefficient}` where a monomial is a sorted tuple
of symbol names. Its string form is canonical: two dims are known equal exactly when their
strings are equal, which is what placement and merging compare.

>>> render(add(poly("past"), poly(1)))
'past + 1'
>>> render(sub(poly("past + 1"), poly("past")))
1
>>> render(mul(poly("batch"), poly(4)))
'4*batch'
>>> render(divide(poly("4*batch*seq"), poly("batch")))
'4*seq'

No computer algebra library is needed at this size (sympy is not a dependency): every operation
is linear in the number of terms, and the expressions of exported models have a handful.
"""
from __future__ import annotations

import re
from typing import Union

#: a polynomial: {sorted tuple of symbol names: integer coefficient}; {} is zero
Poly = dict
Dim = Union[int, str, None]

_ATOM = re.compile(r"[A-Za-z_][\w.:/-]*")
_TERM = re.compile(r"\s*([+-])?\s*(?:(\d+)(?:\*|$|(?=\s)))?([A-Za-z_][\w.:/*-]*)?\s*")


def poly(d: "int | str") -> Poly | None:
    """The polynomial of an int or a dim string (a name, or an expression `render` wrote)."""
    if isinstance(d, bool) or d is None:
        return None
    if isinstance(d, int):
        return {(): d} if d else {}
    if _ATOM.fullmatch(d) and "*" not in d:
        return {(d,): 1}
    return _parse(d) or {(d,): 1}


def _parse(text: str) -> Poly | None:
    """`render`'s own syntax (`2*a*b + c - 3`); None when `text` is not written that way."""
    out: Poly = {}
    pos = 0
    first = True
    while pos < len(text):
        m = _TERM.match(text, pos)
        if m is None or m.end() == pos:
            return None
        sign, coef, symbols = m.groups()
        if sign is None and not first:
            return None
        if coef is None and not symbols:
            return None
        value = int(coef) if coef is not None else 1
        names = tuple(sorted(s for s in (symbols or "").split("*") if s))
        if any(not _ATOM.fullmatch(s) for s in names):
            return None
        key = names
        out[key] = out.get(key, 0) + (-value if sign == "-" else value)
        pos = m.end()
        first = False
    return {k: v for k, v in out.items() if v}


def render(p: Poly | None) -> Dim:
    """The canonical dim of a polynomial: an int when it has no symbol, else its string."""
    if p is None:
        return None
    if not p:
        return 0
    if set(p) == {()}:
        return p[()]
    parts = []
    for key in sorted(p, key=lambda k: (k == (), k)):
        coef = p[key]
        body = "*".join(key)
        text = body if abs(coef) == 1 and body else (f"{abs(coef)}*{body}" if body else str(abs(coef)))
        if parts:
            parts.append(("- " if coef < 0 else "+ ") + text)
        else:
            parts.append(("-" if coef < 0 else "") + text)
    return " ".join(parts)


def add(a: Poly | None, b: Poly | None, sign: int = 1) -> Poly | None:
    """a + sign * b."""
    if a is None or b is None:
        return None
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + sign * v
    return {k: v for k, v in out.items() if v}


def sub(a: Poly | None, b: Poly | None) -> Poly | None:
    """a - b."""
    return add(a, b, -1)


def mul(a: Poly | None, b: Poly | None) -> Poly | None:
    """a * b."""
    if a is None or b is None:
        return None
    out: Poly = {}
    for ka, va in a.items():
        for kb, vb in b.items():
            key = tuple(sorted(ka + kb))
            out[key] = out.get(key, 0) + va * vb
    return {k: v for k, v in out.items() if v}


def divide(a: Poly | None, b: Poly | None) -> Poly | None:
    """a / b when b is a monomial dividing every term of a exactly; else None (unknown)."""
    if a is None or b is None or len(b) != 1:
        return None
    (kb, vb), = b.items()
    if vb == 0:
        return None
    out: Poly = {}
    for ka, va in a.items():
        rest = list(ka)
        for s in kb:
            if s not in rest:
                return None
            rest.remove(s)
        if va % vb:
            return None
        out[tuple(rest)] = va // vb
    return out


def constant(p: Poly | None) -> int | None:
    """The int value of a polynomial without symbols, else None."""
    if p is None:
        return None
    if not p:
        return 0
    return p[()] if set(p) == {()} else None


def dim_add(a: Dim, b: Dim, sign: int = 1) -> Dim:
    """The dim a + sign * b."""
    if a is None or b is None:
        return None
    return render(add(poly(a), poly(b), sign))


def dim_mul(a: Dim, b: Dim) -> Dim:
    """The dim a * b."""
    if a is None or b is None:
        return None
    return render(mul(poly(a), poly(b)))


def dim_div(a: Dim, b: Dim) -> Dim:
    """The dim a / b when it divides exactly (None otherwise)."""
    if a is None or b is None:
        return None
    return render(divide(poly(a), poly(b)))


def dim_product(dims) -> Dim:
    """The product of dims (None if any is unknown)."""
    out: Dim = 1
    for d in dims:
        out = dim_mul(out, d)
    return out


__all__ = ["Dim", "constant", "dim_add", "dim_div", "dim_mul", "dim_product", "divide", "mul", "poly", "render",
           "sub"]
