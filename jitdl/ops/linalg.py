"""Products as builders: matmul, dot, vdot, inner, outer, tensordot and einsum are one
contraction stage each, `out[o...] = sum(prod(x[labels of x]) over the other labels)`.

A 2-D product is exactly the stage one writes by hand, `sum(A[i, k] * B[k, j], axis=k)`,
so the auto schedule register-tiles it the same way. Result dtypes follow NumPy: the
operands' common type (int8 @ int8 stays int8 and wraps), bool products are logical
(any of and).
"""
from __future__ import annotations

import numpy as np

from jitdl.errors import AxisError, ShapeError, user_loc
from jitdl.ir import build
from jitdl.ir.nodes import BinOp, CmpOp, ReduceOp, SizeVar
from jitdl.ops.core import (any_size, broadcast_shapes, elementwise, is_one, may_agree,
                            normalize_axes, operand, same_dim, scalar_result, shape_of,
                            shape_text)
from jitdl.ops.manipulation import astype, moveaxis, ravel, transpose
from jitdl.te import ops as te
from jitdl.te.tensor import Tensor

_MATMUL_SIG = "(n?,k),(k,m?)->(n?,m?)"


def _dtype(*xs):
    return np.result_type(*(np.dtype(x.dtype) for x in xs)).name


def contract(xs, labels, out, extents, name):
    """The stage out[out labels] = sum over the remaining labels of the product of
    x[labels of x] for x in xs, in the operands' common dtype. A label None reads index 0
    (a broadcast dimension); `extents` gives every label's length."""
    dt = _dtype(*xs)
    summed = [lab for lab in dict.fromkeys(lab for ls in labels for lab in ls)
              if lab is not None and lab not in out]
    shape = tuple(extents[lab] for lab in out)
    if summed and out:
        xs, labels = zip(*(_output_last(x, ls, out) for x, ls in zip(xs, labels)))

    def body(*idx):
        # (an output axis of length 1 reads index 0: a row vector times a matrix is then
        # the column reduction it is, streaming B's rows, not register tiles of one row
        # that read 128-byte strips 16 KiB apart: (1, 4096) @ (4096, 4096) float32 on
        # the 2-core Xeon 11.1 -> 4.9 ms, NumPy 7.2)
        env = {lab: 0 if type(extents[lab]) is int and extents[lab] == 1 else i
               for lab, i in zip(out, idx)}
        ks = [te.reduce_axis(extents[lab]) for lab in summed]
        env.update(zip(summed, ks))
        e = None
        for x, ls in zip(xs, labels):
            v = build.cast(x[tuple(0 if lab is None else env[lab] for lab in ls)]
                           if isinstance(x, Tensor) else x, dt)
            e = v if e is None else build.binary(BinOp.MUL, e, v)
        if not ks:
            return e
        return te.reduce(ReduceOp.ANY if dt == "bool" else ReduceOp.SUM, e, ks)
    return te.tensor(shape, body, name=name)


def _output_last(x, labels, out):
    """(x, labels), or a transposed view of x with the output's last label j moved to its
    last axis where x reads j along another axis (B[j, k] of einsum("ik,jk->ij")) and an
    output axis (i) does not index x, so that x is reread along it. The schedule's
    register tile then reads the view's rows along j, packing it where that pays; B[j, k]
    left a dot product per output element (einsum("ik,jk->ij") of 256x512 and 512x512
    float32 on one core: 4.9 ms, NumPy 1.8)."""
    j = out[-1]
    if not isinstance(x, Tensor) or labels.count(j) != 1 or labels[-1] == j or \
            all(lab in labels for lab in out):
        return x, labels        # (no output axis rereads x: a dot product per element)
    d = labels.index(j)
    axes = tuple(a for a in range(len(labels)) if a != d) + (d,)
    return transpose(x, axes), tuple(labels[a] for a in axes)


def matmul(a, b, dtype=None):
    """np.matmul (the @ operator): 1-D operands promoted to a row / column and the
    added axis removed, the leading (batch) axes broadcast; in `dtype` when given."""
    a, b = operand(a), operand(b)
    if dtype is not None:
        a, b = (x if x.dtype == dtype else astype(x, dtype) for x in (a, b))
    for n, x in enumerate((a, b)):
        if not shape_of(x):
            raise ShapeError(f"matmul: Input operand {n} does not have enough dimensions "
                             f"(has 0, gufunc core with signature {_MATMUL_SIG} requires 1)",
                             user_loc())
    sa, sb = a.shape, b.shape
    ka, kb = sa[-1], sb[0] if len(sb) == 1 else sb[-2]
    if not same_dim(ka, kb) and isinstance(ka, int) and isinstance(kb, int):
        # (symbolic sizes are taken to agree: the call checks them, as broadcasting's)
        raise ShapeError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, "
                         f"with gufunc signature {_MATMUL_SIG} (size {kb} is different from "
                         f"{ka})", user_loc())
    ba, bb = sa[:-2], sb[:-2]
    try:
        batch = broadcast_shapes(ba, bb)
    except ShapeError:
        raise ShapeError(f"operands could not be broadcast together with remapped shapes "
                         f"[original->remapped]: {shape_text(sa)} and {shape_text(sb)} "
                         f"(batch axes {shape_text(ba)} and {shape_text(bb)})",
                         user_loc()) from None
    nb = len(batch)
    extents = {f"b{d}": n for d, n in enumerate(batch)}
    extents.update(k=ka)

    def batch_labels(s):
        off = nb - len(s)
        return tuple(None if is_one(n) and not is_one(batch[off + d]) else f"b{off + d}"
                     for d, n in enumerate(s))
    la, lb = batch_labels(ba), batch_labels(bb)
    out = tuple(f"b{d}" for d in range(nb))
    if len(sa) > 1:
        la, out = la + ("i", "k"), out + ("i",)
        extents["i"] = sa[-2]
    else:
        la = ("k",)
    if len(sb) > 1:
        lb, out = lb + ("k", "j"), out + ("j",)
        extents["j"] = sb[-1]
    else:
        lb = ("k",)
    return contract((a, b), (la, lb), out, extents, "matmul")


def tensordot(a, b, axes=2):
    """np.tensordot: axes an int n (the last n axes of a with the first n of b) or a pair
    of axis sequences; the result has a's free axes, then b's."""
    a, b = operand(a), operand(b)
    sa, sb = shape_of(a), shape_of(b)
    if isinstance(axes, int):
        if axes > len(sa) or axes > len(sb):
            # (an AxisError: NumPy's own is an IndexError here, "tuple index out of range")
            raise AxisError(f"tensordot(): axes={axes} is more than the dimensions of a "
                            f"({len(sa)}) or b ({len(sb)})", user_loc())
        axes = max(axes, 0)     # (NumPy: a negative count contracts nothing, an outer product)
        xa, xb = tuple(range(len(sa) - axes, len(sa))), tuple(range(axes))
    else:
        xa, xb = (tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in axes)
        if len(xa) != len(xb):
            raise ShapeError("shape-mismatch for sum", user_loc())
        xa, xb = normalize_axes(xa, len(sa), False), normalize_axes(xb, len(sb), False)
    for p, q in zip(xa, xb):
        if not may_agree(sa[p], sb[q]):         # (symbolic sizes: checked at the call)
            raise ShapeError("shape-mismatch for sum", user_loc())
    extents = {}
    la = tuple(f"k{xa.index(d)}" if d in xa else f"a{d}" for d in range(len(sa)))
    lb = tuple(f"k{xb.index(d)}" if d in xb else f"b{d}" for d in range(len(sb)))
    for lab, n in list(zip(la, sa)) + list(zip(lb, sb)):
        extents[lab] = n
    out = tuple(lab for lab in la + lb if not lab.startswith("k"))
    return contract((a, b), (la, lb), out, extents, "tensordot")


def _aligned_error(sa, sb, da, db):
    return ShapeError(f"shapes {shape_text(sa).replace(' ', '')} and "
                      f"{shape_text(sb).replace(' ', '')} not aligned: {sa[da]} (dim {da}) "
                      f"!= {sb[db]} (dim {db})", user_loc())


def matmul_of_transposed(a, b, *, transposed):
    """matmul(a, b) of 2-d arrays given as their transposes where `transposed` (a pair of
    bools) says so: jd.numpy passes a Fortran-ordered operand (X.T of X.T @ X, W.T of
    x @ W.T) as the C-ordered array it is the transpose of, read in place (a register
    tile's rows of A.T are contiguous), where a copy into C order cost more than the
    product of a thin matrix."""
    ta, tb = transposed
    return matmul(transpose(operand(a)) if ta else a, transpose(operand(b)) if tb else b)


def dot(a, b):
    """np.dot: a product with a scalar, the inner product of vectors, the matrix product,
    and in general the sum over a's last axis and b's second-to-last."""
    a, b = operand(a), operand(b)
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        r = contract((a, b), (tuple(f"a{d}" for d in range(len(sa))),
                              tuple(f"b{d}" for d in range(len(sb)))),
                     tuple(f"a{d}" for d in range(len(sa))) +
                     tuple(f"b{d}" for d in range(len(sb))),
                     {**{f"a{d}": n for d, n in enumerate(sa)},
                      **{f"b{d}": n for d, n in enumerate(sb)}}, "dot")
        other = sa or sb
        if r.dtype in ("float32", "float64") and len(other) <= 2 and all(
                isinstance(n, int) for n in other) and int(np.prod(other)) >= 2:
            # NumPy adds an array of rank 1 or 2 times a 0-d one s to zeros (BLAS's axpy,
            # which leaves them where s is 0): 0.0 + (-0.0 * x) is 0.0, and s = 0 gives
            # zeros also for NaN or inf in x; the product alone on other shapes
            def axpy(v, c):
                zero = build.cast(0.0, v.dtype)
                return build.select(build.compare(CmpOp.EQ, c, build.cast(0, c.dtype)),
                                    zero, build.binary(BinOp.ADD, v, zero))
            return elementwise(axpy, r, b if sa else a)
        return r
    db = 0 if len(sb) == 1 else len(sb) - 2
    if not may_agree(sa[-1], sb[db]):
        raise _aligned_error(sa, sb, len(sa) - 1, db)
    return tensordot(a, b, ((len(sa) - 1,), (db,)))


def vdot(a, b):
    """np.vdot for real operands: the sum of the elementwise product of the flattened
    operands (which must have as many elements)."""
    a0, b0 = operand(a), operand(b)
    a, b = ravel(a0), ravel(b0)
    na, nb = a.shape[0], b.shape[0]
    if not same_dim(na, nb) and may_agree(na, nb) and not all(
            isinstance(n, SizeVar) or isinstance(n, int) and len(shape_of(x)) <= 1
            for n, x in ((na, a0), (nb, b0))):
        # (an argument's size each, or a 1-d one's fixed size: the call checks them; a
        # product of sizes, or a fixed size of a flattened operand, it cannot)
        raise ShapeError(f"vdot(): in a dynamic definition the flattened operands' sizes "
                         f"({na} and {nb}) cannot be checked to agree at the call; give "
                         f"vdot 1-D operands there", user_loc())
    if not may_agree(na, nb):
        raise ShapeError(f"cannot reshape array of size {b.shape[0]} into shape "
                         f"({a.shape[0]},)", user_loc())
    return contract((a, b), (("k",), ("k",)), (), {"k": a.shape[0]}, "vdot")


def inner(a, b):
    """np.inner: the sum over the last axes of both (a product when one is a scalar)."""
    a, b = operand(a), operand(b)
    sa, sb = shape_of(a), shape_of(b)
    if not sa or not sb:
        return dot(a, b)
    if not may_agree(sa[-1], sb[-1]):
        raise _aligned_error(sa, sb, len(sa) - 1, len(sb) - 1)
    return tensordot(a, b, ((len(sa) - 1,), (len(sb) - 1,)))


def outer(a, b):
    """np.outer: out[i, j] = a.ravel()[i] * b.ravel()[j]."""
    a, b = ravel(operand(a)), ravel(operand(b))
    return contract((a, b), (("i",), ("j",)), ("i", "j"),
                    {"i": a.shape[0], "j": b.shape[0]}, "outer")


def _parse_einsum(subscripts, ndims):
    """(input label lists, output label list) of an einsum subscripts string, with NumPy's
    errors; '...' stands for an operand's axes without a letter, labelled '.0' (the last
    of them), '.1', ... (aligned on the right, as broadcasting does); the implicit output
    is those axes, then the letters used once, in alphabetical order."""
    s = subscripts.replace(" ", "")
    lhs, arrow, rhs = s.partition("->")
    if "-" in lhs or ">" in lhs or "-" in rhs or ">" in rhs:
        raise ShapeError("einstein sum subscripts string does not contain proper '->' output "
                         "specified", user_loc())
    ins = lhs.split(",")
    for n, part in enumerate(ins + [rhs]):
        if "." in part.replace("...", "", 1):
            where = "in the output" if n == len(ins) else f"in operand {n}"
            raise ShapeError(f"einstein sum subscripts string contains a '.' that is not part "
                             f"of an ellipsis ('...') {where}", user_loc())
    for c in lhs.replace(",", "").replace(".", "") + rhs.replace(".", ""):
        if not c.isascii() or not c.isalpha():
            raise ShapeError(f"invalid subscript '{c}' in einstein sum subscripts string, "
                             "subscripts must be letters", user_loc())
    if len(ins) < len(ndims):
        raise ShapeError("more operands provided to einstein sum function than specified "
                         "in the subscripts string", user_loc())
    if len(ins) > len(ndims):
        raise ShapeError("fewer operands provided to einstein sum function than specified "
                         "in the subscripts string", user_loc())
    labels, extra = [], 0
    for n, (part, nd) in enumerate(zip(ins, ndims)):
        letters = part.replace("...", "")
        if len(letters) > nd:
            raise ShapeError(f"einstein sum subscripts string contains too many subscripts "
                             f"for operand {n}", user_loc())
        if len(letters) < nd and "..." not in part:
            raise ShapeError("operand has more dimensions than subscripts given in einstein "
                             "sum, but no '...' ellipsis provided to broadcast the extra "
                             "dimensions.", user_loc())
        labels.append(_ellipsis(part, nd - len(letters)))
        extra = max(extra, nd - len(letters))
    if arrow:
        if extra and "..." not in rhs:
            raise ShapeError("output has more dimensions than subscripts given in einstein "
                             "sum, but no '...' ellipsis provided to broadcast the extra "
                             "dimensions.", user_loc())
        out = _ellipsis(rhs, extra)
    else:
        used = lhs.replace(",", "").replace(".", "")
        out = _ellipsis("...", extra) + sorted(c for c in set(used) if used.count(c) == 1)
    seen = {c for part in labels for c in part}
    for c in out:
        if out.count(c) > 1:
            raise ShapeError(f"einstein sum subscripts string includes output subscript "
                             f"'{c}' multiple times", user_loc())
        if c not in seen:
            raise ShapeError(f"einstein sum subscripts string included output subscript "
                             f"'{c}' which never appeared in an input", user_loc())
    return labels, out


def _ellipsis(part, n):
    """part's labels, its '...' standing for n axes labelled '.{n-1}' ... '.0'."""
    before, dots, after = part.partition("...")
    return list(before) + [f".{k}" for k in reversed(range(n if dots else 0))] + list(after)


def einsum(*xs, subscripts, dtype=None):
    """np.einsum on one or more operands, explicit ('ij,jk->ik') or implicit ('ij,jk')
    output; a label repeated in one operand reads its diagonal ('ii->i'); axes of length 1
    broadcast against the same label's (and the axes of '...' against each other)."""
    xs = [operand(x) for x in xs]
    if dtype is not None:
        xs = [x if x.dtype == dtype else astype(x, dtype) for x in xs]
    ins, out = _parse_einsum(subscripts, [len(shape_of(x)) for x in xs])
    extents = {}
    for n, (labels, x) in enumerate(zip(ins, xs)):
        for c, d in zip(labels, shape_of(x)):
            if is_one(d) and labels.count(c) == 1:
                continue            # (a broadcast axis: its extent is the others')
            have = extents.setdefault(c, d)
            if may_agree(have, d) and labels.count(c) == 1:
                if isinstance(d, int):  # (an int where one operand has it; symbolic sizes
                    extents[c] = d      # agree or the call says they do not)
                continue
            if same_dim(have, d):
                continue
            if c.startswith("."):
                raise ShapeError(
                    "operands could not be broadcast together with remapped shapes "
                    f"[original->remapped]: {' '.join(shape_text(shape_of(x)) for x in xs)} "
                    f"(the axes of '...')", user_loc())
            if labels.count(c) > 1:
                raise ShapeError(f"dimensions in single operand for collapsing index '{c}' "
                                 f"don't match ({have} != {d})", user_loc())
            raise ShapeError(f"Size of label '{c}' for operand {n} ({d}) does not match "
                             f"previous terms ({have}).", user_loc())
    for labels in ins:              # (an axis of '...' of length 1 everywhere)
        for c in labels:
            extents.setdefault(c, 1)
    ins = [tuple(None if is_one(d) and labels.count(c) == 1 and not is_one(extents[c]) else c
                 for c, d in zip(labels, shape_of(x))) for labels, x in zip(ins, xs)]
    return contract(xs, ins, tuple(out), extents, "einsum")


def vecdot(a, b, axis=-1, dtype=None):
    """np.vecdot of real operands: the sum over `axis` of a * b, the other axes broadcast;
    in `dtype` when given."""
    a, b = operand(a), operand(b)
    for n, x in enumerate((a, b)):
        if not shape_of(x):
            raise ShapeError(f"vecdot: Input operand {n} does not have enough dimensions (has "
                             f"0, gufunc core with signature (n),(n)->() requires 1)",
                             user_loc())
    if axis not in (-1,):
        a, b = (moveaxis(x, axis, -1) for x in (a, b))
    na, nb = shape_of(a)[-1], shape_of(b)[-1]
    if not same_dim(na, nb) and isinstance(na, int) and isinstance(nb, int):
        # (not einsum's broadcast of a length 1: the core dimensions must agree)
        raise ShapeError(f"vecdot: Input operand 1 has a mismatch in its core dimension 0, "
                         f"with gufunc signature (n),(n)->() (size {nb} is different from "
                         f"{na})", user_loc())
    return einsum(a, b, subscripts="...i,...i->...", dtype=dtype)


scalar_result(matmul, tensordot, dot, vdot, inner, einsum, contract, vecdot)
# an outer product is a broadcast multiply: one kernel per dtype, rank and size-1 pattern,
# as multiply's (matmul gains from knowing its shapes)
any_size(outer)
