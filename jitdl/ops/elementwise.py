"""Elementwise builders: NumPy's ufuncs as scalar-expression functions mapped over
broadcast operands, with NumPy 2's result dtypes and the special values of the array API
standard (NaN, infinities, signed zeros, integer division by zero as NumPy does it).

Each entry of UNARY / BINARY is (the NumPy ufunc that types it, a function of scalar
expressions already cast to the ufunc's result dtype). Functions without an IR intrinsic
are composites of intrinsics, written so that their edge cases come out as NumPy's.
"""
from __future__ import annotations

import math

import numpy as np

from jitdl import dtypes
from jitdl.errors import ArgumentError, numpy_base, numpy_kind, user_loc
from jitdl.ir import build
from jitdl.ir.nodes import BinOp, CmpOp, Const, Intrin, UnOp
from jitdl.ops.core import (any_size, elementwise, every_dim, layout_free, operand,
                             scalar_result, typed)

_LN2 = math.log(2.0)
_INV_LN2 = 1.0 / _LN2


# -- scalar helpers -------------------------------------------------------------------------
def _c(x, dt):
    """x cast to dtype `dt` (a weak Python number that does not fit is NumPy's error)."""
    return build.cast(x, dt)


def _k(value, like):
    """The constant `value` in the dtype of expression `like`."""
    return build.cast(value, like.dtype)


def _quotient(p, q, like):
    """The constant p / q divided in the dtype of `like`, as NumPy's loops take it (a
    float32 rad2deg multiplies by float32(180) / float32(pi), not float32(180 / pi): 1 ulp
    apart, and so were 80% of the results)."""
    t = np.dtype(like.dtype).type if dtypes.is_float(like.dtype) else np.float64
    return _k(float(t(p) / t(q)), like)


def _call(fn, a):
    return build.call(fn, a)


def _b(op, a, b):
    return build.binary(op, a, b)


def _sel(cond, t, f):
    return build.select(cond, t, f)


def _lt(a, b):
    return build.compare(CmpOp.LT, a, b)


def _gt(a, b):
    return build.compare(CmpOp.GT, a, b)


def _eq(a, b):
    return build.compare(CmpOp.EQ, a, b)


def _and(a, b):
    return build.logical(BinOp.AND, a, b)


def _or(a, b):
    return build.logical(BinOp.OR, a, b)


def _isnan(a):
    return build.call(Intrin.ISNAN, a)


def _isinf(a):
    return build.call(Intrin.ISINF, a)


def _is_int(e):
    return e.dtype == "bool" or dtypes.is_int(e.dtype)


def _odd_sign(a, r):
    """r (computed from |a|) with a's sign; zeros and NaN give a itself (f(-0) = -0)."""
    return _sel(_gt(a, 0), r, _sel(_lt(a, 0), -r, a))


def _signbit(a):
    """a's sign bit for a float (set for -0.0 and for a NaN with its sign bit)."""
    return build.call(Intrin.SIGNBIT, a)


# -- unary functions (a is in the result dtype) ---------------------------------------------
def _floor_like(fn):
    return lambda a: a if _is_int(a) else _call(fn, a)


def _sign(a):
    if _is_int(a):
        return _call(Intrin.SIGN, a)
    return _b(BinOp.ADD, _call(Intrin.SIGN, a), _k(0.0, a))    # -0.0 + 0.0 is +0.0


def _reciprocal(a):
    if _is_int(a):
        # NumPy's 1.0 / a converted to the type: 0 unless |a| is 1; 1 / 0 is inf, which
        # x86 converts (to 32 or 64 bits, then narrowed) to the int32 or int64 minimum,
        # and to 0 for the narrower types: NumPy's result on x86 (C leaves it undefined)
        r = _sel(_eq(a, 1), _k(1, a), _k(0, a))
        if a.dtype in ("int32", "int64"):
            r = _sel(_eq(a, 0), _k(-2 ** (dtypes.itemsize(a.dtype) * 8 - 1), a), r)
        return _sel(_eq(a, -1), _k(-1, a), r) if dtypes.is_signed(a.dtype) else r
    return _b(BinOp.DIV, _k(1, a), a)


def _cbrt(a):
    x = _call(Intrin.ABS, a)
    y = _b(BinOp.POW, x, _k(1.0 / 3.0, a))
    y = _b(BinOp.SUB, y, _b(BinOp.DIV, _b(BinOp.SUB, y, _b(BinOp.DIV, x, _b(BinOp.MUL, y, y))),
                           _k(3.0, a)))        # one Newton step
    special = _or(_eq(x, 0), _or(_isnan(a), _call(Intrin.ISINF, a)))
    return _sel(special, a, _odd_sign(a, y))


def _log2x(x, small_arg):
    """log1p(small_arg), or log(2 x) where x is so large that log1p(x) is log(x) to the
    last bit (1 / x below half an ulp of log x) and x^2 could overflow: one log per
    element, not two."""
    big = _gt(x, 1e8 if x.dtype == "float32" else 1e17)
    return _b(BinOp.ADD, _call(Intrin.LOG1P, _sel(big, x, small_arg)),
              _sel(big, _k(_LN2, x), _k(0.0, x)))


def _arcsinh(a):
    x = _call(Intrin.ABS, a)
    x2 = _b(BinOp.MUL, x, x)
    one = _k(1.0, a)
    small = _b(BinOp.ADD, x, _b(BinOp.DIV, x2, _b(
        BinOp.ADD, one, _call(Intrin.SQRT, _b(BinOp.ADD, one, x2)))))
    return _odd_sign(a, _log2x(x, small))


def _arccosh(a):
    t = _b(BinOp.SUB, a, _k(1.0, a))
    small = _b(BinOp.ADD, t, _call(Intrin.SQRT, _b(
        BinOp.ADD, _b(BinOp.MUL, _k(2.0, a), t), _b(BinOp.MUL, t, t))))
    return _sel(_lt(a, 1.0), _k(math.nan, a), _log2x(a, small))   # (t * t overflows: a << -1)


def _arctanh(a):
    # 0.5 log1p(2x / (1 - x)) of x = |a| with a's sign (for a < 0 the form loses digits
    # near -1): +-inf at +-1, NaN beyond, -0 kept
    x = _call(Intrin.ABS, a)
    return _odd_sign(a, _b(BinOp.MUL, _k(0.5, a), _call(Intrin.LOG1P, _b(
        BinOp.DIV, _b(BinOp.MUL, _k(2.0, a), x), _b(BinOp.SUB, _k(1.0, a), x)))))


def _rint(a):
    return _call(Intrin.ROUND, a)


def _isfinite_like(fn, int_value):
    return lambda a: _c(int_value, "bool") if _is_int(a) else _call(fn, a)


def _signbit_u(a):
    if a.dtype == "bool":
        return _c(False, "bool")
    if dtypes.is_int(a.dtype):
        return _lt(a, 0)
    return _signbit(a)


def _invert(a):
    return build.logical_not(a) if a.dtype == "bool" else build.unary(UnOp.NOT, a)


def _sinc(a):
    y = _b(BinOp.MUL, _k(math.pi, a), a)
    return _sel(_eq(a, 0), _k(1.0, a), _b(BinOp.DIV, _call(Intrin.SIN, y), y))


UNARY = {
    "negative": (np.negative, lambda a: -a),
    "positive": (np.positive, lambda a: a),
    "absolute": (np.absolute, lambda a: _call(Intrin.ABS, a)),
    "fabs": (np.fabs, lambda a: _call(Intrin.ABS, a)),
    "sign": (np.sign, _sign),
    "reciprocal": (np.reciprocal, _reciprocal),
    "square": (np.square, lambda a: _b(BinOp.MUL, a, a)),
    "exp": (np.exp, lambda a: _call(Intrin.EXP, a)),
    "exp2": (np.exp2, lambda a: _call(Intrin.EXP2, a)),
    "expm1": (np.expm1, lambda a: _call(Intrin.EXPM1, a)),
    "log": (np.log, lambda a: _call(Intrin.LOG, a)),
    "log2": (np.log2, lambda a: _call(Intrin.LOG2, a)),
    "log10": (np.log10, lambda a: _call(Intrin.LOG10, a)),
    "log1p": (np.log1p, lambda a: _call(Intrin.LOG1P, a)),
    "sqrt": (np.sqrt, lambda a: _call(Intrin.SQRT, a)),
    "cbrt": (np.cbrt, _cbrt),
    "sin": (np.sin, lambda a: _call(Intrin.SIN, a)),
    "cos": (np.cos, lambda a: _call(Intrin.COS, a)),
    "tan": (np.tan, lambda a: _call(Intrin.TAN, a)),
    "arcsin": (np.arcsin, lambda a: _call(Intrin.ASIN, a)),
    "arccos": (np.arccos, lambda a: _call(Intrin.ACOS, a)),
    "arctan": (np.arctan, lambda a: _call(Intrin.ATAN, a)),
    "sinh": (np.sinh, lambda a: _call(Intrin.SINH, a)),
    "cosh": (np.cosh, lambda a: _call(Intrin.COSH, a)),
    "tanh": (np.tanh, lambda a: _call(Intrin.TANH, a)),
    "arcsinh": (np.arcsinh, _arcsinh),
    "arccosh": (np.arccosh, _arccosh),
    "arctanh": (np.arctanh, _arctanh),
    "deg2rad": (np.deg2rad, lambda a: _b(BinOp.MUL, a, _k(math.pi / 180.0, a))),
    "rad2deg": (np.rad2deg, lambda a: _b(BinOp.MUL, a, _quotient(180.0, math.pi, a))),
    "floor": (np.floor, _floor_like(Intrin.FLOOR)),
    "ceil": (np.ceil, _floor_like(Intrin.CEIL)),
    "trunc": (np.trunc, _floor_like(Intrin.TRUNC)),
    "fix": (np.trunc, _floor_like(Intrin.TRUNC)),
    "rint": (np.rint, _rint),
    "isnan": (np.isnan, _isfinite_like(Intrin.ISNAN, False)),
    "isinf": (np.isinf, _isfinite_like(Intrin.ISINF, False)),
    "isfinite": (np.isfinite, _isfinite_like(Intrin.ISFINITE, True)),
    "signbit": (np.signbit, _signbit_u),
    "logical_not": (np.logical_not, build.logical_not),
    "invert": (np.invert, _invert),
    "sinc": (np.sin, _sinc),
}
# functions whose operand keeps its own dtype (the result dtype is bool)
_OWN_DTYPE = {"isnan", "isinf", "isfinite", "signbit", "logical_not"}


# -- binary functions (a, b in the result dtype unless the op is a comparison) --------------
def _minmax(op, nan_wins):
    """NumPy's maximum/minimum (nan_wins) and fmax/fmin on floats: the first operand
    where it is strictly greater (less), else the second, so that equal operands give
    the second, as NumPy's loops do (maximum(0.0, -0.0) is -0.0); NaN from either operand
    (maximum) or the number over NaN (fmax). Integers: the plain min/max."""
    def f(a, b):
        if _is_int(a):
            return _b(op, a, b)
        first = _gt(a, b) if op == BinOp.MAX else _lt(a, b)
        # one select whose condition reads both operands: its arms need no guarded loads
        return _sel(_b(BinOp.OR, first, _isnan(a if nan_wins else b)), a, b)
    return f


def _zero_signed(q, like):
    """q, with a zero result carrying the sign of `like` (NumPy's signed zeros)."""
    return _sel(_eq(q, 0), _sel(_signbit(like), _k(-0.0, q), _k(0.0, q)), q)


def _floor_divide(a, b):
    """Floored division; for floats with an infinite operand the array API standard's
    result, which is a / b (inf // 2 is inf, 3 // -inf is -0.0; NumPy gives NaN and -1
    there), and NaN for inf // inf."""
    q = _b(BinOp.FLOORDIV, a, b)
    if _is_int(a):
        return q
    div = _b(BinOp.DIV, a, b)
    return _sel(_or(_isinf(a), _isinf(b)), div, _zero_signed(q, div))


def _remainder(a, b):
    r = _b(BinOp.MOD, a, b)
    return r if _is_int(a) else _zero_signed(r, b)


def _fmod(a, b):
    if not _is_int(a):
        return _b(BinOp.FMOD, a, b)
    r = _b(BinOp.MOD, a, b)                                   # floored; 0 for b = 0
    wrong_sign = _and(build.compare(CmpOp.NE, r, 0), build.compare(
        CmpOp.NE, _lt(r, 0), _lt(a, 0)))
    return _sel(wrong_sign, _b(BinOp.SUB, r, b), r)


def _hypot(a, b):
    x, y = _call(Intrin.ABS, a), _call(Intrin.ABS, b)
    m, n = _b(BinOp.MAX, x, y), _b(BinOp.MIN, x, y)
    q = _b(BinOp.DIV, n, m)
    r = _b(BinOp.MUL, m, _call(Intrin.SQRT, _b(BinOp.ADD, _k(1.0, a), _b(BinOp.MUL, q, q))))
    inf = _or(_call(Intrin.ISINF, a), _call(Intrin.ISINF, b))   # hypot(inf, nan) = inf
    return _sel(inf, _k(math.inf, a), _sel(_eq(m, 0), _k(0.0, a), r))


def _copysign(a, b):
    x = _call(Intrin.ABS, a)
    return _sel(_signbit(b), -x, x)


def _heaviside(a, b):
    return _sel(_lt(a, 0), _k(0.0, a), _sel(_gt(a, 0), _k(1.0, a),
                                           _sel(_eq(a, 0), b, a)))


def _logaddexp(base2):
    def f(a, b):
        m = _b(BinOp.MAX, a, b)
        d = -_call(Intrin.ABS, _b(BinOp.SUB, a, b))
        if base2:
            t = _b(BinOp.MUL, _call(Intrin.LOG1P, _call(Intrin.EXP2, d)), _k(_INV_LN2, a))
        else:
            t = _call(Intrin.LOG1P, _call(Intrin.EXP, d))
        equal = _b(BinOp.ADD, a, _k(1.0 if base2 else _LN2, a))   # inf, inf: inf
        return _sel(_eq(a, b), equal, _b(BinOp.ADD, m, t))
    return f


def _shift(left):
    def f(a, b):
        bits = np.dtype(a.dtype).itemsize * 8
        inside = _and(build.compare(CmpOp.GE, b, 0), _lt(b, bits))
        if left:
            return _sel(inside, _b(BinOp.SHL, a, b), _k(0, a))
        if not dtypes.is_signed(a.dtype):
            return _sel(inside, _b(BinOp.SHR, a, b), _k(0, a))
        return _sel(inside, _b(BinOp.SHR, a, b), _sel(_lt(a, 0), _k(-1, a), _k(0, a)))
    return f


def _cmp(op):
    return lambda a, b: build.compare(op, a, b)


def _logical_xor(a, b):
    return build.compare(CmpOp.NE, build.truth(a), build.truth(b))


def _pow(a, b):          # (float_power, and power without its run-time check)
    return _b(BinOp.POW, a, b)


BINARY = {
    "add": (np.add, lambda a, b: _b(BinOp.ADD, a, b)),
    "subtract": (np.subtract, lambda a, b: _b(BinOp.SUB, a, b)),
    "multiply": (np.multiply, lambda a, b: _b(BinOp.MUL, a, b)),
    "divide": (np.divide, lambda a, b: _b(BinOp.DIV, a, b)),
    "floor_divide": (np.floor_divide, _floor_divide),
    "remainder": (np.remainder, _remainder),
    "fmod": (np.fmod, _fmod),
    "power": (np.power, build.power),   # (a negative integer exponent: its ValueError)
    "float_power": (np.float_power, _pow),
    "maximum": (np.maximum, _minmax(BinOp.MAX, True)),
    "minimum": (np.minimum, _minmax(BinOp.MIN, True)),
    "fmax": (np.fmax, _minmax(BinOp.MAX, False)),
    "fmin": (np.fmin, _minmax(BinOp.MIN, False)),
    "arctan2": (np.arctan2, lambda a, b: _b(BinOp.ATAN2, a, b)),
    "hypot": (np.hypot, _hypot),
    "copysign": (np.copysign, _copysign),
    "heaviside": (np.heaviside, _heaviside),
    "logaddexp": (np.logaddexp, _logaddexp(False)),
    "logaddexp2": (np.logaddexp2, _logaddexp(True)),
    "bitwise_and": (np.bitwise_and, lambda a, b: _b(BinOp.AND, a, b)),
    "bitwise_or": (np.bitwise_or, lambda a, b: _b(BinOp.OR, a, b)),
    "bitwise_xor": (np.bitwise_xor, lambda a, b: _b(BinOp.XOR, a, b)),
    "left_shift": (np.left_shift, _shift(True)),
    "right_shift": (np.right_shift, _shift(False)),
    "greater": (np.greater, _cmp(CmpOp.GT)),
    "greater_equal": (np.greater_equal, _cmp(CmpOp.GE)),
    "less": (np.less, _cmp(CmpOp.LT)),
    "less_equal": (np.less_equal, _cmp(CmpOp.LE)),
    "equal": (np.equal, _cmp(CmpOp.EQ)),
    "not_equal": (np.not_equal, _cmp(CmpOp.NE)),
    "logical_and": (np.logical_and, lambda a, b: build.logical(BinOp.AND, a, b)),
    "logical_or": (np.logical_or, lambda a, b: build.logical(BinOp.OR, a, b)),
    "logical_xor": (np.logical_xor, _logical_xor),
}
# operands compared or combined as they are (NEP 50 comparison rules in build.compare)
_OWN_DTYPE |= {"greater", "greater_equal", "less", "less_equal", "equal", "not_equal",
               "logical_and", "logical_or", "logical_xor"}


# -- builders -------------------------------------------------------------------------------
def result_type(ufunc, name, *xs) -> str:
    """NumPy's result dtype of `ufunc` on operands xs, or NumPy's TypeError for dtypes the
    ufunc has no loop for (bitwise on floats, negative of bool...)."""
    try:
        return build.result_dtype(ufunc, *(typed(x, *xs) for x in xs))
    except TypeError as e:         # (an instance of NumPy's class too: its UFuncTypeError)
        types = " and ".join(operand(x).dtype for x in xs)
        text = getattr(e, "message", None) or str(e)
        raise numpy_kind(ArgumentError, numpy_base(e, ArgumentError))(
            build.numpy_advice(e) or f"{text} (the input type{'s' if len(xs) > 1 else ''}: "
            f"{types})", user_loc()) from None


def unary(x, fn, dtype=None):
    """The ufunc UNARY[fn] over x (computed in `dtype` when given, as NumPy's dtype=)."""
    ufunc, f = UNARY[fn]
    x = operand(x, "x")
    if dtype is not None:
        return elementwise(lambda a: _c(f(_c(a, dtype)), dtype), x)
    rt = result_type(ufunc, fn, x)
    if fn in _OWN_DTYPE:
        return elementwise(f, x)
    if fn == "sinc":
        rt = "float64" if _is_int(x) else rt
    return elementwise(lambda a: f(_c(a, rt)), x)


def binary(x1, x2, fn, dtype=None, unchecked=False):
    """The ufunc BINARY[fn] over x1 and x2, broadcast (in `dtype` when given). With
    `unchecked`, power's negative integer exponents are the caller's to refuse (those
    a where= mask leaves out are no error)."""
    ufunc, f = BINARY[fn]
    if unchecked and fn == "power":
        f = _pow
    x1, x2 = operand(x1, "x1"), operand(x2, "x2")
    if dtype is not None:       # (the loop is dtype's: subtract(bool, bool, dtype=int16))
        return elementwise(lambda a, b: _c(f(_c(a, dtype), _c(b, dtype)), dtype), x1, x2)
    rt = result_type(ufunc, fn, x1, x2)
    if fn in _OWN_DTYPE:
        return elementwise(f, x1, x2)
    return elementwise(lambda a, b: f(_c(a, rt), _c(b, rt)), x1, x2)


def round_(x, decimals=0):
    """np.round: half to even at `decimals` places (negative: tens, hundreds...)."""
    x = operand(x, "a")
    if x.dtype == "bool":
        # NumPy rounds bools as rint (float16: float32 here, as every float function of
        # bools in a definition) and refuses other decimals: its multiply's float64 result
        # cannot be cast back to bool
        if decimals == 0:
            return unary(x, "rint")
        try:
            np.round(np.zeros(1, np.bool_), decimals)
        except TypeError as e:
            raise numpy_kind(ArgumentError, numpy_base(e, ArgumentError))(
                f"{e} (round of a bool array to decimals={decimals})", user_loc()) from None
    if dtypes.is_int(x.dtype):
        if decimals >= 0:
            return elementwise(lambda a: a, x)
        f = 10 ** -decimals
        if x.dtype in ("int32", "int64"):
            f = float(f) if decimals >= -308 else math.inf      # (as NumPy's power of 10)
            return elementwise(lambda a: _round_through_float64(a, f), x)
        if f > 2 ** 62:                 # (past every other integer type's range: all 0)
            return elementwise(lambda a: _k(0, a), x)

        def rnd(v):
            # in int64: the remainder's double and the rounded multiple of f can leave a
            # narrow type (round(int8(-128), -2) is -100, not a wrapped -200)
            a = _c(v, "int64")
            q = _b(BinOp.FLOORDIV, a, _k(f, a))
            r2 = _b(BinOp.MUL, _b(BinOp.SUB, a, _b(BinOp.MUL, q, _k(f, a))), _k(2, a))
            up = _or(_gt(r2, f), _and(_eq(r2, f), _eq(_b(BinOp.MOD, q, _k(2, a)), 1)))
            return _c(_b(BinOp.MUL, _b(BinOp.ADD, q, _sel(up, _k(1, a), _k(0, a))),
                         _k(f, a)), v.dtype)
        return elementwise(rnd, x)
    if decimals == 0:
        return elementwise(_rint, x)
    s = power_of_ten(abs(decimals))       # (10 ** 400 is inf: NumPy's rounding gives NaN)
    if decimals > 0:
        return elementwise(lambda a: _b(BinOp.DIV, _rint(_b(BinOp.MUL, a, _k(s, a))),
                                        _k(s, a)), x)
    return elementwise(lambda a: _b(BinOp.MUL, _rint(_b(BinOp.DIV, a, _k(s, a))), _k(s, a)), x)


def power_of_ten(n):
    """10.0 ** n (n >= 0) as NumPy's round scales by it: exact to 1e22, and past that 1e9
    multiplied by 10 n - 9 times, which drifts from the nearest double (1e23 is
    9.999999999999999e+22 there), up to inf; round(x, 23) of NumPy's float64s differs
    in the last bit from a scale of 1e23 for about half of them."""
    if n < 9:
        return 10.0 ** n
    s = 1e9
    for _ in range(n - 9):
        s *= 10.0
        if s == math.inf:
            break
    return s


def _round_through_float64(v, f):
    """NumPy's round of an int32 or int64 to a multiple of f: rint(x / f) * f in float64,
    converted back as x86 converts, a result outside the type being its minimum
    (round(int32 min, -1) is int32 min; int64s beyond 2**53 lose their low digits)."""
    q = _c(v, "float64")
    q = _b(BinOp.MUL, _rint(_b(BinOp.DIV, q, _k(f, q))), _k(f, q))
    lo = -2.0 ** (dtypes.itemsize(v.dtype) * 8 - 1)
    outside = _or(_or(_lt(q, _k(lo, q)), build.compare(CmpOp.GE, q, _k(-lo, q))), _isnan(q))
    return _sel(outside, _k(int(lo), v), _c(_sel(outside, _k(0.0, q), q), v.dtype))


def _no_bounds_of_bools():
    """NumPy 2's error for clip of bools without bounds (its clip is then positive,
    which has no bool loop), raised where the installed NumPy raises it."""
    try:
        np.positive(np.zeros(1, np.bool_))
    except TypeError as e:
        raise numpy_kind(ArgumentError, type(e))(f"clip(): {e}", user_loc()) from None


def clip(x, *bounds, lo=True, hi=True, dtype=None):
    """np.clip: minimum(maximum(x, lo), hi) in the operands' common dtype or `dtype` (NaN
    propagates); `bounds` are the lower and upper bounds that are given, as `lo` and `hi`
    say."""
    xs = [operand(x, "a")] + [operand(v, "a_min/a_max") for v in bounds]
    rt = dtype if dtype is not None else xs[0].dtype if len(xs) == 1 else \
        result_type(np.maximum if len(xs) == 2 else np.clip, "clip", *xs)
    if len(xs) == 1 and rt == "bool":
        _no_bounds_of_bools()

    def f(a, *vs):
        if dtypes.is_int(rt) and rt != "bool":
            vs = [_past_the_range(v, rt, low) for v, low in zip(vs, [True] * lo + [False])]
        a, vs = _c(a, rt), [_c(v, rt) for v in vs]
        if lo and hi and dtypes.is_float(rt):
            # NumPy's two-bound clip keeps x where it equals a bound (-0.0 clipped to
            # [0.0, 0.0] stays -0.0), a NaN anywhere wins, and hi wins where lo > hi
            low, high = vs
            a = _sel(_or(_lt(a, low), _isnan(low)), low, a)
            return _sel(_or(_gt(a, high), _isnan(high)), high, a)
        if (lo or hi) and dtypes.is_float(rt):
            # one bound: the bound wins a tie (clip(0.0, -0.0, None) is -0.0), NaN wins
            b = vs[0]
            keep = _gt(a, b) if lo else _lt(a, b)
            return _sel(_or(keep, _isnan(a)), a, b)
        if lo:
            a = _b(BinOp.MAX, a, vs.pop(0))
        if hi:
            a = _b(BinOp.MIN, a, vs.pop(0))
        return a
    return elementwise(f, *xs)


def _past_the_range(v, dtype, low):
    """A Python-int argument bound of clip: one below the integers' range (a lower bound)
    or above it (an upper one) clips nothing, as NumPy's clip takes it (the wrapper does
    so for a number it knows); the check at the call still refuses the other side."""
    if not (getattr(v, "weak", False) and v.dtype == "int64") or isinstance(v, Const):
        return v
    lo, hi = build.int_bounds(dtype)
    return _b(BinOp.MAX, v, lo) if low else _b(BinOp.MIN, v, hi)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """np.isclose: |a - b| <= atol + rtol * |b| where b is finite, or a == b (equal
    infinities); NaNs equal where equal_nan. The tolerances are operands (a number is a
    run-time scalar: one kernel serves every value), each step typed as NumPy's (NEP 50):
    b made inexact (float64 for integers; a Python int a weak float), |a - b| in a's and
    b's dtype, the tolerance in b's and the tolerances' (a np.float64 rtol makes it
    float64 for float32 arrays)."""
    x, y = operand(a, "a"), operand(b, "b")
    r, t = operand(rtol, "rtol"), operand(atol, "atol")

    def f(p, q, r, t):
        if not dtypes.is_float(q.dtype):
            # (a weak scalar stays weak: float32 - 2 is float32, as float32 - 2.0)
            q = _b(BinOp.ADD, q, 0.0) if q.weak else _c(q, "float64")
        near = build.compare(CmpOp.LE, _call(Intrin.ABS, _b(BinOp.SUB, p, q)), _b(
            BinOp.ADD, t, _b(BinOp.MUL, r, _call(Intrin.ABS, q))))
        e = _or(_and(near, build.call(Intrin.ISFINITE, q)), _eq(p, q))
        if not equal_nan or _is_int(p):
            return e
        return _or(e, _and(_isnan(p), _isnan(q)))
    return elementwise(f, x, y, r, t)


def where(cond, x, y):
    """np.where(cond, x, y): x where cond holds, else y, the three broadcast together. A
    Python int outside the integer dtype of the other operand wraps into it, as NumPy's
    where does (where(c, uint8, -1) gives 255; the ufuncs raise instead)."""
    x, y = operand(x, "x"), operand(y, "y")
    return elementwise(build.select, operand(cond, "condition"), _wrapped(x, y), _wrapped(y, x))


def _wrapped(p, other):
    # (NumPy wraps what a C int64 or uint64 holds; a larger int is its OverflowError)
    if isinstance(p, Const) and p.weak and isinstance(p.value, int) and not isinstance(
            p.value, bool) and dtypes.is_int(other.dtype) and other.dtype != "bool" \
            and -2 ** 63 <= p.value < 2 ** 64:
        lo, hi = build.int_bounds(other.dtype)
        if not lo <= p.value <= hi:
            return Const((p.value - lo) % (hi - lo + 1) + lo, other.dtype)
    elif getattr(p, "weak", False) and p.dtype == "int64" and not isinstance(p, Const) \
            and not getattr(other, "weak", False) and dtypes.is_int(other.dtype) \
            and other.dtype != "bool":
        # a Python-int argument: converted to int64 (checked there at the call, as
        # NumPy's), then wrapped into the other operand's type by a plain cast
        return build.cast(build.cast(p, "int64"), other.dtype)
    return p


def nan_to_num(x, nan=0.0, *fills, posinf=False, neginf=False):
    """np.nan_to_num: NaN to `nan`, infinities to the `fills` given (`posinf` and `neginf`
    say which; else the dtype's largest finite values), each cast to x's dtype; integers
    unchanged. The values are operands: on arrays run-time scalars, so every value shares
    one kernel."""
    x = operand(x, "x")
    if x.dtype == "bool" or dtypes.is_int(x.dtype):
        return elementwise(lambda a: a, x)
    big = float(np.finfo(x.dtype).max)

    def f(a, v, *given):
        given = list(given)
        hi = _c(given.pop(0), a.dtype) if posinf else _k(big, a)
        lo = _c(given.pop(0), a.dtype) if neginf else _k(-big, a)
        return _sel(_isnan(a), _c(v, a.dtype), _sel(
            _eq(a, math.inf), hi, _sel(_eq(a, -math.inf), lo, a)))
    return elementwise(f, x, operand(nan, "nan"), *(operand(v, "posinf/neginf") for v in fills))


any_size(unary, binary, round_, clip, where, nan_to_num, isclose)
# Builders of one array operand, which broadcasts against nothing: a size of 1 of it stays
# symbolic in a dynamic kernel's key (manipulation.concatenate.solid), so exp of vectors
# of random lengths compiles one kernel, not one for length 1 and one for the others.
# Neither decides anything on a size (round_ on decimals and the dtype only). (binary,
# clip, where, nan_to_num, isclose: operands that may be arrays broadcast together.)
unary.solid = lambda fn, dtype=None: every_dim
round_.solid = lambda decimals=0: every_dim
# ... and those whose operands broadcast together, in a call with one array of any rank
# (the others numbers or 0-d arrays: x * 2.0, clip(x, 0, 1)): jitdl.eager._alone
for _op in (binary, clip, where, nan_to_num, isclose):
    _op.solid_alone = True
del _op
# (NumPy gives round and isclose results in C order whatever the operands' layout)
layout_free("elementwise", unary, binary, clip, where, nan_to_num)
scalar_result(unary, binary, round_, clip, where, nan_to_num, isclose)


def _scalar_ufunc(ufunc, inputs):
    """NumPy's ufunc `ufunc` of scalar expressions (build.other_ufunc: np.square(n) of a
    dynamic size n), as UNARY / BINARY compute it; NotImplemented for one they lack."""
    name = ufunc.__name__
    if len(inputs) == 1 and UNARY.get(name, (None,))[0] is ufunc:
        return unary(inputs[0], name)
    if len(inputs) == 2 and BINARY.get(name, (None,))[0] is ufunc:
        return binary(*inputs, name)
    return NotImplemented


build.other_ufunc = _scalar_ufunc
