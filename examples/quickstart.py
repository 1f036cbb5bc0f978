"""jitdl in a minute: define two kernels, run them on NumPy arrays, check and time them.

    python examples/quickstart.py
"""
import time
import timeit

import numpy as np

import jitdl as jd


# TE style: a lambda over the output indices, an explicit reduction axis.
@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


# Index notation: assigning to a new name defines a tensor; index ranges are inferred.
@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


def numpy_time(fn):
    """Median seconds of fn() after a warm-up."""
    fn()
    return float(np.median(timeit.repeat(fn, number=1, repeat=10)))


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def report(name, got, want, t_jd, t_np):
    err = np.max(np.abs(got - want) / (np.abs(want) + 1e-6))
    print(f"{name:8s} max rel. error vs float64 NumPy: {err:.1e}   "
          f"jitdl {t_jd * 1e3:6.2f} ms   NumPy {t_np * 1e3:6.2f} ms   "
          f"({t_np / t_jd:.2f}x)")


rng = np.random.default_rng(0)
a = rng.random((512, 512), dtype=np.float32)
b = rng.random((512, 512), dtype=np.float32)
x = rng.standard_normal((1024, 1024), dtype=np.float32)

t0 = time.perf_counter()
c = matmul(a, b)          # first call: capture, lower, compile (and cache on disk), run
y = softmax(x)
print(f"first calls (compile, or load from the disk cache, and run): "
      f"{time.perf_counter() - t0:.2f} s\n")

# time jitdl before NumPy's BLAS runs: its idle threads keep spinning for a while after
# each call and would take one of a small machine's cores from jitdl's threads
t_matmul, t_softmax = matmul.timeit(a, b), softmax.timeit(x)
report("matmul", c, a.astype(np.float64) @ b, t_matmul, numpy_time(lambda: a @ b))
report("softmax", y, np_softmax(x.astype(np.float64)), t_softmax,
       numpy_time(lambda: np_softmax(x)))

print("\nThe loops jitdl generated for softmax (its automatic schedule):\n")
print(softmax.lower(x))
