"""jd.numpy's call path on arrays (one kernel per broadcast pattern, the per-shape call
cache, out=, strided and odd inputs) and whole-tensor operators inside definitions."""
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import jitdl as jd
from jitdl import eager

jnp = jd.numpy
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def same(got, want, rtol=1e-12):
    want = np.asarray(want)
    assert np.asarray(got).dtype == want.dtype, (np.asarray(got).dtype, want.dtype)
    assert np.shape(got) == want.shape
    np.testing.assert_allclose(np.asarray(got, np.float64), want.astype(np.float64),
                               rtol=rtol, atol=rtol)


def test_one_kernel_per_broadcast_pattern(rng):
    """add, exp and a row sum over 60 shapes compile a handful of kernels."""
    eager.clear()
    before = {op: eager.cache_info(op)["kernels"] for op in ("add", "exp", "sum", "mean")}
    for n in range(2, 62):
        a = rng.standard_normal((n, 3 + n % 5))
        b = rng.standard_normal(a.shape[1])
        same(jnp.add(a, b), a + b)
        same(jnp.exp(a), np.exp(a))
        same(jnp.sum(a, axis=1), a.sum(axis=1))
        same(jnp.mean(a, axis=0, keepdims=True), a.mean(axis=0, keepdims=True))
    after = {op: eager.cache_info(op)["kernels"] - before[op] for op in before}
    assert all(1 <= n <= 2 for n in after.values()), after


def test_cache_info_while_another_thread_calls_new_ops(rng):
    """jnp.cache_info() raised RuntimeError (dictionary changed size during iteration)
    while another thread's first call of an op made that op's function."""
    eager.clear()
    errors, done = [], threading.Event()

    def watch():
        while not done.is_set():
            try:
                eager.cache_info()
            except Exception as e:    # noqa: BLE001
                errors.append(e)
                return
    watcher = threading.Thread(target=watch)
    watcher.start()
    x = rng.standard_normal((3, 4, 5))
    try:
        for fn, ref in ((jnp.sum, np.sum), (jnp.max, np.max), (jnp.mean, np.mean)):
            for axis in (0, 1, 2, (0, 1), (1, 2), None):
                for keepdims in (False, True):
                    same(fn(x, axis=axis, keepdims=keepdims),
                         ref(x, axis=axis, keepdims=keepdims))
    finally:
        done.set()
        watcher.join()
    assert not errors, errors
    assert eager.cache_info("sum")["kernels"] >= 1


def test_size_one_dimensions_broadcast_as_numpy(rng):
    for sa, sb in [((4, 1), (1, 5)), ((1, 5), (4, 5)), ((3, 1, 2), (4, 1)), ((1,), (7,)),
                   ((), (3, 2)), ((2, 3), ())]:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        same(jnp.subtract(a, b), np.subtract(a, b))
    with pytest.raises(ValueError, match="could not be broadcast"):
        jnp.add(np.ones((3, 4)), np.ones((5, 4)))
    with pytest.raises(ValueError, match="could not be broadcast"):
        jnp.add(np.ones(3), np.ones(4))


def test_cached_calls_on_other_layouts_stay_right(rng):
    """A shape's cached call meets strided, reversed, non-native and read-only arrays."""
    a = rng.standard_normal((64, 48))
    b = rng.standard_normal((64, 48))
    same(jnp.multiply(a, b), a * b)                  # cached for (64, 48) float64
    same(jnp.multiply(a[:, ::-1].copy(order="F")[:, :48], b), a[:, ::-1] * b)
    t = rng.standard_normal((48, 64)).T
    same(jnp.multiply(t, b), t * b)
    same(jnp.multiply(a[::-1], b), a[::-1] * b)
    big = a.astype(">f8")
    for _ in range(3):                              # (a byte-swapped array is never cached)
        same(jnp.multiply(big, b), a * b)
        same(jnp.exp(big), np.exp(a))
        same(jnp.add(big.astype(">i4"), 1), a.astype(np.int32) + 1)
    ro = a.copy()
    ro.flags.writeable = False
    same(jnp.multiply(ro, b), a * b)
    same(jnp.exp(a[::2, ::3]), np.exp(a[::2, ::3]))


def test_copies_of_a_byte_swapped_array_keep_its_byte_order(rng):
    """NumPy's functions that move or copy elements keep a '>f8' (or '>i4') operand's
    dtype, where its arithmetic gives the native one: jd.numpy's results have NumPy's
    dtypes, byte order included, and its values (twice: a first and a cached call)."""
    for big in (rng.standard_normal((3, 4)).astype(">f8"),
                rng.integers(-50, 50, (3, 4)).astype(">i4")):
        small = big.astype(big.dtype.newbyteorder("="))
        big[0, 1] = small[0, 1] = 2.5 if big.dtype.kind == "f" else 25
        if big.dtype.kind == "f":
            big[1, 2] = small[1, 2] = np.nan
        for _ in range(2):
            for call in (lambda m, x: m.roll(x, 1), lambda m, x: m.roll(x, -2, axis=1),
                         lambda m, x: m.take(x, [0, 5, 11]), lambda m, x: m.take(x, 2),
                         lambda m, x: m.take(x, np.array([2, 0]), axis=1),
                         lambda m, x: m.repeat(x, 2), lambda m, x: m.repeat(x, [1, 0, 2], 0),
                         lambda m, x: m.tile(x, (2, 1)), lambda m, x: m.pad(x, 1),
                         lambda m, x: m.pad(x, ((0, 1), (2, 0)), constant_values=3),
                         lambda m, x: m.pad(x, 2, mode="reflect"), lambda m, x: m.copy(x),
                         lambda m, x: m.copy(x.T, order="C"), lambda m, x: m.round(x),
                         lambda m, x: m.round(x, 1), lambda m, x: m.round(x, -1),
                         lambda m, x: m.around(x, 2), lambda m, x: m.nan_to_num(x),
                         lambda m, x: m.exp(x), lambda m, x: m.add(x, x),
                         lambda m, x: m.sum(x, axis=0), lambda m, x: m.concatenate([x, x]),
                         lambda m, x: m.where(x > 0, x, 0)):
                with np.errstate(all="ignore"):
                    want = call(np, big)
                    got = call(jnp, big)
                assert np.asarray(got).dtype.str == np.asarray(want).dtype.str
                np.testing.assert_allclose(got, want, rtol=1e-14)     # (exp: an ulp)
                np.testing.assert_allclose(got, call(np, small), rtol=1e-14)


@pytest.mark.parametrize("name", ["sum", "prod", "max", "min", "mean", "argmax", "argmin",
                                  "all", "any"])
def test_a_reductions_one_array_call_after_its_kernel_is_warm(rng, name):
    """f(a) goes straight to the kernel last served for such a call (eager's
    _one_array_call): after that kernel is warm, other sizes (small and blocked argmax),
    strided, reversed, byte-swapped and read-only arrays, other dtypes (NumPy's own for
    those jitdl does not compile), NaN, empty arrays, subclasses and other ranks and
    layouts (large ones reduced as 1-d) all answer as NumPy, with NumPy's result types."""
    f, g = getattr(jnp, name), getattr(np, name)

    def check(x):
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                want = g(x)
            except ValueError:      # (an empty max / argmax: jitdl's error is one too)
                with pytest.raises(ValueError):
                    f(x)
                return
            got = f(x)
        assert type(got) is type(want), (x.dtype, type(got), type(want))
        if np.issubdtype(np.asarray(want).dtype, np.inexact):
            np.testing.assert_allclose(got, want, rtol=1e-5 if x.dtype == np.float32 else
                                       1e-12, equal_nan=True)
        else:
            assert got == want
    a = rng.standard_normal(257)
    for _ in range(2):
        check(a)
    nan = a.copy()
    nan[100] = np.nan
    ro = a.copy()
    ro.flags.writeable = False
    for x in [rng.standard_normal(5), rng.standard_normal(9000), a[::3], a[::-1],
              a.astype(">f8"), ro, nan, np.array([]), a.astype(np.float32),
              (a * 9).astype(np.int8), (a * 9).astype(np.uint8), a > 0,
              a.astype(np.float16), a.astype(np.complex64), a.reshape(1, 257),
              np.ma.masked_array(a, a > 1), a[:1], rng.standard_normal((3, 4)),
              rng.standard_normal((60, 300)), rng.standard_normal((60, 300)).T,
              rng.standard_normal((60, 300))[:, ::2], rng.standard_normal((2, 3, 5))]:
        check(x)
        check(a)


def test_small_strided_operands_of_a_warm_kernel(rng):
    """A small strided view (a[:, :25], x[::2]) passed where a warm kernel's direct entry
    serves C-ordered arrays is copied for it (eager.small_copies): linear algebra gives
    NumPy's values; a layout-free op still runs a transposed view in its memory order
    and gives NumPy's (Fortran) layout."""
    m = rng.standard_normal((25, 40)).astype(np.float32)
    x = rng.standard_normal(50)
    a = np.ascontiguousarray(m[:, :25])
    for _ in range(2):
        same(jnp.matmul(a, m), a @ m, rtol=1e-5)
        same(jnp.dot(x[:25], x[25:]), np.dot(x[:25], x[25:]))
    for _ in range(2):
        same(jnp.matmul(m[:, :25], m), m[:, :25] @ m, rtol=1e-5)
        same(jnp.matmul(m[::-1, 5:30], m[:, ::-1]), m[::-1, 5:30] @ m[:, ::-1], rtol=1e-5)
        same(jnp.dot(x[::2], x[1::2]), np.dot(x[::2], x[1::2]))
        same(jnp.outer(x[::3], x[::-5]), np.outer(x[::3], x[::-5]))
        same(jnp.inner(m[:3, ::2], m[:4, 1::2]), np.inner(m[:3, ::2], m[:4, 1::2]), rtol=1e-5)
    t = rng.standard_normal((30, 20)).T
    jnp.exp(np.ascontiguousarray(t))
    r = jnp.exp(t)
    same(r, np.exp(t))
    assert r.flags.f_contiguous == np.exp(t).flags.f_contiguous


def _no_general_calls(monkeypatch):
    """The names of kernels whose general call path (Kernel._call) runs from now on, and
    of the ops whose wrappers call eager.apply (the call path behind their tables and
    direct entries)."""
    from jitdl.numpy import _reductions, _ufuncs
    from jitdl.runtime.kernel import Kernel
    slow = []
    real = Kernel._call
    monkeypatch.setattr(Kernel, "_call", lambda self, *a, **k: slow.append(self.fname)
                        or real(self, *a, **k))
    for module in (_ufuncs, _reductions):
        monkeypatch.setattr(module, "apply", lambda name, *a, real=module.apply, **k:
                            slow.append(name) or real(name, *a, **k))
    return slow


def _exactly(got, want):
    """NumPy's type (a NumPy scalar where NumPy returns one), dtype, shape, bits and, for
    arrays, C or Fortran order."""
    assert type(got) is type(want), (type(got), type(want))
    got_a, want_a = np.asarray(got), np.asarray(want)
    assert got_a.dtype == want_a.dtype and got_a.shape == want_a.shape, \
        (got_a.dtype, want_a.dtype, got_a.shape, want_a.shape)
    if want_a.dtype.kind == "f":    # (within an ulp: jitdl's exp is not NumPy's SVML)
        np.testing.assert_allclose(got_a, want_a, rtol=4e-16 if want_a.itemsize == 8
                                   else 2.5e-7, atol=0)
    else:
        np.testing.assert_array_equal(got_a, want_a)
    if isinstance(want, np.ndarray):
        assert got.flags.c_contiguous == want.flags.c_contiguous
        assert got.flags.f_contiguous == want.flags.f_contiguous


@pytest.mark.cpu_only
def test_small_strided_views_take_the_fast_path(rng, monkeypatch):
    """Unary and binary functions of small strided views whose strides run in C order
    (a[::2], a[::-3], m[:, :20], m[::-1, ::2], a broadcast column) copy them and enter the
    kernel directly (eager.small_copies): exp of a[::2] 8.0 -> 2.4 us, NumPy 2.5, where
    the general path copied them behind its checks. Views in another order (a sliced
    a.T, a broadcast row) and large views keep the general path's own handling; every
    result is NumPy's in values, dtype and layout."""
    a, b = rng.standard_normal(3000), rng.standard_normal(3000)
    m = rng.standard_normal((30, 44))
    i = rng.integers(-50, 50, 3000).astype(np.int32)
    col = np.broadcast_to(rng.standard_normal((30, 1)), (30, 44))
    views = [a[::2], a[::-3][:1000], a[1::3], m[:, :20], m[::-1, ::2], m[3:20:2, 1:],
             col, i[::2], (a > 0)[::2]]
    cases = [lambda x, mod: mod.exp(x), lambda x, mod: mod.negative(x),
             lambda x, mod: mod.add(x, x), lambda x, mod: mod.multiply(x, 2.5),
             lambda x, mod: mod.subtract(3, x), lambda x, mod: mod.less(x, x[..., :1]),
             lambda x, mod: mod.maximum(np.ascontiguousarray(x), x)]
    pairs = [(x, fn) for x in views for fn in cases
             if not (x.dtype == bool and fn in (cases[1], cases[4]))]   # (bool negative)
    for x, fn in pairs:
        fn(x, jnp)                              # (compiled)
    slow = _no_general_calls(monkeypatch)
    for x, fn in pairs:
        _exactly(fn(x, jnp), fn(x, np))
    assert slow == []
    # other orders and large views: the general path, NumPy's answers and layouts (a
    # sliced a.T runs in its memory's order: eager.reorder; not where operands broadcast,
    # less(x, x[..., :1]), whose result is C-ordered)
    t = rng.standard_normal((40, 30)).T
    row = np.broadcast_to(b[:44], (30, 44))
    for x in (t[::2], t[:, 3:], row, rng.standard_normal(100000)[::2],
              rng.standard_normal((8, 6, 4)).transpose(1, 0, 2)[::2]):
        for fn in cases:
            got, want = fn(x, jnp), fn(x, np)
            same(got, want, rtol=4e-16)
            if fn is not cases[5]:
                assert got.strides == want.strides, (x.strides, got.strides, want.strides)


@pytest.mark.cpu_only
def test_numpy_scalars_and_0d_arrays_take_the_fast_path(rng, monkeypatch):
    """An array with a NumPy scalar (a * a.mean(), np.float32(2) - a) or a 0-d array, and
    a unary function of a NumPy scalar, are served by the function's table of kernels and
    their direct entries (a * np.float64(2) 5.0 -> 0.9 us, NumPy 0.8; add of a 0-d array
    6.3 -> 0.5): NumPy 2's dtypes (NEP 50: a NumPy scalar is as strong as an array, a
    Python number weak, so float32 * np.float64 is float64 and float32 * 2.0 float32) and
    result types (a NumPy scalar for 0-d operands), also when calls of each kind
    alternate."""
    a64 = rng.standard_normal(1000)
    a32 = rng.standard_normal(1000).astype(np.float32)
    i32 = rng.integers(-100, 100, 1000).astype(np.int32)
    u8 = rng.integers(0, 255, 1000).astype(np.uint8)
    every = [np.float64(1.5), np.float32(-2.25), np.int64(-3), np.int32(7), np.int8(-5),
             np.uint8(200), np.bool_(True), 2.5, 3, True, np.float64(-0.0)]
    pairs = [(a32, every), (i32, every), (a64, [np.float32(0.5), np.int8(-5), 2.5]),
             (u8, [np.uint8(200), np.int8(-5), 3]), (a64 > 0, [np.bool_(False), True,
                                                               np.int8(2)])]
    calls = []
    for x, ss in pairs:
        for s in ss:
            calls += [("multiply", x, s), ("multiply", s, x), ("less", x, s)]
    zero_d = [np.array(1.25), np.array(-3, np.int16), np.array(0.5, np.float32)]
    for z in zero_d:
        for w in (z, 2.0, np.float32(3.5), np.int64(4)):
            calls.append(("add", z, w))
            calls.append(("multiply", w, z))
    unary = [np.float64(0.75), np.float32(-1.5), np.int64(3), np.int32(-2), np.float64(-0.0)]
    ucalls = [(f, s) for f in ("exp", "negative", "sin", "absolute") for s in unary] + \
        [("exp", z) for z in zero_d]

    def run(mod):
        return [getattr(mod, f)(x, y) for f, x, y in calls] + \
            [getattr(mod, f)(x) for f, x in ucalls]
    run(jnp)                                        # (compiled)
    slow = _no_general_calls(monkeypatch)
    for _ in range(2):                              # (the kinds alternate call by call)
        for got, want in zip(run(jnp), run(np)):
            _exactly(got, want)
    assert slow == []


@pytest.mark.cpu_only
def test_list_operands_of_elementwise_functions(rng, monkeypatch):
    """Lists and tuples as operands of unary and binary functions are NumPy's arrays of
    them (ints int64, floats float64, so [1, 2] + a float32 array is float64), taking the
    fast paths after the first call (np.add([1.0, 2.0, 3.0], 1.0) 13 -> 3 us, NumPy 1.9);
    ragged lists, strings, complex numbers and ints beyond int64 get NumPy's answers or
    errors."""
    a32 = rng.standard_normal(3).astype(np.float32)
    cases = [lambda m: m.add([1.0, 2.5, 3.0], 1.0), lambda m: m.add(2, [1, 2, 3]),
             lambda m: m.multiply([[1, 2], [3, 4]], np.float32(2)),
             lambda m: m.add(a32, [1, 2, 3]), lambda m: m.subtract((0.5, 1.5, 2.0), a32),
             lambda m: m.exp([0.5, -1.0]), lambda m: m.negative((1, -2)),
             lambda m: m.add([True, False], [1.5, 2]), lambda m: m.less([1, 2], 1.5),
             lambda m: m.add(np.ones((2, 2)), [[1], [2]]), lambda m: m.add([2**70], 1),
             lambda m: m.exp((np.float32(1), np.float32(2))), lambda m: m.add([1j], 1)]
    for c in cases:
        c(jnp)
    slow = _no_general_calls(monkeypatch)
    for c in cases:
        got, want = c(jnp), c(np)
        assert type(got) is type(want) and got.dtype == want.dtype
        if want.dtype == object:
            assert got.tolist() == want.tolist()
        else:
            same(got, want, rtol=1e-6 if want.dtype == np.float32 else 1e-15)
    assert set(slow) <= {"add"}         # (object and complex arrays: NumPy's add)
    for c in (lambda m: m.add([1, 2], [1, 2, 3]), lambda m: m.add([[1], [2, 3]], 1),
              lambda m: m.add(["a"], 1)):
        with pytest.raises(Exception) as want:
            c(np)
        with pytest.raises(type(want.value)):
            c(jnp)


def test_totals_and_means_with_dtype_repeat_the_first_calls_static_arguments(rng):
    """sum, prod and mean with dtype= (and an int axis or None) keep the static
    arguments the first such call found (numpy._reductions._TYPED): NumPy's dtypes and
    values on every later call too, also where dtype= is a string, a type or a dtype, for
    integer, float and bool arrays, and NumPy's own answer for a float array with an
    integer dtype= (its casts) and its errors."""
    from jitdl.numpy import _reductions
    m = rng.standard_normal((6, 7))
    arrays = [m.astype(np.float32), (m * 9).astype(np.int8), m > 0,
              (np.abs(m) * 9).astype(np.uint8)[:, ::2]]
    for _ in range(2):
        for a in arrays:
            for dt in (np.float64, "float32", np.dtype(np.int64), int):
                for ax in (None, -1):
                    for name in ("sum", "prod", "mean"):
                        f, g = getattr(jnp, name), getattr(np, name)
                        try:
                            want = g(a, axis=ax, dtype=dt)
                        except Exception as e:
                            with pytest.raises(type(e)):
                                f(a, axis=ax, dtype=dt)
                            continue
                        got = f(a, axis=ax, dtype=dt)
                        assert type(got) is type(want), (name, a.dtype, dt, ax)
                        same(got, want, rtol=1e-6)
    assert ("sum", 2, np.dtype(np.int8), "float32", -1) in _reductions._TYPED
    with pytest.raises(TypeError):
        jnp.sum(m, dtype="nonsense")


def test_argmax_of_a_1d_array_along_an_array_axis_is_numpys_type_error():
    """argmax / argmin of a 1-d array with an axis that is an array of several ints:
    NumPy's TypeError (the 1-d shortcut for axis 0 / -1 checks the axis is an int first)."""
    a = np.arange(5.0)
    for f in ("argmax", "argmin"):
        for axis in (np.array([0, 1]), np.array([0])):
            for fn in (getattr(np, f), getattr(jnp, f)):
                with pytest.raises(TypeError):
                    fn(a, axis=axis)


@pytest.mark.cpu_only
def test_reductions_along_an_axis_take_the_direct_entry(rng, monkeypatch):
    """sum, prod, max, min, mean, all, any, argmax and argmin of an array along an int
    axis given by position or keyword go straight to the kernel's direct entry after
    a call like it (the op's slot: eager._one_array_call; argmax of 25 x 40 float64
    along axis 1 3.1 -> 1.9 us, NumPy 1.7), also with keepdims=True (the kernel without
    it, its result reshaped) and into out= (sum of 25 x 40 along axis 0 8.2 -> 1.6 us,
    NumPy 4-5); argmax / argmin of a 1-d array along axis 0 or -1 share the
    kernel of the whole array. NumPy's values, dtypes, types and errors."""
    m = rng.standard_normal((25, 40))
    x3 = rng.standard_normal((3, 4, 5)).astype(np.float32)
    u = rng.integers(0, 250, (6, 7)).astype(np.uint8)
    v = rng.standard_normal(1000)
    v[[10, 600]] = v.max() + 1                      # (ties: the first position)
    every = ("sum", "prod", "max", "min", "mean", "all", "any", "argmax", "argmin")
    cases = [(m, every, (0, 1, -1)), (x3, every, (1, -3)), (v, every, (0, -1)),
             (u, ("sum", "max", "argmin"), (0, -1)), (m > 0, ("any", "argmax"), (1,))]
    slow = _no_general_calls(monkeypatch)
    for a, names, axes in cases:
        for name in names:
            f, g = getattr(jnp, name), getattr(np, name)
            for ax in axes + (None,):
                f(a, ax)            # (compiled, or its direct entry back in the op's slot)
                del slow[:]
                pairs = [(f(a, ax), g(a, ax)), (f(a, axis=ax), g(a, axis=ax)),
                         (f(a, axis=ax, keepdims=True), g(a, axis=ax, keepdims=True))]
                if ax is not None:  # (keepdims: the same kernel's result, reshaped)
                    pairs += [(f(a, keepdims=False, axis=ax), g(a, axis=ax))]
                for got, want in pairs:
                    assert type(got) is type(want) and np.shape(got) == np.shape(want)
                    same(got, want, rtol=1e-6)
                if ax is not None and a.dtype.kind == "f":    # (out=: the result's array)
                    want = np.asarray(g(a, axis=ax))
                    out = np.full_like(want, 7)
                    assert f(a, axis=ax, out=out) is out
                    same(out, want, rtol=1e-6)
                assert slow == [], (name, a.shape, a.dtype, ax)
    eager.clear()
    jnp.argmax(v)
    n = eager.cache_info("argmax")["kernels"]
    assert jnp.argmax(v, axis=0) == jnp.argmax(v, -1) == np.argmax(v) == 10
    assert eager.cache_info("argmax")["kernels"] == n
    for f in (jnp.sum, jnp.argmax):
        with pytest.raises(np.exceptions.AxisError):
            f(m, 2)
        with pytest.raises(np.exceptions.AxisError):
            f(m, axis=-3)
    same(jnp.sum(m, axis=1, keepdims=True), np.sum(m, axis=1, keepdims=True))
    same(jnp.max(m, (0, 1)), np.max(m, (0, 1)))
    # out= that the direct entry refuses: the general path's overlap, cast and errors
    for f in (jnp.sum, jnp.max, jnp.mean):
        g = getattr(np, f.__name__)
        f(m, axis=0, out=np.empty(40))
        a, b = m.copy(), m.copy()
        assert f(a, axis=0, out=a[3]) is not None
        g(b, axis=0, out=b[3])
        same(a, b)                                          # (out= overlaps the operand)
        for out in (np.empty(40, np.float32), np.empty((40, 2))[:, 0], np.empty(80)[::2]):
            want = g(m, axis=0, out=out.copy())
            same(f(m, axis=0, out=out), want, rtol=1e-6)
        with pytest.raises(ValueError):
            f(m, axis=0, out=np.empty(41))
    with pytest.raises(TypeError):
        jnp.argmax(m, axis=1, out=np.empty(25))
    same(jnp.argmin(m.T, 0), np.argmin(m.T, 0))
    b = rng.random((40, 50, 60))[:, :, ::2].transpose(2, 1, 0)   # (NumPy's C order)
    for x in (b, x3.T):
        for ax in (0, 1, -1):
            got, want = jnp.argmax(x, ax), np.argmax(x, ax)
            same(got, want)
            assert got.strides == want.strides


def test_out_argument(rng):
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    out = np.empty(1000)
    assert jnp.add(a, b, out=out) is out
    same(out, a + b)
    out32 = np.empty(1000, np.float32)
    assert jnp.add(a, b, out=out32) is out32         # same_kind casting, as NumPy's
    same(out32, (a + b).astype(np.float32), rtol=1e-6)
    with pytest.raises(TypeError):
        jnp.add(a, b, out=np.empty(1000, np.int64))  # float64 -> int64 is not same_kind
    assert jnp.add(a, b, out=(out,)) is out
    with pytest.raises((ValueError, TypeError)):
        jnp.add(a, b, out=np.empty(999))
    jnp.add(a, b, out=a)                             # in place, as NumPy allows
    same(a, out)


@pytest.mark.parametrize("call", [
    lambda m, x, o: m.sum(x, out=o), lambda m, x, o: m.max(x, axis=0, out=o),
    lambda m, x, o: m.mean(x, axis=0, out=o), lambda m, x, o: m.argmax(x, axis=0, out=o),
    lambda m, x, o: m.concatenate([x[0], x[1]], out=o), lambda m, x, o: m.round(x, out=o),
    lambda m, x, o: m.clip(x, -0.5, 0.5, out=o), lambda m, x, o: m.nanmax(x, axis=0, out=o),
    lambda m, x, o: m.matmul(x, x.T, out=o)])
def test_out_as_a_tuple_only_where_numpy_takes_one(rng, call):
    x = rng.standard_normal((4, 4))
    o = np.empty_like(np.asarray(call(np, x, None)))
    try:
        want = call(np, x, (o,))
    except TypeError:
        with pytest.raises(TypeError, match="out="):
            call(jnp, x, (o.copy(),))
        return
    mine = np.empty_like(o)
    assert call(jnp, x, (mine,)) is mine
    same(mine, want)


def test_scalars_lists_and_zero_d(rng):
    x = rng.standard_normal(17).astype(np.float32)
    r = jnp.multiply(x, 2.5)
    assert r.dtype == np.float32                     # NEP 50: the Python float is weak
    same(r, x * np.float32(2.5))
    assert jnp.multiply(x, np.float64(2.5)).dtype == np.float64
    same(jnp.add([1, 2, 3], 1), np.array([2, 3, 4]))
    s = jnp.sum(x)
    assert isinstance(s, np.float32) and np.isclose(s, x.sum(dtype=np.float64), rtol=1e-5)
    assert isinstance(jnp.exp(np.array(1.0)), np.float64)
    with pytest.raises(OverflowError):
        jnp.add(np.ones(3, np.int8), 300)


def test_empty_arrays(rng):
    same(jnp.add(np.ones((0, 3)), np.ones(3)), np.ones((0, 3)) + np.ones(3))
    same(jnp.sum(np.ones((0, 4)), axis=0), np.zeros(4))
    with pytest.raises(ValueError, match="zero-size array"):
        jnp.max(np.ones((0, 4)), axis=0)
    same(jnp.max(np.ones((0, 4)), axis=1), np.ones((0, 4)).max(axis=1))


# -- dtypes jitdl does not compile: NumPy's own function ---------------------------------
_OTHER = [np.float16, np.complex64, np.complex128, np.uint16, np.uint32, np.uint64]


def _other(rng, shape, dt):
    x = rng.standard_normal(shape) * 2
    if np.dtype(dt).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    elif np.dtype(dt).kind == "u":
        x = np.abs(x) + 1
    return x.astype(dt)


@pytest.mark.parametrize("dt", _OTHER)
def test_other_dtypes_are_numpys(rng, dt):
    x, y = _other(rng, (5, 7), dt), _other(rng, (7,), dt)
    f = rng.standard_normal((5, 7))
    cases = [
        (jnp.add, np.add, (x, y), {}), (jnp.multiply, np.multiply, (x, f), {}),
        (jnp.exp, np.exp, (x,), {}), (jnp.negative, np.negative, (x,), {}),
        (jnp.sum, np.sum, (x,), {"axis": 0}), (jnp.max, np.max, (x,), {"axis": 1}),
        (jnp.mean, np.mean, (x,), {"keepdims": True}),
        (jnp.concatenate, np.concatenate, ([x, x],), {"axis": 1}),
        (jnp.transpose, np.transpose, (x,), {}), (jnp.reshape, np.reshape, (x, (7, 5)), {}),
        (jnp.matmul, np.matmul, (x, x.T), {}), (jnp.where, np.where, (f > 0, x, y), {}),
        (jnp.pad, np.pad, (x, 1), {"mode": "edge"}), (jnp.flip, np.flip, (x,), {}),
        (jnp.add, np.add, (f, 1j), {}), (jnp.maximum, np.maximum, (x, x[0]), {}),
    ]
    for jf, nf, args, kw in cases:
        if jf is jnp.max and np.dtype(dt).kind == "c":
            continue
        got, want = jf(*args, **kw), nf(*args, **kw)
        assert type(got) is type(want) and got.dtype == want.dtype, jf.__name__
        np.testing.assert_array_equal(got, want, err_msg=jf.__name__)
    u = rng.integers(0, 255, (4, 6)).astype(np.uint8)    # NumPy's uint64 totals
    for jf, nf in ((jnp.sum, np.sum), (jnp.prod, np.prod), (jnp.nansum, np.nansum)):
        for axis in (None, 1):
            got, want = jf(u, axis=axis), nf(u, axis=axis)
            assert got.dtype == want.dtype == np.uint64
            np.testing.assert_array_equal(got, want)
    out = np.empty((5, 7), dt)
    assert jnp.subtract(x, y, out=out) is out
    np.testing.assert_array_equal(out, x - y)


def test_other_dtypes_of_functions_that_are_not_ufuncs_and_unsigned_totals():
    h = np.array([1.5, -2.5, 3.7], np.float16)
    for jf, nf in ((jnp.fix, np.fix), (jnp.sinc, np.sinc), (jnp.round, np.round)):
        got, want = jf(h), nf(h)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    s = jnp.sum(np.uint8(200))
    assert s == 200 and s.dtype == np.sum(np.uint8(200)).dtype
    c = np.array([200, 100], np.uint8)

    @jd.compute
    def f(X):                       # a constant's total inside a definition: int64 there
        return X + jnp.sum(c)
    np.testing.assert_array_equal(f(np.arange(3.0)), np.arange(3.0) + 300)


def test_a_dtype_argument_of_another_dtype_is_numpys(rng):
    """dtype= naming a dtype jitdl does not compile (float16, uint64, complex64) on arrays
    jitdl does compile: NumPy's function answers, as for such an operand."""
    a = rng.standard_normal((3, 4)).astype(np.float32)
    i = rng.integers(-50, 50, (3, 4)).astype(np.int32)
    cases = [(lambda m: m.add(a, a, dtype=np.float16)),
             (lambda m: m.multiply(a, 2.0, dtype="complex64")),
             (lambda m: m.sqrt(np.abs(a), dtype=np.float16)),
             (lambda m: m.sum(i, dtype=np.uint64)),
             (lambda m: m.sum(a, axis=1, dtype=np.float16)),
             (lambda m: m.mean(a, axis=0, dtype=np.float16)),
             (lambda m: m.prod(i[:, :2], axis=1, dtype=np.uint32)),
             (lambda m: m.cumsum(i, axis=1, dtype=np.uint64) if hasattr(m, "cumsum") else
              np.cumsum(i, axis=1, dtype=np.uint64))]
    for case in cases:
        got, want = case(jnp), case(np)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_allclose(np.asarray(got, np.complex128),
                                   np.asarray(want, np.complex128), rtol=1e-3)
    with pytest.raises(TypeError, match="not a dtype|foo"):
        jnp.sum(a, dtype="foo")

    @jd.compute
    def f(X):
        return jnp.add(X, X, dtype=np.float16)
    with pytest.raises(TypeError, match="float16"):
        f(a)


def test_ufunc_dtype_and_casting_follow_numpys_rules(rng):
    """dtype= and casting= of the ufuncs: the inputs cast to dtype= as the casting rule
    allows, the loop exists for it, out= takes the result as the rule allows and may be
    larger (broadcast), NumPy's answer in every case, also for clip."""
    a = rng.standard_normal(5) * 3
    i = rng.integers(-9, 9, 5, dtype=np.int32)
    ok = [lambda m: m.clip(a, -1, 1, dtype=np.float32),
          lambda m: m.clip(a, -1, 1, dtype=np.int32, casting="unsafe"),
          lambda m: m.clip(i, None, 2, dtype=np.float64),
          lambda m: m.add(a, 1, dtype=np.int64, casting="unsafe"),
          lambda m: m.exp(i, dtype=np.float32),
          lambda m: m.power(a, 2, dtype=np.float32),
          lambda m: m.add(i, i, casting="no"),
          lambda m: m.add(i, np.arange(5), casting="safe"),
          lambda m: m.add(a, 1, out=np.empty(5, np.int16), casting="unsafe"),
          lambda m: m.multiply(a, 2, out=np.empty((3, 5))),
          lambda m: m.less(i, 2, dtype=bool), lambda m: m.equal(i, 2, dtype=bool),
          lambda m: m.isnan(a, dtype=bool), lambda m: m.logical_and(i, a, dtype=bool),
          lambda m: m.matmul(a[:, None], i[None, :], dtype=np.float32),
          lambda m: m.matmul(a[:4].reshape(2, 2), i[:4].reshape(2, 2), dtype=np.int16,
                             casting="unsafe"),
          # (dtype= picks the loop: bool has no subtract, the inputs cast to int16)
          lambda m: m.subtract(a > 0, (i > 0).reshape(5, 1), dtype=np.int16),
          lambda m: m.subtract(a > 0, True, dtype=np.float32)]
    for case in ok:
        got, want = case(jnp), case(np)
        same(got, want, rtol=1e-6)
    refused = [lambda m: m.add(a, 1, dtype=np.int32),
               lambda m: m.add(i, 1.5, dtype=np.int32),
               lambda m: m.clip(a, 0, 1, dtype=np.int32),
               lambda m: m.sqrt(a, dtype=np.int64),
               lambda m: m.power(a, 2, dtype=np.int8),
               lambda m: m.add(i, np.arange(5), casting="no"),
               lambda m: m.negative(a, out=np.empty(5, np.int32), casting="safe"),
               lambda m: m.add(a, 1, out=np.empty(5, np.float32), casting="safe"),
               lambda m: m.matmul(a, a, dtype=np.int32),
               lambda m: m.exp(a, out=np.empty(5, np.int32)),
               lambda m: m.bitwise_and(a, i, dtype=np.int32),
               lambda m: m.std(a, out=np.empty((), np.int64)),
               lambda m: m.ptp(a, out=np.empty((), bool)),
               lambda m: m.vecdot(a, a, out=np.empty((), np.int32))]
    for case in refused:    # (NumPy's class: UFuncTypeError's casting errors, TypeError)
        with pytest.raises(TypeError) as want:
            case(np)
        with pytest.raises(type(want.value)) as got:
            case(jnp)
        assert str(want.value).split(" with casting")[0][-30:] in str(got.value) or \
            "casting rule" in str(got.value), (got.value, want.value)
    with pytest.raises(OverflowError):
        jnp.add(i.astype(np.int8), 300, dtype=np.int8)
    with pytest.raises(ValueError, match="casting must be one of"):
        jnp.exp(a, casting="bogus")
    with pytest.raises(ValueError, match="non-broadcastable"):
        jnp.add(a, 1, out=np.empty((5, 2)))

    @jd.compute
    def f(X):
        return jnp.clip(X, 0, 1, dtype=np.float32) + jnp.exp(X, dtype="float32")
    same(f(a), np.clip(a, 0, 1, dtype=np.float32) + np.exp(a, dtype=np.float32), 1e-6)

    @jd.compute
    def g(X):
        return jnp.add(X, 1, dtype=np.int32)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' input 0") as got:
        g(a)
    with pytest.raises(TypeError) as want:
        np.add(a, 1, dtype=np.int32)
    assert isinstance(got.value, type(want.value))

    @jd.compute
    def h(X, Y):
        return jnp.subtract(X > 0, Y, dtype=np.int16) + jnp.bitwise_and(X < 0, Y, dtype=bool)
    b = rng.standard_normal(5) > 0
    same(h(a, b), np.subtract(a > 0, b, dtype=np.int16) + np.bitwise_and(a < 0, b), 0)


def test_other_numpy_names_are_numpys_own(rng):
    """A NumPy name jd.numpy does not compile is NumPy's: code written for NumPy runs; its
    functions refuse a definition's tensors, naming the function; private and unknown
    names are AttributeErrors."""
    a = rng.standard_normal(7)
    np.testing.assert_array_equal(jnp.sort(a), np.sort(a))
    np.testing.assert_array_equal(jnp.cumsum(a), np.cumsum(a))
    assert jnp.finfo(jnp.float32).eps == np.finfo(np.float32).eps
    assert jnp.float16 is np.float16 and jnp.random is np.random and jnp.gcd is np.gcd
    for name in ("no_such_function", "_private", "__wrapped__"):
        assert not hasattr(jnp, name)

    @jd.compute
    def f(X):
        return jnp.sort(X)
    with pytest.raises(TypeError, match=r"jd.numpy.sort\(\) is NumPy's own function"):
        f(a)


def test_other_dtypes_errors_are_numpys():
    with pytest.raises(TypeError):          # NumPy's own: no bitwise ops on floats
        jnp.bitwise_and(np.ones(3, np.float16), np.ones(3, np.float16))
    with pytest.raises(ValueError):         # NumPy's broadcasting error
        jnp.add(np.ones(3, np.uint32), np.ones(4, np.uint32))


def test_other_dtypes_inside_a_definition_and_in_nn_are_errors():
    with pytest.raises(TypeError, match="complex128"):
        jd.nn.relu(np.ones(3, np.complex128))

    @jd.compute
    def f(X):
        return jnp.exp(X)
    with pytest.raises(TypeError, match="float16"):
        f(np.ones(3, np.float16))


# -- whole tensors inside definitions ---------------------------------------------------
@jd.compute
def softmax(X):
    e = jnp.exp(X - X.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@jd.compute
def affine_relu(X, W, b):
    return jnp.maximum(X @ W + b, 0.0)


@jd.compute
def mixed(X, Y):
    return -X.T * 2 + abs(Y.T) ** 2 - (X.T > 0) + jnp.where(Y.T < X.T, 1.0, 0.5)


def test_operators_and_methods_fuse_into_one_kernel(rng):
    x = rng.standard_normal((33, 17)).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(1, keepdims=True))
    same(softmax(x), (e / e.sum(1, keepdims=True)).astype(np.float32), rtol=1e-6)
    assert softmax.cache_info()["misses"] == 1
    w = rng.standard_normal((17, 9))
    b = rng.standard_normal(9)
    same(affine_relu(x64, w, b), np.maximum(x64 @ w + b, 0.0))
    y = rng.standard_normal((33, 17))
    want = -x64.T * 2 + abs(y.T) ** 2 - (x64.T > 0) + np.where(y.T < x64.T, 1.0, 0.5)
    same(mixed(x64, y), want)


def test_northstar_softmax_in_a_fresh_process():
    """jd.numpy inside @jd.compute, as DESIGN's north star writes it."""
    code = ("import numpy as np, jitdl as jd\njnp = jd.numpy\n"
            "@jd.compute\ndef sm(X):\n"
            "    e = jnp.exp(X - jnp.max(X, axis=1, keepdims=True))\n"
            "    return e / jnp.sum(e, axis=1, keepdims=True)\n"
            "a = np.random.default_rng(0).standard_normal((8, 5))\n"
            "e = np.exp(a - a.max(1, keepdims=True))\n"
            "assert np.allclose(sm(a), e / e.sum(1, keepdims=True))\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": ROOT}, timeout=120)
    assert r.stdout.strip() == "ok", r.stderr


def test_docs_page_is_current():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "docs", "gen_ops.py"), "--check"],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT},
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_readme_counts_the_functions_there_are():
    """The README said 30 jd.nn functions where there were 43."""
    import re
    from jitdl import nn
    with open(os.path.join(ROOT, "README.md")) as f:
        text = " ".join(f.read().split())
    m = re.search(r"(\d+) `jd.numpy` functions .*? and (\d+) `jd.nn` functions", text)
    assert m, "the README's count of functions is not where this test reads it"
    assert (int(m[1]), int(m[2])) == (len(jnp.status()), len(nn.STATUS))


# -- found in review ----------------------------------------------------------------------
class _Sub(np.ndarray):
    pass


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_ndarray_subclasses_never_reuse_another_shapes_kernel():
    """A subclass was keyed by its type alone: the kernel of the first shape ran on the
    second (a segfault for a smaller array)."""
    big = np.ones(100_000).view(_Sub)
    assert jnp.dot(big, big) == 100_000.0
    small = np.arange(4.0).view(_Sub)
    assert jnp.dot(small, small) == 14.0
    m2, m3 = np.matrix(np.ones((2, 2))), np.matrix(np.ones((3, 3)))
    assert jnp.matmul(m2, m2).shape == (2, 2) and jnp.matmul(m3, m3).shape == (3, 3)

    @jd.compute
    def double(X):
        return jd.tensor(X.shape, lambda i: X[i] * 2)
    same(double(np.arange(3.0).view(_Sub)), np.arange(3.0) * 2)
    same(double(np.arange(5.0).view(_Sub)), np.arange(5.0) * 2)


class _Tagged(np.ndarray):
    def __array_finalize__(self, obj):
        self.tag = getattr(obj, "tag", None)


class _Wrapping(np.ndarray):
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = [i.view(np.ndarray) if isinstance(i, np.ndarray) else i for i in inputs]
        return ("wrapped", getattr(ufunc, method)(*inputs, **kwargs))


def test_ndarray_subclasses_results_are_numpys(rng, tmp_path):
    """NumPy gives an ndarray subclass's results its type (with the attributes its
    __array_finalize__ keeps), and one with its own __array_ufunc__ the say over ufuncs:
    jd.numpy computed on the subclass's data and returned a plain ndarray (a unit-aware
    array lost its units silently). NumPy's function answers them, as it does a matrix; a
    np.memmap, whose results NumPy gives as plain arrays, is still computed by jitdl."""
    a = rng.standard_normal((3, 4))
    tagged = a.view(_Tagged)
    tagged.tag = "metres"
    cases = (lambda m, x: m.exp(x), lambda m, x: m.add(x, 1.5), lambda m, x: m.sum(x, axis=0),
             lambda m, x: m.mean(x, axis=1), lambda m, x: m.max(x, axis=0),
             lambda m, x: m.clip(x, -0.5, 0.5), lambda m, x: m.round(x, 1),
             lambda m, x: m.matmul(x, x.T), lambda m, x: m.sqrt(m.abs(x)))
    for case in cases:
        got, want = case(jnp, tagged), case(np, tagged)
        assert type(got) is type(want)     # (_Tagged, but round's to places: ndarray)
        assert getattr(got, "tag", None) == getattr(want, "tag", None)
        np.testing.assert_array_equal(got, want)
    assert sum(type(case(np, tagged)) is _Tagged for case in cases) == len(cases) - 1
    for case in (cases[0], cases[1], cases[5]):
        got, want = case(jnp, a.view(_Wrapping)), case(np, a.view(_Wrapping))
        assert type(got) is type(want) is tuple and got[0] == want[0] == "wrapped"
        np.testing.assert_array_equal(got[1], want[1])
    mm = np.memmap(tmp_path / "a.bin", dtype=np.float64, mode="w+", shape=a.shape)
    mm[:] = a
    jnp.clear()
    for case in cases[:6]:
        got, want = case(jnp, mm), case(np, mm)
        assert type(got) is type(want)
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert jnp.cache_info("exp")["kernels"] == 1


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_masked_arrays_and_matrices_are_numpys():
    """A masked array's mask and a matrix's 2-d reductions are NumPy's semantics, not its
    data's: jd.numpy read the masked elements too (sum 21 for NumPy's 13) and gave a
    matrix's sum over axis 0 one dimension (found by review). NumPy's function answers."""
    ma = np.ma.array([[1.0, 2, 3], [4, 5, 6]], mask=[[0, 1, 0], [0, 0, 1]])
    mat = np.matrix([[1.0, 2], [3, 4]])
    for case in (lambda m: m.sum(ma), lambda m: m.mean(ma, axis=0), lambda m: m.max(ma),
                 lambda m: m.argmax(ma), lambda m: m.exp(ma), lambda m: m.add(1.5, ma),
                 lambda m: m.where(ma > 2, ma, 0), lambda m: m.clip(ma, 2, 4),
                 lambda m: m.sum(mat, axis=0), lambda m: m.multiply(mat, mat),
                 lambda m: m.var(mat, axis=1)):
        got, want = case(jnp), case(np)
        assert type(got) is type(want)
        assert np.shape(got) == np.shape(want)
        np.testing.assert_array_equal(np.ma.getmaskarray(got), np.ma.getmaskarray(want))
        np.testing.assert_allclose(np.ma.filled(got, 0), np.ma.filled(want, 0))
    with pytest.raises(TypeError, match="MaskedArray, which jitdl does not compile"):
        jd.nn.relu(ma)
    # a definition refuses them by name, on every call (it summed the masked elements too)
    total = jd.compute(lambda X: jnp.sum(X))
    assert total(np.asarray(ma)) == 21.0
    for a in (ma, mat, ma):
        with pytest.raises(jd.ArgumentError, match="argument 'X' is a numpy.*asarray"):
            total(a)


def test_numpy_functions_and_truth_of_whole_tensors(rng):
    @jd.compute
    def dot(X, W):
        return np.dot(X, W)

    @jd.compute
    def branchy(X):
        if X.sum() > 0:
            return X + 1
        return X - 1

    a, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    same(dot(a, b), a @ b)                           # was a * b (0-d object arrays)
    with pytest.raises(jd.DefinitionError, match="truth value"):
        branchy(a)


def test_reductions_over_no_axes_and_of_bools():
    assert jnp.all(np.array(5.0)) is np.True_
    assert jnp.any(np.array(0, np.int8)) is np.False_
    assert jnp.argmax(np.array(3)) == 0
    same(jnp.all(np.array([[0.5, 0.0]]), axis=()), np.array([[True, False]]))
    for f in ("max", "min", "nanmax", "nanmin"):
        for x in ([True, False], [False, False], [True, True]):
            assert getattr(jnp, f)(np.array(x)) == getattr(np, f)(np.array(x))
    with pytest.raises(TypeError):
        jnp.ptp(np.array([True, False]))
    with pytest.raises(np.exceptions.AxisError):    # (NumPy checks the axis first)
        jnp.ptp(np.array([True, False]), axis=1)
    with pytest.raises(ValueError, match="zero-size array"):
        jnp.ptp(np.zeros(0, bool))


def test_static_values_that_python_calls_equal_get_their_own_kernels():
    assert str(jnp.max(np.array([-1.0]), initial=-0.0)) == "-0.0"
    assert str(jnp.max(np.array([-1.0]), initial=0)) == "0.0"
    x = np.array([np.nan, 1.0])
    before = eager.cache_info("nan_to_num")["kernels"]
    for _ in range(3):
        same(jnp.nan_to_num(x, nan=float("nan")), x)
    assert eager.cache_info("nan_to_num")["kernels"] - before <= 1


def test_empty_results_compile_nothing():
    """A call whose result has no elements returns NumPy's empty result (shape and dtype)
    without a kernel: one per empty shape cost a compile each; an empty operand with a
    result that has elements (a sum over an empty axis) still compiles, and NumPy's shape
    errors still come."""
    before = {op: eager.cache_info(op)["kernels"] for op in ("add", "exp", "less", "where")}
    for n in range(300, 306):
        for got, want in ((jnp.add(np.zeros((n, 0)), 1.0), np.add(np.zeros((n, 0)), 1.0)),
                          (jnp.exp(np.zeros((0, n), np.float32)),
                           np.exp(np.zeros((0, n), np.float32))),
                          (jnp.less(np.zeros((0, 1, n), np.int8), 3),
                           np.less(np.zeros((0, 1, n), np.int8), 3)),
                          (jnp.where(np.ones((n, 0), bool), 1, np.zeros(0, np.uint8)),
                           np.where(np.ones((n, 0), bool), 1, np.zeros(0, np.uint8)))):
            assert got.shape == want.shape and got.dtype == want.dtype
    assert {op: eager.cache_info(op)["kernels"] for op in before} == before
    same(jnp.sum(np.zeros((0, 3)), axis=0), np.zeros(3))
    with pytest.raises(ValueError, match="could not be broadcast"):
        jnp.add(np.zeros((0, 3)), np.zeros(4))


def test_zero_d_results_follow_numpy():
    assert isinstance(jnp.copy(np.array(3.0)), np.ndarray)
    assert isinstance(jnp.sum(np.array([1.0, 2.0])), np.float64)
    assert isinstance(jnp.dot(np.ones(3), np.ones(3)), np.float64)


def test_out_errors_are_value_errors():
    a = np.ones((2, 2))
    ro = np.ones((2, 2))
    ro.flags.writeable = False
    for _ in range(2):                               # the second call is a cached one
        with pytest.raises(ValueError, match="read-only"):
            jnp.add(a, a, out=ro)
        with pytest.raises(ValueError):
            jnp.add(a, a, out=np.zeros((3, 3)))


def test_modulo_by_a_size_that_may_be_zero_is_not_proven():
    """`Y[i % n]` with n a size that can be 0 read outside Y (garbage); now the access
    is checked where it reads (DESIGN's rule for an index the prover cannot place, as
    01659b3 does for clamps): NumPy's values where Y has elements, a KernelIndexError
    where it is empty; and a loop over a multiple of n proves n >= 1 inside it."""
    @jd.compute(dynamic=True)
    def wrap(X, Y):
        return jd.tensor(X.shape, lambda i: X[i] + Y[i % Y.shape[0]])
    same(wrap(np.arange(5.0), np.arange(3.0)), np.arange(5.0) + np.arange(3.0)[np.arange(5) % 3])
    with pytest.raises(IndexError, match="outside"):
        wrap(np.arange(5.0), np.arange(0.0))

    @jd.compute(dynamic=True)
    def tile(X):
        return jd.tensor((2 * X.shape[0],), lambda i: X[i % X.shape[0]])
    same(tile(np.arange(3.0)), np.tile(np.arange(3.0), 2))
    same(tile(np.arange(0.0)), np.zeros(0))


@pytest.mark.parametrize("name", ["power", "clip"])
def test_power_and_clip_take_where_and_order_like_ufuncs(name):
    """NumPy's power is a ufunc and its clip forwards ufunc keywords: where= with out=
    keeps out's elements where the mask is False; order= is accepted; a non-bool mask
    is NumPy's error."""
    rng = np.random.default_rng(7)
    a, b = np.abs(rng.standard_normal((4, 5))) + 0.1, rng.standard_normal((4, 5))
    args = (a, b) if name == "power" else (b, -0.5, 0.5)
    mask = rng.random((4, 5)) > 0.5
    want, got = rng.standard_normal((4, 5)), None
    got = want.copy()
    r = getattr(jnp, name)(*args, out=got, where=mask)
    getattr(np, name)(*args, out=want, where=mask)
    assert r is got
    # (the kept elements are equal; CUDA's pow may differ from the host's in the last bit)
    np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    np.testing.assert_allclose(getattr(jnp, name)(*args, order="F"), getattr(np, name)(*args))
    with pytest.raises(TypeError, match="to dtype\\('bool'\\)"):
        getattr(jnp, name)(*args, out=got, where=np.ones((4, 5)))


def test_power_where_masks_out_negative_integer_exponents():
    """Only the elements where= computes are checked for negative integer exponents
    (the review's case: NumPy computes the rest, jitdl raised for a masked -2)."""
    i = np.arange(-2, 4).reshape(2, 3)
    want, got = np.full((2, 3), 7), np.full((2, 3), 7)
    np.power(2, i, where=i >= 0, out=want)
    jnp.power(2, i, where=i >= 0, out=got)
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="negative integer powers"):
        jnp.power(2, i, where=i >= -1, out=got)


@pytest.mark.parametrize("where", [1, 0, None, np.int64(1), 1.0, [1, 0, 1, 0], np.array(True),
                                   np.arange(4), np.array(1)])
def test_ufunc_where_takes_what_numpy_casts(where):
    """where= of a ufunc: Python numbers, None, NumPy scalars and lists are cast to bool
    as NumPy casts them; arrays (0-d too) must be bool (NumPy's TypeError)."""
    a, b = np.arange(4.0) * 1.5, np.ones(4)
    want, got = np.full(4, 9.0), np.full(4, 9.0)
    try:
        np.add(a, b, out=want, where=where)
    except TypeError:
        with pytest.raises(TypeError, match="to dtype\\('bool'\\)"):
            jnp.add(a, b, out=got, where=where)
        return
    assert jnp.add(a, b, out=got, where=where) is got
    np.testing.assert_array_equal(got, want)


def test_ufunc_order_and_a_tuple_of_none_out():
    a, b = np.arange(4.0), np.ones(4)
    for order in ("c", "f", "a", "k", None):
        np.testing.assert_array_equal(jnp.add(a, b, order=order), a + b)
    with pytest.raises(TypeError, match="order must be str"):
        jnp.add(a, b, order=3)
    with pytest.raises(ValueError, match="order must be one of"):
        jnp.add(a, b, order="X")
    got = jnp.multiply(a, b, out=(None,), where=a > 1)      # (a fresh result)
    np.testing.assert_array_equal(got[a > 1], (a * b)[a > 1])


def test_clip_bounds_follow_numpy_2():
    """Both positional bounds or neither (then min=/max=, each optional); a missing
    positional bound is a TypeError, both kinds together a ValueError, as NumPy 2."""
    a = np.random.default_rng(11).standard_normal((3, 5))
    for call in (lambda m: m.clip(a), lambda m: m.clip(a, None, None),
                 lambda m: m.clip(a, min=-0.5), lambda m: m.clip(a, max=0.25),
                 lambda m: m.clip(a, min=-0.5, max=None), lambda m: m.clip(a, -0.5, 0.5)):
        np.testing.assert_array_equal(call(jnp), call(np))
    for call, error in ((lambda m: m.clip(a, -1), TypeError),
                        (lambda m: m.clip(a, a_max=1), TypeError),
                        (lambda m: m.clip(a, -1, None, max=2), ValueError),
                        (lambda m: m.clip(a, None, 1, min=0), ValueError)):
        with pytest.raises(error):
            call(np)
        with pytest.raises(error):
            call(jnp)


@pytest.mark.parametrize("order", ["F", "f", "A", "C", "K"])
def test_ufunc_order_gives_numpy_layout(order):
    """order='F' returns a Fortran-ordered result, 'A' one when the array arguments all
    are; the values are NumPy's either way."""
    rng = np.random.default_rng(12)
    c = rng.standard_normal((4, 6))
    f = np.asfortranarray(rng.standard_normal((4, 6)))
    for call in (lambda m: m.exp(f, order=order), lambda m: m.add(c, f, order=order),
                 lambda m: m.multiply(f, 2.0, order=order),
                 lambda m: m.power(np.abs(f), 1.5, order=order),
                 lambda m: m.clip(f, -0.5, 0.5, order=order),
                 lambda m: m.clip(f, np.zeros((4, 6)), 0.5, order=order),
                 lambda m: m.add(f, f, order=order, out=(None,)),
                 lambda m: m.exp(f.astype(np.float16), order=order),
                 lambda m: m.add(f.astype(np.complex128), 1, order=order)):
        got, want = call(jnp), call(np)
        np.testing.assert_allclose(got, want, rtol=1e-15)
        if order not in "Kk":
            assert got.flags.f_contiguous == want.flags.f_contiguous
            assert got.flags.c_contiguous == want.flags.c_contiguous


def test_fix_refuses_the_keywords_numpys_fix_refuses_naming_them():
    """np.fix is no ufunc (NumPy 2: fix(x, out=None)): jnp.fix(a, dtype='f4') raised an
    error naming casting=, which the call did not give (NumPy's dtype check was asked
    with casting= added); it names the keyword now, a TypeError as NumPy's, and fix
    without them is NumPy's values."""
    a = np.random.default_rng(5).standard_normal(7) * 3
    for kw, named in [({"dtype": "f4"}, "dtype"),
                      ({"signature": (None, np.float32)}, "signature"),
                      ({"dtype": np.float64, "casting": "unsafe"}, "dtype|casting")]:
        with pytest.raises(TypeError):
            np.fix(a, **kw)
        with pytest.raises(TypeError, match=f"unexpected keyword argument '({named})'"):
            jnp.fix(a, **kw)
    np.testing.assert_array_equal(jnp.fix(a), np.fix(a))


def test_fix_refuses_where_and_order_as_numpy():
    """np.fix(x, out=None) takes no where= or order= (NumPy 2: no ufunc); jnp.fix(a,
    where=mask, out=o) wrote o under the mask, and order='F' laid the result out, and
    where=True, order='K', casting='same_kind' (a ufunc's defaults) were taken: each is a
    TypeError naming the keyword now; jnp.fix(x=a) is np.fix(x=a)."""
    a = np.random.default_rng(6).standard_normal((3, 4)) * 3
    # (also given as a ufunc's defaults, which jnp.fix took silently)
    for kw in ({"where": a > 0}, {"where": a > 0, "out": np.zeros((3, 4))}, {"order": "F"},
               {"where": True}, {"order": "K"}, {"casting": "same_kind"}, {"subok": True},
               {"dtype": None}, {"signature": None}):
        with pytest.raises(TypeError):
            np.fix(a, **kw)
        with pytest.raises(TypeError, match=f"unexpected keyword argument '{next(iter(kw))}'"):
            jnp.fix(a, **kw)
    np.testing.assert_array_equal(jnp.fix(x=a), np.fix(x=a))


def test_ufunc_signature_and_gufunc_keywords_are_numpys():
    """A ufunc's signature= and matmul's and vecdot's gufunc keywords (axes=, axis=,
    keepdims=, order=, subok=, signature=) give NumPy's results, or its error class, on
    arrays (signature=(None, ..., X) is dtype=X, compiled); inside a definition those
    jitdl does not compile raise a jitdl error naming the keyword."""
    rng = np.random.default_rng(21)
    a, v = rng.standard_normal((3, 4)), rng.standard_normal(4)
    i = rng.integers(-9, 9, (3, 4))
    m1, m2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 3))
    f32 = np.float32
    calls = [lambda m: m.add(a, v, signature=(None, None, f32)),
             lambda m: m.add(i, v, signature=(None, None, "f8")),
             lambda m: m.add(a, v, signature=(None, None, None)),
             lambda m: m.add(a, v, signature="ff->f"), lambda m: m.add(a, v, signature="dd"),
             lambda m: m.add(a, v, signature=(f32, f32, f32)),
             lambda m: m.add(a, v, signature=(None, None)),
             lambda m: m.add(a, v, signature=(None, None, f32), dtype=f32),
             lambda m: m.add(a, i, signature=(None, None, np.int64)),
             lambda m: m.add(a, i, signature=(None, None, np.int64), casting="unsafe"),
             lambda m: m.less(a, v, signature=(None, None, np.bool_)),
             lambda m: m.exp(a, signature=(None, f32)), lambda m: m.exp(a, signature="f->f"),
             lambda m: m.exp(a, signature=(None, np.float16)),
             lambda m: m.clip(a, -0.5, 0.5, signature=(None, None, None, f32)),
             lambda m: m.clip(a, min=-0.5, signature="ddd->d"),
             lambda m: m.clip(a, -0.5, None, signature=(None, None, f32)),
             lambda m: m.matmul(m1, m2, signature=(None, None, f32)),
             lambda m: m.matmul(m1, m2, signature="ff->f"),
             lambda m: m.matmul(m1, m2, axes=[(-2, -1), (-2, -1), (-2, -1)]),
             lambda m: m.matmul(m1, m2, axes=[(0, 1), (2, 0), (1, 0)]),
             lambda m: m.matmul(m1, m2, axes=[(0, 1), (2, 0)]),
             lambda m: m.matmul(m1, m2, axis=0), lambda m: m.matmul(m1, m2, keepdims=True),
             lambda m: m.matmul(m1, m2, order="F"), lambda m: m.matmul(m1, m2, order="X"),
             lambda m: m.matmul(m1, m2, subok=False),
             lambda m: m.matmul(m1, m2, out=np.empty((2, 3, 3)), order="F"),
             lambda m: m.vecdot(a, a, keepdims=True), lambda m: m.vecdot(a, a, axis=0),
             lambda m: m.vecdot(a, a, axis=0, keepdims=True),
             lambda m: m.vecdot(a, a, axes=[(0,), (0,), ()]),
             lambda m: m.vecdot(a, a, axes=[(0,), (0,)], axis=0),
             lambda m: m.vecdot(a, v, order="F"), lambda m: m.vecdot(a, v, signature="dd->d"),
             lambda m: m.vecdot(a.T, a.T, order="F", dtype=f32),
             # (None given is NumPy's TypeError, not the keyword left out: a full
             # contraction or the default axis would be a guess)
             lambda m: m.vecdot(a, a, axis=None), lambda m: m.vecdot(a, a, axes=None),
             lambda m: m.vecdot(a, a, keepdims=None), lambda m: m.matmul(m1, m2, axis=None),
             lambda m: m.matmul(m1, m2, axes=None), lambda m: m.matmul(m1, m2, keepdims=None)]
    for call in calls:
        try:
            want = call(np)
        except Exception as e:
            with pytest.raises(type(e)):
                call(jnp)
            continue
        got = call(jnp)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6 if want.dtype == f32 else 1e-12)
        assert got.flags.f_contiguous == want.flags.f_contiguous
    assert jnp.add(a, v, signature=(None, None, f32)).dtype == f32     # (compiled: cached)

    @jd.compute
    def sig(x, y):
        return jnp.add(x, y, signature=(None, None, np.float32))
    np.testing.assert_allclose(sig(a, v), np.add(a, v, dtype=f32), rtol=1e-6)
    assert sig(a, v).dtype == f32

    @jd.compute
    def bad(x, y):
        return jnp.add(x, y, signature="ff->f")
    with pytest.raises(jd.JitdlError, match="signature="):
        bad(a, v)

    @jd.compute
    def moved(x, y):
        return jnp.matmul(x, y, axes=[(0, 1), (2, 0), (1, 0)])
    with pytest.raises(jd.JitdlError, match="axes="):
        moved(m1, m2)


def test_clip_of_a_python_number_is_an_array_of_it():
    """NumPy makes a Python number `a` an array first: its dtype is strong against the
    bounds' (int with a float32 bound: float64), and an int bound past int64 clips
    nothing."""
    for call in (lambda m: m.clip(7, None, np.float32(0.5)), lambda m: m.clip(7, 1, 2 ** 70),
                 lambda m: m.clip(True, 0, 1), lambda m: m.clip(3, 0.5, 1),
                 lambda m: m.clip(-2.5, -1, 1)):
        got, want = call(jnp), call(np)
        assert got == want and np.asarray(got).dtype == np.asarray(want).dtype


def test_review_cases_of_numpy_semantics():
    """Cases a differential fuzz against NumPy found: NaN reductions with initial=/where=
    (NumPy's function computes them), take/repeat of a 0-d array along axis 0, an
    integer power whose Python-int exponent does not fit (OverflowError before the
    negative-exponent ValueError), where= with an out= of the wrong rank, and round of
    int8 to tens and hundreds (no wrap in between)."""
    x = np.array([[1.0, np.nan, 3.0], [np.nan, np.nan, -1.0]])
    m = np.array([[True, True, False], [True, False, True]])
    for call in (lambda n: n.nanmax(x, initial=5), lambda n: n.nanmin(x, axis=1, initial=0, where=m),
                 lambda n: n.nansum(x, where=m), lambda n: n.nanmean(x, axis=0, where=m),
                 lambda n: n.nansum(x, axis=1, initial=2.0, keepdims=True),
                 lambda n: n.repeat(np.array(7), 2, axis=0),
                 lambda n: n.take(np.array(7.5), [0, 0], axis=-1),
                 lambda n: n.round(np.array([-128, 127, -50, 50, -51, 105], np.int8), -2),
                 lambda n: n.round(np.array([0, 255, 250, 149], np.uint8), -1)):
        with np.errstate(all="ignore"):
            want = call(np)
        got = call(jnp)
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.asarray(want).dtype
    for n in (np, jnp):
        with pytest.raises(OverflowError):
            n.power(np.array([2], np.uint8), -1)
        with pytest.raises(ValueError, match="negative integer powers"):
            n.power(np.array([2], np.int8), -1)
        with pytest.raises(ValueError, match="non-broadcastable output"):
            n.negative(np.ones((1, 3)), out=np.zeros(3), where=np.array([True, False, True]))


def test_astype_to_dtypes_jitdl_does_not_compile_and_device():
    """astype to uint16 / float16 is NumPy's (found by the array API test suite, which
    raised TypeError there); device= is the array API's: "cpu" or None for NumPy arrays."""
    a = np.arange(-3, 5)
    for dt in (np.uint16, "float16", np.complex64):
        got = jnp.astype(a, dt)
        assert got.dtype == np.dtype(dt)
        np.testing.assert_array_equal(got, a.astype(dt))
    np.testing.assert_array_equal(jnp.astype(a, np.float32, device="cpu"), a.astype(np.float32))
    with pytest.raises(ValueError, match="device"):
        jnp.astype(a, np.float32, device="gpu")
    assert jnp.__array_api_version__ == np.__array_api_version__
    assert jnp.__array_namespace_info__ is np.__array_namespace_info__


def test_zero_d_results_are_arrays_where_numpys_are():
    """np.where and np.tensordot give 0-d arrays (ufuncs and reductions give scalars)."""
    for _ in range(2):      # (and the second call, on the kernels' fast path)
        r = jnp.where(True, np.array(1.5), 2.0)
        assert type(r) is np.ndarray and r.shape == () and r == 1.5
        r = jnp.tensordot(np.arange(3.0), np.arange(1.0, 4.0), 1)
        assert type(r) is np.ndarray and r.shape == () and r == 8.0
        assert type(jnp.add(np.array(1.5), 1)) is type(np.add(np.array(1.5), 1))


def test_astype_to_a_swapped_byte_order_is_numpys():
    got = jnp.astype(np.arange(3.0), ">f4")
    assert got.dtype == np.dtype(">f4")
    np.testing.assert_array_equal(got, np.arange(3.0))


def test_integer_dtype_moments_are_numpys():
    """From a differential fuzz against NumPy: mean/var/std with an integer dtype= sum in
    that dtype, wrapping, and truncate (np.mean(int8 [100, 100, 100], dtype=int8) == 14);
    on arrays they are NumPy's answers."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (4, 6)).astype(np.uint8)
    cases = [("mean", {"dtype": np.int8}), ("mean", {"axis": 1, "dtype": np.int16,
                                                     "keepdims": True}),
             ("var", {"dtype": np.int16}), ("var", {"axis": 0, "dtype": np.int32, "ddof": 1}),
             ("std", {"dtype": np.int16}), ("mean", {"dtype": bool})]
    for name, kw in cases:
        with np.errstate(all="ignore"):
            got, want = getattr(jnp, name)(x, **kw), getattr(np, name)(x, **kw)
        assert np.asarray(got).dtype == np.asarray(want).dtype, (name, kw)
        np.testing.assert_array_equal(got, want)
    assert jnp.mean(np.array([100, 100, 100], np.int8), dtype=np.int8) == 14
    # a float dtype= stays jitdl's own kernel
    np.testing.assert_allclose(jnp.var(x, axis=1, dtype=np.float32), np.var(x, axis=1),
                               rtol=1e-6)


def test_round_to_more_places_than_floats_have():
    """10 ** 400 is inf: NumPy's rounding gives NaN there (jitdl raised OverflowError)."""
    x = np.array([0.5, 3e38, 1234.5678], np.float32)
    for d in (-400, -40, 40, 400, 3, -3):
        with np.errstate(all="ignore"):
            want = np.round(x, d)
        np.testing.assert_array_equal(jnp.round(x, d), want)
    for a in ([True, False], False, np.bool_(True)):     # NumPy's float16, from any bool
        got, want = jnp.round(a), np.round(a)
        assert np.asarray(got).dtype == np.asarray(want).dtype == np.float16
        np.testing.assert_array_equal(got, want)


def test_round_past_22_places_scales_as_numpy():
    """NumPy's round scales by 10 ** d made as 1e9 times ten d - 9 times, which past 1e22
    is not the nearest double (9.999999999999999e+22 for d = 23): jnp.round(x, 23) of
    random float64s differed from NumPy's in the last bit for about half of them (its
    scale was 1e23); also into out= of another dtype."""
    rng = np.random.default_rng(52)
    x = rng.standard_normal(2000) * 10.0 ** rng.integers(-30, 5, 2000)
    for d in (23, 25, 30, 40, 200, 308, 309):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(jnp.round(x, d), np.round(x, d))
    o1, o2 = np.empty(2000), np.empty(2000)
    y = x.astype(np.float32)
    np.testing.assert_array_equal(jnp.round(y, 25, out=o2), np.round(y, 25, out=o1))


def test_round_into_out_of_another_dtype_rounds_as_numpy():
    """NumPy's round into out= multiplies into out (divides, for tens) and rounds and
    scales back in out's dtype: round(float32 array, 2, out=float64 array) gives
    float64's 1.23, where jitdl rounded in float32 (1.2300000190734863) and cast; out=
    an integer array for integers rounded to tens is NumPy's casting error, where jitdl
    wrote the integers."""
    rng = np.random.default_rng(51)
    x = np.array([1.23456, 2.34567, 9.3505, -0.125], np.float32)
    cases = [(x, 2, "f8"), (x, 3, "f8"), (x, -1, "f8"), (x, 1, "f4"), (x, 2, "i8"),
             (rng.standard_normal(40) * 30, 2, "f4"), (rng.standard_normal(40), 1, "i4"),
             (rng.integers(-500, 500, 40), -2, "f8"), (rng.integers(-500, 500, 40), -1, "i8"),
             (rng.integers(-500, 500, 40).astype(np.int16), -1, "f4"),
             (rng.integers(-500, 500, 40), 2, "f8"), (2.345, 2, "f4")]
    for a, d, dt in cases:
        o1, o2 = np.full(np.shape(a), 7, dt), np.full(np.shape(a), 7, dt)
        try:
            want = np.round(a, d, out=o1)
        except Exception as e:
            with pytest.raises(type(e)):
                jnp.round(a, d, out=o2)
            continue
        assert jnp.round(a, d, out=o2) is o2
        np.testing.assert_array_equal(o2, want)


def test_round_into_out_of_another_shape_is_numpys_error():
    """round(a, d, out=o) with o of another dtype and a shape a broadcasts to (a (5,)
    float32 array into a (4, 5) float64 out=) is NumPy's ValueError (invalid output
    shape), as with out= of a's dtype; the multiply that writes out= broadcast a into
    every row of it instead."""
    rng = np.random.default_rng(52)
    x = rng.standard_normal(5).astype(np.float32) * 100
    for a, d, dt in [(x, 2, "f8"), (x, -1, "f8"), (x, 1, "f2"),
                     (rng.integers(-500, 500, 5), -1, "i8"), (np.float32(1.25), 1, "f8")]:
        for shape in [(4, 5), (3, 1, 5)]:
            o = np.full(shape, 7, dt)
            with pytest.raises(ValueError):
                np.round(a, d, out=o.copy())
            with pytest.raises(ValueError):
                jnp.round(a, d, out=o)
            assert (o == 7).all()


def test_round_into_out_with_leading_ones_is_numpys():
    """NumPy's round writes an out= of a's size into which a broadcasts (a (5,) array
    into a (1, 5) or (1, 1, 5) out=), of a's dtype or another (then rounding there);
    jnp.round refused it (non-broadcastable output operand). An out= of a's size a does
    not broadcast into ((5, 1)) stays NumPy's ValueError."""
    rng = np.random.default_rng(53)
    x = rng.standard_normal(5).astype(np.float32) * 100
    for a, d, dt in [(x, 2, "f4"), (x, 0, "f4"), (x, -1, "f4"), (x, 2, "f8"), (x, 1, "f2"),
                     (x.astype(np.float64), 3, "f8"), (rng.integers(-500, 500, 5), -1, "f8"),
                     (rng.integers(-500, 500, 5), 1, "i8")]:
        for shape in [(1, 5), (1, 1, 5)]:
            o1, o2 = np.full(shape, 7, dt), np.full(shape, 7, dt)
            want = np.round(a, d, out=o1)
            assert jnp.round(a, d, out=o2) is o2
            np.testing.assert_array_equal(o2, want)
        with pytest.raises(ValueError):
            np.round(a, d, out=np.full((5, 1), 7, dt))
        with pytest.raises(ValueError):
            jnp.round(a, d, out=np.full((5, 1), 7, dt))


def test_round_of_integers_into_out_without_their_leading_ones_is_numpys():
    """NumPy's round of integers to places >= 0 assigns a to out=, which drops a's
    leading 1s: np.round(int array of shape (1, 5), out=np.empty(5)) writes out, as do
    (1, 1, 5) into (1, 5), (1, 5, 1) into (5, 1) and (1,) into a 0-d out=; jnp.round
    refused them (non-broadcastable output operand). Floats, places < 0 and an out= a
    does not fit ((1, 2, 3) into (6,)) stay NumPy's ValueError."""
    rng = np.random.default_rng(59)
    for ashape, oshape in [((1, 5), (5,)), ((1, 1, 5), (1, 5)), ((1, 1, 5), (5,)),
                           ((1, 5, 1), (5, 1)), ((1,), ()), ((1, 1), (1,))]:
        for dt in ("i8", "i4", "u1", ">i4"):
            a = rng.integers(0, 200, ashape).astype(dt)
            for d, odt in [(0, "i8"), (0, "f8"), (2, "f4"), (1, "i4")]:
                for _ in range(2):
                    o1, o2 = np.full(oshape, 7, odt), np.full(oshape, 7, odt)
                    want = np.round(a, d, out=o1)
                    assert want is o1 and jnp.round(a, d, out=o2) is o2
                    np.testing.assert_array_equal(o2, o1)
    np.testing.assert_array_equal(jnp.round([[3, 4]], out=np.zeros(2)), [3, 4])
    a = rng.integers(-500, 500, (1, 5))
    for x, d, oshape in [(a, -1, (5,)), (a * 1.5, 0, (5,)), (a * 1.5, 2, (5,)),
                         (a.reshape(1, 1, 5), 0, (5, 1)), (a[:, :3].reshape(1, 1, 3), 0, (3, 1))]:
        with pytest.raises(ValueError):
            np.round(x, d, out=np.full(oshape, 7.0))
        with pytest.raises(ValueError):
            jnp.round(x, d, out=np.full(oshape, 7.0))


def test_round_refuses_decimals_past_a_c_int_as_numpy():
    """NumPy's round takes decimals as a C int: round(x, 2**31) and round(x, 10**20) are
    its OverflowError (2**31 - 1 and -2**31 still give NaN), where jitdl gave NaN."""
    x = np.random.default_rng(53).standard_normal(5)
    for d in [2 ** 31 - 1, -2 ** 31]:
        np.testing.assert_array_equal(jnp.round(x, d), np.round(x, d))
    for d in [2 ** 31, -2 ** 31 - 1, 10 ** 20, np.int64(2 ** 40)]:
        with pytest.raises(OverflowError):
            np.round(x, d)
        with pytest.raises(OverflowError, match="decimals"):
            jnp.round(x, d)
        with pytest.raises(OverflowError):
            jnp.round(x.astype(np.float32), d, out=np.empty(5))


def test_round_takes_decimals_as_numpy_does_an_index():
    """NumPy's round takes decimals through operator.index: True is 1, False 0, and a
    NumPy integer or a 0-d integer array its value (jitdl refused the bools and the 0-d
    array); a float, str, None, np.True_ or 1-d array is a TypeError in both."""
    x = np.random.default_rng(54).standard_normal((3, 4)) * 100
    for a in (x, x.astype(np.float32), (x * 10).astype(np.int32)):
        for d in (True, False, np.int8(-1), np.uint64(2), np.array(1), np.array(-2)):
            got, want = jnp.round(a, d), np.round(a, d)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(jnp.round(a, decimals=d), want)
            np.testing.assert_array_equal(jnp.around(a, d), want)
    for d in (1.0, "1", None, np.True_, np.float64(2), np.array([1])):
        with pytest.raises(TypeError):
            np.round(x, d)
        with pytest.raises(TypeError, match="decimals must be an int"):
            jnp.round(x, d)


def test_round_of_bools_inside_a_definition():
    """Inside a definition round of bools is rint's float (float32 there: no float16), and
    other decimals are NumPy's UFuncTypeError; round(X) and X.round(1) gave X, bool."""
    b = np.array([True, False, True])
    for dynamic in (False, True):
        f = jd.compute(dynamic=dynamic)(lambda X: jnp.round(X) + X.round())
        got = f(b)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, 2 * np.round(b))
        for d in (1, -1):
            g = jd.compute(dynamic=dynamic)(lambda X: X.round(d))
            with pytest.raises(np._core._exceptions.UFuncTypeError, match="Cannot cast"):
                g(b)
            with pytest.raises(TypeError, match="Cannot cast"):
                np.round(b, d)


@pytest.mark.skipif(__import__("platform").machine().lower() not in ("x86_64", "amd64"),
                    reason="NumPy's float64 to integer conversion out of range is x86's here")
def test_integer_round_at_the_ends_of_each_type(rng):
    """NumPy rounds int32 and int64 through float64 and converts back as x86 does: a result
    outside the type is its minimum (round(int32 min, -1)), int64s past 2**53 lose their low
    digits; narrower types wrap. jitdl gave the exact multiple, wrapped."""
    for dt in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64):
        info = np.iinfo(dt)
        ends = [info.min, info.max, info.max - 4, info.min + 5, 25, 35, 15]
        if info.min < 0:
            ends += [-25, -35, -15] + ([2 ** 53 + 1, -(2 ** 60) - 3] if info.bits == 64 else [])
        a = np.concatenate([np.array(ends, dt),
                            rng.integers(info.min, info.max, 300, dtype=dt, endpoint=True)])
        for d in (-1, -2, -9, -18, -19, -309, 0, 3):
            with np.errstate(all="ignore"):     # (NumPy's own cast warnings)
                want = np.round(a, d)
                got = jnp.round(a, d)
            assert got.dtype == want.dtype, (dt, d)
            np.testing.assert_array_equal(got, want, err_msg=f"{dt.__name__} {d}")


def test_axis_bounds_are_checked_before_repeats():
    """NumPy checks every axis's bounds first: (0, 0, 1) on a vector is an AxisError."""
    x = np.arange(3.0)
    with pytest.raises(np.exceptions.AxisError, match="axis 1 is out of bounds"):
        jnp.min(x, axis=(0, 0, 1))
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        jnp.sum(x, axis=(0, -1))
    for axis in (True, (True,), np.True_):      # NumPy: "an integer is required"
        with pytest.raises(TypeError, match="an integer is required"):
            jnp.sum(np.ones((2, 3)), axis=axis)


def test_dtype_of_a_ufunc_with_a_list_operand():
    """From the differential fuzz: dtype='float64' with an array and a list was dropped
    (NumPy's None == dtype('float64') is True, and a list's elements were not part of the
    cache key): int64 [2**62] * [4] wrapped to 0 instead of 1.8e19."""
    cases = [lambda m: m.add(np.array([3, 4]), [1, 2], dtype="float64"),
             lambda m: m.remainder(np.array([0, -1, 3]), [1, 0, 7], dtype="float64"),
             lambda m: m.multiply(np.array([2 ** 62, 1]), [4, 1], dtype=float),
             lambda m: m.add(np.array([127, 1], np.int8), [True, False], dtype=np.float64),
             lambda m: m.add([1.5, 2.5], np.array([1, 2]), dtype="float64"),
             lambda m: m.add([1, 2], np.array([1, 2]), dtype="float64"),      # (same key
             lambda m: m.add(np.array([1, 2]), [1.5, 2.5], dtype="int64", casting="unsafe"),
             lambda m: m.add(np.array([1, 2]), [1, 2], dtype="int64", casting="unsafe"),
             lambda m: m.maximum(np.array([1.0, 2.0], np.float32), (3, 0), dtype="float64")]
    for case in cases:
        with np.errstate(all="ignore"):
            got, want = case(jnp), case(np)
        assert got.dtype == want.dtype, (got, want)
        np.testing.assert_array_equal(got, want)


def test_negative_integer_powers_of_lists_and_empty_arrays():
    """From the fuzz: a list exponent skipped NumPy's ValueError (power([2, 3], [-1, 2])
    gave [0, 9]); an empty result raises nothing in NumPy."""
    with pytest.raises(ValueError, match="negative integer powers"):
        jnp.power(np.array([2, 3]), [-1, 2])
    with pytest.raises(ValueError, match="negative integer powers"):
        jnp.power([2, 3], (1, -2))
    for base, exp in [(np.array([], np.int64), -1), (np.zeros((0, 3), np.int64), [-1, 2, 3])]:
        got, want = jnp.power(base, exp), np.power(base, exp)
        assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(jnp.power([2, 3], (1, 2)), [2, 9])


def test_take_from_a_number_checks_its_indices():
    """From the fuzz: take(12, [1, 5]) gave [12, 12]; NumPy raises IndexError."""
    for a in (12, np.int64(12), 2.5):
        with pytest.raises(IndexError):
            jnp.take(a, [1, 5])
        with pytest.raises(IndexError):
            jnp.take(a, 3)
        np.testing.assert_array_equal(jnp.take(a, [0, -1]), np.take(a, [0, -1]))


@pytest.mark.parametrize("shape, indices, axis, mode", [
    ((3, 0), [5], 0, "raise"), ((3, 0), [-4], 0, "raise"), ((3, 0), [2], 0, "raise"),
    ((0, 3), [5], 1, "raise"), ((2, 0, 3), [7], -1, "raise"), ((2, 0), [1], 1, "raise"),
    ((1, 0, 0), -2, -2, "clip"), ((1, 0, 0), -2, -2, "raise"),
    ((2, 0), [1], 1, "clip"), ((2, 0), [], 1, "raise")])
def test_take_with_an_empty_result_checks_indices_where_numpy_does(rng, shape, indices, axis,
                                                                   mode):
    """take(rand(3, 0), [5], axis=0) gave an empty (1, 0) array (an empty result reads
    nothing, so no kernel checked the index), and take(rand(1, 0, 0), -2, axis=1,
    mode='clip') raised: NumPy checks the indices with mode 'raise' wherever the axes
    before `axis` hold an element, and with 'wrap' and 'clip' only for a result with one."""
    x, i = rng.standard_normal(shape), np.array(indices, dtype=np.intp)
    if (shape, mode) == ((1, 0, 0), "clip"):    # (NumPy's mode 'wrap' loops forever there)
        assert jnp.take(x, i, axis=axis, mode="wrap").shape == (1, 0)
    try:
        want = np.take(x, i, axis=axis, mode=mode)
    except IndexError:
        with pytest.raises(IndexError):
            jnp.take(x, i, axis=axis, mode=mode)
        return
    got = jnp.take(x, i, axis=axis, mode=mode)
    assert got.shape == want.shape and got.dtype == want.dtype


def test_repeated_out_calls_take_the_fast_path_only_where_it_is_exact(rng):
    """A second call like the first writes straight into out=; an out= of another dtype,
    shape, layout, an operand itself, a read-only one or an int that does not fit still
    takes the general path, each call after the other."""
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    x8 = rng.integers(-100, 100, 50).astype(np.int8)
    m = rng.standard_normal((20, 30))
    for _ in range(3):
        o = np.empty(1000)
        assert jnp.add(a, b, out=o) is o
        same(o, a + b)
        o32 = np.empty(1000, np.float32)
        assert jnp.add(a, b, out=o32) is o32
        same(o32, (a + b).astype(np.float32), rtol=1e-6)
        c = a.copy()
        jnp.add(c, b, out=c)
        same(c, a + b)
        wide = np.empty((3, 1000))
        jnp.add(a, b, out=wide)
        same(wide, np.broadcast_to(a + b, (3, 1000)))
        strided = np.empty(2000)[::2]
        jnp.add(a, b, out=strided)
        same(strided, a + b)
        o8 = np.empty(50, np.int8)
        jnp.add(x8, 5, out=o8)
        same(o8, x8 + 5)
        with pytest.raises(OverflowError):
            jnp.add(x8, 300, out=o8)
        frozen = np.empty(1000)
        frozen.flags.writeable = False
        with pytest.raises(ValueError):
            jnp.add(a, b, out=frozen)
        rows = np.empty(20)
        jnp.sum(m, axis=1, out=rows)
        same(rows, m.sum(axis=1))
        jnp.exp(a, out=o)
        same(o, np.exp(a))
        other = rng.standard_normal(1234)    # the same kernel at another size
        o2 = np.empty(1234)
        jnp.multiply(other, 2.5, out=o2)
        same(o2, other * 2.5)


@pytest.mark.parametrize("y", [-1, 255, 256, 300, -129, 2 ** 40, 2 ** 64, 1.5, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16])
def test_where_takes_python_ints_as_numpy_does(y, dtype):
    """numpy.where wraps a Python int outside the dtype it meets (where(c, u8, -1) is
    255), where the ufuncs raise OverflowError; beyond int64 it raises."""
    rng = np.random.default_rng(4)
    c = rng.random(40) < 0.5
    x = rng.integers(0, 100, 40).astype(dtype)
    for args in ((c, x, y), (c, y, x)):
        try:
            want = np.where(*args)
        except OverflowError:
            with pytest.raises(OverflowError):
                jnp.where(*args)
            continue
        got = jnp.where(*args)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dynamic", [False, True])
def test_where_takes_python_int_arguments_of_a_definition_as_numpy_does(dynamic):
    """A Python-int argument of a definition outside the dtype it meets in where wraps,
    as numpy.where's (a literal already did); it raised an OverflowError saying that
    NumPy raises one too."""
    rng = np.random.default_rng(5)
    x = rng.integers(0, 100, 40).astype(np.uint8)
    f = jd.compute(dynamic=dynamic)(lambda X, s: jnp.where(X > 50, s, X))
    g = jd.compute(dynamic=dynamic)(lambda X, s: jnp.where(X > 50, X.astype(np.int8), s))
    for s in (-1, 255, 256, 300, -129, 2 ** 40, 7):
        for h, args in ((f, (x, s)), (g, (x, s))):
            want = np.where(x > 50, s, x) if h is f else np.where(x > 50, x.astype(np.int8), s)
            got = h(*args)
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)
    with pytest.raises(OverflowError):      # (beyond int64: NumPy's OverflowError too)
        f(x, 2 ** 64)


@pytest.mark.parametrize("dynamic", [False, True])
def test_clip_takes_python_int_bound_arguments_of_a_definition_as_numpy_does(dynamic):
    """A Python-int argument bound of clip below an integer array's range (a lower bound)
    or above it (an upper one) clips nothing, as NumPy's clip and a literal bound there;
    it raised an OverflowError. The other side is still NumPy's OverflowError."""
    x = np.random.default_rng(6).integers(0, 256, 40).astype(np.uint8)
    both = jd.compute(dynamic=dynamic)(lambda X, s, t: jnp.clip(X, s, t))
    low = jd.compute(dynamic=dynamic)(lambda X, s: X.clip(s, None))
    for s, t in ((-5, 300), (-1, 7), (3, 2 ** 40), (0, 255), (-2 ** 40, 100)):
        np.testing.assert_array_equal(both(x, s, t), np.clip(x, s, t))
        np.testing.assert_array_equal(low(x, s), np.clip(x, s, None))
        assert both(x, s, t).dtype == np.uint8
    for s, t in ((300, 400), (-2, -1)):
        with pytest.raises(OverflowError):
            np.clip(x, s, t)
        with pytest.raises(OverflowError, match="out of bounds for uint8"):
            both(x, s, t)


def test_tensordot_with_more_axes_than_dimensions_raises_numpys_class():
    a, b = np.ones((3, 4)), np.ones((4, 5))
    with pytest.raises(IndexError):         # (NumPy's: "tuple index out of range")
        np.tensordot(a, b, axes=3)
    with pytest.raises(IndexError, match="axes=3 is more than the dimensions"):
        jnp.tensordot(a, b, axes=3)


@pytest.mark.parametrize("order1, order2", [("F", "C"), ("C", "F"), ("F", "F")])
def test_matmul_of_transposed_operands(order1, order2, monkeypatch):
    """x @ W.T and X.T @ X: an F-ordered operand is read in place, as the C-ordered array
    it is the transpose of (no copy into C order: X.T @ X of a thin X copied more than
    the product computed); the answer, out= and the input arrays are NumPy's."""
    from jitdl.runtime.kernel import Kernel
    copies = []
    real = Kernel._contiguous
    monkeypatch.setattr(Kernel, "_contiguous",
                        lambda self, a, j: copies.append(a.shape) or real(self, a, j))
    rng = np.random.default_rng(8)
    for m, k, n in ((4, 6, 3), (33, 17, 9), (70, 300, 5)):
        a = np.asarray(rng.standard_normal((m, k)), order=order1)
        b = np.asarray(rng.standard_normal((k, n)), order=order2)
        a0, b0 = a.copy(), b.copy()
        for _ in range(3):
            want = a @ b
            np.testing.assert_allclose(jnp.matmul(a, b), want, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(jnp.matmul(a.astype(np.float32, order="K"),
                                                  b.astype(np.float32, order="K")),
                                       want, rtol=1e-4, atol=1e-4)
            out = np.full((m, n), np.nan)
            assert jnp.matmul(a, b, out=out) is out
            np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(a, a0)
        np.testing.assert_array_equal(b, b0)
    assert copies == []


@pytest.mark.parametrize("shape1, shape2", [
    ((70000, 3), (70000, 3)), ((3, 70000), (3, 70000)), ((700, 10, 10), (10,)),
    ((700, 10, 10), (10, 1)), ((700, 10, 10), ()), ((5, 1, 20000), (5, 1, 1)),
    ((2,) * 17, (2,) * 17), ((40, 40, 50), (40, 1, 50)), ((300, 300), (300,))])
def test_elementwise_calls_merge_dimensions_as_numpy_does(shape1, shape2):
    """A large elementwise call on C-contiguous arrays runs with adjacent dimensions
    merged where every array has both whole or both of size 1: the answers, dtypes and
    shapes are NumPy's on every call (the first, the table's, strided ones of the same
    key), results own their data, and the inputs are left alone."""
    rng = np.random.default_rng(12)
    eager.clear()
    for _ in range(3):
        x = rng.standard_normal(shape1)
        y = rng.standard_normal(shape2) if shape2 else 1.5
        i8 = rng.integers(-100, 100, shape1).astype(np.int8)
        for fn, args in ((jnp.add, (x, y)), (jnp.multiply, (i8, y)), (jnp.exp, (x,)),
                         (jnp.negative, (i8,)), (jnp.less, (x, y)), (jnp.add, (i8, 3)),
                         (jnp.add, (i8, -100))):
            before = [np.copy(a) for a in args]
            want = getattr(np, fn.__name__)(*args)
            got = fn(*args)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert got.flags.owndata and got.flags.c_contiguous
            np.testing.assert_allclose(got, want, rtol=1e-15)
            for a, b in zip(args, before):
                np.testing.assert_array_equal(a, b)
        xf = np.asfortranarray(x)                   # the same key, strided: general path
        np.testing.assert_allclose(jnp.add(xf, y), np.add(xf, y), rtol=1e-15)
        with pytest.raises(OverflowError):          # (a Python int that does not fit)
            jnp.add(i8, 300)


def test_merged_calls_of_every_rank_share_one_kernel():
    eager.clear()
    rng = np.random.default_rng(13)
    for shape in [(1 << 16,), (1 << 8, 1 << 8), (8, 1 << 13), (16, 16, 256), (4,) * 8]:
        x = rng.standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(jnp.sqrt(jnp.abs(x)), np.sqrt(np.abs(x)), rtol=1e-7)
    assert eager.cache_info("sqrt")["kernels"] == 1
    assert eager.cache_info("absolute")["kernels"] == 1


def test_whole_reductions_of_every_rank_share_one_kernel():
    """sum, prod, max, min and mean over every axis of a large C-contiguous array run
    on its 1-d view: one kernel for every rank, NumPy's answers and result types."""
    eager.clear()
    rng = np.random.default_rng(14)
    for shape in [(100000, 3), (300, 300), (40, 40, 50), (4,) * 9]:
        x = rng.standard_normal(shape)
        for name in ("sum", "prod", "max", "min", "mean"):
            got, want = getattr(jnp, name)(x), getattr(np, name)(x)
            assert type(got) is type(want)
            np.testing.assert_allclose(got, want, rtol=1e-10)
            out = np.zeros(())
            assert getattr(jnp, name)(x, out=out) is out
            np.testing.assert_allclose(out, want, rtol=1e-10)
    for name in ("sum", "prod", "max", "min", "mean"):
        assert eager.cache_info(name)["kernels"] == 1, name
    xf = np.asfortranarray(x)                       # (strided: the general path)
    np.testing.assert_allclose(jnp.sum(xf), np.sum(xf), rtol=1e-10)


@pytest.mark.parametrize("name", ["max", "min", "sum", "prod"])
@pytest.mark.parametrize("initial", [3.0, 2.5, -0.5, 255.5, 300.0, -1.5, 1e30, np.nan,
                                     np.float32(4.5)])
def test_float_initial_of_an_integer_reduction_converts_as_numpy(name, initial):
    """A float initial= of an integer array is NumPy's conversion: truncated, and an
    OverflowError or ValueError where it does not fit (it was wrapped: initial=300.0 of
    uint8 gave 44)."""
    for dtype in (np.uint8, np.int32):
        a = np.arange(1, 6, dtype=dtype)
        try:
            want = getattr(np, name)(a, initial=initial)
        except (OverflowError, ValueError) as e:
            with pytest.raises(type(e)):
                getattr(jnp, name)(a, initial=initial)
            continue
        got = getattr(jnp, name)(a, initial=initial)
        assert got == want and np.asarray(got).dtype == np.asarray(want).dtype
        got = getattr(jnp, name)(a.tolist(), initial=initial)       # (a list too)
        want = getattr(np, name)(a.tolist(), initial=initial)
        assert got == want and np.asarray(got).dtype == np.asarray(want).dtype


def test_error_classes_of_out_tuples_and_tensordot_axes_are_numpys():
    x = np.arange(3.0)
    for out in ((np.zeros(3), np.zeros(3)), ()):
        with pytest.raises(ValueError):
            np.add(x, x, out=out)
        with pytest.raises(ValueError):
            jnp.add(x, x, out=out)
    with pytest.raises(ValueError):
        jnp.tensordot(np.ones((2, 3)), np.ones((3, 2)), [1])
    o = np.zeros(())
    r = jnp.dot(x, x, out=o)                # (NumPy: a scalar, not out)
    assert type(r) is np.float64 and r == 5.0 and o == 5.0


# -- found by a fuzzer comparing NumPy, eager jd.numpy and the same code in definitions -----
@jd.compute
def _scaled(alpha, X):
    return alpha * X - alpha / (X * X + 1) + (alpha < X) + 2 ** alpha * jnp.sum(X)


def test_a_scalar_argument_on_the_left_of_a_tensor_operator(rng):
    """alpha * X with alpha a scalar argument of the definition (a float, an int, a NumPy
    scalar): the tensor's operator adds the stage, as X * alpha did."""
    x = rng.standard_normal((3, 4))
    for alpha in (2.5, 3, np.float64(-1.5), np.float32(0.5)):
        with np.errstate(all="ignore"):
            want = alpha * x - alpha / (x * x + 1) + (alpha < x) + 2 ** alpha * np.sum(x)
        same(_scaled(alpha, x), want)


@jd.compute
def _with_elements(X):
    return X - X[0, 1] * X[2, 3] + X.dot(X.T).swapaxes(0, 1)[0, 0] * X.size


def test_elements_at_fixed_indices_are_scalars_and_tensors_have_more_methods(rng):
    x = rng.standard_normal((3, 4))
    same(_with_elements(x), x - x[0, 1] * x[2, 3] + x.dot(x.T).swapaxes(0, 1)[0, 0] * x.size)


@jd.compute
def _masked_add(X, Y, M):
    return jnp.add(X, Y, where=M)


def test_where_without_out_broadcasts_with_the_result(rng):
    """A ufunc's where= without out=: the mask takes part in the broadcast (elements it
    masks out are uninitialised in NumPy: only the shape and the others are compared);
    a mask that does not broadcast is NumPy's ValueError, eagerly and in definitions."""
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    mask = rng.random((3, 4)) > 0.5
    for got in (jnp.add(b, b, where=mask), _masked_add(b, b, mask)):
        assert got.shape == (3, 4)
        np.testing.assert_array_equal(got[mask], np.broadcast_to(b + b, (3, 4))[mask])
    assert jnp.exp(b, where=mask[:2]).shape == (2, 4)
    for call in (lambda: jnp.add(a, a, where=np.ones(3, bool)),
                 lambda: _masked_add(a, a, np.ones(3, bool))):
        with pytest.raises(ValueError):
            call()


@pytest.mark.parametrize("call", [
    lambda m, a, b, v: m.logical_xor(a, b, out=v[1:41], where=v[:40]),
    lambda m, a, b, v: m.add(a, b, out=v[2:], where=v[:40]),
    lambda m, a, b, v: m.logical_not(a, out=v[1:41], where=v[:40]),
    lambda m, a, b, v: m.maximum(a, b, out=v[:40], where=v[1:41]),
], ids=["logical_xor", "add", "logical_not", "maximum-ahead"])
def test_a_where_mask_that_out_overlaps_is_read_as_numpy_reads_it(rng, call):
    """where= a view of the memory out= writes (the mask just behind out): NumPy reads
    the mask as if copied first; jnp's np.copyto of the result read it as it wrote out,
    so each element written masked the next (logical_xor(a, b, out=m[1:], where=m[:-1])
    differed from NumPy's)."""
    a, b = rng.random(40) > 0.5, rng.random(40) > 0.5
    bits = rng.random(42) > 0.5
    want, got = bits.copy(), bits.copy()
    call(np, a, b, want)
    call(jnp, a, b, got)
    np.testing.assert_array_equal(got, want)


def test_average_checks_its_weights_as_numpy_does(rng):
    a = rng.standard_normal((3, 4, 5))
    for w, axis in [(rng.random((4, 5)), (1, 2)), (rng.random((5, 4)), (2, 1)),
                    (rng.random(4), 1), (rng.random((3, 4, 5)), -1)]:
        same(jnp.average(a, axis, w), np.average(a, axis, w))
    for w, axis, err in [(rng.random((4, 5)), None, TypeError), (rng.random(4), 2, ValueError),
                         (rng.random((1, 4, 5)), 1, ValueError), (2.0, None, TypeError)]:
        with pytest.raises(err):
            np.average(a, axis, w)
        with pytest.raises(err):
            jnp.average(a, axis, w)
    with pytest.raises(ZeroDivisionError):
        jnp.average(a, 0, np.zeros(3))


@jd.compute
def _average_returned(X, W):
    m, s = jnp.average(X, axis=1, weights=W, returned=True)
    c, n = jnp.average(X, axis=0, returned=True, keepdims=True)
    return m, s, c, n


def test_average_returned_gives_the_weights_sum(rng):
    """returned=True: (average, sum of the weights or the count), both of the average's
    dtype and shape, as NumPy's; on arrays and inside a definition."""
    a = rng.standard_normal((3, 4, 5))
    ai = rng.integers(-9, 9, (3, 4, 5))
    for args, kw in [((a,), {}), ((a, 1), {}), ((a, (0, 2)), {"keepdims": True}),
                     ((a, 1, rng.random(4) + .1), {}),
                     ((a, (2, 1), rng.random((5, 4)) + .1), {}),
                     ((a, None, rng.random(a.shape) + .1), {}),
                     ((a.astype(np.float32), -1, rng.random(5).astype(np.float32) + .1), {}),
                     ((ai, 0), {}), ((ai, 2, rng.integers(1, 5, 5)), {"keepdims": True})]:
        want = np.average(*args, returned=True, **kw)
        got = jnp.average(*args, returned=True, **kw)
        assert isinstance(got, tuple) and len(got) == 2
        for g, w in zip(got, want):
            assert type(g) is type(w) and np.shape(g) == np.shape(w)
            assert np.asarray(g).dtype == np.asarray(w).dtype
            same(g, w, rtol=1e-6 if np.asarray(w).dtype == np.float32 else 1e-12)
    x, w = rng.standard_normal((6, 7)), rng.random(7) + 0.1
    m, s, c, n = _average_returned(x, w)
    for got, want in zip((m, s), np.average(x, 1, w, returned=True)):
        same(got, want)
    for got, want in zip((c, n), np.average(x, 0, returned=True, keepdims=True)):
        same(got, want)


def test_average_takes_numpys_list_and_bool_axes(rng):
    """np.average reads axis= as NumPy's axis tuples do: a list ([0, 1], [2]), a bool
    (True is 1), a 1-element array; jnp.average refused them with an ArgumentError."""
    a = rng.standard_normal((3, 4, 5))
    w = rng.random(4) + 0.1
    for axis in ([0, 1], [2], [-1, 0], [], True, np.array([1]), np.int64(2)):
        for kw in ({}, {"keepdims": True}, {"returned": True}):
            want = np.average(a, axis=axis, **kw)
            got = jnp.average(a, axis=axis, **kw)
            for g, e in zip(got, want) if kw.get("returned") else [(got, want)]:
                same(g, e)
    for axis in (True, [1]):
        same(jnp.average(a, axis=axis, weights=w), np.average(a, axis=axis, weights=w))


def test_average_in_a_definition_takes_numpys_list_and_bool_axes(rng):
    """Inside a definition (and on GPU arrays) jnp.average refused a list or bool axis
    (ArgumentError: 'list' object cannot be interpreted as an integer) that np.average
    and jnp.average on NumPy arrays take; they are read as NumPy's axis tuples there too."""
    a = rng.standard_normal((3, 4, 5))
    w = rng.random((3, 4, 5)) + 0.1
    for axis in ([0, 1], [2], [-1, 0], True, np.array([1])):
        for kw in ({}, {"keepdims": True}):
            @jd.compute
            def f(X):
                return jnp.average(X, axis=axis, **kw)

            @jd.compute
            def g(X, W):
                return jnp.average(X, axis=axis, weights=W, **kw)
            same(f(a), np.average(a, axis=axis, **kw))
            same(g(a, w), np.average(a, axis=axis, weights=w, **kw))


def test_weighted_average_compiles_once_for_many_shapes(rng):
    """average with weights has symbolic extents as mean has (it compiled a kernel per
    shape); NumPy's weight checks still hold for each new shape."""
    eager.clear()
    for n in range(2, 22):
        a = rng.standard_normal((n, 3 + n % 7))
        for w in (rng.random(a.shape) + 0.5, rng.random(a.shape[1]) + 0.5):
            same(jnp.average(a, 1, w), np.average(a, 1, w))
    assert eager.cache_info("average")["kernels"] == 2
    with pytest.raises(ValueError):
        jnp.average(a, 1, rng.random(a.shape[1] + 1))
    with pytest.raises(ValueError):
        jnp.average(a, 1, rng.random((a.shape[0] + 1, a.shape[1])))


@jd.compute
def _where_wraps(C, X):
    return jnp.where(C, 300, X), jnp.where(C, X.astype(np.uint8), -2)


def test_where_wraps_a_python_int_inside_definitions_too():
    c, x = np.array([True, False]), np.array([4, 5], np.int8)
    got = _where_wraps(c, x)
    want = (np.where(c, 300, x), np.where(c, x.astype(np.uint8), -2))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    np.testing.assert_array_equal(jnp.where(c, 300, x), want[0])


@jd.compute
def _bad_dtype(X):
    return jnp.sum(X, dtype="float99")


@jd.compute
def _one_branch(X):
    return jnp.where(X > 0, X)


def test_errors_while_tracing_keep_numpys_class(rng):
    """jd.numpy's TypeError and ValueError inside a definition are still those classes
    (and DefinitionErrors), as the same calls on arrays raise."""
    x = rng.standard_normal(3)
    for f, cls in ((_bad_dtype, TypeError), (_one_branch, ValueError)):
        with pytest.raises(cls) as e:
            f(x)
        assert isinstance(e.value, jd.DefinitionError)


@jd.compute(dynamic=True)
def _dynamic_where_average(X, M, w):
    return jnp.add(X, 1.0, where=M), jnp.average(X, axis=1, weights=w)


def test_where_and_average_with_symbolic_sizes(rng):
    """The mask's broadcast and average's weight checks with sizes known only at the call
    (both failed to trace: found by review)."""
    for n, m in ((3, 5), (6, 9)):
        x, w = rng.standard_normal((n, m)), rng.random(m) + 0.5
        mask = x > 0
        got, avg = _dynamic_where_average(x, mask, w)
        np.testing.assert_array_equal(got[mask], (x + 1.0)[mask])
        same(avg, np.average(x, 1, w))


@jd.compute
def _axis_error(X):
    return np.ones(3).sum(axis=5) + X       # (NumPy's own AxisError, raised while tracing)


def test_a_numpy_axis_error_while_tracing_is_still_one(rng):
    with pytest.raises(np.exceptions.AxisError) as e:
        _axis_error(rng.standard_normal((2, 3)))
    assert isinstance(e.value, IndexError) and isinstance(e.value, jd.DefinitionError)
    with pytest.raises(np.exceptions.AxisError):           # (jitdl's own, eagerly too)
        jnp.moveaxis(rng.standard_normal((2, 3)), 5, 0)
    c, x = np.array([True, False]), np.array([4, 5], np.int64)

    @jd.compute
    def huge(C, X):
        return jnp.where(C, X, 2 ** 64 + 5)
    with pytest.raises(OverflowError):
        huge(c, x)


@pytest.mark.parametrize("n", [4095, 4096, 4097, 5000, 70_001])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.uint8, np.bool_])
def test_whole_array_argmax_argmin_in_blocks(n, dtype):
    """Large 1-d (and C-contiguous n-d) arrays are read once in blocks: the first position
    of the extreme (of the first NaN) wherever it lies, in a whole block or in the tail, as
    NumPy gives it; ties and equal blocks keep the first."""
    rng = np.random.default_rng(n)
    for case in ("random", "ties", "nan", "last", "first", "flat"):
        x = (rng.standard_normal(n) * 4).astype(dtype) if dtype != np.bool_ else \
            rng.random(n) > 0.5
        if case == "ties":
            x = rng.integers(0, 3, n).astype(dtype)
        elif case == "nan" and np.dtype(dtype).kind == "f":
            x[rng.integers(0, n, 3)] = np.nan
        elif case in ("last", "first"):
            x[-1 if case == "last" else 0] = 100 if dtype != np.bool_ else True
        elif case == "flat":
            x[:] = x[n // 3]
        for f in ("argmax", "argmin"):
            got, want = getattr(jnp, f)(x), getattr(np, f)(x)
            assert got == want and type(got) is type(want), (case, f, got, want)
        m = x[: n // 7 * 7].reshape(7, -1)
        assert jnp.argmax(m) == np.argmax(m) and jnp.argmin(m.T) == np.argmin(m.T)


@pytest.mark.parametrize("ddof", ["x", b"1", None])
def test_var_std_ddof_of_no_number_is_a_type_error(ddof):
    """NumPy compares ddof with the count, which has no loop for a string or None: a
    TypeError, as NumPy's (not a ValueError from float('x'))."""
    x = np.random.default_rng(0).standard_normal(5)
    for f in ("var", "std"):
        with pytest.raises(TypeError):
            getattr(np, f)(x, ddof=ddof)
        with pytest.raises(TypeError):
            getattr(jnp, f)(x, ddof=ddof)


def test_a_tuple_axis_runs_a_jitdl_kernel():
    """sum/max/mean over a tuple of axes run jitdl's kernel (a slip that sent them to
    NumPy's function on every call gave the right answer 20x slower)."""
    m = np.random.default_rng(1).standard_normal((6, 7, 5))
    eager.clear()
    for f in ("sum", "max", "mean", "var"):
        for axis in ((0, 1), (0, 2), (2, 0, 1)):
            np.testing.assert_allclose(getattr(jnp, f)(m, axis=axis), getattr(np, f)(m, axis=axis),
                                       rtol=1e-12)
    assert {"sum", "max", "mean", "var"} <= set(eager.cache_info()), eager.cache_info()


def test_ufunc_methods_are_numpys(rng):
    """NumPy's ufunc methods on jd.numpy's functions: reduce is the jd.numpy reduction it
    names (add.reduce = sum, with reduce's axis=0), outer a broadcast; the others
    (subtract.reduce, accumulate, at) NumPy's own method; nin / identity NumPy's.
    In a definition reduce and outer fuse, and NumPy's methods are refused by name."""
    x, y = rng.standard_normal((3, 4)), rng.standard_normal(4)
    b, i8 = x > 0, rng.integers(-100, 100, (3, 4)).astype(np.int8)
    cases = [lambda m: m.add.reduce(x), lambda m: m.add.reduce(x, axis=1, keepdims=True),
             lambda m: m.add.reduce(x, axis=None), lambda m: m.multiply.reduce(i8, axis=1),
             lambda m: m.maximum.reduce(x, axis=1), lambda m: m.add.reduce(b),
             lambda m: m.minimum.reduce(x, axis=0, initial=-0.1),
             lambda m: m.logical_and.reduce(b, axis=1), lambda m: m.subtract.reduce(x, axis=1),
             lambda m: m.logical_or.reduce(b, axis=1, dtype=bool),
             lambda m: m.add.reduce(x, axis=1, where=b), lambda m: m.add.reduce(np.zeros((0, 3))),
             lambda m: m.add.reduce(x, axis=0, out=np.zeros(4)),
             lambda m: m.add.accumulate(x, axis=1), lambda m: m.add.accumulate(i8),
             lambda m: m.add.accumulate(b), lambda m: m.multiply.accumulate(x),
             lambda m: m.maximum.accumulate(x, axis=1), lambda m: m.add.accumulate([1, 2, 3]),
             lambda m: m.add.outer(y, x), lambda m: m.multiply.outer(2.0, y),
             lambda m: m.power.outer(np.abs(y), [1, 2]), lambda m: m.subtract.outer([1, 2, 3], [1, 2])]
    for case in cases:
        same(case(jnp), case(np), rtol=1e-13)
    assert (jnp.add.nin, jnp.exp.nin, jnp.add.identity, jnp.multiply.identity) == (2, 1, 0, 1)
    z = np.zeros(3)
    jnp.add.at(z, [0, 0, 1], 1.0)
    np.testing.assert_array_equal(z, [2, 1, 0])
    with pytest.raises(ValueError, match="no identity"):
        jnp.maximum.reduce(np.zeros((0, 3)), axis=0)

    @jd.compute
    def f(X, Y):
        return jnp.add.reduce(jnp.multiply.outer(X, Y), axis=0)
    same(f(y, x), np.add.reduce(np.multiply.outer(y, x), axis=0))

    @jd.compute
    def g(X):
        return jnp.subtract.reduce(X)
    with pytest.raises(jd.ArgumentError, match="subtract.reduce"):
        g(y)


def test_ufunc_reduce_with_dtype_of_maximum_and_minimum(rng):
    """From a review: maximum.reduce and minimum.reduce take dtype= as NumPy's do (jd.numpy's
    max and min have no dtype, so NumPy's reduce runs), with and without initial=."""
    x = rng.standard_normal((3, 4)) * 10
    i8 = rng.integers(-100, 100, (3, 4)).astype(np.int8)
    cases = [lambda m: m.maximum.reduce(x, dtype=np.float32),
             lambda m: m.minimum.reduce(x, axis=1, dtype=np.int64),
             lambda m: m.maximum.reduce(i8, axis=None, dtype=np.float64, initial=0.5),
             lambda m: m.minimum.reduce(x > 0, axis=0, dtype=bool)]
    for case in cases:
        same(case(jnp), case(np))


def test_ufunc_methods_of_the_array_api_alias_pow():
    """From a review: jd.numpy.pow (NumPy's pow is its power ufunc) has power's ufunc
    attributes and methods too."""
    a, b = np.array([1.0, 2.0, 3.0]), np.array([2.0, 0.5])
    same(jnp.pow.outer(a, b), np.pow.outer(a, b))
    same(jnp.pow.reduce(a), np.pow.reduce(a))
    assert (jnp.pow.nin, jnp.pow.nout) == (2, 1)


def test_every_function_pickles_as_itself():
    """pickle stores a function by module and name (multiprocessing sends jnp.sum that
    way): every jd.numpy function, the wrappers that hand foreign dtypes to NumPy too,
    comes back as the same object, as NumPy's functions do."""
    import pickle
    for name in jnp.__all__:
        fn = getattr(jnp, name)
        assert pickle.loads(pickle.dumps(fn)) is fn, name


@pytest.mark.cpu_only
def test_transposed_operands_run_in_their_memory_order(rng, monkeypatch):
    """Elementwise functions and reductions of views whose memory is a permutation of C
    order (a.T, Fortran arrays, 3-d transposes) run on that memory as it lies, as
    NumPy's do, and give NumPy's values and (for elementwise results) NumPy's layout:
    no operand is copied into C order first (a.T + a.T of 2000 x 2000 float64 took 52 ms
    that way, NumPy 5.5)."""
    from jitdl.runtime.kernel import Kernel
    copies = []
    real = Kernel._contiguous
    monkeypatch.setattr(Kernel, "_contiguous",
                        lambda self, a, j: copies.append(a.shape) or real(self, a, j))
    base = rng.standard_normal((6, 7, 8))
    for x in (np.asfortranarray(base[0]), base[1].T, base.transpose(2, 0, 1)):
        y = np.lib.stride_tricks.as_strided(np.empty_like(x), x.shape, x.strides)
        y[...] = rng.standard_normal(x.shape)          # (y: x's memory order)
        copied = len(copies)
        for fn in (lambda m: m.exp(x), lambda m: m.negative(x), lambda m: m.add(x, y),
                   lambda m: m.multiply(x, 2.5), lambda m: m.arctan2(y, x),
                   lambda m: m.where(x > 0, x, y), lambda m: m.clip(x, -0.5, y),
                   lambda m: m.nan_to_num(x)):
            got, want = fn(jnp), fn(np)
            same(got, want)
            assert got.strides == want.strides, (x.strides, got.strides, want.strides)
        assert len(copies) == copied, copies[copied:]
        # (NumPy's round and isclose are not one ufunc and give C-ordered results here:
        # jitdl's, from copies, are C-ordered)
        same(jnp.round(x, 2), np.round(x, 2))
        same(jnp.isclose(x, y, atol=0.5), np.isclose(x, y, atol=0.5))
        copied = len(copies)
        b = x > 0.2
        for name in ("sum", "var", "argmax", "max", "nanmean", "any", "count_nonzero"):
            arg = b if name in ("any", "count_nonzero") else x
            arg_fn = name == "argmax"
            axes = (None, 0, -1, (0, -1)) + (((2, 0),) if x.ndim == 3 else ()) \
                if name in ("sum", "argmax") else (-1,)
            for axis in axes:
                if arg_fn and isinstance(axis, tuple):
                    continue
                kw = {"axis": axis} if arg_fn else {"axis": axis, "keepdims": axis == 0}
                same(getattr(jnp, name)(arg, **kw), getattr(np, name)(arg, **kw))
        # (argmax over every axis: a flat index in C order, from a copy)
        assert len(copies) == copied + 1, copies[copied:]
    # operands of different orders, a mask, out=: NumPy's values (from copies)
    x = np.asfortranarray(base[0])
    same(jnp.add(x, np.ascontiguousarray(x)), x + x)
    same(jnp.sum(x, axis=0, where=x > 0), np.sum(x, axis=0, where=x > 0))
    out = np.empty(x.shape[1])
    assert jnp.sum(x, axis=0, out=out) is out
    same(out, np.sum(x, axis=0))
    with pytest.raises(Exception, match="axis"):
        jnp.sum(base.transpose(2, 0, 1), axis=(0, 0))


def test_fortran_ordered_elementwise_calls_take_the_fast_path(rng, monkeypatch):
    """A unary or binary function of Fortran-ordered arrays (a.T), of one shape or with a
    Python number, and a reduction of one along given axes, run on their C-ordered
    transposes through the kernel's fast entry and return the transpose (NumPy's values
    and layout) without the general call path (25x40 float64 a.T + a.T: 7.1 us, now 1.6;
    NumPy 0.9). Mixed layouts, broadcasting and 0-d arrays still give NumPy's answers."""
    from jitdl.runtime.kernel import Kernel
    slow = []
    real = Kernel._call
    monkeypatch.setattr(Kernel, "_call", lambda self, *a, **k: slow.append(self.fname)
                        or real(self, *a, **k))
    m = rng.standard_normal((25, 40))
    cases = [lambda x, y, mod: mod.add(x, y), lambda x, y, mod: mod.multiply(x, 2.5),
             lambda x, y, mod: mod.less(y, x), lambda x, y, mod: mod.exp(x),
             lambda x, y, mod: mod.floor_divide(x, 3), lambda x, y, mod: mod.negative(y),
             lambda x, y, mod: mod.sum(x, axis=0), lambda x, y, mod: mod.max(y, axis=-1),
             lambda x, y, mod: mod.mean(x, axis=(0, -1)), lambda x, y, mod: mod.prod(y, axis=1)]
    for x in (m.T, np.asfortranarray(m), rng.standard_normal((4, 5, 6)).T):
        y = np.asfortranarray(rng.standard_normal(x.shape))
        for fn in cases:
            fn(x, y, jnp)
        del slow[:]
        for fn in cases:
            got, want = fn(x, y, jnp), fn(x, y, np)
            same(got, want)
            assert got.strides == want.strides
        assert slow == []
    x = m.T
    for y in (np.ascontiguousarray(x), rng.standard_normal(25), rng.standard_normal((40, 1)),
              np.float64(2.0), np.array(3.0), 7, rng.standard_normal((2, 1, 1))):
        for fn in cases[:3]:
            for a, b in ((x, y), (y, x)):
                got, want = fn(a, b, jnp), fn(a, b, np)
                same(got, want)
                assert got.flags.f_contiguous == want.flags.f_contiguous, np.shape(y)
    same(jnp.add(x, x[0]), np.add(x, x[0]))          # (a strided row: the general path)
    with pytest.raises(ValueError, match=r"\(40,25\) \(40,\) "):   # (the shapes as given)
        jnp.add(x, np.ones(40))


@pytest.mark.cpu_only
def test_copy_and_astype_of_transposed_arrays_keep_their_memory_order(rng, monkeypatch):
    """copy and astype (order='K') of a.T or a Fortran array run on its memory as it lies
    and return NumPy's Fortran-ordered result at every size: above POOL_MIN_BYTES (where
    the kernel's direct entry is not taken) the kernel gathered a.T into C order and
    returned a C-ordered copy (copy of a 2048 x 2048 float32 a.T: 38 ms against NumPy's
    10, and its layout not NumPy's)."""
    from jitdl.runtime.kernel import Kernel
    from jitdl.target.cpu import POOL_MIN_BYTES
    copies = []
    real = Kernel._contiguous
    monkeypatch.setattr(Kernel, "_contiguous",
                        lambda self, a, j: copies.append(a.shape) or real(self, a, j))
    rows = POOL_MIN_BYTES // (8 * 64) + 3         # (float64 results past the entry's)
    for x in (rng.standard_normal((rows, 64)).astype(np.float32).T,
              np.asfortranarray(rng.standard_normal((9, 11))),
              rng.standard_normal((4, 5, 6)).transpose(2, 0, 1)):
        for fn in (lambda m: m.copy(x), lambda m: m.astype(x, np.float64),
                   lambda m: m.astype(x, np.int32), lambda m: m.copy(x, order="A")):
            got, want = fn(jnp), fn(np)
            assert got.dtype == want.dtype and np.array_equal(got, want)
            assert got.strides == want.strides, (x.shape, got.strides, want.strides)
        assert copies == []
        for order in ("C", "F"):        # (a layout asked for: NumPy's)
            got, want = jnp.copy(x, order=order), np.copy(x, order=order)
            assert np.array_equal(got, want) and got.strides == want.strides


def test_copies_own_their_memory_as_numpys(rng):
    """NumPy's copy and astype of any array own their memory (flags.owndata, base None)
    in the layout of its order=: jd.numpy's copy of a permuted or Fortran array was the
    kernel's C-ordered result transposed back, and its copy of a big-endian array that
    result viewed in a's byte order, both views (owndata False; resize() refused). Values,
    dtype, strides and flags are NumPy's for every order and for astype's dtypes."""
    b = rng.standard_normal((3, 4, 5))
    ro = b.T.copy().T
    ro.flags.writeable = False
    xs = (b, b.transpose(2, 0, 1), b.transpose(1, 2, 0), b.astype(">f8"),
          b.astype(">f8").transpose(2, 0, 1), b[::-1, :, ::-2], b[::-1].T,
          np.asfortranarray(b), b[0].T, b[:, ::2], b[0, 0], b[0, 0, ::-1],
          b[0, 0].astype(">f4"), np.array(2.5, ">f8"), (b * 50).astype(np.int8).T,
          np.asfortranarray(b > 0), ro)

    def layout(r):
        return (type(r), r.dtype.str, r.shape, r.strides, r.flags.c_contiguous,
                r.flags.f_contiguous, r.flags.owndata, r.flags.writeable, r.base is None)
    for x in xs:
        for fn in [lambda m, o=o: m.copy(x, order=o) for o in "KCFA"] + \
                [lambda m, d=d: m.astype(x, d) for d in (np.float32, np.float64, np.int32,
                                                          bool)]:
            got, want = fn(jnp), fn(np)
            assert layout(got) == layout(want), (x.shape, x.strides, x.dtype)
            np.testing.assert_array_equal(got, want)
            assert not np.shares_memory(got, x)


def test_copy_and_astype_of_broadcast_views_are_laid_out_as_numpy(rng):
    """copy and astype (order='K') of a broadcast view lay the copy out by its strides
    as NumPy does, a zero stride last: np.copy(np.broadcast_to(row, (4, 3))) is
    Fortran-ordered, where jnp.copy gave C order; a (2, 4, 3) broadcast of a reversed
    row neither order. Each element is the view's."""
    row, m = rng.standard_normal(3), rng.standard_normal((2, 3))
    for x in (np.broadcast_to(row, (4, 3)), np.broadcast_to(row, (4, 3)).T,
              np.broadcast_to(row[:, None], (3, 4)).T,
              np.broadcast_to(m.T, (5, 3, 2)), np.broadcast_to(m[:, None], (2, 4, 3))[..., ::-1]):
        for fn in (lambda m: m.copy(x), lambda m: m.astype(x, np.float32),
                   lambda m: m.astype(x, np.int64), lambda m: m.copy(x, order="F"),
                   lambda m: m.copy(x, order="A")):
            got, want = fn(jnp), fn(np)
            assert got.dtype == want.dtype and np.array_equal(got, want)
            assert got.strides == want.strides, (x.strides, got.strides, want.strides)


def test_copy_of_a_native_array_goes_straight_to_its_kernel(rng, monkeypatch):
    """jnp.copy(a) of a native-order ndarray (order='K') returns the kernel's result
    without the layout and byte-order helpers, which took as long again as the kernel's
    call: a (32, 32) float32 copy 0.46-0.51x NumPy's speed on one thread, 0.63-0.93x
    without. Values, dtype and strides are NumPy's for C-ordered, strided and empty
    arrays; a Fortran or transposed array (whose copy is made in memory of its own: see
    _own_copy), a big-endian array, order='C'/'F'/'A' and an ndarray subclass still take
    the helpers and keep NumPy's answers."""
    from jitdl.numpy import _manipulation
    calls = []
    real_laid, real_bytes = _manipulation.laid_out, _manipulation.in_byte_order
    monkeypatch.setattr(_manipulation, "laid_out",
                        lambda *a: calls.append("laid_out") or real_laid(*a))
    monkeypatch.setattr(_manipulation, "in_byte_order",
                        lambda *a: calls.append("in_byte_order") or real_bytes(*a))
    real_own = _manipulation._own_copy
    monkeypatch.setattr(_manipulation, "_own_copy",
                        lambda *a: calls.append("_own_copy") or real_own(*a))
    a = rng.standard_normal((13, 7))
    for x in (a, a[:, ::2], a.astype(np.float32)[::-1], a.astype(np.int32),
              np.zeros((0, 3)), a[0], np.array(2.5)):
        del calls[:]
        got, want = jnp.copy(x), np.copy(x)
        assert got.dtype == want.dtype and np.array_equal(got, want)
        assert got.strides == want.strides and got.flags.writeable, x.shape
        assert not np.shares_memory(got, x) and calls == [], (x.shape, calls)
    big = a.astype(">f8")
    for x, kw in ((big, {}), (a.T, {"order": "C"}), (a, {"order": "F"}), (a.T, {"order": "A"}),
                  (a.T, {}), (np.asfortranarray(a), {}),
                  (np.ma.masked_array(a), {"subok": True})):
        del calls[:]
        got, want = jnp.copy(x, **kw), np.copy(x, **kw)
        assert type(got) is type(want) and got.dtype == want.dtype
        assert np.array_equal(got, want) and got.strides == want.strides
        assert calls or kw.get("subok"), kw


def test_copy_and_astype_of_broadcast_views_run_the_kernel_on_the_view_once(rng,
                                                                           monkeypatch):
    """copy and astype of a broadcast view ran the kernel over every repeated element,
    then copied its C-ordered result into NumPy's layout (2000 x 2000 of a row: twice
    the time the kernel alone took, ~10x np.copy); the kernel now runs on the view with
    each zero-stride axis cut to one element, whose result is broadcast into the layout.
    Values, dtype and strides stay NumPy's, every element written."""
    from jitdl.numpy import _manipulation
    shapes, apply = [], _manipulation.apply

    def counting(name, builder, operands, *args, **kwargs):
        shapes.append(np.shape(operands[0]))
        return apply(name, builder, operands, *args, **kwargs)
    monkeypatch.setattr(_manipulation, "apply", counting)
    row, m = rng.standard_normal(7), rng.standard_normal((3, 7))
    for x, small in [(np.broadcast_to(row, (5, 7)), (1, 7)),
                     (np.broadcast_to(row[:, None], (7, 4)), (7, 1)),
                     (np.broadcast_to(m[:, None, ::-1], (3, 4, 7)), (3, 1, 7)),
                     (np.broadcast_to(row[:3], (2, 0, 3)), (1, 0, 3)),
                     (np.broadcast_to(np.float64(2.5), (3, 2)), (1, 1))]:
        for fn in (lambda m: m.copy(x), lambda m: m.astype(x, np.float32),
                   lambda m: m.astype(x, np.int32)):
            shapes.clear()
            got, want = fn(jnp), fn(np)
            assert shapes == [small] or not x.size      # (an empty copy: no elements)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert np.array_equal(got, want) and got.strides == want.strides


@pytest.mark.cpu_only
def test_a_strided_view_passed_twice_is_copied_once(rng, monkeypatch):
    """A strided view that a kernel reads as a contiguous copy (m[:, ::2], past the
    direct entry's small copies) and that is two of a call's operands (x * x, hypot(x,
    x)) is copied once, not once per operand: multiply of a 256 x 256 float64 view took
    two 512 KiB copies per call (0.9 ms on the 2-core VM, where the freed copies were
    handed back to the system and faulted in again; NumPy 0.03; one copy: 0.05)."""
    from jitdl.runtime.kernel import Kernel
    copies = []
    real = Kernel._contiguous
    monkeypatch.setattr(Kernel, "_contiguous",
                        lambda self, a, j: copies.append(j) or real(self, a, j))
    x = rng.standard_normal((96, 256))[:, ::2]
    y = rng.standard_normal((96, 256))[:, ::2]
    for fn, n in ((lambda m: m.multiply(x, x), 1), (lambda m: m.hypot(x, x), 1),
                  (lambda m: m.where(x > 0, x, x), 1), (lambda m: m.add(x, y), 2)):
        del copies[:]
        same(fn(jnp), fn(np))
        assert len(copies) == n, copies


@pytest.mark.cpu_only
def test_reorder_plans_are_kept_per_layout(rng):
    """A layout-free op keeps its reorder plan (permutation, renumbered axes, the views'
    call) per shapes and strides of its operands: later calls of one layout, with other
    data, take it (a small transposed add cost 7.9 us, 5.0 with the plan; NumPy 1.0);
    another layout of the same shape, or the same strides of another shape, makes its
    own. Every result against NumPy's values (and elementwise ones its layout)."""
    def layouts():
        for shape in ((5, 7), (7, 5)):
            base = rng.standard_normal(shape)
            yield base.T                                # (strides of the other shape)
            yield np.asfortranarray(base)
        yield rng.standard_normal((3, 4, 5)).transpose(2, 0, 1)
        yield rng.standard_normal((3, 4, 5)).transpose(1, 2, 0)
    for _ in range(3):
        for x in layouts():
            x = x * rng.standard_normal()             # (fresh data, same layout)
            x = np.lib.stride_tricks.as_strided(x.copy(order="K"), x.shape, x.strides)
            for got, want in ((jnp.add(x, x), np.add(x, x)), (jnp.exp(x), np.exp(x))):
                same(got, want)
                assert got.strides == want.strides      # (NumPy's layout)
            for got, want in ((jnp.sum(x, axis=0), np.sum(x, axis=0)),
                              (jnp.max(x, axis=-1, keepdims=True),
                               np.max(x, axis=-1, keepdims=True)),
                              (jnp.argmin(x, axis=1), np.argmin(x, axis=1)),
                              (jnp.mean(x), np.mean(x))):
                same(got, want)
                assert np.shape(got) == np.shape(want)


@pytest.mark.parametrize("name", ["sum", "prod", "nansum"])
@pytest.mark.parametrize("out_dtype", [np.float16, np.float32, np.float64, np.int8])
def test_totals_into_a_float_out_are_taken_in_its_promoted_dtype(rng, name, out_dtype):
    """NumPy adds or multiplies into out= in out's and the array's promoted dtype (its
    int64 total only without out=): an integer product into a float out= is -0.0 where a
    negative factor meets a zero, and an int64 total does not wrap."""
    for dtype in (np.bool_, np.int8, np.uint8, np.int16, np.int32, np.int64, np.float32):
        a = rng.integers(-3, 4, (3, 4)).astype(dtype)
        a[0, :2] = (-2 if np.dtype(dtype).kind in "if" else 1, 0)
        for axis in (None, 0, 1):
            got = np.zeros(np.sum(a, axis=axis).shape, out_dtype)
            want = got.copy()
            assert getattr(jnp, name)(a, axis=axis, out=got) is got
            getattr(np, name)(a, axis=axis, out=want)
            np.testing.assert_array_equal(got, want)
            assert (np.signbit(got) == np.signbit(want)).all(), (dtype, axis)
    big, got = np.array([2 ** 62, 2 ** 62]), np.zeros((), np.float64)
    getattr(jnp, name)(big, out=got)
    assert got == getattr(np, name)(big.astype(np.float64))


def test_subtract_and_negative_of_bools_give_numpys_advice(rng):
    """NumPy's TypeError for `-` of bools says what to use instead (`^`, `~`); jd.numpy's
    says the same, on arrays, with a Python bool, and inside a definition."""
    a, b = rng.random(7) > 0.5, rng.random(7) > 0.5
    for call in (lambda m: m.subtract(a, b), lambda m: m.subtract(a, True),
                 lambda m: m.negative(a)):
        with pytest.raises(TypeError) as want:
            call(np)
        with pytest.raises(TypeError) as got:
            call(jnp)
        assert str(want.value) in str(got.value)

    @jd.compute
    def minus(X, Y):
        return X - Y
    with pytest.raises(TypeError, match="numpy boolean subtract"):
        minus(a, b)


def test_broadcasting_error_prints_shapes_as_numpys_ufuncs():
    """The broadcasting error of a ufunc (and of where / clip, which broadcast their
    operands alike) is NumPy's text to the character: shapes as (3,4), each followed by a
    space; so is a ufunc's out= that the result does not broadcast to."""
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(3)
    c = rng.standard_normal(4)
    d = rng.standard_normal((2, 1, 3))
    for case in (lambda m: m.add(a, b), lambda m: m.maximum(a, d),
                 lambda m: m.where(a > 0, b, 1.5), lambda m: m.arctan2(b, a),
                 lambda m: m.add(a, c, out=np.zeros(4)),
                 lambda m: m.exp(a, out=np.zeros((1, 4))),
                 lambda m: m.clip(a, 0, 1, out=np.zeros(4))):
        with pytest.raises(ValueError) as want:
            case(np)
        with pytest.raises(ValueError) as got:
            case(jnp)
        assert str(want.value) in str(got.value), (str(got.value), str(want.value))


def test_power_fast_paths_keep_its_checks_and_results():
    # power shares the binary ufuncs' kernel table and direct entry: repeated calls (the
    # second and later take the direct entry) still refuse negative integer exponents,
    # and the exponent -1 / 2 / 0.5 lanes are the one operation's bits
    rng = np.random.default_rng(7)
    i = rng.integers(-5, 6, 37)
    for _ in range(3):
        with pytest.raises(ValueError, match="negative integer powers"):
            jnp.power(i, -1)
        with pytest.raises(ValueError, match="negative integer powers"):
            jnp.power(i, np.full(37, -2), out=np.empty(37, np.int64))
        np.testing.assert_array_equal(jnp.power(i, 3), np.power(i, 3))
    for dt in (np.float32, np.float64):
        x = (rng.random(1003) * 4 - 2).astype(dt)
        for _ in range(2):
            np.testing.assert_array_equal(jnp.power(x, -1), np.float64(1) / x if dt is
                                          np.float64 else dt(1) / x)
            np.testing.assert_array_equal(jnp.power(x, np.full(1003, -1, dt)), dt(1) / x)
            np.testing.assert_array_equal(jnp.power(x, 2), x * x)
            y = rng.random(1003).astype(dt) + dt(0.5)
            np.testing.assert_allclose(jnp.power(y, x), np.power(y, x),
                                       rtol=4e-7 if dt is np.float32 else 1e-15)
    f = np.asfortranarray(rng.random((3, 4)))
    assert jnp.power(f, np.array(3.0)).flags.f_contiguous == \
        np.power(f, np.array(3.0)).flags.f_contiguous
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_array_equal(jnp.add(i, 2 ** 70, dtype=np.float64),
                                      np.add(i, 2 ** 70, dtype=np.float64))
        np.testing.assert_array_equal(jnp.power(np.abs(i), 2 ** 70, dtype=np.float64),
                                      np.power(np.abs(i), 2 ** 70, dtype=np.float64))


@pytest.mark.parametrize("shape, axis", [((300, 70), 0), ((64, 3, 129), 1), ((1000, 5), 0)])
def test_argmin_argmax_along_a_leading_axis(shape, axis):
    # two column reductions (the extreme, then its first position; one pass where fewer
    # than a vector's elements follow the axis): ties keep the first position, the first
    # NaN wins, eager and inside a definition
    rng = np.random.default_rng(11)
    for dt in (np.float64, np.int16):
        x = rng.integers(-4, 5, shape).astype(dt)       # (many ties)
        if dt is not np.int16:
            x.flat[rng.integers(0, x.size, 5)] = np.nan
            x[(slice(None),) * axis + (slice(0, 2),)] = rng.random(x[(slice(None),) * axis
                                                                    + (slice(0, 2),)].shape)
        for name in ("argmin", "argmax"):
            np.testing.assert_array_equal(getattr(jnp, name)(x, axis=axis),
                                          getattr(np, name)(x, axis=axis))
            np.testing.assert_array_equal(getattr(jnp, name)(x, axis=axis, keepdims=True),
                                          getattr(np, name)(x, axis=axis, keepdims=True))
    y = rng.random(shape)

    @jd.compute
    def f(a, b):
        return jnp.argmax(jnp.exp(a) * b, axis=axis) + jnp.argmin(a - b, axis=axis)
    np.testing.assert_array_equal(f(y, y[::-1].copy()),
                                  np.argmax(np.exp(y) * y[::-1], axis=axis)
                                  + np.argmin(y - y[::-1], axis=axis))


def test_argmax_along_an_axis_with_a_narrow_tail_takes_one_pass():
    # fewer elements after the axis than a vector holds: the one-pass loop (the two
    # column reductions' vectors would be mostly empty: (10^6, 2) along axis 0 took
    # 17 ms, one pass 9); wide tails keep the two passes. The choice is a static argument
    # of the kernel (jitdl.numpy._reductions._columns), results as NumPy's either way
    from jitdl.numpy import _reductions
    rng = np.random.default_rng(12)
    a = rng.integers(-3, 4, (4000, 2)).astype(np.float64)
    a[7, 1] = np.nan
    assert _reductions._columns(a, 0) is False and _reductions._columns(a, 1) is None
    assert _reductions._columns(rng.random((40, 400)), 0) is None
    for x, axis in ((a, 0), (a.reshape(40, 100, 2), 1), (a.reshape(2, 2000, 2), -3)):
        for name in ("argmin", "argmax"):
            for kw in ({}, {"keepdims": True}):
                np.testing.assert_array_equal(getattr(jnp, name)(x, axis=axis, **kw),
                                              getattr(np, name)(x, axis=axis, **kw))


@pytest.mark.cpu_only
def test_argmax_along_an_axis_remembers_its_pick_per_shape_itemsize_and_axis(monkeypatch):
    """argmax / argmin along an int axis remember _plain_arg's pick per (shape, itemsize,
    axis): interleaved calls of shapes whose picks differ (a size-1 tail reduced as the
    view without it, a narrow tail in one pass, 1-d along axis 0 as over every axis) and
    dtypes of one itemsize give NumPy's answers, types and shapes, with keepdims= and
    out=; a call repeated stays off the general path."""
    rng = np.random.default_rng(21)
    cases = []
    for shape in ((25, 40), (40, 1), (6, 1, 1), (7,), (3, 4, 5), (9, 2)):
        for dt in (np.float64, np.int64, np.float32):
            x = rng.integers(-3, 4, shape).astype(dt)       # (ties: the first wins)
            for axis in range(-len(shape), len(shape)):
                cases.append((x, axis))

    def check(f, g, x, axis, slow=None):
        for call in (lambda h: h(x, axis), lambda h: h(x, axis=axis, keepdims=True)):
            want = call(g)
            _exactly(call(f), want)
            if slow is not None:        # (the op's slot now holds this kernel's entry)
                slow.clear()
                _exactly(call(f), want)
                assert slow == [], (slow, x.shape, x.dtype, axis)
        want = g(x, axis=axis)
        out = np.empty(want.shape, np.int64)
        assert f(x, axis=axis, out=out) is out
        np.testing.assert_array_equal(out, want)

    for rnd in range(3):
        slow = _no_general_calls(monkeypatch) if rnd == 2 else None
        for x, axis in cases[::-1] if rnd == 1 else cases:
            for name in ("argmax", "argmin"):
                check(getattr(jnp, name), getattr(np, name), x, axis, slow)


def test_reductions_over_a_tuple_of_every_axis_are_the_whole_reduction():
    """axis=(0, 1) of a 2-d array (any order, negative or not) runs the kernel of
    axis=None: NumPy's values, types and shapes with keepdims and out=, and NumPy's errors
    for a repeated or out-of-range axis."""
    rng = np.random.default_rng(22)
    m = rng.standard_normal((25, 40))
    arrays = (m, m.T, m[::2], m.astype(np.float32), m > 0, m.reshape(5, 5, 40),
              rng.integers(-9, 9, (3, 4)))
    for name in ("sum", "prod", "max", "min", "mean", "all", "any"):
        f, g = getattr(jnp, name), getattr(np, name)
        for x in arrays:
            for axis in ((0, 1), (1, 0), (-1, 0), (0, 1, 2), (2, -3, 1)):
                if len(axis) != x.ndim:
                    continue
                for kd in (False, True):
                    want = g(x, axis=axis, keepdims=kd)
                    got = f(x, axis=axis, keepdims=kd)
                    assert type(got) is type(want) and np.shape(got) == np.shape(want)
                    assert np.asarray(got).dtype == np.asarray(want).dtype
                    np.testing.assert_allclose(got, want, rtol=1e-5 if x.itemsize == 4
                                               else 1e-12)
        for bad, error in (((0, 0), ValueError), ((0, -2), ValueError),
                           ((0, 2), np.exceptions.AxisError)):
            with pytest.raises(error):
                f(m, axis=bad)
    o = np.empty(())
    assert jnp.sum(m, axis=(1, 0), out=o) is o
    np.testing.assert_allclose(o, m.sum(), rtol=1e-12)


def test_huge_python_int_with_dtype_on_int8_float_functions():
    # NumPy's loop for int8 / uint8 operands of a float function is float16, which jitdl
    # does not compute in: with dtype= the huge int is that dtype's float (NumPy's result)
    i8 = np.array([1, 2, -3, 0], np.int8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name in ("arctan2", "hypot", "logaddexp", "copysign"):
            for a in (i8, i8.astype(np.uint8)):
                for dt in (np.float64, np.float32):
                    got = getattr(jnp, name)(a, 2 ** 70, dtype=dt)
                    want = getattr(np, name)(a, 2 ** 70, dtype=dt)
                    assert got.dtype == want.dtype
                    np.testing.assert_array_equal(got, want)


def test_huge_python_int_takes_the_loop_dtype_picks():
    # dtype= picks NumPy's loop, and so the float a Python int beyond int64 becomes:
    # np.hypot(int16 array, 2**200, dtype=np.float64) is float64's 1.6e60, not the inf of
    # float32 (the loop without dtype=), and 2**70 + 2**40 keeps its low bits
    a = np.array([-3, 0, 5], np.int16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for name in ("hypot", "arctan2", "copysign", "logaddexp"):
            for h in (2 ** 200, 2 ** 70 + 2 ** 40, -2 ** 200):
                for kw in ({"dtype": np.float64}, {"dtype": np.float32}, {}):
                    want = getattr(np, name)(a, h, **kw)
                    got = getattr(jnp, name)(a, h, **kw)
                    assert got.dtype == want.dtype
                    np.testing.assert_array_equal(got, want)


def test_argmax_with_only_size_one_dimensions_after_the_axis():
    # argmax along an axis followed only by dimensions of size 1 is along the last axis of
    # the view without them (the 1-d read in blocks: a (2 * 10^6, 1) array along axis 0
    # took 8.4-9.7 ms one pass); NumPy's shapes, keepdims and negative axes
    from jitdl.numpy import _reductions
    rng = np.random.default_rng(13)
    for shape in ((7, 1), (50000, 1), (5, 3, 1), (4, 1, 3, 1, 1)):
        a = rng.integers(-3, 4, shape).astype(np.float64)
        a.flat[::11] = np.nan
        for axis in range(-len(shape), len(shape)):
            for name in ("argmax", "argmin"):
                for kw in ({}, {"keepdims": True}):
                    got, want = getattr(jnp, name)(a, axis=axis, **kw), \
                        getattr(np, name)(a, axis=axis, **kw)
                    assert np.shape(got) == np.shape(want)
                    np.testing.assert_array_equal(got, want)
    assert _reductions._plain_arg(np.ones((9, 1)), 0, None, False)[2] == (1,)
    assert _reductions._plain_arg(np.ones((9, 2)), 0, None, False)[2] is None


def test_comparisons_with_ints_beyond_float64():
    # (a reviewer's finding: an int past float64's range raised OverflowError where NumPy
    # compares exactly)
    a = np.array([1, 2, 0], np.int16)
    for name in ("less", "greater_equal", "equal", "not_equal"):
        for v in (2 ** 1030, -2 ** 1030):
            np.testing.assert_array_equal(getattr(jnp, name)(a, v), getattr(np, name)(a, v))
            np.testing.assert_array_equal(getattr(jnp, name)(v, a), getattr(np, name)(v, a))


def test_sizes_of_one_share_a_unary_ufuncs_kernel():
    """A unary ufunc (and round) broadcasts its one operand against nothing: a size of 1
    stays symbolic in its dynamic kernel's key (builder.solid), so vectors and matrices of
    sizes 1, 2, 3 and 7 in random order take one kernel per rank (each pattern of ones
    compiled its own: 6 for ranks 1 and 2). Every element against NumPy's in float64, on
    fresh inputs; empty arrays along each axis, also through the kernel's direct entry,
    are NumPy's empty results."""
    r = np.random.default_rng()
    eager.clear()
    shapes = [(n,) for n in (1, 2, 7, 1, 3)] + [(m, n) for m in (1, 2, 7) for n in (1, 3, 7)]
    for k in r.permutation(len(shapes)):
        x = r.standard_normal(shapes[k])
        same(jnp.negative(x), np.negative(x))
        same(jnp.sqrt(np.abs(x)), np.sqrt(np.abs(x)))
        same(jnp.round(x, 2), np.round(x, 2))
        same(jnp.floor(x.astype(np.float32)), np.floor(x.astype(np.float32)))
    info = {op: eager.cache_info(op)["kernels"] for op in ("negative", "sqrt", "round",
                                                            "floor")}
    assert info == {"negative": 2, "sqrt": 2, "round": 2, "floor": 2}, info
    for shape in ((0,), (0, 3), (3, 0), (1, 0), (0, 1)):
        x = r.standard_normal(shape)
        same(jnp.negative(x), np.negative(x))
        same(jnp.sqrt(x), np.sqrt(x))
        same(jnp.round(x, 2), np.round(x, 2))


def test_sizes_of_one_along_the_kept_axes_share_a_reductions_kernel():
    """A reduction along an axis broadcasts its one array operand against nothing: a size
    of 1 along an axis it keeps stays symbolic in its dynamic kernel's key (builder.solid),
    so rows of (1, n) and (m, n) arrays, m and n from 1 to 7 in random order, take one
    kernel per op and axis (each pattern of ones compiled its own). A size of 1 (or 0)
    along the reduced axis keeps a kernel of its own (max over nothing is NumPy's error),
    and a where= mask still broadcasts. Every element against NumPy's in float64, on
    fresh inputs."""
    r = np.random.default_rng()
    eager.clear()
    ops = [("sum", {}), ("max", {}), ("mean", {"keepdims": True}), ("var", {"ddof": 1}),
           ("std", {}), ("argmax", {}), ("any", {}), ("nanmin", {}), ("ptp", {}),
           ("count_nonzero", {})]
    cases = [((m, n), 1) for m in (1, 2, 7) for n in (2, 3)] + \
        [((m, n), 0) for m in (2, 7) for n in (1, 3, 7)] + \
        [((m, 1, n), (0, 2)) for m in (2, 3) for n in (2, 5)]
    for k in r.permutation(len(cases)):
        shape, axis = cases[k]
        x = r.standard_normal(shape)
        x[x > 1.5] = 0.0            # (zeros for any and count_nonzero)
        for name, kw in ops:
            if name == "argmax" and axis != 1:
                # (one axis only; along axis 0 the wrapper picks the kernel by the shape:
                # a 1-d one where the columns are 1, two passes where they fill vectors)
                continue
            same(getattr(jnp, name)(x, axis=axis, **kw), getattr(np, name)(x, axis=axis, **kw))
    info = {name: eager.cache_info(name)["kernels"] for name, _ in ops}
    want = {name: 1 if name == "argmax" else 3 for name, _ in ops}     # (one per axis)
    assert info == want, info
    for shape in ((3, 1), (1, 1), (3, 0), (0, 3), (1, 0), (0, 1)):
        x = r.standard_normal(shape)
        for name, kw in ops:
            for axis in (0, 1):
                if x.shape[axis] == 0 and name in ("max", "argmax", "nanmin", "ptp"):
                    with pytest.raises(ValueError):
                        getattr(jnp, name)(x, axis=axis, **kw)
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)     # (mean of nothing)
                    same(getattr(jnp, name)(x, axis=axis, **kw),
                         getattr(np, name)(x, axis=axis, **kw))
    for m in (1, 3):
        x, mask = r.standard_normal((m, 4)), r.random((1, 4)) < 0.5
        same(jnp.sum(x, axis=1, where=mask), np.sum(x, axis=1, where=mask))
        same(jnp.max(x, axis=0, where=mask, initial=-9.0),
             np.max(x, axis=0, where=mask, initial=-9.0))


def test_sizes_of_one_share_the_kernel_of_an_elementwise_op_of_one_array():
    """A binary ufunc, clip, where, nan_to_num or isclose called with one array that has
    dimensions (the other operands numbers or 0-d arrays: x * 2.0, clip(x, 0, 1)) has
    nothing to broadcast it against: a size of 1 of it stays symbolic in the dynamic
    kernel's key (eager._alone), so arrays of sizes 1 to 7 in random order take one kernel
    per rank (each pattern of ones compiled its own). Calls with two arrays still
    broadcast, with their own kernels. Every element against NumPy's in float64, on fresh
    inputs, sizes 0 too."""
    r = np.random.default_rng()
    eager.clear()
    c = np.float64(r.standard_normal())
    ops = [("multiply", lambda m: m.multiply(x, 2.5)),
           ("subtract", lambda m: m.subtract(np.array(c), x)),       # (a 0-d array)
           ("power", lambda m: m.power(np.abs(x), 1.5)),
           ("clip", lambda m: m.clip(x, -0.5, 0.5)),
           ("where", lambda m: m.where(x > 0, 1.0, -2.0)),
           ("nan_to_num", lambda m: m.nan_to_num(np.where(x > 1, np.nan, x), nan=7.0)),
           ("isclose", lambda m: m.isclose(x, c, atol=0.5))]
    shapes = [(n,) for n in (1, 2, 7, 1, 3)] + [(m, n) for m in (1, 2, 7) for n in (1, 3, 7)]
    for k in r.permutation(len(shapes)):
        x = r.standard_normal(shapes[k])
        for _, op in ops:
            same(op(jnp), op(np))
    info = {name: eager.cache_info(name)["kernels"] for name, _ in ops}
    assert info == {name: 2 for name, _ in ops}, info
    for s, t in (((3, 1), (1, 4)), ((1, 4), (3, 1)), ((2, 3), (3,)), ((1,), (5,))):
        x, y = r.standard_normal(s), r.standard_normal(t)
        same(jnp.multiply(x, y), np.multiply(x, y))
        same(jnp.clip(x, y, 0.5), np.clip(x, y, 0.5))
        same(jnp.where(x > 0, y, 2.0), np.where(x > 0, y, 2.0))
        same(jnp.multiply(x, 2.5), np.multiply(x, 2.5))
    for shape in ((0,), (0, 3), (3, 0), (1, 0)):
        x = r.standard_normal(shape)
        for _, op in ops:
            same(op(jnp), op(np))


def test_ufunc_sig_alias_and_signature_none_are_numpys():
    """NumPy's ufuncs take sig= for signature= (never both) and refuse signature=None
    (TypeError); jnp.add(a, b, sig=...) was a TypeError and signature=None was taken for
    the keyword left out. clip's signature= is that of the ufunc NumPy's clip calls: one
    type per bound given (clip(a, None, 0.5, signature=(None, None, None, 'f8')) is
    NumPy's ValueError; (None, None, 'f8') its float64 result)."""
    rng = np.random.default_rng(31)
    a, v = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal(4)
    i = rng.integers(-100, 100, (3, 4)).astype(np.int8)
    m1, m2 = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 4, 3))
    calls = [lambda m: m.add(a, v, sig=(None, None, "f4")),
             lambda m: m.add(a, v, sig="dd->d"), lambda m: m.exp(a, sig=(None, "f8")),
             lambda m: m.add(a, v, sig=(None, None, "f4"), signature=(None, None, "f4")),
             lambda m: m.add(a, v, signature=None), lambda m: m.add(a, v, sig=None),
             lambda m: m.exp(a, signature=None), lambda m: m.less(a, v, signature=None),
             lambda m: m.matmul(m1, m2, sig=(None, None, "f4")),
             lambda m: m.matmul(m1, m2, signature=None),
             lambda m: m.vecdot(m1, m1, signature=None),
             lambda m: m.vecdot(m1, m1, sig=(None, None, "f4")),
             lambda m: m.clip(a, 0.1, 0.5, sig=(None, None, None, "f8")),
             lambda m: m.clip(a, 0.1, 0.5, signature=None),
             lambda m: m.clip(a, None, 0.5, signature=(None, None, None, "f8")),
             lambda m: m.clip(a, None, 0.5, signature=(None, None, "f8")),
             lambda m: m.clip(a, min=-0.5, signature=(None, None, None, "f8")),
             lambda m: m.clip(a, min=-0.5, sig=(None, None, "f8")),
             lambda m: m.clip(a, None, None, signature=(None, None, "f8")),
             lambda m: m.clip(i, -300, 5, signature=(None, None, None, "i8")),
             lambda m: m.clip(i, -128, 5, signature=(None, None, "i8")),
             lambda m: m.clip(i, -5, 5, signature=(None, None, None, "i8"))]
    for n, call in enumerate(calls):
        try:
            want = call(np)
        except Exception as e:
            with pytest.raises(type(e)):
                call(jnp)
            continue
        got = call(jnp)
        assert got.dtype == want.dtype and got.shape == want.shape, n
        np.testing.assert_allclose(got, want, rtol=1e-6)

    @jd.compute
    def none_signature(x, y):
        return jnp.add(x, y, signature=None)
    with pytest.raises(jd.JitdlError, match="signature="):
        none_signature(a, v)



def test_layout_of_negative_stride_views_is_numpys():
    """NumPy's order='K' result of a view with negative strides (a[::-1].T) follows the
    sizes of its strides (a[::-1].T's copy is Fortran-ordered); jitdl sorted the strides
    with their signs and gave C order: copy, astype, the ufuncs, clip and keepdims
    reductions of such views now lay out their results as NumPy does (values unchanged)."""
    rng = np.random.default_rng(41)
    base = rng.standard_normal((4, 5, 6))
    views = [base[0][::-1].T, base[::-1].transpose(2, 0, 1),
             rng.standard_normal((300, 200))[::-1].T]
    calls = [lambda m, x: m.copy(x), lambda m, x: m.exp(x), lambda m, x: m.add(x, x),
             lambda m, x: m.multiply(x, 2.0), lambda m, x: m.clip(x, -0.5, 0.5),
             lambda m, x: m.isnan(x), lambda m, x: m.nan_to_num(x),
             lambda m, x: m.sum(x, axis=-1, keepdims=True)]
    for x in views:
        for call in calls + [lambda m, x: m.astype(x, np.float32) if m is jnp
                             else x.astype(np.float32)]:
            got, want = call(jnp, x), call(np, x)
            np.testing.assert_allclose(got, want, rtol=1e-6)
            assert got.flags.c_contiguous == want.flags.c_contiguous
            assert got.flags.f_contiguous == want.flags.f_contiguous
            assert [abs(s) for s, n in zip(got.strides, got.shape) if n > 1] == \
                [abs(s) for s, n in zip(want.strides, want.shape) if n > 1]


def test_order_f_as_a_definitions_result_is_an_error():
    """A definition's kernel writes its results in C order: jnp.matmul(A, B, order='F')
    returned from a definition gave a C-ordered array, the keyword silently dropped; it
    is a jitdl error naming the function and the user's line now (for the ufuncs, clip,
    power, copy, einsum too). Inside the definition order='F' stays free (an
    intermediate's layout is the compiler's), and 'C', 'A' and 1-d results are C order."""
    rng = np.random.default_rng(61)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    refused = [lambda A, B: jnp.matmul(A, B, order="F"), lambda A, B: jnp.exp(A, order="F"),
               lambda A, B: (B, jnp.add(A, A, order="f")),
               lambda A, B: jnp.power(A, 2.0, order="F"),
               lambda A, B: jnp.clip(A, -0.5, 0.5, order="F"),
               lambda A, B: jnp.copy(A, order="F"),
               lambda A, B: jnp.einsum("ij,jk->ik", A, B, order="F")]
    for fn in refused:
        with pytest.raises(jd.JitdlError, match=r"order='[Ff]'.*C order") as e:
            jd.compute(fn)(a, b)
        assert "test_numpy_eager.py" in str(e.value)
    taken = [(lambda A, B: jnp.matmul(A, B, order="F") + 1.0, a @ b + 1.0),
             (lambda A, B: jnp.matmul(A, B, order="C"), a @ b),
             (lambda A, B: jnp.exp(A, order="A"), np.exp(a)),
             (lambda A, B: jnp.vecdot(A, A, order="F"), np.vecdot(a, a))]
    for fn, want in taken:
        got = jd.compute(fn)(a, b)
        np.testing.assert_allclose(got, want, rtol=1e-12)
        assert got.flags.c_contiguous


def test_order_f_of_a_definitions_result_with_one_long_dimension_is_numpys():
    """A definition's (1, n), (n, 1) or (1, n, 1) result asked for in Fortran order is
    both C- and Fortran-contiguous, in NumPy too: its C-ordered result is NumPy's layout,
    where the trace refused it as it refuses a Fortran-ordered (m, n) result."""
    rng = np.random.default_rng(62)
    for shape in [(1, 5), (5, 1), (1, 5, 1), (1, 1)]:
        a = rng.standard_normal(shape)
        got = jd.compute(lambda A: jnp.exp(A, order="F"))(a)
        want = np.exp(a, order="F")
        np.testing.assert_allclose(got, want, rtol=1e-14)
        assert got.flags.c_contiguous and got.flags.f_contiguous and want.flags.c_contiguous
    with pytest.raises(jd.JitdlError, match=r"order='F'"):
        jd.compute(lambda A: jnp.exp(A, order="F"))(rng.standard_normal((2, 1, 3)))
