"""Reduction builders with NumPy's dtype rules: sum/prod of small integers and bools in
int64, mean of integers in float64, float32 sums accumulated in float64 (closer to NumPy's
pairwise summation than a float32 accumulator over millions of elements)."""
from __future__ import annotations

from jitdl import dtypes
from jitdl.ir.nodes import ReduceOp
from jitdl.ir import build
from jitdl.ops.core import elementwise, operand, reduction


def _sum_dtype(dt):
    return "int64" if dt == "bool" or dtypes.is_int(dt) else dt


def sum_(x, axis=None, dtype=None, keepdims=False):
    """np.sum."""
    dt = dtype or _sum_dtype(operand(x).dtype)
    acc = "float64" if dt == "float32" else dt
    r = reduction(ReduceOp.SUM, x, axis, keepdims, dtype=acc)
    return r if acc == dt else _cast(r, dt)


def max_(x, axis=None, keepdims=False):
    """np.max."""
    return reduction(ReduceOp.MAX, x, axis, keepdims)


def _cast(t, dt):
    return elementwise(lambda a: build.cast(a, dt), t)
