"""An NVIDIA GPU as a target: its compute capability and limits, read through CuPy from
the current device, or those of a stated architecture where there is no GPU (code
generation needs none, so `f.cuda_source(...)` works on any machine).

What schedules depend on is derived here: threads per block, shared memory per block,
the number of multiprocessors (how many blocks fill the machine), the warp size.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from jitdl.schedule.gpu import LEVELS as GPU_LEVELS
from jitdl.schedule.gpu import auto_schedule

# where no GPU can be asked, code is generated for this one (an H100, sm_90)
DEFAULT_ARCH = (9, 0)


@dataclass(frozen=True)
class CUDA:
    """A CUDA target. `device()` reads the current GPU; `CUDA()` is an sm_90 (H100-like)
    device for generating code without one."""
    arch: tuple = DEFAULT_ARCH          # compute capability (major, minor)
    multiprocessors: int = 132
    max_threads_per_block: int = 1024
    max_block_dims: tuple = (1024, 1024, 64)
    max_grid_dims: tuple = (2 ** 31 - 1, 65535, 65535)
    shared_bytes: int = 48 * 1024       # static shared memory per block
    warp_size: int = 32
    device_name: str = "no GPU (code generation only)"
    cuda_version: int = 0               # the CUDA runtime's, e.g. 12080 (0: unknown)
    nvrtc_version: tuple = (0, 0)
    name = "cuda"                       # (class attributes: not fields)
    auto_levels = tuple(level for level, _ in GPU_LEVELS)
    # a buffer of up to this many bytes computed at a loop inside a kernel is a
    # per-thread array (registers, or local memory when indexed dynamically)
    local_buffer_bytes: int = 1024
    # partition_loops' parallel grain (a CUDA kernel has no CPU-parallel loops)
    parallel_min_work: int = 1 << 62
    threads_per_block: int = 256        # the automatic schedule's block of threads
    # rows of a symbolic length are taken as long enough for a block of threads each
    # (jitdl.eager's kernel for long rows of every length; schedule.gpu._row_axis)
    long_rows: bool = False

    # what the cost model's features read of a target (jitdl.autotune.features), in a
    # GPU's terms: blocks resident at once, a warp's lanes, registers, L1 and L2
    @property
    def cores(self) -> int:
        return self.multiprocessors * 2

    def lanes(self, dtype_bytes: int) -> int:
        return self.warp_size

    def max_accumulators(self, dtype_bytes: int) -> int:
        return 64 * self.warp_size

    l1_bytes = 256 * 1024               # per multiprocessor (L1 and shared memory)
    l2_bytes = 50 * 1024 * 1024
    l3_bytes = 50 * 1024 * 1024         # (none: the L2 again, so ratios stay finite)

    @property
    def sm(self) -> str:
        """The architecture as nvcc and NVRTC name it: sm_90."""
        return f"sm_{self.arch[0]}{self.arch[1]}"

    def environment(self) -> dict:
        """What about this target can change a binary (for cache keys): the compute
        capability, the CUDA and NVRTC versions and every limit schedules read."""
        env = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "device_name"}
        return {"target": "cuda", **env}

    def auto_schedule(self, sched, cfg=None, num_threads=1, level=0):
        """The automatic GPU schedule (jitdl.schedule.gpu) at level `level`."""
        return auto_schedule(sched, cfg, self, level)

    def __str__(self):
        return (f"cuda {self.sm} ({self.device_name}, {self.multiprocessors} SMs, "
                f"{self.shared_bytes >> 10} KiB shared per block)")


@functools.lru_cache(maxsize=None)
def cupy_or_none():
    """CuPy, when it is installed and sees a GPU; else None (asked once per process)."""
    try:
        import cupy
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
    except Exception:           # noqa: BLE001 - no CuPy, no driver, no device
        return None
    return cupy


def device() -> CUDA:
    """The current CuPy device as a target, or the sm_90 default where there is none."""
    cupy = cupy_or_none()
    if cupy is None:
        return _default()
    return _read(cupy.cuda.runtime.getDevice())


@functools.lru_cache(maxsize=None)
def _default() -> CUDA:
    return CUDA()


@functools.lru_cache(maxsize=None)
def _read(dev: int) -> CUDA:
    import cupy
    rt = cupy.cuda.runtime
    p = rt.getDeviceProperties(dev)
    name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
    try:
        nvrtc = tuple(cupy.cuda.nvrtc.getVersion())
    except Exception:           # noqa: BLE001
        nvrtc = (0, 0)
    return CUDA(arch=(int(p["major"]), int(p["minor"])),
                multiprocessors=int(p["multiProcessorCount"]),
                max_threads_per_block=int(p["maxThreadsPerBlock"]),
                max_block_dims=tuple(int(x) for x in p["maxThreadsDim"]),
                max_grid_dims=tuple(int(x) for x in p["maxGridSize"]),
                shared_bytes=min(48 * 1024, int(p["sharedMemPerBlock"])),
                warp_size=int(p["warpSize"]), device_name=name,
                cuda_version=int(rt.runtimeGetVersion()), nvrtc_version=nvrtc)
