"""Arithmetic simplification of the loop IR under the ranges of enclosing loops.

Integer affine expressions are put in a canonical sum-of-terms form; `//` and `%` by
constants are removed when the ranges allow it (split and fuse index arithmetic); guards
and selects whose condition is decided by the ranges disappear; loops of extent one
become their body.
"""
from __future__ import annotations

from dataclasses import replace

from jitdl import dtypes
from jitdl.ir.analysis import (affine, bounds, is_linear, is_memoised, linear, memoised,
                               with_loop)
from jitdl.ir.nodes import (Allocate, BinOp, Binary, Cast, Compare, Const, CmpOp, For, IfThen,
                            LetStmt, Load, PrimFunc, Select, Seq, SizeVar, Store, Var,
                            ThreadReduce)
from jitdl.ir import build
from jitdl.ir.visit import expr_children, map_expr, map_stmt, substitute, walk_unique


def _rebuild(form):
    """A canonical expression from {Var: coef, 1: const}."""
    terms = sorted(((k, c) for k, c in form.items() if type(k) is not int and c != 0),
                   key=lambda kc: kc[0].name)
    out = None
    for v, c in terms:
        if v.dtype != "int64":          # a narrower variable, widened exactly
            v = Cast(v, "int64")
        t = v if c == 1 else Binary(BinOp.MUL, v, Const(abs(c), "int64"), "int64") if c > 0 \
            else Binary(BinOp.MUL, v, Const(-c, "int64"), "int64")
        if c < 0 and c != -1:
            out = Binary(BinOp.SUB, out, t, "int64") if out is not None else \
                Binary(BinOp.MUL, v, Const(c, "int64"), "int64")
        elif c == -1:
            out = Binary(BinOp.SUB, out, v, "int64") if out is not None else \
                Binary(BinOp.MUL, v, Const(-1, "int64"), "int64")
        else:
            out = t if out is None else Binary(BinOp.ADD, out, t, "int64")
    k = form.get(1, 0)
    if out is None:
        return Const(k, "int64")
    if k > 0:
        out = Binary(BinOp.ADD, out, Const(k, "int64"), "int64")
    elif k < 0:
        out = Binary(BinOp.SUB, out, Const(-k, "int64"), "int64")
    return out


def _join_divmod(n):
    """`(x // d) * d * c + (x % d) * c + rest` -> `x * c + rest` (a fused loop's index
    taken apart and put back together, as a row-major index of a fused pair is), or
    None when n has no such pair."""
    f = affine(n)
    changed = False
    for atom in list(f):
        if not (isinstance(atom, Binary) and atom.op == BinOp.MOD and atom in f):
            continue
        q = replace(atom, op=BinOp.FLOORDIV)
        c = f[atom]
        if isinstance(atom.b, Const) and atom.b.value > 0:
            if c and f.get(q, 0) == c * atom.b.value:
                del f[atom], f[q]
            else:
                continue
        elif isinstance(atom.b, SizeVar):
            # (x // n) * n + x % n with n a dynamic size (>= 0): x where n > 0, and 0
            # where n == 0 (x // 0 and x % 0 are 0): select(n != 0, x, 0), one compare
            # for two divisions (a fused loop's index taken apart and put back)
            qn = next((k for k in f if _is_product(k, q, atom.b)), None)
            if not (c and qn is not None and f[qn] == c):
                continue
            del f[atom], f[qn]
            x = Select(Compare(CmpOp.NE, atom.b, Const(0, "int64")), atom.a,
                       Const(0, "int64"), "int64")
            f[x] = f.get(x, 0) + c
            changed = True
            continue
        else:
            continue
        for k, v in affine(atom.a).items():
            f[k] = f.get(k, 0) + c * v
        changed = True
    if not changed:
        return None
    out = _rebuild({k: c for k, c in f.items() if type(k) is int or isinstance(k, Var)})
    for k, c in f.items():
        if type(k) is not int and not isinstance(k, Var) and c:
            t = k if c == 1 else Binary(BinOp.MUL, k, Const(c, "int64"), "int64")
            out = t if isinstance(out, Const) and out.value == 0 else \
                Binary(BinOp.ADD, out, t, "int64")
    return out


def _is_product(k, q, d):
    """Whether atom k is q * d (either order; d a Var, compared by identity)."""
    return isinstance(k, Binary) and k.op == BinOp.MUL and (
        (k.a == q and k.b is d) or (k.b == q and k.a is d))


_LINKS = (BinOp.ADD, BinOp.SUB, BinOp.MUL)


def _link(n):
    return isinstance(n, Binary) and n.dtype == "int64" and n.op in _LINKS


def _inner_links(e):
    """The nodes of e (by id) that are + - * of int64 whose every parent is such a node
    of an affine form (`linear`): the parent's canonical form (_rebuild of its form) is
    also that of the sum with these rebuilt first, which only adds work. A sum of k
    sizes (a concatenate's offset, a prefix sum of its operands) was rebuilt at each of
    its k nodes, bottom-up: k * k / 2 terms sorted and built (40 vectors: 20000 rebuilds
    of 16 terms on average, most of simplify's time). Only within memoised(), where the
    form of each node is computed once."""
    if not is_memoised():
        return {}
    inner, outer = {}, set()
    for p in walk_unique(e):
        if _link(p) and is_linear(p):
            for c in (p.a, p.b):
                if _link(c):
                    inner[id(c)] = c
        else:
            outer.update(id(c) for c in expr_children(p))
    return {k: c for k, c in inner.items() if k not in outer}


def simplify_expr(e, ranges):
    inner = _inner_links(e)

    def rule(n):
        if isinstance(n, Binary) and n.dtype == "int64":
            hit = inner.get(id(n))
            if hit is n:        # (rebuilt with its parent's form: see _inner_links)
                return None
            # (x * 1 and x + 0 of an x that is no affine form of loop variables, which
            # `linear` below folds: a quotient's row of a dimension of size 1)
            for x, y in ((n.a, n.b), (n.b, n.a)):
                if isinstance(y, Const) and (n.op == BinOp.MUL and y.value == 1 or
                                             n.op == BinOp.ADD and y.value == 0) \
                        and x.dtype == "int64":
                    return x
            if n.op in (BinOp.FLOORDIV, BinOp.MOD) and isinstance(n.b, Const) and n.b.value > 0:
                d = n.b.value
                if d == 1:      # (any x: a split or fuse of an axis of extent 1)
                    return n.a if n.op == BinOp.FLOORDIV else Const(0, "int64")
                f = linear(n.a)
                if f is not None:
                    q = {k: c // d for k, c in f.items() if type(k) is not int and c % d == 0}
                    r = {k: c for k, c in f.items() if type(k) is not int and c % d != 0}
                    const = f.get(1, 0)
                    q[1], r[1] = const // d, const % d
                    lo, hi = bounds(_rebuild(r), ranges)
                    if lo >= 0 and hi < d:
                        return _rebuild(q) if n.op == BinOp.FLOORDIV else _rebuild(r)
                lo, hi = bounds(n.a, ranges)
                if 0 <= lo and hi < d:
                    return n.a if n.op == BinOp.MOD else Const(0, "int64")
            if n.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
                f = linear(n)
                if f is not None:
                    new = _rebuild(f)
                    return new if new != n else None
                if n.op != BinOp.MUL:
                    return _join_divmod(n)
            if n.op in (BinOp.MIN, BinOp.MAX):
                a, b = bounds(n.a, ranges), bounds(n.b, ranges)
                if n.op == BinOp.MIN:
                    if a[1] <= b[0]:
                        return n.a
                    if b[1] <= a[0]:
                        return n.b
                else:
                    if a[0] >= b[1]:
                        return n.a
                    if b[0] >= a[1]:
                        return n.b
        if isinstance(n, Compare) and dtypes.is_int(n.a.dtype):
            lo, hi = bounds(Binary(BinOp.SUB, n.a, n.b, "int64") if n.a.dtype == "int64"
                            else n.a, ranges) if n.a.dtype == "int64" else (None, None)
            if lo is not None:
                decided = _decide(n.op, lo, hi)
                if decided is not None:
                    return Const(decided, "bool")
        if isinstance(n, Binary) and n.dtype == "bool" and n.op in (BinOp.AND, BinOp.OR):
            for x, y in ((n.a, n.b), (n.b, n.a)):
                if isinstance(x, Const):
                    if n.op == BinOp.AND:
                        return y if x.value else x
                    return x if x.value else y
        if isinstance(n, Select) and isinstance(n.cond, Const):
            return n.t if n.cond.value else n.f
        if isinstance(n, Load):
            return _nonempty_index(n, ranges)
        return None
    return map_expr(e, rule, {})       # (rule is pure: shared nodes are simplified once)


def _nonempty_index(load, ranges):
    """A load whose index puts back together a position taken apart by a symbolic size
    n of its own buffer (`select(n != 0, x, 0)`, from _join_divmod) reads at x: where n
    is 0 the buffer is empty and the load never runs (its bounds were proven, or are
    checked first), so the select, which only served n = 0, goes; then the next pair
    joins (k // n2 // n1 * n1 + k // n2 % n1, then * n2 + k % n2: the row-major
    position k of a whole reduction's fused axes, with no division left)."""
    sizes = [d for d in load.buffer.shape if isinstance(d, SizeVar)]
    if not sizes:
        return None

    def drop(x):
        if isinstance(x, Select) and isinstance(x.f, Const) and x.f.value == 0 and \
                isinstance(x.cond, Compare) and x.cond.op == CmpOp.NE and \
                isinstance(x.cond.b, Const) and x.cond.b.value == 0 and \
                any(x.cond.a is d for d in sizes):
            return x.t
        return None
    index = load.index
    for _ in range(len(sizes)):
        # (not inside a load nested in the index, a gather's Y of X[Y[...]]: where n is 0
        # the outer load's index is still computed, before its check fails, and Y's own
        # select of X's size, now Y[x], could read outside Y; Y's own rule drops its own)
        nested = {id(n): n for n in walk_unique(index) if isinstance(n, Load)}
        dropped = map_expr(index, drop, nested)
        if dropped is index:
            break
        index = simplify_expr(dropped, ranges)
    return None if index is load.index else replace(load, index=index)


def _decide(op, lo, hi):
    """Truth of `d op 0` for every d in [lo, hi], or None when it varies."""
    tests = {CmpOp.LT: (hi < 0, lo >= 0), CmpOp.LE: (hi <= 0, lo > 0),
             CmpOp.GT: (lo > 0, hi <= 0), CmpOp.GE: (lo >= 0, hi < 0),
             CmpOp.EQ: (lo == hi == 0, lo > 0 or hi < 0),
             CmpOp.NE: (lo > 0 or hi < 0, lo == hi == 0)}
    always, never = tests[op]
    return True if always else False if never else None


def simplify_stmt(s, ranges):
    match s:
        case For():
            ext = simplify_expr(s.extent, ranges)
            mn = simplify_expr(s.min, ranges)
            if isinstance(ext, Const) and isinstance(mn, Const):
                # (a loop bound to threads stays: its body runs on one thread of the
                # block, not on every thread launched for the kernel's other loops)
                if ext.value == 1 and not s.kind.thread:
                    return simplify_stmt(_subst_stmt(s.body, {s.var: mn}), ranges)
                inner = {**ranges, s.var: (mn.value, mn.value + ext.value - 1)}
            elif isinstance(mn, Const):     # a symbolic extent: a range and a fact
                inner = with_loop(ranges, s.var, mn.value, ext)
            else:
                inner = ranges
            body = simplify_stmt(s.body, inner)
            if body is None or (isinstance(ext, Const) and ext.value <= 0):
                return None
            tight = _tighten(s, body, mn, ext)
            if tight is not None:
                return simplify_stmt(tight, ranges)
            return s if (body is s.body and ext is s.extent and mn is s.min) else \
                replace(s, body=body, extent=ext, min=mn)
        case Store():
            i, v = simplify_expr(s.index, ranges), simplify_expr(s.value, ranges)
            return s if (i is s.index and v is s.value) else replace(s, index=i, value=v)
        case Seq():
            parts = []
            for x in s.stmts:
                y = simplify_stmt(x, ranges)
                if y is None:
                    continue
                parts.extend(y.stmts if isinstance(y, Seq) else [y])
            if not parts:
                return None
            if len(parts) == 1:
                return parts[0]
            return s if len(parts) == len(s.stmts) and all(a is b for a, b in
                                                             zip(parts, s.stmts)) \
                else Seq(tuple(parts))
        case IfThen():
            c = simplify_expr(s.cond, ranges)
            if isinstance(c, Const):
                if c.value:
                    return simplify_stmt(s.then, ranges)
                return None if s.otherwise is None else simplify_stmt(s.otherwise, ranges)
            t = simplify_stmt(s.then, ranges)
            o = None if s.otherwise is None else simplify_stmt(s.otherwise, ranges)
            if t is None and o is None:
                return None
            if t is None:
                return IfThen(build.logical_not(c), o)
            return s if (c is s.cond and t is s.then and o is s.otherwise) else IfThen(c, t, o)
        case Allocate():
            b = simplify_stmt(s.body, ranges)
            if b is None:
                return None
            return s if b is s.body else replace(s, body=b)
        case ThreadReduce():
            return s
        case LetStmt():
            v = simplify_expr(s.value, ranges)
            b = simplify_stmt(s.body, ranges)
            if b is None:
                return None
            return s if (v is s.value and b is s.body) else replace(s, value=v, body=b)
    raise TypeError(f"not a statement: {s!r}")


def _tighten(loop, body, mn, ext):
    """`for v in range(a, a + e): if v + c < n: S` -> `for v in range(a, n - c): S`: the
    tail of a partitioned loop runs only its valid iterations, without a guard."""
    if not (isinstance(body, IfThen) and body.otherwise is None and isinstance(mn, Const)
            and isinstance(ext, Const) and isinstance(body.cond, Compare)
            and body.cond.op == CmpOp.LT and isinstance(body.cond.b, Const)):
        return None
    form = linear(body.cond.a)
    if form is None or form.get(loop.var) != 1 or \
            any(k is not loop.var and type(k) is not int and c for k, c in form.items()):
        return None
    stop = body.cond.b.value - form.get(1, 0)          # v < stop
    new_ext = min(ext.value, stop - mn.value)
    return replace(loop, extent=Const(max(new_ext, 0), "int64"), body=body.then)


def _subst_stmt(s, mapping):
    return map_stmt(s, None, lambda e: substitute(e, mapping))


def simplify(func: PrimFunc) -> PrimFunc:
    with memoised():
        body = simplify_stmt(func.body, {})
    if body is None:
        body = Seq(())
    return func if body is func.body else replace(func, body=body)

