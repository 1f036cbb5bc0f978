"""The user-facing objects: @jd.compute functions, @jd.schedule, inspection and timing.

The call path of an already compiled specialisation is a dict lookup on
(shapes, dtypes, scalar types) and a foreign call; everything else happens once per key.
"""
from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import warnings

import numpy as np

from jitdl import dtypes
from jitdl.capture.trace import capture, trace
from jitdl.codegen.llvm import generate
from jitdl.config import settings
from jitdl.errors import ArgumentError, JitdlError, ScheduleError, user_loc
from jitdl.lower.lower import lower
from jitdl.runtime import engine, native
from jitdl.cache import keys
from jitdl.cache.store import CacheWarning, Entry, default_store
from jitdl.runtime.kernel import Kernel, Signature, call_key
from jitdl.schedule.auto import auto_schedule
from jitdl.schedule.config import Config, sample
from jitdl.schedule.schedule import Schedule

log = logging.getLogger("jitdl.cache")
_ndarray = np.ndarray
_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


class Text(str):
    """A string that prints itself in the REPL (so `f.lower(x)` shows the IR)."""

    def __repr__(self):
        return str(self)


class Function:
    """A jitdl definition; call it with NumPy arrays and Python scalars."""

    def __init__(self, pyfunc, strict_fp=False, autotune=None, name=None):
        functools.update_wrapper(self, pyfunc)
        self.pyfunc = pyfunc
        self.name = name or pyfunc.__name__
        self.strict_fp = strict_fp
        if autotune not in (None, False, "background", "foreground"):
            raise ValueError(f"autotune= must be None, 'background' or 'foreground', "
                             f"got {autotune!r}")
        self.autotune = autotune
        self.signature = inspect.signature(pyfunc)
        self.param_names = list(self.signature.parameters)
        self._nparams = len(self.param_names)
        self._captured = None
        self._kernels = {}              # key -> Kernel (the dispatch table)
        self._schedules = {}            # target -> schedule function (s, cfg)
        self._configs = {}              # key -> knob values chosen by tuning
        self._lock = threading.RLock()
        self._events = []               # cache hits and compilations, for cache_info()
        self.qualname = f"{pyfunc.__module__}.{pyfunc.__qualname__}"

    # -- the call path ----------------------------------------------------------------------
    def __call__(self, *args, out=None, **kwargs):
        if kwargs or len(args) != self._nparams:      # keywords or defaults to fill in
            args = self._bind(args, kwargs)
        # call_key(args), inlined: this is the per-call path
        key = tuple([(a.shape, a.dtype) if type(a) is _ndarray else type(a) for a in args])
        k = self._kernels.get(key)
        if k is None:
            k = self._compile(args, key)
        return k.run(args, out)

    def _bind(self, args, kwargs):
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as e:
            given = len(args) + len(kwargs)
            raise ArgumentError(
                f"{self.name}() takes {self._nparams} argument(s) "
                f"({', '.join(self.param_names)}), got {given}: {e}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _specs(self, args):
        if len(args) != len(self.param_names):
            raise ArgumentError(
                f"{self.name}() takes {len(self.param_names)} argument(s) "
                f"({', '.join(self.param_names)}), got {len(args)}")
        specs = []
        for name, a in zip(self.param_names, args):
            if isinstance(a, np.ndarray):
                if not a.dtype.isnative:
                    raise ArgumentError(
                        f"{self.name}(): argument '{name}' has non-native byte order "
                        f"({a.dtype.str}); convert it with a.astype(a.dtype.newbyteorder('='))")
                try:
                    dt = dtypes.normalize(a.dtype)
                except TypeError:
                    raise ArgumentError(
                        f"{self.name}(): argument '{name}': dtype {a.dtype} is not supported; "
                        f"expected one of {', '.join(dtypes.SUPPORTED)}") from None
                specs.append(("array", tuple(a.shape), dt))
            elif isinstance(a, _SCALARS):
                weak = type(a) in (bool, int, float)   # np.float64 subclasses float: strong
                dt = dtypes.weak_kind_dtype(a) if weak else dtypes.normalize(np.asarray(a).dtype)
                specs.append(("scalar", dt, weak))
            elif hasattr(a, "__cuda_array_interface__"):
                raise ArgumentError(
                    f"{self.name}(): argument '{name}' is a GPU array; the CUDA target is not "
                    "built yet: pass a NumPy array (e.g. cupy.asnumpy(x))")
            else:
                raise ArgumentError(
                    f"{self.name}(): argument '{name}': expected a NumPy array or a Python "
                    f"scalar, got {type(a).__name__}")
        return specs

    def _graph(self, args):
        specs = self._specs(args)
        if self._captured is None:
            self._captured = capture(self.pyfunc)
        graph = trace(self._captured, specs, self.param_names)
        return graph, specs

    def _schedule(self, graph, target="cpu", config=None):
        sched = Schedule(graph.outputs)
        fn = self._schedules.get(target)
        cfg = Config(config, sched)
        if fn is None:
            return auto_schedule(sched, settings.num_threads, cfg), cfg
        fn(sched, cfg)
        return sched, cfg

    def _build(self, args, config=None):
        """A kernel for these arguments: from the disk cache when it has one, else compiled
        (and stored)."""
        specs = self._specs(args)
        store = default_store()
        event = {"call": _describe(self.param_names, specs), "result": "compiled"}
        self._events.append(event)
        fkey = fparts = rejected = None
        if store is not None:
            fkey, fparts = keys.fast_key(self, specs, config)
            event["fast_parts"] = fparts
            full = store.resolve(fkey)
            entry = store.get(full) if full else None
            kernel = self._from_entry(store, full, entry, event, specs)
            if entry is not None and kernel is None:
                rejected = full          # warned about once; not looked up again below
            if kernel is not None:
                event["result"] = "hit"
                log.info("hit %s %s (%s)", self.qualname, event["call"], event["loader"])
                return kernel
        graph, _ = self._graph(args)
        sched, cfg = self._schedule(graph, config=config)
        lowered = lower(graph, sched, _symbol(self.name))
        loop_ir = str(lowered.func)
        module, checks = generate(lowered.func, parallel_ok=engine.parallel_available(),
                                  strict_fp=self.strict_fp, with_err=lowered.checks > 0,
                                  array_data_offset=engine.array_data_offset(),
                                  n_inputs=len(lowered.inputs))
        sig = Signature(
            self.name, lowered.func.name,
            [[b.name, list(b.shape), b.dtype] for b in lowered.inputs],
            [[b.name, list(b.shape), b.dtype] for b in lowered.outputs],
            [[v.name, v.dtype] for v in lowered.scalars],
            [list(c) for c in checks],
            [[s[0], n] for s, n in zip(specs, self.param_names)])
        assert sig.mismatch(specs) is None, f"internal: {sig.mismatch(specs)}"
        full = None
        if store is not None:
            full, _ = keys.full_key(loop_ir, self.strict_fp,
                                    {"fname": sig.fname, "layout": sig.layout})
            kernel = None
            if full != rejected:
                kernel = self._from_entry(store, full, store.get(full), event, specs)
            if kernel is not None:       # same loop IR as a stored kernel: no LLVM needed
                store.alias(fkey, full, self.qualname, fparts)
                event["result"] = "hit (same loop IR)"
                log.info("hit (same loop IR) %s %s", self.qualname, event["call"])
                return kernel
            event["differs"] = self._nearest_difference(store, fparts)
            log.info("miss %s %s; %s", self.qualname, event["call"], event["differs"])
        unoptimized = str(module)
        obj, optimized = engine.optimize(unoptimized)
        texts = {"loop_ir": loop_ir, "llvm_ir": optimized, "llvm_ir_unoptimized": unoptimized}
        kernel = Kernel(sig, engine.Loaded(obj, sig.symbol), texts)
        event["loader"] = "mcjit"
        if store is not None:
            meta = {"fname": self.qualname, "signature": sig.to_json(), "call": event["call"],
                    "specs": specs,
                    "schedule": sched.steps, "config": cfg.values if cfg else None,
                    "created": time.time(), "environment": keys.environment(),
                    "fast_parts": fparts, "key": full}
            store.put(full, meta, obj, texts, fkey, fparts)
            entry = Entry(meta, obj, texts)
            native.link_later(obj, store.root,
                              lambda shared: store.add_shared(full, entry, shared))
        return kernel

    def _from_entry(self, store, full, entry, event, specs):
        """A kernel from a cache entry: its shared library through dlopen when it has one
        (linking it in the background for later processes when it has not), else its
        object code through MCJIT. None if the entry cannot be loaded, or if it is not
        the entry of this key and call (a misplaced file or alias): its code never runs."""
        if entry is None:
            return None
        try:
            sig = Signature.from_json(entry.meta["signature"])
            if entry.meta.get("key") != full:
                why = f"it is stored under {full[:12]} but was made for " \
                      f"{str(entry.meta.get('key'))[:12]}"
            else:
                why = sig.mismatch(specs)
        except Exception as e:          # a damaged entry is a miss, never a crash
            why = f"unreadable metadata: {e!r}"
        if why:
            warnings.warn(f"jitdl: cache entry {full[:12]} does not fit the call "
                          f"{self.qualname}({event['call']}): {why}; compiling instead",
                          CacheWarning, stacklevel=5)
            return None
        try:
            loaded = native.load(entry, sig.symbol, store.root, self.qualname)
            kernel = Kernel(sig, loaded, entry.texts)
        except Exception as e:
            log.warning("cannot load a cached kernel of %s (%s); recompiling",
                        self.qualname, e)
            return None
        if isinstance(loaded, native.SharedLoaded):
            event["loader"] = "shared library"
        else:                            # no library, or it failed: (re)link it for later
            event["loader"] = "mcjit"
            native.link_later(entry.obj, store.root,
                              lambda shared: store.add_shared(full, entry, shared))
        return kernel

    def _nearest_difference(self, store, parts):
        """Which parts of the key differ from the closest stored entry of this function."""
        best = None
        for _, rec in store.alias_records():
            if rec.get("fname") != self.qualname:
                continue
            other = rec.get("parts", {})
            diff = sorted(k for k in parts if other.get(k) != parts[k])
            if best is None or len(diff) < len(best):
                best = diff
        if best is None:
            return "no stored entry of this function"
        return "nearest stored entry differs in: " + (", ".join(best) or "nothing (damaged?)")

    def cache_info(self):
        """This process's record of compilations and cache lookups for this function; for
        the last miss, which parts of the key differ from the nearest stored entry."""
        store = default_store()
        events = [dict(e) for e in self._events]
        for e in events:
            e.pop("fast_parts", None)
        return {"function": self.qualname,
                "hits": sum(e["result"].startswith("hit") for e in events),
                "misses": sum(e["result"] == "compiled" for e in events),
                "cache_dir": store.root if store else None,
                "events": events}

    def _compile(self, args, key):
        with self._lock:
            k = self._kernels.get(key)
            if k is None:
                k = self._build(args, self._configs.get(key))
                self._kernels[key] = k
        return k

    def kernel(self, *args, **kwargs):
        """The compiled kernel for these arguments (compiling on first use)."""
        if kwargs or len(args) != self._nparams:
            args = self._bind(args, kwargs)
        key = call_key(args)
        return self._kernels.get(key) or self._compile(args, key)

    # -- inspection -------------------------------------------------------------------------
    def lower(self, *args, **kwargs):
        """The loop IR of the specialisation for these arguments."""
        return Text(self.kernel(*args, **kwargs).texts["loop_ir"])

    def llvm_ir(self, *args, optimized=True, **kwargs):
        """The LLVM IR (optimised by default) of the specialisation for these arguments."""
        k = self.kernel(*args, **kwargs)
        return Text(k.texts["llvm_ir" if optimized else "llvm_ir_unoptimized"])

    def asm(self, *args, **kwargs):
        """The host assembly of the specialisation for these arguments."""
        return Text(engine.assembly(self.kernel(*args, **kwargs).texts["llvm_ir"]))

    def schedule_of(self, *args, **kwargs):
        """The schedule (steps and loop structure) for these arguments."""
        if kwargs:
            args = self._bind(args, kwargs)
        key = call_key(args)
        graph, _ = self._graph(args)
        return self._schedule(graph, config=self._configs.get(key))[0]

    def timeit(self, *args, repeat=7, min_time=0.05, **kwargs):
        """Median seconds per call, after a warm-up, over `repeat` timed batches."""
        k = self.kernel(*args, **kwargs)
        if kwargs:
            args = self._bind(args, kwargs)
        k(args)
        number, t = 1, 0.0
        while True:
            t0 = time.perf_counter()
            for _ in range(number):
                k(args)
            t = time.perf_counter() - t0
            if t >= min_time / repeat or number >= 1 << 20:
                break
            number *= 4
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(number):
                k(args)
            times.append((time.perf_counter() - t0) / number)
        return float(np.median(times))

    def export(self, path, *example_args, **kwargs):
        """Write the compiled kernel for these arguments, with its signature, to one file
        that `jd.load(path)` runs in a process that never sees this source."""
        from jitdl.runtime import aot
        if kwargs:
            example_args = self._bind(example_args, kwargs)
        k = self.kernel(*example_args)
        aot.write(path, self.name, [(self._specs(example_args), k)])
        return path

    # -- tuning -----------------------------------------------------------------------------
    def tune(self, *args, trials=16, verbose=False):
        """Try up to `trials` configs of the schedule's knobs on these arguments, keep the
        fastest for this process (in memory). Returns (best config, seconds)."""
        key = call_key(args)
        base = self.kernel(*args)
        graph, _ = self._graph(args)
        _, cfg0 = self._schedule(graph, config=self._configs.get(key))
        space = cfg0.space if cfg0 is not None else {}
        best_cfg, best_t = (cfg0.values if cfg0 else {}), self.timeit(*args)
        if not space:
            return best_cfg, best_t
        ref = base(args)
        for cfg in sample(space, trials):
            try:
                k = self._build(args, cfg)
                got = k(args)
                _check_same(ref, got)
            except (JitdlError, AssertionError) as e:
                if verbose:
                    print(f"  {cfg}: rejected ({e})")
                continue
            t = _time_kernel(k, args)
            if verbose:
                print(f"  {cfg}: {t * 1e6:.1f} us")
            if t < best_t:
                best_cfg, best_t = cfg, t
                with self._lock:
                    self._configs[key] = cfg
                    self._kernels[key] = k
        return best_cfg, best_t

    def with_config(self, **values):
        """A copy of this function whose schedule knobs take the given values."""
        f = Function(self.pyfunc, self.strict_fp, self.autotune, self.name)
        f._schedules = dict(self._schedules)
        orig = f._build
        f._build = lambda args, config=None: orig(args, {**values, **(config or {})})
        return f

    def __repr__(self):
        return f"<jitdl.compute {self.name}{self.signature}: {len(self._kernels)} compiled>"


def _describe(names, specs):
    """`A: float32[512, 256], n: int64` for messages and cache listings."""
    out = []
    for name, s in zip(names, specs):
        if s[0] == "array":
            out.append(f"{name}: {s[2]}[{', '.join(map(str, s[1]))}]")
        else:
            out.append(f"{name}: {s[1]}{' (python)' if s[2] else ''}")
    return ", ".join(out)


def _check_same(ref, got):
    refs = ref if isinstance(ref, tuple) else (ref,)
    gots = got if isinstance(got, tuple) else (got,)
    for r, g in zip(refs, gots):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def _time_kernel(k, args, repeat=5):
    k(args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        k(args)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _symbol(name):
    """The kernel's symbol: prefixed, so that a definition called `free` or `tanhf` does
    not take the place of the C function that the generated code calls."""
    return "jd_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def compute(fn=None, *, strict_fp=False, autotune=None, name=None):
    """Decorate a tensor definition: `@jd.compute` or `@jd.compute(strict_fp=True)`."""
    if fn is None:
        return lambda f: Function(f, strict_fp=strict_fp, autotune=autotune, name=name)
    if not callable(fn):
        raise TypeError(f"@jd.compute decorates a function, got {type(fn).__name__}")
    return Function(fn, strict_fp=strict_fp, autotune=autotune, name=name)


def schedule(func, target="cpu"):
    """Register `def sched(s, cfg)` as the schedule of `func` for `target`."""
    if not isinstance(func, Function):
        raise ScheduleError(f"@jd.schedule takes a @jd.compute function, got {func!r}",
                            user_loc())
    if target != "cpu":
        raise ScheduleError(f"@jd.schedule: target {target!r} is not available yet "
                            "(only 'cpu')", user_loc())

    def register(sched_fn):
        func._schedules[target] = sched_fn
        func._kernels.clear()
        return sched_fn
    return register
