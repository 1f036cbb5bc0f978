"""The reference interpreter of the loop IR: the oracle that passes and code generators
are tested against.

It runs a PrimFunc element by element in Python, slowly and plainly. Every loop kind runs
as a sequential Python loop; every expression is evaluated with NumPy scalar semantics of
its node's dtype (integers wrap, float32 stays float32, `//` and `%` floor, x // 0 == 0).
Where NumPy leaves a case undefined or raises, the interpreter follows what jitdl's code
generator defines (jitdl.codegen.llvm, mathlib), and says so below.

What makes it an oracle rather than a second implementation, each a subclass of
InterpretError (itself a CompileError: a failure here is a jitdl bug, not a user's):

- OutOfBoundsError: a Load or Store whose flat index is outside its buffer;
- UninitializedReadError: a Load of an element nothing has stored since its buffer was
  allocated (Allocate makes a fresh buffer, filled with NaN or garbage, on every entry);
- UnwrittenOutputError: an output element the function never stored (interpret());
- ScopeError: a buffer used outside its Allocate, a Var read outside its binding, a
  Store into an input buffer, an operand whose dtype breaks the IR's typing rules;
- RaceError: two iterations of a parallel loop that touch the same element of a buffer
  allocated outside the loop, one of them writing it (the iterations run on different
  threads in compiled code; here they run in order, and their accesses are compared).

A Load with `check` set is a run-time checked access of the user's program: an index
outside its dimension raises IndexError, as the compiled kernel does.

The flat index is all a Load carries, so an index that is wrong per dimension but inside
the buffer (X[i, j + 1] reading the next row) is not an error here: comparing the
results with a reference catches it.

Semantics taken from the code generator where NumPy is silent or raises:
- float -> int casts saturate, NaN -> 0 (llvm.fptosi.sat / fptoui.sat);
- integer `**` with a negative exponent is 0;
- bool `+`, `*`, `-` (as the lowering combines bool reductions) are or, and, xor;
- sign(x) of a float is x itself for zeros and NaN;
- rsqrt(x) = 1 / sqrt(x), sigmoid(x) = 1 / (1 + exp(-x)), in the node's dtype;
- `and`/`or` of bools and select() evaluate only the operand that decides the result.
Shifts by the bit width or more follow NumPy (0, or -1 for a negative value shifted right).

    outs = interpret(func, [A, B], [alpha])      # the outputs, or an InterpretError
    run = execute(func, [A, B], trace=True)      # outputs, written masks, stores in order
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from jitdl import dtypes
from jitdl.errors import CompileError, value_check_message
from jitdl.ir.nodes import (Allocate, BinOp, Binary, Buffer, Call, Cast, CmpOp, Compare,
                            Const, Expr, For, ForKind, IfThen, Intrin, LetStmt, Load, PrimFunc,
                            Select, Seq, Store, UnOp, Unary, Var, ThreadReduce)


class InterpretError(CompileError):
    """The loop IR did something no correct lowering does."""


class OutOfBoundsError(InterpretError):
    """A Load or Store outside its buffer."""


class UninitializedReadError(InterpretError):
    """A Load of an element that was never stored."""


class UnwrittenOutputError(InterpretError):
    """An output element the function never stored."""


class ScopeError(InterpretError):
    """A buffer, variable or dtype used where the IR does not allow it."""


class RaceError(InterpretError):
    """Iterations of a parallel loop that depend on each other through memory."""


@dataclass
class Run:
    """What one execution did. `outputs` are shaped like the output buffers; `written`
    holds, per output, True where the function stored; `stores` is the sequence of
    (buffer name, flat index, value) the function stored (when traced)."""
    outputs: list
    written: list
    stores: list | None = None
    counts: dict = field(default_factory=dict)    # "loads", "stores", "iterations"


def interpret(func: PrimFunc, arrays, scalars=()) -> list[np.ndarray]:
    """Run `func` on input arrays (the contents of its first len(arrays) buffer parameters,
    in order; the remaining buffer parameters are its outputs) and scalar arguments (its
    Var parameters, in order). Returns the outputs, freshly allocated, shaped like their
    buffers. Raises UnwrittenOutputError if an output element was never stored."""
    run = execute(func, arrays, scalars)
    for buf, out, mask in zip(_outputs(func, len(arrays)), run.outputs, run.written):
        if not mask.all():
            where = np.unravel_index(int(np.argmin(mask.reshape(-1))), out.shape)
            raise UnwrittenOutputError(
                f"interpret({func.name}): {int((~mask).sum())} of {mask.size} elements of "
                f"output {buf.name} were never written, the first at {tuple(map(int, where))}")
    return run.outputs


def execute(func: PrimFunc, arrays, scalars=(), *, trace=False,
            max_iterations=20_000_000) -> Run:
    """interpret() without the check that every output element was written: the outputs
    keep their fill (NaN for floats, the dtype's minimum for integers, True for bools)
    where nothing was stored. With trace=True, records every Store in order."""
    return _Interpreter(func, trace, max_iterations).run(list(arrays), list(scalars))


def _outputs(func, n_inputs):
    return [p for p in func.params if isinstance(p, Buffer)][n_inputs:]


# ---------------------------------------------------------------------------------------
# values: Python bool for bool, Python int (inside the dtype's range) for integers, a NumPy
# scalar of the dtype for floats
# ---------------------------------------------------------------------------------------

_FLOAT = {"float32": np.float32, "float64": np.float64}
_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8}
_RANGE = {dt: (int(np.iinfo(dt).min), int(np.iinfo(dt).max)) for dt in _BITS}


def wrap(v: int, dtype: str) -> int:
    """An integer reduced into the range of `dtype`, two's complement."""
    lo, hi = _RANGE[dtype]
    if lo <= v <= hi:
        return v
    bits = _BITS[dtype]
    v &= (1 << bits) - 1
    return v - (1 << bits) if v > hi else v


def value(x, dtype: str):
    """A Python or NumPy number as the interpreter's value of `dtype`."""
    if dtype == "bool":
        return bool(x)
    if dtype in _FLOAT:
        return _FLOAT[dtype](x)
    return wrap(int(x), dtype)


def _cast(v, src: str, dst: str):
    """Cast as the code generator does (llvm.fptosi.sat for float -> int)."""
    if dst == "bool":
        return bool(v != 0)                   # NaN != 0: True, as in NumPy
    if dst in _FLOAT:                         # rounds to nearest, once (not via float64)
        return _FLOAT[dst](v) if src in _FLOAT or src == "bool" else \
            np.dtype(src).type(v).astype(dst)
    if src in _FLOAT:
        if math.isnan(v):
            return 0
        lo, hi = _RANGE[dst]
        return lo if v <= lo else hi if v >= hi else int(v)       # int() truncates
    return wrap(int(v), dst)


def _fill(dtype: str):
    """Garbage a fresh buffer holds: NaN for floats, an implausible value otherwise."""
    if dtype in _FLOAT:
        return np.nan
    if dtype == "bool":
        return True
    return np.iinfo(dtype).min


# ---------------------------------------------------------------------------------------
# operators: each returns a function of the operand values
# ---------------------------------------------------------------------------------------

_FLOAT_BIN = {BinOp.ADD: np.add, BinOp.SUB: np.subtract, BinOp.MUL: np.multiply,
              BinOp.DIV: np.true_divide, BinOp.FLOORDIV: np.floor_divide,
              BinOp.MOD: np.remainder, BinOp.MIN: np.minimum, BinOp.MAX: np.maximum,
              BinOp.POW: np.power, BinOp.ATAN2: np.arctan2, BinOp.FMOD: np.fmod}
_CMP = {CmpOp.LT: lambda a, b: a < b, CmpOp.LE: lambda a, b: a <= b,
        CmpOp.GT: lambda a, b: a > b, CmpOp.GE: lambda a, b: a >= b,
        CmpOp.EQ: lambda a, b: a == b, CmpOp.NE: lambda a, b: a != b}
_FLOAT_INTRIN = {Intrin.EXP: np.exp, Intrin.LOG: np.log, Intrin.SQRT: np.sqrt,
                 Intrin.TANH: np.tanh, Intrin.SIN: np.sin, Intrin.COS: np.cos,
                 Intrin.TAN: np.tan, Intrin.ATAN: np.arctan, Intrin.ABS: np.abs,
                 Intrin.FLOOR: np.floor, Intrin.CEIL: np.ceil, Intrin.ROUND: np.rint,
                 Intrin.TRUNC: np.trunc, Intrin.LOG1P: np.log1p, Intrin.EXPM1: np.expm1,
                 Intrin.ASIN: np.arcsin, Intrin.ACOS: np.arccos, Intrin.EXP2: np.exp2,
                 Intrin.LOG2: np.log2, Intrin.LOG10: np.log10, Intrin.SINH: np.sinh,
                 Intrin.COSH: np.cosh,
                 Intrin.ISNAN: np.isnan, Intrin.ISINF: np.isinf, Intrin.ISFINITE: np.isfinite,
                 Intrin.SIGNBIT: np.signbit}


def float_op(op: BinOp, dtype: str):
    """The operator on NumPy scalars of a float dtype: arithmetic in that dtype."""
    match op:                  # the operators of NumPy scalars: faster than the ufuncs
        case BinOp.ADD:
            return lambda a, b: a + b
        case BinOp.SUB:
            return lambda a, b: a - b
        case BinOp.MUL:
            return lambda a, b: a * b
        case BinOp.DIV:
            return lambda a, b: a / b
    ufunc, ty = _FLOAT_BIN.get(op), _FLOAT[dtype]
    if ufunc is None:
        raise ScopeError(f"interpret: {op.value} is not defined for {dtype}")
    return lambda a, b: ty(ufunc(a, b))


def int_op(op: BinOp, dtype: str):
    """The operator on values of an integer dtype, wrapping its result into the dtype."""
    bits = _BITS[dtype]
    match op:
        case BinOp.ADD:
            f = lambda a, b: a + b                              # noqa: E731
        case BinOp.SUB:
            f = lambda a, b: a - b                              # noqa: E731
        case BinOp.MUL:
            f = lambda a, b: a * b                              # noqa: E731
        case BinOp.FLOORDIV:                                    # NumPy: x // 0 == 0
            f = lambda a, b: a // b if b else 0                 # noqa: E731
        case BinOp.MOD:                                         # NumPy: x % 0 == 0
            f = lambda a, b: a % b if b else 0                  # noqa: E731
        case BinOp.MIN:
            f = min
        case BinOp.MAX:
            f = max
        case BinOp.POW:                                         # codegen: x ** -n == 0
            f = lambda a, b: pow(a, b, 1 << bits) if b >= 0 else 0     # noqa: E731
        case BinOp.AND:
            f = lambda a, b: a & b                              # noqa: E731
        case BinOp.OR:
            f = lambda a, b: a | b                              # noqa: E731
        case BinOp.XOR:
            f = lambda a, b: a ^ b                              # noqa: E731
        case BinOp.SHL:                  # NumPy: a shift by the width or more leaves 0
            f = lambda a, b: a << b if 0 <= b < bits else 0     # noqa: E731
        case BinOp.SHR:                  # arithmetic for signed types; sign bits past it
            f = lambda a, b: a >> b if 0 <= b < bits else -(a < 0)     # noqa: E731
        case _:
            raise ScopeError(f"interpret: {op.value} is not defined for {dtype}")
    if dtype == "int64":
        lo, hi = _RANGE[dtype]
        return lambda a, b: r if lo <= (r := f(a, b)) <= hi else wrap(r, dtype)
    return lambda a, b: wrap(f(a, b), dtype)


def bool_op(op: BinOp):
    """and/or are short-circuited by the caller; these see both operands."""
    match op:
        case BinOp.AND | BinOp.MUL | BinOp.MIN:
            return lambda a, b: a and b
        case BinOp.OR | BinOp.ADD | BinOp.MAX:
            return lambda a, b: a or b
        case BinOp.XOR | BinOp.SUB:
            return lambda a, b: a != b
    raise ScopeError(f"interpret: {op.value} is not defined for bool")


def intrinsic(fn: Intrin, src: str, dtype: str):
    """The intrinsic on an operand of dtype `src`, giving `dtype`."""
    if src in _FLOAT:
        ty = _FLOAT[src]
        one = ty(1)
        if fn in _FLOAT_INTRIN:
            f = _FLOAT_INTRIN[fn]
        elif fn == Intrin.RSQRT:
            f = lambda x: one / np.sqrt(x)                      # noqa: E731
        elif fn == Intrin.SIGMOID:
            f = lambda x: one / (one + np.exp(-x))              # noqa: E731
        elif fn == Intrin.ERF:
            f = lambda x: math.erf(float(x))                    # noqa: E731
        elif fn == Intrin.SIGN:                                 # zeros and NaN stay
            f = lambda x: one if x > 0 else -one if x < 0 else x      # noqa: E731
        else:
            raise ScopeError(f"interpret: intrinsic {fn.value} of {src}")
        out = bool if dtype == "bool" else _FLOAT[dtype]
        return lambda x: out(f(x))
    match fn:
        case Intrin.FLOOR | Intrin.CEIL | Intrin.ROUND | Intrin.TRUNC:
            return lambda x: x
        case Intrin.ABS:
            return (lambda x: x) if src == "bool" else (lambda x: wrap(abs(x), dtype))
        case Intrin.SIGN if src != "bool":
            return lambda x: (x > 0) - (x < 0)
        case Intrin.ISNAN | Intrin.ISINF:
            return lambda x: False
        case Intrin.ISFINITE:
            return lambda x: True
        case Intrin.SIGNBIT:
            return lambda x: x < 0
    raise ScopeError(f"interpret: intrinsic {fn.value} is not defined for {src}")


# ---------------------------------------------------------------------------------------
# the interpreter: each node is translated once into a Python closure, then run
# ---------------------------------------------------------------------------------------

class _Memory:
    """One live buffer: its flat contents and which elements have been stored."""
    __slots__ = ("buffer", "data", "written", "readonly", "size")

    def __init__(self, buffer: Buffer, data=None, readonly=False):
        self.buffer = buffer
        self.size = buffer.size
        if data is None:
            self.data = np.full(self.size, _fill(buffer.dtype), dtype=buffer.dtype)
            self.written = np.zeros(self.size, dtype=bool)
        else:
            self.data = data
            self.written = np.ones(self.size, dtype=bool)
        self.readonly = readonly


_UNBOUND = object()


class _Races:
    """Accesses of one parallel loop to the buffers that live outside it, by iteration."""

    def __init__(self, loop, shared):
        self.loop = loop
        self.shared = shared          # ids of the _Memory objects allocated outside the loop
        self.iteration = None
        self.writer = {}              # (memory id, index) -> iteration
        self.reader = {}              # (memory id, index) -> iteration, or None if several

    def conflict(self, m, i, other, what):
        return (f"parallel loop {self.loop.var.name}: iterations {other} and "
                f"{self.iteration} both {what} {m.buffer.name}[{i}]")

    def write(self, m, i):
        key, it = (id(m), i), self.iteration
        w = self.writer.get(key, it)
        if w != it:
            return self.conflict(m, i, w, "write")
        r = self.reader.get(key, it)
        if r != it:
            return self.conflict(m, i, "other" if r is None else r, "access (one writes)")
        self.writer[key] = it
        return None

    def read(self, m, i):
        key, it = (id(m), i), self.iteration
        w = self.writer.get(key, it)
        if w != it:
            return self.conflict(m, i, w, "access (one writes)")
        r = self.reader.get(key, _UNBOUND)
        self.reader[key] = it if r is _UNBOUND or r == it else None
        return None


class _Interpreter:
    def __init__(self, func: PrimFunc, trace: bool, max_iterations: int):
        self.func = func
        self.env = {}          # Var -> value, for the variables in scope
        self.mem = {}          # Buffer -> _Memory, for the buffers in scope
        self.stores = [] if trace else None
        self.races = None      # _Races of the parallel loop running, if any
        self.counts = {"loads": 0, "stores": 0, "iterations": 0}
        self.max_iterations = max_iterations

    def fail(self, cls, msg):
        raise cls(f"interpret({self.func.name}): {msg}")

    def run(self, arrays, scalars) -> Run:
        func = self.func
        bufs = [p for p in func.params if isinstance(p, Buffer)]
        params = [p for p in func.params if isinstance(p, Var)]
        if len(arrays) > len(bufs):
            raise ValueError(f"interpret({func.name}): {len(arrays)} arrays for "
                             f"{len(bufs)} buffer parameters")
        if len(scalars) != len(params):
            raise ValueError(f"interpret({func.name}): takes {len(params)} scalar(s) "
                             f"({', '.join(p.name for p in params)}), got {len(scalars)}")
        body = self.stmt(func.body)            # IR typing errors surface here, before a run
        for buf, a in zip(bufs, arrays):
            a = np.asarray(a)
            if a.dtype != np.dtype(buf.dtype) or a.shape != tuple(buf.shape):
                raise ValueError(f"interpret({func.name}): input {buf.name} is "
                                 f"{buf.dtype}{list(buf.shape)}, got {a.dtype}{list(a.shape)}")
            self.mem[buf] = _Memory(buf, a.reshape(-1).copy(), readonly=True)
        outputs = bufs[len(arrays):]
        for buf in outputs:
            self.mem[buf] = _Memory(buf)
        for p, s in zip(params, scalars):
            self.env[p] = value(s, p.dtype)
        with np.errstate(all="ignore"):
            body()
        return Run([self.mem[b].data.reshape(b.shape) for b in outputs],
                   [self.mem[b].written.reshape(b.shape) for b in outputs],
                   self.stores, self.counts)

    # -- statements: each becomes a function of no arguments ------------------------------
    def stmt(self, s):
        env, mem, counts = self.env, self.mem, self.counts
        match s:
            case Seq():
                parts = [self.stmt(x) for x in s.stmts]

                def run_seq():
                    for p in parts:
                        p()
                return run_seq
            case For():
                lo, ext = self.index(s.min, "loop start"), self.index(s.extent, "loop extent")
                body, var, limit = self.stmt(s.body), s.var, self.max_iterations

                parallel = s.kind == ForKind.PARALLEL

                def run_for():                  # every kind (parallel, vectorized,
                    start, n = lo(), ext()      # unrolled) runs in order
                    counts["iterations"] += max(n, 0)
                    if counts["iterations"] > limit:
                        self.fail(InterpretError, f"more than {limit} loop iterations; "
                                  "pass a larger max_iterations for bigger inputs")
                    saved = env.get(var, _UNBOUND)
                    races = None
                    if parallel and self.races is None:
                        races = self.races = _Races(s, {id(m) for m in mem.values()})
                    for v in range(start, start + n):
                        env[var] = v
                        if races is not None:
                            races.iteration = v
                        body()
                    if races is not None:
                        self.races = None
                    self.restore(var, saved)
                return run_for
            case Store():
                return self.store(s)
            case IfThen():
                cond, then = self.typed(s.cond, "bool"), self.stmt(s.then)
                other = None if s.otherwise is None else self.stmt(s.otherwise)

                def run_if():
                    if cond():
                        then()
                    elif other is not None:
                        other()
                return run_if
            case Allocate():
                buf, body = s.buffer, self.stmt(s.body)

                def run_allocate():
                    if buf in mem:
                        self.fail(ScopeError, f"buffer {buf.name} allocated again inside "
                                  "its own allocation")
                    mem[buf] = _Memory(buf)                 # fresh on every entry
                    body()
                    del mem[buf]
                return run_allocate
            case ThreadReduce():          # serial: the accumulator holds it all
                return lambda: None
            case LetStmt():
                val, body, var = self.typed(s.value, s.var.dtype), self.stmt(s.body), s.var

                def run_let():
                    saved = env.get(var, _UNBOUND)
                    env[var] = val()
                    body()
                    self.restore(var, saved)
                return run_let
        self.fail(ScopeError, f"not a statement: {type(s).__name__}")

    def restore(self, var, saved):
        if saved is _UNBOUND:
            self.env.pop(var, None)
        else:
            self.env[var] = saved

    def store(self, s):
        buf, counts, stores = s.buffer, self.counts, self.stores
        if s.value.dtype != buf.dtype:
            self.fail(ScopeError, f"store of {s.value.dtype} into {buf.name}: {buf.dtype}")
        val = self.expr(s.value)
        idx = self.index(s.index, f"index of a store into {buf.name}")
        memory = self.memory(buf, "written")

        def run_store():
            m = memory()
            if m.readonly:
                self.fail(ScopeError, f"store into input buffer {buf.name}")
            v, i = val(), idx()
            if not 0 <= i < m.size:
                self.fail(OutOfBoundsError, f"store {buf.name}[{i}] outside the buffer "
                          f"({_decl(buf)}, {m.size} elements): {buf.name}[{s.index}]")
            races = self.races
            if races is not None and id(m) in races.shared:
                msg = races.write(m, i)
                if msg:
                    self.fail(RaceError, msg)
            m.data[i] = v
            m.written[i] = True
            counts["stores"] += 1
            if stores is not None:
                stores.append((buf.name, i, v))
        return run_store

    def memory(self, buf, what):
        mem = self.mem

        def lookup():
            m = mem.get(buf)
            if m is None:
                self.fail(ScopeError, f"buffer {buf.name} {what} outside its allocation")
            return m
        return lookup

    # -- expressions: each becomes a function of no arguments returning its value -------
    def index(self, e, what):
        if not dtypes.is_int(e.dtype):
            self.fail(ScopeError, f"{what} `{e}` is {e.dtype}, not an integer")
        return self.expr(e)

    def typed(self, e, dtype):
        if e.dtype != dtype:
            self.fail(ScopeError, f"`{e}` is {e.dtype} where {dtype} is expected")
        return self.expr(e)

    def expr(self, e):
        env = self.env
        match e:
            case Const():
                v = value(e.value, e.dtype)
                return lambda: v
            case Var():
                def var():
                    v = env.get(e, _UNBOUND)
                    if v is _UNBOUND:
                        self.fail(ScopeError, f"variable {e.name} read outside its binding")
                    return v
                return var
            case Load():
                return self.load(e)
            case Binary():
                return self.binary(e)
            case Compare():
                if e.a.dtype != e.b.dtype:
                    self.fail(ScopeError, f"operands of `{e}` are {e.a.dtype} and {e.b.dtype}")
                a, b, f = self.expr(e.a), self.expr(e.b), _CMP[e.op]
                return lambda: bool(f(a(), b()))
            case Unary():
                a, dt = self.typed(e.a, e.dtype), e.dtype
                if e.op == UnOp.NEG:
                    if dt == "bool":
                        self.fail(ScopeError, f"negation of a bool: `{e}`")
                    return (lambda: -a()) if dt in _FLOAT else (lambda: wrap(-a(), dt))
                if dt in _FLOAT:
                    self.fail(ScopeError, f"`~` of a float: `{e}`")
                return (lambda: not a()) if dt == "bool" else (lambda: wrap(~a(), dt))
            case Select():
                if e.t.dtype != e.dtype or e.f.dtype != e.dtype:
                    self.fail(ScopeError, f"arms of `{e}` are {e.t.dtype} and {e.f.dtype}, "
                              f"the select is {e.dtype}")
                c, t, f = self.typed(e.cond, "bool"), self.expr(e.t), self.expr(e.f)
                return lambda: t() if c() else f()   # only the chosen arm is evaluated
            case Cast():
                a, src, dst = self.expr(e.value), e.value.dtype, e.dtype
                return lambda: _cast(a(), src, dst)
            case Call():
                (arg,) = e.args
                if e.fn not in (Intrin.ISNAN, Intrin.ISINF, Intrin.ISFINITE, Intrin.SIGNBIT) \
                        and arg.dtype != e.dtype:
                    self.fail(ScopeError, f"operand of `{e}` is {arg.dtype}, the call {e.dtype}")
                a, f = self.expr(arg), intrinsic(e.fn, arg.dtype, e.dtype)
                return lambda: f(a())
        self.fail(ScopeError, f"{type(e).__name__} `{e}` has no meaning in the loop IR "
                  "(lowering should have removed it)")

    def binary(self, e):
        dt = e.dtype
        if e.a.dtype != dt or e.b.dtype != dt:
            self.fail(ScopeError, f"operands of `{e}` are {e.a.dtype} and {e.b.dtype}, "
                      f"the operation {dt}")
        a, b = self.expr(e.a), self.expr(e.b)
        if dt == "bool":
            if e.op == BinOp.AND:           # the right side may be guarded by the left
                return lambda: a() and b()
            if e.op == BinOp.OR:
                return lambda: a() or b()
            f = bool_op(e.op)
        elif dt in _FLOAT:
            f = float_op(e.op, dt)
        else:
            f = int_op(e.op, dt)
        return lambda: f(a(), b())

    def load(self, e):
        buf, counts = e.buffer, self.counts
        memory = self.memory(buf, "read")
        idx = self.index(e.index, f"index of a load from {buf.name}")
        # (an extent is an int, or an expression: a size, or a constant a check carries)
        checks = [(self.index(sub, "checked index"),
                   self.index(extent, "checked extent") if isinstance(extent, Expr) else
                   (lambda v=extent: v), tensor, text)
                  for sub, extent, tensor, text in (e.check or ())]
        fname = self.func.name
        conv = (lambda x: x) if buf.dtype in _FLOAT else \
            bool if buf.dtype == "bool" else int

        def run_load():
            m = memory()
            failed = None
            for sub, extent, tensor, text in checks:      # the user's run-time checks
                v, n = sub(), extent()
                if not 0 <= v < n:          # (the last that fails is reported, as the kernel's)
                    failed = v, n, tensor, text
            if failed is not None:
                v, extent, tensor, text = failed
                message = value_check_message(tensor)
                if message is not None:             # (NumPy's ValueError, as the kernel's)
                    raise ValueError(f"{fname}(): {message}")
                raise IndexError(f"{fname}(): index `{text}` into {tensor} is {v}, "
                                 f"outside [0, {extent})")
            i = idx()
            if not 0 <= i < m.size:
                self.fail(OutOfBoundsError, f"load {buf.name}[{i}] outside the buffer "
                          f"({_decl(buf)}, {m.size} elements): {e}")
            if not m.written[i]:
                self.fail(UninitializedReadError, f"load {buf.name}[{i}] of an element "
                          f"never written ({_decl(buf)}, {buf.scope}): {e}")
            races = self.races
            if races is not None and id(m) in races.shared:
                msg = races.read(m, i)
                if msg:
                    self.fail(RaceError, msg)
            counts["loads"] += 1
            return conv(m.data[i])
        return run_load


def _decl(buf):
    return f"{buf.name}: {buf.dtype}[{', '.join(map(str, buf.shape))}]"
