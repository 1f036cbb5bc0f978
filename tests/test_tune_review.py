"""Tuning's edges, as a user meets them: tune()'s arguments checked before any process
starts, records kept to the definition (and with_config copy) they were made for,
recompile() during tuning swapping in no stale kernel, and an interpreter that exits
mid-tuning doing so promptly with its records kept.

The schedules here have a deliberately slow default (a strided loop order), so tuning
always has a faster verified config to find."""
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import numpy as np
import pytest

import jitdl as jd
from jitdl.errors import ArgumentError, ScheduleError

SCALE = 2.0


@jd.compute
def scaled(x):
    return jd.tensor(x.shape, lambda i: x[i] * SCALE, name="Z")


@jd.schedule(scaled)
def _scaled_cpu(s, cfg):
    (i,) = s["Z"].axis
    fast = cfg.choice("fast", [False, True])
    io, ii = s.split(i, cfg.split("f", i, candidates=[8, 16]))
    if fast:
        s.vectorize(ii)
    else:
        s.reorder(ii, io)            # the default: strided


@pytest.fixture(scope="module")
def runner():
    r = jd.tune.LocalRunner(n_parallel=2, build_timeout=5)
    yield r
    r.close()


@pytest.fixture(autouse=True)
def own_records(tmp_path, monkeypatch):
    """A fresh tuning database per test: records of one test never apply in another."""
    monkeypatch.setenv("JITDL_TUNING_DB", str(tmp_path / "tuning.sqlite"))


def _x(rng):
    return rng.standard_normal(1 << 20).astype(np.float32)   # (strided default: 6x slower)


class Counting:
    """A runner that counts its measure() calls and can act before one (delegating)."""

    def __init__(self, inner=None, before=None):
        self.inner, self.before, self.calls = inner, before, 0

    def measure(self, task, configs):
        self.calls += 1
        if self.before is not None:
            self.before(self.calls)
        return self.inner.measure(task, configs)


@pytest.mark.parametrize("kwargs, message", [
    ({"tuner": "bogus"}, "scaled.tune(tuner=...): expected one of 'xgb', 'random', 'grid', "
                         "'ga' or a Tuner, got str: 'bogus'"),
    ({"tuner": None}, "scaled.tune(tuner=...): expected one of"),
    ({"trials": 0}, "scaled.tune(trials=...): expected a positive int, got int: 0"),
    ({"trials": "8"}, "scaled.tune(trials=...): expected a positive int, got str: '8'"),
    ({"trials": None}, "scaled.tune(trials=...): expected a positive int, got NoneType"),
    ({"timeout": 0}, "scaled.tune(timeout=...): expected None or a positive number of "
                     "seconds, got int: 0"),
    ({"timeout": "5"}, "scaled.tune(timeout=...): expected None or a positive number"),
    ({"seed": "x"}, "scaled.tune(seed=...): expected an int >= 0, got str: 'x'"),
    ({"seed": -1}, "scaled.tune(seed=...): expected an int >= 0, got int: -1"),
    ({"seed": 1.5}, "scaled.tune(seed=...): expected an int >= 0, got float: 1.5"),
])
def test_bad_tune_arguments_are_clear_errors_before_any_measurement(rng, kwargs, message):
    fake = Counting()
    with pytest.raises(ArgumentError) as e:
        scaled.tune(_x(rng), runner=fake, progress=False, **kwargs)
    assert str(e.value).startswith(message), str(e.value)
    assert "test_tune_review.py" in str(e.value)              # the user's line
    assert fake.calls == 0


@pytest.mark.parametrize("kwargs, message", [
    ({"timeout": 0}, "timeout=...): expected a positive number of seconds, got int: 0"),
    ({"timeout": float("nan")}, "timeout=...): expected a positive number of seconds, got "
                                "float: nan"),
    ({"timeout": "10"}, "timeout=...): expected a positive number of seconds, got str: '10'"),
    ({"build_timeout": -1}, "build_timeout=...): expected None or a positive number of "
                            "seconds, got int: -1"),
    ({"min_repeat_ms": -5}, "min_repeat_ms=...): expected a number of milliseconds >= 0, "
                            "got int: -5"),
    ({"n_parallel": "2"}, "n_parallel=...): expected None or a positive int, got str: '2'"),
    # (repeat=2.5 and '3' were read as int(...), None was a bare TypeError)
    ({"repeat": 2.5}, "repeat=...): expected a positive int, got float: 2.5"),
    ({"repeat": "3"}, "repeat=...): expected a positive int, got str: '3'"),
    ({"repeat": None}, "repeat=...): expected a positive int, got NoneType: None"),
    ({"repeat": 0}, "repeat=...): expected a positive int, got int: 0"),
])
def test_bad_runner_arguments_are_clear_errors(kwargs, message):
    """A timeout of 0 or less failed every candidate as a "timeout" (NaN: none ever timed
    out); a string was a bare ValueError or TypeError."""
    with pytest.raises(ArgumentError) as e:
        jd.tune.LocalRunner(**kwargs)
    assert str(e.value).startswith("jd.tune.LocalRunner(" + message), str(e.value)
    assert "test_tune_review.py" in str(e.value)              # the user's line


def test_a_runner_of_a_wrong_type_is_named(rng):
    with pytest.raises(ArgumentError, match=r"scaled.tune\(runner=...\): expected None, a "
                       r"jd.tune.LocalRunner, .* got int: 5"):
        scaled.tune(_x(rng), runner=5, progress=False)
    # a word is no scheduler address (dask would try to reach it for its whole timeout)
    with pytest.raises(ArgumentError, match=r"runner=...\): expected .* a scheduler address "
                       r"\('tcp://host:port'\), got str: 'loacl'"):
        scaled.tune(_x(rng), runner="loacl", progress=False)


def test_a_runner_or_tuner_class_given_for_its_instance_is_named(rng):
    """runner=jd.tune.LocalRunner (the class: it has its instances' methods) failed deep
    in the search, "measure() missing 1 required positional argument: 'configs'"; a
    Tuner class likewise."""
    from jitdl.autotune.tuner import RandomTuner
    for cls in (jd.tune.LocalRunner, jd.tune.DaskRunner):
        with pytest.raises(ArgumentError, match=rf"scaled.tune\(runner=...\): expected None, "
                           rf".* \(an instance: {cls.__name__}\(...\)\), got type: "):
            scaled.tune(_x(rng), runner=cls, progress=False)
    fake = Counting()
    with pytest.raises(ArgumentError, match=r"scaled.tune\(tuner=...\): expected one of .* "
                       r"or a Tuner \(an instance: RandomTuner\(...\)\), got type: "):
        scaled.tune(_x(rng), runner=fake, tuner=RandomTuner, progress=False)
    assert fake.calls == 0


def _unpicklable(autotune=None):
    """scaled with a schedule that reads a lock: cloudpickle cannot send it to a worker."""
    lock = threading.Lock()
    f = jd.compute(scaled.pyfunc, autotune=autotune)

    @jd.schedule(f)
    def locked_schedule(s, cfg):
        with lock:
            _scaled_cpu(s, cfg)
    return f


def test_a_schedule_that_cannot_be_pickled_is_a_clear_error(rng):
    x = _x(rng)
    with pytest.raises(ScheduleError) as e:
        _unpicklable().tune(x, trials=2, progress=False)
    assert str(e.value).startswith(
        "scaled: cannot send its schedule function _unpicklable.<locals>.locked_schedule "
        "to the tuning worker processes: TypeError: cannot pickle '_thread.lock' object; "
        "a value it reads"), str(e.value)
    assert "test_tune_review.py" in str(e.value)          # the user's line


def test_foreground_tuning_that_fails_leaves_the_call_its_default_kernel(
        rng, monkeypatch, caplog):
    monkeypatch.setenv("JITDL_TUNE_BUDGET", "2")
    f = _unpicklable(autotune="foreground")
    x = _x(rng)
    with caplog.at_level("WARNING", logger="jitdl.tune"):
        y = f(x)                                  # was: cloudpickle's TypeError
    np.testing.assert_allclose(y, x.astype(np.float64) * 2.0, rtol=1e-6)
    assert "foreground tuning of scaled(x: float32[1048576]) failed: ScheduleError: " \
        "scaled: cannot send its schedule function" in caplog.text, caplog.text
    np.testing.assert_allclose(f(x), x.astype(np.float64) * 2.0, rtol=1e-6)


def test_tuning_status_while_other_threads_call_new_shapes(monkeypatch):
    """tuning_status() raised RuntimeError (dictionary changed size during iteration)
    while another thread's first call of a shape added its background job."""
    from jitdl.autotune import background

    class Idle:                       # jobs are made and kept, never run
        def submit(self, job):
            pass
    monkeypatch.setattr(background, "get", lambda: Idle())
    f = jd.compute(scaled.pyfunc, autotune="background")
    errors, done = [], threading.Event()

    def watch():
        while not done.is_set():
            try:
                f.tuning_status()
            except Exception as e:    # noqa: BLE001
                errors.append(e)
                return
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for n in range(1, 41):
            x = np.arange(n, dtype=np.float32) + 1
            np.testing.assert_allclose(f(x), x * 2.0, rtol=1e-6)
    finally:
        done.set()
        watcher.join()
    assert not errors, errors
    assert len(f.tuning_status()) == 40


def test_a_with_config_copy_keeps_its_records_to_itself(rng, runner):
    x = _x(rng)
    copy = scaled.with_config(fast=False)
    result = copy.tune(x, trials=2, tuner="grid", runner=runner, progress=False)
    assert all(m.config["fast"] is False for m in result.measurements)
    assert copy.tuning_records(x) and not scaled.tuning_records(x)
    original = jd.compute(scaled.pyfunc)          # a fresh process's view of scaled
    original._schedules = dict(scaled._schedules)
    np.testing.assert_allclose(original(x), x * 2.0, rtol=1e-6)
    assert original._configs.get(original._key((x,))) is None   # the copy's record is not its
    again = scaled.with_config(fast=False)        # the same copy, later: its record applies
    np.testing.assert_allclose(again(x), x * 2.0, rtol=1e-6)
    best = copy.tuning_records(x)[0]
    assert again._configs[again._key((x,))] == best.config


def _nested(v, depth):
    for _ in range(depth):
        v = [v]
    return v


def _innermost(v):
    while isinstance(v, list):
        v = v[0]
    return v


i = 0                              # a global spelled like notation's index
DEEP = _nested(2.0, 25)            # deeper than the fast key reads (no fast key)


@jd.compute
def notation(X):
    Y[i] = X[i] * 2.0
    return Y


@jd.compute
def deep(X):
    Y[i] = X[i] * _innermost(DEEP)
    return Y


def _notation_cpu(s, cfg):
    (ax,) = s["Y"].axis
    fast = cfg.choice("fast", [False, True])
    io, ii = s.split(ax, cfg.split("f", ax, candidates=[8, 16]))
    if fast:
        s.vectorize(ii)
    else:
        s.reorder(ii, io)


jd.schedule(notation)(_notation_cpu)
jd.schedule(deep)(_notation_cpu)


def test_tuning_records_are_kept_to_what_the_fast_key_reads(rng, runner):
    """The tuning records' key read the definition as the fast key did before index
    notation's names left it and before values nested too deep to read gave no fast key:
    a module global spelled like notation's index (`i`) changed the records' key (a later
    process found no record and tuned again), and a definition reading a value nested
    past what the key reads shared its records with every other value of it. The records'
    key is now made of the fast key's parts, and there are none where it has none."""
    global i, DEEP
    x = _x(rng)
    notation.tune(x, trials=2, tuner="grid", runner=runner, progress=False)
    recs = notation.tuning_records(x)
    assert recs
    i = 7
    try:
        assert notation.tuning_records(x) == recs
        fresh = jd.compute(notation.pyfunc)       # a later process's view of it
        fresh._schedules = dict(notation._schedules)
        np.testing.assert_allclose(fresh(x), x * 2.0, rtol=1e-6)
        assert fresh._configs[fresh._key((x,))] == recs[0].config
    finally:
        i = 0
    deep.tune(x, trials=2, tuner="grid", runner=runner, progress=False)
    assert deep.tuning_records(x) == deep.tuning_records() == []
    DEEP = _nested(3.0, 25)
    try:
        fresh = jd.compute(deep.pyfunc)
        fresh._schedules = dict(deep._schedules)
        np.testing.assert_allclose(fresh(x), x * 3.0, rtol=1e-6)
        assert fresh._configs.get(fresh._key((x,))) is None
    finally:
        DEEP = _nested(2.0, 25)


def test_tuning_records_of_a_definition_importing_a_users_module_are_applied(
        rng, runner, tmp_path, monkeypatch):
    """A helper's `import ktr_cfg` of a module of the user's that nothing else imports
    gives no key before the trace imports it (2018e93): tune() (after its trace) wrote
    records under the key the definition has then, and a later process, looking for
    them before its trace, had no key and never applied them (it tuned again each
    time). A compile without a records' key looks again after its trace."""
    (tmp_path / "ktr_cfg.py").write_text("SCALE = 2.0\n")
    (tmp_path / "ktr_def.py").write_text(textwrap.dedent('''\
        import jitdl as jd

        def helper(v):
            import ktr_cfg
            return v * ktr_cfg.SCALE

        @jd.compute
        def imports(x):
            return jd.tensor(x.shape, lambda i: helper(x[i]), name="Z")

        @jd.schedule(imports)
        def _imports_cpu(s, cfg):
            (i,) = s["Z"].axis
            fast = cfg.choice("fast", [False, True])
            io, ii = s.split(i, cfg.split("f", i, candidates=[8, 16]))
            if fast:
                s.vectorize(ii)
            else:
                s.reorder(ii, io)
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "ktr_cfg", raising=False)
    import ktr_def
    x = _x(rng)
    ktr_def.imports.tune(x, trials=2, tuner="grid", runner=runner, progress=False)
    recs = ktr_def.imports.tuning_records(x)
    assert recs
    del sys.modules["ktr_cfg"]                  # a later process's view of it
    fresh = jd.compute(ktr_def.imports.pyfunc)
    fresh._schedules = dict(ktr_def.imports._schedules)
    np.testing.assert_allclose(fresh(x), x * 2.0, rtol=1e-6)
    assert fresh._configs.get(fresh._key((x,))) == recs[0].config
    monkeypatch.delitem(sys.modules, "ktr_def")


def test_tuning_records_without_arguments_are_of_this_definition_only(rng, runner):
    def make(factor):
        @jd.compute
        def twice(x):
            return jd.tensor(x.shape, lambda i: x[i] * factor, name="Z")
        return twice
    one, other = make(2.0), make(3.0)             # one qualified name, two definitions
    assert one.qualname == other.qualname
    x = _x(rng)
    one.tune(x, trials=1, runner=runner, progress=False)
    assert len(one.tuning_records()) == 1
    assert other.tuning_records() == []


@pytest.mark.parametrize("background", [False, True])
def test_recompile_during_tuning_swaps_no_stale_kernel_in(rng, runner, background):
    """A kernel tuned for the old value of a global never replaces the recompiled one."""
    global SCALE
    x = _x(rng)
    scaled.recompile()
    np.testing.assert_allclose(scaled(x), x * 2.0, rtol=1e-6)

    def change(n):
        global SCALE
        if n == 2:                   # after the default's measurement: tuning has traced
            SCALE = 3.0
            scaled.recompile()
    fake = Counting(runner, change)
    try:
        if background:
            from jitdl.autotune import background as bg
            key = scaled._key((x,))
            job = bg.Job(scaled, key, [x.copy()], "x", budget=(3, None))
            scaled._tune_job(job, fake, None)
            assert job.result.improved
        else:
            result = scaled.tune(x, trials=3, tuner="grid", runner=fake, progress=False)
            assert result.improved
        np.testing.assert_allclose(scaled(x), x * 3.0, rtol=1e-6)
    finally:
        SCALE = 2.0
        scaled.recompile()


EXITS_MID_TUNING = '''
import sys, time
import numpy as np
import jitdl as jd
from jitdl.autotune import background

@jd.compute(autotune="background")
def scaled(x):
    return jd.tensor(x.shape, lambda i: x[i] * 2.0, name="Z")

@jd.schedule(scaled)
def _(s, cfg):
    (i,) = s["Z"].axis
    fast = cfg.choice("fast", [False, True])
    io, ii = s.split(i, cfg.split("f", i, candidates=[2, 4, 8, 16, 32, 64]))
    if fast:
        s.vectorize(ii)
    else:
        s.reorder(ii, io)

x = np.random.default_rng(0).standard_normal(1 << 15).astype(np.float32)
scaled(x)
deadline = time.monotonic() + 120
while scaled.tuning_status()[0]["trials"] < 2 and time.monotonic() < deadline:
    time.sleep(0.02)            # (no main guard: workers must not run this again)
runner = background.get()._runner
print("PIDS", *runner.pids()["build"], *runner.pids()["timing"], flush=True)
print("TRIALS", scaled.tuning_status()[0]["trials"], flush=True)
print("EXITING", time.time(), flush=True)
'''


def test_an_interpreter_exiting_mid_tuning_exits_at_once_with_its_records(tmp_path):
    script = tmp_path / "exits.py"
    script.write_text(EXITS_MID_TUNING)
    db = tmp_path / "exit.sqlite"
    env = dict(os.environ, JITDL_TUNING_DB=str(db), JITDL_TUNE_BUDGET="500")
    out = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=200)
    exited = time.time()
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines())
    assert exited - float(lines["EXITING"]) < 5.0, out.stderr     # not a round's wait
    pids = [int(p) for p in lines["PIDS"].split()]
    assert pids and int(lines["TRIALS"]) >= 2, out.stdout
    assert "failed" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    time.sleep(0.5)
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")
             and "Z" not in open(f"/proc/{p}/stat").read().split()[2]]
    assert not alive, alive
    from jitdl.autotune.records import Records
    recs = Records(str(db)).query()
    assert len(recs) >= int(lines["TRIALS"])
    assert not [r.error for r in recs if r.error], [r.error for r in recs]


def test_wait_after_the_tuner_stopped_returns_with_queued_jobs_stopped():
    """An atexit hook of the user's that calls jd.tune.wait() runs after the tuner's
    shutdown (hooks run last registered first): jobs still queued then never run, and
    wait() must not wait for them forever (the process could not exit)."""
    from jitdl.autotune import background

    class Slow:                 # a job that tunes until the tuner stops
        name = "slow"

        @staticmethod
        def _tune_job(job, runner, stop):
            stop.wait(30)
    tuner = background.Background()
    jobs = [background.Job(Slow, ("k", i), []) for i in range(3)]
    for job in jobs:
        tuner.submit(job)
    deadline = time.monotonic() + 10
    while jobs[0].state != "tuning" and time.monotonic() < deadline:
        time.sleep(0.01)
    tuner.shutdown()
    assert tuner.wait(timeout=5)
    assert [j.state for j in jobs] == ["stopped"] * 3


@pytest.mark.parametrize("text", ["0", "0s", "10,0m"])
def test_a_zero_budget_is_an_error_not_an_unlimited_one(text):
    from jitdl.autotune.background import parse_budget
    with pytest.raises(ValueError, match="JITDL_TUNE_BUDGET: .* is no budget; give a "
                                         "positive number of trials or seconds"):
        parse_budget(text)


def test_a_background_job_keeps_a_sketch_of_the_call_not_its_arrays(monkeypatch):
    """A background job kept the call's arrays until it ran: a NumPy array as a whole
    copy, a GPU array by reference (so a change the caller made meanwhile was what the
    tuning saw, and a large array stayed alive). It keeps shape, dtype and value range
    now, and tunes on arrays made from them."""
    from jitdl.autotune import background
    from jitdl.autotune.task import Measurement
    jobs = []

    class Idle:                       # jobs are made and kept, run below by hand
        def submit(self, job):
            jobs.append(job)
    monkeypatch.setattr(background, "get", lambda: Idle())
    f = jd.compute(scaled.pyfunc, autotune="background")
    x = np.linspace(-3.0, 5.0, 4096, dtype=np.float32)
    f(x)
    (job,) = jobs
    assert not any(isinstance(a, np.ndarray) for a in job.args), job.args
    from jitdl.autotune.measure import Sketch
    assert job.args == [Sketch((4096,), np.dtype(np.float32), False, -3.0, 5.0)]
    x[:] = 1e6                        # the caller reuses its array before the job runs

    seen = []

    class Fake:                       # a runner that keeps what it was asked to time
        def measure(self, task, configs):
            seen.append([np.array(a) for a in task.args])
            return [Measurement(c, None, "run: not timed") for c in configs]
    job.budget = (2, None)
    f._tune_job(job, Fake(), threading.Event())
    assert seen
    for (a,) in seen:
        assert a.shape == (4096,) and a.dtype == np.float32
        assert a.min() == -3.0 and a.max() == 5.0 and len(np.unique(a)) > 100


def test_a_tuning_run_keeps_its_trials_while_another_process_writes_records(monkeypatch):
    """Another process holding the tuning records' write lock: each trial waited the busy
    timeout to add its record, and lost it (the first loss warned, the others were
    unsaid). Trials now queue their records while the lock is held, and the run writes
    them at its end, once the lock is free."""
    from jitdl.autotune import records
    from jitdl.autotune.task import Measurement
    monkeypatch.setattr(records, "BUSY_TIMEOUT_S", 1.0)
    f = jd.compute(scaled.pyfunc)
    jd.schedule(f, target="cpu")(_scaled_cpu)     # (4 configs)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    assert f.tuning_records(x) == []
    db = records.shared()
    db.add(records.Record(function="other", definition="d", signature="s", target="t",
                          target_name="cpu", jitdl="0", config={}, seconds=None,
                          error="x"))
    import sqlite3
    holder = sqlite3.connect(db.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")

    class Fake:
        def measure(self, task, configs):
            return [Measurement(c, None, "run: not timed") for c in configs]

    def trial(n, m):
        if n == 4:
            holder.execute("COMMIT")              # the other process is done
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # no record lost, so no warning
        f._tune([x], 4, None, "random", Fake(), 0, False, on_trial=trial)
    holder.close()
    assert sorted(r.trial for r in f.tuning_records(x)) == [1, 2, 3, 4]
