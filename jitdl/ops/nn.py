"""Neural-network builders (torch.nn.functional's meaning): activations, softmax, norms,
linear, convolutions, pooling, resampling, embedding and attention as TE stages.

Shapes follow torch: channels first (N, C, *spatial), the batch dimension optional where
torch allows it. Static arguments arrive normalised by jitdl.nn (a stride as a tuple of
ints, padding as (lo, hi) pairs); checks that need operand shapes happen here and raise
ShapeError (a ValueError) naming the argument, the expected and the actual value.
"""
from __future__ import annotations

import math

import numpy as np

from jitdl import dtypes
from jitdl.errors import ArgumentError, ShapeError, user_loc
from jitdl.ir import build
from jitdl.ir.nodes import BinOp, CmpOp, Intrin, ReduceOp
from jitdl.ops.core import (any_size, as_tensor, broadcast_shapes, elementwise, every_dim,
                            floating, is_one, load, may_agree, normalize_axes, normalize_axis,
                            operand, reduction, result_type, same_dim, shape_of, shape_text)
from jitdl.ops.manipulation import pad_source, read_padded
from jitdl.target.cpu import host
from jitdl.te import ops as te

_SQRT1_2 = math.sqrt(0.5)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)


def _exp(a):
    return build.call(Intrin.EXP, a)


def _max(a, b):
    return build.binary(BinOp.MAX, a, b)


def _min(a, b):
    return build.binary(BinOp.MIN, a, b)


def _float_of(a):
    """a in the float dtype a transcendental function of it is computed in."""
    a = build.as_expr(a)
    return build.cast(a, floating(a.dtype)) if not dtypes.is_float(a.dtype) else a


def _lowest(dt):
    """The identity of max over dtype dt: -inf for floats, False for bool, the smallest
    integer else."""
    if dt == "bool":
        return False
    return -math.inf if dtypes.is_float(dt) else int(np.iinfo(dt).min)


# -- activations ---------------------------------------------------------------------------
def _gelu(a, approximate):
    a = _float_of(a)
    if approximate == "tanh":
        inner = _SQRT_2_PI * (a + 0.044715 * a * a * a)
        return 0.5 * a * (1.0 + build.call(Intrin.TANH, inner))
    return 0.5 * a * (1.0 + build.call(Intrin.ERF, a * _SQRT1_2))


def _softplus(a, beta, threshold):
    a = _float_of(a)
    z = a * beta
    return build.select(z > threshold, a, build.call(Intrin.LOG1P, _exp(z)) / beta)


def _hardtanh(a, min_val, max_val):
    """min_val where a < min_val, max_val where a > max_val, else a (NaN stays NaN; a NaN
    limit gives NaN everywhere, as torch's clamp). On integers the limits are truncated to
    integers, as torch converts them."""
    if not dtypes.is_float(a.dtype):
        min_val, max_val = int(min_val), int(max_val)
    elif math.isnan(min_val) or math.isnan(max_val):
        return a + build.cast(math.nan, a.dtype)        # (torch's clamp: NaN throughout)
    lo, hi = build.cast(min_val, a.dtype), build.cast(max_val, a.dtype)
    return build.select(a < lo, lo, build.select(a > hi, hi, a))


def _relu6_of_shift(a):
    """min(max(a + 3, 0), 6), NaN kept: hardsigmoid's and hardswish's common part."""
    s = a + 3.0
    return build.select(s < 0.0, 0.0, build.select(s > 6.0, 6.0, s))


def _logsigmoid(a):
    """log(sigmoid(a)) as min(a, 0) - log1p(exp(-|a|)): no exp overflows, and the tiny
    values of very negative a are not lost to log(0)."""
    a = _float_of(a)
    low = build.select(a < 0.0, a, 0.0)
    return low - build.call(Intrin.LOG1P, _exp(-build.call(Intrin.ABS, a)))


def _mish(a):
    """a * tanh(softplus(a)), softplus without threshold: exp overflowing to inf for a
    large a gives tanh(inf) = 1, a itself."""
    a = _float_of(a)
    return a * build.call(Intrin.TANH, build.call(Intrin.LOG1P, _exp(a)))


ACTIVATIONS = {
    # (a select, not max: torch keeps -0.0, and NaN, as they are)
    "relu": lambda a: build.select(a < 0, 0, a),
    "relu6": lambda a: _min(build.select(a < 0, 0, a), 6),
    "leaky_relu": lambda a, negative_slope: build.select(a > 0, a, a * negative_slope),
    "elu": lambda a, alpha: build.select(_float_of(a) > 0, _float_of(a),
                                         alpha * build.call(Intrin.EXPM1, _float_of(a))),
    "gelu": _gelu,
    "sigmoid": lambda a: build.call(Intrin.SIGMOID, _float_of(a)),
    "silu": lambda a: _float_of(a) * build.call(Intrin.SIGMOID, _float_of(a)),
    "softplus": _softplus,
    "tanh": lambda a: build.call(Intrin.TANH, _float_of(a)),
    "hardtanh": _hardtanh,
    "hardsigmoid": lambda a: _relu6_of_shift(_float_of(a)) / 6.0,
    "hardswish": lambda a: _float_of(a) * _relu6_of_shift(_float_of(a)) / 6.0,
    "mish": _mish,
    "logsigmoid": _logsigmoid,
    "softsign": lambda a: _float_of(a) / (1.0 + build.call(Intrin.ABS, _float_of(a))),
}


def activation(x, fn, **params):
    """The elementwise activation ACTIVATIONS[fn] over x (NaN propagates)."""
    f = ACTIVATIONS[fn]
    return elementwise(lambda a: f(a, **params), x, name=fn)


def glu(x, dim):
    """a * sigmoid(b), a and b the first and second halves of x along dim. The halved
    size must be known when the kernel is built (it is where b starts)."""
    x = as_tensor(x)
    if x.ndim == 0:
        raise ShapeError("glu(): glu does not support 0-d input, which has no dimension to "
                         "halve", user_loc())
    axis = normalize_axis(dim, x.ndim)
    n = x.shape[axis]
    if not isinstance(n, int):
        raise ArgumentError(f"glu(): dimension {axis} of input {shape_text(x.shape)} is known "
                            f"only at run time; glu compiles per size of the halved "
                            f"dimension: leave the argument out of dynamic=", user_loc())
    if n % 2:
        raise ShapeError(f"glu(): halving dimension must be even, but dimension {axis} is "
                         f"size {n}", user_loc())
    half = n // 2

    def body(*idx):
        gate = idx[:axis] + (idx[axis] + half,) + idx[axis + 1:]
        return _float_of(x[idx]) * build.call(Intrin.SIGMOID, _float_of(x[gate]))
    return te.tensor(x.shape[:axis] + (half,) + x.shape[axis + 1:], body, name="glu")


def dropout(x, kept):
    """x * kept: the caller's draw of kept elements, each 1 / (1 - p) or 0."""
    return elementwise(lambda a, k: a * k, x, kept, name="dropout")


# -- softmax -------------------------------------------------------------------------------
def _stable_exp(x, dim, dtype):
    """(x - max, exp(x - max), sum of that exp) along dim, in `dtype` when given."""
    x = as_tensor(x)
    if dtype is not None:
        x = elementwise(lambda a: build.cast(a, dtype), x)
    elif not dtypes.is_float(x.dtype):
        x = elementwise(_float_of, x)
    if x.ndim == 0 and dim in (0, -1):      # (torch: a 0-d tensor is its own row)
        shifted = elementwise(lambda a: a - a, x)
        e = elementwise(_exp, shifted)
        return shifted, e, e
    axis = normalize_axis(dim, x.ndim)
    if isinstance(x.shape[axis], int) and x.shape[axis] == 0:
        return x, x, x        # an empty axis: an empty result, as torch's (no max to take)
    shifted = elementwise(lambda a, m: a - m, x, reduction(ReduceOp.MAX, x, axis, True))
    e = elementwise(_exp, shifted)
    return shifted, e, reduction(ReduceOp.SUM, e, axis, True)


def softmax(x, dim, dtype=None):
    """exp(x - max) / sum(exp(x - max)) along dim."""
    _, e, s = _stable_exp(x, dim, dtype)
    return elementwise(lambda a, b: a / b, e, s, name="softmax")


def log_softmax(x, dim, dtype=None):
    """x - max - log(sum(exp(x - max))) along dim."""
    shifted, _, s = _stable_exp(x, dim, dtype)
    return elementwise(lambda a, b: a - build.call(Intrin.LOG, b), shifted, s,
                       name="log_softmax")


# -- normalisation -------------------------------------------------------------------------
def _check_param(p, shape, what, op):
    if p is not None and (len(shape_of(p)) != len(shape) or
                          not all(may_agree(a, b) for a, b in zip(shape_of(p), shape))):
        raise ShapeError(f"{op}(): {what} must have shape {shape_text(shape)}, got "
                         f"{shape_text(shape_of(p))}", user_loc())


def _own_sizes(x, normalized_shape):
    """normalized_shape with None entries (jitdl.nn._apply_norm: the input's own trailing
    sizes, checked by the caller) made x's sizes there."""
    if normalized_shape and all(n is None for n in normalized_shape) \
            and x.ndim >= len(normalized_shape):
        return tuple(x.shape[x.ndim - len(normalized_shape):])
    return normalized_shape


def _trailing(x, normalized_shape, op):
    """The axes normalized_shape covers (the last ones of x), checked as torch does."""
    k = len(normalized_shape)
    if k == 0:
        raise ShapeError(f"{op}(): normalized_shape must have at least one entry, got "
                         f"{tuple(normalized_shape)}", user_loc())
    if x.ndim < k or not all(may_agree(a, b) for a, b in
                                       zip(x.shape[x.ndim - k:], normalized_shape)):
        raise ShapeError(f"{op}(): normalized_shape={list(normalized_shape)} expects input "
                         f"of shape (*, {', '.join(map(str, normalized_shape))}), got input "
                         f"of shape {shape_text(x.shape)}", user_loc())
    return tuple(range(x.ndim - k, x.ndim))


def _affine(y, weight, bias, k, name):
    """y * weight + bias, with weight and bias over the last k axes (either may be None)."""
    ops = [y] + [p for p in (weight, bias) if p is not None]
    if len(ops) == 1:
        return y
    shape = y.shape

    def body(*idx):
        e = y[idx]
        tail = idx[len(idx) - k:]
        if weight is not None:
            e = e * weight[tail]
        if bias is not None:
            e = e + bias[tail]
        return e
    return te.tensor(shape, body, name=name)


def _mean(x, axes, keepdims=True, acc=None):
    """The mean over axes, summed in dtype `acc` when given and returned in x's dtype."""
    n = 1
    for a in axes:
        n = n * x.shape[a]
    s = reduction(ReduceOp.SUM, x, axes, keepdims, dtype=acc)
    if not isinstance(n, int):        # a count over symbolic sizes: an int64 expression
        return elementwise(lambda a: build.cast(a / build.cast(n, a.dtype), x.dtype), s)
    return elementwise(lambda a: build.cast(a / n, x.dtype), s)


def layer_norm(x, *params, normalized_shape, eps, has_weight, has_bias):
    """(x - mean) / sqrt(var + eps) over the trailing normalized_shape, then * weight + bias."""
    x = as_tensor(x)
    if not dtypes.is_float(x.dtype):
        x = elementwise(_float_of, x)
    normalized_shape = _own_sizes(x, normalized_shape)
    axes = _trailing(x, normalized_shape, "layer_norm")
    weight = params[0] if has_weight else None
    bias = params[int(has_weight)] if has_bias else None
    _check_param(weight, normalized_shape, "weight", "layer_norm")
    _check_param(bias, normalized_shape, "bias", "layer_norm")
    return _affine(_standardized(x, axes, eps), weight, bias, len(axes), "layer_norm")


def _standardized(x, axes, eps, flat_is_zero=False):
    """(x - mean) / sqrt(var + eps) with the mean and the (biased) variance over axes. The
    mean of float32 is summed in float64, so that a constant row's is exact and centres to
    0 as torch's (a float32 sum's rounding left 1e-2 of noise divided by sqrt(eps)). With
    flat_is_zero, a row whose var + eps is 0 gives 0, not 0 / 0 (torch's batch-norm kernel,
    which instance norm runs, takes 1 / sqrt(0) as 0)."""
    acc = "float64" if x.dtype == "float32" else None
    centred = elementwise(lambda a, m: a - m, x, _mean(x, axes, acc=acc))
    var = _mean(elementwise(lambda a: a * a, centred), axes)

    def scaled(c, v):
        q = c / build.call(Intrin.SQRT, v + eps)
        if not flat_is_zero:
            return q
        return build.select(build.compare(CmpOp.EQ, v + eps, 0.0), build.cast(0, q.dtype), q)
    return elementwise(scaled, centred, var)


def rms_norm(x, *params, normalized_shape, eps, has_weight):
    """x / sqrt(mean(x^2) + eps) over the trailing normalized_shape, then * weight; eps None
    is the machine epsilon of x's dtype, as torch takes it."""
    x = as_tensor(x)
    if not dtypes.is_float(x.dtype):
        x = elementwise(_float_of, x)
    normalized_shape = _own_sizes(x, normalized_shape)
    axes = _trailing(x, normalized_shape, "rms_norm")
    weight = params[0] if has_weight else None
    _check_param(weight, normalized_shape, "weight", "rms_norm")
    if eps is None:
        eps = float(np.finfo(x.dtype).eps)
    ms = _mean(elementwise(lambda a: a * a, x), axes)
    y = elementwise(lambda a, m: a / build.call(Intrin.SQRT, m + eps), x, ms)
    return _affine(y, weight, None, len(axes), "rms_norm")


def batch_norm_batch_stats(x, *params, eps, has_weight, has_bias):
    """Training batch norm: (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c] with
    the statistics of the batch (over every axis but the channel axis 1; var biased)."""
    x, weight, bias = _channel_norm_input(x, params, has_weight, has_bias, "batch_norm")
    y = _standardized(x, (0,) + tuple(range(2, x.ndim)), eps)
    return _channel_affine(y, weight, bias, "batch_norm")


def _channel_affine(y, weight, bias, name):
    """y * weight[c] + bias[c] over channel axis 1 (either may be None)."""
    if weight is None and bias is None:
        return y

    def body(*idx):
        e = y[idx]
        if weight is not None:
            e = e * weight[idx[1]]
        if bias is not None:
            e = e + bias[idx[1]]
        return e
    return te.tensor(y.shape, body, name=name)


def _channel_norm_input(x, params, has_weight, has_bias, op):
    """(x as a float tensor of 2 or more dimensions, weight, bias) of a norm over channel
    axis 1, weight and bias checked to be (C,)."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"{op}(): input must have 2 or more dimensions (N, C, ...), got "
                         f"shape {shape_text(x.shape)}", user_loc())
    if not dtypes.is_float(x.dtype):
        x = elementwise(_float_of, x)
    weight = params[0] if has_weight else None
    bias = params[int(has_weight)] if has_bias else None
    for p, what in ((weight, "weight"), (bias, "bias")):
        _check_param(p, (x.shape[1],), what, op)
    return x, weight, bias


def instance_norm(x, *params, eps, has_weight, has_bias):
    """(x - mean) / sqrt(var + eps) * weight[c] + bias[c] with the statistics of each
    sample's channel (over the spatial axes 2...; var biased)."""
    x, weight, bias = _channel_norm_input(x, params, has_weight, has_bias, "instance_norm")
    y = _standardized(x, tuple(range(2, x.ndim)), eps, flat_is_zero=eps == 0)
    return _channel_affine(y, weight, bias, "instance_norm")


def group_norm(x, *params, num_groups, eps, has_weight, has_bias):
    """(x - mean) / sqrt(var + eps) * weight[c] + bias[c] with the statistics of each
    sample's group of C / num_groups consecutive channels (over those channels and the
    spatial axes; var biased). The channels are read as (N, G, C / G, *spatial) and the
    result read back through c // (C / G), c % (C / G): divisions by a constant, which is
    why this builder compiles per shape."""
    x, weight, bias = _channel_norm_input(x, params, has_weight, has_bias, "group_norm")
    N, C, spatial = x.shape[0], x.shape[1], x.shape[2:]
    if isinstance(C, int) and C % num_groups:
        raise ShapeError(f"group_norm(): expected the number of channels in input to be "
                         f"divisible by num_groups, got input of shape {shape_text(x.shape)} "
                         f"and num_groups={num_groups}", user_loc())
    if not isinstance(C, int):
        raise ArgumentError(f"group_norm(): the channels of input {shape_text(x.shape)} are "
                            f"known only at run time; group_norm compiles per channel count: "
                            f"leave the argument out of dynamic=", user_loc())
    per = C // num_groups
    grouped = te.tensor((N, num_groups, per) + spatial, lambda n, g, r, *s: x[
        (n, g * per + r) + s], name="group_norm_groups")
    y = _standardized(grouped, tuple(range(2, grouped.ndim)), eps)
    back = te.tensor(x.shape, lambda n, c, *s: y[(n, c // per, c % per) + s],
                     name="group_norm_channels")
    return _channel_affine(back, weight, bias, "group_norm")


def batch_norm(x, running_mean, running_var, *params, eps, has_weight, has_bias):
    """Inference batch norm: (x - running_mean[c]) / sqrt(running_var[c] + eps) * weight[c]
    + bias[c], channels on axis 1."""
    x = as_tensor(x)
    if x.ndim < 2:
        raise ShapeError(f"batch_norm(): input must have 2 or more dimensions (N, C, ...), "
                         f"got shape {shape_text(x.shape)}", user_loc())
    C = x.shape[1]
    weight = params[0] if has_weight else None
    bias = params[int(has_weight)] if has_bias else None
    for p, what in ((running_mean, "running_mean"), (running_var, "running_var"),
                    (weight, "weight"), (bias, "bias")):
        _check_param(p, (C,), what, "batch_norm")

    def scale(c):
        s = 1 / build.call(Intrin.SQRT, running_var[c] + eps)
        return s * weight[c] if weight is not None else s
    # (a channel's factor once, not a square root and a division per element)
    factor = te.tensor((C,), scale, name="batch_norm_scale")

    def body(*idx):
        c = idx[1]
        e = (_float_of(x[idx]) - running_mean[c]) * factor[c]
        return e + bias[c] if bias is not None else e
    return te.tensor(x.shape, body, name="batch_norm")


def _norm_along(a, axes, p):
    """The p-norm of a along axes (kept as size 1): torch's vector_norm, p = 0 counting the
    non-zero elements, inf and -inf the largest and smallest magnitude."""
    if p == 2:
        return elementwise(lambda t: build.call(Intrin.SQRT, t),
                           reduction(ReduceOp.SUM, elementwise(lambda t: t * t, a), axes, True))
    mag = elementwise(lambda t: build.call(Intrin.ABS, t), a)
    if p == math.inf:
        return reduction(ReduceOp.MAX, mag, axes, True)
    if p == -math.inf:
        return reduction(ReduceOp.MIN, mag, axes, True)
    if p == 1:
        return reduction(ReduceOp.SUM, mag, axes, True)
    if p == 0:
        nonzero = elementwise(lambda t: build.cast(build.compare(CmpOp.NE, t, 0.0), t.dtype), a)
        return reduction(ReduceOp.SUM, nonzero, axes, True)
    powered = elementwise(lambda t: build.binary(BinOp.POW, t, build.cast(p, t.dtype)), mag)
    return elementwise(lambda t: build.binary(BinOp.POW, t, build.cast(1.0 / p, t.dtype)),
                       reduction(ReduceOp.SUM, powered, axes, True))


def _at_least(n, eps):
    """max(n, eps) that keeps NaN, as torch's clamp_min."""
    return elementwise(lambda t: build.select(t < eps, build.cast(eps, t.dtype), t), n)


def normalize(x, p, dim, eps):
    """x / max(||x||_p, eps), the norm along dim (an axis or a tuple of them)."""
    x = as_tensor(x)
    if not dtypes.is_float(x.dtype):
        x = elementwise(_float_of, x)
    axes = normalize_axes(dim, x.ndim, allow_none=False)
    return elementwise(lambda a, n: a / n, x, _at_least(_norm_along(x, axes, p), eps),
                       name="normalize")


def cosine_similarity(x1, x2, dim, eps):
    """sum((x1 / max(||x1||, eps)) * (x2 / max(||x2||, eps))) along dim, x1 and x2
    broadcast together first and each divided by its own norm (a result within [-1, 1],
    as torch computes it). Each operand's quotient is computed in its own float dtype
    (an integer one in the common float dtype), their product in the common dtype, as
    torch does (a float32 x1 beside a float64 x2 is normalised in float32). The common
    dtype is torch's: a float operand beside an integer one keeps its own dtype (float32
    beside int64 is float32, where NumPy's promotion gives float64)."""
    x1, x2 = operand(x1, "x1"), operand(x2, "x2")
    if dtypes.is_float(x1.dtype) != dtypes.is_float(x2.dtype):
        common = (x1 if dtypes.is_float(x1.dtype) else x2).dtype
    else:
        common = floating(result_type(np.add, x1, x2))
    shape = broadcast_shapes(shape_of(x1), shape_of(x2))
    if not shape:
        # (torch: 0-d operands are vectors of one element, along dim 0 or -1)
        normalize_axis(dim, 1)
        shape, dim = (1,), 0
    axis = normalize_axis(dim, len(shape))

    def unit(t, name):
        dt = t.dtype if dtypes.is_float(t.dtype) else common
        full = te.tensor(shape, lambda *idx: build.cast(load(t, idx, shape), dt), name=name)
        return elementwise(lambda u, n: build.cast(u / n, common), full,
                           _at_least(_norm_along(full, (axis,), 2), eps))
    products = elementwise(lambda u, v: u * v, unit(x1, "cosine_x1"), unit(x2, "cosine_x2"))
    return reduction(ReduceOp.SUM, products, axis, name="cosine_similarity")


# -- linear --------------------------------------------------------------------------------
_LINEAR_TRANSPOSE_ROWS = 4       # fewer input rows: weight read in place, once


def linear(x, weight, *params, has_bias):
    """x @ weight.T + bias: x (*, in), weight (out, in) and bias (out,), or weight (in,)
    and bias () (torch's 1-D weight: one output feature, its axis dropped)."""
    x, weight = as_tensor(x), as_tensor(weight)
    bias = params[0] if has_bias else None
    if weight.ndim not in (1, 2):
        raise ShapeError(f"linear(): weight must be (out_features, in_features) or "
                         f"(in_features,), got shape {shape_text(weight.shape)}", user_loc())
    if x.ndim < 1 or not may_agree(x.shape[-1], weight.shape[-1]):
        raise ShapeError(f"linear(): input's last dimension must equal weight's "
                         f"in_features {weight.shape[-1]}, got input of shape "
                         f"{shape_text(x.shape)} and weight of shape "
                         f"{shape_text(weight.shape)}", user_loc())
    k = te.reduce_axis(x.shape[-1])
    if weight.ndim == 1:
        _check_param(bias, (), "bias", "linear")
        y = te.tensor(x.shape[:-1], lambda *idx: te.reduce(
            ReduceOp.SUM, x[idx + (k,)] * weight[k], [k]), name="linear")
        return y if bias is None else \
            te.tensor(y.shape, lambda *idx: y[idx] + bias[()], name="linear_bias")
    nout = weight.shape[0]
    if bias is not None and shape_of(bias) in ((), (1,)):      # (broadcast, as torch does)
        first = (0,) * len(shape_of(bias))
        bias = te.tensor((nout,), lambda f: params[0][first], name="linear_bias_row")
    _check_param(bias, (nout,), "bias", "linear")
    shape = x.shape[:-1] + (nout,)
    rows = 1
    for n in x.shape[:-1]:
        rows = rows * n
    if isinstance(rows, int) and rows < _LINEAR_TRANSPOSE_ROWS:
        # a dot product per output: weight is read once, in place
        def body(*idx):
            return te.reduce(ReduceOp.SUM, x[idx[:-1] + (k,)] * weight[idx[-1], k], [k])
    else:
        # weight read as (in, out) from a transposed copy, which the matmul's register
        # tile streams along its rows (6x faster than dot products at 512x1024x1024)
        wt = te.tensor(weight.shape[::-1], lambda i, j: weight[j, i], name="linear_weight_t")

        def body(*idx):
            return te.reduce(ReduceOp.SUM, x[idx[:-1] + (k,)] * wt[k, idx[-1]], [k])
    y = te.tensor(shape, body, name="linear")
    if bias is None:
        return y
    return te.tensor(shape, lambda *idx: y[idx] + bias[idx[-1]], name="linear_bias")


# -- convolution ---------------------------------------------------------------------------
def _conv_input(op, x, weight, nsp):
    """(batch dims, C) of a convolution's input of nsp spatial dimensions, checked."""
    x, weight = as_tensor(x), as_tensor(weight)
    if x.ndim not in (nsp + 1, nsp + 2):
        raise ShapeError(f"{op}(): expected input of {nsp + 1} (unbatched) or {nsp + 2} "
                         f"(batched) dimensions, got shape {shape_text(x.shape)}", user_loc())
    if weight.ndim != nsp + 2:
        raise ShapeError(f"{op}(): weight must have {nsp + 2} dimensions, got shape "
                         f"{shape_text(weight.shape)}", user_loc())
    if any(k == 0 for k in weight.shape[2:]):
        raise ShapeError(f"{op}(): kernel size must be positive, got weight of shape "
                         f"{shape_text(weight.shape)}", user_loc())
    return x, weight, x.ndim - nsp - 1


def _pad(x, lo, hi, value, name):
    """x with its last len(lo) dimensions padded by lo before and hi after, with `value`
    (a stage reading x under guards; x itself when there is no padding); a negative width
    cuts that many elements off instead."""
    if not any(lo) and not any(hi):
        return x
    first = x.ndim - len(lo)
    shape = x.shape[:first] + tuple(n + a + b for n, a, b in zip(x.shape[first:], lo, hi))

    def body(*idx):
        src, conds = list(idx), []
        for d, (a, b) in enumerate(zip(lo, hi)):
            i = idx[first + d]
            if a:       # (a negative width removes elements: no guard)
                src[first + d] = i - a
            if a > 0:
                conds.append(i >= a)
            if b > 0:
                conds.append(i < x.shape[first + d] + a)
        return build.select(te.all(*conds), x[tuple(src)], value)
    return te.tensor(shape, body, name=name)


def _out_size(op, size, k, lo, hi, stride, dilation):
    """Output sizes of a convolution; torch's error when a dilated kernel exceeds the
    padded input."""
    padded = tuple(n + a + b for n, a, b in zip(size, lo, hi))
    eff = tuple(d * (kk - 1) + 1 for kk, d in zip(k, dilation))
    if any(p < e for p, e in zip(padded, eff)):
        raise ShapeError(f"{op}(): calculated padded input size per channel "
                         f"({' x '.join(map(str, padded))}) is smaller than the dilated kernel "
                         f"size ({' x '.join(map(str, eff))}): the kernel can't be greater than "
                         "the actual input size", user_loc())
    return tuple((p - e) // s + 1 for p, e, s in zip(padded, eff, stride))


def _window_sum(P, nb, cin_group, fout_group, groups, ksize, out_sp, nout, stride,
                dilation, wread, name, flat_rows=False):
    """out[b, f, *o] = sum over (c, *r) of P[b, chan, *(o * stride + r * dilation)] *
    wread(f, c, r), chan = the group of f's input channel c: a convolution's reduction.
    With flat_rows (a CPU kernel), narrow output rows run as a matmul over the output
    positions flattened (_flat_window_sum)."""
    rc = te.reduce_axis(cin_group)
    # (a kernel axis of one position is index 0, no reduction axis: a 1 x 1 convolution
    # reads P[b, c, y, x], which the automatic schedule packs like a matmul's operand)
    rk = [te.reduce_axis(k) if k != 1 else 0 for k in ksize]
    shape = P.shape[:nb] + (nout,) + out_sp
    if flat_rows and groups == 1 and _narrow_rows(P, out_sp):
        return _flat_window_sum(P, nb, ksize, out_sp, nout, stride, dilation, rc, rk, wread,
                                name)
    strided = stride[-1] != 1
    if strided:
        P = _window_columns(P, ksize[-1], out_sp[-1], stride[-1], dilation[-1],
                            name + "_cols")

    def body(*idx):
        f, o = idx[nb], idx[nb + 1:]
        chan = rc if groups == 1 else (f // fout_group) * cin_group + rc
        src = idx[:nb] + (chan,) + tuple(i * s + r * d if not isinstance(r, int) else
                                         i if s == 1 else i * s for i, r, s, d in
                                         zip(o, rk, stride, dilation))
        if strided:
            src = src[:-1] + (rk[-1], o[-1])
        return te.reduce(ReduceOp.SUM, P[src] * wread(f, rc, tuple(rk)),
                         [rc] + [r for r in rk if not isinstance(r, int)])
    return te.tensor(shape, body, name=name)


def _narrow_rows(P, out_sp):
    """Whether the output rows of a convolution over 2+ spatial axes are narrower than the
    host's register tile (two vectors: _tile_sizes) and no whole number of vectors, so
    that tiles along a row would be partial or none (a 3 x 3 conv2d of (1, 256, 7, 7) by
    256 filters ran as one 7-wide vector of 16 per output row, accumulating in memory:
    4x NumPy's im2col + BLAS). Rows of one whole vector keep their tiles (16-wide float32
    rows on AVX-512 were 5-20% faster so than flattened)."""
    if len(out_sp) < 2 or not all(isinstance(d, int) for d in P.shape + out_sp):
        return False
    lanes = host().lanes(dtypes.itemsize(P.dtype))
    return out_sp[-1] < 2 * lanes and out_sp[-1] % lanes != 0


def _flat_window_sum(P, nb, ksize, out_sp, nout, stride, dilation, rc, rk, wread, name):
    """A convolution of narrow output rows as a matrix product over its output positions
    flattened: flat[b, f, o] = sum over (c, *r) of cols[b, c, *r, o] * wread(f, c, r),
    cols[b, c, *r, o] = P[b, c, *(o's position * stride + r * dilation)] (im2col, which
    the register tile packs in panels of its width, one copy of the windows), then
    reshaped to out[b, f, *o]."""
    npos = math.prod(out_sp)

    def position(o):
        """The output position (per spatial axis) of flattened position o."""
        idx, inner = [], npos
        for d, n in enumerate(out_sp):
            inner //= n
            i = o // inner if inner != 1 else o
            idx.append(i % n if d else i)
        return idx

    def window(*idx):
        r, pos = idx[nb + 1:-1], position(idx[-1])
        return P[idx[:nb + 1] + tuple(i * s + k * d for i, k, s, d in
                                      zip(pos, r, stride, dilation))]
    cols = te.tensor(P.shape[:nb + 1] + tuple(ksize) + (npos,), window, name=name + "_cols")
    kpos = tuple(0 if isinstance(r, int) else r for r in rk)

    def body(*idx):
        return te.reduce(ReduceOp.SUM, cols[idx[:nb] + (rc,) + kpos + (idx[-1],)] *
                         wread(idx[nb], rc, tuple(rk)),
                         [rc] + [r for r in rk if not isinstance(r, int)])
    flat = te.tensor(P.shape[:nb] + (nout, npos), body, name=name + "_flat")

    def unflatten(*idx):
        o = idx[nb + 1]
        for i, n in zip(idx[nb + 2:], out_sp[1:]):
            o = o * n + i
        return flat[idx[:nb + 1] + (o,)]
    return te.tensor(P.shape[:nb] + (nout,) + out_sp, unflatten, name=name)


def _window_columns(P, k, out, stride, dilation, name):
    """P's last axis laid out as (kernel position, output column): cols[..., r, o] =
    P[..., o * stride + r * dilation]. A strided window sum reads cols along o with stride
    1, so its register tiles load whole vectors (read from P directly, with the stride,
    the automatic schedule found no contiguous loop: a 3 x 3, stride 2 conv2d of (4, 64,
    56, 56) by 128 filters took 200 ms as scalar dot products, im2col and BLAS 9 ms). The
    copy holds k / stride times P's elements."""
    return te.tensor(P.shape[:-1] + (k, out),
                     lambda *idx: P[idx[:-2] + (idx[-1] * stride + idx[-2] * dilation,)],
                     name=name)


def _add_bias(y, bias, nb, name):
    if bias is None:
        return y
    _check_param(bias, (y.shape[nb],), "bias", name)
    return te.tensor(y.shape, lambda *idx: y[idx] + bias[idx[nb]], name=name + "_bias")


def _check_groups(op, groups, cin, cout, x, weight, expect_in):
    if isinstance(cout, int) and cout < groups:     # (no output channel: torch refuses it)
        raise ShapeError(f"{op}(): groups={groups} expects weight with at least {groups} "
                         f"output channel(s) (dimension 0), got weight of shape "
                         f"{shape_text(weight.shape)}", user_loc())
    if cout % groups:
        raise ShapeError(f"{op}(): groups={groups} must divide the number of output "
                         f"channels, weight has shape {shape_text(weight.shape)}", user_loc())
    if not same_dim(cin, expect_in):
        raise ShapeError(f"{op}(): groups={groups} and weight of shape "
                         f"{shape_text(weight.shape)} expect input with {expect_in} "
                         f"channels, got input of shape {shape_text(x.shape)} "
                         f"({cin} channels)", user_loc())


def conv(x, weight, *params, op, stride, padding, dilation, groups, has_bias,
         flat_rows=False):
    """torch's conv1d/conv2d/conv3d (cross-correlation), padding as (lo, hi) per spatial
    dimension: a padded stage, then a reduction over (input channel, *kernel); flat_rows:
    see _window_sum."""
    nsp = len(stride)
    x, weight, nb = _conv_input(op, x, weight, nsp)
    F, Cg = weight.shape[0], weight.shape[1]
    _check_groups(op, groups, x.shape[nb], F, x, weight, Cg * groups)
    lo, hi = tuple(p[0] for p in padding), tuple(p[1] for p in padding)
    ksize = weight.shape[2:]
    out_sp = _out_size(op, x.shape[nb + 1:], ksize, lo, hi, stride, dilation)
    P = _pad(x, lo, hi, 0, op + "_pad")
    y = _window_sum(P, nb, Cg, F // groups, groups, ksize, out_sp, F, stride, dilation,
                    lambda f, c, r: weight[(f, c) + r], op, flat_rows)
    return _add_bias(y, params[0] if has_bias else None, nb, op)


def conv_transpose(x, weight, *params, op, stride, padding, output_padding, dilation,
                   groups, has_bias):
    """torch's conv_transpose1d/2d: out[o] = sum over (i, r) with o = i * stride - padding
    + r * dilation of x[i] * weight[r]. With stride 1, the input padded by dilation * (k - 1)
    - padding correlated with the flipped kernel; with a larger stride, the products of
    every input element with every kernel element (a matrix product, no zeros multiplied),
    each output summing the kernel positions that reach it."""
    nsp = len(stride)
    x, weight, nb = _conv_input(op, x, weight, nsp)
    Cin, Cout = x.shape[nb], weight.shape[1] * groups
    if isinstance(Cout, int) and Cout == 0:         # (torch's oneDNN refuses it too)
        raise ShapeError(f"{op}(): expected weight with at least one output channel per "
                         f"group (dimension 1), got weight of shape "
                         f"{shape_text(weight.shape)}", user_loc())
    if not same_dim(weight.shape[0], Cin) or weight.shape[0] % groups:
        raise ShapeError(f"{op}(): weight of shape {shape_text(weight.shape)} with "
                         f"groups={groups} expects input with {weight.shape[0]} channels "
                         f"(divisible by groups), got input of shape {shape_text(x.shape)}",
                         user_loc())
    for op_, s, d in zip(output_padding, stride, dilation):
        if op_ >= s and op_ >= d:
            raise ShapeError(f"{op}(): output_padding must be smaller than either stride or "
                             f"dilation, got output_padding={tuple(output_padding)}, "
                             f"stride={tuple(stride)}, dilation={tuple(dilation)}", user_loc())
    ksize = weight.shape[2:]
    size = x.shape[nb + 1:]
    out_sp = tuple((n - 1) * s - 2 * p + d * (k - 1) + q + 1 for n, s, p, d, k, q in
                   zip(size, stride, padding, dilation, ksize, output_padding))
    if any(o <= 0 for o in out_sp):
        raise ShapeError(f"{op}(): the output size {out_sp} is not positive (input "
                         f"{shape_text(x.shape)}, kernel {ksize}, padding {tuple(padding)})",
                         user_loc())
    Cg, Fg = Cin // groups, Cout // groups

    def wread(f, c, r):
        cin = c if groups == 1 else (f // Fg) * Cg + c
        return weight[(cin, f % Fg if groups != 1 else f) + tuple(r)]
    if any(s != 1 for s in stride):
        y = _scatter_sum(x, nb, Cg, Fg, groups, Cout, ksize, out_sp, stride, padding,
                         dilation, wread, op)
        return _add_bias(y, params[0] if has_bias else None, nb, op)
    edge = tuple(d * (k - 1) - p for d, k, p in zip(dilation, ksize, padding))
    zshape = x.shape[:nb + 1] + tuple(o + d * (k - 1) for o, d, k in zip(out_sp, dilation,
                                                                         ksize))

    def padded(*idx):
        src, conds = list(idx), []
        for n, (t_n, e) in enumerate(zip(size, edge)):
            t = idx[nb + 1 + n] - e
            conds += [t >= 0, t <= t_n - 1]
            src[nb + 1 + n] = t
        return build.select(te.all(*conds), x[tuple(src)], 0)
    P = te.tensor(zshape, padded, name=op + "_pad")
    y = _window_sum(P, nb, Cg, Fg, groups, ksize, out_sp, Cout, (1,) * nsp, dilation,
                    lambda f, c, r: wread(f, c, tuple(k - 1 - ri for k, ri in zip(ksize, r))),
                    op)
    return _add_bias(y, params[0] if has_bias else None, nb, op)


def _scatter_sum(x, nb, Cg, Fg, groups, Cout, ksize, out_sp, stride, padding, dilation,
                 wread, op):
    """A strided transposed convolution: prod[b, f, *r, *i] = sum over c of x[b, chan, *i]
    * wread(f, c, r) (a matrix product), then out[b, f, *o] = the sum of prod[b, f, *r, *i]
    over the r with o + padding - r * dilation = i * stride for an i inside the input."""
    nsp = len(ksize)
    size = x.shape[nb + 1:]
    rc = te.reduce_axis(Cg)

    def products(*idx):
        f, r, i = idx[nb], idx[nb + 1:nb + 1 + nsp], idx[nb + 1 + nsp:]
        chan = rc if groups == 1 else (f // Fg) * Cg + rc
        return te.reduce(ReduceOp.SUM, x[idx[:nb] + (chan,) + i] * wread(f, rc, r), [rc])
    prod = te.tensor(x.shape[:nb] + (Cout,) + tuple(ksize) + tuple(size), products,
                     name=op + "_products")
    rk = [te.reduce_axis(k) for k in ksize]

    def gather(*idx):
        conds, src = [], []
        for o, r, n, s, p, d in zip(idx[nb + 1:], rk, size, stride, padding, dilation):
            t = o + p - r * d
            conds += [t >= 0, t <= (n - 1) * s]
            if s != 1:
                conds.append(build.compare(CmpOp.EQ, t % s, 0))   # (== is structural)
            src.append(_min(_max(t // s if s != 1 else t, 0), n - 1))
        return te.reduce(ReduceOp.SUM, build.select(
            te.all(*conds), prod[idx[:nb + 1] + tuple(rk) + tuple(src)], 0), rk)
    return te.tensor(x.shape[:nb] + (Cout,) + out_sp, gather, name=op)


# -- pooling -------------------------------------------------------------------------------
def check_channels(op, shape, axis):
    """torch's rule for pooling and resampling: an empty batch gives an empty result, an
    empty channel dimension (`axis` of shape) an error."""
    if isinstance(shape[axis], int) and shape[axis] == 0:
        raise ShapeError(f"{op}(): expected input with non-zero channels (only the batch "
                         f"dimension may be empty), got shape {shape_text(shape)}",
                         user_loc())


def _pool_sizes(op, x, ksize, stride, padding, dilation, ceil_mode):
    """Output sizes of a pooling window (torch's rule, ceil_mode's last window starting
    inside the input or its left padding)."""
    nsp = len(ksize)
    if x.ndim not in (nsp + 1, nsp + 2):
        raise ShapeError(f"{op}(): expected input of {nsp + 1} or {nsp + 2} dimensions, got "
                         f"shape {shape_text(x.shape)}", user_loc())
    check_channels(op, x.shape, x.ndim - nsp - 1)
    out = []
    for n, k, s, p, d in zip(x.shape[x.ndim - nsp:], ksize, stride, padding, dilation):
        span = n + 2 * p - d * (k - 1) - 1
        o = (span + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (o - 1) * s >= n + p:
            o -= 1
        if o < 1:
            raise ShapeError(f"{op}(): input of shape {shape_text(x.shape)} is too small for "
                             f"kernel_size={tuple(ksize)}, padding={tuple(padding)}, "
                             f"dilation={tuple(dilation)}: the output size would be {o}",
                             user_loc())
        out.append(o)
    return tuple(out)


def _window(x, nsp, out_sp, ksize, stride, padding, dilation, fill):
    """(reduce axes, body(idx) -> the guarded window element) of a pooling window."""
    rk = [te.reduce_axis(k) for k in ksize]
    first = x.ndim - nsp

    def element(idx):
        src, conds = list(idx[:first]), []
        for d in range(nsp):
            i = idx[first + d] * stride[d] - padding[d] + rk[d] * dilation[d]
            if padding[d]:
                conds.append(i >= 0)
            last = (out_sp[d] - 1) * stride[d] - padding[d] + (ksize[d] - 1) * dilation[d]
            if last >= x.shape[first + d]:
                conds.append(i < x.shape[first + d])
            src.append(i)
        e = x[tuple(src)]
        return build.select(te.all(*conds), e, fill) if conds else e
    return rk, element


def max_pool(x, op, kernel_size, stride, padding, dilation, ceil_mode, return_indices=False):
    """The maximum over each (dilated) window; padding never wins (-inf). With
    return_indices, also each maximum's position in its input plane (torch's: row-major
    over the spatial axes; the first maximum of the window, padding never chosen)."""
    x = as_tensor(x)
    for k, p in zip(kernel_size, padding):
        # torch's rule: at most half of the kernel size itself (k // 2), dilation or not
        # (a wider padding can put a whole window in the padding: a -inf maximum)
        if p > k // 2:
            raise ShapeError(f"{op}(): padding should be at most half of the kernel size, "
                             f"got padding={tuple(padding)}, "
                             f"kernel_size={tuple(kernel_size)}, dilation={tuple(dilation)}",
                             user_loc())
    out_sp = _pool_sizes(op, x, kernel_size, stride, padding, dilation, ceil_mode)
    nsp = len(kernel_size)
    rk, element = _window(x, nsp, out_sp, kernel_size, stride, padding, dilation,
                          _lowest(x.dtype))
    shape = x.shape[:x.ndim - nsp] + out_sp
    y = te.tensor(shape, lambda *idx: te.reduce(ReduceOp.MAX, element(idx), rk), name=op)
    if not return_indices:
        return y
    first = x.ndim - nsp

    def spot(idx, rs):
        src = [idx[first + d] * stride[d] - padding[d] + rs[d] * dilation[d]
               for d in range(nsp)]
        return src, [c for d, i in enumerate(src) for c in (i >= 0, i < x.shape[first + d])]
    return y, _max_positions(x, y, kernel_size, spot, op)


def _max_positions(x, y, window, spot, op):
    """Where each window's maximum y is: the row-major position in x's plane (of its last
    len(window) axes) of the window's first element inside x equal to it, or of its last
    NaN where there is one (torch's loop takes a NaN it meets, and every later one),
    torch's return_indices. spot(idx, rs) gives the plane coordinates of window position
    rs of output idx and the conditions for it to lie inside x."""
    nsp = len(window)
    first = x.ndim - nsp
    rk = [te.reduce_axis(k) for k in window]

    def first_hit(*idx):
        src, inside = spot(idx, rk)
        e = x[tuple(idx[:first]) + tuple(src)]
        at = 0
        for d in range(nsp):
            at = at * window[d] + rk[d]
        # (a NaN outranks an equal element, and a later NaN an earlier one)
        hit = build.select(build.compare(CmpOp.NE, e, e), build.cast(at, "int64") + 2,
                           build.select(build.compare(CmpOp.EQ, e, y[idx]), 1, 0))
        return te.reduce(ReduceOp.ARGMAX, build.select(te.all(*inside), hit, 0)
                         if inside else hit, rk)
    arg = te.tensor(y.shape, first_hit, name=op + "_argmax")

    def position(*idx):
        q, rs = arg[idx], [None] * nsp
        for d in reversed(range(nsp)):
            rs[d] = q % window[d] if d else q
            q = q // window[d]
        pos = 0
        for d, i in enumerate(spot(idx, rs)[0]):
            pos = pos * x.shape[first + d] + i
        return pos
    return te.tensor(y.shape, position, name=op + "_indices")


def avg_pool(x, op, kernel_size, stride, padding, ceil_mode, count_include_pad,
             divisor_override):
    """The mean over each window; the divisor as torch counts it (padding counted or not,
    windows clipped at the padded edge, or divisor_override)."""
    x = as_tensor(x)
    ints = dtypes.is_int(x.dtype) and x.dtype != "bool"
    if not dtypes.is_float(x.dtype) and not ints:
        x = elementwise(_float_of, x)
    for k, p in zip(kernel_size, padding):
        if 2 * p > k:
            raise ShapeError(f"{op}(): padding should be at most half of the kernel size, "
                             f"got padding={tuple(padding)}, kernel_size={tuple(kernel_size)}",
                             user_loc())
    nsp = len(kernel_size)
    ones = (1,) * nsp
    out_sp = _pool_sizes(op, x, kernel_size, stride, padding, ones, ceil_mode)
    rk, element = _window(x, nsp, out_sp, kernel_size, stride, padding, ones, 0)
    total = te.tensor(x.shape[:x.ndim - nsp] + out_sp, lambda *idx: te.reduce(
        ReduceOp.SUM, build.cast(element(idx), "int64") if ints else element(idx), rk),
        name=op + "_sum")
    first = x.ndim - nsp

    def divisor(idx):
        if divisor_override is not None:
            return divisor_override
        n = 1
        for d in range(nsp):
            size, k, s, p = x.shape[first + d], kernel_size[d], stride[d], padding[d]
            start = idx[first + d] * s - p
            end = _min(start + k, size + p)
            if not count_include_pad:
                start, end = _max(start, 0), _min(end, size)
            n = n * (end - start)
        return build.cast(n, "int64" if ints else x.dtype)
    if ints:        # torch's integer mean: the sum divided, truncated toward zero
        return te.tensor(total.shape, lambda *idx: build.cast(
            _trunc_div(total[idx], divisor(idx)), x.dtype), name=op)
    return te.tensor(total.shape, lambda *idx: total[idx] / divisor(idx), name=op)


def _trunc_div(a, b):
    """a / b rounded toward zero (C's integer division) for int64 a and b != 0."""
    q = a // b
    inexact = build.logical(BinOp.AND, build.compare(CmpOp.NE, q * b, a),
                            build.compare(CmpOp.NE, a < 0, b < 0))
    return build.select(inexact, q + 1, q)


def _adaptive_bounds(n, o):
    """(start(i), end(i), the largest window) of torch's adaptive pooling windows."""
    def start(i):
        return (i * n) // o

    def end(i):
        return ((i + 1) * n + o - 1) // o
    return start, end, max(end(i) - start(i) for i in range(o))


def adaptive_pool(x, op, output_size, reduce, return_indices=False):
    """torch's adaptive average / max pooling: output i covers input [floor(i * n / o),
    ceil((i + 1) * n / o))."""
    x = as_tensor(x)
    nsp = len(output_size)
    if x.ndim not in (nsp + 1, nsp + 2):
        raise ShapeError(f"{op}(): expected input of {nsp + 1} or {nsp + 2} dimensions, got "
                         f"shape {shape_text(x.shape)}", user_loc())
    first = x.ndim - nsp
    if any(n == 0 for n in x.shape[first:]):
        # (no window has an element: a mean of nothing, a maximum of nothing)
        raise ShapeError(f"{op}(): expected input with non-zero spatial sizes, got shape "
                         f"{shape_text(x.shape)}", user_loc())
    if reduce == "max" and x.ndim == nsp + 2:
        # (torch's adaptive max pooling refuses a batched input's empty channels, where
        # its average pooling and an unbatched input give an empty result)
        check_channels(op, x.shape, 1)
    sizes = tuple(n if o is None else o for n, o in zip(x.shape[first:], output_size))
    if any(o < 0 for o in sizes):
        raise ShapeError(f"{op}(): output_size must be non-negative, got "
                         f"{tuple(output_size)}", user_loc())
    if reduce == "avg" and not dtypes.is_float(x.dtype):
        x = elementwise(_float_of, x)
    out_shape = x.shape[:first] + sizes
    if 0 in sizes:          # (no window at all: torch's empty result)
        y = te.tensor(out_shape, lambda *idx: build.cast(0, x.dtype), name=op)
        return (y, te.tensor(out_shape, lambda *idx: build.cast(0, "int64"),
                             name=op + "_indices")) if return_indices else y
    bounds = [_adaptive_bounds(n, o) for n, o in zip(x.shape[first:], sizes)]
    rk = [te.reduce_axis(b[2]) for b in bounds]
    fill = 0 if reduce == "avg" else _lowest(x.dtype)

    def spot(idx, rs):
        src, conds = [], []
        for d, (start, end, kmax) in enumerate(bounds):
            i = start(idx[first + d]) + rs[d]
            if any(end(j) - start(j) < kmax for j in range(sizes[d])):
                conds += [i < end(idx[first + d]), i < x.shape[first + d]]
            src.append(i)
        return src, conds

    def window(idx):
        src, conds = spot(idx, rk)
        e = x[tuple(idx[:first]) + tuple(src)]
        return build.select(te.all(*conds), e, fill) if conds else e

    def count(idx):
        n = 1
        for d, (start, end, _) in enumerate(bounds):
            n = n * (end(idx[first + d]) - start(idx[first + d]))
        return build.cast(n, x.dtype)
    rop = ReduceOp.SUM if reduce == "avg" else ReduceOp.MAX
    y = te.tensor(out_shape, lambda *idx: te.reduce(rop, window(idx), rk), name=op)
    if reduce == "max":
        return (y, _max_positions(x, y, [b[2] for b in bounds], spot, op)) \
            if return_indices else y
    return te.tensor(out_shape, lambda *idx: y[idx] / count(idx), name=op + "_mean")


# -- resampling ----------------------------------------------------------------------------
def _coord_scale(n, o, scale, align_corners):
    """torch's source-per-destination scale of one dimension (a Python float)."""
    if align_corners:
        return (n - 1) / (o - 1) if o > 1 else 0.0
    return 1.0 / scale if scale is not None else n / o


def interpolate(x, size, scales, mode, align_corners, antialias=False):
    """torch's interpolate to spatial `size`: nearest (floor(dst * scale)), nearest-exact
    (floor((dst + 0.5) * scale)), (bi)linear (half-pixel centres clamped at 0, or corners
    aligned); `scales` are the user's scale factors (None: in / out). With `antialias`
    (bilinear and bicubic of 2 spatial dimensions) the filter widens with the scale."""
    x = as_tensor(x)
    nsp = len(size)
    first = x.ndim - nsp
    if not dtypes.is_float(x.dtype):
        if mode not in ("nearest", "nearest-exact"):
            raise ArgumentError(f"interpolate(): mode='{mode}' needs a floating-point input, "
                                f"got {x.dtype}", user_loc())
    cdt = "float32" if x.dtype != "float64" else "float64"
    ins = x.shape[first:]
    scale = [_coord_scale(n, o, s, align_corners) for n, o, s in zip(ins, size, scales)]
    out_shape = x.shape[:first] + tuple(size)

    def fconst(v):
        return build.as_expr(np.dtype(cdt).type(v))

    if mode in ("nearest", "nearest-exact"):
        # float32 index arithmetic as torch's CPU kernel does, so ties land alike
        scale = [float(np.float32(n) / np.float32(o)) if s is None else float(np.float32(1 / s))
                 for n, o, s in zip(ins, size, scales)]

        def src(d, i):
            # (torch's 2-d kernel alone copies a size kept, or halves a size doubled,
            # whatever the scale factor; in 1-d and 3-d the scale decides)
            if mode == "nearest" and nsp == 2 and size[d] == ins[d]:
                return i
            if mode == "nearest" and nsp == 2 and size[d] == 2 * ins[d]:
                return i // 2
            f = build.cast(i, "float32")
            if mode == "nearest-exact":
                f = f + 0.5
            j = build.cast(build.call(Intrin.FLOOR, f * build.as_expr(np.float32(scale[d]))),
                           "int64")
            return _min(j, ins[d] - 1)
        return te.tensor(out_shape, lambda *idx: x[idx[:first] + tuple(
            src(d, idx[first + d]) for d in range(nsp))], name="interpolate")

    if antialias:
        for d in (1, 0):        # (the contiguous axis first, as torch resamples)
            if size[d] != ins[d]:
                x = _antialiased(x, first + d, size[d], scale[d], mode, cdt, fconst)
        return x
    if mode == "bicubic":
        return _bicubic(x, first, ins, out_shape, scale, align_corners, cdt, fconst)

    def taps(d, i):
        """(lower index, upper index, weight of the upper) along dimension d."""
        f = build.cast(i, cdt)
        if align_corners:
            s = f * fconst(scale[d])
        else:
            s = _max(fconst(scale[d]) * (f + 0.5) - 0.5, fconst(0.0))
        i0 = build.cast(s, "int64")            # s >= 0: truncation is floor
        i0 = _min(i0, ins[d] - 1)
        i1 = _min(i0 + 1, ins[d] - 1)
        return i0, i1, s - build.cast(i0, cdt)

    # (a dimension whose size is kept is copied, whatever the scale factor, as torch does)
    moved = [d for d in range(nsp) if size[d] != ins[d]]

    def body(*idx):
        tap = {d: taps(d, idx[first + d]) for d in moved}
        total = None
        for corner in range(1 << len(moved)):
            w, src = None, list(idx[first:])
            for k, d in enumerate(moved):
                i0, i1, l1 = tap[d]
                upper = corner >> k & 1
                src[d] = i1 if upper else i0
                wd = l1 if upper else 1.0 - l1
                w = wd if w is None else w * wd
            term = x[idx[:first] + tuple(src)]
            if w is not None:
                term = build.cast(w, x.dtype) * term
            total = term if total is None else total + term
        return total
    return te.tensor(out_shape, body, name="interpolate")


def _aa_filter(mode, t, fconst):
    """torch's antialiasing filter at distance t: the triangle of bilinear, for bicubic
    Keys' cubic with A = -0.5 (as PIL's, not interpolate's -0.75), or Lanczos-3."""
    t = build.call(Intrin.ABS, t)
    if mode == "bilinear":
        return _max(fconst(1.0) - t, fconst(0.0))
    if mode == "lanczos":
        return _lanczos3(t, fconst)
    a = -0.5
    near = ((fconst(a + 2) * t - fconst(a + 3)) * t) * t + fconst(1.0)
    far = ((fconst(a) * t - fconst(5 * a)) * t + fconst(8 * a)) * t - fconst(4 * a)
    return build.select(t < fconst(1.0), near, build.select(t < fconst(2.0), far, fconst(0.0)))


def _lanczos3(t, fconst):
    """The Lanczos-3 window at distance t >= 0: sinc(t) * sinc(t / 3) inside |t| < 3 (sinc
    the normalised one, sin(pi t) / (pi t), 1 at 0), else 0; PIL's LANCZOS filter."""
    def sinc(u):
        v = u * fconst(math.pi)
        # (the divisor made 1 at 0, where the select takes 1 anyway: no 0 / 0 computed)
        zero = build.compare(CmpOp.EQ, u, fconst(0.0))
        return build.select(zero, fconst(1.0),
                            build.call(Intrin.SIN, v) / build.select(zero, fconst(1.0), v))
    return build.select(t < fconst(3.0), sinc(t) * sinc(t / fconst(3.0)), fconst(0.0))


def _antialiased(x, axis, size, scale, mode, cdt, fconst):
    """x resampled along `axis` to `size` with torch's antialiasing: output i is centred
    at scale * (i + 0.5) in the input, and sums the inputs within the filter's support
    (its half-width, 1 for bilinear, 2 for bicubic and 3 for lanczos, stretched by the
    scale where that is above 1) weighted by the filter and normalised by their sum."""
    n = x.shape[axis]
    half = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}[mode]
    support = half * scale if scale >= 1.0 else half
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    taps = int(math.ceil(support)) * 2 + 1

    def window(i):
        """(first input, inputs taken) of output i, in int64."""
        centre = fconst(scale) * (build.cast(i, cdt) + fconst(0.5))
        lo = _max(build.cast(centre - fconst(support) + fconst(0.5), "int64"), 0)
        hi = _min(build.cast(centre + fconst(support) + fconst(0.5), "int64"), n)
        return centre, lo, _max(_min(hi - lo, taps), 0)

    def raw(i, k):
        centre, lo, count = window(i)
        w = _aa_filter(mode, (build.cast(k + lo, cdt) - centre + fconst(0.5)) * fconst(inv),
                       fconst)
        return build.select(k < count, w, fconst(0.0))
    weights = te.tensor((size, taps), raw, name="aa_weights")
    r = te.reduce_axis(taps)
    total = te.tensor((size,), lambda i: te.reduce(ReduceOp.SUM, weights[i, r], r),
                      name="aa_total")
    k = te.reduce_axis(taps)

    def body(*idx):
        i = idx[axis]
        _, lo, count = window(i)
        src = idx[:axis] + (_min(lo + k, n - 1),) + idx[axis + 1:]
        term = weights[i, k] * build.cast(x[src], cdt)
        s = te.reduce(ReduceOp.SUM, build.select(k < count, term, fconst(0.0)), k)
        t = total[i]
        return build.cast(build.select(build.compare(CmpOp.NE, t, fconst(0.0)), s / t, s),
                          x.dtype)
    return te.tensor(x.shape[:axis] + (size,) + x.shape[axis + 1:], body,
                     name="interpolate_aa")


def _bicubic(x, first, ins, out_shape, scale, align_corners, cdt, fconst):
    """torch's bicubic: Keys' cubic convolution (A = -0.75) over the 4 x 4 inputs around
    the source point (half-pixel centres, not clamped; or corners aligned), indices held
    inside the input; rows of 4 along the last axis first, then the 4 rows, as torch
    sums them. Every dimension is resampled, a size kept included (torch copies none)."""
    a = -0.75

    def near(t):            # |t| <= 1
        return ((fconst(a + 2) * t - fconst(a + 3)) * t) * t + fconst(1.0)

    def far(t):             # 1 < |t| < 2
        return ((fconst(a) * t - fconst(5 * a)) * t + fconst(8 * a)) * t - fconst(4 * a)

    def taps(d, i):
        f = build.cast(i, cdt)
        real = f * fconst(scale[d]) if align_corners else \
            fconst(scale[d]) * (f + 0.5) - 0.5
        low = build.call(Intrin.FLOOR, real)
        t = real - low
        low = build.cast(low, "int64")
        weights = (far(t + 1.0), near(t), near(1.0 - t), far(2.0 - t))
        index = tuple(_max(_min(low + (k - 1), ins[d] - 1), 0) for k in range(4))
        return index, weights

    def body(*idx):
        (ry, wy), (rx, wx) = taps(0, idx[first]), taps(1, idx[first + 1])
        total = None
        for r, w in zip(ry, wy):
            row = None
            for c, v in zip(rx, wx):
                term = v * build.cast(x[idx[:first] + (r, c)], cdt)
                row = term if row is None else row + term
            total = w * row if total is None else total + w * row
        return build.cast(total, x.dtype)
    return te.tensor(out_shape, body, name="interpolate")


# -- padding -------------------------------------------------------------------------------
def pad(x, *value, pads, mode):
    """torch's pad: pads holds one (lo, hi) pair per padded dimension, the last ones of x
    in their order; a negative width removes elements. constant fills with the scalar
    operand value (a run-time one: every value shares a kernel), cast to x's dtype; reflect
    and replicate map an index outside the input (lo and hi both under its size: one
    reflection) back into it; circular wraps within the input left once its negative
    widths have cut it, as torch does."""
    x = as_tensor(x)
    first = x.ndim - len(pads)
    if mode == "constant":
        fill = build.cast(load(operand(value[0], "value"), (), ()), x.dtype)
        return _pad(x, tuple(a for a, _ in pads), tuple(b for _, b in pads), fill, "pad")
    if mode == "circular":
        cut = [(max(-a, 0), max(-b, 0)) for a, b in pads]
        if any(cut_lo or cut_hi for cut_lo, cut_hi in cut):
            inner = x
            x = te.tensor(x.shape[:first] + tuple(
                n - a - b for n, (a, b) in zip(x.shape[first:], cut)), lambda *idx: inner[
                idx[:first] + tuple(i + a for i, (a, _) in zip(idx[first:], cut))],
                name="pad_cut")
        pads = tuple((max(a, 0), max(b, 0)) for a, b in pads)
    source = {"reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    shape = x.shape[:first] + tuple(n + a + b for n, (a, b) in zip(x.shape[first:], pads))

    def body(*idx):
        src = list(idx[:first])
        for i, n, (a, b) in zip(idx[first:], x.shape[first:], pads):
            j = pad_source(i - a, n, source, max(a, 0), max(b, 0))
            if (a < 0 or b < 0) and isinstance(n, int):
                # (inside the axis already; clamped for the bounds prover, which does not
                # narrow a select's sides by its condition when a cut starts the read
                # beyond an edge)
                j = build.binary(BinOp.MIN, build.binary(BinOp.MAX, j, 0), n - 1)
            src.append(j)
        return read_padded(x, src, (False,) * first + tuple(
            bool(a or b) for a, b in pads))
    return te.tensor(shape, body, name="pad")


# -- embedding and attention ---------------------------------------------------------------
def embedding(indices, weight, max_norm=None, norm_type=2.0):
    """weight[indices]: one row of weight per index (indices checked when the kernel runs:
    one out of range raises IndexError). With max_norm, a row whose norm_type-norm is over
    it comes out scaled by max_norm / (norm + 1e-7), torch's renormalisation (which torch
    also writes back into weight: jitdl.nn.embedding does that on arrays)."""
    indices, weight = as_tensor(indices), as_tensor(weight)
    if not dtypes.is_int(indices.dtype):
        raise ArgumentError(f"embedding(): input must hold integer indices, got dtype "
                            f"{indices.dtype}", user_loc())
    if weight.ndim != 2:
        raise ShapeError(f"embedding(): weight must be 2-D (num_embeddings, embedding_dim), "
                         f"got shape {shape_text(weight.shape)}", user_loc())
    shape = indices.shape + (weight.shape[1],)
    if max_norm is None:
        return te.tensor(shape, lambda *idx: weight[indices[idx[:-1]], idx[-1]],
                         name="embedding")
    if not dtypes.is_float(weight.dtype):
        raise ArgumentError(f"embedding(): max_norm needs a floating-point weight, got "
                            f"{weight.dtype}", user_loc())
    k = te.reduce_axis(weight.shape[1])

    def const(v):
        return build.as_expr(np.dtype(weight.dtype).type(v))

    def norm(*p):
        a = build.call(Intrin.ABS, weight[indices[p], k])
        if norm_type == math.inf:
            return te.reduce(ReduceOp.MAX, a, k)
        if norm_type == 2:
            return build.call(Intrin.SQRT, te.reduce(ReduceOp.SUM, a * a, k))
        if norm_type == 1:
            return te.reduce(ReduceOp.SUM, a, k)
        total = te.reduce(ReduceOp.SUM, build.binary(BinOp.POW, a, const(norm_type)), k)
        return build.binary(BinOp.POW, total, const(1 / norm_type))
    norms = te.tensor(indices.shape, norm, name="embedding_norm")

    def row(*idx):
        n = norms[idx[:-1]]
        scale = build.select(n > const(max_norm), const(max_norm) / (n + const(1e-7)),
                             const(1))
        return weight[indices[idx[:-1]], idx[-1]] * scale
    return te.tensor(shape, row, name="embedding")


def _shared_heads(q, k, v):
    """key and value with each of their heads repeated for the query heads that share it
    (torch's repeat_interleave along axis -3 of enable_gqa), as index stages."""
    hq, hk, hv = q.shape[-3], k.shape[-3], v.shape[-3]
    if not all(isinstance(h, int) for h in (hq, hk, hv)):
        raise ShapeError("scaled_dot_product_attention(): enable_gqa=True needs head counts "
                         "(axis -3) known at compile time, got query "
                         f"{shape_text(q.shape)}, key {shape_text(k.shape)} and value "
                         f"{shape_text(v.shape)}", user_loc())
    if hk == 0 or hv == 0 or hq % hk or hq % hv:
        # (torch's rule: each of key's and value's head counts divides the query's; they
        # need not be equal, each is repeated by its own factor)
        raise ShapeError("scaled_dot_product_attention(): with enable_gqa=True, the numbers "
                         "of heads (axis -3) of key and value must each divide the query's; "
                         f"got query {shape_text(q.shape)}, key {shape_text(k.shape)} and "
                         f"value {shape_text(v.shape)}", user_loc())

    def repeated(t, h, name):
        if h == hq:
            return t
        group = hq // h
        return te.tensor(t.shape[:-3] + (hq,) + t.shape[-2:], lambda *idx: t[
            idx[:-3] + (idx[-3] // group,) + idx[-2:]], name=name)
    return repeated(k, hk, "attn_key_heads"), repeated(v, hv, "attn_value_heads")


def attention(q, k, v, *extra, scale, is_causal, gqa=False, dropout=False):
    """softmax(q @ k^T * scale + mask) @ v over the last two axes, batch axes broadcast; a
    bool mask keeps where True, a float mask is added; is_causal keeps key j <= query i.
    gqa (torch's enable_gqa): key and value may have fewer heads (axis -3) than query, a
    divisor of its count; query head h reads key/value head h // (Hq // Hkv). With
    `dropout`, the last operand multiplies the attention weights (softmax's output)
    elementwise: the caller's draw of kept weights, scaled."""
    mask, drop = (extra[:-1], extra[-1]) if dropout else (extra, None)
    q, k, v = as_tensor(q), as_tensor(k), as_tensor(v)
    for t, what in ((q, "query"), (k, "key"), (v, "value")):
        if t.ndim < 2:
            raise ShapeError(f"scaled_dot_product_attention(): {what} must have 2 or more "
                             f"dimensions (..., L, E), got shape {shape_text(t.shape)}",
                             user_loc())
        if not dtypes.is_float(t.dtype):
            # (torch refuses them; an int8 q @ k^T wrapped around, silently)
            raise ArgumentError(f"scaled_dot_product_attention(): {what} must be float32 or "
                                f"float64, as torch requires, got {t.dtype}", user_loc())
    if gqa and min(q.ndim, k.ndim, v.ndim) >= 3 and not (
            same_dim(k.shape[-3], q.shape[-3]) and same_dim(v.shape[-3], q.shape[-3])):
        k, v = _shared_heads(q, k, v)
    L, E, S, Ev = q.shape[-2], q.shape[-1], k.shape[-2], v.shape[-1]
    # (two symbolic sizes are taken to agree: the call checks them, as matmul's)
    if not same_dim(k.shape[-1], E) and (isinstance(E, int) or isinstance(k.shape[-1], int)):
        raise ShapeError(f"scaled_dot_product_attention(): key's last dimension must equal "
                         f"query's ({E}), got query {shape_text(q.shape)} and key "
                         f"{shape_text(k.shape)}", user_loc())
    if not same_dim(v.shape[-2], S) and (isinstance(S, int) or isinstance(v.shape[-2], int)):
        raise ShapeError(f"scaled_dot_product_attention(): value must have as many rows as "
                         f"key ({S}), got key {shape_text(k.shape)} and value "
                         f"{shape_text(v.shape)}", user_loc())
    try:
        batch = broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ShapeError:
        raise ShapeError(f"scaled_dot_product_attention(): the batch dimensions (all but "
                         f"the last two) of query {shape_text(q.shape)}, key "
                         f"{shape_text(k.shape)} and value {shape_text(v.shape)} do not "
                         f"broadcast together", user_loc()) from None
    if scale is None:
        # (E = 0: every score is an empty sum, 0, whatever the scale; torch's uniform
        # weights, not 1 / sqrt(0))
        if isinstance(E, int):
            scale = 1.0 / math.sqrt(E) if E != 0 else 1.0
        else:       # (a dynamic E: computed in float64 at the call, as the int's above)
            root = build.call(Intrin.SQRT, build.cast(E, "float64"))
            scale = build.cast(build.select(E > 0, 1.0 / root, build.as_expr(1.0)),
                               q.dtype if dtypes.is_float(q.dtype) else "float64")
    nb = len(batch)
    e = te.reduce_axis(E)
    sshape = batch + (L, S)

    def lhs(t, idx, tail):
        return load(t, idx[:nb] + tail, batch + t.shape[-2:])

    # key transposed to (..., E, S), as linear's weight: rows of it are read contiguously
    kt = te.tensor(k.shape[:-2] + (E, S), lambda *idx: k[idx[:-2] + (idx[-1], idx[-2])],
                   name="attn_key_t")

    def score(*idx):
        i, j = idx[nb], idx[nb + 1]
        return te.reduce(ReduceOp.SUM, lhs(q, idx, (i, e)) * lhs(kt, idx, (e, j)), [e])
    s = te.tensor(sshape, score, name="attn_scores")
    m = operand(mask[0]) if mask else None
    if m is not None:
        if m.dtype not in ("bool", "float32", s.dtype):
            raise ArgumentError(f"scaled_dot_product_attention(): attn_mask must be bool, "
                                f"float32 or of the query's dtype ({s.dtype}), as torch "
                                f"requires, got {m.dtype}", user_loc())
        # the mask broadcasts to the scores' shape, never widening it (torch's error; a
        # mask of 3 batches beside queries of 1 was read at its first batch alone)
        mshape = shape_of(m)
        if len(mshape) > len(sshape) or not all(
                is_one(a) or may_agree(a, b) for a, b in zip(mshape[::-1], sshape[::-1])):
            raise ShapeError(f"scaled_dot_product_attention(): attn_mask of shape "
                             f"{shape_text(mshape)} must broadcast to the attention scores' "
                             f"shape {shape_text(sshape)} (..., L, S)", user_loc())

    def masked(*idx):
        a = s[idx] * scale
        if is_causal:
            a = build.select(idx[nb + 1] <= idx[nb], a, -math.inf)
        if m is not None:
            mv = load(m, idx, sshape)
            if mv.dtype == "bool":
                a = build.select(mv, a, -math.inf)
            else:
                a = a + build.cast(mv, a.dtype)
        return a
    logits = te.tensor(sshape, masked, name="attn_logits")
    p = softmax(logits, -1)
    if drop is not None:
        weights = p
        p = te.tensor(sshape, lambda *idx: weights[idx] * build.cast(
            load(operand(drop, "dropout"), idx, sshape), weights.dtype), name="attn_dropout")
    j = te.reduce_axis(S)
    out = te.tensor(batch + (L, Ev), lambda *idx: te.reduce(
        ReduceOp.SUM, p[idx[:nb] + (idx[nb], j)] * lhs(v, idx, (j, idx[nb + 1])), [j]),
        name="attention")
    if m is None:
        return out
    # a query whose every key is masked attends to nothing: 0, as torch gives (not the
    # NaN of a softmax over -inf alone)
    jm = te.reduce_axis(S)
    top = te.tensor(batch + (L,), lambda *idx: te.reduce(
        ReduceOp.MAX, logits[idx + (jm,)], [jm]), name="attn_row_max")
    return te.tensor(out.shape, lambda *idx: build.select(
        build.compare(CmpOp.EQ, top[idx[:-1]], -math.inf), build.cast(0, out.dtype),
        out[idx]), name="attention_masked")


# one kernel per dtype, rank and size-1 pattern (symbolic extents), not per shape
# (jitdl.nn.batch_norm runs arrays of 4 or more dimensions as (N, C, S): rows of a whole
# plane, not the short 7-element rows of a ResNet's last 7 x 7 maps)
# (normalize and cosine_similarity, which reduce along any axis, compile per shape: with
# symbolic extents a reduction along a middle axis took LLVM 1 s to optimise, 0.12 s here)
any_size(activation, softmax, log_softmax, layer_norm, rms_norm, batch_norm,
         batch_norm_batch_stats, instance_norm, dropout, embedding)
# activation, softmax and log_softmax broadcast their one input against nothing and decide
# nothing on a size of 1 of it (softmax's row statistics keep a size of 1 of their own):
# such a size stays symbolic in their dynamic kernels' key (see
# manipulation.concatenate.solid), so silu of rows of random lengths compiles once
activation.solid = lambda fn, **params: every_dim
softmax.solid = lambda dim, dtype=None: every_dim
log_softmax.solid = lambda dim, dtype=None: every_dim
