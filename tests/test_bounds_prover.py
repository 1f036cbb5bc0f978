"""Soundness of the bounds prover (jitdl.ir.analysis), by exhaustive evaluation.

Random integer expressions over two indices with small ranges (affine parts, products,
floor division and `%` by constants, abs, min/max, selects on random conditions, and
arithmetic in int8/uint8/int16/int32 that wraps as the kernel's does) must
take every value they take at some point of the domain inside `bounds()`; under a random
condition, every point where the condition holds must lie inside the narrowed ranges,
and the expression's bounds under them. Float coordinates cast to int (a resize's
floor) are checked the same way in float32 and float64.
"""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jitdl  # noqa: F401  (installs the IR operators)
from jitdl.ir import build
from jitdl.ir.analysis import (INF, SIZE_LIMIT, atom_bounds, bounds, inside, narrow,
                               with_loop)
from jitdl.ir.nodes import (BinOp, Binary, Call, Cast, CmpOp, Compare, Const, Intrin, Select,
                            SizeVar, UnOp, Unary, Var)
from jitdl.tir.interpret import wrap

I, K = Var("i"), Var("k")
CMPS = [CmpOp.LT, CmpOp.LE, CmpOp.GT, CmpOp.GE, CmpOp.EQ, CmpOp.NE]


def _leaf():
    return st.one_of(st.sampled_from(["i", "k"]), st.integers(-4, 6))


def _grow(kids):
    return st.one_of(
        st.tuples(st.sampled_from(["+", "-", "min", "max"]), kids, kids),
        st.tuples(st.just("*c"), kids, st.integers(-3, 3)),
        st.tuples(st.sampled_from(["//", "%"]), kids, st.integers(1, 4)),
        st.tuples(st.just("abs"), kids),
        st.tuples(st.sampled_from(["int8", "uint8", "int16", "int32"]), kids),
        st.tuples(st.just("sel"), st.sampled_from(CMPS), kids, kids, kids, kids),
    )


trees = st.recursive(_leaf(), _grow, max_leaves=7)
conds = st.recursive(
    st.one_of(st.tuples(st.just("cmp"), st.sampled_from(CMPS), trees, trees),
              # a comparison computed in a narrow dtype (uint8(i) - 1 >= 0 always holds)
              st.tuples(st.sampled_from(["int8", "uint8", "int16"]), st.sampled_from(CMPS),
                        st.sampled_from(["i", "k"]), st.integers(-3, 3), trees)),
    lambda c: st.one_of(st.tuples(st.sampled_from(["and", "or"]), c, c),
                        st.tuples(st.just("not"), c)),
    max_leaves=3)


def ir(t):
    if isinstance(t, int):
        return Const(t, "int64")        # a strong int64: casts of it wrap, as values do
    if t == "i":
        return I
    if t == "k":
        return K
    op = t[0]
    if op in ("+", "-"):
        return build.binary(BinOp.ADD if op == "+" else BinOp.SUB, ir(t[1]), ir(t[2]))
    if op in ("min", "max"):
        return build.binary(BinOp.MIN if op == "min" else BinOp.MAX, ir(t[1]), ir(t[2]))
    if op == "*c":
        return build.binary(BinOp.MUL, ir(t[1]), t[2])
    if op in ("//", "%"):
        return build.binary(BinOp.FLOORDIV if op == "//" else BinOp.MOD, ir(t[1]), t[2])
    if op == "abs":
        return build.call(Intrin.ABS, ir(t[1]))
    if op in ("int8", "uint8", "int16", "int32") and len(t) == 2:
        # a narrow value, then arithmetic in its dtype (Python ints are weak), widened
        return build.cast(build.binary(BinOp.ADD, build.cast(ir(t[1]), op), 100), "int64")
    if op == "sel":
        return build.select(build.compare(t[1], ir(t[2]), ir(t[3])), ir(t[4]), ir(t[5]))
    if op == "cmp":
        return build.compare(t[1], ir(t[2]), ir(t[3]))
    if op in ("int8", "uint8", "int16") and len(t) == 5:
        narrow_value = build.cast(ir(t[2]), op)
        return build.compare(t[1], build.binary(BinOp.ADD, narrow_value, Const(t[3], op)),
                             build.cast(ir(t[4]), op))
    if op in ("and", "or"):
        return build.logical(BinOp.AND if op == "and" else BinOp.OR, ir(t[1]), ir(t[2]))
    return build.logical_not(ir(t[1]))


_PY_CMP = {CmpOp.LT: lambda a, b: a < b, CmpOp.LE: lambda a, b: a <= b,
           CmpOp.GT: lambda a, b: a > b, CmpOp.GE: lambda a, b: a >= b,
           CmpOp.EQ: lambda a, b: a == b, CmpOp.NE: lambda a, b: a != b}


def ev(e, env):
    """The value the compiled code computes for IR node e: integer operations wrap in
    their dtype, as they do in the kernel."""
    match e:
        case Const():
            return int(e.value)
        case Var():
            return env[e.name]
        case Cast():
            v = ev(e.value, env)
            return int(bool(v)) if e.dtype == "bool" else wrap(int(v), e.dtype)
        case Unary(op=UnOp.NEG):
            return wrap(-ev(e.a, env), e.dtype)
        case Unary(op=UnOp.NOT):
            return not ev(e.a, env)
        case Call(fn=Intrin.ABS):
            return wrap(abs(ev(e.args[0], env)), e.dtype)
        case Compare():
            return _PY_CMP[e.op](ev(e.a, env), ev(e.b, env))
        case Select():
            return ev(e.t, env) if ev(e.cond, env) else ev(e.f, env)
        case Binary(op=BinOp.AND):
            return ev(e.a, env) and ev(e.b, env)
        case Binary(op=BinOp.OR):
            return ev(e.a, env) or ev(e.b, env)
        case Binary():
            a, b = ev(e.a, env), ev(e.b, env)
            v = {BinOp.ADD: lambda: a + b, BinOp.SUB: lambda: a - b, BinOp.MUL: lambda: a * b,
                 BinOp.FLOORDIV: lambda: a // b, BinOp.MOD: lambda: a % b,
                 BinOp.MIN: lambda: min(a, b), BinOp.MAX: lambda: max(a, b)}[e.op]()
            return wrap(v, e.dtype)
    raise AssertionError(f"ev: {e!r}")


def _points(ranges):
    return [dict(zip("ik", p)) for p in itertools.product(
        range(ranges[I][0], ranges[I][1] + 1), range(ranges[K][0], ranges[K][1] + 1))]


ranges_st = st.tuples(st.integers(-3, 2), st.integers(0, 6), st.integers(-3, 2),
                      st.integers(0, 6)).map(
    lambda r: {I: (r[0], r[0] + r[1]), K: (r[2], r[2] + r[3])})


@settings(max_examples=400, deadline=None, derandomize=True)
@given(t=trees, ranges=ranges_st)
def test_bounds_hold_at_every_point(t, ranges):
    e = ir(t)
    lo, hi = bounds(e, ranges)
    for p in _points(ranges):
        assert lo <= ev(e, p) <= hi, (t, p, lo, hi)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(c=conds, t=trees, ranges=ranges_st)
def test_narrowed_ranges_hold_where_the_condition_does(c, t, ranges):
    cond, e = ir(c), ir(t)
    for negate in (False, True):
        inside = narrow(cond, ranges, negate=negate)
        holding = [p for p in _points(ranges) if bool(ev(cond, p)) != negate]
        if not holding:
            continue
        for v, name in ((I, "i"), (K, "k")):
            vlo, vhi = atom_bounds(v, inside)
            assert all(vlo <= p[name] <= vhi for p in holding), (c, negate, name)
        lo, hi = bounds(e, inside)
        assert all(lo <= ev(e, p) <= hi for p in holding), (c, t, negate, lo, hi)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(n=st.integers(1, 40), out=st.integers(1, 97), shift=st.sampled_from([0.0, 0.5]),
       dtype=st.sampled_from(["float32", "float64"]))
def test_float_coordinates_cast_to_int(n, out, shift, dtype):
    y = Var("y")
    scale = n / out
    coord = (build.cast(y, dtype) + shift) * scale - shift
    idx = build.cast(build.call(Intrin.FLOOR, build.binary(BinOp.MAX, coord, 0.0)), "int64")
    lo, hi = bounds(idx, {y: (0, out - 1)})
    assert lo != -INF and hi != INF
    ft = np.dtype(dtype).type
    ys = np.arange(out).astype(dtype)
    got = np.floor(np.maximum((ys + ft(shift)) * ft(scale) - ft(shift), ft(0))).astype(np.int64)
    assert lo <= got.min() and got.max() <= hi
    assert hi <= math.floor(max((out - 1 + shift) * scale - shift, 0) * (1 + 1e-5)) + 1


# ---------------------------------------------------------------------------------------
# arithmetic that wraps, and floats that overflow, are never taken as exact
# ---------------------------------------------------------------------------------------

def test_narrow_comparison_that_wraps_does_not_narrow():
    i = Var("i")
    u = build.cast(i, "uint8")
    always = build.compare(CmpOp.GE, build.binary(BinOp.SUB, u, Const(1, "uint8")),
                           Const(0, "uint8"))                   # uint8(i) - 1 >= 0: always
    assert atom_bounds(u, narrow(always, {i: (0, 3)}))[0] == 0
    fits = build.compare(CmpOp.GE, build.binary(BinOp.SUB, u, Const(1, "uint8")),
                         Const(5, "uint8"))
    assert atom_bounds(u, narrow(fits, {i: (0, 3)}))[0] == 0    # wraps too: no narrowing


def test_wrapping_index_arithmetic_is_refused():
    import jitdl as jd
    from jitdl.errors import DefinitionError
    X = np.arange(300.0) + 1

    @jd.compute
    def shift(X, s):
        Y = jd.tensor((4,))
        Y[i] = X[s + 127] if s >= -127 else 0.0        # int8: 3 + 127 wraps to -126
        return Y

    @jd.compute
    def int8_offset(X):
        return jd.tensor((4,), lambda i: X[jd.int8(i) + 127])

    @jd.compute
    def int32_product(X):
        return jd.tensor((4,), lambda i: X[jd.int32(i) * 2**30 // 2**30])

    @jd.compute
    def uint8_guard(X):
        return jd.tensor((4,), lambda i: jd.select(jd.uint8(i) - 1 >= 0,
                                                   X[jd.int64(jd.uint8(i)) - 1], -7.0))

    @jd.compute
    def float32_overflow(X):
        return jd.tensor((10,), lambda i: X[jd.int64(jd.float32(i) * 1e38 / 1e38)])

    @jd.compute
    def float32_nan(X):
        t = jd.tensor((10,), lambda i: jd.float32(i) * 1e38)
        return jd.tensor((10,), lambda i: X[jd.int64(jd.max(jd.min(t[i] - t[i], 9.0), 5.0))
                                            - 5])
    for f, args in ((shift, (X, np.int8(3))), (int8_offset, (X,)), (int32_product, (X,)),
                    (uint8_guard, (X,)), (float32_overflow, (X,))):
        with pytest.raises(DefinitionError, match="outside X"):
            f(*args)
    # (a value read from a tensor is data: its index is checked when the kernel runs)
    with pytest.raises(IndexError):
        float32_nan(X)


def test_simplifier_keeps_wrapping_arithmetic():
    import jitdl as jd
    X = np.random.default_rng(5).standard_normal(128)

    @jd.compute
    def clamp_wrapped(X):
        return jd.tensor((128,), lambda i: jd.max(jd.int64(jd.int8(i) + 100), 0) + X[i] * 0)

    @jd.compute
    def sign_wrapped(X):
        return jd.tensor((128,), lambda i: jd.select(jd.int64(jd.int8(i) + 100) >= 0, 1.0,
                                                     2.0) + X[i] * 0)
    wrapped = (np.arange(128, dtype=np.int8) + np.int8(100)).astype(np.int64)
    np.testing.assert_array_equal(clamp_wrapped(X), np.maximum(wrapped, 0))
    np.testing.assert_array_equal(sign_wrapped(X), np.where(wrapped >= 0, 1.0, 2.0))


def test_data_dependent_index_stays_checked_after_inlining():
    import jitdl as jd

    @jd.compute
    def via_intermediate(X):
        n, = X.shape
        idx = jd.tensor((n,), lambda i: i + 5)       # inlined into the gather below
        return jd.tensor((n,), lambda i: X[idx[i]])

    @jd.compute
    def inside(X):
        n, = X.shape
        idx = jd.tensor((n,), lambda i: n - 1 - i)
        return jd.tensor((n,), lambda i: X[idx[i]] * 2)
    X = np.arange(10.0) + 1
    with pytest.raises(IndexError, match=r"`i \+ 5` into X is 1[0-4], outside \[0, 10\)"):
        via_intermediate(X)
    assert "!" in via_intermediate.lower(X)          # the loop IR marks the checked access
    np.testing.assert_array_equal(inside(X), X[::-1] * 2)


def test_a_quotient_by_a_size_is_bounded_by_the_loop_it_comes_from(rng):
    """X[j // n1, j % n1] for j in range(n0 * n1) reads inside X: j // n1 <= n0 - 1 where
    j <= n0 * n1 - 1 and n1 >= 1 (n1 = 0 would leave the loop empty), and j % n1 < n1
    because the loop runs (n0 * n1 >= 1 makes each factor >= 1). A loop one step
    longer, a numerator one larger or a divisor that may be negative is still refused."""
    import jitdl as jd
    from jitdl.errors import DefinitionError

    def whole(extra, shift, less):
        @jd.compute(dynamic=True)
        def f(X):
            n0, n1 = X.shape
            j = jd.reduce_axis(n0 * n1 + extra if extra else n0 * n1, name="j")
            a, d = (j + shift if shift else j), (n1 - less if less else n1)
            return jd.tensor((), lambda: jd.sum(X[a // d, a % d], axis=j), name="S")
        return f
    f = whole(0, 0, 0)
    for shape in [(5, 7), (1, 4), (6, 1), (3, 3)]:
        x = rng.standard_normal(shape)
        np.testing.assert_allclose(f(x), x.sum(), rtol=1e-12)

    @jd.compute(dynamic=True)
    def three(X):                   # (k // n2 // n1 < n0 from k < (n0 * n1) * n2)
        n0, n1, n2 = X.shape
        k = jd.reduce_axis(n0 * n1 * n2, name="k")
        return jd.tensor((), lambda: jd.max(X[k // n2 // n1, k // n2 % n1, k % n2],
                                            axis=k), name="M")
    x = rng.standard_normal((3, 4, 5))
    np.testing.assert_allclose(three(x), x.max(), rtol=0)
    for extra, shift, less in [(1, 0, 0), (0, 1, 0), (0, 0, 1)]:
        with pytest.raises(DefinitionError, match="cannot prove index"):
            whole(extra, shift, less)(rng.standard_normal((4, 6)))


def test_a_load_keeps_the_size_selects_of_the_loads_in_its_index():
    """A load drops `select(n != 0, x, 0)` of its own buffer's size n (where n is 0 it
    never reads), but not inside a load nested in its index: X[Y[p]] with p = j // n * n
    + j % n (j where X's n > 0, 0 where n == 0) read Y at j for every j when X was empty,
    its index computed before its check failed: past Y's 4 elements, which only p < 4
    allows."""
    import jitdl as jd

    @jd.compute(dynamic={"X": (0,)})
    def f(X, Y):
        n, = X.shape

        def body(j):
            p = (j // n) * n + j % n
            return jd.select((p < 4) & (j % n >= 0), X[Y[p]], 0.0)
        return jd.tensor((10,), body, name="S")
    y = np.array([2, 1, 0, 1])
    np.testing.assert_array_equal(f(np.arange(3.0), y), [2, 1, 0, 1] + [0] * 6)
    text = str(f.lower(np.zeros(0), y))
    assert "X[Y[select(X_n0 != 0, j, 0)]]" in text, text
    with pytest.raises(IndexError, match="into X"):
        f(np.zeros(0), y)


@pytest.mark.parametrize("op", [CmpOp.LT, CmpOp.LE, CmpOp.GT, CmpOp.GE])
@pytest.mark.parametrize("kind", [BinOp.MIN, BinOp.MAX])
def test_narrowing_by_a_min_or_max_compared_with_itself(op, kind):
    """One min or max node on both sides of a comparison (`e <= e`, e = max(i, k)):
    the narrowing by each side of a min or max (a < min(p, q): a < p and a < q) took the
    node on the left for the one on the right (it told the sides apart by `is`), and
    narrowed `max(i, k) <= max(i, k)`, which always holds, by `max(i, k) <= i` and
    `max(i, k) <= k`: i == k. Every point where the condition holds stays inside."""
    ranges = {I: (-2, 4), K: (-1, 5)}
    e = build.binary(kind, I, K)
    cond = build.compare(op, e, e)
    for negate in (False, True):
        inside = narrow(cond, ranges, negate=negate)
        holding = [p for p in _points(ranges) if bool(ev(cond, p)) != negate]
        for v, name in ((I, "i"), (K, "k")):
            vlo, vhi = atom_bounds(v, inside)
            assert all(vlo <= p[name] <= vhi for p in holding), (op, kind, negate, name)
        diff = build.binary(BinOp.SUB, I, K)
        lo, hi = bounds(diff, inside)
        assert all(lo <= p["i"] - p["k"] <= hi for p in holding), (op, kind, negate, lo, hi)


_N0, _N1, _N2 = SizeVar("n0"), SizeVar("n1"), SizeVar("n2")
_R, _C, _D = Var("r"), Var("c"), Var("d")


def _radix_cases():
    """(index, loop extents of r, c, d, dimension's extent, proved): row-major positions
    in a product of sizes, and near misses that some sizes and point take outside."""
    n0, n1, n2, r, c, d = _N0, _N1, _N2, _R, _C, _D
    loops = (n0, n1, n2)
    return [
        (r * n1 + c, loops, n0 * n1, True),
        (n1 * r + c, loops, n0 * n1, True),             # (either operand order)
        (c + r * n1, loops, n1 * n0, True),
        (r * n1, loops, n0 * n1, True),                 # (no remainder: needs n1 >= 1)
        ((r * n1 + c) * n2 + d, loops, n0 * n1 * n2, True),
        (r * (n1 * n2) + c * n2 + d, loops, n0 * n1 * n2, True),
        (r * n1 + c + 1, loops, n0 * n1, False),
        ((r + 1) * n1 + c, loops, n0 * n1, False),
        (r * n1 + c, (n0 + 1, n1, n2), n0 * n1, False),
        (r * n1 + c, (n0, n1 + 1, n2), n0 * n1, False),
        (r * n1 + c - 1, loops, n0 * n1, False),        # (-1 at the first point)
        (r * n2 + c, loops, n0 * n1, False),            # (another size's stride)
        (r * n1 + c, loops, n0 * n2, False),
        (r * n1 + d, loops, n0 * n1, False),            # (d runs over n2)
        ((r * n1 + c) * n2 + d, (n0, n1, n2 + 1), n0 * n1 * n2, False),
        ((r * n2 + c) * n2 + d, loops, n0 * n1 * n2, False),
        (r * (n1 * n2) + c * n2 + d, (n0, n1 + 1, n2), n0 * n1 * n2, False),
        (r * n1 * 2 + c, loops, n0 * n1, False),
        # a position k < n0 * n1 * n2 against a product in another order, and its
        # leading index k // (n2 * n1) (a divisor whose factors are the loop's)
        (r, (n0 * n1 * n2, n1, n2), n0 * (n2 * n1), True),
        (r // (n2 * n1), (n0 * n1 * n2, n1, n2), n0, True),
        (r + 1, (n0 * n1 * n2, n1, n2), n2 * n1 * n0, False),
        (r, (n0 * n1 * n2, n1, n2), n0 * (n2 * n2), False),
        (r // (n2 * n1), (n0 * n1 * n2 + n2, n1, n2), n0, False),
        (r // (n2 * n2), (n0 * n1 * n2, n1, n2), n0, False),
    ]


@pytest.mark.parametrize("case", range(len(_radix_cases())))
def test_a_row_major_position_in_a_product_of_sizes(case):
    """i * n1 + j for i < n0 and j < n1 is in [0, n0 * n1), and ((i * n1 + j) * n2 + k) in
    [0, n0 * n1 * n2), which bounds of i * n1 over symbolic sizes cannot show: what a
    flattened read (a reshape, a roll of the flattened order) needs. Checked at every point
    of every size up to 3, where proved; near misses must not be proved, and a point
    outside exists for each."""
    idx, extents, n, proved = _radix_cases()[case]
    ranges = {}
    for v, e in zip((_R, _C, _D), extents):
        ranges = with_loop(ranges, v, 0, e)
    for v in (_N0, _N1, _N2):
        ranges.setdefault(v, (0, SIZE_LIMIT - 1))
    outside = []
    for sizes in itertools.product(range(4), repeat=3):
        env = dict(zip(("n0", "n1", "n2"), sizes))
        for p in itertools.product(*(range(ev(e, env)) for e in extents)):
            env.update(zip("rcd", p))
            if not 0 <= ev(idx, env) < ev(n, env):
                outside.append(dict(env))
    assert inside(idx, n, ranges) is proved, (idx, n)
    assert bool(outside) is not proved, outside[:3]


def test_a_flattened_read_of_dynamic_sizes_compiles_and_reads_inside(rng):
    """Y[i, j] = F[i * n1 + j] over F of n0 * n1 elements was refused ("cannot prove index
    `i * X_n1 + j` ... inside [0, X_n0 * X_n1)") for dynamic sizes; three dimensions the
    same. Against NumPy for several shapes, every element written. (Sizes of 1, which
    a dynamic kernel takes as constants, made F's own read X[k // X_n2 // 1, ...] fail:
    below(e // c, n) of a constant n did not look through the division by c.)"""
    import jitdl as jd

    @jd.compute(dynamic=True)
    def two(X):
        n0, n1 = X.shape
        F = jd.tensor((n0 * n1,), lambda k: X[k // n1, k % n1] * 2.0, name="F")
        return jd.tensor((n0, n1), lambda i, j: F[i * n1 + j] + 1.0, name="Y")

    @jd.compute(dynamic=True)
    def three(X):
        n0, n1, n2 = X.shape
        F = jd.tensor((n0 * n1 * n2,), lambda k: X[k // n2 // n1, k // n2 % n1, k % n2] - 3.0,
                      name="F")
        return jd.tensor((n0, n1, n2), lambda i, j, k: F[(i * n1 + j) * n2 + k], name="Y")
    for shape in [(5, 7), (1, 4), (6, 1), (13, 3), (0, 4)]:
        x = rng.standard_normal(shape)
        out = np.full(shape, np.nan)
        two(x, out=out)
        np.testing.assert_array_equal(out, x * 2.0 + 1.0)
    for shape in [(3, 4, 5), (2, 0, 3), (5, 2, 7), (1, 1, 7), (1, 3, 1), (5, 2, 1)]:
        x = rng.standard_normal(shape)
        out = np.full(shape, np.nan)
        three(x, out=out)
        np.testing.assert_array_equal(out, x - 3.0)


@pytest.mark.cpu_only     # (a schedule for target='cpu': a GPU's inlines F)
def test_an_intermediate_whose_size_wraps_int64_is_not_allocated_small():
    """The prover places F[(i * n1 + j) * n2 + k] inside F's n0 * n1 * n2 elements, which
    holds while that product is a size: three arrays of 2^22 elements make it 2^66, which
    int64 wrapped to 0, and the kernel read a buffer of 0 elements at offset 2^44 (a
    segfault). Such an allocation now fails with jitdl's AllocationError; small sizes
    compute as before (every element against NumPy)."""
    import jitdl as jd
    from jitdl.errors import AllocationError

    @jd.compute(dynamic=True)
    def f(X, Y, W):
        n0, n1, n2 = X.shape[0], Y.shape[0], W.shape[0]
        F = jd.tensor((n0 * n1 * n2,), lambda k: X[k // n2 // n1] + Y[k // n2 % n1]
                      + W[k % n2], name="F")
        return jd.tensor((jd.min(n0, 2), jd.min(n1, 2), jd.min(n2, 2)),
                         lambda i, j, k: F[(i * n1 + j) * n2 + k], name="Z")

    @jd.schedule(f)
    def keep_f(s, cfg):
        s["F"].compute_root()
    x, y, w = np.arange(5.0), np.arange(7.0) * 10, np.arange(3.0) * 100
    np.testing.assert_array_equal(
        f(x, y, w), x[:2, None, None] + y[None, :2, None] + w[None, None, :2])
    big = np.ones(1 << 22, np.int8)
    with pytest.raises(AllocationError, match="intermediate buffer F"):
        f(big[:1 << 14], big[:1 << 14], big[:1 << 13])     # 2^41: past SIZE_LIMIT
    with pytest.raises(AllocationError, match="intermediate buffer F"):
        f(big, big, big)               # 2^66, 0 in int64
