"""jd.numpy: NumPy's functions as jitdl kernels.

On NumPy arrays (and lists, numbers) each function runs a compiled, multi-threaded,
cached kernel with NumPy 2's semantics; on the tensors of a `@jd.compute` definition it
adds stages to that definition, so several calls fuse into one kernel:

    import jitdl as jd
    jnp = jd.numpy
    y = jnp.exp(x)                              # a kernel on an array

    @jd.compute
    def softmax(X):                             # one fused kernel
        e = jnp.exp(X - jnp.max(X, axis=1, keepdims=True))
        return e / jnp.sum(e, axis=1, keepdims=True)

Arrays of a dtype jitdl does not compile (float16, complex, uint16/32/64, ...) are
computed by NumPy's function of the same name. Array creation is NumPy's own
(`jd.numpy.asarray` is `numpy.asarray`), and so is every other NumPy name that jd.numpy
does not compile (`jd.numpy.sort`, `cumsum`, `finfo`, `float16`, `random`, ...): code
written for NumPy runs unchanged; those functions cannot take a definition's tensors.
Inside a definition, operators and methods of whole tensors (`X + Y`, `X.T`, `X @ W`,
`X.sum(axis=1)`, `np.exp(X)`) are these functions too.
"""
from numpy import (arange, array, asarray, bool_, dtype, e, empty, empty_like, float32,  # noqa: F401
                   float64, full, full_like, inf, int8, int16, int32, int64, linspace, nan,
                   newaxis, ones, ones_like, pi, uint8, zeros, zeros_like)

import numpy as _np

from jitdl.eager import cache_info, clear, numpy_fallback  # noqa: F401
from jitdl.eager import numpy_only as _numpy_only
from jitdl.eager import tunable as _tunable
from jitdl.numpy import _linalg, _manipulation, _reductions, _ufuncs
from jitdl.numpy._linalg import *  # noqa: F401,F403
from jitdl.numpy._manipulation import *  # noqa: F401,F403
from jitdl.numpy._reductions import *  # noqa: F401,F403
from jitdl.numpy._ufuncs import *  # noqa: F401,F403
from jitdl.ops.core import is_symbolic as _is_symbolic
from jitdl.te.tensor import WHOLE

# the array API's version and inspection namespace are NumPy's (whose arrays these are)
__array_api_version__ = getattr(_np, "__array_api_version__", "2023.12")
if hasattr(_np, "__array_namespace_info__"):
    __array_namespace_info__ = _np.__array_namespace_info__

_MODULES = (_ufuncs, _reductions, _manipulation, _linalg)
__all__ = [n for m in _MODULES for n in m.__all__]


def status():
    """{function name: "done" or "partial: what is missing"} for every function here."""
    return {n: s for m in _MODULES for n, s in getattr(m, "STATUS", {}).items()}


for _n in __all__:     # arrays of dtypes jitdl does not compile: NumPy's own function
    if not hasattr(globals()[_n], "numpy_fallback") and hasattr(_np, _n):
        globals()[_n] = numpy_fallback(globals()[_n], getattr(_np, _n))
        # (named as found here, so that pickle, which stores a function by its module and
        # name, finds this wrapper and not the function it wraps: multiprocessing works)
        globals()[_n].__module__, globals()[_n].__qualname__ = __name__, _n
WHOLE.update({n: globals()[n] for n in __all__})
for _n in __all__:     # f.tune(*args), f.lower(*args)...: see jitdl.eager.tunable
    _tunable(globals()[_n], _n)

_REDUCE = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min",
           "logical_and": "all", "logical_or": "any"}
_UFUNC_ATTRS = ("nin", "nout", "nargs", "identity", "ntypes", "types", "signature")


def _ufunc_methods(name):
    """NumPy's ufunc attributes and methods on jd.numpy's function `name`: reduce through
    the jd.numpy reduction it is (add.reduce is sum, with ufunc.reduce's axis=0), outer
    by broadcasting (so both fuse in a definition); the rest (accumulate, at, reduceat,
    the reductions jd.numpy has no kernel for) NumPy's own method, on arrays."""
    fn, np_fn = globals()[name], getattr(_np, "power" if name == "pow" else name)  # (1.26)
    if not isinstance(np_fn, _np.ufunc):
        return
    for attr in _UFUNC_ATTRS:
        setattr(fn, attr, getattr(np_fn, attr))
    for method in ("at", "reduceat") + (("reduce", "accumulate", "outer") if np_fn.nin == 2
                                         else ()):
        setattr(fn, method, _numpy_only(f"{name}.{method}", getattr(np_fn, method)))
    if np_fn.nin != 2:
        return
    own, np_reduce = globals().get(_REDUCE.get(name)), fn.reduce

    def reduce(a, axis=0, dtype=None, out=None, keepdims=False, initial=_np._NoValue,
               where=True):
        kw = {"axis": axis, "out": out, "keepdims": keepdims, "where": where}
        # (dtype= only sum and prod take, initial= not all and any: NumPy's there)
        if own is None or (dtype is not None and own not in (sum, prod)) or \
                (initial is not _np._NoValue and own in (all, any)):
            return np_reduce(a, dtype=dtype, initial=initial, **kw)
        if dtype is not None:
            kw["dtype"] = dtype
        if initial is not _np._NoValue:
            kw["initial"] = initial
        return own(a, **kw)

    def outer(a, b, /, **kwargs):
        a = a if _is_symbolic(a) else _np.asarray(a)
        nb = len(b.shape) if _is_symbolic(b) else _np.ndim(b)
        return fn(expand_dims(a, tuple(range(a.ndim, a.ndim + nb))), b, **kwargs)

    fn.reduce, fn.outer = reduce, outer
    for method in (reduce, outer):
        method.__qualname__ = f"{name}.{method.__name__}"


for _n in list(_ufuncs._UNARY_DOCS) + list(_ufuncs._BINARY_DOCS) + ["power", "pow"]:
    _ufunc_methods(_n)
if "ravel" in WHOLE:
    WHOLE["flatten"] = WHOLE["ravel"]


def __getattr__(name):
    """A public NumPy name that jd.numpy does not compile: NumPy's own (its functions
    refuse the tensors of a definition with an error naming them)."""
    attr = getattr(_np, name, None) if not name.startswith("_") else None
    if attr is None:
        raise AttributeError(f"module 'jitdl.numpy' has no attribute {name!r}")
    if callable(attr) and not isinstance(attr, (type, _np.ufunc)):
        attr = _numpy_only(name, attr)
    globals()[name] = attr
    return attr
