"""jd.nn: torch.nn.functional's functions as jitdl kernels, NumPy arrays in and out.

Signatures and shape rules are torch's (channels first, `dim=`, with `axis=` accepted as
its synonym). On arrays each function runs a compiled, cached kernel; on the tensors of a
`@jd.compute` definition it adds stages to that definition, so that

    @jd.compute
    def mlp(X, W, b):
        return jd.nn.gelu(jd.nn.linear(X, W, b))

is one fused kernel. Inference only: nothing here computes gradients or updates
running statistics.
"""
from __future__ import annotations

import math
import operator
import warnings

import numpy as np

from jitdl import dtypes
from jitdl.eager import apply, tunable
from jitdl.errors import ArgumentError, AxisError, ScalarOverflowError, ShapeError, user_loc
from jitdl.ops import nn as ops
from jitdl.ops.core import is_symbolic
from jitdl.numpy import tanh as _numpy_tanh

__all__ = [
    "relu", "relu6", "leaky_relu", "elu", "gelu", "sigmoid", "silu", "softplus", "tanh",
    "hardtanh", "hardsigmoid", "hardswish", "mish", "logsigmoid", "softsign",
    "softmax", "log_softmax", "layer_norm", "rms_norm", "batch_norm", "linear",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
    "adaptive_avg_pool2d", "adaptive_max_pool2d", "interpolate", "embedding",
    "scaled_dot_product_attention", "glu", "group_norm", "instance_norm", "dropout",
    "normalize", "cosine_similarity", "pad",
]

STATUS = {
    "relu": "done", "relu6": "done", "leaky_relu": "done", "elu": "done",
    "gelu": "done (approximate='none' with erf, and 'tanh')", "sigmoid": "done",
    "silu": "done", "softplus": "done", "tanh": "done",
    "hardtanh": "done", "hardsigmoid": "done", "hardswish": "done", "mish": "done",
    "logsigmoid": "done", "softsign": "done",
    "softmax": "done (without dim, torch's deprecated implicit choice and its warning)",
    "log_softmax": "done (without dim, torch's deprecated implicit choice and its warning)",
    "layer_norm": "done", "rms_norm": "done",
    "batch_norm": "done (training=True: the batch's statistics, which update NumPy "
                  "running statistics in place, as torch does; inside a definition only "
                  "the result)",
    "linear": "done",
    "conv1d": "done", "conv2d": "done", "conv3d": "done",
    "conv_transpose1d": "done", "conv_transpose2d": "done",
    "max_pool1d": "done", "max_pool2d": "done",
    "avg_pool1d": "done (integers: torch's truncated mean, in the input's dtype)",
    "avg_pool2d": "done (integers: torch's truncated mean, in the input's dtype)",
    "adaptive_avg_pool1d": "done", "adaptive_avg_pool2d": "done",
    "adaptive_max_pool2d": "done",
    "interpolate": "partial: nearest, nearest-exact, linear, bilinear, bicubic, trilinear, "
                   "area and lanczos (antialias=True), antialias for bilinear, bicubic and "
                   "lanczos; the interpolating modes take floating-point input only (torch's "
                   "bilinear, bicubic and lanczos also take uint8)",
    "embedding": "done (padding_idx and the gradient options have no effect on the "
                 "forward result; max_norm renormalises a NumPy weight in place, as torch "
                 "does, and only the result inside a definition)",
    "scaled_dot_product_attention": "done (dropout_p > 0 on arrays draws the kept weights "
                                    "with NumPy's global generator, not torch's; inside a "
                                    "definition it raises)",
    "glu": "done (the halved dimension's size must be known when compiling)",
    "group_norm": "done (the channel count must be known when compiling)",
    "instance_norm": "done (use_input_stats=True updates NumPy running statistics in place, "
                     "as torch does; inside a definition only the result)",
    "dropout": "done (training=True on arrays draws with NumPy's global generator, not "
               "torch's; inside a definition only training=False or p=0, the identity)",
    "normalize": "done", "cosine_similarity": "done",
    "pad": "done (modes constant, reflect, replicate and circular; circular widths wider "
           "than what negative widths leave wrap again where torch's result is undefined)",
}


# -- argument normalisation ------------------------------------------------------------------
def _int(v, what, op, whole=None, kind="an int"):
    """v as an int; the error names `what`, the kind of value it takes and the value given
    (`whole`, the whole argument, where v is one of its entries). A bool is refused, as
    torch refuses it (stride=True is no stride of 1)."""
    try:
        if isinstance(v, (bool, np.bool_)):
            raise TypeError
        return operator.index(v)
    except TypeError:
        given = v if whole is None else whole
        raise ArgumentError(f"{op}(): {what} must be {kind}, got {type(given).__name__} "
                            f"{given!r}", user_loc()) from None


def _ntuple(v, n, what, op, least=None):
    """An int (repeated n times) or a sequence of n ints as a tuple; each >= least."""
    seq = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if len(seq) == 1:
        seq = seq * n
    if len(seq) != n:
        raise ShapeError(f"{op}(): {what} must be an int or a tuple of {n} ints, got {v!r}",
                         user_loc())
    seq = tuple(_int(x, what, op, v, f"an int or a tuple of {n} ints") for x in seq)
    if least is not None and any(x < least for x in seq):
        raise ShapeError(f"{op}(): {what} must be {'positive' if least else 'non-negative'}, "
                         f"got {v!r}", user_loc())
    return seq


def _float(v, what, op):
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise ArgumentError(f"{op}(): {what} must be a number, got {type(v).__name__} "
                            f"{v!r}", user_loc())
    return float(v)


def _dim(dim, axis, op, x):
    if axis is not None:
        if dim is not None:
            raise ArgumentError(f"{op}(): give dim= or its synonym axis=, not both",
                                user_loc())
        dim = axis
    if dim is None:
        # torch's deprecated implicit choice, with its warning: the first axis of a 0-d,
        # 1-d or 3-d input, else the second
        warnings.warn(f"Implicit dimension choice for {op} has been deprecated. Change the "
                      "call to include dim=X as an argument.", UserWarning, stacklevel=3)
        return 0 if len(_shape(x)) in (0, 1, 3) else 1
    return _dim_in_range(_int(dim, "dim", op), len(_shape(x)), op)


def _dim_in_range(dim, ndim, op):
    """dim checked against an input of ndim dimensions (a 0-d one taken as 1-d, as torch
    does), the error torch's IndexError worded with op and dim (jitdl's AxisError is an
    IndexError; NumPy's 'axis ... out of bounds' named neither)."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        shape = "a 0-d input" if ndim == 0 else f"input of {ndim} dimension(s)"
        raise AxisError(f"{op}(): dim {dim} is out of range for {shape} (expected to be in "
                        f"range of [{-n}, {n - 1}])", user_loc())
    return dim


def _dtype(x):
    """The dtype of an operand, a tensor's or an array-like's as NumPy reads it."""
    return np.dtype(x.dtype) if is_symbolic(x) or isinstance(x, np.ndarray) else \
        np.asarray(x).dtype


def _dim_or_axis(dim, axis, default, op):
    """dim= with its synonym axis=, for a function whose dim has a default: an explicit
    axis= stands where dim is left at its default (dim given as the default value and
    axis= both cannot be told from axis= alone)."""
    if axis is not None:
        if dim != default:
            raise ArgumentError(f"{op}(): give dim= or its synonym axis=, not both",
                                user_loc())
        dim = axis
    return dim


def _shape(x):
    """The shape of an operand: a tensor's, or an array-like's as NumPy reads it."""
    return tuple(x.shape) if is_symbolic(x) or isinstance(x, np.ndarray) else np.shape(x)


def _optional(op, operands, names, **params):
    """Operands and names with the given optional parameters (not None) appended, and
    has_<name> flags for the builder."""
    flags = []
    for name, p in params.items():
        if p is not None:
            operands += (p,)
            names += (name,)
        flags.append((f"has_{name}", p is not None))
    return operands, names, tuple(flags)


def _constant_shapes(op, operands, names):
    """Convolutions, pooling and interpolate specialise on shapes (window loops of
    constant extent are what they gain the most from; interpolate's source indices are
    computed from the sizes): in a dynamic definition their operands' sizes must be
    known. A clear error rather than one from deep in the builder."""
    for x, name in zip(operands, names):
        if is_symbolic(x) and not all(isinstance(d, int) for d in x.shape):
            shape = ", ".join(str(d) for d in x.shape)
            raise ArgumentError(
                f"{op}(): {name} has sizes known only at run time ({shape}): "
                f"convolutions, pooling and interpolate compile one kernel per shape; leave "
                f"the argument it comes from out of dynamic= (e.g. @jd.compute(dynamic="
                f"('other_arg',))) or call {op} outside the dynamic definition", user_loc())


def _unsupported(op, what):
    raise NotImplementedError(f"{op}(): {what} is not supported by jitdl.nn")


def _out(x, inplace):
    """out= for an in-place activation: the input array itself."""
    return x if inplace and isinstance(x, np.ndarray) else None


# -- activations ---------------------------------------------------------------------------
def _act(name, x, out=None, **params):
    static = (("fn", name),) + tuple(params.items()) if params else (("fn", name),)
    return apply(name, ops.activation, (x,), static, out, ("input",))


def relu(input, inplace=False):
    """max(x, 0) elementwise."""
    return _act("relu", input, _out(input, inplace))


def relu6(input, inplace=False):
    """min(max(x, 0), 6) elementwise."""
    return _act("relu6", input, _out(input, inplace))


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """x where x > 0, else negative_slope * x."""
    return _act("leaky_relu", input, _out(input, inplace),
                negative_slope=_float(negative_slope, "negative_slope", "leaky_relu"))


def elu(input, alpha=1.0, inplace=False):
    """x where x > 0, else alpha * (exp(x) - 1)."""
    return _act("elu", input, _out(input, inplace), alpha=_float(alpha, "alpha", "elu"))


def gelu(input, approximate="none"):
    """x * Phi(x) (Phi with erf), or its tanh approximation with approximate='tanh'."""
    if approximate not in ("none", "tanh"):
        raise ShapeError(f"gelu(): approximate must be 'none' or 'tanh', got "
                         f"{approximate!r}", user_loc())
    return _act("gelu", input, approximate=approximate)


def sigmoid(input):
    """1 / (1 + exp(-x)) elementwise."""
    return _act("sigmoid", input)


def silu(input, inplace=False):
    """x * sigmoid(x) elementwise."""
    return _act("silu", input, _out(input, inplace))


def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta * x)) / beta, and x where beta * x > threshold."""
    return _act("softplus", input, beta=_float(beta, "beta", "softplus"),
                threshold=_float(threshold, "threshold", "softplus"))


def tanh(input):
    """tanh(x) elementwise."""
    if type(input) is np.ndarray and input.dtype.char in "fd" and input.ndim:
        # (NumPy's tanh there, jd.numpy's call path: 1.5 -> 1.0 us at 1000 float32; it
        # shares the kernel, whose static arguments are the same. Not of a 0-d array,
        # whose NumPy result is a scalar: an activation's is a 0-d array)
        return _numpy_tanh(input)
    return _act("tanh", input)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """x clamped to [min_val, max_val] (NaN kept; a NaN limit makes every element NaN, as
    torch's clamp); integers stay integers, with the limits truncated to integers as torch
    converts them."""
    op = "hardtanh"
    min_val, max_val = _float(min_val, "min_val", op), _float(max_val, "max_val", op)
    if min_val > max_val:
        raise ValueError("hardtanh(): min_val cannot be greater than max_val")
    dt = _dtype(input)
    if dt == np.bool_:
        raise ArgumentError("hardtanh(): bool inputs are not supported, as in torch",
                            user_loc())
    if dt.kind in "iu":
        for v, what in ((min_val, "min_val"), (max_val, "max_val")):
            if not math.isfinite(v):
                raise ArgumentError(f"hardtanh(): {what}={v} cannot be converted to the "
                                    f"integer dtype {dt} of input", user_loc())
            info = np.iinfo(dt)
            if dt.kind == "i" and not info.min <= int(v) <= info.max:
                # (torch: 'value cannot be converted to type int8_t without overflow')
                raise ScalarOverflowError(f"hardtanh(): {what}={v} cannot be converted to "
                                          f"the integer dtype {dt} of input without "
                                          f"overflow (its range is [{info.min}, "
                                          f"{info.max}])", user_loc())
    # (the limits of integer input are truncated first, as torch converts them: -0.5
    # clamps uint8 at 0)
    if dt.kind == "u" and int(min_val) < 0:
        raise ShapeError(f"hardtanh(): cannot clamp an unsigned input ({dt}) to negative "
                         f"limits (min_val={min_val})", user_loc())
    if dt.kind == "u" and int(max_val) > np.iinfo(dt).max:
        raise ScalarOverflowError(f"hardtanh(): max_val={max_val} cannot be converted to the "
                                  f"integer dtype {dt} of input without overflow (its range "
                                  f"is [0, {np.iinfo(dt).max}])", user_loc())
    return _act(op, input, _out(input, inplace), min_val=min_val, max_val=max_val)


def hardsigmoid(input, inplace=False):
    """min(max(x + 3, 0), 6) / 6: sigmoid's piecewise-linear stand-in."""
    return _act("hardsigmoid", input, _out(input, inplace))


def hardswish(input, inplace=False):
    """x * hardsigmoid(x)."""
    return _act("hardswish", input, _out(input, inplace))


def mish(input, inplace=False):
    """x * tanh(log(1 + exp(x)))."""
    return _act("mish", input, _out(input, inplace))


def logsigmoid(input):
    """log(1 / (1 + exp(-x))), computed without overflow for inputs of either sign."""
    return _act("logsigmoid", input)


def softsign(input):
    """x / (1 + |x|)."""
    return _act("softsign", input)


def glu(input, dim=-1, *, axis=None):
    """a * sigmoid(b), a and b the first and second halves of input along dim."""
    dim = _int(_dim_or_axis(dim, axis, -1, "glu"), "dim", "glu")
    if len(_shape(input)) > 0:     # (a 0-d input: the builder says it cannot be halved)
        _dim_in_range(dim, len(_shape(input)), "glu")
    return apply("glu", ops.glu, (input,), (("dim", dim),), None, ("input",))


def dropout(input, p=0.5, training=True, inplace=False):
    """Each element zeroed with probability p and the rest scaled by 1 / (1 - p) when
    training; input itself otherwise (and where p is 0), as torch returns it. The draw is
    NumPy's global generator's (np.random.seed repeats it; torch's own generator cannot
    be matched); kernels draw no random numbers, so inside a definition only
    training=False (or p=0) is accepted."""
    p = _float(p, "p", "dropout")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout(): dropout probability has to be between 0 and 1, but "
                         f"got {p}")
    if not training or p == 0.0:
        return input
    if is_symbolic(input):
        raise ArgumentError("dropout(): training=True with p > 0 inside a definition: "
                            "kernels draw no random numbers; call it on arrays, or pass "
                            "training=False", user_loc())
    x = input if isinstance(input, np.ndarray) else np.asarray(input)
    if p == 1.0 and x.dtype.kind in "biu":      # (every element dropped: torch's zeros)
        if inplace and isinstance(input, np.ndarray):
            input[...] = 0
            return input
        return np.zeros_like(x)
    if x.dtype not in (np.float32, np.float64):
        raise ArgumentError(f"dropout(): training=True needs a float32 or float64 input "
                            f"(the kept elements are scaled), got {x.dtype}", user_loc())
    if x.size == 0:
        return input
    return apply("dropout", ops.dropout, (x, _kept(x.shape, x.dtype, p)), (),
                 _out(x, inplace), ("input", "kept"))


def _kept(shape, dt, p):
    """torch's dropout draw as an array of `shape` and dtype dt: each element kept with
    probability 1 - p, as 1 / (1 - p), else 0 (all 0 at p = 1), from NumPy's global
    generator."""
    if p == 1.0:
        return np.zeros(shape, dt)
    return (np.random.random_sample(shape) >= p).astype(dt) / dt.type(1.0 - p)


# -- softmax -------------------------------------------------------------------------------
def _softmax_dtype(dtype, op):
    """dtype= as a float dtype's name, or None: torch computes softmax in a floating dtype
    only (an integer one cast the input to it first, truncating it, and a bool one raised
    NumPy's error about subtracting booleans)."""
    if dtype is None:
        return None
    name = dtypes.normalize(dtype)
    if not dtypes.is_float(name):
        raise ArgumentError(f"{op}(): dtype must be a floating-point dtype (float32 or "
                            f"float64), got {name}", user_loc())
    return name


def softmax(input, dim=None, _stacklevel=3, dtype=None, *, axis=None):
    """exp(x - max) / sum(exp(x - max)) along dim (computed in dtype when given)."""
    return apply("softmax", ops.softmax, (input,),
                 (("dim", _dim(dim, axis, "softmax", input)),
                  ("dtype", _softmax_dtype(dtype, "softmax"))), None, ("input",))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None, *, axis=None):
    """x - max - log(sum(exp(x - max))) along dim (computed in dtype when given)."""
    return apply("log_softmax", ops.log_softmax, (input,),
                 (("dim", _dim(dim, axis, "log_softmax", input)),
                  ("dtype", _softmax_dtype(dtype, "log_softmax"))), None, ("input",))


# -- normalisation -------------------------------------------------------------------------
def _normalized_shape(s, op):
    """normalized_shape as a tuple of ints; inside a dynamic definition its entries may
    be the input's symbolic sizes (`X.shape[-1:]`)."""
    seq = tuple(s) if isinstance(s, (tuple, list)) else (s,)
    return tuple(n if is_symbolic(n) else _int(n, "normalized_shape", op, s,
                                                "an int or a tuple of ints") for n in seq)


def _apply_norm(name, builder, operands, static, names):
    """apply(), or the builder itself where normalized_shape holds symbolic sizes (only
    inside a definition; they are no static value to key a kernel by). On arrays whose
    normalized_shape is exactly the input's trailing sizes, and the weight's and bias's
    shapes too, the kernel is keyed by its length only (None per entry: the builder takes
    the input's sizes), so one kernel serves every size, as jd.numpy's reductions do."""
    shape = dict(static)["normalized_shape"]
    if any(is_symbolic(n) for n in shape):
        return builder(*operands, **dict(static))
    x, k = operands[0], len(shape)
    if k and type(x) is np.ndarray and x.ndim >= k and x.shape[x.ndim - k:] == shape and \
            all(type(p) is np.ndarray and p.shape == shape for p in operands[1:]):
        static = (("normalized_shape", (None,) * k),) + static[1:]
    return apply(name, builder, operands, static, None, names)


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    """(x - mean) / sqrt(var + eps) * weight + bias over the trailing normalized_shape."""
    operands, names, flags = _optional("layer_norm", (input,), ("input",), weight=weight,
                                       bias=bias)
    return _apply_norm("layer_norm", ops.layer_norm, operands,
                       (("normalized_shape", _normalized_shape(normalized_shape, "layer_norm")),
                        ("eps", _float(eps, "eps", "layer_norm"))) + flags, names)


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """x / sqrt(mean(x^2) + eps) * weight over the trailing normalized_shape."""
    operands, names, flags = _optional("rms_norm", (input,), ("input",), weight=weight)
    return _apply_norm("rms_norm", ops.rms_norm, operands,
                       (("normalized_shape", _normalized_shape(normalized_shape, "rms_norm")),
                        ("eps", None if eps is None else _float(eps, "eps", "rms_norm")))
                       + flags, names)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-05):
    """Batch norm over channel axis 1: with the running statistics, or (training=True)
    with the batch's, which then update running_mean and running_var in place (NumPy
    arrays; momentum-weighted, the variance unbiased), as torch does."""
    if training:
        return _batch_norm_training(input, running_mean, running_var, weight, bias,
                                    _float(momentum, "momentum", "batch_norm"),
                                    _float(eps, "eps", "batch_norm"))
    if running_mean is None or running_var is None:
        raise ArgumentError("batch_norm(): running_mean and running_var are required with "
                            "training=False", user_loc())
    return _per_channel("batch_norm", ops.batch_norm, input, weight, bias,
                        (("eps", _float(eps, "eps", "batch_norm")),),
                        running_mean=running_mean, running_var=running_var)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-05):
    """(x - mean) / sqrt(var + eps) * weight[c] + bias[c], the statistics of each sample's
    group of C / num_groups consecutive channels (var biased)."""
    op = "group_norm"
    num_groups = _int(num_groups, "num_groups", op)
    if num_groups < 1:
        raise ShapeError(f"group_norm(): num_groups must be positive, got {num_groups}",
                         user_loc())
    shape = _shape(input)
    if len(shape) < 2:
        raise ShapeError(f"group_norm(): expected at least 2 dimensions for input (N, C, "
                         f"...), got shape {tuple(shape)}", user_loc())
    if isinstance(shape[1], int) and shape[1] % num_groups:
        # (here, where the message shows the input's shape, not its (N, C, S) view)
        raise ShapeError(f"group_norm(): expected the number of channels in input to be "
                         f"divisible by num_groups, got input of shape {tuple(shape)} and "
                         f"num_groups={num_groups}", user_loc())
    if all(isinstance(d, int) for d in shape) and \
            shape[0] * shape[1] // num_groups * math.prod(shape[2:]) == 1:
        # (torch's check, worded as torch's batch norm: one value per group of one sample)
        raise ValueError(f"group_norm(): expected more than 1 value per channel when "
                         f"training, got input size {tuple(shape)} and num_groups="
                         f"{num_groups}")
    return _per_channel(op, ops.group_norm, input, weight, bias,
                        (("num_groups", num_groups), ("eps", _float(eps, "eps", op))))


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-05):
    """(x - mean) / sqrt(var + eps) * weight[c] + bias[c] with each sample's own channel
    statistics over the spatial axes (use_input_stats=True; running_mean and running_var,
    NumPy arrays, are then updated in place as torch does: momentum-weighted, with the
    batch's mean of the per-sample means and unbiased variances); use_input_stats=False
    normalises with running_mean and running_var instead, as batch_norm's inference."""
    op = "instance_norm"
    eps = _float(eps, "eps", op)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ArgumentError("instance_norm(): running_mean and running_var are required "
                                "with use_input_stats=False", user_loc())
        return batch_norm(input, running_mean, running_var, weight, bias, False, eps=eps)
    momentum = _float(momentum, "momentum", op)
    _both_or_neither(running_mean, running_var)
    shape = _shape(input)
    if all(isinstance(d, int) for d in shape) and math.prod(shape[2:]) == 1:
        raise ValueError(f"instance_norm(): expected more than 1 spatial element when "
                         f"training, got input size {tuple(shape)}")
    out = _per_channel(op, ops.instance_norm, input, weight, bias, (("eps", eps),))
    if is_symbolic(out):
        return out          # (inside a definition: the result alone)
    x = np.asarray(input)
    axes = tuple(range(2, x.ndim))
    if math.prod(x.shape[2:]):      # (no spatial element: torch leaves them as they are)
        _update_running(op, shape[1], momentum, (
            (running_mean, lambda: x.mean(axis=axes, dtype=np.float64).mean(0)),
            (running_var, lambda: x.var(axis=axes, ddof=1, dtype=np.float64).mean(0))))
    return out


def _both_or_neither(running_mean, running_var):
    if (running_mean is None) != (running_var is None):
        raise ValueError("running_mean and running_var must either both be None or neither "
                         "be None")


def _update_running(op, channels, momentum, stats):
    """running = (1 - momentum) * running + momentum * statistic, in place, for each
    (running, statistic) of `stats` whose running is a NumPy array: every one checked and
    computed before any is written (a running statistic that cannot take the update, an
    integer one, raises with none changed)."""
    stats = [(r, stat) for r, stat in stats if isinstance(r, np.ndarray)]
    for r, _ in stats:
        if r.shape != (channels,):
            raise ShapeError(f"{op}(): running statistics must have shape "
                             f"({channels},), got {r.shape}", user_loc())
        if r.dtype.kind != "f":
            raise ArgumentError(f"{op}(): running statistics are updated in place with "
                                f"fractions, so they must be float arrays, got {r.dtype}",
                                user_loc())
    updated = []
    for r, stat in stats:
        u = r.copy()
        u *= 1 - momentum
        u += (momentum * stat()).astype(u.dtype)
        updated.append(u)
    for (r, _), u in zip(stats, updated):
        r[...] = u


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None, *, axis=None):
    """input / max(||input||_p, eps), the p-norm along dim (an int or a tuple of ints; an
    empty tuple is every dimension): p = inf, -inf and 0 as torch's vector_norm (largest,
    smallest magnitude; count of non-zero elements)."""
    op = "normalize"
    dim = _dim_or_axis(dim, axis, 1, op)
    dims = tuple(_int(d, "dim", op, dim, "an int or a tuple of ints") for d in dim) \
        if isinstance(dim, (tuple, list)) else _int(dim, "dim", op, None,
                                                    "an int or a tuple of ints")
    ndim = len(_shape(input))
    if dims == ():
        # (torch's vector_norm reads an empty dim as every dimension)
        dims = tuple(range(ndim))
    else:
        for d in dims if isinstance(dims, tuple) else (dims,):
            _dim_in_range(d, ndim, op)
        if ndim == 0:
            # (a 0-d input is a vector of one element, along dim 0 or -1, as torch reads it)
            dims = ()
    if isinstance(p, str) and p == "fro":   # (torch's norm: for vectors, the 2-norm)
        p = 2.0
    return apply(op, ops.normalize, (input,),
                 (("p", _float(p, "p", op)), ("dim", dims), ("eps", _float(eps, "eps", op))),
                 out, ("input",))


def cosine_similarity(x1, x2, dim=1, eps=1e-08, *, axis=None):
    """The cosine of the angle between x1 and x2 along dim (broadcast together), each
    divided by max(its norm, eps)."""
    op = "cosine_similarity"
    eps = _float(eps, "eps", op)
    if not eps >= 0:
        raise ValueError(f"cosine_similarity(): eps must be non-negative, got {eps}")
    dim = _int(_dim_or_axis(dim, axis, 1, op), "dim", op)
    _dim_in_range(dim, max(len(_shape(x1)), len(_shape(x2))), op)
    return apply(op, ops.cosine_similarity, (x1, x2), (("dim", dim), ("eps", eps)), None,
                 ("x1", "x2"))


def _per_channel(op, builder, input, weight, bias, static, **stats):
    """A norm over channel axis 1 run on input's (N, C, S) rows (_channels_rows), with
    the running statistics `stats` and the optional weight and bias as operands; the
    result in input's shape."""
    x, merged = _channels_rows(input)
    operands, names, flags = _optional(op, (x,) + tuple(stats.values()),
                                       ("input",) + tuple(stats), weight=weight, bias=bias)
    out = apply(op, builder, operands, static + flags, None, names)
    return out if merged is None else out.reshape(merged)


def _channels_rows(x):
    """A C-contiguous array of 4 or more dimensions (N, C, *spatial) as the (N, C, S) view
    that batch norm treats the same, and its shape (else x and None): the kernel's inner
    loop runs over all S elements (a ResNet's 7 x 7 planes: 49, not 7 per row), and every
    rank shares one kernel."""
    if type(x) is not np.ndarray or x.ndim < 4 or not x.flags.c_contiguous:
        return x, None
    return x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),)), x.shape


def _batch_norm_training(input, running_mean, running_var, weight, bias, momentum, eps):
    _both_or_neither(running_mean, running_var)
    if not eps > 0:
        raise ValueError(f"batch_norm(): eps must be positive during training, but got "
                         f"{eps}")
    shape = _shape(input)
    if len(shape) > 1 and all(isinstance(d, int) for d in shape) and \
            math.prod(shape[:1] + shape[2:]) == 1:
        raise ShapeError(f"batch_norm(): expected more than 1 value per channel when "
                         f"training, got input size {tuple(shape)}", user_loc())
    out = _per_channel("batch_norm", ops.batch_norm_batch_stats, input, weight, bias,
                       (("eps", eps),))
    if is_symbolic(out):
        return out          # (inside a definition: the result alone)
    x = np.asarray(input)
    axes = (0,) + tuple(range(2, x.ndim))
    if x.size == 0:             # (an empty batch: torch leaves them as they are)
        return out
    _update_running("batch_norm", shape[1], momentum, (
        (running_mean, lambda: x.mean(axis=axes, dtype=np.float64)),
        (running_var, lambda: x.var(axis=axes, ddof=1, dtype=np.float64))))
    return out


def linear(input, weight, bias=None):
    """input @ weight.T + bias, weight of shape (out_features, in_features) and bias
    (out_features,), or weight (in_features,) and bias ()."""
    operands, names, flags = _optional("linear", (input, weight), ("input", "weight"),
                                       bias=bias)
    return apply("linear", ops.linear, operands, flags, None, names)


# -- convolution ---------------------------------------------------------------------------
def _conv_padding(padding, n, op):
    """padding as (lo, hi) pairs per spatial dimension, or the string 'same'."""
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * n
        if padding == "same":
            return "same"
        raise ShapeError(f"{op}(): invalid padding string {padding!r}, should be one of "
                         "'valid', 'same'", user_loc())
    return tuple((p, p) for p in _ntuple(padding, n, "padding", op, 0))


def _same(weight, stride, dilation, op):
    """'same' padding: dilation * (k - 1) split, the extra one after (as torch does)."""
    if any(s != 1 for s in stride):
        raise ShapeError(f"{op}(): padding='same' is not supported for strided convolutions, "
                         f"got stride={stride}", user_loc())
    ks = _shape(weight)[2:]
    if len(ks) != len(stride):
        return ((0, 0),) * len(stride)      # the builder says what is wrong with weight
    return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in
                 zip(ks, dilation))


def _conv(op, n, input, weight, bias, stride, padding, dilation, groups):
    stride = _ntuple(stride, n, "stride", op, 1)
    dilation = _ntuple(dilation, n, "dilation", op, 1)
    groups = _int(groups, "groups", op)
    if groups < 1:
        raise ShapeError(f"{op}(): groups must be positive, got {groups}", user_loc())
    padding = _conv_padding(padding, n, op)
    if padding == "same":
        padding = _same(weight, stride, dilation, op)
    if _pointwise(input, weight, stride, padding, groups):
        # (the image's pixels as one row: register tiles as wide as the target's, where a
        # 28-pixel row of a (4, 256, 28, 28) float32 input by 128 1 x 1 filters left tiles
        # 16 wide and a 12-wide tail, 1.6x the time of a flattened one)
        x, w = input, weight
        y = _conv(op, 1, x.reshape(x.shape[:2] + (math.prod(x.shape[2:]),)),
                  w.reshape(w.shape[:2] + (1,)), bias, 1, 0, 1, groups)
        return y.reshape(y.shape[:2] + x.shape[2:])
    operands, names, flags = _optional(op, (input, weight), ("input", "weight"), bias=bias)
    _constant_shapes(op, operands, names)
    if type(input) is np.ndarray and type(weight) is np.ndarray:
        # (the CPU's kernel: narrow output rows run as a matmul over the flattened output
        # positions, ops._narrow_rows; a definition's graph is the GPU's too, whose
        # schedule fuses the pixels itself)
        flags += (("flat_rows", True),)
    return apply(op, ops.conv, operands,
                 (("op", op), ("stride", stride), ("padding", padding),
                  ("dilation", dilation), ("groups", groups)) + flags, None, names)


def _pointwise(x, w, stride, padding, groups):
    """A convolution over 2+ spatial axes of a batched NumPy input by a kernel of one
    position, unstrided and unpadded, with channels that agree: its pixels are
    independent, so it is the same convolution over the spatial axes flattened (views of
    C-ordered arrays). (Not an empty spatial axis: conv1d's error would name the
    flattened size.)"""
    return type(x) is np.ndarray and type(w) is np.ndarray and len(stride) > 1 and \
        x.ndim == w.ndim == len(stride) + 2 and all(k == 1 for k in w.shape[2:]) and \
        all(x.shape[2:]) and \
        all(s == 1 for s in stride) and all(p == (0, 0) for p in padding) and \
        x.shape[1] == w.shape[1] * groups and w.shape[0] % groups == 0 and \
        w.shape[0] >= groups


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation: input (N, C, L) or (C, L), weight (F, C / groups, K)."""
    return _conv("conv1d", 1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation: input (N, C, H, W) or (C, H, W), weight (F, C / groups, R, S)."""
    return _conv("conv2d", 2, input, weight, bias, stride, padding, dilation, groups)


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D cross-correlation: input (N, C, D, H, W) or (C, D, H, W)."""
    return _conv("conv3d", 3, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(op, n, input, weight, bias, stride, padding, output_padding, groups,
                    dilation):
    stride = _ntuple(stride, n, "stride", op, 1)
    dilation = _ntuple(dilation, n, "dilation", op, 1)
    padding = _ntuple(padding, n, "padding", op, 0)
    output_padding = _ntuple(output_padding, n, "output_padding", op, 0)
    groups = _int(groups, "groups", op)
    if groups < 1:
        raise ShapeError(f"{op}(): groups must be positive, got {groups}", user_loc())
    operands, names, flags = _optional(op, (input, weight), ("input", "weight"), bias=bias)
    _constant_shapes(op, operands, names)
    return apply(op, ops.conv_transpose, operands,
                 (("op", op), ("stride", stride), ("padding", padding),
                  ("output_padding", output_padding), ("dilation", dilation),
                  ("groups", groups)) + flags, None, names)


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """1-D transposed convolution: weight (C, F / groups, K)."""
    return _conv_transpose("conv_transpose1d", 1, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """2-D transposed convolution: weight (C, F / groups, R, S)."""
    return _conv_transpose("conv_transpose2d", 2, input, weight, bias, stride, padding,
                           output_padding, groups, dilation)


# -- pooling -------------------------------------------------------------------------------
def _pool_args(op, n, kernel_size, stride, padding):
    kernel_size = _ntuple(kernel_size, n, "kernel_size", op, 1)
    stride = kernel_size if stride is None or stride == () or stride == [] else \
        _ntuple(stride, n, "stride", op, 1)
    return kernel_size, stride, _ntuple(padding, n, "padding", op, 0)


def _max_pool(op, n, input, kernel_size, stride, padding, dilation, ceil_mode,
              return_indices):
    kernel_size, stride, padding = _pool_args(op, n, kernel_size, stride, padding)
    _constant_shapes(op, (input,), ("input",))
    return apply(op, ops.max_pool, (input,),
                 (("op", op), ("kernel_size", kernel_size), ("stride", stride),
                  ("padding", padding), ("dilation", _ntuple(dilation, n, "dilation", op, 1)),
                  ("ceil_mode", bool(ceil_mode)), ("return_indices", bool(return_indices))),
                 None, ("input",))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The maximum of each window of (N, C, L) or (C, L); padding is -inf."""
    return _max_pool("max_pool1d", 1, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """The maximum of each window of (N, C, H, W) or (C, H, W); padding is -inf."""
    return _max_pool("max_pool2d", 2, input, kernel_size, stride, padding, dilation,
                     ceil_mode, return_indices)


def _avg_pool(op, n, input, kernel_size, stride, padding, ceil_mode, count_include_pad,
              divisor_override):
    kernel_size, stride, padding = _pool_args(op, n, kernel_size, stride, padding)
    if divisor_override is not None:
        divisor_override = _int(divisor_override, "divisor_override", op)
        if divisor_override == 0:
            raise ShapeError(f"{op}(): divisor_override must be non-zero", user_loc())
    _constant_shapes(op, (input,), ("input",))
    return apply(op, ops.avg_pool, (input,),
                 (("op", op), ("kernel_size", kernel_size), ("stride", stride),
                  ("padding", padding), ("ceil_mode", bool(ceil_mode)),
                  ("count_include_pad", bool(count_include_pad)),
                  ("divisor_override", divisor_override)), None, ("input",))


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    """The mean of each window of (N, C, L) or (C, L)."""
    return _avg_pool("avg_pool1d", 1, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, None)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """The mean of each window of (N, C, H, W) or (C, H, W), divided as torch divides."""
    return _avg_pool("avg_pool2d", 2, input, kernel_size, stride, padding, ceil_mode,
                     count_include_pad, divisor_override)


def _adaptive(op, n, input, output_size, reduce, return_indices=False):
    return apply(op, ops.adaptive_pool, (input,),
                 _adaptive_static(op, n, input, output_size, reduce, return_indices), None,
                 ("input",))


def _adaptive_static(op, n, input, output_size, reduce, return_indices=False):
    """The static arguments of adaptive pooling `op` (checked) to output_size."""
    # (an int repeats, never a sequence of one: torch's 2-d pooling refuses [3])
    seq = tuple(output_size) if isinstance(output_size, (tuple, list)) else \
        (output_size,) * n
    if len(seq) != n:
        raise ShapeError(f"{op}(): output_size must be an int or a tuple of {n}, got "
                         f"{output_size!r}", user_loc())
    # (None keeps an input size in 2-d; torch's 1-d pooling takes ints alone)
    seq = tuple(None if s is None and n > 1 else
                _int(s, "output_size", op, output_size,
                     f"an int or a tuple of {n} ints" + (" or None" if n > 1 else ""))
                for s in seq)
    _constant_shapes(op, (input,), ("input",))
    return ((("op", op), ("output_size", seq), ("reduce", reduce))
            + ((("return_indices", True),) if return_indices else ()))


def adaptive_avg_pool1d(input, output_size):
    """The mean over torch's adaptive windows to output length output_size."""
    return _adaptive("adaptive_avg_pool1d", 1, input, output_size, "avg")


def adaptive_avg_pool2d(input, output_size):
    """The mean over torch's adaptive windows to spatial size output_size (None keeps)."""
    return _adaptive("adaptive_avg_pool2d", 2, input, output_size, "avg")


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """The maximum over torch's adaptive windows to spatial size output_size (and, with
    return_indices, each maximum's row-major position in its input plane)."""
    return _adaptive("adaptive_max_pool2d", 2, input, output_size, "max",
                     bool(return_indices))


# -- resampling ----------------------------------------------------------------------------
_LINEAR = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3, "lanczos": 2}


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resize the spatial dimensions with torch's coordinate rules (nearest, bilinear...)."""
    args = (size, scale_factor, mode, align_corners, recompute_scale_factor, antialias)
    key = _resize_key(input, *args)
    call = _RESIZES.get(key) if key is not None else None
    if call is None:
        call = _resize_call(input, *args)
        if key is not None:
            if len(_RESIZES) >= 4096:
                _RESIZES.clear()
            _RESIZES[key] = call
    name, builder, static = call
    return apply(name, builder, (input,), static, None, ("input",))


# (an array's shape and interpolate's other arguments, where each is of an exact type its
# checks take: an int size, an int or float scale factor...) -> (op, builder, static)
# after those checks passed: the checks and the static tuple (whose floats need their
# canonical key) cost 8 us a call, NumPy's nearest resize 1.4 us
_RESIZES = {}
_SIZE_TYPES, _SCALE_TYPES = (int,), (int, float)


def _resize_key(input, size, scale_factor, mode, align_corners, recompute_scale_factor,
                antialias):
    """The key of _RESIZES for this call, or None where it has none. Only exact ints (size)
    and ints or floats (scale_factor) are keyed, as == says True == 1 == 1.0 where the
    checks tell them apart; the other arguments are read by their truth or compared with
    strings."""
    if type(input) is not np.ndarray or type(mode) is not str:
        return None
    size, scale_factor = _typed(size, _SIZE_TYPES), _typed(scale_factor, _SCALE_TYPES)
    if size is _UNKEYED or scale_factor is _UNKEYED:
        return None
    for flag in (align_corners, recompute_scale_factor, antialias):
        if flag is not None and type(flag) is not bool:
            return None
    return (input.shape, size, scale_factor, mode, align_corners, recompute_scale_factor,
            antialias)


def _typed(v, types):
    """v as part of _resize_key: None, a number whose exact type is in `types`, or a tuple
    of them (given as a tuple or a list); _UNKEYED for anything else."""
    if v is None or type(v) in types:
        return v
    if type(v) in (tuple, list) and all([type(x) in types for x in v]):
        return tuple(v)
    return _UNKEYED


_UNKEYED = object()


def _resize_call(input, size, scale_factor, mode, align_corners, recompute_scale_factor,
                 antialias):
    """interpolate's arguments checked, as the op name, builder and static arguments of
    its kernel."""
    op = "interpolate"
    shape = _shape(input)
    n = len(shape) - 2
    if not 1 <= n <= 3:
        raise ShapeError(f"interpolate(): input must be (N, C, *spatial) with 1 to 3 spatial "
                         f"dimensions, got shape {shape}", user_loc())
    _constant_shapes(op, (input,), ("input",))
    if any(isinstance(d, int) and d == 0 for d in shape[2:]):
        raise ShapeError(f"interpolate(): input's spatial sizes must be positive, got shape "
                         f"{shape}", user_loc())
    if mode != "area":      # (area, torch's adaptive average pooling, takes empty channels)
        ops.check_channels("interpolate", shape, 1)
    if antialias and (mode not in ("bilinear", "bicubic", "lanczos") or n != 2):
        raise ShapeError("interpolate(): antialias=True is for the modes bilinear, bicubic "
                         f"and lanczos of a 4-D input (N, C, H, W), got mode={mode!r} and "
                         f"shape {shape}", user_loc())
    if mode in _LINEAR:
        if _LINEAR[mode] != n:
            raise ShapeError(f"interpolate(): mode={mode!r} needs a {_LINEAR[mode] + 2}-D "
                             f"input, got shape {shape}", user_loc())
        if mode == "lanczos" and align_corners:
            raise ShapeError("interpolate(): mode='lanczos' does not support "
                             "align_corners=True", user_loc())
        if mode == "lanczos" and not antialias:
            raise ShapeError("interpolate(): mode='lanczos' requires antialias=True (its "
                             "Lanczos-3 filter is applied as the antialiasing one)",
                             user_loc())
    elif mode in ("nearest", "nearest-exact", "area"):
        if align_corners is not None:
            raise ShapeError("interpolate(): align_corners can only be set with the "
                             "interpolating modes linear, bilinear, bicubic, trilinear and "
                             "lanczos", user_loc())
    else:
        _unsupported(op, f"mode={mode!r}")
    if (size is None) == (scale_factor is None):
        raise ShapeError("interpolate(): give exactly one of size and scale_factor",
                         user_loc())
    # (area is torch's adaptive average pooling, whose output sizes may be 0: empty)
    least = 0 if mode == "area" else 1
    if size is not None:
        if recompute_scale_factor:
            raise ShapeError("interpolate(): recompute_scale_factor is not meaningful with "
                             "an explicit size", user_loc())
        if isinstance(size, (tuple, list)) and len(size) != n:
            # (torch repeats an int, never a sequence of one)
            raise ShapeError(f"interpolate(): size must be an int or a tuple of {n} ints "
                             f"(one per spatial dimension of input of shape {shape}), got "
                             f"{size!r}", user_loc())
        out = _ntuple(size, n, "size", op, least)
        scales = (None,) * n
    else:
        sf = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * n
        if len(sf) != n:
            raise ShapeError(f"interpolate(): scale_factor must be a number or a tuple of "
                             f"{n}, got {scale_factor!r}", user_loc())
        sf = tuple(_float(s, "scale_factor", op) for s in sf)
        out = tuple(int(math.floor(d * s)) for d, s in zip(shape[2:], sf))
        if any(o < least for o in out):
            raise ShapeError(f"interpolate(): scale_factor={scale_factor!r} gives output "
                             f"size {out} for input of shape {shape}", user_loc())
        scales = (None,) * n if recompute_scale_factor else sf
    if mode == "area":
        pool = f"adaptive_avg_pool{n}d"
        return pool, ops.adaptive_pool, _adaptive_static(pool, n, input, out, "avg")
    return op, ops.interpolate, ((("size", out), ("scales", scales), ("mode", mode),
                                  ("align_corners", bool(align_corners)))
                                 + ((("antialias", True),) if antialias else ()))




# -- padding -------------------------------------------------------------------------------
_PAD_RANKS = ("Supported combinations for non-constant padding: 2D or 3D input: padding "
              "size = 2 (pads last dimension); 3D or 4D input: padding size = 4 (pads last 2 "
              "dimensions); 4D or 5D input: padding size = 6 (pads last 3 dimensions)")


def pad(input, pad, mode="constant", value=None):
    """input padded by pad = (last dimension's before, after, the one before it's before,
    after, ...), torch's order; a negative width cuts elements off. Modes constant (with
    value, default 0), reflect, replicate and circular (these pad the last 1, 2 or 3
    dimensions of an input with at most one batch dimension more, as torch's)."""
    op = "pad"
    widths = tuple(pad) if isinstance(pad, (tuple, list)) else None
    if widths is None:
        raise ArgumentError(f"pad(): pad must be a tuple of ints, got {type(pad).__name__} "
                            f"{pad!r}", user_loc())
    widths = tuple(_int(w, "pad", op, pad, "a tuple of ints") for w in widths)
    shape = _shape(input)
    ndim, k = len(shape), len(widths) // 2
    if len(widths) % 2:
        raise ShapeError(f"pad(): padding length must be divisible by 2, got {pad!r}",
                         user_loc())
    if k > ndim:
        raise ShapeError(f"pad(): padding length should be less than or equal to two times "
                         f"the input dimension but got padding length {len(widths)} and "
                         f"input of dimension {ndim}", user_loc())
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad(): unrecognised padding mode {mode!r}: jitdl.nn pads "
                                  f"with 'constant', 'reflect', 'replicate' and 'circular'")
    pairs = tuple((widths[2 * i], widths[2 * i + 1]) for i in reversed(range(k)))
    first = ndim - k
    if mode == "constant":
        for d, (n, (a, b)) in enumerate(zip(shape[first:], pairs), first):
            if isinstance(n, int) and n + a + b < 0:
                raise ShapeError(f"pad(): the input size {n}, plus negative padding {a} and "
                                 f"{b} resulted in a negative output size, which is invalid; "
                                 f"check dimension {d} of your input", user_loc())
            if isinstance(n, int) and n + min(a, 0) + min(b, 0) < 0:
                # (torch cuts before it pads: narrow(): length must be non-negative)
                raise ShapeError(f"pad(): negative padding in ({a}, {b}) cuts more than the "
                                 f"{n} element(s) of dimension {d} of your input (the cut "
                                 f"comes before the padding, as torch's narrow)", user_loc())
        fill = 0 if value is None else value
        if not is_symbolic(fill):
            # (a bool value is the number torch takes it for: F.pad(mask, ..., value=True))
            fill = _float(int(fill) if isinstance(fill, (bool, np.bool_)) else fill,
                          "value", op)
            kind = _dtype(input).kind
            if kind in "iu" and not math.isfinite(fill):
                raise ArgumentError(f"pad(): value {fill} cannot be converted to the "
                                    f"integer dtype {_dtype(input)} of input", user_loc())
            fill = bool(fill) if kind == "b" else int(fill) if kind in "iu" else fill
        return apply(op, ops.pad, (input, fill),
                     (("pads", pairs), ("mode", mode)), None, ("input", "value"))
    if value is not None and value != 0:
        raise ShapeError(f"pad(): padding mode {mode!r} doesn't take in value argument",
                         user_loc())
    if not 1 <= k <= 3 or ndim not in (k + 1, k + 2):
        raise NotImplementedError(f"pad(): padding size {len(widths)} is not supported for "
                                  f"{ndim}D input with mode {mode!r}. {_PAD_RANKS}")
    _check_edge_pads(mode, shape, pairs, first)
    return apply(op, ops.pad, (input,), (("pads", pairs), ("mode", mode)), None, ("input",))


def _check_edge_pads(mode, shape, pairs, first):
    """torch's limits on the widths of reflect, replicate and circular padding, on the
    sizes known: reflect and replicate need every dimension but the batch one non-empty,
    no padded dimension of the output negative and at least one of them non-empty (an
    empty one beside it is torch's empty result), reflection narrower than the input,
    circular wrapping no wider than it and never of an input cut away."""
    unbatched = shape[1:] if len(shape) == len(pairs) + 2 else shape
    if mode != "circular" and any(isinstance(n, int) and n == 0 for n in unbatched):
        raise ShapeError(f"pad(): mode {mode!r} needs every dimension but the batch one "
                         f"non-empty, got input of shape {tuple(shape)}", user_loc())
    sizes = [n + a + b for n, (a, b) in zip(shape[first:], pairs) if isinstance(n, int)]
    if mode != "circular" and len(sizes) == len(pairs) and max(sizes) < 1:
        raise ShapeError(f"pad(): input {tuple(shape)} is too small for padding "
                         f"{[list(p) for p in pairs]}: calculated output sizes {sizes} of "
                         f"the padded dimensions", user_loc())
    for d, (n, (a, b)) in enumerate(zip(shape[first:], pairs), first):
        if not isinstance(n, int):
            continue
        if mode == "reflect" and not (a < n and b < n):
            raise ShapeError(f"pad(): padding size should be less than the corresponding "
                             f"input dimension, but got padding ({a}, {b}) at dimension {d} "
                             f"of input {tuple(shape)}", user_loc())
        if mode == "circular":
            if a > n or b > n:
                raise ShapeError(f"pad(): padding ({a}, {b}) at dimension {d} of input "
                                 f"{tuple(shape)} causes wrapping around more than once",
                                 user_loc())
            kept = n - max(-a, 0) - max(-b, 0)
            if kept < 0 or kept == 0 and (a > 0 or b > 0):
                raise ShapeError(f"pad(): negative padding ({a}, {b}) at dimension {d} of "
                                 f"input {tuple(shape)} leaves nothing to wrap", user_loc())
        elif n + a + b < 0:
            raise ShapeError(f"pad(): input (size {n} at dimension {d}) is too small for "
                             f"padding ({a}, {b}): calculated output size {n + a + b}",
                             user_loc())


# -- embedding and attention ---------------------------------------------------------------
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """weight[input]: rows of weight at integer indices (IndexError when out of range).
    max_norm: each row input reads whose norm_type-norm is over max_norm is scaled to it,
    in weight itself as torch does (a NumPy weight is renormalised in place; inside a
    definition only the result is)."""
    if padding_idx is not None:
        rows = _shape(weight)[0]
        p = _int(padding_idx, "padding_idx", "embedding")
        if not -rows <= p < rows:
            raise ShapeError(f"embedding(): padding_idx must be within num_embeddings "
                             f"({rows}), got {p}", user_loc())
    static = ()
    if max_norm is not None:
        max_norm = _float(max_norm, "max_norm", "embedding")
        norm_type = _float(norm_type, "norm_type", "embedding")
        if not norm_type > 0:
            raise ArgumentError(f"embedding(): norm_type must be positive, got {norm_type}",
                                user_loc())
        static = (("max_norm", max_norm), ("norm_type", norm_type))
        out = apply("embedding", ops.embedding, (input, weight), static, None,
                    ("input", "weight"))
        if isinstance(weight, np.ndarray) and not is_symbolic(out):
            _renorm_rows(weight, np.asarray(input), out)
        return out
    return apply("embedding", ops.embedding, (input, weight), static, None,
                 ("input", "weight"))


def _renorm_rows(weight, indices, out):
    """torch's embedding_renorm_: the rows of weight that indices read, scaled in place
    where their norm is over max_norm. Written back from the kernel's result, whose rows
    are those rows renormalised, so that weight[indices] is the result afterwards, as in
    torch (a norm computed again here in float64 scaled float32 rows whose float32 norm
    overflows to inf, which the kernel, as torch, scales to 0)."""
    flat = indices.ravel()
    if flat.size == 0:
        return
    rows = np.asarray(out).reshape(flat.size, weight.shape[1])
    old = weight[flat]
    changed = ~((rows == old) | np.isnan(rows) & np.isnan(old)).all(axis=1)
    if changed.any():
        weight[flat[changed]] = rows[changed]


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value; scale defaults to 1 / sqrt(E)."""
    op = "scaled_dot_product_attention"
    if is_causal and attn_mask is not None:
        raise ShapeError(f"{op}(): give attn_mask or is_causal=True, not both", user_loc())
    operands, names = (query, key, value), ("query", "key", "value")
    if attn_mask is not None:
        operands, names = operands + (attn_mask,), names + ("attn_mask",)
    static = (("scale", None if scale is None else _float(scale, "scale", op)),
              ("is_causal", bool(is_causal)), ("gqa", bool(enable_gqa)))
    p = _float(dropout_p, "dropout_p", op)
    if p:
        kept = _dropout_draw(p, query, key, value, enable_gqa, op)
        if kept is not None:
            operands, names = operands + (kept,), names + ("dropout",)
            static += (("dropout", True),)
    return apply(op, ops.attention, operands, static, None, names)


def _dropout_draw(p, query, key, value, gqa, op):
    """torch's dropout of the attention weights (train=True): each kept with probability
    1 - p and scaled by 1 / (1 - p), all dropped at p = 1. The draw is NumPy's global
    generator's (np.random.seed repeats it; torch's own generator cannot be matched), as
    an array of the weights' shape (batch..., L, S); None where the operands' shapes do
    not fit together (the attention says why)."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{op}(): dropout probability has to be between 0 and 1, but got "
                         f"{p}")
    if any(is_symbolic(t) for t in (query, key, value)):
        raise ArgumentError(f"{op}(): dropout_p > 0 inside a definition: kernels draw no "
                            "random numbers; call it on arrays, or pass the dropped weights' "
                            "effect in yourself (dropout_p=0.0)", user_loc())
    shapes = [np.shape(t) for t in (query, key, value)]
    if min(map(len, shapes)) < 2:
        return None
    batch = [s[:-2] for s in shapes]
    if gqa and min(map(len, batch)) >= 1:      # (key and value heads repeat the query's)
        batch = [b[:-1] + batch[0][-1:] for b in batch]
    try:
        shape = np.broadcast_shapes(*batch) + (shapes[0][-2], shapes[1][-2])
    except ValueError:
        return None
    dt = np.result_type(*(np.asarray(t).dtype for t in (query, key, value)))
    return _kept(shape, dt if dt in (np.float32, np.float64) else np.dtype(np.float32), p)


for _n in __all__:     # f.tune(*args), f.lower(*args)...: see jitdl.eager.tunable
    tunable(globals()[_n], _n)
