"""The automatic schedule of the CUDA target: what a GPU kernel needs that a CPU loop nest
does not (every stage's data loops spread over blocks and threads), sized from the target
(threads per block, multiprocessors), never from one machine's constants.

  - elementwise and injective stages are inlined into their readers (a reduction that
    reads an expensive element several times keeps it stored, as on the CPU), and a
    reduction into a reader that only casts it (jd.numpy.sum of float32, accumulated in
    float64), which then stores its accumulator cast: one kernel, not a second pass;
  - each stored stage's data loops are fused into one and run as a grid-stride loop:
    consecutive threads take consecutive elements (coalesced), and a grid of a few
    blocks per multiprocessor walks the rest;
  - row reductions (softmax, norms) run one block per row (block_per_row);
  - reductions with few outputs (a whole-array sum) split their axis into parts that
    blocks reduce in parallel, then combine the parts; column reductions with fewer
    outputs than a quarter of a full grid's threads, a thread per part and column
    (split_reduction);
  - matmul-like stages and convolutions are tiled in shared memory and registers
    (tile_matmul, tile_contraction);
  - a stage with no data loop that split_reduction does not take (an argmax of a whole
    array: jitdl.ops reads it in blocks itself) runs on one thread.

LEVELS lists the decisions from all of them down to none; the pipeline applies the first
level that lowers, as for the CPU.
"""
from __future__ import annotations

import dataclasses
import math

from jitdl import dtypes
from jitdl.ir.analysis import linear
from jitdl.ir.nodes import Access, ReduceOp, Var
from jitdl.ir.visit import walk_expr
from jitdl.schedule.auto import (_duplicated_when_inlined, _expanding_gather,
                                 _fuse_row_reductions, _reread)
from jitdl.schedule.steps import CacheRead, ComputeInline, ComputeRoot
from jitdl.schedule.schedule import Axis, Schedule
from jitdl.te.ops import stages_of

LEVELS = (
    ("full", frozenset({"inline", "bind", "tile", "rows"})),
    ("no shared rows", frozenset({"inline", "bind", "tile"})),
    ("no tiling", frozenset({"inline", "bind"})),
    ("bind only", frozenset({"bind"})),
    ("one thread", frozenset()),
)

# blocks per multiprocessor a grid-stride loop launches at most
_WAVES = 8

# rows of at least this many elements get a block of threads each (block_per_row); a
# shorter row, a thread
ROW_MIN = 128


def auto_schedule(s, cfg=None, target=None, level=0):
    """The automatic schedule of every stage of s for a CUDA `target`, taking the
    decisions LEVELS[level] allows."""
    allow = LEVELS[level][1]
    outputs = {t.name for t in s.outputs}
    if "inline" in allow:
        sizes = {}
        for name, st in list(s.stages.items()):
            if name not in s.stages:
                continue
            if st.is_reduce and name not in outputs and s.cast_reader(name) is not None:
                s.compute_inline(s[name])   # (its reader stores it cast: no second pass)
            elif not st.is_reduce and name not in outputs and \
                    (not _reread(s, st) or _expanding_gather(st)) \
                    and not _duplicated_when_inlined(s, st, sizes):
                s.compute_inline(s[name])
    if "rows" in allow:
        _fuse_row_reductions(s, outputs, target, frozenset({"compute_at"}))
    if "tile" in allow:
        # a producer the row fusion computed at a matmul's rows is computed on its own
        # (a grid-stride loop below, a row statistic a block per row: the matmul of a
        # layer norm's or of X / X.sum(axis=1) failed the tiles' split of its rows and
        # fell back to 'no shared rows'): the tiles split those rows, and a stage read by
        # one computed at another stage is not tiled
        for st in list(s.stages.values()):
            if st.attach == "at" and (
                    _matmul_like(s, s.stages[st.attach_to[0]])
                    or _contraction(s, s.stages[st.attach_to[0]]) is not None):
                s.compute_root(s[st.tensor.name])
    if "bind" in allow:
        for name, st in list(s.stages.items()):
            if st.attach != "root":
                continue
            if "tile" in allow and (_matmul_like(s, st) and tile_matmul(s, name, target, cfg)
                                    or tile_contraction(s, name, target, cfg)):
                continue
            if "rows" in allow:
                # an elementwise stage computed at the rows (one the inline rules stored)
                # that reads no row statistic runs on its own, and the statistics still
                # get a block per row
                at = [x for x in s.stages.values() if x.attach == "at" and x.attach_to[0] == name]
                stats = {r.tensor for r in at if r.is_reduce}
                for x in at:
                    if not x.is_reduce and not stats & s._reads(x):
                        s.compute_root(s[x.tensor.name])
                        grid_stride(s, x.tensor.name, target, cfg)
                if split_reduction(s, name, target, cfg):
                    continue
                if not _split_statistics(s, name, target, cfg) and \
                        block_per_row(s, name, target, cfg):
                    continue
            for x in list(s.stages.values()):     # rows too short for a block of threads
                if x.attach == "at" and x.attach_to[0] == name:
                    s.compute_root(s[x.tensor.name])
                    grid_stride(s, x.tensor.name, target, cfg)
            grid_stride(s, name, target, cfg)
    return s


def _row_axis(st, target):
    """The one reduction axis of a stage when its reads walk memory along it (the
    contiguous last index) and it is long enough for a block of threads (of a symbolic
    length: where the target says such rows are long, see CUDA.long_rows, and every read
    that moves with it walks the row: a matmul's B[k, j], read down a column, would be
    read a block per output, far apart); else None."""
    op = st.tensor.op
    if op.reduce is None or len(op.reduce_axes) != 1 or \
            op.reduce.op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
        return None
    k = op.reduce_axes[0]
    if not (k.extent >= ROW_MIN if isinstance(k.extent, int) else target.long_rows):
        return None
    reads = [acc for acc in walk_expr(op.reduce.body) if isinstance(acc, Access) and acc.indices]
    if not isinstance(k.extent, int) and not all(_along_row(acc, k) for acc in reads):
        return None
    for acc in reads:
        f = linear(acc.indices[-1])
        if f is not None and f.get(k.var) == 1:
            return k
    return None


def symbolic_rows(graph, target):
    """The lengths (expressions of the sizes) of the rows of a symbolic length that the
    reductions of `graph` would read a block of threads per row where `target` takes such
    rows as long (CUDA.long_rows), and a thread per row where it does not: a kernel of
    symbolic extents serves rows of every length, and which of the two serves a call
    best depends on its rows' length (jitdl.runtime.cuda.ByRowLength)."""
    s, out, long = None, [], dataclasses.replace(target, long_rows=True)
    for t in stages_of(graph.outputs):
        if t.op.reduce is None or len(t.op.reduce_axes) != 1 or \
                isinstance(t.op.reduce_axes[0].extent, int):
            continue
        s = s or Schedule(graph)
        if _split_plan(s, t.name, target) is None and \
                _row_axis(s.stages[t.name], long) is not None:     # (split: either way)
            out.append(t.op.reduce_axes[0].extent)
    return out


def _along_row(acc, k):
    """Whether a read steps along its last index with reduction axis k alone, or does not
    move with k at all (a row statistic m[i])."""
    if any(v == k.var for i in acc.indices[:-1] for v in walk_expr(i)):
        return False
    if not any(v == k.var for v in walk_expr(acc.indices[-1])):
        return True
    f = linear(acc.indices[-1])
    return f is not None and f.get(k.var) == 1


def block_per_row(s, name, target, cfg=None):
    """One block per row for a stage whose row statistics (reductions along the row:
    max, sum, mean...) are computed at its row loop, or for a row reduction of its own:
    the block's threads split each reduction (consecutive threads read consecutive
    elements) and combine their parts with warp shuffles, then walk the row's outputs
    together. When the row of the input fits shared memory it is read from memory once,
    into shared memory, and the reductions and outputs read it there."""
    st = s.stages[name]
    op = st.tensor.op
    at = [x for x in s.stages.values() if x.attach == "at" and x.attach_to[0] == name]
    rows = [x for x in at if _row_axis(x, target) is not None]
    own = _row_axis(st, target)
    if not op.axes or (not rows and own is None) or len(rows) != len(at):
        return False
    exts = [_row_axis(x, target).extent for x in rows] + \
        ([own.extent] if own is not None else [])
    # (rows of a symbolic length: a full block, whose threads past a short row add
    # nothing to its reductions)
    least = min((e for e in exts if isinstance(e, int)), default=None)
    threads = target.threads_per_block if least is None else \
        min(target.threads_per_block, _floor_pow2(least))
    if cfg is not None:
        threads = cfg.choice(f"{name}.row_threads",
                             [threads] + [t for t in (128, 512) if t != threads
                                          and (least is None or t <= least)])
    first = Axis(name, st.leaves[0])
    for x in rows:
        k = Axis(x.tensor.name, _row_axis(x, target).name)
        ko, ki = s.split(k, threads)
        s.reorder(ki, ko)
        s.bind(ki, "threadIdx.x")
    if own is not None:
        _block_reduce(s, name, own.name, threads)
        return True
    rest = st.leaves[1:]
    s.bind(first, "blockIdx.x")
    if rest:
        inner = s.fuse(*[Axis(name, n) for n in rest]) if len(rest) > 1 else Axis(name, rest[0])
        _, ti = s.split(inner, threads)
        s.bind(ti, "threadIdx.x")
    _row_in_shared(s, name, rows, target)
    return True


def _block_reduce(s, name, k, threads):
    """A block per output of a stage (its data loops fused, bound to blockIdx.x; none: one
    block) whose `threads` threads split its reduction loop k (consecutive threads take
    consecutive steps) and combine their parts (warp shuffles, then shared memory); its
    other reduction loops run inside each thread."""
    st = s.stages[name]
    data = [n for n in st.leaves if not st.axes[n].reduce]
    ko, ki = s.split(Axis(name, k), threads)
    rest = [Axis(name, n) for n in st.leaves if st.axes[n].reduce and n != ki.name]
    if data:
        row = s.fuse(*[Axis(name, n) for n in data]) if len(data) > 1 else Axis(name, data[0])
        s.reorder(row, ki, *rest)
        s.bind(row, "blockIdx.x")
    else:
        s.reorder(ki, *rest)
    s.bind(ki, "threadIdx.x")


def split_reduction(s, name, target, cfg=None):
    """A reduction with few outputs (a whole-array sum or max, the rows of a short and wide
    matrix, the columns of a tall and narrow one; _split_plan says how few) over a long
    or symbolic axis: one thread or block per output would leave most of the GPU idle
    (a whole-array sum ran on one thread). Its axis is split into contiguous parts
    (rfactor, blocked): a block per part and output, whose threads read consecutive
    elements of the part and combine their results; then a block per output combines
    its parts. About four parts per multiprocessor in all (a knob). A reduction down
    columns (the outputs' last axis is the contiguous one: a column sum of a tall array)
    with fewer outputs than a quarter of a full grid's threads is split the same way,
    but its parts run a thread per part and column (consecutive threads read
    consecutive columns), enough of them to fill the GPU (_column_plan). Several
    reduction axes of symbolic extents are split as one (rfactor's fuse=): a thread per
    part, part p of P reading the row-major positions p, p + P, ... . Returns whether it
    did."""
    plan = _split_plan(s, name, target)
    if plan is None:
        return False
    k, across, parts, columns, fused = plan
    st = s.stages[name]
    down_columns = bool(fused) and _column_like(st)
    if cfg is not None:
        parts = cfg.choice(f"{name}.parts", [parts] + [p for p in (parts // 2, parts * 2)
                                                       if p >= 2])
    if isinstance(k.extent, int) and not fused:     # (no part left empty: 1001 in parts
        parts = -(-k.extent // -(-k.extent // parts))   # of 3 is 334, not 500)
    # (fused: part p, a thread, takes p, p + parts, ...: neighbouring threads read
    # neighbouring elements)
    rf = s.rfactor(name, Axis(name, k.name), parts, blocked=not fused,
                   fuse=[Axis(name, a.name) for a in fused]).name
    if fused and not down_columns:
        # (the outputs outside, the parts inside, a thread each: neighbouring threads
        # read neighbouring elements; down columns, the parts outside: neighbouring
        # threads read neighbouring columns)
        rs = s.stages[rf]
        s.reorder(*[Axis(rf, n) for n in rs.leaves[1:] if not rs.axes[n].reduce],
                  Axis(rf, rs.leaves[0]), *[Axis(rf, n) for n in rs.leaves if rs.axes[n].reduce])
    # (threads of a reduction across them: a power of two no larger than the loop, so
    # that the split loop keeps its extent: a thread reduction takes the whole block)
    threads = target.threads_per_block
    if columns:                     # (a thread per part and column, the columns innermost)
        grid_stride(s, rf, target, cfg)
    elif across is not None:
        _block_reduce(s, rf, across.name, min(threads, _floor_pow2(across.extent)))
    else:                           # (k_o: what is left of k in each part)
        _block_reduce(s, rf, f"{k.name}_o", threads)
    (kr,) = [n for n in st.leaves if st.axes[n].reduce]
    if columns and parts < target.warp_size:    # (a thread per column over a few parts)
        grid_stride(s, name, target, cfg)
    else:
        _block_reduce(s, name, kr, min(threads, _floor_pow2(parts)))
    return True


def _split_plan(s, name, target):
    """(axis split into parts, axis the threads take or None, parts, whether a thread
    takes a part (of a column), the reduction axes fused with the split one) for
    split_reduction; None where it does not apply."""
    st = s.stages[name]
    op = st.tensor.op
    if op.reduce is None or op.reduce.op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) or \
            not all(isinstance(a.extent, int) for a in op.axes) or \
            any(x.attach == "at" and x.attach_to[0] == name for x in s.stages.values()):
        return None
    outputs = math.prod(a.extent for a in op.axes)
    threads, sms = target.threads_per_block, target.multiprocessors
    static = all(isinstance(k.extent, int) for k in op.reduce_axes)
    size = math.prod(a.extent for a in op.reduce_axes) if static else None
    if outputs >= target.warp_size and _column_like(st):
        plan = _column_plan(op, outputs, size, target)
        if plan is not None:
            return plan
    # few outputs: fewer than a quarter of the multiprocessors, or fewer than twice
    # their number over a long reduction (a block per output, one kernel, is as good
    # where rows are many or short: softmax of 256 rows of 1024 reads each row once)
    if outputs == 0 or outputs >= 2 * sms or static and (
            size < 4 * threads or 4 * outputs > sms and size < 64 * threads):
        return None
    wanted = -(-4 * sms // outputs)
    last = op.reduce_axes[-1]
    long = [k for k in op.reduce_axes if k.extent != 1]     # (a size of 1: no digit)
    if not static and len(long) > 1 and (outputs == 1 or _column_like(st)):
        # all the reduction axes as one (a whole array's: its row-major positions), in
        # a part per thread of two blocks per multiprocessor: one axis alone may be
        # short (the last of a (7001, 3) array split into 528 parts left 525 empty, and
        # each thread of the other three walked all 7001 rows). (Parts taken apart, a
        # part p of P reads p, p + P, ...: the bounds check proves those reads from the
        # loop's `k < n0 * n1`; a contiguous block of ceil(n0 * n1 / P) for each would
        # start at a product it cannot bound. Two blocks a multiprocessor: the partials
        # are combined by one block, which reads them all. One output, or outputs along
        # the contiguous axis: the read is at k * outputs + j, with no division; other
        # outputs, i * n1 * n2 + k, are not joined so: their last axis is split.)
        parts = 2 * target.multiprocessors * threads // outputs
        return long[0], None, max(2, parts), True, tuple(long[1:])
    if not static:      # (the one axis longer than 1: (n, 1) split its 1, one part)
        return (long or [last])[-1], None, wanted, False, ()
    # which axis is split into parts, and which one a block's threads take consecutive
    # steps of: the last axis, split, its parts' steps to the threads (a part: two steps
    # of them at least); or another, split, the threads over the innermost other axis
    # of a warp's length (else over the part). Whichever gives the most parts; the other
    # reductions run inside each thread.
    best = (min(wanted, last.extent // (2 * threads)), last, None)
    for k in op.reduce_axes[:-1]:
        across = next((a for a in reversed(op.reduce_axes) if a is not k
                       and a.extent >= target.warp_size), None)
        parts = min(wanted, k.extent if across is not None else k.extent // (2 * threads))
        if parts > best[0]:
            best = (parts, k, across)
    parts, k, across = best
    return (k, across, parts, False, ()) if parts >= 2 else None


# a thread's least share of a column in a split column reduction (steps of its part)
_COLUMN_STEPS = 16


def _column_like(st):
    """Whether a reduction walks memory down columns: every read it streams along a
    reduction loop that moves with the outputs too has a last index that steps by one
    with its last data axis and not with a reduction loop (a column sum's X[k, j]). A
    read of the outputs' own (a row statistic m[i]) or of the reduction's alone (the
    weights w[k] of w @ X) walks no columns and does not count; a matmul's A[i, k]
    steps along k."""
    op = st.tensor.op
    if not op.axes or op.axes[-1].extent == 1:     # (a kept axis of one: no columns)
        return False
    j = op.axes[-1].var
    ks = {k.var for k in op.reduce_axes}
    data = {a.var for a in op.axes}
    streamed = False
    for acc in walk_expr(op.reduce.body):
        if not isinstance(acc, Access) or not acc.indices:
            continue
        used = {v for i in acc.indices for v in walk_expr(i) if isinstance(v, Var)}
        if not used & ks or not used & data:
            continue
        f = linear(acc.indices[-1])
        if f is None or f.get(j) != 1 or any(f.get(k) for k in ks):
            return False
        streamed = True
    return streamed


def _column_plan(op, outputs, size, target):
    """split_reduction's plan for a column reduction with fewer outputs than a quarter
    of the threads a full grid runs (a thread per column would leave the rest of the GPU
    idle: 512 columns of a million rows ran on two blocks): its longest reduction axis
    in parts, as many as a full grid of threads takes in one wave, each part at least
    _COLUMN_STEPS steps of the whole reduction where its length is known (a symbolic
    one gets a full grid's parts, empty where it is short). None where the reduction is
    short, the array small (one kernel of a thread per column serves it) or the outputs
    fill the GPU."""
    full = target.multiprocessors * _WAVES * target.threads_per_block
    # (the longest reduction axis is split; a symbolic one is taken as long)
    k = max(op.reduce_axes, key=lambda a: a.extent if isinstance(a.extent, int) else 2 ** 62)
    if 4 * outputs >= full or size is not None and (
            size < 2 * _COLUMN_STEPS or outputs * size < full // _WAVES):
        return None
    parts = full // outputs
    if size is not None:
        parts = min(parts, k.extent, size // _COLUMN_STEPS)
    return (k, None, parts, True, ()) if parts >= 2 else None


def plans(graph, target, only=None):
    """{stage: plan} for the reductions of `graph` whose kernel of symbolic extents would
    leave most of the GPU idle, or read its rows a thread each, where the kernel of
    `graph`'s fixed shapes would not: a reduction with more than one output but fewer
    than the GPU has blocks (or, down columns, threads) over a long axis (split_reduction
    needs the count of outputs; plan: ("split", the axis split, the axis a block's
    threads take or None, whether down columns)), or along long contiguous rows
    (block_per_row needs their length; plan: ("rows",)). Arrays of fewer elements than
    the multiprocessors have threads in one block each are left out: a compilation would
    cost more than it gains. The op library (jitdl.eager) compiles the calls that have
    such plans for the sizes the plans need (keeps_plans) rather than once for every
    size: a column sum of a tall array ran on a thread per column, jd.nn.softmax of 8192
    rows as three kernels of a thread per row. `only`: those stages' plans, whatever
    their size (symbolic). (The plans are read off the definition's stages as they are,
    before auto_schedule computes row statistics at their rows.)"""
    s, small, found = None, target.multiprocessors * target.threads_per_block, {}
    for t in stages_of(graph.outputs):
        op = t.op
        if op.reduce is None or only is not None and t.name not in only:
            continue
        if only is None:
            outputs = math.prod(a.extent for a in op.axes)
            size = math.prod(k.extent for k in op.reduce_axes)
            if not isinstance(outputs * size, int) or outputs < 2 or outputs * size < small:
                continue    # (one output: its kernel of symbolic extents splits it too)
        s = s or Schedule(graph)
        split = _split_plan(s, t.name, target)      # (tried first, as auto_schedule does)
        if split is not None:
            k, across, _, columns, _ = split
            found[t.name] = ("split", k.name, across and across.name, columns)
        elif _row_axis(s.stages[t.name], target) is not None:
            found[t.name] = ("rows",)
    return found


def keeps_plans(graph, fixed, target):
    """Whether `graph`, traced with some sizes symbolic (the rows of a softmax, the length
    of a column sum), gets the plans that `plans` finds for the fixed shapes `fixed` of
    the same definition: each stage a block per row, or split along the same axis with
    the same axis across its threads (the count of parts may differ: a symbolic length
    gets a full grid's)."""
    wanted = plans(fixed, target)
    return plans(graph, target, wanted) == wanted


def _split_statistics(s, name, target, cfg=None):
    """Row statistics computed at the rows of a stage with few rows (the sum along a short
    and wide array, a softmax of a few long rows): a block per row would leave most of
    the GPU idle. Where split_reduction takes each of
    them, they are computed on their own, split. Returns whether they were."""
    stats = [x.tensor.name for x in s.stages.values()
             if x.attach == "at" and x.attach_to[0] == name and x.is_reduce]
    if not stats:
        return False
    if any(_split_plan(s, n, target) is None for n in stats):
        return False
    for n in stats:
        s.compute_root(s[n])
        split_reduction(s, n, target, cfg)
    return True


def _row_in_shared(s, name, rows, target):
    """Copy the row of the one input that the row's stages read into shared memory, at
    the row loop, when a row of it fits."""
    st = s.stages[name]
    inputs = {t.name: t for x in rows + [st] for t in s._reads(x)
              if t.name not in s.stages or s.stages[t.name].attach == "root"
              and t.name != name and not s.stages[t.name].is_reduce}
    if len(inputs) != 1:
        return
    (t,) = inputs.values()
    if t.ndim < 2 or not all(isinstance(d, int) for d in t.shape):
        return
    row_bytes = dtypes.itemsize(t.dtype) * math.prod(t.shape[1:])
    if row_bytes > target.shared_bytes - 4096:     # (room for the reductions' slots)
        return
    # (the row's own stages and those inlined into them alone: another stage that reads
    # the input, a column sum beside the row sums, is not computed at this row loop and
    # reads it from memory; readers taken from every stage failed compute_at, and the
    # definition lost its block per row to the 'no shared rows' level)
    own = {x.tensor.name for x in rows + [st]}
    others = {n for x in s.stages.values() if x.tensor.name not in own
              and x.attach != "inline" for n in _inlined(s, x)}
    own |= {n for x in rows + [st] for n in _inlined(s, x)} - others
    readers = [x for x in s.stages.values() if x.tensor.name in own and any(
        isinstance(a, Access) and a.tensor is t for a in walk_expr(x.tensor.op.body))]
    cache = s.cache_read(t.name, [s[x.tensor.name] for x in readers], "shared")
    s.compute_at(cache, s[name], Axis(name, st.leaves[0]))


def _inlined(s, st):
    """The names of the stages inlined into st, through inlined stages."""
    out, todo = set(), [st]
    while todo:
        for a in walk_expr(todo.pop().tensor.op.body):
            p = s.stages.get(a.tensor.name) if isinstance(a, Access) else None
            if p is not None and p.attach == "inline" and p.tensor.name not in out:
                out.add(p.tensor.name)
                todo.append(p)
    return out


def _matmul_like(s, st):
    """A reduction over one axis k of two operands, each read with k and one of the two
    data axes (C[i, j] = sum(A[i, k] * B[k, j]), possibly batched in front), with
    constant extents large enough for a tile of the block."""
    op = st.tensor.op
    if op.reduce is None or len(op.reduce_axes) != 1 or len(op.axes) < 2 \
            or op.reduce.op not in (ReduceOp.SUM,) or _symbolic(st):
        return False
    i, j = op.axes[-2], op.axes[-1]
    k = op.reduce_axes[0]
    if i.extent < 16 or j.extent < 16 or k.extent < 8:
        return False
    seen = set()
    for acc in walk_expr(op.reduce.body):
        if isinstance(acc, Access):
            used = {v for x in acc.indices for v in walk_expr(x) if isinstance(v, Var)}
            if k.var in used and (i.var in used) != (j.var in used):
                seen.add(i.var in used)
    return seen == {True, False}


def _symbolic(st):
    return any(not isinstance(a.extent, int) for a in st.axes.values())


def tile_matmul(s, name, target, cfg=None):
    """Shared-memory and register tiling of a matmul-like stage: a block computes a
    BM x BN tile of the output, each of its threads a TM x TN block held in registers;
    per step of BK along k the block copies the BM x BK and BK x BN tiles of the operands
    into shared memory together, then every thread accumulates its block from them.
    Sizes are knobs. The default, 128 x 128 tiles of 8 x 8 per thread (64 accumulators in
    registers, each step of k reading 16 values from shared memory for 64 fused
    multiply-adds) by 256 threads, BK 16 (8 or 32 where 16 does not divide k and they
    do: a partial step guards every product), is the usual SIMT shape; 64 x 128 tiles where
    128 x 128 ones would be fewer blocks than the device has multiprocessors. `jgroups` 2
    spreads a thread's 8 columns as two runs of 4, half a tile apart: the runs of
    neighbouring threads are then adjacent, so their 16-byte shared loads do not
    conflict. (On an H100, SGEMM 4096^3: 41 TFLOP/s; 38 with one run of 8 columns; 13.9
    with 4 x 4 per thread and 64 x 64 tiles, the earlier default.)"""
    op = s.stages[name].tensor.op
    return _tile(s, name, target, cfg, [a.name for a in op.axes[:-2]], op.axes[-2].name,
                 op.axes[-1].name, [op.reduce_axes[0].name])


def _contraction(s, st):
    """(batch, rows, cols, reductions): the loops of a stage that sums the products of two
    operands, where the output's rows are read from one operand only and its columns
    (the last output axis among them) from the other only, batch axes from both or
    neither, every reduction axis from both: a convolution (out[b, f, y, x] = sum over
    (c, r, t) of X[b, c, y + r, x + t] * W[f, c, r, t]: rows f, columns (b, y, x)) or a
    contraction of several axes; None for anything else (and for matmul-like stages,
    which tile_matmul takes)."""
    op = st.tensor.op
    if op.reduce is None or op.reduce.op is not ReduceOp.SUM or len(op.axes) < 2 \
            or _symbolic(st) or _matmul_like(s, st):
        return None
    used = {}
    for acc in walk_expr(op.reduce.body):
        if isinstance(acc, Access):
            used.setdefault(acc.tensor.name, set()).update(
                v for x in acc.indices for v in walk_expr(x) if isinstance(v, Var))
    if len(used) != 2:
        return None
    last = op.axes[-1].var
    (a, b) = used.values()
    if last in a:
        a, b = b, a
    if last not in b or last in a or any(k.var not in a or k.var not in b
                                         for k in op.reduce_axes):
        return None
    # column loops are those after the last row loop (a convolution's batch loop, in
    # front of its channels, goes to the blocks like a batch: its windows are apart)
    rows = [x.name for x in op.axes if x.var in a and x.var not in b]
    if not rows:
        return None
    after = op.axes[max(n for n, x in enumerate(op.axes) if x.name in rows) + 1:]
    cols = [x.name for x in after if x.var in b and x.var not in a]
    batch = [x.name for x in op.axes if x.name not in rows and x.name not in cols]
    ext = {x.name: x.extent for x in op.axes}
    if not cols or math.prod(ext[n] for n in rows) < 16 or \
            math.prod(ext[n] for n in cols) < 16 or \
            math.prod(k.extent for k in op.reduce_axes) < 8:
        return None
    return batch, rows, cols, [k.name for k in op.reduce_axes]


def tile_contraction(s, name, target, cfg=None):
    """tile_matmul's tiling for a stage _contraction describes: its row loops fused into
    one, its column loops into another, the first reduction loop split into steps of bk
    and the other reductions (a convolution's kernel window) run whole inside each
    step, unrolled; the block copies what a step reads of each operand into shared
    memory (for a convolution, the input window of its output tile)."""
    st = s.stages[name]
    found = _contraction(s, st)
    if found is None or any(x.attach == "at" for x in s.stages.values()
                            if x.attach_to and x.attach_to[0] == name):
        return False
    batch, rows, cols, ks = found
    s.reorder(*[Axis(name, n) for n in batch + rows + cols + ks])
    i = s.fuse(*[Axis(name, n) for n in rows]).name if len(rows) > 1 else rows[0]
    j = s.fuse(*[Axis(name, n) for n in cols]).name if len(cols) > 1 else cols[0]
    return _tile(s, name, target, cfg, batch, i, j, ks)


def _tile(s, name, target, cfg, batch, i, j, ks):
    """Tile a stage whose loops are batch..., i, j, k, window...: see tile_matmul."""
    st = s.stages[name]
    op = st.tensor.op
    k, window = ks[0], ks[1:]
    ext = {n: st.axes[n].extent for n in st.leaves}

    def knob(key, options):
        return cfg.choice(f"{name}.{key}", options) if cfg is not None else options[0]
    tm, tn = knob("tm", [8, 4, 2]), knob("tn", [8, 4, 2])
    # 128-row tiles, or 64-row ones where 128 would leave multiprocessors idle or the
    # rows are no more than 64
    blocks = math.prod(ext[n] for n in batch) * -(-ext[i] // 128) * -(-ext[j] // 128)
    rows = [16, 8, 32] if blocks >= target.multiprocessors and ext[i] > 64 else [8, 16, 32]
    ty, tx = knob("ty", rows), knob("tx", [16, 8, 32])
    # a step of k covers about 16 products of the two operands' tiles
    per = math.prod(ext[n] for n in window)
    steps = max(1, round(16 / per))
    # (sizes that divide k first: a partial step guards every product of the last)
    bks = list(dict.fromkeys([steps, 8, 32, 4, 1] if window else [16, 8, 32, 4]))
    bk = knob("bk", sorted(bks, key=lambda b: ext[k] % b != 0))
    groups = knob("jgroups", [tn // 4, 1]) if tn % 4 == 0 and tn > 4 else 1
    if ty * tx > target.max_threads_per_block or ty * tx < target.warp_size:
        return False
    bm, bn = ty * tm, tx * tn
    readers = [x for x in s.stages.values() if x is not st and st.tensor in s._reads(x)]
    reads = [acc.tensor for acc in walk_expr(op.reduce.body) if isinstance(acc, Access)]
    if not window and (bm + bn) * bk * max(dtypes.itemsize(t.dtype) for t in reads) > \
            target.shared_bytes:
        return False
    operands = [t.name for t in reads]
    if len(set(operands)) != 2 or readers and any(x.attach == "at" for x in readers):
        return False
    ax = {n: Axis(name, n) for n in st.leaves}
    io, ii = s.split(ax[i], bm)
    jo, ji = s.split(ax[j], bn)
    iy, it = s.split(ii, tm)
    if groups > 1:          # column jo*bn + g*(bn/groups) + x*(tn/groups) + t
        jg, jr = s.split(ji, bn // groups)
        jx, jt = s.split(jr, tn // groups)
        inner = [it, jg, jt]
    else:
        jx, jt = s.split(ji, tn)
        inner = [it, jt]
    ko, ki = s.split(ax[k], bk)
    win = [ax[n] for n in window]
    s.reorder(*[Axis(name, n) for n in batch], io, jo, iy, jx, ko, ki, *win, *inner)
    # (blockIdx.y and .z take 65535 blocks, .x 2^31 - 1: where the batch or the row tiles
    # are more, they go to blockIdx.x together, fused, the column tiles to .y; a batched
    # matmul of 70000 small matrices, or 9 million rows, lost its tiles to the grid limit)
    limit = target.max_grid_dims
    nb = math.prod(ext[n] for n in batch)
    if nb > limit[2] or -(-ext[i] // bm) > limit[1]:
        if -(-ext[j] // bn) > limit[1]:
            return False
        rows = s.fuse(*[Axis(name, n) for n in batch], io) if batch else io
        s.bind(rows, "blockIdx.x")
        s.bind(jo, "blockIdx.y")
    else:
        if batch:
            b = s.fuse(*[Axis(name, n) for n in batch]) if len(batch) > 1 else \
                Axis(name, batch[0])
            s.bind(b, "blockIdx.z")
        s.bind(io, "blockIdx.y")
        s.bind(jo, "blockIdx.x")
    s.bind(iy, "threadIdx.y")
    s.bind(jx, "threadIdx.x")
    for loop in [ki, *win, *inner]:
        s.unroll(loop)
    for t in dict.fromkeys(operands):
        cache = s.cache_read(t, [s[name]], "shared")
        s.compute_at(cache, s[name], ko)
    return True


def grid_stride(s, name, target, cfg=None):
    """Fuse the data loops of a root stage and bind them as a grid-stride loop:
    for step: blockIdx.x b: threadIdx.x t: element (step * G + b) * T + t. Returns the
    (step, block, thread) loops, or None for a stage without data loops."""
    st = s.stages[name]
    data = [n for n in st.leaves if not st.axes[n].reduce]
    if not data:
        return None
    if st.leaves[:len(data)] != data:       # data loops first, reductions inside
        s.reorder(*[Axis(name, n) for n in data + [n for n in st.leaves if n not in data]])
    fused = s.fuse(*[Axis(name, n) for n in data]) if len(data) > 1 else Axis(name, data[0])
    extent = st.axes[fused.name].extent
    threads = target.threads_per_block
    if cfg is not None:
        threads = cfg.choice(f"{name}.threads", [target.threads_per_block] + [
            n for n in (64, 128, 512, 1024)
            if n != target.threads_per_block and n <= target.max_threads_per_block])
    if isinstance(extent, int):
        threads = min(threads, _round_up(max(extent, 1), target.warp_size))   # (0: empty)
    outer, t = s.split(fused, threads)
    blocks = target.multiprocessors * _WAVES
    oext = st.axes[outer.name].extent
    if isinstance(oext, int) and oext <= blocks:
        s.bind(outer, "blockIdx.x")
        s.bind(t, "threadIdx.x")
        return None, outer, t
    step, b = s.split(outer, blocks)
    s.bind(b, "blockIdx.x")
    s.bind(t, "threadIdx.x")
    return step, b, t


def bind_unbound(s, target):
    """A user's GPU schedule runs the root stages it does not touch (no step but
    compute_root names them, nothing is computed at them: a stage it does not mention or
    only stores, one split off a large expression by te.ops._hoist_shared) as
    grid-stride loops, as the automatic schedule would (a reduction to one value: split
    over the GPU, split_reduction): unbound, such a stage is one thread's loop nest. A
    stage the schedule worked on stays as the user left it. Returns the names of the
    stages bound."""
    done, touched = [], _touched(s)
    for name, st in list(s.stages.items()):
        if st.attach != "root" or name in touched:
            continue
        if grid_stride(s, name, target) is not None or split_reduction(s, name, target):
            done.append(name)
    return done


def _touched(s):
    """The stages a schedule worked on: named by a step other than where the stage is
    computed or what it reads from (compute_root, cache_read: its loops stay the
    definition's), or with a stage computed at them."""
    touched = {step.stage for step in s.typed_steps
               if not isinstance(step, (CacheRead, ComputeRoot, ComputeInline))}
    return touched | {x.attach_to[0] for x in s.stages.values() if x.attach == "at"}


def one_thread_stages(s, target):
    """The root stages a user's GPU schedule worked on that run on one thread: none of
    their loops bound to a block or thread (bind_unbound leaves them as they are), with
    at least a block's worth of iterations (a 0-d result of a few steps on one thread is
    fine)."""
    idle, touched = [], _touched(s)
    for name, st in s.stages.items():
        if st.attach != "root" or name not in touched or \
                any(st.axes[n].kind.bound for n in st.leaves):
            continue
        work = 1
        for n in st.leaves:
            ext = st.axes[n].extent
            work *= ext if isinstance(ext, int) else target.threads_per_block
        if work >= target.threads_per_block:
            idle.append(name)
    return idle


def _floor_pow2(n):
    return 1 << (n.bit_length() - 1)


def _round_up(n, m):
    return -(-n // m) * m
