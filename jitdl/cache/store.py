"""The on-disk store: one file per compiled kernel, aliases from fast keys, and stats.

Layout under the cache directory (per user; JITDL_CACHE_DIR overrides):

    kernels/<full key>.jdk     object code + JSON metadata + compressed texts, checksummed
    aliases/<fast key>.json    {"full": <full key>, "parts": {...}, "fname": ...}
    stats.sqlite               hit counts and last use (best effort)

Writes go to a temporary file in the same directory and are renamed into place, so a
reader sees a whole entry or none. A corrupt, truncated or foreign-version entry is a
miss that logs one warning and is overwritten. Nothing is unpickled: metadata is JSON.
Loading object code is running code, so a directory or file that another user owns, or
that group or others can write, is refused (with a warning) and jitdl compiles instead.
"""
from __future__ import annotations

import atexit
import errno
import hashlib
import json
import logging
import os
import shutil
import sqlite3
import stat
import struct
import tempfile
import time
import weakref
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from jitdl import locks
from jitdl import errors

log = logging.getLogger("jitdl.cache")

MAGIC = b"JITDLK02"
# magic, then the lengths of the metadata, the object code, the shared library (0: none)
# and the texts, then the sha256 of everything after the header
_HEADER = struct.Struct("<8sIQQQ32s")
_HEADER_V1 = struct.Struct("<8sIQQ32s")  # JITDLK01 (jitdl 0.1 exports): no library


class CacheWarning(UserWarning):
    pass


_warned = set()                  # the entries warned about in this process
_warned_lock = locks.Lock()


def warn_once(key, message):
    """A CacheWarning about one entry, once per process, shown at the user's line.
    (Python's own once-per-line registry forgets what it showed whenever a warnings
    filter changes, as tracing does when it folds constants, so a damaged entry met
    again would be reported again.)"""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    errors.warn(message, CacheWarning)


@dataclass
class Entry:
    meta: dict
    obj: bytes                   # position-independent object code (MCJIT loads it)
    texts: Mapping
    shared: bytes | None = None  # the same code linked into a shared library (dlopen)


class Texts(Mapping):
    """An entry's texts (loop IR, LLVM IR), decompressed when first read: a disk hit only
    needs the object code, and inflating ~70 KB of IR would take half a millisecond of
    the first call. The checksum of the entry already covers the compressed bytes."""

    def __init__(self, blob: bytes, texts: dict | None = None):
        self._blob = blob
        self._texts = texts

    @classmethod
    def of(cls, texts: Mapping) -> "Texts":
        """`texts` compressed once, for an entry written now and rewritten when its shared
        library is linked (pack reuses the bytes). zlib level 1: the IR texts of a cold
        compile (35-113 KB of JSON) took 0.6-2.3 ms at level 6 and 0.1-0.6 ms at level 1
        (thread time, Zen 4), 30% larger; they are read only for inspection."""
        if isinstance(texts, Texts):
            return texts
        texts = dict(texts)
        return cls(zlib.compress(json.dumps(texts).encode(), 1), texts)

    def decode(self) -> dict:
        """The texts; zlib.error or ValueError if they do not decode."""
        texts = json.loads(zlib.decompress(self._blob))
        if not isinstance(texts, dict):
            raise ValueError("texts are not a record")
        return texts

    def _load(self) -> dict:
        if self._texts is None:
            try:
                self._texts = self.decode()
            except (zlib.error, ValueError) as e:     # cannot happen to a checked entry
                log.warning("cache entry texts unreadable (%s)", e)
                self._texts = {}
        return self._texts

    def __getitem__(self, name):
        return self._load()[name]

    def __iter__(self):
        return iter(self._load())

    def __len__(self):
        return len(self._load())


def pack(meta: dict, obj: bytes, texts: Mapping, shared: bytes | None = None) -> bytes:
    m = json.dumps(meta, sort_keys=True).encode()
    t = Texts.of(texts)._blob
    shared = shared or b""
    body = m + obj + shared + t
    return _HEADER.pack(MAGIC, len(m), len(obj), len(shared), len(t),
                        hashlib.sha256(body).digest()) + body


def unpack(data: bytes) -> Entry:
    """Parse an entry; ValueError says what is wrong with a damaged one."""
    header = {MAGIC: _HEADER, b"JITDLK01": _HEADER_V1}.get(bytes(data[:8]))
    if len(data) < 8 or header is not None and len(data) < header.size:
        raise ValueError("truncated header")
    if header is None:
        raise ValueError(f"unknown format {data[:8]!r}")
    if header is _HEADER:
        _, lm, lo, ls, lt, checksum = header.unpack_from(data)
    else:
        (_, lm, lo, lt, checksum), ls = header.unpack_from(data), 0
    body = data[header.size:]
    if len(body) != lm + lo + ls + lt:
        raise ValueError(f"truncated: {len(body)} bytes of {lm + lo + ls + lt}")
    if hashlib.sha256(body).digest() != checksum:
        raise ValueError("checksum mismatch")
    meta = json.loads(body[:lm])
    if not isinstance(meta, dict):
        raise ValueError("metadata is not a record")
    obj = bytes(body[lm:lm + lo])
    shared = bytes(body[lm + lo:lm + lo + ls]) or None
    return Entry(meta, obj, Texts(bytes(body[lm + lo + ls:])), shared)


def _alive(pid: str) -> bool:
    """Whether a process with this pid exists (True when that cannot be told)."""
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (ValueError, OSError):
        return True
    return True


def _owned_and_private(st) -> str | None:
    """Why a path may not be trusted, or None."""
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it is owned by uid {st.st_uid}, not by you (uid {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"group or others can write it (mode {stat.filemode(st.st_mode)})"
    return None


def write_atomic(path, data: bytes, prefix=".tmp-", public=False):
    """Write a file whole or not at all: a temporary file beside it, renamed over it (a
    crash leaves the old file or the new one, never half of one). The file is private to
    the user unless `public` (then it gets the permissions the umask gives any file)."""
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=prefix)
    except OSError as e:
        # named after the file asked for, not the temporary name nobody asked for
        raise type(e)(e.errno, e.strerror, path) from None
    try:
        if public:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.replace(tmp, path)
        except OSError as e:         # (a directory there, ...): the path asked for, as above
            raise type(e)(e.errno, e.strerror, path) from None
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Store:
    def __init__(self, root: str, max_bytes: int, create=True):
        """create=False: a store to read and clean (`jitdl cache`), which leaves a missing
        directory missing: listing an empty cache must not make one."""
        self.root = root
        self.max_bytes = max_bytes
        self.kernels = os.path.join(root, "kernels")
        self.aliases = os.path.join(root, "aliases")
        self._lock = locks.Lock()
        self._db = None
        self._pending = {}               # hits not yet written to stats.sqlite
        self._aliases_read = {}          # (name, inode, size, ctime) -> record: see alias_records
        self._room = None                # bytes to write before the next eviction pass
        self.usable = self._prepare(create)
        _stores.add(self)

    # -- trust ------------------------------------------------------------------------------
    def _prepare(self, create=True) -> bool:
        try:
            for d in (self.root, self.kernels, self.aliases):
                if create:
                    os.makedirs(d, mode=0o700, exist_ok=True)
                elif not os.path.lexists(d):
                    continue             # nothing there to trust or distrust
                elif not os.path.isdir(d):
                    raise NotADirectoryError(errno.ENOTDIR, "not a directory", d)
                why = _owned_and_private(os.stat(d))
                if why:
                    errors.warn(f"jitdl: not using the kernel cache at {d}: {why}; "
                                "compiling instead (set JITDL_CACHE_DIR to a private "
                                "directory)", CacheWarning)
                    return False
        except OSError as e:
            errors.warn(f"jitdl: kernel cache disabled: cannot "
                        f"{'create' if create else 'read'} {self.root}: {e}", CacheWarning)
            return False
        return True

    def _read_trusted(self, path) -> bytes | None:
        try:
            # O_NONBLOCK: a FIFO put in an entry's place must not block the open
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            why = _owned_and_private(st)
            if why or not stat.S_ISREG(st.st_mode):
                warn_once(path, f"jitdl: ignoring cache entry {path}: "
                                f"{why or 'not a regular file'}")
                return None
            with os.fdopen(fd, "rb", closefd=False) as f:
                return f.read()
        finally:
            os.close(fd)

    # -- entries ----------------------------------------------------------------------------
    def _kernel_path(self, key):
        return os.path.join(self.kernels, key + ".jdk")

    def _alias_path(self, key):
        return os.path.join(self.aliases, key + ".json")

    def get(self, full_key) -> Entry | None:
        path = self._kernel_path(full_key)
        data = self._read_trusted(path)
        if data is None:
            return None
        try:
            entry = unpack(data)
        except (ValueError, zlib.error, UnicodeDecodeError, json.JSONDecodeError) as e:
            warn_once(path, f"jitdl: damaged cache entry {path} ({e}); recompiling")
            return None
        self._touch(path, full_key)
        return entry

    def resolve(self, fast_key) -> str | None:
        """The full key a fast key points to, if any."""
        rec = self.resolve_record(fast_key)
        return None if rec is None else rec["full"]

    def resolve_record(self, fast_key) -> dict | None:
        """The alias record of a fast key (its "full" key checked), if any."""
        data = self._read_trusted(self._alias_path(fast_key))
        if data is None:
            return None
        try:
            rec = json.loads(data)
            full = rec["full"]
            if rec.get("fast") != fast_key:
                return None              # an alias file copied or moved to another name
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if not (isinstance(full, str) and len(full) == 64
                and all(c in "0123456789abcdef" for c in full)):
            return None                  # garbage in an alias is a miss, never a crash
        return rec

    def put(self, full_key, meta, obj, texts, fast_key=None, fast_parts=None, shared=None,
            where=None, rows=None):
        if not self.usable:
            return
        try:
            data = pack(meta, obj, texts, shared)
            self._write(self._kernel_path(full_key), data)
            if fast_key is not None:
                self.alias(fast_key, full_key, meta.get("fname", ""), fast_parts, where, rows)
            self._evict_when_full(len(data))
        except OSError as e:            # (once per cause: an export, or a function called
            #                                 over many shapes, does not repeat it per kernel)
            warn_once(("write", self.root, e.errno),
                      f"jitdl: could not write to the kernel cache: {e}")

    def add_shared(self, full_key, entry: Entry, shared: bytes):
        """Rewrite an entry with its shared library added (unless it has been evicted or
        cleared meanwhile). Best effort: a failure is logged, not reported."""
        path = self._kernel_path(full_key)
        if not self.usable or not os.path.exists(path):
            return
        try:
            data = pack(entry.meta, entry.obj, entry.texts, shared)
            self._write(path, data)
            self._evict_when_full(len(data))         # the entry grew
        except OSError as e:
            log.info("could not add a shared library to %s: %s", path, e)

    def alias(self, fast_key, full_key, fname, parts, where=None, rows=None):
        """Point fast_key at full_key; `where`: the source locations of the kernel's
        signature for the function of fast_key (jitdl.cache.keys.relative_locations);
        `rows`: JSON, the lengths of the rows that pick a GPU kernel of symbolic extents
        (jitdl.api: read back without tracing the definition)."""
        if not self.usable:
            return
        rec = {"full": full_key, "fast": fast_key, "fname": fname, "parts": parts or {},
               "where": where, **({"rows": rows} if rows is not None else {})}
        try:
            self._write(self._alias_path(fast_key), json.dumps(rec).encode())
        except OSError:
            pass

    def discard(self, fast_key):
        """Forget the kernel a fast key points to (a default schedule replaced by a tuned
        one): its alias, and its entry unless another alias still points to it."""
        full = self.resolve(fast_key)
        if full is None:
            return
        try:
            os.unlink(self._alias_path(fast_key))
        except OSError:
            return
        if not any(rec.get("full") == full for _, rec in self.alias_records()):
            try:
                os.unlink(self._kernel_path(full))
            except OSError:
                pass

    def _write(self, path, data):
        write_atomic(path, data)

    def _touch(self, path, key):
        try:
            os.utime(path)               # least-recently-used order is by mtime
        except OSError:
            pass
        self._count_hit(key)

    # -- stats ------------------------------------------------------------------------------
    def _stats(self):
        if self._db is None:
            db = sqlite3.connect(os.path.join(self.root, "stats.sqlite"), timeout=0.5,
                                 check_same_thread=False, isolation_level=None)
            db.execute("PRAGMA synchronous=OFF")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS hits (key TEXT PRIMARY KEY, hits INTEGER,"
                       " last REAL)")
            self._db = db
        return self._db

    def _count_hit(self, key):
        """Hits are counted in memory and written when the process exits (or when the
        statistics are read): a warm first call does not wait for sqlite."""
        with self._lock:
            if not self._pending:
                atexit.register(self.flush_hits)
            self._pending[key] = self._pending.get(key, 0) + 1

    def flush_hits(self):
        with self._lock:
            pending, self._pending = self._pending, {}
        if not pending:
            return
        try:
            with self._lock:
                now = time.time()
                self._stats().executemany(
                    "INSERT INTO hits VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                    "hits = hits + excluded.hits, last = excluded.last",
                    [(k, n, now) for k, n in pending.items()])
        except sqlite3.Error:
            pass                         # statistics are best effort

    def hits(self) -> dict:
        self.flush_hits()
        if self._db is None and not os.path.exists(os.path.join(self.root, "stats.sqlite")):
            return {}                    # none recorded: reading must not make the file
        try:
            with self._lock:
                return {k: h for k, h in self._stats().execute("SELECT key, hits FROM hits")}
        except sqlite3.Error:
            return {}

    # -- listing, eviction, verification ----------------------------------------------------
    def _kernel_files(self):
        """(DirEntry, stat) of every entry file; files removed meanwhile (by another
        process's eviction) are left out."""
        out = []
        try:
            with os.scandir(self.kernels) as it:
                for e in it:
                    if e.name.endswith(".jdk"):
                        try:
                            st = e.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if stat.S_ISREG(st.st_mode):
                            out.append((e, st))
        except OSError:
            pass
        return out

    def size(self) -> int:
        return sum(st.st_size for _, st in self._kernel_files())

    # A process scans the directory's size (a stat per entry: 20 ms with 2000 entries) at
    # its first write, then again once it has written this share of the cap since the
    # last scan, or the room the scan left, if less: processes writing at once may pass
    # the cap by this much each before one of them scans.
    SCAN_SHARE = 64

    def _evict_when_full(self, nbytes):
        """After a write of `nbytes`: the eviction pass (_evict) when the bytes written
        since the last one may have filled the room it left."""
        if self._room is not None and self._room >= nbytes:
            self._room -= nbytes
        else:
            self._evict()

    def _evict(self):
        """Remove junk (_sweep), then the least recently used entries while the kernels
        take more than the cap (down to 90% of it)."""
        self._sweep()
        files = self._kernel_files()
        total = sum(st.st_size for _, st in files)
        self._room = min(self.max_bytes - total, self.max_bytes // self.SCAN_SHARE)
        if total <= self.max_bytes:
            return
        files.sort(key=lambda f: f[1].st_mtime)
        for e, st in files:
            if total <= self.max_bytes * 0.9:
                break
            try:
                os.unlink(e.path)
                log.info("evicted %s (%d bytes)", e.name, st.st_size)
            except FileNotFoundError:
                pass                     # another process evicted it
            except OSError:
                continue
            total -= st.st_size
        self._room = min(self.max_bytes - total, self.max_bytes // self.SCAN_SHARE)

    JUNK_AGE_S = 3600

    def _sweep(self):
        """Remove what killed processes left: temporary files of unfinished writes (after
        an hour), and libraries being loaded or linked by a process that is gone."""
        now = time.time()
        for d in (self.kernels, self.aliases, self.root):
            try:
                with os.scandir(d) as it:
                    junk = [e for e in it if e.name.startswith((".tmp-", ".load-", ".link-"))]
            except OSError:
                continue
            for e in junk:
                try:
                    age = now - e.stat(follow_symlinks=False).st_mtime
                except OSError:
                    continue
                owner = e.name.split("-")[1]
                if age > self.JUNK_AGE_S or (not e.name.startswith(".tmp-")
                                             and not _alive(owner)):
                    if e.is_dir(follow_symlinks=False):
                        shutil.rmtree(e.path, ignore_errors=True)
                    else:
                        try:
                            os.unlink(e.path)
                        except OSError:
                            pass

    def entries(self):
        """(key, metadata or None if damaged, size, mtime, has a shared library) of every
        kernel file."""
        out = []
        for e, st in self._kernel_files():
            key = e.name[:-4]
            data = self._read_trusted(e.path)
            meta, shared = None, False
            if data is not None:
                try:
                    entry = unpack(data)
                    meta, shared = entry.meta, entry.shared is not None
                except (ValueError, zlib.error, json.JSONDecodeError):
                    meta = None
            elif not os.path.exists(e.path):
                continue                 # evicted meanwhile
            out.append((key, meta, st.st_size, st.st_mtime, shared))
        return out

    def alias_records(self):
        """(fast key, record) of every alias. A file read before and not changed since
        (the same inode, size and change time, still private) is not read again: each
        compile's miss compares its key with every record (api._nearest_difference), and
        reading the whole directory each time made a session's misses quadratic in the
        number of entries (50 us a file: 0.1 s a miss with 2000 entries)."""
        out, known = [], {}
        try:
            with os.scandir(self.aliases) as it:
                for e in it:
                    if not e.name.endswith(".json"):
                        continue
                    rec = self._alias_record(e, known)
                    if rec is not None:
                        out.append((e.name[:-5], rec))
        except OSError:
            pass
        self._aliases_read = known       # (only the files there now)
        return out

    def _alias_record(self, e, known):
        """The record of alias file `e` (a DirEntry), from _aliases_read when unchanged;
        noted in `known`. None when it cannot be read or is not JSON."""
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            return None
        sig = (e.name, st.st_ino, st.st_size, st.st_ctime_ns)
        rec = self._aliases_read.get(sig)
        if rec is None or _owned_and_private(st) or not stat.S_ISREG(st.st_mode):
            try:
                rec = json.loads(self._read_trusted(e.path))
            except (TypeError, ValueError):
                return None
        known[sig] = rec
        return rec

    def verify(self, remove=False):
        """(good keys, damaged keys); remove=True deletes the damaged ones."""
        good, bad = [], []
        if remove:
            self._sweep()
        for e, _ in self._kernel_files():
            data = self._read_trusted(e.path)
            if data is None and os.path.exists(e.path):
                # removed between the listing and the open, and written again since (as
                # eviction and put do in another process): read the new file
                data = self._read_trusted(e.path)
            try:
                if data is None:
                    if not os.path.exists(e.path):
                        continue         # evicted meanwhile: not damaged
                    raise ValueError("unreadable")
                unpack(data).texts.decode()
                good.append(e.name[:-4])
            except (ValueError, zlib.error, json.JSONDecodeError):
                bad.append(e.name[:-4])
                if remove:
                    try:
                        os.unlink(e.path)
                    except OSError:
                        pass
        return good, bad

    def clear(self):
        n = 0
        self._sweep()
        for d in (self.kernels, self.aliases):
            try:
                with os.scandir(d) as it:
                    for e in it:
                        if e.name.startswith((".tmp-", ".load-")):
                            continue     # a write under way in another process
                        try:
                            os.unlink(e.path)
                            n += e.name.endswith(".jdk")
                        except OSError:
                            pass
            except OSError:
                pass
        try:
            with self._lock:
                self._stats().execute("DELETE FROM hits")
        except sqlite3.Error:
            pass
        return n


_stores = weakref.WeakSet()      # every Store of this process: see the fork handlers
FORK_WAIT_S = 2.0   # how long a fork waits for a statistics write under way


def _detach_at_fork(st):
    """In a forked child: the statistics connection a Store inherited, forgotten (hits
    a child wrote through its parent's were lost once the parent closed its own: 3
    children writing 150 hits each kept 130-440 of them; see locks.ForkClosing), and the
    parent's hits not yet written (the parent writes those: the child's exit wrote them
    a second time)."""
    st._pending = {}
    db, st._db = st._db, None
    return db


_fork = locks.ForkClosing(lambda: _stores, _detach_at_fork, FORK_WAIT_S)


_default = {}


def default_store() -> Store | None:
    """The store configured by JITDL_CACHE / JITDL_CACHE_DIR (None when disabled)."""
    from jitdl.config import settings
    if not settings.cache:
        return None
    root = settings.cache_dir
    st = _default.get(root)
    if st is None:
        st = _default[root] = Store(root, settings.cache_max_bytes)
    return st if st.usable else None
