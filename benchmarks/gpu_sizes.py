"""SGEMM at several sizes (default schedule) against cuBLAS, and jd.nn.conv2d at five
ResNet-like shapes against cuDNN (through PyTorch, TF32 off, when it is installed): one
line per case.

    python benchmarks/gpu_sizes.py

Needs CuPy and an NVIDIA GPU. Timing: CUDA events around 10 calls after a warm-up, the
median of 5 such blocks; results checked against cuBLAS / cuDNN first."""
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("CUPY_TF32", "0")
try:
    import cupy as cp
    cp.cuda.runtime.getDeviceCount()
except Exception:       # no CuPy, or no GPU it can see
    print("benchmarks/gpu_sizes.py: no GPU that CuPy can see (or no CuPy); nothing measured")
    sys.exit(0)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import import_jitdl  # noqa: E402

jd = import_jitdl()



def gpu_time(fn, rep=10):
    """Median seconds per call over 5 blocks of `rep` calls, timed with CUDA events."""
    fn()
    cp.cuda.get_current_stream().synchronize()
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for _ in range(5):
        start.record()
        for _ in range(rep):
            fn()
        stop.record()
        stop.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, stop) / rep / 1e3)
    return statistics.median(times)


def rel_err(got, want):
    err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    if not err < 1e-4:
        raise SystemExit(f"jitdl differs from the reference by {err:.3g} (relative)")
    return err


@jd.compute
def sgemm(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


def main():
    rng = np.random.default_rng(0)
    for (m, k, n) in [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 4096),
                      (3000, 2000, 1000), (8192, 8192, 8192)]:
        a = cp.asarray(rng.standard_normal((m, k), dtype=np.float32))
        b = cp.asarray(rng.standard_normal((k, n), dtype=np.float32))
        err = rel_err(cp.asnumpy(sgemm(a, b)), cp.asnumpy(a @ b))
        tj, tr = gpu_time(lambda: sgemm(a, b)), gpu_time(lambda: cp.matmul(a, b))
        flop = 2 * m * n * k
        print(f"sgemm {m}x{k}x{n}: jitdl {flop / tj / 1e12:5.1f} TFLOP/s, cuBLAS "
              f"{flop / tr / 1e12:5.1f}, ratio {tr / tj:.2f}, err {err:.1e}", flush=True)
    try:
        import torch
    except ImportError:
        print("conv2d: no PyTorch here to compare with cuDNN")
        return
    torch.backends.cudnn.allow_tf32 = False
    # (batch, channels, image side, filters): 3x3 kernels, padding 1, as in ResNets
    for (nb, c, h, f) in [(16, 64, 56, 128), (32, 128, 28, 256), (8, 256, 14, 512),
                          (16, 3, 224, 64), (64, 64, 56, 64)]:
        x = rng.standard_normal((nb, c, h, h), dtype=np.float32)
        w = rng.standard_normal((f, c, 3, 3), dtype=np.float32)
        xc, wc = cp.asarray(x), cp.asarray(w)
        t0 = time.perf_counter()
        y = jd.nn.conv2d(xc, wc, padding=1)
        cp.cuda.Device().synchronize()
        first = time.perf_counter() - t0
        xt, wt = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
        err = rel_err(cp.asnumpy(y), torch.nn.functional.conv2d(xt, wt, padding=1).cpu().numpy())
        tj = gpu_time(lambda: jd.nn.conv2d(xc, wc, padding=1))
        tr = gpu_time(lambda: torch.nn.functional.conv2d(xt, wt, padding=1))
        flop = 2 * nb * f * h * h * c * 9
        print(f"conv2d {nb}x{c}x{h}x{h} * {f}x{c}x3x3: jitdl {flop / tj / 1e12:.2f} TFLOP/s "
              f"({tj * 1e3:.2f} ms), cuDNN fp32 {flop / tr / 1e12:.2f} ({tr * 1e3:.2f} ms), "
              f"ratio {tr / tj:.2f}, err {err:.1e}, first call {first:.2f} s", flush=True)

if __name__ == "__main__":
    main()
