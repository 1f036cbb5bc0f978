"""Loop IR -> CUDA C, for NVRTC (through CuPy) or nvcc.

One PrimFunc becomes one translation unit of `extern "C" __global__` kernels, one per
top-level loop nest; the host launches them in order on one stream, so a nest that reads
what an earlier one wrote sees all of it. A global buffer allocated at the top level (an
intermediate) is allocated by the host and passed to the kernels that use it.

Inside a kernel:
  - a loop bound to blockIdx.* / threadIdx.* is not a loop: its variable is that index
    (plus the loop's start). The launch extent of an index is the largest extent bound
    to it in the kernel; a loop with a smaller one is guarded;
  - a serial loop is a C for loop (`#pragma unroll` when unrolled); a parallel loop is
    serial in a thread; a vectorized loop of stores moves each operand in one access of
    4, 8 or 16 bytes (float4: LDG.128 / STG.128) where its addresses are aligned, and is
    serial otherwise (VECTOR_HELPERS);
  - a per-thread ("local") buffer is a C array; a "shared" buffer is `__shared__`, and
    the loop nest that fills it is spread over every thread of the block (one flat,
    strided loop), with a barrier before it (the previous iteration's readers are done)
    and one after (every element is written before anyone reads);
  - a run-time index check that fails records its number and the index in the error
    slot (two int64 on the device) and reads index 0 instead.

Arithmetic follows the CPU code generator's semantics (NumPy's): signed integer
arithmetic on values wraps (it is done in unsigned), integer // and % by zero give 0,
float max/min propagate NaN, float-to-integer conversions saturate, `round` is to even.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

import numpy as np

from jitdl import dtypes
from jitdl.errors import CompileError, GPUScheduleError
from jitdl.ir.nodes import (Allocate, BinOp, Binary, Buffer, Call, Cast, CmpOp, Compare, Const,
                            For, ForKind, IfThen, Intrin, LetStmt, Load, PrimFunc, ReduceOp,
                            Select, Seq, Store, ThreadReduce, UnOp, Unary, Var)
from jitdl.ir.printer import expr_text
from jitdl.ir.analysis import (INF, bounds, memoised, reads_memory, stride,
                                unconditional_reads)
from jitdl.ir.visit import (NodeKey, expr_children, stmt_exprs, substitute, walk_expr,
                            walk_stmt, walk_unique)
from jitdl.lower.lower import identity

C_TYPE = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
          "int64": "long long", "uint8": "unsigned char", "float32": "float",
          "float64": "double"}
MEM_TYPE = dict(C_TYPE, bool="unsigned char")      # how a bool is stored: one byte
UNSIGNED = {"int8": "unsigned char", "int16": "unsigned short", "int32": "unsigned int",
            "int64": "unsigned long long"}
INT_RANGE = {"int8": (-128, 127), "int16": (-32768, 32767), "uint8": (0, 255)}

_BIN = {BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.DIV: "/", BinOp.AND: "&",
        BinOp.OR: "|", BinOp.XOR: "^", BinOp.SHL: "<<", BinOp.SHR: ">>"}
_CMP = {CmpOp.LT: "<", CmpOp.LE: "<=", CmpOp.GT: ">", CmpOp.GE: ">=", CmpOp.EQ: "==",
        CmpOp.NE: "!="}
_MATH = {Intrin.EXP: "exp", Intrin.LOG: "log", Intrin.SQRT: "sqrt", Intrin.TANH: "tanh",
         Intrin.ERF: "erf", Intrin.SIN: "sin", Intrin.COS: "cos", Intrin.TAN: "tan",
         Intrin.ATAN: "atan", Intrin.FLOOR: "floor", Intrin.CEIL: "ceil",
         Intrin.ROUND: "rint", Intrin.TRUNC: "trunc", Intrin.ABS: "fabs",
         Intrin.LOG1P: "log1p", Intrin.EXPM1: "expm1", Intrin.ASIN: "asin",
         Intrin.ACOS: "acos", Intrin.EXP2: "exp2", Intrin.LOG2: "log2", Intrin.LOG10: "log10",
         Intrin.SINH: "sinh", Intrin.COSH: "cosh"}
_BINARY_MATH = {BinOp.POW: "pow", BinOp.ATAN2: "atan2", BinOp.FMOD: "fmod"}

# helpers every translation unit starts with (NumPy's semantics where C's differ)
PRELUDE = r"""// helpers: NumPy's semantics where C's differ
#define JD_INLINE static __device__ __forceinline__
template <typename T> JD_INLINE T jd_fmax(T a, T b) {   // NaN wins, max(-0, 0) = 0
  return a != a ? a : b != b ? b : a > b ? a : b > a ? b : signbit(a) ? b : a;
}
template <typename T> JD_INLINE T jd_fmin(T a, T b) {   // NaN wins, min(-0, 0) = -0
  return a != a ? a : b != b ? b : a < b ? a : b < a ? b : signbit(a) ? a : b;
}
template <typename T, typename U> JD_INLINE T jd_shl(T a, T b) {   // NumPy: 0 past the width
  return (unsigned long long)(long long)b < sizeof(T) * 8 ? (T)((U)a << (int)b) : (T)0;
}
template <typename T> JD_INLINE T jd_ashr(T a, T b) {   // -1 or 0 past the width
  return (unsigned long long)(long long)b < sizeof(T) * 8 ? (T)(a >> (int)b)
                                                          : (T)(a < 0 ? -1 : 0);
}
template <typename T> JD_INLINE T jd_lshr(T a, T b) {
  return (unsigned long long)b < sizeof(T) * 8 ? (T)(a >> (int)b) : (T)0;
}
template <typename T> JD_INLINE T jd_fmod_floor(T a, T b) {   // remainder: divisor's sign
  T r = fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> JD_INLINE T jd_floordiv(T a, T b) {     // floor_divide of floats
  if (b == 0) return a / b;
  T m = fmod(a, b);
  T d = (a - m) / b;
  if (m != 0 && ((b < 0) != (m < 0))) d -= 1;
  T f = floor(d);
  return d - f > (T)0.5 ? f + 1 : f;
}
template <typename T> JD_INLINE T jd_pow(T x, T y) {   // one correctly rounded operation
  if (y == (T)2) return x * x;                        // where there is one, as on the CPU
  if (y == (T)1) return x;
  if (y == (T)-1) return (T)1 / x;
  if (y == (T)0.5 && x > (T)0) return sqrt(x);
  return pow(x, y);
}
template <typename T> JD_INLINE T jd_idiv(T a, T b) {   // x // 0 == 0, floor division
  if (b == 0) return 0;
  if (b == (T)-1) return (T)(0ull - (unsigned long long)a);    // (INT_MIN // -1 wraps)
  T q = a / b, r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;
}
template <typename T> JD_INLINE T jd_imod(T a, T b) {   // x % 0 == 0, the divisor's sign
  if (b == 0 || b == (T)-1) return 0;
  T r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
template <typename T> JD_INLINE T jd_udiv(T a, T b) { return b == 0 ? 0 : a / b; }
template <typename T> JD_INLINE T jd_umod(T a, T b) { return b == 0 ? 0 : a % b; }
template <typename T> JD_INLINE T jd_ipow(T x, T e) {   // a negative exponent gives 0
  if (e < 0) return 0;
  T r = 1;
  typedef unsigned long long U;     // (products wrap, as NumPy's: no signed overflow)
  while (e > 0) { if (e & 1) r = (T)((U)r * (U)x); x = (T)((U)x * (U)x); e >>= 1; }
  return r;
}
template <typename T> JD_INLINE T jd_sign(T x) { return x < 0 ? (T)-1 : x > 0 ? (T)1 : x; }
template <typename T> JD_INLINE T jd_imin(T a, T b) { return a < b ? a : b; }
template <typename T> JD_INLINE T jd_imax(T a, T b) { return a > b ? a : b; }
"""
# the run-time index check, in a unit whose kernels have checks
CHECK_HELPER = r"""JD_INLINE bool jd_ok(long long v, long long n, long long code, long long* err) {
  if (v >= 0 && v < n) return true;               // a run-time index check: on failure
  if (atomicCAS((unsigned long long*)err, 0ULL, (unsigned long long)code) == 0ULL)
    err[1] = v;                                    // record it (the caller reads index 0)
  return false;
}
"""
# vectorized loops (in a unit that has them): B bytes in one access, V a type of B bytes
VECTOR_HELPERS = r"""template <typename T> JD_INLINE bool jd_aligned(const T* p, long long i, int bytes) {
  return ((unsigned long long)(p + i) & (unsigned long long)(bytes - 1)) == 0;
}
template <typename V, typename T> JD_INLINE void jd_vload(T* lanes, const T* p, long long i) {
  *reinterpret_cast<V*>(lanes) = *reinterpret_cast<const V*>(p + i);
}
template <typename V, typename T> JD_INLINE void jd_vstore(T* p, long long i, const T* lanes) {
  *reinterpret_cast<V*>(p + i) = *reinterpret_cast<const V*>(lanes);
}
"""
_VECTOR_TYPE = {4: "unsigned int", 8: "uint2", 16: "uint4"}    # by bytes


@dataclass
class Kernel:
    """One `__global__` function and how to launch it."""
    name: str
    params: list            # Buffers and scalar Vars, in the kernel's order
    grid: list              # three launch extents: ints or int64 Exprs over the sizes
    block: list             # three ints
    shared_bytes: int = 0
    checks: bool = False    # takes the error slot (last parameter)
    vectors: bool = False   # has vector accesses (VECTOR_HELPERS)


@dataclass
class CudaModule:
    source: str
    kernels: list
    intermediates: list                 # global Buffers the host allocates
    checks: list = field(default_factory=list)   # (tensor, index text, extent) per check


def generate(func: PrimFunc, target, with_err=False) -> CudaModule:
    """The CUDA C of one lowered function: its kernels, how to launch each, and the
    intermediates the host allocates."""
    top = []                # (statement, global buffers allocated around it)
    intermediates = []

    def split(s):
        match s:
            case Seq():
                for x in s.stmts:
                    split(x)
            case Allocate() if s.buffer.scope == "global":
                intermediates.append(s.buffer)
                split(s.body)
            case _:
                top.append(s)
    split(func.body)
    params = list(func.params) + intermediates
    checks = []
    kernels, bodies = [], []
    for k, s in enumerate(top):
        kg = _KernelGen(f"{func.name}_k{k}", s, params, target, checks)
        kernels.append(kg.kernel)
        bodies.append(kg.text)
    head = [f"// jitdl: {func.name}, {len(kernels)} kernel(s) for {target.sm}",
            "// launched in order on one stream:"]
    for kn in kernels:
        grid = ", ".join(_launch_text(g) for g in kn.grid)
        block = ", ".join(map(str, kn.block))
        head.append(f"//   {kn.name}<<<({grid}), ({block})>>>")
    prelude = PRELUDE + (CHECK_HELPER if any(k.checks for k in kernels) else "") + \
        (VECTOR_HELPERS if any(k.vectors for k in kernels) else "")
    source = "\n".join(head) + "\n" + prelude + "\n" + "\n\n".join(bodies) + "\n"
    return CudaModule(source, kernels, intermediates, checks)


def _launch_text(e):
    return str(e) if isinstance(e, int) else _ExprText().expr(e)


def _stage_of(loop):
    """The stage whose loop `loop` is, as an error names it: the tensor of the last
    store in its body (a stage computed at the loop stores before its consumer does; an
    accumulator `T_acc` or a block's copy `T_l` is T's), or "" where it stores nothing."""
    last = None
    for x in walk_stmt(loop.body):
        if isinstance(x, Store):
            last = x.buffer.name
    return "" if last is None else re.sub(r"_(acc|l|best|pos)$", "", last)


def _loop_text(e):
    """An extent as a message shows it: the loop IR's text (`(X_n1 + 3) // 4`, as
    `f.lower` prints it), not the CUDA C's."""
    return str(e) if isinstance(e, int) else expr_text(e)


class _ExprText:
    """C text of expressions; subclassed by the kernel generator for names."""

    def __init__(self):
        self.narrow = False          # int64 indices emitted as int (_fits_int32)
        self.ranges = {}             # loop variable -> (lo, hi), inclusive
        self.names = {}         # Var or Buffer -> C identifier
        self.used = set()
        self.wrap = True        # values (not indices): signed arithmetic wraps

    def name(self, x):
        got = self.names.get(x)
        if got is None:
            base = "".join(c if c.isalnum() or c == "_" else "_" for c in x.name) or "v"
            if base[0].isdigit():
                base = "v" + base
            if base.lower().startswith("jd_") or base.startswith("__"):
                base = "u" + base       # jitdl's helpers and the compiler's own names
            got, n = base, 1
            while got in self.used or got in _RESERVED:
                got, n = f"{base}_{n}", n + 1
            self.used.add(got)
            self.names[x] = got
        return got

    def index(self, e):
        saved, self.wrap = self.wrap, False
        try:
            return self.expr(e)
        finally:
            self.wrap = saved

    def expr(self, e):
        match e:
            case Const():
                if e.dtype == "int64" and self.narrow and _in_int32(e):
                    return const_text(e.value, "int32")
                return const_text(e.value, e.dtype)
            case Var():
                return self.name(e)
            case Load():
                return self.load(e)
            case Binary():
                return self.binary(e)
            case Compare():
                a, b = self.expr(e.a), self.expr(e.b)
                if e.a.dtype == "uint8":
                    # (as C promotes them, written out: nvcc's front end rejects x < 0
                    # of an unsigned x as pointless, #186-D, where warnings are errors)
                    a, b = f"(int){a}", f"(int){b}"
                return f"({a} {_CMP[e.op]} {b})"
            case Unary():
                return self.unary(e)
            case Select():
                return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
            case Cast():
                return self.cast(e)
            case Call():
                return self.call(e)
        raise CompileError(f"cuda codegen: cannot emit {type(e).__name__} {e!r}")

    def wraps(self, e):
        """Signed arithmetic that must wrap: on values, not on indices. An int64
        expression of loop variables, sizes and constants is an index (it cannot
        overflow), so C's signed arithmetic, which the compiler optimises best, is kept."""
        return self.wrap and (e.dtype != "int64" or reads_memory(e))

    def once(self, text):
        """An operand's text, for a helper that writes it more than once."""
        return text

    def load(self, e):
        raise CompileError("cuda codegen: a load in a launch extent")

    def binary(self, e):
        a, b, dt, op = self.expr(e.a), self.expr(e.b), e.dtype, e.op
        ty = C_TYPE[dt]
        if dtypes.is_float(dt):
            if op == BinOp.DIV and isinstance(e.b, Const) and e.b.value == 0:
                # (a literal zero divisor is an error of nvcc's front end, #39-D, where
                # warnings are errors; NumPy's inf or NaN from one it does not see)
                zero = "__int_as_float(0)" if dt == "float32" else "__longlong_as_double(0LL)"
                b = f"(-{zero})" if math.copysign(1.0, e.b.value) < 0 else zero
            if op in (BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.DIV):
                return f"({a} {_BIN[op]} {b})"
            if op == BinOp.MAX:
                return f"jd_fmax<{ty}>({a}, {b})"
            if op == BinOp.MIN:
                return f"jd_fmin<{ty}>({a}, {b})"
            if op == BinOp.MOD:
                return f"jd_fmod_floor<{ty}>({a}, {b})"
            if op == BinOp.FLOORDIV:
                return f"jd_floordiv<{ty}>({a}, {b})"
            if op == BinOp.POW:
                return f"jd_pow<{ty}>({a}, {b})"
            if op in _BINARY_MATH:
                return f"{_math(_BINARY_MATH[op], dt)}({a}, {b})"
            raise CompileError(f"cuda codegen: {op} on {dt}")
        signed = dtypes.is_signed(dt)
        if dt == "bool" and op in (BinOp.AND, BinOp.OR):
            return f"({a} {'&&' if op == BinOp.AND else '||'} {b})"
        if dt == "int64" and self.narrow and not reads_memory(e) and \
                all(_in_int32(x) for x in (e.a, e.b) if isinstance(x, Const)):
            ty = "int"
        if op in (BinOp.FLOORDIV, BinOp.MOD) and isinstance(e.b, Const) and e.b.value > 0 \
                and bounds(e.a, self.ranges)[0] >= 0:
            # C's / and % floor where both are non-negative (a divisor known to the
            # compiler: a multiply and a shift, no branches)
            return f"({a} {'/' if op == BinOp.FLOORDIV else '%'} {b})"
        match op:
            case BinOp.MIN | BinOp.MAX:
                return f"jd_i{'min' if op == BinOp.MIN else 'max'}<{ty}>({a}, {b})"
            case BinOp.FLOORDIV:
                return f"jd_{'idiv' if signed else 'udiv'}<{ty}>({a}, {b})"
            case BinOp.MOD:
                return f"jd_{'imod' if signed else 'umod'}<{ty}>({a}, {b})"
            case BinOp.POW if not signed:
                # (in int, which holds every uint8: jd_ipow's test of a negative exponent
                # is pointless for an unsigned one, #186-D; the cast wraps the product)
                return f"(({ty})jd_ipow<int>({a}, {b}))"
            case BinOp.POW:
                return f"jd_ipow<{ty}>({a}, {b})"
            case BinOp.SHL:
                return f"jd_shl<{ty}, {UNSIGNED[dt] if signed else ty}>({a}, {b})"
            case BinOp.SHR:
                return f"jd_{'ashr' if signed else 'lshr'}<{ty}>({a}, {b})"
            case BinOp.ADD | BinOp.SUB | BinOp.MUL if signed and self.wraps(e):
                # (an unsigned short promotes to int, where 65535 * 65535 overflows: a
                # narrow product is taken in unsigned int and truncated by the cast)
                u = "unsigned int" if op == BinOp.MUL and dt in INT_RANGE else UNSIGNED[dt]
                return f"(({ty})(({u}){a} {_BIN[op]} ({u}){b}))"
            case _ if op in _BIN:
                text = f"({a} {_BIN[op]} {b})"
                # narrow types promote to int in C: bring the result back to the dtype
                return f"(({ty}){text})" if dt in INT_RANGE or dt == "int16" else text
        raise CompileError(f"cuda codegen: {op} on {dt}")

    def unary(self, e):
        a, dt = self.expr(e.a), e.dtype
        ty = C_TYPE[dt]
        if e.op == UnOp.NEG:
            if dtypes.is_float(dt):
                return f"(-{a})"
            if dtypes.is_signed(dt) and self.wraps(e):
                return f"(({ty})(0 - ({UNSIGNED[dt]}){a}))"
            return f"(({ty})(-{a}))"
        return f"(!{a})" if dt == "bool" else f"(({ty})(~{a}))"

    def cast(self, e):
        src, dst = e.value.dtype, e.dtype
        a = self.expr(e.value)
        if src == dst:
            return a
        if dst == "bool":
            return f"({a} != 0)"
        if dtypes.is_float(src) and not dtypes.is_float(dst) and dst in INT_RANGE:
            lo, hi = INT_RANGE[dst]     # saturating, NaN -> 0 (LLVM's fptosi.sat)
            a = self.once(a)
            return (f"(({C_TYPE[dst]})({a} != {a} ? 0 : "
                    f"fmax(({C_TYPE[src]}){lo}, fmin(({C_TYPE[src]}){hi}, {a}))))")
        # float -> int32/int64 saturates in the hardware conversion (NaN -> 0)
        return f"(({C_TYPE[dst]}){a})"

    def call(self, e):
        fn, x, src = e.fn, e.args[0], e.args[0].dtype
        a = self.expr(x)
        if not dtypes.is_float(src):
            if fn in (Intrin.FLOOR, Intrin.CEIL, Intrin.ROUND, Intrin.TRUNC):
                return a
            if fn == Intrin.ABS:        # (negated as unsigned: abs(INT_MIN) wraps, no UB)
                a = self.once(a)
                return f"(({C_TYPE[src]})({a} < 0 ? 0 - ({UNSIGNED[src]}){a} : " \
                    f"({UNSIGNED[src]}){a}))" if dtypes.is_signed(src) else a
            if fn == Intrin.SIGN:      # (unsigned: 0 or 1; x < 0 would be a warning)
                return f"jd_sign<{C_TYPE[src]}>({a})" if dtypes.is_signed(src) \
                    else f"(({C_TYPE[src]})({a} != 0))"
            if fn in (Intrin.ISNAN, Intrin.ISINF):
                return "false"
            if fn == Intrin.ISFINITE:
                return "true"
            if fn == Intrin.SIGNBIT:
                return f"({a} < 0)" if dtypes.is_signed(src) else "false"
            raise CompileError(f"cuda codegen: {fn.value} of {src}")
        one = const_text(1.0, src)
        if fn in _MATH:
            return f"{_math(_MATH[fn], src)}({a})"
        if fn == Intrin.RSQRT:
            return f"({one} / {_math('sqrt', src)}({a}))"
        if fn == Intrin.SIGMOID:
            return f"({one} / ({one} + {_math('exp', src)}(-{a})))"
        if fn == Intrin.SIGN:
            return f"jd_sign<{C_TYPE[src]}>({a})"
        if fn in (Intrin.ISNAN, Intrin.ISINF, Intrin.ISFINITE):
            return f"{fn.value}({a})"
        if fn == Intrin.SIGNBIT:
            return f"(signbit({a}) != 0)"
        raise CompileError(f"cuda codegen: intrinsic {fn.value}")


def _math(name, dtype):
    """The C math function of this name for the dtype: expf for float32, exp for float64."""
    return name + "f" if dtype == "float32" else name


def const_text(value, dtype):
    """A C literal of exactly this value and type."""
    if dtype == "bool":
        return "true" if value else "false"
    if dtypes.is_float(dtype):
        v = float(np.float32(value)) if dtype == "float32" else float(value)
        if math.isnan(v):
            return "__int_as_float(0x7fc00000)" if dtype == "float32" \
                else "__longlong_as_double(0x7ff8000000000000LL)"
        if math.isinf(v):
            inf = "__int_as_float(0x7f800000)" if dtype == "float32" \
                else "__longlong_as_double(0x7ff0000000000000LL)"
            return inf if v > 0 else f"(-{inf})"
        text = str(np.float32(v)) if dtype == "float32" else repr(v)   # shortest exact
        if "e" not in text and "." not in text:
            text += ".0"
        return f"{text}f" if dtype == "float32" else text
    v = int(value)
    if dtype == "int64":
        return "(-9223372036854775807LL - 1)" if v == -2 ** 63 else f"{v}LL"
    if dtype == "int32":
        return "(-2147483647 - 1)" if v == -2 ** 31 else str(v)
    return f"(({C_TYPE[dtype]}){v})"


_RESERVED = {"int", "float", "double", "char", "short", "long", "bool", "true", "false", "if",
             "else", "for", "while", "do", "return", "const", "auto", "signed", "unsigned",
             "void", "break", "continue", "switch", "case", "default", "sizeof", "static",
             "struct", "union", "new", "delete", "this", "class", "template", "typename",
             "min", "max", "exp", "log", "sqrt", "threadIdx", "blockIdx", "blockDim",
             "gridDim", "warpSize", "jd_err", "jd_f", "jd_tid", "jd_g", "signbit", "isnan",
             "isinf", "isfinite", "fmax", "fmin", "fabs", "atomicCAS", "fmaxf", "fminf"}
# the rest of C++17's keywords and CUDA's names (a tensor may be called anything)
_RESERVED |= {"alignas", "alignof", "and", "and_eq", "asm", "bitand", "bitor", "catch",
              "char16_t", "char32_t", "compl", "concept", "const_cast", "constexpr",
              "decltype", "dynamic_cast", "enum", "explicit", "export", "extern", "final",
              "friend", "goto", "inline", "mutable", "namespace", "noexcept", "not", "not_eq",
              "nullptr", "operator", "or", "or_eq", "override", "private", "protected",
              "public", "register", "reinterpret_cast", "requires", "static_assert",
              "static_cast", "thread_local", "throw", "try", "typedef", "typeid", "using",
              "virtual", "volatile", "wchar_t", "xor", "xor_eq", "NULL", "dim3", "half",
              "float2", "float4", "double2", "int2", "int4", "uint", "uint2", "uint4",
              "size_t", "assert",
              "printf", "malloc", "free", "memcpy", "memset", "abs", "JD_INLINE"}
# a buffer or variable may not take the name of a math function the kernel calls (a
# tensor named tanh would hide tanh(), jd.numpy.sin's output is named sin)
_RESERVED |= {n + f for n in (*_MATH.values(), *_BINARY_MATH.values(), "sqrt")
              for f in ("", "f")}


class _KernelGen(_ExprText):
    """The text and launch of one kernel: one top-level statement of the function."""

    def __init__(self, name, stmt, all_params, target, checks):
        super().__init__()
        self.target, self.checks = target, checks
        self.lines = []
        self.depth = 1
        self.has_checks = False
        self.check_vars = set()     # variables the index checks read
        self.divergent = []         # conditions around that differ between a block's
        #                             threads (their text, for errors)
        self.thread_vars = set()    # variables of the thread-bound loops around
        self.bound_vars = {}        # tag -> the variable of the thread-bound loop around
        self.thread_tags = {}       # the variable of each thread-bound loop around -> tag
        self.reductions = 0         # cross-thread reductions emitted (names their memory)
        self.shared = 0             # bytes of shared memory
        self.shared_uses = []       # (what, bytes) of each use of it, for the error
        self.shared_bufs = []       # (buffer name, elements) of each, for the error's line
        self.lanes = {}             # id(Load) -> its lane in a vector loop's registers
        self.vectors = False
        self.cse = None             # in a statement's value: (its shared nodes,
        #                             {(NodeKey, wrap): the local computed for it})
        self.hashes = {}            # structural hashes (NodeKey)
        self.locals = 0             # locals made for shared nodes (names them)
        bound = {}                  # tag -> [extent, ...]
        found = {}                  # tag -> {(loop var name, stage, extent text)}, for errors
        for s in walk_stmt(stmt):
            if isinstance(s, For) and s.kind.bound:
                bound.setdefault(s.kind.value, []).append(s.extent)
                ext = s.extent.value if isinstance(s.extent, Const) else _loop_text(s.extent)
                found.setdefault(s.kind.value, {})[(s.var.name, _stage_of(s), ext)] = None
            elif isinstance(s, ThreadReduce):
                # (its loop may be shorter, tightened to the extent it reads: guarded)
                bound.setdefault(s.kind.value, []).append(Const(s.extent, "int64"))

        # a loop name that loops of several stages have (k_i of a layer norm's mean and of
        # its variance) is given with its stage; a loop met twice (a partitioned loop's
        # main part and tail) once
        stages = {}
        for v, st, _ in (x for f in found.values() for x in f):
            stages.setdefault(v, set()).add(st)
        loops = {tag: [f"{v} of {st} over {ext}" if len(stages[v]) > 1 and st else
                       f"{v} over {ext}" for v, st, ext in f] for tag, f in found.items()}
        names = {tag: list(dict.fromkeys(v for v, _, _ in f)) for tag, f in found.items()}

        def bound_to(tags):
            named = [f"loop {x} bound to {t}" for t in tags for x in loops.get(t, ())]
            return f" ({'; '.join(named)})" if named else ""

        def names_of(tags):
            return [x for t in tags for x in names.get(t, ())]
        self.launch = {tag: _launch_extent(tag, exts, stmt) for tag, exts in bound.items()}
        block = [self.launch.get(f"threadIdx.{d}", 1) for d in "xyz"]
        grid = [self.launch.get(f"blockIdx.{d}", 1) for d in "xyz"]
        for d, n in zip("xyz", block):
            if not isinstance(n, int):
                raise GPUScheduleError(
                    f"cuda: kernel {name}: the extent bound to threadIdx.{d} must be a "
                    f"constant, got {_loop_text(n)}{bound_to([f'threadIdx.{d}'])}; split "
                    "the loop by a constant and bind the inner part",
                    loops=names_of([f"threadIdx.{d}"]))
        self.nthreads = block[0] * block[1] * block[2]
        if self.nthreads > target.max_threads_per_block or any(
                b > m for b, m in zip(block, target.max_block_dims)):
            raise GPUScheduleError(
                f"cuda: kernel {name}: a block of {block[0]}x{block[1]}x{block[2]} = "
                f"{self.nthreads} threads is over the device's limits of "
                f"{target.max_threads_per_block} threads and "
                f"{'x'.join(map(str, target.max_block_dims))} along x, y, z"
                f"{bound_to([f'threadIdx.{d}' for d in 'xyz'])}; split the loops and bind "
                "the inner parts", loops=names_of([f"threadIdx.{d}" for d in "xyz"]))
        for d, n, m in zip("xyz", grid, target.max_grid_dims):
            if isinstance(n, int) and n > m:
                raise GPUScheduleError(f"cuda: kernel {name}: {n} blocks bound to "
                                       f"blockIdx.{d} are over the device's limit of {m}"
                                       f"{bound_to([f'blockIdx.{d}'])}",
                                       loops=names_of([f"blockIdx.{d}"]))
        # indices in 32 bits where every one provably fits: 64-bit integer arithmetic
        # takes two or more instructions per operation on a GPU
        self.narrow, self.ranges = _fits_int32(stmt, self.launch, self.nthreads)
        self.ity = "int" if self.narrow else "long long"
        self.ll = "" if self.narrow else "LL"      # the suffix of index literals
        stmt = _split_fills(stmt)
        self.written = {x.buffer for x in walk_stmt(stmt) if isinstance(x, Store)}
        self.prefetched = {}        # id(fill statement) -> _Prefetch (serial_for)
        self.next_fetch = []        # the loads of the next step, after the fill's barrier
        with memoised():            # (the bounds of // and % operands)
            self.stmt(stmt)
        body = self.lines
        used_vars, used_bufs = set(), set()
        for s in walk_stmt(stmt):
            for e in stmt_exprs(s):
                for n in walk_unique(e):
                    if isinstance(n, Var):
                        used_vars.add(n)
                    elif isinstance(n, Load):
                        used_bufs.add(n.buffer)
            if isinstance(s, Store):
                used_bufs.add(s.buffer)
        for g in grid:
            if not isinstance(g, int):
                used_vars.update(n for n in walk_expr(g) if isinstance(n, Var))
        used_vars |= self.check_vars       # (a check's extent: a size the load lacks)
        kparams = [p for p in all_params
                   if (p in used_bufs if isinstance(p, Buffer) else p in used_vars)]
        decl = []
        for p in kparams:
            if isinstance(p, Buffer):
                ro = "const " if not any(isinstance(s, Store) and s.buffer is p
                                         for s in walk_stmt(stmt)) else ""
                decl.append(f"{ro}{MEM_TYPE[p.dtype]}* __restrict__ {self.name(p)}")
            else:
                decl.append(f"const {C_TYPE[p.dtype]} {self.name(p)}")
        if self.has_checks:
            decl.append("long long* __restrict__ jd_err")
        bounds = f"__launch_bounds__({self.nthreads}) " if self.nthreads > 1 else ""
        head = f'extern "C" __global__ void {bounds}{name}({", ".join(decl)}) {{'
        self.text = "\n".join([head] + body + ["}"])
        if self.shared > target.shared_bytes:
            uses = ", ".join(f"{what}: {n}" for what, n in self.shared_uses)
            raise GPUScheduleError(f"cuda: kernel {name} needs {self.shared} bytes of "
                                   f"shared memory ({uses}), over the device's "
                                   f"{target.shared_bytes} per block; use smaller tiles",
                                   buffers=[b for b, _ in self.shared_bufs])
        self.kernel = Kernel(name, kparams, grid, block, self.shared, self.has_checks,
                             self.vectors)

    def emit(self, line):
        self.lines.append("  " * self.depth + line)

    def load(self, e):
        v = self.lanes.get(id(e)) or f"{self.name(e.buffer)}[{self.index(e.index)}]"
        v = f"({v} != 0)" if e.buffer.dtype == "bool" else v
        if e.check:     # a failed check reads nothing (an empty buffer has no element 0)
            v = f"({self.checked(e)} ? {v} : {const_text(0, e.buffer.dtype)})"
        return v

    # -- expressions whose nodes are shared ---------------------------------------------
    def value(self, e):
        """The text of a statement's expression. A node it uses more than once (one
        structurally: `z = z * z * 0.5 + z * 0.25` repeated, whose tree triples with
        every step) is computed once, into a local declared before the
        statement; in a select's arm or on the right of && / || (evaluated only where the
        condition says: its reads may be valid only there), inside that arm."""
        shared = _shared_nodes(e, self.hashes)
        if shared is None:
            return self.expr(e)
        saved, self.cse = self.cse, (shared, {})
        try:
            return self.expr(e)
        finally:
            self.cse = saved

    def expr(self, e):
        if self.cse is None or isinstance(e, (Const, Var)):
            return super().expr(e)
        shared, made = self.cse
        node = NodeKey(e, self.hashes)
        key = (node, self.wrap or isinstance(e, Load))     # (a read's text is one text)
        if key in made:
            return made[key]
        if isinstance(e, Select):
            text = f"({self.expr(e.cond)} ? {self.arm(e.t)} : {self.arm(e.f)})"
        elif isinstance(e, Binary) and e.dtype == "bool" and e.op in (BinOp.AND, BinOp.OR):
            text = f"({self.expr(e.a)} {'&&' if e.op == BinOp.AND else '||'} {self.arm(e.b)})"
        else:
            text = super().expr(e)
        if node not in shared:
            return text
        made[key] = self.local(text)
        return made[key]

    def local(self, text):
        name = f"jd_c{self.locals}"
        self.locals += 1
        self.emit(f"const auto {name} = {text};")
        return name

    def once(self, text):
        if self.cse is None or text.isidentifier():
            return text
        return self.local(text)

    def arm(self, e):
        """The text of an expression evaluated only under a condition: the locals it
        needs are made inside it (an immediately invoked lambda) and forgotten after."""
        made = self.cse[1]
        saved, self.lines, known = self.lines, [], dict(made)
        self.depth += 1
        try:
            text = self.expr(e)
            body = self.lines
        finally:
            self.depth -= 1
            self.lines = saved
            made.clear()
            made.update(known)
        if not body:
            return text
        pad = "  " * self.depth
        return "[&]() {\n" + "\n".join(body) + f"\n{pad}  return {text};\n{pad}}}()"

    def checked(self, e):
        """Each data-dependent index checked (a failure sets the error slot): the
        condition that they all passed."""
        self.has_checks = True
        conds = []
        for sub, extent, tensor, text in e.check:
            self.checks.append((tensor, text, extent))
            code = len(self.checks)
            n = f"{extent}LL" if isinstance(extent, int) else self.index(extent)
            for x in ([sub] if isinstance(extent, int) else [sub, extent]):
                self.check_vars.update(v for v in walk_expr(x) if isinstance(v, Var))
            conds.append(f"jd_ok({self.index(sub)}, {n}, {code}LL, jd_err)")
        return f"({' && '.join(conds)})"

    # -- statements -----------------------------------------------------------------------
    def stmt(self, s):
        match s:
            case Seq():
                for x in s.stmts:
                    self.stmt(x)
            case Store():
                v = self.value(s.value)
                self.emit(f"{self.name(s.buffer)}[{self.index(s.index)}] = {v};")
            case For() if s.kind.bound:
                self.bound_for(s)
            case For():
                self.serial_for(s)
            case IfThen():
                differs = reads_memory(s.cond) or any(
                    isinstance(n, Var) and n in self.thread_vars for n in walk_expr(s.cond))
                if differs and s.otherwise is None and _block_wide(s.then):
                    sunk = _sink_guard(s.cond, s.then, self.thread_vars, self.thread_tags)
                    if sunk != s:
                        self.stmt(sunk)
                        return
                cond = self.value(s.cond)
                why = f"the condition {cond}" if differs else None
                self.emit(f"if ({cond}) {{")
                self.nested(s.then, why)
                if s.otherwise is not None:
                    self.emit("} else {")
                    self.nested(s.otherwise, why)
                self.emit("}")
            case ThreadReduce():
                self.thread_reduce(s)
            case Allocate():
                self.allocate(s)
            case LetStmt():
                self.emit("{")
                self.depth += 1
                ty = self.ity if s.var.dtype == "int64" else C_TYPE[s.var.dtype]
                self.emit(f"const {ty} {self.name(s.var)} = "
                          f"{self.value(s.value)};")
                self.stmt(s.body)
                self.depth -= 1
                self.emit("}")
            case _:
                raise CompileError(f"cuda codegen: cannot emit statement {type(s).__name__}")

    def nested(self, s, why=None):
        """s one level deeper; `why`: the condition that differs between threads around
        it, if any."""
        self.depth += 1
        if why:
            self.divergent.append(why)
        self.stmt(s)
        if why:
            self.divergent.pop()
        self.depth -= 1

    def serial_for(self, s):
        v = self.name(s.var)
        if s.kind == ForKind.VECTORIZED:
            plan = _vector_plan(s)
            if not isinstance(plan, str):
                self.emit(f"// vectorized {v}: one access per operand where aligned")
                self.vector_for(s, *plan)
                return
            self.emit(f"// vectorized {v}: a serial loop, because {plan}")
        lo = self.index(s.min)
        end = self.index(s.extent) if _is_zero(s.min) else \
            f"{lo} + {self.index(s.extent)}"
        fetches = self.prefetches(s)
        if fetches:
            # the block's copies of the next step are loaded into registers while this
            # step computes (their global loads overlap the arithmetic), then stored to
            # shared memory at the top of the next step: double buffering through
            # registers, one set of shared tiles
            self.emit("{")
            self.depth += 1
            for f in fetches:
                self.emit(f"{C_TYPE[f.store.buffer.dtype]} {f.regs}[{f.count}];")
            # (a loop of a symbolic extent may run no step: its first step's elements
            # may lie past its operands, as k.o's of a row shorter than the tile)
            runs = isinstance(s.extent, Const) and s.extent.value > 0
            if not runs:
                self.emit(f"if ({self.index(s.extent)} > 0) {{")
                self.depth += 1
            for f in fetches:
                self.fetch(f, s.min)
            if not runs:
                self.depth -= 1
                self.emit("}")
        if s.kind == ForKind.UNROLLED:
            self.emit("#pragma unroll")
        self.emit(f"for ({self.ity} {v} = {lo}; {v} < {end}; ++{v}) {{")
        if fetches:
            nxt = Binary(BinOp.ADD, s.var, Const(1, "int64"), "int64")
            self.next_fetch.append((f"({v} + 1 < {end})", nxt, fetches))
        self.nested(s.body)
        if fetches:
            self.next_fetch.pop()
        self.emit("}")
        if fetches:
            self.depth -= 1
            self.emit("}")

    def vector_for(self, s, stores, loads):
        """A vectorized loop whose stores and contiguous reads are each one access of
        4-16 bytes (_vector_plan): where every address is aligned to its size (CuPy's
        allocations are; a view's may not be), the reads go into registers, the loop runs
        unrolled on them and the stores leave from registers; otherwise the serial loop."""
        n = int(s.extent.value)
        lo = self.index(s.min)
        lane = f"{self.name(s.var)} - {lo}" if not _is_zero(s.min) else self.name(s.var)
        first = {s.var: s.min}
        self.vectors = True
        self.emit("{")
        self.depth += 1
        accesses = [(x.buffer, x.index) for x in stores] + \
            [(e.buffer, e.index) for e in loads]
        bases, at, aligned = {}, [], []     # (a base index shared by accesses: one name)
        vtype = [_VECTOR_TYPE[n * dtypes.itemsize(buf.dtype)] for buf, _ in accesses]
        for buf, index in accesses:
            text = self.index(substitute(index, first))
            if text not in bases:
                bases[text] = f"jd_vb{len(bases)}"
                self.emit(f"const {self.ity} {bases[text]} = {text};")
            at.append(bases[text])
            aligned.append(f"jd_aligned({self.name(buf)}, {at[-1]}, "
                           f"{n * dtypes.itemsize(buf.dtype)})")
        self.emit(f"if ({' && '.join(aligned)}) {{")
        self.depth += 1
        saved = self.lanes
        self.lanes = dict(saved)
        for k, e in enumerate(loads, len(stores)):
            ty = MEM_TYPE[e.buffer.dtype]
            self.emit(f"__align__(16) {ty} jd_vr{k}[{n}];")
            self.emit(f"jd_vload<{vtype[k]}>(jd_vr{k}, {self.name(e.buffer)}, {at[k]});")
            for same in loads[e]:
                self.lanes[id(same)] = f"jd_vr{k}[{lane}]"
        for k, x in enumerate(stores):
            self.emit(f"__align__(16) {MEM_TYPE[x.buffer.dtype]} jd_vr{k}[{n}];")
        self.emit("#pragma unroll")
        v = self.name(s.var)
        self.emit(f"for ({self.ity} {v} = {lo}; {v} < {int(s.min.value) + n}; "
                  f"++{v}) {{")
        self.depth += 1
        for k, x in enumerate(stores):
            self.emit(f"jd_vr{k}[{lane}] = {self.value(x.value)};")
        self.depth -= 1
        self.emit("}")
        self.lanes = saved
        for k, x in enumerate(stores):
            self.emit(f"jd_vstore<{vtype[k]}>({self.name(x.buffer)}, {at[k]}, jd_vr{k});")
        self.depth -= 1
        self.emit("} else {")
        self.nested(replace(s, kind=ForKind.SERIAL))
        self.emit("}")
        self.depth -= 1
        self.emit("}")

    def prefetches(self, s):
        """The fills of shared buffers allocated directly in serial loop s that can be
        loaded one step ahead: constant loop nests storing a value read from buffers the
        kernel never writes, with no run-time index checks, a few elements per thread."""
        if s.kind != ForKind.SERIAL or self.nthreads < 32:
            return []
        body, shared = s.body, []
        while isinstance(body, Allocate):
            if body.buffer.scope == "shared":
                shared.append(body.buffer)
            body = body.body
        found = []
        for x in (body.stmts if isinstance(body, Seq) else (body,)):
            if not any(_writes(x, b) for b in shared):
                continue
            loops, conds, inner = _nest(x)
            if not (loops and isinstance(inner, Store) and inner.buffer in shared
                    and inner.buffer.dtype in ("float32", "float64", "int32")):
                return []
            reads = [n for n in walk_expr(inner.value) if isinstance(n, Load)]
            if not reads or any(n.check or n.buffer.scope != "global" or n.buffer in
                                self.written for n in reads) or not any(
                    n is s.var for n in walk_expr(inner.value)):
                return []
            total = math.prod(int(lp.extent.value) for lp in loops)
            count = -(-total // self.nthreads)
            if count > 16:
                return []
            found.append(_Prefetch(x, loops, conds, inner, total, count,
                                   f"jd_pf{len(self.prefetched) + len(found)}", s.var))
        for f in found:             # (all of the loop's fills, or none)
            self.prefetched[id(f.stmt)] = f
        return found

    def flat_indices(self, loops, total):
        """The variables of a constant loop nest of `total` iterations from the flat
        iteration number jd_f (row-major)."""
        inner = 1
        for lp in reversed(loops):
            ext = int(lp.extent.value)
            flat = "jd_f" if inner == 1 else f"jd_f / {inner}{self.ll}"
            idx = flat if inner * ext == total else f"({flat}) % {ext}{self.ll}"
            lo = "" if _is_zero(lp.min) else f"{self.index(lp.min)} + "
            self.emit(f"const {self.ity} {self.name(lp.var)} = {lo}{idx};")
            inner *= ext

    def fetch(self, f, at):
        """Registers f.regs := the values f's fill stores, with its loop variable at `at`."""
        for r in range(f.count):
            self.flat_element(f, r, lambda c: f"{f.regs}[{r}] = {c};",
                              lambda e: substitute(e, {f.var: at}))

    def store_fetched(self, f):
        """f's shared buffer := the registers fetch() filled (this thread's share)."""
        for r in range(f.count):
            self.flat_element(f, r, lambda c, r=r: (
                f"{self.name(f.store.buffer)}[{self.index(f.store.index)}] = {f.regs}[{r}];"))

    def flat_element(self, f, r, text, subst=lambda e: e):
        """Element r of this thread's share of fill f: its indices from the flat number,
        then text(value) under f's conditions."""
        self.emit("{")
        self.depth += 1
        self.emit(f"const {self.ity} jd_f = ({self.ity})(threadIdx.x + blockDim.x * "
                  f"(threadIdx.y + blockDim.y * threadIdx.z)) + {r * self.nthreads}{self.ll};")
        guard = f.total % self.nthreads and r == f.count - 1
        if guard:
            self.emit(f"if (jd_f < {f.total}{self.ll}) {{")
            self.depth += 1
        self.flat_indices(f.loops, f.total)
        conds = [self.expr(subst(c)) for c in f.conds]
        line = text(self.expr(subst(f.store.value)))
        self.emit(f"if ({' && '.join(conds)}) {line}" if conds else line)
        if guard:
            self.depth -= 1
            self.emit("}")
        self.depth -= 1
        self.emit("}")

    def bound_for(self, s):
        tag = s.kind.value
        v = self.name(s.var)
        idx = f"({self.ity}){tag}"
        self.emit("{")
        self.depth += 1
        start = idx if _is_zero(s.min) else f"{self.index(s.min)} + {idx}"
        self.emit(f"const {self.ity} {v} = {start};")
        outer = self.bound_vars.get(tag)
        if outer is not None and any(n is outer for y in walk_stmt(s) for e in stmt_exprs(y)
                                     for n in walk_expr(e)):
            # (thread t runs the inner loop's step t for the outer loop's step t only: a
            # producer computed at a loop bound to threadIdx.x, its own loop bound to
            # threadIdx.x too, combined its parts of different outputs)
            raise GPUScheduleError(
                f"cuda: loop {s.var.name} is bound to {tag} inside loop {outer.name}, bound "
                f"to {tag} too, and reads it: each thread would run only its own step of "
                f"both; bind the inner loop to another index, or compute its stage at a loop "
                f"outside {outer.name}", loops=[s.var.name, outer.name])
        if s.kind.thread:
            self.thread_vars.add(s.var)
            self.thread_tags[s.var] = tag
            self.bound_vars[tag] = s.var
        if _same(s.extent, self.launch[tag]):
            self.stmt(s.body)
        elif s.kind.thread and _block_wide(s.body):
            # (the threads past the loop's extent still fill the block's copies and join
            # its reductions: only the rest of the body is guarded)
            end = s.extent if _is_zero(s.min) else Binary(BinOp.ADD, s.min, s.extent,
                                                             s.var.dtype)
            self.stmt(_sink_guard(Compare(CmpOp.LT, s.var, end), s.body, self.thread_vars,
                                  self.thread_tags))
        else:
            self.emit(f"if ({idx} < {self.index(s.extent)}) {{")
            self.nested(s.body, s.kind.thread and (
                f"loop {s.var.name} bound to {tag} over {_loop_text(s.extent)} of the "
                f"block's {_loop_text(self.launch[tag])} threads"))
            self.emit("}")
        self.thread_vars.discard(s.var)
        self.thread_tags.pop(s.var, None)
        if s.kind.thread:
            self.bound_vars[tag] = outer
        self.depth -= 1
        self.emit("}")

    def thread_reduce(self, s):
        """acc[0] combined across the block's threads along x: within each warp by
        shuffles (a tree of halving distances), then, for several warps per row of
        threads, through shared memory (one slot per warp) and a second shuffle round;
        the result is broadcast so every thread holds it. A loop narrower than the block
        along x (16 of 64 threads) is combined over the whole block: the threads past
        its extent skip its guarded steps and hold the identity, and they need the
        result too (they store it, or compute with it)."""
        n, full = s.extent, self.launch.get("threadIdx.x", 1)
        if s.kind != ForKind.THREAD_X or not isinstance(full, int) or n > full:
            raise GPUScheduleError(
                f"cuda: a reduction across threads must be bound to threadIdx.x with at "
                f"most the kernel's extent along x ({_loop_text(full)}), got "
                f"{s.kind.value} over {n}", buffers=[s.buffer.name])
        if n < full and not (full <= 32 and full & (full - 1) == 0 or full % 32 == 0):
            raise GPUScheduleError(
                f"cuda: the reduction of {s.buffer.name} across {n} threads along x runs in "
                f"a block {full} threads wide along x, whose other threads join it with "
                "the identity: that needs the block's extent along x to be a power of two "
                "up to 32 or a multiple of 32 (bind loops of such extents to threadIdx.x)",
                buffers=[s.buffer.name])
        n = full
        if n == 1:
            return
        if self.divergent:
            raise GPUScheduleError(
                f"cuda: the reduction of {s.buffer.name} across threads is under a condition "
                f"that differs between threads ({self.divergent[-1]}); every thread of the "
                "block must reach it: choose splits that divide the extents",
                buffers=[s.buffer.name])
        dt = s.buffer.dtype
        ty = C_TYPE[dt]
        wide = ty if dt in ("float32", "float64", "int32", "int64") else "int"
        acc = f"{self.name(s.buffer)}[0]"
        k = self.reductions
        self.reductions += 1
        v = f"jd_v{k}"
        # the lanes of each warp that are threads of the block: a block of 8x5 threads
        # has a last warp of 8 (whole groups of `width`, as n divides 32 or 32 divides n)
        last = self.nthreads % 32
        mask = "0xffffffffu" if last == 0 else f"0x{(1 << last) - 1:x}u"
        if last and self.nthreads > 32:
            bx, by = (self.launch.get(f"threadIdx.{d}", 1) for d in "xy")
            flat = f"threadIdx.x + {bx} * (threadIdx.y + {by} * threadIdx.z)"
            mask = f"({flat} < {self.nthreads - last} ? 0xffffffffu : {mask})"
        width = min(n, 32)

        def as_ty(x):
            return x if wide == ty else f"({ty}){x}"

        def rounds():
            o = width // 2
            while o >= 1:
                other = f"__shfl_down_sync({mask}, {v}, {o}, {width})"
                both = _combine(s.op, dt, as_ty(v), as_ty(other))
                self.emit(f"{v} = {both if wide == ty else f'({wide}){both}'};")
                o //= 2
        self.emit("{")
        self.depth += 1
        self.emit(f"{wide} {v} = {acc};")
        rounds()
        if n > 32:
            warps, groups = n // 32, self.nthreads // n
            slots = f"jd_red{k}"
            self.shared += groups * 32 * (8 if wide in ("double", "long long") else 4)
            self.shared_uses.append((f"the reduction of {s.buffer.name} across threads",
                                     groups * 32 * (8 if wide in ("double", "long long")
                                                    else 4)))
            ident = const_text(identity(s.op, dt).value, dt)    # (bool max: False)
            self.emit(f"__shared__ {wide} {slots}[{groups}][32];")
            self.emit("const int jd_g = threadIdx.y + blockDim.y * threadIdx.z;")
            self.emit(f"if ((threadIdx.x & 31) == 0) {slots}[jd_g][threadIdx.x >> 5] = {v};")
            self.emit("__syncthreads();")
            self.emit(f"{v} = (threadIdx.x & 31) < {warps} ? {slots}[jd_g][threadIdx.x & 31] "
                      f": ({wide}){ident};")
            rounds()
            self.emit("__syncthreads();")
        self.emit(f"{acc} = {as_ty(f'__shfl_sync({mask}, {v}, 0, {width})')};")
        self.depth -= 1
        self.emit("}")

    def allocate(self, s):
        """Buffers allocated one inside another are declared together; when one of them
        is shared, the statements of their body that fill shared buffers run on the
        whole block between barriers."""
        self.emit("{")
        self.depth += 1
        shared = []
        while isinstance(s, Allocate):
            self.declare(s.buffer)
            if s.buffer.scope == "shared":
                shared.append(s.buffer)
            s = s.body
        if shared:
            self.fill_and_use(s, shared)
        else:
            self.stmt(s)
        self.depth -= 1
        self.emit("}")

    def declare(self, buf):
        if buf.scope == "global":
            raise GPUScheduleError(
                f"cuda: buffer {buf.name} ({_shape_text(buf)}) is allocated inside a kernel; "
                f"a block buffer inside a GPU kernel must fit "
                f"{self.target.local_buffer_bytes} bytes per thread (or use shared memory)",
                buffers=[buf.name])
        if not isinstance(buf.size, int):
            raise GPUScheduleError(f"cuda: buffer {buf.name} has a symbolic size "
                                   f"({_shape_text(buf)}); a kernel's buffers need constant "
                                   "sizes", buffers=[buf.name])
        n = max(buf.size, 1)
        shared = buf.scope == "shared"
        if shared:
            self.shared += n * dtypes.itemsize(buf.dtype)
            self.shared_uses.append((f"{buf.name} {_shape_text(buf)}",
                                     n * dtypes.itemsize(buf.dtype)))
            self.shared_bufs.append((buf.name, n))
        # 16-byte aligned: runs of 4 floats read together become one vector load
        # (ld.shared.v4: a quarter of the instructions of a tile's inner loop)
        self.emit(f"{'__shared__ ' if shared else ''}__align__(16) {MEM_TYPE[buf.dtype]} "
                  f"{self.name(buf)}[{n}];")

    def fill_and_use(self, body, bufs):
        """The statements that write the shared buffers are spread over the block's
        threads, each run of them between two barriers (the previous readers are done;
        every element is written before anyone reads); the rest runs as usual."""
        stmts = body.stmts if isinstance(body, Seq) else (body,)
        filling = False
        group = []                  # the fills of the run being emitted
        for x in stmts:
            fills = any(_writes(x, b) for b in bufs)
            if fills and not filling:
                if self.divergent:
                    raise GPUScheduleError(
                        f"cuda: the block's copy {bufs[0].name} is filled under a condition "
                        f"that differs between threads ({self.divergent[-1]}: a bound loop "
                        "that does not divide its extent, or a guard around the loop it is "
                        "computed at): every "
                        "thread of a block must reach its barriers; choose splits that "
                        "divide the extents", buffers=[b.name for b in bufs])
                self.emit("__syncthreads();")
            elif filling and not fills:
                self.emit("__syncthreads();")
                self.fetch_next(group)
                group = []
            filling = fills
            if fills:
                group.append(x)
            if fills and id(x) in self.prefetched:
                self.store_fetched(self.prefetched[id(x)])
            elif fills:
                self.cooperative(x)
            else:
                self.stmt(x)
        if filling:
            self.emit("__syncthreads();")
            self.fetch_next(group)

    def fetch_next(self, group):
        """After the barrier that ends a run of fills: the next step's loads of those
        of them that are prefetched (a later run's registers are still to be stored)."""
        if not self.next_fetch:
            return
        cond, nxt, fetches = self.next_fetch[-1]
        mine = [f for f in fetches if any(f.stmt is x for x in group)]
        if not mine:
            return
        self.emit(f"if {cond} {{")
        self.depth += 1
        for f in mine:
            self.fetch(f, nxt)
        self.depth -= 1
        self.emit("}")

    def cooperative(self, s):
        """A loop nest run by the block's threads together: its perfectly nested constant
        loops become one flat loop, thread t taking elements t, t + T, t + 2T, ..."""
        loops, conds, s = _nest(s)
        # (a block whose own loop is bound to a thread index, lower._threads_share: each
        # thread computes its bound part at every step of the loops around it, which are
        # not spread over the threads, the bound ones among them)
        if not loops or self.nthreads == 1 or any(
                isinstance(x, For) and x.kind.thread for x in walk_stmt(s)):
            for c in conds:
                s = IfThen(c, s)
            for lp in reversed(loops):
                s = For(lp.var, lp.min, lp.extent, lp.kind, s)
            self.stmt(s)
            return
        total = math.prod(int(lp.extent.value) for lp in loops)
        self.emit(f"for ({self.ity} jd_f = ({self.ity})(threadIdx.x + blockDim.x * (threadIdx.y"
                  f" + blockDim.y * threadIdx.z)); jd_f < {total}{self.ll}; "
                  f"jd_f += {self.nthreads}) {{")
        self.depth += 1
        self.flat_indices(loops, total)
        for c in conds:
            s = IfThen(c, s)
        self.stmt(s)
        self.depth -= 1
        self.emit("}")


def _in_int32(c):
    return -2 ** 31 <= c.value < 2 ** 31


def _fits_int32(stmt, launch, nthreads):
    """Whether every int64 expression of the kernel (indices, loop bounds, their parts)
    provably lies in int32's range, by interval bounds over the loops' ranges: then they
    are computed as int. A size parameter, a local value of memory's (LetStmt) or an
    extent too large for it keeps the kernel's indices in 64 bits. An expression that
    reads memory (int64 data, or an index made of it: ids[i] * n) is emitted in 64 bits
    either way (_ExprText.binary), so it leaves the others narrow: int64 data made every
    index and loop counter of its kernel 64-bit. Returns that and the loop variables'
    ranges (those before the first that does not fit, if one does not)."""
    lo32, hi32 = -2 ** 31, 2 ** 31 - 1
    ranges = {}     # (a new dict at each loop: memoised() tells ranges apart by identity)
    with memoised():
        for s in walk_stmt(stmt):       # outer loops first: their ranges bound inner ones
            if isinstance(s, For):
                lo, top = bounds(s.min, ranges)
                _, ext = bounds(s.extent, ranges)
                if s.kind.bound:         # the launch extent, when larger (guarded)
                    launched = launch.get(s.kind.value)
                    ext = max(ext, launched if isinstance(launched, int) else INF)
                # (a loop split into a main part and a tail has one variable: both ranges)
                old = ranges.get(s.var, (lo, top + ext - 1))
                ranges = {**ranges, s.var: (min(lo, old[0]), max(top + ext - 1, old[1]))}
                # (+ nthreads: the flat loop of a block's copy steps past its end)
                if not (lo32 <= lo and top + ext + nthreads <= hi32):
                    return False, ranges
            elif isinstance(s, LetStmt) and s.var.dtype == "int64":
                if reads_memory(s.value):   # (declared as an index, in the index type)
                    return False, ranges
                ranges = {**ranges, s.var: bounds(s.value, ranges)}
            elif isinstance(s, ThreadReduce):
                continue
            for e in stmt_exprs(s):
                for n in walk_unique(e):    # (each node object once: trees share them)
                    # (a constant past int32, an identity of int64 data's max, is printed
                    # as one of 64 bits, and so is the operation it is an operand of)
                    if getattr(n, "dtype", None) == "int64" and not isinstance(n, Const):
                        lo, hi = bounds(n, ranges)
                        if not (lo32 <= lo and hi <= hi32) and not reads_memory(n):
                            return False, ranges
    return True, ranges


@dataclass
class _Prefetch:
    """A fill of a shared buffer loaded one step of loop `var` ahead (serial_for)."""
    stmt: object
    loops: list
    conds: list
    store: Store
    total: int
    count: int
    regs: str
    var: Var


def _vector_plan(s):
    """(stores, reads) of a vectorized loop that vector_for can run, or why not (a
    string): a constant loop of stores to distinct global buffers, none of which it reads,
    each at an index with stride 1 in the loop variable over 4, 8 or 16 bytes; the reads:
    {read: [equal reads]} of global buffers at such indices, made whatever the values (a
    read in a select's arm or behind && may be valid only under its condition) and not
    checked at run time."""
    if not (isinstance(s.extent, Const) and isinstance(s.min, Const)):
        return "its extent is not a constant"
    n = int(s.extent.value)
    stores = s.body.stmts if isinstance(s.body, Seq) else (s.body,)
    if not all(isinstance(x, Store) for x in stores):
        return "its body is not only stores (a loop, a condition or a local value)"
    written = {x.buffer for x in stores}
    if len(written) != len(stores):
        return "it stores to a buffer twice"

    def narrow(buf, index):         # why an access is not one vector access, or None
        if buf.scope != "global":
            return f"{buf.name} is a {buf.scope} buffer"
        if n * dtypes.itemsize(buf.dtype) not in _VECTOR_TYPE:
            return (f"{n} {buf.dtype} lanes of {buf.name} are {n * dtypes.itemsize(buf.dtype)}"
                    f" bytes (a vector access moves 4, 8 or 16)")
        if stride(index, s.var, (s.var,)) != 1:
            return f"its store to {buf.name} is not contiguous in {s.var.name}"
        return None
    for x in stores:
        why = narrow(x.buffer, x.index)
        if why:
            return why
    loads = [e for x in stores for e in walk_expr(x.value) if isinstance(e, Load)]
    for e in loads:
        if e.buffer in written:
            return f"it reads {e.buffer.name}, which it writes"
    made = [e for x in stores for e in unconditional_reads(x.value)]
    reads = {}
    unchecked = [e for e in loads if not e.check]   # (a check runs element by element)

    def same(e):
        return next((r for r in reads if r.buffer is e.buffer and r.index == e.index), None)
    for e in unchecked:
        if any(e is m for m in made) and not narrow(e.buffer, e.index) and same(e) is None:
            reads[e] = []
    for e in unchecked:     # (each read of one of them, a conditional one too)
        rep = same(e)
        if rep is not None:
            reads[rep].append(e)
    return stores, reads


# a statement's expression whose tree (a repeated subexpression counted at each use)
# passes this many nodes has its repeated nodes computed once (value); smaller ones are
# printed whole, as the compiler's own CSE then has little to do
_TREE_TEXT = 256


def _shared_nodes(e, hashes):
    """The NodeKeys of the nodes of e that are operands of more than one (structurally)
    distinct node, other than constants and variables, when e's text would have more
    than _TREE_TEXT nodes (possibly none: an operand written three times, once()); else
    None."""
    refs, order, seen, stack = {}, [], set(), [(e, False)]
    while stack:                        # the distinct nodes, children first
        n, done = stack.pop()
        key = NodeKey(n, hashes)
        if done:
            order.append((key, n))
            continue
        if key in seen:
            continue
        seen.add(key)
        stack.append((n, True))
        for c in expr_children(n):
            ck = NodeKey(c, hashes)
            refs[ck] = refs.get(ck, 0) + 1
            stack.append((c, False))
    tree = {}               # (nodes of the text: an operand written 3 times counts 3 times)
    for key, n in order:
        tree[key] = 1 + _copies(n) * sum(tree[NodeKey(c, hashes)] for c in expr_children(n))
    if tree[NodeKey(e, hashes)] <= _TREE_TEXT:
        return None
    return {k for k, v in refs.items() if v > 1 and not isinstance(k.e, (Const, Var))}


def _copies(e):
    """How many times the text of e writes its operand (_ExprText.cast and .call write a
    saturating cast's and an integer abs's three times: once())."""
    if isinstance(e, Cast) and dtypes.is_float(e.value.dtype) and \
            not dtypes.is_float(e.dtype) and e.dtype in INT_RANGE:
        return 3
    if isinstance(e, Call) and e.fn == Intrin.ABS and dtypes.is_signed(e.args[0].dtype):
        return 3
    return 1


def _nest(s):
    """(constant loops, conditions, innermost statement) of a block's copy nest."""
    loops, conds = [], []
    while True:
        if isinstance(s, For) and isinstance(s.extent, Const) and not s.kind.bound:
            loops.append(s)
            s = s.body
        elif isinstance(s, IfThen) and s.otherwise is None and (
                isinstance(s.then, For) or isinstance(s.then, Store) and loops):
            conds.append(s.cond)
            s = s.then
        else:
            return loops, conds, s


def _block_wide(s):
    """Whether s holds what every thread of the block must reach: a shared buffer (its
    fills run between barriers) or a reduction across threads."""
    return any(isinstance(x, ThreadReduce) or isinstance(x, Allocate) and
               x.buffer.scope == "shared" for x in walk_stmt(s))


def _sink_guard(cond, s, thread_vars, tags):
    """`if cond: s`, where cond differs between a block's threads (a bound loop or a
    split that does not divide its extent) and s fills shared copies or reduces across
    threads, as the same statements with the guard moved down past them: every thread
    runs the loops (bound ones too) and fills around them (a copy's fill is spread over
    the whole block and guarded by its own bounds) and joins the reductions, a thread
    past the extent with its accumulator at the reduction's identity; the rest stays
    guarded. Loops whose bounds differ between threads, conditions or values that read
    memory, fills that differ between threads and reductions along an index cond reads
    (a thread past the extent would drop its part of the active threads' rows) keep the
    guard around them (code generation then refuses a barrier under it); tags: the
    thread-bound loops' variables -> their indices.
        if i < n:                          alloc A_cache (shared)
          alloc A_cache (shared)     ->     A_cache[...] = A[...]
          A_cache[...] = A[...]             if i < n:
          acc = f(A_cache)                    acc = f(A_cache)
          reduce acc across threads         if not i < n: acc = 0
                                            reduce acc across threads"""
    varying = set(thread_vars)
    along = {tags[n] for n in walk_expr(cond) if isinstance(n, Var) and n in tags}
    shared = []                 # the shared buffers allocated on the way down

    def differs(e):
        return reads_memory(e) or any(isinstance(n, Var) and n in varying
                                      for n in walk_expr(e))

    def sink(x):
        fills = any(_writes(x, b) for b in shared)
        if fills and not any(isinstance(n, Var) and n in varying for y in walk_stmt(x)
                             for e in stmt_exprs(y) for n in walk_expr(e)):
            return x        # a fill: the block's threads run it together, each a share
        if not fills and not _block_wide(x):
            return IfThen(cond, x)
        match x:
            case ThreadReduce() if x.kind.value not in along:
                idle = Store(x.buffer, Const(0, "int64"), identity(x.op, x.buffer.dtype))
                return Seq((IfThen(Unary(UnOp.NOT, cond, "bool"), idle), x))
            case Seq():
                return Seq(tuple(sink(y) for y in x.stmts))
            case Allocate():
                if x.buffer.scope == "shared":
                    shared.append(x.buffer)
                return replace(x, body=sink(x.body))
            case For() if not differs(x.min) and not differs(x.extent):
                if x.kind.thread:
                    varying.add(x.var)
                return replace(x, body=sink(x.body))
            case LetStmt() if not reads_memory(x.value):
                if differs(x.value):
                    varying.add(x.var)
                return replace(x, body=sink(x.body))
            case IfThen() if not reads_memory(x.cond):
                return replace(x, then=sink(x.then), otherwise=None if x.otherwise is None
                               else sink(x.otherwise))
        return IfThen(cond, x)
    return sink(s)


def _split_fills(s):
    """s with each copy into a shared buffer split into simple nests (loops, conditions,
    one store), one per store: where a tile does not divide the shape, the copy's loops
    come partitioned into a full part and a guarded rest (`for r: {for c in 0..104: ...;
    for c in 104..128: if ...}`), which as one nest would spread only its outer loop over
    the block's threads. The copies store values loaded from global memory into distinct
    elements, so running their loops apart changes nothing but the order."""
    match s:
        case Seq():
            return Seq(tuple(_split_fills(x) for x in s.stmts))
        case For() | LetStmt():
            return replace(s, body=_split_fills(s.body))
        case IfThen():
            return replace(s, then=_split_fills(s.then), otherwise=None if s.otherwise is None
                           else _split_fills(s.otherwise))
        case Allocate():
            chain, body = [], s
            while isinstance(body, Allocate):
                chain.append(body)
                body = body.body
            shared = [a.buffer for a in chain if a.buffer.scope == "shared"]
            parts = []
            for x in (body.stmts if isinstance(body, Seq) else (body,)):
                fission = shared and any(_writes(x, b) for b in shared) and _copy_only(x)
                parts.extend(_fission(x) if fission else [_split_fills(x)])
            body = parts[0] if len(parts) == 1 else Seq(tuple(parts))
            for a in reversed(chain):
                body = replace(a, body=body)
            return body
    return s


def _copy_only(s):
    """Only constant loops, conditions and stores of values read from global memory."""
    for x in walk_stmt(s):
        if isinstance(x, For) and (x.kind.bound or not isinstance(x.extent, Const)):
            return False
        if isinstance(x, IfThen) and x.otherwise is not None:
            return False
        if not isinstance(x, (For, IfThen, Seq, Store)):
            return False
        if isinstance(x, Store) and any(isinstance(n, Load) and n.buffer.scope != "global"
                                        for n in walk_expr(x.value)):
            return False
    return True


def _fission(s):
    """The simple nests of a copy (see _split_fills)."""
    match s:
        case Seq():
            return [n for x in s.stmts for n in _fission(x)]
        case For():
            return [replace(s, body=b) for b in _fission(s.body)]
        case IfThen():
            return [replace(s, then=b) for b in _fission(s.then)]
    return [s]


def _combine(op, dtype, a, b):
    """C text combining two partial results of a reduction; both are evaluated (b may be
    a warp shuffle, which every thread of the warp must reach: not || or &&, which
    would skip it where a decides)."""
    ty = C_TYPE[dtype]
    fl = dtypes.is_float(dtype)
    match op:
        case ReduceOp.SUM | ReduceOp.PROD if dtypes.is_signed(dtype):
            # (wrapping, in unsigned: a signed overflow is undefined in C)
            u = "unsigned int" if dtype in INT_RANGE else UNSIGNED[dtype]
            return f"(({ty})(({u}){a} {'+' if op == ReduceOp.SUM else '*'} ({u}){b}))"
        case ReduceOp.SUM:
            return f"({a} + {b})"
        case ReduceOp.PROD:
            return f"({a} * {b})"
        case ReduceOp.MAX:
            return f"jd_{'f' if fl else 'i'}max<{ty}>({a}, {b})"
        case ReduceOp.MIN:
            return f"jd_{'f' if fl else 'i'}min<{ty}>({a}, {b})"
        case ReduceOp.ANY:
            return f"((bool){a} | (bool){b})"
        case ReduceOp.ALL:
            return f"((bool){a} & (bool){b})"
    raise CompileError(f"cuda: {op.value} cannot be combined across threads")


def _writes(s, buf):
    return any(isinstance(x, Store) and x.buffer is buf for x in walk_stmt(s))


def _is_zero(e):
    return isinstance(e, Const) and e.value == 0


def _same(e, launch):
    if isinstance(launch, int):
        return isinstance(e, Const) and e.value == launch
    return e == launch


def _launch_extent(tag, extents, stmt):
    """The launch extent of one index: the largest extent bound to it (an int, or an
    int64 expression over the function's scalars, checked to use no loop variable)."""
    loop_vars = {s.var for s in walk_stmt(stmt) if isinstance(s, For)}
    consts, exprs = [], []
    for e in extents:
        if isinstance(e, Const):
            consts.append(int(e.value))
            continue
        if any(isinstance(n, Var) and n in loop_vars for n in walk_expr(e)):
            raise GPUScheduleError(f"cuda: the extent of a loop bound to {tag} depends on "
                                   "an enclosing loop; a launch extent must be known at the "
                                   "launch")
        if not any(x == e for x in exprs):
            exprs.append(e)
    if not exprs:
        return max(consts)
    out = exprs[0]
    for e in exprs[1:] + ([Const(max(consts), "int64")] if consts else []):
        out = Binary(BinOp.MAX, out, e, "int64")
    return out


def _shape_text(buf):
    return "x".join(str(d) if isinstance(d, int) else _ExprText().expr(d) for d in buf.shape)

