"""The CUDA C jitdl generates, run on the CPU by the emulator (tests/_cuda_emu.py) through
jitdl's CUDA host runtime (jitdl/runtime/cuda.py with the emulated device of
tests/_emu_backend.py), compared with NumPy in float64: what no test can check on a
machine without a GPU otherwise. The emulator runs each CUDA thread as a fiber (barriers,
warp shuffles, shared memory poisoned per block, checked indices), so a missing barrier, a
wrong shuffle, a thread that skips a barrier or an out-of-bounds index fails here.

The first tests check the emulator itself on hand-written CUDA C."""
import logging
import re
import shutil
import time
import types

import numpy as np
import pytest

import jitdl as jd
from jitdl import nn
from jitdl import numpy as jnp
from jitdl.runtime import cuda as cuda_runtime

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="no g++: the CUDA emulator compiles CUDA C with it")

import _cuda_emu as emu                                         # noqa: E402
from _emu_backend import DeviceArray, EmulatedDevice            # noqa: E402

F32, F64 = np.float32, np.float64


@pytest.fixture(scope="module")
def dev():
    saved = list(cuda_runtime._backend)
    device = EmulatedDevice(emu)
    cuda_runtime._backend[:] = [device]
    yield device
    cuda_runtime._backend[:] = saved


def on_gpu(dev, f, *args):
    """f called with its arrays on the emulated device; the results copied back."""
    before = dev.launches
    got = f(*[DeviceArray(np.array(a)) if isinstance(a, np.ndarray) else a for a in args])
    assert dev.launches > before or all(
        np.asarray(a).size == 0 for a in args if isinstance(a, np.ndarray))
    if isinstance(got, tuple):
        return tuple(np.array(g.host) for g in got)
    return np.array(got.host)


def close(got, want, rtol=2e-5, atol=1e-6):
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(np.asarray(got, F64), want, rtol=rtol, atol=atol)


# ---------------------------------------------------------------------------------------
# the emulator on hand-written CUDA C
# ---------------------------------------------------------------------------------------

BLOCK_SUM = r"""
extern "C" __global__ void __launch_bounds__(256) block_sum(const float* __restrict__ x,
    float* __restrict__ out, const long long n) {
  __shared__ float part[256];
  long long i = (long long)blockIdx.x * 256 + threadIdx.x;
  part[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int s = 128; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    SYNC
  }
  if (threadIdx.x == 0) out[blockIdx.x] = part[0];
}
"""


def test_emulator_barriers_order_the_block(rng):
    x = rng.standard_normal(1000).astype(F32)
    out = np.full(4, np.nan, F32)
    emu.compile(BLOCK_SUM.replace("SYNC", "__syncthreads();")).launch(
        "block_sum", (4, 1, 1), (256, 1, 1), 0, [x, out, 1000])
    close(out, np.pad(x.astype(F64), (0, 24)).reshape(4, 256).sum(1), rtol=1e-5, atol=1e-5)
    # without the barrier in the loop thread 0 runs ahead and reads what is not summed yet
    out[:] = np.nan
    emu.compile(BLOCK_SUM.replace("SYNC", "")).launch(
        "block_sum", (4, 1, 1), (256, 1, 1), 0, [x, out, 1000])
    assert not np.allclose(out, np.pad(x, (0, 24)).reshape(4, 256).sum(1), atol=1e-3)


def test_emulator_reports_barrier_divergence():
    src = r"""
extern "C" __global__ void early_exit(float* __restrict__ y) {
  if (threadIdx.x < 40) return;
  __syncthreads();
  y[threadIdx.x] = 1.0f;
}
extern "C" __global__ void two_barriers(float* __restrict__ y) {
  if (threadIdx.x & 1)
    __syncthreads();
  else
    __syncthreads();
  y[threadIdx.x] = 1.0f;
}
"""
    m = emu.compile(src)
    y = np.zeros(64, F32)
    with pytest.raises(emu.EmulatorError, match=r"thread 0 finished while 24 thread\(s\) "
                                                r"wait at __syncthreads"):
        m.launch("early_exit", (1, 1, 1), (64, 1, 1), 0, [y])
    with pytest.raises(emu.EmulatorError, match="different __syncthreads"):
        m.launch("two_barriers", (1, 1, 1), (64, 1, 1), 0, [y])


def test_emulator_shuffles_follow_cuda():
    src = r"""
extern "C" __global__ void shuffles(const int* __restrict__ x, int* __restrict__ y) {
  int v = x[threadIdx.x];
  y[threadIdx.x] = __shfl_down_sync(0xffffffffu, v, 3, 16);
  y[64 + threadIdx.x] = __shfl_sync(0xffffffffu, v, 5, 8);
  y[128 + threadIdx.x] = __shfl_xor_sync(0xffffffffu, v, 9, 32);
}
extern "C" __global__ void partial(const int* __restrict__ x, int* __restrict__ y) {
  if (threadIdx.x < 16) y[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 1, 32);
}
extern "C" __global__ void odd_width(const int* __restrict__ x, int* __restrict__ y) {
  y[threadIdx.x] = __shfl_down_sync(0xffffffffu, x[threadIdx.x], 1, 20);
}
"""
    m = emu.compile(src)
    x = np.arange(64, dtype=np.int32) * 7
    y = np.zeros(192, np.int32)
    m.launch("shuffles", (1, 1, 1), (64, 1, 1), 0, [x, y])
    lane = np.arange(64)
    down = np.where(lane % 16 + 3 < 16, lane + 3, lane)
    np.testing.assert_array_equal(y[:64], x[down])
    np.testing.assert_array_equal(y[64:128], x[lane // 8 * 8 + 5])
    np.testing.assert_array_equal(y[128:], x[lane ^ 9])
    with pytest.raises(emu.EmulatorError, match="warp shuffle"):
        m.launch("partial", (1, 1, 1), (32, 1, 1), 0, [x, y])
    with pytest.raises(emu.EmulatorError, match="not a power of two"):
        m.launch("odd_width", (1, 1, 1), (32, 1, 1), 0, [x, y])


def test_emulator_checks_indices_and_launches():
    src = r"""
extern "C" __global__ void __launch_bounds__(128) oob(const double* __restrict__ x,
    double* __restrict__ y, const long long n) {
  __shared__ double tile[129];
  tile[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  y[threadIdx.x] = tile[(threadIdx.x + n) % 130];
}
"""
    m = emu.compile(src)
    x, y = np.ones(128), np.zeros(128)
    m.launch("oob", (1, 1, 1), (128, 1, 1), 0, [x, y, 1])
    np.testing.assert_array_equal(y[:127], 1.0)
    assert np.isnan(y[127])                 # shared memory not written: the poison
    with pytest.raises(emu.EmulatorError, match=r"a shared array\[129\].*thread \(127, 0, 0\)"):
        m.launch("oob", (1, 1, 1), (128, 1, 1), 0, [x, y, 2])
    with pytest.raises(emu.EmulatorError, match=r"x\[100\], x has 100 element.*thread \(100, 0, 0\)"):
        m.launch("oob", (1, 1, 1), (128, 1, 1), 0, [np.ones(100), y, 1])
    with pytest.raises(emu.EmulatorError, match=r"parameter n \(const long long\): expected a int64 "
                                                r"scalar, got float32"):
        m.launch("oob", (1, 1, 1), (128, 1, 1), 0, [x, y, np.float32(1)])
    with pytest.raises(emu.EmulatorError, match="expected an array of float64, got float32"):
        m.launch("oob", (1, 1, 1), (128, 1, 1), 0, [x.astype(F32), y, 1])
    with pytest.raises(emu.EmulatorError, match=r"__launch_bounds__\(128\)"):
        m.launch("oob", (1, 1, 1), (256, 1, 1), 0, [x, y, 1])
    with pytest.raises(emu.EmulatorError, match="1032 bytes of static shared memory plus "
                                                "48200 dynamic"):
        m.launch("oob", (1, 1, 1), (128, 1, 1), 48200, [x, y, 1])


def test_emulator_is_fast_enough(rng):
    src = r"""
extern "C" __global__ void __launch_bounds__(256) axpy(const float* __restrict__ x,
    float* __restrict__ y, const float a, const long long n) {
  long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
  __syncthreads();
}
"""
    m = emu.compile(src)
    n = 100_000
    x, y = rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)
    want = 2 * x.astype(F64) + y
    t = time.perf_counter()
    m.launch("axpy", ((n + 255) // 256, 1, 1), (256, 1, 1), 0, [x, y, np.float32(2), n])
    took = time.perf_counter() - t
    close(y, want, rtol=1e-6)
    assert took < 0.5, took


# ---------------------------------------------------------------------------------------
# jitdl's kernels
# ---------------------------------------------------------------------------------------

@jd.compute
def fused(A, B):
    return jd.tensor(A.shape, lambda i, j: jd.exp(A[i, j]) * B[i, j] + 1, name="C")


@jd.compute(dynamic=True)
def dyn_fused(A, B):
    return jnp.sqrt(jnp.abs(A)) + B * 2


@jd.compute
def bcast(A, B):
    return jnp.add(A, B) * jnp.float32(0.5)


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def row_sum_max(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    S = jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="S")
    k2 = jd.reduce_axis(m, name="k2")
    M = jd.tensor((n,), lambda i: jd.max(X[i, k2], axis=k2), name="M")
    return S, M


@jd.compute
def row_max(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.max(X[i, k], axis=k), name="M")


@jd.compute
def row_min(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.min(X[i, k], axis=k), name="M")


@jd.compute
def col_reduce(X):
    return jnp.sum(X, axis=0), jnp.max(X, axis=0)


@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute(dynamic=True)
def dyn_matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute
def bmm(A, B):
    return jnp.matmul(A, B)


@jd.compute
def conv(X, W):
    return nn.conv2d(X, W, padding=1)


@jd.compute
def arg_max_min(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    AM = jd.tensor((n,), lambda i: jd.argmax(X[i, k], axis=k), name="AM")
    AN = jd.tensor((n,), lambda i: jd.argmin(X[i, k], axis=k), name="AN")
    return AM, AN


@jd.compute
def div_mod(A, B):
    Q[i] = A[i] // B[i]
    R[i] = A[i] % B[i]
    return Q, R


@jd.compute
def fmax_fmin(A, B):
    return jnp.maximum(A, B), jnp.minimum(A, B)


def test_elementwise_static(dev, rng):
    for shape in [(300, 347), (3, 5)]:
        a, b = rng.standard_normal(shape).astype(F32), rng.standard_normal(shape).astype(F32)
        close(on_gpu(dev, fused, a, b), np.exp(a.astype(F64)) * b + 1, rtol=1e-5)


def test_elementwise_dynamic(dev, rng):
    for shape in [(3, 7), (100, 37), (1, 1), (2, 40000)]:
        a, b = rng.standard_normal(shape), rng.standard_normal(shape)
        close(on_gpu(dev, dyn_fused, a, b), np.sqrt(np.abs(a)) + b * 2, rtol=1e-12)


def test_broadcasting(dev, rng):
    a = rng.standard_normal((6, 1, 5)).astype(F32)
    b = rng.standard_normal((4, 1)).astype(F32)
    close(on_gpu(dev, bcast, a, b), (a.astype(F64) + b) * 0.5, rtol=1e-6)


@pytest.mark.parametrize("shape,dtype", [((37, 300), F32), ((5, 3000), F32), ((64, 20), F32),
                                         ((6, 1000), F64)])
def test_softmax(dev, rng, shape, dtype):
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    if shape[1] >= 128:
        src = softmax.cuda_source(x)
        assert "__shfl_down_sync" in src and "__shared__" in src
    got = on_gpu(dev, softmax, x)
    x64 = x.astype(F64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    tol = 2e-5 if dtype == F32 else 1e-12
    close(got, e / e.sum(axis=1, keepdims=True), rtol=tol, atol=tol * 1e-2)


def test_softmax_long_rows_in_shared_memory(dev, rng):
    """A row of 8000 float32 (31 KiB) is copied to shared memory: the launch must not ask
    for that much again as dynamic shared memory (48 KiB per block in all)."""
    x = rng.standard_normal((3, 8000)).astype(F32)
    got = on_gpu(dev, softmax, x)
    x64 = x.astype(F64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    close(got, e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-9)


@jd.compute
def softmax_of_a_doubling_chain(X):
    y = X
    for _ in range(8):
        y = jnp.sin(y * 1.1) + jnp.cos(y + 0.5)
    return nn.softmax(y, -1)


def test_softmax_of_a_stored_stage_keeps_a_block_per_row(dev, rng):
    """The inline-size rule stores a stage of the chain, which the row fusion computed at
    the softmax's rows: it runs as its own grid-stride kernel and the row statistics still
    get a block of threads per row (they ran one thread per row, 37 threads in all)."""
    x = rng.standard_normal((37, 300)).astype(F32)
    src = softmax_of_a_doubling_chain.cuda_source(x)
    assert "__shfl_down_sync" in src and src.count("__global__") == 2
    y = x.astype(F64)
    for _ in range(8):
        y = np.sin(y * 1.1) + np.cos(y + 0.5)
    e = np.exp(y - y.max(axis=1, keepdims=True))
    close(on_gpu(dev, softmax_of_a_doubling_chain, x), e / e.sum(axis=1, keepdims=True),
          rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("shape", [(9, 45), (5, 100), (3, 1000), (70, 33)])
def test_row_sum_and_max(dev, rng, shape):
    x = rng.standard_normal(shape)
    s, m = on_gpu(dev, row_sum_max, x)
    close(s, x.sum(axis=1), rtol=1e-12, atol=1e-12)
    close(m, x.max(axis=1), rtol=0, atol=0)
    xi = rng.integers(-1000, 1000, shape).astype(np.int32)
    si, mi = on_gpu(dev, row_sum_max, xi)
    np.testing.assert_array_equal(si, xi.sum(axis=1))
    np.testing.assert_array_equal(mi, xi.max(axis=1))


def test_column_reductions(dev, rng):
    x = rng.standard_normal((50, 40)).astype(F32)
    s, m = on_gpu(dev, col_reduce, x)
    close(s, x.astype(F64).sum(axis=0), rtol=1e-5, atol=1e-5)
    close(m, x.max(axis=0), rtol=0, atol=0)


@pytest.mark.parametrize("shapes", [((64, 64), (64, 64)), ((100, 37), (37, 53)),
                                    ((130, 200), (200, 70))])
def test_matmul_tiled(dev, rng, shapes):
    a = rng.standard_normal(shapes[0]).astype(F32)
    b = rng.standard_normal(shapes[1]).astype(F32)
    assert "__shared__" in matmul.cuda_source(a, b)
    want = a.astype(F64) @ b
    close(on_gpu(dev, matmul, a, b), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_matmul_batched(dev, rng):
    a = rng.standard_normal((3, 20, 30)).astype(F32)
    b = rng.standard_normal((3, 30, 17)).astype(F32)
    want = a.astype(F64) @ b
    close(on_gpu(dev, bmm, a, b), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_conv2d(dev, rng):
    x = rng.standard_normal((2, 3, 12, 11)).astype(F32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(F32)
    x64 = np.pad(x.astype(F64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 12, 11))
    for dy in range(3):
        for dx in range(3):
            want += np.einsum("nchw,oc->nohw", x64[:, :, dy:dy + 12, dx:dx + 11],
                              w[:, :, dy, dx].astype(F64))
    close(on_gpu(dev, conv, x, w), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("xs,ws,stride", [((2, 40, 12, 12), (72, 40, 3, 3), 1),
                                          ((1, 8, 17, 13), (24, 8, 3, 3), 2)])
def test_conv2d_tiled_with_partial_tiles(dev, rng, xs, ws, stride):
    """conv2d tiled like a matmul where the tiles do not divide the output (its threads
    accumulate whole tiles from the block's copies, only the stores guarded): shared
    memory is poisoned per block, so a read outside what the block copied shows."""
    x, w = rng.standard_normal(xs).astype(F32), rng.standard_normal(ws).astype(F32)
    f = jd.compute(lambda X, W: nn.conv2d(X, W, stride=stride, padding=1))
    oh, ow = (xs[2] + 2 - 3) // stride + 1, (xs[3] + 2 - 3) // stride + 1
    xp = np.pad(x.astype(F64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((xs[0], ws[0], oh, ow))
    for dy in range(3):
        for dx in range(3):
            want += np.einsum("nchw,oc->nohw", xp[:, :, dy:dy + stride * (oh - 1) + 1:stride,
                                                  dx:dx + stride * (ow - 1) + 1:stride],
                              w[:, :, dy, dx].astype(F64))
    assert "__shared__" in f.cuda_source(x, w)
    close(on_gpu(dev, f, x, w), want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_argmax_argmin(dev, rng):
    x = rng.integers(0, 4, (9, 13)).astype(np.int32)          # many ties: the first wins
    am, an = on_gpu(dev, arg_max_min, x)
    np.testing.assert_array_equal(am, np.argmax(x, axis=1))
    np.testing.assert_array_equal(an, np.argmin(x, axis=1))
    xf = rng.standard_normal((5, 300)).astype(F32)
    am, an = on_gpu(dev, arg_max_min, xf)
    np.testing.assert_array_equal(am, np.argmax(xf, axis=1))
    np.testing.assert_array_equal(an, np.argmin(xf, axis=1))


@jd.compute(dynamic=True)
def whole_arg_max_min(X):
    return jd.numpy.argmax(X), jd.numpy.argmin(X)


@pytest.mark.parametrize("n", [7, 512, 1500, 5000])
def test_whole_array_argmax_argmin_in_blocks(dev, rng, n):
    """A 1-d argmax of a symbolic size reads x once in blocks (jitdl.ops.reduction): the
    first block holding the extreme, then its first position there, or in the tail."""
    for fill in ("ties", "nan", "tail"):
        x = rng.integers(0, 5, n).astype(F32)
        if fill == "nan":
            x[rng.integers(0, n, 2)] = np.nan
        if fill == "tail":
            x[-1] = 9
        am, an = on_gpu(dev, whole_arg_max_min, x)
        assert am == np.argmax(x) and an == np.argmin(x), (fill, am, an)


@jd.compute
def row_arg_max_min(X):
    return jd.numpy.argmax(X, axis=1), jd.numpy.argmin(X, axis=-1)


def test_argmax_argmin_along_rows_that_outgrow_l1_in_blocks(dev, rng):
    """Along rows longer than the host's L1 (of a static definition) argmax reads each
    row once in blocks (jitdl.ops.reduction.rows_blocked): the first position of the
    extreme, of the first NaN, in a whole block or in the tail, per row."""
    from jitdl.ops.reduction import rows_blocked
    from jitdl.target.cpu import host
    n = host().l1_bytes // 4 + 700
    assert rows_blocked(n, 4)
    x = rng.integers(0, 5, (4, n)).astype(F32)
    x[1, [n - 3, n - 1]] = 9
    x[2, [100, 3000]] = np.nan
    x[3, 600] = -1
    am, an = on_gpu(dev, row_arg_max_min, x)
    np.testing.assert_array_equal(am, np.argmax(x, axis=1))
    np.testing.assert_array_equal(an, np.argmin(x, axis=1))
    assert "argmax_blocks" in row_arg_max_min.cuda_source(x)


@jd.compute(dynamic=True)
def flat_arg_max_min(X):
    return jd.numpy.argmax(X.reshape(-1)), jd.numpy.argmin(jd.numpy.diff(X.reshape(-1)))


@pytest.mark.parametrize("shape", [(2, 3), (3, 1500)])
def test_whole_array_argmax_argmin_of_a_flattened_array(dev, rng, shape):
    """Over a size the prover cannot place a block's end within (X_n0 * X_n1), the
    tail's read is checked at run time."""
    x = rng.integers(0, 5, shape).astype(F32)
    x.flat[-1] = 9
    am, an = on_gpu(dev, flat_arg_max_min, x)
    assert am == np.argmax(x) and an == np.argmin(np.diff(x.reshape(-1))), (am, an)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_division_and_modulo(dev, rng, dtype):
    a = rng.integers(-50, 50, 200).astype(dtype)
    b = rng.integers(-7, 8, 200).astype(dtype)
    info = np.iinfo(dtype)
    a[:4] = [info.min, info.min, 7, -7]
    b[:4] = [-1, 3, 0, 0]
    q, r = on_gpu(dev, div_mod, a, b)
    with np.errstate(divide="ignore", over="ignore"):
        np.testing.assert_array_equal(q, a // b)
        np.testing.assert_array_equal(r, a % b)


def test_nan_and_signed_zero(dev, rng):
    for m in (20, 300):                 # serial rows and rows across a block of threads
        x = rng.standard_normal((4, m)).astype(F32)
        x[1, m // 3] = np.nan
        x[2, :] = -0.0
        x[2, m - 1] = 0.0
        got = on_gpu(dev, row_max, x)
        np.testing.assert_array_equal(np.isnan(got), [False, True, False, False])
        assert got[2] == 0 and not np.signbit(got[2]), got[2]
        close(got[[0, 3]], x[[0, 3]].max(axis=1), rtol=0, atol=0)
        x[2, :] = 0.0
        x[2, 0] = -0.0
        got = on_gpu(dev, row_min, x)
        assert np.isnan(got[1]) and np.signbit(got[2]), got
    a = np.array([np.nan, 1, -0.0, 0.0, -np.inf, 2], F32)
    b = np.array([1, np.nan, 0.0, -0.0, 3, np.inf], F32)
    mx, mn = on_gpu(dev, fmax_fmin, a, b)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, b))
    cpu = fmax_fmin(a, b)               # the CPU's signed zeros, bit for bit
    np.testing.assert_array_equal(mx.view(np.uint32), cpu[0].view(np.uint32))
    np.testing.assert_array_equal(mn.view(np.uint32), cpu[1].view(np.uint32))


# ---------------------------------------------------------------------------------------
# every level of the automatic schedule, and user schedules
# ---------------------------------------------------------------------------------------

def run_schedule(dev, f, args, schedule, target=None, out=None):
    """f's CUDA C under `schedule` (def sched(s, cfg)), run through the host runtime on the
    emulated device (into a copy of `out` where given); NumPy results."""
    from jitdl import pipeline
    from jitdl.target.cuda import CUDA
    target = target or CUDA()
    a = f._args(tuple(args), {})
    specs = f._specs(a)
    low = pipeline.lower(f._trace(specs, a), target, f._options(), schedule_fn=schedule)
    art = pipeline.build(low, target)
    k = cuda_runtime.CudaKernel(art.signature, art.launch, art.texts["cuda"].encode(),
                                device=dev, target=target)
    got = k.run([DeviceArray(np.array(x)) if isinstance(x, np.ndarray) else x for x in a],
                out=None if out is None else DeviceArray(np.array(out)))
    src = art.texts["cuda"]
    if isinstance(got, tuple):
        return tuple(np.array(g.host) for g in got), src
    return np.array(got.host), src


def at_level(level):
    from jitdl.schedule import gpu
    from jitdl.target.cuda import CUDA
    return lambda s, cfg: gpu.auto_schedule(s, cfg, CUDA(), level)


@pytest.mark.parametrize("level", range(5))
def test_every_level_of_the_automatic_schedule(dev, rng, level):
    x = rng.standard_normal((5, 300)).astype(F32)
    got, _ = run_schedule(dev, softmax, [x], at_level(level))
    x64 = x.astype(F64)
    e = np.exp(x64 - x64.max(axis=1, keepdims=True))
    close(got, e / e.sum(axis=1, keepdims=True), rtol=2e-5, atol=1e-8)
    a = rng.standard_normal((40, 30)).astype(F32)
    b = rng.standard_normal((30, 70)).astype(F32)
    got, _ = run_schedule(dev, matmul, [a, b], at_level(level))
    close(got, a.astype(F64) @ b, rtol=1e-4, atol=1e-4)
    xi = rng.integers(-100, 100, (7, 100)).astype(np.int32)
    (s, m), _ = run_schedule(dev, row_sum_max, [xi], at_level(level))
    np.testing.assert_array_equal(s, xi.sum(axis=1))
    np.testing.assert_array_equal(m, xi.max(axis=1))


@jd.compute
def rowsum(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="S")


@pytest.mark.parametrize("threads,rows_per_block", [(16, 1), (64, 4), (128, 2), (8, 8),
                                                    (8, 5), (16, 3)])
def test_thread_reductions_of_user_schedules(dev, rng, threads, rows_per_block):
    """A row reduced by `threads` threads along x (shuffles, then shared memory across
    warps), `rows_per_block` rows along y; the row in shared memory. A block of 8x5 or
    16x3 threads ends in a partial warp, whose shuffles' mask names only its own lanes
    (it named all 32: lanes past the block)."""
    def sched(s, cfg):
        S = s["S"]
        (i,) = S.axis
        (k,) = S.reduce_axis
        ko, ki = s.split(k, threads)
        io, ii = s.split(i, rows_per_block)
        s.reorder(io, ii, ki, ko)
        s.bind(io, "blockIdx.x")
        if rows_per_block > 1:
            s.bind(ii, "threadIdx.y")
        s.bind(ki, "threadIdx.x")
        c = s.cache_read("X", [S], "shared")
        s.compute_at(c, S, ii)
    x = rng.standard_normal((8 * rows_per_block, 5 * threads + 3))
    got, src = run_schedule(dev, rowsum, [x], sched)
    assert "__shfl_down_sync" in src
    close(got, x.sum(axis=1), rtol=1e-12, atol=1e-12)


def _one_element_per_thread(s, cfg):
    """The matmul of TVM's GPU tutorial: a 16x16 block of threads, one element each, the
    operands' tiles in shared memory at each step of k."""
    C = s["C"]
    i, j = C.axis
    io, ii = s.split(i, 16)
    jo, ji = s.split(j, 16)
    ko, ki = s.split(C.reduce_axis[0], 8)
    s.reorder(io, jo, ii, ji, ko, ki)
    s.bind(io, "blockIdx.y")
    s.bind(jo, "blockIdx.x")
    s.bind(ii, "threadIdx.y")
    s.bind(ji, "threadIdx.x")
    for t in "AB":
        s.compute_at(s.cache_read(t, [C], "shared"), C, ko)


@pytest.mark.parametrize("f,shapes", [(matmul, ((37, 29), (29, 53))),
                                      (matmul, ((1, 1), (1, 1))),
                                      (dyn_matmul, ((9, 7), (7, 33)))])
def test_shared_tiles_of_bound_loops_that_do_not_divide(dev, rng, f, shapes):
    """Threads past the output (37 rows in blocks of 16) fill the block's shared tiles
    with the others and skip only the products and the store: the fills under their
    guard were refused ("filled under a condition that differs between threads ...
    choose splits that divide the extents"), which no split can for 37 or a symbolic
    size."""
    a, b = (rng.standard_normal(sh) for sh in shapes)
    got, src = run_schedule(dev, f, [a, b], _one_element_per_thread)
    assert "__syncthreads" in src
    close(got, a @ b, rtol=1e-12, atol=1e-12)


@jd.compute
def centered(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    M = jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="M")
    return jd.tensor((n, m), lambda i, j: X[i, j] - M[i], name="Y")


@pytest.mark.parametrize("width,threads", [(32, 1), (64, 16), (128, 32), (16, 8)])
@pytest.mark.parametrize("shape", [(3, 70), (5, 64), (2, 1)])
def test_thread_reductions_narrower_than_the_block(dev, rng, width, threads, shape):
    """The row sum M computed at Y's column loop bound to `width` threads along x, its
    reduction across `threads` of them: 16 of 64 was refused ("must be bound to
    threadIdx.x with the kernel's whole extent along x"), and 1 of 32 was no combine at
    all: threads 1-31, which skip the loop's steps, wrote their identity over thread 0's
    sum (off by up to 13 on 5x64). The block's other threads join with the identity."""
    def sched(s, cfg):
        Y, M = s["Y"], s["M"]
        jo, ji = s.split(Y.axis[1], width)
        s.bind(Y.axis[0], "blockIdx.x")
        s.bind(ji, "threadIdx.x")
        s.compute_at(M, Y, ji)
        ko, ki = s.split(M.reduce_axis[0], threads)
        s.reorder(ki, ko)
        s.bind(ki, "threadIdx.x")
    x = rng.standard_normal(shape)
    got, src = run_schedule(dev, centered, [x], sched, out=np.full(shape, np.nan))
    close(got, x - x.sum(1, keepdims=True), rtol=1e-12, atol=1e-12)
    assert f"__launch_bounds__({width})" in src
    if threads > 1:
        assert "__shfl_down_sync" in src


@pytest.mark.parametrize("threads,rows_per_block", [(64, 4), (8, 5), (16, 3)])
def test_thread_reductions_of_rows_that_do_not_divide(dev, rng, threads, rows_per_block):
    """A row reduced across threadIdx.x, rows_per_block rows along y, and a last block
    with fewer rows: its idle rows of threads join the reduction with the identity
    (it was refused: "the reduction of S_acc across threads is under a condition that
    differs between threads")."""
    def sched(s, cfg):
        S = s[list(s.stages)[-1]]
        ko, ki = s.split(S.reduce_axis[0], threads)
        io, ii = s.split(S.axis[0], rows_per_block)
        s.reorder(io, ii, ki, ko)
        s.bind(io, "blockIdx.x")
        s.bind(ii, "threadIdx.y")
        s.bind(ki, "threadIdx.x")
    for op, f in [(np.sum, rowsum), (np.max, row_max)]:
        x = rng.standard_normal((3 * rows_per_block + 1, 2 * threads + 5))
        got, src = run_schedule(dev, f, [x], sched)
        assert "__shfl_down_sync" in src
        close(got, op(x, axis=1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m", [1, 2, 63])
def test_thread_reduction_over_rows_shorter_than_its_threads(dev, rng, m):
    """k split by 64, the inner part on threadIdx.x, over rows of fewer than 64: the
    simplifier tightens the bound loop to the row (63 threads), or drops it (1), while
    the reduction after it combines 64 threads: code generation refused the kernel
    ("must be bound to threadIdx.x with the kernel's whole extent"). The reduction's
    threads are launched, the loop guarded within them."""
    def sched(s, cfg):
        S = s["S"]
        ko, ki = s.split(S.reduce_axis[0], 64)
        s.reorder(S.axis[0], ki, ko)
        s.bind(S.axis[0], "blockIdx.x")
        s.bind(ki, "threadIdx.x")
    x = rng.standard_normal((3, m))
    got, src = run_schedule(dev, rowsum, [x], sched)
    assert "__shfl_down_sync" in src
    close(got, x.sum(axis=1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_division_by_a_literal_zero(dev, dtype):
    """The divisor written so that nvcc accepts it: NumPy's infinities, signs and NaNs."""
    x = np.array([1.0, -2.0, 0.0, -0.0, np.inf, np.nan], dtype)
    for zero in (0.0, -0.0):
        f = jd.compute(lambda X: X / zero)
        with np.errstate(divide="ignore", invalid="ignore"):
            want = x / dtype(zero)
        got = on_gpu(dev, f, x)
        np.testing.assert_array_equal(got, want)
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()


def test_unsigned_comparisons_and_powers(dev, rng):
    """uint8 operands are compared and raised to powers in int (as nvcc accepts them):
    NumPy's values, the powers wrapping."""
    x = rng.integers(0, 256, 40).astype(np.uint8)
    y = rng.integers(0, 256, 40).astype(np.uint8)
    x[:3], y[:3] = [0, 255, 3], [0, 7, 200]
    f = jd.compute(lambda X, Y: (X >= 0, X < Y, jnp.signbit(X), X ** Y, X ** 3))
    with np.errstate(over="ignore"):
        want = (x >= 0, x < y, np.signbit(x), x ** y, x ** np.uint8(3))
    for got, w in zip(on_gpu(dev, f, x, y), want):
        assert got.dtype == w.dtype
        np.testing.assert_array_equal(got, w)


@jd.compute
def casts(X):
    return X.astype("int32"), X.astype("int64"), X.astype("int8"), X.astype("uint8")


def test_float_to_integer_conversions_saturate(dev):
    """As on the CPU (and a GPU's conversion instructions): out-of-range values saturate,
    NaN becomes 0."""
    x = np.array([np.nan, 1e10, -1e10, 3.7, -3.7, 300, -300, np.inf, -np.inf, 2.0 ** 31,
                  -2.0 ** 31, 2.0 ** 63], F32)
    for got, want in zip(on_gpu(dev, casts, x), casts(x)):
        np.testing.assert_array_equal(got, want)
    assert on_gpu(dev, casts, x)[0][1] == 2 ** 31 - 1


@jd.compute(dynamic=True)
def take_rows(X, ids):
    return jd.tensor((ids.shape[0], X.shape[1]), lambda i, j: X[ids[i], j])


def test_checked_index_against_a_size_the_kernel_does_not_otherwise_read(dev, rng):
    """The check of ids[i] against X's row count needs X_n0, a size only the check reads:
    it must be a parameter of the kernel (it was not: the CUDA C did not compile)."""
    x = rng.standard_normal((17, 5))
    ids = rng.integers(0, 17, 7)
    np.testing.assert_array_equal(on_gpu(dev, take_rows, x, ids), x[ids])
    with pytest.raises(IndexError, match=r"is 17, outside \[0, X_n0\) \(X_n0 = 17\)"):
        on_gpu(dev, take_rows, x, np.array([0, 17]))


@pytest.mark.parametrize("op", ["rint", "isnan", "fmod"])
def test_outputs_named_like_math_functions(dev, rng, op):
    """jnp.rint's output is named rint: the kernel's buffer must not hide the function."""
    x = rng.standard_normal(50) * 3
    args = (x, np.full(50, 0.7)) if op == "fmod" else (x,)
    got = gpu_op(dev, getattr(jnp, op), *args)
    np.testing.assert_allclose(got, getattr(np, op)(*args), rtol=1e-12)


def gpu_op(dev, fn, *args):
    """A jd.numpy op on arrays on the emulated device, its result copied back."""
    got = fn(*[DeviceArray(np.array(a)) for a in args])
    return np.array(got.host)


@jd.compute(dynamic=True)
def take_clipped(X, I):
    return jnp.add(jnp.take(X, I, axis=0, mode="clip"), 1.0)


def test_failed_index_check_reads_nothing_from_an_empty_array(dev, rng):
    """take from an empty axis: the check fails and reports; the kernel must not read X[0]
    of an empty X instead (on a GPU: an illegal address, which ends the CUDA context)."""
    x = rng.standard_normal((5, 4))
    i = np.array([7, -2, 3])
    close(on_gpu(dev, take_clipped, x, i), np.take(x, i, axis=0, mode="clip") + 1.0)
    # (the call now refuses it before the kernel runs, with NumPy's message)
    with pytest.raises(IndexError, match="outside|non-empty take from an empty axes"):
        on_gpu(dev, take_clipped, np.zeros((0, 4)), np.array([0]))


def test_division_of_a_split_loop_with_a_tail(dev):
    """A loop split into a main part and a tail (one loop variable, two ranges): an
    index dividing a value that is negative in the main part but not in the tail is
    divided with floor semantics in both (C's '/' truncates: column 46 read X[:, 2])."""
    f = jd.compute(lambda X: jd.tensor((4, 50), lambda i, j: X[i, (45 - j) // 3 + 2],
                                       name="Y"))

    @jd.schedule(f, target="cuda")
    def _(s, cfg):
        i, j = s["Y"].axis
        s.split(j, 16)
        s.bind(i, "threadIdx.x")
    x = np.arange(80, dtype=F32).reshape(4, 20) * 1.5 + 0.25
    np.testing.assert_array_equal(on_gpu(dev, f, x), x[:, (45 - np.arange(50)) // 3 + 2])


# ---------------------------------------------------------------------------------------
# vectorized loops: one 4-16 byte access per operand where aligned
# ---------------------------------------------------------------------------------------

def test_emulator_refuses_a_misaligned_vector_access():
    """A GPU faults on a vector load or store at an address not aligned to its size; the
    emulator stops such a launch, so a kernel that takes the vector path for a view one
    element in fails here."""
    from jitdl.codegen.cuda import PRELUDE, VECTOR_HELPERS
    src = PRELUDE + VECTOR_HELPERS + r"""
extern "C" __global__ void copy4(const float* __restrict__ x, float* __restrict__ y,
                                 const long long at) {
  __align__(16) float lanes[4];
  jd_vload<uint4>(lanes, x, at);
  jd_vstore<uint4>(y, 0, lanes);
}
"""
    m = emu.compile(src)
    x = np.arange(12, dtype=F32)
    y = np.zeros(4, F32)
    m.launch("copy4", (1, 1, 1), (1, 1, 1), 0, [x, y, 4])
    np.testing.assert_array_equal(y, x[4:8])
    with pytest.raises(emu.EmulatorError, match=r"misaligned vector access of 16 bytes at x\[1\]"):
        m.launch("copy4", (1, 1, 1), (1, 1, 1), 0, [x, y, 1])
    with pytest.raises(emu.EmulatorError, match="out-of-bounds"):
        m.launch("copy4", (1, 1, 1), (1, 1, 1), 0, [x, y, 12])


def _vectorized(f, lanes, threads=32):
    """f's stage Y: blocks of `threads` threads, each running `lanes` consecutive
    elements of the flattened output as a vectorized loop."""
    @jd.schedule(f, target="cuda")
    def _(s, cfg):
        Y = s["Y"]
        flat = s.fuse(*Y.axis) if len(Y.axis) > 1 else Y.axis[0]
        b, t = s.split(flat, lanes * threads)
        t, v = s.split(t, lanes)
        s.bind(b, "blockIdx.x")
        s.bind(t, "threadIdx.x")
        s.vectorize(v)
    return f


@pytest.mark.parametrize("dtype,lanes", [(F32, 4), (F64, 2), (np.int32, 4), (np.int8, 16),
                                         (np.int16, 4), (F32, 2), (F32, 1)])
def test_vectorized_loads_and_stores(dev, rng, dtype, lanes):
    """A vectorized loop over 4, 8 or 16 bytes: the same values as NumPy on aligned
    arrays, on views one element in (misaligned: the serial loop runs; the emulator would
    stop a misaligned vector access), with out= aligned or not, and with a broadcast
    operand read as a scalar in every lane."""
    f = _vectorized(jd.compute(lambda A, B, c: jd.tensor(
        A.shape, lambda i, j: A[i, j] * B[i, j] + c[i], name="Y")), lanes)
    src = f.cuda_source(np.ones((8, 64), dtype), np.ones((8, 64), dtype), np.ones(8, dtype))
    nbytes = lanes * np.dtype(dtype).itemsize
    assert ("jd_vload<" in src) == (lanes > 1 and nbytes in (4, 8, 16)), src
    shape = (8, 64)

    def draw():
        if np.dtype(dtype).kind == "i":
            return rng.integers(-9, 9, shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)
    a, b = draw(), draw()
    c = draw()[:, 0].copy()
    want = (a.astype(F64) * b + c[:, None]).astype(dtype)
    close(on_gpu(dev, f, a, b, c), want)
    # views one element into a larger buffer: contiguous, not aligned to the vector
    shifted = [np.concatenate([x.ravel()[:1], x.ravel()])[1:].reshape(x.shape) for x in (a, b)]
    assert all(x.ctypes.data % 16 for x in shifted)
    close(on_gpu(dev, f, *shifted, c), want)
    for offset in (0, 1):
        out = DeviceArray(np.zeros(a.size + 1, dtype)[offset:offset + a.size].reshape(shape))
        got = f(DeviceArray(a), DeviceArray(b), DeviceArray(c), out=out)
        assert got is out or np.shares_memory(np.asarray(got.host), out.host)
        close(np.array(out.host), want)


def test_vectorized_loop_reads(dev, rng):
    """Reads with stride 1 load as vectors (once, however often the loop reads them); a
    strided read and a read only in a select's arm (which may be out of bounds where the
    condition is false) stay element by element; a loop whose lanes are 32 bytes is a
    serial loop, and the source says why."""
    n = 256

    @jd.compute
    def reads(A, B, C, D):
        Y[i] = jd.where(B[i] > 0, A[i], 0.0) + C[2 * (i // 2)] + jd.where(B[i] < 0, D[i], 1.0)
        return Y
    f = _vectorized(reads, 4, threads=16)
    a, b, c, d = (rng.standard_normal(n).astype(F32) for _ in range(4))
    body = f.cuda_source(a, b, c, d).split("__global__")[1]
    assert "one access per operand where aligned" in body
    assert body.count("jd_vload<uint4>") == 1 and "jd_vload<uint4>(jd_vr1, B, " in body, body
    assert "jd_vstore<uint4>(Y, " in body and body.count("jd_vr1[") == 3
    want = np.where(b > 0, a, 0.0) + c[2 * (np.arange(n) // 2)] + np.where(b < 0, d, 1.0)
    close(on_gpu(dev, f, a, b, c, d), want)

    wide = _vectorized(jd.compute(lambda A: jd.tensor(A.shape, lambda i: A[i] + 1.0,
                                                      name="Y")), 4)
    body = wide.cuda_source(np.ones(256, F64)).split("__global__")[1]
    assert "jd_vload" not in body and "a serial loop, because 4 float64 lanes of Y are 32 " \
        "bytes" in body
    x = rng.standard_normal(256)
    close(on_gpu(dev, wide, x), x + 1.0)


def test_vectorized_gather_keeps_its_index_checks(dev, rng):
    """A read at an index loaded from memory (checked at run time) stays element by
    element with its check in a vectorized loop; the indices themselves load as vectors,
    and a bad index still raises."""
    @jd.compute
    def gathered(X, idx, Z):
        Y[i] = X[idx[i]] + Z[i]
        return Y
    f = _vectorized(gathered, 4, threads=8)
    x = rng.standard_normal(50).astype(F32)
    idx = rng.integers(0, 50, 64).astype(np.int32)
    z = rng.standard_normal(64).astype(F32)
    body = f.cuda_source(x, idx, z).split("__global__")[1]
    assert "jd_vload<uint4>(jd_vr1, idx, " in body and "jd_ok(" in body, body
    close(on_gpu(dev, f, x, idx, z), x[idx].astype(F64) + z)
    idx[37] = 50
    with pytest.raises(IndexError):
        on_gpu(dev, f, x, idx, z)


def test_a_repeated_subexpression_is_computed_once_under_its_guard(dev, rng):
    """z = z * z * 0.5 + z * 0.25 eight times over a gather under a guard: a tree of 3^8
    reads, each with its index check (491 KB of CUDA C: nvcc 127 s, the emulator's g++
    unfinished after 5 minutes); now each repeated node is one local (4 KB, nvcc 0.8 s),
    computed inside the guarded arm, so the check runs once and only where the guard
    holds (excluded indices raise nothing)."""
    from test_robust import _grow, guarded_gather
    x = rng.uniform(-0.5, 0.5, 16)
    idx = np.array([0, 3, 99, 5, -7, 15, 1000000, 2])
    src = guarded_gather.cuda_source(x, idx)
    body = src.split("__global__")[1]
    assert len(body) < 4000 and body.count("jd_ok(") == 1, len(body)
    assert body.index("? [&]() {") < body.index("jd_ok(")      # inside the guarded arm
    ok = (idx >= 0) & (idx < 16)
    close(on_gpu(dev, guarded_gather, x, idx),
          np.where(ok, _grow(x[np.where(ok, idx, 0)], 8), -1.0), rtol=1e-12, atol=1e-15)


def test_an_operand_written_three_times_is_computed_once(dev, rng):
    """Integer abs and saturating casts write their operand three times in C: abs(z) - 3
    eleven times was 9.2 MB of CUDA C from 33 IR nodes (found by review); its operands are
    locals now, with the same wrapping values (abs of INT_MIN is INT_MIN, as in NumPy)."""
    def chain(z):
        for _ in range(11):
            z = jd.abs(z) - jd.int32(3)
        return z
    f = jd.compute(lambda A: jd.tensor(A.shape, lambda i: chain(A[i]), name="Y"))
    a = np.concatenate([rng.integers(-50, 50, 60), [-2 ** 31, 2 ** 31 - 1, -2 ** 31 + 3,
                                                     0]]).astype(np.int32)
    assert len(f.cuda_source(a)) < 10_000
    want = a.copy()
    with np.errstate(over="ignore"):
        for _ in range(11):
            want = np.abs(want) - np.int32(3)
    np.testing.assert_array_equal(on_gpu(dev, f, a), want)
    np.testing.assert_array_equal(f(a), want)          # (the CPU target agrees)


def test_vectorized_loop_of_arrays_named_like_vector_types(dev, rng):
    """An argument called uint4 (the type of a 16-byte access) is renamed in the CUDA C."""
    def f(uint4, uint2):
        return jd.tensor(uint4.shape, lambda i: uint4[i] * uint2[i], name="Y")
    f = _vectorized(jd.compute(f), 4)
    a, b = (rng.standard_normal(256).astype(F32) for _ in range(2))
    assert "jd_vload<uint4>" in f.cuda_source(a, b)
    close(on_gpu(dev, f, a, b), a.astype(F64) * b)


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64])
def test_wrapping_products_of_narrow_integers(dev, dtype):
    """Signed products wrap as NumPy's do. An int16 product in unsigned short was promoted
    to int by C, where 65535 * 65535 overflows (undefined behaviour): it is taken in
    unsigned int (a reviewer's reading of the code)."""
    info = np.iinfo(dtype)
    vals = np.array([info.min, info.max, info.min + 1, -1, 1, 0, 181, -182, 255, -256,
                     46341]).astype(dtype)          # (wrapped where the dtype is narrower)
    a, b = (np.ascontiguousarray(v) for v in np.meshgrid(vals, vals))
    f = jd.compute(lambda A, B: jd.tensor(A.shape, lambda i, j: A[i, j] * B[i, j] - A[i, j],
                                          name="Y"))
    if dtype in (np.int8, np.int16):
        assert "unsigned int)" in f.cuda_source(a, b).split("__global__")[1]
    with np.errstate(over="ignore"):
        want = a * b - a
    np.testing.assert_array_equal(on_gpu(dev, f, a, b), want)


def test_a_deep_chain_of_integer_selects_compiles_quickly(dev, rng):
    """z = where(z > 3, z * z, abs(z) - 5) + z eight times over int64 (a reviewer's case):
    the structural hash of a node walked its whole tree and the CUDA code generator's
    index-width check walked and bounded every node of the tree (2^k of them, from ~5k
    objects): at k = 4, 8 s to lower for the CPU and 22 s for cuda_source; k = 5 over a
    minute. Now nodes keep their hash and the check walks each object once, memoised."""
    def chain(z):
        for _ in range(8):
            z = jd.where(z > 3, z * z, jd.abs(z) - 5) + z
        return z
    f = jd.compute(lambda A: jd.tensor(A.shape, lambda i: chain(A[i]), name="Y"))
    a = np.concatenate([rng.integers(-50, 50, 60), [-2 ** 63, 2 ** 63 - 1, 3, 4]])
    want = a.copy()
    with np.errstate(over="ignore"):
        for _ in range(8):
            want = np.where(want > 3, want * want, np.abs(want) - 5) + want
    np.testing.assert_array_equal(f(a), want)
    np.testing.assert_array_equal(on_gpu(dev, f, a), want)


@jd.compute
def two_stages(A):
    T = jd.tensor(A.shape, lambda i, j: jd.exp(A[i, j]) * 2, name="T")
    return jd.tensor(A.shape, lambda i, j: T[i, j] + T[(i + 1) % A.shape[0], j], name="S")


def test_stages_a_gpu_schedule_leaves_unbound_run_on_every_thread(dev, rng):
    """A user schedule that binds the output's loops only: the stored stage T ran as one
    thread's loop nest (a <<<1, 1>>> kernel); now it gets the automatic schedule's
    grid-stride loop. A stage the schedule worked on (T's loop split, unbound) stays as
    the user left it, and a PerformanceWarning names it."""
    import warnings
    from jitdl.errors import PerformanceWarning

    def sched(s, cfg, touch=False):
        i, j = s["S"].axis
        f = s.fuse(i, j)
        o, t = s.split(f, 64)
        s.bind(o, "blockIdx.x")
        s.bind(t, "threadIdx.x")
        if touch:
            s.split(s["T"].axis[1], 8)
    x = rng.standard_normal((37, 29))
    t = np.exp(x) * 2
    for touch in (False, True):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            got, src = run_schedule(dev, two_stages, [x],
                                    lambda s, cfg: sched(s, cfg, touch))
        idle = [str(w.message) for w in seen if w.category is PerformanceWarning]
        assert len(idle) == touch and (not touch or "stage T on one GPU thread" in idle[0] and
                                       "s.bind(loop" in idle[0]), idle
        launches = [ln for ln in src.splitlines() if ln.startswith("//   jd_")]
        assert len(launches) == 2, launches
        assert ("<<<(1, 1, 1), (1, 1, 1)>>>" in launches[0]) == touch, launches
        close(got, t + np.roll(t, -1, axis=0), rtol=1e-12, atol=1e-12)


def _launches(f, *args):
    """The launch configurations f's CUDA C lists, in order."""
    return [ln.split("<<<")[1] for ln in f.cuda_source(*args).splitlines()
            if ln.startswith("//   jd_")]


_WHOLE = [("sum", (20011,), F32), ("max", (1001, 777), F32), ("mean", (3, 7001), F64),
          ("min", (7001, 3), np.int32), ("prod", (4099,), F64), ("any", (9000,), np.bool_),
          ("all", (9000,), np.bool_), ("sum", (5, 5, 999), np.int8), ("std", (40, 300), F32),
          ("sum", (300, 200, 2), F64)]


@pytest.mark.parametrize("dynamic, op, shape, dtype", [(d, *c) for d in (False, True)
                                                       for c in _WHOLE])
def test_whole_array_reductions_use_the_whole_gpu(dev, rng, op, shape, dtype, dynamic):
    """A reduction of a whole array ran on one thread (both kernels <<<1, 1>>>); now its
    axis is split into parts that blocks of threads reduce, then combine
    (gpu.split_reduction). Values against NumPy in float64; extreme values in the
    first and last elements, so that every part is read."""
    x = rng.standard_normal(shape) * 10
    if dtype == np.bool_:
        x = x > (-25 if op == "all" else 25)
    x = x.astype(dtype)
    x.flat[0], x.flat[-1] = (True, False) if dtype == np.bool_ and op == "all" else \
        (x.flat[0], x.flat[-1] * 3)
    if op == "prod":
        x = 1 + x / 1000
    f = jd.compute(lambda X: getattr(jd.numpy, op)(X), dynamic=dynamic)
    first = _launches(f, x)[0]
    assert not first.startswith("(1, 1, 1)"), _launches(f, x)
    want = getattr(np, op)(x.astype(F64) if dtype in (F32, F64) else x)
    close(on_gpu(dev, f, x), np.asarray(want), rtol=1e-5 if dtype == F32 else 1e-12)


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("shape, axis", [((20011,), None), ((30, 70), 1), ((1000, 30), 0),
                                         ((3, 7001), 1), ((300, 400), 0), ((30, 300), 1),
                                         ((4, 5, 6), (0, 2))])
def test_float32_sums_store_their_float64_total_cast(dev, rng, shape, axis, dynamic):
    """jd.numpy.sum of float32 accumulates in float64 and was cast in a kernel of its own,
    a second pass over the output and a launch (the sum of 20011: three kernels, the last
    one thread's `out[0] = (float)T0[0]`). The reduction is inlined into the stage that
    casts it (schedule.compute_inline of a reduction), whose last kernel stores its float64
    total cast: as many kernels as the sum of float64. Every element written (out= starts
    as NaN), NumPy's float64 sum within float32's rounding."""
    x = (rng.standard_normal(shape) * 10).astype(F32)
    f = jd.compute(lambda X: jnp.sum(X, axis=axis), dynamic=dynamic)
    g = jd.compute(lambda X: jnp.sum(X, axis=axis), dynamic=dynamic)
    assert len(_launches(f, x)) == len(_launches(g, x.astype(F64))), _launches(f, x)
    src = f.cuda_source(x)
    # (the last kernel stores its accumulator cast)
    assert re.search(r"_lambda_\[[^]]*\] = \(\(float\)_lambda__acc\[", src), src
    want = x.astype(F64).sum(axis=axis)
    close(on_gpu(dev, f, x), want, rtol=1e-6, atol=1e-5)
    out = DeviceArray(np.full(np.shape(want), np.nan, F32))
    jnp.sum(DeviceArray(x), axis=axis, out=out)
    close(out.host, want, rtol=1e-6, atol=1e-5)
    # (the result identical to the float64 total rounded once)
    np.testing.assert_array_equal(out.host, on_gpu(dev, g, x).astype(F32))


def test_int64_data_of_narrow_kernels(dev, rng):
    """Kernels of int64 data compute their indices in 32 bits where they fit (they were
    64-bit for any int64 value read from memory: test_cuda_codegen's
    test_int64_data_leaves_its_indices_32_bit); the data's arithmetic, its constants past
    int32 and indices made of data stay 64-bit. Values near +-2**62 (a truncation to 32
    bits anywhere shows), exactly NumPy's, every element written (out= starts at a
    sentinel)."""
    x, y = (rng.integers(-2 ** 62, 2 ** 62, size=(37, 300), dtype=np.int64) for _ in "xy")
    ids = rng.integers(0, 300, size=(37, 9), dtype=np.int64)
    rows, cols = np.arange(37)[:, None], np.arange(9)
    cases = [
        (lambda X, Y: X + Y, (x, y), x + y),
        (lambda X: X * 3000000000 + 7, (x,), x * 3000000000 + 7),
        (lambda X: X // 7 - X % 5, (x,), x // 7 - x % 5),
        (lambda X: jnp.sum(X, axis=1), (x,), x.sum(axis=1)),
        (lambda X: jnp.max(X, axis=1), (x,), x.max(axis=1)),
        (lambda X: jnp.min(X, axis=0), (x,), x.min(axis=0)),
        (lambda X: jnp.argmax(X, axis=1), (x,), x.argmax(axis=1)),
        (lambda X, I: jd.tensor(I.shape, lambda i, j: X[i, I[i, j]] * 3 + i * 1000 + j),
         (x, ids), np.take_along_axis(x, ids, 1) * 3 + rows * 1000 + cols)]
    for fn, args, want in cases:
        f = jd.compute(fn)
        assert re.search(r"for \(int |\(int\)threadIdx", f.cuda_source(*args))
        out = DeviceArray(np.full(want.shape, -12345, np.int64))
        f(*[DeviceArray(a) for a in args], out=out)
        np.testing.assert_array_equal(out.host, want)


@pytest.mark.parametrize("shape", [(7001, 3), (3, 7001), (2, 3, 4001), (4001, 2, 3),
                                   (1, 1, 5), (6, 1), (0, 4)])
def test_whole_reductions_of_symbolic_shape_split_all_of_it(dev, rng, shape):
    """A whole reduction over several axes of symbolic extents split its last axis: 528
    parts of the 3 of a (7001, 3) array, 525 of them empty and each thread of the other
    three walking all 7001 rows (20 s on the emulator; (300, 200, 2) took 161 s). Its
    axes are now one, split across a thread per part of two blocks per multiprocessor,
    read at the row-major position with no division left (the bounds check follows
    k // n2 // n1 to the loop's k < n0 * n1 * n2)."""
    x = rng.standard_normal(shape) * 10
    x.flat[-1:] = 1000.0                      # (the last element read too)
    for op in ("sum", "max"):
        if op == "max" and x.size == 0:
            continue
        f = jd.compute(lambda X: getattr(jd.numpy, op)(X), dynamic=True)
        src = f.cuda_source(x)
        launches = _launches(f, x)
        assert len(launches) >= 2 and not launches[0].startswith("(1, 1, 1)"), launches
        reads = [ln for ln in src.split("__global__")[1].splitlines() if "X[" in ln]
        # (no division by a size per element: a part's start may divide by the parts)
        assert reads and not any(re.search(r"jd_i(div|mod)<long long>\([^;]*, X_n\d\)", r)
                                 for r in reads), reads
        close(on_gpu(dev, f, x), np.asarray(getattr(np, op)(x)), rtol=1e-12)
    g = jd.compute(lambda X: jd.numpy.min(X), dynamic=True)       # (int32, another shape)
    xi = (x * 7).astype(np.int32)
    if xi.size:
        np.testing.assert_array_equal(on_gpu(dev, g, xi), xi.min())


@pytest.mark.parametrize("axes, shape", [((0, 1), (50, 7, 8)), ((1, 2), (4, 30, 7)),
                                         ((0, 1), (3, 5, 1))])
def test_reductions_of_symbolic_axes_with_a_few_outputs(dev, rng, axes, shape):
    """Down columns (the outputs along the contiguous axis), the symbolic axes are split
    as one, each thread reading k * outputs + j: neighbouring threads on neighbouring
    columns; other outputs keep their last axis split (a fused one would divide)."""
    f = jd.compute(lambda X: jd.numpy.sum(X, axis=axes), dynamic={"X": axes})
    x = rng.standard_normal(shape)
    reads = [ln for ln in f.cuda_source(x).split("__global__")[1].splitlines() if "X[" in ln]
    assert reads and not any(re.search(r"jd_i(div|mod)<long long>\([^;]*, X_n\d\)", r)
                             for r in reads), reads       # (no division by a size)
    close(on_gpu(dev, f, x), x.sum(axis=axes), rtol=1e-12)


def _softmax64(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("f, want, shape", [
    (lambda X: jd.numpy.sum(X, axis=1), lambda x: x.sum(axis=1), (4, 30001)),
    (lambda X: jd.numpy.sum(X, axis=0), lambda x: x.sum(axis=0), (20001, 3)),
    (lambda X: jd.numpy.max(X, axis=(0, 2)), lambda x: x.max(axis=(0, 2)), (300, 5, 400)),
    (lambda X: jd.nn.softmax(X, axis=-1), _softmax64, (3, 5000))])
def test_reductions_with_few_outputs_are_split(dev, rng, f, want, shape):
    """A sum along a short and wide array's rows (4 outputs: it ran on 4 blocks), down a
    tall and narrow one's columns (3 threads), a softmax of 3 long rows (3 blocks): each
    row statistic is split into parts spread over the GPU."""
    x = rng.standard_normal(shape).astype(F32)
    g = jd.compute(f)
    grids = [int(ln.split(",")[0].strip("(")) for ln in _launches(g, x)]
    assert max(grids) >= 27, _launches(g, x)        # (it was 1, 3 or 4 blocks)
    close(on_gpu(dev, g, x), want(x.astype(F64)), rtol=1e-5)


@pytest.mark.parametrize("f, shape", [
    (lambda X: jd.nn.softmax(X, axis=-1), (256, 1024)),
    (lambda X: jd.nn.softmax(X, axis=-1), (132, 4096)),
    (lambda X: jd.numpy.sum(X, axis=1), (200, 2048)),
    (lambda X: jd.numpy.sum(X, axis=1), (4096, 1024))])
def test_many_or_short_rows_keep_a_block_per_row(f, shape):
    """Rows enough to occupy the GPU, or short ones, keep one kernel of a block per row
    (a softmax reads each row once): split_reduction is for few outputs over long
    reductions (found by review: 132 to 263 rows of 1024 were split into five kernels)."""
    x = np.ones(shape, F32)
    launches = _launches(jd.compute(f), x)
    assert len(launches) == 1 and launches[0].startswith(f"({shape[0]}, 1, 1)"), launches


@pytest.mark.parametrize("op", ["sum", "prod"])
def test_split_integer_reductions_wrap_without_overflow_in_c(dev, op):
    """int64 sums and products that wrap (as NumPy's) are combined across threads in
    unsigned arithmetic (a signed overflow in C: found by review under UBSan)."""
    x = np.full(4096, 2 ** 62 if op == "sum" else 3, np.int64)
    x[-1] = 7
    f = jd.compute(lambda X: getattr(jd.numpy, op)(X))
    src = f.cuda_source(x)
    assert "__shfl_down_sync" in src and "(unsigned long long)jd_v0" in src
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(on_gpu(dev, f, x), getattr(np, op)(x))


def test_an_empty_output_of_a_long_reduction_takes_the_full_schedule(caplog):
    """Zero rows of 5000 (a division by zero in the split's plan sent the automatic
    schedule to its next level, found by review)."""
    import logging
    f = jd.compute(lambda X: jd.numpy.sum(X, axis=1))
    with caplog.at_level(logging.DEBUG, logger="jitdl.schedule"):
        f.lower(np.zeros((0, 5000), F32), target="cuda")
    assert not [r for r in caplog.records if "failed" in r.getMessage()]


@pytest.mark.parametrize("call, want, shapes", [
    (lambda x: jnp.sum(x, axis=0), lambda x: x.sum(axis=0), [(20001, 3), (30001, 3)]),
    (lambda x: jnp.sum(x, axis=0), lambda x: x.sum(axis=0), [(5000, 64), (7003, 64)]),
    (lambda x: jnp.max(x, axis=1), lambda x: x.max(axis=1), [(5, 9000), (5, 12001)]),
    (lambda x: jnp.mean(x, axis=1), lambda x: x.mean(axis=1), [(300, 257), (411, 257)]),
    (lambda x: nn.softmax(x, axis=-1), _softmax64, [(40, 3000), (57, 3000)]),
    (lambda x: jnp.sum(x, axis=0), lambda x: x.sum(axis=0), [(3000, 8, 16), (4001, 8, 16)]),
    (lambda x: nn.softmax(x, axis=-1), _softmax64, [(3, 20, 700), (5, 13, 700)])])
def test_op_library_reductions_on_gpu_arrays_take_the_sizes_their_plans_need(
        dev, rng, call, want, shapes):
    """jd.numpy and jd.nn compile one kernel for every size (symbolic extents), whose
    reductions ran a thread per output: a column sum of a tall array on 3 threads, row
    statistics a thread per row. Where the shapes call for a split or a block per row,
    the call is compiled for the sizes that plan needs, symbolic in the others
    (eager._for_shapes): a second length of the columns, or a second count of rows,
    runs the same kernel, which splits its reduction or gives a row a block as the
    kernel of the call's exact shapes does."""
    from jitdl import eager
    eager.clear()
    for shape in shapes:
        x = rng.standard_normal(shape).astype(F32)
        x.flat[0], x.flat[-1] = 40.0, -40.0    # (extremes in the first and last parts)
        close(on_gpu(dev, call, x), want(x.astype(F64)), rtol=1e-5)
    (k,) = {id(k): k for k in (getattr(k, "kernel", k) for k in eager._kernels.values())
            }.values()
    assert k.dims is not None                       # (symbolic in some size)
    fixed = jd.compute(call).cuda_source(x)
    assert len(k.kernels) == sum(ln.startswith("//   jd_") for ln in fixed.splitlines())
    assert "__shfl_down_sync" in k.texts["cuda"] and "__shfl_down_sync" in fixed


def test_norms_with_weights_keep_one_kernel_for_every_count_of_rows(dev, rng):
    """layer_norm and rms_norm with a weight (and bias) of the row's length: the vectors
    are symbolic with the rows, their length checked against the rows' at the call."""
    from jitdl import eager
    eager.clear()
    w, b = rng.standard_normal(300), rng.standard_normal(300)
    for n in (150, 211):      # (enough elements for a block per row to pay)
        x = rng.standard_normal((n, 300)) * 3 + 1
        mean = x.mean(axis=1, keepdims=True)
        want = (x - mean) / np.sqrt(x.var(axis=1, keepdims=True) + 1e-5) * w + b
        close(on_gpu(dev, lambda a, c, d: nn.layer_norm(a, (300,), c, d), x, w, b), want,
              rtol=1e-9, atol=1e-9)
        want = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
        close(on_gpu(dev, lambda a, c: nn.rms_norm(a, (300,), c, eps=1e-6), x, w), want,
              rtol=1e-9, atol=1e-9)
    kernels = {id(k): k for k in (getattr(k, "kernel", k) for k in eager._kernels.values())}
    assert len(kernels) == 2
    assert all(k.dims is not None and "__shfl_down_sync" in k.texts["cuda"]
               for k in kernels.values())


def test_rows_whose_length_keeps_changing_share_a_kernel_for_long_rows(dev, rng,
                                                                       monkeypatch):
    """A softmax whose row length keeps changing (attention's while it decodes) compiled
    a kernel per length, and past the budget ran a thread per row: after
    eager._LENGTHS_MOST lengths, new ones run one kernel of symbolic extents that still
    gives each row a block (CUDA.long_rows), compiled once."""
    from jitdl import eager
    eager.clear()
    monkeypatch.setattr(eager, "_LENGTHS_MOST", 2)
    for m in (200, 300, 401, 777, 130):
        x = rng.standard_normal((300, m)) * 4
        close(on_gpu(dev, lambda a: nn.softmax(a, axis=-1), x), _softmax64(x), rtol=1e-9)
    kernels = {id(k): k for k in (getattr(k, "kernel", k) for k in eager._kernels.values())}
    assert len(kernels) == 3
    (long,) = [k for k in kernels.values() if "input_n1" in k.texts["loop_ir"]]
    assert "__shfl_down_sync" in long.texts["cuda"] and len(long.kernels) == 1


@pytest.mark.parametrize("m", [1, 5, 129, 256, 1000])
def test_a_kernel_for_long_rows_serves_rows_of_any_length(dev, rng, m):
    """The kernel for long rows (a block of 256 threads per row of a symbolic length) on
    rows shorter than the block, of one element, and not a multiple of it."""
    f = jd.compute(lambda X: jd.nn.softmax(X, axis=-1), dynamic=True)
    g = jd.compute(lambda X: jd.numpy.sum(X * X, axis=1), dynamic=True)
    f._long_rows = g._long_rows = True
    x = rng.standard_normal((37, m)) * 4
    close(on_gpu(dev, f, x), _softmax64(x), rtol=1e-9)
    close(on_gpu(dev, g, x), (x * x).sum(axis=1), rtol=1e-9)
    for h in (f, g) if m > 1 else ():   # (rows of 1 are a concrete size: a thread each)
        k = h.kernel(DeviceArray(x))        # (a block per row: warp shuffles combine)
        assert k.dims is not None and "__shfl_down_sync" in k.texts["cuda"]


@jd.compute(dynamic=True)
def dyn_softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute(dynamic=True)
def dyn_layer_norm(X, w):
    n, m = X.shape
    mu[i] = sum(X[i, k] for k in range(m)) / m
    var[i] = sum((X[i, k] - mu[i]) ** 2 for k in range(m)) / m
    Y[i, j] = (X[i, j] - mu[i]) / sqrt(var[i] + 1e-5) * w[j]
    return Y


@jd.compute(dynamic=True)
def dyn_row_sum(X):
    n, m = X.shape
    Y[i] = sum(X[i, k] for k in range(m))
    return Y


def _layer_norm64(x, w):
    mu = x.mean(axis=1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=1, keepdims=True) + 1e-5) * w


@pytest.mark.parametrize("f", ["softmax", "layer_norm", "row_sum"])
def test_a_users_rows_of_a_symbolic_length_get_a_block_each_when_long(dev, rng, f):
    """A user's @jd.compute(dynamic=True) row reduction (softmax, layer norm, row sum over
    the last axis of symbolic length) ran a thread per row on the GPU, whatever the rows'
    length (only the op library took such rows as long): one thread walked each row of an
    (8192, 8192) softmax. Its GPU calls now pick one of two kernels by the length of the
    rows (runtime.cuda.ByRowLength): rows of at least schedule.gpu.ROW_MIN elements a block
    of threads each (a reduction across the block's threads: warp shuffles), shorter ones
    a thread each, as the kernels of fixed sizes do; each compiled once, on first use.
    Every output element written (out= starts as NaN), NumPy's values in float64."""
    from jitdl.runtime.cuda import ByRowLength
    from jitdl.schedule.gpu import ROW_MIN
    func = {"softmax": dyn_softmax, "layer_norm": dyn_layer_norm, "row_sum": dyn_row_sum}[f]
    func.recompile()
    for n in (0, 1, 2, 31, 129):
        for m in (0, 1, 2, 33, 127, 128, 129, 1000):
            x, w = rng.standard_normal((n, m)) * 4, rng.standard_normal(m)
            if f == "row_sum":
                args, want = (x,), x.sum(axis=1)
            elif m == 0:        # (NumPy: nan for the mean of no elements, max: an error)
                continue
            else:
                args = (x,) if f == "softmax" else (x, w)
                want = _softmax64(x) if f == "softmax" else _layer_norm64(x, w)
            out = DeviceArray(np.full(want.shape, np.nan))
            func(*[DeviceArray(a) for a in args], out=out)
            close(out.host, want, rtol=1e-9, atol=1e-9)
            k = func.kernel(*[DeviceArray(a) for a in args])
            src = k.texts["cuda"]
            assert func.cuda_source(*args) == src, (n, m)   # (NumPy arrays: the same)
            if n > 1:       # (one row: a size of its own, split over the GPU)
                assert ("__shfl_down_sync" in src) == (m >= ROW_MIN), (n, m)
                assert ("<<<(X_n0, 1, 1), (256, 1, 1)>>>" in src) == (m >= ROW_MIN), (n, m)
    (rows,) = {id(k): k for k in func._kernels.values()
               if isinstance(k, ByRowLength)}.values()
    assert sorted(rows.kernels) == [False, True]


@pytest.mark.parametrize("knob, value", [("Y.threads", 64), ("Y.row_threads", 128)])
@pytest.mark.parametrize("first", ["short", "long"])
def test_with_config_takes_a_knob_of_either_kernel_of_a_row_length(dev, rng, knob, value,
                                                                   first):
    """Found by review: a with_config copy of a dynamic row reduction on the GPU checked
    its knobs against the schedule of whichever of its two kernels (ByRowLength) compiled
    first: Y.threads (the short rows' kernel's) raised 'no knob named' when the first call
    had long rows, and passed otherwise (Y.row_threads, the long rows' kernel's, the other
    way round). A knob of either kernel is the function's now, each kernel taking its own;
    one of neither is still an error."""
    f = dyn_row_sum.with_config(**{knob: value})
    lengths = (5, 300) if first == "short" else (300, 5)
    for m in lengths:
        x = rng.standard_normal((6, m))
        close(on_gpu(dev, f, x), x.sum(axis=1), rtol=1e-12, atol=1e-12)
        src = f.cuda_source(DeviceArray(x))
        if (knob == "Y.threads") == (m < 128):      # (the knob of this kernel: applied)
            assert f", ({value}, 1, 1)>>>" in src, (m, src)
    with pytest.raises(jd.ScheduleError, match="no knob named 'Y.nope'"):
        on_gpu(dev, dyn_row_sum.with_config(**{"Y.nope": 1}), rng.standard_normal((6, 5)))


def test_config_space_is_that_of_the_kernel_for_the_arguments_rows(dev, rng):
    """Found by review: config_space of a dynamic row reduction's GPU arguments gave the
    knobs of the kernel for short rows (Y.threads) whatever the rows' length, where rows
    of 300 run the long rows' kernel (ByRowLength), whose knob is Y.row_threads: the
    space shown was not the one of the kernel cuda_source shows and the call runs."""
    for m, knob in ((5, "Y.threads"), (300, "Y.row_threads")):
        x = rng.standard_normal((6, m))
        for space in (dyn_row_sum.config_space(DeviceArray(x)),
                      dyn_row_sum.config_space(x, target="cuda")):
            assert list(space.knobs) == [knob], (m, space)
        assert list(dyn_row_sum.config_space(x).knobs) == []       # (the CPU's)


def test_a_row_length_dispatch_from_the_disk_cache_does_not_trace(dev, rng, monkeypatch):
    """The first GPU call of a dynamic definition (per key, per process) traced it to find
    the lengths of the rows that pick its kernel (ByRowLength), even where the disk cache
    had the kernels: 20-60 ms a definition. The lengths (size trees), or that one kernel
    serves, are kept in the cache's record of each kernel now: a process that finds them
    there (here: after recompile(), which forgets traces and kernels) does not trace."""
    @jd.compute(dynamic=True)
    def row_sum(X):
        return jnp.sum(X * 2, axis=1)

    @jd.compute(dynamic=True)
    def col_sum(X):
        return jnp.sum(X * 2, axis=0)
    for m in (5, 300):
        x = rng.standard_normal((6, m))
        close(on_gpu(dev, row_sum, x), 2 * x.sum(axis=1), rtol=1e-12, atol=1e-12)
        close(on_gpu(dev, col_sum, x), 2 * x.sum(axis=0), rtol=1e-12, atol=1e-12)
    for f in (row_sum, col_sum):
        f.recompile()
        monkeypatch.setattr(f, "_trace", lambda *a, **k: pytest.fail("traced"))
    for m in (7, 400):
        x = rng.standard_normal((6, m))
        close(on_gpu(dev, row_sum, x), 2 * x.sum(axis=1), rtol=1e-12, atol=1e-12)
        close(on_gpu(dev, col_sum, x), 2 * x.sum(axis=0), rtol=1e-12, atol=1e-12)
    (rows,) = row_sum._kernels.values()
    assert isinstance(rows, cuda_runtime.ByRowLength) and sorted(rows.kernels) == [False, True]
    assert "__shfl_down_sync" in rows.kernels[True].texts["cuda"]
    assert "__shfl_down_sync" not in rows.kernels[False].texts["cuda"]


def test_only_reductions_that_walk_rows_take_symbolic_rows_as_long(dev, rng):
    """A matmul of symbolic sizes reads B[k, j] down B's columns along its reduction: a
    block per output element would read each column far apart, so it keeps its kernel of
    a thread per output (one kernel for every length of k); so does a column sum."""
    from jitdl.runtime.cuda import ByRowLength

    @jd.compute(dynamic=True)
    def col_sum(X):
        return jnp.sum(X, axis=0)
    a, b = rng.standard_normal((40, 300)), rng.standard_normal((300, 33))
    close(on_gpu(dev, dyn_matmul, a, b), a @ b, rtol=1e-12, atol=1e-12)
    close(on_gpu(dev, col_sum, b), b.sum(axis=0), rtol=1e-12, atol=1e-12)
    for f, args in ((dyn_matmul, (a, b)), (col_sum, (b,))):
        assert not any(isinstance(k, ByRowLength) for k in f._kernels.values())
        assert "__shfl_down_sync" not in f.cuda_source(*args)


def test_a_kernel_symbolic_in_some_sizes_splits_along_the_axis_the_fixed_one_does(dev, rng):
    """Found by review: max over axes (0, 2) of (300, 5, 400) with its first size symbolic
    split the 400-long axis into parts of 4 (4 of each block's 256 threads at work, each
    walking all 300 rows), where the kernel of its shapes splits the first axis and its
    threads read along the last: a kernel symbolic in some sizes is taken only where its
    splits are along the same axes, else the call compiles for its shapes."""
    from jitdl import eager
    eager.clear()
    x = rng.standard_normal((300, 5, 400))
    close(on_gpu(dev, lambda a: jnp.max(a, axis=(0, 2)), x), x.max(axis=(0, 2)), rtol=0)
    (k,) = [getattr(k, "kernel", k) for k in eager._kernels.values()]
    assert k.dims is None       # (no candidate splits the first axis: the shapes' kernel)
    fixed = jd.compute(lambda a: jnp.max(a, axis=(0, 2))).cuda_source(x)
    assert [ln.split("<<<")[1] for ln in k.texts["cuda"].splitlines() if "<<<" in ln] == \
        [ln.split("<<<")[1] for ln in fixed.splitlines() if "<<<" in ln]


def test_splits_and_rows_have_budgets_of_their_own(dev, rng, monkeypatch):
    """Found by review: compilations for splits counted toward the budget of rows (one
    counter), so rows of a new length ran the kernel for long rows at once."""
    from jitdl import eager
    eager.clear()
    monkeypatch.setattr(eager, "_LENGTHS_MOST", 2)
    for shape in [(4, 30001), (5, 30001), (6, 30001), (300, 257)]:
        x = rng.standard_normal(shape)
        close(on_gpu(dev, lambda a: jnp.sum(a, axis=1), x), x.sum(axis=1), rtol=1e-12)
    (k,) = [getattr(k, "kernel", k) for key, k in eager._kernels.items()
            if (300, 257) in key[2]]
    assert "257]" in k.texts["loop_ir"]          # (a kernel for rows of 257)


@pytest.mark.parametrize("op", ["sum", "prod", "nansum"])
def test_totals_of_unsigned_gpu_arrays_are_uint64(dev, rng, op):
    """NumPy (and CuPy) sum and multiply unsigned integers in uint64; a GPU array's total
    was jitdl's int64 kernel (a host array's goes to NumPy's function, as this one now
    goes to the array module's)."""
    x = rng.integers(0, 256, (3, 7)).astype(np.uint8)
    for kwargs in ({}, {"axis": 1}, {"axis": 0, "keepdims": True}):
        got = gpu_op(dev, lambda a: getattr(jnp, op)(a, **kwargs), x)
        want = getattr(np, op)(x, **kwargs)
        assert got.dtype == np.uint64, (kwargs, got.dtype)
        np.testing.assert_array_equal(got, want)


def test_op_library_keeps_one_kernel_for_every_size_where_it_serves(dev, rng):
    """Many short rows and a whole array keep the kernel of symbolic extents: a second
    size compiles nothing."""
    from jitdl import eager
    eager.clear()
    for shape in [(600, 20), (700, 30)]:
        x = rng.standard_normal(shape)
        close(on_gpu(dev, lambda a: jnp.sum(a, axis=1), x), x.sum(axis=1), rtol=1e-12)
    for n in (5000, 7001):
        x = rng.standard_normal(n)
        close(on_gpu(dev, jnp.sum, x), np.asarray(x.sum()), rtol=1e-12)
    kernels = [getattr(k, "kernel", k) for k in eager._kernels.values()]
    assert len(kernels) == 4 and all(k.dims is not None for k in kernels)


@pytest.mark.parametrize("f, want, shape, dtype", [
    (lambda X: jd.numpy.sum(X, axis=0), lambda x: x.sum(axis=0), (4001, 96), F32),
    (lambda X: jd.numpy.max(X, axis=1), lambda x: x.max(axis=1), (3, 2000, 64), F64),
    (lambda X: jd.numpy.mean(X, axis=0), lambda x: x.mean(axis=0), (2500, 200), F32),
    (lambda X: jd.numpy.var(X, axis=0), lambda x: x.var(axis=0), (3000, 100), F64),
    (lambda X: jd.numpy.sum(X, axis=(0, 1)), lambda x: x.sum(axis=(0, 1)), (7, 900, 48),
     np.int32),
    (lambda X: jd.numpy.min(X, axis=0), lambda x: x.min(axis=0), (300, 1000), F32),
    (lambda X: jd.numpy.sum(X, axis=0), lambda x: x.sum(axis=0), (5000, 32), F32),
    (lambda X: jd.numpy.sum(X, axis=(0, 1)), lambda x: x.sum(axis=(0, 1)), (8, 200, 64),
     F64),
    (lambda X: jd.numpy.max(X > 0.3, axis=0), lambda x: (x > 0.3).max(axis=0), (3000, 64),
     F64),
    (lambda X: jd.numpy.min(X > -0.3, axis=0), lambda x: (x > -0.3).min(axis=0), (3000, 64),
     F64)])
def test_column_reductions_with_fewer_outputs_than_threads_are_split(dev, rng, caplog, f,
                                                                      want, shape, dtype):
    """A column reduction ran a thread per column: 96 columns of 4001 rows on one block
    (512 columns of a million rows: two of the GPU's 132 multiprocessors; 32 columns,
    found by review, one warp). Its rows are
    split into parts, a thread per part and column (consecutive threads, consecutive
    columns), enough to fill the GPU, then combined; values against NumPy, extremes in
    the first and last rows so that every part is read."""
    x = rng.standard_normal(shape) * 10
    x[0] *= 3
    x[-1] *= -3
    x = x.astype(dtype)
    g = jd.compute(f)
    with caplog.at_level(logging.DEBUG, logger="jitdl.schedule"):
        grids = [int(ln.split(",")[0].strip("(")) for ln in _launches(g, x)]
    assert not [r for r in caplog.records if "failed" in r.getMessage()]  # (bool max: was)
    assert max(grids) >= 27 and len(grids) >= 2, _launches(g, x)
    rtol = 1e-5 if dtype == F32 else 1e-12
    close(on_gpu(dev, g, x), want(x.astype(F64) if dtype != np.int32 else x), rtol=rtol)


def test_column_split_plan_is_sized_by_the_target():
    """The parts of a column split fill the target's grid (multiprocessors x blocks of
    threads), never fewer than a few rows each; many columns, or few rows, keep a thread
    per column."""
    from jitdl.schedule import gpu
    from jitdl.target.cuda import CUDA
    f = jd.compute(lambda X: jd.numpy.sum(X, axis=0))
    for sms in (16, 132):
        target = CUDA(multiprocessors=sms)
        full = sms * gpu._WAVES * target.threads_per_block
        for shape in [(10 ** 6, 512), (4001, 96), (10 ** 5, 3)]:
            s = gpu.Schedule(f._graph((np.empty(shape, F32),))[0])
            (name,) = [n for n, st in s.stages.items() if st.is_reduce]
            k, across, parts, columns, _ = gpu._split_plan(s, name, target)
            if shape[1] >= 32:     # (one wave of the grid: no thread takes two parts)
                assert columns and parts == min(full // shape[1], shape[0] // 16)
                assert parts * shape[1] <= full
            else:
                assert not columns
        for shape in [(200, 100000), (20, 512)]:
            s = gpu.Schedule(f._graph((np.empty(shape, F32),))[0])
            (name,) = [n for n, st in s.stages.items() if st.is_reduce]
            plan = gpu._split_plan(s, name, target)
            assert plan is None or not plan[3], (shape, plan)


def test_op_library_compiles_for_a_bounded_number_of_shapes(dev, rng, monkeypatch):
    """Shapes that keep changing do not compile a kernel each without end: past
    eager._FIXED_MOST compilations of one op (and static arguments) for the sizes its
    plans need (here the count of columns of a column sum: its length is symbolic, and a
    new length compiles nothing), the kernel of symbolic extents serves the new ones (a
    thread per column), still NumPy's values; a kernel compiled before serves its sizes
    still (found by review). Rows past eager._LENGTHS_MOST lengths run the kernel for
    long rows (test_rows_whose_length_keeps_changing_share_a_kernel_for_long_rows)."""
    from jitdl import eager
    eager.clear()
    monkeypatch.setattr(eager, "_FIXED_MOST", 2)
    split = []
    for shape in [(5000, 64), (6001, 64), (5000, 65), (5000, 66), (7003, 65)]:
        x = rng.standard_normal(shape)
        close(on_gpu(dev, lambda a: jnp.sum(a, axis=0), x), x.sum(axis=0), rtol=1e-12)
        (k,) = [getattr(k, "kernel", k) for key, k in eager._kernels.items()
                if key[0] == "sum" and shape in key[2]]
        split.append(len(k.kernels) > 1)
    assert split == [True, True, True, False, True]
    assert len({id(getattr(k, "kernel", k)) for k in eager._kernels.values()}) == 3


def test_vector_times_matrix_is_a_column_split(dev, rng):
    """w @ X reads w[k], which walks no column, and X down its columns: the column split
    (found by a second review: a rule that every streamed read must walk columns gave it
    a block per column reading rows far apart)."""
    w, x = rng.standard_normal(5000), rng.standard_normal((5000, 64))
    x[0] *= 5
    x[-1] *= -5
    grids = [int(ln.split(",")[0].strip("(")) for ln in _launches(jd.compute(
        lambda a, b: jd.numpy.dot(a, b)), w, x)]
    assert max(grids) >= 27 and len(grids) >= 2, grids
    close(on_gpu(dev, jnp.dot, w, x), w @ x, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m,k,n", [(64, 32, 64), (70, 45, 50), (1, 3, 33)])
def test_a_shared_copy_read_through_register_copies(dev, rng, m, k, n):
    """A stage computed at a loop may be read by one computed at a loop inside it: the
    shared tiles at k.o cover what the register copies at k.i read (it was refused: the
    register copy 'reads A_cache outside loop k.o')."""
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    from test_cuda_codegen import two_level_schedule
    got, src = run_schedule(dev, matmul, [a, b], two_level_schedule)
    close(got, a @ b, rtol=1e-12, atol=1e-12)
    body = src.split("__global__")[1]
    assert "__shared__" in body and "A_cache_l[" in body and "A_cache_cache_l[" in body
    assert body.index("A_cache_l[") < body.index("for (int k_i")


@pytest.mark.parametrize("m,k,n", [(64, 64, 64), (37, 29, 53), (1, 1, 1)])
def test_the_tvm_tutorial_matmul_with_nested_compute_at(dev, rng, m, k, n):
    """TVM's GPU matmul schedule as its users write it: shared copies at k.o and register
    copies at k.i of C's local cache, itself computed at C's thread loop. It was refused
    ("nested compute_at is not supported yet"); lowered naively, each thread filled its
    own rows of the block's shared tile (the threads around the cache counted as outer
    loops: wrong sums on 64^3). The shared tile spans the block's threads; barriers
    around its fill; every element of out (NaN before) written."""
    from test_cuda_codegen import tvm_tutorial_schedule
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    got, src = run_schedule(dev, matmul, [a, b], tvm_tutorial_schedule,
                            out=np.full((m, n), np.nan))
    close(got, a @ b, rtol=1e-12, atol=1e-12)
    body = src.split("__global__")[1]
    assert body.count("__syncthreads();") >= 2 and "C_local_l[" in body
    if m == 64:                     # (a block's 32 rows by 8 of k)
        assert "__shared__ __align__(16) double A_cache_l[256];" in body


@jd.compute
def reversed_exp(X):
    n, m = X.shape
    E = jd.tensor((n, m), lambda i, j: jd.exp(X[i, j]), name="E")
    return jd.tensor((n, m), lambda i, j: E[i, m - 1 - j] * 2.0, name="Y")


@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("width", [32, 100, 128])
def test_a_producer_whose_loop_is_bound_at_a_block_loop_shares_its_block(dev, rng, width,
                                                                          when):
    """E's column loop bound to threadIdx.x, E computed at Y's row loop (blockIdx.x), Y
    reading E's row backwards. Bound before the compute_at, E's block was a copy per
    thread, in which each thread computed only its own element, so Y read elements no
    thread had written (all 400 NaN on the emulator); bound after it (TVM's order), the
    bind was refused ("the data loops of E cover the block ...; not fused or bound").
    The block is one shared buffer now, filled between barriers."""
    def sched(s, cfg):
        Y, E = s["Y"], s["E"]
        s.bind(Y.axis[0], "blockIdx.x")
        s.bind(s.split(Y.axis[1], width)[1], "threadIdx.x")
        if when == "before":
            s.bind(E.axis[1], "threadIdx.x")
        s.compute_at(E, Y, Y.axis[0])
        if when == "after":
            s.bind(E.axis[1], "threadIdx.x")
    x = rng.standard_normal((4, 100))
    got, src = run_schedule(dev, reversed_exp, [x], sched, out=np.full(x.shape, np.nan))
    close(got, 2 * np.exp(x[:, ::-1]), rtol=1e-12, atol=1e-12)
    assert "__shared__ __align__(16) double E_l[100];" in src
    assert src.count("__syncthreads();") >= 2


@pytest.mark.parametrize("rows,ty", [(2, 1), (3, 1), (4, 4), (3, 3)])
def test_a_shared_block_of_several_rows_with_a_bound_loop(dev, rng, rows, ty):
    """E's column loop bound to threadIdx.x, E computed at Y's block loop of `rows` rows
    (those run serially, or on threadIdx.y where ty > 1): E's block has a row loop
    around its bound one, which was spread over the block's threads like a shared copy's
    loops (`jd_f < rows`, so only threads 0..rows-1 ran a row, each writing its own
    column of it: 396 of 4x100 NaN for 2 rows). Each thread now computes its column of
    every row of the block."""
    def sched(s, cfg):
        Y, E = s["Y"], s["E"]
        io, ii = s.split(Y.axis[0], rows)
        s.bind(io, "blockIdx.x")
        if ty > 1:
            s.bind(ii, "threadIdx.y")
        s.bind(s.split(Y.axis[1], 32)[1], "threadIdx.x")
        s.compute_at(E, Y, io)
        s.bind(E.axis[1], "threadIdx.x")
    for shape in [(4, 100), (7, 33), (1, 5)]:
        x = rng.standard_normal(shape)
        got, src = run_schedule(dev, reversed_exp, [x], sched, out=np.full(shape, np.nan))
        close(got, 2 * np.exp(x[:, ::-1]), rtol=1e-12, atol=1e-12)


def test_prefetch_before_a_loop_that_runs_no_step(dev, rng):
    """A shared copy at k.o prefetched one step ahead: a dynamic row shorter than the k
    tile runs no whole step, and the first step's fetch (before the loop) read past A
    (A[3] of 3 elements). Rows of A fewer than the tile's (2 of 16) guard the copy."""
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        bi, i1 = s.split(i, 16)
        ti, ii = s.split(i1, 2)
        bj, j1 = s.split(j, 16)
        tj, jj = s.split(j1, 2)
        ko, ki = s.split(C.reduce_axis[0], 5)
        s.reorder(bi, bj, ti, tj, ko, ki, ii, jj)
        for x, tag in ((bi, "blockIdx.y"), (bj, "blockIdx.x"), (ti, "threadIdx.y"),
                       (tj, "threadIdx.x")):
            s.bind(x, tag)
        s.compute_at(s.cache_read("A", [C], "shared"), C, ko)
    f = jd.compute(matmul.pyfunc, dynamic=True)
    for m, k, n in [(1, 3, 33), (2, 7, 40)]:
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        got, src = run_schedule(dev, f, [a, b], sched)
        assert "jd_pf0" in src
        # the copy keeps its constant loops under the guard of A's rows, shared out over
        # the threads and prefetched: partitioned at the guard, its loop to
        # min(A_n0 - i_o*16, 16) ran whole on every thread of the block
        assert "d0_r < jd_imin" not in src
        close(got, a @ b, rtol=1e-12, atol=1e-12)


def test_average_returned_of_gpu_arrays(dev, rng):
    """jnp.average(..., returned=True) of GPU arrays: its second result, the weights'
    sum, went through NumPy's asanyarray (a 0-d object array here, an error on CuPy's
    arrays) and came back as the float 1.0 or an AxisError; now the array module's."""
    x = rng.standard_normal((2, 3, 4))
    w = rng.random((2, 3, 4)) + 0.1
    for kw in (dict(axis=1), dict(axis=1, weights=w), {}, dict(axis=-1, weights=w[0, 0]),
               dict(axis=[0, 2], weights=w, keepdims=True)):
        want = np.average(x, returned=True, **kw)
        if "weights" in kw:
            got = on_gpu(dev, lambda a, b: jnp.average(
                a, returned=True, **{**kw, "weights": b}), x, kw["weights"])
        else:
            got = on_gpu(dev, lambda a: jnp.average(a, returned=True, **kw), x)
        for g, e in zip(got, want):
            close(g, e)


def test_a_background_job_keeps_no_reference_to_a_gpu_argument(dev, monkeypatch):
    """A background job kept the call's GPU array by reference until it ran (a change
    the caller made meanwhile was what the tuning saw; a large array stayed alive): it
    keeps a sketch now, and tunes on a GPU array made from it, under the call's key."""
    import gc
    import threading
    import weakref
    from jitdl.autotune import background
    from jitdl.autotune.task import Measurement
    jobs = []

    class Idle:                       # jobs are made and kept, run below by hand
        def submit(self, job):
            jobs.append(job)
    monkeypatch.setattr(background, "get", lambda: Idle())
    f = jd.compute(lambda X: jd.tensor(X.shape, lambda i: X[i] * 2.0, name="Y"),
                   autotune="background")
    x = DeviceArray(np.linspace(-1, 1, 256, dtype=F32))
    f(x)
    key, alive = f._key([x]), weakref.ref(x)
    del x
    gc.collect()
    assert alive() is None            # the job holds no reference to it
    (job,) = jobs
    seen = []

    class Fake:                       # a runner that keeps what it was asked to time
        def measure(self, task, configs):
            seen.append([np.array(a) for a in task.args])
            return [Measurement(c, None, "run: not timed") for c in configs]
    job.budget = (2, None)
    f._tune_job(job, Fake(), threading.Event())
    assert job.key == key and seen
    (a,) = seen[0]
    assert a.shape == (256,) and a.dtype == F32 and a.min() == -1.0 and a.max() == 1.0


class _OnGPU(DeviceArray):
    """A device array that says which GPU it lives on, as CuPy's do (a.device.id)."""

    def __init__(self, host, gpu):
        super().__init__(host)
        self.device = types.SimpleNamespace(id=gpu)


def test_arrays_on_another_gpu_than_the_current_one_are_refused(dev, rng, monkeypatch):
    """An argument on another GPU than the current device was refused, but an out= array
    there was not: the kernel, launched on the current GPU, wrote through the other's
    pointer (CuPy refuses such a launch). Both are ArgumentErrors naming the array and the
    GPUs; an out= on the current GPU is written as before."""
    monkeypatch.setattr(cuda_runtime, "current_device", lambda: 0)

    @jd.compute
    def twice(A):
        return A * 2
    x = rng.standard_normal((4, 5))
    with pytest.raises(jd.ArgumentError, match=r"twice\(\): out= for .* is on GPU 1, but "
                                               r"the current device is GPU 0; pass an out="):
        twice(DeviceArray(x), out=_OnGPU(np.full_like(x, np.nan), 1))
    with pytest.raises(jd.ArgumentError, match=r"argument 'A' is on GPU 1, but the current "
                                               r"device is GPU 0; call it inside"):
        twice(_OnGPU(x, 1))
    out = _OnGPU(np.full_like(x, np.nan), 0)
    twice(_OnGPU(x, 0), out=out)
    close(out.host, x * 2, rtol=1e-12)


def test_out_errors_of_gpu_kernels_are_the_cpu_ones_at_the_callers_line(dev, rng):
    """A GPU kernel's out= errors named no line (the CPU kernel's name the call's), and
    its out= checks were looser: one array for two outputs was taken as the tuple of its
    rows (out=a (2, 5) array for two results of (5,) wrote one into each row), and two
    outputs given the same array were both written there. Each is now the CPU kernel's
    error at the caller's line."""
    import inspect

    for dynamic in (False, True):
        @jd.compute(dynamic=dynamic)
        def two(X):
            return jnp.multiply(X, 2), jnp.add(X, 1)
        x = rng.standard_normal(5)
        rows, same = DeviceArray(np.full((2, 5), np.nan)), DeviceArray(np.full(5, np.nan))
        for out, what in (((DeviceArray(np.empty(6)), DeviceArray(np.empty(5))),
                           "expected shape"),
                          ((DeviceArray(np.empty(5)),), "must hold 2"),
                          (rows, "must be a tuple of 2 arrays"),
                          ((same, same), "share memory"),
                          ((np.empty(5), DeviceArray(np.empty(5))), "expected a GPU array")):
            with pytest.raises(jd.ArgumentError, match=what) as e:
                line = inspect.currentframe().f_lineno + 1
                two(DeviceArray(x), out=out)
            assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line), what
        assert np.isnan(rows.host).all() and np.isnan(same.host).all()
        a, b = DeviceArray(np.full(5, np.nan)), DeviceArray(np.full(5, np.nan))
        two(DeviceArray(x), out=(a, b))
        close(a.host, x * 2, rtol=1e-12)
        close(b.host, x + 1, rtol=1e-12)


def test_out_arrays_sharing_memory_are_refused_with_target_cuda(dev, rng):
    """f(x, target="cuda", out=(o, o)) of NumPy arrays wrote both results into o, the
    second over the first (the CPU kernel, and now the GPU's, refuse it): refused before
    the work, at the caller's line, with NumPy and with GPU out= arrays."""
    import inspect

    @jd.compute
    def two(X):
        return jnp.multiply(X, 2), jnp.add(X, 1)
    x = rng.standard_normal(5)
    for o in (np.full(5, np.nan), DeviceArray(np.full(5, np.nan))):
        with pytest.raises(jd.ArgumentError, match="out= arrays 0 and 1 share memory") as e:
            line = inspect.currentframe().f_lineno + 1
            two(x, target="cuda", out=(o, o))
        assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)
        assert np.isnan(o if isinstance(o, np.ndarray) else o.host).all()
    a, b = np.full(5, np.nan), np.full(5, np.nan)
    two(x, target="cuda", out=(a, b))
    close(a, x * 2, rtol=1e-12)
    close(b, x + 1, rtol=1e-12)


def test_interleaved_gpu_out_views_of_one_buffer_are_each_their_own(dev, rng):
    """out=(b[0::2], b[1::2]) of one GPU buffer was refused ('share memory') by the GPU
    kernel and by a call with target=, whose checks asked the device's may_share_memory
    (CuPy's: bounds only), where the CPU kernel (np.shares_memory, exact) writes them:
    they share no element. Views that do overlap are still refused."""
    for dynamic in (False, True):
        @jd.compute(dynamic=dynamic)
        def two(X):
            return jnp.multiply(X, 2), jnp.add(X, 1)
        x = rng.standard_normal(5)
        for call in (lambda out: two(DeviceArray(x), out=out),
                     lambda out: two(x, target="cuda", out=out),
                     lambda out: two(DeviceArray(x), target="cpu", out=out)):
            host = np.full(10, np.nan)
            call((DeviceArray(host[0::2]), DeviceArray(host[1::2])))
            close(host[0::2], x * 2, rtol=1e-12)
            close(host[1::2], x + 1, rtol=1e-12)
            host = np.full(9, np.nan)
            with pytest.raises(jd.ArgumentError, match="share memory"):
                call((DeviceArray(host[0:5]), DeviceArray(host[4:9])))
            assert np.isnan(host).all()


def test_out_given_as_a_tuple_or_list_returns_what_the_kernels_return_with_target(dev, rng):
    """f(x, target="cuda", out=(o,)) of one result returned the tuple (o,), and out=[a, b]
    of two the list, where the CPU and GPU kernels (and NumPy's ufuncs) return o and the
    tuple (a, b): the same now with target='cuda' and target='cpu'."""
    @jd.compute
    def one(X):
        return jnp.multiply(X, 2)

    @jd.compute
    def two(X):
        return jnp.multiply(X, 2), jnp.add(X, 1)
    x = rng.standard_normal(5)
    for target, arg, new in (("cuda", x, np.empty), ("cpu", DeviceArray(x),
                                                     lambda n: DeviceArray(np.empty(n)))):
        o = new(5)
        assert one(arg, target=target, out=(o,)) is o
        assert one(arg, target=target, out=[o]) is o
        assert one(arg, target=target, out=o) is o
        a, b = new(5), new(5)
        got = two(arg, target=target, out=[a, b])
        assert type(got) is tuple and got[0] is a and got[1] is b
        host = (lambda v: v) if target == "cuda" else (lambda v: v.host)
        close(host(a), x * 2, rtol=1e-12)
        close(host(b), x + 1, rtol=1e-12)


def test_a_wrong_out_array_with_target_leaves_the_others_unwritten(dev, rng):
    """two(x, target="cuda", out=(a, b)) with b of the wrong shape or dtype copied the
    first result into a before it raised for b (the kernels check every out= array
    before they write any): each is now checked first, and the error says which."""
    @jd.compute
    def two(X):
        return jnp.multiply(X, 2), jnp.add(X, 1)
    x = rng.standard_normal(5)
    for target, arg, new in (("cuda", x, lambda n, t=F64: np.full(n, np.nan, t)),
                             ("cpu", DeviceArray(x),
                              lambda n, t=F64: DeviceArray(np.full(n, np.nan, t)))):
        host = (lambda v: v) if target == "cuda" else (lambda v: v.host)
        for b in (new(6), new(5, F32)):
            a = new(5)
            with pytest.raises(jd.ArgumentError, match="out= array 1: expected shape"):
                two(arg, target=target, out=(a, b))
            assert np.isnan(host(a)).all() and np.isnan(host(b)).all()


def test_a_read_only_out_or_a_bad_target_names_the_callers_line(dev, rng):
    """With target=, a read-only out= array and an unknown target raised without the
    caller's line (0f2c4bb gave it to the call's other out= errors); both name it now,
    as the kernels' read-only error does."""
    import inspect

    @jd.compute
    def one(X):
        return jnp.multiply(X, 2)
    x = rng.standard_normal(5)
    ro = np.full(5, np.nan)
    ro.flags.writeable = False
    for arg, kw, what in ((x, dict(target="cuda", out=ro), "read-only"),
                          (DeviceArray(x), dict(target="cpu", out=ro), "read-only"),
                          (x, dict(target="tpu"), "expected 'cpu' or 'cuda'")):
        with pytest.raises(jd.ArgumentError, match=what) as e:
            line = inspect.currentframe().f_lineno + 1
            one(arg, **kw)
        assert e.value.loc is not None and (e.value.loc.filename, e.value.loc.lineno) == (
            __file__, line), what
