"""Tuning records: every trial of every tuning run, in one sqlite file shared by processes.

One row per trial: the config tried, its time or why it failed, whether its output was
verified; and, tuner "confirm", one row per config that the end of a run timed again side
by side with the default (search._confirm), with its median time. A row's key is
(definition, signature, target, jitdl version). The best verified row of a key is what
later compiles of that key apply, in any process: the fastest confirmed row, where a run
confirmed one (so a later process picks the kernel the tuning process chose, not a trial
once measured too fast), else the fastest trial. A row made by another jitdl version, for
another definition or on another target never matches. Rows of the same definition on
other signatures seed the cost model (`history`).

Several processes read and write the file at once (the user's, a background tuner, a
second Python): WAL journal, a busy timeout, one short transaction per `add`, committed
before it returns. A file this jitdl cannot use (damaged, not sqlite, another program's
database, a newer schema) is reported once and read as no records; a file or directory it
cannot write is reported once and results are not saved. Neither is deleted or
overwritten.
"""
from __future__ import annotations

import atexit
import json
import math
import numbers
import os
import sqlite3
import time
import warnings
from dataclasses import MISSING, asdict, dataclass, fields, replace

from jitdl import locks
from jitdl._version import __version__
from jitdl.config import tuning_db
from jitdl.cache.store import CacheWarning, warn_once, write_atomic

SCHEMA_VERSION = 1               # PRAGMA user_version of a file this jitdl writes
FORMAT = "jitdl-tuning-records"  # the JSON export's "format"
FORMAT_VERSION = 1
CONFIRM = "confirm"              # the tuner of a side-by-side re-timing's rows
_PREPARE_TRIES = 40              # tries to set up a file another process sets up too
BUSY_TIMEOUT_S = 10.0            # how long a write waits for another process's write
QUEUED_WAIT_S = 0.05             # ... add_queued()'s: a trial's record, during tuning
FLUSH_TRY_S = 0.1                # ... each of flush()'s tries


def default_path() -> str:
    """JITDL_TUNING_DB if set, else tuning.sqlite in the per-user data directory
    (jitdl.config.tuning_db; callers check first that records are not off)."""
    return tuning_db()


@dataclass
class Record:
    """One trial. `signature` is the JSON text of the call's argument specs; `definition`
    and `target` are digests the caller computes (the definition with its schedule
    function; the target's features and the versions that change code)."""
    function: str                 # qualified name, for people (listing, export)
    definition: str
    signature: str
    target: str
    target_name: str              # for people: "cpu znver3"
    jitdl: str                    # the jitdl version that made it
    config: dict                  # knob values (JSON lists come back as tuples)
    seconds: float | None         # None: the trial failed
    throughput: float = 0.0
    unit: str = "GFLOP/s"
    verified: bool = False        # its output matched the default schedule's
    error: str | None = None
    tuner: str = ""               # "xgb", "random", "grid", "ga", ...; CONFIRM: a re-timing
    trial: int = 0
    features: list | None = None  # the cost model's features of the candidate
    created: float = 0.0          # time.time(); add() stamps a record that has 0

    @property
    def key(self) -> tuple:
        return (self.definition, self.signature, self.target, self.jitdl)

    @property
    def ok(self) -> bool:
        return self.seconds is not None and self.error is None


_COLUMNS = [f.name for f in fields(Record)]
_REQUIRED = {f.name for f in fields(Record) if f.default is MISSING}


# -- validation: add() and import_json() accept only whole, well-typed records -------------
def _number(v):
    """An int or float, a NumPy one included, but not a bool (the plain types are checked
    first: an ABC check costs a microsecond, and a record holds dozens of numbers)."""
    t = type(v)
    return t is float or t is int or isinstance(v, numbers.Real) and t is not bool


def _real(v):
    return _number(v) and math.isfinite(v)


def _int(v):
    return type(v) is int or isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _json_scalar(v):
    """A knob value or a part of one: what JSON holds (tuples become lists)."""
    if v is None or isinstance(v, (bool, str)) or _int(v) or _real(v):
        return True
    return isinstance(v, (list, tuple)) and all(_json_scalar(x) for x in v)


def _nonempty(v):
    return isinstance(v, str) and v != ""


_RULES = {
    "function": (_nonempty, "a non-empty string"),
    "definition": (_nonempty, "a non-empty string"),
    "signature": (_nonempty, "a non-empty string"),
    "target": (_nonempty, "a non-empty string"),
    "target_name": (lambda v: isinstance(v, str), "a string"),
    "jitdl": (_nonempty, "a non-empty string"),
    "config": (lambda v: isinstance(v, dict) and all(isinstance(k, str) and _json_scalar(x)
                                                      for k, x in v.items()),
               "an object of knob names to numbers, strings, booleans or lists of them"),
    "seconds": (lambda v: v is None or _real(v) and v > 0,
                "a positive number of seconds, or null for a failed trial"),
    "throughput": (lambda v: _real(v) and v >= 0, "a number >= 0"),
    "unit": (lambda v: isinstance(v, str), "a string"),
    "verified": (lambda v: isinstance(v, bool), "true or false"),
    "error": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "tuner": (lambda v: isinstance(v, str), "a string"),
    "trial": (lambda v: _int(v) and v >= 0, "an integer >= 0"),
    "features": (lambda v: v is None or isinstance(v, (list, tuple))
                 and all(map(_number, v)), "a list of numbers, or null"),
    "created": (lambda v: _real(v) and v >= 0, "a time in seconds since the epoch"),
}


def check(row: dict) -> Record:
    """A Record of a dict of fields, or ValueError naming the first field that is
    missing, unknown or of the wrong type."""
    if not isinstance(row, dict):
        raise ValueError(f"expected an object of fields, got {type(row).__name__}")
    unknown = sorted(set(row) - set(_COLUMNS))
    if unknown:
        raise ValueError(f"unknown field{'s' * (len(unknown) > 1)} "
                         f"{', '.join(map(repr, unknown))}")
    for name in _COLUMNS:
        if name not in row:
            if name in _REQUIRED:
                raise ValueError(f"field {name!r} is missing")
            continue
        ok, what = _RULES[name]
        if not ok(row[name]):
            raise ValueError(f"field {name!r} must be {what}, got {row[name]!r:.80}")
    return Record(**row)


def _tuples(v):
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _plain(v):
    """JSON's default for NumPy scalars in configs and features."""
    if _int(v):
        return int(v)
    if isinstance(v, numbers.Real):
        return float(v)
    raise TypeError(f"{type(v).__name__} is not JSON serialisable")


def _to_row(r: Record) -> tuple:
    return (r.function, r.definition, r.signature, r.target, r.target_name, r.jitdl,
            json.dumps(r.config, sort_keys=True, default=_plain),
            None if r.seconds is None else float(r.seconds), float(r.throughput), r.unit,
            int(r.verified), r.error, r.tuner, int(r.trial),
            None if r.features is None else json.dumps([float(x) for x in r.features]),
            float(r.created))


def _from_row(row) -> Record:
    """A Record of a row; ValueError or TypeError for a row edited into nonsense."""
    (function, definition, signature, target, target_name, jitdl, config, seconds,
     throughput, unit, verified, error, tuner, trial, features, created) = row
    return Record(function, definition, signature, target, target_name, jitdl,
                  {k: _tuples(v) for k, v in json.loads(config).items()}, seconds,
                  throughput, unit, bool(verified), error, tuner, trial,
                  None if features is None else json.loads(features), created)


_SCHEMA = f"""
BEGIN IMMEDIATE;
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY,
    function TEXT NOT NULL, definition TEXT NOT NULL, signature TEXT NOT NULL,
    target TEXT NOT NULL, target_name TEXT NOT NULL, jitdl TEXT NOT NULL,
    config TEXT NOT NULL, seconds REAL, throughput REAL NOT NULL, unit TEXT NOT NULL,
    verified INTEGER NOT NULL, error TEXT, tuner TEXT NOT NULL, trial INTEGER NOT NULL,
    features TEXT, created REAL NOT NULL);
-- best(): the key, then the verified rows by time
CREATE INDEX IF NOT EXISTS records_key
    ON records (definition, signature, target, jitdl, verified, seconds);
CREATE INDEX IF NOT EXISTS records_function ON records (function);
-- the same trial imported twice is one row
CREATE UNIQUE INDEX IF NOT EXISTS records_trial
    ON records (definition, signature, target, jitdl, created, trial, tuner, config);
PRAGMA user_version = {SCHEMA_VERSION};
COMMIT;
"""

_SELECT = f"SELECT {', '.join(_COLUMNS)} FROM records"
_INSERT = (f"INSERT OR IGNORE INTO records ({', '.join(_COLUMNS)}) "
           f"VALUES ({', '.join('?' * len(_COLUMNS))})")
_GOOD = "verified = 1 AND seconds IS NOT NULL AND error IS NULL"
# the fastest good row of a key (the next one after `skip` unreadable ones): one search
# of records_key, already in order; _BEST_CONFIRMED the same among the re-timings
_BEST = (f"{_SELECT} WHERE definition = ? AND signature = ? AND target = ? AND jitdl = ? "
         f"AND {_GOOD} ORDER BY seconds, id LIMIT 1 OFFSET ?")
_BEST_CONFIRMED = _BEST.replace("ORDER BY", f"AND tuner = '{CONFIRM}' ORDER BY")


def _function_is(name):
    """A WHERE clause matching a qualified name or its last parts ('matmul' matches
    'model.matmul'), and its parameters."""
    return "(function = ? OR substr(function, -?) = ?)", [name, len(name) + 1, "." + name]


class Records:
    """The tuning records in one sqlite file, opened on first use. Every method is safe
    to call from several threads; a file that cannot be used reads as no records."""

    def __init__(self, path=None):
        self.path = os.path.abspath(path) if path else default_path()
        self.problem = None       # why the file is ignored, once found
        self.read_only = None     # why records are not saved, once found
        self._db = None
        self._ino = None          # the file the connection has open
        self._lock = locks.Lock(reentrant=True)
        self._queued = []         # rows add_queued() could not write yet (another writer)

    # -- the connection ---------------------------------------------------------------------
    def _connect(self, write):
        """The open connection, or None: the file is unusable, or it does not exist and
        this is a read (a read creates nothing)."""
        if self.problem or write and self.read_only:
            return None
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if self._db is not None:
            if st is not None and (st.st_dev, st.st_ino) == self._ino:
                return self._db
            self._drop()          # the file was removed or replaced: open the new one
        if st is None and not write:
            return None
        try:
            os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                 check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            self._trouble(e, write)
            return None
        for attempt in range(_PREPARE_TRIES):
            try:
                self._prepare(db)
                break
            except sqlite3.Error as e:
                # two processes creating the file at once: WAL mode and the schema can
                # answer "locked" without waiting for the busy timeout; try again
                if ("locked" in str(e) or "busy" in str(e)) and attempt + 1 < _PREPARE_TRIES:
                    time.sleep(0.05)
                    continue
                db.close()
                self._trouble(e, write)
                return None
        if self.problem:
            db.close()
            return None
        try:
            st = os.stat(self.path)
        except OSError as e:
            db.close()
            self._trouble(e, write)
            return None
        self._db, self._ino = db, (st.st_dev, st.st_ino)
        return None if write and self.read_only else db

    def _prepare(self, db):
        """Check the schema version, and create the schema in a new file."""
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            self._unusable(f"it was written by a newer jitdl (schema {version}; this jitdl "
                           f"reads {SCHEMA_VERSION})")
            return
        if version == 0:
            tables = [t for (t,) in db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")]
            if tables and tables != ["records"]:
                self._unusable(f"it is not a jitdl tuning database (its tables: "
                               f"{', '.join(tables[:5])})")
                return
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")   # WAL: a process crash loses nothing
            if version == 0:
                try:
                    db.executescript(_SCHEMA)
                except BaseException:
                    if db.in_transaction:
                        db.execute("ROLLBACK")
                    raise
        except sqlite3.OperationalError as e:
            if "readonly" not in str(e) and "read-only" not in str(e):
                raise
            self._cannot_write(e)           # a read-only file of an older run: read it

    def _drop(self):
        if self._db is not None:
            try:
                self._db.close()
            except sqlite3.Error:
                pass
        self._db = self._ino = None

    # -- trouble: one warning, and no crash -------------------------------------------------
    def _trouble(self, e, writing):
        text = str(e)
        if "locked" in text or "busy" in text:
            warn_once((self.path, "busy"),
                      f"jitdl: the tuning records at {self.path} stayed locked by another "
                      f"process for {BUSY_TIMEOUT_S:g} s; "
                      + ("a record was not saved" if writing else "read as none this time"))
        elif writing and isinstance(e, (OSError, sqlite3.OperationalError)):
            self._cannot_write(e)
        else:
            self._unusable(text)

    def _cannot_write(self, e):
        self.read_only = str(e)
        warn_once((self.path, "write"),
                  f"jitdl: cannot write the tuning records at {self.path} ({e}); tuning "
                  "results of this process are not saved (set JITDL_TUNING_DB to a "
                  "writable file)")

    def _unusable(self, why):
        self.problem = why
        self._drop()
        warn_once((self.path, "unusable"),
                  f"jitdl: ignoring the tuning records at {self.path}: {why}; no tuning "
                  "record is applied or saved by this process. The file is left as it is: "
                  "move it away to start afresh, or set JITDL_TUNING_DB to another file")

    def _read(self, sql, params=()):
        with self._lock:
            db = self._connect(write=False)
            if db is None:
                return []
            try:
                return db.execute(sql, params).fetchall()
            except sqlite3.Error as e:
                self._trouble(e, writing=False)
                return []

    def _records(self, rows) -> list[Record]:
        out = []
        for row in rows:
            try:
                out.append(_from_row(row))
            except (ValueError, TypeError, AttributeError) as e:
                warn_once((self.path, "row"), f"jitdl: skipping unreadable rows of the "
                                              f"tuning records at {self.path} ({e})")
        return out

    def _write(self, sql, rows) -> int:
        """Run sql once per row of parameters, in one transaction; the number of rows
        changed."""
        with self._lock:
            try:
                return self._try_write(sql, rows)
            except sqlite3.Error as e:
                self._trouble(e, writing=True)
                return 0

    def _try_write(self, sql, rows, wait=None) -> int:
        """_write that raises sqlite3.Error; `wait`: seconds to wait for another
        process's write (None: BUSY_TIMEOUT_S)."""
        db = self._connect(write=True)
        if db is None:
            return 0
        if wait is not None:
            db.execute(f"PRAGMA busy_timeout = {int(wait * 1000)}")
        try:
            before = db.total_changes
            db.execute("BEGIN IMMEDIATE")
            try:
                db.executemany(sql, rows)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
            return db.total_changes - before
        finally:
            if wait is not None:
                db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    @staticmethod
    def _busy(e):
        return "locked" in str(e) or "busy" in str(e)

    # -- writing ----------------------------------------------------------------------------
    def add(self, record: Record) -> int:
        """Save one trial (committed on return); 1 if saved, 0 if not (a duplicate, or
        the file cannot be written: warned once)."""
        return self.add_many([record])

    def add_many(self, records) -> int:
        """Save trials in one transaction; the number saved. ValueError for a record with
        a missing or ill-typed field (nothing is then saved)."""
        rows = self._rows(records)
        return self._write(_INSERT, rows) if rows else 0

    def _rows(self, records):
        now = time.time()
        rows = []
        for r in records:
            r = check({f: getattr(r, f) for f in _COLUMNS} if isinstance(r, Record) else r)
            rows.append(_to_row(r if r.created else replace(r, created=now)))
        return rows

    def add_queued(self, records) -> int:
        """Save trials without making tuning wait for another process's write (add()
        waited BUSY_TIMEOUT_S per trial, and each record after the first warning was
        lost unsaid): with the file locked by another writer for more than
        QUEUED_WAIT_S, they wait in memory, with those queued before, for the next
        add_queued() or flush(). The number saved now."""
        rows = self._rows(records)
        with self._lock:
            self._queued += rows
            if not self._queued:
                return 0
            try:
                n = self._try_write(_INSERT, self._queued, QUEUED_WAIT_S)
            except sqlite3.Error as e:
                if not self._busy(e):
                    self._queued = []
                    self._trouble(e, writing=True)
                return 0
            self._queued = []
            return n

    def flush(self) -> int:
        """Write the records add_queued() kept, trying for up to BUSY_TIMEOUT_S while
        another process writes (the records' lock taken for FLUSH_TRY_S at a time: held
        for the whole wait, it kept every compile's record lookup in this process waiting
        with it); those that still cannot be written are dropped with a warning that
        counts them. Until then they stay queued, where an exit's flush (flush_all) finds
        them: a tuning thread ended by the interpreter's exit mid-flush lost them unsaid.
        The number saved."""
        end = time.monotonic() + BUSY_TIMEOUT_S
        saved = 0
        while True:
            with self._lock:
                rows = self._queued
                if not rows:
                    return saved
                try:
                    saved += self._try_write(_INSERT, rows, FLUSH_TRY_S)
                    self._queued = []
                    return saved
                except sqlite3.Error as e:
                    if not self._busy(e):
                        self._queued = []
                        self._trouble(e, writing=True)
                        return saved
                    if time.monotonic() >= end:
                        self._queued = []
                        warnings.warn(
                            f"jitdl: {len(rows)} tuning record{'s' * (len(rows) > 1)} not "
                            f"saved: the tuning records at {self.path} stayed locked by "
                            f"another process for {BUSY_TIMEOUT_S:g} s", CacheWarning,
                            stacklevel=2)
                        return saved
            time.sleep(0.01)          # (a "locked" answered at once: no spinning)

    def clear(self, function=None) -> int:
        """Remove every record, or those of one function; the number removed."""
        where, params = _function_is(function) if function else ("1", [])
        return self._write(f"DELETE FROM records WHERE {where}", [params])

    # -- reading ----------------------------------------------------------------------------
    def best(self, definition, signature, target) -> Record | None:
        """The fastest verified successful row of this key made by this jitdl version:
        of the confirmed ones if there are any, else of the trials."""
        return self._best((definition, signature, target, __version__))

    def _best(self, key):
        return self._first(_BEST_CONFIRMED, key) or self._first(_BEST, key)

    def _first(self, sql, key):
        skip = 0
        while True:
            rows = self._read(sql, (*key, skip))
            if not rows:
                return None
            found = self._records(rows)
            if found:
                return found[0]
            skip += 1

    def query(self, function=None, definition=None, signature=None, target=None,
              only_ok=False, limit=None) -> list[Record]:
        """Trials in the order they were added, filtered by whichever arguments are
        given; only_ok: successful ones only."""
        where, params = [], []
        if function:
            clause, ps = _function_is(function)
            where.append(clause)
            params += ps
        for column, value in (("definition", definition), ("signature", signature),
                              ("target", target)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if only_ok:
            where.append("seconds IS NOT NULL AND error IS NULL")
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return self._records(self._read(sql, params))

    def history(self, definition, target, exclude_signature=None) -> list[Record]:
        """Trials of the same definition and target on other signatures, made by this jitdl
        version (its features are what this version's cost model reads): the data that
        seeds the model for a new shape."""
        return self._records(self._read(
            f"{_SELECT} WHERE definition = ? AND target = ? AND jitdl = ? AND signature != ? "
            "ORDER BY id", (definition, target, __version__, exclude_signature or "")))

    def summary(self, function=None) -> list[dict]:
        """One entry per key (newest first within a function): function, signature,
        target_name, jitdl, trials and verified (counts of trials: not the re-timings,
        tuner CONFIRM), records (every row), last (time of the latest row) and best (the
        Record best() applies, or None)."""
        where, params = _function_is(function) if function else ("1", [])
        trial = f"tuner != '{CONFIRM}'"
        groups = self._read(
            "SELECT function, definition, signature, target, target_name, jitdl, "
            f"SUM({trial}), SUM(verified AND {trial}), MAX(created), "
            f"MIN(CASE WHEN {_GOOD} THEN seconds END), COUNT(*) "
            f"FROM records WHERE {where} "
            "GROUP BY function, definition, signature, target, jitdl "
            "ORDER BY function, MAX(created) DESC", params)
        out = []
        for fn, definition, signature, target, name, jitdl, n, nv, last, fastest, rows \
                in groups:
            best = None
            if fastest is not None:
                best = self._best((definition, signature, target, jitdl))
            out.append({"function": fn, "signature": signature, "target_name": name,
                        "jitdl": jitdl, "trials": n, "verified": nv, "records": rows,
                        "last": last, "best": best})
        return out

    # -- JSON -------------------------------------------------------------------------------
    def export_json(self, fileobj_or_path, function=None) -> int:
        """Write the records (of one function, or all) as JSON; the number written. A path
        is written whole or not at all."""
        records = self.query(function=function)
        rows = ",\n".join(json.dumps(asdict(r), default=_plain) for r in records)
        data = (f'{{"format": "{FORMAT}", "version": {FORMAT_VERSION}, "records": [\n'
                f'{rows}\n]}}\n')   # one record a line
        if hasattr(fileobj_or_path, "write"):
            fileobj_or_path.write(data)
            return len(records)
        write_atomic(os.path.abspath(fileobj_or_path), data.encode(), public=True)
        return len(records)

    def import_json(self, fileobj_or_path) -> int:
        """Add the records of a JSON export; the number added (a record already present
        is not added twice). A record with a missing, unknown or ill-typed field is
        skipped with a warning that names it. ValueError for a file that is not an export
        of this format."""
        if hasattr(fileobj_or_path, "read"):
            name = getattr(fileobj_or_path, "name", "<input>")
            text = fileobj_or_path.read()
        else:
            name = os.fspath(fileobj_or_path)
            with open(name, encoding="utf-8") as f:
                text = f.read()
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ValueError(f"{name}: not JSON ({e})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            got = data.get("format") if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"{name}: not a jitdl tuning records file (expected "
                             f"\"format\": \"{FORMAT}\", got {got!r:.60})")
        version = data.get("version")
        if not _int(version) or version < 1:
            raise ValueError(f"{name}: \"version\" must be a positive integer, got "
                             f"{version!r:.60}")
        if version > FORMAT_VERSION:
            raise ValueError(f"{name}: written by a newer jitdl (format version {version}; "
                             f"this jitdl reads version {FORMAT_VERSION})")
        rows = data.get("records")
        if not isinstance(rows, list):
            raise ValueError(f"{name}: \"records\" must be a list")
        good = []
        for i, row in enumerate(rows):
            try:
                good.append(check(row))
            except ValueError as e:
                fn = row.get("function") if isinstance(row, dict) else None
                what = f"record {i}" + (f" ({fn})" if isinstance(fn, str) else "")
                warnings.warn(f"jitdl: {name}: {what} skipped: {e}", CacheWarning,
                              stacklevel=2)
        return self.add_many(good)

    def close(self):
        with self._lock:
            self._drop()


_shared = {}
_shared_lock = locks.Lock()


FORK_WAIT_S = 2.0   # how long a fork waits for a record being written


def _detach_at_fork(rec):
    """In a forked child: the connection a Records inherited, forgotten (the child
    opens its own on next use: see locks.ForkClosing), and the parent's queued rows (the
    parent's to write)."""
    rec._queued = []
    db, rec._db, rec._ino = rec._db, None, None
    return db


_fork = locks.ForkClosing(lambda: _shared.values(), _detach_at_fork, FORK_WAIT_S)


def flush_all():
    """Flush every shared Records' queue (at the interpreter's exit, and when the
    background tuner stops): records a tuning thread queued and did not flush, ended by
    the exit, are written, or counted in a warning."""
    for rec in list(_shared.values()):
        if rec._queued:
            rec.flush()


# (the background tuner's exit hook calls it too, after its thread stopped: hooks run last
# registered first, and this module may be imported after that hook was registered)
atexit.register(flush_all)


def shared(path=None) -> Records:
    """The process's Records for a path (default_path() when None): compiles that look
    up a key reuse one connection."""
    path = os.path.abspath(path) if path else default_path()
    with _shared_lock:
        rec = _shared.get(path)
        if rec is None:
            rec = _shared[path] = Records(path)
        return rec
