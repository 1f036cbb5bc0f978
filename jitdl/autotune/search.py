"""One tuning run: a tuner proposes configs, a runner measures them, until the budget
is spent; every trial is reported as it finishes, and the result says what was found.

The default config is always measured first, by the same runner, so that the speed-up
is against the kernel the user would otherwise get, timed the same way. A failed trial
(build error, crash, hang, wrong output) counts as a trial of zero throughput.
"""
from __future__ import annotations

import inspect
import json
import math
import time
from dataclasses import dataclass, field

BATCH = 8        # configs measured per round: enough to keep the builders busy
FINALISTS = 3    # the fastest configs measured again with the default before one is chosen
ROUNDS = 2       # ... in this many rounds, in alternating order
RESERVE = 0.25   # at most this share of a timeout is kept for that re-timing


def config_key(config) -> str:
    """A config as canonical text (dict order and tuple/list do not matter)."""
    return json.dumps(config, sort_keys=True, default=repr).replace("(", "[").replace(")", "]")


@dataclass
class TuneResult:
    """What a tuning run found. Unpacks as (config, seconds) too: `best, t = f.tune(...)`."""
    function: str
    call: str
    tuner: str
    unit: str                     # GFLOP/s or GB/s
    work: float                   # per call, in the unit's numerator (flop or byte)
    config: dict                  # the best verified config (the default's if none beat it)
    seconds: float                # its median seconds per call
    default_config: dict
    default_seconds: float
    elapsed: float                # seconds the run took
    measurements: list = field(default_factory=list, repr=False)   # every trial, in order
    stopped: str = ""             # why it stopped: "trials", "timeout", "space exhausted"...
    artifact: object = field(default=None, repr=False)   # the chosen config's kernel
    confirmed: dict = field(default_factory=dict, repr=False)   # config text -> re-timings

    def __iter__(self):
        yield self.config
        yield self.seconds

    @property
    def trials(self):
        return len(self.measurements)

    @property
    def failed(self):
        return sum(not m.ok for m in self.measurements)

    @property
    def speedup(self):
        """The default's seconds over the chosen config's (0.0 where neither ran)."""
        if not self.seconds or not math.isfinite(self.seconds):
            return 0.0
        return self.default_seconds / self.seconds

    @property
    def improved(self):
        return self.config != self.default_config and self.speedup > 1.0

    def throughput(self, seconds=None):
        s = self.seconds if seconds is None else seconds
        return self.work / s / 1e9 if s else 0.0

    def retimed(self):
        """[(config, median seconds)] of the default and the finalists that the end of
        the run timed again side by side (the default's first); [] where that did not
        decide (no finalist, stopped, the default failed when timed again)."""
        configs = {config_key(m.config): m.config for m in self.measurements}
        median = {k: sorted(v)[len(v) // 2] for k, v in self.confirmed.items()}
        default = config_key(self.default_config)
        if default not in median:
            return []
        return [(configs[k], median[k]) for k in sorted(median, key=lambda k: k != default)]

    def curve(self):
        """Best-so-far throughput after each trial."""
        best, out = 0.0, []
        for m in self.measurements:
            if m.ok and m.verified:
                best = max(best, self.throughput(m.seconds))
            out.append(best)
        return out

    def __repr__(self):
        def ms(s):
            return f"{s * 1e3:.3f} ms" if s and math.isfinite(s) else "-"
        cfg = ", ".join(f"{k}={v!r}" for k, v in self.config.items()) or "(no knobs)"
        first = self.measurements[0] if self.measurements else None
        default = (f"{ms(self.default_seconds)}  "
                   f"{self.throughput(self.default_seconds):.1f} {self.unit}")
        if not math.isfinite(self.default_seconds) and first is not None and first.error:
            default = f"failed: {first.error}"
        elif first is None and self.stopped in ("timeout", "stop"):
            # (cut short: no trial; "-  0.0 GFLOP/s" said nothing of why)
            default = ("not measured: the timeout passed before its build and timing ended"
                       if self.stopped == "timeout" else
                       "not measured: the run was stopped before its measurement ended")
        rows = [("function", f"{self.function}({self.call})"),
                ("tuner", f"{self.tuner}: {self.trials} trials ({self.failed} failed) in "
                          f"{self.elapsed:.1f} s, stopped by {self.stopped or '?'}"),
                ("default", default),
                ("best", f"{ms(self.seconds)}  {self.throughput():.1f} {self.unit}  "
                         f"({self.speedup:.2f}x the default)"),
                ("config", cfg)]
        w = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def _stop_reason(trials_left, deadline, stop, tuner):
    if trials_left <= 0:
        return "trials"
    if deadline is not None and time.monotonic() >= deadline:
        return "timeout"
    if stop is not None and stop.is_set():
        return "stop"
    if not tuner.has_next():
        return "space exhausted"
    return ""


def _cut(m):
    """Whether a measurement was cut short (a deadline, a closed runner): no trial."""
    return (m.error or "").startswith("stopped:")


def _measure(runner, task, configs, deadline):
    """runner.measure, with the deadline where the runner takes one (LocalRunner,
    DaskRunner; a user's runner without it ends its round)."""
    if deadline is not None and "deadline" in inspect.signature(runner.measure).parameters:
        return runner.measure(task, configs, deadline=deadline)
    return runner.measure(task, configs)


def search(task, trials, runner, tuner="xgb", timeout=None, seed=0, history=None,
           on_trial=None, on_better=None, stop=None, progress=False, call=""):
    """Tune `task` for up to `trials` trials (the default's measurement included; None: no
    limit) and `timeout` seconds, with the runner given. on_trial(n, measurement) sees every trial;
    on_better(measurement) each verified config faster than the best so far (and than the
    default); `stop` (a threading.Event) ends the run between rounds.

    The timeout holds for the whole run, the default's measurement and the closing
    re-timing (_confirm) included: a candidate still being built or timed when it
    passes is cancelled (its process killed and replaced; it is no trial and leaves no
    record), and the search's rounds end early enough to leave the re-timing its
    estimated time (at most RESERVE of the timeout). A runner that takes no deadline
    (a user's) ends the round it is in."""
    from jitdl.autotune import features
    from jitdl.autotune.task import REFERENCE_FAILED
    from jitdl.autotune.tuner import make
    t0 = time.monotonic()
    deadline = t0 + timeout if timeout else None
    per_config = [None]      # seconds per config of the last measure() of several

    def measure(configs, until):
        t = time.monotonic()
        ms = _measure(runner, task, configs, until)
        if len(configs) > 1 and not any(map(_cut, ms)) or per_config[0] is None:
            per_config[0] = (time.monotonic() - t) / len(configs)
        return ms

    def fits(end):
        """How many configs one round can measure before `end`: a round is built whole
        before any of it is timed, so a cut at the end of a full round measured none."""
        return int((end - time.monotonic()) / per_config[0])

    def search_end():
        """When the search's rounds must end: the deadline, less the re-timing's time."""
        if deadline is None:
            return None
        retime = ROUNDS * (1 + FINALISTS) * (per_config[0] or 0.0)
        return deadline - min(RESERVE * timeout, retime)
    default = task.space.default()
    kind = tuner if isinstance(tuner, str) else type(tuner).__name__
    bar = _bar(task, trials, progress)
    result = TuneResult(task.name, call, kind, task.unit, task.work[1], default, math.inf,
                        default, math.inf, 0.0)
    done = set()

    def record(batch, ms):
        for cfg, m in zip(batch, ms):
            if _cut(m):
                continue
            done.add(config_key(cfg))
            result.measurements.append(m)
            if on_trial is not None:
                on_trial(len(result.measurements), m)
            if m.ok and m.verified and m.seconds < result.seconds:
                result.config, result.seconds = cfg, m.seconds
                if on_better is not None and config_key(cfg) != config_key(default):
                    on_better(m)
            if bar is not None:
                bar.update(1)
                bar.set_postfix_str(f"{task.throughput(m.seconds):.1f} now, "
                                    f"{task.throughput(result.seconds):.1f} best {task.unit}",
                                    refresh=False)
    try:
        (m0,) = measure([default], deadline)
        m0.verified = m0.ok          # the reference itself
        record([default], [m0])
        if m0.ok:
            result.default_seconds = m0.seconds
        if isinstance(tuner, str):
            tuner = make(tuner, task.space, featurize=lambda c: features.of_config(task, c),
                         seed=seed, history=history)
        tuner.update([default], [m0])
        if (m0.error or "").startswith(REFERENCE_FAILED):
            # every candidate would fail as it did (nothing to check them against): a
            # background job spent its whole budget on such failures
            result.stopped = "the default's failure"
        idle = 0                 # rounds whose proposals were all measured already
        while not result.stopped:
            left = math.inf if trials is None else trials - len(result.measurements)
            result.stopped = _stop_reason(left, search_end(), stop, tuner)
            if result.stopped:
                break
            want = int(min(BATCH, left))
            end = search_end()
            if end is not None and per_config[0]:
                want = max(1, min(want, fits(end)))
            if hasattr(tuner, "deadline"):
                # the model's search for a round takes at most about the time the round's
                # measurement will (it took 6-9 s a round here, as long as the round); none
                # without a timeout (a tuner reused from a run with one kept its deadline,
                # long past, and proposed unsearched configs)
                tuner.deadline = None if end is None else min(
                    end, time.monotonic() + max(1.0, want * (per_config[0] or 0.0)))
            batch = [c for c in tuner.next_batch(want) if config_key(c) not in done]
            if end is not None and per_config[0] and len(batch) > fits(end):
                n = max(1, fits(end))        # (the model's search took time too)
                if hasattr(tuner, "proposed"):
                    for c in batch[n:]:
                        tuner.proposed.discard(tuner.point(c))
                batch = batch[:n]
            if not batch:
                idle += 1
                if idle >= 3:
                    result.stopped = "space exhausted"
                    break
                continue
            idle = 0
            ms = measure(batch, search_end())
            kept = [(c, m) for c, m in zip(batch, ms) if not _cut(m)]
            tuner.update([c for c, _ in kept], [m for _, m in kept])
            record(batch, ms)
            for c, m in zip(batch, ms):
                if _cut(m) and hasattr(tuner, "proposed"):   # never measured: proposable
                    tuner.proposed.discard(tuner.point(c))
            if ms and not kept:          # the round was cut short at its start
                result.stopped = "stop" if stop is not None and stop.is_set() else "timeout"
                break
        if not (stop is not None and stop.is_set()):
            _confirm(task, runner, result, deadline)
    finally:
        if bar is not None:
            bar.close()
        result.elapsed = time.monotonic() - t0
    if not math.isfinite(result.seconds):        # nothing ran, not even the default
        result.seconds = result.default_seconds
    return result


def _confirm(task, runner, result, deadline=None):
    """Choose between the fastest configs and the default by timing them again, together
    and in alternating order: the fastest of many noisy single measurements is likely
    one measured too fast (the winner's curse), and a config only replaces the default if
    it is faster when both are timed side by side. Sets result.config, seconds,
    default_seconds and artifact; the re-timings are not trials. A finalist the
    `deadline` cut before it was timed again is not judged; where that leaves the
    default no finalist to be timed against, the search's choice stands."""
    default = config_key(result.default_config)
    best = {}
    for m in result.measurements:
        k = config_key(m.config)
        if m.ok and m.verified and k != default and (k not in best or
                                                     m.seconds < best[k].seconds):
            best[k] = m
    finalists = sorted(best.values(), key=lambda m: m.seconds)[:FINALISTS]
    if not finalists:
        return
    configs = [result.default_config] + [m.config for m in finalists]
    times, arts, cut = {}, {}, False
    for r in range(ROUNDS):
        if deadline is not None and time.monotonic() >= deadline:
            break
        order = configs if r % 2 == 0 else configs[::-1]
        for cfg, m in zip(order, _measure(runner, task, order, deadline)):
            cut = cut or _cut(m)
            if m.ok and m.verified:
                times.setdefault(config_key(cfg), []).append(m.seconds)
                arts[config_key(cfg)] = m.artifact
    if cut and len(times) < 2:
        # the deadline came before a finalist was timed again: the default timed alone
        # won against finalists that were not (and its "confirm" record made a later
        # process apply it), or the default's own re-timing was cut
        return
    result.confirmed = times
    if default not in times:             # the default failed now: keep what the search saw
        return
    median = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    result.default_seconds = median[default]
    win = min(configs, key=lambda c: median.get(config_key(c), math.inf))
    result.config, result.seconds = win, median[config_key(win)]
    result.artifact = arts.get(config_key(win))


def _bar(task, trials, progress):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=trials, desc=f"tuning {task.name}", unit="trial", leave=True,
                dynamic_ncols=True)
