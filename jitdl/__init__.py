"""jitdl: a just-in-time tensor compiler for Python.

    import jitdl as jd

    @jd.compute
    def softmax(X):
        n, m = X.shape
        mx[i] = max(X[i, k] for k in range(m))
        e[i, j] = exp(X[i, j] - mx[i])
        s[i] = sum(e[i, k] for k in range(m))
        Y[i, j] = e[i, j] / s[i]
        return Y
"""
from jitdl import config, tune
from jitdl.api import Function, compute, schedule
from jitdl.errors import (AllocationError, ArgumentError, CompileError, DefinitionError,
                          JitdlError, ScalarOverflowError, ScheduleError)
from jitdl.cache.export import load
from jitdl.runtime.engine import set_num_threads
from jitdl.te.ops import (abs, all, any, argmax, argmin, atan, atan2, bool_, ceil, cos, erf, exp, expm1,
                          float32, float64, floor, fmod, int8, int16, int32, int64, isfinite,
                          isinf, isnan, log, log1p, max, min, pow, prod, reduce_axis, round,
                          rsqrt, select, sigmoid, sign, sin, sqrt, sum, tan, tanh, tensor,
                          trunc, uint8, where)

from jitdl._version import __version__


def __getattr__(name):
    """jd.numpy and jd.nn, imported at their first use (the op library is 15 ms of `import
    jitdl` that a program of its own definitions never needs)."""
    if name in ("numpy", "nn"):
        import importlib
        return importlib.import_module(f"jitdl.{name}")
    raise AttributeError(f"module 'jitdl' has no attribute {name!r}")


def __dir__():
    """The package's names with jd.numpy and jd.nn before their import (a notebook's
    completion of `jd.nu`, dir(jd))."""
    return sorted({*globals(), "numpy", "nn"})


config.setup_logging()
if config.settings.warm_up:
    from jitdl import api as _api
    _api.warm_up()

__all__ = [
    "compute", "schedule", "Function", "tensor", "reduce_axis", "sum", "prod", "max", "min",
    "argmax", "argmin",
    "all", "any", "select", "where", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
    "sin", "cos", "tan", "atan", "atan2", "abs", "floor", "ceil", "round", "trunc", "sign",
    "log1p", "expm1", "isnan", "isinf", "isfinite", "pow", "fmod", "float32", "float64",
    "int8", "int16", "int32", "int64", "uint8", "bool_", "set_num_threads", "load", "JitdlError",
    "DefinitionError", "ArgumentError", "ScheduleError", "CompileError", "AllocationError",
    "ScalarOverflowError", "tune", "numpy", "nn",
]
