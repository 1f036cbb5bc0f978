"""jd.numpy's elementwise functions and reductions against NumPy 2: values (float64 random
inputs and special values), result dtypes (NEP 50 with Python scalars), broadcasting,
axes, keepdims, out=, errors, and each family fused inside a @jd.compute definition."""
import itertools
import warnings

import numpy as np
import pytest

import jitdl as jd
import jitdl.numpy as jnp
from jitdl.numpy import _reductions, _ufuncs

RNG = np.random.default_rng(7)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.5, -2.5,
                    1e-300, -1e-300, 1e300, -1e300, 710.0, -710.0, 1e-8, 30.0, 8.0, 1e3,
                    1e-3, 27.0, -27.0, 1.5, 1e9, -1e9])
X = np.concatenate([RNG.standard_normal(40) * 3, RNG.uniform(-1, 1, 20), SPECIAL])
# binary operands: random pairs plus every pair of a few special values
_S = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 3.0]
X1 = np.concatenate([RNG.standard_normal(40) * 3, [a for a, _ in itertools.product(_S, _S)]])
X2 = np.concatenate([RNG.standard_normal(40) * 3, [b for _, b in itertools.product(_S, _S)]])


def np_quiet(f, *args, **kw):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return f(*args, **kw)


def same(r, e, rtol=4e-15, atol=0.0):
    """Equal values (NaN where NumPy has NaN), dtype, shape and the sign of zeros."""
    r, e = np.asarray(r), np.asarray(e)
    assert r.dtype == e.dtype, (r.dtype, e.dtype)
    assert r.shape == e.shape, (r.shape, e.shape)
    if r.dtype.kind in "biu":
        np.testing.assert_array_equal(r, e)
        return
    np.testing.assert_allclose(r, e, rtol=rtol, atol=atol, equal_nan=True)
    zeros = (e == 0) & (r == 0)
    np.testing.assert_array_equal(np.signbit(r[zeros]), np.signbit(e[zeros]))


UNARY = [n for n in _ufuncs._UNARY_DOCS if n != "invert"]
# composites agree with libm to a few ulp; cancellation near zero is judged absolutely
ATOL = {"sinh": 0, "log10": 0, "log2": 0, "arcsinh": 0, "arccos": 0}


@pytest.mark.parametrize("name", UNARY)
def test_unary_float64_against_numpy(name):
    r = getattr(jnp, name)(X)
    e = np_quiet(getattr(np, name), X)
    same(r, e, rtol=6e-15 if name in ("cbrt", "arccosh", "arcsinh", "sinh", "cosh")
         else 4e-15)


BINARY = [n for n in _ufuncs._BINARY_DOCS
          if n not in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
                       "right_shift")] + ["power"]


@pytest.mark.parametrize("name", BINARY)
def test_binary_float64_against_numpy(name):
    r = getattr(jnp, name)(X1, X2)
    e = np_quiet(getattr(np, name), X1, X2)
    if name == "floor_divide":      # the array API standard's, not NumPy's, for infinities
        inf = np.isinf(X1) | np.isinf(X2)
        e = np.where(inf, np_quiet(np.divide, X1, X2), e)
    same(r, e, atol=1e-15 if name == "logaddexp2" else 0.0)


@pytest.mark.parametrize("dt", ["int8", "int64", "uint8"])
def test_integer_arithmetic_and_bits(dt):
    lo, hi = (0, 120) if dt == "uint8" else (-120, 120)
    a = RNG.integers(lo, hi, 64).astype(dt)
    b = RNG.integers(lo, hi, 64).astype(dt)
    b[:8] = 0                                          # x // 0 and x % 0 are 0 in NumPy
    s = RNG.integers(0, 70 if dt == "int64" else 12, 64).astype(dt)   # shifts past the width
    for name in ("floor_divide", "remainder", "fmod", "maximum", "minimum", "bitwise_and",
                 "bitwise_or", "bitwise_xor", "add", "multiply", "fmax"):
        same(getattr(jnp, name)(a, b), np_quiet(getattr(np, name), a, b), rtol=1e-6)
    for name in ("left_shift", "right_shift"):
        same(getattr(jnp, name)(a, s), getattr(np, name)(a, s))
    small = (np.abs(a) % 5).astype(dt)
    same(jnp.power(small, (s % 4).astype(dt)), np.power(small, (s % 4).astype(dt)))
    for name in ("absolute", "sign", "square", "invert", "floor", "trunc", "reciprocal"):
        if dt == "uint8" and name == "sign":
            continue
        same(getattr(jnp, name)(a[8:]), np_quiet(getattr(np, name), a[8:]))


def test_integer_reciprocal_of_zero_is_numpys():
    """NumPy's integer reciprocal is 1.0 / x converted to the type: 1 / 0 is the int32 or
    int64 minimum on x86 (0 for the narrower types), where jitdl gave 0 for every type;
    the other elements are C's 1 / x (0 unless |x| is 1)."""
    for dt in ("int8", "int16", "int32", "int64", "uint8"):
        lo = 0 if dt == "uint8" else -3
        a = RNG.integers(lo, 4, 200).astype(dt)
        a[:3] = (0, 1, 1 if dt == "uint8" else -1)
        got, want = jnp.reciprocal(a), np_quiet(np.reciprocal, a)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("name,dt", [
    ("sqrt", "int16"), ("sqrt", "int32"), ("exp", "float32"), ("exp2", "int64"),
    ("floor", "int8"), ("rint", "int32"), ("trunc", "bool"), ("absolute", "bool"),
    ("negative", "uint8"), ("square", "bool"), ("isnan", "int8"), ("signbit", "int16"),
    ("logical_not", "float32"), ("invert", "bool"), ("deg2rad", "int32"),
    ("arctanh", "float32"), ("cbrt", "int64"), ("fix", "int8"), ("cosh", "int32")])
def test_unary_result_dtypes(name, dt):
    a = (RNG.uniform(-0.9, 0.9, 9) * (1 if "float" in dt else 100)).astype(dt)
    e = np_quiet(getattr(np, name), a)
    same(getattr(jnp, name)(a), e, rtol=2e-6 if e.dtype == np.float32 else 1e-15)


@pytest.mark.parametrize("name,args", [
    ("sqrt", (np.array([1, 4, 9, 2], np.int8),)), ("exp", (np.array([0, 3, 200], np.uint8),)),
    ("sin", (np.array([True, False]),)), ("log10", ([True, True],)),
    ("arctan2", (np.array([1, -3], np.int8), np.array([2, 5], np.int8))),
    ("hypot", (np.array([3, 7], np.uint8), 4)), ("logaddexp", (np.array([True]), False)),
    ("power", (np.array([2, 3], np.int8), np.array([True, False])))])
def test_float16_results_of_narrow_ints_are_numpys(name, args):
    """NumPy computes float functions of bool/int8/uint8 in float16 (float32 arithmetic
    rounded): on arrays jd.numpy gives the same float16, also on the kernels' fast path
    (second call); inside a definition, which has no float16, float32."""
    want = np_quiet(getattr(np, name), *args)
    for _ in range(2):
        got = np_quiet(getattr(jnp, name), *args)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)
    a = np.array([1, 4, 9], np.int8)

    @jd.compute
    def f(x):
        return jnp.sqrt(x)
    same(f(a), np.sqrt(a.astype(np.float32)))


@pytest.mark.parametrize("name,x1,x2", [
    ("add", np.ones(3, np.float32), 2.5), ("add", np.ones(3, np.int8), 3),
    ("multiply", 3, np.ones(3, np.uint8)), ("divide", np.ones(3, np.int16), 2),
    ("add", np.ones(3, np.int8), np.ones(3, np.uint8)), ("subtract", np.ones(3, np.int16), 1.5),
    ("less", np.full(3, 5, np.int8), 1000), ("equal", np.full(3, 255, np.uint8), -1),
    ("float_power", np.ones(3, np.float32), 2), ("arctan2", np.ones(3, np.int16), 2),
    ("logaddexp", np.ones(3, np.float32), np.ones(3)), ("maximum", True, np.ones(3, bool)),
    ("copysign", np.ones(3, np.float32), -1.0), ("bitwise_xor", np.ones(3, np.int16), 7)])
def test_nep50_promotion_with_python_scalars(name, x1, x2):
    same(getattr(jnp, name)(x1, x2), getattr(np, name)(x1, x2), rtol=2e-7)


def test_python_int_out_of_range_raises_overflow_error():
    for x1, x2 in ((np.ones(3, np.int8), 300), (np.ones(3, np.uint8), -1)):
        with pytest.raises(OverflowError):
            np.add(x1, x2)
        with pytest.raises(OverflowError):
            jnp.add(x1, x2)


def test_python_int_out_of_range_raises_overflow_error_with_empty_arrays():
    """An empty array's result is made without a kernel, but the Python int is still
    checked against the dtype it meets, as NumPy does (it returned an empty array);
    where NumPy takes any int (a comparison, clip, where, a shift count) it still does."""
    e8, e16 = np.zeros(0, np.int8), np.zeros((2, 0), np.int16)
    for case in (lambda m: m.add(e8, 300), lambda m: m.subtract(-129, e8),
                 lambda m: m.maximum(e16, 2 ** 40), lambda m: m.add(np.zeros(0, np.uint8), -1),
                 lambda m: m.add(e8, 2 ** 70)):
        for _ in range(2):                       # (the second call: the cached empty result)
            with pytest.raises(OverflowError):
                case(np)
            with pytest.raises(OverflowError):
                case(jnp)
    for case in (lambda m: m.add(e8, 5), lambda m: m.less(e8, 300),
                 lambda m: m.clip(e8, 0, 300), lambda m: m.left_shift(e8, -1),
                 lambda m: m.where(np.zeros(0, bool), e8, 300)):
        same(case(jnp), case(np))


BIG = 2 ** 70      # a Python int beyond int64


@pytest.mark.parametrize("call", [
    lambda m, x: m.add(x.astype(np.float32), BIG), lambda m, x: m.add(x, -BIG),
    lambda m, x: m.multiply(BIG, x.astype(np.float32)), lambda m, x: m.add(np.float32(1.5), BIG),
    lambda m, x: m.add(BIG, 1.5), lambda m, x: m.subtract(x, -2 ** 63 - 1),
    lambda m, x: m.divide(x.astype(np.int64), BIG), lambda m, x: m.arctan2(x, -BIG),
    lambda m, x: m.maximum(x.astype(np.float32), BIG), lambda m, x: m.minimum(x, -BIG),
    lambda m, x: m.where(x > 0, x.astype(np.float32), BIG), lambda m, x: m.clip(x, -BIG, BIG),
    lambda m, x: m.greater(x.astype(np.int64), BIG), lambda m, x: m.less(x.astype(np.int8), BIG),
    lambda m, x: m.not_equal(x.astype(np.int64), -BIG), lambda m, x: m.greater_equal(x, BIG),
    lambda m, x: m.sum(x.astype(np.float32), initial=BIG), lambda m, x: m.max(x, initial=-BIG),
    # (int16 makes a float32 loop: the int is a float32, not a Python float's float64)
    lambda m, x: m.arctan2(x.astype(np.int16), BIG), lambda m, x: m.hypot(-BIG, x.astype(np.int16)),
    lambda m, x: m.logaddexp(x.astype(np.int16), 2 ** 63)])
def test_python_int_beyond_int64_meets_floats_as_numpy(call):
    """NEP 50: the int takes the float dtype of the loop (float32 stays float32); against
    integers a comparison is decided by the int's sign."""
    x = RNG.standard_normal(7) * 3 + 0.5
    for _ in range(2):      # (the second call takes the cached path)
        same(call(jnp, x), call(np, x), rtol=2e-7)


def test_python_int_beyond_int64_alone_is_numpys():
    """A lone Python int beyond int64 is NumPy's uint64 or object array to a unary ufunc:
    its result (negative(2**70) is a Python int) or its TypeError (exp has no object
    loop)."""
    for x in (BIG, 2 ** 63, -2 ** 63 - 1):
        for name in ("negative", "absolute", "square", "floor"):
            want = getattr(np, name)(x)
            got = getattr(jnp, name)(x)
            assert type(got) is type(want) and got == want, (name, x, got, want)
    for name in ("sum", "max", "round", "sinc"):   # (not ufuncs: NumPy's array of it)
        got, want = getattr(jnp, name)(2 ** 63), getattr(np, name)(2 ** 63)
        assert type(got) is type(want) and got == want, (name, got, want)
    for name in ("exp", "sqrt", "isnan", "sin"):
        with pytest.raises(TypeError):
            getattr(np, name)(BIG)
        with pytest.raises(TypeError):
            getattr(jnp, name)(BIG)


def test_python_ints_beyond_int64_compare_exactly_as_numpy():
    """Two Python ints, one or both beyond int64: NumPy's comparison is Python's (np.less(
    2**63, 1) is False, np.less(2**63, 2**64) True); it raised OverflowError."""
    ints = (2 ** 63, 2 ** 64, BIG, -2 ** 63 - 1, -BIG, 2 ** 63 - 1, -2 ** 63, 5, 0, -5)
    for name in ("less", "less_equal", "equal", "not_equal", "greater", "greater_equal"):
        for a in ints:
            for b in ints:
                want = getattr(np, name)(a, b)
                got = getattr(jnp, name)(a, b)
                assert type(got) is type(want) and got == want, (name, a, b, got, want)


def test_python_int_beyond_int64_with_integers_raises_overflow_error():
    for call in (lambda m: m.add(np.ones(3, np.int64), BIG), lambda m: m.add(BIG, 1),
                 lambda m: m.where(np.ones(3, bool), np.ones(3, np.int64), BIG),
                 lambda m: m.add(np.ones(3, bool), -BIG), lambda m: m.equal(np.ones(3, bool), BIG),
                 lambda m: m.sum(np.ones(3, np.int64), initial=BIG),
                 lambda m: m.add(np.ones(3), 2 ** 1100)):
        with pytest.raises(OverflowError):
            call(np)
        with pytest.raises(OverflowError):
            call(jnp)
    jnp.add(np.ones(3, np.int64), 5)            # a kernel for (int64, int) exists ...
    with pytest.raises(OverflowError):          # ... and raises on the cached path too
        jnp.add(np.ones(3, np.int64), BIG)
    same(jnp.add(np.ones(3, np.float32), 5), np.ones(3, np.float32) + 5)
    same(jnp.add(np.ones(3, np.float32), BIG), np.ones(3, np.float32) + BIG)
    same(jnp.add(np.ones(3, np.float32), 5), np.ones(3, np.float32) + 5)


def test_python_int_beyond_int64_written_in_a_definition():
    """A literal 2**70 in a definition is what it is in NumPy: a float next to float data
    (float32 stays float32), an OverflowError next to integer data, fine in a comparison."""
    @jd.compute
    def f(X):
        Y[i] = X[i] * 2 ** 70 - 2 ** 66
        return Y

    @jd.compute
    def below(X):
        Y[i] = X[i] < 2 ** 70
        return Y
    for dt in (np.float32, np.float64):
        x = (RNG.standard_normal(5) * 3).astype(dt)
        same(f(x), x * 2 ** 70 - 2 ** 66, rtol=2e-7)
        same(below(x), x < 2 ** 70)
    @jd.compute
    def against(X):
        A[i] = 2 ** 70 <= X[i]
        B[i] = X[i] != -2 ** 70
        C[i] = -2 ** 70 >= X[i]
        return A, B, C
    for x in (np.array([-2 ** 63, 0, 2 ** 63 - 1]), np.array([-128, 5, 127], np.int8),
              np.array([0, 255], np.uint8)):
        same(below(x), x < 2 ** 70)
        for got, want in zip(against(x), (2 ** 70 <= x, x != -2 ** 70, -2 ** 70 >= x)):
            same(got, want)
    with pytest.raises(OverflowError, match="out of bounds for int64"):
        f(np.arange(5))
    with pytest.raises(OverflowError):      # bool is not an integer here (NumPy raises)
        below(np.ones(3, bool))


def test_type_errors_read_like_numpy():
    for f, args in ((np.bitwise_and, (np.ones(2), 1)), (np.negative, (np.ones(2, bool),)),
                    (np.invert, (np.ones(2),)), (np.left_shift, (np.ones(2), 1)),
                    (np.subtract, (np.ones(2, bool), np.ones(2, bool)))):
        with pytest.raises(TypeError) as want:
            f(*args)
        # (bool negative / subtract: NumPy's own advice, `~` / `^`; else its no-loop text,
        # which jitdl follows with the operands' dtypes)
        with pytest.raises(TypeError) as got:
            getattr(jnp, f.__name__)(*args)
        assert str(want.value) in str(got.value), (str(got.value), str(want.value))


def test_integer_negative_powers_raise_value_error():
    msg = "Integers to negative integer powers are not allowed"
    for args in ((np.arange(3), -1), (np.arange(3), np.array([1, -2, 3])), (2, np.array([-1]))):
        with pytest.raises(ValueError, match=msg):
            np.power(*args)
        with pytest.raises(ValueError, match=msg):
            jnp.power(*args)
    same(jnp.power(np.arange(3.0), -1), np_quiet(np.power, np.arange(3.0), -1))
    u = np.array([2, 3], np.uint64)     # (uint64 beside int16 is a float64 loop)
    same(jnp.power(u, np.array([-1, 2], np.int16)), np.power(u, np.array([-1, 2], np.int16)))
    e = np.array([2, -1], np.int8)      # (a base out of int8's range: NumPy's error first)
    for base in (300, -129):
        with pytest.raises(OverflowError, match="out of bounds for int8"):
            np.power(base, e)
        with pytest.raises(OverflowError, match="out of bounds for int8"):
            jnp.power(base, e)


def test_power_with_dtype_checks_the_exponents_its_loop_sees():
    """dtype= picks power's loop: its casting error or missing loop comes first, and the
    exponents are checked as cast to it (uint8 makes -1 a 255; int16 makes 65535 a -1)."""
    x = np.array([2, 3, 5], np.int64)
    for e, dt, casting in ((np.array([1.5, -1.0, 2.0]), np.int16, "same_kind"),
                           (np.array([1, -1, 2]), bool, "unsafe")):
        with pytest.raises(TypeError) as want:
            np.power(x, e, dtype=dt, casting=casting)
        with pytest.raises(type(want.value)):
            jnp.power(x, e, dtype=dt, casting=casting)
    e = np.array([1, -1, 2])
    same(jnp.power(x, e, dtype=np.uint8, casting="unsafe"),
         np.power(x, e, dtype=np.uint8, casting="unsafe"))
    e = np.array([1, 65535, 2], np.int32)
    for m in (np, jnp):
        with pytest.raises(ValueError, match="negative integer powers"):
            m.power(x, e, dtype=np.int16, casting="unsafe")


@jd.compute
def _int_power(X, Y):
    return jnp.power(X, Y)


@jd.compute
def _int_power_scalar(X, n):
    return jnp.power(X * 2, n) + 1


@jd.compute
def _int_power_masked(X, Y):
    return jnp.where(Y >= 0, jnp.power(X, Y, where=Y >= 0), 7)


def test_integer_negative_powers_inside_definitions_raise_at_run_time():
    """The exponent is data: a negative one is NumPy's ValueError when the kernel runs
    (it gave 0 before, also for bases 1 and -1), where NumPy's code raises too."""
    msg = "_int_power.*Integers to negative integer powers are not allowed"
    x = RNG.integers(-3, 4, 3000).astype(np.int32)
    y = RNG.integers(0, 5, 3000).astype(np.int32)
    same(_int_power(x, y), np.power(x, y))
    same(_int_power(x.astype(np.int8), y.astype(np.uint8)), np.power(x.astype(np.int8),
                                                                      y.astype(np.uint8)))
    for k in (0, 1777, 2999):           # (a lone negative exponent anywhere, vector or tail)
        bad = y.copy()
        bad[k] = -1
        with pytest.raises(ValueError):
            np.power(x, bad)
        with pytest.raises(ValueError, match=msg):
            _int_power(x, bad)
    same(_int_power_scalar(x, 3), np.power(x * 2, 3) + 1)
    with pytest.raises(ValueError, match=msg):
        _int_power_scalar(x, -2)
    # (an exponent that is not a signed integer needs no check)
    same(_int_power(x, y.astype(np.float64) - 1),
         np_quiet(np.power, x, y.astype(np.float64) - 1))
    # where= leaves the masked elements uncomputed, as NumPy does
    bad = y - 2
    want = np.full_like(x, 7)
    np.power(x, bad, where=bad >= 0, out=want)
    same(_int_power_masked(x, bad), want)


@jd.compute
def _int_power_unsafe(X, Y):
    return jnp.power(X, Y, dtype=np.int64, casting="unsafe")


def test_integer_power_of_float_exponents_cast_unsafe_checks_the_cast():
    """A float exponent cast to an integer dtype (casting='unsafe') is checked after the
    cast inside a definition too, as NumPy's loop does (it gave 0)."""
    x = RNG.integers(-3, 4, (5, 7)).astype(np.float64)
    y = RNG.integers(0, 4, (5, 7)) + RNG.random((5, 7)) * 0.9
    same(_int_power_unsafe(x, y), np.power(x, y, dtype=np.int64, casting="unsafe"))
    bad = y.copy()
    bad[3, 2] = -1.5
    with pytest.raises(ValueError):
        np.power(x, bad, dtype=np.int64, casting="unsafe")
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        _int_power_unsafe(x, bad)
    bad[3, 2] = -0.5        # (casts to 0: no error)
    same(_int_power_unsafe(x, bad), np.power(x, bad, dtype=np.int64, casting="unsafe"))


def test_broadcasting_lists_and_scalars():
    a, b = RNG.standard_normal((3, 1)), RNG.standard_normal(4)
    same(jnp.hypot(a, b), np.hypot(a, b))
    same(jnp.add([1, 2, 3], 1.5), np.add([1, 2, 3], 1.5))
    c = RNG.standard_normal((2, 1, 4)) > 0
    same(jnp.where(c, a, b), np.where(c, a, b))
    same(jnp.where(c, 1, 2.0), np.where(c, 1, 2.0))
    r = jnp.exp(1.5)
    assert type(r) is np.float64 and r == np.exp(1.5)
    with pytest.raises(ValueError, match="could not be broadcast"):
        jnp.add(np.ones(3), np.ones(4))


def test_out_and_dtype_arguments():
    a, b = RNG.standard_normal(5), RNG.standard_normal(5)
    out = np.empty(5)
    assert jnp.multiply(a, b, out=out) is out
    same(out, a * b)
    out32 = np.empty(5, np.float32)
    jnp.exp(a, out=out32)
    same(out32, np.exp(a).astype(np.float32), rtol=1e-7)
    same(jnp.add(np.arange(5, dtype=np.int8), 1, dtype=np.float32),
         np.add(np.arange(5, dtype=np.int8), 1, dtype=np.float32))
    with pytest.raises(TypeError, match="same_kind"):
        jnp.divide(a, b, out=np.empty(5, np.int64))


def test_round_clip_nan_to_num_sinc():
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, 1.2345, -7.655, np.nan, np.inf])
    for d in (0, 2, -1):
        same(jnp.round(x * 10, d), np.round(x * 10, d))
    ints = np.array([15, 25, -15, -25, 14, 16, 7], np.int32)
    same(jnp.round(ints, -1), np.round(ints, -1))
    same(jnp.around(ints), np.around(ints))
    with pytest.raises(TypeError, match="decimals"):
        jnp.round(x, 1.5)
    same(jnp.clip(x, -1, 2), np.clip(x, -1, 2))
    same(jnp.clip(x, min=0.0), np.clip(x, min=0.0))
    same(jnp.clip(x, None, 1.0), np.clip(x, None, 1.0))
    same(jnp.clip(ints, np.int64(0), 20), np.clip(ints, np.int64(0), 20))
    same(jnp.nan_to_num(x), np.nan_to_num(x))
    same(jnp.nan_to_num(x.astype(np.float32), nan=-1.0, posinf=9.0),
         np.nan_to_num(x.astype(np.float32), nan=-1.0, posinf=9.0))
    for a in (x.copy(), x.astype(np.float32)[::-1], np.stack([x, -x]).T):   # in place
        b = a.copy()
        assert jnp.nan_to_num(a, copy=False, neginf=-3.0) is a
        same(a, np.nan_to_num(b, copy=False, neginf=-3.0))
    assert jnp.nan_to_num(ints, copy=False) is ints
    with pytest.raises(ValueError):             # (NumPy's: a list cannot be changed in place)
        jnp.nan_to_num([1.0, np.nan], copy=False)
    same(jnp.sinc(X[:60]), np.sinc(X[:60]))
    for got, want in zip(jnp.where(X > 0), np.where(X > 0)):    # numpy.nonzero
        same(got, want)
    with pytest.raises(ValueError, match="both or neither"):
        jnp.where(x > 0, x)

    @jd.compute
    def f(A):
        return jnp.where(A > 0)
    with pytest.raises(TypeError, match="depends on the data"):
        f(x)


def test_status_covers_every_export():
    for mod in (_ufuncs, _reductions):
        assert set(mod.STATUS) == set(mod.__all__)
        assert all(v == "done" or v.startswith(("done", "partial:")) for v in mod.STATUS.values())
        for n in mod.__all__:
            assert getattr(jnp, n).__doc__


# -- reductions -----------------------------------------------------------------------------
A = RNG.standard_normal((4, 5, 6))
A_NAN = A.copy()
A_NAN[1, 2, 3] = A_NAN[2, 0, 1] = np.nan
A_INT = RNG.integers(-50, 50, (4, 5, 6)).astype(np.int8)

REDUCTIONS = ["sum", "prod", "max", "min", "argmax", "argmin", "ptp", "all", "any",
              "count_nonzero", "mean", "var", "std", "average", "nansum", "nanmax",
              "nanmin", "nanmean"]


@pytest.mark.parametrize("name", REDUCTIONS)
def test_reductions_against_numpy(name):
    jf, nf = getattr(jnp, name), getattr(np, name)
    a = A * 0.3 + 1 if name == "prod" else A_NAN
    r, e = jf(a), np_quiet(nf, a)                    # axis=None: a NumPy scalar
    assert type(r) is type(e)
    same(r, e, rtol=1e-12)
    if name in ("argmax", "argmin"):
        configs = [dict(axis=1), dict(axis=-1, keepdims=True)]
    else:
        configs = [dict(axis=(0, 2), keepdims=True), dict(axis=-2)]
    for kw in configs:
        same(jf(a, **kw), np_quiet(nf, a, **kw), rtol=1e-12)
    same(jf(A_INT, axis=1), nf(A_INT, axis=1), rtol=1e-12)


def test_reduction_dtypes():
    b = np.ones((3, 4), bool)
    for name, a in (("sum", b), ("prod", b), ("sum", A_INT), ("mean", A_INT), ("var", A_INT),
                    ("std", A.astype(np.float32)), ("max", A_INT), ("all", A), ("any", A_INT)):
        e = getattr(np, name)(a, axis=0)
        same(getattr(jnp, name)(a, axis=0), e, rtol=1e-6 if e.dtype == np.float32 else 1e-13)
    u = np.array([200, 100], np.uint8)
    assert jnp.sum(u) == 300 and jnp.sum(u).dtype == np.sum(u).dtype == np.uint64  # NumPy's
    same(jnp.sum(A_INT, axis=2, dtype=np.float32), np.sum(A_INT, axis=2, dtype=np.float32))
    same(jnp.mean(A_INT, dtype=np.float32), np.mean(A_INT, dtype=np.float32), rtol=1e-6)


def test_float32_sums_accumulate_in_float64():
    a = np.full(1 << 20, 0.1, np.float32)
    exact = float(np.float32(0.1)) * (1 << 20)
    assert abs(float(jnp.sum(a)) - exact) <= abs(float(np.sum(a)) - exact) + 1e-3
    assert jnp.sum(a).dtype == np.float32


def test_reduction_options():
    same(jnp.var(A, axis=0, ddof=1), np.var(A, axis=0, ddof=1))
    same(jnp.std(A_INT, ddof=2, keepdims=True), np.std(A_INT, ddof=2, keepdims=True))
    same(jnp.sum(A, axis=1, initial=3.0), np.sum(A, axis=1, initial=3.0))
    same(jnp.max(A, axis=1, initial=0.5), np.max(A, axis=1, initial=0.5))
    m = A > 0
    same(jnp.sum(A, axis=1, where=m), np.sum(A, axis=1, where=m))
    same(jnp.mean(A, axis=2, where=m), np.mean(A, axis=2, where=m))
    same(jnp.max(A, axis=0, where=m, initial=-9.0), np.max(A, axis=0, where=m, initial=-9.0))
    same(jnp.all(A, axis=0, where=m), np.all(A, axis=0, where=m))
    same(jnp.average(A, axis=0, weights=np.arange(1.0, 5.0)),
         np.average(A, axis=0, weights=np.arange(1.0, 5.0)))
    same(jnp.min([[3, 1], [2, 5]], axis=0), np.min([[3, 1], [2, 5]], axis=0))
    out = np.empty((4, 6))
    assert jnp.mean(A, axis=1, out=out) is out
    same(out, np.mean(A, axis=1))
    all_nan = np.full((2, 3), np.nan)
    same(jnp.nanmax(all_nan, axis=1), np_quiet(np.nanmax, all_nan, axis=1))
    assert np.argmax([1.0, np.nan, 3.0, np.nan]) == jnp.argmax(np.array([1.0, np.nan, 3.0, np.nan])) == 1


_EMPTY_MSG = {"max": "zero-size array to reduction operation maximum which has no identity",
              "min": "zero-size array to reduction operation minimum which has no identity",
              "ptp": "zero-size array to reduction operation maximum which has no identity",
              "nanmax": "zero-size array to reduction operation fmax which has no identity",
              "nanmin": "zero-size array to reduction operation fmin which has no identity",
              "argmax": "attempt to get argmax of an empty sequence",
              "argmin": "attempt to get argmin of an empty sequence"}


@pytest.mark.parametrize("name", sorted(_EMPTY_MSG))
def test_reductions_without_identity_over_an_empty_axis(name):
    """Eagerly as NumPy (ValueError); inside a dynamic definition, where the axis's size
    is symbolic, the kernel checks it at run time (NumPy's ValueError and message)
    instead of returning the identity (-inf) or index 0."""
    fn = getattr(jnp, name)
    f = jd.compute(dynamic=True)(lambda X: fn(X, axis=1) * 2)
    g = jd.compute(dynamic=True)(lambda X: fn(X) + 1)           # every axis
    for shape in ((3, 5), (1, 4), (2, 1)):
        x = RNG.standard_normal(shape) + 0.5
        same(f(x), getattr(np, name)(x, axis=1) * 2)
        same(g(x), getattr(np, name)(x) + 1)
    for shape, axis in (((3, 0), 1), ((0, 3), 0), ((0, 3), None), ((3, 0), -1), ((2, 0, 2), (0, 1))):
        if name.startswith("arg") and isinstance(axis, tuple):
            continue
        with pytest.raises(ValueError, match=_EMPTY_MSG[name]):
            np_quiet(getattr(np, name), np.empty(shape), axis=axis)
        with pytest.raises(ValueError, match=_EMPTY_MSG[name]):
            fn(np.empty(shape), axis=axis)
    for x in (np.empty((3, 0)), np.empty((1, 0))):
        with pytest.raises(ValueError, match=_EMPTY_MSG[name]):
            f(x)
        with pytest.raises(ValueError, match=_EMPTY_MSG[name]):
            g(x)
    with pytest.raises(ValueError, match=_EMPTY_MSG[name]):
        g(np.empty((0, 3)))
    same(f(np.empty((0, 3))), getattr(np, name)(np.empty((0, 3)), axis=1) * 2)
    assert len(f.cache_info()["events"]) <= 3       # (3, n), (1, n), (n, 1) patterns


def test_reduction_errors():
    empty = np.zeros((0, 3))
    for name, msg in (("max", "zero-size array to reduction operation maximum which has no "
                              "identity"),
                      ("min", "zero-size array to reduction operation minimum"),
                      ("argmax", "attempt to get argmax of an empty sequence")):
        with pytest.raises(ValueError, match=msg):
            getattr(np, name)(empty, axis=0)
        with pytest.raises(ValueError, match=msg):
            getattr(jnp, name)(empty, axis=0)
    same(jnp.sum(empty, axis=0), np.sum(empty, axis=0))
    with pytest.raises(np.exceptions.AxisError, match="axis 3 is out of bounds"):
        jnp.sum(A, axis=3)
    with pytest.raises(ValueError, match="duplicate value in 'axis'"):
        jnp.sum(A, axis=(1, -2))
    with pytest.raises(ValueError, match="where mask"):
        jnp.max(A, where=A > 0)
    for name in ("argmax", "argmin"):               # one axis only, as NumPy
        with pytest.raises(TypeError, match="'tuple' object cannot be interpreted as an"):
            getattr(np, name)(A, axis=(0, 1))
        with pytest.raises(TypeError, match="'tuple' object cannot be interpreted as an"):
            getattr(jnp, name)(A, axis=(0, 1))


# -- fused inside definitions ---------------------------------------------------------------
def test_unary_family_fused():
    @jd.compute
    def f(X, Y):
        t = jnp.arcsinh(jnp.add(X, Y))
        return jnp.multiply(jnp.log1p(jnp.cosh(t)), jnp.cbrt(jnp.sign(X)))
    x, y = RNG.standard_normal((5, 7)), RNG.standard_normal(7)
    same(f(x, y), np.log1p(np.cosh(np.arcsinh(x + y))) * np.cbrt(np.sign(x)), rtol=1e-14)


def test_masked_reductions_of_fortran_and_permuted_arrays_are_laid_out_as_numpys():
    """A reduction with where= of a Fortran or permuted array, and a mask of its layout
    (a > 0 of it), is laid out as NumPy's (np.sum(a, axis=0, where=a > 0) of a Fortran
    (4, 5, 6) array is Fortran-ordered): jd.numpy copied both into C order and gave a
    C-ordered result. Values are NumPy's, every element written; a mask in another order
    than a's keeps NumPy's C-ordered answer."""
    b = RNG.standard_normal((4, 5, 6))
    for a in (np.asfortranarray(b), b.transpose(2, 0, 1), b.transpose(1, 2, 0)):
        masks = (a > -0.3, np.ascontiguousarray(a > -0.3))
        for mask, name, axis, keepdims in itertools.product(
                masks, ("sum", "max", "min", "mean", "std", "any"), (0, 1, (0, 2), None),
                (False, True)):
            kw = {"axis": axis, "keepdims": keepdims, "where": mask}
            if name in ("max", "min"):
                kw["initial"] = -5.0 if name == "max" else 5.0
            x = a > 0 if name in ("all", "any") else a
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                got, want = getattr(jnp, name)(x, **kw), getattr(np, name)(x, **kw)
            assert type(got) is type(want)
            same(got, want, rtol=1e-12)
            if isinstance(want, np.ndarray):
                assert got.strides == want.strides, (a.strides, name, axis, keepdims)


def test_binary_comparison_where_family_fused():
    @jd.compute
    def f(X, Y):
        big = jnp.logical_and(jnp.greater(X, 0.2), jnp.isfinite(Y))
        return jnp.where(big, jnp.hypot(X, Y), jnp.clip(jnp.fmax(X, Y), -0.5, 0.5))
    x, y = RNG.standard_normal((6, 8)), RNG.standard_normal((6, 8))
    y[0, :3] = np.nan
    e = np.where((x > 0.2) & np.isfinite(y), np.hypot(x, y), np.clip(np.fmax(x, y), -0.5, 0.5))
    same(f(x, y), e, rtol=1e-15)


def _matches(a, X):
    """A helper the capture does not rewrite: `a == X` reaches the tensor reflected."""
    return jnp.where(a == X, 10.0, 0.0) + (X == a) + (a != X) * 100.0 + (X != a) * 1000.0


def test_a_scalar_argument_compared_with_a_tensor_in_a_helper():
    @jd.compute
    def f(X, a: float):
        return _matches(a, X) + _matches(a * 2.0, X)
    x = RNG.integers(0, 4, 40).astype(np.float64)
    for a in (1.0, 2.0):
        want = sum(np.where(b == x, 10.0, 0.0) + (x == b) + (b != x) * 100.0 + (x != b) * 1000.0
                   for b in (a, a * 2.0))
        same(f(x, a), want)


def test_integer_family_fused():
    @jd.compute
    def f(A, B):
        return jnp.bitwise_xor(jnp.right_shift(A, jnp.remainder(B, 9)),
                               jnp.floor_divide(A, B))
    a = RNG.integers(-100, 100, 50).astype(np.int32)
    b = RNG.integers(-10, 10, 50).astype(np.int32)
    same(f(a, b), np_quiet(lambda: np.right_shift(a, b % 9) ^ (a // b)))


def test_reduction_family_fused():
    @jd.compute
    def f(X):
        z = jnp.subtract(X, jnp.mean(X, axis=1, keepdims=True))
        e = jnp.exp(jnp.subtract(z, jnp.max(z, axis=1, keepdims=True)))
        return jnp.divide(jnp.sum(e, axis=1), jnp.std(X, axis=1, ddof=1))

    @jd.compute
    def g(X):
        return jnp.argmax(jnp.square(X), axis=0)
    x = RNG.standard_normal((6, 9))
    z = x - x.mean(axis=1, keepdims=True)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    same(f(x), e.sum(axis=1) / x.std(axis=1, ddof=1), rtol=1e-13)
    same(g(x), np.argmax(x * x, axis=0))


@pytest.mark.parametrize("dt", ["float32", "float64"])
def test_array_api_special_cases_numpy_does_not_follow(dt):
    """The array API standard's special cases where NumPy differs (found by running
    data-apis/array-api-tests' test_special_cases.py against jd.numpy): signbit of -NaN
    is True (the bit, not x < 0), and floor_divide with an infinite operand is x1 / x2
    (inf // 2 = inf, 3 // -inf = -0.0; NumPy: NaN and -1)."""
    n = np.array([-np.nan, np.nan, -0.0, 0.0, -1.0, np.inf, -np.inf] * 3, dt)
    np.testing.assert_array_equal(jnp.signbit(n), np.signbit(n))
    assert jnp.signbit(n)[0] and not jnp.signbit(n)[1]
    a = np.array([np.inf, np.inf, -np.inf, -np.inf, 3.0, -3.0, 5.0, -5.0, 7.5] * 3, dt)
    b = np.array([2.0, -2.0, 2.0, -2.0, -np.inf, np.inf, np.inf, -np.inf, -2.0] * 3, dt)
    r = jnp.floor_divide(a, b)
    want = np.array([np.inf, -np.inf, -np.inf, np.inf, -0.0, -0.0, 0.0, 0.0, -4.0] * 3, dt)
    np.testing.assert_array_equal(r, want)
    np.testing.assert_array_equal(np.signbit(r), np.signbit(want))


@pytest.mark.parametrize("divisor", [2.0, -2.0, np.inf, -np.inf, 3])
def test_remainder_by_a_number_keeps_the_divisors_zero_sign(divisor):
    """remainder(x, 2.0) is +0.0 where x is a multiple of 2 (the divisor's sign): the
    builder's select(signbit(b), -0.0, 0.0) was folded to -0.0 because Const(-0.0) ==
    Const(0.0) (found by review)."""
    x = np.array([4.0, -4.0, 0.0, -0.0, 3.0, -3.0, 5.5] * 3)
    for dt in ("float32", "float64"):
        a = x.astype(dt)
        same(jnp.remainder(a, divisor), np_quiet(np.remainder, a, divisor))
    assert not np.signbit(jnp.remainder(4.0, 2.0))


def test_review_battery_semantics():
    """NumPy's answers found by an adversarial battery: log10 of float32 subnormals; the
    two-bound clip keeps -0.0 and a NaN bound wins; Python-int clip bounds beyond the
    dtype's range on the side that clips nothing; max/min with initial= over nothing;
    axis 0 or -1 of a 0-d input; round of bools (NumPy's float16)."""
    x = np.array([1.4e-45, 1e-40, 1e-38, 1e-30, 1000, 0.1], np.float32)
    np.testing.assert_allclose(jnp.log10(x), np.log10(x), rtol=2e-7)
    z = np.array([-0.0, 0.0, np.nan, 1.0, -2.0, 0.5, -np.inf])
    for lo, hi in ((0.0, 0.0), (-0.0, -0.0), (np.nan, 2.0), (0.0, np.nan), (3.0, 1.0)):
        got, want = jnp.clip(z, lo, hi), np.clip(z, lo, hi)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    i8, u8 = np.array([1, 50, 120], np.int8), np.array([1, 2, 5], np.uint8)
    for case in (lambda m: m.clip(i8, -1000, 1000), lambda m: m.clip(u8, -1, 3),
                 lambda m: m.clip(u8, None, 300), lambda m: m.clip(u8, 1, 2 ** 70)):
        same(case(jnp), case(np))
    for case in (lambda m: m.clip(u8, 300, 400), lambda m: m.clip(u8, None, -1)):
        with pytest.raises(OverflowError):
            case(np)
        with pytest.raises(OverflowError):
            case(jnp)
    for case in (lambda m: m.max(np.array([]), initial=-5.0),
                 lambda m: m.min(np.zeros((0, 3)), axis=0, initial=2),
                 lambda m: m.max(np.zeros((0, 3), np.int8), axis=0, initial=5),
                 lambda m: m.max(np.zeros((2, 0), np.float32), axis=1, initial=5,
                                 keepdims=True)):
        same(case(jnp), case(np))
    s = np.array(5.0)
    for fn in ("sum", "prod", "max", "min", "all", "any", "argmax", "argmin", "ptp",
               "count_nonzero", "nansum", "nanmax", "nanmean"):
        for ax in (0, -1):
            same(getattr(jnp, fn)(s, axis=ax), getattr(np, fn)(s, axis=ax))
    for fn in ("mean", "var", "std"):
        with pytest.raises(np.exceptions.AxisError):
            getattr(jnp, fn)(s, axis=0)
    assert jnp.round(np.array([True, False])).dtype == np.round(np.array([True])).dtype
    with pytest.raises(TypeError, match="'list' object cannot be interpreted"):
        jnp.sum(np.ones((2, 3)), axis=[0])


def test_reduction_masks_and_out_follow_numpy():
    """where= of a reduction must be bool and broadcast to the input (not the other way);
    a reduction's out= takes the result unsafely cast but of the exact shape; argmax's
    out= must cast safely to the index dtype; a ufunc's where= with out= keeps out's
    elements where the mask is False."""
    a = np.ones((2, 3))
    for case in (lambda m: m.sum(np.array([[1., 2, 3]]), axis=1,
                                 where=np.array([[True], [False]])),
                 lambda m: m.var(a, axis=0, where=np.ones((2, 1, 3), bool)),
                 lambda m: m.sum(a, axis=1, where=np.ones((2, 4), bool)),
                 lambda m: m.sum(a, axis=0, out=np.zeros((1, 3))),
                 lambda m: m.argmax(a, axis=0, out=np.zeros(3))):
        with pytest.raises((ValueError, TypeError)) as want:
            case(np)
        base = ValueError if isinstance(want.value, ValueError) else TypeError
        with pytest.raises(base):
            case(jnp)
    with pytest.raises(TypeError, match="to dtype\\('bool'\\)"):
        jnp.sum(np.ones(3), where=np.array([1, 0, 1]))
    with pytest.raises(TypeError, match="to dtype\\('bool'\\)"):   # (before max's identity)
        jnp.max(np.ones(3), where=np.array([1, 0, 1]))
    for case in (lambda m: m.sum(a, axis=0, out=np.zeros(3, np.int64)),
                 lambda m: m.mean(a.astype(np.int64), axis=0, out=np.zeros(3, np.int64)),
                 lambda m: m.prod(a, axis=0, out=np.zeros(3, bool)),
                 lambda m: m.argmax(a, axis=0, out=np.zeros(3, np.int32)),
                 lambda m: m.mean(a, axis=0, where=np.array([True, False, True])),
                 lambda m: m.add(np.arange(5.), 2, out=np.zeros(5), where=np.arange(5) > 2),
                 lambda m: m.exp(np.arange(5.), out=np.ones(5), where=np.arange(5) > 2),
                 lambda m: m.add(np.arange(5.), 2, out=np.zeros(5, np.int64),
                                 where=np.arange(5) > 2, casting="unsafe")):
        with warnings.catch_warnings():         # (NumPy's mean of an empty column)
            warnings.simplefilter("ignore", RuntimeWarning)
            same(case(jnp), case(np))


def test_reduction_out_dtype_takes_part():
    """A float32 array's sum, mean, variance or deviation into a float64 out= is computed
    in float64, as NumPy's reduction picks its loop with out's dtype; nanmean of an integer
    array is its mean (an integer out= or dtype= as NumPy's); of a float array it refuses
    an integer dtype=."""
    a = np.random.default_rng(5).standard_normal((4000, 3)).astype(np.float32)
    for name in ("sum", "mean", "nansum", "nanmean"):
        got, want = np.zeros(3), np.zeros(3)
        getattr(jnp, name)(a, axis=0, out=got)
        getattr(np, name)(a, axis=0, out=want)
        same(got, want, atol=1e-9)
    big = a.reshape(750, 16) * 1000 + 1e4   # (float32 rounding of the result: ~6e-8)
    for name in ("var", "std"):             # (NumPy sums the squares into out's float64)
        got, want = np.zeros(16), np.zeros(16)
        getattr(jnp, name)(big, axis=0, out=got)
        getattr(np, name)(big, axis=0, out=want)
        np.testing.assert_allclose(got, want, rtol=1e-8, err_msg=name)
    i = np.arange(12).reshape(4, 3)
    for case in (lambda m: m.nanmean(i, axis=0, out=np.zeros(3, np.int64)),
                 lambda m: m.nanmean(i, axis=1, dtype=np.int8)):
        same(case(jnp), case(np))
    with pytest.raises(TypeError, match="dtype must be inexact"):
        jnp.nanmean(a, dtype=np.int32)


def test_var_and_std_take_numpys_mean_keyword():
    """NumPy 2's var/std(mean=...) was a TypeError (unexpected keyword argument 'mean');
    on arrays it is NumPy's function, inside a definition an error naming mean=."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((4, 6)) * 3 + 1
    i = rng.integers(-50, 50, (4, 6)).astype(np.int16)
    for a in (x, x.astype(np.float32), i):
        for kw in (dict(axis=1, keepdims=True), dict(axis=1, keepdims=True, ddof=1),
                   dict(axis=(0, 1), keepdims=True, correction=2)):
            m = np.mean(a, axis=kw["axis"], keepdims=True)
            for name in ("var", "std"):
                for mean in (m, m + 0.5):
                    same(getattr(jnp, name)(a, mean=mean, **kw),
                         getattr(np, name)(a, mean=mean, **kw))

    @jd.compute
    def f(X, M):
        return jnp.var(X, axis=1, keepdims=True, mean=M)
    with pytest.raises(jd.errors.ArgumentError, match="mean= is not supported inside a"):
        f(x, x.mean(axis=1, keepdims=True))


def test_ptp_into_an_out_of_another_dtype_is_numpys():
    """NumPy's ptp puts the max into out= and subtracts the min there: into a wider out=
    the difference does not wrap (int8 [127, -8] into int64 gave int8's -121 for 135),
    and a bool array's ptp into an integer out= is its count of both values."""
    rng = np.random.default_rng(11)
    for dt, odts in (("int8", ("int64", "int16", "float32")),
                     ("int32", ("int64", "float64", "int8")), ("uint8", ("int8", "float32")),
                     ("int64", ("float64", "int8")), ("float32", ("float64",)),
                     ("bool", ("int64", "uint8", "float64"))):
        x = (rng.standard_normal((3, 5)) * 100).astype(dt)
        if dt in ("int8", "int32", "int64"):
            x[0, :2] = np.iinfo(dt).max, np.iinfo(dt).min
        for odt in odts:
            for axis, shape in ((1, (3,)), (None, ())):
                want, got = np.zeros(shape, odt), np.full(shape, 7, odt)
                assert jnp.ptp(x, axis=axis, out=got) is got
                np.ptp(x, axis=axis, out=want)
                np.testing.assert_array_equal(got, want, err_msg=f"{dt} -> {odt}")


def test_second_review_semantics():
    """ptp and std cast into out= as their last ufunc does (same_kind), nanmean wants an
    inexact out=; dot's out= dtype treats a Python number as NumPy does; clip with dtype=
    clamps Python-int bounds beyond the loop dtype's range; power with an integer dtype=
    refuses negative exponents; repeat refuses float array counts; np.integer axes."""
    a = np.random.default_rng(3).random((3, 4)) * 10
    for case in (lambda m: m.ptp(a, axis=1, out=np.zeros(3, int)),
                 lambda m: m.std(a, axis=1, out=np.zeros(3, int)),
                 lambda m: m.nanmean(a, axis=1, out=np.zeros(3, int)),
                 lambda m: m.power(np.array([1, 2, 3]), -1, dtype=np.int64),
                 lambda m: m.power(np.array([1., 2, 3]), -1, dtype=np.int64, casting="unsafe"),
                 lambda m: m.repeat(np.arange(3), np.array([1.5, 1, 1])),
                 lambda m: m.concatenate([a, a], out=np.zeros((6, 4)), dtype=np.float64)):
        with pytest.raises((TypeError, ValueError)) as want:
            case(np)
        with pytest.raises(ValueError if isinstance(want.value, ValueError) else TypeError):
            case(jnp)
    i8 = np.array([-128, 0, 127], np.int8)
    for case in (lambda m: m.var(a, axis=1, out=np.zeros(3, int)),
                 lambda m: m.dot(5, np.array([1, 2], np.int8), out=np.zeros(2, np.int64)),
                 lambda m: m.clip(i8, -1000, 1000, dtype=np.int8),
                 lambda m: m.clip(i8, -100000, 100000, dtype=np.int16),
                 lambda m: m.power(np.array([1, 2, 3]), -1, dtype=np.float64),
                 lambda m: m.sum(np.array(2.5), axis=np.int64(0)),
                 lambda m: m.less(np.arange(4), 2, dtype=bool)):
        same(case(jnp), case(np))

    @jd.compute
    def f(X):
        return jnp.diff(X, prepend=0.0) + jnp.take(X, [], axis=0).sum()
    x = np.random.default_rng(4).random((3, 4))
    same(f(x), np.diff(x, prepend=0.0))


def test_ufunc_options_and_gufunc_out():
    """order= and a non-bool where= are NumPy's errors; matmul broadcasts into a larger
    out= over its loop axes (a core axis of the wrong size is NumPy's ValueError); clip of
    a list takes the list's dtype for its bounds."""
    a, b = np.random.default_rng(5).random((2, 4)), np.random.default_rng(6).random((4, 2))
    with pytest.raises(ValueError, match="order must be one of"):
        jnp.add(a, 1, order="X")
    with pytest.raises(TypeError, match="to dtype\\('bool'\\)"):
        jnp.add(np.ones(3), 1, where=np.array([1, 0, 1]))
    same(jnp.add(a, 1, order="C"), np.add(a, 1, order="C"))
    same(jnp.matmul(a, b, out=np.zeros((3, 2, 2))), np.matmul(a, b, out=np.zeros((3, 2, 2))))
    with pytest.raises(ValueError):
        jnp.matmul(a, b, out=np.zeros((2, 1)))
    same(jnp.clip([1, 2, 300], 0, 2 ** 70), np.clip([1, 2, 300], 0, 2 ** 70))


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float32_sin_cos_within_two_ulp(name):
    """float32 sin and cos are reduced and evaluated inline (vectorised) up to |x| = 65536
    and by libm beyond (and for inf, NaN): within 2 ulp of the float64 result rounded
    everywhere, exactly NumPy on the special values, also where one lane of a vector is
    beyond the inline range and the others are not."""
    x = np.concatenate([RNG.uniform(-4, 4, 3000), RNG.uniform(-7e4, 7e4, 3000),
                        np.exp(RNG.uniform(0, 85, 500)) * RNG.choice([-1, 1], 500),
                        (np.arange(1, 3000) * (np.pi / 2))]).astype(np.float32)
    x = np.concatenate([x, np.nextafter(x, np.float32(0)), np.float32(65536.0)[None]])
    got = getattr(jnp, name)(x)
    want = getattr(np, name)(x.astype(np.float64))
    ulp = np.spacing(np.abs(want.astype(np.float32))).astype(np.float64)
    assert got.dtype == np.float32
    assert np.max(np.abs(got - want) / ulp) <= 2.0
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 65536.0,
                        np.nextafter(65536.0, 1e9), -1e20, 3e38, 1.0, -1.0, 0.5, -2.0,
                        1e-20, 100.0, 1e4, -1e4, 3.0], np.float32)
    for shift in range(8):              # the big lanes in every position of a vector
        s = np.roll(special, shift)
        same(getattr(jnp, name)(s), np_quiet(getattr(np, name), s), rtol=2.4e-7)


@pytest.mark.cpu_only
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["sinh", "cosh"])
def test_sinh_cosh_are_vector_code_within_an_ulp(name, dt):
    """sinh and cosh are inline vector code from one reduction |x| = n ln2 + r (no second
    exponential, no division): within an ulp of the true value (x86's long double
    functions; float32: the C library's double function rounded) across scales, at the
    reduction's boundaries (n = 0 / 1 at ln2 / 2, where sinh's two terms nearly cancel),
    near overflow (710.47 and 89.41), for denormals; sinh
    odd with -0 kept, +-inf and NaN exactly NumPy's, in every lane position."""
    import math
    ref = getattr(math, name)
    # (glibc's double sinh is up to 1.7 ulp off: float64 is judged against long double,
    # where it has 64 bits, or held to 2 ulp of libm)
    wide = dt == np.float64 and np.finfo(np.longdouble).nmant >= 63
    h = math.log(2.0) / 2
    x = np.concatenate([RNG.standard_normal(4000) * s for s in (1e-9, 0.2, 1.0, 5.0, 60.0)]
                       + [RNG.uniform(-711, 711, 4000), RNG.uniform(h - 1e-3, h + 1e-3, 2000),
                          RNG.uniform(-90, 90, 4000), SPECIAL,
                          [h, np.nextafter(h, 0), np.nextafter(h, 1), 3 * h, 710.4758, 710.476,
                           -710.4758, 89.41, 89.42, -89.41, 88.72, 5e-324, -5e-324, 1e-45,
                           -1e-45, 2.0 ** -1022, 36.7, 36.8, 1e300, -1e300]])
    with np.errstate(all="ignore"):
        x = x.astype(dt)
        want = getattr(np, name)(x)

    def value(v):
        try:
            return ref(v)
        except OverflowError:
            return math.copysign(math.inf, v) if name == "sinh" else math.inf
    with np.errstate(over="ignore"):
        exact = np.array([value(float(v)) if np.isfinite(v) else np.nan for v in x]).astype(dt)
        if wide:
            exact = getattr(np, name)(x.astype(np.longdouble)).astype(dt)
    for shift in (0, 1, 5):
        with np.errstate(all="ignore"):
            got = np.roll(getattr(jnp, name)(np.roll(x, shift)), -shift)
        assert got.dtype == dt
        special = ~np.isfinite(x) | (x == 0)
        np.testing.assert_array_equal(got[special], want[special])
        np.testing.assert_array_equal(np.signbit(got[special & ~np.isnan(x)]),
                                      np.signbit(want[special & ~np.isnan(x)]))
        assert _ulps(got[~special], exact[~special]).max() <= (2 if dt == np.float64 and
                                                             not wide else 1)


def _ulps(got, want):
    """Distance in units in the last place of `want`'s dtype (0 where both are NaN or the
    same infinity)."""
    got, want = np.asarray(got), np.asarray(want)
    both = (np.isnan(got) & np.isnan(want)) | (got == want)
    with np.errstate(invalid="ignore", over="ignore"):
        d = np.abs(got.astype(np.float64) - want.astype(np.float64)) / np.spacing(
            np.abs(want)).astype(np.float64)
    return np.where(both, 0.0, np.nan_to_num(d, nan=np.inf))


def test_review_cases_float16_arctanh_clip_zeros():
    """From a review: a Python bool is a narrow operand (NumPy: float16); out= with narrow
    inputs gets NumPy's float16 arithmetic; inside a definition a NumPy uint8 scalar in a
    float function is a float32 constant; arctanh near -1 keeps its digits; clip with
    one bound lets the bound win a tie of zeros (NumPy's)."""
    for name in ("sin", "sqrt", "exp2"):
        got, want = getattr(jnp, name)(True), getattr(np, name)(True)
        assert type(got) is type(want) and got == want
    u8 = np.array([1, 2, 5], np.uint8)
    out = np.empty(3, np.float32)
    jnp.sin(u8, out=out)
    np.testing.assert_array_equal(out, np.sin(u8, out=np.empty(3, np.float32)))

    @jd.compute
    def h(x):
        return x + jnp.sqrt(np.uint8(4))
    same(h(np.ones(3, np.float32)), np.full(3, 3.0, np.float32))
    for dt in (np.float32, np.float64):
        a = np.array([-1, 1], dt) * np.nextafter(dt(1), dt(0))
        same(jnp.arctanh(a), np.arctanh(a), rtol=4e-7 if dt == np.float32 else 4e-15)
    z = np.array([0.0, -0.0, np.nan, 1.0, -1.0])
    for lo, hi in ((-0.0, None), (0.0, None), (None, 0.0), (None, -0.0), (np.nan, None),
                   (None, np.nan)):
        for x in (z, z.astype(np.float32)):
            same(jnp.clip(x, lo, hi), np.clip(x, lo, hi))


def test_dtype_and_casting_of_a_definitions_scalar_and_of_0d_arrays():
    """dtype= (and casting=) with a definition's scalar argument (a NumPy scalar passed to
    the definition) crashed with AttributeError ('Var' has no shape); on 0-d arrays the
    dtype check ran NumPy's function on an uninitialised 0-d stand-in, so arctanh or log
    warned about values the call never had."""
    x = RNG.standard_normal(4).astype(np.float32)
    for v in (np.float32(x[0]), np.float32(abs(x[1]))):
        f = jd.compute(lambda X: jnp.exp(X, dtype=np.float64))
        same(f(v), np.exp(v, dtype=np.float64))
        g = jd.compute(lambda X: jnp.isinf(X, dtype=bool) + jnp.add(X, 1, dtype=np.float64))
        same(g(v), np.isinf(v, dtype=bool) + np.add(v, 1, dtype=np.float64))
        h = jd.compute(lambda X: jnp.sqrt(X, casting="unsafe"))
        same(h(abs(v)), np.sqrt(abs(v), casting="unsafe"))
        c = jd.compute(lambda X: jnp.clip(X, -0.5, 0.5, dtype=np.float64))
        same(c(v), np.clip(v, -0.5, 0.5, dtype=np.float64))
    for v in RNG.uniform(-0.99, 0.99, 3):
        a = np.array(v)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for name in ("arctanh", "arcsin", "log1p"):
                same(getattr(jnp, name)(a, dtype=np.float64),
                     getattr(np, name)(a, dtype=np.float64))
                same(getattr(jnp, name)(a, casting="unsafe"),
                     getattr(np, name)(a, casting="unsafe"))


def test_nanmean_of_a_0d_integer_array_refuses_axis_0_as_numpy():
    """NumPy's nanmean of an integer array is its mean, which refuses axis 0 of a 0-d
    array (AxisError); jd.numpy's took it as every axis."""
    for dt in (np.int8, np.int64, bool):
        a = np.array(RNG.integers(0, 5), dt)
        for axis in (0, -1):
            with pytest.raises(np.exceptions.AxisError):
                np.nanmean(a, axis=axis)
            with pytest.raises(np.exceptions.AxisError):
                jnp.nanmean(a, axis=axis)
        same(jnp.nanmean(a, axis=None), np.nanmean(a, axis=None))
    f = np.array(RNG.standard_normal())
    same(jnp.nanmean(f, axis=0), np.nanmean(f, axis=0))


@pytest.mark.parametrize("name", ["sum", "mean", "nansum", "nanmean", "average", "prod", "max"])
def test_reduction_over_no_axes_keeps_numpys_zero_sign(name):
    """axis=() reduces nothing; NumPy's sum still adds each element to 0.0, so a -0.0
    comes back as 0.0 (prod and max keep it): jd.numpy's sum returned -0.0."""
    for dt in (np.float32, np.float64):
        x = RNG.standard_normal((3, 4)).astype(dt)
        x[RNG.random((3, 4)) < 0.5] = -0.0
        x[0, 0] = np.nan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = getattr(np, name)(x, axis=())
        same(getattr(jnp, name)(x, axis=()), want)
        same(jd.compute(lambda X: getattr(jnp, name)(X, axis=()))(x), want)


def test_whole_array_argmin_argmax_first_position():
    """argmin/argmax over every element (two vectorised passes: the extreme, then the
    least position holding it): NumPy's first position, the first NaN's where there is
    one, ties, -0.0 beside 0.0, infinities, every dtype, keepdims, transposed views."""
    rng = np.random.default_rng(5)
    for t in range(48):
        n = int(rng.integers(1, 2500))
        dt = [np.float64, np.float32, np.int8, np.bool_][t % 4]
        x = rng.integers(-3, 3, n).astype(dt) if t % 2 else (rng.standard_normal(n) * 3).astype(dt)
        if x.dtype.kind == "f" and t % 3 == 0:
            x[rng.integers(0, n, 3)] = [np.nan, np.inf, -0.0]
        if x.dtype.kind == "f" and t % 5 == 0:
            x[rng.integers(0, n, 2)] = -np.inf
        x = x.reshape((2, n // 2)).T if n % 2 == 0 and t % 4 == 0 else x
        for fj, fn in ((jnp.argmin, np.argmin), (jnp.argmax, np.argmax)):
            got, want = fj(x), fn(x)
            assert type(got) is type(want) and got == want, (dt, n, got, want)
            if dt == np.float64:
                np.testing.assert_array_equal(fj(x, keepdims=True), fn(x, keepdims=True))
    assert jnp.argmin(np.array([0.0, -0.0])) == 0 and jnp.argmax(np.array([-0.0, 0.0])) == 0


def test_argmin_argmax_along_the_last_axis_first_position():
    """Along the last axis (the same two passes per row): each row's first extreme, the
    first NaN of a row holding one (others unaffected), all-NaN rows, ties, -0.0, every
    dtype and rank, keepdims, a transposed view, and in a definition of any size."""
    rng = np.random.default_rng(6)
    for t in range(24):
        shape = [(int(rng.integers(1, 40)), int(rng.integers(1, 300))),
                 (3, int(rng.integers(1, 9)), int(rng.integers(1, 70)))][t % 2]
        dt = [np.float64, np.float32, np.int16, np.bool_, np.uint8, np.float32][t % 6]
        x = (rng.integers(-2, 3, shape) if t % 3 else rng.standard_normal(shape) * 4).astype(dt)
        if x.dtype.kind == "f":
            x.flat[rng.integers(0, x.size, 4)] = [np.nan, np.inf, -np.inf, -0.0]
            x[0] = np.nan                       # an all-NaN row
        x = np.ascontiguousarray(x.T).T if t % 5 == 0 else x
        for fj, fn in ((jnp.argmin, np.argmin), (jnp.argmax, np.argmax)):
            for kw in ({"axis": -1}, {"axis": x.ndim - 1, "keepdims": True}):
                got, want = fj(x, **kw), fn(x, **kw)
                assert got.dtype == want.dtype and got.shape == want.shape, (dt, shape, kw)
                np.testing.assert_array_equal(got, want, err_msg=f"{dt} {shape} {kw}")

    @jd.compute(dynamic=True)
    def first_min(X):
        return jnp.argmin(X, axis=1)

    for n, m in ((5, 17), (33, 1), (2, 1000)):
        x = rng.standard_normal((n, m))
        x[:, -1] = x.min(axis=1)                # a tie with the last element
        np.testing.assert_array_equal(first_min(x), np.argmin(x, axis=1))
    assert len(first_min.cache_info()["events"]) <= 2     # (n, m) and (n, 1) patterns


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_rad2deg_multiplies_by_numpys_constant(dt):
    """NumPy's rad2deg multiplies by 180 / pi divided in the input's dtype: in float32 that
    is 1 ulp from float32(180 / pi), and so were most results."""
    x = (np.random.default_rng(7).standard_normal(4099) * 100).astype(dt)
    for name in ("rad2deg", "degrees", "deg2rad", "radians"):
        got, want = getattr(jnp, name)(x), getattr(np, name)(x)
        assert got.dtype == want.dtype and np.array_equal(got, want), name


def test_float64_tanh_is_vector_code_within_two_ulp():
    """float64 tanh is Cephes' rational function below |x| = 0.625 and 1 - 2 / (exp(2|x|)
    + 1) above, on every lane (jitdl.codegen.mathlib.tanh): within 2 ulp of the C
    library's tanh (NumPy's own SIMD tanh is within 3), odd (tanh(-0) = -0), +-1 past
    exp's range, NaN for NaN; the lanes around the 0.625 switch and in every position."""
    import math
    x = np.concatenate([RNG.standard_normal(20000) * s for s in (1e-3, 0.3, 1.0, 4.0, 40.0)]
                       + [SPECIAL, np.nextafter(0.625, [0.0, 1.0]), [0.625, -0.625, 5e-324]])
    for shift in (0, 1, 3):
        xs = np.roll(x, shift)
        got = jnp.tanh(xs)
        ref = np.array([math.tanh(v) for v in xs])
        assert got.dtype == np.float64
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(np.signbit(got), np.signbit(ref))
        assert _ulps(got, ref).max() <= 2, _ulps(got, ref).max()
    text = str(jd.compute(lambda X: jnp.tanh(X)).llvm_ir(np.ones(64), optimized=False))
    assert '@"tanh"' not in text and '@"exp"' not in text     # (no libm call per lane)


_EDGES64 = [5e-324, -5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 709.782712893384,
            709.7827128933841, -745.1332191019412, -745.1332191019411, -708.4, 1023.9999999,
            1024.0, -1074.0, -1074.5, -1075.0, -1022.5, -40.0, -40.1, 0.3465735902799726,
            -0.3465735902799726, 1e-17, -1e-17, 1 + 2.0 ** -52, 1 - 2.0 ** -53, -1 + 2.0 ** -53]


@pytest.mark.cpu_only
@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p"])
def test_exp_and_log_families_are_vector_code_within_an_ulp(name, dt):
    """exp, exp2, expm1, log, log2, log10 and log1p are inline vector code (float32 through
    the float64 routines but log2 / log10, jitdl.codegen.mathlib): within an ulp of the C library (log10:
    2; float32 rounded from the double result) over every scale, at the overflow and
    denormal edges, in every vector lane; special values and signs exactly NumPy's, and
    exact where the answer is (log2(2^k) = k, exp2(k) = 2^k, log10(10^k) = k, exp(1) = e)."""
    import math
    ref = {"exp": math.exp, "exp2": lambda v: math.pow(2.0, v), "expm1": math.expm1,
           "log": math.log, "log2": math.log2, "log10": math.log10, "log1p": math.log1p}[name]
    x = np.concatenate([RNG.standard_normal(4000) * s for s in (1e-12, 1e-3, 0.3, 1.0, 4.0, 40.0)]
                       + [RNG.uniform(-746, 710, 4000), np.exp(RNG.uniform(-700, 700, 4000)),
                          1 + RNG.standard_normal(2000) * 1e-8, 10.0 ** np.arange(-300, 301),
                          SPECIAL, _EDGES64])
    with np.errstate(all="ignore"):
        x = x.astype(dt)
        want = getattr(np, name)(x)

    def value(v):
        try:
            return ref(v)
        except OverflowError:
            return math.inf
        except ValueError:              # (only the special values, compared with NumPy's)
            return math.nan
    with np.errstate(over="ignore"):
        exact = np.array([value(float(v)) for v in x]).astype(dt)
    for shift in (0, 1, 3):
        with np.errstate(all="ignore"):
            got = np.roll(getattr(jnp, name)(np.roll(x, shift)), -shift)
        assert got.dtype == dt
        # (NumPy's AVX-512 float32 exp2 flushes results under 2^-149.5 to zero where the
        # rounded answer is the least denormal: those are held to the exact value instead)
        special = ~np.isfinite(want) | ((want == 0) & (exact == 0))
        signed = special & ~np.isnan(want)      # (NumPy's NaNs differ in sign by dtype)
        np.testing.assert_array_equal(got[special], want[special])
        np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))
        worst = _ulps(got[~special], exact[~special]).max()
        assert worst <= (2 if name == "log10" and dt == np.float64 else 1), worst
    k = np.arange(-1074 if dt == np.float64 else -149, 1024 if dt == np.float64 else 128)
    powers = np.ldexp(1.0, k).astype(dt)
    if name == "log2":
        np.testing.assert_array_equal(jnp.log2(powers), k.astype(dt))
    if name == "exp2":
        np.testing.assert_array_equal(jnp.exp2(k.astype(dt)), powers)
    if name == "log10":
        p = np.arange(0, 23 if dt == np.float64 else 11)
        np.testing.assert_array_equal(jnp.log10((10.0 ** p).astype(dt)), p.astype(dt))
    if name == "exp":
        assert jnp.exp(np.array([1.0], dt))[0] == dt(math.e)
    text = str(jd.compute(lambda X: getattr(jnp, name)(X)).llvm_ir(np.ones(64, dt),
                                                                   optimized=False))
    assert f'@"{name}' not in text and "@llvm.exp." not in text and "@llvm.log." not in text


def _libm_ref(f, x, dt):
    """f (the math module's, i.e. the C library's double function) of each element of x,
    NaN where it raises, rounded to dt."""
    import math

    def one(v):
        try:
            return f(float(v))
        except ValueError:
            return math.nan
    with np.errstate(over="ignore"):
        return np.array([one(v) for v in x]).astype(dt)


def _trig_inputs(name, dt):
    rng = np.random.default_rng(11)
    tiny = 5e-324 if dt == np.float64 else 1e-45
    parts = [rng.standard_normal(8000) * s
             for s in (1e-300, 1e-8, 1e-3, 0.1, 0.5, 1.0, 3.0, 10.0, 1e3, 1e8, 1e300)]
    if name in ("arcsin", "arccos"):        # |x| <= 1, the switch at 1/2, near +-1, beyond
        parts = [rng.uniform(-1, 1, 40000), rng.uniform(0.49, 0.51, 10000),
                 1 - rng.uniform(0, 1e-3, 10000), -1 + rng.uniform(0, 1e-6, 10000),
                 rng.standard_normal(10000) * 1e-8, rng.uniform(-3, 3, 1000)]
    if name == "tan":                       # near multiples of pi/2, past the reduction's range
        k = rng.integers(-10 ** 6, 10 ** 6, 5000)
        parts += [k * (np.pi / 2), np.nextafter(k * (np.pi / 2), 0), rng.uniform(-1e9, 1e9, 5000),
                  rng.uniform(-1e12, 1e12, 50)]
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, tiny, -tiny, 1e-310, 1.0, -1.0, 0.5, -0.5,
               1 + 2 ** -52, -1 - 2 ** -52, 1 - 2 ** -53, 0.66, 0.4142135623730951,
               2.414213562373095, 1e300, -1e300]
    with np.errstate(over="ignore"):
        return np.concatenate(parts + [SPECIAL, special]).astype(dt)


@pytest.mark.parametrize("dt", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["arctan", "arcsin", "arccos", "tan"])
def test_inverse_trig_and_tan_are_vector_code_within_two_ulp(name, dt):
    """arctan, arcsin, arccos and tan are inline vector code (jitdl.codegen.mathlib), no
    C library call per lane: within 2 ulp of the C library's double function (rounded, for
    float32) over many scales, near +-1 and the 1/2 switch (asin, acos), near multiples of
    pi/2 and past the reduction's range (tan: those lanes alone call libm); NaN, signed zeros
    and the exact values where libm has them, in every lane position."""
    import math
    x = _trig_inputs(name, dt)
    ref = _libm_ref({"arctan": math.atan, "arcsin": math.asin, "arccos": math.acos,
                     "tan": math.tan}[name], x, dt)
    for shift in (0, 1, 3):
        xs, want = np.roll(x, shift), np.roll(ref, shift)
        got = getattr(jnp, name)(xs)
        assert got.dtype == dt
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
        assert _ulps(got, want).max() <= 2, (name, dt, _ulps(got, want).max())
    exact = {"arctan": ([np.inf, -np.inf, -0.0], [np.pi / 2, -np.pi / 2, -0.0]),
             "arcsin": ([1.0, -1.0, -0.0], [np.pi / 2, -np.pi / 2, -0.0]),
             "arccos": ([1.0, -1.0, 0.0], [0.0, np.pi, np.pi / 2]),
             "tan": ([-0.0, 0.0], [-0.0, 0.0])}[name]
    got = getattr(jnp, name)(np.array(exact[0], dt))
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"),
                                  np.array(exact[1], dt).view(f"u{got.itemsize}"))
    text = str(jd.compute(lambda X: getattr(jnp, name)(X)).llvm_ir(
        np.ones(64, dt), optimized=False))
    libm = {"arctan": "atan", "arcsin": "asin", "arccos": "acos", "tan": "tan"}[name]
    # (tan's rare lanes call an out-of-line function, which calls libm lane by lane)
    kernel = text.split('define internal')[0] if "jitdl.lanes." in text else text
    assert f'@"{libm}"' not in kernel and f'@"{libm}f"' not in kernel


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_arctan2_is_vector_code_exact_at_special_values(dt):
    """arctan2 is inline vector code: every pair of zeros of both signs, +-1, denormals,
    huge values, infinities and NaN gives NumPy's result bit for bit where an argument is
    zero, infinite or NaN (C99's special cases: atan2(+-0, -0) = +-pi, +-pi/4 and +-3pi/4
    for infinities...); the other pairs, and random pairs across scales, within 2 ulp of the
    C library's atan2 (for float64 pairs of the grid, NumPy's own result, bit for bit).
    NumPy's float32 atan2 is itself an ulp off the rounded result at some of them
    (atan2(1, -1e-45) = 1.5707963), hence the reference. Broadcasting and scalars work."""
    import math
    tiny, huge = (5e-324, 1.7e308) if dt == np.float64 else (1e-45, 3e38)
    grid = [0.0, -0.0, 1.0, -1.0, tiny, -tiny, 1e-310 if dt == np.float64 else 1e-40,
            huge, -huge, np.inf, -np.inf, np.nan]
    y = np.array([a for a, _ in itertools.product(grid, grid)], dt)
    x = np.array([b for _, b in itertools.product(grid, grid)], dt)
    got, want = jnp.arctan2(y, x), np.arctan2(y, x)
    bits = f"u{got.itemsize}"
    special = ~np.isfinite(y) | ~np.isfinite(x) | (y == 0) | (x == 0) | (dt == np.float64)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[special & ~nan].view(bits), want[special & ~nan].view(bits))
    ref = np.array([math.atan2(a, b) for a, b in zip(y.astype(float), x.astype(float))]).astype(dt)
    assert _ulps(got, ref).max() <= 1
    rng = np.random.default_rng(12)
    scales = (1e-300, 1e-8, 1e-3, 1.0, 10.0, 1e8, 1e300)
    with np.errstate(over="ignore", under="ignore"):
        ys = np.concatenate([rng.standard_normal(6000) * a for a in scales for _ in scales]
                            + [rng.standard_normal(40000)]).astype(dt)
        xs = np.concatenate([rng.standard_normal(6000) * b for _ in scales for b in scales]
                            + [rng.standard_normal(40000)]).astype(dt)
    ref = np.array([math.atan2(a, b) for a, b in zip(ys.astype(float), xs.astype(float))])
    ref = ref.astype(dt)
    for shift in (0, 1, 3):
        got = jnp.arctan2(np.roll(ys, shift), np.roll(xs, shift))
        assert got.dtype == dt
        assert _ulps(got, np.roll(ref, shift)).max() <= 2
    m = rng.standard_normal((5, 7)).astype(dt)
    row = rng.standard_normal(7).astype(dt)
    for args in ((m, row), (row[:, None], m[0]), (m, 2.0), (-1.5, m), (m, np.zeros(7, dt)),
                 (m.astype(np.int32), 3)):
        same(jnp.arctan2(*args), np.arctan2(*args), rtol=5e-7 if dt == np.float32 else 4e-16)
    text = str(jd.compute(lambda Y, X: jnp.arctan2(Y, X)).llvm_ir(
        np.ones(64, dt), np.ones(64, dt), optimized=False))
    assert '@"atan2' not in text


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_power_is_vector_code_within_an_ulp(dt):
    """Float power is exp(y log|x|) as inline vector code (float64: log|x| and y log|x| as
    double-doubles, so results stay within an ulp of glibc's pow out to y log|x| = 745;
    float32: all in float64): every pair of special values exactly NumPy's (signs,
    zeros, infinities, NaN, the 1s of pow(1, nan) and pow(nan, 0) and pow(-1, inf)),
    negative bases to integer powers signed, to other powers NaN."""
    import math
    specials = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 2.5, -2.5, np.inf,
                -np.inf, np.nan, 5e-324, -5e-324, 1e308, -1e308, 1e20, -1e20, 1023.0, -1075.0,
                2.0 ** 53 + 2, 1e-310]
    a, c = (v.astype(dt) for v in np.array(list(itertools.product(specials, specials))).T)
    with np.errstate(all="ignore"):
        got, want = jnp.power(a, c), np.power(a, c)
    special = ~np.isfinite(want) | (want == 0) | (np.abs(want) == 1)
    np.testing.assert_array_equal(got[special], want[special])
    signed = special & ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(want[signed]))
    n = 3000
    x = np.concatenate([RNG.uniform(0, 10, n), RNG.uniform(-10, 10, n),
                        np.exp(RNG.uniform(-700, 700, n)), 1 + RNG.standard_normal(n) * 1e-6])
    y = np.concatenate([RNG.uniform(-30, 30, n), np.round(RNG.uniform(-60, 60, n)),
                        RNG.uniform(-1, 1, n), RNG.uniform(-1e8, 1e8, n)])
    if dt == np.float32:
        x, y = x[:2 * n].astype(dt), y[:2 * n].astype(dt)

    def ref(p, q):
        try:
            return math.pow(p, q)
        except OverflowError:
            return math.inf if p > 0 or q % 2 == 0 else -math.inf
        except ValueError:
            return math.nan
    with np.errstate(all="ignore"):
        exact = np.array([ref(float(p), float(q)) for p, q in zip(x, y)]).astype(dt)
        for shift in (0, 1, 3):
            got = np.roll(jnp.power(np.roll(x, shift), np.roll(y, shift)), -shift)
            assert _ulps(got, exact).max() <= 1, _ulps(got, exact).max()
    text = str(jd.compute(lambda X, Y: jnp.power(X, Y)).llvm_ir(np.ones(64, dt), np.ones(64, dt),
                                                                optimized=False))
    assert '@"pow' not in text and "@llvm.pow" not in text
    v = np.concatenate([RNG.uniform(0, 10, 5000), RNG.standard_normal(500) * 1e3,
                        [0.0, np.inf, np.nan, 5e-324, 0.1]]).astype(dt)
    for e in (2, 1, -1, 0.5):       # (one correctly rounded operation: NumPy's bits)
        with np.errstate(all="ignore"):
            got, want = jnp.power(v, dt(e)), np.power(v, dt(e))
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got[~np.isnan(want)]),
                                      np.signbit(want[~np.isnan(want)]))
    # ordinary lanes (a finite positive base, a finite exponent) beside those one
    # operation gives, and beside special ones, in the same vectors: the same bits
    base = RNG.uniform(0.5, 4, 4096).astype(dt)
    expo = RNG.uniform(-3, 3, 4096).astype(dt)
    for every, e in ((37, 2.0), (41, 1.0), (43, -1.0), (47, 0.5), (53, 0.0)):
        expo[::every] = e
    base[::59] = 1.0
    odd = base.copy()
    odd[::61] = -2.0
    for xs in (base, odd):
        with np.errstate(all="ignore"):
            got, want = jnp.power(xs, expo), np.power(xs.astype(np.float64), expo)
        with np.errstate(all="ignore"):      # (each correctly rounded in dt)
            one_op = np.select([expo == 2, expo == 1, expo == -1, expo == 0.5,
                                (expo == 0) | (xs == 1)],
                               [xs * xs, xs, 1 / xs, np.sqrt(xs), np.ones_like(xs)], np.nan)
        lone = ~np.isnan(one_op)
        np.testing.assert_array_equal(got[lone], one_op[lone])
        assert np.isnan(got[(xs < 0) & (expo % 1 != 0)]).all()
        assert _ulps(got[~lone], want[~lone].astype(dt)).max() <= 1


def test_float64_power_near_overflow_with_bases_near_sqrt2_is_within_an_ulp():
    """From a review: with log|x| of x near sqrt 2 (where s = f / (2 + f) is largest) off by
    2^-62, y log|x| near +-709 carried it to 2 ulp of pow (1.4149423300095745 **
    2044.9523377243415 was 1.792822737829067e+308, glibc 1.7928227378290673e+308): within an
    ulp of the C library's there, in every lane position."""
    import math
    rng = np.random.default_rng(15)
    x = np.array([1.4149423300095745, 1.4127950822945767, 1.4005555015945472, 1.4049970002912595,
                  1.411161213994862, 1.4188373971449153, 1.4271032565002078])
    y = np.array([2044.9523377243415, 2019.556075085187, 2075.9534629494333, -2048.716500956609,
                  -2018.6271129176575, 2022.924248545703, 1991.7422743659347])
    base = rng.uniform(1.40, 1.43, 20000)
    t = rng.uniform(700, 709.7, 20000) * rng.choice([-1, 1], 20000)
    x, y = np.concatenate([x, base]), np.concatenate([y, t / np.log(base)])
    want = np.array([math.pow(p, q) for p, q in zip(x, y)])
    for shift in (0, 1, 3):
        got = np.roll(jnp.power(np.roll(x, shift), np.roll(y, shift)), -shift)
        assert _ulps(got, want).max() <= 1, _ulps(got, want).max()


@pytest.mark.parametrize("name", ["sin", "cos"])
def test_float64_sin_cos_are_vector_code_within_an_ulp(name):
    """float64 sin and cos are inline vector code (jitdl.codegen.mathlib.sincos): x = j pi/2
    + r in three parts, fdlibm's polynomials on r, within an ulp of the C library's over
    every scale up to 1e9, near multiples of pi/2 and pi/4; lanes beyond 1e9 (and inf, NaN)
    alone call libm, out of line. sin(+-0) = +-0, cos(+-0) = 1, NaN at +-inf and NaN, in
    every lane position."""
    import math
    rng = np.random.default_rng(13)
    k = rng.integers(-10 ** 6, 10 ** 6, 5000).astype(float)
    with np.errstate(over="ignore"):
        x = np.concatenate(
            [rng.standard_normal(5000) * s for s in (1e-300, 1e-8, 1e-3, 0.3, 1.0, 10.0, 1e3,
                                                     1e6, 1e9)]
            + [k * (np.pi / 2), np.nextafter(k * (np.pi / 2), 0), k * (np.pi / 4),
               np.nextafter(k * (np.pi / 4), np.inf), rng.uniform(-1e9, 1e9, 5000),
               np.exp(rng.uniform(np.log(1e10), np.log(1e300), 200)) * rng.choice([-1, 1], 200),
               SPECIAL, [np.pi, -np.pi / 2, 1e9, np.nextafter(1e9, 2e9), 5e-324, -1e-310]])
    ref = _libm_ref(getattr(math, name), x, np.float64)
    for shift in (0, 1, 3):
        xs, want = np.roll(x, shift), np.roll(ref, shift)
        got = getattr(jnp, name)(xs)
        assert got.dtype == np.float64
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        assert _ulps(got, want).max() <= 1, (name, _ulps(got, want).max())
    z = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 0.0, -0.0])
    for shift in range(4):
        got = getattr(jnp, name)(np.roll(z, shift))
        want = np_quiet(getattr(np, name), np.roll(z, shift))
        np.testing.assert_array_equal(got.view(np.uint64)[~np.isnan(want)],
                                      want.view(np.uint64)[~np.isnan(want)])
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    text = str(jd.compute(lambda X: getattr(jnp, name)(X)).llvm_ir(np.ones(64), optimized=False))
    kernel = text.split("define internal")[0]
    assert "jitdl.lanes." in text and "@\"sin\"" not in kernel and "@\"cos\"" not in kernel


@pytest.mark.parametrize("dt", [np.float64, np.float32])
def test_erf_and_exact_gelu_are_vector_code_within_an_ulp(dt):
    """jd.erf (and jd.nn.gelu's exact form, 0.5 x (1 + erf(x / sqrt 2))) is inline vector
    code (jitdl.codegen.mathlib.erf; float32 in float32 arithmetic): within an ulp of the
    C library's erf over every scale, across each switch between its ranges (0.84375,
    1.25, 1/0.35, 6; float32's 4), odd (erf(-0) = -0), +-1 at +-inf, NaN kept, in every
    lane position."""
    import math

    import jitdl.nn
    rng = np.random.default_rng(14)
    edges = np.array([0.84375, 1.25, 1 / 0.35, 6.0, 5.9, 4.0, 3.9])
    with np.errstate(under="ignore", over="ignore"):
        x = np.concatenate([rng.standard_normal(8000) * s for s in (1e-300, 1e-8, 1e-3, 0.3,
                                                                    1.0, 2.0, 4.0)]
                           + [rng.uniform(-7, 7, 20000), edges, -edges,
                              np.nextafter(edges, 0), np.nextafter(edges, 9), SPECIAL,
                              [5e-324, -1e-310, 1e-40, -0.0]]).astype(dt)
    ref = _libm_ref(math.erf, x, dt)
    erf = jd.compute(lambda X: jd.tensor(X.shape, lambda i: jd.erf(X[i])))
    for shift in (0, 1, 3):
        xs, want = np.roll(x, shift), np.roll(ref, shift)
        got = erf(xs)
        assert got.dtype == dt
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        np.testing.assert_array_equal(np.signbit(got[~nan]), np.signbit(want[~nan]))
        assert _ulps(got, want).max() <= 1, (dt, _ulps(got, want).max())
    bits = f"u{x.itemsize}"
    np.testing.assert_array_equal(erf(np.array([np.inf, -np.inf, -0.0, 0.0], dt)).view(bits),
                                  np.array([1.0, -1.0, -0.0, 0.0], dt).view(bits))
    # gelu: each step rounds (x / sqrt 2, 1 + erf, the products), so within a few ulps of
    # the exact value, judged against |x| where 1 + erf cancels (x far below 0)
    g = jd.compute(lambda X: jitdl.nn.gelu(X))
    v = x[np.isfinite(x)]
    got = g(v)
    exact = np.array([0.5 * t * (1 + math.erf(t / math.sqrt(2))) for t in v.astype(float)])
    eps = np.finfo(dt).eps
    assert got.dtype == dt
    assert np.all(np.abs(got - exact) <= eps * (2 * np.abs(exact) + np.abs(v.astype(float)))
                  + np.finfo(dt).smallest_subnormal)
    for f, arg in ((erf, x), (g, v)):
        text = str(f.llvm_ir(arg[:64], optimized=False))
        assert '@"erf' not in text and "jitdl.lanes." not in text


@pytest.mark.parametrize("dt", ["int8", "uint8", "int32", "int64", "float32", "float64",
                                "bool"])
def test_power_by_python_two_and_minus_one_is_numpys(dt):
    """power(x, 2) is square and a float's power(x, -1) reciprocal (one operation, not the
    general pow, whose exponent an eager kernel reads at run time): values bit for bit,
    dtypes by NEP 50 (a bool base or a float 2.0 on integers keeps pow), wrapping
    integers, special values, out= and a non-contiguous base."""
    base = (RNG.standard_normal(300) * 40).astype(dt) if dt != "bool" else \
        RNG.random(300) > 0.5
    if dt.startswith("float"):
        base[:len(SPECIAL)] = SPECIAL.astype(dt)
    for e in (2, 2.0, -1, -1.0):
        want = np_quiet(np.power, base, e) if dt.startswith("float") or e == 2 or \
            type(e) is float else None
        if want is None:
            continue
        got = np_quiet(jnp.power, base, e)
        same(got, want, rtol=0)
        same(np_quiet(jnp.power, base[::-3], e), np_quiet(np.power, base[::-3], e), rtol=0)
        out = np.full(base.shape, 7, want.dtype)
        assert np_quiet(jnp.power, base, e, out=out) is out
        same(out, want, rtol=0)


@pytest.mark.parametrize("dt", ["int32", "float32", "float64"])
def test_power_by_two_or_minus_one_keeps_powers_casting_checks(dt):
    """power(x, 2) / power(x, -1.0) (square / reciprocal underneath) check casting= and
    out= as power does: NumPy refuses a Python int under 'equiv', and an out= the result
    does not cast to is power's error, not square's or reciprocal's."""
    x = (RNG.standard_normal((5, 6)) * 4).astype(dt)
    for e in (2, 2.0, -1, -1.0):
        if dt == "int32" and (type(e) is float or e != 2):
            continue                    # (NumPy's pow: no square / reciprocal here)
        if type(e) is int:
            with pytest.raises(TypeError, match=r"power\(\): cannot cast Python int"):
                jnp.power(x, e, casting="equiv")
        for c in ("no", "safe", "unsafe"):
            same(np_quiet(jnp.power, x, e, casting=c), np_quiet(np.power, x, e, casting=c),
                 rtol=0)
        bad = np.zeros(x.shape, "bool")
        with pytest.raises(TypeError):
            np_quiet(np.power, x, e, out=bad)
        with pytest.raises(TypeError, match=r"^power\(\)"):
            jnp.power(x, e, out=bad)
        with pytest.raises(ValueError, match=r"^power\(\): non-broadcastable output"):
            jnp.power(x, e, out=np.zeros((5, 2), x.dtype))
        wide = np.zeros((3,) + x.shape, x.dtype)      # (an out= the result broadcasts to)
        jnp.power(x, e, out=wide)
        same(wide, np.broadcast_to(np_quiet(np.power, x, e), wide.shape), rtol=0)
        out = np.zeros(x.shape, "float64")
        assert np_quiet(jnp.power, x, e, out=out, casting="safe") is out
        same(out, np_quiet(np.power, x, e).astype("float64"), rtol=0)


@pytest.mark.cpu_only
@pytest.mark.parametrize("dt", ["float32", "float64", "int32", "int8"])
def test_argmax_rows_keep_int32_positions_where_they_fit(dt):
    """argmax/argmin along the last axis keep the second pass's positions in int32 where
    every position fits (an eager call on an array of fewer than 2**31 elements, a static
    definition): ties give the first position, NaN the first NaN, the result is int64."""
    x = (RNG.standard_normal((37, 301)) * 3).astype(dt)
    x[:, 200] = x[:, 5] = x.max() if dt != "int8" else 127       # (ties: the first wins)
    x[3] = x[3, 0]
    if dt.startswith("float"):
        x[7, [9, 250]] = np.nan
        x[8, :2] = [0.0, -0.0]
    for fn in ("argmax", "argmin"):
        for kd in (False, True):
            same(getattr(jnp, fn)(x, axis=-1, keepdims=kd),
                 getattr(np, fn)(x, axis=-1, keepdims=kd))
        same(getattr(jnp, fn)(x[:20]), getattr(np, fn)(x[:20]))
    from jitdl import eager
    kernel = next(k for key, k in eager._kernels.items()
                  if key[0] == "argmax" and key[-1] == ((37, 301), np.dtype(dt)))
    assert "argmax_acc: int32" in kernel.texts["loop_ir"]

    @jd.compute
    def rows(X):
        return jnp.argmin(X, axis=1)
    same(rows(x), np.argmin(x, axis=1))
    assert "int32" in str(rows.lower(x))


@pytest.mark.cpu_only
@pytest.mark.parametrize("dt", ["float32", "float64", "int16"])
def test_argmax_along_rows_that_outgrow_l1_reads_them_once(dt):
    """argmax/argmin along a last axis whose rows outgrow L1 read each row once, in blocks
    (the two-pass kernel read each row again from L2: 0.7-0.8x NumPy's time along rows of
    10^5 elements): the first position of the extreme (of the first NaN) wherever it lies,
    in a whole block or in the tail, as NumPy gives it, eagerly (2-d and 3-d) and in a
    static definition."""
    from jitdl.ops.reduction import _ARG_BLOCK
    from jitdl.target.cpu import host
    from jitdl import eager
    n = host().l1_bytes // np.dtype(dt).itemsize + _ARG_BLOCK // 2 + 3     # (a tail)
    x = (RNG.standard_normal((9, n)) * 50).astype(dt)
    big = 1000 if dt != "int16" else 30000
    x[1, [n - 1, n - 2]] = big                          # (in the tail: the first wins)
    x[2, [_ARG_BLOCK + 1, 3 * _ARG_BLOCK]] = big        # (in two whole blocks)
    x[3] = x[3, 7]                                      # (a flat row)
    x[4, -_ARG_BLOCK // 2 - 4] = big                    # (the last whole block's end)
    x[5, 0] = -big
    if dt.startswith("float"):
        x[6, [n - 5, 40, 2 * _ARG_BLOCK]] = np.nan
        x[7, n - 1] = np.nan
    for fn in ("argmax", "argmin"):
        same(getattr(jnp, fn)(x, axis=-1), getattr(np, fn)(x, axis=-1))
        same(getattr(jnp, fn)(x, axis=1, keepdims=True),
             getattr(np, fn)(x, axis=1, keepdims=True))
        cube = x[:8].reshape(2, 4, n)
        same(getattr(jnp, fn)(cube, axis=2), getattr(np, fn)(cube, axis=2))
    kernel = next(k for key, k in eager._kernels.items()
                  if key[0] == "argmax" and key[-1] == ((9, n), np.dtype(dt)))
    assert "argmax_blocks" in kernel.texts["loop_ir"]

    @jd.compute
    def rows(X):
        return jnp.argmin(X, axis=1)
    same(rows(x), np.argmin(x, axis=1))
    assert "argmin_blocks" in str(rows.lower(x))


def test_a_dtype_a_ufunc_has_no_loop_for_raises_numpys_class():
    """sign of bools is NumPy's UFuncTypeError (its _UFuncNoLoopError), and negative of
    bools or bitwise_and of floats its TypeError: an `except` written for NumPy catches
    jitdl's error, eagerly and inside a definition."""
    b = RNG.random(9) > 0.5
    for fn, args in ((lambda m, x: m.sign(x), (b,)), (lambda m, x: m.negative(x), (b,)),
                     (lambda m, x: m.bitwise_and(x, x), (b * 1.5,))):
        with pytest.raises(TypeError) as want:
            fn(np, *args)
        with pytest.raises(type(want.value)) as got:
            fn(jnp, *args)
        assert str(want.value) in str(got.value)

    @jd.compute
    def f(X):
        return jnp.sign(X)
    with pytest.raises(np._core._exceptions.UFuncTypeError):
        f(b)


def test_an_error_of_numpys_class_pickles():
    """An error numpy_kind made an instance of NumPy's class too (sign of bools, eagerly
    and in a definition) pickles and unpickles as the same class, message and location:
    Exception.__reduce__ named the class jitdl.errors.ArgumentError, another object."""
    import pickle
    b = RNG.random(9) > 0.5

    @jd.compute
    def f(X):
        return jnp.sign(X)
    for call in (lambda: jnp.sign(b), lambda: f(b)):
        with pytest.raises(np._core._exceptions.UFuncTypeError) as got:
            call()
        back = pickle.loads(pickle.dumps(got.value))
        assert type(back) is type(got.value) and str(back) == str(got.value)
        assert back.message == got.value.message and back.loc == got.value.loc


def test_where_with_an_out_that_cannot_take_the_result_is_numpys_ufunc_error():
    """A ufunc's where= with an out= its result cannot be cast to under casting= raises
    NumPy's UFuncTypeError naming the function (np.copyto's 'Cannot cast array data'
    TypeError did before), for unary and binary ufuncs, power and clip (found by review)."""
    w = np.array([True, False, True])
    x = np.array([0.5, 1.5, 2.5])
    for case in (lambda m: m.exp(x, out=np.zeros(3, np.int64), where=w),
                 lambda m: m.add(x, 1, out=np.zeros(3, np.int64), where=w),
                 lambda m: m.power(x, 2, out=np.zeros(3, np.int64), where=w),
                 lambda m: m.clip(x, 0, 1, out=np.zeros(3, np.int64), where=w),
                 lambda m: m.add(x, 1, out=np.zeros(3, np.float32), where=w, casting="safe")):
        with pytest.raises(np._core._exceptions._UFuncOutputCastingError) as want:
            case(np)
        with pytest.raises(np._core._exceptions._UFuncOutputCastingError) as got:
            case(jnp)
        assert str(want.value) in str(got.value)        # (NumPy's text, the ufunc named)
    for case in (lambda m: m.add(x, 1, out=np.zeros(3, np.int64), where=w, casting="unsafe"),
                 lambda m: m.exp(x.astype(np.float32), out=np.ones(3), where=w)):
        same(case(jnp), case(np), rtol=2.4e-7)       # (float32 exp: within an ulp)


def test_where_with_none_as_a_value_is_numpys():
    """where(c, None, y) is NumPy's object array (None is a value there), not the error
    for a missing y; where(c) and where(c, x) as NumPy (found by review)."""
    c = np.array([True, False])
    for case in (lambda m: m.where(c, None, 1), lambda m: m.where(c, 1.5, None),
                 lambda m: m.where(c, None, None)):
        got, want = case(jnp), case(np)
        assert got.dtype == want.dtype == object and got.tolist() == want.tolist()
    same(jnp.where(np.array([0, 2, 3]))[0], np.where(np.array([0, 2, 3]))[0])
    with pytest.raises(ValueError, match="either both or neither"):
        jnp.where(c, 1)


def test_reductions_into_an_integer_out_or_dtype_are_numpys():
    """mean / var of random floats and ints into integer out= arrays (NumPy casts the
    total into out and divides there: wrapped, not the cast of the float mean), std's
    error there, max / min of int8 into uint8 out= (reduced in out's dtype), sum / prod
    of floats with an integer dtype= (each element cast as astype, then wrapped) and of
    ints into a bool out=: NumPy's values and dtypes."""
    f = RNG.standard_normal((6, 5)) * 300
    i = (RNG.standard_normal((6, 5)) * 300).astype(np.int64)
    for a in (f, i):
        for name in ("mean", "var"):
            for dt in (np.int8, np.uint8, np.int16, np.int32, np.int64, np.bool_):
                for axis in (None, 0):
                    shape = () if axis is None else (5,)
                    got, want = np.zeros(shape, dt), np.zeros(shape, dt)
                    r = getattr(jnp, name)(a, axis=axis, out=got)
                    assert r is got
                    getattr(np, name)(a, axis=axis, out=want)
                    same(got, want)
        with pytest.raises(TypeError) as want:
            np.std(a, axis=0, out=np.zeros(5, np.int8))
        with pytest.raises(type(want.value), match=str(want.value).replace("(", r"\(")
                           .replace(")", r"\)")):
            jnp.std(a, axis=0, out=np.zeros(5, np.int8))
    for a, dt in ((i.astype(np.int8), np.uint8), (i.astype(np.uint8), np.int8),
                  (i.astype(np.int16), np.uint8), (f, np.uint8), (f[:2], np.uint8)):
        for name in ("max", "min"):
            for axis in (None, 1):
                shape = () if axis is None else a.shape[:1]
                got, want = np.zeros(shape, dt), np.zeros(shape, dt)
                getattr(jnp, name)(a, axis=axis, out=got)
                getattr(np, name)(a, axis=axis, out=want)
                same(got, want)
    with np.errstate(all="ignore"):
        for dt in (np.uint8, np.int8, np.int16, np.int32):
            for name in ("sum", "prod", "nansum"):
                same(getattr(jnp, name)(f, dtype=dt), getattr(np, name)(f, dtype=dt))
                same(getattr(jnp, name)(f, axis=0, dtype=dt),
                     getattr(np, name)(f, axis=0, dtype=dt))
    for a in (i.astype(np.int8), i):
        for name in ("sum", "prod"):
            got, want = np.zeros(6, np.bool_), np.zeros(6, np.bool_)
            getattr(jnp, name)(a, axis=1, out=got)
            getattr(np, name)(a, axis=1, out=want)
            same(got, want)


def test_max_min_into_a_narrower_integer_out_are_numpys():
    """An integer array's max / min into a narrower integer out= (and nanmax / nanmin into
    any out= max / min give to NumPy): NumPy's first element goes through out's dtype, so
    the max of int16 [200, 5] into int8 is 5, of [5, 200] -56; jitdl gave -56 for both
    (nanmax of int8 [-128, 127] into uint8 gave 127 for 128)."""
    i = (RNG.standard_normal((6, 9)) * 300).astype(np.int64)
    i[:, 0] = [200, 5, -200, 1000, 127, -129]
    for a, dt in ((i.astype(np.int16), np.int8), (i.astype(np.int32), np.int8),
                  (i.astype(np.int32), np.int16), (i, np.int8), (i, np.int16),
                  (i.astype(np.int8), np.uint8), (i.astype(np.int16), np.uint8)):
        for name in ("max", "min", "nanmax", "nanmin"):
            for axis in (None, 1):
                shape = () if axis is None else a.shape[:1]
                got, want = np.zeros(shape, dt), np.zeros(shape, dt)
                assert getattr(jnp, name)(a, axis=axis, out=got) is got
                getattr(np, name)(a, axis=axis, out=want)
                same(got, want)
    for a in (np.array([200, 5], np.int16), np.array([5, 200], np.int16)):
        got, want = np.zeros((), np.int8), np.zeros((), np.int8)
        jnp.max(a, out=got)
        np.max(a, out=want)
        same(got, want)


def test_max_min_initial_into_an_out_of_another_dtype_are_numpys():
    """max / min with initial= into an out= of another dtype reduce in out's dtype, as
    NumPy's loop does: the max of a bool array with initial=100 into an int8 out= is 100
    (jitdl gave True's 1), the min of uint8 with initial=-7 into float32 is -7 (jitdl
    raised ScalarOverflowError casting -7 to uint8)."""
    b = RNG.random((4, 5)) < 0.5
    u = RNG.integers(0, 256, (4, 5)).astype(np.uint8)
    w = RNG.random((4, 5)) < 0.5
    for a, dt, initial in ((b, np.int8, 100), (b, np.float32, 100), (b, np.int64, -7),
                           (u, np.float32, -7), (u, np.int16, -7), (u, np.float64, 300)):
        for name in ("max", "min"):
            for axis, kw in ((None, {}), (1, {}), (1, dict(where=w)), (0, dict(where=w))):
                shape = () if axis is None else np.delete(a.shape, axis)
                got, want = np.zeros(shape, dt), np.zeros(shape, dt)
                assert getattr(jnp, name)(a, axis=axis, out=got, initial=initial,
                                          **kw) is got
                getattr(np, name)(a, axis=axis, out=want, initial=initial, **kw)
                same(got, want)


def test_clip_of_bools_without_bounds_is_numpys_error():
    """clip of a bool array (or a bool) with neither bound is NumPy 2's no-loop error for
    positive, eagerly and inside a definition; with a bound, or with dtype=, a result."""
    b = RNG.standard_normal(9) > 0
    for args in ((b, None, None), (b,), (np.bool_(True), None, None)):
        with pytest.raises(TypeError) as want:
            np.clip(*args)
        with pytest.raises(np._core._exceptions.UFuncTypeError) as got:
            jnp.clip(*args)
        assert str(want.value) in str(got.value)

    @jd.compute
    def f(X):
        return jnp.clip(X, None, None)
    with pytest.raises(np._core._exceptions.UFuncTypeError, match="'positive' did not"):
        f(b)
    x = RNG.standard_normal(9)
    for case in (lambda m: m.clip(b, None, None, dtype=np.int8),
                 lambda m: m.clip(b, False, None), lambda m: m.clip(b, None, True),
                 lambda m: m.clip(x, None, None)):
        same(case(jnp), case(np))


def test_dot_with_a_0d_operand_keeps_numpys_zeros():
    """dot of a 0-d operand and an array of rank 1 or 2 (two elements or more) in float32
    or float64 is NumPy's: the product added to zeros, which the 0-d zero leaves as they
    are (-0.0 times 0.0 or False is 0.0, 0.0 times NaN too); other shapes its product."""
    x = RNG.standard_normal(6)
    x[:3] = [np.nan, np.inf, -0.0]
    for s in (-0.0, 0.0, np.nan, RNG.standard_normal()):
        for zd in (np.float64, np.float32, np.bool_, np.int64):
            z = np.array(s).astype(zd) if zd in (np.float64, np.float32) or s == s else None
            if z is None:
                continue
            for o in (x, x.reshape(2, 3), x.reshape(3, 2).T, x.reshape(1, 2, 3), x[:1],
                      x.astype(np.float32), np.zeros(4, np.bool_), np.array(False),
                      np.zeros(3, np.int8)):
                for a, b in ((z, o), (o, z)):
                    with np.errstate(all="ignore"):
                        same(jnp.dot(a, b), np.dot(a, b))


def test_means_of_empty_slices_warn_as_numpy():
    """mean / var / std / nanmean / average of empty arrays (and slices where= or NaN
    leave empty) are NaN with NumPy's RuntimeWarning and its text; average with an empty
    result is NumPy's ZeroDivisionError; nothing is said where every slice has elements."""
    x = RNG.standard_normal((3, 4))
    y = x.copy()
    y[1] = np.nan
    none_in_row0 = np.ones((3, 4), bool)
    none_in_row0[0] = False
    cases = [lambda m, f=f, e=e, kw=kw: getattr(m, f)(e, **kw)
             for f in ("mean", "var", "std", "nanmean", "average")
             for e in (np.array([]), np.zeros((0, 3)), np.zeros((3, 0)),
                       np.zeros(0, np.int64), np.zeros((0, 2), np.float32))
             for kw in ({}, {"axis": 0}, {"axis": -1})]
    cases += [lambda m, f=f: getattr(m, f)(x, axis=1, where=none_in_row0)
              for f in ("mean", "var", "std")]
    cases += [lambda m: m.nanmean(y, axis=1), lambda m: m.nanmean(y, axis=0),
              lambda m: m.nanmean(np.full(5, np.nan)),
              lambda m: m.nanmean(np.array([np.inf, -np.inf])),
              lambda m: m.mean(x, axis=1), lambda m: m.var(x), lambda m: m.nanmean(x)]
    for case in cases:
        with np.errstate(all="ignore"), warnings.catch_warnings(record=True) as want:
            warnings.simplefilter("always")
            try:
                expected = case(np)
            except ZeroDivisionError:       # (average with an empty result)
                with pytest.raises(ZeroDivisionError, match="division by zero"):
                    case(jnp)
                continue
        with np.errstate(all="ignore"), warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            result = case(jnp)
        same(result, expected, rtol=1e-12)
        assert [(w.category, str(w.message)) for w in got] == \
            [(w.category, str(w.message)) for w in want]


def test_mean_of_an_empty_array_warns_on_every_call():
    """The mean of an empty array warns as NumPy's on each call, not only the first,
    which compiles the kernel (the later ones went straight to it, silently)."""
    for e, axis in ((np.zeros((3, 0)), 1), (np.zeros((0, 2), np.float32), 0),
                    (np.zeros((2, 0, 3)), -2)):
        for args in ((), (axis,)):
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                expected = np.mean(e, *args)
            for _ in range(3):
                with np.errstate(all="ignore"), \
                        pytest.warns(RuntimeWarning, match="Mean of empty slice"):
                    result = jnp.mean(e, *args)
                same(result, expected)


def test_mean_of_an_empty_slice_reports_numpys_invalid_division_at_the_users_line():
    """The mean of an empty slice also reports NumPy's floating-point error of its 0 / 0
    ('invalid value encountered in divide', of a NumPy scalar's division where the mean
    is a float64 number) as np.errstate says: a RuntimeWarning, a FloatingPointError, or
    nothing; and every warning of jd.numpy's reductions points at the caller's line (the
    mean's pointed at jitdl/eager.py)."""
    x = RNG.standard_normal((3, 4))
    cases = [lambda m: m.mean(np.zeros(0)), lambda m: m.mean(np.zeros((2, 0)), axis=1),
             lambda m: m.mean(np.zeros((0, 3), np.float32), axis=0),
             lambda m: m.mean(np.zeros(0, np.int64)),
             lambda m: m.mean(np.zeros((0, 3)), keepdims=True),
             lambda m: m.mean(x, axis=1, where=x > 10),
             lambda m: m.mean(x, where=np.zeros_like(x, bool))]
    for case in cases:
        with warnings.catch_warnings(record=True) as want:
            warnings.simplefilter("always")
            expected = case(np)
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            result = case(jnp)
        same(result, expected)
        assert [(w.category, str(w.message)) for w in got] == \
            [(w.category, str(w.message)) for w in want]
        assert {w.filename for w in got} == {__file__}
        for how, error in (("raise", FloatingPointError), ("ignore", None)):
            with np.errstate(invalid=how), warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                for m in (np, jnp):
                    if error is None:
                        case(m)
                    else:
                        with pytest.raises(error, match="invalid value encountered in"):
                            case(m)
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        jnp.var(np.zeros((2, 0)), axis=1)
        jnp.nanmax(np.array([np.nan, np.nan]))
        jnp.nanmean(np.array([np.nan]))
    assert [str(w.message) for w in got] == ["Degrees of freedom <= 0 for slice",
                                             "All-NaN slice encountered",
                                             "Mean of empty slice"]
    assert {w.filename for w in got} == {__file__}


def test_average_axis_and_ptp_of_bools_errors_are_numpys_text():
    """average's AxisError names its argument as NumPy's ('axis: axis 3 is out of
    bounds ...'), before the weights are looked at; ptp of bools is NumPy's TypeError
    text for subtract of bools."""
    x = RNG.standard_normal((3, 4))
    for case in (lambda m: m.average(x, axis=3), lambda m: m.average(x, axis=(0, -3)),
                 lambda m: m.average(x, axis=2, weights=np.ones(7)),
                 lambda m: m.ptp(x > 0), lambda m: m.ptp(x > 0, axis=1)):
        with pytest.raises(Exception) as want:
            case(np)
        with pytest.raises(type(want.value)) as got:
            case(jnp)
        assert str(want.value) in str(got.value), (str(want.value), str(got.value))
    same(jnp.average(x, axis=-1, keepdims=True), np.average(x, axis=-1, keepdims=True))


def test_nanmax_nanmin_of_all_nan_slices_warn_as_numpy():
    """nanmax / nanmin give NaN for a slice of NaN alone with NumPy's RuntimeWarning
    ('All-NaN slice encountered'), also into out=; nothing where every slice has a
    number (ints never)."""
    x = RNG.standard_normal((4, 5))
    x[:, 1] = np.nan
    x[2, 3] = np.nan
    for name in ("nanmax", "nanmin"):
        for case in (lambda m: getattr(m, name)(x, axis=0),
                     lambda m: getattr(m, name)(x, axis=1),
                     lambda m: getattr(m, name)(x),
                     lambda m: getattr(m, name)(np.full(3, np.nan, np.float32)),
                     lambda m: getattr(m, name)(x, axis=0, out=np.zeros(5)),
                     lambda m: getattr(m, name)(np.arange(6).reshape(2, 3), axis=0)):
            with warnings.catch_warnings(record=True) as want:
                warnings.simplefilter("always")
                expected = case(np)
            with warnings.catch_warnings(record=True) as got:
                warnings.simplefilter("always")
                result = case(jnp)
            same(result, expected)
            assert [(w.category, str(w.message)) for w in got] == \
                [(w.category, str(w.message)) for w in want]


def test_ufuncs_take_numpys_subok_keyword():
    """subok= (NumPy's ufunc keyword) is taken by the ufuncs, power and clip: the results
    of ndarray operands are ndarrays either way."""
    x, y = RNG.standard_normal(7), RNG.standard_normal(7)
    for case in (lambda m, s: m.add(x, y, subok=s), lambda m, s: m.exp(x, subok=s),
                 lambda m, s: m.power(np.abs(x), y, subok=s),
                 lambda m, s: m.clip(x, -0.5, 0.5, subok=s)):
        for s in (True, False):
            same(case(jnp, s), case(np, s))


def test_an_out_the_result_cannot_be_cast_to_is_numpys_text():
    """A ufunc's (matmul's, std's, ptp's, outer's) out= that its result does not cast to
    under casting= is NumPy's UFuncTypeError text, naming the ufunc that writes it;
    argmax's and argmin's out= of another shape is NumPy's ValueError text."""
    x = RNG.standard_normal((3, 3))
    i8 = (x * 10).astype(np.int8)
    for case in (lambda m: m.add(x, 1, out=np.zeros((3, 3), np.int64)),
                 lambda m: m.negative(i8, out=np.zeros((3, 3), np.uint8)),
                 lambda m: m.exp(x, out=np.zeros((3, 3), np.float32), casting="safe"),
                 lambda m: m.matmul(x, x, out=np.zeros((3, 3), np.int64)),
                 lambda m: m.std(x, axis=0, out=np.zeros(3, np.int64)),
                 lambda m: m.ptp(x, axis=0, out=np.zeros(3, np.int64)),
                 lambda m: m.outer(x[0], x[1], out=np.zeros((3, 3), np.int64)),
                 lambda m: m.clip(x, 0, 1, out=np.zeros((3, 3), np.int64)),
                 lambda m: m.argmax(x, axis=1, keepdims=True, out=np.zeros(3, np.int64)),
                 lambda m: m.argmin(x, axis=0, out=np.zeros(4, np.int64))):
        with pytest.raises((TypeError, ValueError)) as want:
            case(np)
        with pytest.raises(type(want.value)) as got:
            case(jnp)
        assert str(want.value) in str(got.value), (str(want.value), str(got.value))


@pytest.mark.cpu_only
@pytest.mark.parametrize("name, bound, worst", [
    ("log1p", 1.15, [0xbe99b183, 0x3ecbb602]), ("log2", 1.18, [0x3fb4e266, 0x3fb4dce6]),
    ("log10", 1.05, [0x3faaa647, 0x3faa1f5f]), ("tan", 1.57, [0x40177230, 0x4017f899])])
def test_float32_lane_routines_within_the_readmes_bounds(name, bound, worst):
    """The float32-lane log1p / log2 / log10 / tan (jitdl.codegen.mathlib) against float64
    NumPy at the worst inputs a review found by exhaustive binade sweeps (log1p 1.149 ulp
    at -0.30018243, which the README had as 1.07; tan 1.561 at 2.3663445) and their
    neighbourhoods, in every lane position: within the README's bounds."""
    w = np.array(worst, np.uint32).view(np.int32)
    x = (w[:, None] + np.arange(-3000, 3000, dtype=np.int32)).ravel().view(np.float32)
    ref = getattr(np, name)(x.astype(np.float64))
    for shift in (0, 5):
        got = np.roll(getattr(jnp, name)(np.roll(x, shift)), -shift).astype(np.float64)
        ulp = np.ldexp(1.0, np.frexp(np.abs(ref))[1] - 24)
        assert (np.abs(got - ref) / ulp).max() <= bound


def _float32_power_cases(rng, n):
    """Random positive float32 bit patterns (subnormals included) with exponents that keep
    x ** y mostly within float32's range, bases next to 1 with large exponents, and
    negative bases to integer and non-integer powers."""
    x = rng.integers(1, 0x7f800000, n, dtype=np.int64).astype(np.uint32).view(np.float32)
    lx = np.abs(np.log2(x.astype(np.float64)))
    y = (rng.uniform(-140, 140, n) / np.maximum(lx, 1e-3)).astype(np.float32)
    near = (1 + (rng.random(n // 4) - 0.5) * 2.0 ** -10).astype(np.float32)
    neg = -(rng.random(n // 4) * 4).astype(np.float32)
    ints = rng.integers(-20, 21, n // 4).astype(np.float32)
    return (np.concatenate([x, near, neg, neg]),
            np.concatenate([y, (rng.random(n // 4) * 2e6 - 1e6).astype(np.float32), ints,
                            (rng.random(n // 4) * 6 - 3).astype(np.float32)]))


@pytest.mark.cpu_only
def test_float32_power_is_within_half_an_ulp_and_one_kernel_everywhere(monkeypatch):
    """float32 power computes 2^(y log2|x|) in float64 lanes from two tables of 16
    (jitdl.codegen.mathlib._pow32): within 0.51 ulp of the true value (long double's
    powl) on random bit patterns, subnormal bases and results too; negative bases to
    integer powers signed, to non-integer ones NaN, as NumPy's. The tables are read by a
    permute on AVX-512 hosts and by loads elsewhere: both give the same bits, and so do
    scalar and remainder lanes."""
    rng = np.random.default_rng(5)
    x, y = _float32_power_cases(rng, 1 << 16)
    with np.errstate(all="ignore"):
        got = jnp.power(x, y)
        exact = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
        want = exact.astype(np.float32)
        assert (np.isnan(got) == np.isnan(want)).all()
        assert (np.signbit(got) == np.signbit(want))[~np.isnan(want)].all()
        fin = np.isfinite(want) & (want != 0)
        spacing = np.spacing(np.abs(want[fin])).astype(np.longdouble)
        err = np.abs(got[fin].astype(np.longdouble) - exact[fin]) / spacing
    assert err.max() <= 0.51, err.max()
    for m in (1, 3, 7, 13, 37):         # (scalar and remainder lanes)
        np.testing.assert_array_equal(jnp.power(x[-m:], y[-m:]).view(np.uint32),
                                      got[-m:].view(np.uint32))
    from jitdl.codegen import mathlib

    class NoAvx512:
        vector_bytes = 32
    monkeypatch.setattr(mathlib, "host", lambda: NoAvx512)

    @jd.compute
    def loads(a, b):            # (a definition of its own: compiled with the loads)
        return jnp.power(a, b) * np.float32(1)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(loads(x, y).view(np.uint32), got.view(np.uint32))


def test_float64_power_from_tables_is_within_an_ulp(monkeypatch):
    """float64 power's logarithm reads 1 / c and ln c from tables of 16 as a double-double
    (jitdl.codegen.mathlib._log64_tab): within 0.75 ulp of long double's powl where y
    log x spans the whole range (bases next to 1 with exponents up to 700 / |log x|,
    where the logarithm's relative error is multiplied most), subnormal bases and
    negative bases to integer powers too; permute and loads give the same bits."""
    rng = np.random.default_rng(8)
    n = 1 << 15
    x = np.concatenate([rng.integers(1, 0x7FF0000000000000, n, dtype=np.int64).view(np.float64),
                        1 + (rng.random(n) - 0.5) * 2.0 ** -3,
                        rng.integers(1, 1 << 52, n // 4).view(np.float64),
                        -rng.random(n) * 10])
    lx = np.abs(np.log(np.abs(x)))
    y = rng.uniform(-700, 700, x.size) / np.maximum(lx, 1e-300)
    y[-n:] = np.round(rng.uniform(-300, 300, n))
    y[2 * n:2 * n + n // 4] = rng.uniform(-1.5, 1.5, n // 4)
    with np.errstate(all="ignore"):
        got = jnp.power(x, y)
        exact = np.power(x.astype(np.longdouble), y.astype(np.longdouble))
        want = exact.astype(np.float64)
        assert (np.isnan(got) == np.isnan(want)).all()
        assert (np.isinf(got) == np.isinf(want)).all() and ((got == 0) == (want == 0)).all()
        ok = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float64).tiny)
        err = np.abs(got[ok].astype(np.longdouble) - exact[ok]) / np.spacing(
            np.abs(want[ok])).astype(np.longdouble)
    assert err.max() <= 0.75, err.max()
    from jitdl.codegen import mathlib

    class NoAvx512:
        vector_bytes = 32
    monkeypatch.setattr(mathlib, "host", lambda: NoAvx512)

    @jd.compute
    def loads(a, b):
        return jnp.power(a, b) * 1.0
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(loads(x, y).view(np.int64), got.view(np.int64))


@pytest.mark.cpu_only
def test_float32_expm1_from_a_table_of_sixteenths(monkeypatch):
    """float32 expm1 computes s expm1(r) + (s - 1) in float64 lanes with s = 2^(n / 16)
    from a table (jitdl.codegen.mathlib._expm1_of_float32): within 0.51 ulp of the
    float64 result (every float32 was checked once: 0.500, 354 misrounded), -0 kept, -1
    and inf at the ends; permute and loads give the same bits."""
    x = np.concatenate([RNG.standard_normal(20000) * s for s in (1e-6, 0.02, 1.0, 20.0)] +
                       [np.linspace(-31, 90, 20000), [0.0, -0.0, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    with np.errstate(all="ignore"):
        got = jnp.expm1(x)
        exact = np.expm1(x.astype(np.float64))
        want = exact.astype(np.float32)
    special = ~np.isfinite(want) | (x == 0)
    np.testing.assert_array_equal(got[special], want[special])
    assert (np.signbit(got[x == 0]) == np.signbit(x[x == 0])).all()
    ok = ~special & (np.abs(want) >= np.finfo(np.float32).tiny)
    err = np.abs(got[ok].astype(np.float64) - exact[ok]) / np.spacing(np.abs(want[ok]))
    assert err.max() <= 0.51, err.max()
    from jitdl.codegen import mathlib

    class NoAvx512:
        vector_bytes = 32
    monkeypatch.setattr(mathlib, "host", lambda: NoAvx512)

    @jd.compute
    def loads(a):
        return jnp.expm1(a) * np.float32(1)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(loads(x).view(np.uint32), got.view(np.uint32))
