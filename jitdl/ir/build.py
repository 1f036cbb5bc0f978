"""Builders that type expressions as NumPy 2 does (NEP 50 weak scalars) and fold constants.

Every node the tracer creates goes through these functions, so operands of a Binary,
Compare or Select always carry the node's computation dtype (casts are explicit).
"""
from __future__ import annotations

import builtins
import contextlib
import dataclasses
import dis
import functools
import importlib
import inspect
import logging
import math
import pprint
import sys
import threading
import warnings

import numpy as np

from jitdl import dtypes
from jitdl.errors import (NEGATIVE_POWER, ArgumentError, ScalarOverflowError, numpy_base,
                          numpy_kind, user_loc)
from jitdl.ir.nodes import (Access, BinOp, Binary, Call, Cast, CmpOp, Compare, Const, Expr,
                            Intrin, IterVar, PrimFunc, Select, SizeVar, Stmt, UnOp,
                            Unary)
from jitdl.ir import nodes as nodes_module
from jitdl.ir.printer import to_text
from jitdl.ir.visit import expr_children, map_expr, same_zeros, walk_expr, walk_unique

_BIN_UFUNC = {
    BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
    BinOp.DIV: np.true_divide, BinOp.FLOORDIV: np.floor_divide, BinOp.MOD: np.remainder,
    BinOp.MIN: np.minimum, BinOp.MAX: np.maximum, BinOp.POW: np.power,
    BinOp.AND: np.bitwise_and, BinOp.OR: np.bitwise_or, BinOp.XOR: np.bitwise_xor,
    BinOp.SHL: np.left_shift, BinOp.SHR: np.right_shift, BinOp.ATAN2: np.arctan2,
    BinOp.FMOD: np.fmod,
}
_CMP_UFUNC = {
    CmpOp.LT: np.less, CmpOp.LE: np.less_equal, CmpOp.GT: np.greater,
    CmpOp.GE: np.greater_equal, CmpOp.EQ: np.equal, CmpOp.NE: np.not_equal,
}
_INTRIN_UFUNC = {
    Intrin.EXP: np.exp, Intrin.LOG: np.log, Intrin.SQRT: np.sqrt, Intrin.TANH: np.tanh,
    Intrin.SIN: np.sin, Intrin.COS: np.cos, Intrin.TAN: np.tan, Intrin.ATAN: np.arctan,
    Intrin.ABS: np.abs, Intrin.FLOOR: np.floor, Intrin.CEIL: np.ceil, Intrin.ROUND: np.rint,
    Intrin.TRUNC: np.trunc, Intrin.SIGN: np.sign, Intrin.LOG1P: np.log1p,
    Intrin.EXPM1: np.expm1, Intrin.ASIN: np.arcsin, Intrin.ACOS: np.arccos,
    Intrin.EXP2: np.exp2, Intrin.LOG2: np.log2, Intrin.LOG10: np.log10,
    Intrin.SINH: np.sinh, Intrin.COSH: np.cosh,
    Intrin.ISNAN: np.isnan, Intrin.ISINF: np.isinf, Intrin.ISFINITE: np.isfinite,
    Intrin.SIGNBIT: np.signbit,
    # not NumPy ufuncs; typed like exp
    Intrin.RSQRT: np.sqrt, Intrin.SIGMOID: np.exp, Intrin.ERF: np.exp,
}
_SAMPLE = {"bool": True, "int64": 1, "float64": 1.0}


class SymbolicValueError(TypeError):
    """A symbolic value was used where Python needs a concrete one."""


class ScalarIndexError(TypeError):
    """A scalar expression (a scalar argument, say) subscripted like a tensor."""

    def __init__(self, expr):
        super().__init__(f"`{text(expr)}` is a scalar value, not a tensor: it cannot be "
                         "indexed")
        self.expr = expr


def text(node) -> str:
    return to_text(node)


def symbolic_bool_error(e) -> Exception:
    return SymbolicValueError(
        f"the condition `{text(e)}` is symbolic and has no Python truth value here; "
        "write a select, jd.select(cond, a, b) (or `a if cond else b` in the definition's "
        "own function: the capture rewrites it there, not in helpers it calls), instead "
        "of an `if` statement or a Python-level test")


def symbolic_index_error(e) -> Exception:
    if a_size(e):
        return SymbolicValueError(
            f"`{text(e)}` is a dynamic size, a number only where the kernel runs, but is "
            "used where Python needs a concrete number while the definition is traced (a "
            "list index, a Python for loop's range(), math.gcd...); compute with it as an "
            "expression (+ - * // %, min, max, `x if c else y`), or keep that dimension "
            "out of dynamic=")
    return SymbolicValueError(
        f"`{text(e)}` is symbolic (it depends on a tensor element, an index or a scalar "
        "argument) but is used where Python needs a concrete number, such as a shape, a "
        "range() bound or a list index")


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, int, float)) and not isinstance(x, np.generic):
        # (a NumPy float64 is a Python float too, but strong: np.float64(3) * float32
        # array is float64)
        dt = dtypes.weak_kind_dtype(x)
        if dt == "int64" and not _INT64[0] <= x <= _INT64[1]:
            # kept as the Python int it is: a float operand makes it a float (NEP 50:
            # float32_array + 2**70 is float32); an integer one raises (_check_python_int)
            return Const(int(x), dt, weak=True)
        return Const(_py(x, dt), dt, weak=True)
    if isinstance(x, np.generic) or (isinstance(x, np.ndarray) and x.ndim == 0):
        dt = dtypes.normalize(x.dtype)
        return Const(_py(x.item(), dt), dt)
    if hasattr(x, "__jitdl_expr__"):
        return x.__jitdl_expr__()
    raise TypeError(f"{type(x).__name__} value {x!r} cannot be used in a jitdl expression")


def int_bounds(dtype):
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def _check_python_int(value, dtype):
    """NumPy 2 (NEP 50): a Python int that does not fit the integer dtype it meets is an
    OverflowError (`int32_array * 2**40`, `uint8_array + (-1)`), never a wrapped value."""
    lo, hi = int_bounds(dtype)
    if not lo <= value <= hi:
        raise ScalarOverflowError(
            f"Python integer {value} out of bounds for {dtype} (the range is [{lo}, {hi}]): "
            f"a Python int takes the dtype of the array it meets, and NumPy 2 raises here "
            f"too; widen the array first (e.g. jd.int64(X[i]) * {value}) or write the "
            f"number as a float", user_loc())


_INT64 = (-2 ** 63, 2 ** 63 - 1)
_MIRROR = {CmpOp.LT: CmpOp.GT, CmpOp.GT: CmpOp.LT, CmpOp.LE: CmpOp.GE, CmpOp.GE: CmpOp.LE}


def _weak_int_const(x):
    return isinstance(x, Const) and x.weak and x.dtype == "int64"


def _weak_const(x):
    return isinstance(x, Const) and x.weak


def _py(value, dtype):
    if dtype == "bool":
        return bool(value)
    if dtypes.is_int(dtype):
        return int(np.array(value).astype(dtype))
    with np.errstate(over="ignore"):        # (a constant past float32's range is inf)
        return float(np.array(value).astype(dtype))


def _sample(dt, weak):
    return _SAMPLE[dt] if weak else np.ones(1, dt)


@functools.lru_cache(maxsize=None)
def result_dtype(ufunc, *typed) -> str:
    """The dtype NumPy gives `ufunc` on operands of (dtype, weak) pairs; float16 -> float32."""
    samples = [_sample(dt, weak) for dt, weak in typed]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = ufunc(*samples)
        except (TypeError, np.exceptions.DTypePromotionError) as e:
            # (an instance of NumPy's class too, as its UFuncTypeError for sign of bools)
            # (NumPy's own text: the samples have the operands' dtypes and weakness)
            raise numpy_kind(ArgumentError, numpy_base(e, ArgumentError))(str(e)) from None
    name = np.asarray(out).dtype.name
    if name == "float16":
        return "float32"
    if name not in dtypes.SUPPORTED:
        raise TypeError(f"{ufunc.__name__} of {typed} gives unsupported dtype {name}")
    return name


def numpy_advice(error):
    """NumPy's own message where it says what to use instead (subtract and negative of
    bools: the `^` and `~` operators), which users know and search for; else None."""
    text = str(error)
    return text if text.lower().startswith(_ADVICE) else None


_ADVICE = ("numpy boolean", "the numpy boolean")


def cast(x, dtype: str) -> Expr:
    x = as_expr(x)
    dtype = dtypes.normalize(dtype)
    if x.dtype == dtype and not x.weak:
        return x
    if _weak_int_const(x) and dtypes.is_int(dtype):
        _check_python_int(x.value, dtype)
    if x.dtype == dtype:
        return Const(x.value, dtype) if isinstance(x, Const) else Cast(x, dtype)
    if isinstance(x, Const):
        return Const(_py(x.value, dtype), dtype)
    return Cast(x, dtype)


def _to(x, dtype):
    """Cast to a computation dtype, keeping weakness of constants (internal)."""
    if _weak_int_const(x) and dtypes.is_int(dtype):
        _check_python_int(x.value, dtype)
    if x.dtype == dtype:
        return x
    if isinstance(x, Const):
        return Const(_py(x.value, dtype), dtype, x.weak)
    return Cast(x, dtype)


def _fold(ufunc, consts, dtype):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for c in consts:
            if _weak_int_const(c):
                _check_python_int(c.value, c.dtype)
        vals = [np.array(c.value, dtype=c.dtype) for c in consts]
        return _py(ufunc(*vals), dtype)


def typed(x, *others):
    """(dtype, weak) of operand x as NumPy's promotion sees it beside `others`. An
    expression of a dynamic definition's sizes and Python numbers alone (`X.shape[1]`,
    `n * 0.5`) is a Python number in a static trace: beside a float it is weak as that
    number is, so `X.sum(axis=1) / X.shape[1]` of a float32 X is float32 in both. (Beside
    an integer it stays int64, where a static trace could overflow a narrower type.)"""
    return x.dtype, x.weak or (any(dtypes.is_float(o.dtype) for o in others) and
                               _of_sizes(x))


def python_type(x):
    """The type of the Python number a static trace has where a dynamic one has the
    expression x (int for a size, float for `n / 2` or `float(n)`, bool for a condition
    of sizes, `n > 3`), or None where x stands for no Python number (an index, an
    element, `np.float64(n)`)."""
    if isinstance(x, Expr) and _of_sizes(x):
        return int if x.dtype == "int64" else float
    if isinstance(x, Expr) and x.dtype == "bool" and a_size(x):
        return bool
    return None


def strong(x):
    """x as a NumPy scalar, not a Python number (`np.float64(n)`, `jnp.exp(n)` of a size n):
    an expression of sizes alone, which `typed` takes as the Python number it is in a
    static trace, gets a cast to its own dtype that marks it strong."""
    return Cast(x, x.dtype) if isinstance(x, Expr) and _of_sizes(x) else x


def _of_sizes(x):
    """x is made of sizes and Python numbers alone (weak constants), a Python number in
    a static trace; a choice among such by a condition of sizes (`2 if n == 3 else 1`,
    python_choice) too."""
    if x.dtype not in ("int64", "float64"):
        return False
    sized, stack, seen = False, [x], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, SizeVar):
            sized = True
        elif isinstance(n, Cast) and n.value.dtype == n.dtype:
            return False                # (strong's mark)
        elif n.dtype == "bool":
            if not a_size(n):           # (a condition of sizes: a Python bool)
                return False
            sized = True
            continue
        elif isinstance(n, Select):
            if not (n.cond.dtype == "bool" and a_size(n.cond)):
                return False
            sized = True
            stack += [n.t, n.f]
            continue
        elif not (isinstance(n, (Binary, Unary, Cast, Call)) or
                  isinstance(n, Const) and n.weak):
            return False
        stack.extend(expr_children(n))
    return sized


def python_choice(sel, t, f):
    """The select `sel` of `t if cond else f`, cond a condition of sizes and t, f Python
    numbers (or sizes): a static trace has one of them, a Python number, so the select
    keeps its arms weak (select() made them strong: an array operation's), which typed
    and python_type read as sizes are read (_of_sizes): `X * (2 if n == 3 else 1)` of a
    float32 X is float32. A float64 one is weak itself (beside an int32 X too)."""
    if sel.dtype == "float64":
        return dataclasses.replace(sel, weak=True)
    if sel.dtype != "int64":
        return sel
    return dataclasses.replace(sel, t=_to(as_expr(t), "int64"), f=_to(as_expr(f), "int64"))


def _may_be_negative(b) -> bool:
    """b is a Python int exponent that is negative (`-1`), or an int of sizes alone (a
    Python int in a static trace) that may be for some sizes (`-n`, `n - 3`): Python's
    power of an int by it is a float there."""
    if _weak_int_const(b):
        return b.value < 0
    if b.dtype != "int64" or not _of_sizes(b):
        return False
    from jitdl.ir.analysis import bounds
    sizes = {v: (0, 2 ** 62) for v in walk_unique(b) if isinstance(v, SizeVar)}
    return not bounds(b, sizes)[0] >= 0


def _may_be_zero(b) -> bool:
    """b is an int of sizes alone (a Python int in a static trace) that is 0 for some
    sizes (`n - 3`; not `n + 1`)."""
    if b.dtype != "int64" or not _of_sizes(b):
        return False
    from jitdl.ir.analysis import bounds
    lo, hi = bounds(b, {v: (0, 2 ** 62) for v in walk_unique(b) if isinstance(v, SizeVar)})
    return not (lo > 0 or hi < 0)


# installed by jitdl.te.ops: have the call check that an int of sizes is not 0, else
# raise with a message (require_size's error at the user's line)
nonzero_required = None


def _python_zero_division(op: BinOp, a, b):
    """Python's ZeroDivisionError where the user's code divides Python numbers of sizes
    (`1 / (n - 3)`, `7 // (n - 3)`, `7 % (n - 3)`, `(n - 3) ** -1`, as a static trace
    computes them) by an int of sizes that is 0 at a call: the call checks it (the kernel
    would give inf, 0 or NaN for the number Python refuses)."""
    if op in (BinOp.DIV, BinOp.FLOORDIV, BinOp.MOD):
        divisor = b
    elif op == BinOp.POW and _may_be_negative(b):
        divisor = a
    else:
        return
    if nonzero_required is None or not _TRACING.depth or _TRACING.guarded or \
            not all(_of_sizes(x) or _weak_const(x) for x in (a, b)) or \
            not _may_be_zero(divisor) or not _written_by_user():
        return
    what = "0.0 cannot be raised to a negative power" if op == BinOp.POW else \
        "integer division or modulo by zero" if op != BinOp.DIV else "division by zero"
    nonzero_required(_zero_refused(op, a, b, divisor),
                     f"ZeroDivisionError: {what}: `{text(divisor)}` is 0 here, "
                     f"in `{text(Binary(op, a, b, a.dtype))}`")


def _written_by_user():
    """For _python_zero_division: the operator binary() computes is written in the user's
    code (_python_arithmetic), binary's caller being an Operators method (through power()
    for `**`), which its _giving_way wrapper calls."""
    f = sys._getframe(3)        # (0: this, 1: _python_zero_division, 2: binary)
    if f.f_code is power.__code__:
        f = f.f_back
    for _ in range(2):
        f = f.f_back if f is not None else None
    return f is not None and _python_arithmetic(f)


def _zero_refused(op: BinOp, a, b, divisor):
    """An int of sizes that is 0 just where Python refuses a / b: the divisor, but for a
    power by an int of sizes |a| + max(b + 1, 0), 0 where a is 0 and b negative alone
    (`(n - 5) ** (n - 3)` is 0 at n == 5)."""
    if op != BinOp.POW or b.dtype != "int64" or isinstance(b, Const):
        return divisor
    return binary(BinOp.ADD, binary(BinOp.MAX, a, binary(BinOp.SUB, 0, a)),
                  binary(BinOp.MAX, binary(BinOp.ADD, b, 1), 0))


def binary(op: BinOp, a, b) -> Expr:
    a, b = as_expr(a), as_expr(b)
    if op == BinOp.FMOD and not (dtypes.is_float(a.dtype) or dtypes.is_float(b.dtype)):
        # (FMOD, C's fmod, is of floats: np.fmod of ints as jd.numpy computes it)
        return _other_ufunc(np.fmod, (a, b))
    _python_zero_division(op, a, b)
    if op == BinOp.POW and a.dtype == "int64" and (_of_sizes(a) or _weak_int_const(a)) and \
            _may_be_negative(b):
        # (a Python int to a negative power is a float, `(n + 1) ** -1` and `2 ** -n` of
        # a size n: an int64 power was 0 or garbage)
        a = binary(BinOp.MUL, a, 1.0)
    dtype = result_dtype(_BIN_UFUNC[op], typed(a, b), typed(b, a))
    weak = a.weak and b.weak
    if dtype == "bool" and op in (BinOp.ADD, BinOp.MUL):
        op = BinOp.OR if op == BinOp.ADD else BinOp.AND
    a, b = _to(a, dtype), _to(b, dtype)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_fold(_BIN_UFUNC[op], (a, b), dtype), dtype, weak)
    return Binary(op, a, b, dtype, weak)


def size_test(op: CmpOp, a, b):
    """`==` / `!=` of a dynamic argument's size (SizeVar) as a Python bool where it is
    known: a size equals itself and is never 1 (size-1 dimensions stay concrete:
    size_pattern), so shape tests such as `if X.shape[-1] == 1` keep their Python answer.
    None where it is not known."""
    if op not in (CmpOp.EQ, CmpOp.NE):
        return None
    s, o = (a, b) if isinstance(a, SizeVar) else (b, a)
    if not isinstance(s, SizeVar):
        return None
    if o is s or type(o) is int and o == 1 or \
            isinstance(o, Const) and type(o.value) is int and o.value == 1:
        return (o is s) == (op is CmpOp.EQ)
    return None


def written_compare(op: CmpOp, a, b):
    """A comparison the user wrote: its Python bool where size_test knows it, else the
    Compare node."""
    known = size_test(op, a, b)
    return compare(op, a, b) if known is None else known


def compare(op: CmpOp, a, b) -> Expr:
    a, b = as_expr(a), as_expr(b)
    common = result_dtype(np.add if "bool" not in (a.dtype, b.dtype) else np.maximum,
                          typed(a, b), typed(b, a))
    for big, other, right in ((b, a, True), (a, b, False)):
        if _weak_int_const(big) and not _INT64[0] <= big.value <= _INT64[1] and \
                dtypes.is_int(other.dtype) and not _weak_int_const(other):
            # an integer against a Python int beyond int64 is decided by the int's sign
            # (NumPy 2: int64_array < 2**70 is all True): the same comparison against
            # the int64 bound, strict where the bound is never reached
            if not right:
                op = _MIRROR.get(op, op)
            if big.value > 0:
                op = {CmpOp.LT: CmpOp.LE, CmpOp.GE: CmpOp.GT, CmpOp.EQ: CmpOp.GT,
                      CmpOp.NE: CmpOp.LE}.get(op, op)
            else:
                op = {CmpOp.GT: CmpOp.GE, CmpOp.LE: CmpOp.LT, CmpOp.EQ: CmpOp.LT,
                      CmpOp.NE: CmpOp.GE}.get(op, op)
            bound = Const(_INT64[1] if big.value > 0 else _INT64[0], "int64")
            return Compare(op, _to(other, "int64"), bound)
    if dtypes.is_int(common) and common != "int64":
        # NumPy 2 compares a Python int with a narrower integer exactly (int8 < 1000 is
        # True, uint8 == -1 False): compare in int64 unless the int is a literal that fits
        lo, hi = int_bounds(common)
        if any(x.weak and x.dtype == "int64" and not (isinstance(x, Const)
                                                      and lo <= x.value <= hi)
               for x in (a, b)):
            common = "int64"
    a, b = _to(a, common), _to(b, common)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_fold(_CMP_UFUNC[op], (a, b), "bool"), "bool")
    return Compare(op, a, b)


def unary(op: UnOp, a) -> Expr:
    a = as_expr(a)
    if op == UnOp.NEG:
        if a.dtype == "bool":
            raise TypeError("negation `-` is not defined for bool values; use `not`/`~`")
        if isinstance(a, Const):
            return Const(_fold(np.negative, (a,), a.dtype), a.dtype, a.weak)
    elif op == UnOp.NOT:
        if dtypes.is_float(a.dtype):
            raise TypeError(f"`~` is not defined for {a.dtype} values")
        if isinstance(a, Const):
            fn = np.logical_not if a.dtype == "bool" else np.invert
            return Const(_fold(fn, (a,), a.dtype), a.dtype, a.weak)
        if isinstance(a, Unary) and a.op == UnOp.NOT:
            return a.a
    return Unary(op, a, a.dtype, a.weak)


def logical_not(a) -> Expr:
    return unary(UnOp.NOT, truth(a))


def truth(a) -> Expr:
    """A value as a condition: bools as they are, numbers compared with zero."""
    a = as_expr(a)
    return a if a.dtype == "bool" else compare(CmpOp.NE, a, 0)


def logical(op: BinOp, a, b) -> Expr:
    a, b = truth(a), truth(b)
    if isinstance(a, Const):
        if op == BinOp.AND:
            return b if a.value else a
        return a if a.value else b
    if isinstance(b, Const):
        if op == BinOp.AND:
            return a if b.value else b
        return b if b.value else a
    return Binary(op, a, b, "bool")


def call(fn: Intrin, *args) -> Expr:
    args = tuple(as_expr(x) for x in args)
    (a,) = args
    dtype = result_dtype(_INTRIN_UFUNC[fn], (a.dtype, a.weak))
    if fn in (Intrin.ISNAN, Intrin.ISINF, Intrin.ISFINITE, Intrin.SIGNBIT):
        operand = a.dtype
    else:
        operand = dtype
    if fn == Intrin.ABS and a.dtype == "bool":
        return a
    x = _to(a, operand)
    if isinstance(x, Const):
        return Const(_py(_eval_intrin(fn, x.value), dtype), dtype, a.weak)
    return Call(fn, (x,), dtype, a.weak)


def _eval_intrin(fn, v):
    if fn == Intrin.RSQRT:
        return 1.0 / math.sqrt(v) if v > 0 else (math.inf if v == 0 else math.nan)
    if fn == Intrin.SIGMOID:
        return 1.0 / (1.0 + math.exp(-v)) if v > -700 else 0.0
    if fn == Intrin.ERF:
        return math.erf(v)
    with np.errstate(all="ignore"):
        return _INTRIN_UFUNC[fn](np.float64(v) if not isinstance(v, bool) else v).item()


_dropped = threading.local()


@contextlib.contextmanager
def dropped_arms():
    """Collects the arms that selects with a constant condition drop (jd.select(m > 2, a,
    b) of a concrete m): index notation's range inference counts their accesses as it
    counts those of the arms of a select it keeps (Tensor Comprehensions' rule), so that a
    definition's ranges do not depend on whether a size made its condition constant; a
    trace forgets the call-time conditions of reductions only they hold. Scopes nest: an
    arm goes to each open one's list."""
    arms, saved = [], getattr(_dropped, "lists", ())
    _dropped.lists = saved + (arms,)
    try:
        yield arms
    finally:
        _dropped.lists = saved


def select(cond, t, f) -> Expr:
    cond, t, f = truth(cond), as_expr(t), as_expr(f)
    dtype = result_dtype(np.maximum if "bool" in (t.dtype, f.dtype) else np.add,
                         typed(t, f), typed(f, t))
    if t.dtype == "bool" and f.dtype == "bool":
        dtype = "bool"
    # a select is an array operation (np.where): its result is never a weak scalar,
    # so jd.select(c, 1.0, 0.0) is float64 as DESIGN.md settles
    t, f = cast(t, dtype), cast(f, dtype)
    if isinstance(cond, Const):
        for arms in getattr(_dropped, "lists", ()):
            arms.append(f if cond.value else t)
        return t if cond.value else f
    if t == f and same_zeros(t, f) and not any(isinstance(n, Access) for n in walk_expr(cond)):
        return t        # (a condition that reads a tensor stays: its access bounds indices)
    return Select(cond, t, f, dtype)


_UFUNC_BIN = {u: op for op, u in _BIN_UFUNC.items()}
_UFUNC_CMP = {u: op for op, u in _CMP_UFUNC.items()}
_UFUNC_INTRIN = {u: fn for fn, u in _INTRIN_UFUNC.items()
                 if fn not in (Intrin.RSQRT, Intrin.SIGMOID, Intrin.ERF)}


def numpy_ufunc(ufunc, method, inputs, kwargs):
    """np.exp(x), np.maximum(x, y)... on symbolic values: build the matching node."""
    if method != "__call__" or kwargs:
        return NotImplemented
    if ufunc in _UFUNC_BIN:
        return binary(_UFUNC_BIN[ufunc], *inputs)
    if ufunc in _UFUNC_CMP:
        return compare(_UFUNC_CMP[ufunc], *inputs)
    if ufunc in _UFUNC_INTRIN:
        return call(_UFUNC_INTRIN[ufunc], *inputs)
    if ufunc is np.negative:
        return unary(UnOp.NEG, *inputs)
    if ufunc is np.logical_not:
        return logical_not(*inputs)
    if ufunc is np.logical_and:
        return logical(BinOp.AND, *inputs)
    if ufunc is np.logical_or:
        return logical(BinOp.OR, *inputs)
    if ufunc is np.power:
        return binary(BinOp.POW, *inputs)
    return NotImplemented


# installed by jitdl.ops.elementwise: NumPy's other ufuncs (np.square, np.hypot) of
# scalar expressions, as jd.numpy computes them; NotImplemented for one it lacks
other_ufunc = None


def _other_ufunc(ufunc, inputs):
    if other_ufunc is None:     # (`import jitdl` leaves the op library for its first use)
        importlib.import_module("jitdl.ops.elementwise")
    return other_ufunc(ufunc, inputs)


def unsupported_ufunc_error(ufunc, method, inputs, kwargs) -> Exception:
    """The error for a NumPy ufunc jitdl does not compute on a symbolic value (a dynamic
    size, an element): NumPy's own said only that every operand returned NotImplemented."""
    call = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
    args = ", ".join([text(x) if isinstance(x, Expr) else repr(x) for x in inputs] +
                     [f"{k}=..." for k in kwargs])
    return SymbolicValueError(
        f"np.{call}({args}) of a symbolic value: jitdl computes NumPy's ufuncs of scalar "
        "expressions called plainly (no method such as .reduce, no keyword arguments such "
        f"as out= or dtype=){'' if method != '__call__' or kwargs else ', and has no ' + call}")


def power(a, b) -> Expr:
    """a ** b; of an integer result, a negative exponent is NumPy's ValueError, checked
    at run time on a read of an array operand (the exponent's where it is one, else the
    base's): min(b, 0) must be in [0, 1). An exponent of bool or uint8, or a constant
    >= 0, needs no check; operands that read no array (scalars alone) stay unchecked and
    give 0, as the IR's integer power does."""
    a, b = as_expr(a), as_expr(b)
    r = binary(BinOp.POW, a, b)
    src = b.value if isinstance(b, Cast) else b
    if not dtypes.is_int(r.dtype) or not dtypes.is_signed(b.dtype) or \
            src.dtype in ("bool", "uint8") or isinstance(src, Const) and src.value >= 0:
        return r
    check = ((binary(BinOp.MIN, cast(b, "int64"), Const(0, "int64")), 1, NEGATIVE_POWER),)
    for e in (b, a):
        target = _always_read(e)
        if target is not None:
            carried = dataclasses.replace(target, carried=target.carried + check)
            return map_expr(r, lambda n: carried if n is target else None)
    return r


def _always_read(e):
    """An array read that computing e always does (`Y[i]` of `Y[i] - 1`), to carry a
    check on e; None if e reads none outside a select's branches and reductions (which
    may read nothing)."""
    stack = [e]
    while stack:
        n = stack.pop()
        if isinstance(n, Access):
            return n
        stack.extend(reversed((n.cond,) if isinstance(n, Select) else
                              () if isinstance(n, nodes_module.Reduce) else expr_children(n)))
    return None


def modular_pow(base, exp, mod):
    """Python's pow(base, exp, mod) of a symbolic integer base (a dynamic size): square and
    multiply, reduced by mod at each step so that no product leaves int64 where mod fits
    in 31 bits (base ** exp itself would: pow(n, 10, 7) of n = 100). The exponent and the
    modulus must be Python ints, the exponent not negative (a modular inverse). A modulus
    of None is Python's base ** exp."""
    if mod is None:
        return binary(BinOp.POW, base, exp)
    if not (isinstance(exp, int) and isinstance(mod, int) and exp >= 0 and mod != 0 and
            abs(mod) < 2 ** 31) or not (isinstance(base, int) or isinstance(base, Expr) and
                                        dtypes.is_int(as_expr(base).dtype)):
        raise SymbolicValueError(
            f"pow({base}, {exp!r}, {mod!r}) of a symbolic value: jitdl computes a modular "
            "power of an integer expression by a Python int exponent >= 0 and a Python int "
            "modulus other than 0, below 2**31 in size")
    out, square = 1 % mod, base % mod
    while exp:
        if exp & 1:
            out = out * square % mod
        exp >>= 1
        if exp:
            square = square * square % mod
    return out


class Operators:
    """Python's operators on expressions: each builds IR with the builders above.
    `install()` puts them on Expr, so every node has them (== stays structural, except
    where the user's code compares while a definition is traced: written_comparison)."""

    def __add__(self, o): return binary(BinOp.ADD, self, o)
    def __radd__(self, o): return binary(BinOp.ADD, o, self)
    def __sub__(self, o): return binary(BinOp.SUB, self, o)
    def __rsub__(self, o): return binary(BinOp.SUB, o, self)
    def __mul__(self, o): return binary(BinOp.MUL, self, o)
    def __rmul__(self, o): return binary(BinOp.MUL, o, self)
    def __truediv__(self, o): return binary(BinOp.DIV, self, o)
    def __rtruediv__(self, o): return binary(BinOp.DIV, o, self)
    def __floordiv__(self, o): return binary(BinOp.FLOORDIV, self, o)
    def __rfloordiv__(self, o): return binary(BinOp.FLOORDIV, o, self)
    def __mod__(self, o): return binary(BinOp.MOD, self, o)
    def __rmod__(self, o): return binary(BinOp.MOD, o, self)
    def __pow__(self, o, mod=None):
        return power(self, o) if mod is None else modular_pow(self, o, mod)
    def __divmod__(self, o): return self // o, self % o
    def __rdivmod__(self, o): return o // self, o % self
    def __rpow__(self, o): return power(o, self)
    def __and__(self, o): return binary(BinOp.AND, self, o)
    def __rand__(self, o): return binary(BinOp.AND, o, self)
    def __or__(self, o): return binary(BinOp.OR, self, o)
    def __ror__(self, o): return binary(BinOp.OR, o, self)
    def __xor__(self, o): return binary(BinOp.XOR, self, o)
    def __rxor__(self, o): return binary(BinOp.XOR, o, self)
    def __lshift__(self, o): return binary(BinOp.SHL, self, o)
    def __rlshift__(self, o): return binary(BinOp.SHL, o, self)
    def __rshift__(self, o): return binary(BinOp.SHR, self, o)
    def __rrshift__(self, o): return binary(BinOp.SHR, o, self)
    def __neg__(self): return unary(UnOp.NEG, self)
    def __pos__(self): return self
    def __invert__(self): return unary(UnOp.NOT, self)
    def __abs__(self): return call(Intrin.ABS, self)
    def __lt__(self, o): return compare(CmpOp.LT, self, o)
    def __le__(self, o): return compare(CmpOp.LE, self, o)
    def __gt__(self, o): return compare(CmpOp.GT, self, o)
    def __ge__(self, o): return compare(CmpOp.GE, self, o)

    def __bool__(self):
        raise symbolic_bool_error(self)

    def __index__(self):
        raise symbolic_index_error(self)

    def __float__(self):
        raise symbolic_index_error(self)

    __int__ = __index__

    def __iter__(self):
        raise TypeError(f"a symbolic value ({text(self)}) cannot be iterated")

    def __getitem__(self, idx):
        raise ScalarIndexError(self)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if any(_whole(x) for x in inputs):
            return NotImplemented
        out = numpy_ufunc(ufunc, method, inputs, kwargs)
        if out is NotImplemented and method == "__call__" and not kwargs:
            out = _other_ufunc(ufunc, inputs)
        if out is NotImplemented:
            raise unsupported_ufunc_error(ufunc, method, inputs, kwargs)
        # (of sizes and Python numbers alone, a static trace has NumPy's scalar, strong:
        # np.sqrt(n) of a size n times a float32 X is float64)
        return strong(out)

    def __repr__(self):
        text_check(self)
        return text(self)

    __str__ = __repr__

    def __format__(self, spec):
        text_check(self)
        try:
            return format(text(self), spec)
        except ValueError:      # (a number's spec, f"{n:3d}": the text as it is)
            return text(self)


def _whole(x):
    """x is a whole tensor of a definition (alpha * X with a scalar argument alpha): the
    tensor's own (reflected) operator adds the jd.numpy stage, so the element's gives way."""
    return getattr(type(x), "__jitdl_whole__", False)


def _giving_way(fn):
    def method(self, o, *mod):      # (mod: pow(n, 2, 5)'s)
        return NotImplemented if _whole(o) else fn(self, o, *mod)
    method.__name__ = fn.__name__
    return method


for _name, _fn in list(vars(Operators).items()):
    if _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
                 "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
                 "__rmod__", "__pow__", "__rpow__", "__and__", "__rand__", "__or__", "__ror__",
                 "__xor__", "__rxor__", "__lshift__", "__rlshift__", "__rshift__",
                 "__rrshift__", "__lt__", "__le__", "__gt__", "__ge__"):
        setattr(Operators, _name, _giving_way(_fn))


class _Tracing(threading.local):
    depth = 0     # definitions whose Python is running in this thread
    guarded = 0   # arms of a conditional expression of a symbolic condition being built


@contextlib.contextmanager
def guarded_arm():
    """While the user's code builds an operand that Python evaluates only under a
    condition, which is symbolic (an arm of `a if c else b`, the later operands of `and`
    / `or`): Python's errors of numbers of sizes there (_python_zero_division) are not
    the call's, as the static trace builds that operand only where it is taken."""
    _TRACING.guarded += 1
    try:
        yield
    finally:
        _TRACING.guarded -= 1


_TRACING = _Tracing()


_TRACED_LOCK = threading.Lock()


@contextlib.contextmanager
def user_code():
    """While a definition's Python runs (the function and every helper it calls)."""
    with _TRACED_LOCK:
        nodes_module.traced += 1
    _TRACING.depth += 1
    try:
        yield
    finally:
        _TRACING.depth -= 1
        with _TRACED_LOCK:
            nodes_module.traced -= 1


# packages whose Python compares jitdl's objects as objects (weakref's dicts of tensors)
_NOT_USER = frozenset(sys.stdlib_module_names) | {"jitdl", "numpy"}


_COMPARE_OP = dis.opmap["COMPARE_OP"]
# Python's arithmetic operators as written (`/`, `//`, `%`, `**`, augmented too): one
# BINARY_OP from 3.11, an opcode each before
_ARITHMETIC_OPS = frozenset(dis.opmap[name] for name in (
    "BINARY_OP", "BINARY_TRUE_DIVIDE", "BINARY_FLOOR_DIVIDE", "BINARY_MODULO",
    "BINARY_POWER", "INPLACE_TRUE_DIVIDE", "INPLACE_FLOOR_DIVIDE", "INPLACE_MODULO",
    "INPLACE_POWER") if name in dis.opmap)


def _python_arithmetic(frame) -> bool:
    """The user's code at `frame` is at an arithmetic operator as written: Python's
    numbers, which raise ZeroDivisionError; not at a NumPy ufunc's call
    (np.true_divide(7, n - 3) is inf where n is 3, np.floor_divide 0)."""
    code = frame.f_code.co_code
    return in_user_code(frame) and 0 <= frame.f_lasti < len(code) and \
        code[frame.f_lasti] in _ARITHMETIC_OPS


def in_user_code(frame) -> bool:
    """The code of `frame` is the user's (not jitdl's, NumPy's or the standard library's),
    run while a definition is traced."""
    return bool(_TRACING.depth) and \
        frame.f_globals.get("__name__", "").partition(".")[0] not in _NOT_USER


def written_in_definition(frame) -> bool:
    """The code of `frame` is the user's, run while a definition is traced (in_user_code),
    and it is at an `==` / `!=` operator as written (COMPARE_OP, also when Python reflects
    it, `0 == i`). The comparisons C code makes for that frame keep their meaning as
    objects: `t in tensors`, list.index and .remove, dict and set lookups,
    functools.lru_cache (CONTAINS_OP or a call); not of a dynamic size against a number
    (size_as_object_error)."""
    if not in_user_code(frame):
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _COMPARE_OP


# operands `==` compares element-wise in the user's code: scalars, expressions and loop
# axes (IterVar: jd.reduce_axis), which stand for their variable
_COMPARABLE = (Expr, IterVar, bool, int, float, np.generic)


# what a dynamic size may be made of and still stand for a Python number (a static trace's)
_SIZE_NODES = (SizeVar, Const, Binary, Unary, Call, Cast, Compare, Select)


def a_size(e) -> bool:
    """e is made of the sizes of dynamic arguments and constants (a Python number in a
    static trace), and names one."""
    sized = False
    for n in walk_unique(e):
        if not isinstance(n, _SIZE_NODES):
            return False
        sized = sized or isinstance(n, SizeVar)
    return sized


def size_as_object_error(e, what) -> Exception:
    """The error for a dynamic size that the user's code hashes, or that C code compares
    with a number for it: Python would take the expression as an object, not as the
    number it stands for, and answer for every size as it does for none (a dict lookup
    or a set missing every key, list.count finding nothing)."""
    return SymbolicValueError(
        f"`{text(e)}` is a dynamic size, a number only where the kernel runs, but {what}, "
        "where Python would take the expression as an object, not as its value (a dict or "
        "set lookup would miss every number, for every size); in the definition's own "
        "code `d[n]`, `d.get(n, v)` and `n in (3, 4)` select by value where the kernel "
        "runs; elsewhere, keep that dimension out of dynamic=")


def hash_check(e):
    """What a hash of expression e checks while definitions are traced (nodes.hash_check):
    a dynamic size that the user's code hashes (`{3: 2.0}.get(n)` in a helper, `{n, 3}`,
    `hash(n)`) is a SymbolicValueError (size_as_object_error); not where the C code of
    an lru_cache the user's line calls hashes it (_calling_a_cache). Expressions of
    indices and elements keep their structural hash there (a dict memoising them)."""
    if _TRACING.depth and in_user_code(frame := sys._getframe(2)) and a_size(e) and \
            not _calling_a_cache(frame):
        raise size_as_object_error(e, "is hashed (a dict key, a set element, hash())")


_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FAST", "LOAD_DEREF", "LOAD_ATTR",
                    "LOAD_METHOD"})


def _executing(code, frame) -> int:
    """The index in `code` (dis's instructions of frame.f_code) of the instruction that
    `frame` executes: the one holding f_lasti, which 3.11 leaves at the last inline cache
    of a CALL into a Python function (pprint.pprint(n)), past the CALL's own offset."""
    return max(k for k, ins in enumerate(code) if ins.offset <= frame.f_lasti)


def _calling_a_cache(frame) -> bool:
    """The user's code at `frame` is calling a functools.lru_cache / cache wrapper (named
    `f`, `self.f` or `mod.f` in the call), whose C code hashes the arguments as a key:
    memoising by the expression gives the expression's own value, as memoising by the
    number does in a static trace. (A dict's get, hash() or a set stay refused: they
    answer for the number.)"""
    try:
        code = list(dis.get_instructions(frame.f_code))
        at = _executing(code, frame)
    except Exception:
        return False
    return isinstance(_callee(frame, code, at), functools._lru_cache_wrapper)


# functions whose result's type is known, for a call of a method of their result
_RESULT_TYPES = {logging.getLogger: logging.Logger}


def _callee(frame, code, at):
    """The function that the call instruction code[at] of `frame` calls, where the call
    names it (`f`, `self.f`, `mod.f`, `"{}".format`), else None. It is read from the
    call's instructions: those that start where the call does and end before it (Python
    3.11+'s positions)."""
    try:
        call = code[at]
        if not call.opname.startswith("CALL") or call.positions is None:
            return None
        if not _columns(call):
            return _callee_by_stack(frame, code, at)
        start = (call.positions.lineno, call.positions.col_offset)
        end = (call.positions.end_lineno, call.positions.end_col_offset)
        chain = [k for k in range(at) if (code[k].positions.lineno,
                                           code[k].positions.col_offset) == start and
                 (code[k].positions.end_lineno, code[k].positions.end_col_offset) < end
                 and code[k].opname != "PUSH_NULL"]   # (3.11's before a local `p(...)`)
        last = max(chain, key=lambda k: ((code[k].positions.end_lineno,
                                          code[k].positions.end_col_offset), k))
        first = min(chain)
        inner = [k for k in chain if code[k].opname == "CALL"]
        if inner:       # (`logging.getLogger(__name__).debug`: the method of its result)
            f = _RESULT_TYPES.get(_callee(frame, code, inner[-1]))
            if f is None or any(code[k].opname not in _LOADS
                                for k in range(inner[-1] + 1, last + 1)):
                return None
            for k in range(inner[-1] + 1, last + 1):
                f = inspect.getattr_static(f, code[k].argval)
            return f
        return _named(frame, code, first, last)
    except Exception:       # (no positions before 3.11, a callee of another form)
        return None


def _named(frame, code, first, last):
    """The object that the loads code[first..last] name in `frame` (`f`, `mod.f`,
    `self.f`, `"{}".format`), else None."""
    try:
        if any(code[k].opname not in _LOADS for k in range(first + 1, last + 1)) or \
                code[first].opname not in _LOADS | {"LOAD_CONST"} or \
                code[first].opname in ("LOAD_ATTR", "LOAD_METHOD"):
            return None
        name = code[first].argval
        if code[first].opname == "LOAD_CONST":
            f = name
        elif code[first].opname == "LOAD_GLOBAL":
            f = frame.f_globals[name] if name in frame.f_globals else frame.f_builtins[name]
        elif name in frame.f_locals:
            f = frame.f_locals[name]
        else:
            f = frame.f_globals[name] if name in frame.f_globals else frame.f_builtins[name]
        for k in range(first + 1, last + 1):
            f = inspect.getattr_static(f, code[k].argval)
    except Exception:       # (a name the frame does not hold)
        return None
    return f


# Without the columns of positions (`python -X no_debug_ranges`, PYTHONNODEBUGRANGES) a
# call's instructions are found by following the stack through straight-line code: what
# each instruction pushes (it pops that less its stack effect); None for one not followed
_PUSH_ONE = frozenset({"LOAD_CONST", "LOAD_FAST", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLOSURE",
                       "PUSH_NULL", "CALL", "FORMAT_VALUE", "BUILD_STRING", "BUILD_TUPLE",
                       "BUILD_LIST", "BINARY_OP", "BINARY_SUBSCR"})
_PUSH_NONE = frozenset({"PRECALL", "KW_NAMES", "NOP", "CACHE", "EXTENDED_ARG"})


def _columns(ins) -> bool:
    p = ins.positions
    return p is not None and p.col_offset is not None and p.end_col_offset is not None


def _pushes(ins):
    if ins.opname in _PUSH_ONE:
        return 1
    if ins.opname == "LOAD_GLOBAL" or ins.opname == "LOAD_ATTR" and sys.version_info >= (3, 12):
        return 1 + (ins.arg & 1)        # (and a NULL, or the method's self)
    if ins.opname in ("LOAD_ATTR", "LOAD_METHOD"):
        return 1 if ins.opname == "LOAD_ATTR" else 2
    return 0 if ins.opname in _PUSH_NONE else None


def _effect(ins) -> int:
    if ins.opname == "PRECALL":         # (3.11's: its pops are counted with its CALL's)
        return 0
    if ins.opname == "CALL" and sys.version_info < (3, 12):
        return -ins.arg - 1
    return dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None,
                            jump=False)


def _consumer(code, at):
    """The index of the instruction that takes the value code[at] pushes, in the
    straight-line code after it; None past a jump target or an instruction not
    followed."""
    above = 0
    for k in range(at + 1, len(code)):
        pushes = _pushes(code[k])
        if pushes is None or code[k].is_jump_target:
            return None
        pops = pushes - _effect(code[k])
        if pops > above:
            return k
        above += pushes - pops
    return None


def _callee_by_stack(frame, code, at):
    """_callee without columns: the loads below the call's arguments on the stack (the
    callable and the NULL or self beneath it, two values), where they are loads alone."""
    total = 0
    for k in range(at - 1, -1, -1):
        if _pushes(code[k]) is None or code[k + 1].is_jump_target:
            return None
        total += _effect(code[k])
        if total == code[at].arg + 2:
            chain = [j for j in range(k, at) if code[j].opname != "PUSH_NULL"]
            last = k
            while sum(map(_effect, code[k:last + 1])) < 2:
                last += 1
            return _named(frame, code, chain[0], last)
    return None


# functions whose text only shows (print, pprint, logging's, warnings.warn), and those that
# hand the text of their argument on (str, repr, format, ascii, str.format, pprint's and
# warnings' formatting)
_SHOWING = (builtins.print, warnings.warn, pprint.pprint, pprint.pp)
_TEXT = (str, repr, format, ascii, str.format, pprint.pformat, pprint.saferepr,
         warnings.formatwarning)


def _only_shown(frame) -> bool:
    """The text that the user's code at `frame` makes of a value (str(n), f"{n}", "%s" %
    n, format(n)) goes straight to print(), a logging call or warnings.warn (through
    str, repr, format: `print(f"n = {n}")`, `print(str(n))`), where it cannot change a
    result. The innermost call whose positions hold the instruction's is the consumer
    (without columns: the call that takes its value, _consumer)."""
    try:
        code = list(dis.get_instructions(frame.f_code))
        at = _executing(code, frame)
        while True:
            if code[at].opname.startswith("CALL"):
                f = _callee(frame, code, at)
                if f in _SHOWING or getattr(f, "__module__", None) == "logging":
                    return True
                if f not in _TEXT:
                    return False
            if not _columns(code[at]):
                at = _consumer(code, at)
                continue
            p = code[at].positions
            at = next(k for k in range(at + 1, len(code))
                      if code[k].opname.startswith("CALL") and
                      (code[k].positions.lineno, code[k].positions.col_offset) <=
                      (p.lineno, p.col_offset) and
                      (p.end_lineno, p.end_col_offset) <=
                      (code[k].positions.end_lineno, code[k].positions.end_col_offset))
    except Exception:       # (no enclosing call, no positions before 3.11)
        return False


def _text_taker(frame):
    """The user's frame that takes a text made at `frame`: `frame` itself where it is the
    user's; where it is the standard library's (string.Template's substitute), the user's
    frame that called it, whose call then decides (_only_shown); None where the text is
    made for jitdl's or NumPy's code, or inside logging (a message's formatting, a
    handler's: it only shows). (pprint.pprint's text and warnings.warn's are made inside
    those modules too, but pprint.pformat and warnings.formatwarning return theirs: the
    user's call decides.)"""
    while frame is not None and not in_user_code(frame):
        module = frame.f_globals.get("__name__", "").partition(".")[0]
        if module not in _STDLIB or module in _SHOWING_MODULES:
            return None
        frame = frame.f_back
    return frame


_STDLIB = frozenset(sys.stdlib_module_names)
_SHOWING_MODULES = frozenset({"logging"})


def text_check(e):
    """What the text of expression e (str, repr, format) checks while definitions are
    traced: the text of a dynamic size is its name (`X_n0`) where a static trace has the
    number's digits, so the user's code that computes with it (`len(f"{n}")`, `str(n) ==
    "3"`, `int(str(n))`) would answer for the name, for every size: a SymbolicValueError,
    except where the text only goes to print() or logging (_only_shown)."""
    if _TRACING.depth and (frame := _text_taker(sys._getframe(2))) is not None and \
            a_size(e) and not _only_shown(frame):
        raise SymbolicValueError(
            f"`{text(e)}` is a dynamic size, a number only where the kernel runs, but its "
            "text is taken (str(), an f-string, format(), %-formatting), which is the "
            "expression's name, not the number's digits, so a result computed from it "
            "would be the same for every size; compute with the size as an expression "
            "(print(n) and print(f\"{n}\") still show it), or keep that dimension out of "
            "dynamic=")


_NUMBER = (bool, int, float, np.generic)


def written_comparison(op, structural, operand=None):
    """`==` / `!=` on expressions: structural equality, which the compiler's dicts and
    tests rely on, except in the user's own code while a definition is traced. The
    capture rewrites `==` in the definition itself, but not in the helper functions it
    calls, where `jd.select(i == j, 1.0, 0.0)` was a structural False (a zero matrix,
    silently): written there, it is the comparison, as in TVM's TE. `operand` gives the
    expression an object stands for (a loop axis: its variable)."""
    def method(self, other):
        if _TRACING.depth and isinstance(other, _COMPARABLE):
            frame = sys._getframe(1)
            if written_in_definition(frame):
                return written_compare(op, self if operand is None else operand(self),
                                       other)
            if isinstance(other, _NUMBER) and isinstance(self, Expr) and \
                    in_user_code(frame) and a_size(self):
                known = size_test(op, self, other)
                if known is not None:       # (X.shape.count(1): a dynamic size is no 1)
                    return known
                raise size_as_object_error(self, f"is compared with {other!r} by code that "
                                           "needs a Python answer (`in`, list.count or "
                                           "list.index in a helper, a NumPy function)")
        return structural(self, other)
    method.__name__ = structural.__name__
    return method


def _structural_ne(a, b):
    same = type(a).__eq__(a, b)
    return same if same is NotImplemented else not same


def install():
    """Give Expr its operators and the printed form of nodes and statements."""
    for name, fn in vars(Operators).items():
        if name.startswith("__") and name.endswith("__") and callable(fn):
            setattr(Expr, name, fn)
    nodes = [Expr] + [c for c in vars(nodes_module).values()
                      if isinstance(c, type) and issubclass(c, Expr) and c is not Expr]
    for cls in nodes:       # set after the classes are made: each keeps its hash
        cls.__eq__ = written_comparison(CmpOp.EQ, vars(cls).get("__eq__", object.__eq__))
        cls.__ne__ = written_comparison(CmpOp.NE, _structural_ne)
    Stmt.__repr__ = PrimFunc.__repr__ = text
    nodes_module.hash_check = hash_check


install()
