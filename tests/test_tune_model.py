"""Features, cost model and tuners of jitdl.autotune.

The tuners are tested on a synthetic task: a config space of split, choice and reorder
knobs and a made-up speed of each config (some configs fail), measured by a fake
measurer, so no timing is asserted. Features are checked on real lowered kernels.
"""
import math

import numpy as np
import pytest

import jitdl as jd
from jitdl import pipeline
from jitdl.autotune import features, tuner
from jitdl.autotune.model import CostModel
from jitdl.autotune.task import Measurement, Task, work_of
from jitdl.errors import ScheduleError
from jitdl.schedule.config import Config

ORDER = {(0, 1, 2): 1.0, (0, 2, 1): 0.7, (1, 0, 2): 0.97, (1, 2, 0): 0.5, (2, 0, 1): 0.6,
         (2, 1, 0): 0.4}


def space(y_extent=96):
    cfg = Config()
    cfg.split("tile_x", 64)
    cfg.split("tile_y", y_extent)
    cfg.split("tile_k", 128)
    cfg.choice("unroll", (0, 2, 4, 8))
    cfg.reorder("order", ["a", "b", "c"])
    cfg.choice("vec", ("none", "x", "y"))
    return cfg.space


def speed(c, peak=(8, 24, 32)):
    """A made-up speed: smooth peaks in the tile sizes, a register budget, interactions
    of unroll with tile_k and of vectorising with tile_x; None where it 'fails'."""
    x, y, k = c["tile_x"], c["tile_y"], c["tile_k"]
    if x * y > 1024:
        return None

    def g(v, p, w):
        return math.exp(-((math.log2(v) - math.log2(p)) / w) ** 2)
    s = g(x, peak[0], 2.5) * g(y, peak[1], 2.5) * g(k, peak[2], 3.0)
    if x * y > 192:
        s *= 0.5
    s *= ORDER[tuple(c["order"])]
    s *= {0: 0.85, 2: 0.95, 4: 1.0, 8: 0.98 if k >= 8 else 0.6}[c["unroll"]]
    s *= {"none": 0.5, "x": 1.0 if x >= 8 else 0.6, "y": 0.97}[c["vec"]]
    return s


def measure(configs, peak=(8, 24, 32)):
    out = []
    for c in configs:
        s = speed(c, peak)
        out.append(Measurement(c, None, "build: too large") if s is None
                   else Measurement(c, 1.0 / s))
    return out


def trials_to_reach(tu, frac, best, batch=16, cap=800):
    """Trials until a config of at least frac * best speed is measured (None: not within
    cap trials)."""
    n = 0
    while tu.has_next() and n < cap:
        cfgs = tu.next_batch(batch)
        for i, c in enumerate(cfgs):
            s = speed(c)
            if s is not None and s >= frac * best:
                return n + i + 1
        n += len(cfgs)
        tu.update(cfgs, measure(cfgs))
    return None


def test_xgb_reaches_95_percent_in_far_fewer_trials_than_random():
    sp = space()
    speeds = [s for s in map(speed, sp) if s is not None]
    best = max(speeds)
    good = sum(s >= 0.95 * best for s in speeds)
    # uniform draws without repeats reach one of `good` configs after (N + 1) / (good + 1)
    # trials on average
    random_trials = (len(sp) + 1) / (good + 1)
    got = [trials_to_reach(tuner.make("xgb", sp, seed=seed), 0.95, best) for seed in range(3)]
    assert None not in got, got
    assert np.mean(got) < random_trials / 2, (got, random_trials)



def test_xgb_featurizes_each_config_once_and_within_its_budget_per_batch():
    """Featurizing (lowering) a config was most of a proposal's time: 500 a batch, 6-10
    s. Each config is featurized once for the whole run, at most max_featurized (150)
    a batch besides the batch's own measured ones, and every config featurized before
    and not yet proposed is still a candidate (ranked by the new model, not lowered)."""
    sp = space()
    probe = tuner.XGBTuner(sp)
    calls = []

    def featurize(c):
        calls.append(repr(sorted(c.items())))
        return probe._knob_features(c)
    tu = tuner.XGBTuner(sp, featurize=featurize, seed=0)
    assert tu.max_featurized == 150
    pools = []
    pick = tu._pick
    tu._pick = lambda pool, n: pools.append(dict(pool)) or pick(pool, n)
    for _ in range(5):
        before = len(calls)
        cfgs = tu.next_batch(8)
        assert len(calls) - before <= tu.max_featurized + 8
        tu.update(cfgs, measure(cfgs))
    assert len(calls) == len(set(calls))           # none featurized twice
    assert len(pools) == 4
    for pool, featurized_before in zip(pools[1:], [set(p) for p in pools[:-1]]):
        # what an earlier batch scored and did not propose is scored again
        left = {p for p in featurized_before if p not in tu.proposed}
        assert left and left <= set(pool)

def small_space():
    cfg = Config()
    cfg.split("t", 8)                      # 1, 2, 4, 8
    cfg.choice("c", ("a", "b", "c"))
    cfg.reorder("r", ["x", "y"])
    return cfg.space


def small_speed(c):
    if c["c"] == "c" and c["t"] == 8:
        return None                        # these fail
    return c["t"] * {"a": 1.0, "b": 2.0, "c": 1.5}[c["c"]] * (1.2 if c["r"] == (1, 0) else 1.0)


@pytest.mark.parametrize("kind", ["xgb", "random", "grid", "ga"])
def test_tuners_never_repeat_and_exhaust_a_small_space(kind):
    sp = small_space()
    tu = tuner.make(kind, sp, seed=1)
    seen = []
    while tu.has_next():
        cfgs = tu.next_batch(5)
        assert cfgs, "has_next() but no config proposed"
        seen += cfgs
        ms = [Measurement(c, None, "crash: signal 11") if small_speed(c) is None
              else Measurement(c, 1.0 / small_speed(c)) for c in cfgs]
        tu.update(cfgs, ms)
    keys = [repr(sorted(c.items())) for c in seen]
    assert len(keys) == len(set(keys)) == len(sp)
    assert sorted(keys) == sorted(repr(sorted(c.items())) for c in sp)
    assert tu.next_batch(4) == []
    best = max((c for c in sp if small_speed(c) is not None), key=small_speed)
    assert tu.best_config == best
    assert tu.best_seconds == pytest.approx(1.0 / small_speed(best))


def test_grid_starts_with_the_default_and_follows_the_space():
    sp = small_space()
    got = tuner.make("grid", sp).next_batch(len(sp))
    assert got[0] == sp.default()
    assert len(got) == len(sp)
    # after the default, the order of the space itself (the last knob fastest)
    assert got[1] == {**sp.default(), "r": (1, 0)}


def test_xgb_first_batch_is_the_default_and_random_ones():
    sp = space()
    first = tuner.make("xgb", sp, seed=0).next_batch(16)
    assert first[0] == sp.default()
    assert len({repr(c) for c in first}) == 16


@pytest.mark.parametrize("kind", ["xgb", "ga", "random"])
def test_failed_measurements_are_zero_throughput(kind):
    sp = space()
    tu = tuner.make(kind, sp, seed=2)
    cfgs = tu.next_batch(8)
    tu.update(cfgs, [Measurement(c, None, "timeout: 10 s") for c in cfgs])
    assert tu.best_config is None and tu.best_seconds is None
    more = tu.next_batch(8)               # the search goes on
    assert len(more) == 8
    assert not {repr(c) for c in more} & {repr(c) for c in cfgs}
    tu.update(more, measure(more))
    ok = [c for c in more if speed(c) is not None]
    if ok:
        assert tu.best_seconds == pytest.approx(1.0 / max(map(speed, ok)))


def test_transfer_history_steers_the_first_batches():
    """Measurements of another shape (tile_y over 48, peaks nearby) pre-train the model:
    the first batch of this shape is no longer blind, and better on average."""
    other = space(48)
    rng = np.random.default_rng(5)
    configs = [other.sample(1, seed=int(s))[0] for s in rng.integers(1 << 30, size=300)]
    probe = tuner.XGBTuner(other)         # the knob encoding as features
    history = [(probe._knob_features(c), 0.0 if s is None else s)
               for c in configs for s in [speed(c, (8, 16, 32))]]
    sp = space()

    def mean_speed(cfgs):
        return np.mean([speed(c) or 0.0 for c in cfgs])
    blind = [mean_speed(tuner.make("xgb", sp, seed=s).next_batch(32)) for s in range(3)]
    warm = [tuner.make("xgb", sp, seed=s, history=history).next_batch(32) for s in range(3)]
    assert all(b[0] == sp.default() for b in warm)
    assert np.mean([mean_speed(b) for b in warm]) > 1.5 * np.mean(blind)


def test_history_rows_the_model_cannot_use_are_left_out():
    """The history comes from the records file, which an import or an edit may fill with
    anything: features of another length failed tune() with a bare ValueError, infinite
    ones (or past float32: 1e39) with XGBoost's "Input data contains `inf`". Such rows
    are left out; the rest still steer the model."""
    other = space(48)
    rng = np.random.default_rng(5)
    configs = [other.sample(1, seed=int(s))[0] for s in rng.integers(1 << 30, size=200)]
    probe = tuner.XGBTuner(other)
    good = [(probe._knob_features(c), 0.0 if s is None else s)
            for c in configs for s in [speed(c, (8, 16, 32))]]
    width = len(good[0][0])
    bad = [([math.inf] * width, 1.0), ([1e39] * width, 1.0), ([1.0] * (width + 3), 1.0),
           ([1.0] * width, math.nan), ([1.0] * width, -2.0), (["x"] * width, 1.0),
           ([1.0] * width, None), ([[1.0, 2.0]] * width, 1.0)]
    sp = space()
    mixed = bad[:4] + good + bad[4:]
    for seed in range(2):
        t = tuner.make("xgb", sp, seed=seed, history=mixed)
        assert t.history[0].shape == (len(good), width)
        warm = t.next_batch(32)
        assert warm[0] == sp.default() and t.model.fitted
        assert warm == tuner.make("xgb", sp, seed=seed, history=good).next_batch(32)
    t = tuner.make("xgb", sp, seed=0, history=bad)       # nothing usable: blind
    assert t.history is None
    assert t.next_batch(8) == tuner.make("xgb", sp, seed=0).next_batch(8)


def test_cost_model_ranks_and_handles_no_data():
    rng = np.random.default_rng(0)
    X = rng.random((200, 5))
    y = 3 * X[:, 0] + np.sin(4 * X[:, 1])
    m = CostModel()
    assert not m.predict(X[:3]).any()     # before any fit: no preference
    m.fit(X[:150], y[:150])
    p = m.predict(X[150:])
    top = np.argsort(-p)[:10]             # the model's top 10 of 50 unseen points
    assert y[150:][top].mean() > np.quantile(y[150:], 0.7)
    m.fit(X[:5], np.zeros(5))             # all failed: nothing to rank
    assert not m.fitted


# -- features of real lowered kernels -----------------------------------------------------

def task_of(f, *args):
    args = f._args(args, {})
    specs = f._specs(args)
    graph, target = f._trace(specs, args), f._target(specs)
    return Task(f.name, graph, target, f._options(), f._schedules.get(target.name),
                f._space(specs), list(args), work_of(graph), key="test")


def matmul_fn():
    @jd.compute
    def matmul(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")
    return matmul


def lowered(task, config=None, until="lower"):
    return pipeline.lower(task.graph, task.target, task.options,
                          schedule_fn=task.schedule_fn, config=config, until=until).func


def test_features_of_real_kernels_are_finite_and_tell_configs_apart():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((96, 80)).astype(np.float32)
    b = rng.standard_normal((80, 64)).astype(np.float32)

    @jd.compute
    def ew(X, c):
        return jd.tensor(X.shape, lambda i, j: jd.exp(X[i, j] * 0.5) + c[j], name="Y")

    @jd.compute
    def softmax(X):
        n, m = X.shape
        mx[i] = max(X[i, k] for k in range(m))
        e[i, j] = exp(X[i, j] - mx[i])
        s[i] = sum(e[i, k] for k in range(m))
        Y[i, j] = e[i, j] / s[i]
        return Y

    @jd.compute
    def gather(E, ids):                   # columns picked by ids: no stride along j
        Y[i, j] = E[i, ids[j]]
        return Y

    mm = task_of(matmul_fn(), a, b)
    ids = rng.integers(0, 80, 40).astype(np.int64)
    tasks = [mm, task_of(ew, a, a[0].copy()), task_of(softmax, a), task_of(gather, a, ids)]
    n = len(features.FEATURE_NAMES)
    for t in tasks:
        for until in ("lower", "verify"):
            v = features.extract(lowered(t, until=until), t.target)
            assert v.shape == (n,) and v.dtype == np.float32
            assert np.isfinite(v).all() and v.any()
    configs = list(mm.space)
    assert len(configs) > 1
    vecs = {repr(c): features.of_config(mm, c) for c in configs[:4]}
    assert len({v.tobytes() for v in vecs.values()}) > 1
    # the matmul reads A, B and writes C contiguously or not at all in its inner loop
    v = features.extract(lowered(mm, mm.space.default()), mm.target)
    named = dict(zip(features.FEATURE_NAMES, v))
    assert named["stride_irregular"] == 0 and named["flops_per_iter"] == 2
    g = dict(zip(features.FEATURE_NAMES, features.extract(lowered(tasks[3]), mm.target)))
    assert g["stride_irregular"] > 0



@pytest.mark.parametrize("shapes", [[(0,)], [(0, 40), (40, 24)], [(24, 0), (0, 40)]])
def test_features_of_a_kernel_over_an_empty_array_are_finite(shapes):
    """An empty array's loop of extent 0 left no trip at a cache level: the traffic per
    flop divided by zero, so the build of every candidate failed (tune() on an empty
    array: "build: ZeroDivisionError: division by zero", the default's too)."""
    from jitdl.autotune.measure import build
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    if len(shapes) == 1:
        @jd.compute
        def f(X):
            return jd.tensor(X.shape, lambda i: X[i] * 2.0, name="Y")
    else:
        f = matmul_fn()
    t = task_of(f, *args)
    for config in list(t.space)[:4]:
        v = features.extract(lowered(t, config), t.target)
        assert v.shape == (len(features.FEATURE_NAMES),) and np.isfinite(v).all()
        assert np.isfinite(features.of_config(t, config)).all()
    art, feats, _ = build(t, t.space.default())
    assert art.obj and np.isfinite(feats).all()


def test_extract_works_out_each_index_form_once(monkeypatch):
    """Featurizing is most of the XGB tuner's proposal time: the affine form of an
    index node is computed once per extract, not once per loop of its nest."""
    from jitdl.ir import analysis
    a = np.ones((64, 64), np.float32)
    mm = task_of(matmul_fn(), a, a.copy())
    func = lowered(mm, mm.space.default())
    seen, twice = set(), []
    inner = analysis._affine

    def counting(e):
        if isinstance(e, (analysis.Binary, analysis.Unary, analysis.Cast)):
            if id(e) in seen:
                twice.append(e)
            seen.add(id(e))
        return inner(e)
    monkeypatch.setattr(analysis, "_affine", counting)
    v = features.extract(func, mm.target)
    assert seen and not twice
    monkeypatch.setattr(analysis, "_affine", inner)
    assert np.array_equal(v, features.extract(func, mm.target))

def test_of_config_flags_a_config_that_does_not_lower():
    @jd.compute
    def scale(X):
        return jd.tensor(X.shape, lambda i, j: X[i, j] * 2.0, name="Y")

    @jd.schedule(scale, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        i, j = Y.axis
        if cfg.choice("how", ("split", "broken")) == "broken":
            raise ScheduleError("this config does not lower")
        s.split(j, cfg.split("tile", j))

    t = task_of(scale, np.ones((16, 32), np.float32))
    good = features.of_config(t, {"how": "split", "tile": 8})
    bad = features.of_config(t, {"how": "broken", "tile": 8})
    assert np.isfinite(good).all() and not (good == features.FAILED).all()
    assert (bad == features.FAILED).all()
