"""jd.numpy's numeric arguments that are run-time scalars, not static ones: isclose's and
allclose's tolerances, nan_to_num's fills, pad's constant_values and var's and std's ddof
compile one kernel for every value (per dtype and broadcast pattern), with NumPy 2's
results, dtypes and warnings (NEP 50: a Python float is weak, a np.float64 or a 0-d array
is not), on arrays and inside definitions."""
import warnings

import numpy as np
import pytest

import jitdl as jd
from jitdl import eager

jnp = jd.numpy
RNG = np.random.default_rng(2024)
SPECIAL = (np.nan, np.inf, -np.inf, -0.0, 0.0)


def data(shape, dt):
    """Fresh normal samples (never zeros) with NaN, +-inf and both zeros at the front."""
    x = RNG.standard_normal(shape).astype(dt)
    x.flat[:len(SPECIAL)] = SPECIAL
    return x


def identical(got, want):
    """Equal dtypes, shapes and bits (NaN to NaN, -0.0 to -0.0)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype,
                                                                 got.shape, want.shape)
    if want.dtype.kind == "f":
        got, want = got.view(f"u{want.itemsize}"), want.view(f"u{want.itemsize}")
    np.testing.assert_array_equal(got, want)


def kernels(op):
    return eager.cache_info(op)["kernels"]


def near(b, rtol):
    """a of float32/float64 b's dtype whose |a - b| lies a step either side of rtol * |b|
    (where the dtype that tolerance is computed in decides)."""
    u = np.spacing(np.abs(b))
    with np.errstate(invalid="ignore"):
        k = np.round(rtol * np.abs(b) / u) + RNG.integers(-1, 2, b.shape)
    return (b + k * u * np.sign(b)).astype(b.dtype)


def noisy(b, rtol):
    """b with relative noise of about rtol."""
    return (b * (1 + rtol * RNG.uniform(-2, 2, b.shape))).astype(b.dtype)


# -- isclose, allclose -----------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_isclose_tolerances_share_one_kernel(dt):
    eager.clear()
    b = data(3000, dt)
    for n, rtol in enumerate((1e-5, 1e-3, 2.0 ** -10, 0.25, 0.0, 1e-9)):
        # atol 0: |a - b| against the one rounding of rtol * |b| (see the xfail below)
        for a, atol in ((near(b, rtol), 0.0), (noisy(b, rtol), 1e-8), (noisy(b, 0.5), 0.5 + n)):
            a.flat[len(SPECIAL):2 * len(SPECIAL)] = SPECIAL
            for equal_nan in (False, True):
                identical(jnp.isclose(a, b, rtol, atol, equal_nan),
                          np.isclose(a, b, rtol, atol, equal_nan))
            assert jnp.allclose(a[20:], a[20:] * (1 + rtol / 2), rtol, atol) == \
                np.allclose(a[20:], a[20:] * (1 + rtol / 2), rtol, atol)
    assert kernels("isclose") == 2      # (equal_nan: a static argument)
    assert kernels("allclose") == 1


@pytest.mark.xfail(strict=False, reason="the CPU code generator lets LLVM contract "
                   "atol + rtol * |b| into a fused multiply-add (one rounding; NumPy rounds "
                   "the product first): |a - b| exactly at the tolerance can compare the "
                   "other way on machines with FMA")
def test_isclose_rounds_the_tolerance_twice_as_numpy():
    b = np.random.default_rng(3).standard_normal(20000).astype(np.float32)
    a = near(b, 1e-3)
    identical(jnp.isclose(a, b, 1e-3, 1e-8), np.isclose(a, b, 1e-3, 1e-8))


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_strong_tolerances_compute_as_numpy(dt):
    """A np.float64 rtol (or a 0-d array) takes part in the tolerance's dtype, as in
    NumPy: float32 data compare against a float64 tolerance there."""
    b = data(100000, dt)
    a = near(b, 1e-3)
    if dt is np.float32:        # (the data reach where the two tolerances differ)
        assert (np.isclose(a, b, 1e-3, 0.0) != np.isclose(a, b, np.float64(1e-3), 0.0)).any()
    for rtol in (1e-3, np.float64(1e-3), np.float32(1e-3), np.array(1e-3),
                 np.array(1e-3, np.float32), 0, np.int64(1), np.int8(0)):
        for atol in (0.0, np.float64(0.0), np.array(0), 0, np.float32(0.0)):
            identical(jnp.isclose(a, b, rtol, atol), np.isclose(a, b, rtol, atol))
    c = noisy(b, 1e-3)
    for rtol, atol in ((np.float64(1e-3), np.float64(2.0 ** -30)), (1e-3, np.array(1e-7)),
                       (np.array(1e-3, np.float32), np.float32(1e-6))):
        identical(jnp.isclose(c, b, rtol, atol), np.isclose(c, b, rtol, atol))


def test_isclose_operands_of_other_kinds_as_numpy():
    b32, b64 = data(400, np.float32), data(400, np.float64)
    ints = RNG.integers(-50, 50, 400)
    for a, b in ((b64, b32), (b32, b64), (b32, ints), (ints, b32), (ints, ints + 1),
                 (ints.astype(np.int8), ints.astype(np.int16)), (b32, 2), (2, b32),
                 (b32, 2.5), (b32, True), (ints > 0, b32), (b32, np.float64(0.5)),
                 (np.int8(3), b32), (2.0, 2.0000001), (3, 3)):
        for rtol in (1e-3, np.float64(0.25), 0.5):
            for equal_nan in (False, True):
                identical(jnp.isclose(a, b, rtol, 1e-8, equal_nan),
                          np.isclose(a, b, rtol, 1e-8, equal_nan))


def test_non_finite_tolerances_warn_as_numpy():
    x = data(50, np.float64)
    for rtol, atol in ((np.nan, 1e-8), (1e-5, np.inf), (np.float64(-np.inf), 0.0)):
        with pytest.warns(RuntimeWarning, match="One of rtol or atol is not valid"):
            got = jnp.isclose(x, x, rtol, atol)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            identical(got, np.isclose(x, x, rtol, atol))
        with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
            jnp.allclose(x, x, rtol, atol)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jnp.isclose(x, x, 1e300, 0.0)


def test_tolerance_arrays_are_numpys():
    a, b = data((4, 6), np.float64), data((4, 6), np.float64)
    rtol = RNG.random(6)
    identical(jnp.isclose(a, b, rtol), np.isclose(a, b, rtol))
    assert jnp.allclose(a[1:], a[1:], [1e-3] * 6) is np.allclose(a[1:], a[1:], [1e-3] * 6)


# -- nan_to_num ------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_nan_to_num_fills_share_one_kernel(dt):
    eager.clear()
    x = data((50, 7), dt)
    x.flat[-4:] = (np.nan, np.inf, -np.inf, -0.0)
    fills = (0.0, -0.0, 1.5, np.nan, np.inf, -np.inf, 3, True, 1e300, -7.25e-3)
    for n, nan in enumerate(fills):
        posinf, neginf = fills[-n - 1], fills[(n + 3) % len(fills)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # (NumPy's overflow of 1e300 to float32)
            identical(jnp.nan_to_num(x, nan=nan), np.nan_to_num(x, nan=nan))
            want = np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf)
        identical(jnp.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf), want)
        y = x.copy()
        assert jnp.nan_to_num(y, copy=False, nan=nan, posinf=posinf, neginf=neginf) is y
        identical(y, want)
    assert kernels("nan_to_num") == 2   # (with and without the infinities' fills)
    for nan, posinf in ((np.float64(0.1), np.float32(-2.5)), (np.array(4.0), np.int8(3))):
        identical(jnp.nan_to_num(x, nan=nan, posinf=posinf),
                  np.nan_to_num(x, nan=nan, posinf=posinf))


def test_nan_to_num_of_integers_scalars_and_fill_arrays():
    i = RNG.integers(-9, 9, 30).astype(np.int16)
    identical(jnp.nan_to_num(i, nan=2.5, posinf=1.0), np.nan_to_num(i, nan=2.5, posinf=1.0))
    identical(jnp.nan_to_num(i > 0, nan=7.0), np.nan_to_num(i > 0, nan=7.0))
    for x in (np.inf, -np.inf, np.nan, 2.5):
        identical(jnp.nan_to_num(x, nan=-1.0, neginf=4.0), np.nan_to_num(x, nan=-1.0, neginf=4.0))
    x = data(6, np.float64)
    fill = RNG.standard_normal(6)
    identical(jnp.nan_to_num(x, nan=fill), np.nan_to_num(x, nan=fill))


# -- pad -------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_pad_constant_values_share_one_kernel(dt):
    eager.clear()
    x = data((6, 9), dt)
    values = (0, 1.5, -0.0, np.nan, np.inf, -np.inf, 7, True, 2.0 ** 40 + 1, -3.25e-5,
              np.float64(0.1), np.float32(0.1), np.int8(-4))
    for v in values:
        identical(jnp.pad(x, 2, constant_values=v), np.pad(x, 2, constant_values=v))
        identical(jnp.pad(x, ((1, 0), (3, 2)), constant_values=v),
                  np.pad(x, ((1, 0), (3, 2)), constant_values=v))
    assert kernels("pad") == 2          # (two widths)
    identical(jnp.pad(x, 2), np.pad(x, 2))
    assert kernels("pad") == 2


def test_pad_values_beyond_float32_warn_as_numpy():
    x = data(5, np.float32)
    with pytest.warns(RuntimeWarning, match="overflow"):
        got = jnp.pad(x, 1, constant_values=-1e300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        identical(got, np.pad(x, 1, constant_values=-1e300))
    identical(jnp.pad(x, 1, constant_values=3.4028235e38),
              np.pad(x, 1, constant_values=3.4028235e38))


@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int32, np.int64, np.bool_])
def test_pad_of_integers_casts_as_numpy(dt):
    eager.clear()
    x = RNG.integers(0, 2 if dt is np.bool_ else 100, (3, 4)).astype(dt)
    for v in (0, 1, 2.7, -1, 255, True, np.float64(-3.5), 2 ** 31, np.nan):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")     # (NumPy's invalid cast of NaN)
                want = np.pad(x, 1, constant_values=v)
        except (OverflowError, ValueError) as e:
            with pytest.raises(type(e)):
                jnp.pad(x, 1, constant_values=v)
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            identical(jnp.pad(x, 1, constant_values=v), want)
    assert kernels("pad") == 1
    if dt is np.int64:      # (beyond 2**53: a np.int64 operand, its own kernel)
        for v in (2 ** 60 + 1, -2 ** 63):
            identical(jnp.pad(x, 1, constant_values=v), np.pad(x, 1, constant_values=v))


# -- var, std --------------------------------------------------------------------------------
def moment(fn, *args, **kwargs):
    """fn's result and the set of RuntimeWarning messages about degrees of freedom."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r = fn(*args, **kwargs)
    return r, {str(w.message) for w in seen if "Degrees of freedom" in str(w.message)}


def same_moment(got, want, dt):
    """NumPy's dtype, shape, infinities and NaNs; values within 4 ulp (jitdl sums in
    another order than NumPy's pairwise sums)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.where(np.isinf(got), got, 0),
                                  np.where(np.isinf(want), want, 0))
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dt).eps, atol=0)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_ddof_values_share_one_kernel(dt):
    eager.clear()
    x = RNG.standard_normal((6, 10)).astype(dt)
    mask = RNG.random(x.shape) < 0.4
    for ddof in (0, 1, 2, 1.5, -1, -2.5, 9, 10, 11, 60, 61, np.nan, np.inf, -np.inf,
                 np.float32(1.5), np.int32(3), True):
        for name in ("var", "std"):
            for kw in ({}, {"axis": 1}, {"axis": 0, "keepdims": True},
                       {"axis": 1, "where": mask}):
                (got, said), (want, told) = (moment(getattr(jnp, name), x, ddof=ddof, **kw),
                                             moment(getattr(np, name), x, ddof=ddof, **kw))
                same_moment(got, want, dt)
                assert said == told, (name, ddof, kw, said, told)
    # every ddof, int or float: one kernel per call pattern (axis, keepdims, where=)
    assert kernels("var") == 4 and kernels("std") == 4
    out = np.empty(6, dt)
    assert jnp.var(x, axis=1, ddof=2, out=out) is out
    same_moment(out, np.var(x, axis=1, ddof=2), dt)
    same_moment(jnp.std(x, axis=0, correction=3), np.std(x, axis=0, correction=3), dt)


def test_ddof_of_integers_errors_and_empty_slices():
    i = RNG.integers(-9, 9, (5, 4)).astype(np.int32)
    for ddof in (0, 1, 4, 5):
        (got, said), (want, told) = moment(jnp.var, i, axis=0, ddof=ddof), \
            moment(np.var, i, axis=0, ddof=ddof)
        same_moment(got, want, np.float64)
        assert said == told
    (got, said), (want, told) = moment(jnp.std, np.zeros((0, 3)), axis=0), \
        moment(np.std, np.zeros((0, 3)), axis=0)
    same_moment(got, want, np.float64)
    assert said == told == {"Degrees of freedom <= 0 for slice"}
    with pytest.raises(OverflowError):
        jnp.var(i, ddof=2 ** 70)
    with pytest.raises(ValueError, match="ddof and correction"):
        jnp.std(i, ddof=1, correction=1)


# -- inside definitions ----------------------------------------------------------------------
@jd.compute
def _close(X, Y, tol):
    return jnp.isclose(X, Y * 2, rtol=tol, atol=0.0)


@jd.compute
def _all_close(X, Y, tol):
    return jnp.allclose(X, Y, tol, 1e-12)


@jd.compute
def _fill(X, v, big):
    return jnp.nan_to_num(X, nan=v, posinf=big, neginf=-big)


@jd.compute
def _padded(X, v):
    return jnp.pad(X, ((1, 2), (0, 3)), constant_values=v)


@jd.compute
def _spread(X, d):
    return jnp.var(X, axis=1, ddof=d), jnp.std(X, ddof=d)


@jd.compute
def _literals(X):
    return jnp.isclose(X, X * 1.001, 1e-3, 0.0, True), jnp.nan_to_num(X, nan=-0.0), \
        jnp.pad(X, 1, constant_values=np.float32(2.5)), jnp.var(X, axis=0, ddof=1)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_scalar_arguments_of_a_definition_as_values(dt):
    x = data((5, 8), dt)
    y = near(x, 1e-3) / 2
    for tol in (1e-3, 2.0 ** -10, 0.5):
        identical(_close(x, y, tol), np.isclose(x, y * 2, rtol=tol, atol=0.0))
        assert _all_close(x[1:], x[1:] * (1 + tol / 2), tol) == \
            np.allclose(x[1:], x[1:] * (1 + tol / 2), tol, 1e-12)
    for v, big in ((0.5, 9.0), (-0.0, 1e300), (np.nan, np.inf), (-2.5, 1e-3)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")     # (NumPy's overflow of 1e300 to float32)
            identical(_fill(x, v, big), np.nan_to_num(x, nan=v, posinf=big, neginf=-big))
        identical(_padded(x, v), np.pad(x, ((1, 2), (0, 3)), constant_values=v))
    z = RNG.standard_normal((4, 6)).astype(dt)
    for d in (0.0, 1.0, 2.5, -1.0):
        var, std = _spread(z, d)
        same_moment(var, np.var(z, axis=1, ddof=d), dt)
        same_moment(std, np.std(z, ddof=d), dt)
    for f in (_close, _fill, _padded, _spread):
        assert f.cache_info()["misses"] <= 2, f     # (one per dtype)
    close, filled, padded, var = _literals(x)
    identical(close, np.isclose(x, x * dt(1.001), 1e-3, 0.0, True))
    identical(filled, np.nan_to_num(x, nan=-0.0))
    identical(padded, np.pad(x, 1, constant_values=np.float32(2.5)))
    with np.errstate(invalid="ignore"):     # (x's infinities)
        same_moment(var, np.var(x, axis=0, ddof=1), dt)


def test_a_dynamic_definition_takes_the_values_too():
    @jd.compute(dynamic=True)
    def f(X, d, v):
        return jnp.var(X, axis=0, ddof=d), jnp.pad(X, 1, constant_values=v)
    for n, d, v in ((3, 1.0, 2.5), (7, 0.5, -0.0), (12, 2.0, np.nan)):
        x = RNG.standard_normal((n, 5))
        var, padded = f(x, d, v)
        same_moment(var, np.var(x, axis=0, ddof=d), np.float64)
        identical(padded, np.pad(x, 1, constant_values=v))
    assert f.cache_info()["misses"] == 1


def test_values_that_are_not_scalars_inside_a_definition_are_refused():
    @jd.compute
    def tolerances(X):
        return jnp.isclose(X, X, rtol=[1e-3, 1e-4])

    @jd.compute
    def fills(X, Y):
        return jnp.nan_to_num(X, nan=Y)
    with pytest.raises(jd.JitdlError, match="rtol and atol must be numbers"):
        tolerances(np.ones(2))
    with pytest.raises(jd.JitdlError, match="nan, posinf and neginf must be numbers"):
        fills(np.ones(3), np.ones(3))
