"""LLVM types and constants shared by the code generators, scalar and vector alike.

A value is either a scalar or a vector of lanes (`<8 x float>`); the helpers here take
the type of a value they work with, so one routine serves both.
"""
from __future__ import annotations

import functools

import llvmlite.binding as llvm
from llvmlite import ir

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
F32, F64 = ir.FloatType(), ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()

_REG = {"bool": I1, "int8": I8, "uint8": I8, "int16": ir.IntType(16), "int32": I32,
        "int64": I64, "float32": F32, "float64": F64}
_MEM = dict(_REG, bool=I8)

# `splat (float 1.0)` (LLVM 19+) prints a vector constant in one term instead of one per lane
_SPLAT_SYNTAX = llvm.llvm_version_info >= (19,)


def _build_escape_table():
    """llvmlite builds the table that escapes strings in printed IR (metadata such as
    !"branch_weights") on its first use, shared by every thread: a thread that prints a
    module while another is still building it finds the table part-filled and fails with
    a KeyError of the byte not yet there (KeyError(98), the "b" of branch_weights, when
    two functions compiled at once). Built here, on import, before any thread compiles."""
    ir.MetaDataString(ir.Module(), "").get_reference()


_build_escape_table()


def reg_type(dtype):
    return _REG[dtype]


def mem_type(dtype):
    return _MEM[dtype]


@functools.lru_cache(maxsize=None)
def vector(ty, lanes):
    return ir.VectorType(ty, lanes)


def is_vector(v):
    return isinstance(v.type, ir.VectorType)


def elem(ty):
    """The element type of a vector type, or the type itself."""
    return ty.element if isinstance(ty, ir.VectorType) else ty


def like(ty, value):
    """`ty`, made a vector of as many lanes as `value` has (if it is a vector)."""
    vt = value.type
    return vector(ty, vt.count) if isinstance(vt, ir.VectorType) else ty


class Splat(ir.Constant):
    """A vector constant with the same value in every lane."""

    def __init__(self, ty, value):
        self.type = ty
        self.scalar = ir.Constant(ty.element, value)
        self.constant = [self.scalar] * ty.count

    def _get_reference(self):
        return f"splat ({self.scalar})"


class _Named(ir.Constant):
    """A constant printed by name (`poison`, `zeroinitializer`), however many lanes."""

    def __init__(self, ty, text, constant=None):
        self.type, self.constant, self.text = ty, constant, text

    def _get_reference(self):
        return self.text


def poison(ty):
    return _Named(ty, "poison")


def zeros(ty):
    lanes = [ir.Constant(ty.element, 0)] * ty.count if isinstance(ty, ir.VectorType) else 0
    return _Named(ty, "zeroinitializer", lanes)


def const(ty, value):
    """A constant of type ty (scalar or vector: every lane holds `value`)."""
    if isinstance(ty, ir.VectorType):
        if _SPLAT_SYNTAX:
            return Splat(ty, value)
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


def lanes_const(ty, values):
    """A vector constant with one value per lane."""
    return ir.Constant(vector(ty, len(values)), [ir.Constant(ty, v) for v in values])


@functools.lru_cache(maxsize=None)
def suffix(ty):
    """The overload suffix of an intrinsic: f32, i64, v8f32, ..."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{suffix(ty.element)}"
    if isinstance(ty, ir.PointerType):
        return "p0"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    return f"i{ty.width}"


def alloca(builder, ty, size=None, name=""):
    """An alloca with an opaque `ptr` result (llvmlite would type it `T*`)."""
    al = builder.alloca(ty, size=size, name=name)
    al.type = PTR
    return al


class Comment:
    """A `; text` line in the printed IR: notes for people reading it (how a loop was
    compiled and why). LLVM's parser skips it."""
    metadata = {}

    def __init__(self, text):
        self.text = text.replace("\n", " ")

    def __str__(self):
        return f"; {self.text}"


def comment(builder, text):
    builder._insert(Comment(text))


def loop_metadata(module, *hints):
    """A distinct `!llvm.loop` node carrying the given hints: a name, or a tuple of a name
    and its values (bools, ints, or nested hints, as followups take), e.g.
    ("llvm.loop.vectorize.followup_all", "llvm.loop.unroll.disable")."""
    node = ir.values.MDValue(module, [], name=str(len(module.metadata)))
    node.operands = (node, *[_property(module, h) for h in hints])  # self-reference: unique
    return node


def _property(module, hint):
    name, *vals = hint if isinstance(hint, tuple) else (hint,)
    ops = [ir.MetaDataString(module, name)]
    for v in vals:
        if isinstance(v, bool):
            ops.append(ir.Constant(I1, v))
        elif isinstance(v, int):
            ops.append(ir.Constant(I32, v))
        else:
            ops.append(_property(module, v))
    return module.add_metadata(ops)
