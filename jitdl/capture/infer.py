"""Index notation: the ranges of a statement's indices, inferred from its accesses.

An index's range is the largest one for which every access where it stands alone in a
dimension, as c*i + d, stays inside that dimension (Tensor Comprehensions' rule). Accesses
under a select branch or a reduction's condition count only when no other access bounds
the index. Reduce axes whose range() bounds depend on outer indices become the bounding
rectangle, masked by the range condition.
"""
from __future__ import annotations

import math
import threading

from jitdl.errors import DefinitionError, user_loc
from jitdl.ir import build
from jitdl.ir.analysis import bounds, single_var
from jitdl.ir.nodes import Access, IterVar, Reduce, Select, Var
from jitdl.ir.visit import expr_children, map_expr
from jitdl.te.ops import make_stage


def accesses(e, guarded=False):
    """(Access, guarded) pairs in e; guarded means under a select branch or a where."""
    out = []

    def rec(n, g):
        if isinstance(n, Access):
            out.append((n, g))
        if isinstance(n, Select):
            rec(n.cond, g)
            rec(n.t, True)
            rec(n.f, True)
            return
        if isinstance(n, Reduce):
            rec(n.body, g or n.where is not None)
            if n.where is not None:
                rec(n.where, g)
            return
        for c in expr_children(n):
            rec(c, g)
    rec(e, guarded)
    return out


def infer_ranges(variables, body, what):
    """{Var: extent} for the index variables of one index-notation statement."""
    found = {v: ([], []) for v in variables}   # v -> (unguarded, guarded) [(lo, hi, access)]
    for acc, guarded in accesses(body):
        for dim, idx in enumerate(acc.indices):
            sv = single_var(idx)
            if sv is None or sv[0] not in found:
                continue
            v, c, d = sv
            n = acc.tensor.shape[dim]
            if c > 0:
                lo, hi = math.ceil(-d / c), math.floor((n - 1 - d) / c)
            else:
                lo, hi = math.ceil((n - 1 - d) / c), math.floor(-d / c)
            found[v][1 if guarded else 0].append((lo, hi, acc))
    extents = {}
    for v in variables:
        cons = found[v][0] or found[v][1]
        if not cons:
            raise DefinitionError(
                f"cannot infer the range of index `{v.name}` in {what}: it is not the whole "
                f"index (c*{v.name} + d) of any dimension it reads; declare the shape first, "
                f"e.g. `{what.split('[')[0]} = jd.tensor((n, ...))`", user_loc())
        lo = max(c[0] for c in cons)
        hi = min(c[1] for c in cons)
        if lo > 0:
            worst = max(cons, key=lambda c: c[0])[2]
            raise DefinitionError(
                f"index `{v.name}` in {what} would start at {lo}, not 0 (because of "
                f"{worst}); re-index so that it starts at 0 (e.g. `Y[i] = X[i] + X[i + 2]` "
                "instead of `Y[i] = X[i - 1] + X[i + 1]`) or declare the shape first with "
                "jd.tensor(shape)", user_loc())
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
        extents = infer_ranges(variables, body, what)
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
        if blo in (-math.inf, math.inf) or bhi in (-math.inf, math.inf):
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
