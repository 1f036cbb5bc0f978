"""autotune="background": keys are tuned by one worker thread after their first call.

The thread only coordinates: candidates are built and timed in the runner's worker
processes, so the caller's threads keep running their kernels. Each verified kernel
faster than the one in use is put into the function's dispatch table with one dict
assignment: a call already running keeps the kernel object it fetched, the next call
gets the new one, and no caller ever waits for tuning. At interpreter exit the thread is
told to stop, the runner's processes are ended, and every trial so far is already in the
records (each is committed as it finishes, or, while another process holds the records'
write lock, queued and written at the job's end or at the stop: see Records.add_queued).
"""
from __future__ import annotations

import atexit
import logging
import math
import multiprocessing
import os
import queue
import re
import sys
import threading
import time
from dataclasses import dataclass, field

from jitdl import locks

log = logging.getLogger("jitdl.tune")


def parse_budget(text):
    """(trials, seconds) from JITDL_TUNE_BUDGET: "64" trials, "90s" or "2m" seconds, or
    both separated by a comma ("64,120s"); a part not given is None."""
    trials = seconds = None
    # (any whitespace, and units in any case: "64,\t90s" and "90S" were "cannot read")
    for part in re.sub(r"\s+", "", str(text)).lower().split(","):
        if not part:
            continue
        m = re.fullmatch(r"(\d+(?:\.\d+)?)(s|m|min|h)?", part)
        if m is None:
            raise ValueError(f"JITDL_TUNE_BUDGET: cannot read {part!r}; write trials "
                             "(\"64\"), seconds (\"90s\", \"2m\") or both (\"64,120s\")")
        value, unit = float(m.group(1)), m.group(2)
        if value == 0:                 # (a part of 0 would read as no limit at all)
            raise ValueError(f"JITDL_TUNE_BUDGET: {part!r} is no budget; give a positive "
                             "number of trials or seconds")
        if (trials if unit is None else seconds) is not None:
            # ("64,100" tuned 100 trials, "90s,2m" 2 minutes: the last part, silently)
            raise ValueError(f"JITDL_TUNE_BUDGET: {text!r} gives the "
                             f"{'trials' if unit is None else 'seconds'} twice; give each "
                             "at most once (\"64,120s\")")
        if unit is None:
            if not value.is_integer():     # ("0.5" read as 0 trials: the default alone)
                raise ValueError(f"JITDL_TUNE_BUDGET: {part!r} is no number of trials; "
                                 "give a whole number (\"64\"), or seconds (\"0.5s\")")
            trials = int(value)
        else:
            seconds = value * {"s": 1, "m": 60, "min": 60, "h": 3600}[unit]
    if trials is None and seconds is None:     # ("," would read as no limit at all)
        raise ValueError(f"JITDL_TUNE_BUDGET: {text!r} is no budget; give trials (\"64\"), "
                         "seconds (\"90s\") or both (\"64,120s\"), or leave it unset for "
                         "the default")
    return trials, seconds


@dataclass
class Job:
    """One key being tuned in the background, as f.tuning_status() shows it."""
    function: object = field(repr=False)
    key: tuple = field(repr=False)
    args: list = field(repr=False)
    call: str = ""
    state: str = "queued"           # queued, tuning, done, failed, stopped
    trials: int = 0
    failed: int = 0
    budget: tuple = (None, None)    # (trials, seconds)
    default_seconds: float | None = None
    best_seconds: float | None = None
    swaps: int = 0                  # kernels swapped into the dispatch table
    error: str | None = None
    started: float | None = None
    finished: float | None = None
    result: object = field(default=None, repr=False)

    def summary(self) -> dict:
        # (a run whose default failed has infinite times: they read as none)
        default, best = (s if s is not None and math.isfinite(s) else None
                         for s in (self.default_seconds, self.best_seconds))
        speedup = default / best if default and best else None
        return {"call": self.call, "state": self.state, "trials": self.trials,
                "failed": self.failed, "budget": {"trials": self.budget[0],
                                                   "seconds": self.budget[1]},
                "default_seconds": default, "best_seconds": best,
                "speedup": speedup, "swaps": self.swaps, "error": self.error,
                "elapsed": (None if self.started is None else
                            (self.finished or time.monotonic()) - self.started)}


class Background:
    """The process's background tuner: a queue of jobs and one daemon thread."""

    def __init__(self):
        from jitdl.autotune.measure import LocalRunner
        self._queue = queue.Queue()
        self._stop = threading.Event()
        self._thread = None
        # made before shutdown is registered with atexit, so that shutdown runs before the
        # runner's own exit hook (which would end its processes under a running round)
        self._runner = LocalRunner()
        self._pending = 0               # jobs submitted and not finished
        self._lock = locks.Lock()

    def submit(self, job):
        if in_daemon():
            # (a pool's worker: daemonic processes cannot start the runner's workers, and
            # each key's job failed with a warning)
            job.state, job.error, job.args = "stopped", "a daemonic process", None
            return
        with self._lock:
            if self._stop.is_set():
                return
            self._pending += 1
            self._queue.put(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="jitdl-tuner",
                                                daemon=True)
                self._thread.start()

    def _loop(self):
        while not self._stop.is_set():
            try:
                job = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            if self._stop.is_set():
                self._stopped(job)
                break
            try:
                self._run(job)
            finally:
                with self._lock:
                    self._pending -= 1
        self._drop_queued()

    def _stopped(self, job):
        """A job that will not run: the tuner stopped before it."""
        job.state, job.args = "stopped", None
        with self._lock:
            self._pending -= 1

    def _drop_queued(self):
        """Every job still queued is stopped, so that wait() after shutdown() (an atexit
        hook of the user's that runs after it) returns instead of waiting forever."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                return
            self._stopped(job)

    def _run(self, job):
        job.state, job.started = "tuning", time.monotonic()
        try:
            job.function._tune_job(job, self._runner, self._stop)
            job.state = "stopped" if self._stop.is_set() else "done"
        except Exception as e:         # noqa: BLE001 - a failed job never reaches the caller
            if self._stop.is_set():    # the runner was closed under it (interpreter exit)
                job.state = "stopped"
                return
            job.state, job.error = "failed", f"{type(e).__name__}: {e}"
            log.warning("background tuning of %s(%s) failed: %s",
                        getattr(job.function, "name", "?"), job.call, job.error)
        finally:
            job.finished = time.monotonic()
            job.args = None                # the copies of the call's arrays

    def wait(self, timeout=None):
        """Block until the queue is empty and no job runs (tests, benchmarks)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._pending == 0:
                return True
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.05)

    def shutdown(self, timeout=5.0):
        """Stop now: end the worker processes (the round in progress ends, its unfinished
        trials unrecorded) and let the thread finish."""
        self._stop.set()
        try:
            self._runner.close()
        except Exception:              # noqa: BLE001 - exiting anyway
            pass
        t = self._thread
        if t is not None and t.is_alive():
            t.join(timeout)
        self._drop_queued()
        # the records a job queued (another process writing) and did not flush, the
        # thread cut mid-job: written now, or counted in a warning (records' own exit hook
        # runs before this one where the records module was imported after it)
        records = sys.modules.get("jitdl.autotune.records")
        if records is not None:
            records.flush_all()


_background = None
_lock = locks.Lock()
_daemon_said = False            # the note that a daemonic process does not tune, given


def in_daemon() -> bool:
    """Whether this is a daemonic process (a multiprocessing pool's worker), which cannot
    start the runner's worker processes, so that autotune= ("background" or "foreground")
    does not tune here: the first time, one info note per process says so."""
    global _daemon_said
    if not multiprocessing.current_process().daemon:
        return False
    if not _daemon_said:
        _daemon_said = True
        log.info("autotuning is off in a daemonic process (a pool's worker): it cannot "
                 "start worker processes; the default kernels run")
    return True


def _after_fork_in_child():
    """The parent's tuner thread and its queue are not the child's: a forked child that
    submits a job gets a tuner of its own (its workers too, see measure.py)."""
    global _background
    _background = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def get() -> Background:
    global _background
    with _lock:
        if _background is None:
            _background = Background()
            atexit.register(_background.shutdown)
        return _background
