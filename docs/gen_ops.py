"""Write docs/ops.md, the status of every jd.numpy and jd.nn function, from the code: each
namespace module's STATUS ("done" or "partial: what is missing") and the functions the op
library is meant to have that it does not have yet.

    python docs/gen_ops.py            # rewrite docs/ops.md
    python docs/gen_ops.py --check    # exit 1 when docs/ops.md is out of date
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# What each family is meant to have (the op library issue's list), by name.
WANTED = {
    "jd.numpy: elementwise": """add subtract multiply divide true_divide floor_divide remainder
        mod fmod power abs absolute sign exp exp2 expm1 log log2 log10 log1p sqrt square sin
        cos tan arcsin arccos arctan sinh cosh tanh arcsinh arccosh arctanh arctan2 hypot
        floor ceil trunc round rint maximum minimum fmax fmin clip where isnan isinf isfinite
        equal not_equal less less_equal greater greater_equal logical_and logical_or
        logical_xor logical_not bitwise_and bitwise_or bitwise_xor invert left_shift
        right_shift negative positive reciprocal""",
    "jd.numpy: reductions": "sum prod mean var std max min argmax argmin all any",
    "jd.numpy: linear algebra": "matmul dot outer einsum",
    "jd.numpy: manipulation": """transpose reshape concatenate stack pad broadcast_to squeeze
        expand_dims flip take repeat tile""",
    "jd.nn": """relu gelu sigmoid silu softmax log_softmax layer_norm rms_norm batch_norm
        linear conv1d conv2d conv_transpose2d max_pool2d avg_pool2d adaptive_avg_pool2d
        interpolate embedding scaled_dot_product_attention""",
}


def generate() -> str:
    import jitdl.numpy as jnp
    try:
        import jitdl.nn as jnn
        nn_status = dict(getattr(jnn, "STATUS", {}))
    except ImportError:
        nn_status = {}
    np_status = jnp.status()
    lines = ["# jd.numpy and jd.nn: what each function does today", "",
             "Generated from the code by `python docs/gen_ops.py` (a test checks that this page",
             "is current). *done*: NumPy's (or torch.nn.functional's) semantics for the dtypes",
             "jitdl compiles (bool, int8, int16, int32, int64, uint8, float32, float64);",
             "*partial*: what is missing is said; *missing*: not built yet. On arrays of other",
             "dtypes (float16, complex, uint16/32/64, ...), and with a dtype= naming one, a",
             "jd.numpy function calls NumPy's function of the same name; jd.nn's raise a",
             "TypeError naming the dtype. Every other public NumPy name (`jd.numpy.sort`,",
             "`cumsum`, `finfo`, `float16`, `random`, ...) is NumPy's own, not compiled: code",
             "written for NumPy runs unchanged, and those functions refuse a definition's",
             "tensors with an error naming them. The elementwise functions carry NumPy's",
             "ufunc attributes and methods: `reduce` of add, multiply, maximum, minimum,",
             "logical_and and logical_or is sum, prod, max, min, all and any; `outer` is a",
             "broadcast (both compiled, and they fuse in a definition); the others",
             "(`accumulate`, `at`, `reduceat`, the other reductions) are NumPy's own.",
             "Every function here has a `@jd.compute` function's `tune`, `lower`,",
             "`schedule_of`, `config_space` and `tuning_records`, taking the function's own",
             "arguments (`jnp.matmul.tune(a, b)`): they work on the kernel that call runs.", ""]
    claimed = set()
    for family, names in WANTED.items():
        status = nn_status if family == "jd.nn" else np_status
        lines += [f"## {family}", "", "| function | status |", "| --- | --- |"]
        for name in names.split():
            claimed.add((family == "jd.nn", name))
            lines.append(f"| `{name}` | {status.get(name, 'missing')} |")
        lines.append("")
    extra_np = sorted(n for n in np_status if (False, n) not in claimed)
    extra_nn = sorted(n for n in nn_status if (True, n) not in claimed)
    for title, names, status in (("jd.numpy: more functions", extra_np, np_status),
                                 ("jd.nn: more functions", extra_nn, nn_status)):
        if names:
            lines += [f"## {title}", "", "| function | status |", "| --- | --- |"]
            lines += [f"| `{n}` | {status[n]} |" for n in names]
            lines.append("")
    return "\n".join(lines)


def main():
    path = os.path.join(HERE, "ops.md")
    text = generate()
    if "--check" in sys.argv:
        with open(path) as f:
            if f.read() != text:
                print("docs/ops.md is out of date: run python docs/gen_ops.py")
                sys.exit(1)
        return
    with open(path, "w") as f:
        f.write(text)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
