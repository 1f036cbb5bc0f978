"""A GPU that is not there: jitdl's CUDA host runtime over the CPU emulator of CUDA C
(tests/_cuda_emu.py), so tests run the generated kernels, the launch plan, dispatch and
the disk cache on any machine with g++.

DeviceArray holds a NumPy array and presents `__cuda_array_interface__`, so jitdl treats it
as a GPU array (the cuda target); EmulatedDevice has the methods of jitdl's CUDA backend
(jitdl/runtime/cuda.py) and runs kernels with the emulator.
"""
import numpy as np


class DeviceArray:
    """An array 'on the device': NumPy memory behind a CUDA array interface."""

    def __init__(self, host, scalar=False):
        self.host = host
        self.scalar = scalar        # x[()] of a 0-d array: what NumPy makes a scalar

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.host.shape, "typestr": self.host.dtype.str,
                "data": (self.host.ctypes.data, False), "version": 3,
                "strides": None if self.host.flags.c_contiguous else self.host.strides}

    shape = property(lambda self: self.host.shape)
    dtype = property(lambda self: self.host.dtype)
    size = property(lambda self: self.host.size)
    ndim = property(lambda self: self.host.ndim)
    flags = property(lambda self: self.host.flags)
    strides = property(lambda self: self.host.strides)
    T = property(lambda self: DeviceArray(self.host.T))        # (views, as CuPy's)

    def transpose(self, *axes):
        return DeviceArray(self.host.transpose(*axes))

    def __getitem__(self, index):
        return DeviceArray(np.asarray(self.host[index]), scalar=self.host.ndim == 0
                           and index == ())

    def __repr__(self):
        return f"DeviceArray({self.host!r})"

    # NumPy's functions and ufuncs on device arrays answer with device arrays, as CuPy's
    # (which implements them for its arrays) do: here NumPy's own, on the host copies
    def __array_function__(self, func, types, args, kwargs):
        return _on_device(func(*_host(args), **_host(kwargs)))

    def __array_ufunc__(self, ufunc, method, *args, **kwargs):
        return _on_device(getattr(ufunc, method)(*_host(args), **_host(kwargs)))


def _host(x):
    if isinstance(x, DeviceArray):
        return x.host
    if isinstance(x, (list, tuple)):
        return type(x)(_host(y) for y in x)
    if isinstance(x, dict):
        return {k: _host(v) for k, v in x.items()}
    return x


def _on_device(r):
    if isinstance(r, (np.ndarray, np.generic)):
        return DeviceArray(np.asarray(r))       # (CuPy: 0-d arrays, not scalars)
    if isinstance(r, (list, tuple)):
        return type(r)(_on_device(y) for y in r)
    return r


class EmulatedDevice:
    """jitdl's CUDA backend interface on the emulator."""

    name = "emulated"
    array_type = DeviceArray        # (as CuPy's backend: the plain call's type test)

    def __init__(self, emulator):
        self.emu = emulator
        self.launches = 0
        self.compiles = 0

    def empty(self, shape, dtype):
        # filled with a pattern, not zeros: an element a kernel does not write shows
        return DeviceArray(_garbage(shape, dtype))

    def zeros(self, shape, dtype):
        return DeviceArray(np.zeros(shape, dtype))

    def asarray(self, a):
        return a if isinstance(a, DeviceArray) else DeviceArray(np.asarray(a))

    def contiguous(self, a):
        return DeviceArray(np.ascontiguousarray(a.host))

    def from_host(self, a):
        return DeviceArray(np.array(a))

    def to_host(self, a):
        return np.array(a.host)

    def copyto(self, dst, src):
        np.copyto(dst.host, src.host, casting="unsafe")

    def may_share_memory(self, a, b):
        return np.may_share_memory(a.host, b.host)

    def compile(self, source, arch, strict_fp=False):
        self.compiles += 1
        return source.encode()

    def load(self, binary):
        return self.emu.compile(binary.decode())

    def function(self, module, name):
        return (module, name)

    def launch(self, handle, grid, block, shared_bytes, args):
        module, name = handle
        self.launches += 1
        module.launch(name, tuple(grid), tuple(block), shared_bytes,
                      [a.host if isinstance(a, DeviceArray) else a for a in args])

    def synchronize(self):
        pass


def _garbage(shape, dtype):
    """An array of the dtype whose bytes are a fixed non-zero pattern."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.full(max(n, 1), 0x7B, np.uint8)[:n]
    return raw.view(dtype).reshape(shape)
