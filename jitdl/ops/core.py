"""What every op builder shares: operands, broadcasting, axes, promotion, and the two
stage shapes most ops are made of (an elementwise map and a reduction).

Operands inside a definition are tensors (any rank), scalar expressions (a scalar
argument, an element, a constant: rank 0) and Python numbers (weak, NEP 50). A dimension
is an int or, in kernels with symbolic extents, an int64 expression; only the int 1
broadcasts.
"""
from __future__ import annotations

import builtins
import contextlib
import contextvars
import dataclasses
import operator
import numpy as np

from jitdl import dtypes
from jitdl.errors import (VALUE_CHECKS, ArgumentError, AxisError, DefinitionError, ShapeError,
                          user_loc)
from jitdl.ir import build
from jitdl.ir.nodes import Access, BinOp, CmpOp, Expr, IterVar, ReduceOp, Var
from jitdl.ir.printer import expr_text
from jitdl.ir.visit import walk_unique
from jitdl.te import ops as te
from jitdl.te.tensor import Tensor

_ndarray = np.ndarray


# True while a builder runs for jd.numpy on arrays: its kernels with symbolic extents only
# ever see non-empty operands there (empty ones get kernels of their own), so run-time
# checks for empty axes (max of nothing) are left out of them
_EAGER_NONEMPTY = contextvars.ContextVar("jitdl_eager_nonempty", default=False)


def sizes_known_nonzero():
    """Whether the symbolic sizes of the kernel being built are known not to be 0."""
    return _EAGER_NONEMPTY.get()


@contextlib.contextmanager
def nonzero_sizes():
    """Build with symbolic sizes known not to be 0 (see sizes_known_nonzero)."""
    token = _EAGER_NONEMPTY.set(True)
    try:
        yield
    finally:
        _EAGER_NONEMPTY.reset(token)


def any_size(*builders):
    """Mark builders that work with symbolic extents (dimensions as int64 expressions): on
    arrays, jd.numpy compiles them once per dtype, rank and broadcast pattern, not per
    shape."""
    for b in builders:
        b.any_size = True


def every_dim(rank):
    """Every dimension of an operand of this rank: builder.solid's answer for a builder
    that broadcasts none of its operand's dimensions (see manipulation.concatenate.solid),
    as an op of one array operand does."""
    return tuple(range(rank))


def layout_free(kind, *builders):
    """Mark builders whose result on transposed operands is their result on the operands'
    memory order, transposed back: `kind` "elementwise" (operands of one shape),
    "reduction" (one array, static axis= and keepdims=) or "index" (a reduction to
    positions, argmax: over every axis its flat index counts in C order, so only along
    one axis). On arrays whose memory is a permutation of C order (a.T, Fortran arrays),
    jd.numpy runs them in that order (jitdl.eager.reorder) rather than copying the
    operands into C order."""
    for b in builders:
        b.layout = kind


def scalar_result(*builders):
    """Mark builders whose 0-d results NumPy returns as scalars (ufuncs, reductions,
    products: np.sum(a) is a np.float64); others return 0-d arrays (np.copy)."""
    for b in builders:
        b.scalar_result = True


# -- operands -------------------------------------------------------------------------------
def is_symbolic(x) -> bool:
    """A value of a definition being traced (a tensor or a scalar expression)."""
    return type(x) is not _ndarray and isinstance(x, (Tensor, Expr, IterVar))


def operand(x, what="argument"):
    """x as a definition operand: a Tensor, or a scalar Expr (Python numbers weak)."""
    if isinstance(x, (Tensor, Expr)):
        return x
    if isinstance(x, IterVar):
        return x.var
    if isinstance(x, (bool, int, float, np.generic)):
        return build.as_expr(x)
    if isinstance(x, np.ndarray):
        raise ArgumentError(
            f"{what} is a NumPy array inside a definition: pass it as an argument of the "
            f"@jd.compute function (arrays are its parameters), got shape {x.shape}",
            user_loc())
    if isinstance(x, (list, tuple)):
        raise ArgumentError(f"{what} is a {type(x).__name__} inside a definition: pass "
                            "tensors or scalars", user_loc())
    raise ArgumentError(f"{what}: expected a tensor or a number, got {type(x).__name__}",
                        user_loc())


def shape_of(x) -> tuple:
    return x.shape if isinstance(x, Tensor) else ()


def ndim_of(x) -> int:
    return len(x.shape) if isinstance(x, Tensor) else 0


def dtype_of(x) -> str:
    return x.dtype


def is_one(d) -> bool:
    return isinstance(d, int) and d == 1


def same_dim(a, b) -> bool:
    return a is b or (isinstance(a, int) and isinstance(b, int) and a == b)


def may_agree(a, b) -> bool:
    """Whether dimensions a and b can be equal: equal ints, or a symbolic one (checked at
    the call) against one that is not the int 1 (a symbolic extent is never 1: size 1 is
    part of a dynamic kernel's key)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    return same_dim(a, b) or not (is_one(a) or is_one(b))


def shape_text(shape) -> str:
    """A shape as NumPy prints it: (3,), (2, 4)."""
    return str(tuple(d if isinstance(d, int) else str(d) for d in shape)).replace("'", "")


def ufunc_shape_text(shape) -> str:
    """A shape as NumPy's ufuncs print it in their broadcasting error: (3,4), (3,)."""
    return "(" + ",".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def broadcast_shapes(*shapes) -> tuple:
    """NumPy's broadcasting of shapes (aligned on the right; 1 stretches). Two symbolic
    dimensions are taken to agree: the caller checks them at run time."""
    ndim = builtins.max((len(s) for s in shapes), default=0)
    out = []
    for d in range(-ndim, 0):
        dim = 1
        for s in shapes:
            if len(s) < -d:
                continue
            x = s[d]
            if is_one(x):
                continue
            if is_one(dim):
                dim = x
            elif not same_dim(dim, x):
                if isinstance(dim, int) and isinstance(x, int):
                    raise ShapeError(
                        "operands could not be broadcast together with shapes "
                        + "".join(ufunc_shape_text(s) + " " for s in shapes), user_loc())
        out.append(dim)
    return tuple(out)


def load(x, idx, shape):
    """The element of operand x that broadcasts to index `idx` of an output of `shape`."""
    if not isinstance(x, Tensor):
        return x
    off = len(shape) - x.ndim
    return x[tuple(0 if is_one(d) and not is_one(shape[off + n]) else idx[off + n]
                   for n, d in enumerate(x.shape))]


def broadcast_to(x, shape, name=None):
    """x as a tensor of `shape` (a stage that copies with broadcasting)."""
    x = operand(x)
    if isinstance(x, Tensor) and tuple(x.shape) == tuple(shape):
        return x
    full = broadcast_shapes(shape_of(x), shape)
    # two symbolic sizes (Y's to X.shape in a dynamic definition) are checked to agree at
    # the call, where the stage reads x over the target's axes (check_shape_agreement);
    # a symbolic size against a number (Y's to (Y.shape[0], 4)) once at the call, as
    # NumPy's ValueError (a symbolic size is never 1: it is the other's, or an error)
    text = (f"cannot broadcast an array of shape {shape_text(shape_of(x))} to shape "
            f"{shape_text(shape)}")
    if len(full) != len(shape) or not builtins.all(
            may_agree(a, b) for a, b in zip(full, shape)):
        raise ShapeError(text, user_loc())
    if not isinstance(x, Tensor):
        return te.tensor(shape, lambda *idx: x, name=name)
    off = len(shape) - x.ndim
    pairs = [(a, b) for a, b in zip(x.shape, shape[off:])
             if not is_one(a) and not same_dim(a, b) and isinstance(a, int) != isinstance(b, int)]
    # each checked once at the call (where nothing is read too: Y (0, 5) to
    # (Y.shape[0], 4)), else, where the call cannot evaluate the size, by each read of x
    loc = user_loc() if pairs else None
    checks = tuple((build.binary(BinOp.SUB, build.as_expr(a), build.as_expr(b)), 1,
                    f"{VALUE_CHECKS[2]}{text})")
                   for a, b in pairs
                   if not te.require_size(b if isinstance(a, int) else a, "==",
                                          a if isinstance(a, int) else b, text, loc))

    def body(*idx):
        read = load(x, idx, shape)
        if not pairs:
            return read
        # (its indices are checked too, as no prover sees those over the number's range in
        # the symbolic size's; where both fail, the sizes' check is the one reported)
        return dataclasses.replace(read, carried=read.carried + checks, checked=True)
    return te.tensor(shape, body, name=name)


def elementwise(fn, *xs, name=None, dtype=None):
    """The stage out[idx] = fn(x[idx] for x in xs) with broadcasting; a scalar expression
    when every operand is a scalar. `dtype` casts the result."""
    xs = [operand(x) for x in xs]
    shape = broadcast_shapes(*(shape_of(x) for x in xs))
    if any(isinstance(x, Tensor) for x in xs):
        _no_elements(xs, name)

    def body(*idx):
        e = fn(*(load(x, idx, shape) for x in xs))
        return e if dtype is None else build.cast(e, dtype)
    if not builtins.any(isinstance(x, Tensor) for x in xs):
        return body()
    return te.tensor(shape, body, name=name)


def typed(x, *others) -> tuple:
    """(dtype, weak) of an operand beside the others, as jitdl.ir.build.result_dtype takes
    them (build.typed: a dynamic size is weak beside a float, as in a static trace)."""
    x = operand(x)
    if isinstance(x, Tensor):
        return x.dtype, False
    return build.typed(x, *map(operand, others))


def _no_elements(xs, name):
    """A whole tensor combined with an element of one at a loop's index (`jd.select(X == 0,
    1.0, X[i])`) would compute a tensor per element: say what to write instead. An element
    at constant indices (`X + X[0]`) is a scalar, as in NumPy."""
    t = next(x for x in xs if isinstance(x, Tensor))
    for x in xs:
        if isinstance(x, Expr) and any(isinstance(n, Access) and any(
                isinstance(v, Var) for i in n.indices for v in walk_unique(i))
                for n in walk_unique(x)):
            raise DefinitionError(
                f"{name or 'an elementwise operation'} combines the whole tensor {t.name} "
                f"({t.dtype}{list(t.shape)}) with the element expression `{expr_text(x)}`; "
                f"inside an element expression use elements of tensors too (e.g. "
                f"`{t.name}[{', '.join('ijklmn'[:t.ndim]) or '()'}]`), or whole tensors "
                "throughout", user_loc())


def result_type(ufunc, *xs) -> str:
    """The dtype NumPy 2 gives `ufunc` on these operands (NEP 50: Python numbers weak)."""
    return build.result_dtype(ufunc, *(typed(x, *xs) for x in xs))


# -- axes and reductions --------------------------------------------------------------------
def normalize_axes(axis, ndim, allow_none=True) -> tuple:
    """NumPy's axis argument as a tuple of distinct non-negative axes (None: all of them),
    with NumPy's errors for an axis out of range or repeated."""
    if axis is None and allow_none:
        return tuple(range(ndim))
    seq = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in seq:
        if isinstance(a, (bool, np.bool_)):
            raise ArgumentError("an integer is required (axis is a bool)", user_loc())
        try:
            a = operator.index(a)
        except TypeError:
            raise ArgumentError(f"'{type(a).__name__}' object cannot be interpreted as an "
                                "integer (axis must be an int or a tuple of ints)",
                                user_loc()) from None
        if not -ndim <= a < ndim:
            raise AxisError(f"axis {a} is out of bounds for array of dimension {ndim}",
                            user_loc())
        out.append(a % builtins.max(ndim, 1))
    if len(set(out)) != len(out):       # (after every bound is checked, as NumPy does)
        raise ShapeError("duplicate value in 'axis'", user_loc())
    return tuple(out)


def normalize_axis(axis, ndim) -> int:
    """One axis (an int), NumPy's error when out of range."""
    return normalize_axes(axis, ndim, allow_none=False)[0]


def as_tensor(x, name=None):
    """An operand as a tensor (a scalar becomes a 0-d stage)."""
    x = operand(x)
    return x if isinstance(x, Tensor) else te.tensor((), lambda: x, name=name)


def reduction(op: ReduceOp, x, axis=None, keepdims=False, dtype=None, name=None):
    """The stage reducing x with `op` over `axis` (NumPy's meaning: None is every axis),
    each element cast to `dtype` first when given; `keepdims` keeps reduced axes as 1.
    With keepdims the reduction itself drops the axes and a second (inlined) stage
    restores them, so the automatic schedule sees a row statistic P[i] that it can
    compute inside its reader's row loop."""
    x = as_tensor(x)
    axes = normalize_axes(axis, x.ndim)
    ks = {a: te.reduce_axis(x.shape[a]) for a in axes}
    shape = tuple(n for d, n in enumerate(x.shape) if d not in ks)

    def body(*idx):
        it = iter(idx)
        e = x[tuple(ks[d] if d in ks else next(it) for d in range(x.ndim))]
        if dtype is not None:
            e = build.cast(e, dtype)
        if ks:
            return te.reduce(op, e, list(ks.values()))
        if op in (ReduceOp.ALL, ReduceOp.ANY):      # over no axes: per element
            return build.truth(e)
        if op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN):
            return build.cast(0, "int64")
        if op == ReduceOp.SUM and dtypes.is_float(e.dtype):
            # (NumPy adds each element to the identity 0.0: a -0.0 becomes 0.0)
            zero = build.cast(0, e.dtype)
            return build.select(build.compare(CmpOp.EQ, e, zero), zero, e)
        return e
    r = te.tensor(shape, body, name=None if keepdims and ks else name)
    if not (keepdims and ks):
        return r
    kept = tuple(1 if d in ks else n for d, n in enumerate(x.shape))
    return te.tensor(kept, lambda *idx: r[tuple(i for d, i in enumerate(idx) if d not in ks)],
                     name=name)


def reduced_size(x, axis):
    """The number of elements each output element of a reduction over `axis` combines
    (an int, or an int64 expression for symbolic extents)."""
    n = 1
    for a in normalize_axes(axis, ndim_of(x)):
        d = x.shape[a]
        n = d if isinstance(n, int) and n == 1 else n * d
    return n


def check_dtype(x, allowed, what):
    """A TypeError worded as NumPy's when an operand's dtype is not one `what` takes."""
    dt = operand(x).dtype
    if dt not in allowed:
        raise ArgumentError(f"{what} not supported for the input type {dt}", user_loc())


def floating(dt: str) -> str:
    """The float dtype NumPy computes a transcendental function of `dt` in."""
    return dt if dtypes.is_float(dt) else ("float32" if dt in ("bool", "int8", "uint8",
                                                               "int16") else "float64")

