"""Index notation: the ranges of a statement's indices, inferred from its accesses.

An index's range is the largest one starting at 0 for which every access of the
statement stays inside its tensor (Tensor Comprehensions' rule): accesses under a select
branch, a `where=` or a generator `if` count as much as the others. An access bounds index
i where one of its dimensions is `c*i + e`, or `(c*i + e) // d` with d > 0, c a non-zero
constant and e built from constants and indices whose ranges are known: reduction
variables with explicit ranges, and statement indices inferred in an earlier round. Other
accesses (`X[i + j]` with both unknown, `X[ids[i]]`) are checked later, not used. Reduce
axes whose range() bounds depend on outer indices become the bounding rectangle, masked
by the range condition.
"""
from __future__ import annotations

import threading

from jitdl.errors import DefinitionError, user_loc
from jitdl.ir import build
from jitdl.ir.analysis import INF, affine, bounds, form_bounds
from jitdl.ir.nodes import Access, BinOp, Binary, Const, IterVar, Reduce, Var
from jitdl.ir.visit import map_expr, walk_expr
from jitdl.te.ops import make_stage


def _mentions(e, names):
    return any(isinstance(n, Var) and n in names for n in walk_expr(e))


def _floordiv_by_constant(e):
    return isinstance(e, Binary) and e.op == BinOp.FLOORDIV and isinstance(e.b, Const) \
        and e.b.value > 0


def solve(idx, lo, hi, unknown, known):
    """(var, vlo, vhi) when `lo <= idx <= hi` for every value of the known indices
    confines exactly one unknown index var to [vlo, vhi]; else None."""
    if _floordiv_by_constant(idx):
        d = int(idx.b.value)
        return solve(idx.a, lo * d, hi * d + d - 1, unknown, known)
    form = affine(idx)
    parts = [(k, c) for k, c in form.items() if k != 1 and _mentions(k, unknown)]
    if len(parts) != 1:
        return None
    atom, c = parts[0]
    rlo, rhi = form_bounds({k: v for k, v in form.items() if k is not atom}, known)
    if rlo == -INF or rhi == INF:
        return None
    want_lo, want_hi = lo - rlo, hi - rhi            # c*atom in [want_lo, want_hi]
    if c > 0:
        alo, ahi = -((-want_lo) // c), want_hi // c
    else:
        alo, ahi = -((-want_hi) // c), want_lo // c
    if isinstance(atom, Var):
        return atom, alo, ahi
    if _floordiv_by_constant(atom):                     # (c*i + e) // d + e'
        return solve(atom, alo, ahi, unknown, known)
    return None


def infer_ranges(variables, body, what, pending=()):
    """{Var: extent} for the index variables of one index-notation statement."""
    axes = [a for n in walk_expr(body) if isinstance(n, Reduce) for a in n.axes]
    # reduction variables with bounds depending on outer indices are not known yet, and
    # those of empty reductions take no value: dimensions with them bound nothing
    later = {ax.var for ax, _, _ in pending} | {a.var for a in axes
                                                if not isinstance(a.extent, int)}
    empty = {a.var for a in axes if a.var not in later and a.extent <= 0}
    known = {a.var: (a.min, a.min + a.extent - 1) for a in axes
             if a.var not in later and a.var not in empty}
    unknown = set(variables) | later | empty
    found = {v: [] for v in variables}   # v -> [(lo, hi, access)]
    sizes = {}      # v -> the symbolic size of the first dimension it is the whole index of
    accs = [n for n in walk_expr(body) if isinstance(n, Access)]   # selects, filters too
    while True:
        fixed = {}
        for acc in accs:
            for dim, idx in enumerate(acc.indices):
                if not isinstance(acc.tensor.shape[dim], int):
                    if idx in found:    # (a dynamic argument's size: bare indices only;
                        #                  the others are checked equal at the call)
                        sizes.setdefault(idx, acc.tensor.shape[dim])
                    continue
                sol = solve(idx, 0, acc.tensor.shape[dim] - 1, unknown, known)
                if sol is not None and sol[0] in found:
                    fixed.setdefault(sol[0], []).append((sol[1], sol[2], acc))
        if not fixed:
            break
        for v, cons in fixed.items():        # indices bounded in this round are known
            found[v] = cons
            known[v] = (0, max(min(c[1] for c in cons), -1))
            unknown.discard(v)
    extents = {}
    for v in variables:
        cons = found[v]
        if not cons and v in sizes:
            extents[v] = sizes[v]
            continue
        if not cons:
            if any(_mentions(a, {v}) and _mentions(a, empty) for a in accs):
                why = ("the accesses that would bound it are inside a reduction over an "
                       "empty range, which reads nothing")
            else:
                why = (f"no access has it as `c*{v.name} + e` or `(c*{v.name} + e) // d` in "
                       "one dimension (e of constants and indices with known ranges)")
            raise DefinitionError(
                f"cannot infer the range of index `{v.name}` in {what}: {why}; declare the "
                f"shape first, e.g. `{what.split('[')[0]} = jd.tensor((n, ...))`", user_loc())
        lo = max(c[0] for c in cons)
        hi = min(c[1] for c in cons)
        if lo > 0:
            worst = max(cons, key=lambda c: c[0])[2]
            raise DefinitionError(
                f"index `{v.name}` in {what} would start at {lo}, not 0 (because of "
                f"{worst}); re-index so that it starts at 0 (e.g. `Y[i] = X[i] + X[i + 2]` "
                "instead of `Y[i] = X[i - 1] + X[i + 1]`), or declare the shape first with "
                f"jd.tensor(shape) and guard the accesses (`... if {v.name} >= {lo} "
                "else ...`)", user_loc())
        extents[v] = max(hi + 1, 0)      # an empty range makes an empty tensor, as NumPy
    return extents


_state = threading.local()


class pending_scope:
    """Collects reduce axes whose range bounds depend on outer indices."""

    def __enter__(self):
        self.saved = getattr(_state, "pending", None)
        _state.pending = []
        return _state.pending

    def __exit__(self, *exc):
        _state.pending = self.saved


def pending_reduce_axes():
    """The list a reduce axis with index-dependent bounds is added to (None outside an
    index-notation statement)."""
    return getattr(_state, "pending", None)


def define_stage(name, declared, index_names, fn):
    what = f"{name}[{', '.join(index_names)}]"
    variables = [Var(n) for n in index_names]
    if declared is not None and len(declared.shape) != len(variables):
        raise DefinitionError(
            f"{name} was declared with shape {declared.shape} but {what} has "
            f"{len(variables)} index(es)", user_loc())
    with pending_scope() as pending:
        body = build.as_expr(fn(*variables))
    if declared is not None:
        extents = dict(zip(variables, declared.shape))
    else:
        extents = infer_ranges(variables, body, what, pending)
    axes = tuple(IterVar(v, 0, extents[v]) for v in variables)
    if pending:
        body = _resolve_pending(body, pending, {v: (0, extents[v] - 1) for v in variables})
    if declared is not None and declared.dtype is not None:
        body = build.cast(body, declared.dtype)
    stage = make_stage(name, axes, body, user_loc())
    return stage


def _resolve_pending(body, pending, ranges):
    """Give reduce axes with index-dependent range() bounds their bounding rectangle."""
    new = {}
    for ax, lo, hi in pending:
        blo, _ = bounds(lo, ranges)
        _, bhi = bounds(hi, ranges)
        if blo in (-INF, INF) or bhi in (-INF, INF):
            raise DefinitionError(
                f"cannot bound the range of reduction index `{ax.var.name}` "
                f"(range({lo}, {hi}))", user_loc())
        if bhi <= blo:
            raise DefinitionError(f"reduction index `{ax.var.name}` has an empty range",
                                  user_loc())
        new[ax] = IterVar(ax.var, int(blo), int(bhi - blo), reduce=True)

    def fix(n):
        if isinstance(n, Reduce) and any(a in new for a in n.axes):
            from dataclasses import replace
            return replace(n, axes=tuple(new.get(a, a) for a in n.axes))
        return None
    return map_expr(body, fix)
