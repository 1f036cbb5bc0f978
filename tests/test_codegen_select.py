"""Selects whose condition is a conjunction of bounds, over reads valid only under it.

Padding-like definitions `select(all(i - p >= 0, i - p < h, ...), X[i - p, ...], fill)`
become vector code whose reads are masked loads. In the tail block past a bound the mask
of whole SIMD registers folds to constant false; LLVM 22's X86 backend loaded such a part
of a masked load unmasked when it split a wide masked load into registers itself (wrong
values, reads out of bounds). jitdl.codegen.vector emits masked loads one host register
at a time. Checked here against NumPy on sizes below, at and above multiples of the 8 and
16 lane blocks, for conditions on the rows, the columns, both, and with a read in the
condition (the vector form of a short-circuit `and`).
"""
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

import jitdl as jd
from _check import check
from jitdl.codegen import llvm as codegen
from jitdl.config import settings
from jitdl.target.cpu import host

DTYPES = [np.float32, np.float64, np.int32]


def data(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-1000, 1000, shape).astype(dtype)


def fill_of(dtype):
    """A fill value no element of the data equals (a lane read as 0 would not pass)."""
    return -7.5 if np.dtype(dtype).kind == "f" else -7777


def make_pad4(p, fill):
    @jd.compute
    def pad4(X):
        h, w = X.shape
        return jd.tensor((h + 2 * p, w + 2 * p), lambda i, j: jd.select(
            jd.all(i - p >= 0, i - p < h, j - p >= 0, j - p < w), X[i - p, j - p], fill))
    return pad4


def make_pad_rows(p, fill):
    @jd.compute
    def pad_rows(X):
        h, w = X.shape
        return jd.tensor((h + 2 * p, w), lambda i, j: jd.select(
            jd.all(i - p >= 0, i - p < h), X[i - p, j], fill))
    return pad_rows


def make_pad_cols(p, fill):
    @jd.compute
    def pad_cols(X):
        h, w = X.shape
        return jd.tensor((h, w + 2 * p), lambda i, j: jd.select(
            jd.all(j - p >= 0, j - p < w), X[i, j - p], fill))
    return pad_cols


def make_shift(p, fill):
    """Two conjuncts, one on each index: the lower bounds only."""
    @jd.compute
    def shift(X):
        h, w = X.shape
        return jd.tensor((h + p, w + p), lambda i, j: jd.select(
            jd.all(i - p >= 0, j - p >= 0), X[i - p, j - p], fill))
    return shift


def make_pad_positive(p, fill):
    """A read in the condition: valid only after the bounds before it hold."""
    @jd.compute
    def pad_positive(X):
        h, w = X.shape
        return jd.tensor((h, w + 2 * p), lambda i, j: jd.select(
            jd.all(j - p >= 0, j - p < w, X[i, j - p] > 0), X[i, j - p], fill))
    return pad_positive


def ref_pad(x, rows, cols, fill):
    return np.pad(x, (rows, cols), constant_values=fill)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [16, 32, 40, 44, 120, 124, 127, 128, 129, 136, 160, 200])
def test_pad_by_a_four_way_conjunction(rng, dtype, n):
    fill = fill_of(dtype)
    x = data(rng, (n, n), dtype)
    check(make_pad4(8, fill), (x,), ref_pad(x, (8, 8), (8, 8), fill), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,p", [((5, 120), 8), ((7, 128), 3), ((3, 57), 16)])
def test_pad_rows_only(rng, dtype, shape, p):
    fill = fill_of(dtype)
    x = data(rng, shape, dtype)
    check(make_pad_rows(p, fill), (x,), ref_pad(x, (p, p), (0, 0), fill), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,p", [((5, 128), 8), ((4, 44), 8), ((4, 120), 4),
                                     ((3, 31), 1), ((3, 248), 8)])
def test_pad_columns_only(rng, dtype, shape, p):
    fill = fill_of(dtype)
    x = data(rng, shape, dtype)
    check(make_pad_cols(p, fill), (x,), ref_pad(x, (0, 0), (p, p), fill), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,p", [((9, 128), 8), ((6, 24), 8), ((6, 100), 5)])
def test_shift_by_lower_bounds(rng, dtype, shape, p):
    fill = fill_of(dtype)
    x = data(rng, shape, dtype)
    check(make_shift(p, fill), (x,), ref_pad(x, (p, 0), (p, 0), fill), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 128), (4, 44), (4, 117)])
def test_read_in_the_conjunction(rng, dtype, shape):
    fill = fill_of(dtype)
    x = data(rng, shape, dtype)
    padded = ref_pad(x, (0, 0), (8, 8), fill)
    check(make_pad_positive(8, fill), (x,), np.where(padded > 0, padded, fill), dtype)


def test_pad_of_a_large_array(rng):
    """At 1024x1024 the unmasked reads of the tail once ran off the array (a crash)."""
    x = data(rng, (1024, 1024), np.float32)
    check(make_pad4(8, 0.0), (x,), np.pad(x, 8), np.float32, out=False)


MASKED_LOAD = re.compile(r"call <(\d+) x (float|double|i\d+)> @\"?llvm\.masked\.load")


@pytest.mark.parametrize("width", [16, 32, 64], ids=["sse", "avx", "avx512"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int8])
def test_masked_loads_fit_one_host_register(rng, monkeypatch, width, dtype):
    """Whatever width the blocks are sized for, no masked load is wider than a register of
    the host, so LLVM never splits one."""
    monkeypatch.setattr(codegen, "_HOST_VECTOR_BYTES", width)
    monkeypatch.setattr(settings, "cache", False)
    f = make_pad4(8, 3)
    x = data(rng, (128, 128), dtype) if dtype != np.int8 else \
        rng.integers(-100, 100, (128, 128)).astype(dtype)
    check(f, (x,), ref_pad(x, (8, 8), (8, 8), 3), dtype)
    text = str(f.llvm_ir(x, optimized=False))
    loads = [int(n) for n, _ in MASKED_LOAD.findall(text)]
    assert loads, "expected masked loads in the vector code"
    assert max(loads) <= host().lanes(np.dtype(dtype).itemsize), loads
    assert re.search(r"<(\d+) x", text) and "vectorized j: vector code" in text


@settings_h(max_examples=40, deadline=None, derandomize=True,
            suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 40), w=st.integers(1, 20).map(lambda k: 8 * k) | st.integers(1, 140),
       pads=st.tuples(*[st.sampled_from([0, 4, 8]) | st.integers(0, 12)] * 4),
       extra=st.sampled_from(["none", "positive", "diagonal"]),
       dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**32 - 1))
def test_fuzz_padding_conjunctions(h, w, pads, extra, dtype, seed):
    """Random pads before and after each axis (the bounds of a zero pad are left out of
    the conjunction), optionally with a read or an index comparison as a further
    conjunct; widths and pads favour multiples of 4 and 8, where blocks end at bounds."""
    top, bottom, left, right = pads
    fill = fill_of(dtype)
    x = data(np.random.default_rng(seed), (h, w), dtype)

    @jd.compute
    def pad_fuzz(X):
        def value(i, j):
            conds = [c for c, pad in ((i - top >= 0, top), (i - top < h, bottom),
                                      (j - left >= 0, left), (j - left < w, right)) if pad]
            if extra == "positive":
                conds.append(X[i - top, j - left] > 0)
            elif extra == "diagonal":
                conds.append(i + j < (h + w) // 2 + 3)
            cond = jd.all(*conds) if len(conds) > 1 else conds[0] if conds else None
            read = X[i - top, j - left]
            return read if cond is None else jd.select(cond, read, fill)
        return jd.tensor((h + top + bottom, w + left + right), value)

    padded = ref_pad(x, (top, bottom), (left, right), fill)
    inside = ref_pad(np.ones((h, w), bool), (top, bottom), (left, right), False)
    if extra == "positive":
        inside &= padded > 0
    elif extra == "diagonal":
        i, j = np.indices(padded.shape)
        inside &= i + j < (h + w) // 2 + 3
    check(pad_fuzz, (x,), np.where(inside, padded, fill), dtype, out=False)


GUARD_PAGE = r'''
import ctypes, mmap, sys
import numpy as np
import jitdl as jd

@jd.compute(dynamic=True)
def first(X, Y):        # X[i] read only where i < n: the arm's read is the condition's, guarded
    return jd.tensor(Y.shape, lambda i: X[i] if i < X.shape[0] and X[i] > 0 else 0.0,
                     name="O")

@jd.compute(dynamic=True)
def chained(X, Y):
    return jd.tensor(Y.shape, lambda i: 1.0 if i < X.shape[0] and X[i] > 0 and X[i] < 5
                     else 0.0, name="O")

page = mmap.PAGESIZE
m = mmap.mmap(-1, 2 * page)
buf = np.frombuffer(m, np.uint8)
if ctypes.CDLL(None).mprotect(ctypes.c_void_p(buf.ctypes.data + page), page, 0) != 0:
    sys.exit(3)
x = buf[page - 32:page].view(np.float64)     # the last 4 doubles before a guard page
x[:] = [1, -1, 2, 7]
print(first(x, np.zeros(13)).tolist())
print(chained(x, np.zeros(13)).tolist())
'''


def test_reads_guarded_inside_a_condition_stay_guarded_in_its_arms(tmp_path):
    """A read on the right of `and` (or in a select's arms) runs only where the left side
    holds: a select arm reading the same element must not be loaded unguarded (found by
    review: a vector loop read past the array into an unmapped page)."""
    import subprocess
    import sys
    script = tmp_path / "guard_page.py"         # (a definition's source is read from a file)
    script.write_text(GUARD_PAGE)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    if r.returncode == 3:
        pytest.skip("mprotect is not available here")
    assert r.returncode == 0, r.stderr[-2000:]
    first, chained = (eval(line) for line in r.stdout.split("\n")[:2])   # noqa: S307
    assert first == [1.0, 0.0, 2.0, 7.0] + [0.0] * 9
    assert chained == [1.0, 0.0, 1.0, 0.0] + [0.0] * 9


@pytest.mark.parametrize("n", [1, 33, 70001])
def test_any_and_all_reduce_without_a_branch_per_element(rng, n):
    """any/all's accumulator on the left of or/and tells the bounds proof nothing, so the
    element on the right is read in every lane: no branch per element (which kept the
    loop scalar: any of 1e7 bools 7x slower than NumPy's), NumPy's answers."""
    jnp = jd.numpy
    for p in (0.0, 0.5, 1.0):
        for a in (rng.random(n) < p, rng.random((3, n)) < p):
            for axis in (None, -1, 0):
                assert np.array_equal(jnp.any(a, axis=axis), np.any(a, axis=axis))
                assert np.array_equal(jnp.all(a, axis=axis), np.all(a, axis=axis))
    b = rng.random(n) < 0.5
    for fn in (jnp.any, jnp.all):
        f = jd.compute(lambda X: fn(X))
        assert "sc.rhs" not in str(f.llvm_ir(b, optimized=False))


@jd.compute
def masked_gather(M, A, idx):       # A[idx[i]] checked at run time, read only where M[i]
    return jd.tensor(M.shape, lambda i: M[i] and A[idx[i]] > 0, name="O")


def test_a_checked_read_stays_behind_a_plain_read_on_the_left():
    """M[i] and A[idx[i]]: the gather is checked at run time and runs only where M[i]
    holds (an index out of range elsewhere is never read), as before."""
    m = np.array([True, False, True, False] * 5)
    a = np.arange(-3.0, 7.0)
    idx = np.where(m, np.arange(20) % 10, 1000)
    want = m & (a[np.where(m, idx, 0)] > 0)
    assert masked_gather(m, a, idx).tolist() == want.tolist()
    with pytest.raises(IndexError):
        masked_gather(m, a, np.where(m, 1000, 0))
