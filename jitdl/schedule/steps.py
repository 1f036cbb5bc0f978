"""Schedule steps as data: one frozen dataclass per primitive, with a JSON round trip.

A schedule is the list of its steps; stages and loops are named by string (`"C"`,
`"i.o"`), so a list of steps can be hashed into cache keys, stored in tuning records,
shipped to worker processes and replayed on a fresh trace of the same definition.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields
from typing import ClassVar

from jitdl.errors import ScheduleError, SourceLoc, user_frame


def _bad(step, name, want, v):
    return ScheduleError(f"{step.op}: '{name}' must be {want}, got {v!r}", _user_line())


def _user_line():
    """The user's line behind a step being built: the primitive's call in a schedule, or
    the call that replays recorded steps. (Past the __init__ that dataclasses generate,
    whose file, "<string>", would pass for the user's.)"""
    f, _ = user_frame(sys._getframe(1))
    if f is not None and f.f_code.co_filename == "<string>" and f.f_code.co_name == "__init__":
        f, _ = user_frame(f.f_back)
    return None if f is None else SourceLoc(f.f_code.co_filename, f.f_lineno)


@dataclass(frozen=True)
class Step:
    op: ClassVar[str] = ""
    stage: str

    def __post_init__(self):
        """Field types are checked here, so a step read from JSON is refused with a
        ScheduleError rather than failing (or worse) deep in a replay."""
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type == "str" and not isinstance(v, str):
                raise _bad(self, f.name, "a name (str)", v)
            if f.type == "bool" and not isinstance(v, bool):
                raise _bad(self, f.name, "True or False", v)
            if f.type == "int" and (isinstance(v, bool) or not isinstance(v, int)
                                    or v < (1 if f.name == "factor" else 0)):
                raise _bad(self, f.name, "a positive int" if f.name == "factor"
                           else "an int >= 0", v)
            if f.type == "tuple":
                if not isinstance(v, tuple) or not all(isinstance(x, str) for x in v):
                    raise _bad(self, f.name, "a list of names", v)
                if len(set(v)) != len(v):
                    raise _bad(self, f.name, "distinct names", list(v))

    def to_json(self) -> dict:
        out = {"op": self.op}
        for f in fields(self):
            v = getattr(self, f.name)
            if f.metadata.get("later") and v == f.default:
                continue    # (a field added later, at its default: keys stay as they were)
            out[f.name] = list(v) if isinstance(v, tuple) else v
        return out


@dataclass(frozen=True)
class Split(Step):
    op: ClassVar[str] = "split"
    axis: str
    factor: int
    # split(nparts=): the outer extent asked for (0: a factor was given); the factor is
    # ceil(extent / nparts) of the whole axis, and of the block of a stage computed at a
    # loop (lower._block_loops)
    nparts: int = field(default=0, metadata={"later": True})


@dataclass(frozen=True)
class Fuse(Step):
    op: ClassVar[str] = "fuse"
    outer: str
    inner: str


@dataclass(frozen=True)
class Reorder(Step):
    op: ClassVar[str] = "reorder"
    axes: tuple


@dataclass(frozen=True)
class Vectorize(Step):
    op: ClassVar[str] = "vectorize"
    axis: str


@dataclass(frozen=True)
class Parallel(Step):
    op: ClassVar[str] = "parallel"
    axis: str


@dataclass(frozen=True)
class Unroll(Step):
    op: ClassVar[str] = "unroll"
    axis: str


@dataclass(frozen=True)
class Bind(Step):
    op: ClassVar[str] = "bind"
    axis: str
    thread: str                 # "blockIdx.x" ... "threadIdx.z"


@dataclass(frozen=True)
class ComputeInline(Step):
    op: ClassVar[str] = "compute_inline"


@dataclass(frozen=True)
class ComputeRoot(Step):
    op: ClassVar[str] = "compute_root"


@dataclass(frozen=True)
class ComputeAt(Step):
    op: ClassVar[str] = "compute_at"
    target: str                 # the consumer stage
    axis: str                   # its loop
    axis_stage: str             # the stage the loop handle came from (checked = target)
    block_buffer: bool = True


@dataclass(frozen=True)
class Pack(Step):
    op: ClassVar[str] = "pack"
    tensor: str
    dim: int
    factor: int


@dataclass(frozen=True)
class CacheRead(Step):
    op: ClassVar[str] = "cache_read"
    readers: tuple
    tensor: str
    scope: str = "global"       # "global", "shared" (GPU block), "local" (registers)


@dataclass(frozen=True)
class CacheWrite(Step):
    op: ClassVar[str] = "cache_write"


@dataclass(frozen=True)
class RFactor(Step):
    op: ClassVar[str] = "rfactor"
    axis: str
    factor: int
    blocked: bool = False       # part kf takes a contiguous block, not every factor-th
    # more reduction axes taken with `axis` as one, row-major (rewrite.rfactor)
    fuse: tuple = field(default=(), metadata={"later": True})


@dataclass(frozen=True)
class DivideAfter(Step):
    op: ClassVar[str] = "divide_after"


KINDS = {cls.op: cls for cls in (Split, Fuse, Reorder, Vectorize, Parallel, Unroll, Bind,
                                 ComputeInline, ComputeRoot, ComputeAt, Pack, CacheRead,
                                 CacheWrite, RFactor, DivideAfter)}
_ALIASES = {"vectorized": "vectorize"}          # the spelling of earlier recorded steps


def from_json(d) -> Step:
    """The step a JSON object (as written by Step.to_json) describes."""
    if isinstance(d, Step):
        return d
    if not isinstance(d, dict) or not isinstance(d.get("op"), str):
        raise ScheduleError(f"a schedule step must be an object with an 'op', got {d!r}")
    op = _ALIASES.get(d["op"], d["op"])
    cls = KINDS.get(op)
    if cls is None:
        raise ScheduleError(f"unknown schedule step {d['op']!r}; steps: {', '.join(KINDS)}")
    names = {f.name for f in fields(cls)}
    given = {k for k in d if k != "op"}
    required = {f.name for f in fields(cls) if f.default is f.default_factory}
    if not given <= names or not required <= given:
        raise ScheduleError(f"schedule step {op!r} takes {sorted(names)}, got {sorted(given)}")
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()
                  if k != "op"})
