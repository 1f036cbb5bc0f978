"""The schedule of a TE graph: per-stage loop structure built by replaying typed steps.

A Schedule is data: `typed_steps` is the list of steps (jitdl.schedule.steps) that made
it, `steps` their JSON, naming stages and loops by string, so a schedule can be hashed
into cache keys, stored, replayed on a fresh trace of the same definition, and shipped to
tuning workers. Steps that rewrite the graph (pack, cache_read, cache_write, rfactor) make
new tensors (`outputs` changes, the traced graph does not). The handles (Stage, Axis) are
conveniences for writing schedules by hand.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from jitdl.errors import ScheduleError, user_loc
from jitdl.ir.nodes import Access, ForKind
from jitdl.ir.visit import walk_expr
from jitdl.schedule import rewrite
from jitdl.schedule import steps as S
from jitdl.te.graph import replace_ops
from jitdl.te.ops import stages_of


BIND_TAGS = tuple(k.value for k in ForKind if k.bound)
SCOPES = ("global", "shared", "local")


def ceil_div(extent, f):
    """ceil(extent / f) of an int or a symbolic (int64 expression) extent."""
    if isinstance(extent, int):
        return -(-extent // f)
    return (extent + (f - 1)) // f if f > 1 else extent


def _positive_int(op, which, val):
    """A schedule's size argument as a Python int: an int or a NumPy integer (a factor
    computed with NumPy), positive and within int64 (the loops' type: 10**30 was an
    overflow error at the call); anything else is a ScheduleError naming it."""
    if not isinstance(val, bool) and isinstance(val, (int, np.integer)) and 0 < val < 2**63:
        return int(val)
    raise ScheduleError(f"{op}: argument '{which}' must be a positive int (below 2**63), "
                        f"got {val!r}", user_loc())


def _kind_text(kind):
    return f"bound to {kind.value}" if kind.bound else kind.value


def _not_bound(st, step, la):
    """A loop bound to a GPU index stays one loop: splitting, fusing or annotating it
    dropped the binding without a word (bind(j, "threadIdx.x") then vectorize(j) ran the
    stage on one thread)."""
    if la.kind.bound:
        what = f"{step.op}: {st.tensor.name}.{la.name} is {_kind_text(la.kind)}; "
        raise ScheduleError(
            what + "a loop bound to a GPU index runs in parallel already (parallel is for "
            "CPU schedules)" if step.op == "parallel" else
            what + f"{step.op} loops before binding them (split it, bind one part and "
            f"{step.op} the other)" if step.op in ("vectorize", "unroll") else
            what + f"{step.op} loops before binding them, then bind the new loops", user_loc())


def _cooperative(st, at=None):
    """The refusal of a bind of a shared copy's loops: its block's threads fill it
    together whatever its loops (TVM's cooperative fetching, spelt as binds there)."""
    cons, loop = at or st.attach_to
    return (f"bind: {st.tensor.name} is a shared copy computed at loop {loop} of {cons}; "
            "the block's threads fill it together already (its loops, split or not, are "
            "shared out over all the block's threads, with barriers around the fill: "
            "what TVM's binds of a shared stage's loops do), so leave them unbound")


@dataclass
class LoopAxis:
    name: str
    extent: object     # an int, or an int64 Expr over size variables (symbolic)
    reduce: bool
    kind: ForKind = ForKind.SERIAL


@dataclass
class Split:
    parent: str
    outer: str
    inner: str
    factor: int
    nparts: int = 0     # split(nparts=): the outer extent asked for, else 0


@dataclass
class Fuse:
    outer: str
    inner: str
    fused: str


@dataclass
class StageState:
    tensor: object
    axes: dict                      # name -> LoopAxis, for every loop ever made
    leaves: list                    # loop names, outermost first
    relations: list = field(default_factory=list)
    attach: str = "root"            # "root" | "inline" | "at"
    attach_to: tuple = None         # (consumer stage, loop) when attach == "at"
    block_buffer: bool = True       # compute_at: a block-sized buffer when private
    scope: str = "global"           # a cache_read copy's memory: "shared" on a GPU block
    attach_loc: object = None       # the user's line of its compute_at (errors found later)
    kind_locs: dict = field(default_factory=dict)   # loop -> the line that annotated it
    order_loc: object = None        # the user's line of the reorder that put its reduction
    #                                 loops out of order (argmax's errors, found later)

    @property
    def is_reduce(self):
        return self.tensor.op.reduce is not None

    def leaf_key(self, name):
        """Row-major position of a loop among the stage's root axes and their splits."""
        parent = {}
        for rel in self.relations:
            if isinstance(rel, Split):
                parent[rel.outer], parent[rel.inner] = (rel.parent, 0), (rel.parent, 1)
            elif isinstance(rel, Fuse):
                parent[rel.fused] = (rel.outer, 0)
        op = self.tensor.op
        roots = [a.name for a in op.axes] + [a.name for a in op.reduce_axes]
        path = []
        while name in parent:
            name, pos = parent[name]
            path.append(pos)
        return (roots.index(name),) + tuple(reversed(path))

    def reductions_out_of_order(self):
        """Whether its reduction loops are out of row-major order or outside a data loop
        (what an argmax or argmin cannot run)."""
        rloops = [n for n in self.leaves if self.axes[n].reduce]
        keys = [self.leaf_key(n) for n in rloops]
        return keys != sorted(keys) or self.leaves[len(self.leaves) - len(rloops):] != rloops


@dataclass(frozen=True)
class Axis:
    """A handle on one loop of one stage, as returned by schedule primitives."""
    stage: str
    name: str

    def __repr__(self):
        return f"{self.stage}.{self.name}"


class Stage:
    """A handle on one stage: `s["C"]`; `.axis` and `.reduce_axis` list its root loops."""

    def __init__(self, sched, name):
        self._s, self.name = sched, name

    @property
    def _state(self):
        return self._s.stages[self.name]

    @property
    def axis(self):
        return [Axis(self.name, a.name) for a in self._state.tensor.op.axes]

    @property
    def reduce_axis(self):
        return [Axis(self.name, a.name) for a in self._state.tensor.op.reduce_axes]

    @property
    def leaf_axes(self):
        return [Axis(self.name, n) for n in self._state.leaves]

    def __repr__(self):
        return f"<stage {self.name}: loops {', '.join(self._state.leaves)}>"

    # stage-level conveniences, TVM style: s["C"].split(...)
    def split(self, ax, factor=None, nparts=None):
        return self._s.split(ax, factor, nparts=nparts)

    def fuse(self, *axes):
        return self._s.fuse(*axes)

    def reorder(self, *axes):
        return self._s.reorder(*axes)

    def vectorize(self, ax):
        return self._s.vectorize(ax)

    def parallel(self, ax):
        return self._s.parallel(ax)

    def unroll(self, ax):
        return self._s.unroll(ax)

    def bind(self, ax, thread):
        return self._s.bind(ax, thread)

    def compute_inline(self):
        return self._s.compute_inline(self)

    def compute_root(self):
        return self._s.compute_root(self)


class Schedule:
    """The loop structure of every stage of a graph under the steps applied so far.
    `Schedule(graph)` (or the graph's outputs) starts from the definition's own loops."""

    def __init__(self, graph):
        self.outputs = tuple(getattr(graph, "outputs", graph))
        self.stages = {}
        for t in stages_of(self.outputs):
            op = t.op
            axes = {a.name: LoopAxis(a.name, a.extent, False) for a in op.axes}
            axes.update({a.name: LoopAxis(a.name, a.extent, True) for a in op.reduce_axes})
            leaves = [a.name for a in op.axes] + [a.name for a in op.reduce_axes]
            if len(set(leaves)) != len(leaves):
                raise ScheduleError(f"stage {t.name} uses the same index name twice: {leaves}")
            self.stages[t.name] = StageState(t, axes, leaves)
        self.typed_steps = []

    @property
    def steps(self):
        """The steps applied so far, as JSON objects."""
        return [step.to_json() for step in self.typed_steps]

    # -- lookup -------------------------------------------------------------------------
    def __getitem__(self, name):
        if hasattr(name, "name") and not isinstance(name, str):
            name = name.name
        if name not in self.stages:
            raise ScheduleError(f's["{name}"]: no stage named {name!r}; stages: '
                                f"{', '.join(self.stages)}", user_loc())
        return Stage(self, name)

    def _axis(self, prim, ax, arg="axis"):
        if not isinstance(ax, Axis):
            raise ScheduleError(f"{prim}: argument '{arg}' must be a loop of a stage (from "
                                f"stage.axis, .reduce_axis or another primitive), got {ax!r}",
                                user_loc())
        st = self.stages.get(ax.stage)
        if st is None or ax.name not in st.leaves:
            leaves = ", ".join(st.leaves) if st else ""
            raise ScheduleError(f"{prim}: loop {ax!r} is not a current loop of stage "
                                f"{ax.stage} (its loops are: {leaves})", user_loc())
        return st, st.axes[ax.name]

    # -- primitives -----------------------------------------------------------------------
    def split(self, ax, factor=None, nparts=None):
        """Split a loop in two: `for i in range(n)` becomes
        `for i.outer in range(ceil(n / f)): for i.inner in range(f): i = i.outer * f + i.inner`
        (guarded by `i < n` when f does not divide n). Give `factor` (the inner extent) or
        `nparts` (the outer extent). Returns (outer, inner)."""
        st, la = self._axis("split", ax)
        if (factor is None) == (nparts is None):
            raise ScheduleError("split: give exactly one of 'factor' and 'nparts'", user_loc())
        which = "factor" if factor is not None else "nparts"
        val = _positive_int("split", which, factor if factor is not None else nparts)
        factor, nparts = (val, None) if factor is not None else (None, val)
        if nparts is not None:
            if not isinstance(la.extent, int):
                raise ScheduleError(f"split: nparts= needs a concrete extent; "
                                    f"{ax.name} has the symbolic {la.extent!r}", user_loc())
            # (an empty axis, of an empty array's, still splits: parts of 1, none run)
            factor = max(1, ceil_div(la.extent, nparts))
        self._apply(S.Split(ax.stage, ax.name, factor, nparts or 0))
        return Axis(ax.stage, f"{ax.name}.o"), Axis(ax.stage, f"{ax.name}.i")

    def tile(self, x, y, x_factor, y_factor):
        """Split x and y and reorder to (x.o, y.o, x.i, y.i). Returns those four loops.
        Before: for i: for j: S          After: for i.o: for j.o: for i.i: for j.i: S"""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *axes):
        """Fuse adjacent loops into one.
        Before: for a in range(A): for b in range(B): S[a, b]
        After:  for f in range(A * B): S[f // B, f % B]"""
        if len(axes) < 2:
            raise ScheduleError("fuse: give at least two loops", user_loc())
        out = axes[0]
        for b in axes[1:]:
            out = self._fuse2(out, b)
        return out

    def _fuse2(self, a, b):
        self._axis("fuse", a, "outer")
        self._axis("fuse", b, "inner")
        if a.stage != b.stage:
            raise ScheduleError(f"fuse: loops {a!r} and {b!r} belong to different stages",
                                user_loc())
        self._apply(S.Fuse(a.stage, a.name, b.name))
        return Axis(a.stage, f"{a.name}.{b.name}.f")

    def reorder(self, *axes):
        """Permute the positions of the given loops of one stage; others stay in place.
        Before: for i: for j: for k: S      reorder(k, i) ->  for k: for j: for i: S"""
        if not axes:
            return
        for ax in axes:
            self._axis("reorder", ax)
        if len({ax.stage for ax in axes}) != 1:
            raise ScheduleError("reorder: all loops must belong to one stage", user_loc())
        names = [ax.name for ax in axes]
        if len(set(names)) != len(names):
            raise ScheduleError(f"reorder: a loop appears twice in {names}", user_loc())
        self._apply(S.Reorder(axes[0].stage, tuple(names)))

    def _annotate(self, prim, ax, kind):
        self._axis(prim, ax)
        step = {ForKind.VECTORIZED: S.Vectorize, ForKind.PARALLEL: S.Parallel,
                ForKind.UNROLLED: S.Unroll}[kind]
        self._apply(step(ax.stage, ax.name))

    def vectorize(self, ax):
        """Run a data loop as SIMD lanes (best on the innermost, contiguous loop).
        Before: for j in range(16): S       After: vectorized j in range(16): S

        On the CPU target this is a directive, not a hint. Results are those of the serial
        loop (up to the fused multiply-adds jitdl allows in every loop). The loop becomes
        LLVM vector code, one lane per iteration, when its extent is a constant (as after
        split; partitioned tails are shorter loops) and its body, as `f.lower` shows it,
        has no loop, no local buffer, no index checked at run time (E[ids[i], j]), writes
        no buffer at an index that is the same in every iteration, and reads a buffer it
        writes only at the index where it writes it. Then:
          - an access whose index is affine in the loop variable with stride 1 is one
            unaligned vector load or store; other indices are gathers or scatters;
          - what does not depend on the loop variable is computed as a scalar and
            broadcast where it meets a vector;
          - a condition that differs between iterations is a mask: masked loads and
            stores, selects; an element read only under a condition is not read where
            the condition is false (padding, guarded tails); a condition that does not
            differ stays a scalar branch or select;
          - arithmetic, comparisons, casts, sqrt, abs, floor/ceil/round, min/max and
            every transcendental function, float32 and float64 (exp, log, pow, sin,
            tanh, erf, atan2, ...: inline vector code, jitdl/codegen/mathlib.py) are
            vector instructions; only lanes that need it call libm (sin, cos and tan
            of huge arguments, inf or NaN), and a float `%` or fmod divides lane by lane;
          - up to 4 SIMD registers of lanes (32 float32 lanes with AVX2, 64 with
            AVX-512) are straight-line code; a longer loop is a loop over blocks of that
            width, then the remaining lanes.
        Otherwise it is a scalar loop marked llvm.loop.vectorize.enable, which LLVM's
        loop vectoriser honours where it can prove it legal (never around an inner loop).
        Either way, `f.llvm_ir(*args, optimized=False)` has a line
        `; jitdl: vectorized <loop>: vector code, ...` or `...: scalar loop ..., because
        <reason>`. An unrolled innermost loop whose accesses all have stride 1 (the
        column loop of a register tile) becomes vector code the same way.

        On the CUDA target a thread runs the loop's iterations itself (vectorize the loop
        inside the one bound to threadIdx.x). When its body is stores to global memory
        at indices with stride 1 over 4, 8 or 16 bytes (4 float32 or 2 float64 lanes:
        float4 accesses), each store and each read with stride 1 that runs whatever the
        values is one vector access (LDG.128 / STG.128) where all their addresses are
        aligned to that size, checked at run time (CuPy's allocations are; a view one
        element in is not, and runs the serial loop). Other reads stay element by
        element. `f.cuda_source(...)` has a line `// vectorized <loop>: ...` saying which
        it became, and why not."""
        self._annotate("vectorize", ax, ForKind.VECTORIZED)

    def parallel(self, ax):
        """Run a data loop's iterations on all cores (best on an outer loop); each thread
        takes one contiguous chunk. Before: for i: S      After: parallel i: S"""
        self._annotate("parallel", ax, ForKind.PARALLEL)

    def unroll(self, ax):
        """Unroll a loop with a constant trip count (up to 64 copies; a longer loop or one
        of a symbolic extent stays a loop, as the LLVM IR's notes say).
        Before: for j in range(3): S[j]      After: S[0]; S[1]; S[2]"""
        self._annotate("unroll", ax, ForKind.UNROLLED)

    def bind(self, ax, thread):
        """Run a data loop's iterations on GPU blocks or threads (the CUDA target):
        `thread` is "blockIdx.x|y|z" (one block per iteration) or "threadIdx.x|y|z" (one
        thread of the block per iteration). A stage's loops bound to block indices come
        before those bound to thread indices, and each index is bound once per stage;
        stages of one kernel share the launch, whose extent per index is the largest
        bound to it (smaller loops are guarded). A reduction loop may be bound to
        threadIdx.x: each thread accumulates its part, then the block's threads combine
        their parts (warp shuffles, then shared memory across warps); its extent must
        be a power of two up to 32 or a multiple of 32 (where it is narrower than the
        block along x, the other threads join with the identity, and the block's extent
        along x must be one too). On the CPU a bound loop is serial.
        Before: for i in range(4096): S        After: s.bind(io, "blockIdx.x"),
                                                       s.bind(ii, "threadIdx.x") after a
                                                       split of i by 256"""
        if not isinstance(thread, str) or thread not in BIND_TAGS:
            raise ScheduleError(f"bind: argument 'thread' must be one of "
                                f"{', '.join(BIND_TAGS)}, got {thread!r}", user_loc())
        self._axis("bind", ax)
        self._apply(S.Bind(ax.stage, ax.name, thread))

    def _stage_arg(self, prim, stage):
        if isinstance(stage, Stage):
            name = stage.name
        elif isinstance(stage, Axis):       # (it has a name too: the loop's, not a stage's)
            raise ScheduleError(f"{prim}: argument 'stage' must be a stage (s[\"T\"]), got "
                                f"the loop axis {stage!r} (a loop of stage '{stage.stage}': "
                                f"s.{prim}(s[\"{stage.stage}\"]))", user_loc())
        elif isinstance(stage, str):
            name = stage
        elif hasattr(stage, "name"):
            name = stage.name
        else:
            raise ScheduleError(f"{prim}: argument 'stage' must be a stage (s[\"T\"]), got "
                                f"{stage!r}", user_loc())
        if name not in self.stages:
            raise ScheduleError(f"{prim}: no stage named {name!r}", user_loc())
        return name

    @staticmethod
    def _tensor_arg(prim, tensor):
        """The name of the tensor a primitive copies: a name, a stage or a tensor."""
        name = tensor if isinstance(tensor, str) else getattr(tensor, "name", None)
        if not isinstance(name, str) or isinstance(tensor, Axis):
            raise ScheduleError(f"{prim}: argument 'tensor' must be a tensor's name (str) or "
                                f"a stage, got {tensor!r}", user_loc())
        return name

    def pack(self, tensor, consumer, dim, factor):
        """Copy `tensor` into a blocked layout for `consumer`: dimension `dim` (extent n)
        becomes an outer block index in front and an inner offset of `factor` at the end,
        e.g. B[K, N] -> B_pack[N / bn, K, bn], so the consumer's innermost loop reads it
        contiguously. The consumer's accesses are rewritten; returns the new stage.
        Before: for k: for j: ... B[k, j]
        After:  for jo: for k: for ji: B_pack[jo, k, ji] = B[k, jo * bn + ji]   (new stage)
                for k: for j: ... B_pack[j // bn, k, j % bn]"""
        cname = self._stage_arg("pack", consumer)
        tname = self._tensor_arg("pack", tensor)
        factor = _positive_int("pack", "factor", factor)
        self._apply(S.Pack(cname, tname, dim, factor))
        return self[f"{tname}_pack"]

    def cache_read(self, tensor, readers, scope="global"):
        """Copy `tensor` into a new stage `<tensor>_cache` that the given reader stages
        read instead; with compute_at(cache, reader, loop) only the block that one loop
        iteration needs is copied, into a block-sized local buffer. On the CUDA target
        scope="shared" makes that block one buffer of the GPU block, which all its
        threads fill together (the copy's loops are spread over the block's threads,
        with barriers inserted around it) and read: the block covers what every thread
        of the block reads in one iteration of the loop; "local" (the default inside
        thread-bound loops) keeps a copy per thread.
        Before: for i: for j: Y[i, j] = f(X[i, j])
        After:  X_cache[i, j] = X[i, j];  for i: for j: Y[i, j] = f(X_cache[i, j])
        Returns the new stage."""
        tname = self._tensor_arg("cache_read", tensor)
        if not isinstance(readers, (list, tuple)):
            readers = [readers]
        names = [self._stage_arg("cache_read", r) for r in readers]
        if not names:
            raise ScheduleError("cache_read: give at least one reader stage", user_loc())
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read: argument 'scope' must be one of "
                                f"{', '.join(map(repr, SCOPES))}, got {scope!r}", user_loc())
        name = self._cache_name(tname)
        self._apply(S.CacheRead(names[0], tuple(names), tname, scope))
        return self[name]

    def _cache_name(self, tname):
        """`<tensor>_cache`, then `<tensor>_cache1`, ...: a tensor may have a read cache
        for each of its readers (two matmuls of one operand, each tile its own copy)."""
        name, n = f"{tname}_cache", 0
        while name in self.stages:
            n += 1
            name = f"{tname}_cache{n}"
        return name

    def cache_write(self, stage):
        """Compute `stage` into a new stage `<stage>_local` and make `stage` a copy of it.
        With compute_at(local, stage, loop), the local stage accumulates one block in a
        block-sized buffer (registers, once unrolled) that is written back once.
        Before: for i: for j: for k: C[i, j] += A[i, k] * B[k, j]
        After:  C_local[i, j] = sum(...);  C[i, j] = C_local[i, j]    (two stages)
        Returns the new stage."""
        name = self._stage_arg("cache_write", stage)
        self._apply(S.CacheWrite(name))
        return self[f"{name}_local"]

    def rfactor(self, stage, axis, factor, blocked=False, fuse=()):
        """Split reduction `axis` of `stage` by `factor` and move the inner part out as a
        data axis of a new stage of partial results, so that the partial reductions can
        run in parallel or as SIMD lanes; `stage` then reduces the partials. Returns the
        new stage (named `<stage>_rf`, its first axis is the factor axis). Part kf takes
        every factor-th element (kf, kf + f, ...: SIMD lanes), or with blocked=True one
        contiguous block of ceil(K / f) (a thread's share of a long reduction).
        Before: for i: C[i] = sum(X[i, k] for k in range(K))
        After:  for kf in range(f): for i: C_rf[kf, i] = sum(X[i, ko*f + kf] for ko ...)
                for i: C[i] = sum(C_rf[kf, i] for kf in range(f))
        `fuse`: more reduction axes of the stage, taken with `axis` as one axis of their
        extents' product before the split (row-major: `axis` outermost, then these in
        order), as TVM's rfactor of a fused axis: a whole-array reduction of a symbolic
        shape is split along all of it, not along one axis that may be short."""
        name = self._stage_arg("rfactor", stage)
        if not isinstance(axis, Axis) or axis.stage != name:
            raise ScheduleError(f"rfactor: argument 'axis' must be a reduction axis of "
                                f"{name}, got {axis!r}", user_loc())
        factor = _positive_int("rfactor", "factor", factor)
        fuse = (fuse,) if isinstance(fuse, Axis) else tuple(fuse)
        bad = next((a for a in fuse if not isinstance(a, Axis) or a.stage != name), None)
        if bad is not None:
            raise ScheduleError(f"rfactor: argument 'fuse' must be reduction axes of {name}, "
                                f"got {bad!r}", user_loc())
        self._apply(S.RFactor(name, axis.name, factor, bool(blocked),
                              tuple(a.name for a in fuse)))
        return self[f"{name}_rf"]

    def divide_after(self, stage):
        """Move a softmax's division out of a sum of products: where `stage` sums
        (e / s) * v over the axis that s sums e over (e = exp(x - max)), a new stage
        `<stage>_dividend` sums e * v and `stage` divides that by s, once per element.
        Before: P[i, k] = e[i, k] / s[i];  O[i, j] = sum(P[i, k] * V[k, j] for k)
        After:  O_dividend[i, j] = sum(e[i, k] * V[k, j] for k);  O[i, j] = O_dividend[i, j] / s[i]
        Returns the new stage."""
        name = self._stage_arg("divide_after", stage)
        self._apply(S.DivideAfter(name))
        return self[f"{name}_dividend"]

    def compute_inline(self, stage):
        """Compute a stage inside each consumer instead of storing it: its loops vanish.
        Before: for i: T[i] = f(X[i]);  for i: Y[i] = g(T[i])
        After:  for i: Y[i] = g(f(X[i]))
        A reduction can be inlined into its one reader where that reader only casts it
        (jd.numpy.sum of float32 accumulates in float64): the reader becomes the reduction,
        its accumulator stored cast, before other steps on either of them.
        Before: for i: T[i] = sum(float64(X[i, k]) for k);  for i: Y[i] = float32(T[i])
        After:  for i: Y[i] = float32(sum(float64(X[i, k]) for k))"""
        name = self._stage_arg("compute_inline", stage)
        self._apply(S.ComputeInline(name))

    def compute_at(self, stage, consumer, loop, block_buffer=True):
        """Compute `stage` inside `consumer`'s loop `loop`, only the block of it that one
        iteration of that loop reads (its data loops are derived from the consumer; its
        reduction loops keep their own schedule). With block_buffer (the default) a stage
        that only this loop reads lives in a block-sized local buffer; else in its whole one.
        The consumer may itself be computed at a loop (TVM's GPU matmul: the operands'
        shared copies at k.o of C's local cache, which is computed at C's thread loop; a
        shared copy then spans the threads of every stage around it).
        Before: for i: mx[i] = max(...)          After: for i:
                for i: for j: Y[i, j] = ... mx[i]          mx[i] = max(...)
                                                           for j: Y[i, j] = ... mx[i]"""
        name = self._stage_arg("compute_at", stage)
        cname = self._stage_arg("compute_at", consumer)
        if not isinstance(loop, Axis):
            raise ScheduleError(f"compute_at: argument 'loop' must be a loop of stage "
                                f"{cname}, got {loop!r}", user_loc())
        self._apply(S.ComputeAt(name, cname, loop.name, loop.stage, bool(block_buffer)))

    def compute_root(self, stage):
        """Compute a stage in its own loop nest at the top level, into a whole buffer (the
        default; undoes compute_inline or compute_at).
        After: for i: T[i] = f(X[i]);  for i: Y[i] = g(T[i])"""
        name = self._stage_arg("compute_root", stage)
        self._apply(S.ComputeRoot(name))

    # -- replay -------------------------------------------------------------------------
    def _apply(self, step):
        """Check and perform one step on the loop structure, then record it."""
        st = self.stages.get(step.stage)
        if st is None:
            raise ScheduleError(f"{step.op}: no stage named {step.stage!r}", user_loc())
        moved = [n for n in (getattr(step, "axis", None), getattr(step, "outer", None),
                             getattr(step, "inner", None)) if isinstance(n, str)]
        if st.attach == "at" and isinstance(step, (S.Fuse, S.Parallel, S.Bind)):
            # (a block's loop may run in parallel where no loop around the attach point
            # does: the loop IR's verifier rejects parallel loops nested in one another)
            # (a root data loop may be bound to a thread index, as before compute_at:
            # the block is then shared by the GPU block's threads, lower._threads_share)
            roots = {a.name for a in st.tensor.op.axes}
            if any(n in st.axes and not st.axes[n].reduce and not (
                    isinstance(step, S.Parallel) and n in roots) and not (
                    isinstance(step, S.Bind) and n in roots and
                    ForKind(step.thread).thread) for n in moved):
                if isinstance(step, S.Bind) and st.scope == "shared":
                    raise ScheduleError(_cooperative(st), user_loc())
                raise ScheduleError(
                    f"{step.op}: the data loops of {st.tensor.name} cover the block that "
                    f"{st.attach_to[0]}'s loop {st.attach_to[1]} needs (compute_at); they "
                    "can be split, reordered, unrolled, vectorized or run in parallel but "
                    "not fused or bound", user_loc())
        if isinstance(step, (S.Split, S.Fuse)):
            for other in self.stages.values():
                if other.attach == "at" and other.attach_to[0] == st.tensor.name \
                        and other.attach_to[1] in moved:
                    raise ScheduleError(
                        f"{step.op}: stage {other.tensor.name} is computed at loop "
                        f"{other.attach_to[1]} of {st.tensor.name}; {step.op} loops before "
                        "computing stages at them", user_loc())
        match step:
            case S.Split(axis=axis, factor=f, nparts=nparts):
                la = self._loop(st, step, axis)
                _not_bound(st, step, la)
                if isinstance(f, bool) or not isinstance(f, int) or f <= 0:
                    raise ScheduleError(f"split: factor must be a positive int, got {f!r}",
                                        user_loc())
                outer = LoopAxis(f"{la.name}.o", ceil_div(la.extent, f), la.reduce)
                inner = LoopAxis(f"{la.name}.i", f, la.reduce)
                if outer.name in st.axes:
                    raise ScheduleError(f"split: {la.name} was already split", user_loc())
                st.axes[outer.name], st.axes[inner.name] = outer, inner
                k = st.leaves.index(la.name)
                st.leaves[k:k + 1] = [outer.name, inner.name]
                st.relations.append(Split(la.name, outer.name, inner.name, f, nparts))
            case S.Fuse(outer=outer, inner=inner):
                a, b = self._loop(st, step, outer), self._loop(st, step, inner)
                _not_bound(st, step, a)
                _not_bound(st, step, b)
                k = st.leaves.index(a.name)
                if st.leaves[k + 1:k + 2] != [b.name]:
                    raise ScheduleError(
                        f"fuse: {step.stage}.{outer} must be directly outside "
                        f"{step.stage}.{inner}; current order: {', '.join(st.leaves)} "
                        "(reorder first)", user_loc())
                if a.reduce != b.reduce:
                    raise ScheduleError(f"fuse: cannot fuse a reduction loop with a data "
                                        f"loop ({step.stage}.{outer}, {step.stage}.{inner})",
                                        user_loc())
                fused = LoopAxis(f"{a.name}.{b.name}.f", a.extent * b.extent, a.reduce)
                st.axes[fused.name] = fused
                st.leaves[k:k + 2] = [fused.name]
                st.relations.append(Fuse(a.name, b.name, fused.name))
            case S.Reorder(axes=names):
                for n in names:
                    self._loop(st, step, n)
                slots = sorted(st.leaves.index(n) for n in names)
                was = st.reductions_out_of_order()
                for pos, n in zip(slots, names):
                    st.leaves[pos] = n
                if not was or st.order_loc is None:     # (not a later reorder of other loops)
                    st.order_loc = user_loc()
            case S.Vectorize(axis=axis) | S.Parallel(axis=axis) | S.Unroll(axis=axis):
                kind = {S.Vectorize: ForKind.VECTORIZED, S.Parallel: ForKind.PARALLEL,
                        S.Unroll: ForKind.UNROLLED}[type(step)]
                la = self._loop(st, step, axis)
                _not_bound(st, step, la)
                if la.reduce and kind != ForKind.UNROLLED:
                    raise ScheduleError(
                        f"{step.op}: {st.tensor.name}.{axis} is a reduction loop; only "
                        f"data-parallel loops can be "
                        f"{'vectorized' if kind == ForKind.VECTORIZED else 'parallel'} "
                        f"(legal: {', '.join(n for n in st.leaves if not st.axes[n].reduce)}"
                        "); use rfactor for parallel reductions", user_loc())
                la.kind = kind
                st.kind_locs[axis] = user_loc()
            case S.Bind(axis=axis, thread=tag):
                la = self._loop(st, step, axis)
                if tag not in BIND_TAGS:
                    raise ScheduleError(f"bind: thread must be one of {', '.join(BIND_TAGS)}"
                                        f", got {tag!r}", user_loc())
                if la.kind not in (ForKind.SERIAL, ForKind(tag)):
                    raise ScheduleError(
                        f"bind: {st.tensor.name}.{axis} is {_kind_text(la.kind)} already; a "
                        f"loop takes one of bind, vectorize, parallel and unroll (split it "
                        f"and bind one part)", user_loc())
                if la.reduce and tag != "threadIdx.x":
                    raise ScheduleError(
                        f"bind: {st.tensor.name}.{axis} is a reduction loop; it can be "
                        f"bound only to threadIdx.x (the block's threads then reduce "
                        f"together), not to {tag}", user_loc())
                other = [n for n in st.leaves if st.axes[n].kind.value == tag and n != axis]
                if other:
                    raise ScheduleError(f"bind: {tag} is bound to {st.tensor.name}."
                                        f"{other[0]} already; bind each index once per "
                                        "stage (fuse the loops first)", user_loc())
                la.kind = ForKind(tag)
                st.kind_locs[axis] = user_loc()
            case S.ComputeInline():
                if any(st.tensor is o for o in self.outputs):
                    raise ScheduleError(f"compute_inline: stage {st.tensor.name} is an "
                                        "output and must be stored", user_loc())
                if st.is_reduce:
                    self._reduce_into(st)
                else:
                    st.attach = "inline"
            case S.ComputeRoot():
                st.attach, st.attach_to, st.block_buffer = "root", None, True
            case S.ComputeAt():
                self._compute_at(st, step)
            case S.Pack(tensor=tname, dim=d, factor=f):
                if f"{tname}_pack" in self.stages:
                    raise ScheduleError(f"pack: {tname} is already packed", user_loc())
                packed, op = rewrite.pack(st.tensor, tname, d, f)
                self._rewrite({st.tensor.name: op}, packed, before=st.tensor.name)
            case S.RFactor(axis=axis, factor=f, blocked=blocked, fuse=fuse):
                t = st.tensor
                if t.op.reduce is not None and any(a.name == axis for a in t.op.reduce_axes) \
                        and not self._fresh(st):
                    raise ScheduleError(f"rfactor: apply it to {t.name} before other steps",
                                        user_loc())
                if f"{t.name}_rf" in self.stages:
                    raise ScheduleError(
                        f"rfactor: {t.name} already has an rfactor stage {t.name}_rf; "
                        f"rfactor it once (or rfactor {t.name}_rf)", user_loc())
                rf, op, kr = rewrite.rfactor(t, axis, f, blocked, fuse)
                self._rewrite({t.name: op}, rf, before=t.name)
                st.axes = {a.name: LoopAxis(a.name, a.extent, False) for a in op.axes}
                st.axes[kr.name] = LoopAxis(kr.name, f, True)
                st.leaves = [a.name for a in op.axes] + [kr.name]
            case S.CacheWrite():
                self._hand_over(st, "cache_write", "_local", "already has a write cache",
                                rewrite.cache_write)
            case S.DivideAfter():
                self._hand_over(st, "divide_after", "_dividend", "is already divided after "
                                "its sum", rewrite.divide_after, prune=True)
            case S.CacheRead(readers=names, tensor=tname, scope=scope):
                if scope not in SCOPES:
                    raise ScheduleError(f"cache_read: scope must be one of "
                                        f"{', '.join(map(repr, SCOPES))}, got {scope!r}",
                                        user_loc())
                for n in names:
                    if n not in self.stages:
                        raise ScheduleError(f"cache_read: no stage named {n!r}", user_loc())
                readers = [self.stages[n].tensor for n in names]
                cache, ops = rewrite.cache_read(readers, tname, self._cache_name(tname))
                first = min(list(self.stages).index(n) for n in names)
                self._rewrite(ops, cache, before=list(self.stages)[first])
                self.stages[cache.name].scope = scope
            case _:
                raise ScheduleError(f"unknown schedule step {step!r}")
        self.typed_steps.append(step)

    def _loop(self, st, step, name):
        la = st.axes.get(name)
        if la is None or name not in st.leaves:
            raise ScheduleError(f"{step.op}: {name!r} is not a current loop of stage "
                                f"{st.tensor.name} (its loops are: {', '.join(st.leaves)})",
                                user_loc())
        return la

    @staticmethod
    def _fresh(st):
        """No step has changed the stage's loops yet."""
        op = st.tensor.op
        return st.leaves == [a.name for a in op.axes] + [a.name for a in op.reduce_axes] \
            and all(a.kind == ForKind.SERIAL for a in st.axes.values())

    def cast_reader(self, name):
        """The stage that only casts reduction `name` (rewrite.cast_reader), if any: its
        compute_inline makes that stage the reduction, stored with the cast."""
        t = self.stages[name].tensor
        readers = [x.tensor for x in self.stages.values() if t in self._reads(x)]
        r = rewrite.cast_reader(t, readers)
        return None if r is None else self.stages[r.name]

    def _reduce_into(self, st):
        """compute_inline of a reduction: its one reader, which casts it, becomes the
        reduction (accumulated in its dtype, stored in the reader's); both untouched yet."""
        t = st.tensor
        cons = self.cast_reader(t.name)
        if cons is None:
            raise ScheduleError(
                f"compute_inline: stage {t.name} is a reduction and cannot be inlined "
                "(only elementwise/injective stages can, and a reduction into its one reader "
                "when that reader only casts it between float dtypes)", user_loc())
        if not (self._fresh(st) and self._fresh(cons)) or st.attach != "root" or \
                cons.attach != "root":
            raise ScheduleError(f"compute_inline: apply it to {t.name} before other steps "
                                f"on {t.name} and {cons.tensor.name}", user_loc())
        op = rewrite.reduce_into(t, cons.tensor)
        self._rewrite({cons.tensor.name: op}, None, None, prune=True)
        for a in op.reduce_axes:
            cons.axes[a.name] = LoopAxis(a.name, a.extent, True)
            cons.leaves.append(a.name)

    def _hand_over(self, st, prim, suffix, again, make, prune=False):
        """A fresh root stage st gives its loops (and the steps to come) to the stage
        `<st><suffix>` that make(st's tensor) returns with st's new op, which is one loop
        per data axis (cache_write: a copy; divide_after: a division)."""
        t = st.tensor
        if not self._fresh(st) or st.attach != "root":
            raise ScheduleError(f"{prim}: apply it to {t.name} before other steps", user_loc())
        if f"{t.name}{suffix}" in self.stages:
            raise ScheduleError(f"{prim}: {t.name} {again}", user_loc())
        new, op = make(t)
        self._rewrite({t.name: op}, new, before=t.name,
                      state=StageState(new, dict(st.axes), list(st.leaves)), prune=prune)
        st.axes = {a.name: LoopAxis(a.name, a.extent, False) for a in op.axes}
        st.leaves = [a.name for a in op.axes]

    def _rewrite(self, new_ops, new_tensor, before, state=None, prune=False):
        """Replace stage ops (graph rewrite), and add the state of the new stage in front
        of stage `before` (producers before consumers); with prune, stages no output reads
        any more go (the quotient divide_after bypassed)."""
        self.outputs, tensors = replace_ops(self.outputs, new_ops)
        if new_tensor is not None and state is None:    # (None: compute_inline of a reduction)
            op = new_tensor.op
            state = StageState(new_tensor,
                               {a.name: LoopAxis(a.name, a.extent, a.reduce)
                                for a in tuple(op.axes) + tuple(op.reduce_axes)},
                               [a.name for a in op.axes] + [a.name for a in op.reduce_axes])
        stages = {}
        for name, st in self.stages.items():
            if name == before:
                stages[new_tensor.name] = state
            stages[name] = st
        self.stages = {name: st for name, st in stages.items()
                       if not prune or name in tensors}
        for name, st in self.stages.items():
            st.tensor = tensors.get(name, st.tensor)

    def _compute_at(self, st, step):
        cname, loop = step.target, step.axis
        cons = self.stages.get(cname)
        if cons is None:
            raise ScheduleError(f"compute_at: no stage named {cname!r}", user_loc())
        if step.axis_stage != cname:
            raise ScheduleError(
                f"compute_at: loop {step.axis_stage}.{loop} is not a loop of "
                f"{cname}; legal loops: {', '.join(cons.leaves)}", user_loc())
        if loop not in cons.leaves:
            raise ScheduleError(f"compute_at: {loop!r} is not a current loop of {cname}; "
                                f"legal loops: {', '.join(cons.leaves)}", user_loc())
        if cname == st.tensor.name:
            raise ScheduleError(f"compute_at: cannot compute {cname} inside itself",
                                user_loc())
        if st.attach == "inline":
            raise ScheduleError(f"compute_at: {st.tensor.name} is inlined", user_loc())
        # the consumer must read the stage, directly or through other stages
        if st.tensor not in self._reads_transitively(cons):
            readers = [n for n, x in self.stages.items() if st.tensor in self._reads(x)]
            raise ScheduleError(
                f"compute_at: {cname} does not read {st.tensor.name}; it can be computed "
                f"at a loop of: {', '.join(readers) or 'no stage'}", user_loc())
        # no cycle: the consumer must not itself be computed inside this stage
        c = cons
        while c.attach == "at":
            if c.attach_to[0] == st.tensor.name:
                raise ScheduleError(f"compute_at: {cname} is computed inside "
                                    f"{st.tensor.name}, so this would make a cycle",
                                    user_loc())
            c = self.stages[c.attach_to[0]]
        roots = {a.name for a in st.tensor.op.axes}
        fused = any(isinstance(r, Fuse) and not st.axes[r.fused].reduce for r in st.relations)
        for n in st.leaves:
            a = st.axes[n]
            if not a.reduce and n not in roots and (a.kind.bound or fused):
                if a.kind.bound and st.scope == "shared":
                    raise ScheduleError(_cooperative(st, (cname, loop)),
                                        st.kind_locs.get(n) or user_loc())
                raise ScheduleError(
                    f"compute_at: the data loops of {st.tensor.name} cover the block its "
                    f"consumer's loop needs; they can be split, reordered, unrolled, "
                    f"vectorized or run in parallel but not fused or bound (found {n})",
                    user_loc())
        st.attach, st.attach_to = "at", (cname, loop)
        st.block_buffer = step.block_buffer
        st.attach_loc = user_loc()

    def validate(self):
        """Checks of the finished schedule: a stage computed at a loop exists only there,
        so every stage that reads it must be that consumer or be computed at the same loop
        (the consumer may itself be computed at a loop: nested compute_at); at most one
        parallel loop per stage, none in a stage computed inside a parallel or bound loop
        (of its consumer or of a stage that one is computed inside)."""
        for st in self.stages.values():
            if st.attach == "at":
                self._check_readers_inside(st)
            par = [n for n in st.leaves if st.axes[n].kind == ForKind.PARALLEL]
            if len(par) > 1:
                raise ScheduleError(f"parallel: stage {st.tensor.name} has several parallel "
                                    f"loops ({', '.join(par)}); fuse them and parallelise "
                                    "the fused loop", st.kind_locs.get(par[-1]))
            at = st           # (up the chain of nested compute_at: any loop around it)
            while par and at.attach == "at":
                cons = self.stages[at.attach_to[0]]
                around = cons.leaves[:cons.leaves.index(at.attach_to[1]) + 1]
                busy = [n for n in around if cons.axes[n].kind != ForKind.SERIAL and
                        cons.axes[n].kind != ForKind.UNROLLED]
                if busy:
                    where = "" if at is st else \
                        f", which is computed at loop {at.attach_to[1]} of {cons.tensor.name}"
                    raise ScheduleError(
                        f"parallel: {st.tensor.name} is computed at loop {st.attach_to[1]} "
                        f"of {st.attach_to[0]}{where}, inside its "
                        f"{cons.axes[busy[0]].kind.value} loop {busy[0]}; its own loops "
                        "cannot run in parallel there",
                        st.kind_locs.get(par[0]) or st.attach_loc)
                at = cons

    def _check_readers_inside(self, st):
        for other in self.stages.values():
            if other is st or other.attach == "inline":
                continue
            if st.tensor in self._reads(other) and other.tensor.name != st.attach_to[0] \
                    and not self.inside(other, st.attach_to):
                via = other         # (inside the loop through a stage computed there?)
                while via.attach == "at" and not self.inside(via, st.attach_to):
                    via = self.stages[via.attach_to[0]]
                if via is not other and via.attach == "at":
                    raise ScheduleError(
                        f"compute_at: {other.tensor.name} reads {st.tensor.name} from inside "
                        f"{via.tensor.name}, which is computed at loop {via.attach_to[1]} of "
                        f"{via.attach_to[0]}: a stage computed at a loop of "
                        f"{st.attach_to[0]} is read there and by stages computed at its "
                        "loops, not by stages computed inside those; compute "
                        f"{st.tensor.name} at a loop of {via.tensor.name} (nested "
                        "compute_at)", st.attach_loc or user_loc())
                raise ScheduleError(
                    f"compute_at: {other.tensor.name} also reads {st.tensor.name} outside "
                    f"loop {st.attach_to[1]} of {st.attach_to[0]}; compute "
                    f"{other.tensor.name} at that loop too, or {st.tensor.name} at a loop "
                    "that encloses all its readers", st.attach_loc or user_loc())

    def inside(self, st, at):
        """Whether stage st is computed inside loop `at` (consumer name, loop name): at
        that loop or at one nested in it, as a thread's register copy of its block's
        shared copy is."""
        if st.attach != "at" or st.attach_to[0] != at[0]:
            return False
        leaves = self.stages[at[0]].leaves
        return leaves.index(st.attach_to[1]) >= leaves.index(at[1])

    def _reads_transitively(self, st):
        # (each stage's own body: the closure over them is the closure over _reads, which
        # looks through inlined stages again at every step of a long chain)
        out, todo = set(), [st]
        while todo:
            for n in walk_expr(todo.pop().tensor.op.body):
                if isinstance(n, Access) and n.tensor not in out:
                    out.add(n.tensor)
                    if n.tensor.name in self.stages:
                        todo.append(self.stages[n.tensor.name])
        return out

    def _reads(self, st):
        """Tensors read by a stage, looking through stages inlined into it."""
        out, todo = set(), [st.tensor.op.body]
        while todo:
            for n in walk_expr(todo.pop()):
                if isinstance(n, Access) and n.tensor not in out:
                    out.add(n.tensor)
                    prod = self.stages.get(n.tensor.name)
                    if prod is not None and prod.attach == "inline":
                        todo.append(prod.tensor.op.body)
        return out

    def replay(self, steps):
        """Apply steps (Step objects or their JSON) in order; returns the schedule."""
        for step in steps:
            self._apply(S.from_json(step))
        return self

    def key(self) -> str:
        return json.dumps(self.steps, sort_keys=True)

    def __repr__(self):
        lines = [f"schedule ({len(self.typed_steps)} steps)"]
        for name, st in self.stages.items():
            loops = ", ".join(n + ("" if st.axes[n].kind == ForKind.SERIAL
                                   else f"[{st.axes[n].kind.value}]") for n in st.leaves)
            where = f"at {st.attach_to[0]}.{st.attach_to[1]}" if st.attach == "at" \
                else st.attach
            lines.append(f"  {name}: {where}: {loops}")
        return "\n".join(lines)
