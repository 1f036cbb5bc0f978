"""jd.numpy's reductions, with NumPy's signatures."""
from __future__ import annotations

from jitdl import dtypes
from jitdl.eager import apply
from jitdl.ops import reduction as red


def _axis(axis):
    return tuple(axis) if isinstance(axis, list) else axis


def sum(a, axis=None, dtype=None, out=None, keepdims=False):  # noqa: A001
    """numpy.sum as a jitdl kernel."""
    return apply("sum", red.sum_, (a,), (("axis", _axis(axis)),
                                         ("dtype", dtype and dtypes.normalize(dtype)),
                                         ("keepdims", bool(keepdims))), out, ("a",))


def max(a, axis=None, out=None, keepdims=False):  # noqa: A001
    """numpy.max as a jitdl kernel."""
    return apply("max", red.max_, (a,), (("axis", _axis(axis)), ("keepdims", bool(keepdims))),
                 out, ("a",))


amax = max
__all__ = ["sum", "max", "amax"]
