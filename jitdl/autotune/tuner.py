"""Tuners: which configs of a space to measure next (next_batch), learning from the
measurements (update). No tuner proposes a config twice; has_next() turns False once
every config of the space was proposed.

    random  uniform draws
    grid    the space in order, the default first
    ga      a genetic algorithm: elitism, crossover knob by knob, mutation
    xgb     the cost model fitted on every measurement so far, parallel simulated
            annealing over the knob space to find what it ranks highest, a pick of the
            top candidates that are not near-copies of each other, and a few random ones

A config is a point of the space: one option index per knob, each knob's default at
index 0, so the point of zeros is the default config.
"""
from __future__ import annotations

import itertools
import math
import time

import numpy as np

from jitdl.autotune.features import FAILED
from jitdl.autotune.model import CostModel
from jitdl.errors import ArgumentError
from jitdl.schedule.config import ReorderKnob, SplitKnob

KINDS = ("xgb", "random", "grid", "ga")     # the tuners make() knows by name
ENUMERATE_BELOW = 1 << 20     # a space this small is enumerated once draws start to repeat


def _ordered(knob):
    """Whether a knob's options are numbers whose neighbours in value are alike."""
    return isinstance(knob, SplitKnob) or all(
        isinstance(o, (int, float)) and not isinstance(o, bool) for o in knob.options)


class Tuner:
    """The common part: the space as option indices, what was proposed, what was measured."""

    def __init__(self, space, seed=0):
        self.space = space
        self.names = list(space.knobs)
        self.options = []
        for knob in space.knobs.values():
            rest = [o for o in knob.options if repr(o) != repr(knob.default)]
            self.options.append([knob.default] + rest)
        self.sizes = [len(o) for o in self.options]
        self.size = math.prod(self.sizes)
        self._index = [{repr(o): i for i, o in enumerate(opts)} for opts in self.options]
        self.rng = np.random.default_rng(seed)
        self.proposed = set()
        self.points, self.seconds = [], []       # measured, in order
        self._best = None
        # time.monotonic() by which next_batch should return (the search's timeout): the
        # model's search stops there with what it has scored (random points fill up)
        self.deadline = None

    def _late(self):
        return self.deadline is not None and time.monotonic() >= self.deadline

    # -- points and configs --
    def config(self, point) -> dict:
        return {n: opts[i] for n, opts, i in zip(self.names, self.options, point)}

    def point(self, config):
        """The point of a config (None when a value is not an option of its knob)."""
        try:
            return tuple(ix[repr(config[n])] for n, ix in zip(self.names, self._index))
        except KeyError:
            return None

    def _random(self, n):
        """Up to n distinct points never proposed, uniformly drawn."""
        left = self.size - len(self.proposed)
        n = min(n, left)
        if self.size <= ENUMERATE_BELOW and len(self.proposed) * 2 >= self.size:
            rest = [p for p in itertools.product(*map(range, self.sizes))
                    if p not in self.proposed]
            return [rest[i] for i in self.rng.choice(len(rest), n, replace=False)]
        out, seen = [], set(self.proposed)
        while len(out) < n:
            p = tuple(int(self.rng.integers(s)) for s in self.sizes)
            if p not in seen:
                seen.add(p)
                out.append(p)
        return out

    # -- the interface --
    def has_next(self) -> bool:
        return len(self.proposed) < self.size

    def next_batch(self, n) -> list[dict]:
        """Up to n configs never proposed before (fewer only when the space runs out)."""
        out = []
        for p in self._propose(n):
            if p not in self.proposed and len(out) < n:
                self.proposed.add(p)
                out.append(p)
        if len(out) < n:                          # a strategy short of new points
            extra = self._random(n - len(out))
            self.proposed.update(extra)
            out += extra
        return [self.config(p) for p in out]

    def _propose(self, n):
        raise NotImplementedError

    def update(self, configs, measurements):
        """Record measurements (jitdl.autotune.task.Measurement; seconds None: failed)."""
        for cfg, m in zip(configs, measurements):
            p = self.point(cfg)
            if p is None:
                continue
            self.proposed.add(p)
            self.points.append(p)
            self.seconds.append(m.seconds if m.ok else None)
            self._measured(p, m)
            if m.ok and (self._best is None or m.seconds < self._best[1]):
                self._best = (p, m.seconds)

    def _measured(self, point, measurement):
        """What a tuner keeps of one measurement besides its time."""

    @property
    def throughputs(self):
        """1 / seconds of each measurement (0 for a failed one): higher is better."""
        return np.array([1.0 / s if s else 0.0 for s in self.seconds])

    @property
    def best_config(self):
        return None if self._best is None else self.config(self._best[0])

    @property
    def best_seconds(self):
        return None if self._best is None else self._best[1]


class RandomTuner(Tuner):
    """Uniform draws without repeats."""

    def _propose(self, n):
        return self._random(n)


class GridTuner(Tuner):
    """The space in order (the last knob fastest), the default first."""

    def __init__(self, space, seed=0):
        super().__init__(space, seed)
        self._order = itertools.product(*map(range, self.sizes))

    def _propose(self, n):
        out = []
        for p in self._order:
            if p not in self.proposed:
                out.append(p)
                if len(out) == n:
                    break
        return out


class GATuner(Tuner):
    """A genetic algorithm: the fittest measured points are parents (the best `elite`
    always among them); children mix two parents knob by knob and mutate each knob with
    probability `mutation`."""

    def __init__(self, space, seed=0, population=32, elite=4, mutation=0.1):
        super().__init__(space, seed)
        self.population, self.elite, self.mutation = population, elite, mutation

    def _propose(self, n):
        if not self.points:
            return [(0,) * len(self.sizes)] + self._random(n - 1)
        fit = self.throughputs
        order = np.argsort(-fit, kind="stable")[:self.population]
        parents = [self.points[i] for i in order]
        weight = fit[order] + 1e-3 * (fit.max() or 1.0)     # failed ones still breed a little
        weight = weight / weight.sum()
        out = set()
        for _ in range(20 * n):
            if len(out) == n:
                break
            a, b = self.rng.choice(len(parents), 2, p=weight)
            child = [parents[a][k] if self.rng.random() < 0.5 else parents[b][k]
                     for k in range(len(self.sizes))]
            for k, s in enumerate(self.sizes):
                if self.rng.random() < self.mutation:
                    child[k] = int(self.rng.integers(s))
            child = tuple(child)
            if child not in self.proposed:
                out.add(child)
        return list(out)


class XGBTuner(Tuner):
    """The cost model with a model optimiser. Each batch after the first: refit the model
    on every measurement (and the `history` of other shapes), run `n_chains` simulated
    annealing chains over the knob space scoring `n_chains` points per model call, then
    take from the `plan_size` best candidates (at least 2n) those that differ from each
    other in at least `min_diff` knobs, and an `epsilon` share of random points. The first batch (no model yet) is the
    default config and random points; with a history it is already the model's.

    featurize maps a config to its feature vector (features.of_config bound to a task;
    None: the knob values themselves); a measurement's own features (computed where it
    was built) are used when it has them. At most `max_featurized` new configs are
    featurized per batch (lowering costs 10-25 ms each: 500 a batch took 6-10 s, as long
    as measuring it), and every vector is kept: each batch also ranks every config
    featurized before and not yet proposed (one model call), so the candidates grow by
    the budget each batch at no further lowering."""

    def __init__(self, space, featurize=None, seed=0, plan_size=64, n_chains=32,
                 history=None, epsilon=0.05, max_featurized=150, steps=200, min_diff=None):
        super().__init__(space, seed)
        self.featurize = featurize or self._knob_features
        self.plan_size, self.n_chains, self.epsilon = plan_size, n_chains, epsilon
        self.max_featurized, self.steps = max_featurized, steps
        self.min_diff = min_diff if min_diff is not None else max(1, len(self.sizes) // 3)
        self.model = CostModel(seed)
        self.history = None
        self._features = {}
        self._budget = 0
        self._ends = []               # where the last batch's chains stopped
        knobs = list(space.knobs.values())
        # an ordered knob's option indices by value: its neighbours are the next ones
        self._orders = [sorted(range(s), key=opts.__getitem__) if _ordered(k) else None
                        for k, s, opts in zip(knobs, self.sizes, self.options)]
        self._reorders = [isinstance(k, ReorderKnob) for k in knobs]
        self._swap_cache = {}
        if history:
            self.history = self._usable(history)

    def _knob_features(self, config):
        """A config as numbers: a numeric option as itself, any other as its index."""
        p = self.point(config)
        return np.array([o[i] if order else i for o, i, order
                         in zip(self.options, p, self._orders)], np.float32)

    def _measured(self, point, m):
        if m.features is not None:
            self._features[point] = np.asarray(m.features, np.float32)

    def _vector(self, point):
        """The features of a point, featurizing it if the batch's budget allows (None:
        over budget)."""
        v = self._features.get(point)
        if v is None:
            if self._budget <= 0 or self._late():
                return None
            self._budget -= 1
            v = self._features[point] = np.asarray(self.featurize(self.config(point)),
                                                   np.float32)
        return v

    def _usable(self, history):
        """(X, y) of the history's rows whose features are finite in float32 and as
        many as this tuner's (those of the default config, kept), and whose throughput
        is a finite number >= 0; None if no row is. The rows come from the records file,
        which an import or an edit may have filled with anything: features of another
        length failed the tune() as a bare ValueError, an infinite one (or one past
        float32, 1e39) as XGBoost's "Input data contains `inf`"."""
        default = (0,) * len(self.sizes)
        if default not in self._features:
            self._features[default] = np.asarray(self.featurize(self.config(default)),
                                                  np.float32)
        width = self._features[default].shape
        X, y = [], []
        for row in history:
            try:
                x, t = row
                with np.errstate(over="ignore", invalid="ignore"):
                    v = np.asarray(x, np.float32)
                t = float(t)
            except (TypeError, ValueError, OverflowError):
                continue
            if v.shape == width and np.isfinite(v).all() and math.isfinite(t) and t >= 0:
                X.append(v)
                y.append(t)
        return (np.stack(X), np.asarray(y, np.float64)) if X else None

    def _scores(self, points):
        """Predicted scores (-inf for a point over budget or whose features flag a
        config that does not lower)."""
        vecs = [self._vector(p) for p in points]
        ok = [i for i, v in enumerate(vecs) if v is not None and not _failed(v)]
        out = np.full(len(points), -np.inf)
        if ok:
            out[ok] = self.model.predict(np.stack([vecs[i] for i in ok]))
        return out

    def _propose(self, n):
        self._budget = self.max_featurized
        if self.points:
            X = np.stack([self._vector_measured(p) for p in self.points])
            self.model.fit(X, self.throughputs, self.history)
        elif self.history is not None:
            self.model.fit(np.empty((0, self.history[0].shape[1])), [], self.history)
        if not self.model.fitted:
            return [(0,) * len(self.sizes)] + self._random(n - 1)
        n_random = int(self.epsilon * n + 0.5)
        first = [] if self.points else [(0,) * len(self.sizes)]
        pool = self._anneal()
        return first + self._pick(pool, n - n_random - len(first)) + self._random(n_random)

    def _vector_measured(self, p):
        """Features of a measured point: always computed, whatever the budget."""
        if p not in self._features:
            self._features[p] = np.asarray(self.featurize(self.config(p)), np.float32)
        return self._features[p]

    # -- the model optimiser --
    def _starts(self):
        """Chain starts: the best measured points, the last chains' ends, random points."""
        k = self.n_chains
        best = [self.points[i] for i in np.argsort(-self.throughputs, kind="stable")][:k // 2]
        starts = list(dict.fromkeys(best + self._ends[:k // 4]))
        return starts + self._random_any(k - len(starts))

    def _random_any(self, n):
        return [tuple(int(self.rng.integers(s)) for s in self.sizes) for _ in range(n)]

    def _neighbour(self, p):
        """p with one knob changed: an ordered knob mostly to an option next in value, a
        reorder mostly to a permutation one swap away, any knob sometimes to any option."""
        movable = [k for k, s in enumerate(self.sizes) if s > 1]
        if not movable:
            return p
        k = movable[int(self.rng.integers(len(movable)))]
        q, s, i = list(p), self.sizes[k], p[k]
        local = self.rng.random() < 0.75
        if local and self._orders[k]:
            order = self._orders[k]
            pos, step = order.index(i), 1 if self.rng.random() < 0.5 else -1
            if not 0 <= pos + step < s:
                step = -step
            q[k] = order[pos + step]
        elif local and self._reorders[k]:
            near = self._swaps(k, i)
            q[k] = near[int(self.rng.integers(len(near)))] if near else int(self.rng.integers(s))
        else:
            q[k] = (i + 1 + int(self.rng.integers(s - 1))) % s
        return tuple(q)

    def _swaps(self, k, i):
        """Options of reorder knob k that are one transposition away from option i."""
        if (k, i) not in self._swap_cache:
            a = self.options[k][i]
            self._swap_cache[(k, i)] = [j for j, b in enumerate(self.options[k])
                                        if sum(x != y for x, y in zip(a, b)) == 2]
        return self._swap_cache[(k, i)]

    def _anneal(self):
        """Parallel simulated annealing on the model's scores; returns every unproposed
        point it scored, with its score. What is left of a space that the budget covers
        is scored whole instead."""
        if self.size - len(self.proposed) <= self._budget:
            rest = [p for p in itertools.product(*map(range, self.sizes))
                    if p not in self.proposed]
            return dict(zip(rest, self._scores(rest)))
        cur = self._starts()
        cur_s = self._scores(cur)
        pool = {p: s for p, s in zip(cur, cur_s) if p not in self.proposed}
        spread = np.std(cur_s[np.isfinite(cur_s)]) if np.isfinite(cur_s).any() else 1.0
        spread = spread or 1.0
        for step in range(self.steps):
            temp = spread * (1.0 - step / self.steps) + 1e-9
            nxt = [self._neighbour(p) for p in cur]
            s = self._scores(nxt)
            for p, v in zip(nxt, s):
                if np.isfinite(v) and p not in self.proposed:
                    pool[p] = v
            with np.errstate(invalid="ignore", over="ignore"):
                take = (s >= cur_s) | (self.rng.random(len(s)) < np.exp((s - cur_s) / temp))
            take &= np.isfinite(s)
            cur = [q if t else p for p, q, t in zip(cur, nxt, take)]
            cur_s = np.where(take, s, cur_s)
            if self._budget <= 0 and step > self.steps // 4 and not take.any() or \
                    self._late():
                break
        self._ends = cur
        # every point featurized in an earlier round and still unproposed, scored by this
        # round's model in one call: candidates that cost no lowering
        rest = [p for p, v in self._features.items()
                if p not in pool and p not in self.proposed and not _failed(v)]
        if rest:
            pool.update(zip(rest, self.model.predict(np.stack([self._features[p]
                                                              for p in rest]))))
        return pool

    def _pick(self, pool, n):
        """n of the pool's best by score, skipping points that differ from one already
        picked in fewer than min_diff knobs (relaxed when too few are left)."""
        if n <= 0:
            return []
        ranked = sorted(pool, key=pool.get, reverse=True)[:max(self.plan_size, 2 * n)]
        picked = []
        for need in range(self.min_diff, -1, -1):
            for p in ranked:
                if len(picked) == n:
                    return picked
                if p not in picked and all(
                        sum(a != b for a, b in zip(p, q)) >= need for q in picked):
                    picked.append(p)
        return picked


def _failed(v):
    return bool(len(v)) and bool(np.all(v == FAILED))


def make(kind, space, featurize=None, seed=0, history=None) -> Tuner:
    """A tuner by name: "xgb", "random", "grid" or "ga"."""
    if kind == "xgb":
        return XGBTuner(space, featurize, seed, history=history)
    kinds = {"random": RandomTuner, "grid": GridTuner, "ga": GATuner}
    if kind not in kinds:
        raise ArgumentError(f"no tuner {kind!r}; the tuners: {', '.join(KINDS)}")
    return kinds[kind](space, seed)
