"""Knobs: a schedule function's `cfg` declares a config space and reads its current values."""
from __future__ import annotations

import itertools
import random

from jitdl.errors import ScheduleError, user_loc


def _split_candidates(extent):
    c = sorted({f for f in (1, 2, 4, 8, 16, 32, 64) if f <= max(extent, 1)}
               | {d for d in range(1, min(extent, 64) + 1) if extent % d == 0})
    return c


def _default_factor(extent):
    for f in (16, 8, 32, 4, 2):
        if extent % f == 0 and extent > f:
            return f
    return 8 if extent > 8 else max(extent, 1)


class Config:
    """Knob values for one schedule run; records the space as knobs are declared."""

    def __init__(self, values=None, schedule=None):
        self.values = dict(values or {})
        self.space = {}
        self.schedule = schedule        # to look up the extents of the loops knobs name

    def _axis_extent(self, axis):
        ext = getattr(axis, "extent", None)
        if ext is None and hasattr(axis, "stage"):
            ext = self.schedule.stages[axis.stage].axes[axis.name].extent
        return ext

    def split(self, name, axis, candidates=None):
        """A split-factor knob for `axis`: returns the factor to use."""
        ext = self._axis_extent(axis)
        options = list(candidates) if candidates else _split_candidates(ext)
        self.space[name] = options
        if name in self.values:
            return self.values[name]
        return _default_factor(ext) if not candidates else options[0]

    def choice(self, name, options):
        """A knob choosing one of `options` (the first is the default)."""
        options = list(options)
        if not options:
            raise ScheduleError(f"cfg.choice({name!r}): no options", user_loc())
        self.space[name] = options
        return self.values.get(name, options[0])

    def reorder(self, name, axes):
        """A knob choosing an order of `axes` (all permutations of up to 4 loops, else a
        sample); returns the loops in the chosen order. The given order is the default."""
        axes = list(axes)
        if len(axes) <= 4:
            perms = [list(p) for p in itertools.permutations(range(len(axes)))]
        else:
            rng = random.Random(len(axes))
            perms = [list(range(len(axes)))]
            while len(perms) < 24:
                p = list(range(len(axes)))
                rng.shuffle(p)
                if p not in perms:
                    perms.append(p)
        self.space[name] = perms
        perm = self.values.get(name, perms[0])
        return [axes[k] for k in perm]

    def __getitem__(self, name):
        return self.values[name]


def space_size(space):
    n = 1
    for opts in space.values():
        n *= len(opts)
    return n


def sample(space, count, seed=0):
    """Up to `count` distinct configs of the space, enumerated when small, else random."""
    names = list(space)
    if space_size(space) <= count:
        return [dict(zip(names, vals)) for vals in itertools.product(*space.values())]
    rng = random.Random(seed)
    seen, out = set(), []
    while len(out) < count:
        vals = tuple(rng.choice(space[n]) for n in names)
        if vals not in seen:
            seen.add(vals)
            out.append(dict(zip(names, vals)))
    return out
