"""jd.numpy's elementwise functions (NumPy's ufuncs), with NumPy's signatures.

Each function passes its operands and a precomputed static tuple to jitdl.eager.apply:
the common call (no dtype=) builds nothing per call.
"""
from __future__ import annotations

import builtins
import functools
import math
import operator
import warnings

import numpy as np

from jitdl.eager import (_castable, apply, apply_out, array_module_function, defined_order,
                          fast_state, given_signature, has_huge_int, in_byte_order, kernel_dtype,
                          merged_run, numpy_accepts, NOT_GIVEN, NUMPYS, SMALL_COPY, copyable,
                          signature_dtype, small_copies, wraps_results)
from jitdl.errors import (ArgumentError, OutArgumentError, ScalarOverflowError, ShapeError,
                          UnsupportedDtypeError, numpy_kind, user_loc, warn)
from jitdl.ops import elementwise as ew
from jitdl.ops.core import broadcast_shapes, broadcast_to, is_symbolic, shape_of
from jitdl.runtime.kernel import FAST_FALLBACK, FAST_RESULTS, NUMPY_SCALARS
from jitdl.runtime.cuda import is_device_array
from jitdl.te.naming import tracing

_ndarray = np.ndarray
_MISS = FAST_RESULTS[FAST_FALLBACK]     # what a direct entry returns for a call it does not serve


_PY = (float, int, bool)
# numbers a table of kernels keys by type: Python's, and NumPy scalars of the dtypes jitdl
# compiles (a * a.mean(): np.multiply's NEP 50 rules, a 0-d array's; 5.0 -> 0.9 us)
_NUMBERS = frozenset(_PY) | NUMPY_SCALARS
_I64 = 2 ** 63      # a Python int beyond int64 takes the general path (jitdl.eager)
_I32 = 2 ** 31      # (round's decimals: a C int, as NumPy's)


_NARROW = frozenset(map(np.dtype, ("bool", "int8", "uint8")))


@functools.lru_cache(maxsize=None)
def _half_loop(np_fn, dts):
    """Whether NumPy runs np_fn's float16 loop for operands of these dtypes (Python types
    for numbers: NEP 50's weak scalars)."""
    try:
        return np_fn.resolve_dtypes(dts + (None,) * np_fn.nout)[-1] == np.float16
    except Exception:       # (no loop: the kernel's own error follows)
        return False


def _half(np_fn, operands):
    """Whether NumPy computes these operands in float16 (a float function of bool, int8 or
    uint8 arrays): jitdl has no float16, so on arrays NumPy's function answers (the same
    float32 arithmetic rounded to float16); inside a definition the result is float32."""
    for a in operands:      # (the common call: no narrow array, nothing to ask NumPy)
        t = type(a)
        if t is _ndarray and a.dtype in _NARROW or t is not _ndarray and t is not int \
                and t is not float:
            break
    else:
        return False
    if tracing():       # (a definition's constants: float32, the definition's float)
        return False
    dts, narrow = [], False
    for a in operands:
        if type(a) in (int, float, complex):
            dts.append(type(a))
            continue
        if type(a) is bool:         # (NumPy's bool: a Python bool is not a weak scalar)
            dts.append(np.dtype(bool))
            narrow = True
            continue
        if is_symbolic(a):
            return False
        dt = getattr(a, "dtype", None)
        if dt is None:
            if not isinstance(a, (list, tuple)):
                return False
            dt = np.asarray(a).dtype
        narrow |= dt in _NARROW
        dts.append(dt)
    return narrow and _half_loop(np_fn, tuple(dts))


def _given(dtype, casting, where=True, order="K"):
    """The keywords a call gave NumPy's function (np.fix, not a ufunc, takes none)."""
    return {k: v for k, v in (("dtype", dtype), ("casting", casting), ("where", where),
                              ("order", order))
            if v is not None and v is not True and not (k == "casting" and v == "same_kind")
            and not (k == "order" and v in ("K", "k"))}


def _fresh(out):
    """Whether a call's out= asks for a new result (None, or NumPy's (None,))."""
    return out is None or isinstance(out, tuple) and len(out) == 1 and out[0] is None


def _options(where, order):
    """A ufunc's where= as the call uses it, after NumPy's errors for order= and a mask:
    an array mask must be bool; Python numbers, None (False), NumPy scalars and lists are
    cast to bool as NumPy casts them; a mask that is True everywhere as a scalar is True."""
    if order is not None and not isinstance(order, str):
        raise TypeError(f"order must be str, not {type(order).__name__}")
    if order is not None and order.upper() not in ("K", "A", "C", "F"):
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    if where is True or is_symbolic(where):
        return where
    if isinstance(where, np.ndarray) or is_device_array(where):
        # (a GPU mask has its dtype: np.asarray would copy it, which CuPy refuses)
        if where.dtype != np.bool_:
            raise ArgumentError(f"Cannot cast array data from dtype('{where.dtype}') to "
                                f"dtype('bool') according to the rule 'safe' (where=)",
                                user_loc())
        return where
    mask = np.asarray(where, dtype=bool)
    return True if mask.ndim == 0 and mask else mask


def _layout(result, order, args, out, name):
    """A fresh result (out= None or (None,)) in the memory order order= asks for: 'F'
    Fortran order, 'A' Fortran when every array argument is (and not also C order), else
    C order; 'K', NumPy's default, as the kernel wrote it (the operands' memory order
    where they share one: jitdl.eager.reorder; else C order). A result written into out=
    keeps out's layout. Inside a definition: jitdl.eager.defined_order (`name`: the
    function's)."""
    defined_order(name, result, order)
    if order is None or order in "Kk" or not _fresh(out) or is_symbolic(result) \
            or getattr(result, "ndim", 0) < 2:
        return result
    fortran = order in "Ff"
    if order in "Aa":
        arrays = [a for a in args if hasattr(a, "flags") and getattr(a, "ndim", 0) >= 2]
        fortran = bool(arrays) and all(a.flags.f_contiguous and not a.flags.c_contiguous
                                       for a in arrays)
    name, fn = ("asfortranarray", np.asfortranarray) if fortran else \
        ("ascontiguousarray", np.ascontiguousarray)
    return array_module_function(name, fn, (result,), {})(result)


def _where_out(out, result, where, casting, name=None):
    """A ufunc's where= with out=: out takes the result where `where` holds and keeps its
    own elements elsewhere (a result out= cannot take under casting= is NumPy's
    UFuncTypeError naming the function `name`, not np.copyto's). Without out= (or
    out=(None,)) the mask takes part in the result's broadcast shape, and NumPy leaves
    the elements it masks out uninitialised: here they hold the computed values."""
    out = out[0] if isinstance(out, tuple) and len(out) == 1 else out
    if out is None:
        if is_symbolic(result) or is_symbolic(where):
            return broadcast_to(result, broadcast_shapes(shape_of(result), shape_of(where)))
        shape = np.broadcast_shapes(np.shape(result), np.shape(where))
        if shape == np.shape(result):
            return result
        return array_module_function("broadcast_to", np.broadcast_to, (result,), {})(
            result, shape).copy()
    shape = tuple(getattr(out, "shape", ()))
    loop = np.broadcast_shapes(shape, tuple(np.shape(result)))
    if loop != shape:               # (np.copyto would drop the result's leading 1s)
        raise ShapeError(f"non-broadcastable output operand with shape {shape} doesn't "
                         f"match the broadcast shape {loop}", user_loc())
    if not isinstance(out, np.ndarray):
        if is_device_array(out) and is_device_array(result):
            if is_device_array(where) and array_module_function(
                    "may_share_memory", np.may_share_memory, (out,), {})(where, out):
                where = where.copy()        # (as below: CuPy's copyto races on it)
            array_module_function("copyto", np.copyto, (out,), {})(
                out, result, casting=casting, where=where)
            return out
        raise ArgumentError(f"out= must be a NumPy array with where=, got "
                            f"{type(out).__name__}", user_loc())
    if name is not None:
        _castable(name, np.asarray(result).dtype, out.dtype, casting)
    if isinstance(where, np.ndarray) and np.may_share_memory(where, out):
        where = where.copy()    # (a ufunc reads a mask that out overlaps as if copied
        #                          first; np.copyto reads it as it writes out)
    np.copyto(out, result, casting=casting, where=where)
    return out


def _unary(name, doc):
    static = (("fn", name),)
    np_fn = getattr(np, name)         # (for dtypes jitdl does not compile: jitdl.eager)
    not_ufunc = not isinstance(np_fn, np.ufunc)       # (np.fix)
    table, last, direct = fast_state({}, [None], [None])
    # table: (shape, dtype) -> the kernel's call for exactly those; last: the last call's
    # (shape, dtype, call), one item that threads replace whole; direct: the last
    # kernel's direct entry (jitdl.eager.apply's slot)

    def ufunc(x, /, out=None, *, where=True, casting="same_kind", order="K", dtype=None,
              subok=True, signature=NOT_GIVEN, sig=NOT_GIVEN):
        # (subok: the results are ndarrays, as for ndarray operands)
        if signature is not NOT_GIVEN or sig is not NOT_GIVEN:
            signature = given_signature(name, signature, sig)
            own = signature_dtype(name, signature, dtype, (x,))
            if own is NUMPYS:
                return array_module_function(name, np_fn, (x, out), {})(
                    x, out=out, signature=signature, **_given(dtype, casting, where, order))
            dtype = own
        try:
            if out is None and dtype is None and casting == "same_kind" and where is True \
                    and order == "K":
                d = direct[0]
                if d is not None:
                    r = d(x)
                    if r is not _MISS:
                        return r
                if type(x) is _ndarray:
                    if not x.flags.c_contiguous:
                        if x.ndim > 1 and _fortran_ordered(x):
                            y = x.T             # (a.T: its C-ordered memory, see _binary)
                            if d is not None:
                                r = d(y)
                                if r is not _MISS:
                                    return r.T
                            return ufunc(y).T
                        if copyable(x):     # (a small strided view: eager.small_copies)
                            return ufunc(np.ascontiguousarray(x))
                    s, seen = x.shape, last[0]
                    if seen is not None and s == seen[0] and x.dtype is seen[1]:
                        return seen[2]((x,))
                    key = (s, x.dtype)
                    run = table.get(key)
                    if run is None:
                        if x.dtype in _NARROW and _half(np_fn, (x,)):
                            raise UnsupportedDtypeError(name)
                        plan = _merge((x,))
                        if plan is not None:
                            return _merged(name, static, (x,), plan, table, key, ew.unary)
                        return apply(name, ew.unary, (x,), static, None, None, table, key,
                                     direct)
                    last[0] = (s, x.dtype, run)
                    return run((x,))
                if type(x) in NUMPY_SCALARS:        # (np.exp(a.max()): NumPy's scalar)
                    run = table.get(type(x))
                    if run is not None:
                        return run((x,))
                    if not (x.dtype in _NARROW and _half(np_fn, (x,))):
                        return apply(name, ew.unary, (x,), static, None, None, table,
                                     type(x), direct)
                elif type(x) in _LISTS and (y := _as_arrays((x,))) is not None:
                    return ufunc(y[0])
            elif type(out) is _ndarray and dtype is None and casting == "same_kind" \
                    and where is True and order == "K":
                d = direct[0]
                if d is not None:
                    r = d(x, out)
                    if r is not _MISS:
                        return r
                r = apply_out(name, static, (x,), out, direct)
                if r is not _MISS:
                    return r
            if wraps_results((x, out)):
                raise UnsupportedDtypeError(name)       # (NumPy's function answers)
            where = _options(where, order)
            if where is not True:
                return _layout(_where_out(out, ufunc(x, dtype=dtype, casting=casting),
                                          where, casting, name), order, (x,), out, name)
            if dtype is None and _half(np_fn, (x,)):
                raise UnsupportedDtypeError(name)
            if type(x) is int and not -_I64 <= x < _I64 and not tracing():
                # (NumPy's uint64 or object array of it: a number or NumPy's TypeError)
                raise UnsupportedDtypeError(name)
            if casting != "same_kind" and dtype is None:
                numpy_accepts(name, np_fn, (x,), casting)
            result = apply(name, ew.unary, (x,), static if dtype is None else
                           static + (("dtype", kernel_dtype(name, dtype, np_fn, (x,),
                                                            casting)),),
                           out, casting=casting, broadcast_out=True)
            return _layout(result, order, (x,), out, name)
        except UnsupportedDtypeError:
            if is_symbolic(x):
                raise
            return array_module_function(name, np_fn, (x, out), {})(
                x, out=out, **_given(dtype, casting, where, order))
    if not_ufunc:
        ufunc = _no_keywords(name, ufunc)
    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = doc
    ufunc.numpy_fallback = np_fn
    return ufunc


def _no_keywords(name, ufunc):
    """ufunc as NumPy's `name`, which is no ufunc (np.fix in NumPy 2: fix(x, out=None)):
    any other keyword, given even as its ufunc default (where=True, casting='same_kind'),
    is NumPy's TypeError naming it."""
    def call(x, out=None, **kwargs):
        for given in kwargs:
            raise numpy_kind(ArgumentError, TypeError)(
                f"{name}(): {name}() got an unexpected keyword argument '{given}'",
                user_loc())
        return ufunc(x, out)
    return call


_LISTS = (list, tuple)


def _as_arrays(operands):
    """The operands with each list or tuple as NumPy's array of it (np.add([1.0, 2.0], 1.0)
    as NumPy converts it: 13 -> 3 us), to take the fast paths; None inside a definition,
    or where NumPy makes no array of numbers of it (the general path's error or answer)."""
    if tracing():
        return None
    ys = list(operands)
    for i, x in enumerate(operands):
        if type(x) in _LISTS:
            try:
                y = np.asarray(x)
            except Exception:
                return None
            if y.dtype.kind not in "biuf":
                return None
            ys[i] = y
    return ys


MERGE_MIN = 1 << 16     # results of this many elements run with their dimensions merged


def _merge(operands):
    """How an elementwise call on C-contiguous arrays runs as one of fewer dimensions, as
    NumPy's iterator does: adjacent dimensions merge where every array has both whole or
    both of size 1 (a (N, 3) array is one run of 3N elements, not N runs of 3 that the
    vector loop barely enters; a rank-6 call compiles a rank-1 kernel). (The operands'
    merged shapes, the result's shape), or None: nothing merges, a strided or small
    call (the reshapes cost more than they save)."""
    shapes = []
    for a in operands:
        if type(a) is _ndarray:
            if not a.flags.c_contiguous:
                return None
            shapes.append(a.shape)
        elif type(a) not in _NUMBERS:
            return None
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        return None                     # (NumPy's error, from the general path)
    if len(shape) < 2 or math.prod(shape) < MERGE_MIN:
        return None
    dims = [d for d in range(len(shape)) if shape[d] != 1]
    padded = [(1,) * (len(shape) - len(sh)) + sh for sh in shapes]
    groups = [[dims[0]]] if dims else []
    for d in dims[1:]:
        prev = groups[-1][-1]
        if all((p[prev] == 1) == (p[d] == 1) for p in padded):
            groups[-1].append(d)
        else:
            groups.append([d])
    if len(groups) >= len(shape):
        return None
    merged = [tuple(math.prod(p[d] for d in g) for g in groups) for p in padded]
    return merged, shape


def _merged(name, static, operands, plan, table, key, builder):
    """The first call of a key whose dimensions merge (_merge): the kernel of the merged
    views (compiled, or found: a symbolic one serves every size); then the table serves
    such calls with that kernel, entered with the arrays themselves (eager.merged_run)."""
    shapes, shape = plan
    views, it = [], iter(shapes)
    for a in operands:
        views.append(a.reshape(next(it)) if type(a) is _ndarray else a)
    vkey = tuple(x for a in views
                 for x in ((a.shape, a.dtype) if type(a) is _ndarray else (type(a),)))
    result = apply(name, builder, tuple(views), static, None, None, table, vkey)
    run = merged_run(name, static, tuple(views), shape)
    if run is not None:
        table[key] = run
    try:                    # (the result keeps its own data, as NumPy's results do)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            result.shape = shape
    except Exception:       # (a NumPy where setting the shape is deprecated)
        result = result.reshape(shape)
    return result


def _fortran_ordered(x):
    """Whether array x (of 2 or more dimensions, not C-contiguous) lies in Fortran order:
    Fortran-contiguous (a.T), or a small 2-d view whose columns are closer in memory than
    its rows (a.T[::2], m[:, :20].T): its transpose is C-ordered, which a kernel's direct
    entry gathers (v.T + 1 of a 25 x 20 view 11.5 -> 1.6 us, NumPy 1.5), and NumPy's result
    is Fortran-ordered."""
    if x.flags.f_contiguous:
        return True
    if x.ndim != 2 or x.nbytes >= SMALL_COPY or x.shape[0] < 2 or x.shape[1] < 2:
        return False
    # (not abs(): this module's abs is jd.numpy's; a broadcast row, stride 0, is C order)
    s0, s1 = x.strides
    return s0 != 0 and (s1 if s1 > 0 else -s1) > (s0 if s0 > 0 else -s0)


def _fortran_operand(x, like):
    """x as the operand of an elementwise call on like.T (like: a Fortran-ordered array,
    which that call reads C-contiguous): a number as it is; a Fortran-ordered array that
    broadcasts against like (like's shape, a row, a column, 0-d), or one with at most one
    dimension longer than 1 (a strided column m[:20, :1]: no order of its own, NumPy's
    result takes like's), given like's rank and transposed; None for anything else (the
    general path's copy or reorder)."""
    if type(x) is not _ndarray:
        return x if type(x) in _PY or isinstance(x, np.generic) else None
    shape, own = x.shape, like.shape
    if shape == own:
        return x.T if _fortran_ordered(x) else None
    if len(shape) > len(own) or not (_fortran_ordered(x) or x.size == builtins.max(
            shape, default=1)):
        return None
    for n, m in zip(shape, own[len(own) - len(shape):]):
        if n != m and n != 1 and m != 1:
            return None         # (NumPy's broadcasting error, with the shapes as given)
    return x.reshape((1,) * (len(own) - len(shape)) + shape).T if len(shape) < len(own) \
        else x.T


def _binary(name, doc, general=None):
    """jd.numpy's binary ufunc `name`: the fast paths below (a table of kernels by operand
    shapes and dtypes, the last kernel's direct entry), then `general` (x1, x2, out,
    where, casting, order, dtype) where given, else the general path below."""
    static = (("fn", name),)
    np_fn = getattr(np, name)
    table, last, direct = fast_state({}, [None], [None])
    # table: (shape, dtype, shape, dtype or Python type) -> the kernel's call; last: the
    # last array-array call's (shapes, dtypes, call), one item that threads replace
    # whole; direct: the last kernel's direct entry (jitdl.eager.apply's slot)

    def ufunc(x1, x2, /, out=None, *, where=True, casting="same_kind", order="K",
              dtype=None, subok=True, signature=NOT_GIVEN, sig=NOT_GIVEN):
        if signature is not NOT_GIVEN or sig is not NOT_GIVEN:
            signature = given_signature(name, signature, sig)
            own = signature_dtype(name, signature, dtype, (x1, x2))
            if own is NUMPYS:
                return array_module_function(name, np_fn, (x1, x2, out), {})(
                    x1, x2, out=out, signature=signature, **_given(dtype, casting, where,
                                                                   order))
            dtype = own
        try:
            if out is None and dtype is None and casting == "same_kind" and where is True \
                    and order == "K":
                d = direct[0]
                if d is not None:
                    r = d(x1, x2)
                    if r is not _MISS:
                        return r
                if type(x1) is _ndarray:
                    t2 = type(x2)
                    if not x1.flags.c_contiguous and x1.ndim > 1 and _fortran_ordered(x1):
                        # Fortran-ordered operands (a.T) the kernel's direct entry did not
                        # serve (another kernel's in the slot): the op on their transposes,
                        # which are C-contiguous, transposed back (NumPy's result is
                        # Fortran-ordered too), where the kernel's own reorder took 5 us
                        y2 = _fortran_operand(x2, x1)
                        if y2 is not None:
                            y1 = x1.T
                            if d is not None:
                                r = d(y1, y2)
                                if r is not _MISS:
                                    return r.T
                            return ufunc(y1, y2).T
                    elif t2 is _ndarray and x2.ndim > 1 and not x2.flags.c_contiguous \
                            and _fortran_ordered(x2):
                        y1 = _fortran_operand(x1, x2)       # (a row or 0-d array and a.T)
                        if y1 is not None:
                            return ufunc(y1, x2.T).T
                    if (not x1.flags.c_contiguous or t2 is _ndarray and
                            not x2.flags.c_contiguous) and \
                            (ys := small_copies((x1, x2))) is not None:
                        return ufunc(*ys)       # (small strided views: eager.small_copies)
                    if t2 is _ndarray:
                        s1, s2, seen = x1.shape, x2.shape, last[0]
                        if seen is not None and s1 == seen[0] and s2 == seen[1] \
                                and x1.dtype is seen[2] and x2.dtype is seen[3]:
                            return seen[4]((x1, x2))
                        key = (s1, x1.dtype, s2, x2.dtype)
                    elif t2 in _NUMBERS and (t2 is not int or -_I64 <= x2 < _I64):
                        key = (x1.shape, x1.dtype, t2)
                    else:
                        key = None
                elif type(x2) is _ndarray:
                    t1, key = type(x1), None
                    if not x2.flags.c_contiguous:
                        if x2.ndim > 1 and _fortran_ordered(x2):
                            y1 = _fortran_operand(x1, x2)   # (a number and a.T: as above)
                            if y1 is not None:
                                return ufunc(y1, x2.T).T
                        elif (ys := small_copies((x1, x2))) is not None:
                            return ufunc(*ys)
                    elif t1 in _NUMBERS and (t1 is not int or -_I64 <= x1 < _I64):
                        key = (t1, x2.shape, x2.dtype)      # (2 * a, a.mean() - a)
                else:
                    key = None
                if key is not None:
                    run = table.get(key)
                    if run is None:
                        if _half(np_fn, (x1, x2)):
                            raise UnsupportedDtypeError(name)
                        plan = _merge((x1, x2))
                        if plan is not None:
                            return _merged(name, static, (x1, x2), plan, table, key,
                                           ew.binary)
                        return apply(name, ew.binary, (x1, x2), static, None, None, table,
                                     key, direct)
                    if len(key) == 4:
                        last[0] = (s1, s2, x1.dtype, x2.dtype, run)
                    return run((x1, x2))
                if type(x1) in _LISTS or type(x2) in _LISTS:
                    ys = _as_arrays((x1, x2))
                    if ys is not None:
                        return ufunc(*ys)
            elif type(out) is _ndarray and dtype is None and casting == "same_kind" \
                    and where is True and order == "K":
                d = direct[0]
                if d is not None:
                    r = d(x1, x2, out)
                    if r is not _MISS:
                        return r
                r = apply_out(name, static, (x1, x2), out, direct)
                if r is not _MISS:
                    return r
            if wraps_results((x1, x2, out)):
                raise UnsupportedDtypeError(name)       # (NumPy's function answers)
            if general is not None:
                return general(x1, x2, out, where, casting, order, dtype)
            where = _options(where, order)
            if where is not True:
                return _layout(_where_out(out, ufunc(x1, x2, dtype=dtype, casting=casting),
                                          where, casting, name), order, (x1, x2), out,
                               name)
            if dtype is None and _half(np_fn, (x1, x2)):
                raise UnsupportedDtypeError(name)
            if casting != "same_kind" and dtype is None:
                numpy_accepts(name, np_fn, (x1, x2), casting)
            result = apply(name, ew.binary, (x1, x2), static if dtype is None else
                           static + (("dtype", kernel_dtype(name, dtype, np_fn, (x1, x2),
                                                            casting)),),
                           out, casting=casting, broadcast_out=True)
            return _layout(result, order, (x1, x2), out, name)
        except UnsupportedDtypeError:
            if is_symbolic(x1) or is_symbolic(x2):
                raise
            return array_module_function(name, np_fn, (x1, x2, out), {})(
                x1, x2, out=out, **_given(dtype, casting, where, order))
    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = doc
    ufunc.numpy_fallback = np_fn
    return ufunc


_UNARY_DOCS = {
    "negative": "Numerical negative, elementwise (-x).",
    "positive": "Numerical positive, elementwise (+x).",
    "absolute": "Absolute value, elementwise.",
    "fabs": "Absolute value as a float, elementwise.",
    "sign": "-1, 0 or 1 by the sign of x (NaN stays NaN), elementwise.",
    "reciprocal": "1 / x, elementwise (C's integer division for integers).",
    "square": "x * x, elementwise.",
    "exp": "e ** x, elementwise.",
    "exp2": "2 ** x, elementwise (exact for integral x).",
    "expm1": "exp(x) - 1, accurate for small x, elementwise.",
    "log": "Natural logarithm, elementwise.",
    "log2": "Base-2 logarithm, elementwise (exact for powers of two).",
    "log10": "Base-10 logarithm, elementwise.",
    "log1p": "log(1 + x), accurate for small x, elementwise.",
    "sqrt": "Non-negative square root, elementwise.",
    "cbrt": "Cube root (negative for negative x), elementwise.",
    "sin": "Sine, elementwise.",
    "cos": "Cosine, elementwise.",
    "tan": "Tangent, elementwise.",
    "arcsin": "Inverse sine, elementwise (NaN outside [-1, 1]).",
    "arccos": "Inverse cosine, elementwise (NaN outside [-1, 1]).",
    "arctan": "Inverse tangent, elementwise.",
    "sinh": "Hyperbolic sine, elementwise (inf, not NaN, for large |x|).",
    "cosh": "Hyperbolic cosine, elementwise (inf, not NaN, for large |x|).",
    "tanh": "Hyperbolic tangent, elementwise.",
    "arcsinh": "Inverse hyperbolic sine, elementwise.",
    "arccosh": "Inverse hyperbolic cosine, elementwise (NaN below 1).",
    "arctanh": "Inverse hyperbolic tangent, elementwise (+-inf at +-1).",
    "deg2rad": "Degrees to radians, elementwise.",
    "rad2deg": "Radians to degrees, elementwise.",
    "floor": "The largest integer <= x, elementwise (integers unchanged).",
    "ceil": "The smallest integer >= x, elementwise (integers unchanged).",
    "trunc": "x rounded towards zero, elementwise (integers unchanged).",
    "fix": "x rounded towards zero, elementwise (numpy.fix).",
    "rint": "x rounded to the nearest integer, half to even, elementwise.",
    "isnan": "Whether x is NaN, elementwise.",
    "isinf": "Whether x is +inf or -inf, elementwise.",
    "isfinite": "Whether x is neither infinite nor NaN, elementwise.",
    "signbit": "Whether x's sign bit is set (-0.0 included), elementwise.",
    "logical_not": "Logical NOT of x, elementwise.",
    "invert": "Bitwise NOT (logical NOT for bool), elementwise.",
}
_BINARY_DOCS = {
    "add": "x1 + x2, elementwise.",
    "subtract": "x1 - x2, elementwise.",
    "multiply": "x1 * x2, elementwise.",
    "divide": "x1 / x2 (true division), elementwise.",
    "floor_divide": "x1 // x2, elementwise (integer division by zero gives 0).",
    "remainder": "x1 % x2 with the sign of x2, elementwise (integer x % 0 gives 0).",
    "fmod": "The C remainder of x1 / x2 with the sign of x1, elementwise.",
    "float_power": "x1 ** x2 in float64, elementwise.",
    "maximum": "The larger of x1 and x2, elementwise (NaN wins).",
    "minimum": "The smaller of x1 and x2, elementwise (NaN wins).",
    "fmax": "The larger of x1 and x2, elementwise (a number wins over NaN).",
    "fmin": "The smaller of x1 and x2, elementwise (a number wins over NaN).",
    "arctan2": "The angle of the point (x2, x1), elementwise.",
    "hypot": "sqrt(x1**2 + x2**2) without overflow, elementwise.",
    "copysign": "|x1| with the sign of x2, elementwise.",
    "heaviside": "The Heaviside step of x1 (x2 at 0), elementwise.",
    "logaddexp": "log(exp(x1) + exp(x2)) without overflow, elementwise.",
    "logaddexp2": "log2(2**x1 + 2**x2) without overflow, elementwise.",
    "bitwise_and": "x1 & x2, elementwise.",
    "bitwise_or": "x1 | x2, elementwise.",
    "bitwise_xor": "x1 ^ x2, elementwise.",
    "left_shift": "x1 << x2, elementwise (0 once the shift reaches the width).",
    "right_shift": "x1 >> x2, elementwise (arithmetic for signed integers).",
    "greater": "x1 > x2, elementwise.",
    "greater_equal": "x1 >= x2, elementwise.",
    "less": "x1 < x2, elementwise.",
    "less_equal": "x1 <= x2, elementwise.",
    "equal": "x1 == x2, elementwise.",
    "not_equal": "x1 != x2, elementwise.",
    "logical_and": "Logical AND of x1 and x2, elementwise.",
    "logical_or": "Logical OR of x1 and x2, elementwise.",
    "logical_xor": "Logical XOR of x1 and x2, elementwise.",
}
for _n, _d in _UNARY_DOCS.items():
    globals()[_n] = _unary(_n, _d)
for _n, _d in _BINARY_DOCS.items():
    globals()[_n] = _binary(_n, _d)

_POWER = (("fn", "power"),)


def _dtype_of(x):
    """An integral operand's dtype (a Python int or bool: its weak dtype's kind, 'i')."""
    t = type(x)
    if t is int or t is bool:
        return np.dtype(np.int8 if t is int else bool)
    return getattr(x, "dtype", None) or np.asarray(x).dtype


def _integral(x):
    t = type(x)
    if t is _ndarray or isinstance(x, np.generic):
        return x.dtype.kind in "biu"
    if t is list or t is tuple:
        return np.asarray(x).dtype.kind in "biu"
    return t is int or t is bool


def _int_loop_exponents(x1, x2, dtype, casting):
    """The exponents power's loop for dtype= sees where it is an integer loop: x2 cast to
    the loop's exponent dtype (dtype=np.uint8 makes -1 a 255); None where the loop is a
    float one or NumPy has none for the operands under casting= (its casting or no-loop
    error, which the kernel raises, comes before the check of negative exponents)."""
    if np.dtype(dtype).kind not in "iu":
        return None
    kinds = []
    for x in (x1, x2):
        if is_symbolic(x):
            return x2
        kinds.append(np.dtype(bool) if type(x) is bool else type(x) if type(x) in (int, float)
                     else getattr(x, "dtype", None) or np.asarray(x).dtype)
    try:
        loop = np.power.resolve_dtypes(tuple(kinds) + (None,),
                                       signature=(None, None, np.dtype(dtype)), casting=casting)
    except (TypeError, ValueError):
        return None
    if type(x2) in (int, bool):
        # (a Python int out of the loop's range is the kernel's OverflowError)
        return None if loop[1].kind == "u" else x2
    return np.asarray(x2).astype(loop[1])


def _empty_result(x1, x2):
    """The operands broadcast to no elements (NumPy computes nothing, raises nothing)."""
    if is_symbolic(x1) or is_symbolic(x2):
        return False
    try:
        return 0 in np.broadcast_shapes(np.shape(x1), np.shape(x2))
    except ValueError:
        return False        # (the call's own broadcasting error follows)


def _fits(x1, x2):
    """Whether a Python int base or exponent fits the other operand's integer dtype
    (NEP 50: else the call is an OverflowError, which the kernel's argument check raises,
    before any check of a negative exponent: np.power(300, int8 array) is one)."""
    for v, other in ((x2, x1), (x1, x2)):
        dt = getattr(other, "dtype", None)
        if type(v) is int and dt is not None and np.dtype(dt).kind in "iu":
            info = np.iinfo(dt)
            if not info.min <= v <= info.max:
                return False
    return True


def _power_general(x1, x2, out, where, casting, order, dtype):
    """power's calls that its fast paths (_binary's) do not serve."""
    where = _options(where, order)
    if dtype is None and _half(np.power, (x1, x2)):
        raise UnsupportedDtypeError("power")        # (NumPy's function answers)
    if where is True and (type(x1) is _ndarray or type(x2) is _ndarray):
        # (the kernel refuses negative integer exponents itself, reading an array, after
        # the arguments' checks, as NumPy's loop does: build.power)
        return _layout(_power(x1, x2, out, dtype, casting), order, (x1, x2), out, "power")
    # checked here on arrays (not inside a definition): numbers alone, which the kernel
    # does not check, and where=, which NumPy computes no masked element of (the kernel
    # runs unchecked)
    if dtype is None:       # (uint64 beside a signed integer makes a float64 loop)
        exponents = x2 if _integral(x2) and _integral(x1) and (
            _dtype_of(x1).kind != "u" and _dtype_of(x2).kind != "u"
            or np.result_type(_dtype_of(x1), _dtype_of(x2)).kind != "f") else None
    else:                   # (the exponents dtype='s integer loop sees, if it runs one)
        exponents = _int_loop_exponents(x1, x2, dtype, casting)
    if exponents is not None and not is_symbolic(x2) and not is_symbolic(where) \
            and _fits(x1, x2) and not _empty_result(x1, x2) and \
            np.any(np.less(exponents, 0) & where):
        raise ValueError("Integers to negative integer powers are not allowed.")
    if where is True:
        result = _power(x1, x2, out, dtype, casting)
    else:
        result = _where_out(out, _power(x1, x2, None, dtype, casting, _UNCHECKED), where,
                            casting, "power")
    return _layout(result, order, (x1, x2), out, "power")


power = _binary("power", "x1 ** x2, elementwise (integers to negative integer powers raise "
                "ValueError).", _power_general)


_UNCHECKED = (("unchecked", True),)


def _power(x1, x2, out, dtype, casting, extra=()):
    if dtype is not None:
        static = _POWER + extra + (("dtype", kernel_dtype("power", dtype, np.power,
                                                          (x1, x2), casting)),)
    else:
        static = _POWER + extra
        if casting != "same_kind":
            numpy_accepts("power", np.power, (x1, x2), casting)
    return apply("power", ew.binary, (x1, x2), static, out, casting=casting,
                 broadcast_out=True)


def sinc(x):
    """sin(pi x) / (pi x), 1 at 0 (numpy.sinc)."""
    return apply("sinc", ew.unary, (x,), (("fn", "sinc"),), None)


def _ufunc(name):
    """jd.numpy's ufunc `name` (made by _unary or _binary when this module loads)."""
    return globals()[name]


def round(a, decimals=0, out=None):  # noqa: A001
    """a rounded to `decimals` places, half to even (numpy.round)."""
    dt = a.dtype if isinstance(a, (_ndarray, np.generic)) else np.asarray(a).dtype \
        if isinstance(a, (bool, list, tuple)) and not tracing() else None
    if dt == np.bool_:
        return np.round(a, decimals, out)       # (NumPy's float16, which jitdl lacks)
    decimals = _int_arg(decimals, "decimals")
    if not -_I32 <= decimals < _I32:        # (NumPy's round takes a C int)
        raise numpy_kind(ArgumentError, OverflowError)(
            f"round(): decimals must fit in a C int (-2**31 to 2**31 - 1, as NumPy's "
            f"round takes it), got {decimals}", user_loc())
    shape = None
    if out is not None and not is_symbolic(a) and not is_symbolic(out) \
            and hasattr(out, "shape"):
        # NumPy's round takes an out= of a's size into which a broadcasts (a's shape, or
        # it with leading 1s: an (n,) array into a (1, n) out=), else its ValueError
        shape = tuple(out.shape)
        if math.prod(shape) != np.size(a):
            raise OutArgumentError(f"round(): invalid output shape: out= of shape {shape} "
                                   f"for an operand of shape {np.shape(a)}", user_loc())
        if decimals >= 0 and dt is not None and dt.kind in "iu" and np.ndim(a) and \
                np.shape(a)[0] == 1 and _no_leading_1s(np.shape(a)) == _no_leading_1s(shape):
            # (NumPy's round of integers to places >= 0 assigns a to out=, which drops
            # a's leading 1s too: a (1, n) int array into an (n,) out=)
            a = np.asarray(a) if isinstance(a, (list, tuple)) else a
            a = a.reshape(_no_leading_1s(a.shape))
    odt = getattr(out, "dtype", None) if out is not None and decimals else None
    kind = None if odt is None else dt if dt is not None or type(a) not in (int, float) \
        else np.asarray(a).dtype
    if kind is not None and (odt is not kind and kind.kind == "f" and odt != kind or
                             decimals < 0 and kind.kind in "iu") \
            and not is_symbolic(a) and shape is not None and \
            np.broadcast_shapes(shape, np.shape(a)) == shape:
        # NumPy's round into out= of another dtype (or of integers to tens, hundreds...):
        # its multiply (divide, for tens) writes out, and rint and the step back run in
        # out's dtype (round(float32 array, 2, out=float64 array) rounds in float64; out=
        # an integer array for that is its casting error). An out= a does not broadcast
        # into is the kernel's error below
        s = ew.power_of_ten(builtins.abs(decimals))     # (abs here is jd.numpy.absolute)
        there, back = (_ufunc("multiply"), _ufunc("divide"))[::1 if decimals > 0 else -1]
        there(a, s, out=out)
        _ufunc("rint")(out, out=out)
        return back(out, s, out=out)
    r = apply("round", ew.round_, (a,), (("decimals", decimals),), out, ("a",),
              broadcast_out=True)
    # (NumPy's rint, for whole floats, gives the native byte order; its arithmetic for
    # places and its copy of integers keep a '>f8' operand's)
    return r if out is not None or decimals == 0 and dt is not None and dt.kind == "f" \
        else in_byte_order(r, a)


def _no_leading_1s(shape):
    """shape without its leading 1s ((1, 1, 5) -> (5,), (1,) -> ())."""
    i = 0
    while i < len(shape) and shape[i] == 1:
        i += 1
    return tuple(shape[i:])


_CLIP_NAMES = ("a", "a_min", "a_max")


_UNSET = object()        # (clip's bounds: None is a bound that clips nothing)


_clip_table = fast_state({})     # (shape, dtype, bound types) -> the kernel's call
_BOUND = (float, int, type(None))


def clip(a, a_min=_UNSET, a_max=_UNSET, out=None, *, min=_UNSET, max=_UNSET,  # noqa: A002
         where=True, casting="same_kind", order="K", dtype=None, subok=True,
         signature=NOT_GIVEN, sig=NOT_GIVEN):
    """a limited to [a_min, a_max] (either may be None), elementwise; NaN propagates.
    NumPy 2's rules for the bounds: both positional ones or neither (then the keywords
    min= and max=, each optional), never both kinds. signature= as a ufunc's: that of
    the ufunc NumPy's clip calls (clip, or minimum, maximum or positive where bounds
    are None), one type for each bound given and the result's."""
    if signature is not NOT_GIVEN or sig is not NOT_GIVEN:
        signature = given_signature("clip", signature, sig)
        own = signature_dtype("clip", signature, dtype, (a,) + _ufunc_bounds(
            a, a_min if a_min is not _UNSET else min, a_max if a_max is not _UNSET else max))
        if own is NUMPYS:
            bounds = {k: v for k, v in (("a_min", a_min), ("a_max", a_max), ("min", min),
                                        ("max", max)) if v is not _UNSET}
            return array_module_function("clip", np.clip, (a, out), bounds)(
                a, out=out, signature=signature, **bounds,
                **_given(dtype, casting, where, order))
        dtype = own
    t_lo, t_hi, key = type(a_min), type(a_max), None
    if type(a) is _ndarray and t_lo in _BOUND and t_hi in _BOUND and a.dtype.kind == "f" \
            and out is None and dtype is None and where is True and order == "K" \
            and casting == "same_kind" and min is _UNSET and max is _UNSET \
            and (t_lo is not int or -_I64 <= a_min < _I64) \
            and (t_hi is not int or -_I64 <= a_max < _I64):
        # the common call, clip(float array, number or None, number or None): one lookup
        # (a miss goes the general way, which puts the kernel's call under this key)
        key = (a.shape, a.dtype, t_lo, t_hi)
        run = _clip_table.get(key)
        if run is not None:
            given = (a,) if a_min is None else (a, a_min)
            return run(given if a_max is None else given + (a_max,))
    if a_min is _UNSET and a_max is _UNSET:
        a_min = None if min is _UNSET else min
        a_max = None if max is _UNSET else max
    elif a_min is _UNSET or a_max is _UNSET:
        missing = "a_min" if a_min is _UNSET else "a_max"
        raise TypeError(f"clip() missing 1 required positional argument: '{missing}'")
    elif min is not _UNSET or max is not _UNSET:
        raise ValueError("clip(): the keyword arguments `min` and `max` cannot be passed "
                         "together with `a_min` and `a_max`; give the bounds one way")
    where = _options(where, order)
    if where is not True:
        return _layout(_where_out(out, clip(a, a_min, a_max, dtype=dtype, casting=casting),
                                  where, casting, "clip"), order, (a, a_min, a_max), out,
                       "clip")
    if isinstance(a, (list, tuple)) or type(a) in (bool, int, float, complex) and not (
            is_symbolic(a_min) or is_symbolic(a_max)):
        a = np.asarray(a)     # (its dtype decides the bounds, as NumPy's: a strong type)
    dt = dtype if dtype is not None else getattr(a, "dtype", None)
    if dt is not None and np.dtype(dt).kind in "iu":
        # a Python int lower bound below the integers' range (an upper one above it) clips
        # nothing: NumPy's answer, not the OverflowError of a bound on the wrong side
        info = np.iinfo(dt)
        if type(a_min) is int and a_min < info.min:
            a_min = int(info.min)
        if type(a_max) is int and a_max > info.max:
            a_max = int(info.max)
    static = (("lo", a_min is not None), ("hi", a_max is not None))
    if dtype is not None:
        static += (("dtype", kernel_dtype("clip", dtype, np.clip, (a, a_min, a_max),
                                          casting)),)
    elif casting != "same_kind" and not any(is_symbolic(v) for v in (a, a_min, a_max)):
        numpy_accepts("clip", np.clip, (a, a_min, a_max), casting)
    given = [(v, n) for v, n in zip((a, a_min, a_max), _CLIP_NAMES) if v is not None]
    result = apply("clip", ew.clip, tuple(v for v, _ in given), static, out,
                   tuple(n for _, n in given), None if key is None else _clip_table, key,
                   casting=casting, broadcast_out=True)
    return _layout(result, order, (a, a_min, a_max), out, "clip")


_WHERE_NAMES = ("condition", "x", "y")


def _ufunc_bounds(a, lo, hi):
    """The bounds of clip(a, lo, hi) that NumPy's clip passes on to the ufunc it calls
    (whose signature= has one type per operand): those not None (nor left out), a
    Python int at or past the end of an integer array's range taken for None, as
    NumPy's clip takes it."""
    dt = getattr(a, "dtype", None)
    if dt is None and not is_symbolic(a):
        dt = np.asarray(a).dtype
    info = np.iinfo(dt) if dt is not None and np.dtype(dt).kind in "iu" else None
    if info is not None and type(lo) is int and lo <= info.min:
        lo = None
    if info is not None and type(hi) is int and hi >= info.max:
        hi = None
    return tuple(b for b in (lo, hi) if b is not None and b is not _UNSET)


def where(condition, x=_UNSET, y=_UNSET, /):
    """x where condition holds, else y (all three broadcast together); where(condition)
    alone is numpy.nonzero (NumPy's own: its shape depends on the data). An x or y given
    as None is a value, as NumPy's (an object array: NumPy's function)."""
    if x is _UNSET and y is _UNSET:
        if is_symbolic(condition):
            raise ArgumentError("where(condition) (numpy.nonzero) inside a definition: its "
                                "shape depends on the data; use where(condition, x, y)",
                                user_loc())
        return np.nonzero(condition)
    if x is _UNSET or y is _UNSET:
        raise ValueError("either both or neither of x and y should be given")
    try:
        r = apply("where", ew.where, (condition, x, y), (), None, _WHERE_NAMES)
    except ScalarOverflowError:
        if is_symbolic(condition) or is_symbolic(x) or is_symbolic(y):
            raise
        # a Python int outside the dtype it meets: numpy.where wraps it (where(c, u8, -1)
        # gives 255), unlike the ufuncs, which raise
        return np.where(condition, x, y)
    return np.asarray(r) if isinstance(r, np.generic) else r       # (NumPy: a 0-d array)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether a and b are equal within atol + rtol * |b|, elementwise (numpy.isclose).
    Number tolerances are run-time operands: every value shares one kernel."""
    if not tolerance(rtol) or not tolerance(atol):
        if is_symbolic(a) or is_symbolic(b):
            raise ArgumentError("isclose(): inside a definition rtol and atol must be "
                                "numbers", user_loc())
        return np.isclose(a, b, rtol, atol, equal_nan)
    if has_huge_int((a, b, rtol, atol)):    # (NumPy compares it as a float or an object)
        return np.isclose(a, b, rtol, atol, equal_nan)
    finite_tolerances(rtol, atol)
    return apply("isclose", ew.isclose, (a, b, rtol, atol), EQUAL_NAN[bool(equal_nan)],
                 None, ISCLOSE_NAMES)


EQUAL_NAN = {False: (("equal_nan", False),), True: (("equal_nan", True),)}
ISCLOSE_NAMES = ("a", "b", "rtol", "atol")


def tolerance(v):
    """Whether isclose takes v as a tolerance operand: a number (not a bool), a 0-d
    integer or float array, or a value of a definition."""
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) \
        or isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iuf" \
        or is_symbolic(v)


def finite_tolerances(rtol, atol):
    """NumPy's RuntimeWarning for a NaN or infinite tolerance (an error or a line as
    np.seterr(invalid=) says)."""
    if is_symbolic(rtol) or is_symbolic(atol) or math.isfinite(rtol) and math.isfinite(atol):
        return
    message = f"One of rtol or atol is not valid, atol: {atol}, rtol: {rtol}"
    how = np.geterr()["invalid"]
    if how == "warn":
        warn(message, RuntimeWarning)
    elif how == "raise":
        raise FloatingPointError(message)
    elif how == "print":
        print(message)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """x with NaN and infinities replaced by finite numbers (numpy.nan_to_num); with
    copy=False a float array is changed in place and returned, as NumPy does. Number
    fills are run-time operands: every value shares one kernel."""
    if not (_fill(nan) and (posinf is None or _fill(posinf))
            and (neginf is None or _fill(neginf))):
        if is_symbolic(x):
            raise ArgumentError("nan_to_num(): inside a definition nan, posinf and neginf "
                                "must be numbers", user_loc())
        kw = dict(copy=copy, nan=nan, posinf=posinf, neginf=neginf)     # (NumPy's)
        return array_module_function("nan_to_num", np.nan_to_num, (x,), kw)(x, **kw)
    out = None
    if not copy and not is_symbolic(x):
        if not isinstance(x, np.ndarray) or x.dtype not in (np.float32, np.float64):
            # (an int or bool array is returned as it is, other floats and complex numbers
            # are NumPy's, a scalar or a list is NumPy's ValueError)
            kw = dict(copy=False, nan=nan, posinf=posinf, neginf=neginf)
            return array_module_function("nan_to_num", np.nan_to_num, (x,), kw)(x, **kw)
        out = x
    given = [v if is_symbolic(v) else float(v) for v in (nan, posinf, neginf)
             if v is not None]
    static, names = _NAN_TO_NUM[posinf is not None, neginf is not None]
    r = apply("nan_to_num", ew.nan_to_num, (x,) + tuple(given), static, out, names)
    return x if out is not None else in_byte_order(r, x)


def _fill(v):
    """Whether nan_to_num takes v as a fill operand: a number or a 0-d array (inside a
    definition, a scalar of it)."""
    if is_symbolic(v):
        return not shape_of(v)
    return isinstance(v, (int, float, np.integer, np.floating, np.bool_)) or isinstance(
        v, np.ndarray) and v.ndim == 0


_NAN_TO_NUM = {(p, n): ((("posinf", p), ("neginf", n)),
                        ("x", "nan") + ("posinf",) * p + ("neginf",) * n)
               for p in (False, True) for n in (False, True)}


def _int_arg(v, what):
    """v, an integer argument, as NumPy's round takes it (operator.index: True is 1, and a
    NumPy integer or 0-d integer array its int); jitdl's TypeError naming it otherwise."""
    try:
        return operator.index(v)
    except TypeError:
        raise ArgumentError(f"{what} must be an int, got {type(v).__name__} {v!r}",
                            user_loc()) from None


abs = absolute          # noqa: A001
true_divide = divide
mod = remainder
pow = power             # noqa: A001
asin, acos, atan, atan2 = arcsin, arccos, arctan, arctan2
asinh, acosh, atanh = arcsinh, arccosh, arctanh
radians, degrees = deg2rad, rad2deg
around = round
bitwise_not = bitwise_invert = invert
bitwise_left_shift, bitwise_right_shift = left_shift, right_shift

_ALIASES = ["abs", "true_divide", "mod", "pow", "asin", "acos", "atan", "atan2", "asinh",
            "acosh", "atanh", "radians", "degrees", "around", "bitwise_not",
            "bitwise_invert", "bitwise_left_shift", "bitwise_right_shift"]
__all__ = list(_UNARY_DOCS) + list(_BINARY_DOCS) + [
    "power", "sinc", "round", "clip", "where", "nan_to_num", "isclose"] + _ALIASES

STATUS = {n: "done" for n in __all__}
STATUS.update({
    "sqrt": "done (float16 results of bool/int8/uint8 arrays, as every float function here: "
            "NumPy's own function on arrays; float32 inside a definition, which has no "
            "float16)",
    "power": "partial: NumPy's ValueError for an integer to a negative integer power, on "
             "arrays and (at run time) inside a definition; inside a definition two of the "
             "definition's scalars alone, or a where= mask, leave it unchecked (the power is 0, "
             "also for bases 1 and -1)",
    "round": "partial: decimals must be a static int",
    "around": "partial: decimals must be a static int",
    "floor_divide": "done (floats with an infinite operand: x1 / x2, the array API "
                    "standard's result, where NumPy gives NaN or -1)",
    "reciprocal": "done (integers: NumPy's 1.0 / x converted to the type, as on x86: "
                  "1 / 0 is the int32 or int64 minimum, 0 for narrower types)",
    "hypot": "done (scaled by the larger operand; within 2 ulp of libm's hypot)",
    "cbrt": "done (pow and one Newton step; within 1 ulp)",
    "nan_to_num": "done (copy=False changes a float array in place, as NumPy)",
    "where": "done (where(condition) is NumPy's nonzero on arrays; not in definitions)",
    "sinc": "done (not a ufunc in NumPy either: no out=/dtype=)",
})
