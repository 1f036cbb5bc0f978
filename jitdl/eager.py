"""Op-library builders called on arrays: each (op, static arguments, operand signature) gets
one compiled kernel, made by a jitdl Function around the builder and kept in one dict.

The per-call path is one dict lookup on (op, static arguments, shape and dtype of each
array, type of each scalar) and the kernel's run; a miss normalises the operands as NumPy
does (lists become arrays, Python numbers stay weak scalars) and compiles, or finds the
kernel on disk. On tensors of a definition being traced, the builder runs directly and
its stages join that definition.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import threading

import numpy as np

from jitdl import dtypes
from jitdl.api import Function, numpys_own
from jitdl.capture.runtime import ask_fortran
from jitdl.capture.trace import Captured
from jitdl.errors import (OUTPUT_CASTING, ArgumentError, OutArgumentError,
                          ScalarOverflowError, UnsupportedDtypeError, numpy_kind, user_loc)
from jitdl.ops.core import every_dim, is_symbolic, nonzero_sizes, ufunc_shape_text
from jitdl.runtime import cuda as cuda_runtime
from jitdl.runtime.cuda import is_device_array
from jitdl.te.tensor import Tensor
from jitdl.ir import build, weak
from jitdl.ir.nodes import Expr
from jitdl.runtime.kernel import (FAST_FALLBACK, FAST_RESULTS, allocator, check_int_values,
                                  direct_builtin, freeze_static, other_key)

_ndarray = np.ndarray
_SCALARS = (bool, int, float)
_kernels = {}        # (op, static, operand key...) -> kernel (or _ScalarOut around one)
_runs = {}           # the same keys -> the call without out= (see _bound)
_directs = {}        # the same keys -> the kernel's direct entry for such calls, or None
_outs = {}           # the same keys -> (kernel, result shape, sizes) for out= calls
_direct = {}         # (op, static, operand count) -> its last kernel's direct entry
_MISS = FAST_RESULTS[FAST_FALLBACK]     # a direct entry's answer to a call it does not serve
_functions = {}      # (op, static, parameter names) -> Function
_KEPT = 4096         # call keys remembered before the table is cleared (shapes vary)


class _ScalarOut:
    """A kernel whose output is 0-d: NumPy returns a scalar there (np.sum(a) is a
    np.float64), and so does jd.numpy."""

    __slots__ = ("kernel",)

    def __init__(self, kernel):
        self.kernel = kernel

    def run(self, args, out=None):
        r = self.kernel.run(args, out)
        return r if out is not None else r[()]


def apply(name, builder, operands, static=(), out=None, names=None, table=None, tkey=None,
          slot=None, *, casting="same_kind", broadcast_out=False):
    """Op `name`: builder(*operands, **dict(static)) on tensors of a definition; on arrays
    (and numbers, lists) its compiled kernel's result. `static` is a tuple of (name, value)
    pairs of plain, hashable values; `names` names the operands in messages. A wrapper
    with a fast path of its own passes its `table` and the call's key there (`tkey`, made
    from arrays only): the kernel's run goes into it, for the wrapper to call directly;
    and a one-item list `slot`, which gets the kernel's direct entry for calls like this
    one (runtime.kernel.direct_builtin; None where there is none) whenever the kernel
    serves a call through the table."""
    if _finding is not None and _finding == threading.get_ident():
        return _slow(name, builder, operands, static, out, names, casting=casting,
                     broadcast_out=broadcast_out)       # (op_call's: no table, no slot)
    op = (name, _static_key(static))
    # (the op's direct slot is per operand count: an entry takes one argument more as
    # out=, so one made for fewer operands must not see a call with more)
    slot_key = op + (len(operands),)
    if table is None:
        d = _direct.get(slot_key)
        if d is not None:
            if out is None:
                r = d(*operands)
                if r is not _MISS or (r := _copied_for(d, builder, operands)) is not _MISS:
                    return r
            elif type(out) is _ndarray:
                r = d(*operands, out)
                if r is not _MISS:
                    return r
    key = op + tuple(
        [(a.shape, a.dtype) if type(a) is _ndarray else other_key(a) for a in operands])
    if type(out) is _ndarray:
        hit = _outs.get(key)
        if hit is not None and _into(hit, operands, out):
            if table is None:
                _direct[slot_key] = _directs.get(key)
            return out
    try:
        if out is None and table is None:
            run = _runs.get(key)
            if run is not None:
                _direct[slot_key] = _directs.get(key)
                return _direct_first(key, run, operands)
        k = _kernels.get(key)
        if k is not None and (out is None or _exact_out(k, out, operands)):
            if table is not None:
                _remember(table, tkey, k, operands, slot, _directs.get(key))
            if out is None:
                return _direct_first(key, k.run, operands)
            if getattr(k, "fast", None) and k.single:
                sizes = k.dims(operands)[0] if k.dims is not None else ()
                _outs[key] = (k, out.shape, tuple(sizes))
            return k.run(operands, out)
    except ScalarOverflowError:
        if not has_huge_int(operands):
            raise
    return _slow(name, builder, operands, static, out, names, table, tkey, slot, casting,
                 broadcast_out)


# operands below this many bytes that are strided views are copied for a kernel's direct
# entry (which serves C-contiguous arrays), as its general path would copy them
SMALL_COPY = 1 << 16


def _copied_for(d, builder, operands):
    """Direct entry d's result for the operands with each small strided array (a[:, :25])
    C-contiguous, after d refused them as they are; _MISS where none is, or where a
    layout-free op (whose result takes its operands' memory order, as NumPy's does) has
    one whose strides do not run in C order (see small_copies). The general path would
    copy them too, behind 3-5 us of checks: matmul of a (25, 25) view and a (25, 40)
    array 6.6 -> 1.6 us (NumPy 2.0-4.5) on the 2-core Xeon."""
    copies = small_copies(operands, getattr(builder, "layout", None) is None)
    return _MISS if copies is None else d(*copies)


def small_copies(operands, any_order=False):
    """The operands with each strided array C-contiguous, where each is small (below
    SMALL_COPY bytes) and, unless `any_order`, has strides in C order (a[::2], m[:, :20],
    m[::-1]: NumPy's result for them is C-ordered too; not a.T, whose memory order a
    layout-free op keeps); None where none is strided or one is not such. A kernel's direct
    entry serves C-contiguous arrays only, and its general path copies them anyway,
    behind a few microseconds of checks (exp of a[::2], 500 float64: 8.0 -> 2.4 us, NumPy
    2.5)."""
    copies = None
    for i, a in enumerate(operands):
        if type(a) is _ndarray and not a.flags.c_contiguous:
            if not copyable(a, any_order):
                return None
            copies = copies or list(operands)
            copies[i] = np.ascontiguousarray(a)
    return copies


def copyable(a, any_order=False):
    """Whether small_copies copies strided array a: below SMALL_COPY bytes and, unless
    `any_order`, with strides in C order."""
    return a.nbytes < SMALL_COPY and (any_order or a.ndim == 1 or c_ordered(a))


def c_ordered(a):
    """Whether the strides of a's dimensions longer than 1 shrink (in size) from the first
    to the last, as in C order (a zero stride before another: a broadcast row, not)."""
    last = None
    for n, s in zip(a.shape, a.strides):
        if n > 1:
            s = -s if s < 0 else s
            if last is not None and s > last:
                return False
            last = s
    return True


def _direct_first(key, run, operands):
    """The call of the kernel of `key` through its direct entry, the one later calls
    take, else run(operands): both answer alike but in layout, where the entry makes the
    result of Fortran-ordered operands of an elementwise kernel Fortran-ordered."""
    d = _directs.get(key)
    if d is not None:
        r = d(*operands)
        if r is not _MISS:
            return r
    return run(operands)


_I64 = 2 ** 63
_COMPARISONS = frozenset(("greater", "greater_equal", "less", "less_equal", "equal",
                          "not_equal"))


def has_huge_int(operands):
    return any(type(a) is int and not -_I64 <= a < _I64 for a in operands)


def _huge_ints(name, operands, names, dtype=None):
    """Operands with each Python int beyond int64 made what NumPy 2 makes of it (NEP 50:
    a weak scalar takes the dtype of the loop): a float where the loop is a float one
    (np.add(float32 array, 2**70) is float32; OverflowError past float64's range, as
    NumPy), and for a comparison with integers a float beyond every int64 (NumPy's
    result: the int's sign decides; two Python ints compare exactly). Where the loop is
    an integer one the int stays, and the kernel raises NumPy's OverflowError. dtype: the
    call's dtype=, which picks the loop (np.hypot(int16 array, 2**200, dtype=np.float64)
    is float64's loop, not float32's)."""
    if name in _COMPARISONS and len(operands) == 2 and \
            type(operands[0]) is int and type(operands[1]) is int:
        # (two Python ints: NumPy compares them exactly, as Python does; their order is
        # that of their comparison's sign with 0, which fits every integer loop)
        a, b = operands
        return ((a > b) - (a < b), 0)

    def kind(a):
        if type(a) is bool or type(a) is int or type(a) is float:
            return type(a)
        return getattr(a, "dtype", None)
    ufunc = getattr(np, name, None)
    others = [kind(a) for a, n in zip(operands, names) if n not in ("condition", "where")]
    if isinstance(ufunc, np.ufunc) and ufunc.nin == len(operands) and None not in others:
        try:
            given = {} if dtype is None else {
                "signature": (None,) * ufunc.nin + (dtype,) * ufunc.nout}
            loop = ufunc.resolve_dtypes(tuple(kind(a) for a in operands) + (None,) * ufunc.nout,
                                        **given)
        except Exception:       # (no loop: the kernel's own error follows)
            loop = None
    else:
        loop = None
    floating = any(k is float or isinstance(k, np.dtype) and k.kind == "f" for k in others)
    integral = any(isinstance(k, np.dtype) and k.kind in "iu" for k in others)
    out = []
    for i, a in enumerate(operands):
        if type(a) is int and not -_I64 <= a < _I64:
            if name in _COMPARISONS and integral and not floating:
                a = 2.0 ** 64 if a > 0 else -2.0 ** 64   # (beyond every int64: exact)
            elif loop[i].kind == "f" if loop is not None else floating:
                a = float(a)            # (OverflowError past float64, as NumPy raises)
                # (not float16, which jitdl does not compute in: NumPy's loop for int8
                # operands, which dtype= makes another)
                if loop is not None and loop[i] not in (np.float64, np.float16):
                    # the loop's own float (np.arctan2(int16 array, 2**63) is float32; a
                    # Python float would make it float64); inf past float32, as NumPy
                    with np.errstate(over="ignore"):
                        a = loop[i].type(a)
        out.append(a)
    return tuple(out)


def _static_key(static):
    """The static arguments' part of a key. Python's == says 0.0 == -0.0 and 1 == 1.0 ==
    True and NaN != NaN: floats and containers are keyed by a canonical form (types kept,
    a zero or NaN float by its bits) so a call never finds the kernel of another value."""
    floats = False
    for _, v in static:
        t = type(v)
        if t is float:
            floats = True
        elif t not in _PLAIN and not (t is tuple and _plain_tuple(v)):
            break
    else:
        if not floats:
            return static
        # (plain values and floats, as eps=1e-5 in a tuple a wrapper builds per call:
        # keyed inline, not remembered, 1.7 -> 0.6 us)
        return tuple([(n, v) if type(v) is not float else _part(n, v) for n, v in static])
    seen = _frozen.get(id(static))
    if seen is not None and seen[0] is static:
        return seen[1]      # (a wrapper's precomputed tuple, frozen once)
    key = tuple([_part(n, v) for n, v in static])
    if len(_frozen) >= _KEPT:
        _frozen.clear()
    _frozen[id(static)] = (static, key)     # (kept alive: its id stays its own)
    return key


def _part(n, v):
    """The key of static argument (n, v) (see _static_key): itself where plain."""
    t = type(v)
    if t in _PLAIN or t is tuple and _plain_tuple(v):
        return n, v
    if t is float:
        return n, float, v if v and v == v else v.hex()
    return n, freeze_static(v)


_frozen = {}


def _plain_tuple(v):
    """A tuple of ints, strings and None only (nested or not): its own key, as equal only
    to the same values (a float or a bool in it is not: 1 == 1.0 == True)."""
    for x in v:
        t = type(x)
        if t is tuple:
            if not _plain_tuple(x):
                return False
        elif t is not int and t is not str and x is not None:
            return False
    return True


_PLAIN = frozenset((int, bool, str, type(None)))


def _remember(table, key, k, operands, slot=None, direct=None):
    """Put into a wrapper's table the call of kernel k for operands of exactly this key:
    sizes and output shape are fixed for it (they were checked on this call), so a later
    call only allocates the output and enters the kernel. With a `slot` (see apply), the
    call also puts the kernel's direct entry (`direct`) there."""
    if len(table) >= _KEPT:
        table.clear()
    run = _call(k, operands)
    if type(k) is _ScalarOut and direct is not None:
        # (a 0-d result, a NumPy scalar: the direct entry makes one, the general run is
        # for the calls it refuses; add of a 0-d array and a float 6.3 -> 0.5 us)
        def run(args, general=run):
            r = direct(*args)
            return general(args) if r is _MISS else r
    if slot is not None:
        slot[0] = direct

        def run(args, run=run):
            slot[0] = direct
            return run(args)
    table[key] = run


def _call(k, operands):
    """The call without out= of kernel (or _ScalarOut) k for operands of this shape."""
    if type(k) is not _ScalarOut and k.fast and k.single and not k.int_checks:
        return _bound(k, operands)
    return k.run


def merged_run(name, static, merged, shape):
    """A wrapper's call for operands whose dimensions merge (numpy._ufuncs._merge): the
    kernel that served the merged views `merged`, entered with the call's own arrays (its
    entries read data pointers only: C-contiguous arrays of the same sizes lie the same
    in memory; strided ones are copied) and an output of `shape`. None where that kernel
    has no fast entry."""
    key = (name, _static_key(static)) + tuple(
        [(a.shape, a.dtype) if type(a) is _ndarray else other_key(a) for a in merged])
    k = _kernels.get(key)
    if k is None or type(k) is _ScalarOut or not (k.fast and k.single):
        return None
    run = _bound(k, merged, shape)
    if not k.int_checks:
        return run
    check = k._check_ints       # (a Python int must fit the dtype it meets: NumPy's error)

    def checked(args):
        check(args)
        return run(args)
    return checked


def _bound(k, operands, shape=None):
    """Kernel k's call for operands like these: the output allocated, the fast entry
    entered (strided inputs and errors: the general path). `shape`: the output's, where
    it is not the kernel's own (merged dimensions, see merged_run)."""
    fast, slow = k.fastcall, k._call     # (slow: strided inputs copied, errors read)
    (own, dtype), sizes = k.out_specs[0], ()
    if k.dims is not None:
        sizes, shapes = k.dims(operands)
        own = shapes[0]
    shape = own if shape is None else shape
    sizes = tuple(sizes)
    specs = [(shape, dtype)]
    empty = allocator(shape, dtype)
    if len(sizes) == 1:
        (n,) = sizes

        def run(args):
            o = empty(shape, dtype)
            return o if fast(args, o, n) is None else slow(args, None, specs, sizes)
    else:
        def run(args):
            o = empty(shape, dtype)
            return o if fast(args, o, *sizes) is None else slow(args, None, specs, sizes)
    return run


def apply_out(name, static, operands, out, slot=None):
    """A wrapper's fast path for out= an array: the result written by a kernel that an
    earlier call like this one (same operand key) ran into such an array, else _MISS.
    A one-item list `slot` gets that kernel's direct entry (see apply)."""
    key = (name, _static_key(static)) + tuple(
        [(a.shape, a.dtype) if type(a) is _ndarray else other_key(a) for a in operands])
    hit = _outs.get(key)
    if hit is None or not _into(hit, operands, out):
        return _MISS
    if slot is not None:
        slot[0] = _directs.get(key)
    return out


def _into(hit, operands, out):
    """Kernel hit[0] ran into out through its fast entry (where the kernel takes out as
    it is: Kernel._out_ok); False: not done."""
    k, shape, sizes = hit
    if not k._out_ok(out, [operands[i] for i in k.array_pos], shape):
        return False
    if k.int_checks:
        try:
            k._check_ints(operands)
        except ScalarOverflowError:     # (the general path: NumPy's error, or huge ints)
            return False
    return k.fastcall(tuple(operands), out, *sizes) is None


def _exact_out(k, out, operands):
    """out= is an array of exactly the kernel's result (its shape for these operands)."""
    if type(out) is not _ndarray or type(k) is _ScalarOut:
        return False
    shape, dtype = k.out_specs[0]
    if k.dims is not None:          # symbolic extents: this call's shape
        shape = k.dims(operands)[1][0]
    return out.shape == shape and out.dtype == dtype


# NumPy functions besides ufuncs that take out= as a 1-tuple (sum, concatenate... do not)
_UFUNC_BACKED = frozenset(("clip", "fix", "nanmax", "nanmin"))


def _slow(name, builder, operands, static, out, names, table=None, tkey=None, slot=None,
          casting="same_kind", broadcast_out=False):
    if any(is_symbolic(a) for a in operands):
        if out is not None:
            raise ArgumentError(f"jd.numpy.{name}(): out= cannot be given inside a "
                                "definition; the result is a tensor of the definition",
                                user_loc())
        r = builder(*operands, **dict(static))
        # (of scalars alone, NumPy's function gives a NumPy scalar: strong, also where
        # it is computed from sizes, which are Python numbers in a static trace)
        return build.strong(r) if isinstance(r, Expr) and not any(
            isinstance(a, Tensor) for a in operands) else r
    if isinstance(out, tuple):
        if not (isinstance(getattr(np, name, None), np.ufunc) or name in _UFUNC_BACKED):
            raise ArgumentError(f"{name}(): out= must be an array, not a tuple (only "
                                "ufuncs such as add take a tuple)", user_loc())
        if len(out) != 1:
            raise OutArgumentError(f"{name}(): out= must be one array, got a tuple of "
                                   f"{len(out)}", user_loc())     # (NumPy: ValueError)
        out = out[0]
    if out is not None and not isinstance(out, np.ndarray) and not is_device_array(out):
        raise ArgumentError(f"{name}(): out= must be a NumPy array (or a GPU array for GPU "
                            f"operands), got {type(out).__name__}", user_loc())
    names = names or [f"x{n + 1}" for n in range(len(operands))]
    raw = operands
    operands = tuple(_normalise(name, a, n) for a, n in zip(operands, names))
    if table is not None and any(a is not r for a, r in zip(operands, raw)
                                 if type(r) is _ndarray):
        table = None        # (a byte-swapped array was copied: its key is not the kernel's)
    if has_huge_int(operands):
        dt = dict(static).get("dtype")     # (dtype=, normalized: "float64")
        dt = None if dt is None else np.dtype(dt)
        operands = _huge_ints(name, operands, names, dt if dt is not None and dt.kind == "f"
                              else None)
        table = None        # (the wrapper's key says int: not this kernel's call)
    key = (name, _static_key(static)) + tuple(
        [(a.shape, a.dtype) if type(a) is _ndarray else other_key(a) for a in operands])
    if _finding is not None and _finding == threading.get_ident():
        raise _Found(_function(name, builder, static, tuple(names)), operands)
    k = _kernels.get(key)
    if k is None and out is None and getattr(builder, "any_size", False) and any(
            (type(a) is _ndarray or is_device_array(a)) and 0 in a.shape for a in operands):
        empty = _empty_result(key, name, builder, static, names, operands)
        if empty is not None:
            return empty
    if k is None:
        # one kernel per broadcast pattern where the builder allows it; empty arrays get
        # their own (NumPy's rules for them, such as max of nothing, are decided by shape)
        # (a size 0 where the builder never broadcasts, a concatenate's empty piece among
        # others, is served by the kernel for every size there: Function solid=)
        alone = _alone(builder, operands)
        solid = every_dim if alone else _solid(builder, static, names)
        dynamic = getattr(builder, "any_size", False) and all(
            0 not in a.shape if solid is None else
            all(n or d in solid(len(a.shape)) for d, n in enumerate(a.shape))
            for a in operands if type(a) is _ndarray or is_device_array(a))
        if dynamic and _tuned_shape(name, builder, static, tuple(names), operands):
            dynamic = False     # (a kernel tuned for these shapes: op.tune)
        f = _function(name, builder, static, tuple(names), dynamic, alone=alone and dynamic)
        if dynamic:     # NumPy's errors for these shapes (broadcasting, concatenation...)
            fixed = _function(name, builder, static, tuple(names))
            graph = fixed._graph(operands)[0]
            shaped = _for_shapes(fixed, graph, operands, name, builder, static, tuple(names))
            if shaped is not None:
                f, dynamic = shaped, shaped is not fixed
        kernel = f.kernel(*operands)
        if callable(getattr(np, name, None)):
            # a jd.numpy function (its wrapper answers a view far larger than its memory
            # with NumPy's function: see Kernel._contiguous)
            kernel.expanded_ok = False
        if getattr(builder, "layout", None) is not None:
            kernel.reorder = functools.partial(reorder, name, builder, static, tuple(names),
                                               {})
        k = _ScalarOut(kernel) if kernel.out_specs[0][0] == () and \
            getattr(builder, "scalar_result", False) else kernel
        if len(_kernels) >= _KEPT:
            _kernels.clear()
            _runs.clear()
            _directs.clear()
            _outs.clear()
        _kernels[key] = k
        _runs[key] = _call(k, operands)
        direct = direct_builtin(k, operands) if type(k) is not _ScalarOut else \
            direct_builtin(k.kernel, operands, scalar=True)
        if direct is not None and dynamic and _tuned_ops.get(f"jitdl.numpy.{name}"):
            direct = _guarded(direct, len(operands), _tuned_shapes(
                _function(name, builder, static, tuple(names))))
        _directs[key] = direct
    if out is None and table is None:
        _direct[key[:2] + (len(operands),)] = _directs.get(key)
    if table is not None:
        _remember(table, tkey, k, operands, slot, _directs.get(key))
    if out is None:
        return _direct_first(key, k.run, operands)
    kernel = k.kernel if isinstance(k, _ScalarOut) else k
    shape, dtype = kernel.out_specs[0]
    if kernel.dims is not None:         # symbolic extents: this call's output shape
        shape = kernel.dims(operands)[1][0]
    out_shape = tuple(out.shape)
    if out_shape != shape and (not broadcast_out or len(out_shape) < len(shape) or any(
            s not in (1, o) for s, o in zip(shape, out_shape[len(out_shape) - len(shape):]))):
        if broadcast_out:       # (a ufunc's: NumPy's text, its shapes as it prints them)
            raise OutArgumentError(
                f"{name}(): non-broadcastable output operand with shape "
                f"{ufunc_shape_text(out_shape)} doesn't match the broadcast shape "
                f"{ufunc_shape_text(shape)} (out=)", user_loc())
        if name in ("argmax", "argmin"):      # (NumPy's words for its own check)
            raise OutArgumentError(f"{name}(): output array does not match result of "
                                   f"np.{name}. (out= of shape {out_shape}, the result's "
                                   f"{shape})", user_loc())
        raise OutArgumentError(f"{name}(): non-broadcastable output operand with shape "
                               f"{out_shape} doesn't match the result's shape {shape} "
                               f"(out=)", user_loc())
    if is_device_array(out):
        return _device_out(name, kernel, operands, out, shape, dtype, casting)
    if not out.flags.writeable:
        raise OutArgumentError(f"{name}(): output array is read-only (out=)", user_loc())
    if out.dtype == dtype and out_shape == shape:
        return kernel.run(operands, out)
    _castable(name, dtype, out.dtype, casting)
    np.copyto(out, kernel.run(operands), casting="unsafe")    # (out's shape: broadcast)
    return out


def reorder(name, builder, static, names, plans, operands):
    """The result of a layout-free op (ops.core.layout_free) whose array operands are
    views of memory in another order than C's (a.T, Fortran arrays): the op on their
    memory order's views (C-contiguous: no copy), transposed back, which is also the
    layout NumPy gives such results; None where the operands do not share one such
    order (the kernel then copies them). `plans` (one dict per kernel) keeps the plan
    per layout of the operands, with the call that served their views."""
    key = tuple([(a.shape, a.strides) if _strided_array(a) else other_key(a)
                 for a in operands])
    plan = plans.get(key)
    if plan is None:
        if len(plans) >= _KEPT:
            plans.clear()
        plan = plans[key] = _reorder_plan(builder, static, operands) or (None,)
    if plan[0] is None:
        return None
    perm, given, back, run = plan
    views = tuple([a.transpose(perm) if _strided_array(a) else a for a in operands])
    if run is None:
        result = apply(name, builder, views, given, None, names)
        run = _runs.get((name, _static_key(given)) + tuple(
            [(a.shape, a.dtype) if type(a) is _ndarray else other_key(a) for a in views]))
        if run is not None:
            plans[key] = (perm, given, back, run)
    else:
        result = run(views)
    if back is None:
        return result
    if isinstance(result, tuple):
        return tuple(r.transpose(back) for r in result)
    if builder.layout == "index":       # (NumPy's argmax / argmin results are C-ordered)
        result = result.transpose(back)
        return np.ascontiguousarray(result) if type(result) is _ndarray else \
            cuda_runtime.contiguous_copy(result, name)
    return result.transpose(back)


def _strided_array(a):
    """A NumPy array or a GPU array (CuPy's: strides and transpose as NumPy's)."""
    return type(a) is _ndarray or is_device_array(a)


def _reorder_plan(builder, static, operands):
    """(perm, static, back, None) for reorder: the operands' views transpose(perm) are
    C-contiguous, or strided with their strides in C order (a sliced a.T: the kernel
    copies them), the op runs on them with `static` (its axes renumbered), and its result
    transposed by `back` (None: as it is) is the call's; None where no such plan exists
    (a broadcast view too: NumPy's result for it is C-ordered)."""
    first = next((a for a in operands if _strided_array(a) and not a.flags.c_contiguous),
                 None)
    if first is None or first.ndim < 2:
        return None
    shape, strides = first.shape, first.strides
    # (by the strides' sizes, as NumPy's order='K' takes them: a[::-1].T lies in Fortran
    # order, its result too)
    perm = tuple(sorted(range(first.ndim), key=lambda d: -abs(strides[d])))
    if perm == tuple(range(first.ndim)):
        return None
    for a in operands:
        if _strided_array(a):
            if a.shape != shape or 0 in a.strides or not c_ordered(a.transpose(perm)):
                return None
    back = _inverse(perm)
    if builder.layout == "elementwise":
        return perm, static, back, None
    if operands[0] is not first:
        # (a reduction's other arrays are its where= mask, of a's shape and memory order
        # (checked above): NumPy's result for them is in that order too)
        return None
    given = dict(static)
    axis, keepdims, ndim = given.get("axis"), given.get("keepdims", False), first.ndim
    if axis is None:
        if builder.layout == "index":
            return None                     # (its flat index counts in C order)
        return perm, static, back if keepdims else None, None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    if any(not -ndim <= ax < ndim for ax in axes) or \
            len({ax % ndim for ax in axes}) != len(axes):
        return None                         # (the kernel's call raises NumPy's error)
    axes = {ax % ndim for ax in axes}
    moved = tuple(sorted(perm.index(ax) for ax in axes))
    given["axis"] = moved[0] if isinstance(axis, int) else moved
    given = tuple(given.items())
    if keepdims:
        return perm, given, back, None
    kept = [d for d in perm if d not in axes]
    return perm, given, _inverse(kept) if kept else None, None


def _inverse(perm):
    """np.argsort of a short sequence of distinct ints (the permutation that undoes
    transpose(perm)) without NumPy's conversion of it to an array, which cost a few
    microseconds of a small array's call."""
    return tuple(sorted(range(len(perm)), key=perm.__getitem__))


_empties = {}       # call keys with empty operands -> (shape, dtype) of an empty result, or None


def _empty_result(key, name, builder, static, names, operands):
    """A new empty array for a call whose one result has no elements (add of a (n, 0)
    array; a GPU array for GPU operands), found by tracing the definition for these
    shapes (which raises NumPy's errors for them) without compiling a kernel: one per
    empty shape cost a compile each; None where the result has elements (sum over an
    empty axis, max of nothing)."""
    spec = _empties.get(key, ())
    if spec == ():
        graph, _ = _function(name, builder, static, tuple(names))._graph(operands)
        outs = graph.outputs
        spec = None
        if len(outs) == 1 and all(isinstance(d, int) for d in outs[0].shape) \
                and 0 in outs[0].shape:
            # (with the Python-int arguments' checks a kernel makes: NumPy raises its
            # OverflowError for add(int8 array, 300) also where the array is empty)
            spec = (tuple(outs[0].shape), np.dtype(outs[0].dtype),
                    weak.checks([(t.op.body, t.op.loc) for t in graph.stages]))
        if len(_empties) >= _KEPT:
            _empties.clear()
        _empties[key] = spec
    if spec is None:
        return None
    if spec[2]:
        values = {n: a for n, a in zip(names, operands) if type(a) is int}
        check_int_values(name, [c for c in spec[2] if values.keys() >= set(weak.names(c[1]))],
                         values)
    if not any(map(is_device_array, operands)):
        return np.empty(spec[0], spec[1])
    if any(type(a) is _ndarray for a in operands):
        return None         # (host and GPU arrays mixed: the kernel's call says so)
    from jitdl.runtime import cuda
    return cuda.backend().empty(spec[0], spec[1])


def _castable(name, dtype, to, casting):
    if not np.can_cast(dtype, to, casting=casting):
        # (NumPy's text, which names the ufunc that writes out=: sqrt for std)
        raise numpy_kind(ArgumentError, OUTPUT_CASTING)(
            f"{name}(): Cannot cast ufunc '{_LAST_UFUNC.get(name, name)}' output from "
            f"dtype('{dtype}') to dtype('{to}') with casting rule '{casting}' (out=)",
            user_loc())


_LAST_UFUNC = {"std": "sqrt", "nanstd": "sqrt", "ptp": "subtract", "outer": "multiply"}


def _device_out(name, kernel, operands, out, shape, dtype, casting):
    """out= a GPU array: written by the kernel, or the result cast (or broadcast) into
    it."""
    from jitdl.runtime import cuda
    if out.dtype == dtype and tuple(out.shape) == shape:
        return kernel.run(operands, out)
    _castable(name, dtype, np.dtype(out.dtype), casting)
    dev = cuda.backend()
    dev.copyto(dev.asarray(out), kernel.run(operands))
    return out


def _normalise(name, a, what):
    """An operand as a kernel takes it: an array of a supported dtype or a Python/NumPy
    scalar; lists and other array-likes through np.asarray, as NumPy does."""
    if type(a) in _SCALARS or isinstance(a, np.generic) and a.dtype.name in dtypes.SUPPORTED:
        return a
    if isinstance(a, np.ndarray) and type(a) is not np.ndarray:
        if numpys_own(a):
            # (a masked array's kernel would read its masked elements too, and a matrix's
            # reductions stay 2-d: NumPy's function answers them, as for a foreign dtype)
            raise UnsupportedDtypeError(
                f"{name}(): argument '{what}' is a {type(a).__module__}."
                f"{type(a).__qualname__}, which jitdl does not compile (NumPy's functions "
                f"give it its own semantics); pass np.asarray(...) of it", user_loc())
        a = np.asarray(a)           # a subclass (np.memmap; jd.nn's): its data as an ndarray
    if is_device_array(a):          # a GPU array: the kernel runs on the GPU
        from jitdl.runtime.cuda import dtype_of, interface_only
        error = interface_only(name, what, a)
        if error is not None:
            raise error
        if dtype_of(a).name not in dtypes.SUPPORTED:
            raise UnsupportedDtypeError(
                f"{name}(): argument '{what}' has dtype {a.dtype}, which jitdl does not "
                f"support; supported: {', '.join(dtypes.SUPPORTED)}", user_loc())
        return a
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except Exception as e:      # (of NumPy's class too: a ragged list's ValueError)
            raise numpy_kind(ArgumentError, type(e) if isinstance(e, ValueError) else
                             ArgumentError)(f"{name}(): argument '{what}': cannot make an "
                                            f"array of {type(a).__name__} ({e})",
                                            user_loc()) from None
    if a.dtype.name not in dtypes.SUPPORTED:
        raise UnsupportedDtypeError(
            f"{name}(): argument '{what}' has dtype {a.dtype}, which jitdl does not "
            f"support; supported: {', '.join(dtypes.SUPPORTED)}", user_loc())
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a


def numpy_fallback(fn, np_fn):
    """fn, calling NumPy's function np_fn with the caller's own arguments where an array
    operand has a dtype jitdl does not compile (a drop-in jd.numpy serves every dtype
    NumPy does; only the eight of jitdl.dtypes.SUPPORTED run as jitdl kernels). Inside a
    definition (tensor operands) the error stands."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        if kwargs and "dtype" in kwargs and _foreign_dtype(kwargs["dtype"]) \
                and not _symbolic_args(args, kwargs):
            # (dtype=np.float16, dtype=np.uint64, ...)
            return array_module_function(name, np_fn, args, kwargs)(*args, **kwargs)
        if (wraps_results(args) or kwargs and wraps_results(kwargs.values())) and \
                not _symbolic_args(args, kwargs):
            return np_fn(*args, **kwargs)
        try:
            return fn(*args, **kwargs)
        except UnsupportedDtypeError:
            if _symbolic_args(args, kwargs):
                raise
            return array_module_function(name, np_fn, args, kwargs)(*args, **kwargs)
        except ScalarOverflowError:
            # a Python int beyond int64 as a function's array argument is NumPy's uint64
            # or object array (np.sum(2**63) is a uint64, np.sinc(2**63) a float64):
            # NumPy's answer, or its own OverflowError
            if _symbolic_args(args, kwargs) or not (
                    has_huge_int(args) or has_huge_int(tuple(kwargs.values()))):
                raise
            return array_module_function(name, np_fn, args, kwargs)(*args, **kwargs)
    call.numpy_fallback = np_fn
    one_array = getattr(fn, "one_array_slot", None)
    if one_array is not None:
        return _one_array_call(fn, call, one_array)
    if not getattr(fn, "direct_operands", False):
        return call

    @functools.wraps(fn)
    def direct_call(*args, **kwargs):
        # (fn's common call is apply(name, builder, args, ()): positional arrays, nothing
        # else; the op's direct slot serves it, as it would inside apply, a call layer and
        # fn's own checks less; anything it does not serve goes the way above)
        if not kwargs:
            d = _direct.get((name, (), len(args)))
            if d is not None:
                r = d(*args)
                if r is not _MISS or (r := _copied_for(d, None, args)) is not _MISS:
                    return r                            # (linear algebra: no layout)
        return call(*args, **kwargs)
    direct_call.numpy_fallback = np_fn
    return direct_call


def wraps_results(values):
    """Whether one of the values is an ndarray subclass that NumPy's functions give their
    results the type of (through its __array_wrap__, __array_finalize__ or its own
    __array_ufunc__): NumPy's function answers it, as jd.numpy's cannot. A np.memmap's
    results are plain arrays in NumPy: jitdl computes on its data (_normalise)."""
    for v in values:
        if type(v) is not _ndarray and isinstance(v, _ndarray) and \
                not isinstance(v, np.memmap):
            return True
    return False


def _one_array_call(fn, call, slot):
    """fn (wrapped as `call`), whose commonest calls fn(a) and fn(a, axis) (or axis=,
    keepdims=, a bool: the result without it, reshaped, and out=, an array) of an array
    of rank 1 or more are apply(name, builder, (operand,), static) with the operand
    and static arguments that slot(a, axis) picks: slot(a, axis) is (apply's slot key
    (name, static key, 1), operand, the result's shape where the kernel's must be
    reshaped, else None), or None for a call it does not pick. The slot's direct entry
    serves that call, as apply would serve it first, without fn's layers of argument
    handling (1.6 -> 0.5 us of np.max's 2.4 at 100 elements on a 2-core Xeon; argmax of
    25 x 40 float64 along axis 1 3.1 -> 1.9 us, NumPy's 1.7); anything it does not serve
    goes through `call`."""
    @functools.wraps(fn)
    def one_array_call(*args, **kwargs):
        n, keep, out = len(args), False, None
        if kwargs:
            if n != 1 or len(kwargs) > 3:
                return call(*args, **kwargs)
            axis = kwargs.get("axis")
            keep = kwargs.get("keepdims", False)
            out = kwargs.get("out")
            if type(keep) is not bool or len(kwargs) != ("axis" in kwargs) + (
                    "keepdims" in kwargs) + ("out" in kwargs) or out is not None and (
                    keep or type(out) is not _ndarray):
                return call(*args, **kwargs)
        elif n == 1:
            axis = None
        elif n == 2:
            axis = args[1]
        else:
            return call(*args, **kwargs)
        a = args[0]
        if type(a) is _ndarray and a.ndim:
            picked = slot(a, axis)
            if picked is not None:
                key, operand, shape = picked
                d = _direct.get(key)
                if d is not None:
                    if out is not None:
                        # (the entry writes into out only where it is exactly the result's
                        # array, apart from the operand: else the general path's casts)
                        if shape is None and (r := d(operand, out)) is not _MISS:
                            return r
                    elif (r := d(operand)) is not _MISS:
                        if keep:    # (the kernel's is the result without keepdims)
                            return r.reshape(kept_shape(a.shape, axis))
                        return r if shape is None else r.reshape(shape)
        return call(*args, **kwargs)
    one_array_call.numpy_fallback = call.numpy_fallback
    return one_array_call


def kept_shape(shape, axis):
    """The shape of a reduction over `axis` (None, or an int or a tuple of ints valid for
    `shape`) with keepdims=True."""
    if axis is None:
        return (1,) * len(shape)
    if type(axis) is int:
        axis %= len(shape)
        return shape[:axis] + (1,) + shape[axis + 1:]
    kept = list(shape)
    for ax in axis:
        kept[ax] = 1
    return kept


def one_array_slot(name, static):
    """apply's slot key for op `name` called on one array with these static arguments
    (see _one_array_call)."""
    return (name, _static_key(static), 1)


def array_module_function(name, np_fn, args, kwargs):
    """The function that serves a call jitdl does not compile: NumPy's np_fn, or for GPU
    arrays CuPy's function of the same name (NumPy's would refuse them); NumPy's where
    CuPy has none (its error then says why)."""
    def on_gpu(a):
        return is_device_array(a) or isinstance(a, (list, tuple)) and any(
            is_device_array(x) for x in a)
    if any(on_gpu(a) for a in args) or any(on_gpu(a) for a in kwargs.values()):
        from jitdl.target.cuda import cupy_or_none
        cp = cupy_or_none()
        cp_fn = getattr(cp, name, None) if cp is not None else None
        if cp_fn is not None:
            return cp_fn
    return np_fn


_NUMPY_ONLY_PLAIN = frozenset((np.ndarray, int, float, bool, str, type(None)))


def numpy_only(name, np_fn):
    """NumPy's function np_fn as jd.numpy.`name`, which jitdl does not compile: on arrays
    NumPy's result; on tensors of a definition an error saying so."""
    @functools.wraps(np_fn)
    def call(*args, **kwargs):
        for a in args:
            if type(a) not in _NUMPY_ONLY_PLAIN:
                break
        else:       # (arrays and numbers alone: NumPy's call, without the checks' cost)
            for a in kwargs.values():
                if type(a) not in _NUMPY_ONLY_PLAIN:
                    break
            else:
                return np_fn(*args, **kwargs)
        if _symbolic_args(args, kwargs):
            raise ArgumentError(f"jd.numpy.{name}() is NumPy's own function (jitdl has no "
                                f"kernel for it), so it cannot take the tensors of a "
                                f"definition; call it on arrays outside the definition",
                                user_loc())
        return array_module_function(name, np_fn, args, kwargs)(*args, **kwargs)
    call.numpy_fallback = np_fn
    return call


def result_order(order):
    """NumPy's order= of a new array: 'C', 'F', 'A' or 'K' in either case (None is
    'K'), upper-cased; NumPy's TypeError or ValueError for anything else."""
    if order is None:
        return "K"
    if not isinstance(order, str):
        raise TypeError(f"order must be str, not {type(order).__module__}."
                        f"{type(order).__name__}".replace("builtins.", ""))
    if order not in ("C", "F", "A", "K", "c", "f", "a", "k"):
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    return order.upper()


def laid_out(r, order, operands, name):
    """r, a new array of a kernel, in the layout result_order(order) asks for: 'C' C
    order, 'F' Fortran order, 'A' Fortran order where every operand is a
    Fortran-contiguous array, else C order; 'K' as the kernel wrote it. Inside a
    definition (r a tensor) see defined_order (`name`: the function's)."""
    if type(r) is not np.ndarray or r.ndim < 2 or order == "K":
        defined_order(name, r, order)
        return r
    fortran = order == "F" or order == "A" and all(
        isinstance(o, np.ndarray) and o.flags.f_contiguous for o in operands)
    return np.asfortranarray(r) if fortran else np.ascontiguousarray(r)


def defined_order(name, r, order):
    """Function `name`'s order= for its result r inside a definition (r a tensor of it,
    of two or more dimensions): Fortran order ('F') is noted, and the trace refuses it
    where r is the definition's result, which its kernel writes in C order (an
    intermediate's order is the compiler's, as in a fused NumPy expression). A result
    with one dimension at most longer than 1 (a (1, n) matrix) is both C- and
    Fortran-contiguous, in NumPy too: its C order is NumPy's layout."""
    if isinstance(order, str) and order in "Ff" and is_symbolic(r) and \
            sum(not (isinstance(n, int) and n <= 1) for n in getattr(r, "shape", ())) >= 2:
        ask_fortran(r, name, user_loc())


def in_byte_order(r, a):
    """r, a new array a kernel made of array a's elements, in a's byte order: NumPy's
    functions that move or copy elements (roll, take, pad, tile, repeat, copy,
    nan_to_num) keep a '>f8' operand's dtype, where its arithmetic gives the native one
    (a kernel reads and writes the native order: _normalise)."""
    if type(a) is not _ndarray or a.dtype.isnative or type(r) is not _ndarray \
            or r.dtype != a.dtype.newbyteorder("="):
        return r
    return r.byteswap(inplace=True).view(a.dtype)


NUMPYS = object()      # (signature_dtype: NumPy's own function answers the call)


class _NotGiven:
    """The default of a keyword that NumPy's signature lists without one (a ufunc's
    signature=, a gufunc's axes=): told apart from None given, which NumPy refuses."""

    def __repr__(self):
        return "<not given>"


NOT_GIVEN = _NotGiven()


def given_signature(name, signature, sig):
    """A ufunc's signature= or its alias sig= (NumPy's ufuncs take either, not both), as
    signature_dtype takes it: None where neither is given. None given is NumPy's
    TypeError (a signature is a string or a tuple), as is giving both; other values are
    left to signature_dtype (NumPy's own function judges them)."""
    if sig is not NOT_GIVEN:
        if signature is not NOT_GIVEN:
            raise numpy_kind(ArgumentError, TypeError)(
                f"{name}(): cannot specify both 'sig' and 'signature'", user_loc())
        signature = sig
    if signature is NOT_GIVEN:
        return None
    if signature is None:
        raise numpy_kind(ArgumentError, TypeError)(
            f"{name}(): signature= must be a string or a tuple (as NumPy's ufuncs take "
            f"it), got None; leave it out for the default loop", user_loc())
    return signature


def signature_dtype(name, signature, dtype, operands):
    """A ufunc's (or matmul's) signature= as the dtype= it is: NumPy's signature=(None,
    ..., X), the output's type alone, is dtype=X (None where X is None). Other signatures
    (a string such as 'ff->f', input types, a wrong length) and signature= with dtype=
    are NUMPYS: NumPy's own function answers them (its loop, or its error); inside a
    definition they raise an error naming the keyword."""
    if dtype is None and type(signature) is tuple and len(signature) == len(operands) + 1 \
            and all(t is None for t in signature[:-1]):
        return signature[-1]
    if any(is_symbolic(a) for a in operands):
        raise ArgumentError(f"{name}(): inside a definition signature= may only give the "
                            f"result's type, as (None, ..., dtype) without dtype= (the same "
                            f"as dtype=), got signature={signature!r}"
                            + ("" if dtype is None else f" and dtype={dtype!r}"), user_loc())
    return NUMPYS


def kernel_dtype(name, d, np_fn=None, operands=(), casting="same_kind"):
    """dtypes.normalize(d) for a ufunc's dtype=; a NumPy dtype that jitdl does not compile
    raises UnsupportedDtypeError (so that NumPy's function answers it). With NumPy's
    function `np_fn`, the operands are checked as numpy_accepts does."""
    key = (name, np_fn, d, casting) + _signature(operands)
    try:
        known = _DTYPE_ARGS.get(key, _DTYPE_ARGS)
    except TypeError:       # (a dtype given as something unhashable)
        key, known = None, _DTYPE_ARGS
    if known is not _DTYPE_ARGS:
        return known
    if _foreign_dtype(d):
        raise UnsupportedDtypeError(
            f"{name}(): dtype={np.dtype(d).name} is not supported; supported: "
            f"{', '.join(dtypes.SUPPORTED)}", user_loc())
    if np_fn is None:
        return dtypes.normalize(d)
    numpy_accepts(name, np_fn, operands, casting, dtype=d)
    try:
        with np.errstate(all="ignore"):
            natural = np.asarray(np_fn(*_stand_ins(operands))).dtype
    except Exception:
        natural = None
    # (the function's own dtype is no cast: dtype=bool of less() is its result's dtype;
    # `natural is not None`: NumPy's None == dtype('float64') is True)
    known = None if natural is not None and natural == np.dtype(d) else dtypes.normalize(d)
    if key is not None:
        if len(_DTYPE_ARGS) >= _KEPT:
            _DTYPE_ARGS.clear()
        _DTYPE_ARGS[key] = known
    return known


_DTYPE_ARGS = {}    # (function, dtype=, casting=, operand dtypes or types) -> kernel dtype


_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


def _signature(operands):
    """What NumPy's dtype rules see of the operands: arrays' dtypes, numbers' types, the
    dtype and rank of the array a list or tuple becomes."""
    return tuple(a.dtype if hasattr(a, "dtype") else _sequence_signature(a) if isinstance(
        a, (list, tuple)) else type(a) for a in operands)


def _sequence_signature(seq):
    a = np.asarray(seq)
    return ("sequence", a.dtype, a.ndim)


def _stand_ins(operands):
    """Empty arrays of the operands' dtypes and ranks (lists and tuples: of the array
    they become; numbers as they are; a definition's scalar, a 0-d array of its dtype)."""
    out = []
    for a in operands:
        if isinstance(a, (list, tuple)):
            a = np.asarray(a)
        out.append(np.zeros((0,) * len(getattr(a, "shape", ())), a.dtype)
                   if isinstance(a, np.ndarray) or is_symbolic(a) else a)
    return out


def numpy_accepts(name, np_fn, operands, casting, **kwargs):
    """NumPy's own TypeError (as an ArgumentError) where its function refuses operands of
    these dtypes under the `casting` rule (input casts to dtype=, a loop that does not
    exist for it, such as sqrt in int64), found on empty stand-ins of the arrays (of
    their ranks; NumPy's errors for shapes are left to the call itself)."""
    if casting not in _CASTINGS:
        raise ValueError(f"casting must be one of 'no', 'equiv', 'safe', 'same_kind', "
                         f"'unsafe' (got {casting!r})")
    key = (name, np_fn, casting, tuple(kwargs.items())) + _signature(operands)
    try:
        if key in _ACCEPTED:
            return
    except TypeError:       # (a keyword given as something unhashable)
        key = None
    if np_fn is not np.fix or casting != "same_kind":
        kwargs = dict(kwargs, casting=casting)  # (np.fix is no ufunc: it takes no casting=,
    try:                                        # and its error would name that)
        with np.errstate(all="ignore"):     # (a 0-d stand-in's value is no operand's)
            np_fn(*_stand_ins(operands), **kwargs)
    except OverflowError as e:
        raise ScalarOverflowError(f"{name}(): {e}", user_loc()) from None
    except TypeError as e:
        raise numpy_kind(ArgumentError, type(e))(f"{name}(): {e}", user_loc()) from None
    except ValueError:
        pass
    if key is not None:
        if len(_ACCEPTED) >= _KEPT:
            _ACCEPTED.clear()
        _ACCEPTED.add(key)


_ACCEPTED = set()   # (function, casting=, keywords, operand dtypes) NumPy accepts


def _foreign_dtype(d):
    """Whether d names a NumPy dtype that jitdl does not compile (None: no dtype given;
    something NumPy does not know is left to the function's own error)."""
    if d is None:
        return False
    try:
        return dtypes.numpy_name(d) not in dtypes.SUPPORTED
    except TypeError:           # (not a dtype at all: the function's own error)
        return False


def _symbolic_args(args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if is_symbolic(a) or isinstance(a, (list, tuple)) and any(map(is_symbolic, a)):
            return True
    return False


def _for_shapes(fixed, graph, operands, name, builder, static, names):
    """The Function that a GPU call of an op of symbolic extents runs where its kernel
    would run far slower than one of the call's shapes (a reduction with few outputs,
    rows long enough for a block of threads: schedule.gpu.plans, `graph` traced by
    `fixed`, the op's Function of fixed shapes): the op symbolic in the sizes those
    plans do not need (the rows of a softmax, the length of a column sum: one kernel for
    all of them; _partial_specs, schedule.gpu.keeps_plans), else `fixed`. None: the
    kernel of symbolic extents serves.

    At most _FIXED_MOST such compilations per op and static arguments in a process for
    calls with a split (a dtype or a rank counts too), and apart from them
    _LENGTHS_MOST for calls whose every plan is a block per row (a softmax over rows
    whose length keeps changing, as attention's while it decodes): past them, a
    compilation per call would cost more than the kernel saves. Then rows run on the
    op's kernel for long rows of every length (CUDA.long_rows: a block per row, reading the
    row from memory for each statistic rather than once into shared memory), splits on
    the kernel of symbolic extents; a note on the jitdl.schedule logger says so, once."""
    if not any(map(is_device_array, operands)):
        return None
    from jitdl import target
    from jitdl.schedule.gpu import plans
    cuda = target.get("cuda")
    wanted = plans(graph, cuda)
    if not wanted:
        return None
    partials = (_function(name, builder, static, names, spec)
                for spec in _partial_specs(names, operands))
    f = next((p for p in partials if _keeps(p, operands, graph, cuda)), fixed)
    if f._call_key(operands) in f._kernels:
        return f                # (compiled already, for other sizes of its symbolic ones)
    rows = all(p == ("rows",) for p in wanted.values())
    budget = (fixed, rows)
    n, most = _fixed.get(budget, 0), _LENGTHS_MOST if rows else _FIXED_MOST
    if n < most:
        _fixed[budget] = n + 1
        return f
    # (rows: the op's kernel of symbolic extents whose rows, whatever their length, get
    # a block each: CUDA.long_rows)
    f = _function(name, builder, static, names, True, long_rows=True) if rows else None
    if f is not None and not _keeps(f, operands, graph,
                                    dataclasses.replace(cuda, long_rows=True)):
        f = None
    if n == most:
        _fixed[budget] = n + 1
        logging.getLogger("jitdl.schedule").info(
            "%s: compiled for %d shapes on the GPU; later shapes run its kernel %s",
            fixed.name, most, "for long rows of every length" if f is not None
            else "of symbolic extents")
    return f


def _keeps(f, operands, graph, target):
    """Whether op Function f, traced for `operands`, gets the GPU plans of `graph`
    (schedule.gpu.keeps_plans); not where its builder fails for f's symbolic sizes
    (those shapes' kernel does not: a debug note on jitdl.schedule says why)."""
    from jitdl.schedule.gpu import keeps_plans
    try:
        return keeps_plans(f._graph(operands)[0], graph, target)
    except Exception:
        logging.getLogger("jitdl.schedule").debug(
            "%s: no kernel symbolic in %s", f.name, f._dynamic_arg(), exc_info=True)
        return False


def _partial_specs(names, operands):
    """dynamic= values to try for an op whose GPU plans need some sizes (_for_shapes): its
    arrays of two or more dimensions symbolic in all but the last (the rows of a row
    reduction), with its vectors symbolic too (the targets of a loss, one per row), then
    without; then the arrays symbolic in one dimension (the length of a column sum: the
    first). Other operands keep their shapes; sizes that must agree are checked at the
    call, as in any dynamic kernel."""
    arrays = [(n, a.ndim) for n, a in zip(names, operands)
              if (type(a) is np.ndarray or is_device_array(a)) and a.ndim >= 1]
    if not any(nd >= 2 for _, nd in arrays):
        return []
    rows = tuple((n, tuple(range(nd - 1))) for n, nd in arrays if nd >= 2)
    specs = [tuple((n, tuple(range(max(nd - 1, 1)))) for n, nd in arrays), rows]
    specs += [tuple((n, (d,)) for n, nd in arrays if d < nd and nd >= 2)
              for d in range(max(nd for _, nd in arrays))]
    return list(dict.fromkeys(specs))


_FIXED_MOST = 64
_LENGTHS_MOST = 8
_fixed = {}         # (op Function of fixed shapes, rows) -> compilations _for_shapes asked for


def _function(name, builder, static, names, dynamic=False, long_rows=False, alone=False):
    """The jitdl Function that compiles op `name` with these static arguments (with
    symbolic extents when `dynamic`: True, or ((operand name, its symbolic dimensions),
    ...); `long_rows`: on a GPU, a block per row whatever the rows' length; `alone`: for
    calls with one array operand of any dimension (_alone), whose every dimension is
    solid)."""
    key = (name, _static_key(static), names, dynamic, long_rows) + (("alone",) if alone
                                                                    else ())
    f = _functions.get(key)
    if f is None:
        kwargs = dict(static)

        def op(*args):
            if not dynamic:
                return builder(*args, **kwargs)
            with nonzero_sizes():   # (empty operands never reach a dynamic kernel here)
                return builder(*args, **kwargs)
        op.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in names])
        op.__name__ = op.__qualname__ = name
        op.__module__ = "jitdl.numpy"
        # (the operands' dimensions the builder never broadcasts, where every one is
        # symbolic: see manipulation.concatenate.solid)
        solid = None if dynamic is not True else every_dim if alone else \
            _solid(builder, static, names)
        f = Function(op, name=name, dynamic=dict(dynamic) if isinstance(dynamic, tuple)
                     else dynamic, solid=solid)
        f._captured = Captured(op, op, True)    # a builder is traced as it is: no AST
        f._long_rows = long_rows
        f._by_row_length = False    # (the calls' own lengths: _for_shapes)
        _functions[key] = f
    return f


def _solid(builder, static, names):
    """builder.solid's f(rank) for these static arguments (the dimensions of the operands
    that the builder never broadcasts: see manipulation.concatenate.solid), or None. None
    too where an operand is named in builder.solid_unless (a reduction's where= mask,
    which broadcasts against its array)."""
    if not hasattr(builder, "solid") or any(
            n in getattr(builder, "solid_unless", ()) for n in names):
        return None
    return builder.solid(**dict(static))


def _alone(builder, operands):
    """Whether a call of an elementwise builder whose operands broadcast together
    (builder.solid_alone: binary ufuncs, clip, where...) has one array with dimensions,
    the others numbers or 0-d arrays (x * 2.0, clip(x, 0, 1)): that array broadcasts
    against nothing, so every dimension of it is solid (see _solid)."""
    if not getattr(builder, "solid_alone", False):
        return False
    return sum(1 for a in operands if (type(a) is _ndarray or is_device_array(a))
               and len(a.shape)) == 1


def cache_info(name=None):
    """Compilations and cache hits of the op library in this process, per op (or of op
    `name`): {"op": {"kernels": compiled or loaded, "compiled": compiled, "hits": disk hits}}."""
    out = {}
    for (op, *_), f in list(_functions.items()):      # (other threads add functions)
        if name is not None and op != name:
            continue
        info = f.cache_info()
        d = out.setdefault(op, {"kernels": 0, "compiled": 0, "hits": 0})
        d["compiled"] += info["misses"]
        d["hits"] += info["hits"]
        d["kernels"] += info["misses"] + info["hits"]
    return out.get(name, {"kernels": 0, "compiled": 0, "hits": 0}) if name else out


def fast_state(*state):
    """Register a wrapper's own tables and slots (dicts and lists), emptied by clear()."""
    _wrappers.extend(state)
    return state if len(state) > 1 else state[0]


_wrappers = []


def clear():
    """Forget the compiled kernels of this process (the disk cache keeps them)."""
    _forget_calls()
    _functions.clear()
    _tuned_ops.clear()
    _shapes.clear()
    _fixed.clear()


def _forget_calls():
    """Empty every table and slot that serves a call with a kernel (the Functions keep
    their kernels: the next call of each key finds its kernel there again)."""
    for x in _wrappers:
        if isinstance(x, dict):
            x.clear()
        else:
            x[:] = [None] * len(x)
    _kernels.clear()
    _runs.clear()
    _directs.clear()
    _outs.clear()
    _direct.clear()


# -- the kernel of a call: tuning and inspection of an op ---------------------------------
class _Found(BaseException):
    """Raised inside a call that op_call makes, where the call would compile its kernel
    (a BaseException: no wrapper's `except Exception` takes it for a failure)."""

    def __init__(self, function, operands):
        super().__init__()
        self.function, self.operands = function, operands


_finding = None         # the thread making an op_call, while it does
_finding_lock = threading.Lock()


def op_call(fn, name, args, kwargs):
    """(Function, operands) of the kernel that fn(*args, **kwargs) runs on arrays (its
    first, where it runs several): the Function that compiles it for these shapes (for an
    op with symbolic extents, its Function of fixed shapes, which tuning takes), and the
    operands as fn passes them (lists as arrays, merged dimensions' views). The call
    reaches apply's general path (the wrappers' tables and slots are emptied first) and
    stops there, before running its kernel (what the op does before, such as dropout's
    draw of its mask, it does); a call that runs no kernel (NumPy's function answers it,
    or it is a view) is an error naming `name`. Another thread calling the op meanwhile
    may refill a slot the call then takes: that error too, rarely (call again)."""
    global _finding
    with _finding_lock:
        _forget_calls()
        _finding = threading.get_ident()
        try:
            fn(*args, **kwargs)
        except _Found as found:
            return found.function, found.operands
        finally:
            _finding = None
    raise ArgumentError(f"{name}(): this call runs no jitdl kernel (NumPy's own function "
                        f"answers it, or its result is a view), so it has none to tune or "
                        f"inspect", user_loc())


def op_tuned(function):
    """After `function` (an op's, from op_call) was tuned: calls find its kernels again,
    and an op with symbolic extents runs the tuned kernel for the shapes it was tuned
    for (see _tuned_shape)."""
    _tuned_ops[function.qualname] = True
    _shapes.pop(function, None)
    _forget_calls()


def tunable(fn, name):
    """Give op function fn (named `name` in messages) a jitdl Function's tuning and
    inspection methods, each taking the op's own arguments as fn does: fn.tune(*args,
    trials=..., timeout=..., tuner=..., runner=..., seed=..., progress=..., **kwargs),
    fn.lower(*args, after=None, target=None, **kwargs), fn.schedule_of(...),
    fn.config_space(...) and fn.tuning_records(...), of the kernel that call runs (see
    op_call). A tuned kernel serves later calls of those shapes, in this process and, by
    its tuning record, in later ones."""
    def tune(*args, trials=200, timeout=None, tuner="xgb", runner=None, seed=0,
             progress=True, **kwargs):
        f, operands = op_call(fn, name, args, kwargs)
        result = f.tune(*operands, trials=trials, timeout=timeout, tuner=tuner,
                        runner=runner, seed=seed, progress=progress)
        op_tuned(f)
        return result

    def lower(*args, after=None, target=None, **kwargs):
        f, operands = op_call(fn, name, args, kwargs)
        return f.lower(*operands, after=after, target=target)

    def method(what):
        def call(*args, **kwargs):
            f, operands = op_call(fn, name, args, kwargs)
            return getattr(f, what)(*operands)
        call.__name__ = call.__qualname__ = what
        call.__doc__ = f"{what} of the kernel {name}(*args, **kwargs) runs (a jitdl " \
                       f"Function's {what}, for the operands the call passes it)."
        return call
    tune.__doc__ = f"Tune the kernel that {name}(*args, **kwargs) runs (a jitdl " \
                   f"Function's tune(), its keyword arguments apart from the op's)."
    lower.__doc__ = f"The loop IR of the kernel that {name}(*args, **kwargs) runs."
    fn.tune, fn.lower = tune, lower
    for what in ("schedule_of", "config_space", "tuning_records"):
        setattr(fn, what, method(what))
    return fn


_tuned_ops = {}     # op Function's qualname -> whether it has tuning records (None: unknown)


def _guarded(direct, n, shapes):
    """A symbolic kernel's direct entry that hands back (its fallback) the calls of the
    tuned shapes `shapes` (their arrays' (shape, dtype) tuples), which their kernels
    of fixed shapes serve: in the op's slots the entry would serve every shape, the tuned
    ones too. Only ops with tuned shapes pay for the check (about 0.3 us a call)."""
    if not shapes:
        return direct

    def guarded(*args):
        if tuple([(a.shape, a.dtype) for a in args[:n] if type(a) is _ndarray]) in shapes:
            return _MISS
        return direct(*args)
    return guarded


def _tuned_shapes(f):
    """The tuned shapes of op Function f (of fixed shapes): a frozenset of their arrays'
    (shape, dtype) tuples, from this process's tuned configs and the verified tuning
    records of this machine's target; read once per Function and process (op_tuned
    forgets them), so that each new shape of a tuned op costs a lookup, not a query and
    its digests (1.3 ms)."""
    shapes = _shapes.get(f)
    if shapes is None:
        from jitdl.api import _records
        found = {tuple(part for part in key if type(part) is tuple and len(part) == 2
                       and isinstance(part[1], np.dtype))   # (call keys: per array)
                 for key, config in f._configs.items() if config is not None}
        db = _records(create=False)
        if db is not None:
            definition, _, target = f._record_key([], f._target(None))
            for r in (db.query(definition=definition, target=target, only_ok=True)
                      if definition is not None else ()):
                if r.verified:
                    found.add(tuple((tuple(x[1]), np.dtype(x[2]))
                                    for x in json.loads(r.signature) if x[0] == "array"))
        shapes = _shapes[f] = frozenset(found)
    return shapes


_shapes = {}        # op Function -> _tuned_shapes(f)


def _tuned_shape(name, builder, static, names, operands):
    """Whether op `name` (of symbolic extents) has a tuned kernel of fixed shapes for
    these operands: by op.tune in this process, or by a tuning record of an earlier one
    (ops without records, the common case, cost a stat of the records file and one
    indexed query per process; a tuned op's other shapes a lookup each)."""
    from jitdl.api import _records
    qualname = f"jitdl.numpy.{name}"
    known = _tuned_ops.get(qualname)
    if known is None:
        db = _records(create=False)
        known = _tuned_ops[qualname] = db is not None and bool(
            db.query(function=qualname, only_ok=True, limit=1))
    return known and tuple([(a.shape, a.dtype) for a in operands if type(a) is _ndarray]) \
        in _tuned_shapes(_function(name, builder, static, names))
