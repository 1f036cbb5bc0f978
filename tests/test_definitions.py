"""Differential tests of compute definitions against NumPy.

Every definition is run on fresh random inputs and compared with a NumPy reference computed
in float64 (exactly, in the native dtype, for integers and booleans). `check` also calls
each kernel with `out=` buffers prefilled with two different sentinels, which proves that
every output element is written.

Index notation needs the function's source, so the definitions live in this file.
"""
import math

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import jitdl as jd
from _check import assert_matches, check

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
FLOATS = [np.float32, np.float64]


def normal(rng, shape, dtype=F64):
    return rng.standard_normal(shape).astype(dtype)


def positive(rng, shape, dtype=F64, lo=0.5, hi=3.0):
    return rng.uniform(lo, hi, shape).astype(dtype)


def f64(x):
    return np.asarray(x, dtype=np.float64)


def red_tol(dtype):
    """(rtol, atol) for reductions of up to ~100 terms of O(1) values."""
    return (1e-4, 1e-4) if np.dtype(dtype) == F32 else (1e-12, 1e-12)


# ---------------------------------------------------------------------------------------
# Elementwise and broadcasting by indexing
# ---------------------------------------------------------------------------------------

@jd.compute
def mul_add(A, B):
    Y[i, j] = A[i, j] * B[i, j] + A[i, j]
    return Y


@jd.compute
def bias_add(X, b):
    Y[i, j] = X[i, j] + b[j]
    return Y


@jd.compute
def row_scale(X, c):
    Y[i, j] = X[i, j] * c[i] - 0.5
    return Y


@jd.compute
def affine_te(X):
    return jd.tensor(X.shape, lambda i, j: X[i, j] * 2.0 - 1.0, name="Y")


@jd.compute
def cube_3d(X):
    Y[a, b, c] = X[a, b, c] * X[a, b, c] * X[a, b, c]
    return Y


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (3, 70), (37, 5)])
def test_elementwise(rng, dtype, shape):
    a, b = normal(rng, shape, dtype), normal(rng, shape, dtype)
    check(mul_add, (a, b), f64(a) * f64(b) + f64(a), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_broadcast_by_indexing(rng, dtype):
    x, b, c = normal(rng, (13, 21), dtype), normal(rng, 21, dtype), normal(rng, 13, dtype)
    check(bias_add, (x, b), f64(x) + f64(b)[None, :], dtype)
    check(row_scale, (x, c), f64(x) * f64(c)[:, None] - 0.5, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_elementwise_te(rng, dtype):
    x = normal(rng, (9, 17), dtype)
    check(affine_te, (x,), f64(x) * 2.0 - 1.0, dtype)


def test_elementwise_3d(rng):
    x = normal(rng, (4, 5, 6))
    check(cube_3d, (x,), x ** 3, F64)


# ---------------------------------------------------------------------------------------
# Reductions over each axis: sum / max / min / prod
# ---------------------------------------------------------------------------------------

def make_reduce_te(op, axis):
    """A TE reduction over axis 0 or 1 of a matrix (a factory: a closure over op, axis)."""
    @jd.compute
    def reduce2d(X):
        n, m = X.shape
        if axis == 1:
            k = jd.reduce_axis(m, name="k")
            return jd.tensor((n,), lambda i: op(X[i, k], axis=k), name="R")
        k = jd.reduce_axis(n, name="k")
        return jd.tensor((m,), lambda j: op(X[k, j], axis=k), name="R")
    return reduce2d


REDUCERS = {"sum": (jd.sum, np.sum), "max": (jd.max, np.max), "min": (jd.min, np.min),
            "prod": (jd.prod, np.prod)}


def reduce_input(rng, name, shape, dtype):
    # prod of many normals under/overflows; keep its factors near 1
    if name == "prod":
        return rng.uniform(0.6, 1.4, shape).astype(dtype)
    return normal(rng, shape, dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("name", sorted(REDUCERS))
def test_reduce_te(rng, name, axis, dtype):
    jd_op, np_op = REDUCERS[name]
    f = make_reduce_te(jd_op, axis)
    x = reduce_input(rng, name, (17, 23), dtype)
    check(f, (x,), np_op(f64(x), axis=axis), dtype, *red_tol(dtype))


@jd.compute
def row_sum(X):
    n, m = X.shape
    S[i] = sum(X[i, k] for k in range(m))
    return S


@jd.compute
def col_max(X):
    n, m = X.shape
    M[j] = max(X[k, j] for k in range(n))
    return M


@jd.compute
def col_min(X):
    n, m = X.shape
    M[j] = min(X[k, j] for k in range(n))
    return M


@jd.compute
def row_prod(X):
    n, m = X.shape
    P[i] = math.prod(X[i, k] for k in range(m))
    return P


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (5, 70), (64, 3)])
def test_reduce_index_notation(rng, dtype, shape):
    x = normal(rng, shape, dtype)
    rt = red_tol(dtype)
    check(row_sum, (x,), f64(x).sum(axis=1), dtype, *rt)
    check(col_max, (x,), f64(x).max(axis=0), dtype)
    check(col_min, (x,), f64(x).min(axis=0), dtype)
    p = rng.uniform(0.6, 1.4, shape).astype(dtype)
    check(row_prod, (p,), f64(p).prod(axis=1), dtype, *rt)


@jd.compute
def total_te(X):
    n, m = X.shape
    r = jd.reduce_axis(n, name="r")
    c = jd.reduce_axis(m, name="c")
    return jd.tensor((), lambda: jd.sum(X[r, c], axis=[r, c]), name="T")


@jd.compute
def sum_outer_axes(X):
    a, b, c = X.shape
    Y[i] = sum(X[p, i, q] for p in range(a) for q in range(c))
    return Y


def test_multi_axis_reductions(rng):
    x = normal(rng, (6, 7))
    check(total_te, (x,), np.asarray(x.sum()), F64, 1e-12, 1e-12)
    x3 = normal(rng, (3, 5, 4))
    check(sum_outer_axes, (x3,), x3.sum(axis=(0, 2)), F64, 1e-12, 1e-12)


def test_int_reduction_keeps_dtype(rng):
    x = rng.integers(-1000, 1000, (6, 40)).astype(np.int32)
    check(row_sum, (x,), x.sum(axis=1, dtype=np.int32), np.int32)
    # int8 sums wrap around like NumPy's sum(dtype=int8): the reduction keeps int8
    x8 = rng.integers(-128, 128, (6, 40)).astype(np.int8)
    check(row_sum, (x8,), x8.sum(axis=1, dtype=np.int8), np.int8)
    check(col_max, (x8,), x8.max(axis=0), np.int8)


def test_long_float32_reduction(rng):
    x = rng.uniform(0.5, 1.5, (2, 20000)).astype(np.float32)
    check(row_sum, (x,), f64(x).sum(axis=1), F32, rtol=1e-3)


# ---------------------------------------------------------------------------------------
# matmul, batched matmul
# ---------------------------------------------------------------------------------------

@jd.compute
def matmul_te(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute
def matmul_idx(A, B):
    (M, K), (_, N) = A.shape, B.shape
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(K))
    return C


@jd.compute
def bmm(A, B):
    nb, M, K = A.shape
    C[b, i, j] = sum(A[b, i, k] * B[b, k, j] for k in range(K))
    return C


MM_SHAPES = [(1, 1, 1), (7, 13, 5), (37, 64, 29)]


@pytest.mark.parametrize("f", [matmul_te, matmul_idx], ids=["te", "index"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul(rng, f, dtype):
    # one function object, several shapes: each shape is specialised separately
    for M, K, N in MM_SHAPES:
        a, b = normal(rng, (M, K), dtype), normal(rng, (K, N), dtype)
        check(f, (a, b), f64(a) @ f64(b), dtype, *red_tol(dtype))


def test_matmul_int32(rng):
    a = rng.integers(-50, 50, (9, 11)).astype(np.int32)
    b = rng.integers(-50, 50, (11, 6)).astype(np.int32)
    check(matmul_idx, (a, b), a @ b, np.int32)


@pytest.mark.parametrize("dtype", FLOATS)
def test_batched_matmul(rng, dtype):
    a, b = normal(rng, (3, 10, 7), dtype), normal(rng, (3, 7, 12), dtype)
    check(bmm, (a, b), f64(a) @ f64(b), dtype, *red_tol(dtype))


# ---------------------------------------------------------------------------------------
# conv2d, pooling
# ---------------------------------------------------------------------------------------

@jd.compute
def conv2d_s2p1(X, W):
    N, C, H, Wd = X.shape
    F, _, KH, KW = W.shape
    P = jd.tensor((N, C, H + 2, Wd + 2))
    P[n, c, h, w] = X[n, c, h - 1, w - 1] if (h >= 1 and h <= H and w >= 1 and w <= Wd) else 0.0
    OH = (H + 2 - KH) // 2 + 1
    OW = (Wd + 2 - KW) // 2 + 1
    Y = jd.tensor((N, F, OH, OW))
    Y[n, f, y, x] = sum(P[n, c, 2 * y + r, 2 * x + s] * W[f, c, r, s]
                        for c in range(C) for r in range(KH) for s in range(KW))
    return Y


@jd.compute
def conv2d_te(X, W):
    N, C, H, Wd = X.shape
    F, _, KH, KW = W.shape
    P = jd.tensor((N, C, H + 2, Wd + 2),
                  lambda n, c, h, w: jd.select(jd.all(h >= 1, h <= H, w >= 1, w <= Wd),
                                               X[n, c, h - 1, w - 1], 0.0), name="P")
    rc = jd.reduce_axis(C, name="rc")
    rh = jd.reduce_axis(KH, name="rh")
    rw = jd.reduce_axis(KW, name="rw")
    OH = (H + 2 - KH) // 2 + 1
    OW = (Wd + 2 - KW) // 2 + 1
    return jd.tensor((N, F, OH, OW),
                     lambda n, f, y, x: jd.sum(P[n, rc, 2 * y + rh, 2 * x + rw] * W[f, rc, rh, rw],
                                               axis=[rc, rh, rw]), name="Y")


def conv2d_ref(x, w, stride=2, pad=1):
    xp = np.pad(f64(x), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxrs,fcrs->nfyx", win, f64(w))


@pytest.mark.parametrize("f", [conv2d_s2p1, conv2d_te], ids=["index", "te"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("hw", [(9, 8), (6, 7)])
def test_conv2d_stride2_pad1(rng, f, dtype, hw):
    x = normal(rng, (2, 3) + hw, dtype)
    w = normal(rng, (4, 3, 3, 3), dtype)
    expected = conv2d_ref(x, w)
    assert expected.shape == (2, 4, (hw[0] - 1) // 2 + 1, (hw[1] - 1) // 2 + 1)
    check(f, (x, w), expected, dtype, *red_tol(dtype))


@jd.compute
def maxpool2x2(X):
    N, C, H, W = X.shape
    Y = jd.tensor((N, C, H // 2, W // 2))
    Y[n, c, y, x] = max(X[n, c, 2 * y + r, 2 * x + s] for r in range(2) for s in range(2))
    return Y


@jd.compute
def avgpool3x3(X):
    H, W = X.shape
    Y = jd.tensor((H - 2, W - 2))
    Y[y, x] = sum(X[y + r, x + s] for r in range(3) for s in range(3)) / 9.0
    return Y


@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool(rng, dtype):
    x = normal(rng, (2, 3, 9, 10), dtype)   # odd height: the last row is dropped
    win = sliding_window_view(f64(x), (2, 2), axis=(2, 3))[:, :, ::2, ::2]
    check(maxpool2x2, (x,), win.max(axis=(4, 5)), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_avg_pool(rng, dtype):
    x = normal(rng, (11, 8), dtype)
    expected = sliding_window_view(f64(x), (3, 3)).sum(axis=(2, 3)) / 9.0
    check(avgpool3x3, (x,), expected, dtype, 1e-5 if dtype == F32 else 1e-12, 1e-6)


# ---------------------------------------------------------------------------------------
# softmax, layernorm
# ---------------------------------------------------------------------------------------

@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def softmax_one_line(X):
    n, m = X.shape
    Y[i, j] = exp(X[i, j]) / sum(exp(X[i, k]) for k in range(m))
    return Y


def softmax_ref(x):
    x = f64(x)
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("f", [softmax, softmax_one_line], ids=["design", "one_line"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(1, 1), (4, 70), (33, 9)])
def test_softmax(rng, f, dtype, shape):
    x = normal(rng, shape, dtype)
    rtol = 2e-5 if dtype == F32 else 1e-12
    check(f, (x,), softmax_ref(x), dtype, rtol, 1e-7 if dtype == F32 else 1e-15)


@jd.compute
def layernorm(X, g, b):
    n, m = X.shape
    mu[i] = sum(X[i, k] for k in range(m)) / m
    var[i] = sum((X[i, k] - mu[i]) * (X[i, k] - mu[i]) for k in range(m)) / m
    Y[i, j] = (X[i, j] - mu[i]) * rsqrt(var[i] + 1e-5) * g[j] + b[j]
    return Y


@pytest.mark.parametrize("dtype", FLOATS)
def test_layernorm(rng, dtype):
    x = normal(rng, (10, 48), dtype) * 3 + 1
    g, b = normal(rng, 48, dtype), normal(rng, 48, dtype)
    xd = f64(x)
    mu = xd.mean(axis=1, keepdims=True)
    var = xd.var(axis=1, keepdims=True)
    expected = (xd - mu) / np.sqrt(var + 1e-5) * f64(g) + f64(b)
    check(layernorm, (x, g, b), expected, dtype, *(
        (1e-4, 1e-5) if dtype == F32 else (1e-11, 1e-12)))


# ---------------------------------------------------------------------------------------
# transpose, padding, stencils
# ---------------------------------------------------------------------------------------

@jd.compute
def transpose(X):
    Y[j, i] = X[i, j]
    return Y


@jd.compute
def permute3(X):
    Y[k, i, j] = X[i, j, k]
    return Y


@pytest.mark.parametrize("shape", [(1, 7), (13, 70), (64, 64)])
def test_transpose(rng, shape):
    x = normal(rng, shape, F32)
    check(transpose, (x,), x.T, F32)


def test_permute3(rng):
    x = rng.integers(-100, 100, (3, 4, 5)).astype(np.int16)
    check(permute3, (x,), np.transpose(x, (2, 0, 1)), np.int16)


@jd.compute
def pad1(X):
    n, m = X.shape
    Y = jd.tensor((n + 2, m + 2))
    Y[i, j] = X[i - 1, j - 1] if (i >= 1 and i <= n and j >= 1 and j <= m) else 0.0
    return Y


@jd.compute
def pad_te(X):
    n, m = X.shape
    return jd.tensor((n + 3, m + 1),
                     lambda i, j: jd.select(jd.all(i >= 2, i < n + 2, j < m), X[i - 2, j], -1.0),
                     name="Y")


@pytest.mark.parametrize("dtype", FLOATS)
def test_padding(rng, dtype):
    x = normal(rng, (5, 8), dtype)
    check(pad1, (x,), np.pad(f64(x), 1), dtype)
    check(pad_te, (x,), np.pad(f64(x), ((2, 1), (0, 1)), constant_values=-1.0), dtype)


def test_padding_int(rng):
    x = rng.integers(-9, 9, (4, 3)).astype(np.int32)
    # int32 with a (weak) Python float promotes to float64, as np.where(c, int32, 0.0) does
    check(pad1, (x,), np.pad(x.astype(np.float64), 1), np.float64)


@jd.compute
def stencil_1d(X):
    Y[i] = X[i] + X[i + 2]
    return Y


@jd.compute
def smooth_1d(X):
    Y[i] = 0.25 * X[i] + 0.5 * X[i + 1] + 0.25 * X[i + 2]
    return Y


@jd.compute
def stencil_2d(X):
    Y[i, j] = 4.0 * X[i + 1, j + 1] - X[i, j + 1] - X[i + 2, j + 1] - X[i + 1, j] - X[i + 1, j + 2]
    return Y


@pytest.mark.parametrize("n", [3, 4, 70])
def test_stencil_1d(rng, n):
    x = normal(rng, n)
    check(stencil_1d, (x,), x[:-2] + x[2:], F64)
    check(smooth_1d, (x,), 0.25 * x[:-2] + 0.5 * x[1:-1] + 0.25 * x[2:], F64)


@pytest.mark.parametrize("dtype", FLOATS)
def test_stencil_2d(rng, dtype):
    x = normal(rng, (9, 13), dtype)
    xd = f64(x)
    expected = (4 * xd[1:-1, 1:-1] - xd[:-2, 1:-1] - xd[2:, 1:-1] - xd[1:-1, :-2]
                - xd[1:-1, 2:])
    check(stencil_2d, (x,), expected, dtype, *(
        (1e-5, 1e-6) if dtype == F32 else (1e-12, 1e-14)))


# ---------------------------------------------------------------------------------------
# several outputs, scalar parameters, weak typing
# ---------------------------------------------------------------------------------------

@jd.compute
def row_stats(X):
    n, m = X.shape
    S[i] = sum(X[i, k] for k in range(m))
    M[i] = max(X[i, k] for k in range(m))
    return S, M


@jd.compute
def centered(X):
    n, m = X.shape
    mean[i] = sum(X[i, k] for k in range(m)) / m
    Y[i, j] = X[i, j] - mean[i]
    return Y, mean


def test_multi_output(rng):
    x = normal(rng, (6, 11))
    res = row_stats(x)
    assert isinstance(res, tuple) and len(res) == 2
    assert_matches(res[0], x.sum(axis=1), F64, 1e-12, 1e-12)
    assert_matches(res[1], x.max(axis=1), F64)


def test_multi_output_intermediate_is_output(rng):
    x = normal(rng, (5, 9), F32)
    y, mean = centered(x)
    xd = f64(x)
    assert_matches(mean, xd.mean(axis=1), F32, 1e-5, 1e-6)
    assert_matches(y, xd - xd.mean(axis=1, keepdims=True), F32, 1e-5, 1e-6)


@jd.compute
def axpy(a, X, Y):
    Z[i] = a * X[i] + Y[i]
    return Z


@jd.compute
def shift_scale(X, k, Y, alpha):
    Z[i] = (X[i] + k) * alpha + Y[i]
    return Z


@jd.compute
def add_int(X, k):
    Z[i] = X[i] + k
    return Z


def test_float_scalar_argument_is_weak(rng):
    x, y = normal(rng, 20, F32), normal(rng, 20, F32)
    for a in (2.5, -0.125):   # a runtime argument: no stale value baked into the kernel
        check(axpy, (a, x, y), a * f64(x) + f64(y), F32)
    xd, yd = f64(x), f64(y)
    check(axpy, (3.0, xd, yd), 3.0 * xd + yd, F64)


def test_int_scalar_argument_is_weak(rng):
    x8 = rng.integers(-20, 20, 15).astype(np.int8)
    for k in (3, -7):
        check(add_int, (x8, k), x8 + k, np.int8)
    x32 = normal(rng, 15, F32)
    check(add_int, (x32, 4), f64(x32) + 4, F32)


def test_scalars_in_any_order(rng):
    x = rng.integers(-50, 50, 12).astype(np.int32)
    y = normal(rng, 12)
    # (int32 + weak int) * weak float -> float64, as in NumPy
    expected = ((x + 3) * 0.5 + y)
    assert expected.dtype == np.float64
    check(shift_scale, (x, 3, y, 0.5), expected, F64)


@jd.compute
def literal_weak(X):
    Y[i] = X[i] * 2.5 + 1
    return Y


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8, np.int16, np.int32,
                                   np.int64, np.uint8])
def test_literals_are_weak(rng, dtype):
    if np.dtype(dtype).kind == "f":
        x = normal(rng, 10, dtype)
    else:
        x = rng.integers(0, 20, 10).astype(dtype)
    expected = x * 2.5 + 1          # NumPy 2: float32 stays float32, ints become float64
    check(literal_weak, (x,), f64(x) * 2.5 + 1, expected.dtype,
          *((1e-6, 1e-6) if expected.dtype == F32 else (1e-12, 0)))


@pytest.mark.parametrize("const", [np.float64(2.5), np.float32(2.5), np.int64(3), np.int8(3),
                                   np.uint8(3), np.bool_(True)])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.int32])
def test_numpy_scalars_in_a_definition_are_strong(rng, const, dtype):
    """A NumPy scalar closed over (np.float64 is a Python float too) or the result of
    jd.numpy on a Python number (np.float64) takes part in promotion as NumPy's does:
    np.float64(2.5) * float32 array is float64."""
    x = (normal(rng, 10, dtype) if np.dtype(dtype).kind == "f"
         else rng.integers(1, 20, 10).astype(dtype))

    @jd.compute
    def times_const(X):
        return X * const + jd.numpy.log10(1000.0)

    expected = x * const + np.log10(1000.0)
    got = times_const(x)
    assert got.dtype == expected.dtype, (const, dtype, got.dtype, expected.dtype)
    np.testing.assert_allclose(got, f64(x) * float(const) + 3.0, rtol=1e-6, atol=1e-5)


# ---------------------------------------------------------------------------------------
# every dtype; integer floor division and modulo; mixed promotion
# ---------------------------------------------------------------------------------------

@jd.compute
def add_sub_mul(X, Z):
    S[i] = X[i] + Z[i]
    D[i] = X[i] - Z[i]
    P[i] = X[i] * Z[i]
    return S, D, P


INT_DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8]


def full_range(rng, dtype, n):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, n, endpoint=True, dtype=dtype)


@pytest.mark.parametrize("dtype", INT_DTYPES + [np.float32, np.float64])
def test_arithmetic_every_dtype(rng, dtype):
    if np.dtype(dtype).kind == "f":
        x, z = normal(rng, 50, dtype), normal(rng, 50, dtype)
    else:   # the full range: sums and products wrap around like NumPy's
        x, z = full_range(rng, dtype, 50), full_range(rng, dtype, 50)
    with np.errstate(over="ignore"):
        refs = (x + z, x - z, x * z) if np.dtype(dtype).kind != "f" else \
            (f64(x) + f64(z), f64(x) - f64(z), f64(x) * f64(z))
    got = add_sub_mul(x, z)
    for g, r in zip(got, refs):
        assert_matches(g, r, dtype)


@jd.compute
def bool_ops(X, Z):
    S[i] = X[i] + Z[i]
    P[i] = X[i] * Z[i]
    I[i] = X[i] + 1
    return S, P, I


def test_bool_arithmetic(rng):
    x = rng.integers(0, 2, 40).astype(bool)
    z = rng.integers(0, 2, 40).astype(bool)
    s, p, i = bool_ops(x, z)
    assert_matches(s, x + z, np.bool_)       # NumPy: bool + bool is logical or
    assert_matches(p, x * z, np.bool_)       # and
    assert_matches(i, x + 1, np.int64)       # weak int literal with bool -> default int


@jd.compute
def mixed_add(X, Z):
    Y[i] = X[i] + Z[i]
    return Y


@pytest.mark.parametrize("dx,dz", [(np.float32, np.int32), (np.uint8, np.int8),
                                   (np.int16, np.float32), (np.float32, np.float64),
                                   (np.bool_, np.uint8), (np.int64, np.uint8)])
def test_mixed_dtype_promotion(rng, dx, dz):
    x = rng.integers(0, 100, 25).astype(dx)
    z = rng.integers(0, 100, 25).astype(dz)
    expected = x + z
    check(mixed_add, (x, z), expected, expected.dtype)


@jd.compute
def floordiv_mod(X, Z):
    Q[i] = X[i] // Z[i]
    R[i] = X[i] % Z[i]
    return Q, R


@jd.compute
def floordiv_mod_const(X):
    A[i] = X[i] // -3
    B[i] = X[i] % -3
    C[i] = X[i] // 4
    D[i] = X[i] % 4
    return A, B, C, D


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_int_floordiv_mod_negative(rng, dtype):
    x = rng.integers(-100, 101, 60).astype(dtype)
    z = rng.choice([-9, -7, -3, -2, -1, 1, 2, 5, 8], 60).astype(dtype)
    q, r = floordiv_mod(x, z)
    assert_matches(q, x // z, dtype)
    assert_matches(r, x % z, dtype)
    got = floordiv_mod_const(x)
    for g, e in zip(got, (x // -3, x % -3, x // 4, x % 4)):
        assert_matches(g, e, dtype)


def test_uint8_floordiv_mod(rng):
    x = full_range(rng, np.uint8, 40)
    z = rng.integers(1, 256, 40).astype(np.uint8)
    q, r = floordiv_mod(x, z)
    assert_matches(q, x // z, np.uint8)
    assert_matches(r, x % z, np.uint8)


def test_float_floordiv_mod(rng):
    x = normal(rng, 50) * 10
    z = rng.choice([-1, 1], 50) * rng.uniform(0.5, 3.0, 50)
    q, r = floordiv_mod(x, z)
    assert_matches(q, np.floor_divide(x, z), F64)
    assert_matches(r, np.mod(x, z), F64, 1e-12, 1e-12)


@jd.compute
def true_div(X, Z):
    Y[i] = X[i] / Z[i]
    return Y


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8, np.float32])
def test_true_division(rng, dtype):
    x = rng.integers(1, 100, 30).astype(dtype)
    z = rng.integers(1, 9, 30).astype(dtype)
    expected = x / z                   # ints -> float64
    check(true_div, (x, z), f64(expected), expected.dtype)


# ---------------------------------------------------------------------------------------
# casts, index variables as values
# ---------------------------------------------------------------------------------------

@jd.compute
def casts(X):
    A[i] = jd.float32(X[i])
    B[i] = jd.int32(X[i])
    C[i] = jd.int8(jd.int32(X[i]))
    D[i] = jd.bool_(X[i])
    E[i] = jd.float64(jd.float32(X[i]))
    G[i] = jd.uint8(jd.int16(X[i]))
    H[i] = jd.int64(X[i] * 10.0)
    return A, B, C, D, E, G, H


def test_casts(rng):
    x = rng.uniform(-50, 50, 64)
    x[::7] = 0.0          # bool_ of zero is False
    got = casts(x)
    expected = (x.astype(np.float32), x.astype(np.int32), x.astype(np.int32).astype(np.int8),
                x.astype(bool), x.astype(np.float32).astype(np.float64),
                x.astype(np.int16).astype(np.uint8), (x * 10.0).astype(np.int64))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert_matches(g, f64(e) if e.dtype.kind == "f" else e, e.dtype, rtol=0)


@jd.compute
def int_to_float(K):
    A[i] = jd.float32(K[i]) * 0.5
    B[i] = jd.float64(K[i]) / 3.0
    return A, B


def test_int_to_float_casts(rng):
    k = rng.integers(-1000, 1000, 30).astype(np.int64)
    a, b = int_to_float(k)
    assert_matches(a, k.astype(np.float32) * 0.5, F32)
    assert_matches(b, k / 3.0, F64)


@jd.compute
def index_values(X):
    Y[i, j] = X[i, j] * jd.float64(i) + j
    return Y


def test_index_variables_as_values(rng):
    x = normal(rng, (6, 9))
    ii, jj = np.meshgrid(np.arange(6), np.arange(9), indexing="ij")
    check(index_values, (x,), x * ii + jj, F64)


@jd.compute
def index_only(X):
    n, m = X.shape
    return jd.tensor((n, m), lambda i, j: i * m + j, name="K")


def test_index_only_tensor_is_int64():
    x = np.ones((4, 5))
    check(index_only, (x,), np.arange(20).reshape(4, 5), np.int64)


# ---------------------------------------------------------------------------------------
# select / where, conditions
# ---------------------------------------------------------------------------------------

@jd.compute
def leaky_relu(X):
    Y[i, j] = X[i, j] if X[i, j] > 0 else 0.1 * X[i, j]
    return Y


@jd.compute
def select_te(X, Z):
    return jd.tensor(X.shape, lambda i: jd.select(X[i] > Z[i], X[i], Z[i] * 2.0), name="Y")


@jd.compute
def bool_logic(X, Z):
    Y[i] = X[i] if (X[i] > -0.5 and X[i] < 0.5) or not (Z[i] > 0) else -1.0
    return Y


@jd.compute
def chained_compare(X):
    Y[i] = 1.0 if -0.3 < X[i] <= 0.7 else 2.0
    return Y


@jd.compute
def all_any_te(X, Z):
    return jd.tensor(X.shape, lambda i: jd.select(
        jd.any(jd.all(X[i] > 0.0, Z[i] > 0.0), X[i] < -1.0), X[i] + Z[i], X[i] - Z[i]),
        name="Y")


@jd.compute
def equality_select(X, K):
    Y[i] = X[i] if K[i] == 2 else (-X[i] if K[i] != 0 else 0.5)
    return Y


@jd.compute
def mask_from_compare(X):
    Y[i] = jd.select(X[i] > 0.0, 1.0, 0.0)
    B[i] = X[i] > 0.0
    return Y, B


def test_selects(rng):
    x, z = normal(rng, 40), normal(rng, 40)
    check(leaky_relu, (x.reshape(5, 8),), np.where(x > 0, x, 0.1 * x).reshape(5, 8), F64)
    check(select_te, (x, z), np.where(x > z, x, 2.0 * z), F64)
    check(bool_logic, (x, z), np.where(((x > -0.5) & (x < 0.5)) | ~(z > 0), x, -1.0), F64)
    check(chained_compare, (x,), np.where((-0.3 < x) & (x <= 0.7), 1.0, 2.0), F64)
    check(all_any_te, (x, z), np.where(((x > 0) & (z > 0)) | (x < -1), x + z, x - z), F64)
    k = rng.integers(0, 4, 40).astype(np.int32)
    check(equality_select, (x, k), np.where(k == 2, x, np.where(k != 0, -x, 0.5)), F64)


def test_select_float32_stays_float32(rng):
    x = normal(rng, 30, F32)
    check(leaky_relu, (x.reshape(5, 6),), f64(np.where(x > 0, x, 0.1 * x)).reshape(5, 6), F32)


def test_select_of_literals_is_float64(rng):
    x = normal(rng, 30, F32)
    y, b = mask_from_compare(x)
    assert_matches(y, np.where(x > 0, 1.0, 0.0), F64)
    assert_matches(b, x > 0, np.bool_)


# ---------------------------------------------------------------------------------------
# reductions with where=, generator if, range(a, b), ranges depending on outer indices
# ---------------------------------------------------------------------------------------

@jd.compute
def pos_sum_te(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k, where=X[i, k] > 0.0), name="S")


@jd.compute
def pos_sum_gen(X):
    n, m = X.shape
    S[i] = sum(X[i, k] for k in range(m) if X[i, k] > 0.0)
    return S


@jd.compute
def lower_tri_rowsum(X):
    n, m = X.shape
    S[i] = sum(X[i, k] for k in range(m) if k <= i)
    return S


@jd.compute
def offdiag_max_te(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.max(X[i, k], axis=k, where=k != i), name="M")


@jd.compute
def cumsum(X):
    (n,) = X.shape
    Y = jd.tensor((n,))
    Y[i] = sum(X[k] for k in range(i + 1))
    return Y


@jd.compute
def inner_sum(X):
    n, m = X.shape
    S[i] = sum(X[i, k] for k in range(2, m - 1))
    return S


@jd.compute
def inner_sum_te(X):
    n, m = X.shape
    k = jd.reduce_axis((2, m - 1), name="k")
    return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="S")


def test_masked_reductions(rng):
    x = normal(rng, (7, 12))
    pos = np.where(x > 0, x, 0.0).sum(axis=1)
    check(pos_sum_te, (x,), pos, F64, 1e-12, 1e-14)
    check(pos_sum_gen, (x,), pos, F64, 1e-12, 1e-14)
    ii, kk = np.meshgrid(np.arange(7), np.arange(12), indexing="ij")
    check(lower_tri_rowsum, (x,), np.where(kk <= ii, x, 0.0).sum(axis=1), F64, 1e-12, 1e-14)


@jd.compute
def count_above(X, t):
    n, m = X.shape
    C[i] = sum(1 for k in range(m) if X[i, k] > t)
    F[i] = 0.5 * sum(1.0 for k in range(m) if X[i, k] > t)
    L = jd.tensor((n,))
    L[i] = sum(1 for k in range(m) if k <= i)
    # a filter of constants and the generator's own index stays Python: a size here
    P = jd.tensor((sum(1 for d in range(4) if d != 1),), lambda j: X[0, j], name="P")
    return C, F, L, P


def test_counting_reduction_with_a_constant_element(rng):
    # (the element 1 was taken for Python, so Python iterated the generator and failed
    # on the filter: "the condition `X[i, 0] > t` is symbolic and has no Python truth
    # value here")
    x = normal(rng, (6, 9))
    c, f, lower, p = count_above(x, 0.25)
    assert_matches(c, (x > 0.25).sum(axis=1), np.int64)
    assert_matches(f, 0.5 * (x > 0.25).sum(axis=1), F64)
    assert_matches(lower, np.arange(1, 7), np.int64)
    assert_matches(p, x[0, :3], F64)


@jd.compute
def pair_products(X):
    n, m = X.shape
    Y[i] = sum(X[i, k] * X[i, l] for k in range(m) for l in range(k + 1, m))
    return Y


@jd.compute
def sum_of_prefix_sums(X):
    n, m = X.shape
    Y[i] = sum(sum(X[i, k] for k in range(l + 1)) for l in range(m))
    Z[i] = max(min(X[i, k] for k in range(l, m)) for l in range(m))
    return Y, Z


def test_a_reduction_range_depending_on_another_reduction_index(rng):
    # (both said "cannot bound the range of reduction index `l` (range(k + 1, 6))": the
    # bounds of a range were looked up among the output's indices only; the nested one
    # also kept the range its generator registered while probing its element)
    x = normal(rng, (5, 6))
    pairs = np.array([sum(r[k] * r[l] for k in range(6) for l in range(k + 1, 6)) for r in x])
    check(pair_products, (x,), pairs, F64, 1e-12, 1e-13)
    y, z = sum_of_prefix_sums(x)
    assert_matches(y, np.cumsum(x, axis=1).sum(axis=1), F64, 1e-12, 1e-13)
    assert_matches(z, np.minimum.accumulate(x[:, ::-1], axis=1).max(axis=1), F64)


@jd.compute
def dependent_nested_reductions_in_arithmetic(X):
    n, m = X.shape
    Y[i] = 0.5 * sum(sum(X[i, k] for k in range(l + 1)) for l in range(m)) + \
        sum(X[i, l] for l in range(m))
    Z[i] = X[i, 0] - max(min(X[i, k] for k in range(l, m)) for l in range(m))
    return Y, Z


def test_nested_reductions_with_dependent_ranges_inside_arithmetic(rng):
    # (the inner sum, over range(l + 1), was lifted to a stage of its own before the sum
    # over l around it, over i alone: "index `l` is used outside a reduction over it in
    # stage Y_sum0")
    x = normal(rng, (5, 6))
    y, z = dependent_nested_reductions_in_arithmetic(x)
    assert_matches(y, 0.5 * np.cumsum(x, axis=1).sum(axis=1) + x.sum(axis=1), F64,
                   1e-12, 1e-13)
    suffix_min = np.minimum.accumulate(x[:, ::-1], axis=1)
    assert_matches(z, x[:, 0] - suffix_min.max(axis=1), F64)


@jd.compute
def prefix_sums_total(X):
    n, m = X.shape
    Y[i] = sum(sum(X[i, k] for k in range(l + 1)) for l in range(m))
    R[i] = sum(1 for k in range(m) for l in range(k) if X[i, l] < X[i, k])
    return Y, R


def test_a_range_depending_on_an_empty_reduction_index_is_empty(rng):
    # (of m = 0: "cannot bound the range of reduction index `l` (range(k + 1, 0))", as the
    # empty range of k bounded nothing, where the sum is 0)
    for shape in [(3, 0), (4, 1), (2, 5)]:
        x = normal(rng, shape)
        pairs = [sum(r[k] * r[l] for k in range(shape[1]) for l in range(k + 1, shape[1]))
                 for r in x]
        check(pair_products, (x,), pairs, F64, 1e-12, 1e-13)
        y, r = prefix_sums_total(x)
        assert_matches(y, np.cumsum(x, axis=1).sum(axis=1), F64, 1e-12, 1e-13)
        rising = [sum(v[l] < v[k] for k in range(shape[1]) for l in range(k)) for v in x]
        assert_matches(r, rising, np.int64)


@jd.compute
def python_reduction_arguments(X):
    n, m = X.shape
    A[i] = max((X[i, k] for k in range(m) if X[i, k] > 1.0), default=-7.0)
    B = jd.tensor((n,))
    B[i] = min((X[i, k] for k in range(m - 3)), default=5.0)
    C = jd.tensor((n,))
    C[i] = max((X[i, k] for k in range(min(i, m))), default=3.0)
    P[i] = math.prod((X[i, k] for k in range(m)), start=2.0)
    S[i] = sum((X[i, k] for k in range(m)), 1.5) + \
        sum((X[i, k] for k in range(m) if X[i, k] < 0), start=X[i, 0])
    return A, B, C, P, S


@pytest.mark.parametrize("shape", [(4, 6), (3, 2), (5, 400)])
def test_python_start_and_default_arguments_of_generator_reductions(rng, shape):
    # (max(..., default=) failed on its filter, "the condition `X[i, 0] > 1.0` is symbolic
    # and has no Python truth value here"; sum(..., start) was Python's sum, unrolled:
    # a RecursionError over 400 elements)
    x = normal(rng, shape)
    m = shape[1]
    got = python_reduction_arguments(x)
    expected = [[max((v for v in r if v > 1.0), default=-7.0) for r in x],
                [min(r[:max(m - 3, 0)], default=5.0) for r in x],
                [max(r[:min(i, m)], default=3.0) for i, r in enumerate(x)],
                2.0 * x.prod(axis=1),
                1.5 + x.sum(axis=1) + x[:, 0] + np.where(x < 0, x, 0.0).sum(axis=1)]
    for g, e in zip(got, expected):
        assert_matches(g, e, F64, 1e-12, 1e-12)


@jd.compute
def max_with_default(X):
    n, m = X.shape
    A[i] = max((X[i, k] for k in range(m)), default=-1)
    B[i] = min((X[i, k] > 0 for k in range(m)), default=True)
    return A, B


@pytest.mark.parametrize("dtype", [np.float32, np.int16])
def test_max_default_of_a_range_empty_at_these_sizes_keeps_dtype_and_shape(rng, dtype):
    # (of m = 0, max(..., default=-1) was the default itself: int64 (float64 of a float
    # default), where other sizes give X's dtype, and A[i] lost the read that sizes i:
    # "cannot infer the range of index `i` in A[i]")
    for m in (3, 0):
        x = (normal(rng, (4, m)) * 10).astype(dtype)
        a, b = max_with_default(x)
        assert_matches(a, [max(r, default=-1) for r in x], dtype)
        assert_matches(b, [min((v > 0 for v in r), default=True) for r in x], np.bool_)


def test_masked_max_empty_row_is_minus_inf(rng):
    x = normal(rng, (5, 4))
    ii, kk = np.meshgrid(np.arange(5), np.arange(4), indexing="ij")
    expected = np.max(x, axis=1, where=kk != ii, initial=-np.inf)
    check(offdiag_max_te, (x,), expected, F64)
    one = normal(rng, (3, 1))     # row 0 has nothing left: the identity, -inf
    check(offdiag_max_te, (one,), np.array([-np.inf, one[1, 0], one[2, 0]]), F64)


@jd.compute
def band_sum(X):
    (n,) = X.shape
    Y = jd.tensor((n,))
    Y[i] = sum(X[k] for k in range(max(i - 1, 0), min(i + 2, n)))
    return Y


def test_a_range_depending_on_an_index_of_an_empty_stage(rng):
    """The band of an empty X: no element, no reduction to bound (its range, min(i + 2, 0),
    was 'an empty range', a DefinitionError, where NumPy gives an empty result)."""
    for n in (0, 1, 6):
        x = normal(rng, n)
        want = np.array([x[max(i - 1, 0):i + 2].sum() for i in range(n)]).reshape(n)
        check(band_sum, (x,), want, F64, 1e-12, 1e-13)


def test_range_depending_on_outer_index(rng):
    for n in (1, 5, 64):
        x = normal(rng, n)
        check(cumsum, (x,), np.cumsum(x), F64, 1e-12, 1e-13)


@pytest.mark.parametrize("f", [inner_sum, inner_sum_te], ids=["index", "te"])
def test_sub_range_reduction(rng, f):
    x = normal(rng, (6, 9))
    check(f, (x,), x[:, 2:8].sum(axis=1), F64, 1e-12, 1e-14)


@jd.compute
def nested_reductions(X):
    n, m = X.shape
    Y[i] = sum(X[i, k] * sum(X[j, k] for j in range(n)) for k in range(m))
    return Y


@jd.compute
def two_reductions(X):
    n, m = X.shape
    Y[i] = sum(X[i, k] for k in range(m)) / max(X[i, k] for k in range(m))
    return Y


def test_reductions_inside_arithmetic(rng):
    x = normal(rng, (5, 7))
    check(nested_reductions, (x,), x @ x.sum(axis=0), F64, 1e-12, 1e-12)
    p = positive(rng, (5, 7))
    check(two_reductions, (p,), p.sum(axis=1) / p.max(axis=1), F64, 1e-12)


# ---------------------------------------------------------------------------------------
# trace-time Python: helpers, loops, shape arithmetic
# ---------------------------------------------------------------------------------------

def gelu(x):
    """A plain helper: runs at trace time on symbolic values (hence jd.erf, not math.erf)."""
    return 0.5 * x * (1.0 + jd.erf(x / math.sqrt(2.0)))


def horner(x, coeffs):
    acc = 0.0
    for c in coeffs:
        acc = acc * x + c
    return acc


@jd.compute
def gelu_poly(X):
    G[i] = gelu(X[i])
    P[i] = horner(X[i], [0.5, -1.0, 2.0, 0.25])
    return G, P


@jd.compute
def nested_helper(X):
    def swish(v):
        return v / (1.0 + exp(-v))
    Y[i] = swish(X[i]) + swish(2.0 * X[i])
    return Y


def scale_shift_stage(prev, t):
    return jd.tensor(prev.shape, lambda i: prev[i] * 0.5 + t, name=f"T{t}")


@jd.compute
def repeated_stages(X):
    cur = X
    for t in range(4):
        cur = scale_shift_stage(cur, t)
    return cur


@jd.compute
def halves(X):
    (n,) = X.shape
    half = n // 2
    Y[i] = X[i] + X[i + half]
    return Y


@jd.compute
def trace_time_branch(X):
    n, m = X.shape
    if m > 3:
        Y[i, j] = X[i, j] * 2.0
    else:
        Y[i, j] = X[i, j] - 100.0
    return Y


def test_trace_time_python(rng):
    x = normal(rng, 25)
    erf = np.vectorize(math.erf)
    g, p = gelu_poly(x)
    assert_matches(g, 0.5 * x * (1.0 + erf(x / math.sqrt(2.0))), F64, 1e-12, 1e-15)
    assert_matches(p, ((0.5 * x - 1.0) * x + 2.0) * x + 0.25, F64)
    check(nested_helper, (x,), x / (1 + np.exp(-x)) + 2 * x / (1 + np.exp(-2 * x)), F64,
          1e-12, 1e-15)
    expected = x
    for t in range(4):
        expected = expected * 0.5 + t
    check(repeated_stages, (x,), expected, F64)
    check(halves, (x,), x[:13] + x[12:], F64)   # n = 25: half = 12, i in [0, 13)
    x2 = normal(rng, (3, 5))
    check(trace_time_branch, (x2,), x2 * 2.0, F64)
    x3 = normal(rng, (3, 2))
    check(trace_time_branch, (x3,), x3 - 100.0, F64)


# ---------------------------------------------------------------------------------------
# math intrinsics in every spelling
# ---------------------------------------------------------------------------------------

@jd.compute
def intrin_bare(X, P):
    E[i] = exp(X[i])
    L[i] = log(P[i])
    Q[i] = sqrt(P[i])
    R[i] = rsqrt(P[i])
    T[i] = tanh(X[i])
    G[i] = sigmoid(X[i])
    F[i] = erf(X[i])
    S[i] = sin(X[i])
    C[i] = cos(X[i])
    A[i] = abs(X[i])
    FL[i] = floor(X[i])
    CE[i] = ceil(X[i])
    PW[i] = pow(P[i], X[i])
    MN[i] = min(X[i], P[i])
    MX[i] = max(X[i], P[i], 0.5)
    return E, L, Q, R, T, G, F, S, C, A, FL, CE, PW, MN, MX


@jd.compute
def intrin_jd(X, P):
    E[i] = jd.exp(X[i])
    L[i] = jd.log(P[i])
    Q[i] = jd.sqrt(P[i])
    R[i] = jd.rsqrt(P[i])
    T[i] = jd.tanh(X[i])
    G[i] = jd.sigmoid(X[i])
    F[i] = jd.erf(X[i])
    S[i] = jd.sin(X[i])
    C[i] = jd.cos(X[i])
    A[i] = jd.abs(X[i])
    FL[i] = jd.floor(X[i])
    CE[i] = jd.ceil(X[i])
    PW[i] = jd.pow(P[i], X[i])
    MN[i] = jd.min(X[i], P[i])
    MX[i] = jd.max(X[i], P[i], 0.5)
    return E, L, Q, R, T, G, F, S, C, A, FL, CE, PW, MN, MX


@jd.compute
def intrin_math(X, P):
    E[i] = math.exp(X[i])
    L[i] = math.log(P[i])
    Q[i] = math.sqrt(P[i])
    T[i] = math.tanh(X[i])
    F[i] = math.erf(X[i])
    S[i] = math.sin(X[i])
    C[i] = math.cos(X[i])
    FL[i] = math.floor(X[i])
    CE[i] = math.ceil(X[i])
    PW[i] = math.pow(P[i], X[i])
    return E, L, Q, T, F, S, C, FL, CE, PW


@jd.compute
def intrin_np(X, P):
    E[i] = np.exp(X[i])
    L[i] = np.log(P[i])
    Q[i] = np.sqrt(P[i])
    T[i] = np.tanh(X[i])
    S[i] = np.sin(X[i])
    C[i] = np.cos(X[i])
    A[i] = np.abs(X[i])
    FL[i] = np.floor(X[i])
    CE[i] = np.ceil(X[i])
    PW[i] = np.pow(P[i], X[i])
    return E, L, Q, T, S, C, A, FL, CE, PW


@jd.compute
def intrin_operators(X, P):
    SQ[i] = X[i] ** 2
    RT[i] = P[i] ** 0.5
    NG[i] = -X[i]
    AB[i] = abs(X[i] - 0.25)
    return SQ, RT, NG, AB


_erf = np.vectorize(math.erf, otypes=[np.float64])

INTRIN_REF = {
    "E": lambda x, p: np.exp(x), "L": lambda x, p: np.log(p), "Q": lambda x, p: np.sqrt(p),
    "R": lambda x, p: 1 / np.sqrt(p), "T": lambda x, p: np.tanh(x),
    "G": lambda x, p: 1 / (1 + np.exp(-x)), "F": lambda x, p: _erf(x),
    "S": lambda x, p: np.sin(x), "C": lambda x, p: np.cos(x), "A": lambda x, p: np.abs(x),
    "FL": lambda x, p: np.floor(x), "CE": lambda x, p: np.ceil(x),
    "PW": lambda x, p: np.power(p, x), "MN": lambda x, p: np.minimum(x, p),
    "MX": lambda x, p: np.maximum(np.maximum(x, p), 0.5),
    "SQ": lambda x, p: x ** 2, "RT": lambda x, p: np.sqrt(p), "NG": lambda x, p: -x,
    "AB": lambda x, p: np.abs(x - 0.25),
}
INTRIN_OUTPUTS = {
    intrin_bare: "E L Q R T G F S C A FL CE PW MN MX",
    intrin_jd: "E L Q R T G F S C A FL CE PW MN MX",
    intrin_math: "E L Q T F S C FL CE PW",
    intrin_np: "E L Q T S C A FL CE PW",
    intrin_operators: "SQ RT NG AB",
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("f", list(INTRIN_OUTPUTS),
                         ids=["bare", "jd", "math", "np", "operators"])
def test_intrinsics(rng, f, dtype):
    x = rng.uniform(-3, 3, 64).astype(dtype)
    p = positive(rng, 64, dtype)
    names = INTRIN_OUTPUTS[f].split()
    got = f(x, p)
    assert len(got) == len(names)
    rtol, atol = (1e-5, 1e-6) if dtype == F32 else (1e-12, 1e-15)
    failures = []
    for name, g in zip(names, got):
        try:
            assert_matches(g, INTRIN_REF[name](f64(x), f64(p)), dtype, rtol, atol)
        except AssertionError as e:
            failures.append(f"{name}: {str(e).strip().splitlines()[0:6]}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------------------
# 0-d outputs
# ---------------------------------------------------------------------------------------

@jd.compute
def scalar_expr(X):
    return jd.tensor((), lambda: X[0] * 2.0 + X[1], name="Y")


@jd.compute
def dot(A, B):
    (n,) = A.shape
    k = jd.reduce_axis(n, name="k")
    return jd.tensor((), lambda: jd.sum(A[k] * B[k], axis=k), name="D")


def test_zero_dim_outputs(rng):
    x = normal(rng, 5)
    check(scalar_expr, (x,), np.asarray(x[0] * 2.0 + x[1]), F64)
    a, b = normal(rng, 70, F32), normal(rng, 70, F32)
    check(dot, (a, b), np.asarray(f64(a) @ f64(b)), F32, 1e-4, 1e-4)


def test_long_dot_product_float32(rng):
    a, b = positive(rng, 10000, F32), positive(rng, 10000, F32)
    check(dot, (a, b), np.asarray(f64(a) @ f64(b)), F32, rtol=1e-3)


@pytest.mark.parametrize("strict", [True, False])
def test_strict_fp_flag(rng, strict):
    @jd.compute(strict_fp=strict)
    def dot_strict(A, B):
        (n,) = A.shape
        k = jd.reduce_axis(n, name="k")
        return jd.tensor((), lambda: jd.sum(A[k] * B[k], axis=k), name="D")

    a, b = normal(rng, 300, F32), normal(rng, 300, F32)
    got = dot_strict(a, b)
    assert_matches(got, f64(a) @ f64(b), F32, 1e-3, 1e-3)
    if strict:   # sequential order, no fused multiply-add: the float32 left-to-right sum
        plain = np.float32(0)
        for u, v in zip(a, b):
            plain = np.float32(plain + np.float32(u * v))
        assert got == plain, (got, plain)


def test_strict_fp_rounds_as_numpy(rng):
    """strict_fp=True: a * b + c rounds twice, as NumPy's (on the CPU too, where LLVM fused
    it into one multiply-add; the CUDA target already compiled without them)."""
    @jd.compute(strict_fp=True)
    def muladd(A, B, C):
        return jd.tensor(A.shape, lambda i: A[i] * B[i] + C[i] * A[i] - B[i], name="E")

    a, b, c = (normal(rng, 20000, F32) for _ in range(3))
    np.testing.assert_array_equal(muladd(a, b, c), a * b + c * a - b)


# ---------------------------------------------------------------------------------------
# non-contiguous inputs
# ---------------------------------------------------------------------------------------

def test_transposed_view_inputs(rng):
    at = normal(rng, (13, 9))        # a = at.T is (9, 13), Fortran-ordered
    b = normal(rng, (13, 6))
    a = at.T
    assert not a.flags.c_contiguous
    check(matmul_te, (a, b), a @ b, F64, 1e-12, 1e-12)
    check(matmul_idx, (a, b[::-1]), a @ b[::-1], F64, 1e-12, 1e-12)


def test_strided_slices(rng):
    big = normal(rng, (20, 31))
    x = big[::2, 1::3]                # (10, 10) with steps
    v = normal(rng, 40)[::4]
    check(bias_add, (x, v), x + v, F64)
    check(transpose, (big[::-3, ::2],), big[::-3, ::2].T, F64)
    xi = rng.integers(-9, 9, (8, 12)).astype(np.int32)[:, ::3]
    check(row_sum, (xi,), xi.sum(axis=1), np.int32)


def test_broadcast_view_input(rng):
    v = normal(rng, 7)
    x = np.broadcast_to(v, (5, 7))    # zero strides, read-only
    b = normal(rng, 7)
    check(bias_add, (x, b), x + b, F64)


def test_inputs_not_modified(rng):
    x = normal(rng, (4, 9))
    before = x.copy()
    softmax(x)
    np.testing.assert_array_equal(x, before)


# ---------------------------------------------------------------------------------------
# NaN / inf propagate as in NumPy
# ---------------------------------------------------------------------------------------

@jd.compute
def row_min(X):
    n, m = X.shape
    M[i] = min(X[i, k] for k in range(m))
    return M


@jd.compute
def exp_ew(X):
    Y[i, j] = exp(X[i, j])
    return Y


@jd.compute
def maximum_ew(X, Z):
    Y[i] = max(X[i], Z[i])
    W[i] = min(X[i], Z[i])
    return Y, W


@jd.compute
def is_nan(X):
    Y[i] = X[i] != X[i]
    return Y


def special_matrix(rng):
    x = normal(rng, (6, 9))
    x[1, 3] = np.nan
    x[2, :] = -np.inf
    x[3, 4] = np.inf
    x[4, 0] = -np.inf
    x[5, 8] = np.nan
    x[5, 2] = np.inf
    return x


def test_nan_inf_in_reductions(rng):
    x = special_matrix(rng)
    check(row_sum, (x,), x.sum(axis=1), F64, 1e-12, 1e-12)
    check(col_max, (x.T.copy(),), x.max(axis=1), F64)
    check(row_min, (x,), x.min(axis=1), F64)
    s, m = row_stats(x)
    assert_matches(s, x.sum(axis=1), F64, 1e-12, 1e-12)
    assert_matches(m, np.max(x, axis=1), F64)


def test_nan_inf_elementwise(rng):
    x = special_matrix(rng)
    with np.errstate(invalid="ignore"):
        check(exp_ew, (x,), np.exp(x), F64)
        check(softmax, (x.astype(np.float32),), softmax_ref(x), F32, 2e-5, 1e-7)
    a = np.array([np.nan, 1.0, -np.inf, 2.0, np.nan, np.inf])
    b = np.array([0.0, np.nan, 3.0, -np.inf, np.nan, 1.0])
    mx, mn = maximum_ew(a, b)
    assert_matches(mx, np.maximum(a, b), F64)
    assert_matches(mn, np.minimum(a, b), F64)
    check(is_nan, (a,), np.isnan(a), np.bool_)


def test_softmax_masked_row(rng):
    x = normal(rng, (3, 8))
    x[0, ::2] = -np.inf              # masked attention: those weights are exactly 0
    got = softmax(x)
    assert_matches(got, softmax_ref(x), F64, 1e-12, 1e-15)
    assert np.all(got[0, ::2] == 0.0)


# ---------------------------------------------------------------------------------------
# data-dependent (gather) indices
# ---------------------------------------------------------------------------------------

@jd.compute
def embedding(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y


def test_gather(rng):
    e = normal(rng, (10, 6), F32)
    ids = rng.integers(0, 10, 13).astype(np.int64)
    check(embedding, (e, ids), f64(e[ids]), F32)
    ids32 = rng.integers(0, 10, 4).astype(np.int32)
    check(embedding, (e, ids32), f64(e[ids32]), F32)


# ---------------------------------------------------------------------------------------
# call conventions and inspection
# ---------------------------------------------------------------------------------------

def test_out_is_returned(rng):
    a, b = normal(rng, (4, 5)), normal(rng, (5, 3))
    out = np.full((4, 3), np.nan)
    res = matmul_te(a, b, out=out)
    assert res is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12, atol=1e-12)


def test_result_is_fresh_array(rng):
    a, b = normal(rng, (4, 5)), normal(rng, (5, 3))
    r1 = matmul_te(a, b)
    r2 = matmul_te(2 * a, b)
    assert not np.shares_memory(r1, r2)
    np.testing.assert_allclose(r1 * 2, r2, rtol=1e-12, atol=1e-12)


def test_inspection(rng):
    a, b = normal(rng, (8, 6), F32), normal(rng, (6, 4), F32)
    assert "for" in str(matmul_te.lower(a, b))
    assert "define" in str(matmul_te.llvm_ir(a, b))
    asm = matmul_te.asm(a, b)
    assert isinstance(asm, str) and asm.strip()
    t = matmul_te.timeit(a, b)
    assert isinstance(t, float) and 0 < t < 1.0
    # inspection does not disturb calling
    check(matmul_te, (a, b), f64(a) @ f64(b), F32, 1e-5, 1e-5)


# ---------------------------------------------------------------------------------------
# more trace-time cases: stage names, runtime scalars in conditions
# ---------------------------------------------------------------------------------------

def same_name_stage(prev, t):
    return jd.tensor(prev.shape, lambda i: prev[i] * 2.0 - t, name="T")


@jd.compute
def repeated_same_name(X):
    cur = X
    for t in range(3):
        cur = same_name_stage(cur, t)      # three stages all asking for the name "T"
    return cur


@jd.compute
def threshold(X, thr, fill):
    Y[i] = X[i] if X[i] > thr else fill
    return Y


def test_repeated_stage_names_are_kept_apart(rng):
    x = normal(rng, 9)
    check(repeated_same_name, (x,), ((x * 2.0) * 2.0 - 1.0) * 2.0 - 2.0, F64)


def test_scalar_arguments_in_conditions(rng):
    x = normal(rng, 30, F32)
    for thr, fill in ((0.0, -1.0), (0.5, 3.25), (-2.0, 0.0)):
        check(threshold, (x, thr, fill), np.where(f64(x) > thr, f64(x), fill), F32)
    # a Python int where a float came before: still weak, still float32
    check(axpy, (2, x, x), 3.0 * f64(x), F32)


# ---------------------------------------------------------------------------------------
# further semantics decided in DESIGN.md: argmax/argmin, any/all reductions, the extra
# intrinsics, bitwise operators
# ---------------------------------------------------------------------------------------

@jd.compute
def arg_max_min(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    AM = jd.tensor((n,), lambda i: jd.argmax(X[i, k], axis=k), name="AM")
    AN = jd.tensor((n,), lambda i: jd.argmin(X[i, k], axis=k), name="AN")
    return AM, AN


def test_argmax_argmin_first_on_ties(rng):
    x = rng.integers(0, 4, (9, 13)).astype(np.int32)      # many ties
    am, an = arg_max_min(x)
    assert_matches(am, np.argmax(x, axis=1), np.int64)
    assert_matches(an, np.argmin(x, axis=1), np.int64)
    xf = normal(rng, (5, 70))
    am, an = arg_max_min(xf)
    assert_matches(am, np.argmax(xf, axis=1), np.int64)
    assert_matches(an, np.argmin(xf, axis=1), np.int64)


@jd.compute
def any_all_rows(X):
    n, m = X.shape
    AY[i] = any(X[i, k] > 1.0 for k in range(m))
    AL[i] = all(X[i, k] > -1.0 for k in range(m))
    return AY, AL


def test_any_all_generator_reductions(rng):
    x = normal(rng, (20, 6))
    ay, al = any_all_rows(x)
    assert_matches(ay, (x > 1.0).any(axis=1), np.bool_)
    assert_matches(al, (x > -1.0).all(axis=1), np.bool_)
    assert 0 < ay.sum() < 20 and 0 < al.sum() < 20     # the data exercises both outcomes


@jd.compute
def extra_intrinsics(X, Z, S):
    RO[i] = round(X[i])
    TR[i] = jd.trunc(X[i])
    SG[i] = jd.sign(X[i])
    L1[i] = jd.log1p(Z[i])
    E1[i] = jd.expm1(X[i])
    TA[i] = jd.tan(X[i])
    AT[i] = jd.atan(X[i])
    A2[i] = jd.atan2(X[i], Z[i] - 1.5)
    FM[i] = jd.fmod(X[i], Z[i])
    NN[i] = jd.isnan(S[i])
    NF[i] = jd.isinf(S[i])
    FI[i] = jd.isfinite(S[i])
    return RO, TR, SG, L1, E1, TA, AT, A2, FM, NN, NF, FI


def test_extra_intrinsics(rng):
    x = rng.uniform(-1.2, 1.2, 32)
    x[:6] = [0.5, 1.5, -0.5, -2.5, 0.0, 2.5]              # round: half to even
    z = positive(rng, 32)
    s = normal(rng, 32)
    s[::5], s[1::7], s[2::9] = np.nan, np.inf, -np.inf
    got = extra_intrinsics(x, z, s)
    expected = [np.round(x), np.trunc(x), np.sign(x), np.log1p(z), np.expm1(x), np.tan(x),
                np.arctan(x), np.arctan2(x, z - 1.5), np.fmod(x, z),
                np.isnan(s), np.isinf(s), np.isfinite(s)]
    names = "RO TR SG L1 E1 TA AT A2 FM NN NF FI".split()
    failures = []
    for name, g, e in zip(names, got, expected):
        try:
            assert_matches(g, e, e.dtype, 1e-12, 1e-15)
        except AssertionError as err:
            failures.append(f"{name}: {str(err).strip().splitlines()[:6]}")
    assert not failures, "\n".join(failures)


@jd.compute
def int_powers(X, Y):
    Z[i] = X[i] ** Y[i] + 2 ** Y[i]
    return Z


@jd.compute
def int_power_of_literal(X):
    Z[i] = X[i] ** -1
    return Z


@jd.compute
def int_powers_of_expressions(X, Y):
    Z[i] = (X[i] + 1) ** (Y[i] - 1)
    W[i] = 2 ** (Y[i] - 2)
    return Z, W


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_power_of_expressions_with_a_negative_exponent_raises_as_numpy(rng, dtype):
    # (the check rode only on an operand that is itself a read: `(X[i] + 1) ** (Y[i] - 1)`
    # and `2 ** (Y[i] - 2)` gave 0 where NumPy raises)
    x, y = rng.integers(-3, 4, 9).astype(dtype), rng.integers(2, 5, 9).astype(dtype)
    z, w = int_powers_of_expressions(x, y)
    assert_matches(z, (x + dtype(1)) ** (y - dtype(1)), dtype)
    assert_matches(w, dtype(2) ** (y - dtype(2)), dtype)
    for bad in (1, 0):      # a negative exponent in W only, then in Z and W
        y[4] = bad
        with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
            int_powers_of_expressions(x, y)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_power_with_a_negative_exponent_raises_as_numpy(rng, dtype):
    # (a definition's `X[i] ** Y[i]` gave 0 where NumPy raises; jd.numpy.power checked)
    x, y = rng.integers(-3, 4, 9).astype(dtype), rng.integers(0, 4, 9).astype(dtype)
    check(int_powers, (x, y), x ** y + dtype(2) ** y, dtype)
    y[4] = -1
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        int_powers(x, y)
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
        int_power_of_literal(x)
    f = normal(rng, 9)                    # a float base: a negative exponent is fine
    assert_matches(int_power_of_literal(f), f ** -1, F64)


@jd.compute
def rounded_ints(X):
    BI[i] = round(X[i])
    NP[i] = np.round(X[i])
    JD[i] = jd.round(X[i])
    RI[i] = np.rint(X[i])
    return BI, NP, JD, RI


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int64])
def test_round_of_an_integer_keeps_its_dtype(rng, dtype):
    # (round, np.round and jd.round of an integer gave np.rint's float: float32 of int8,
    # float64 of int64; NumPy's and Python's round keep the integer)
    x = rng.integers(0, 100, 9).astype(dtype)
    *same, rint = rounded_ints(x)
    for got in same:
        assert_matches(got, x, dtype)
    assert_matches(rint, np.rint(x), F64 if np.dtype(dtype).itemsize > 2 else F32)


@jd.compute
def bitwise(X, Z, sh):
    AN[i] = X[i] & Z[i]
    OR[i] = X[i] | Z[i]
    XO[i] = X[i] ^ Z[i]
    NO[i] = ~X[i]
    SL[i] = X[i] << sh[i]
    SR[i] = X[i] >> sh[i]
    return AN, OR, XO, NO, SL, SR


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
def test_bitwise_operators(rng, dtype):
    x, z = full_range(rng, dtype, 40), full_range(rng, dtype, 40)
    sh = rng.integers(0, 7, 40).astype(dtype)
    got = bitwise(x, z, sh)
    expected = (x & z, x | z, x ^ z, ~x, x << sh, x >> sh)
    for g, e in zip(got, expected):
        assert_matches(g, e, dtype)


@jd.compute
def bool_bitwise(X, Z):
    AN[i] = X[i] & Z[i]
    OR[i] = X[i] | Z[i]
    XO[i] = X[i] ^ Z[i]
    NO[i] = ~X[i]
    return AN, OR, XO, NO


def test_bool_bitwise(rng):
    x = rng.integers(0, 2, 30).astype(bool)
    z = rng.integers(0, 2, 30).astype(bool)
    for g, e in zip(bool_bitwise(x, z), (x & z, x | z, x ^ z, ~x)):
        assert_matches(g, e, np.bool_)


# ---------------------------------------------------------------------------------------
# accesses proven in bounds by conditions, clamps, % and // (DESIGN.md "Bounds")
# ---------------------------------------------------------------------------------------

@jd.compute
def guarded_shift(X):
    (n,) = X.shape
    Y = jd.tensor((n,))
    Y[i] = X[i + 1] if i < n - 1 else 0.0
    return Y


@jd.compute
def roll3(X):
    (n,) = X.shape
    Y = jd.tensor((n,))
    Y[i] = X[(i + 3) % n]
    return Y


@jd.compute
def clamped_shift(X):
    (n,) = X.shape
    Y = jd.tensor((n,))
    Y[i] = X[min(i + 1, n - 1)] - X[max(i - 1, 0)]
    return Y


@jd.compute
def upsample2(X):
    (n,) = X.shape
    Y = jd.tensor((2 * n,))
    Y[i] = X[i // 2]
    return Y


@jd.compute
def reflect(X):
    (n,) = X.shape
    Y = jd.tensor((n,))
    Y[i] = X[abs(i - 2)] if i >= 2 or n > 2 else X[i]
    return Y


@jd.compute
def window_sum_where(X):
    (n,) = X.shape
    k = jd.reduce_axis(3, name="k")
    return jd.tensor((n,), lambda i: jd.sum(X[i + k - 1], axis=k,
                                            where=jd.all(i + k >= 1, i + k <= n)), name="W")


@jd.compute
def window_sum_gen_if(X):
    (n,) = X.shape
    W = jd.tensor((n,))
    W[i] = sum(X[i + k - 1] for k in range(3) if i + k >= 1 and i + k <= n)
    return W


@jd.compute
def window_sum_select(X):
    (n,) = X.shape
    W = jd.tensor((n,))
    W[i] = sum((X[i + k - 1] if (i + k >= 1 and i + k <= n) else 0.0) for k in range(3))
    return W


@jd.compute
def shifted_sum_where(X):
    (n,) = X.shape
    k = jd.reduce_axis(n + 1, name="k")
    return jd.tensor((), lambda: jd.sum(X[k - 1], axis=k, where=k >= 1), name="S")


def _window_ref(x):
    padded = np.pad(x, 1)
    return padded[:-2] + padded[1:-1] + padded[2:]


BOUNDS_CASES = {
    "select": (guarded_shift, lambda x: np.append(x[1:], 0.0)),
    "modulo": (roll3, lambda x: np.roll(x, -3)),
    "min_max_clamp": (clamped_shift, lambda x: x[np.minimum(np.arange(x.size) + 1, x.size - 1)]
                      - x[np.maximum(np.arange(x.size) - 1, 0)]),
    "floordiv": (upsample2, lambda x: np.repeat(x, 2)),
    "abs": (reflect, lambda x: x[np.abs(np.arange(x.size) - 2)]),
    "reduce_where": (shifted_sum_where, lambda x: np.asarray(x.sum())),
    "reduce_where_two_indices": (window_sum_where, _window_ref),
    "select_two_indices": (window_sum_select, _window_ref),
    "generator_if_two_indices": (window_sum_gen_if, _window_ref),
}


@pytest.mark.parametrize("case", list(BOUNDS_CASES))
def test_bounds_proven_by_conditions_and_arithmetic(rng, case):
    f, ref = BOUNDS_CASES[case]
    x = normal(rng, 11)
    check(f, (x,), ref(x), F64, 1e-12, 1e-15)


# ---------------------------------------------------------------------------------------
# more call conventions
# ---------------------------------------------------------------------------------------

def test_keyword_arguments(rng):
    x, z = normal(rng, 6), normal(rng, 6)
    assert_matches(mixed_add(X=x, Z=z), x + z, F64)
    assert_matches(mixed_add(x, Z=z), x + z, F64)
    assert_matches(axpy(0.5, Y=z, X=x), 0.5 * x + z, F64)


@pytest.mark.parametrize("scalar", [np.float32(2.5), np.float64(2.5), np.int32(3),
                                    np.int64(-2)], ids=lambda s: type(s).__name__)
def test_numpy_scalar_arguments_are_strong(rng, scalar):
    # NEP 50: NumPy scalars carry their dtype (unlike Python scalars)
    x, y = normal(rng, 8, F32), normal(rng, 8, F32)
    expected = scalar * x + y
    check(axpy, (scalar, x, y), f64(scalar) * f64(x) + f64(y), expected.dtype,
          1e-6, 1e-6)


def test_zero_size_arrays():
    x = np.ones(0)
    got = mixed_add(x, x)
    assert_matches(got, x + x, F64)
    assert_matches(transpose(np.ones((0, 3), F32)), np.ones((3, 0)), F32)


# -- comparisons written in helper functions --------------------------------------------
# The capture rewrites `==` and `!=` in the definition's own source; a helper it calls runs
# as plain Python, where they were structural equality of expressions (a bool) and
# identity of tensors: jd.select(i == j, ...) silently took one branch.
def _eye_plus(X):
    n = X.shape[0]
    return jd.tensor((n, n), lambda i, j: jd.select(i == j, 1.0, 0.0) + X[i, j])


def _off_diagonal(X):
    return jd.tensor(X.shape, lambda i, j: jd.select(i != j, X[i, j], -1.0))


def _replace_value(X, v):
    return jd.tensor(X.shape, lambda i, j: jd.select(X[i, j] == v, 100.0, X[i, j]) +
                     jd.select(0.5 == X[i, j], 7.0, 0.0) + jd.select(X[i, j] != 0.5, 1.0, 0.0))


def _where_same(X, Y, Z):
    return jd.numpy.where(X == Y, X, 0.0) + (Y != X) * 10.0 + (X == Z) * 100.0


def _structure_test(X):
    if X.shape[0] == 3:                         # concrete values keep Python's meaning
        return X * 2.0
    return X


def test_equality_written_in_a_helper_compares_elements(rng):
    @jd.compute
    def eye(X):
        return _eye_plus(X)

    @jd.compute
    def off(X):
        return _off_diagonal(X)

    @jd.compute
    def replace(X, v: float):
        return _replace_value(X, v)

    x = normal(rng, (5, 5))
    check(eye, (x,), np.eye(5) + x, F64)
    check(off, (x,), np.where(np.eye(5, dtype=bool), -1.0, x), F64)
    q = rng.integers(0, 3, (4, 6)) * 0.5
    for v in (0.0, 1.0):
        want = np.where(q == v, 100.0, q) + np.where(q == 0.5, 7.0, 0.0) + (q != 0.5)
        check(replace, (q, v), want, F64)


def test_equality_of_whole_tensors_written_in_a_helper(rng):
    @jd.compute
    def f(X, Y, Z):
        return _where_same(X, Y, Z) + _structure_test(X)

    x = rng.integers(0, 3, (3, 7)).astype(np.float64)
    y = rng.integers(0, 3, (3, 7)).astype(np.float64)
    z = rng.integers(0, 3, 7).astype(np.float64)
    want = np.where(x == y, x, 0.0) + (y != x) * 10.0 + (x == z) * 100.0 + x * 2.0
    check(f, (x, y, z), want, F64)


def _branch_on(X):
    return jd.tensor(X.shape, lambda i: 1.0 if X[i] == 0.0 else 2.0)


def test_an_if_on_an_element_comparison_in_a_helper_is_a_clear_error():
    @jd.compute
    def f(X):
        return _branch_on(X)
    with pytest.raises(jd.JitdlError, match="symbolic"):
        f(np.ones(4))


def _diagonal_by_axis(X):
    n = X.shape[0]
    k = jd.reduce_axis(n, name="k")
    return jd.tensor((n,), lambda i: jd.sum(jd.select(k == i, X[i, k], 0.0), axis=k) +
                     jd.sum(X[i, k] * (k != 0), axis=k))


def test_a_reduction_axis_compared_in_a_helper(rng):
    # IterVar (jd.reduce_axis) had no == of its own: identity, a silent False / True
    @jd.compute
    def f(X):
        return _diagonal_by_axis(X)

    x = normal(rng, (5, 5))
    check(f, (x,), np.diag(x) + x[:, 1:].sum(1), F64)


def _object_tests(X, Z, alpha):
    seen = [X]
    out = X if Z in seen else X + Z                 # membership: identity, as before
    ts = [X, Z]
    ts.remove(ts[ts.index(Z)])                      # list.index / remove
    memo = {}

    def twice(e):                                   # a dict keyed by expressions
        if e not in memo:
            memo[e] = e * 2.0
        return memo[e]
    doubled = jd.tensor(X.shape, lambda i, j: twice(X[i, j]) + twice(X[i, j]))
    scale = alpha if alpha not in (0, 1) else 1.0   # `in` on a scalar argument
    return out + ts[0] * scale + doubled


def test_c_level_comparisons_in_a_helper_keep_their_object_meaning(rng):
    # `in`, list.index/remove and dict lookups compare from C code called by the helper's
    # frame: only an `==` / `!=` operator as written compares elements
    @jd.compute
    def f(X, Z, alpha: float):
        return _object_tests(X, Z, alpha)

    x, z = normal(rng, (3, 4)), normal(rng, (3, 4))
    check(f, (x, z, 2.0), x + z + 2 * x + 4 * x, F64)


def _broadcast_last(X):
    if X.shape[-1] == 1 or X.shape[0] != X.shape[0]:
        return X * 0.0
    return X * 2.0


def test_shape_tests_of_dynamic_sizes_in_a_helper(rng):
    # a dynamic size equals itself and is never 1 (size-1 dimensions stay concrete)
    @jd.compute(dynamic=True)
    def f(X):
        return _broadcast_last(X)

    x = normal(rng, (3, 4))
    check(f, (x,), 2 * x, F64)
    check(f, (x[:, :1],), 0 * x[:, :1], F64)
