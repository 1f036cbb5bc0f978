"""Schedule steps that rewrite the TE graph: cache_read, cache_write, rfactor, pack.

Each takes the stages it reads and returns the new stage it makes and the new ops of the
stages it changes; the schedule applies them with jitdl.te.graph.replace_ops, so the
traced graph itself is never changed.
"""
from __future__ import annotations

from jitdl.errors import ScheduleError, user_loc
from jitdl.ir import build
from jitdl.ir.analysis import reads_memory
from jitdl.ir.nodes import Access, BinOp, CmpOp, IterVar, Reduce, ReduceOp, Var
from jitdl.ir.visit import map_expr, substitute, walk_expr
from jitdl.te.tensor import Compute, Tensor


def _redirect(op, old, new, index=None):
    """op with every access to tensor `old` reading `new` (at index(indices) if given;
    an access for which index() is None stays)."""
    def rewrite(e):
        if isinstance(e, Access) and e.tensor is old:
            idx = e.indices if index is None else index(e.indices)
            return None if idx is None else Access(new, idx, e.loc)
        return None
    return Compute(op.axes, map_expr(op.body, rewrite), op.loc)


def cache_read(readers, tname):
    """A stage `<tensor>_cache` copying the tensor the readers read as `tname`; returns
    (cache tensor, {reader name: new op})."""
    target = next((n.tensor for r in readers for n in walk_expr(r.op.body)
                   if isinstance(n, Access) and n.tensor.name == tname), None)
    if target is None:
        raise ScheduleError(f"cache_read: none of {', '.join(r.name for r in readers)} reads "
                            f"a tensor named {tname!r}", user_loc())
    axes = tuple(IterVar(Var(f"d{k}"), 0, n) for k, n in enumerate(target.shape))
    cache = Tensor(f"{tname}_cache", target.shape, target.dtype,
                   Compute(axes, Access(target, tuple(a.var for a in axes)),
                           readers[0].op.loc))
    return cache, {r.name: _redirect(r.op, target, cache) for r in readers}


def cache_write(t):
    """`<t>_local` computes t's body; t becomes a copy of it. Returns (local, new op)."""
    local = Tensor(f"{t.name}_local", t.shape, t.dtype, t.op)
    axes = tuple(IterVar(Var(a.name), 0, a.extent) for a in t.op.axes)
    return local, Compute(axes, Access(local, tuple(a.var for a in axes)), t.op.loc)


_COMBINE = {ReduceOp.SUM: ReduceOp.SUM, ReduceOp.PROD: ReduceOp.PROD,
            ReduceOp.MAX: ReduceOp.MAX, ReduceOp.MIN: ReduceOp.MIN,
            ReduceOp.ANY: ReduceOp.ANY, ReduceOp.ALL: ReduceOp.ALL}


def rfactor(t, axis_name, f):
    """`<t>_rf[kf, ...]`: partial reductions over the outer part of reduction axis
    `axis_name` split by f; t then reduces the partials. Returns (rf, new op of t, kr)
    where kr is t's new reduction axis."""
    red = t.op.reduce
    ax = next((a for a in t.op.reduce_axes if a.name == axis_name), None)
    if red is None or ax is None:
        legal = ", ".join(a.name for a in t.op.reduce_axes) or "none"
        raise ScheduleError(f"rfactor: {axis_name!r} is not a reduction axis of "
                            f"{t.name} (its reduction axes: {legal})", user_loc())
    if red.op not in _COMBINE:
        raise ScheduleError(f"rfactor: {t.name} is an {red.op.value}, which rfactor "
                            "does not split", user_loc())
    outer_n = -(-ax.extent // f)
    kf = IterVar(Var(f"{ax.name}_f"), 0, f)
    ko = IterVar(Var(f"{ax.name}_o"), 0, outer_n, reduce=True)
    k_val = ko.var * f + kf.var + ax.min if ax.min else ko.var * f + kf.var
    data = tuple(IterVar(Var(a.name), 0, a.extent) for a in t.op.axes)
    sub = {ax.var: k_val, **{a.var: b.var for a, b in zip(t.op.axes, data)}}
    where = build.compare(CmpOp.LT, k_val, ax.min + ax.extent) \
        if outer_n * f != ax.extent else None
    if red.where is not None:
        w = substitute(red.where, sub)
        where = w if where is None else build.logical(BinOp.AND, where, w)
    axes = tuple(ko if a is ax else a for a in red.axes)
    part = Reduce(red.op, substitute(red.body, sub), axes, where, red.dtype)
    rf = Tensor(f"{t.name}_rf", (f,) + t.shape, t.dtype, Compute((kf,) + data, part, t.op.loc))
    kr = IterVar(Var(f"{ax.name}_r"), 0, f, reduce=True)
    body = Access(rf, (kr.var,) + tuple(a.var for a in t.op.axes))
    new_op = Compute(t.op.axes, Reduce(_COMBINE[red.op], body, (kr,), None, red.dtype),
                     t.op.loc)
    return rf, new_op, kr


def pack(cons, tname, d, f):
    """`<tensor>_pack`: the tensor `cons` reads as `tname` with dimension d blocked by f
    (B[K, N] -> B_pack[N / f, K, f]). Returns (packed, new op of cons)."""
    target = next((n.tensor for n in walk_expr(cons.op.body) if isinstance(n, Access)
                   and n.tensor.name == tname), None)
    if target is None:
        raise ScheduleError(f"pack: stage {cons.name} does not read a tensor named "
                            f"{tname!r}", user_loc())
    if isinstance(d, bool) or not (isinstance(d, int) and 0 <= d < target.ndim):
        raise ScheduleError(f"pack: argument 'dim' must be in [0, {target.ndim}) for "
                            f"{target.name}{list(target.shape)}, got {d!r}", user_loc())
    n = target.shape[d]
    others = [k for k in range(target.ndim) if k != d]
    axes = [IterVar(Var(f"{target.name}_o"), 0, -(-n // f))]
    axes += [IterVar(Var(f"d{k}"), 0, target.shape[k]) for k in others]
    axes += [IterVar(Var(f"{target.name}_i"), 0, f)]
    src = [None] * target.ndim
    pos = axes[0].var * f + axes[-1].var
    src[d] = pos
    for a, k in zip(axes[1:-1], others):
        src[k] = a.var
    body = Access(target, tuple(build.as_expr(x) for x in src))
    if n % f:
        body = build.select(pos < n, body, build.cast(0, target.dtype))
    packed = Tensor(f"{target.name}_pack", tuple(a.extent for a in axes), target.dtype,
                    Compute(tuple(axes), body, cons.op.loc))

    def index(idx):
        if any(map(reads_memory, idx)):
            # a data-dependent index keeps reading the tensor itself: its run-time check
            # is against the tensor's extents, not the padded blocks'
            return None
        new = (idx[d] // f,) + tuple(idx[k] for k in others) + (idx[d] % f,)
        return tuple(build.as_expr(x) for x in new)
    return packed, _redirect(cons.op, target, packed, index)
