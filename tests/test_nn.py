"""jd.nn against NumPy float64 references written here from torch.nn.functional's
definitions: activations, softmax, norms, linear, convolutions, pooling, interpolate,
embedding, attention; torch's shape rules, errors naming the argument, and the functions
inside a @jd.compute definition (fused, no kernel of their own)."""
import itertools
import math
import re

import numpy as np
import pytest

import jitdl as jd
import jitdl.nn as F
from jitdl import eager

F32, F64 = np.float32, np.float64
erf = np.vectorize(math.erf, otypes=[F64])     # (scipy is no dependency)


def normal(rng, shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


def close(out, ref, dtype=F32, k=1):
    """out matches the float64 reference within dtype's rounding over k-term sums."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == dtype, out.dtype
    tol = 2e-5 if dtype == F32 else 1e-12
    np.testing.assert_allclose(out, ref, rtol=tol * 5, atol=tol * math.sqrt(k) * 3)


# -- activations ---------------------------------------------------------------------------
def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


ACTS = [
    ("relu", {}, lambda x: np.maximum(x, 0)),
    ("relu6", {}, lambda x: np.clip(x, 0, 6)),
    ("leaky_relu", {"negative_slope": 0.2}, lambda x: np.where(x > 0, x, 0.2 * x)),
    ("elu", {"alpha": 1.5}, lambda x: np.where(x > 0, x, 1.5 * np.expm1(x))),
    ("gelu", {}, lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2)))),
    ("gelu", {"approximate": "tanh"},
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("sigmoid", {}, _sigmoid),
    ("silu", {}, lambda x: x * _sigmoid(x)),
    ("softplus", {"beta": 2.0, "threshold": 3.0},
     lambda x: np.where(2 * x > 3, x, np.log1p(np.exp(2 * x)) / 2)),
    ("tanh", {}, np.tanh),
]


@pytest.mark.parametrize("name,kw,ref", ACTS, ids=[f"{a[0]}{len(a[1])}" for a in ACTS])
def test_activations(rng, name, kw, ref):
    x = normal(rng, (3, 37)) * 4
    x[0, :3] = [np.nan, -np.inf, np.inf]
    with np.errstate(invalid="ignore", over="ignore"):       # inf * 0 in the reference
        expected = ref(x.astype(F64))
    close(getattr(F, name)(x, **kw), expected)


def test_activation_float64_and_inplace(rng):
    x = normal(rng, (5, 6), F64)
    close(F.gelu(x), 0.5 * x * (1 + erf(x / np.sqrt(2))), F64)
    y = x.copy()
    assert F.relu(y, inplace=True) is y
    np.testing.assert_array_equal(y, np.maximum(x, 0))


# -- softmax -------------------------------------------------------------------------------
def softmax_ref(x, axis):
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("dim", [0, -1, 1])
def test_softmax_log_softmax(rng, dim):
    x = normal(rng, (4, 7, 5)) * 30          # large values: the max must be subtracted
    ref = softmax_ref(x.astype(F64), dim)
    close(F.softmax(x, dim=dim), ref)
    close(F.log_softmax(x, axis=dim), np.log(ref))


def test_softmax_dtype_and_dim_errors(rng):
    x = normal(rng, (3, 4))
    close(F.softmax(x, 1, dtype=np.float64), softmax_ref(x.astype(F64), 1), F64)
    with pytest.raises(TypeError, match="not both"):
        F.softmax(x, dim=0, axis=0)
    with pytest.raises(np.exceptions.AxisError):
        F.log_softmax(x, dim=2)
    # an integer or bool dtype= raises, as torch's (softmax of the input cast to int64,
    # truncated, came back as float64; uint8 wrapped negatives to NaN)
    for dt, fn in ((np.int64, F.softmax), (np.uint8, F.log_softmax), (np.bool_, F.softmax),
                   ("int32", F.log_softmax)):
        with pytest.raises(jd.errors.ArgumentError, match=re.escape(
                f"{fn.__name__}(): dtype must be a floating-point dtype (float32 or float64), "
                f"got {np.dtype(dt).name}")):
            fn(x, 1, dtype=dt)
    close(F.log_softmax(x.astype(F64), -1, dtype="float32"),
          np.log(softmax_ref(x.astype(F32), -1)))


# -- normalisation and linear ------------------------------------------------------------------
def test_layer_norm(rng):
    x = normal(rng, (2, 3, 4, 5)) * 3 + 1
    w, b = normal(rng, (4, 5)), normal(rng, (4, 5))
    x64 = x.astype(F64)
    mu = x64.mean((2, 3), keepdims=True)
    var = ((x64 - mu) ** 2).mean((2, 3), keepdims=True)
    y = (x64 - mu) / np.sqrt(var + 1e-3)
    close(F.layer_norm(x, (4, 5), w, b, eps=1e-3), y * w + b)
    mu1 = x64.mean(-1, keepdims=True)
    var1 = ((x64 - mu1) ** 2).mean(-1, keepdims=True)
    close(F.layer_norm(x, 5), (x64 - mu1) / np.sqrt(var1 + 1e-5))
    with pytest.raises(ValueError, match="normalized_shape"):
        F.layer_norm(x, (3, 5))
    with pytest.raises(ValueError, match="weight must have shape"):
        F.layer_norm(x, 5, w)


def test_rms_norm(rng):
    x = normal(rng, (3, 8), F64)
    w = normal(rng, (8,), F64)
    ms = (x ** 2).mean(-1, keepdims=True)
    close(F.rms_norm(x, 8, w, eps=1e-4), x / np.sqrt(ms + 1e-4) * w, F64)
    close(F.rms_norm(x, [8]), x / np.sqrt(ms + np.finfo(F64).eps), F64)


@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 5)])
def test_batch_norm_training(rng, shape):
    """training=True: the batch's statistics (biased variance) over every axis but axis 1,
    and the running ones updated in place, momentum-weighted with the unbiased variance,
    as torch does (checked against torch 2.13); inside a definition the result alone."""
    axes = (0,) + tuple(range(2, len(shape)))
    for dt in (F64, F32):
        x = normal(rng, shape, dt) * 2 + 0.5
        w, b = normal(rng, (3,), dt), normal(rng, (3,), dt)
        m, v = normal(rng, (3,), dt), np.abs(normal(rng, (3,), dt)) + 0.5
        m0, v0 = m.astype(F64), v.astype(F64)
        x64 = x.astype(F64)
        c = (slice(None),) + (None,) * (len(shape) - 2)
        mean, var = x64.mean(axes), x64.var(axes)
        ref = (x64 - mean[c]) / np.sqrt(var[c] + 1e-5) * w[c] + b[c]
        got = F.batch_norm(x, m, v, w, b, training=True, momentum=0.3)
        assert got.dtype == dt
        tol = dict(rtol=1e-12, atol=1e-12) if dt == F64 else dict(rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(got, ref, **tol)
        np.testing.assert_allclose(m, 0.7 * m0 + 0.3 * mean, **tol)
        np.testing.assert_allclose(v, 0.7 * v0 + 0.3 * x64.var(axes, ddof=1), **tol)
        np.testing.assert_allclose(F.batch_norm(x, None, None, training=True),
                                   (x64 - mean[c]) / np.sqrt(var[c] + 1e-5), **tol)

        @jd.compute
        def normed(X, W, B):
            return F.batch_norm(X, None, None, W, B, training=True) * 2.0
        np.testing.assert_allclose(normed(x, w, b), 2 * ref, **tol)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(normal(rng, (1, 3)), None, None, training=True)


def test_batch_norm_training_refused_running_stats_change_neither(rng):
    """A running statistic of the wrong shape, or one that cannot take the update (an
    integer array), raises with neither running statistic changed (running_mean was
    updated before running_var was refused); a running_var view is updated in place."""
    x = normal(rng, (4, 3, 5), F64) * 2 + 0.5
    m = normal(rng, (3,), F64)
    m0 = m.copy()
    for v in (np.abs(normal(rng, (4,), F64)) + 0.5, np.array([1, 2, 3], dtype=np.int64)):
        v0 = v.copy()
        with pytest.raises((ValueError, TypeError)):
            F.batch_norm(x, m, v, training=True)
        np.testing.assert_array_equal(m, m0)
        np.testing.assert_array_equal(v, v0)
    big = np.abs(normal(rng, (6,), F64)) + 0.5
    v, v0 = big[::2], big[::2].copy()
    F.batch_norm(x, m, v, training=True, momentum=0.25)
    np.testing.assert_allclose(m, 0.75 * m0 + 0.25 * x.mean((0, 2)), rtol=1e-12)
    np.testing.assert_allclose(big[::2], 0.75 * v0 + 0.25 * x.var((0, 2), ddof=1),
                               rtol=1e-12)


def test_batch_norm(rng):
    x = normal(rng, (2, 3, 4, 5))
    m, v = normal(rng, (3,)), np.abs(normal(rng, (3,))) + 0.1
    w, b = normal(rng, (3,)), normal(rng, (3,))
    c = (slice(None), None, None)
    ref = (x.astype(F64) - m[c]) / np.sqrt(v[c].astype(F64) + 1e-5) * w[c] + b[c]
    close(F.batch_norm(x, m, v, w, b), ref)
    close(F.batch_norm(x[:, :, 0], m, v), (x[:, :, 0] - m[:, None]) /
          np.sqrt(v[:, None].astype(F64) + 1e-5))
    with pytest.raises(ValueError, match="running_var must have shape"):
        F.batch_norm(x, m, v[:2])


@pytest.mark.parametrize("xshape", [(7,), (5, 7), (2, 3, 7)])
def test_linear(rng, xshape):
    x, w, b = normal(rng, xshape), normal(rng, (6, 7)), normal(rng, (6,))
    close(F.linear(x, w, b), x.astype(F64) @ w.T.astype(F64) + b, k=7)
    close(F.linear(x, w), x.astype(F64) @ w.T.astype(F64), k=7)
    for b1 in (normal(rng, (1,)), normal(rng, ())):        # a bias that broadcasts
        close(F.linear(x, w, b1), x.astype(F64) @ w.T.astype(F64) + b1, k=7)
    w1, b0 = normal(rng, (7,)), normal(rng, ())          # torch's 1-D weight, 0-d bias
    close(F.linear(x, w1, b0), x.astype(F64) @ w1.astype(F64) + b0, k=7)
    assert F.linear(x, w1).shape == xshape[:-1]


def test_linear_errors(rng):
    with pytest.raises(ValueError, match="bias must have shape \\(\\)"):
        F.linear(normal(rng, (2, 6)), normal(rng, (6,)), normal(rng, (1,)))
    with pytest.raises(ValueError, match="weight must be"):
        F.linear(normal(rng, (2, 6)), normal(rng, (1, 4, 6)))
    with pytest.raises(ValueError, match="in_features 6.*input of shape \\(2, 7\\)"):
        F.linear(normal(rng, (2, 7)), normal(rng, (4, 6)))
    with pytest.raises(ValueError, match="bias must have shape \\(4,\\)"):
        F.linear(normal(rng, (2, 6)), normal(rng, (4, 6)), normal(rng, (3,)))


# -- convolution ---------------------------------------------------------------------------
def conv_ref(x, w, b=None, stride=1, pad=0, dil=1, groups=1):
    """Cross-correlation by explicit kernel-offset loops over the zero-padded input;
    pad is an int or per-dimension (lo, hi) pairs."""
    nsp = w.ndim - 2
    stride, dil = (stride,) * nsp if isinstance(stride, int) else stride, \
        (dil,) * nsp if isinstance(dil, int) else dil
    pad = ((pad, pad),) * nsp if isinstance(pad, int) else pad
    x, w = x.astype(F64), w.astype(F64)
    unbatched = x.ndim == nsp + 1
    if unbatched:
        x = x[None]
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pad))
    nf, cg = w.shape[:2]
    ks = w.shape[2:]
    osz = [(xp.shape[2 + d] - dil[d] * (ks[d] - 1) - 1) // stride[d] + 1 for d in range(nsp)]
    out = np.zeros((x.shape[0], nf) + tuple(osz))
    fg = nf // groups
    for g in range(groups):
        xg, wg = xp[:, g * cg:(g + 1) * cg], w[g * fg:(g + 1) * fg]
        for r in np.ndindex(*ks):
            sl = tuple(slice(r[d] * dil[d], r[d] * dil[d] + stride[d] * (osz[d] - 1) + 1,
                             stride[d]) for d in range(nsp))
            out[:, g * fg:(g + 1) * fg] += np.einsum(
                "nc...,fc->nf...", xg[(slice(None), slice(None)) + sl], wg[(...,) + r])
    if b is not None:
        out += b.reshape((1, nf) + (1,) * nsp)
    return out[0] if unbatched else out


CONV2D = [  # x shape, weight shape, stride, padding, dilation, groups
    ((2, 3, 9, 8), (4, 3, 3, 3), 1, 0, 1, 1),
    ((1, 4, 11, 7), (6, 2, 3, 2), (2, 1), (1, 2), 1, 2),
    ((2, 6, 10, 9), (6, 1, 3, 3), 2, 1, 2, 6),         # depthwise, dilated
    ((3, 7, 8), (5, 3, 1, 1), 1, 0, 1, 1),             # unbatched, 1x1
    ((1, 2, 7, 6), (3, 2, 5, 3), 3, 2, (1, 2), 1),
]


@pytest.mark.parametrize("xs,ws,stride,pad,dil,groups", CONV2D)
def test_conv2d(rng, xs, ws, stride, pad, dil, groups):
    x, w, b = normal(rng, xs), normal(rng, ws), normal(rng, ws[:1])
    p = pad if isinstance(pad, int) else tuple((q, q) for q in pad)
    ref = conv_ref(x, w, b, stride if isinstance(stride, int) else stride, p,
                   dil if isinstance(dil, int) else dil, groups)
    close(F.conv2d(x, w, b, stride, pad, dil, groups), ref, k=np.prod(ws[1:]))


def test_conv2d_same_valid_float64(rng):
    x, w = normal(rng, (1, 2, 7, 6), F64), normal(rng, (3, 2, 4, 3), F64)
    # even kernel: torch puts the extra padding after
    close(F.conv2d(x, w, padding="same", dilation=(1, 2)),
          conv_ref(x, w, pad=((1, 2), (2, 2)), dil=(1, 2)), F64)
    close(F.conv2d(x, w, padding="valid"), conv_ref(x, w), F64)


def test_conv2d_indices_have_no_division_by_one(rng):
    """The automatic schedule's fused loop over (n, out channels / 16, rows) of 16 output
    channels left `f // 16 // 1` and `f // 16 % 1` in the loop IR (the channel blocks'
    axis of extent 1), each generated as a floor division and modulo (LLVM folded them,
    after spending compile time on them); the simplifier takes x // 1 to x and x % 1 to
    0. The result is NumPy's."""
    x, w = normal(rng, (2, 8, 16, 16)), normal(rng, (16, 8, 3, 3))
    eager.clear()
    close(F.conv2d(x, w, padding=1), conv_ref(x, w, pad=1), k=8 * 9)
    texts = [k.texts["loop_ir"] for key, k in eager._kernels.items() if key[0] == "conv2d"]
    assert texts and all("//" in t for t in texts)
    assert not any(re.search(r"(//|%) 1\b", t) for t in texts), texts


@pytest.mark.parametrize("op,xs,ws,stride,pad,dil", [
    (F.conv2d, (2, 8, 23, 70), (24, 8, 3, 3), 2, 1, 1),
    (F.conv2d, (2, 8, 13, 69), (24, 8, 1, 1), 2, 0, 1),        # (no padding stage)
    (F.conv2d, (1, 6, 19, 100), (20, 6, 3, 2), (1, 3), (1, 0), (1, 2)),
    (F.conv1d, (3, 8, 101), (20, 8, 4), 3, 2, 1)])
def test_strided_convolutions_are_register_tiled(rng, op, xs, ws, stride, pad, dil):
    """A convolution strided along its last axis reads its input there with the stride:
    the automatic schedule found no contiguous loop and ran one scalar dot product per
    output element (a 3 x 3, stride 2 conv2d of (4, 64, 56, 56) by 128 filters took 200 ms,
    im2col and BLAS 9 ms). The input's last axis is laid out by (kernel position, output
    column) first, so the reduction is register-tiled (unrolled) as with stride 1
    (outputs at least 32 wide: the widest register tile of any target's lanes)."""
    x, w = normal(rng, xs), normal(rng, ws)
    eager.clear()
    close(op(x, w, stride=stride, padding=pad, dilation=dil),
          conv_ref(x, w, stride=stride, pad=pad if isinstance(pad, int) else
                   tuple((q, q) for q in pad), dil=dil), k=np.prod(ws[1:]))
    texts = [k.texts["loop_ir"] for key, k in eager._kernels.items()
             if key[0] == op.__name__]
    assert texts and all("unrolled" in t for t in texts), texts


@pytest.mark.parametrize("op,xs,ws,stride,pad,dil,dtype", [
    (F.conv2d, (1, 32, 7, 7), (32, 32, 3, 3), 1, 1, 1, F32),
    (F.conv2d, (3, 3, 9, 9), (17, 3, 3, 3), 1, 0, 1, F32),       # batch, odd channels
    (F.conv2d, (2, 24, 14, 14), (40, 24, 3, 3), 2, 1, 1, F32),
    (F.conv2d, (2, 5, 11, 13), (7, 5, 5, 3), 1, 2, (2, 1), F32),  # dilated, padding 2
    (F.conv2d, (6, 10, 10), (9, 6, 3, 3), 1, 1, 1, F64),          # unbatched
    (F.conv2d, (2, 16, 28, 30), (20, 16, 3, 3), (1, 2), (0, 1), 1, F64),
    (F.conv3d, (2, 4, 5, 6, 7), (6, 4, 3, 2, 3), 1, 1, 1, F32)])
def test_convolutions_of_narrow_rows_are_register_tiled(rng, op, xs, ws, stride, pad, dil,
                                                        dtype, pytestconfig):
    """A convolution whose output rows are narrower than a register tile (two vectors)
    got no tile: one partial vector per output row accumulating in memory (a 3 x 3
    conv2d of (1, 256, 7, 7) by 256 filters float32 0.24x of im2col + BLAS on one Zen 4
    core, stride 2 of (1, 64, 14, 14) 0.15x). It now runs as a matmul over the output
    positions flattened (register-tiled, its im2col packed), reshaped back. Bias too."""
    x, w, b = normal(rng, xs, dtype), normal(rng, ws, dtype), normal(rng, ws[:1], dtype)
    eager.clear()
    nsp = len(ws) - 2
    p = pad if isinstance(pad, int) else tuple((q, q) for q in pad)
    ref = conv_ref(x, w, b, stride=stride if isinstance(stride, int) else stride, pad=p,
                   dil=(dil,) * nsp if isinstance(dil, int) else dil)
    close(op(x, w, b, stride=stride, padding=pad, dilation=dil), ref, dtype,
          k=np.prod(ws[1:]))
    if pytestconfig.getoption("--target") == "cpu":
        texts = [k.texts["loop_ir"] for key, k in eager._kernels.items()
                 if key[0] == op.__name__]
        assert texts and all("unrolled" in t for t in texts), texts

    @jd.compute
    def conv_relu(X, W):
        return F.relu(op(X, W, stride=stride, padding=pad, dilation=dil))
    close(conv_relu(x, w), np.maximum(conv_ref(
        x, w, stride=stride, pad=p, dil=(dil,) * nsp if isinstance(dil, int) else dil), 0),
        dtype, k=np.prod(ws[1:]))


@pytest.mark.cpu_only
@pytest.mark.parametrize("dtype", [F32, F64])
def test_narrow_row_convolutions_pack_their_windows(rng, dtype):
    """The windows (im2col) of a convolution over its flattened output positions are a
    gather dividing in each element's index; with few filters (17, under two row tiles
    of the register tile) it was read in place, each tile column gathered per reduction
    step (float64 (1, 3, 9, 9) by 3 x 3 filters 13 -> 17 us against the row-wise kernel
    on one Zen 4 core). The register tile packs it where one row tile rereads it."""
    x, w = normal(rng, (1, 3, 9, 9), dtype), normal(rng, (17, 3, 3, 3), dtype)
    eager.clear()
    close(F.conv2d(x, w), conv_ref(x, w), dtype, k=27)
    texts = [k.texts["loop_ir"] for key, k in eager._kernels.items() if key[0] == "conv2d"]
    assert texts and all("conv2d_cols_pack" in t for t in texts), texts


@pytest.mark.parametrize("op,xs,ws,groups,dtype", [
    (F.conv2d, (4, 64, 28, 28), (48, 64, 1, 1), 1, F32),
    (F.conv2d, (2, 12, 9, 13), (8, 6, 1, 1), 2, F64),
    (F.conv3d, (2, 16, 5, 6, 7), (24, 16, 1, 1, 1), 1, F32)])
def test_pointwise_convolutions_pack_their_input_like_a_matmul(rng, op, xs, ws, groups,
                                                                dtype, pytestconfig):
    """A 1 x 1 convolution is a matmul over the pixels: its kernel axes of one position
    are no reduction axes (the input is read at the output's pixel, and packed like a
    matmul's operand), and its spatial axes are one (tiles as wide as the target's where
    a 28-pixel row left 16-wide tiles and a tail): (4, 256, 28, 28) by 128 filters
    float32 4.3 -> 2.8 ms on one Zen 4 core, NumPy's matmul 2.7. Views and a bias too."""
    x, w, b = normal(rng, xs, dtype), normal(rng, ws, dtype), normal(rng, ws[:1], dtype)
    eager.clear()
    ref = conv_ref(x, w, b, groups=groups)
    close(op(x, w, b, groups=groups), ref, dtype, k=ws[1])
    texts = [k.texts["loop_ir"] for key, k in eager._kernels.items() if key[0] == op.__name__]
    flat = f"input: {np.dtype(dtype).name}[{xs[0]}, {xs[1]}, {math.prod(xs[2:])}]"
    assert texts and all(flat in t for t in texts), texts
    # (a reduction long enough to pack for; the CPU's schedule: --target cuda / emulated
    # run these convolutions on the GPU, whose schedule has no such pack)
    if groups == 1 and ws[1] >= 64 and pytestconfig.getoption("--target") == "cpu":
        assert all("input_pack" in t and "unrolled" in t for t in texts), texts
    xt = np.ascontiguousarray(np.swapaxes(x, -1, -2)).swapaxes(-1, -2)    # (a view)
    close(op(xt, w, b, groups=groups), ref, dtype, k=ws[1])
    close(op(x[:1], w, groups=groups), conv_ref(x[:1], w, groups=groups), dtype, k=ws[1])


@pytest.mark.parametrize("op,xs,ws,sizes", [
    (F.conv2d, (2, 3, 0, 5), (4, 3, 1, 1), "(0 x 5)"),
    (F.conv3d, (1, 2, 4, 3, 0), (3, 2, 1, 1, 1), "(4 x 3 x 0)")])
def test_pointwise_convolution_of_an_empty_image_names_its_axes(rng, op, xs, ws, sizes):
    """A 1 x 1 convolution of an input with an empty spatial axis is refused with the
    input's own spatial sizes (the flattened view named one size, (0), and a 1-d kernel)."""
    x, w = normal(rng, xs), normal(rng, ws)
    kernel = " x ".join("1" * (len(ws) - 2))
    with pytest.raises(jd.errors.ShapeError, match=re.escape(
            f"{op.__name__}(): calculated padded input size per channel {sizes} is smaller "
            f"than the dilated kernel size ({kernel})")):
        op(x, w)


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 3, 2, 2), (3, 1, 1, 1)])
def test_conv1d(rng, stride, pad, dil, groups):
    x, w = normal(rng, (2, 4, 13)), normal(rng, (6, 4 // groups, 3))
    close(F.conv1d(x, w, None, stride, pad, dil, groups),
          conv_ref(x, w, None, (stride,), pad, (dil,), groups), k=12)


def test_conv3d(rng):
    x, w = normal(rng, (1, 2, 5, 6, 4)), normal(rng, (3, 2, 2, 3, 2))
    close(F.conv3d(x, w, stride=(1, 2, 1), padding=1),
          conv_ref(x, w, None, (1, 2, 1), 1, 1), k=24)


def conv_transpose_ref(x, w, b=None, stride=1, pad=0, out_pad=0, groups=1, dil=1):
    """Scatter: input element i adds x[i] * w[r] to output i * stride - pad + r * dil."""
    x, w = x.astype(F64), w.astype(F64)
    nsp = w.ndim - 2
    cin, fg = w.shape[:2]
    cg = cin // groups
    ks = w.shape[2:]
    size = x.shape[2:]
    full = tuple((n - 1) * stride + dil * (k - 1) + 1 + out_pad for n, k in zip(size, ks))
    out = np.zeros((x.shape[0], fg * groups) + full)
    for g in range(groups):
        for r in np.ndindex(*ks):
            sl = tuple(slice(r[d] * dil, r[d] * dil + stride * (size[d] - 1) + 1, stride)
                       for d in range(nsp))
            out[(slice(None), slice(g * fg, (g + 1) * fg)) + sl] += np.einsum(
                "nc...,cf->nf...", x[:, g * cg:(g + 1) * cg], w[(slice(g * cg, (g + 1) * cg),
                                                                 slice(None)) + r])
    osz = tuple((n - 1) * stride - 2 * pad + dil * (k - 1) + out_pad + 1
                for n, k in zip(size, ks))
    out = out[(slice(None), slice(None)) + tuple(slice(pad, pad + o) for o in osz)]
    if b is not None:
        out += b.reshape((1, -1) + (1,) * nsp)
    return out


@pytest.mark.parametrize("stride,pad,out_pad,groups,dil",
                         [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (3, 2, 0, 2, 2), (2, 3, 1, 1, 1)])
def test_conv_transpose2d(rng, stride, pad, out_pad, groups, dil):
    x = normal(rng, (2, 4, 5, 6))
    w, b = normal(rng, (4, 3, 3, 2)), normal(rng, (3 * groups,))
    close(F.conv_transpose2d(x, w, b, stride, pad, out_pad, groups, dil),
          conv_transpose_ref(x, w, b, stride, pad, out_pad, groups, dil), k=24)


def test_conv_transpose1d(rng):
    x, w = normal(rng, (1, 3, 7), F64), normal(rng, (3, 2, 4), F64)
    close(F.conv_transpose1d(x, w, stride=2, padding=1),
          conv_transpose_ref(x, w, stride=2, pad=1), F64)


def test_conv_transpose_per_axis_strides(rng):
    """Strides, paddings, dilations and output paddings that differ per axis (a stride of
    1 on one axis, 3 on the other; groups), 1-D and 2-D: the scatter definition's sums."""
    def scatter(x, w, s, p, q, g, d):
        cg, fg, ks = x.shape[1] // g, w.shape[1], w.shape[2:]
        size = x.shape[2:]
        osz = [(n - 1) * s_ - 2 * p_ + d_ * (k - 1) + q_ + 1
               for n, s_, p_, d_, k, q_ in zip(size, s, p, d, ks, q)]
        y = np.zeros((x.shape[0], fg * g) + tuple(osz))
        for c, f, i, r in itertools.product(range(x.shape[1]), range(fg), np.ndindex(*size),
                                            np.ndindex(*ks)):
            o = tuple(a * s_ - p_ + b * d_ for a, s_, p_, b, d_ in zip(i, s, p, r, d))
            if all(0 <= v < m for v, m in zip(o, osz)):
                y[(slice(None), c // cg * fg + f) + o] += x[(slice(None), c) + i] * w[(c, f) + r]
        return y
    for s, p, q, g, d in [((2, 1), (1, 0), (1, 0), 1, (1, 2)), ((1, 3), (0, 2), (0, 2), 2, (2, 1)),
                          ((3,), (1,), (2,), 1, (1,)), ((2,), (2,), (1,), 2, (2,))]:
        size = (3, 4)[:len(s)]
        x = normal(rng, (2, 2 * g) + size, F64)
        w = normal(rng, (2 * g, 3) + (3, 2)[:len(s)], F64)
        fn = F.conv_transpose1d if len(s) == 1 else F.conv_transpose2d
        close(fn(x, w, stride=s, padding=p, output_padding=q, groups=g, dilation=d),
              scatter(x, w, s, p, q, g, d), F64)


def test_conv_errors(rng):
    x = normal(rng, (1, 4, 6, 6))
    with pytest.raises(ValueError, match="expect input with 3 channels.*got input of shape"):
        F.conv2d(x, normal(rng, (2, 3, 3, 3)))
    with pytest.raises(ValueError, match="groups=3 must divide.*output channels"):
        F.conv2d(normal(rng, (1, 6, 6, 6)), normal(rng, (4, 2, 3, 3)), groups=3)
    with pytest.raises(ValueError, match="weight must have 4 dimensions"):
        F.conv2d(x, normal(rng, (2, 4, 3)))
    with pytest.raises(ValueError, match="expected input of 3 .* or 4"):
        F.conv2d(x[0, 0], normal(rng, (2, 4, 3, 3)))
    with pytest.raises(ValueError, match="padded input size.*\\(6 x 6\\).*\\(7 x 7\\)"):
        F.conv2d(x, normal(rng, (2, 4, 4, 4)), dilation=2)
    with pytest.raises(ValueError, match="stride must be positive"):
        F.conv2d(x, normal(rng, (2, 4, 3, 3)), stride=0)
    with pytest.raises(ValueError, match="padding must be non-negative"):
        F.conv1d(x[0], normal(rng, (2, 4, 3)), padding=-1)
    with pytest.raises(ValueError, match="'same' is not supported for strided"):
        F.conv2d(x, normal(rng, (2, 4, 3, 3)), stride=2, padding="same")
    with pytest.raises(ValueError, match="invalid padding string"):
        F.conv2d(x, normal(rng, (2, 4, 3, 3)), padding="full")
    with pytest.raises(ValueError, match="bias must have shape \\(2,\\)"):
        F.conv2d(x, normal(rng, (2, 4, 3, 3)), normal(rng, (3,)))
    with pytest.raises(ValueError, match="output_padding must be smaller"):
        F.conv_transpose2d(x, normal(rng, (4, 2, 3, 3)), stride=2, output_padding=2)
    with pytest.raises(ValueError, match="stride must be an int or a tuple of 2"):
        F.conv2d(x, normal(rng, (2, 4, 3, 3)), stride=(1, 2, 3))


# -- pooling -------------------------------------------------------------------------------
def pool_out(n, k, s, p, d, ceil):
    """torch's pooling output size."""
    o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
    return o - 1 if ceil and (o - 1) * s >= n + p else o


def max_pool_ref(x, k, s, p, d, ceil):
    """-inf padding (enough on the right for ceil_mode), then strided dilated windows."""
    oh, ow = (pool_out(n, k, s, p, d, ceil) for n in x.shape[-2:])
    right = [max(0, (o - 1) * s + d * (k - 1) + 1 - p - n) for o, n in zip((oh, ow),
                                                                          x.shape[-2:])]
    xp = np.pad(x.astype(F64), ((0, 0),) * (x.ndim - 2) + ((p, right[0]), (p, right[1])),
                constant_values=-np.inf)
    return np.max([xp[..., r * d:r * d + s * (oh - 1) + 1:s, q * d:q * d + s * (ow - 1) + 1:s]
                   for r in range(k) for q in range(k)], axis=0)


def avg_pool_ref(x, k, s, p, ceil, include_pad, divisor=None):
    """torch's average pool, output by output: windows clipped to the padded input, the
    divisor counting padding or not."""
    h, w = x.shape[-2:]
    oh, ow = pool_out(h, k, s, p, 1, ceil), pool_out(w, k, s, p, 1, ceil)
    out = np.zeros(x.shape[:-2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s - p, j * s - p
            h1, w1 = min(h0 + k, h + p), min(w0 + k, w + p)
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
            n = divisor or (size if include_pad else (h1 - h0) * (w1 - w0))
            out[..., i, j] = x[..., h0:h1, w0:w1].astype(F64).sum((-1, -2)) / n
    return out


POOLS = [  # x shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 9, 8), 2, None, 0, 1, False),
    ((1, 2, 11, 10), 3, 2, 1, 1, True),
    ((2, 2, 10, 7), 3, 2, 1, 2, False),
    ((3, 8, 9), 4, 3, 2, 1, True),
]


@pytest.mark.parametrize("xs,k,s,p,d,ceil", POOLS)
def test_max_pool2d(rng, xs, k, s, p, d, ceil):
    x = normal(rng, xs) - 3         # negative: padding must never win
    close(F.max_pool2d(x, k, s, p, d, ceil), max_pool_ref(x, k, s or k, p, d, ceil))


@pytest.mark.parametrize("xs,k,s,p,d,ceil", POOLS)
@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool2d(rng, xs, k, s, p, d, ceil, include_pad):
    x = normal(rng, xs)
    close(F.avg_pool2d(x, k, s, p, ceil, include_pad),
          avg_pool_ref(x, k, s or k, p, ceil, include_pad))


def test_pool_1d_divisor_and_errors(rng):
    x = normal(rng, (2, 3, 11))
    close(F.max_pool1d(x, 3, 2, 1), _max_pool1d_ref(x, 3, 2, 1))
    close(F.avg_pool1d(x, 4, 3), _avg_pool1d_ref(x, 4, 3))
    y = normal(rng, (1, 2, 7, 7))
    close(F.avg_pool2d(y, 3, 2, 1, divisor_override=5), avg_pool_ref(y, 3, 2, 1, False, True, 5))
    with pytest.raises(ValueError, match="at most half"):
        F.max_pool2d(y, 3, padding=2)
    with pytest.raises(ValueError, match="too small"):
        F.max_pool2d(y, 8)


@pytest.mark.parametrize("xs,k,s,p,d,ceil", POOLS)
def test_max_pool2d_indices(rng, xs, k, s, p, d, ceil):
    """return_indices: each maximum's row-major position in its plane, the first of the
    window (ties: small integers; a plane of -inf: the first position inside the input)."""
    x = rng.integers(-2, 3, xs).astype(F32)
    x[0, 0] = -np.inf
    out, idx = F.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    s = s or k
    close(out, max_pool_ref(x, k, s, p, d, ceil))
    assert idx.dtype == np.int64 and idx.shape == out.shape
    h, w = x.shape[-2:]
    for o in np.ndindex(*out.shape):
        lead, (i, j) = o[:-2], o[-2:]
        window = [(a, b) for a in range(i * s - p, i * s - p + d * k, d)
                  for b in range(j * s - p, j * s - p + d * k, d) if 0 <= a < h and 0 <= b < w]
        first = next(a * w + b for a, b in window if x[lead + (a, b)] == out[o])
        assert idx[o] == first, (o, idx[o], first)


def test_max_pool1d_indices_and_in_a_definition(rng):
    x = normal(rng, (2, 9))
    out, idx = F.max_pool1d(x, 3, 2, 1, return_indices=True)
    close(out, _max_pool1d_ref(x[None], 3, 2, 1)[0])
    np.testing.assert_array_equal(np.take_along_axis(x, idx, axis=1), out)

    @jd.compute
    def f(X):
        y, i = F.max_pool2d(X, 2, return_indices=True)
        return y * 2, i
    y, i = f(normal(rng, (1, 2, 4, 6)))
    assert y.shape == i.shape == (1, 2, 2, 3) and i.dtype == np.int64


def _torch_max_index(values):
    """torch's CPU max-pool loop over a window in row-major order: a larger value or any
    NaN replaces the running maximum (so the last NaN wins)."""
    best, at = -np.inf, 0
    for n, v in enumerate(values):
        if v > best or np.isnan(v):
            best, at = v, n
    return at


def test_max_pool_indices_of_nan_windows_are_the_last_nan(rng):
    """Windows with NaNs: the maximum is NaN, at the last NaN's position (found against
    torch 2.13; the first one was reported), in 1-d, 2-d and adaptive pooling."""
    x = normal(rng, (3, 16))
    x[rng.random(x.shape) < 0.3] = np.nan
    out, idx = F.max_pool1d(x, 4, return_indices=True)
    for r, w in np.ndindex(*idx.shape):
        assert idx[r, w] == 4 * w + _torch_max_index(x[r, 4 * w:4 * w + 4]), (r, w)
    y = normal(rng, (2, 3, 6, 6))
    y[rng.random(y.shape) < 0.3] = np.nan
    for got in (F.max_pool2d(y, 3, return_indices=True)[1],
                F.adaptive_max_pool2d(y, 2, return_indices=True)[1]):
        for o in np.ndindex(*got.shape):
            i, j = o[-2:]
            win = y[o[:2] + (slice(3 * i, 3 * i + 3), slice(3 * j, 3 * j + 3))]
            k = _torch_max_index(win.ravel())
            assert got[o] == (3 * i + k // 3) * 6 + 3 * j + k % 3, o


def test_integer_avg_pool_is_torchs_truncated_mean(rng):
    """avg_pool of integers: the sum divided and truncated toward zero, in the input's
    dtype (torch's int64 kernel; found against torch 2.13, which returned 2 for a window
    summing to 11, where jitdl returned 2.75 in float64)."""
    x = rng.integers(-50, 50, (2, 3, 7, 9))
    for dov in (None, 3, -2):
        got = F.avg_pool2d(x, 3, 2, 1, divisor_override=dov)
        s = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        total = np.array([[s[..., 2 * i:2 * i + 3, 2 * j:2 * j + 3].sum((-2, -1))
                           for j in range(got.shape[-1])] for i in range(got.shape[-2])])
        total = np.moveaxis(total, (0, 1), (-2, -1))
        div = 9 if dov is None else dov
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, np.trunc(total / div).astype(x.dtype))
    assert F.avg_pool1d(np.array([[[-1, -2, 1, 2]]], np.int32), 2).tolist() == [[[-1, 1]]]


def test_relu_keeps_negative_zero_and_nan():
    """torch's relu keeps -0.0 (and NaN) as they are; max(x, 0) made +0.0 of -0.0."""
    x = np.array([-0.0, 0.0, np.nan, -1.0, 7.0])
    for f in (F.relu, F.relu6):
        got = f(x)
        np.testing.assert_array_equal(np.signbit(got[:2]), [True, False])
        assert np.isnan(got[2]) and got[3] == 0 and got[4] == (7.0 if f is F.relu else 6.0)


def _max_pool1d_ref(x, k, s, p):
    xp = np.pad(x.astype(F64), ((0, 0), (0, 0), (p, p)), constant_values=-np.inf)
    o = pool_out(x.shape[-1], k, s, p, 1, False)
    return np.max([xp[..., r:r + s * (o - 1) + 1:s] for r in range(k)], axis=0)


def _avg_pool1d_ref(x, k, s):
    o = pool_out(x.shape[-1], k, s, 0, 1, False)
    return np.mean([x[..., r:r + s * (o - 1) + 1:s].astype(F64) for r in range(k)], axis=0)


def adaptive_ref(x, out, fn):
    h, w = x.shape[-2:]
    oh, ow = out
    y = np.zeros(x.shape[:-2] + out)
    for i in range(oh):
        for j in range(ow):
            h0, h1 = i * h // oh, -(-(i + 1) * h // oh)
            w0, w1 = j * w // ow, -(-(j + 1) * w // ow)
            y[..., i, j] = fn(x[..., h0:h1, w0:w1].astype(F64), axis=(-1, -2))
    return y


@pytest.mark.parametrize("xs,out", [((2, 3, 10, 7), (4, 3)), ((3, 5, 5), (5, 2)),
                                    ((1, 2, 7, 9), (3, None))])
def test_adaptive_pool2d(rng, xs, out):
    x = normal(rng, xs)
    full = tuple(n if o is None else o for n, o in zip(xs[-2:], out))
    close(F.adaptive_avg_pool2d(x, out), adaptive_ref(x, full, np.mean))
    close(F.adaptive_max_pool2d(x, out), adaptive_ref(x, full, np.max))
    ties = rng.integers(-2, 3, xs).astype(F32)           # return_indices: the first maximum
    y, idx = F.adaptive_max_pool2d(ties, out, return_indices=True)
    close(y, adaptive_ref(ties, full, np.max))
    h, w = xs[-2:]
    for o in np.ndindex(*y.shape):
        i, j = o[-2:]
        window = [(a, b) for a in range(i * h // full[0], -(-(i + 1) * h // full[0]))
                  for b in range(j * w // full[1], -(-(j + 1) * w // full[1]))]
        assert idx[o] == next(a * w + b for a, b in window if ties[o[:-2] + (a, b)] == y[o])


def test_adaptive_avg_pool1d(rng):
    x = normal(rng, (2, 3, 10))
    close(F.adaptive_avg_pool1d(x, 4), adaptive_ref(x[..., None, :], (1, 4), np.mean)[..., 0, :])


# -- interpolate ---------------------------------------------------------------------------
def nearest_index(o, n, scale_factor=None, exact=False, rank=2):
    """torch's CPU nearest source index, in float32 index arithmetic as torch does it; its
    2-d kernel alone copies a size kept and halves a size doubled, whatever the scale."""
    dst = np.arange(o)
    if not exact and rank == 2 and o == n:
        return dst
    if not exact and rank == 2 and o == 2 * n:
        return dst // 2
    scale = np.float32(1 / scale_factor) if scale_factor else np.float32(n) / np.float32(o)
    f = dst.astype(F32) + (F32(0.5) if exact else F32(0))
    return np.minimum(np.floor(f * scale).astype(np.int64), n - 1)


def linear_taps(o, n, align, scale_factor=None):
    """torch's (lower, upper, upper's weight); a size kept is copied, whatever the scale."""
    dst = np.arange(o, dtype=F64)
    if o == n:
        return dst.astype(np.int64), dst.astype(np.int64), np.zeros(o)
    if align:
        src = dst * ((n - 1) / (o - 1) if o > 1 else 0.0)
    else:
        scale = 1 / scale_factor if scale_factor else n / o
        src = np.maximum((dst + 0.5) * scale - 0.5, 0)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    i1 = np.minimum(i0 + 1, n - 1)
    return i0, i1, src - i0


def bilinear_ref(x, size, align, sf=(None, None)):
    x = x.astype(F64)
    h0, h1, lh = linear_taps(size[0], x.shape[-2], align, sf[0])
    w0, w1, lw = linear_taps(size[1], x.shape[-1], align, sf[1])
    lh, lw = lh[:, None], lw[None, :]
    a, b = x[..., h0, :][..., w0], x[..., h0, :][..., w1]
    c, d = x[..., h1, :][..., w0], x[..., h1, :][..., w1]
    return (1 - lh) * ((1 - lw) * a + lw * b) + lh * ((1 - lw) * c + lw * d)


@pytest.mark.parametrize("size,sf", [((5, 11), None), ((18, 16), None), ((3, 4), None),
                                     (None, (1.7, 0.6))])
def test_interpolate_nearest(rng, size, sf):
    x = normal(rng, (2, 3, 9, 8))
    out = size or tuple(int(math.floor(n * s)) for n, s in zip(x.shape[2:], sf))
    sfs = sf or (None, None)
    ih = nearest_index(out[0], 9, sfs[0])
    iw = nearest_index(out[1], 8, sfs[1])
    np.testing.assert_array_equal(F.interpolate(x, size=size, scale_factor=sf),
                                  x[:, :, ih][:, :, :, iw])
    ih = nearest_index(out[0], 9, sfs[0], True)
    iw = nearest_index(out[1], 8, sfs[1], True)
    np.testing.assert_array_equal(F.interpolate(x, size, sf, mode="nearest-exact"),
                                  x[:, :, ih][:, :, :, iw])


@pytest.mark.parametrize("size,sf,align", [((5, 11), None, False), ((18, 3), None, True),
                                           ((1, 4), None, True), (None, (2.5, 0.7), False)])
def test_interpolate_bilinear(rng, size, sf, align):
    x = normal(rng, (2, 3, 9, 8))
    out = size or tuple(int(math.floor(n * s)) for n, s in zip(x.shape[2:], sf))
    close(F.interpolate(x, size, sf, mode="bilinear", align_corners=align),
          bilinear_ref(x, out, align, sf or (None, None)))


def cubic_taps(o, n, align, scale_factor=None):
    """torch's bicubic: the 4 source indices (held inside [0, n)) and Keys' weights
    (A = -0.75) per output index; the source point is not clamped, and a size kept is
    resampled like any other."""
    dst = np.arange(o, dtype=F64)
    if align:
        src = dst * ((n - 1) / (o - 1) if o > 1 else 0.0)
    else:
        src = (dst + 0.5) * (1 / scale_factor if scale_factor else n / o) - 0.5
    low = np.floor(src)
    t = src - low
    a = -0.75

    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    index = np.clip(low.astype(np.int64)[:, None] + np.arange(-1, 3), 0, n - 1)
    return index, np.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=1)


def bicubic_ref(x, size, align, sf=(None, None)):
    ih, wh = cubic_taps(size[0], x.shape[-2], align, sf[0])
    iw, ww = cubic_taps(size[1], x.shape[-1], align, sf[1])
    x = x.astype(F64)
    return np.einsum("ha,wb,...hawb->...hw", wh, ww, x[..., ih, :][..., iw])


@pytest.mark.parametrize("size,sf,align", [((11, 9), None, False), ((4, 3), None, True),
                                           ((9, 8), None, False), ((1, 13), None, True),
                                           (None, (1.7, 0.6), False), (None, (1.05, 1.0), False)])
def test_interpolate_bicubic(rng, size, sf, align):
    """Keys' cubic convolution as torch computes it (checked against torch 2.13 over 54
    cases of sizes, scale factors and align_corners, both float dtypes); a size kept by a
    scale factor (9 x 1.05) is resampled, not copied, as torch does in bicubic."""
    x = normal(rng, (2, 3, 9, 8))
    out = size or tuple(int(math.floor(n * s)) for n, s in zip(x.shape[2:], sf))
    close(F.interpolate(x, size, sf, mode="bicubic", align_corners=align),
          bicubic_ref(x, out, align, sf or (None, None)))
    x64 = x.astype(F64)
    got = F.interpolate(x64, size, sf, mode="bicubic", align_corners=align)
    assert got.dtype == F64
    np.testing.assert_allclose(got, bicubic_ref(x64, out, align, sf or (None, None)),
                               rtol=1e-12, atol=1e-12)

    @jd.compute
    def resized(X):
        return F.interpolate(X, size, sf, mode="bicubic", align_corners=align) + 1.0
    np.testing.assert_allclose(resized(x64), got + 1.0, rtol=1e-12, atol=1e-12)


def antialias_matrix(o, n, mode, scale):
    """torch's antialiased resampling of n inputs to o outputs as an (o, n) matrix: output
    i centred at scale * (i + 0.5), the filter (triangle; cubic with A = -0.5; Lanczos-3,
    sinc(t) sinc(t / 3) inside |t| < 3) stretched by scale where it shrinks, its weights
    over the inputs in reach normalised."""
    half = {"bilinear": 1.0, "bicubic": 2.0, "lanczos": 3.0}[mode]
    support, inv = (half * scale, 1 / scale) if scale >= 1 else (half, 1.0)

    def filt(t):
        t = abs(t)
        if mode == "bilinear":
            return max(1 - t, 0.0)
        if mode == "lanczos":
            return float(np.sinc(t) * np.sinc(t / 3)) if t < 3 else 0.0
        a = -0.5
        return ((a + 2) * t - (a + 3)) * t * t + 1 if t < 1 else \
            (((t - 5) * t + 8) * t - 4) * a if t < 2 else 0.0
    m = np.zeros((o, n))
    for i in range(o):
        c = scale * (i + 0.5)
        lo, hi = max(int(c - support + 0.5), 0), min(int(c + support + 0.5), n)
        w = [filt((j - c + 0.5) * inv) for j in range(lo, hi)]
        m[i, lo:hi] = np.array(w) / (sum(w) or 1.0)
    return m


@pytest.mark.parametrize("size,sf,align,mode", [
    ((5, 3), None, False, "bilinear"), ((4, 9), None, False, "bicubic"),
    ((17, 2), None, True, "bilinear"), ((3, 20), None, True, "bicubic"),
    (None, (0.3, 0.45), False, "bicubic"), (None, (0.5, 1.7), False, "bilinear"),
    ((5, 3), None, False, "lanczos"), ((25, 4), None, False, "lanczos"),
    (None, (0.3, 1.5), None, "lanczos")])
def test_interpolate_antialias(rng, size, sf, align, mode):
    """antialias=True as torch's (jitdl agreed with torch 2.13 within float rounding on
    400 random cases of sizes, scale factors, align_corners and dtypes; torch itself
    gives every row the first row's value where the width shrinks to 1 while the height
    changes: jitdl computes those rows as any other). mode='lanczos' (torch 2.14's
    Lanczos-3, antialias=True only; jitdl raised NotImplementedError) agreed likewise on
    60 random cases."""
    x = normal(rng, (2, 3, 12, 10), F64)
    out = size or tuple(int(math.floor(n * s)) for n, s in zip(x.shape[2:], sf))
    mh, mw = (antialias_matrix(o, n, mode, (n - 1) / (o - 1) if align and o > 1 else 0.0
                               if align else n / o if sf is None else 1 / s)
              for o, n, s in zip(out, x.shape[2:], sf or (None, None)))
    want = np.einsum("ha,wb,...ab->...hw", mh, mw, x)
    got = F.interpolate(x, size, sf, mode=mode, align_corners=align, antialias=True)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    close(F.interpolate(x.astype(F32), size, sf, mode=mode, align_corners=align,
                        antialias=True), want)

    @jd.compute
    def resized(X):
        return F.interpolate(X, size, sf, mode=mode, align_corners=align,
                             antialias=True) * 2.0
    np.testing.assert_allclose(resized(x), 2 * want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n, sf", [(3, 2.1), (4, 1.2), (4, 2.0), (5, 1.0), (6, 0.7)])
def test_interpolate_scale_factors_in_every_rank(rng, n, sf):
    """A scale factor that keeps a size (4 x 1.2) or doubles it (3 x 2.1): torch's nearest
    copies or halves only in 2-d, and its linear modes copy a kept size in every rank
    (found against torch 2.13)."""
    o = int(math.floor(n * sf))
    x1, x3 = normal(rng, (2, 3, n), F64), normal(rng, (1, 2, 2, 3, n), F64)
    x2 = normal(rng, (2, 3, 3, n), F64)
    for x, rank in ((x1, 1), (x2, 2), (x3, 3)):
        sfs = (1.0,) * (rank - 1) + (sf,)
        got = F.interpolate(x, scale_factor=sfs if rank > 1 else sf)
        np.testing.assert_array_equal(got, x[..., nearest_index(o, n, sf, rank=rank)])
        mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[rank]
        i0, i1, l1 = linear_taps(o, n, False, sf)
        close(F.interpolate(x, scale_factor=sfs if rank > 1 else sf, mode=mode),
              x[..., i0] * (1 - l1) + x[..., i1] * l1, F64)
    inf = np.full((1, 1, 4), np.inf)       # a copied size: inf stays inf (no 0 * inf)
    assert np.isposinf(F.interpolate(inf, scale_factor=1.2, mode="linear")).all()


def test_interpolate_linear_area_and_errors(rng):
    x = normal(rng, (2, 3, 7), F64)
    i0, i1, l1 = linear_taps(12, 7, False)
    close(F.interpolate(x, 12, mode="linear"), x[..., i0] * (1 - l1) + x[..., i1] * l1, F64)
    y = normal(rng, (1, 2, 9, 6))
    close(F.interpolate(y, (4, 3), mode="area"), adaptive_ref(y, (4, 3), np.mean))
    with pytest.raises(ValueError, match="exactly one of size and scale_factor"):
        F.interpolate(y)
    with pytest.raises(ValueError, match="needs a 4-D input"):
        F.interpolate(x, 4, mode="bilinear")
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(y, (4, 4), align_corners=True)
    with pytest.raises(ValueError, match="antialias=True is for the modes bilinear, bicubic "
                                         "and lanczos of a 4-D input"):
        F.interpolate(y, (4, 4), mode="nearest", antialias=True)
    with pytest.raises(ValueError, match="antialias=True"):
        F.interpolate(x, 4, mode="linear", antialias=True)
    # (torch 2.14's lanczos: antialiased only, align_corners=False, 4-D)
    with pytest.raises(ValueError, match="mode='lanczos' requires antialias=True"):
        F.interpolate(y, (4, 4), mode="lanczos")
    with pytest.raises(ValueError, match="mode='lanczos' does not support align_corners"):
        F.interpolate(y, (4, 4), mode="lanczos", antialias=True, align_corners=True)
    with pytest.raises(ValueError, match="mode='lanczos' needs a 4-D input"):
        F.interpolate(x, 4, mode="lanczos")
    with pytest.raises(NotImplementedError, match="'cubic'"):
        F.interpolate(y, (4, 4), mode="cubic")


def test_float_static_arguments_are_keyed_by_their_bits(rng):
    """A float static argument built afresh each call (negative_slope) keys its kernel by
    value, telling apart what == does not: 0.0 and -0.0 give results of other signs, a NaN
    finds its own kernel again, 1 and 1.0 are the same slope."""
    x = -rng.random(50) - 0.5
    for slope in (0.0, -0.0, 0.0, float("nan"), -0.0, float("nan"), 1.0, 1, 0.5, 1.0):
        got = F.leaky_relu(x, slope)
        want = np.where(x > 0, x, float(slope) * x)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_interpolate_remembered_arguments_keep_their_checks(rng):
    """interpolate remembers the checked arguments of a call (their exact types keyed):
    a later call equal to a remembered one by == but of a type the checks refuse (True
    for 1, 2.0 for a size of 2) still raises, and every argument form, repeated and
    interleaved, gives what its first call gave."""
    x = normal(rng, (2, 3, 5, 4))
    ih, iw = nearest_index(10, 5), nearest_index(8, 4)
    want2 = x[:, :, ih][:, :, :, iw]
    for _ in range(3):
        np.testing.assert_array_equal(F.interpolate(x, scale_factor=2), want2)
        np.testing.assert_array_equal(F.interpolate(x, scale_factor=2.0), want2)
        np.testing.assert_array_equal(F.interpolate(x, scale_factor=[2, 2.0]), want2)
        np.testing.assert_array_equal(F.interpolate(x, size=[10, 8]), want2)
        np.testing.assert_array_equal(F.interpolate(x, size=(10, 8)), want2)
        np.testing.assert_array_equal(F.interpolate(x, scale_factor=np.float64(2)), want2)
        np.testing.assert_array_equal(F.interpolate(x, size=1), x[:, :, :1, :1])
        np.testing.assert_array_equal(F.interpolate(x, scale_factor=1), x)
        close(F.interpolate(x, scale_factor=2, mode="bilinear"),
              bilinear_ref(x, (10, 8), False, (2.0, 2.0)))
        close(F.interpolate(x, size=(10, 8), mode="bilinear", align_corners=True),
              bilinear_ref(x, (10, 8), True))
        with pytest.raises(TypeError, match="size must be an int"):
            F.interpolate(x, size=True)
        with pytest.raises(TypeError, match="size must be an int"):
            F.interpolate(x, size=(10, 8.0))
        with pytest.raises(TypeError, match="scale_factor must be a number"):
            F.interpolate(x, scale_factor=True)
        with pytest.raises(TypeError, match="scale_factor must be a number"):
            F.interpolate(x, scale_factor=(2, True))
        with pytest.raises(ValueError, match="align_corners"):
            F.interpolate(x, scale_factor=2, align_corners=False)
        # (another shape: its own checks)
        with pytest.raises(ValueError, match="needs a 4-D input"):
            F.interpolate(x[0], scale_factor=2, mode="bilinear")
        y = normal(rng, (1, 3, 5, 4))
        np.testing.assert_array_equal(F.interpolate(y, scale_factor=2),
                                      y[:, :, ih][:, :, :, iw])


def test_interpolate_area_3d_of_a_tiny_volume_compiles(rng):
    """A fully unrolled 3-d area pool (5x2x2 to 4x3x3, float32): LLVM's SLP vectoriser
    made a use before its definition here and code generation aborted the process;
    the optimiser's output is now verified and optimised again without SLP."""
    x = normal(rng, (1, 1, 5, 2, 2), F32)
    want = np.zeros((1, 1, 4, 3, 3))
    for i, j, k in itertools.product(range(4), range(3), range(3)):
        sl = tuple(slice(a * n // o, -(-(a + 1) * n // o)) for a, n, o in
                   zip((i, j, k), (5, 2, 2), (4, 3, 3)))
        want[0, 0, i, j, k] = x[(0, 0) + sl].astype(F64).mean()
    close(F.interpolate(x, size=(4, 3, 3), mode="area"), want)


# -- embedding and attention ---------------------------------------------------------------
@pytest.mark.parametrize("norm_type", [2.0, 1.0, np.inf, 3.0])
def test_embedding_max_norm(rng, norm_type):
    """max_norm: the rows input reads whose norm is over it come out scaled by
    max_norm / (norm + 1e-7), and a NumPy weight is renormalised in place, as torch does
    (checked against torch 2.13: these norms, 0.5, an empty input, float32 and float64);
    inside a definition only the result is scaled."""
    for dt in (F64, F32):
        w = normal(rng, (10, 4), dt) * 2
        ids = rng.integers(0, 7, (3, 5))          # rows 7..9 are not read: kept
        before = w.copy()
        norms = np.linalg.norm(before.astype(F64), ord=norm_type, axis=1)
        scale = np.where(norms > 1.5, 1.5 / (norms + 1e-7), 1.0)[:, None]
        want = before.astype(F64) * scale
        tol = dict(rtol=1e-12, atol=1e-12) if dt == F64 else dict(rtol=2e-6, atol=2e-6)
        got = F.embedding(ids, w, max_norm=1.5, norm_type=norm_type)
        assert got.dtype == dt
        np.testing.assert_allclose(got, want[ids], **tol)
        read = np.isin(np.arange(10), ids)
        np.testing.assert_allclose(w[read], want[read], **tol)
        np.testing.assert_array_equal(w[~read], before[~read])

        @jd.compute
        def looked_up(I, W):
            return F.embedding(I, W, max_norm=1.5, norm_type=norm_type) + 1.0
        np.testing.assert_allclose(looked_up(ids, before), want[ids] + 1.0, **tol)
    with pytest.raises(TypeError, match="floating-point weight"):
        F.embedding(ids, np.arange(40).reshape(10, 4), max_norm=1.0)


def test_embedding_max_norm_writes_back_the_rows_it_returns():
    """The weight renormalised in place holds the rows the result has: float32 rows whose
    float32 norm overflows to inf come out as 0, as torch 2.13 gives them, and torch
    leaves them 0 in weight too (a norm computed again in float64 scaled them to norm
    max_norm in weight, unlike the result); a row of norm NaN is kept, as torch."""
    w = np.array([[3e20, 4e20], [0.3, 0.4], [6.0, 8.0], [np.nan, 1.0]], dtype=F32)
    ids = np.array([[0, 2], [2, 0], [3, 0]])
    got = F.embedding(ids, w, max_norm=1.0)
    np.testing.assert_array_equal(got[0, 0], [0.0, 0.0])
    np.testing.assert_array_equal(got, w[ids])
    np.testing.assert_array_equal(w[0], [0.0, 0.0])
    np.testing.assert_allclose(w[2], [0.6, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(w[1], np.array([0.3, 0.4], F32))
    assert np.isnan(w[3, 0]) and w[3, 1] == 1.0


def test_embedding(rng):
    w = normal(rng, (10, 4))
    ids = rng.integers(0, 10, (3, 5))
    np.testing.assert_array_equal(F.embedding(ids, w), w[ids])
    np.testing.assert_array_equal(F.embedding(ids.astype(np.int32), w, padding_idx=0), w[ids])
    bad = ids.copy()
    bad[1, 2] = 10
    with pytest.raises(IndexError):
        F.embedding(bad, w)
    bad[1, 2] = -1
    with pytest.raises(IndexError):
        F.embedding(bad, w)
    with pytest.raises(TypeError, match="integer indices"):
        F.embedding(ids.astype(F32), w)


def attention_ref(q, k, v, mask=None, causal=False, scale=None):
    q, k, v = q.astype(F64), k.astype(F64), v.astype(F64)
    s = q @ np.swapaxes(k, -1, -2) * (scale or 1 / np.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return softmax_ref(s, -1) @ v


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask"])
def test_attention(rng, case):
    q, k, v = normal(rng, (2, 3, 5, 8)), normal(rng, (2, 3, 7, 8)), normal(rng, (2, 3, 7, 6))
    mask = None
    if case == "bool_mask":
        mask = rng.random((5, 7)) > 0.3
        mask[:, 0] = True
    elif case == "float_mask":
        mask = normal(rng, (3, 1, 7))
    kw = dict(attn_mask=mask, is_causal=case == "causal", scale=0.3 if mask is None else None)
    close(F.scaled_dot_product_attention(q, k, v, **kw), attention_ref(q, k, v, mask,
                                                                       kw["is_causal"],
                                                                       kw["scale"]), k=8)


@pytest.mark.parametrize("heads", [(8, 2), (6, 3), (4, 1), (4, 4)])
def test_attention_with_shared_key_value_heads(rng, heads):
    """enable_gqa: key and value of fewer heads than the query, each shared by Hq / Hkv
    consecutive query heads (torch's repeat_interleave), also causal and under a mask,
    and fused inside a definition."""
    hq, hk = heads
    q, k, v = normal(rng, (2, hq, 5, 8)), normal(rng, (2, hk, 7, 8)), normal(rng, (2, hk, 7, 6))
    kk, vv = np.repeat(k, hq // hk, axis=-3), np.repeat(v, hq // hk, axis=-3)
    for kw in ({}, {"is_causal": True}, {"attn_mask": normal(rng, (hq, 1, 7))}):
        close(F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kw),
              attention_ref(q, kk, vv, kw.get("attn_mask"), kw.get("is_causal", False)), k=8)

    @jd.compute
    def scaled(Q, K, V):
        return F.scaled_dot_product_attention(Q, K, V, enable_gqa=True) * 2.0
    close(scaled(q, k, v), 2 * attention_ref(q, kk, vv), k=8)
    if hk not in (hq, 1):
        with pytest.raises(ValueError, match="broadcast"):        # without enable_gqa
            F.scaled_dot_product_attention(q, k, v)
    # key's and value's head counts need not be equal, each dividing the query's (as
    # torch; a value of hq heads beside a key of hk was refused)
    v_all = normal(rng, (2, hq, 7, 6))
    close(F.scaled_dot_product_attention(q, k, v_all, enable_gqa=True),
          attention_ref(q, kk, v_all), k=8)
    k1 = normal(rng, (2, 1, 7, 8))
    close(F.scaled_dot_product_attention(q, k1, v, enable_gqa=True),
          attention_ref(q, np.repeat(k1, hq, axis=-3), vv), k=8)
    with pytest.raises(ValueError, match=r"each divide the query's; got query \(2, 5, 5, 8\)"):
        F.scaled_dot_product_attention(q[:, :5] if hq > 5 else normal(rng, (2, 5, 5, 8)),
                                       normal(rng, (2, 2, 7, 8)), normal(rng, (2, 2, 7, 6)),
                                       enable_gqa=True)


def test_attention_in_a_dynamic_definition(rng):
    """In a dynamic definition query's and key's E (and key's and value's S) are sizes of
    their own, checked equal at the call (they were refused at definition); the default
    scale 1 / sqrt(E) is computed from the call's E (1 where E is 0, as torch)."""
    @jd.compute(dynamic=True)
    def att(Q, K, V):
        return F.scaled_dot_product_attention(Q, K, V)
    for b, L, S, E, Ev in [(2, 5, 7, 8, 4), (3, 9, 2, 4, 5), (2, 3, 3, 16, 16)]:
        q, k, v = normal(rng, (b, L, E), F64), normal(rng, (b, S, E), F64), \
            normal(rng, (b, S, Ev), F64)
        np.testing.assert_allclose(att(q, k, v), attention_ref(q, k, v), rtol=1e-12)
        q32, k32, v32 = (x.astype(F32) for x in (q, k, v))
        close(att(q32, k32, v32), attention_ref(q, k, v), k=8)
    assert len(att.cache_info()["events"]) <= 2          # one per dtype
    with pytest.raises(ValueError, match="'Q' has size 8 in dimension 2 but argument 'K' has "
                                         "size 6"):
        att(normal(rng, (2, 5, 8), F64), normal(rng, (2, 7, 6), F64), normal(rng, (2, 7, 4), F64))
    v = normal(rng, (2, 7, 4), F64)
    np.testing.assert_allclose(att(np.zeros((2, 5, 0)), np.zeros((2, 7, 0)), v),
                               np.broadcast_to(v.mean(1, keepdims=True), (2, 5, 4)), rtol=1e-12)


def test_softmax_without_dim_takes_torchs_implicit_choice(rng):
    """No dim: torch's deprecated choice (axis 0 of a 0-d, 1-d or 3-d input, else axis 1)
    with its UserWarning, pointing at the caller's line."""
    for nd in range(5):
        x = normal(rng, (2, 3, 4, 5)[:nd], F64)
        want = 0 if nd in (0, 1, 3) else 1
        for f in (F.softmax, F.log_softmax):
            with pytest.warns(UserWarning, match=f"Implicit dimension choice for {f.__name__} "
                                                 "has been deprecated") as w:
                got = f(x)
            assert w[0].filename == __file__
            np.testing.assert_array_equal(got, f(x, dim=want))


def test_softmax_of_a_0d_input():
    """torch: a 0-d tensor is its own row (dim 0 or -1): 1 and 0, NaN for inf and NaN."""
    for v, want in ((3.0, 1.0), (-np.inf, np.nan), (np.nan, np.nan)):
        np.testing.assert_equal(F.softmax(np.array(v), dim=0), want)
        np.testing.assert_equal(F.log_softmax(np.array(v, F32), dim=-1),
                                np.float32(want - 1.0 if want == want else want))
    with pytest.raises(IndexError):
        F.softmax(np.array(1.0), dim=1)


def test_attention_fully_masked_rows_are_zero(rng):
    """A query whose every key is masked (a bool row of False, a float row of -inf) gives
    0, as torch does, not a softmax's NaN; the other rows are the reference's."""
    q, k, v = normal(rng, (2, 4, 8)), normal(rng, (2, 6, 8)), normal(rng, (2, 6, 3))
    mask = rng.random((4, 6)) > 0.4
    mask[:, 1] = True
    mask[2] = False
    fmask = np.where(mask, 0.0, -np.inf).astype(F32)
    with np.errstate(invalid="ignore"):         # (the reference's NaN row)
        ref = attention_ref(q, k, v, mask)
    for m in (mask, fmask):
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
        assert np.all(out[:, 2] == 0)
        keep = [0, 1, 3]
        close(out[:, keep], ref[:, keep], k=8)


@jd.compute
def _attention_dropout(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V, dropout_p=0.5)


@pytest.mark.parametrize("p", [0.3, 1.0])
def test_attention_dropout_drops_weights_with_numpys_generator(rng, p):
    """dropout_p > 0: torch's dropout of the attention weights (each kept with probability
    1 - p, scaled by 1 / (1 - p)), drawn from NumPy's global generator, so np.random.seed
    repeats a call; with gqa the draw has the query's heads. Refused inside a definition
    (a kernel draws no random numbers)."""
    q, k, v = normal(rng, (2, 4, 5, 8), F64), normal(rng, (2, 2, 7, 8), F64), \
        normal(rng, (2, 2, 7, 3), F64)
    mask = rng.random((5, 7)) > 0.3
    mask[:, 0] = True
    np.random.seed(7)
    got = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                         enable_gqa=True)
    np.random.seed(7)
    keep = (np.random.random_sample((2, 4, 5, 7)) >= p) / (1 - p) if p < 1 else 0.0
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    s = q @ np.swapaxes(kk, -1, -2) / np.sqrt(8)
    want = (softmax_ref(np.where(mask, s, -np.inf), -1) * keep) @ vv
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    if p < 1:
        assert not np.allclose(got, attention_ref(q, kk, vv, mask))
    with pytest.raises(jd.errors.ArgumentError, match="inside a definition"):
        _attention_dropout(q, q, q)


def test_attention_errors(rng):
    q = normal(rng, (2, 4, 8))
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=p)
    with pytest.raises(ValueError, match="key's last dimension"):
        F.scaled_dot_product_attention(q, normal(rng, (2, 4, 7)), q)
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, q, q, np.ones((4, 4), bool), is_causal=True)
    # torch: bool, float32 or q's dtype
    for m in (np.zeros((4, 4)), np.ones((4, 4), np.int32)):
        with pytest.raises(TypeError, match="attn_mask must be bool, float32 or of the "
                                            "query's dtype"):
            F.scaled_dot_product_attention(q, q, q, m)
    # torch refuses integer (and bool) query, key and value; an int8 q @ k^T wrapped
    # around, a result 9 off the exact one
    ints = rng.integers(-9, 9, (2, 4, 8)).astype(np.int8)
    for args, what in (((ints, ints, ints), "query"), ((q, ints, q), "key"),
                       ((q, q, ints > 0), "value")):
        with pytest.raises(jd.errors.ArgumentError, match=re.escape(
                f"scaled_dot_product_attention(): {what} must be float32 or float64, as "
                f"torch requires, got {args[('query', 'key', 'value').index(what)].dtype}")):
            F.scaled_dot_product_attention(*args)


# -- inside definitions --------------------------------------------------------------------
def test_linear_gelu_fuse_in_a_definition(rng):
    @jd.compute
    def mlp(X, W, b):
        return F.gelu(F.linear(X, W, b), approximate="tanh")

    before = eager.cache_info()
    x, w, b = normal(rng, (6, 10)), normal(rng, (7, 10)), normal(rng, (7,))
    h = x.astype(F64) @ w.T.astype(F64) + b
    ref = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    close(mlp(x, w, b), ref, k=10)
    assert eager.cache_info() == before     # stages of mlp's kernel, no kernels of their own


def test_conv_pool_softmax_in_a_definition(rng):
    @jd.compute
    def net(X, W):
        y = F.relu(F.conv2d(X, W, padding=1))
        return F.log_softmax(F.adaptive_avg_pool2d(F.max_pool2d(y, 2), 1), dim=1)

    x, w = normal(rng, (2, 3, 8, 8)), normal(rng, (5, 3, 3, 3))
    y = max_pool_ref(np.maximum(conv_ref(x, w, pad=1), 0), 2, 2, 0, 1, False)
    z = y.mean((2, 3), keepdims=True)
    close(net(x, w), np.log(softmax_ref(z, 1)), k=27)


def test_every_function_has_a_status_and_a_docstring():
    assert sorted(F.STATUS) == sorted(F.__all__)
    for name in F.__all__:
        assert getattr(F, name).__doc__, name
        assert F.STATUS[name].startswith(("done", "partial: ")), name


def test_norms_in_dynamic_definitions(rng):
    """layer_norm and rms_norm over the input's symbolic trailing sizes: one kernel for
    every shape, float64 against NumPy; a weight of another length fails at the call."""
    @jd.compute(dynamic=True)
    def ln(X, W, B):
        return F.layer_norm(X, X.shape[-1:], W, B, eps=1e-3)

    @jd.compute(dynamic=True)
    def rms(X, W):
        return F.rms_norm(X, X.shape[-2:], W, eps=1e-4)
    for n, m in [(3, 5), (8, 17), (2, 64)]:
        x, w, b = rng.standard_normal((n, m)), rng.standard_normal(m), rng.standard_normal(m)
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        np.testing.assert_allclose(ln(x, w, b), (x - mu) / np.sqrt(var + 1e-3) * w + b,
                                   rtol=1e-12, atol=1e-12)
        x3, w2 = rng.standard_normal((2, n, m)), rng.standard_normal((n, m))
        ms = (x3 * x3).mean((-2, -1), keepdims=True)
        np.testing.assert_allclose(rms(x3, w2), x3 / np.sqrt(ms + 1e-4) * w2,
                                   rtol=1e-12, atol=1e-12)
    assert len(ln.cache_info()["events"]) == 1 and len(rms.cache_info()["events"]) == 1
    with pytest.raises(jd.errors.ArgumentError, match="shape mismatch"):
        ln(rng.standard_normal((3, 5)), rng.standard_normal(6), rng.standard_normal(5))


def test_convolution_and_pooling_in_dynamic_definitions_say_what_to_do(rng):
    """Convolutions, pooling and interpolate (whose message was NumPy's "setting an array
    element with a sequence") specialise on shapes: on operands of run-time sizes they
    raise an error naming the op, the operand and the way out, not one from deep in the
    builder; with the operands left out of dynamic= they compile as usual."""
    x = rng.standard_normal((1, 3, 8, 8))
    w = rng.standard_normal((4, 3, 3, 3))
    for call, what in [(lambda X, W: F.conv2d(X, W, padding=1), "conv2d(): input"),
                       (lambda X, W: F.conv_transpose2d(X, W.transpose(1, 0, 2, 3)),
                        "conv_transpose2d(): input"),
                       (lambda X, W: F.max_pool2d(X, 2), "max_pool2d(): input"),
                       (lambda X, W: F.avg_pool2d(X, 2), "avg_pool2d(): input"),
                       (lambda X, W: F.adaptive_avg_pool2d(X, 2), "adaptive_avg_pool2d(): input"),
                       (lambda X, W: F.interpolate(X, 4, mode="bilinear"), "interpolate(): input"),
                       (lambda X, W: F.interpolate(X, 4), "interpolate(): input")]:
        def definition(X, W):
            return call(X, W)
        f = jd.compute(definition, dynamic=True)
        with pytest.raises(jd.errors.ArgumentError, match=re.escape(what) + ".*dynamic="):
            f(x, w)
    def conv_plus(X, W, B):
        return F.conv2d(X, W, padding=1) * jd.numpy.sum(B)
    g = jd.compute(conv_plus, dynamic=("B",))
    for n in (1, 3, 5):
        b = rng.standard_normal(n)
        np.testing.assert_allclose(g(x, w, b), F.conv2d(x, w, padding=1) * b.sum(), rtol=1e-12)


def test_activations_and_softmax_compile_once_over_many_sizes():
    """Elementwise activations and softmax/log_softmax use symbolic extents: one kernel
    per dtype, rank and size-1 pattern, checked against NumPy at every size."""
    from jitdl import eager
    rng = np.random.default_rng(11)
    eager.clear()
    for n in range(2, 60, 3):
        x = rng.standard_normal((3, n))
        e = np.exp(x - x.max(axis=1, keepdims=True))
        np.testing.assert_allclose(jd.nn.softmax(x, dim=1), e / e.sum(axis=1, keepdims=True),
                                   rtol=1e-12)
        np.testing.assert_allclose(jd.nn.log_softmax(x, dim=0),
                                   x - np.log(np.exp(x).sum(axis=0, keepdims=True)),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(jd.nn.silu(x), x / (1 + np.exp(-x)), rtol=1e-12)
    counts = {k: v["kernels"] for k, v in eager.cache_info().items()}
    assert counts == {"softmax": 1, "log_softmax": 1, "silu": 1}, counts


def test_norms_compile_once_per_normalized_shape_and_keep_float32():
    """layer_norm and rms_norm on arrays use symbolic extents: one kernel per
    normalized_shape (a static argument) over many leading sizes; float32 stays float32
    (a count over symbolic sizes once promoted the mean to float64); batch_norm too."""
    from jitdl import eager
    rng = np.random.default_rng(12)
    eager.clear()
    for n in (2, 5, 17, 64):
        for dt, tol in ((np.float64, 1e-12), (np.float32, 2e-5)):
            x = rng.standard_normal((n, 3, 8)).astype(dt)
            w, b = rng.standard_normal(8).astype(dt), rng.standard_normal(8).astype(dt)
            x64 = x.astype(np.float64)
            mu, var = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
            got = F.layer_norm(x, (8,), w, b)
            assert got.dtype == dt
            np.testing.assert_allclose(got, (x64 - mu) / np.sqrt(var + 1e-5) * w + b,
                                       rtol=tol, atol=tol)
            w2 = rng.standard_normal((3, 8)).astype(dt)
            got = F.rms_norm(x, (3, 8), w2, eps=1e-6)
            ms = (x64 * x64).mean((-2, -1), keepdims=True)
            assert got.dtype == dt
            np.testing.assert_allclose(got, x64 / np.sqrt(ms + 1e-6) * w2, rtol=tol, atol=tol)
            rm, rv = rng.standard_normal(3).astype(dt), (rng.random(3) + 0.5).astype(dt)
            got = F.batch_norm(x, rm, rv, w[:3], b[:3], eps=1e-3)
            assert got.dtype == dt
            np.testing.assert_allclose(
                got, (x64 - rm[:, None]) / np.sqrt(rv[:, None] + 1e-3) * w[:3, None]
                + b[:3, None], rtol=tol, atol=tol)
    counts = {k: v["kernels"] for k, v in eager.cache_info().items()}
    assert counts == {"layer_norm": 2, "rms_norm": 2, "batch_norm": 2}, counts
    with pytest.raises(jd.errors.ShapeError, match="normalized_shape"):
        F.layer_norm(rng.standard_normal((4, 9)), (8,))


def test_softmax_over_an_empty_axis_is_empty():
    """torch's softmax/log_softmax of an empty dim is an empty tensor (no max to take)."""
    for shape, dim in [((3, 0), 1), ((0,), 0), ((2, 0, 3), -2), ((0, 3), 1)]:
        for fn in (F.softmax, F.log_softmax):
            r = fn(np.ones(shape, np.float32), dim=dim)
            assert r.shape == shape and r.dtype == np.float32


def test_max_pool_padding_is_at_most_half_the_kernel_not_the_dilated_one(rng):
    """torch 2.13 checks padding <= kernel_size // 2 whatever the dilation (max_pool1d and
    max_pool2d, with or without return_indices); a padding allowed by the dilated kernel's
    width alone gave a window wholly in the padding: -inf, silently."""
    x = normal(rng, (1, 2, 9, 9))
    for k, d, p in [(3, 2, 2), (2, 3, 2), (2, 5, 3)]:
        for ri in (False, True):
            with pytest.raises(jd.errors.ShapeError, match=r"padding should be at most half "
                               r"of the kernel size, got padding=\(%d, %d\)" % (p, p)):
                F.max_pool2d(x, k, 1, p, d, return_indices=ri)
            with pytest.raises(jd.errors.ShapeError, match="at most half"):
                F.max_pool1d(x[0], k, 1, p, d, return_indices=ri)
    # the largest padding allowed, dilated
    close(F.max_pool2d(x, 3, 1, 1, 2), max_pool_ref(x, 3, 1, 1, 2, False))
    close(F.max_pool2d(x, 2, 2, 1, 3, True), max_pool_ref(x, 2, 2, 1, 3, True))


def test_max_pool_of_bools_is_any_over_the_window(rng):
    """Bool input: max is logical or, padding False (it raised NumPy's 'Invalid integer
    data type' from the padding value, np.iinfo(bool))."""
    x = rng.random((2, 3, 5, 6)) > 0.7
    y = F.max_pool2d(x, 2, 1, 1)
    assert y.dtype == np.bool_
    np.testing.assert_array_equal(y, max_pool_ref(x.astype(F64), 2, 1, 1, 1, False) > 0)
    y, idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(y, max_pool_ref(x.astype(F64), 3, 2, 1, 1, False) > 0)
    assert np.all(x.reshape(2, 3, -1)[np.arange(2)[:, None, None, None],
                                      np.arange(3)[None, :, None, None], idx] == y)
    np.testing.assert_array_equal(F.adaptive_max_pool2d(x, (2, 4)),
                                  adaptive_ref(x, (2, 4), np.max) > 0)


@pytest.mark.parametrize("fn,n", [(F.adaptive_avg_pool2d, 2), (F.adaptive_max_pool2d, 2),
                                  (F.adaptive_avg_pool1d, 1)])
def test_adaptive_pool_of_an_empty_spatial_dimension_raises(fn, n):
    """torch raises for an empty spatial size; the mean was NaN, silently, and the max an
    internal 'max over an empty range' error. An empty batch stays fine."""
    shape = (1, 2) + (0, 4)[:n]
    with pytest.raises(jd.errors.ShapeError, match=re.escape(
            f"expected input with non-zero spatial sizes, got shape {shape}")):
        fn(np.ones(shape, F32), 2)
    assert fn(np.ones((0, 2) + (3, 4)[:n], F32), 2).shape == (0, 2) + (2, 2)[:n]


def test_argument_errors_name_what_the_argument_takes_and_the_value_given(rng):
    """An int-only argument says 'an int' (softmax's dim=(0, 1) was told it 'must be an int
    or a tuple of ints, got tuple (0, 1)'); a tuple argument shows the whole value, not the
    entry that failed; a bool is no int, as torch says (stride=True ran with stride 1)."""
    x = normal(rng, (2, 3, 6, 6))
    w = normal(rng, (2, 3, 2, 2))
    cases = [
        (lambda: F.softmax(x, dim=(0, 1)), "softmax(): dim must be an int, got tuple (0, 1)"),
        (lambda: F.log_softmax(x, dim=True), "log_softmax(): dim must be an int, got bool"),
        (lambda: F.avg_pool2d(x, 2, divisor_override=2.5),
         "divisor_override must be an int, got float 2.5"),
        (lambda: F.conv2d(x, w, groups=1.0), "groups must be an int, got float 1.0"),
        (lambda: F.conv2d(x, w, padding=((1, 2), (1, 2))),
         "padding must be an int or a tuple of 2 ints, got tuple ((1, 2), (1, 2))"),
        (lambda: F.conv2d(x, w, stride=True), "stride must be an int or a tuple of 2 ints, "
                                              "got bool True"),
        (lambda: F.max_pool2d(x, (2, 2.0)), "kernel_size must be an int or a tuple of 2 "
                                            "ints, got tuple (2, 2.0)"),
        (lambda: F.adaptive_avg_pool2d(x, (2, 2.5)),
         "output_size must be an int or a tuple of 2 ints or None, got tuple (2, 2.5)"),
        (lambda: F.layer_norm(x, (6, 6.0)),
         "normalized_shape must be an int or a tuple of ints, got tuple (6, 6.0)"),
    ]
    for call, message in cases:
        with pytest.raises(jd.errors.ArgumentError, match=re.escape(message)):
            call()
    # numpy integers are ints
    close(F.softmax(x, dim=np.int32(1)), F.softmax(x, dim=1))
    assert F.conv2d(x, w, stride=np.int64(2)).shape == (2, 2, 3, 3)


def test_empty_normalized_shape_and_empty_kernel_say_so(rng):
    """torch: 'normalized_shape to be at least 1-dimensional' (jitdl said it expected input
    of shape '(*, )'); a convolution kernel of size 0 raises (it returned a sum over nothing,
    zeros, where torch says 'kernel size should be greater than zero')."""
    x = normal(rng, (2, 3, 5, 5))
    for fn in (F.layer_norm, F.rms_norm):
        with pytest.raises(jd.errors.ShapeError,
                           match=re.escape("normalized_shape must have at least one entry, "
                                           "got ()")):
            fn(x, ())
    for call, shape in [(lambda: F.conv2d(x, np.ones((4, 3, 0, 2), F32)), (4, 3, 0, 2)),
                        (lambda: F.conv1d(x[0], np.ones((4, 3, 0), F32)), (4, 3, 0)),
                        (lambda: F.conv_transpose2d(x, np.ones((3, 2, 2, 0), F32)),
                         (3, 2, 2, 0))]:
        with pytest.raises(jd.errors.ShapeError, match=re.escape(
                f"kernel size must be positive, got weight of shape {shape}")):
            call()


def test_attention_float32_mask_on_float64_and_an_empty_embedding(rng):
    """torch takes a float32 attn_mask beside float64 queries (bool, float32 or the query's
    dtype; jitdl refused it, saying torch requires the query's dtype); E = 0 scores every
    key 0, torch's uniform weights (jitdl raised ZeroDivisionError from 1 / sqrt(0))."""
    q, k, v = normal(rng, (2, 5, 4), F64), normal(rng, (2, 6, 4), F64), normal(rng, (2, 6, 3), F64)
    m = normal(rng, (5, 6), F32)
    s = q @ k.transpose(0, 2, 1) / 2 + m.astype(F64)
    p = np.exp(s - s.max(-1, keepdims=True))
    close(F.scaled_dot_product_attention(q, k, v, attn_mask=m),
          (p / p.sum(-1, keepdims=True)) @ v, F64)
    empty = np.zeros((2, 5, 0), F64)
    close(F.scaled_dot_product_attention(empty, np.zeros((2, 6, 0)), v),
          np.broadcast_to(v.mean(1, keepdims=True), (2, 5, 3)), F64)


def test_interpolate_errors_torch_raises(rng):
    """Inputs torch refuses, which jitdl took: a 4-D spatial input (6-D, nearest, though
    the message said 1 to 3), size=[8] for two spatial dimensions (torch repeats an int,
    never a one-entry list), recompute_scale_factor with an explicit size; and an empty
    spatial size (an internal 'can read outside input' error)."""
    x = normal(rng, (1, 2, 4, 4))
    cases = [
        (lambda: F.interpolate(normal(rng, (1, 1, 2, 2, 2, 2)), size=4),
         "with 1 to 3 spatial dimensions, got shape (1, 1, 2, 2, 2, 2)"),
        (lambda: F.interpolate(x, size=[8]), "size must be an int or a tuple of 2 ints"),
        (lambda: F.interpolate(x, size=8, recompute_scale_factor=True),
         "recompute_scale_factor is not meaningful with an explicit size"),
        (lambda: F.interpolate(np.ones((1, 2, 0, 4), F32), size=8),
         "spatial sizes must be positive, got shape (1, 2, 0, 4)"),
        (lambda: F.interpolate(np.ones((1, 2, 0, 4), F32), size=8, mode="bilinear"),
         "spatial sizes must be positive"),
    ]
    for call, message in cases:
        with pytest.raises(jd.errors.ShapeError, match=re.escape(message)):
            call()
    close(F.interpolate(x, size=(8, 8)), F.interpolate(x, size=8))
    assert F.interpolate(normal(rng, (1, 2, 4)), size=[8]).shape == (1, 2, 8)
    assert F.interpolate(x, scale_factor=2, recompute_scale_factor=True).shape == (1, 2, 8, 8)


def test_attention_mask_never_widens_the_batch_and_errors_name_the_operands(rng):
    """A mask of 3 batches beside queries of 1: torch raises (the output's shape doesn't
    match the broadcast shape); jitdl read the mask's first batch alone, silently, or (with
    no query batch) raised an internal 'can read outside attn_mask'. Batch dimensions that
    don't broadcast name query, key and value."""
    k, v = normal(rng, (1, 6, 4), F64), normal(rng, (1, 6, 3), F64)
    m = rng.random((3, 5, 6)) > 0.2
    for q in (normal(rng, (1, 5, 4), F64), normal(rng, (5, 4), F64)):
        with pytest.raises(jd.errors.ShapeError, match=re.escape(
                "attn_mask of shape (3, 5, 6) must broadcast to the attention scores' shape "
                f"{(1, 5, 6) if q.ndim == 3 else (5, 6)}")):
            F.scaled_dot_product_attention(q, k[0] if q.ndim == 2 else k,
                                           v[0] if q.ndim == 2 else v, attn_mask=m)
    with pytest.raises(jd.errors.ShapeError, match=re.escape(
            "batch dimensions (all but the last two) of query (2, 4, 5, 4), key (2, 2, 6, 4) "
            "and value (2, 2, 6, 3) do not broadcast")):
        F.scaled_dot_product_attention(normal(rng, (2, 4, 5, 4)), normal(rng, (2, 2, 6, 4)),
                                       normal(rng, (2, 2, 6, 3)))
    # masks that do broadcast: per batch, per key, per query
    q = normal(rng, (2, 5, 4), F64)
    k, v = normal(rng, (2, 6, 4), F64), normal(rng, (2, 6, 3), F64)
    for ms in [(2, 1, 6), (1, 6), (5, 1), (2, 5, 6)]:
        mask = normal(rng, ms, F64)
        s = q @ k.transpose(0, 2, 1) / 2 + mask
        p = np.exp(s - s.max(-1, keepdims=True))
        close(F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
              (p / p.sum(-1, keepdims=True)) @ v, F64)


def test_adaptive_output_size_zero_one_entry_lists_and_1d_none(rng):
    """As torch 2.14: an output size of 0 is an empty result (adaptive pooling and area
    interpolation raised 'must be positive'); 2-d pooling refuses a one-entry list or
    tuple (it repeated it) and 1-d pooling refuses None (it kept the length); a negative
    size still raises."""
    x = normal(rng, (2, 3, 6, 6))
    assert F.adaptive_avg_pool2d(x, (0, 3)).shape == (2, 3, 0, 3)
    y, idx = F.adaptive_max_pool2d(x, 0, return_indices=True)
    assert (y.shape, y.dtype, idx.shape, idx.dtype) == ((2, 3, 0, 0), F32, (2, 3, 0, 0),
                                                        np.int64)
    assert F.adaptive_avg_pool2d(x, (None, 0)).shape == (2, 3, 6, 0)
    assert F.adaptive_avg_pool1d(x[0], 0).shape == (3, 6, 0)
    assert F.interpolate(x, size=(2, 0), mode="area").shape == (2, 3, 2, 0)
    assert F.interpolate(x, scale_factor=0.1, mode="area").shape == (2, 3, 0, 0)
    close(F.interpolate(x, scale_factor=(1 / 3, 0.5), mode="area"),
          adaptive_ref(x, (2, 3), np.mean))

    @jd.compute
    def pooled(X):
        return F.adaptive_avg_pool2d(X, (0, 2))
    assert pooled(x).shape == (2, 3, 0, 2)
    for out in ((3,), [3]):
        with pytest.raises(jd.errors.ShapeError, match=re.escape(
                f"output_size must be an int or a tuple of 2, got {out!r}")):
            F.adaptive_avg_pool2d(x, out)
        with pytest.raises(jd.errors.ShapeError, match="output_size must be an int or a"):
            F.adaptive_max_pool2d(x, out)
    close(F.adaptive_avg_pool1d(x[0], [3]), F.adaptive_avg_pool1d(x[0], 3))
    for out in (None, (None,)):
        with pytest.raises(jd.errors.ArgumentError, match="output_size must be an int or a "
                                                          "tuple of 1 ints, got"):
            F.adaptive_avg_pool1d(x[0], out)
    with pytest.raises(jd.errors.ShapeError, match=re.escape(
            "output_size must be non-negative, got (-1, -1)")):
        F.adaptive_avg_pool2d(x, -1)
    with pytest.raises(jd.errors.ShapeError, match="size must be non-negative"):
        F.interpolate(x, size=-1, mode="area")


def test_pooling_and_interpolate_of_an_empty_channel_dimension_raise(rng):
    """torch pools and resamples an empty batch but raises for zero channels (jitdl
    returned an empty result); area interpolation, torch's adaptive average pooling,
    takes both."""
    calls = [(lambda x: F.max_pool2d(x, 2), ((2, 0, 6, 6), (0, 6, 6))),
             (lambda x: F.avg_pool2d(x, 2), ((2, 0, 6, 6), (0, 6, 6))),
             (lambda x: F.max_pool2d(x, 2, return_indices=True), ((2, 0, 6, 6),)),
             (lambda x: F.interpolate(x, size=3), ((2, 0, 6, 6),)),
             (lambda x: F.interpolate(x, size=3, mode="bilinear"), ((2, 0, 6, 6),))]
    for fn, shapes in calls:
        for shape in shapes:
            with pytest.raises(jd.errors.ShapeError, match=re.escape(
                    "expected input with non-zero channels (only the batch dimension may be "
                    f"empty), got shape {shape}")):
                fn(np.ones(shape, F32))
    for shape in ((2, 0, 6), (0, 6)):
        with pytest.raises(jd.errors.ShapeError, match="non-zero channels"):
            F.avg_pool1d(np.ones(shape, F32), 2)
    assert F.max_pool2d(np.ones((0, 3, 6, 6), F32), 2).shape == (0, 3, 3, 3)
    assert F.interpolate(np.ones((0, 3, 6, 6), F32), size=3, mode="bilinear").shape == \
        (0, 3, 3, 3)
    assert F.interpolate(np.ones((2, 0, 6, 6), F32), size=3, mode="area").shape == \
        (2, 0, 3, 3)
    # (torch's adaptive max pooling refuses the batched input's empty channels alone)
    with pytest.raises(jd.errors.ShapeError, match=re.escape(
            "adaptive_max_pool2d(): expected input with non-zero channels (only the batch "
            "dimension may be empty), got shape (2, 0, 6, 6)")):
        F.adaptive_max_pool2d(np.ones((2, 0, 6, 6), F32), 3)
    assert F.adaptive_max_pool2d(np.ones((0, 6, 6), F32), 3).shape == (0, 3, 3)
    assert F.adaptive_avg_pool2d(np.ones((2, 0, 6, 6), F32), 3).shape == (2, 0, 3, 3)


def test_convolution_weight_without_output_channels_raises(rng):
    """torch refuses a convolution weight with fewer output channels than groups (0) and
    a transposed one with none per group; jitdl returned an empty array. An empty batch
    stays fine."""
    x = normal(rng, (2, 4, 6, 6))
    for ws, groups in (((0, 4, 3, 3), 1), ((0, 2, 3, 3), 2)):
        with pytest.raises(jd.errors.ShapeError, match=re.escape(
                f"conv2d(): groups={groups} expects weight with at least {groups} output "
                f"channel(s) (dimension 0), got weight of shape {ws}")):
            F.conv2d(x, np.ones(ws, F32), groups=groups)
    with pytest.raises(jd.errors.ShapeError, match="at least 1 output channel"):
        F.conv1d(x[:, :, 0], np.ones((0, 4, 3), F32))
    for groups in (1, 2):
        with pytest.raises(jd.errors.ShapeError, match=re.escape(
                "conv_transpose2d(): expected weight with at least one output channel per "
                "group (dimension 1), got weight of shape (4, 0, 3, 3)")):
            F.conv_transpose2d(x, np.ones((4, 0, 3, 3), F32), groups=groups)
    assert F.conv2d(np.ones((0, 4, 6, 6), F32), np.ones((3, 4, 3, 3), F32)).shape == \
        (0, 3, 4, 4)
    assert F.conv_transpose2d(np.ones((0, 4, 6, 6), F32), np.ones((4, 3, 3, 3), F32)).shape \
        == (0, 3, 8, 8)


def test_dim_out_of_range_names_the_function_and_dim(rng):
    """A dim out of range raises an IndexError, as torch's 'Dimension out of range', that
    names the function and dim with torch's range (it was NumPy's 'axis 3 is out of
    bounds for array of dimension 3', naming neither); a 0-d input takes [-1, 0]."""
    x = normal(rng, (2, 4, 6))
    cases = [(lambda: F.softmax(x, dim=3), "softmax(): dim 3", 3),
             (lambda: F.log_softmax(x, axis=-4), "log_softmax(): dim -4", 3),
             (lambda: F.glu(x, dim=3), "glu(): dim 3", 3),
             (lambda: F.normalize(x, dim=(0, 3)), "normalize(): dim 3", 3),
             (lambda: F.cosine_similarity(x, x[0], dim=-4), "cosine_similarity(): dim -4", 3)]
    for call, start, n in cases:
        with pytest.raises(IndexError, match=re.escape(
                f"{start} is out of range for input of {n} dimension(s) (expected to be in "
                f"range of [-3, 2])")):
            call()
    with pytest.raises(jd.errors.AxisError, match=re.escape(
            "softmax(): dim 1 is out of range for a 0-d input (expected to be in range of "
            "[-1, 0])")):
        F.softmax(np.float32(2.0), dim=1)

    @jd.compute
    def probs(X):
        return F.softmax(X, dim=5)
    with pytest.raises(IndexError, match=re.escape("softmax(): dim 5 is out of range")):
        probs(x)
    close(F.cosine_similarity(x, x[0], dim=2), F.cosine_similarity(x, x[:1], dim=-1))
    close(F.softmax(np.float32(2.0), dim=-1), np.array(1.0, F32))


def test_tanh_of_a_0d_array_is_a_0d_array_as_every_activation_gives():
    """nn.tanh of a float array is jd.numpy.tanh's call, whose result for a 0-d array is
    NumPy's scalar: an activation's result is a 0-d array there (as nn.sigmoid's, and
    nn.tanh's of other dtypes)."""
    for dt in (np.float32, np.float64):
        x = np.array(0.5, dt)
        for _ in range(2):
            got = F.tanh(x)
            assert type(got) is np.ndarray and got.shape == () and got.dtype == dt
            np.testing.assert_allclose(got, np.tanh(x), rtol=1e-6)
            assert type(F.sigmoid(x)) is np.ndarray
        got = F.tanh(np.array([0.5, -1.0], dt))
        assert type(got) is np.ndarray and got.dtype == dt


def test_sizes_of_one_share_the_kernel_of_an_activation_or_softmax():
    """An activation, softmax or log_softmax broadcasts its one input against nothing and
    decides nothing on a size of 1 of it (softmax's row statistics are kept as a size of 1
    of their own): such a size stays symbolic in the dynamic kernel's key
    (builder.solid), so inputs of sizes 1 to 7 in random order take one kernel per rank
    and dim (each pattern of ones compiled its own). Every element against NumPy's in
    float64, on fresh inputs; sizes 0 too."""
    rng = np.random.default_rng()
    eager.clear()

    def softmax(x, axis):
        e = np.exp(x - x.max(axis=axis, keepdims=True))
        return e / e.sum(axis=axis, keepdims=True)
    shapes = [(m, n) for m in (1, 2, 7) for n in (1, 3, 7)]
    for k in rng.permutation(len(shapes)):
        x = rng.standard_normal(shapes[k])
        np.testing.assert_allclose(jd.nn.softmax(x, dim=1), softmax(x, 1), rtol=1e-12)
        np.testing.assert_allclose(jd.nn.log_softmax(x, dim=0), np.log(softmax(x, 0)),
                                   rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(jd.nn.silu(x), x / (1 + np.exp(-x)), rtol=1e-12)
        np.testing.assert_allclose(jd.nn.leaky_relu(x, 0.25), np.where(x > 0, x, 0.25 * x),
                                   rtol=1e-15)
    counts = {k: v["kernels"] for k, v in eager.cache_info().items()}
    assert counts == {"softmax": 1, "log_softmax": 1, "silu": 1, "leaky_relu": 1}, counts
    for shape in ((0, 3), (3, 0), (1, 0), (0, 1)):
        x = rng.standard_normal(shape)
        for got in (jd.nn.softmax(x, dim=1), jd.nn.log_softmax(x, dim=0), jd.nn.silu(x)):
            assert got.shape == shape and got.dtype == np.float64
