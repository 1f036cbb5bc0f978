"""jd.numpy's ufuncs call a kernel's `.direct` entry first (codegen.llvm._direct_entry):
it must serve exactly the calls the general dispatch would give that kernel, answer like
NumPy, and hand every other call back (FAST_FALLBACK) without leaking references."""
import sys

import numpy as np
import pytest

import jitdl as jd
from jitdl import eager
from jitdl.runtime import engine, pool
from jitdl.runtime.kernel import FAST_FALLBACK, FAST_RESULTS, direct_builtin

jnp = jd.numpy
MISS = FAST_RESULTS[FAST_FALLBACK]
pytestmark = pytest.mark.skipif(engine.array_data_offset() is None,
                                reason="this interpreter's object layout has no fast entries")


def rand(shape, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape) * 10
    return x.astype(dtype)


def kernel_of(name, *operands):
    eager.clear()                   # (a direct entry may serve the call without a lookup)
    getattr(jnp, name)(*operands)
    for key, k in eager._kernels.items():
        if key[0] == name and key[2:] == tuple(
                (a.shape, a.dtype) if type(a) is np.ndarray else type(a) for a in operands):
            return k
    raise AssertionError("no kernel")


def test_one_kernel_serves_every_size_of_its_pattern():
    a, b = rand(1000, np.float32), rand(1000, np.float32, 1)
    d = direct_builtin(kernel_of("maximum", a, b), (a, b))
    assert d is not None
    for n in (2, 3, 7, 8, 9, 999, 4097):
        x, y = rand(n, np.float32, n), rand(n, np.float32, n + 1)
        got = d(x, y)
        assert got is not MISS and got.dtype == np.float32 and got.shape == (n,)
        np.testing.assert_array_equal(got, np.maximum(x, y))
        assert sys.getrefcount(got) == 2        # the result's only owner is the caller


@pytest.mark.parametrize("why, args", [
    ("other sizes", lambda a, b: (a, b[:10])),
    ("strided, over GATHER_BYTES", lambda a, b: (np.tile(a, 10)[::2], np.tile(b, 10)[::2])),
    ("not aligned", lambda a, b: (np.frombuffer(b"\0" + a.tobytes(), a.dtype, a.size, 1),
                                  b)),
    ("strided, not 1-d", lambda a, b: (a.reshape(10, 100)[:, ::2], b.reshape(10, 100)[:, ::2])),
    ("another dtype", lambda a, b: (a.astype(np.float64), b)),
    ("byte-swapped", lambda a, b: (a.astype(a.dtype.newbyteorder()), b)),
    ("size 1 (another pattern)", lambda a, b: (a[:1], b[:1])),
    ("empty", lambda a, b: (a[:0], b[:0])),
    ("another rank", lambda a, b: (a.reshape(10, 100), b.reshape(10, 100))),
    ("a subclass", lambda a, b: (a.view(np.matrix)[0], b)),
    ("a list", lambda a, b: (list(a), b)),
    ("a number", lambda a, b: (a, 2.0)),
    ("too few", lambda a, b: (a,)),
    ("too many", lambda a, b: (a, b, b, b)),
])
def test_calls_it_does_not_serve_fall_back(why, args):
    a, b = rand(1000, np.float32), rand(1000, np.float32, 1)
    d = direct_builtin(kernel_of("add", a, b), (a, b))
    before = sys.getrefcount(MISS)
    for _ in range(100):
        assert d(*args(a, b)) is MISS, why
    # a reference taken or dropped per call shows as 100; other objects holding the
    # sentinel (freed by the collector meanwhile) as a few
    assert abs(sys.getrefcount(MISS) - before) < 50


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int16, np.uint8, np.bool_])
def test_strided_1d_operands_are_gathered(dtype, monkeypatch):
    """A kernel whose inputs are all 1-d gathers strided views (a[::2], m[:, 0], a[::-3],
    broadcast_to's zero stride) of at most GATHER_BYTES into its stack: NumPy's answers,
    with out= too (also out= over the memory a view reads: the view is read first), and no
    call reaches the general path."""
    from jitdl.runtime.kernel import Kernel
    from jitdl.target.cpu import GATHER_BYTES
    m = rand((700, 3), np.float64, 3)
    m = (m > 0) if dtype == np.bool_ else m.astype(dtype)
    a, b, c = m[:, 0], m[:, 1], m[:, 2]         # (strides of 3 elements)
    views = [(a, b), (a[::2], np.ascontiguousarray(b[::2])), (a[::-3], c[::-3]),
             (np.broadcast_to(c[:1], (700,)), b), (a[5:6], b[7:8])]
    ops = [("maximum", lambda x, y, mod: mod.maximum(x, y)),
           ("where", lambda x, y, mod: mod.where(x > y, x, y)),
           ("exp", lambda x, y, mod: mod.exp(x) if dtype == np.float64 else mod.absolute(y)),
           ("sum", lambda x, y, mod: mod.sum(x))]
    for _ in range(2):
        for x, y in views:
            for _, op in ops:
                got, want = op(x, y, jnp), op(x, y, np)
                assert type(got) is type(want)
                if np.dtype(dtype).kind == "f":     # (sums in another order, exp's ulp)
                    np.testing.assert_allclose(got, want, rtol=1e-12 if dtype == np.float64
                                               else 1e-5)
                else:
                    np.testing.assert_array_equal(got, want)
    slow = []
    real = Kernel._call
    monkeypatch.setattr(Kernel, "_call", lambda self, *a, **k: slow.append(self.fname)
                        or real(self, *a, **k))
    for x, y in views[:4]:
        for _, op in ops:
            op(x, y, jnp)
            op(x, y, jnp)
    assert slow == []
    # out= over the memory a strided view reads: the view is read before the kernel writes
    z = np.array(m[:, :2])                      # (a copy: columns 0 and 1)
    flat = z.reshape(-1)
    want = np.maximum(flat[::2][:350], flat[1::2][:350])
    got = jnp.maximum(flat[::2][:350], flat[1::2][:350], out=flat[:350])
    assert got is not None
    np.testing.assert_array_equal(flat[:350], want)
    assert a.itemsize * 700 <= GATHER_BYTES
    # the entry itself serves them (it handed strided views back before)
    k = kernel_of("maximum", np.ascontiguousarray(a), np.ascontiguousarray(b))
    d = direct_builtin(k, (a, b))
    for x, y in views[:4]:
        r = d(x, y)
        assert r is not MISS
        np.testing.assert_array_equal(r, np.maximum(x, y))


def test_strided_2d_operands_are_gathered_in_numpys_layout(monkeypatch):
    """2-d strided views (m[:, :20], m[::2], m[::-1, ::3], a broadcast row or column, and
    their transposes, whose transposes the wrappers run) of at most GATHER_BYTES: NumPy's
    values and result layout (C or Fortran order), repeated and interleaved, for
    elementwise functions, reductions and matmul; the first two kinds without the general
    path."""
    from jitdl.runtime.kernel import Kernel
    m = rand((25, 40), np.float64, 4)
    v = m[:, :20]
    views = [v, m[::2], m[::-1, ::3], np.broadcast_to(m[:1], (25, 40)),
             np.broadcast_to(m[:, :1], (25, 40)), v.T, m.T[::2], m[::-1, ::3].T]
    ops = [lambda x, mod: mod.multiply(x, 2.5), lambda x, mod: mod.add(x, x),
           lambda x, mod: mod.exp(x), lambda x, mod: mod.subtract(1.0, x),
           lambda x, mod: mod.maximum(x, np.ascontiguousarray(x)),
           lambda x, mod: mod.sum(x, axis=1), lambda x, mod: mod.max(x, axis=0),
           lambda x, mod: mod.argmax(x, axis=1), lambda x, mod: mod.matmul(x, x.T)]

    def check():
        for x in views:
            for op in ops:
                got, want = op(x, jnp), op(x, np)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_allclose(got, want, rtol=1e-12)
                assert (got.flags.c_contiguous, got.flags.f_contiguous) == \
                    (want.flags.c_contiguous, want.flags.f_contiguous), (x.strides, op)
            for op in (lambda x, mod: mod.add(x, x[0]),       # (a broadcast operand)
                       lambda x, mod: mod.multiply(x[:, :1], x)):
                got, want = op(x, jnp), op(x, np)
                np.testing.assert_allclose(got, want, rtol=1e-15)
                assert (got.flags.c_contiguous, got.flags.f_contiguous) == \
                    (want.flags.c_contiguous, want.flags.f_contiguous), (x.strides, op)
    check()
    check()
    slow = []
    real = Kernel._call
    monkeypatch.setattr(Kernel, "_call", lambda self, *a, **k: slow.append(self.fname)
                        or real(self, *a, **k))
    for x in views:
        for op in ops[:4]:
            op(x, jnp)
            slow.clear()
            op(x, jnp)
            assert slow == [], (x.strides, op)


def test_fortran_ordered_views_with_broadcast_operands_answer_in_numpys_layout():
    """A Fortran-ordered array or 2-d view (v.T, a strided one, a.T) with a broadcast
    operand (a column, a row, 0-d, a number; strided or not), on either side: NumPy's
    values and result order (Fortran: a strided column such as m[:20, :1] has no order of
    its own; it took the general path, and a C-ordered result, before)."""
    m = rand((25, 40), np.float64, 5)
    big = rand((60, 60), np.float64, 6)
    v = m[:, :20]
    firsts = (v.T, m.T[:20], m[:25:, ::-2][:, :20].T, np.asfortranarray(m[:20, :25]),
              m[:20, :25])
    seconds = (m[:20, :1], np.ones((20, 1)), big[:20, 0:1], m[:1, :1], m[0, 24::-1],
               m[0, :25], m[:1, :25], np.array(2.0), 3.0, m[:20, :25].copy(),
               np.asfortranarray(m[:20, :25]))
    for _ in range(2):
        for x1 in firsts:
            for x2 in seconds:
                for f in ("add", "multiply", "maximum"):
                    for a, b in ((x1, x2), (x2, x1)):
                        want, got = getattr(np, f)(a, b), getattr(jnp, f)(a, b)
                        np.testing.assert_array_equal(got, want)
                        assert (got.flags.c_contiguous, got.flags.f_contiguous) == \
                            (want.flags.c_contiguous, want.flags.f_contiguous), \
                            (x1.strides, np.shape(x2), f)


@pytest.mark.parametrize("name, operands", [
    ("add", lambda a, b: (a, b)), ("multiply", lambda a, b: (a, 2.5)),
    ("less", lambda a, b: (a, b)), ("exp", lambda a, b: (a,)),
    ("where", lambda a, b: (a > 0, a, b)), ("clip", lambda a, b: (a, -3.0, 3.0))])
def test_fortran_ordered_operands_of_an_elementwise_kernel(name, operands):
    """An elementwise kernel's entry serves operands that are all Fortran-ordered (a.T):
    its loops run over their memory alike and the output is Fortran-ordered, as NumPy's;
    a mix of orders, or a strided one, goes back to the general path, which answers the
    same."""
    A, B = rand((30, 70), np.float64), rand((30, 70), np.float64, 1)
    a, b = A.T, B.T
    args = operands(a, b)
    eager.clear()               # (the first call answers in the order later ones do)
    assert getattr(jnp, name)(*args).flags.f_contiguous
    k = kernel_of(name, *operands(np.ascontiguousarray(a), np.ascontiguousarray(b)))
    d = direct_builtin(k, args)
    r = d(*args)
    assert r is not MISS
    want = getattr(np, name)(*args)
    assert r.flags.f_contiguous and not r.flags.c_contiguous and want.flags.f_contiguous
    same = np.testing.assert_allclose if want.dtype.kind == "f" else \
        np.testing.assert_array_equal                   # (exp: within an ulp of NumPy's)
    same(r, want)
    for mixed in (operands(a, np.ascontiguousarray(b)), operands(a[::2], b[::2])):
        if len(mixed) > 1 and any(type(x) is np.ndarray and x.flags.c_contiguous
                                  for x in mixed) or mixed[0].shape != a.shape:
            assert d(*mixed) is MISS
        same(getattr(jnp, name)(*mixed), getattr(np, name)(*mixed))
    if name != "where":                                 # (where takes no out=)
        out = np.empty(a.shape, want.dtype, order="F")  # (out= keeps to C order)
        assert d(*args, out) is MISS
        same(getattr(jnp, name)(*args, out=out), want)


def test_the_order_of_a_result_does_not_depend_on_earlier_calls():
    """An op's first call on a.T answers in Fortran order whatever other calls left in its
    slots: after round of a float32 a.T, round of a float64 a.T (whose kernel was made
    earlier) went through the kernel's C-order run once, then the direct entry."""
    a64 = rand((9, 13), np.float64).T
    a32 = rand((9, 13), np.float32, 1).T
    eager.clear()
    jnp.round(np.ascontiguousarray(a64))
    jnp.round(a32)              # (its entry is now the op's slot: a float64 call misses it)
    for _ in range(2):
        r = jnp.round(a64)
        assert r.flags.f_contiguous and not r.flags.c_contiguous
        np.testing.assert_array_equal(r, np.round(a64))


def test_copy_checks_its_order_as_numpy_does():
    a = rand((3, 4), np.float64)
    with pytest.raises(ValueError, match="order must be one of"):
        jnp.copy(a, order="X")
    with pytest.raises(TypeError, match="order must be str"):
        jnp.copy(a, order=3)
    assert jnp.copy(a.T, order=None).flags.f_contiguous
    assert jnp.permute_dims(a).shape == (4, 3)


def test_a_kernel_that_reads_its_indices_keeps_to_c_order():
    """triu reads each element at its own position but compares its indices: on a.T's
    memory the loops' indices would be the transposes', so it takes no Fortran operand."""
    a = rand((30, 70), np.float64).T
    k = kernel_of("triu", np.ascontiguousarray(a))
    d = direct_builtin(k, (a,))
    if d is not None:
        assert d(a) is MISS
    np.testing.assert_array_equal(jnp.triu(a), np.triu(a))


@pytest.mark.parametrize("order", ["K", "C", "F", "A"])
@pytest.mark.parametrize("layout", ["C", "F", "strided"])
def test_copy_answers_in_the_order_it_is_asked_for(order, layout):
    """copy's kernel is elementwise: its entry makes a.T's copy Fortran-ordered, which is
    NumPy's order='K' but not order='C' (it was Fortran-ordered there, on the first call
    and after); 'F' and 'A' follow NumPy's too."""
    a = rand((30, 70), np.float64)
    x = {"C": a, "F": a.T, "strided": a[:, ::2]}[layout]
    want = np.copy(x, order=order)
    eager.clear()
    for _ in range(3):              # (the first call and those the entry serves)
        got = jnp.copy(x, order=order)
        np.testing.assert_array_equal(got, want)
        assert not np.shares_memory(got, x)
        if layout != "strided" or order != "K":     # (K of a strided view: C order)
            assert got.flags.c_contiguous == want.flags.c_contiguous, (order, layout)
            assert got.flags.f_contiguous == want.flags.f_contiguous, (order, layout)


def test_a_large_output_is_left_to_the_pool():
    a = rand(1000, np.float32)
    d = direct_builtin(kernel_of("negative", a), (a,))
    big = rand(pool.MIN_BYTES // 4 + 8, np.float32)
    assert d(big) is MISS
    np.testing.assert_array_equal(jnp.negative(big), -big)


@pytest.mark.parametrize("dtype, scalar", [(np.float32, 2.5), (np.int32, 3), (np.int32, 2.5),
                                           (np.int8, 100), (np.bool_, True),
                                           (np.uint8, 7), (np.float64, -1)])
def test_numbers_keep_their_python_type(dtype, scalar):
    a = rand(1000, dtype)
    k = kernel_of("multiply", a, scalar)
    d = direct_builtin(k, (a, scalar))
    want = np.multiply(a, scalar)
    got = jnp.multiply(a, scalar)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    if d is None:
        return                              # (a kernel with checks on the int: no entry)
    for other in (True, 3, 2.5, np.float64(2.5), np.int64(3)):
        if type(other) is type(scalar):
            continue
        assert d(a, other) is MISS          # another type may be another result dtype
    assert jnp.multiply(a, scalar).dtype == want.dtype


def test_ints_that_must_fit_are_still_checked():
    a = rand(1000, np.int8)
    jnp.add(a, 1)
    with pytest.raises(OverflowError):
        jnp.add(a, 300)
    np.testing.assert_array_equal(jnp.add(a, 1), a + np.int8(1))
    big = 2 ** 70
    np.testing.assert_array_equal(jnp.add(rand(1000, np.float32), big),
                                  np.add(rand(1000, np.float32), big))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32])
def test_ints_that_must_fit_a_narrow_dtype_are_checked_by_the_entry(dtype):
    """The entry serves a Python int that fits the array's dtype (its bounds included),
    and hands one that does not back to the general path, which raises NumPy's
    OverflowError: whichever call came first, and with the entry in the op's slot."""
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    a = rand(1000, dtype)
    k = kernel_of("subtract", a, 1)
    d = direct_builtin(k, (a, 1))
    assert d is not None
    for v in (1, lo, hi, 0):
        got = d(a, v)
        assert got is not MISS
        np.testing.assert_array_equal(got, np.subtract(a, v))
    for v in (lo - 1, hi + 1, 2 ** 63 - 1, -2 ** 63, 2 ** 64):
        assert d(a, v) is MISS
        with pytest.raises(OverflowError):
            jnp.subtract(a, v)
        np.testing.assert_array_equal(jnp.subtract(a, hi), np.subtract(a, hi))


def test_switching_patterns_and_back():
    """The wrapper's direct slot follows the kernel in use; results stay NumPy's."""
    rng = np.random.default_rng(5)
    shapes = [((1000,), (1000,)), ((10, 100), (100,)), ((10, 100), (10, 1)), ((1000,), ()),
              ((3, 4), (3, 4))]
    for _ in range(3):
        for sa, sb in shapes:
            x = rng.standard_normal(sa)
            y = rng.standard_normal(sb) if sb else 1.5
            np.testing.assert_array_equal(jnp.subtract(x, y), np.subtract(x, y))
            np.testing.assert_array_equal(jnp.sqrt(np.abs(x)), np.sqrt(np.abs(x)))


def test_few_compiles_over_many_sizes():
    eager.clear()
    assert jnp.hypot(rand(5, np.float64), rand(5, np.float64)).shape == (5,)
    before = eager.cache_info("hypot")["kernels"]
    for n in range(2, 200, 7):
        x, y = rand(n, np.float64, n), rand(n, np.float64, n + 1)
        np.testing.assert_allclose(jnp.hypot(x, y), np.hypot(x, y), rtol=4e-16)
    assert eager.cache_info("hypot")["kernels"] - before <= 2


def test_read_only_and_unaligned_inputs():
    a = rand(1000, np.float64)
    a.flags.writeable = False
    # (within an ulp: NumPy's AVX-512 exp is its own code, not the C library's)
    np.testing.assert_allclose(jnp.exp(a), np.exp(a), rtol=3e-16, atol=0)
    raw = np.zeros(8001, np.uint8)[1:].view(np.float64)     # misaligned data
    raw[:] = rand(1000, np.float64, 3)
    np.testing.assert_allclose(jnp.exp(raw), np.exp(raw), rtol=3e-16, atol=0)


def test_other_ops_take_their_direct_entries_too():
    """Ops through jitdl.eager.apply: concatenate (an output size that is a sum of
    sizes), reductions to a NumPy scalar, axis reductions; across sizes of one pattern."""
    rng = np.random.default_rng(9)
    for n in (3, 17, 40, 3, 17):
        x, y = rng.standard_normal((n, 5)), rng.standard_normal((n, n + 2))
        np.testing.assert_array_equal(jnp.concatenate([x, y], axis=1),
                                      np.concatenate([x, y], axis=1))
        with pytest.raises(ValueError):
            jnp.concatenate([x, y[:-1]], axis=1)
        s = jnp.sum(y)
        assert type(s) is np.float64
        np.testing.assert_allclose(s, np.sum(y), rtol=1e-12)
        i = jnp.argmax(y)
        assert type(i) is np.intp and i == np.argmax(y)
        np.testing.assert_allclose(jnp.mean(y, axis=0), np.mean(y, axis=0), rtol=1e-12)
        assert jnp.max(y, axis=1, keepdims=True).shape == (n, 1)
    assert eager._direct.get(("concatenate", (("axis", 1), ("dtype", None)), 2)) is not None


def test_clear_forgets_the_wrappers_entries():
    a = rand(100, np.float32)
    jnp.negative(a)
    eager.clear()
    assert eager.cache_info("negative")["kernels"] == 0
    jnp.negative(a)
    assert eager.cache_info("negative")["kernels"] == 1


def test_out_is_written_and_returned():
    """direct(*args, out): the kernel writes into out and returns out itself."""
    a, b = rand(1000, np.float32), rand(1000, np.float32, 1)
    d = direct_builtin(kernel_of("add", a, b), (a, b))
    for n in (2, 9, 1000, 4097):
        x, y = rand(n, np.float32, n), rand(n, np.float32, n + 1)
        out = np.full(n, np.nan, np.float32)
        refs = sys.getrefcount(out)
        assert d(x, y, out) is out
        assert sys.getrefcount(out) == refs
        np.testing.assert_array_equal(out, x + y)
    big = rand(pool.MIN_BYTES // 4 + 8, np.float32)     # (no allocation: any size)
    out = np.empty_like(big)
    assert d(big, big, out) is out
    np.testing.assert_array_equal(out, big + big)


@pytest.mark.parametrize("why, out", [
    ("another dtype", lambda a: np.empty(1000, np.float64)),
    ("another shape", lambda a: np.empty(999, np.float32)),
    ("a larger shape (broadcast)", lambda a: np.empty((2, 1000), np.float32)),
    ("read-only", lambda a: np.frombuffer(np.zeros(1000, np.float32).tobytes(), np.float32)),
    ("strided", lambda a: np.empty(2000, np.float32)[::2]),
    ("reversed", lambda a: np.empty(1000, np.float32)[::-1]),
    ("a subclass", lambda a: np.empty((1, 1000), np.float32).view(np.matrix)[0]),
    ("a list", lambda a: [0.0] * 1000),
    ("partly over an input", lambda a: a[1:].view(np.float32)),
])
def test_out_calls_it_does_not_serve_fall_back(why, out):
    base = rand(1001, np.float32)
    a, b = base[:1000], rand(1000, np.float32, 1)
    d = direct_builtin(kernel_of("add", a, b), (a, b))
    o = out(base)
    before = o.copy() if isinstance(o, np.ndarray) else list(o)
    a_before = a.copy()
    assert d(a, b, o) is MISS, why
    np.testing.assert_array_equal(np.asarray(o), np.asarray(before))   # untouched
    np.testing.assert_array_equal(a, a_before)


def test_an_elementwise_kernel_may_write_over_its_inputs():
    """out= exactly an input of an elementwise kernel: each element reads its own
    inputs before it is written (lower.in_place_inputs), as NumPy's in-place ufuncs."""
    a, b = rand(1000, np.float64), rand(1000, np.float64, 1)
    k = kernel_of("add", a, b)
    assert k.sig.alias == [0, 1]
    d = direct_builtin(k, (a, b))
    x, y = a.copy(), b.copy()
    assert d(x, y, x) is x
    np.testing.assert_array_equal(x, a + b)
    assert d(x, y, y) is y
    np.testing.assert_array_equal(y, (a + b) + b)
    z = a.copy()
    assert d(z, z, z) is z
    np.testing.assert_array_equal(z, a + a)
    w = a.copy()
    assert d(w, b, w.view()) is not MISS        # (another view of the same memory)
    np.testing.assert_array_equal(w, a + b)
    # a kernel that is not elementwise in its input takes none of this
    m = rand((30, 30), np.float64)
    k = kernel_of("matmul", m, m)
    assert k.sig.alias == []
    d = direct_builtin(k, (m, m))
    if d is not None:
        x = m.copy()
        assert d(x, m, x) is MISS
        np.testing.assert_array_equal(x, m)


_OUT_CASES = {
    "fresh": lambda p, v: p.add(v["x"], v["y"], out=v["o"]),
    "in place x": lambda p, v: p.multiply(v["x"], v["y"], out=v["x"]),
    "in place y": lambda p, v: p.subtract(v["x"], v["y"], out=v["y"]),
    "both": lambda p, v: p.add(v["x"], v["x"], out=v["x"]),
    "broadcast in place": lambda p, v: p.add(v["m"], v["r"], out=v["m"]),
    "shifted views": lambda p, v: p.add(v["x"][:-1], v["x"][1:], out=v["x"][:-1]),
    "reversed out": lambda p, v: p.add(v["x"], v["y"], out=v["x"][::-1]),
    "other dtype": lambda p, v: p.add(v["x"], v["y"], out=v["o32"]),
    "unary in place": lambda p, v: p.tanh(v["x"], out=v["x"]),
    "scalar operand in place": lambda p, v: p.subtract(2.5, v["x"], out=v["x"]),
    "matmul over its input": lambda p, v: p.matmul(v["sq"], v["sq"].T.copy(), out=v["sq"]),
    "sum into a row of its input": lambda p, v: p.sum(v["m"], axis=0, out=v["m"][2]),
    "sum into 0-d": lambda p, v: p.sum(v["x"], out=v["z"]),
}


@pytest.mark.parametrize("case", list(_OUT_CASES))
def test_out_calls_answer_as_numpy(case):
    """Each out= pattern, called often enough to take the general path, the wrapper's
    out= table and the direct entry, against NumPy on the same inputs: the result, what
    it returns, and every array afterwards."""
    rng = np.random.default_rng(11)
    eager.clear()
    for _ in range(4):
        mine = {"x": rng.standard_normal(257), "y": rng.standard_normal(257),
                "m": rng.standard_normal((6, 257)), "r": rng.standard_normal(257),
                "o": np.full(257, np.nan), "o32": np.zeros(257, np.float32),
                "z": np.zeros(()), "sq": rng.standard_normal((16, 16))}
        theirs = {k: a.copy() for k, a in mine.items()}
        got, want = _OUT_CASES[case](jnp, mine), _OUT_CASES[case](np, theirs)
        assert type(got) is type(want) and np.shape(got) == np.shape(want)
        for k in mine:
            assert (got is mine[k]) == (want is theirs[k]), f"{case}: returns out= {k}"
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        for k in mine:
            np.testing.assert_allclose(mine[k], theirs[k], rtol=1e-12, atol=1e-12,
                                       err_msg=f"{case}: {k} afterwards")


def test_read_only_out_is_refused_and_untouched():
    x, y = rand(100, np.float64), rand(100, np.float64, 1)
    for _ in range(3):
        o = np.zeros(100)
        o.flags.writeable = False
        with pytest.raises(ValueError):
            jnp.add(x, y, out=o)
        assert not o.any()


def test_an_ops_direct_slot_is_per_operand_count():
    """The direct entry takes one argument more as out=: an entry made for fewer operands
    (concatenate of 2, all() without where=) must never see a call with more, where the
    last operand would be taken for out and written over (found by review)."""
    eager.clear()
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    jnp.concatenate([a, b])
    c = np.arange(10.0, 15.0)
    got = jnp.concatenate([a, b, c])
    assert got is not c and got.shape == (10,)
    np.testing.assert_array_equal(c, np.arange(10.0, 15.0))
    np.testing.assert_array_equal(got, np.concatenate([a, b, c]))
    jnp.concatenate([a, b, c])
    out = np.zeros(5)
    assert jnp.concatenate([a, b], out=out) is out
    np.testing.assert_array_equal(out, np.concatenate([a, b]))
    x = np.array([[True, False, True], [True, True, False]])
    m = np.array([[True, False, True]])
    jnp.all(x, axis=0, keepdims=True)
    got = jnp.all(x, axis=0, keepdims=True, where=m)
    assert got is not m
    np.testing.assert_array_equal(m, [[True, False, True]])
    np.testing.assert_array_equal(got, np.all(x, axis=0, keepdims=True, where=m))
    o = np.zeros((1, 3), bool)
    assert jnp.all(x, axis=0, keepdims=True, out=o) is o
    np.testing.assert_array_equal(o, np.all(x, axis=0, keepdims=True))
    v1, v2, v3 = np.ones((1, 4)), np.full((1, 4), 2.0), np.full((2, 4), 7.0)
    jnp.vstack([v1, v2])
    got = jnp.vstack([v1, v2, v3])
    assert got.shape == (4, 4) and (v3 == 7.0).all()


def test_products_take_the_direct_slot_and_answer_every_other_call():
    """dot, matmul, inner, outer and vdot try the op's direct slot before their wrapper
    (eager.numpy_fallback): every call, whatever the slot holds from the call before,
    answers as NumPy (shapes, dtypes, Fortran order, lists, numbers, out=, subclasses)."""
    rng = np.random.default_rng(3)
    m32, v32 = rand((32, 32), np.float64), rand(32, np.float64)
    i46, i62 = rng.integers(0, 9, (4, 6)), rng.integers(0, 9, (6, 2))
    calls = [
        lambda M: M.dot(m32, v32), lambda M: M.dot(v32, v32), lambda M: M.dot(m32, m32),
        lambda M: M.dot(m32.astype(np.float32), v32.astype(np.float32)),
        lambda M: M.dot(np.asfortranarray(m32), v32), lambda M: M.dot(m32.tolist(), v32),
        lambda M: M.dot(2.5, v32), lambda M: M.dot(m32, v32, np.empty(32)),
        lambda M: M.matmul(m32, m32.T), lambda M: M.matmul(m32[:5], m32[:, :3]),
        lambda M: M.matmul(i46, i62),
        lambda M: M.inner(v32, v32), lambda M: M.outer(v32[:4], v32[:3]),
        lambda M: M.vdot(m32, m32),
    ]
    for _ in range(2):
        for c in calls + calls[::-1]:
            got, want = c(jnp), c(np)
            assert type(got) is type(want) and np.shape(got) == np.shape(want)
            assert np.asarray(got).dtype == np.asarray(want).dtype
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5
                                       if np.asarray(want).dtype == np.float32 else 1e-12)
    with pytest.raises(ValueError):
        jnp.dot(m32, rand(31, np.float64))


def test_gather_buffers_take_stack_only_for_gathered_views():
    """An entry's gather buffers are allocated only for the views it gathers, of their own
    bytes, and the views of one call gather at most GATHER_TOTAL bytes together (further
    strided views: the fallback, whose answer is the same): concatenate of 16 contiguous
    arrays in a thread of a 128 KiB stack ran out of it (16 x 8 KiB, gathered or not)."""
    import subprocess
    from jitdl.target.cpu import GATHER_BYTES, GATHER_TOTAL
    script = (
        "import threading, numpy as np, jitdl as jd\n"
        "xs = [np.arange(5.0) * i for i in range(16)]\n"
        "jd.numpy.concatenate(xs); jd.numpy.concatenate(xs)\n"
        "got = []\n"
        "threading.stack_size(128 << 10)\n"
        "t = threading.Thread(target=lambda: got.append(jd.numpy.concatenate(xs)))\n"
        "t.start(); t.join()\n"
        "assert np.array_equal(got[0], np.concatenate(xs))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # four views of nearly GATHER_BYTES each: three gathered, the fourth over the total
    n = GATHER_BYTES // 8 - 24
    assert 3 * n * 8 <= GATHER_TOTAL < 4 * n * 8
    m = rand((2 * n, 4), np.float64, 5)
    views = tuple(m[::2, j] for j in range(4))
    contiguous = tuple(np.ascontiguousarray(v) for v in views)
    eager.clear()
    jnp.concatenate(contiguous)
    k = next(k for key, k in eager._kernels.items() if key[0] == "concatenate"
             and key[2:] == tuple((a.shape, a.dtype) for a in contiguous))
    d = direct_builtin(k, contiguous)
    assert d(*views) is MISS
    for three in (views[:3] + contiguous[3:], contiguous[:1] + views[1:]):
        r = d(*three)
        assert r is not MISS
        np.testing.assert_array_equal(r, np.concatenate(views))
    for _ in range(2):
        np.testing.assert_array_equal(jnp.concatenate(views), np.concatenate(views))


@jd.compute
def _scaled_sum(X, Z):
    Y[i] = X[i] * 2.0 + Z[i]
    return Y


@pytest.mark.parametrize("over", [False, True], ids=["at most GATHER_BYTES", "over it"])
def test_a_static_kernels_entry_gathers_only_operands_that_it_can(over):
    """A kernel of constant sizes compiles the gather of a strided operand only where its
    bytes are at most GATHER_BYTES (over it, the entry's gather refused every call, and
    its code was compiled for nothing); either way the entry's answers (or the general
    path's, after its fallback) are NumPy's for contiguous and strided operands."""
    from jitdl.target.cpu import GATHER_BYTES
    n = GATHER_BYTES // 4 + (1 if over else 0)
    rng = np.random.default_rng()
    x, z = (rng.standard_normal(2 * n).astype(np.float32) for _ in range(2))
    want = lambda a, b: a.astype(np.float64) * 2.0 + b      # noqa: E731
    np.testing.assert_allclose(_scaled_sum(x[:n], z[:n]), want(x[:n], z[:n]), rtol=1e-6)
    k = _scaled_sum.kernel(x[:n], z[:n])
    assert ("@\"jd_gather1d4\"" in k.texts["llvm_ir_unoptimized"]) is not over
    d = direct_builtin(k, (x[:n], z[:n]))
    assert d is not None
    for a, b in ((x[:n], z[:n]), (x[::2], z[:n]), (x[::-2], z[1::2])):
        got = d(a, b)
        assert (got is MISS) is (over and (a.strides, b.strides) != ((4,), (4,)))
        if got is MISS:
            got = _scaled_sum(a, b)
        np.testing.assert_allclose(got, want(a, b), rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int16, np.uint8])
def test_gathers_of_wide_elements_compile_only_their_scalar_loop(dtype):
    """The gather's inner loop is not vectorised for elements of 2 bytes or more: LLVM's
    vector loop (16-lane masked gathers) ran only for a stride of 1 byte, which an aligned
    view of such elements never has, and cost a fifth of an eager kernel's LLVM time. The
    entry's answers for strided 1-d and 2-d views stay NumPy's."""
    rng = np.random.default_rng()
    m = (rng.standard_normal((30, 60)) * 50).astype(dtype)
    y = (rng.standard_normal(1000) * 50).astype(dtype)
    for a, b in ((m[:, :30], m[:, 1:31]), (m[::2, ::3], m[1::2, ::3]), (y[::2], y[1::2]),
                 (y[::-3], y[::3])):
        k = kernel_of("add", np.ascontiguousarray(a), np.ascontiguousarray(b))
        d = direct_builtin(k, (a, b))
        got = d(a, b)
        assert got is not MISS
        np.testing.assert_array_equal(got, np.add(a, b))
        gathers = [part for part in k.texts["llvm_ir"].split("\ndefine ")
                   if part.split("(")[0].split("@")[-1].startswith("jd_gather")]
        assert gathers
        if np.dtype(dtype).itemsize > 1:
            assert not any("masked.gather" in g for g in gathers)
