"""Tuning records: round trips, which record best() applies, several writing processes,
damaged and foreign files, JSON export and import, and `jitdl tune ...` (subprocesses
with a private JITDL_TUNING_DB)."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import warnings

import pytest

from jitdl._version import __version__
from jitdl.autotune import records as rmod
from jitdl.autotune.records import Record, Records
from jitdl.cache.store import CacheWarning

PY = sys.executable
SIG = json.dumps([["array", [64, 32], "float32"], ["scalar", "float64", True]])
SIG2 = json.dumps([["array", [128, 32], "float32"], ["scalar", "float64", True]])


def rec(seconds=1e-3, verified=True, **kw):
    base = dict(function="mod.matmul", definition="def1", signature=SIG, target="tgt1",
                target_name="cpu test", jitdl=__version__, config={"tile_i": 8},
                seconds=seconds, throughput=0.0 if seconds is None else 1e-3 / seconds,
                verified=verified, error=None if seconds else "build: boom",
                tuner="random", trial=0)
    base.update(kw)
    return Record(**base)


def snapshot(path):
    return {p: open(p, "rb").read() for p in (path, path + "-wal") if os.path.exists(p)}


@pytest.fixture
def db(tmp_path):
    r = Records(str(tmp_path / "data" / "tuning.sqlite"))
    yield r
    r.close()


# -- round trips and keys -------------------------------------------------------------------
def test_round_trip_keeps_every_field(db, rng):
    feats = [float(x) for x in rng.standard_normal(12)]
    kept = [rec(config={"tile_i": 16, "order": (2, 0, 1), "vec": "avx", "unroll": True},
                features=feats, trial=3, tuner="xgb", created=1234.5),
            rec(seconds=None, verified=False, trial=4, created=1235.0),
            rec(seconds=2.5e-4, unit="GB/s", throughput=17.5, trial=5, created=1236.0)]
    assert db.add_many(kept) == 3
    got = db.query()
    assert got == kept                          # tuples stay tuples, features intact
    assert got[0].key == ("def1", SIG, "tgt1", __version__)
    assert [r.ok for r in got] == [True, False, True]
    # a second handle (another process would do the same) reads the same rows
    other = Records(db.path)
    assert other.query() == kept
    other.close()


def test_add_stamps_the_time_and_commits_before_returning(db):
    import time
    before = time.time()
    assert db.add(rec()) == 1
    # read through a plain sqlite connection: the row is on disk, not in a transaction
    rows = sqlite3.connect(db.path).execute("SELECT created FROM records").fetchall()
    assert len(rows) == 1 and before <= rows[0][0] <= time.time()


def test_a_read_creates_no_file(tmp_path):
    path = tmp_path / "none" / "tuning.sqlite"
    r = Records(str(path))
    assert r.best("def1", SIG, "tgt1") is None and r.query() == [] and r.summary() == []
    assert not path.parent.exists()


def test_bad_record_is_refused_whole(db):
    with pytest.raises(ValueError, match=r"field 'seconds' must be a positive number"):
        db.add_many([rec(), rec(seconds=-1.0)])
    with pytest.raises(ValueError, match=r"field 'config' must be an object"):
        db.add(rec(config={"tile": object()}))
    assert db.query() == []                     # nothing of the batch was saved


def test_best_applies_only_verified_successes_of_this_key_and_version(db):
    good = rec(seconds=2e-3, config={"tile_i": 4}, trial=1)
    db.add_many([
        rec(seconds=5e-3, config={"tile_i": 2}),                       # slower
        good,
        rec(seconds=1e-4, verified=False, config={"tile_i": 64}),      # unverified
        rec(seconds=None, verified=True, config={"tile_i": 1}),        # failed
        rec(seconds=1e-4, error="wrong output: max err 3.0", config={"tile_i": 32}),
        rec(seconds=1e-5, jitdl="0.0.1", config={"tile_i": 128}),     # older jitdl
        rec(seconds=1e-5, definition="def0", config={"tile_i": 256}),  # changed definition
        rec(seconds=1e-5, target="tgt2", config={"tile_i": 512}),      # other machine
        rec(seconds=1e-5, signature=SIG2, config={"tile_i": 1024}),    # other shape
    ])
    best = db.best("def1", SIG, "tgt1")
    assert best.config == {"tile_i": 4} and best.seconds == 2e-3 and best.trial == 1
    assert db.best("def1", SIG2, "tgt1").config == {"tile_i": 1024}
    assert db.best("def0", SIG2, "tgt1") is None
    only_bad = Records(db.path + "2")
    only_bad.add_many([rec(seconds=1e-4, verified=False), rec(seconds=None)])
    assert only_bad.best("def1", SIG, "tgt1") is None
    only_bad.close()


def test_best_prefers_the_side_by_side_re_timings(db):
    """A trial measured too fast once loses to the config that the re-timing at the end of
    the run chose; without re-timings (an older run) the fastest trial is the best."""
    db.add_many([rec(seconds=1e-4, config={"tile_i": 2}, trial=1),              # lucky
                 rec(seconds=1e-3, config={"tile_i": 4}, trial=2)])
    assert db.best("def1", SIG, "tgt1").config == {"tile_i": 2}
    db.add_many([rec(seconds=9e-4, config={"tile_i": 4}, tuner=rmod.CONFIRM),
                 rec(seconds=2e-3, config={"tile_i": 2}, tuner=rmod.CONFIRM)])
    best = db.best("def1", SIG, "tgt1")
    assert best.config == {"tile_i": 4} and best.tuner == rmod.CONFIRM
    plan = " ".join(str(row[-1]) for row in sqlite3.connect(db.path).execute(
        "EXPLAIN QUERY PLAN " + rmod._BEST_CONFIRMED, ("def1", SIG, "tgt1", __version__, 0)))
    assert "USING INDEX records_key" in plan and "TEMP B-TREE" not in plan, plan


def test_summary_counts_trials_not_re_timings(db):
    """`jitdl tune list` shows a run's trials: the re-timings (tuner CONFIRM) are records
    (`tune clear` removes them too) but not trials (2 trials showed as 4)."""
    db.add_many([rec(seconds=1e-3, config={"tile_i": 2}, trial=1),
                 rec(seconds=None, verified=False, config={"tile_i": 8}, trial=2),
                 rec(seconds=9e-4, config={"tile_i": 2}, tuner=rmod.CONFIRM),
                 rec(seconds=2e-3, config={"tile_i": 4}, tuner=rmod.CONFIRM)])
    (g,) = db.summary()
    assert (g["trials"], g["verified"], g["records"]) == (2, 1, 4), g
    assert g["best"].tuner == rmod.CONFIRM


def test_best_is_one_search_of_the_key_index(db):
    db.add_many([rec(seconds=1e-3 * (i + 1), trial=i) for i in range(50)])
    plan = " ".join(str(row[-1]) for row in sqlite3.connect(db.path).execute(
        "EXPLAIN QUERY PLAN " + rmod._BEST, ("def1", SIG, "tgt1", __version__, 0)))
    assert "USING INDEX records_key" in plan and "TEMP B-TREE" not in plan, plan


def test_query_filters_and_history_is_other_shapes(db):
    db.add_many([rec(trial=0), rec(seconds=None, trial=1), rec(signature=SIG2, trial=2),
                 rec(function="mod.batmatmul", definition="def9", trial=3),
                 rec(signature=SIG2, jitdl="0.0.1", trial=4),
                 rec(signature=SIG2, target="tgt2", trial=5)])
    assert [r.trial for r in db.query("matmul")] == [0, 1, 2, 4, 5]   # not batmatmul
    assert [r.trial for r in db.query("mod.matmul", only_ok=True)] == [0, 2, 4, 5]
    assert [r.trial for r in db.query(signature=SIG2, target="tgt1")] == [2, 4]
    assert [r.trial for r in db.query(limit=2)] == [0, 1]
    assert [r.trial for r in db.query("atmul")] == []
    assert [r.trial for r in db.history("def1", "tgt1", exclude_signature=SIG)] == [2]
    assert [r.trial for r in db.history("def1", "tgt1")] == [0, 1, 2]


def test_threads_share_one_handle(db):
    def add(k):
        for i in range(40):
            db.add(rec(trial=k * 100 + i))
            db.best("def1", SIG, "tgt1")
    threads = [threading.Thread(target=add, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.trial for r in db.query()) == sorted(k * 100 + i for k in range(3)
                                                        for i in range(40))


def test_a_replaced_file_is_followed(db):
    db.add(rec(trial=1))
    os.rename(db.path, db.path + ".old")
    fresh = Records(db.path)
    fresh.add(rec(trial=2, seconds=5e-4))
    fresh.close()
    assert [r.trial for r in db.query()] == [2]
    assert db.best("def1", SIG, "tgt1").trial == 2


# -- several processes ----------------------------------------------------------------------
def _writer(path, k, n, crash):
    """A process adding n trials one at a time (spawned: a fresh interpreter)."""
    r = Records(path)
    for i in range(n):
        r.add(rec(trial=k * 10000 + i, seconds=1e-3 + i * 1e-6, config={"tile_i": i}))
    if crash:
        os.kill(os.getpid(), signal.SIGKILL)     # no close, no exit handlers


def test_concurrent_writers_lose_nothing(tmp_path):
    import multiprocessing
    path = str(tmp_path / "tuning.sqlite")
    ctx = multiprocessing.get_context("spawn")
    n = 150
    procs = [ctx.Process(target=_writer, args=(path, k, n, k == 1)) for k in range(2)]
    for p in procs:
        p.start()
    reader = Records(path)
    while any(p.is_alive() for p in procs):
        reader.best("def1", SIG, "tgt1")         # reads while they write
    for p in procs:
        p.join()
    assert procs[0].exitcode == 0 and procs[1].exitcode == -signal.SIGKILL
    got = sorted(r.trial for r in reader.query())
    assert got == sorted(k * 10000 + i for k in range(2) for i in range(n))
    assert reader.best("def1", SIG, "tgt1").seconds == 1e-3
    reader.close()


FORKED_WRITERS = r"""
import os, sys, threading, time
from jitdl._version import __version__
from jitdl.autotune import records
path = sys.argv[1]

def rec(i, w):
    return records.Record(function="m.f", definition="d", signature="s", target="t",
                          target_name="cpu", jitdl=__version__, config={"i": i, "w": w},
                          seconds=1.0 + i, verified=True, trial=i)

db = records.shared(path)
db.add(rec(0, -1))                   # the parent's connection is open
stop = threading.Event()

def busy():                          # a thread writing while the process forks
    i = 0
    while not stop.is_set():
        db.add(rec(i, -2))
        i += 1
writer = threading.Thread(target=busy)
writer.start()
kids = []
for w in range(3):
    pid = os.fork()
    if pid == 0:
        mine = records.shared(path)
        saved = sum(mine.add(rec(i, w)) for i in range(150) if time.sleep(0.002) is None)
        os._exit(0 if saved == 150 else 1)
    kids.append(pid)
stop.set()
writer.join()
time.sleep(0.1)
db.close()                           # the parent is done while its children still write
print([os.waitpid(pid, 0)[1] for pid in kids])
"""


def test_children_forked_with_the_connection_open_lose_nothing(tmp_path):
    """A forked child used its parent's sqlite connection: once the parent closed its own,
    sqlite (its record of the file's locks is per process) took the parent for the last
    user and checkpointed the WAL away under the children: 20-60 of their 450 records
    were lost, though each add() had said it was saved."""
    path = str(tmp_path / "tuning.sqlite")
    out = subprocess.run([PY, "-c", FORKED_WRITERS, path], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[0, 0, 0]", out.stdout + out.stderr
    reader = Records(path)
    for w in range(3):
        got = [r.config["i"] for r in reader.query() if r.config["w"] == w]
        assert sorted(got) == list(range(150)), (w, len(got))
    reader.close()


CONCURRENT_FORKS = r"""
import os, sys, threading
sys.setswitchinterval(1e-6)          # (switch threads often: the race is narrow)
from jitdl.autotune import records
recs = [records.shared(os.path.join(sys.argv[1], f"t{i}.sqlite")) for i in range(3)]

def forker():
    for _ in range(150):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
threads = [threading.Thread(target=forker) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()

def take(got):                       # another thread: is any lock left held?
    for r in recs:
        ok = r._lock.acquire(timeout=5)
        got.append(ok)
        if ok:
            r._lock.release()
got = []
t = threading.Thread(target=take, args=(got,))
t.start()
t.join()
print(got)
"""


def test_threads_forking_at_once_leave_no_record_lock_held(tmp_path):
    """Three threads forking at once: the records' fork handlers kept the locks each fork
    took in one list, so one thread's after-fork released another's (RuntimeError: cannot
    release un-acquired lock, printed per fork) and that lock stayed held for ever: the
    process's next use of the records hung."""
    out = subprocess.run([PY, "-c", CONCURRENT_FORKS, str(tmp_path)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "[True, True, True]", \
        out.stdout + out.stderr[-2000:]
    assert "un-acquired" not in out.stderr, out.stderr[-2000:]


# -- files this jitdl cannot use ------------------------------------------------------------
def _damaged_files(tmp_path):
    """(name, path, what the warning says) of files that must read as no records."""
    out = []
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not sqlite at all\n" * 200)
    out.append(("garbage", garbage, "file is not a database"))

    full = tmp_path / "full.sqlite"
    r = Records(str(full))
    r.add_many([rec(signature=f"s{i}", features=[float(j) for j in range(30)])
                for i in range(1500)])
    r.close()
    data = full.read_bytes()
    assert len(data) > 200_000
    truncated = tmp_path / "truncated.sqlite"
    truncated.write_bytes(data[:len(data) // 2])
    out.append(("truncated", truncated, "malformed"))

    newer = tmp_path / "newer.sqlite"
    r = Records(str(newer))
    r.add(rec())
    r.close()
    con = sqlite3.connect(newer)
    con.execute("PRAGMA user_version = 99")
    con.close()
    out.append(("newer", newer, "written by a newer jitdl (schema 99"))

    foreign = tmp_path / "foreign.sqlite"
    con = sqlite3.connect(foreign)
    con.execute("CREATE TABLE songs (title TEXT)")
    con.commit()
    con.close()
    out.append(("foreign", foreign, "not a jitdl tuning database (its tables: songs)"))
    return out


def test_unusable_files_warn_once_read_as_empty_and_are_kept(tmp_path):
    for name, path, says in _damaged_files(tmp_path):
        kept = snapshot(str(path))
        r = Records(str(path))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert r.best("def1", SIG, "tgt1") is None, name
            assert r.query() == [] and r.summary() == [] and r.history("def1", "tgt1") == []
            assert r.add(rec()) == 0 and r.clear() == 0
            assert r.import_json(_export_file(tmp_path, [rec()])) == 0
        mine = [w for w in caught if issubclass(w.category, CacheWarning)]
        assert len(mine) == 1, (name, [str(w.message) for w in caught])
        assert says in str(mine[0].message) and str(path) in str(mine[0].message), name
        assert r.problem
        r.close()
        assert snapshot(str(path)) == kept, name   # never overwritten


def test_a_row_edited_into_nonsense_is_skipped(db):
    db.add_many([rec(trial=1), rec(trial=2, seconds=5e-4)])
    con = sqlite3.connect(db.path)
    con.execute("UPDATE records SET config = 'not json' WHERE trial = 2")
    con.commit()
    con.close()
    with pytest.warns(CacheWarning, match="skipping unreadable rows"):
        assert [r.trial for r in db.query()] == [1]
    assert db.best("def1", SIG, "tgt1").trial == 1


def test_an_unwritable_place_warns_and_loses_only_the_saving(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = Records(str(blocker / "sub" / "tuning.sqlite"))   # a directory cannot be made
    with pytest.warns(CacheWarning, match="cannot write the tuning records"):
        assert r.add(rec()) == 0
    assert r.best("def1", SIG, "tgt1") is None and r.query() == []


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes read-only files")
def test_a_read_only_file_is_still_read(tmp_path):
    path = str(tmp_path / "tuning.sqlite")
    r = Records(path)
    r.add(rec(seconds=3e-3))
    r.close()
    os.chmod(path, 0o444)
    r = Records(path)
    assert r.best("def1", SIG, "tgt1").seconds == 3e-3
    with pytest.warns(CacheWarning, match="cannot write"):
        assert r.add(rec(seconds=1e-3)) == 0
    assert r.best("def1", SIG, "tgt1").seconds == 3e-3


def test_default_path_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("JITDL_TUNING_DB", str(tmp_path / "x.sqlite"))
    assert rmod.default_path() == str(tmp_path / "x.sqlite")
    assert Records().path == str(tmp_path / "x.sqlite")
    assert rmod.shared() is rmod.shared(str(tmp_path / "x.sqlite"))   # one per file
    assert rmod.shared().path == str(tmp_path / "x.sqlite")
    monkeypatch.delenv("JITDL_TUNING_DB")
    path = rmod.default_path()
    assert path.endswith(os.path.join("jitdl", "tuning.sqlite")) and os.path.isabs(path)


# -- JSON -----------------------------------------------------------------------------------
def _export_file(tmp_path, records, name="in.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"format": rmod.FORMAT, "version": 1,
                                "records": [r.__dict__ if isinstance(r, Record) else r
                                            for r in records]}))
    return str(path)


def test_export_import_round_trip(db, tmp_path, rng):
    kept = [rec(trial=i, seconds=float(rng.uniform(1e-4, 1e-2)), created=100.0 + i,
                config={"tile_i": int(rng.integers(1, 64)), "order": (1, 0)},
                features=[float(x) for x in rng.standard_normal(5)]) for i in range(6)]
    kept.append(rec(function="mod.other", definition="def2", trial=9, created=200.0))
    db.add_many(kept)
    out = tmp_path / "export.json"
    assert db.export_json(str(out)) == 7
    data = json.loads(out.read_text())
    assert data["format"] == "jitdl-tuning-records" and data["version"] == 1
    assert len(data["records"]) == 7
    assert db.export_json(str(tmp_path / "m.json"), function="matmul") == 6

    other = Records(str(tmp_path / "other.sqlite"))
    assert other.import_json(str(out)) == 7
    assert other.query() == kept
    assert other.best("def1", SIG, "tgt1") == db.best("def1", SIG, "tgt1")
    assert other.import_json(str(out)) == 0     # the same trials are not added twice
    with open(tmp_path / "m.json") as f:        # a file object works too
        assert Records(str(tmp_path / "third.sqlite")).import_json(f) == 6
    other.close()


def test_import_skips_bad_rows_naming_them(db, tmp_path):
    good = rec(created=5.0).__dict__
    missing = dict(good, trial=1)
    del missing["target"]
    rows = [good, missing, dict(good, trial=2, seconds="fast"), dict(good, trial=3, speed=1),
            dict(good, trial=4, verified="yes"), dict(good, trial=5, config=[1, 2]),
            dict(good, trial=6, features=["a"]), "not a record",
            dict(good, trial=7, function="mod.conv", seconds=None, verified=False,
                 error="timeout: 10 s")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert db.import_json(_export_file(tmp_path, rows)) == 2
    texts = [str(w.message) for w in caught]
    assert len(texts) == 7, texts
    assert "record 1 (mod.matmul) skipped: field 'target' is missing" in texts[0]
    assert "record 2 (mod.matmul) skipped: field 'seconds' must be a positive number" \
        in texts[1] and "'fast'" in texts[1]
    assert "record 3 (mod.matmul) skipped: unknown field 'speed'" in texts[2]
    assert "field 'verified' must be true or false" in texts[3]
    assert "field 'config' must be an object" in texts[4]
    assert "field 'features' must be a list of numbers" in texts[5]
    assert "record 7 skipped: expected an object of fields, got str" in texts[6]
    assert sorted(r.trial for r in db.query()) == [0, 7]


@pytest.mark.parametrize("content, says", [
    ('{"format": "something-else", "version": 1, "records": []}',
     'not a jitdl tuning records file (expected "format": "jitdl-tuning-records", '
     "got 'something-else')"),
    ("[1, 2]", "not a jitdl tuning records file"),
    ('{"format": "jitdl-tuning-records", "version": 7, "records": []}',
     "written by a newer jitdl (format version 7; this jitdl reads version 1)"),
    ('{"format": "jitdl-tuning-records", "version": 1, "records": {}}',
     '"records" must be a list'),
    ("{not json", "not JSON"),
])
def test_import_refuses_other_files(db, tmp_path, content, says):
    path = tmp_path / "x.json"
    path.write_text(content)
    with pytest.raises(ValueError) as e:
        db.import_json(str(path))
    assert says in str(e.value) and str(path) in str(e.value)


# -- the command line -----------------------------------------------------------------------
def cli(tmp_path, *args, db="tuning.sqlite", stdin=None):
    env = dict(os.environ, JITDL_TUNING_DB=str(tmp_path / db))
    return subprocess.run([PY, "-m", "jitdl", "tune", *args], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL if stdin is None else stdin)


def _fill(path, n_shapes=2):
    """Four trials (the fastest unverified) per shape of mod.matmul, made 2 hours ago, and
    one of mod.conv by an older jitdl."""
    import time
    made = time.time() - 7200
    r = Records(str(path))
    for n in range(n_shapes):
        sig = json.dumps([["array", [64 + n, 32], "float32"], ["static", 3]])
        r.add_many([rec(signature=sig, seconds=1e-3 * (i + 1), throughput=10.0 / (i + 1),
                        verified=i != 0, trial=i, created=made) for i in range(4)])
    r.add(rec(function="mod.conv", definition="def5", seconds=2.0, jitdl="0.0.1"))
    r.close()


def test_cli_list(tmp_path):
    _fill(tmp_path / "tuning.sqlite")
    p = cli(tmp_path, "list")
    assert p.returncode == 0 and p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == f"tuning records: {tmp_path / 'tuning.sqlite'}"
    assert lines[1].split() == ["function", "call", "target", "best", "throughput",
                                "trials", "verified", "age"]
    row = next(ln for ln in lines if "float32[64, 32], 3" in ln)
    # trial 0 (1 ms) is unverified: the best applied is trial 1's 2 ms at 5 GFLOP/s
    assert "mod.matmul" in row and "cpu test" in row and "2.000 ms" in row
    assert "5.0 GFLOP/s" in row and row.split()[-4:] == ["4", "3", "2", "h"]
    conv = next(ln for ln in lines if ln.startswith("mod.conv"))
    assert "made by jitdl 0.0.1: not applied" in conv
    only = cli(tmp_path, "list", "conv")
    assert len(only.stdout.splitlines()) == 3 and "mod.conv" in only.stdout


def test_cli_list_into_head_exits_quietly(tmp_path):
    _fill(tmp_path / "tuning.sqlite", n_shapes=3000)      # far more than a pipe holds
    env = dict(os.environ, JITDL_TUNING_DB=str(tmp_path / "tuning.sqlite"))
    p = subprocess.Popen([PY, "-m", "jitdl", "tune", "list"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    assert p.stdout.readline().startswith(b"tuning records:")
    p.stdout.close()                                      # what `| head -1` does
    err = p.stderr.read()
    assert p.wait(timeout=60) == 128 + signal.SIGPIPE and err == b"", err


def test_cli_export_import_clear(tmp_path):
    _fill(tmp_path / "tuning.sqlite")
    p = cli(tmp_path, "export", "out.json", "matmul")
    assert p.returncode == 0 and "exported 8 records" in p.stdout, p.stderr
    assert len(json.loads((tmp_path / "out.json").read_text())["records"]) == 8
    p = cli(tmp_path, "import", "out.json", db="second.sqlite")
    assert p.returncode == 0 and "imported 8 records" in p.stdout
    assert Records(str(tmp_path / "second.sqlite")).query() == \
        Records(str(tmp_path / "tuning.sqlite")).query("matmul")

    p = cli(tmp_path, "clear", "matmul")                  # no terminal, no --yes: refused
    assert p.returncode == 1 and "add --yes" in p.stderr and "8 records" in p.stderr
    assert len(Records(str(tmp_path / "tuning.sqlite")).query()) == 9
    p = cli(tmp_path, "clear", "matmul", "--yes")
    assert p.returncode == 0 and "removed 8 records" in p.stdout
    assert [r.function for r in Records(str(tmp_path / "tuning.sqlite")).query()] == \
        ["mod.conv"]


def test_cli_import_refuses_another_format(tmp_path):
    (tmp_path / "x.json").write_text('{"format": "other"}')
    p = cli(tmp_path, "import", "x.json")
    assert p.returncode == 1 and "not a jitdl tuning records file" in p.stderr
    assert "Traceback" not in p.stderr
    p = cli(tmp_path, "import", "missing.json")
    assert p.returncode == 1 and "missing.json" in p.stderr and "Traceback" not in p.stderr


def test_cli_on_a_damaged_file_warns_without_a_traceback(tmp_path):
    (tmp_path / "tuning.sqlite").write_bytes(b"\0garbage" * 500)
    p = cli(tmp_path, "list")
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "file is not a database" in p.stderr and str(tmp_path) in p.stdout
    p = cli(tmp_path, "clear", "--yes")
    assert p.returncode == 1 and "nothing removed" in p.stdout
    assert (tmp_path / "tuning.sqlite").read_bytes() == b"\0garbage" * 500


def test_importing_records_loads_no_tuning_machinery():
    code = ("import sys, jitdl.autotune.records\n"
            "print([m for m in ('xgboost', 'multiprocessing', 'concurrent.futures') "
            "if m in sys.modules])")
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "[]", p.stderr


def test_queued_records_wait_for_another_writer_and_lost_ones_are_counted(db, monkeypatch):
    """add_queued (tuning's trials) with another process holding the write lock: each
    trial's add() waited the busy timeout and lost its record, every loss after the
    first warning unsaid. Queued records wait in memory for a later write; those that
    flush() still cannot write are counted in a warning."""
    monkeypatch.setattr(rmod, "BUSY_TIMEOUT_S", 0.5)
    db.add(rec(trial=0))
    holder = sqlite3.connect(db.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")            # another process's write under way
    assert [db.add_queued([rec(trial=i)]) for i in range(1, 4)] == [0, 0, 0]
    holder.execute("COMMIT")
    assert db.add_queued([rec(trial=4)]) == 4     # with the three that waited
    holder.execute("BEGIN IMMEDIATE")
    db.add_queued([rec(trial=5)])
    db.add_queued([rec(trial=6)])
    with pytest.warns(CacheWarning, match=r"2 tuning records not saved: the tuning "
                                          r"records at .* stayed locked"):
        assert db.flush() == 0
    holder.execute("COMMIT")
    db.add_queued([rec(trial=7)])
    assert db.flush() == 0                        # nothing left queued
    holder.close()
    assert sorted(r.trial for r in db.query()) == [0, 1, 2, 3, 4, 7]


def test_a_flush_waiting_for_another_writer_lets_lookups_through(db, monkeypatch):
    """flush() held the records' lock for the whole busy timeout while another process
    wrote: every record lookup of this process (each compile's) waited with it. It takes
    the lock for one short try at a time."""
    monkeypatch.setattr(rmod, "BUSY_TIMEOUT_S", 5.0)
    db.add(rec(trial=0))
    holder = sqlite3.connect(db.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")            # another process's write under way
    assert db.add_queued([rec(trial=1)]) == 0
    trying = threading.Event()
    try_write = db._try_write

    def spy(*a):
        trying.set()
        return try_write(*a)
    db._try_write = spy
    saved = []
    t = threading.Thread(target=lambda: saved.append(db.flush()))
    t.start()
    assert trying.wait(10)
    assert [r.trial for r in db.query()] == [0]   # read while the flush waits
    still_waiting = t.is_alive()
    holder.execute("COMMIT")
    holder.close()
    t.join(30)
    assert still_waiting and saved == [1]
    assert sorted(r.trial for r in db.query()) == [0, 1]


EXIT_WITH_QUEUED = r"""
import sqlite3, sys, threading, time
from jitdl._version import __version__
mode, path = sys.argv[1:]
if mode == "background":            # its exit hook registered before the records'
    from jitdl.autotune import background
    tuner = background.get()
from jitdl.autotune import records as rmod
rmod.BUSY_TIMEOUT_S = 0.5

def rec(trial):
    return rmod.Record("mod.f", "def1", "sig", "tgt", "cpu", __version__, {"t": 1}, 1e-3,
                       tuner="random", trial=trial)

db = rmod.shared(path)
db.add(rec(0))
holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
queued = threading.Event()
if mode == "background":
    # a job that queues a record once told to stop (the lock held) and ends unflushed
    class F:
        name = "f"
        def _tune_job(self, job, runner, stop):
            queued.set()
            stop.wait()
            holder.execute("BEGIN IMMEDIATE")
            db.add_queued([rec(1)])
    tuner.submit(background.Job(F(), ("k",), []))
    queued.wait()
else:
    holder.execute("BEGIN IMMEDIATE")
    def tuning():                    # a tuning thread the exit ends before its flush
        db.add_queued([rec(1)])
        queued.set()
        time.sleep(600)
    threading.Thread(target=tuning, daemon=True).start()
    queued.wait()
    if mode == "free":
        holder.execute("COMMIT")
print("exiting", flush=True)
"""


@pytest.mark.parametrize("mode", ["free", "held", "background"])
def test_records_queued_by_a_tuning_thread_cut_by_the_exit_are_saved_or_counted(tmp_path,
                                                                                 mode):
    """A record queued while another process wrote (add_queued) waited for its tuning
    run's flush; a thread that the interpreter's exit ended first (the background tuner,
    past shutdown's 5 s wait) lost it unsaid. The exit flushes what is queued: saved
    once the lock is free, else counted in a warning (also for a record the background
    tuner's job queued while it stopped, after the records' own exit hook ran)."""
    path = str(tmp_path / "tuning.sqlite")
    p = subprocess.run([PY, "-c", EXIT_WITH_QUEUED, mode, path], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and "exiting" in p.stdout, p.stderr
    trials = sorted(r.trial for r in Records(path).query())
    if mode == "free":
        assert trials == [0, 1], p.stderr
        assert "not saved" not in p.stderr
    else:
        assert trials == [0]
        assert "1 tuning record not saved" in p.stderr, p.stderr
