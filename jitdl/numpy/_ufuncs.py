"""jd.numpy's elementwise functions (NumPy's ufuncs), with NumPy's signatures."""
from __future__ import annotations

from jitdl import dtypes
from jitdl.eager import apply
from jitdl.ops import elementwise as ew


def _unary(name, doc=None):
    static = (("fn", name),)

    def ufunc(x, /, out=None, *, dtype=None):
        return apply(name, ew.unary, (x,),
                     static if dtype is None else static + (("dtype", dtypes.normalize(dtype)),),
                     out)
    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = doc or f"numpy.{name} as a jitdl kernel (NumPy 2 semantics)."
    return ufunc


def _binary(name, doc=None):
    static = (("fn", name),)

    def ufunc(x1, x2, /, out=None, *, dtype=None):
        return apply(name, ew.binary, (x1, x2),
                     static if dtype is None else static + (("dtype", dtypes.normalize(dtype)),),
                     out)
    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = doc or f"numpy.{name} as a jitdl kernel (NumPy 2 semantics)."
    return ufunc


exp = _unary("exp")
negative = _unary("negative")
add = _binary("add")
subtract = _binary("subtract")
multiply = _binary("multiply")
divide = _binary("divide")
true_divide = divide

__all__ = ["exp", "negative", "add", "subtract", "multiply", "divide", "true_divide"]
