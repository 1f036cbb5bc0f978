"""The cuda target's host side: NVRTC turns a function's CUDA C into a cubin (stored in
the disk cache like the CPU's object code, so a warm process loads it without NVRTC), the
driver loads it, and a CudaKernel runs one specialisation: it allocates the outputs and
intermediates, evaluates each kernel's grid from the call's sizes, launches the kernels in
order on the current stream and, when the code checks indices, reads the error slot.

The device is reached through a backend object, so that the same host logic runs on a
GPU through CuPy (CupyBackend) and, in tests, on anything with the same methods:

    empty(shape, dtype), zeros(shape, dtype)      device arrays
    asarray(a)          a device array of `a` (a GPU array of another library: no copy)
    from_host(a), to_host(a)                      copies between NumPy and the device
    copyto(dst, src), may_share_memory(a, b)
    compile(source, arch, strict_fp) -> bytes     the binary of a module's source
    load(binary) -> module, function(module, name) -> handle
    launch(handle, grid, block, shared_bytes, args)   args: device arrays, NumPy scalars
    synchronize()
"""
from __future__ import annotations

import numpy as np

from jitdl import locks
from jitdl.errors import (AllocationError, ArgumentError, CompileError, OutArgumentError,
                          user_loc)
from jitdl.runtime.kernel import (DEVICE_KEYS, LESS_MEMORY, KernelChecks, _human_bytes,
                                  _tree_code, shape_key, size_pattern)

_lock = locks.Lock()
_backend = []


def backend():
    """The process's CUDA backend (CuPy's), made on first use."""
    if not _backend:
        with _lock:
            if not _backend:
                _backend.append(CupyBackend())
    return _backend[0]


_ndarray = np.ndarray
_HOST_SCALARS = frozenset((int, float, bool, type(None)))


def is_device_array(a) -> bool:
    """Whether `a` lives on a GPU: CuPy arrays, and any object with
    `__cuda_array_interface__` (PyTorch and JAX GPU tensors, Numba device arrays)."""
    t = type(a)
    if t is _ndarray or t in _HOST_SCALARS:     # (the common calls: one comparison)
        return False
    if not hasattr(t, "__cuda_array_interface__") or isinstance(a, np.ndarray):
        return False
    try:                # PyTorch defines it on the class and raises for CPU tensors
        a.__cuda_array_interface__
    except AttributeError:
        return False
    return True


def interface_only(fname, name, a):
    """An ArgumentError for GPU array `a` (argument `name` of fname) where it lacks the
    shape or dtype attribute jitdl reads of every array (it has only the CUDA array
    interface), else None."""
    missing = [n for n in ("shape", "dtype") if not hasattr(a, n)]
    if missing:
        return ArgumentError(
            f"{fname}(): argument '{name}' is a {type(a).__name__} with a CUDA array "
            f"interface but no {' or '.join(missing)} attribute; pass cupy.asarray(...) "
            f"of it", user_loc())
    return None


def elsewhere(fname, what, a, where):
    """An ArgumentError where GPU array `a` (`what` of fname: "argument 'X'", "out= for
    Y") is on another GPU than the current device, with `where` to say how to call it
    instead; else None (it is there, it does not say where it is, or no CuPy to ask)."""
    on = getattr(getattr(a, "device", None), "id", None)    # (CuPy's device)
    if not isinstance(on, int):
        return None
    current = current_device()
    if current is None or on == current:
        return None
    return ArgumentError(f"{fname}(): {what} is on GPU {on}, but the current device is "
                         f"GPU {current}; {where.format(on=on, current=current)}",
                         user_loc())


def current_device():
    """The number of CuPy's current GPU; None without CuPy."""
    from jitdl.target.cuda import cupy_or_none
    cupy = cupy_or_none()
    return None if cupy is None else cupy.cuda.runtime.getDevice()


class _Addresses:
    """A GPU array's element addresses as a NumPy array's (never read: shares_memory)."""

    def __init__(self, interface):
        self.__array_interface__ = {
            "shape": tuple(interface["shape"]), "typestr": interface["typestr"],
            "data": (interface["data"][0], True), "strides": interface.get("strides"),
            "version": 3}


def shares_memory(a, b):
    """Whether GPU arrays a and b share an element, exactly, as np.shares_memory: views
    of one buffer that interleave (b[0::2] and b[1::2]) do not, though their bounds
    overlap (the device's may_share_memory, CuPy's: bounds only, and cheaper: asked
    first)."""
    ia, ib = a.__cuda_array_interface__, b.__cuda_array_interface__
    if 0 in tuple(ia["shape"]) or 0 in tuple(ib["shape"]):
        return False
    return bool(np.shares_memory(np.asarray(_Addresses(ia)), np.asarray(_Addresses(ib))))


def dtype_of(a) -> np.dtype:
    """A GPU array's dtype as NumPy's (PyTorch's dtypes are not NumPy's): from its CUDA
    array interface."""
    try:
        return np.dtype(a.dtype)
    except TypeError:
        return np.dtype(a.__cuda_array_interface__["typestr"])


class CupyBackend:
    """A GPU through CuPy: memory from CuPy's pool, NVRTC through cupy.cuda.nvrtc, modules
    through the driver (cupy.cuda.function.Module), launches on the current stream."""

    name = "cupy"

    def __init__(self):
        from jitdl.target.cuda import cupy_or_none
        cupy = cupy_or_none()
        if cupy is None:
            raise ArgumentError(
                "the cuda target needs CuPy and a GPU it can see: install the package for "
                "your CUDA version (pip install cupy-cuda12x, or cupy-cuda13x); without a "
                "GPU, f.cuda_source(...) still shows the code")
        self.cupy = cupy
        self.empty = cupy.ndarray      # (shape, dtype): cupy.empty without its wrapper
        self.array_type = cupy.ndarray
        self.zeros = cupy.zeros
        self.to_host = cupy.asnumpy
        self.from_host = cupy.asarray
        self.may_share_memory = cupy.may_share_memory
        DEVICE_KEYS[cupy.ndarray] = _cupy_key

    def asarray(self, a):
        return a if type(a) is self.cupy.ndarray else self.cupy.asarray(a)

    def contiguous(self, a):
        return self.cupy.ascontiguousarray(a)

    def copyto(self, dst, src):
        self.cupy.copyto(dst, src, casting="unsafe")    # (the caller checked the rule)

    def compile(self, source: str, arch: str, strict_fp: bool = False) -> bytes:
        """The cubin of `source` for `arch` (sm_90), by NVRTC; a CompileError with
        NVRTC's log if the source does not compile."""
        from cupy.cuda import nvrtc
        cubin = hasattr(nvrtc, "getCUBIN")    # else PTX (an old CuPy), for the virtual arch
        options = [f"--gpu-architecture={arch if cubin else arch.replace('sm_', 'compute_')}",
                   "--std=c++17"]
        if strict_fp:                   # no fused multiply-adds: NumPy's rounding
            options.append("--fmad=false")
        prog = nvrtc.createProgram(source, "jitdl.cu", [], [])
        try:
            try:
                nvrtc.compileProgram(prog, options)
            except nvrtc.NVRTCError as e:
                log = nvrtc.getProgramLog(prog)
                raise CompileError(f"NVRTC could not compile the generated CUDA C ({e}); "
                                   f"this is a bug in jitdl, please report it with the "
                                   f"definition. NVRTC says:\n{log}") from None
            if cubin:
                return bytes(nvrtc.getCUBIN(prog))
            ptx = nvrtc.getPTX(prog)       # an old CuPy: PTX, which the driver also loads
            return ptx.encode() if isinstance(ptx, str) else bytes(ptx)
        finally:
            nvrtc.destroyProgram(prog)

    def load(self, binary: bytes):
        from cupy.cuda import function
        module = function.Module()
        module.load(bytes(binary))
        return module

    def function(self, module, name):
        return module.get_function(name)

    def launch(self, handle, grid, block, shared_bytes, args):
        handle(grid, block, args, shared_mem=shared_bytes)    # on the current stream

    def launcher(self, handle):
        """f(grid, block, args): a launch without dynamic shared memory (CuPy's function
        is one)."""
        return handle

    def synchronize(self):
        self.cupy.cuda.get_current_stream().synchronize()


def _cupy_key(a, dynamic, solid=()):
    """other_key of a CuPy array (its type, shape or size pattern, dtype and GPU) without
    the generic path's attribute probes and Device object."""
    shape = a.shape
    return (type(a), (size_pattern(shape) if dynamic is True and not solid
                      else shape_key(shape, dynamic, solid))
            if dynamic else shape, a.dtype, a.data.device_id)


class _Launch:
    """One kernel of a module: its function, grid (a function of the sizes), block,
    shared memory and where each parameter comes from."""
    __slots__ = ("fn", "grid", "block", "shared", "params", "checks", "name")

    def __init__(self, fn, grid, block, shared, params, checks, name):
        self.fn, self.grid, self.block, self.shared = fn, grid, block, shared
        self.params, self.checks, self.name = params, checks, name


def _sizes_function(trees, n_sizes):
    """f(sizes) -> tuple of the trees' values (ints, ["n", k], operators; see
    jitdl.pipeline.size_tree), generated once as Python source from ints."""
    names = [f"sizes[{k}]" for k in range(n_sizes)]
    body = "".join(_tree_code(t, names) + ", " for t in trees) if trees else ""
    namespace = {}
    exec(f"def f(sizes):\n    return ({body})", namespace)   # noqa: S102 - built from ints
    return namespace["f"]


class ByRowLength:
    """A GPU specialisation of symbolic extents as two kernels, chosen at each call by the
    length of its rows (`rows`: size trees of the lengths of the rows that the automatic
    schedule reads a block of threads per row only when it takes them as long: see
    jitdl.schedule.gpu.symbolic_rows): rows all at least `least` long run the kernel
    that gives each row a block of threads (CUDA.long_rows), shorter ones the kernel of a
    thread per row (as a kernel of fixed sizes would: a block of 256 threads over a row
    of 3 leaves 253 idle, a thread alone over a row of 8192 reads it serially and rows
    far apart). `sizes`: (argument position, dimension) of each size the trees name;
    `build(args, long)` compiles either kernel on its first call."""
    __slots__ = ("_sizes", "_rows", "_least", "_build", "kernels")

    def __init__(self, sizes, rows, least, build):
        self._sizes = tuple((int(p), int(d)) for p, d in sizes)
        self._rows = _sizes_function(rows, len(sizes))
        self._least, self._build = least, build
        self.kernels = {}       # long (a bool) -> kernel, each made on first use

    def long(self, args):
        """Whether the rows of a call's arguments are long enough for a block each."""
        return min(self._rows([args[p].shape[d] for p, d in self._sizes])) >= self._least

    def pick(self, args):
        """The kernel for a call's arguments (compiled on its first call)."""
        long = self.long(args)
        k = self.kernels.get(long)
        if k is None:
            k = self.kernels[long] = self._build(args, long)
        return k

    def run(self, args, out=None):
        return self.pick(args).run(args, out)


class CudaKernel(KernelChecks):
    """Runs one compiled specialisation on the GPU (see the module's docstring)."""

    fast = False            # (the CPU kernel's direct entry: none here)
    reorder = None          # as the CPU kernel's (jd.numpy's layout-free ops set it)

    def __init__(self, sig, launch: dict, binary: bytes, texts=None, device=None,
                 target=None):
        self.device = device or backend()
        self.target = target
        self._init_checks(sig)
        self.texts = {} if texts is None else texts
        self.launch_plan = launch
        self.binary = binary
        self.out_specs = [(tuple(shape), np.dtype(dt)) for _, shape, dt in sig.outputs]
        self.out_names = [name for name, _, _ in sig.outputs]
        self.single = len(self.out_specs) == 1
        self.array_pos = [i for i, x in enumerate(sig.layout) if x[0] == "array"]
        self.arg_names = [x[1] for x in sig.layout]
        self.scalar_pos = [i for i, x in enumerate(sig.layout) if x[0] == "scalar"]
        n_own = len(sig.scalars) - len(sig.sizes)
        self.scalar_types = [np.dtype(dt).type for _, dt in sig.scalars[:n_own]]
        self.module = self.device.load(binary)
        n = len(sig.sizes)
        self.kernels = [_Launch(self.device.function(self.module, k["name"]),
                                _sizes_function(k["grid"], n), tuple(k["block"]),
                                int(k["shared_bytes"]), [tuple(p) for p in k["params"]],
                                bool(k["checks"]), k["name"])
                        for k in launch["kernels"]]
        self.tmp_names = [name for name, _, _ in launch["intermediates"]]
        self.tmp_dtypes = [np.dtype(dt) for _, dt, _ in launch["intermediates"]]
        self.tmp_shapes = [_sizes_function(shape, n) for _, _, shape in launch["intermediates"]]
        self.has_err = any(k.checks for k in self.kernels)
        limits = target.max_grid_dims if target is not None else (2 ** 31 - 1, 65535, 65535)
        self.grid_limits = tuple(limits)
        if not sig.sizes:       # static shapes: grids and scratch shapes known now
            for k in self.kernels:
                grid = k.grid(())
                self._check_grid(k, grid)
                k.grid = (lambda g: lambda sizes: g)(grid)
            self.tmp_shapes = [(lambda s: lambda sizes: s)(shape(())) for shape in
                               self.tmp_shapes]

        # the common case (constant shapes, one kernel and output, no scalars, scratch
        # or checks): a call is the input checks, one allocation and one launch
        self.plain = None
        if not (sig.sizes or self.dims is not None or self.int_checks or self.scalar_types
                or self.tmp_shapes or self.has_err or len(self.kernels) != 1
                or not self.single):
            k = self.kernels[0]
            grid = k.grid(())
            if 0 not in grid and [kind for kind, _ in k.params] == ["arg"] * len(k.params):
                order = [i for _, i in k.params]
                n_in = len(self.array_pos)
                if order == list(range(n_in + 1)):      # inputs in order, then the output
                    kind = getattr(self.device, "array_type", None)
                    # (CuPy's arrays say whether they are C-contiguous in an attribute;
                    # .flags builds an object per call)
                    launcher = getattr(self.device, "launcher", None)
                    launch = (launcher(k.fn) if launcher is not None else
                              lambda grid, block, args, fn=k.fn:
                              self.device.launch(fn, grid, block, 0, args))
                    self.plain = (launch, grid, k.block, self.out_specs[0], kind,
                                  hasattr(kind, "_c_contiguous"))

    def run(self, args, out=None):
        plain = self.plain
        if plain is not None and out is None:
            dev = self.device
            launch, grid, block, (shape, dt), kind, flag = plain
            values = []
            for i in self.array_pos:
                a = args[i]
                if type(a) is not kind or not (a._c_contiguous if flag else
                                               a.flags.c_contiguous):
                    a = dev.asarray(a)          # (another library's GPU array: a view)
                    if not a.flags.c_contiguous:
                        if self.reorder is not None:
                            return self._strided(args)
                        a = self._contiguous(i, a)
                values.append(a)
            try:                # (_empty inline: this is the plain call's path)
                y = dev.empty(shape, dt)
            except MemoryError as e:
                self._raise_memory_error("result", self.out_names[0], shape, dt, e)
            values.append(y)
            launch(grid, block, values)
            return y
        if self.int_checks:
            self._check_ints(args)
        dev = self.device
        inputs, reorder = [], self.reorder if out is None else None
        for i in self.array_pos:
            a = dev.asarray(args[i])
            if not a.flags.c_contiguous:
                if reorder is not None:
                    return self._strided(args)
                a = self._contiguous(i, a)
            inputs.append(a)
        if self.dims is not None:
            sizes, shapes = self.dims(args)
            specs = [(shape, dt) for shape, (_, dt) in zip(shapes, self.out_specs)]
        else:
            sizes, specs = (), self.out_specs
        if out is None:
            outs, final = [self._empty("result", name, shape, dt) for name, (shape, dt)
                           in zip(self.out_names, specs)], None
        else:
            outs, final = self._check_out(out, inputs, specs)
        values = inputs + outs
        values += [t(args[i]) for t, i in zip(self.scalar_types, self.scalar_pos)]
        values += [np.int64(s) for s in sizes]
        tmps = [self._empty("intermediate buffer", name, shape(sizes), dt) for name, shape, dt
                in zip(self.tmp_names, self.tmp_shapes, self.tmp_dtypes)]
        err = self._empty("index-check slot", "", (2,), np.int64, dev.zeros) \
            if self.has_err else None
        for k in self.kernels:
            grid = k.grid(sizes)
            if 0 in grid:
                continue            # nothing to compute (an empty output)
            if sizes:
                self._check_grid(k, grid)
            params = [values[i] if kind == "arg" else tmps[i] for kind, i in k.params]
            if k.checks:
                params.append(err)
            # k.shared is the kernel's static __shared__ memory, which the launch gets
            # anyway; the launch's argument is dynamic shared memory (none is used)
            dev.launch(k.fn, grid, k.block, 0, params)
        if err is not None:
            e = dev.to_host(err)
            if e[0] > 0:
                self._raise_index_error(e, sizes)
        if final is not None:
            for dst, src in zip(final, outs):
                if dst is not src:
                    dev.copyto(dst, src)
            outs = final
        return outs[0] if self.single else tuple(outs)

    __call__ = run

    def _strided(self, args):
        """A call with a strided operand of a jd.numpy op whose result takes its operands'
        memory order (a.T + b.T): run on their memory's order where they share one, as
        CuPy and NumPy do (no copies, a Fortran-ordered result); else copied."""
        args = list(args)
        for i in self.array_pos:    # (another library's GPU arrays as the device's own)
            args[i] = self.device.asarray(args[i])
        result = self.reorder(args)
        if result is not None:
            return result
        for i in self.array_pos:
            if not args[i].flags.c_contiguous:
                args[i] = self._contiguous(i, args[i])
        return self.run(args)

    def _empty(self, what, name, shape, dtype, make=None):
        try:
            return (make or self.device.empty)(shape, dtype)
        except MemoryError as e:
            self._raise_memory_error(what, name, shape, dtype, e)

    def _contiguous(self, i, a):
        """A C-contiguous copy on the device of argument `i` (a view, or another library's
        array or a host array where that is allowed)."""
        dev = self.device
        try:
            return dev.contiguous(dev.asarray(a))
        except MemoryError as e:
            self._raise_memory_error("contiguous copy of argument", self.arg_names[i],
                                     a.shape, a.dtype, e)

    def _raise_memory_error(self, what, name, shape, dtype, e):
        hint = f". {LESS_MEMORY}" if what == "intermediate buffer" else ""
        raise _no_room(f"{self.fname}(): cannot allocate the {what}{' ' * bool(name)}{name}",
                       shape, dtype, "on the GPU", e, hint) from None

    def _check_grid(self, k, grid):
        for axis, (g, limit) in enumerate(zip(grid, self.grid_limits)):
            if g > limit:
                raise ArgumentError(
                    f"{self.fname}(): kernel {k.name} needs {g} blocks along "
                    f"{'xyz'[axis]}, more than the device's {limit}; the shapes are too "
                    f"large for this schedule (a grid-stride loop, e.g. the automatic "
                    f"schedule, covers any size)", user_loc())

    def _check_out(self, out, inputs, specs):
        dev = self.device
        given = self._given_outs(out, lambda a, b: is_device_array(a) and is_device_array(b)
                                 and dev.may_share_memory(dev.asarray(a), dev.asarray(b))
                                 and shares_memory(a, b))
        outs = []
        for o, name, (shape, dtype) in zip(given, self.out_names, specs):
            if not is_device_array(o):
                raise ArgumentError(
                    f"{self.fname}(): out= for {name}: expected a GPU array (the call runs "
                    f"on the GPU), got {type(o).__name__}", user_loc())
            # (a kernel of the current GPU writing another's memory: CuPy refuses it)
            error = elsewhere(self.fname, f"out= for {name}", o,
                              "pass an out= array on GPU {current}")
            if error is not None:
                raise error
            o = self.device.asarray(o)
            if tuple(o.shape) != tuple(shape) or o.dtype != dtype:
                raise OutArgumentError(
                    f"{self.fname}(): out= for {name}: expected shape {tuple(shape)} and "
                    f"dtype {dtype}, got shape {tuple(o.shape)} and dtype {o.dtype}",
                    user_loc())
            overlaps = any(self.device.may_share_memory(a, o) for a in inputs)
            if overlaps or not o.flags.c_contiguous:         # computed aside, copied in
                outs.append(self._empty("temporary for out= of", name, shape, dtype))
            else:
                outs.append(o)
        return outs, [self.device.asarray(o) for o in given]

    def synchronize(self):
        self.device.synchronize()


def to_device(dev, a, fname, name):
    """A copy on the GPU of host array `a` (argument `name` of fname, target='cuda'); an
    AllocationError naming it where the device has no room."""
    try:
        return dev.from_host(a)
    except MemoryError as e:
        raise _no_room(f"{fname}(): target='cuda': cannot copy argument '{name}'", a.shape,
                       a.dtype, "to the GPU", e) from None


def contiguous_copy(a, fname):
    """A C-contiguous copy of device array `a` (the result of fname); an AllocationError
    naming it where the device has no room."""
    try:
        return backend().contiguous(a)
    except MemoryError as e:
        raise _no_room(f"{fname}(): cannot allocate the C-ordered copy of its result",
                       a.shape, a.dtype, "on the GPU", e) from None


def _no_room(what, shape, dtype, where, e, hint=""):
    """The AllocationError of a device allocation that failed (CuPy's OutOfMemoryError is
    a MemoryError): `what` with the buffer's dtype, shape and size."""
    nbytes = int(np.prod(shape, dtype=object)) * np.dtype(dtype).itemsize
    return AllocationError(f"{what} ({np.dtype(dtype)}[{', '.join(map(str, shape))}]) "
                           f"{where}: {nbytes} bytes ({_human_bytes(nbytes)}); {e}{hint}")


def host_result(result):
    """A kernel's result copied to NumPy (a tuple stays a tuple)."""
    dev = backend()
    if isinstance(result, tuple):
        return tuple(dev.to_host(r) for r in result)
    return dev.to_host(result)
