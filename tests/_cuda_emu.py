"""Runs the CUDA C that jitdl generates on the CPU, with CUDA's semantics for what the code
generator uses, so tests compare GPU kernels with NumPy on a machine without a GPU.

    mod = compile(source)                   # g++, cached by the source's hash
    mod.launch(name, grid, block, shared_bytes, args)

`args` are NumPy arrays (passed as pointers, written in place) and scalars, in the
kernel's parameter order; each is checked against the kernel's C signature (an array's
dtype against the pointer's type; a scalar must be a NumPy scalar of the parameter's exact
type, a Python int for `long long` or a Python float for `double`, as a real launch
needs: a float64 given to a `float` parameter would be read as garbage on a GPU). The
launch is checked like a real one: block and grid limits, __launch_bounds__, and static
plus dynamic shared memory within 48 KiB.

How kernels run (tests/_cuda_emu.h): each CUDA thread is a fiber; a block's threads run in
index order on the calling thread, each until it finishes or waits at __syncthreads() or a
warp shuffle; blocks run one after another. __shared__ memory is poisoned (0xFF bytes) at
each block's start and local arrays at their declaration, and with `checked` (the default)
every index into a pointer parameter, a local or a shared array is checked. A barrier that
not every thread reaches, shuffles whose lanes disagree, or an out-of-bounds access stop
the launch with an EmulatorError naming the block and thread.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

HEADER = Path(__file__).with_name("_cuda_emu.h")
FLAGS = ["-std=c++17", "-O1", "-fPIC", "-shared", "-fvisibility=hidden",
         "-fno-threadsafe-statics", "-ffp-contract=off", "-fno-strict-aliasing", "-w",
         # more, e.g. "-fsanitize=undefined" (with UBSAN_OPTIONS=log_path=...) to look for
         # undefined behaviour in the generated C, which a GPU may turn into wrong answers
         *os.environ.get("JITDL_CUDA_EMU_FLAGS", "").split()]
MAX_THREADS, MAX_BLOCK = 1024, (1024, 1024, 64)
MAX_GRID = (2 ** 31 - 1, 65535, 65535)
SHARED_LIMIT = 48 * 1024        # static + dynamic shared memory per block, without opt-in

C_DTYPE = {"float": "float32", "double": "float64", "long long": "int64", "int": "int32",
           "short": "int16", "signed char": "int8", "unsigned char": "uint8",
           "bool": "bool", "unsigned long long": "uint64", "unsigned int": "uint32"}

_KERNEL = re.compile(r'extern "C" __global__ void (?:__launch_bounds__\((\d+)\) )?(\w+)'
                     r'\(([^)]*)\)\s*\{')
_PARAM = re.compile(r"^(const )?([a-z ]+?)(\*)?(?: __restrict__)? (\w+)$")
_ARRAY = re.compile(r"^(\s*)(__shared__ )?(" + "|".join(sorted(C_DTYPE, key=len, reverse=True))
                    + r") (\w+)\[(\d+)\];$", re.M)
_INT_CAST = re.compile(r"\(\(((?:unsigned )?(?:char|short|int|long long)|signed char|bool)\)")
_SHARED = re.compile(r"__shared__ ([a-z ]+?) \w+((?:\[\d+\])+);")


class EmulatorError(RuntimeError):
    """A launch the emulator refused or stopped: the kernel and what went wrong."""


class Param:
    __slots__ = ("name", "ctype", "pointer", "const")

    def __init__(self, name, ctype, pointer, const):
        self.name, self.ctype, self.pointer, self.const = name, ctype, pointer, const


class KernelInfo:
    """One kernel's signature and the launch facts read from its text."""

    def __init__(self, name, params, launch_bounds, static_shared, local_bytes):
        self.name, self.params = name, params
        self.launch_bounds, self.static_shared = launch_bounds, static_shared
        self.local_bytes = local_bytes


def parse(source: str) -> dict:
    """name -> KernelInfo for each `extern "C" __global__` kernel of the source."""
    heads = list(_KERNEL.finditer(source))
    kernels = {}
    for k, m in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(source)
        body = source[m.end():end]
        params = []
        for text in filter(None, (p.strip() for p in m.group(3).split(","))):
            pm = _PARAM.match(text)
            if pm is None or pm.group(2) not in C_DTYPE:
                raise EmulatorError(f"kernel {m.group(2)}: cannot read parameter {text!r}")
            params.append(Param(pm.group(4), pm.group(2), bool(pm.group(3)),
                                bool(pm.group(1))))
        shared = 0
        for sm in _SHARED.finditer(body):
            n = int(np.prod([int(d) for d in re.findall(r"\d+", sm.group(2))]))
            shared += n * np.dtype(C_DTYPE[sm.group(1)]).itemsize
        local = sum(int(a.group(5)) * np.dtype(C_DTYPE[a.group(3)]).itemsize
                    for a in _ARRAY.finditer(body) if not a.group(2))
        bounds = int(m.group(1)) if m.group(1) else None
        kernels[m.group(2)] = KernelInfo(m.group(2), params, bounds, shared, local)
    return kernels


def instrument(source: str, kernels: dict) -> str:
    """The source with checked pointers (jd_ptr) for kernel parameters and checked arrays
    (jd_arr, jd_sarr) for one-dimensional local and shared arrays."""
    def head(m):
        info = kernels[m.group(2)]
        decl = ", ".join(
            f"jd_ptr<{'const ' if p.const else ''}{p.ctype}> {p.name}" if p.pointer
            else f"const {p.ctype} {p.name}" for p in info.params)
        bounds = f"__launch_bounds__({m.group(1)}) " if m.group(1) else ""
        return f'extern "C" __global__ void {bounds}{m.group(2)}({decl}) {{'

    def array(m):
        kind = "jd_sarr" if m.group(2) else "jd_arr"
        return f"{m.group(1)}{m.group(2) or ''}{kind}<{m.group(3)}, {m.group(5)}> {m.group(4)};"
    return _ARRAY.sub(array, _KERNEL.sub(head, source))


def _cache_dir() -> Path:
    d = os.environ.get("JITDL_CUDA_EMU_DIR") or os.path.join(
        tempfile.gettempdir(), f"jitdl-cuda-emu-{os.getuid()}")
    Path(d).mkdir(parents=True, exist_ok=True)
    return Path(d)


_modules = {}
_modules_lock = threading.Lock()


def compile(source: str, checked: bool = True) -> "Module":   # noqa: A001 - the API's name
    """The module of `source` (g++ into a shared library cached under the temp directory
    by the hash of the text, header and flags)."""
    if shutil.which("g++") is None:
        raise EmulatorError("the CUDA emulator needs g++")
    # alignment only matters to a GPU's vector loads; the emulator checks every element
    source = re.sub(r"__align__\(\d+\) ", "", source)
    kernels = parse(source)         # (none is fine: a function with empty outputs)
    body = instrument(source, kernels) if checked else source
    body = _INT_CAST.sub(r"(jd_cvt<\1>() ->* ", body)      # GPU conversions (see the header)
    tramp = []
    for name in kernels:
        tramp.append(
            f"JD_EMU_EXPORT int jd_emu_launch_{name}(const long long* cfg, const jd_slot* s, "
            f"char* msg, int len) {{\n  return jd_emu_run(cfg, [](const void* a) {{ "
            f"jd_emu_call({name}, (const jd_slot*)a); }}, s, msg, len);\n}}\n"
            f"JD_EMU_EXPORT int jd_emu_arity_{name}() {{ return jd_emu_arity({name}); }}\n")
    text = (f'#include "{HEADER}"\n#line 1 "kernel.cu"\n' + body + "\n// trampolines\n"
            + "".join(tramp))
    key = hashlib.sha256("\0".join([text, HEADER.read_text(), *FLAGS]).encode()).hexdigest()[:24]
    with _modules_lock:
        mod = _modules.get(key)
        if mod is not None:
            return mod
        d = _cache_dir()
        lib = d / f"{key}.so"
        if not lib.exists():
            src = d / f"{key}.cpp"
            src.write_text(text)
            tmp = d / f"{key}.{os.getpid()}.{threading.get_ident()}.so"
            out = subprocess.run(["g++", *FLAGS, "-x", "c++", str(src), "-o", str(tmp)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise EmulatorError(f"g++ could not compile the emulated CUDA C "
                                    f"({src}):\n{out.stderr[-4000:]}")
            os.replace(tmp, lib)
        mod = _modules[key] = Module(ctypes.CDLL(str(lib)), kernels, source)
    return mod


class _Slot(ctypes.Structure):
    _fields_ = [("bits", ctypes.c_ulonglong), ("n", ctypes.c_longlong),
                ("name", ctypes.c_char_p)]


class Module:
    """The kernels of one compiled source."""

    def __init__(self, lib, kernels, source):
        self.lib, self.kernels, self.source = lib, kernels, source
        self.lock = threading.Lock()
        self.launches = 0
        self.stack = 32768 + 2 * max((k.local_bytes for k in kernels.values()), default=0)
        self.entries = {}
        for name in kernels:
            fn = getattr(lib, f"jd_emu_launch_{name}")
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.POINTER(ctypes.c_longlong), ctypes.POINTER(_Slot),
                           ctypes.c_char_p, ctypes.c_int]
            arity = getattr(lib, f"jd_emu_arity_{name}")()
            if arity != len(kernels[name].params):
                raise EmulatorError(f"kernel {name}: C has {arity} parameters, the parser "
                                    f"read {len(kernels[name].params)}")
            self.entries[name] = fn

    def launch(self, name, grid, block, shared_bytes, args):
        """Run kernel `name` over `grid` blocks of `block` threads (3-tuples) with `args`;
        arrays are written in place."""
        info = self.kernels.get(name)
        if info is None:
            raise EmulatorError(f"no kernel {name!r} in the module (it has "
                                f"{', '.join(self.kernels)})")
        grid, block = _dims("grid", name, grid), _dims("block", name, block)
        threads = block[0] * block[1] * block[2]
        if threads > MAX_THREADS or any(b > m for b, m in zip(block, MAX_BLOCK)):
            raise EmulatorError(f"{name}: a block of {block} threads is over the device's "
                                f"limits ({MAX_THREADS} threads, at most {MAX_BLOCK})")
        if any(g > m for g, m in zip(grid, MAX_GRID)):
            raise EmulatorError(f"{name}: a grid of {grid} blocks is over the device's "
                                f"limits {MAX_GRID}")
        if info.launch_bounds is not None and threads > info.launch_bounds:
            raise EmulatorError(f"{name}: launched with {threads} threads per block, over "
                                f"its __launch_bounds__({info.launch_bounds})")
        if shared_bytes < 0 or info.static_shared + shared_bytes > SHARED_LIMIT:
            raise EmulatorError(
                f"{name}: {info.static_shared} bytes of static shared memory plus "
                f"{shared_bytes} dynamic are over the {SHARED_LIMIT} bytes a block may have "
                f"(a real launch fails: too many resources requested)")
        if len(args) != len(info.params):
            raise EmulatorError(f"{name}: expected {len(info.params)} arguments "
                                f"({', '.join(p.name for p in info.params)}), got {len(args)}")
        slots = (_Slot * max(len(args), 1))()
        keep = []
        for slot, p, a in zip(slots, info.params, args):
            _fill(slot, p, a, name, keep)
        cfg = (ctypes.c_longlong * 7)(*grid, *block, self.stack)
        msg = ctypes.create_string_buffer(2048)
        with self.lock:
            self.launches += 1
            rc = self.entries[name](cfg, slots, msg, len(msg))
        if rc != 0:
            raise EmulatorError(f"{name}<<<{grid}, {block}>>>: {msg.value.decode()}")


def _dims(what, name, v):
    v = tuple(int(x) for x in v)
    if len(v) != 3 or min(v) < 1:
        raise EmulatorError(f"{name}: {what} must be three positive ints, got {v}")
    return v


def _fill(slot, p, a, kernel, keep):
    want = np.dtype(C_DTYPE[p.ctype])
    where = f"{kernel}: parameter {p.name} ({'const ' if p.const else ''}{p.ctype}" \
            f"{'*' if p.pointer else ''})"
    if p.pointer:
        if not isinstance(a, np.ndarray):
            raise EmulatorError(f"{where}: expected a NumPy array, got {type(a).__name__}")
        ok = a.dtype == want or (p.ctype == "unsigned char" and a.dtype == np.bool_)
        if not ok:
            raise EmulatorError(f"{where}: expected an array of {want}, got {a.dtype}")
        if not a.flags.c_contiguous:
            raise EmulatorError(f"{where}: the array is not C-contiguous")
        if not p.const and not a.flags.writeable:
            raise EmulatorError(f"{where}: the kernel writes it, the array is read-only")
        slot.bits, slot.n = a.ctypes.data, a.size
        name = p.name.encode()
        keep.append(name)
        slot.name = name
        return
    if isinstance(a, np.ndarray) or not np.isscalar(a):
        raise EmulatorError(f"{where}: expected a scalar, got {type(a).__name__}")
    if isinstance(a, np.generic):
        if a.dtype != want:
            raise EmulatorError(f"{where}: expected a {want} scalar, got {a.dtype} (on a GPU "
                                f"its bytes would be read as {p.ctype})")
        value = a
    elif isinstance(a, bool) and want == np.bool_:
        value = np.bool_(a)
    elif isinstance(a, int) and not isinstance(a, bool) and want == np.int64:
        value = np.int64(a)
    elif isinstance(a, float) and want == np.float64:
        value = np.float64(a)
    else:
        raise EmulatorError(f"{where}: expected a {want} scalar, got {type(a).__name__} {a!r}")
    raw = np.zeros(8, np.uint8)
    raw[:want.itemsize] = np.frombuffer(value.tobytes(), np.uint8)
    slot.bits = int(raw.view(np.uint64)[0])
