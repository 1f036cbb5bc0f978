"""The automatic schedule's config space: every config a tuner may draw compiles to a
correct kernel, the space is large where the rule makes many decisions (a register-tiled
reduction), and the default config is the rule's schedule.

Configs are drawn at random from the space of each definition (seeded per test), run on
fresh random inputs and compared with NumPy in float64; on the host through with_config
and out= arrays prefilled with sentinels (every element written), and for an AVX-512
target with fixed policies (32 registers, 64-byte vectors) through the pipeline, so the
configs sized for such a machine run here too.
"""
import numpy as np
import pytest

import jitdl as jd
from jitdl import pipeline
from jitdl.runtime import engine
from jitdl.runtime.kernel import Kernel
from _check import check
from _passes import fixed_cpu

F32, F64 = np.float32, np.float64
THREADS = 2


@jd.compute
def matmul(A, B):
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
    return C


@jd.compute
def bmm(A, B):
    C[b, i, j] = sum(A[b, i, k] * B[b, k, j] for k in range(A.shape[2]))
    return C


@jd.compute
def conv2d(X, W):
    n, c, h, w = X.shape
    f, _, kh, kw = W.shape
    Y[b, o, y, x] = sum(X[b, ci, y + r, x + q] * W[o, ci, r, q]
                        for ci in range(c) for r in range(kh) for q in range(kw))
    return Y


@jd.compute
def matmul_bias_relu(A, B, bias):
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
    D[i, j] = max(C[i, j] + bias[j], 0.0)
    return D


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def layernorm(X, g, b):
    n, m = X.shape
    mu[i] = sum(X[i, k] for k in range(m)) / m
    var[i] = sum((X[i, k] - mu[i]) * (X[i, k] - mu[i]) for k in range(m)) / m
    Y[i, j] = (X[i, j] - mu[i]) / sqrt(var[i] + 1e-5) * g[j] + b[j]
    return Y


def _conv_ref(x, w):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    out = np.zeros((n, f, h - kh + 1, wd - kw + 1))
    for r in range(kh):
        for q in range(kw):
            out += np.einsum("bcyx,fc->bfyx", x[:, :, r:r + out.shape[2], q:q + out.shape[3]],
                             w[:, :, r, q])
    return out


def _softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _layernorm_ref(x, g, b):
    mu = x.mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * g + b


def _normal(rng, *shape):
    return rng.standard_normal(shape).astype(F32)


def _cases(rng):
    a, b = _normal(rng, 37, 23), _normal(rng, 23, 19)
    a2, b2 = _normal(rng, 130, 150), _normal(rng, 150, 170)
    ba, bb = _normal(rng, 3, 29, 20), _normal(rng, 3, 20, 45)
    x, w = _normal(rng, 1, 6, 10, 38), _normal(rng, 10, 6, 3, 3)
    bias = _normal(rng, 170)
    xs = _normal(rng, 33, 70)
    g, beta = _normal(rng, 70), _normal(rng, 70)
    f64 = lambda *t: [np.asarray(v, F64) for v in t]          # noqa: E731
    return {
        "matmul 37x19x23": (matmul, (a, b), np.matmul(*f64(a, b))),
        "matmul 130x170x150": (matmul, (a2, b2), np.matmul(*f64(a2, b2))),
        "bmm": (bmm, (ba, bb), np.matmul(*f64(ba, bb))),
        "conv2d": (conv2d, (x, w), _conv_ref(*f64(x, w))),
        "matmul+bias+relu": (matmul_bias_relu, (a2, b2, bias),
                             np.maximum(np.matmul(*f64(a2, b2)) + f64(bias)[0], 0)),
        "softmax": (softmax, (xs,), _softmax_ref(*f64(xs))),
        "layernorm": (layernorm, (xs, g, beta), _layernorm_ref(*f64(xs, g, beta))),
    }


CASES = ["matmul 37x19x23", "matmul 130x170x150", "bmm", "conv2d", "matmul+bias+relu",
         "softmax", "layernorm"]


def _rtol(ref):
    return 2e-4 if ref.ndim and ref.size else 1e-5


@pytest.mark.parametrize("case", CASES)
def test_random_configs_of_the_space_are_correct(case, rng):
    f, args, ref = _cases(rng)[case]
    space = f.config_space(*args)
    assert space, f"{case}: the automatic schedule declares no knobs"
    for cfg in space.sample(4, seed=len(case)):
        check(f.with_config(**cfg), args, ref, F32, rtol=2e-4, atol=2e-4)


def _avx512_kernel(f, args, config):
    """The kernel of f scheduled for an AVX-512 target with fixed policies under
    `config` (code generation is for the host, so it runs here)."""
    args = f._args(tuple(args), {})
    graph = f._trace(f._specs(args))
    target = fixed_cpu()
    opts = pipeline.Options(f.name, False, THREADS)
    low = pipeline.lower(graph, target, opts, config=config)
    art = pipeline.build(low, target, opts)
    return low, Kernel(art.signature, engine.Loaded(art.obj, art.signature.symbol))


@pytest.mark.parametrize("case", ["matmul 37x19x23", "conv2d"])
def test_configs_sized_for_avx512_are_correct(case, rng):
    f, args, ref = _cases(rng)[case]
    low, _ = _avx512_kernel(f, args, None)
    space = low.config.space
    assert any(n.endswith(".tile_k") for n in space.names)
    for cfg in space.sample(3, seed=3):
        _, k = _avx512_kernel(f, args, cfg)
        np.testing.assert_allclose(k(tuple(args)), ref, rtol=2e-4, atol=2e-4)


def test_the_matmul_space_holds_blis_shaped_configs_for_avx512(rng):
    """On a 32-register AVX-512 target the space has the micro-tiles of BLIS's kernels
    for it (12 x 32 and 14 x 32 float32), k blocks of 256-384 steps, packing of both
    operands, and such a config computes the right product."""
    a, b = _normal(rng, 200, 160), _normal(rng, 160, 144)
    low, _ = _avx512_kernel(matmul, (a, b), None)
    space = low.config.space
    assert {12, 14} <= set(space["C.tile_i"].options)
    assert 32 in space["C.tile_j"].options
    assert any(128 <= kc <= 384 for kc in space["C.tile_k"].options)
    assert "A+B" in space["C.pack"].options
    cfg = {"C.tile_i": 14, "C.tile_j": 32, "C.tile_k": 64, "C.pack": "A+B",
           "C.block_j": 64, "C.unroll_k": 4}
    low, k = _avx512_kernel(matmul, (a, b), cfg)
    text = str(low.func)
    assert "A_pack" in text and "B_pack" in text
    np.testing.assert_allclose(k((a, b)), a.astype(F64) @ b, rtol=2e-4, atol=2e-4)


def test_the_matmul_space_is_large_and_its_default_is_the_rule(rng):
    a, b = _normal(rng, 150, 130), _normal(rng, 130, 170)
    space = matmul.config_space(a, b)
    assert len(space) >= 1000
    for knob in ("tile_i", "tile_j", "tile_k", "block_j", "pack", "order", "unroll_k",
                 "parallel"):
        assert f"C.{knob}" in space.names
    assert str(matmul.with_config(**space.default()).lower(a, b)) == str(matmul.lower(a, b))


@pytest.mark.parametrize("case", CASES)
def test_the_default_config_is_the_rules_schedule(case, rng):
    f, args, _ = _cases(rng)[case]
    space = f.config_space(*args)
    assert str(f.with_config(**space.default()).lower(*args)) == str(f.lower(*args))


def test_knobs_change_the_schedule(rng):
    """Each knob of a tiled matmul has an option off its default that changes the loop
    IR, from the default config or (pack_at, which places the pack of A) with both
    operands packed: no knob is declared but ignored."""
    a, b = _normal(rng, 150, 130), _normal(rng, 130, 170)
    space = matmul.config_space(a, b)

    def text(**cfg):
        return str(matmul.with_config(**cfg).lower(a, b, after="verify"))
    for name, knob in space.knobs.items():
        start = {"C.pack": "A+B"} if name == "C.pack_at" else {}
        base = text(**start)
        if len(knob.options) > 1:
            assert any(text(**start, **{name: o}) != base for o in knob.options[1:]), name


def test_row_stages_have_location_vector_and_grain_knobs(rng):
    x = _normal(rng, 300, 200)
    names = softmax.config_space(x).names
    assert any(n.endswith(".at_row") for n in names)
    assert any(n.endswith(".vector") for n in names)
    assert any(n.endswith(".parallel") for n in names)


def test_sample_refuses_a_count_it_cannot_draw():
    """space.sample(-1) returned [] and sample(2.5) three configs; both are errors now, and
    sample(0) is no config."""
    a = np.ones((64, 64), np.float32)
    space = matmul.config_space(a, a)
    assert space.sample(0) == [] and len(space.sample(np.int64(2))) == 2
    with pytest.raises(jd.errors.ArgumentValueError, match="'n' must be >= 0, got -1"):
        space.sample(-1)
    for bad in (2.5, "3", True):
        with pytest.raises(jd.ArgumentError, match="'n' must be an int"):
            space.sample(bad)
