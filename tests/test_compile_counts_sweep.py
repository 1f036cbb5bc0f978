"""Compile counts over many shapes of one pattern: elementwise, reduction and manipulation
ops of jd.numpy and jd.nn's non-convolution ops compile a handful of kernels (symbolic
extents), not one per shape; every result is checked against NumPy in float64."""
import math

import numpy as np
import pytest

import jitdl as jd
import jitdl.numpy as jnp
from jitdl import eager

F = jd.nn
erf = np.vectorize(math.erf, otypes=[np.float64])     # (scipy is no dependency)


def _shapes(rng, rank, n=12):
    """n distinct shapes of `rank` with every size >= 2 (a size 1 is another pattern)."""
    top = {1: 3000, 2: 60, 3: 16, 4: 8}[rank]
    seen = []
    while len(seen) < n:
        s = tuple(int(v) for v in rng.integers(2, top + 1, rank))
        if s not in seen:
            seen.append(s)
    return seen


def _kernels():
    return sum(v["kernels"] for v in eager.cache_info().values())


def _sweep(rng, rank, make, call, ref, most=2):
    eager.clear()
    for s in _shapes(rng, rank):
        args = make(s)
        got, want = call(*args), ref(*args)
        assert np.asarray(got).dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert _kernels() <= most, eager.cache_info()


CASES = {
    "add (n,m)+(m,)": (2, lambda r, s: (r.standard_normal(s), r.standard_normal(s[1:])),
                       jnp.add, np.add),
    "hypot rank 3": (3, lambda r, s: (r.standard_normal(s), r.standard_normal(s)),
                     jnp.hypot, np.hypot),
    "power (n,m)**(m,)": (2, lambda r, s: (r.random(s) + 0.5, r.standard_normal(s[1:])),
                          jnp.power, np.power),
    "argmax axis=0": (3, lambda r, s: (r.standard_normal(s),),
                      lambda a: jnp.argmax(a, axis=0), lambda a: np.argmax(a, axis=0)),
    "sum axis=(0, 2)": (3, lambda r, s: (r.standard_normal(s),),
                        lambda a: jnp.sum(a, axis=(0, 2)), lambda a: np.sum(a, axis=(0, 2))),
    "var axis=1 keepdims": (2, lambda r, s: (r.standard_normal(s),),
                            lambda a: jnp.var(a, axis=1, keepdims=True),
                            lambda a: np.var(a, axis=1, keepdims=True)),
    "concatenate axis=1": (2, lambda r, s: (r.standard_normal(s), r.standard_normal((s[0], 3))),
                           lambda a, b: jnp.concatenate([a, b], axis=1),
                           lambda a, b: np.concatenate([a, b], axis=1)),
    "pad reflect": (2, lambda r, s: (r.standard_normal(s),),
                    lambda a: jnp.pad(a, 1, mode="reflect"), lambda a: np.pad(a, 1, mode="reflect")),
    "roll axis=1": (3, lambda r, s: (r.standard_normal(s),),
                    lambda a: jnp.roll(a, -2, axis=1), lambda a: np.roll(a, -2, axis=1)),
    "outer": (2, lambda r, s: (r.standard_normal(s[0]), r.standard_normal(s[1])),
              jnp.outer, np.outer),
    "tile (2, 3)": (2, lambda r, s: (r.standard_normal(s),),
                    lambda a: jnp.tile(a, (2, 3)), lambda a: np.tile(a, (2, 3))),
    "gelu": (4, lambda r, s: (r.standard_normal(s),), F.gelu,
             lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2)))),
    "softmax dim=0": (3, lambda r, s: (r.standard_normal(s),), lambda x: F.softmax(x, dim=0),
                      lambda x: np.exp(x) / np.exp(x).sum(axis=0, keepdims=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_library_ops_compile_per_pattern_not_per_shape(case):
    rank, make, call, ref = CASES[case]
    rng = np.random.default_rng(sorted(CASES).index(case))
    _sweep(rng, rank, lambda s: make(rng, s), call, ref)


def _bn(x, mean, var, w=None, b=None, eps=1e-5):
    sh = (1, -1) + (1,) * (x.ndim - 2)
    y = (x - mean.reshape(sh)) / np.sqrt(var.reshape(sh) + eps)
    return y * (1 if w is None else w.reshape(sh)) + (0 if b is None else b.reshape(sh))


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_batch_norm_compiles_once_over_shapes(rank):
    """Eval batch norm, every size varying (channels too): one kernel; a 4-d input runs as
    (N, C, H * W)."""
    rng = np.random.default_rng(rank)

    def make(s):
        c = s[1]
        return (rng.standard_normal(s), rng.standard_normal(c), rng.random(c) + 0.5,
                rng.standard_normal(c), rng.standard_normal(c))
    _sweep(rng, rank, make, F.batch_norm, _bn, most=1)
    _sweep(rng, rank, lambda s: make(s)[:3], F.batch_norm, _bn, most=1)


def test_batch_norm_training_compiles_once_and_updates_statistics():
    rng = np.random.default_rng(5)
    eager.clear()
    for s in _shapes(rng, 4, 8) + [(3, 4, 5, 6, 2)]:
        x = rng.standard_normal(s)
        rm, rv = np.zeros(s[1]), np.ones(s[1])
        axes = (0,) + tuple(range(2, x.ndim))
        got = F.batch_norm(x, rm, rv, training=True, momentum=0.5)
        np.testing.assert_allclose(got, _bn(x, x.mean(axes), x.var(axes)), rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(rm, 0.5 * x.mean(axes), rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(rv, 0.5 + 0.5 * x.var(axes, ddof=1), rtol=1e-12)
    assert _kernels() == 1, eager.cache_info()


def test_batch_norm_of_a_strided_input_and_float32():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 6, 5, 3)).transpose(0, 1, 3, 2)
    m, v = rng.standard_normal(6), rng.random(6) + 0.5
    np.testing.assert_allclose(F.batch_norm(x, m, v), _bn(x, m, v), rtol=1e-12, atol=1e-12)
    x32, m32, v32 = (a.astype(np.float32) for a in (x, m, v))
    got = F.batch_norm(x32, m32, v32)
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, _bn(x, m, v), rtol=2e-5, atol=2e-5)


def _ln(x, k, w=None, b=None, eps=1e-5):
    axes = tuple(range(x.ndim - k, x.ndim))
    y = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return y * (1 if w is None else w) + (0 if b is None else b)


@pytest.mark.parametrize("rank, k", [(2, 1), (3, 1), (3, 2)])
def test_layer_and_rms_norm_compile_once_over_normalized_sizes(rank, k):
    """normalized_shape as the input's own trailing sizes (what a model passes): one
    kernel for every size, the normalized ones included, with and without parameters."""
    rng = np.random.default_rng(10 * rank + k)

    def make(s):
        ns = s[rank - k:]
        return rng.standard_normal(s), rng.standard_normal(ns), rng.standard_normal(ns)
    _sweep(rng, rank, make, lambda x, w, b: F.layer_norm(x, x.shape[rank - k:], w, b),
           lambda x, w, b: _ln(x, k, w, b), most=1)
    _sweep(rng, rank, lambda s: make(s)[:1], lambda x: F.layer_norm(x, x.shape[rank - k:]),
           lambda x: _ln(x, k), most=1)
    _sweep(rng, rank, lambda s: make(s)[:2],
           lambda x, w: F.rms_norm(x, list(x.shape[rank - k:]), w, eps=1e-6),
           lambda x, w: x / np.sqrt(np.mean(x * x, axis=tuple(range(rank - k, rank)),
                                            keepdims=True) + 1e-6) * w, most=1)


def test_embedding_compiles_once_over_shapes():
    rng = np.random.default_rng(7)
    _sweep(rng, 2, lambda s: (rng.integers(0, s[1], (s[0], 3)), rng.standard_normal(s[::-1])),
           F.embedding, lambda i, w: w[i], most=1)
