"""A tour of jitdl's index notation, each kernel checked against NumPy.

    python examples/index_notation.py

`Y[i, j] = expr` defines a new tensor Y. The names in the subscript are fresh indices;
each ranges over the largest range from 0 that keeps every access in bounds, counting
accesses where it is offset by indices with known ranges (`X[i + 2]`, `P[i + di]` with
`di in range(3)`) or floor-divided (`X[i // 2]`); or it comes from a shape declared
first with `jd.tensor(shape)`. Generators
(`sum(... for k in range(m))`) are reductions; `max(a, b)`, `exp`, `sqrt`, `if/else`
and `and`/`or` become IR.
"""
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

import jitdl as jd

rng = np.random.default_rng(0)


def check(name, got, want, tol=1e-5):
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    print(f"{name:34s} ok   max abs error {np.max(np.abs(got - want)):.1e}")


# 1. Elementwise with broadcasting by indexing: s runs along the columns, b down the rows.
@jd.compute
def scale_shift_relu(X, s, b):
    Y[i, j] = max(X[i, j] * s[j] + b[i], 0.0)
    return Y


x = rng.standard_normal((300, 200), dtype=np.float32)
s = rng.standard_normal(200, dtype=np.float32)
b = rng.standard_normal(300, dtype=np.float32)
check("broadcast  max(X*s[j] + b[i], 0)", scale_shift_relu(x, s, b),
      np.maximum(x * s[None, :] + b[:, None], 0))


# 2. A stencil: X[i] and X[i + 2] both in bounds gives i in range(len(X) - 2).
@jd.compute
def pair_sum(X):
    Y[i] = X[i] + X[i + 2]
    return Y


v = rng.standard_normal(1000, dtype=np.float32)
check("stencil    X[i] + X[i + 2]", pair_sum(v), v[:-2] + v[2:])


# 3. Zero padding with a declared shape (its accesses are guarded), then a 3x3
#    convolution over the padded image: P[i + di, j + dj] with di, dj in range(3) gives
#    Y the shape (n + 2 - 2, m + 2 - 2).
@jd.compute
def conv3x3(X, K):
    n, m = X.shape
    P = jd.tensor((n + 2, m + 2))
    P[i, j] = X[i - 1, j - 1] if (i >= 1 and i <= n and j >= 1 and j <= m) else 0.0
    Y[i, j] = sum(P[i + di, j + dj] * K[di, dj] for di in range(3) for dj in range(3))
    return Y


img = rng.standard_normal((64, 48), dtype=np.float32)
ker = rng.standard_normal((3, 3), dtype=np.float32)
windows = sliding_window_view(np.pad(img.astype(np.float64), 1), (3, 3))
check("padded 3x3 convolution", conv3x3(img, ker), np.einsum("ijab,ab->ij", windows, ker))


# 4. Layernorm: generator reductions, a math function and a scalar with a default.
@jd.compute
def layernorm(X, gamma, beta, eps=1e-5):
    n, m = X.shape
    mu[i] = sum(X[i, k] for k in range(m)) / m
    var[i] = sum((X[i, k] - mu[i]) ** 2 for k in range(m)) / m
    Y[i, j] = (X[i, j] - mu[i]) / sqrt(var[i] + eps) * gamma[j] + beta[j]
    return Y


g = rng.standard_normal(200, dtype=np.float32)
x64 = x.astype(np.float64)
mu = x64.mean(1, keepdims=True)
check("layernorm", layernorm(x, g, s),
      (x64 - mu) / np.sqrt(x64.var(1, keepdims=True) + 1e-5) * g + s, tol=1e-4)


# 5. Several outputs: return a tuple, get a tuple of arrays.
@jd.compute
def row_stats(X):
    n, m = X.shape
    lo[i] = min(X[i, k] for k in range(m))
    hi[i] = max(X[i, k] for k in range(m))
    mean[i] = sum(X[i, k] for k in range(m)) / m
    return lo, hi, mean


lo, hi, mean = row_stats(x)
check("multi-output  min, max, mean", np.stack([lo, hi, mean]),
      np.stack([x.min(1), x.max(1), x64.mean(1)]))


# 6. A scalar parameter: a Python float is weakly typed, so float32 stays float32.
@jd.compute
def axpy(a, X, Z):
    Y[i] = a * X[i] + Z[i]
    return Y


w = rng.standard_normal(1000, dtype=np.float32)
for alpha in (2.5, -0.75):
    out = axpy(alpha, v, w)
    assert out.dtype == np.float32, out.dtype
    check(f"scalar     {alpha} * x + z", out, alpha * v.astype(np.float64) + w)


# 7. Rank-generic definitions (`*idx` takes one index per dimension) compose: calling a
#    definition on tensors inside another inlines it, and the whole is one kernel.
@jd.compute
def leaky_relu(X, slope):
    return jd.tensor(X.shape, lambda *idx: X[idx] if X[idx] > 0 else X[idx] * slope)


@jd.compute
def upsample_leaky(X):
    U[c, y, x] = X[c, y // 2, x // 2]          # nearest upsampling: 2H x 2W, inferred
    return leaky_relu(U, 0.1)


t = rng.standard_normal((3, 8, 5), dtype=np.float32)
up = t.repeat(2, 1).repeat(2, 2)
check("composed   leaky_relu(upsample(X))", upsample_leaky(t), np.where(up > 0, up, up * 0.1))


print("\nThe loop IR of the padded convolution (conv3x3.lower(img, ker)):\n")
print(conv3x3.lower(img, ker))
