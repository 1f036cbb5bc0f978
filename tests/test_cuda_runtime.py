"""The CUDA target end to end: dispatch of GPU arrays, the launch plan, outputs and
intermediates, out=, index checks, target= overrides, the disk cache of cubins, jd.numpy
on GPU arrays; every result against NumPy in float64 on random inputs.

Each test runs on two devices: "gpu" (CuPy on a real GPU; skipped where there is none)
and "emulated" (the generated CUDA C compiled for the CPU by tests/_cuda_emu.py behind
the same backend interface; skipped without g++). The emulated device fills fresh
buffers with a non-zero byte pattern, so an element a kernel fails to write shows.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import jitdl as jd
from jitdl.runtime import cuda as cuda_runtime
from jitdl.target.cuda import cupy_or_none


class Gpu:
    """What a test needs of a device: arrays to and from it, and its backend."""

    def __init__(self, name, backend, to_device, to_host):
        self.name, self.backend = name, backend
        self.put, self.get = to_device, to_host


def _emulator():
    if shutil.which("g++") is None:
        pytest.skip("no g++: the CUDA emulator compiles generated CUDA C with it")
    try:
        import _cuda_emu
    except ImportError as e:
        pytest.skip(f"the CUDA emulator is not available ({e})")
    from _emu_backend import EmulatedDevice
    return EmulatedDevice(_cuda_emu)


@pytest.fixture(params=["gpu", "emulated"])
def gpu(request):
    saved = list(cuda_runtime._backend)
    if request.param == "gpu":
        cp = cupy_or_none()
        if cp is None:
            pytest.skip("no GPU that CuPy can see (these run with --target cuda on a GPU "
                        "machine; the 'emulated' variant runs the same code on the CPU)")
        cuda_runtime._backend[:] = []
        yield Gpu("gpu", cuda_runtime.backend(), cp.asarray, cp.asnumpy)
    else:
        from _emu_backend import DeviceArray
        dev = _emulator()
        cuda_runtime._backend[:] = [dev]
        yield Gpu("emulated", dev, lambda a: DeviceArray(np.array(a)),
                  lambda a: np.array(a.host))
    cuda_runtime._backend[:] = saved


F32, F64 = np.float32, np.float64


@jd.compute
def saxpy(a, X, Y):
    Z[i] = a * X[i] + Y[i]
    return Z


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute(dynamic=True)
def scale_rows(X, w):
    return jd.tensor(X.shape, lambda i, j: X[i, j] * w[j] - 1.0, name="Y")


@jd.compute
def gather(X, idx):
    Y[i] = X[idx[i]]
    return Y


@jd.compute
def two_outputs(X):
    S[i] = X[i] + 1.0
    P[i] = X[i] * 2.0
    return S, P


def test_elementwise_with_scalar(gpu, rng):
    x, y = rng.standard_normal(1000), rng.standard_normal(1000)
    got = saxpy(2.5, gpu.put(x), gpu.put(y))
    assert cuda_runtime.is_device_array(got)
    np.testing.assert_allclose(gpu.get(got), 2.5 * x + y, rtol=1e-12)


def test_softmax_rows_long_and_short(gpu, rng):
    for shape in [(37, 300), (5, 3000), (64, 20)]:
        x = rng.standard_normal(shape).astype(F32)
        got = gpu.get(softmax(gpu.put(x)))
        x64 = x.astype(F64)
        e = np.exp(x64 - x64.max(axis=1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=2e-5,
                                   atol=1e-7)


@pytest.mark.parametrize("shapes", [((64, 64), (64, 64)), ((100, 37), (37, 53)),
                                    ((300, 70), (70, 260))])
def test_matmul_tiled(gpu, rng, shapes):
    a = rng.standard_normal(shapes[0]).astype(F32)
    b = rng.standard_normal(shapes[1]).astype(F32)
    got = gpu.get(matmul(gpu.put(a), gpu.put(b)))
    want = a.astype(F64) @ b.astype(F64)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.parametrize("knobs", [
    {"tm": 8, "tn": 8, "ty": 8, "tx": 16, "bk": 16, "jgroups": 2},
    {"tm": 4, "tn": 8, "ty": 16, "tx": 8, "bk": 8, "jgroups": 2},
    {"tm": 2, "tn": 4, "ty": 32, "tx": 16, "bk": 4},
])
def test_matmul_tile_knobs(gpu, rng, knobs):
    """The tuner's tile shapes, the spread column runs among them, on shapes the tiles
    divide (the next step's tiles then go through registers) and on shapes they do not."""
    f = matmul.with_config(**{f"C.{k}": v for k, v in knobs.items()})
    for (m, k, n) in [(128, 48, 256), (70, 37, 130), (200, 40, 300)]:
        a = rng.standard_normal((m, k)).astype(F32)
        b = rng.standard_normal((k, n)).astype(F32)
        got = gpu.get(f(gpu.put(a), gpu.put(b)))
        want = a.astype(F64) @ b.astype(F64)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_dynamic_sizes_one_kernel(gpu, rng):
    for shape in [(3, 7), (20, 33), (1, 5), (9, 1)]:
        x = rng.standard_normal(shape)
        w = rng.standard_normal(shape[1])
        got = gpu.get(scale_rows(gpu.put(x), gpu.put(w)))
        np.testing.assert_allclose(got, x * w - 1.0, rtol=1e-12)
    keys = [k for k in scale_rows._kernels if any(
        isinstance(p, tuple) and len(p) >= 3 and p[1] == (None, None) for p in k)]
    assert len(keys) == 1, scale_rows._kernels.keys()


def test_several_outputs_and_out(gpu, rng):
    x = rng.standard_normal(50)
    s, p = two_outputs(gpu.put(x))
    np.testing.assert_allclose(gpu.get(s), x + 1)
    np.testing.assert_allclose(gpu.get(p), x * 2)
    o1, o2 = gpu.put(np.zeros(50)), gpu.put(np.zeros(50))
    r = two_outputs(gpu.put(x), out=(o1, o2))
    np.testing.assert_allclose(gpu.get(o1), x + 1)
    np.testing.assert_allclose(gpu.get(o2), x * 2)
    assert gpu.get(r[0]).shape == (50,)
    with pytest.raises(jd.ArgumentError, match=r"out= for S: expected shape \(50,\)"):
        two_outputs(gpu.put(x), out=(gpu.put(np.zeros(49)), o2))
    with pytest.raises(jd.ArgumentError, match="expected a GPU array"):
        two_outputs(gpu.put(x), out=(np.zeros(50), np.zeros(50)))


def test_index_check_reports_the_bad_index(gpu, rng):
    x = rng.standard_normal(10)
    idx = np.array([1, 4, 9, 0], np.int64)
    np.testing.assert_allclose(gpu.get(gather(gpu.put(x), gpu.put(idx))), x[idx])
    with pytest.raises(IndexError, match=r"is 12, outside \[0, 10\)"):
        gather(gpu.put(x), gpu.put(np.array([1, 12, 0, 0], np.int64)))


def test_mixed_host_and_device_is_an_error(gpu, rng):
    x = rng.standard_normal(8)
    with pytest.raises(jd.ArgumentError, match=r"argument 'X' is on the GPU and argument "
                                               r"'Y' in host memory"):
        saxpy(1.0, gpu.put(x), x)


def test_target_override_copies(gpu, rng):
    x, y = rng.standard_normal(30), rng.standard_normal(30)
    got = saxpy(3.0, x, y, target="cuda")              # NumPy in: NumPy out, GPU inside
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, 3 * x + y)
    mixed = saxpy(3.0, gpu.put(x), y, target="cuda")   # mixed is fine when told where
    assert cuda_runtime.is_device_array(mixed)
    np.testing.assert_allclose(gpu.get(mixed), 3 * x + y)
    back = saxpy(3.0, gpu.put(x), gpu.put(y), target="cpu")
    assert cuda_runtime.is_device_array(back)          # computed on the host, returned
    np.testing.assert_allclose(gpu.get(back), 3 * x + y)


def test_numpy_ops_on_device_arrays(gpu, rng):
    jnp = jd.numpy
    x = rng.standard_normal((6, 40))
    y = rng.standard_normal(40)
    np.testing.assert_allclose(gpu.get(jnp.add(gpu.put(x), gpu.put(y))), x + y)
    np.testing.assert_allclose(gpu.get(jnp.exp(gpu.put(x))), np.exp(x), rtol=1e-12)
    np.testing.assert_allclose(gpu.get(jnp.sum(gpu.put(x), axis=1)), x.sum(axis=1))
    np.testing.assert_allclose(gpu.get(jnp.max(gpu.put(x), axis=0)), x.max(axis=0))
    total = jnp.sum(gpu.put(x))
    np.testing.assert_allclose(float(gpu.get(total)), x.sum())


def test_empty_output_launches_nothing(gpu):
    x = np.empty((0,))
    got = saxpy(1.0, gpu.put(x), gpu.put(x))
    assert gpu.get(got).shape == (0,)


def test_timeit_synchronises(gpu, rng):
    x = gpu.put(rng.standard_normal(100))
    t = saxpy.timeit(1.0, x, x, repeat=2, min_time=0.001)
    assert t > 0


def test_cubin_cached_for_a_new_process(gpu, tmp_path, rng):
    """A warm process loads the stored binary without compiling (NVRTC, or here the
    emulated device's compile step) and gets the same answer."""
    if gpu.name == "gpu":
        pytest.skip("checked through the emulated device (a child process on a real "
                    "GPU would need this test's device set-up too)")
    script = tmp_path / "warm.py"
    script.write_text(
        "import sys, json, numpy as np\n"
        "sys.path.insert(0, %r)\n"
        "import jitdl as jd\n"
        "from jitdl.runtime import cuda\n"
        "import _cuda_emu\n"
        "from _emu_backend import EmulatedDevice, DeviceArray\n"
        "dev = EmulatedDevice(_cuda_emu); cuda._backend[:] = [dev]\n"
        "@jd.compute\n"
        "def f(X):\n"
        "    return jd.tensor(X.shape, lambda i: X[i] * 3.0 + 1.0, name='Y')\n"
        "x = np.arange(20.0)\n"
        "y = f(DeviceArray(x)).host\n"
        "assert np.allclose(y, x * 3 + 1), y\n"
        "print(json.dumps({'compiles': dev.compiles, 'events': f.cache_info()['events']}))\n"
        % os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, JITDL_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["compiles"] == 1 and runs[0]["events"][0]["result"] == "compiled"
    assert runs[1]["compiles"] == 0, runs[1]
    assert runs[1]["events"][0]["result"] == "hit"
    assert runs[1]["events"][0]["loader"] == "cuda module"


@pytest.mark.parametrize("op", ["sin", "fabs", "floor", "expm1", "isnan", "rint"])
def test_ops_named_like_c_math_functions(gpu, rng, op):
    """jd.numpy.sin's output buffer is named `sin`: it must not shadow the C function."""
    x = rng.standard_normal(40) * 3
    got = gpu.get(getattr(jd.numpy, op)(gpu.put(x)))
    np.testing.assert_allclose(got, getattr(np, op)(x), rtol=1e-13)


def test_checked_reads_of_dynamic_sizes(gpu, rng):
    """A run-time index check against a size the kernel reads nowhere else (X_n0) passes
    that size to the kernel; a failed check reads nothing (an empty axis has no element
    0 to read on a GPU) and raises IndexError."""
    @jd.compute(dynamic=True)
    def take_rows(X, ids):
        return jd.tensor((ids.shape[0], X.shape[1]), lambda i, j: X[ids[i], j], name="T")

    @jd.compute(dynamic=True)
    def clipped(X, ids):
        return jd.numpy.take(X, ids, axis=0, mode="clip")
    x, ids = rng.standard_normal((6, 5)), np.array([5, 0, 3], np.int64)
    np.testing.assert_allclose(gpu.get(take_rows(gpu.put(x), gpu.put(ids))), x[ids])
    with pytest.raises(IndexError, match=r"outside \[0, X_n0\) \(X_n0 = 6\)"):
        take_rows(gpu.put(x), gpu.put(np.array([6], np.int64)))
    np.testing.assert_allclose(gpu.get(clipped(gpu.put(x), gpu.put(ids + 4))),
                               np.take(x, ids + 4, axis=0, mode="clip"))
    # (the call now refuses it before the kernel runs, with NumPy's message)
    with pytest.raises(IndexError, match="outside|non-empty take from an empty axes"):
        clipped(gpu.put(np.empty((0, 5))), gpu.put(np.array([0], np.int64)))


@pytest.mark.parametrize("name", ["goto", "register", "volatile", "namespace", "jd_ok",
                                  "jd_idiv", "JD_INLINE", "floor", "dim3", "__syncthreads"])
def test_tensors_named_like_cxx_keywords_and_helpers(gpu, rng, name):
    """A tensor may be called anything: C++ keywords, jitdl's helpers (jd_ok, jd_idiv)
    and the compiler's names are renamed in the CUDA C."""
    @jd.compute
    def f(X, ids):
        return jd.tensor(ids.shape, lambda i: X[ids[i]] + X[i // 2], name=name)
    x, ids = rng.standard_normal(8), np.array([3, 0, 7, 7, 1, 2, 5, 4])
    got = gpu.get(f(gpu.put(x), gpu.put(ids)))
    np.testing.assert_allclose(got, x[ids] + x[np.arange(8) // 2])


def test_target_override_checks_out(gpu, rng):
    x, y = rng.standard_normal(12), rng.standard_normal(12)
    out = np.empty(12)
    assert saxpy(2.0, x, y, target="cuda", out=out) is out
    np.testing.assert_allclose(out, 2 * x + y)
    dev_out = gpu.put(np.zeros(12))
    saxpy(2.0, x, y, target="cuda", out=dev_out)          # NumPy in, GPU out
    np.testing.assert_allclose(gpu.get(dev_out), 2 * x + y)
    with pytest.raises(jd.ArgumentError, match=r"expected shape \(12,\) and dtype float64, "
                                               r"got shape \(2, 12\)"):
        saxpy(2.0, x, y, target="cuda", out=np.empty((2, 12)))
    with pytest.raises(jd.ArgumentError, match="got shape \\(12,\\) and dtype float32"):
        saxpy(2.0, x, y, target="cpu", out=np.empty(12, np.float32))


class _HostTensor:
    """Like a PyTorch CPU tensor: its class has __cuda_array_interface__, which raises
    AttributeError on the instance; NumPy reads it through __array__."""

    def __init__(self, a):
        self.a = a

    @property
    def __cuda_array_interface__(self):
        raise AttributeError("a CPU tensor has no CUDA array interface")

    def __array__(self, dtype=None, copy=None):
        return self.a


def test_a_host_tensor_is_not_a_gpu_array(rng):
    x = rng.standard_normal(6)
    assert not cuda_runtime.is_device_array(_HostTensor(x))
    np.testing.assert_allclose(jd.numpy.add(_HostTensor(x), 1.0), x + 1.0)


@pytest.mark.parametrize("order", ["AXB", "ABX", "XAB"])
def test_prefetched_copies_split_by_another_statement(gpu, rng, order):
    """Two shared copies filled in separate runs (a register copy between them): each
    run's next-step loads come after its own barrier only; loading the second copy's next
    tile after the first run's barrier would let the second run store step k + 1's data
    into step k (found by review: 1023 of 1024 outputs wrong)."""
    @jd.compute
    def mm3(A, B, X):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j] * X[k], axis=k),
                         name="C")

    @jd.schedule(mm3, target="cuda")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        io, ii = s.split(i, 8)
        jo, ji = s.split(j, 32)
        ko, ki = s.split(k, 8)
        s.reorder(io, jo, ii, ji, ko, ki)
        s.bind(io, "blockIdx.y")
        s.bind(jo, "blockIdx.x")
        s.bind(ii, "threadIdx.y")
        s.bind(ji, "threadIdx.x")
        for name in order:
            c = s.cache_read(name, [C], "local" if name == "X" else "shared")
            s.compute_at(c, C, ko)
    a, b, x = (rng.standard_normal(s).astype(F32) for s in [(16, 32), (32, 64), (32,)])
    got = gpu.get(mm3(gpu.put(a), gpu.put(b), gpu.put(x)))
    want = (a.astype(F64) * x) @ b
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    assert "jd_pf" in mm3.cuda_source(a, b, x)


def test_gpu_arrays_of_other_dtypes_and_numpys_own_names_go_to_cupy(rng):
    """jd.numpy on CuPy arrays that jitdl does not compile (float16, complex, uint32...)
    and jd.numpy names that are NumPy's own (sort, cumsum) answer with CuPy's function of
    the same name, on the GPU, as NumPy's answer host arrays."""
    cp = cupy_or_none()
    if cp is None:
        pytest.skip("no GPU that CuPy can see (CuPy's functions serve these on a GPU)")
    jnp = jd.numpy
    x = rng.standard_normal((5, 7))
    for dt in (np.float16, np.complex64, np.uint32):
        a, b = cp.asarray(x.astype(dt)), cp.asarray((x[::-1] * 3).astype(dt))
        got = jnp.add(a, b)
        assert isinstance(got, cp.ndarray) and got.dtype == dt
        np.testing.assert_array_equal(cp.asnumpy(got), np.add(x.astype(dt), (x[::-1] * 3).astype(dt)))
        got = jnp.sum(a, axis=1)
        assert isinstance(got, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(got).astype(np.complex128),
                                   np.sum(x.astype(dt), axis=1).astype(np.complex128),
                                   rtol=1e-2 if dt == np.float16 else 1e-5)
    a = cp.asarray(x)
    for name in ("sort", "cumsum"):
        got = getattr(jnp, name)(a, axis=1)
        assert isinstance(got, cp.ndarray)
        np.testing.assert_allclose(cp.asnumpy(got), getattr(np, name)(x, axis=1))
    got = jnp.add(a, a, dtype=np.float16)
    assert isinstance(got, cp.ndarray) and got.dtype == np.float16


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


_A, _B, _V = (np.random.default_rng(1212).standard_normal(s) for s in [(6, 40), (6, 40), 40])
_X4 = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(F32)
# jd.numpy / jd.nn calls on device arrays (m: the module; a, b: (6, 40), v: (40,))
_ON_DEVICE = {
    "add": lambda m, a, b, v: m.add(a, b), "add_row": lambda m, a, b, v: m.add(a, v),
    "multiply_scalar": lambda m, a, b, v: m.multiply(a, 2.5),
    "exp": lambda m, a, b, v: m.exp(a), "power": lambda m, a, b, v: m.power(m.abs(a), 1.5),
    "square_power": lambda m, a, b, v: m.power(a, 2), "less": lambda m, a, b, v: m.less(a, b),
    "where": lambda m, a, b, v: m.where(m.greater(a, 0), a, b),
    "clip": lambda m, a, b, v: m.clip(a, -0.5, 0.5),
    "floor_divide": lambda m, a, b, v: m.floor_divide(a, 0.3),
    "sum": lambda m, a, b, v: m.sum(a), "sum_rows": lambda m, a, b, v: m.sum(a, axis=1),
    "sum_keepdims": lambda m, a, b, v: m.sum(a, axis=0, keepdims=True),
    "mean": lambda m, a, b, v: m.mean(a, axis=1), "max": lambda m, a, b, v: m.max(a, axis=0),
    "argmax": lambda m, a, b, v: m.argmax(a, axis=1), "argmin": lambda m, a, b, v: m.argmin(a),
    "std": lambda m, a, b, v: m.std(a, axis=1), "all": lambda m, a, b, v: m.all(m.less(a, 3.0)),
    "matmul": lambda m, a, b, v: m.matmul(a, m.transpose(b)),
    "dot": lambda m, a, b, v: m.dot(a, v), "einsum": lambda m, a, b, v: m.einsum("ij,ij->i", a, b),
    "concatenate": lambda m, a, b, v: m.concatenate([a, b], axis=1),
    "pad": lambda m, a, b, v: m.pad(a, 1), "transpose": lambda m, a, b, v: m.transpose(a),
    "reshape": lambda m, a, b, v: m.reshape(a, (40, 6)),
    "norm": lambda m, a, b, v: m.linalg.norm(a, axis=1),
}
_NN_ON_DEVICE = {
    "relu": (lambda x: jd.nn.relu(x), lambda: np.maximum(_A, 0)),
    "softmax": (lambda x: jd.nn.softmax(x, axis=-1), lambda: _softmax(_A)),
    "layer_norm": (lambda x: jd.nn.layer_norm(x, (40,)), lambda: (
        _A - _A.mean(1, keepdims=True)) / np.sqrt(_A.var(1, keepdims=True) + 1e-5)),
    "leaky_relu": (lambda x: jd.nn.leaky_relu(x, 0.1), lambda: np.where(_A > 0, _A, 0.1 * _A)),
    "tanh": (lambda x: jd.nn.tanh(x), lambda: np.tanh(_A)),
    "max_pool2d": (lambda x: jd.nn.max_pool2d(x, 2), lambda: _X4.reshape(2, 3, 4, 2, 4, 2).max(
        (3, 5))),
}


def test_ops_called_on_device_arrays_answer_on_the_device(gpu):
    """jd.numpy and jd.nn functions called directly on GPU arrays (no harness), twice each
    (the second call takes whatever fast path the first one set up), return GPU arrays
    with NumPy's values: the host's fast paths leave GPU arrays alone."""
    for name, f in _ON_DEVICE.items():
        want = f(np, _A, _B, _V)
        for _ in range(2):
            got = f(jd.numpy, gpu.put(_A), gpu.put(_B), gpu.put(_V))
            assert cuda_runtime.is_device_array(got), (name, type(got))
            got = gpu.get(got)
            assert got.shape == np.shape(want) and got.dtype == np.asarray(want).dtype, name
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13, err_msg=name)
    for name, (f, want) in _NN_ON_DEVICE.items():
        x = _X4 if name == "max_pool2d" else _A
        for _ in range(2):
            got = f(gpu.put(x))
            assert cuda_runtime.is_device_array(got), (name, type(got))
            np.testing.assert_allclose(gpu.get(got), want(), rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("name, call", [
    ("add", lambda m, a, b: m.add(a.T, b.T)), ("multiply", lambda m, a, b: m.multiply(a.T, 2.5)),
    ("less", lambda m, a, b: m.less(a.T, b.T)), ("exp", lambda m, a, b: m.exp(a.T)),
    ("where", lambda m, a, b: m.where(m.greater(a.T, 0), a.T, b.T)),
    ("clip", lambda m, a, b: m.clip(a.T, -0.5, 0.5)),
    ("sum", lambda m, a, b: m.sum(a.T, axis=0)), ("max", lambda m, a, b: m.max(a.T, axis=1)),
    ("argmax", lambda m, a, b: m.argmax(a.T, axis=1)),
    ("mixed", lambda m, a, b: m.add(a.T, b[:, :30])),
    ("sliced", lambda m, a, b: m.add(a.T[::2], b.T[::2]))])
def test_transposed_device_operands_run_in_their_memory_order(gpu, rng, name, call):
    """jd.numpy's layout-free ops on transposed GPU arrays (a.T + b.T) run on their memory
    as it lies, as CuPy and NumPy do: a Fortran-ordered result and no copies (the
    emulator counts one launch per call; they were copied to C order, a launch each, and
    the result C-ordered); a mix of orders is copied and answers in C order."""
    from jitdl import eager
    eager.clear()           # (a kernel launches on the device it was made for: this one's)
    a = rng.standard_normal((30, 70))
    b = rng.standard_normal((70, 30) if name == "mixed" else (30, 70))
    want = call(np, a, b)
    for _ in range(2):
        A, B = gpu.put(a), gpu.put(b)
        n = getattr(gpu.backend, "launches", 0)
        got = call(jd.numpy, A, B)
        if gpu.name == "emulated" and name not in ("mixed", "sliced", "argmax"):
            assert gpu.backend.launches - n == 1 + (name == "where"), name   # (and greater)
        assert got.flags.f_contiguous == want.flags.f_contiguous and \
            got.flags.c_contiguous == want.flags.c_contiguous, name
        np.testing.assert_allclose(gpu.get(got), want, rtol=1e-12, atol=1e-13, err_msg=name)


@jd.compute
def _outer3(a, b, c):
    P[i, j, k] = a[i] * b[j] * c[k]
    return P


@jd.compute
def _outer3_sum(a, b, c):
    P[i, j, k] = a[i] * b[j] * c[k]
    S[i] = sum(P[i, j, k] for j in range(b.shape[0]) for k in range(c.shape[0]))
    return S


@jd.schedule(_outer3_sum, target="cuda")
def _stored(s, cfg):
    s.compute_root(s["P"])


def test_a_device_allocation_that_fails_names_the_buffer(gpu, rng):
    """A result or intermediate too large for the device (CuPy's OutOfMemoryError) is an
    AllocationError, a MemoryError, naming the function, the buffer, its shape and
    size: not CuPy's message alone. Small shapes of the same kernels are right."""
    a, b, c = (rng.standard_normal(n) for n in (7, 5, 9))
    np.testing.assert_allclose(gpu.get(_outer3_sum(gpu.put(a), gpu.put(b), gpu.put(c))),
                               a * b.sum() * c.sum(), rtol=1e-12)
    n = 100_000                     # 8e15 bytes: no device has them
    a, b, c = (gpu.put(rng.standard_normal(n)) for _ in range(3))
    for f, what in ((_outer3, "result P"), (_outer3_sum, "intermediate buffer P")):
        for _ in range(2):          # (compiled, then the cached kernel)
            with pytest.raises(jd.AllocationError, match=rf"{f.__name__}\(\): cannot "
                               rf"allocate the {what} \(float64\[100000, 100000, 100000\]\) "
                               r"on the GPU: 8000000000000000 bytes \(7\.1 PiB\)") as ei:
                f(a, b, c)
            assert isinstance(ei.value, MemoryError)


@jd.compute
def _add(A, B):
    C[i, j] = A[i, j] + B[i, j]
    return C


@pytest.mark.parametrize("plain", [True, False])
def test_failed_copies_and_temporaries_are_named(gpu, rng, monkeypatch, plain):
    """The other device allocations of a call (the contiguous copy of a strided argument,
    the temporary an overlapping out= is computed in, the index-check slot) are named
    too when they fail. `plain`: the one-kernel path of static shapes (_add), or not
    (scale_rows, dynamic)."""
    dev = cuda_runtime.backend()
    x, w = rng.standard_normal((40, 24)), rng.standard_normal(40)
    X, Y, W = gpu.put(x), gpu.put(x.T.copy()), gpu.put(w)
    # (definitions of their own: a kernel keeps the device it was made on)
    add = jd.compute(_add.pyfunc)
    if plain:
        f, want = add, x.T + x.T
    else:
        rows = jd.compute(scale_rows.pyfunc, dynamic=True)
        f, want = (lambda A, B, out=None: rows(A, W, out=out)), x.T * w - 1.0
    np.testing.assert_allclose(gpu.get(f(X.T, Y)), want, rtol=1e-12)

    def no_memory(*args, **kwargs):
        raise MemoryError("out of memory (from the test)")
    monkeypatch.setattr(dev, "contiguous", no_memory)
    with pytest.raises(jd.AllocationError, match=r"cannot allocate the contiguous copy of "
                       r"argument [AX] \(float64\[24, 40\]\) on the GPU: 7680 bytes"):
        f(X.T, Y)
    if plain:           # (argmax of a.T: its result copied to C order, as NumPy's is)
        from jitdl import eager
        eager.clear()
        with pytest.raises(jd.AllocationError, match=r"argmax\(\): cannot allocate the "
                           r"C-ordered copy of its result \(int64\[24\]\)"):
            jd.numpy.argmax(X.T, axis=1)
    monkeypatch.undo()
    monkeypatch.setattr(dev, "empty", no_memory)
    with pytest.raises(jd.AllocationError, match=r"the temporary for out= of [CY] "
                       r"\(float64\[24, 40\]\)"):
        f(Y, Y, out=Y[:, ::-1])
    monkeypatch.undo()
    monkeypatch.setattr(dev, "zeros", no_memory)
    idx = gpu.put(np.array([3, 0, 5]))
    with pytest.raises(jd.AllocationError, match=r"the index-check slot \(int64\[2\]\)"):
        jd.compute(gather.pyfunc)(gpu.put(rng.standard_normal(6)), idx)
    monkeypatch.undo()
    monkeypatch.setattr(dev, "from_host", no_memory)
    with pytest.raises(jd.AllocationError, match=r"target='cuda': cannot copy argument 'A' "
                       r"\(float64\[24, 40\]\) to the GPU: 7680 bytes"):
        add(x.T, x.T.copy(), target="cuda")
