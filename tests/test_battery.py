"""An adversarial battery of operator definitions, each checked against NumPy.

Definitions a user of TVM or Halide writes in the documented API (grouped, dilated and
transposed convolutions with padding written as selects, pooling with borders, attention
in one definition, norms, cumulative reductions, gathers, one-hot, integer arithmetic
that wraps, floor division of negatives, mixed dtypes) and schedules written for them.
References are NumPy in float64 (exact for integers); `check` also proves that every
output element is written. Run with `--target emulated` (or `cuda`) they check the GPU
kernels the same way (CPU schedules do not apply there: the automatic GPU schedule runs).
"""
import math

import numpy as np
import pytest

import jitdl as jd
from _check import assert_matches, check, sentinels

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def normal(rng, shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


def f64(x):
    return np.asarray(x, dtype=np.float64)


def ints(rng, shape, dtype, lo=None, hi=None):
    info = np.iinfo(dtype)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def check_results(f, args, expected, dtypes, rtol=None, atol=0.0):
    """check() of a definition with several results: each matches its reference, and
    called with out= buffers prefilled with either sentinel, every element is written."""
    got = f(*args)
    assert isinstance(got, tuple) and len(got) == len(expected)
    for g, e, d in zip(got, expected, dtypes):
        assert_matches(g, e, d, rtol, atol)
    for k in range(2):
        bufs = tuple(np.full(np.shape(e), sentinels(d)[k], dtype=d)
                     for e, d in zip(expected, dtypes))
        f(*args, out=bufs)
        for b, e, d in zip(bufs, expected, dtypes):
            assert_matches(b, e, d, rtol, atol)


# ---------------------------------------------------------------------------------------
# Convolutions
# ---------------------------------------------------------------------------------------

@jd.compute
def grouped_dilated_conv(X, W):
    B, C, H, Wd = X.shape
    F, Cg, R, S = W.shape
    G = C // Cg
    P = jd.tensor((B, C, H + 3, Wd + 1))        # padding: 2 above, 1 below, 1 right
    P[b, c, y, x] = X[b, c, y - 2, x] if (y >= 2 and y < H + 2 and x < Wd) else 0.0
    Y[b, f, y, x] = sum(P[b, (f // (F // G)) * Cg + c, y + 2 * r, x + 2 * s] * W[f, c, r, s]
                        for c in range(Cg) for r in range(R) for s in range(S))
    return Y


def grouped_dilated_conv_ref(x, w, groups):
    F, Cg, R, S = w.shape
    p = np.pad(f64(x), ((0, 0), (0, 0), (2, 1), (0, 1)))
    ho, wo = p.shape[2] - 2 * (R - 1), p.shape[3] - 2 * (S - 1)
    y = np.zeros((x.shape[0], F, ho, wo))
    for f in range(F):
        g = f // (F // groups)
        for r in range(R):
            for s in range(S):
                y[:, f] += np.einsum("bchw,c->bhw", p[:, g * Cg:(g + 1) * Cg,
                                                      2 * r:2 * r + ho, 2 * s:2 * s + wo],
                                     f64(w[f, :, r, s]))
    return y


@pytest.mark.parametrize("xs, ws, groups", [((2, 6, 9, 7), (4, 3, 3, 2), 2),
                                             ((1, 4, 5, 5), (4, 1, 2, 2), 4),
                                             ((1, 1, 1, 1), (1, 1, 1, 1), 1)])
def test_grouped_dilated_conv_asymmetric_padding(rng, xs, ws, groups):
    x, w = normal(rng, xs), normal(rng, ws)
    check(grouped_dilated_conv, (x, w), grouped_dilated_conv_ref(x, w, groups), F32,
          rtol=1e-4, atol=1e-4)


@jd.compute
def transposed_conv1d(X, W):
    C, L = X.shape
    _, F, K = W.shape
    Y = jd.tensor((F, (L - 1) * 2 + K))         # stride 2
    Y[f, o] = sum(X[c, (o - k) // 2] * W[c, f, k] for c in range(C) for k in range(K)
                  if (o - k) % 2 == 0 and o - k >= 0 and (o - k) // 2 < L)
    return Y


@pytest.mark.parametrize("xs, ws", [((3, 5), (3, 2, 4)), ((1, 1), (1, 1, 1)), ((2, 7), (2, 3, 1))])
def test_transposed_conv1d(rng, xs, ws):
    x, w = normal(rng, xs), normal(rng, ws)
    y = np.zeros((ws[1], (xs[1] - 1) * 2 + ws[2]))
    for l in range(xs[1]):
        for k in range(ws[2]):
            y[:, 2 * l + k] += f64(x[:, l]) @ f64(w[:, :, k])
    check(transposed_conv1d, (x, w), y, F32, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Pooling and stencils with borders
# ---------------------------------------------------------------------------------------

@jd.compute
def max_pool_padded(X):
    B, C, H, W = X.shape
    P = jd.tensor((B, C, H + 2, W + 2))
    P[b, c, y, x] = X[b, c, y - 1, x - 1] if (y >= 1 and y <= H and x >= 1 and x <= W) \
        else -math.inf
    Y[b, c, y, x] = max(P[b, c, 2 * y + r, 2 * x + s] for r in range(3) for s in range(3))
    return Y


@jd.compute
def avg_pool_padded(X):
    B, C, H, W = X.shape
    Y = jd.tensor((B, C, (H - 1) // 2 + 1, (W - 1) // 2 + 1))
    Y[b, c, y, x] = sum(X[b, c, 2 * y + r - 1, 2 * x + s - 1] for r in range(3) for s in range(3)
                        if 2 * y + r >= 1 and 2 * y + r <= H and 2 * x + s >= 1
                        and 2 * x + s <= W) / 9.0
    return Y


def pool_ref(x, op, fill):
    H, W = x.shape[2:]
    p = np.pad(f64(x), ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=fill)
    ho, wo = (H - 1) // 2 + 1, (W - 1) // 2 + 1
    return np.stack([np.stack([op(p[:, :, 2 * y:2 * y + 3, 2 * x:2 * x + 3], axis=(2, 3))
                               for x in range(wo)], -1) for y in range(ho)], -2)


@pytest.mark.parametrize("hw", [(7, 9), (8, 8), (1, 1), (2, 3)])
def test_pooling_with_padding(rng, hw):
    x = normal(rng, (2, 3) + hw)
    check(max_pool_padded, (x,), pool_ref(x, np.max, -np.inf), F32)
    check(avg_pool_padded, (x,), pool_ref(x, np.sum, 0.0) / 9, F32, rtol=1e-5, atol=1e-6)


@jd.compute
def blur_clamped(X):
    H, W = X.shape
    Y = jd.tensor((H, W))
    Y[y, x] = sum(X[min(max(y + r - 1, 0), H - 1), min(max(x + s - 1, 0), W - 1)]
                  for r in range(3) for s in range(3)) / 9.0
    return Y


@pytest.mark.parametrize("hw", [(1, 1), (5, 7), (2, 31)])
def test_blur_with_clamped_borders(rng, hw):
    x = normal(rng, hw)
    p = np.pad(f64(x), 1, mode="edge")
    ref = sum(p[r:r + hw[0], s:s + hw[1]] for r in range(3) for s in range(3)) / 9
    check(blur_clamped, (x,), ref, F32, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Attention, norms, batched matmul with a broadcast batch
# ---------------------------------------------------------------------------------------

@jd.compute
def attention(Q, K, V):
    B, n, d = Q.shape
    m = K.shape[1]
    S[b, i, j] = sum(Q[b, i, k] * K[b, j, k] for k in range(d)) * (1.0 / sqrt(d))
    mx[b, i] = max(S[b, i, j] for j in range(m))
    e[b, i, j] = exp(S[b, i, j] - mx[b, i])
    z[b, i] = sum(e[b, i, j] for j in range(m))
    O[b, i, c] = sum(e[b, i, j] * V[b, j, c] for j in range(m)) / z[b, i]
    return O


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("b, n, m, d, dv", [(2, 5, 7, 8, 3), (1, 33, 19, 16, 5), (1, 1, 1, 1, 1)])
def test_attention_in_one_definition(rng, dtype, b, n, m, d, dv):
    q, k, v = normal(rng, (b, n, d), dtype), normal(rng, (b, m, d), dtype), \
        normal(rng, (b, m, dv), dtype)
    s = np.einsum("bik,bjk->bij", f64(q), f64(k)) / np.sqrt(d)
    s = np.exp(s - s.max(-1, keepdims=True))
    tol = 1e-4 if dtype == F32 else 1e-12
    check(attention, (q, k, v), (s / s.sum(-1, keepdims=True)) @ f64(v), dtype, rtol=tol,
          atol=tol)


@jd.compute
def rms_norm(X, g):
    n, m = X.shape
    r[i] = rsqrt(sum(X[i, k] * X[i, k] for k in range(m)) / m + 1e-6)
    Y[i, j] = X[i, j] * r[i] * g[j]
    return Y


@jd.compute
def batch_norm(X):
    B, C, H, W = X.shape
    mu[c] = sum(X[b, c, y, x] for b in range(B) for y in range(H) for x in range(W)) / (B * H * W)
    var[c] = sum((X[b, c, y, x] - mu[c]) ** 2
                 for b in range(B) for y in range(H) for x in range(W)) / (B * H * W)
    Y[b, c, y, x] = (X[b, c, y, x] - mu[c]) / sqrt(var[c] + 1e-5)
    return Y


def test_norms(rng):
    x, g = normal(rng, (7, 13)), normal(rng, 13)
    check(rms_norm, (x, g), f64(x) / np.sqrt((f64(x) ** 2).mean(1, keepdims=True) + 1e-6) * g,
          F32, rtol=1e-4)
    x = normal(rng, (3, 4, 5, 6))
    mu, var = f64(x).mean((0, 2, 3), keepdims=True), f64(x).var((0, 2, 3), keepdims=True)
    check(batch_norm, (x,), (f64(x) - mu) / np.sqrt(var + 1e-5), F32, rtol=1e-4, atol=1e-4)


@jd.compute
def bmm_broadcast_batch(A, B):
    Y[b, i, j] = sum(A[b, i, k] * B[0, k, j] for k in range(A.shape[2]))
    return Y


def test_batched_matmul_broadcast_batch(rng):
    a, b = normal(rng, (3, 4, 5)), normal(rng, (1, 5, 6))
    check(bmm_broadcast_batch, (a, b), f64(a) @ f64(b), F32, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# Cumulative reductions (a range depending on an outer index), gathers, one-hot, argmax
# ---------------------------------------------------------------------------------------

@jd.compute
def cumsum(X):
    n, = X.shape
    Y = jd.tensor((n,))
    Y[i] = sum(X[k] for k in range(i + 1))
    return Y


@jd.compute
def cummax_rows(X):
    n, m = X.shape
    Y = jd.tensor((n, m))
    Y[i, j] = max(X[i, k] for k in range(j + 1))
    return Y


@jd.compute
def reverse_cumprod(X):
    n, = X.shape
    Y = jd.tensor((n,))
    Y[i] = math.prod(X[k] for k in range(i, n))
    return Y


def test_cumulative(rng):
    x = normal(rng, 37, F64)
    check(cumsum, (x,), np.cumsum(x), F64)
    xi = ints(rng, 9, np.int32, -100, 100)
    check(cumsum, (xi,), np.cumsum(xi).astype(np.int32), np.int32)
    x = normal(rng, (5, 11))
    check(cummax_rows, (x,), np.maximum.accumulate(x, axis=1), F32)
    xi = ints(rng, (5, 11), np.int8)
    check(cummax_rows, (xi,), np.maximum.accumulate(xi, axis=1), np.int8)
    x = rng.uniform(0.5, 1.5, 13)
    check(reverse_cumprod, (x,), np.cumprod(x[::-1])[::-1], F64)


@jd.compute
def take_rows(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y


@pytest.mark.parametrize("bad", [10, -1])
def test_take_rows_checks_indices(rng, bad):
    e, ids = normal(rng, (10, 4)), rng.integers(0, 10, 6).astype(np.int32)
    check(take_rows, (e, ids), f64(e)[ids], F32)
    ids[3] = bad
    with pytest.raises(IndexError, match=f"into E is {bad}, outside"):
        take_rows(e, ids)


@jd.compute(static=("depth",))
def one_hot(ids, depth):
    n, = ids.shape
    Y = jd.tensor((n, depth))
    Y[i, j] = 1.0 if ids[i] == j else 0.0
    return Y


def test_one_hot(rng):
    ids = rng.integers(0, 7, 13)
    check(one_hot, (ids, 7), np.eye(7)[ids], F64)


@jd.compute
def argmax_rows(X):
    n, m = X.shape
    k = jd.reduce_axis(m)
    return jd.tensor((n,), lambda i: jd.argmax(X[i, k], axis=k), name="A")


@jd.compute
def argmin_columns(X):
    n, m = X.shape
    k = jd.reduce_axis(n)
    return jd.tensor((m,), lambda j: jd.argmin(X[k, j], axis=k), name="A")


def test_argmax_ties_and_nan(rng):
    x = ints(rng, (9, 17), np.int32, 0, 3)
    check(argmax_rows, (x,), np.argmax(x, 1), np.int64)
    check(argmin_columns, (x,), np.argmin(x, 0), np.int64)
    x = normal(rng, (9, 17))
    x[2, 3] = x[5, 0] = np.nan
    check(argmax_rows, (x,), np.argmax(x, 1), np.int64)
    check(argmin_columns, (x,), np.argmin(x, 0), np.int64)


# ---------------------------------------------------------------------------------------
# Integers, masks, mixed dtypes
# ---------------------------------------------------------------------------------------

@jd.compute
def int_mix(A, B):
    Y[i] = A[i] * B[i] + A[i] // B[i] - A[i] % B[i]
    return Y


@jd.compute
def floor_div_constants(A):
    Y[i] = A[i] // -3 + A[i] % -5 + A[i] // 4 + A[i] % 8
    return Y


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_integer_wraparound_and_floor_division(rng, dtype):
    a, b = ints(rng, 50, dtype), ints(rng, 50, dtype)
    b[b == 0] = 3
    with np.errstate(all="ignore"):
        check(int_mix, (a, b), a * b + a // b - a % b, dtype)
        if dtype != np.uint8:
            check(floor_div_constants, (a,),
                  a // dtype(-3) + a % dtype(-5) + a // dtype(4) + a % dtype(8), dtype)


@jd.compute
def masked_stats(X, M):
    a, b, c = X.shape
    lo[j] = min(X[i, j, k] if M[i, j, k] else math.inf for i in range(a) for k in range(c))
    hi[j] = max(X[i, j, k] for i in range(a) for k in range(c) if M[i, j, k])
    cnt[j] = sum(jd.int32(M[i, j, k]) for i in range(a) for k in range(c))
    return lo, hi, cnt


def test_masked_reductions_over_two_axes(rng):
    x, m = normal(rng, (3, 4, 5)), rng.random((3, 4, 5)) > 0.5
    m[:, 2] = False
    check_results(masked_stats, (x, m), (np.where(m, x, np.inf).min((0, 2)),
                                         np.where(m, x, -np.inf).max((0, 2)), m.sum((0, 2))),
                  (F32, F32, np.dtype(np.int32)), rtol=0)


@jd.compute
def mixed(A, B, C):
    Y[i] = A[i] * B[i] + C[i]
    return Y


@pytest.mark.parametrize("dtypes", [(np.int8, np.uint8, np.float32), (np.uint8, np.int64, np.int8),
                                    (np.bool_, np.int8, np.uint8), (np.int32, np.float32, np.int8),
                                    (np.int64, np.float32, np.float32),
                                    (np.uint8, np.uint8, np.bool_), (np.int16, np.uint8, np.int8)])
def test_mixed_dtypes(rng, dtypes):
    a, b, c = (rng.integers(0, 2, 20).astype(d) if d == np.bool_ else
               ints(rng, 20, d, 0 if d == np.uint8 else -50, 50) if np.dtype(d).kind in "iu" else
               normal(rng, 20, d) for d in dtypes)
    with np.errstate(all="ignore"):
        ref = a * b + c
    check(mixed, (a, b, c), ref, ref.dtype)


@jd.compute
def casts(X):
    Y[i] = jd.int8(X[i]) + jd.uint8(X[i] * 0.0 + 200.0)
    return Y


def test_casts_promote_as_numpy(rng):
    x = rng.uniform(-100, 100, 16).astype(np.float32)
    check(casts, (x,), x.astype(np.int8) + np.uint8(200), np.int16)


# ---------------------------------------------------------------------------------------
# Data movement
# ---------------------------------------------------------------------------------------

@jd.compute
def flip_concat(A, B):
    n, m = A.shape
    p, _ = B.shape
    Y = jd.tensor((n + p, m))
    Y[i, j] = A[n - 1 - i, m - 1 - j] if i < n else B[i - n, j]
    return Y


@jd.compute
def reshape_6(X):
    n, m = X.shape
    Y = jd.tensor((m * n // 6, 6))
    Y[i, j] = X[(i * 6 + j) // m, (i * 6 + j) % m]
    return Y


def test_flip_concat_reshape(rng):
    a, b = normal(rng, (4, 5)), normal(rng, (3, 5))
    check(flip_concat, (a, b), np.concatenate([a[::-1, ::-1], b]), F32)
    x = normal(rng, (4, 9))
    check(reshape_6, (x,), x.reshape(6, 6), F32)


@jd.compute
def rnn_unrolled(X, W, h0):
    T, n = X.shape
    h = h0
    for t in range(T):             # a recurrence: one stage per step, unrolled at the trace
        k = jd.reduce_axis(n)
        prev = h
        h = jd.tensor((n,), lambda i: jd.tanh(jd.sum(W[i, k] * prev[k], axis=k) + X[t, i]))
    return h


def test_recurrence_unrolled_by_python(rng):
    x, w, h0 = normal(rng, (30, 8)), normal(rng, (8, 8)) * 0.3, normal(rng, 8)
    h = f64(h0)
    for t in range(30):
        h = np.tanh(f64(w) @ h + f64(x)[t])
    check(rnn_unrolled, (x, w, h0), h, F32, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------
# jd.numpy inside definitions, and definitions calling definitions
# ---------------------------------------------------------------------------------------

jnp = jd.numpy


@jd.compute
def numpy_data_movement(X, Y):
    b = jnp.concatenate([X, jnp.flip(X, axis=1), Y], axis=0)
    return jnp.transpose(jnp.pad(b, ((1, 2), (0, 3)), mode="reflect")) * 2


@jd.compute
def numpy_reductions(X):
    m = X.max(axis=(0, 2), keepdims=True)
    return jnp.argmax(X, axis=1), jnp.log(jnp.sum(jnp.exp(X - m), axis=(0, 2), keepdims=True)) + m


@jd.compute
def trace_of_product(A, B):
    return jnp.einsum("ii,ij->j", A, B)


def test_numpy_functions_inside_definitions(rng):
    x, y = normal(rng, (3, 5)), normal(rng, (2, 5))
    b = np.concatenate([x, x[:, ::-1], y])
    check(numpy_data_movement, (x, y), np.pad(f64(b), ((1, 2), (0, 3)), mode="reflect").T * 2,
          F32)
    x = normal(rng, (3, 4, 5))
    m = x.max(axis=(0, 2), keepdims=True)
    check_results(numpy_reductions, (x,), (np.argmax(x, 1), np.log(np.exp(
        f64(x) - m).sum((0, 2), keepdims=True)) + m), (np.dtype(np.int64), F32), rtol=1e-5)
    a, b = normal(rng, (4, 4)), normal(rng, (4, 3))
    check(trace_of_product, (a, b), np.einsum("ii,ij->j", f64(a), f64(b)), F32, rtol=1e-5,
          atol=1e-6)


@jd.compute
def normalize_rows(X):
    n, m = X.shape
    s[i] = sum(X[i, k] for k in range(m))
    Y[i, j] = X[i, j] / s[i]
    return Y


@jd.compute
def normalize_project_normalize(X, W):
    Z = normalize_rows(X)
    T[i, j] = sum(Z[i, k] * W[k, j] for k in range(X.shape[1]))
    return normalize_rows(T)


def test_composed_definitions(rng):
    x, w = rng.uniform(0.5, 1.5, (4, 6)).astype(F32), rng.uniform(0.5, 1.5, (6, 3)).astype(F32)
    t = f64(x) / f64(x).sum(1, keepdims=True) @ f64(w)
    check(normalize_project_normalize, (x, w), t / t.sum(1, keepdims=True), F32, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# Dynamic sizes: one kernel for every shape
# ---------------------------------------------------------------------------------------

@jd.compute(dynamic=True)
def strided_conv_dynamic(X, W):
    C, H, Wd = X.shape
    F, _, R, S = W.shape
    Y[f, y, x] = sum(X[c, 2 * y + r, 2 * x + s] * W[f, c, r, s]
                     for c in range(C) for r in range(R) for s in range(S))
    return Y


@pytest.mark.parametrize("xs, ws", [((2, 9, 8), (3, 2, 3, 3)), ((1, 5, 5), (2, 1, 1, 2)),
                                     ((3, 4, 3), (1, 3, 3, 3)), ((1, 2, 2), (1, 1, 3, 3))])
def test_strided_conv_dynamic(rng, xs, ws):
    x, w = normal(rng, xs), normal(rng, ws)
    (_, H, W), (F, _, R, S) = xs, ws
    ho, wo = max((H - R) // 2 + 1, 0), max((W - S) // 2 + 1, 0)
    ref = np.zeros((F, ho, wo))
    for r in range(R):
        for s in range(S):
            ref += np.einsum("chw,fc->fhw", f64(x)[:, r:r + 2 * ho:2, s:s + 2 * wo:2],
                             f64(w[:, :, r, s]))
    check(strided_conv_dynamic, (x, w), ref, F32, rtol=1e-4, atol=1e-5)


@jd.compute(dynamic=True)
def cumsum_and_count_dynamic(X):
    n, m = X.shape
    Y = jd.tensor((n, m))
    Y[i, j] = sum(X[i, k] for k in range(j + 1))
    C[i] = sum(1 for k in range(m) if X[i, k] > 0)
    return Y, C


@pytest.mark.parametrize("shape", [(3, 7), (1, 1), (4, 0), (0, 3), (2, 200)])
def test_cumsum_and_count_dynamic(rng, shape):
    x = normal(rng, shape, F64)
    c = cumsum_and_count_dynamic(x)[1]
    check_results(cumsum_and_count_dynamic, (x,), (np.cumsum(x, 1), (x > 0).sum(1)),
                  (F64, c.dtype), atol=1e-12)
    assert np.issubdtype(c.dtype, np.integer)


# ---------------------------------------------------------------------------------------
# Schedules a user writes for these (CPU; on a GPU target the automatic schedule runs)
# ---------------------------------------------------------------------------------------

@jd.compute
def cumsum_rows_scheduled(X):
    n, m = X.shape
    Y = jd.tensor((n, m))
    Y[i, j] = sum(X[i, k] for k in range(j + 1))
    return Y


@jd.schedule(cumsum_rows_scheduled, target="cpu")
def _cumsum_rows_cpu(s, cfg):
    Y = s["Y"]
    i, j = Y.axis
    (k,) = Y.reduce_axis
    jo, ji = s.split(j, 4)
    s.reorder(i, jo, k, ji)
    s.vectorize(ji)
    s.parallel(i)


@pytest.mark.parametrize("shape", [(3, 13), (5, 8), (1, 1), (2, 3)])
def test_scheduled_cumsum(rng, shape):
    x = normal(rng, shape)
    check(cumsum_rows_scheduled, (x,), np.cumsum(f64(x), 1), F32, rtol=1e-5, atol=1e-5)


@jd.compute
def conv_same_scheduled(X, W):
    C, H, Wd = X.shape
    F, _, R, S = W.shape
    P = jd.tensor((C, H + 2, Wd + 2))
    P[c, y, x] = X[c, y - 1, x - 1] if (y >= 1 and y <= H and x >= 1 and x <= Wd) else 0.0
    Y[f, y, x] = sum(P[c, y + r, x + s] * W[f, c, r, s]
                     for c in range(C) for r in range(R) for s in range(S))
    return Y


@jd.schedule(conv_same_scheduled, target="cpu")
def _conv_same_cpu(s, cfg):
    Y = s["Y"]
    f, y, x = Y.axis
    c, r, ss = Y.reduce_axis
    yo, yi = s.split(y, 3)
    xo, xi = s.split(x, 5)
    s.reorder(f, yo, xo, c, r, ss, yi, xi)
    s.compute_at(s["P"], Y, xo)
    s.vectorize(xi)
    s.unroll(yi)
    s.parallel(f)


@pytest.mark.parametrize("xs, ws", [((3, 7, 11), (4, 3, 3, 3)), ((2, 5, 5), (3, 2, 1, 1)),
                                     ((1, 1, 1), (1, 1, 3, 3)), ((2, 13, 4), (5, 2, 2, 3))])
def test_scheduled_padded_conv_computes_padding_at_tiles(rng, xs, ws):
    x, w = normal(rng, xs), normal(rng, ws)
    p = np.pad(f64(x), ((0, 0), (1, 1), (1, 1)))
    (_, H, W), (_, _, R, S) = xs, ws
    ho, wo = H + 3 - R, W + 3 - S
    ref = sum(np.einsum("chw,fc->fhw", p[:, r:r + ho, s:s + wo], f64(w[:, :, r, s]))
              for r in range(R) for s in range(S))
    check(conv_same_scheduled, (x, w), ref, F32, rtol=1e-4, atol=1e-4)


@jd.compute
def matmul_int8_scheduled(A, B):
    M, K = A.shape
    _, N = B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(jd.int32(A[i, k]) * jd.int32(B[k, j]), axis=k),
                     name="C")


@jd.schedule(matmul_int8_scheduled, target="cpu")
def _matmul_int8_cpu(s, cfg):
    C = s["C"]
    CL = s.cache_write(C)
    i, j = C.axis
    io, ii = s.split(i, 4)
    jo, ji = s.split(j, 8)
    s.reorder(io, jo, ii, ji)
    s.compute_at(CL, C, jo)
    li, lj = CL.axis
    (lk,) = CL.reduce_axis
    s.reorder(lk, li, lj)
    s.vectorize(lj)
    s.parallel(io)


@pytest.mark.parametrize("mkn", [(7, 13, 19), (4, 8, 8), (1, 1, 1), (17, 3, 9)])
def test_scheduled_int8_matmul_with_cache_write(rng, mkn):
    m, k, n = mkn
    a, b = ints(rng, (m, k), np.int8), ints(rng, (k, n), np.int8)
    check(matmul_int8_scheduled, (a, b), a.astype(np.int32) @ b.astype(np.int32), np.int32)


@jd.compute
def attention_scheduled(Q, K, V):
    n, d = Q.shape
    m = K.shape[0]
    S[i, j] = sum(Q[i, k] * K[j, k] for k in range(d))
    mx[i] = max(S[i, j] for j in range(m))
    e[i, j] = exp(S[i, j] - mx[i])
    z[i] = sum(e[i, j] for j in range(m))
    O[i, c] = sum(e[i, j] * V[j, c] for j in range(m)) / z[i]
    return O


@jd.schedule(attention_scheduled, target="cpu")
def _attention_cpu(s, cfg):
    O = s["O"]
    i, c = O.axis
    io, ii = s.split(i, 2)
    for t in ("S", "mx", "e", "z", "O_sum0"):     # (O_sum0: the sum the division splits off)
        s.compute_at(s[t], O, io)
    s.parallel(io)
    s.vectorize(c)


@pytest.mark.parametrize("n, m, d, dv", [(5, 7, 8, 3), (1, 1, 1, 1), (9, 16, 4, 8)])
def test_scheduled_attention_rows_at_a_time(rng, n, m, d, dv):
    q, k, v = normal(rng, (n, d)), normal(rng, (m, d)), normal(rng, (m, dv))
    s = f64(q) @ f64(k).T
    s = np.exp(s - s.max(1, keepdims=True))
    check(attention_scheduled, (q, k, v), s / s.sum(1, keepdims=True) @ f64(v), F32, rtol=1e-4,
          atol=1e-5)


@jd.compute
def sum_two_axes_scheduled(X):
    a, b, c = X.shape
    Y[j] = sum(X[i, j, k] for i in range(a) for k in range(c))
    return Y


@jd.schedule(sum_two_axes_scheduled, target="cpu")
def _sum_two_axes_cpu(s, cfg):
    Y = s["Y"]
    i, k = Y.reduce_axis
    rf = s.rfactor(Y, i, 3, fuse=[k])
    s.parallel(rf.axis[0])


@jd.compute
def int_elementwise_scheduled(X, Y):
    Z[a, b, c] = X[a, b, c] * Y[c] - X[a, b, c] // 3
    return Z


@jd.schedule(int_elementwise_scheduled, target="cpu")
def _int_elementwise_cpu(s, cfg):
    Z = s["Z"]
    fo, fi = s.split(s.fuse(*Z.axis), 8)
    s.vectorize(fi)
    s.parallel(fo)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.float32])
def test_scheduled_rfactor_and_fused_vector_loops(rng, dtype):
    x = normal(rng, (4, 3, 5), F64)
    check(sum_two_axes_scheduled, (x,), x.sum((0, 2)), F64)
    lo = 0 if dtype == np.uint8 else -50
    x, y = (rng.integers(lo, 50, (3, 5, 7)).astype(dtype),
            rng.integers(0 if dtype == np.uint8 else -5, 5, 7).astype(dtype))
    with np.errstate(all="ignore"):
        check(int_elementwise_scheduled, (x, y), x * y - x // dtype(3), dtype)


# ---------------------------------------------------------------------------------------
# Losses and rankings: gathers by label, 0-d results, counts compared across a row
# ---------------------------------------------------------------------------------------

@jd.compute
def mean_cross_entropy(X, labels):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    L[i] = log(sum(exp(X[i, k] - mx[i]) for k in range(m))) + mx[i] - X[i, labels[i]]
    r = jd.reduce_axis(n)
    return jd.tensor((), lambda: jd.sum(L[r], axis=r) / n, name="loss")


@pytest.mark.parametrize("shape", [(6, 10), (1, 1), (300, 130), (3, 1000)])
def test_mean_cross_entropy(rng, shape):
    x, labels = normal(rng, shape), rng.integers(0, shape[1], shape[0])
    xx = f64(x)
    lse = np.log(np.exp(xx - xx.max(1, keepdims=True)).sum(1)) + xx.max(1)
    check(mean_cross_entropy, (x, labels), (lse - xx[np.arange(shape[0]), labels]).mean(),
          F32, rtol=1e-4)


@jd.compute
def top3_by_rank(X):
    n, m = X.shape
    R[i, j] = sum(1 for k in range(m) if X[i, k] > X[i, j] or (X[i, k] == X[i, j] and k < j))
    Y[i, j] = X[i, j] if R[i, j] < 3 else 0.0
    return Y


@pytest.mark.parametrize("shape", [(4, 7), (2, 200), (1, 3)])
def test_top3_mask_by_counting_larger_elements(rng, shape):
    x = normal(rng, shape)
    top = np.argsort(-x, axis=1, kind="stable")[:, :3]
    ref = np.zeros(shape)
    np.put_along_axis(ref, top, np.take_along_axis(f64(x), top, 1), 1)
    check(top3_by_rank, (x,), ref, F32)


@jd.compute
def im2col_3x3(X):
    C, H, W = X.shape
    Y = jd.tensor((C * 9, (H - 2) * (W - 2)))
    Y[r, p] = X[r // 9, p // (W - 2) + (r % 9) // 3, p % (W - 2) + r % 3]
    return Y


def test_im2col_by_floor_division(rng):
    x = normal(rng, (2, 5, 6))
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))
    check(im2col_3x3, (x,), windows.transpose(0, 3, 4, 1, 2).reshape(18, -1), F32)
