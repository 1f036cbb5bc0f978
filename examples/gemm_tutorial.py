"""How to optimise GEMM on the CPU with jitdl schedules, step by step (after TVM's tutorial).

    python examples/gemm_tutorial.py [--size 1024]

The definition never changes; each step adds schedule primitives and prints GFLOP/s and
the ratio to NumPy's BLAS (measured in the same run, median of repeats).
"""
import argparse
import time

import numpy as np

import jitdl as jd

p = argparse.ArgumentParser()
p.add_argument("--size", type=int, default=1024)
args = p.parse_args()
M = N = K = args.size
rng = np.random.default_rng(0)
A = rng.standard_normal((M, K)).astype(np.float32)
B = rng.standard_normal((K, N)).astype(np.float32)
REF = A.astype(np.float64) @ B.astype(np.float64)
BN = 32          # the block of C columns: two AVX-512 vectors of float32
RB = 4           # rows of C kept in registers


def matmul_with(schedule):
    """A fresh matmul definition with the given schedule function."""
    @jd.compute
    def matmul(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")
    jd.schedule(matmul, target="cpu")(schedule)
    return matmul


def naive(s, cfg):
    """for i: for j: for k: C[i, j] += A[i, k] * B[k, j]  (B walked down a column)"""


def blocking(s, cfg):
    """Tile i and j by 32 so a block of C, and the rows of A and B it needs, stay in cache."""
    C = s["C"]
    i, j = C.axis
    (k,) = C.reduce_axis
    io, jo, ii, ji = s.tile(i, j, 32, 32)
    s.reorder(io, jo, k, ii, ji)


def vectorize(s, cfg):
    """...and run the innermost j loop as SIMD lanes."""
    C = s["C"]
    i, j = C.axis
    (k,) = C.reduce_axis
    io, jo, ii, ji = s.tile(i, j, 32, BN)
    s.reorder(io, jo, k, ii, ji)
    s.vectorize(ji)


def permutation(s, cfg):
    """...with k outside the block rows: each B row segment is loaded once per block."""
    C = s["C"]
    i, j = C.axis
    (k,) = C.reduce_axis
    io, ii = s.split(i, RB)
    jo, ji = s.split(j, BN)
    s.reorder(io, jo, k, ii, ji)
    s.vectorize(ji)


def packing(s, cfg):
    """...and pack B into [N/32, K, 32] so that walking k reads B contiguously (rows of B
    1024 floats apart would all fall in the same L1 set)."""
    C = s["C"]
    s.pack("B", C, 1, BN)
    permutation(s, cfg)


def write_cache(s, cfg):
    """...and keep the RB x 32 block of C in registers across the whole k loop: with the
    block unrolled, LLVM promotes it to vector registers (the effect of TVM's write cache;
    jitdl's s.cache_write + s.compute_at build the same nest with a block-sized buffer,
    but LLVM does not yet vectorise that buffer once promoted, see the closing notes)."""
    C = s["C"]
    s.pack("B", C, 1, BN)
    i, j = C.axis
    (k,) = C.reduce_axis
    io, ii = s.split(i, RB)
    jo, ji = s.split(j, BN)
    s.reorder(io, jo, k, ii, ji)
    s.unroll(ii)
    s.unroll(ji)


def parallel(s, cfg):
    """...and run the blocks of rows on all cores."""
    write_cache(s, cfg)
    s.parallel(s["C"].leaf_axes[0])
    s.parallel(s["B_pack"].axis[0])


def gflops(seconds):
    return 2 * M * N * K / seconds / 1e9


def median_time(fn, repeat=5):
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


t_np = median_time(lambda: A @ B, repeat=10)
print(f"matmul {M}x{K}x{N} float32; NumPy (BLAS): {gflops(t_np):.1f} GFLOP/s\n")
print(f"{'step':12s} {'GFLOP/s':>8s} {'vs NumPy':>9s}   what changed")
for step in (naive, blocking, vectorize, permutation, packing, write_cache, parallel):
    f = matmul_with(step)
    C = f(A, B)
    np.testing.assert_allclose(C, REF, rtol=1e-3, atol=1e-3 * np.sqrt(K))
    t = median_time(lambda: f(A, B), repeat=3 if step is naive else 7)
    doc = step.__doc__.strip().splitlines()[0] if step.__doc__ else ""
    print(f"{step.__name__:12s} {gflops(t):8.1f} {t_np / t:8.2f}x   {doc}")
print("\nThe final loop nest:\n")
print(matmul_with(parallel).lower(A, B))
