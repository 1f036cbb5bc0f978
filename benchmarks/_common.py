"""Shared helpers for the benchmark scripts: timing, machine facts, table and JSON output."""
from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_jitdl():
    """Import jitdl, from the checkout when it is not installed."""
    try:
        import jitdl
    except ModuleNotFoundError:
        sys.path.insert(0, ROOT)
        import jitdl
    return jitdl


LAST_MINIMA = {}    # the minima of the latest time_pair call: {"jitdl": s, "numpy": s}


def time_pair(f_jd, f_np, warmup=3, repeat=15, rounds=2, pause=0.3, clock=time.perf_counter):
    """Median seconds of f_jd and f_np after warm-up (by `clock`: time.thread_time counts
    the calling thread's CPU time alone, which other processes' load does not inflate;
    right only for calls that run on that one thread).

    Each is timed in blocks (`rounds` blocks each, alternating, each after a pause of
    `pause` seconds and its own warm-up), not call by call: NumPy's BLAS threads keep
    spinning for a while after a call and slow a jitdl parallel kernel started right
    after by up to 4x (and the other way round), which would measure the two runtimes'
    interference, not the kernels. Their minima are left in LAST_MINIMA (a steadier
    figure on a busy machine)."""
    t_jd, t_np = [], []
    per_block = max(1, -(-repeat // rounds))
    f_jd()                  # (compiled now, not in a timed block; then linked and stored,
    native_drain()          # so that the background linker takes no core from the timing)
    for _ in range(rounds):
        for f, ts in ((f_jd, t_jd), (f_np, t_np)):
            time.sleep(pause)
            for _ in range(warmup):
                f()
            for _ in range(per_block):
                t0 = clock()
                f()
                ts.append(clock() - t0)
    LAST_MINIMA.update(jitdl=min(t_jd), numpy=min(t_np))
    return statistics.median(t_jd), statistics.median(t_np)


def native_drain():
    """Wait for jitdl's background linker (a no-op where jitdl is not imported)."""
    native = sys.modules.get("jitdl.runtime.native")
    if native is not None:
        native.drain()


def time_calls(fn, calls=20000, repeat=7, warmup=1000):
    """Median over `repeat` runs of the seconds per call of `calls` calls of fn()."""
    for _ in range(warmup):
        fn()
    per = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per.append((time.perf_counter() - t0) / calls)
    return statistics.median(per)


def machine():
    import numpy as np
    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "JITDL_NUM_THREADS": os.environ.get("JITDL_NUM_THREADS"),
    }
    try:
        import llvmlite
        info["llvmlite"] = llvmlite.__version__
    except ImportError:
        pass
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def fmt(x, unit=""):
    if x is None:
        return "-"
    if isinstance(x, float):
        if unit == "s":
            if x < 1e-3:
                return f"{x * 1e6:.1f} us"
            if x < 1:
                return f"{x * 1e3:.2f} ms"
            return f"{x:.2f} s"
        return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"
    return str(x)


def print_table(rows, columns):
    """rows: list of dicts; columns: list of (header, key, unit)."""
    cells = [[h for h, _, _ in columns]]
    for r in rows:
        cells.append([fmt(r.get(k), u) for _, k, u in columns])
    widths = [max(len(c[n]) for c in cells) for n in range(len(columns))]
    for n, line in enumerate(cells):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def write_json(path, payload):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2, sort_keys=False)
        f.write("\n")
    os.replace(tmp, path)
    print(f"\nwrote {path}")
