"""f.tune end to end: results, records applied in a later process with zero trials, a
record of a changed definition ignored, planted failures costing one trial each, the
kernel cache holding one entry per key, background tuning swapping a faster kernel in
without blocking a call, and the tuning curve.

Tuning starts worker processes (about a second each): these tests keep trials few and
spaces small, with user schedules whose default is deliberately slow so that tuning
has something to find.
"""
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import jitdl as jd

DEFINITION = '''
import multiprocessing
import os
import time
import jitdl as jd


def in_worker():       # (the space is found in the user's process: no planting there)
    return multiprocessing.parent_process() is not None

@jd.compute{decorator}
def mm(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j]{extra}, axis=k), name="C")

@jd.schedule(mm)
def mm_cpu(s, cfg):
    C = s["C"]
    i, j = C.axis
    (k,) = C.reduce_axis
    tj = cfg.split("tj", j, candidates=[8, 16])
    mode = cfg.choice("mode", {modes})
    if mode == "crash" and in_worker():
        os.abort()                   # runs in the build worker: a crashed candidate
    if mode == "hang" and in_worker():
        time.sleep(3600)             # a hung candidate
    if mode != "fast":               # the default: column by column, k innermost (strided)
        s.reorder(j, i, k)
        return
    jo, ji = s.split(j, tj)
    s.reorder(i, jo, k, ji)
    s.vectorize(ji)
'''


def _module(tmp_path, name, decorator="", extra="",
            modes=("slow", "fast", "crash", "hang")):
    path = tmp_path / f"{name}.py"
    path.write_text(DEFINITION.format(decorator=decorator, extra=extra, modes=list(modes)))
    sys.path.insert(0, str(tmp_path))
    try:
        import importlib
        mod = importlib.import_module(name)
    finally:
        sys.path.remove(str(tmp_path))
    return mod, path


def _runner():
    return jd.tune.LocalRunner(n_parallel=2, timeout=20.0, build_timeout=5.0)


def _inputs(rng, m=64, k=512, n=512):
    return (rng.standard_normal((m, k)).astype(np.float32),
            rng.standard_normal((k, n)).astype(np.float32))


def _ref(a, b):
    return a.astype(np.float64) @ b


@pytest.fixture(scope="module")
def runner():
    r = _runner()
    yield r
    r.close()


def test_tune_finds_a_verified_faster_config_and_survives_planted_failures(
        rng, tmp_path, runner):
    mod, _ = _module(tmp_path, "tune_planted")
    a, b = _inputs(rng)
    # the grid: tj=8 with each mode, then tj=16 with the slow default
    result = mod.mm.tune(a, b, trials=5, tuner="grid", runner=runner, progress=False)
    errors = {m.config["mode"]: m.error for m in result.measurements if not m.ok}
    assert set(errors) == {"crash", "hang"}, errors          # one failed trial each
    assert errors["crash"].startswith("crash"), errors["crash"]
    assert errors["hang"].startswith("timeout"), errors["hang"]
    assert result.trials == 5 and result.failed == 2
    assert result.config["mode"] == "fast" and result.speedup > 1.0
    config, seconds = result                                  # unpacks as before
    assert config == result.config and seconds == result.seconds
    text = repr(result)
    assert "best" in text and "default" in text and "x the default" in text
    np.testing.assert_allclose(mod.mm(a, b), _ref(a, b), rtol=1e-4, atol=1e-4)
    assert mod.mm._configs[mod.mm._key((a, b))]["mode"] == "fast"
    recs = mod.mm.tuning_records(a, b)
    assert recs[0].verified and recs[0].config["mode"] == "fast"
    trials = [r for r in recs if r.tuner != "confirm"]      # (the rest: the re-timings)
    assert len(trials) == 5 and sum(r.seconds is None for r in trials) == 2


def test_tuned_kernel_is_the_one_cache_entry_of_its_key(rng, tmp_path, runner, monkeypatch):
    from jitdl.cache.store import Store
    store = Store(str(tmp_path / "cache"), 1 << 30)
    monkeypatch.setattr("jitdl.api.default_store", lambda: store)
    mod, _ = _module(tmp_path, "tune_cache")
    a, b = _inputs(rng)
    mod.mm(a, b)
    assert len(store.entries()) == 1
    result = mod.mm.tune(a, b, trials=4, tuner="grid", runner=runner, progress=False)
    assert result.improved
    entries = store.entries()
    assert len(entries) == 1, [e[1].get("config") for e in entries]
    assert entries[0][1]["config"]["mode"] == "fast"


def _run(code, env):
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_a_later_process_applies_the_record_with_zero_trials(rng, tmp_path, runner):
    mod, path = _module(tmp_path, "tune_later")
    a, b = _inputs(rng)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    result = mod.mm.tune(a, b, trials=4, tuner="grid", runner=runner, progress=False)
    assert result.config["mode"] == "fast"
    env = dict(os.environ, JITDL_LOG="tune")
    code = f"""
        import sys, numpy as np
        sys.path.insert(0, {str(tmp_path)!r})
        import {{name}} as mod
        a, b = np.load({str(tmp_path / 'a.npy')!r}), np.load({str(tmp_path / 'b.npy')!r})
        y = mod.mm(a, b)
        assert np.allclose(y, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
        print("CONFIG", mod.mm._configs.get(mod.mm._key((a, b))))
        print("TUNINGS", len(mod.mm._tunings))
    """
    out = _run(code.replace("{name}", "tune_later"), env)
    assert "CONFIG {'mode': 'fast'" in out and "TUNINGS 0" in out, out
    # the same module with a changed definition: the record is not for it
    path.write_text(DEFINITION.format(decorator="", extra=" * 2.0",
                                      modes=["slow", "fast", "crash", "hang"]))
    code2 = code.replace("a.astype(np.float64) @ b", "2 * (a.astype(np.float64) @ b)")
    out = _run(code2.replace("{name}", "tune_later"), env)
    assert "CONFIG None" in out, out


def test_background_tuning_swaps_a_faster_kernel_in_without_blocking(rng, tmp_path):
    mod, _ = _module(tmp_path, "tune_background", decorator='(autotune="background")',
                     modes=("slow", "fast"))
    f = mod.mm
    a, b = _inputs(rng)
    ref = _ref(a, b)
    key = f._key((a, b))
    first = f(a, b)
    np.testing.assert_allclose(first, ref, rtol=1e-4, atol=1e-4)
    original = f._kernels[key]
    (status,) = f.tuning_status()
    assert status["state"] in ("queued", "tuning")
    calls, slowest = 0, 0.0
    deadline = time.monotonic() + 240
    while f.tuning_status()[0]["state"] in ("queued", "tuning"):
        t0 = time.perf_counter()
        y = f(a, b)                        # never waits for the tuner
        slowest = max(slowest, time.perf_counter() - t0)
        calls += 1
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
        assert time.monotonic() < deadline, f.tuning_status()
        time.sleep(0.01)
    (status,) = f.tuning_status()
    assert status["state"] == "done", status
    assert status["swaps"] >= 1 and f._kernels[key] is not original
    assert f._configs[key]["mode"] == "fast"
    assert calls > 0
    np.testing.assert_allclose(f(a, b), ref, rtol=1e-4, atol=1e-4)


def test_calls_from_other_threads_during_a_swap_stay_correct(rng, tmp_path):
    mod, _ = _module(tmp_path, "tune_threads", decorator='(autotune="background")',
                     modes=("slow", "fast"))
    f = mod.mm
    a, b = _inputs(rng, 64, 48, 64)
    ref = _ref(a, b)
    f(a, b)
    bad = []

    def hammer():
        while f.tuning_status()[0]["state"] in ("queued", "tuning"):
            y = f(a, b)
            if not np.allclose(y, ref, rtol=1e-4, atol=1e-4):
                bad.append(y)
    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    assert jd.tune.wait(timeout=240)
    for t in threads:
        t.join(10)
    assert not bad and f.tuning_status()[0]["state"] == "done"


def test_tuning_curve_is_a_figure(rng, tmp_path, runner):
    pytest.importorskip("matplotlib")
    mod, _ = _module(tmp_path, "tune_curve")
    a, b = _inputs(rng)
    result = mod.mm.tune(a, b, trials=4, tuner="random", runner=runner, progress=False)
    curve = result.curve()
    assert len(curve) == 4 and curve == sorted(curve) and curve[-1] > 0
    fig = mod.mm.tuning_curve()
    (line,) = fig.axes[0].get_lines()
    assert list(line.get_ydata()) == curve


def test_budget_parsing():
    from jitdl.autotune.background import parse_budget
    assert parse_budget("64") == (64, None)
    assert parse_budget("90s") == (None, 90.0)
    assert parse_budget("64, 2m") == (64, 120.0)
    # any whitespace, units in any case (were "cannot read")
    assert parse_budget("64,\t90s") == parse_budget("64\n, 90S") == (64, 90.0)
    assert parse_budget("2M") == parse_budget("2Min") == (None, 120.0)
    assert parse_budget("1H, 8") == (8, 3600.0)
    with pytest.raises(ValueError, match="JITDL_TUNE_BUDGET"):
        parse_budget("lots")
    assert parse_budget("0.5s, 8") == (8, 0.5)
    for text in ("0.5", "2.5, 30s"):        # were 0 and 2 trials, silently
        with pytest.raises(ValueError, match=r"JITDL_TUNE_BUDGET: '(0.5|2.5)' is no number "
                                             r"of trials; give a whole number \("):
            parse_budget(text)
    for text in (",", " , ", ""):          # were no limit at all
        with pytest.raises(ValueError, match=r"JITDL_TUNE_BUDGET: '[ ,]*' is no budget"):
            parse_budget(text)
    for text, what in (("64,100", "trials"), ("90s, 2m", "seconds"),
                       ("8, 1h, 30s", "seconds")):     # were the last part, silently
        with pytest.raises(ValueError, match=rf"JITDL_TUNE_BUDGET: '{text}' gives the "
                                             rf"{what} twice; give each at most once"):
            parse_budget(text)


def test_a_config_measured_fast_once_must_beat_the_default_again_side_by_side():
    """The winner's curse: the fastest of many noisy trials is re-timed with the default
    before it replaces it."""
    from jitdl.autotune import search
    from jitdl.autotune.task import Measurement
    from jitdl.schedule.config import ChoiceKnob, ConfigSpace

    class Runner:            # a lucky measurement of "b" once; re-timed, "c" is the fastest
        truth = {"a": 1.0, "b": 1.2, "c": 0.9}

        def __init__(self):
            self.calls = 0

        def measure(self, task, configs):
            self.calls += 1
            lucky = {"b": 0.5} if self.calls == 2 else {}
            return [Measurement(c, lucky.get(c["v"], self.truth[c["v"]]), verified=True,
                                artifact=c["v"]) for c in configs]

    class T:
        name, work, unit, space = "t", ("flop", 1e9), "GFLOP/s", \
            ConfigSpace([ChoiceKnob("v", ("a", "b", "c"))])

        @staticmethod
        def throughput(s):
            return 1.0 / s if s else 0.0
    r = search.search(T, 3, Runner(), tuner="grid")
    assert r.config == {"v": "c"} and r.seconds == 0.9 and r.default_seconds == 1.0
    assert r.artifact == "c" and r.improved
    assert set(r.confirmed) == {'{"v": "a"}', '{"v": "b"}', '{"v": "c"}'}
    assert r.trials == 3                          # the re-timings are not trials
    unlimited = search.search(T, None, Runner(), tuner="grid")     # trials=None: no limit
    assert unlimited.trials == 3 and unlimited.stopped == "space exhausted"


def test_a_re_timing_cut_short_by_the_deadline_keeps_the_search_choice():
    """The closing re-timing's first round, cut at the timeout after the default was
    timed again, made the default win against finalists that were not (b, 2x in the
    search, was dropped; its records' "confirm" row was the default's, so a later
    process applied the default): a round cut short now decides nothing."""
    from jitdl.autotune import search
    from jitdl.autotune.task import Measurement
    from jitdl.schedule.config import ChoiceKnob, ConfigSpace
    cut = "stopped: the tuning deadline passed"

    class Runner:            # the re-timing: the deadline passes after its first config
        truth = {"a": 1.0, "b": 0.5, "c": 0.9}
        calls = 0

        def measure(self, task, configs, deadline=None):
            self.calls += 1
            return [Measurement(c, self.truth[c["v"]], verified=True, artifact=c["v"])
                    if self.calls <= 2 or self.calls == 3 and i == 0
                    else Measurement(c, None, cut) for i, c in enumerate(configs)]

    class T:
        name, work, unit, space = "t", ("flop", 1e9), "GFLOP/s", \
            ConfigSpace([ChoiceKnob("v", ("a", "b", "c"))])

        @staticmethod
        def throughput(s):
            return 1.0 / s if s else 0.0
    r = search.search(T, 3, Runner(), tuner="grid", timeout=600.0)
    assert r.config == {"v": "b"} and r.seconds == 0.5 and r.improved, r
    assert r.retimed() == []                     # no "confirm" record for the default


def test_a_run_whose_timeout_cut_the_default_says_so():
    """A timeout that passed while the default was still being built or timed left no
    trial, and the result said "default  -  0.0 GFLOP/s" with no reason."""
    from jitdl.autotune import search
    from jitdl.autotune.task import Measurement
    from jitdl.schedule.config import ChoiceKnob, ConfigSpace

    class Runner:            # the default's build runs past the deadline: it is cut there
        def measure(self, task, configs, deadline=None):
            time.sleep(max(0.0, deadline - time.monotonic()) + 0.01)
            return [Measurement(c, None, "stopped: the tuning deadline passed")
                    for c in configs]

    class T:
        name, work, unit, space = "t", ("flop", 1e9), "GFLOP/s", \
            ConfigSpace([ChoiceKnob("v", ("a", "b"))])

        @staticmethod
        def throughput(s):
            return 1.0 / s if s else 0.0
    r = search.search(T, None, Runner(), tuner="grid", timeout=0.2)
    assert r.trials == 0 and r.stopped == "timeout" and not r.improved, r
    assert r.config == {"v": "a"} and r.speedup == 0.0
    text = repr(r)
    assert "default   not measured: the timeout passed before its build and timing ended" \
        in text, text


def test_a_run_whose_reference_failed_stops_after_the_default():
    """Where the reference itself failed in the timing process (the default config,
    which every candidate is checked against), every candidate failed the same way: the
    run spent all its trials (a background job its whole budget) on them. It stops
    after the default now, and says why."""
    from jitdl.autotune import search
    from jitdl.autotune.task import REFERENCE_FAILED, Measurement
    from jitdl.schedule.config import ChoiceKnob, ConfigSpace

    class Runner:
        configs = []

        def measure(self, task, configs):
            self.configs += configs
            return [Measurement(c, error=f"{REFERENCE_FAILED}: IndexError: out of range")
                    for c in configs]

    class T:
        name, work, unit, space = "t", ("flop", 1e9), "GFLOP/s", \
            ConfigSpace([ChoiceKnob("v", ("a", "b", "c"))])

        @staticmethod
        def throughput(s):
            return 1.0 / s if s else 0.0
    runner = Runner()
    r = search.search(T, 3, runner, tuner="grid")
    assert runner.configs == [{"v": "a"}] and r.trials == 1, runner.configs
    assert r.stopped == "the default's failure" and not r.improved
    assert "failed: run: the reference (the default config) failed: IndexError" in repr(r)


def test_a_run_whose_default_failed_says_why_and_no_speed_up():
    """Where the default cannot be built or run (a cuda task without a GPU, a schedule
    that raises) every trial fails: the result says why, not "inf ms" and "nanx"."""
    from jitdl.autotune import search
    from jitdl.autotune.task import Measurement
    from jitdl.schedule.config import ChoiceKnob, ConfigSpace

    class Runner:
        def measure(self, task, configs):
            return [Measurement(c, error="build: ArgumentError: no GPU") for c in configs]

    class T:
        name, work, unit, space = "t", ("flop", 1e9), "GFLOP/s", \
            ConfigSpace([ChoiceKnob("v", ("a", "b"))])

        @staticmethod
        def throughput(s):
            return 1.0 / s if s else 0.0
    r = search.search(T, 2, Runner(), tuner="grid")
    assert r.trials == 2 and r.failed == 2 and not r.improved
    assert r.speedup == 0.0
    text = repr(r)
    assert "default   failed: build: ArgumentError: no GPU" in text, text
    assert "best      -  0.0 GFLOP/s  (0.00x the default)" in text, text
    assert "inf" not in text and "nan" not in text, text
    from jitdl.autotune.background import Job     # f.tuning_status() of such a run
    status = Job(None, (), [], state="done", default_seconds=r.default_seconds,
                 best_seconds=r.seconds).summary()
    assert status["default_seconds"] is status["best_seconds"] is status["speedup"] is None


def test_a_later_compile_applies_the_config_the_side_by_side_timing_chose(
        rng, tmp_path, runner):
    """A slow config measured too fast once loses the re-timing at the end of the run; the
    records say so, and a later compile (another process's) takes the kernel chosen here,
    not the lucky trial."""
    mod, _ = _module(tmp_path, "tune_lucky", modes=("slow", "slow2", "fast"))

    class Lucky:                   # the second round measures "slow2" far too fast
        calls = 0

        def measure(self, task, configs):
            Lucky.calls += 1
            ms = runner.measure(task, configs)
            for m in ms:
                if Lucky.calls == 2 and m.config["mode"] == "slow2" and m.ok:
                    m.seconds = 1e-9
            return ms
    a, b = _inputs(rng, 64, 256, 256)
    result = mod.mm.tune(a, b, trials=3, tuner="grid", runner=Lucky(), progress=False)
    assert result.config["mode"] == "fast", result
    assert mod.mm.tuning_records(a, b)[0].config == result.config
    mod.mm.recompile()                       # forgets the config: found again by its record
    np.testing.assert_allclose(mod.mm(a, b), _ref(a, b), rtol=1e-4, atol=1e-4)
    assert mod.mm._configs[mod.mm._key((a, b))] == result.config


def test_an_unreadable_budget_is_said_when_the_function_is_made(monkeypatch):
    from jitdl.config import settings
    monkeypatch.setattr(settings, "tune_budget", "lots")
    with pytest.raises(ValueError, match="JITDL_TUNE_BUDGET: cannot read 'lots'"):
        jd.compute(lambda X: X, autotune="background")
    jd.compute(lambda X: X)                      # no autotune: the budget is not read


@jd.compute(autotune="background")
def _scaled_in_a_pool(X):
    return jd.tensor(X.shape, lambda i: X[i] * 3.0, name="Y")


def _call_in_a_pool_worker(n):
    import logging
    from jitdl.autotune import background
    said = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: said.append((record.levelno, record.getMessage()))
    logger = logging.getLogger("jitdl.tune")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    x = np.arange(n, dtype=np.float64)
    y = _scaled_in_a_pool(x)
    background.get().wait(60)
    states = [job.state for job in _scaled_in_a_pool._jobs.values()]
    return np.array_equal(y, x * 3.0), said, states


def test_background_tuning_in_a_pools_worker_runs_the_default_quietly():
    """A pool's workers are daemonic processes, which cannot start the runner's worker
    processes: each shape's job failed with the warning "daemonic processes are not
    allowed to have children". Background tuning is off there, said once at info level,
    and the default kernel runs."""
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(1) as pool:
        results = pool.map(_call_in_a_pool_worker, [8, 9, 10])
    assert all(ok for ok, _, _ in results), results
    said = [s for _, messages, _ in results for s in messages]
    assert all(level < 30 for level, _ in said), said
    assert len(said) == 1 and "daemonic" in said[0][1], said
    assert all(s == "stopped" for _, _, states in results for s in states), results


@jd.compute(autotune="foreground")
def _tripled_in_a_pool(X):
    return jd.tensor(X.shape, lambda i: X[i] * 3.0, name="Y")


def _foreground_in_a_pool_worker(n):
    import logging
    said = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = lambda record: said.append((record.levelno, record.getMessage()))
    logger = logging.getLogger("jitdl.tune")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    x = np.arange(n, dtype=np.float64)
    ok = np.array_equal(_tripled_in_a_pool(x), x * 3.0)
    try:
        _tripled_in_a_pool.tune(x, trials=2, progress=False)
        error = None
    except jd.JitdlError as e:
        error = str(e)
    return ok, said, error


def test_foreground_tuning_in_a_pools_worker_runs_the_default_quietly():
    """autotune="foreground" in a pool's worker (a daemonic process, which cannot start
    the runner's processes) logged the warning "foreground tuning ... failed:
    AssertionError: daemonic processes are not allowed to have children" for every shape
    (after a progress bar); now one info note per process and the default kernel. An
    explicit f.tune() there is an error that says why, not that AssertionError."""
    import multiprocessing
    with multiprocessing.get_context("fork").Pool(1) as pool:
        results = pool.map(_foreground_in_a_pool_worker, [8, 9, 10])
    assert all(ok for ok, _, _ in results), results
    said = [s for _, messages, _ in results for s in messages]
    assert all(level < 30 for level, _ in said), said
    assert len(said) == 1 and "daemonic" in said[0][1], said
    for _, _, error in results:
        assert error is not None and "_tripled_in_a_pool.tune(): this is a daemonic " \
            "process" in error, error
