"""Shape-manipulation builders: stages that only move elements (index arithmetic, no
math), with NumPy's shapes and errors. The auto schedule inlines the ones that feed an
elementwise consumer, so `exp(transpose(X))` is one loop nest reading X transposed.

Every builder takes tensors (or scalars) and static Python arguments already normalised
by the jd.numpy wrappers: axes and shapes as tuples of ints.
"""
from __future__ import annotations

import builtins
import dataclasses
import functools
import operator

import numpy as np

from jitdl.errors import ArgumentError, JitdlError, ShapeError, user_loc
from jitdl.ir import build
from jitdl.ir.analysis import SIZE_LIMIT, inside, linear, with_loop
from jitdl.ir.nodes import BinOp, Binary, CmpOp, Const, Expr, SizeVar
from jitdl.ir.visit import walk_expr
from jitdl.ops.core import (any_size, as_tensor, broadcast_to as _broadcast, every_dim,
                            is_one, layout_free, load, may_agree, normalize_axes, normalize_axis, operand,
                            same_dim, scalar_result, shape_of, shape_text,
                            sizes_known_nonzero)
from jitdl.te import ops as te
from jitdl.te.tensor import Tensor


def _static(d) -> bool:
    return isinstance(d, int)


def _add(a, b):
    """a + b for dimensions (ints or int64 expressions), adding no `0 +` to the IR."""
    if _static(a) and a == 0:
        return b
    return a if _static(b) and b == 0 else a + b


def _mul(a, b):
    """a * b for dimensions, multiplying no `1 *` into the IR (and 0 times any is 0)."""
    if _static(a) and a == 0 or _static(b) and b == 0:
        return 0
    if _static(a) and a == 1:
        return b
    return a if _static(b) and b == 1 else a * b


def _size(shape):
    n = 1
    for d in shape:
        n = _mul(n, d)
    return n


def _empty(d) -> bool:
    return isinstance(d, int) and d == 0


def _clamp(e, n):
    """Index e held inside [0, n): where e is known to be there already, this only lets the
    static bounds prover see it for a symbolic n (two integer min/max, no branch)."""
    return build.binary(BinOp.MAX, build.binary(BinOp.MIN, e, n - 1), 0)


def _checked(access):
    """A read whose indices the kernel checks at run time (IndexError outside the array):
    for index arithmetic on symbolic extents that the static prover cannot follow."""
    return dataclasses.replace(access, checked=True)


def _ints(value, what):
    """A static int or sequence of ints as a tuple (NumPy's TypeError otherwise)."""
    seq = value if isinstance(value, (tuple, list)) else (value,)
    try:
        return tuple(operator.index(v) for v in seq)
    except TypeError:
        raise ArgumentError(f"{what}: expected an int or a tuple of ints, got {value!r}",
                            user_loc()) from None


_CONSTANT_MAX = 256     # elements of a literal array written into a definition's code


def constant(values, what):
    """A small literal array (a list of indices written in a definition) as a stage whose
    elements are constants: a chain of selects on the flat position."""
    values = np.asarray(values)
    if values.size > _CONSTANT_MAX:
        raise ArgumentError(f"{what}: a literal array of {values.size} elements inside a "
                            f"definition (at most {_CONSTANT_MAX}): pass it as an argument "
                            f"of the @jd.compute function", user_loc())
    dt = values.dtype.name
    flat = values.ravel().tolist()

    def body(*idx):
        if not flat:
            return build.cast(0, dt)        # (an empty array: never read)
        pos = 0
        for i, n in zip(idx, values.shape):
            pos = pos * n + i
        e = build.cast(flat[-1], dt)
        for k in reversed(range(len(flat) - 1)):
            e = build.select(build.compare(CmpOp.EQ, pos, k), build.cast(flat[k], dt), e)
        return e
    return te.tensor(values.shape, body, name="constant")


def copy(x):
    """A new tensor with x's elements (np.copy)."""
    x = as_tensor(x)
    return te.tensor(x.shape, lambda *idx: x[idx], name="copy")


def astype(x, dtype):
    """x's elements converted to `dtype` (C casts, as NumPy's unsafe casting does)."""
    x = as_tensor(x)
    return te.tensor(x.shape, lambda *idx: build.cast(x[idx], dtype), name="astype")


# -- views: index arithmetic ----------------------------------------------------------------
def transpose(x, axes=None):
    """np.transpose: axes=None reverses the axes; out.shape[d] = x.shape[axes[d]]."""
    x = as_tensor(x)
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    if len(axes) != x.ndim:
        raise ShapeError("axes don't match array", user_loc())
    axes = normalize_axes(tuple(axes), x.ndim, allow_none=False)
    if axes == tuple(range(x.ndim)):
        return x
    inverse = [axes.index(d) for d in range(x.ndim)]
    return te.tensor(tuple(x.shape[a] for a in axes),
                     lambda *idx: x[tuple(idx[inverse[d]] for d in range(x.ndim))],
                     name="transpose")


def swapaxes(x, axis1, axis2):
    """np.swapaxes."""
    x = as_tensor(x)
    a, b = normalize_axis(axis1, x.ndim), normalize_axis(axis2, x.ndim)
    axes = list(range(x.ndim))
    axes[a], axes[b] = b, a
    return transpose(x, tuple(axes))


def moveaxis(x, source, destination):
    """np.moveaxis: the axes `source` go to positions `destination`, others keep order."""
    x = as_tensor(x)
    src = normalize_axes(_ints(source, "source"), x.ndim, allow_none=False)
    dst = normalize_axes(_ints(destination, "destination"), x.ndim, allow_none=False)
    if len(src) != len(dst):
        raise ShapeError("`source` and `destination` arguments must have the same number "
                         "of elements", user_loc())
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(x, tuple(order))


def _dims(value, what):
    """A target shape: ints (from the user) or int64 expressions (a builder passing on a
    symbolic shape, as roll does with its operand's)."""
    seq = value if isinstance(value, (tuple, list)) else (value,)
    if builtins.any(isinstance(d, Expr) for d in seq):
        return tuple(d if isinstance(d, Expr) else operator.index(d) for d in seq)
    return _ints(value, what)


def _factors(d):
    """A dimension as (int factor, [symbolic factors]): products are split."""
    if _static(d):
        return d, []
    if isinstance(d, Binary) and d.op == BinOp.MUL:
        ca, fa = _factors(d.a)
        cb, fb = _factors(d.b)
        return ca * cb, fa + fb
    if isinstance(d, Const):
        return int(d.value), []
    return 1, [d]


def _product(dims):
    c, fs = 1, []
    for d in dims:
        dc, df = _factors(d)
        c, fs = c * dc, fs + df
    return c, fs


def _minus(fs, gs):
    """The factors fs without those of gs (None when gs has one fs lacks)."""
    rest = list(fs)
    for g in gs:
        k = next((k for k, f in enumerate(rest) if f is g or f == g), None)
        if k is None:
            return None
        del rest[k]
    return rest


def _new_shape(src, shape):
    """NumPy's reshape target of an operand of shape `src`: one -1 inferred, NumPy's
    errors. With symbolic extents the products must agree factor by factor (X_n0 * X_n1
    into (-1,), or (X_n1, 1, X_n0)): another relation would need a check at run time."""
    shape = _dims(shape, "shape")
    if builtins.sum(_static(d) and d == -1 for d in shape) > 1:
        raise ShapeError("can only specify one unknown dimension", user_loc())
    if builtins.any(_static(d) and d < -1 for d in shape):
        raise ShapeError(f"negative dimensions not allowed, got {shape}", user_loc())
    size = _size(src)
    if _static(size) and builtins.all(_static(d) for d in shape):
        known = _size(d for d in shape if d != -1)
        if -1 in shape:
            if known == 0 or size % known:
                # (as NumPy writes it: a leading -1 left out, (-1, 5) as "(5)")
                shown = [str(d) if d != -1 else "newaxis" for d in shape[shape[0] == -1:]]
                raise ShapeError(f"cannot reshape array of size {size} into shape "
                                 f"({','.join(shown)}{',' * (len(shape) == 1)})", user_loc())
            shape = tuple(size // known if d == -1 else d for d in shape)
        elif known != size:
            raise ShapeError(f"cannot reshape array of size {size} into shape "
                             f"{shape_text(shape)}", user_loc())
        return shape
    cs, fs = _product(src)
    ct, ft = _product(d for d in shape if not (_static(d) and d == -1))
    rest = _minus(fs, ft)
    unknown = builtins.any(_static(d) and d == -1 for d in shape)
    if rest is not None and (not rest or unknown):
        if unknown and ct and cs % ct == 0:
            inferred = _size([cs // ct] + rest)
            return tuple(inferred if _static(d) and d == -1 else d for d in shape)
        if not unknown and cs == ct:
            return shape
    raise ShapeError(
        f"cannot reshape an array of shape {shape_text(src)} into shape {shape_text(shape)} "
        "for every size of its symbolic (dynamic) dimensions: jitdl reshapes symbolic "
        "extents only where the target keeps them as factors (such as (-1,) or "
        "(X_n1, -1)); make that argument static (not dynamic=) for this reshape",
        user_loc())


def _groups(src, dst):
    """Pairs (source dims, target dims) of equal products that partition both shapes
    (dims of size 1 left out): each group's indices only depend on each other. A symbolic
    dimension pairs with the same one; other shapes with symbolic extents form one group."""
    src_dims = [d for d, n in enumerate(src) if not is_one(n)]
    dst_dims = [d for d, n in enumerate(dst) if not is_one(n)]
    if not builtins.all(_static(n) for n in list(src) + list(dst)):
        out, s, t = [], 0, 0
        while s < len(src_dims) and t < len(dst_dims) and \
                same_dim(src[src_dims[s]], dst[dst_dims[t]]):
            out.append(([src_dims[s]], [dst_dims[t]]))
            s, t = s + 1, t + 1
        tail = []
        while s < len(src_dims) and t < len(dst_dims) and \
                same_dim(src[src_dims[-1]], dst[dst_dims[-1]]):
            tail.insert(0, ([src_dims.pop()], [dst_dims.pop()]))
        if s < len(src_dims) or t < len(dst_dims):
            out.append((src_dims[s:], dst_dims[t:]))
        return out + tail
    out, s, t = [], 0, 0
    while s < len(src_dims):
        gs, gt = [src_dims[s]], [dst_dims[t]]
        ps, pt = src[src_dims[s]], dst[dst_dims[t]]
        s, t = s + 1, t + 1
        while ps != pt:
            if ps < pt:
                ps *= src[src_dims[s]]
                gs.append(src_dims[s])
                s += 1
            else:
                pt *= dst[dst_dims[t]]
                gt.append(dst_dims[t])
                t += 1
        out.append((gs, gt))
    return out


def reshape(x, shape):
    """np.reshape in C order: each group of dims with equal products maps its flat index
    (dims of size 1 and unchanged dims cost no arithmetic). A group of symbolic extents
    that is not one dimension to the same one divides by symbolic strides: its read is
    checked at run time where the static prover does not place it."""
    x = as_tensor(x)
    size = _size(x.shape)
    shape = _new_shape(x.shape, shape)
    if len(shape) == x.ndim and builtins.all(same_dim(a, b) for a, b in zip(shape, x.shape)):
        return x
    if _empty(size):
        return te.tensor(shape, lambda *idx: build.cast(0, x.dtype), name="reshape")
    groups = _groups(x.shape, shape)
    checked = builtins.any(
        (len(gs) > 1 or len(gt) > 1) and not builtins.all(
            _static(n) for n in [x.shape[d] for d in gs] + [shape[d] for d in gt])
        for gs, gt in groups)

    def body(*idx):
        src = [0] * x.ndim
        for gs, gt in groups:
            if not gs:              # only dims of size 1 left on the source side
                continue
            flat = idx[gt[0]] if gt else 0
            for d in gt[1:]:
                flat = flat * shape[d] + idx[d]
            stride = 1
            for d in reversed(gs):
                v = flat // stride if not (_static(stride) and stride == 1) else flat
                src[d] = v if d == gs[0] else v % x.shape[d]
                stride = _mul(stride, x.shape[d])
        read = x[tuple(src)]
        return _checked(read) if checked and not _proved(src, x.shape, idx, shape) else read
    return te.tensor(shape, body, name="reshape")


def _proved(indices, dims, loops, extents):
    """Whether the static prover places each index inside its dimension, for loops over
    extents (a flattened position `i * n1 + j` in [0, n0 * n1): no run-time check)."""
    ranges = {v: (0, SIZE_LIMIT - 1) for n in dims if isinstance(n, Expr)
              for v in walk_expr(n) if isinstance(v, SizeVar)}
    for v, n in zip(loops, extents):
        ranges = with_loop(ranges, v, 0, n)
    return builtins.all(inside(build.as_expr(i), n, ranges) for i, n in zip(indices, dims))


def ravel(x):
    """np.ravel: the elements in C order, 1-D."""
    return reshape(x, (-1,))


def squeeze(x, axis=None):
    """np.squeeze: drop the axes of length 1 (`axis`: those, which must have length 1)."""
    x = as_tensor(x)
    if x.ndim == 0 and isinstance(axis, (int, np.integer)) and not isinstance(axis, bool) \
            and axis in (0, -1):
        return x            # (NumPy takes axis 0 or -1 of a 0-d array as no axis)
    if axis is None:
        axes = tuple(d for d, n in enumerate(x.shape) if is_one(n))
    else:
        axes = normalize_axes(axis, x.ndim, allow_none=False)
        if not builtins.all(is_one(x.shape[a]) for a in axes):
            raise ShapeError("cannot select an axis to squeeze out which has size not equal "
                             "to one", user_loc())
    if not axes:
        return x
    keep = [d for d in range(x.ndim) if d not in axes]

    def body(*idx):
        src = [0] * x.ndim
        for d, i in zip(keep, idx):
            src[d] = i
        return x[tuple(src)]
    return te.tensor(tuple(x.shape[d] for d in keep), body, name="squeeze")


def expand_dims(x, axis):
    """np.expand_dims: new axes of length 1 at positions `axis` of the result."""
    x = as_tensor(x)
    ndim = x.ndim + len(_ints(axis, "axis"))
    axes = normalize_axes(axis, ndim, allow_none=False)
    dims = iter(x.shape)
    shape = tuple(1 if d in axes else next(dims) for d in range(ndim))
    keep = [d for d in range(ndim) if d not in axes]
    return te.tensor(shape, lambda *idx: x[tuple(idx[d] for d in keep)], name="expand_dims")


def broadcast_to(x, shape):
    """np.broadcast_to (a stage reading x with its stretched axes held at 0); `shape` may
    hold the symbolic sizes of a dynamic definition (X.shape)."""
    shape = _dims(shape, "shape")
    if builtins.any(_static(d) and d < 0 for d in shape):
        raise ShapeError("all elements of broadcast shape must be non-negative", user_loc())
    return _broadcast(x, shape, name="broadcast_to")


def flip(x, axis=None):
    """np.flip: the elements along `axis` (None: every axis) in reverse order."""
    x = as_tensor(x)
    axes = normalize_axes(axis, x.ndim)
    return te.tensor(x.shape, lambda *idx: x[tuple(
        x.shape[d] - 1 - i if d in axes else i for d, i in enumerate(idx))], name="flip")


def triangle(m, k=0, upper=False):
    """np.tril (upper: np.triu): m with the elements above (below) diagonal k zeroed, over
    the last two axes; a 1-D m is taken as the rows of a square matrix, as NumPy does."""
    m = as_tensor(m)
    if m.ndim == 0:
        raise ArgumentError("tril/triu: input must be at least 1-d, got a 0-d array (a "
                            "TypeError, as NumPy's)", user_loc())
    shape = m.shape if m.ndim > 1 else (m.shape[0],) + m.shape

    def body(*idx):
        i, j = idx[-2], idx[-1]
        keep = j - i >= k if upper else j - i <= k
        return build.select(keep, m[idx if m.ndim > 1 else (j,)], build.cast(0, m.dtype))
    return te.tensor(shape, body, name="triu" if upper else "tril")


def diff(a, n=1, axis=-1):
    """np.diff: the n-th difference along `axis` (not equal, for bools)."""
    a = as_tensor(a)
    if a.ndim == 0:
        raise ShapeError("diff requires input that is at least one dimensional", user_loc())
    ax = normalize_axis(axis, a.ndim)
    for _ in range(n):
        def body(*idx, a=a):
            nxt = tuple(i + 1 if d == ax else i for d, i in enumerate(idx))
            if a.dtype == "bool":
                return build.compare(CmpOp.NE, a[nxt], a[idx])
            return build.binary(BinOp.SUB, a[nxt], a[idx])
        extent = a.shape[ax]
        # (none, not -1, past the end of an axis: NumPy's diff of 0 or 1 elements, or of
        # n >= the length, is empty)
        size = builtins.max(extent - 1, 0) if _static(extent) else build.binary(
            BinOp.MAX, extent - 1, 0)
        a = te.tensor(a.shape[:ax] + (size,) + a.shape[ax + 1:], body, name="diff")
    return a


def split(x, indices_or_sections, axis=0, equal=True):
    """np.split / np.array_split: a tuple of stages, each a range of x along `axis`. On a
    symbolic axis the ranges are int64 expressions (min/max of the split points) and the
    reads are checked at run time; an equal split that does not divide the axis fails
    there (IndexError), as NumPy's ValueError cannot be decided before the call."""
    x = as_tensor(x)
    axis = normalize_axis(axis, x.ndim)
    n = x.shape[axis]
    static = _static(n)
    if isinstance(indices_or_sections, tuple):
        if static:
            bounds = [builtins.min(builtins.max(b if b >= 0 else b + n, 0), n)
                      for b in indices_or_sections]
        else:
            bounds = [build.binary(BinOp.MIN, b, n) if b >= 0
                      else build.binary(BinOp.MAX, b + n, 0) for b in indices_or_sections]
        starts, stops = [0] + bounds, bounds + [n]
    else:
        parts = indices_or_sections
        if parts <= 0:
            raise ShapeError("number sections must be larger than 0.", user_loc())
        if static:
            if equal and n % parts:
                raise ShapeError("array split does not result in an equal division",
                                 user_loc())
            q, r = divmod(n, parts)
            sizes = [q + 1] * r + [q] * (parts - r)
            starts = [builtins.sum(sizes[:p]) for p in range(parts)]
            stops = [s + z for s, z in zip(starts, sizes)]
        else:
            q, r = n // parts, n % parts
            if equal:
                starts = [q * p for p in range(parts)]
            else:
                starts = [q * p + build.binary(BinOp.MIN, r, p) if p else 0
                          for p in range(parts)]
            stops = starts[1:] + [n]
    bad = None
    if not static and equal and not isinstance(indices_or_sections, tuple):
        # past the axis when the sections are unequal: the run-time check fails
        bad = build.select(build.compare(CmpOp.EQ, n % indices_or_sections, 0), 0, n)
    out = []
    for lo, hi in zip(starts, stops):
        hi = builtins.max(hi, lo) if static and _static(lo) else \
            build.binary(BinOp.MAX, hi, lo)

        def body(*idx, lo=lo):
            i = _add(idx[axis], lo)
            if static:
                return x[idx[:axis] + (i,) + idx[axis + 1:]]
            return _checked(x[idx[:axis] + (i if bad is None else i + bad,) + idx[axis + 1:]])
        ext = hi if _static(lo) and lo == 0 else hi - lo
        out.append(te.tensor(x.shape[:axis] + (ext,) + x.shape[axis + 1:], body,
                             name="split"))
    return tuple(out)


# -- data-moving ops ------------------------------------------------------------------------
def _common_dtype(xs, dtype=None):
    if dtype is not None:
        return dtype
    weak = {"bool": False, "int64": 0, "float64": 0.0}     # (a Python number: NEP 50)
    return np.result_type(*(weak[x.dtype] if getattr(x, "weak", False) and
                            not isinstance(x, Tensor) else np.dtype(x.dtype)
                            for x in xs)).name


def check_concatenate(shapes, axis):
    """NumPy's errors for concatenating arrays of these shapes along axis (not None), in
    its order: a 0-d first array, the axis against its rank, then each later array's rank
    (a 0-d one included) and sizes; the axis normalized."""
    if not shapes[0]:
        raise ShapeError("zero-dimensional arrays cannot be concatenated", user_loc())
    first = shapes[0]
    axis = normalize_axis(axis, len(first))
    for n, shape in enumerate(shapes[1:], 1):
        if len(shape) != len(first):
            raise ShapeError(
                f"all the input arrays must have same number of dimensions, but the array "
                f"at index 0 has {len(first)} dimension(s) and the array at index {n} has "
                f"{len(shape)} dimension(s)", user_loc())
        for d in range(len(first)):
            if d != axis and not may_agree(shape[d], first[d]):
                raise ShapeError(
                    f"all the input array dimensions except for the concatenation axis must "
                    f"match exactly, but along dimension {d}, the array at index 0 has size "
                    f"{first[d]} and the array at index {n} has size {shape[d]}", user_loc())
    return axis


def concatenate(*xs, axis=0, dtype=None):
    """np.concatenate: along `axis` (None: of the flattened operands), each element read
    from the operand whose range holds its index (a tree of selects), in the common dtype."""
    if not xs:
        raise ShapeError("need at least one array to concatenate", user_loc())
    xs = [operand(x) for x in xs]
    dt = _common_dtype(xs, dtype)   # (Python numbers weak)
    if axis is None:                # (0-d operands too: each is one element)
        xs, axis = [ravel(as_tensor(x)) for x in xs], 0
    first = xs[0]
    axis = check_concatenate([shape_of(x) for x in xs], axis)
    starts = [0]
    for x in xs:
        starts.append(_add(starts[-1], x.shape[axis]))
    shape = first.shape[:axis] + (starts[-1],) + first.shape[axis + 1:]

    # (an empty operand contributes nothing)
    parts = [p for p in zip(xs, starts, starts[1:]) if not _empty(p[0].shape[axis])]

    def read(idx, x, lo):
        i = idx[axis]
        j = i if _static(lo) and lo == 0 else i - lo
        v = x[idx[:axis] + (j,) + idx[axis + 1:]]
        if not _static(lo) and linear(lo) is None:
            v = _checked(v)     # after a product of sizes (flattened operands)
        return build.cast(v, dt)

    def pick(idx, parts):
        # a balanced tree of selects: a chain of one per operand nested as deep as there
        # are operands (200 past what the passes take), and the bounds proof took the
        # conditions of all those around each read (50 arrays 20 s)
        if len(parts) == 1:
            return read(idx, *parts[0][:2])
        mid = len(parts) // 2
        return build.select(build.compare(CmpOp.LT, idx[axis], parts[mid - 1][2]),
                            pick(idx, parts[:mid]), pick(idx, parts[mid:]))

    def body(*idx):
        return pick(idx, parts) if parts else build.cast(0, dt)
    return te.tensor(shape, body, name="concatenate")


def stack(*xs, axis=0, dtype=None):
    """np.stack: the operands (all of one shape) along a new axis."""
    if not xs:
        raise ShapeError("need at least one array to stack", user_loc())
    xs = [as_tensor(x) for x in xs]
    for x in xs[1:]:
        if len(x.shape) != len(xs[0].shape) or not builtins.all(
                may_agree(a, b) for a, b in zip(x.shape, xs[0].shape)):
            raise ShapeError("all input arrays must have the same shape", user_loc())
    axis = normalize_axis(axis, xs[0].ndim + 1)
    return concatenate(*(expand_dims(x, axis) for x in xs), axis=axis, dtype=dtype)


def hstack(*xs, dtype=None):
    """np.hstack: along axis 1, or axis 0 for 1-D operands."""
    xs = [reshape(x, (1,)) if not shape_of(operand(x)) else x for x in xs]
    return concatenate(*xs, axis=0 if xs and len(shape_of(xs[0])) == 1 else 1, dtype=dtype)


def vstack(*xs, dtype=None):
    """np.vstack: along axis 0, 1-D operands (and scalars) as rows."""
    xs = [reshape(x, (1, -1)) if len(shape_of(operand(x))) < 2 else x for x in xs]
    return concatenate(*xs, axis=0, dtype=dtype)


PAD_MODES = ("constant", "edge", "reflect", "symmetric", "wrap")


def pad_source(j, n, mode, before, after):
    """The source index of position j (before-padding removed) of an axis of length n:
    `j < 0 ? low : j < n ? j : high`, a form that loop partitioning splits so that the
    bulk of each row reads x[j] (contiguous loads, tir/partition._select_split) and only
    the padding computes a mirror, edge or wrap. A side no wider than the axis takes one
    reflection; a wider one repeats it (a modulo: integer division, which x86 has no
    vector instruction for). A symbolic n takes the general form where the axis is
    shorter than the padding, clamped for the prover (its divisor kept >= 1: a select
    may compute both of its sides); the caller guards the read by n >= 1."""
    def fold(low, high):
        e = build.select(build.compare(CmpOp.LT, j, n), j, high) if after else j
        return build.select(build.compare(CmpOp.LT, j, 0), low, e) if before else e
    if mode == "edge":
        return fold(0, n - 1)
    if _static(n) and n == 1:
        return 0
    reflect = int(mode == "reflect")
    if mode == "wrap":
        low, high, period = j + n, j - n, n
    else:       # j < 0 mirrors to -j (-1 - j), j >= n to 2n-2-j (2n-1-j)
        low, high, period = (-j if reflect else -1 - j), 2 * n - 1 - reflect - j, \
            2 * n - 2 * reflect
    if not _static(n):
        period = build.binary(BinOp.MAX, period, 1)
    m = j % period
    general = m if mode == "wrap" else build.select(
        build.compare(CmpOp.LT, m, n), m, period - m if reflect else period - 1 - m)
    if _static(n):
        # (the general form clamped so that the bounds prover sees it inside the axis)
        general = build.binary(BinOp.MIN, general, n - 1)
        return fold(low if before <= n - reflect else general,
                    high if after <= n - reflect else general)

    def side(once, width):
        # one reflection where the axis is at least as long as the padding (a condition
        # that does not vary along the loop), the modulo otherwise
        need = width + (reflect if mode != "wrap" else 0)
        return _clamp(build.select(build.compare(CmpOp.GE, n, need), once, general), n)
    return fold(side(low, before), side(high, after))


def pad(x, constant_values=0, *, pad_width, mode="constant"):
    """np.pad with pad_width as ((before, after),) * ndim; constant_values a scalar operand
    (on arrays a run-time one: every value shares one kernel), cast to x's dtype.
    A padded symbolic axis in a mode other than constant must not be empty (NumPy's
    ValueError): the read is guarded by its length (read_padded), and the other side of
    that select, checked at run time, fails (IndexError) just when x is empty."""
    x = as_tensor(x)
    if mode not in PAD_MODES:
        raise ShapeError(f"mode '{mode}' is not supported by jd.numpy.pad; supported: "
                         f"{', '.join(PAD_MODES)}", user_loc())
    if len(pad_width) != x.ndim:
        raise ShapeError(f"operands could not be broadcast together with remapped shapes "
                         f"[original->remapped]: ({len(pad_width)},2) and requested shape "
                         f"({x.ndim},2)", user_loc())
    if builtins.any(p < 0 for pair in pad_width for p in pair):
        raise ShapeError("index can't contain negative values", user_loc())
    shape = tuple(_add(_add(n, b), a) for n, (b, a) in zip(x.shape, pad_width))
    for axis, (n, (b, a)) in enumerate(zip(x.shape, pad_width)):
        if mode != "constant" and (b or a) and _empty(n):
            raise ShapeError(f"can't extend empty axis {axis} using modes other than "
                             f"'constant' or 'empty'", user_loc())
    value = build.cast(load(operand(constant_values, "constant_values"), (), ()), x.dtype) \
        if mode == "constant" else None

    def body(*idx):
        src, inside = [], []
        for i, n, (b, a) in zip(idx, x.shape, pad_width):
            j = i - b if b else i
            if not (b or a):
                src.append(j)
            elif mode == "constant":
                src.append(j)
                inside.append(build.logical(BinOp.AND, build.compare(CmpOp.GE, j, 0),
                                            build.compare(CmpOp.LT, j, n)))
            else:
                src.append(pad_source(j, n, mode, b, a))
        if mode != "constant":
            return read_padded(x, src, [bool(b or a) for b, a in pad_width])
        e = x[tuple(src)]
        # one select per padded axis, the innermost axis's innermost: the outer axes'
        # conditions are loop-invariant branches, only the last one is a vector mask
        for c in reversed(inside):
            e = build.select(c, e, value)
        return e
    return te.tensor(shape, body, name="pad")


def read_padded(x, src, padded):
    """x[src], src the pad_source indices of the axes where `padded` is true. Where such
    an axis is symbolic the read is guarded by its length: pad_source's index is inside
    it just when it is not empty, and the other side of the select (never taken but where
    x is empty) reads its first element there, an index the bounds check leaves to the
    call: an IndexError where x is empty."""
    e = x[tuple(src)]
    guard = None
    for n, p in zip(x.shape, padded):
        if p and not _static(n):
            c = build.compare(CmpOp.GE, n, 1)
            guard = c if guard is None else build.logical(BinOp.AND, guard, c)
    if guard is None:
        return e
    return build.select(guard, e, x[tuple(
        0 if p and not _static(n) else j for j, n, p in zip(src, x.shape, padded))])


def _shifts(shift):
    """roll's shifts as ints, each converted as NumPy's roll converts them (int(): a
    float shift is truncated, roll(x, 1.5) is roll(x, 1))."""
    seq = shift if isinstance(shift, (tuple, list)) else (shift,)
    if any(isinstance(v, (tuple, list)) for v in seq):
        raise ShapeError("'shift' and 'axis' should be scalars or 1D sequences", user_loc())
    try:
        return tuple(int(v) for v in seq)
    except (TypeError, ValueError):
        raise ArgumentError(f"shift: expected an int or a tuple of ints, got {shift!r}",
                            user_loc()) from None


def roll(x, shift, axis=None):
    """np.roll: elements shifted by `shift` along `axis` (None: in the flattened order).
    On a symbolic axis the shift modulo the length is computed once; each element takes
    one select (no division)."""
    x = as_tensor(x)
    if axis is None:
        return reshape(roll(ravel(x), shift, 0), x.shape)
    shifts, axes = _shifts(shift), _ints(axis, "axis")
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    elif len(axes) == 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):    # (NumPy broadcasts the two: its error)
        raise ShapeError(f"shape mismatch: objects cannot be broadcast to a single shape.  "
                         f"Mismatch is between arg 0 with shape ({len(shifts)},) and arg 1 "
                         f"with shape ({len(axes)},).", user_loc())
    by = {}
    for s, a in zip(shifts, axes):
        a = normalize_axis(a, x.ndim)
        by[a] = by.get(a, ()) + (s,)
    # each shifted axis as r = -s % n, the position read for output 0: an output row is
    # two contiguous pieces, i + r below n, then i + r - n (one select, which loop
    # partitioning splits at its point: no division per element, no gather). (-s % n
    # of a symbolic n is 0 for n = 0, where nothing is read.)
    by = {a: -sum(s) % n if _static(n) else build.binary(BinOp.MOD, _negated(s, n), n)
          for a, s in by.items() for n in (x.shape[a],)
          if not _static(n) and sum(s) or _static(n) and n and sum(s) % n}
    if not by:
        return copy(x)

    def source(d, i):
        n, r = x.shape[d], by[d]
        return build.select(build.compare(CmpOp.LT, i + r, n), i + r, i + r - n)
    return te.tensor(x.shape, lambda *idx: x[tuple(
        source(d, i) if d in by else i for d, i in enumerate(idx))], name="roll")


def _negated(shifts, n):
    """-sum(shifts) as an int64 expression (to be taken modulo n): a constant where it
    fits; else the sum of each shift's -(s % n) (shifts that sum beyond int64, or
    -2**63 alone), a shift beyond int64 taken in int64 pieces."""
    s = sum(shifts)
    if -(1 << 63) <= -s < 1 << 63:
        return Const(-s, "int64")
    terms = [-build.binary(BinOp.MOD, Const(p, "int64"), n)
             for v in shifts for p in _int64_pieces(v)]
    return functools.reduce(operator.add, terms)


_PIECES = 8     # int64 pieces a shift beyond int64 is split into, at most


def _int64_pieces(v):
    """v as a sum of ints that int64 holds (one shift beyond int64, 2**64 + 1 of a uint64
    shift, as a Const would wrap it), or roll's error where that takes over _PIECES."""
    lo, hi = -(1 << 63), (1 << 63) - 1
    if not _PIECES * lo <= v <= _PIECES * hi:
        raise ArgumentError(f"shift: expected shifts within {_PIECES} * int64's range on an "
                            f"axis of symbolic length, got {v}", user_loc())
    out = []
    while not lo <= v <= hi:
        out.append(hi if v > 0 else lo)
        v -= out[-1]
    return out + [v]


TAKE_MODES = ("raise", "wrap", "clip")


class TakeIndexError(JitdlError, IndexError):
    """An index np.take cannot use: NumPy raises IndexError."""


def _take_size_at_call(a, ind, axis, mode):
    """The symbolic length n of a's axis that a take of `ind` needs, checked once at the
    call, also where the result is empty and nothing is read, as NumPy checks (its
    PyArray_TakeFrom): mode 'raise' checks each index wherever a's dimensions before the
    axis hold an element (more than a constant index, -n at least for a negative one; not
    0 for an array of them), 'wrap' and 'clip' that n is not 0 where the result has an
    element."""
    n = a.shape[axis]
    outer, inner = _size(a.shape[:axis]), _size(a.shape[axis + 1:])
    low, message = 0, "cannot do a non-empty take from an empty axes."
    if mode == "raise":
        need = outer
        if isinstance(ind, Const):
            c = int(ind.value)
            low = c if c >= 0 else -c - 1
            message = f"index {c} is out of bounds for axis {axis} with size {n}"
    else:
        need = _mul(outer, inner)
    if _static(need):
        if need == 0:
            return
        te.require_size(n, ">", low, message, user_loc(), error="index")
        return
    # (need == 0 lets any n pass: max(n - low, 1 - min(need, 1)) > 0)
    free = build.binary(BinOp.SUB, build.as_expr(1),
                        build.binary(BinOp.MIN, need, build.as_expr(1)))
    size = build.binary(BinOp.MAX, build.binary(BinOp.SUB, n, build.as_expr(low)), free)
    te.require_size(size, ">", 0, message, user_loc(), error="index")


def _take_from_empty_axis(a, ind, axis, mode):
    """A take of some indices from an axis of length 0: NumPy's PyArray_TakeFrom raises
    where the result has an element, and in mode 'raise' where a's dimensions before the
    axis hold one (each index is checked there); with neither, the result is empty and
    no index is looked at. A symbolic count of elements is checked at the call ('wrap'
    and 'clip'; 'raise' reads outside the axis wherever it reads, so it is refused)."""
    outer, inner = _size(a.shape[:axis]), _size(a.shape[axis + 1:])
    need = outer if mode == "raise" else _mul(outer, inner)
    if not _static(need) and mode != "raise":
        _take_size_at_call(a, ind, axis, mode)
        return
    if _empty(need):
        return
    raise TakeIndexError("cannot do a non-empty take from an empty axes.", user_loc())


def take(a, indices, axis=None, mode="raise"):
    """np.take: a's elements at `indices` along `axis` (None: of a flattened). mode
    'raise' wraps negative indices once and leaves the rest to the kernel's run-time
    bounds check; 'wrap' takes them modulo the length, 'clip' clamps them."""
    a = as_tensor(a)
    if axis is None and a.ndim > 1 and builtins.all(is_one(d) for d in a.shape):
        # one element: read it as a[j, 0, ...] (through a raveled stage, which ignores
        # its index of length 1 once inlined, j would not be checked)
        one = a
        a = te.tensor((1,), lambda j: one[(j,) + (0,) * (one.ndim - 1)], name="ravel")
        axis = 0
    elif axis is None:
        a, axis = ravel(a), 0
    axis = normalize_axis(axis, a.ndim)
    ind = operand(indices)
    if not (ind.dtype == "bool" or ind.dtype.startswith(("int", "uint"))):
        raise ArgumentError(f"Cannot cast array data from dtype('{ind.dtype}') to "
                            f"dtype('int64') according to the rule 'same_kind'", user_loc())
    if mode not in TAKE_MODES:
        raise ArgumentError(f"clipmode must be one of 'clip', 'raise', or 'wrap', got "
                            f"{mode!r}", user_loc())
    n = a.shape[axis]
    if _empty(n) and not _empty(_size(shape_of(ind))):
        _take_from_empty_axis(a, ind, axis, mode)
    # (indices of a symbolic count may be none; eagerly, no size is 0: a result with an
    # element reads, and checks, each index)
    if not _static(n) and _static(_size(shape_of(ind))) and not _empty(_size(shape_of(ind))) \
            and not sizes_known_nonzero():
        _take_size_at_call(a, ind, axis, mode)
    k = len(shape_of(ind))
    shape = a.shape[:axis] + shape_of(ind) + a.shape[axis + 1:]

    def body(*idx):
        j = build.cast(ind[idx[axis:axis + k]] if isinstance(ind, Tensor) else ind, "int64")
        if mode == "raise":
            j = build.select(build.compare(CmpOp.LT, j, 0), j + n, j)
        elif mode == "wrap":      # (a symbolic length may be 0: no division by it)
            j = j % (n if _static(n) else build.binary(BinOp.MAX, n, 1))
        else:
            j = build.binary(BinOp.MIN, build.binary(BinOp.MAX, j, 0), n - 1)
        read = a[idx[:axis] + (j,) + idx[axis + k:]]
        # on a symbolic axis (of length 0, say) an index that is not data is checked too
        return read if _static(n) else _checked(read)
    return te.tensor(shape, body, name="take")


def repeat(a, repeats, axis=None):
    """np.repeat: each element `repeats` times along `axis` (None: of a flattened);
    repeats an int, or a tuple with one count per element (the source of an output
    position counts the boundaries at or before it: one comparison per element)."""
    a = as_tensor(a)
    if axis is None or a.ndim == 0:     # (NumPy: a 0-d array repeats as a 1-d one)
        a, axis = ravel(a), 0 if axis is None else axis
    axis = normalize_axis(axis, a.ndim)
    n = a.shape[axis]
    reps = _ints(repeats, "repeats")
    if builtins.any(r < 0 for r in reps):
        # (NumPy's words: one count is the result's size, several are per element)
        raise ShapeError("negative dimensions are not allowed" if len(reps) == 1 else
                         "repeats may not contain negative values.", user_loc())
    if len(reps) == 1:
        r = reps[0]
        shape = a.shape[:axis] + (_mul(n, r),) + a.shape[axis + 1:]
        return te.tensor(shape, lambda *idx: a[
            idx[:axis] + (idx[axis] // r if r != 1 else idx[axis],) + idx[axis + 1:]],
            name="repeat")
    if not _static(n):
        raise ShapeError(f"repeat(): one count per element ({len(reps)} counts) needs a "
                         f"static length along axis {axis}, but it is the symbolic (dynamic) "
                         f"size {n}; make that argument static (not dynamic=)", user_loc())
    if len(reps) != n:
        raise ShapeError(f"operands could not be broadcast together with shape ({n},) "
                         f"({len(reps)},)", user_loc())
    bounds = list(np.cumsum(reps)[:-1])
    shape = a.shape[:axis] + (builtins.sum(reps),) + a.shape[axis + 1:]

    def body(*idx):
        i, j = idx[axis], build.as_expr(0)
        for b in bounds:
            j = j + build.cast(build.compare(CmpOp.GE, i, int(b)), "int64")
        j = build.binary(BinOp.MIN, j, n - 1)
        return a[idx[:axis] + (j,) + idx[axis + 1:]]
    return te.tensor(shape, body, name="repeat")


def tile(a, reps):
    """np.tile: a repeated reps[d] times along each axis (a padded with leading axes of
    length 1, or reps with leading 1s, to the same rank)."""
    a = as_tensor(a)
    reps = _ints(reps, "reps")
    if builtins.any(r < 0 for r in reps):
        raise ShapeError("negative dimensions are not allowed", user_loc())
    ndim = builtins.max(a.ndim, len(reps))
    reps = (1,) * (ndim - len(reps)) + reps
    if a.ndim < ndim:
        a = reshape(a, (1,) * (ndim - a.ndim) + a.shape)
    shape = tuple(_mul(n, r) for n, r in zip(a.shape, reps))
    if builtins.any(_empty(n) for n in shape):
        return te.tensor(shape, lambda *idx: build.cast(0, a.dtype), name="tile")
    def source(i, n, r):
        if is_one(n):
            return 0
        if r == 1:
            return i
        if _static(n) or r > 8:
            return i % n
        # a few copies of a symbolic length: which copy, by comparisons (no division)
        e = i - (r - 1) * n
        for k in range(r - 2, -1, -1):
            e = build.select(build.compare(CmpOp.LT, i, (k + 1) * n), i - k * n if k else i, e)
        return e
    return te.tensor(shape, lambda *idx: a[tuple(
        source(i, n, r) for i, n, r in zip(idx, a.shape, reps))], name="tile")


any_size(copy, astype, flip, concatenate, stack, hstack, vstack, pad, roll, take, repeat,
         tile, triangle, diff)


# Dimensions of the operands that these builders never broadcast: builder.solid(**static)
# -> f(rank) -> those dimensions of an operand of that rank (from 0). Their kernel of
# symbolic extents takes size 1 there as any other size, so a size of 1 stays symbolic
# in the key (runtime.kernel.shape_key): a concatenate of pieces of 1 to 8 elements
# compiles once, not once per pattern of ones. (The other dimensions of a concatenate
# must match exactly; NumPy's errors for them come from a trace of the call's shapes.)
# The trace takes a symbolic size as never 1 (build.size_test, may_agree): a builder
# marked so must not decide anything on `shape[d] == 1` for such a dimension (tile and
# pad do, which is why they are not marked).
def _along(axis):
    def dims(rank):
        return (axis % rank,) if -rank <= axis < rank else ()
    return dims


def _hstack_dims(rank):
    return (0,) if rank == 1 else (1,) if rank > 1 else ()


def _vstack_dims(rank):
    return (0,) if rank > 1 else ()


concatenate.solid = lambda axis=0, dtype=None: every_dim if axis is None else _along(axis)
# Builders of one array operand (nothing to broadcast against) that decide nothing on a
# size of 1 of it: copy of vectors of random lengths compiles one kernel, not two. (roll
# and repeat of axis=None read through ravel and reshape, whose symbolic groups compute
# each source index from the sizes, any of them 1; repeat with one count per element is
# a take on arrays, and needs a static length here; diff's length along its axis is at
# least n + 1 on arrays, the wrapper's NumPy call otherwise)
copy.solid = lambda: every_dim
astype.solid = lambda dtype: every_dim
roll.solid = lambda shift, axis=None: every_dim
repeat.solid = lambda repeats, axis=None: every_dim if len(_ints(repeats, "repeats")) == 1 \
    else None
triangle.solid = lambda k=0, upper=False: every_dim
diff.solid = lambda n=1, axis=-1: every_dim
# take broadcasts neither its array nor its indices (its test of an array of only ones,
# is_one, holds for static sizes; symbolic ones take the ravel, whose read over symbolic
# sizes is checked at run time, as each index is: an index out of range, or into an
# empty axis, is still NumPy's IndexError)
take.solid = lambda axis=None, mode="raise": every_dim
stack.solid = lambda axis=0, dtype=None: every_dim     # (the operands' shapes are one)
hstack.solid = lambda dtype=None: _hstack_dims
vstack.solid = lambda dtype=None: _vstack_dims
scalar_result(take)
# (copy and astype of a.T, order='K': NumPy's result is Fortran-ordered, made from the
# memory of a as it lies, not gathered across it)
layout_free("elementwise", copy, astype)
