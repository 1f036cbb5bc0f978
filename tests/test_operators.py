"""Operators as a user porting TVM's operator library would write them, against NumPy.

Range inference (Tensor Comprehensions' rule: offsets by indices with known ranges,
strides, floor division, accesses under conditions), the bounds prover (floor-divided and
scaled indices, guards on non-affine subexpressions, nested abs, negated `jd.any`),
rank-generic lambdas and composed definitions. Every kernel is checked against a float64
NumPy reference, with out= buffers prefilled with sentinels (every element written).
"""
import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view as windows

import jitdl as jd
from _check import check
from jitdl.errors import DefinitionError

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def normal(rng, shape, dtype=F64):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------
# range inference: offsets, strides, dilation, floor division
# ---------------------------------------------------------------------------------------

@jd.compute(static=("stride", "dilation"))
def conv1d(X, W, stride, dilation):
    _, C, _ = X.shape
    _, _, R = W.shape
    Y[b, f, t] = sum(X[b, c, stride * t + dilation * r] * W[f, c, r]
                     for c in range(C) for r in range(R))
    return Y


def conv1d_ref(X, W, stride, dilation):
    B, C, L = X.shape
    F, _, R = W.shape
    span = dilation * (R - 1) + 1
    n = (L - span) // stride + 1
    out = np.zeros((B, F, n))
    for t in range(n):
        taps = X[:, :, stride * t + dilation * np.arange(R)]
        out[:, :, t] = np.einsum("bcr,fcr->bf", taps, W)
    return out


@pytest.mark.parametrize("stride,dilation,L", [(1, 1, 11), (2, 1, 12), (1, 3, 13),
                                               (3, 2, 20), (2, 2, 7)])
def test_conv1d_strided_dilated_inferred(rng, stride, dilation, L):
    X, W = normal(rng, (2, 3, L)), normal(rng, (4, 3, 3))
    check(lambda *a, **k: conv1d(*a, stride, dilation, **k), (X, W),
          conv1d_ref(X, W, stride, dilation), F64)


@jd.compute
def conv2d_nchw(X, W):
    _, C, _, _ = X.shape
    _, _, R, S = W.shape
    Y[n, f, p, q] = sum(X[n, c, p + r, q + s] * W[f, c, r, s]
                        for c in range(C) for r in range(R) for s in range(S))
    return Y


@pytest.mark.parametrize("dtype", [F32, F64])
def test_conv2d_valid_inferred(rng, dtype):
    X, W = normal(rng, (2, 3, 10, 7), dtype), normal(rng, (5, 3, 4, 2), dtype)
    ref = np.einsum("ncpqrs,fcrs->nfpq", windows(X.astype(F64), (4, 2), axis=(2, 3)),
                    W.astype(F64))
    assert ref.shape == (2, 5, 7, 6)
    check(conv2d_nchw, (X, W), ref, dtype, rtol=1e-4 if dtype == F32 else None,
          atol=1e-4 if dtype == F32 else 0)


@jd.compute
def max_pool(X):
    Y[n, c, p, q] = max(X[n, c, 2 * p + r, 2 * q + s] for r in range(3) for s in range(3))
    return Y


def test_max_pool_3x3_stride2_inferred(rng):
    X = normal(rng, (2, 3, 11, 8))
    ref = windows(X, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(-1, -2))
    assert ref.shape == (2, 3, 5, 3)
    check(max_pool, (X,), ref, F64)


@jd.compute
def depthwise(X, W):
    _, R = W.shape
    Y[c, t] = sum(X[c, t + r] * W[c, r] for r in range(R))
    return Y


def test_depthwise_inferred_from_both_operands(rng):
    X, W = normal(rng, (4, 9)), normal(rng, (4, 3))
    check(depthwise, (X, W), np.einsum("ctr,cr->ct", windows(X, 3, axis=1), W), F64)
    # c is the whole index of X and of W over W's full extent: their sizes must agree
    with pytest.raises(jd.ArgumentError, match="'W' has size 3.*'X' has size 4"):
        depthwise(X, normal(rng, (3, 3)))


@jd.compute
def nearest3(X):
    Y[a, b] = X[a // 3, b // 3]
    return Y


@jd.compute
def shifted_repeat(X):
    Y[i] = X[(i + 1) // 2]          # 0 <= (i + 1) // 2 <= n - 1  ->  i <= 2n - 2
    return Y


def test_floor_division_bounds(rng):
    X = normal(rng, (3, 5))
    check(nearest3, (X,), X.repeat(3, 0).repeat(3, 1), F64)
    v = normal(rng, 6)
    check(shifted_repeat, (v,), v[(np.arange(11) + 1) // 2], F64)


@jd.compute
def mirrored(X):
    n, = X.shape
    Y[i] = X[n - 1 - i] * 2        # a negative coefficient
    return Y


@jd.compute
def tail_sums(X):
    Y[i] = sum(X[2 * i + r] for r in range(4)) + X[i]
    return Y


def test_negative_coefficient_and_offset_by_reduction(rng):
    v = normal(rng, 10)
    check(mirrored, (v,), v[::-1] * 2, F64)
    ref = np.array([v[2 * i:2 * i + 4].sum() + v[i] for i in range(4)])
    check(tail_sums, (v,), ref, F64)


@jd.compute
def guarded_short(X, W):
    Y[j] = X[j + 1] * 2 if X[j + 1] > 0 else W[j]    # W counts although under a branch
    return Y


@jd.compute
def filtered_bound(X, V):
    n, m = X.shape
    Y[i] = sum(X[i, k] for k in range(m) if V[2 * i] > 100)   # V bounds i from a filter
    return Y


def test_accesses_under_conditions_bound_indices(rng):
    X, W = normal(rng, 9), normal(rng, 5)
    check(guarded_short, (X, W), np.where(X[1:6] > 0, X[1:6] * 2, W), F64)
    A, V = normal(rng, (6, 4)), normal(rng, 9)      # the filter never holds
    got = check(filtered_bound, (A, V), np.zeros(5), F64)
    assert got.shape == (5,)


@jd.compute
def pair_sum(A, B):
    Y[i, j] = A[i] + B[j] + A[i + j]     # A[i + j] only checked: j is bounded by B
    return Y


def test_two_index_access_is_checked_not_used(rng):
    A, B = normal(rng, 8), normal(rng, 3)
    # i < 8 and j < 3 from the bare accesses; A[i + j] then reads past A: an error
    with pytest.raises(DefinitionError, match=r"A\[i \+ j\]"):
        pair_sum(A, B)


@jd.compute
def later_round(A, B):
    Y[i, j] = A[i] * B[i + j]           # i known from A, then j from B[i + j]
    return Y


def test_index_bounded_in_a_later_round(rng):
    A, B = normal(rng, 3), normal(rng, 7)
    ref = np.array([[A[i] * B[i + j] for j in range(5)] for i in range(3)])
    check(later_round, (A, B), ref, F64)


@jd.compute
def starts_late(X):
    Y[i] = X[i - 2] + X[i]
    return Y


def test_range_not_starting_at_zero_says_how_to_fix():
    with pytest.raises(DefinitionError, match=r"would start at 2.*jd\.tensor\(shape\)"):
        starts_late(np.ones(5))


# ---------------------------------------------------------------------------------------
# the bounds prover: declared shapes, guarded and provably-inside accesses
# ---------------------------------------------------------------------------------------

@jd.compute(static=("groups",))
def group_conv1d(X, W, groups):
    B, C, L = X.shape
    F, cg, R = W.shape
    per = F // groups
    Y = jd.tensor((B, F, L - R + 1))
    Y[b, f, t] = sum(X[b, f // per * cg + c, t + r] * W[f, c, r]
                     for c in range(cg) for r in range(R))
    return Y


def group_conv1d_ref(X, W, groups):
    B, C, L = X.shape
    F, cg, R = W.shape
    per = F // groups
    out = np.zeros((B, F, L - R + 1))
    for f in range(F):
        g = f // per
        win = windows(X[:, g * cg:(g + 1) * cg], R, axis=2)
        out[:, f] = np.einsum("bctr,cr->bt", win, W[f])
    return out


@pytest.mark.parametrize("groups,C,F", [(1, 3, 2), (3, 6, 6), (2, 4, 6), (4, 8, 4)])
def test_group_conv_floor_div_scaled_offset(rng, groups, C, F):
    X, W = normal(rng, (2, C, 9)), normal(rng, (F, C // groups, 3))
    check(lambda *a, **k: group_conv1d(*a, groups, **k), (X, W),
          group_conv1d_ref(X, W, groups), F64)


@jd.compute(static=("stride", "pad"))
def conv_transpose2d(X, W, stride, pad):
    B, C, H, Wd = X.shape
    _, F, R, S = W.shape
    c, r, s = jd.reduce_axis(C), jd.reduce_axis(R), jd.reduce_axis(S)

    def body(b, f, y, x):
        ty, tx = y + pad - r, x + pad - s
        iy, ix = ty // stride, tx // stride
        inside = jd.all(ty % stride == 0, tx % stride == 0, iy >= 0, iy < H, ix >= 0, ix < Wd)
        return jd.sum(X[b, c, iy, ix] * W[c, f, r, s], axis=(c, r, s), where=inside)
    return jd.tensor((B, F, (H - 1) * stride - 2 * pad + R, (Wd - 1) * stride - 2 * pad + S),
                     body)


def conv_transpose2d_ref(X, W, stride, pad):
    B, C, H, Wd = X.shape
    _, F, R, S = W.shape
    full = np.zeros((B, F, (H - 1) * stride + R, (Wd - 1) * stride + S))
    for i in range(H):
        for j in range(Wd):
            full[:, :, i * stride:i * stride + R, j * stride:j * stride + S] += \
                np.einsum("bc,cfrs->bfrs", X[:, :, i, j], W)
    return full[:, :, pad:full.shape[2] - pad, pad:full.shape[3] - pad]


@pytest.mark.parametrize("stride,pad", [(1, 0), (2, 1), (3, 0), (2, 2)])
def test_transposed_conv_guard_on_floor_div(rng, stride, pad):
    X, W = normal(rng, (1, 2, 4, 3)), normal(rng, (2, 3, 3, 4))
    check(lambda *a, **k: conv_transpose2d(*a, stride, pad, **k), (X, W),
          conv_transpose2d_ref(X, W, stride, pad), F64)


@jd.compute(static=("p",))
def reflect2d(X, p):
    n, m = X.shape
    Y = jd.tensor((n + 2 * p, m + 2 * p))
    Y[i, j] = X[n - 1 - abs(n - 1 - abs(i - p)), m - 1 - abs(m - 1 - abs(j - p))]
    return Y


@jd.compute(static=("p",))
def edge_pad(X, p):
    n, = X.shape
    Y = jd.tensor((n + 2 * p,))
    Y[i] = X[jd.min(jd.max(i - p, 0), n - 1)]
    return Y


@jd.compute(static=("p",))
def wrap_pad(X, p):
    n, = X.shape
    Y = jd.tensor((n + 2 * p,))
    Y[i] = X[(i - p) % n]
    return Y


@pytest.mark.parametrize("p", [1, 3])
def test_padding_modes(rng, p):
    X = normal(rng, (5, 6))
    check(lambda *a, **k: reflect2d(*a, p, **k), (X,), np.pad(X, p, mode="reflect"), F64)
    v = normal(rng, 7)
    check(lambda *a, **k: edge_pad(*a, p, **k), (v,), np.pad(v, p, mode="edge"), F64)
    check(lambda *a, **k: wrap_pad(*a, p, **k), (v,), np.pad(v, p, mode="wrap"), F64)


@jd.compute
def smooth_keep_border(X):
    n, m = X.shape
    Y = jd.tensor((n, m))
    Y[i, j] = X[i, j] if jd.any(i == 0, j == m - 1, i == n - 1, j == 0) else \
        (X[i - 1, j - 1] + X[i + 1, j + 1] + X[i - 1, j + 1] + X[i + 1, j - 1]) / 4
    return Y


@jd.compute
def not_first(X):
    n, = X.shape
    Y = jd.tensor((n,))
    Y[i] = X[i - 1] if i != 0 else X[i]     # i != 0 over [0, n) means i >= 1
    return Y


def test_negated_any_and_not_equal_guards(rng):
    X = normal(rng, (5, 7))
    ref = X.copy()
    ref[1:-1, 1:-1] = (X[:-2, :-2] + X[2:, 2:] + X[:-2, 2:] + X[2:, :-2]) / 4
    check(smooth_keep_border, (X,), ref, F64)
    v = normal(rng, 6)
    check(not_first, (v,), np.concatenate([v[:1], v[:-1]]), F64)


@jd.compute
def mixed_unbounded(X, off):
    n, = X.shape
    Y = jd.tensor((n,))
    Y[i] = X[i // 2 * 3 + off]
    return Y


@jd.compute
def unguarded_fdiv(X):
    n, = X.shape
    Y = jd.tensor((2 * n,))
    Y[i] = X[(i + 1) // 2]
    return Y


def test_prover_says_what_it_cannot_bound():
    with pytest.raises(DefinitionError, match=r"cannot bound index `i // 2 \* 3 \+ off`.*"
                                              r"`off` is a scalar argument"):
        mixed_unbounded(np.ones(6), 1)
    with pytest.raises(DefinitionError, match=r"ranges over \[0, 4\].*4 element"):
        unguarded_fdiv(np.ones(4))


# ---------------------------------------------------------------------------------------
# rank-generic and composed definitions
# ---------------------------------------------------------------------------------------

@jd.compute
def leaky(X, slope):
    return jd.tensor(X.shape, lambda *idx: jd.select(X[idx] > 0, X[idx], X[idx] * slope))


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (2, 1, 3, 2)])
def test_rank_generic_lambda(rng, shape):
    X = normal(rng, shape)
    check(lambda *a, **k: leaky(*a, **k), (X, 0.2), np.where(X > 0, X, X * 0.2), F64)


@jd.compute
def channel_sum(X):
    C = X.shape[1]
    c = jd.reduce_axis(C)
    return jd.tensor(X.shape[:1] + X.shape[2:],
                     lambda n, *rest: jd.sum(X[(n, c) + rest], axis=c))


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4), (2, 3, 2, 5)])
def test_rank_generic_with_leading_index_and_shape_slices(rng, shape):
    X = normal(rng, shape)
    check(channel_sum, (X,), X.sum(axis=1), F64)


def test_rank_generic_lambda_too_few_dimensions():
    @jd.compute
    def needs_two(X):
        return jd.tensor(X.shape, lambda a, b, *rest: X[(a, b) + rest])
    with pytest.raises(DefinitionError, match="2 or more index"):
        needs_two(np.ones(3))


@jd.compute
def gelu_tanh(X):
    c = 0.7978845608028654
    return jd.tensor(X.shape, lambda *i: 0.5 * X[i] * (1 + jd.tanh(c * (X[i] + 0.044715 *
                                                                         X[i] ** 3))))


@jd.compute
def row_softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    Y[i, j] = e[i, j] / sum(e[i, k] for k in range(m))
    return Y


@jd.compute
def mlp_head(X, W, bias):
    n, d = X.shape
    k = jd.reduce_axis(d)
    h = jd.tensor((n, W.shape[1]), lambda i, j: bias[j] + jd.sum(X[i, k] * W[k, j], axis=k))
    return row_softmax(gelu_tanh(h))


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def test_composed_definitions_inline_into_one_kernel(rng):
    X, W, b = normal(rng, (5, 8)), normal(rng, (8, 6)), normal(rng, 6)
    ref = _softmax(_gelu_tanh(X @ W + b))
    check(mlp_head, (X, W, b), ref, F64)
    # the callees' stages are part of the caller's graph, named after them
    text = mlp_head.lower(X, W, b)
    assert "gelu_tanh" in text or "row_softmax" in text


@jd.compute(static=("stride",))
def pool_then_scale(X, alpha, stride):
    pooled = max_pool(X) if stride == 2 else X
    return jd.tensor(pooled.shape, lambda *i: pooled[i] * alpha)


def test_composition_with_scalars_and_static_values(rng):
    X = normal(rng, (1, 2, 9, 9))
    ref = windows(X, (3, 3), axis=(2, 3))[:, :, ::2, ::2].max(axis=(-1, -2)) * 1.5
    check(lambda *a, **k: pool_then_scale(*a, 2, **k), (X, 1.5), ref, F64)
    ref = leaky(X, 0.5) * 2
    twice = jd.compute(lambda X: leaky(leaky(X, 0.5), 1.0))
    check(twice, (X,), np.where(X > 0, X, X * 0.5), F64)
    assert np.allclose(ref, np.where(X > 0, X, X * 0.5) * 2)


def test_composition_errors():
    @jd.compute
    def passes_array(X, a):
        return leaky(np.ones(3), a)

    @jd.compute
    def with_out(X):
        return leaky(X, 0.1, out=np.ones(3))
    with pytest.raises(jd.JitdlError, match="NumPy array.*inside a definition"):
        passes_array(np.ones(3), 0.5)
    with pytest.raises(jd.JitdlError, match="out="):
        with_out(np.ones(3))


# ---------------------------------------------------------------------------------------
# resizing and indexing ops
# ---------------------------------------------------------------------------------------

@jd.compute(static=("scale",))
def resize_bilinear(X, scale):
    H, W = X.shape

    def body(y, x):
        # half-pixel centres, clamped at 0; floor of a float coordinate is bounded too
        sy = jd.max((y + 0.5) / scale - 0.5, 0.0)
        sx = jd.max((x + 0.5) / scale - 0.5, 0.0)
        y0, x0 = jd.min(jd.int64(jd.floor(sy)), H - 1), jd.min(jd.int64(jd.floor(sx)), W - 1)
        y1, x1 = jd.min(y0 + 1, H - 1), jd.min(x0 + 1, W - 1)
        wy, wx = sy - y0, sx - x0
        return ((X[y0, x0] * (1 - wx) + X[y0, x1] * wx) * (1 - wy) +
                (X[y1, x0] * (1 - wx) + X[y1, x1] * wx) * wy)
    return jd.tensor((H * scale, W * scale), body)


def resize_bilinear_ref(X, scale):
    H, W = X.shape
    out = np.empty((H * scale, W * scale))
    for y in range(H * scale):
        for x in range(W * scale):
            sy, sx = max((y + .5) / scale - .5, 0), max((x + .5) / scale - .5, 0)
            y0, x0 = min(int(sy), H - 1), min(int(sx), W - 1)
            y1, x1 = min(y0 + 1, H - 1), min(x0 + 1, W - 1)
            wy, wx = sy - y0, sx - x0
            out[y, x] = ((X[y0, x0] * (1 - wx) + X[y0, x1] * wx) * (1 - wy) +
                         (X[y1, x0] * (1 - wx) + X[y1, x1] * wx) * wy)
    return out


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("scale", [2, 3])
def test_bilinear_resize_float_coordinates(rng, dtype, scale):
    X = normal(rng, (4, 5), dtype)
    # the coordinates are int64 index + Python float: float64 (NumPy 2), so the result is
    check(lambda *a, **k: resize_bilinear(*a, scale, **k), (X,),
          resize_bilinear_ref(X.astype(F64), scale), F64)


@jd.compute
def to_depth(X):
    Y[b, c, y, x] = X[b, c * 4 + y % 2 * 2 + x % 2, y // 2, x // 2]   # c: a second round
    return Y


@jd.compute
def flatten(X):
    n, m = X.shape
    Y = jd.tensor((n * m,))
    Y[k] = X[k // m, k % m]
    return Y


@jd.compute
def rolled(X):
    n, = X.shape
    Y = jd.tensor((n,))          # `%` does not bound an index: the shape is declared
    Y[i] = X[(i - 3) % n]
    return Y


@jd.compute
def diagonal(X):
    Y[i] = X[i, i] * 2           # two dimensions of one argument may differ
    return Y


def test_indexing_ops(rng):
    X = normal(rng, (2, 8, 3, 4))
    B, C, H, W = X.shape
    ref = X.reshape(B, C // 4, 2, 2, H, W).transpose(0, 1, 4, 2, 5, 3).reshape(
        B, C // 4, 2 * H, 2 * W)
    check(to_depth, (X,), ref, F64)
    M = normal(rng, (3, 5))
    check(flatten, (M,), M.reshape(-1), F64)
    v = normal(rng, 7)
    check(rolled, (v,), np.roll(v, 3), F64)
    check(diagonal, (M,), np.diag(M) * 2, F64)
    check(diagonal, (M.T.copy(),), np.diag(M.T) * 2, F64)


@jd.compute
def strided_window(X):
    n, = X.shape
    Y = jd.tensor((n // 2,))
    Y[i] = sum(X[2 * i + 2 * r] if i + r < n // 2 else 0.0 for r in range(3))
    return Y


@jd.compute
def reversed_window(X):
    n, = X.shape
    Y = jd.tensor((n,))
    Y[i] = sum(X[n - 1 - i - r] for r in range(3) if i + r <= n - 1)
    return Y


def test_guards_relating_several_indices(rng):
    v = normal(rng, 10)
    check(strided_window, (v,),
          [sum(v[2 * i + 2 * r] for r in range(3) if i + r < 5) for i in range(5)], F64)
    check(reversed_window, (v,),
          [sum(v[9 - i - r] for r in range(3) if i + r <= 9) for i in range(10)], F64)


@jd.compute
def conv_relu(X, W):
    return leaky(conv1d(X, W, 2, 1), 0.0)       # a callee with static arguments


def test_composition_with_a_static_callee(rng):
    X, W = normal(rng, (2, 3, 12)), normal(rng, (4, 3, 3))
    check(conv_relu, (X, W), np.maximum(conv1d_ref(X, W, 2, 1), 0), F64)


@jd.compute
def im2col3(X):
    C, H, W = X.shape
    Y = jd.tensor((C * 9, (H - 2) * (W - 2)))
    Y[r, p] = X[r // 9, p // (W - 2) + r % 9 // 3, p % (W - 2) + r % 3]
    return Y


@jd.compute
def max_pool_padded(X):
    n, m = X.shape
    Y = jd.tensor(((n - 1) // 2 + 1, (m - 1) // 2 + 1))
    Y[i, j] = max(X[2 * i + r - 1, 2 * j + s - 1]
                  if jd.all(2 * i + r >= 1, 2 * i + r - 1 < n, 2 * j + s >= 1, 2 * j + s <= m)
                  else -np.inf for r in range(3) for s in range(3))
    return Y


@jd.compute(static=("G",))
def group_norm(X, G):
    _, C, H, W = X.shape
    cg = C // G
    size = cg * H * W
    mu[n, g] = sum(X[n, g * cg + c, h, w]
                   for c in range(cg) for h in range(H) for w in range(W)) / size
    var[n, g] = sum((X[n, g * cg + c, h, w] - mu[n, g]) ** 2
                    for c in range(cg) for h in range(H) for w in range(W)) / size
    Y[n, c, h, w] = (X[n, c, h, w] - mu[n, c // cg]) / sqrt(var[n, c // cg] + 1e-5)
    return Y


def test_im2col_padded_pool_group_norm(rng):
    X = normal(rng, (2, 5, 6))
    ref = windows(X, (3, 3), axis=(1, 2)).transpose(0, 3, 4, 1, 2).reshape(18, -1)
    check(im2col3, (X,), ref, F64)
    M = normal(rng, (7, 6))
    P = np.pad(M, 1, constant_values=-np.inf)
    ref = [[P[2 * i:2 * i + 3, 2 * j:2 * j + 3].max() for j in range(3)] for i in range(4)]
    check(max_pool_padded, (M,), ref, F64)
    X = normal(rng, (2, 6, 3, 4))
    x = X.reshape(2, 3, -1)
    ref = ((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5))
    check(lambda *a, **k: group_norm(*a, 3, **k), (X,), ref.reshape(X.shape), F64,
          rtol=1e-10)


# ---------------------------------------------------------------------------------------
# found in review
# ---------------------------------------------------------------------------------------

@jd.compute
def lower_tri_matmul(A, B):
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(i + 1))   # a range on an outer index
    return C


@jd.compute
def row_totals(A):
    n, m = A.shape
    Y[i] = sum(A[i, k] for k in range(m))
    return Y


@jd.compute
def shifted_by(X, p):
    n, = X.shape
    Y = jd.tensor((n,))
    Y[i] = X[i + p] if 0 <= i + p < n else -1.0       # p: a scalar argument
    return Y


@jd.compute
def plus_index(X, p):
    Y[i] = X[i] + (i + p)
    return Y


@jd.compute
def scaled(X, *, s=3.0):
    Z[i] = X[i] * s
    return Z


@jd.compute
def uses_scaled(X):
    return scaled(X, s=0.5)


def test_review_findings(rng):
    A, B = normal(rng, (5, 5)), normal(rng, (5, 3))
    check(lower_tri_matmul, (A, B), np.tril(A) @ B, F64)
    check(row_totals, (np.ones((3, 0)),), np.zeros(3), F64)      # an empty reduction
    v = normal(rng, 5)
    check(shifted_by, (v, 2), np.concatenate([v[2:], [-1.0, -1.0]]), F64)
    check(shifted_by, (v, -1), np.concatenate([[-1.0], v[:-1]]), F64)
    for p in (np.int32(7), np.int8(-3), np.uint8(9), 7):
        check(plus_index, (v, p), v + np.arange(5) + int(p), F64)
    check(scaled, (v,), v * 3, F64)
    check(lambda *a, **k: scaled(*a, s=4.0, **k), (v,), v * 4, F64)
    check(uses_scaled, (v,), v * 0.5, F64)


@jd.compute
def gather_cols(A, B, ids):
    (M, K), (_, N) = A.shape, B.shape
    n, = ids.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, n), lambda i, j: jd.sum(A[i, k] * B[k, ids[j]], axis=k), name="C")


@jd.schedule(gather_cols)
def _pack_b(s, cfg):
    s.pack("B", s["C"], 1, 8)


def test_packed_operand_with_data_dependent_index_is_checked(rng):
    A, B = normal(rng, (5, 6)), normal(rng, (6, 13))
    ids = np.array([0, 3, 12, 7])
    check(gather_cols, (A, B, ids), A @ B[:, ids], F64)
    for bad in (13, 15, 16, -1):          # 13..15 are inside B_pack's padding
        with pytest.raises(IndexError, match=rf"into B is {bad}, outside \[0, 13\)"):
            gather_cols(A, B, np.array([0, bad, 2, 1]))
