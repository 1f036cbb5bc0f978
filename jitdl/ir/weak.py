"""Python integers that meet a narrower dtype (NEP 50): the checks a kernel makes at the call.

NumPy 2 raises OverflowError when a Python int does not fit the dtype of the array it
meets (`int32_array * 2**40`, `uint8_array + (-1)`). A literal is checked when the
definition is traced (jitdl.ir.build). A Python int *argument* is a weak int64 scalar
parameter whose value the kernel learns only at the call, so the trace records each
weak integer expression that contains one, with the dtype it is converted to, as plain
data (stored in the kernel's signature); the kernel evaluates it with Python's exact
integers before each call and raises where NumPy would. The kernel computes those
expressions in int64, so every intermediate value must also fit int64.
"""
from __future__ import annotations

from jitdl.ir.nodes import BinOp, Binary, Call, Cast, Const, Intrin, UnOp, Unary, Var
from jitdl.ir.printer import to_text
from jitdl.ir.visit import expr_children, map_expr, walk_unique

INT64 = (-(1 << 63), (1 << 63) - 1)
BOUNDS = {"int8": (-128, 127), "int16": (-(1 << 15), (1 << 15) - 1),
          "int32": (-(1 << 31), (1 << 31) - 1), "int64": INT64, "uint8": (0, 255)}

_BIN = {BinOp.ADD: "add", BinOp.SUB: "sub", BinOp.MUL: "mul", BinOp.FLOORDIV: "floordiv",
        BinOp.MOD: "mod", BinOp.POW: "pow", BinOp.MIN: "min", BinOp.MAX: "max",
        BinOp.AND: "and", BinOp.OR: "or", BinOp.XOR: "xor", BinOp.SHL: "shl",
        BinOp.SHR: "shr"}
_UN = {UnOp.NEG: "neg", UnOp.NOT: "invert"}
_CALL = {Intrin.ABS: "abs", Intrin.SIGN: "sign", Intrin.FLOOR: "same", Intrin.CEIL: "same",
         Intrin.ROUND: "same", Intrin.TRUNC: "same"}


def _weak_int(e):
    return e.weak and e.dtype == "int64"


def _has_var(e):
    return any(isinstance(n, Var) for n in walk_unique(e))


def tree(e):
    """A weak integer expression as JSON: ["var", name], ["const", n], [op, operands...];
    ["vars", names...] for one it cannot evaluate (only its arguments are checked)."""
    match e:
        case Var():
            return ["var", e.name]
        case Const():
            return ["const", int(e.value)]
        case Binary() if e.op in _BIN:
            a, b = tree(e.a), tree(e.b)
            if a[0] != "vars" and b[0] != "vars":
                return [_BIN[e.op], a, b]
        case Unary() if e.op in _UN:
            a = tree(e.a)
            if a[0] != "vars":
                return [_UN[e.op], a]
        case Call() if e.fn in _CALL and len(e.args) == 1:
            a = tree(e.args[0])
            if a[0] != "vars":
                return [_CALL[e.fn], a]
    names = sorted({n.name for n in _vars(e)})
    return ["vars", *names]


def _vars(e):
    if isinstance(e, Var):
        yield e
    for c in expr_children(e):
        yield from _vars(c)


def checks(stages):
    """The checks of weak integer arguments in stages [(body, loc)]: a list of
    [dtype, tree, text, context, loc] where `text` is the expression, `context` the one
    it takes part in, `loc` [filename, line] of the stage (or None)."""
    out, seen = [], set()

    def visit(e, parent, target, loc):
        # (a node shared by several parents, `v = v * v + 1` repeated, is visited once
        # per parent and target: its tree doubles with every such step)
        key = (id(e), id(parent), target)
        if key in seen:
            return
        seen.add(key)
        if _weak_int(e) and _has_var(e):
            item = [target, tree(e), to_text(e), _user_text(parent if parent is not None
                                                            else e), loc]
            if item not in out:
                out.append(item)
            return
        for c in expr_children(e):
            if isinstance(e, Cast):
                inner = e.dtype if e.dtype in BOUNDS else "int64"
                visit(c, parent, inner, loc)
            else:
                visit(c, e, "int64", loc)

    for body, loc in stages:
        where = [loc.filename, loc.lineno] if loc is not None else None
        visit(body, None, "int64", where)
    return out


def _user_text(e):
    """e as the user wrote it: without the casts that promotion put on weak integers."""
    return to_text(map_expr(e, lambda n: n.value if isinstance(n, Cast) and _weak_int(n.value)
                            else None))


class Overflow(Exception):
    """An argument's value (or a value computed from it) outside the bounds it must fit."""

    def __init__(self, value, dtype):
        super().__init__(value, dtype)
        self.value, self.dtype = value, dtype


def evaluate(t, values):
    """The exact value of a tree with the arguments' `values` (a name -> int mapping);
    None when it is not defined (a shift out of range, a division by zero). Raises
    Overflow when the value of an argument or of a step does not fit int64."""
    kind = t[0]
    if kind == "var":
        return fit(values[t[1]])
    if kind == "const":
        return t[1]
    if kind == "vars":
        for name in t[1:]:
            fit(values[name])
        return None
    args = [evaluate(x, values) for x in t[1:]]
    if any(a is None for a in args):
        return None
    if len(args) == 1:
        (a,) = args
        r = {"neg": lambda: -a, "invert": lambda: ~a, "abs": lambda: abs(a),
             "sign": lambda: (a > 0) - (a < 0), "same": lambda: a}[kind]()
        return fit(r)
    a, b = args
    match kind:
        case "add":
            r = a + b
        case "sub":
            r = a - b
        case "mul":
            r = a * b
        case "floordiv" | "mod":
            if b == 0:
                return None
            r = a // b if kind == "floordiv" else a % b
        case "pow":
            if b < 0:
                return None
            if abs(a) > 1 and b > 64:          # far beyond int64: no need to compute it
                raise Overflow(f"{a} ** {b}", "int64")
            r = a ** b
        case "min":
            r = min(a, b)
        case "max":
            r = max(a, b)
        case "and":
            r = a & b
        case "or":
            r = a | b
        case "xor":
            r = a ^ b
        case "shl" | "shr":
            if not 0 <= b < 64:
                return None
            r = a << b if kind == "shl" else a >> b
        case _:
            return None
    return fit(r)


def names(t):
    """The arguments a tree reads, in order of first use."""
    if t[0] == "var":
        return [t[1]]
    if t[0] == "vars":
        return list(t[1:])
    if t[0] == "const":
        return []
    out = []
    for x in t[1:]:
        out += [n for n in names(x) if n not in out]
    return out


def fit(v, dtype="int64"):
    lo, hi = BOUNDS[dtype]
    if not lo <= v <= hi:
        raise Overflow(v, dtype)
    return v
