"""Per-call overheads of jitdl, in microseconds, against NumPy (and numba if installed).

    python benchmarks/overhead.py            # table + benchmarks/results/overhead.json
    python benchmarks/overhead.py --quick    # fewer calls

(a) dispatch: an already compiled `Y[i] = X[i] + 1.0` on 4 floats, with and without a
    preallocated out=, against `np.add(x, 1.0, out=y)`, `x + 1.0` and numba's @njit.
(b) call path: `Z[i] = X[i] + Y[i]` on 1000 float64 against `np.add(x, y)` (and numba):
    the Function call (dispatch + kernel), Kernel.run (no dispatch) and the kernel's
    `.fast` entry alone on a preallocated output (the foreign call and the work).
(c) fork/join: the same kernel with its loop run in parallel (a @jd.schedule) against
    the serial kernel, on 16 and 64 elements: the difference is the cost of starting and
    joining the threads.
Each figure is the median over `--repeat` runs of the mean time of `--calls` calls.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import import_jitdl, machine, print_table, time_calls, write_json  # noqa: E402

jd = import_jitdl()


@jd.compute
def add1(X):
    Y[i] = X[i] + 1.0
    return Y


@jd.compute
def add2(X, Y):
    Z[i] = X[i] + Y[i]
    return Z


@jd.compute
def add1_parallel(X):
    Y[i] = X[i] + 1.0
    return Y


@jd.schedule(add1_parallel, target="cpu")
def add1_parallel_cpu(s, cfg):
    (i,) = s["Y"].axis
    s.parallel(i)


@jd.compute
def add1_serial(X):
    Y[i] = X[i] + 1.0
    return Y


@jd.schedule(add1_serial, target="cpu")
def add1_serial_cpu(s, cfg):
    pass    # plain serial loop: no automatic schedule either


def numba_add1():
    try:
        import numba
    except ImportError:
        return None

    @numba.njit(cache=False)
    def f(x, y):
        for i in range(x.shape[0]):
            y[i] = x[i] + np.float32(1.0)
        return y

    @numba.njit(cache=False)
    def g(x, y):
        return x + y
    return f, g


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer calls and repeats")
    p.add_argument("--calls", type=int, default=None, help="calls per repeat (20000)")
    p.add_argument("--repeat", type=int, default=None, help="repeats (7)")
    p.add_argument("--json", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "results", "overhead.json"))
    args = p.parse_args(argv)
    calls = args.calls or (2000 if args.quick else 20000)
    repeat = args.repeat or (3 if args.quick else 7)

    def us(fn):
        return time_calls(fn, calls=calls, repeat=repeat, warmup=min(1000, calls)) * 1e6

    rows, failed = [], []

    def measure(group, name, fn, check=None, **extra):
        try:
            if check is not None:
                check()
            rows.append(dict(group=group, case=name, us=us(fn), **extra))
        except Exception as e:  # noqa: BLE001 - report and go on
            import traceback
            traceback.print_exc()
            rows.append(dict(group=group, case=name, error=f"{type(e).__name__}: {e}"))
            failed.append(name)

    # (a) dispatch on 4 floats -------------------------------------------------------
    x = np.arange(4, dtype=np.float32)
    y = np.empty_like(x)
    want = x + np.float32(1.0)

    def check_add1():
        np.testing.assert_array_equal(add1(x), want)
        y[:] = 0
        add1(x, out=y)
        np.testing.assert_array_equal(y, want)

    print("[dispatch] ...", flush=True)
    measure("dispatch", "python no-op call (floor)", lambda: None)
    measure("dispatch", "numpy  np.add(x, 1.0, out=y)", lambda: np.add(x, 1.0, out=y))
    measure("dispatch", "numpy  x + 1.0", lambda: x + 1.0)
    measure("dispatch", "jitdl  f(x)", lambda: add1(x), check=check_add1)
    measure("dispatch", "jitdl  f(x, out=y)", lambda: add1(x, out=y))
    nb = numba_add1()
    if nb is not None:
        nb[0](x, y)
        measure("dispatch", "numba  f(x, y)", lambda: nb[0](x, y))
    else:
        print("numba not installed: skipped")

    # (b) the call path on 1000 float64 --------------------------------------------------
    print("[call path] ...", flush=True)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(1000), rng.standard_normal(1000)
    c = np.empty(1000)
    k = add2.kernel(a, b)

    def check_add2():
        np.testing.assert_allclose(add2(a, b), a + b, rtol=1e-15)
        if not k.fast:
            raise RuntimeError("the kernel has no .fast entry here")

    measure("call path", "numpy  np.add(a, b)", lambda: np.add(a, b))
    measure("call path", "numpy  np.add(a, b, out=c)", lambda: np.add(a, b, out=c))
    measure("call path", "jitdl  f(a, b)", lambda: add2(a, b), check=check_add2)
    measure("call path", "jitdl  Kernel.run((a, b))", lambda: k.run((a, b)))
    measure("call path", "jitdl  .fast entry((a, b), c)", lambda: k.fastcall((a, b), c))
    if nb is not None:
        nb[1](a, b)
        measure("call path", "numba  a + b", lambda: nb[1](a, b))

    # (c) fork/join ---------------------------------------------------------------------
    print("[fork/join] ...", flush=True)
    lowered = {}
    for n in (16, 64):
        xs = np.arange(n, dtype=np.float32)
        ys = np.empty_like(xs)
        ref = xs + np.float32(1.0)

        def check(f=None, xs=xs, ref=ref):
            np.testing.assert_array_equal(f(xs), ref)

        for label, f in (("serial", add1_serial), ("parallel", add1_parallel)):
            try:
                lowered[(label, n)] = f.lower(xs)
            except Exception as e:  # noqa: BLE001
                lowered[(label, n)] = f"error: {type(e).__name__}: {e}"
            measure("fork/join", f"{label:8s} n={n}", lambda f=f, xs=xs, ys=ys: f(xs, out=ys),
                    check=lambda f=f: check(f), n=n,
                    parallel_in_ir="parallel" in str(lowered[(label, n)]))
    for n in (16, 64):
        ser = next((r for r in rows if r["case"] == f"serial   n={n}" and "us" in r), None)
        par = next((r for r in rows if r["case"] == f"parallel n={n}" and "us" in r), None)
        if ser and par:
            rows.append(dict(group="fork/join", case=f"fork/join cost n={n}",
                             us=par["us"] - ser["us"]))

    print()
    print_table(rows, [("group", "group", ""), ("case", "case", ""), ("us/call", "us", "")])
    for r in rows:
        if r.get("parallel_in_ir") is False and r["case"].startswith("parallel"):
            print(f"\nwarning: {r['case']}: no parallel loop in f.lower() output")
        if "error" in r:
            print(f"\n{r['case']}: FAILED: {r['error']}")
    print(f"\n{calls} calls x {repeat} repeats, median; threads: "
          f"JITDL_NUM_THREADS={os.environ.get('JITDL_NUM_THREADS', 'unset')}, "
          f"{os.cpu_count()} cores")

    write_json(args.json, dict(benchmark="overhead", calls=calls, repeat=repeat,
                               machine=machine(), results=rows,
                               parallel_ir_64=str(lowered.get(("parallel", 64)))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
