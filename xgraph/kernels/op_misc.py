"""Small leftovers: the random generators and the string ops.

Random ops: a `seed` attribute makes a node deterministic: every run with that seed draws
the same values (kernels are stateless, so there is no per-node stream that advances between
runs). Without a seed each run draws fresh values. The ONNX conformance suite only checks the
shape and dtype of random outputs, as the values are implementation-defined.

String ops run on the host only: tensors of ONNX strings are numpy object arrays of `str`.
"""
from __future__ import annotations

import operator
import re

import numpy as np
import onnx

from xgraph.kernels.op_shape import dims_of, kernel_error
from xgraph.kernels.registry import builtin_kernel as kernel

_HOST = ("CPU",)


def _generator(seed: float | None) -> np.random.Generator:
    """A generator per seed: the float's bit pattern keys the stream, so 1.5 and -1.5 differ."""
    return np.random.default_rng(None if seed is None else int(np.float64(seed).view(np.uint64)))


def _dtype(op: str, dtype: int | None, like: np.ndarray | None = None) -> np.dtype:
    if dtype is None:
        return like.dtype if like is not None else np.dtype(np.float32)
    try:
        out = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(dtype)))
    except (KeyError, ValueError, TypeError):
        out = None
    if out is None or out.kind in "OUSb":
        raise kernel_error(op, f"dtype {dtype} is not a numeric ONNX data type")
    return out


@kernel("RandomUniform", since=1)
def random_uniform(*, shape=None, dtype: int = 1, high: float = 1.0, low: float = 0.0,
                   seed: float | None = None) -> np.ndarray:
    """ONNX RandomUniform: uniform draws in [low, high) of the required `shape`."""
    if shape is None:
        raise kernel_error("RandomUniform", "attribute 'shape' is required")
    dims = dims_of(shape, "RandomUniform")
    return _generator(seed).uniform(low, high, dims).astype(_dtype("RandomUniform", dtype))


@kernel("RandomNormal", since=1)
def random_normal(*, shape=None, dtype: int = 1, mean: float = 0.0, scale: float = 1.0,
                  seed: float | None = None) -> np.ndarray:
    """ONNX RandomNormal: normal draws N(mean, scale^2) of the required `shape`."""
    if shape is None:
        raise kernel_error("RandomNormal", "attribute 'shape' is required")
    dims = dims_of(shape, "RandomNormal")
    return _generator(seed).normal(mean, scale, dims).astype(_dtype("RandomNormal", dtype))


@kernel("RandomUniformLike", since=1)
def random_uniform_like(x: np.ndarray, *, dtype: int | None = None, high: float = 1.0, low: float = 0.0,
                        seed: float | None = None) -> np.ndarray:
    """ONNX RandomUniformLike: uniform draws shaped like x (x's dtype unless `dtype`)."""
    return _generator(seed).uniform(low, high, x.shape).astype(_dtype("RandomUniformLike", dtype, x))


@kernel("RandomNormalLike", since=1)
def random_normal_like(x: np.ndarray, *, dtype: int | None = None, mean: float = 0.0, scale: float = 1.0,
                       seed: float | None = None) -> np.ndarray:
    """ONNX RandomNormalLike: normal draws shaped like x (x's dtype unless `dtype`)."""
    return _generator(seed).normal(mean, scale, x.shape).astype(_dtype("RandomNormalLike", dtype, x))


@kernel("Bernoulli", since=15)
def bernoulli(x: np.ndarray, *, dtype: int | None = None, seed: float | None = None) -> np.ndarray:
    """ONNX Bernoulli: 1 with probability x, else 0 (x's dtype unless `dtype`)."""
    out_dtype = x.dtype if dtype is None else np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(dtype)))
    return (_generator(seed).random(x.shape) < x).astype(out_dtype)


# -- strings -----------------------------------------------------------------------------

def _strings(x: np.ndarray, op: str) -> np.ndarray:
    """x as an object array of str (bytes decoded as UTF-8)."""
    x = np.asarray(x)
    if x.dtype.kind not in "OUS":
        raise kernel_error(op, f"input must be a string tensor, got dtype {x.dtype}")
    if x.dtype.kind == "S" or (x.dtype == object and any(isinstance(s, bytes) for s in x.flat)):
        decode = np.frompyfunc(lambda s: s.decode("utf-8") if isinstance(s, bytes) else str(s), 1, 1)
        return np.asarray(decode(x), dtype=object)
    return x.astype(object, copy=False)


_CASE = {"NONE": lambda s: s, "LOWER": str.lower, "UPPER": str.upper}


@kernel("StringNormalizer", since=10, devices=_HOST)
def string_normalizer(x: np.ndarray, *, case_change_action: str = "NONE", is_case_sensitive: int = 0,
                      locale: str = "", stopwords=None) -> np.ndarray:
    """ONNX StringNormalizer: drop stopwords, change case; [C] or [1, C] in, [""] if nothing is left.

    Case mapping is Python's Unicode mapping whatever `locale` says.
    """
    if case_change_action not in _CASE:
        raise kernel_error("StringNormalizer", f"case_change_action {case_change_action!r} is not NONE, LOWER or UPPER")
    words = _strings(x, "StringNormalizer")
    if not (words.ndim == 1 or (words.ndim == 2 and words.shape[0] == 1)):
        raise kernel_error("StringNormalizer", f"input must be [C] or [1, C], got shape {words.shape}")
    kept = words.reshape(-1).tolist()
    if stopwords:
        if is_case_sensitive:
            stops = set(stopwords)
            kept = [w for w in kept if w not in stops]
        else:
            stops = {s.lower() for s in stopwords}
            kept = [w for w in kept if w.lower() not in stops]
    change = _CASE[case_change_action]
    out = np.array([change(w) for w in kept] or [""], dtype=object)
    return out if words.ndim == 1 else out.reshape(1, -1)


@kernel("RegexFullMatch", since=20, devices=_HOST)
def regex_full_match(x: np.ndarray, *, pattern: str | None = None) -> np.ndarray:
    """ONNX RegexFullMatch: whether each string matches `pattern` entirely (RE2 syntax via Python re)."""
    try:
        regex = re.compile(pattern or "")
    except re.error as e:
        raise kernel_error("RegexFullMatch", f"pattern {pattern!r} is not a valid regular expression: {e}") from None
    strings = _strings(x, "RegexFullMatch")
    matched = [regex.fullmatch(s) is not None for s in strings.reshape(-1).tolist()]
    return np.array(matched, dtype=bool).reshape(strings.shape)


_concat = np.frompyfunc(operator.add, 2, 1)


@kernel("StringConcat", since=20, devices=_HOST)
def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ONNX StringConcat: element-wise x + y with numpy broadcasting."""
    return np.asarray(_concat(_strings(x, "StringConcat"), _strings(y, "StringConcat")), dtype=object)


@kernel("StringSplit", since=20, devices=_HOST)
def string_split(x: np.ndarray, *, delimiter: str | None = None, maxsplit: int | None = None):
    """ONNX StringSplit: (pieces padded with "" to the longest split, int64 piece counts).

    No or an empty delimiter splits on runs of whitespace, as Python's str.split() does.
    """
    strings = _strings(x, "StringSplit")
    parts = [s.split(delimiter or None, -1 if maxsplit is None else int(maxsplit)) for s in strings.reshape(-1).tolist()]
    counts = np.array([len(p) for p in parts], dtype=np.int64)
    width = int(counts.max(initial=0))
    out = np.full((len(parts), width), "", dtype=object)
    for row, pieces in zip(out, parts):
        row[:len(pieces)] = pieces
    return out.reshape(strings.shape + (width,)), counts.reshape(strings.shape)
