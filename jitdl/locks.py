"""Locks that a fork never leaves held.

A process that forks while another of its threads holds a lock (a compile in progress, a
cache write, the background tuner) gives its child a copy of that lock, held by a thread
the child does not have: the child's first compile or cache read waits for ever. The
locks here are replaced by fresh ones in the child (os.register_at_fork); what they
guarded is consistent there (the GIL was held by the forking thread) but for the work the
other thread had under way, which the child simply does not have.
"""
from __future__ import annotations

import os
import threading
import weakref

_every = weakref.WeakSet()


class Lock:
    """threading.Lock (or RLock, reentrant=True) that is new in a forked child."""

    __slots__ = ("_make", "_lock", "__weakref__")

    def __init__(self, reentrant: bool = False):
        self._make = threading.RLock if reentrant else threading.Lock
        self._lock = self._make()
        _every.add(self)

    def acquire(self, blocking=True, timeout=-1):
        return self._lock.acquire(blocking, timeout)

    def release(self):
        self._lock.release()

    def __enter__(self):
        return self._lock.__enter__()

    def __exit__(self, *exc):
        return self._lock.__exit__(*exc)


def _after_fork_in_child():
    for lock in list(_every):
        lock._lock = lock._make()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
