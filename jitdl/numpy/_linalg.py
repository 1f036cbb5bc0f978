"""jd.numpy's products (matmul, dot, einsum, ...), with NumPy's signatures: each is one
contraction stage, a kernel on arrays."""
from __future__ import annotations

import functools
import operator

import numpy as np

from jitdl.eager import (_MISS, NOT_GIVEN as _NOT_GIVEN, NUMPYS, _direct, apply,
                          array_module_function, given_signature, kernel_dtype, laid_out,
                          numpy_accepts, result_order, signature_dtype)
from jitdl.ops.core import is_symbolic
from jitdl.errors import ArgumentError, ShapeError, user_loc
from jitdl.ops import linalg as la

_ndarray = np.ndarray


def matmul(x1, x2, /, out=None, *, casting="same_kind", order="K", dtype=None, subok=True,
           signature=_NOT_GIVEN, axes=_NOT_GIVEN, axis=_NOT_GIVEN, keepdims=False,
           sig=_NOT_GIVEN):
    """numpy.matmul (the @ operator): 1-D operands promoted, batch axes broadcast; its
    gufunc keywords: order= the result's memory order, signature=(None, None, X) as
    dtype=X; on arrays axes=, axis=, keepdims= and other signatures are NumPy's own
    (subok: the results are ndarrays, as for ndarray operands)."""
    if signature is not _NOT_GIVEN or sig is not _NOT_GIVEN or axes is not _NOT_GIVEN \
            or axis is not _NOT_GIVEN or keepdims is not False or order != "K":
        return _gufunc_call("matmul", matmul, np.matmul, (x1, x2), out, casting, order,
                            dtype, given_signature("matmul", signature, sig),
                            dict(axes=axes, axis=axis, keepdims=keepdims))
    if dtype is None and casting == "same_kind":
        t1, t2 = _transposed(x1), _transposed(x2)
        if t1 or t2:        # (X.T @ X, x @ W.T: the C-ordered arrays, read in place)
            static, slot = _TRANSPOSED[t1, t2]
            operands = (x1.T if t1 else x1, x2.T if t2 else x2)
            if out is None:
                d = _direct.get(slot)   # (apply's first step, without its keying)
                if d is not None:
                    r = d(*operands)
                    if r is not _MISS:
                        return r
            return apply("matmul", la.matmul_of_transposed, operands, static, out,
                         broadcast_out=True)
        return apply("matmul", la.matmul, (x1, x2), (), out, broadcast_out=True)
    static = ()
    if dtype is not None:
        static = (("dtype", kernel_dtype("matmul", dtype, np.matmul, (x1, x2), casting)),)
    else:
        numpy_accepts("matmul", np.matmul, (x1, x2), casting)
    return apply("matmul", la.matmul, (x1, x2), static, out, casting=casting,
                 broadcast_out=True)


def _transposed_static(t1, t2):
    static = (("transposed", (int(t1), int(t2))),)  # (ints: its own key, as bools are not)
    return static, ("matmul", static, 2)            # (and apply's direct slot for it)


_TRANSPOSED = {(t1, t2): _transposed_static(t1, t2) for t1 in (False, True)
               for t2 in (False, True)}


def _transposed(x):
    """x is a 2-d array in Fortran order only (the transpose of a C-ordered one)."""
    return type(x) is _ndarray and x.ndim == 2 and not x.flags.c_contiguous \
        and x.flags.f_contiguous


def dot(a, b, out=None):
    """numpy.dot: scalar product, inner product, matrix product, or the sum over a's
    last axis and b's second-to-last."""
    if isinstance(out, np.ndarray) and (not out.flags.c_contiguous or out.dtype != np.result_type(
            *(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype for x in (a, b)))):
        raise ValueError("output array is not acceptable (must have the right datatype, "
                         "number of dimensions, and be a C-Array)")
    r = apply("dot", la.dot, (a, b), (), out, ("a", "b"))
    if out is not None and type(r) is np.ndarray and r.ndim == 0:
        return r[()]                # (NumPy: a 0-d result is a scalar, out= or not)
    return r


def vdot(a, b, /):
    """numpy.vdot for real arrays: the dot product of the flattened arrays."""
    return apply("vdot", la.vdot, (a, b), (), None, ("a", "b"))


def inner(a, b, /):
    """numpy.inner: the sum over the last axes of both arrays."""
    return apply("inner", la.inner, (a, b), (), None, ("a", "b"))


def outer(a, b, out=None):
    """numpy.outer: every element of a.ravel() times every element of b.ravel()."""
    return apply("outer", la.outer, (a, b), (), out, ("a", "b"), broadcast_out=True)


def vecdot(x1, x2, /, out=None, *, casting="same_kind", order="K", dtype=None, subok=True,
           signature=_NOT_GIVEN, axes=_NOT_GIVEN, axis=_NOT_GIVEN, keepdims=False,
           sig=_NOT_GIVEN):
    """numpy.vecdot for real arrays: the sum over `axis` (-1 where not given) of x1 * x2, the
    rest broadcast; gufunc keywords as for matmul."""
    np_fn = getattr(np, "vecdot", None)     # (NumPy 2)
    if signature is not _NOT_GIVEN or sig is not _NOT_GIVEN or axes is not _NOT_GIVEN \
            or keepdims is not False or order != "K":
        return _gufunc_call("vecdot", vecdot, np_fn, (x1, x2), out, casting, order, dtype,
                            given_signature("vecdot", signature, sig),
                            dict(axes=axes, axis=axis, keepdims=keepdims))
    static = (("axis", -1 if axis is _NOT_GIVEN else operator.index(axis)),)
    if dtype is not None:
        static += (("dtype", kernel_dtype("vecdot", dtype, np_fn, (x1, x2), casting)),)
    elif casting != "same_kind" and np_fn is not None:
        numpy_accepts("vecdot", np_fn, (x1, x2), casting)
    return apply("vecdot", la.vecdot, (x1, x2), static, out, casting=casting,
                 broadcast_out=True)


def _gufunc_call(name, fn, np_fn, operands, out, casting, order, dtype, signature, shaped):
    """matmul's or vecdot's call with its rarer gufunc keywords: signature=(None, None, X)
    is dtype=X, order= lays out a new result (as NumPy's does); the core-axis keywords
    `shaped` (axes=, axis=, keepdims=; vecdot's axis= alone is its own) and other
    signatures are NumPy's own function's on arrays, and an error naming them inside a
    definition."""
    order = result_order(order)
    if signature is not None:
        own = signature_dtype(name, signature, dtype, operands)
        if own is not NUMPYS:
            signature, dtype = None, own
    given = {k: v for k, v in shaped.items() if v is not _NOT_GIVEN and v is not False}
    if signature is not None or given and not (name == "vecdot" and set(given) == {"axis"}):
        if signature is not None:
            given["signature"] = signature
        if any(is_symbolic(a) for a in operands):
            raise ArgumentError(f"{name}(): inside a definition jitdl takes none of "
                                f"{', '.join(f'{k}={v!r}' for k, v in given.items())}; "
                                f"move the axes with jd.numpy.moveaxis", user_loc())
        if dtype is not None:
            given["dtype"] = dtype
        return array_module_function(name, np_fn, operands + (out,), {})(
            *operands, out=out, casting=casting, order=order, **given)
    r = fn(*operands, out, dtype=dtype, casting=casting, **given)
    return r if out is not None else laid_out(r, order, operands, name)


# their common call is apply(name, builder, args, ()) of the positional arrays: the op's
# direct slot serves it first (jitdl.eager.numpy_fallback)
for _f in (matmul, dot, vdot, inner, outer):
    _f.direct_operands = True


def _axes(axes):
    if isinstance(axes, (int, np.integer)):
        return int(axes)
    if isinstance(axes, np.ndarray) and axes.ndim == 0:     # (NumPy's range(axes): an int)
        try:
            return operator.index(axes)
        except TypeError:
            raise ArgumentError(f"tensordot(): axes must be an int or a pair of axis "
                                f"sequences, got {axes!r}", user_loc()) from None
    try:
        a, b = axes
    except (TypeError, ValueError) as e:    # (NumPy's classes: not iterable, not a pair)
        error = ArgumentError if isinstance(e, TypeError) else ShapeError
        raise error(f"tensordot(): axes must be an int or a pair of axis sequences, "
                    f"got {axes!r}", user_loc()) from None
    return tuple(_axis_seq(v) for v in (a, b))


def _axis_seq(v):
    """One side of tensordot's axes pair as a tuple, as NumPy reads it: any sequence
    (a list, tuple, range or an array of ints) or a single axis; NumPy integers as ints (a
    hashable static argument)."""
    if isinstance(v, np.ndarray):
        v = v.tolist()
    try:
        v = tuple(v)
    except TypeError:
        v = (v,)
    return tuple(int(x) if isinstance(x, np.integer) else x for x in v)


def tensordot(a, b, axes=2):
    """numpy.tensordot: axes an int or a pair of axis sequences."""
    r = apply("tensordot", la.tensordot, (a, b), (("axes", _axes(axes)),), None, ("a", "b"))
    return np.asarray(r) if isinstance(r, np.generic) else r   # (NumPy: a 0-d array)


def einsum(subscripts, /, *operands, out=None, dtype=None, order="K", casting="safe",
           optimize=False):
    """numpy.einsum with explicit or implicit output and '...' subscripts, one stage for
    any number of operands (optimize= has nothing to choose: one fused stage). order=
    lays out a new result as NumPy's does: 'C' C order, 'F' Fortran order, 'A' Fortran
    order where every operand is Fortran-contiguous, else C order; 'K' as the kernel
    writes it (NumPy's view of a permuted operand whatever the order)."""
    order = result_order(order)
    if not isinstance(subscripts, str):
        subscripts, operands = _sublist_form(subscripts, operands)
    if len(operands) == 1 and type(operands[0]) is np.ndarray and out is None \
            and dtype is None:
        perm = _permutation(subscripts, operands[0].ndim)
        if perm is not None:        # (NumPy's view of the operand, as np.einsum gives)
            return operands[0].transpose(perm)
    static = (("subscripts", subscripts),)
    if dtype is not None:
        static += (("dtype", kernel_dtype("einsum", dtype, _einsum_of(subscripts), operands,
                                          casting)),)
    elif casting != "safe":
        numpy_accepts("einsum", _einsum_of(subscripts), operands, casting)
    r = apply("einsum", la.einsum, operands, static, out,
              tuple(f"a{k}" for k in range(len(operands))), casting=casting)
    return laid_out(r, order, operands, "einsum") if out is None else r


@functools.lru_cache(maxsize=256)
def _permutation(subscripts, ndim):
    """The axes' order of a one-operand einsum that only permutes them ('ij->ji', 'ji',
    'ij'; no '...', no repeated or summed label), for an operand of rank ndim; else None."""
    ins, arrow, want = subscripts.replace(" ", "").partition("->")
    if not (ins.isascii() and ins.isalpha()) or len(ins) != ndim or len(set(ins)) != ndim:
        return None
    if not arrow:
        want = "".join(sorted(ins))             # (implicit: the labels in order)
    if sorted(want) != sorted(ins):
        return None
    return tuple(ins.index(c) for c in want)


def _sublist_form(first, rest):
    """NumPy's other einsum form, einsum(op0, sublist0, op1, sublist1, ..., [sublistout]),
    as a subscripts string and the operands: labels 0-25 are 'A'-'Z', 26-51 'a'-'z' (NumPy's
    order, which implicit output follows)."""
    args = (first,) + tuple(rest)
    if len(args) < 2:
        raise ValueError("einsum(): must provide at least an operand and a subscripts list "
                         "to einsum")
    pairs, out = args[:len(args) // 2 * 2], args[len(args) // 2 * 2:]

    def labels(sub):
        try:                    # (any iterable, as NumPy's; a lone int is not a sublist)
            items = list(sub)
        except TypeError:
            raise TypeError("einsum(): the subscripts for each operand must be a list or a "
                            "tuple") from None
        if sum(v is Ellipsis for v in items) > 1:
            raise ValueError("einsum(): each subscripts list may have only one ellipsis")
        text = ""
        for v in items:
            if v is Ellipsis:
                text += "..."
                continue
            try:                # (NumPy's integers and 0-d integer arrays too; not bools)
                if isinstance(v, (bool, np.bool_)) or getattr(v, "dtype", None) == bool:
                    raise TypeError
                v = operator.index(v)
            except TypeError:
                raise TypeError("einsum(): each subscript must be either an integer or an "
                                "ellipsis") from None
            if not 0 <= v < 52:
                raise ValueError("einsum(): subscript is not within the valid range [0, 52)")
            text += chr(ord("A") + v) if v < 26 else chr(ord("a") + v - 26)
        return text
    ins = ",".join(labels(pairs[k + 1]) for k in range(0, len(pairs), 2))
    arrow = "->" + labels(out[0]) if out else ""
    return ins + arrow, pairs[0::2]


@functools.lru_cache(maxsize=256)
def _einsum_of(subscripts):
    return lambda *xs, **kwargs: np.einsum(subscripts, *xs, **kwargs)


STATUS = {
    "matmul": "done",
    "dot": "done",
    "vdot": "done (real dtypes only: jitdl has no complex)",
    "inner": "done",
    "outer": "done",
    "vecdot": "done (real dtypes only: jitdl has no complex)",
    "tensordot": "done",
    "einsum": "done (both forms; optimize= ignored: one fused stage)",
}

__all__ = list(STATUS)
