"""The reference interpreter of the loop IR (jitdl.tir.interpret) itself: the errors that
make it an oracle (out-of-range accesses, uninitialised reads, unwritten outputs, scope,
races between parallel iterations) on hand-written loop IR, and the meaning of every
operator, intrinsic and cast, against NumPy and against the compiled kernel. What the
comparison with the compiled kernel found is kept as strict xfails at the end.
(tests/test_interpret.py runs the interpreter on the loop IR of definitions after every
pass.)
"""
import math

import numpy as np
import pytest

import jitdl as jd
from _check import assert_matches
from _passes import pass_stages, split_args
from jitdl.ir.nodes import (Allocate, BinOp, Binary, Buffer, Cast, CmpOp, Compare, Const,
                            For, ForKind, IfThen, Load, PrimFunc, Seq, Store, Var)
from jitdl.tir.interpret import (OutOfBoundsError, RaceError, ScopeError,
                                 UninitializedReadError, UnwrittenOutputError, execute,
                                 interpret)

F64 = np.dtype(np.float64)

# ---------------------------------------------------------------------------------------
# the interpreter's own checks, on hand-written loop IR
# ---------------------------------------------------------------------------------------

I64 = "int64"


def c(v, dtype=I64):
    return Const(v, dtype)


def loop(var, n, body, kind=ForKind.SERIAL):
    return For(var, c(0), c(n), kind, body)


def copy_func(read_index, write_index=None, n=4, size_in=4):
    """def f(X: float64[size_in], Y: float64[n]): for i in range(n): Y[w] = X[r]"""
    x, y = Buffer("X", "float64", (size_in,)), Buffer("Y", "float64", (n,))
    i = Var("i")
    r, w = read_index(i), (write_index or (lambda i: i))(i)
    return PrimFunc("copy", (x, y), loop(i, n, Store(y, w, Load(x, r)))), x, y


def test_copy_runs():
    func, _, _ = copy_func(lambda i: i)
    x = np.arange(4.0)
    (y,) = interpret(func, [x])
    assert y.dtype == F64 and y.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_load_out_of_bounds_is_named():
    func, _, _ = copy_func(lambda i: Binary(BinOp.ADD, i, c(1), I64))
    with pytest.raises(OutOfBoundsError, match=r"load X\[4\] outside the buffer "
                                               r"\(X: float64\[4\], 4 elements\)"):
        interpret(func, [np.arange(4.0)])


def test_store_out_of_bounds_is_named():
    func, _, _ = copy_func(lambda i: i, lambda i: Binary(BinOp.SUB, i, c(1), I64))
    with pytest.raises(OutOfBoundsError, match=r"store Y\[-1\] outside the buffer"):
        interpret(func, [np.arange(4.0)])


def test_unwritten_output_is_reported():
    x, y = Buffer("X", "float64", (4,)), Buffer("Y", "float64", (2, 2))
    i = Var("i")
    func = PrimFunc("half", (x, y), For(i, c(0), c(3), ForKind.SERIAL,
                                        Store(y, i, Load(x, i))))
    with pytest.raises(UnwrittenOutputError, match=r"1 of 4 elements of output Y were never "
                                                   r"written, the first at \(1, 1\)"):
        interpret(func, [np.arange(4.0)])
    run = execute(func, [np.arange(4.0)])          # execute leaves the fill in place
    assert np.isnan(run.outputs[0][1, 1]) and run.written[0].sum() == 3


def test_uninitialised_read_of_an_allocation():
    """A local buffer is fresh on every entry of its Allocate: a value left by the previous
    iteration of an enclosing loop is not there any more."""
    x, y = Buffer("X", "float64", (4,)), Buffer("Y", "float64", (4,))
    t = Buffer("t", "float64", (1,), "local")
    i = Var("i")
    first = Compare(CmpOp.EQ, i, c(0))
    body = Allocate(t, Seq((
        IfThen(first, Store(t, c(0), Load(x, i))),          # written only when i == 0
        Store(y, i, Load(t, c(0))))))
    func = PrimFunc("stale", (x, y), loop(i, 4, body))
    with pytest.raises(UninitializedReadError, match=r"load t\[0\] of an element never "
                                                     r"written \(t: float64\[1\], local\)"):
        interpret(func, [np.arange(4.0)])


def test_uninitialised_read_of_an_output():
    x, y = Buffer("X", "float64", (4,)), Buffer("Y", "float64", (4,))
    i = Var("i")
    acc = Store(y, i, Binary(BinOp.ADD, Load(y, i), Load(x, i), "float64"))  # no init
    with pytest.raises(UninitializedReadError, match=r"load Y\[0\]"):
        interpret(PrimFunc("noinit", (x, y), loop(i, 4, acc)), [np.arange(4.0)])


def test_store_into_an_input_is_refused():
    x, y = Buffer("X", "float64", (4,)), Buffer("Y", "float64", (4,))
    i = Var("i")
    body = Seq((Store(x, i, c(0.0, "float64")), Store(y, i, c(1.0, "float64"))))
    with pytest.raises(ScopeError, match="store into input buffer X"):
        interpret(PrimFunc("clobber", (x, y), loop(i, 4, body)), [np.arange(4.0)])


def test_scope_errors():
    x, y = Buffer("X", "float64", (4,)), Buffer("Y", "float64", (4,))
    t = Buffer("t", "float64", (4,))
    i, j = Var("i"), Var("j")
    with pytest.raises(ScopeError, match="variable j read outside its binding"):
        interpret(PrimFunc("f", (x, y), loop(i, 4, Store(y, i, Load(x, j)))), [np.ones(4)])
    with pytest.raises(ScopeError, match="buffer t read outside its allocation"):
        interpret(PrimFunc("f", (x, y), loop(i, 4, Store(y, i, Load(t, i)))), [np.ones(4)])
    bad = Store(y, i, Binary(BinOp.ADD, Load(x, i), c(1, "int64"), "float64"))
    with pytest.raises(ScopeError, match="operands of .* are float64 and int64"):
        interpret(PrimFunc("f", (x, y), loop(i, 4, bad)), [np.ones(4)])
    with pytest.raises(ScopeError, match="store of int64 into Y: float64"):
        interpret(PrimFunc("f", (x, y), loop(i, 4, Store(y, i, i))), [np.ones(4)])


def test_checked_load_raises_index_error():
    e, ids = Buffer("E", "float64", (3, 2)), Buffer("ids", "int64", (2,))
    y = Buffer("Y", "float64", (2, 2))
    i, j = Var("i"), Var("j")
    row = Load(ids, i)
    idx = Binary(BinOp.ADD, Binary(BinOp.MUL, row, c(2), I64), j, I64)
    load = Load(e, idx, ((row, 3, "E", "ids[i]"),))
    func = PrimFunc("gather", (e, ids, y),
                    loop(i, 2, loop(j, 2, Store(y, Binary(BinOp.ADD, Binary(
                        BinOp.MUL, i, c(2), I64), j, I64), load))))
    table = np.arange(6.0).reshape(3, 2)
    (got,) = interpret(func, [table, np.array([2, 0])])
    assert got.tolist() == [[4.0, 5.0], [0.0, 1.0]]
    with pytest.raises(IndexError, match=r"index `ids\[i\]` into E is 3, outside \[0, 3\)"):
        interpret(func, [table, np.array([1, 3])])


def test_races_between_parallel_iterations():
    x, y = Buffer("X", "float64", (4,)), Buffer("Y", "float64", (1,))
    i = Var("i")
    zero = c(0)
    init = Store(y, zero, c(0.0, "float64"))
    acc = Store(y, zero, Binary(BinOp.ADD, Load(y, zero), Load(x, i), "float64"))
    serial = PrimFunc("total", (x, y), Seq((init, loop(i, 4, acc))))
    assert interpret(serial, [np.arange(4.0)])[0].tolist() == [6.0]
    parallel = PrimFunc("total", (x, y), Seq((init, loop(i, 4, acc, ForKind.PARALLEL))))
    with pytest.raises(RaceError, match=r"parallel loop i: iterations 0 and 1 both access "
                                        r"\(one writes\) Y\[0\]"):
        interpret(parallel, [np.arange(4.0)])


def test_parallel_iterations_may_share_reads_and_private_buffers():
    """Reading the same input element, and a buffer allocated inside the loop, are fine."""
    x, y = Buffer("X", "float64", (4,)), Buffer("Y", "float64", (4,))
    t = Buffer("t", "float64", (1,), "local")
    i = Var("i")
    body = Allocate(t, Seq((Store(t, c(0), Load(x, c(0))),
                            Store(y, i, Binary(BinOp.ADD, Load(t, c(0)), Load(x, i),
                                               "float64")))))
    func = PrimFunc("shift", (x, y), loop(i, 4, body, ForKind.PARALLEL))
    assert interpret(func, [np.arange(4.0)])[0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_every_loop_kind_runs_in_order():
    y = Buffer("Y", "int64", (6,))
    i, n = Var("i"), Var("n")
    for kind in ForKind:
        func = PrimFunc("iota", (y, n), For(i, c(0), n, kind, Store(y, i, i)))
        run = execute(func, [], [6], trace=True)
        assert [s[1] for s in run.stores] == list(range(6))
        assert run.outputs[0].tolist() == list(range(6))


def test_casts_follow_codegen():
    """float -> int casts saturate and take NaN to 0, as llvm.fptosi.sat does."""
    x, y = Buffer("X", "float64", (5,)), Buffer("Y", "int8", (5,))
    i = Var("i")
    func = PrimFunc("cast", (x, y), loop(i, 5, Store(y, i, Cast(Load(x, i), "int8"))))
    (got,) = interpret(func, [np.array([1e9, -1e9, np.nan, -2.7, 126.9])])
    assert got.tolist() == [127, -128, 0, -2, 126]


# ---------------------------------------------------------------------------------------
# every operator and intrinsic: interpreter, NumPy and the compiled kernel agree
# ---------------------------------------------------------------------------------------

def _binary(op):
    @jd.compute
    def binop(X, Z):
        return jd.tensor(X.shape, lambda i: op(X[i], Z[i]), name="Y")
    return binop


def _unary(op):
    @jd.compute
    def unop(X):
        return jd.tensor(X.shape, lambda i: op(X[i]), name="Y")
    return unop


def _full_range(rng, dtype, n):
    info = np.iinfo(dtype)
    v = rng.integers(info.min, int(info.max) + 1, n, dtype=np.int64).astype(dtype)
    v[:4] = [info.min, info.max, 0, -1 if info.min < 0 else 1]
    return v


def _interpreted(f, args):
    arrays, scalars = split_args(args)
    return interpret(pass_stages(f, args)[-1][1], arrays, scalars)


INT_BINARY = {
    "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply),
    "floordiv": (lambda a, b: a // b, np.floor_divide), "mod": (lambda a, b: a % b, np.mod),
    "min": (jd.min, np.minimum), "max": (jd.max, np.maximum),
    "and": (lambda a, b: a & b, np.bitwise_and), "or": (lambda a, b: a | b, np.bitwise_or),
    "xor": (lambda a, b: a ^ b, np.bitwise_xor),
}


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("name", list(INT_BINARY))
def test_int_binary_ops(rng, name, dtype):
    jd_op, np_op = INT_BINARY[name]
    x, z = _full_range(rng, dtype, 24), _full_range(rng, dtype, 24)
    z[5] = 0                                  # x // 0 == x % 0 == 0
    z[6], x[6] = (-1, np.iinfo(dtype).min) if np.iinfo(dtype).min < 0 else (1, 0)
    with np.errstate(all="ignore"):
        expected = np_op(x, z)
    f = _binary(jd_op)
    (got,) = _interpreted(f, (x, z))
    assert_matches(got, expected, dtype)
    assert_matches(f(x, z), expected, dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint8])
@pytest.mark.parametrize("shift", ["<<", ">>"])
def test_shifts(rng, shift, dtype):
    bits = np.dtype(dtype).itemsize * 8
    x = _full_range(rng, dtype, 2 * bits)
    z = np.arange(2 * bits).astype(dtype) % bits          # shift counts inside the width
    np_op = np.left_shift if shift == "<<" else np.right_shift
    f = _binary((lambda a, b: a << b) if shift == "<<" else (lambda a, b: a >> b))
    (got,) = _interpreted(f, (x, z))
    assert_matches(got, np_op(x, z), dtype)
    assert_matches(f(x, z), np_op(x, z), dtype)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_int_power(rng, dtype):
    x = rng.integers(-5, 6, 30).astype(dtype)
    z = rng.integers(0, 40, 30).astype(dtype)
    f = _binary(lambda a, b: a ** b)
    (got,) = _interpreted(f, (x, z))
    assert_matches(got, np.power(x, z), dtype)
    assert_matches(f(x, z), np.power(x, z), dtype)


FLOAT_BINARY = {
    "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply), "div": (lambda a, b: a / b, np.true_divide),
    "floordiv": (lambda a, b: a // b, np.floor_divide), "mod": (lambda a, b: a % b, np.mod),
    "min": (jd.min, np.minimum), "max": (jd.max, np.maximum),
    "pow": (lambda a, b: a ** b, np.power), "atan2": (jd.atan2, np.arctan2),
    "fmod": (jd.fmod, np.fmod),
}


def _float_operands(rng, dtype, n=40):
    x = (rng.standard_normal(n) * 4).astype(dtype)
    z = (rng.standard_normal(n) * 2).astype(dtype)
    x[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 7.0, -7.0, 1.5]
    z[:8] = [1.0, 2.0, -3.0, 0.0, 2.0, 0.0, 2.0, np.nan]
    return x, z


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(FLOAT_BINARY))
def test_float_binary_ops(rng, name, dtype):
    """Interpreted in the node's dtype: bit for bit NumPy's float32/float64 result."""
    jd_op, np_op = FLOAT_BINARY[name]
    x, z = _float_operands(rng, dtype)
    with np.errstate(all="ignore"):
        expected = np_op(x, z)
    f = _binary(jd_op)
    (got,) = _interpreted(f, (x, z))
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    rtol = 0 if name in ("add", "sub", "mul", "div", "min", "max", "fmod") else \
        (4e-7 if dtype == np.float32 else 1e-15)
    np.testing.assert_allclose(f(x, z), expected, rtol=rtol, atol=0)


INTRINSICS = {
    "exp": (jd.exp, np.exp), "log": (jd.log, np.log), "sqrt": (jd.sqrt, np.sqrt),
    "rsqrt": (jd.rsqrt, lambda x: 1 / np.sqrt(x)),
    "sigmoid": (jd.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (jd.tanh, np.tanh), "erf": (jd.erf, np.vectorize(math.erf, otypes=[np.float64])),
    "sin": (jd.sin, np.sin), "cos": (jd.cos, np.cos), "tan": (jd.tan, np.tan),
    "atan": (jd.atan, np.arctan), "abs": (jd.abs, np.abs), "floor": (jd.floor, np.floor),
    "ceil": (jd.ceil, np.ceil), "round": (jd.round, np.round), "trunc": (jd.trunc, np.trunc),
    "sign": (jd.sign, np.sign), "log1p": (jd.log1p, np.log1p), "expm1": (jd.expm1, np.expm1),
    "isnan": (jd.isnan, np.isnan), "isinf": (jd.isinf, np.isinf),
    "isfinite": (jd.isfinite, np.isfinite), "neg": (lambda a: -a, np.negative),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", list(INTRINSICS))
def test_float_intrinsics(rng, name, dtype):
    jd_op, np_op = INTRINSICS[name]
    x = (rng.standard_normal(40) * 3).astype(dtype)
    x[:10] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, -2.5, 2.5, -0.5]
    f = _unary(jd_op)
    (got,) = _interpreted(f, (x,))
    with np.errstate(all="ignore"):
        expected = np_op(x.astype(np.float64))
    exact = name in ("abs", "floor", "ceil", "round", "trunc", "sign", "isnan", "isinf",
                     "isfinite", "neg", "sqrt")
    tol = 4e-7 if dtype == np.float32 else 0 if exact else 4e-16
    assert got.dtype == (np.bool_ if expected.dtype == np.bool_ else dtype)
    np.testing.assert_allclose(got.astype(expected.dtype), expected, rtol=tol, atol=0)
    if exact:       # the interpreter in the node's dtype: NumPy's own result, bit for bit
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(got, np_op(x))
    compiled, got = f(x), got.astype(expected.dtype)
    np.testing.assert_allclose(compiled.astype(expected.dtype), got,
                               rtol=4 * tol + (2e-7 if name == "exp" else 0), atol=0)


@pytest.mark.parametrize("src", ["float64", "float32", "int64", "int8", "uint8", "bool"])
@pytest.mark.parametrize("dst", ["float64", "float32", "int32", "int8", "uint8", "bool"])
def test_casts(rng, src, dst):
    if np.dtype(src).kind == "f":
        x = (rng.standard_normal(30) * 50).astype(src)
        x[:3] = [1.5, -1.5, 0.0]
    elif src == "bool":
        x = rng.integers(0, 2, 30).astype(bool)
    else:
        x = _full_range(rng, src, 30)
    f = _unary(getattr(jd, "bool_" if dst == "bool" else dst))
    (got,) = _interpreted(f, (x,))
    with np.errstate(all="ignore"):
        expected = x.astype(dst)
    if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu":     # saturating
        info = np.iinfo(dst)
        expected = np.clip(np.trunc(x.astype(np.float64)), info.min, info.max).astype(dst)
    assert_matches(got, expected, dst, 0.0, 0.0)
    assert_matches(f(x), expected, dst, 0.0, 0.0)


def test_int64_to_float32_rounds_once():
    """Not through float64: 2**60 + 2**36 + 1 is just above a float32 tie that float64
    rounding would land on exactly."""
    x = np.array([2**60 + 2**36 + 1, -(2**60 + 2**36 + 1), 2**53 + 1], np.int64)
    f = _unary(jd.float32)
    (got,) = _interpreted(f, (x,))
    np.testing.assert_array_equal(got, x.astype(np.float32))
    np.testing.assert_array_equal(f(x), x.astype(np.float32))


def test_compare_and_select_with_nan(rng):
    @jd.compute
    def cmp(X, Z):
        LT[i] = X[i] < Z[i]
        NE[i] = X[i] != Z[i]
        EQ[i] = X[i] == Z[i]
        S[i] = X[i] if X[i] >= Z[i] else Z[i] * 2.0
        return LT, NE, EQ, S
    x, z = _float_operands(rng, np.float64)
    expected = (x < z, x != z, x == z, np.where(x >= z, x, z * 2.0))
    got = _interpreted(cmp, (x, z))
    for g, e, k in zip(got, expected, cmp(x, z)):
        np.testing.assert_array_equal(g, e)
        np.testing.assert_array_equal(k, e)


# ---------------------------------------------------------------------------------------
# what the comparison with the compiled kernel found: each a strict xfail, so that the fix
# turns it into a failure that asks for the marker to go
# ---------------------------------------------------------------------------------------

def test_uint8_power_with_a_large_exponent():
    """An unsigned exponent of 128 or more is not negative (it gave 0 once)."""
    x = np.array([3, 5, 2, 7], np.uint8)
    z = np.array([200, 129, 3, 255], np.uint8)
    f = _binary(lambda a, b: a ** b)
    (got,) = _interpreted(f, (x, z))
    assert_matches(got, np.power(x, z), np.uint8)
    assert_matches(f(x, z), np.power(x, z), np.uint8)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "int32", "int64"])
@pytest.mark.parametrize("shift", ["<<", ">>"])
def test_shift_by_the_width_or_more(shift, dtype):
    """NumPy defines shifts by the bit width or more (and by negative counts, taken as
    unsigned): 0, or -1 for a negative value shifted right; LLVM's shl/ashr/lshr give
    poison there (fixed in codegen with a select)."""
    info = np.iinfo(dtype)
    x = np.array([1, -5, 7, 100, -128, 3, 0, -1, 5], np.int64).clip(info.min, info.max)
    x = x.astype(dtype)
    w = info.bits
    z = np.array([w, w + 1, w - 1, 100 % (info.max + 1), w, 0, 3, w, 1], np.int64)
    if dtype.startswith("int"):
        z[-1] = -1                       # a negative count
    z = z.astype(dtype)
    np_op = np.left_shift if shift == "<<" else np.right_shift
    f = _binary((lambda a, b: a << b) if shift == "<<" else (lambda a, b: a >> b))
    (got,) = _interpreted(f, (x, z))
    assert_matches(got, np_op(x, z), np.dtype(dtype))
    assert_matches(f(x, z), np_op(x, z), np.dtype(dtype))


def test_exp_float32_underflows_to_zero():
    """exp(-inf) and exp(x < -104) are 0 (the input was once clamped to -103.97 before
    the polynomial, giving 1.4e-45)."""
    x = np.array([-np.inf, -110.0, -104.5], np.float32)
    f = _unary(jd.exp)
    (got,) = _interpreted(f, (x,))
    np.testing.assert_array_equal(got, np.exp(x))
    np.testing.assert_array_equal(f(x), np.exp(x))

