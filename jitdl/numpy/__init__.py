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

Array creation is NumPy's own (`jd.numpy.asarray` is `numpy.asarray`).
"""
from numpy import (array, asarray, empty, empty_like, full, full_like, linspace, ones,
                   ones_like, zeros, zeros_like, arange, e, pi, inf, nan, newaxis)
from numpy import (bool_, int8, int16, int32, int64, uint8, float32, float64, dtype)

from jitdl.eager import cache_info, clear
from jitdl.numpy._ufuncs import *          # noqa: F401,F403
from jitdl.numpy._reductions import *      # noqa: F401,F403
from jitdl.numpy._manipulation import *    # noqa: F401,F403
from jitdl.numpy._linalg import *          # noqa: F401,F403
