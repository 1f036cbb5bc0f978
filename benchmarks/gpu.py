"""jitdl's CUDA target against cuBLAS, CuPy and the device's copy bandwidth, in one run.

    python benchmarks/gpu.py            # table + benchmarks/results/gpu.json
    python benchmarks/gpu.py --quick    # smaller sizes (a smoke run)

(a) SGEMM 4096^3: the automatic schedule's tiled matmul against cupy.matmul (cuBLAS,
    TF32 off: CUPY_TF32=0), in TFLOP/s.
(b) fused max(a * b + c, 0) on 64M floats against a device-to-device copy of one array
    (the bandwidth a kernel that reads three arrays and writes one can approach): GB/s
    moved (16 bytes per element), and the ratio to the copy's GB/s; then the same with a
    user schedule of float4 accesses (s.vectorize over 4 floats per thread).
(c) row softmax of an 8192 x 8192 float32 matrix against CuPy's (max, subtract, exp, sum,
    divide: unfused), in effective GB/s (8 bytes per element: one read, one write).
(d) whole-array sum of the 64M floats of (b), jd.numpy.sum on the CuPy array (its
    split reduction: parts over the multiprocessors, then their combination) against
    cupy.sum, in GB/s read; then the column sums of the same floats as 131072 x 512
    (a thread per part of a column) against cupy.sum(axis=0), and (c)'s softmax as
    jd.nn.softmax on the CuPy array (the op library, compiled for its row length), and
    the op library's kernel for rows of any length (a block per row, the row read from
    memory for each statistic: what rows whose length keeps changing run).
(e) launch overhead: y = x + 1 on 8 floats, the Function call (dispatch, allocation,
    launch), against a CuPy ElementwiseKernel doing the same; microseconds per call with
    the device synchronised after each batch.
Every kernel is checked against CuPy before it is timed. Timing: CUDA events around
`--repeat` launches, after a warm-up; the median of `--rounds` rounds, the two sides
alternating. Needs CuPy and an NVIDIA GPU; without them the script says so and exits.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

os.environ.setdefault("CUPY_TF32", "0")     # cuBLAS in true FP32, as jitdl computes

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import import_jitdl, machine, print_table, write_json  # noqa: E402

jd = import_jitdl()


@jd.compute
def sgemm(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute
def fused(A, B, C):
    Y[i] = max(A[i] * B[i] + C[i], 0.0)
    return Y


@jd.compute
def fused_vec(A, B, C):
    Y[i] = max(A[i] * B[i] + C[i], 0.0)
    return Y


@jd.schedule(fused_vec, target="cuda")
def _four_per_thread(s, cfg):
    """Four consecutive floats per thread as one vectorized loop: float4 loads and
    stores (where aligned, as CuPy's arrays are)."""
    (i,) = s["Y"].axis
    b, t = s.split(i, 4 * 256)
    t, v = s.split(t, 4)
    s.bind(b, "blockIdx.x")
    s.bind(t, "threadIdx.x")
    s.vectorize(v)


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def add1(X):
    Y[i] = X[i] + 1.0
    return Y


def gpu_time(cp, fn, repeat, rounds_out):
    """Seconds per call of fn() by CUDA events over `repeat` calls (after a warm-up)."""
    for _ in range(3):
        fn()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    cp.cuda.get_current_stream().synchronize()
    start.record()
    for _ in range(repeat):
        fn()
    stop.record()
    stop.synchronize()
    rounds_out.append(cp.cuda.get_elapsed_time(start, stop) / 1e3 / repeat)


def compare(cp, f_jd, f_ref, repeat, rounds):
    t_jd, t_ref = [], []
    for r in range(rounds):
        pair = ((f_jd, t_jd), (f_ref, t_ref)) if r % 2 == 0 else ((f_ref, t_ref), (f_jd, t_jd))
        for fn, out in pair:
            time.sleep(0.1)
            gpu_time(cp, fn, repeat, out)
    return statistics.median(t_jd), statistics.median(t_ref)


def host_time(cp, fn, calls, rounds):
    """Microseconds per call measured on the host, synchronising after each batch."""
    per = []
    for _ in range(rounds):
        for _ in range(100):
            fn()
        cp.cuda.get_current_stream().synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        cp.cuda.get_current_stream().synchronize()
        per.append((time.perf_counter() - t0) / calls)
    return statistics.median(per)


def check(name, got, want, rtol):
    import cupy as cp
    err = float(cp.max(cp.abs(got - want)) / (cp.max(cp.abs(want)) + 1e-30))
    if not err <= rtol:
        raise SystemExit(f"{name}: jitdl differs from the reference by {err:.3g} (relative)")
    return err


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                   "results", "gpu.json"))
    args = ap.parse_args()
    from jitdl.target.cuda import cupy_or_none
    cp = cupy_or_none()
    if cp is None:
        print("benchmarks/gpu.py: no GPU that CuPy can see (or no CuPy); nothing measured")
        return 0
    from jitdl.target.cuda import device
    dev = device()
    print(f"device: {dev}; CUDA runtime {dev.cuda_version}, NVRTC {dev.nvrtc_version}, "
          f"CuPy {cp.__version__}")
    rng = np.random.default_rng(0)
    rows = []
    n = 1024 if args.quick else 4096
    a = cp.asarray(rng.standard_normal((n, n), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((n, n), dtype=np.float32))
    t0 = time.perf_counter()
    c = sgemm(a, b)
    compile_s = time.perf_counter() - t0
    err = check("sgemm", c, cp.matmul(a, b), 1e-4)
    tj, tr = compare(cp, lambda: sgemm(a, b), lambda: cp.matmul(a, b), args.repeat, args.rounds)
    flop = 2.0 * n ** 3
    rows.append({"case": f"sgemm {n}^3 (TFLOP/s)", "jitdl": flop / tj / 1e12,
                 "reference": flop / tr / 1e12, "ratio": tr / tj, "vs": "cuBLAS",
                 "err": err, "compile_s": compile_s})

    m = (1 << 22) if args.quick else (1 << 26)
    x, y, z = (cp.asarray(rng.standard_normal(m, dtype=np.float32)) for _ in range(3))
    dst = cp.empty_like(x)
    err = check("fused", fused(x, y, z), cp.maximum(x * y + z, 0), 1e-6)
    tj, tr = compare(cp, lambda: fused(x, y, z), lambda: dst.__setitem__(Ellipsis, x),
                     args.repeat, args.rounds)
    rows.append({"case": f"max(a*b+c, 0) {m >> 20}M f32 (GB/s)", "jitdl": 16 * m / tj / 1e9,
                 "reference": 8 * m / tr / 1e9, "ratio": (16 * m / tj) / (8 * m / tr),
                 "vs": "device copy", "err": err})

    err = check("fused float4", fused_vec(x, y, z), cp.maximum(x * y + z, 0), 1e-6)
    tj, tr = compare(cp, lambda: fused_vec(x, y, z), lambda: dst.__setitem__(Ellipsis, x),
                     args.repeat, args.rounds)
    rows.append({"case": "the same, vectorize(4) schedule (GB/s)", "jitdl": 16 * m / tj / 1e9,
                 "reference": 8 * m / tr / 1e9, "ratio": (16 * m / tj) / (8 * m / tr),
                 "vs": "device copy", "err": err})

    import jitdl.numpy as jnp
    err = check("sum", jnp.sum(x), cp.sum(x, dtype=cp.float64), 1e-6)
    tj, tr = compare(cp, lambda: jnp.sum(x), lambda: cp.sum(x), args.repeat, args.rounds)
    rows.append({"case": f"sum of {m >> 20}M f32 (GB/s read)", "jitdl": 4 * m / tj / 1e9,
                 "reference": 4 * m / tr / 1e9, "ratio": tr / tj, "vs": "cupy.sum",
                 "err": err})

    cols = x.reshape(-1, 512)           # (131072, 512): 512 column sums of a tall array
    err = check("column sum", jnp.sum(cols, axis=0), cp.sum(cols, axis=0, dtype=cp.float64),
                1e-5)
    tj, tr = compare(cp, lambda: jnp.sum(cols, axis=0), lambda: cp.sum(cols, axis=0),
                     args.repeat, args.rounds)
    rows.append({"case": f"sum(axis=0) of {cols.shape[0]}x512 f32 (GB/s read)",
                 "jitdl": 4 * m / tj / 1e9, "reference": 4 * m / tr / 1e9, "ratio": tr / tj,
                 "vs": "cupy.sum", "err": err})

    r = 1024 if args.quick else 8192
    s = cp.asarray(rng.standard_normal((r, r), dtype=np.float32))

    def cupy_softmax():
        e = cp.exp(s - s.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    err = check("softmax", softmax(s), cupy_softmax(), 1e-5)
    tj, tr = compare(cp, lambda: softmax(s), cupy_softmax, args.repeat, args.rounds)
    rows.append({"case": f"softmax {r}^2 f32 (GB/s effective)", "jitdl": 8 * r * r / tj / 1e9,
                 "reference": 8 * r * r / tr / 1e9, "ratio": tr / tj, "vs": "CuPy", "err": err})
    err = check("jd.nn.softmax", jd.nn.softmax(s, dim=-1), cupy_softmax(), 1e-5)
    tj, tr = compare(cp, lambda: jd.nn.softmax(s, dim=-1), cupy_softmax, args.repeat,
                     args.rounds)
    rows.append({"case": f"jd.nn.softmax {r}^2 f32 (GB/s effective)",
                 "jitdl": 8 * r * r / tj / 1e9, "reference": 8 * r * r / tr / 1e9,
                 "ratio": tr / tj, "vs": "CuPy", "err": err})
    # the op library's kernel for rows whose length keeps changing (past 8 lengths): of
    # symbolic extents, a block per row, the row read for each statistic
    every = jd.compute(lambda X: jd.nn.softmax(X, dim=-1), dynamic=True)
    every._long_rows = True
    err = check("softmax, long rows", every(s), cupy_softmax(), 1e-5)
    tj, tr = compare(cp, lambda: every(s), cupy_softmax, args.repeat, args.rounds)
    rows.append({"case": f"jd.nn.softmax {r}^2, any row length (GB/s effective)",
                 "jitdl": 8 * r * r / tj / 1e9, "reference": 8 * r * r / tr / 1e9,
                 "ratio": tr / tj, "vs": "CuPy", "err": err})

    tiny = cp.asarray(rng.standard_normal(8, dtype=np.float32))
    kernel = cp.ElementwiseKernel("float32 x", "float32 y", "y = x + 1.0f", "jd_bench_add1")
    check("add1", add1(tiny), tiny + 1, 0)
    tj = host_time(cp, lambda: add1(tiny), 2000, args.rounds)
    tr = host_time(cp, lambda: kernel(tiny), 2000, args.rounds)
    rows.append({"case": "launch overhead, 8 floats (us)", "jitdl": tj * 1e6,
                 "reference": tr * 1e6, "ratio": tr / tj, "vs": "CuPy ElementwiseKernel"})

    print_table(rows, [("case", "case", ""), ("jitdl", "jitdl", ""),
                       ("reference", "reference", ""), ("vs", "vs", ""),
                       ("ratio (ref time / jitdl time)", "ratio", "")])
    write_json(args.json, {"machine": {**machine(), "gpu": str(dev)}, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
