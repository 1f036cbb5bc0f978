"""jd.numpy's reductions, with NumPy's signatures.

A call with every option at its default passes a precomputed static tuple; where= (a mask)
is an operand of the kernel, the other options are static arguments.
"""
from __future__ import annotations

import builtins
import functools
import math

from jitdl import dtypes
from jitdl.eager import apply as _apply, array_module_function, has_huge_int, \
    kept_shape, one_array_slot
import numpy as np

from jitdl.errors import (ArgumentError, ScalarOverflowError, UnsupportedDtypeError,
                          float_error, user_loc, warn)
from jitdl.numpy._ufuncs import (EQUAL_NAN, ISCLOSE_NAMES, MERGE_MIN,
                                 finite_tolerances, tolerance)
from jitdl.ops import reduction as red
from jitdl.ops.core import is_symbolic
from jitdl.runtime.cuda import is_device_array
from jitdl.target.cpu import host
from jitdl.te import naming

# NumPy casts a reduction's result into out= unsafely (ptp and std: same_kind, as their
# last ufunc, subtract or sqrt, does)
apply = functools.partial(_apply, casting="unsafe")

_A = ("a",)
_AW = ("a", "where")
_NONE = (("axis", None),)


def _axis_of(a, axis):
    """axis 0 or -1 of a 0-d input is every axis (None) to NumPy's reductions."""
    if isinstance(axis, (int, np.integer)) and (axis == 0 or axis == -1) and (
            a.ndim if hasattr(a, "ndim") else np.ndim(a)) == 0:
        return None
    return axis


def _axis(axis):
    if axis is None or type(axis) is int:
        return axis
    if type(axis) is tuple and builtins.all(type(a) is int for a in axis):
        return axis
    if isinstance(axis, tuple):
        return tuple(_one_axis(a) for a in axis)
    if isinstance(axis, list):      # (NumPy takes an int or a tuple, not a list)
        raise ArgumentError("'list' object cannot be interpreted as an integer (axis must "
                            "be an int or a tuple of ints)", user_loc())
    return _one_axis(axis)


def _one_axis(a):
    if isinstance(a, (bool, np.bool_)):     # (NumPy refuses axis=True)
        raise ArgumentError("an integer is required (axis is a bool)", user_loc())
    if not hasattr(a, "__index__"):         # (a float, also in a tuple: NumPy's TypeError)
        t = type(a)
        name = t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"
        raise ArgumentError(f"'{name}' object cannot be interpreted as an integer",
                            user_loc())
    return builtins.int(a)


def _moment_axis(axis):
    """NumPy's TypeError for a float axis of mean, var and std (their item count reads
    it with its own words): 'integer argument expected, got float'."""
    if isinstance(axis, (float, np.floating)) or isinstance(axis, tuple) and builtins.any(
            isinstance(x, (float, np.floating)) for x in axis):
        raise ArgumentError("integer argument expected, got float", user_loc())


def _dtype(dtype):
    return None if dtype is None else dtypes.normalize(dtype)


def _where(a, where):
    """(operands, names) of a reduction: the mask joins them unless it is True."""
    if where is True:
        return (a,), _A
    return (a, where), _AW


def _flat(a):
    """A large C-contiguous array reduced whole, as its 1-d view (every rank shares one
    kernel, and a narrow last axis is no short inner loop: see numpy._ufuncs._merge)."""
    if type(a) is np.ndarray and a.ndim > 1 and a.size >= MERGE_MIN and a.flags.c_contiguous:
        return a.reshape(-1)
    return a


def _every(name, builder, a, out, keepdims):
    """A reduction over every axis, of a's flat view (_flat); with keepdims=True, of an
    array, that call's result reshaped, so that both share the kernel and its direct slot
    (eager._one_array_call); None for any other keepdims."""
    if not keepdims:
        return apply(name, builder, (_flat(a),), _NONE, out, _A)
    if keepdims is True and out is None and type(a) is np.ndarray and a.ndim:
        return apply(name, builder, (_flat(a),), _NONE, None, _A).reshape((1,) * a.ndim)
    return None


def _static(axis, keepdims, **extra):
    if axis is None and not keepdims and not extra:
        return _NONE
    return (("axis", _axis(axis)), ("keepdims", bool(keepdims))) + tuple(
        (k, v) for k, v in extra.items() if v is not None)


def _unsigned_total(a, dtype, what):
    """NumPy sums and multiplies unsigned integers in uint64, which jitdl does not have
    (a definition uses int64): on arrays, NumPy's function answers (jitdl.eager; CuPy's
    on GPU arrays, also uint64); inside a definition being traced a constant array's
    total stays int64, a value it can use."""
    if dtype is None and (type(a) is np.ndarray or isinstance(a, np.generic)
                          or is_device_array(a)) \
            and a.dtype.kind == "u" and not naming.tracing():
        raise UnsupportedDtypeError(f"{what}(): the uint64 total of a {a.dtype} array")


def _out_dtype(a, dtype, out):
    """A mean's or variance's dtype: dtype=, else float64 for a float32 array into a
    float64 out=, as NumPy's (out's dtype takes part in choosing its reduction's loop)."""
    if dtype is None and type(out) is np.ndarray and out.dtype == np.float64 \
            and getattr(a, "dtype", None) == np.float32:
        return out.dtype
    return dtype


def _total_dtype(a, dtype, out):
    """A sum's or product's dtype: dtype=, else out='s and a's promoted dtype where out= is
    a floating-point array. NumPy picks its add or multiply loop from both (its default
    int64 total only without out=), so an integer array's total into a float out= is
    taken in floating point: np.prod of int32 [-3, 0] into a float64 out= is -0.0, and
    int64 totals past 2**63 do not wrap. A float16 loop is NumPy's own (jitdl.eager);
    a's own float dtype stays None, the common call's."""
    if dtype is None and type(out) is np.ndarray and out.dtype.kind == "f" \
            and not is_symbolic(a):
        a_dtype = np.result_type(a)
        dtype = np.promote_types(out.dtype, a_dtype)
        if dtype == a_dtype:
            return None
        if dtype.name not in dtypes.SUPPORTED:
            raise UnsupportedDtypeError(f"a {dtype} total (out=)")
    return dtype


def _array_dtype(a):
    """An array operand's dtype on the host (None for tensors and GPU arrays)."""
    if type(a) is np.ndarray:
        return a.dtype
    if is_symbolic(a) or is_device_array(a):
        return None
    return np.asarray(a).dtype


def _numpy_total(a, dtype, out):
    """Whether NumPy's sum or prod answers a call on arrays whose total jitdl's kernel
    would take otherwise: a float array with an integer dtype= (NumPy casts each element
    as its astype does on this machine, int8(300.6) is 44 and uint8(-2.7) 254, and
    wraps; jitdl's cast saturates), or an integer array into a bool out= (NumPy's total
    is in the array's own dtype then, wrapping to 0 where jitdl's int64 one does not)."""
    kind = _array_dtype(a)
    kind = None if kind is None else kind.kind
    if dtype is not None:
        return kind == "f" and np.dtype(dtype).kind in "iu"
    return kind in ("i", "u") and type(out) is np.ndarray and out.dtype == _BOOL


def _numpy_extreme(a, out, initial=None):
    """Whether NumPy's max or min (nanmax, nanmin) answers a call on arrays: an initial=
    into an out= of another dtype than the array's, which NumPy's loop of out's dtype
    takes as it is (the max of a bool array with initial=100 into an int8 out= is 100,
    not True; of uint8 with initial=-7 into a float one -7, not an overflow); an integer
    array into an integer out= of the other signedness or a narrower one, which NumPy
    reduces in out's dtype (the max of int8 [-5, 3, 100] into a uint8 out= is 251, the
    max of uint8(-5); into a narrower out= NumPy's first element goes through out's
    dtype: the max of int16 [200, 5] into int8 is 5, of [5, 200] -56), jitdl's kernel
    in the array's; a float array into an unsigned out=, whose elements NumPy casts
    first on most shapes (the max of [85.3, -110.2, 3.0, ...] into uint8 is 146, the
    cast of -110.2)."""
    if type(out) is not np.ndarray:
        return False
    dt = _array_dtype(a)
    if initial is not None and dt is not None and dt != out.dtype:
        return True
    if out.dtype.kind not in "iu":
        return False
    return dt is not None and (dt.kind in "iu" and (dt.kind != out.dtype.kind or
                                                    dt.itemsize > out.dtype.itemsize)
                               or dt.kind == "f" and out.dtype.kind == "u")


def _initial(initial, what, a=None, dtype=None):
    if initial is None:
        return None
    if not isinstance(initial, (bool, int, float)) and not hasattr(initial, "item"):
        raise ArgumentError(f"{what}(): initial= must be a number, got "
                            f"{type(initial).__name__}", user_loc())
    value = initial.item() if hasattr(initial, "item") else initial
    if isinstance(value, float) and a is not None and not is_symbolic(a):
        a_dtype = a.dtype if isinstance(a, (np.ndarray, np.generic)) else np.asarray(a).dtype
        kind = a_dtype.kind if dtype is None else np.dtype(dtype).kind
        if kind in "biu":
            # a float initial of an integer reduction: NumPy's conversion (truncated, and
            # OverflowError or ValueError where it does not fit), read off an empty call
            empty = np.empty(0, a_dtype)
            extra = {} if dtype is None else {"dtype": dtype}
            value = getattr(np, what)(empty, initial=value, **extra).item()
    return value


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None,  # noqa: A001
        where=True):
    """Sum of array elements over the given axes (numpy.sum)."""
    return _total("sum", red.sum_, a, axis, dtype, out, keepdims, initial, where)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
    """Product of array elements over the given axes (numpy.prod)."""
    return _total("prod", red.prod, a, axis, dtype, out, keepdims, initial, where)


def _total(name, builder, a, axis, dtype, out, keepdims, initial, where):
    static = _plain_axis(a, axis, "u", where, keepdims, dtype, out, initial)
    if static is not None:
        return _plain(name, builder, a, static, keepdims)
    typed = _typed_key(name, a, axis, dtype, out, keepdims, where, initial)
    if typed is not None and (static := _TYPED.get(typed)) is not None:
        return apply(name, builder, (a,), static, None, _A)
    if (dtype is not None or out is not None) and _numpy_total(a, dtype, out):
        return _by_numpy(name, a, axis, out, keepdims, dtype=dtype, **_given(
            initial=(initial, None), where=(where, True)))
    dtype = _total_dtype(a, dtype, out)
    if axis is not None:
        axis = _axis_of(a, axis)
    _unsigned_total(a, dtype, name)
    if axis is None and dtype is None and initial is None and where is True and \
            (r := _every(name, builder, a, out, keepdims)) is not None:
        return r
    ops, names = _where(a, where)
    static = _static(axis, keepdims, dtype=_dtype(dtype),
                     initial=_initial(initial, name, a, dtype))
    return _typed(typed, apply(name, builder, ops, static, out, names), static)


# (op, rank, dtype, dtype=, axis) -> the static arguments of a sum's, product's or mean's
# call with dtype= and nothing else but an axis, found by the general path, which later
# calls skip (sum of 1000 float64 with dtype=np.float32 5.3 -> 2.5 us, NumPy 3.1)
_TYPED = {}
_DTYPE_KEYS = (type, np.dtype, str)


def _typed_key(name, a, axis, dtype, out, keepdims, where, initial=None):
    """The _TYPED key of a call with dtype= (a type, dtype or name) of an array, with an
    int axis or None and no other argument; None for any other call."""
    if dtype is None or type(a) is not np.ndarray or out is not None \
            or keepdims is not False or where is not True or initial is not None \
            or not (axis is None or type(axis) is int) \
            or not isinstance(dtype, _DTYPE_KEYS):
        return None
    return name, a.ndim, a.dtype, dtype, axis


def _typed(key, r, static):
    """r, the result of the general path's call with `static`; its key (if any) takes it."""
    if key is not None:
        if len(_TYPED) >= 256:
            _TYPED.clear()
        _TYPED[key] = static
    return r


def max(a, axis=None, out=None, keepdims=False, initial=None, where=True):  # noqa: A001
    """The largest element over the given axes; NaN wins (numpy.max)."""
    static = _plain_axis(a, axis, "", where, keepdims, out, initial)
    if static is not None:
        return _plain("max", red.max_, a, static, keepdims)
    if out is not None and _numpy_extreme(a, out, initial):
        return _by_numpy("max", a, axis, out, keepdims, **_given(
            initial=(initial, None), where=(where, True)))
    if axis is not None:
        axis = _axis_of(a, axis)
    if axis is None and initial is None and where is True and \
            (r := _every("max", red.max_, a, out, keepdims)) is not None:
        return r
    ops, names = _where(a, where)
    return apply("max", red.max_, ops, _static(axis, keepdims,
                                                initial=_initial(initial, "max", a)), out, names)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=True):  # noqa: A001
    """The smallest element over the given axes; NaN wins (numpy.min)."""
    static = _plain_axis(a, axis, "", where, keepdims, out, initial)
    if static is not None:
        return _plain("min", red.min_, a, static, keepdims)
    if out is not None and _numpy_extreme(a, out, initial):
        return _by_numpy("min", a, axis, out, keepdims, **_given(
            initial=(initial, None), where=(where, True)))
    if axis is not None:
        axis = _axis_of(a, axis)
    if axis is None and initial is None and where is True and \
            (r := _every("min", red.min_, a, out, keepdims)) is not None:
        return r
    ops, names = _where(a, where)
    return apply("min", red.min_, ops, _static(axis, keepdims,
                                                initial=_initial(initial, "min", a)), out, names)


def argmax(a, axis=None, out=None, *, keepdims=False):
    """The first position of the maximum (of the first NaN) along axis (numpy.argmax)."""
    return _arg("argmax", red.argmax, a, axis, out, keepdims)


def argmin(a, axis=None, out=None, *, keepdims=False):
    """The first position of the minimum (of the first NaN) along axis (numpy.argmin)."""
    return _arg("argmin", red.argmin, a, axis, out, keepdims)


def _arg(name, builder, a, axis, out, keepdims):
    kept = keepdims is True         # (the kernel's result, reshaped: _plain_arg's calls)
    plain = _plain_arg(a, axis, out, False if kept else keepdims)
    if plain is not None:
        r = apply(name, builder, plain[:1], plain[1], None, _A)
        if kept:        # (and later calls: eager._one_array_call)
            return r.reshape(kept_shape(a.shape, axis))
        return r if plain[2] is None else r.reshape(plain[2])
    if axis is not None:
        axis = _axis_of(a, axis)
    return apply(name, builder, (a,), _static(axis, keepdims, narrow=_narrow(a),
                                              columns=_columns(a, axis)),
                 _index_out(out), _A)


def _plain(name, builder, a, static, keepdims=False):
    """A reduction's common call (_plain_axis's static arguments); with keepdims (True),
    the kernel's result without it, reshaped, so that both calls share one kernel and
    its direct entry (eager._one_array_call). A Fortran-ordered array (a.T) reduces its
    C-ordered transpose along the mirrored axes, and the result is transposed back
    (NumPy's values and layout): the fast path, where the kernel's own reorder plan took
    a few microseconds of a small call (sum(a.T, axis=0) of 25 x 40 float64: 6.7 -> 3.9
    us, NumPy 3.9)."""
    nd, axis = a.ndim, static[0][1]
    if type(axis) is tuple and _every_axis(axis, nd):      # (every axis: a(None)'s kernel)
        x = a.T if nd > 1 and not a.flags.c_contiguous and a.flags.f_contiguous else a
        r = apply(name, builder, (_flat(x),), _NONE, None, _A)
        return r.reshape((1,) * nd) if keepdims else r
    r = None
    if nd > 1 and not a.flags.c_contiguous and a.flags.f_contiguous:
        axes = (axis,) if type(axis) is int else axis
        if builtins.all(-nd <= x < nd for x in axes) and \
                len({x % nd for x in axes}) == len(axes):     # (else NumPy's error, below)
            mirrored = nd - 1 - axis % nd if type(axis) is int else \
                tuple(nd - 1 - x % nd for x in axis)
            r = apply(name, builder, (a.T,), _axis_static(mirrored), None, _A).T
    if r is None:
        r = apply(name, builder, (a,), static, None, _A)
    return r.reshape(kept_shape(a.shape, axis)) if keepdims else r


def _plain_axis(a, axis, kinds, where, keepdims, *unset):
    """The static arguments of a reduction's common call along given axes (an array of
    rank 1 or more and of a dtype kind not in `kinds`, an int or a tuple of ints as axis,
    where=True, keepdims a bool and the `unset` arguments None), made once per axis (those
    of keepdims=False: see _plain); None for any other call, which goes the general way
    (which also answers the kinds left out: unsigned totals, integer means)."""
    if where is not True or not (keepdims is False or keepdims is True) \
            or type(a) is not np.ndarray \
            or not a.ndim or a.dtype.kind in kinds or not (
                type(axis) is int or type(axis) is tuple
                and builtins.all(type(x) is int for x in axis)):
        return None     # (a bool or float axis too: equal to an int as a key, not to NumPy)
    for u in unset:     # (by identity: an out= array is no None, nor compared with it)
        if u is not None:
            return None
    return _axis_static(axis)


_AXIS_STATICS = {}


def _axis_static(axis, made=_AXIS_STATICS, extra=()):
    """(("axis", axis), ("keepdims", False)) + extra for an int or a tuple of ints, made
    once (in `made`, one dict per `extra`)."""
    static = made.get(axis)
    if static is None:
        if len(made) >= 256:
            made.clear()
        static = made.setdefault(axis, (("axis", axis), ("keepdims", False)) + extra)
    return static


def _plain_arg(a, axis, out, keepdims):
    """(operand, static arguments, result shape or None) of argmax/argmin's common call (an
    array of rank 1 or more, an int axis or None, nothing else), the static ones made once
    per axis; None for any other call. Over every axis, a large array is read in blocks,
    as 1-d (a C-contiguous one as its 1-d view: the same row-major positions). Along a
    leading axis followed only by dimensions of size 1, the operand is the view without
    them, reduced along its last axis, and the result is reshaped to NumPy's (a (2 *
    10^6, 1) array along axis 0: 8.4-9.7 ms one pass, 3.5 with two column reductions of
    one column, 0.95 so, NumPy 0.92); followed by fewer elements than a vector holds,
    one pass (_columns). Along a last axis whose rows outgrow L1, each row is read once, in
    blocks (red.rows_blocked)."""
    if type(a) is not np.ndarray or not a.ndim or out is not None or keepdims is not False:
        return None
    if a.ndim == 1 and type(axis) is int and (axis == 0 or axis == -1):
        axis = None         # (the same position and scalar: over every axis' kernels)
    if axis is None:
        if a.size < red.ARG_BLOCKED_MIN:
            return a, _ARG_SMALL if a.ndim == 1 else _ARG_NARROW, None
        if a.ndim > 1:
            if not a.flags.c_contiguous:
                return a, _ARG_NARROW if a.size < _NARROW_SIZE else _NONE, None
            a = a.reshape(-1)
        return a, _ARG_LARGE, None
    if type(axis) is not int:
        return None
    shape = a.shape
    if axis != -1 and -len(shape) <= axis < len(shape) - 1:        # (a leading axis)
        inner = shape[-1] if len(shape) == 2 else math.prod(shape[axis % len(shape) + 1:])
        if inner == 1:
            k = axis % len(shape)
            view = a.reshape(shape[:k + 1])
            return view, _plain_arg(view, -1, None, False)[1], shape[:k] + shape[k + 1:]
        if _narrow_tail(inner, a):
            return a, _axis_static(axis, _ARG_AXIS_ONE_PASS, _NARROW + _ONE_PASS) \
                if a.size < _NARROW_SIZE else \
                _axis_static(axis, _ARG_WIDE_ONE_PASS, _ONE_PASS), None
    if (axis == -1 or axis == len(shape) - 1) and red.rows_blocked(shape[-1], a.itemsize):
        return a, _axis_static(axis, _ARG_ROWS, _BLOCKED), None
    if a.size >= _NARROW_SIZE:
        return a, _axis_static(axis), None
    return a, _axis_static(axis, _ARG_AXIS, _NARROW), None


# (an array of fewer elements has positions that fit int32: red.argmax's `narrow`)
_NARROW_SIZE = 2 ** 31
_ARG_SMALL = (("axis", None), ("blocked", False), ("narrow", True))
_ARG_LARGE = (("axis", None), ("blocked", True))
_NARROW = (("narrow", True),)
_ARG_NARROW = (("axis", None),) + _NARROW
_ARG_AXIS = {}      # (argmax/argmin's _axis_static, narrow)
_BLOCKED = (("blocked", True),)
_ARG_ROWS = {}      # (... along long rows, read once in blocks)
_ONE_PASS = (("columns", False),)
_ARG_AXIS_ONE_PASS, _ARG_WIDE_ONE_PASS = {}, {}     # (... and one pass: _columns)


def _columns(a, axis):
    """False where argmax/argmin along `axis` (an int, not the last) of array a has fewer
    elements after the axis than a SIMD vector of its dtype holds: one pass, where the
    two column reductions' vectors are mostly empty (red.argmax's `columns`); else None
    (the kernel's own choice)."""
    if type(a) is not np.ndarray or type(axis) is not int or not -a.ndim <= axis < a.ndim \
            or axis % a.ndim == a.ndim - 1:
        return None
    return False if _narrow_tail(math.prod(a.shape[axis % a.ndim + 1:]), a) else None


def _narrow_tail(inner, a):
    """Whether `inner` elements (of array a's dtype) after the reduced axis, more than one,
    fill less than a SIMD vector."""
    return 1 < inner and inner * a.itemsize < host().vector_bytes


def _narrow(a):
    """True where a is an array of fewer than 2**31 elements (positions fit int32)."""
    return True if isinstance(a, np.ndarray) and a.size < _NARROW_SIZE else None


def _index_out(out):
    """An argmax's out=: of a dtype that casts safely to the index dtype, as NumPy asks."""
    if isinstance(out, np.ndarray) and not np.can_cast(out.dtype, np.intp, "safe"):
        raise ArgumentError(f"Cannot cast array data from dtype('{out.dtype}') to "
                            f"dtype('int64') according to the rule 'safe' (out=)", user_loc())
    return out


def ptp(a, axis=None, out=None, keepdims=False):
    """max - min over the given axes (numpy.ptp)."""
    if type(out) is np.ndarray and (dt := _array_dtype(a)) is not None and out.dtype != dt:
        # NumPy's function: its max goes into out= first and the difference is out's
        # dtype's (the ptp of int8 [127, -8] into an int64 out= is 135, not int8's -121;
        # of a bool array into an int one 1, where bool's own subtract is a TypeError)
        return _by_numpy("ptp", a, axis, out, keepdims)
    if axis is not None:
        axis = _axis_of(a, axis)
    return _apply("ptp", red.ptp, (a,), _static(axis, keepdims), out, _A)   # (same_kind)


def all(a, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    """Whether every element over the given axes is true (numpy.all)."""
    if axis is not None:
        axis = _axis_of(a, axis)
    ops, names = _where(a, where)
    return apply("all", red.all_, ops, _static(axis, keepdims), out, names)


def any(a, axis=None, out=None, keepdims=False, *, where=True):  # noqa: A001
    """Whether any element over the given axes is true (numpy.any)."""
    if axis is not None:
        axis = _axis_of(a, axis)
    ops, names = _where(a, where)
    return apply("any", red.any_, ops, _static(axis, keepdims), out, names)


def allclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether numpy.isclose holds for every element pair (numpy.allclose): a bool. Number
    tolerances are run-time operands: every value shares one kernel."""
    if not (tolerance(rtol) and tolerance(atol)) or has_huge_int((a, b, rtol, atol)):
        if is_symbolic(a) or is_symbolic(b):
            raise ArgumentError("allclose(): inside a definition rtol and atol must be "
                                "numbers", user_loc())
        return np.allclose(a, b, rtol, atol, equal_nan)
    finite_tolerances(rtol, atol)
    r = apply("allclose", red.allclose, (a, b, rtol, atol), EQUAL_NAN[bool(equal_nan)],
              None, ISCLOSE_NAMES)
    return r if is_symbolic(r) else bool(r)


def array_equal(a1, a2, equal_nan=False):
    """Whether a1 and a2 have one shape and equal elements (numpy.array_equal): a bool."""
    shapes = [tuple(x.shape) if is_symbolic(x) else np.shape(x) for x in (a1, a2)]
    if len(shapes[0]) != len(shapes[1]) or builtins.any(
            isinstance(m, builtins.int) and isinstance(n, builtins.int) and m != n
            for m, n in zip(*shapes)):
        return False
    r = apply("array_equal", red.array_equal, (a1, a2), (("equal_nan", bool(equal_nan)),),
              None, ("a1", "a2"))
    return r if is_symbolic(r) else bool(r)


def count_nonzero(a, axis=None, *, keepdims=False):
    """The number of non-zero elements over the given axes, int64 (numpy.count_nonzero).
    Of a whole bool array NumPy's own count (it adds bytes in narrow lanes, where the
    kernel widens each to int64: 1.6-2x faster at every size on a 2-core EPYC)."""
    if type(a) is np.ndarray and axis is None and not keepdims and a.dtype is _BOOL:
        return _count_all(a)
    try:
        if axis is not None:
            axis = _axis_of(a, axis)
        return apply("count_nonzero", red.count_nonzero, (a,), _static(axis, keepdims),
                     None, _A)
    except (UnsupportedDtypeError, ScalarOverflowError):
        # (dtypes jitdl does not compile, Python ints beyond int64: NumPy's count)
        if is_symbolic(a):
            raise
        return array_module_function("count_nonzero", np.count_nonzero, (a,), {})(
            a, axis, keepdims=keepdims)


count_nonzero.numpy_fallback = np.count_nonzero  # (its own: no wrapper on the common call)
try:        # (NumPy's C count, without np.count_nonzero's Python layer: 0.15 against 0.43 us)
    from numpy._core.multiarray import count_nonzero as _count_all
except ImportError:     # (NumPy 1.26)
    _count_all = np.count_nonzero
_BOOL = np.dtype(np.bool_)
try:        # (NumPy's axis check, whose AxisError names the argument)
    from numpy.lib.array_utils import normalize_axis_tuple as _axis_tuple
except ImportError:     # (NumPy 1.26)
    from numpy.core.numeric import normalize_axis_tuple as _axis_tuple


def _integer_moment(a, dtype, out):
    """mean/var/std of arrays with an integer dtype= or into an integer (or bool) out=
    are NumPy's: it sums in that dtype, wrapping, and truncates each quotient
    (np.mean(int8 [100, 100, 100], dtype=int8) is 14), and a total cast into out= is
    divided there (the mean of int64 [148, 148, 148] into an int8 out= is -22, not
    int8(148)); inside a definition jitdl's (in floating point, cast at the end)."""
    # (GPU arrays keep jitdl's kernel: CuPy's mean/var/std lack where= and correction=)
    if out is not None and type(out) is np.ndarray and out.dtype.kind in "biu":
        return not is_symbolic(a) and not is_device_array(a)
    return dtype is not None and np.dtype(dtype).kind in "biu" and not is_symbolic(a) \
        and not is_device_array(a)


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=True):
    """Arithmetic mean over the given axes, float64 for integers (numpy.mean)."""
    static = _plain_axis(a, axis, "biu", where, keepdims, dtype, out)
    if static is not None:
        if a.size:
            return _plain("mean", red.mean, a, static, keepdims)
        return _empty_slice(_plain("mean", red.mean, a, static, keepdims), a, axis, where)
    typed = _typed_key("mean", a, axis, dtype, out, keepdims, where)
    if typed is not None and a.size and (static := _TYPED.get(typed)) is not None:
        return apply("mean", red.mean, (a,), static, None, _A)
    if axis is not None and type(axis) is not int:
        _moment_axis(axis)
    if (dtype is not None or out is not None) and _integer_moment(a, dtype, out):
        return _by_numpy("mean", a, axis, out, keepdims, dtype=dtype,
                         **_given(where=(where, True)))
    dtype = _out_dtype(a, dtype, out)
    r = _every("mean", red.mean, a, out, keepdims) \
        if axis is None and dtype is None and where is True else None
    if r is None:
        ops, names = _where(a, where)
        static = _static(axis, keepdims, dtype=_dtype(dtype))
        r = _typed(typed, apply("mean", red.mean, ops, static, out, names), static)
    return _empty_slice(r, a, axis, where)


def _empty_slice(r, a, axis, where):
    """r, the mean, with NumPy's RuntimeWarning where a slice has no elements (its mean
    is NaN there): of an empty array, or of a where= that leaves none."""
    if type(a) is np.ndarray and where is True:
        if a.size:
            return r
    elif is_symbolic(r) or is_device_array(r) or where is True and np.size(a):
        return r
    if _few_degrees(a, axis, 0, where, r):
        # (NumPy's mean divides the empty slices' sums, 0, by their counts, 0: its
        # floating-point error too, of a NumPy scalar's division for a float64 number)
        warn("Mean of empty slice", RuntimeWarning)
        float_error("invalid", "scalar divide" if type(r) is np.float64 else "divide")
    return r


def _ddof(ddof, correction):
    """ddof (or correction=) as the kernel's operand: a Python float, exact for every
    integer up to 2**53, so that every value shares one kernel (a definition's value as
    it is)."""
    if correction is not None:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    if type(ddof) is float or type(ddof) is int and -_EXACT <= ddof <= _EXACT:
        return float(ddof)
    if is_symbolic(ddof):
        return ddof
    if has_huge_int((ddof,)):
        raise OverflowError("Python int too large to convert to C long")    # (NumPy's)
    if isinstance(ddof, (str, bytes)) or ddof is None:
        # (NumPy compares ddof with the count, which has no loop for them: a TypeError)
        raise TypeError(f"ddof must be a number, not {type(ddof).__name__} ({ddof!r})")
    return float(ddof)


_EXACT = 2 ** 53


def _moment(name, builder, a, axis, dtype, out, ddof, keepdims, where, correction):
    """var or std: the kernel's result, with NumPy's RuntimeWarning where ddof is at least
    a slice's element count (the result is inf or NaN there)."""
    ddof = _ddof(ddof, correction)
    dtype = _out_dtype(a, dtype, out)       # (NumPy sums the squares in out's float64)
    if where is True:
        ops, names = (a, ddof), _A_DDOF
    else:
        ops, names = (a, ddof, where), _A_DDOF_WHERE
    # (std: NumPy casts into out= as its last ufunc, sqrt, does: same_kind)
    r = (apply if name == "var" else _apply)(
        name, builder, ops, _static(axis, keepdims, dtype=_dtype(dtype)), out, names)
    if not is_symbolic(r) and _few_degrees(a, axis, ddof, where, r):
        warn("Degrees of freedom <= 0 for slice", RuntimeWarning)
    return r


_A_DDOF = ("a", "ddof")
_A_DDOF_WHERE = ("a", "ddof", "where")


def _few_degrees(a, axis, ddof, where, result):
    """Whether ddof >= the number of elements of some slice (NumPy's test; NaN is not)."""
    if where is True:
        shape = a.shape if type(a) is np.ndarray else np.shape(a)
        if axis is None:
            return ddof >= math.prod(shape)
        return ddof >= math.prod(shape[ax] for ax in (axis if isinstance(axis, tuple)
                                                      else (axis,)))
    if not isinstance(result, (np.ndarray, np.generic)) or np.isfinite(result).all():
        return False        # (ddof >= n gives inf or NaN: only then counted)
    count = np.sum(np.broadcast_to(where, np.shape(a)), axis=_axis(axis))
    return bool(np.any(ddof >= count))


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=None, correction=None):
    """Variance over the given axes, two-pass, divided by n - ddof (numpy.var); a
    given mean= (NumPy 2's, the mean it would compute) is NumPy's function on arrays."""
    if axis is not None and type(axis) is not int:
        _moment_axis(axis)
    if mean is not None or _integer_moment(a, dtype, out):
        return _by_numpy("var", a, axis, out, keepdims, **_given(
            dtype=(dtype, None), where=(where, True), ddof=(ddof, 0),
            correction=(correction, None), mean=(mean, None)))
    return _moment("var", red.var, a, axis, dtype, out, ddof, keepdims, where, correction)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=None, correction=None):
    """Standard deviation over the given axes, divided by n - ddof (numpy.std); a
    given mean= (NumPy 2's, the mean it would compute) is NumPy's function on arrays."""
    if axis is not None and type(axis) is not int:
        _moment_axis(axis)
    if mean is not None or _integer_moment(a, dtype, out):
        return _by_numpy("std", a, axis, out, keepdims, **_given(
            dtype=(dtype, None), where=(where, True), ddof=(ddof, 0),
            correction=(correction, None), mean=(mean, None)))
    return _moment("std", red.std, a, axis, dtype, out, ddof, keepdims, where, correction)


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    """The (weighted) average over the given axes (numpy.average); with returned=True,
    the pair of it and the sum of the weights (the count of the elements without)."""
    if axis is not None and not is_symbolic(a) and not is_device_array(a):
        # (NumPy's AxisError first, which names the argument: 'axis: axis 3 is out ...';
        # and NumPy's axes of a list or a bool, which its other reductions refuse)
        axes = _axis_tuple(axis, np.ndim(a), argname="axis")
        if type(axis) is not int and type(axis) is not tuple:
            axis = axes[0] if len(axes) == 1 else axes
    elif axis is not None and type(axis) is not int and type(axis) is not tuple:
        # (a tensor or a GPU array: NumPy's list and bool axes too, which the kernel's
        # axes, an int or a tuple, refuse)
        axes = _axis_tuple(axis, a.ndim, argname="axis")
        axis = axes[0] if len(axes) == 1 else axes
    if returned:
        if is_symbolic(a) or is_symbolic(weights):
            return apply("average", red.average, (a, weights), _static(
                axis, keepdims) + (("returned", True),), None, ("a", "weights"))
        avg = average(a, axis, weights, keepdims=keepdims)
        if is_device_array(a) or is_device_array(weights):
            # (the weights' sum of GPU arrays: CuPy's average's, where _weight_sum's NumPy
            # functions would refuse them, or read one as a 0-d object array)
            fn = array_module_function("average", np.average, (a, weights), {})
            return avg, fn(a, axis=axis, weights=weights, returned=True,
                           **({"keepdims": True} if keepdims else {}))[1]
        return avg, _weight_sum(a, axis, weights, keepdims, avg)
    if weights is None:
        r = _empty_slice(apply("mean", red.mean, (a,), _static(axis, keepdims), None, _A),
                         a, axis, True)
        if type(r) is np.ndarray and not r.size:
            raise ZeroDivisionError("division by zero")     # (NumPy's a.size / avg.size)
        return r
    r = apply("average", red.average, (a, weights), _static(axis, keepdims), None,
              ("a", "weights"))
    if isinstance(r, (np.ndarray, np.generic)) and not np.isfinite(r).all() \
            and not is_symbolic(weights) and not is_device_array(weights):
        # (a weight sum of zero gave inf or NaN: NumPy's error; checked only then)
        w = np.asarray(weights)
        axes = _axis_of(a, axis) if w.ndim == np.ndim(a) else None
        if np.any(np.sum(w, axis=axes) == 0):
            raise ZeroDivisionError("Weights sum to zero, can't be normalized")
    return r


def _weight_sum(a, axis, weights, keepdims, avg):
    """average's second result on arrays, as NumPy's: the sum of the weights over the
    axes (the size of a over avg's without weights) in avg's dtype and shape (the
    average itself has checked the weights' shape)."""
    a, avg = np.asanyarray(a), np.asanyarray(avg)
    if weights is None:
        scl = avg.dtype.type(a.size / avg.size)
    else:
        w = np.asanyarray(weights)
        axes = None if axis is None else _axis_tuple(axis, a.ndim)
        if w.shape != a.shape and w.ndim != a.ndim:        # (weights along the axes)
            w = w.transpose(np.argsort(axes)).reshape(
                tuple(n if d in axes else 1 for d, n in enumerate(a.shape)))
        scl = np.broadcast_to(w, a.shape).sum(axis=axes, dtype=avg.dtype,
                                              keepdims=keepdims)
    if np.shape(scl) != avg.shape:
        scl = np.broadcast_to(scl, avg.shape).copy()
    return scl


_NO = object()      # (a keyword not given: NumPy's own defaults then)


def _given(**pairs):
    """The keywords whose value is not their default (pairs of value and default)."""
    return {k: v for k, (v, default) in pairs.items() if v is not default}


def _by_numpy(name, a, axis, out, keepdims, **given):
    """A reduction with options its kernel lacks (a NaN reduction's initial= or where=,
    an integer dtype= of a mean): NumPy's function (CuPy's on GPU arrays) computes it;
    inside a definition an error saying so."""
    if is_symbolic(a):
        raise ArgumentError(f"{name}(): {' and '.join(f'{k}=' for k in given)} is not "
                            f"supported inside a definition (on arrays NumPy computes it)",
                            user_loc())
    fn = array_module_function(name, getattr(np, name), (a, out), {})
    return fn(a, axis=axis, out=out, keepdims=keepdims, **given)


def _extra(initial, where):
    return {k: v for k, v in (("initial", initial), ("where", where)) if v is not _NO}


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=_NO, where=_NO):
    """Sum treating NaN as zero (numpy.nansum)."""
    dtype = _total_dtype(a, dtype, out)
    if initial is not _NO or where is not _NO or (
            dtype is not None or out is not None) and _numpy_total(a, dtype, out):
        return _by_numpy("nansum", a, axis, out, keepdims, dtype=dtype,
                         **_extra(initial, where))
    if axis is not None:
        axis = _axis_of(a, axis)
    _unsigned_total(a, dtype, "nansum")
    return apply("nansum", red.nansum, (a,), _static(axis, keepdims, dtype=_dtype(dtype)),
                 out, _A)


def _all_nan_slice(r):
    """r, a nanmax or nanmin, with NumPy's RuntimeWarning where it holds a NaN (a slice
    of NaN alone)."""
    if type(r) is np.ndarray:
        if r.dtype.kind == "f" and np.isnan(r).any():
            warn("All-NaN slice encountered", RuntimeWarning)
    elif isinstance(r, (float, np.floating)) and r != r:
        warn("All-NaN slice encountered", RuntimeWarning)
    return r


def nanmax(a, axis=None, out=None, keepdims=False, initial=_NO, where=_NO):
    """The largest element ignoring NaN; NaN for an all-NaN slice (numpy.nanmax)."""
    if initial is not _NO or where is not _NO or out is not None and _numpy_extreme(a, out):
        return _by_numpy("nanmax", a, axis, out, keepdims, **_extra(initial, where))
    if axis is not None:
        axis = _axis_of(a, axis)
    return _all_nan_slice(apply("nanmax", red.nanmax, (a,), _static(axis, keepdims), out,
                                _A))


def nanmin(a, axis=None, out=None, keepdims=False, initial=_NO, where=_NO):
    """The smallest element ignoring NaN; NaN for an all-NaN slice (numpy.nanmin)."""
    if initial is not _NO or where is not _NO or out is not None and _numpy_extreme(a, out):
        return _by_numpy("nanmin", a, axis, out, keepdims, **_extra(initial, where))
    if axis is not None:
        axis = _axis_of(a, axis)
    return _all_nan_slice(apply("nanmin", red.nanmin, (a,), _static(axis, keepdims), out,
                                _A))


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=_NO):
    """The mean of the non-NaN elements (numpy.nanmean)."""
    dtype = _out_dtype(a, dtype, out)
    if where is not _NO:
        return _by_numpy("nanmean", a, axis, out, keepdims, dtype=dtype, where=where)
    if np.dtype(a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype).kind not in "fc":
        # (NumPy's: no NaN to leave out; its mean refuses axis 0 of a 0-d array)
        return mean(a, axis, dtype, out, keepdims)
    if axis is not None:
        axis = _axis_of(a, axis)
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise ArgumentError("If a is inexact, then dtype must be inexact (nanmean's "
                            "dtype=)", user_loc())
    if isinstance(out, np.ndarray) and out.dtype.kind not in "fc":
        raise ArgumentError("If a is inexact, then out must be inexact (nanmean's out=)",
                            user_loc())
    r = apply("nanmean", red.nanmean, (a,), _static(axis, keepdims, dtype=_dtype(dtype)),
              out, _A)
    if not is_symbolic(r) and not is_device_array(r) and (
            np.isnan(r).any() if type(r) is np.ndarray else r != r) and np.any(
                np.sum(~np.isnan(a), axis=_axis(axis)) == 0):
        # (a NaN mean of a slice without numbers, empty or all NaN: NumPy's warning)
        warn("Mean of empty slice", RuntimeWarning)
    return r


def _whole_slot(name):
    """The slot of f(a) and f(a, axis) (see eager._one_array_call): f's own calls'. (A
    dtype f compiles with other static arguments, uint8 for sum, has no kernel under
    these: its calls go f's way; so does the mean of an empty array, for NumPy's
    warning.)"""
    whole, warns_empty = one_array_slot(name, _NONE), name == "mean"

    def slot(a, axis):
        if warns_empty and not a.size:
            return None
        if axis is None or type(axis) is tuple and _every_axis(axis, a.ndim):
            return whole, _flat(a), None
        if type(axis) is int:
            return (name, _axis_static(axis), 1), a, None     # (_axis_static's own key)
        return None
    return slot


def _every_axis(axis, ndim):
    """Whether tuple `axis` names each of ndim axes once (sum(m, axis=(0, 1)) is sum(m):
    5.0 -> 2.2 us for 25 x 40 float64, NumPy 2.7)."""
    return len(axis) == ndim and builtins.all(
        [type(x) is int and -ndim <= x < ndim for x in axis]) and \
        len({x % ndim for x in axis}) == ndim


def _arg_slot(name):
    """The slot of argmax(a) / argmin(a) and along an axis: the one _plain_arg picks,
    remembered per (shape, itemsize, axis) for an int axis (which _plain_arg's choice
    reads alone: 0.5 us of a 2.3 us call of 25 x 40 float64)."""
    keys, picks = {}, {}

    def slot(a, axis):
        if type(axis) is int:
            pick = picks.get((a.shape, a.itemsize, axis))
            if pick is not None:
                key, view, shape = pick
                return key, a if view is None else a.reshape(view), shape
        plain = _plain_arg(a, axis, None, False)
        if plain is None:
            return None
        operand, static, shape = plain
        seen = keys.get(id(static))     # (the statics _plain_arg keeps: by identity, which
        if seen is None or seen[0] is not static:       # costs less than their hash)
            if len(keys) >= 256:
                keys.clear()
            seen = keys[id(static)] = (static, one_array_slot(name, static))
        if type(axis) is int:
            if len(picks) >= 4096:
                picks.clear()
            picks[a.shape, a.itemsize, axis] = (
                seen[1], None if operand is a else operand.shape, shape)
        return seen[1], operand, shape
    return slot


# the common calls f(a), f(a, axis) go straight to their kernels (eager._one_array_call)
for _f in (sum, prod, max, min, mean, all, any):
    _f.one_array_slot = _whole_slot(_f.__name__)
argmax.one_array_slot, argmin.one_array_slot = _arg_slot("argmax"), _arg_slot("argmin")

amax, amin = max, min
__all__ = ["sum", "prod", "max", "min", "amax", "amin", "argmax", "argmin", "ptp", "all",
           "any", "count_nonzero", "mean", "var", "std", "average", "nansum", "nanmax",
           "nanmin", "nanmean", "allclose", "array_equal"]

STATUS = {n: "done" for n in __all__}
STATUS.update({
    **{n: f"done (uint8 arrays: NumPy's uint64 {w}, by NumPy; float arrays with an "
          f"integer dtype= and integer ones into a bool out= on arrays: NumPy's function, "
          f"whose cast of each element is this machine's; inside a definition int64 and "
          f"jitdl's saturating cast)"
       for n, w in (("sum", "total"), ("prod", "product"))},
    **{n: ("done (" if n == "mean" else "partial: mean= by NumPy's function (on arrays "
                                         "only); ") +
          "an integer dtype= or out= on arrays: NumPy's function, which sums in that "
          "dtype, or casts the total into out=, and divides there; inside a definition "
          "computed in floating point and cast" + (")" if n == "mean" else "")
       for n in ("mean", "var", "std")},
    **{n: "done (an integer array into an integer out= of the other signedness or a "
          "narrower one, a float array into an unsigned one, or initial= into an out= of "
          "another dtype: NumPy's function, which reduces in out's dtype)"
       for n in ("max", "min")},
    "average": "partial: weights broadcast against a (NumPy wants them 1-d along axis or "
               "a's shape); with returned=True on arrays the weights' sum is NumPy's",
    "nansum": "partial: initial=/where= by NumPy's function (on arrays only)",
    **{n: "partial: initial=/where= by NumPy's function (on arrays only); out= as max's "
          "and min's" for n in ("nanmax", "nanmin")},
    "nanmean": "partial: where= by NumPy's function (on arrays only)",
    "count_nonzero": "done (returns np.int64 for axis=None, as NumPy 2)",
})
