"""Soundness of the bounds prover (jitdl.ir.analysis), by exhaustive evaluation.

Random integer expressions over two indices with small ranges (affine parts, products,
floor division and `%` by constants, abs, min/max, selects on random conditions) must
take every value they take at some point of the domain inside `bounds()`; under a random
condition, every point where the condition holds must lie inside the narrowed ranges,
and the expression's bounds under them. Float coordinates cast to int (a resize's
floor) are checked the same way in float32 and float64.
"""
import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import jitdl  # noqa: F401  (installs the IR operators)
from jitdl.ir import build
from jitdl.ir.analysis import INF, atom_bounds, bounds, narrow
from jitdl.ir.nodes import BinOp, CmpOp, Intrin, Var

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
        st.tuples(st.just("sel"), st.sampled_from(CMPS), kids, kids, kids, kids),
    )


trees = st.recursive(_leaf(), _grow, max_leaves=7)
conds = st.recursive(
    st.tuples(st.just("cmp"), st.sampled_from(CMPS), trees, trees),
    lambda c: st.one_of(st.tuples(st.sampled_from(["and", "or"]), c, c),
                        st.tuples(st.just("not"), c)),
    max_leaves=3)


def ir(t):
    if isinstance(t, int):
        return build.as_expr(t)
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
    if op == "sel":
        return build.select(build.compare(t[1], ir(t[2]), ir(t[3])), ir(t[4]), ir(t[5]))
    if op == "cmp":
        return build.compare(t[1], ir(t[2]), ir(t[3]))
    if op in ("and", "or"):
        return build.logical(BinOp.AND if op == "and" else BinOp.OR, ir(t[1]), ir(t[2]))
    return build.logical_not(ir(t[1]))


_PY_CMP = {CmpOp.LT: lambda a, b: a < b, CmpOp.LE: lambda a, b: a <= b,
           CmpOp.GT: lambda a, b: a > b, CmpOp.GE: lambda a, b: a >= b,
           CmpOp.EQ: lambda a, b: a == b, CmpOp.NE: lambda a, b: a != b}


def ev(t, env):
    if isinstance(t, int):
        return t
    if isinstance(t, str):
        return env[t]
    op = t[0]
    if op == "+":
        return ev(t[1], env) + ev(t[2], env)
    if op == "-":
        return ev(t[1], env) - ev(t[2], env)
    if op in ("min", "max"):
        return (min if op == "min" else max)(ev(t[1], env), ev(t[2], env))
    if op == "*c":
        return ev(t[1], env) * t[2]
    if op == "//":
        return ev(t[1], env) // t[2]
    if op == "%":
        return ev(t[1], env) % t[2]
    if op == "abs":
        return abs(ev(t[1], env))
    if op == "sel":
        return ev(t[4], env) if _PY_CMP[t[1]](ev(t[2], env), ev(t[3], env)) else ev(t[5], env)
    if op == "cmp":
        return _PY_CMP[t[1]](ev(t[2], env), ev(t[3], env))
    if op == "and":
        return ev(t[1], env) and ev(t[2], env)
    if op == "or":
        return ev(t[1], env) or ev(t[2], env)
    return not ev(t[1], env)


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
        assert lo <= ev(t, p) <= hi, (t, p, lo, hi)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(c=conds, t=trees, ranges=ranges_st)
def test_narrowed_ranges_hold_where_the_condition_does(c, t, ranges):
    cond, e = ir(c), ir(t)
    for negate in (False, True):
        inside = narrow(cond, ranges, negate=negate)
        holding = [p for p in _points(ranges) if bool(ev(c, p)) != negate]
        if not holding:
            continue
        for v, name in ((I, "i"), (K, "k")):
            vlo, vhi = atom_bounds(v, inside)
            assert all(vlo <= p[name] <= vhi for p in holding), (c, negate, name)
        lo, hi = bounds(e, inside)
        assert all(lo <= ev(t, p) <= hi for p in holding), (c, t, negate, lo, hi)


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
