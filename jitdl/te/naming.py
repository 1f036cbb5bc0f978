"""Names jitdl gives to what the user left unnamed (reduce axes, stages).

A trace runs inside its own scope, so the same definition gets the same names in every
process whatever ran before it ("k0", "T0", ...): loop IR text, recorded schedule steps
and cache keys are stable. Outside a trace (a reduce axis made at module level and used
by definitions) the name comes from where it was made (`k_L12`: line 12), which does not
depend on what else the process did either.
"""
from __future__ import annotations

import contextlib
import contextvars

from jitdl.errors import user_loc


class Scope:
    def __init__(self):
        self.counts = {}
        self.auto = {}          # id -> object named here (held, so ids are not reused)

    def fresh(self, base):
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return f"{base}{n}"


class _SiteScope:
    """Outside traces: names from the user's source line."""

    def __init__(self):
        self.counts = {}

    def fresh(self, base):
        loc = user_loc()
        site = f"{base}_L{loc.lineno}" if loc is not None else base
        where = (site, loc.filename if loc is not None else None)
        n = self.counts.get(where, 0)
        self.counts[where] = n + 1
        return site if n == 0 else f"{site}_{n}"


_OUTSIDE = _SiteScope()
_current = contextvars.ContextVar("jitdl_names", default=None)


@contextlib.contextmanager
def scope():
    """A fresh naming scope for one trace."""
    token = _current.set(Scope())
    try:
        yield
    finally:
        _current.reset(token)


def tracing() -> bool:
    """Whether a definition is being traced (its calls add stages, not kernels)."""
    return _current.get() is not None


def fresh(base: str) -> str:
    """A new name: `base<n>`, n counting from 0 in the current trace; outside a trace,
    named after the line that asks."""
    return (_current.get() or _OUTSIDE).fresh(base)


def remember(obj):
    """Note that jitdl named obj in this trace (see `auto_named`); returns obj."""
    sc = _current.get()
    if sc is not None:
        sc.auto[id(obj)] = obj
    return obj


def auto_named(obj) -> bool:
    """Whether jitdl named obj in the current trace (so `k = jd.reduce_axis(K)` may give
    the axis the variable's name)."""
    sc = _current.get()
    return sc is not None and sc.auto.get(id(obj)) is obj
