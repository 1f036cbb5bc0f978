"""Loop partitioning: split a loop at the point where the guards of a non-dividing split
stop being always true, so the main part runs without them (simplify then drops them)
and only the tail keeps the checks. With a symbolic bound (`jo*4 + ji < n`, n a size
known at the call) the split point is an expression, the main part loses the guards
here and the tail runs as scalar, serial loops; a tail with at most one iteration that
does anything (a split by its factor) is a guarded block, and one with none is dropped.

A parallel loop whose work is symbolic is also partitioned at run time: it runs serially
when its iterations (with those of the loops inside) are fewer than the target's
parallel grain (a small call does not pay for waking the thread team).

    for jo in range(33):            for jo in range(32):
      for ji in range(32):     ->     for ji in range(32): body
        if ji + jo*32 < 1025:       for jo in range(32, 33):
          body                        for ji in range(32): if ji + jo*32 < 1025: body
"""
from __future__ import annotations

import math
from dataclasses import replace

from jitdl import dtypes
from jitdl.ir import build
from jitdl.ir.analysis import SIZE_LIMIT, affine, bounds, free_vars, linear, reads_memory
from jitdl.ir.nodes import (Allocate, BinOp, Binary, Cast, CmpOp, Compare, Const, Expr, For,
                            ForKind, IfThen, LetStmt, Load, PrimFunc, Select, Seq, Store, Var)
from jitdl.ir.visit import map_expr, map_stmt, stmt_exprs, walk_expr, walk_stmt, walk_unique


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


def _bound_inside(s):
    """Variables that loops and lets inside s bind."""
    return {st.var for st in walk_stmt(s) if isinstance(st, (For, LetStmt))}


def _linear_bound(cond, var, inner, local):
    """(a, n, rest_min, rest_max) of a condition `a*var + rest < n` (a > 0), rest over
    the loops inside (their ranges in `inner`), n over sizes and variables bound outside
    (terms of rest in those move to n: in `ji + jo*256 < n` inside loop jo, n - jo*256);
    None for another condition."""
    n = cond.b
    if any(isinstance(v, Var) and v in local for v in walk_expr(n)):
        return None
    if not dtypes.is_int(cond.a.dtype):
        return None
    form = affine(cond.a)       # (a term like `kf * ceil(n / 4)` of outer values moves to n)
    if form.get(var, 0) <= 0 or any(
            k != 1 and k is not var and (k in local and k not in inner or not isinstance(k, Var)
                                         and (not local.isdisjoint(free_vars(k))
                                              or reads_memory(k)))
            for k in form):
        return None
    for k, c in form.items():
        if k != 1 and k is not var and k not in local:
            n = n - k * c if c != 1 else n - k
    terms = [(c * inner[k][0], c * inner[k][1]) for k, c in form.items()
             if k != 1 and k is not var and k in local]
    return (form[var], n, form.get(1, 0) + sum(min(t) for t in terms),
            form.get(1, 0) + sum(max(t) for t in terms))


def _symbolic_split(loop, ranges):
    """(split point expression, the guards it makes true below it, the iterations from
    the point on that can do anything) for a loop whose guards `a*v + rest < n` have a
    bound n over sizes (no loop variables), or None. Terms of rest in variables bound
    outside the loop (an enclosing loop's, a size) count as part of the bound: in
    `ji + jo*256 < n` inside loop jo, ji splits at n - jo*256. The count is None when
    unknown (see _tail_reach)."""
    inner = {**ranges, **_loop_ranges(loop.body)}
    local = _bound_inside(loop.body) | {loop.var}
    point, guards, spans, stop = None, [], set(), None
    for st in walk_stmt(loop.body):
        if not (isinstance(st, IfThen) and isinstance(st.cond, Compare)
                and st.cond.op == CmpOp.LT and not isinstance(st.cond.b, Const)):
            continue
        found = _linear_bound(st.cond, loop.var, inner, local)
        if found is None:
            continue
        a, n, rest_min, rest_max = found
        # a*v + rest < n for all inner values  <=>  v < (n - 1 - rest_max) // a + 1
        c = a - 1 - rest_max
        p = n + c if c else n
        p = p // a if a > 1 else p
        point = p if point is None else build.binary(BinOp.MIN, point, p)
        guards.append(st.cond)
        spans.add((a, rest_max - rest_min))
        if isinstance(rest_min, int) and _only_guarded(loop.body, [st.cond]):
            # everything the body does is under this guard, which fails for every inner
            # value from v = ceil((n - rest_min) / a) on: no iteration past that does
            # anything (a split of a split's outer loop: the tail's ji runs to f, each
            # iteration under the guard `ji + jo*f < ceil(n / 4)`, 2**31 of them a row)
            c = a - 1 - rest_min
            q = n + c if c else n
            q = q // a if a > 1 else q
            stop = q if stop is None else build.binary(BinOp.MIN, stop, q)
    if point is None:
        return None
    return point, guards, _tail_reach(loop.body, guards, spans), stop


def _tail_reach(body, guards, spans):
    """How many iterations from a symbolic split's point on can do anything: every
    store of the body under one guard `a*v + rest < n` (several IfThens of one condition)
    with rest spanning w values: from the point p = (n - 1 - rest_max) // a + 1 on, the
    guard fails for every inner value once a*v + rest_min >= n, i.e. from v = p +
    ceil(w / a) on (for a split by 4 of `ji + jo*4 < n`: at most one iteration; for
    `f*c + jo < n`: none). None when the body does something else (or has several
    guards), or when that is more than one iteration."""
    if len(spans) != 1 or any(g != guards[0] for g in guards):
        return None
    (a, width), = spans
    reach = -(-width // a)
    return reach if reach <= 1 and _only_guarded(body, guards) else None


def _only_guarded(s, guards):
    """Whether s does nothing outside the IfThens on `guards`: its stores (and anything
    else with an effect, such as a checked read) are all inside them."""
    match s:
        case IfThen() if s.otherwise is None and any(s.cond is g for g in guards):
            return True
        case For():
            return not _checked(s.min) and not _checked(s.extent) and \
                _only_guarded(s.body, guards)
        case Seq():
            return all(_only_guarded(x, guards) for x in s.stmts)
        case Allocate():
            return _only_guarded(s.body, guards)
        case LetStmt():
            return not _checked(s.value) and _only_guarded(s.body, guards)
        case IfThen():
            return not _checked(s.cond) and _only_guarded(s.then, guards) and (
                s.otherwise is None or _only_guarded(s.otherwise, guards))
    return False


def _checked(e):
    return any(isinstance(x, Load) and x.check is not None for x in walk_expr(e))


# splits of one loop at selects, nested (concatenate of three: two; reflect padding nests
# selects deeper, and each split multiplies the loops its partitions make)
_SELECT_SPLITS = 2


def _reads(e):
    """e is an element of an array (cast or not), or a choice among such elements (nested
    selects)."""
    return isinstance(e, Load) or isinstance(e, Cast) and _reads(e.value) or \
        isinstance(e, Select) and _reads(e.t) and _reads(e.f)


def _choices(e, lanes):
    """The selects of e that choose which element to read: between elements of arrays
    (concatenate's `j < n1 ? A[j] : B[j - n1]`), or between indices of one read whose
    condition varies between vector lanes (pad's `X[j < 0 ? -j : j]`: split off, the bulk
    loads contiguous lanes where the select makes a gather; one that only varies per row
    is a scalar select), outer ones first."""
    for x in walk_unique(e):
        if isinstance(x, Select) and _reads(x.t) and _reads(x.f):
            yield x
        elif isinstance(x, Load) and lanes:
            yield from (y for y in walk_unique(x.index) if isinstance(y, Select)
                        and dtypes.is_int(y.dtype) and not reads_memory(y)
                        and any(v in lanes for v in walk_unique(y.cond)))


def _select_split(loop, ranges, own=False, varying=False):
    """(cond, p, q) for a select `a*v + rest < n ? .. : ..` choosing what to read (see
    _choices) on serial loop v (see _linear_bound): the condition holds for every inner
    value where v < p and for none where v >= q, or None."""
    inner = {**ranges, **_loop_ranges(loop.body)}
    local = _bound_inside(loop.body) | {loop.var}
    lanes = {st.var for st in walk_stmt(loop.body)
             if isinstance(st, For) and st.kind == ForKind.VECTORIZED}
    if own:         # (an innermost loop of a chunk, which LLVM's vectoriser takes)
        lanes.add(loop.var)
    for st in walk_stmt(loop.body):
        for e in stmt_exprs(st):
            for x in _choices(e, lanes):
                if not (isinstance(x.cond, Compare) and x.cond.op == CmpOp.LT) or \
                        varying and not any(v in lanes for v in walk_expr(x.cond)):
                    continue
                found = _linear_bound(x.cond, loop.var, inner, local)
                if found is None:
                    continue
                a, n, rest_min, rest_max = found
                # holds for all inner values: v <= (n - 1 - rest_max) / a; for none:
                # a*v + rest_min >= n
                p = build.binary(BinOp.FLOORDIV, n + (a - 1 - rest_max), Const(a, "int64")) \
                    if a > 1 else n + (-rest_max) if rest_max else n
                q = build.binary(BinOp.FLOORDIV, n + (a - 1 - rest_min), Const(a, "int64")) \
                    if a > 1 else n + (-rest_min) if rest_min else n
                return x.cond, p, q
    return None


def _choose(s, cond, value):
    """s with every select on `cond` (the copies of a nested chain too) replaced by its
    arm for `value`."""
    def pick(e):
        if isinstance(e, Select) and e.cond == cond:
            return e.t if value else e.f
        return None
    return map_stmt(s, lambda st: None, lambda e: map_expr(e, pick))


def _partition_select(s, ranges, budget, own=False):
    """A serial loop holding a select on its variable (see _select_split), split where the
    condition stops being true for a whole iteration and where it becomes false for
    one: each part reads one arm without the select (a vector loop inside no longer
    loads both arms under masks); the iterations between keep it. `own`: the loop is
    the innermost one of a chunk (_chunked), whose own variable counts as lanes."""
    found = _select_split(s, ranges, own)
    if found is None:
        return None
    cond, p, q = found
    lo = s.min
    end = s.extent if isinstance(lo, Const) and lo.value == 0 else \
        build.binary(BinOp.ADD, lo, s.extent)
    # the split points are named (lets): the parts' own partitions then nest small
    # expressions, where inlined ones grew to pages and took seconds to compile
    pv, qv = Var(f"{s.var.name}_sel", "int64"), Var(f"{s.var.name}_nosel", "int64")
    parts = (replace(s, extent=pv - lo, body=_choose(s.body, cond, True)),
             replace(s, min=pv, extent=qv - pv),
             replace(s, min=qv, extent=end - qv, body=_choose(s.body, cond, False)))

    def rest(x, left):
        done = _partition_select(x, ranges, left, own) if own and left else None
        return done if done is not None else partition_stmt(x, ranges, left)
    body = Seq(tuple(rest(x, 0 if x is parts[1] else budget - 1) for x in parts))
    p = build.binary(BinOp.MIN, build.binary(BinOp.MAX, p, lo), end)
    q = build.binary(BinOp.MIN, build.binary(BinOp.MAX, q, pv), end)
    return LetStmt(pv, p, LetStmt(qv, q, body))


def _drop_guards(s, guards):
    def rule(st):
        if isinstance(st, IfThen) and st.otherwise is None and \
                any(st.cond is g for g in guards):
            return st.then
        return None
    return map_stmt(s, rule)


def _scalar(s):
    """s with its vectorised and parallel loops run as plain serial loops (a tail)."""
    def rule(st):
        if isinstance(st, For) and st.kind in (ForKind.VECTORIZED, ForKind.PARALLEL):
            return replace(st, kind=ForKind.SERIAL)
        return None
    return map_stmt(s, rule)


def _size_ranges(e, ranges):
    return {**{v: (0, SIZE_LIMIT - 1) for v in walk_expr(e) if isinstance(v, Var)}, **ranges}


def _partition_symbolic(s, ranges, selects=_SELECT_SPLITS):
    """A loop with a symbolic extent or bound: guard-free main part and scalar tail."""
    found = _symbolic_split(s, ranges)
    if found is None:
        return None
    point, guards, reach, stop = found
    lo, end = s.min, build.binary(BinOp.ADD, s.min, s.extent) \
        if not (isinstance(s.min, Const) and s.min.value == 0) else s.extent
    sr = _size_ranges(point, ranges)
    if bounds(point - lo, sr)[0] < 0:
        point = build.binary(BinOp.MAX, point, lo)
    if not _at_most(point, end):
        point = build.binary(BinOp.MIN, point, end)
    main = replace(s, extent=point - lo if not (isinstance(lo, Const) and lo.value == 0)
                   else point, body=_drop_guards(s.body, guards))
    main = partition_stmt(main, ranges, selects)
    if reach == 0:
        return main
    # the tail's own loops are partitioned too, at the tail's iteration: the inner loop of
    # a split by f runs to n - jo*f, not f times under a guard (a split of a dynamic
    # extent by 2**31 ran 2**31 guarded iterations a row)
    body = partition_stmt(_scalar(s.body), ranges, selects)
    if reach == 1:
        # (a loop that runs at most once is a guarded block: LLVM cannot see that such a
        # tail runs at most once, and unrolled and unswitched it into pages of code)
        tail = IfThen(Compare(CmpOp.LT, point, end), LetStmt(s.var, point, body))
    else:
        if stop is not None:        # (the iterations past `stop` do nothing)
            end = build.binary(BinOp.MIN, end, build.binary(BinOp.MAX, stop, point))
        tail = _scalar(replace(s, min=point, extent=end - point, body=body))
    return Seq((main, tail))


def _at_most(p, q):
    """p <= q for every size: p = (e + c) // d and q = (e + c') // d with c <= c' (the
    main part of a split by d and the split's outer extent)."""
    if not (isinstance(p, Binary) and isinstance(q, Binary) and p.op == q.op == BinOp.FLOORDIV
            and isinstance(p.b, Const) and isinstance(q.b, Const) and p.b.value == q.b.value
            and p.b.value > 0):
        return False
    diff = dict(linear(p.a) or {"x": 1})
    for k, c in (linear(q.a) or {"y": 1}).items():
        diff[k] = diff.get(k, 0) - c
    return all(c == 0 for k, c in diff.items() if k != 1) and diff.get(1, 0) <= 0


def _iterations(s, var):
    """The iterations of the loops in s (an Expr or int); None when an extent reads var."""
    match s:
        case For():
            if any(v is var for v in walk_expr(s.extent)):
                return None
            n = _iterations(s.body, var)
            return None if n is None else s.extent * n if not isinstance(n, int) or n != 1 \
                else s.extent
        case Seq():
            total = 0
            for x in s.stmts:
                n = _iterations(x, var)
                if n is None:
                    return None
                total = n if isinstance(total, int) and total == 0 else total + n
            return total
        case IfThen():
            return _iterations(s.then, var)
        case Allocate() | LetStmt():
            return _iterations(s.body, var)
    return 1


def _serial_when_small(s, min_work):
    """A parallel loop with symbolic work: `if work >= min_work` parallel, else serial."""
    def rule(st):
        if not (isinstance(st, For) and st.kind == ForKind.PARALLEL):
            return None
        work = _iterations(st, st.var)
        if work is None or not isinstance(work, Expr) or isinstance(work, Const):
            return st
        return IfThen(work >= min_work, st, replace(st, kind=ForKind.SERIAL))
    return map_stmt(s, rule)


def _long_inside(s):
    """A loop of symbolic extent runs inside s (its iterations are long)."""
    return any(isinstance(x, For) and not isinstance(x.extent, Const)
               for x in walk_stmt(s.body))


def _symbolic_guard(s):
    return any(isinstance(x, IfThen) and isinstance(x.cond, Compare)
               and not isinstance(x.cond.b, Const) for x in walk_stmt(s))


def _scalar_guarded(s):
    """s with the vectorised loops that still hold a symbolic guard run serially."""
    def rule(st):
        if isinstance(st, For) and st.kind == ForKind.VECTORIZED and _symbolic_guard(st.body):
            return replace(st, kind=ForKind.SERIAL)
        return None
    return map_stmt(s, rule)


def _serial_twin(par, ser):
    """Whether `ser` (the serial branch of _serial_when_small, partitioned) is `par` (the
    parallel one, partitioned) run serially but for the identity of the variables that
    partitioning named: each select split makes fresh lets. The serial branch is then
    made of the parallel one's own nodes, so that code generation sees one loop and
    compiles one copy of it for both paths. (Same text is the same program: the loop IR's
    text is also what the kernel cache keys on.)"""
    return isinstance(par, For) and isinstance(ser, For) and par.kind == ForKind.PARALLEL \
        and ser.kind == ForKind.SERIAL and str(ser) == str(replace(par, kind=ForKind.SERIAL))


_FEW_PARALLEL = 64


# iterations per chunk of a parallel loop of vectors split at selects (of a loop of
# elements, 16 times as many)
_CHUNK = 256
# the widest vector loop (lanes) that a parallel loop is chunked around: a wider one is a
# whole row per iteration (a static 2-d pad: `vectorized idx1 in range(20000)`), where
# chunks of 256 rows left 200 rows one chunk, run on one thread
_CHUNK_LANES = 64


def _chunked(s, size):
    """Loop s (parallel around a loop of vector lanes, or parallel or vectorized around
    elements) as chunks of `size` iterations (in parallel where s is), each a serial loop
    that partitioning can split at its selects: a parallel loop is not split (its parts
    would each wake the thread team), and a vectorized one that reads each arm under a
    mask becomes plain loops that LLVM vectorises."""
    c, k = Var(f"{s.var.name}_c", "int64"), Const(size, "int64")
    start = build.binary(BinOp.MUL, c, k)
    inner = replace(s, kind=ForKind.SERIAL, min=s.min + start if not (
        isinstance(s.min, Const) and s.min.value == 0) else start,
        extent=build.binary(BinOp.MIN, k, s.extent - start))
    count = build.binary(BinOp.FLOORDIV, s.extent + (size - 1), k)
    kind = ForKind.PARALLEL if s.kind == ForKind.PARALLEL else ForKind.SERIAL
    return For(c, Const(0, "int64"), count, kind, inner)


def _split_at_selects(s, ranges, selects):
    """Loop s split where a choice of what to read changes (_partition_select), or run in
    chunks that are (_chunked); None where neither applies. A loop that also has a
    guarded tail loses the tail first (_partition_symbolic): its main part is then split,
    and only the scalar tail keeps both."""
    if s.kind == ForKind.SERIAL:
        lanes = own = False
    elif s.kind in (ForKind.PARALLEL, ForKind.VECTORIZED):
        lanes = s.kind == ForKind.PARALLEL and isinstance(s.body, For) and \
            s.body.kind == ForKind.VECTORIZED and isinstance(s.body.extent, Const) and \
            s.body.extent.value <= _CHUNK_LANES
        # (a loop of elements: not a loop of a vector's lanes)
        own = not any(isinstance(x, For) for x in walk_stmt(s.body)) and not (
            isinstance(s.extent, Const) and s.extent.value <= _CHUNK_LANES)
        if not (lanes or own):
            return None
    else:
        return None
    if not isinstance(s.extent, Const) and _symbolic_split(s, ranges) is not None:
        return None
    if s.kind == ForKind.SERIAL:
        return _partition_select(s, ranges, selects)
    # (only a choice that varies between lanes: one per row of a parallel loop over rows
    # is a branch per row, and chunks of rows would idle threads)
    if _select_split(s, ranges, own, varying=True) is None:
        return None
    chunks = _chunked(s, _CHUNK if lanes else 16 * _CHUNK)
    done = _partition_select(chunks.body, ranges, selects, own)
    return replace(chunks, body=done if done is not None else
                   partition_stmt(chunks.body, ranges, selects))


def _fills_shared(s):
    """Whether loop s only stores into shared buffers (a GPU block's copy) and has a
    guard of a symbolic size inside."""
    stores = [x for x in walk_stmt(s.body) if isinstance(x, Store)]
    return bool(stores) and all(x.buffer.scope == "shared" for x in stores) \
        and _symbolic_guard(s.body)


def partition_stmt(s, ranges, selects=_SELECT_SPLITS):
    if selects and isinstance(s, For):
        done = _split_at_selects(s, ranges, selects)
        if done is not None:
            return done
    match s:
        case For() if s.kind.bound or any(isinstance(x, For) and x.kind.bound
                                          for x in walk_stmt(s.body)):
            # a GPU grid: a guard costs a thread one compare, a second part costs a
            # second kernel launch; the serial loops inside are partitioned as usual
            inner = {**ranges, s.var: (s.min.value, s.min.value + s.extent.value - 1)} \
                if isinstance(s.min, Const) and isinstance(s.extent, Const) else ranges
            body = partition_stmt(s.body, inner)
            return s if body is s.body else replace(s, body=body)
        case For() if isinstance(s.extent, Const) and _fills_shared(s):
            # a GPU block's copy under guards of symbolic sizes keeps its constant loops:
            # the threads share them out and prefetch the next step's (a loop to
            # min(n - i_o*16, 16) ran whole on every thread, and was not prefetched)
            return s
        case For() if not isinstance(s.extent, Const) or _symbolic_guard(s.body):
            if s.kind == ForKind.PARALLEL and _long_inside(s):
                # a tail of whole rows would run on one thread after the others: each
                # thread's iterations are partitioned inside instead (ji + jo*256 < n
                # splits ji at n - jo*256)
                body = _scalar_guarded(partition_stmt(s.body, ranges))
                return s if body is s.body else replace(s, body=body)
            done = _partition_symbolic(s, ranges, selects) \
                if s.kind != ForKind.VECTORIZED else None
            if done is not None:
                return done
            if isinstance(s.min, Const) and isinstance(s.extent, Const):
                inner = {**ranges, s.var: (s.min.value, s.min.value + s.extent.value - 1)}
            else:
                inner = ranges
            body = partition_stmt(s.body, inner)
            return s if body is s.body else replace(s, body=body)
        case For() if isinstance(s.min, Const) and isinstance(s.extent, Const):
            lo, ext = s.min.value, s.extent.value
            p = _split_point(s, ranges)
            # (a parallel loop of few iterations, such as the parts of a reduction, is
            # partitioned inside: split, its last part would run alone after the others;
            # not one around register tiles, whose unrolled loops a guard would split)
            if p is not None and lo < p < lo + ext and not (
                    s.kind == ForKind.PARALLEL and ext <= _FEW_PARALLEL and not any(
                        isinstance(x, For) and x.kind == ForKind.UNROLLED
                        for x in walk_stmt(s.body))):
                main = replace(s, extent=Const(p - lo, "int64"))
                tail = replace(s, min=Const(p, "int64"), extent=Const(lo + ext - p, "int64"))
                return Seq((partition_stmt(main, ranges, selects),
                            partition_stmt(tail, ranges, selects)))
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
            if isinstance(t, For) and t.kind == ForKind.PARALLEL and \
                    _serial_twin(s.then, s.otherwise):
                # (the parallel loop run serially, even where it was split in chunks
                # (_chunked) that the serial loop would not need: one copy of the body)
                o = replace(t, kind=ForKind.SERIAL)
            else:
                o = None if s.otherwise is None else partition_stmt(s.otherwise, ranges)
                if _serial_twin(t, o):
                    o = replace(t, kind=ForKind.SERIAL)
            return s if (t is s.then and o is s.otherwise) else IfThen(s.cond, t, o)
        case Store():
            return s
    return s


def partition_loops(func: PrimFunc, min_work=None) -> PrimFunc:
    """Partitioned loops; with min_work (the target's parallel grain), parallel loops of
    symbolic work also decide at run time whether to run in parallel."""
    body = func.body if min_work is None else _serial_when_small(func.body, min_work)
    body = partition_stmt(body, {})
    return func if body is func.body else replace(func, body=body)
