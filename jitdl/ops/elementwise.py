"""Elementwise builders: NumPy's ufuncs as scalar-expression functions mapped over
broadcast operands. Each entry of UNARY / BINARY is a function of scalar expressions with
NumPy 2's result dtype and special values (NaN, infinities, signed zeros, integer
division by zero as NumPy does it)."""
from __future__ import annotations

from jitdl.ir import build
from jitdl.ir.nodes import BinOp, Intrin
from jitdl.ops.core import elementwise


def _binop(op):
    return lambda a, b: build.binary(op, a, b)


def _intrin(fn):
    return lambda a: build.call(fn, a)


UNARY = {
    "exp": _intrin(Intrin.EXP),
    "negative": lambda a: -build.as_expr(a),
}

BINARY = {
    "add": _binop(BinOp.ADD),
    "subtract": _binop(BinOp.SUB),
    "multiply": _binop(BinOp.MUL),
    "divide": _binop(BinOp.DIV),
}


def unary(x, fn, dtype=None):
    """The ufunc UNARY[fn] over x (computed in `dtype` when given, as NumPy's dtype=)."""
    f = UNARY[fn]
    if dtype is not None:
        return elementwise(lambda a: f(build.cast(a, dtype)), x, dtype=dtype)
    return elementwise(f, x)


def binary(x1, x2, fn, dtype=None):
    """The ufunc BINARY[fn] over x1 and x2, broadcast (in `dtype` when given)."""
    f = BINARY[fn]
    if dtype is not None:
        return elementwise(lambda a, b: f(build.cast(a, dtype), build.cast(b, dtype)),
                           x1, x2, dtype=dtype)
    return elementwise(f, x1, x2)

