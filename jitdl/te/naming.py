"""Names jitdl gives to what the user left unnamed (reduce axes, stages), per trace.

A trace runs inside its own scope, so the same definition gets the same names in every
process whatever ran before it ("k0", "T0", ...): loop IR text, recorded schedule steps
and cache keys are stable. Outside a trace (a reduce axis made at module level) a
process-wide scope is used, with a prefix that cannot collide with a trace's names.
"""
from __future__ import annotations

import contextlib
import contextvars


class Scope:
    def __init__(self, prefix=""):
        self.prefix = prefix
        self.counts = {}
        self.auto = set()          # ids of objects named here (a binding may rename them)

    def fresh(self, base):
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return f"{self.prefix}{base}{n}"


_GLOBAL = Scope("g_")
_current = contextvars.ContextVar("jitdl_names", default=_GLOBAL)


@contextlib.contextmanager
def scope():
    """A fresh naming scope for one trace."""
    token = _current.set(Scope())
    try:
        yield
    finally:
        _current.reset(token)


def fresh(base: str) -> str:
    """A new name `base<n>`, n counting from 0 in the current scope."""
    return _current.get().fresh(base)


def remember(obj):
    """Note that jitdl named obj (see `auto_named`); returns obj."""
    _current.get().auto.add(id(obj))
    return obj


def auto_named(obj) -> bool:
    """Whether jitdl named obj in the current scope (so `k = jd.reduce_axis(K)` may give
    the axis the variable's name)."""
    return id(obj) in _current.get().auto
