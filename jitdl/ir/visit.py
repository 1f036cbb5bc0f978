"""Generic traversal and rewriting of IR nodes (children, walk, substitute, post-order map)."""
from __future__ import annotations

import math
from dataclasses import fields, replace

from jitdl.ir.nodes import (Access, Allocate, Binary, Call, Cast, Compare, Const, Expr, For,
                            IfThen, LetStmt, Load, Reduce, Select, Seq, Store, Unary, Var,
                            ThreadReduce)


def expr_children(e):
    match e:
        case Binary() | Compare():
            return (e.a, e.b)
        case Unary():
            return (e.a,)
        case Call():
            return e.args
        case Select():
            return (e.cond, e.t, e.f)
        case Cast():
            return (e.value,)
        case Access():
            return e.indices + tuple(c[0] for c in e.carried)
        case Reduce():
            return (e.body,) if e.where is None else (e.body, e.where)
        case Load():          # the index, and the indices a run-time check tests
            return (e.index,) + tuple(c[0] for c in e.check or ())
    return ()


def walk_expr(e):
    """Pre-order iteration over e and all its sub-expressions."""
    stack = [e]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(expr_children(n)))


def same_zeros(t, f):
    """Whether structurally equal t and f also agree on the signs of their float
    constants (Const(-0.0) == Const(0.0): select(c, -0.0, 0.0) is not -0.0). The two are
    walked side by side, a pair of nodes once, and one object on both sides not at all:
    a DAG's shared nodes are not walked once per path to them."""
    stack, seen = [(t, f)], set()
    while stack:
        a, b = stack.pop()
        if a is b or (id(a), id(b)) in seen:
            continue
        seen.add((id(a), id(b)))
        if isinstance(a, Const) or isinstance(b, Const):
            fa, fb = isinstance(a, Const) and isinstance(a.value, float), \
                isinstance(b, Const) and isinstance(b.value, float)
            if fa != fb or fa and math.copysign(1.0, a.value) != math.copysign(1.0, b.value):
                return False
            continue
        ca, cb = expr_children(a), expr_children(b)
        if len(ca) != len(cb):
            return False
        stack.extend(zip(ca, cb))
    return True


_COMPARED = {}      # node class -> the names of the fields its __eq__ compares


def structural_hash(e, cache):
    """A hash of e consistent with NodeKey's equality, computed once per node object
    (cache: id -> (node, hash), which keeps the node alive). A node's own __hash__ walks
    its whole subtree every time: asked at each level of a deep expression, that is
    quadratic in its depth."""
    hit = cache.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    if isinstance(e, Const):
        h = hash((e, isinstance(e.value, float) and math.copysign(1.0, e.value)))
    elif isinstance(e, Var):
        h = hash(e)
    else:
        names = _COMPARED.get(type(e))
        if names is None:
            names = _COMPARED[type(e)] = tuple(f.name for f in fields(e) if f.compare)
        parts = [type(e)]
        for name in names:
            v = getattr(e, name)
            if isinstance(v, Expr):
                v = structural_hash(v, cache)
            elif type(v) is tuple and all(isinstance(a, Expr) for a in v):     # Call.args
                v = tuple(structural_hash(a, cache) for a in v)
            parts.append(v)
        h = hash(tuple(parts))
    cache[id(e)] = (e, h)
    return h


class NodeKey:
    """An expression as a dict key: structurally equal with the same signs of float zeros
    (see same_zeros), hashed by structural_hash."""
    __slots__ = ("e", "h")

    def __init__(self, e, cache):
        self.e, self.h = e, structural_hash(e, cache)

    def __hash__(self):
        return self.h

    def __eq__(self, other):
        return self.e is other.e or (self.e == other.e and same_zeros(self.e, other.e))


def walk_unique(e):
    """Pre-order iteration over the distinct nodes of e: a subexpression that is one object
    used at several places (`v * v`) is visited once, so a DAG is walked in its own size,
    not its tree's (which doubles with every `v = v * v`)."""
    stack, seen = [e], set()
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        stack.extend(reversed(expr_children(n)))


def map_expr(e, fn, memo=None):
    """Rebuild e bottom-up, calling fn on each rebuilt node; fn returns a replacement or None.
    Returns the same object when nothing changed. With `memo` (a dict, by id of the nodes
    of e, which stay alive meanwhile) a node shared by several parents is rebuilt once and
    stays shared: a DAG is walked in its own size, not its tree's."""
    if memo is not None and id(e) in memo:
        return memo[id(e)]
    match e:
        case Binary() | Compare():
            a, b = map_expr(e.a, fn, memo), map_expr(e.b, fn, memo)
            n = e if (a is e.a and b is e.b) else replace(e, a=a, b=b)
        case Unary():
            a = map_expr(e.a, fn, memo)
            n = e if a is e.a else replace(e, a=a)
        case Call():
            args = tuple(map_expr(x, fn, memo) for x in e.args)
            n = e if all(x is y for x, y in zip(args, e.args)) else replace(e, args=args)
        case Select():
            c, t = map_expr(e.cond, fn, memo), map_expr(e.t, fn, memo)
            f = map_expr(e.f, fn, memo)
            n = e if (c is e.cond and t is e.t and f is e.f) else replace(e, cond=c, t=t, f=f)
        case Cast():
            v = map_expr(e.value, fn, memo)
            n = e if v is e.value else replace(e, value=v)
        case Access():
            idx = tuple(map_expr(x, fn, memo) for x in e.indices)
            carried = tuple((map_expr(c[0], fn, memo),) + tuple(c[1:]) for c in e.carried)
            same = all(x is y for x, y in zip(idx, e.indices)) and \
                all(x[0] is y[0] for x, y in zip(carried, e.carried))
            n = e if same else replace(e, indices=idx, carried=carried)
        case Reduce():
            b = map_expr(e.body, fn, memo)
            w = None if e.where is None else map_expr(e.where, fn, memo)
            n = e if (b is e.body and w is e.where) else replace(e, body=b, where=w)
        case Load():
            i = map_expr(e.index, fn, memo)
            check = e.check and tuple((map_expr(c[0], fn, memo),) + tuple(c[1:])
                                      for c in e.check)
            same = i is e.index and all(x[0] is y[0] for x, y in zip(check or (), e.check or ()))
            n = e if same else replace(e, index=i, check=check)
        case _:
            n = e
    r = fn(n)
    r = n if r is None else r
    if memo is not None:
        memo[id(e)] = r
    return r


def substitute(e, mapping):
    """Replace Vars by expressions (a node shared by several parents is rebuilt once)."""
    if not mapping:
        return e
    return map_expr(e, lambda n: mapping.get(n) if isinstance(n, Var) else None, {})


def map_stmt(s, fs, fe=None):
    """Rebuild statement s bottom-up: fe maps expressions, fs maps rebuilt statements."""
    ex = (lambda e: e) if fe is None else fe
    match s:
        case For():
            body = map_stmt(s.body, fs, fe)
            mn, ext = ex(s.min), ex(s.extent)
            n = s if (body is s.body and mn is s.min and ext is s.extent) else \
                replace(s, body=body, min=mn, extent=ext)
        case Store():
            i, v = ex(s.index), ex(s.value)
            n = s if (i is s.index and v is s.value) else replace(s, index=i, value=v)
        case Seq():
            parts = tuple(map_stmt(x, fs, fe) for x in s.stmts)
            n = s if all(x is y for x, y in zip(parts, s.stmts)) else Seq(parts)
        case IfThen():
            c = ex(s.cond)
            t = map_stmt(s.then, fs, fe)
            o = None if s.otherwise is None else map_stmt(s.otherwise, fs, fe)
            n = s if (c is s.cond and t is s.then and o is s.otherwise) else IfThen(c, t, o)
        case Allocate():
            b = map_stmt(s.body, fs, fe)
            n = s if b is s.body else replace(s, body=b)
        case LetStmt():
            v, b = ex(s.value), map_stmt(s.body, fs, fe)
            n = s if (v is s.value and b is s.body) else replace(s, value=v, body=b)
        case ThreadReduce():
            n = s
        case _:
            raise TypeError(f"not a statement: {s!r}")
    r = fs(n) if fs is not None else None
    return n if r is None else r


def walk_stmt(s):
    yield s
    match s:
        case For() | Allocate() | LetStmt():
            yield from walk_stmt(s.body)
        case Seq():
            for x in s.stmts:
                yield from walk_stmt(x)
        case IfThen():
            yield from walk_stmt(s.then)
            if s.otherwise is not None:
                yield from walk_stmt(s.otherwise)


def stmt_exprs(s):
    match s:
        case For():
            return (s.min, s.extent)
        case Store():
            return (s.index, s.value)
        case IfThen():
            return (s.cond,)
        case LetStmt():
            return (s.value,)
    return ()

