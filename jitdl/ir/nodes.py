"""Every expression and statement node of jitdl, TE-level and loop-level, in one place.

Nodes are frozen, slotted dataclasses compared structurally, except the named objects
(Var, IterVar, Buffer) which are compared by identity. Change a node with
dataclasses.replace. Expressions overload Python's operators so that tracing a user's
function builds IR (jitdl.ir.build installs them); `==` stays structural equality, the
capture layer rewrites the user's `==` and `!=` into `eq`/`ne` nodes (and an `==` operator
written in a helper the definition calls builds one: build.written_in_definition).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Optional


class BinOp(enum.Enum):
    ADD = "+"
    SUB = "-"
    MUL = "*"
    DIV = "/"
    FLOORDIV = "//"
    MOD = "%"
    MIN = "min"
    MAX = "max"
    POW = "pow"
    AND = "&"
    OR = "|"
    XOR = "^"
    SHL = "<<"
    SHR = ">>"
    ATAN2 = "atan2"
    FMOD = "fmod"


class CmpOp(enum.Enum):
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    EQ = "=="
    NE = "!="


class UnOp(enum.Enum):
    NEG = "-"
    NOT = "~"


class Intrin(enum.Enum):
    EXP = "exp"
    LOG = "log"
    SQRT = "sqrt"
    RSQRT = "rsqrt"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    ERF = "erf"
    SIN = "sin"
    COS = "cos"
    TAN = "tan"
    ATAN = "atan"
    ASIN = "asin"
    ACOS = "acos"
    EXP2 = "exp2"
    LOG2 = "log2"
    LOG10 = "log10"
    ABS = "abs"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    TRUNC = "trunc"
    SIGN = "sign"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    SINH = "sinh"
    COSH = "cosh"
    ISNAN = "isnan"
    ISINF = "isinf"
    ISFINITE = "isfinite"
    SIGNBIT = "signbit"          # the sign bit of a float (set for -0.0 and -NaN)


class ReduceOp(enum.Enum):
    SUM = "sum"
    PROD = "prod"
    MAX = "max"
    MIN = "min"
    ANY = "any"
    ALL = "all"
    ARGMAX = "argmax"    # int64 position of the first maximum
    ARGMIN = "argmin"


class ForKind(enum.Enum):
    SERIAL = "for"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    # a loop bound to a GPU grid or block index (the CUDA target): one iteration per
    # block or thread; everywhere but CUDA code generation it is a serial loop
    BLOCK_X = "blockIdx.x"
    BLOCK_Y = "blockIdx.y"
    BLOCK_Z = "blockIdx.z"
    THREAD_X = "threadIdx.x"
    THREAD_Y = "threadIdx.y"
    THREAD_Z = "threadIdx.z"

    @property
    def bound(self):
        """Bound to a GPU block or thread index."""
        return "Idx." in self.value

    @property
    def thread(self):
        """Bound to a thread index (within a block)."""
        return self.value.startswith("threadIdx")


class Expr:
    """Base of scalar expressions. Python's operators on expressions build IR; they are
    defined with the builders (jitdl.ir.build.Operators), which need these nodes."""

    __slots__ = ("_h",)     # the structural hash, once computed (see _remember_hashes)
    weak = False


@dataclass(frozen=True, slots=True, repr=False)
class Const(Expr):
    value: object
    dtype: str
    weak: bool = False


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(Expr):
    """A named scalar: a loop index (int64) or a scalar kernel parameter. Identity-compared."""
    name: str
    dtype: str = "int64"
    weak: bool = False


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class SizeVar(Var):
    """The size of one dimension of a dynamic argument: an int64 kernel parameter that
    the runtime fills from the array's shape at each call."""


@dataclass(frozen=True, slots=True, repr=False)
class Binary(Expr):
    op: BinOp
    a: Expr
    b: Expr
    dtype: str
    weak: bool = False


@dataclass(frozen=True, slots=True, repr=False)
class Compare(Expr):
    op: CmpOp
    a: Expr
    b: Expr
    dtype = "bool"


@dataclass(frozen=True, slots=True, repr=False)
class Unary(Expr):
    op: UnOp
    a: Expr
    dtype: str
    weak: bool = False


@dataclass(frozen=True, slots=True, repr=False)
class Call(Expr):
    fn: Intrin
    args: tuple
    dtype: str
    weak: bool = False


@dataclass(frozen=True, slots=True, repr=False)
class Select(Expr):
    cond: Expr
    t: Expr
    f: Expr
    dtype: str
    weak: bool = False


@dataclass(frozen=True, slots=True, repr=False)
class Cast(Expr):
    value: Expr
    dtype: str


@dataclass(frozen=True, slots=True, repr=False)
class Access(Expr):
    """A TE-level read of tensor element `tensor[indices]` (one index per dimension)."""
    tensor: object  # jitdl.te.tensor.Tensor
    indices: tuple
    loc: object = field(default=None, compare=False, hash=False)
    # an index read data before stages were inlined into it: checked at run time, as
    # the static prover never saw the inlined expression
    checked: bool = field(default=False, compare=False, hash=False)
    # run-time checks that ride on this read: ((index, extent, tensor name), ...) of a
    # data-dependent read of a stage inlined into it whose body ignores (or folds) that
    # index, so the read of the inlined stage itself left nothing to check
    carried: tuple = field(default=(), compare=False, hash=False)

    @property
    def dtype(self):
        return self.tensor.dtype


@dataclass(frozen=True, slots=True, eq=False)
class IterVar:
    """A loop axis of a compute stage: data-parallel or reduction, over [min, min + extent)."""
    var: Var
    min: int
    extent: int
    reduce: bool = False

    @property
    def name(self):
        return self.var.name

    def __repr__(self):
        kind = "reduce_axis" if self.reduce else "axis"
        return f"{kind}({self.var.name}, {self.min}, {self.min + self.extent})"


@dataclass(frozen=True, slots=True, repr=False)
class Reduce(Expr):
    """A TE-level reduction of `body` over `axes`, counting only points where `where` holds."""
    op: ReduceOp
    body: Expr
    axes: tuple  # of IterVar
    where: Optional[Expr]
    dtype: str


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A flat, row-major array of the loop IR: an argument, an intermediate or a local."""
    name: str
    dtype: str
    shape: tuple
    scope: str = "global"   # "global" (argument or heap), "local" (stack/registers)

    @property
    def size(self):
        """Its element count: an int, or an int64 Expr when a dimension is symbolic."""
        n = 1
        for d in self.shape:
            n = d if isinstance(n, int) and n == 1 else n * d
        return n

    def __repr__(self):
        return self.name


@dataclass(frozen=True, slots=True, repr=False)
class Load(Expr):
    """A loop-IR read of `buffer` at flat `index`. `check` asks for a runtime bounds check
    (an index that compile-time analysis could not prove; see jitdl.lower.bounds)."""
    buffer: Buffer
    index: Expr
    check: Optional[tuple] = None  # (tensor name, index text) when checked at run time

    @property
    def dtype(self):
        return self.buffer.dtype


class Stmt:
    """Base of loop-IR statements (printed by jitdl.ir.printer)."""
    __slots__ = ("_h",)     # as Expr's


@dataclass(frozen=True, slots=True, repr=False)
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt


@dataclass(frozen=True, slots=True, repr=False)
class Store(Stmt):
    buffer: Buffer
    index: Expr
    value: Expr


@dataclass(frozen=True, slots=True, repr=False)
class Seq(Stmt):
    stmts: tuple


@dataclass(frozen=True, slots=True, repr=False)
class IfThen(Stmt):
    cond: Expr
    then: Stmt
    otherwise: Optional[Stmt] = None


@dataclass(frozen=True, slots=True, repr=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True, repr=False)
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True, repr=False)
class ThreadReduce(Stmt):
    """Combine `buffer[0]` (a per-thread accumulator) with `op` across the `extent`
    threads of a GPU block along `kind` (threadIdx.x), leaving the result in every
    thread's `buffer[0]`. It follows the reduction loop bound to those threads; where
    that loop runs serially (the CPU, the interpreter) the accumulator already holds the
    whole reduction, and this statement does nothing."""
    op: ReduceOp
    buffer: Buffer
    kind: ForKind
    extent: int


@dataclass(frozen=True, slots=True, repr=False)
class PrimFunc:
    """A lowered kernel: its parameters (Buffers, then scalar Vars) and its body."""
    name: str
    params: tuple
    body: Stmt


# While a definition is traced (jitdl.ir.build.user_code: `traced` counts them, in all
# threads), a hash of an expression is first shown to `hash_check` (build.hash_check: a
# dynamic size the user's code hashes is an error); None otherwise, which costs a hash
# one test
traced = 0
hash_check = None


def _remember_hashes(*classes):
    """A structural hash walks the whole tree below a node, and trees share subtrees
    (`z = z * z` k times is a tree of 2^k nodes from k objects): each node keeps its hash
    once computed, in a slot outside the dataclass fields (so neither compared nor
    pickled: a string's hash differs between processes)."""
    for cls in classes:
        def __hash__(self, fields_hash=cls.__hash__):
            if traced:
                hash_check(self)
            try:
                return self._h
            except AttributeError:
                h = fields_hash(self)
                object.__setattr__(self, "_h", h)
                return h
        cls.__hash__ = __hash__


_remember_hashes(Const, Binary, Compare, Unary, Call, Select, Cast, Access, Reduce, Load,
                 For, Store, Seq, IfThen, Allocate, LetStmt, ThreadReduce)


def _size_hash(self):
    if traced:
        hash_check(self)
    return object.__hash__(self)


SizeVar.__hash__ = _size_hash
