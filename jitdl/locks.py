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


class ForkClosing:
    """Fork handlers for objects that each use an SQLite connection under their `_lock`
    (a Lock above): the tuning records, the cache's hit statistics. A connection must not
    cross a fork: a child writing through its parent's lost what it wrote once the parent
    closed its own (sqlite's record of the file's locks is per process: the parent took
    itself for the WAL's last user and checkpointed it away under the child).

    Before a fork each object's lock is taken, waiting up to `wait_s` for a write under
    way in another thread, so that the child can close the connection (closing one in
    use would wait for ever on sqlite's mutex). The locks taken are kept per forking
    thread: two threads forking at once each release their own (one releasing the
    other's raised, leaving that lock held for ever). In the child, `detach(owner)`
    forgets each object's connection (and what else the parent has to do) and returns
    it, or None; the child closes it where its lock was taken (closing gives up only what
    the child never held: the parent keeps its locks), and keeps it, never closed, where
    another thread was using it at the fork. The child opens its own on next use."""

    def __init__(self, owners, detach, wait_s):
        self.owners = owners          # () -> the objects, each with a `_lock`
        self.detach = detach
        self.wait_s = wait_s
        self.held = {}                # forking thread's id -> the objects whose locks it holds
        self.inherited = []           # connections in use by another thread at the fork
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(before=self._before, after_in_parent=self._after_in_parent,
                                after_in_child=self._after_in_child)

    def _before(self):
        held = []
        for owner in list(self.owners()):
            if owner._lock.acquire(timeout=self.wait_s):
                held.append(owner)
        self.held[threading.get_ident()] = held

    def _after_in_parent(self):
        for owner in reversed(self.held.pop(threading.get_ident(), ())):
            owner._lock.release()

    def _after_in_child(self):
        idle = set(map(id, self.held.get(threading.get_ident(), ())))
        self.held.clear()             # (the child's locks are new ones: see Lock)
        for owner in list(self.owners()):
            db = self.detach(owner)
            if db is None:
                continue
            if id(owner) in idle:
                try:
                    db.close()
                except Exception:     # noqa: BLE001 - sqlite3.Error: the child is done with it
                    pass
            else:                     # busy in another thread at the fork: left alone
                self.inherited.append(db)
