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
from jitdl.ir.analysis import INF, affine, bare_uses, bounds, form_bounds, upper_ends
from jitdl.ir.nodes import Access, BinOp, Binary, Const, IterVar, Reduce, SizeVar, Var
from jitdl.ir.visit import map_expr, walk_expr, walk_unique
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
    parts = [(k, c) for k, c in form.items() if type(k) is not int and _mentions(k, unknown)]
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


def _form_add(*terms):
    """The sum of affine forms, each given as (coefficient, form)."""
    out = {1: 0}
    for c, f in terms:
        for k, v in f.items():
            out[k] = out.get(k, 0) + c * v
    return {k: v for k, v in out.items() if v != 0 or type(k) is int}


def _form_expr(f):
    """An affine form over sizes as an int64 expression (`X_n0 - 1`, `X_n0`)."""
    e, const = None, f.get(1, 0)
    for k, c in sorted(((k, c) for k, c in f.items() if type(k) is not int and c),
                       key=lambda kc: kc[1] < 0):        # (X_n0 - W_n0, not -1 * W_n0 + X_n0)
        t = k if abs(c) == 1 else abs(c) * k
        if e is None and c < 0:     # (sizes are computed with + - * // min max: no negation)
            e, const = build.binary(BinOp.SUB, build.as_expr(const), t), 0
        else:
            e = t if e is None else e - t if c < 0 else e + t
    if e is None:
        return build.as_expr(const)
    return e + const if const > 0 else e - (-const) if const else e


def _of_sizes(f):
    """Whether a form's terms are sizes: size variables, and expressions of them alone
    (`V_n0 // 2`, an inferred extent), never of loop indices."""
    return all(type(k) is int or isinstance(k, SizeVar) or all(
        isinstance(v, SizeVar) for v in walk_unique(k) if isinstance(v, Var)) for k in f)


def _least(forms):
    """{sizes: form} keeping, of forms over the same sizes, the one with the least
    constant (`X_n0 - 2` of `X_n0 - 1` and `X_n0 - 2`); ints are forms of no sizes."""
    best = {}
    for f in forms:
        key = tuple(sorted((repr(k), c) for k, c in f.items() if type(k) is not int))
        if key not in best or f[1] < best[key][1]:
            best[key] = f
    return best


def solve_sized(idx, n, unknown, known, sym):
    """solve() where a size or a range is symbolic: (var, lo, his) for `0 <= idx <= n - 1`
    with each hi an affine form over sizes ({atom: coef, 1: const}), one per upper end of
    n (see size_forms), where idx is `i + e`, `-i + e`, `c*i + e` or `(c*i + e) // d`, e
    built from constants, sizes and indices with known ranges (ints in `known`, forms in
    `sym`: a reduction over range(R) of a dynamic size); else None. `Y[i] = X[i + 1] -
    X[i]` makes i range over [0, X_n0 - 1), `Y[i] = X[i // 3]` over [0, 3 * X_n0)."""
    forms = size_forms(n)
    if forms is None:
        return None
    return _solve_forms(idx, 0, [_form_add((1, f), (1, {1: -1})) for f in forms],
                        unknown, known, sym)


def _solve_forms(idx, lo, his, unknown, known, sym):
    """solve_sized() for `lo <= idx <= hi` for every hi of `his` (an int lo, forms over
    sizes)."""
    if _floordiv_by_constant(idx):          # x // d in [lo, hi]: x in [lo*d, hi*d + d - 1]
        d = int(idx.b.value)
        return _solve_forms(idx.a, lo * d, [_form_add((d, h), (1, {1: d - 1})) for h in his],
                            unknown, known, sym)
    form = affine(idx)
    parts = [(k, c) for k, c in form.items() if type(k) is not int and _mentions(k, unknown)]
    if len(parts) != 1 or parts[0][1] == 0:
        return None
    atom, c = parts[0]
    elo, ehi = {1: form.get(1, 0)}, {1: form.get(1, 0)}      # e's bounds, as forms
    for k, ck in form.items():
        if type(k) is int or k is atom:
            continue
        if isinstance(k, SizeVar):
            klo = khi = {k: 1}
        elif k in known:
            klo, khi = ({1: b} for b in known[k])
        elif k in sym:
            klo, khi = sym[k]
        else:
            return None
        if ck < 0:
            klo, khi = khi, klo
        elo, ehi = _form_add((1, elo), (ck, klo)), _form_add((1, ehi), (ck, khi))
    if not isinstance(atom, Var) or c < -1:
        return None
    if c > 1:       # c*i in [lo - elo, hi - ehi]: i from ceil((lo - elo) / c) to the floor
        if len(elo) != 1:                       # of each hi - ehi over c (a size atom)
            return None
        return atom, -((elo[1] - lo) // c), [_over(_form_add((1, h), (-1, ehi)), c)
                                             for h in his]
    if c == 1:      # i in [lo - elo, hi - ehi] for each upper end
        ilo = _form_add((1, {1: lo}), (-1, elo))
        ihis = [_form_add((1, h), (-1, ehi)) for h in his]
    else:           # i in [ehi - hi, elo - lo]
        if len(his) != 1:
            return None
        ilo, ihis = _form_add((1, ehi), (-1, his[0])), [_form_add((1, elo), (1, {1: -lo}))]
    if len(ilo) != 1:
        # a lower end over sizes: decided only where it is never above 0 (`X[i + R]`)
        if ilo[1] > 0 or any(c > 0 or not isinstance(k, SizeVar)
                             for k, c in ilo.items() if type(k) is not int):
            return None
        ilo = {1: ilo[1]}
    if not ihis:
        return None
    return atom, ilo[1], ihis


def _over(f, c):
    """floor(f / c) of a form over sizes, as a form: an int, or the atom `(f) // c`."""
    if len(f) == 1:
        return {1: f[1] // c}
    return {build.binary(BinOp.FLOORDIV, _form_expr(f), build.as_expr(c)): 1, 1: 0}


def size_forms(n):
    """Affine forms over sizes that any index valid in a dimension of size n is below (an
    int n: itself): n, each side of a min, `a` of `max(a, 0)` (an inferred extent: an
    index is valid only where it is at least 1, so there it is a); None where one of them
    is not a form over sizes (a side left out would let the range exceed it)."""
    if isinstance(n, int):
        return [{1: n}]
    forms = [affine(e) for e in upper_ends(n)]
    return forms if all(_of_sizes(f) for f in forms) else None


def _extent(ends):
    """An index's extent from the upper ends its accesses allow (ints, and forms over
    sizes): the least of them plus one, and never negative (an empty range makes an empty
    tensor, as NumPy); an int, or an int64 expression of the sizes (forms with the same
    sizes compare by their constants: X[i] and X[i + 1] give X_n0 - 1)."""
    best = _least([_form_add((1, {1: h} if isinstance(h, int) else h), (1, {1: 1}))
                   for h in ends])
    if list(best) == [()]:
        return max(best[()][1], 0)
    forms = list(best.values())
    out = _form_expr(forms[0])
    for f in forms[1:]:
        out = build.binary(BinOp.MIN, out, _form_expr(f))
    if len(forms) == 1 and forms[0][1] >= 0 and all(
            c > 0 and isinstance(k, SizeVar) for k, c in forms[0].items() if type(k) is not int):
        return out          # X_n0 + 2: never negative
    return build.binary(BinOp.MAX, out, build.as_expr(0))


def _upper(ends):
    """The upper end that indices read through another index may take it to: the one
    end (the least constant where the ends differ only in it), or None where the least
    of several is not one form (an index that depends on it is then not inferred)."""
    best = _least([{1: h} if isinstance(h, int) else h for h in ends])
    if len(best) != 1:
        return None
    f = next(iter(best.values()))
    return f[1] if list(best) == [()] else f


def infer_ranges(variables, body, what, pending=(), dropped=()):
    """{Var: extent} for the index variables of one index-notation statement. `dropped`:
    the arms of selects whose condition was a constant (build.dropped_arms), whose
    accesses count as those of the body do."""
    nodes = [n for root in (body, *dropped) for n in walk_unique(root)]
    axes = [a for n in nodes if isinstance(n, Reduce) for a in n.axes]
    # reduction variables with bounds depending on outer indices are not known yet, and
    # those of empty reductions take no value: dimensions with them bound nothing
    later = {ax.var for ax, _, _ in pending} | {a.var for a in axes
                                                if not isinstance(a.extent, int)}
    empty = {a.var for a in axes if a.var not in later and a.extent <= 0}
    known = {a.var: (a.min, a.min + a.extent - 1) for a in axes
             if a.var not in later and a.var not in empty}
    # reductions over a dynamic size (range(R), R = W.shape[0]): their range as forms
    waiting = {ax.var for ax, _, _ in pending}
    sym = {a.var: ({1: a.min}, _form_add((1, affine(a.extent)), (1, {1: a.min - 1})))
           for a in axes if a.var in later and a.var not in waiting and isinstance(a.min, int)
           and _of_sizes(affine(a.extent))}
    unknown = set(variables) | (later - set(sym)) | empty
    found = {v: [] for v in variables}   # v -> [(lo, hi, access)]
    sizes = {}      # v -> the symbolic sizes of the dimensions it is the whole index of
    accs = [n for n in nodes if isinstance(n, Access)]      # selects, filters too
    # (the dimensions indexed by a bare index that no guard relates to their size: the
    # call checks those equal, see check_shape_agreement; a guarded one only bounds, as
    # one in a dropped arm does, which the call does not see)
    unguarded = {}
    bare_uses(body, unguarded)
    unguarded = {(id(acc), dim) for uses in unguarded.values() for acc, dim in uses}
    guarded = {idx for acc in accs for dim, idx in enumerate(acc.indices)
               if idx in found and (id(acc), dim) not in unguarded}
    # (the fixed sizes the call can check a bare index's symbolic sizes against: those of
    # the unguarded dimensions it indexes whole in the body, see check_shape_agreement)
    tied = {}
    bare_uses(body, tied)
    tied = {v: {acc.tensor.shape[d] for acc, d in uses if isinstance(acc.tensor.shape[d], int)}
            for v, uses in tied.items()}
    while True:
        fixed = {}
        for acc in accs:
            for dim, idx in enumerate(acc.indices):
                n = acc.tensor.shape[dim]
                if not isinstance(n, int):
                    if idx in found and (id(acc), dim) in unguarded:
                        # (a dynamic argument's size: checked equal to the others at the
                        # call, see check_shape_agreement)
                        if n not in sizes.setdefault(idx, []):
                            sizes[idx].append(n)
                        continue
                    sol = None
                else:
                    sol = solve(idx, 0, n - 1, unknown, known)
                if not isinstance(n, int) or sol is None and _mentions(idx, sym):
                    sol = solve_sized(idx, n, unknown, known, sym)
                    if sol is not None and sol[0] in found:
                        fixed.setdefault(sol[0], []).extend((sol[1], hi, acc) for hi in sol[2])
                    continue
                if sol is not None and sol[0] in found:
                    fixed.setdefault(sol[0], []).append((sol[1], sol[2], acc))
        if not fixed:
            break
        for v, cons in fixed.items():        # indices bounded in this round are known
            found[v] = cons
            up = _upper(_ends(cons, sizes.get(v, ())))
            if isinstance(up, int):
                known[v] = (0, max(up, -1))
            elif up is not None:
                sym[v] = ({1: 0}, up)
            unknown.discard(v)
    extents = {}
    for v in variables:
        cons = found[v]
        if not cons and v in sizes:
            extents[v] = sizes[v][0]
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
        if lo > 0:
            worst = max(cons, key=lambda c: c[0])[2]
            raise DefinitionError(
                f"index `{v.name}` in {what} would start at {lo}, not 0 (because of "
                f"{worst}); re-index so that it starts at 0 (e.g. `Y[i] = X[i] + X[i + 2]` "
                "instead of `Y[i] = X[i - 1] + X[i + 1]`), or declare the shape first with "
                f"jd.tensor(shape) and guard the accesses (`... if {v.name} >= {lo} "
                "else ...`)", user_loc())
        ends = _ends(cons, sizes.get(v, ()), v in guarded)
        if v in sizes and all(isinstance(h, int) for h in ends) and \
                max(min(ends) + 1, 0) not in tied.get(v, ()):
            # (a fixed end from a read the call checks nothing against: X[i + 1] of X of
            # 2, or a dropped arm's Z[i, j] of Z of 1 beside X[i, j] of a dynamic X)
            ends = _ends(cons, sizes[v], True)
        extents[v] = _extent(ends)
    return extents


def _ends(cons, bare, guarded=False):
    """The upper ends of an index: its constraints', and where one is over sizes, those
    of the dimensions it indexes whole (which the call checks equal, see
    check_shape_agreement), as Tensor Comprehensions' rule takes every access. Also
    where it is `guarded` (a dimension it indexes whole is guarded by a comparison with
    its size): the call checks no dimension against that one's fixed size."""
    ends = [c[1] for c in cons]
    if guarded or any(not isinstance(h, int) for h in ends):
        for n in bare:
            ends += [_form_add((1, f), (1, {1: -1})) for f in size_forms(n) or ()]
    return ends


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
    with pending_scope() as pending, build.dropped_arms() as dropped:
        body = build.as_expr(fn(*variables))
    if declared is not None:
        extents = dict(zip(variables, declared.shape))
    else:
        extents = infer_ranges(variables, body, what, pending, dropped)
    axes = tuple(IterVar(v, 0, extents[v]) for v in variables)
    if pending:
        body = _resolve_pending(body, pending, {v: extents[v] for v in variables})
    if declared is not None and declared.dtype is not None:
        body = build.cast(body, declared.dtype)
    stage = make_stage(name, axes, body, user_loc())
    return stage


def _resolve_pending(body, pending, extents):
    """Give reduce axes with index-dependent range() bounds their bounding rectangle (the
    range's own test stays the reduction's condition: a wider rectangle costs iterations
    only). Over a dynamic definition's sizes the rectangle is an expression of them."""
    ranges = {v: (0, e - 1) for v, e in extents.items()}
    static = all(isinstance(e, int) for e in extents.values())
    # the indices of reductions over constant ranges bound the ranges that read them
    # (`for k in range(m) for l in range(k + 1, m)`, an inner sum over range(l + 1))
    # (one over an empty range, range(m) of m = 0, runs nothing: neither do those)
    waiting, empty = {ax.var for ax, _, _ in pending}, set()
    for n in walk_unique(body):
        if isinstance(n, Reduce):
            for a in n.axes:
                if a.var not in waiting and isinstance(a.extent, int):
                    if a.extent > 0:
                        ranges[a.var] = (a.min, a.min + a.extent - 1)
                    else:
                        empty.add(a.var)
    # (the indices of the reductions: bound inside the stage, none can size a rectangle)
    inner = {a.var for n in walk_unique(body) if isinstance(n, Reduce) for a in n.axes}
    # (but one from 0 spans its extent, an expression of the sizes, as an output index
    # does: `range(k + 1, m)` of a k in range(m), of a dynamic m)
    spans = {a.var: a.extent for n in walk_unique(body) if isinstance(n, Reduce)
             for a in n.axes if a.var not in waiting and a.min == 0}
    new = {}
    for ax, lo, hi in pending:
        if not static or _sized(lo) or _sized(hi):
            new[ax] = _symbolic_rectangle(ax, lo, hi, {**extents, **spans},
                                          inner - spans.keys())
            if new[ax].min == 0:
                spans[ax.var] = new[ax].extent
            continue
        if 0 in extents.values() or _reads(lo, empty) or _reads(hi, empty):
            # a stage of no elements (of an empty argument) runs no reduction: its range
            # bounds nothing (min(i + 2, n) of n = 0 made it 'an empty range', an error)
            new[ax] = IterVar(ax.var, 0, 0, reduce=True)
            empty.add(ax.var)
            continue
        blo, _ = bounds(lo, ranges)
        _, bhi = bounds(hi, ranges)
        if blo in (-INF, INF) or bhi in (-INF, INF):
            raise DefinitionError(
                f"cannot bound the range of reduction index `{ax.var.name}` "
                f"(range({lo}, {hi}))", user_loc())
        # (a range empty at every index, range(min(i + 1, m)) of m = 0, selects nothing
        # at any: a sum's 0, a max's -inf, as where it is empty at some, range(i) at i = 0)
        new[ax] = IterVar(ax.var, int(blo), max(int(bhi - blo), 0), reduce=True)
        if bhi > blo:
            ranges[ax.var] = (int(blo), int(bhi) - 1)
        else:
            empty.add(ax.var)

    def fix(n):
        if isinstance(n, Reduce) and any(a in new for a in n.axes):
            from dataclasses import replace
            return replace(n, axes=tuple(new.get(a, a) for a in n.axes))
        return None
    return map_expr(body, fix)


def _reads(e, variables):
    return any(isinstance(n, Var) and n in variables for n in walk_unique(build.as_expr(e)))


def _sized(e):
    return any(isinstance(n, SizeVar) for n in walk_expr(e))


def _symbolic_rectangle(ax, lo, hi, extents, inner=()):
    """The rectangle of range(lo, hi) over indices of symbolic extents (`range(i + 1)`,
    `range(i, n)` of a dynamic n): from the least lo, a constant, to the greatest hi, an
    expression of the sizes (an empty range at some sizes: an extent of 0). `inner`: the
    reduction indices, unbounded here as in a static trace's rectangle."""
    least, top = _extreme(lo, extents, False, inner), _extreme(hi, extents, True, inner)
    if least is not None and not isinstance(least, int):
        form = affine(build.as_expr(least))     # (n - (n - 1) - 1 of range(n - i - 1, n))
        least = form.get(1, 0) if all(type(k) is int for k in form) else None
    if least is None or top is None:
        raise DefinitionError(
            f"cannot bound the range of reduction index `{ax.var.name}` "
            f"(range({lo}, {hi})) for every size: its bounds must be affine in the indices "
            "(or a min or max of such), and the least start a constant", user_loc())
    extent = top - least if least else top
    # (one empty at every index at these sizes, range(i) of a size-1 pattern's i: none)
    extent = build.binary(BinOp.MAX, extent, 0) if not isinstance(extent, int) else \
        max(extent, 0)
    return IterVar(ax.var, int(least), extent, reduce=True)


def _extreme(e, extents, upper, inner=()):
    """The greatest (upper) or least value of int expression e over the indices in
    `extents` (each in [0, extent)): an int or an expression of the sizes; None where e is
    not affine in them, save through min and max, or reads a reduction index in `inner`
    (`range(j + 1)` inside a reduction over j: j is no value where the stage begins)."""
    form = affine(build.as_expr(e))
    out = form.get(1, 0)

    def add(out, c, v):             # out + c * v, with no `0 +` or `1 *` in the IR
        term = c * v if c != 1 else v
        if isinstance(out, int) and out == 0:
            return term
        return out + term if not (isinstance(term, int) and term == 0) else out
    for atom, c in form.items():
        if type(atom) is int:
            continue
        var = next((v for v in extents if v is atom), None)
        if var is not None:
            if (c > 0) == upper:
                out = add(out, c, extents[var] - 1)
            continue
        if not any(isinstance(n, Var) and (n in extents or n in inner)
                   for n in walk_unique(atom)):
            out = add(out, c, atom)
            continue
        if not (isinstance(atom, Binary) and atom.op in (BinOp.MIN, BinOp.MAX)):
            return None
        end = upper == (c > 0)          # the end of the atom this term needs
        a, b = _extreme(atom.a, extents, end, inner), _extreme(atom.b, extents, end, inner)
        if a is None or b is None:
            # min(a, b) is below either side (max above): one side bounds it there
            if (atom.op == BinOp.MIN) != end or a is b is None:
                return None
            v = a if b is None else b
        elif isinstance(a, int) and isinstance(b, int):
            v = min(a, b) if atom.op == BinOp.MIN else max(a, b)
        else:
            v = build.binary(atom.op, a, b)
        out = add(out, c, v)
    return out
