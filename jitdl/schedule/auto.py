"""The automatic schedule for definitions without @jd.schedule (target "cpu").

Rules, in order: inline injective intermediate stages into their consumers; compute row
statistics (and other producers read one row at a time) inside their consumer's row loop;
compute an intermediate larger than the definition's own arrays one slice at a time at its
consumer's outer loop; order each reduction so that the innermost loop is a contiguous data
loop when one exists (a register tile, packing its streamed operand where the pack is reused
across the tile's rows, one cache-sized block at a time when the operand is big); fuse
outer data loops and run them in parallel when there is enough work; vectorise the
innermost contiguous data loop.

So the temporaries it makes stay small: a pack is at most a cache-sized block (or the
operand itself when that is smaller), an intermediate is inlined, computed at a consumer's
loop (a block-sized buffer), or no larger than the definition's inputs and outputs
together unless no consumer loop can take it.

LEVELS lists the decisions from all of them down to none (the definition's own loop
nests). The pipeline applies the first level whose schedule passes its own checks, so that
a definition never fails on a schedule its user did not write.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from jitdl import dtypes
from jitdl.ir.analysis import free_vars, linear, reads_memory
from jitdl.ir.nodes import Access, Binary, BinOp, Call, ForKind, Intrin, ReduceOp, Select, Var
from jitdl.ir.visit import expr_children, map_expr, substitute, walk_expr, walk_unique
from jitdl.schedule import rewrite
from jitdl.schedule.schedule import Axis, Schedule, Split

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


def _nbytes(t):
    n = dtypes.itemsize(t.dtype)
    for d in t.shape:
        n *= d
    return n


def _io_bytes(s):
    """Bytes of the definition's own arrays: the tensors its stages read that no stage
    computes (inputs), and its outputs."""
    inputs = {}
    for st in s.stages.values():
        for n in walk_unique(st.tensor.op.body):
            if isinstance(n, Access) and n.tensor.name not in s.stages:
                inputs[n.tensor.name] = n.tensor
    return sum(map(_nbytes, inputs.values())) + sum(map(_nbytes, s.outputs))


def _innermost_contiguous(stage, transposed=False):
    """True when the last data axis walks every tensor it reads with stride 1: it appears
    with coefficient 1 in the last index only (e.g. B[k, j], P[c, y + ry, x + rx]). With
    transposed, a read that _transposed_dim finds (B[j, k]) counts too: a register tile
    packs it into panels it reads with stride 1."""
    op = stage.tensor.op
    if not op.axes:
        return False
    last = op.axes[-1].var
    uses = [a for a in walk_expr(op.body) if isinstance(a, Access)
            and any(last is v for i in a.indices for v in walk_unique(i))]

    def stride_one(acc):
        if any(last is v for i in acc.indices[:-1] for v in walk_unique(i)):
            return transposed and _transposed_dim(op, acc) is not None
        form = linear(acc.indices[-1])
        return form is not None and form.get(last) == 1
    return bool(uses) and all(stride_one(a) for a in uses)


def _transposed_dim(op, acc):
    """The dimension d of a reduction's read acc that the last data axis j indexes across
    the rows of a tensor of concrete shape (B[j, k] of TVM's dense, C[i, j] = sum(A[i, k]
    * B[j, k])): j is index d alone, d is not the last, j appears nowhere else in acc and
    the last index is a reduction variable. Else None."""
    last, t = op.axes[-1].var, acc.tensor
    dims = [d for d, ix in enumerate(acc.indices) if any(last is v for v in walk_unique(ix))]
    if t.ndim < 2 or len(dims) != 1 or acc.indices[dims[0]] is not last or \
            dims[0] == t.ndim - 1 or not all(isinstance(n, int) for n in t.shape):
        return None
    if not any(acc.indices[-1] is r.var for r in op.reduce_axes) or \
            _rereads(op, acc, op.axes[-1]) < _TRANSPOSED_ROWS:
        return None
    return dims[0]


# Rows of output that must reread a transposed operand for its pack (one gather of it)
# to pay: with fewer, a dot product per output element along the contiguous k is as fast
# (dense of 8 x 300 by 64 x 300 float32 on one Zen 3 core: 12-15 us as dot products, 16-18
# packed and tiled; 16 rows: 21-31 vs 20-21 us; 32 rows: 58 vs 27-32 us).
_TRANSPOSED_ROWS = 16


def _guarded_reads(stage):
    """A stage whose body selects between memory reads (padding): cheap to store once,
    costly to recompute inside a reduction's innermost loop."""
    return any(isinstance(n, Select) and (reads_memory(n.t) or reads_memory(n.f))
               for n in walk_unique(stage.tensor.op.body))


def _consumed_by_reduction(s, tensor):
    for st in s.stages.values():
        if st.is_reduce and any(isinstance(n, Access) and n.tensor is tensor
                                for n in walk_unique(st.tensor.op.body)):
            return True
    return False


def _vars_with(stage, var):
    """The variables of every access that also uses `var`."""
    out = set()
    for acc in walk_expr(stage.tensor.op.body):
        if isinstance(acc, Access):
            vs = {v for i in acc.indices for v in walk_unique(i) if isinstance(v, Var)}
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
    widths = [f for f in (lanes, 2 * lanes, 3 * lanes, 4 * lanes, 32, 64) if f <= last.extent]
    if cfg is not None:      # the tile sizes are knobs for the tuner; the rule's choice first
        tj = cfg.split(f"{name}.tile_j", last.extent, [tj] + widths)
    cand = _row_axis(st, last)
    ti = None
    if cand is not None:
        budget = target.max_accumulators(dtypes.itemsize(st.tensor.dtype))
        ti = min(max(budget // tj, 1), cand.extent)
        if cand is not data[0] or cand.extent < _ROW_TILES * ti:
            ti = _even_rows(cand.extent, ti)
        if cfg is not None:
            rows = _tile_rows(target, lanes, widths)
            ti = cfg.split(f"{name}.tile_i", cand.extent,
                           [ti] + [f for f in rows if f <= cand.extent])
        ti = ti if ti and ti > 1 else None
    return last, tj, (cand if ti else None), ti


_ROW_TILES = 32     # row tiles enough for the outermost loop alone to feed every thread
_FEW_ROW_TILES = 4  # up to this many row tiles run inside each column tile


def _row_axis(st, last):
    """The data axis a register tile's rows run along: the longest one (but the last)
    that the last axis's operands do not share, or None."""
    shared = _vars_with(st, last.var)
    cands = [a for a in st.tensor.op.axes[:-1] if a.var not in shared]
    return max(cands, key=lambda a: a.extent) if cands else None


def _even_rows(extent, ti):
    """The rows of a register tile whose row loop runs inside other data loops (a batch),
    or has fewer than _ROW_TILES tiles: the largest divisor of `extent` of more than half
    of ti, else ti. A tile whose row loop leaves a tail guards each row of the tile; where
    that loop is fused into the parallel loop the guards stay in the unrolled tile and
    LLVM keeps its accumulators in memory (2 x 128 x 128 @ 2 x 128 x 64 float32 on a
    2-core Zen: 53-85 us with 12-row tiles, 27.5 us with 8-row ones, NumPy 27). The
    outermost row loop is never fused with a tail (_parallelize): its tail is peeled, so
    with rows enough it keeps the full tile (512^3 float32 on a 2-core Zen: 6 x 16 tiles
    5-10% faster than 4 x 16, where the loop runs alone in parallel)."""
    if extent % ti == 0:
        return ti
    d = max(d for d in range(1, ti + 1) if extent % d == 0)
    return d if 2 * d > ti else ti


def _tile_rows(target, lanes, widths):
    """Row counts a tuner may try for a register tile: small ones, and for each tile
    width those whose accumulators leave 2, 4 or 8 vector registers to stream operands
    (14 x 32 and 12 x 32 float32 on AVX-512, 7 x 16 and 6 x 16 on AVX2); at most 16,
    as the unrolled tile's code grows with its rows."""
    rows = [1, 2, 4, 6, 8, 12, 16]
    for w in widths:
        per_row = -(-w // lanes)
        rows += [(target.vector_registers - spare) // per_row for spare in (2, 4, 8)]
    return [r for r in dict.fromkeys(rows) if 1 <= r <= 16]


@dataclass(frozen=True)
class _PackPlan:
    """How the streamed operand of a register tile is packed: whole (nc None), or one
    block of nc columns (a multiple of the tile width) by kc steps of reduction axis k
    (kc None: all of them) at a time, computed at the tile's block loop."""
    tensor: str
    dim: int
    nc: int | None = None
    kc: int | None = None
    k: int | None = None


def _pack_plan(s, st, last, tj, cand, ti, target, allow):
    """Pack the operand read along the tile (B[k, j] -> B_pack[j/tj, k, tj]) only where it
    pays: the tile has rows (cand) that all reread the operand, in at least four row
    blocks (a column sum reads each element once: no pack), and the reduction is long
    enough or the operand is an inlined stage (a transpose, which the tile would gather).
    The pack is whole when it fits the target's pack budget and is mostly read; else one
    block at a time (compute_at), so it never takes more than the budget."""
    op = st.tensor.op
    red_work = 1
    for r in op.reduce_axes:
        red_work *= r.extent
    if cand is None or not ti:
        return None
    budget = target.pack_block_bytes
    for acc in [n for n in walk_expr(op.body) if isinstance(n, Access)]:
        t = acc.tensor
        if t.ndim < 2 or f"{t.name}_pack" in s.stages:
            continue
        dim = _transposed_dim(op, acc)      # (B[j, k]: packed whenever tiled, else every
        if dim is None:                     # tile row gathers)
            dim = t.ndim - 1
            inlined = s.stages.get(t.name)
            if not _along_last(acc, last):
                continue
            if inlined is not None and inlined.tensor is t and inlined.attach == "inline":
                # an inlined stage (B.T of A @ B.T, a transposed view of a contraction)
                # would gather each tile row from B's columns: packed wherever the tile
                # rereads it, short reduction, one panel, few row blocks of cand or not
                # (tensordot over axes 1 and 3 of (8, 10, 12, 14) with (10, 16, 14)
                # float32: 53 -> 18 us)
                # (an expanding gather, im2col of a convolution over its flattened output
                # positions, divides in each element's index: packed where one row tile
                # rereads it, (1, 3, 9, 9) by 17 3 x 3 filters float64 on one Zen 4
                # core 16 -> 12 us)
                if _rereads(op, acc, last) < (ti if _expanding_gather(inlined) else 2 * ti):
                    continue
            elif red_work < 64 or cand.extent < 4 * ti or t.shape[-1] < 2 * tj:
                continue        # (a short reduction reads an operand's rows in place)
        itemsize = dtypes.itemsize(t.dtype)
        panels = -(-t.shape[dim] // tj)
        rows, kdim = 1, None     # rows of t the reduction reads (a bare reduction variable
        for d, ix in enumerate(acc.indices):        # reads its extent, else all of them)
            if d == dim:
                continue
            r = next((n for n, ax in enumerate(op.reduce_axes) if ix is ax.var), None)
            rows *= op.reduce_axes[r].extent if r is not None else t.shape[d]
            if r is not None and kdim is None:
                kdim = r
        whole = _nbytes(t) // t.shape[dim] * panels * tj
        panel = rows * tj * itemsize               # one column block of tj, every row read
        if whole <= budget and whole <= 2 * panels * panel:
            return _PackPlan(t.name, dim)
        if "compute_at" not in allow:
            return None
        nc = budget // panel
        if nc >= min(panels, 4):
            return _PackPlan(t.name, dim, min(nc, panels) * tj)
        if kdim is None:
            return None
        nc = min(panels, 4)
        k_ext = op.reduce_axes[kdim].extent
        kc = max(1, budget // (nc * panel // k_ext))
        return _PackPlan(t.name, dim, nc * tj, min(kc, k_ext), kdim)
    return None


def _expanding_gather(st):
    """st only reads another tensor (no math a reduction would recompute) and holds more
    elements than it: stored, it would copy its source several times over (a strided
    conv1d's (kernel position, output column) layout of a (2, 8, 100000) input by 64-wide
    kernels, stride 2, took a second kernel and a 205 MB buffer, 32x the input); inlined,
    its readers read the source in place."""
    body = st.tensor.op.body
    if not isinstance(body, Access) or body.tensor is st.tensor:
        return False
    n, m = st.tensor.shape, body.tensor.shape
    return all(isinstance(d, int) for d in n + m) and math.prod(n) > math.prod(m)


def _along_last(acc, last):
    """Whether `acc` reads its tensor's last axis with the output's last axis alone (B[k,
    j] of a tile over j), and no other axis with it."""
    return acc.indices[-1] is last.var and \
        not any(last.var is v for i in acc.indices[:-1] for v in walk_unique(i))


def _rereads(op, acc, last):
    """Output elements (but the last axis's) that read each element `acc` reads: the
    product of the data axes that do not index it."""
    used = {v for i in acc.indices for v in walk_unique(i) if isinstance(v, Var)}
    n = 1
    for a in op.axes:
        if a is not last and a.var not in used:
            n *= a.extent if isinstance(a.extent, int) else 2 ** 16
    return n


def _fuse_epilogue(s, name, st, consumer, target, cfg, allow):
    """A tiled reduction C read only by an elementwise stage D at D's own indices (bias,
    activation): D is tiled the same way and C's block is computed at D's tile loop, so
    the epilogue reads the block while it is in cache instead of in a second pass."""
    sizes = _tile_sizes(s, name, st, target, cfg)
    if sizes is None:
        return False
    last, tj, cand, ti = sizes
    plan = _pack_plan(s, st, last, tj, cand, ti, target, allow) if "pack" in allow else None
    if plan is not None and plan.nc is None:   # (C is computed at D: no block loop of its own)
        s.pack(plan.tensor, s[name], plan.dim, tj)
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
    # the block in a block-sized buffer of its own: an unrolled block LLVM keeps in vector
    # registers, which the epilogue reads from the stack (in C's whole buffer the block
    # was stored to memory the rest of the kernel never reads: Q @ K^T * 0.125 on one
    # thread took 4.7 ms against 3.9)
    s.compute_at(s[name], s[dname], jo)
    if "vectorize" in allow:
        s.vectorize(ji)
    return True


def _epilogue_in_tiles(s, name, st, target, cfg, allow):
    """Whether tileable reduction C computes its epilogue with its register tiles
    (_fuse_epilogue) rather than in a pass of its own after it: not where the rule
    blocks C's reduction for L1 (_l1_k_block), which a tile finishing its whole sum
    before its epilogue cannot have (the tiles then stream k x tile-width panels from L2
    or L3: 512 x 1024 @ 1024 x 1024 float32 + b on the 2-core Xeon 6.1 ms fused, the
    matmul alone with blocks 5.3, the epilogue's pass over the result 0.2). C is then a
    temporary of the result's size, so only where it takes at most the target's pack
    budget (about half of L3): a 4096 x 4096 float32 result keeps its 8 MB of
    temporaries, not 67. A knob (`epilogue`), the rule's choice first."""
    sizes = _tile_sizes(s, name, st, target)
    if sizes is None:
        return True
    last, tj, cand, ti = sizes
    blocked = _tile_choices(s, name, st, last, tj, cand, ti, target, None, allow).kc
    apart = blocked is not None and _nbytes(st.tensor) <= target.pack_block_bytes
    options = ["apart", "tiles"] if apart else ["tiles", "apart"]
    return (cfg.choice(f"{name}.epilogue", options) if cfg is not None else options[0]) \
        == "tiles"


def _epilogue_reader(s, name, st, outputs, num_threads, target, allow):
    """The elementwise stage that alone reads tileable reduction `st`, at its own indices
    (an epilogue to compute with st's register tiles: _fuse_epilogue), or None."""
    if st.attach != "root" or st.tensor.name in outputs or not _tileable(st, allow):
        return None
    readers = [x for x in s.stages.values()
               if x is not st and x.attach != "inline" and st.tensor in s._reads(x)]
    if len(readers) != 1 or readers[0].is_reduce or readers[0].attach != "root" \
            or _attached(s, readers[0].tensor.name) \
            or _rows_apart(s, name, st, num_threads, target, allow):
        return None
    d = readers[0]
    if d.tensor.shape != st.tensor.shape or any(
            tuple(acc.indices) != tuple(a.var for a in d.tensor.op.axes)
            for acc in _inlined_accesses(s, d, st.tensor)):
        return None
    return d


def _rows_apart(s, name, st, num_threads, target, allow):
    """Column reduction st reads its rows apart from an epilogue: split among the threads,
    or streamed where the rows of an outer iteration would not stay in L2 for register
    tiles walking down their columns (tiles computed with their epilogue keep the partial
    results in registers: a float32 sum over the 3 rows of each i of (1000, 3, 1000)
    streamed its float64 partial sums through a buffer of the result's size and cast them
    in a second pass, 2.9x the time on one thread, 5x on two)."""
    if not _column_reducible(s, name, st, allow):
        return False
    parts = _row_parts(st, num_threads, allow, target)
    if parts != 1:
        return parts > 1
    op = st.tensor.op
    rows, cols = _extent(op.reduce_axes), _extent(op.axes[len(_outer_axes(op)):])
    return rows is None or cols is None or \
        rows * cols * dtypes.itemsize(op.reduce.dtype) > target.l2_bytes // 2


def _row_blocks(s, outputs, num_threads, target, cfg, allow):
    """softmax(Q @ K^T) @ V one block of rows at a time. Where a tiled reduction C (P @ V)
    has an epilogue D, and the rows it reads come from stages that work row by row and
    include a row statistic (S = Q @ K^T, its row max, P = exp(S - max), the row sums),
    those stages are all computed at D's loop over blocks of tile rows: each block of S is
    made, reduced, exponentiated and multiplied by V while it is in L1, where separate
    passes wrote and re-read S and P through memory. Their register tiles are split inside
    the block. Returns the names of the reductions C so scheduled (epilogues); with cfg,
    a knob per C may decline."""
    done = set()
    for name in list(s.stages):
        st = s.stages[name]
        d = _epilogue_reader(s, name, st, outputs, num_threads, target, allow)
        if d is None:
            continue
        sizes = _tile_sizes(s, name, st, target, cfg)
        if sizes is None or sizes[2] is None:
            continue
        last, tj, cand, ti = sizes
        pos = st.tensor.op.axes.index(cand)
        group = _row_group(s, st, d, outputs, pos, ti, target, cfg, allow)
        if not group or cfg is not None and not cfg.choice(f"{name}.row_blocks",
                                                           [True, False]):
            continue
        if not _fuse_epilogue(s, name, st, d, target, cfg, allow):
            continue
        done.add(name)
        dname = d.tensor.name
        jo = next(r.outer for r in d.relations
                  if isinstance(r, Split) and r.parent == d.tensor.op.axes[-1].name)
        lead = d.leaves[:d.leaves.index(jo)]
        loop = s.fuse(*[Axis(dname, n) for n in lead]) if len(lead) > 1 \
            else Axis(dname, lead[0])
        for x, tile in group:
            xname = x.tensor.name
            if tile is not None:
                _block_tile(s, xname, x, *tile)
            elif not x.is_reduce and x.tensor.op.axes[-1].extent >= 4 and "vectorize" in allow:
                s.vectorize(Axis(xname, x.tensor.op.axes[-1].name))
            s.compute_at(s[xname], s[dname], loop)
        _block_tile(s, name, st, last, tj, cand, None)   # (C's tile, over the block now)
        s.compute_at(s[name], s[dname], loop)
    return done


def _row_group(s, c, d, outputs, pos, ti, target, cfg, allow):
    """[(stage, its register tile or None)] for _row_blocks: the root stages that c and d
    read (directly or not) whose leading axes are d's rows (all but its last axis), read
    by every reader at the reader's own rows, with a row statistic among them, blocks of
    ti rows (theirs and c's) that fit half of L2, and every tileable one a register tile
    over the same rows; else None."""
    depth = d.tensor.ndim - 1
    rows = tuple(d.tensor.shape[:depth])
    if depth < 1 or tuple(c.tensor.shape[:depth]) != rows:
        return None
    needed = s._reads_transitively(d)
    members = [x for x in s.stages.values() if x.attach == "root" and x is not c
               and x is not d and x.tensor.name not in outputs and x.tensor in needed
               and x.tensor.ndim in (depth, depth + 1)
               and tuple(x.tensor.shape[:depth]) == rows]
    if not any(x.is_reduce and x.tensor.ndim == depth for x in members):
        return None
    inside = {id(x) for x in members} | {id(c), id(d)}
    block = ti * c.tensor.shape[-1] * dtypes.itemsize(c.tensor.dtype)
    for x in members:
        for y in s.stages.values():
            if y is x or y.attach == "inline" or x.tensor not in s._reads(y):
                continue
            own = [a.var for a in y.tensor.op.axes[:depth]]
            if id(y) not in inside or len(own) < depth or any(
                    any(i is not v for i, v in zip(acc.indices[:depth], own))
                    for acc in _inlined_accesses(s, y, x.tensor)):
                return None
        block += ti * (x.tensor.shape[-1] if x.tensor.ndim > depth else 1) \
            * dtypes.itemsize(x.tensor.dtype)
    if block > target.l2_bytes // 2:
        return None
    group = []
    for x in members:
        tile = None
        if x.tensor.ndim > depth and _tileable(x, allow):
            sizes = _tile_sizes(s, x.tensor.name, x, target, cfg)
            if sizes is None or sizes[2] is None or x.tensor.op.axes.index(sizes[2]) != pos:
                return None
            last, tj, cand, _ = sizes
            # (its rows are the block's ti: as wide as the accumulator budget leaves room
            # for; 24 rows of 32 float32 on AVX-512 spilled, and took 8 s to compile)
            size = dtypes.itemsize(x.tensor.dtype)
            lanes = target.lanes(size)
            tj = min(tj, target.max_accumulators(size) // ti // lanes * lanes)
            if tj < lanes:
                return None
            plan = _pack_plan(s, x, last, tj, cand, ti, target, allow) \
                if "pack" in allow else None
            streamed = _streamed_operand(x, last)
            if plan is None and "pack" in allow and streamed is not None:
                # a short reduction still packs an operand read through an inlined stage
                # (K^T: each tile row would gather its columns from K's rows)
                st_in = s.stages.get(streamed[0].name)
                if st_in is not None and st_in.tensor is streamed[0] and \
                        st_in.attach == "inline" and _nbytes(streamed[0]) <= \
                        target.pack_block_bytes:
                    plan = _PackPlan(streamed[0].name, streamed[1])
            if plan is not None and plan.nc is not None:
                return None           # (a pack per cache block: not inside a row block)
            tile = (last, tj, cand, plan)
        group.append((x, tile))
    return group


def _block_tile(s, name, st, last, tj, cand, plan):
    """The register tile of a stage computed over blocks of rows (_row_blocks): the
    block's columns split by the tile width, the rows (the whole block) unrolled."""
    if plan is not None:
        s.pack(plan.tensor, s[name], plan.dim, tj)
    op = st.tensor.op
    jo, ji = s.split(Axis(name, last.name), tj)
    others = [Axis(name, a.name) for a in op.axes if a is not last and a is not cand]
    s.reorder(*others, jo, *[Axis(name, r.name) for r in op.reduce_axes],
              Axis(name, cand.name), ji)
    s.unroll(Axis(name, cand.name))
    s.unroll(ji)


def _streamed_operand(st, last):
    """(tensor, dim) of the operand a register tile reads along its contiguous axis
    (B[k, j] in C[i, j] = sum(A[i, k] * B[k, j])): it can be packed into panels of the
    tile's width. None when no operand has the last axis alone as its last index."""
    for acc in [n for n in walk_expr(st.tensor.op.body) if isinstance(n, Access)]:
        t = acc.tensor
        if t.ndim >= 2 and _along_last(acc, last):
            return t, t.ndim - 1
        across = _transposed_dim(st.tensor.op, acc)             # (B[j, k])
        if across is not None:
            return t, across
    return None


def _broadcast_operand(st, last, cand):
    """(tensor, dim) of the operand a register tile reads once per row and reduction step
    (A[i, k]: a scalar broadcast across the tile's width): packed into panels of the
    tile's rows, the ti values of one step are contiguous. None when there is none."""
    if cand is None:
        return None
    red = {r.var for r in st.tensor.op.reduce_axes}
    for acc in [n for n in walk_expr(st.tensor.op.body) if isinstance(n, Access)]:
        vs = {v for i in acc.indices for v in walk_unique(i) if isinstance(v, Var)}
        dims = [d for d, ix in enumerate(acc.indices) if ix is cand.var]
        if acc.tensor.ndim >= 2 and last.var not in vs and vs & red and len(dims) == 1 \
                and sum(cand.var is v for i in acc.indices for v in walk_expr(i)) == 1:
            return acc.tensor, dims[0]
    return None


@dataclass(frozen=True)
class _TileChoices:
    """The decisions about one register-tiled reduction besides its tile sizes; each is
    a knob whose default is the rule's choice (from _pack_plan)."""
    pack: tuple          # (tensor, dim, factor, "j" or "i": the tile loop over its panels)
    nc: int | None       # columns per block (a multiple of the tile width), None: no blocks
    kc: int | None       # steps of reduction axis k per block, None: no blocks of k
    k: int               # the reduction axis that kc splits
    order: str           # "rows": row tiles outside column tiles; "cols": the reverse
    unroll_k: int        # the innermost reduction loop unrolled by this factor


def _reduction_depth(st, k):
    """Elements of the streamed operand one step of reduction axis k reads per column
    (the extents of the reduction axes inside k: r * s of a convolution, 1 for a matmul)."""
    n = 1
    for r in st.tensor.op.reduce_axes[k + 1:]:
        n *= r.extent
    return n


def _k_block_options(st, k, tj, target):
    """Steps of reduction axis k per block a tuner may try: those whose panel of the
    streamed operand (k steps x the tile width) takes a quarter, half, all or twice the
    L1 cache (BLIS's kc: 256 float32 with 16-wide tiles and 32 KiB of L1, 384 with
    32-wide tiles and 48 KiB); the whole axis means no blocks."""
    itemsize = dtypes.itemsize(st.tensor.dtype)
    extent = st.tensor.op.reduce_axes[k].extent
    base = target.l1_bytes // (tj * itemsize * _reduction_depth(st, k))
    opts = [max(1, base * f // 4 // 16 * 16 or base * f // 4) for f in (1, 2, 4, 8)]
    return [o for o in opts if o < extent] + [extent]


def _l1_k_block(st, k, tj, target):
    """The rule's block of reduction axis k, or None: steps whose panel of the streamed
    operand takes half of L1 (the other half holds the broadcast operand's rows and what
    the prefetcher brings), a multiple of 16; only for a matmul-like reduction (one
    element per column and step) at least twice as long. Without it each tile streams a
    whole column panel (k x tile width) from L2 or L3: a 2048^2 float32 matmul ran at
    0.6x of OpenBLAS on a 2-core Zen, 1.0x with 256-step blocks."""
    if _reduction_depth(st, k) != 1:
        return None
    itemsize = dtypes.itemsize(st.tensor.dtype)
    kc = target.l1_bytes // (2 * tj * itemsize) // 16 * 16
    return kc if kc >= 16 and 2 * kc <= st.tensor.op.reduce_axes[k].extent else None


def _column_block_options(st, k, tj, n, target):
    """Columns per block a tuner may try (multiples of the tile width): those whose
    block of the streamed operand, one L1-sized k block deep, takes half of L2, all of
    it, or the target's pack budget (L3); all n columns means no column blocks."""
    itemsize = dtypes.itemsize(st.tensor.dtype)
    depth = _reduction_depth(st, k)
    kc = min(st.tensor.op.reduce_axes[k].extent,
             max(1, target.l1_bytes // (tj * itemsize * depth)))
    col = kc * depth * itemsize
    opts = [max(tj, b // col // tj * tj)
            for b in (target.l2_bytes // 2, target.l2_bytes, target.pack_block_bytes)]
    return [o for o in opts if o < n] + [n]


def _tile_choices(s, name, st, last, tj, cand, ti, target, cfg, allow):
    """The knobs of a register-tiled reduction: which operands to pack, cache blocks of
    its columns and reduction steps, the order of its tile loops, the unrolling of its
    reduction loop. Without cfg, or at a knob's default, the rule's choices."""
    op = st.tensor.op
    plan = _pack_plan(s, st, last, tj, cand, ti, target, allow) if "pack" in allow else None
    streamed = _streamed_operand(st, last)
    k = plan.k if plan is not None and plan.k is not None else next(
        (r for r, ax in enumerate(op.reduce_axes) if streamed is not None and any(
            ix is ax.var for acc in walk_expr(op.body) if isinstance(acc, Access)
            and acc.tensor is streamed[0] for ix in acc.indices)), 0)
    pack = ((plan.tensor, plan.dim, tj, "j"),) if plan is not None else ()
    bcast = _broadcast_operand(st, last, cand) if "pack" in allow and ti else None
    if bcast is not None and last.extent > tj and _costly_inline(s, bcast[0]):
        pack += ((bcast[0].name, bcast[1], ti, "i"),)
    kc = plan.kc if plan is not None else None
    if kc is not None or not pack or "compute_at" in allow:
        # (a pack's own k block, sized to the pack budget, is no cache block: X.T @ X of a
        # (100000, 64) float32 X streamed 65536-step panels of 4 MB per tile, 60 ms)
        l1 = _l1_k_block(st, k, tj, target)
        kc = l1 if kc is None else kc if l1 is None else min(kc, l1)
    if bcast is not None and kc is not None and "compute_at" in allow and \
            last.extent >= 4 * tj and not any(p[3] == "i" for p in pack) and \
            _rows_share_l1_sets(s, bcast[0], bcast[1], ti, target) and \
            _nbytes(bcast[0]) // bcast[0].shape[-1] * kc <= target.pack_block_bytes:
        # the tile's rows of the broadcast operand, kc steps of each, are read by every
        # column tile; where they would crowd a few L1 sets they are packed (2048^2 float32
        # on one Zen 4 core 62 -> 93 GFLOP/s, OpenBLAS 96; 1024^2 float64 32 -> 44,
        # OpenBLAS 45), per k block at the block loop, where that block takes at most the
        # pack budget (at a row tile loop it would sit inside the k blocks). (Packed where
        # they do not crowd, (8, 256, 256) float32 batches lost a quarter of their speed)
        pack += ((bcast[0].name, bcast[1], ti, "i"),)
    # a few row tiles walk the columns inside each column tile ("cols"): each strip of
    # the streamed operand is read from memory once and reread from L1 by the next row
    # tile, where row tiles outside ("rows") read all of it once per row tile, and the
    # threads, splitting the row tiles, each streamed all of it (16 x 4096 @ 4096 x 4096
    # on the 2-core Xeon, whose memory bandwidth moved 3x during the session: float64
    # 67-75 -> 54-65 ms, float32 35-38 -> 27-32, NumPy 31-50 / 21-36; that shape now
    # streams B's rows, _few_rows, and this order serves up to _FEW_ROW_TILES tiles)
    few = cand is not None and ti and cand.extent <= _FEW_ROW_TILES * ti
    rule = _TileChoices(pack, plan.nc if plan else None, kc, k, "cols" if few else "rows", 1)
    if cfg is None:
        return rule
    n, k_ext = last.extent, op.reduce_axes[k].extent
    kc = cfg.split(f"{name}.tile_k", k_ext,
                   [rule.kc or k_ext] + _k_block_options(st, k, tj, target))
    nc = cfg.split(f"{name}.block_j", n, [rule.nc or n] + _column_block_options(
        st, k, tj, n, target))
    if "pack" in allow:
        pack = _pack_choice(name, st, last, tj, ti, rule, cfg)
    order = cfg.choice(f"{name}.order", [rule.order] + [o for o in ("rows", "cols")
                                                         if o != rule.order])
    inner = op.reduce_axes[-1].extent
    unroll = cfg.split(f"{name}.unroll_k", inner, [1] + [u for u in (2, 4) if u < inner])
    # (the unrolled body stays within four register files of accumulators: compile time)
    body = 4 * target.max_accumulators(dtypes.itemsize(st.tensor.dtype))
    unroll = max(1, min(unroll, body // (tj * (ti or 1))))
    if "compute_at" not in allow and (nc < n or kc < k_ext):
        pack = ()                # (a pack per block is computed at the block loop)
    nc = rule.nc if nc == (rule.nc or n) else nc // tj * tj if tj <= nc < n else None
    kc = rule.kc if kc == (rule.kc or k_ext) else kc if kc < k_ext else None
    return _TileChoices(pack, nc, kc, k, order, unroll)


def _rows_share_l1_sets(s, tensor, dim, ti, target):
    """Whether ti consecutive rows of `tensor` along `dim` (a register tile's rows of its
    broadcast operand, read in place) need as many lines in one set of L1 as it has ways:
    each reduction step reads one element of every row, and rows whose offsets, modulo a
    way's bytes, lie within a line of one another read lines of the same sets at every
    step. With the streamed panel's line the set then holds more lines than its ways
    (12 rows of a 1024-wide float32 A, a 4 KiB pitch, or of a 1023- or 1025-wide one,
    rows a way -4 or +4 bytes apart, on a 32 KiB, 8-way L1), and every step fetches A's
    rows from L2 again. Rows that only crowd the sets (6 of 12 rows of a 512-wide
    float32 A in each of two sets) stay within a column tile; refetched from L2 once per
    column tile, they cost less than packing A (512^2 float32 on one Zen 4 core: 3.5
    ms, packed 3.9). Rows less than a line apart in memory (A[k, i], read along its
    contiguous axis) share their lines, not only their sets: one or two lines a step, no
    crowding. An inlined stage (a transposed view) is read another way: no."""
    st = s.stages.get(tensor.name)
    if st is not None and st.tensor is tensor and st.attach == "inline":
        return False
    pitch = dtypes.itemsize(tensor.dtype) * math.prod(tensor.shape[dim + 1:])
    line, sets = target.cache_line_bytes, max(1, target.l1_way_bytes // target.cache_line_bytes)

    def most_lines_in_a_set(shift):
        lines = {(r * pitch + shift) // line for r in range(ti)}
        return max(Counter(n % sets for n in lines).values())
    # (a row's lines change sets only where its element starts a line)
    return max(most_lines_in_a_set(-r * pitch % line) for r in range(ti)) >= target.l1_ways


_COSTLY = {BinOp.DIV, BinOp.FLOORDIV, BinOp.MOD, BinOp.POW, BinOp.ATAN2, BinOp.FMOD}


def _costly_inline(s, tensor):
    """The stage of `tensor` is inlined and computes a division or transcendental math
    (its own inlined producers included): read as a register tile's broadcast operand
    it would be recomputed once per column tile (attention's softmax(S) @ V divided
    every score by its row sum N / tj times), so the rule packs it (computed once)."""
    st = s.stages.get(tensor.name)
    if st is None or st.tensor is not tensor or st.attach != "inline":
        return False
    return _costly_body(s, st)


def _costly_body(s, st):
    """Stage st computes a division or transcendental math, its inlined producers
    included."""
    for n in walk_unique(st.tensor.op.body):
        if isinstance(n, Call) and n.fn in _EXPENSIVE or isinstance(n, Binary) and \
                n.op in _COSTLY and dtypes.is_float(n.dtype):
            return True
        if isinstance(n, Access) and _costly_inline(s, n.tensor):
            return True
    return False


def _pack_choice(name, st, last, tj, ti, rule, cfg):
    """The `pack` knob: which operands to copy into tile-shaped panels, "B" (the streamed
    operand, panels of the tile's width), "A" (the broadcast one, panels of its rows),
    both or none; the rule's choice first."""
    # (the options do not depend on the tile's rows, which are a knob too: without rows,
    # tile_i=1, the broadcast operand's pack is dropped from the choice)
    streamed = _streamed_operand(st, last)
    bcast = _broadcast_operand(st, last, _row_axis(st, last))
    kinds = {"none": ()}
    if streamed is not None:
        kinds[streamed[0].name] = ((streamed[0].name, streamed[1], tj, "j"),)
    if bcast is not None:
        a = ((bcast[0].name, bcast[1], ti, "i"),) if ti else ()
        kinds[bcast[0].name] = a
        if streamed is not None:
            kinds[f"{bcast[0].name}+{streamed[0].name}"] = kinds[streamed[0].name] + a
    default = "+".join(p[0] for p in reversed(rule.pack)) or "none"
    kinds.setdefault(default, rule.pack)
    return kinds[cfg.choice(f"{name}.pack", [default] + list(kinds))]


def _few_rows(s, st, last, tj, cand, ti, target):
    """A 2-d matmul-like reduction C[i, j] = sum(A[i, k] * B[k, j]) with at most two
    tiles of rows and a B larger than L2: B's rows are streamed (_row_stream_tiles), where
    register tiles, finishing each column strip before the next, read B in strips of one
    tile's width a row apart (128 bytes every 16-32 KiB: no prefetcher follows them). Not
    where B is an inlined stage that reads its own operands across their rows: W.T of x @
    W.T (jd.nn.linear), whose rows are W's columns (67-77 ms for (8, 4096) by (4096, 4096)
    float32, 14-16 with register tiles), or B.T of A.T @ B.T (the unrolled steps gathered
    every element, and LLVM took a minute)."""
    op = st.tensor.op
    streamed = _streamed_operand(st, last)
    if cand is None or len(op.axes) != 2 or len(op.reduce_axes) != 1 or streamed is None \
            or streamed[1] != streamed[0].ndim - 1 or cand.extent > _STREAM_ROW_TILES * ti \
            or not _reads_along_rows(s, streamed[0]):
        return False
    b = streamed[0]
    return _nbytes(b) > target.l2_bytes and last.extent >= 4 * tj and \
        op.reduce_axes[0].extent >= 4 * _STREAM_K


def _reads_along_rows(s, tensor):
    """Whether reading `tensor` along its last axis reads memory along rows: it is no
    inlined stage, or one (elementwise: B * 2, a cast) whose every read, and those of
    its own inlined producers, has the stage's last axis alone as its last index."""
    st = s.stages.get(tensor.name)
    if st is None or st.tensor is not tensor or st.attach != "inline":
        return True
    last = st.tensor.op.axes[-1] if st.tensor.op.axes else None
    for acc in [n for n in walk_expr(st.tensor.op.body) if isinstance(n, Access)]:
        if acc.indices and (last is None or not _along_last(acc, last)):
            return False
        if not _reads_along_rows(s, acc.tensor):
            return False
    return True


_STREAM_K = 8       # reduction steps per pass over a block of C in _row_stream_tiles
_STREAM_ROW_TILES = 2   # row tiles at most for which _few_rows streams B's rows


def _row_stream_tiles(s, name, st, last, tj, cand, ti, target, allow, num_threads):
    """C[i, j] = sum(A[i, k] * B[k, j]) of few rows (_few_rows): the threads split C's
    columns in blocks whose rows fit L1; within a block, _STREAM_K rows of B at a time
    are read along their length, each tile of C (ti rows, tj columns) loaded, updated
    by those steps in registers and stored. B is read once, in rows, as a prefetcher
    follows: (8, 4096) @ (4096, 4096) float64 on the 2-core Xeon 40 -> 15-22 ms, float32
    19-24 -> 10-13 (NumPy 28-35 / 20-34; the host's memory bandwidth varied)."""
    op = st.tensor.op
    itemsize = dtypes.itemsize(st.tensor.dtype)
    n = last.extent
    block = max(tj, target.l1_bytes // (cand.extent * itemsize) // tj * tj)
    # (as many blocks for every thread, and equal ones, whole tiles where a count gives
    # them: a last, partial block would run after the parallel loop, on one thread)
    step = max(1, num_threads)
    blocks = -(-n // block)                                 # (ceilings)
    counts = range(-(-blocks // step) * step, n // tj + 1, step)
    parts = next((p for p in counts if n % (p * tj) == 0), None) or \
        next((p for p in counts if n % p == 0), None)
    block = n // parts if parts else block
    jb, jr = s.split(Axis(name, last.name), block)
    jo, ji = s.split(jr, tj)
    ko, ku = s.split(Axis(name, op.reduce_axes[0].name), _STREAM_K)
    io, ii = s.split(Axis(name, cand.name), ti)
    s.reorder(jb, ko, jo, io, ku, ii, ji)
    for ax in (ku, ii, ji):
        s.unroll(ax)
    if "parallel" in allow and num_threads > 1:
        s.parallel(jb)


def _register_tile(s, name, st, target, cfg, allow, num_threads):
    """Tile a reduction whose innermost data loop is contiguous: a ti x tj block of the
    output stays in registers while the reduction runs (fully unrolled, so LLVM keeps
    the block in vector registers and streams rows of the contiguous operand). With
    blocks (columns, then reduction steps) the block loops go outermost, the packs are
    computed at the innermost of them and the tiles inside run in parallel. The knob
    pack_at="tile" computes the pack of the operand the outer tile loop walks (A's row
    panels when row tiles are outside) at that loop instead, inside the parallel loop:
    each thread packs the panel it reuses across the inner tile loop."""
    sizes = _tile_sizes(s, name, st, target, cfg)
    if sizes is None:
        return False
    last, tj, cand, ti = sizes
    if cand is None and len(st.tensor.op.axes) == 2:     # (one row: C[0, j])
        rows = (st.tensor.op.axes[0], 1)
    else:
        rows = (cand, ti)
    if _few_rows(s, st, last, tj, *rows, target) and (cfg is None or cfg.choice(
            f"{name}.few_rows", ["stream", "tiles"]) == "stream"):
        _row_stream_tiles(s, name, st, last, tj, *rows, target, allow, num_threads)
        return True
    op = st.tensor.op
    data, red = list(op.axes), [Axis(name, r.name) for r in op.reduce_axes]
    ch = _tile_choices(s, name, st, last, tj, cand, ti, target, cfg, allow)
    packs = [s.pack(t, s[name], dim, f) for t, dim, f, _ in ch.pack]
    jo, ji = s.split(Axis(name, last.name), tj)
    blocks = []
    if ch.nc is not None:
        jc, jo = s.split(jo, ch.nc // tj)
        blocks.append(jc)
    if ch.kc is not None:
        kc, red[ch.k] = s.split(red[ch.k], ch.kc)
        blocks.append(kc)
    unrolled = []
    if ch.unroll_k > 1:
        red[-1], ku = s.split(red[-1], ch.unroll_k)
        unrolled.append(ku)
    order_outer, inner, io = [], [], None
    for a in data[:-1]:
        if cand is not None and a is cand and ti:
            io, ii = s.split(Axis(name, a.name), ti)
            order_outer.append(io)
            inner.append(ii)
        else:
            order_outer.append(Axis(name, a.name))
    tiles = order_outer + [jo] if ch.order == "rows" else [jo] + order_outer
    s.reorder(*blocks, *tiles, *red, *unrolled, *inner, ji)
    for ax in unrolled + inner:
        s.unroll(ax)
    s.unroll(ji)
    at_tile = bool(packs) and cfg is not None and "compute_at" in allow and \
        cfg.choice(f"{name}.pack_at", ["block", "tile"]) == "tile"
    if blocks or at_tile:
        if "parallel" in allow:
            _parallelize(s, name, st, num_threads, target, start=len(blocks), cfg=cfg)
        outer = ("i", io) if ch.order == "rows" and io is not None else ("j", jo)
        for (_, _, _, along), packed in zip(ch.pack, packs):
            loop = outer[1] if at_tile and along == outer[0] else \
                blocks[-1] if blocks else None
            if loop is None:
                continue                  # (packed whole: see auto_schedule)
            s.compute_at(packed, s[name], Axis(name, _leaf_of(st, loop.name)))
            if loop in blocks and "parallel" in allow and not (   # (outside the tiles;
                    cfg is not None and cfg.used.get(f"{name}.parallel") == 0):  # serial)
                _parallel_block(s, packed.name, num_threads, target)
            if "vectorize" in allow:
                s.vectorize(packed.axis[-1])
    return True


def _parallel_block(s, name, num_threads, target):
    """Run the outermost loop of a block computed at a serial loop (a pack per cache
    block) in parallel, where it has an iteration per thread and the block is worth a
    thread team (its loops cannot be fused: they cover the block its consumer needs)."""
    st = s.stages[name]
    first = st.axes[st.leaves[0]]
    if num_threads > 1 and not first.reduce and isinstance(first.extent, int) and \
            first.extent >= num_threads and _work(st) >= target.parallel_min_work:
        s.parallel(Axis(name, st.leaves[0]))


def _leaf_of(st, loop):
    """The current loop of st that `loop` became (itself, or the loop it was fused into)."""
    while loop not in st.leaves:
        loop = next(r.fused for r in st.relations if getattr(r, "fused", None) and
                    loop in (r.outer, r.inner))
    return loop


def _work(st):
    w = 1
    for a in list(st.tensor.op.axes) + list(st.tensor.op.reduce_axes):
        w *= a.extent
    return w


def _parallelize(s, name, st, num_threads, target, work=None, start=0, cfg=None):
    """Fuse leading data loops (from leaf `start` on) until there are enough iterations
    (four per thread, so that uneven blocks even out), run them in parallel (once: a
    stage with a parallel loop keeps it) where the stage has the work of the target's
    parallel grain (its vector iterations, for a reduction along contiguous rows). With
    cfg, the iterations per thread are a knob (0: the stage runs serially)."""
    if work is None:
        work = 1
        for n in st.leaves:
            work *= st.axes[n].extent
        if st.is_reduce and _innermost_contiguous(st):
            # a reduction along contiguous rows runs as vector multiply-adds: a 32^3
            # matmul (1.4 us on one core) is slower with a thread team to wake
            work //= target.lanes(dtypes.itemsize(st.tensor.dtype))
    if num_threads <= 1 or work < target.parallel_min_work \
            or any(st.axes[n].kind == ForKind.PARALLEL for n in st.leaves):
        return
    grain = cfg.choice(f"{name}.parallel", [4, 1, 2, 16, 0]) if cfg is not None else 4
    if not grain:
        return
    data = [n for n in st.leaves[start:] if not st.axes[n].reduce]
    attached = {x.attach_to[1] for x in s.stages.values()
                if x.attach == "at" and x.attach_to[0] == name}
    lead, ext = [], 1
    for n in st.leaves[start:]:
        if st.axes[n].reduce or st.axes[n].kind != ForKind.SERIAL:
            break
        if not lead and st.axes[n].extent == 1 and n not in attached:
            data.remove(n)      # (a loop of one iteration: nothing to share out)
            continue
        if n in attached:               # stages are computed at it: keep it whole
            if not lead:
                lead.append(n)
            break
        if _has_tail(st, n):
            # a split with a tail fused with other loops leaves a guard on each row of the
            # unrolled tile in every iteration (its accumulators then stay in memory: 13 x
            # 64 @ 64 x 1024 took 131-170 us on 2 threads, 19 us on one); alone, its tail
            # is peeled (partition_loops), even where that leaves threads idle
            if not lead:
                lead.append(n)
            break
        lead.append(n)
        ext *= st.axes[n].extent
        if ext >= grain * num_threads:
            break
    if lead and lead == data and len(lead) > 1 and lead[-1] == st.leaves[-1]:
        lead = lead[:-1]            # keep the innermost loop for SIMD (not a row loop
                                    # around a reduction: (1, 4096) rows ran serially)
    if lead:
        ax = s.fuse(*[Axis(name, n) for n in lead]) if len(lead) > 1 else Axis(name, lead[0])
        s.parallel(ax)


def _has_tail(st, loop):
    """Loop `loop` of st is the outer loop of a split whose factor does not divide the
    extent (the last iteration is partial)."""
    for r in st.relations:
        if isinstance(r, Split) and r.outer == loop:
            ext = st.axes[r.parent].extent
            return not isinstance(ext, int) or ext % r.factor != 0
    return False


def _vectorize(s, name, st, inner, target, cfg):
    """Vectorise the innermost loop. With cfg, a knob may first split it so that the
    vector loop is a given multiple of the target's lanes wide (the outer part a serial
    loop): wider keeps more independent vectors in flight, narrower leaves no long tail.
    A stage with less work than a parallel loop needs gets no such knob."""
    ax = Axis(name, inner)
    if cfg is not None and _work(st) >= target.parallel_min_work:
        lanes = target.lanes(dtypes.itemsize(st.tensor.dtype))
        ext = st.axes[inner].extent
        width = cfg.choice(f"{name}.vector",
                           ["loop"] + [lanes * m for m in (1, 2, 4) if lanes * m < ext])
        if width != "loop":
            ax = s.split(ax, width)[1]
    s.vectorize(ax)


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


def _tileable(st, allow):
    """The stage is a reduction that a register tile may fit: its innermost data loop is
    contiguous."""
    op = st.tensor.op
    return "tile" in allow and op.reduce is not None and bool(op.axes) \
        and op.reduce.op not in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) \
        and _innermost_contiguous(st, transposed="pack" in allow)


def _tiled(s, st, target, allow):
    """The stage gets a register tile (its loops are split: no stage can be computed at
    them)."""
    return _tileable(st, allow) and _tile_sizes(s, st.tensor.name, st, target) is not None


def _attached(s, name):
    return any(x.attach == "at" and x.attach_to[0] == name for x in s.stages.values())


def _fuse_row_reductions(s, outputs, target, allow, cfg=None):
    """Compute row-wise producers (row statistics: max, sum, mean, variance; rows of an
    expensive intermediate such as exp) inside the row loop of the stage that reads
    them: P[i, ...] read at row i by Y[i, ...] and by stages already computed there. Each
    row of the input is then read from memory once and re-read from cache (or from the
    row's buffer when a row is wider than the cache: still one row, not the whole P).
    Rows of a consumer of rank three or more are indexed by all its axes but the last
    (the rows of (batch, seq, features)): those loops are fused into one row loop first.
    With cfg, a knob per producer may keep it whole instead (an elementwise one is then
    inlined into its readers)."""
    row_loops = {}              # consumer -> (its row loop, fused or not; the loop's depth)
    for name in reversed(list(s.stages)):
        st = s.stages[name]
        if st.attach != "root" or st.tensor.name in outputs or st.tensor.ndim == 0:
            continue
        if st.is_reduce and _innermost_contiguous(st):
            continue    # a column statistic or a matmul: tiles, not rows
        readers = [x for x in s.stages.values()
                   if x is not st and x.attach != "inline" and st.tensor in s._reads(x)]
        targets = {x.attach_to[0] if x.attach == "at" else x.tensor.name for x in readers}
        if len(targets) != 1:
            continue
        cons = s.stages[targets.pop()]
        op = cons.tensor.op
        if not cons.leaves or not op.axes or _tiled(s, cons, target, allow) \
                or len(op.axes) == 1 and not st.is_reduce:
            continue    # (rows of one element: nothing gained, and no vector loop left)
        chosen = row_loops.get(cons.tensor.name)
        depths = [len(op.axes) - 1, 1] if len(op.axes) > 2 and _long_rows(cons, target) \
            else [1]
        for depth in [chosen[1]] if chosen else depths:
            if _reads_rows(s, st, cons, readers, depth, chosen[0] if chosen else None):
                break
        else:
            continue
        if cfg is not None and not cfg.choice(f"{name}.at_row", [True, False]):
            continue
        if chosen is None:
            rows = op.axes[:depth]
            ax = s.fuse(*[Axis(cons.tensor.name, a.name) for a in rows]) if depth > 1 \
                else Axis(cons.tensor.name, rows[0].name)
            chosen = row_loops[cons.tensor.name] = (ax.name, depth)
        s.compute_at(s[name], s[cons.tensor.name], Axis(cons.tensor.name, chosen[0]))


def _long_rows(cons, target):
    """Whether cons's rows (its last axis) are long enough to be computed one at a time
    with their statistics: each row's reductions are serial chains of adds, which short
    rows cannot hide behind vector work (layer_norm on (8, 512, 64) float32 took 1.7x the
    time of separate passes; (8, 512, 256) was faster fused). At least 16 vectors; rows
    of a symbolic length are taken as long."""
    last = cons.tensor.op.axes[-1].extent
    if not isinstance(last, int):
        return True
    lanes = target.lanes(dtypes.itemsize(cons.tensor.dtype)) if target is not None else 8
    return last >= 16 * lanes


def _reads_rows(s, st, cons, readers, depth, loop):
    """Whether producer st can be computed at cons's row loop of `depth` leading axes
    (`loop`, or those axes still unfused when None): a statistic has one value per row,
    and every reader (cons, and stages already computed at that loop) reads it at its own
    row indices."""
    rows = cons.tensor.op.axes[:depth]
    if st.is_reduce and st.tensor.ndim != depth:
        return False        # (a statistic of fewer axes than the rows: not one per row)
    if loop is None and (cons.leaves[:depth] != [a.name for a in rows] or any(
            r.extent != e for r, e in zip(rows, st.tensor.shape))):
        return False
    for x in readers:
        own = x.tensor.op.axes
        if x is not cons and (loop is None or x.attach_to != (cons.tensor.name, loop)
                              or len(own) < depth):
            return False
        want = [a.var for a in (rows if x is cons else own[:depth])]
        if not all(len(acc.indices) >= depth and all(i is v for i, v in zip(acc.indices, want))
                   for acc in _inlined_accesses(s, x, st.tensor)):
            return False
    return True


def _bound_intermediates(s, outputs, limit, allow):
    """An intermediate that would take more than `limit` bytes whole (more than the
    definition's inputs and outputs together: an outer product or a skinny matmul followed
    by a reduction) is computed one slice at a time at the outer loop of its one consumer,
    when that loop's variable is the whole index of one of its dimensions there (every
    element is still computed once). The consumer is then not tiled; a reduction slice
    runs its contiguous axis innermost."""
    for name in reversed(list(s.stages)):
        st = s.stages[name]
        if st.attach != "root" or name in outputs or _nbytes(st.tensor) <= limit:
            continue
        readers = [x for x in s.stages.values()
                   if x is not st and x.attach != "inline" and st.tensor in s._reads(x)]
        if len(readers) != 1:
            continue
        cons = readers[0]
        op = cons.tensor.op
        if cons.attach != "root" or not op.axes or cons.leaves[0] != op.axes[0].name \
                or not Schedule._fresh(cons) or _feeds_register_tile(s, st, cons, allow):
            continue
        first = op.axes[0]
        accs = _inlined_accesses(s, cons, st.tensor)
        if not accs or not any(all(a.indices[d] is first.var for a in accs)
                               for d in range(st.tensor.ndim)):
            continue
        s.compute_at(s[name], s[cons.tensor.name], Axis(cons.tensor.name, first.name))
        pop = st.tensor.op
        if "tile" in allow and pop.reduce is not None and len(pop.axes) > 1 \
                and _innermost_contiguous(st):
            data, red = [a.name for a in pop.axes], [a.name for a in pop.reduce_axes]
            s.reorder(*[Axis(name, n) for n in data[:-1] + red + data[-1:]])
            if "vectorize" in allow:
                s.vectorize(Axis(name, data[-1]))


# bytes above which an intermediate is computed a slice at a time whatever that costs
# (the user's NumPy code would hold it whole; jitdl need not)
_WHOLE_MAX = 256 << 20


def _feeds_register_tile(s, st, cons, allow):
    """Computing st one slice at a time inside its consumer would cost register tiles:
    st is itself a reduction deep enough to be tiled (Q @ K^T in (Q @ K^T) @ V), or the
    consumer is a tiled reduction reading each element of st for at least 16 outputs
    (exp(S) @ V for 64 columns of V). Either does enough arithmetic per element that
    storing st whole costs little, up to _WHOLE_MAX bytes (a skinny A @ B of 4 columns
    feeding (A @ B) @ C grows with n^2 where the inputs grow with n: kept in slices)."""
    if "tile" not in allow or _nbytes(st.tensor) > _WHOLE_MAX:
        return False
    depth = 1
    for a in st.tensor.op.reduce_axes:
        depth *= a.extent
    if _tileable(st, allow) and depth >= 16:
        return True
    return _tileable(cons, allow) and any(
        math.prod(a.extent for a in missing) >= 16 for missing in _missing_axes(s, cons, st))


_EXPENSIVE = {Intrin.EXP, Intrin.LOG, Intrin.TANH, Intrin.ERF, Intrin.SIGMOID, Intrin.SIN,
              Intrin.COS, Intrin.TAN, Intrin.ATAN, Intrin.LOG1P, Intrin.EXPM1,
              Intrin.ASIN, Intrin.ACOS, Intrin.EXP2, Intrin.LOG2, Intrin.LOG10,
              Intrin.SINH, Intrin.COSH}


def _expensive(st):
    return any(isinstance(n, Call) and n.fn in _EXPENSIVE for n in walk_unique(st.tensor.op.body))


# nodes of an expression (its inlined producers expanded) above which a stage read at
# several places is stored, not inlined
_INLINE_MAX_NODES = 512
# expression depth past which an inlined chain is stored: every pass over the expression
# (lowering, simplification, code generation) recurses once or more per level, and 300
# chained steps (900 levels) ran into Python's recursion limit
_INLINE_MAX_DEPTH = 240


def _inlined_size(s, st, memo):
    """(nodes, depth, data-dependent) of st's body with the stages inlined into it expanded
    (memo: by stage name; a stage's producers are decided before it). Data-dependent: some
    read's index reads memory or is checked at run time."""
    name = st.tensor.name
    if name not in memo:
        n, dd = 0, False
        for x in walk_expr(st.tensor.op.body):
            n += 1
            if isinstance(x, Access) and (x.checked or x.carried
                                          or any(map(reads_memory, x.indices))):
                dd = True
            p = _inlined_producer(s, x)
            if p is not None:
                below = _inlined_size(s, p, memo)
                n += below[0]
                dd = dd or below[2]
        memo[name] = (n, _depth(s, st.tensor.op.body, memo), dd)
    return memo[name]


def _inlined_producer(s, x):
    p = s.stages.get(x.tensor.name) if isinstance(x, Access) else None
    return p if p is not None and p.tensor is x.tensor and p.attach == "inline" else None


def _depth(s, e, memo):
    p = _inlined_producer(s, e)
    below = max((_depth(s, c, memo) for c in expr_children(e)), default=0)
    return 1 + max(below, _inlined_size(s, p, memo)[1] if p is not None else 0)


def _duplicated_when_inlined(s, st, memo):
    """Inlining st would copy a large expression into several places, or nest it too
    deep: an elementwise chain in which each step reads the previous one twice (y = sin(y)
    + cos(y), repeated) doubles with every step when inlined, and 12 steps never finished
    compiling. Such a stage is stored instead, once its expanded expression exceeds
    _INLINE_MAX_NODES; or once it nests _INLINE_MAX_DEPTH levels deep, where storing it
    whole is safe and small: no read of it is data-dependent (a consumer's select may
    guard it, and stored it would be read everywhere) and it is no larger than the
    definition's own arrays (a chain over a broadcast grid stays inside its reduction)."""
    size, depth, dd = _inlined_size(s, st, memo)
    if depth > _INLINE_MAX_DEPTH and not dd \
            and all(isinstance(d, int) for d in st.tensor.shape):
        if ("io",) not in memo:         # (a tuple: not a stage's name)
            io = _io_bytes(s)
            memo[("io",)] = io if isinstance(io, int) else -1
        if _nbytes(st.tensor) <= memo[("io",)]:
            return True
    if size <= _INLINE_MAX_NODES:
        return False
    if ("reads",) not in memo:      # reads of each tensor in the stages' own bodies (once:
        reads = memo[("reads",)] = {}   # counted per stage, long chains took seconds)
        for x in s.stages.values():
            for n in walk_expr(x.tensor.op.body):
                if isinstance(n, Access) and n.tensor is not x.tensor:
                    reads[id(n.tensor)] = reads.get(id(n.tensor), 0) + 1
    return memo[("reads",)].get(id(st.tensor), 0) >= 2


def _shared_and_expensive(s, st, consumers):
    """An elementwise stage with transcendental math that several stages read, directly
    or through stages inlined into them: inlining it would compute the math once per
    reader. consumers: _consumers(s)."""
    if not _expensive(st):
        return False
    readers, todo = set(), [st]
    while todo and len(readers) < 2:
        for x in consumers.get(todo.pop().tensor, ()):
            if x is not st and x.tensor.name not in readers:
                readers.add(x.tensor.name)
                if x.attach == "inline":
                    todo.append(x)
    return len(readers) >= 2


def _consumers(s):
    """Tensor -> the stages whose own bodies read it."""
    out = {}
    for x in s.stages.values():
        for t in {n.tensor for n in walk_unique(x.tensor.op.body) if isinstance(n, Access)}:
            out.setdefault(t, []).append(x)
    return out


def _reread(s, st):
    """A reduction reads each element of st for several of its outputs (an index of the
    reduction's output is missing from the access: attention's P @ V reads P[b, i, k] for
    every column j). Inlining st there would recompute its math that many times."""
    return any(missing for x in s.stages.values()
               if x is not st and x.is_reduce and x.attach != "inline"
               for missing in _missing_axes(s, x, st))


def _missing_axes(s, x, st):
    """Per access of stage x to st: the axes of x its indices do not use (x reads that
    element of st once for each of their values)."""
    for acc in _inlined_accesses(s, x, st.tensor):
        used = {}
        for i in acc.indices:
            free_vars(i, used)
        yield [a for a in x.tensor.op.axes if a.var not in used]


def _column_reduction(s, name, st, num_threads, target, allow):
    """A reduction whose contiguous axis is a data axis (a sum over rows: out[j] =
    sum(X[k, j])): the rows are streamed, a block of columns at a time, each column's
    partial result accumulating in place (a block sized to half of L1, or split evenly
    across the threads when there are fewer blocks than threads); blocks run in parallel,
    the columns of a block as SIMD lanes. One output at a time, or a register tile of a
    few columns, would instead walk the input down its columns."""
    if not _column_reducible(s, name, st, allow):
        return False
    op = st.tensor.op
    data, red = [a.name for a in op.axes], [a.name for a in op.reduce_axes]
    size = dtypes.itemsize(op.reduce.dtype)
    lanes = target.lanes(size)
    parts = _row_parts(st, num_threads, allow, target)
    if parts > 1:
        _split_rows(s, name, parts, target, allow)
        return True
    if parts == 1:
        _stream_rows(s, name, st, num_threads, target, allow)
        return True
    block = max(lanes, target.l1_bytes // 2 // size // lanes * lanes)
    ext = st.axes[data[-1]].extent
    if not isinstance(ext, int):   # blocks for threads whatever the size; a short tail
        block = 64 * lanes
    else:
        if ext <= lanes:
            return False
        if -(-ext // block) < num_threads and ext >= num_threads * lanes * 4:
            block = -(-ext // num_threads // lanes) * lanes
        block = min(block, -(-ext // lanes) * lanes)
    jo, ji = s.split(Axis(name, data[-1]), block)
    s.reorder(*[Axis(name, n) for n in data[:-1]], jo, *[Axis(name, n) for n in red], ji)
    if "parallel" in allow and num_threads > 1:
        if _symbolic(st):      # (partition_loops makes it serial at run time when small)
            s.parallel(Axis(name, st.leaves[0]))
        else:
            _parallelize(s, name, st, num_threads, target)
    if "vectorize" in allow:
        if isinstance(ext, int):
            s.vectorize(ji)
        else:       # vectors of lanes: partition_loops leaves the last block a short tail
            s.vectorize(s.split(ji, lanes)[1])
    return True


_ROW_PARTS_PER_THREAD = 2


def _column_reducible(s, name, st, allow):
    """The stage is a reduction whose contiguous axis is a data axis read by every
    operand but those read along reduction axes alone (v of v @ M: a weight per row; not
    a matmul's A[i, k], which a register tile reuses across the columns), with its loops
    as the definition made them."""
    op = st.tensor.op
    if not op.axes or not op.reduce_axes or op.reduce.op in (ReduceOp.ARGMAX,
                                                              ReduceOp.ARGMIN) \
            or not _innermost_contiguous(st) or "tile" not in allow and not _symbolic(st):
        return False
    data, red = [a.name for a in op.axes], [a.name for a in op.reduce_axes]
    if any(n not in st.leaves for n in data + red) or not Schedule._fresh(st) \
            or _attached(s, name):
        return False
    last, data_vars = op.axes[-1].var, {id(a.var) for a in op.axes}
    red_vars, weights, columns = {id(r.var) for r in op.reduce_axes}, False, []
    for acc in walk_expr(op.body):
        if isinstance(acc, Access):
            used = {id(v) for i in acc.indices for v in walk_unique(i)}
            if id(last) in used:
                columns.append(acc.indices[-1])
            elif used & data_vars:
                return False
            else:
                weights = weights or bool(used)
    # (a weight per row only where the reduction walks rows: a stencil's X[j + k] * w[k]
    # walks its columns, and streaming rows of partial results made a 1-d convolution of
    # 100000 float32 by 5 weights 10x slower on two threads)
    return not weights or not any(id(v) in red_vars for ix in columns for v in walk_unique(ix))


def _row_parts(st, num_threads, allow, target):
    """How a column reduction's rows are read: 1, streamed one block of rows per
    iteration of its outer data loops (_stream_rows: on one thread, or with outer loops
    enough for the threads, such as the rows of sum(X, axis=1) for X of (1000, 3,
    1000)); f > 1, split into f parts among the threads (_split_rows); 0, in blocks of
    columns, where a row of partial results would not stay in L2 or there are too few
    rows for the threads (or as scalar code: rows of up to three elements)."""
    op = st.tensor.op
    size = dtypes.itemsize(op.reduce.dtype)
    outer = _outer_axes(op)
    row = _extent(op.axes[len(outer):])
    if row is not None and row * size > target.l2_bytes // 2:
        return 0
    # (rows of up to three elements stay scalar code, their partial results in registers:
    # as a short vector through memory, a store and a load per row, 100000 x 3 float64
    # summed over axis 0 took 106 us, 53 before; 100000 x 2 float32 max 119 us, 27)
    ext = op.axes[-1].extent
    stream = 0 if isinstance(ext, int) and ext < min(4, target.lanes(size)) else 1
    if "parallel" not in allow or num_threads <= 1:
        return stream
    f = _ROW_PARTS_PER_THREAD * num_threads
    if outer and (_extent(outer) is None or _extent(outer) >= f):
        # (split rows would multiply the partial results: the (1000, 3, 1000) sum had
        # four rows of a million partial sums for its three rows, 6x NumPy's time)
        return stream
    row, k = _extent(op.axes), op.reduce_axes[0]
    if isinstance(k.extent, int) and k.extent < 16 * f or \
            row is not None and row * size > target.l2_bytes // 2:
        return 0
    return f


def _outer_axes(op):
    """The leading data axes of a column reduction that index every operand read with a
    reduction axis ahead of all its reduction axes (i of sum(X[i, k, j]) over k; none of
    sum(X[k, i, j])): each of their iterations reads rows of its own."""
    red = {id(r.var) for r in op.reduce_axes}
    firsts = []
    for acc in walk_expr(op.body):
        if isinstance(acc, Access):
            dims = [d for d, ix in enumerate(acc.indices)
                    if any(id(v) in red for v in walk_unique(ix))]
            if dims:
                firsts.append((acc, dims[0]))
    n = 0
    for a in op.axes[:-1]:
        if not all(any(a.var is v for ix in acc.indices[:first] for v in walk_unique(ix))
                   for acc, first in firsts):
            break
        n += 1
    return op.axes[:n]


def _extent(axes):
    """The product of the axes' extents, None where one is symbolic."""
    n = 1
    for a in axes:
        if not isinstance(a.extent, int):
            return None
        n *= a.extent
    return n


def _split_rows(s, name, f, target, allow):
    """A column reduction over many rows whose row of partial results stays in L2 (or
    whose sizes are known only at the call): its rows are split among the threads
    (rfactor of the outermost reduction axis, blocked: part p takes rows p * B to
    (p + 1) * B - 1, one contiguous stream; every F-th row instead broke the hardware
    prefetcher's stream at each row: 10 GB/s, not 27), each part streaming whole rows
    into its own row of partial results, which a short reduction then adds. Blocks of
    columns would instead read each row in short pieces: a 3162^2 mean(axis=0) took 5.6
    ms that way, 3.1 ms split by rows (NumPy, row by row on one core: 3.1 ms) on a 2-core
    Zen. With few rows (30 x 330000) the parts are
    short and their partial rows long: column blocks win there."""
    k = s.stages[name].tensor.op.reduce_axes[0]
    rf = s.rfactor(s[name], Axis(name, k.name), f, blocked=True)
    rst = s.stages[rf.name]
    rop = rst.tensor.op
    red = [Axis(rf.name, r.name) for r in rop.reduce_axes]
    cols = [Axis(rf.name, a.name) for a in rop.axes[1:]]
    s.reorder(Axis(rf.name, rop.axes[0].name), *red, *cols)
    s.parallel(Axis(rf.name, rop.axes[0].name))
    lanes = target.lanes(dtypes.itemsize(rst.tensor.dtype))
    if "vectorize" in allow and lanes > 1:
        jo, ji = s.split(cols[-1], lanes)
        # _STREAM_K rows at a time, each vector of partial results loaded once for them:
        # (1, 4096) @ (4096, 1024) float32 on the 2-core Xeon 478-514 -> 315-327 us,
        # (1, 512) @ (512, 1000) 40-45 -> 19-21 (float64 75 -> 44); not where the parts
        # differ in length (the last one would run after the parallel loop), nor for
        # short rows (1000 x 100 float64 8 -> 12 us), nor where the body's own math bounds
        # the loop (8 copies of an inlined exp: max(exp(x) * y, axis=0) of 300 x 700
        # compiled in 0.33 s, its argmax in 1.2)
        rows, ncols = rop.reduce_axes[0].extent, rop.axes[-1].extent
        if len(red) == 1 and "tile" in allow and isinstance(k.extent, int) and \
                k.extent % f == 0 and rows >= 4 * _STREAM_K and \
                isinstance(ncols, int) and ncols >= 16 * lanes and not _costly_body(s, rst):
            ko, ku = s.split(red[0], _STREAM_K)
            s.reorder(ko, *cols[:-1], jo, ku, ji)
            s.unroll(ku)
        s.vectorize(ji)
    _stream_rows(s, name, s.stages[name], 1, target, allow)   # the sum of the parts: f rows


def _stream_rows(s, name, st, num_threads, target, allow):
    """A column reduction with its reduction loops inside its outer data loops (_outer_axes,
    run in parallel) and outside the others, so that the input streams once, row after
    row, into one row of partial results, the contiguous columns as SIMD lanes. (Blocks of a
    few hundred columns read each row in pieces, one block's pass after another: 10000 x
    1000 float32 summed over axis 0 took 18 ms on one core of a Zen 3, NumPy 4.6.)"""
    op = st.tensor.op
    data = [Axis(name, a.name) for a in op.axes]
    outer = len(_outer_axes(op))
    s.reorder(*data[:outer], *[Axis(name, r.name) for r in op.reduce_axes], *data[outer:])
    lanes = target.lanes(dtypes.itemsize(st.tensor.dtype))
    if "vectorize" in allow and lanes > 1:
        jo, ji = s.split(data[-1], lanes)
        k, ncols = op.reduce_axes[0], op.axes[-1].extent
        # _STREAM_K rows at a time, each vector of partial results loaded and stored once
        # for them (as _split_rows does per part): v @ M of (2048,) by (2048, 2048) float64
        # on one Zen 4 core 3.1 -> 1.8 ms, NumPy 1.8-2.0
        if not outer and all(a.extent == 1 for a in op.axes[:-1]) and \
                len(op.reduce_axes) == 1 and \
                "tile" in allow and isinstance(k.extent, int) and \
                k.extent % _STREAM_K == 0 and k.extent >= 4 * _STREAM_K and \
                isinstance(ncols, int) and ncols >= 16 * lanes and not _costly_body(s, st):
            ko, ku = s.split(Axis(name, k.name), _STREAM_K)
            s.reorder(ko, *data[:-1], jo, ku, ji)
            s.unroll(ku)
        s.vectorize(ji)
    if outer and "parallel" in allow and num_threads > 1:
        if _symbolic(st):      # (partition_loops makes it serial at run time when small)
            s.parallel(Axis(name, st.leaves[0]))
        else:
            _parallelize(s, name, st, num_threads, target)


_FULL_MIN = 1 << 15         # elements below which a full reduction stays on one core


def _full_reduction(s, name, st, num_threads, target, allow):
    """A reduction to one value (sum(x), max(x)) of many elements: each thread reduces
    contiguous blocks of it (rfactor, blocked: part p takes elements, or rows, p * B to
    (p + 1) * B - 1 of the outermost reduction axis with at least 4 per part),
    accumulating in registers, and a short reduction combines the parts. Where the size
    is known only at the call, partition_loops runs the parts on one core when they are
    small."""
    op = st.tensor.op
    if op.axes or not op.reduce_axes or "parallel" not in allow or num_threads <= 1 \
            or op.reduce.op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) \
            or not Schedule._fresh(st) or _attached(s, name):
        return False
    n = _extent(op.reduce_axes)
    if n is not None and n < _FULL_MIN:
        return False
    parts = _ROW_PARTS_PER_THREAD * num_threads
    # the outermost axis long enough to give every part some (of sizes known only at the
    # call, the outermost: a matrix's rows)
    k = next((a for a in op.reduce_axes if not isinstance(a.extent, int)
              or a.extent >= 4 * parts), None)
    if k is None:
        return False
    rf = s.rfactor(s[name], Axis(name, k.name), parts, blocked=True)
    s.parallel(Axis(rf.name, s.stages[rf.name].tensor.op.axes[0].name))
    return True


def _symbolic(st):
    """The stage has a symbolic extent (over the sizes of dynamic arguments)."""
    return any(not isinstance(a.extent, int) for a in st.axes.values())


def _schedule_symbolic(s, name, st, num_threads, target, allow):
    """A stage whose sizes are known only at the call: a reduction over a contiguous
    innermost data loop runs that loop innermost; the innermost data loop is split by the
    target's lanes and vectorised (partition_loops then gives a guard-free main part and
    a scalar tail); the outermost data loop of more than one iteration runs in parallel
    (partition_loops makes it serial at run time when the work is small)."""
    op = st.tensor.op
    # (its current loops: row loops fused for the row statistics computed at them)
    data = [n for n in st.leaves if not st.axes[n].reduce]
    red = [n for n in st.leaves if st.axes[n].reduce]
    at = {x.attach_to[1] for x in s.stages.values()
          if x.attach == "at" and x.attach_to[0] == name}
    if red and data and op.reduce.op not in (ReduceOp.ARGMAX, ReduceOp.ARGMIN) \
            and _innermost_contiguous(st) and data[-1] not in at:
        s.reorder(*[Axis(name, n) for n in data[:-1] + red + data[-1:]])
    inner = st.leaves[-1] if st.leaves else None
    if "vectorize" in allow and inner is not None and not st.axes[inner].reduce \
            and inner not in at:
        ext = st.axes[inner].extent
        lanes = target.lanes(dtypes.itemsize(st.tensor.dtype))
        if not isinstance(ext, int) and lanes > 1:
            s.vectorize(s.split(Axis(name, inner), lanes)[1])
        elif isinstance(ext, int) and ext >= 4:
            s.vectorize(Axis(name, inner))
    if "parallel" not in allow or num_threads <= 1:
        return
    for n in list(st.leaves):
        la = st.axes[n]
        if la.reduce or la.kind != ForKind.SERIAL:
            return
        if not (isinstance(la.extent, int) and la.extent == 1):
            s.parallel(Axis(name, n))
            return


def auto_schedule(s, num_threads, cfg=None, target=None, level=0):
    """The automatic schedule of every stage of s for a CPU `target` (its policies:
    register budget, cache sizes, parallel grain), with tile sizes as knobs of cfg, taking
    the decisions LEVELS[level] allows."""
    allow = LEVELS[level][1]
    if not allow:
        return s
    symbolic = any(_symbolic(st) for st in s.stages.values())
    if symbolic:        # register tiles and packs are for concrete shapes
        allow = allow - {"tile", "pack"}
    if "pack" in allow:          # softmax(S) @ V divides once per output, not per term
        for name, st in list(s.stages.items()):
            if st.is_reduce and rewrite.weighted_by_softmax(st.tensor) is not None:
                s.divide_after(s[name])
    outputs = {t.name for t in s.outputs}
    own = set(s.stages)
    keep, sizes, consumers = [], {}, _consumers(s)
    for name, st in s.stages.items():
        if not st.is_reduce and st.tensor.name not in outputs and not (
                _guarded_reads(st) and _consumed_by_reduction(s, st.tensor)):
            if _duplicated_when_inlined(s, st, sizes):
                continue                  # stored whole (see there)
            if (_shared_and_expensive(s, st, consumers) or _expensive(st) and _reread(s, st)
                    and _nbytes(st.tensor) <= _WHOLE_MAX) \
                    and "compute_at" in allow:
                keep.append(name)         # inlined below unless computed at a row loop
            else:
                s.compute_inline(s[name])
    epilogues = set()
    if {"compute_at", "tile"} <= allow:
        epilogues = _row_blocks(s, outputs, num_threads, target, cfg, allow)
    if "compute_at" in allow:
        _fuse_row_reductions(s, outputs, target, allow, cfg)
    for name in list(s.stages) if {"compute_at", "tile"} <= allow else ():
        st = s.stages[name]
        d = _epilogue_reader(s, name, st, outputs, num_threads, target, allow)
        if d is not None and _epilogue_in_tiles(s, name, st, target, cfg, allow) and \
                _fuse_epilogue(s, name, st, d, target, cfg, allow):
            epilogues.add(name)
    for name in keep:            # inlined unless computed at a row loop, or others are,
        st = s.stages[name]      # or a reduction would recompute it per output element
        if st.attach == "root" and not _attached(s, name) and not _reread(s, st):
            s.compute_inline(s[name])
    if "compute_at" in allow and not symbolic:
        _bound_intermediates(s, outputs, _io_bytes(s), allow)
    for name in list(s.stages):
        st = s.stages[name]
        if st.attach != "root" or name not in own:
            continue
        if _column_reduction(s, name, st, num_threads, target, allow) or \
                _full_reduction(s, name, st, num_threads, target, allow):
            continue
        if symbolic:
            _schedule_symbolic(s, name, st, num_threads, target, allow)
            continue
        # (a reduction computed in its consumer's tiles runs as vector multiply-adds:
        # its vector iterations are the work, as _parallelize counts a stage's own)
        inner_work = [_work(x) // (target.lanes(dtypes.itemsize(x.tensor.dtype))
                                   if x.is_reduce else 1)
                      for x in s.stages.values() if x.attach == "at"
                      and x.tensor.name in epilogues and x.attach_to[0] == name]
        if inner_work:                   # an epilogue: tiled with its producer's block
            if "parallel" in allow:
                _parallelize(s, name, st, num_threads, target, max(inner_work), cfg=cfg)
            continue
        op = st.tensor.op
        data = [a.name for a in op.axes]
        red = [a.name for a in op.reduce_axes]
        at = {x.attach_to[1] for x in s.stages.values()
              if x.attach == "at" and x.attach_to[0] == name}
        if _tileable(st, allow) and (at or not _register_tile(s, name, st, target, cfg,
                                                              allow, num_threads)) \
                and data[-1] not in at:   # (stages computed at a loop: it stays outside)
            # i, k, j: the reduction walks rows, the innermost loop streams along j
            s.reorder(*[Axis(name, n) for n in data[:-1] + red + data[-1:]])
        if "parallel" in allow:
            _parallelize(s, name, st, num_threads, target, cfg=cfg)
        inner = st.leaves[-1] if st.leaves else None
        if "vectorize" in allow and inner is not None and not st.axes[inner].reduce and \
                st.axes[inner].kind == ForKind.SERIAL and st.axes[inner].extent >= 4:
            _vectorize(s, name, st, inner, target, None if inner in at else cfg)
    for name, st in s.stages.items():       # the packs made above, packed whole
        if name not in own and st.attach == "root" and \
                not any(a.kind != ForKind.SERIAL for a in st.axes.values()):
            if "parallel" in allow:
                _parallelize(s, name, st, num_threads, target)
            inner = st.leaves[-1]
            if "vectorize" in allow and st.axes[inner].kind == ForKind.SERIAL:
                s.vectorize(Axis(name, inner))
    return s
