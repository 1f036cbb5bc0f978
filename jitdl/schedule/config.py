"""Knobs: a schedule function's `cfg` declares a config space and reads its current values.

A knob is typed (SplitKnob, ChoiceKnob, ReorderKnob) and knows its options; the space of
a schedule for some arguments is what running the schedule function records
(`f.config_space(*args)`): its size, its configs in order, random samples.
"""
from __future__ import annotations

import itertools
import math
import numbers
import random
from dataclasses import dataclass

import numpy as np

from jitdl.errors import ArgumentError, ArgumentValueError, ScheduleError, user_loc


class _Knob:
    def __len__(self):
        return len(self.options)


@dataclass(frozen=True)
class SplitKnob(_Knob):
    """The inner extent of a split of a loop of `extent` iterations."""
    name: str
    extent: int | None      # (None: a symbolic extent, known at the call)
    options: tuple
    default: int

    def check(self, v):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            of = "a loop of a size known at the call" if self.extent is None else \
                f"a loop of {self.extent}"
            return f"a positive int (a split factor of {of}), got {v!r}"
        return None


@dataclass(frozen=True)
class ChoiceKnob(_Knob):
    """One of `options`; the first is the default."""
    name: str
    options: tuple

    @property
    def default(self):
        return self.options[0]

    def check(self, v):
        if v not in self.options:
            return f"one of {list(self.options)}, got {v!r}"
        return None


@dataclass(frozen=True)
class ReorderKnob(_Knob):
    """An order of n loops, as a permutation of range(n); the identity is the default."""
    name: str
    n: int
    options: tuple

    @property
    def default(self):
        return self.options[0]

    def check(self, v):
        if not isinstance(v, (list, tuple)) or sorted(v) != list(range(self.n)):
            return f"a permutation of range({self.n}), got {v!r}"
        return None


class ConfigSpace:
    """The knobs of one schedule for one argument signature, in declaration order.

    len(space) is the number of configs; iterating yields each config as a dict of knob
    values (the default first); space.sample(n, seed=0) draws n distinct ones."""

    def __init__(self, knobs=()):
        self.knobs = {k.name: k for k in knobs}

    def add(self, knob):
        self.knobs[knob.name] = knob

    def __len__(self):
        n = 1
        for k in self.knobs.values():
            n *= len(k.options)
        return n

    def __iter__(self):
        names = list(self.knobs)
        for vals in itertools.product(*(k.options for k in self.knobs.values())):
            yield dict(zip(names, vals))

    def __contains__(self, name):
        return name in self.knobs

    def __getitem__(self, name):
        return self.knobs[name]

    def __bool__(self):
        return bool(self.knobs)

    @property
    def names(self):
        return list(self.knobs)

    def default(self) -> dict:
        return {n: k.default for n, k in self.knobs.items()}

    def sample(self, n, seed=0):
        """Up to n distinct configs: all of them when the space is that small, else drawn
        at random (reproducibly for a seed)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise ArgumentError(f"config_space.sample: argument 'n' must be an int, got "
                                f"{type(n).__name__} {n!r}", user_loc())
        if n < 0:       # (it returned [] where a count was meant)
            raise ArgumentValueError(f"config_space.sample: argument 'n' must be >= 0, got "
                                     f"{n}", user_loc())
        n = int(n)
        if len(self) <= n:
            return list(self)
        rng = random.Random(seed)
        seen, out = set(), []
        while len(out) < n:
            cfg = {name: rng.choice(k.options) for name, k in self.knobs.items()}
            key = tuple(map(repr, cfg.values()))
            if key not in seen:
                seen.add(key)
                out.append(cfg)
        return out

    def check(self, values, where="with_config"):
        """A ScheduleError for a knob name the space lacks or a value a knob refuses."""
        unknown = [n for n in values if n not in self.knobs]
        if unknown:
            known = ", ".join(self.knobs) or "none (the schedule declares no knobs)"
            raise ScheduleError(f"{where}: no knob named {', '.join(map(repr, unknown))}; "
                                f"the schedule's knobs: {known}")
        for n, v in values.items():
            why = self.knobs[n].check(_plain(f"{where}: knob {n!r}", v))
            if why:
                raise ScheduleError(f"{where}: knob {n!r} takes {why}")

    def __repr__(self):
        lines = [f"config space ({len(self)} configs)"]
        for k in self.knobs.values():
            opts = list(k.options)
            shown = opts if len(opts) <= 8 else opts[:8] + ["..."]
            lines.append(f"  {k.name}: {type(k).__name__[:-4].lower()} of {len(opts)}: "
                         f"{shown}")
        return "\n".join(lines)


def _plain(what, o):
    """A knob option as the tuning records and the kernel cache keep it (JSON): NumPy
    scalars as Python's, lists as tuples (as a record reads back); ScheduleError for a
    value they cannot keep (an enum, a dtype, bytes, a dict, NaN)."""
    if isinstance(o, (list, tuple)):
        return tuple(_plain(what, x) for x in o)
    if o is None or isinstance(o, (bool, str)):
        return o
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, numbers.Integral):
        return int(o)
    if isinstance(o, numbers.Real) and math.isfinite(o):
        return float(o)
    raise ScheduleError(f"{what}: an option must be a finite real number, a string, a bool, "
                        "None or a tuple of them (configs are kept in the tuning records "
                        f"and the kernel cache), got {type(o).__name__} {o!r:.60}",
                        user_loc())


def _distinct(options, what="cfg"):
    """Options without repeats (compared by repr: options may be tuples), in order, each
    made plain (_plain)."""
    seen, out = set(), []
    for o in (_plain(what, o) for o in options):
        if repr(o) not in seen:
            seen.add(repr(o))
            out.append(o)
    return tuple(out)


_POWERS = (1, 2, 4, 8, 16, 32, 64)     # split factors of a symbolic extent


def _split_candidates(extent):
    return tuple(sorted({f for f in (1, 2, 4, 8, 16, 32, 64) if f <= max(extent, 1)}
                        | {d for d in range(1, min(extent, 64) + 1) if extent % d == 0}))


def _default_factor(extent):
    for f in (16, 8, 32, 4, 2):
        if extent % f == 0 and extent > f:
            return f
    return 8 if extent > 8 else max(extent, 1)


class Config:
    """Knob values for one run of a schedule function; records the space as knobs are
    declared. Given values are checked against each knob's options."""

    def __init__(self, values=None, schedule=None):
        self.values = dict(values or {})
        self.used = {}                  # knob -> the value this run used
        self.space = ConfigSpace()
        self.schedule = schedule        # to look up the extents of the loops knobs name

    def _axis_extent(self, axis):
        ext = getattr(axis, "extent", None)
        if ext is None and hasattr(axis, "stage"):
            ext = self.schedule.stages[axis.stage].axes[axis.name].extent
        return ext

    def _value(self, knob):
        self.space.add(knob)
        v = self.values.get(knob.name, knob.default)
        if knob.name in self.values:
            v = _plain(f"knob {knob.name!r}", v)
            why = knob.check(v)
            if why:
                raise ScheduleError(f"knob {knob.name!r} takes {why}", user_loc())
        self.used[knob.name] = v
        return v

    def split(self, name, axis, candidates=None):
        """A split-factor knob for `axis` (a loop, or its extent): returns the factor to
        use. Any positive factor may be given; `candidates` (default: divisors and powers
        of two up to 64) are what a tuner tries, the first being the default."""
        ext = axis if isinstance(axis, int) else self._axis_extent(axis)
        if not isinstance(ext, int):     # a dynamic definition's symbolic extent (X_n0):
            ext = None                   # the factors of an extent known only at the call
        if candidates is not None:       # (a NumPy array too: it has no truth value)
            candidates = _distinct(candidates, f"cfg.split({name!r})")
        if candidates:
            options = candidates
        else:                             # the default first, as in every knob
            default = 8 if ext is None else _default_factor(ext)
            options = (default,) + tuple(c for c in (_POWERS if ext is None else
                                                     _split_candidates(ext)) if c != default)
        return self._value(SplitKnob(name, ext, options, options[0]))

    def choice(self, name, options):
        """A knob choosing one of `options` (the first is the default)."""
        options = _distinct(options, f"cfg.choice({name!r})")
        if not options:
            raise ScheduleError(f"cfg.choice({name!r}): no options", user_loc())
        return self._value(ChoiceKnob(name, options))

    def reorder(self, name, axes):
        """A knob choosing an order of `axes` (all permutations of up to 4 loops, else a
        sample); returns the loops in the chosen order. The given order is the default."""
        axes = list(axes)
        if len(axes) <= 4:
            perms = [tuple(p) for p in itertools.permutations(range(len(axes)))]
        else:
            rng = random.Random(len(axes))
            perms = [tuple(range(len(axes)))]
            while len(perms) < 24:
                p = list(range(len(axes)))
                rng.shuffle(p)
                if tuple(p) not in perms:
                    perms.append(tuple(p))
        perm = self._value(ReorderKnob(name, len(axes), tuple(perms)))
        return [axes[k] for k in perm]

    def __getitem__(self, name):
        return self.values[name]
