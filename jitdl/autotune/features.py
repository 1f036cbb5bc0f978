"""Features of a lowered candidate: a fixed-length vector that the cost model ranks.

What decides a CPU kernel's speed, read from its loop IR: the shape of the loop nest
(innermost extents and their kinds, parallel work per thread, the register tile), how
many bytes the loops below each level touch compared with the target's caches (buffer
footprints estimated from the affine indices) and the reuse that buys, how the innermost
loop walks each buffer (invariant, contiguous, strided), the arithmetic per iteration,
and the buffers the schedule allocates. Counts are log-scaled (log2(1 + x)).

Every store is a statement of its loop nest; the dominant one (most iterations times
work) gives the per-nest features, all of them the totals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from jitdl import dtypes, pipeline
from jitdl.ir.analysis import affine, bounds, free_vars, memoised
from jitdl.ir.nodes import (Allocate, Binary, BinOp, Call, Const, For, ForKind, IfThen,
                            LetStmt, Load, Seq, Store, Unary)
from jitdl.ir.visit import walk_expr

INNER = 4                         # innermost loops described one by one
KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED)
CACHES = ("l1", "l2", "l3")
LINE = 64                         # bytes of a cache line
FAILED = -1.0                     # every feature of a config that does not lower

FEATURE_NAMES: tuple[str, ...] = (
    *(f"inner{d}_{x}" for d in range(INNER)
      for x in ("extent", "serial", "parallel", "vectorized", "unrolled", "footprint")),
    *(f"{k.name.lower()}_{x}" for k in KINDS for x in ("loops", "extent")),
    "loops", "trips", "guards",
    "parallel_per_thread", "parallel_balance", "vector_per_lanes",
    "register_tile", "register_tile_per_budget",
    "stride_invariant", "stride_contiguous", "stride_strided", "stride_irregular",
    "flops_per_iter", "calls_per_iter", "loads_per_iter", "bytes_per_iter",
    *(f"{c}_{x}" for c in CACHES for x in ("trips", "footprint", "reuse", "traffic_per_flop")),
    "footprint", "intensity",
    "stmts", "total_trips", "total_flops", "total_bytes",
    "allocs", "alloc_global_bytes", "alloc_local_bytes",
)


def _log(x):
    return math.log2(1.0 + max(float(x), 0.0))


def _kind(kind):
    """The features' kind of a loop: a GPU grid's loops are described as the CPU's
    closest kinds (blocks run in parallel; a warp's threads are lanes)."""
    if kind.bound:
        return ForKind.VECTORIZED if kind.thread else ForKind.PARALLEL
    return kind


@dataclass
class _Loop:
    var: object
    extent: int
    kind: ForKind


@dataclass
class _Stmt:
    """A store with its enclosing loops (outermost first) and what one iteration does."""
    loops: tuple
    accesses: list                # (buffer, index) of the store and of every load
    flops: int = 0
    calls: int = 0
    guards: int = 0

    @property
    def trips(self):
        return math.prod(lp.extent for lp in self.loops)


@dataclass
class _Walk:
    stmts: list = field(default_factory=list)
    allocs: list = field(default_factory=list)


def _extent(e, ranges):
    if isinstance(e, Const):
        return max(int(e.value), 0)
    hi = bounds(e, ranges)[1]
    return max(int(hi), 1) if math.isfinite(hi) else 1


def _walk(s, loops, ranges, guards, out):
    match s:
        case For():
            ext = _extent(s.extent, ranges)
            inner = {**ranges, s.var: (0, max(ext - 1, 0))}
            _walk(s.body, loops + (_Loop(s.var, ext, _kind(s.kind)),), inner, guards, out)
        case Seq():
            for x in s.stmts:
                _walk(x, loops, ranges, guards, out)
        case IfThen():
            _walk(s.then, loops, ranges, guards + 1, out)
            if s.otherwise is not None:
                _walk(s.otherwise, loops, ranges, guards + 1, out)
        case Allocate():
            out.allocs.append(s.buffer)
            _walk(s.body, loops, ranges, guards, out)
        case LetStmt():
            _walk(s.body, loops, ranges, guards, out)
        case Store():
            st = _Stmt(loops, [(s.buffer, s.index)], guards=guards)
            for e in (s.value, s.index):
                for n in walk_expr(e):
                    match n:
                        case Load() if (n.buffer, n.index) not in st.accesses[1:]:
                            st.accesses.append((n.buffer, n.index))
                        case Binary() | Unary() if dtypes.is_float(n.dtype):
                            st.flops += 1
                        case Call():
                            st.calls += 1
            out.stmts.append(st)


def _coef(e, var, ranges):
    """How far index e moves when `var` grows by one: a number, or None where it moves
    irregularly. A quotient or remainder by a constant is followed through: a tiled index
    `(16 * jo + ji) // 16` does not move with ji < 16, `(16 * jo + ji) % 16` moves by 1."""
    total = 0.0
    for atom, c in affine(e).items():
        if atom == 1 or c == 0:
            continue
        if atom is var:
            total += c
        elif var in free_vars(atom):
            inner = _atom_coef(atom, var, ranges)
            if inner is None:
                return None
            total += c * inner
    return total


def _atom_coef(atom, var, ranges):
    if not (isinstance(atom, Binary) and atom.op in (BinOp.FLOORDIV, BinOp.MOD)
            and isinstance(atom.b, Const) and int(atom.b.value) > 0):
        return None
    d = int(atom.b.value)
    cv = _coef(atom.a, var, ranges)
    if cv is None:
        return None
    lo, hi = ranges.get(var, (0, 0))
    aligned = all(k is var or v % d == 0 for k, v in affine(atom.a).items())
    within = abs(cv) * (hi - lo) < d
    if atom.op == BinOp.MOD:
        return cv if aligned and within else cv % d
    return 0.0 if aligned and within else cv / d


def _footprints(st, ranges):
    """Bytes that the loops below each level touch (level 0: the whole nest; level n:
    one iteration), each buffer counted once, in cache lines where the walk is strided."""
    n = len(st.loops)
    seen, per_buffer = set(), {}
    for buf, idx in st.accesses:
        if (buf, idx) in seen:
            continue
        seen.add((buf, idx))
        size = dtypes.itemsize(buf.dtype)
        coefs = [_coef(idx, lp.var, ranges) for lp in st.loops]
        row = []
        for d in range(n + 1):
            count, span, step = 1.0, 0.0, math.inf
            for lp, c in zip(st.loops[d:], coefs[d:]):
                if lp.extent <= 1 or c == 0:
                    continue
                count *= lp.extent
                if c is None:
                    span = math.inf
                else:
                    span += abs(c) * (lp.extent - 1)
                    step = min(step, abs(c))
            count = min(count, span + 1.0, buf.size)
            unit = LINE if step == math.inf and count > 1 else min(LINE, max(size, step * size))
            row.append(count * unit)
        old = per_buffer.get(buf)
        per_buffer[buf] = row if old is None else [max(a, b) for a, b in zip(old, row)]
    return [sum(r[d] for r in per_buffer.values()) for d in range(n + 1)]


def _strides(st, ranges):
    """Accesses by how the innermost loop walks them: invariant, contiguous, strided,
    irregular."""
    counts = [0, 0, 0, 0]
    if not st.loops:
        return counts
    var = st.loops[-1].var
    for _, idx in st.accesses:
        c = _coef(idx, var, ranges)
        counts[3 if c is None else 0 if c == 0 else 1 if abs(c) == 1 else 2] += 1
    return counts


def extract(func, target) -> np.ndarray:
    """The feature vector (float32, len(FEATURE_NAMES)) of a lowered PrimFunc for a
    target (its cache sizes, vector width and cores). Loops whose extent is not a
    constant count their largest extent; indices that are not affine count as
    irregular. Within memoised(): the affine form of each index node is worked out once,
    not once per enclosing loop (a third of the time here)."""
    with memoised():
        return _extract(func, target)


def _extract(func, target):
    walk = _Walk()
    _walk(func.body, (), {}, 0, walk)
    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    for buf in walk.allocs:
        nbytes = buf.size * dtypes.itemsize(buf.dtype)
        f["allocs"] += 1
        f["alloc_global_bytes" if buf.scope == "global" else "alloc_local_bytes"] += nbytes
    total_bytes = 0.0
    for st in walk.stmts:
        f["total_trips"] += st.trips
        f["total_flops"] += st.trips * (st.flops + st.calls)
        total_bytes += st.trips * sum(dtypes.itemsize(b.dtype) for b, _ in st.accesses)
    f["total_bytes"] = total_bytes
    f["stmts"] = len(walk.stmts)
    if walk.stmts:
        main = max(walk.stmts, key=lambda s: s.trips * (1 + s.flops + s.calls + len(s.accesses)))
        _nest(f, main, target)
    for k in ("allocs", "stmts", "total_trips", "total_flops", "total_bytes",
              "alloc_global_bytes", "alloc_local_bytes"):
        f[k] = _log(f[k])
    return np.array([f[k] for k in FEATURE_NAMES], dtype=np.float32)


def _nest(f, st, target):
    """The per-nest features of one statement, in place."""
    loops, n = st.loops, len(st.loops)
    ranges = {lp.var: (0, max(lp.extent - 1, 0)) for lp in loops}
    for d, lp in enumerate(reversed(loops[-INNER:])):
        f[f"inner{d}_extent"] = _log(lp.extent)
        f[f"inner{d}_{lp.kind.name.lower()}"] = 1.0
    foot = _footprints(st, ranges)
    for d in range(min(INNER, n)):
        f[f"inner{d}_footprint"] = _log(foot[n - 1 - d])
    for k in KINDS:
        of_kind = [lp.extent for lp in loops if lp.kind == k]
        f[f"{k.name.lower()}_loops"] = len(of_kind)
        f[f"{k.name.lower()}_extent"] = _log(math.prod(of_kind)) if of_kind else 0.0
    trips = st.trips
    f["loops"], f["trips"], f["guards"] = n, _log(trips), st.guards
    par = math.prod(lp.extent for lp in loops if lp.kind == ForKind.PARALLEL)
    rounds = math.ceil(par / max(target.cores, 1))
    f["parallel_per_thread"] = _log(trips / max(par, 1) * rounds)
    f["parallel_balance"] = par / (rounds * max(target.cores, 1)) if par else 0.0
    size = max((dtypes.itemsize(b.dtype) for b, _ in st.accesses), default=4)
    lanes = target.lanes(size)
    vec = math.prod(lp.extent for lp in loops if lp.kind == ForKind.VECTORIZED)
    f["vector_per_lanes"] = math.log2(vec / lanes) if vec > 1 else 0.0
    tile = 1                      # the innermost unrolled and vectorized loops
    for lp in reversed(loops):
        if lp.kind not in (ForKind.UNROLLED, ForKind.VECTORIZED):
            break
        tile *= lp.extent
    f["register_tile"] = _log(tile)
    f["register_tile_per_budget"] = tile / target.max_accumulators(size)
    for name, c in zip(("invariant", "contiguous", "strided", "irregular"),
                       _strides(st, ranges)):
        f[f"stride_{name}"] = c
    per_iter = sum(dtypes.itemsize(b.dtype) for b, _ in st.accesses)
    work = max(trips * (st.flops + st.calls), 1)
    f["flops_per_iter"], f["calls_per_iter"] = st.flops, st.calls
    f["loads_per_iter"], f["bytes_per_iter"] = len(st.accesses) - 1, _log(per_iter)
    for c in CACHES:
        # the outermost level whose loops stay within this cache: what runs in it, what
        # it holds, how often each byte is reused, and the traffic of refilling it
        cap = getattr(target, f"{c}_bytes")
        d = next((d for d in range(n + 1) if foot[d] <= cap), n)
        inner = math.prod(lp.extent for lp in loops[d:])
        f[f"{c}_trips"] = _log(inner)
        f[f"{c}_footprint"] = _log(foot[d])
        f[f"{c}_reuse"] = _log(inner * per_iter / max(foot[d], 1.0))
        # (an empty array's loop of extent 0 leaves no trip at any level: a division
        # by zero failed the build of every candidate, the default's too)
        f[f"{c}_traffic_per_flop"] = _log(trips / max(inner, 1) * foot[d] / work)
    f["footprint"] = _log(foot[0])
    f["intensity"] = _log(work / max(foot[0], 1.0))


def failed() -> np.ndarray:
    """The vector of a config that does not lower: every feature FAILED."""
    return np.full(len(FEATURE_NAMES), FAILED, dtype=np.float32)


def of_config(task, config) -> np.ndarray:
    """The features of a task's candidate for a config, from its loop IR right after the
    "lower" pass (a few ms: no simplification, no code generation); failed() when the
    schedule or lowering refuses the config."""
    try:
        low = pipeline.lower(task.graph, task.target, task.options,
                             schedule_fn=task.schedule_fn, config=config, until="lower")
    except Exception:             # noqa: BLE001 - any refusal is a config that fails
        return failed()
    return extract(low.func, task.target)
