"""Vector code for vectorized (and unrolled stride-1) loops, against NumPy.

`s.vectorize(loop)` makes jitdl.codegen emit LLVM vector instructions for the loop when
its body allows it (jitdl/codegen/vector.py), else a scalar loop that asks LLVM to
vectorise it. Every test runs on fresh random inputs (never zeros) against a float64
NumPy reference, on extents that leave partial blocks and partitioned tails, and checks
in the unoptimised LLVM IR that the loop really became vector code (or why it did not).
Each test runs for three SIMD widths (SSE, AVX, AVX-512 sized blocks): the code is valid
LLVM on any host, which splits or widens the vectors it cannot hold in one register.
"""
import math
import re

import numpy as np
import pytest

import jitdl as jd
from _check import check
from jitdl.codegen import llvm as codegen
from jitdl.config import settings

F32, F64 = np.float32, np.float64
VEC = re.compile(r"<\d+ x (float|double|i\d+)>")


@pytest.fixture(params=[16, 32, 64], ids=["sse", "avx", "avx512"])
def width(request, monkeypatch):
    """Code generated for a host with this SIMD width in bytes (no disk cache: a kernel
    built for one width must not serve another)."""
    monkeypatch.setattr(codegen, "_HOST_VECTOR_BYTES", request.param)
    monkeypatch.setattr(settings, "cache", False)
    return request.param


def ir_of(f, *args):
    return str(f.llvm_ir(*args, optimized=False))


def assert_vector(f, args, loop, kind="vectorized"):
    text = ir_of(f, *args)
    assert re.search(rf"; jitdl: {kind} {loop}: vector code", text), \
        [ln for ln in text.splitlines() if "jitdl:" in ln]
    assert VEC.search(text)
    return text


def rows(f, stage="Y", split=None):
    """Schedule: vectorize the innermost loop of `stage` (after a split, its inner part)."""
    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        *_, j = s[stage].axis
        if split:
            _, j = s.split(j, split)
        s.vectorize(j)
    return f


def normal(rng, shape, dtype=F64):
    return rng.standard_normal(shape).astype(dtype)


def ints(rng, shape, dtype, lo=-50, hi=50):
    info = np.iinfo(dtype)
    return rng.integers(max(lo, info.min), min(hi, info.max), shape).astype(dtype)


# ---------------------------------------------------------------------------------------
# dtypes, extents, blocks and tails
# ---------------------------------------------------------------------------------------

def make_muladd():
    @jd.compute
    def muladd(X, Z):
        return jd.tensor(X.shape, lambda i, j: X[i, j] * Z[i, j] + X[i, j] - Z[i, j],
                         name="Y")
    return muladd


@pytest.mark.parametrize("dtype", [F32, F64, np.int32, np.int64, np.int16, np.uint8])
@pytest.mark.parametrize("m,split", [(203, None), (37, 8), (5, None), (2, None)])
def test_elementwise_dtypes(rng, width, dtype, m, split):
    f = rows(make_muladd(), split=split)
    if np.dtype(dtype).kind == "f":
        x, z = normal(rng, (3, m), dtype), normal(rng, (3, m), dtype)
        expected = x.astype(F64) * z + x - z
        tol = (1e-5, 1e-5) if dtype == F32 else (1e-12, 1e-12)     # (cancellation)
    else:
        tol = (None, 0)
        x, z = ints(rng, (3, m), dtype), ints(rng, (3, m), dtype)
        with np.errstate(over="ignore"):
            expected = x * z + x - z            # wraps like NumPy
    check(f, (x, z), expected, dtype, *tol)
    assert_vector(f, (x, z), "j_i" if split else "j")


def test_bool_logic(rng, width):
    @jd.compute
    def logic(A, B, X):
        n, m = X.shape
        Y[i, j] = (A[i, j] & ~B[i, j]) | (X[i, j] > 0.5)
        return Y
    rows(logic)
    a, b = rng.random((4, 45)) > 0.5, rng.random((4, 45)) > 0.3
    x = normal(rng, (4, 45))
    check(logic, (a, b, x), (a & ~b) | (x > 0.5), np.bool_)
    assert_vector(logic, (a, b, x), "j")


def test_loop_variables_as_values(rng, width):
    @jd.compute
    def positions(X):
        n, m = X.shape
        Y[i, j] = X[i, j] + j * 0.5 - i
        K = jd.tensor((n, m))
        K[i, j] = i * m + j
        return Y, K
    rows(positions)
    rows(positions, "K")
    x = normal(rng, (5, 77))
    y, k = positions(x)
    np.testing.assert_allclose(y, x + np.arange(77) * 0.5 - np.arange(5)[:, None], 1e-12)
    np.testing.assert_array_equal(k, np.arange(5 * 77).reshape(5, 77))
    assert_vector(positions, (x,), "j")


# ---------------------------------------------------------------------------------------
# selects, comparisons, casts, integer division
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [F32, F64])
def test_selects_and_comparisons(rng, width, dtype):
    @jd.compute
    def sel(X, Z, K):
        n, m = X.shape
        Y[i, j] = X[i, j] * 2.0 if X[i, j] > Z[i, j] else Z[i, j] - 1.0
        W[i, j] = jd.select(jd.all(X[i, j] >= -0.5, K[i, j] != 2), X[i, j], -X[i, j])
        B[i, j] = (X[i, j] <= Z[i, j]) ^ (K[i, j] == 1)
        return Y, W, B
    for name in "YWB":
        rows(sel, name)
    x, z = normal(rng, (3, 70), dtype), normal(rng, (3, 70), dtype)
    k = rng.integers(0, 4, (3, 70)).astype(np.int32)
    y, w, b = sel(x, z, k)
    xd, zd = x.astype(F64), z.astype(F64)
    np.testing.assert_allclose(y, np.where(xd > zd, 2 * xd, zd - 1), 1e-6)
    np.testing.assert_allclose(w, np.where((xd >= -0.5) & (k != 2), xd, -xd), 1e-6)
    np.testing.assert_array_equal(b, (x <= z) ^ (k == 1))
    assert_vector(sel, (x, z, k), "j")


def test_casts(rng, width):
    @jd.compute
    def casts(X, K):
        n, m = X.shape
        A[i, j] = jd.int32(X[i, j] * 10.0)
        B[i, j] = jd.float32(K[i, j]) * 0.5
        C[i, j] = jd.float64(X[i, j] > 0.0) + jd.float64(K[i, j] != 0)
        return A, B, C
    for name in "ABC":
        rows(casts, name)
    x, k = normal(rng, (3, 41)), ints(rng, (3, 41), np.int64, -3, 3)
    a, b, c = casts(x, k)
    np.testing.assert_array_equal(a, (x * 10).astype(np.int32))
    np.testing.assert_allclose(b, k.astype(np.float32) * 0.5)
    np.testing.assert_array_equal(c, (x > 0).astype(F64) + (k != 0))
    assert_vector(casts, (x, k), "j")


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_integer_division_and_modulo(rng, width, dtype):
    @jd.compute
    def divmod_(X, Z):
        n, m = X.shape
        Q[i, j] = X[i, j] // Z[i, j]
        R[i, j] = X[i, j] % Z[i, j]
        return Q, R
    rows(divmod_, "Q")
    rows(divmod_, "R")
    lo = 0 if dtype == np.uint8 else -40
    x, z = ints(rng, (4, 53), dtype, lo, 40), ints(rng, (4, 53), dtype, lo, 7)
    z[0, :5] = 0                   # lanes dividing by zero give 0, as NumPy does
    q, r = divmod_(x, z)
    with np.errstate(divide="ignore"):
        np.testing.assert_array_equal(q, x // z)
        np.testing.assert_array_equal(r, x % z)
    assert_vector(divmod_, (x, z), "j")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32])
def test_narrow_integer_division_in_floating_point_is_exact(rng, width, dtype):
    """Vector lanes of int32 and narrower divide in double (int16 and narrower in float),
    floored: x86 has no vector integer division. Every pair of int8 and uint8 values,
    int16 and int32 at random and at the edges (MIN // -1 wraps to MIN, as NumPy's does;
    division by 0 gives 0), against NumPy."""
    @jd.compute
    def divmod_(X, Z):
        n, = X.shape
        Q[i] = X[i] // Z[i]
        R[i] = X[i] % Z[i]
        return Q, R
    rows(divmod_, "Q")
    rows(divmod_, "R")
    info = np.iinfo(dtype)
    if info.bits == 8:
        x, z = (g.ravel().astype(dtype) for g in np.meshgrid(
            np.arange(info.min, info.max + 1), np.arange(info.min, info.max + 1)))
    else:
        edge = np.array([info.min, info.min + 1, -7, -1, 0, 1, 2, 7, info.max - 1, info.max],
                        dtype)
        x = np.concatenate([rng.integers(info.min, info.max, 50001, dtype, True),
                            np.repeat(edge, len(edge))])
        z = np.concatenate([rng.integers(info.min, info.max, 50001, dtype, True) >>
                            rng.integers(0, info.bits - 1, 50001).astype(dtype),
                            np.tile(edge, len(edge))])
    q, r = divmod_(x, z)
    with np.errstate(divide="ignore", over="ignore"):
        np.testing.assert_array_equal(q, np.floor_divide(x, z))
        np.testing.assert_array_equal(r, np.remainder(x, z))
    assert_vector(divmod_, (x, z), "i")


@pytest.mark.parametrize("scale", ["small", "wide", "mixed"])
def test_int64_division_in_double_where_every_lane_is_small(rng, width, scale):
    """int64 vector lanes divide in double where every dividend of the vector is below
    2**51 in magnitude (a divisor beyond that clamped), else lane by lane: dividends at
    random below 2**51, over all of int64, and mixed in one vector; divisors at random,
    at the edges (0, -1, +-2**51, MIN, MAX) and at the clamp's edge (a dividend of
    -2**51 + 1 over -2**51 - 5: 0, where a dividend of -2**51 would give 1 in double)."""
    @jd.compute
    def divmod_(X, Z):
        n, = X.shape
        Q[i] = X[i] // Z[i]
        R[i] = X[i] % Z[i]
        return Q, R
    info = np.iinfo(np.int64)
    edge = np.array([info.min, info.min + 1, -2 ** 51 - 5, -2 ** 51, -2 ** 51 + 1, -7, -1,
                     0, 1, 2, 7, 2 ** 51 - 1, 2 ** 51, 2 ** 53 + 1, info.max])
    n = 20003
    big = rng.integers(info.min, info.max, n, np.int64, True)
    x = rng.integers(-2 ** 51 + 1, 2 ** 51, n) if scale == "small" else big
    if scale == "mixed":
        x = np.where(rng.random(n) < 0.9, x >> 13, x)
    x = np.concatenate([x, np.repeat(edge, len(edge))])
    z = np.concatenate([np.where(rng.random(n) < 0.5, rng.integers(-100, 100, n),
                                 big >> rng.integers(0, 63, n)), np.tile(edge, len(edge))])
    q, r = divmod_(x, z)
    with np.errstate(divide="ignore", over="ignore"):
        np.testing.assert_array_equal(q, np.floor_divide(x, z))
        np.testing.assert_array_equal(r, np.remainder(x, z))
    for c in (7, -3, 2 ** 51, -2 ** 51 - 5, info.min):
        with np.errstate(divide="ignore", over="ignore"):
            np.testing.assert_array_equal(jd.numpy.floor_divide(x, c), np.floor_divide(x, c))
            np.testing.assert_array_equal(jd.numpy.remainder(x, c), np.remainder(x, c))
    assert_vector(divmod_, (x, z), "i")


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64])
def test_integer_division_by_a_power_of_two_shifts(rng, width, dtype):
    """Floor division and modulo by a constant power of two (1, 8, 16, the largest the
    dtype holds) are a shift and a mask, not the conversion to floating point and back
    (nor lane-by-lane division) of other divisors: the flattened output position of a
    conv3d's im2col, o // 64, o // 8 % 8, o % 8, took most of its packing. Values over
    the whole range, negative ones floored as NumPy floors them."""
    info = np.iinfo(dtype)
    top = 2 ** (info.bits - 1 - (info.min < 0))

    @jd.compute
    def divmod_(X):
        n, = X.shape
        Q[i] = X[i] // 8 + X[i] // 16 + X[i] // 1 + X[i] // top
        R[i] = X[i] % 8 + X[i] % 16 + X[i] % 1 + X[i] % top
        return Q, R
    rows(divmod_, "Q")
    rows(divmod_, "R")
    x = np.concatenate([rng.integers(info.min, info.max, 5003, dtype, True),
                        np.array([info.min, info.min + 1, -17, -16, -9, -8, -1, 0, 1, 7, 8,
                                  info.max], np.int64).clip(info.min).astype(dtype)])
    c = [np.array(v, dtype) for v in (8, 16, 1, top)]
    q, r = divmod_(x)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(q, sum(x // v for v in c).astype(dtype))
        np.testing.assert_array_equal(r, sum(x % v for v in c).astype(dtype))
    text = assert_vector(divmod_, (x,), "i")
    assert ("ashr" if info.min < 0 else "lshr") in text
    assert not re.search(r"\b(fdiv|sdiv|udiv|sitofp|uitofp)\b", text), text


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.int16])
def test_integer_bitwise_pow_and_intrinsics(rng, width, dtype):
    @jd.compute
    def bits(X, Z):
        n, m = X.shape
        A[i, j] = ((X[i, j] & Z[i, j]) ^ (X[i, j] << 2)) | (Z[i, j] >> 1)
        B[i, j] = X[i, j] ** 3 + jd.min(X[i, j], Z[i, j]) - jd.max(X[i, j], Z[i, j])
        C[i, j] = jd.abs(X[i, j]) + jd.sign(Z[i, j])
        return A, B, C
    for name in "ABC":
        rows(bits, name)
    lo = 0 if np.dtype(dtype).kind == "u" else -9
    x, z = ints(rng, (3, 45), dtype, lo, 9), ints(rng, (3, 45), dtype, lo, 100)
    a, b, c = bits(x, z)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(a, ((x & z) ^ (x << 2)) | (z >> 1))
        np.testing.assert_array_equal(b, x ** 3 + np.minimum(x, z) - np.maximum(x, z))
        np.testing.assert_array_equal(c, np.abs(x) + np.sign(z))
    assert_vector(bits, (x, z), "j")


# ---------------------------------------------------------------------------------------
# math on vectors
# ---------------------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])
UNARY = {
    "exp": (jd.exp, np.exp, (-80, 80)), "log": (jd.log, np.log, (0.01, 50)),
    "sqrt": (jd.sqrt, np.sqrt, (0, 9)), "rsqrt": (jd.rsqrt, lambda x: 1 / np.sqrt(x), (0.1, 9)),
    "tanh": (jd.tanh, np.tanh, (-5, 5)), "sigmoid": (jd.sigmoid, lambda x: 1 / (1 + np.exp(-x)),
                                                     (-9, 9)),
    "erf": (jd.erf, _erf, (-3, 3)), "sin": (jd.sin, np.sin, (-6, 6)),
    "cos": (jd.cos, np.cos, (-6, 6)), "tan": (jd.tan, np.tan, (-1.2, 1.2)),
    "atan": (jd.atan, np.arctan, (-9, 9)), "abs": (jd.abs, np.abs, (-5, 5)),
    "floor": (jd.floor, np.floor, (-5, 5)), "ceil": (jd.ceil, np.ceil, (-5, 5)),
    "round": (jd.round, np.round, (-5, 5)), "trunc": (jd.trunc, np.trunc, (-5, 5)),
    "sign": (jd.sign, np.sign, (-2, 2)), "log1p": (jd.log1p, np.log1p, (-0.9, 9)),
    "expm1": (jd.expm1, np.expm1, (-3, 3)),
}


@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("name", list(UNARY))
def test_unary_math(rng, width, name, dtype):
    fn, ref, (lo, hi) = UNARY[name]

    @jd.compute
    def unary(X):
        return jd.tensor(X.shape, lambda i, j: fn(X[i, j]), name="Y")
    rows(unary)
    x = rng.uniform(lo, hi, (3, 67)).astype(dtype)
    if name == "round":
        x[0, :4] = [0.5, 1.5, -2.5, 2.5]          # half to even
    rtol = 2e-6 if dtype == F32 else 1e-12
    check(unary, (x,), ref(x.astype(F64)), dtype, rtol, 1e-7 if dtype == F32 else 1e-14)
    assert_vector(unary, (x,), "j")


def _ulps(got, ref):
    """Error of float32 results in units in the last place of the float64 reference."""
    spacing = np.spacing(np.abs(ref.astype(F32))).astype(F64)
    ok = np.isfinite(ref)
    return (np.abs(got.astype(F64) - ref)[ok] / spacing[ok]).max()


@pytest.mark.parametrize("name", ["log", "tanh", "exp"])
def test_float32_inline_math_accuracy(rng, width, name):
    """float32 exp, log and tanh are inline polynomials (jitdl/codegen/mathlib.py), so
    they run on vectors: within 2 ulp of float64 NumPy everywhere, special values exact."""
    fn, ref, _ = UNARY[name]

    @jd.compute
    def unary(X):
        return jd.tensor(X.shape, lambda i: fn(X[i]), name="Y")
    rows(unary)
    if name == "log":       # every positive float: denormals, huge, near 1
        x = rng.integers(1, 0x7F800000, 200_003, dtype=np.int64).astype(np.uint32).view(F32)
    else:
        x = np.concatenate([rng.uniform(-12, 12, 100_000), rng.uniform(-1, 1, 100_000),
                            rng.standard_normal(3) * 1e-30]).astype(F32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -1.0, 1.0, 1e-45, 0.625,
                        -0.625, 88.7, -104.0, 3.4e38], F32)
    with np.errstate(all="ignore"):
        assert _ulps(unary(x), ref(x.astype(F64))) <= 2.0
        got, want = unary(special), ref(special.astype(F64)).astype(F32)
    np.testing.assert_allclose(got, want, rtol=3e-7, atol=0)       # NaNs where NumPy's
    num = ~np.isnan(want)       # (a NaN's sign is not NumPy's to keep: its AVX-512 log
    np.testing.assert_array_equal(np.signbit(got[num]), np.signbit(want[num]))  # gives -NaN)
    assert_vector(unary, (x,), "i")


@pytest.mark.parametrize("dtype", [F32, F64])
def test_binary_math_and_special_values(rng, width, dtype):
    @jd.compute
    def binary(X, P):
        n, m = X.shape
        A[i, j] = P[i, j] ** X[i, j]
        B[i, j] = jd.atan2(X[i, j], P[i, j] - 1.5)
        C[i, j] = jd.fmod(X[i, j] * 7.0, P[i, j]) + (X[i, j] * 7.0) % P[i, j]
        D[i, j] = (X[i, j] * 7.0) // (P[i, j] - 1.5)
        E[i, j] = jd.max(X[i, j], P[i, j] - 2.0) + jd.min(X[i, j], -P[i, j])
        F[i, j] = jd.float64(jd.isnan(X[i, j] * P[i, j])) + jd.float64(jd.isinf(P[i, j])) \
            + jd.float64(jd.isfinite(X[i, j])) * 4.0
        return A, B, C, D, E, F
    for name in "ABCDEF":
        rows(binary, name)
    x = rng.uniform(-3, 3, (3, 45)).astype(dtype)
    p = rng.uniform(0.5, 3, (3, 45)).astype(dtype)
    x[1, 3], p[1, 4], p[2, 7], x[2, 8] = np.nan, np.inf, -np.inf, np.inf
    got = binary(x, p)
    xd, pd = x.astype(F64), p.astype(F64)
    with np.errstate(all="ignore"):
        refs = [pd ** xd, np.arctan2(xd, pd - 1.5), np.fmod(xd * 7, pd) + np.mod(xd * 7, pd),
                np.floor_divide(xd * 7, pd - 1.5),
                np.maximum(xd, pd - 2) + np.minimum(xd, -pd),
                np.isnan(xd * pd) + np.isinf(pd) + np.isfinite(xd) * 4.0]
    rtol = 1e-5 if dtype == F32 else 1e-12
    for g, r in zip(got, refs):
        if g.dtype == F32:          # float32 rounding of x * 7 can move a floor by one
            with np.errstate(invalid="ignore"):
                ok = np.isclose(g, r, rtol, 1e-5, equal_nan=True) | (np.abs(g - r) <= 1.0001)
            assert ok.all()
        else:
            np.testing.assert_allclose(g, r, rtol, 1e-12)
    assert_vector(binary, (x, p), "j")


# ---------------------------------------------------------------------------------------
# strided and gathered accesses, masks
# ---------------------------------------------------------------------------------------

def test_transposed_read_is_a_gather(rng, width):
    @jd.compute
    def transpose(X):
        n, m = X.shape
        return jd.tensor((m, n), lambda i, j: X[j, i] * 2.0, name="Y")
    rows(transpose)
    x = normal(rng, (37, 13))
    check(transpose, (x,), x.T * 2.0, F64)
    text = assert_vector(transpose, (x,), "j")
    assert "llvm.masked.gather" in text


def test_strided_and_computed_indices(rng, width):
    @jd.compute
    def strided(X):
        n = X.shape[0]
        A = jd.tensor((n // 2,), lambda i: X[2 * i] - X[2 * i + 1], name="A")
        B = jd.tensor((2 * n,), lambda i: X[i // 2], name="B")
        C = jd.tensor((n,), lambda i: X[(i * 7) % n], name="C")
        return A, B, C
    for name in "ABC":
        rows(strided, name)
    x = normal(rng, 74)
    a, b, c = strided(x)
    np.testing.assert_array_equal(a, x[0::2] - x[1::2])
    np.testing.assert_array_equal(b, np.repeat(x, 2))
    np.testing.assert_array_equal(c, x[(np.arange(74) * 7) % 74])
    text = assert_vector(strided, (x,), "i")
    assert "llvm.masked.gather" in text


def test_guarded_reads_are_masked(rng, width):
    @jd.compute
    def pad(X):
        h, w = X.shape
        P = jd.tensor((h + 2, w + 2))
        P[y, x] = X[y - 1, x - 1] if (y >= 1 and y <= h and x >= 1 and x <= w) else -1.0
        return P
    rows(pad, "P")
    x = normal(rng, (9, 50))
    check(pad, (x,), np.pad(x, 1, constant_values=-1.0), F64)
    assert "llvm.masked.load" in assert_vector(pad, (x,), "x")


def test_short_circuit_reads_only_where_needed(rng, width):
    @jd.compute
    def previous_positive(X):
        n = X.shape[0]
        Y = jd.tensor((n + 1,))
        Y[i] = 1.0 if (i >= 1 and X[i - 1] > 0.0) else 0.0
        return Y
    rows(previous_positive)
    x = normal(rng, 101)
    check(previous_positive, (x,), np.concatenate([[0.0], (x > 0).astype(F64)]), F64)
    assert_vector(previous_positive, (x,), "i")


@pytest.mark.parametrize("factor", [8, 16, 24])
def test_partitioned_tail_is_a_shorter_vector(rng, width, factor):
    f = rows(make_muladd(), split=factor)
    x, z = normal(rng, (3, 2 * factor + 5)), normal(rng, (3, 2 * factor + 5))
    check(f, (x, z), x * z + x - z, F64, 1e-12, 1e-12)   # sentinels: no write past the end
    text = assert_vector(f, (x, z), "j_i")
    assert "vector code, one block of 5 lanes" in text


# ---------------------------------------------------------------------------------------
# what is not vector code, and says so
# ---------------------------------------------------------------------------------------

def test_nested_loop_falls_back_with_reason(rng, width):
    @jd.compute
    def matmul(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")

    @jd.schedule(matmul, target="cpu")
    def sched(s, cfg):
        i, j = s["C"].axis
        (k,) = s["C"].reduce_axis
        jo, ji = s.split(j, 8)
        s.reorder(i, jo, ji, k)
        s.vectorize(ji)
    a, b = normal(rng, (13, 7)), normal(rng, (7, 21))
    check(matmul, (a, b), a @ b, F64, 1e-12)
    text = ir_of(matmul, a, b)
    # LLVM vectorises innermost loops only: asking it for this one would just print
    # "loop not vectorized" on stderr
    assert "vectorized j_i: scalar loop (it has inner loops), because its body allocates " \
           "a buffer (C_acc)" in text
    assert '!"llvm.loop.vectorize.enable", i1 true' not in text


def test_checked_row_read_is_vector_code(rng, width):
    """A read whose row is checked at run time (the same in every lane): vector code
    that checks once a block; a bad id raises and names its value."""
    @jd.compute
    def embed(E, ids):
        n = ids.shape[0]
        d = E.shape[1]
        Y = jd.tensor((n, d))
        Y[i, j] = E[ids[i], j]
        return Y
    rows(embed)
    e, ids = normal(rng, (10, 19)), rng.integers(0, 10, 6)
    check(embed, (e, ids), e[ids], F64)
    assert_vector(embed, (e, ids), "j")
    with pytest.raises(IndexError, match="is 10, outside"):
        embed(e, np.array([1, 10, 2, 3, 4, 5]))
    with pytest.raises(IndexError, match="is -11, outside"):
        embed(e, np.array([1, 2, 3, 4, 5, -11]))


@pytest.mark.parametrize("n", [37, 8, 3])
def test_checked_gather_is_vector_code(rng, width, n):
    """A gather whose index differs by lane and is checked at run time: vector code; a
    bad index in any lane of a block, of a tail or of a masked one raises with the value
    of the last bad index (as the scalar loop reports it), and every good call is exact."""
    @jd.compute
    def gather(X, idx):
        return jd.tensor(idx.shape, lambda i: X[idx[i]], name="Y")
    rows(gather)
    x = normal(rng, 50)
    idx = rng.integers(0, 50, n)
    check(gather, (x, idx), x[idx], F64)
    assert_vector(gather, (x, idx), "i")
    for pos in sorted({0, n // 2, n - 1}):
        bad = idx.copy()
        bad[pos] = 50 + pos
        with pytest.raises(IndexError, match=f"is {50 + pos}, outside"):
            gather(x, bad)
    if n > 2:
        bad = idx.copy()
        bad[0], bad[n - 2] = -51, 77
        with pytest.raises(IndexError, match="is 77, outside"):
            gather(x, bad)
        check(gather, (x, idx), x[idx], F64)        # (and a good call after them)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.int16, np.int8, np.uint8])
def test_integer_power_is_vector_code(rng, width, dtype):
    """Integer power squares every lane together (the loop runs to the largest exponent's
    bit length); a negative exponent in any lane is NumPy's ValueError."""
    @jd.compute
    def power(X, E):
        return jd.tensor(X.shape, lambda i: X[i] ** E[i], name="Y")
    rows(power)
    x = ints(rng, 45, dtype, -9, 9)
    e = ints(rng, 45, dtype, 0, 13)
    e[3] = 0
    want = np.power(x.astype(np.int64), e.astype(np.int64)).astype(dtype)
    got = power(x, e)
    assert got.dtype == dtype and np.array_equal(got, want)
    assert_vector(power, (x, e), "i")
    if np.dtype(dtype).kind == "i":     # (jd.numpy.power checks; the IR's ** gives 0)
        @jd.compute
        def checked(X, E):
            return jd.numpy.power(X, E)
        rows(checked, stage="checked")
        assert np.array_equal(checked(x, e), want)
        assert_vector(checked, (x, e), "idx0")
        for pos in (0, 22, 44):
            bad = e.copy()
            bad[pos] = -1
            with pytest.raises(ValueError, match="negative integer powers"):
                checked(x, bad)


def test_auto_matmul_tile_is_vector_code(rng, width):
    @jd.compute
    def matmul(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")
    for m, k, n in [(64, 64, 64), (67, 45, 83)]:
        a, b = normal(rng, (m, k), F32), normal(rng, (k, n), F32)
        check(matmul, (a, b), a.astype(F64) @ b, F32, 1e-4, 1e-4)
        text = ir_of(matmul, a, b)
        assert re.search(r"; jitdl: unrolled \S+: vector code", text), text[:3000]
        assert "fadd reassoc contract <" in text


def test_reduction_through_unrolled_axis_stays_scalar(rng, width):
    @jd.compute
    def rowsum(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="R")

    @jd.schedule(rowsum, target="cpu")
    def sched(s, cfg):
        (k,) = s["R"].reduce_axis
        ko, ki = s.split(k, 4)
        s.unroll(ki)
    x = normal(rng, (5, 18))
    check(rowsum, (x,), x.sum(1), F64, 1e-12)
    assert "unrolled k_i: 4 copies of the body, because it writes R" in ir_of(rowsum, x)


# ---------------------------------------------------------------------------------------
# loop IR written by hand: masks, lets, scatters, refusals (run through codegen directly)
# ---------------------------------------------------------------------------------------

import ctypes  # noqa: E402
import mmap  # noqa: E402

from jitdl.ir import build  # noqa: E402
from jitdl.ir.nodes import (Buffer, CmpOp, Const, For, ForKind, IfThen, Intrin,  # noqa: E402
                            LetStmt, Load, PrimFunc, Select, Seq, Store, Var)
from jitdl.runtime import engine  # noqa: E402

_PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None)
_fences = []


def fenced(values, side="end"):
    """A copy of `values` placed right against an inaccessible page (after its end, or
    before its start): reading one element past it crashes instead of passing silently."""
    values = np.ascontiguousarray(values)
    nbytes = values.nbytes
    pages = -(-nbytes // _PAGE) + 1
    mm = mmap.mmap(-1, (pages + 1) * _PAGE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    if side == "end":
        fence, offset = base + pages * _PAGE, pages * _PAGE - nbytes
    else:
        fence, offset = base, _PAGE
    assert _libc.mprotect(ctypes.c_void_p(fence), ctypes.c_size_t(_PAGE), 0) == 0
    arr = np.frombuffer(mm, values.dtype, values.size, offset).reshape(values.shape)
    arr[...] = values
    _fences.append(mm)
    return arr


def run_loop_ir(params, body, args):
    """Compile a hand-written loop nest and run it on NumPy arrays and ints (in place)."""
    func = PrimFunc("jd_hand", tuple(params), body)
    module, _ = codegen.generate(func, parallel_ok=False)
    text = str(module)
    obj, _ = engine.optimize(text)
    lib = engine.Loaded(obj, func.name)
    types = [ctypes.c_void_p if isinstance(a, np.ndarray) else ctypes.c_int64 for a in args]
    ctypes.CFUNCTYPE(None, *types)(lib.address)(
        *[a.ctypes.data if isinstance(a, np.ndarray) else a for a in args])
    return text


def vloop(var, n, body, kind=ForKind.VECTORIZED):
    return For(var, Const(0, "int64"), Const(n, "int64"), kind, body)


def test_varying_if_masks_loads_and_stores(rng, width):
    j = Var("j")
    X, Y = Buffer("X", "float64", (40,)), Buffer("Y", "float64", (37,))
    # lanes j >= 30 would read past the end of X: the load must be masked
    body = IfThen(j < 30, Store(Y, j, Load(X, j + 10) * 2.0), Store(Y, j, Const(-1.0, "float64")))
    x = fenced(normal(rng, 40))
    y = np.full(37, np.nan)
    text = run_loop_ir([X, Y], vloop(j, 37, body), [x, y])
    np.testing.assert_array_equal(y, np.where(np.arange(37) < 30, np.append(x[10:], [0] * 7)[:37]
                                              * 2, -1.0))
    assert "llvm.masked.load" in text and "llvm.masked.store" in text


def test_data_dependent_if_leaves_other_lanes_alone(rng, width):
    j = Var("j")
    X, Y, B = (Buffer("X", "float32", (45,)), Buffer("Y", "float32", (45,)),
               Buffer("B", "bool", (45,)))
    xj = Load(X, j)
    body = IfThen(xj > 0.0, Seq((Store(Y, j, build.call(Intrin.SQRT, xj)),
                                 Store(B, j, xj > 1.0))))
    x = normal(rng, 45, F32)
    y, b = np.full(45, -7.0, F32), np.zeros(45, bool)
    run_loop_ir([X, Y, B], vloop(j, 45, body), [x, y, b])
    np.testing.assert_allclose(y, np.where(x > 0, np.sqrt(np.abs(x)), -7.0), 1e-6)
    np.testing.assert_array_equal(b, x > 1.0)


def test_uniform_if_and_lets(rng, width):
    i, j, t = Var("i"), Var("j"), Var("t", "float64")
    X, Y = Buffer("X", "float64", (33,)), Buffer("Y", "float64", (3, 33))
    xj = Load(X, j)
    inner = IfThen(build.compare(CmpOp.EQ, i, 1), LetStmt(t, xj * 2.0, Store(Y, i * 33 + j, t + t * t)),
                   Store(Y, i * 33 + j, -xj))
    x, y = normal(rng, 33), np.zeros((3, 33))
    text = run_loop_ir([X, Y], For(i, Const(0, "int64"), Const(3, "int64"), ForKind.SERIAL,
                                   vloop(j, 33, inner)), [x, y])
    np.testing.assert_allclose(y, [-x, 2 * x + 4 * x * x, -x], 1e-12)
    assert "vectorized j: vector code" in text


def test_uniform_read_under_empty_mask_is_skipped(rng, width):
    j, lim = Var("j"), Var("lim")
    X, Y = Buffer("X", "float64", (8,)), Buffer("Y", "float64", (16,))
    body = IfThen(j < lim, Store(Y, j, Load(X, lim - 1) + 1.0))
    x = fenced(normal(rng, 8), side="start")    # X[-1] (lim = 0) would crash
    for n in (0, 5, 8):
        y = np.full(16, -3.0)
        run_loop_ir([X, Y, lim], vloop(j, 16, body), [x, y, n])
        np.testing.assert_array_equal(y, np.where(np.arange(16) < n, x[n - 1] + 1.0, -3.0))


def test_select_reads_only_selected_lanes(rng, width):
    j = Var("j")
    X, Y = Buffer("X", "float64", (40,)), Buffer("Y", "float64", (43,))
    body = Store(Y, j, Select(j >= 3, Load(X, j - 3), Const(0.5, "float64"), "float64"))
    x = fenced(normal(rng, 40), side="start")
    y = np.zeros(43)
    text = run_loop_ir([X, Y], vloop(j, 43, body), [x, y])
    np.testing.assert_array_equal(y, np.concatenate([[0.5] * 3, x]))
    assert "llvm.masked.load" in text


def test_gathers_and_scatters(rng, width):
    j = Var("j")
    X, Y, Z = Buffer("X", "int32", (111,)), Buffer("Y", "int32", (74,)), Buffer("Z", "int32",
                                                                                 (19,))
    body = Seq((Store(Y, j * 2, Load(X, j * 3)),          # strided gather and scatter
                Store(Z, j // 2, Load(X, j))))           # lanes 2k and 2k+1 write Z[k]
    x = ints(rng, 111, np.int32)
    y, z = np.full(74, 99, np.int32), np.full(19, 99, np.int32)
    text = run_loop_ir([X, Y, Z], vloop(j, 37, body), [x, y, z])
    np.testing.assert_array_equal(y[0::2], x[0::3][:37])
    np.testing.assert_array_equal(y[1::2], 99)
    np.testing.assert_array_equal(z, x[1:37:2].tolist() + [x[36]])   # the last lane wins
    assert "llvm.masked.scatter" in text and "llvm.masked.gather" in text


def test_loop_carried_store_stays_scalar(rng, width):
    j = Var("j")
    X, S, Y = Buffer("X", "float64", (50,)), Buffer("S", "float64", (1,)), Buffer("Y", "float64",
                                                                                  (50,))
    body = Seq((Store(S, Const(0, "int64"), Load(S, Const(0, "int64")) + Load(X, j)),
                Store(Y, j, Load(Y, j) + Load(X, j))))
    x, s, y = normal(rng, 50), np.zeros(1), np.ones(50)
    text = run_loop_ir([X, S, Y], vloop(j, 50, body), [x, s, y])
    np.testing.assert_allclose(s, [x.sum()], 1e-12)
    np.testing.assert_allclose(y, 1 + x, 1e-12)
    assert "it writes S at the same index in every iteration" in text


def test_unrolled_loop_with_stride_one_is_vector_code(rng, width):
    j = Var("j")
    X, Y = Buffer("X", "float32", (24,)), Buffer("Y", "float32", (24,))
    body = Store(Y, j, Load(Y, j) * Load(X, j) + 1.0)
    x, y = normal(rng, 24, F32), normal(rng, 24, F32)
    expected = y.astype(F64) * x + 1
    text = run_loop_ir([X, Y], vloop(j, 24, body, ForKind.UNROLLED), [x, y])
    np.testing.assert_allclose(y, expected, 1e-6)
    # power-of-two vectors only: LLVM would widen a <24 x float> and shuffle its parts
    assert "unrolled j: vector code, one block of 24 lanes (16 + 8)" in text
    assert "<24 x" not in text


def test_rows_of_a_symbolic_width_are_contiguous_vectors():
    """`X[k * n + j]` with n a size known only at the call: j walks memory with stride 1
    (k * n does not vary with j), so the loop is plain vector code, not gathers (it was:
    every 2-D dynamic kernel, e.g. jd.numpy's, gathered)."""
    import jitdl.numpy as jnp

    @jd.compute(dynamic=True)
    def colsum(X):
        return jnp.sum(X, axis=0)
    rng = np.random.default_rng(5)
    for shape in [(300, 517), (40, 9), (3, 2000)]:
        x = rng.uniform(-1, 1, shape).astype(np.float32)
        np.testing.assert_allclose(colsum(x), x.astype(np.float64).sum(0), rtol=1e-5,
                                   atol=1e-5)
    notes = [line for line in colsum.llvm_ir(x, optimized=False).splitlines()
             if "jitdl: vectorized" in line]
    assert notes and not any("gather" in n for n in notes), notes


def test_unrolled_loop_too_long_to_copy_says_it_is_a_loop(rng, width):
    """unroll over more than MAX_UNROLL iterations: a loop, and the IR's notes say so
    (they said nothing while lower() printed `unrolled`)."""
    j = Var("j")
    X, Y = Buffer("X", "float64", (100,)), Buffer("Y", "float64", (100,))
    body = Store(Y, j, Load(Y, j) * Load(X, j) + 1.0)
    x, y = normal(rng, 100), normal(rng, 100)
    expected = y * x + 1
    text = run_loop_ir([X, Y], vloop(j, 100, body, ForKind.UNROLLED), [x, y])
    np.testing.assert_allclose(y, expected, 1e-12)
    assert "unrolled j: a loop, because its extent 100 is not a constant of at most 64" \
        in text


@pytest.mark.parametrize("n", [12, 3])
def test_checked_uniform_read_with_varying_check(rng, width, n):
    """A read of one element for every lane (the base A[0]) that carries a check differing
    by lane (power's negative exponent, E[i] + 1 not being a read itself): every lane's
    exponent is checked, as in the scalar loop."""
    @jd.compute
    def power(A, E):
        return jd.tensor(E.shape, lambda i: jd.numpy.power(A[0], E[i] + 1), name="Y")
    rows(power)
    a, e = np.array([2], np.int32), ints(rng, n, np.int32, 0, 9)
    assert np.array_equal(power(a, e), np.power(2, e + 1).astype(np.int32))
    assert_vector(power, (a, e), "i")
    for pos in sorted({0, n // 2, n - 1}):
        bad = e.copy()
        bad[pos] = -5
        with pytest.raises(ValueError, match="negative integer powers"):
            power(a, bad)


def test_min_max_reductions_leave_the_sign_of_a_zero_tie_free(rng):
    """A float min or max reduction accumulates with llvm.minimum/maximum marked nsz (not
    under strict_fp): their result of -0.0 against 0.0 may be either zero, as NumPy's
    depends on the order; without it LLVM ordered the two zeros with blends per vector
    (a float32 max along 1000-element rows 2.1x the time of a sum, argmax 1.9x NumPy's).
    NaN and infinities still propagate: every row against NumPy, rows of zeros of both
    signs compared by value."""
    def extremes(X):
        n, m = X.shape
        hi[i] = max(X[i, k] for k in range(m))
        lo[i] = min(X[i, k] for k in range(m))
        return hi, lo
    for strict in (False, True):
        f = jd.compute(strict_fp=strict)(extremes)
        for dt in (F32, F64):
            x = normal(rng, (7, 1003), dt)
            x[1, 500], x[2, 3], x[3] = np.nan, np.inf, -np.inf
            x[4], x[5, 1:] = 0.0, -0.0
            x[4, 1::3], x[5, 0] = -0.0, 0.0
            hi, lo = f(x)
            np.testing.assert_array_equal(hi, x.max(axis=1))
            np.testing.assert_array_equal(lo, x.min(axis=1))
            text = ir_of(f, x)
            calls = re.findall(r"call (nsz )?\S+ @\"llvm\.(maximum|minimum)\.", text)
            assert {c[1] for c in calls} == {"maximum", "minimum"}, text[:3000]
            assert all(bool(c[0]) != strict for c in calls), calls
