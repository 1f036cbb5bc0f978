"""The automatic schedule of the CUDA target: what a GPU kernel needs that a CPU loop nest
does not (every stage's data loops spread over blocks and threads), sized from the target
(threads per block, multiprocessors), never from one machine's constants.

  - elementwise and injective stages are inlined into their readers (a reduction that
    reads an expensive element several times keeps it stored, as on the CPU);
  - each stored stage's data loops are fused into one and run as a grid-stride loop:
    consecutive threads take consecutive elements (coalesced), and a grid of a few
    blocks per multiprocessor walks the rest;
  - a stage with no data loop (a full reduction to a scalar) runs on one thread.

LEVELS lists the decisions from all of them down to none; the pipeline applies the first
level that lowers, as for the CPU.
"""
from __future__ import annotations

from jitdl.schedule.auto import _reread
from jitdl.schedule.schedule import Axis

LEVELS = (
    ("full", frozenset({"inline", "bind"})),
    ("bind only", frozenset({"bind"})),
    ("one thread", frozenset()),
)

# blocks per multiprocessor a grid-stride loop launches at most
_WAVES = 8


def auto_schedule(s, cfg=None, target=None, level=0):
    """The automatic schedule of every stage of s for a CUDA `target`, taking the
    decisions LEVELS[level] allows."""
    allow = LEVELS[level][1]
    outputs = {t.name for t in s.outputs}
    if "inline" in allow:
        for name, st in list(s.stages.items()):
            if not st.is_reduce and name not in outputs and not _reread(s, st):
                s.compute_inline(s[name])
    if "bind" in allow:
        for name, st in list(s.stages.items()):
            if st.attach == "root":
                grid_stride(s, name, target, cfg)
    return s


def grid_stride(s, name, target, cfg=None):
    """Fuse the data loops of a root stage and bind them as a grid-stride loop:
    for step: blockIdx.x b: threadIdx.x t: element (step * G + b) * T + t. Returns the
    (step, block, thread) loops, or None for a stage without data loops."""
    st = s.stages[name]
    data = [n for n in st.leaves if not st.axes[n].reduce]
    if not data:
        return None
    if st.leaves[:len(data)] != data:       # data loops first, reductions inside
        s.reorder(*[Axis(name, n) for n in data + [n for n in st.leaves if n not in data]])
    fused = s.fuse(*[Axis(name, n) for n in data]) if len(data) > 1 else Axis(name, data[0])
    extent = st.axes[fused.name].extent
    threads = target.threads_per_block
    if cfg is not None:
        threads = cfg.choice(f"{name}.threads", [target.threads_per_block] + [
            n for n in (64, 128, 512, 1024)
            if n != target.threads_per_block and n <= target.max_threads_per_block])
    if isinstance(extent, int):
        threads = min(threads, _round_up(extent, target.warp_size))
    outer, t = s.split(fused, threads)
    blocks = target.multiprocessors * _WAVES
    oext = st.axes[outer.name].extent
    if isinstance(oext, int) and oext <= blocks:
        s.bind(outer, "blockIdx.x")
        s.bind(t, "threadIdx.x")
        return None, outer, t
    step, b = s.split(outer, blocks)
    s.bind(b, "blockIdx.x")
    s.bind(t, "threadIdx.x")
    return step, b, t


def _round_up(n, m):
    return -(-n // m) * m
