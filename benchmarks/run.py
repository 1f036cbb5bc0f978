"""Kernel throughput of jitdl's automatic schedule against NumPy, in the same run.

    python benchmarks/run.py                 # full sizes, table + benchmarks/results/run.json
    python benchmarks/run.py --quick         # small sizes (smoke test)
    python benchmarks/run.py --only matmul   # one kernel (comma-separated list allowed)

Kernels: copy bandwidth, fused elementwise max(a*b + c, 0), matmul 1024^3 and two odd
shapes (1000^3, 777x513x1025), row softmax, layernorm, conv2d NCHW 3x3.

Every jitdl result is checked against a float64 NumPy reference before it is timed.
Times are medians of repeated calls after warm-up (jitdl and NumPy in alternating blocks).
ratio = jitdl throughput / NumPy throughput (> 1: jitdl is faster).
"first call" is the wall time of the first call (capture, lower, compile, run); by default
the disk cache points at a fresh temporary directory so this is a cold compile
(--warm-cache keeps the user's cache).
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

if "--warm-cache" not in sys.argv:   # must be set before jitdl reads its settings
    os.environ["JITDL_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitdl-bench-cache-")

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (LAST_MINIMA, import_jitdl, machine, print_table, time_pair,  # noqa: E402
                     write_json)

jd = import_jitdl()


# ----------------------------------------------------------------------------- kernels

@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute
def fused(A, B, C):
    Y[i] = max(A[i] * B[i] + C[i], 0.0)
    return Y


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def conv2d(X, W):
    """NCHW, stride 1, padding 1 ("same" for 3x3 filters)."""
    n, c, h, w = X.shape
    f, _, r, q = W.shape
    P = jd.tensor((n, c, h + 2, w + 2))
    P[b, ci, y, x] = X[b, ci, y - 1, x - 1] if (y >= 1 and y <= h and x >= 1 and x <= w) else 0.0
    Y = jd.tensor((n, f, h, w))
    Y[b, fo, y, x] = sum(P[b, ci, y + ry, x + rx] * W[fo, ci, ry, rx]
                         for ci in range(c) for ry in range(r) for rx in range(q))
    return Y


@jd.compute
def layernorm(X, eps):
    n, m = X.shape
    mu[i] = sum(X[i, k] for k in range(m)) / m
    var[i] = sum((X[i, k] - mu[i]) ** 2 for k in range(m)) / m
    Y[i, j] = (X[i, j] - mu[i]) * rsqrt(var[i] + eps)
    return Y


@jd.compute
def copy(X):
    Y[i] = X[i]
    return Y


# ----------------------------------------------------------------------------- NumPy refs

def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def np_conv2d(x, w):
    """im2col + matmul: (N, C*R*S, H*W) columns from a zero-copy window view."""
    n, c, h, wd = x.shape
    f, _, r, s = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (r // 2, r // 2), (s // 2, s // 2)))
    win = sliding_window_view(xp, (r, s), axis=(2, 3))          # N, C, H, W, R, S
    cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, c * r * s, h * wd)
    return (w.reshape(f, c * r * s) @ cols).reshape(n, f, h, wd)


# ----------------------------------------------------------------------------- benchmarks

def first_call(f, *args, **kw):
    t0 = time.perf_counter()
    out = f(*args, **kw)
    return out, time.perf_counter() - t0


def timeit_crosscheck(f, *args):
    """f.timeit's own median, recorded next to ours (None when it fails)."""
    try:
        return float(f.timeit(*args))
    except Exception as e:  # noqa: BLE001 - a benchmark reports, never stops
        return f"error: {type(e).__name__}: {e}"


def bench_copy(cfg, rng):
    n = cfg["vec"]
    x = rng.standard_normal(n, dtype=np.float32)
    y, y_np = np.empty_like(x), np.empty_like(x)
    out, t_first = first_call(copy, x)
    np.testing.assert_array_equal(out, x)
    copy(x, out=y)
    np.testing.assert_array_equal(y, x)
    t_jd, t_np = time_pair(lambda: copy(x, out=y), lambda: np.copyto(y_np, x), **cfg["rep"])
    nbytes = 2 * x.nbytes
    return dict(kernel="copy", size=f"{n} f32", jitdl_s=t_jd, numpy_s=t_np, metric="GB/s",
                jitdl=nbytes / t_jd / 1e9, numpy=nbytes / t_np / 1e9, ratio=t_np / t_jd,
                first_call_s=t_first, numpy_ref="np.copyto(y, x)", note="jitdl with out=",
                jitdl_timeit_s=timeit_crosscheck(copy, x))


def bench_elementwise(cfg, rng):
    n = cfg["vec"]
    a, b, c = (rng.standard_normal(n, dtype=np.float32) for _ in range(3))
    ref = np.maximum(a.astype(np.float64) * b + c, 0)
    out, t_first = first_call(fused, a, b, c)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-6)
    y = np.empty_like(a)
    fused(a, b, c, out=y)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    # copy bandwidth on the same arrays: the better of jitdl's (parallel) copy and np.copyto
    t_copy = min(time_pair(lambda: copy(a, out=y), lambda: np.copyto(y, a), **cfg["rep"]))
    t_jd_alloc, _ = time_pair(lambda: fused(a, b, c), lambda: None, **cfg["rep"])
    t_jd, t_np = time_pair(lambda: fused(a, b, c, out=y),      # last: its minima are kept
                           lambda: np.maximum(a * b + c, 0), **cfg["rep"])
    nbytes = 4 * a.nbytes
    gbs = nbytes / t_jd / 1e9
    copy_gbs = 2 * a.nbytes / t_copy / 1e9
    return dict(kernel="elementwise", size=f"{n} f32", jitdl_s=t_jd, numpy_s=t_np,
                metric="GB/s", jitdl=gbs, numpy=nbytes / t_np / 1e9, ratio=t_np / t_jd,
                first_call_s=t_first, note="max(a*b+c, 0); jitdl with out=",
                numpy_ref="np.maximum(a*b + c, 0)",
                jitdl_alloc_s=t_jd_alloc, jitdl_alloc_gbs=nbytes / t_jd_alloc / 1e9,
                copy_gbs=copy_gbs, ratio_to_copy=gbs / copy_gbs,
                jitdl_timeit_s=timeit_crosscheck(fused, a, b, c))


def bench_matmul(cfg, rng, shape=None, kernel="matmul"):
    m, k, n = shape or (cfg["mm"],) * 3
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    out, t_first = first_call(matmul, a, b)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    t_jd, t_np = time_pair(lambda: matmul(a, b), lambda: a @ b, **cfg["rep_heavy"])
    flops = 2.0 * m * k * n
    size = f"{m}^3 f32" if m == k == n else f"{m}x{k}x{n} f32"
    return dict(kernel=kernel, size=size, jitdl_s=t_jd, numpy_s=t_np,
                metric="GFLOP/s", jitdl=flops / t_jd / 1e9, numpy=flops / t_np / 1e9,
                ratio=t_np / t_jd, first_call_s=t_first, numpy_ref="a @ b",
                jitdl_timeit_s=timeit_crosscheck(matmul, a, b))


def bench_softmax(cfg, rng):
    n = cfg["sm"]
    x = rng.standard_normal((n, n), dtype=np.float32)
    ref = np_softmax(x.astype(np.float64))
    out, t_first = first_call(softmax, x)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-9)
    t_jd, t_np = time_pair(lambda: softmax(x), lambda: np_softmax(x), **cfg["rep_heavy"])
    nbytes = 2 * x.nbytes   # the minimum: one read of X, one write of Y
    return dict(kernel="softmax", size=f"{n}x{n} f32", jitdl_s=t_jd, numpy_s=t_np,
                metric="GB/s", jitdl=nbytes / t_jd / 1e9, numpy=nbytes / t_np / 1e9,
                ratio=t_np / t_jd, first_call_s=t_first, note="bytes = 1 read + 1 write",
                numpy_ref="e = exp(x - max); e / sum(e)",
                jitdl_timeit_s=timeit_crosscheck(softmax, x))


def bench_matmul_odd(cfg, rng):
    return bench_matmul(cfg, rng, cfg["mm_odd"], "matmul odd")


def bench_matmul_odd2(cfg, rng):
    return bench_matmul(cfg, rng, cfg["mm_odd2"], "matmul odd")


def np_layernorm(x, eps):
    mu = x.mean(1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + eps)


def bench_layernorm(cfg, rng):
    n, m = cfg["ln"]
    x = rng.standard_normal((n, m), dtype=np.float32)
    ref = np_layernorm(x.astype(np.float64), 1e-5)
    out, t_first = first_call(layernorm, x, 1e-5)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    t_jd, t_np = time_pair(lambda: layernorm(x, 1e-5), lambda: np_layernorm(x, 1e-5),
                           **cfg["rep_heavy"])
    nbytes = 2 * x.nbytes
    return dict(kernel="layernorm", size=f"{n}x{m} f32", jitdl_s=t_jd, numpy_s=t_np,
                metric="GB/s", jitdl=nbytes / t_jd / 1e9, numpy=nbytes / t_np / 1e9,
                ratio=t_np / t_jd, first_call_s=t_first, note="bytes = 1 read + 1 write",
                numpy_ref="(x - mean) / sqrt(var + eps)",
                jitdl_timeit_s=timeit_crosscheck(layernorm, x, 1e-5))


def bench_conv2d(cfg, rng):
    n, c, hw, f = cfg["conv"]
    x = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
    w = rng.standard_normal((f, c, 3, 3), dtype=np.float32)
    ref = np_conv2d(x.astype(np.float64), w.astype(np.float64))
    out, t_first = first_call(conv2d, x, w)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4 * np.sqrt(c * 9))
    t_jd, t_np = time_pair(lambda: conv2d(x, w), lambda: np_conv2d(x, w), **cfg["rep_heavy"])
    flops = 2.0 * n * f * hw * hw * c * 9
    return dict(kernel="conv2d", size=f"{n}x{c}x{hw}x{hw} * {f}x{c}x3x3 f32",
                jitdl_s=t_jd, numpy_s=t_np, metric="GFLOP/s", jitdl=flops / t_jd / 1e9,
                numpy=flops / t_np / 1e9, ratio=t_np / t_jd, first_call_s=t_first,
                numpy_ref="im2col (sliding_window_view) + matmul",
                jitdl_timeit_s=timeit_crosscheck(conv2d, x, w))


BENCHES = {"copy": bench_copy, "elementwise": bench_elementwise, "matmul": bench_matmul,
           "matmul_1000": bench_matmul_odd, "matmul_777": bench_matmul_odd2,
           "softmax": bench_softmax, "layernorm": bench_layernorm, "conv2d": bench_conv2d}

FULL = dict(vec=1 << 24, mm=1024, mm_odd=(1000, 1000, 1000), mm_odd2=(777, 513, 1025),
            sm=4096, ln=(4096, 4096), conv=(1, 64, 56, 64),
            rep=dict(warmup=3, repeat=20), rep_heavy=dict(warmup=3, repeat=10))
QUICK = dict(vec=1 << 20, mm=256, mm_odd=(100, 100, 100), mm_odd2=(77, 51, 103), sm=512,
             ln=(512, 512), conv=(1, 16, 28, 16),
             rep=dict(warmup=2, repeat=5), rep_heavy=dict(warmup=2, repeat=5))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    p.add_argument("--only", metavar="NAME",
                   help="comma-separated subset of: " + ", ".join(BENCHES))
    p.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "run.json"))
    p.add_argument("--warm-cache", action="store_true",
                   help="use the user's jitdl disk cache (first call may not compile)")
    args = p.parse_args(argv)
    names = list(BENCHES) if not args.only else [n.strip() for n in args.only.split(",")]
    unknown = [n for n in names if n not in BENCHES]
    if unknown:
        p.error(f"unknown kernel {unknown}; choose from {list(BENCHES)}")
    cfg = QUICK if args.quick else FULL
    rng = np.random.default_rng(0)

    rows, failed = [], []
    for name in names:
        print(f"[{name}] ...", flush=True)
        try:
            row = BENCHES[name](cfg, rng)
            row["jitdl_min_s"], row["numpy_min_s"] = LAST_MINIMA["jitdl"], LAST_MINIMA["numpy"]
            row["compile_s"] = row["first_call_s"] - row["jitdl_s"]
        except Exception as e:  # noqa: BLE001 - report and go on with the other kernels
            import traceback
            traceback.print_exc()
            row = dict(kernel=name, error=f"{type(e).__name__}: {e}")
            failed.append(name)
        rows.append(row)

    print()
    print_table(rows, [("kernel", "kernel", ""), ("size", "size", ""),
                       ("jitdl", "jitdl_s", "s"), ("numpy", "numpy_s", "s"),
                       ("metric", "metric", ""), ("jitdl", "jitdl", ""),
                       ("numpy", "numpy", ""), ("ratio", "ratio", ""),
                       ("first call", "first_call_s", "s")])
    for r in rows:
        if "ratio_to_copy" in r:
            print(f"\nelementwise: {r['jitdl']:.1f} GB/s = {r['ratio_to_copy']:.2f} x the "
                  f"copy bandwidth ({r['copy_gbs']:.1f} GB/s, best of jitdl copy and "
                  f"np.copyto); "
                  f"without out=: {r['jitdl_alloc_gbs']:.1f} GB/s")
        if "error" in r:
            print(f"\n{r['kernel']}: FAILED: {r['error']}")
    print("\nratio = jitdl throughput / NumPy throughput (> 1: jitdl faster)")

    write_json(args.json, dict(benchmark="run", quick=args.quick, machine=machine(),
                               cache_dir=os.environ.get("JITDL_CACHE_DIR"), results=rows))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
