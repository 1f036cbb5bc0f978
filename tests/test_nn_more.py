"""jd.nn's hard and smooth activations, glu, group_norm, instance_norm, dropout,
normalize, cosine_similarity and pad against NumPy float64 references written here from
torch.nn.functional's definitions: every output element, torch's argument errors, and
the functions fused inside a @jd.compute definition."""
import math
import re

import numpy as np
import pytest

import jitdl as jd
import jitdl.nn as F
from jitdl import eager

F32, F64 = np.float32, np.float64


def normal(rng, shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


def close(out, ref, dtype=F32):
    assert out.shape == ref.shape, (out.shape, ref.shape)
    assert out.dtype == dtype, out.dtype
    tol = 2e-6 if dtype == F32 else 1e-13
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _relu6_shift(x):
    return np.clip(x + 3, 0, 6)


ACTS = [
    ("hardtanh", {}, lambda x: np.clip(x, -1, 1)),
    ("hardtanh", {"min_val": -0.5, "max_val": 2.0}, lambda x: np.clip(x, -0.5, 2.0)),
    ("hardsigmoid", {}, lambda x: _relu6_shift(x) / 6),
    ("hardswish", {}, lambda x: x * _relu6_shift(x) / 6),
    ("mish", {}, lambda x: x * np.tanh(np.log1p(np.exp(x)))),
    ("logsigmoid", {}, lambda x: np.log(_sigmoid(x))),
    ("softsign", {}, lambda x: x / (1 + np.abs(x))),
]


@pytest.mark.parametrize("name,kw,ref", ACTS, ids=[f"{a[0]}{len(a[1])}" for a in ACTS])
def test_activations(rng, name, kw, ref):
    """Values across the bends (|x| up to 12: hardsigmoid's +-3, mish's and logsigmoid's
    tails) and NaN; infinities as torch gives them (x * 0 is NaN at -inf for hardswish
    and mish, inf / inf for softsign)."""
    x = normal(rng, (3, 37)) * 4
    x[1, :4] = [3.0, -3.0, 0.0, -0.0]
    x[0, :3] = [np.nan, -np.inf, np.inf]
    with np.errstate(all="ignore"):
        expected = ref(x.astype(F64))
    close(getattr(F, name)(x, **kw), expected)


def test_activation_float64_inplace_and_hardtanh_of_integers(rng):
    x = normal(rng, (3, 37), F64) * 40        # logsigmoid's tail: exp(-x) past float64
    close(F.logsigmoid(x), np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x))), F64)
    y = x.copy()
    assert F.hardswish(y, inplace=True) is y
    close(y, x * _relu6_shift(x) / 6, F64)
    # integers stay integers, the limits truncated towards 0 as torch converts them
    i = rng.integers(-9, 9, (4, 5))
    out = F.hardtanh(i, -1.5, 2.7)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, np.clip(i, -1, 2))
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        F.hardtanh(x, 2.0, 1.0)
    with pytest.raises(TypeError, match="bool inputs are not supported"):
        F.hardtanh(i > 0)
    with pytest.raises(ValueError, match="unsigned input"):
        F.hardtanh(i.astype(np.uint8))


def test_hardtanh_limits_truncated_before_the_unsigned_check_and_non_finite_limits():
    """uint8 with min_val=-0.5 clamps at int(-0.5) = 0, as torch (it raised 'negative
    limits'); a NaN limit gives NaN everywhere on floats (torch's clamp; it clamped to the
    other limit); non-finite limits for integer input raise naming hardtanh (it was a
    DefinitionError from inside the builder)."""
    u = np.array([0, 1, 5, 200], np.uint8)
    out = F.hardtanh(u, -0.5, 2.0)
    assert out.dtype == np.uint8
    np.testing.assert_array_equal(out, [0, 1, 2, 2])
    np.testing.assert_array_equal(F.hardtanh(u, -0.7, -0.5), [0, 0, 0, 0])
    with pytest.raises(ValueError, match="negative limits"):
        F.hardtanh(u, -1.0, 2.0)
    x = np.array([np.inf, -np.inf, 0.5, np.nan, 3.0], F32)
    for lim in [(math.nan, 1.0), (-1.0, math.nan)]:
        assert np.isnan(F.hardtanh(x, *lim)).all()
    for lim, what in [((-math.inf, 1), "min_val=-inf"), ((0, math.inf), "max_val=inf"),
                      ((math.nan, 1), "min_val=nan")]:
        with pytest.raises(TypeError, match=f"hardtanh\\(\\): {what} cannot be converted"):
            F.hardtanh(np.arange(3, dtype=np.int8), *lim)


def test_hardtanh_integer_limits_outside_the_dtype_raise_naming_them():
    """A limit outside the integer input's range raises, as torch's 'value cannot be
    converted to type int8_t without overflow'; it was jitdl's generic message about a
    Python integer in a definition, naming neither hardtanh nor the limit. The range's
    own ends (and fractions truncated into it) clamp as torch."""
    i8 = np.array([-128, -5, 0, 5, 127], np.int8)
    for dt, lim, what, rng_text in ((np.int8, (-200.0, 1.0), "min_val=-200.0", "[-128, 127]"),
                                    (np.int8, (-5.0, 300.0), "max_val=300.0", "[-128, 127]"),
                                    (np.uint8, (0.0, 256.0), "max_val=256.0", "[0, 255]")):
        with pytest.raises(OverflowError, match=re.escape(
                f"hardtanh(): {what} cannot be converted to the integer dtype "
                f"{np.dtype(dt).name} of input without overflow (its range is {rng_text})")):
            F.hardtanh(i8.astype(dt), *lim)
    np.testing.assert_array_equal(F.hardtanh(i8, -128.9, 127.9), i8)
    np.testing.assert_array_equal(F.hardtanh(i8, -128.0, 4.0), [-128, -5, 0, 4, 4])


def test_glu(rng):
    x = normal(rng, (4, 6), F64)
    close(F.glu(x), x[:, :3] * _sigmoid(x[:, 3:]), F64)
    close(F.glu(x, 0), x[:2] * _sigmoid(x[2:]), F64)
    close(F.glu(x, axis=0), x[:2] * _sigmoid(x[2:]), F64)
    with pytest.raises(ValueError, match="halving dimension must be even, but dimension 0 "
                                         "is size 3"):
        F.glu(x[:3], dim=0)
    with pytest.raises(ValueError, match="0-d"):
        F.glu(np.float64(1.0))
    with pytest.raises(IndexError):
        F.glu(x, dim=2)
    with pytest.raises(TypeError, match="not both"):
        F.glu(x, dim=0, axis=1)


# -- group and instance norm -----------------------------------------------------------------
def group_norm_ref(x, groups, weight=None, bias=None, eps=1e-5):
    x = x.astype(F64)
    g = x.reshape(x.shape[0], groups, -1)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps))
    y = y.reshape(x.shape)
    per_channel = (x.shape[1],) + (1,) * (x.ndim - 2)
    if weight is not None:
        y = y * weight.reshape(per_channel)
    if bias is not None:
        y = y + bias.reshape(per_channel)
    return y


@pytest.mark.parametrize("shape,groups", [((2, 6, 3, 4), 3), ((3, 6), 2), ((2, 6, 5), 6)])
def test_group_norm(rng, shape, groups):
    x = normal(rng, shape) * 3 + 2
    w, b = normal(rng, (6,)), normal(rng, (6,))
    close(F.group_norm(x, groups, w, b, eps=1e-3), group_norm_ref(x, groups, w, b, 1e-3))
    close(F.group_norm(x, groups), group_norm_ref(x, groups))


def test_group_norm_errors(rng):
    x = normal(rng, (2, 6, 3))
    with pytest.raises(ValueError, match="divisible by num_groups"):
        F.group_norm(x, 4)
    # (the input's own shape, not the (N, C, S) view that arrays of 4+ dimensions run as)
    with pytest.raises(ValueError, match=r"input of shape \(1, 6, 1, 2\) and num_groups=4"):
        F.group_norm(normal(rng, (1, 6, 1, 2)), 4)
    with pytest.raises(ValueError, match=r"weight must have shape \(6,\)"):
        F.group_norm(x, 3, normal(rng, (5,)))
    with pytest.raises(ValueError, match="num_groups must be positive"):
        F.group_norm(x, 0)
    with pytest.raises(TypeError, match="num_groups must be an int"):
        F.group_norm(x, 2.0)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        F.group_norm(x[0, 0], 1)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.group_norm(x[:1, :2, 0], 2)


def test_instance_norm_updates_running_statistics(rng):
    """Each sample's channel normalised over its own spatial elements; running_mean and
    running_var move towards the batch's mean of the per-sample means and unbiased
    variances; use_input_stats=False normalises with them instead."""
    x = normal(rng, (2, 3, 4, 5), F64) * 2 + 1
    w, b = normal(rng, (3,), F64), normal(rng, (3,), F64)
    rm, rv = normal(rng, (3,), F64), rng.random(3) + 0.5
    rm0, rv0 = rm.copy(), rv.copy()
    flat = x.reshape(2, 3, -1)
    mu, var = flat.mean(-1, keepdims=True), flat.var(-1, keepdims=True)
    want = ((flat - mu) / np.sqrt(var + 1e-3)).reshape(x.shape) * w[:, None, None] + \
        b[:, None, None]
    close(F.instance_norm(x, rm, rv, w, b, momentum=0.25, eps=1e-3), want, F64)
    close(rm, 0.75 * rm0 + 0.25 * flat.mean(-1).mean(0), F64)
    close(rv, 0.75 * rv0 + 0.25 * flat.var(-1, ddof=1).mean(0), F64)
    close(F.instance_norm(x, rm, rv, use_input_stats=False),
          (x - rm[:, None, None]) / np.sqrt(rv[:, None, None] + 1e-5), F64)
    close(F.instance_norm(x[:, :, 0]), group_norm_ref(x[:, :, 0], 3), F64)
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(x[:, :, 0, 0])
    with pytest.raises(TypeError, match="running_mean and running_var are required"):
        F.instance_norm(x, use_input_stats=False)


def test_running_statistics_both_or_neither_and_empty_batches(rng):
    """instance_norm and training batch_norm take running_mean and running_var both or
    neither (torch's ValueError; one alone was updated); a batch with no element to
    average leaves them as they are, as torch does (instance_norm wrote NaN over them,
    batch_norm of an empty batch raised 'more than 1 value per channel'); training
    batch_norm's eps must be positive (torch 2.13's ValueError)."""
    x = normal(rng, (2, 3, 4), F64)
    for call in (lambda m, v: F.instance_norm(x, m, v),
                 lambda m, v: F.batch_norm(x, m, v, training=True)):
        for m, v in ((np.zeros(3), None), (None, np.ones(3))):
            with pytest.raises(ValueError, match="both be None or neither be None"):
                call(m, v)
    for shape in [(2, 3, 0), (0, 3, 4), (0, 3)]:
        m, v = np.full(3, 0.5), np.full(3, 2.0)
        assert F.batch_norm(np.ones(shape), m, v, training=True).shape == shape
        np.testing.assert_array_equal(np.concatenate([m, v]), [0.5] * 3 + [2.0] * 3)
    m, v = np.full(3, 0.5), np.full(3, 2.0)
    assert F.instance_norm(np.ones((2, 3, 0)), m, v).shape == (2, 3, 0)
    np.testing.assert_array_equal(np.concatenate([m, v]), [0.5] * 3 + [2.0] * 3)
    for eps in (0.0, -1e-5):
        with pytest.raises(ValueError, match="eps must be positive during training"):
            F.batch_norm(x, None, None, training=True, eps=eps)


# -- dropout ---------------------------------------------------------------------------------
def test_dropout(rng):
    """Kept elements scaled by 1 / (1 - p), the draw NumPy's global generator's (seeded,
    repeated here); input itself without training or at p = 0, as torch returns it."""
    x = normal(rng, (50, 40), F64)
    np.random.seed(3)
    got = F.dropout(x, 0.3)
    np.random.seed(3)
    keep = np.random.random_sample(x.shape) >= 0.3
    np.testing.assert_array_equal(got, x * (keep / 0.7))     # (torch: x times the mask)
    assert 0.6 < keep.mean() < 0.8
    assert F.dropout(x, 0.3, training=False) is x and F.dropout(x, 0.0) is x
    np.testing.assert_array_equal(F.dropout(x, 1.0), np.zeros_like(x))
    y = x.astype(F32)
    z = y.copy()
    assert F.dropout(z, 0.5, inplace=True) is z
    assert z.dtype == F32 and np.all((z == 0) | (z == y * 2))
    for p in (-0.1, 1.5):
        with pytest.raises(ValueError, match="dropout probability has to be between 0 and 1, "
                                             f"but got {p}"):
            F.dropout(x, p, training=False)
    with pytest.raises(TypeError, match="float32 or float64"):
        F.dropout(np.ones(3, np.int64))


# -- normalize and cosine_similarity ---------------------------------------------------------
@pytest.mark.parametrize("p,dim", [(2.0, 1), (1.0, -1), (math.inf, (0, 2)), (3.0, 1),
                                   (0.0, 2)])
def test_normalize(rng, p, dim):
    x = normal(rng, (3, 4, 5), F64)
    x[1, :, 2] = 0.0                  # a zero vector: divided by eps, not by 0
    ax = dim if isinstance(dim, tuple) else (dim,)
    mag = np.abs(x)
    norm = {2.0: lambda: np.sqrt((x * x).sum(ax, keepdims=True)),
            1.0: lambda: mag.sum(ax, keepdims=True),
            math.inf: lambda: mag.max(ax, keepdims=True),
            3.0: lambda: (mag ** 3).sum(ax, keepdims=True) ** (1 / 3),
            0.0: lambda: (x != 0).sum(ax, keepdims=True).astype(F64)}[p]()
    close(F.normalize(x, p, dim, eps=1e-6), x / np.maximum(norm, 1e-6), F64)


def test_normalize_default_dim_float32_and_out(rng):
    x = normal(rng, (3, 4, 5))
    x64 = x.astype(F64)
    want = x64 / np.maximum(np.sqrt((x64 * x64).sum(1, keepdims=True)), 1e-12)
    close(F.normalize(x), want)
    out = np.empty_like(x)
    assert F.normalize(x, axis=1, out=out) is out
    close(out, want)
    with pytest.raises(TypeError, match="dim must be an int or a tuple of ints"):
        F.normalize(x, dim=1.0)


@pytest.mark.parametrize("p", [2.0, 1.0, math.inf, 0.0, -1.0])
def test_normalize_empty_dim_is_every_dimension(rng, p):
    """dim=() (or []) is the norm of the whole array, as torch's vector_norm reads it (it
    normalised each element by itself, +-1); a 0-d input is a vector of one element."""
    x = normal(rng, (3, 4, 2), F64)
    mag = np.abs(x)
    norm = {2.0: lambda: np.sqrt((x * x).sum()), 1.0: mag.sum, math.inf: mag.max,
            0.0: lambda: float((x != 0).sum()), -1.0: lambda: (mag ** -1).sum() ** -1}[p]()
    close(F.normalize(x, p, ()), x / max(norm, 1e-12), F64)
    close(F.normalize(x, p, []), x / max(norm, 1e-12), F64)
    s = np.array(-2.5)
    close(F.normalize(s, p, 0), np.array(-2.5 if p == 0 else -1.0), F64)
    with pytest.raises(IndexError, match="out of range for a 0-d input"):
        F.normalize(s, p, 1)


def cosine_ref(a, b, dim, eps):
    a, b = np.broadcast_arrays(a.astype(F64), b.astype(F64))
    na = np.maximum(np.sqrt((a * a).sum(dim, keepdims=True)), eps)
    nb = np.maximum(np.sqrt((b * b).sum(dim, keepdims=True)), eps)
    return ((a / na) * (b / nb)).sum(dim)


def test_cosine_similarity(rng):
    """Broadcast operands, the default dim and axis=; a vector whose norm is under eps
    divided by eps (its cosine shrinks towards 0), as torch clamps each norm."""
    a, b = normal(rng, (4, 5, 6), F64), normal(rng, (5, 1), F64)
    close(F.cosine_similarity(a, b), cosine_ref(a, b, 1, 1e-8), F64)
    close(F.cosine_similarity(a, b, axis=-1), cosine_ref(a, b, -1, 1e-8), F64)
    tiny = a * 1e-9
    close(F.cosine_similarity(tiny, a, dim=2, eps=1e-7), cosine_ref(tiny, a, 2, 1e-7), F64)
    got = F.cosine_similarity(a.astype(F32), b.astype(F32), 0)
    close(got, cosine_ref(a, b, 0, 1e-8), F32)
    with pytest.raises(ValueError, match="could not be broadcast"):
        F.cosine_similarity(a, normal(rng, (3,), F64))
    with pytest.raises(IndexError):
        F.cosine_similarity(a, b, dim=3)


def test_cosine_similarity_float_beside_integer_keeps_its_dtype_and_negative_eps(rng):
    """A float32 operand beside an int64 one gives float32, torch's promotion (NumPy's
    float64 came back); a negative eps is refused as torch refuses it."""
    a, b = normal(rng, (3, 4)), rng.integers(-3, 4, (3, 4))
    for x1, x2 in ((a, b), (b, a)):
        close(F.cosine_similarity(x1, x2), cosine_ref(x1, x2, 1, 1e-8), F32)
    close(F.cosine_similarity(b, b), cosine_ref(b, b, 1, 1e-8), F64)
    with pytest.raises(ValueError, match="eps must be non-negative, got -1.0"):
        F.cosine_similarity(a, a, eps=-1.0)


# -- pad -------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"),
                                          ("circular", "wrap")])
def test_pad_modes(rng, mode, np_mode):
    """torch's pad tuple, last dimension first; each mode as NumPy's of the same meaning."""
    x = normal(rng, (2, 3, 4, 5), F64)
    got = F.pad(x, (2, 1, 3, 0), mode=mode)
    close(got, np.pad(x, ((0, 0), (0, 0), (3, 0), (2, 1)), np_mode), F64)
    got = F.pad(x[0], (1, 3), mode=mode)
    close(got, np.pad(x[0], ((0, 0), (0, 0), (1, 3)), np_mode), F64)


def test_pad_negative_widths(rng):
    """A negative width cuts elements off. reflect and replicate read the whole input
    beyond the cut (torch's index mapping), circular wraps what is left (torch's)."""
    x = normal(rng, (2, 3, 6), F64)
    close(F.pad(x, (-2, 3), value=1.5),
          np.pad(x[..., 2:], ((0, 0), (0, 0), (0, 3)), constant_values=1.5), F64)
    close(F.pad(x, (1, -1, -1, 0)),
          np.pad(x[:, 1:, :-1], ((0, 0), (0, 0), (1, 0))), F64)
    close(F.pad(x, (-2, 3), mode="reflect"),
          np.pad(x, ((0, 0), (0, 0), (0, 3)), "reflect")[..., 2:], F64)
    close(F.pad(x, (-2, 3), mode="replicate"),
          np.pad(x, ((0, 0), (0, 0), (0, 3)), "edge")[..., 2:], F64)
    close(F.pad(x, (-2, 3), mode="circular"),
          np.pad(x[..., 2:], ((0, 0), (0, 0), (0, 3)), "wrap"), F64)


def _torch_edge_index(j, n, mode):
    """torch's reflect / replicate source of output position j (pad before removed, a
    cut making it start beyond 0) of an axis of length n."""
    if mode == "replicate":
        return min(max(j, 0), n - 1)
    j = -j if j < 0 else j
    return 2 * (n - 1) - j if j >= n else j


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("widths", [(-4, 1), (-4, 2), (1, -4), (-3, 2), (2, -3), (-1, 3)])
def test_pad_cut_to_an_edge(mode, widths):
    """A negative width that cuts an axis up to (or past) its last element before the
    other side pads it: torch reads the whole input there (reflect of (1, 4) by (-4, 1)
    is x[2]); it failed to compile (the index 'can read outside input')."""
    x = np.arange(8.0).reshape(2, 4)
    a, b = widths
    want = x[:, [_torch_edge_index(j - a, 4, mode) for j in range(4 + a + b)]]
    close(F.pad(x, widths, mode), want, F64)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_empty_output_dimension_beside_a_non_empty_one(rng, mode):
    """Padding 2 or 3 dimensions may cut one of them to nothing while another keeps
    elements: torch's empty result (it raised); every padded dimension empty raises."""
    x = normal(rng, (2, 3, 4, 5), F64)
    assert F.pad(x, (-5, 0, 0, 0), mode).shape == (2, 3, 4, 0)
    assert F.pad(x, (2, -1, -1, 3, -2, -1), mode).shape == (2, 0, 6, 6)
    with pytest.raises(ValueError, match=r"calculated output sizes \[0, 0\]"):
        F.pad(x, (-5, 0, -4, 0), mode)
    with pytest.raises(ValueError, match="too small"):
        F.pad(x[0], (-2, -3), mode)


@pytest.mark.parametrize("mode,widths", [("reflect", (2, 1, 1, 1)), ("replicate", (-2, 3)),
                                         ("circular", (-1, 2, 1, -1)), ("reflect", (-1, 2))])
def test_pad_edge_modes_in_a_dynamic_definition(rng, mode, widths):
    """reflect, replicate and circular with sizes known only at run time (they failed to
    compile: the bounds prover could not see the index inside an axis that may be
    empty)."""
    @jd.compute(dynamic=True)
    def padded(X):
        return F.pad(X, widths, mode) * 2

    for shape in [(2, 3, 5), (3, 4, 7)]:
        x = normal(rng, shape, F64)
        close(padded(x), F.pad(x, widths, mode) * 2, F64)


def test_pad_constant_value_dtypes_and_errors(rng):
    i = rng.integers(-5, 5, (3, 4)).astype(np.int32)
    out = F.pad(i, (1, 1, 0, 2), value=-1.7)      # truncated to -1, as torch converts it
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.pad(i, ((0, 2), (1, 1)), constant_values=-1))
    x = normal(rng, (2, 3, 4))
    close(F.pad(x, [1, 2]), np.pad(x, ((0, 0), (0, 0), (1, 2))).astype(F64))
    for args, kw, err, msg in [
            ((1, 2, 3), {}, ValueError, "divisible by 2"),
            ((1,) * 8, {}, ValueError, "padding length 8 and input of dimension 3"),
            ((-5, 0), {}, ValueError, "negative output size"),
            ((4, 0), {"mode": "reflect"}, ValueError, "less than the corresponding input "
                                                      "dimension"),
            ((5, 0), {"mode": "circular"}, ValueError, "wrapping around more than once"),
            ((1, 1), {"mode": "reflect", "value": 2.0}, ValueError, "doesn't take in value"),
            ((1,) * 6, {"mode": "replicate"}, NotImplementedError,
             "padding size 6 is not supported for 3D input"),
            ((1, 1), {"mode": "zeros"}, NotImplementedError, "unrecognised padding mode"),
            ((1.5, 1), {}, TypeError, "pad must be a tuple of ints")]:
        with pytest.raises(err, match=msg):
            F.pad(x, args, **kw)


def test_pad_bool_value_non_finite_integer_value_and_cut_before_pad():
    """value=True pads a mask with True (it raised 'value must be a number'), and is 1
    elsewhere; a NaN or infinite value for integer input is an error that says so (it was
    Python's bare int() error); a negative width cutting more than the dimension holds is
    an error even where the other side's padding would make up the size (torch cuts
    first: (3, -3) of 2 elements raises there)."""
    mask = np.array([[True, False, False]])
    np.testing.assert_array_equal(F.pad(mask, (1, 2), value=True),
                                  np.pad(mask, ((0, 0), (1, 2)), constant_values=True))
    i = np.array([[4, 5]], np.int16)
    np.testing.assert_array_equal(F.pad(i, (1, 0), value=True), [[1, 4, 5]])
    for v in (math.nan, math.inf):
        with pytest.raises(TypeError, match="cannot be converted to the integer dtype"):
            F.pad(i, (1, 0), value=v)
    x = np.ones((2, 2))
    for widths in [(3, -3), (-3, 2)]:
        with pytest.raises(ValueError, match="cuts more than the 2 element"):
            F.pad(x, widths)
    np.testing.assert_array_equal(F.pad(x, (3, -2), value=7.0), np.full((2, 3), 7.0))


# -- inside definitions ----------------------------------------------------------------------
def test_new_functions_fuse_in_a_definition(rng):
    """group_norm, mish, pad, glu, normalize, cosine_similarity and dropout (training=False,
    the identity) inside one definition: stages of its kernel, no kernels of their own;
    dropout with training=True refused there."""
    @jd.compute
    def block(X, W, B, Y):
        h = F.mish(F.group_norm(X, 2, W, B))
        h = F.glu(F.pad(h, (1, 1, 0, 0), mode="replicate"), dim=-1)
        h = F.dropout(F.normalize(h, dim=1), 0.5, training=False)
        return F.cosine_similarity(h, Y, dim=-1)

    before = eager.cache_info()
    x, w, b = normal(rng, (2, 4, 3, 4), F64), normal(rng, (4,), F64), normal(rng, (4,), F64)
    y = normal(rng, (3, 3), F64)
    g = group_norm_ref(x, 2, w, b)
    h = g * np.tanh(np.log1p(np.exp(g)))
    h = np.pad(h, ((0, 0), (0, 0), (0, 0), (1, 1)), "edge")
    h = h[..., :3] * _sigmoid(h[..., 3:])
    h = h / np.maximum(np.sqrt((h * h).sum(1, keepdims=True)), 1e-12)
    close(block(x, w, b, y), cosine_ref(h, y, -1, 1e-8), F64)
    assert eager.cache_info() == before

    @jd.compute
    def training(X):
        return F.dropout(X, 0.5)
    with pytest.raises(jd.errors.ArgumentError, match="inside a definition"):
        training(x)


def test_norms_of_a_constant_row_are_zero():
    """A constant row (or group, or channel) centres to exactly 0, as torch's: the float32
    mean is summed in float64 (a float32 sum left its rounding, up to 1e-2 once divided by
    sqrt(eps), for 123.456; NaN for 3e38)."""
    for v in (7.3, 0.1, 123.456, 1e20, 3e38):
        x = np.full((3, 6, 50), v, np.float32)
        for got in (jd.nn.layer_norm(x, (50,)), jd.nn.layer_norm(x, (6, 50)),
                    jd.nn.group_norm(x, 3), jd.nn.instance_norm(x),
                    jd.nn.batch_norm(x, None, None, training=True)):
            assert got.dtype == np.float32 and np.array_equal(got, np.zeros_like(x)), v


def test_integer_running_statistics_are_refused_naming_them():
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    rm, rv = np.zeros(3, np.int64), np.ones(3, np.int64)
    for call in (lambda: jd.nn.instance_norm(x, rm, rv),
                 lambda: jd.nn.batch_norm(x, rm, rv, training=True)):
        with pytest.raises(TypeError, match="running statistics .* float arrays, got int64"):
            call()
        assert not rm.any() and (rv == 1).all()


def test_torchs_edge_cases_of_norms_dropout_and_similarity():
    """torch's answers where the formulas alone say nothing: instance_norm with eps=0 on
    a constant channel (0, as torch's batch-norm kernel takes 1 / sqrt(0) as 0), dropout
    of integers at p=1 (zeros), normalize with p='fro' (the 2-norm), cosine_similarity of
    0-d operands (vectors of one element along dim 0 or -1)."""
    rng = np.random.default_rng(31)
    x = normal(rng, (2, 3, 5), F64)
    x[1, 2] = 1.25                      # one constant channel
    out = F.instance_norm(x, eps=0.0)
    mu = x.mean(-1, keepdims=True)
    sd = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True))
    ref = np.divide(x - mu, sd, out=np.zeros_like(x), where=sd > 0)
    close(out, ref, F64)
    assert (out[1, 2] == 0).all()
    ints = rng.integers(-9, 9, (4, 5))
    got = F.dropout(ints, p=1.0)
    assert got.dtype == ints.dtype and (got == 0).all()
    kept = ints.copy()
    assert F.dropout(kept, p=1.0, inplace=True) is kept and (kept == 0).all()
    with pytest.raises(jd.ArgumentError, match="float32 or float64"):
        F.dropout(ints, p=0.5)
    v = normal(rng, (3, 4))
    close(F.normalize(v, p="fro", dim=1), v / np.linalg.norm(v.astype(F64), axis=1,
                                                             keepdims=True))
    with pytest.raises(jd.ArgumentError, match="p must be a number"):
        F.normalize(v, p="nuc", dim=1)
    for a, b, want in ((1.5, 2.0, 1.0), (1.5, -2.0, -1.0), (0.0, 2.0, 0.0)):
        for dim in (0, -1):
            got = F.cosine_similarity(np.array(a, F32), np.array(b, F32), dim=dim)
            assert got.shape == () and got.dtype == F32 and got == want, (a, b, dim, got)
    with pytest.raises(np.exceptions.AxisError):
        F.cosine_similarity(np.array(1.0, F32), np.array(2.0, F32))     # dim=1
    w = normal(rng, 3, F64)
    got = F.cosine_similarity(np.array(0.5), w, dim=0)
    close(got, np.array(0.5 * w.sum() / (0.5 * np.linalg.norm(w) * math.sqrt(3))), F64)
