"""TE graph + schedule -> loop IR (a PrimFunc): the "lower" pass of the pipeline.

    validate the schedule -> check_shape_agreement -> check_bounds -> build loop nests
    (inline, loads, stores, compute_at regions)

The loop-IR passes that follow (simplify, partition_loops, ...) are listed in
jitdl.pipeline.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

from jitdl import dtypes
from jitdl.errors import VALUE_CHECKS, DefinitionError, ScheduleError
from jitdl.ir import build
from jitdl.ir.analysis import (SIZE_LIMIT, affine, bounds as index_bounds, form_bounds,
                                free_vars, reads_memory)
from jitdl.ir.nodes import (Access, Allocate, BinOp, Binary, Buffer, Call, Cast, CmpOp, Compare,
                            Const, For, ForKind, IfThen, Load, PrimFunc, Reduce, ReduceOp, Select,
                            Seq, Store, Unary, Var, ThreadReduce)
from jitdl.ir.printer import expr_text
from jitdl.ir.visit import map_expr, substitute, walk_expr, walk_unique
from jitdl.lower import bounds
from jitdl.schedule.schedule import Fuse, LoopAxis, Split, ceil_div
from jitdl.te.ops import stages_of
from jitdl.te.tensor import Compute
from jitdl.tir.simplify import simplify_expr


@dataclass
class Lowered:
    func: PrimFunc
    inputs: list        # Buffers of array parameters, in signature order
    outputs: list       # Buffers of outputs
    scalars: list       # Vars of scalar parameters
    checks: int         # number of runtime index checks
    sizes: list = ()    # [(size Var, argument position, dim)]: the last scalars
    agree: list = ()    # symbolic sizes that must agree, checked at the call
    required: list = ()     # [(size expr, op, number, message, [(name, position, dim)],
                            # loc, error kind)]: conditions on the sizes checked at the call


def _carry(e, checks):
    """e with run-time index checks `checks` ((index, extent, tensor name), ...) put on
    one of its reads: one that every evaluation of e performs where there is one (not in
    an arm of a select, a short-circuit operand or a reduction's body), else any; e
    unchanged when it reads no tensor (a constant stage: nothing to check against)."""
    put = _on_sure_read(e, checks)
    if put is not None:
        return put
    target = next((n for n in walk_expr(e) if isinstance(n, Access)), None)
    if target is None:
        return e
    done = []

    def rep(n):
        if n is target and not done:
            done.append(n)
            return replace(n, carried=n.carried + checks)
        return None
    return map_expr(e, rep)


def _on_sure_read(n, checks):
    """n with `checks` carried by a read that every evaluation of n performs (not in an
    arm of a select, a short-circuit operand or a reduction's body), or None where there
    is none. (Put by place, not by identity: that read may be one object also read in a
    select's arm, `select(k > 0, a, 0.0) + a`, where map_expr meets it first.)"""
    match n:
        case Access():
            return replace(n, carried=n.carried + checks)
        case Select():
            c = _on_sure_read(n.cond, checks)
            return None if c is None else replace(n, cond=c)
        case Binary() if n.op in (BinOp.AND, BinOp.OR):
            a = _on_sure_read(n.a, checks)
            return None if a is None else replace(n, a=a)
        case Reduce():
            return None
        case Binary() | Compare():
            a = _on_sure_read(n.a, checks)
            if a is not None:
                return replace(n, a=a)
            b = _on_sure_read(n.b, checks)
            return None if b is None else replace(n, b=b)
        case Unary():
            a = _on_sure_read(n.a, checks)
            return None if a is None else replace(n, a=a)
        case Cast():
            v = _on_sure_read(n.value, checks)
            return None if v is None else replace(n, value=v)
        case Call():
            for k, x in enumerate(n.args):
                r = _on_sure_read(x, checks)
                if r is not None:
                    return replace(n, args=n.args[:k] + (r,) + n.args[k + 1:])
    return None     # (a Load, a constant, a variable: _carry's search by identity)


def identity(op: ReduceOp, dtype: str):
    if op == ReduceOp.SUM:
        v = 0
    elif op == ReduceOp.PROD:
        v = 1
    elif op in (ReduceOp.ANY, ReduceOp.ALL):
        return Const(op == ReduceOp.ALL, "bool")
    elif dtypes.is_float(dtype):
        v = -math.inf if op == ReduceOp.MAX else math.inf
    elif dtype == "bool":                   # max of bools is any, min is all
        return Const(op == ReduceOp.MIN, "bool")
    else:
        import numpy as np
        info = np.iinfo(dtype)
        v = info.min if op == ReduceOp.MAX else info.max
    return Const(float(v) if dtypes.is_float(dtype) else int(v), dtype)


_COMBINE = {ReduceOp.SUM: BinOp.ADD, ReduceOp.PROD: BinOp.MUL, ReduceOp.MAX: BinOp.MAX,
            ReduceOp.MIN: BinOp.MIN, ReduceOp.ANY: BinOp.OR, ReduceOp.ALL: BinOp.AND}


def combine(op, acc, value, dtype):
    if dtype == "bool" and op == ReduceOp.SUM:
        return Binary(BinOp.OR, acc, value, dtype)
    return Binary(_COMBINE[op], acc, value, dtype)


def flat_index(indices, shape):
    idx = None
    for i, n in zip(indices, shape):
        idx = i if idx is None else idx * n + i
    return Const(0, "int64") if idx is None else idx


class _Builder:
    def __init__(self, sched, buffers, local_buffer_bytes):
        self.sched = sched
        self.local_buffer_bytes = local_buffer_bytes
        self.buffers = buffers           # id(tensor) -> Buffer
        self.checks = 0
        self.deferred = set()   # reads checked at run time (bounds.check_stage)
        self.attached = {}      # consumer name -> {loop name: [producer StageStates]}
        self.redirect = {}      # id(tensor) -> (local buffer, region lows, region shape)
        self.output_ids = set()
        self.same = {}          # size Var -> the equal size Var used for it
        # region starts with a bounded `//` (_widened_form), by id (kept alive: no reuse)
        self.widened = {}
        self.inlined = {}       # stage name -> its body with the stages inlined into it
        for st in sched.stages.values():
            if st.attach == "at":
                cons, loop = st.attach_to
                self.attached.setdefault(cons, {}).setdefault(loop, []).append(st)

    def region(self, pst, cons, cons_sub, inner_ranges, co=(), outer_ranges=None):
        """The block of producer `pst` that one iteration of a consumer loop reads, by the
        consumer and by the stages `co` computed at the same loop after it (with their own
        regions): per data axis, (lo expression in the enclosing loop variables, extent).
        An index with `//` or `%` (a packed layout read through split loops) is simplified
        under the ranges of the consumer's loops first."""
        reads = []                      # (substituted indices, ranges of the inner vars)
        for acc in walk_expr(self.inline(cons.op.body)):
            if isinstance(acc, Access) and acc.tensor is pst.tensor:
                reads.append(([substitute(i, cons_sub) for i in acc.indices], inner_ranges))
        for x, reg_x in co:
            xsub, xr = {}, dict(inner_ranges)
            for ax, (lo, ext) in zip(x.tensor.op.axes, reg_x):
                if isinstance(ext, int) and ext == 1:
                    xsub[ax.var] = lo           # (a point: lo may be f // n)
                    continue
                r = Var(f"{ax.name}_rr")
                xsub[ax.var] = lo + r
                xr[r] = _range(0, ext)          # (a symbolic extent: below SIZE_LIMIT)
            for ax in x.tensor.op.reduce_axes:
                xr[ax.var] = _range(ax.min, ax.extent)
            for acc in walk_expr(self.inline(x.tensor.op.body)):
                if isinstance(acc, Access) and acc.tensor is pst.tensor:
                    reads.append(([substitute(i, xsub) for i in acc.indices], xr))
        out = []
        for d, ax in enumerate(pst.tensor.op.axes):
            lo_form, lo, hi, widened = None, None, None, False
            for idx, ranges in reads:
                f = _offset_form(idx[d], ranges)
                if f is None:
                    f = _offset_form(simplify_expr(idx[d], {**(outer_ranges or {}), **ranges}),
                                     ranges)
                if f is None:
                    f, ranges = _widened_form(idx[d], ranges)
                    widened = widened or f is not None
                if f is None:
                    lo_form = "any"
                    break
                outer = {k: c for k, c in f.items() if k != 1 and k not in ranges and c}
                inner = {k: c for k, c in f.items() if k != 1 and k in ranges and c}
                ilo = sum(min(c * ranges[k][0], c * ranges[k][1])
                          for k, c in inner.items()) + f.get(1, 0)
                ihi = sum(max(c * ranges[k][0], c * ranges[k][1])
                          for k, c in inner.items()) + f.get(1, 0)
                if lo_form is not None and outer != lo_form:
                    lo_form = "any"
                    break
                lo_form = outer
                lo = ilo if lo is None else min(lo, ilo)
                hi = ihi if hi is None else max(hi, ihi)
            if lo_form is None or lo_form == "any":
                out.append((Const(0, "int64"), ax.extent))      # the whole axis
                continue
            if hi - lo + 1 >= (ax.extent if isinstance(ax.extent, int) else SIZE_LIMIT):
                # (overshooting splits, or a symbolic range): the whole axis
                out.append((Const(0, "int64"), ax.extent))
                continue
            expr = None
            for v, c in lo_form.items():
                term = v if c == 1 else v * c
                expr = term if expr is None else expr + term
            expr = Const(lo, "int64") if expr is None else expr + lo if lo else expr
            if widened:
                self.widened[id(expr)] = expr
            out.append((expr, hi - lo + 1))
        return out

    def size(self, n):
        """An extent in the loop IR: a Const, or symbolic with equal sizes made one."""
        if isinstance(n, int):
            return Const(n, "int64")
        return substitute(n, self.same) if self.same else n

    def inline(self, e):
        def mark(n):          # before inlining: which accesses have data-dependent indices
            # (or an index the bounds check left to the call, `Y[min(i, m - 1)]`: named by
            # its text, which substituting the reader's indices changes)
            if isinstance(n, Access) and not n.checked and (
                    any(map(reads_memory, n.indices)) or self.deferred_dims(n)):
                return replace(n, checked=True)
            return None
        e = map_expr(e, mark, {})        # (mark and rep are pure: shared nodes once)

        def rep(n):
            if isinstance(n, Access):
                st = self.sched.stages.get(n.tensor.name)
                if st is not None and st.tensor is n.tensor and st.attach == "inline":
                    body = self.inlined.get(st.tensor.name)
                    if body is None:    # (once per stage: a chain of them nests deep)
                        body = self.inlined[st.tensor.name] = self.inline(st.tensor.op.body)
                    body = substitute(body, {a.var: i for a, i in zip(st.tensor.op.axes,
                                                                       n.indices)})
                    # the checks this read of the stage needs: its body may ignore an
                    # index (a broadcast or reshaped length-1 axis) or fold it into range
                    # (and those the bounds check left to the call: `T[0]` of a T that
                    # may be empty, which the inlined body reads at `X[0 + 2]`)
                    later = self.deferred_dims(n)
                    if later and _on_sure_read(body, ()) is None:
                        # (no read that every evaluation makes to carry the check to: a
                        # stage of a formula alone, or of a reduction that may be empty)
                        k = later[0]
                        raise DefinitionError(
                            f"{expr_text(n)}: cannot prove index `{expr_text(n.indices[k])}` "
                            f"of dimension {k} inside [0, {expr_text(n.tensor.shape[k])}) "
                            f"for every size, nor check it at the call ({n.tensor.name} is "
                            "computed where it is read, from no array read on every "
                            "evaluation); guard it with a condition on the size "
                            "(`... if n > 0 else ...`)", n.loc or st.tensor.op.loc)
                    carried = n.carried + tuple(
                        (i, d, n.tensor.name) for k, (i, d) in enumerate(zip(n.indices,
                                                                             n.tensor.shape))
                        if reads_memory(i) or k in later or n.checked and not (
                            isinstance(i, Const) and isinstance(d, (int, Const))))
                    return _carry(body, carried) if carried else body
            return None
        return map_expr(e, rep, {})

    def private(self, p, cons):
        """A stage computed at tensor `cons` that nothing else reads: it needs only a block-sized
        buffer at its attach point."""
        if id(p.tensor) in self.output_ids:
            return False
        if not p.block_buffer:
            return False
        return all(x.tensor is cons or self.sched.inside(x, p.attach_to)
                   or p.tensor not in self.sched._reads(x)
                   for x in self.sched.stages.values() if x.attach != "inline" and x is not p)

    def deferred_dims(self, n):
        """The dimensions of access n whose index the bounds check left to the call."""
        if not self.deferred:
            return []
        return [k for k, i in enumerate(n.indices)
                if (n.tensor.name, k, expr_text(i)) in self.deferred]

    def loads(self, e, before=None, held=False):
        """e with its accesses as loads, each data-dependent index checked at run time.
        `before`: e before the stage's axes became loop expressions, whose accesses name
        a check's indices in its message as the definition writes them (`ids[i]`, not
        `ids[(i_o * 32 + i_i) // 4]` of a fused and split loop). `held`: reads of a
        thread's own copies are held inside them (a register tile's padding reads the
        clamped last element, which the copy of a thread past the edge does not hold: any
        element will do there, as nothing computed from it is stored; a block's shared
        copy always holds it)."""
        written = _accesses(before)

        def check(n, old):
            """Run-time checks of the data-dependent indices of access n, or None."""
            if old is None or old.tensor is not n.tensor or \
                    len(old.indices) != len(n.indices) or len(old.carried) != len(n.carried):
                old = n
            # (deferred as written: an index of the stage's axes, `Y[min(i, m - 1)]`, is
            # another text once they are loops)
            later = sorted(set(self.deferred_dims(n)) | set(self.deferred_dims(old)))
            if not (n.checked or n.carried or later or any(map(reads_memory, n.indices))):
                return None
            self.checks += 1
            shape = self.buffers[id(n.tensor)].shape
            # (the carried checks first: where both fail, the read's own is reported; but
            # a broadcast's check of the sizes last, whose failure makes the read's index
            # fail too: NumPy's error is of the sizes)
            carried = [(i, self.size(d), name, expr_text(o[0]))
                       for (i, d, name), o in zip(n.carried, old.carried)]
            sizes = [c for c in carried if c[2].startswith(VALUE_CHECKS[2])]
            # (a constant index is checked too where the size is symbolic: take(X, 0) of a
            # dynamic X with no rows, which no static proof covers)
            own = tuple((i, d, n.tensor.name, expr_text(o))
                        for k, (i, d, o) in enumerate(zip(n.indices, shape, old.indices))
                        if reads_memory(i) or k in later or n.checked and not (
                            isinstance(i, Const) and isinstance(d, (int, Const))))
            return tuple(c for c in carried if c not in sizes) + own + tuple(sizes)

        def rep(n):
            if not isinstance(n, Access):
                return None
            old = next(written, None)       # (before's access here: met in the same order)
            if id(n.tensor) in self.redirect:
                buf, los, shape = self.redirect[id(n.tensor)]
                at = [i - lo for i, lo in zip(n.indices, los)]
                if held and buf.scope == "local":
                    at = [build.binary(BinOp.MAX, build.binary(BinOp.MIN, x, self.size(d) - 1),
                                       Const(0, "int64")) for x, d in zip(at, shape)]
                return Load(buf, flat_index(at, shape), check(n, old))
            buf = self.buffers[id(n.tensor)]
            return Load(buf, flat_index(n.indices, buf.shape), check(n, old))
        # (an access shared by several parents once, as _accesses meets it: e is `before`
        # with loop variables put in, node for node)
        return map_expr(e, rep, {})

    def stage(self, st, region=None, around=None):
        """The loop nest of one stage. With `region` (per data axis: lo expression and
        extent), only that block of the stage is computed: compute_at inside a consumer.
        `around`: the loops of the stages it is computed inside, outermost first (nested
        compute_at: [(stage name, loop name, Var, LoopAxis)]); a shared copy at one of its
        own loops spans their thread-bound ones too."""
        t = st.tensor
        op = t.op
        if region is None:
            leaves, axes, relations = st.leaves, st.axes, st.relations
        else:
            leaves, axes, relations = _block_loops(st, region)
        loopvar = {n: Var(n.replace(".", "_")) for n in leaves}
        values = {n: loopvar[n] for n in leaves}
        # `clamped`: the same, with the tail of each split data loop held at the last
        # element, where a register tile computes (into its padding) unguarded
        clamped = dict(values)
        guards = []
        data_guards = set()          # ids of the guards of data loops' split tails
        for rel in reversed(relations):
            if isinstance(rel, Split):
                values[rel.parent] = values[rel.outer] * rel.factor + values[rel.inner]
                clamped[rel.parent] = clamped[rel.outer] * rel.factor + clamped[rel.inner]
                ext = axes[rel.parent].extent
                if not isinstance(ext, int) or ext % rel.factor:
                    guards.append(values[rel.parent] < self.size(ext))
                    if not axes[rel.parent].reduce:
                        data_guards.add(id(guards[-1]))
                        clamped[rel.parent] = Binary(BinOp.MIN, clamped[rel.parent],
                                                     self.size(ext) - 1, "int64")
            elif isinstance(rel, Fuse):
                inner_ext = self.size(axes[rel.inner].extent)
                for v in (values, clamped):
                    v[rel.outer] = v[rel.fused] // inner_ext
                    v[rel.inner] = v[rel.fused] % inner_ext
        if region is not None:
            for a, (lo, _) in zip(op.axes, region):
                values[a.name] = clamped[a.name] = lo + values[f"{a.name}.r"]
                guards.append(build.logical(BinOp.AND, values[a.name] >= 0,
                                            values[a.name] < self.size(a.extent)))
        sub, csub = dict(self.same), dict(self.same)
        for a in list(op.axes) + list(op.reduce_axes):
            for sb, v in ((sub, values[a.name]), (csub, clamped[a.name])):
                sb[a.var] = v + a.min if a.min else v
        guard_at = {n: [] for n in leaves}
        for g in guards:
            used = [n for n in leaves if _uses(g, loopvar[n])]
            guard_at[used[-1] if used else leaves[0]].append(g)
        attached = self.attached.get(t.name, {})
        if region is not None:      # (its data loops are the block's: `i` is `i.r`)
            roots = {a.name for a in op.axes}
            attached = {f"{n}.r" if n in roots else n: ps for n, ps in attached.items()}
        at_loop = {}                 # loop name -> [(producer, region, local buffer)]
        deeper = []                  # (producer, region) at loops inside the current one
        # (innermost loop first: a stage computed at a loop may be read by one computed at
        # a loop inside it, whose region its own must cover: a shared copy at k.o read by
        # a register copy at k.i)
        for n in sorted(attached, key=leaves.index, reverse=True):
            producers = attached[n]
            inner_ranges = {loopvar[m]: _range(0, axes[m].extent)
                            for m in leaves[leaves.index(n) + 1:]}
            outer_ranges = {loopvar[m]: _range(0, axes[m].extent)
                            for m in leaves[:leaves.index(n) + 1]}
            done = list(deeper)        # later stages at this loop may read earlier ones
            # a GPU block's shared copy holds what all its threads read: the loops bound
            # to thread indices around the attach point count as inner loops
            enclosing = list(around or ()) + [(t.name, m, loopvar[m], axes[m])
                                              for m in leaves[:leaves.index(n) + 1]]
            threads = {v: _range(0, la.extent) for _, _, v, la in enclosing
                       if la.kind.thread}
            for p in reversed(producers):
                private = self.private(p, t)
                shared = p.scope == "shared" or _threads_share(p, private)
                reg = self.region(p, t, sub, {**inner_ranges, **threads} if shared
                                  else inner_ranges, done, outer_ranges)
                done.append((p, reg))
                local = None
                if private:
                    shape = tuple(self.size(ext) if not isinstance(ext, int) else ext
                                  for _, ext in reg)
                    size = dtypes.itemsize(p.tensor.dtype)
                    for d in shape:
                        size = size * d if isinstance(d, int) else None
                        if size is None:
                            break
                    small = size is not None and size <= self.local_buffer_bytes
                    local = Buffer(f"{p.tensor.name}_l", p.tensor.dtype, shape,
                                   "shared" if shared else "local" if small else "global")
                    self.redirect[id(p.tensor)] = (local, [lo for lo, _ in reg], shape)
                for cname, m, v, la in enclosing if local is None else ():
                    if la.kind != ForKind.PARALLEL:
                        continue
                    if cname != t.name:
                        # (its blocks at the steps of the loops between may overlap)
                        raise ScheduleError(
                            f"compute_at: {p.tensor.name} is computed into its whole buffer "
                            f"at loop {p.attach_to[1]} of {t.name}, which is computed inside parallel "
                            f"loop {m} of {cname}: the blocks its iterations compute may "
                            "overlap. Keep its block private (block_buffer=True), or "
                            f"compute it at {cname}", p.attach_loc)
                    _disjoint_blocks(p, t, m, v, reg, self.widened)
                at_loop.setdefault(n, []).insert(0, (p, reg, local, enclosing))
            deeper = done

        def nest(names, inner, attach=True, over=False):
            # over: the tails of split data loops run unguarded (computing into the
            # padding of a register tile; see the register tile below)
            s = inner
            for n in reversed(names):
                for g in guard_at[n]:
                    if not (over and id(g) in data_guards):
                        s = IfThen(g, s)
                if attach and n in at_loop:
                    s = Seq(tuple(self.stage(p, reg, enclosing)
                                  for p, reg, _, enclosing in at_loop[n]) + (s,))
                    for _, _, local, _ in at_loop[n]:
                        if local is not None:
                            s = Allocate(local, s)
                la = axes[n]
                s = For(loopvar[n], Const(0, "int64"), self.size(la.extent), la.kind, s)
            return s

        if id(t) in self.redirect:             # computed into a block-sized local buffer
            buf, los, shape = self.redirect[id(t)]
            out_index = flat_index([substitute(a.var, sub) - lo
                                    for a, lo in zip(op.axes, los)], shape)
        else:
            buf = self.buffers[id(t)]
            out_index = flat_index([substitute(a.var, sub) for a in op.axes], buf.shape)
        red = op.reduce
        if red is None:
            body = self.inline(op.body)
            return nest(leaves, Store(buf, out_index, self.loads(substitute(body, sub), body)))
        rbody = self.inline(red.body)
        body = self.loads(substitute(rbody, sub), rbody)
        if red.where is not None:
            rwhere = self.inline(red.where)
            where = self.loads(substitute(rwhere, sub), rwhere)
        else:
            where = None
        data = [n for n in leaves if not axes[n].reduce]
        rloops = [n for n in leaves if axes[n].reduce]
        accumulate_in_register = leaves == data + rloops
        if red.op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
            bound = [n for n in rloops if axes[n].kind.thread]
            if bound:
                raise ScheduleError(f"bind: stage {t.name} is an {red.op.value}; its "
                                    "reduction loops cannot be bound to threads",
                                    st.kind_locs.get(bound[0]))
            # (also of a block computed at a consumer's loop, whose reduction loops are
            # the stage's own: unchecked there, ties went to a later position)
            keys = [st.leaf_key(n) for n in rloops]
            if keys != sorted(keys):
                raise ScheduleError(
                    f"stage {t.name} is an {red.op.value}: its reduction loops must keep "
                    f"their row-major order, so that ties go to the first position "
                    f"(loop order now: {', '.join(leaves)})", st.order_loc)
            if not accumulate_in_register:
                raise ScheduleError(
                    f"stage {t.name} is an {red.op.value}: its reduction loops must stay "
                    f"inside all its data loops (loop order now: {', '.join(leaves)})",
                    st.order_loc)
            return nest(data, self._arg_reduce(t, red, body, where, sub, buf, out_index,
                                               nest, rloops))
        init = identity(red.op, red.dtype)

        def stored(acc, at):    # (a reduction inlined into its cast: the cast on the store)
            return Load(acc, at) if red.dtype == t.dtype else build.cast(Load(acc, at), t.dtype)

        across = [n for n in rloops if axes[n].kind.thread]
        if across and not accumulate_in_register:
            raise ScheduleError(
                f"bind: the reduction loop {t.name}.{across[0]} is bound to threads, so "
                f"the reduction loops of {t.name} must stay inside all its data loops "
                f"(loop order now: {', '.join(leaves)})", st.kind_locs.get(across[0]))
        if accumulate_in_register:
            acc = Buffer(f"{t.name}_acc", red.dtype, (1,), "local")
            zero = Const(0, "int64")
            update = Store(acc, zero, combine(red.op, Load(acc, zero), body, red.dtype))
            if where is not None:
                update = IfThen(where, update)
            combined = tuple(ThreadReduce(red.op, acc, axes[n].kind, self._thread_extent(
                t, axes[n], st.kind_locs.get(n))) for n in across)
            block = Allocate(acc, Seq((Store(acc, zero, init), nest(rloops, update))
                                      + combined + (Store(buf, out_index, stored(acc, zero)),)))
            return nest(data, block)
        # accumulate in memory: initialise right under the data loops that enclose the
        # first reduction loop, so the row being reduced into is still in cache
        update = Store(buf, out_index, combine(red.op, Load(buf, out_index), body, red.dtype))
        if where is not None:
            update = IfThen(where, update)
        first = leaves.index(rloops[0])
        prefix, rest = leaves[:first], leaves[first:]
        inner_data = [n for n in rest if not axes[n].reduce]
        inside = [p for n in inner_data for p, _, _, _ in at_loop.get(n, ())]
        if inside:
            raise ScheduleError(
                f"compute_at: stages are computed at a data loop of {t.name} that runs "
                f"inside its reduction loops ({', '.join(leaves)}); compute them at a loop "
                "outside the reduction, or reorder the reduction innermost",
                inside[0].attach_loc)
        tile = self._register_tile(t, red, axes, prefix, inner_data, loopvar)
        if tile is None and red.dtype != t.dtype:
            raise ScheduleError(
                f"stage {t.name} accumulates in {red.dtype} and stores {t.dtype} (a "
                f"reduction inlined into its cast): its reduction loops must stay inside "
                f"all its data loops (loop order now: {', '.join(leaves)})", st.order_loc)
        if tile is not None:
            # a GPU thread's block of outputs: accumulated in its registers, written once
            acc, at = tile
            update = Store(acc, at, combine(red.op, Load(acc, at), body, red.dtype))
            if where is not None:
                update = IfThen(where, update)
            # where a tile does not divide the output, its threads still accumulate the
            # whole tile when every operand is read from the block's own copies at
            # indices inside them for every value of the loops (unfilled elements past
            # the edge; only the stores are guarded): guards inside the unrolled inner
            # loop cost a compare per multiply-add and split its vector loads (SGEMM
            # 3000 x 2000 x 1000 ran at 0.08x cuBLAS on an H100 with them)
            ranges = {loopvar[n]: (0, axes[n].extent - 1) for n in leaves
                      if isinstance(axes[n].extent, int)}
            blocks = {loopvar[n] for n in leaves if axes[n].kind.bound and
                      not axes[n].kind.thread}
            over = where is None and all(_inside(x, ranges, blocks) for x in walk_expr(body)
                                         if isinstance(x, Load))
            if where is None and not over:
                # or with the tails' indices clamped: the padding recomputes the last
                # element's products (guards in the unrolled loop made NVVM take 13-34 s
                # over a 37 x 29 matmul or a 7 x 7 convolution, 1-2 s without)
                checks = self.checks        # (the same checks as the body's)
                update = Store(acc, at, combine(red.op, Load(acc, at), self.loads(
                    substitute(rbody, csub), rbody, held=True), red.dtype))
                self.checks, over = checks, True
            return nest(prefix, Allocate(acc, Seq((
                nest(inner_data, Store(acc, at, init), False, over),
                nest(rest, update, over=over),
                nest(inner_data, Store(buf, out_index, stored(acc, at)), False)))))
        return nest(prefix, Seq((nest(inner_data, Store(buf, out_index, init), False),
                                 nest(rest, update))))

    @staticmethod
    def _thread_extent(t, la, loc):
        """The extent of reduction loop `la` bound to threads; `loc`: the user's bind line,
        where a refusal points (this is checked only when the stage is lowered)."""
        n = la.extent
        if not isinstance(n, int) or not (n <= 32 and n & (n - 1) == 0 or n % 32 == 0):
            raise ScheduleError(
                f"bind: the reduction loop {t.name}.{la.name} bound to {la.kind.value} has "
                f"extent {n}; a reduction across threads needs a power of two up to 32 "
                "or a multiple of 32 (split the loop by such a factor first)", loc)
        return n

    def _register_tile(self, t, red, axes, prefix, inner_data, loopvar):
        """(local accumulator buffer, its index) for a reduction whose data loops inside
        the reduction loops are a block of one GPU thread (a loop bound to a thread index
        encloses them, their extents are constants and the block fits a local buffer);
        else None (the outputs accumulate in place, as on a CPU, where the row being
        reduced into stays in cache)."""
        if not any(axes[n].kind.thread for n in prefix):
            return None
        exts = [axes[n].extent for n in inner_data]
        if not all(isinstance(e, int) for e in exts) or \
                math.prod(exts) * dtypes.itemsize(red.dtype) > self.local_buffer_bytes:
            return None
        acc = Buffer(f"{t.name}_acc", red.dtype, (math.prod(exts),), "local")
        return acc, flat_index([loopvar[n] for n in inner_data], tuple(exts))

    def _arg_reduce(self, t, red, body, where, sub, buf, out_index, nest, rloops):
        """argmax/argmin: the best value and its position, kept in two registers."""
        zero = Const(0, "int64")
        vdt = red.body.dtype
        best = Buffer(f"{t.name}_best", vdt, (1,), "local")
        pos = Buffer(f"{t.name}_pos", "int64", (1,), "local")
        op = ReduceOp.MAX if red.op == ReduceOp.ARGMAX else ReduceOp.MIN
        cur = Load(best, zero)
        better = build.compare(CmpOp.GT if op == ReduceOp.MAX else CmpOp.LT, body, cur)
        if dtypes.is_float(vdt):     # the first NaN wins, as in NumPy
            nan_first = build.logical(BinOp.AND, build.compare(CmpOp.NE, body, body),
                                      build.compare(CmpOp.EQ, cur, cur))
            better = build.logical(BinOp.OR, better, nan_first)
        update = IfThen(better, Seq((Store(best, zero, body),
                                     Store(pos, zero, _arg_position(red, sub)))))
        if where is not None:
            update = IfThen(where, update)
        first = Const(red.axes[0].min if len(red.axes) == 1 else 0, "int64")
        return Allocate(best, Allocate(pos, Seq((
            Store(best, zero, identity(op, vdt)), Store(pos, zero, first),
            nest(rloops, update), Store(buf, out_index, Load(pos, zero))))))


def _disjoint_blocks(p, t, loop, var, reg, widened=()):
    """Producer p, computed into its whole buffer at a loop inside parallel loop `loop`
    of t: the blocks two of its iterations compute must not overlap (both would write
    the same elements at once; an accumulating block races outright). Refused unless
    the block's start moves by at least its extent along some axis; a start that is not
    affine in the loop variable (a fused loop's f // n: the automatic schedule's fused
    batch and row-block loops) is taken as disjoint, except a region's own bound of a
    `//` (`widened`: ids of such starts), which moves by at least its step // divisor."""
    steps = []
    for (lo, ext), ax in zip(reg, p.tensor.op.axes):
        f = affine(lo)
        odd = [k for k in f if k != 1 and not isinstance(k, Var) and var in free_vars(k)]
        if odd and id(lo) not in widened:
            return
        c = _least_step(f, odd, var) if odd else abs(f.get(var, 0))
        if isinstance(ext, int) and c >= ext:
            return
        steps.append(f"{ax.name}: {ext if isinstance(ext, int) else expr_text(ext)} from "
                     f"a step of {c}")
    raise ScheduleError(
        f"compute_at: the blocks of {p.tensor.name} that the iterations of parallel loop "
        f"{t.name}.{loop} compute overlap ({'; '.join(steps)}): they would write the same "
        f"elements at once. Compute {p.tensor.name} at a loop inside {loop} whose blocks "
        "do not overlap, keep its block private (block_buffer=True), or make the loop "
        "serial", p.attach_loc)


def _threads_share(p, private):
    """Whether stage p, computed at a loop, has a data loop bound to a thread index (bound
    before its compute_at): each thread then computes its part of the block, which the
    others read, so the block is one buffer of the GPU block, filled between barriers, as
    a shared copy is (a copy per thread held only its own part: the rest was never
    written). A per-thread ("local") copy, or a stage kept in its whole buffer, is
    refused there."""
    bound = [n for n in p.leaves if not p.axes[n].reduce and p.axes[n].kind.thread]
    if not bound:
        return False
    if p.scope == "local" or not private:
        what = "it is a per-thread (\"local\") copy" if p.scope == "local" else \
            "it is kept in its whole buffer (block_buffer=False, or read by other stages)"
        raise ScheduleError(
            f"bind: {p.tensor.name}.{bound[0]} is bound to {p.axes[bound[0]].kind.value}, "
            f"and {p.tensor.name} is computed at loop {p.attach_to[1]} of {p.attach_to[0]}: "
            "its threads would each compute a part of the block that the others read, "
            f"which needs the block in shared memory, but {what}; leave its loops unbound",
            p.kind_locs.get(bound[0]) or p.attach_loc)
    return True


def _least_step(f, atoms, var):
    """The least a start of form f moves when `var` moves by one, where its one term in
    var is c * (a // n) with a affine in var (a widened region's start); 0 otherwise."""
    if len(atoms) != 1 or f.get(var, 0):
        return 0
    (k,) = atoms
    if not (isinstance(k, Binary) and k.op == BinOp.FLOORDIV and isinstance(k.b, Const)
            and k.b.value > 0):
        return 0
    fa = affine(k.a)
    if any(x != 1 and x is not var and var in free_vars(x) for x in fa):
        return 0
    return abs(f[k]) * (abs(fa.get(var, 0)) // int(k.b.value))


def _block_loops(st, region):
    """(leaves, axes, relations) of a stage computed over `region` (per data axis: lo, extent)
    at a consumer's loop: each data axis `x` becomes the block-relative loop `x.r` over the
    region's extent, and the splits of data loops split those (a factor over a region that
    it does not divide leaves a guarded tail, as on a whole axis; nparts= parts of the
    block, not of the whole axis)."""
    roots = {a.name for a in st.tensor.op.axes}
    axes = dict(st.axes)
    for a, (_, ext) in zip(st.tensor.op.axes, region):
        axes[f"{a.name}.r"] = LoopAxis(f"{a.name}.r", ext, False, st.axes[a.name].kind)
    relations = []
    for r in st.relations:
        if isinstance(r, Split) and not st.axes[r.parent].reduce:
            parent = f"{r.parent}.r" if r.parent in roots else r.parent
            ext = axes[parent].extent
            f = max(1, ceil_div(ext, r.nparts)) if r.nparts and isinstance(ext, int) else r.factor
            axes[r.outer] = replace(st.axes[r.outer], extent=ceil_div(ext, f))
            axes[r.inner] = replace(st.axes[r.inner], extent=f)
            r = Split(parent, r.outer, r.inner, f, r.nparts)
        relations.append(r)         # (data loops are never fused: Schedule._compute_at)
    return [f"{n}.r" if n in roots else n for n in st.leaves], axes, relations


def _offset_form(e, ranges):
    """Index e as {atom: coef, 1: const}, affine in the inner loop variables (`ranges`)
    plus terms fixed by the enclosing loops, which may be any integer expression of them
    (a fused loop's `f // n` or `f % n * 6`); None where a term that is not one inner
    variable depends on one."""
    if not dtypes.is_int(e.dtype):
        return None
    f = affine(e)
    if any(k != 1 and k not in ranges and any(v in ranges for v in free_vars(k)) for k in f):
        return None
    return f


def _widened_form(e, ranges):
    """(offset form, ranges) of index e with each `a // c` and `a % c` (c a positive
    constant, a affine in the inner loops) bounded by a term of the enclosing loops plus a
    new inner variable: a // c is (lo(a) // c) + w with w in [0, (hi(a) - lo(a)) // c + 1],
    a % c is w in [0, c - 1]. A fused loop split into a block's tile reads its rows
    through `//`: the block's copy then holds the few rows the tile spans, not the whole
    axis. (None, ranges) where e has other atoms that depend on the inner loops."""
    extra = dict(ranges)

    def rep(n):
        if not (isinstance(n, Binary) and n.op in (BinOp.FLOORDIV, BinOp.MOD)
                and isinstance(n.b, Const) and dtypes.is_int(n.dtype) and n.b.value > 0):
            return None
        fa = _offset_form(n.a, ranges)
        if fa is None:
            return None
        inner = {k: c for k, c in fa.items() if k != 1 and k in ranges and c}
        if not inner:
            return None
        c = int(n.b.value)
        w = Var(f"_w{len(extra)}", n.dtype)
        if n.op == BinOp.MOD:
            extra[w] = (0, c - 1)
            return w
        lo = sum(min(k * ranges[v][0], k * ranges[v][1]) for v, k in inner.items())
        hi = sum(max(k * ranges[v][0], k * ranges[v][1]) for v, k in inner.items())
        base = Const(fa.get(1, 0) + lo, n.dtype)
        for v, k in fa.items():
            if v != 1 and v not in ranges and k:
                base = base + (v if k == 1 else v * k)
        # a loop of symbolic extent spans [lo, lo + SIZE_LIMIT): dividing that span must
        # not make it look bounded (a block of SIZE_LIMIT / c elements), so it stays one
        unbounded = any(ranges[v][1] - ranges[v][0] + 1 >= SIZE_LIMIT for v in inner)
        extra[w] = (0, SIZE_LIMIT if unbounded else (hi - lo) // c + 1)
        return Binary(BinOp.FLOORDIV, base, n.b, n.dtype) + w
    widened = map_expr(e, rep)
    if widened is e:
        return None, ranges
    return _offset_form(widened, extra), extra


def _inside(load, ranges, blocks=()):
    """Whether a load reads a kernel-local (shared or per-thread) buffer at an index
    inside it for every value of the loops in `ranges`. A block's copy of rows read
    through `//` starts at a division by the block's loops (`blocks`), which the index
    subtracts: the index's own divisions are bounded the same way (_widened_form), so
    that the two cancel."""
    buf = load.buffer
    if buf.scope not in ("shared", "local") or not isinstance(buf.size, int):
        return False
    lo, hi = index_bounds(load.index, ranges)
    if not (0 <= lo and hi < buf.size) and blocks:
        inner = {v: r for v, r in ranges.items() if v not in blocks}
        form, extra = _widened_form(load.index, inner)
        if form is not None:
            lo, hi = form_bounds(form, {**ranges, **extra})
    return 0 <= lo and hi < buf.size


def _arg_position(red, sub):
    """The position argmax/argmin report: the index itself over one axis, the row-major
    offset inside the reduced block over several."""
    if len(red.axes) == 1:
        return substitute(red.axes[0].var, sub)
    pos = None
    for a in red.axes:
        rel = substitute(a.var, sub) - a.min if a.min else substitute(a.var, sub)
        pos = rel if pos is None else pos * a.extent + rel
    return pos


def _asserted(graph):
    """The checks at the call of the sizes the definition asserts equal (`assert
    X.shape[1] == W.shape[0]`), as check_shape_agreement gives them."""
    owner = {n: (p, d) for p in graph.params if not isinstance(p, Var)
             for d, n in enumerate(p.shape) if isinstance(n, Var)}
    out = []
    for a, b in graph.equal_sizes:
        if a is not b and a in owner and b in owner:
            (ta, da), (tb, db) = owner[a], owner[b]
            out.append([ta.name, ta.op.arg_index, da, tb.name, tb.op.arg_index, db])
    return out


def definition_agreements(graph):
    """The checks at the call that the definition itself makes (whatever a schedule
    rewrote), as check_shape_agreement gives them."""
    agree = bounds.check_shape_agreement(stages_of(graph.outputs), graph.params)
    return agree + [c for c in _asserted(graph) if c not in agree]


def _same_sizes(graph, agree):
    """{size Var: the Var or Const it equals}, from the sizes checked equal at the call:
    each size is replaced by the first of its class (one variable per extent in the loop
    IR), or by the concrete size of a non-dynamic argument it must equal."""
    var = {(p.op.arg_index, d): n for p in graph.params if not isinstance(p, Var)
           for d, n in enumerate(p.shape)}
    same = {}
    for _, pa, da, _, pb, db in agree:
        a, b = var[(pa, da)], var[(pb, db)]
        a, b = same.get(a, a), same.get(b, b)
        if isinstance(a, Var) != isinstance(b, Var):
            v, n = (a, b) if isinstance(a, Var) else (b, a)
            n = Const(n, "int64") if isinstance(n, int) else n
            for k, x in list(same.items()):
                if x is v:
                    same[k] = n
            same[v] = n
        elif isinstance(a, Var) and isinstance(b, Var) and a is not b:
            first, other = (a, b) if (pa, da) < (pb, db) else (b, a)
            for k, v in list(same.items()):
                if v is other:
                    same[k] = first
            same[other] = first
    return same


def _range(lo, extent):
    """The (lo, hi) range of a loop: a symbolic extent is below SIZE_LIMIT."""
    return (lo, lo + (extent if isinstance(extent, int) else SIZE_LIMIT) - 1)


def size_params(graph):
    """The size variables of the dynamic arguments, in argument and dimension order: the
    kernel's last scalar parameters, with (argument position, dimension) for each."""
    out = []
    for p in graph.params:
        if isinstance(p, Var):
            continue
        for d, n in enumerate(p.shape):
            if isinstance(n, Var):
                out.append((n, p.op.arg_index, d))
    return out


def _uses(e, var):
    return any(n is var for n in walk_expr(e))


def lower(graph, sched, name, local_buffer_bytes=16384) -> Lowered:
    """The loop nests of a scheduled graph (before any loop-IR pass). A stage computed at
    a consumer's loop whose block takes up to local_buffer_bytes gets a local array."""
    stages = stages_of(sched.outputs)
    sched.validate()
    agree = bounds.check_shape_agreement(stages, graph.params)
    # the definition's own agreements hold whatever the schedule rewrote: rfactor's
    # B[ko * f + kf, j] no longer shows that B's rows are A's columns (B[k, j], A[i, k])
    agree += [c for c in bounds.check_shape_agreement(stages_of(graph.outputs),
                                                      graph.params) if c not in agree]
    agree += [c for c in _asserted(graph) if c not in agree]
    same = _same_sizes(graph, agree)
    scalar_params = [p for p in graph.params if isinstance(p, Var)]
    deferred = set()
    for t in stages:
        deferred |= bounds.check_stage(t, scalar_params, same)
    buffers = {}
    b = _Builder(sched, buffers, local_buffer_bytes)
    b.same, b.deferred = same, deferred

    def shape(t):
        return tuple(d if isinstance(d, int) else b.size(d) for d in t.shape)
    inputs, scalars = [], []
    for p in graph.params:
        if isinstance(p, Var):
            scalars.append(p)
        else:
            buffers[id(p)] = Buffer(p.name, p.dtype, shape(p))
            inputs.append(buffers[id(p)])
    outputs = []
    for t in sched.outputs:
        buffers[id(t)] = Buffer(t.name, t.dtype, shape(t))
        outputs.append(buffers[id(t)])
    b.output_ids = {id(t) for t in sched.outputs}
    temps = []
    for t in stages:
        st = sched.stages[t.name]
        if id(t) in buffers or st.attach == "inline":
            continue
        buffers[id(t)] = Buffer(t.name, t.dtype, shape(t))
        if st.attach == "at" and b.private(st, sched.stages[st.attach_to[0]].tensor):
            continue                      # lives in a block-sized buffer at its loop
        temps.append(buffers[id(t)])
    body = Seq(tuple(b.stage(sched.stages[t.name]) for t in stages
                     if sched.stages[t.name].attach == "root"))
    for buf in reversed(temps):
        body = Allocate(buf, body)
    sizes = [x for x in size_params(graph) if x[0] not in same]
    scalars += [v for v, _, _ in sizes]
    func = PrimFunc(name, tuple(inputs + outputs + scalars), body)
    return Lowered(func, inputs, outputs, scalars, b.checks, sizes, agree,
                   _required(graph, b))


def _required(graph, b):
    """The definition's conditions on its symbolic sizes (jitdl.te.ops.require_size), each
    over the sizes left parameters (equal ones made one), with the sizes its message names
    (name, argument position, dimension): a condition over other variables is dropped."""
    params = size_params(graph)
    known = {id(v) for v, _, _ in params}
    out = []
    for size, op, number, message, loc, error in graph.required_sizes:
        if any(isinstance(v, Var) and id(v) not in known for v in walk_expr(size)):
            continue
        named = [(v.name, pos, dim) for v, pos, dim in params
                 if re.search(rf"\b{re.escape(v.name)}\b", message)]
        out.append((b.size(size), op, number, message, named, loc, error))
    return out



def layout_free(sched, inputs, outputs):
    """Whether the kernel computes every output element from the inputs' elements at its
    own position only (in_place_inputs holds for every input, each of the output's shape)
    and uses no index as a value: it then computes the same over any one memory order that
    all its arrays share, so its C-order loops serve Fortran-ordered arrays too (a.T + b.T
    on the memory of a and b, the output Fortran-ordered, as NumPy's)."""
    if not inputs or len(outputs) != 1 or len(outputs[0].shape) < 2 or \
            len(in_place_inputs(sched, inputs, outputs)) != len(inputs):
        return False
    for st in sched.stages.values():
        op = st.tensor.op
        axes = {id(a.var) for a in op.axes}
        nodes = list(walk_expr(op.body))
        uses = sum(1 for n in nodes if id(n) in axes)
        if uses != sum(len(n.indices) for n in nodes if isinstance(n, Access)):
            return False        # (an index read as a value: i <= j, an iota)
    return True


def in_place_inputs(sched, inputs, outputs):
    """Positions of the inputs that may be the output itself (out= that very array): in a
    kernel of one output whose every stage is elementwise over the output's rank (no
    reduction, reads of stages at the reading stage's own indices), an input of the
    output's shape read only at the reading stage's own indices. Each output element
    then reads that input at its own position only, before it is written (schedules
    reorder, split and place loops, but an element's value still needs only its own
    inputs; vector tails are narrower blocks, never a block shifted back)."""
    if len(outputs) != 1:
        return []
    rank = len(outputs[0].shape)
    own = {}            # input name -> read only at the reading stage's own indices
    for st in sched.stages.values():
        op = st.tensor.op
        if not isinstance(op, Compute) or op.reduce is not None or len(op.axes) != rank:
            return []
        axes = tuple(a.var for a in op.axes)
        for node in walk_unique(op.body):
            if isinstance(node, Reduce):
                return []
            if not isinstance(node, Access):
                continue
            same = len(node.indices) == rank and all(
                i is a for i, a in zip(node.indices, axes)) and not (node.checked or
                                                                     node.carried)
            if node.tensor.name in sched.stages:
                if not same:
                    return []
            else:
                own[node.tensor.name] = own.get(node.tensor.name, True) and same
    return [j for j, b in enumerate(inputs)
            if own.get(b.name) and b.shape == outputs[0].shape]


def _accesses(e):
    """An iterator over the accesses of e in the order map_expr meets them (children
    first, a node shared by several parents once), or an empty one for None."""
    found = []
    if e is not None:
        map_expr(e, lambda n: found.append(n) if isinstance(n, Access) else None, {})
    return iter(found)
