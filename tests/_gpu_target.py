"""`pytest --target cuda`: the definition and op tests, run on the GPU.

Every call of a @jd.compute function with NumPy arguments gets target="cuda" (the arrays
are copied to the GPU and the results back, jitdl's own override), and every jd.numpy /
jd.nn op on NumPy arrays runs on CuPy copies of them, its result copied back; the tests
then compare GPU kernels with NumPy exactly as they compare CPU kernels. Tests of
CPU-only things (LLVM IR, the CPU's schedules) are not meant to run this way.
"""
import functools

import numpy as np

import jitdl
from jitdl import api, eager
from jitdl.ops.core import is_symbolic


def run_everything_on_gpu(backend=None):
    """Patch the call paths (for this test process only). `backend` replaces jitdl's
    CUDA backend (tests on an emulated device)."""
    from jitdl.runtime import cuda
    if backend is not None:
        cuda._backend[:] = [backend]
    dev = cuda.backend()
    call = api.Function.__call__

    def on_gpu(self, *args, out=None, **kwargs):
        __tracebackhide__ = True        # (nor is it the user's line: errors.user_loc)
        if "target" in kwargs or any(isinstance(a, api._SYMBOLIC) for a in args) or \
                not any(isinstance(a, np.ndarray) for a in args + tuple(kwargs.values())):
            return call(self, *args, out=out, **kwargs)
        return call(self, *args, out=out, target="cuda", **kwargs)
    api.Function.__call__ = on_gpu

    apply = eager.apply
    scalar_run = eager._ScalarOut.run

    def marked_run(self, args, out=None):
        # a kernel whose result NumPy makes a scalar: CuPy gives a 0-d array there (as
        # jd.numpy on CuPy arrays does, like CuPy); the copy back to the host makes it the
        # NumPy scalar that the tests, written for NumPy, expect
        r = scalar_run(self, args, out)
        return _Scalar(r) if out is None and cuda.is_device_array(r) else r
    eager._ScalarOut.run = marked_run

    def host(r):
        if isinstance(r, tuple):
            return tuple(host(x) for x in r)
        if isinstance(r, _Scalar):
            return dev.to_host(r.array)[()]
        if cuda.is_device_array(r):
            h = dev.to_host(r)
            # a NumPy scalar where jd.numpy returns one (the emulated device marks them)
            return h[()] if getattr(r, "scalar", False) else h
        return r

    def gpu_apply(name, builder, operands, static=(), out=None, names=None, table=None,
                  tkey=None, slot=None, **options):
        __tracebackhide__ = True
        # table/tkey/slot feed the CPU wrappers' fast paths: left out here, so that every
        # call comes through this function
        if any(is_symbolic(a) for a in operands) or \
                not any(isinstance(a, (np.ndarray, list, tuple)) for a in operands) or \
                any(isinstance(a, np.ndarray) and type(a) is not np.ndarray
                    for a in operands) or isinstance(out, tuple) and len(out) != 1:
            # (masked arrays and matrices are NumPy's, a GPU has no copy of them; an out=
            # tuple of another length is an error, the host's)
            return apply(name, builder, operands, static, out, names, **options)
        moved = tuple(dev.from_host(_native(np.asarray(a)))
                      if isinstance(a, (np.ndarray, list, tuple)) else a for a in operands)
        if out is None or isinstance(out, tuple) and len(out) == 1 and out[0] is None:
            return host(apply(name, builder, moved, static, out, names, **options))
        # out= goes to the GPU too (its own elements with it: where= keeps them), so
        # that the GPU path's out= handling (casting, broadcasting into it) is what runs
        target = out[0] if isinstance(out, tuple) else out
        gpu_out = dev.from_host(target) if isinstance(target, np.ndarray) else target
        r = apply(name, builder, moved, static,
                  (gpu_out,) if isinstance(out, tuple) else gpu_out, names, **options)
        if gpu_out is target:
            return r
        target[...] = dev.to_host(gpu_out)
        return target if r is gpu_out else host(r)

    eager.apply = gpu_apply
    for module in (jitdl.numpy._ufuncs, jitdl.numpy._reductions, jitdl.numpy._linalg,
                   jitdl.numpy._manipulation, jitdl.nn):
        own = module.apply      # a module's apply may fix keywords (reductions' casting)
        module.apply = functools.partial(gpu_apply, **own.keywords) \
            if isinstance(own, functools.partial) else gpu_apply


class _Scalar:
    """A 0-d GPU result that NumPy would return as a scalar (see marked_run)."""
    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index):   # (x[()] of it, as of the 0-d array: a reduction of
        return self                 # a transposed array runs through another kernel's call)


def _native(a):
    """GPU arrays have native byte order (CuPy has no other): a swapped array's values."""
    return a if a.dtype.isnative else a.astype(a.dtype.newbyteorder("="))
