"""A compiled kernel and its call path: argument checks, outputs, the foreign call.

The fast path calls the kernel's `.fast` entry as a Python builtin (METH_FASTCALL, made
with PyCFunction_NewEx): it reads data pointers and numbers from the argument objects
itself, so a call costs about what calling any builtin does (ctypes costs ~1 us, and
asking NumPy for a pointer ~0.8 us per array). The general path passes data pointers to
the pointer entry through ctypes: strided inputs, out= that needs a copy, errors to read.
"""
from __future__ import annotations

import ctypes
import linecache
import os
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from jitdl import dtypes
from jitdl.errors import (AllocationError, ArgumentError, ArgumentIndexError,
                          ArgumentShapeError, ExpandedViewError, KernelIndexError,
                          KernelValueError, OutArgumentError, ScalarOverflowError, SourceLoc,
                          user_loc, value_check_message)
from jitdl.ir import weak
from jitdl.runtime import engine, pool
from jitdl.target.cpu import FAST_ARRAY_TYPE, FAST_ERROR, FAST_FALLBACK, FAST_OK

_CTYPE = {"bool": ctypes.c_bool, "int8": ctypes.c_int8, "uint8": ctypes.c_uint8,
          "int16": ctypes.c_int16, "int32": ctypes.c_int32, "int64": ctypes.c_int64,
          "float32": ctypes.c_float, "float64": ctypes.c_double}
_empty = np.empty


def allocator(shape, dtype):
    """How to allocate an output of this shape: np.empty, or pool.empty for one large
    enough that reusing freed memory beats faulting in fresh pages."""
    n = np.dtype(dtype).itemsize
    for d in shape:
        n *= d
    return pool.empty if n >= pool.MIN_BYTES else _empty


def alloc(shape, dtype):
    """An output array (see allocator)."""
    return allocator(shape, dtype)(shape, dtype)


_ndarray = np.ndarray
_WEAK_TYPES = {"bool": bool, "int64": int, "float64": float}   # Python scalars' dtypes
_WEAK_SCALARS = frozenset(_WEAK_TYPES.values())
# NumPy scalars of the dtypes kernels take (a direct entry converts them as numbers: their
# type is checked exactly, and their value always fits the parameter, of their own dtype)
NUMPY_SCALARS = frozenset(np.dtype(n).type for n in dtypes.SUPPORTED)
ABI = 5     # calling convention of compiled kernels (see Signature.abi)


@dataclass
class Signature:
    """What a compiled kernel expects and returns: plain data, stored as JSON beside the
    object code in the disk cache and in exported files."""
    fname: str          # the user's function name (for messages)
    symbol: str         # the kernel's symbol in the object code
    inputs: list        # [name, shape, dtype] of array parameters, in signature order
    outputs: list       # [name, shape, dtype]
    scalars: list       # [name, dtype]
    checks: list        # [tensor, index text, extent] of run-time index checks
    layout: list        # per call argument: ["array" | "scalar", name] or
                        # ["static", name, value]
    allocs: list = field(default_factory=list)   # [name, dtype, shape, bytes] of heap
                                                 # allocations (which can fail)
    int_checks: list = field(default_factory=list)   # Python-int arguments that must fit
                                                     # a dtype (jitdl.ir.weak.checks)
    abi: int = ABI      # 1, 2: a `.pyobj` entry (not used: these run through the pointer
                        # entry); 3: the `.fast` entry; 4: also the `.direct` entry;
                        # 5: which checks Python ints against the dtypes they meet
    # a dynamic kernel: the last scalars are the sizes of its dynamic arguments, filled
    # from the call's shapes; an output dimension may then be a tree over them (see
    # jitdl.pipeline.size_tree); sizes that must agree are checked at each call
    sizes: list = field(default_factory=list)    # [argument position, dim] per size
    agree: list = field(default_factory=list)    # [name, position, dim] * 2
    # inputs (positions among the arrays) that out= may be exactly: the kernel is
    # elementwise in them (jitdl.lower.lower.in_place_inputs)
    alias: list = field(default_factory=list)
    # conditions on the sizes checked at each call, before the kernel runs (a symbolic
    # size a number must be, one that must not be 0): [op ("==" or ">"), size tree, number,
    # message, [[size name, position, dim], ...] it names, file, line, error kind ("shape":
    # ArgumentShapeError, "index": ArgumentIndexError)]
    required: list = field(default_factory=list)

    def to_json(self):
        return asdict(self)

    @classmethod
    def from_json(cls, d):
        return cls(d["fname"], d["symbol"], [list(x) for x in d["inputs"]],
                   [[n, tuple(s), dt] for n, s, dt in d["outputs"]],
                   [list(x) for x in d["scalars"]], [list(x) for x in d["checks"]],
                   [list(x) for x in d["layout"]],
                   [[n, dt, list(shape), int(nb)] for n, dt, shape, nb in d.get("allocs", [])],
                   [list(x) for x in d.get("int_checks", [])],
                   int(d.get("abi", 1)), [list(x) for x in d.get("sizes", [])],
                   [list(x) for x in d.get("agree", [])],
                   [int(x) for x in d.get("alias", [])],
                   [list(x) for x in d.get("required", [])])

    @property
    def has_err(self):
        """Whether the kernel's pointer entry takes the error slot."""
        return bool(self.checks or self.allocs)

    def mismatch(self, specs) -> str | None:
        """Why this kernel cannot serve calls with these argument specs (None if it can):
        a stored entry is checked against the call before its code is run."""
        kinds = [x[0] for x in self.layout]
        if kinds != [s[0] for s in specs]:
            return f"arguments {kinds}, the call has {[s[0] for s in specs]}"
        statics = [x[2] for x in self.layout if x[0] == "static"]
        given = [s[1] for s in specs if s[0] == "static"]
        if [freeze_static(v) for v in statics] != [freeze_static(v) for v in given]:
            return f"static values {statics}, the call has {given}"
        arrays = [(tuple(s[1]), s[2]) for s in specs if s[0] == "array"]
        expected = [(tuple(shape), dt) for _, shape, dt in self.inputs]
        if arrays != expected:
            return f"arrays {expected}, the call has {arrays}"
        scalars = [s[1] for s in specs if s[0] == "scalar"]
        own = [dt for _, dt in self.scalars[:len(self.scalars) - len(self.sizes)]]
        if scalars != own:
            return f"scalars {own}, the call has {scalars}"
        return None


def static_value(v):
    """A static argument as the definition sees it: lists become tuples, NumPy scalars
    Python ones."""
    if isinstance(v, (list, tuple)):
        return tuple(static_value(x) for x in v)
    if isinstance(v, np.generic):
        return v.item()
    return v


def _canonical(v):
    """A hashable stand-in for a static value that tells apart what Python's == does
    not: 1, True and 1.0; 0.0 and -0.0; and is equal to itself for NaN."""
    if isinstance(v, tuple):
        return ("tuple",) + tuple(_canonical(x) for x in v)
    if isinstance(v, float):
        return ("float", v.hex())
    return (type(v).__name__, v)


def freeze_static(v):
    """A static argument's part of a dispatch key."""
    return ("static", _canonical(static_value(v)))


def other_key(a, dynamic=False, solid=()):
    """The key part of an argument that is not exactly an ndarray: its type, and for an
    ndarray subclass (np.matrix, a masked array) or a GPU array (CuPy, or anything with
    `__cuda_array_interface__`) its shape (`dynamic`: its size pattern, see shape_key;
    `solid`: the dimensions symbolic at size 1 too) and dtype too, so a kernel of one
    shape never serves another."""
    t = type(a)
    if t in _WEAK_SCALARS:          # (the common case: a Python number)
        return t
    keyer = DEVICE_KEYS.get(t)
    if keyer is not None:
        return keyer(a, dynamic, solid) if solid else keyer(a, dynamic)
    if isinstance(a, _ndarray):
        shape = tuple(a.shape)
        return (t, shape_key(shape, dynamic, solid), a.dtype)
    if hasattr(t, "__cuda_array_interface__") and hasattr(a, "shape"):
        shape = tuple(a.shape)      # (and which GPU: a module is loaded on one device)
        return (t, shape_key(shape, dynamic, solid), a.dtype,
                getattr(getattr(a, "device", None), "id", None))
    return t


DEVICE_KEYS = {}    # a GPU array type -> f(a, dynamic[, solid]): other_key's value for it,
#                     by a shorter path (the GPU backend registers its own array type)


def call_key(args, static_pos=(), dynamic_pos=(), dims=None, solid=None):
    """The dispatch key of a call: (shape, dtype) per array, the type per scalar, the
    value per static argument; a dynamic array's shape part is its pattern (1 where a
    dimension is 1, else None; `dims`: argument position -> the dimensions that are
    symbolic, the others keep their size; `solid`: f(rank) -> the dimensions that never
    broadcast, symbolic at size 1 too, see shape_key). (Function.__call__ inlines the
    common case.) NumPy arrays mean the CPU target: another array type gives another key."""
    key = [(a.shape, a.dtype) if type(a) is _ndarray else other_key(a) for a in args]
    for i in static_pos:
        key[i] = freeze_static(args[i])
    for i in dynamic_pos:
        a = args[i]
        dynamic = dims.get(i, True) if dims else True
        whole = solid(len(a.shape)) if solid is not None and hasattr(a, "shape") else ()
        if type(a) is _ndarray:
            key[i] = (size_pattern(a.shape) if dynamic is True and not whole
                      else shape_key(a.shape, dynamic, whole), a.dtype)
        else:
            key[i] = other_key(a, dynamic, whole)
    return tuple(key)


def _key1(args):
    (a,) = args
    return ((a.shape, a.dtype) if type(a) is _ndarray else other_key(a),)


def _key2(args):
    a, b = args
    return ((a.shape, a.dtype) if type(a) is _ndarray else other_key(a),
            (b.shape, b.dtype) if type(b) is _ndarray else other_key(b))


def _key3(args):
    a, b, c = args
    return ((a.shape, a.dtype) if type(a) is _ndarray else other_key(a),
            (b.shape, b.dtype) if type(b) is _ndarray else other_key(b),
            (c.shape, c.dtype) if type(c) is _ndarray else other_key(c))


def key_function(n_args, static_pos=(), dynamic_pos=(), dims=None, solid=None):
    """call_key for calls of n_args arguments, written out for up to three arguments
    without static or dynamic ones (0.2 us less per call than the general loop)."""
    if dims or solid is not None:
        return lambda args: call_key(args, static_pos, dynamic_pos, dims, solid)
    if len(dynamic_pos) == n_args:
        get = PATTERNS.get
        return lambda args: tuple([(get(a.shape) or size_pattern(a.shape), a.dtype)
                                   if type(a) is _ndarray else other_key(a, True)
                                   for a in args])
    if static_pos or dynamic_pos:
        return lambda args: call_key(args, static_pos, dynamic_pos)
    return {1: _key1, 2: _key2, 3: _key3}.get(n_args, call_key)


def size_pattern(shape):
    """A dynamic array's shape as the kernel is specialised on it: dimensions of size 1
    stay 1 (broadcasting is part of the key), the others are symbolic (None). Kept per
    shape (`PATTERNS.get(shape)` is the per-call path: half the time of building it)."""
    p = PATTERNS.get(shape)
    if p is None:
        if len(PATTERNS) >= 4096:
            PATTERNS.clear()
        p = PATTERNS[shape] = tuple([1 if n == 1 else None for n in shape])
    return p


PATTERNS = {}       # shape -> size_pattern(shape)


def shape_key(shape, dynamic, solid=()):
    """An array's shape as a key holds it: the shape itself (`dynamic` false), its
    size_pattern (True), or with only the dimensions in the tuple `dynamic` symbolic
    (negative ones count from the end; a dimension of size 1, or one the array does not
    have, keeps its size: the call's specs name the latter). The symbolic dimensions in
    the tuple `solid` (counted from 0) are symbolic at size 1 too: dimensions that the
    definition never broadcasts (a concatenate's axis), whose kernel serves size 1 as it
    serves any other (sizes 0 excepted: the op library compiles empty arrays apart)."""
    if not dynamic:
        return tuple(shape)
    if dynamic is True and not solid:
        return size_pattern(tuple(shape))
    p = PARTIAL.get((shape, dynamic, solid))
    if p is None:
        if len(PARTIAL) >= 4096:
            PARTIAL.clear()
        n = len(shape)
        p = PARTIAL[shape, dynamic, solid] = tuple([
            None if (s != 1 or d in solid) and (dynamic is True or d in dynamic
                                                 or d - n in dynamic) else s
            for d, s in enumerate(shape)])
    return p


PARTIAL = {}        # (shape, dimensions, solid) -> shape_key(shape, dimensions, solid)


def key_of_specs(specs):
    """The dispatch key that calls with arguments of these specs will have."""
    key = []
    for s in specs:
        if s[0] == "array":
            key.append((tuple(s[1]), np.dtype(s[2])))
        elif s[0] == "static":
            key.append(freeze_static(s[1]))
        else:
            key.append(_WEAK_TYPES[s[1]] if s[2] else np.dtype(s[1]).type)
    return tuple(key)


def static_positions(layout):
    return tuple(i for i, x in enumerate(layout) if x[0] == "static")


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_char_p)]


_METH_FASTCALL = 0x0080
_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.py_object]


class _Outcome:
    """What the `.fast` entry returns when the kernel did not (or not cleanly) run: an
    object of its own, so that a count of references to it means something."""
    __slots__ = ("what",)

    def __init__(self, what):
        self.what = what

    def __repr__(self):
        return f"<fast entry: {self.what}>"


FAST_RESULTS = [None] * 3     # what the `.fast` entry returns (its `self` tuple's items)
FAST_RESULTS[FAST_OK], FAST_RESULTS[FAST_FALLBACK], FAST_RESULTS[FAST_ERROR] = (
    None, _Outcome("fell back: an argument it does not read"),
    _Outcome("the kernel reported an error"))


def fast_builtin(loaded, sig):
    """The kernel's `.fast` entry as a Python builtin `fast(args, *outs)` (None when the
    code has none, or this process's object layout is not the one it reads). The builtin
    keeps its method definition and the loaded code alive."""
    address = getattr(loaded, "fast_address", 0)
    if not address or sig.abi < 3 or engine.array_data_offset() is None:
        return None
    return _builtin(sig.symbol, address, loaded)


def _builtin(symbol, address, loaded, extra=()):
    """The METH_FASTCALL entry at `address` as a Python builtin whose `self` is the tuple
    the entries read: FAST_RESULTS, the ndarray type, the method definition and the
    loaded code (kept alive by it), then `extra`."""
    method = _MethodDef(symbol.encode(), address, _METH_FASTCALL, None)
    own = [None] * 4
    own[:3] = FAST_RESULTS
    own[FAST_ARRAY_TYPE] = _ndarray
    return _new_builtin(ctypes.byref(method), tuple(own) + ((method, loaded),) + extra, None)


_PY_ARRAY_EMPTY, _PY_ARRAY_RETURN = 184, 76    # places in NumPy's C-API table

_api = {}


def _numpy_api(scalar):
    """An int64 array holding PyArray_Empty's address and PyArray_Return's (0 unless
    `scalar`), read by `.direct` entries."""
    if scalar not in _api:
        get = ctypes.pythonapi.PyCapsule_GetPointer
        get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        table = ctypes.cast(get(pool.numpy_core()._multiarray_umath._ARRAY_API, None),
                            ctypes.POINTER(ctypes.c_void_p))
        _api[scalar] = np.array([table[_PY_ARRAY_EMPTY],
                                 table[_PY_ARRAY_RETURN] if scalar else 0], np.int64)
    return _api[scalar]


def direct_builtin(k, operands, scalar=False):
    """Kernel k's `.direct` entry as a builtin `direct(*operands)` for calls like this
    one (its numbers of these Python types), or None where it has none or cannot serve
    them: it returns the output (`scalar`: a 0-d one as a NumPy scalar), or
    FAST_RESULTS[FAST_FALLBACK] when a call is not one it serves (the caller then takes
    its general path). See codegen.llvm._direct_entry."""
    address = getattr(getattr(k, "loaded", None), "direct_address", 0)   # (GPU kernels: none)
    sig = k.sig
    # an int checked against the dtypes it meets: the entry (ABI 5) compares it with their
    # bounds, and one outside goes the general way, which raises; one checked only
    # against int64, the parameter's own type, its conversion rejects (ABI 4)
    served = all(t[0] == "var" and (dt == "int64" or sig.abi >= 5)
                 for dt, t, *_ in k.int_checks)
    # (conditions on the sizes are checked by the Python path only)
    if not address or sig.abi < 4 or not served or not k.single or sig.required \
            or engine.array_data_offset() is None or len(operands) != len(sig.layout):
        return None
    types = []
    for a, (kind, *_) in zip(operands, sig.layout):
        if kind == "scalar":
            if type(a) not in _WEAK_SCALARS and type(a) not in NUMPY_SCALARS:
                return None
            types.append(type(a))
    descrs = tuple(np.dtype(dt) for _, _, dt in sig.inputs + sig.outputs)
    try:
        api = _numpy_api(scalar)
    except Exception:       # (a NumPy without the C-API capsule where it is looked for)
        return None
    return _builtin(sig.symbol, address, k.loaded, (api,) + descrs + tuple(types))


def check_int_values(fname, int_checks, values):
    """Python-int argument values (name -> int) against the dtypes they meet (a kernel's
    int_checks, jitdl.ir.weak.checks): NumPy 2's OverflowError, naming the function
    fname, where one does not fit."""
    for dtype, tree, text, context, loc in int_checks:
        try:
            v = weak.evaluate(tree, values)
            if v is not None:
                weak.fit(v, dtype)
        except weak.Overflow as e:
            _raise_overflow(fname, e, tree, text, context, loc, values)


def _raise_overflow(fname, e, tree, text, context, loc, values):
    names = weak.names(tree)
    given = ", ".join(f"{n} = {values[n]}" for n in names)
    lo, hi = weak.BOUNDS[e.dtype]
    if tree[0] == "var" and e.value == values[tree[1]]:
        # (NumPy's sentence first, word for word; one for any int beyond int64's range)
        bounds = (f"Python integer {e.value} out of bounds for {e.dtype} (argument "
                  f"'{tree[1]}'; [{lo}, {hi}])" if -2 ** 63 <= e.value < 2 ** 63 else
                  f"Python int too large to convert to C long (argument '{tree[1]}' is "
                  f"{e.value}; [{lo}, {hi}])")
    else:
        bounds = (f"`{text}` is {e.value} (with {given}), which is out of bounds for "
                  f"{e.dtype} ([{lo}, {hi}])")
    if e.dtype != "int64":
        why = (f"the dtype it meets in `{context}`. NumPy 2 raises OverflowError here "
               f"too (a Python int takes the dtype of the array it meets); pass a value "
               f"that fits, or widen the array in the definition (e.g. jd.int64(X[i]))")
    else:
        why = (f"in `{context}`: jitdl computes with Python-int arguments in int64 "
               f"(pass a float for a larger number)")
    # (at the caller's line, as the call's other errors; the definition's line in words)
    where = ""
    if loc:
        source = linecache.getline(loc[0], loc[1]).strip()
        where = f" (the definition: File \"{loc[0]}\", line {loc[1]}" + \
            (f": {source})" if source else ")")
    raise ScalarOverflowError(f"{fname}(): {bounds}, {why}{where}", user_loc())


class KernelChecks:
    """What every target's kernel checks on the host: Python-int arguments against the
    dtypes they meet, and the run-time index checks a kernel reports."""

    def _init_checks(self, sig):
        self.sig = sig
        self.fname = sig.fname
        self.checks = sig.checks
        self.int_checks = sig.int_checks
        self.scalar_names = [(i, x[1]) for i, x in enumerate(sig.layout) if x[0] == "scalar"]
        # the common check, an argument itself against a dtype's bounds, as (position,
        # low, high); an expression of arguments needs the exact evaluation every call
        position = {name: i for i, name in self.scalar_names}
        self._int_bounds = [(position[t[1]],) + weak.BOUNDS[dt]
                            for dt, t, *_ in self.int_checks if t[0] == "var"]
        self._int_exprs = any(t[0] != "var" for _, t, *_ in self.int_checks)
        # (sizes that must agree are checked even where none is left a parameter: a
        # size-1 pattern can make every size a constant)
        self.dims = _dims_function(sig) if sig.sizes or sig.agree or sig.required \
            else None

    def _check_ints(self, args):
        """Python-int arguments must fit the dtype they meet, as NumPy 2 requires."""
        if not self._int_exprs:
            for i, lo, hi in self._int_bounds:
                if not lo <= args[i] <= hi:
                    break
            else:
                return
        check_int_values(self.fname, self.int_checks,
                         {name: args[i] for i, name in self.scalar_names})

    def _given_outs(self, out, shares):
        """out= as a tuple of one array per output: a tuple or list of as many as the
        kernel has outputs (one array alone for a kernel of one output), no two sharing
        memory (`shares(a, b)`: whether two given ones do); an error at the user's line
        otherwise."""
        if isinstance(out, (tuple, list)):
            given = tuple(out)
        elif len(self.out_specs) == 1:
            given = (out,)
        else:
            raise ArgumentError(f"{self.fname}(): out= must be a tuple of "
                                f"{len(self.out_specs)} arrays ({', '.join(self.out_names)}), "
                                f"got {type(out).__name__}", user_loc())
        if len(given) != len(self.out_specs):
            raise ArgumentError(f"{self.fname}(): out= must hold {len(self.out_specs)} "
                                f"array(s) ({', '.join(self.out_names)}), got {len(given)}",
                                user_loc())
        for j, a in enumerate(given):
            for k in range(j):
                if shares(a, given[k]):
                    raise OutArgumentError(
                        f"{self.fname}(): out= for {self.out_names[k]} and "
                        f"{self.out_names[j]} share memory; each output needs an array "
                        "of its own", user_loc())
        return given

    def _raise_index_error(self, err, sizes=()):
        tensor, text, extent = self.checks[int(err[0]) - 1]

        def given(words):           # the dynamic sizes named in words, with their values
            names = [n for n, _ in self.sig.scalars[len(self.sig.scalars) - len(sizes):]]
            return ", ".join(f"{n} = {v}" for n, v in zip(names, sizes)
                             if re.search(rf"\b{n}\b", words))
        message = value_check_message(tensor)
        if message is not None:
            said = given(message) if sizes else ""
            raise KernelValueError(f"{self.fname}(): {message}" +
                                   (f" ({said})" if said else ""), user_loc())
        if isinstance(extent, str) and sizes:    # a dynamic size: its name, and its value
            said = given(extent)
            extent = f"{extent}) ({said}" if said else extent
        raise KernelIndexError(f"{self.fname}(): index `{text}` into {tensor} is "
                               f"{int(err[1])}, outside [0, {extent})", user_loc())



class Kernel(KernelChecks):
    """Runs one compiled specialisation."""

    expanded_ok = True      # copy inputs that are views far larger than their memory
    reorder = None          # (args) -> the result of a call on strided views, or None

    def __init__(self, sig: Signature, loaded, texts=None):
        engine.kernel_loaded()
        self.loaded = loaded                 # keeps the engine (and the code) alive
        pool.install_hooks(loaded)
        # "loop_ir", "llvm_ir", "llvm_ir_unoptimized" (a cache entry's: decompressed lazily)
        self.texts = {} if texts is None else texts
        self.out_specs = [(tuple(shape), np.dtype(dt)) for _, shape, dt in sig.outputs]
        self.out_names = [name for name, _, _ in sig.outputs]
        self.allocs = sig.allocs
        self.has_err = sig.has_err
        scalars = [_CTYPE[dt] for _, dt in sig.scalars]
        err = [ctypes.c_void_p] if self.has_err else []
        n_arrays = len(sig.inputs) + len(self.out_specs)
        self.cfunc = ctypes.CFUNCTYPE(None, *([ctypes.c_void_p] * n_arrays + scalars + err))(
            loaded.address)
        # fast(args, *outs) -> None when the kernel ran (see FAST_RESULTS)
        self.fastcall = fast_builtin(loaded, sig)
        self.fast = self.fastcall is not None
        self.array_pos = [i for i, x in enumerate(sig.layout) if x[0] == "array"]
        self.scalar_pos = [i for i, x in enumerate(sig.layout) if x[0] == "scalar"]
        self.single = len(self.out_specs) == 1
        self.alias = frozenset(sig.alias)
        self._init_checks(sig)
        self.run = self._specialised_run()

    def _specialised_run(self):
        """The call path for this kernel's common case: one output, no int checks, no
        out= (fewer Python operations per call than the general __call__)."""
        if self.dims is not None:
            return _fast_dynamic_run(self) if self.fast and not self.int_checks \
                else self._dynamic_run
        if not (self.fast and self.single and not self.int_checks):
            return self.__call__
        (shape, dtype), fast, general, slow = (self.out_specs[0], self.fastcall,
                                               self.__call__, self._call)
        empty = allocator(shape, dtype)

        def run(args, out=None):
            if out is None:
                o = empty(shape, dtype)
                if fast(args, o) is None:
                    return o
                return slow(args, None)     # strided inputs, or an error to read
            return general(args, out)
        return run

    def _dynamic_run(self, args, out=None):
        """The call path of a dynamic kernel: the sizes (its last scalar arguments) and
        the output shapes from the arrays' shapes, then the general path."""
        sizes, shapes = self.dims(args)
        if self.int_checks:
            self._check_ints(args)
        if self.fast:
            if out is None:
                outs = [alloc(shape, dt) for shape, (_, dt) in zip(shapes, self.out_specs)]
            elif self.single and type(out) is _ndarray and self._out_ok(
                    out, [args[i] for i in self.array_pos], shapes[0]):
                outs = [out]
            else:
                outs = None
            if outs is not None and self.fastcall(tuple(args), *outs, *sizes) is None:
                return outs[0] if self.single else tuple(outs)
        specs = [(shape, dt) for shape, (_, dt) in zip(shapes, self.out_specs)]
        return self._call(args, out, specs, sizes)

    def __call__(self, args, out=None):
        if self.dims is not None:
            return self._dynamic_run(args, out)
        if self.int_checks:
            self._check_ints(args)
        if self.fast:
            if out is None:
                outs = [alloc(shape, dtype) for shape, dtype in self.out_specs]
            elif self.single and type(out) is _ndarray and self._out_ok(
                    out, [args[i] for i in self.array_pos]):
                outs = [out]
            else:
                return self._call(args, out)
            # the entry checks contiguity and alignment itself (and falls back if not)
            if self.fastcall(tuple(args), *outs) is None:
                return outs[0] if self.single else tuple(outs)
        return self._call(args, out)

    def _out_ok(self, o, inputs, shape=None):
        """o can take the result directly (the fast entry's out=): the kernel's shape
        (`shape`: a dynamic kernel's for this call) and dtype, writable, contiguous and
        apart from every input (numbers among them are skipped)."""
        spec_shape, dtype = self.out_specs[0]
        if o.shape != (spec_shape if shape is None else shape) or o.dtype != dtype:
            return False
        flags = o.flags
        if not (flags.c_contiguous and flags.writeable and flags.aligned):
            return False
        own = flags.owndata
        for j, a in enumerate(inputs):
            if a is o:      # (an elementwise kernel may write over such an input)
                if j not in self.alias:
                    return False
            # (two arrays that each own their data are apart unless they are one array)
            elif isinstance(a, _ndarray) and not (own and a.flags.owndata) \
                    and np.may_share_memory(a, o):
                return False
        return True

    def _call(self, args, out, out_specs=None, sizes=()):
        """The general path: strided inputs are copied, out= is checked (an out= that
        overlaps an input, or is strided, takes the result through a copy), checks read.
        A dynamic kernel passes this call's output shapes and sizes."""
        out_specs = out_specs or self.out_specs
        copied, reorder = list(args), self.reorder if out is None else None
        made = {}       # (id of a view copied: one copy of a view passed twice, x * x)
        for j, i in enumerate(self.array_pos):
            flags = args[i].flags
            if not (flags.c_contiguous and flags.aligned):
                if reorder is not None:
                    # (jd.numpy's elementwise functions and reductions: transposed views
                    # run in their memory's order, as NumPy runs them, not copied)
                    result, reorder = reorder(args), None
                    if result is not None:
                        return result
                copy = made.get(id(args[i]))
                if copy is None:
                    copy = made[id(args[i])] = self._contiguous(args[i], j)
                copied[i] = copy        # strided/unaligned: copied
        args = tuple(copied)
        if out is None:
            outs = [alloc(shape, dtype) for shape, dtype in out_specs]
            final = None
        else:
            outs, final = self._check_out(out, args, out_specs)
        # the fast entry where it serves (ctypes' conversions cost more than a small
        # kernel's work); else the pointer entry, which reports errors
        if not (self.fast and self.fastcall(args, *outs, *sizes) is None):
            ptrs = [args[i].ctypes.data for i in self.array_pos]
            ptrs.extend(o.ctypes.data for o in outs)
            ptrs.extend(args[i] for i in self.scalar_pos)
            ptrs.extend(sizes)
            if self.has_err:
                err = np.zeros(2, np.int64)
                ptrs.append(err.ctypes.data)
                self.cfunc(*ptrs)
                if err[0] > 0:
                    self._raise_index_error(err, sizes)
                if err[0] < 0:
                    self._raise_memory_error(int(-err[0]))
            else:
                self.cfunc(*ptrs)
        if final is not None:
            for dst, src in zip(final, outs):
                if dst is not src:
                    np.copyto(dst, src)
            outs = final
        return outs[0] if self.single else tuple(outs)

    def _contiguous(self, a, j):
        """Input j's contiguous copy. A view far larger than its memory (broadcast_to:
        zero strides) is refused where `expanded_ok` is False (jd.numpy's kernels: NumPy
        reads it in place), and wherever the copy could not fit in this machine's memory
        (a clear error, not the system's out-of-memory killer)."""
        size = a.nbytes
        if size >= EXPANDED_MIN_BYTES:
            span = _span(a)
            if size >= EXPANDED_RATIO * span and not self.expanded_ok:
                raise ExpandedViewError(f"{self.fname}(): input {self.sig.inputs[j][0]} is "
                                        f"a view of {_human_bytes(span)} that a copy "
                                        f"would make {_human_bytes(size)}")
            if size > _physical_memory():
                raise AllocationError(
                    f"{self.fname}(): input {self.sig.inputs[j][0]} is a strided view (of "
                    f"{_human_bytes(span)}, shape {a.shape}, strides {a.strides}) that the "
                    f"kernel reads as a contiguous copy: {_human_bytes(size)}, more than "
                    f"this machine's memory ({_human_bytes(_physical_memory())}). Pass the "
                    f"array the view was made from and broadcast it in the definition")
        return np.ascontiguousarray(a)

    def _check_out(self, out, args, out_specs):
        given = self._given_outs(out, lambda a, b: isinstance(a, np.ndarray) and isinstance(
            b, np.ndarray) and np.may_share_memory(a, b) and np.shares_memory(a, b))
        outs = []
        for o, name, (shape, dtype) in zip(given, self.out_names, out_specs):
            if not isinstance(o, np.ndarray):
                raise ArgumentError(f"{self.fname}(): out= for {name}: expected a NumPy array, "
                                    f"got {type(o).__name__}", user_loc())
            if o.shape != shape or o.dtype != dtype:
                raise OutArgumentError(
                    f"{self.fname}(): out= for {name}: expected shape {shape} and dtype "
                    f"{dtype}, got shape {o.shape} and dtype {o.dtype}", user_loc())
            if not o.flags.writeable:
                raise OutArgumentError(f"{self.fname}(): out= for {name} is read-only",
                                       user_loc())
            overlaps = any(isinstance(a, np.ndarray) and np.may_share_memory(a, o)
                           for a in args)
            if overlaps or not (o.flags.c_contiguous and o.flags.aligned):
                outs.append(np.empty(shape, dtype))   # computed aside, then copied in
            else:
                outs.append(o)
        return outs, list(given)

    def _raise_memory_error(self, n):
        name, dtype, shape, nbytes = self.allocs[n - 1]
        size = f"{nbytes} bytes ({_human_bytes(nbytes)})" if nbytes else \
            "its size set by this call's shapes"      # (a dynamic kernel's buffer)
        raise AllocationError(
            f"{self.fname}(): cannot allocate the intermediate buffer {name} "
            f"({dtype}[{', '.join(map(str, shape))}]): {size}; the allocation failed. "
            f"{LESS_MEMORY}")


# what a failed allocation of an intermediate buffer suggests (CPU and GPU kernels)
LESS_MEMORY = ("A schedule that computes it in blocks inside its consumer (compute_at) or "
               "inlines it (compute_inline) needs less memory")

_TREE_OPS = {"//": "({} // {})", "%": "({} % {})", "min": "min({}, {})",
             "max": "max({}, {})"}      # (+, - and *: see _chain_code)


def _tree_code(tree, sizes=None):
    """Python source of a size tree (ints, ["n", k] and known operators only); the k-th
    size is `n{k}`, or sizes[k]. A chain of sums (or of products) on its left side is
    written without a parenthesis per step, `(n0 + n1 + n2)`: the size of a concatenate
    of 200 arrays nests 200 deep, past what Python's parser takes ("too many nested
    parentheses")."""
    if isinstance(tree, int):
        return str(int(tree))
    if tree[0] == "n":
        return sizes[int(tree[1])] if sizes else f"n{int(tree[1])}"
    if tree[0] in _CHAINS:
        return f"({_chain_code(tree, sizes)})"
    return _TREE_OPS[tree[0]].format(_tree_code(tree[1], sizes), _tree_code(tree[2], sizes))


_CHAINS = {"+": ("+", "-"), "-": ("+", "-"), "*": ("*",)}   # left-associative, same precedence


def _chain_code(tree, sizes):
    """`a op b op c` of a left-deep chain of one precedence, without parentheses (a loop,
    not a recursion, down its left side)."""
    rights, ops = [], _CHAINS[tree[0]]
    while not isinstance(tree, int) and tree[0] in ops:
        rights.append((tree[0], tree[2]))
        tree = tree[1]
    code = _tree_code(tree, sizes)
    for op, right in reversed(rights):
        code += f" {op} {_tree_code(right, sizes)}"
    return code


def _dims_function(sig):
    """`dims(args) -> (sizes, output shapes)` for a dynamic kernel, generated once as
    Python source (each call then costs a few attribute reads); it raises ArgumentError
    when sizes that the definition makes equal differ."""
    lines = ["def dims(args):"]
    for k, (pos, dim) in enumerate(sig.sizes):
        lines.append(f"    n{k} = args[{int(pos)}].shape[{int(dim)}]")
    for k, (_, pa, da, _, pb, db) in enumerate(sig.agree):
        lines.append(f"    if args[{int(pa)}].shape[{int(da)}] != args[{int(pb)}].shape[{int(db)}]:"
                     f" disagree(args, {k})")
    for k, (op, tree, number, *_) in enumerate(sig.required):
        lines.append(f"    if not {_required_code(op, tree, number)}: unmet(args, {k})")
    sizes = "".join(f"n{k}, " for k in range(len(sig.sizes)))
    for j, (_, shape, _) in enumerate(sig.outputs):
        for d, tree in enumerate(shape):
            if _may_be_negative(tree):
                code = _tree_code(tree)
                lines.append(f"    if {code} < 0: negative(args, {j}, {d}, {code})")
    shapes = ", ".join("(" + "".join(_tree_code(d) + ", " for d in shape) + ")"
                       for _, shape, _ in sig.outputs)
    lines.append(f"    return ({sizes}), ({shapes},)")

    def negative(args, j, d, value):
        name, shape, _ = sig.outputs[j]
        named = [f"{sig.layout[p][1]}.shape[{int(dim)}]" for p, dim in sig.sizes]
        given = ", ".join(f"{sig.layout[p][1]} {tuple(args[p].shape)}"
                          for p in sorted({int(p) for p, _ in sig.sizes}))
        raise ArgumentShapeError(
            f"{sig.fname}(): dimension {d} of the output {name} is "
            f"`{_tree_code(shape[d], named)}` = {value} for these "
            f"arguments ({given}); a dimension must be >= 0", user_loc())

    def disagree(args, k):
        raise mismatch_error(sig.fname, sig.agree[k], args)

    def unmet(args, k):
        _, _, _, message, named, file, line, *error = sig.required[k]
        given = ", ".join(f"{n} = {args[p].shape[d]}" for n, p, d in named)
        cls = ArgumentIndexError if error == ["index"] else ArgumentShapeError
        raise cls(f"{sig.fname}(): {message}" + (f" ({given})" if given else ""),
                  SourceLoc(file, line) if file else None)
    namespace = {"disagree": disagree, "negative": negative, "unmet": unmet}
    generated("\n".join(lines), namespace, "dims")
    return namespace["dims"]


def mismatch_error(fname, agreement, args):
    """The ArgumentShapeError, at the user's line, of a call whose arguments differ in two
    sizes that must agree (`agreement`: an entry of Signature.agree)."""
    a, pa, da, b, pb, db = agreement
    sa, sb = tuple(args[pa].shape), tuple(args[pb].shape)
    return ArgumentShapeError(
        f"{fname}(): shape mismatch: argument '{a}' has size {sa[da]} in dimension {da} but "
        f"argument '{b}' has size {sb[db]} in dimension {db} ({a} {sa}, {b} {sb})",
        user_loc())


def refuse_disagreeing(fname, agree, args):
    """Raise mismatch_error for the first entry of `agree` whose sizes differ in this call
    (an argument without that dimension is left to the call's other checks)."""
    for entry in agree:
        _, pa, da, _, pb, db = entry
        sa, sb = (getattr(args[p], "shape", ()) for p in (pa, pb))
        if len(sa) > da and len(sb) > db and sa[da] != sb[db]:
            raise mismatch_error(fname, entry, args) from None


def _required_code(op, tree, number, sizes=None):
    """Python source of a condition on the sizes (Signature.required): `tree op number`."""
    if op not in ("==", ">"):
        raise ValueError(f"a condition on the sizes with the operator {op!r}")
    return f"({_tree_code(tree, sizes)} {op} {int(number)})"


def _may_be_negative(tree):
    """Whether an output size tree can be negative: it subtracts (a declared
    `jd.tensor((m - R + 1,))`), outside a max with 0."""
    if isinstance(tree, int):
        return tree < 0
    if tree[0] == "n":
        return False
    if tree[0] == "max" and any(isinstance(t, int) and t >= 0 for t in tree[1:]):
        return False
    return tree[0] in ("-", "//") or any(_may_be_negative(t) for t in tree[1:])


def _fast_dynamic_run(k):
    """The call path of a dynamic kernel, generated as Python source for its arguments:
    the sizes read from the shapes, agreement checked, outputs made, one call of the
    .fast entry (strided inputs, out= and errors take the general path)."""
    sig = k.sig
    n_args = len(sig.layout)
    names = ", ".join(f"a{i}" for i in range(n_args)) + ("," if n_args == 1 else "")
    lines = ["def run(args, out=None):",
             "    if out is not None:",
             "        return general(args, out)",
             f"    {names} = args"]
    shaped = sorted({int(p) for p, _ in sig.sizes} | {int(x[i]) for x in sig.agree
                                                       for i in (1, 4)})
    lines += [f"    s{p} = a{p}.shape" for p in shaped]
    for _, pa, da, _, pb, db in sig.agree:
        lines.append(f"    if s{int(pa)}[{int(da)}] != s{int(pb)}[{int(db)}]:")
        lines.append("        return general(args, None)")
    sizes = [f"s{int(p)}[{int(d)}]" for p, d in sig.sizes]
    for op, tree, number, *_ in sig.required:     # (the general path raises the error)
        lines.append(f"    if not {_required_code(op, tree, number, sizes)}:")
        lines.append("        return general(args, None)")
    # an output of an input's shape takes that shape as it is (no tuple to build)
    same = {}
    for pos, (_, shape, _) in zip(k.array_pos, sig.inputs):
        tree = [["n", sig.sizes.index([pos, d])] if n is None and [pos, d] in sig.sizes
                else n for d, n in enumerate(shape)]
        if None not in tree and pos in shaped:
            same.setdefault(repr(tree), f"s{pos}")
    outs = []
    for j, (_, shape, _) in enumerate(sig.outputs):
        tree = [list(d) if isinstance(d, (list, tuple)) else d for d in shape]
        dims = same.get(repr(tree)) or \
            "(" + "".join(_tree_code(d, sizes) + ", " for d in shape) + ")"
        # outputs of pool.MIN_BYTES and more in memory that is reused (see allocator)
        count = " * ".join(f"({_tree_code(d, sizes)})" for d in shape) or "1"
        most = -(-pool.MIN_BYTES // k.out_specs[j][1].itemsize)
        for d in shape:
            if _may_be_negative(d):         # (the general path raises the error)
                lines.append(f"    if {_tree_code(d, sizes)} < 0:")
                lines.append("        return general(args, None)")
        lines.append(f"    o{j} = (empty if {count} < {most} else big)({dims}, dt{j})")
        outs.append(f"o{j}")
    call = ["args"] + outs + sizes
    lines.append("    if type(args) is not tuple:")
    lines.append("        return general(args, None)")
    lines.append(f"    if fast({', '.join(call)}) is None:")
    lines.append(f"        return {outs[0] if k.single else '(' + ', '.join(outs) + ',)'}")
    # strided inputs or an error to read: the general path, with this call's shapes
    specs = ", ".join(f"(o{j}.shape, dt{j})" for j in range(len(outs)))
    lines.append(f"    return slow(args, None, [{specs}], ({''.join(s + ', ' for s in sizes)}))")
    namespace = {"general": k._dynamic_run, "slow": k._call, "empty": _empty,
                 "big": pool.empty,
                 "fast": k.fastcall,
                 **{f"dt{j}": dt for j, (_, dt) in enumerate(k.out_specs)}}
    generated("\n".join(lines), namespace, "run")
    return namespace["run"]


def generated(source, namespace, what):
    """exec of Python source generated here (built from ints), under a file name inside
    the package: its frames are jitdl's, so an error it raises names the user's line
    (errors.user_loc), not `File "<string>"`."""
    code = compile(source, os.path.join(os.path.dirname(__file__), f"<generated {what}>"),
                   "exec")
    exec(code, namespace)       # noqa: S102 - source built from ints


EXPANDED_MIN_BYTES = 64 << 20   # a strided input's copy this large may be refused, if
EXPANDED_RATIO = 8              # it is this many times the memory the view spans


def _span(a):
    """The bytes a view's elements span in memory (its base may hold more)."""
    if a.size == 0:
        return 0
    return a.itemsize + sum((n - 1) * abs(s) for n, s in zip(a.shape, a.strides))


def _physical_memory():
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):      # (no such figure here)
        return 1 << 62


def _human_bytes(n):
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
