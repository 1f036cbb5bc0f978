"""Every jd.numpy elementwise function against NumPy's, in the same run, at chosen sizes:
the sweep that finds the functions below the issue's bars (1.5x NumPy at 1e7 elements,
no worse than 1.5x NumPy's time at 1e3).

    python benchmarks/ufuncs.py                      # float32, float64, int32, int64
    python benchmarks/ufuncs.py --sizes 1000 --only sin,cos,arcsin
    python benchmarks/ufuncs.py --dtypes float32 --repeat 3

Each result is checked against NumPy before it is timed (up to 1e5 elements; larger
sizes are timed only). Timing as benchmarks/ops.py (alternating blocks after a pause,
medians); ratio = NumPy's time / jitdl's. Rows under a bar are marked "<<". Writes
benchmarks/results/ufuncs.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

if "--keep" not in sys.argv:          # before jitdl reads its settings
    os.environ["JITDL_CACHE_DIR"] = tempfile.mkdtemp(prefix="jitdl-bench-ufuncs-")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (LAST_MINIMA, import_jitdl, machine, print_table, time_pair,  # noqa: E402
                     write_json)

jd = import_jitdl()
jnp = jd.numpy

UNARY = ("negative abs sign exp exp2 expm1 log log2 log10 log1p sqrt square sin cos tan "
         "arcsin arccos arctan sinh cosh tanh arcsinh arccosh arctanh floor ceil trunc rint "
         "isnan isinf isfinite logical_not").split()
BINARY = ("add subtract multiply divide floor_divide remainder power maximum minimum fmax "
          "fmin arctan2 hypot less equal greater_equal logical_and").split()
INTEGER = ("add multiply floor_divide remainder abs maximum bitwise_and left_shift less "
           "sign square").split()
_POSITIVE = {"log", "log2", "log10", "log1p", "sqrt", "arccosh"}
_UNIT = {"arcsin", "arccos", "arctanh"}


def float_cases(n, dt, rng):
    a = rng.standard_normal(n).astype(dt)
    b = rng.standard_normal(n).astype(dt)
    pos = np.abs(a) + np.asarray(0.5, dt)
    unit = np.clip(a * np.asarray(0.5, dt), -0.99, 0.99).astype(dt)
    for name in UNARY:
        x = pos + 1 if name == "arccosh" else pos if name in _POSITIVE else \
            unit if name in _UNIT else a
        yield name, (x,)
    for name in BINARY:
        yield name, ((pos, b) if name == "power" else (a, b))
    yield "clip", (a, -0.5, 0.5)
    yield "where", (a > 0, a, b)


def int_cases(n, dt, rng):
    a = rng.integers(-1000, 1000, n).astype(dt)
    b = rng.integers(1, 1000, n).astype(dt)
    for name in INTEGER:
        if name in ("abs", "sign", "square"):
            yield name, (a,)
        else:
            yield name, (a, b % 8 if name == "left_shift" else b)


def batched(fn, seconds=0.02):
    """(block of fn repeated for about `seconds`, calls per block): see ops.batched."""
    fn()
    t0 = time.perf_counter()
    fn()
    n = max(1, int(seconds / max(time.perf_counter() - t0, 1e-7)))

    def block():
        for _ in range(n):
            fn()
    return block, n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1000,10000000")
    ap.add_argument("--dtypes", default="float32,float64,int32,int64")
    ap.add_argument("--only", default="", help="comma-separated function names")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="use the user's kernel cache")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: the calling thread's CPU time, which other processes' load "
                         "does not inflate (for sizes whose kernels run on one thread, "
                         "such as 1000), each side's least block")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "ufuncs.json"))
    args = ap.parse_args()
    only = {s for s in args.only.split(",") if s}
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    rng = np.random.default_rng(0)
    info = machine()
    print(f"CPU: {info.get('cpu')}, {info['cpu_count']} cores; jitdl threads: "
          f"{jd.config.settings.num_threads}")
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        for dt in (np.dtype(s) for s in args.dtypes.split(",")):
            cases = float_cases(n, dt, rng) if dt.kind == "f" else int_cases(n, dt, rng)
            for name, operands in cases:
                if only and name not in only:
                    continue
                f_jd, f_np = getattr(jnp, name), getattr(np, name)
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    row = {"op": name, "dtype": dt.name, "size": n}
                    if n <= 100_000:
                        got, want = f_jd(*operands), f_np(*operands)
                        if got.dtype != want.dtype or not np.allclose(
                                got, want, rtol=4e-6 if dt == np.float32 else 1e-12,
                                atol=1e-6, equal_nan=True):
                            row["error"] = "differs from NumPy"
                    b_jd, n_jd = batched(lambda: f_jd(*operands))
                    b_np, n_np = batched(lambda: f_np(*operands))
                    if args.clock == "cpu":
                        # (other processes only ever add to a thread's CPU time: the least
                        # block is the call's own cost, the two sides alternating block by
                        # block; medians of two rounds scattered 1.5-2x on a VM whose
                        # neighbours were busy)
                        time_pair(b_jd, b_np, repeat=args.repeat, rounds=args.repeat,
                                  pause=0.02, clock=clock)
                        t_jd, t_np = LAST_MINIMA["jitdl"], LAST_MINIMA["numpy"]
                    else:
                        t_jd, t_np = time_pair(b_jd, b_np, repeat=args.repeat, clock=clock)
                row.update(jitdl_s=t_jd / n_jd, numpy_s=t_np / n_np,
                           ratio=(t_np / n_np) / (t_jd / n_jd))
                under = (n >= 10**6 and row["ratio"] < 1.5) or \
                    (n <= 1000 and row["ratio"] < 1 / 1.5)
                row["mark"] = "<<" if under else row.get("error", "")
                rows.append(row)
                print(f"{name:14s} {dt.name:8s} {n:>9d}  ratio {row['ratio']:5.2f} "
                      f"{row['mark']}", flush=True)
    print("\njd.numpy against NumPy (ratio = NumPy time / jitdl time; << under the bar)")
    print_table(rows, [("op", "op", ""), ("dtype", "dtype", ""), ("elements", "size", ""),
                       ("jitdl", "jitdl_s", "s"), ("NumPy", "numpy_s", "s"),
                       ("ratio", "ratio", ""), ("", "mark", "")])
    write_json(args.out, {"machine": info, "threads": jd.config.settings.num_threads,
                          "rows": rows})


if __name__ == "__main__":
    main()
