"""jd.numpy's shape-manipulation functions, with NumPy's signatures.

Where NumPy returns a view (transpose, reshape, ravel, squeeze, expand_dims,
broadcast_to, flip, split), jd.numpy on arrays returns NumPy's own result: no copy, no
kernel, NumPy's aliasing. Inside a definition every function adds a stage of index
arithmetic that the schedule inlines into its consumer. Functions that move data
(concatenate, stack, pad, roll, take, repeat, tile, copy, astype) run a jitdl kernel.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from jitdl import dtypes
from jitdl.eager import (_foreign_dtype, apply, array_module_function, c_ordered,
                          has_huge_int, in_byte_order, laid_out, numpy_accepts, result_order)
from jitdl.errors import (ArgumentError, AxisError, ShapeError, UnsupportedDtypeError,
                          user_loc)
from jitdl.ops import manipulation as man
from jitdl.ops.core import is_symbolic, normalize_axis, operand, shape_of
from jitdl.runtime.cuda import is_device_array
from jitdl.runtime.kernel import freeze_static


_ndarray = np.ndarray


def _sym(*xs):
    for x in xs:
        if type(x) is not _ndarray and is_symbolic(x):
            return True
    return False


def _static(value):
    """An int, or a (nested) sequence of ints as tuples: static arguments are hashable."""
    if value is None:
        return None
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(_static(v) for v in value)
    return operator.index(value)


def _symbolic_dims(shape):
    """Whether a target shape holds sizes of a dynamic definition (X.shape[0]): those are
    no static argument (no int, nor a kernel's key), and go to the builder as they are,
    which takes them as dimensions (this is inside the definition's trace)."""
    return _sym(*shape) if isinstance(shape, (tuple, list)) else _sym(shape)


def _int_axis(axis):
    """An axis where NumPy requires an integer (not a bool): squeeze, repeat."""
    if isinstance(axis, (bool, np.bool_)) or isinstance(axis, tuple) and any(
            isinstance(a, (bool, np.bool_)) for a in axis):
        raise ArgumentError("an integer is required for the axis", user_loc())
    return axis


def _dtype(dtype):
    return dtype and dtypes.normalize(dtype)


def _names(n, known={}):     # noqa: B006 (kept between calls)
    names = known.get(n)
    if names is None:
        names = known.setdefault(n, tuple(f"a{k}" for k in range(n)))
    return names


def _ndim(x):
    return len(shape_of(operand(x))) if is_symbolic(x) else np.ndim(x)


# -- views on arrays ------------------------------------------------------------------------
def transpose(a, axes=None):
    """numpy.transpose: axes reversed, or permuted as `axes` says (a view on arrays)."""
    if type(a) is _ndarray:
        return a.transpose(axes)
    if not _sym(a):
        return np.transpose(a, axes)
    return apply("transpose", man.transpose, (a,), (("axes", _static(axes)),), names=("a",))


def permute_dims(a, axes=None):
    """numpy.permute_dims (the array API's): numpy.transpose, axes reversed by default."""
    return transpose(a, axes)


def swapaxes(a, axis1, axis2):
    """numpy.swapaxes (a view on arrays)."""
    if type(a) is _ndarray:
        return a.swapaxes(axis1, axis2)
    if not _sym(a):
        return np.swapaxes(a, axis1, axis2)
    return apply("swapaxes", man.swapaxes, (a,), (("axis1", operator.index(axis1)),
                                                ("axis2", operator.index(axis2))))


def moveaxis(a, source, destination):
    """numpy.moveaxis (a view on arrays)."""
    if not _sym(a):
        return np.moveaxis(a, source, destination)
    return apply("moveaxis", man.moveaxis, (a,), (("source", _static(source)),
                                                ("destination", _static(destination))))


def reshape(a, shape, order="C", *, copy=None):
    """numpy.reshape in C order, one -1 inferred (NumPy's own result on arrays)."""
    if type(a) is _ndarray and copy is None:
        return a.reshape(shape, order=order)
    if not _sym(a):
        return np.reshape(a, shape, order=order, copy=copy)
    if order != "C":
        raise ArgumentError(f"reshape(): order={order!r}: jd.numpy reshapes in C order "
                            "inside definitions", user_loc())
    if _symbolic_dims(shape):
        return man.reshape(a, shape)
    return apply("reshape", man.reshape, (a,), (("shape", _static(shape)),))


def ravel(a, order="C"):
    """numpy.ravel: the elements in C order (a view on contiguous arrays)."""
    if type(a) is _ndarray:
        return a.ravel(order)
    if not _sym(a):
        return np.ravel(a, order=order)
    return reshape(a, (-1,), order)


def squeeze(a, axis=None):
    """numpy.squeeze: drop axes of length 1 (a view on arrays)."""
    if type(a) is _ndarray:
        return a.squeeze(axis)      # (np.squeeze's own call, without its dispatch)
    if not _sym(a):
        return np.squeeze(a, axis)
    return apply("squeeze", man.squeeze, (a,), (("axis", _static(_int_axis(axis))),))


def expand_dims(a, axis):
    """numpy.expand_dims: new axes of length 1 (a view on arrays)."""
    if not _sym(a):
        return np.expand_dims(a, axis)
    return apply("expand_dims", man.expand_dims, (a,), (("axis", _static(axis)),))


def broadcast_to(array, shape, subok=False):
    """numpy.broadcast_to (a read-only view on arrays; subok=True keeps a subclass, as
    NumPy's)."""
    if not _sym(array):
        return np.broadcast_to(array, shape, subok=subok)
    if _symbolic_dims(shape):
        return man.broadcast_to(array, shape)
    return apply("broadcast_to", man.broadcast_to, (array,), (("shape", _static(shape)),))


_REVERSED = (slice(None, None, -1),)


def flip(m, axis=None):
    """numpy.flip: reverse the order along `axis`, every axis for None (a view on arrays)."""
    if axis is None and type(m) is _ndarray:
        return m[_REVERSED * m.ndim]      # (np.flip's own view, without its dispatch)
    if not _sym(m):
        return np.flip(m, axis)
    return apply("flip", man.flip, (m,), (("axis", _static(axis)),), names=("m",))


def fliplr(m):
    """numpy.fliplr: flip axis 1 (a view on arrays)."""
    if _ndim(m) < 2:
        raise ShapeError("Input must be >= 2-d.", user_loc())
    return flip(m, 1)


def flipud(m):
    """numpy.flipud: flip axis 0 (a view on arrays)."""
    if _ndim(m) < 1:
        raise ShapeError("Input must be >= 1-d.", user_loc())
    return flip(m, 0)


def _split(name, ary, indices_or_sections, axis, equal):
    if not _sym(ary):
        fn = np.split if equal else np.array_split
        return fn(ary, indices_or_sections, axis)
    ios = _static(indices_or_sections)
    return list(apply(name, man.split, (ary,), (("indices_or_sections", ios),
                                              ("axis", operator.index(axis)),
                                              ("equal", equal))))


def split(ary, indices_or_sections, axis=0):
    """numpy.split: equal sections or at indices (a list of views on arrays)."""
    return _split("split", ary, indices_or_sections, axis, True)


def array_split(ary, indices_or_sections, axis=0):
    """numpy.array_split: sections may differ by one (a list of views on arrays)."""
    return _split("array_split", ary, indices_or_sections, axis, False)


# -- kernels --------------------------------------------------------------------------------
def copy(a, order="K", subok=False):
    """numpy.copy as a kernel (a new array): order='K' as the kernel writes it (a
    Fortran-ordered operand's order, else C order), 'C' C order, 'F' Fortran order, 'A'
    Fortran order where the operand is Fortran-contiguous (a.T), else C order. subok=True
    of an ndarray subclass (a masked array, a matrix) is NumPy's copy, which keeps it."""
    if type(a) is _ndarray and type(order) is str and order == "K" and a.dtype.isnative \
            and not _broadcast(a):
        # (the usual call: the kernel's result as it is, without the checks below, which
        # cost as much again as the kernel's call for a (32, 32) array)
        if a.flags.c_contiguous or a.ndim < 2 or not a.flags.f_contiguous and c_ordered(a):
            return apply("copy", man.copy, (a,), names=("a",))
        if a.size:
            return _own_copy(a, np.empty_like(a), "copy", man.copy, (), "a")
    order = result_order(order)
    if subok and isinstance(a, np.ndarray) and type(a) is not np.ndarray:
        return np.copy(a, order=order, subok=True)
    if order == "K" and _broadcast(a):
        r = _broadcast_layout(a, lambda v: apply("copy", man.copy, (v,), names=("a",)))
    elif type(a) is _ndarray and a.size and (a.ndim > 1 or not a.dtype.isnative):
        return _own_copy(a, np.empty_like(a, order=order), "copy", man.copy, (), "a")
    else:
        r = apply("copy", man.copy, (a,), names=("a",))
    # (the kernel's entry answers a.T in Fortran order: copy(a.T, order='C') was
    # Fortran-ordered)
    return in_byte_order(laid_out(r, order, (a,), "copy"), a)


def _own_copy(a, out, name, builder, static, what):
    """out, a new array that np.empty_like made for a (NumPy's copy's dtype and layout,
    and memory of its own), with the kernel `name`'s copy of a's elements: written
    through the views of a and out in out's memory order, which is C order for out's
    (and the native byte order's view, swapped after, of an out of a '>f8' dtype). The
    kernel's C-ordered result transposed into a permuted or Fortran layout, and viewed
    in another byte order, was a view: its flags.owndata False, where NumPy's copy owns
    its data."""
    native = out if out.dtype.isnative else out.view(out.dtype.newbyteorder("="))
    if a.flags.f_contiguous and out.flags.f_contiguous:     # (a.T, a Fortran array)
        apply(name, builder, (a.T,), static, native.T, names=(what,))
    elif c_ordered(v := a.transpose(perm := tuple(sorted(
            range(out.ndim), key=out.strides.__getitem__, reverse=True)))):
        apply(name, builder, (v,), static, native.transpose(perm), names=(what,))
    else:   # (order='C' of a.T: the kernel's copy in a's order, moved into out's)
        native[...] = apply(name, builder, (a,), static, names=(what,))
    if native is not out:
        native.byteswap(inplace=True)
    return out


def _broadcast(a):
    """Whether a is a broadcast view (a non-empty ndarray of 2 or more dimensions, one
    with a zero stride), which _broadcast_layout copies."""
    return type(a) is np.ndarray and a.ndim >= 2 and 0 in a.strides and a.size > 0


def _broadcast_layout(a, run):
    """run (a kernel's copy or astype) of broadcast view a, laid out as NumPy's order='K'
    copy of it is: by a's strides, largest first and a zero one last
    (np.copy(np.broadcast_to(row, (4, 3))) is Fortran-ordered, as its astype). The kernel
    runs on a without its repeats (each zero-stride axis cut to its first element), whose
    result is broadcast into the layout: one pass over the result, where the kernel's
    C-ordered result copied into that layout took two (2000 x 2000 of a row: 2x the time)."""
    r = run(a[tuple(slice(0, 1) if s == 0 else slice(None) for s in a.strides)])
    like = np.empty_like(a, dtype=r.dtype)      # (NumPy's order='K' layout of a)
    like[...] = r
    return like


def _swapped(dtype):
    """Whether dtype names a non-native byte order ('>f4' on a little-endian machine)."""
    try:
        return not np.dtype(dtype).isnative
    except TypeError:
        return False


def astype(x, dtype, /, *, copy=True, device=None):
    """The array API's astype: x's elements converted to `dtype` (a kernel; to a dtype
    jitdl does not compile, such as uint16 or float16, NumPy's own on arrays). The
    result stays on x's device: device= may only name that one ("cpu" for NumPy's)."""
    if device is not None and not (device == "cpu" and not is_device_array(x)) and \
            device != getattr(x, "device", None):
        raise ValueError(f'astype(): device= must be x\'s device, got {device!r}')
    if isinstance(x, (list, tuple)):
        raise TypeError(f"Input should be a NumPy array or scalar. It is a {type(x)} instead.")
    if (_foreign_dtype(dtype) or _swapped(dtype)) and not _sym(x):
        raise UnsupportedDtypeError(f"astype(): dtype {dtype}")   # (NumPy's function)
    dt = dtypes.normalize(dtype)
    if not copy and not _sym(x) and isinstance(x, np.ndarray) and x.dtype == dt:
        return x
    if _broadcast(x):
        return _broadcast_layout(x, lambda v: apply("astype", man.astype, (v,),
                                                    (("dtype", dt),), names=("x",)))
    if type(x) is _ndarray and x.size and x.ndim > 1 and not x.flags.c_contiguous:
        return _own_copy(x, np.empty_like(x, dt), "astype", man.astype, (("dtype", dt),),
                         "x")
    r = apply("astype", man.astype, (x,), (("dtype", dt),), names=("x",))
    return r[()] if isinstance(x, np.generic) else r        # (a NumPy scalar stays one)


def _seq(arrays, what):
    if isinstance(arrays, np.ndarray) or is_symbolic(arrays):
        return tuple(arrays) if not is_symbolic(arrays) else (arrays,)
    if not isinstance(arrays, (list, tuple)):
        raise ArgumentError(f"{what}: expected a sequence of arrays, got "
                            f"{type(arrays).__name__}", user_loc())
    return tuple(arrays)


_LISTS = (list, tuple)
_CONCAT = {}


def concatenate(arrays, /, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """numpy.concatenate (axis=None: of the flattened arrays), in their common dtype."""
    try:
        if axis is None and out is None and dtype is None and type(arrays) in _LISTS:
            # (the arrays flattened in C order, views where they are contiguous: one
            # join of 1-d arrays, where each was read through its flat positions; two
            # 25 x 40 float64 arrays 5.1 -> 2.5 us, NumPy 1.4-2.8)
            flat = []
            for x in arrays:
                if type(x) is not np.ndarray:
                    break
                flat.append(x.reshape(-1))
            else:
                if flat:
                    arrays, axis = flat, 0
        if out is None and dtype is None and type(axis) is int and type(arrays) in _LISTS \
                and casting == "same_kind":
            static = _CONCAT.get(axis)      # (the common call: nothing built but the tuple)
            if static is None:
                static = _CONCAT.setdefault(axis, (("axis", axis), ("dtype", None)))
            xs = tuple(arrays)
            return apply("concatenate", man.concatenate, xs, static, None, _names(len(xs)))
        if out is not None and dtype is not None:
            raise ArgumentError("concatenate() only takes `out` or `dtype` as an argument, "
                                "but both were provided.", user_loc())
        if _foreign_dtype(dtype):
            raise UnsupportedDtypeError(f"concatenate(): dtype={dtype}")
        xs = _seq(arrays, "concatenate")
        if axis is not None and xs and (dtype is not None or casting != "same_kind") \
                and not _sym(*xs):
            # (NumPy reads dtype= and casting=, then checks the axis and the shapes, then
            # the casts to dtype=)
            if dtype is not None:
                np.dtype(dtype)
            if casting in _CASTINGS:
                man.check_concatenate([np.shape(x) for x in xs], operator.index(axis))
        _castable(xs, "concatenate", dtype, casting)
        if type(out) is np.ndarray and xs and not _sym(*xs) and casting in _CASTINGS:
            _concatenate_out(xs, axis, out, casting)
        return apply("concatenate", man.concatenate, xs,
                     (("axis", None if axis is None else operator.index(axis)),
                      ("dtype", _dtype(dtype))), out, _names(len(xs)), casting=casting)
    except UnsupportedDtypeError:       # (dtypes jitdl does not compile: NumPy's own)
        if _sym(*arrays) if isinstance(arrays, _LISTS) else _sym(arrays):
            raise
        return array_module_function("concatenate", np.concatenate, (arrays, out), {})(
            arrays, axis, out, dtype=dtype, casting=casting)


concatenate.numpy_fallback = np.concatenate     # (its own: no wrapper on the common call)


_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def _concatenate_out(xs, axis, out, casting):
    """NumPy's errors for a concatenate's out= (an array), after those of the arrays'
    shapes: its rank, shape (size for axis=None), then the cast of the result into it."""
    shapes = [np.shape(x) for x in xs]
    if axis is None:
        if out.ndim == 1 and out.size != sum(math.prod(s) for s in shapes):
            raise ShapeError("Output array is the wrong size", user_loc())
    else:
        ax = man.check_concatenate(shapes, operator.index(axis))
        want = shapes[0][:ax] + (sum(s[ax] for s in shapes),) + shapes[0][ax + 1:]
        if out.ndim != len(want):
            raise ShapeError("Output array has wrong dimensionality", user_loc())
        if out.shape != want:
            raise ShapeError("Output array is the wrong shape", user_loc())
    dt = np.result_type(*(x if isinstance(x, np.ndarray) else np.asarray(x) for x in xs))
    if not np.can_cast(dt, out.dtype, casting):
        raise ArgumentError(f"Cannot cast array data from {dt!r} to {out.dtype!r} according "
                            f"to the rule '{casting}'", user_loc())


def _joined(*xs, **kwargs):
    return np.concatenate(xs, None, **kwargs)


def _castable(xs, what, dtype, casting):
    """NumPy's TypeError where an array cannot be cast to dtype= by the casting rule."""
    if dtype is not None or casting != "same_kind":
        numpy_accepts(what, _joined, tuple(np.asarray(x) if isinstance(x, _LISTS) else x
                                           for x in xs), casting,
                      **({} if dtype is None else {"dtype": dtype}))


def concat(arrays, /, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """The array API's concat: numpy.concatenate (NumPy 2's np.concat is it, with its
    positional axis, out=, dtype= and casting=)."""
    return concatenate(arrays, axis, out, dtype=dtype, casting=casting)


def stack(arrays, axis=0, out=None, *, dtype=None, casting="same_kind"):
    """numpy.stack: arrays of one shape along a new axis."""
    xs = _seq(arrays, "stack")
    if type(axis) is not int or dtype is not None or casting != "same_kind":
        axis = _stack_axis(xs, axis)
    _castable(xs, "stack", dtype, casting)
    return apply("stack", man.stack, xs, (("axis", axis),
                                        ("dtype", _dtype(dtype))), out, _names(len(xs)),
                 casting=casting)


def _stack_axis(xs, axis):
    """stack's axis as an int, with NumPy's errors in its order (before those of a cast
    to dtype=): the shapes' (stack(axis=None) of unequal shapes is 'all input arrays must
    have the same shape'), then the axis's (a float's TypeError in NumPy's words)."""
    if not xs or _sym(*xs):
        return operator.index(axis)
    shapes = {np.shape(x) for x in xs}
    if len(shapes) > 1:
        raise ShapeError("all input arrays must have the same shape", user_loc())
    if isinstance(axis, (float, np.floating)):
        raise TypeError("integer argument expected, got float")
    axis = operator.index(axis)
    normalize_axis(axis, len(shapes.pop()) + 1)     # (NumPy's AxisError)
    return axis


def hstack(tup, *, dtype=None, casting="same_kind"):
    """numpy.hstack: along axis 1 (axis 0 for 1-D arrays)."""
    xs = _seq(tup, "hstack")
    _castable(xs, "hstack", dtype, casting)
    return apply("hstack", man.hstack, xs, (("dtype", _dtype(dtype)),), names=_names(len(xs)))


def vstack(tup, *, dtype=None, casting="same_kind"):
    """numpy.vstack: along axis 0, 1-D arrays as rows."""
    xs = _seq(tup, "vstack")
    _castable(xs, "vstack", dtype, casting)
    return apply("vstack", man.vstack, xs, (("dtype", _dtype(dtype)),), names=_names(len(xs)))


_PAD_MODES = {"constant": {"constant_values"}, "edge": set(), "wrap": set(),
              "reflect": {"reflect_type"}, "symmetric": {"reflect_type"}}
_NUMPY_PAD_MODES = {"linear_ramp": {"end_values"}, "maximum": {"stat_length"},
                    "mean": {"stat_length"}, "median": {"stat_length"},
                    "minimum": {"stat_length"}, "empty": set()}


def pad(array, pad_width, mode="constant", **kwargs):
    """numpy.pad: pad_width an int, a (before, after) pair, one pair per axis or a dict
    {axis: pair}; modes constant (one scalar constant_values, a run-time operand: every
    value shares one kernel), edge, reflect, symmetric and wrap compiled; on arrays, the
    other modes and options are NumPy's own."""
    common = type(pad_width) is int and type(array) is _ndarray and pad_width >= 0 and (
        not kwargs or len(kwargs) == 1 and type(kwargs.get("constant_values")) in _NUMBERS)
    if common:              # an int width, a mode's defaults or one number: cached
        key = (array.ndim, pad_width, mode, array.dtype, bool(kwargs))
        static = _PAD_STATIC.get(key)
        if static is not None:
            if mode != "constant":
                return in_byte_order(apply("pad", man.pad, (array,), static, names=_ARRAY),
                                     array)
            value = _pad_value(kwargs.get("constant_values", 0), array.dtype)
            return in_byte_order(apply("pad", man.pad, (array, value), static,
                                       names=_ARRAY_VALUE), array)
    known = _PAD_MODES.get(mode) if isinstance(mode, str) else None
    allowed = known if known is not None else _NUMPY_PAD_MODES.get(mode)
    if allowed is not None and set(kwargs) - allowed:
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': "
                         f"{set(kwargs) - allowed}")
    value = kwargs.get("constant_values", 0)
    if known is None or kwargs.get("reflect_type", "even") != "even" or not (
            isinstance(value, (bool, int, float, np.generic))
            or _sym(value) and not shape_of(value)):
        if _sym(array):
            raise ArgumentError(f"pad(): inside a definition jitdl pads with modes "
                                f"{', '.join(_PAD_MODES)}, one scalar constant_values and "
                                f"reflect_type='even'; got mode={mode!r} {kwargs}",
                                user_loc())
        return np.pad(array, pad_width, mode, **kwargs)     # NumPy's own
    ndim = _ndim(array)
    if isinstance(pad_width, dict):         # {axis: width or (before, after)}
        pairs = [(0, 0)] * ndim
        for ax, w in pad_width.items():
            pairs[normalize_axis(ax, ndim)] = tuple(np.broadcast_to(w, 2))
        pad_width = pairs
    widths = np.asarray(pad_width)
    if widths.dtype.kind not in "iu":
        raise ArgumentError("`pad_width` must be of integral type.", user_loc())
    if widths.size and widths.min() < 0:    # (NumPy checks the widths as given: a 0-d
        # array's broadcast to (0, 2) leaves none to check)
        raise ShapeError("index can't contain negative values", user_loc())
    widths = tuple(tuple(map(int, p)) for p in np.broadcast_to(widths, (ndim, 2)))
    static = (("pad_width", widths), ("mode", mode))
    if common and len(_PAD_STATIC) < 1024:
        static = _PAD_STATIC.setdefault(key, static)
    if mode != "constant":
        return in_byte_order(apply("pad", man.pad, (array,), static, names=_ARRAY), array)
    if not _sym(value):
        value = _pad_value(value, np.dtype(array.dtype) if hasattr(array, "dtype") else
                           np.asarray(array).dtype)
    return in_byte_order(apply("pad", man.pad, (array, value), static, names=_ARRAY_VALUE),
                         array)


def _pad_value(value, dt):
    """constant_values as NumPy pads with it, cast into the array's dtype, as the kernel's
    operand: a Python float, which holds every value of these dtypes exactly (an int64
    beyond 2**53 goes as a np.int64) and which the kernel casts as NumPy casts a float
    (one beyond float32's range warns, as NumPy's cast does), so that every value shares
    one kernel, entered directly. Numbers the fast tests leave take NumPy's own cast
    (its wrapping and its errors), found by padding one element."""
    t = type(value)
    if dt.kind == "f" and (t is float and (dt == _F64 or not _F32_MAX < abs(value) < _INF)
                           or t is int and -_EXACT <= value <= _EXACT or t is bool):
        return float(value)
    if t is int and dt in _INT_RANGE and _INT_RANGE[dt][0] <= value <= _INT_RANGE[dt][1]:
        cast = value
    else:
        vkey = (dt, freeze_static(value))
        cast = _PAD_VALUES.get(vkey)
        if cast is None:
            cast = np.pad(np.zeros(1, dt), 1, constant_values=value)[0]
            if len(_PAD_VALUES) < 1024:
                _PAD_VALUES[vkey] = cast
    return float(cast) if dt.kind == "f" or -_EXACT <= cast <= _EXACT else cast


_PAD_STATIC = {}    # (ndim, an int pad_width, mode, dtype, keywords given) -> static arguments
_NUMBERS = (int, float, bool)
_PAD_VALUES = {}    # (dtype, a constant_values' frozen form) -> it cast into the dtype
_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_F32_MAX, _INF, _EXACT = float(np.finfo(np.float32).max), float("inf"), 2 ** 53
_INT_RANGE = {np.dtype(n): (int(np.iinfo(n).min), int(np.iinfo(n).max))
              for n in dtypes.SUPPORTED if np.dtype(n).kind in "iu"}
_ARRAY = ("array",)
_ARRAY_VALUE = ("array", "constant_values")


def roll(a, shift, axis=None):
    """numpy.roll: shifted elements wrap around (axis=None: in the flattened order)."""
    if not _sym(a) and has_huge_int(np.ravel(np.asarray(shift, object))):
        return np.roll(a, shift, axis)      # (a shift beyond int64: NumPy's, modulo the size)
    if axis is None and type(a) is _ndarray and a.ndim > 1 and a.flags.c_contiguous:
        # (NumPy's own definition; the flat view and the result's reshape are free, and
        # the kernel of one axis reads two contiguous pieces, where the flattened order
        # over n-d indices divides positions by symbolic sizes in 3 or more dimensions)
        return _roll(a.reshape(-1), shift, 0).reshape(a.shape)
    return _roll(a, shift, axis)


def _roll(a, shift, axis):
    return in_byte_order(apply("roll", man.roll, (a,), (("shift", _shift_static(shift)),
                                                        ("axis", _static(axis))),
                               names=("a",)), a)


def _shift_static(value):
    """roll's shift as _static makes it, a float truncated as NumPy's roll converts it
    (int(): roll(x, 1.5) is roll(x, 1))."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return tuple(_shift_static(v) for v in value)
    if isinstance(value, (float, np.floating)):
        return int(value)
    return operator.index(value)


def _as_1d_if_scalar(a, axis):
    """A 0-d array (or number) with axis 0 or -1 as NumPy's take and repeat treat it: an
    array of one element."""
    if axis is None or _sym(a) or np.ndim(a) != 0 or not isinstance(
            axis, (int, np.integer)) or axis not in (0, -1):
        return a
    return a.reshape(1) if hasattr(a, "reshape") else np.reshape(a, (1,))


def take(a, indices, axis=None, out=None, mode="raise"):
    """numpy.take: elements at `indices` along `axis` (None: of the flattened array);
    mode 'raise' (out-of-range indices raise IndexError), 'wrap' or 'clip'."""
    if type(indices) is list and type(a) is _ndarray:     # (take(a, [1, 5, 7]): ints are
        listed = np.asarray(indices)                      # the common call's array)
        if listed.dtype.kind in "iu":
            indices = listed
    if type(a) is _ndarray and type(indices) is _ndarray and out is None and a.ndim \
            and (axis is None or type(axis) is int) and type(mode) is str \
            and indices.dtype.kind in "iu":
        # the common call: arrays, an integer axis or None (what the rest checks first)
        static = _TAKE_STATICS.get((axis, mode))
        if static is not None:
            return in_byte_order(_take(a, indices, axis, static, None), a)
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    if isinstance(a, (bool, int, float, np.generic)) and not _sym(indices):
        a = np.asarray(a)       # (a number's one element: its indices are checked)
    a = _as_1d_if_scalar(a, axis)
    static = (("axis", None if axis is None else operator.index(axis)), ("mode", mode))
    if not isinstance(indices, np.ndarray) and not is_device_array(indices) \
            and not is_symbolic(indices):
        indices = np.asarray(indices)   # (a number: a 0-d array, whose read is checked)
        if indices.dtype.kind in "fb":  # a list of floats: truncated, as NumPy does
            indices = indices.astype(np.intp)
    elif isinstance(indices, np.ndarray) and indices.dtype.kind == "b":
        indices = indices.astype(np.intp)
    if _sym(a, indices):
        if isinstance(indices, np.ndarray):     # a literal list written in a definition
            indices = indices.item() if indices.ndim == 0 else \
                man.constant(indices, "take(): indices")
        return apply("take", man.take, (a, indices), static, out, ("a", "indices"))
    if is_device_array(a) and not is_device_array(indices):   # a GPU a: indices too
        from jitdl.runtime.cuda import backend
        indices = backend().from_host(np.asarray(indices))
    a_dtype = None if not isinstance(out, np.ndarray) else \
        a.dtype if hasattr(a, "dtype") else np.asarray(a).dtype
    if a_dtype is not None and not np.can_cast(out.dtype, a_dtype, "safe"):
        # (NumPy's rule, its own way round: out= must cast safely to a's dtype, and the
        # result then goes into it whatever the kinds)
        raise ArgumentError(f"Cannot cast array data from {out.dtype!r} to {a_dtype!r} "
                            f"according to the rule 'safe' (take(), out=)", user_loc())
    if type(a) is _ndarray and type(indices) is _ndarray and (axis is None or type(axis) is int):
        _TAKE_STATICS.setdefault((axis, mode), static)      # (mode: one of the three names)
    # (as NumPy: with mode 'raise' out= is written once every index is known to be good)
    into = np.empty_like(out) if mode == "raise" and isinstance(out, np.ndarray) else out
    r = _take(a, indices, axis, static, into)
    if into is not out:
        np.copyto(out, into)
        return out
    return r if out is not None else in_byte_order(r, a)


_TAKE_STATICS = {}      # (axis, mode) -> take's static arguments, once checked


def _take(a, indices, axis, static, into):
    try:
        r = apply("take", man.take, (a, indices), static, into, ("a", "indices"),
                  casting="unsafe")
    except (AxisError, man.TakeIndexError):
        raise
    except IndexError as e:
        raise _take_error(a, indices, axis) or e from None
    if 0 in r.shape and static[1][1] == "raise" and axis is not None \
            and 0 not in tuple(a.shape)[:axis % len(a.shape)]:
        # (an empty result reads nothing, so no kernel checked the indices; NumPy checks
        # each one wherever the axes before `axis` hold an element)
        error = _take_error(a, indices, axis)
        if error is not None:
            raise error
    return r


def _take_error(a, indices, axis):
    """NumPy's IndexError for the first index out of range (None if none is)."""
    shape = tuple(a.shape) if is_device_array(a) else np.shape(a)
    n = int(np.prod(shape)) if axis is None else shape[axis % len(shape)]
    if is_device_array(indices):
        from jitdl.runtime.cuda import backend
        indices = backend().to_host(indices)
    ind = np.asarray(indices).ravel()
    bad = ind[(ind < -n) | (ind >= n)]
    if not bad.size:
        return None
    return man.TakeIndexError(f"index {int(bad[0])} is out of bounds for axis "
                              f"{0 if axis is None else axis % len(shape)} with size {n}")


_REPEATS = {}       # (repeats, axis) -> repeat's static arguments


def repeat(a, repeats, axis=None):
    """numpy.repeat: each element `repeats` times (an int, or one count per element)."""
    if type(a) is np.ndarray and a.ndim and type(repeats) is int and repeats > 1 and (
            axis is None or type(axis) is int):
        static = _REPEATS.get((repeats, axis))  # (the common call: 2.7 -> 1.9 us, NumPy 1.6)
        if static is None:
            if len(_REPEATS) >= 256:
                _REPEATS.clear()
            static = _REPEATS[repeats, axis] = (("repeats", repeats), ("axis", axis))
        return in_byte_order(apply("repeat", man.repeat, (a,), static, names=("a",)), a)
    a = _as_1d_if_scalar(a, _int_axis(axis))
    reps = _counts(repeats)
    if isinstance(reps, tuple) and len(reps) == 1:
        reps = reps[0]
    if isinstance(reps, tuple) and not _sym(a):
        # per-element counts on an array: the source positions by NumPy, moved by take
        n = np.size(a) if axis is None else \
            np.shape(a)[normalize_axis(operator.index(axis), np.ndim(a))]
        if len(reps) != n:
            raise ShapeError(f"operands could not be broadcast together with shape ({n},) "
                             f"({len(reps)},)", user_loc())
        if any(r < 0 for r in reps):
            raise ShapeError("repeats may not contain negative values.", user_loc())
        return take(a, np.repeat(np.arange(n), reps), axis)
    r = apply("repeat", man.repeat, (a,), (("repeats", reps),
                                         ("axis", None if axis is None
                                          else operator.index(axis))), names=("a",))
    if reps == 1 and type(r) is np.ndarray and r.ndim > 1 and not r.flags.c_contiguous:
        r = np.ascontiguousarray(r)     # (a count of 1 is a copy, which kept a.T's order:
    return in_byte_order(r, a)          # NumPy's repeat is C-ordered)


def _counts(value):
    """Repeat counts as NumPy takes them: an int or a 1-D sequence, of any integer, bool or
    float type (floats truncated, as NumPy's conversion to intp does)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return operator.index(value)
    a = np.asarray(value)
    if isinstance(value, np.ndarray) and a.dtype.kind == "f":
        raise ArgumentError(f"Cannot cast array data from dtype('{a.dtype}') to "
                            f"dtype('int64') according to the rule 'safe' (repeats)",
                            user_loc())
    if a.dtype.kind in "bf":        # (numbers and lists: truncated, as NumPy converts them)
        a = a.astype(np.intp)
    if a.dtype.kind not in "iu" or a.ndim > 1:
        raise ShapeError(f"repeats must be an integer or a 1-D sequence of integers, got "
                         f"{value!r}", user_loc())
    if a.ndim == 0:
        return operator.index(a.item())
    return _static(a)


def tile(A, reps):
    """numpy.tile: A repeated `reps` times along each axis."""
    if isinstance(reps, np.ndarray) and reps.ndim == 0:
        reps = reps.item()
    if type(reps) is not int and not (type(reps) is tuple and all(type(r) is int for r in reps)):
        reps = _static(reps)
    return in_byte_order(apply("tile", man.tile, (A,), (("reps", reps),), names=("A",)), A)


def tril(m, k=0):
    """numpy.tril: m with the elements above diagonal k zeroed (the last two axes)."""
    if _fractional(k) and not _sym(m):
        return np.tril(m, k)            # (NumPy's integer arange of -k decides: its own)
    return apply("tril", man.triangle, (m,), (("k", _offset(k)),), names=("m",))


def triu(m, k=0):
    """numpy.triu: m with the elements below diagonal k zeroed (the last two axes)."""
    if _fractional(k) and not _sym(m):
        return np.triu(m, k)
    return apply("triu", man.triangle, (m,), (("k", _offset(k)), ("upper", True)),
                 names=("m",))


def _fractional(k):
    """A float diagonal offset, which NumPy accepts (an integral one is that int)."""
    return isinstance(k, (float, np.floating)) and not float(k).is_integer()


def _offset(k):
    if not isinstance(k, (float, np.floating)):
        return operator.index(k)
    if _fractional(k):
        raise TypeError(f"tril/triu inside a definition: k must be an integer, got {k!r}")
    return int(k)


def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    """numpy.diff: the n-th difference along `axis` (prepend/append joined first)."""
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n!r}")
    if prepend is not np._NoValue or append is not np._NoValue:
        if not _sym(a):
            a = np.asanyarray(a)
        ax = axis % _ndim(a) if _ndim(a) else axis
        parts = [a]
        for v, at in ((prepend, 0), (append, 1)):
            if v is not np._NoValue:
                if not _sym(v) and np.ndim(v) == 0:     # a number: one slice of it
                    shape = list(np.shape(a) if not _sym(a) else a.shape)
                    shape[ax] = 1
                    v = man.broadcast_to(v, tuple(shape)) if _sym(a) else \
                        np.broadcast_to(v, shape)
                parts.insert(at * len(parts), v)
        a = concatenate(parts, axis=ax)
    if n == 0:
        return a
    if not _sym(a) and np.ndim(a) and n >= np.shape(a)[operator.index(axis) % np.ndim(a)]:
        return np.diff(a, n, axis)      # (nothing left: NumPy's empty result)
    return apply("diff", man.diff, (a,), (("n", n), ("axis", operator.index(axis))),
                 names=("a",))


def matrix_transpose(x, /):
    """numpy.matrix_transpose: the last two axes swapped (a view on arrays)."""
    if _ndim(x) < 2:
        numpys = getattr(np, "matrix_transpose", None)      # (NumPy 2: its own words)
        if numpys is not None:
            numpys(np.empty((0,) * _ndim(x)))                # (raises ValueError)
        raise ValueError("matrix transpose with ndim < 2 is undefined")
    return swapaxes(x, -1, -2)


STATUS = {
    "transpose": "done (view on arrays)",
    "permute_dims": "done (view on arrays)",
    "swapaxes": "done (view on arrays)",
    "moveaxis": "done (view on arrays)",
    "reshape": "partial: order='C' only inside definitions (view on arrays where NumPy "
               "gives one); symbolic (dynamic) sizes only where the target keeps them as "
               "factors (such as (-1,))",
    "ravel": "partial: order='C' only inside definitions (view on contiguous arrays)",
    "squeeze": "done (view on arrays)",
    "expand_dims": "done (view on arrays)",
    "broadcast_to": "done (read-only view on arrays)",
    "flip": "done (view on arrays)",
    "fliplr": "done (view on arrays)",
    "flipud": "done (view on arrays)",
    "split": "done (list of views on arrays; in dynamic definitions an unequal split of a "
             "symbolic axis is an IndexError at the call)",
    "array_split": "done (list of views on arrays)",
    "copy": "partial: order='K' of a broadcast view (a zero stride) gives C order, where "
            "NumPy keeps the order of its strides; other views are laid out as NumPy's",
    "astype": "done (float to integer: NaN gives 0 and a value outside the integer type "
              "saturates to its limits, on every machine and inside definitions; NumPy's "
              "result there is the platform's: on x86 int8(300.7) is 44, uint8(-2.9) is "
              "254, and NaN, inf or a value outside int32 gives INT_MIN's low bits)",
    "concatenate": "done",
    "concat": "done",
    "stack": "done",
    "hstack": "done",
    "vstack": "done",
    "pad": "done: modes constant (one scalar constant_values), edge, reflect, symmetric "
           "and wrap compiled; the other modes, per-axis constant_values and "
           "reflect_type='odd' are NumPy's own on arrays (not inside definitions)",
    "roll": "done",
    "take": "done: modes raise, wrap, clip; NumPy's IndexError text on arrays (inside "
            "definitions the kernel's own bounds message)",
    "repeat": "done: per-element counts on arrays through take, inside definitions as a "
              "count of boundaries (one comparison per element; not on a symbolic axis)",
    "tile": "done",
    "tril": "done", "triu": "done",
    "diff": "done (prepend/append joined by concatenate first)",
    "matrix_transpose": "done (view on arrays)",
}

__all__ = list(STATUS)
# views on arrays, NumPy's own for every dtype: no dtype fallback needs to wrap them (a
# call layer less: a small call was 1.8x NumPy's time)
squeeze.numpy_fallback, flip.numpy_fallback = np.squeeze, np.flip
