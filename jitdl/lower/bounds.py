"""Static checks of every tensor access in a definition, before any loop is built.

Each access index is proven inside its dimension over the stage's domain (axes, reduce
axes, and the conditions of enclosing selects, `where=` and generator `if`s), or it is
data-dependent (checked at run time), or it is an error naming the tensor, the index and
the user's line. Shape agreement between arguments indexed by the same bare index is
checked here too.
"""
from __future__ import annotations

import itertools

from jitdl.errors import ArgumentShapeError, DefinitionError
from jitdl.ir.analysis import (FACTS, INF, SIZE_LIMIT, bare_uses, bounds, inside, memoised,
                               narrow, narrow_for, reads_memory, unbounded_part,
                               upper_ends, with_loop)
from jitdl.ir.nodes import (Access, BinOp, Binary, Const, Expr, Reduce, Select,
                            SizeVar, Var)
from jitdl.ir.printer import expr_text
from jitdl.ir.visit import expr_children, substitute, walk_unique
from jitdl.te.tensor import Placeholder


def _walk_guarded(e, ranges, visit, extent=lambda a: a.extent, seen=None, also=None):
    """Call visit(access, ranges) with ranges narrowed by enclosing conditions; extent(a)
    is the extent of an axis a as the proof takes it, also(cond) the condition as the
    proof takes it besides (with the sizes the call checks equal put in: both hold). A
    node met again under the same ranges object (a subexpression shared by several
    parents, `v = v * v + 1` repeated; under memoised() narrowing gives the same object
    for the same condition) is walked once: its tree doubles with every such step.
    `seen` keeps each ranges it keys alive, so that its id stays its own."""
    if seen is None:
        seen = {}
    if also is None:
        also = _same_object
    key = (id(e), id(ranges))
    if key in seen:
        return
    seen[key] = ranges
    if any(r[0] > r[1] for k, r in ranges.items() if k is not FACTS):
        return          # the conditions cannot all hold: this branch never runs
    if isinstance(e, Access):
        visit(e, ranges)
    if isinstance(e, Select):
        _walk_guarded(e.cond, ranges, visit, extent, seen, also)
        # (ranges as they were where the condition tells nothing of an arm: a node shared
        # by both arms, and by the arms of selects inside them, is walked once)
        _walk_guarded(e.t, _narrow_both(e.cond, ranges, e.t, False, also), visit, extent,
                      seen, also)
        _walk_guarded(e.f, _narrow_both(e.cond, ranges, e.f, True, also), visit, extent,
                      seen, also)
        return
    if isinstance(e, Binary) and e.op in (BinOp.AND, BinOp.OR) and e.dtype == "bool":
        # evaluated left to right with short circuit (see codegen)
        _walk_guarded(e.a, ranges, visit, extent, seen, also)
        _walk_guarded(e.b, _narrow_both(e.a, ranges, e.b, e.op == BinOp.OR, also), visit,
                      extent, seen, also)
        return
    if isinstance(e, Reduce):
        if any(isinstance(extent(a), int) and extent(a) <= 0 for a in e.axes):
            return                  # an empty reduction reads nothing
        inner = ranges
        for a in e.axes:
            inner = with_loop(inner, a.var, a.min, extent(a))
        if e.where is not None:
            _walk_guarded(e.where, inner, visit, extent, seen, also)
            inner = narrow(e.where, inner)
            if also(e.where) is not e.where:
                inner = narrow(also(e.where), inner)
        _walk_guarded(e.body, inner, visit, extent, seen, also)
        return
    for c in expr_children(e):
        _walk_guarded(c, ranges, visit, extent, seen, also)


def _same_object(e):
    return e


def _narrow_both(cond, ranges, exprs, negate, also):
    """narrow_for of the condition as written, then as also(cond) gives it."""
    out = narrow_for(cond, ranges, exprs, negate)
    other = also(cond)
    return out if other is cond else narrow_for(other, out, exprs, negate)


def check_stage(tensor, scalars=(), same=None):
    """Prove the accesses of one stage (data-dependent ones are checked at run time).
    `same` maps size variables to those the call checks them equal to. Returns the reads
    left to a run-time check, as (tensor name, dimension, index text): an index that no
    loop moves (`W[0]`, `X[X_n0 - 1]`) into a symbolic dimension it cannot be proven
    inside, for every size; at a call where it is outside (an empty W), IndexError, as
    NumPy's `w[0]` raises on an empty w."""
    op = tensor.op
    deferred = set()

    def extent(a):              # a symbolic extent with the sizes the call checks equal
        if isinstance(a.extent, int) or not same:
            return a.extent
        n = substitute(a.extent, same)
        return int(n.value) if isinstance(n, Const) else n

    conds = {}

    def also(c):                # a condition with the sizes the call checks equal
        if not same:            # (one object per condition: narrowing is memoised by id)
            return c
        hit = conds.get(id(c))
        if hit is None:
            hit = conds[id(c)] = (c, substitute(c, same))   # (c itself: unchanged)
        return hit[1]
    if any(isinstance(extent(a), int) and extent(a) == 0 for a in op.axes):
        return deferred             # an empty tensor reads nothing
    ranges = {v: (0, SIZE_LIMIT - 1) for v in _size_vars(op)}
    for a in op.axes:
        ranges = with_loop(ranges, a.var, a.min, extent(a))
    known = set(ranges) | set(scalars) | {a.var for r in walk_unique(op.body)
                                          if isinstance(r, Reduce) for a in r.axes}
    for n in walk_unique(op.body):
        if isinstance(n, Var) and n not in known and not isinstance(n, SizeVar):
            raise DefinitionError(
                f"index `{n.name}` is used outside a reduction over it in stage "
                f"{tensor.name}; a reduce axis can only appear inside jd.sum/max/min/prod("
                f"..., axis={n.name}) (or a generator reduction)", op.loc)

    def visit(acc, rng):
        if acc.checked:         # a builder asked for run-time checks of this access
            return
        for dim, idx in enumerate(acc.indices):
            n = acc.tensor.shape[dim]
            if reads_memory(idx):
                continue
            written = idx
            if not isinstance(n, int) and same:
                n, idx = substitute(n, same), substitute(idx, same)
                n = int(n.value) if isinstance(n, Const) else n
            if not isinstance(n, int):
                rng = {**{v: (0, SIZE_LIMIT - 1) for v in _size_vars(n)}, **rng}
            lo, hi = bounds(idx, rng)
            if inside(idx, n, rng):
                continue
            if not isinstance(n, int) and not any(
                    isinstance(v, Var) and not isinstance(v, SizeVar) for v in walk_unique(idx)):
                # (as written and with the sizes the call checks equal put in)
                deferred.update({(acc.tensor.name, dim, expr_text(written)),
                                 (acc.tensor.name, dim, expr_text(idx))})
                continue
            if not isinstance(n, int) and inside(idx, n, {
                    **rng, **{v: (1, SIZE_LIMIT - 1) for v in _size_vars(n)}}):
                # (inside wherever the dimension is not empty, `Y[jd.min(i, m - 1)]`: an
                # access no rule uses, checked where it reads, at run time, as Tensor
                # Comprehensions' rule has it; read from an empty Y it raises there)
                deferred.update({(acc.tensor.name, dim, expr_text(written)),
                                 (acc.tensor.name, dim, expr_text(idx))})
                continue
            if not isinstance(n, int):
                raise DefinitionError(
                    f"{expr_text(acc)}: cannot prove index `{expr_text(idx)}` of dimension "
                    f"{dim} inside [0, {expr_text(n)}) for every size (it ranges over "
                    f"{_interval(lo, hi)}); guard it with a condition on that index "
                    "(`jd.select(idx < n, ..., ...)`) or change the ranges", acc.loc or op.loc)
            if lo == -INF or hi == INF:
                raise DefinitionError(
                    f"{expr_text(acc)} may read outside {acc.tensor.name}: cannot bound "
                    f"index `{expr_text(idx)}` of dimension {dim} "
                    f"({_why_unbounded(idx, rng)}); {acc.tensor.name} has {n} element(s) "
                    f"there (valid: 0..{n - 1}). Guard the access with a condition on that "
                    "index (`... if 0 <= e < n else ...`, where=) or change the ranges",
                    acc.loc or op.loc)
            raise DefinitionError(
                f"{expr_text(acc)} can read outside {acc.tensor.name}: index "
                f"`{expr_text(idx)}` of dimension {dim} ranges over {_interval(lo, hi)} but "
                f"{acc.tensor.name} has {n} element(s) there (valid: 0..{n - 1}); "
                f"{_from_the_end(acc.tensor.name, dim, idx, n)}guard it with a condition "
                "(`... if cond else ...`) or change the ranges", acc.loc or op.loc)
    # (memoised: narrowing by one condition gives one ranges object, see _walk_guarded)
    with memoised():
        _walk_guarded(op.body, ranges, visit, extent, also=also)
    return deferred


def _from_the_end(name, dim, idx, n):
    """The hint for a negative constant index, which in NumPy counts from the end."""
    if not (isinstance(idx, Const) and idx.value < 0):
        return ""
    return (f"a negative index does not count from the end in a definition: write "
            f"`{name}.shape[{dim}] - {-idx.value}` for NumPy's `{idx.value}`, or ")


def _size_vars(e):
    """The size variables (Vars) an extent or a stage's extents read."""
    if not isinstance(e, Expr):
        e = [a.extent for a in list(e.axes) + list(e.reduce_axes)] + [
            d for n in walk_unique(e.body) if isinstance(n, Access) for d in n.tensor.shape]
        return [v for x in e if isinstance(x, Expr) for v in _size_vars(x)]
    return [v for v in walk_unique(e) if isinstance(v, Var)]


def _why_unbounded(idx, ranges):
    part = unbounded_part(idx, ranges)
    if part is None or part is idx and not isinstance(part, Var):
        return "no rule bounds it"
    if isinstance(part, Var):
        if part.dtype in ("int32", "int64") and part not in ranges:
            return f"`{part.name}` is a scalar argument, with no range"
        return f"`{part.name}` has no known range"
    return f"`{expr_text(part)}` ranges over {_interval(*bounds(part, ranges))}"


def _interval(lo, hi):
    return f"[{lo}, {hi}]".replace("inf", "\u221e")


def check_shape_agreement(stages, params=()):
    """Arguments indexed by the same bare index over the full extent must agree in size.
    Where a size is symbolic (a dynamic argument's), the agreement is checked at the
    call: returns those checks, [name, position, dim, name, position, dim] each.
    `params`, the definition's parameters, own their sizes too where no stage reads
    them (`jnp.broadcast_to(Y, X.shape)` reads Y over the sizes of X alone)."""
    at_call = []
    sources = {}            # (a stage's id, dimension) -> its argument's (_argument_dim)
    owners = {}             # a dynamic argument's size -> (argument, dimension)
    reached = {}            # a tensor's id -> the arguments it reads (_arguments)
    for t in stages:
        for acc in walk_unique(t.op.body):
            if isinstance(acc, Access) and isinstance(acc.tensor.op, Placeholder):
                for dim, n in enumerate(acc.tensor.shape):
                    if isinstance(n, SizeVar):
                        owners.setdefault(n, (acc.tensor, dim))
    for p in params:
        if isinstance(getattr(p, "op", None), Placeholder):
            for dim, n in enumerate(p.shape):
                if isinstance(n, SizeVar):
                    owners.setdefault(n, (p, dim))
    for t in stages:
        op = t.op
        axes = list(op.axes) + list(op.reduce_axes)
        uses = {}
        bare_uses(op.body, uses)
        for ax in axes:
            found = uses.get(ax.var, [])
            if ax.min == 0 and ax.extent in owners:
                # an intermediate (jd.numpy's stages) read over an axis whose extent is
                # one argument's size, at a dimension that is another's: they agree
                for acc, dim in found:
                    b = acc.tensor.shape[dim]
                    if isinstance(b, SizeVar) and b is not ax.extent and b in owners:
                        (t1, d1), (t2, d2) = owners[ax.extent], owners[b]
                    elif isinstance(b, int):
                        # (a static argument's fixed size there: W.T of x @ W.T, x dynamic)
                        ref = _fixed_size(acc, dim, reached)
                        if ref is None:
                            continue
                        (t1, d1), (t2, d2) = owners[ax.extent], ref
                    else:
                        continue
                    check = [t1.name, t1.op.arg_index, d1, t2.name, t2.op.arg_index, d2]
                    if check not in at_call:
                        at_call.append(check)
            args = [(acc, dim) for acc, dim in found if isinstance(acc.tensor.op, Placeholder)]
            # (a stage of fixed sizes read bare over it, as the argument it reads bare over
            # its own axis: X[i] + sum(Y[i, k] ...), whose sum became a stage T[i], checks
            # X against Y, as a dynamic kernel does by their size variables)
            args += [src for acc, dim in found if not isinstance(acc.tensor.op, Placeholder)
                     for src in [_argument_dim(acc.tensor, dim, sources, t)]
                     if src is not None and src not in args]
            if ax.min == 0 and isinstance(ax.extent, int):
                # an extent of a fixed size (W.T's, or a static argument's): a dynamic
                # argument's size read over it, directly or through an intermediate
                # (x.T's), agrees with a static argument's that has it
                ref = next((r for r in (_fixed_size(acc, dim, reached) for acc, dim in found
                                        if _is_size(acc.tensor.shape[dim], ax.extent))
                            if r is not None), None)
                for acc, dim in found if ref is not None else ():
                    b = acc.tensor.shape[dim]
                    if isinstance(b, SizeVar) and b in owners:
                        t2, d2 = owners[b]
                        check = [ref[0].name, ref[0].op.arg_index, ref[1],
                                 t2.name, t2.op.arg_index, d2]
                        if check not in at_call:
                            at_call.append(check)
            # a dimension over the whole extent, or one of the sizes an extent inferred
            # over symbolic sizes is the least of (min(X_n0, W_n0, Z_n0 - 1))
            ends = [ax.extent] if isinstance(ax.extent, int) else upper_ends(ax.extent)
            full = [(acc, dim) for acc, dim in args
                    if ax.min == 0 and any(_is_size(acc.tensor.shape[dim], e) for e in ends)]
            if not full:
                continue
            for (ref, rdim), (acc, dim) in itertools.product(full, args):
                # two dimensions of one argument may differ (a diagonal, X[i, i])
                a, b = ref.tensor.shape[rdim], acc.tensor.shape[dim]
                if acc.tensor is ref.tensor or a is b or isinstance(a, int) and a == b:
                    continue
                if not (isinstance(a, int) and isinstance(b, int)):
                    check = [ref.tensor.name, ref.tensor.op.arg_index, rdim,
                             acc.tensor.name, acc.tensor.op.arg_index, dim]
                    if check not in at_call:
                        at_call.append(check)
                    continue
                raise ArgumentShapeError(
                    f"shape mismatch: argument '{ref.tensor.name}' has size "
                    f"{ref.tensor.shape[rdim]} in dimension {rdim} but argument "
                    f"'{acc.tensor.name}' has size {acc.tensor.shape[dim]} in dimension "
                    f"{dim}; both are indexed by `{ax.var.name}` "
                    f"({ref.tensor.name} {ref.tensor.shape}, {acc.tensor.name} "
                    f"{acc.tensor.shape})", acc.loc or op.loc)
    return at_call


def _argument_dim(t, dim, memo, reader=None):
    """(access, dimension) of an argument that stage t reads, unguarded, by the bare index
    of its axis `dim`, at a dimension of t's fixed size there, or at any where t is a
    reduction the statement of stage `reader` made a stage of its own (X[i] + sum(Y[i, k]
    ...) reads Z_sum0[i] = sum(Y[i, k] ...) over the range of i that X and Y gave both),
    through stages of such reads; else None. memo: by (id(t), dim, id(reader))."""
    key = (id(t), dim, id(reader))
    if key in memo:
        return memo[key]
    memo[key] = None                    # (a cycle, if any, finds nothing)
    op, n = t.op, t.shape[dim]
    axes = getattr(op, "axes", ())
    if not isinstance(n, int) or dim >= len(axes) or axes[dim].min != 0:
        return None
    lifted = reader is not None and isinstance(op.body, Reduce) and \
        op.loc is not None and op.loc == reader.op.loc and \
        t.name.startswith(reader.name + "_")
    uses = {}
    bare_uses(op.body, uses)
    for acc, d in uses.get(axes[dim].var, []):
        if lifted or _is_size(acc.tensor.shape[d], n):
            found = (acc, d) if isinstance(acc.tensor.op, Placeholder) else \
                _argument_dim(acc.tensor, d, memo)
            if found is not None:
                memo[key] = found
                return found
    return None


def _fixed_size(acc, dim, reached):
    """(argument, dimension) of the fixed size n = acc.tensor.shape[dim]: that dimension
    where acc reads an argument, else one of size n among the arguments the intermediate
    reads (directly or not), or None. A static argument's shape is part of the call's
    key, so its size n stands for the constant n in a check at the call. `reached` keeps
    the arguments each tensor reads, over one check_shape_agreement: a chain of stages
    is walked once, not once per stage (250 stages took 20 s)."""
    t, n = acc.tensor, acc.tensor.shape[dim]
    if isinstance(t.op, Placeholder):
        return t, dim
    for x in _arguments(t, reached):
        same = [d for d, m in enumerate(x.shape) if isinstance(m, int) and m == n]
        if same:
            return x, same[0]
    return None


def _arguments(t, reached):
    """The arguments (placeholders) t reads, directly or through other stages, in a fixed
    order; memoised in `reached` by tensor id."""
    done = reached.get(id(t))
    if done is not None:
        return done
    # (stages in reverse topological order, each read before its readers' lists are made)
    order, seen, todo = [], set(), [(t, False)]
    while todo:
        x, ready = todo.pop()
        if ready:
            order.append(x)
            continue
        if id(x) in seen or id(x) in reached:
            continue
        seen.add(id(x))
        if isinstance(x.op, Placeholder):
            reached[id(x)] = [x]
            continue
        todo.append((x, True))
        todo += [(a.tensor, False) for a in walk_unique(x.op.body) if isinstance(a, Access)]
    for x in order:
        found = {}
        for a in walk_unique(x.op.body):
            if isinstance(a, Access):
                found.update((id(p), p) for p in reached[id(a.tensor)])
        reached[id(x)] = list(found.values())
    return reached[id(t)]


def _is_size(n, e):
    """Whether a dimension's size n (an int or a size variable) is the extent e."""
    if isinstance(e, Const):
        e = int(e.value)
    return isinstance(n, int) == isinstance(e, int) and n == e
