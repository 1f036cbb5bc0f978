"""Every expression and statement node of jitdl, TE-level and loop-level, in one place.

Nodes are frozen, slotted dataclasses compared structurally, except the named objects
(Var, IterVar, Buffer) which are compared by identity. Change a node with
dataclasses.replace. Expressions overload Python's operators so that tracing a user's
function builds IR; `==` stays structural equality, the capture layer rewrites the
user's `==` and `!=` into `eq`/`ne` nodes.
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
    ABS = "abs"
    FLOOR = "floor"
    CEIL = "ceil"
    ROUND = "round"
    TRUNC = "trunc"
    SIGN = "sign"
    LOG1P = "log1p"
    EXPM1 = "expm1"
    ISNAN = "isnan"
    ISINF = "isinf"
    ISFINITE = "isfinite"


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


class Expr:
    """Base of scalar expressions. Operators build IR (see jitdl.ir.build)."""

    __slots__ = ()
    weak = False

    def __add__(self, o): return _build.binary(BinOp.ADD, self, o)
    def __radd__(self, o): return _build.binary(BinOp.ADD, o, self)
    def __sub__(self, o): return _build.binary(BinOp.SUB, self, o)
    def __rsub__(self, o): return _build.binary(BinOp.SUB, o, self)
    def __mul__(self, o): return _build.binary(BinOp.MUL, self, o)
    def __rmul__(self, o): return _build.binary(BinOp.MUL, o, self)
    def __truediv__(self, o): return _build.binary(BinOp.DIV, self, o)
    def __rtruediv__(self, o): return _build.binary(BinOp.DIV, o, self)
    def __floordiv__(self, o): return _build.binary(BinOp.FLOORDIV, self, o)
    def __rfloordiv__(self, o): return _build.binary(BinOp.FLOORDIV, o, self)
    def __mod__(self, o): return _build.binary(BinOp.MOD, self, o)
    def __rmod__(self, o): return _build.binary(BinOp.MOD, o, self)
    def __pow__(self, o): return _build.binary(BinOp.POW, self, o)
    def __rpow__(self, o): return _build.binary(BinOp.POW, o, self)
    def __and__(self, o): return _build.binary(BinOp.AND, self, o)
    def __rand__(self, o): return _build.binary(BinOp.AND, o, self)
    def __or__(self, o): return _build.binary(BinOp.OR, self, o)
    def __ror__(self, o): return _build.binary(BinOp.OR, o, self)
    def __xor__(self, o): return _build.binary(BinOp.XOR, self, o)
    def __rxor__(self, o): return _build.binary(BinOp.XOR, o, self)
    def __lshift__(self, o): return _build.binary(BinOp.SHL, self, o)
    def __rlshift__(self, o): return _build.binary(BinOp.SHL, o, self)
    def __rshift__(self, o): return _build.binary(BinOp.SHR, self, o)
    def __rrshift__(self, o): return _build.binary(BinOp.SHR, o, self)
    def __neg__(self): return _build.unary(UnOp.NEG, self)
    def __pos__(self): return self
    def __invert__(self): return _build.unary(UnOp.NOT, self)
    def __abs__(self): return _build.call(Intrin.ABS, self)
    def __lt__(self, o): return _build.compare(CmpOp.LT, self, o)
    def __le__(self, o): return _build.compare(CmpOp.LE, self, o)
    def __gt__(self, o): return _build.compare(CmpOp.GT, self, o)
    def __ge__(self, o): return _build.compare(CmpOp.GE, self, o)

    def __bool__(self):
        raise _build.symbolic_bool_error(self)

    def __index__(self):
        raise _build.symbolic_index_error(self)

    def __float__(self):
        raise _build.symbolic_index_error(self)

    __int__ = __index__

    def __iter__(self):
        raise TypeError(f"a symbolic value ({_build.text(self)}) cannot be iterated")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return _build.numpy_ufunc(ufunc, method, inputs, kwargs)

    def __repr__(self):
        return _build.text(self)

    __str__ = __repr__


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
        n = 1
        for d in self.shape:
            n *= d
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
    __slots__ = ()

    def __repr__(self):
        return _build.text(self)


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
class PrimFunc:
    """A lowered kernel: its parameters (Buffers, then scalar Vars) and its body."""
    name: str
    params: tuple
    body: Stmt

    def __repr__(self):
        return _build.text(self)


from jitdl.ir import build as _build  # noqa: E402  (operators need the builders)
