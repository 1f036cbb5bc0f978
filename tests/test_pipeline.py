"""The compile pipeline and what it stands on: stable names, immutable graphs, typed steps,
config spaces, static arguments, targets.

The pipeline is pure: it compiles a traced graph with a schedule for a target, touching no
disk and no Function state, so it runs in a spawned worker from cloudpickled inputs.
"""
import enum
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitdl as jd
from jitdl import pipeline
from jitdl.capture.trace import capture, trace
from jitdl.runtime import engine
from jitdl.runtime.kernel import Kernel
from jitdl.schedule import steps as S
from jitdl.schedule.schedule import Schedule
from _check import check

HERE = os.path.dirname(os.path.abspath(__file__))


def graph_of(pyfunc, *args):
    """The traced graph of a plain Python definition for these arguments."""
    specs = [("array", a.shape, str(a.dtype)) for a in args]
    names = list(pyfunc.__code__.co_varnames[:pyfunc.__code__.co_argcount])
    return trace(capture(pyfunc), specs, names)


def run_artifact(art, *args):
    k = Kernel(art.signature, engine.Loaded(art.obj, art.signature.symbol))
    return k(args)


# ---------------------------------------------------------------------------------------
# stable names: the same loop IR in any process, whatever ran before
# ---------------------------------------------------------------------------------------

_DEFS = textwrap.dedent('''
    import numpy as np
    import jitdl as jd

    @jd.compute
    def other(A):                       # unnamed reduce axes, traced first in one child
        (n, m) = A.shape
        k = jd.reduce_axis(m)
        return jd.tensor((n,), lambda i: jd.max(A[i, k], axis=k))

    @jd.compute
    def target(A, B):
        (M, K), (_, N) = A.shape, B.shape
        kk = [jd.reduce_axis(K)]        # not bound to a name: jitdl names it
        C = jd.tensor((M, N), lambda i, j: jd.sum(A[i, kk[0]] * B[kk[0], j], axis=kk[0]))
        return jd.tensor((M, N), lambda i, j: jd.max(C[i, j], 0.0))

    @jd.compute
    def softmax(X):
        n, m = X.shape
        mx[i] = max(X[i, k] for k in range(m))
        e[i, j] = exp(X[i, j] - mx[i])
        s[i] = sum(e[i, k] for k in range(m))
        Y[i, j] = e[i, j] / s[i]
        return Y
''')


def _lower_in_child(tmp_path, history):
    script = tmp_path / f"child_{history}.py"
    script.write_text(_DEFS + textwrap.dedent(f'''
        import json, sys
        rng = np.random.default_rng(0)
        a = rng.random((24, 40), dtype=np.float32)
        b = rng.random((40, 56), dtype=np.float32)
        if {history!r} == "busy":
            for _ in range(3):
                other(a)
                jd.reduce_axis(7)
            other.lower(a.T.copy())
        out = {{"target": str(target.lower(a, b)), "softmax": str(softmax.lower(a)),
               "steps": target.schedule_of(a, b).steps}}
        sys.stdout.write(json.dumps(out))
    '''))
    env = dict(os.environ, JITDL_CACHE="0", PYTHONHASHSEED=str(len(history)))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_loop_ir_is_the_same_in_processes_with_different_histories(tmp_path):
    quiet = _lower_in_child(tmp_path, "quiet")
    busy = _lower_in_child(tmp_path, "busy")
    assert quiet["target"] == busy["target"]
    assert quiet["softmax"] == busy["softmax"]
    assert quiet["steps"] == busy["steps"]
    assert "k0" in quiet["target"]               # the unnamed axis: first of its trace


def test_unnamed_reduce_axes_are_numbered_per_trace(rng):
    @jd.compute
    def two(A):
        (n, m) = A.shape
        ks = [jd.reduce_axis(m), jd.reduce_axis(m)]       # not bound to a name
        s1 = jd.tensor((n,), lambda i: jd.sum(A[i, ks[0]], axis=ks[0]))
        return jd.tensor((n,), lambda i: s1[i] + jd.max(A[i, ks[1]], axis=ks[1]))

    @jd.compute
    def another(A):
        return jd.tensor((3,), lambda i: jd.sum(A[i, ks[0]], axis=ks[0])) \
            if (ks := [jd.reduce_axis(4)]) else None
    a = rng.standard_normal((5, 7))
    first = str(two.lower(a))
    assert "k0" in first and "k1" in first
    another(rng.standard_normal((3, 4)))         # another trace, and an axis outside any
    outside = jd.reduce_axis(3)
    two.recompile()
    assert str(two.lower(a)) == first
    assert outside.name.startswith("k_L")        # named after its line, not a counter
    check(two, (a,), a.sum(1) + a.max(1), np.float64)


# ---------------------------------------------------------------------------------------
# immutable graphs: one trace, any number of schedules
# ---------------------------------------------------------------------------------------

def _matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


def _stage_texts(graph):
    return [(t.name, str(t.op.body)) for t in graph.stages]


@pytest.mark.parametrize("rewrite", ["pack", "cache_write", "rfactor", "cache_read"])
def test_graph_rewriting_steps_leave_the_trace_alone(rng, rewrite):
    a, b = rng.standard_normal((13, 17)), rng.standard_normal((17, 19))
    graph = graph_of(_matmul, a, b)
    before = _stage_texts(graph)

    def sched(s, cfg):
        C = s["C"]
        if rewrite == "pack":
            s.pack("B", C, 1, 8)
        elif rewrite == "cache_write":
            s.cache_write(C)
        elif rewrite == "rfactor":
            s.rfactor(C, C.reduce_axis[0], 4)
        else:
            s.cache_read("A", [C])
    art = pipeline.compile(graph, "cpu", schedule_fn=sched)
    assert _stage_texts(graph) == before
    np.testing.assert_allclose(run_artifact(art, a, b), a @ b, rtol=1e-12)
    # the same trace again, with no schedule: the plain loop nest
    plain = pipeline.compile(graph, "cpu", steps=[])
    np.testing.assert_allclose(run_artifact(plain, a, b), a @ b, rtol=1e-12)
    assert "_pack" not in plain.texts["loop_ir"] and "_rf" not in plain.texts["loop_ir"]
    # and the rewritten schedule replays from its JSON steps on the same trace
    again = pipeline.compile(graph, "cpu", steps=json.loads(json.dumps(art.steps)))
    assert again.texts["loop_ir"] == art.texts["loop_ir"]


# ---------------------------------------------------------------------------------------
# typed steps
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("step", [
    S.Split("C", "i", 4), S.Fuse("C", "i", "j"), S.Reorder("C", ("k", "i", "j")),
    S.Vectorize("C", "j"), S.Parallel("C", "i"), S.Unroll("C", "j.i"),
    S.ComputeInline("T"), S.ComputeRoot("T"), S.ComputeAt("T", "C", "i", "C", False),
    S.Pack("C", "B", 1, 8), S.CacheRead("C", ("C",), "A"), S.CacheWrite("C"),
    S.RFactor("C", "k", 4)])
def test_steps_round_trip_through_json(step):
    text = json.dumps(step.to_json())
    assert S.from_json(json.loads(text)) == step


def test_bad_steps_are_refused():
    with pytest.raises(jd.ScheduleError, match="unknown schedule step 'spilt'"):
        S.from_json({"op": "spilt", "stage": "C", "axis": "i", "factor": 2})
    with pytest.raises(jd.ScheduleError, match="takes"):
        S.from_json({"op": "split", "stage": "C", "axis": "i"})
    graph = graph_of(_matmul, np.ones((4, 4)), np.ones((4, 4)))
    with pytest.raises(jd.ScheduleError, match="not a current loop"):
        Schedule(graph).replay([{"op": "split", "stage": "C", "axis": "q", "factor": 2}])
    with pytest.raises(jd.ScheduleError, match="reduction loop"):
        Schedule(graph).replay([S.Vectorize("C", "k")])


# ---------------------------------------------------------------------------------------
# the pipeline: named passes, pure, runs in a spawned worker
# ---------------------------------------------------------------------------------------

def test_passes_are_listed_and_each_stage_can_be_shown(rng):
    f = jd.compute(_matmul)
    a, b = rng.standard_normal((33, 20)), rng.standard_normal((20, 40))
    listing = str(f.passes(a, b))
    for name in pipeline.PASSES:
        assert name in listing
    nests = f.lower(a, b, after="lower")
    simple = f.lower(a, b, after="simplify")
    final = f.lower(a, b)
    assert "def " in nests and nests != final
    assert str(f.lower(a, b, after="verify")) == str(final)
    assert "schedule" in str(f.lower(a, b, after="schedule"))
    assert "define" in f.lower(a, b, after="codegen")
    assert simple.count("for") >= 1
    with pytest.raises(jd.JitdlError, match="no pass named 'simplfy'"):
        f.lower(a, b, after="simplfy")


def test_the_schedule_pass_alone_returns_the_schedule_and_its_config(rng):
    # (pipeline.schedule sliced its _Scheduled record as a tuple: a TypeError every time)
    a, b = rng.standard_normal((33, 20)), rng.standard_normal((20, 40))
    graph = graph_of(_matmul, a, b)
    auto, cfg = pipeline.schedule(graph, "cpu")
    assert isinstance(auto, Schedule) and cfg is not None
    replayed, none = pipeline.schedule(graph, "cpu", steps=auto.steps)
    assert none is None and replayed.steps == auto.steps
    low = pipeline.lower(graph, "cpu", steps=auto.steps)
    assert str(low.func) == str(pipeline.lower(graph, "cpu").func)
    run_ok = run_artifact(pipeline.build(low, "cpu"), a, b)
    np.testing.assert_allclose(run_ok, a @ b, rtol=1e-12)


def test_pipeline_writes_nothing(rng, tmp_path, monkeypatch):
    import jitdl.cache.store as store_mod
    monkeypatch.setattr(store_mod, "default_store",
                        lambda: pytest.fail("the pipeline asked for the cache"))
    a, b = rng.standard_normal((9, 11)), rng.standard_normal((11, 5))
    art = pipeline.compile(graph_of(_matmul, a, b), "cpu",
                           pipeline.Options(name="mm", num_threads=2))
    assert art.signature.symbol == "jd_mm"
    assert set(art.times) == set(pipeline.PASSES)
    np.testing.assert_allclose(run_artifact(art, a, b), a @ b, rtol=1e-12)


def _spawned_compile(payload):
    """In a spawned process: unpickle a traced definition, a schedule function and a
    config, and compile; return what the parent needs to run the kernel."""
    import cloudpickle
    from jitdl import pipeline as p
    graph, sched_fn, config = cloudpickle.loads(payload)
    art = p.compile(graph, "cpu", p.Options(name="spawned"), schedule_fn=sched_fn,
                    config=config)
    return art.obj, art.signature.to_json(), art.texts["loop_ir"], art.config


def test_a_spawned_worker_compiles_a_cloudpickled_definition(rng):
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    import cloudpickle
    from jitdl.runtime.kernel import Signature

    def definition(A, B):                # local
        C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
        Y[i, j] = max(C[i, j], 0.0)
        return Y

    def sched_fn(s, cfg):
        C = s["C"]
        i, j = C.axis
        io, ii = s.split(i, cfg.split("ti", i))
        jo, ji = s.split(j, cfg.choice("tj", [4, 8]))
        s.reorder(io, jo, C.reduce_axis[0], ii, ji)
        s.vectorize(ji)

    a, b = rng.standard_normal((23, 31)), rng.standard_normal((31, 29))
    specs = [("array", a.shape, "float64"), ("array", b.shape, "float64")]
    # traced here, as the tuner does (a Task carries the graph): cloudpickle >= 3.1.3
    # gives a function pickled by value no source file ("<dynamic-code>"), so a worker
    # could not read its index notation
    from jitdl.capture.trace import capture, trace
    graph = trace(capture(definition), specs, ["A", "B"])
    payload = cloudpickle.dumps((graph, sched_fn, {"ti": 3, "tj": 8}))
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        obj, sig, loop_ir, config = ex.submit(_spawned_compile, payload).result(timeout=300)
    assert config == {"ti": 3, "tj": 8}
    assert "j_i in range(8)" in loop_ir.replace(".", "_")
    sig = Signature.from_json(sig)
    k = Kernel(sig, engine.Loaded(obj, sig.symbol))
    np.testing.assert_allclose(k((a, b)), np.maximum(a @ b, 0), rtol=1e-12)
    # the same inputs here give the same loop IR
    here = pipeline.lower(trace(capture(definition), specs, ["A", "B"]), "cpu",
                          pipeline.Options(name="spawned"), schedule_fn=sched_fn,
                          config={"ti": 3, "tj": 8})
    assert here.loop_ir == loop_ir


# ---------------------------------------------------------------------------------------
# config spaces and with_config
# ---------------------------------------------------------------------------------------

def test_config_space_of_a_user_schedule(rng):
    f = jd.compute(_matmul)

    @jd.schedule(f)
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        io, ii = s.split(i, cfg.split("ti", i))
        jo, ji = s.split(j, cfg.split("tj", j, candidates=[4, 8, 16]))
        order = cfg.reorder("order", [io, jo, C.reduce_axis[0]])
        s.reorder(*order, ii, ji)
        if cfg.choice("vec", [True, False]):
            s.vectorize(ji)

    a, b = rng.standard_normal((24, 10)), rng.standard_normal((10, 36))
    space = f.config_space(a, b)
    assert space.names == ["ti", "tj", "order", "vec"]
    assert len(space) == len(space["ti"]) * 3 * 6 * 2
    configs = list(space)
    assert len(configs) == len(space) and configs[0] == space.default()
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(space)
    sample = space.sample(10, seed=3)
    assert sample == space.sample(10, seed=3) and len(sample) == 10
    assert len({json.dumps(c, sort_keys=True) for c in sample}) == 10
    assert all(c in configs for c in sample)
    for cfg in sample[:3]:
        check(f.with_config(**cfg), (a, b), a @ b, np.float64)
    with pytest.raises(jd.ScheduleError, match="no knob named 'tx'.*ti, tj, order, vec"):
        f.with_config(tx=4)(a, b)
    with pytest.raises(jd.ScheduleError, match="knob 'vec' takes one of"):
        f.with_config(vec="yes")(a, b)


def test_knob_options_of_numpy_scalars_and_lists_are_kept_plain(rng, tmp_path, monkeypatch):
    """Options made with NumPy (np.array([4, 8]), np.float32 values) made the first call
    raise json's TypeError from the kernel cache's metadata; a list option came back from
    a tuning record as a tuple, which no longer matched it. Options are plain values."""
    from jitdl.autotune.records import check as check_record
    from jitdl.cache.store import Store
    store = Store(str(tmp_path / "cache"), 1 << 30)
    monkeypatch.setattr("jitdl.api.default_store", lambda: store)
    f = jd.compute(_matmul)
    seen = []

    @jd.schedule(f)
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        tj = cfg.split("tj", j, candidates=np.array([4, 8]))
        order = cfg.choice("order", [[0, 1], [1, 0]])
        scale = cfg.choice("scale", np.array([0.5, 1.0], np.float32))
        seen.append((tj, order, scale))
        jo, ji = s.split(j, tj)
        s.reorder(*[(i, jo)[k] for k in order], C.reduce_axis[0], ji)

    a, b = rng.standard_normal((24, 10)), rng.standard_normal((10, 36))
    check(f, (a, b), a @ b, np.float64)
    assert len(store.entries()) == 1
    assert seen[-1] == (4, (0, 1), 0.5) and [type(v) for v in seen[-1]] == [int, tuple, float]
    default = f.config_space(a, b).default()
    check_record(dict(function="f", definition="d", signature="s", target="t",
                      target_name="", jitdl="x", config=default, seconds=1.0))
    back = {k: tuple(v) if isinstance(v, list) else v       # as a record reads it back
            for k, v in json.loads(json.dumps(default)).items()}
    f.config_space(a, b).check(back, "tuning record")
    check(f.with_config(tj=np.int64(8), order=[1, 0]), (a, b), a @ b, np.float64)
    assert seen[-1] == (8, (1, 0), 0.5) and type(seen[-1][0]) is int


class _Mode(enum.Enum):
    A = 1
    B = 2


@pytest.mark.parametrize("options, shown", [
    ([_Mode.A, _Mode.B], "_Mode <_Mode.A: 1>"), ([b"x", b"y"], "bytes b'x'"),
    ([{"a": 1}], "dict {'a': 1}"), ([1.0, float("nan")], "float nan"),
    ([np.float32, np.float64], "type <class 'numpy.float32'>"), ([1 + 2j], "complex (1+2j)")])
def test_a_knob_option_the_records_cannot_keep_is_a_schedule_error(rng, options, shown):
    f = jd.compute(_matmul)

    @jd.schedule(f)
    def sched(s, cfg):
        cfg.choice("mode", options)

    with pytest.raises(jd.ScheduleError) as e:
        f(rng.standard_normal((4, 3)), rng.standard_normal((3, 5)))
    assert str(e.value).startswith(
        "cfg.choice('mode'): an option must be a finite real number, a string, a bool, None "
        f"or a tuple of them (configs are kept in the tuning records and the kernel cache), "
        f"got {shown}"), str(e.value)
    assert 'cfg.choice("mode", options)' in str(e.value)          # the user's line


def test_config_space_of_the_automatic_schedule(rng):
    f = jd.compute(_matmul)
    a, b = rng.standard_normal((64, 48)), rng.standard_normal((48, 64))
    space = f.config_space(a, b)
    assert len(space) > 1 and any("tile" in n for n in space.names)
    cfg = space.sample(1, seed=1)[0]
    check(f.with_config(**cfg), (a, b), a @ b, np.float64)

    @jd.compute
    def add(X, Y):
        return jd.tensor(X.shape, lambda i: X[i] + Y[i])
    x = rng.standard_normal(100)
    assert len(add.config_space(x, x)) == 1 and not add.config_space(x, x).names
    with pytest.raises(jd.ScheduleError, match="no knob named 'ti'"):
        add.with_config(ti=2)(x, x)


def test_tuning_stores_only_the_kernel_it_keeps(rng, tmp_path, monkeypatch):
    from jitdl.cache.store import Store
    store = Store(str(tmp_path / "cache"), 1 << 30)
    monkeypatch.setattr("jitdl.api.default_store", lambda: store)
    f = jd.compute(_matmul)
    a, b = rng.standard_normal((64, 32)), rng.standard_normal((32, 64))
    f(a, b)
    n = len(list(store.alias_records()))
    best, t = f.tune(a, b, trials=5)
    assert len(list(store.alias_records())) <= n + 1
    check(f, (a, b), a @ b, np.float64)


# ---------------------------------------------------------------------------------------
# static arguments
# ---------------------------------------------------------------------------------------

def make_total():
    @jd.compute(static=("axis", "square"))
    def total(X, axis, square=False):
        n, m = X.shape
        v = (lambda i, j: X[i, j] * X[i, j]) if square else (lambda i, j: X[i, j])
        if axis == 0:
            k = jd.reduce_axis(n)
            return jd.tensor((m,), lambda j: jd.sum(v(k, j), axis=k))
        k = jd.reduce_axis(m)
        return jd.tensor((n,), lambda i: jd.sum(v(i, k), axis=k))
    return total


def test_static_arguments_make_one_kernel_each(rng):
    total = make_total()
    x = rng.standard_normal((13, 21))
    check(total, (x, 0), x.sum(0), np.float64)
    check(total, (x, 1), x.sum(1), np.float64)
    check(total, (x, 1, True), (x * x).sum(1), np.float64)
    np.testing.assert_allclose(total(x, axis=0, square=True), (x * x).sum(0))
    assert len(total._kernels) == 4
    assert total.lower(x, 0) != total.lower(x, 1)
    # 1 and True are different static values (types differ), as are 0 and 0.0
    np.testing.assert_allclose(total(x, True), x.sum(1))
    assert len(total._kernels) == 5


def test_static_tuples_and_bad_static_values(rng):
    @jd.compute(static="axes")
    def perm(X, axes):
        shape = tuple(X.shape[a] for a in axes)

        def fcompute(*idx):          # output index pos reads input dimension axes[pos]
            return X[tuple(idx[list(axes).index(d)] for d in range(len(axes)))]
        return jd.tensor(shape, lambda i, j, k: fcompute(i, j, k))

    x = rng.standard_normal((3, 4, 5))
    check(perm, (x, (2, 0, 1)), np.transpose(x, (2, 0, 1)), np.float64)
    check(perm, (x, [1, 2, 0]), np.transpose(x, (1, 2, 0)), np.float64)
    np.testing.assert_allclose(perm(x, (np.int64(2), 1, 0)), np.transpose(x, (2, 1, 0)))
    with pytest.raises(jd.ArgumentError, match="static argument 'axes' must be"):
        perm(x, {1: 2})
    with pytest.raises(jd.ArgumentError, match="has no parameter 'ax'"):
        jd.compute(static=("ax",))(lambda X, axis: X)


def test_static_arguments_in_the_disk_cache(tmp_path):
    script = tmp_path / "s.py"
    script.write_text(textwrap.dedent('''
        import sys
        import numpy as np
        import jitdl as jd
        sys.path.insert(0, %r)
        from test_pipeline import make_total
        total = make_total()
        x = np.arange(12.0).reshape(3, 4) + 0.5
        print(total(x, 0).tolist(), total(x, 1).tolist())
        print([e["result"] for e in total.cache_info()["events"]])
    ''' % HERE))
    env = dict(os.environ, JITDL_CACHE_DIR=str(tmp_path / "cache"))
    runs = [subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           env=env, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr
    x = np.arange(12.0).reshape(3, 4) + 0.5
    assert runs[0].stdout.splitlines()[0] == f"{x.sum(0).tolist()} {x.sum(1).tolist()}"
    assert runs[1].stdout.splitlines()[0] == runs[0].stdout.splitlines()[0]
    assert runs[0].stdout.splitlines()[1] == "['compiled', 'compiled']"
    assert runs[1].stdout.splitlines()[1] == "['hit', 'hit']"


# ---------------------------------------------------------------------------------------
# targets
# ---------------------------------------------------------------------------------------

def test_the_cpu_target_is_read_from_the_machine():
    from jitdl.target import get
    t = get("cpu")
    assert t.vector_bytes in (16, 32, 64)
    assert t.l1_bytes >= 4096 and t.l2_bytes >= t.l1_bytes
    assert t.lanes(4) == t.vector_bytes // 4 and t.max_accumulators(4) >= t.lanes(4)
    assert t.vector_registers in (16, 32)
    env = t.environment()
    assert env["target"] == "cpu" and env["cpu"] == t.cpu
    cuda = get("cuda")          # without a GPU: an sm_90 device for generating code
    assert cuda.name == "cuda" and cuda.environment()["target"] == "cuda"
    with pytest.raises(jd.ArgumentError, match="unknown target 'tpu'"):
        get("tpu")


# ---------------------------------------------------------------------------------------
# found by review: each of these once gave a wrong answer, a crash or a hang
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("step", [
    {"op": "rfactor", "stage": "C", "axis": "k", "factor": -3},
    {"op": "rfactor", "stage": "C", "axis": "k", "factor": 0},
    {"op": "pack", "stage": "C", "tensor": "B", "dim": 1, "factor": "4"},
    {"op": "pack", "stage": "C", "tensor": "B", "dim": True, "factor": 4},
    {"op": "reorder", "stage": "C", "axes": ["j", "i", "i"]},
    {"op": "reorder", "stage": "C", "axes": "ji"},
    {"op": "split", "stage": {}, "axis": "i", "factor": 2},
    {"op": ["split"], "stage": "C"},
    {"op": "compute_at", "stage": "C", "target": "C", "axis": "i", "axis_stage": "C",
     "block_buffer": "yes"}])
def test_malformed_replayed_steps_are_schedule_errors(step):
    graph = graph_of(_matmul, np.ones((6, 5)), np.ones((5, 7)))
    with pytest.raises(jd.ScheduleError):
        Schedule(graph).replay([step])


def test_static_values_that_compare_equal_are_still_different_kernels():
    @jd.compute(static=("fill",))
    def filled(X, fill):
        return jd.tensor(X.shape, lambda i: X[i] * 0 + fill[0] if isinstance(fill, tuple)
                         else X[i] * 0 + fill)
    x = np.arange(4, dtype=np.int32)
    assert filled(x, (2,)).dtype == np.int32
    assert filled(x, (2.0,)).dtype == np.float64          # as NumPy: int32 + 2.0
    assert filled(x, (True,)).dtype == np.int32
    @jd.compute(static=("scale",))
    def scaled(X, scale):
        return jd.tensor(X.shape, lambda i: X[i] * scale)
    y = np.arange(1.0, 5.0)
    assert not np.any(np.signbit(scaled(y, 0.0)))
    assert np.all(np.signbit(scaled(y, -0.0)))            # not the kernel of 0.0
    for _ in range(2):                                    # NaN is one key, not a new one
        assert np.all(np.isnan(scaled(y, float("nan"))))
    assert len(scaled._kernels) == 3


def test_wide_rows_with_the_automatic_schedule_on_any_l2(rng):
    """Row fusion depends on the target's L2; whatever it decides must compile."""
    import dataclasses
    from jitdl.target import get

    def softmax(X):
        n, m = X.shape
        mx[i] = max(X[i, k] for k in range(m))
        e[i, j] = exp(X[i, j] - mx[i])
        s[i] = sum(e[i, k] for k in range(m))
        Y[i, j] = e[i, j] / s[i]
        return Y
    x = rng.standard_normal((3, 9000))
    ref = np.exp(x - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    for l2 in (64 << 10, 256 << 10, 4 << 20):
        target = dataclasses.replace(get("cpu"), l2_bytes=l2)
        art = pipeline.compile(graph_of(softmax, x), target)
        np.testing.assert_allclose(run_artifact(art, x), ref, rtol=1e-12)


def test_targets_with_other_policies_have_other_cache_environments():
    import dataclasses
    from jitdl.cache import keys
    from jitdl.target import get
    host = get("cpu")
    other = dataclasses.replace(host, l2_bytes=host.l2_bytes * 2)
    assert keys.environment(host) != keys.environment(other)
    assert keys.environment(host) == keys.environment(get("cpu"))


def test_repeated_knob_options_do_not_hang_sampling(rng):
    f = jd.compute(_matmul)

    @jd.schedule(f)
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        s.split(i, cfg.split("ti", i, candidates=[8, 4, 8]))
        s.split(j, cfg.choice("tj", [16, 16, 8]))
    a, b = rng.standard_normal((32, 8)), rng.standard_normal((8, 32))
    space = f.config_space(a, b)
    assert len(space) == 4 and len(space.sample(5)) == 4
    best, _ = f.tune(a, b, trials=5)
    check(f, (a, b), a @ b, np.float64)


def test_knobs_declared_in_one_branch_are_in_the_space(rng):
    f = jd.compute(_matmul)

    @jd.schedule(f)
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        if cfg.choice("mode", ["plain", "split_i"]) == "split_i":
            s.split(i, cfg.split("ti", i, candidates=[2, 4]))
    a, b = rng.standard_normal((12, 8)), rng.standard_normal((8, 10))
    space = f.config_space(a, b)
    assert "ti" in space and len(space) == 4
    check(f.with_config(mode="split_i", ti=4), (a, b), a @ b, np.float64)
    assert "i.i in range(4)" in f.with_config(mode="split_i", ti=4).lower(a, b) or \
        "i_i in range(4)" in f.with_config(mode="split_i", ti=4).lower(a, b)
    for cfg in space:                                      # every listed config compiles
        check(f.with_config(**cfg), (a, b), a @ b, np.float64, out=False)


def test_a_user_name_is_never_taken_for_a_jitdl_name(rng):
    @jd.compute
    def f(A):
        (n, m) = A.shape
        for _ in range(50):              # unnamed axes, dropped: their ids get reused
            jd.reduce_axis(m)
        k = jd.reduce_axis(m, name="red")
        return jd.tensor((n,), lambda i: jd.sum(A[i, k], axis=k))
    a = rng.standard_normal((4, 6))
    assert "red" in f.lower(a)
    check(f, (a,), a.sum(1), np.float64)


def test_capture_finds_the_definition_however_it_is_written(rng):
    @jd.compute(
        strict_fp=False,
    )
    def twice(X):
        Y[i] = X[i] * 2         # index notation: needs the source
        return Y

    def dedented(X):
        """A docstring whose second line starts at column 0:
text here
        """
        Y[i] = X[i] + 1

        return Y

    x = rng.standard_normal(7)
    check(twice, (x,), 2 * x, np.float64)
    check(jd.compute(dedented), (x,), x + 1, np.float64)


def test_jitdl_num_threads_sets_the_team_size_of_parallel_loops(tmp_path):
    """libgomp's team size is per thread once set; JITDL_NUM_THREADS must reach the
    thread that calls the kernel, not only the warm-up thread that loaded libgomp."""
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent('''
        import numpy as np
        import jitdl as jd
        from jitdl.runtime import engine

        @jd.compute
        def f(X):
            return jd.tensor(X.shape, lambda i: X[i] * 2)
        f(np.ones(1 << 16))
        print(engine._init()["gomp"].omp_get_max_threads())
    '''))
    env = dict(os.environ, JITDL_NUM_THREADS="1", JITDL_CACHE="0")
    env.pop("OMP_NUM_THREADS", None)
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"


def test_capture_reads_the_whole_body_and_the_current_file(rng, tmp_path):
    """A comment at column 0 inside the body does not end it; a module edited and
    reloaded is traced from its new source (the cache key already follows the code)."""
    mod = tmp_path / "capmod.py"
    mod.write_text(textwrap.dedent('''
        import jitdl as jd

        @jd.compute
        def f(A):
            Y[i] = A[i] * 2
        # a comment left at column 0
            Z[i] = Y[i] + 1
            return Z
    '''))
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent('''
        import importlib, sys, time
        import numpy as np
        sys.path.insert(0, %r)
        import capmod
        x = np.ones(3, np.float32)
        print(capmod.f(x).tolist())
        src = open(capmod.__file__).read().replace("A[i] * 2", "A[i] * 3")
        time.sleep(0.01)
        open(capmod.__file__, "w").write(src)
        importlib.reload(capmod)
        print(capmod.f(x).tolist())
    ''' % str(tmp_path)))
    env = dict(os.environ, JITDL_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["[3.0, 3.0, 3.0]", "[4.0, 4.0, 4.0]"]


@pytest.mark.parametrize("vec", [False, True])
def test_compute_at_under_an_overshooting_split(rng, vec):
    """The block of T that one row of Y reads, when the split of Y's j overshoots the
    extent and T is read backwards (the region once lost its last element)."""
    @jd.compute
    def g(E):
        n, d = E.shape
        T[i, j] = E[i, j] * 3.0
        Y[i, j] = T[i, j] + T[i, d - 1 - j]
        return Y

    @jd.schedule(g)
    def sched(s, cfg):
        i, j = s["Y"].axis
        s.compute_at(s["T"], s["Y"], i)
        jo, ji = s.split(j, 4)
        if vec:
            s.vectorize(ji)
    e = rng.standard_normal((5, 23))
    check(g, (e,), 3 * e + 3 * e[:, ::-1], np.float64)


def test_loading_libgomp_leaves_omp_num_threads_as_it_was(tmp_path):
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent('''
        import os
        import numpy as np
        import jitdl as jd
        from jitdl.runtime import engine
        jd.compute(lambda X: jd.tensor(X.shape, lambda i: X[i] + 1))(np.ones(4))
        engine._wait_for_warm_up()
        print(os.environ.get("OMP_NUM_THREADS"), engine._init()["gomp"].omp_get_max_threads())
    '''))
    env = dict(os.environ, JITDL_NUM_THREADS="1", OMP_NUM_THREADS="2,1", JITDL_CACHE="0")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["2,1", "1"]


def test_a_fork_waits_for_the_warm_up_threads_imports(tmp_path):
    """The warm-up thread imports modules (platformdirs, the tuning records) for a first
    call: a fork in the middle of such an import gave the child the module's import lock,
    held by a thread it does not have, and the child's own first call then waited for ever
    (`import jitdl` and a fork right after it: what multiprocessing's fork start does). The
    fork now waits for those imports. Here the import is made slow, so that the fork lands
    inside it."""
    (tmp_path / "slow_import.py").write_text("import time\ntime.sleep(1.0)\nVALUE = 7\n")
    script = tmp_path / "t.py"
    script.write_text(textwrap.dedent(f'''
        import faulthandler, os, sys, threading, time
        sys.path.insert(0, {str(tmp_path)!r})
        from jitdl.runtime import engine
        inside = threading.Event()

        def also():
            inside.set()
            import slow_import          # noqa: F401

        engine.warm_up_in_background(also)
        inside.wait()
        time.sleep(0.2)                 # the warm-up thread is in the middle of the import
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(15, exit=True)
            import slow_import
            os._exit(0 if slow_import.VALUE == 7 else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    '''))
    env = dict(os.environ, JITDL_WARM_UP="0", JITDL_CACHE="0")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["0"], r.stderr
