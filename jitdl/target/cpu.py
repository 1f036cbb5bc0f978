"""The host CPU as a target: read from the machine (LLVM's host CPU name and features,
the cache hierarchy from sysfs), never from constants tuned to one machine.

Sizes that schedules depend on are derived here: the vector width from the instruction
set, the register budget of a register tile from the vector register count, how large a
packed operand (or one block of it) may be from the cache sizes.
"""
from __future__ import annotations

import functools
import hashlib
import os
import threading
from dataclasses import dataclass, field, fields

from jitdl.config import cores
from jitdl.schedule.auto import LEVELS as AUTO_LEVELS
from jitdl.schedule.auto import auto_schedule

ARRAY_FLAGS_OFFSET = 64          # int flags of PyArrayObject on 64-bit CPython builds
ARRAY_OK_FLAGS = 0x0101          # NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED
ARRAY_F_OK_FLAGS = 0x0102        # NPY_ARRAY_F_CONTIGUOUS | NPY_ARRAY_ALIGNED
ARRAY_WRITEABLE = 0x0400         # NPY_ARRAY_WRITEABLE
ARRAY_NDIM_OFFSET, ARRAY_DIMS_OFFSET, ARRAY_DESCR_OFFSET = 24, 32, 56   # nd, dimensions, descr
ARRAY_STRIDES_OFFSET = 40        # strides (bytes per step of each dimension)
ARRAY_ALIGNED = 0x0100           # NPY_ARRAY_ALIGNED
# a strided 1-d or 2-d operand of at most this many bytes is gathered by a kernel's direct
# entry into a buffer on its stack (a[::2], m[:, :20]; 1000 float64 fit); larger ones take
# the general path
GATHER_BYTES = 8 << 10
# and all the operands a call gathers at most this many bytes together (the buffers take
# exactly their views' bytes, only where a view is gathered: an entry of many operands,
# as concatenate's, costs no stack for contiguous ones); further strided views send the
# call to the general path
GATHER_TOTAL = 3 * GATHER_BYTES
# kernel outputs of at least this many bytes come from runtime.pool (reused memory);
# smaller ones from NumPy's allocator (glibc's heap already reuses them)
POOL_MIN_BYTES = 4 << 20
# the globals (suffixes of the kernel's symbol) holding the functions that allocate and
# free its heap buffers: null (aligned_alloc and free) until the runtime points them at
# its pool on loading the kernel (runtime.pool.install_hooks)
HEAP_HOOKS = (".heap_alloc", ".heap_free")
# CPython's object layout on 64-bit GIL builds 3.10-3.13 (read by the `.fast` entry):
# ob_type after the reference count, a tuple's size and then its items
OBJECT_TYPE_OFFSET, TUPLE_SIZE_OFFSET, TUPLE_ITEMS_OFFSET = 8, 16, 24
# the items of the `.fast` entry's `self` tuple (jitdl.runtime.kernel builds it)
FAST_OK, FAST_FALLBACK, FAST_ERROR, FAST_ARRAY_TYPE = 0, 1, 2, 3


@dataclass(frozen=True)
class CPU:
    """A CPU target. Policies are fields so that a test or a cross-compile can make one
    with other values; `host()` reads the machine's."""
    triple: str
    cpu: str                        # LLVM's name for the processor
    features: str = field(repr=False)   # LLVM feature string (+avx2,+fma,...)
    vector_bytes: int               # widest SIMD register the code may use
    vector_registers: int
    l1_bytes: int
    l2_bytes: int
    l3_bytes: int
    cores: int
    array_data_offset: int | None = None   # where NumPy keeps an array's data pointer
    name = "cpu"                    # (a class attribute: not a field)
    # the automatic schedule's levels, from all its decisions down to none (class attribute)
    auto_levels = tuple(level for level, _ in AUTO_LEVELS)
    # below this many loop iterations a parallel loop costs more (fork/join, ~3 us) than
    # it saves
    parallel_min_work: int = 1 << 15
    # a buffer of up to this many bytes computed at a consumer's loop is a local array
    local_buffer_bytes: int = 16384
    # intermediates of up to this many bytes live on the stack rather than the heap
    stack_buffer_bytes: int = 4096
    # bytes of one way of the L1 data cache (its sets times its line): addresses a
    # multiple of this apart compete for the same sets (a virtually indexed L1 keeps it
    # at most a page)
    l1_way_bytes: int = 4096
    # bytes of one cache line
    cache_line_bytes: int = 64

    @property
    def l1_ways(self) -> int:
        return max(1, self.l1_bytes // self.l1_way_bytes)

    def lanes(self, dtype_bytes: int) -> int:
        """SIMD lanes of one vector register for elements of this size."""
        return max(1, self.vector_bytes // dtype_bytes)

    def max_accumulators(self, dtype_bytes: int) -> int:
        """Elements a register tile of a reduction may keep: three quarters of the vector
        registers hold accumulators, the rest stream operands (AVX2: 12 registers, 96
        float32; AVX-512: 24 registers, 384 float32)."""
        return self.vector_registers * 3 // 4 * self.lanes(dtype_bytes)

    @property
    def pack_block_bytes(self) -> int:
        """The most a packed operand of a register tile may take: half of L3 (every row
        block of the output rereads it, from the cache the cores share), at least L2. A
        larger operand is packed one block of this size at a time."""
        return max(self.l2_bytes, self.l3_bytes // 2)

    def environment(self) -> dict:
        """What about this target can change a binary (for cache keys): the processor,
        and every policy the automatic schedule and code generation read."""
        env = {f.name: getattr(self, f.name) for f in fields(self)}
        env["features"] = hashlib.sha256(self.features.encode()).hexdigest()[:16]
        return {"target": "cpu", **env}

    def auto_schedule(self, sched, cfg=None, num_threads=1, level=0):
        """The automatic schedule of the CPU (jitdl.schedule.auto) for this target, taking
        the decisions of level `level` of auto_levels (0: all of them; the last: none)."""
        return auto_schedule(sched, num_threads, cfg, self, level)

    def __str__(self):
        return (f"cpu {self.cpu} ({self.vector_bytes * 8}-bit SIMD, "
                f"{self.vector_registers} vector registers, L1 {self.l1_bytes >> 10} KiB, "
                f"L2 {self.l2_bytes >> 10} KiB, L3 {self.l3_bytes >> 10} KiB, "
                f"{self.cores} cores)")


_lock = threading.Lock()


def llvm():
    """llvmlite's binding layer with the native target initialised (once)."""
    import llvmlite.binding as binding
    with _lock:
        if not getattr(llvm, "done", False):
            binding.initialize_native_target()
            binding.initialize_native_asmprinter()
            llvm.done = True
    return binding


@functools.lru_cache(maxsize=None)
def host() -> CPU:
    """The machine this process runs on."""
    b = llvm()
    features = b.get_host_cpu_features().flatten()
    have = {f[1:] for f in features.split(",") if f.startswith("+")}
    triple = b.get_process_triple()
    if "avx512f" in have:
        vbytes, regs = 64, 32
        # LLVM tunes Intel's AVX-512 parts to vectorize loops 256 bits wide; jitdl's own
        # vectorized loops are 512 bits wide already, so the loops LLVM vectorizes inside
        # a kernel (a fused softmax's row passes) take the same width: a 128 x 1024
        # float32 softmax 120 -> 85 us on a 2-core Emerald Rapids
        features += ",-prefer-256-bit"
    elif "avx" in have:
        vbytes, regs = 32, 16
    elif triple.startswith(("aarch64", "arm64")):
        vbytes, regs = 16, 32
    else:
        vbytes, regs = 16, 16
    (l1, l2, l3), way, line = _caches()
    return CPU(triple, b.get_host_cpu_name(), features, vbytes, regs, l1, l2, l3,
               cores(), _array_data_offset(), l1_way_bytes=way, cache_line_bytes=line)


def _caches():
    """((L1 data, L2, L3) sizes in bytes, bytes of one way of L1, bytes of its line) from
    sysfs; common sizes where it says nothing."""
    found, way, line = {}, 4096, 64
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        entries = []
    for d in entries:
        try:
            with open(os.path.join(root, d, "level")) as f:
                level = int(f.read())
            with open(os.path.join(root, d, "type")) as f:
                kind = f.read().strip()
            with open(os.path.join(root, d, "size")) as f:
                text = f.read().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction":
            continue
        if level == 1:
            try:
                with open(os.path.join(root, d, "number_of_sets")) as f:
                    sets = int(f.read())
                with open(os.path.join(root, d, "coherency_line_size")) as f:
                    line = int(f.read()) or line
                way = sets * line or way
            except (OSError, ValueError):
                pass
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        try:
            found[level] = int(text.rstrip("KMG")) * scale
        except ValueError:
            continue
    return (found.get(1, 32 << 10), found.get(2, 512 << 10), found.get(3, 8 << 20)), way, line


def known_object_layout() -> bool:
    """Whether this interpreter lays out objects as OBJECT_TYPE_OFFSET... say: a 64-bit
    CPython 3.10-3.13 with the GIL (a free-threaded build has a larger object header)."""
    import sys
    import sysconfig
    return (sys.implementation.name == "cpython" and (3, 10) <= sys.version_info[:2] <= (3, 13)
            and sys.maxsize > 2 ** 32 and not sysconfig.get_config_var("Py_GIL_DISABLED"))


def _array_data_offset():
    """Offset of the data pointer inside a NumPy array object, checked on this build
    together with the flags word at ARRAY_FLAGS_OFFSET (None if the layout is not the
    usual one, or the interpreter's is not known: then calls pass data pointers)."""
    import ctypes
    import numpy as np
    if not known_object_layout():
        return None
    a = np.empty((3, 4))
    off = 16
    ok = ctypes.c_void_p.from_address(id(a) + off).value == a.ctypes.data

    def flags(x):
        return ctypes.c_int.from_address(id(x) + ARRAY_FLAGS_OFFSET).value
    view = a[:, ::2]
    ok = ok and flags(a) & ARRAY_OK_FLAGS == ARRAY_OK_FLAGS \
        and not flags(view) & 0x0001 and not view.flags.c_contiguous
    dims = ctypes.c_void_p.from_address(id(a) + ARRAY_DIMS_OFFSET).value
    ok = ok and ctypes.c_int.from_address(id(a) + ARRAY_NDIM_OFFSET).value == 2 \
        and (ctypes.c_int64 * 2).from_address(dims)[:] == [3, 4] \
        and ctypes.c_void_p.from_address(id(a) + ARRAY_DESCR_OFFSET).value == id(a.dtype)
    return off if ok else None
