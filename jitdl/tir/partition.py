"""Loop partitioning: split a loop at the point where the guards of a non-dividing split
stop being always true, so the main part runs without them (simplify then drops them)
and only the tail keeps the checks.

    for jo in range(33):            for jo in range(32):
      for ji in range(32):     ->     for ji in range(32): body
        if ji + jo*32 < 1025:       for jo in range(32, 33):
          body                        for ji in range(32): if ji + jo*32 < 1025: body
"""
from __future__ import annotations

import math
from dataclasses import replace

from jitdl.ir.analysis import linear
from jitdl.ir.nodes import (Allocate, CmpOp, Compare, Const, For, IfThen, LetStmt, PrimFunc,
                            Seq, Store)
from jitdl.ir.visit import walk_stmt


def _loop_ranges(s):
    """Ranges of every constant-bounded loop inside s."""
    out = {}
    for st in walk_stmt(s):
        if isinstance(st, For) and isinstance(st.min, Const) and isinstance(st.extent, Const):
            out[st.var] = (st.min.value, st.min.value + st.extent.value - 1)
    return out


def _split_point(loop, ranges):
    """The smallest value of loop.var from which some guard `lin < n` inside may fail."""
    inner = {**ranges, **_loop_ranges(loop.body)}
    point = None
    for st in walk_stmt(loop.body):
        if not (isinstance(st, IfThen) and isinstance(st.cond, Compare)
                and st.cond.op == CmpOp.LT and isinstance(st.cond.b, Const)):
            continue
        form = linear(st.cond.a)
        if form is None or form.get(loop.var, 0) <= 0:
            continue
        a = form[loop.var]
        rest_max = form.get(1, 0)
        ok = True
        for k, c in form.items():
            if k == 1 or k is loop.var:
                continue
            if k not in inner:
                ok = False
                break
            lo, hi = inner[k]
            rest_max += max(c * lo, c * hi)
        if not ok:
            continue
        # a*v + rest < n for all inner values  <=>  v <= (n - 1 - rest_max) / a
        limit = math.floor((st.cond.b.value - 1 - rest_max) / a) + 1
        point = limit if point is None else min(point, limit)
    return point


def partition_stmt(s, ranges):
    match s:
        case For() if isinstance(s.min, Const) and isinstance(s.extent, Const):
            lo, ext = s.min.value, s.extent.value
            p = _split_point(s, ranges)
            if p is not None and lo < p < lo + ext:
                main = replace(s, extent=Const(p - lo, "int64"))
                tail = replace(s, min=Const(p, "int64"), extent=Const(lo + ext - p, "int64"))
                return Seq((partition_stmt(main, ranges), partition_stmt(tail, ranges)))
            inner = {**ranges, s.var: (lo, lo + ext - 1)}
            body = partition_stmt(s.body, inner)
            return s if body is s.body else replace(s, body=body)
        case For() | Allocate() | LetStmt():
            body = partition_stmt(s.body, ranges)
            return s if body is s.body else replace(s, body=body)
        case Seq():
            parts = tuple(partition_stmt(x, ranges) for x in s.stmts)
            return s if all(a is b for a, b in zip(parts, s.stmts)) else Seq(parts)
        case IfThen():
            t = partition_stmt(s.then, ranges)
            o = None if s.otherwise is None else partition_stmt(s.otherwise, ranges)
            return s if (t is s.then and o is s.otherwise) else IfThen(s.cond, t, o)
        case Store():
            return s
    return s


def partition_loops(func: PrimFunc) -> PrimFunc:
    body = partition_stmt(func.body, {})
    return func if body is func.body else replace(func, body=body)
