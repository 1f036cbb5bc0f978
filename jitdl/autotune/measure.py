"""Runners: build a Task's candidate configs in parallel, verify and time them one at a
time, in worker processes; every failure is a failed Measurement, never an exception.

A candidate goes through two stages, each in a process of its own kind:

    build   pipeline.lower with the config, features of the lowered function, then
            pipeline.build -> Artifact (n_parallel spawned processes at once)
    time    load the kernel; check its output against the default config's kernel (the
            reference) on fresh random inputs; time it on the task's own arguments
            (one spawned process, never while a build runs: builds would steal its core)

What goes wrong in a stage becomes the Measurement's error: "build: ..." (the pipeline
raised), "crash: ..." (the process died: a segfault, an abort), "timeout: ..." (the
process was killed after `timeout` seconds and replaced), "run: ..." (loading or
calling the kernel raised), "wrong output: ..." (it differs from the reference).

The Task is pickled (cloudpickle; the user's own modules by value, so a schedule
function from __main__ or a test file unpickles in a fresh process) and sent to each
process once, not with every candidate. Processes live until close() or the
interpreter's exit; one that dies or hangs is replaced by a fresh one.

DaskRunner submits the same two stages to a dask.distributed cluster.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import signal
import sys
import sysconfig
import time
import weakref
import zlib
from multiprocessing.connection import wait as wait_for

import numpy as np

from jitdl import locks
from jitdl.autotune.task import REFERENCE_FAILED, Measurement
from jitdl.config import cores

_START_TIMEOUT = 120.0        # seconds a fresh process may take to import jitdl


# -- the work of each stage (run in worker processes, local or dask) --------------------

def build(task, config, post_build=None):
    """Build one candidate: (Artifact, features or None, seconds). `post_build(task,
    config, artifact) -> artifact`, when given, replaces the artifact (a test hook)."""
    from jitdl import pipeline
    t0 = time.perf_counter()
    low = pipeline.lower(task.graph, task.target, task.options,
                         schedule_fn=task.schedule_fn, config=config)
    features = _features(low, task.target)
    art = pipeline.build(low, task.target, task.options)
    if art.launch is not None and not art.obj:      # CUDA: NVRTC here, in parallel
        from jitdl.runtime import cuda
        art = dataclasses.replace(art, obj=cuda.backend().compile(
            art.texts["cuda"], art.launch["arch"], task.options.strict_fp))
    if post_build is not None:
        art = post_build(task, config, art)
    return art, features, time.perf_counter() - t0


def _features(low, target):
    try:
        from jitdl.autotune import features
    except ImportError:          # the features module is optional for measuring
        return None
    return list(features.extract(low.funcs["lower"], target))


def fresh_inputs(args, seed=0, widen=True):
    """Random arguments like `args`: floats uniform within each array's finite min and
    max (a constant array's, np.ones or np.zeros, from its value away from zero by one
    or its magnitude, toward zero where that leaves the dtype's range: constant inputs
    would let a kernel that reads the wrong elements, or none, match the reference),
    integers uniform in its [min, max] (so indices read from data stay valid; a constant
    array's, with `widen`, from its value to zero, [0, 1] for zeros: see _Bench), bools
    random; scalars and other values as given."""
    rng = np.random.default_rng(seed)
    out = []
    for a in args:
        if not isinstance(a, np.ndarray) or a.size == 0:
            out.append(a)
        elif a.dtype == np.bool_:
            out.append(np.asarray(rng.random(a.shape) < 0.5))   # (0-d: an array too)
        elif np.issubdtype(a.dtype, np.integer):
            lo, hi = int(a.min()), int(a.max())
            if widen and lo == hi:
                lo, hi = min(lo, 0), max(hi, 0) if hi else 1
            out.append(rng.integers(lo, hi, a.shape, a.dtype, endpoint=True))
        elif np.issubdtype(a.dtype, np.floating):
            finite = a[np.isfinite(a)]
            lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
            if lo == hi:
                # away from zero (its sign kept: -0.5 went to [-0.5, 0.5]), toward it
                # where away would pass the dtype's range (np.full of 1e308 made uniform()
                # raise OverflowError, of float16 40000 gave infinities)
                w, top = max(1.0, abs(lo)), float(np.finfo(a.dtype).max)
                if lo >= 0:
                    lo, hi = (lo, lo + w) if lo + w <= top else (lo - w, lo)
                else:
                    lo, hi = (lo - w, lo) if lo - w >= -top else (lo, lo + w)
            if math.isfinite(hi - lo):
                out.append(rng.uniform(lo, hi, a.shape).astype(a.dtype))
            else:       # a range wider than the largest float (uniform() would raise)
                u = rng.random(a.shape)
                out.append((lo * (1.0 - u) + hi * u).astype(a.dtype))
        else:
            out.append(a.copy())
    return out


SAMPLE = 1 << 16     # elements of an array that a Sketch reads its range from


@dataclasses.dataclass(frozen=True)
class Sketch:
    """What background tuning keeps of an array argument until its job runs, in place of
    the caller's array (which it kept: a GPU array by reference, so a change the caller
    made before the job ran was what the tuning saw, and a large one stayed alive; a NumPy
    array as a whole copy): its shape, dtype, whether it is on the GPU, and the range of
    its values that fresh_inputs reads (ints' min and max, floats' finite ones; None: a
    bool array, an empty one, or no finite value)."""
    shape: tuple
    dtype: np.dtype
    device: bool = False
    low: object = None
    high: object = None

    @classmethod
    def of(cls, a, to_host=None):
        """The sketch of a NumPy array, or of a GPU array given `to_host` (its backend's
        copy to the host). The range is read from a strided sample of at most about
        SAMPLE elements, so a large array costs the caller's first call little (a GPU one
        was copied whole to the host): a range within the array's own serves the
        synthetic inputs as well, an index array's staying in bounds."""
        shape = tuple(int(d) for d in a.shape)
        if a.size > SAMPLE:
            per = SAMPLE ** (1.0 / len(shape))
            a = a[tuple(slice(None, None, max(1, math.ceil(n / per))) for n in shape)]
        if to_host is not None:
            a = to_host(a)
        lo = hi = None
        if a.size and a.dtype != np.bool_:
            if np.issubdtype(a.dtype, np.integer):
                lo, hi = int(a.min()), int(a.max())
            elif np.issubdtype(a.dtype, np.floating):
                finite = a[np.isfinite(a)]
                if finite.size:
                    lo, hi = float(finite.min()), float(finite.max())
        return cls(shape, a.dtype, to_host is not None, lo, hi)

    def array(self, seed=0):
        """A NumPy array of this shape and dtype whose values span the range: uniform in
        it (bools at random), the value itself where the array was constant."""
        rng = np.random.default_rng(seed)
        if self.dtype == np.bool_:
            return np.asarray(rng.random(self.shape) < 0.5)    # (0-d: an array too)
        if self.low is None:
            return np.zeros(self.shape, self.dtype)
        if self.low == self.high:
            return np.full(self.shape, self.low, self.dtype)
        if np.issubdtype(self.dtype, np.integer):
            return rng.integers(self.low, self.high, self.shape, self.dtype, endpoint=True)
        u = rng.random(self.shape)
        out = (self.low * (1.0 - u) + self.high * u).astype(self.dtype)
        out.flat[:2] = (self.low, self.high)[:out.size]       # the range's ends
        return out


# relative tolerance per output dtype; the absolute one is it times the reference's
# largest magnitude (a reordered float32 sum of K terms errs by ~sqrt(K) ulps of its terms)
_RTOL = {np.dtype(np.float32): 1e-4, np.dtype(np.float64): 1e-9}


def differs(ref, got) -> str | None:
    """Why outputs `got` differ from `ref` (None when they match): floats within a
    relative tolerance by dtype, NaN where the reference has NaN; others exactly."""
    refs = ref if isinstance(ref, tuple) else (ref,)
    gots = got if isinstance(got, tuple) else (got,)
    if len(refs) != len(gots):
        return f"{len(gots)} outputs, the reference has {len(refs)}"
    for n, (r, g) in enumerate(zip(refs, gots)):
        r, g = np.asarray(r), np.asarray(g)
        if r.shape != g.shape or r.dtype != g.dtype:
            return (f"output {n} is {g.dtype}{list(g.shape)}, the reference's "
                    f"{r.dtype}{list(r.shape)}")
        rtol = _RTOL.get(r.dtype)
        if rtol is None:
            bad = r != g
        else:
            finite = np.isfinite(r)
            scale = float(np.abs(r[finite]).max()) if finite.any() else 0.0
            with np.errstate(invalid="ignore"):
                bad = ~np.isclose(g, r, rtol=rtol, atol=rtol * scale, equal_nan=True)
        if bad.any():
            at = tuple(int(x) for x in np.argwhere(bad)[0])
            return (f"output {n} differs at {list(at)} ({int(bad.sum())} of {bad.size} "
                    f"elements): {g[at].item()!r}, the reference {r[at].item()!r}")
    return None


def _load(art, target=None):
    """The kernel of an artifact, loaded in this process (a CUDA one on the current GPU),
    with the texts that inspection reads (f.lower, f.llvm_ir, f.asm, f.cuda_source: a
    kernel swapped in by background tuning is inspected as any other)."""
    if art.launch is not None:
        from jitdl.runtime import cuda
        binary = art.obj or cuda.backend().compile(art.texts["cuda"], art.launch["arch"])
        return cuda.CudaKernel(art.signature, art.launch, binary, _texts(art, "cuda"),
                               target=target)
    from jitdl.runtime import engine
    from jitdl.runtime.kernel import Kernel
    return Kernel(art.signature, engine.Loaded(art.obj, art.signature.symbol),
                  _texts(art, "llvm_ir", "llvm_ir_unoptimized"))


def _texts(art, *names):
    return {k: art.texts[k] for k in ("loop_ir", *names) if k in art.texts}


def _to_device(task, values):
    """A GPU task's arrays on the GPU (tasks carry host copies: they pickle anywhere)."""
    if task.target.name != "cuda":
        return values
    from jitdl.runtime import cuda
    dev = cuda.backend()
    return [dev.from_host(a) if isinstance(a, np.ndarray) else a for a in values]


def _to_host(result):
    from jitdl.runtime import cuda
    if isinstance(result, tuple):
        return tuple(_to_host(r) for r in result)
    return cuda.backend().to_host(result) if cuda.is_device_array(result) else result


class _Bench:
    """What the timing process keeps per task: the reference kernel's outputs on fresh
    inputs, or on the call's own where it fails on those (or why it failed on both)."""

    def __init__(self, task):
        from jitdl import pipeline
        from jitdl.runtime import engine
        engine.set_num_threads(task.options.num_threads)   # as in the tuning process
        self.task, self.error = task, None
        seed = zlib.crc32(task.key.encode())
        try:
            self.args = _to_device(task, task.args)
            art = pipeline.compile(task.graph, task.target, task.options,
                                   schedule_fn=task.schedule_fn, config=task.space.default())
            reference = _load(art, task.target)
            tries = [lambda: fresh_inputs(task.args, seed)]
            if any(_constant_int(a) for a in task.args):
                # a constant integer array made to vary (or a wrong candidate reading it
                # where a right one reads another element would pass) may be an index
                # that only its value keeps in range: then it stays as the user gave it
                tries.append(lambda: fresh_inputs(task.args, seed, widen=False))
            # arrays drawn each on its own break what holds between them (X[idx[i] +
            # off[i]] with idx + off in range, each alone not): every candidate failed
            # as the reference did, and the definition could not be tuned at all. The
            # call's integer arrays then (fresh floats: a wrong candidate still shows),
            # and last all its arrays, which the default ran on
            tries.append(lambda: [a if _int_array(a) else b for a, b in
                                  zip(task.args, fresh_inputs(task.args, seed))])
            tries.append(lambda: task.args)
            for n, make in enumerate(tries):
                try:
                    self.inputs = _to_device(task, make())
                    self.expected = _to_host(reference(self.inputs))
                    break
                except Exception:    # noqa: BLE001 - out of range, perhaps: see above
                    if n + 1 == len(tries):
                        raise
        except Exception as e:       # noqa: BLE001 - reported with every candidate
            self.error = f"{REFERENCE_FAILED}: {_text(e)}"

    def run(self, art, repeat, min_repeat_ms):
        """(seconds per call, None) or (None, error) for one candidate."""
        if self.error:
            return None, self.error
        try:
            kernel = _load(art, self.task.target)
            got = _to_host(kernel(self.inputs))
        except Exception as e:       # noqa: BLE001
            return None, f"run: {_text(e)}"
        why = differs(self.expected, got)
        if why:
            return None, f"wrong output: {why}"
        try:
            return _time(kernel, self.args, repeat, min_repeat_ms / 1e3), None
        except Exception as e:       # noqa: BLE001
            return None, f"run: {_text(e)}"


def _int_array(a):
    return (isinstance(a, np.ndarray) and a.dtype != np.bool_
            and np.issubdtype(a.dtype, np.integer))


def _constant_int(a):
    return _int_array(a) and a.size and a.min() == a.max()


def _time(kernel, args, repeat, min_repeat_s):
    """Median seconds per call over `repeat` repeats of `number` calls, each repeat
    lasting at least min_repeat_s, after one warm-up call (a GPU kernel's repeats end
    with the device synchronised)."""
    sync = getattr(kernel, "synchronize", None) or (lambda: None)
    kernel(args)
    sync()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            kernel(args)
        sync()
        took = time.perf_counter() - t0
        if took >= min_repeat_s:
            break
        number = max(number * 2, int(number * 1.2 * min_repeat_s / max(took, 1e-9)))
    times = [took / number]
    for _ in range(repeat - 1):
        t0 = time.perf_counter()
        for _ in range(number):
            kernel(args)
        sync()
        times.append((time.perf_counter() - t0) / number)
    return float(np.median(times))


def _text(e):
    return f"{type(e).__name__}: {(str(e).splitlines() or [''])[0]}"


# -- pickling the task ---------------------------------------------------------------------

def _library_dirs():
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    return tuple(os.path.realpath(d) + os.sep for d in dirs)


def _own_modules(*objs):
    """The modules of the user's functions among `objs` (neither jitdl nor installed
    libraries): a fresh process may not import them by name, so they go by value."""
    libs = _library_dirs()
    found = []
    for obj in objs:
        name = getattr(obj, "__module__", None)
        mod = sys.modules.get(name) if name else None
        if mod is None or name == "__main__" or name.split(".")[0] == "jitdl":
            continue
        path = getattr(mod, "__file__", None)
        if path is None or os.path.realpath(path).startswith(libs) or mod in found:
            continue
        found.append(mod)
    return found


def dumps_task(task, post_build=None) -> bytes:
    """cloudpickle of (task, post_build), the user's own modules pickled by value."""
    import cloudpickle
    registered = set(cloudpickle.list_registry_pickle_by_value())
    added = [m for m in _own_modules(task.schedule_fn, post_build)
             if m.__name__ not in registered]
    for m in added:
        cloudpickle.register_pickle_by_value(m)
    try:
        return cloudpickle.dumps((task, post_build))
    except Exception as e:      # noqa: BLE001 - whatever a value's __reduce__ raises
        from jitdl.errors import ScheduleError, user_loc
        what = (f"its schedule function {getattr(task.schedule_fn, '__qualname__', '?')}"
                if task.schedule_fn is not None else "its definition")
        raise ScheduleError(
            f"{task.name}: cannot send {what} to the tuning worker processes: {_text(e)}; "
            "a value it reads (a global, a closure variable) must pickle with cloudpickle",
            user_loc()) from None
    finally:
        for m in added:
            cloudpickle.unregister_pickle_by_value(m)


# -- local worker processes ----------------------------------------------------------------

def _serve(conn):
    """A worker process: ("task", id, blob) loads a task; ("build", config) and ("time",
    artifact, repeat, min_repeat_ms) run a stage and reply ("ok", result) or ("error",
    text)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)    # Ctrl-C is the parent's to handle
    import cloudpickle

    def send(message):
        try:
            conn.send(message)
        except OSError:         # the parent is gone (it exited while this one started)
            raise SystemExit(0) from None   # (quietly: no traceback on the user's terminal)

    from jitdl import pipeline  # noqa: F401 - imported before "ready", not per job
    send(("ready", os.getpid()))
    task = post_build = bench = load_error = None
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):            # the parent is gone
            return
        if msg[0] == "task":
            bench = load_error = None
            try:
                task, post_build = cloudpickle.loads(msg[2])
            except Exception as e:      # noqa: BLE001 - reported with each candidate
                load_error = f"cannot load the task in a worker process: {_text(e)}"
            continue
        if load_error:
            send(("error", f"{'build' if msg[0] == 'build' else 'run'}: {load_error}"))
        elif msg[0] == "build":
            try:
                send(("ok", build(task, msg[1], post_build)))
            except Exception as e:      # noqa: BLE001 - (send's SystemExit is not one)
                send(("error", f"build: {_text(e)}"))
        else:
            if bench is None:
                bench = _Bench(task)
            t0 = time.perf_counter()
            seconds, error = bench.run(*msg[1:])
            send(("error", error) if error else ("ok", (seconds, time.perf_counter() - t0)))


_start_lock = locks.Lock()


@contextlib.contextmanager
def _main_hidden():
    """Start a spawned process without it importing the user's __main__: a worker needs
    nothing from it (the task arrives by cloudpickle), and a script without an
    `if __name__ == "__main__":` guard would otherwise run again in every worker, start
    workers of its own and fail (multiprocessing's bootstrapping error)."""
    main = sys.modules.get("__main__")
    with _start_lock:
        if main is None:
            yield
            return
        missing = object()
        saved = {k: main.__dict__.get(k, missing) for k in ("__spec__", "__file__")}
        main.__spec__ = None
        main.__dict__.pop("__file__", None)
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is missing:
                    main.__dict__.pop(k, None)
                else:
                    main.__dict__[k] = v


class _Proc:
    """One spawned worker process and its end of the pipe."""

    def __init__(self, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child,), daemon=True,
                                name="jitdl-tune-worker")
        self.started = time.perf_counter()
        with _main_hidden():
            self.proc.start()
        child.close()
        self.ready = False
        self.task_id = None          # the task this process has loaded
        self.job = None              # the index of the job in flight
        self.deadline = None

    def kill(self):
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def death(self):
        code = self.proc.exitcode
        if code is not None and code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"


_STOPPED = "stopped: the runner was closed"
_CUT = "stopped: the tuning deadline passed"


class _Pool:
    """Processes that run jobs of one stage; one that dies or exceeds its time is
    replaced, and its job is a failed one. close() from another thread (interpreter exit,
    background tuning stopping) ends a run at once: its unfinished jobs fail as stopped."""

    def __init__(self, ctx, size, what):
        self.ctx, self.size, self.what = ctx, size, what
        self.procs = []
        self.start_s = []            # seconds each process took to become ready
        self.closed = False          # until the next LocalRunner.measure()
        self._lock = locks.Lock()
        _pools.add(self)

    def start(self):
        while len(self.procs) < self.size:
            self.procs.append(_Proc(self.ctx))

    def close(self):
        with self._lock:
            self.closed = True
            procs, self.procs = self.procs, []
        for p in procs:
            p.kill()

    def _replace(self, k):
        """A fresh process in place of the k-th (none once closed)."""
        with self._lock:
            if not self.closed:
                self.procs[k] = _Proc(self.ctx)

    def run(self, jobs, task_id, blob, timeout, first_extra=0.0, deadline=None):
        """Run `jobs` (messages) -> [("ok", result) | ("error", text)] in their order.
        A process that has not loaded the task gets it first and `first_extra` more
        seconds for that job. At `deadline` (time.monotonic()) the jobs in flight are
        cancelled (their processes killed and replaced) and those not started are not:
        both fail as _CUT."""
        try:
            return self._run(jobs, task_id, blob, timeout, first_extra, deadline)
        except BaseException:        # e.g. Ctrl-C: no reply may reach a later call
            for k, p in enumerate(self.procs):
                if p.job is not None:
                    p.kill()
                    self._replace(k)
            raise

    def _run(self, jobs, task_id, blob, timeout, first_extra, deadline):
        results = [None] * len(jobs)
        todo = list(range(len(jobs)))[::-1]
        failed_starts = 0
        cut = None if deadline is None else \
            time.perf_counter() + (deadline - time.monotonic())
        if not self.closed:
            self.start()
        while todo or any(p.job is not None for p in self.procs):
            procs = self.procs
            if self.closed or not procs:
                break
            if cut is not None and time.perf_counter() >= cut:
                for i in todo:
                    results[i] = ("error", _CUT)
                todo = []
                for k, p in enumerate(procs):
                    if p.job is not None:
                        results[p.job] = ("error", _CUT)
                        p.kill()
                        self._replace(k)
                break
            for k, p in enumerate(procs):
                if p.ready and p.job is None and todo:
                    i = todo.pop()
                    limit = timeout
                    try:
                        if p.task_id != task_id:
                            p.conn.send(("task", task_id, blob))
                            p.task_id, limit = task_id, timeout + first_extra
                        p.conn.send(jobs[i])
                    except OSError:     # it died while idle: a fresh one takes the job
                        todo.append(i)
                        p.kill()
                        self._replace(k)
                        continue
                    p.job, p.deadline = i, time.perf_counter() + limit
            ends = [p.deadline if p.ready else p.started + _START_TIMEOUT
                    for p in procs if p.job is not None or not p.ready]
            if cut is not None:
                ends.append(cut)
            try:
                ready = wait_for([p.conn for p in procs] + [p.proc.sentinel for p in procs],
                                 max(0.0, min(ends) - time.perf_counter()) if ends else None)
            except OSError:              # closed under the wait
                continue
            now = time.perf_counter()
            for k, p in enumerate(list(procs)):
                lost = None
                if p.conn in ready:
                    try:
                        msg = p.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is None:
                        p.proc.join(5)
                        lost = f"crash: the {self.what} process died ({p.death()})"
                    elif msg[0] == "ready":
                        p.ready = True
                        self.start_s.append(now - p.started)
                    else:
                        results[p.job], p.job = msg, None
                elif p.proc.sentinel in ready:
                    p.proc.join(5)
                    lost = f"crash: the {self.what} process died ({p.death()})"
                elif p.ready and p.job is not None and now >= p.deadline:
                    lost = f"timeout: the {self.what} took more than {timeout:g} s"
                elif not p.ready and now >= p.started + _START_TIMEOUT:
                    lost = f"crash: a {self.what} process did not start in {_START_TIMEOUT:g} s"
                if lost is None:
                    continue
                if self.closed:
                    lost = _STOPPED
                p.kill()
                if p.job is not None:
                    results[p.job] = ("error", lost)
                elif not p.ready:
                    failed_starts += 1
                    if failed_starts >= 3:       # the environment is broken: say so
                        for i in todo:
                            results[i] = ("error", f"{lost} (3 starts failed)")
                        todo = []
                self._replace(k)
        return [r or ("error", _STOPPED) for r in results]

    def pids(self):
        return [p.proc.pid for p in self.procs]


_pools = weakref.WeakSet()


def _forget_parents_workers():
    """In a forked child: the pools' processes are the parent's, and so are their pipes.
    The child starts its own when it measures, and never ends the parent's (nor does
    multiprocessing's exit hook, which would terminate them as the child's children)."""
    import multiprocessing.process as mp_process
    children = getattr(mp_process, "_children", None)
    for pool in list(_pools):
        for p in pool.procs:
            if children is not None:
                children.discard(p.proc)
        pool.procs = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parents_workers)


def _shutdown(*pools):
    for pool in pools:
        pool.close()


def _check_arguments(runner, n_parallel=None, repeat=5, **seconds):
    """An ArgumentError, at the user's line, for a runner's argument of the wrong kind (a
    timeout of 0 or less failed every candidate as a timeout; a string a TypeError;
    repeat=2.5 or '3' was read as int(...) and None was a bare TypeError)."""
    from jitdl.errors import ArgumentError, user_loc

    def number(v):
        return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    for arg, value in seconds.items():
        optional, ms = arg == "build_timeout", arg == "min_repeat_ms"
        if optional and value is None or number(value) and math.isfinite(value) and (
                value >= 0 if ms else value > 0):
            continue
        expected = ("a number of milliseconds >= 0" if ms else
                    f"{'None or ' if optional else ''}a positive number of seconds")
        raise ArgumentError(f"jd.tune.{runner}({arg}=...): expected {expected}, got "
                            f"{type(value).__name__}: {value!r}", user_loc())
    if n_parallel is not None and not (isinstance(n_parallel, (int, np.integer))
                                       and not isinstance(n_parallel, bool)
                                       and n_parallel >= 1):
        raise ArgumentError(f"jd.tune.{runner}(n_parallel=...): expected None or a positive "
                            f"int, got {type(n_parallel).__name__}: {n_parallel!r}",
                            user_loc())
    if not (isinstance(repeat, (int, np.integer)) and not isinstance(repeat, bool)
            and repeat >= 1):
        raise ArgumentError(f"jd.tune.{runner}(repeat=...): expected a positive int, got "
                            f"{type(repeat).__name__}: {repeat!r}", user_loc())


class LocalRunner:
    """Builds candidates in `n_parallel` spawned processes (default: the cores this
    process may run on), then verifies and times them one at a time in one more. `timeout` bounds one
    candidate's run (verify and time), `build_timeout` its build (default: `timeout`).
    `repeat` repeats of calls lasting at least `min_repeat_ms` each; the time is their
    median per call.

    `_post_build(task, config, artifact) -> artifact` runs in the build process after
    each build: a test hook that plants a candidate whose kernel is wrong or crashes."""

    def __init__(self, n_parallel=None, timeout=10.0, repeat=5, min_repeat_ms=40,
                 build_timeout=None, _post_build=None):
        import multiprocessing
        _check_arguments("LocalRunner", n_parallel, repeat, timeout=timeout,
                         build_timeout=build_timeout, min_repeat_ms=min_repeat_ms)
        ctx = multiprocessing.get_context("spawn")
        # (the cores this process may run on: os.cpu_count() counts the machine's, and
        # under taskset or a container's CPU set it started a build process for each)
        self.n_parallel = max(1, n_parallel or cores())
        self.timeout = float(timeout)
        self.build_timeout = float(build_timeout if build_timeout is not None else timeout)
        self.repeat, self.min_repeat_ms = int(repeat), float(min_repeat_ms)
        self.post_build = _post_build
        self._builders = _Pool(ctx, self.n_parallel, "build")
        self._timer = _Pool(ctx, 1, "timing")
        self._lock = locks.Lock()
        self._task = self._blob = None
        self._ids = itertools.count(1)
        self._task_id = None
        # the processes stop when the runner is collected, or at the interpreter's exit
        weakref.finalize(self, _shutdown, self._builders, self._timer)

    def _ship(self, task):
        """The pickled task and its id (pickled again only for another task object)."""
        if task is not self._task:
            self._task, self._blob = task, dumps_task(task, self.post_build)
            self._task_id = next(self._ids)
        return self._task_id, self._blob

    def measure(self, task, configs, deadline=None) -> list:
        """Build, verify and time each config: one Measurement per config, in order. At
        `deadline` (a time.monotonic() value; tune(timeout=)'s end) a config still being
        built or timed is cancelled, and one not started is not: their error starts with
        "stopped:" (they are no trials)."""
        configs = [dict(c) for c in configs]
        with self._lock:
            self._builders.closed = self._timer.closed = False
            task_id, blob = self._ship(task)
            self._timer.start()          # imports while the builds run
            built = self._builders.run([("build", c) for c in configs], task_id, blob,
                                       self.build_timeout, deadline=deadline)
            out = [Measurement(c) for c in configs]
            jobs, which = [], []
            for m, (status, value) in zip(out, built):
                if status == "ok":
                    m.artifact, m.features, m.build_s = value
                    jobs.append(("time", m.artifact, self.repeat, self.min_repeat_ms))
                    which.append(m)
                else:
                    m.error = value
            timed = self._timer.run(jobs, task_id, blob, self.timeout, self.build_timeout,
                                    deadline)
            for m, (status, value) in zip(which, timed):
                _finish(m, status, value)
            return out

    def pids(self) -> dict:
        """The worker processes' ids: {"build": [...], "timing": [...]}."""
        return {"build": self._builders.pids(), "timing": self._timer.pids()}

    @property
    def start_seconds(self) -> list:
        """Seconds each worker process took from its start to ready (imports)."""
        return self._builders.start_s + self._timer.start_s

    def close(self):
        """Stop the worker processes now: a measure() running on another thread returns
        with its unfinished configs failed ("stopped: ..."); a later one starts fresh
        processes."""
        self._builders.close()
        self._timer.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _finish(m, status, value):
    """Fill a built Measurement from its timing stage's reply."""
    if status == "ok":
        m.seconds, m.run_s = value
        m.verified = True
    else:
        m.error, m.artifact = value, None


# -- dask.distributed ------------------------------------------------------------------------

_dask_state = {}          # per dask worker process: the last task loaded, its _Bench
_dask_lock = locks.Lock()


def _dask_task(task_key, blob):
    """The task of `task_key` on this worker: loaded from `blob`, or kept from an
    earlier job (None when this worker has not loaded it and no blob came)."""
    import cloudpickle
    if _dask_state.get("key") != task_key:
        if blob is None:
            return None
        _dask_state.clear()
        _dask_state["task"] = cloudpickle.loads(blob)
        _dask_state["key"] = task_key
    return _dask_state["task"]


def _dask_build(task_key, blob, config):
    try:
        with _dask_lock:
            loaded = _dask_task(task_key, blob)
        if loaded is None:
            return "need", None
        return "ok", build(loaded[0], config, loaded[1])
    except Exception as e:       # noqa: BLE001
        return "error", f"build: {_text(e)}"


def _dask_time(task_key, blob, art, repeat, min_repeat_ms):
    try:
        with _dask_lock:
            loaded = _dask_task(task_key, blob)
            if loaded is not None and "bench" not in _dask_state:
                _dask_state["bench"] = _Bench(loaded[0])
    except Exception as e:       # noqa: BLE001
        return "error", f"run: cannot load the task: {_text(e)}"
    if loaded is None:
        return "need", None
    t0 = time.perf_counter()
    seconds, error = _dask_state["bench"].run(art, repeat, min_repeat_ms)
    return ("error", error) if error else ("ok", (seconds, time.perf_counter() - t0))


class DaskRunner:
    """LocalRunner's work on a dask.distributed cluster: builds in parallel on its
    workers, timings one at a time on one worker. The pickled task goes to a worker
    only when it asks for it (a restarted worker asks again). A candidate that kills its
    worker is a "crash" (set the scheduler's distributed.scheduler.allowed-failures to 0,
    or dask retries it on other workers first); one past its timeout is a "timeout", and
    its worker is restarted through its nanny (a thread cannot be stopped). A timeout
    counts from the job's submission, so it includes the wait for a worker that
    restarts: give dask more slack than a LocalRunner. At measure()'s `deadline` the jobs
    in flight are cancelled and their workers restarted (a job already running on a
    worker thread would run to its end there: a build held the thread that the next
    measure's job queued behind, a timing job timed beside the next) and no more are
    submitted."""

    def __init__(self, client_or_address, timeout=10.0, repeat=5, min_repeat_ms=40,
                 build_timeout=None, _post_build=None):
        _check_arguments("DaskRunner", repeat=repeat, timeout=timeout,
                         build_timeout=build_timeout, min_repeat_ms=min_repeat_ms)
        try:
            import distributed
        except ImportError as e:
            raise ImportError("jitdl: DaskRunner needs dask.distributed "
                              "(pip install 'dask[distributed]')") from e
        self._distributed = distributed
        if isinstance(client_or_address, distributed.Client):
            self.client, self._own = client_or_address, False
        else:
            try:
                self.client, self._own = distributed.Client(client_or_address), True
            except (OSError, ValueError, TypeError) as e:
                # (distributed's own error, far from the user's line: a timeout to
                # connect, an unknown scheme, an address without a port)
                from jitdl.errors import ArgumentError, user_loc
                raise ArgumentError(
                    f"jd.tune.DaskRunner({client_or_address!r}): cannot connect to a dask "
                    f"scheduler there: {_text(e)}", user_loc()) from e
        self.timeout = float(timeout)
        self.build_timeout = float(build_timeout if build_timeout is not None else timeout)
        self.repeat, self.min_repeat_ms = int(repeat), float(min_repeat_ms)
        self.post_build = _post_build
        self._lock = locks.Lock()
        self._task = self._key = self._blob = self._timed_on = None
        self._ids = itertools.count(1)

    def _ship(self, task):
        """The task's key on the workers (pickled again only for another task object)."""
        if task is not self._task:
            self._task, self._blob = task, dumps_task(task, self.post_build)
            self._key = f"{task.key}-{os.getpid()}-{id(self)}-{next(self._ids)}"
        return self._key

    def measure(self, task, configs, deadline=None) -> list:
        """Build, verify and time each config: one Measurement per config, in order. At
        `deadline` (a time.monotonic() value; tune(timeout=)'s end) the configs still
        being built or timed are cancelled and the rest not started: their error starts
        with "stopped:" (they are no trials), as with a LocalRunner."""
        configs = [dict(c) for c in configs]
        with self._lock:
            key = self._ship(task)
            width = len(self._workers())        # (0: _run waits for one)
            built = self._run([(_dask_build, [key, None, c]) for c in configs], width,
                              "build", deadline)
            out = [Measurement(c) for c in configs]
            jobs, which = [], []
            for m, (status, value) in zip(out, built):
                if status == "ok":
                    m.artifact, m.features, m.build_s = value
                    jobs.append((_dask_time, [key, None, m.artifact, self.repeat,
                                              self.min_repeat_ms]))
                    which.append(m)
                else:
                    m.error = value
            timed = self._run(jobs, 1, "run", deadline)
            for m, (status, value) in zip(which, timed):
                _finish(m, status, value)
            return out

    def _workers(self):
        return sorted(self.client.scheduler_info().get("workers", {}))

    def _run(self, jobs, width, what, cut=None):
        """Submit jobs with at most `width` in flight; results in order. A job whose
        worker lacks the task goes again with it. A "run" job goes to the first worker
        (by address); the first there for a task has build_timeout more seconds (it
        builds the reference). At `cut` (time.monotonic()) the jobs in flight are
        cancelled (a timing job's worker restarted) and the rest never submitted: all
        "stopped"."""
        dd = self._distributed
        results = [None] * len(jobs)
        todo = list(range(len(jobs)))[::-1]
        flying = {}                  # future -> (index, deadline, limit)
        if cut is not None:          # on perf_counter's clock, as the jobs' deadlines
            cut = time.perf_counter() + (cut - time.monotonic())
        if what == "build" and jobs and width == 0:
            # no worker: each build waited its build_timeout in turn for one to join (64
            # candidates, 10+ minutes of "timeout"s); they wait for one once, as timings
            if self._timing_worker(cut, self.build_timeout) is None:
                past = cut is not None and time.perf_counter() >= cut
                return [("error", _CUT if past else f"crash: no dask worker to build on "
                                                    f"(none joined in "
                                                    f"{self.build_timeout:g} s)")] * len(jobs)
            width = 1
        while todo or flying:
            if cut is not None and time.perf_counter() >= cut:
                # a cancelled job runs on in its worker's thread (dask cannot stop one):
                # a timing job's kernel on every core beside the next one timed there
                # (the closing re-timing's), a build in the thread that the next
                # measure's job queued behind, which then failed as a "timeout": the
                # workers holding them are restarted, as for a timeout
                self._restart_holders(list(flying))
                if what == "run" and flying:
                    self._timed_on = None   # (its reference may not be built there)
                for i in list(todo) + [i for i, _, _ in flying.values()]:
                    results[i] = ("error", _CUT)
                break
            while todo and len(flying) < width:
                i = todo.pop()
                fn, args = jobs[i]
                where, limit = {}, self.build_timeout
                if what == "run":
                    worker, limit = self._timing_worker(cut), self.timeout
                    if worker is None:          # (nor for the jobs after it)
                        past = cut is not None and time.perf_counter() >= cut
                        for k in [i] + todo:
                            results[k] = ("error", _CUT if past else
                                          f"crash: no dask worker to time on (none "
                                          f"joined in {self.timeout:g} s)")
                        todo = []
                        break
                    where = {"workers": [worker], "allow_other_workers": False}
                    if self._timed_on != (args[0], worker) or args[1] is not None:
                        self._timed_on, limit = (args[0], worker), limit + self.build_timeout
                fut = self.client.submit(fn, *args, pure=False, **where)
                flying[fut] = (i, time.perf_counter() + limit, limit)
            if not flying:
                break
            ends = [d for _, d, _ in flying.values()] + ([cut] if cut is not None else [])
            first = min(ends)
            try:
                done, _ = dd.wait(list(flying), return_when="FIRST_COMPLETED",
                                  timeout=max(0.01, first - time.perf_counter()))
            except TimeoutError:
                done = ()
            for fut in done:
                i = flying.pop(fut)[0]
                try:
                    results[i] = fut.result()
                except Exception as e:   # noqa: BLE001 - a killed worker, a lost result
                    why = type(e).__name__ if type(e).__name__ == "KilledWorker" else _text(e)
                    results[i] = ("error", f"crash: the dask worker died in the {what} "
                                           f"({why})")
                if results[i][0] == "need":
                    jobs[i][1][1] = self._blob
                    todo.append(i)
            now = time.perf_counter()
            for fut, (i, deadline, limit) in list(flying.items()):
                if now >= deadline:
                    flying.pop(fut)
                    self._restart_holders([fut])
                    results[i] = ("error", f"timeout: the {what} took more than {limit:g} s")
        return results

    def _timing_worker(self, cut, wait=None):
        """The first worker by address, waiting up to `wait` (the timeout when None; not
        past `cut`) for one to join; None where none did (it waited for ever: a cluster
        whose workers had all died hung measure() past any deadline)."""
        wait = self.timeout if wait is None else wait
        if cut is not None:
            wait = max(0.01, min(wait, cut - time.perf_counter()))
        try:
            self.client.wait_for_workers(1, timeout=wait)
        except (TimeoutError, getattr(self._distributed, "TimeoutError", TimeoutError)):
            return None
        workers = self._workers()
        return workers[0] if workers else None

    def _restart_holders(self, futs):
        """Cancel jobs (hung, or cut at the deadline) and restart the workers running
        them, all at once (one by one, each restart waited for the last)."""
        if not futs:
            return
        keys = {fut.key for fut in futs}
        holders = [w for w, held in self.client.processing().items() if keys & set(held)]
        for fut in futs:
            fut.cancel()
        # only those a nanny restarts: with one without a nanny among them (a LocalCluster
        # of threads, dask-worker --no-nanny, a shared cluster's) restart_workers raised
        # ValueError and restarted none, the others staying hung too (older distributed
        # removed such a worker for good instead: a worker lost per cut build)
        workers = self.client.scheduler_info().get("workers", {})
        holders = [w for w in holders if (workers.get(w) or {}).get("nanny")]
        if holders:
            if self._timed_on is not None and self._timed_on[1] in holders:
                self._timed_on = None       # the reference is built there again
            try:
                self.client.restart_workers(holders)
            except Exception:        # noqa: BLE001 - a restart that failed: left as it is
                pass

    def close(self):
        if self._own:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def get_runner(runner=None):
    """The runner to measure with: a new LocalRunner for None, a DaskRunner for a
    dask.distributed Client or a scheduler address, else `runner` itself."""
    if runner is None:
        return LocalRunner()
    if isinstance(runner, str):
        return DaskRunner(runner)
    if type(runner).__module__.startswith("distributed"):
        return DaskRunner(runner)
    return runner


def kernel_of(measurement):
    """The kernel of a successful measurement's artifact, loaded in this process."""
    return _load(measurement.artifact)


__all__ = ["LocalRunner", "DaskRunner", "get_runner", "build", "fresh_inputs", "Sketch",
           "differs", "dumps_task", "kernel_of"]
