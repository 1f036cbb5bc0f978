"""The call path: dispatch table, out=, strided inputs, run-time index checks, threads,
inspection and timing."""
import os
import platform
import re
import subprocess
import sys
import threading

import numpy as np
import pytest

import jitdl as jd
from _check import assert_matches


@jd.compute
def axpy(X, Y, a):
    Z[i] = a * X[i] + Y[i]
    return Z


@jd.compute
def gather_rows(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y


@jd.compute
def rowsum(X):
    n, m = X.shape
    S[i] = sum(X[i, k] for k in range(m))
    return S


def test_one_kernel_per_signature(rng):
    f = jd.compute(axpy.pyfunc)
    x, y = rng.standard_normal(50), rng.standard_normal(50)
    f(x, y, 2.0)
    f(x, y, 3.0)                                 # same key: scalars are runtime values
    assert len(f._kernels) == 1
    f(x.astype(np.float32), y.astype(np.float32), 2.0)
    f(x[:10], y[:10], 2.0)
    f(x, y, 2)                                   # int scalar: another specialisation
    assert len(f._kernels) == 4
    assert_matches(f(x, y, 3), 3 * x + y, np.float64)


def test_strided_inputs_are_copied_not_misread(rng):
    x = rng.standard_normal((40, 30))
    view = x[::2, 1::3]                        # neither C- nor F-contiguous
    assert_matches(rowsum(view), view.sum(1), np.float64)
    assert_matches(rowsum(x.T), x.T.sum(1), np.float64)


def test_out_is_filled_and_returned(rng):
    x, y = rng.standard_normal(33), rng.standard_normal(33)
    out = np.full(33, np.nan)
    res = axpy(x, y, 0.5, out=out)
    assert res is out
    assert_matches(out, 0.5 * x + y, np.float64)


def test_out_overlapping_an_input_gives_numpy_result(rng):
    x = rng.standard_normal((20, 20))
    expected = x.sum(1)
    out = x[:, 0]                   # a strided view of the input itself
    res = rowsum(x, out=out)        # computed aside, then copied in, as NumPy would
    assert res is out
    assert_matches(x[:, 0].copy(), expected, np.float64)


def test_out_wrong_shape_or_dtype_names_both(rng):
    x, y = rng.standard_normal(8), rng.standard_normal(8)
    with pytest.raises(jd.ArgumentError, match=r"expected shape \(8,\) and dtype float64.*"
                                               r"got shape \(9,\) and dtype float64"):
        axpy(x, y, 1.0, out=np.empty(9))
    with pytest.raises(jd.ArgumentError, match="float32"):
        axpy(x, y, 1.0, out=np.empty(8, np.float32))


def test_runtime_index_check(rng):
    E = rng.standard_normal((10, 4))
    ids = np.array([3, 0, 9, 9])
    assert_matches(gather_rows(E, ids), E[ids], np.float64)
    assert "!" in str(gather_rows.lower(E, ids))          # the checked access is marked
    with pytest.raises(IndexError, match=r"ids\[i\].* into E is 10, outside \[0, 10\)"):
        gather_rows(E, np.array([1, 10, 2, 0]))
    with pytest.raises(IndexError, match="is -1"):
        gather_rows(E, np.array([1, -1, 2, 0]))


def test_concurrent_first_calls_compile_once(rng):
    f = jd.compute(rowsum.pyfunc)
    x = rng.standard_normal((64, 64))
    builds = []
    orig = f._build

    def counting(args, config=None):
        builds.append(1)
        return orig(args, config)
    f._build = counting
    results, errors = [], []

    def worker():
        try:
            results.append(f(x))
        except Exception as e:   # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(builds) == 1
    for r in results:
        assert_matches(r, x.sum(1), np.float64)


def test_parallel_kernel_matches_serial(rng):
    x = rng.standard_normal((300, 257)).astype(np.float32)
    f = jd.compute(rowsum.pyfunc)
    if jd.config.settings.num_threads > 1:
        assert "parallel" in str(f.lower(x))
    threads = jd.config.settings.num_threads
    jd.set_num_threads(1)
    try:
        serial = f(x)
    finally:
        jd.set_num_threads(threads)
    assert_matches(f(x), x.astype(np.float64).sum(1), np.float32, rtol=1e-4)
    assert_matches(serial, x.astype(np.float64).sum(1), np.float32, rtol=1e-4)


@pytest.mark.parametrize("n, error", [(0, ValueError), (-2, ValueError), (2.5, TypeError),
                                      ("2", TypeError), (True, TypeError)])
def test_set_num_threads_refuses_what_is_no_count_of_threads(n, error):
    """set_num_threads(0) ran on 1 thread and set_num_threads(2.5) on 2, without a word
    (int(n), floored at 1); they are errors naming the argument and the value."""
    threads = jd.config.settings.num_threads
    with pytest.raises(error, match=r"set_num_threads: argument 'n' must be an int >= 1, "
                                    r"got .*" + re.escape(repr(n) if n != 0 else "0")) as e:
        jd.set_num_threads(n)
    assert isinstance(e.value, jd.ArgumentError)
    assert jd.config.settings.num_threads == threads
    jd.set_num_threads(np.int64(threads))            # a NumPy integer is a count


def test_inspection_texts(rng):
    x = rng.standard_normal((4, 5))
    ir = rowsum.llvm_ir(x)
    assert "define" in ir and "rowsum" in ir
    assert "define" in rowsum.llvm_ir(x, optimized=False)
    assert rowsum.asm(x).strip()
    assert repr(rowsum.lower(x)) == str(rowsum.lower(x))   # prints as IR in the REPL
    t = rowsum.timeit(x, repeat=3)
    assert isinstance(t, float) and t > 0


def test_keyword_arguments(rng):
    x, y = rng.standard_normal(5), rng.standard_normal(5)
    assert_matches(axpy(Y=y, X=x, a=2.0), 2 * x + y, np.float64)
    with pytest.raises(jd.ArgumentError, match="axpy"):
        axpy(x, y)


def test_function_from_an_ipython_like_cell(rng):
    """IPython keeps each cell's source in linecache under a made-up file name; index
    notation must work there. A plain exec (the `python` prompt) keeps no source."""
    import linecache
    src = "def twice(X):\n    Y[i] = X[i] * 2\n    return Y\n"
    name = "<ipython-input-7-0123456789ab>"
    linecache.cache[name] = (len(src), None, src.splitlines(True), name)
    ns = {}
    exec(compile(src, name, "exec"), ns)
    x = rng.standard_normal(6)
    assert_matches(jd.compute(ns["twice"])(x), 2 * x, np.float64)

    ns2 = {}        # (another body: the same code would be found in the disk cache)
    exec(compile(src.replace("* 2", "* 3"), "<stdin>", "exec"), ns2)
    with pytest.raises(jd.DefinitionError, match="source"):
        jd.compute(ns2["twice"])(x)


@jd.compute
def scale_default(X, a=2.0):
    Y[i] = a * X[i]
    return Y


def test_default_arguments(rng):
    x = rng.standard_normal(4)
    assert_matches(scale_default(x), 2.0 * x, np.float64)
    assert_matches(scale_default(x, 3.0), 3.0 * x, np.float64)
    assert_matches(scale_default(x, a=0.5), 0.5 * x, np.float64)


def test_definitions_named_like_the_c_functions_kernels_call(rng):
    """Generated code calls free, aligned_alloc, tanhf, GOMP_parallel...; a definition with
    one of those names must not take that function's place (its symbol is prefixed)."""
    def body(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        s = jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="s")
        return jd.tensor((n, m), lambda i, j: jd.tanh(X[i, j]) * s[i], name="Y")
    x = rng.standard_normal((37, 41)).astype(np.float32)
    for name in ("free", "tanhf", "aligned_alloc", "GOMP_parallel", "memset"):
        f = jd.compute(body, name=name)
        assert_matches(f(x), np.tanh(x.astype(np.float64)) * x.sum(1, keepdims=True),
                       np.float32, rtol=1e-4, atol=1e-4)



FAR_APART = r"""
import ctypes, numpy as np, jitdl as jd
from jitdl.runtime import engine
from jitdl.runtime.kernel import Kernel
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
PAGE, FLAGS = 4096, 0x2 | 0x20 | 0x4000          # private, anonymous, noreserve

@jd.compute
def affine(X):
    Y[i] = X[i] * 1.2345 + 0.5
    return Y

x = np.random.default_rng(3).standard_normal(64).astype(np.float32)
k = affine.kernel(x)
engine.Loaded(k.loaded.obj, k.sig.symbol)          # LLVM's own first-use allocations
low = min(int(l.split('-')[0], 16) for l in open('/proc/self/maps')
          if int(l.split('-')[0], 16) > 0x700000000000)
while True:                                        # fill the page-sized holes up there
    p = libc.mmap(None, PAGE, 0, FLAGS, -1, 0)
    if p < low:
        break
big = libc.mmap(p - (4 << 30), 4 << 30, 0, FLAGS | 0x100000, -1, 0)   # MAP_FIXED_NOREPLACE
assert big + (4 << 30) == p
libc.munmap(p, PAGE)                # one free page above 4 GiB of reserved address space
loaded = engine.Loaded(k.loaded.obj, k.sig.symbol)
got = Kernel(k.sig, loaded, {})((x,))
print("correct:", bool(np.allclose(got, x.astype(np.float64) * 1.2345 + 0.5, rtol=1e-6)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.machine() != "x86_64",
                    reason="address-space layout probe for Linux x86-64")
def test_mcjit_keeps_code_and_constants_within_reach(tmp_path):
    """Kernels use the small code model (32-bit PC-relative references to constants):
    MCJIT must place all of a kernel's sections together even when the address space is
    fragmented (it aborted, or would have read garbage, with LLVM's default manager)."""
    script = tmp_path / "far.py"
    script.write_text(FAR_APART)
    env = dict(os.environ, JITDL_CACHE="0")
    p = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "correct: True" in p.stdout, (p.returncode, p.stdout,
                                                              p.stderr[-2000:])
