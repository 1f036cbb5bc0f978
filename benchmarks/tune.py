"""What tuning gains: the automatic schedule (default) against the tuned kernel and NumPy,
in the same run, with the time the tuning took; and how fast the xgb tuner finds good
configs compared with random search.

    python benchmarks/tune.py                      # every kernel, 180 s of tuning each
    python benchmarks/tune.py --only matmul --budget 60
    python benchmarks/tune.py --efficiency         # also xgb vs random, 3 seeds each
    python benchmarks/tune.py --quick              # small sizes and budgets (smoke test)

Kernels: matmul 1024^3 and 777x513x1025, conv2d 1x64x56x56 with 64 3x3 filters (against
onnxruntime's Conv too when it is installed), softmax and layernorm 4096x1024. Each
result is checked against float64 NumPy before it is timed; jitdl and NumPy are timed in
alternating blocks (benchmarks/_common.time_pair); ratio = NumPy's time / jitdl's.
The tuning records and the kernel cache go to fresh temporary places unless --keep is
given, so "default" is the automatic schedule and not an earlier run's tuned kernel.
Writes benchmarks/results/tune.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

if "--keep" not in sys.argv:          # before jitdl reads its settings
    _tmp = tempfile.mkdtemp(prefix="jitdl-bench-tune-")
    os.environ["JITDL_CACHE_DIR"] = _tmp
    os.environ["JITDL_TUNING_DB"] = os.path.join(_tmp, "tuning.sqlite")

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import import_jitdl, machine, print_table, time_pair, write_json  # noqa: E402
from run import conv2d, layernorm, matmul, np_conv2d, np_softmax, softmax  # noqa: E402

jd = import_jitdl()


def np_layernorm(x, eps):
    mu = x.mean(1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(1, keepdims=True) + eps)


def ort_conv(x, w):
    """onnxruntime's Conv (padding 1) as a callable, or None when it is not installed."""
    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        return None
    node = helper.make_node("Conv", ["X", "W"], ["Y"], pads=[1, 1, 1, 1])
    n, c, h, wd = x.shape
    f = w.shape[0]
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape)),
         helper.make_tensor_value_info("W", TensorProto.FLOAT, list(w.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [n, f, h, wd])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = jd.config.settings.num_threads
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return lambda: sess.run(None, {"X": x, "W": w})[0]


def cases(quick, rng):
    f32 = np.float32
    mm = (256, 256, 256) if quick else (1024, 1024, 1024)
    odd = (193, 129, 257) if quick else (777, 513, 1025)
    rows = (512, 256) if quick else (4096, 1024)
    conv = (1, 16, 28, 28, 16) if quick else (1, 64, 56, 56, 64)
    out = []
    for name, (m, k, n) in (("matmul", mm), ("matmul odd", odd)):
        a, b = rng.standard_normal((m, k), dtype=f32), rng.standard_normal((k, n), dtype=f32)
        out.append(dict(kernel=name, size=f"{m}x{k}x{n} f32", f=matmul, args=(a, b),
                        ref=lambda a=a, b=b: a.astype(np.float64) @ b,
                        numpy=lambda a=a, b=b: a @ b, metric="GFLOP/s", work=2.0 * m * k * n))
    nb, c, h, w, fo = conv
    x = rng.standard_normal((nb, c, h, w), dtype=f32)
    wt = rng.standard_normal((fo, c, 3, 3), dtype=f32)
    out.append(dict(kernel="conv2d", size=f"{nb}x{c}x{h}x{w}, {fo} 3x3 f32", f=conv2d,
                    args=(x, wt), ref=lambda x=x, wt=wt: np_conv2d(x.astype(np.float64), wt),
                    numpy=lambda x=x, wt=wt: np_conv2d(x, wt), metric="GFLOP/s",
                    work=2.0 * nb * fo * h * w * c * 9, ort=ort_conv(x, wt)))
    xs = rng.standard_normal(rows, dtype=f32)
    out.append(dict(kernel="softmax", size=f"{rows[0]}x{rows[1]} f32", f=softmax, args=(xs,),
                    ref=lambda: np_softmax(xs.astype(np.float64)), numpy=lambda: np_softmax(xs),
                    metric="GB/s", work=2.0 * xs.nbytes))
    out.append(dict(kernel="layernorm", size=f"{rows[0]}x{rows[1]} f32", f=layernorm,
                    args=(xs, 1e-5), ref=lambda: np_layernorm(xs.astype(np.float64), 1e-5),
                    numpy=lambda: np_layernorm(xs, np.float32(1e-5)), metric="GB/s",
                    work=2.0 * xs.nbytes))
    return out


def check(f, args, ref):
    got = f(*args)
    r = ref()
    scale = float(np.abs(r).max()) or 1.0
    np.testing.assert_allclose(got, r, rtol=1e-4, atol=1e-4 * scale)


def bench(case, budget, trials, rep):
    f = jd.compute(case["f"].pyfunc, name=case["f"].name)    # a fresh function, no state
    args = case["args"]
    check(f, args, case["ref"])
    t_default, _ = time_pair(lambda: f(*args), lambda: None, **rep)
    t0 = time.perf_counter()
    result = f.tune(*args, trials=trials, timeout=budget, progress=sys.stderr.isatty())
    tuning_s = time.perf_counter() - t0
    check(f, args, case["ref"])
    t_tuned, t_np = time_pair(lambda: f(*args), case["numpy"], **rep)
    work = case["work"]
    row = dict(kernel=case["kernel"], size=case["size"], metric=case["metric"],
               default=work / t_default / 1e9, tuned=work / t_tuned / 1e9,
               numpy=work / t_np / 1e9, default_s=t_default, tuned_s=t_tuned, numpy_s=t_np,
               speedup=t_default / t_tuned, ratio=t_np / t_tuned, tuning_s=tuning_s,
               trials=result.trials, failed=result.failed, config=result.config)
    if case.get("ort") is not None:
        t_tuned2, t_ort = time_pair(lambda: f(*args), case["ort"], **rep)
        row.update(ort=work / t_ort / 1e9, ort_s=t_ort, ratio_ort=t_ort / t_tuned2)
    return row


def efficiency(seeds, trials, budget, quick, rng):
    """Trials each tuner needs to reach 95% of the best throughput any run found."""
    m = 256 if quick else 512
    a = rng.standard_normal((m, m), dtype=np.float32)
    b = rng.standard_normal((m, m), dtype=np.float32)
    curves = {}
    for kind in ("xgb", "random"):
        for seed in range(seeds):
            f = jd.compute(matmul.pyfunc, name=f"matmul_{kind}_{seed}")
            r = f.tune(a, b, trials=trials, timeout=budget, tuner=kind, seed=seed,
                       progress=False)
            curves[(kind, seed)] = r.curve()
            print(f"  {kind} seed {seed}: best {max(r.curve()):.1f} GFLOP/s "
                  f"in {r.trials} trials, {r.elapsed:.0f} s")
    best = max(max(c) for c in curves.values())
    out = {}
    for kind in ("xgb", "random"):
        needed = []
        for seed in range(seeds):
            c = curves[(kind, seed)]
            hit = next((n + 1 for n, v in enumerate(c) if v >= 0.95 * best), None)
            needed.append(hit if hit is not None else len(c) + 1)   # not reached: budget + 1
        out[kind] = dict(trials_to_95=needed, mean=float(np.mean(needed)),
                         curves=[curves[(kind, s)] for s in range(seeds)])
    out["best_gflops"] = best
    out["size"] = f"{m}^3 f32"
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated kernels (matmul, 'matmul odd', conv2d, "
                                   "softmax, layernorm)")
    ap.add_argument("--budget", type=float, default=180.0, help="seconds of tuning per kernel")
    ap.add_argument("--trials", type=int, default=400, help="at most this many trials")
    ap.add_argument("--efficiency", action="store_true", help="xgb vs random, 3 seeds")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--keep", action="store_true",
                    help="use the user's kernel cache and tuning records")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "tune.json"))
    opts = ap.parse_args()
    rng = np.random.default_rng(0)
    rep = dict(warmup=2, repeat=10, rounds=3)
    budget = 20.0 if opts.quick else opts.budget
    info = machine()
    print(f"cpu: {info.get('cpu', '?')}; {jd.config.settings.num_threads} threads; "
          f"tuning budget {budget:.0f} s / {opts.trials} trials per kernel")
    rows = []
    only = {s.strip() for s in opts.only.split(",")} if opts.only else None
    for case in cases(opts.quick, rng):
        if only and case["kernel"] not in only:
            continue
        print(f"tuning {case['kernel']} {case['size']} ...", flush=True)
        rows.append(bench(case, budget, opts.trials, rep))
    print()
    print_table(rows, [("kernel", "kernel", ""), ("size", "size", ""),
                       ("unit", "metric", ""), ("default", "default", ""),
                       ("tuned", "tuned", ""), ("numpy", "numpy", ""),
                       ("tuned/numpy", "ratio", ""), ("onnxruntime", "ort", ""),
                       ("tuned/ort", "ratio_ort", ""), ("speed-up", "speedup", ""),
                       ("tuning", "tuning_s", "s"), ("trials", "trials", ""),
                       ("failed", "failed", "")])
    payload = {"machine": info, "budget_s": budget, "rows": rows}
    if opts.efficiency:
        print("\nsearch efficiency (matmul): trials to reach 95% of the best found")
        eff = efficiency(3, 60 if opts.quick else 150, 60 if opts.quick else budget,
                         opts.quick, rng)
        for kind in ("xgb", "random"):
            print(f"  {kind:6s} {eff[kind]['trials_to_95']}  mean {eff[kind]['mean']:.1f}")
        print(f"  xgb / random: {eff['xgb']['mean'] / eff['random']['mean']:.2f} "
              f"(best {eff['best_gflops']:.1f} GFLOP/s, {eff['size']})")
        payload["efficiency"] = eff
    write_json(opts.out, payload)


if __name__ == "__main__":
    main()
