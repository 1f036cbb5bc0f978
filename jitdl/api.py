"""The user-facing objects: @jd.compute functions, @jd.schedule, inspection and timing.

The call path of an already compiled specialisation is a dict lookup on
(shapes, dtypes, scalar types, static values) and a foreign call; everything else happens
once per key: the disk cache is asked, and on a miss jitdl.pipeline compiles.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import inspect
import json
import linecache
import logging
import operator
import os
import re
import sys
import threading
import time
import types
import warnings
import weakref

import numpy as np

from jitdl import dtypes, pipeline
from jitdl._version import __version__
from jitdl import target as targets
from jitdl.cache import keys
from jitdl.cache.store import Entry, Texts, default_store, warn_once
from jitdl.cache import runtime_code  # noqa: F401  (keeps the memory pool's code on disk)
from jitdl.capture.trace import capture, inline, trace
from jitdl.config import settings, tuning_db
from jitdl.errors import (ArgumentError, ArgumentShapeError, ArgumentValueError, JitdlError,
                          OutArgumentError, PerformanceWarning, ScheduleError, user_loc)
from jitdl.ir.nodes import Expr, IterVar
from jitdl.runtime import cuda as cuda_runtime
from jitdl.runtime import engine, native
from jitdl.runtime.cuda import is_device_array
from jitdl.runtime.kernel import (Kernel, Signature, call_key, key_function,
                                  refuse_disagreeing, shape_key, static_value)
from jitdl.lower.lower import size_params
from jitdl.schedule.config import ChoiceKnob
from jitdl.schedule.gpu import ROW_MIN, symbolic_rows
from jitdl.te.tensor import Tensor
from jitdl import locks

log = logging.getLogger("jitdl.cache")
EXPORT_PATTERNS = 32    # kernels of size-1 patterns an export writes at most (_size_patterns)
tlog = logging.getLogger("jitdl.tune")
_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)
_SYMBOLIC = (Tensor, Expr, IterVar)     # values a definition is traced with
_STATIC = (type(None), bool, int, float, str, np.bool_, np.integer, np.floating)
_GRAPHS_KEPT = 8                  # traces kept per function (for inspection and tuning)


def _shares_memory(a, b):
    """Whether out= arrays a and b (NumPy's or a GPU's, of one kind) share memory."""
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return np.may_share_memory(a, b) and np.shares_memory(a, b)
    if is_device_array(a) and is_device_array(b):
        dev = cuda_runtime.backend()
        return dev.may_share_memory(dev.asarray(a), dev.asarray(b)) and \
            cuda_runtime.shares_memory(a, b)
    return False


class _Default:
    """A method's keyword default, told apart from the same value given (help() shows the
    value): see Function._own."""

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return repr(self.value)


class Text(str):
    """A string that prints itself in the REPL (so `f.lower(x)` shows the IR)."""

    def __repr__(self):
        return str(self)


def numpys_own(a):
    """Whether `a` is an ndarray subclass whose NumPy semantics differ from its data's (a
    masked array's mask, a matrix's reductions that stay 2-d): jd.numpy hands them to
    NumPy's functions, a definition refuses them. numpy.ma is looked up, not imported
    (10 ms of `import jitdl`): a masked array exists only once it has been imported."""
    if type(a) is np.ndarray:
        return False
    ma = sys.modules.get("numpy.ma")
    return isinstance(a, np.matrix) or ma is not None and isinstance(a, ma.MaskedArray)


class Function:
    """A jitdl definition; call it with NumPy arrays and Python scalars."""

    def __init__(self, pyfunc, strict_fp=False, autotune=None, name=None, static=(),
                 dynamic=False, solid=None):
        functools.update_wrapper(self, pyfunc)      # __name__, __doc__, __wrapped__, ...
        self.pyfunc = pyfunc
        self.name = name or pyfunc.__name__
        self.strict_fp = strict_fp
        if autotune not in (None, False, "background", "foreground"):
            raise ValueError(f"autotune= must be None, 'background' or 'foreground', "
                             f"got {autotune!r}")
        self.autotune = autotune
        if autotune:
            _budget()                   # a JITDL_TUNE_BUDGET it cannot read: said now
        self.signature = inspect.signature(pyfunc)
        self.param_names = list(self.signature.parameters)
        self._nparams = len(self.param_names)
        # (a call of as many values as parameters skips binding, unless some parameter is
        # keyword-only: f(x, 3.0) of `def f(X, *, s)` is refused as Python refuses it)
        self._nfast = -1 if any(p.kind == p.KEYWORD_ONLY for p in
                                self.signature.parameters.values()) else self._nparams
        # a parameter named `out` takes f(..., out=v), as the inspection methods' options
        # go to parameters of their names (_own); such a function has no out= array
        self._out_is_param = "out" in self.param_names
        if isinstance(static, str):
            static = (static,)
        elif isinstance(static, (set, frozenset)):      # (in the parameters' order)
            static = tuple(n for n in self.param_names if n in static) + tuple(
                sorted(n for n in static if n not in self.param_names))
        if isinstance(dynamic, (set, frozenset)):
            dynamic = tuple(n for n in self.param_names if n in dynamic) + tuple(
                sorted(n for n in dynamic if n not in self.param_names))
        unknown = [n for n in static if n not in self.param_names]
        if unknown:
            raise ArgumentError(f"@jd.compute(static=...): {self.name} has no parameter "
                                f"{', '.join(map(repr, unknown))}; its parameters: "
                                f"{', '.join(self.param_names)}")
        self.static = tuple(static)
        self._static_pos = tuple(self.param_names.index(n) for n in static)
        if dynamic is True:
            dynamic = tuple(n for n in self.param_names if n not in self.static)
        elif isinstance(dynamic, str):
            dynamic = (dynamic,)
        dims = _dynamic_dims(self.name, dynamic) if isinstance(dynamic, dict) else {}
        unknown = [n for n in dynamic or () if n not in self.param_names or n in self.static]
        if unknown:
            raise ArgumentError(f"@jd.compute(dynamic=...): {self.name} has no array "
                                f"parameter {', '.join(map(repr, unknown))}; its parameters: "
                                f"{', '.join(self.param_names)}")
        self.dynamic = tuple(n for n in dynamic or () if dims.get(n, True) != ())
        self._dynamic_pos = tuple(self.param_names.index(n) for n in self.dynamic)
        # (position -> the dimensions that are symbolic, for arrays dynamic in only some)
        self._dims = {self.param_names.index(n): d for n, d in dims.items()
                      if d not in (True, ())}
        # f(rank) -> the dimensions (from 0) of a dynamic array that the definition never
        # broadcasts (a concatenate's axis: the op library's), symbolic at size 1 too
        self._solid = solid if self.dynamic else None
        self._call_key = key_function(self._nparams, self._static_pos,
                                      self._dynamic_pos, self._dims, self._solid)  # call_key
        self._captured = None
        self._long_rows = False         # (GPU calls: rows of symbolic length taken as long,
        #                                 the op library's kernel for them: jitdl.eager)
        # GPU calls of symbolic extents: a kernel for long rows (a block of threads each)
        # and one for short rows (a thread each), chosen at each call by the length of
        # its rows (runtime.cuda.ByRowLength); the op library compiles its calls for the
        # rows' lengths instead (jitdl.eager)
        self._by_row_length = bool(self.dynamic)
        self._graphs = {}               # (specs, what it reads) -> traced Graph (latest few)
        self._kernels = {}              # key -> Kernel (the dispatch table)
        self._schedules = {}            # target -> schedule function (s, cfg)
        self._configs = {}              # key -> knob values chosen by tuning
        self._fixed = {}                # knob values given with with_config()
        self._checked = set()           # specs whose space the _fixed names were checked in
        self._lock = locks.Lock(reentrant=True)     # (new in a forked child)
        self._events = []               # cache hits and compilations, for cache_info()
        self._tunings = []              # TuneResults of this process (tuning_curve)
        self._jobs = {}                 # key -> background tuning job (tuning_status)
        self._generation = 0            # + 1 when recompile() or a schedule drops kernels:
        #                                 tuning that began before swaps nothing in
        self.qualname = f"{pyfunc.__module__}.{pyfunc.__qualname__}"

    def __get__(self, obj, objtype=None):
        """The function itself, as a class attribute too (no `self` is bound, as before).
        It makes the function a routine to inspect: help(f) shows f(X, ...) and its own
        docstring, where it showed the Function class's when f has none."""
        return self

    def _own(self, method, kwargs, **options):
        """The values of a method's own keyword options (`after=`, `target=`, `repeat=`,
        ...), defaults for those not given; one given that names a parameter of the
        definition goes to the definition instead, as in a call (`def mse(pred, target)`:
        mse.lower(p, target=t) lowers mse(p, t), not for a target t)."""
        out = []
        for name, v in options.items():
            if name in self.param_names and not isinstance(v, _Default):
                kwargs[name] = v
                v = method.__kwdefaults__[name]
            out.append(v.value if isinstance(v, _Default) else v)
        return out

    # -- the call path ----------------------------------------------------------------------
    def __call__(self, *args, out=None, **kwargs):
        if out is not None and self._out_is_param:    # `def f(X, out)`: its own `out`
            kwargs["out"], out = out, None
        if kwargs or len(args) != self._nfast:        # keywords or defaults to fill in
            if "target" in kwargs and "target" not in self.param_names:
                return self._call_on(kwargs.pop("target"), self._bind(args, kwargs), out)
            args = self._bind(args, kwargs)
        try:                # (the per-call path: a compiled kernel, run)
            k = self._kernels[self._call_key(args)]
        except (KeyError, TypeError):     # not compiled yet; an unhashable static value
            return self._call_bound(args, out)
        return k.run(args, out)

    def _call_bound(self, args, out):
        """The call of bound arguments (one value per parameter, in their order): inlined
        into another definition, or run on a kernel compiled on first use."""
        if any(isinstance(a, _SYMBOLIC) for a in args):
            return self._inline(args, out)
        try:
            k = self._kernels[self._call_key(args)]
        except (KeyError, TypeError):
            key = self._key(args)
            k = self._kernels.get(key) or self._compile(args, key)
        return k.run(args, out)

    def _call_on(self, target, args, out):
        """A call with `target=`: the arrays are copied to where the target computes (NumPy
        arrays to the GPU for "cuda", GPU arrays to the host for "cpu"), and the result is
        returned where the arguments live (like Numba's CUDA ufuncs: NumPy in, NumPy out)."""
        name = getattr(target, "name", target)
        if name not in ("cpu", "cuda"):
            raise ArgumentError(f"{self.name}(): target={target!r}: expected 'cpu' or 'cuda'",
                                user_loc())
        arrays = [n for n, a in enumerate(args) if n not in self._static_pos
                  and (isinstance(a, np.ndarray) or is_device_array(a))]
        on_device = any(is_device_array(args[n]) for n in arrays)
        for n in arrays:
            if numpys_own(args[n]):     # (a copy would drop the mask)
                self._refuse_numpys_own(self.param_names[n], args[n])
        for o in () if out is None else out if isinstance(out, (tuple, list)) else (out,):
            if not (isinstance(o, np.ndarray) or is_device_array(o)):     # (before the work)
                raise ArgumentError(f"{self.name}(): out=: expected a NumPy array or a GPU "
                                    f"array, got {type(o).__name__}", user_loc())
            if isinstance(o, np.ndarray) and not o.flags.writeable:
                raise OutArgumentError(f"{self.name}(): out= is read-only", user_loc())
        given = out if isinstance(out, (tuple, list)) else ()
        for j, o in enumerate(given):       # (as the kernels' out= check: each its own)
            for k, p in enumerate(given[:j]):
                if _shares_memory(o, p):
                    raise OutArgumentError(
                        f"{self.name}(): out= arrays {k} and {j} share memory; each output "
                        "needs an array of its own", user_loc())
        if name == "cuda":
            try:
                dev = cuda_runtime.backend()
            except ArgumentError as e:
                raise ArgumentError(f"{self.name}(): target='cuda': {e}") from None
            moved = tuple(cuda_runtime.to_device(dev, a, self.name, self.param_names[n])
                          if n in arrays and isinstance(a, np.ndarray) else a
                          for n, a in enumerate(args))
            result = self._call_bound(moved, None)
            result = result if on_device else cuda_runtime.host_result(result)
        else:
            moved = tuple(cuda_runtime.backend().to_host(a) if n in arrays
                          and is_device_array(a) else a for n, a in enumerate(args))
            result = self._call_bound(moved, None)
            if on_device:
                dev = cuda_runtime.backend()
                result = tuple(map(dev.from_host, result)) if isinstance(result, tuple) \
                    else dev.from_host(result)
        if out is None:
            return result
        outs = out if isinstance(out, (tuple, list)) else (out,)
        results = result if isinstance(result, tuple) else (result,)
        if outs is not out and len(results) != 1:     # (as a kernel's out= check says)
            raise ArgumentError(f"{self.name}(): out= must be a tuple of {len(results)} "
                                f"arrays, got {type(out).__name__}", user_loc())
        if len(outs) != len(results):
            raise ArgumentError(f"{self.name}(): out= must hold {len(results)} array(s), "
                                f"got {len(outs)}", user_loc())
        for j, (o, r) in enumerate(zip(outs, results)):    # (all before any is written)
            got = (tuple(o.shape), cuda_runtime.dtype_of(o))
            want = (tuple(r.shape), cuda_runtime.dtype_of(r))
            if got != want:
                raise OutArgumentError(
                    f"{self.name}(): out={'' if outs is not out else f' array {j}'}: "
                    f"expected shape {want[0]} and dtype {want[1]}, got shape {got[0]} and "
                    f"dtype {got[1]}", user_loc())
        for o, r in zip(outs, results):
            if isinstance(o, np.ndarray):
                np.copyto(o, r if isinstance(r, np.ndarray) else cuda_runtime.host_result(r))
            else:
                dev = cuda_runtime.backend()
                dev.copyto(dev.asarray(o), r if is_device_array(r) else dev.from_host(r))
        return outs[0] if len(outs) == 1 else tuple(outs)     # (as the kernels return them)

    def _refuse_numpys_own(self, name, a):
        raise ArgumentError(
            f"{self.name}(): argument '{name}' is a {type(a).__module__}."
            f"{type(a).__qualname__}, whose NumPy semantics (a mask, 2-d reductions) a "
            f"definition does not keep; pass np.asarray(...) of it", user_loc())

    def _inline(self, args, out):
        """Called on tensors inside another definition: its stages join that definition
        (definitions compose like functions; one graph, one kernel)."""
        if out is not None:
            raise ArgumentError(f"{self.name}(): out= cannot be given inside a definition; "
                                "the result is a tensor of the calling definition")
        for n, (name, a) in enumerate(zip(self.param_names, args)):
            if n in self._static_pos:
                if isinstance(a, _SYMBOLIC):
                    raise ArgumentError(
                        f"{self.name}(): static argument '{name}' must be a plain Python "
                        f"value, got the symbolic {a!r}")
            elif isinstance(a, np.ndarray):
                raise ArgumentError(
                    f"{self.name}(): argument '{name}' is a NumPy array, but {self.name} is "
                    "called inside a definition: pass a tensor of that definition (arrays "
                    "are arguments of the outer function)")
        if self._captured is None:
            self._captured = capture(self.pyfunc)
        return inline(self._captured, args, self.name)

    def _bind(self, args, kwargs):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            raise ArgumentError(f"{self.name}() {_binding_problem(self.signature, args, kwargs)}; "
                                f"its parameters are ({', '.join(self.param_names)})",
                                user_loc()) from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _args(self, args, kwargs):
        return self._bind(args, kwargs) if kwargs or len(args) != self._nfast else args

    def _key(self, args):
        key = call_key(args, self._static_pos, self._dynamic_pos, self._dims, self._solid)
        try:
            hash(key)
        except TypeError:            # an unhashable static value: say which
            self._specs(args)
            raise
        return key

    def _specs(self, args):
        if len(args) != len(self.param_names):
            raise ArgumentError(
                f"{self.name}() takes {len(self.param_names)} argument(s) "
                f"({', '.join(self.param_names)}), got {len(args)}")
        specs = []
        for n, (name, a) in enumerate(zip(self.param_names, args)):
            if n in self._static_pos:
                specs.append(("static", self._static_value(name, a)))
            elif numpys_own(a):
                self._refuse_numpys_own(name, a)
            elif isinstance(a, np.ndarray):
                if not a.dtype.isnative:
                    raise ArgumentError(
                        f"{self.name}(): argument '{name}' has non-native byte order "
                        f"({a.dtype.str}); convert it with a.astype(a.dtype.newbyteorder('='))",
                        user_loc())
                try:
                    dt = dtypes.normalize(a.dtype)
                except TypeError:
                    raise ArgumentError(
                        f"{self.name}(): argument '{name}': dtype {a.dtype} is not supported; "
                        f"expected one of {', '.join(dtypes.SUPPORTED)}", user_loc()) from None
                specs.append(("array", self._shape_spec(n, name, a.shape), dt))
            elif isinstance(a, _SCALARS):
                weak = type(a) in (bool, int, float)   # np.float64 subclasses float: strong
                try:
                    dt = dtypes.weak_kind_dtype(a) if weak else \
                        dtypes.normalize(np.asarray(a).dtype)
                except TypeError:       # (np.uint64(1), np.float16(2): no supported dtype)
                    raise ArgumentError(
                        f"{self.name}(): argument '{name}': a NumPy {a.dtype} scalar, a "
                        f"dtype that is not supported; expected one of "
                        f"{', '.join(dtypes.SUPPORTED)} (or a Python number)",
                        user_loc()) from None
                specs.append(("scalar", dt, weak))
            elif is_device_array(a):
                specs.append(self._device_spec(n, name, a))
            else:
                raise ArgumentError(
                    f"{self.name}(): argument '{name}': expected a NumPy array, a GPU array "
                    f"(CuPy) or a Python scalar, got {type(a).__name__}", user_loc())
        self._check_one_device(args, specs)
        return specs

    def _device_spec(self, n, name, a):
        """A GPU array's spec: that of a NumPy array of its shape and dtype, marked cuda."""
        error = cuda_runtime.interface_only(self.name, name, a)
        if error is not None:
            raise error
        dtype = cuda_runtime.dtype_of(a)
        if not dtype.isnative:
            raise ArgumentError(f"{self.name}(): argument '{name}' has non-native byte order "
                                f"({dtype.str})", user_loc())
        try:
            dt = dtypes.normalize(dtype)
        except TypeError:
            raise ArgumentError(
                f"{self.name}(): argument '{name}': dtype {dtype} is not supported; "
                f"expected one of {', '.join(dtypes.SUPPORTED)}", user_loc()) from None
        error = cuda_runtime.elsewhere(self.name, f"argument '{name}'", a,
                                       "call it inside `with cupy.cuda.Device({on}):`")
        if error is not None:
            raise error
        shape = tuple(int(d) for d in a.shape)
        return ("array", self._shape_spec(n, name, shape), dt, "cuda")

    def _arguments(self):
        """The keyword arguments of Function that make this one (pickles copy them)."""
        return dict(strict_fp=self.strict_fp, autotune=self.autotune, name=self.name,
                    static=self.static, dynamic=self._dynamic_arg(),
                    **({} if self._solid is None else {"solid": self._solid}))

    def _dynamic_arg(self):
        """dynamic= as given (normalised): the names, or a dict where some arrays are
        dynamic in only some dimensions."""
        if not self._dims:
            return self.dynamic
        return {name: self._dims.get(n, True) for n, name in
                zip(self._dynamic_pos, self.dynamic)}

    def _shape_spec(self, n, name, shape):
        """Argument n's shape as its spec holds it: the shape, or where the argument is
        dynamic its symbolic dimensions None (see shape_key)."""
        if n not in self._dynamic_pos:
            return tuple(shape)
        dims = self._dims.get(n, True)
        if dims is not True:
            past = [d for d in dims if not -len(shape) <= d < len(shape)]
            if past:
                raise ArgumentError(
                    f"{self.name}(): argument '{name}' has {len(shape)} dimension(s) "
                    f"(shape {tuple(shape)}), but dynamic= makes its dimension "
                    f"{past[0]} symbolic; expected an array with at least "
                    f"{max(d + 1 if d >= 0 else -d for d in past)} dimensions",
                    user_loc())
        return shape_key(tuple(shape), dims,
                         self._solid(len(shape)) if self._solid is not None else ())

    def _check_one_device(self, args, specs):
        """Host and GPU arrays in one call: an error naming which is which."""
        kinds = [len(s) > 3 for s in specs if s[0] == "array"]
        if any(kinds) and not all(kinds):
            names = [(name, len(s) > 3) for name, s in zip(self.param_names, specs)
                     if s[0] == "array"]
            gpu = [f"'{n}'" for n, d in names if d]
            host = [f"'{n}'" for n, d in names if not d]
            raise ArgumentError(
                f"{self.name}(): {_listing('argument', gpu)} {_be(gpu)} on the GPU and "
                f"{_listing('argument', host)} in host memory (NumPy); a call runs "
                f"on one device: move them with cupy.asarray(...) (all "
                f"on the GPU) or cupy.asnumpy(...) (all on the host), or pass target='cuda' "
                f"or target='cpu' to have jitdl copy them", user_loc())

    def _static_value(self, name, v):
        """A static argument as a plain value (lists become tuples), or a clear error."""
        def ok(x):
            return isinstance(x, _STATIC) or (isinstance(x, (tuple, list))
                                               and all(ok(y) for y in x))
        if not ok(v):
            raise ArgumentError(
                f"{self.name}(): static argument '{name}' must be None, a bool, int, float, "
                f"str or a tuple of them, got {type(v).__name__}: {v!r}", user_loc())
        return static_value(v)

    def _target(self, specs):
        """The target a call runs on: NumPy arrays run on the CPU, GPU arrays (marked in
        their specs) on the current GPU."""
        if specs and any(len(s) > 3 and s[3] == "cuda" for s in specs):
            return self._on("cuda")
        return targets.get("cpu")

    def _on(self, target, long_rows=False):
        """The Target named `target` ("cpu", "cuda" or a Target, as target.get takes it)
        as this function compiles for it: the GPU with its rows of a symbolic length
        taken as long where the function (or `long_rows`) takes them so (a kernel shown
        for target="cuda" is the one its GPU calls run)."""
        t = targets.get(target)
        if t.name == "cuda" and (self._long_rows or long_rows) and not t.long_rows:
            return dataclasses.replace(t, long_rows=True)
        return t

    def _row_lengths(self, args, specs, target, build=None, config=None):
        """For a call on the GPU (`target`) of a definition of symbolic extents whose rows
        of a symbolic length the automatic schedule reads a block of threads each only
        where it takes them as long (schedule.gpu.symbolic_rows): a runtime.cuda.
        ByRowLength that picks the kernel for long or short rows by the call's lengths;
        else None."""
        rows = self._row_formulas(args, specs, target, config)
        if not rows or not rows["trees"]:
            return None
        return cuda_runtime.ByRowLength(rows["sizes"], rows["trees"], ROW_MIN, build)

    def _row_formulas(self, args, specs, target, config=None):
        """None where calls of these specs on `target` never pick a kernel by their rows'
        length (_row_lengths), else {"sizes": [argument position, dimension] of each size
        named, "trees": size trees of the rows' lengths (none: one kernel serves)}: from
        the disk cache's record of either kernel where it has them (no trace: 20-60 ms a
        definition), else from the traced definition."""
        if not self._by_row_length or self._long_rows or target.name != "cuda" or \
                target.long_rows or self._schedules.get("cuda") is not None:
            return None
        store = default_store()
        if store is not None:
            config = self._with_fixed(config)
            for t in (target, self._on(target, True)):
                fkey = keys.fast_key(self, specs, config, t)[0]
                rec = store.resolve_record(fkey) if fkey is not None else None
                rows = rec.get("rows") if rec else None
                if _row_formulas_valid(rows, len(specs)):
                    try:
                        cuda_runtime.ByRowLength(rows["sizes"], rows["trees"], ROW_MIN, None)
                    except (KeyError, IndexError, TypeError, ValueError):
                        continue        # (garbage in a record: traced instead)
                    return rows
        graph = self._trace(specs, args)
        params = size_params(graph)
        sizes = [[p, d] for _, p, d in params]
        try:
            trees = [pipeline.size_tree(e, [v for v, _, _ in params])
                     for e in symbolic_rows(graph, target)]
        except ArgumentError:       # (a length of other operators: one kernel serves)
            trees = []
        return {"sizes": sizes, "trees": trees}

    def _graph(self, args):
        """(traced graph, argument specs) for a call's arguments."""
        specs = self._specs(args)
        return self._trace(specs), specs

    def _trace(self, specs, args=None):
        """The traced definition for these argument specs and the current values of the
        globals, closure cells and helpers it reads (traced once, then kept); the call's
        `args`, when given, only make error messages more precise."""
        key = (repr(specs), _reads(self.pyfunc))
        graph = self._graphs.get(key) if key[1] is not None else None
        if graph is None:
            if self._captured is None:
                self._captured = capture(self.pyfunc)
            graph = trace(self._captured, specs, self.param_names, args)
            if key[1] is None:       # (what it reads, unknown: traced again next time)
                return graph
            with self._lock:
                if len(self._graphs) >= _GRAPHS_KEPT:
                    self._graphs.pop(next(iter(self._graphs)))
                self._graphs[key] = graph
        return graph

    def _options(self, specs=None):
        return pipeline.Options(self.name, self.strict_fp, settings.num_threads,
                                ones=self._ones(specs))

    def _ones(self, specs):
        """The (argument position, dimension) of the specs' symbolic sizes that may be 1
        (Options.ones: self._solid's dimensions)."""
        if self._solid is None or specs is None:
            return ()
        return tuple((n, d) for n in self._dynamic_pos if specs[n][0] == "array"
                     for d in self._solid(len(specs[n][1])) if specs[n][1][d] is None)

    def _with_fixed(self, config):
        """config with the knob values given with with_config(), None where there are none
        (what the cache keys and the schedule function are given)."""
        return {**(config or {}), **self._fixed} or None

    def _how(self, target, config):
        """The schedule arguments of the pipeline: the user's schedule function for this
        target, or the automatic one, with the knob values to use."""
        return {"schedule_fn": self._schedules.get(target.name),
                "config": self._with_fixed(config) or {}}

    def _lower(self, specs, config=None, until=None, texts=False, graph=None, target=None):
        target = self._on(target) if target is not None else self._target(specs)
        if self._fixed and (repr(specs), target.name) not in self._checked:
            space = self._space(specs, target)
            short = dataclasses.replace(target, long_rows=False) if target.name == "cuda" \
                else None
            if short is not None and self._row_lengths(None, specs, short) is not None:
                # (calls of these specs run either kernel of a ByRowLength, each taking
                # the knobs its schedule has: a knob of either one is the function's)
                other = short if target.long_rows else self._on(short, True)
                for k in self._space(specs, other).knobs.values():
                    if k.name not in space:
                        space.add(k)
            space.check(self._fixed, f"{self.name}.with_config")
            self._checked.add((repr(specs), target.name))
        return pipeline.lower(graph or self._trace(specs), target, self._options(specs),
                              **self._how(target, config), until=until, texts=texts)

    def _space(self, specs, target=None):
        """The config space of the schedule for these specs (on `target`, else where
        they run). Knobs are declared as the schedule runs, so a knob declared only under
        some value of a choice knob is found by running the schedule once more with each
        other value of it."""
        target = target or self._target(specs)
        graph, fn = self._trace(specs), self._schedules.get(target.name)

        def run(config):
            return pipeline.lower(graph, target, self._options(specs), schedule_fn=fn,
                                  config=config, until="schedule").space
        space = run({})
        for knob in list(space.knobs.values()):
            if isinstance(knob, ChoiceKnob):
                for option in knob.options[1:]:
                    try:
                        more = run({knob.name: option})
                    except JitdlError:
                        continue
                    for k in more.knobs.values():
                        if k.name not in space:
                            space.add(k)
        return space

    def _build(self, args, config=None, artifact=None, long_rows=False, rows=None):
        """A kernel for these arguments: from the disk cache when it has one, else compiled
        (and stored). With `artifact` (compiled already, e.g. by tune), only stored.
        `long_rows`: on the GPU, rows of a symbolic length taken as long (ByRowLength);
        `rows`: what picks its kernel by the rows' length (_row_formulas), kept in the
        disk cache's record of the kernel."""
        specs = self._specs(args)
        target = self._target(specs)
        if long_rows:
            target = self._on(target, long_rows)
        if target.name == "cuda":     # CuPy and a GPU, or a clear error before compiling
            try:
                cuda_runtime.backend()
            except ArgumentError as e:
                gpu = [f"'{n}'" for n, s in zip(self.param_names, specs) if len(s) > 3]
                raise ArgumentError(f"{self.name}(): {_listing('argument', gpu)} "
                                    f"{_be(gpu)} on the GPU, but {e}") from None
        store = default_store()
        event = {"call": _describe(self.param_names, specs), "result": "compiled"}
        self._events.append(event)
        fkey = fparts = rejected = spans = None
        config = self._with_fixed(config)
        if store is not None:
            fkey, fparts, spans = keys.fast_key(self, specs, config, target)
            event["fast_parts"] = fparts
            if artifact is None and fkey is not None:
                rec = store.resolve_record(fkey)
                full = rec["full"] if rec else None
                entry = store.get(full) if full else None
                # (the lines the entry names, placed where this function is now)
                kernel = self._from_entry(store, full, entry, event, specs,
                                          lambda sig: keys.placed(sig, rec.get("where"), spans))
                if entry is not None and kernel is None and not event.pop("unplaced", False):
                    rejected = full      # warned about once; not looked up again below
                if kernel is not None:
                    if rows is not None and rec.get("rows") != rows:
                        store.alias(fkey, full, self.qualname, fparts, rec.get("where"), rows)
                    event["result"] = "hit"
                    log.info("hit %s %s (%s)", self.qualname, event["call"], event["loader"])
                    return kernel
        low = None
        if artifact is None:
            t0 = time.perf_counter()
            graph = self._trace(specs, args)
            traced = time.perf_counter() - t0
            try:
                low = self._lower(specs, config, graph=graph, target=target)
            except ArgumentShapeError as e:     # (the call's sizes for the traced names)
                raise type(e)(_with_sizes(e.message, self.param_names, args), e.loc) from None
            except JitdlError:
                # a kernel for this pattern of sizes 1 takes the sizes the definition
                # makes equal as one (B's rows 1: A's columns 1 too); where this call's
                # differ, the schedule's error for it is not the call's
                _refuse_disagreeing(self.name, graph, args)
                raise
            loop_ir = low.loop_ir
            layout = [list(x) for x in low.graph.layout]
        else:
            loop_ir = artifact.texts["loop_ir"]
            layout = artifact.signature.layout
        full = None
        if store is not None:
            # (the specs too: calls of other size patterns can lower to the same loop IR
            # once sizes that must agree are merged, but check other sizes at the call)
            full, _ = keys.full_key(loop_ir, self.strict_fp,
                                    {"fname": self.name, "layout": layout,
                                     "specs": [list(s) for s in specs],
                                     **({"ones": self._ones(specs)} if self._solid else {})},
                                    target)
            kernel = None
            if full != rejected and artifact is None:
                # (made by this definition or another with the same loop IR, maybe in
                # another file: this trace's lines)
                fresh = pipeline.host_checks(low)
                kernel = self._from_entry(store, full, store.get(full), event, specs,
                                          lambda sig: keys.with_locations_of(sig, *fresh))
                event.pop("unplaced", None)
            if kernel is not None:       # same loop IR as a stored kernel: no LLVM needed
                if fkey is not None:
                    store.alias(fkey, full, self.qualname, fparts,
                                keys.relative_locations(kernel.sig, spans), rows)
                event["result"] = "hit (same loop IR)"
                log.info("hit (same loop IR) %s %s", self.qualname, event["call"])
                return kernel
            event["differs"] = self._nearest_difference(store, fparts)
            log.info("miss %s %s; %s", self.qualname, event["call"], event["differs"])
        art = artifact or pipeline.build(low, target, self._options(specs))
        sig = art.signature
        assert sig.mismatch(specs) is None, f"internal: {sig.mismatch(specs)}"
        if target.name == "cuda":
            return self._build_cuda(art, target, specs, event, store, full, fkey, fparts,
                                    traced if artifact is None else None, spans, rows)
        texts = {k: art.texts[k] for k in ("loop_ir", "llvm_ir", "llvm_ir_unoptimized")}
        if store is not None:        # (compressed once: written now, again with its library)
            texts = Texts.of(texts)
        t0 = time.perf_counter()
        kernel = Kernel(sig, engine.Loaded(art.obj, sig.symbol), texts)
        if artifact is None:         # seconds per step of this compile, for cache_info()
            event["times"] = {"trace": traced, **art.times, "load": time.perf_counter() - t0}
        event["loader"] = "mcjit"
        if store is not None:
            meta = self._entry_meta(art, target, specs, event, fparts, full)
            store.put(full, meta, art.obj, texts, fkey, fparts,
                      where=keys.relative_locations(sig, spans))
            entry = Entry(meta, art.obj, texts)
            native.link_later(art.obj, store.root,
                              lambda shared: store.add_shared(full, entry, shared))
        return kernel

    def _build_cuda(self, art, target, specs, event, store, full, fkey, fparts, traced,
                    spans, rows=None):
        """A GPU kernel from a CUDA artifact: NVRTC makes the cubin (unless the artifact
        holds one), the driver loads it; the cubin goes into the disk cache."""
        sig = art.signature
        dev = cuda_runtime.backend()
        t0 = time.perf_counter()
        binary = art.obj or dev.compile(art.texts["cuda"], art.launch["arch"], self.strict_fp)
        t1 = time.perf_counter()
        texts = {k: art.texts[k] for k in ("loop_ir", "cuda") if k in art.texts}
        kernel = cuda_runtime.CudaKernel(sig, art.launch, binary, texts, target=target)
        if traced is not None:
            event["times"] = {"trace": traced, **art.times, "nvrtc": t1 - t0,
                              "load": time.perf_counter() - t1}
        event["loader"] = "cuda module"
        if store is not None:
            meta = self._entry_meta(art, target, specs, event, fparts, full)
            store.put(full, meta, binary, texts, fkey, fparts,
                      where=keys.relative_locations(sig, spans), rows=rows)
        return kernel

    def _entry_meta(self, art, target, specs, event, fparts, full):
        """A cache entry's metadata (JSON): what the kernel is and was made for."""
        meta = {"fname": self.qualname, "signature": art.signature.to_json(),
                "call": event["call"], "specs": specs, "target": target.name,
                "schedule": art.steps, "config": art.config, "created": time.time(),
                "environment": keys.environment(target), "fast_parts": fparts, "key": full}
        if art.launch is not None:
            meta["launch"] = art.launch
        return meta

    def _from_entry(self, store, full, entry, event, specs, locate):
        """A kernel from a cache entry: its shared library through dlopen when it has one
        (linking it in the background for later processes when it has not), else its
        object code through MCJIT. None if the entry cannot be loaded, or if it is not
        the entry of this key and call (a misplaced file or alias): its code never runs.
        locate(signature): the signature with the source lines of this function, or None
        where they are not known (then None, and event["unplaced"])."""
        if entry is None:
            return None
        try:
            sig = Signature.from_json(entry.meta["signature"])
            if entry.meta.get("key") != full:
                why = f"it is stored under {full[:12]} but was made for " \
                      f"{str(entry.meta.get('key'))[:12]}"
            else:
                why = sig.mismatch(specs)
        except Exception as e:          # a damaged entry is a miss, never a crash
            why = f"unreadable metadata: {e!r}"
        if why:
            warn_once(("misfit", full, event["call"]),
                      f"jitdl: cache entry {full[:12]} does not fit the call "
                      f"{self.qualname}({event['call']}): {why}; compiling instead")
            return None
        sig = locate(sig)
        if sig is None:
            log.info("entry %s of %s: its source lines are not known for this definition",
                     full[:12], self.qualname)
            event["unplaced"] = True
            return None
        if entry.meta.get("target") == "cuda":
            try:
                kernel = cuda_runtime.CudaKernel(sig, entry.meta["launch"], entry.obj,
                                                 entry.texts, target=self._target(specs))
            except Exception as e:
                log.warning("cannot load a cached GPU kernel of %s (%s); recompiling",
                            self.qualname, e)
                return None
            event["loader"] = "cuda module"
            return kernel
        try:
            loaded = native.load(entry, sig.symbol, store.root, self.qualname)
            kernel = Kernel(sig, loaded, entry.texts)
        except Exception as e:
            log.warning("cannot load a cached kernel of %s (%s); recompiling",
                        self.qualname, e)
            return None
        if isinstance(loaded, native.SharedLoaded):
            event["loader"] = "shared library"
        else:                            # no library, or it failed: (re)link it for later
            event["loader"] = "mcjit"
            native.link_later(entry.obj, store.root,
                              lambda shared: store.add_shared(full, entry, shared))
        return kernel

    def _nearest_difference(self, store, parts):
        """Which parts of the key differ from the closest stored entry of this function."""
        best = None
        for _, rec in store.alias_records():
            if rec.get("fname") != self.qualname:
                continue
            other = rec.get("parts", {})
            diff = sorted(k for k in parts if other.get(k) != parts[k])
            if best is None or len(diff) < len(best):
                best = diff
        if best is None:
            return "no stored entry of this function"
        return "nearest stored entry differs in: " + (", ".join(best) or "nothing (damaged?)")

    def cache_info(self):
        """This process's record of compilations and cache lookups for this function; for
        the last miss, which parts of the key differ from the nearest stored entry; for a
        compilation, the seconds each step took ("times": trace, the pipeline's passes,
        load)."""
        store = default_store()
        events = [dict(e) for e in self._events]
        for e in events:
            e.pop("fast_parts", None)
        return {"function": self.qualname,
                "hits": sum(e["result"].startswith("hit") for e in events),
                "misses": sum(e["result"] == "compiled" for e in events),
                "cache_dir": store.root if store else None,
                "events": events}

    def _compile(self, args, key):
        with self._lock:
            k = self._kernels.get(key)
            if k is not None:
                return k
            config = self._configs.get(key)
            keyed = True
            if config is None:
                config, keyed = self._recorded(args)    # a tuning record of this key
                if config is not None:
                    self._configs[key] = config
            k = self._by_rows(args, config) or self._build(args, config)
            if not keyed:
                # no records' key before the trace: a module of the user's that the
                # definition imports, imported by the trace only (the records tune()
                # made after its trace are of the key it has now)
                config, _ = self._recorded(args)
                if config is not None:
                    self._configs[key] = config
                    k = self._build(args, config)
            self._kernels[key] = k
        if config is None and self.autotune and not self._fixed and not self.dynamic:
            from jitdl.autotune import background
            if self.autotune == "background":
                self._submit_background(args, key)
            elif background.in_daemon():
                pass    # (a pool's worker: the tuning failed with a warning per key)
            else:
                trials, seconds = _budget()
                try:
                    self._tune(args, trials, seconds, "xgb", _shared_runner(), 0, True)
                except Exception as e:     # noqa: BLE001 - the call runs untuned
                    tlog.warning("foreground tuning of %s(%s) failed: %s: %s", self.name,
                                 _describe(self.param_names, self._specs(args)),
                                 type(e).__name__, e)
                k = self._kernels[key]
        return k

    def kernel(self, *args, **kwargs):
        """The compiled kernel for these arguments (compiling on first use)."""
        return self._kernel_of(self._args(args, kwargs))

    def _kernel_of(self, args):
        """kernel() of bound arguments (one value per parameter, in their order)."""
        key = self._key(args)
        k = self._kernels.get(key) or self._compile(args, key)
        return k.pick(args) if isinstance(k, cuda_runtime.ByRowLength) else k

    def _by_rows(self, args, config):
        """_compile's kernel for a GPU call whose rows' length picks the kernel
        (_row_lengths), the one for this call compiled; else None."""
        specs = self._specs(args)
        target = self._target(specs)
        rows = self._row_formulas(args, specs, target, config)
        if rows is None:
            return None
        if not rows["trees"]:       # (one kernel; its record says so for later processes)
            return self._build(args, config, rows=rows)

        def build(a, long_rows):
            with self._lock:
                return self._build(a, config, long_rows=long_rows, rows=rows)
        k = cuda_runtime.ByRowLength(rows["sizes"], rows["trees"], ROW_MIN, build)
        k.pick(args)
        return k

    # -- inspection -------------------------------------------------------------------------
    def lower(self, *args, after=_Default(None), target=_Default(None), **kwargs):
        """The loop IR of the specialisation for these arguments; with `after=` the text
        after that pass of the pipeline (see `passes()`): e.g. after="lower" shows the
        loop nests before simplification, after="codegen" the LLVM IR (the CUDA C with
        target="cuda"). `target=` lowers for that target instead of the arguments' own
        ("cuda" with NumPy arrays of the intended shapes works without a GPU)."""
        after, target = self._own(Function.lower, kwargs, after=after, target=target)
        if after is None and target is None:
            return Text(self.kernel(*args, **kwargs).texts["loop_ir"])
        after = after or "verify"
        return Text(self._stage_texts(args, kwargs, after, target)[0][after])

    def cuda_source(self, *args, **kwargs):
        """The CUDA C of the specialisation for these arguments (NumPy or CuPy arrays, or
        scalars, of the intended shapes and dtypes): its kernels, and in a comment at the
        top how each is launched. Generating it needs no GPU."""
        return Text(self._stage_texts(args, kwargs, "codegen", "cuda")[0]["codegen"])

    def _for_rows(self, args, specs, target):
        """`target` as the kernel for these arguments' rows has it, where calls pick one
        by their rows' length (_row_lengths: the long rows' kernel or the short ones')."""
        rows = self._row_lengths(args, specs, target)
        return target if rows is None else self._on(target, rows.long(args))

    def _stage_texts(self, args, kwargs, until=None, target=None):
        """(text after each pass, seconds of each pass) from a fresh run of the pipeline
        (nothing stored), for the arguments' target or `target`."""
        args = self._args(args, kwargs)
        specs = self._specs(args)
        target = self._for_rows(args, specs, self._on(target) if target is not None
                                else self._target(specs))
        loop_until = until if until in pipeline.LOOP_PASSES else None
        config = self._configs.get(self._key(args)) if target == self._target(specs) else None
        low = self._lower(specs, config, loop_until, texts=True, target=target)
        texts, times = dict(low.texts), low.times
        if until is None or until in pipeline.BUILD_PASSES:
            art = pipeline.build(low, target, self._options(specs), until=until)
            if target.name == "cuda":
                texts["codegen"] = art.texts["cuda"]
            else:
                texts["codegen"] = art.texts["llvm_ir_unoptimized"]
            if "llvm_ir" in art.texts:
                texts["optimize"] = art.texts["llvm_ir"]
            times = art.times
        if until is not None and until not in texts:
            raise ArgumentError(f"{self.name}.lower(after=...): no pass named {until!r}; "
                                f"the passes: {', '.join(pipeline.PASSES)}")
        return texts, times

    def passes(self, *args, **kwargs):
        """The pipeline's passes for these arguments, in order, with the time each took
        on a fresh run and the size of its output; `lower(..., after=name)` shows one."""
        texts, times = self._stage_texts(args, kwargs)
        lines = [f"{'pass':<16} {'ms':>8}  output"]
        for name in pipeline.PASSES:
            text = texts.get(name, "")
            what = f"{text.count(chr(10)) + 1} lines" if text else ""
            lines.append(f"{name:<16} {times.get(name, 0) * 1e3:8.2f}  {what}")
        lines.append(f"{'total':<16} {sum(times.values()) * 1e3:8.2f}")
        return Text("\n".join(lines))

    def llvm_ir(self, *args, optimized=_Default(True), **kwargs):
        """The LLVM IR (optimised by default) of the specialisation for these arguments."""
        (optimized,) = self._own(Function.llvm_ir, kwargs, optimized=optimized)
        k = self._cpu_kernel("llvm_ir", self._args(args, kwargs))
        return Text(k.texts["llvm_ir" if optimized else "llvm_ir_unoptimized"])

    def asm(self, *args, **kwargs):
        """The host assembly of the specialisation for these arguments."""
        k = self._cpu_kernel("asm", self._args(args, kwargs))
        return Text(engine.assembly(k.texts["llvm_ir"]))

    def _cpu_kernel(self, what, args):
        k = self._kernel_of(args)
        if isinstance(k, cuda_runtime.CudaKernel):
            raise ArgumentError(f"{self.name}.{what}(): these arguments run on the GPU, whose "
                                f"code is CUDA C: see {self.name}.cuda_source(...)")
        return k

    def schedule_of(self, *args, **kwargs):
        """The schedule (steps and loop structure) for these arguments."""
        args = self._args(args, kwargs)
        specs = self._specs(args)
        low = self._lower(specs, self._configs.get(self._key(args)), until="schedule",
                          target=self._for_rows(args, specs, self._target(specs)))
        return low.schedule

    def config_space(self, *args, target=_Default(None), **kwargs):
        """The knobs of the schedule (the user's for the target, or the automatic one)
        for these arguments: len() configs, iterable, .sample(n, seed=...). A knob that
        the schedule declares only for some value of a choice knob is in the space; in a
        config where it does not apply, its value is not used. `target=` ("cpu" or
        "cuda") gives that target's space instead of the arguments' own (the GPU's knobs
        from NumPy arrays of the intended shapes, on any machine)."""
        (target,) = self._own(Function.config_space, kwargs, target=target)
        args = self._args(args, kwargs)
        specs = self._specs(args)
        target = self._for_rows(args, specs, self._on(target) if target is not None
                                else self._target(specs))
        return self._space(specs, target)

    def timeit(self, *args, repeat=_Default(7), min_time=_Default(0.05), **kwargs):
        """Median seconds per call, after a warm-up, over `repeat` timed batches: a float
        that prints with units (`1.23 ms ± 0.05 ms (median of 7 batches of 100 calls)`);
        see Timing."""
        repeat, min_time = self._own(Function.timeit, kwargs, repeat=repeat,
                                      min_time=min_time)
        # (repeat=0 was a ZeroDivisionError, repeat=-1 a nan with NumPy's warnings)
        ints, numbers = (int, np.integer), (int, float, np.integer, np.floating)
        if isinstance(repeat, bool) or not isinstance(repeat, ints) or repeat < 1:
            raise _bad_value(f"{self.name}.timeit", "repeat", "an int >= 1", repeat, ints)
        if isinstance(min_time, bool) or not isinstance(min_time, numbers) \
                or not min_time >= 0:
            raise _bad_value(f"{self.name}.timeit", "min_time", "a number of seconds >= 0",
                             min_time, numbers)
        args = self._args(args, kwargs)
        return _median_time(self._kernel_of(args), args, repeat, min_time)

    def export(self, *example_args, **kwargs):
        """f.export(path, *args, **kwargs): write the compiled kernel for these arguments,
        with its signature, to one file that `jd.load(path)` runs in a process that never
        sees this source. `path=` names the file too, unless the definition has a
        parameter of that name (then path= is its argument and the file comes first)."""
        from jitdl.cache import export     # lazy: only exports need it
        if "path" in kwargs and "path" not in self.param_names:
            path = kwargs.pop("path")
        elif example_args:
            path, example_args = example_args[0], example_args[1:]
        else:
            raise ArgumentError(f"{self.name}.export(): missing the file to write: "
                                f"{self.name}.export(path, *args)", user_loc())
        example_args = self._args(example_args, kwargs)
        k = self._cpu_kernel("export", example_args)
        kernels = {self._key(example_args): (self._specs(example_args), k)}
        refused = {}
        for args in self._size_patterns(example_args):
            key = self._key(args)
            if key in kernels or key in refused:
                continue
            try:
                kernels[key] = (self._specs(args), self._cpu_kernel("export", args))
            except JitdlError as e:       # (sizes this definition refuses: no kernel)
                log.info("export %s: no kernel for %s: %s", self.qualname,
                         _describe(self.param_names, self._specs(args)), e)
                refused[key] = (self._specs(args), e)
        export.write(path, self.name, list(kernels.values()), self.signature,
                     list(refused.values()))
        return path

    def _size_patterns(self, args):
        """Arguments like `args` in every other pattern of sizes 1 of the dynamic arrays'
        symbolic dimensions (each pattern is a kernel of its own, as broadcasting is part of
        the key), for an export: a loaded export cannot compile, and a call of size 1 there
        (X of shape (1, n), a batch of one) needs its pattern's kernel. At most
        EXPORT_PATTERNS, the patterns with fewest dimensions of size 1 first. The arrays
        are views of one element (only their shapes and dtypes are read)."""
        dims = []                       # (position, dimension) of each symbolic dimension
        for n in self._dynamic_pos:
            a = args[n]
            if type(a) is not np.ndarray:
                continue
            which = self._dims.get(n, True)
            solid = self._solid(a.ndim) if self._solid is not None else ()
            dims += [(n, d) for d in range(a.ndim) if (which is True or d in which
                     or d - a.ndim in which) and d not in solid]
        if not dims:
            return []
        import itertools
        out = []
        for ones in range(len(dims) + 1):
            for chosen in itertools.combinations(dims, ones):
                if len(out) >= EXPORT_PATTERNS:
                    warnings.warn(
                        f"{self.name}.export(): {len(dims)} symbolic dimensions make "
                        f"{2 ** len(dims)} patterns of sizes 1; the export holds kernels "
                        f"for the first {EXPORT_PATTERNS} (fewest dimensions of size 1); "
                        f"dynamic= naming only the dimensions that vary (dynamic={{'X': 0}}: "
                        f"the batch) makes fewer", PerformanceWarning, stacklevel=3)
                    return out
                shapes = {n: list(args[n].shape) for n, _ in dims}
                for n, d in dims:           # (a size of 1 in the example: another)
                    shapes[n][d] = shapes[n][d] if shapes[n][d] != 1 else 2
                for n, d in chosen:
                    shapes[n][d] = 1
                new = list(args)
                for n, shape in shapes.items():
                    new[n] = np.broadcast_to(np.zeros((), args[n].dtype), tuple(shape))
                out.append(tuple(new))
        return out

    # -- tuning -----------------------------------------------------------------------------
    def tune(self, *args, trials=_Default(200), timeout=_Default(None),
             tuner=_Default("xgb"), runner=_Default(None), seed=_Default(0),
             progress=_Default(True), **kwargs):
        """Search the schedule's knobs for these arguments: `trials` candidates (the
        default's measurement included) or `timeout` seconds, whichever ends first (the
        timeout covers the whole run, the closing re-timing included: a candidate still
        being built or timed at its end is cancelled, and is no trial), proposed
        by `tuner` ("xgb": a cost model, "random", "grid", "ga"), built and timed in worker
        processes (`runner`: None for this machine's, a jd.tune.LocalRunner, a dask
        Client or a jd.tune.DaskRunner). A candidate counts only if its output matches the
        default schedule's on fresh random inputs. Every trial goes into the tuning
        records; the best verified config is used from now on, in this process and (by
        its record) in every later one. Returns a TuneResult (it unpacks as
        `config, seconds`)."""
        trials, timeout, tuner, runner, seed, progress = self._own(
            Function.tune, kwargs, trials=trials, timeout=timeout, tuner=tuner, runner=runner,
            seed=seed, progress=progress)
        _check_tune_arguments(self.name, trials, timeout, tuner, runner, seed)
        if self.dynamic:
            raise ArgumentError(
                f"{self.name}.tune(): tuning works on concrete shapes, and {self.name} is "
                f"dynamic in {', '.join(self.dynamic)}; tune a copy made without dynamic=")
        args = self._args(args, kwargs)
        own = runner is None or _is_dask_client(runner)
        import multiprocessing        # (not at import: importing jitdl starts no machinery)
        from jitdl.autotune.measure import LocalRunner, get_runner
        if (runner is None or isinstance(runner, LocalRunner)) and \
                multiprocessing.current_process().daemon:
            raise JitdlError(
                f"{self.name}.tune(): this is a daemonic process (a multiprocessing pool's "
                f"worker), which cannot start the worker processes that build and time "
                f"candidates; tune in the main process (its record is applied here), or "
                f"pass runner= a dask Client", user_loc())
        run = get_runner(runner)
        try:
            return self._tune(args, trials, timeout, tuner, run, seed, progress)
        finally:
            if own:
                run.close()

    def _tune(self, args, trials, timeout, tuner, runner, seed, progress, stop=None,
              on_better=None, on_trial=None, key=None):
        from jitdl.autotune import search
        from jitdl.autotune.records import CONFIRM
        from jitdl.autotune.task import Measurement, Task, work_of
        generation = self._generation
        # (a background job's key is its call's: its arrays are made from Sketches)
        key, specs = key if key is not None else self._key(args), self._specs(args)
        target = self._target(specs)
        graph = self._trace(specs, args)
        task = Task(self.name, graph, target, self._options(specs),
                    self._schedules.get(target.name), self._tunable_space(specs),
                    [cuda_runtime.backend().to_host(a) if is_device_array(a) else a
                     for a in args],        # (host copies: a task pickles anywhere)
                    work_of(graph), key=self.qualname)
        rkey = self._record_key(specs, target)
        db = _records() if rkey[0] is not None else None
        if rkey[0] is None:
            tlog.info("%s(%s): no tuning records: the definition reads a value nested too "
                      "deep for its key", self.qualname, _describe(self.param_names, specs))
        history = [] if db is None else [
            (r.features, r.throughput) for r in db.history(rkey[0], rkey[2], rkey[1])
            if r.features is not None]
        kind = tuner if isinstance(tuner, str) else type(tuner).__name__

        def trial(n, m):
            if db is not None and not (m.error or "").startswith("stopped:"):
                # (not cut short; with the file locked by another process's write, kept
                # to write later: a trial does not wait for it)
                db.add_queued([_record(self, rkey, target, task, m, kind, n)])
            if on_trial is not None:
                on_trial(n, m)
        try:
            result = search.search(task, trials, runner, tuner, timeout, seed,
                                   history or None, on_trial=trial, on_better=on_better,
                                   stop=stop, progress=progress,
                                   call=_describe(self.param_names, specs))
            if db is not None:        # what a later process applies: the kernel chosen here
                db.add_queued([_record(self, rkey, target, task,
                                       Measurement(c, s, verified=True), CONFIRM, 0)
                               for c, s in result.retimed()])
        finally:
            if db is not None:
                db.flush()            # (what waited: a warning counts any not saved)
        self._tunings.append(result)
        artifact = result.artifact or next(
            (m.artifact for m in result.measurements if m.ok and m.verified
             and m.config == result.config), None)
        if result.improved and artifact is not None and generation == self._generation:
            self._install(args, key, result.config, artifact, generation)
        return result

    def _install(self, args, key, config, artifact, generation):
        """Make a tuned kernel the one in use for `key`: into the dispatch table (one dict
        assignment: calls in flight keep theirs), into the disk cache under the key's
        config, and the default's cache entry for this key out (one entry per key). Not
        when recompile() or a new schedule came since the tuning began (`generation`)."""
        kernel = self._build(args, config, artifact=artifact)
        with self._lock:
            if generation != self._generation:
                return kernel
            self._configs[key] = config
            self._kernels[key] = kernel
        store = default_store()
        if store is not None and not self._fixed:
            specs = self._specs(args)
            fkey, _, _ = keys.fast_key(self, specs, None, self._target(specs))
            if fkey is not None:
                store.discard(fkey)
        return kernel

    def _tunable_space(self, specs):
        """The config space, with the knobs fixed by with_config() narrowed to their value."""
        space = self._space(specs)
        for name, value in self._fixed.items():
            knob = space.knobs.get(name)
            if knob is not None:
                space.knobs[name] = dataclasses.replace(
                    knob, options=(value,), **({"default": value} if
                                               hasattr(knob, "extent") else {}))
        return space

    def _record_key(self, specs, target):
        """(definition, signature, target) of this function's tuning records: digests of
        what the fast key reads of the definition (its code and traced text, what it
        reads less index notation's names, its schedule function, its options) and the
        knobs with_config() fixed (a copy's records are its own); the argument specs; the
        target's environment (processor, versions, jitdl's own files). The definition is
        None where the fast key has none (a value read nested too deep to see): records
        made for one value of it would apply to another, so none are kept or applied."""
        fkey, parts, _ = keys.fast_key(self, specs, None, target)
        fixed = json.dumps(self._fixed, sort_keys=True, default=repr)
        definition = None if fkey is None else keys.digest(
            parts["source"], parts["dependencies"], parts["schedule"], parts["options"],
            fixed)
        return definition, json.dumps(specs), parts["environment"]

    def _recorded(self, args):
        """The config of the best verified tuning record of this call's key, checked
        against today's config space; None if there is none or it no longer fits. With
        whether the definition had a records' key (none: a value read too deep to see,
        or a module of the user's it imports not imported yet)."""
        db = _records(create=False)
        if db is None:
            return None, True
        specs = self._specs(args)
        target = self._target(specs)
        rkey = self._record_key(specs, target)
        rec = db.best(*rkey) if rkey[0] is not None else None
        if rec is None:
            return None, rkey[0] is not None
        try:
            self._space(specs).check(rec.config, "tuning record")
        except ScheduleError as e:
            tlog.info("ignoring the tuning record of %s(%s): %s", self.qualname,
                      _describe(self.param_names, specs), e)
            return None, True
        tlog.info("applying the tuning record of %s(%s): %s (%.3g s, %s)", self.qualname,
                  _describe(self.param_names, specs), rec.config, rec.seconds, rec.tuner)
        return rec.config, True

    def tuning_records(self, *args, **kwargs):
        """The tuning records of this function (every trial, and the side-by-side
        re-timings at the end of each run, tuner "confirm"; best first, as a later compile
        applies them): of the key of these arguments when given, else of every key, for
        this definition and target."""
        db = _records(create=False)
        if db is None:
            return []
        if args or kwargs:
            specs = self._specs(self._args(args, kwargs))
            d, sig, tgt = self._record_key(specs, self._target(specs))
            recs = db.query(definition=d, signature=sig, target=tgt) if d else []
        else:
            d, _, tgt = self._record_key([], self._target(None))
            recs = db.query(function=self.qualname, definition=d, target=tgt) if d else []
        from jitdl.autotune.records import CONFIRM    # (records are loaded by now)
        return sorted(recs, key=lambda r: (r.seconds is None, not (r.verified and
                                                                   r.tuner == CONFIRM),
                                           r.seconds or 0.0))

    def tuning_status(self):
        """What background tuning is doing for this function: one dict per key (its call,
        state: queued/tuning/done/failed/stopped, trials, best and default seconds,
        speed-up, kernels swapped in)."""
        return [job.summary() for job in list(self._jobs.values())]   # (others add jobs)

    def tuning_curve(self):
        """A matplotlib figure of best-so-far throughput against trials, one line per
        tuning run of this process (label: tuner and call). Needs matplotlib."""
        try:
            import matplotlib
            matplotlib.use(matplotlib.get_backend())
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("f.tuning_curve() needs matplotlib (pip install matplotlib)") \
                from None
        fig = Figure(figsize=(6, 4))
        ax = fig.add_subplot()
        for r in self._tunings:
            curve = r.curve()
            ax.plot(range(1, len(curve) + 1), curve, label=f"{r.tuner}: {r.call}")
        unit = self._tunings[-1].unit if self._tunings else "GFLOP/s"
        ax.set_xlabel("trials")
        ax.set_ylabel(f"best {unit}")
        ax.set_title(f"tuning {self.name}")
        if self._tunings:
            ax.legend(fontsize="small")
        return fig

    def _submit_background(self, args, key):
        from jitdl.autotune import background
        from jitdl.autotune.measure import Sketch
        # (what tuning needs of an array, not the array: see Sketch)
        kept = [Sketch.of(a) if isinstance(a, np.ndarray) else
                Sketch.of(a, cuda_runtime.backend().to_host)
                if is_device_array(a) else a for a in args]
        job = background.Job(self, key, kept, _describe(self.param_names, self._specs(args)),
                             budget=_budget())
        self._jobs[key] = job
        background.get().submit(job)

    def _tune_job(self, job, runner, stop):
        """Run one background job (on the tuner's thread): each verified better kernel is
        swapped into the dispatch table as soon as it is found."""
        from jitdl.autotune import measure
        generation = self._generation

        def better(m):
            kernel = measure.kernel_of(m)
            with self._lock:
                if generation != self._generation:   # recompiled since: a stale kernel
                    return
                self._configs[job.key] = m.config
                self._kernels[job.key] = kernel       # atomic: the next call takes it
            job.best_seconds = m.seconds
            job.swaps += 1
            tlog.info("background tuning of %s(%s): swapped in %s (%.3g s)", self.name,
                      job.call, m.config, m.seconds)

        def trial(n, m):
            job.trials, job.failed = n, job.failed + (not m.ok)
            if n == 1:
                job.default_seconds = m.seconds
        original = self._kernels.get(job.key)
        trials, seconds = job.budget
        args = [(cuda_runtime.backend().from_host(a.array()) if a.device else a.array())
                if isinstance(a, measure.Sketch) else a for a in job.args]
        job.result = r = self._tune(args, trials, seconds, "xgb", runner, 0, False,
                                    stop=stop, on_better=better, on_trial=trial, key=job.key)
        job.default_seconds = r.default_seconds
        job.best_seconds = r.seconds
        if r.stopped == "the default's failure":    # the job failed: say why (a warning)
            raise JitdlError(
                f"{r.measurements[0].error} (a background job tunes on arrays made from "
                f"the value range of each argument on its own; where the definition needs "
                f"them as the call had them, tune with {self.name}.tune(...) on them)")
        if job.swaps and not r.improved and original is not None:
            with self._lock:             # timed again side by side, the default won
                if generation == self._generation:
                    self._configs.pop(job.key, None)
                    self._kernels[job.key] = original

    def with_config(self, **values):
        """A copy of this function whose schedule knobs take the given values (a name
        that is not a knob of the schedule is an error at the first call)."""
        f = Function(self.pyfunc, self.strict_fp, self.autotune, self.name, self.static,
                     self._dynamic_arg(), self._solid)
        f._schedules = dict(self._schedules)
        f._long_rows, f._by_row_length = self._long_rows, self._by_row_length
        f._fixed = {**self._fixed, **values}
        return f

    def recompile(self):
        """Forget compiled kernels and traces: the next call traces again, reading the
        current values of the globals the definition uses."""
        with self._lock:
            self._kernels.clear()
            self._graphs.clear()
            self._captured = None
            self._configs.clear()        # a tuned config is found again by its record
            self._generation += 1

    def __repr__(self):
        return f"<jitdl.compute {self.name}{self.signature}: {len(self._kernels)} compiled>"

    def __reduce__(self):
        """Pickled by name where its module has it under its name (a process pool, dask:
        the other side imports it; a with_config copy of it as that name and the copy's
        knob values), else as its Python function, options, schedules and
        knob values (cloudpickle sends the function by value), with the lines of its
        source file (a worker on another machine has no such file, and index notation is
        read from the source); never its kernels, which the other side compiles or finds
        in its disk cache. A function of `__main__` goes by value inside cloudpickle's
        bytes (a plain pickle cannot send it by value), and the other side takes its own
        `__main__`'s where that is the same definition (a spawned process pool)."""
        module = sys.modules.get(self.__module__)
        found = module
        for part in self.__qualname__.split("."):
            found = getattr(found, part, None)
        options = self._arguments()
        if self.__module__ != "__main__":
            if found is self:
                return _by_name, (self.__module__, self.__qualname__)
            if isinstance(found, Function) and found.pyfunc is self.pyfunc \
                    and found._schedules == self._schedules and found._arguments() == options:
                # a with_config copy of the module's function: that function by name and
                # these knob values (its Python function, which pickles by name, is not
                # the module's attribute of that name: a plain pickle refuses it)
                return _by_name_with_config, (self.__module__, self.__qualname__,
                                              dict(self._fixed))
        value = (self.pyfunc, options, dict(self._schedules), dict(self._fixed))
        code = getattr(self.pyfunc, "__code__", None)
        source = None
        if code is not None:
            source = (code.co_filename, tuple(
                linecache.getlines(code.co_filename, getattr(self.pyfunc, "__globals__", None))))
        if self.__module__ == "__main__":
            import cloudpickle
            # the other side may take its `__main__`'s own function only for that very
            # function here: a copy (with_config) has knob values of its own
            where = (code.co_filename, code.co_firstlineno) \
                if code is not None and found is self else None
            busy = _PICKLING.__dict__.setdefault("ids", set())
            if id(self) in busy:            # (it refers to itself: see below)
                raise _SelfReference
            busy.add(id(self))
            try:
                payload = cloudpickle.dumps(value)
            except _SelfReference:
                # a schedule or global of it names it: a cycle that bytes made apart from
                # this pickle cannot hold; by name, as a process pool needs
                return _by_name, (self.__module__, self.__qualname__)
            finally:
                busy.discard(id(self))
            return _from_main, (self.__qualname__, where, payload, source)
        return _rebuilt, value + (source,)


def _by_name(module, qualname):
    found = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def _by_name_with_config(module, qualname, fixed):
    f = _by_name(module, qualname).with_config()
    f._fixed = fixed
    return f


class _SelfReference(Exception):
    """A `__main__` function met again while its own value is pickled."""


_PICKLING = threading.local()


def _rebuilt(pyfunc, options, schedules, fixed, source=None):
    if source is not None:
        _known_source(*source)
        code = getattr(pyfunc, "__code__", None)
        if code is not None and code.co_filename != source[0]:
            # (cloudpickle names a function's file "<dynamic-code>": index notation is
            # read from the file the code says it came from)
            pyfunc.__code__ = code.replace(co_filename=source[0])
    f = Function(pyfunc, **options)
    f._schedules, f._fixed = schedules, fixed
    return f


_FROM_MAIN = weakref.WeakValueDictionary()      # digest of a pickled payload -> Function


def _from_main(qualname, where, payload, source):
    """A `__main__` function unpickled: this process's own where its `__main__` has that
    definition (same file and line), else the one sent by value (one per payload, so a
    pool's tasks share its kernels)."""
    found = sys.modules.get("__main__")
    for part in qualname.split("."):
        found = getattr(found, part, None)
    code = getattr(getattr(found, "pyfunc", None), "__code__", None)
    if isinstance(found, Function) and code is not None and where is not None \
            and (code.co_filename, code.co_firstlineno) == tuple(where):
        return found
    key = hashlib.sha256(payload).digest()
    f = _FROM_MAIN.get(key)
    if f is None:
        import cloudpickle
        f = _FROM_MAIN[key] = _rebuilt(*cloudpickle.loads(payload), source)
    return f


def _known_source(filename, lines):
    """The lines of a pickled function's source file, for linecache where this machine
    has no such file or another version of it (index notation is read from the source;
    linecache keeps an entry without a modification time as it is)."""
    lines = list(lines)
    if lines and linecache.getlines(filename) != lines:
        linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)


def _refuse_disagreeing(fname, graph, args):
    """ArgumentShapeError, as the kernel's check at the call words it, where the call's
    arguments differ in sizes that the definition makes equal; else nothing."""
    from jitdl.lower.lower import definition_agreements
    try:
        agree = definition_agreements(graph)
    except JitdlError:
        return
    refuse_disagreeing(fname, agree, args)


def _row_formulas_valid(rows, n_args):
    """Whether `rows` (a disk cache record's, JSON) has the form Function._row_formulas
    gives: anything else is read as no record."""
    return isinstance(rows, dict) and isinstance(rows.get("trees"), list) and \
        isinstance(rows.get("sizes"), list) and all(
            isinstance(s, list) and len(s) == 2 and all(type(v) is int for v in s)
            and 0 <= s[0] < n_args for s in rows["sizes"])


def _with_sizes(message, names, args):
    """message with the symbolic sizes of the arguments (`X_n0`, as a shape traced with
    some sizes symbolic prints them) replaced by this call's: `X (X_n0, 4)` reads `X (5,
    4)`."""
    for name, a in zip(names, args):
        for d, n in enumerate(getattr(a, "shape", ())):
            message = re.sub(rf"\b{re.escape(name)}_n{d}\b", str(n), message)
    return message


def _listing(noun, names):
    """'argument 'A'' or 'arguments 'A', 'B''."""
    return f"{noun}{'s' if len(names) != 1 else ''} {', '.join(names)}"


def _be(names):
    return "is" if len(names) == 1 else "are"


def _records(create=True):
    """The tuning records (jitdl.autotune.records) at JITDL_TUNING_DB or the user data
    directory; None when records are off (JITDL_TUNING_DB=0) or, with create=False, when
    no record was ever written there (the common first-call case costs one stat)."""
    path = tuning_db()
    if path is None or (not create and not os.path.exists(path)):
        return None
    from jitdl.autotune import records      # (after the stat: a first call stays cheap)
    return records.shared(path)


def _record(f, rkey, target, task, m, tuner, trial):
    from jitdl.autotune.records import Record
    definition, signature, env = rkey
    return Record(function=f.qualname, definition=definition, signature=signature,
                  target=env, target_name=f"{target.name} {getattr(target, 'cpu', '')}".strip(),
                  jitdl=__version__, config=m.config, seconds=m.seconds,
                  throughput=task.throughput(m.seconds), unit=task.unit, verified=m.verified,
                  error=m.error, tuner=tuner, trial=trial, created=time.time(),
                  features=None if m.features is None else [float(x) for x in m.features])


def _check_tune_arguments(name, trials, timeout, tuner, runner, seed=0):
    """An ArgumentError for a tune() argument of the wrong kind, before any process starts."""
    from jitdl.autotune.tuner import KINDS
    def bad(arg, expected, value):
        return ArgumentError(f"{name}.tune({arg}=...): expected {expected}, got "
                             f"{type(value).__name__}: {value!r}", user_loc())
    if isinstance(trials, bool) or not isinstance(trials, (int, np.integer)) or trials < 1:
        raise bad("trials", "a positive int", trials)
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(
            timeout, (int, float, np.integer, np.floating)) or not timeout > 0):
        raise bad("timeout", "None or a positive number of seconds", timeout)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise bad("seed", "an int >= 0", seed)
    # (a class has its instances' methods: runner=jd.tune.LocalRunner failed deep in the
    # search with "measure() missing 1 required positional argument: 'configs'")
    named = isinstance(tuner, str) and tuner in KINDS
    if not (named or not isinstance(tuner, type) and all(
            hasattr(tuner, a) for a in ("next_batch", "update", "has_next"))):
        raise bad("tuner", f"one of {', '.join(map(repr, KINDS))} or a Tuner"
                           + _instance_hint(tuner), tuner)
    # (a scheduler address has a port: 'tcp://host:8786', 'host:8786'; a word is a typo,
    # which dask would try to reach for its whole connect timeout)
    if not (runner is None or isinstance(runner, str) and ":" in runner
            or _is_dask_client(runner)
            or not isinstance(runner, type) and hasattr(runner, "measure")):
        raise bad("runner", "None, a jd.tune.LocalRunner, a jd.tune.DaskRunner, a dask "
                            "Client or a scheduler address ('tcp://host:port')"
                            + _instance_hint(runner), runner)


def _instance_hint(value):
    """' (an instance: X(...))' for a class given where its instance is expected."""
    return f" (an instance: {value.__name__}(...))" if isinstance(value, type) else ""


def _budget():
    """(trials or None, seconds or None) that autotune= spends on a key (JITDL_TUNE_BUDGET)."""
    from jitdl.autotune.background import parse_budget
    return parse_budget(settings.tune_budget)


_runner = []


def _shared_runner():
    """One runner for autotune="foreground" (its worker processes start once)."""
    if not _runner:
        from jitdl.autotune.measure import LocalRunner
        _runner.append(LocalRunner())
    return _runner[0]


def _is_dask_client(x):
    return type(x).__module__.startswith("distributed")


def _reads(pyfunc):
    """A digest of what a definition reads besides its arguments (the disk cache key's
    part): a graph traced with other values of its globals is not reused."""
    try:
        return keys.code_digests(pyfunc, whole=True)
    except Exception:                # a value the digest cannot read (whole): None, a
        return None                  # graph that is not kept


def _dynamic_dims(fname, dynamic):
    """{name: True (every dimension) or a sorted tuple of dimensions} of a dynamic= dict,
    each value checked (an int, a tuple or list of ints, or True)."""
    def index(x):       # (NumPy's integers too, as its axis= takes them)
        return None if isinstance(x, (bool, np.bool_)) else operator.index(x)
    dims = {}
    for name, d in dynamic.items():
        if d is True:
            dims[name] = True
            continue
        try:
            ds = (index(d),) if not isinstance(d, (tuple, list)) else tuple(map(index, d))
        except TypeError:
            ds = (None,)
        if None in ds:
            raise ArgumentError(
                f"@jd.compute(dynamic=...): the dimensions of {fname}'s {name!r} must be "
                f"an int, a tuple of ints or True (every dimension), got {d!r}")
        dims[name] = tuple(sorted(set(ds)))
    return dims


def _binding_problem(signature, args, kwargs):
    """What is wrong with calling a function of this signature with these arguments (a
    call that signature.bind refused), in words that name the arguments."""
    P = inspect.Parameter
    params = signature.parameters
    kinds = {p.kind for p in params.values()}
    unknown = [k for k in kwargs if k not in params or params[k].kind == P.POSITIONAL_ONLY]
    def listed(names):
        return ", ".join(repr(n) for n in names)
    if unknown and P.VAR_KEYWORD not in kinds:
        return (f"got an unexpected keyword argument {listed(unknown)}" if len(unknown) == 1
                else f"got unexpected keyword arguments {listed(unknown)}")
    positional = [n for n, p in params.items()
                  if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    if len(args) > len(positional) and P.VAR_POSITIONAL not in kinds:
        named = [n for n, p in params.items() if p.kind == P.KEYWORD_ONLY]
        return (f"takes {len(positional)} positional argument"
                f"{'s' * (len(positional) != 1)} but {len(args)} were given" + (
                    f" ({listed(named)} {'is' if len(named) == 1 else 'are'} keyword-only: "
                    f"pass {', '.join(n + '=...' for n in named)})" if named else ""))
    twice = [n for n in positional[:len(args)] if n in kwargs]
    if twice:
        return f"got two values for argument {twice[0]!r}: by position and by keyword"
    given = set(positional[:len(args)]) | set(kwargs)
    missing = [n for n, p in params.items() if n not in given and p.default is P.empty
               and p.kind not in (P.VAR_POSITIONAL, P.VAR_KEYWORD)]
    if missing:
        return f"is missing the argument{'s' * (len(missing) > 1)} {listed(missing)}"
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        return f"cannot take these arguments ({e})"
    return "cannot take these arguments"


def _describe(names, specs):
    """`A: float32[512, 256], n: int64` for messages and cache listings."""
    out = []
    for name, s in zip(names, specs):
        if s[0] == "array":
            gpu = " (GPU)" if len(s) > 3 else ""
            out.append(f"{name}: {s[2]}[{', '.join(map(str, s[1]))}]{gpu}")
        elif s[0] == "static":
            out.append(f"{name}={s[1]!r}")
        else:
            out.append(f"{name}: {s[1]}{' (python)' if s[2] else ''}")
    return ", ".join(out)


def _median_time(k, args, repeat, min_time):
    """Median seconds per call of kernel k, after a warm-up, over `repeat` batches of
    calls that each take about min_time / repeat. Kernels compiled just before are first
    linked and stored: the background linker took a core from the timed calls (the
    quickstart's first run after an install timed softmax at 2.3 ms, later ones 0.8)."""
    native.drain()
    sync = getattr(k, "synchronize", None) or (lambda: None)   # GPU kernels run async
    k(args)
    sync()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            k(args)
        sync()
        if time.perf_counter() - t0 >= min_time / repeat or number >= 1 << 20:
            break
        number *= 4
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            k(args)
        sync()
        times.append((time.perf_counter() - t0) / number)
    return Timing(float(np.median(times)), times, number)


class Timing(float):
    """Seconds per call: a float (compare it, compute with it, float() it) that prints
    with units, `1.23 ms ± 0.05 ms (median of 7 batches of 100 calls)`. `times` holds
    each batch's seconds per call, `spread` their median absolute deviation (the ±)."""

    def __new__(cls, seconds, times=(), number=1):
        self = super().__new__(cls, seconds)
        self.times = tuple(float(t) for t in times)
        self.number = number
        return self

    @property
    def spread(self):
        if not self.times:
            return 0.0
        return float(np.median(np.abs(np.array(self.times) - float(self))))

    def __repr__(self):
        s = float(self)
        if not self.times:
            return _with_unit(s)
        calls = f" of {self.number} call{'s' * (self.number != 1)}" if self.number else ""
        return (f"{_with_unit(s)} ± {_with_unit(self.spread, like=s)} (median of "
                f"{len(self.times)} batch{'es' * (len(self.times) != 1)}{calls})")

    __str__ = __repr__

    def __reduce__(self):
        return (Timing, (float(self), self.times, self.number))


def _with_unit(seconds, like=None):
    """3 significant digits in the unit that suits `like` (default: the value itself)."""
    ref = abs(seconds if like is None else like)
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if ref >= scale or unit == "ns":
            r = ref / scale
            digits = 2 if r < 10 else 1 if r < 100 else 0
            return f"{seconds / scale:.{digits}f} {unit}"


def warm_up():
    """Start LLVM and libgomp, compute the CPU's cache-key environment and import what a
    first call looks tuning records up with, on a background thread (see
    engine.warm_up_in_background)."""
    def also():
        path = tuning_db()              # (imports platformdirs: 4 ms)
        if path is not None and os.path.exists(path):
            from jitdl.autotune import records  # noqa: F401
        if settings.cache:
            keys.environment(targets.get("cpu"))
    engine.warm_up_in_background(also, mcjit_loads=lambda: native.linker() is None)


def compute(fn=None, *, strict_fp=False, autotune=None, name=None, static=(),
            dynamic=False):
    """Decorate a tensor definition: `@jd.compute` or `@jd.compute(strict_fp=True)`.

    static=("axis", ...) makes those parameters plain Python values at trace time (an
    int, bool, str, float, None or a tuple of them): each value gets its own kernel.
    dynamic=True (or a tuple of parameter names) compiles one kernel for every size of
    those arrays: each dimension not of size 1 is a symbolic int64 size (`X_n0`); the
    key holds each array's rank, which dimensions are 1, and its dtype. A dict names the
    dimensions that are symbolic, the others keeping the call's sizes (one kernel per
    row length, for every count of rows: dynamic={"X": 0}; {"X": (0, 1), "W": True})."""
    if fn is None:
        return lambda f: compute(f, strict_fp=strict_fp, autotune=autotune, name=name,
                                 static=static, dynamic=dynamic)
    _check_definition(fn, name, static, dynamic)
    return Function(fn, strict_fp=strict_fp, autotune=autotune, name=name, static=static,
                    dynamic=dynamic)


def _check_definition(fn, name, static, dynamic):
    """What @jd.compute takes, said at the decorator: a partial, a callable object, a
    builtin or another @jd.compute function failed with an AttributeError from inside
    jitdl ('no attribute __code__'), static=5 with "'int' object is not iterable", and
    *args / **kwargs took the call's arrays as one tuple or dict."""
    def bad(what):
        raise ArgumentError(f"@jd.compute: {what}", user_loc())
    if isinstance(fn, Function):
        bad(f"{fn.name} is a @jd.compute function already; for a copy with other options "
            f"decorate its Python function, jd.compute({fn.name}.pyfunc, ...)")
    if not isinstance(fn, types.FunctionType):
        bad(f"decorates a Python function (def or lambda), got {type(fn).__name__} {fn!r}")
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            stars = "*" if p.kind == p.VAR_POSITIONAL else "**"
            bad(f"{fn.__name__}'s parameter {stars}{p.name}: a definition "
                f"names each of its arguments (a call's arrays are not gathered into a "
                f"{'tuple' if p.kind == p.VAR_POSITIONAL else 'dict'})")
    if name is not None and not isinstance(name, str):
        bad(f"name= must be a str, got {type(name).__name__} {name!r}")
    # (names in a set are taken too, and dynamic=None is dynamic=False, as before)
    names = (tuple, list, set, frozenset)
    if not isinstance(static, str) and not (
            isinstance(static, names) and all(isinstance(n, str) for n in static)):
        bad(f"static= must be a parameter's name or a tuple of them, got {static!r}")
    if not (dynamic is None or isinstance(dynamic, (bool, str, dict))
            or isinstance(dynamic, names) and all(isinstance(n, str) for n in dynamic)):
        bad(f"dynamic= must be True, a parameter's name, a tuple of them or a dict of "
            f"their dimensions, got {dynamic!r}")


def _bad_value(where, name, expected, got, types):
    """The error of an option of the right type (`types`) out of its range, an
    ArgumentValueError (a ValueError), or of another type, an ArgumentError (a
    TypeError); at the user's line."""
    if isinstance(got, types) and not isinstance(got, bool):
        return ArgumentValueError(f"{where}: argument '{name}' must be {expected}, got "
                                  f"{got!r}", user_loc())
    return ArgumentError(f"{where}: argument '{name}' must be {expected}, got "
                         f"{type(got).__name__} {got!r}", user_loc())


def _callable_text(fn):
    """`name(params)` of a callable, else the repr of what is not one."""
    if not callable(fn):
        return f"{type(fn).__name__} {fn!r}, which is not callable"
    try:
        return f"{getattr(fn, '__name__', type(fn).__name__)}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return repr(fn)


def schedule(func, target="cpu"):
    """Register `def sched(s, cfg)` as the schedule of `func` for `target`."""
    if not isinstance(func, Function):
        raise ScheduleError(f"@jd.schedule takes a @jd.compute function, got {func!r}",
                            user_loc())
    if target not in targets.KINDS:
        raise ScheduleError(f"@jd.schedule: unknown target {target!r}; targets: "
                            f"{', '.join(targets.KINDS)}", user_loc())

    def register(sched_fn):
        # said here, at the schedule's definition, not as a TypeError from inside the
        # first call's compile ("one() takes 1 positional argument but 2 were given")
        try:
            inspect.signature(sched_fn).bind(None, None)
        except TypeError:
            raise ScheduleError(
                f"@jd.schedule({func.name}): a schedule is a function of (s, cfg), the "
                f"schedule and its knobs; got {_callable_text(sched_fn)}", user_loc()) \
                from None
        except ValueError:
            pass                         # (no signature to read: a builtin)
        with func._lock:
            func._schedules[target] = sched_fn
            func._kernels.clear()
            func._configs.clear()
            func._generation += 1
        return sched_fn
    return register
