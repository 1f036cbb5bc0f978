"""Kernels as shared libraries: object code linked by the system linker, loaded by dlopen.

A disk-cache hit is mostly waiting for the loader: MCJIT needs a target machine, an
engine and a relocation pass (about 1.5 ms for a small kernel), while the dynamic loader
maps a linked library in about 0.1 ms. So a compiled kernel is linked into a shared
library on a background thread, after its first call has been served from MCJIT, and the
library is added to its cache entry; later processes dlopen it.

The library lives in the (checksummed) cache entry. To load it, its bytes are written to
a fresh file in the cache's private directory, opened and unlinked: a unique name, since
the dynamic loader hands back an already loaded library for a path it has seen. Any
failure (no linker, a loader error) falls back to MCJIT on the entry's object code.
"""
from __future__ import annotations

import _ctypes
import atexit
import ctypes
import hashlib
import logging
import os
import queue
import shutil
import subprocess
import tempfile
import threading

from jitdl.config import settings
from jitdl.runtime import engine
from jitdl.target.cpu import HEAP_HOOKS
from jitdl import locks

log = logging.getLogger("jitdl.cache")

# -shared: a library; -Bsymbolic: the library's own calls (entry -> kernel) bind to its
# own definitions even if the process has a global symbol of the same name; -z now:
# every symbol (libgomp, libm) is resolved at dlopen, where a failure is an OSError
# rather than a crash in the middle of a call; -z text: code that is not
# position-independent is an error, not a library with text relocations.
_LD_FLAGS = ["-shared", "-Bsymbolic", "-z", "now", "-z", "text", "-z", "noexecstack",
             "--hash-style=gnu"]
_LINK_TIMEOUT_S = 20


_found = {}


def enabled() -> bool:
    """False when JITDL_LINKER=0: no linking, and no library is loaded with dlopen."""
    return settings.linker.lower() not in ("0", "no", "none", "off", "false")


def linker() -> list | None:
    """The command that links a shared library, or None (JITDL_LINKER=0, or no ld)."""
    choice = settings.linker
    if choice not in _found:
        path = None
        if enabled():
            path = shutil.which(choice or "ld")
        _found[choice] = [path] + _LD_FLAGS if path else None
    return _found[choice]


def link_shared(obj: bytes, directory: str | None = None) -> bytes | None:
    """Link position-independent object code into a shared library (its bytes), or None
    with a log line when it cannot be done here. The work files go to a `.link-<pid>-*`
    directory under `directory` (the cache's, whose sweep removes what a killed process
    left), else under the system's temporary directory."""
    cmd = linker()
    if cmd is None:
        return None
    try:
        return _link(cmd, obj, directory)
    except OSError as e:                 # e.g. a full disk: the library is optional
        log.info("linking a shared library failed (%s); MCJIT loads this kernel", e)
        return None


def _link(cmd, obj, directory):
    # mkdtemp, not TemporaryDirectory: the latter's exit hook may remove the directory
    # while the interpreter's exit waits for this link
    d = tempfile.mkdtemp(prefix=f".link-{os.getpid()}-", dir=directory)
    try:
        src, dst = os.path.join(d, "kernel.o"), os.path.join(d, "kernel.so")
        with open(src, "wb") as f:
            f.write(obj)
        try:
            p = subprocess.run(cmd + ["-o", dst, src], capture_output=True, text=True,
                               timeout=_LINK_TIMEOUT_S)
        except (OSError, subprocess.SubprocessError) as e:
            log.info("linking a shared library failed (%s); MCJIT loads this kernel", e)
            return None
        if p.returncode != 0 or not os.path.exists(dst):
            log.info("linking a shared library failed (%s): %s", p.returncode,
                     p.stderr.strip()[:500])
            return None
        try:                             # only a library that loads goes to the cache
            _ctypes.dlclose(ctypes.CDLL(dst, mode=os.RTLD_LOCAL | os.RTLD_NOW)._handle)
        except OSError as e:
            log.info("the linked library does not load (%s); MCJIT loads this kernel", e)
            return None
        with open(dst, "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def load(entry, symbol: str, directory: str | None, what: str):
    """The code of a cache or export entry: its shared library through dlopen when it has
    one (written to `directory`, else to a private temporary one), or else, or if that
    fails (a noexec file system), its object code through MCJIT, whose errors propagate."""
    engine.parallel_available()          # libgomp first: the library links to it
    if entry.shared is not None and enabled():
        try:
            if directory is not None:
                try:
                    return load_shared(entry.shared, entry.obj, symbol, directory)
                except UnwritableError as e:    # (a read-only cache: a private directory
                    log.info("cannot write the library of %s to %s (%s); loading it from "
                             "a temporary directory", what, directory, e)   # then; a noexec
                    #                             one fails at dlopen: MCJIT, as before)
            d = tempfile.mkdtemp(prefix="jitdl-load-")          # mode 0700
            try:
                return load_shared(entry.shared, entry.obj, symbol, d)
            finally:
                shutil.rmtree(d, ignore_errors=True)
        except OSError as e:
            log.info("cannot dlopen the cached library of %s (%s); using MCJIT", what, e)
    return engine.Loaded(entry.obj, symbol)


_loaded = {}                 # sha256 of a library -> its SharedLoaded
_loaded_lock = locks.Lock()


def load_shared(shared: bytes, obj: bytes, symbol: str, directory: str):
    """The library loaded with dlopen, once per process: libraries are never unloaded
    (a kernel may be running), so loading the same one again for every new Function
    would map it again and again."""
    digest = hashlib.sha256(shared).digest() + symbol.encode()
    with _loaded_lock:
        lib = _loaded.get(digest)
        if lib is None:
            lib = _loaded[digest] = SharedLoaded(shared, obj, symbol, directory)
    return lib


class UnwritableError(OSError):
    """The library could not be written to the directory it is loaded from."""


class SharedLoaded:
    """A kernel's shared library, loaded with dlopen (the Loaded interface: address,
    fast_address, direct_address, obj). Use load_shared."""

    def __init__(self, shared: bytes, obj: bytes, symbol: str, directory: str):
        # a random name opened exclusively (tempfile.mkstemp's first use costs 0.3 ms)
        path = os.path.join(directory, f".load-{os.getpid()}-{os.urandom(8).hex()}.so")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                         getattr(os, "O_NOFOLLOW", 0), 0o700)
        except OSError as e:
            raise UnwritableError(e.errno, e.strerror, path) from None
        try:
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(shared)
            except OSError as e:
                raise UnwritableError(e.errno, e.strerror, path) from None
            self.lib = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
        finally:
            try:
                os.unlink(path)
            except OSError:
                pass
        self.obj = obj
        self.shared = shared
        self.address = self.function(symbol)
        self.fast_address = self.function(symbol + ".fast")
        self.direct_address = self.function(symbol + ".direct")
        if not self.address:
            raise OSError(f"symbol {symbol} not found in the shared library")
        self.heap_hooks = tuple(self.variable(symbol + h) for h in HEAP_HOOKS)

    def variable(self, name):
        """The address of global variable `name` (0: none)."""
        try:
            return ctypes.addressof(ctypes.c_void_p.in_dll(self.lib, name))
        except ValueError:
            return 0

    def function(self, name):
        """The address of function `name` (0: none)."""
        try:
            return ctypes.cast(self.lib[name], ctypes.c_void_p).value or 0
        except AttributeError:
            return 0


class _Linker:
    """One daemon thread that links kernels after their first call and hands each
    library to a callback (which adds it to the cache entry). The interpreter's exit
    waits for the queue (up to EXIT_WAIT_S), so a short script leaves complete entries
    behind. A forked child starts with an empty queue and no thread."""

    EXIT_WAIT_S = 10.0

    def __init__(self):
        self._reset()
        atexit.register(self.drain, self.EXIT_WAIT_S)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=self._reset)

    def _reset(self):
        self._queue = queue.Queue()
        self._thread = None
        self._lock = threading.Lock()

    def submit(self, obj: bytes, directory, done):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, args=(self._queue,),
                                                name="jitdl-linker", daemon=True)
                self._thread.start()
        self._queue.put((obj, directory, done))

    @staticmethod
    def _work(jobs):
        while True:
            obj, directory, done = jobs.get()
            try:
                shared = link_shared(obj, directory)
                if shared is not None:
                    done(shared)
            except Exception as e:       # a library is an optimisation, never an error
                log.info("could not add a shared library to the cache: %s", e)
            finally:
                jobs.task_done()

    def drain(self, timeout=None):
        """Wait until every submitted kernel is linked and stored (or `timeout` s)."""
        jobs = self._queue
        if self._thread is None:
            return
        with jobs.all_tasks_done:
            jobs.all_tasks_done.wait_for(lambda: not jobs.unfinished_tasks, timeout)


_linker = _Linker()


def link_later(obj: bytes, directory: str, done):
    """Link `obj` on the background thread (work files under `directory`) and call
    done(library bytes), if a linker is available."""
    if linker() is not None:
        _linker.submit(obj, directory, done)


def drain():
    _linker.drain()
