"""The automatic schedule for definitions without @jd.schedule (target "cpu").

Rules, in order: inline injective intermediate stages into their consumers; order each
reduction so that the innermost loop is a contiguous data loop when one exists (else keep
a register accumulator); fuse outer data loops and run them in parallel when there is
enough work; vectorise the innermost contiguous data loop.

LEVELS lists the decisions from all of them down to none (the definition's own loop
nests). The pipeline applies the first level whose schedule passes its own checks, so that
a definition never fails on a schedule its user did not write.
"""
from __future__ import annotations

from jitdl import dtypes
from jitdl.ir.analysis import linear, reads_memory
from jitdl.ir.nodes import Access, Call, ForKind, Intrin, ReduceOp, Select, Var
from jitdl.ir.visit import map_expr, substitute, walk_expr
from jitdl.schedule.schedule import Axis

_ALL = frozenset({"inline", "compute_at", "pack", "tile", "parallel", "vectorize"})

# (name, the decisions the automatic schedule may take), from the most ambitious down
LEVELS = (
    ("full", _ALL),
    ("no compute_at", _ALL - {"compute_at"}),
    ("no compute_at, no pack", _ALL - {"compute_at", "pack"}),
    ("no tiling", _ALL - {"compute_at", "pack", "tile"}),
    ("inline only", frozenset({"inline"})),
    ("default loop nests", frozenset()),
)

def _innermost_contiguous(stage):
    """True when the last data axis walks every tensor it reads with stride 1: it appears
    with coefficient 1 in the last index only (e.g. B[k, j], P[c, y + ry, x + rx])."""
    op = stage.tensor.op
    if not op.axes:
        return False
    last = op.axes[-1].var
    uses = [a for a in walk_expr(op.body) if isinstance(a, Access)
            and any(last is v for i in a.indices for v in walk_expr(i))]

    def stride_one(acc):
        if any(last is v for i in acc.indices[:-1] for v in walk_expr(i)):
            return False
        form = linear(acc.indices[-1])
        return form is not None and form.get(last) == 1
    return bool(uses) and all(stride_one(a) for a in uses)


def _guarded_reads(stage):
    """A stage whose body selects between memory reads (padding): cheap to store once,
    costly to recompute inside a reduction's innermost loop."""
    return any(isinstance(n, Select) and (reads_memory(n.t) or reads_memory(n.f))
               for n in walk_expr(stage.tensor.op.body))


def _consumed_by_reduction(s, tensor):
    for st in s.stages.values():
        if st.is_reduce and any(isinstance(n, Access) and n.tensor is tensor
                                for n in walk_expr(st.tensor.op.body)):
            return True
    return False


def _vars_with(stage, var):
    """The variables of every access that also uses `var`."""
    out = set()
    for acc in walk_expr(stage.tensor.op.body):
        if isinstance(acc, Access):
            vs = {v for i in acc.indices for v in walk_expr(i) if isinstance(v, Var)}
            if var in vs:
                out |= vs
    return out


def _tile_sizes(s, name, st, target, cfg=None):
    """(last data axis, tj, tiled other axis, ti) of a register tile, or None.

    The tile is two vector registers wide along the contiguous axis (tj = 2 lanes) and
    ti rows deep, so that ti * 2 accumulator registers take three quarters of the
    register file and the rest stream the operands: 6 x 16 float32 on 16-register AVX2,
    12 x 32 on 32-register AVX-512 (the shapes of BLIS's micro-kernels for them)."""
    op = st.tensor.op
    data = list(op.axes)
    last = data[-1]
    lanes = target.lanes(dtypes.itemsize(st.tensor.dtype))
    tj = 2 * lanes if last.extent >= 2 * lanes else lanes if last.extent >= lanes else \
        8 if last.extent % 8 == 0 else None
    if tj is None:
        return None
    if cfg is not None:      # the tile sizes are knobs for the tuner; the rule's choice first
        tj = cfg.split(f"{name}.tile_j", last.extent,
                       [tj] + [f for f in (lanes, 2 * lanes, 3 * lanes, 4 * lanes, 32, 64)
                               if f != tj and f <= last.extent])
    shared = _vars_with(st, last.var)
    cands = [a for a in data[:-1] if a.var not in shared]
    cand = max(cands, key=lambda a: a.extent) if cands else None
    ti = None
    if cand is not None:
        budget = target.max_accumulators(dtypes.itemsize(st.tensor.dtype))
        ti = min(max(budget // tj, 1), cand.extent)
        if cfg is not None:
            ti = cfg.split(f"{name}.tile_i", cand.extent,
                           [ti] + [f for f in (1, 2, 4, 6, 8, 12, 16) if f != ti
                                   and f <= cand.extent])
        ti = ti if ti and ti > 1 else None
    return last, tj, (cand if ti else None), ti


def _pack_streamed(s, name, st, last, tj, cand, ti):
    op = st.tensor.op
    red_work = 1
    for r in op.reduce_axes:
        red_work *= r.extent
    if red_work >= 64 and (cand is None or cand.extent >= 4 * (ti or 1)):
        # stream the operand read along the tile in blocks of tj: B[k, j] -> B_pack[j/tj, k, tj]
        for acc in [n for n in walk_expr(op.body) if isinstance(n, Access)]:
            t = acc.tensor
            if t.ndim >= 2 and acc.indices[-1] is last.var and t.shape[-1] >= 2 * tj \
                    and f"{t.name}_pack" not in s.stages \
                    and not any(last.var is v for i in acc.indices[:-1] for v in walk_expr(i)):
                s.pack(t.name, s[name], t.ndim - 1, tj)


def _fuse_epilogue(s, name, st, consumer, target, cfg, allow):
    """A tiled reduction C read only by an elementwise stage D at D's own indices (bias,
    activation): D is tiled the same way and C's block is computed at D's tile loop, so
    the epilogue reads the block while it is in cache instead of in a second pass."""
    sizes = _tile_sizes(s, name, st, target, cfg)
    if sizes is None:
        return False
    last, tj, cand, ti = sizes
    if "pack" in allow:
        _pack_streamed(s, name, st, last, tj, cand, ti)
    op, dop = st.tensor.op, consumer.tensor.op
    dname = consumer.tensor.name
    others = [a for a in op.axes if a is not last and a is not cand]
    s.reorder(*[Axis(name, a.name) for a in others], *[Axis(name, r.name)
              for r in op.reduce_axes], *([Axis(name, cand.name)] if cand else []),
              Axis(name, last.name))
    if cand is not None:
        s.unroll(Axis(name, cand.name))
    s.unroll(Axis(name, last.name))
    dlast = dop.axes[-1]
    dcand = dop.axes[op.axes.index(cand)] if cand is not None else None
    jo, ji = s.split(Axis(dname, dlast.name), tj)
    outer, inner = [], []
    for a in dop.axes[:-1]:
        if a is dcand:
            io, ii = s.split(Axis(dname, a.name), ti)
            outer.append(io)
            inner.append(ii)
        else:
            outer.append(Axis(dname, a.name))
    s.reorder(*outer, jo, *inner, ji)
    # the block stays in C's own buffer: LLVM keeps an in-place unrolled block in
    # vector registers, not a block-sized local copy
    s.compute_at(s[name], s[dname], jo, block_buffer=False)
    if "vectorize" in allow:
        s.vectorize(ji)
    return True


def _register_tile(s, name, st, target, cfg, allow):
    """Tile a reduction whose innermost data loop is contiguous: a ti x tj block of the
    output stays in registers while the reduction runs (fully unrolled, so LLVM keeps
    the block in vector registers and streams rows of the contiguous operand)."""
    sizes = _tile_sizes(s, name, st, target, cfg)
    if sizes is None:
        return False
    last, tj, cand, ti = sizes
    op = st.tensor.op
    data, red = list(op.axes), list(op.reduce_axes)
    if "pack" in allow:
        _pack_streamed(s, name, st, last, tj, cand, ti)
    jo, ji = s.split(Axis(name, last.name), tj)
    order_outer = []
    inner = []
    for a in data[:-1]:
        if cand is not None and a is cand and ti:
            io, ii = s.split(Axis(name, a.name), ti)
            order_outer.append(io)
            inner.append(ii)
        else:
            order_outer.append(Axis(name, a.name))
    s.reorder(*order_outer, jo, *[Axis(name, r.name) for r in red], *inner, ji)
    for ax in inner:
        s.unroll(ax)
    s.unroll(ji)
    return True


def _work(st):
    w = 1
    for a in list(st.tensor.op.axes) + list(st.tensor.op.reduce_axes):
        w *= a.extent
    return w


def _parallelize(s, name, st, num_threads, target, work=None):
    """Fuse leading data loops until there are enough iterations, run them in parallel."""
    if work is None:
        work = 1
        for n in st.leaves:
            work *= st.axes[n].extent
    if num_threads <= 1 or work < target.parallel_min_work:
        return
    data = [n for n in st.leaves if not st.axes[n].reduce]
    attached = {x.attach_to[1] for x in s.stages.values()
                if x.attach == "at" and x.attach_to[0] == name}
    lead = []
    for n in st.leaves:
        if st.axes[n].reduce or st.axes[n].kind != ForKind.SERIAL:
            break
        if n in attached:               # stages are computed at it: keep it whole
            if not lead:
                lead.append(n)
            break
        lead.append(n)
        ext = 1
        for m in lead:
            ext *= st.axes[m].extent
        if ext >= 4 * num_threads:
            break
    if lead and lead == data and len(lead) > 1:
        lead = lead[:-1]            # keep the innermost loop for SIMD
    if lead:
        ax = s.fuse(*[Axis(name, n) for n in lead]) if len(lead) > 1 else Axis(name, lead[0])
        s.parallel(ax)


def _inlined_accesses(s, st, tensor):
    """Accesses to `tensor` in st's body with stages inlined into it substituted, so
    their indices are in st's own variables."""
    def expand(e):
        def rep(n):
            if isinstance(n, Access):
                prod = s.stages.get(n.tensor.name)
                if prod is not None and prod.tensor is n.tensor and prod.attach == "inline":
                    op = prod.tensor.op
                    return expand(substitute(op.body, {a.var: i for a, i in
                                                       zip(op.axes, n.indices)}))
            return None
        return map_expr(e, rep)
    return [n for n in walk_expr(expand(st.tensor.op.body))
            if isinstance(n, Access) and n.tensor is tensor]


def _fuse_row_reductions(s, outputs, target):
    """Compute row-wise producers (row statistics: max, sum, mean, variance; rows of an
    expensive intermediate such as exp) inside the outer loop of the stage that reads
    them: P[i, ...] read at row i by Y[i, ...] and by stages already computed there. Each
    row of the input is then read from memory once and re-read from cache."""
    for name in reversed(list(s.stages)):
        st = s.stages[name]
        if st.attach != "root" or st.tensor.name in outputs or st.tensor.ndim == 0 \
                or (st.is_reduce and st.tensor.ndim > 1):   # (2-D reductions: tiles)
            continue
        row = 1
        for d in st.tensor.shape[1:]:
            row *= d
        if row * dtypes.itemsize(st.tensor.dtype) > target.row_fuse_bytes:
            continue
        readers = [x for x in s.stages.values()
                   if x is not st and x.attach != "inline" and st.tensor in s._reads(x)]
        targets = {x.attach_to[0] if x.attach == "at" else x.tensor.name for x in readers}
        if len(targets) != 1:
            continue
        cons = s.stages[targets.pop()]
        if not cons.leaves or not cons.tensor.op.axes:
            continue
        first = cons.tensor.op.axes[0]
        if cons.leaves[0] != first.name or first.extent != st.tensor.shape[0]:
            continue
        ok = True
        for x in readers:
            own = x.tensor.op.axes
            if x is not cons and (x.attach_to != (cons.tensor.name, first.name) or not own):
                ok = False
                break
            var = first.var if x is cons else own[0].var
            ok = ok and all(acc.indices[0] is var
                            for acc in _inlined_accesses(s, x, st.tensor))
        if ok:
            s.compute_at(s[name], s[cons.tensor.name], Axis(cons.tensor.name, first.name))


_EXPENSIVE = {Intrin.EXP, Intrin.LOG, Intrin.TANH, Intrin.ERF, Intrin.SIGMOID, Intrin.SIN,
              Intrin.COS, Intrin.TAN, Intrin.ATAN, Intrin.LOG1P, Intrin.EXPM1}


def _shared_and_expensive(s, st):
    """An elementwise stage with transcendental math that several stages read: inlining
    it would compute the math once per reader."""
    if not any(isinstance(n, Call) and n.fn in _EXPENSIVE
               for n in walk_expr(st.tensor.op.body)):
        return False
    readers = [x for x in s.stages.values() if x is not st and st.tensor in s._reads(x)]
    return len(readers) >= 2


def auto_schedule(s, num_threads, cfg=None, target=None, level=0):
    """The automatic schedule of every stage of s for a CPU `target` (its policies:
    register budget, L2 size, parallel grain), with tile sizes as knobs of cfg, taking
    the decisions LEVELS[level] allows."""
    allow = LEVELS[level][1]
    if not allow:
        return s
    outputs = {t.name for t in s.outputs}
    keep = []
    for name, st in s.stages.items():
        if not st.is_reduce and st.tensor.name not in outputs and not (
                _guarded_reads(st) and _consumed_by_reduction(s, st.tensor)):
            if _shared_and_expensive(s, st) and "compute_at" in allow:
                keep.append(name)         # inlined below unless computed at a row loop
            else:
                s.compute_inline(s[name])
    if "compute_at" in allow:
        _fuse_row_reductions(s, outputs, target)
    epilogues = set()
    for name in list(s.stages) if {"compute_at", "tile"} <= allow else ():
        st = s.stages[name]
        op = st.tensor.op
        if st.attach != "root" or st.tensor.name in outputs or op.reduce is None \
                or op.reduce.op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) or not op.axes \
                or not _innermost_contiguous(st):
            continue
        readers = [x for x in s.stages.values()
                   if x is not st and x.attach != "inline" and st.tensor in s._reads(x)]
        if len(readers) != 1 or readers[0].is_reduce or readers[0].attach != "root":
            continue
        d = readers[0]
        if d.tensor.shape != st.tensor.shape or any(
                tuple(acc.indices) != tuple(a.var for a in d.tensor.op.axes)
                for acc in _inlined_accesses(s, d, st.tensor)):
            continue
        if _fuse_epilogue(s, name, st, d, target, cfg, allow):
            epilogues.add(name)
    for name in keep:            # inlined unless computed at a row loop, or others are
        if s.stages[name].attach == "root" and not any(
                x.attach == "at" and x.attach_to[0] == name for x in s.stages.values()):
            s.compute_inline(s[name])
    for name in list(s.stages):
        st = s.stages[name]
        if st.attach != "root" or name.endswith("_pack"):
            continue
        inner_work = [_work(x) for x in s.stages.values() if x.attach == "at"
                      and x.tensor.name in epilogues and x.attach_to[0] == name]
        if inner_work:                   # an epilogue: tiled with its producer's block
            if "parallel" in allow:
                _parallelize(s, name, st, num_threads, target, max(inner_work))
            continue
        op = st.tensor.op
        data = [a.name for a in op.axes]
        red = [a.name for a in op.reduce_axes]
        arg = op.reduce is not None and op.reduce.op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN)
        if "tile" in allow and red and data and not arg and _innermost_contiguous(st):
            if not _register_tile(s, name, st, target, cfg, allow):
                # i, k, j: the reduction walks rows, the innermost loop streams along j
                s.reorder(*[Axis(name, n) for n in data[:-1] + red + data[-1:]])
        if "parallel" in allow:
            _parallelize(s, name, st, num_threads, target)
        inner = st.leaves[-1] if st.leaves else None
        if "vectorize" in allow and inner is not None and not st.axes[inner].reduce and \
                st.axes[inner].kind == ForKind.SERIAL and st.axes[inner].extent >= 4:
            s.vectorize(Axis(name, inner))
    for name, st in s.stages.items():
        if name.endswith("_pack") and not any(a.kind != ForKind.SERIAL for a in st.axes.values()):
            if "parallel" in allow:
                _parallelize(s, name, st, num_threads, target)
            inner = st.leaves[-1]
            if "vectorize" in allow and st.axes[inner].kind == ForKind.SERIAL:
                s.vectorize(Axis(name, inner))
    return s
