"""Every JITDL_* setting, read in one place."""
from __future__ import annotations

import os
from dataclasses import dataclass


def _int(name, default):
    v = os.environ.get(name, "").strip()
    if not v:
        return default
    try:
        return int(v)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {v!r}") from None


@dataclass
class Settings:
    num_threads: int          # JITDL_NUM_THREADS: threads of parallel loops (default: all cores)
    log: str                  # JITDL_LOG: comma-separated topics to log (e.g. "compile")
    opt_level: int            # JITDL_OPT_LEVEL: LLVM speed level 0-3 (default 3)


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def load() -> Settings:
    return Settings(
        num_threads=max(1, _int("JITDL_NUM_THREADS", _cores())),
        log=os.environ.get("JITDL_LOG", ""),
        opt_level=min(3, max(0, _int("JITDL_OPT_LEVEL", 3))),
    )


settings = load()
