"""Vector code for a loop: its variable becomes a vector of consecutive lanes.

`plan` decides whether a loop's body can run as vector instructions (and says why not);
`emit` writes it: the body runs once per block of `lanes` iterations, values that depend
on the loop variable are LLVM vectors (`<8 x float>`), the others stay scalars and are
broadcast where they meet a vector. A Load or Store whose index is affine in the loop
variable with stride 1 is one (unaligned) vector load or store, other indices a gather
or scatter; conditions that differ between lanes become masks (masked loads and stores,
selects), conditions that do not stay branches.

Running the iterations of a body "all lanes of statement 1, then all lanes of statement
2" is the serial order only if no lane reads or writes a location another lane writes.
The plan checks it: every buffer written in the body is accessed at one index that takes
a different value in every lane (affine with a non-zero coefficient), or it is written
once and never read there (a scatter keeps the lane order, so the last lane wins as in
the serial loop).
"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from jitdl import dtypes
from jitdl.codegen.lltypes import (I1, I32, I64, PTR, const, is_vector, lanes_const,
                                   mem_type, poison, suffix, vector, zeros)
from jitdl.codegen.mathlib import INLINE
from jitdl.ir.analysis import arms_read_guarded, short_circuits, stride
from jitdl.ir.nodes import (Access, Allocate, BinOp, Binary, Call, Cast, Compare, Const, For,
                            IfThen, Intrin, LetStmt, Load, Reduce, Select, Seq, Store, Unary,
                            Var)
from jitdl.ir.visit import NodeKey, expr_children, walk_expr, walk_unique
from jitdl.target.cpu import host

MAX_LANES = 64          # lanes of one body (LLVM splits wide vectors into registers)
BLOCK_REGISTERS = 4     # a block is this many registers' worth of lanes ...
MATH_BLOCK_REGISTERS = 2    # ... or this many where the body computes a math routine
# operations written inline as long routines (jitdl.codegen.mathlib): a body with one is
# bound by arithmetic, not memory, and wider blocks only multiply LLVM's work
_MATH_CALLS = frozenset(INLINE) | {Intrin.SIGMOID}
_MATH_OPS = frozenset({BinOp.POW, BinOp.ATAN2})


def _is_math(n):
    return dtypes.is_float(n.dtype) and (isinstance(n, Call) and n.fn in _MATH_CALLS or
                                         isinstance(n, Binary) and n.op in _MATH_OPS)


@dataclass(frozen=True)
class Plan:
    lanes: int          # lanes of a full block
    blocks: int         # full blocks (a loop when more than one)
    tail: tuple         # lanes of the blocks after them: powers of two, widest first
    varying: frozenset  # the loop variable and the lets bound to values that vary by lane
    contiguous: bool    # some access walks memory with stride 1
    gathers: bool       # some access needs a gather or scatter

    def describe(self):
        parts = []
        if self.blocks == 1:
            parts.append(f"one block of {self.lanes} lanes")
        elif self.blocks > 1:
            parts.append(f"a loop of {self.blocks} blocks of {self.lanes} lanes")
        if self.tail:
            n = sum(self.tail)
            split = f" ({' + '.join(map(str, self.tail))})" if len(self.tail) > 1 else ""
            parts.append(f"{'then' if parts else 'one block of'} {n} lanes{split}")
        return ", ".join(parts) + (" (gathers/scatters)" if self.gathers else "")


def _pieces(n, cap):
    """n lanes as vectors of power-of-two widths up to cap (LLVM splits such vectors into
    whole registers; a <24 x float> would be widened to 32 lanes and shuffled)."""
    out = []
    while n:
        p = min(cap, 1 << (n.bit_length() - 1))
        out.append(p)
        n -= p
    return tuple(out)


def _itemsize(dtype):
    return 1 if dtype == "bool" else dtypes.itemsize(dtype)


class _Refused(Exception):
    pass


def _scan(loop, checked_reads=True):
    """(varying vars, accesses [(buffer, index, is_store)], varies, whether the body
    computes a math routine) of a loop body, or _Refused.
    checked_reads=False refuses reads checked at run time whose index or check differs by
    lane (LLVM's vectoriser gives up on them: the check branches to the error path)."""
    varying = {loop.var}
    accesses = []
    math = []

    def varies(e):
        return any(isinstance(n, Var) and n in varying for n in walk_unique(e))

    def exprs(*es):
        for e in es:
            for n in walk_unique(e):
                if isinstance(n, Load):
                    if not checked_reads and n.check and (
                            varies(n.index) or any(varies(c[0]) for c in n.check)):
                        raise _Refused(f"it reads {n.check[0][2]} at an index checked at "
                                       "run time")
                    accesses.append((n.buffer, n.index, False))
                elif isinstance(n, (Access, Reduce)):
                    raise _Refused(f"it contains a {type(n).__name__} node")
                elif not math and _is_math(n):
                    math.append(n)

    def stmt(s):
        match s:
            case Seq():
                for x in s.stmts:
                    stmt(x)
            case Store():
                exprs(s.index, s.value)
                accesses.append((s.buffer, s.index, True))
            case IfThen():
                exprs(s.cond)
                stmt(s.then)
                if s.otherwise is not None:
                    stmt(s.otherwise)
            case LetStmt():
                exprs(s.value)
                if varies(s.value):
                    varying.add(s.var)
                stmt(s.body)
            case For():
                raise _Refused(f"its body contains a loop ({s.var.name})")
            case Allocate():
                raise _Refused(f"its body allocates a buffer ({s.buffer.name})")
            case _:
                raise _Refused(f"its body contains a {type(s).__name__}")
    stmt(loop.body)
    return varying, accesses, varies, bool(math)


def refused(loop):
    """Why LLVM's vectoriser cannot make the loop body vector code (a read at an index
    checked at run time, a node the scan does not know), or None: when a loop marked
    llvm.loop.vectorize.enable is not vectorised it prints a "loop not vectorized"
    warning to the user's terminal."""
    try:
        _scan(loop, checked_reads=False)
    except _Refused as e:
        return str(e)
    return None


def plan(loop, vector_bytes, unrolled=False):
    """A Plan for running `loop` as vector code, or a string saying why it cannot."""
    if not isinstance(loop.extent, Const):
        return "its extent is not a constant"
    n = int(loop.extent.value)
    if n < 2:
        return "it has fewer than two iterations"
    try:
        varying, accesses, varies, math = _scan(loop)
    except _Refused as e:
        return str(e)
    by_buffer = {}
    for buf, idx, is_store in accesses:
        by_buffer.setdefault(buf, []).append((idx, is_store))
    contiguous = gathers = False
    widest = 0
    for buf, accs in by_buffer.items():
        written = [idx for idx, st in accs if st]
        strides = []
        for idx, _ in accs:
            if varies(idx):
                c = stride(idx, loop.var, varying)
                strides.append(c)
                contiguous |= c == 1
                gathers |= c != 1
                widest = max(widest, _itemsize(buf.dtype))
        if not written:
            continue
        if any(not varies(idx) for idx in written):
            return (f"it writes {buf.name} at the same index in every iteration (a value "
                    "carried from one iteration to the next)")
        if len(accs) > 1:
            first = accs[0][0]
            if any(idx != first for idx, _ in accs[1:]):
                return (f"it reads and writes {buf.name} at different indices in one "
                        "iteration")
            if not strides[0]:
                return (f"it reads and writes {buf.name} at an index that may repeat from "
                        "one iteration to another")
    if unrolled and (not contiguous or gathers):
        return "not every access that depends on it has stride 1"
    if widest == 0:
        widest = max((_itemsize(b.dtype) for b in by_buffer), default=4)
    natural = max(1, vector_bytes // widest)
    width = min(MAX_LANES, (MATH_BLOCK_REGISTERS if math else BLOCK_REGISTERS) * natural)
    blocks = 0 if unrolled or n <= width else n // width
    return Plan(width, blocks, _pieces(n - blocks * width, width), frozenset(varying),
                contiguous, gathers)


def emit(cg, loop, p):
    """Emit `loop` as planned (cg: the FunctionCodegen, at the loop's position)."""
    lo = cg.expr(loop.min)
    saved = cg.env.get(loop.var)
    # whether a node differs by lane, and the stride of each index: worked out once for
    # every block of the loop, and every copy of it when an enclosing loop is unrolled
    memo = cg.gen.memo(loop)
    if p.blocks == 1:
        cg.env[loop.var] = lo
        VectorBody(cg, p, loop.var, p.lanes, memo).stmt(loop.body)
    elif p.blocks > 1:
        # a block is already as wide as LLVM's vectoriser and unroller would make it
        end = cg.binop(BinOp.ADD, lo, ir.Constant(I64, p.blocks * p.lanes), "int64")
        cg.loop(loop.var, lo, end,
                lambda: VectorBody(cg, p, loop.var, p.lanes, memo).stmt(loop.body),
                step=p.lanes, hints=(("llvm.loop.vectorize.width", 1),
                                     "llvm.loop.unroll.disable"))
    start = p.blocks * p.lanes
    for lanes in p.tail:
        cg.env[loop.var] = cg.binop(BinOp.ADD, lo, ir.Constant(I64, start), "int64")
        VectorBody(cg, p, loop.var, lanes, memo).stmt(loop.body)
        start += lanes
    cg.restore(loop.var, saved)


class VectorBody:
    """The statements of one block of lanes; cg.env[var] holds the first lane's value."""

    def __init__(self, cg, p, var, lanes, memo):
        self.cg, self.b = cg, cg.b
        self.var, self.n = var, lanes
        self.varying = p.varying
        self.mask = None            # None: every lane runs; else a <n x i1> value
        self._memo = memo
        self._cache = {}            # (block, key) -> value, for broadcasts and lane indices
        self.values = {}            # NodeKey -> (block, mask, value): see expr

    # -- lanes ---------------------------------------------------------------------------
    def varies(self, e):
        """Whether e may differ between lanes (memoised bottom-up: each node once)."""
        k = id(e)
        r = self._memo.get(k)
        if r is None:
            if isinstance(e, Var):
                r = e in self.varying
            else:
                r = any([self.varies(c) for c in expr_children(e)])
            self._memo[k] = r
        return r

    def _cached(self, key, make):
        k = (id(self.b.block), key)
        hit = self._cache.get(k)
        if hit is None or hit[0] is not self.b.block:
            hit = self._cache[k] = (self.b.block, make())
        return hit[1]

    def splat(self, v):
        """v as a vector (a scalar is broadcast to every lane)."""
        if is_vector(v):
            return v
        if isinstance(v, ir.Constant):
            return const(vector(v.type, self.n), v.constant)

        def make():
            b = self.b
            ty = vector(v.type, self.n)
            one = b.insert_element(poison(ty), v, ir.Constant(I32, 0))
            return b.shuffle_vector(one, poison(ty), zeros(vector(I32, self.n)))
        return self._cached(("splat", id(v)), make)

    def unify(self, *vals):
        if any(is_vector(v) for v in vals):
            return [self.splat(v) for v in vals]
        return list(vals)

    def lane_values(self):
        """The loop variable as a vector: first, first + 1, ..."""
        def make():
            return self.b.add(self.splat(self.cg.env[self.var]),
                              lanes_const(I64, list(range(self.n))))
        return self._cached("lanes", make)

    def any_lane(self, mask):
        fn = self.cg.gen.declare(f"llvm.vector.reduce.or.{suffix(mask.type)}", I1, [mask.type])
        return self.b.call(fn, [mask])

    def _and_mask(self, cond):
        cond = self.splat(cond)
        return cond if self.mask is None else self.b.and_(self.mask, cond)

    def branch_value(self, cond, fn):
        """fn() where the scalar cond holds, zero elsewhere (a branch and a phi)."""
        b = self.b
        pre = b.block
        then_bb = b.append_basic_block("vec.then")
        end_bb = b.append_basic_block("vec.end")
        b.cbranch(cond, then_bb, end_bb)
        b.position_at_end(then_bb)
        v = fn()
        then_end = b.block
        b.branch(end_bb)
        b.position_at_end(end_bb)
        self.cg.dominator.setdefault(end_bb, pre)
        if v is None:
            return None
        phi = b.phi(v.type)
        phi.add_incoming(v, then_end)
        phi.add_incoming(zeros(v.type), pre)
        return phi

    def guarded(self, cond, fn, needs_branch=True):
        """fn() evaluated only where cond holds (memory it reads may be valid only there):
        a branch for a scalar condition, a narrower mask for a vector one (and a branch
        that skips the work when no lane is active). Lanes left out read zero."""
        if not is_vector(cond):
            return self.branch_value(cond, fn)
        saved = self.mask
        self.mask = self._and_mask(cond)
        try:
            if needs_branch:
                return self.branch_value(self.any_lane(self.mask), fn)
            return fn()
        finally:
            self.mask = saved

    # -- memory --------------------------------------------------------------------------
    def address(self, index):
        """("scalar", i) | ("contiguous", first lane's index) | ("gather", index vector)."""
        if not self.varies(index):
            return "scalar", self.cg.expr(index)
        k = ("stride", id(index))
        c = self._memo.get(k, self)
        if c is self:
            c = self._memo[k] = stride(index, self.var, self.varying)
        if c is None:
            return "gather", self.expr(index)
        first = self.cg.expr(index)          # cg.env[var] is the first lane
        if c == 1:
            return "contiguous", first
        return "gather", self.b.add(self.splat(first),
                                    lanes_const(I64, [c * k for k in range(self.n)]))

    def _pointers(self, buf, ty, idx):
        g = self.b.gep(self.cg.bufs[buf], [idx], source_etype=ty)
        g.type = vector(PTR, self.n)
        return g

    def _masked(self, name, ret, args):
        types = [a.type for a in args]
        fn = self.cg.gen.declare(name, ret, types)
        return self.b.call(fn, args)

    def load(self, e):
        kind, idx = self.address(e.index)
        if kind == "scalar":
            if not (e.check and any(self.varies(c[0]) for c in e.check)):
                return self.cg.load(e)
            # one element, but a check that differs by lane (a carried one, such as
            # power's negative exponent on a read of its base): every lane is checked
            return self.branch_value(self.checked(e), lambda: self.cg.load(
                Load(e.buffer, e.index, None)))
        if e.check:
            return self.branch_value(self.checked(e), lambda: self._load(e, kind, idx))
        return self._load(e, kind, idx)

    def checked(self, e):
        """The run-time checks of a read, every active lane at once: where a lane fails,
        the error is recorded (the check's number, and the value of the last lane that
        failed); the result is the scalar condition under which the read goes ahead (no
        lane failed: a failing block reads nothing). With one bad index the error names it
        as the scalar loop does; with several in one block (of two reads, or nested ones)
        it may name another of them than the scalar loop, whose last failure wins."""
        b, cg = self.b, self.cg
        ok = ir.Constant(I1, 1)
        for sub, extent, tensor, text in e.check:
            v = self.expr(sub)
            n = ir.Constant(I64, extent) if isinstance(extent, int) else cg.expr(extent)
            lo, hi = self.unify(v, ir.Constant(I64, 0), n)[1:]
            bad = b.not_(b.and_(b.icmp_signed(">=", v, lo), b.icmp_signed("<", v, hi)))
            if is_vector(bad):
                bad = bad if self.mask is None else b.and_(bad, self.mask)
                bits = b.bitcast(bad, ir.IntType(self.n))
                fails = b.icmp_unsigned("!=", bits, ir.Constant(bits.type, 0))
            else:
                fails = bad
            with b.if_then(fails, likely=False):
                b.store(ir.Constant(I64, cg.gen.check_id(tensor, text, extent)), cg.err_ptr(0))
                if is_vector(v):        # (the last failing lane: n - 1 - its leading zeros)
                    ctlz = cg.gen.declare(f"llvm.ctlz.i{self.n}", bits.type,
                                          [bits.type, I1])
                    lane = b.sub(ir.Constant(bits.type, self.n - 1),
                                 b.call(ctlz, [bits, ir.Constant(I1, 0)]))
                    v = b.extract_element(v, b.zext(lane, I32) if self.n < 32 else
                                          b.trunc(lane, I32) if self.n > 32 else lane)
                b.store(v, cg.err_ptr(1))
            ok = b.and_(ok, b.not_(fails))
        return ok

    def _load(self, e, kind, idx):
        b = self.b
        ty = mem_type(e.buffer.dtype)
        vty = vector(ty, self.n)
        align = ir.Constant(I32, _itemsize(e.buffer.dtype))
        zero = zeros(vty)
        if kind == "contiguous":
            ptr = b.gep(self.cg.bufs[e.buffer], [idx], inbounds=self.mask is None,
                        source_etype=ty)
            if self.mask is None:
                v = b.load(ptr, typ=vty, align=align.constant)
            else:
                v = self.masked_load(ptr, e.buffer.dtype, align)
        else:
            ptrs = self._pointers(e.buffer, ty, idx)
            mask = self.mask if self.mask is not None else const(vector(I1, self.n), 1)
            v = self._masked(f"llvm.masked.gather.{suffix(vty)}.{suffix(ptrs.type)}", vty,
                             [ptrs, align, mask, zero])
        if e.buffer.dtype == "bool":
            v = b.icmp_unsigned("!=", v, zeros(vty))
        return v

    def masked_load(self, ptr, dtype, align):
        """The n lanes at ptr where self.mask holds (zero elsewhere), as one masked load per
        SIMD register of the host (whatever width the blocks were sized for). LLVM 22's
        X86 backend miscompiles an AVX masked load that it splits into registers itself:
        a register's part whose mask folds to constant false (e.g. the lanes of a tail
        past a bound) is loaded unmasked, reading memory the mask excludes."""
        b = self.b
        ty = mem_type(dtype)
        width = min(self.n, host().lanes(_itemsize(dtype)))
        pty = vector(ty, width)
        parts = []
        for start in range(0, self.n, width):
            lanes = list(range(start, start + width))
            mask = self.mask if width == self.n else \
                b.shuffle_vector(self.mask, poison(self.mask.type), lanes_const(I32, lanes))
            at = ptr if start == 0 else b.gep(ptr, [ir.Constant(I64, start)],
                                              source_etype=ty)
            parts.append(self._masked(f"llvm.masked.load.{suffix(pty)}.p0", pty,
                                      [at, align, mask, zeros(pty)]))
        while len(parts) > 1:       # concatenate pairwise (widths are powers of two)
            w = parts[0].type.count
            both = lanes_const(I32, list(range(2 * w)))
            parts = [b.shuffle_vector(parts[k], parts[k + 1], both)
                     for k in range(0, len(parts), 2)]
        return parts[0]

    def store(self, s):
        cg, b = self.cg, self.b
        val = s.value
        if cg.is_accumulation(s):
            a, c = self.unify(self.expr(val.a), self.expr(val.b))
            v = cg.binop(val.op, a, c, val.dtype, cg.REASSOC)
        else:
            v = self.expr(val)
        v = self.splat(v)
        ty = mem_type(s.buffer.dtype)
        vty = vector(ty, self.n)
        if s.buffer.dtype == "bool":
            v = b.zext(v, vty)
        kind, idx = self.address(s.index)
        align = ir.Constant(I32, _itemsize(s.buffer.dtype))
        if kind == "contiguous":
            ptr = b.gep(cg.bufs[s.buffer], [idx], inbounds=self.mask is None,
                        source_etype=ty)
            if self.mask is None:
                b.store(v, ptr, align=align.constant)
            else:
                self._masked(f"llvm.masked.store.{suffix(vty)}.p0", ir.VoidType(),
                             [v, ptr, align, self.mask])
        else:       # "scalar" is refused by the plan
            ptrs = self._pointers(s.buffer, ty, idx)
            mask = self.mask if self.mask is not None else const(vector(I1, self.n), 1)
            self._masked(f"llvm.masked.scatter.{suffix(vty)}.{suffix(ptrs.type)}",
                         ir.VoidType(), [v, ptrs, align, mask])

    # -- expressions ---------------------------------------------------------------------
    def expr(self, e):
        """e for every lane: a vector, or a scalar when it is the same in every lane. As
        in FunctionCodegen.expr, a node met again in the same statement, in its block or
        one that block dominates, and under the same mask, is the value emitted the first
        time."""
        if not self.varies(e):
            return self.cg.expr(e)
        if isinstance(e, Var):
            return self.lane_values() if e is self.var else self.cg.env[e]
        key = NodeKey(e, self.cg.hashes)
        known = self.values.get(key)
        if known is not None and known[1] is self.mask and self.cg.available(known[0]):
            return known[2]
        start = self.b.block
        v = self.node(e)
        self.values[key] = (self.b.block, self.mask, v)
        self.cg.emitted_in(start)
        return v

    def node(self, e):
        cg = self.cg
        match e:
            case Load():
                return self.load(e)
            case Binary():
                if short_circuits(e):
                    return self.short_circuit(e)
                a, c = self.unify(self.expr(e.a), self.expr(e.b))
                return cg.binop(e.op, a, c, e.dtype)
            case Compare():
                a, c = self.unify(self.expr(e.a), self.expr(e.b))
                return cg.compare_values(e.op, a, c, e.a.dtype)
            case Unary():
                return cg.unary(e.op, self.expr(e.a), e.dtype)
            case Select():
                return self.select(e)
            case Cast():
                return cg.cast(self.expr(e.value), e.value.dtype, e.dtype)
            case Call():
                return cg.intrin_value(e.fn, self.expr(e.args[0]), e.args[0].dtype)
        return cg.expr(e)          # raises the codegen error for unknown nodes

    def _reads_uniform(self, e):
        return any(isinstance(n, Load) and not self.varies(n.index) for n in walk_expr(e))

    def short_circuit(self, e):
        b = self.b
        a = self.expr(e.a)
        cond = a if e.op == BinOp.AND else (b.not_(a))
        r = self.guarded(cond, lambda: self.expr(e.b), self._reads_uniform(e.b))
        a, r = self.unify(a, r)
        if e.op == BinOp.AND:
            return b.select(a, r, const(a.type, 0))
        return b.select(a, const(a.type, 1), r)

    def select(self, e):
        b = self.b
        cond = self.expr(e.cond)
        if arms_read_guarded(e):
            tv = self.guarded(cond, lambda: self.expr(e.t), self._reads_uniform(e.t))
            fv = self.guarded(b.not_(cond), lambda: self.expr(e.f), self._reads_uniform(e.f))
        else:
            tv, fv = self.expr(e.t), self.expr(e.f)
        if is_vector(cond):
            tv, fv = self.unify(tv, fv)
            return b.select(cond, self.splat(tv), self.splat(fv))
        tv, fv = self.unify(tv, fv)
        return b.select(cond, tv, fv)

    # -- statements ----------------------------------------------------------------------
    def stmt(self, s):
        cg, b = self.cg, self.b
        self.values.clear()         # (a statement may store what an expression read)
        cg.values.clear()
        match s:
            case Seq():
                for x in s.stmts:
                    self.stmt(x)
            case Store():
                self.store(s)
            case IfThen():
                cond = self.expr(s.cond)
                if not is_vector(cond):
                    if s.otherwise is None:
                        with b.if_then(cond):
                            self.stmt(s.then)
                    else:
                        with b.if_else(cond) as (then, other):
                            with then:
                                self.stmt(s.then)
                            with other:
                                self.stmt(s.otherwise)
                    return
                self.guarded(cond, lambda: self.stmt(s.then))
                if s.otherwise is not None:
                    self.guarded(b.not_(cond), lambda: self.stmt(s.otherwise))
            case LetStmt():
                saved = cg.env.get(s.var)
                cg.env[s.var] = self.expr(s.value)
                self.stmt(s.body)
                cg.restore(s.var, saved)
            case _:
                raise AssertionError(f"vector codegen: {type(s).__name__} (refused by plan)")
