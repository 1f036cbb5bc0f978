"""Measurement runners: candidates built in spawned processes, verified against the
default config on fresh inputs and timed; every planted failure (an exception, a crash,
a hang, in the build or in the run, a wrong kernel) costs exactly one failed trial."""
import dataclasses
import itertools
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import jitdl as jd
from jitdl import locks, pipeline
from jitdl.autotune.measure import LocalRunner, differs, fresh_inputs, get_runner, kernel_of
from jitdl.autotune.task import Task, work_of
from jitdl.runtime import engine

F32 = np.float32
_TEST_PID = os.getpid()       # travels by value: a worker sees that it is not this process

MODES = ["ok", "build_error", "crash", "hang", "wrong", "run_crash", "run_hang", "run_error"]


def make_matmul(name="mm"):
    def mm(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")
    mm.__name__ = mm.__qualname__ = name
    return jd.compute(mm)


def make_wrong():
    """A definition with matmul's signature and another result (A @ B plus B's first row)."""
    @jd.compute
    def mm(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k) + B[0, j],
                         name="C")
    return mm


def planted_schedule(s, cfg):
    """matmul's schedule with a "mode" knob; in a worker process, the build modes fail
    as they say (the run modes are planted by the runner's post-build hook)."""
    mode = cfg.choice("mode", MODES)
    C = s["C"]
    i, j = C.axis
    jo, ji = s.split(j, cfg.split("tj", j, [4, 8, 16]))
    s.vectorize(ji)
    if os.getpid() != _TEST_PID:
        if mode == "build_error":
            raise ValueError("planted build error")
        if mode == "crash":
            os.abort()
        if mode == "hang":
            time.sleep(600)


def make_task(f, args, key="test"):
    args = f._args(args, {})
    specs = f._specs(args)
    graph = f._trace(specs, args)
    target = f._target(specs)
    return Task(f.name, graph, target, f._options(), f._schedules.get(target.name),
                f._space(specs), list(args), work_of(graph), key=key)


def kernel_ir(symbol, body):
    return (f"declare void @abort()\n"
            f"define void @{symbol}(ptr %a, ptr %b, ptr %c) {{\nentry:\n{body}\n}}\n")


def make_hook(task):
    """The post-build hook planting the run modes: another definition's kernel with the
    same signature (wrong), a kernel that aborts, one that loops forever, and an
    artifact whose symbol is missing (loading it raises)."""
    w = make_wrong()
    wrong = pipeline.compile(w._trace(w._specs(task.args)), task.target, task.options)
    sym = wrong.signature.symbol
    abort_obj, _ = engine.optimize(kernel_ir(sym, "  call void @abort()\n  ret void"))
    loop_obj, _ = engine.optimize(kernel_ir(
        sym, "  br label %loop\nloop:\n  store volatile i32 0, ptr %c\n  br label %loop"))

    def hook(task, config, art):
        mode = config.get("mode")
        if mode == "wrong":
            return wrong
        if mode == "run_crash":
            return dataclasses.replace(art, obj=abort_obj)
        if mode == "run_hang":
            return dataclasses.replace(art, obj=loop_obj)
        if mode == "run_error":
            return dataclasses.replace(
                art, signature=dataclasses.replace(art.signature, symbol="jd_missing"))
        return art
    return hook


@pytest.fixture(scope="module")
def planted():
    """(task, runner) for a 48x40x56 matmul with the planted schedule."""
    f = make_matmul()
    jd.schedule(f, target="cpu")(planted_schedule)
    rng = np.random.default_rng(7)
    a = rng.uniform(-1, 1, (48, 40)).astype(F32)
    b = rng.uniform(-1, 1, (40, 56)).astype(F32)
    task = make_task(f, (a, b))
    runner = LocalRunner(n_parallel=2, timeout=4.0, repeat=3, min_repeat_ms=5,
                         _post_build=make_hook(task))
    # its processes started, whichever of the module's tests runs first (pytest-xdist
    # hands them out in any order): the tests compare the processes before and after
    assert runner.measure(task, [{"mode": "ok", "tj": 8}])[0].verified
    yield task, runner
    runner.close()


def assert_good(m, task):
    assert m.ok and m.verified and m.error is None, m
    flops = task.work[1]
    assert task.work[0] == "flop"
    assert 1e6 < flops / m.seconds < 1e13, m.seconds      # 1 MFLOP/s .. 10 TFLOP/s
    assert m.build_s > 0 and m.run_s > 0
    assert m.artifact is not None and m.artifact.config["mode"] == m.config["mode"]
    a, b = task.args
    got = kernel_of(m)([a, b])
    np.testing.assert_allclose(got, a.astype(np.float64) @ b.astype(np.float64),
                               rtol=1e-5, atol=1e-5)


def test_good_candidates_are_verified_and_timed(planted):
    task, runner = planted
    configs = [{"mode": "ok", "tj": t} for t in (4, 8, 16)]
    ms = runner.measure(task, configs)
    assert [m.config for m in ms] == configs
    for m in ms:
        assert_good(m, task)
        assert m.artifact.config["tj"] == m.config["tj"]
    pids = runner.pids()
    again = runner.measure(task, configs[:2])     # the same processes, nothing restarted
    assert all(m.ok for m in again)
    assert runner.pids() == pids
    # one "ready" per process at most (a builder still importing when the first call's
    # jobs were done reports ready during the second call; a restart would add more)
    assert len(runner.start_seconds) <= len(pids["build"]) + len(pids["timing"])


def test_a_measured_kernel_carries_the_texts_inspection_reads(planted):
    """Background tuning swaps kernel_of(m) into the dispatch table: f.lower, f.llvm_ir
    and f.asm on it read its texts (they raised KeyError during background tuning)."""
    task, runner = planted
    (m,) = runner.measure(task, [{"mode": "ok", "tj": 4}])
    k = kernel_of(m)
    assert k.texts["loop_ir"] == m.artifact.texts["loop_ir"]
    assert "define" in k.texts["llvm_ir"] and "llvm_ir_unoptimized" in k.texts


def test_a_process_killed_while_idle_is_replaced(planted):
    import signal
    task, runner = planted
    runner.measure(task, [{"mode": "ok", "tj": 4}])
    before = runner.pids()
    os.kill(before["build"][0], signal.SIGKILL)
    os.kill(before["timing"][0], signal.SIGKILL)
    time.sleep(0.2)
    ms = runner.measure(task, [{"mode": "ok", "tj": t} for t in (4, 8, 16)])
    for m in ms:
        assert_good(m, task)
    after = runner.pids()
    assert after["build"][0] != before["build"][0] and after["build"][1] == before["build"][1]
    assert after["timing"] != before["timing"]


@pytest.mark.parametrize("mode,prefix", [
    ("build_error", "build: ValueError: planted build error"),
    ("crash", "crash: the build process died (killed by SIGABRT)"),
    ("hang", "timeout: the build took more than 4 s"),
    ("wrong", "wrong output: output 0 differs at"),
    ("run_crash", "crash: the timing process died (killed by SIGABRT)"),
    ("run_hang", "timeout: the timing took more than 4 s"),
    ("run_error", "run: RuntimeError: symbol jd_missing not found"),
])
def test_a_planted_failure_costs_one_trial(planted, mode, prefix):
    task, runner = planted
    configs = [{"mode": "ok", "tj": 8}, {"mode": mode, "tj": 8}, {"mode": "ok", "tj": 16}]
    before = runner.pids()
    ms = runner.measure(task, configs)
    bad = ms[1]
    assert bad.error.startswith(prefix), bad.error
    assert bad.seconds is None and not bad.verified and bad.artifact is None
    assert_good(ms[0], task)
    assert_good(ms[2], task)
    after = runner.pids()
    died = {"crash": "build", "hang": "build", "run_crash": "timing", "run_hang": "timing"}
    for kind in ("build", "timing"):
        if died.get(mode) == kind:
            assert after[kind] != before[kind]
        else:
            assert after[kind] == before[kind]


def test_every_failure_in_one_batch(planted):
    task, runner = planted
    configs = [{"mode": m, "tj": 4} for m in MODES] + [{"mode": "ok", "tj": 16}]
    ms = runner.measure(task, configs)
    assert [m.ok for m in ms] == [True] + [False] * (len(MODES) - 1) + [True]
    assert [m.error.split(":")[0] for m in ms[1:-1]] == [
        "build", "crash", "timeout", "wrong output", "crash", "timeout", "run"]
    assert_good(ms[0], task)
    assert_good(ms[-1], task)


def test_elementwise_and_no_knobs(rng):
    @jd.compute
    def ew(X, b):
        return jd.tensor(X.shape, lambda i, j: jd.exp(X[i, j] * 0.5) + b[j], name="Y")
    x, b = rng.uniform(-2, 2, (5, 7)).astype(F32), rng.uniform(-1, 1, 7).astype(F32)
    task = make_task(ew, (x, b))
    with LocalRunner(n_parallel=1, repeat=2, min_repeat_ms=2) as runner:
        ms = runner.measure(task, [task.space.default(), task.space.default()])
        assert [m.ok and m.verified for m in ms] == [True, True]
        ref = np.exp(x.astype(np.float64) * 0.5) + b
        np.testing.assert_allclose(kernel_of(ms[1])([x, b]), ref, rtol=1e-5)
        pids = runner.pids()["build"] + runner.pids()["timing"]
    for pid in pids:                  # close() stopped and reaped them
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_integer_indices_stay_valid_on_fresh_inputs(rng):
    """A gather reads indices from data: fresh inputs keep them within the user's
    [min, max], so verification runs the kernel within bounds."""
    @jd.compute
    def gather(X, idx):
        return jd.tensor(idx.shape, lambda i: X[idx[i]] * 2.0, name="Y")
    x = rng.uniform(-1, 1, 50).astype(F32)
    idx = rng.integers(0, 50, 30).astype(np.int64)
    task = make_task(gather, (x, idx))
    with LocalRunner(n_parallel=1, repeat=2, min_repeat_ms=2) as runner:
        (m,) = runner.measure(task, [task.space.default()])
    assert m.ok and m.verified, m.error
    np.testing.assert_allclose(kernel_of(m)([x, idx]), x[idx].astype(np.float64) * 2, rtol=1e-6)


def test_fresh_inputs_are_like_the_users_but_new(rng):
    f = rng.uniform(-3, 5, (40, 30)).astype(F32)
    f[0, 0] = np.inf
    i = rng.integers(-4, 9, 1000).astype(np.int32)
    b = rng.random(64) < 0.3
    new_f, new_i, new_b, scalar = fresh_inputs([f, i, b, 2.5], seed=1)
    assert new_f.dtype == F32 and new_f.shape == f.shape and np.isfinite(new_f).all()
    assert -3 <= new_f.min() and new_f.max() <= 5 and not np.array_equal(new_f, f)
    assert new_i.dtype == np.int32 and new_i.min() == i.min() and new_i.max() == i.max()
    assert not np.array_equal(new_i, i)
    assert new_b.dtype == np.bool_ and 0 < new_b.sum() < 64
    assert scalar == 2.5


def test_a_0d_bool_array_stays_an_array_in_fresh_and_sketched_inputs():
    """rng.random(()) < 0.5 is a NumPy bool, not an array: every candidate of a
    definition with a 0-d bool parameter failed ("the reference failed: 'numpy.bool'
    object has no attribute 'ctypes'"), and a background job traced a scalar parameter
    where the call's key is an array's."""
    from jitdl.autotune.measure import Sketch
    flag = np.array(True)
    (fresh,) = fresh_inputs([flag])
    made = Sketch.of(flag).array()
    for x in (fresh, made):
        assert isinstance(x, np.ndarray) and x.shape == () and x.dtype == np.bool_, repr(x)

    @jd.compute
    def pick(X, flag):
        return jd.tensor(X.shape, lambda i: jd.where(flag[()], X[i], -X[i]), name="Y")
    with LocalRunner(n_parallel=1, timeout=20.0, repeat=1, min_repeat_ms=1) as runner:
        (m,) = runner.measure(make_task(pick, (np.ones(8, F32), flag)), [{}])
    assert m.ok and m.verified, m.error


def test_a_sketch_reads_a_large_array_through_a_sample_of_it():
    """A background job's Sketch of an array (its shape, dtype and value range) read every
    element on the caller's first call, and a GPU array was copied to the host whole for
    it; it reads a strided sample of about measure.SAMPLE elements, whose range lies
    within the array's (an index array's synthetic values stay in bounds), through the
    backend's to_host for a GPU array."""
    from jitdl.autotune import measure
    rng = np.random.default_rng(7)
    copied = []

    def to_host(a):
        copied.append(a.size)
        return np.array(a)
    for shape in [(300_000,), (700, 900), (40, 50, 60), (3, 5, 7, 11, 13), (5, 0, 7)]:
        ints = rng.integers(-50, 1000, shape, dtype=np.int32)
        for x, host in [(ints, None), (rng.standard_normal(shape).astype(F32), None),
                        (ints, to_host)]:
            copied.clear()
            sk = measure.Sketch.of(x, host)
            assert sk.shape == shape and sk.dtype == x.dtype and sk.device == (host is not None)
            if x.size:
                assert x.min() <= sk.low <= sk.high <= x.max(), (sk, x.min(), x.max())
                assert (sk.low, sk.high) == (x.min(), x.max()) or x.size > measure.SAMPLE
            if host is not None:
                assert copied and copied[0] <= 2 * measure.SAMPLE, copied
            made = sk.array(seed=1)
            assert made.shape == shape and made.dtype == x.dtype
            if x.size:
                assert sk.low <= made.min() and made.max() <= sk.high


def test_a_wrong_kernel_is_caught_when_the_user_tunes_on_constant_arrays():
    """np.zeros or np.ones as the call's arguments: fresh inputs are not constant, or a
    kernel that reads the wrong elements (or computes nothing) would match the reference."""
    for const in (np.zeros((6, 5), F32), np.full((6, 5), 2.0, F32), np.full(4, -3.0)):
        new = fresh_inputs([const], seed=1)[0]
        assert new.dtype == const.dtype and len(np.unique(new)) > 1
        assert (new >= 0).all() if const.flat[0] >= 0 else (new <= 0).all()
    # a constant near the dtype's largest value or of magnitude below one: finite values
    # of its sign (1e308 made uniform() raise OverflowError, float16 40000 gave
    # infinities, -0.5 positive values)
    for const in (np.full(8, 1e308), np.full(8, -1e308), np.full(64, 40000, np.float16),
                  np.full(64, 3e38, F32), np.full(64, -0.5, F32)):
        new = fresh_inputs([const], seed=1)[0]
        assert new.dtype == const.dtype and np.isfinite(new).all() and len(np.unique(new)) > 1
        assert (new >= 0).all() if const.flat[0] >= 0 else (new <= 0).all()
    f = make_matmul()
    jd.schedule(f, target="cpu")(planted_schedule)
    task = make_task(f, (np.zeros((48, 40), F32), np.zeros((40, 56), F32)))
    with LocalRunner(n_parallel=1, timeout=10.0, repeat=1, min_repeat_ms=1,
                     _post_build=make_hook(task)) as runner:
        ok, wrong = runner.measure(task, [{"mode": "ok", "tj": 8}, {"mode": "wrong", "tj": 8}])
    assert ok.verified, ok.error
    assert not wrong.verified and wrong.error.startswith("wrong output"), wrong


def test_arguments_spanning_more_than_the_float_range_are_tuned(rng):
    """An array holding both float64's largest and smallest values (sentinels): uniform()
    between them raised OverflowError in the timing process, which died on every
    candidate (a traceback on the user's terminal for each, every trial a "crash")."""
    wide = rng.standard_normal(300)
    wide[3], wide[7] = np.finfo(np.float64).max, np.finfo(np.float64).min
    (new,) = fresh_inputs([wide], seed=1)
    assert new.dtype == wide.dtype and np.isfinite(new).all() and len(np.unique(new)) > 1
    assert (new >= wide.min()).all() and (new <= wide.max()).all()

    @jd.compute
    def twice(x):
        return jd.tensor(x.shape, lambda i: x[i] * 0.5 + 1.0, name="Y")
    task = make_task(twice, (wide,))
    with LocalRunner(n_parallel=1, repeat=1, min_repeat_ms=1) as runner:
        (m,) = runner.measure(task, [task.space.default()])
    assert m.ok and m.verified, m.error
    np.testing.assert_allclose(kernel_of(m)([wide]), wide * 0.5 + 1.0, rtol=1e-12)


def test_differs_by_dtype(rng):
    r32 = rng.uniform(-10, 10, (20, 20)).astype(F32)
    assert differs(r32, r32 * (1 + 2e-6)) is None            # reordered sums
    bad = r32.copy()
    bad[3, 4] += 0.1
    assert "output 0 differs at [3, 4] (1 of 400 elements)" in differs(r32, bad)
    r64 = r32.astype(np.float64)
    assert differs(r64, r64 * (1 + 1e-12)) is None
    assert differs(r64, r64 * (1 + 1e-6)) is not None
    ints = rng.integers(0, 100, 50)
    assert differs(ints, ints + (np.arange(50) == 7)) is not None
    nan = np.array([1.0, np.nan], F32)
    assert differs(nan, nan.copy()) is None
    assert "float64[2]" in differs(nan, nan.astype(np.float64))
    assert differs((r32, ints), (r32, ints)) is None


def test_get_runner():
    r = LocalRunner(n_parallel=1)
    assert get_runner(r) is r
    fresh = get_runner()
    assert isinstance(fresh, LocalRunner)
    fresh.close()


def test_the_default_builders_are_one_per_core_this_process_may_use(monkeypatch):
    """LocalRunner() started os.cpu_count() build processes: under taskset or a
    container's CPU set, one per core of the machine (64 processes importing jitdl for
    2 usable cores). It starts one per core of the process's affinity."""
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no CPU affinity here")
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    runner = LocalRunner()
    try:
        assert runner.n_parallel == 2
        assert LocalRunner(n_parallel=5).n_parallel == 5
    finally:
        runner.close()


def test_cores_follow_a_cgroup_cpu_quota(tmp_path, monkeypatch):
    """config.cores() counted the affinity mask only: under docker --cpus=2 on a 64-core
    host, 64 kernel threads and 64 build processes shared two CPUs' worth of time. The
    quota of the process's cgroup, or of any cgroup above it, caps it (v2 cpu.max, v1
    cfs_quota_us/cfs_period_us; rounded up; 'max' or -1 is none)."""
    from jitdl import config

    def write(path, text):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    v2 = tmp_path / "v2"
    write(v2 / "kube" / "pod" / "cpu.max", "max 100000\n")
    write(v2 / "kube" / "cpu.max", "250000 100000\n")      # 2.5 CPUs above the pod
    write(tmp_path / "v2.cg", "0::/kube/pod\n")
    assert config.cgroup_cpus(str(v2), str(tmp_path / "v2.cg")) == 3
    write(v2 / "kube" / "pod" / "cpu.max", "50000 100000\n")  # half a CPU: at least 1
    assert config.cgroup_cpus(str(v2), str(tmp_path / "v2.cg")) == 1
    write(v2 / "kube" / "pod" / "cpu.max", "max 100000\n")
    write(v2 / "kube" / "cpu.max", "max 100000\n")
    assert config.cgroup_cpus(str(v2), str(tmp_path / "v2.cg")) is None

    v1 = tmp_path / "v1"
    write(v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "200000\n")
    write(v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_period_us", "100000\n")
    write(tmp_path / "v1.cg", "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    assert config.cgroup_cpus(str(v1), str(tmp_path / "v1.cg")) == 2
    write(v1 / "cpu,cpuacct" / "docker" / "abc" / "cpu.cfs_quota_us", "-1\n")
    assert config.cgroup_cpus(str(v1), str(tmp_path / "v1.cg")) is None
    assert config.cgroup_cpus(str(v1), str(tmp_path / "absent")) is None

    if not hasattr(os, "sched_getaffinity"):
        return
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(config, "cgroup_cpus", lambda: 2)
    assert config.cores() == 2
    monkeypatch.setattr(config, "cgroup_cpus", lambda: None)
    assert config.cores() == 64
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(config, "cgroup_cpus", lambda: 8)
    assert config.cores() == 2


def test_workers_stop_at_exit_without_close(tmp_path):
    """A runner never closed: the interpreter exits promptly and no worker outlives it."""
    script = tmp_path / "user.py"
    script.write_text(textwrap.dedent(f"""
        import numpy as np
        import jitdl as jd
        from jitdl.autotune.measure import LocalRunner
        from jitdl.autotune.task import Task, work_of

        @jd.compute
        def scale(X):
            return jd.tensor(X.shape, lambda i: X[i] * 3.0, name="Y")

        def user_schedule(s, cfg):           # from __main__: pickled by value
            (i,) = s["Y"].axis
            io, ii = s.split(i, cfg.split("t", i, [4, 8]))
            s.vectorize(ii)

        if __name__ == "__main__":
            jd.schedule(scale, target="cpu")(user_schedule)
            x = np.random.default_rng(0).uniform(-1, 1, 100).astype(np.float32)
            specs = scale._specs((x,))
            graph = scale._trace(specs)
            target = scale._target(specs)
            task = Task("scale", graph, target, scale._options(), user_schedule,
                        scale._space(specs), [x], work_of(graph))
            r = LocalRunner(n_parallel=1, repeat=2, min_repeat_ms=2)
            ms = r.measure(task, [{{"t": 4}}, {{"t": 8}}])
            print([m.ok for m in ms], [m.error for m in ms])
            print(*(r.pids()["build"] + r.pids()["timing"]))
    """))
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("[True, True]"), out.stdout
    assert time.perf_counter() - t0 < 60
    time.sleep(0.5)
    for pid in map(int, lines[1].split()):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_whose_parent_is_gone_exits_quietly(tmp_path):
    """A worker that starts after its parent stopped waiting (the parent exited while it
    imported jitdl) printed BrokenPipeError's traceback on the user's terminal when it
    said it was ready; it exits quietly now (seen once in the north-star check)."""
    script = tmp_path / "gone.py"
    script.write_text(textwrap.dedent("""
        import multiprocessing, sys
        from jitdl.autotune.measure import _serve

        if __name__ == "__main__":
            ctx = multiprocessing.get_context("spawn")
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(child,))
            p.start()
            child.close()
            parent.close()           # gone before the worker says it is ready
            p.join(120)
            print("exitcode", p.exitcode)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=180)
    assert out.returncode == 0, out.stderr
    assert "exitcode 0" in out.stdout, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "BrokenPipe" not in out.stderr, out.stderr


@pytest.fixture
def environ_kept():
    """os.environ as it was before the test: distributed sets OMP_NUM_THREADS and the
    like for its workers in this process, and a later test's child processes (which
    read their thread count from it) would tune and look up records for another one."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.slow
def test_dask_runner_on_a_local_cluster(environ_kept):
    """The same stages on dask workers: builds spread, timings on one worker; a worker
    killed by a crashing build is a "crash", a hung build a "timeout" (its worker
    restarted); a wrong kernel fails verification; the good candidates still succeed."""
    distributed = pytest.importorskip("distributed")
    import dask
    from jitdl.autotune.measure import DaskRunner

    f = make_matmul()
    jd.schedule(f, target="cpu")(planted_schedule)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, (32, 24)).astype(F32)
    b = rng.uniform(-1, 1, (24, 40)).astype(F32)
    task = make_task(f, (a, b))
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1,
                                      dashboard_address=None) as cluster, \
                distributed.Client(cluster) as client:
            runner = get_runner(client)
            assert isinstance(runner, DaskRunner)
            runner = DaskRunner(client, timeout=6.0, repeat=2, min_repeat_ms=5,
                                _post_build=make_hook(task))
            modes = ["ok", "crash", "ok", "wrong", "hang", "ok", "build_error", "ok"]
            ms = runner.measure(task, [{"mode": m, "tj": 8} for m in modes])
            errors = [m.error.split(":")[0] if m.error else None for m in ms]
            assert errors == [None, "crash", None, "wrong output", "timeout", None, "build",
                              None], [m.error for m in ms]
            assert ms[1].error == "crash: the dask worker died in the build (KilledWorker)"
            for m in ms:
                if m.config["mode"] == "ok":
                    assert_good(m, task)
            again = runner.measure(task, [{"mode": "ok", "tj": 4}])
            assert_good(again[0], task)



def test_a_dask_scheduler_address_that_does_not_connect_is_an_argument_error():
    """DaskRunner(address) (and f.tune(runner=address)) let distributed's own error
    through, far from the user's line (OSError "Timed out trying to connect", ValueError
    "unknown address scheme"): an ArgumentError now names the address and the line."""
    pytest.importorskip("distributed")
    import dask
    from jitdl.autotune.measure import DaskRunner
    from jitdl.errors import ArgumentError
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        for address, why in (("tcp://127.0.0.1:1", "OSError: Timed out trying to connect"),
                             ("nonsense://x", "ValueError: unknown address scheme")):
            with pytest.raises(ArgumentError) as e:
                DaskRunner(address)
            assert str(e.value.message).startswith(
                f"jd.tune.DaskRunner({address!r}): cannot connect to a dask scheduler "
                f"there: {why}"), e.value.message
            assert e.value.loc is not None and e.value.loc.filename == __file__


def test_a_dask_measure_past_its_deadline_cancels_what_is_in_flight():
    """DaskRunner.measure had no deadline: a round in flight at tune(timeout=)'s end ran
    to its end. Now the jobs in flight at the deadline are cancelled and no more are
    submitted, all "stopped: ..." as with a LocalRunner (a fake client whose jobs never
    finish: dask.distributed need not be installed)."""
    import types
    from jitdl.autotune.measure import DaskRunner

    class Future:
        def __init__(self, key):
            self.key, self.cancelled = key, False

        def cancel(self):
            self.cancelled = True

    class Client:
        def __init__(self):
            self.futures, self.restarts = [], []

        def scheduler_info(self):
            return {"workers": {"tcp://w1": {"nanny": "tcp://n1"},
                                "tcp://w2": {"nanny": "tcp://n2"}}}

        def submit(self, fn, *args, **kw):
            self.futures.append(Future(f"job-{len(self.futures)}"))
            return self.futures[-1]

        def processing(self):       # one build running on each worker
            return {f"tcp://w{n + 1}": [f.key] for n, f in enumerate(self.futures)}

        def restart_workers(self, workers):
            self.restarts.append(list(workers))

    def wait(futures, return_when, timeout):      # nothing ever finishes
        time.sleep(timeout)
        raise TimeoutError

    runner = DaskRunner.__new__(DaskRunner)
    runner._distributed = types.SimpleNamespace(wait=wait)
    runner.client = Client()
    runner.timeout = runner.build_timeout = 60.0
    runner.repeat, runner.min_repeat_ms, runner.post_build = 1, 1.0, None
    runner._lock = locks.Lock()
    runner._task = runner._key = runner._blob = runner._timed_on = None
    runner._ids = itertools.count(1)
    runner._ship = lambda task: "key"
    t = time.monotonic()
    ms = runner.measure(None, [{"tj": 8}, {"tj": 4}, {"tj": 2}],
                        deadline=time.monotonic() + 0.5)
    took = time.monotonic() - t
    assert [m.error for m in ms] == ["stopped: the tuning deadline passed"] * 3, ms
    assert len(runner.client.futures) == 2        # two workers: the third never submitted
    assert all(f.cancelled for f in runner.client.futures)
    assert took < 30.0, took                       # (not the 60 s build timeout)


def test_a_dask_build_cut_at_the_deadline_restarts_its_workers():
    """A build cancelled at the deadline ran on in its dask worker's thread (dask cannot
    stop one): the next measure's candidate queued behind it there failed as "timeout:
    the build took more than 30 s". The workers holding cut builds are restarted now,
    in one call (one by one, each restart waits for the last), and the timing worker's
    reference is built again there (it had only the timing's timeout for it)."""
    import types
    from jitdl.autotune.measure import DaskRunner

    class Future:
        def __init__(self, key):
            self.key, self.cancelled = key, False

        def cancel(self):
            self.cancelled = True

    class Client:
        def __init__(self):
            self.futures, self.restarts = [], []

        def scheduler_info(self):
            return {"workers": {"tcp://w1": {"nanny": "tcp://n1"},
                                "tcp://w2": {"nanny": "tcp://n2"},
                                "tcp://w3": {"nanny": "tcp://n3"}}}

        def submit(self, fn, *args, **kw):
            self.futures.append(Future(f"job-{len(self.futures)}"))
            return self.futures[-1]

        def processing(self):       # builds on w1 and w2; w3 idle, busy with another
            return {"tcp://w1": [self.futures[0].key], "tcp://w2": [self.futures[1].key],
                    "tcp://w3": ["other"]}

        def restart_workers(self, workers):
            self.restarts.append(list(workers))

    def wait(futures, return_when, timeout):      # nothing ever finishes
        time.sleep(timeout)
        raise TimeoutError

    runner = DaskRunner.__new__(DaskRunner)
    runner._distributed = types.SimpleNamespace(wait=wait)
    runner.client = Client()
    runner.timeout = runner.build_timeout = 60.0
    runner._timed_on = ("key", "tcp://w1")
    results = runner._run([(None, ["key", None, {}])] * 2, 2, "build",
                          cut=time.monotonic() + 0.2)
    assert results == [("error", "stopped: the tuning deadline passed")] * 2
    assert all(f.cancelled for f in runner.client.futures)
    assert runner.client.restarts == [["tcp://w1", "tcp://w2"]]
    assert runner._timed_on is None

def test_a_dask_timing_cut_at_the_deadline_restarts_its_worker():
    """A timing job cancelled at the deadline ran on in its dask worker's thread (dask
    cannot stop one), its kernel on every core, beside the next job timed on that
    worker, the closing re-timing's: its worker is restarted now, as for a timeout."""
    import types
    from jitdl.autotune.measure import DaskRunner

    class Future:
        def __init__(self, key):
            self.key, self.cancelled = key, False

        def cancel(self):
            self.cancelled = True

    class Client:
        def __init__(self):
            self.futures, self.restarted = [], []

        def scheduler_info(self):
            return {"workers": {"tcp://w1": {"nanny": "tcp://n1"},
                                "tcp://w2": {"nanny": "tcp://n2"}}}

        def wait_for_workers(self, n, timeout=None):
            pass

        def submit(self, fn, *args, **kw):
            self.futures.append(Future(f"job-{len(self.futures)}"))
            return self.futures[-1]

        def processing(self):       # the timing job is running on the first worker
            return {"tcp://w1": [f.key for f in self.futures], "tcp://w2": []}

        def restart_workers(self, workers):
            self.restarted += workers

    def wait(futures, return_when, timeout):      # nothing ever finishes
        time.sleep(timeout)
        raise TimeoutError

    runner = DaskRunner.__new__(DaskRunner)
    runner._distributed = types.SimpleNamespace(wait=wait)
    runner.client = Client()
    runner.timeout = runner.build_timeout = 60.0
    runner._timed_on = None
    results = runner._run([(None, ["key", None, {}])], 1, "run",
                          cut=time.monotonic() + 0.2)
    assert results == [("error", "stopped: the tuning deadline passed")]
    assert runner.client.futures[0].cancelled and runner.client.restarted == ["tcp://w1"]
    assert runner._timed_on is None


def test_a_dask_cut_leaves_a_worker_without_a_nanny_running():
    """restart_workers of holders one of which has no nanny (a LocalCluster of threads,
    dask-worker --no-nanny, a shared cluster's worker) raises ValueError and restarts
    none: the holder with a nanny stayed hung too (older distributed removed the other
    for good). Only the holders a nanny restarts are restarted; the others keep their
    timing's reference."""
    import types
    from jitdl.autotune.measure import DaskRunner

    class Future:
        def __init__(self, key):
            self.key, self.cancelled = key, False

        def cancel(self):
            self.cancelled = True

    class Client:
        def __init__(self, nanny):
            self.futures, self.restarts, self.nanny = [], [], nanny

        def scheduler_info(self):
            return {"workers": {"tcp://w1": {"nanny": None},
                                "tcp://w2": {"nanny": self.nanny}}}

        def submit(self, fn, *args, **kw):
            self.futures.append(Future(f"job-{len(self.futures)}"))
            return self.futures[-1]

        def processing(self):
            return {"tcp://w1": [self.futures[0].key], "tcp://w2": [self.futures[1].key]}

        def restart_workers(self, workers):      # (as distributed's Client does)
            info = self.scheduler_info()["workers"]
            if any(not info[w]["nanny"] for w in workers):
                raise ValueError("Restarting workers requires a nanny to be used")
            self.restarts.append(list(workers))

    def wait(futures, return_when, timeout):      # nothing ever finishes
        time.sleep(timeout)
        raise TimeoutError

    for nanny, restarts in [("tcp://n2", [["tcp://w2"]]), (None, [])]:
        runner = DaskRunner.__new__(DaskRunner)
        runner._distributed = types.SimpleNamespace(wait=wait)
        runner.client = Client(nanny)
        runner.timeout = runner.build_timeout = 60.0
        runner._timed_on = ("key", "tcp://w1")
        results = runner._run([(None, ["key", None, {}])] * 2, 2, "build",
                              cut=time.monotonic() + 0.2)
        assert results == [("error", "stopped: the tuning deadline passed")] * 2
        assert all(f.cancelled for f in runner.client.futures)
        assert runner.client.restarts == restarts
        assert runner._timed_on == ("key", "tcp://w1")


def test_a_dask_timing_with_no_worker_left_fails_instead_of_waiting_for_ever():
    """A timing job waited for a worker with client.wait_for_workers(1) and no timeout: a
    cluster whose workers had all died (no nanny to restart them) hung measure() for
    ever, past tune(timeout=)'s deadline too. It waits up to the timing's timeout (not
    past the deadline): the timing jobs fail as a "crash", or as "stopped" at the
    deadline, all at once."""
    import types
    from jitdl.autotune.measure import DaskRunner

    class Client:
        def __init__(self):
            self.waits, self.submitted = [], 0

        def scheduler_info(self):
            return {"workers": {}}

        def wait_for_workers(self, n, timeout=None):
            if timeout is None:
                raise AssertionError("waits for ever: no worker will join")
            self.waits.append(timeout)
            time.sleep(timeout)
            raise TimeoutError(f"only 0 of {n} workers after {timeout} s")

        def submit(self, fn, *args, **kw):
            self.submitted += 1

    runner = DaskRunner.__new__(DaskRunner)
    runner._distributed = types.SimpleNamespace(TimeoutError=TimeoutError)
    runner.client = Client()
    runner.timeout, runner.build_timeout = 0.2, 60.0
    runner._timed_on = None
    results = runner._run([(None, ["key", None, {}])] * 3, 1, "run")
    assert results == [("error", "crash: no dask worker to time on (none joined in "
                                 "0.2 s)")] * 3
    assert runner.client.waits == [0.2] and runner.client.submitted == 0
    runner.timeout = 60.0
    results = runner._run([(None, ["key", None, {}])] * 2, 1, "run",
                          cut=time.monotonic() + 0.2)
    assert results == [("error", "stopped: the tuning deadline passed")] * 2
    assert runner.client.waits[1] <= 0.2 and runner.client.submitted == 0
    # the builds (measure()'s width 0) waited their build_timeout each, one after the
    # other, for a worker: they wait once, and fail together
    runner.timeout, runner.build_timeout = 60.0, 0.2
    results = runner._run([(None, ["key", None, {}])] * 3, 0, "build")
    assert results == [("error", "crash: no dask worker to build on (none joined in "
                                 "0.2 s)")] * 3
    assert runner.client.waits[2] == 0.2 and runner.client.submitted == 0
    runner.build_timeout = 60.0
    t0 = time.monotonic()
    results = runner._run([(None, ["key", None, {}])] * 2, 0, "build",
                          cut=time.monotonic() + 0.2)
    assert results == [("error", "stopped: the tuning deadline passed")] * 2
    assert time.monotonic() - t0 < 5.0 and runner.client.submitted == 0


def _take(X, idx):
    return jd.tensor(idx.shape, lambda i: X[idx[i]] * 2.0, name="Y")


def _take_seven(X, idx):          # right only where every index is 7
    return jd.tensor(idx.shape, lambda i: X[idx[i] * 0 + 7] * 2.0, name="Y")


def _shifted(X, idx):             # in range only where every index is 7 (X has 1 element)
    return jd.tensor(idx.shape, lambda i: X[idx[i] - 7] * 2.0, name="Y")


def _mode_schedule(s, cfg):
    cfg.choice("mode", ["ok", "wrong"])


def test_a_wrong_kernel_is_caught_when_an_integer_argument_is_constant():
    """An int array of one value (indices all 7) stayed constant in the inputs that check
    candidates against the default, so a kernel reading X[7] where it should read
    X[idx[i]] passed as verified. A constant int array now varies from its value to zero
    (where an index stays in range if the value was); where the reference fails on that
    (the value alone is in range), it is checked as given."""
    (new,) = fresh_inputs([np.full(64, 7, np.int32)], seed=1)
    assert new.dtype == np.int32 and new.min() == 0 and new.max() == 7
    for const, lo, hi in ((np.zeros(64, np.uint8), 0, 1), (np.full(64, -3), -3, 0)):
        (new,) = fresh_inputs([const], seed=1)
        assert new.dtype == const.dtype and new.min() == lo and new.max() == hi
    (same,) = fresh_inputs([np.full(64, 7, np.int32)], seed=1, widen=False)
    assert (same == 7).all()

    take, seven, shifted = (jd.compute(f) for f in (_take, _take_seven, _shifted))
    jd.schedule(take, target="cpu")(_mode_schedule)
    jd.schedule(shifted, target="cpu")(_mode_schedule)
    x = np.arange(10, dtype=F32)
    idx = np.full(30, 7, np.int64)
    task = make_task(take, (x, idx))
    wrong = pipeline.compile(seven._trace(seven._specs(task.args)), task.target,
                             task.options)

    def hook(task, config, art):
        return wrong if config.get("mode") == "wrong" else art
    shifted_task = make_task(shifted, (np.ones(1, F32), idx), key="shifted")
    with LocalRunner(n_parallel=1, timeout=10.0, repeat=1, min_repeat_ms=1,
                     _post_build=hook) as runner:
        ok, bad = runner.measure(task, [{"mode": "ok"}, {"mode": "wrong"}])
        (only,) = runner.measure(shifted_task, [{"mode": "ok"}])
    assert ok.verified, ok.error
    assert not bad.verified and bad.error.startswith("wrong output"), bad
    assert only.verified, only.error


def test_a_definition_whose_arrays_keep_an_index_in_range_together_is_verified():
    """X[idx[i] + off[i]] with idx + off in range only as the user's arrays pair them: the
    reference failed on fresh inputs (each array drawn on its own), so did every
    candidate ("run: the reference (the default config) failed: IndexError"), and such a
    definition could not be tuned at all. The timing process now checks on the call's
    own integer arrays (and fresh floats, so that a wrong candidate still shows) where
    the reference fails on fresh ones."""
    @jd.compute
    def gather(X, idx, off):
        (n,) = idx.shape
        return jd.tensor((n, X.shape[1]), lambda i, j: X[idx[i] + off[i], j] * 2.0,
                         name="Y")
    x = np.arange(16, dtype=F32).reshape(8, 2)
    idx = np.array([0, 5, 2, 7] * 4, np.int64)
    off = np.array([2, 0, 1, 0] * 4, np.int64)             # idx + off <= 7
    task = make_task(gather, (x, idx, off))
    with LocalRunner(n_parallel=1, timeout=20.0, repeat=1, min_repeat_ms=1) as runner:
        (m,) = runner.measure(task, [task.space.default()])
    assert m.ok and m.verified, m.error
    from jitdl.autotune.measure import _Bench
    bench = _Bench(task)             # the call's integer arrays, floats still fresh ones
    assert bench.error is None, bench.error
    got_x, got_idx, got_off = bench.inputs
    assert np.array_equal(got_idx, idx) and np.array_equal(got_off, off)
    assert got_x.shape == x.shape and not np.array_equal(got_x, x)


def test_a_measure_past_its_deadline_cancels_what_is_in_flight():
    """LocalRunner.measure(deadline=): a candidate still building at the deadline (here
    one that hangs, under a 60 s timeout) is cancelled, its process replaced, and the
    ones not started are not: all fail as "stopped: ..." (no trials). tune(timeout=6)
    took 14 s: the round in flight ran to its end."""
    f = make_matmul()
    jd.schedule(f, target="cpu")(planted_schedule)
    a = np.ones((16, 8), F32)
    b = np.ones((8, 16), F32)
    task = make_task(f, (a, b))
    with LocalRunner(n_parallel=1, timeout=60.0, repeat=1, min_repeat_ms=1) as runner:
        (first,) = runner.measure(task, [{"mode": "ok", "tj": 8}])   # processes ready
        assert first.verified, first.error
        t = time.monotonic()
        hung, later = runner.measure(task, [{"mode": "hang", "tj": 8}, {"mode": "ok",
                                                                          "tj": 4}],
                                     deadline=time.monotonic() + 2.0)
        took = time.monotonic() - t
        (again,) = runner.measure(task, [{"mode": "ok", "tj": 4}])
    assert hung.error == later.error == "stopped: the tuning deadline passed", (hung, later)
    assert took < 30.0, took                   # (not the 60 s timeout of the hang)
    assert again.verified, again.error


def test_the_search_gives_every_measure_the_deadline_and_starts_none_past_it():
    """search(timeout=) gave its runner no deadline: the round in flight at the timeout
    and the closing side-by-side re-timing ran past it. Every measure() now gets a
    deadline no later than the timeout's end, the rounds end early enough to leave the
    re-timing its time, and no measure() starts after the end."""
    from jitdl.autotune import search
    from jitdl.autotune.task import Measurement
    f = make_matmul()
    jd.schedule(f, target="cpu")(planted_schedule)
    task = make_task(f, (np.ones((16, 8), F32), np.ones((8, 16), F32)))

    class Clocked:                    # each config takes 0.3 s; none runs past a deadline
        calls = []

        def measure(self, task, configs, deadline=None):
            self.calls.append((time.monotonic(), deadline, len(configs)))
            out = []
            for c in configs:
                if deadline is not None and time.monotonic() + 0.3 > deadline:
                    out.append(Measurement(c, None, "stopped: the tuning deadline passed"))
                    continue
                time.sleep(0.3)
                out.append(Measurement(c, 1e-3 / (1 + c["tj"]) + 1e-4 * len(c["mode"]),
                                       verified=True))
            return out
    runner = Clocked()
    t0 = time.monotonic()
    result = search.search(task, None, runner, "random", timeout=3.0)
    end = t0 + 3.0 + 0.1               # (search() read its clock just after t0)
    assert result.stopped == "timeout" and result.confirmed, result
    assert all(deadline is not None and deadline <= end
               for _, deadline, _ in runner.calls), runner.calls
    assert all(started < end for started, _, _ in runner.calls), (t0, runner.calls)
    assert all(m.error is None for m in result.measurements)    # cut ones are no trials
    assert result.elapsed < 3.0 + 5.0, result.elapsed
    # the search's rounds (their deadline is the re-timing's less its reserve) are sized
    # to what fits before it at the rate measured so far (a round cut at its end measured
    # nothing: it is built whole before it is timed); one config always goes
    last = max(deadline for _, deadline, _ in runner.calls)
    rounds = [(t, d, n) for t, d, n in runner.calls[1:] if d < last]
    assert rounds and all(n == 1 or n * 0.3 <= d - t for t, d, n in rounds), runner.calls


def test_a_tuner_reused_without_a_timeout_has_no_deadline_left():
    """A tuner object passed to a run with a timeout kept the deadline that run gave it;
    reused for a run without one, its model's search stopped at once (the deadline long
    past) and proposed unsearched configs. Each round sets it: None without a timeout."""
    from jitdl.autotune import search, tuner as tuners
    from jitdl.autotune.task import Measurement
    f = make_matmul()
    jd.schedule(f, target="cpu")(planted_schedule)
    task = make_task(f, (np.ones((16, 8), F32), np.ones((8, 16), F32)))

    class Seen(tuners.RandomTuner):
        deadlines = []

        def next_batch(self, n):
            self.deadlines.append(self.deadline)
            return super().next_batch(n)

    class Instant:
        def measure(self, task, configs, deadline=None):
            return [Measurement(c, 1e-3 / (1 + c["tj"]) + 1e-4 * len(c["mode"]),
                                verified=True) for c in configs]
    tu = Seen(task.space, 0)
    search.search(task, 3, Instant(), tu, timeout=60.0)
    assert Seen.deadlines and all(d is not None for d in Seen.deadlines), Seen.deadlines
    Seen.deadlines.clear()
    search.search(task, 6, Instant(), tu)      # (the space holds more than 9)
    assert Seen.deadlines and all(d is None for d in Seen.deadlines), Seen.deadlines
