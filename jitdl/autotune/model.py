"""The cost model: gradient-boosted trees that rank candidates by predicted speed.

A ranking objective (XGBoost's rank:pairwise) learns which of two candidates is faster,
not their times: that is all the search needs, and it is unmoved by the scale of the
throughputs, so measurements of other shapes of a definition (whose GFLOP/s differ) can
be a prior group that teaches the order of their features. xgboost is imported when a
model is first fitted.
"""
from __future__ import annotations

import numpy as np

PARAMS = {
    "objective": "rank:pairwise",
    "lambdarank_pair_method": "mean",        # random pairs of each sample, not top-k
    "lambdarank_num_pair_per_sample": 8,
    "eta": 0.3,
    "max_depth": 5,
    "min_child_weight": 1e-3,
    "subsample": 1.0,
    "tree_method": "hist",
    "verbosity": 0,
}
ROUNDS = 50
THREADS = 1           # the data is small: more threads cost more than they save, and far
                      # more on a loaded machine (spinning workers)
PRIOR_HALF = 64       # measurements of the task's own after which a prior weighs half


class CostModel:
    """fit(X, y, prior=None) on features and throughputs (0 for failed trials), then
    predict(X): scores where higher means faster. Before any fit every score is 0."""

    def __init__(self, seed=0, rounds=ROUNDS, threads=THREADS):
        self.seed, self.rounds, self.threads = seed, rounds, threads
        self.booster = None

    def fit(self, X, y, prior=None):
        """Fit on the task's own (X, y), with `prior` = (X, y) of other shapes (transfer)
        as a second ranking group whose weight fades as the task's own data grows."""
        import xgboost
        groups = []
        if len(y):
            groups.append((np.asarray(X, np.float32), np.asarray(y, np.float64), 1.0))
        if prior is not None and len(prior[1]):
            weight = PRIOR_HALF / (PRIOR_HALF + len(y))
            groups.append((np.asarray(prior[0], np.float32), np.asarray(prior[1], np.float64),
                           weight))
        groups = [g for g in groups if np.ptp(g[1]) > 0]   # nothing to rank in a tie
        if not groups:
            self.booster = None
            return self
        data = xgboost.DMatrix(
            np.concatenate([g[0] for g in groups]),
            label=np.concatenate([g[1] / g[1].max() for g in groups]),
            qid=np.concatenate([np.full(len(g[1]), i) for i, g in enumerate(groups)]))
        data.set_weight(np.array([g[2] for g in groups], np.float32))   # one per group
        params = {**PARAMS, "seed": self.seed, "nthread": self.threads}
        self.booster = xgboost.train(params, data, self.rounds)
        return self

    @property
    def fitted(self):
        return self.booster is not None

    def predict(self, X) -> np.ndarray:
        X = np.asarray(X, np.float32)
        if self.booster is None or not len(X):
            return np.zeros(len(X))
        return np.asarray(self.booster.inplace_predict(X), np.float64)
