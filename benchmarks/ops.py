"""jd.numpy / jd.nn against NumPy, in the same run: each op family eagerly at three sizes
(1e3, 1e5, 1e7 elements or equivalent), and fused composites written with jd.numpy inside
one @jd.compute definition against the same NumPy code.

    python benchmarks/ops.py             # everything
    python benchmarks/ops.py --quick     # smaller sizes, fewer repeats (smoke test)
    python benchmarks/ops.py --only exp,softmax

Each result is checked against NumPy in float64 before it is timed. Both sides are timed
in their own blocks after a pause, alternating (benchmarks/_common.time_pair); a block of
a small op runs it many times and counts the mean per call. ratio = NumPy's time /
jitdl's (above 1: jitdl is faster). Where both sides run on the calling thread alone
(JITDL_NUM_THREADS=1 and NumPy's BLAS at one thread: OPENBLAS_NUM_THREADS, or else
OMP_NUM_THREADS, or MKL_NUM_THREADS=1), the time is that thread's CPU time
(time.thread_time), which other processes' load does not inflate; else wall-clock time.
The kernel cache goes to a fresh temporary directory unless --keep is given. Writes
benchmarks/results/ops.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

if "--keep" not in sys.argv:          # before jitdl reads its settings
    os.environ["JITDL_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitdl-bench-ops-")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import import_jitdl, machine, print_table, time_pair, write_json  # noqa: E402

jd = import_jitdl()
jnp = jd.numpy


def batched(fn, seconds=0.02):
    """fn repeated enough times for one timed block to last about `seconds` (a call of a
    microsecond cannot be timed alone); returns (block function, calls per block)."""
    fn()
    n, t0 = 1, time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    n = max(1, int(seconds / once))

    def block():
        for _ in range(n):
            fn()
    return block, n


def single_threaded():
    """Whether jitdl's kernels and NumPy's BLAS both run on the calling thread alone."""
    env = os.environ.get
    blas = env("OPENBLAS_NUM_THREADS", env("OMP_NUM_THREADS")) == "1" or \
        env("MKL_NUM_THREADS") == "1"
    return jd.config.settings.num_threads == 1 and blas


CLOCK = time.thread_time if single_threaded() else time.perf_counter


def compare(f_jd, f_np, repeat):
    b_jd, n_jd = batched(f_jd)
    b_np, n_np = batched(f_np)
    t_jd, t_np = time_pair(b_jd, b_np, repeat=repeat, clock=CLOCK)
    return t_jd / n_jd, t_np / n_np


def rand(shape, dtype, rng, positive=False):
    x = rng.standard_normal(shape)
    return (np.abs(x) + 0.1 if positive else x).astype(dtype)


def check(got, want, rtol):
    """Within rtol of the float64 reference, relative to its largest magnitude (a float32
    product over thousands of terms differs from float64 by more than rtol per element)."""
    want = np.asarray(want, np.float64)
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol,
                               atol=rtol * scale)


# -- eager op families -----------------------------------------------------------------------
def eager_cases(sizes, rng):
    """(family, op, size label, jitdl call, NumPy call, reference)."""
    out = []
    for n in sizes:
        a = rand(n, np.float32, rng)
        b = rand(n, np.float32, rng)
        x = rand(n, np.float64, rng)
        y = rand(n, np.float64, rng)
        label = f"{n:.0e}"
        out.append(("elementwise", "add f64", label, lambda x=x, y=y: jnp.add(x, y),
                    lambda x=x, y=y: np.add(x, y), np.add(x, y)))
        out.append(("elementwise", "exp f32", label, lambda a=a: jnp.exp(a),
                    lambda a=a: np.exp(a), np.exp(a.astype(np.float64))))
        out.append(("elementwise", "maximum f32", label, lambda a=a, b=b: jnp.maximum(a, b),
                    lambda a=a, b=b: np.maximum(a, b), np.maximum(a, b)))
        out.append(("elementwise", "sin f32", label, lambda a=a: jnp.sin(a),
                    lambda a=a: np.sin(a), np.sin(a.astype(np.float64))))
        out.append(("elementwise", "less f64", label, lambda x=x, y=y: jnp.less(x, y),
                    lambda x=x, y=y: np.less(x, y), np.less(x, y)))
        rows = max(1, n // 1000)
        m = rand((rows, n // rows), np.float32, rng)
        out.append(("reduction", "sum f32 (all)", label, lambda m=m: jnp.sum(m),
                    lambda m=m: np.sum(m), m.astype(np.float64).sum()))
        out.append(("reduction", "max f32 axis=1", label, lambda m=m: jnp.max(m, axis=1),
                    lambda m=m: np.max(m, axis=1), m.max(axis=1)))
        out.append(("reduction", "argmax f32 axis=1", label,
                    lambda m=m: jnp.argmax(m, axis=1), lambda m=m: np.argmax(m, axis=1),
                    np.argmax(m, axis=1)))
        out.append(("reduction", "mean f32 axis=0", label, lambda m=m: jnp.mean(m, axis=0),
                    lambda m=m: np.mean(m, axis=0), m.astype(np.float64).mean(axis=0)))
        out.append(("manipulation", "concatenate f32", label,
                    lambda m=m: jnp.concatenate([m, m], axis=1),
                    lambda m=m: np.concatenate([m, m], axis=1),
                    np.concatenate([m, m], axis=1)))
        out.append(("manipulation", "pad f32", label, lambda m=m: jnp.pad(m, 2),
                    lambda m=m: np.pad(m, 2), np.pad(m, 2)))
        # (a roll is two contiguous pieces per row: split at the wrap, no gather)
        out.append(("manipulation", "roll f32 (flat) shift 7", label,
                    lambda m=m: jnp.roll(m, 7), lambda m=m: np.roll(m, 7), np.roll(m, 7)))
        out.append(("manipulation", "roll f32 axis=1 shift -3", label,
                    lambda m=m: jnp.roll(m, -3, axis=1), lambda m=m: np.roll(m, -3, axis=1),
                    np.roll(m, -3, axis=1)))
        side = int(round(np.sqrt(n)))
        p = rand((side, side), np.float32, rng)
        q = rand((side, side), np.float32, rng)
        out.append(("linalg", f"matmul f32 {side}x{side}", label,
                    lambda p=p, q=q: jnp.matmul(p, q), lambda p=p, q=q: np.matmul(p, q),
                    p.astype(np.float64) @ q))
        # (a power-of-two row pitch: a register tile's rows of A share L1 sets unpacked)
        side2 = 2 ** int(np.log2(np.sqrt(n)))
        p2, q2 = rand((side2, side2), np.float32, rng), rand((side2, side2), np.float32, rng)
        out.append(("linalg", f"matmul f32 {side2}x{side2}", label,
                    lambda p=p2, q=q2: jnp.matmul(p, q), lambda p=p2, q=q2: np.matmul(p, q),
                    p2.astype(np.float64) @ q2))
        # (a.T read in its memory order; a strided view passed twice, copied once)
        out.append(("manipulation", "copy f32 a.T", label, lambda m=m: jnp.copy(m.T),
                    lambda m=m: np.copy(m.T), m.T))
        v = x.reshape(rows, -1)[:, ::2]
        out.append(("elementwise", "multiply f64 v * v (v[:, ::2])", label,
                    lambda v=v: jnp.multiply(v, v), lambda v=v: np.multiply(v, v), v * v))
        out.append(("nn", "softmax f32 rows", label, lambda m=m: jd.nn.softmax(m, dim=1),
                    lambda m=m: np_softmax(m), np_softmax(m.astype(np.float64))))
        # convolutions against im2col + BLAS (NCHW, 32 channels in and out, n input
        # elements): a 3 x 3 of stride 2 (its input read with the stride) and a 1 x 1
        side = max(6, int(round(np.sqrt(n / 32))))
        img = rand((1, 32, side, side), np.float32, rng)
        for ks, st, pd in ((3, 2, 1), (1, 1, 0)):
            wt = rand((32, 32, ks, ks), np.float32, rng)
            out.append(("nn", f"conv2d f32 {ks}x{ks} stride {st} 32x{side}x{side}", label,
                        lambda x=img, w=wt, st=st, pd=pd: jd.nn.conv2d(x, w, stride=st,
                                                                       padding=pd),
                        lambda x=img, w=wt, st=st, pd=pd: np_conv2d(x, w, st, pd),
                        np_conv2d(img.astype(np.float64), wt.astype(np.float64), st, pd)))
    return out


def np_conv2d(x, w, stride, pad):
    """NCHW cross-correlation as im2col (one copy of the windows) and one BLAS matmul."""
    n, c = x.shape[:2]
    f, _, r, q = w.shape
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad))) if pad else x
    win = np.lib.stride_tricks.sliding_window_view(x, (r, q), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]
    ho, wo = win.shape[2:4]
    cols = win.transpose(1, 4, 5, 0, 2, 3).reshape(c * r * q, n * ho * wo)
    return (w.reshape(f, -1) @ cols).reshape(f, n, ho, wo).transpose(1, 0, 2, 3)


def np_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# -- fused composites ------------------------------------------------------------------------
@jd.compute
def softmax(X):
    e = jnp.exp(X - jnp.max(X, axis=1, keepdims=True))
    return e / jnp.sum(e, axis=1, keepdims=True)


@jd.compute
def layer_norm(X, w, b):
    mu = jnp.mean(X, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(X - mu), axis=-1, keepdims=True)
    return (X - mu) / jnp.sqrt(var + 1e-5) * w + b


@jd.compute
def gelu_linear(X, W, b):
    h = jnp.matmul(X, W) + b
    return 0.5 * h * (1.0 + jnp.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))


@jd.compute
def attention(Q, K, V):
    s = jnp.matmul(Q, jnp.transpose(K, (0, 2, 1))) * 0.125
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), V)


def np_layer_norm(X, w, b):
    mu = np.mean(X, axis=-1, keepdims=True)
    var = np.mean(np.square(X - mu), axis=-1, keepdims=True)
    return (X - mu) / np.sqrt(var + 1e-5) * w + b


def np_gelu_linear(X, W, b):
    h = np.matmul(X, W) + b
    return 0.5 * h * (1.0 + np.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))


def np_attention(Q, K, V):
    s = np.matmul(Q, np.transpose(K, (0, 2, 1))) * 0.125
    e = np.exp(s - np.max(s, axis=-1, keepdims=True))
    return np.matmul(e / np.sum(e, axis=-1, keepdims=True), V)


def fused_cases(quick, rng):
    """Each composite at three sizes (output elements near 1e3, 1e5 and 1e6-1e7; the
    two smaller with --quick): a layer of a small model to a large one."""
    out = []
    for rows, cols in ((8, 128), (128, 1024), (4096, 1024))[:2 if quick else 3]:
        X = rand((rows, cols), np.float32, rng)
        w, b = rand(cols, np.float32, rng), rand(cols, np.float32, rng)
        out += [("softmax", f"{rows}x{cols} f32", softmax, (X,), np_softmax),
                ("layer_norm", f"{rows}x{cols} f32", layer_norm, (X, w, b), np_layer_norm)]
    for n, k, m in ((16, 64, 64), (256, 256, 512), (512, 1024, 1024))[:2 if quick else 3]:
        A, W, bias = rand((n, k), np.float32, rng), rand((k, m), np.float32, rng) * 0.05, \
            rand(m, np.float32, rng)
        out.append(("gelu(x @ W + b)", f"{n}x{k} @ {k}x{m} f32", gelu_linear, (A, W, bias),
                    np_gelu_linear))
    for bh, seq in ((1, 16), (4, 128), (8, 512))[:2 if quick else 3]:
        Q, K, V = (rand((bh, seq, 64), np.float32, rng) for _ in range(3))
        out.append(("attention", f"{bh}x{seq}x64 f32", attention, (Q, K, V), np_attention))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated op or composite names")
    ap.add_argument("--keep", action="store_true", help="use the user's kernel cache")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "ops.json"))
    args = ap.parse_args()
    only = [s for s in args.only.split(",") if s]
    rng = np.random.default_rng(0)
    sizes = (1000, 100_000) if args.quick else (1000, 100_000, 10_000_000)
    repeat = 5 if args.quick else 11
    info = machine()
    print(f"CPU: {info.get('cpu')}, {info['cpu_count']} cores; jitdl threads: "
          f"{jd.config.settings.num_threads}; clock: {CLOCK.__name__}")

    eager = []
    for family, op, size, f_jd, f_np, ref in eager_cases(sizes, rng):
        if only and not any(o in op for o in only):
            continue
        try:
            check(f_jd(), ref, 1e-4)
        except Exception as e:          # an op not built, or wrong: say so, go on
            eager.append({"family": family, "op": op, "size": size,
                          "error": f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"})
            print(f"{op} {size}: {eager[-1]['error']}")
            continue
        t_jd, t_np = compare(f_jd, f_np, repeat)
        eager.append({"family": family, "op": op, "size": size, "jitdl_s": t_jd,
                      "numpy_s": t_np, "ratio": t_np / t_jd})
    print("\nEager calls on arrays (ratio = NumPy time / jitdl time)")
    print_table(eager, [("family", "family", ""), ("op", "op", ""), ("elements", "size", ""),
                        ("jitdl", "jitdl_s", "s"), ("NumPy", "numpy_s", "s"),
                        ("ratio", "ratio", "")])

    fused = []
    for name, size, f, inputs, ref in fused_cases(args.quick, rng):
        if only and name not in only:
            continue
        try:
            check(f(*inputs), ref(*(a.astype(np.float64) for a in inputs)), 1e-3)
        except Exception as e:
            fused.append({"composite": name, "size": size,
                          "error": f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"})
            print(f"{name}: {fused[-1]['error']}")
            continue
        t_jd, t_np = compare(lambda: f(*inputs), lambda: ref(*inputs), repeat)
        fused.append({"composite": name, "size": size, "jitdl_s": t_jd, "numpy_s": t_np,
                      "ratio": t_np / t_jd})
    print("\nFused composites written with jd.numpy inside @jd.compute, against the same "
          "NumPy code")
    print_table(fused, [("composite", "composite", ""), ("size", "size", ""),
                        ("jitdl", "jitdl_s", "s"), ("NumPy", "numpy_s", "s"),
                        ("ratio", "ratio", "")])
    write_json(args.out, {"machine": info, "threads": jd.config.settings.num_threads,
                          "clock": CLOCK.__name__, "quick": args.quick, "eager": eager,
                          "fused": fused})


if __name__ == "__main__":
    main()
