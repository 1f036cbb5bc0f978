"""What a tuning run is about (Task) and what one trial gave (Measurement).

Both are plain data that cloudpickle ships to worker processes: a Task carries the traced
TE graph (a value), the target (a frozen dataclass), the pipeline options, the user's
schedule function (None: the target's automatic schedule, whose knobs the space holds),
the config space, and the call's arguments (NumPy arrays and scalars in parameter order).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from jitdl import dtypes


@dataclass
class Task:
    """One key to tune: everything a worker needs to build, verify and time candidates."""
    name: str                     # the function's name (messages)
    graph: object                 # the traced TE graph (jitdl.te.graph.Graph)
    target: object                # the target value (jitdl.target.cpu.CPU)
    options: object               # jitdl.pipeline.Options
    schedule_fn: object           # the user's schedule function, or None (automatic)
    space: object                 # jitdl.schedule.config.ConfigSpace
    args: list                    # the call's arguments in parameter order
    work: tuple = ("flop", 0.0)   # ("flop" | "byte", amount per call): see work_of
    key: str = ""                 # a stable id of (definition, arguments, target)

    @property
    def default(self) -> dict:
        return self.space.default()

    def throughput(self, seconds):
        """GFLOP/s or GB/s for a time per call (0.0 for a failed trial)."""
        if not seconds or seconds <= 0 or not math.isfinite(seconds):
            return 0.0
        return self.work[1] / seconds / 1e9

    @property
    def unit(self):
        return "GFLOP/s" if self.work[0] == "flop" else "GB/s"


# the error of every candidate of a task whose reference (the default config, run in the
# timing process to check each candidate against) failed: no candidate can be verified
REFERENCE_FAILED = "run: the reference (the default config) failed"


@dataclass
class Measurement:
    """The outcome of one trial. seconds is None when the trial failed; error then says
    why ("build: ...", "crash: ...", "timeout: ...", "wrong output: ..."). A failed trial
    has zero throughput: the search goes on."""
    config: dict
    seconds: float | None = None
    error: str | None = None
    verified: bool = False        # the output matched the default schedule's on fresh inputs
    features: list | None = None  # features.extract of the lowered candidate (None: failed)
    build_s: float = 0.0
    run_s: float = 0.0
    artifact: object = field(default=None, repr=False)   # pipeline.Artifact when kept

    @property
    def ok(self):
        return self.seconds is not None and self.error is None


def _nelems(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def work_of(graph) -> tuple:
    """The work of one call of a graph: ("flop", 2 * points) when it has a reduction
    doing more than one multiply-add per byte it moves (a matmul, a convolution), else
    ("byte", bytes read and written by the definition's own arrays)."""
    flops = 0
    for t in graph.stages:
        op = t.op
        red = getattr(op, "reduce_axes", ())
        if red:
            n = _nelems(t.shape)
            for r in red:
                n *= r.extent
            flops += 2 * n
    nbytes = sum(_nelems(t.shape) * dtypes.itemsize(t.dtype) for t in graph.outputs)
    for p in graph.params:
        if hasattr(p, "shape") and hasattr(p, "dtype"):
            nbytes += _nelems(p.shape) * dtypes.itemsize(p.dtype)
    if flops > nbytes:
        return ("flop", float(flops))
    return ("byte", float(nbytes))
