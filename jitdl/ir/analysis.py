"""Integer analysis: affine forms, interval bounds under loop ranges, and condition narrowing.

Ranges map a Var to an inclusive (lo, hi) pair of ints; a bound of None means unknown.
These are what bound inference, static bounds checking and the simplifier rely on.
"""
from __future__ import annotations

import math

from jitdl import dtypes
from jitdl.ir.nodes import (Access, BinOp, Binary, Call, Cast, CmpOp, Compare, Const, Intrin,
                            Load, Select, UnOp, Unary, Var)
from jitdl.ir.visit import walk_expr

INF = math.inf
FACTS = "linear facts"   # key in a ranges dict: ((form items, lo, hi), ...) from conditions


def _var_part(form):
    return {k: v for k, v in form.items() if k != 1 and v != 0}


def _apply_facts(f, lo, hi, ranges):
    """Tighten [lo, hi] of the affine form f with facts like `i + k >= 1`."""
    vp = _var_part(f)
    for items, flo, fhi in ranges.get(FACTS, ()):
        form = dict(items)
        fv = _var_part(form)
        d = f.get(1, 0) - form.get(1, 0)
        if fv == vp:
            lo, hi = max(lo, flo + d), min(hi, fhi + d)
        elif fv == {k: -v for k, v in vp.items()}:
            d = f.get(1, 0) + form.get(1, 0)
            lo, hi = max(lo, -fhi + d), min(hi, -flo + d)
    return lo, hi


def linear(e):
    """e as {Var: coef, 1: const} with int coefficients, or None when e is not affine."""
    match e:
        case Const() if dtypes.is_int(e.dtype) or e.dtype == "bool":
            return {1: int(e.value)}
        case Var() if dtypes.is_int(e.dtype):
            return {e: 1, 1: 0}
        case Cast() if dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype) \
                and dtypes.itemsize(e.dtype) > dtypes.itemsize(e.value.dtype) \
                or (isinstance(e, Cast) and e.dtype == e.value.dtype):
            return linear(e.value)
        case Unary(op=UnOp.NEG):
            f = linear(e.a)
            return None if f is None else {k: -v for k, v in f.items()}
        case Binary(op=BinOp.ADD | BinOp.SUB):
            fa, fb = linear(e.a), linear(e.b)
            if fa is None or fb is None:
                return None
            sign = 1 if e.op == BinOp.ADD else -1
            out = dict(fa)
            for k, v in fb.items():
                out[k] = out.get(k, 0) + sign * v
            return out
        case Binary(op=BinOp.MUL):
            fa, fb = linear(e.a), linear(e.b)
            if fa is None or fb is None:
                return None
            if len(fa) == 1:
                fa, fb = fb, fa
            if len(fb) != 1:
                return None
            c = fb[1]
            return {k: v * c for k, v in fa.items()}
    return None


def single_var(e):
    """(var, coef, const) when e is c*var + d with c != 0, else None."""
    f = linear(e)
    if f is None:
        return None
    terms = [(k, v) for k, v in f.items() if k != 1 and v != 0]
    if len(terms) != 1:
        return None
    return terms[0][0], terms[0][1], f.get(1, 0)


def _mul(a, b):
    if a == 0 or b == 0:
        return 0
    return a * b


def bounds(e, ranges):
    """Inclusive (lo, hi) of integer or bool expression e under `ranges`; +-inf if unknown."""
    f = linear(e)
    if f is not None:
        lo = hi = f.get(1, 0)
        for k, c in f.items():
            if k == 1:
                continue
            vlo, vhi = ranges.get(k, (-INF, INF))
            lo += min(_mul(c, vlo), _mul(c, vhi))
            hi += max(_mul(c, vlo), _mul(c, vhi))
        if FACTS in ranges:
            lo, hi = _apply_facts(f, lo, hi, ranges)
        return lo, hi
    match e:
        case Compare() | Binary(dtype="bool") | Unary(dtype="bool"):
            return 0, 1
        case Binary(op=BinOp.MUL):
            a, b = bounds(e.a, ranges), bounds(e.b, ranges)
            c = [_mul(x, y) for x in a for y in b]
            return min(c), max(c)
        case Binary(op=BinOp.MIN | BinOp.MAX):
            a, b = bounds(e.a, ranges), bounds(e.b, ranges)
            pick = min if e.op == BinOp.MIN else max
            return pick(a[0], b[0]), pick(a[1], b[1])
        case Binary(op=BinOp.FLOORDIV) if isinstance(e.b, Const) and e.b.value > 0:
            lo, hi = bounds(e.a, ranges)
            d = e.b.value
            return (lo // d if lo != -INF else -INF), (hi // d if hi != INF else INF)
        case Binary(op=BinOp.MOD) if isinstance(e.b, Const) and e.b.value > 0:
            lo, hi = bounds(e.a, ranges)
            d = e.b.value
            if lo != -INF and hi != INF and lo // d == hi // d:
                return lo % d, hi % d
            return 0, d - 1
        case Call(fn=Intrin.ABS):
            lo, hi = bounds(e.args[0], ranges)
            if lo >= 0:
                return lo, hi
            if hi <= 0:
                return -hi, -lo
            return 0, max(-lo, hi)
        case Select():
            t = bounds(e.t, narrow(e.cond, ranges))
            f = bounds(e.f, narrow(e.cond, ranges, negate=True))
            return min(t[0], f[0]), max(t[1], f[1])
        case Cast() if dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype):
            lo, hi = bounds(e.value, ranges)
            tlo, thi = _int_range(e.dtype)
            if tlo <= lo and hi <= thi:
                return lo, hi
            return tlo, thi             # a narrowing cast may wrap: anything in its range
        case Cast(dtype="int64") if e.value.dtype == "bool":
            return 0, 1
    if e.dtype == "bool":
        return 0, 1
    if e.dtype == "uint8":
        return 0, 255
    if e.dtype == "int8":
        return -128, 127
    return -INF, INF


def _int_range(dtype):
    import numpy as np
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


_FLIP = {CmpOp.LT: CmpOp.GE, CmpOp.LE: CmpOp.GT, CmpOp.GT: CmpOp.LE, CmpOp.GE: CmpOp.LT,
         CmpOp.EQ: CmpOp.NE, CmpOp.NE: CmpOp.EQ}
_MIRROR = {CmpOp.LT: CmpOp.GT, CmpOp.LE: CmpOp.GE, CmpOp.GT: CmpOp.LT, CmpOp.GE: CmpOp.LE,
           CmpOp.EQ: CmpOp.EQ, CmpOp.NE: CmpOp.NE}


def narrow(cond, ranges, negate=False):
    """Ranges tightened by assuming `cond` (or its negation) holds. Sound, not complete."""
    if cond is None:
        return ranges
    match cond:
        case Unary(op=UnOp.NOT):
            return narrow(cond.a, ranges, not negate)
        case Binary(op=BinOp.AND) if not negate:
            return narrow(cond.b, narrow(cond.a, ranges))
        case Binary(op=BinOp.OR) if negate:
            return narrow(cond.b, narrow(cond.a, ranges, True), True)
        case Compare():
            op = _FLIP[cond.op] if negate else cond.op
            if not dtypes.is_int(cond.a.dtype):
                return ranges
            return _narrow_cmp(op, cond.a, cond.b, ranges)
    return ranges


def _narrow_cmp(op, a, b, ranges):
    # a relation between several indices (i + k >= 1) is kept whole as a fact
    fa, fb = linear(a), linear(b)
    if fa is not None and fb is not None:
        diff = dict(fa)
        for k, v in fb.items():
            diff[k] = diff.get(k, 0) - v
        if len(_var_part(diff)) >= 2:
            lim = {CmpOp.LT: (-INF, -1), CmpOp.LE: (-INF, 0), CmpOp.GT: (1, INF),
                   CmpOp.GE: (0, INF), CmpOp.EQ: (0, 0)}.get(op)
            if lim is not None:
                fact = (tuple(diff.items()), lim[0], lim[1])
                ranges = {**ranges, FACTS: ranges.get(FACTS, ()) + (fact,)}
    # bring to the form  c*v + d  op  rhs, for each variable side
    out = ranges
    for lhs, rhs, o in ((a, b, op), (b, a, _MIRROR[op])):
        sv = single_var(lhs)
        if sv is None:
            continue
        v, c, d = sv
        rlo, rhi = bounds(rhs, out)
        lo, hi = out.get(v, (-INF, INF))
        # c*v + d  o  [rlo, rhi]
        if o in (CmpOp.LT, CmpOp.LE, CmpOp.EQ):
            lim = rhi - d - (1 if o == CmpOp.LT else 0)
            if lim != INF and lim != -INF:
                if c > 0:
                    hi = min(hi, math.floor(lim / c))
                else:
                    lo = max(lo, math.ceil(lim / c))
        if o in (CmpOp.GT, CmpOp.GE, CmpOp.EQ):
            lim = rlo - d + (1 if o == CmpOp.GT else 0)
            if lim != INF and lim != -INF:
                if c > 0:
                    lo = max(lo, math.ceil(lim / c))
                else:
                    hi = min(hi, math.floor(lim / c))
        if (lo, hi) != out.get(v, (-INF, INF)):
            out = {**out, v: (lo, hi)}
    return out


def free_vars(e, acc=None):
    """The Vars an expression reads (not counting tensors it accesses)."""
    acc = {} if acc is None else acc
    for n in walk_expr(e):
        if isinstance(n, Var):
            acc[n] = None
    return list(acc)


def reads_memory(e) -> bool:
    return any(isinstance(n, (Access, Load)) for n in walk_expr(e))
