"""Loop IR -> LLVM IR with llvmlite.ir.

One PrimFunc becomes one module with an external function
`void name(ptr buffers..., scalars..., [ptr err])`; `err` (two int64) is there when the
kernel can fail: a run-time index check (err[0] = its number from 1, err[1] = the index)
or a heap allocation (err[0] = minus its number from 1). Parallel loops are outlined into
`void body(ptr data)` functions run by libgomp's GOMP_parallel; each thread takes one
contiguous chunk. Float reductions carry `reassoc` so LLVM may vectorise them; user
arithmetic keeps IEEE semantics (no nnan/ninf anywhere).
"""
from __future__ import annotations

import contextlib
import functools
import gc
import json
import math
import os
import threading
from dataclasses import replace

from llvmlite import ir

from jitdl import dtypes
from jitdl.codegen import mathlib, vector
from jitdl.codegen.lltypes import (F64, I1, I8, I32, I64, PTR, VOID, alloca, comment, const,
                                   is_vector, like, loop_metadata, mem_type, reg_type, suffix)
from jitdl.errors import CompileError
from jitdl.target.cpu import (ARRAY_ALIGNED, ARRAY_DESCR_OFFSET, ARRAY_DIMS_OFFSET,
                              ARRAY_F_OK_FLAGS, ARRAY_FLAGS_OFFSET, ARRAY_NDIM_OFFSET,
                              ARRAY_OK_FLAGS, ARRAY_STRIDES_OFFSET, ARRAY_WRITEABLE,
                              FAST_ARRAY_TYPE, FAST_ERROR, FAST_FALLBACK, FAST_OK,
                              GATHER_BYTES, GATHER_TOTAL, HEAP_HOOKS, OBJECT_TYPE_OFFSET,
                              POOL_MIN_BYTES, TUPLE_ITEMS_OFFSET, TUPLE_SIZE_OFFSET)
from jitdl.ir import weak
from jitdl.ir.analysis import SIZE_LIMIT, arms_read_guarded, short_circuits
from jitdl.ir.nodes import (Allocate, BinOp, Binary, Buffer, Call, Cast, CmpOp, Compare, Const,
                            For, ForKind, IfThen, Intrin, LetStmt, Load, PrimFunc, Select, Seq,
                            SizeVar, Store, UnOp, Unary, Var, ThreadReduce)
from jitdl.ir.visit import NodeKey, map_stmt, walk_stmt, walk_unique, stmt_exprs

REASSOC = ("reassoc", "contract")
MAX_UNROLL = 64         # unrolled loops up to this extent are copies of the body
LONG_LOOP = 64          # serial loops at least this long are not unrolled after vectorising
CONTRACT = ("contract",)
GIL_FREE_ITERATIONS = 1 << 14   # kernels of at least this many iterations release the GIL

_ACCUMULATED = frozenset((BinOp.ADD, BinOp.MUL, BinOp.MIN, BinOp.MAX))


def _extreme_flags(flags):
    """Fast-math flags of llvm.minimum/maximum: `nsz` in an accumulation (REASSOC), a
    min or max reduction, whose result of -0.0 against 0.0 may be either (NumPy's too
    depends on their order). Without it LLVM orders the two zeros with a blend per
    vector on x86, beside NaN's: a float32 max along 1000-element rows took 2.1x the
    time of a sum, and argmax (whose second pass compares with ==) 1.9x NumPy's."""
    return ("nsz",) if "reassoc" in flags else ()


_FCMP = {CmpOp.LT: "<", CmpOp.LE: "<=", CmpOp.GT: ">", CmpOp.GE: ">=", CmpOp.EQ: "=="}
_ICMP = {CmpOp.LT: "<", CmpOp.LE: "<=", CmpOp.GT: ">", CmpOp.GE: ">=", CmpOp.EQ: "==",
         CmpOp.NE: "!="}
_LLVM_UNARY = {Intrin.SQRT: "llvm.sqrt", Intrin.FLOOR: "llvm.floor", Intrin.CEIL: "llvm.ceil",
               Intrin.ROUND: "llvm.roundeven", Intrin.TRUNC: "llvm.trunc",
               Intrin.ABS: "llvm.fabs"}



class _Env(dict):
    """Var -> ir.Value; binding a variable again forgets the values of expressions
    (FunctionCodegen.values), which may have read the old binding."""

    def __init__(self, values, env):
        super().__init__(env)
        self.values = values

    def __setitem__(self, var, value):
        self.values.clear()
        super().__setitem__(var, value)

    def pop(self, var, *default):
        self.values.clear()
        return super().pop(var, *default)

    def update(self, *args, **kwargs):
        self.values.clear()
        super().update(*args, **kwargs)


class _Builder(ir.IRBuilder):
    """An IRBuilder that records, where an if_then or if_else ends, that the block the
    branch left dominates the one where its paths meet (see FunctionCodegen.expr)."""

    def __init__(self, block, dominator):
        super().__init__(block)
        self.dominator = dominator

    @contextlib.contextmanager
    def if_then(self, pred, likely=None):
        at = self.block
        with super().if_then(pred, likely=likely) as bb:
            yield bb
        self.dominator.setdefault(self.block, at)

    @contextlib.contextmanager
    def if_else(self, pred, likely=None):
        at = self.block
        with super().if_else(pred, likely=likely) as arms:
            yield arms
        self.dominator.setdefault(self.block, at)


class FunctionCodegen:
    """Emits one LLVM function for a statement, with an environment of values.

    The routines that combine values (binop, compare_values, unary, cast, intrin_value)
    take scalars or vectors alike; jitdl.codegen.vector uses them for vector code."""

    REASSOC = REASSOC

    def __init__(self, gen, fn, env, bufs):
        self.gen, self.fn = gen, fn
        self.values = {}            # see expr: NodeKey -> (block, ir.Value)
        self.hashes = {}            # id -> (node, structural hash): see NodeKey
        self.dominator = {}         # block -> a block that dominates it: see expr
        self.env = _Env(self.values, env)       # Var -> ir.Value
        self.bufs = dict(bufs)      # Buffer -> ir.Value (pointer)
        self.sized = {}             # see hoisted: NodeKey -> ir.Value in the entry block
        self.size_only = {}         # id -> (node, whether it is a sum of sizes): hoisted
        # allocas live in their own entry block, so the main builder never shares a block
        self.entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        self.alloca_builder = ir.IRBuilder(self.entry)
        self.alloca_builder.position_before(self.alloca_builder.branch(start))
        self.b = _Builder(start, self.dominator)
        self.err = None

    # -- helpers --------------------------------------------------------------------------
    def intrinsic(self, name, ty, args, ret=None):
        return self.gen.declare(f"{name}.{suffix(ty)}", ret or ty, [a.type for a in args])

    def call(self, name, ty, *args, fastmath=()):
        return self.b.call(self.intrinsic(name, ty, args), list(args), fastmath=fastmath)

    def const(self, value, dtype):
        ty = reg_type(dtype)
        if dtype == "bool":
            return ir.Constant(I1, int(bool(value)))
        if dtypes.is_float(dtype):
            return ir.Constant(ty, float(value))
        return ir.Constant(ty, int(value) & ((1 << ty.width) - 1))

    # -- expressions ----------------------------------------------------------------------
    def expr(self, e):
        """The value of e. A node met again within one statement and with the same
        variables, in the basic block it was emitted in or one that block dominates, is
        the value emitted the first time: a subexpression used twice is one value, not a
        tree that doubles with every use (a guarded one, which the tensor level does not
        make a stage, took 30 s to compile as a tree)."""
        if isinstance(e, (Const, Var)):
            return self.leaf(e)
        key = NodeKey(e, self.hashes)
        known = self.values.get(key)
        if known is not None and self.available(known[0]):
            return known[1]
        if self.hoisted(e):
            return self.entry_value(e, key)
        start = self.b.block
        v = self.node(e)
        self.values[key] = (self.b.block, v)
        self.emitted_in(start)
        return v

    def hoisted(self, e):
        """Whether e is integer arithmetic (+ - * min max) of constants and the function's
        size arguments alone: computed once, in the entry block, for every statement.
        The offsets of a concatenate of symbolic sizes are sums of all sizes before each
        operand; emitted in each statement that reads them, the module grew with the
        square of the operand count (60 vectors: 16 s of code generation, 19 s of LLVM)."""
        return size_arithmetic(e, self._size_argument, self.size_only)

    def _size_argument(self, v):
        value = self.env.get(v)
        return isinstance(value, ir.Argument) and value.parent is self.fn

    def entry_value(self, e, key):
        """The value of hoisted expression e (see hoisted), emitted in the entry block the
        first time (where it dominates every use)."""
        v = self.sized.get(key)
        if v is None:
            b = self.b
            self.b = self.alloca_builder
            try:
                v = self.binop(e.op, self.expr(e.a), self.expr(e.b), e.dtype)
            finally:
                self.b = b
            self.sized[key] = v
        return v

    def emitted_in(self, start):
        """Record that the code of an expression began in block `start`: where it branched
        (an integer division's fast and slow paths, a guarded arm), the block it ended
        in is reached only through start, which so dominates it (the branches themselves
        record the block they left, nearer: _Builder, select, short_circuit). Values
        emitted before the branch then serve after it: reemitted there, `v` of `v =
        select(v % 2 == 0, v // 2, (3 * v + 1) % 64)` repeated tripled with each step
        (5 steps took 11 s to compile, 7 steps 77 s)."""
        if self.b.block is not start:
            self.dominator.setdefault(self.b.block, start)

    def available(self, block):
        """Whether a value emitted in `block` may be used where the builder is."""
        at = self.b.block
        while at is not None:
            if at is block:
                return True
            at = self.dominator.get(at)
        return False

    def leaf(self, e):
        if isinstance(e, Const):
            return self.const(e.value, e.dtype)
        try:
            return self.env[e]
        except KeyError:
            raise CompileError(f"codegen: unbound variable {e.name}") from None

    def node(self, e):
        match e:
            case Load():
                return self.load(e)
            case Binary():
                return self.binary(e)
            case Compare():
                return self.compare(e)
            case Unary():
                return self.unary(e.op, self.expr(e.a), e.dtype)
            case Select():
                return self.select(e)
            case Cast():
                return self.cast(self.expr(e.value), e.value.dtype, e.dtype)
            case Call():
                return self.intrin_value(e.fn, self.expr(e.args[0]), e.args[0].dtype)
        raise CompileError(f"codegen: cannot emit {type(e).__name__} {e!r} (the lowering "
                           "passes should have removed it)")

    def unary(self, op, a, dtype):
        b = self.b
        if op == UnOp.NEG:
            return b.fneg(a) if dtypes.is_float(dtype) else b.sub(const(a.type, 0), a)
        return b.xor(a, const(a.type, -1))

    def load(self, e):
        idx = self.expr(e.index)
        if e.check:
            idx = self.checked_index(e, idx)
        ptr = self.b.gep(self.bufs[e.buffer], [idx], inbounds=True,
                         source_etype=mem_type(e.buffer.dtype))
        v = self.b.load(ptr, typ=mem_type(e.buffer.dtype))
        if e.buffer.dtype == "bool":
            v = self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def checked_index(self, e, idx):
        """Run-time check of data-dependent indices: on failure record it, read index 0."""
        b = self.b
        ok = ir.Constant(I1, 1)
        for sub, extent, tensor, text in e.check:
            v = self.expr(sub)
            n = ir.Constant(I64, extent) if isinstance(extent, int) else self.expr(extent)
            inside = b.and_(b.icmp_signed(">=", v, ir.Constant(I64, 0)),
                            b.icmp_signed("<", v, n))
            with b.if_then(b.not_(inside), likely=False):
                code = self.gen.check_id(tensor, text, extent)
                b.store(ir.Constant(I64, code), self.err_ptr(0))
                b.store(v, self.err_ptr(1))
            ok = b.and_(ok, inside)
        return b.select(ok, idx, ir.Constant(I64, 0))

    def err_ptr(self, k):
        return self.b.gep(self.err, [ir.Constant(I64, k)], source_etype=I64)

    def binary(self, e):
        dt = e.dtype
        if short_circuits(e):
            return self.short_circuit(e)
        a, c = self.expr(e.a), self.expr(e.b)
        return self.binop(e.op, a, c, dt)

    def binop(self, op, a, c, dt, flags=CONTRACT):
        b = self.b
        if dtypes.is_float(dt):
            if self.gen.strict_fp:      # (no fused multiply-adds: NumPy's rounding, as CUDA's)
                flags = ()
            ty = a.type
            match op:
                case BinOp.ADD:
                    return b.fadd(a, c, flags=flags)
                case BinOp.SUB:
                    return b.fsub(a, c, flags=flags)
                case BinOp.MUL:
                    return b.fmul(a, c, flags=flags)
                case BinOp.DIV:
                    return b.fdiv(a, c)
                case BinOp.MIN:
                    return self.call("llvm.minimum", ty, a, c, fastmath=_extreme_flags(flags))
                case BinOp.MAX:
                    return self.call("llvm.maximum", ty, a, c, fastmath=_extreme_flags(flags))
                case BinOp.POW:
                    return self.gen.math.pow(b, a, c)
                case BinOp.FMOD:
                    return b.frem(a, c)
                case BinOp.MOD:
                    return self.gen.math.float_mod(b, a, c)
                case BinOp.FLOORDIV:
                    return self.gen.math.float_floordiv(b, a, c)
                case BinOp.ATAN2:
                    return self.gen.math.atan2(b, a, c)
            raise CompileError(f"codegen: {op} on {dt}")
        if op in _FOLDABLE and (isinstance(a, ir.Constant) or isinstance(c, ir.Constant)) \
                and not is_vector(a):
            folded = _fold(op, a, c)
            if folded is not None:
                return folded
        signed = dtypes.is_signed(dt)
        match op:
            case BinOp.ADD:
                return b.add(a, c)
            case BinOp.SUB:
                return b.sub(a, c)
            case BinOp.MUL:
                return b.mul(a, c)
            case BinOp.AND:
                return b.and_(a, c)
            case BinOp.OR:
                return b.or_(a, c)
            case BinOp.XOR:
                return b.xor(a, c)
            case BinOp.SHL | BinOp.SHR:
                # NumPy's shifts by the width or more (or by a negative count, as an
                # unsigned one): 0, or -1 for a negative value shifted right (LLVM: poison)
                width = (a.type.element if is_vector(a) else a.type).width
                inside = b.icmp_unsigned("<", c, const(c.type, width))
                if op == BinOp.SHL:
                    return b.select(inside, b.shl(a, c), const(a.type, 0))
                if signed:
                    return b.select(inside, b.ashr(a, c), b.ashr(a, const(a.type, width - 1)))
                return b.select(inside, b.lshr(a, c), const(a.type, 0))
            case BinOp.MIN | BinOp.MAX:
                name = ("llvm.smin" if signed else "llvm.umin") if op == BinOp.MIN else \
                    ("llvm.smax" if signed else "llvm.umax")
                return self.call(name, a.type, a, c)
            case BinOp.FLOORDIV | BinOp.MOD:
                return self.gen.math.int_divmod(b, op == BinOp.FLOORDIV, a, c, signed)
            case BinOp.POW:
                return b.call(self.gen.math.ipow(a.type, signed), [a, c])
        raise CompileError(f"codegen: {op} on {dt}")

    def short_circuit(self, e):
        b = self.b
        a = self.expr(e.a)
        start = b.block
        rhs_bb = b.append_basic_block("sc.rhs")
        end_bb = b.append_basic_block("sc.end")
        if e.op == BinOp.AND:
            b.cbranch(a, rhs_bb, end_bb)
        else:
            b.cbranch(a, end_bb, rhs_bb)
        b.position_at_end(rhs_bb)
        c = self.expr(e.b)
        rhs_end = b.block
        b.branch(end_bb)
        b.position_at_end(end_bb)
        self.dominator.setdefault(end_bb, start)
        phi = b.phi(I1)
        phi.add_incoming(a, start)
        phi.add_incoming(c, rhs_end)
        return phi

    def compare(self, e):
        return self.compare_values(e.op, self.expr(e.a), self.expr(e.b), e.a.dtype)

    def compare_values(self, op, a, c, dt):
        b = self.b
        if dtypes.is_float(dt):
            if op == CmpOp.NE:
                return b.fcmp_unordered("!=", a, c)
            return b.fcmp_ordered(_FCMP[op], a, c)
        if dt == "bool" or not dtypes.is_signed(dt):
            return b.icmp_unsigned(_ICMP[op], a, c)
        return b.icmp_signed(_ICMP[op], a, c)

    def select(self, e):
        b = self.b
        cond = self.expr(e.cond)
        if not arms_read_guarded(e):
            return b.select(cond, self.expr(e.t), self.expr(e.f))
        # an arm reads memory that may be valid only under its condition: branch
        t_bb = b.append_basic_block("sel.t")
        f_bb = b.append_basic_block("sel.f")
        end = b.append_basic_block("sel.end")
        self.dominator.setdefault(end, b.block)
        b.cbranch(cond, t_bb, f_bb)
        b.position_at_end(t_bb)
        tv = self.expr(e.t)
        t_end = b.block
        b.branch(end)
        b.position_at_end(f_bb)
        fv = self.expr(e.f)
        f_end = b.block
        b.branch(end)
        b.position_at_end(end)
        phi = b.phi(tv.type)
        phi.add_incoming(tv, t_end)
        phi.add_incoming(fv, f_end)
        return phi

    def cast(self, v, src, dst):
        b = self.b
        if src == dst:
            return v
        st, dt_ = v.type, like(reg_type(dst), v)
        if dst == "bool":
            if dtypes.is_float(src):
                return b.fcmp_unordered("!=", v, const(st, 0.0))
            return b.icmp_unsigned("!=", v, const(st, 0))
        if dtypes.is_float(src) and dtypes.is_float(dst):
            return b.fpext(v, dt_) if dst == "float64" else b.fptrunc(v, dt_)
        if dtypes.is_float(dst):
            return b.sitofp(v, dt_) if dtypes.is_signed(src) else b.uitofp(v, dt_)
        if dtypes.is_float(src):
            name = "llvm.fptosi.sat" if dtypes.is_signed(dst) else "llvm.fptoui.sat"
            fn = self.gen.declare(f"{name}.{suffix(dt_)}.{suffix(st)}", dt_, [st])
            return b.call(fn, [v])
        sw, dw = reg_type(src).width, reg_type(dst).width
        if sw == dw:
            return v
        if sw > dw:
            return b.trunc(v, dt_)
        return b.sext(v, dt_) if dtypes.is_signed(src) else b.zext(v, dt_)

    def intrin_value(self, fn, x, src):
        """Intrinsic fn of x (a scalar or a vector) of dtype src."""
        b = self.b
        ty = x.type
        if not dtypes.is_float(src):
            if fn in (Intrin.FLOOR, Intrin.CEIL, Intrin.ROUND, Intrin.TRUNC):
                return x
            if fn == Intrin.ABS:
                return self.call("llvm.abs", ty, x, ir.Constant(I1, 0)) \
                    if dtypes.is_signed(src) else x
            if fn == Intrin.SIGN:
                zero = const(ty, 0)
                pos = b.zext(b.icmp_signed(">", x, zero) if dtypes.is_signed(src)
                             else b.icmp_unsigned(">", x, zero), ty)
                neg = b.zext(b.icmp_signed("<", x, zero), ty) if dtypes.is_signed(src) \
                    else zero
                return b.sub(pos, neg)
            if fn in (Intrin.ISNAN, Intrin.ISINF):
                return const(like(I1, x), 0)
            if fn == Intrin.ISFINITE:
                return const(like(I1, x), 1)
            if fn == Intrin.SIGNBIT:
                return b.icmp_signed("<", x, const(ty, 0)) if dtypes.is_signed(src) \
                    else const(like(I1, x), 0)
            raise CompileError(f"codegen: {fn.value} of {src}")
        if fn in _LLVM_UNARY:
            return self.call(_LLVM_UNARY[fn], ty, x)
        if fn in mathlib.INLINE:
            return getattr(self.gen.math, mathlib.INLINE[fn])(b, x)
        if fn == Intrin.RSQRT:
            return b.fdiv(const(ty, 1.0), self.call("llvm.sqrt", ty, x))
        if fn == Intrin.SIGMOID:
            one = const(ty, 1.0)
            return b.fdiv(one, b.fadd(one, self.gen.math.exp(b, b.fneg(x))))
        if fn == Intrin.SIGN:
            zero, one = const(ty, 0.0), const(ty, 1.0)
            neg = b.select(b.fcmp_ordered("<", x, zero), b.fneg(one), x)
            return b.select(b.fcmp_ordered(">", x, zero), one, neg)
        if fn == Intrin.ISNAN:
            return b.fcmp_unordered("uno", x, x)
        if fn == Intrin.SIGNBIT:        # the bit itself: NaN keeps its sign too
            return self.gen.math.sign_bit(b, x)
        if fn in (Intrin.ISINF, Intrin.ISFINITE):
            ax = self.call("llvm.fabs", ty, x)
            inf = const(ty, math.inf)
            return b.fcmp_ordered("==", ax, inf) if fn == Intrin.ISINF \
                else b.fcmp_ordered("<", ax, inf)
        raise CompileError(f"codegen: intrinsic {fn.value}")

    # -- statements -----------------------------------------------------------------------
    def stmt(self, s):
        b = self.b
        self.values.clear()         # (a statement may store what an expression read)
        match s:
            case Seq():
                for x in s.stmts:
                    self.stmt(x)
            case Store():
                self.store(s)
            case For():
                if s.kind == ForKind.PARALLEL and self.gen.parallel_ok:
                    self.parallel_for(s)
                elif s.kind == ForKind.VECTORIZED:
                    self.vectorized_for(s)
                elif s.kind == ForKind.UNROLLED and isinstance(s.extent, Const) \
                        and s.extent.value <= MAX_UNROLL:
                    self.unrolled_for(s)
                elif s.kind == ForKind.UNROLLED:
                    self.note(s, f"unrolled {s.var.name}: a loop, because its extent "
                                 f"{s.extent} is not a constant of at most {MAX_UNROLL}")
                    self.serial_for(s)
                else:
                    self.serial_for(s)
            case IfThen() if _serial_when_small(s):
                # `if work >= grain: parallel L else: L serially`: one outlined body for
                # both (the serial branch calls it on the whole range), not two copies
                if self.gen.parallel_ok:
                    self.parallel_for(s.then, serial_unless=self.expr(s.cond))
                else:
                    self.stmt(s.otherwise)
            case IfThen():
                cond = self.expr(s.cond)
                if s.otherwise is None:
                    with b.if_then(cond):
                        self.stmt(s.then)
                else:
                    with b.if_else(cond) as (then, other):
                        with then:
                            self.stmt(s.then)
                        with other:
                            self.stmt(s.otherwise)
            case Allocate():
                self.allocate(s)
            case LetStmt():
                saved = self.env.get(s.var)
                self.env[s.var] = self.expr(s.value)
                self.stmt(s.body)
                self.restore(s.var, saved)
            case ThreadReduce():      # its loop ran serially: nothing to combine
                pass
            case _:
                raise CompileError(f"codegen: cannot emit statement {type(s).__name__}")

    def vectorized_for(self, s):
        """Vector code when the body allows it (see jitdl.codegen.vector), else a scalar
        loop that asks LLVM's loop vectoriser to vectorise it; a comment in the IR says
        which and why."""
        p = self.gen.plan(s)
        what = f"vectorized {s.var.name}"
        if isinstance(p, vector.Plan):
            self.note(s, f"{what}: vector code, {p.describe()}")
            vector.emit(self, s, p)
        elif any(isinstance(st, For) for st in walk_stmt(s.body)):
            # LLVM does not vectorise outer loops: asking it to only prints a warning
            self.note(s, f"{what}: scalar loop (it has inner loops), because {p}")
            self.serial_for(s)
        elif vector.refused(s):
            self.note(s, f"{what}: scalar loop, because {p}")
            self.serial_for(s)
        else:
            self.note(s, f"{what}: scalar loop marked llvm.loop.vectorize.enable, "
                         f"because {p}")
            self.serial_for(s, hints=(("llvm.loop.vectorize.enable", True),))

    def unrolled_for(self, s):
        """An unrolled loop whose accesses all walk memory with stride 1 (the innermost
        loop of a register tile) is one vector body; others are copies of the body."""
        p = self.gen.plan(s, unrolled=True)
        if isinstance(p, vector.Plan):
            self.note(s, f"unrolled {s.var.name}: vector code, {p.describe()}")
            vector.emit(self, s, p)
            return
        self.note(s, f"unrolled {s.var.name}: {s.extent.value} copies of the body, because {p}")
        base = self.expr(s.min)
        saved = self.env.get(s.var)
        for k in range(s.extent.value):
            self.env[s.var] = self.binop(BinOp.ADD, base, ir.Constant(I64, k), "int64")
            self.stmt(s.body)
        self.restore(s.var, saved)

    def note(self, loop, text):
        """A comment in the IR and an entry of the module's notes, once per loop (an
        unrolled enclosing loop emits it several times)."""
        if id(loop) not in self.gen.noted:
            self.gen.noted.add(id(loop))
            self.gen.notes.append(text)
            comment(self.b, f"jitdl: {text}")

    def is_accumulation(self, s):
        """`B[i] = B[i] + x` (or *, min, max) in floating point: reassociation lets LLVM
        vectorise the reduction (unless strict_fp); a min or max may then give either
        zero of a -0.0 and 0.0 that tie (_extreme_flags)."""
        val = s.value
        return (isinstance(val, Binary) and isinstance(val.a, Load) and val.a.buffer is s.buffer
                and val.op in _ACCUMULATED and dtypes.is_float(val.dtype)
                and not self.gen.strict_fp and val.a.index == s.index)

    def store(self, s):
        b = self.b
        val = s.value
        if self.is_accumulation(s):
            v = self.binop(val.op, self.expr(val.a), self.expr(val.b), val.dtype, REASSOC)
        else:
            v = self.expr(val)
        if s.buffer.dtype == "bool":
            v = b.zext(v, I8)
        idx = self.expr(s.index)
        ptr = b.gep(self.bufs[s.buffer], [idx], inbounds=True,
                    source_etype=mem_type(s.buffer.dtype))
        b.store(v, ptr)

    def serial_for(self, s, hints=()):
        if isinstance(s.extent, Const) and s.extent.value >= LONG_LOOP:
            # once LLVM has vectorised (and interleaved) a long loop, unrolling it fully
            # as well only costs compile time (softmax: -40% of LLVM's time, same speed);
            # unroll.disable on the loop itself would also stop the interleaving
            hints = hints + (("llvm.loop.vectorize.followup_all", "llvm.loop.unroll.disable"),)
        lo = self.expr(s.min)
        hi = self.binop(BinOp.ADD, lo, self.expr(s.extent), "int64")
        self.loop(s.var, lo, hi, lambda: self.stmt(s.body), hints=hints)

    def loop(self, var, lo, hi, emit_body, step=1, hints=()):
        """for var in range(lo, hi, step): emit_body(); hints go to its !llvm.loop."""
        b = self.b
        pre = b.block
        head = b.append_basic_block(f"{var.name}.head")
        body = b.append_basic_block(f"{var.name}.body")
        end = b.append_basic_block(f"{var.name}.end")
        b.branch(head)
        b.position_at_end(head)
        phi = b.phi(I64, name=var.name)
        phi.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", phi, hi), body, end)
        b.position_at_end(body)
        saved = self.env.get(var)
        self.env[var] = phi
        emit_body()
        nxt = b.add(phi, ir.Constant(I64, step), flags=("nsw",))
        phi.add_incoming(nxt, b.block)
        latch = b.branch(head)
        if hints:
            latch.set_metadata("llvm.loop", loop_metadata(self.gen.module, *hints))
        b.position_at_end(end)
        self.restore(var, saved)

    def restore(self, var, saved):
        """A loop variable is not visible after its loop."""
        if saved is None:
            self.env.pop(var, None)
        else:
            self.env[var] = saved

    def allocate(self, s):
        buf = s.buffer
        ty = mem_type(buf.dtype)
        if not on_heap(buf):
            # an array type, not a count: SROA promotes only single-object allocas
            ptr = alloca(self.alloca_builder, ir.ArrayType(ty, max(buf.size, 1)),
                          name=buf.name)
            self.bufs[buf] = ptr
            self.stmt(s.body)
            return
        if isinstance(buf.size, int):
            # a constant size that does not fit a size_t fails like a refused
            # allocation, rather than wrapping to a small one
            nbytes = -(-max(buf.size, 1) * dtypes.itemsize(buf.dtype) // 64) * 64
            code = ir.Constant(I64, -self.gen.alloc_id(buf, nbytes))
            if nbytes > MAX_ALLOC_BYTES:
                self.b.store(code, self.err_ptr(0))
                return
            size, over = ir.Constant(I64, nbytes), None
        else:       # symbolic: the bytes, rounded up to 64, computed at the call
            code = ir.Constant(I64, -self.gen.alloc_id(buf, 0))
            count = self.expr(buf.size)
            n = self.b.select(self.b.icmp_signed("<", count, ir.Constant(I64, 1)),
                              ir.Constant(I64, 1), count)
            n = self.b.mul(n, ir.Constant(I64, dtypes.itemsize(buf.dtype)))
            size = self.b.and_(self.b.add(n, ir.Constant(I64, 63)), ir.Constant(I64, -64))
            # a product of sizes that wraps in int64 (three arrays of 2^22 elements: 2^66
            # to 0) or reaches SIZE_LIMIT fails like a refused allocation: the bounds
            # prover takes a buffer's extent to be below it (i * n1 + j < n0 * n1), and a
            # wrapped, small buffer would be read and written past its end
            over = self.b.or_(self._size_overflows(buf.size), self.b.icmp_signed(
                ">=", count, ir.Constant(I64, SIZE_LIMIT)))
            size = self.b.select(over, ir.Constant(I64, 64), size)
        ptr, how = self.heap_alloc(size, buf.name)
        # on NULL the body (every use of the buffer) is skipped and the failure recorded;
        # buffers allocated around it are freed as usual when their bodies end
        failed = self.b.icmp_unsigned("==", ptr, ir.Constant(PTR, None))
        if over is not None:
            failed = self.b.or_(failed, over)
        with self.b.if_else(failed, likely=False) as (then, otherwise):
            with then:
                self.b.store(code, self.err_ptr(0))
                if over is not None:
                    with self.b.if_then(self.b.icmp_unsigned(
                            "!=", ptr, ir.Constant(PTR, None))):
                        self.heap_free(ptr, how)
            with otherwise:
                self.bufs[buf] = ptr
                self.stmt(s.body)
                self.heap_free(ptr, how)

    def _size_overflows(self, e):
        """An i1: whether a sum, difference or product inside the int64 size expression e
        wraps at the call (each such node computed again with LLVM's overflow intrinsics;
        e's value itself is what self.expr gives)."""
        out = ir.Constant(I1, 0)
        for x in walk_unique(e):
            if isinstance(x, Binary) and x.dtype == "int64" and \
                    x.op in (BinOp.ADD, BinOp.SUB, BinOp.MUL):
                name = {BinOp.ADD: "sadd", BinOp.SUB: "ssub", BinOp.MUL: "smul"}[x.op]
                args = [self.expr(x.a), self.expr(x.b)]
                r = self.b.call(self.intrinsic(f"llvm.{name}.with.overflow", I64, args,
                                               ret=ir.LiteralStructType([I64, I1])), args)
                out = self.b.or_(out, self.b.extract_value(r, 1))
        return out

    def heap_alloc(self, size, name):
        """64-byte aligned memory from the module's allocation hook (HEAP_HOOKS) where the
        runtime set both hooks, else from aligned_alloc; null when refused. Returns the
        pointer and what heap_free needs: the hooks are read once here, so that a block
        is freed the way it was allocated even if the runtime sets them meanwhile."""
        b = self.b
        slots = self.gen.heap_hooks()
        hook = b.load(slots[0], typ=ir.FunctionType(PTR, [I64]).as_pointer())
        release = b.load(slots[1], typ=ir.FunctionType(VOID, [PTR]).as_pointer())
        hooked = b.and_(b.icmp_unsigned("!=", hook, ir.Constant(hook.type, None)),
                        b.icmp_unsigned("!=", release, ir.Constant(release.type, None)))
        ptr = b.call(self.gen.fresh_alloc(), [hooked, hook, size], name=name)
        return ptr, (hooked, release)

    def heap_free(self, ptr, how):
        b = self.b
        hooked, release = how
        with b.if_else(hooked) as (then, otherwise):
            with then:
                b.call(release, [ptr])
            with otherwise:
                b.call(self.gen.declare("free", VOID, [PTR]), [ptr])

    def parallel_for(self, s, serial_unless=None):
        """Outline the loop body and run it on the OpenMP team with GOMP_parallel; where
        the i1 `serial_unless` is false, on the calling thread instead."""
        b = self.b
        free = _free_vars(s)
        captured_vars = [v for v in self.env if v in free]
        used = _buffers_used(s)
        captured_bufs = [buf for buf in self.bufs if buf in used]
        slots = [self.env[v] for v in captured_vars] + [self.bufs[x] for x in captured_bufs]
        has_err = self.err is not None
        if has_err:
            slots.append(self.err)
        lo, ext = self.expr(s.min), self.expr(s.extent)
        slots += [lo, ext]
        struct_ty = ir.LiteralStructType([v.type for v in slots])
        data = alloca(self.alloca_builder, struct_ty, name="par.data")
        for k, v in enumerate(slots):
            b.store(v, b.gep(data, [ir.Constant(I32, 0), ir.Constant(I32, k)],
                             source_etype=struct_ty))
        pid = self.gen.next_id()
        outlined = self.gen.new_function(f"{self.fn.name}.par{pid}", VOID, [PTR],
                                         internal=True)
        # the chunk runs in its own function whose buffer arguments are noalias, as in
        # the kernel itself (pointers loaded from the struct would lose that fact)
        n_vars, n_bufs = len(captured_vars), len(captured_bufs)
        impl_types = [v.type for v in slots[:-2]] + [I64, I64]
        impl = self.gen.new_function(f"{self.fn.name}.par{pid}.chunk", VOID, impl_types,
                                     internal=True)
        for k, arg in enumerate(impl.args):
            if n_vars <= k < n_vars + n_bufs:
                arg.add_attribute("noalias")
        sub = FunctionCodegen(self.gen, impl, {}, {})
        sub.env.update(zip(captured_vars, impl.args[:n_vars]))
        sub.bufs.update(zip(captured_bufs, impl.args[n_vars:n_vars + n_bufs]))
        if has_err:
            sub.err = impl.args[n_vars + n_bufs]
        sub.loop(s.var, impl.args[-2], impl.args[-1], lambda: sub.stmt(s.body))
        sub.b.ret_void()

        ob = ir.IRBuilder(outlined.append_basic_block("entry"))
        vals = []
        for k, v in enumerate(slots):
            p = ob.gep(outlined.args[0], [ir.Constant(I32, 0), ir.Constant(I32, k)],
                       source_etype=struct_ty)
            vals.append(ob.load(p, typ=v.type))
        lo_v, ext_v = vals[-2], vals[-1]
        # dynamic chunks (about 8 per thread): a thread slowed by another process on
        # its core leaves its remaining chunks to the others
        nth = ob.sext(ob.call(self.gen.declare("omp_get_num_threads", I32, []), []), I64)
        chunk = ob.sdiv(ext_v, ob.mul(nth, ir.Constant(I64, 8)))
        chunk = ob.select(ob.icmp_signed("<", chunk, ir.Constant(I64, 1)),
                          ir.Constant(I64, 1), chunk)
        bounds_ty = ir.ArrayType(I64, 2)
        span = alloca(ir.IRBuilder(outlined.entry_basic_block), bounds_ty, name="span")
        ob.position_at_end(ob.block)
        first = ob.gep(span, [ir.Constant(I64, 0)], source_etype=I64)
        last = ob.gep(span, [ir.Constant(I64, 1)], source_etype=I64)
        start_fn = self.gen.declare("GOMP_loop_dynamic_start", I8,
                                    [I64, I64, I64, I64, PTR, PTR])
        next_fn = self.gen.declare("GOMP_loop_dynamic_next", I8, [PTR, PTR])
        end_fn = self.gen.declare("GOMP_loop_end_nowait", VOID, [])
        more = ob.call(start_fn, [lo_v, ob.add(lo_v, ext_v), ir.Constant(I64, 1), chunk,
                                  first, last])
        head = outlined.append_basic_block("chunks")
        work = outlined.append_basic_block("chunk")
        done = outlined.append_basic_block("done")
        pre = ob.block
        ob.branch(head)
        ob.position_at_end(head)
        flag = ob.phi(I8)
        flag.add_incoming(more, pre)
        ob.cbranch(ob.icmp_unsigned("!=", flag, ir.Constant(I8, 0)), work, done)
        ob.position_at_end(work)
        ob.call(impl, vals[:-2] + [ob.load(first, typ=I64), ob.load(last, typ=I64)])
        again = ob.call(next_fn, [first, last])
        flag.add_incoming(again, ob.block)
        ob.branch(head)
        ob.position_at_end(done)
        ob.call(end_fn, [])
        ob.ret_void()
        gomp = self.gen.declare("GOMP_parallel", VOID, [PTR, PTR, I32, I32])
        outlined.type = PTR     # pass it as an opaque pointer
        if serial_unless is None:
            b.call(gomp, [outlined, data, ir.Constant(I32, 0), ir.Constant(I32, 0)])
            return
        # called from both paths: one copy of the loop, not one inlined into each (LLVM
        # would optimise and compile the same loop nest twice; a call per chunk costs
        # nothing next to the chunk's iterations)
        impl.attributes.add("noinline")
        with b.if_else(serial_unless) as (team, alone):
            with team:
                b.call(gomp, [outlined, data, ir.Constant(I32, 0), ir.Constant(I32, 0)])
            with alone:
                b.call(impl, slots[:-2] + [lo, b.add(lo, ext)])


def _serial_when_small(s):
    """s is partition_loops' `if work >= grain: parallel loop, else the loop serially`."""
    t, o = s.then, s.otherwise
    return isinstance(t, For) and isinstance(o, For) and t.kind == ForKind.PARALLEL \
        and o.kind == ForKind.SERIAL and o == replace(t, kind=ForKind.SERIAL)


_FOLDABLE = (BinOp.ADD, BinOp.SUB, BinOp.MUL)
_HOISTED = (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MIN, BinOp.MAX)


def size_arithmetic(e, is_size, memo):
    """Whether e is int64 + - * min max of integer constants and size variables that
    is_size(var) takes (the function's size arguments); memo: id -> (node, answer)."""
    hit = memo.get(id(e))
    if hit is not None and hit[0] is e:
        return hit[1]
    if isinstance(e, Const):
        ok = dtypes.is_int(e.dtype)
    elif isinstance(e, Var):
        ok = isinstance(e, SizeVar) and is_size(e)
    else:
        ok = isinstance(e, Binary) and e.op in _HOISTED and e.dtype == "int64" and \
            size_arithmetic(e.a, is_size, memo) and size_arithmetic(e.b, is_size, memo)
    memo[id(e)] = (e, ok)
    return ok
STACK_BYTES = 4096          # intermediates up to this size live on the stack
MAX_ALLOC_BYTES = (1 << 63) - 1


def on_heap(buf):
    """Whether an allocated buffer is taken from the heap (aligned_alloc), which can fail."""
    return buf.scope != "local" and (not isinstance(buf.size, int)
                                     or buf.size * dtypes.itemsize(buf.dtype) > STACK_BYTES)


def _heap_allocates(s):
    return any(isinstance(st, Allocate) and on_heap(st.buffer) for st in walk_stmt(s))


def _fold(op, a, c):
    """Integer a op c when it is known without an instruction (index arithmetic of
    unrolled and constant-bounded loops), else None."""
    ka = a.constant if isinstance(a, ir.Constant) else None
    kc = c.constant if isinstance(c, ir.Constant) else None
    if ka is not None and kc is not None:
        bits = a.type.width
        r = (ka + kc if op == BinOp.ADD else ka - kc if op == BinOp.SUB else ka * kc)
        r &= (1 << bits) - 1
        if r >= 1 << (bits - 1) and bits > 1:
            r -= 1 << bits
        return ir.Constant(a.type, r)
    if op == BinOp.ADD:
        return c if ka == 0 else a if kc == 0 else None
    if op == BinOp.SUB:
        return a if kc == 0 else None
    return c if ka == 1 else a if kc == 1 else None


def _free_vars(s):
    """Variables a statement reads that it does not bind itself."""
    free = set()

    def rec(st, bound):
        for e in stmt_exprs(st):
            for n in walk_unique(e):
                if isinstance(n, Var) and n not in bound:
                    free.add(n)
                elif isinstance(n, Load) and n.check:     # a checked index's extent
                    free.update(v for c in n.check if not isinstance(c[1], int)
                                for v in walk_unique(c[1]) if isinstance(v, Var))
        match st:
            case For() | LetStmt():
                rec(st.body, bound | {st.var})
            case Allocate():
                rec(st.body, bound)
            case Seq():
                for x in st.stmts:
                    rec(x, bound)
            case IfThen():
                rec(st.then, bound)
                if st.otherwise is not None:
                    rec(st.otherwise, bound)
    rec(s, frozenset())
    return free


def _buffers_used(s):
    """The buffers a statement reads or writes."""
    used = set()
    for st in walk_stmt(s):
        if isinstance(st, Store):
            used.add(st.buffer)
        for e in stmt_exprs(st):
            used.update(n.buffer for n in walk_unique(e) if isinstance(n, Load))
    return used


class ModuleCodegen:
    def __init__(self, name, parallel_ok, strict_fp=False, vector_bytes=16):
        self.module = ir.Module(name=name)
        self.parallel_ok = parallel_ok
        self.strict_fp = strict_fp
        self.vector_bytes = vector_bytes
        self.notes = []             # how vectorized and unrolled loops were compiled
        self.noted = set()          # id() of the loops in notes
        self._plans = {}
        self._ids = 0
        self.checks = []
        self.allocs = []            # (buffer name, dtype, shape, bytes) of heap allocations
        self.math = mathlib.MathLib(self)

    def next_id(self):
        self._ids += 1
        return self._ids

    def heap_hooks(self):
        """The module's two allocation hooks (HEAP_HOOKS), made on first use."""
        names = [f"{self.module.name}{suffix}" for suffix in HEAP_HOOKS]
        hooks = [self.module.globals.get(n) for n in names]
        if hooks[0] is None:
            hooks = []
            for n in names:
                g = ir.GlobalVariable(self.module, PTR, name=n)
                g.initializer = ir.Constant(PTR, None)
                hooks.append(g)
        return hooks

    def fresh_alloc(self):
        """The module's `noalias ptr alloc(i1 hooked, ptr hook, i64 size)`: the hook's
        block where `hooked`, else aligned_alloc's. Its result is marked noalias (and the
        function kept out of line, where inlining would drop that), so LLVM knows a heap
        buffer is no argument's memory: an in-place register tile accumulating into one
        stays in registers (without it, each multiply-add loaded and stored its element:
        Q @ K^T then scaled, single-threaded, took 2.5x the time)."""
        name = f"{self.module.name}.alloc"
        fn = self.module.globals.get(name)
        if fn is not None:
            return fn
        hook_ty = ir.FunctionType(PTR, [I64]).as_pointer()
        fn = self.new_function(name, PTR, [ir.IntType(1), hook_ty, I64], internal=True)
        fn.return_value.add_attribute("noalias")
        fn.attributes.add("noinline")
        hooked, hook, size = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        with b.if_else(hooked) as (then, otherwise):
            with then:
                b.ret(b.call(hook, [size]))
            with otherwise:
                alloc = self.declare("aligned_alloc", PTR, [I64, I64])
                b.ret(b.call(alloc, [ir.Constant(I64, 64), size]))
        b.unreachable()
        return fn

    def declare(self, name, ret, args):
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        return fn

    def declare_libm(self, name, ret, args):
        """The C library's math function `name`, declared pure: errno is never read, so
        one expression's repeated calls merge into one."""
        fn = self.declare(name, ret, args)
        fn.attributes.add("readnone")
        fn.attributes.add("nounwind")
        return fn

    def new_function(self, name, ret, args, internal=False):
        fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
        if internal:
            fn.linkage = "internal"
        # register tiles spill vectors to the stack; a frame aligned to the vector width
        # keeps each spill slot inside one cache line (without it, run time varied by
        # up to 40% between processes with the caller's stack alignment)
        fn.attributes.add("nounwind")
        fn.attributes.alignstack = self.vector_bytes
        return fn

    def plan(self, loop, unrolled=False):
        """vector.plan of a loop, once per loop (an unrolled outer loop repeats it)."""
        key = (id(loop), unrolled)
        p = self._plans.get(key)
        if p is None:
            p = self._plans[key] = vector.plan(loop, self.vector_bytes, unrolled)
        return p

    def memo(self, loop):
        """A dict kept for one loop for the whole module (vector codegen's analyses)."""
        return self._plans.setdefault(("memo", id(loop)), {})

    def check_id(self, tensor, text, extent):
        self.checks.append((tensor, text, extent))
        return len(self.checks)

    def alloc_id(self, buf, nbytes):
        """The number (from 1) by which the kernel reports a failed heap allocation of
        buf: the error slot gets its negative."""
        entry = (buf.name, buf.dtype, list(buf.shape), nbytes)
        if entry not in self.allocs:         # an unrolled loop emits its body repeatedly
            self.allocs.append(entry)
        return self.allocs.index(entry) + 1


def host_vector_bytes():
    """The widest SIMD register of the host CPU in bytes: 64 with AVX-512, 32 with AVX,
    else 16 (SSE, NEON)."""
    global _HOST_VECTOR_BYTES
    if _HOST_VECTOR_BYTES is None:
        import llvmlite.binding as llvm
        feats = llvm.get_host_cpu_features()
        _HOST_VECTOR_BYTES = 64 if feats.get("avx512f") else \
            32 if feats.get("avx2") or feats.get("avx") else 16
    return _HOST_VECTOR_BYTES


_HOST_VECTOR_BYTES = None


def generate(func: PrimFunc, parallel_ok=True, strict_fp=False, with_err=False,
             array_data_offset=None, n_inputs=0, vector_bytes=None, layout=None,
             shapes=None, alias=(), int_bounds=None, any_order=False):
    """The LLVM module (as llvmlite.ir) of one lowered function, and its run-time checks.
    vector_bytes: the SIMD width that vectorized loops are sized for (default: the host's).
    With array_data_offset and layout (the call's arguments, Signature.layout)
    `module.jitdl_entries` is the text of a second module (else ""), of the `name.fast`
    entry (_fast_entry) and with `shapes` (direct_shapes) the `name.direct` entry
    (_direct_entry), which takes the Python ints within `int_bounds` (direct_int_bounds)
    and whose out= may be exactly the inputs at the positions in `alias`
    (jitdl.lower.lower.in_place_inputs), and whose arrays may all be Fortran-ordered
    where `any_order` (jitdl.lower.lower.layout_free): see entries_text; the two texts one after the
    other are what jitdl.runtime.engine.optimize links and compiles.
    `module.jitdl_notes` lists how each vectorized or unrolled loop was compiled, and
    `module.jitdl_allocs` its heap allocations (name, dtype, shape, bytes), which can
    fail: the function takes the error slot when there are checks (with_err) or these;
    `module.jitdl_alias` the positions kept (none with the error slot)."""
    with collector_paused():
        return _generate(func, parallel_ok, strict_fp, with_err, array_data_offset, n_inputs,
                         vector_bytes or host_vector_bytes(), layout, shapes, alias,
                         int_bounds, any_order)


_GC_LOCK = threading.Lock()
_gc_pauses = [0, False]     # threads generating code now; whether the collector was on


def _gc_after_fork():
    """A child forked while threads generated code has none of them: the collector back
    as the first found it, the count at 0 (the child's copy of the lock may be held)."""
    global _GC_LOCK
    _GC_LOCK = threading.Lock()
    if _gc_pauses[0]:
        _gc_pauses[0] = 0
        if _gc_pauses[1]:
            gc.enable()


os.register_at_fork(after_in_child=_gc_after_fork)


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic collector off while a module is built (and printed: see
    jitdl.pipeline.build): llvmlite's IR is thousands of small objects with parent links,
    which it would scan (with everything else alive) several times over (2-3 ms of a cold
    compile); nothing here needs collecting before the module is done. Counted across
    threads: the last one out turns it back on if it was on
    when the first came in (each thread saving and restoring it alone could leave it off
    for good when one thread's restore fell between another's check and its disable)."""
    with _GC_LOCK:
        if _gc_pauses[0] == 0:
            _gc_pauses[1] = gc.isenabled()
            gc.disable()
        _gc_pauses[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_pauses[0] -= 1
            if _gc_pauses[0] == 0 and _gc_pauses[1]:
                gc.enable()


def _generate(func, parallel_ok, strict_fp, with_err, array_data_offset, n_inputs,
              vector_bytes, layout, shapes, alias, int_bounds, any_order=False):
    gen = ModuleCodegen(func.name, parallel_ok, strict_fp, vector_bytes)
    with_err = with_err or _heap_allocates(func.body)
    if with_err:    # (a check that fails leaves out half written: out= an input would be
        alias = ()  # an input changed under the general path, which runs it again)
    arg_types = []
    for p in func.params:
        arg_types.append(PTR if isinstance(p, Buffer) else reg_type(p.dtype))
    if with_err:
        arg_types.append(PTR)
    fn = gen.new_function(func.name, VOID, arg_types)
    bufs, env = {}, {}
    for p, a in zip(func.params, fn.args):
        a.name = p.name
        if isinstance(p, Buffer):
            a.add_attribute("noalias")
            bufs[p] = a
        else:
            env[p] = a
    cg = FunctionCodegen(gen, fn, env, bufs)
    if with_err:
        cg.err = fn.args[-1]
    cg.stmt(grouped_sizes(func))
    cg.b.ret_void()
    gen.module.jitdl_entries = ""
    if array_data_offset is not None and layout is not None:
        gen.module.jitdl_entries = entries_text(
            fn, func.params, array_data_offset, n_inputs, layout, shapes, alias,
            _iterations(func.body) >= GIL_FREE_ITERATIONS, vector_bytes, int_bounds,
            any_order)
    gen.module.jitdl_notes = gen.notes
    gen.module.jitdl_allocs = gen.allocs
    gen.module.jitdl_alias = list(alias)
    return gen.module, gen.checks


class _Grouped:
    """grouped_sizes' rewrite of one function's expressions (memo by id: a node shared
    by several parents is rewritten once)."""

    def __init__(self, params):
        self.order = {p: n for n, p in enumerate(params)}
        self.memo, self.sized, self.sums = {}, {}, {}

    def size_only(self, e):
        """Whether e is what FunctionCodegen.hoisted computes once: + - * min max of
        integer constants and size arguments."""
        return size_arithmetic(e, self.order.__contains__, self.sized)

    def __call__(self, e):
        hit = self.memo.get(id(e))
        if hit is not None:
            return hit[1]
        out = self.chain(e) if _chain_link(e) else self.children(e)
        self.memo[id(e)] = (e, out)
        return out

    def children(self, e):
        match e:
            case Binary() | Compare():
                a, b = self(e.a), self(e.b)
                return e if (a is e.a and b is e.b) else replace(e, a=a, b=b)
            case Unary():
                a = self(e.a)
                return e if a is e.a else replace(e, a=a)
            case Call():
                args = tuple(self(x) for x in e.args)
                return e if all(x is y for x, y in zip(args, e.args)) else replace(e, args=args)
            case Select():
                c, t, f = self(e.cond), self(e.t), self(e.f)
                return e if (c is e.cond and t is e.t and f is e.f) else \
                    replace(e, cond=c, t=t, f=f)
            case Cast():
                v = self(e.value)
                return e if v is e.value else replace(e, value=v)
            case Load():
                i = self(e.index)
                check = e.check and tuple((self(c[0]),) + tuple(c[1:]) for c in e.check)
                same = i is e.index and all(x[0] is y[0] for x, y in
                                            zip(check or (), e.check or ()))
                return e if same else replace(e, index=i, check=check)
        return e

    def chain(self, e):
        """An int64 chain of + and - with its terms of sizes alone gathered: the other
        terms in their order, then + (sum of the positive ones) - (sum of the negative
        ones), each sum in the order of the function's parameters, so that the offsets
        of consecutive operands share their prefixes (wrapping int64 arithmetic:
        the same value in any order)."""
        terms, stack = [], [(e, 1)]
        while stack:
            n, sign = stack.pop()
            if _chain_link(n) and not (n is not e and self.size_only(n)):
                stack.append((n.b, -sign if n.op == BinOp.SUB else sign))
                stack.append((n.a, sign))
            else:
                terms.append((sign, n))
        sizes = [(sg, t) for sg, t in terms if self.size_only(t) and not isinstance(t, Const)]
        if len(sizes) < 2:
            return self.children(e)
        rest = [(sg, self(t)) for sg, t in terms
                if not (self.size_only(t) and not isinstance(t, Const))]
        late = len(self.order)
        key = lambda st: self.order.get(st[1], late)
        plus = self.sum(sorted((x for x in sizes if x[0] > 0), key=key))
        minus = self.sum(sorted((x for x in sizes if x[0] < 0), key=key))
        out = None
        for sg, t in rest:
            if out is None:
                out = t if sg > 0 else Binary(BinOp.SUB, Const(0, "int64"), t, "int64")
            else:
                out = Binary(BinOp.ADD if sg > 0 else BinOp.SUB, out, t, "int64")
        for op, part in ((BinOp.ADD, plus), (BinOp.SUB, minus)):
            if part is None:
                continue
            if out is None:
                out = part if op == BinOp.ADD else \
                    Binary(BinOp.SUB, Const(0, "int64"), part, "int64")
            else:
                out = Binary(op, out, part, "int64")
        return out

    def sum(self, terms):
        """The left-deep sum of `terms`, one object per prefix (by the terms' ids)."""
        out, ids = None, ()
        for _, t in terms:
            ids += (id(t),)
            hit = self.sums.get(ids)
            if hit is None:
                hit = self.sums[ids] = (t if out is None else
                                        Binary(BinOp.ADD, out, t, "int64"), t)
            out = hit[0]
        return out


def _chain_link(e):
    return isinstance(e, Binary) and e.op in (BinOp.ADD, BinOp.SUB) and e.dtype == "int64"


def grouped_sizes(func):
    """func's body with the terms of sizes alone of each int64 sum gathered into sums
    that FunctionCodegen.hoisted computes once (see _Grouped.chain). An index into the
    k-th operand of a concatenate, `i - n1 - n2 - ... - n(k-1)`, reads one value made
    in the entry block, from the one of the operand before it, where it took k - 1
    subtractions in each statement: the module grew with the square of the operands."""
    g = _Grouped([p for p in func.params if isinstance(p, SizeVar)])
    if not g.order:
        return func.body
    return map_stmt(func.body, None, g)


ENTRY_MAIN = "jd.main"      # the kernel in entries_text's memo (no kernel symbol has a dot)
_ENTRIES = {}               # entries_text's memo: what the entries read -> their text
_ENTRIES_KEPT = 512         # texts kept (about 10 KB each); then the memo starts again


def entries_text(main, params, offset, n_inputs, layout, shapes, alias, long, vector_bytes,
                 int_bounds=None, any_order=False):
    """The text of a module of the kernel `main`'s entry points, `name.fast` and (with
    `shapes`) `name.direct`, which declares `main`. They read only what the key below
    holds (not the kernel's loops, nor any name), so kernels alike in it (every float32
    binary elementwise jd.numpy op of one rank, say) share one text, made once per process
    with the placeholder ENTRY_MAIN for the kernel's name: building and printing it was a
    third of a small kernel's Python code generation time."""
    key = (tuple((isinstance(p, Buffer), p.dtype) for p in params), len(main.args), offset,
           n_inputs, tuple(x[0] for x in layout), json.dumps(shapes), tuple(alias), long,
           vector_bytes, int_bounds, any_order)
    text = _ENTRIES.get(key)
    if text is None:
        gen = ModuleCodegen(ENTRY_MAIN + ".entries", True, vector_bytes=vector_bytes)
        stub = ir.Function(gen.module, main.ftype, name=ENTRY_MAIN)
        _fast_entry(gen, stub, params, offset, n_inputs, layout, long)
        if shapes is not None:
            _direct_entry(gen, stub, params, offset, n_inputs, layout, shapes, alias, long,
                          int_bounds, any_order)
        text = str(gen.module)
        if len(_ENTRIES) >= _ENTRIES_KEPT:
            _ENTRIES.clear()
        _ENTRIES[key] = text
    return text.replace(f'"{ENTRY_MAIN}', f'"{main.name}')      # (and the module's name)


def _fast_entry(gen, main, params, offset, n_inputs, layout, long):
    """`name.fast`: the kernel as a METH_FASTCALL builtin, `fast(args, *outs, *extra)`.
    `args` is the call's argument tuple (laid out as `layout`): array data pointers and
    scalar values are read from its objects, outputs come after it, then scalar
    parameters that the layout does not name (in order). It returns a new reference to
    an item of `self`, a tuple (jitdl.target.cpu FAST_*): FAST_OK when the kernel ran,
    FAST_FALLBACK without running when an argument is not what the entry reads (not an
    exact tuple or ndarray, a strided or unaligned input, a number that does not
    convert), FAST_ERROR when the kernel reported an error (the caller runs the pointer
    entry again, with an error slot it can read). A `long` kernel (at least
    GIL_FREE_ITERATIONS) runs with the GIL released."""
    has_err = len(main.args) > len(params)
    e = _Entry(gen, f"{main.name}.fast")
    b, field, result, check = e.b, e.field, e.result, e.check
    self_, argv, nargs = e.fn.args
    array_pos = [i for i, x in enumerate(layout) if x[0] == "array"]
    scalar_pos = [i for i, x in enumerate(layout) if x[0] == "scalar"]
    n_bufs = sum(isinstance(p, Buffer) for p in params)
    n_call = 1 + n_bufs - n_inputs + len(params) - n_bufs - len(scalar_pos)
    check(b.icmp_signed("==", nargs, ir.Constant(I64, n_call)))
    tup = b.load(argv, typ=PTR)
    check(b.icmp_unsigned("==", field(tup, OBJECT_TYPE_OFFSET),
                          field(self_, OBJECT_TYPE_OFFSET)))
    check(b.icmp_signed("==", field(tup, TUPLE_SIZE_OFFSET, I64),
                        ir.Constant(I64, len(layout))))
    ndarray = e.item(FAST_ARRAY_TYPE)
    args, n_buf, n_scalar, n_extra = [], 0, 0, 0
    for p, a in zip(params, main.args):
        if isinstance(p, Buffer):
            if n_buf < n_inputs:
                obj = field(tup, TUPLE_ITEMS_OFFSET + 8 * array_pos[n_buf])
            else:
                obj = b.load(b.gep(argv, [ir.Constant(I64, 1 + n_buf - n_inputs)],
                                   source_etype=PTR), typ=PTR)
            check(b.icmp_unsigned("==", field(obj, OBJECT_TYPE_OFFSET), ndarray))
            if n_buf < n_inputs:
                mask = ir.Constant(I32, ARRAY_OK_FLAGS)
                fl = b.and_(field(obj, ARRAY_FLAGS_OFFSET, I32), mask)
                check(b.icmp_unsigned("==", fl, mask))
            args.append(field(obj, offset))
            n_buf += 1
            continue
        if n_scalar < len(scalar_pos):
            obj = field(tup, TUPLE_ITEMS_OFFSET + 8 * scalar_pos[n_scalar])
        else:
            obj = b.load(b.gep(argv, [ir.Constant(I64, 1 + n_bufs - n_inputs + n_extra)],
                               source_etype=PTR), typ=PTR)
            n_extra += 1
        n_scalar += 1
        args.append(_python_number(gen, b, obj, p.dtype, a.type, check))
    err = _error_slot(b, args) if has_err else None
    _run_main(gen, b, main, args, long)
    if has_err:
        code = b.load(err, typ=I64)
        with b.if_then(b.icmp_signed("!=", code, ir.Constant(I64, 0)), likely=False):
            result(FAST_ERROR)
    result(FAST_OK)
    e.finish()


class _Entry:
    """A METH_FASTCALL entry `name(self, argv, nargs)` being built: `check(ok)` goes on
    where ok holds and else to the fallback block, which returns `self`'s FAST_FALLBACK
    item (finish() writes it).

    The entry is `optnone`: LLVM's O3 pipeline skips it and code generation selects its
    instructions the quick way. It is a straight line of loads, compares and calls that
    optimisation hardly changes (the same instructions on its hot path), yet the two
    entries took a quarter of each small kernel's LLVM time (about 25 ms) at O3; the
    kernel they call is optimised as before."""

    def __init__(self, gen, name):
        self.gen = gen
        self.fn = gen.new_function(name, PTR, [PTR, PTR, I64])
        self.fn.attributes.add("noinline")      # (optnone requires it)
        self.fn.attributes.add("optnone")
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.fallback = self.fn.append_basic_block("fallback")
        self.incref = gen.declare("Py_IncRef", VOID, [PTR])

    def field(self, obj, off, ty=PTR):
        b = self.b
        return b.load(b.gep(obj, [ir.Constant(I64, off)], source_etype=I8), typ=ty)

    def item(self, k):
        """Item k of `self` (a borrowed reference)."""
        return self.field(self.fn.args[0], TUPLE_ITEMS_OFFSET + 8 * k)

    def result(self, k):
        """Return a new reference to item k of `self`."""
        x = self.item(k)
        self.b.call(self.incref, [x])
        self.b.ret(x)

    def check(self, ok):
        good = self.fn.append_basic_block()
        self.b.cbranch(ok, good, self.fallback)
        self.b.position_at_end(good)

    def finish(self):
        self.b.position_at_end(self.fallback)
        self.result(FAST_FALLBACK)


def _error_slot(b, args):
    """A zeroed error slot for the pointer entry, appended to its arguments."""
    err_ty = ir.ArrayType(I64, 2)
    err = alloca(b, err_ty, name="err")
    b.store(ir.Constant(err_ty, [0, 0]), err)
    args.append(err)
    return err


def _run_main(gen, b, main, args, long):
    """Call the pointer entry; with the GIL released where `long` (a bool, or an i1 value
    decided at run time)."""
    def released():
        state = b.call(gen.declare("PyEval_SaveThread", PTR, []), [])
        b.call(main, args)
        b.call(gen.declare("PyEval_RestoreThread", VOID, [PTR]), [state])
    if long is True:
        released()
    elif long is False:
        b.call(main, args)
    else:
        with b.if_else(long) as (then, otherwise):
            with then:
                released()
            with otherwise:
                b.call(main, args)


def direct_shapes(inputs, out_trees, size_vars, ones=()):
    """The shapes a `name.direct` entry checks and makes, or None where it has none (more
    than one output, an input dimension that is an expression): per input, each
    dimension as an int or ["n", k], the k-th size parameter (["n", k, 1] where the
    size may be 1: its k in `ones`); for the output, each dimension as a size tree
    (jitdl.pipeline.size_tree: also [op, a, b])."""
    shapes = []
    for b in inputs:
        dims = []
        for d in b.shape:
            if isinstance(d, (int, Const)):
                dims.append(int(d if isinstance(d, int) else d.value))
            elif isinstance(d, Var) and any(d is v for v in size_vars):
                k = next(k for k, v in enumerate(size_vars) if v is d)
                dims.append(["n", k, 1] if k in ones else ["n", k])
            else:
                return None
        shapes.append(dims)
    if len(out_trees) != 1:
        return None
    return shapes + [list(out_trees[0])]


def direct_int_bounds(layout, int_checks):
    """Per number of a call (the layout's scalars, in order), the (low, high) that a Python
    int must lie in for the `.direct` entry to take it: the narrowest dtype it meets
    (int_checks: jitdl.ir.weak.checks). None where a check is of an expression of
    numbers, which the entry cannot evaluate (it does not serve those calls)."""
    if any(tree[0] != "var" for _, tree, *_ in int_checks):
        return None
    out = []
    for kind, name, *_ in layout:
        if kind == "scalar":
            lo, hi = weak.INT64
            for dt, tree, *_ in int_checks:
                if tree[1] == name:
                    lo, hi = max(lo, weak.BOUNDS[dt][0]), min(hi, weak.BOUNDS[dt][1])
            out.append((lo, hi))
    return tuple(out)


def _tree_value(b, tree, sizes, check):
    """A size tree's value (Python's // and %; a zero divisor fails the check)."""
    if isinstance(tree, int):
        return ir.Constant(I64, tree)
    op, *args = tree
    if op == "n":
        return sizes[int(args[0])]
    x, y = (_tree_value(b, t, sizes, check) for t in args)
    if op in ("+", "-", "*"):
        return {"+": b.add, "-": b.sub, "*": b.mul}[op](x, y)
    if op in ("min", "max"):
        return b.select(b.icmp_signed("<" if op == "min" else ">", x, y), x, y)
    check(b.icmp_signed("!=", y, ir.Constant(I64, 0)))
    q, r = b.sdiv(x, y), b.srem(x, y)
    adjust = b.and_(b.icmp_signed("!=", r, ir.Constant(I64, 0)),
                    b.icmp_signed("!=", b.icmp_signed("<", r, ir.Constant(I64, 0)),
                                  b.icmp_signed("<", y, ir.Constant(I64, 0))))
    if op == "//":
        return b.sub(q, b.zext(adjust, I64))
    return b.add(r, b.select(adjust, y, ir.Constant(I64, 0)))


def _direct_entry(gen, main, params, offset, n_inputs, layout, shapes, alias, long,
                  int_bounds=None, any_order=False):
    """`name.direct`: the kernel as a METH_FASTCALL builtin `direct(*args)` that takes the
    call's arguments themselves, checks them as a dispatch would (each array exactly an
    ndarray, C-contiguous and aligned, of the dtype object, rank and sizes it was compiled
    for; each number of the Python type it was compiled for), makes the output with
    NumPy's PyArray_Empty and returns it. Anything else (another shape pattern, an empty
    or a size-1 dimension where the kernel has a size, a Python int outside its
    `int_bounds` pair, an output of POOL_MIN_BYTES or more, an error) returns `self`'s
    FAST_FALLBACK item without a result: the caller takes its general path. `direct(*args, out)` (one argument more) writes into out
    instead and returns it, where out is exactly an ndarray of the output's dtype object
    and shape, C-contiguous, aligned, writeable and apart from every input (or exactly
    the memory of an input at a position in `alias`); else the fallback. With `any_order`
    (a kernel that reads each input at the output's own position only) the arrays may
    instead all be Fortran-ordered, and the output is made Fortran-ordered: the kernel's
    loops run over their memory alike (a.T + a.T on the fast path: 1.6 -> 0.8 us).
    A strided 1-d or 2-d input (a[::2], m[:, 0], m[:, :20]; aligned, at most GATHER_BYTES)
    is gathered in C order into a buffer on the entry's stack first (_gathered).
    `self` (runtime.kernel.direct_builtin): FAST_RESULTS, the ndarray type, what it keeps
    alive, an int64 array holding PyArray_Empty's address and PyArray_Return's (or 0),
    the dtype objects of the inputs and of the output, the Python types of the numbers."""
    has_err = len(main.args) > len(params)
    bufs = [p for p in params if isinstance(p, Buffer)]
    n_scalars = len(params) - len(bufs)
    scalar_pos = [i for i, x in enumerate(layout) if x[0] == "scalar"]
    n_sizes = n_scalars - len(scalar_pos)
    bound = {d[1] for sh in shapes[:-1] for d in sh if not isinstance(d, int)}
    if len(bufs) != n_inputs + 1 or any(x[0] not in ("array", "scalar") for x in layout) \
            or bound != set(range(n_sizes)) or len(shapes) != n_inputs + 1:
        return          # (every size is read from an input's shape)
    e = _Entry(gen, f"{main.name}.direct")
    b, field, item, check = e.b, e.field, e.item, e.check
    _, argv, nargs = e.fn.args
    decref = gen.declare("Py_DecRef", VOID, [PTR])
    item_base = FAST_ARRAY_TYPE + 3     # after the ndarray type, the kept objects, the API

    with_out = b.icmp_signed("==", nargs, ir.Constant(I64, len(layout) + 1))
    check(b.or_(b.icmp_signed("==", nargs, ir.Constant(I64, len(layout))), with_out))
    ndarray = item(FAST_ARRAY_TYPE)
    objs = [b.load(b.gep(argv, [ir.Constant(I64, i)], source_etype=PTR), typ=PTR)
            for i in range(len(layout))]
    array_objs = [o for o, x in zip(objs, layout) if x[0] == "array"]
    scalar_objs = [o for o, x in zip(objs, layout) if x[0] == "scalar"]
    mask = ir.Constant(I32, ARRAY_OK_FLAGS)
    f_mask = ir.Constant(I32, ARRAY_F_OK_FLAGS)
    all_c = all_f = ir.Constant(I1, 1)
    sizes = [None] * n_sizes
    data, nbytes = [], []
    gathered = ir.Constant(I64, 0)      # (the bytes gathered so far: at most GATHER_TOTAL)
    for j, (obj, dims) in enumerate(zip(array_objs, shapes)):
        check(b.icmp_unsigned("==", field(obj, OBJECT_TYPE_OFFSET), ndarray))
        flags = field(obj, ARRAY_FLAGS_OFFSET, I32)
        c_ok = b.icmp_unsigned("==", b.and_(flags, mask), mask)
        f_ok = b.icmp_unsigned("==", b.and_(flags, f_mask), f_mask)
        # a strided 1-d or 2-d view (neither order's contiguous memory) is gathered into
        # C order (_gathered) and counts as C-contiguous; not where the operand's sizes
        # are constants over GATHER_BYTES, which _gathered would send to the fallback at
        # every call (LLVM does not see that: the gather's code was compiled for nothing,
        # a fifth of a small static kernel's LLVM time)
        gathers = 1 <= len(dims) <= 2 and not (
            all(isinstance(d, int) for d in dims)
            and dtypes.itemsize(bufs[j].dtype) * math.prod(dims) > GATHER_BYTES)
        strided = b.not_(b.or_(c_ok, f_ok)) if gathers else ir.Constant(I1, 0)
        all_c = b.and_(all_c, b.or_(c_ok, strided))
        if any_order:       # (C-contiguous, or all of them Fortran-contiguous)
            all_f = b.and_(all_f, f_ok)
        else:
            check(all_c)
        check(b.icmp_unsigned("==", field(obj, ARRAY_DESCR_OFFSET), item(item_base + j)))
        check(b.icmp_signed("==", field(obj, ARRAY_NDIM_OFFSET, I32),
                            ir.Constant(I32, len(dims))))
        extents = field(obj, ARRAY_DIMS_OFFSET)
        size = ir.Constant(I64, dtypes.itemsize(bufs[j].dtype))   # (its bytes, for out=)
        ns = []
        for d, want in enumerate(dims):
            n = b.load(b.gep(extents, [ir.Constant(I64, d)], source_etype=I64), typ=I64)
            ns.append(n)
            size = b.mul(size, n)
            if isinstance(want, int):
                check(b.icmp_signed("==", n, ir.Constant(I64, want)))
            elif sizes[want[1]] is None:    # a size: not 0 or 1 (the pattern's own sizes;
                #                                 one that may be 1 may be 0 too: any)
                if len(want) == 2:
                    check(b.icmp_signed(">", n, ir.Constant(I64, 1)))
                sizes[want[1]] = n
            else:                           # a size seen before: the same
                check(b.icmp_signed("==", n, sizes[want[1]]))
        ptr = field(obj, offset)
        if gathers:
            ptr, gathered = _gathered(gen, e, obj, flags, strided, ptr, ns, size,
                                      bufs[j].dtype, gathered)
        data.append(ptr)
        nbytes.append(size)
    out_params = bufs[n_inputs:]
    out_dims = shapes[len(array_objs)]
    dims_ty = ir.ArrayType(I64, max(1, len(out_dims)))
    dims_ptr = alloca(b, dims_ty, name="dims")
    count = ir.Constant(I64, 1)
    out_extents = []
    for d, tree in enumerate(out_dims):
        n = _tree_value(b, tree, sizes, check)
        check(b.icmp_signed(">", n, ir.Constant(I64, 0)))     # (empty: the general path)
        b.store(n, b.gep(dims_ptr, [ir.Constant(I64, 0), ir.Constant(I64, d)],
                         source_etype=dims_ty))
        out_extents.append(n)
        count = b.mul(count, n) if d else n
    itemsize = dtypes.itemsize(out_params[0].dtype)
    scalars = []
    for j, (obj, p, a) in enumerate(zip(scalar_objs, params[len(bufs):],
                                        main.args[len(bufs):])):
        k = item_base + len(shapes) + len(scalars)
        check(b.icmp_unsigned("==", field(obj, OBJECT_TYPE_OFFSET), item(k)))
        scalars.append(_python_number(gen, b, obj, p.dtype, a.type, check,
                                      int_bounds[j] if int_bounds else None))
    descr = item(item_base + len(array_objs))
    if any_order:
        check(b.or_(all_c, all_f))
    if long and n_sizes:            # symbolic sizes: decided by the output's size
        long = b.icmp_signed(">=", count, ir.Constant(I64, GIL_FREE_ITERATIONS))
    into, fresh = e.fn.append_basic_block("into"), e.fn.append_basic_block("fresh")
    b.cbranch(with_out, into, fresh)

    # direct(*args, out): the kernel writes into out
    b.position_at_end(into)
    check(all_c)
    out = b.load(b.gep(argv, [ir.Constant(I64, len(layout))], source_etype=PTR), typ=PTR)
    check(b.icmp_unsigned("==", field(out, OBJECT_TYPE_OFFSET), ndarray))
    writable = ir.Constant(I32, ARRAY_OK_FLAGS | ARRAY_WRITEABLE)
    check(b.icmp_unsigned("==", b.and_(field(out, ARRAY_FLAGS_OFFSET, I32), writable),
                          writable))
    check(b.icmp_unsigned("==", field(out, ARRAY_DESCR_OFFSET), descr))
    check(b.icmp_signed("==", field(out, ARRAY_NDIM_OFFSET, I32),
                        ir.Constant(I32, len(out_dims))))
    given = field(out, ARRAY_DIMS_OFFSET)
    for d, n in enumerate(out_extents):
        check(b.icmp_signed("==", b.load(b.gep(given, [ir.Constant(I64, d)],
                                                source_etype=I64), typ=I64), n))
    # apart from every input: [start, start + bytes) ranges that do not meet (the arrays
    # are contiguous, so their ranges are exactly their memory)
    start = b.ptrtoint(field(out, offset), I64)
    end = b.add(start, b.mul(count, ir.Constant(I64, itemsize)))
    for j, (p, n) in enumerate(zip(data, nbytes)):
        a_start = b.ptrtoint(p, I64)
        a_end = b.add(a_start, n)
        ok = b.or_(b.icmp_unsigned("<=", end, a_start), b.icmp_unsigned("<=", a_end, start))
        if j in alias:      # (an elementwise kernel may write over this input itself)
            ok = b.or_(ok, b.and_(b.icmp_unsigned("==", a_start, start),
                                  b.icmp_unsigned("==", a_end, end)))
        check(ok)
    args = data + [field(out, offset)] + scalars + sizes
    err = _error_slot(b, args) if has_err else None
    _run_main(gen, b, main, args, long)
    if has_err:
        check(b.icmp_signed("==", b.load(err, typ=I64), ir.Constant(I64, 0)))
    b.call(e.incref, [out])
    b.ret(out)

    # direct(*args): a new output
    b.position_at_end(fresh)
    check(b.icmp_signed("<", count, ir.Constant(I64, -(-POOL_MIN_BYTES // itemsize))))
    api = field(item(FAST_ARRAY_TYPE + 2), offset)
    # PyArray_Empty(nd, dims, descr (a reference it steals), fortran)
    empty = b.load(api, typ=ir.FunctionType(PTR, [I32, PTR, PTR, I32]).as_pointer())
    b.call(e.incref, [descr])
    fortran = b.zext(b.not_(all_c), I32) if any_order else ir.Constant(I32, 0)
    out = b.call(empty, [ir.Constant(I32, len(out_dims)), dims_ptr, descr, fortran])
    made = e.fn.append_basic_block("made")
    failed = e.fn.append_basic_block("failed")
    b.cbranch(b.icmp_unsigned("==", out, ir.Constant(PTR, None)), failed, made)
    b.position_at_end(failed)
    b.call(gen.declare("PyErr_Clear", VOID, []), [])
    b.branch(e.fallback)
    b.position_at_end(made)
    args = data + [field(out, offset)] + scalars + sizes
    err = _error_slot(b, args) if has_err else None
    _run_main(gen, b, main, args, long)
    if has_err:
        code = b.load(err, typ=I64)
        with b.if_then(b.icmp_signed("!=", code, ir.Constant(I64, 0)), likely=False):
            b.call(decref, [out])
            b.branch(e.fallback)
    # a 0-d result NumPy makes a scalar: PyArray_Return (the API array's second word,
    # 0 where the caller wants the array)
    ret_ty = ir.FunctionType(PTR, [PTR]).as_pointer()
    as_scalar = b.load(b.gep(api, [ir.Constant(I64, 1)], source_etype=I64), typ=ret_ty)
    with b.if_then(b.icmp_unsigned("!=", as_scalar, ir.Constant(ret_ty, None)), likely=False):
        scalar = b.call(as_scalar, [out])       # (steals out)
        with b.if_then(b.icmp_unsigned("==", scalar, ir.Constant(PTR, None)), likely=False):
            b.call(gen.declare("PyErr_Clear", VOID, []), [])
            b.branch(e.fallback)
        b.ret(scalar)
    b.ret(out)
    e.finish()


def _gathered(gen, e, obj, flags, strided, ptr, ns, nbytes, dtype, total):
    """The data of a 1-d or 2-d array operand of a direct entry (of extents `ns`): its own,
    else (`strided`: neither C- nor Fortran-contiguous) its elements gathered in C order
    into a buffer on the entry's stack, where the view is aligned, at most GATHER_BYTES
    and has strides in C order (else the fallback; NumPy lays out an elementwise result
    in its operands' order): a[::2], m[:, 0], m[:, :20], a[::-1], broadcast_to's zero
    stride, which the general path copies too, behind a few microseconds of Python
    (a[::2] + b[::2] of 500 float64: 2.6 -> 0.7 us; m[:, :20] + m[:, :20] of 25 x 40: 3.9
    -> 0.9). The buffer is allocated only for a view gathered, of its own bytes, and the
    call's views gather at most GATHER_TOTAL bytes together (`total`: those before this
    one; else the fallback): an entry of many operands (concatenate of 16 arrays) took
    8 KiB of stack for each, gathered or not, and overflowed a thread's small stack.
    Returns (the data, the bytes gathered with this operand's)."""
    b = e.b
    total = b.add(total, b.select(strided, nbytes, ir.Constant(I64, 0)))
    before = b.block
    with b.if_then(strided, likely=False):
        aligned = b.icmp_unsigned("!=", b.and_(flags, ir.Constant(I32, ARRAY_ALIGNED)),
                                  ir.Constant(I32, 0))
        e.check(b.and_(aligned, b.icmp_signed("<=", nbytes, ir.Constant(I64, GATHER_BYTES))))
        e.check(b.icmp_signed("<=", total, ir.Constant(I64, GATHER_TOTAL)))
        steps_at = e.field(obj, ARRAY_STRIDES_OFFSET)
        steps = [b.load(b.gep(steps_at, [ir.Constant(I64, d)], source_etype=I64), typ=I64)
                 for d in range(len(ns))]
        if len(ns) == 2:
            # C order's strides: |s0| >= |s1|, or a size 1, or a zero stride (a broadcast
            # row or column, whose result NumPy lays out in C order too); not v.T, whose
            # elementwise results NumPy lays out in Fortran order (also with a broadcast
            # operand, v.T + row, whose kernel is not `any_order`): the wrappers run those
            # on their transposes (numpy._ufuncs._fortran_ordered)
            one, zero = ir.Constant(I64, 1), ir.Constant(I64, 0)
            mag = [b.select(b.icmp_signed("<", s, zero), b.neg(s), s) for s in steps]
            e.check(functools.reduce(b.or_, [
                b.icmp_signed("<=", ns[0], one), b.icmp_signed("<=", ns[1], one),
                b.icmp_signed("==", steps[0], zero), b.icmp_signed("==", steps[1], zero),
                b.icmp_signed(">=", mag[0], mag[1])]))
        buf = alloca(b, I8, size=nbytes, name="gathered")    # (lives until the return)
        buf.align = 64
        b.call(_gather(gen, dtypes.itemsize(dtype), len(ns)), [buf, ptr] + ns + steps)
        filled = b.block
    data = b.phi(PTR)
    data.add_incoming(ptr, before)
    data.add_incoming(buf, filled)
    return data, total


def _gather(gen, size, rank):
    """The module's function gather(dst, src, n0[, n1], s0[, s1]) of a 1-d or 2-d view:
    its elements of `size` bytes (n0 x n1, s0 and s1 bytes apart along each dimension
    from src) to consecutive places at dst, in C order. Optimised as kernels are (the
    entries themselves are not: _Entry), but for elements of 2 bytes or more its inner
    loop is marked not to be vectorised: LLVM's vector loop (16-lane gathers, unrolled)
    ran only for a stride of 1 byte, which an aligned view of such elements never has
    (its strides are multiples of the alignment), and cost 25-45% of a small kernel's
    LLVM time; the scalar loop that runs is the one it ran before."""
    name = f"jd_gather{rank}d{size}"
    if name in gen.module.globals:
        return gen.module.globals[name]
    ty = ir.IntType(8 * size)
    fn = gen.new_function(name, VOID, [PTR, PTR] + [I64] * (2 * rank), internal=True)
    dst, src = fn.args[:2]
    ns, steps = fn.args[2:2 + rank], fn.args[2 + rank:]
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)

    def loop(d, at, base):
        """Loop over dimension d (src offset `base`, dst index `at` * n[d] + i), then
        after it branch on to `after`."""
        head = b.block
        body = fn.append_basic_block(f"d{d}")
        after = fn.append_basic_block(f"d{d}.end")
        b.cbranch(b.icmp_signed(">", ns[d], zero), body, after)
        b.position_at_end(body)
        i = b.phi(I64)
        i.add_incoming(zero, head)
        src_at = b.add(base, b.mul(i, steps[d]))
        dst_at = b.add(b.mul(at, ns[d]), i)
        if d + 1 < rank:
            loop(d + 1, dst_at, src_at)
        else:
            v = b.load(b.gep(src, [src_at], source_etype=I8), typ=ty)
            v.align = size
            st = b.store(v, b.gep(dst, [dst_at], source_etype=ty))
            st.align = size
        nxt = b.add(i, one)
        i.add_incoming(nxt, b.block)
        latch = b.cbranch(b.icmp_signed("<", nxt, ns[d]), body, after)
        if d + 1 == rank and size > 1:
            latch.set_metadata("llvm.loop", loop_metadata(
                gen.module, ("llvm.loop.vectorize.enable", False)))
        b.position_at_end(after)

    loop(0, zero, zero)
    b.ret_void()
    return fn


def _python_number(gen, b, obj, dtype, ty, check, bounds=None):
    """A Python number (int, float, bool or a NumPy scalar) as a value of `ty`, through
    the C API; a conversion error is cleared and sends the call to the fallback (whose
    ctypes conversion reports it), as does an int outside `bounds` (low, high)."""
    if dtype == "bool":
        v = b.call(gen.declare("PyObject_IsTrue", I32, [PTR]), [obj])
        check(b.icmp_signed(">=", v, ir.Constant(I32, 0)))
        return b.icmp_signed("!=", v, ir.Constant(I32, 0))
    if dtype.startswith("float"):
        v = b.call(gen.declare("PyFloat_AsDouble", F64, [PTR]), [obj])
        failed = b.fcmp_ordered("==", v, ir.Constant(F64, -1.0))
    else:
        v = b.call(gen.declare("PyLong_AsLongLong", I64, [PTR]), [obj])
        failed = b.icmp_signed("==", v, ir.Constant(I64, -1))
    with b.if_then(failed, likely=False):
        raised = b.call(gen.declare("PyErr_Occurred", PTR, []), [])
        clean = b.icmp_unsigned("==", raised, ir.Constant(PTR, None))
        with b.if_then(b.not_(clean), likely=False):
            b.call(gen.declare("PyErr_Clear", VOID, []), [])
        check(clean)
    if dtype.startswith("float"):
        return v if ty == F64 else b.fptrunc(v, ty)
    if bounds is not None and tuple(bounds) != weak.INT64:
        lo, hi = (ir.Constant(I64, x) for x in bounds)
        check(b.and_(b.icmp_signed(">=", v, lo), b.icmp_signed("<=", v, hi)))
    return v if ty == I64 else b.trunc(v, ty)


def _iterations(s):
    """Innermost statements a statement runs (a bound; unknown extents count as many)."""
    match s:
        case For():
            n = s.extent.value if isinstance(s.extent, Const) else GIL_FREE_ITERATIONS
            return n * _iterations(s.body)
        case Seq():
            return sum(_iterations(x) for x in s.stmts)
        case IfThen():
            return max(_iterations(s.then),
                       _iterations(s.otherwise) if s.otherwise is not None else 0)
        case Allocate() | LetStmt():
            return _iterations(s.body)
    return 1
