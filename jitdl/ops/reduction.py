"""Reduction builders with NumPy's dtype rules: sum/prod of small integers and bools in
int64, mean/var/std of integers in float64, float32 sums accumulated in float64 (closer to
NumPy's pairwise summation than a float32 accumulator over millions of elements); max/min
propagate NaN and argmax/argmin report the first NaN, as NumPy does."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from jitdl import dtypes
from jitdl.errors import VALUE_CHECKS, ArgumentError, ShapeError, user_loc
from jitdl.ir import build
from jitdl.ir.nodes import BinOp, CmpOp, Const, Intrin, ReduceOp, Var
from jitdl.ops.core import (any_size, as_tensor, elementwise, is_one, layout_free,
                            normalize_axes, may_agree, operand, reduced_size, reduction,
                            scalar_result, shape_of, shape_text, sizes_known_nonzero)
from jitdl.ops import elementwise as ew
from jitdl.target.cpu import host
from jitdl.te import ops as te

_NAMES = {ReduceOp.MAX: "maximum", ReduceOp.MIN: "minimum"}


def _sum_dtype(dt):
    return "int64" if dt == "bool" or dtypes.is_int(dt) else dt


def _mean_dtype(dt):
    return dt if dtypes.is_float(dt) else "float64"


def _acc(dt):
    return "float64" if dt == "float32" else dt


def _cast(t, dt):
    return t if t.dtype == dt else elementwise(lambda a: build.cast(a, dt), t)


def _masked(x, where, fill):
    """x where `where` holds, else `fill` (the reduction's identity): NumPy's where=."""
    if where is None:
        return x
    w = operand(where, "where")
    if w.dtype != "bool":
        raise ArgumentError(f"Cannot cast array data from dtype('{w.dtype}') to "
                            f"dtype('bool') according to the rule 'safe' (where=)", user_loc())
    ws = shape_of(w)
    if len(ws) > x.ndim or not all(is_one(d) or may_agree(d, n)
                                   for d, n in zip(ws[::-1], x.shape[::-1])):
        raise ShapeError(f"non-broadcastable operand with shape {shape_text(ws)} doesn't "
                         f"match the broadcast shape {shape_text(x.shape)} (where=)",
                         user_loc())
    return elementwise(lambda a, m: build.select(m, a, build.cast(fill, a.dtype)), x, w)


def _initial(r, op, initial):
    """The reduction r combined with NumPy's initial= value."""
    if initial is None:
        return r
    binop = {ReduceOp.SUM: BinOp.ADD, ReduceOp.PROD: BinOp.MUL, ReduceOp.MAX: BinOp.MAX,
             ReduceOp.MIN: BinOp.MIN}[op]
    if type(initial) is int and dtypes.is_float(r.dtype) and not -2 ** 63 <= initial < 2 ** 63:
        initial = float(initial)    # NumPy converts it to the float dtype (NEP 50)
    return elementwise(lambda a: build.binary(binop, a, build.cast(initial, a.dtype)), r)


def _sum_like(op, x, axis, dtype, keepdims, initial, where):
    x = as_tensor(x)
    dt = dtype or _sum_dtype(x.dtype)
    acc = _acc(dt)
    x = _masked(x, where, 0 if op == ReduceOp.SUM else 1)
    r = _initial(reduction(op, x, axis, keepdims, dtype=acc), op, initial)
    return _cast(r, dt)


def sum_(x, where=None, *, axis=None, dtype=None, keepdims=False, initial=None):
    """np.sum."""
    return _sum_like(ReduceOp.SUM, x, axis, dtype, keepdims, initial, where)


def prod(x, where=None, *, axis=None, dtype=None, keepdims=False, initial=None):
    """np.prod."""
    return _sum_like(ReduceOp.PROD, x, axis, dtype, keepdims, initial, where)


def _check_nonempty(x, axis, what):
    n = reduced_size(x, axis)
    if isinstance(n, int) and n == 0:
        raise ShapeError(f"zero-size array to reduction operation {what} which has no "
                         "identity", user_loc())


def _nonempty_at_run_time(r, n, message):
    """r, checked at run time to reduce a non-empty axis where its size n is symbolic
    (a dynamic definition called with an empty array): NumPy raises there (max of
    nothing), and the reduction would give its identity (-inf). Where the call cannot
    evaluate n, the check, `0 < n` per output element (none where the output is empty),
    rides on the read of r and fails as NumPy's ValueError (errors.VALUE_CHECKS).
    Where the call can evaluate n, it checks n once instead, before the kernel runs (also
    where the output is empty: NumPy's max of a (0, 0) array's rows raises)."""
    if isinstance(n, int) or sizes_known_nonzero() or \
            te.require_size(n, ">", 0, message, user_loc()):
        return r
    check = ((Const(0, "int64"), n, f"{VALUE_CHECKS[0]}{message})"),)

    def body(*idx):
        return dataclasses.replace(r[idx], carried=check)
    return te.tensor(r.shape, body, name=r.name)


def _minmax(op, x, axis, keepdims, initial, where):
    x = as_tensor(x)
    if initial is None:
        if where is not None:
            _masked(x, where, 0)        # (NumPy's errors for the mask itself come first)
            raise ShapeError(f"reduction operation '{_NAMES[op]}' does not have an identity, "
                             "so to use a where mask one has to specify 'initial'", user_loc())
        _check_nonempty(x, axis, _NAMES[op])
        return _nonempty_at_run_time(reduction(op, x, axis, keepdims), reduced_size(x, axis),
                                     _no_identity(_NAMES[op]))
    n = reduced_size(x, axis)
    if isinstance(n, int) and n == 0:       # nothing reduced: initial everywhere
        shape = reduction(ReduceOp.SUM, x, axis, keepdims)
        return _initial(elementwise(lambda a: build.cast(initial, x.dtype), shape), op,
                        initial)
    if where is not None:
        fill = -math.inf if op == ReduceOp.MAX else math.inf
        if not dtypes.is_float(x.dtype):
            fill = build.int_bounds(x.dtype)[0 if op == ReduceOp.MAX else 1] \
                if x.dtype != "bool" else op == ReduceOp.MIN
        x = _masked(x, where, fill)
    return _initial(reduction(op, x, axis, keepdims), op, initial)


def _no_identity(what):
    return f"zero-size array to reduction operation {what} which has no identity"


def max_(x, where=None, *, axis=None, keepdims=False, initial=None):
    """np.max: NaN wins."""
    return _minmax(ReduceOp.MAX, x, axis, keepdims, initial, where)


def min_(x, where=None, *, axis=None, keepdims=False, initial=None):
    """np.min: NaN wins."""
    return _minmax(ReduceOp.MIN, x, axis, keepdims, initial, where)


def ptp(x, *, axis=None, keepdims=False):
    """np.ptp: max - min in the operand's dtype."""
    x = as_tensor(x)
    _check_nonempty(x, axis, "maximum")     # (NumPy's AxisError and max's error come first)
    if x.dtype == "bool":
        raise ArgumentError("numpy boolean subtract, the `-` operator, is not supported, "
                            "use the bitwise_xor, the `^` operator, or the logical_xor "
                            "function instead. (ptp of a bool array)", user_loc())
    return _nonempty_at_run_time(elementwise(lambda a, b: build.binary(BinOp.SUB, a, b),
                                             reduction(ReduceOp.MAX, x, axis, keepdims),
                                             reduction(ReduceOp.MIN, x, axis, keepdims)),
                                 reduced_size(x, axis), _no_identity("maximum"))


def _arg(op, x, axis, keepdims, blocked, narrow, columns=None):
    x = as_tensor(x)
    if axis is not None and not isinstance(axis, int):     # (NumPy takes one axis here)
        raise ArgumentError(f"'{type(axis).__name__}' object cannot be interpreted as an "
                            f"integer ({op.value}'s axis must be an int or None)", user_loc())
    # axis=None: one reduction over every axis, whose position is the row-major one (a
    # 0-d x is NumPy's 1-d array of one element here: axis 0 or -1, and its AxisError)
    axis = None if axis is None else normalize_axes(axis, x.ndim or 1, allow_none=False)[0]
    if x.ndim == 0:
        axis = None
    n = reduced_size(x, axis)
    if isinstance(n, int) and n == 0:
        raise ShapeError(f"attempt to get {op.value} of an empty sequence", user_loc())
    # Along another axis too, two column reductions, which stream rows with the columns
    # as SIMD lanes, where the elements after the axis fill a vector (the one-pass loop,
    # a branch per element, took 2.2-2.4 ms on 1000 x 1000 float64 along axis 0, NumPy
    # 1.6-1.8, the two passes 0.4) or number one (a (2 * 10^6, 1) array along axis 0:
    # one pass 8.4-9.7 ms, two 3.5); with 2 to a vector's less after it, the one-pass loop
    # ((10^6, 2) along axis 0: 9 ms, the two passes 17). columns: the caller's choice,
    # where those sizes are known only at run time (jd.numpy's kernels); None: from x's
    # static sizes, two passes where they are unknown.
    if columns is None and axis is not None and x.ndim:
        inner = 1
        for d in x.shape[axis + 1:]:
            inner = inner * d if isinstance(d, int) and isinstance(inner, int) else None
        columns = inner is None or inner == 1 or \
            inner >= host().lanes(dtypes.itemsize(x.dtype))
    if blocked is None:     # (blocks where the size is large, or known only at run time)
        blocked = not (isinstance(n, int) and n < ARG_BLOCKED_MIN) if x.ndim == 1 else \
            isinstance(n, int) and rows_blocked(n, dtypes.itemsize(x.dtype))
    if (x.ndim == 1 or axis == x.ndim - 1) and not keepdims and blocked:
        r = _blocked_first_position(op, x)
    elif x.ndim and (axis in (None, x.ndim - 1) or columns):
        narrow = narrow or isinstance(n, int) and n < _I32_LIMIT
        r = _first_position(op, x, axis, keepdims, "int32" if narrow else "int64")
    else:
        r = reduction(op, x, axis, keepdims)
    return _nonempty_at_run_time(r, n, f"attempt to get {op.value} of an empty sequence")


# elements per block of a 1-d argmax's first pass: blocks in L1, and a short scalar scan of
# the one block found (its read, at a position read from memory, is checked at run time)
_ARG_BLOCK = 512
# the size from which a 1-d argmax reads x once in blocks; below it, twice, with less to do
ARG_BLOCKED_MIN = 8 * _ARG_BLOCK


def rows_blocked(n, itemsize):
    """Whether argmax/argmin along rows of n elements reads each row once, in blocks: where
    a row outgrows L1, from which the two-pass form's second pass would read it (on one
    core: (10, 10^5) float32 124 -> 85 us, NumPy 98; (125, 32768) 590 -> 410, NumPy 420);
    along shorter rows the scan of a block, a checked read per element, costs more than
    that second pass ((1000, 4096) float32: 510 -> 1100 us)."""
    return n >= ARG_BLOCKED_MIN and n * itemsize > host().l1_bytes


def _hit(v, best):
    """Whether element v is the extreme `best` (a NaN where best is one: the first NaN)."""
    hit = build.compare(CmpOp.EQ, v, best)
    if dtypes.is_float(v.dtype):        # (a select on the one best: no branch per element)
        hit = build.select(build.call(Intrin.ISNAN, best), build.call(Intrin.ISNAN, v), hit)
    return hit


def _blocked_first_position(op, x):
    """argmin/argmax along the last axis of x (each row: a 1-d x is one) with one pass over
    its memory: the extreme of each whole block of _ARG_BLOCK elements (blocks in parallel,
    each a vector loop) and of the tail after them, the extreme m of those, then the first
    position holding m in the first block that holds it, and in the tail. The two-pass form
    (_first_position) read all of x twice: 2-3x NumPy's time at 1e7 elements, 0.7-0.8x
    along rows of 1e5 elements (which the second pass reads from L2, not L1)."""
    ext = ReduceOp.MIN if op == ReduceOp.ARGMIN else ReduceOp.MAX
    lead, n, block = x.shape[:-1], x.shape[-1], _ARG_BLOCK
    whole = n // block
    start = whole * block                   # (of the tail)
    last = build.cast(np.iinfo(np.int64).max, "int64")
    # (a size known here has whole blocks, and maybe no tail: a reduction over nothing
    # has no identity; a symbolic one may have either empty at run time, which is fine)
    has_tail = not isinstance(n, int) or n > start
    j, t = te.reduce_axis(block), te.reduce_axis(n - start) if has_tail else None

    def at_tail(i):
        # x at start + t: over a symbolic size other than one of an argument's own (the
        # X_n0 * X_n1 of a flattened X, the X_n0 - 1 of a diff), the static prover cannot
        # place start = n // block * block at 0 or more, so the read is checked at run time
        read = x[i + (start + t,)]
        if isinstance(n, int) or isinstance(n, Var):
            return read
        return dataclasses.replace(read, checked=True)
    blocks = te.tensor(lead + (whole,), lambda *i: te.reduce(
        ext, x[i[:-1] + (i[-1] * block + j,)], [j]), name=f"{op.value}_blocks")
    kb = te.reduce_axis(whole)
    m = te.tensor(lead, lambda *i: te.reduce(ext, blocks[i + (kb,)], [kb]),
                  name=f"{op.value}_top")
    if has_tail:
        tail = te.tensor(lead, lambda *i: te.reduce(ext, at_tail(i), [t]),
                         name=f"{op.value}_tail")
        top = m
        m = te.tensor(lead, lambda *i: build.binary(
            BinOp.MIN if ext == ReduceOp.MIN else BinOp.MAX, top[i], tail[i]),
            name=f"{op.value}_extreme")
    first_block = te.tensor(lead, lambda *i: te.reduce(
        ReduceOp.MIN, build.select(_hit(blocks[i + (kb,)], m[i]), build.cast(kb, "int64"),
                                   last), [kb]), name=f"{op.value}_block")
    # (no whole block: nothing to scan)
    jj = te.reduce_axis(min(whole, 1) * block if isinstance(whole, int) else
                        build.binary(BinOp.MIN, whole, 1) * block)

    def first(*i):
        # (no block holds m: the last block, where nothing is m, or nothing at all to
        # read; clamped into [0, whole - 1], the block's reads are proved in bounds)
        fb = build.binary(BinOp.MAX, build.binary(BinOp.MIN, first_block[i], whole - 1), 0)
        p = fb * block + build.cast(jj, "int64")
        return te.reduce(ReduceOp.MIN, build.select(_hit(x[i + (p,)], m[i]), p, last), [jj])
    in_blocks = te.tensor(lead, first, name=f"{op.value}_in_block" if has_tail else op.value)
    if not has_tail:
        return in_blocks
    in_tail = te.tensor(lead, lambda *i: te.reduce(ReduceOp.MIN, build.select(
        _hit(at_tail(i), m[i]), start + build.cast(t, "int64"), last), [t]),
        name=f"{op.value}_in_tail")
    return te.tensor(lead, lambda *i: build.binary(BinOp.MIN, in_blocks[i], in_tail[i]),
                     name=op.value)


_I32_LIMIT = 2 ** 31      # positions below it are int32 in the second pass (narrow)


def _first_position(op, x, axis, keepdims, index="int64"):
    """argmin/argmax over every axis or one as two reductions that vectorise and run
    on every thread: the extreme m (NaN where there is one), then the least position
    (row-major over every axis) holding m (a NaN where m is one). The one-pass reduction
    keeps a value and a position that each element may replace: a branch per element, 4x
    NumPy's time at 1e5 elements, 2-4x along 1000-element rows. The second pass keeps
    positions in `index` (int32 where they fit: as many lanes as float32 elements, and a
    native vector minimum, which AVX2 lacks for int64: 1000 rows of 1000 float32 on one
    core 378 -> 150 us, NumPy 100-146)."""
    m = reduction(ReduceOp.MIN if op == ReduceOp.ARGMIN else ReduceOp.MAX, x, axis, False)
    last = build.cast(np.iinfo(index).max, index)
    axes = range(x.ndim) if axis is None else (axis,)
    ks = {a: te.reduce_axis(x.shape[a]) for a in axes}

    def first(*idx):
        pos = None
        for a, k in ks.items():
            pos = k if pos is None else pos * build.cast(x.shape[a], "int64") + k
        it = iter(idx)
        v = x[tuple(ks[d] if d in ks else next(it) for d in range(x.ndim))]
        return te.reduce(ReduceOp.MIN, build.select(_hit(v, m[idx]), build.cast(pos, index),
                                                    last), list(ks.values()))
    r = te.tensor(m.shape, first, name=op.value)
    if index != "int64":
        narrow = r
        r = te.tensor(m.shape, lambda *i: build.cast(narrow[i], "int64"),
                      name=f"{op.value}_int64")
    if not keepdims:
        return r
    return te.tensor(tuple(1 if d in ks else n for d, n in enumerate(x.shape)),
                     lambda *i: r[tuple(j for d, j in enumerate(i) if d not in ks)],
                     name=op.value)


def argmax(x, *, axis=None, keepdims=False, blocked=None, narrow=False, columns=None):
    """np.argmax: the first maximum's position (the first NaN's where there is one).
    blocked: whether a 1-d x, or x along its last axis, is read once, in blocks (None: a
    1-d x where its size is at least ARG_BLOCKED_MIN or symbolic, rows where
    rows_blocked says so). narrow: the caller knows that the reduced size, symbolic
    here, is below 2**31 (positions are then int32 until the result). columns: along an
    axis other than the last, two column reductions (True) or one pass (False); None:
    from the sizes after the axis (_arg)."""
    return _arg(ReduceOp.ARGMAX, x, axis, keepdims, blocked, narrow, columns)


def argmin(x, *, axis=None, keepdims=False, blocked=None, narrow=False, columns=None):
    """np.argmin: the first minimum's position (the first NaN's where there is one)."""
    return _arg(ReduceOp.ARGMIN, x, axis, keepdims, blocked, narrow, columns)


def all_(x, where=None, *, axis=None, keepdims=False):
    """np.all (bool)."""
    x = _masked(as_tensor(x), where, True)
    return reduction(ReduceOp.ALL, x, axis, keepdims)


def any_(x, where=None, *, axis=None, keepdims=False):
    """np.any (bool)."""
    x = _masked(as_tensor(x), where, False)
    return reduction(ReduceOp.ANY, x, axis, keepdims)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """np.allclose: whether np.isclose holds for every element pair (a 0-d bool)."""
    return reduction(ReduceOp.ALL, as_tensor(ew.isclose(a, b, rtol, atol, equal_nan)), None,
                     False)


def array_equal(a1, a2, equal_nan=False):
    """np.array_equal of operands of one shape: whether every element pair is equal (NaN
    pairs too where equal_nan), a 0-d bool."""
    def same(p, q):
        e = build.compare(CmpOp.EQ, p, q)
        if equal_nan and (dtypes.is_float(p.dtype) or dtypes.is_float(q.dtype)):
            e = build.logical(BinOp.OR, e, build.logical(
                BinOp.AND, build.call(Intrin.ISNAN, p), build.call(Intrin.ISNAN, q)))
        return e
    return reduction(ReduceOp.ALL, as_tensor(elementwise(same, operand(a1), operand(a2))),
                     None, False)


def count_nonzero(x, *, axis=None, keepdims=False):
    """np.count_nonzero (int64)."""
    x = as_tensor(x)
    return reduction(ReduceOp.SUM, elementwise(build.truth, x), axis, keepdims, dtype="int64")


def _count(x, axis, where, keepdims):
    """The number of elements each output of a reduction combines, as a float64 scalar or,
    with where=, a float64 tensor counting the selected ones."""
    if where is None:
        return build.cast(reduced_size(x, axis), "float64")
    w = elementwise(lambda a, b: build.truth(b), x, where)
    return reduction(ReduceOp.SUM, w, axis, keepdims, dtype="float64")


def mean(x, where=None, *, axis=None, dtype=None, keepdims=False):
    """np.mean: the sum (in float64 for float32 and integers) over the count."""
    x = as_tensor(x)
    dt = dtype or _mean_dtype(x.dtype)
    acc = _acc(dt) if dtypes.is_float(dt) else "float64"
    s = reduction(ReduceOp.SUM, _masked(x, where, 0), axis, keepdims, dtype=acc)
    m = elementwise(lambda a, n: build.binary(BinOp.DIV, a, build.cast(n, acc)),
                    s, _count(x, axis, where, keepdims))
    return _cast(m, dt)


def var(x, ddof=0, where=None, *, axis=None, dtype=None, keepdims=False, root=False):
    """np.var, two passes (the mean first) for accuracy; np.std with `root`. ddof is an
    operand: on arrays a run-time scalar, so every value shares one kernel."""
    x = as_tensor(x)
    dt = dtype or _mean_dtype(x.dtype)
    acc = "float64" if dt in ("float32", "float64") or not dtypes.is_float(dt) else dt
    m = mean(x, where, axis=axis, dtype=acc, keepdims=True)
    d2 = elementwise(lambda a, b: build.binary(BinOp.MUL, build.binary(BinOp.SUB, a, b),
                                               build.binary(BinOp.SUB, a, b)),
                     elementwise(lambda a: build.cast(a, acc), x), m)
    s = reduction(ReduceOp.SUM, _masked(d2, where, 0), axis, keepdims)

    def divide(a, n, d):
        # NumPy divides by max(n - ddof, 0): inf or NaN where ddof >= n, NaN for a NaN
        # ddof (a select, not a max: NaN passes it)
        dof = build.binary(BinOp.SUB, build.cast(n, acc), build.cast(d, acc))
        return build.binary(BinOp.DIV, a, build.select(build.compare(CmpOp.LT, dof, 0),
                                                      build.cast(0.0, acc), dof))
    v = elementwise(divide, s, _count(x, axis, where, keepdims), operand(ddof, "ddof"))
    if root:
        v = elementwise(lambda a: build.call(Intrin.SQRT, a), v)
    return _cast(v, dt)


def std(x, ddof=0, where=None, *, axis=None, dtype=None, keepdims=False):
    """np.std: the square root of np.var."""
    return var(x, ddof, where, axis=axis, dtype=dtype, keepdims=keepdims, root=True)


def average(x, weights=None, *, axis=None, keepdims=False, returned=False):
    """np.average: the mean, or with weights sum(x * w) / sum(w) (w broadcast to x);
    with `returned`, the pair of it and the weights' sum (without weights the count),
    in the average's dtype and shape."""
    if weights is None:
        m = mean(x, axis=axis, keepdims=keepdims)
        if not returned:
            return m
        n = build.cast(reduced_size(as_tensor(x), axis), "float64")
        return m, elementwise(lambda a: build.cast(n, a.dtype), m)
    x, w = as_tensor(x), as_tensor(operand(weights, "weights"))
    # (sizes that may agree are x's: symbolic ones are checked at the call)
    if len(w.shape) != x.ndim or not all(may_agree(a, b) for a, b in zip(w.shape, x.shape)):
        # NumPy's rule: weights of another shape than x's run along the axes, in their order
        if axis is None:
            raise ArgumentError("Axis must be specified when shapes of a and weights differ.",
                                user_loc())
        axes = normalize_axes(axis, x.ndim)
        if len(w.shape) != len(axes) or not all(
                may_agree(n, x.shape[a]) for n, a in zip(w.shape, axes)):
            raise ShapeError("Shape of weights must be consistent with shape of a along "
                             "specified axis.", user_loc())
        w1 = w
        w = te.tensor(x.shape, lambda *idx: w1[tuple(idx[a] for a in axes)], name="weights")
    dt = build.result_dtype(np.add, (_mean_dtype(x.dtype), False),
                            (_mean_dtype(w.dtype), False))
    acc = _acc(dt)
    xw = elementwise(lambda a, b: build.binary(BinOp.MUL, build.cast(a, acc),
                                               build.cast(b, acc)), x, w)
    ws = elementwise(lambda a, b: build.cast(b, acc), x, w)
    total = reduction(ReduceOp.SUM, ws, axis, keepdims)
    r = elementwise(lambda a, b: build.binary(BinOp.DIV, a, b),
                    reduction(ReduceOp.SUM, xw, axis, keepdims), total)
    return (_cast(r, dt), _cast(total, dt)) if returned else _cast(r, dt)


def _nan_fill(x, fill):
    return elementwise(lambda a: build.select(build.call(Intrin.ISNAN, a),
                                              build.cast(fill, a.dtype), a), x) \
        if dtypes.is_float(x.dtype) else x


def nansum(x, *, axis=None, dtype=None, keepdims=False):
    """np.nansum: NaN counted as zero."""
    return sum_(_nan_fill(as_tensor(x), 0.0), axis=axis, dtype=dtype, keepdims=keepdims)


def nanmax(x, *, axis=None, keepdims=False):
    """np.nanmax: NaN ignored (an all-NaN slice gives NaN)."""
    return _nan_minmax(ReduceOp.MAX, x, axis, keepdims)


def nanmin(x, *, axis=None, keepdims=False):
    """np.nanmin: NaN ignored (an all-NaN slice gives NaN)."""
    return _nan_minmax(ReduceOp.MIN, x, axis, keepdims)


def _nan_minmax(op, x, axis, keepdims):
    x = as_tensor(x)
    what = "fmax" if op == ReduceOp.MAX else "fmin"       # (NumPy's name here)
    _check_nonempty(x, axis, what)
    if not dtypes.is_float(x.dtype):
        return _nonempty_at_run_time(reduction(op, x, axis, keepdims), reduced_size(x, axis),
                                     _no_identity(what))
    r = reduction(op, _nan_fill(x, -math.inf if op == ReduceOp.MAX else math.inf), axis,
                  keepdims)
    seen = reduction(ReduceOp.ANY, elementwise(
        lambda a: build.logical_not(build.call(Intrin.ISNAN, a)), x), axis, keepdims)
    return _nonempty_at_run_time(
        elementwise(lambda a, s: build.select(s, a, build.cast(math.nan, a.dtype)), r, seen),
        reduced_size(x, axis), _no_identity(what))


def nanmean(x, *, axis=None, dtype=None, keepdims=False):
    """np.nanmean: the mean of the non-NaN elements."""
    x = as_tensor(x)
    if not dtypes.is_float(x.dtype):
        return mean(x, axis=axis, dtype=dtype, keepdims=keepdims)
    ok = elementwise(lambda a: build.logical_not(build.call(Intrin.ISNAN, a)), x)
    return mean(x, ok, axis=axis, dtype=dtype, keepdims=keepdims)


any_size(sum_, prod, max_, min_, ptp, argmax, argmin, all_, any_, count_nonzero, mean, var,
         std, average, nansum, nanmax, nanmin, nanmean, allclose, array_equal)
scalar_result(sum_, prod, max_, min_, ptp, argmax, argmin, all_, any_, count_nonzero, mean,
              var, std, nansum, nanmax, nanmin, nanmean, average, allclose, array_equal)


def _kept(axis):
    """builder.solid's f(rank) for a reduction over `axis`: the axes it keeps, which its one
    array operand broadcasts against nothing, so a size of 1 there stays symbolic in a
    dynamic kernel's key (a row sum of (1, n) and (m, n) arrays shares one kernel). None
    over every axis. The reduced axes keep their sizes of 1 (and of 0, which never reach
    a dynamic kernel: max over nothing is NumPy's error, from a trace of the call's
    shapes, and its kernel of symbolic sizes leaves that check out)."""
    if axis is None:
        return None
    axes = axis if isinstance(axis, tuple) else (axis,)

    def dims(rank):
        if not all(-rank <= a < rank for a in axes):    # (NumPy's AxisError, traced)
            return ()
        reduced = {a % rank for a in axes}
        return tuple(d for d in range(rank) if d not in reduced)
    return dims


# (a where= mask broadcasts against the array: no solid dimensions where there is one;
# var's and std's ddof is a number; average, allclose and array_equal broadcast two arrays)
for _b in (sum_, prod, max_, min_, ptp, argmax, argmin, all_, any_, count_nonzero, mean, var,
           std, nansum, nanmax, nanmin, nanmean):
    _b.solid = lambda axis=None, **_: _kept(axis)
    _b.solid_unless = ("where",)
del _b
layout_free("reduction", sum_, prod, max_, min_, ptp, all_, any_, count_nonzero, mean, var,
            std, nansum, nanmax, nanmin, nanmean)
layout_free("index", argmax, argmin)
