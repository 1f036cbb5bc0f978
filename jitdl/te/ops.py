"""The definition vocabulary users call: jd.tensor, jd.reduce_axis, reductions, select,
casts and math intrinsics. They build TE nodes; jitdl.capture routes Python's builtins
and math/numpy functions here when their arguments are symbolic."""
from __future__ import annotations

import builtins
import inspect
import itertools
import math
import threading
import weakref

from jitdl import dtypes
from jitdl.errors import DefinitionError, user_loc
from jitdl.ir import build
from jitdl.ir.analysis import (SIZE_LIMIT, below, bounds, free_vars, reads_memory,
                               with_loop)
from jitdl.ir.nodes import (Access, Binary, BinOp, Cast, CmpOp, Compare, Const, Expr, Intrin,
                            IterVar, Reduce, ReduceOp, Select, SizeVar, Unary, UnOp, Var)
from jitdl.ir.printer import expr_text
from jitdl.ir.visit import expr_children, map_expr, substitute, walk_expr, walk_unique
from jitdl.te import naming
from jitdl.te.tensor import Compute, Declared, Tensor

# IterVars take part in arithmetic as their variable.
def _delegate(name):
    def method(self, *args):
        return getattr(self.var, name)(*args)
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__",
              "__truediv__", "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__",
              "__rmod__", "__neg__", "__lt__", "__le__", "__gt__", "__ge__", "__pow__"):
    setattr(IterVar, _name, _delegate(_name))
IterVar.__jitdl_expr__ = lambda self: self.var


# `k == i` on a loop axis written in a helper compares its variable (it was identity: a
# silent False); set after the class is made, so IterVar keeps its identity hash
IterVar.__eq__ = build.written_comparison(CmpOp.EQ, object.__eq__, lambda k: k.var)
IterVar.__ne__ = build.written_comparison(CmpOp.NE, object.__ne__, lambda k: k.var)


_required = threading.local()


class required_sizes:
    """The conditions on symbolic sizes a definition needs (require_size), collected over
    one trace: the kernel checks each at the call, once, before it runs. A nested trace's
    (a definition inlined into another) are the outer one's too."""

    def __enter__(self):
        self.saved = getattr(_required, "checks", None)
        self.saved_user = getattr(_required, "user", None)
        self.saved_live = getattr(_required, "live", None)
        self.saved_kept = getattr(_required, "kept", None)
        _required.checks, _required.user, _required.live = [], {}, set()
        _required.kept = []     # (the checks the uses of user reductions need, see
        #                          _guard_user_reductions)
        self.dropping = build.dropped_arms()
        self.dropped = self.dropping.__enter__()
        return _required.checks

    def __exit__(self, *exc):
        self.dropping.__exit__(None, None, None)
        _forget_dropped(self.dropped)
        mine, _required.checks = _required.checks, self.saved
        _required.user, _required.live = self.saved_user, self.saved_live
        _required.kept = self.saved_kept
        if self.saved is not None:
            self.saved.extend(c for c in mine if c not in self.saved)


# the operators of a size expression the call can evaluate (jitdl.pipeline.size_tree's)
_SIZE_OPS = frozenset({BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.FLOORDIV, BinOp.MOD, BinOp.MIN,
                       BinOp.MAX})


def _size_only(e):
    """Whether e is computed from the sizes of dynamic arguments by + - * // % min max."""
    if isinstance(e, (Const, SizeVar)):
        return True
    if isinstance(e, Cast):
        return dtypes.is_int(e.value.dtype) and _size_only(e.value)
    if isinstance(e, Binary):
        return e.op in _SIZE_OPS and _size_only(e.a) and _size_only(e.b)
    return False


def require_size(size, op, number, message, loc=None, error="shape"):
    """Have the call check `size op number` (op "==" or ">") of a symbolic size (an
    expression of the sizes of dynamic arguments) before the kernel runs; where it does
    not hold, the call raises an ArgumentShapeError (a ValueError; `error` "index": an
    ArgumentIndexError, an IndexError) with `message`, the sizes it names and `loc`. What
    no per-element check can do: it holds where nothing is read or written (an empty
    output). Returns the check taken (a true value), or None outside a trace or for a
    size the call cannot evaluate (the caller then checks as it can)."""
    checks = getattr(_required, "checks", None)
    if checks is None or not isinstance(size, Expr) or not _size_only(size):
        return None
    entry = (size, op, int(number), message, loc, error)
    if entry not in checks:
        checks.append(entry)
    return entry


def _nonzero_at_call(size, message):
    """Have the call check that the int of sizes `size` is not 0 (build's Python
    ZeroDivisionError of numbers of sizes): |size| > 0."""
    require_size(build.binary(BinOp.MAX, size, build.binary(BinOp.SUB, 0, size)), ">", 0,
                 message, user_loc())


build.nonzero_required = _nonzero_at_call


def _nonempty_at_call(op, axes):
    """A max, min, argmax or argmin over a symbolic extent that may be 0 at the call (a
    dynamic argument's empty axis): the call raises, as a constant extent 0 does here at
    the trace (NumPy raises too), where the reduction would give its identity (-inf)."""
    if op not in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.ARGMAX, ReduceOp.ARGMIN):
        return []
    loc, entries = None, []
    for a in axes:
        if isinstance(a, IterVar) and isinstance(a.extent, Expr):
            loc = loc or user_loc()
            entry = require_size(a.extent, ">", 0, _empty_text(op, axes), loc)
            if entry is not None:
                entries.append(entry)
    return entries


def _forget_dropped(dropped):
    """The call-time conditions of the user's reductions (_nonempty_at_call) used only in
    arms that a select's constant condition dropped (build.dropped_arms: jd.select(n > 1,
    max(X[i, k] for k in range(m)), 0.0) of n = 1) and in no stage: they never run."""
    pending, checks = getattr(_required, "user", None), _required.checks
    if not pending or not dropped:
        return
    dead = {}
    for arm in dropped:
        for n in walk_unique(arm):
            hit = pending.get(id(n))
            if hit is not None and hit[0] is n and id(n) not in _required.live:
                dead[id(n)] = hit[1]
    # (require_size shares equal entries: a check another reduction needs stays, that of
    # one used in a stage, `max(X[i, k] for k in range(m))` twice on one line with one in
    # a dropped arm, or of one no stage has walked)
    needed = list(_required.kept) + [e for k, (_, entries) in pending.items()
                                     if k not in dead and k not in _required.live
                                     for e in entries]
    for entries in dead.values():
        for entry in entries:
            if entry in checks and entry not in needed:
                checks.remove(entry)


def _positive(c, negated=False):
    """An integer expression of the sizes that is > 0 exactly where the condition c holds
    (where it does not, with `negated`), or None where c is not a condition on sizes alone
    (+ - * // % min max, compared, and/or/not)."""
    if isinstance(c, Const) and c.dtype == "bool":
        return Const(int(bool(c.value) != negated), "int64")
    if isinstance(c, Unary) and c.op == UnOp.NOT:
        return _positive(c.a, not negated)
    if isinstance(c, Binary) and c.op in (BinOp.AND, BinOp.OR) and c.dtype == "bool":
        a, b = _positive(c.a, negated), _positive(c.b, negated)
        if a is None or b is None:
            return None
        both = (c.op == BinOp.AND) != negated       # (not (x and y) = not x or not y)
        return build.binary(BinOp.MIN if both else BinOp.MAX, a, b)
    if not (isinstance(c, Compare) and _size_only(c.a) and _size_only(c.b) and
            dtypes.is_int(c.a.dtype) and dtypes.is_int(c.b.dtype)):
        return None
    op = c.op
    if negated:
        op = {CmpOp.LT: CmpOp.GE, CmpOp.LE: CmpOp.GT, CmpOp.GT: CmpOp.LE, CmpOp.GE: CmpOp.LT,
              CmpOp.EQ: CmpOp.NE, CmpOp.NE: CmpOp.EQ}[op]
    a, b = build.cast(c.a, "int64"), build.cast(c.b, "int64")
    if op == CmpOp.GT:
        return a - b
    if op == CmpOp.GE:
        return a - b + 1
    if op == CmpOp.LT:
        return b - a
    if op == CmpOp.LE:
        return b - a + 1
    apart = build.binary(BinOp.MAX, a - b, b - a)
    return apart if op == CmpOp.NE else 1 - apart


def _guard_user_reductions(body):
    """The conditions a user's reductions recorded (_nonempty_at_call), made to hold only
    where they are used: a reduction in an arm of a select whose condition is on the sizes
    alone (jd.select(m > 0, max(X[i, k] for k in range(m)), 0.0)) needs its range non-empty
    only where that arm is taken, `guard -> extent > 0`, written `max(1 - g, extent) > 0`
    for the guard's `g > 0` (_positive). A use under no such guard keeps the condition
    whole. One over a constant empty range (reduce() defers its error here: of m = 1,
    jd.select(m > 2, max(... for k in range(m - 2)), 0.0) folds it away) is refused where
    it is used unguarded, and checked at the call where guarded; not used, it is dead.
    Called with each stage's body, before its reductions become stages."""
    pending = getattr(_required, "user", None)
    if not pending:
        return
    found, seen, kept = {}, set(), []      # (kept: the guards, whose ids key `seen`)
    # (the empty axes of those over a constant empty range, alive in `pending`)
    empty = {id(a) for r, entries in pending.values() if isinstance(entries[0][0], Const)
             for a in r.axes if isinstance(a.extent, int) and a.extent == 0}

    def visit(e, guards):
        key = (id(e), tuple(id(g) for g in guards))
        if key in seen:
            return
        seen.add(key)
        hit = pending.get(id(e))
        if hit is not None and hit[0] is e:
            found.setdefault(id(e), []).append(guards)
            _required.live.add(id(e))
        elif isinstance(e, Reduce) and builtins.any(id(a) in empty for a in e.axes):
            # (one rebuilt since reduce() deferred its error: map_expr of its body)
            pending[id(e)] = (e, [(Const(0, "int64"), ">", 0, _empty_text(e.op, e.axes),
                                   user_loc(), "shape")])
            found.setdefault(id(e), []).append(guards)
        if isinstance(e, Select):
            visit(e.cond, guards)
            for arm, negated in ((e.t, False), (e.f, True)):
                g = _positive(e.cond, negated)
                kept.append(g)
                visit(arm, guards if g is None else guards + (g,))
            return
        for ch in expr_children(e):
            if isinstance(ch, Expr):
                visit(ch, guards)
    visit(body, ())
    checks = _required.checks
    for k, uses in found.items():
        entries = pending[k][1]
        for entry in entries:
            # (not one an earlier use needs whole: require_size shares equal entries)
            if entry in checks and entry not in _required.kept:
                checks.remove(entry)
        for guards in uses:
            for size, op, number, message, loc, error in entries:
                if not guards and isinstance(size, Const):
                    raise DefinitionError(message, loc)
                if guards:
                    g = guards[0]
                    for h in guards[1:]:
                        g = build.binary(BinOp.MIN, g, h)
                    size = build.binary(BinOp.MAX, 1 - g + number, build.cast(size, "int64"))
                new = (size, op, number, message, loc, error)
                if new not in checks:
                    checks.append(new)
                _required.kept.append(new)


def _empty_constant(op, axes):
    """Whether a reduction with no identity (max, min, argmax, argmin) is over a constant
    empty range."""
    return op in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.ARGMAX, ReduceOp.ARGMIN) and \
        builtins.any(isinstance(a.extent, int) and a.extent == 0 for a in axes)


def _empty_text(op, axes):
    return f"{op.value} over an empty range has no identity (NumPy raises here too): " \
        f"{_ranges_text(axes)}"


def _ranges_text(axes):
    return ", ".join(f"{a.name} in [{a.min}, {a.min + a.extent if a.min else a.extent})"
                     for a in axes)


def _selects_some(op, axes, cond):
    """The call-time condition (entries, as _nonempty_at_call's) that a max, min, argmax or
    argmin whose condition `cond` (a generator's `if`, where=) selects some point: a
    condition that no point of the axes' ranges meets (`if k > m` over range(m), `if m <
    3` of m = 2) gives no identity, as an empty range does; refused at the trace where
    the sizes are constants, checked at the call where they are symbolic. Conditions on
    data or on other indices are not known here: they select what they select (the
    identity where nothing is)."""
    if op not in (ReduceOp.MAX, ReduceOp.MIN, ReduceOp.ARGMAX, ReduceOp.ARGMIN) or \
            builtins.any(not isinstance(a.extent, Expr) and a.extent < 0 for a in axes):
        return []
    size = _selected_size(cond, axes)
    if size is None or isinstance(size, Const) and size.value > 0:
        return []
    text = f"{op.value} over an empty selection has no identity (NumPy raises here too): " \
        f"no point of {_ranges_text(axes)} meets its condition"
    if isinstance(size, Const):
        if getattr(_required, "user", None) is None:
            raise DefinitionError(text, user_loc())
        return [(Const(0, "int64"), ">", 0, text, user_loc(), "shape")]
    entry = require_size(size, ">", 0, text, user_loc())
    return [] if entry is None else [entry]


_BOUNDED_BY = {CmpOp.LT: (False, -1), CmpOp.LE: (False, 0), CmpOp.GT: (True, 1),
               CmpOp.GE: (True, 0)}        # k op e: (a lower bound?, e + this)
_MIRRORED = {CmpOp.LT: CmpOp.GT, CmpOp.LE: CmpOp.GE, CmpOp.GT: CmpOp.LT, CmpOp.GE: CmpOp.LE,
             CmpOp.EQ: CmpOp.EQ, CmpOp.NE: CmpOp.NE}


def _selected_size(cond, axes):
    """An int64 expression of the sizes that is <= 0 where `cond` selects no point of the
    axes' ranges (a bound of the points selected, not their count), or None where the
    condition tells nothing of that: comparisons of a reduce axis with sizes and
    constants (an axis's range narrowed by each), conditions on sizes alone, and/or of
    those; other conjuncts of an `and` are left out (they select fewer points still)."""
    if isinstance(cond, Binary) and cond.op == BinOp.OR and cond.dtype == "bool":
        a, b = _selected_size(cond.a, axes), _selected_size(cond.b, axes)
        return None if a is None or b is None else build.binary(BinOp.MAX, a, b)
    parts, terms, known = [cond], [], False
    lows = {id(a.var): [build.cast(a.min, "int64")] for a in axes}
    highs = {id(a.var): [build.cast(a.min + a.extent - 1, "int64")] for a in axes}
    while parts:
        c = parts.pop()
        if isinstance(c, Binary) and c.op == BinOp.AND and c.dtype == "bool":
            parts += [c.a, c.b]
            continue
        if isinstance(c, Binary) and c.op == BinOp.OR and c.dtype == "bool":
            s = _selected_size(c, axes)
        else:
            s = _positive(c)
        if s is not None:
            terms.append(s)
            known = True
            continue
        if not isinstance(c, Compare) or c.op not in _BOUNDED_BY and c.op != CmpOp.EQ:
            continue
        for v, e, cmp in ((c.a, c.b, c.op), (c.b, c.a, _MIRRORED[c.op])):
            if id(v) in lows and _size_only(e) and dtypes.is_int(e.dtype):
                e = build.cast(e, "int64")
                for lower, shift in ((True, 0), (False, 0)) if cmp == CmpOp.EQ else \
                        (_BOUNDED_BY[cmp],):
                    (lows if lower else highs)[id(v)].append(e + shift if shift else e)
                known = True
                break
    if not known:
        return None
    for a in axes:
        lo, hi = lows[id(a.var)], highs[id(a.var)]
        terms.append(_extreme(BinOp.MIN, hi) - _extreme(BinOp.MAX, lo) + 1)
    return _extreme(BinOp.MIN, terms)


def _extreme(op, values):
    out = values[0]
    for v in values[1:]:
        out = build.binary(op, out, v)
    return out


def _as_int(x, what):
    try:
        return int(x.__index__())
    except (TypeError, AttributeError):
        raise DefinitionError(f"{what} must be a concrete integer, got {x!r}", user_loc()) \
            from None


def _as_extent(x, what):
    """A concrete int, or an int64 expression over the size variables of dynamic
    arguments (a symbolic extent)."""
    if isinstance(x, Expr) and not isinstance(x, Const) and dtypes.is_int(x.dtype) \
            and not builtins.any(isinstance(n, Access) for n in walk_expr(x)):
        return build.cast(x, "int64")
    if isinstance(x, Const):
        x = x.value
    return _as_int(x, what)


def reduce_axis(dom, name=None) -> IterVar:
    """A reduction axis over range(dom) or range(lo, hi); the extent may be symbolic
    (over the sizes of dynamic arguments) when the low bound is 0."""
    if isinstance(dom, (tuple, list)):
        lo, hi = (_as_int(d, "reduce_axis bound") for d in dom)
        extent = builtins.max(hi - lo, 0)
    else:
        lo, extent = 0, _as_extent(dom, "reduce_axis extent")
        if isinstance(extent, int):
            extent = builtins.max(extent, 0)
    var = Var(name) if name else naming.remember(Var(naming.fresh("k")))
    return IterVar(var, lo, extent, reduce=True)


def _shape(shape):
    if isinstance(shape, (int,)) or hasattr(shape, "__index__"):
        shape = (shape,)
    out = []
    for d in shape:
        n = _as_extent(d, "a tensor dimension")
        if isinstance(n, Expr):
            out.append(_sized(n))
            continue
        if n < 0:
            raise DefinitionError(f"tensor dimension must be >= 0, got {n}", user_loc())
        out.append(n)
    return tuple(out)


def _sized(n):
    """A symbolic tensor dimension, which may read only the sizes of dynamic arguments: a
    scalar argument (or an index) is a value of each call, so a size from it is an error
    naming it, and saying how to make it a value of the trace."""
    var = next((v for v in walk_unique(n) if isinstance(v, Var) and not isinstance(v, SizeVar)),
               None)
    if var is not None:
        text = expr_text(n.value if isinstance(n, Cast) else n)
        reads = "" if text == var.name else f", which reads `{var.name}`"
        raise DefinitionError(
            f"a tensor dimension must be computed from the arguments' shapes, constants and "
            f"static arguments, got `{text}`{reads}, a value known only when the kernel "
            f"runs; make it a static argument (@jd.compute(static=(\"{var.name}\",))) to "
            f"build a kernel per value", user_loc())
    return n


def tensor(shape, fcompute=None, name=None, dtype=None):
    """jd.tensor(shape, lambda i, j: expr, name=) defines a stage; jd.tensor(shape) declares
    a shape that index notation (`T[i, j] = ...`) then fills."""
    shape = _shape(shape)
    if fcompute is None:
        return Tensor(name or naming.fresh("T"), shape, dtype and dtypes.normalize(dtype),
                      Declared(user_loc()), auto_named=name is None)
    axes = tuple(IterVar(Var(p), 0, n) for p, n in zip(_index_names(fcompute, shape, name),
                                                       shape))
    body = build.as_expr(fcompute(*[a.var for a in axes]))
    if dtype is not None:
        body = build.cast(body, dtype)
    return make_stage(name, axes, body, user_loc())


def _index_names(fcompute, shape, name):
    """One index name per dimension, from the lambda's parameters; `*idx` takes the
    dimensions the named parameters before it leave (a rank-generic definition)."""
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        raise DefinitionError(f"the second argument of jd.tensor must be a function of the "
                              f"indices, got {fcompute!r}", user_loc()) from None
    fixed = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    star = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    if len(fixed) == len(shape) or star is not None and len(fixed) <= len(shape):
        return fixed + [f"{star}{d}" for d in range(len(shape) - len(fixed))]
    takes = f"{len(fixed)}{' or more' if star else ''}"
    raise DefinitionError(
        f"the lambda of tensor {name or ''} takes {takes} index argument(s) but the shape "
        f"{shape} has {len(shape)} dimension(s)", user_loc())


def make_stage(name, axes, body, loc, lifted=False) -> Tensor:
    """A compute stage; reductions nested inside arithmetic become stages of their own.
    `lifted`: a part of a stage already made (whose guards were seen there)."""
    auto = name is None
    name = name or naming.fresh("T")
    if not lifted:
        _refuse_unfilled(name, body, loc)
        _guard_user_reductions(body)
    if isinstance(body, Reduce):
        every = axes + body.axes
        inner = _hoist_shared(name, body.body, axes, every, loc, body.where is not None)
        inner = _extract(name, inner, every, loc)
        where = None if body.where is None else _extract(name, body.where, every, loc)
        body = Reduce(body.op, inner, body.axes, where, body.dtype)
    else:
        body = _extract(name, _hoist_shared(name, body, axes, axes, loc), axes, loc)
    if body.weak:
        body = build.cast(body, body.dtype)
    return Tensor(name, tuple(a.extent for a in axes), body.dtype, Compute(axes, body, loc),
                  auto_named=auto)


def _refuse_unfilled(name, body, loc):
    """A stage may not read a tensor declared with jd.tensor(shape) that no statement has
    filled yet: its own declaration (`Y[i] = Y[i - 1] + X[i]`, a recurrence, which
    definitions do not express) or one filled later."""
    read = next((n for n in walk_unique(body) if isinstance(n, Access)
                 and isinstance(n.tensor.op, Declared)), None)
    if read is None:
        return
    t = read.tensor
    if t.name == name:
        raise DefinitionError(
            f"{name} reads its own elements (`{expr_text(read)}`): an element of a tensor "
            f"cannot depend on others of the same tensor (a recurrence or scan, which "
            f"definitions do not express); compute it from other tensors, e.g. a prefix sum "
            f"as `sum(X[k] for k in range(i + 1))`", loc)
    raise DefinitionError(
        f"{name} reads {t.name} (`{expr_text(read)}`), which was declared with "
        f"jd.tensor(shape) but is not filled yet; fill it (`{t.name}[...] = ...`) before "
        f"the statements that read it", loc)


# an expression whose tree (a subexpression counted at each of its uses) passes this many
# nodes gets stages of its own for its large shared subexpressions
_TREE_MAX = 4096
_SHARED_MIN = 48


def _hoist_shared(name, e, axes, all_axes, loc, under_where=False):
    """A subexpression used twice is one Python object: `v = v * v` repeated builds a DAG
    whose tree doubles with every step (14 squarings in one lambda: 2^14 multiplies, and
    44 s to compile). Past _TREE_MAX nodes, each shared subexpression of more than
    _SHARED_MIN nodes (counting those already hoisted as one) becomes a stage over the axes
    it uses; the automatic schedule then inlines or stores them by their size. One that
    uses a reduction's axes (all_axes beyond the data axes `axes`) moves only where its
    stage is no larger than the largest tensor it reads (sum_k f(A[i, k] * B[k, j]) would
    make an (i, j, k) array). Nothing inside a nested reduction moves; a guarded one
    (under a select's branches, the right side of a logical and/or, or the body of a
    reduction with a where=: evaluated only where its guard holds) moves only where every
    read it makes is inside its tensor over the whole of the axes (_safe_anywhere): a
    stage computes it everywhere, and arithmetic never traps (x // 0 is 0). Without that,
    `z = select(z * z < 4, z * z + c, z)` repeated 6 times took 40 s to compile."""
    order, refs = [], {}
    stack, seen = [(e, False)], set()
    while stack:                          # the distinct nodes, children first
        n, done = stack.pop()
        if done:
            order.append(n)
        elif id(n) not in seen:
            seen.add(id(n))
            stack.append((n, True))
            for c in expr_children(n):
                refs[id(c)] = refs.get(id(c), 0) + 1
                stack.append((c, False))
    tree = {}
    for n in order:
        tree[id(n)] = 1 + builtins.sum(tree[id(c)] for c in expr_children(n))
    if tree[id(e)] <= _TREE_MAX:
        return e
    guarded, nested = ({id(n) for n in order} if under_where else set()), set()
    for n in order:
        logical = isinstance(n, Binary) and n.op in (BinOp.AND, BinOp.OR)
        if isinstance(n, (Select, Reduce)) or logical:
            marks = nested if isinstance(n, Reduce) else guarded
            todo = list(expr_children(n))[1 if isinstance(n, Select) or logical else 0:]
            while todo:
                c = todo.pop()
                if id(c) not in marks:
                    marks.add(id(c))
                    todo.extend(expr_children(c))
    by_var = {a.var: a for a in all_axes}
    data = {a.var for a in axes}
    uses, size, read, memo, count = {}, {}, {}, {}, itertools.count()
    for n in order:
        kids = expr_children(n)
        uses[id(n)] = set().union(*(uses[id(c)] for c in kids)) | (
            {n} if isinstance(n, Var) and n in by_var else set()) | (
            {"memory"} if isinstance(n, Access) else set())
        size[id(n)] = 1 + builtins.sum(size[id(c)] for c in kids)
        # (the most elements of a tensor n reads; a symbolic shape counts as none)
        read[id(n)] = builtins.max([read[id(c)] for c in kids], default=0)
        if isinstance(n, Access) and builtins.all(isinstance(d, int) for d in n.tensor.shape):
            read[id(n)] = builtins.max(read[id(n)], math.prod(n.tensor.shape))
        if refs.get(id(n), 0) < 2 or size[id(n)] <= _SHARED_MIN or id(n) in nested \
                or n.weak or "memory" not in uses[id(n)] \
                or id(n) in guarded and not _safe_anywhere(n, all_axes):
            continue
        outer = [a for a in all_axes if a.var in uses[id(n)]]
        if builtins.any(a.var not in data for a in outer) and not (
                builtins.all(isinstance(a.extent, int) for a in outer)
                and math.prod(a.extent for a in outer) <= read[id(n)]):
            continue
        body = map_expr(n, lambda x: None, memo)
        new_axes = tuple(IterVar(Var(a.var.name), 0, a.extent) for a in outer)
        sub = {a.var: (b.var + a.min if a.min else b.var) for a, b in zip(outer, new_axes)}
        stage = make_stage(f"{name}_shared{next(count)}", new_axes, substitute(body, sub), loc,
                           lifted=True)
        memo[id(n)] = Access(stage, tuple(a.var - a.min if a.min else a.var for a in outer),
                             loc)
        size[id(n)] = 1
    return map_expr(e, lambda x: None, memo)


def _safe_anywhere(e, all_axes):
    """Whether every read of e is inside its tensor for every value of the axes (proved,
    not checked at run time; an index that reads memory is not), so that e may run where
    a guard around it would not."""
    ranges = {}
    for a in all_axes:
        ranges = with_loop(ranges, a.var, a.min, a.extent)
    for acc in walk_unique(e):
        if not isinstance(acc, Access):
            continue
        if acc.checked or acc.carried or not _static_reads(acc.tensor):
            return False
        for idx, n in zip(acc.indices, acc.tensor.shape):
            if reads_memory(idx):
                return False
            rng = ranges if isinstance(n, int) else {
                **{v: (0, SIZE_LIMIT - 1) for v in walk_expr(n) if isinstance(v, Var)},
                **ranges}
            if bounds(idx, rng)[0] < 0 or not below(idx, n, rng):
                return False
    return True


_STATIC_READS = weakref.WeakKeyDictionary()       # tensor -> _static_reads(tensor)


def _static_reads(tensor):
    """Whether a tensor's stage and every stage it reads make only reads whose indices read
    no memory and are not checked at run time: inlined into a stage computed everywhere,
    a data-dependent read (x[idx[j]]) would run, and raise, where a guard excluded it.
    (Kept per tensor: a hoisted chain asks it of each earlier step.)"""
    if not isinstance(tensor.op, Compute):
        return True
    if tensor not in _STATIC_READS:
        for t in stages_of([tensor]):            # producers first, without recursion
            if t not in _STATIC_READS:
                _STATIC_READS[t] = builtins.all(
                    not (a.checked or a.carried or builtins.any(map(reads_memory, a.indices)))
                    and _STATIC_READS.get(a.tensor, True)
                    for a in walk_unique(t.op.body) if isinstance(a, Access))
    return _STATIC_READS[tensor]


def _extract(name, e, axes, loc):
    """Replace every Reduce inside e by an access to a new stage over the axes it uses."""
    count = itertools.count()
    by_var = {a.var: a for a in axes}
    # (a reduction reading the index of one around it, `sum(X[i, k] for k in range(l + 1))`
    # in a sum over l, is lifted with that one, whose stage then lifts it over l too)
    nested = {a.var for n in walk_unique(e) if isinstance(n, Reduce) for a in n.axes}

    def lift(n):
        if not isinstance(n, Reduce):
            return None
        own = set(a.var for a in n.axes)
        used = [v for v in free_vars(n) if v not in own]
        inside = {a.var for r in walk_unique(n) if isinstance(r, Reduce) for a in r.axes}
        if builtins.any(v in nested and v not in inside for v in used):
            return None
        outer = [by_var[v] for v in used if v in by_var]
        new_axes = tuple(IterVar(Var(a.var.name), 0, a.extent) for a in outer)
        sub = {a.var: (b.var + a.min if a.min else b.var) for a, b in zip(outer, new_axes)}
        red = Reduce(n.op, substitute(n.body, sub), n.axes,
                     None if n.where is None else substitute(n.where, sub), n.dtype)
        stage = make_stage(f"{name}_{n.op.value}{next(count)}", new_axes, red, loc,
                           lifted=True)
        return Access(stage, tuple(a.var - a.min if a.min else a.var for a in outer), loc)
    # (a reduction that is one object at several places is one stage, read at each)
    return map_expr(e, lift, {})


_IDENTITY_DTYPE = {ReduceOp.ANY: "bool", ReduceOp.ALL: "bool"}


def reduce(op: ReduceOp, expr, axis, where=None, user=False) -> Reduce:
    """The reduction of expr over the reduce axes `axis`; `user`: one the user wrote (jd.max,
    a generator's max), whose symbolic extents must not be 0 at the call where it has no
    identity (the op library's own reductions may reduce nothing on purpose)."""
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not (isinstance(a, IterVar) and a.reduce):
            raise DefinitionError(
                f"axis= of jd.{op.value} must be reduce axes made by jd.reduce_axis, got {a!r}",
                user_loc())
    entries = ()
    if _empty_constant(op, axes):
        if not user or getattr(_required, "user", None) is None:
            raise DefinitionError(_empty_text(op, axes), user_loc())
        # (a user's: refused where it is used, as a select's arm taken at some sizes:
        # `jd.select(m > 2, max(... for k in range(m - 2)), 0.0)` of m = 1 drops it)
        entries = [(Const(0, "int64"), ">", 0, _empty_text(op, axes), user_loc(), "shape")]
    elif user:
        entries = _nonempty_at_call(op, axes)
    if user and where is not None and not _empty_constant(op, axes):
        entries = list(entries) + _selects_some(op, axes, build.truth(where))
    body = build.as_expr(expr)
    if op in (ReduceOp.ANY, ReduceOp.ALL):
        body = build.truth(body)
    elif body.dtype == "bool" and op in (ReduceOp.SUM, ReduceOp.PROD):
        body = build.cast(body, "int64")
    elif body.weak:
        body = build.cast(body, body.dtype)
    if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
        if body.dtype == "bool":
            body = build.cast(body, "int8")
        elif body.weak:
            body = build.cast(body, body.dtype)
    cond = None if where is None else build.truth(where)
    if isinstance(cond, Const) and cond.value:
        cond = None
    # (a where= False at these sizes, `sum(... for k in range(m) if m > 2)` of m = 2, stays:
    # it selects no element, as the dynamic kernel's `m > 2` does there)
    dtype = "int64" if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) else body.dtype
    r = Reduce(op, body, axes, cond, dtype)
    if entries and getattr(_required, "user", None) is not None:
        _required.user[id(r)] = (r, entries)    # (see _guard_user_reductions)
    return r


def _reducer(op):
    def fn(expr, axis=None, where=None):
        if axis is None:
            raise DefinitionError(
                f"jd.{op.value}(x) needs axis=: a reduce axis (jd.reduce_axis) or a list of them",
                user_loc())
        return reduce(op, expr, axis, where, user=True)
    fn.__name__ = op.value
    fn.__doc__ = f"Reduction: the {op.value} of expr over the reduce axes `axis`, where `where` holds."
    return fn


sum = _reducer(ReduceOp.SUM)  # noqa: A001
prod = _reducer(ReduceOp.PROD)
argmax = _reducer(ReduceOp.ARGMAX)
argmax.__doc__ = "Reduction: the int64 position of the first maximum of expr over `axis`."
argmin = _reducer(ReduceOp.ARGMIN)
argmin.__doc__ = "Reduction: the int64 position of the first minimum of expr over `axis`."


def _minmax(op, binop):
    def fn(*args, axis=None, where=None):
        if axis is not None:
            if len(args) != 1:
                raise DefinitionError(f"jd.{op.value}(x, axis=k) takes one expression",
                                      user_loc())
            return reduce(op, args[0], axis, where, user=True)
        if len(args) == 1:
            raise DefinitionError(
                f"jd.{op.value}(x) with one argument needs axis= (a reduction); "
                f"jd.{op.value}(a, b, ...) is elementwise", user_loc())
        out = args[0]
        for a in args[1:]:
            out = build.binary(binop, out, a)
        return out
    fn.__name__ = op.value
    word = {ReduceOp.MAX: "largest", ReduceOp.MIN: "smallest"}[op]
    fn.__doc__ = (f"jd.{op.value}(a, b, ...): the {word} of the expressions, elementwise; "
                  f"jd.{op.value}(expr, axis=k): the reduction over reduce axes k.")
    return fn


max = _minmax(ReduceOp.MAX, BinOp.MAX)  # noqa: A001
min = _minmax(ReduceOp.MIN, BinOp.MIN)  # noqa: A001


def _combine(op, binop):
    def fn(*conds, axis=None, where=None):
        if axis is not None:
            return reduce(op, conds[0], axis, where)
        out = build.as_expr(op == ReduceOp.ALL)
        for c in conds:
            out = build.logical(binop, out, c)
        return out
    fn.__name__ = op.value
    word = {ReduceOp.ALL: "and", ReduceOp.ANY: "or"}[op]
    fn.__doc__ = (f"jd.{op.value}(a, b, ...): the logical {word} of the conditions; "
                  f"jd.{op.value}(cond, axis=k): the reduction over reduce axes k.")
    return fn


all = _combine(ReduceOp.ALL, BinOp.AND)  # noqa: A001
any = _combine(ReduceOp.ANY, BinOp.OR)  # noqa: A001


def select(cond, t, f):
    """cond ? t : f, elementwise."""
    return build.select(cond, t, f)


where = select


def _intrin(fn, what):
    def f(x):
        return build.call(fn, x)
    f.__name__ = fn.value
    f.__doc__ = f"jd.{fn.value}(x): {what}, elementwise (x a scalar expression)."
    return f


exp = _intrin(Intrin.EXP, "e to the power x")
log = _intrin(Intrin.LOG, "the natural logarithm of x")
sqrt = _intrin(Intrin.SQRT, "the square root of x")
rsqrt = _intrin(Intrin.RSQRT, "1 / sqrt(x)")
tanh = _intrin(Intrin.TANH, "the hyperbolic tangent of x")
sigmoid = _intrin(Intrin.SIGMOID, "the logistic function 1 / (1 + exp(-x))")
erf = _intrin(Intrin.ERF, "the error function of x")
sin = _intrin(Intrin.SIN, "the sine of x (radians)")
cos = _intrin(Intrin.COS, "the cosine of x (radians)")
tan = _intrin(Intrin.TAN, "the tangent of x (radians)")
atan = _intrin(Intrin.ATAN, "the arctangent of x, in radians")
abs = _intrin(Intrin.ABS, "the absolute value of x")  # noqa: A001
floor = _intrin(Intrin.FLOOR, "the largest integer value <= x")
ceil = _intrin(Intrin.CEIL, "the smallest integer value >= x")
rint = _intrin(Intrin.ROUND, "x rounded to an integer value, halves to even")


def round(x):  # noqa: A001
    """jd.round(x): x rounded to an integer value, halves to even; an int stays itself."""
    # (of its dtype, as np.round's and Python's round; np.rint's is a float)
    x = build.as_expr(x)
    return x if dtypes.is_int(x.dtype) else rint(x)


trunc = _intrin(Intrin.TRUNC, "x rounded toward 0")
sign = _intrin(Intrin.SIGN, "-1, 0 or 1 by the sign of x")
log1p = _intrin(Intrin.LOG1P, "log(1 + x), exact for small x")
expm1 = _intrin(Intrin.EXPM1, "exp(x) - 1, exact for small x")
isnan = _intrin(Intrin.ISNAN, "whether x is NaN")
isinf = _intrin(Intrin.ISINF, "whether x is +inf or -inf")
isfinite = _intrin(Intrin.ISFINITE, "whether x is neither infinite nor NaN")


def pow(x, y):  # noqa: A001
    """jd.pow(x, y): x to the power y, elementwise (NumPy's power)."""
    return build.binary(BinOp.POW, x, y)


def atan2(y, x):
    """jd.atan2(y, x): the angle of the point (x, y) in radians, elementwise."""
    return build.binary(BinOp.ATAN2, y, x)


def fmod(x, y):
    """jd.fmod(x, y): the remainder of x / y with the sign of x, elementwise (C's fmod)."""
    return build.binary(BinOp.FMOD, x, y)


def _caster(dt):
    def f(x):
        return build.strong(build.cast(x, dt))      # (a NumPy scalar type: strong)
    f.__name__ = dt
    f.__doc__ = f"jd.{dt if dt != 'bool' else 'bool_'}(x): x cast to {dt}, elementwise."
    return f


float32 = _caster("float32")
float64 = _caster("float64")
int8 = _caster("int8")
int16 = _caster("int16")
int32 = _caster("int32")
int64 = _caster("int64")
uint8 = _caster("uint8")
bool_ = _caster("bool")
# NumPy's scalar types by name, which a definition's own code may call on a symbolic value
# (`np.float32(1 / np.sqrt(d))` of a dynamic size d): these casts then
CASTS = {"float32": float32, "float64": float64, "int8": int8, "int16": int16,
         "int32": int32, "int64": int64, "uint8": uint8, "bool_": bool_}

INTRINSICS = {
    "exp": exp, "log": log, "sqrt": sqrt, "rsqrt": rsqrt, "tanh": tanh, "sigmoid": sigmoid,
    "erf": erf, "sin": sin, "cos": cos, "tan": tan, "atan": atan, "arctan": atan,
    "abs": abs, "fabs": abs, "absolute": abs, "floor": floor, "ceil": ceil, "round": round,
    "rint": rint, "trunc": trunc, "sign": sign, "log1p": log1p, "expm1": expm1,
    "isnan": isnan, "isinf": isinf, "isfinite": isfinite, "pow": pow, "power": pow,
    "atan2": atan2, "arctan2": atan2, "fmod": fmod, "maximum": max, "minimum": min,
    "max": max, "min": min, "sum": sum, "prod": prod, "all": all, "any": any,
    "argmax": argmax, "argmin": argmin,
    "select": select, "where": select,
}


def stages_of(outputs):
    """All compute stages reachable from outputs, producers before consumers."""
    order, seen = [], set()
    for out in outputs:             # (depth-first without recursion: a definition may
        stack = [(out, False)]      # chain a thousand ops)
        while stack:
            t, done = stack.pop()
            if done:
                order.append(t)
                continue
            if id(t) in seen or not isinstance(t.op, Compute):
                continue
            seen.add(id(t))
            stack.append((t, True))
            reads = [n.tensor for n in walk_unique(t.op.body) if isinstance(n, Access)]
            stack.extend((r, False) for r in reversed(reads))
    return order


def is_expr(x) -> bool:
    return isinstance(x, (Expr, IterVar))
