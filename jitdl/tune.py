"""Tuning's public names, as `jd.tune.<name>` (loaded on first use: `import jitdl` does not
import the tuner, xgboost or multiprocessing).

    LocalRunner   builds and times candidates in worker processes on this machine
    DaskRunner    the same over a dask.distributed cluster (`f.tune(..., runner=client)`
                  also works with a Client)
    Records       the tuning records' database; default_path() says where it is
    TuneResult    what f.tune() returns
    wait          wait(timeout=None): block until background tuning has nothing left
"""
from __future__ import annotations

_WHERE = {
    "LocalRunner": "jitdl.autotune.measure",
    "DaskRunner": "jitdl.autotune.measure",
    "Records": "jitdl.autotune.records",
    "Record": "jitdl.autotune.records",
    "default_path": "jitdl.autotune.records",
    "TuneResult": "jitdl.autotune.search",
}


def wait(timeout=None):
    """Wait until background tuning (autotune="background") has no queued or running job;
    False if `timeout` seconds passed first."""
    from jitdl.autotune import background
    return background.get().wait(timeout)


def __getattr__(name):
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'jitdl.tune' has no attribute {name!r}")
    import importlib
    return getattr(importlib.import_module(where), name)


def __dir__():
    return sorted([*_WHERE, "wait"])
