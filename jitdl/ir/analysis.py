"""Integer analysis: affine forms, interval bounds under loop ranges, and condition narrowing.

Ranges map a Var to an inclusive (lo, hi) pair of ints; a bound of None means unknown.
These are what bound inference, static bounds checking and the simplifier rely on.
"""
from __future__ import annotations

import math
import threading
from contextlib import contextmanager

from jitdl import dtypes
from jitdl.ir.nodes import (Access, BinOp, Binary, Call, Cast, CmpOp, Compare, Const, Expr,
                            Intrin, Load, Reduce, Select, SizeVar, UnOp, Unary, Var)
from jitdl.ir.visit import expr_children, structural_hash, walk_unique

INF = math.inf
FACTS = "linear facts"   # key in a ranges dict: ((form items, lo, hi), ...) from conditions


def _var_part(form):
    # (the constant's key is the int 1: `k != 1` on a node would call its __ne__, in Python)
    return {k: v for k, v in form.items() if v != 0 and type(k) is not int}


def _apply_facts(f, lo, hi, ranges):
    """Tighten [lo, hi] of the affine form f with facts like `i + k >= 1`, also where f's
    variable part is a multiple of the fact's (2*i + 2*k), plus other terms bounded by
    their ranges (`j + k` under `k <= K - 1`: an rfactor's guarded tail read at j + k);
    over symbolic sizes, by chains of facts (see _chain)."""
    vp = _var_part(f)
    if not vp:
        return lo, hi
    for items, flo, fhi in ranges.get(FACTS, ()):
        form = dict(items)
        fv = _var_part(form)
        if not fv or not fv.keys() <= vp.keys():
            continue
        first = next(iter(fv))
        k, rem = divmod(vp[first], fv[first])
        if rem or k == 0 or any(vp[a] != k * c for a, c in fv.items()):
            continue
        # f = k * (fv) + rest + cf  and  fv in [flo - cform, fhi - cform]
        rest = {a: c for a, c in vp.items() if a not in fv}
        rlo, rhi = form_bounds(rest, {**ranges, FACTS: ()}) if rest else (0, 0)
        cf, cform = f.get(1, 0), form.get(1, 0)
        a, b = k * (flo - cform) + cf, k * (fhi - cform) + cf
        a, b = (a, b) if k > 0 else (b, a)
        a, b = a + rlo, b + rhi
        lo, hi = max(lo, a) if a == a else lo, min(hi, b) if b == b else hi
    if any(isinstance(k, SizeVar) or ranges.get(k, (0, 0))[1] >= SIZE_LIMIT - 1 for k in vp):
        lo, hi = _chain(f, lo, hi, ranges)
    return lo, hi


_CHAIN = 3      # facts one bound over symbolic sizes combines at most


def _chain(f, lo, hi, ranges):
    """Bounds of a linear form over symbolic sizes by a chain of the facts: f = (f - c*F)
    + c*F, where the fact bounds c*F, c cancels one of f's loop variables, and what remains
    is bounded by the ranges or by further facts. `j + r - X_n1 <= -1` under the facts of
    two loops, `r - W_n0 <= -1` and `j - X_n1 + W_n0 <= 0` (a window of a dynamic size)."""
    facts = []
    for items, flo, fhi in ranges.get(FACTS, ()):
        form = dict(items)
        # what a fact may cancel: loop variables, and quotients of sizes (a strided
        # extent's `(X_n0 - R) // 2`, then bounded by its own fact). Other atoms go with
        # the fact as a whole: the start of a blocked rfactor's part, kf * ceil(K / f),
        # cancels with its guard `kf * ceil(K / f) + ko < K` through ko
        loops = [(k, c) for k, c in items if c and (
            isinstance(k, Var) and not isinstance(k, SizeVar) or _size_atom(k))]
        facts.append((form, loops, flo, fhi))
    if not any(k in f for _, loops, _, _ in facts for k, _ in loops):
        return lo, hi
    plain = {**ranges, FACTS: ()}
    best = [lo, hi]

    def step(g, used, add_lo, add_hi, depth):
        for n, (form, loops, flo, fhi) in enumerate(facts):
            if n in used:
                continue
            for atom, fc in loops:
                c, rem = divmod(g.get(atom, 0), fc)
                if rem or c == 0:
                    continue
                rest = dict(g)
                for k, v in form.items():
                    rest[k] = rest.get(k, 0) - c * v
                clo, chi = sorted((_mul(c, flo), _mul(c, fhi)))
                rlo, rhi = form_bounds(rest, plain)
                a, b = rlo + clo + add_lo, rhi + chi + add_hi
                best[0] = max(best[0], a) if a == a else best[0]
                best[1] = min(best[1], b) if b == b else best[1]
                if depth > 1:
                    step(rest, used | {n}, add_lo + clo, add_hi + chi, depth - 1)
    if facts:
        step(f, frozenset(), 0, 0, _CHAIN)
    return best[0], best[1]


SIZE_LIMIT = 1 << 40    # array sizes stay below this (8 TiB of float64): what a size
#                         variable may be, so sums of a few of them cannot wrap in int64


def with_loop(ranges, var, lo, extent):
    """ranges with `var` over [lo, lo + extent). A symbolic extent (an int64 expression
    over size variables) gives var the range [lo, SIZE_LIMIT) and the fact `var - lo -
    extent <= -1`; its size variables, which are never negative, [0, SIZE_LIMIT)."""
    if isinstance(extent, int):
        return {**ranges, var: (lo, lo + extent - 1)}
    out = {**ranges, var: (lo, lo + SIZE_LIMIT - 1)}
    for v in walk_unique(extent):
        if isinstance(v, Var) and v not in out:
            out[v] = (0, SIZE_LIMIT - 1)
        elif isinstance(v, Binary) and v.op == BinOp.MUL and _size_atom(v) and \
                v not in out and all(isinstance(f, SizeVar) for f in _factors(v)):
            out[v] = (0, SIZE_LIMIT - 1)    # (an axis of n0 * n1 elements, a flattened
            #                                 array's: its size, as a size variable is)
    for end in upper_ends(extent):
        form = {var: 1, 1: -lo}
        for k, c in affine(end).items():
            form[k] = form.get(k, 0) - c
        out[FACTS] = out.get(FACTS, ()) + ((tuple(form.items()), -INF, -1),)
        out[FACTS] += tuple(_quotient_fact(k) for k in form if _size_quotient(k))
    return out


def _size_atom(k):
    """An atom of a form that is an expression of size variables alone (`(X_n0 - R) // 2`
    of an inferred strided extent)."""
    return type(k) is not int and not isinstance(k, Var) and all(
        isinstance(v, SizeVar) for v in walk_unique(k) if isinstance(v, Var))


def _size_quotient(k):
    return _size_atom(k) and isinstance(k, Binary) and k.op == BinOp.FLOORDIV \
        and isinstance(k.b, Const) and k.b.value > 1 and dtypes.is_int(k.dtype) \
        and all(type(a) is int or isinstance(a, SizeVar) or _size_atom(a) for a in affine(k.a))


def _quotient_fact(q):
    """`c*q - a` in [1 - c, 0] for q = a // c: what floor division gives."""
    c = int(q.b.value)
    form = {q: c}
    for k, v in affine(q.a).items():
        form[k] = form.get(k, 0) - v
    return tuple(form.items()), 1 - c, 0


def upper_ends(extent):
    """Extents that a loop over `extent` is below whenever it runs: each side of a min,
    and `a` of `max(a, c)` with c <= 0 (a loop that runs has an extent of at least 1, so
    there it is a: an inferred `max(X_n0 - R + 1, 0)`)."""
    if isinstance(extent, Binary) and extent.op == BinOp.MIN:
        return upper_ends(extent.a) + upper_ends(extent.b)
    if isinstance(extent, Binary) and extent.op == BinOp.MAX:
        for a, b in ((extent.a, extent.b), (extent.b, extent.a)):
            if isinstance(b, Const) and b.value <= 0:
                return upper_ends(a)
    return [extent]


def below(e, n, ranges):
    """Whether e <= n - 1 holds under ranges, for an int or symbolic n: by the affine
    form of e - n (with the facts), through `a // c` (a <= c*n - 1), `a % n`, the min,
    max and selects of clamped indices (`max(min(e, n - 1), 0)`), and a min or max n."""
    if isinstance(n, int):
        return bounds(e, ranges)[1] <= n - 1 or _quotient_below(e, n, ranges) or \
            _is_int(e) and isinstance(e, Binary) and e.op == BinOp.FLOORDIV and \
            isinstance(e.b, Const) and e.b.value > 0 and below(e.a, n * e.b.value, ranges)
    if isinstance(n, Binary) and n.op in (BinOp.MIN, BinOp.MAX) and dtypes.is_int(n.dtype):
        # below a min: below both sides; below a max: below either (an inferred extent
        # `max(X_n0 - 2, 0)`)
        sides = (below(e, n.a, ranges), below(e, n.b, ranges))
        if all(sides) or n.op == BinOp.MAX and any(sides):
            return True
    match e:
        case Binary(op=BinOp.FLOORDIV) if isinstance(e.b, Const) and e.b.value > 0:
            return below(e.a, n * e.b.value, ranges)
        case Binary(op=BinOp.FLOORDIV) if not isinstance(e.b, Const):
            return _quotient_below(e, n, ranges)
        case Binary(op=BinOp.MOD) if _same(e.b, n) and positive(n, ranges):
            return True             # (a size may be 0: then a % n reads nothing valid)
        case Cast() if _exact_cast(e):
            return below(e.value, n, ranges)
        case Binary(op=BinOp.MIN) if dtypes.is_int(e.dtype):     # a clamp to n - 1
            return below(e.a, n, ranges) or below(e.b, n, ranges)
        case Binary(op=BinOp.MAX) if dtypes.is_int(e.dtype):
            return below(e.a, n, ranges) and below(e.b, n, ranges)
        case Select() if dtypes.is_int(e.dtype):
            return below(e.t, n, narrow_for(e.cond, ranges, (e.t, n))) and \
                below(e.f, n, narrow_for(e.cond, ranges, (e.f, n), negate=True))
        case Const() if e.value <= 0:
            return positive(n, ranges)
    return _form_below(dict(affine(e)), n, ranges)


def _form_below(form, n, ranges):
    """Whether an affine form is <= n - 1 under ranges: by the bounds of form - n, with
    the facts, products of the same factors cancelling."""
    diff = dict(form)
    for k, c in affine(n).items():
        diff[k] = diff.get(k, 0) - c
    diff = _merged_products(diff, ranges)
    return form_bounds(diff, _with_mod_facts(diff, ranges))[1] <= -1


def _merged_products(form, ranges):
    """form with the products of the same factors in another order or grouping as one
    atom, that of a fact where one has it (`X_n0 * (X_n2 * X_n1)` and the loop's extent
    `X_n0 * X_n1 * X_n2`: int64 multiplication, which wraps, is still commutative and
    associative), so that they cancel."""
    products = [k for k in form if _is_product(k)]
    if not products:
        return form
    known = [k for items, _, _ in ranges.get(FACTS, ()) for k, _ in items if _is_product(k)]
    out = {}
    for k, v in form.items():
        if _is_product(k):
            k = next((q for q in known + list(out) if _is_product(q) and q.dtype == k.dtype
                      and _same_factors(k, q)), k)
        out[k] = out.get(k, 0) + v
    return {k: v for k, v in out.items() if v != 0 or type(k) is int}


def _is_product(k):
    return isinstance(k, Binary) and k.op == BinOp.MUL


def _same_factors(p, q):
    return _sub_factors(p, q) and len(_factors(p)) == len(_factors(q))


def _sub_factors(p, q):
    """Whether the factors of p are some of those of q (each as often)."""
    left = _factors(q)
    for f in _factors(p):
        hit = next((k for k, g in enumerate(left) if _same(g, f) and _same(f, g)), None)
        if hit is None:
            return False
        left.pop(hit)
    return True


def inside(e, n, ranges):
    """Whether 0 <= e <= n - 1 holds under ranges (an index of a dimension of n elements):
    by bounds() and below(), or as a row-major position in a product of sizes (see
    _radix_inside: `i * n1 + j` in [0, n0 * n1), which interval arithmetic cannot place)."""
    if (bounds(e, ranges)[0] >= 0 or _quotient_not_negative(e, ranges)) and \
            below(e, n, ranges):
        return True
    return isinstance(n, Expr) and e.dtype == "int64" and _radix_inside(affine(e), n, ranges)


def _form_inside(form, n, ranges):
    """0 <= form <= n - 1 for an affine form and an int64 n."""
    if form_bounds(form, ranges)[0] >= 0:
        if not _var_part(form) and form.get(1, 0) == 0 and positive(n, ranges):
            return True
        if _form_below(form, n, ranges):
            return True
    return _radix_inside(form, n, ranges)


def _radix_inside(form, n, ranges):
    """0 <= form <= n - 1 for a mixed-radix position in a product of sizes n: form = a*s
    + rest, where s is a product of some of n's factors, each >= 0, m those left (n = m*s),
    0 <= a <= m - 1 and 0 <= rest <= s - 1 (each the same way again: `(i*n1 + j)*n2 + k`
    below n0*n1*n2, or `i*(n1*n2) + j*n2 + k`). Then 0 <= a*s + rest <= (m - 1)*s + s - 1
    = n - 1 exactly, and int64 arithmetic, which wraps consistently, gives that exact value
    because it lies in [0, n) and n, a tensor's extent, is a size (below SIZE_LIMIT, as
    with_loop takes a product of sizes to be)."""
    if not (isinstance(n, Binary) and n.op == BinOp.MUL and n.dtype == "int64"):
        return False
    for p, c in form.items():
        if c != 1 or not (isinstance(p, Binary) and p.op == BinOp.MUL and p.dtype == "int64"):
            continue
        left, of_n, others = _factors(n), [], []
        for f in _factors(p):
            hit = next((k for k, g in enumerate(left) if _same(g, f)), None)
            (others if hit is None else of_n).append(f if hit is None else left.pop(hit))
        if len(others) != 1 or not of_n or not left or \
                any(bounds(f, ranges)[0] < 0 for f in of_n):
            continue
        s, m = _product(of_n), _product(left)
        rest = {k: v for k, v in form.items() if k is not p}
        if _form_inside(rest, s, ranges) and inside(others[0], m, ranges):
            return True
    return False


def _product(factors):
    out = factors[0]
    for f in factors[1:]:
        out = Binary(BinOp.MUL, out, f, "int64")
    return out


def _with_mod_facts(form, ranges):
    """ranges with the fact `a % d - d <= -1` for each atom a % d of form (a symbolic
    d >= 1 here): what floor modulo gives, for a chain of facts (_chain) to combine with
    a loop's. roll's wrapped read `i + r - n` of r = -s % n, under i < n: below n."""
    facts = tuple(((k, 1), (k.b, -1), (1, 0)) for k in form
                  if isinstance(k, Binary) and k.op == BinOp.MOD and _is_int(k)
                  and not isinstance(k.b, Const) and positive(k.b, ranges))
    return {**ranges, FACTS: ranges.get(FACTS, ()) + tuple(
        (items, -INF, -1) for items in facts)} if facts else ranges


def _quotient_below(e, n, ranges):
    """below() of a // d for a >= 0 and a symbolic divisor d >= 0 (a size): a <= n * d
    - 1 says so, as d >= 1 there (d = 0 would make n * d - 1 negative). The leading
    index of a row-major position: k // n2 // n1 with k < (n0 * n1) * n2."""
    return isinstance(e, Binary) and e.op == BinOp.FLOORDIV and _is_int(e) and \
        not isinstance(e.b, Const) and bounds(e.a, ranges)[0] >= 0 and \
        _not_negative(e.b, ranges) and below(e.a, n * e.b, ranges)


def _quotient_not_negative(e, ranges):
    """a // d >= 0 for a >= 0 and d >= 0 (a leading index k // (n2 * n1))."""
    return isinstance(e, Binary) and e.op == BinOp.FLOORDIV and _is_int(e) and \
        bounds(e.a, ranges)[0] >= 0 and _not_negative(e.b, ranges)


def _not_negative(d, ranges):
    """Whether d >= 0 under ranges wherever they hold: by its bounds, or as a product of
    factors >= 0 that are some of those of a product in a fact (a loop's extent k < n0 *
    n1 * n2, which with_loop takes to be a size: where it is >= 1, so is each factor, and
    n2 * n1 is at most it; where it is 0 the loop reads nothing)."""
    if bounds(d, ranges)[0] >= 0:
        return True
    if not _is_product(d) or any(bounds(f, ranges)[0] < 0 for f in _factors(d)):
        return False
    return any(_is_product(k) and _sub_factors(d, k)
               for items, _, _ in ranges.get(FACTS, ()) for k, _ in items)


def positive(n, ranges) -> bool:
    """Whether n >= 1 under ranges: by its bounds, or because a loop that runs here says
    so (i in [0, c*n + k) with i >= 0 implies c*n + k >= 1)."""
    if bounds(n, ranges)[0] >= 1:
        return True
    for items, _, fhi in ranges.get(FACTS, ()):
        form = dict(items)
        c = -form.pop(n, 0) if n in form else 0
        if c <= 0 or fhi == INF:
            continue
        # rest - c*n <= fhi, so c*n >= rest - fhi >= lower bound of rest - fhi
        low = form_bounds({k: v for k, v in form.items()}, {**ranges, FACTS: ()})[0]
        if low != -INF and low - fhi >= 1:
            return True
    # a factor of a positive product of non-negative factors (n1 of n0 * n1 >= 1, which
    # a loop over a row-major position k < n0 * n1 says)
    for items, _, _ in ranges.get(FACTS, ()):
        for k, _ in items:
            if isinstance(k, Binary) and k.op == BinOp.MUL and k is not n:
                factors = _factors(k)
                if any(_same(f, n) for f in factors) and \
                        all(bounds(f, ranges)[0] >= 0 for f in factors) and \
                        positive(k, ranges):
                    return True
    return False


def _factors(e):
    """The factors of a product (e itself where it is not one)."""
    if isinstance(e, Binary) and e.op == BinOp.MUL:
        return _factors(e.a) + _factors(e.b)
    return [e]


def _same(a, b):
    return a is b or a == b or isinstance(a, Cast) and _same(a.value, b)


def _exact_cast(e):
    """A cast that changes nothing about its value: to the same dtype, or widening a
    variable or a constant. (Widening arithmetic done in a narrower dtype is not looked
    through: `int64(int8(i) + 100)` wraps before it widens.)"""
    if e.dtype == e.value.dtype:
        return True
    return dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype) \
        and dtypes.itemsize(e.dtype) > dtypes.itemsize(e.value.dtype) \
        and (dtypes.is_signed(e.dtype) or not dtypes.is_signed(e.value.dtype)) \
        and isinstance(e.value, (Var, Const))


def linear(e):
    """e as {Var: coef, 1: const} with int coefficients, or None when e is not affine in
    integer variables (affine() with no other atoms)."""
    if not _is_int(e):
        return None
    f = affine(e)
    if all(type(k) is int or isinstance(k, Var) and dtypes.is_int(k.dtype) for k in f):
        return f
    return None


def is_linear(e):
    """linear(e) is not None, within memoised() worked out once per node from those of
    its operands (where linear itself checks every atom of the form, at each node of a
    long sum again)."""
    table = getattr(_memo, "table", None)
    if table is None or not isinstance(e, Binary):
        return linear(e) is not None
    key = ("linear", id(e))
    hit = table.get(key)
    if hit is None:
        if e.op in (BinOp.ADD, BinOp.SUB) and e.dtype == "int64":
            ok = is_linear(e.a) and is_linear(e.b)
        else:
            ok = linear(e) is not None
        hit = table[key] = (e, ok)
    return hit[1]


def _mul(a, b):
    if a == 0 or b == 0:
        return 0
    return a * b


def _is_int(e):
    return dtypes.is_int(e.dtype) or e.dtype == "bool"


def affine(e):
    """e as {atom: coef, 1: const}: an affine form over atoms, which are Vars and the
    integer subexpressions that are not affine themselves (`f // 3`, `abs(i - p)`, a
    select). Always succeeds for an integer expression (at worst {e: 1}). A new dict
    each call; within memoised(), that of each node object is worked out once: the
    simplifier asks for the form of every node of a long sum of sizes, bottom-up, and
    each walked the sum below it again (a concatenate of 30 vectors of symbolic sizes,
    its offsets sums of up to 30 sizes: 300000 calls, a third of simplify's time)."""
    table = getattr(_memo, "table", None)
    if table is None or not isinstance(e, (Binary, Unary, Cast)):
        return _affine(e)
    key = ("affine", id(e))
    hit = table.get(key)
    if hit is None:
        hit = table[key] = (e, _affine(e))
    return dict(hit[1])


def _affine(e):
    match e:
        case Const() if _is_int(e):
            return {1: int(e.value)}
        case Cast() if _exact_cast(e):
            return affine(e.value)
        case Unary(op=UnOp.NEG) if dtypes.is_int(e.dtype):
            return {k: -v for k, v in affine(e.a).items()}
        case Binary(op=BinOp.ADD | BinOp.SUB) if dtypes.is_int(e.dtype):
            sign = 1 if e.op == BinOp.ADD else -1
            out = dict(affine(e.a))
            for k, v in affine(e.b).items():
                out[k] = out.get(k, 0) + sign * v
            return {k: v for k, v in out.items() if v != 0 or type(k) is int}
        case Binary(op=BinOp.MUL) if dtypes.is_int(e.dtype):
            fa, fb = affine(e.a), affine(e.b)
            if len(fa) == 1:
                fa, fb = fb, fa
            if len(fb) == 1:
                c = fb.get(1, 0)
                return {k: v * c for k, v in fa.items() if v * c != 0 or type(k) is int}
    return {e: 1, 1: 0}


def stride(index, var, varying):
    """The coefficient of `var` when index is affine in it with no other varying term."""
    form = affine(index)
    for k in form:
        if k == 1 or k is var:
            continue
        if isinstance(k, Var):
            if k in varying:
                return None
        elif not dtypes.is_int(k.dtype) or any(isinstance(v, Var) and (v is var or v in varying)
                                               for v in walk_unique(k)):
            return None     # (a term such as k0 * n, n a size, does not vary: it stays)
    return form.get(var, 0)


def form_bounds(f, ranges):
    """Inclusive (lo, hi) of an affine form (from `affine`) under `ranges`."""
    lo = hi = f.get(1, 0)
    for k, c in f.items():
        if type(k) is int:
            continue
        vlo, vhi = atom_bounds(k, ranges)
        lo += min(_mul(c, vlo), _mul(c, vhi))
        hi += max(_mul(c, vlo), _mul(c, vhi))
    if FACTS in ranges:
        lo, hi = _apply_facts(f, lo, hi, ranges)
    return lo, hi


def bounds(e, ranges):
    """Inclusive (lo, hi) of integer or bool expression e under `ranges`; +-inf if unknown.
    `ranges` maps Vars, and also non-affine subexpressions narrowed by a condition (the
    `iy` of `iy >= 0 and iy < h`), to (lo, hi)."""
    if not _is_int(e):
        return -INF, INF
    form = affine(e)
    if len(form) == 2 and form[1] == 0 and form.get(e) == 1:
        return form_bounds(form, ranges)        # one atom: no arithmetic here to wrap
    return _fit(form_bounds(form, ranges), e.dtype)


def _fit(b, dtype):
    """Bounds of a value computed in `dtype` whose exact value is within b: b where it
    fits the dtype; else the computation may have wrapped, to anything the dtype holds
    (+, -, * wrap consistently, so only the final value has to fit)."""
    lo, hi = _limits(dtype)
    if lo <= b[0] and b[1] <= hi:
        return b
    return _dtype_range(dtype)


def _limits(dtype):
    return (0, 1) if dtype == "bool" else _int_range(dtype)


_memo = threading.local()     # .table: see memoised()


@contextmanager
def memoised():
    """Within it (on this thread), the bounds of each atom and each narrowing of ranges
    are computed once per node object and ranges object. A pass that asks for the bounds
    of every node of an expression (the simplifier, bottom-up) otherwise computes those
    of each subexpression again at every level above it, and those of the arms of nested
    selects once per enclosing select: seconds for a reflect padding. Sound because
    ranges dicts are never changed once made (every narrowing makes a new one), and the
    table keeps each node and ranges it has seen alive, so their ids stay theirs."""
    if getattr(_memo, "table", None) is not None:
        yield
        return
    _memo.table = {}
    try:
        yield
    finally:
        _memo.table = None


def is_memoised():
    """Whether this thread is within memoised()."""
    return getattr(_memo, "table", None) is not None


def atom_bounds(e, ranges):
    """Bounds of one atom: its own range where a condition narrowed it, intersected with
    what its operation implies."""
    if isinstance(e, Var):
        known = ranges.get(e)
        if known is not None:
            return known
        return _dtype_range(e.dtype)
    table = getattr(_memo, "table", None)
    if table is None:
        return _atom_bounds(e, ranges)
    key = (id(e), id(ranges))
    hit = table.get(key)
    if hit is None:
        hit = table[key] = (e, ranges, _atom_bounds(e, ranges))
    return hit[2]


def _atom_bounds(e, ranges):
    known = ranges.get(e)
    lo, hi = _op_bounds(e, ranges)
    if not (isinstance(e, Select) or isinstance(e, Binary) and e.op in (BinOp.MIN, BinOp.MAX)):
        lo, hi = _fit((lo, hi), e.dtype)
    # (min, max and select pick one of their operands, whose bounds are fitted: an
    # unknown side of one of them is no overflow, the other side still holds)
    if known is not None:
        lo, hi = max(lo, known[0]), min(hi, known[1])
    return lo, hi


def _dtype_range(dtype):
    if dtype == "bool":
        return 0, 1
    if dtype in ("uint8", "int8", "int16"):
        return _int_range(dtype)
    return -INF, INF


def _op_bounds(e, ranges):
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
        case Binary(op=BinOp.FLOORDIV) if _is_int(e) and bounds(e.b, ranges)[0] >= 0:
            # a divisor of 0 or more (a size; x // 0 is 0): between a's bounds and 0
            lo, hi = bounds(e.a, ranges)
            return min(lo, 0), max(hi, 0)
        case Binary(op=BinOp.MOD) if positive(e.b, ranges):
            # a positive symbolic divisor: floor mod is in [0, b - 1], b in its dtype (a
            # product of sizes, unbounded here, is no larger than the dtype holds)
            return 0, max(min(bounds(e.b, ranges)[1], _limits(e.dtype)[1]) - 1, 0)
        case Call(fn=Intrin.ABS) if _is_int(e):
            lo, hi = bounds(e.args[0], ranges)
            if lo <= _limits(e.dtype)[0]:
                return _dtype_range(e.dtype)        # abs of the most negative value wraps
            return _abs_interval(lo, hi)
        case Select():
            return _select_bounds(e, ranges, bounds)
        case Cast() if dtypes.is_int(e.dtype) and _is_int(e.value):
            return bounds(e.value, ranges)      # (atom_bounds: one that does not fit wraps)
        case Cast() if dtypes.is_int(e.dtype) and dtypes.is_float(e.value.dtype):
            lo, hi = float_bounds(e.value, ranges)     # the cast truncates toward zero
            if math.isfinite(lo) and math.isfinite(hi):
                return math.trunc(lo), math.trunc(hi)
    return _dtype_range(e.dtype)


_ROUNDING = 2.0 ** -20      # relative widening per rounded float operation (float32: 2^-24)


def _widen(lo, hi):
    return lo - abs(lo) * _ROUNDING, hi + abs(hi) * _ROUNDING


_FLOAT_MAX = {"float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}


def float_bounds(e, ranges):
    """See _float_bounds; bounds that reach the dtype's overflow are unbounded (inf, then
    NaN, may follow)."""
    lo, hi = _float_bounds(e, ranges)
    top = _FLOAT_MAX.get(e.dtype, 0.0)
    if not (-top <= lo <= hi <= top):
        return -INF, INF
    return lo, hi


def _float_bounds(e, ranges):
    """Bounds of a float expression built from indices and constants (the source
    coordinate of a resize), as floats; widened after every operation that rounds, so
    that they hold in float32 too. (-inf, inf) for anything else (data, NaN sources)."""
    match e:
        case Const():
            v = float(e.value)
            return (v, v) if math.isfinite(v) else (-INF, INF)
        case Cast() if _is_int(e.value):
            lo, hi = bounds(e.value, ranges)
            if abs(lo) < 2 ** 24 and abs(hi) < 2 ** 24:        # exact in float32
                return float(lo), float(hi)
            return _widen(float(lo), float(hi))
        case Cast() if dtypes.is_float(e.value.dtype):
            lo, hi = float_bounds(e.value, ranges)
            return _widen(lo, hi) if e.dtype == "float32" else (lo, hi)
        case Unary(op=UnOp.NEG):
            lo, hi = float_bounds(e.a, ranges)
            return -hi, -lo
        case Binary(op=BinOp.ADD | BinOp.SUB | BinOp.MUL | BinOp.DIV | BinOp.MIN | BinOp.MAX):
            a, b = float_bounds(e.a, ranges), float_bounds(e.b, ranges)
            if not all(map(math.isfinite, a + b)):
                return -INF, INF
            if e.op == BinOp.ADD:
                return _widen(a[0] + b[0], a[1] + b[1])
            if e.op == BinOp.SUB:
                return _widen(a[0] - b[1], a[1] - b[0])
            if e.op in (BinOp.MIN, BinOp.MAX):
                pick = min if e.op == BinOp.MIN else max
                return pick(a[0], b[0]), pick(a[1], b[1])
            if e.op == BinOp.DIV:
                if b[0] <= 0 <= b[1]:
                    return -INF, INF
                b = (1 / b[1], 1 / b[0])
            c = [x * y for x in a for y in b]
            return _widen(min(c), max(c))
        case Call(fn=Intrin.FLOOR | Intrin.CEIL | Intrin.TRUNC | Intrin.ROUND):
            lo, hi = float_bounds(e.args[0], ranges)
            if not (math.isfinite(lo) and math.isfinite(hi)):
                return -INF, INF
            f = {Intrin.FLOOR: math.floor, Intrin.CEIL: math.ceil, Intrin.TRUNC: math.trunc,
                 Intrin.ROUND: round}[e.fn]
            return float(f(lo)), float(f(hi))
        case Call(fn=Intrin.ABS):
            return _abs_interval(*float_bounds(e.args[0], ranges))
        case Select():
            return _select_bounds(e, ranges, float_bounds)
    return -INF, INF


def _abs_interval(lo, hi):
    if lo >= 0:
        return lo, hi
    if hi <= 0:
        return -hi, -lo
    return 0, max(-lo, hi)


def _select_bounds(e, ranges, of):
    """Bounds of a select: its branches under the condition and its negation."""
    t = of(e.t, narrow_for(e.cond, ranges, e.t))
    f = of(e.f, narrow_for(e.cond, ranges, e.f, negate=True))
    return min(t[0], f[0]), max(t[1], f[1])


def unbounded_part(e, ranges):
    """The smallest subexpression of e that has no finite bounds under `ranges` (what an
    error about e should name), or None when e is bounded."""
    lo, hi = bounds(e, ranges)
    if lo != -INF and hi != INF:
        return None
    f = affine(e)
    # an atom: its operands
    parts = expr_children(e) if e in f else [a for a in f if type(a) is not int]
    for p in parts:
        inner = unbounded_part(p, ranges) if _is_int(p) else None
        if inner is not None:
            return inner
    return e


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
    table = getattr(_memo, "table", None)
    if table is None:
        return _narrow(cond, ranges, negate)
    key = (id(cond), id(ranges), negate)
    hit = table.get(key)
    if hit is None:
        hit = table[key] = (cond, ranges, _narrow(cond, ranges, negate))
    return hit[2]


def narrow_for(cond, ranges, exprs, negate=False):
    """narrow(cond, ranges, negate) for questions about `exprs` (an expression or a tuple
    of them) alone: `ranges` itself where the narrowing only tightened atoms that none of
    them holds, nor any fact (`v % 2` under `v % 2 == 0`, asked about the select's arm
    `v // 2`). Bounds under ranges then hold under the narrowed ones and are the same, as
    they read the ranges of their atoms and of the facts' only; and the memoised
    bounds of a node shared by both arms of a select are computed once, not once per
    path: a chain `v = select(v % 2 == 0, v // 2, 3 * v + 1)` of 10 steps, shared by
    both arms of each, took 9 s to lower and 7 s each to simplify. Size variables, which
    a read's extent holds besides its index, are never dropped; nor a contradiction."""
    out = narrow(cond, ranges, negate)
    if out is ranges or out.get(FACTS) is not ranges.get(FACTS) or len(out) < len(ranges):
        return out
    items = list(out.items())       # (a narrowing is {**ranges, atom: ...}: in order)
    changed = items[len(ranges):]
    for (k, r), (k0, r0) in zip(items, ranges.items()):
        if k is not k0:
            return out
        if r is not r0 and r != r0:
            changed.append((k, r))
    table = getattr(_memo, "table", None)
    cache = table.setdefault("hashes", {}) if table is not None else {}
    keys = set()
    for k, r in changed:
        if r[0] > r[1] or isinstance(k, SizeVar) or type(k) is not Var and any(
                isinstance(v, SizeVar) for v in walk_unique(k)):
            return out
        keys.add(structural_hash(k, cache))
    held = tuple(e for e in (exprs if type(exprs) is tuple else (exprs,))
                 if isinstance(e, Expr))
    held += tuple(k for items, _, _ in out.get(FACTS, ()) for k, _ in items
                  if type(k) is not int)
    for e in held:
        if any(structural_hash(n, cache) in keys for n in walk_unique(e)):
            return out
    return ranges


def _narrow(cond, ranges, negate):
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
            return _narrow_rel(op, cond.a, cond.b, _narrow_cmp(op, cond.a, cond.b, ranges))
    return ranges


def _narrow_rel(op, a, b, ranges):
    """Ranges under `a op b` where a side is a min or max that the relation holds with
    each side of: `a < min(p, q)` is `a < p` and `a < q` (an rfactor's guard against a
    reduction's bound `min(j + 2, X_n1)`, which proves its read below X_n1), likewise
    `max(p, q) <= b`, `a >= max(p, q)` and `min(p, q) > b`."""
    low = op in (CmpOp.LT, CmpOp.LE)
    # (which side is the min or max is told by position, not by `side is b`: the same
    # node on both sides, `e <= e` of e = max(n, m), is a min or max on the left too)
    for right, side, other, both in ((True, b, a, BinOp.MIN if low else BinOp.MAX),
                                     (False, a, b, BinOp.MAX if low else BinOp.MIN)):
        if op in (CmpOp.LT, CmpOp.LE, CmpOp.GT, CmpOp.GE) and isinstance(side, Binary) \
                and side.op == both and dtypes.is_int(side.dtype):
            for part in (side.a, side.b):
                x, y = (other, part) if right else (part, other)
                ranges = _narrow_rel(op, x, y, _narrow_cmp(op, x, y, ranges))
            return ranges
    return ranges


def _floordiv(a, c):
    return a if a in (INF, -INF) else a // c


def _ceildiv(a, c):
    return a if a in (INF, -INF) else -((-a) // c)


def _exact_form(e, ranges):
    """e's affine form where computing it cannot wrap; else e itself as one atom. (In
    int64 an unbounded part, a scalar argument, is taken at its value, as everywhere.)"""
    f = affine(e)
    b = form_bounds(f, ranges)
    lo, hi = _limits(e.dtype)
    if e.dtype == "int64":      # unknown bounds (a scalar argument) are not a wrap
        b = tuple(x for x in b if x not in (INF, -INF)) or (0,)
    return f if lo <= min(b) and max(b) <= hi else {e: 1, 1: 0}


_FACT_LIMITS = {CmpOp.LT: (-INF, -1), CmpOp.LE: (-INF, 0), CmpOp.GT: (1, INF),
                CmpOp.GE: (0, INF), CmpOp.EQ: (0, 0)}


_SIZES_NARROWED = 2     # sizes in a relation beyond which none of them is narrowed by it


def _narrow_cmp(op, a, b, ranges):
    """Ranges under `a op b` for integers: the relation is brought to `diff op 0` with
    diff affine over atoms; each atom is narrowed with the others' bounds, and a relation
    between several atoms (i + k >= 1) is also kept whole as a fact."""
    diff = dict(_exact_form(a, ranges))
    for k, v in _exact_form(b, ranges).items():
        diff[k] = diff.get(k, 0) - v
    terms = [(k, c) for k, c in diff.items() if type(k) is not int and c != 0]
    out = ranges
    if len(terms) >= 2 and op in _FACT_LIMITS:
        lim = _FACT_LIMITS[op]
        fact = (tuple(diff.items()), lim[0], lim[1])
        out = {**out, FACTS: out.get(FACTS, ()) + (fact,)}
    # (a size among several tells little from one relation: `i < n1 + ... + nk` bounds
    # n1 only through the others' bounds, which sizes do not have. Each was tightened
    # by the facts in chains (_chain), over the sum of the others: an eager concatenate
    # of 60 vectors of symbolic sizes narrows by `i < n1 + ... + nk` at each of its
    # selects, 16 of its 60 s. The relation itself stays a fact.)
    sizes = sum(1 for k, _ in terms if isinstance(k, SizeVar))
    for atom, c in terms:
        if sizes > _SIZES_NARROWED and isinstance(atom, SizeVar):
            continue
        rlo, rhi = form_bounds({k: v for k, v in diff.items() if k is not atom}, out)
        want_lo, want_hi = -rhi, -rlo            # c*atom  op  [want_lo, want_hi]
        lo, hi = atom_bounds(atom, out)
        if op in (CmpOp.LT, CmpOp.LE, CmpOp.EQ) and want_hi != INF:
            lim = want_hi - (1 if op == CmpOp.LT else 0)       # c*atom <= lim
            if c > 0:
                hi = min(hi, _floordiv(lim, c))
            else:
                lo = max(lo, _ceildiv(lim, c))
        if op in (CmpOp.GT, CmpOp.GE, CmpOp.EQ) and want_lo != -INF:
            lim = want_lo + (1 if op == CmpOp.GT else 0)       # c*atom >= lim
            if c > 0:
                lo = max(lo, _ceildiv(lim, c))
            else:
                hi = min(hi, _floordiv(lim, c))
        if op == CmpOp.NE and want_lo == want_hi and want_lo not in (INF, -INF) \
                and want_lo % c == 0:
            value = want_lo // c                                # atom != value
            if value == lo:
                lo += 1
            elif value == hi:
                hi -= 1
        if (lo, hi) != atom_bounds(atom, out):
            out = {**out, atom: (lo, hi)}
    return out


def free_vars(e, acc=None):
    """The Vars an expression reads (not counting tensors it accesses)."""
    acc = {} if acc is None else acc
    for n in walk_unique(e):
        if isinstance(n, Var):
            acc[n] = None
    return list(acc)


def reads_memory(e) -> bool:
    return any(isinstance(n, (Access, Load)) for n in walk_unique(e))


def reads_beyond(e, before) -> bool:
    """Whether e reads memory that expression `before` (evaluated first, in every lane)
    does not: such a read may be valid only where `before` says so (select(i < n, A[i],
    0), i < n and A[i] > 0), so it must not run unconditionally. Reads that `before`
    makes itself are safe (NumPy's maximum: select(a > b | isnan(a), a, b))."""
    made = unconditional_reads(before)
    return any(isinstance(n, (Access, Load)) and n not in made for n in walk_unique(e))


def short_circuits(e) -> bool:
    """Whether logical and/or `e` must skip its right side where its left one decides:
    the right side reads memory the left one does not (reads_beyond), which may be valid
    only where the left one says so. A plain read on the left (a reduction's accumulator:
    acc | x of any, acc & x of all) tells the bounds proof nothing about indices, so
    reads on the right proven in bounds are so everywhere: they run in every lane (the
    reduction then vectorises; a branch per element kept it scalar, any of 1e7 bools
    7x slower than NumPy's), and only reads checked at run time stay behind the left."""
    if not (e.dtype == "bool" and e.op in (BinOp.AND, BinOp.OR)):
        return False
    if isinstance(e.a, Load):
        return any(isinstance(n, Load) and n.check is not None or isinstance(n, Access)
                   for n in walk_unique(e.b))
    return reads_beyond(e.b, e.a)


def unconditional_reads(e):
    """The reads of e that run whatever the values: not those on the right of a logical
    and/or, nor in a select's arms (code generators may run them only under a guard).
    Each node once (a DAG in its own size: `s = s * s % 7 + 1` k times is 4k nodes)."""
    out, stack, seen = [], [e], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, (Access, Load)):
            out.append(n)
        if isinstance(n, Binary) and n.dtype == "bool" and n.op in (BinOp.AND, BinOp.OR):
            stack.append(n.a)
        elif isinstance(n, Select):
            stack.append(n.cond)
        else:
            stack.extend(expr_children(n))
    return out


def arms_read_guarded(sel) -> bool:
    """Whether an arm of a Select reads memory beyond what its condition reads."""
    return reads_beyond(sel.t, sel.cond) or reads_beyond(sel.f, sel.cond)


def bare_uses(e, uses):
    """uses[var] += (access, dim) for each dimension an access indexes by a bare variable;
    each access once, however often a DAG uses it. Not where a guard around the read
    compares that variable with the read's own size (`X[i] if i < X.shape[0] else 0` over
    Y's extent, or a generator's filter): the guard keeps it in bounds, so X and Y need not agree (the bounds
    proof still checks the read)."""
    seen, done, relations = set(), set(), {}

    def visit(n, related):
        # (`related`: what the guards around n relate, see _relations. A node is walked
        # once per such set, not once per sequence of guards: a chain of selects on the
        # values of the last, `v = select(v % 2 == 0, v // 2, 3*v + 1)`, reaches each
        # step under as many sequences as there are paths, which double with every step)
        if (id(n), related) in seen:
            return
        seen.add((id(n), related))
        if isinstance(n, Access):
            for dim, idx in enumerate(n.indices):
                if isinstance(idx, Var) and (id(n), dim) not in done and not _guarded(
                        related, idx, n.tensor.shape[dim]):
                    done.add((id(n), dim))
                    uses.setdefault(idx, []).append((n, dim))
        if isinstance(n, Select):
            visit(n.cond, related)
            inner = related | _relations(n.cond, relations)
            for arm in (n.t, n.f):
                visit(arm, inner)
        elif isinstance(n, Binary) and n.dtype == "bool" and n.op in (BinOp.AND, BinOp.OR):
            visit(n.a, related)
            visit(n.b, related | _relations(n.a, relations))
        elif isinstance(n, Reduce) and n.where is not None:
            # (a generator's filter guards the reduced expression: sum(X[k] for k in
            # range(m) if k < n))
            visit(n.where, related)
            inner = related | _relations(n.where, relations)
            for c in expr_children(n):
                if c is not n.where:
                    visit(c, inner)
        else:
            for c in expr_children(n):
                visit(c, related)
    visit(e, frozenset())


def _relations(guard, memo):
    """What the comparisons in a guard relate: (id of a variable, ("is", id of a node) or
    ("==", a constant's value)) for each variable and each node or constant of one
    comparison (the nodes are the guard's own, alive meanwhile). memo: by id."""
    hit = memo.get(id(guard))
    if hit is not None:
        return hit[1]
    out = set()
    for c in walk_unique(guard):
        if isinstance(c, Compare):
            parts = list(walk_unique(c))
            marks = [("is", id(x)) for x in parts] + [
                ("==", x.value) for x in parts if isinstance(x, Const)]
            for v in parts:
                if isinstance(v, Var):
                    out.update((id(v), m) for m in marks)
    memo[id(guard)] = (guard, frozenset(out))
    return memo[id(guard)][1]


def _guarded(related, var, size):
    """Whether the guards' relations (see _relations) relate `var` to `size` (the size
    itself, or the number of a fixed size)."""
    return (id(var), ("==", size) if isinstance(size, int) else ("is", id(size))) in related
