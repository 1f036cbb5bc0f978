"""Schedule steps that rewrite the TE graph: cache_read, cache_write, rfactor, pack,
divide_after, and compute_inline of a reduction into a reader that casts it.

Each takes the stages it reads and returns the new stage it makes and the new ops of the
stages it changes; the schedule applies them with jitdl.te.graph.replace_ops, so the
traced graph itself is never changed.
"""
from __future__ import annotations

import dataclasses
import functools
import operator

from jitdl import dtypes
from jitdl.errors import ScheduleError, user_loc
from jitdl.ir import build
from jitdl.ir.analysis import reads_memory
from jitdl.ir.nodes import (Access, Binary, BinOp, Call, Cast, CmpOp, Intrin, IterVar, Reduce,
                            ReduceOp, Var)
from jitdl.ir.visit import map_expr, substitute, walk_expr
from jitdl.te.tensor import Compute, Tensor


def _redirect(op, old, new, index=None):
    """op with every access to tensor `old` reading `new` (at index(indices) if given;
    an access for which index() is None stays)."""
    def rewrite(e):
        if isinstance(e, Access) and e.tensor is old:
            idx = e.indices if index is None else index(e.indices)
            return None if idx is None else dataclasses.replace(e, tensor=new, indices=idx)
        return None
    return Compute(op.axes, map_expr(op.body, rewrite), op.loc)


def cache_read(readers, tname, name=None):
    """A stage `name` (`<tensor>_cache`) copying the tensor the readers read as `tname`;
    returns (cache tensor, {reader name: new op})."""
    target = next((n.tensor for r in readers for n in walk_expr(r.op.body)
                   if isinstance(n, Access) and n.tensor.name == tname), None)
    if target is None:
        shared = sorted({n.tensor.name for r in readers for n in walk_expr(r.op.body)
                         if isinstance(n, Access) and "_shared" in n.tensor.name})
        hint = f" (it reads {', '.join(shared)}: subexpressions it used more than once, " \
            "made stages of their own because its expression was large; " \
            "cache_read for those)" if shared else ""
        raise ScheduleError(f"cache_read: none of {', '.join(r.name for r in readers)} reads "
                            f"a tensor named {tname!r}{hint}", user_loc())
    axes = tuple(IterVar(Var(f"d{k}"), 0, n) for k, n in enumerate(target.shape))
    cache = Tensor(name or f"{tname}_cache", target.shape, target.dtype,
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


def rfactor(t, axis_name, f, blocked=False, fuse=()):
    """`<t>_rf[kf, ...]`: partial reductions over the outer part of reduction axis
    `axis_name` split by f (part kf takes k = ko * f + kf, or blocked: k = kf * ceil(K /
    f) + ko); t then reduces the partials. With `fuse` (names of more reduction axes of
    t) those and `axis_name` are first one axis k of their extents' product, row-major
    (`axis_name` outermost): each is read at its digit of k (a whole reduction of an
    array of symbolic shape split along all of it, not along one axis that may be
    short). Returns (rf, new op of t, kr) where kr is t's new reduction axis."""
    red = t.op.reduce
    ax = next((a for a in t.op.reduce_axes if a.name == axis_name), None)
    legal = ", ".join(a.name for a in t.op.reduce_axes) or "none"
    if red is None or ax is None:
        raise ScheduleError(f"rfactor: {axis_name!r} is not a reduction axis of "
                            f"{t.name} (its reduction axes: {legal})", user_loc())
    if red.op not in _COMBINE:
        raise ScheduleError(f"rfactor: {t.name} is an {red.op.value}, which rfactor "
                            "does not split", user_loc())
    group = [ax]
    for n in fuse:
        a = next((a for a in t.op.reduce_axes if a.name == n), None)
        if a is None or a in group:
            what = "named twice" if a is not None else f"not a reduction axis of {t.name}"
            raise ScheduleError(f"rfactor: fuse: {n!r} is {what} (its reduction axes: "
                                f"{legal})", user_loc())
        group.append(a)
    # (k // n2 // n1 for the outermost of three: the bounds check follows it to k <
    # (n0 * n1) * n2, the loop's own bound, where k // (n1 * n2) would stop at a
    # product of sizes it cannot bound)
    extent = functools.reduce(operator.mul, [a.extent for a in group])
    if blocked and fuse and not isinstance(extent, int):
        # (a part's start, kf * ceil(n0 * n1 / f), is a product of sizes the bounds check
        # cannot bound, so it could not prove the reads; taken apart, k = ko * f + kf, it
        # can from the loop's k < n0 * n1)
        raise ScheduleError(f"rfactor: {t.name}: fused axes of symbolic extents split "
                            "into blocked parts are not supported; use blocked=False "
                            "(part kf takes kf, kf + factor, ...)", user_loc())
    outer_n = -(-extent // f)
    kf = IterVar(Var(f"{ax.name}_f"), 0, f)
    ko = IterVar(Var(f"{ax.name}_o"), 0, outer_n, reduce=True)
    k_val = kf.var * outer_n + ko.var if blocked else ko.var * f + kf.var
    values, q = {}, k_val
    for a in reversed(group):       # (each axis at its digit of k, innermost first)
        v = q if a is ax else q % a.extent
        q = q if a is ax else q // a.extent
        values[a.var] = v + a.min if a.min else v
    data = tuple(IterVar(Var(a.name), 0, a.extent) for a in t.op.axes)
    sub = {**values, **{a.var: b.var for a, b in zip(t.op.axes, data)}}
    where = build.compare(CmpOp.LT, k_val, extent) if outer_n * f != extent else None
    if red.where is not None:
        w = substitute(red.where, sub)
        where = w if where is None else build.logical(BinOp.AND, where, w)
    axes = tuple(ko if a is ax else a for a in red.axes if a is ax or a not in group)
    part = Reduce(red.op, substitute(red.body, sub), axes, where, red.dtype)
    # (the parts in the accumulator's dtype: a reduction stored with a cast, see
    # reduce_into, stores float64 sums as float32 only at the end)
    rf = Tensor(f"{t.name}_rf", (f,) + t.shape, red.dtype, Compute((kf,) + data, part,
                                                                    t.op.loc))
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
    if not isinstance(n, int):
        raise ScheduleError(f"pack: dimension {d} of {target.name} has the symbolic extent "
                            f"{n!r} (a dynamic definition); pack needs a concrete extent",
                            user_loc())
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


def _expand(e):
    """e with an access to an elementwise stage replaced by that stage's body, repeatedly,
    until e is something else (a reduction's value, an argument, an operation)."""
    while isinstance(e, Access) and isinstance(e.tensor.op, Compute) \
            and e.tensor.op.reduce is None:
        op = e.tensor.op
        e = substitute(op.body, {a.var: i for a, i in zip(op.axes, e.indices)})
    return e


def _uncast(e, expand=_expand):
    """e expanded, with value casts between float types looked through."""
    e = expand(e)
    while isinstance(e, Cast) and dtypes.is_float(e.dtype) and dtypes.is_float(e.value.dtype):
        e = expand(e.value)
    return e


def _factors(e):
    if isinstance(e, Binary) and e.op == BinOp.MUL:
        return _factors(e.a) + _factors(e.b)
    return [e]


def _row_sum_of(num, den, k, extent):
    """`den` is the sum of the stage `num` reads over the axis where num reads `k`, and
    that stage is exp(x - m) with m the max of x over that axis: 0 <= num <= 1 and
    num <= den, so num / den is a weight in [0, 1] (softmax's)."""
    if not isinstance(num, Access) or not isinstance(num.tensor.op, Compute):
        return False
    e = num.tensor.op.body
    if not (isinstance(e, Call) and e.fn == Intrin.EXP):
        return False
    pos = [d for d, i in enumerate(num.indices) if isinstance(i, Var) and i == k]
    shifted = _expand(e.args[0])
    if len(pos) != 1 or not (isinstance(shifted, Binary) and shifted.op == BinOp.SUB):
        return False
    # x - m with m the max of x over the same row: exp(x - m) <= 1
    m = _uncast(shifted.b)
    if not (isinstance(m, Access) and isinstance(m.tensor.op, Compute)):
        return False
    mred = m.tensor.op.reduce
    row = num.tensor.op.axes[pos[0]]
    if mred is None or mred.op != ReduceOp.MAX or mred.where is not None \
            or len(mred.axes) != 1 or mred.axes[0].min != row.min \
            or mred.axes[0].extent != row.extent:
        return False
    mapping = {a.var: i for a, i in zip(m.tensor.op.axes, m.indices)}
    mapping[mred.axes[0].var] = row.var
    if substitute(mred.body, mapping) != shifted.a:
        return False
    d = _uncast(den)
    if not (isinstance(d, Access) and isinstance(d.tensor.op, Compute)):
        return False
    red = d.tensor.op.reduce
    if red is None or red.op != ReduceOp.SUM or red.where is not None or len(red.axes) != 1 \
            or red.axes[0].min != 0 or red.axes[0].extent != extent:
        return False
    term = _uncast(red.body, expand=lambda x: x)    # (the stage e itself, not its body)
    if not (isinstance(term, Access) and term.tensor is num.tensor):
        return False
    mapping = {a.var: i for a, i in zip(d.tensor.op.axes, d.indices)}
    mapping[red.axes[0].var] = k
    return tuple(substitute(i, mapping) for i in term.indices) == tuple(num.indices)


def weighted_by_softmax(t):
    """(factor, quotient) for the factor of stage t's sum of products that is a softmax
    weight e / s with s constant along the sum (see _row_sum_of), or None."""
    red = t.op.reduce
    if red is None or red.op != ReduceOp.SUM or red.where is not None \
            or len(red.axes) != 1 or not dtypes.is_float(t.dtype) or red.dtype != t.dtype:
        return None
    k = red.axes[0]
    for factor in _factors(red.body):
        q = _expand(factor)
        if isinstance(q, Binary) and q.op == BinOp.DIV and q.dtype == t.dtype \
                and not any(n == k.var for n in walk_expr(q.b) if isinstance(n, Var)) \
                and _row_sum_of(q.a, q.b, k.var, k.extent):
            return factor, q
    return None


def divide_after(t):
    """`<t>_dividend`: t's sum of products with its softmax weight e / s (see
    weighted_by_softmax) taken as e; t becomes dividend / s, so the division is done once
    per output element, not once per term: sum_k (e[i, k] / s[i]) * V[k, j] =
    (sum_k e[i, k] * V[k, j]) / s[i] (attention's softmax(S) @ V). Only for softmax's
    weights (0 <= e <= 1, s >= 1): the sum without the division is at most
    sum_k |V[k, j]|, so it overflows only where that does (V near the dtype's largest
    value), and NaN and inf in x propagate as before. Returns (dividend, new op of t)."""
    found = weighted_by_softmax(t)
    if found is None:
        raise ScheduleError(f"divide_after: {t.name} is not a sum over one axis of products "
                            "with a factor e / s, s the sum of e = exp(x - max) over that "
                            "axis (softmax's weights)", user_loc())
    factor, q = found
    red = t.op.reduce
    body = map_expr(red.body, lambda n: q.a if n is factor else None)
    dividend = Tensor(f"{t.name}_dividend", t.shape, t.dtype,
                      Compute(t.op.axes, Reduce(red.op, body, red.axes, None, red.dtype),
                              t.op.loc))
    axes = tuple(IterVar(Var(a.name), 0, a.extent) for a in t.op.axes)
    sub = {a.var: b.var for a, b in zip(t.op.axes, axes)}
    quotient = Binary(BinOp.DIV, Access(dividend, tuple(b.var for b in axes)),
                      substitute(q.b, sub), t.dtype)
    return dividend, Compute(axes, quotient, t.op.loc)


def cast_reader(t, readers):
    """The one reader of reduction t (of `readers`, the tensors reading it) whose whole body
    is a cast of t between float dtypes at the reader's own indices (jd.numpy.sum of float32
    accumulates in float64, then casts), with no axis named as one of t's reduction axes;
    else None."""
    if len(readers) != 1 or t.op.reduce is None or not dtypes.is_float(t.dtype):
        return None
    (r,) = readers
    e = r.op.body
    if not (isinstance(e, Cast) and dtypes.is_float(e.dtype) and isinstance(e.value, Access)
            and e.value.tensor is t and r.shape == t.shape
            and e.value.indices == tuple(a.var for a in r.op.axes)):
        return None
    if {a.name for a in r.op.axes} & {a.name for a in t.op.reduce_axes}:
        return None
    return r


def reduce_into(t, reader):
    """reader's new op for reduction t inlined into it (cast_reader): t's reduction over its
    reader's axes, accumulated in t's dtype and stored in the reader's, one stage instead of
    a stored reduction and a pass that casts it (a GPU kernel and its launch)."""
    sub = {a.var: b.var for a, b in zip(t.op.axes, reader.op.axes)}
    red = t.op.reduce
    return Compute(reader.op.axes, Reduce(
        red.op, substitute(red.body, sub), red.axes,
        None if red.where is None else substitute(red.where, sub), red.dtype), reader.op.loc)
