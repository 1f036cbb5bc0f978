"""Never wrong, never a crash: failed allocations, NEP 50 integer overflow, calls with the
wrong arguments, whole-tensor math, cache warnings, the CLI in a pipe, settings, timing
results, and globals read when a specialisation is built."""
import os
import re

import numpy as np
import pytest

import jitdl as jd
from _check import assert_matches, check

F64 = np.float64


def mentions(msg, *words):
    """Every word occurs in msg as a whole word."""
    missing = [w for w in words
               if not re.search(r"(?<![A-Za-z0-9_])" + re.escape(w) + r"(?![A-Za-z0-9_])", msg)]
    assert not missing, f"{missing} missing from the message:\n{msg}"


# ---------------------------------------------------------------------------------------
# 1. a heap allocation that fails is a MemoryError naming the buffer and its size
# ---------------------------------------------------------------------------------------
# Sizes beyond the 128 TiB of a process's address space: aligned_alloc returns NULL
# whatever the overcommit policy, so nothing is touched and nothing is OOM-killed. (CPU
# kernels: a GPU's failed allocations are tests/test_cuda_runtime.py's.)

def make_outer3():
    @jd.compute
    def outer3(a, b, c):
        P[i, j, k] = a[i] * b[j] * c[k]
        S[i] = sum(P[i, j, k] for j in range(b.shape[0]) for k in range(c.shape[0]))
        return S

    @jd.schedule(outer3)
    def materialise(s, cfg):
        s.compute_root(s["P"])
    return outer3


def outer3_ref(a, b, c):
    return a * b.sum() * c.sum()


@pytest.mark.cpu_only    # (its schedule is the CPU's: on a GPU P is not stored)
def test_intermediate_too_large_to_allocate_is_a_memory_error(rng):
    f = make_outer3()
    a, b, c = (rng.standard_normal(n) for n in (7, 5, 9))
    check(f, (a, b, c), outer3_ref(a, b, c), F64)       # the same kernel, small: right
    assert "alloc P: float64[7, 5, 9] (global)" in f.lower(a, b, c)
    n = 100_000                                          # P: 8e15 bytes (7.1 PiB)
    a, b, c = (rng.standard_normal(n) for _ in range(3))
    for _ in range(2):                                   # compiled, then the cached kernel
        with pytest.raises(MemoryError) as ei:
            f(a, b, c)
        assert isinstance(ei.value, jd.JitdlError)
        mentions(str(ei.value), "outer3", "P", "8000000000000000", "bytes",
                 "float64[100000, 100000, 100000]")
    out = np.zeros(n)
    with pytest.raises(MemoryError):
        f(a, b, c, out=out)


def make_outer4(dynamic=False):
    """outer4(a, b, c, d): a rank-4 outer product P, materialised whole, summed per i."""
    def outer4(a, b, c, d):
        P[i, j, k, l] = a[i] * b[j] * c[k] * d[l]
        S[i] = sum(P[i, j, k, l] for j in range(b.shape[0]) for k in range(c.shape[0])
                   for l in range(d.shape[0]))
        return S
    outer4 = jd.compute(dynamic=dynamic)(outer4)

    @jd.schedule(outer4)
    def materialise(s, cfg):
        s.compute_root(s["P"])
    return outer4


@pytest.mark.cpu_only
def test_allocation_size_beyond_64_bits_is_a_memory_error(rng):
    """10^20 elements of 8 bytes do not fit a size_t: no wrapped (small) allocation."""
    outer4 = make_outer4()
    args = [rng.standard_normal(n) for n in (3, 4, 5, 6)]
    check(outer4, args, args[0] * args[1].sum() * args[2].sum() * args[3].sum(), F64)
    args = [rng.standard_normal(100_000) for _ in range(4)]
    with pytest.raises(MemoryError) as ei:
        outer4(*args)
    mentions(str(ei.value), "P", str(8 * 10 ** 20))


@pytest.mark.cpu_only
@pytest.mark.parametrize("dims", [(3996, 199679, 83717, 34519), (1416, 256999, 2089, 3033169)])
def test_a_temporary_of_nearly_2_64_bytes_is_refused(dims):
    """A symbolic temporary whose byte size rounds to just under 2**64 wrapped in the
    pool's size arithmetic to a small block (a segfault): it is refused, a MemoryError
    naming the buffer, as aligned_alloc refuses it."""
    from jitdl.runtime import pool
    outer4 = make_outer4(dynamic=True)
    rng = np.random.default_rng(6)
    small = [rng.standard_normal(n) for n in (3, 4, 5, 6)]
    np.testing.assert_allclose(outer4(*small), small[0] * small[1].sum() * small[2].sum()
                               * small[3].sum(), rtol=1e-12)
    pool._wait_for_build()
    with pytest.raises(MemoryError, match="P"):
        outer4(*[rng.standard_normal(n) for n in dims])


@pytest.mark.cpu_only
def test_failed_allocation_in_a_parallel_loop_block(rng):
    """A block-sized buffer of compute_at, allocated inside a parallel loop's body."""
    @jd.compute
    def blocks(a, b, c, d):
        P[i, j, k, l] = a[i] * b[j] * c[k] * d[l]
        S[i] = sum(P[i, j, k, l] for j in range(b.shape[0]) for k in range(c.shape[0])
                   for l in range(d.shape[0]))
        return S

    @jd.schedule(blocks)
    def per_row(s, cfg):
        (i,) = s["S"].axis
        s.compute_at(s["P"], s["S"], i)
        s.parallel(i)

    args = [rng.standard_normal(n) for n in (40, 30, 20, 10)]   # 48 KB blocks: heap
    assert "(global)" in blocks.lower(*args)
    check(blocks, args, args[0] * args[1].sum() * args[2].sum() * args[3].sum(), F64)
    args = [rng.standard_normal(n) for n in (16, 100_000, 100_000, 100_000)]
    with pytest.raises(MemoryError) as ei:
        blocks(*args)
    mentions(str(ei.value), "P_l", "8000000000000000")


@pytest.mark.cpu_only
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_failed_allocation_frees_what_was_allocated(rng):
    """Q (8 MB) is allocated around P; P fails: Q is freed on every call."""
    @jd.compute
    def two(a, b, c):
        Q[j] = b[j] * 2.0
        P[i, j, k] = a[i] * Q[j] * c[k]
        S[i] = sum(P[i, j, k] for j in range(b.shape[0]) for k in range(c.shape[0]))
        return S

    @jd.schedule(two)
    def materialise(s, cfg):
        s.compute_root(s["Q"])
        s.compute_root(s["P"])

    small = [rng.standard_normal(n) for n in (3, 4000, 5)]
    check(two, small, small[0] * 2 * small[1].sum() * small[2].sum(), F64)
    ir = two.lower(*small)
    assert ir.index("alloc Q") < ir.index("alloc P")
    args = [rng.standard_normal(100_000), rng.standard_normal(1_000_000),
            rng.standard_normal(100_000)]

    def vm_bytes():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    with pytest.raises(MemoryError):
        two(*args)
    before = vm_bytes()
    for _ in range(60):                     # 480 MB of address space if Q leaked
        with pytest.raises(MemoryError):
            two(*args)
    assert vm_bytes() - before < 100 << 20


# ---------------------------------------------------------------------------------------
# 2. NEP 50: a Python int out of bounds for the integer dtype it meets is an OverflowError
# ---------------------------------------------------------------------------------------

@jd.compute
def times(X, a):
    return jd.tensor(X.shape, lambda i: X[i] * a)


@jd.compute
def plus(X, a):
    Y[i] = X[i] + a
    return Y


@jd.compute
def below(X, a):
    Y[i] = X[i] < a
    return Y


@jd.compute
def equal(X, a):
    Y[i] = X[i] == a
    return Y


@jd.compute
def biggest(X, a):
    Y[i] = max(X[i], a)
    return Y


def numpy_or_error(fn):
    try:
        with np.errstate(all="ignore"):
            return fn()
    except OverflowError as e:
        return e


INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8"]


def edge_values(dtype):
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    return [lo - 1, lo, -1, 0, 3, hi, hi + 1, 2 ** 40, -2 ** 40]


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("f, op", [(times, np.multiply), (plus, np.add), (below, np.less),
                                   (equal, np.equal), (biggest, np.maximum)],
                         ids=["mul", "add", "less", "equal", "maximum"])
def test_python_int_argument_follows_numpy(rng, dtype, f, op):
    """Each edge value: NumPy's result, or an OverflowError where NumPy raises one."""
    info = np.iinfo(dtype)
    # the extremes and 0 are there: a wrapped argument (2**40 -> 0, hi + 1 -> lo) would
    # compare equal to one of them
    x = np.concatenate([rng.integers(info.min, int(info.max) + 1, 17, dtype=dtype),
                        np.array([info.min, info.max, 0, 1], dtype=dtype)])
    for a in edge_values(dtype):
        expected = numpy_or_error(lambda: op(x, a))
        # beyond int64 (what a kernel's integer scalar holds) jitdl raises where NumPy
        # still compares exactly: an error, never a wrong answer
        if isinstance(expected, OverflowError) or not -2 ** 63 <= a < 2 ** 63:
            with pytest.raises(OverflowError) as ei:
                f(x, a)
            assert isinstance(ei.value, jd.JitdlError)
            mentions(str(ei.value), f.name, "a", str(a), dtype)
        else:
            assert_matches(f(x, a), expected, expected.dtype)


def test_overflowing_argument_names_value_dtype_and_line():
    x = np.arange(5, dtype=np.int32)
    assert_matches(times(x, 3), x * 3, np.int32)
    with pytest.raises(OverflowError) as ei:
        times(x, 2 ** 40)
    msg = str(ei.value)
    mentions(msg, "times", "a", "1099511627776", "int32", "2147483647")
    assert "lambda i: X[i] * a" in msg                 # the definition's line
    assert "X[i] * a" in msg.splitlines()[0]
    # bigger than int64 (what the kernel's scalar holds): still an error, not a wrap
    with pytest.raises(OverflowError) as ei:
        times(np.arange(3, dtype=np.int64), 2 ** 70)
    mentions(str(ei.value), "a", str(2 ** 70), "int64")


def test_uint8_and_negative_python_int():
    u = np.arange(250, 256, dtype=np.uint8)
    assert_matches(plus(u, 5), u + 5, np.uint8)        # wraps, as NumPy does
    with pytest.raises(OverflowError) as ei:
        plus(u, -1)
    mentions(str(ei.value), "a", "-1", "uint8")


def test_python_int_inside_an_expression_is_checked_exactly(rng):
    @jd.compute
    def shifted(X, a):
        Y[i] = X[i] * (a + 1) - a * a
        return Y

    x = rng.integers(-100, 100, 11, dtype=np.int32)
    assert_matches(shifted(x, 7), x * 8 - 49, np.int32)
    with pytest.raises(OverflowError) as ei:            # a + 1 = 2**31
        shifted(x, 2 ** 31 - 1)
    mentions(str(ei.value), "a + 1", "2147483648", "int32")
    with pytest.raises(OverflowError):                  # a * a = 2**80 > int64
        shifted(x, 2 ** 40)


def test_python_floats_round_into_float32_as_in_numpy(rng):
    x = rng.standard_normal(9).astype(np.float32)
    for a in (2 ** 40, 0.1, 1e300, -1e300):
        with np.errstate(over="ignore"):
            expected = x * a
        assert_matches(times(x, a), expected.astype(F64), np.float32)


def test_literal_out_of_bounds_is_an_error_at_the_line():
    @jd.compute
    def big_literal(X):
        Y[i] = X[i] * 2**40
        return Y

    with pytest.raises(OverflowError) as ei:
        big_literal(np.arange(4, dtype=np.int32))
    assert isinstance(ei.value, jd.JitdlError)
    mentions(str(ei.value), "1099511627776", "int32")
    assert "Y[i] = X[i] * 2**40" in str(ei.value)
    # the same definition on int64 and float32 arrays is fine, as in NumPy
    x = np.arange(4, dtype=np.int64)
    assert_matches(big_literal(x), x * 2 ** 40, np.int64)
    x = np.arange(4, dtype=np.float32)
    assert_matches(big_literal(x), (x * 2 ** 40).astype(F64), np.float32)

    @jd.compute
    def minus_one(X):
        return jd.tensor(X.shape, lambda i: X[i] + (-1))

    with pytest.raises(OverflowError) as ei:
        minus_one(np.arange(4, dtype=np.uint8))
    mentions(str(ei.value), "-1", "uint8")
    assert "X[i] + (-1)" in str(ei.value)


def test_literal_comparisons_are_exact(rng):
    @jd.compute
    def in_range(X):
        Y[i] = (X[i] < 2**40) & (X[i] != -1) & (X[i] > -300)
        return Y

    for dtype in ("int8", "uint8", "int32"):
        x = rng.integers(np.iinfo(dtype).min, int(np.iinfo(dtype).max) + 1, 13, dtype=dtype)
        expected = (x < 2 ** 40) & (x != -1) & (x > -300)
        assert_matches(in_range(x), expected, np.bool_)


# ---------------------------------------------------------------------------------------
# 3. calls that do not fit the signature name the argument and list the parameters
# ---------------------------------------------------------------------------------------

@jd.compute
def scaled(X, a):
    return jd.tensor(X.shape, lambda i: X[i] * a)


@pytest.mark.parametrize("kwargs", [{"b": 3}, {"a": 2, "b": 3}])
def test_unknown_keyword_is_named_with_the_parameters(kwargs):
    x = np.arange(5.0)
    with pytest.raises(jd.ArgumentError) as ei:
        scaled(x, **kwargs)
    msg = str(ei.value)
    mentions(msg, "scaled", "b", "X", "a")
    assert "unexpected keyword argument 'b'" in msg
    assert "(X, a)" in msg
    assert "scaled(x, **kwargs)" in msg                 # the caller's line
    assert isinstance(ei.value, TypeError)


def test_two_unknown_keywords_are_both_named():
    with pytest.raises(jd.ArgumentError) as ei:
        scaled(np.arange(3.0), a=1, b=2, c=3)
    assert "unexpected keyword arguments 'b', 'c'" in str(ei.value)


def test_a_keyword_only_parameter_given_by_position_is_refused(rng, tmp_path):
    """`def f(X, *, s)` called f(x, 3.0) ran with s = 3.0 (a call of as many values as
    parameters skipped binding), where Python raises a TypeError. By keyword it works, in
    a call, with target= and in the methods that bind a call (lower, export)."""
    @jd.compute
    def scale(X, *, s):
        return jd.tensor(X.shape, lambda i: X[i] * s)
    x = rng.standard_normal(5)
    for call in (lambda: scale(x, 3.0), lambda: scale(x, 3.0, target="cpu"),
                 lambda: scale.lower(x, 3.0)):
        with pytest.raises(jd.ArgumentError) as ei:
            call()
        msg = str(ei.value)
        assert "takes 1 positional argument but 2 were given ('s' is keyword-only: " \
            "pass s=...)" in msg, msg
        assert "(X, s)" in msg and "(x, 3.0" in msg         # (the line of the call)
        assert isinstance(ei.value, TypeError)
    assert_matches(scale(x, s=3.0), x * 3.0, F64)
    assert_matches(scale(x, s=2.5, target="cpu"), x * 2.5, F64)
    assert "s" in scale.lower(x, s=2.0)
    scale.export(tmp_path / "scale.jd", x, s=1.5)
    assert_matches(jd.load(tmp_path / "scale.jd")(x, s=1.5), x * 1.5, F64)


def test_a_loaded_export_refuses_a_keyword_only_parameter_given_by_position(rng, tmp_path):
    """The export of `def f(X, *, s)` loaded and called g(x, 3.0) ran with s = 3.0 (its
    call of as many values as parameters skipped binding, as the Function's did before
    it was refused there): it is the ArgumentError (a TypeError) a Function gives."""
    @jd.compute
    def scale(X, *, s):
        return jd.tensor(X.shape, lambda i: X[i] * s)
    x = rng.standard_normal(5)
    scale.export(tmp_path / "scale.jd", x, s=1.5)
    g = jd.load(tmp_path / "scale.jd")
    with pytest.raises(jd.ArgumentError) as ei:
        g(x, 1.5)
    assert isinstance(ei.value, TypeError) and "(X, s)" in str(ei.value)
    assert_matches(g(x, s=1.5), x * 1.5, F64)


@pytest.mark.skipif(__import__("shutil").which("ld") is None,
                    reason="no `ld` on PATH: exports carry no shared library here")
def test_a_loaded_export_dlopens_its_libraries_where_the_cache_cannot_be_written(
        tmp_path, rng, monkeypatch):
    """A cache directory that cannot be written (a read-only file system) made every
    kernel of a loaded export (and every cache hit) fall back to MCJIT: the library is
    written beside the cache to be dlopened. It now goes to a private temporary directory
    then (16 kernels, read-only tmpfs: ~45-55 ms to load, ~90-130 ms by MCJIT)."""
    from jitdl.cache import export
    from jitdl.runtime import native

    @jd.compute(dynamic=True)
    def add(X, Y):
        return X + 2 * Y
    x = rng.standard_normal((3, 4))
    add.export(tmp_path / "add.jd", x, x)
    not_a_dir = tmp_path / "file"          # (writing in it fails, as in a read-only one)
    not_a_dir.write_bytes(b"")

    class Store:
        root = str(not_a_dir)
    monkeypatch.setattr(export, "default_store", lambda: Store())
    monkeypatch.setattr(native, "_loaded", {})         # (not the libraries loaded before)
    g = jd.load(tmp_path / "add.jd")
    assert {type(k.loaded) for k in g._kernels.values()} == {native.SharedLoaded}
    for xs, ys in [((3, 4), (3, 4)), ((1, 4), (5, 4)), ((0, 2), (1, 2))]:
        a, b = rng.standard_normal(xs), rng.standard_normal(ys)
        assert_matches(g(a, b), a + 2 * b, F64)


def test_a_cache_that_cannot_be_written_is_said_once_not_per_kernel(tmp_path, rng,
                                                                    monkeypatch):
    """Each kernel a cache could not store warned 'could not write to the kernel cache'
    (the text naming its entry, so Python's once-per-line filter let every one through):
    the export of a dynamic definition, which compiles a kernel per pattern of sizes 1,
    warned 16 times on a read-only cache. Now once per cache and cause."""
    import errno
    import warnings
    from jitdl.cache import store as store_module
    monkeypatch.setattr(store_module, "_warned", set())     # (what this process said)

    def refuse(self, path, data):
        raise OSError(errno.EROFS, "Read-only file system", path)
    monkeypatch.setattr(store_module.Store, "_write", refuse)

    @jd.compute(dynamic=True)
    def add(X, Y):
        return X * 3 + Y
    x = rng.standard_normal((3, 4))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        add.export(tmp_path / "add.jd", x, x)
    said = [str(w.message) for w in got if "could not write" in str(w.message)]
    assert len(said) == 1 and "Read-only file system" in said[0], said
    g = jd.load(tmp_path / "add.jd")
    a, b = rng.standard_normal((1, 4)), rng.standard_normal((6, 4))
    assert_matches(g(a, b), a * 3 + b, F64)


def test_an_export_of_a_newer_kernel_abi_is_refused_at_load(tmp_path, rng):
    """An export's kernels were loaded whatever calling convention (Signature.abi) they
    were compiled for: a file from a newer jitdl, whose kernels take their arguments
    otherwise, would have been called as this version's. It is a JitdlError at load
    naming both ABIs; this version's own files load and run."""
    import struct
    from jitdl.cache import export
    from jitdl.cache.store import pack, unpack
    from jitdl.runtime.kernel import ABI

    @jd.compute
    def twice(X):
        return X * 2
    x = rng.standard_normal(5)
    path = tmp_path / "twice.jd"
    twice.export(path, x)
    data = path.read_bytes()
    (n,) = struct.unpack_from("<Q", data, 12)
    entry = unpack(data[20:20 + n])
    assert entry.meta["signature"]["abi"] == ABI
    entry.meta["signature"]["abi"] = ABI + 1
    blob = pack(entry.meta, entry.obj, dict(entry.texts), entry.shared)
    newer = tmp_path / "newer.jd"
    newer.write_bytes(data[:12] + struct.pack("<Q", len(blob)) + blob)
    with pytest.raises(jd.JitdlError, match=rf"newer jitdl .*ABI {ABI + 1}.* runs ABI {ABI}"):
        export.load(newer)
    assert_matches(jd.load(path)(x), x * 2, F64)


def test_an_export_file_of_no_kernels_is_damaged(tmp_path):
    """A file of the export's header and a count of 0 entries (what a write cut short
    after the header leaves) loaded as `<jitdl exported kernel: 0 kernel(s)>`, a
    function of no parameters; it is now a JitdlError saying the file is damaged."""
    import struct
    path = tmp_path / "empty.jd"
    path.write_bytes(b"JITDLX01" + struct.pack("<I", 0))
    with pytest.raises(jd.JitdlError, match=r"empty\.jd is damaged: it holds no kernel"):
        jd.load(path)


def test_a_parameter_named_path_is_given_to_export_by_keyword(tmp_path, rng):
    """`def f(X, path)` exported as f.export(file, x, path=2.0) raised 'Function.export()
    got multiple values for argument 'path'': export's own file argument is positional
    only, so `path=` is the definition's, as in a call."""
    @jd.compute
    def scaled(X, path):
        return jd.tensor(X.shape, lambda i: X[i] * path)
    x = rng.standard_normal(7)
    file = tmp_path / "scaled.jdx"
    assert scaled.export(file, x, path=2.5) == file
    g = jd.load(file)
    assert_matches(g(x, path=2.5), x * 2.5, F64)
    assert_matches(g(x, 2.5), x * 2.5, F64)


def test_export_takes_its_file_as_path_where_no_parameter_has_that_name(tmp_path, rng):
    """f.export(path=file, X=x) wrote the file until the file became positional only
    (for `def f(X, path)`, above), then was a bare TypeError; a definition without a
    parameter named path takes path= as the file again, and no file at all is an
    ArgumentError that says what is missing."""
    @jd.compute
    def doubled(X):
        return jd.tensor(X.shape, lambda i: X[i] * 2.0)
    x = rng.standard_normal(5)
    file = tmp_path / "doubled.jdx"
    assert doubled.export(path=file, X=x) == file
    assert_matches(jd.load(file)(x), x * 2.0, F64)
    with pytest.raises(jd.ArgumentError, match="missing the file to write"):
        doubled.export()


def test_what_compute_cannot_take_is_said_at_the_decorator():
    """A partial, a callable object, a builtin or a @jd.compute function failed with an
    AttributeError from inside jitdl ('no attribute __code__', '__name__'), static=5 and
    name=3 with "'int' object is not iterable", and *args / **kwargs took the call's
    arrays as one tuple or dict ('argument Xs: ... got tuple')."""
    import functools

    def f(X, s):
        return X

    def star(*Xs):
        return Xs[0]

    def stars(X, **opts):
        return X

    class Callable:
        def __call__(self, X):
            return X
    for fn, kw, message in [
            (functools.partial(f, s=1.0), {},
             r"decorates a Python function \(def or lambda\), got partial"),
            (Callable(), {}, "got Callable"), (abs, {}, "got builtin_function_or_method"),
            (jd.compute(f), {}, "f is a @jd.compute function already; for a copy with "
                                "other options decorate its Python function, "
                                r"jd.compute\(f.pyfunc, ...\)"),
            (star, {}, r"star's parameter \*Xs: a definition names each of its arguments"),
            (stars, {}, r"stars's parameter \*\*opts"),
            (f, {"static": 5}, "static= must be a parameter's name or a tuple of them, got 5"),
            (f, {"name": 3}, "name= must be a str, got int 3"),
            (f, {"dynamic": 5}, "dynamic= must be True, a parameter's name, a tuple of them "
                                "or a dict of their dimensions, got 5")]:
        with pytest.raises(jd.ArgumentError, match=message) as e:
            jd.compute(fn, **kw)
        assert str(e.value).startswith("@jd.compute: ")
    jd.compute(f, static="s", name="g", dynamic=["X"])          # (these are fine)


def test_compute_takes_dynamic_none_and_sets_of_names(rng):
    """dynamic=None (a wrapper passing its own option on) and static= / dynamic= as sets of
    names worked (None as False, a set iterated) until the decorator's checks refused
    them: 'dynamic= must be True, ... got None'."""
    def total(X, axis):
        return jd.numpy.sum(X, axis=axis)
    x = rng.standard_normal((3, 5))
    for kw in [{"static": "axis", "dynamic": None}, {"static": {"axis"}},
               {"static": frozenset({"axis"}), "dynamic": frozenset({"X"})}]:
        f = jd.compute(total, **kw)
        np.testing.assert_allclose(f(x, 1), x.sum(1), rtol=1e-12)
        assert f.static == ("axis",)
    assert jd.compute(total, static={"axis"}, dynamic={"X"}).dynamic == ("X",)


def test_a_parameter_named_out_takes_the_keyword_out(rng):
    """`def f(X, out)` called f(x, out=y): the call took y as the out= array of the result
    and then said 'missing the argument out'. The definition's own parameter wins, as for
    the inspection methods' options; it works by position, by keyword and in copies."""
    @jd.compute
    def plus(X, out):
        return jd.tensor(X.shape, lambda i: X[i] + out[i])
    x, y = rng.standard_normal(5), rng.standard_normal(5)
    for f in (plus, plus.with_config()):
        assert_matches(f(x, out=y), x + y, F64)
        assert_matches(f(x, y), x + y, F64)
        assert_matches(f(X=x, out=y), x + y, F64)
    o = np.empty(5)
    assert scaled(x, 2.0, out=o) is o                     # out= of the others is unchanged


def test_an_exported_parameter_named_out_takes_the_keyword_out(tmp_path):
    """The loaded export of `def f(X, out)` took g(x, out=y) as the result's out= array and
    then said 'missing a required argument: 'out'', as the Function's call did before."""
    @jd.compute
    def plus(X, out):
        return X + out
    x, y = np.ones(3), np.arange(3.0)
    g = jd.load(plus.export(str(tmp_path / "plus.jdx"), x, y))
    np.testing.assert_array_equal(g(x, out=y), x + y)
    np.testing.assert_array_equal(g(X=x, out=y), x + y)


def test_missing_and_surplus_arguments_read_well(rng):
    x = rng.standard_normal(5)
    with pytest.raises(jd.ArgumentError) as ei:
        scaled(x)
    assert "scaled() is missing the argument 'a'; its parameters are (X, a)" in str(ei.value)
    with pytest.raises(jd.ArgumentError) as ei:
        scaled(a=2)
    assert "missing the argument 'X'" in str(ei.value)
    with pytest.raises(jd.ArgumentError) as ei:
        scaled(x, 2, 3)
    assert "takes 2 positional arguments but 3 were given" in str(ei.value)
    with pytest.raises(jd.ArgumentError) as ei:
        scaled(x, 2, a=3)
    assert "two values for argument 'a'" in str(ei.value)
    # keywords that fit still work, in any order
    assert_matches(scaled(a=2.5, X=x), x * 2.5, F64)


# ---------------------------------------------------------------------------------------
# 4. a scalar (or a 0-d array) where the definition indexes an array
# ---------------------------------------------------------------------------------------

@jd.compute
def times_te(X, a):
    return jd.tensor(X.shape, lambda i: X[i] * a[i])


@jd.compute
def times_idx(X, a):
    Y[i] = X[i] * a[i]
    return Y


@pytest.mark.parametrize("f, line", [(times_te, "lambda i: X[i] * a[i]"),
                                     (times_idx, "Y[i] = X[i] * a[i]")], ids=["te", "index"])
def test_scalar_where_an_array_is_indexed(rng, f, line):
    x = rng.standard_normal(5)
    check(f, (x, x[::-1].copy()), x * x[::-1], F64)
    for value, shown in ((3.0, "float 3.0"), (3, "int 3"), (np.float32(2.5), "float32 2.5")):
        with pytest.raises(jd.ArgumentError) as ei:
            f(x, value)
        msg = str(ei.value)
        assert f"argument 'a' was passed a scalar ({shown})" in msg
        assert "indexes it like an array" in msg and line in msg
    with pytest.raises(jd.ArgumentError) as ei:
        f(x, np.array(3.0))
    msg = str(ei.value)
    assert f"{f.name}(): argument 'a' was passed a 0-d array (shape ())" in msg
    assert "indexes it with 1 index" in msg and line in msg


# ---------------------------------------------------------------------------------------
# 5. math on whole tensors is jd.numpy's (NumPy semantics, fused); where an element is
#    needed, a whole tensor says how to write it element by element
# ---------------------------------------------------------------------------------------

def whole_tensor_definitions():
    import math
    from math import exp

    @jd.compute
    def with_np(X):
        return np.exp(X)

    @jd.compute
    def with_jd(X):
        return jd.exp(X)

    @jd.compute
    def with_math(X):
        return math.exp(X)

    @jd.compute
    def bare(X):
        return exp(X)

    return [with_np, with_jd, with_math, bare]


@pytest.mark.parametrize("k", range(4), ids=["np.exp", "jd.exp", "math.exp", "exp"])
def test_exp_of_a_whole_tensor(k, rng):
    f = whole_tensor_definitions()[k]
    x = rng.standard_normal((3, 4))
    check(f, (x,), np.exp(x), F64)


def test_suggested_rewrite_runs(rng):
    """What the message suggests is a working definition."""
    @jd.compute
    def elementwise(X):
        Y[i, j] = exp(X[i, j])
        return Y

    @jd.compute
    def te(X):
        return jd.tensor(X.shape, lambda i, j: exp(X[i, j]))

    @jd.compute
    def total(X):
        s = sum(X[i, j] for i in range(X.shape[0]) for j in range(X.shape[1]))
        return s

    x = rng.standard_normal((3, 4))
    check(elementwise, (x,), np.exp(x), F64)
    check(te, (x,), np.exp(x), F64)
    assert_matches(total(x), np.array(x.sum()), F64)


def test_whole_tensor_operators_and_functions(rng):
    @jd.compute
    def plus(X):
        return X + 1

    @jd.compute
    def maximum(X):
        return np.maximum(X, 0.0)

    @jd.compute
    def vector(v):
        return jd.sqrt(v)

    @jd.compute
    def compared(X):
        return jd.select(X > 0, 1.0, 0.0)

    x = rng.standard_normal((2, 3))
    check(plus, (x,), x + 1, F64)
    check(maximum, (x,), np.maximum(x, 0.0), F64)
    v = rng.random(4) + 0.5
    check(vector, (v,), np.sqrt(v), F64)
    assert_matches(vector(np.array(4.0)), np.array(2.0), F64)
    check(compared, (x,), np.where(x > 0, 1.0, 0.0), F64)


def test_builtin_reduction_of_a_whole_tensor_says_how():
    """Python's sum(X) iterates the first axis; jitdl asks for what is meant."""
    @jd.compute
    def total(X):
        return sum(X)

    with pytest.raises(jd.DefinitionError) as ei:
        total(np.ones((2, 3)))
    assert "`sum(X)`" in str(ei.value)
    assert "`s = sum(X[i, j] for i in range(2) for j in range(3))`" in str(ei.value)


def test_whole_tensor_inside_an_element_expression_is_an_error():
    """`X == 0` in an element expression was once a silent False (tensors compared by
    identity): now it is a whole bool tensor, which an element expression cannot use."""
    @jd.compute
    def zeros_to_one(X):
        return jd.tensor(X.shape, lambda i: jd.select(X == 0, 1.0, X[i]))

    with pytest.raises(jd.DefinitionError) as ei:
        zeros_to_one(np.zeros(3))
    assert "whole tensor" in str(ei.value) and "X[i]" in str(ei.value)

    @jd.compute
    def fixed(X):
        return jd.tensor(X.shape, lambda i: jd.select(X[i] == 0, 1.0, X[i]))

    x = np.array([0.0, 2.0, 0.0, -1.5])
    check(fixed, (x,), np.where(x == 0, 1.0, x), F64)


def test_whole_tensor_ufunc_without_source(rng):
    """A definition without source (no AST rewrite): NumPy's ufunc meets the tensor's
    __array_ufunc__, which is jd.numpy's exp."""
    namespace = {"np": np, "jd": jd}
    exec("def no_source(X):\n    return np.exp(X)\n", namespace)
    f = jd.compute(namespace["no_source"])
    x = rng.standard_normal(3)
    check(f, (x,), np.exp(x), F64)


def test_whole_tensor_arithmetic_before_jd_numpy_is_imported(tmp_path):
    """`import jitdl` leaves jd.numpy for its first use; a definition doing arithmetic on
    whole tensors in a fresh process (nothing else imported the op library) was refused
    as 'a whole tensor where jitdl needs one element'."""
    import subprocess
    import sys
    script = tmp_path / "whole.py"
    script.write_text(
        "import numpy as np\n"
        "import jitdl as jd\n"
        "\n"
        "@jd.compute\n"
        "def f(X, Y):\n"
        "    return np.exp(X + 2 * Y) - (X == Y)\n"
        "\n"
        "rng = np.random.default_rng(7)\n"
        "x, y = rng.standard_normal((2, 3, 4))\n"
        "np.testing.assert_allclose(f(x, y), np.exp(x + 2 * y) - (x == y), rtol=1e-12)\n"
        "print('ok')\n")
    env = dict(os.environ, JITDL_WARM_UP="0", JITDL_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


# ---------------------------------------------------------------------------------------
# 6. a damaged cache entry is reported once per process
# ---------------------------------------------------------------------------------------

def test_damaged_entry_warns_once_per_process(rng):
    import warnings
    from jitdl.cache.store import CacheWarning, default_store
    from jitdl.runtime import native

    def definition(X):
        Y[i] = X[i] * 3.5 + 0.25
        return Y

    store = default_store()
    if store is None:
        pytest.skip("the kernel cache is disabled")
    before = set(os.listdir(store.kernels))
    x = rng.standard_normal(6)
    check(jd.compute(definition), (x,), x * 3.5 + 0.25, F64, out=False)
    native.drain()                               # the background link rewrites the entry
    (new,) = set(os.listdir(store.kernels)) - before
    path = os.path.join(store.kernels, new)

    def damage():
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")          # Python's own once-per-line is off here
        damage()
        for _ in range(3):                        # fresh functions: the disk is asked
            y = jd.compute(definition)(x)
            assert_matches(y, x * 3.5 + 0.25, F64)
            native.drain()
            damage()                              # damaged again after each heal
    damaged = [w for w in caught if issubclass(w.category, CacheWarning)
               and "damaged cache entry" in str(w.message)]
    assert len(damaged) == 1, [str(w.message) for w in damaged]
    assert new in str(damaged[0].message)
    assert damaged[0].filename == __file__      # shown at the user's line


# ---------------------------------------------------------------------------------------
# 7. `jitdl cache list | head` stops quietly
# ---------------------------------------------------------------------------------------

def test_cache_list_into_a_closed_pipe(tmp_path):
    import subprocess
    import sys
    from jitdl.cache.store import Store
    st = Store(str(tmp_path / "cache"), 1 << 30)
    for n in range(1500):                        # ~150 KB of listing: more than a pipe holds
        key = f"{n:064x}"
        st.put(key, {"fname": f"mod.kernel_{n}", "call": "X: float64[1000, 1000]"},
               b"\0" * 16, {"loop_ir": ""})
    env = dict(os.environ, JITDL_CACHE_DIR=str(tmp_path / "cache"), JITDL_WARM_UP="0")
    p = subprocess.Popen([sys.executable, "-m", "jitdl", "cache", "list"], env=env,
                         cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.readline()                 # `| head -1`
    p.stdout.close()
    err = p.stderr.read().decode()
    code = p.wait(timeout=120)
    assert first.split()[:2] == [b"key", b"hits"]
    assert err == "", err                       # no BrokenPipeError traceback
    assert code == 141                          # as a program stopped by SIGPIPE
    # and through a shell pipe, as users type it
    r = subprocess.run(f"'{sys.executable}' -m jitdl cache list | head -2", shell=True,
                       env=env, cwd=str(tmp_path), capture_output=True, text=True,
                       timeout=120)
    assert r.stderr == "" and len(r.stdout.splitlines()) == 2, r.stderr
    # a listing that fits is unchanged, exit status 0
    r = subprocess.run([sys.executable, "-m", "jitdl", "cache", "info"], env=env,
                       cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "entries:         1500" in r.stdout, r.stdout + r.stderr


# ---------------------------------------------------------------------------------------
# 8. JITDL_LOG with an unknown topic warns once
# ---------------------------------------------------------------------------------------

def test_unknown_log_topic_warns_once(tmp_path):
    import subprocess
    import sys
    code = ("import warnings\n"
            "warnings.simplefilter('always')\n"
            "import jitdl\n"
            "from jitdl import config\n"
            "config.setup_logging(); config.setup_logging()\n"
            "import logging\n"
            "print(logging.getLogger('jitdl.cache').level)\n")
    env = dict(os.environ, JITDL_LOG="compile, Cache", JITDL_WARM_UP="0",
               JITDL_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("JITDL_LOG") == 1, r.stderr
    assert "unknown topic 'compile'" in r.stderr
    assert "the topics are: cache, schedule" in r.stderr
    assert r.stdout.strip() == "10"              # the known topic is still logged (all levels)
    env["JITDL_LOG"] = "cache"
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "JITDL_LOG" not in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------
# 9. f.timeit prints with units and is still a number of seconds
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, error, text", [
    ({"repeat": 0}, ValueError, "argument 'repeat' must be an int >= 1, got 0"),
    ({"repeat": -1}, ValueError, "argument 'repeat' must be an int >= 1, got -1"),
    ({"repeat": 2.5}, TypeError, "argument 'repeat' must be an int >= 1, got float 2.5"),
    ({"min_time": -1.0}, ValueError, "argument 'min_time' must be a number of seconds >= 0, "
                                     "got -1.0"),
    ({"min_time": "x"}, TypeError, "argument 'min_time' must be a number of seconds >= 0, "
                                   "got str 'x'")])
def test_timeit_refuses_a_count_or_a_time_it_cannot_use(kw, error, text):
    """timeit(repeat=0) was a ZeroDivisionError, repeat=-1 a nan with NumPy's 'Mean of
    empty slice' warnings, min_time='x' a TypeError about '/'."""
    x = np.arange(3.0)
    with pytest.raises(error, match=re.escape(f"{scaled.__name__}.timeit: {text}")) as e:
        scaled.timeit(x, 1.0, **kw)
    assert isinstance(e.value, jd.ArgumentError)


def test_timeit_prints_with_units_and_is_a_float(rng):
    import pickle
    x = rng.standard_normal(1000)
    t = times.timeit(x, 2.0, repeat=5, min_time=0.01)
    assert isinstance(t, float) and 0 < t < 1
    assert float(t) == t and t * 1e6 > 0 and t < 1.0 and t + t == 2 * float(t)
    assert f"{t * 1e6:.1f}"                     # formats as a float
    text = repr(t)
    assert re.fullmatch(r"\d+(\.\d+)? (ns|µs|ms|s) ± \d+(\.\d+)? (ns|µs|ms|s) "
                        r"\(median of 5 batches of \d+ calls?\)", text), text
    assert str(t) == text and f"{t}" == text
    assert len(t.times) == 5 and float(np.median(t.times)) == pytest.approx(float(t))
    assert pickle.loads(pickle.dumps(t)) == t
    from jitdl.api import Timing
    assert repr(Timing(1.234e-3, [1.2e-3, 1.234e-3, 1.3e-3], 100)) == \
        "1.23 ms ± 0.03 ms (median of 3 batches of 100 calls)"
    assert repr(Timing(2.5e-7, [2.5e-7], 1)).startswith("250 ns ± 0 ns")
    assert repr(Timing(12.5, [12.5], 1)).startswith("12.5 s")


# ---------------------------------------------------------------------------------------
# 10. globals, helpers and closure values are read when a specialisation is built
# ---------------------------------------------------------------------------------------

SCALE = 5


def _offset():
    return 1.0


@jd.compute
def scaled_by_global(X):
    Y[i] = X[i] * SCALE + _offset()
    return Y


def test_global_read_when_a_specialisation_is_built(rng):
    global SCALE, _offset
    a, b, c = rng.standard_normal(3), rng.standard_normal(4), rng.standard_normal(5)
    old_offset = _offset
    try:
        SCALE = 5
        check(scaled_by_global, (a,), a * 5 + 1, F64)
        SCALE = 7
        check(scaled_by_global, (b,), b * 7 + 1, F64)       # a new shape: the new value
        check(scaled_by_global, (a,), a * 5 + 1, F64)       # compiled: kept
        scaled_by_global.recompile()
        check(scaled_by_global, (a,), a * 7 + 1, F64)       # rebuilt: the new value

        def _offset():                                      # a helper redefined
            return 2.0
        check(scaled_by_global, (c,), c * 7 + 2, F64)
        check(scaled_by_global, (a,), a * 7 + 1, F64)
        scaled_by_global.recompile()
        check(scaled_by_global, (a,), a * 7 + 2, F64)
    finally:
        SCALE, _offset = 5, old_offset
        scaled_by_global.recompile()


def test_inspection_does_not_freeze_a_global(rng):
    """A shape traced for inspection (lower(after=)) before the global changes must not
    give its old value to the kernel compiled after the change (nor to the disk cache)."""
    global SCALE
    b = rng.standard_normal(11)
    try:
        SCALE = 5
        assert "5.0" in scaled_by_global.lower(b, after="lower")
        SCALE = 9
        check(scaled_by_global, (b,), b * 9 + 1, F64)
        f2 = jd.compute(scaled_by_global.pyfunc)            # a fresh process would ask
        check(f2, (b,), b * 9 + 1, F64)                     # the disk: the same answer
    finally:
        SCALE = 5
        scaled_by_global.recompile()


def test_a_name_a_module_only_warns_about_is_no_warning_at_compile(rng):
    """The cache key reads each name the definition uses on each module it reads:
    `str` beside `np.float64` was NumPy's FutureWarning for `np.str`, shown at jitdl's
    line, and an error (no kernel) under -W error."""
    import warnings

    @jd.compute
    def named(X):
        n, = X.shape
        return jd.tensor((n,), lambda i: X[i] * np.float64(2) + len(str(n)),
                         name="Y" + str(n))

    x = rng.standard_normal(7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(named, (x,), x * 2 + 1, F64)


def test_closure_value_read_when_a_specialisation_is_built(rng):
    def make():
        factor = 3.0

        @jd.compute
        def by_closure(X):
            return jd.tensor(X.shape, lambda i: X[i] * factor)

        def set_factor(v):
            nonlocal factor
            factor = v
        return by_closure, set_factor

    f, set_factor = make()
    a, b = rng.standard_normal(3), rng.standard_normal(4)
    check(f, (a,), a * 3, F64)
    set_factor(-2.0)
    check(f, (b,), b * -2, F64)
    check(f, (a,), a * 3, F64)
    f.recompile()
    check(f, (a,), a * -2, F64)


MOD = '''\
import os
import jitdl as jd

scale = float(os.environ["SCALE"])


def helper(v):
    return v + float(os.environ["SHIFT"])


@jd.compute
def f(X):
    Y[i] = helper(X[i] * scale)
    return Y
'''

CHILD = '''\
import json
import numpy as np
import mod
x = np.arange(4.0)
y = mod.f(x)
print(json.dumps({"y": y.tolist(), "result": mod.f.cache_info()["events"][-1]["result"]}))
'''


def test_disk_cache_key_covers_globals_in_a_fresh_process(tmp_path):
    import json
    import subprocess
    import sys
    (tmp_path / "mod.py").write_text(MOD)
    (tmp_path / "child.py").write_text(CHILD)

    def run(scale, shift):
        env = dict(os.environ, JITDL_CACHE_DIR=str(tmp_path / "cache"), SCALE=str(scale),
                   SHIFT=str(shift), JITDL_WARM_UP="0", PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run([sys.executable, "child.py"], cwd=str(tmp_path), env=env,
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.splitlines()[-1])

    x = np.arange(4.0)
    first = run(5, 0)
    assert first["result"] == "compiled" and first["y"] == (x * 5).tolist()
    again = run(5, 0)
    assert again["result"] == "hit" and again["y"] == (x * 5).tolist()
    other = run(7, 0)                                  # another global value
    assert other["result"] == "compiled" and other["y"] == (x * 7).tolist()
    shifted = run(7, 1)                                # what a helper reads
    assert shifted["result"] == "compiled" and shifted["y"] == (x * 7 + 1).tolist()
    assert run(5, 0)["y"] == (x * 5).tolist()          # each value keeps its own kernel


def _squarings(v, n):
    for _ in range(n):
        v = v * v + 0.25
    return v


@jd.compute(static=("n",))
def squarings(x, n):
    rows, m = x.shape
    k = jd.reduce_axis(m, name="k")
    y = jd.tensor((rows, m), lambda i, j: _squarings(x[i, j], n) * 2)
    s = jd.tensor((rows,), lambda i: jd.sum(_squarings(x[i, k], n), axis=k))
    # (a select's branches keep their expressions: x[i, j + 1] is read only where j + 1 < m)
    z = jd.tensor((rows, m), lambda i, j: jd.select(
        j + 1 < m, x[i, j + 1] * 3, -1.0) + _squarings(x[i, j], n))
    return y, s, z


@pytest.mark.parametrize("n", [3, 16, 40])
def test_a_value_used_twice_per_step_compiles_in_its_own_size(n, rng):
    """`v = v * v + 0.25` repeated inside one lambda: each step uses the previous value
    twice, so the expression's tree doubles with every step (14 steps compiled in 44 s).
    Large shared subexpressions become stages of their own; the results are NumPy's and
    the loop IR stays small."""
    x = rng.uniform(-0.3, 0.3, (5, 33))
    y, s, z = squarings(x, n)
    ref = _squarings(x, n)
    np.testing.assert_allclose(y, ref * 2, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(s, ref.sum(axis=1), rtol=1e-13, atol=1e-15)
    want = np.concatenate([x[:, 1:] * 3, np.full((5, 1), -1.0)], axis=1) + ref
    np.testing.assert_allclose(z, want, rtol=1e-13, atol=1e-15)
    assert len(str(squarings.lower(x, n))) < 200_000


@jd.compute
def guarded_squarings(x):
    n, m = x.shape
    k = jd.reduce_axis(m, name="k")
    w = jd.tensor((n,), lambda i: jd.sum(_squarings(x[i, k - 1], 10), axis=k, where=k >= 1))
    a = jd.tensor((n, m), lambda i, j: jd.select(
        jd.all(j >= 1, _squarings(x[i, j - 1], 10) > 0.2501), 1.0, 0.0))
    o = jd.tensor((n, m), lambda i, j: jd.select(
        jd.any(j + 1 >= m, _squarings(x[i, j + 1], 10) > 0.2501), 1.0, 0.0))
    c = jd.tensor((n, n), lambda i, j: jd.sum(_squarings(x[i, k] * x[j, k], 10), axis=k))
    return w, a, o, c


def test_guarded_shared_subexpressions_stay_guarded(rng):
    """Shared subexpressions read under a guard (a reduction's where=, the right side of a
    logical and/or) are not made stages of their own: evaluated everywhere, their reads
    went outside x (a DefinitionError on valid code, found by review); nor is one over a
    contraction's axis (an (n, n, m) intermediate, larger than anything it reads)."""
    x = rng.uniform(-0.6, 0.6, (4, 9))
    w, a, o, c = guarded_squarings(x)
    sq = _squarings(x, 10)
    np.testing.assert_allclose(w, sq[:, :-1].sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(a[:, 1:], sq[:, :-1] > 0.2501)
    np.testing.assert_array_equal(a[:, 0], 0.0)
    np.testing.assert_array_equal(o[:, :-1], sq[:, 1:] > 0.2501)
    np.testing.assert_array_equal(o[:, -1], 1.0)
    np.testing.assert_allclose(c, _squarings(x[:, None, :] * x[None, :, :], 10).sum(axis=2),
                               rtol=1e-12)
    assert "_shared" not in str(guarded_squarings.lower(x))


def test_a_definition_chaining_a_thousand_ops_compiles(rng):
    """A chain of 1100 jd.numpy calls (1100 stages, each reading the one before) once hit
    Python's recursion limit in the walk over the stage graph."""
    @jd.compute
    def drift(x):
        y = x
        for i in range(1100):
            y = y + (i % 7 - 3)
        return y

    x = rng.standard_normal(5)
    ref = x.copy()
    for i in range(1100):
        ref = ref + (i % 7 - 3)
    check(drift, (x,), ref, F64)


def test_an_expression_too_deep_to_compile_is_an_error_at_the_line(rng):
    """One element expression of thousands of levels is refused with what to do, at the
    user's line, instead of a RecursionError from inside the compiler (a deep one failed
    while tracing, a shallower one in a later pass); one just under the limit runs."""
    def steps(n):
        @jd.compute
        def damped(x):
            def body(i):
                y = x[i]
                for _ in range(n):
                    y = jd.sin(y) * 0.5 + 0.1
                return y
            return jd.tensor(x.shape, body, name="y")
        return damped

    x = rng.uniform(-1, 1, 8)
    for n in (120, 3000):
        with pytest.raises(jd.DefinitionError) as ei:
            steps(n)(x)
        msg = str(ei.value)
        assert "up to 300 levels deep" in msg and "tensor of its own" in msg, msg
        assert ei.value.loc is not None and "jd.tensor(x.shape, body" in str(ei.value.loc)
    ref = x
    for _ in range(90):
        ref = np.sin(ref) * 0.5 + 0.1
    check(steps(90), (x,), ref, F64)


def test_a_guarded_iteration_compiles_in_its_own_size(rng):
    """`z = select(z * z < 4, z * z + c, z)` repeated reads z three times a step: its tree
    triples with each step (6 steps took 40 s to compile: the shared parts were kept inline
    because a select guards them). Parts whose reads are inside their tensors everywhere
    become stages even under a guard, and the loop IR grows with the steps, not with their
    tree; parts that are not stay guarded (test_guarded_shared_subexpressions_stay_guarded)."""
    def escape(steps):
        @jd.compute
        def escape(c):
            def body(i, j):
                z = c[i, j]
                for _ in range(steps):
                    z = jd.select(z * z < 4.0, z * z + c[i, j] * 0.5, z)
                return z
            return jd.tensor(c.shape, body, name="z")
        return escape

    c = rng.uniform(-2, 2, (7, 9))
    z = c.copy()
    for _ in range(12):
        z = np.where(z * z < 4.0, z * z + c * 0.5, z)
    check(escape(12), (c,), z, F64)
    short, long = (len(str(escape(n).lower(c))) for n in (10, 20))
    assert long < 4 * short, (short, long)


def test_a_chain_of_selects_on_its_last_value_compiles_in_its_own_size(rng, monkeypatch):
    """`v = select(v % 2 == 0, v // 2, 3*v + 1)` repeated on an index: the condition and
    both arms read the last v, so each step's v is shared by three parents. The bounds
    of v were computed again under each arm's narrowed ranges, once per path (the
    narrowings by `v % 2 == 0` tell nothing of `v // 2`), and the shape-agreement walk
    went through v once per sequence of guards: 10 steps took 22 s to compile (lower
    9 s, simplify 6 s, simplify_tails 7 s), each step 2.8 times the last. 12 steps; the
    narrowings counted (about 6 a step now); every element against NumPy."""
    from jitdl.ir import analysis
    calls = []
    real = analysis._narrow

    def counted(*args):
        calls.append(args)
        return real(*args)
    monkeypatch.setattr(analysis, "_narrow", counted)

    @jd.compute
    def collatz(x):
        def body(i):
            v = i + 1
            for _ in range(12):
                v = jd.select(v % 2 == 0, v // 2, 3 * v + 1)
            return x[v % 1000] * 2.0
        return jd.tensor((1000,), body, name="y")
    x = rng.standard_normal(1000)
    v = np.arange(1, 1001)
    for _ in range(12):
        v = np.where(v % 2 == 0, v // 2, 3 * v + 1)
    np.testing.assert_array_equal(collatz(x), x[v % 1000] * 2.0)
    assert len(calls) < 20 * 12, len(calls)


def test_a_chain_of_selects_too_deep_for_the_passes_is_a_definition_error(rng):
    """A chain of selects on an index within MAX_BODY_DEPTH levels takes some passes (the
    bounds of each arm under its narrowed condition, the loop-IR printer) several calls
    a level: 95 steps (290 levels) raised a bare RecursionError from the bounds analysis.
    It is the DefinitionError of too deep an expression now, naming the depth and the
    line (30 steps under a recursion limit of 300 more frames than the test's, fast)."""
    import sys
    caller_depth, frame = 0, sys._getframe()
    while frame is not None:
        caller_depth, frame = caller_depth + 1, frame.f_back

    @jd.compute
    def collatz(x):
        def body(i):
            v = i + 1
            for _ in range(30):
                v = jd.select(v % 2 == 0, v // 2, 3 * v + 1)
            return x[v % 1000] * 2.0
        return jd.tensor((1000,), body, name="y")
    limit, said = sys.getrecursionlimit(), ("no error", "", None)
    sys.setrecursionlimit(caller_depth + 300)
    try:
        collatz(rng.standard_normal(1000))
    except Exception as e:      # (no traceback kept: pytest's of 300 frames took minutes)
        said = (type(e).__name__, str(e)[:200], getattr(e, "loc", None))
    finally:
        sys.setrecursionlimit(limit)
    kind, message, loc = said
    assert kind == "DefinitionError", said
    assert message.startswith("collatz: the expression of y nests 95 levels deep, too "
                              "deep for the compiler's passes"), message
    assert loc.filename == __file__, loc


def _index_squarings(i, n):
    for _ in range(n):
        i = (i * i + 1) % 7
    return i


@jd.compute(static=("n",))
def index_squarings(x, n):
    return jd.tensor(x.shape, lambda i: x[_index_squarings(i, n)] * 2, name="y")


def test_a_shared_index_expression_compiles_in_its_own_size(rng):
    """`v = (v * v + 1) % 7` repeated in an index: its tree doubles with every step, and
    an index reads no memory, so no step becomes a stage of its own. The bounds proof,
    the walks over stages and the weak-integer checks went over the tree: 16 steps took
    about 10 s to compile (5.1 s at 15, doubling per step; 17 took 86 s on a busy
    machine), and the CUDA source a second more; they visit each node once now (0.2 s).
    The kernel is NumPy's."""
    x = rng.standard_normal(16)
    ref = np.array([x[_index_squarings(i, 16)] * 2 for i in range(16)])
    np.testing.assert_array_equal(index_squarings(x, 16), ref)
    src = index_squarings.cuda_source(x, 16)     # (a variable per step)
    assert "jd_c14 = (((jd_c13 * jd_c13) + 1) % 7)" in src


def _collatz(v, n, where=jd.select):
    for _ in range(n):
        v = where(v % 2 == 0, v // 2, (3 * v + 1) % 64)
    return v


@jd.compute(static=("n",))
def collatz_gather(x, n):
    return jd.tensor(x.shape, lambda i: x[_collatz(i, n)] * 2, name="y")


def test_values_before_a_branch_serve_after_it_in_codegen(rng):
    """A select over `v // 2` and `(3 * v + 1) % 64` reads v three times; int64 division
    in vector code branches (all lanes exact in double, else lane by lane), and the code
    generator reused a value only in the block it was emitted in: after the first
    division v was emitted again, and its divisions again, tripling with each step (5
    steps took 11 s to compile, 6 steps 138 s and 7 steps 77 s on busy machines). A
    value emitted in a block that dominates the builder's (the branch's own block) is
    reused now (5 steps: 0.25 s). The gather reads what NumPy's does."""
    x = rng.integers(-1000, 1000, 64)
    ref = x[_collatz(np.arange(64), 5, np.where)] * 2
    np.testing.assert_array_equal(collatz_gather(x, 5), ref)


def test_a_slice_of_a_2d_argument_is_named_a_slice():
    """`X[::-1]` of a 2-d argument was reported as an array of the wrong rank (the count
    of indices was checked before their kind); a partial index says both readings."""
    @jd.compute
    def flipped(X):
        return jd.numpy.sum(X[::-1] * X, axis=0)

    with pytest.raises(jd.DefinitionError, match="slices, `...` and None are not supported"):
        flipped(np.ones((3, 4)))

    @jd.compute
    def rows(X):
        return jd.tensor((3,), lambda i: X[i] * 2)

    with pytest.raises(jd.ArgumentError, match="or index all 2: a partial index"):
        rows(np.ones((3, 4)))


@jd.compute
def doubled_plus_one(X):
    return jd.tensor(X.shape, lambda i, j: X[i, j] * 2.0 + 1.0)


def test_compute_functions_pickle(rng):
    """By name where the module has them (process pools, dask), by value through
    cloudpickle where it does not (a function made inside another), schedule and knob
    values included; the kernels are not pickled (they held ctypes pointers and a lock,
    and pickling failed before or after the first call)."""
    import pickle
    import cloudpickle
    x = rng.standard_normal((4, 6))
    for _ in range(2):                       # before and after the first call
        assert pickle.loads(pickle.dumps(doubled_plus_one)) is doubled_plus_one
        doubled_plus_one(x)

    @jd.compute
    def scaled(X, s):
        return jd.tensor(X.shape, lambda i, j: X[i, j] * s, name="Y")

    @jd.schedule(scaled)
    def _(s, cfg):
        s.parallel(s["Y"].axis[0])

    scaled(x, 3.0)
    copy = pickle.loads(cloudpickle.dumps(scaled))
    assert copy is not scaled and copy._schedules.keys() == scaled._schedules.keys()
    check(copy, (x, 3.0), x * 3.0, F64)
    assert "parallel" in str(copy.lower(x, 3.0))


def test_every_public_intrinsic_has_a_one_line_docstring():
    """help(jd.exp), help(jd.max), help(jd.float32) showed no documentation (the
    intrinsics, casts and elementwise max/min/all/any were made without docstrings)."""
    import inspect
    import pydoc
    for name in jd.__all__:
        fn = getattr(jd, name)
        if not inspect.isfunction(fn) or fn.__module__ != "jitdl.te.ops":
            continue
        doc = inspect.getdoc(fn)
        assert doc and doc.strip(), name
        if name not in ("tensor", "reduce_axis"):       # (those explain themselves at length)
            assert "\n" not in doc.strip(), (name, doc)
        assert doc.split("\n")[0] in pydoc.plain(pydoc.render_doc(fn)), name
    assert jd.exp.__doc__.startswith("jd.exp(x): e to the power x")
    assert jd.float32.__doc__ == "jd.float32(x): x cast to float32, elementwise."
    assert jd.bool_.__doc__.startswith("jd.bool_(x)")


def test_a_compute_function_reads_as_the_function_it_wraps(rng):
    """help(f) of a definition without a docstring showed the Function class's
    documentation (its __init__, __call__, every method); it shows f's own signature, and
    its docstring where it has one, as for a functools.wraps wrapper. A definition stays
    unbound as a class attribute."""
    import inspect
    import pydoc

    def total(X, axis=1):
        return X

    def doubled(X):
        """Twice X."""
        return jd.tensor(X.shape, lambda i: X[i] * 2.0)
    for fn in (total, doubled):
        f = jd.compute(fn)
        assert (f.__name__, f.__qualname__, f.__module__, f.__doc__, f.__wrapped__) == \
            (fn.__name__, fn.__qualname__, fn.__module__, fn.__doc__, fn)
        assert inspect.signature(f) == inspect.signature(fn)
        text = pydoc.plain(pydoc.render_doc(f))
        assert f"{fn.__name__}{inspect.signature(fn)}" in text, text
        assert "Function" not in text.split("\n", 1)[1] and "__call__" not in text, text
        assert (fn.__doc__ or "") in text

    class Holder:
        double = jd.compute(doubled)
    x = rng.standard_normal(5)
    check(Holder().double, (x,), x * 2.0, F64)


def test_a_parameter_named_like_a_methods_option_goes_to_the_definition(rng):
    """`def mse(pred, target)`: mse.lower(p, target=t) took t as lower's target= and said
    'missing the argument target'; so did after= of lower, repeat=/min_time= of timeit,
    optimized= of llvm_ir and tune's options. The definition's own parameter wins, as in
    a call and in config_space; the methods' help still shows their defaults."""
    import inspect
    p, t = rng.standard_normal(5), rng.standard_normal(5)
    for name in ("target", "after", "repeat", "min_time", "optimized", "seed", "trials"):
        ns = {"jd": jd}
        exec(f"def f(pred, {name}):\n"
             f"    return jd.tensor(pred.shape, lambda i: (pred[i] - {name}[i]) ** 2)\n", ns)
        f = jd.compute(ns["f"])
        check(f, (p, t), (p - t) ** 2, F64)
        assert "def jd_f(pred: float64[5]" in f.lower(p, **{name: t}), name
        assert "define" in f.llvm_ir(p, **{name: t}) and f.timeit(p, **{name: t}) > 0
        assert len(f.config_space(p, **{name: t})) >= 1
    f = jd.compute(lambda X, target: X)
    assert "target=None" in str(inspect.signature(f.lower))
    assert "repeat=7, min_time=0.05" in str(inspect.signature(f.timeit))
    assert "trials=200" in str(inspect.signature(f.tune))


@jd.compute
def tiled_rows(X):
    return jd.tensor(X.shape, lambda i, j: X[i, j] + 1.0, name="Y")


@jd.schedule(tiled_rows)
def _tiled_rows_cpu(s, cfg):
    i = s["Y"].axis[0]
    s.split(i, cfg.split("t", i))


def test_a_with_config_copy_of_a_module_function_pickles_with_its_knobs(rng):
    """A with_config copy of a module's function goes to a process pool (plain pickle) as
    that function's name and the copy's knob values: its Python function was pickled by
    name, which the module's attribute (the function itself) is not, so pickle refused it
    ("it's not the same object as test_robust.tiled_rows")."""
    import pickle
    import cloudpickle
    x = rng.standard_normal((8, 6))
    copy = tiled_rows.with_config(t=2)
    for dumps in (pickle.dumps, cloudpickle.dumps):
        back = pickle.loads(dumps(copy))
        assert back is not tiled_rows and back._fixed == {"t": 2}
        assert back.schedule_of(x).steps[0]["factor"] == 2
        check(back, (x,), x + 1.0, F64)
    assert pickle.loads(pickle.dumps(tiled_rows)) is tiled_rows


def _grow(z, steps):
    for _ in range(steps):
        z = z * z * 0.5 + z * 0.25
    return z


@jd.compute
def guarded_gather(x, idx):
    n, m = x.shape[0], idx.shape[0]
    T = jd.tensor((m,), lambda j: x[idx[j]], name="T")
    return jd.tensor((m,), lambda i: jd.select((idx[i] >= 0) & (idx[i] < n),
                                               _grow(T[i], 8), -1.0), name="y")


def test_a_guarded_data_dependent_read_stays_guarded_when_shared(rng):
    """A large shared part under a guard reads T[i], whose stage reads x[idx[j]] (checked
    at run time): made a stage computed everywhere, it raised IndexError for the indices
    the guard excludes (found by review). Such parts stay under their guard."""
    x = rng.uniform(-0.5, 0.5, 16)
    idx = np.array([0, 3, 99, 5, -7, 15, 1000000, 2])
    ok = (idx >= 0) & (idx < 16)
    check(guarded_gather, (x, idx), np.where(ok, _grow(x[np.where(ok, idx, 0)], 8), -1.0), F64)
    # under its guard the part is emitted once, not as the tree of its uses (2^8 copies of
    # T[i]: 30 s to compile): three multiplies per step
    assert str(guarded_gather.llvm_ir(x, idx, optimized=False)).count(" fmul ") <= 3 * 8


def _chain(x, steps):
    for k in range(steps):
        x = x * 0.999 + 0.001 * (k % 3)
    return x


@jd.compute
def _deep_chain(X):
    Y = jd.tensor(X.shape, name="Y")
    Y[i] = _chain(X[i], 140)
    return Y


def test_codegen_hashes_a_deep_expression_once(monkeypatch):
    """Codegen looks each subexpression up among those already emitted: hashed with the
    nodes' own __hash__, which walks the whole subtree, that was quadratic in the depth
    (a 280-level expression: 393400 hashes of Binary nodes, codegen 10x slower than
    before the lookup; found by review). The structural hash is computed once per node."""
    from jitdl.codegen import llvm as codegen
    from jitdl.ir import nodes
    calls, inside = [0], [False]
    orig_hash, orig_generate = nodes.Binary.__hash__, codegen._generate

    def counted(self):
        calls[0] += inside[0]
        return orig_hash(self)

    def generate(*args, **kwargs):
        inside[0] = True
        try:
            return orig_generate(*args, **kwargs)
        finally:
            inside[0] = False
    monkeypatch.setattr(nodes.Binary, "__hash__", counted)
    monkeypatch.setattr(codegen, "_generate", generate)
    x = np.linspace(-0.5, 0.5, 63)
    check(_deep_chain, (x,), _chain(x, 140), F64)
    assert calls[0] < 2000, calls[0]


@jd.compute
def _row_sums(X):
    m = X.shape[1]
    S[i] = sum(X[i, k] for k in range(m))
    return S


@pytest.mark.cpu_only     # (the host's views and memory; a GPU copy of a view is whole)
def test_a_broadcast_view_is_not_copied_whole():
    """Kernels read contiguous arrays, so a strided input is copied. A zero-stride view
    (np.broadcast_to) far larger than its memory: jd.numpy answers with NumPy's function,
    which reads it in place; a definition's kernel whose copy could not fit in memory
    says so, instead of meeting the system's out-of-memory killer."""
    import tracemalloc
    jnp = jd.numpy
    rng = np.random.default_rng(3)
    row = rng.standard_normal(8000)
    view = np.broadcast_to(row, (8000, 8000))               # 8000^2 float64: 488 MiB
    want = (np.sum(view), np.sum(view, axis=0), np.max(view, axis=1))
    jnp.sum(view[:2])                                       # (compiles outside the count)
    tracemalloc.start()
    try:
        got = (jnp.sum(view), jnp.sum(view, axis=0), jnp.max(view, axis=1))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    small = np.broadcast_to(row[:50], (40, 50))             # small views are copied
    check(_row_sums, (small,), small.sum(1), np.float64)
    huge = np.broadcast_to(np.float64(1.0), (10 ** 6, 10 ** 6))
    with pytest.raises(MemoryError, match=r"input X is a strided view .* than this "
                                          r"machine's memory"):
        _row_sums(huge)


_MAIN_DEF = '''
import pickle, sys
import cloudpickle, numpy as np
import jitdl as jd

@jd.compute
def twice_plus(X, s):
    Y[i, j] = X[i, j] * 2.0 + s
    return Y

@jd.compute
def names_itself(X):
    Y[i] = X[i] + 1.0
    return Y

@jd.schedule(names_itself)
def _(s, cfg):
    assert names_itself is not None

if __name__ == "__main__":
    x = np.arange(6.0).reshape(2, 3)
    assert (twice_plus(x, 1.0) == x * 2 + 1).all()
    assert pickle.loads(pickle.dumps(twice_plus)) is twice_plus   # its own __main__'s
    assert pickle.loads(pickle.dumps(names_itself)) is names_itself   # (a cycle: by name)
    open(sys.argv[1], "wb").write(pickle.dumps(twice_plus))
    open(sys.argv[2], "wb").write(cloudpickle.dumps(twice_plus))
'''

_OTHER_MAIN = '''
import pickle, sys
import numpy as np
import jitdl as jd

@jd.compute
def twice_plus(X, s):          # another definition under the same name
    Y[i, j] = X[i, j] - s
    return Y

if __name__ == "__main__":
    x = np.arange(6.0).reshape(2, 3)
    for path in sys.argv[1:]:
        f = pickle.load(open(path, "rb"))
        assert f is not twice_plus
        assert (f(x, 1.0) == x * 2 + 1).all(), f(x, 1.0)
        assert pickle.load(open(path, "rb")) is f                 # one per payload
    print("ok")
'''


def test_a_main_function_pickles_to_a_machine_without_its_file(tmp_path):
    """A @jd.compute function of `__main__` (a script, a notebook) sent to a process whose
    `__main__` is something else and where its file does not exist (a dask worker on
    another machine): it arrives by value with its source lines, through plain pickle
    and cloudpickle alike, and is not mistaken for that `__main__`'s function of the
    same name."""
    import subprocess
    import sys
    script, other = tmp_path / "defs_main.py", tmp_path / "other_main.py"
    script.write_text(_MAIN_DEF)
    other.write_text(_OTHER_MAIN)
    a, b = tmp_path / "plain.pkl", tmp_path / "cloud.pkl"
    subprocess.run([sys.executable, str(script), str(a), str(b)], check=True, timeout=300,
                   env=dict(os.environ, JITDL_CACHE_DIR=str(tmp_path / "sender")))
    script.unlink()
    run = subprocess.run([sys.executable, str(other), str(a), str(b)],    # (its own cache:
                         env=dict(os.environ, JITDL_CACHE_DIR=str(tmp_path / "receiver")),
                         capture_output=True, text=True, timeout=300)     # it compiles)
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr


_MAIN_COPY = '''
import pickle, sys
import cloudpickle, numpy as np
import jitdl as jd

@jd.compute
def scaled(X):
    return jd.tensor(X.shape, lambda i: X[i] * 2.0, name="Y")

@jd.schedule(scaled)
def _(s, cfg):
    s.split(s["Y"].axis[0], cfg.split("t", s["Y"].axis[0]))

if __name__ == "__main__":
    x = np.arange(64.0)
    tiled = scaled.with_config(t=2)
    for dumps in (pickle.dumps, cloudpickle.dumps):
        assert pickle.loads(dumps(scaled)) is scaled
        back = pickle.loads(dumps(tiled))
        assert back is not scaled, "the copy came back as the __main__ function"
        assert back.schedule_of(x).steps[0]["factor"] == 2, back.schedule_of(x).steps
    print("ok")
'''


def test_a_main_functions_with_config_copy_pickles_with_its_knob_values(tmp_path):
    """A with_config copy of a `__main__` function pickles with its knob values: it came
    back as `__main__`'s own function of that name and line (the same definition), its
    knobs at their defaults (so in a spawned process pool too)."""
    import subprocess
    import sys
    script = tmp_path / "copy_main.py"
    script.write_text(_MAIN_COPY)
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=300, env=dict(os.environ, JITDL_CACHE_DIR=str(tmp_path)))
    assert run.returncode == 0 and "ok" in run.stdout, run.stderr


def test_capture_survives_another_thread_dropping_the_linecache_entry(rng, monkeypatch):
    """Python 3.11's linecache.checkcache reads an entry after testing that it is there:
    a thread dropping a stale entry in between (a file changed while two threads captured
    functions from it) made the other's capture fail with KeyError(path)."""
    import linecache
    real, raised = linecache.checkcache, []

    def racy(filename=None):
        if not raised:
            raised.append(filename)
            raise KeyError(filename)
        return real(filename)
    monkeypatch.setattr(linecache, "checkcache", racy)

    @jd.compute
    def halve(X):
        Y[i] = X[i] * 0.5
        return Y
    x = rng.standard_normal(13)
    np.testing.assert_array_equal(halve(x), x * 0.5)
    assert raised == [__file__]


def test_float_zeros_keep_equal_expressions_apart_where_their_signs_differ():
    """Structurally equal expressions are one node to CSE unless the signs of their
    float zeros differ somewhere in them (select(c, -0.0, 0.0) is not -0.0); the sign
    check walks the two side by side, skipping parts they share."""
    from jitdl.ir.nodes import Const, Var
    from jitdl.ir.visit import NodeKey

    x = Var("v", "float64")

    def grow(zero, shared):
        v = x * Const(zero, "float64") + shared
        for _ in range(12):
            v = v * v + shared
        return v
    shared = Var("w", "float64") * Const(0.0, "float64")
    a, b, c = grow(0.0, shared), grow(0.0, shared), grow(-0.0, shared)
    assert a is not b and a == b == c
    assert NodeKey(a, {}) == NodeKey(b, {})
    assert not NodeKey(a, {}) == NodeKey(c, {}) and not NodeKey(c, {}) == NodeKey(a, {})
    assert NodeKey(c, {}) == NodeKey(grow(-0.0, shared), {})


def test_shape_agreement_of_a_long_chain_reads_each_stage_once(rng):
    """The check that arguments agree in size found the arguments under each stage by
    walking the whole chain below it: 250 chained stages took 20 s there alone. Each
    stage's arguments are found once now (counted: the stage bodies walked)."""
    from jitdl.ir import visit
    from jitdl.lower import bounds
    jnp = jd.numpy

    @jd.compute
    def chain(x, w):
        y = x
        for _ in range(250):
            y = jnp.sin(y) * w + 0.1
        return y
    x, w = rng.uniform(-2, 2, (7, 30)), rng.uniform(0, 0.5, 30)
    walks = []
    real = bounds.walk_unique

    def counted(e):
        walks.append(e)
        return real(e)
    try:
        bounds.walk_unique = counted
        out = chain(x, w)
    finally:
        bounds.walk_unique = real
    ref = x
    for _ in range(250):
        ref = np.sin(ref) * w + 0.1
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-14)
    assert len(walks) < 40 * 250, len(walks)       # (was about 250^2 per check)
    assert visit.walk_unique is real


def test_substitution_keeps_a_shared_expression_shared():
    """v = v * v + 1, 60 times, is 181 nodes shared by their parents (a tree of 2^60):
    substituting a variable in it rebuilds each shared node once and keeps it shared,
    instead of copying it once per path to it (which never ends)."""
    from jitdl.ir.nodes import Const, Var
    from jitdl.ir.visit import substitute, walk_unique
    i, j = Var("i", "int64"), Var("j", "int64")
    v = i
    for _ in range(60):
        v = v * v + Const(1, "int64")
    w = substitute(v, {i: j + Const(2, "int64")})
    assert w.a.a is w.a.b and len(list(walk_unique(w))) == len(list(walk_unique(v))) + 2
    assert any(n is j for n in walk_unique(w)) and not any(n is i for n in walk_unique(w))


def test_a_select_of_equal_arms_keeps_the_check_of_the_arm_it_picks():
    """select(s > 0, X ** K, power(X, K)) of int arrays: the arms are the same
    expression but for the check NumPy's power makes (negative integer exponents), which
    the read carries. Folded as one arm at trace time, the check was lost (s = 0
    returned [2, 0, 16]); the arms now differ and the picked one runs, check and all."""
    @jd.compute
    def pick(X, K, s: int):
        return jd.tensor(X.shape, lambda i: jd.select(s > 0, X[i] ** K[i],
                                                      jd.numpy.power(X[i], K[i])), name="Y")
    X, K = np.array([2, 3, 4], np.int64), np.array([1, -1, 2], np.int64)
    with pytest.raises(ValueError, match="negative integer powers"):
        pick(X, K, 0)
    np.testing.assert_array_equal(pick(X, K + 2, 0), np.power(X, K + 2))


def test_a_loaded_export_given_another_scalar_type_says_how_to_serve_it(tmp_path):
    """An export of `s` a Python float, called with an int or an np.float64 for it: the
    function compiles another kernel for each (an int's dtype rules are not a float's,
    np.float64 is not weak as a Python float is: X float32 * s is float64 then), so the
    loaded export cannot serve them with the float's. Its error said only what the file
    holds; it now says that the type selects the kernel and how to serve it (convert, or
    export from an example of that type), and the export of an int serves ints as the
    function does."""
    @jd.compute
    def scale(X, s):
        return jd.tensor(X.shape, lambda i: X[i] * s + s / 4)
    rng = np.random.default_rng(11)
    x = rng.standard_normal(7)
    g = jd.load(scale.export(str(tmp_path / "f.jdx"), x, 2.5))
    np.testing.assert_allclose(g(x, 1.75), x * 1.75 + 1.75 / 4, rtol=1e-12)
    for s, conv, kind in [(3, "float", "an int"), (np.float64(3.5), "float", "a float64"),
                          (True, "float", "a bool")]:
        scale(x, s)                                 # (the function: a kernel of its own)
        with pytest.raises(jd.ArgumentError) as e:
            g(x, s)
        assert str(e.value).startswith(
            f"scale(): no exported kernel for arguments (float64[7], {type(s).__name__}): "
            f"argument 's' is {type(s).__name__}, the nearest exported kernel takes float; "
            f"the file holds: (float64[7], float); a scalar's type selects its kernel (scale "
            f"compiles one per type, as their dtype rules differ): pass {conv}(s), or export "
            f"from an example where 's' is {kind} too"), str(e.value)
    assert len(scale.cache_info()["events"]) == 4
    h = jd.load(scale.export(str(tmp_path / "i.jdx"), x, 2))
    got, want = h(x, 3), scale(x, 3)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, x * 3 + 3 / 4, rtol=1e-12)
    with pytest.raises(jd.ArgumentError, match=r"pass int\(s\), or export from an example "
                       r"where 's' is a float too"):
        h(x, 2.5)
