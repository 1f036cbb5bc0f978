"""jd.numpy's shape manipulation and products against NumPy: values, dtypes, shapes and
errors on arrays, and each function inside a @jd.compute definition fused with another."""
import re
import sys

import numpy as np
import pytest

import jitdl as jd
import jitdl.numpy as jnp
from jitdl import eager
from jitdl.numpy import _linalg, _manipulation
from jitdl.ops import linalg

rng = np.random.default_rng(7)


def rand(*shape, dtype="float64"):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        lo = 0 if np.dtype(dtype).kind == "u" else -9
        return rng.integers(lo, 10, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def same(got, ref, tol=1e-12):
    """Same shape, dtype and values (close for floats)."""
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
    if ref.dtype.kind == "f":
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, ref)


def raises_like(fn_jd, fn_np, match=None):
    """fn_jd raises the exception type fn_np raises (and the message, when given)."""
    with pytest.raises(Exception) as ref:
        fn_np()
    with pytest.raises(type(ref.value)) as got:
        fn_jd()
    if match is not None:
        assert match in str(got.value), str(got.value)
    return got.value


# -- views: NumPy's own result on arrays, index arithmetic in definitions -------------------
VIEWS = [
    ("transpose", (3, 4, 5), {}), ("transpose", (3, 4, 5), {"axes": (1, -1, 0)}),
    ("permute_dims", (3, 4, 5), {"axes": (2, 0, 1)}),
    ("swapaxes", (3, 4, 5), {"axis1": 0, "axis2": -1}),
    ("moveaxis", (3, 4, 5), {"source": 0, "destination": -1}),
    ("moveaxis", (3, 4, 5, 2), {"source": (0, 3), "destination": (2, 0)}),
    ("reshape", (3, 4, 5), {"shape": (5, -1, 2)}), ("reshape", (6, 4), {"shape": (4, 3, 2)}),
    ("reshape", (2, 1, 6), {"shape": (3, 1, 4)}), ("reshape", (4, 6), {"shape": (24,)}),
    ("ravel", (2, 3, 4), {}),
    ("squeeze", (1, 3, 1, 4), {}), ("squeeze", (1, 3, 1, 4), {"axis": -2}),
    ("squeeze", (1, 3, 1, 4), {"axis": (0, 2)}),
    ("expand_dims", (3, 4), {"axis": 1}), ("expand_dims", (3, 4), {"axis": (0, -1)}),
    ("broadcast_to", (3, 1), {"shape": (2, 3, 4)}),
    ("flip", (3, 4, 5), {}), ("flip", (3, 4, 5), {"axis": -1}),
    ("flip", (3, 4, 5), {"axis": (0, 2)}), ("fliplr", (3, 4), {}), ("flipud", (3, 4), {}),
]


@pytest.mark.parametrize("name, shape, kw", VIEWS)
def test_view_on_arrays_is_numpys(name, shape, kw):
    x = rand(*shape)
    got = getattr(jnp, name)(x, **kw)
    ref = getattr(np, "transpose" if name == "permute_dims" else name)(x, *kw.values())
    same(got, ref)
    assert np.shares_memory(got, x)         # a view, no copy, as NumPy gives


@pytest.mark.parametrize("name, shape, kw", VIEWS)
def test_view_in_definition(name, shape, kw):
    x = rand(*shape)
    fn = getattr(jnp, name)

    @jd.compute
    def f(X):
        return jnp.exp(fn(X, **kw))
    ref = getattr(np, "transpose" if name == "permute_dims" else name)(x, *kw.values())
    same(f(x), np.exp(ref))


def test_view_errors_in_definition():
    x = rand(2, 3)

    def inside(fn):
        return lambda: jd.compute(lambda X: fn(X))(x)
    e = raises_like(inside(lambda X: jnp.reshape(X, (4,))), lambda: x.reshape(4))
    assert "cannot reshape array of size 6 into shape (4,)" in str(e)
    e = raises_like(inside(lambda X: jnp.reshape(X, (4, -1))), lambda: x.reshape(4, -1))
    assert "into shape (4,newaxis)" in str(e)
    # (NumPy leaves a leading -1 out of the shape it names; (0, 6) to (-1, 0) is refused
    # as no size of the -1 is known)
    for a, shape, text in [(x, (-1, 4), "size 6 into shape (4)"),
                           (rand(0, 6), (-1, 0), "size 0 into shape (0)"),
                           (rand(0, 6), (-1, 0, 2), "size 0 into shape (0,2)"),
                           (rand(0, 6), (2, -1, 0), "size 0 into shape (2,newaxis,0)")]:
        e = raises_like(lambda: jd.compute(lambda X: X.reshape(shape))(a),
                        lambda: a.reshape(shape))
        assert f"cannot reshape array of {text}" in str(e), (shape, str(e))
    raises_like(inside(lambda X: jnp.reshape(X, (-1, -1))), lambda: x.reshape(-1, -1))
    e = raises_like(inside(lambda X: jnp.squeeze(X, 0)), lambda: np.squeeze(x, 0))
    assert "cannot select an axis to squeeze out which has size not equal to one" in str(e)
    raises_like(inside(lambda X: jnp.squeeze(X, 2)), lambda: np.squeeze(x, 2))
    e = raises_like(inside(lambda X: jnp.transpose(X, (0,))), lambda: np.transpose(x, (0,)))
    assert "axes don't match array" in str(e)
    raises_like(inside(lambda X: jnp.transpose(X, (0, 0))), lambda: np.transpose(x, (0, 0)))
    raises_like(inside(lambda X: jnp.swapaxes(X, 0, 2)), lambda: np.swapaxes(x, 0, 2))
    raises_like(inside(lambda X: jnp.moveaxis(X, (0, 1), 0)), lambda: np.moveaxis(x, (0, 1), 0))
    raises_like(inside(lambda X: jnp.expand_dims(X, 3)), lambda: np.expand_dims(x, 3))
    raises_like(inside(lambda X: jnp.broadcast_to(X, (3, 3))), lambda: np.broadcast_to(x, (3, 3)))
    raises_like(inside(lambda X: jnp.flip(X, -3)), lambda: np.flip(x, -3))
    raises_like(inside(lambda X: jnp.fliplr(jnp.ravel(X))), lambda: np.fliplr(x.ravel()))


@pytest.mark.parametrize("fn, arg, axis", [("split", 3, 1), ("split", (1, 4), -1),
                                           ("array_split", 4, 1), ("array_split", (2, -1), 0)])
def test_split(fn, arg, axis):
    x = rand(3, 6)
    ref = getattr(np, fn)(x, arg, axis)
    got = getattr(jnp, fn)(x, arg, axis)
    assert len(got) == len(ref) and all(np.shares_memory(g, x) for g in got if g.size)
    for g, r in zip(got, ref):
        same(g, r)

    @jd.compute
    def f(X):
        parts = getattr(jnp, fn)(X, arg, axis)
        return jnp.add(jnp.exp(parts[0]), parts[-1]) if parts[0].shape == parts[-1].shape \
            else jnp.exp(parts[-1])
    r = np.exp(ref[0]) + ref[-1] if ref[0].shape == ref[-1].shape else np.exp(ref[-1])
    same(f(x), r)


def test_split_errors():
    x = rand(3, 5)
    e = raises_like(lambda: jd.compute(lambda X: jnp.split(X, 2, 1)[0])(x),
                    lambda: np.split(x, 2, 1))
    assert "array split does not result in an equal division" in str(e)


# -- data-moving ops: kernels on arrays ------------------------------------------------------
@pytest.mark.parametrize("shapes, dtypes, axis", [
    (((2, 3), (4, 3)), ("float64", "float64"), 0),
    (((2, 3), (2, 1), (2, 5)), ("float32", "int8", "float32"), -1),
    (((2, 3, 4), (2, 3, 1)), ("int8", "uint8"), 2),
    (((2, 3), (5,)), ("bool", "int32"), None),
    (((3,), (0,), (2,)), ("float64", "float64", "float64"), 0),
])
def test_concatenate(shapes, dtypes, axis):
    xs = [rand(*s, dtype=d) for s, d in zip(shapes, dtypes)]
    same(jnp.concatenate(xs, axis=axis), np.concatenate(xs, axis=axis))


def test_concatenate_dtype_and_out():
    xs = [rand(2, 3), rand(1, 3, dtype="int16")]
    same(jnp.concatenate(xs, dtype="float32"), np.concatenate(xs, dtype="float32"))
    out = np.empty((3, 3))
    assert jnp.concatenate(xs, out=out) is out
    same(out, np.concatenate(xs))
    same(jnp.concatenate([[1, 2], [3]]), np.concatenate([[1, 2], [3]]))


def test_concat_takes_concatenates_arguments():
    """NumPy 2's np.concat is np.concatenate: jnp.concat(xs, 1) (a positional axis) and
    its out=, dtype= and casting= were TypeErrors."""
    xs = [rand(2, 3), rand(2, 2, dtype="int16")]
    same(jnp.concat(xs, 1), np.concat(xs, 1))
    same(jnp.concat(xs, axis=1, dtype="int8", casting="unsafe"),
         np.concat(xs, axis=1, dtype="int8", casting="unsafe"))
    out = np.empty((2, 5))
    assert jnp.concat(xs, 1, out) is out
    same(out, np.concat(xs, 1))
    same(jnp.concat([xs[1], xs[1]], axis=None), np.concat([xs[1], xs[1]], axis=None))


def test_joins_follow_the_casting_rule():
    """dtype= and casting= of concatenate, stack, hstack and vstack: NumPy's answer."""
    a, i = rand(2, 3), rand(2, 3, dtype="int32")
    for fn in ("concatenate", "stack", "hstack", "vstack"):
        for kw in ({"dtype": "int32", "casting": "unsafe"}, {"dtype": "float32"},
                   {"casting": "safe"}, {"dtype": "int8", "casting": "unsafe"}):
            same(getattr(jnp, fn)([a, i], **kw), getattr(np, fn)([a, i], **kw))
        for kw in ({"dtype": "int32"}, {"casting": "no"}, {"casting": "equiv"},
                   {"dtype": "float32", "casting": "safe"}):
            e = raises_like(lambda: getattr(jnp, fn)([a, i], **kw),
                            lambda: getattr(np, fn)([a, i], **kw))
            assert "Cannot cast array data from dtype" in str(e)
        with pytest.raises(ValueError, match="casting must be one of"):
            getattr(jnp, fn)([a, i], casting="x")
    same(jnp.concatenate([i, i], axis=1, casting="no"), np.concatenate([i, i], axis=1))


def test_concatenate_errors():
    a, b, c = rand(2, 3), rand(2, 4), rand(3)
    e = raises_like(lambda: jnp.concatenate([a, b]), lambda: np.concatenate([a, b]))
    assert str(e).startswith("all the input array dimensions except for the concatenation axis "
                             "must match exactly, but along dimension 1, the array at index 0 "
                             "has size 3 and the array at index 1 has size 4")
    e = raises_like(lambda: jnp.concatenate([a, c]), lambda: np.concatenate([a, c]))
    assert "the array at index 1 has 1 dimension(s)" in str(e)
    raises_like(lambda: jnp.concatenate([a, a], axis=2), lambda: np.concatenate([a, a], axis=2))
    raises_like(lambda: jnp.concatenate([]), lambda: np.concatenate([]))
    raises_like(lambda: jnp.concatenate([1.0, 2.0]), lambda: np.concatenate([1.0, 2.0]))


@pytest.mark.parametrize("fn, shapes, kw", [
    ("stack", ((2, 3), (2, 3)), {"axis": 0}), ("stack", ((2, 3),) * 3, {"axis": -1}),
    ("stack", ((4,), (4,)), {"axis": 1}), ("hstack", ((2, 3), (2, 1)), {}),
    ("hstack", ((3,), (2,)), {}), ("vstack", ((3,), (3,)), {}),
    ("vstack", ((2, 3), (1, 3), (3,)), {}),
])
def test_stack(fn, shapes, kw):
    xs = [rand(*s, dtype=d) for s, d in zip(shapes, ("float32", "int16", "float32"))]
    same(getattr(jnp, fn)(xs, **kw), getattr(np, fn)(xs, **kw))


def test_stack_errors():
    e = raises_like(lambda: jnp.stack([rand(3), rand(4)]), lambda: np.stack([rand(3), rand(4)]))
    assert "all input arrays must have the same shape" in str(e)
    raises_like(lambda: jnp.stack([rand(3)], axis=2), lambda: np.stack([rand(3)], axis=2))


def test_join_and_axis_errors_in_numpys_order_and_words():
    """NumPy's error where two things are wrong (the axis or the shapes before a cast to
    dtype=, the shapes before stack's axis), a later 0-d array's rank message, a float
    axis's TypeError (mean/var/std's own words; a float in a tuple refused too), and
    concatenate's out= errors (rank, shape or size, then the cast)."""
    a3, b3 = rand(2, 3, 4), rand(2, 3, 4)
    cases = [
        lambda m: m.concatenate([a3, b3], axis=5, dtype=np.int8, casting="safe"),
        lambda m: m.concatenate([a3, b3], axis=-4, dtype=np.int8),
        lambda m: m.concatenate([a3, b3[:, :2]], axis=0, dtype=np.int8, casting="safe"),
        lambda m: m.concatenate([a3, b3[0]], axis=0, dtype=np.int8, casting="safe"),
        lambda m: m.concatenate([a3, b3], axis=5, dtype="not a dtype"),
        lambda m: m.concatenate([a3, b3], axis=5, casting="bogus"),
        lambda m: m.concatenate([a3, 1]),
        lambda m: m.concatenate([1, a3]),
        lambda m: m.stack([rand(3), rand(4)], axis=None),
        lambda m: m.stack([rand(3), rand(4)], dtype=np.int8, casting="safe"),
        lambda m: m.stack([rand(3), rand(3)], axis=5, dtype=np.int8, casting="safe"),
        lambda m: m.stack([rand(3), rand(3)], axis=1.0),
        lambda m: m.stack([rand(3), rand(3)], axis=None),
        lambda m: m.concatenate([a3, b3], out=np.zeros((4, 3, 5), np.int8), casting="safe"),
        lambda m: m.concatenate([a3, b3], out=np.zeros((4, 3, 4), np.int8)),
        lambda m: m.concatenate([a3, b3], out=np.zeros((4, 12))),
        lambda m: m.concatenate([a3, b3], axis=None, out=np.zeros(47)),
        lambda m: m.concatenate([a3, b3], axis=None, out=np.zeros(48, np.int64),
                                casting="safe"),
    ] + [lambda m, f=f, ax=ax: getattr(m, f)(a3, axis=ax)
         for f in ("mean", "var", "std", "sum", "max")
         for ax in (1.0, np.float64(1.0), (1.0,), (0, np.float64(2.0)))]
    for case in cases:
        with pytest.raises(Exception) as want:
            case(np)
        with pytest.raises(type(want.value)) as got:
            case(jnp)
        assert str(want.value) in str(got.value), (str(want.value), str(got.value))
    same(jnp.concatenate([a3, b3], axis=-1, dtype=np.int8, casting="unsafe"),
         np.concatenate([a3, b3], axis=-1, dtype=np.int8, casting="unsafe"))
    for axis, shape in ((1, (2, 6, 4)), (None, (48,))):
        got, want = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        jnp.concatenate([a3, b3], axis=axis, out=got)
        np.concatenate([a3, b3], axis=axis, out=want)
        same(got, want)
    same(jnp.stack([a3, b3], axis=np.int64(-1), dtype=np.float32),
         np.stack([a3, b3], axis=np.int64(-1), dtype=np.float32))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("width", [2, (1, 3), ((0, 2), (7, 1)), ((3,), (0,))])
def test_pad(mode, width):
    x = rand(3, 4, dtype="float32")
    kw = {"constant_values": -2.5} if mode == "constant" else {}
    same(jnp.pad(x, width, mode=mode, **kw), np.pad(x, width, mode=mode, **kw))


def test_pad_ints_and_errors():
    x = rand(5, dtype="int8")
    same(jnp.pad(x, (2, 9), "reflect"), np.pad(x, (2, 9), "reflect"))
    same(jnp.pad(x, 3, constant_values=7), np.pad(x, 3, constant_values=7))
    e = raises_like(lambda: jnp.pad(x, -1), lambda: np.pad(x, -1))
    assert "index can't contain negative values" in str(e)
    z = np.array(2.0)       # (a 0-d array has no axis to pad: NumPy checks the widths given)
    for mode in ("constant", "edge", "reflect"):
        e = raises_like(lambda: jnp.pad(z, -1, mode), lambda: np.pad(z, -1, mode))
        assert "index can't contain negative values" in str(e)
    raises_like(lambda: jnp.pad(x, ((1, 2), (1, 1))), lambda: np.pad(x, ((1, 2), (1, 1))))
    raises_like(lambda: jnp.pad(x, 1.5), lambda: np.pad(x, 1.5))
    raises_like(lambda: jnp.pad(x[:0], 1, "edge"), lambda: np.pad(x[:0], 1, "edge"))
    y = np.zeros((2, 0))
    raises_like(lambda: jnp.pad(y, 1, "wrap"), lambda: np.pad(y, 1, "wrap"),
                match="empty axis 1 ")


def test_pad_values_keywords_and_numpys_modes():
    """The fill value cast as NumPy casts it into the array (a NaN into integers is its
    ValueError, -1 into uint8 wraps), keywords a mode does not take are NumPy's ValueError,
    dict pad widths; modes and options jitdl does not compile are NumPy's own."""
    a, i, u = rand(2, 3), np.arange(3), np.arange(3, dtype=np.uint8)
    for case in (lambda m: m.pad(u, 1, constant_values=-1),
                 lambda m: m.pad(i, 1, constant_values=2.7),
                 lambda m: m.pad(np.array([True, False]), 1, constant_values=2),
                 lambda m: m.pad(a, {1: (1, 2)}), lambda m: m.pad(a, {-1: 2, 0: (0, 1)}),
                 lambda m: m.pad(a, 1, mode="mean"),
                 lambda m: m.pad(a, 2, mode="reflect", reflect_type="odd"),
                 lambda m: m.pad(a, 1, constant_values=((1, 2), (3, 4))),
                 lambda m: m.pad(a, 1, mode="linear_ramp", end_values=5)):
        same(case(jnp), case(np))
    for case in (lambda m: m.pad(i, 1, constant_values=np.nan),
                 lambda m: m.pad(a, 1, mode="edge", constant_values=3),
                 lambda m: m.pad(a, 1, foo=1), lambda m: m.pad(a, 1, mode="bogus"),
                 lambda m: m.pad(i.astype(np.int8), 1, constant_values=300)):
        raises_like(lambda: case(jnp), lambda: case(np))

    @jd.compute
    def f(X):
        return jnp.pad(X, 1, mode="mean")
    with pytest.raises(TypeError, match="inside a definition jitdl pads with modes"):
        f(a)


@pytest.mark.parametrize("shift, axis", [(2, 1), (-7, 0), (3, None), ((1, -2), (0, 1)),
                                         (5, -1)])
def test_roll(shift, axis):
    x = rand(3, 4, dtype="int32")
    same(jnp.roll(x, shift, axis), np.roll(x, shift, axis))


def test_roll_reads_two_contiguous_pieces_per_row():
    """roll reads x at i + r below the axis length n, then at i + r - n (r = -shift % n):
    one select that loop partitioning splits, so the bulk of a row reads contiguous lanes
    (a modulo per element, or the select under a clamp for the prover, read each vector
    through a gather: 1e7 float32 on one thread 2x NumPy's time). Every element against
    NumPy for shifts of either sign, beyond the length, of the most negative int64, of
    several on one axis summing beyond int64 (wrong before: a 13-element vector rolled by
    (2**62,) * 3 on axis 0), for every axis and None (the flattened order, over the product of symbolic sizes), on
    empty to prime sizes, eagerly and in definitions of symbolic and static shapes."""
    rng = np.random.default_rng(11)
    for shape in [(0,), (1,), (13,), (4096 * 3 + 5,), (0, 3), (1, 1), (5, 7), (3, 5, 7)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for axis in [None, -1] + list(range(len(shape))):
            for shift in (1, -3, 13, -100, 2 ** 40 + 3, -2 ** 63):
                got = jnp.roll(x, shift, axis)
                assert got.dtype == x.dtype
                np.testing.assert_array_equal(got, np.roll(x, shift, axis))
    # (shifts of one axis summing beyond int64: NumPy's sum, modulo the length)
    for x in (rng.standard_normal(13), rng.standard_normal((3, 5))):
        for shift in ((2 ** 62,) * 3, (-2 ** 63,) * 3, (2 ** 63 - 1, 5)):
            axes = (-1,) * len(shift)
            np.testing.assert_array_equal(jnp.roll(x, shift, axes), np.roll(x, shift, axes))
    f = jd.compute(dynamic=True)(lambda X: jnp.roll(X, -3, axis=1))
    x = rng.standard_normal((5, 100))
    np.testing.assert_array_equal(f(x), np.roll(x, -3, axis=1))
    text = str(f.lower(x))
    assert re.search(r"= X\[idx0 \* X_n1 \+ \(idx1_i \+ idx1_o \* \d+ \+ 3 % X_n1\)\]", text), text
    assert re.search(r"= X\[idx0 \* X_n1 \+ \(idx1_i \+ idx1_o \* \d+ \+ 3 % X_n1 - X_n1\)\]",
                     text), text
    g = jd.compute(lambda X: jnp.roll(X, 7))
    x = rng.standard_normal(100003)
    np.testing.assert_array_equal(g(x), np.roll(x, 7))
    text = str(g.lower(x))
    assert "= X[idx0 + 99996]" in text and "= X[idx0 - 7]" in text, text


def test_roll_of_a_c_ordered_array_over_its_flattened_order_runs_on_the_flat_view(
        monkeypatch):
    """roll(a, s) of an n-d C-ordered a (axis=None) is roll(a.reshape(-1), s, 0) reshaped,
    NumPy's own definition: the flat view and the result's reshape are free, and the
    kernel of one axis reads two contiguous pieces (over n-d indices each read's bounds
    were checked at run time: a (100, 1000) float32 on one thread 0.15-0.18x NumPy's
    speed, now about 1x). Non-contiguous arrays keep the n-d kernel; every element
    against NumPy."""
    from jitdl.numpy import _manipulation
    seen = []
    apply = _manipulation.apply

    def recording(name, builder, operands, *args, **kwargs):
        seen.append(np.ndim(operands[0]))
        return apply(name, builder, operands, *args, **kwargs)
    monkeypatch.setattr(_manipulation, "apply", recording)
    rng = np.random.default_rng(12)
    for shape in [(5, 7), (3, 5, 7), (0, 3), (1, 1), (100, 1000)]:
        x = rng.standard_normal(shape).astype(np.float32)
        for shift in (7, -3, 2 ** 40 + 3, (1, 2)):
            seen.clear()
            np.testing.assert_array_equal(jnp.roll(x, shift), np.roll(x, shift))
            assert seen == [1], (shape, shift, seen)
        t = x.T
        if t.ndim > 1 and not t.flags.c_contiguous:
            seen.clear()
            np.testing.assert_array_equal(jnp.roll(t, 5), np.roll(t, 5))
            assert seen == [t.ndim]
    big_endian = rng.standard_normal((4, 6)).astype(">f8")
    got = jnp.roll(big_endian, 5)
    np.testing.assert_array_equal(got, np.roll(big_endian, 5))
    assert got.dtype == big_endian.dtype


def test_flattened_reads_of_symbolic_sizes_are_not_checked_at_run_time():
    """A reshape between a flat axis of n0 * n1 (* n2) elements and its n-d shape over
    symbolic sizes read at `i * X_n1 + j` (or `k // X_n1`), and checked each read's
    bounds at run time: roll(a, 7) of a transposed or sliced (1000, 1000) float32 on one
    thread 0.2-0.6x NumPy's speed, about 0.8-1x now that the prover places a row-major
    position in a product of sizes. Every element against NumPy, for empty to prime
    shapes and views; the lowered kernels have no checked read."""
    rng = np.random.default_rng(13)
    roll = jd.compute(dynamic=True)(lambda X: jnp.roll(X, 7))
    there = jd.compute(dynamic=True)(lambda X: jnp.reshape(jnp.ravel(X) * 2.0, X.shape))
    for shape in [(0, 3), (2, 1), (5, 7), (13, 11), (3, 5, 7), (2, 0, 4), (40, 30)]:
        x = rng.standard_normal(shape)
        for v in (x, x.T, x[..., ::2], x[::-1]):
            np.testing.assert_array_equal(jnp.roll(v, 7), np.roll(v, 7))
            np.testing.assert_array_equal(jnp.roll(v, -3), np.roll(v, -3))
            np.testing.assert_array_equal(roll(v), np.roll(v, 7))
            np.testing.assert_array_equal(there(v), v * 2.0)
    for f in (roll, there):
        for shape in [(5, 7), (3, 5, 7)]:
            text = str(f.lower(rng.standard_normal(shape)))
            assert "X_n1" in text and "]!" not in text, text


def test_roll_by_shifts_beyond_int64_on_a_symbolic_axis():
    """A shift beyond int64 (2**64 + 1, of a uint64) on an axis of symbolic length is
    taken modulo the length as NumPy takes it: each is split into int64 pieces (its Const
    wrapped before: roll(X, 2**64 + 1) of 7 elements rolled by 1, not 4); one too large
    to split is a jitdl error naming the shift."""
    x = np.arange(7.0)
    for shift in (2 ** 64 + 1, -2 ** 63 - 1, (2 ** 63, 1), (2 ** 65 + 3, -2 ** 64)):
        np.testing.assert_array_equal(_roll_sym(x, shift), np.roll(x, shift))
    with pytest.raises(jd.errors.ArgumentError, match=r"shift: .* got 2361183241434822606848"):
        _roll_sym(x, 2 ** 71)


def _roll_sym(x, shift):
    return jd.compute(dynamic=True)(lambda X: jnp.roll(X, shift))(x)


@pytest.mark.parametrize("shape, ind, axis, mode", [
    ((5,), [0, 4, -1, -5, 2], None, "raise"), ((3, 4), [[1, -1], [0, 2]], 1, "raise"),
    ((3, 4), 7, None, "raise"), ((3, 4, 2), [2, 0], -3, "raise"),
    ((3, 4), [9, -7, 3], 0, "wrap"), ((3, 4), [9, -7, 3], 1, "clip"),
])
def test_take(shape, ind, axis, mode):
    x = rand(*shape)
    ind = ind if isinstance(ind, int) else np.array(ind, dtype="int32")
    got, ref = jnp.take(x, ind, axis=axis, mode=mode), np.take(x, ind, axis=axis, mode=mode)
    same(got, ref)
    assert type(got) is type(ref)           # a NumPy scalar for one index, as NumPy gives


def test_take_modes_of_one_element_get_their_own_kernels():
    """take of a one-element array reads a[0] in every mode, mode 'raise' checking the
    index at run time on that read: the loop IR prints the check, so the kernel cache
    (keyed by the loop IR) does not hand mode 'clip' the kernel of 'raise'."""
    for a in (np.array(True), np.array([[2.5]], np.float32)):
        same(jnp.take(a, [0, 0]), np.take(a, [0, 0]))
        for mode in ("clip", "wrap"):
            same(jnp.take(a, [3, -1, 0], mode=mode), np.take(a, [3, -1, 0], mode=mode))
        raises_like(lambda: jnp.take(a, [3, 0]), lambda: np.take(a, [3, 0]))


def test_take_errors():
    x = rand(3, 5)
    e = raises_like(lambda: jnp.take(x, np.array([0, 7]), axis=1),
                    lambda: np.take(x, np.array([0, 7]), axis=1))
    assert str(e) == "index 7 is out of bounds for axis 1 with size 5"
    e = raises_like(lambda: jnp.take(x, [-16]), lambda: np.take(x, [-16]))
    assert str(e) == "index -16 is out of bounds for axis 0 with size 15"
    e = raises_like(lambda: jnp.take(x, 3, axis=0), lambda: np.take(x, 3, axis=0))
    assert str(e) == "index 3 is out of bounds for axis 0 with size 3"
    e = raises_like(lambda: jnp.take(x[:0], [0]), lambda: np.take(x[:0], [0]))
    assert "cannot do a non-empty take from an empty axes." in str(e)
    same(jnp.take(x[:0], np.array([], dtype="int64"), axis=0), x[:0])
    raises_like(lambda: jnp.take(x, np.array([1.0])), lambda: np.take(x, np.array([1.0])))
    raises_like(lambda: jnp.take(x, [1], axis=2), lambda: np.take(x, [1], axis=2))


@pytest.mark.parametrize("shape, repeats, axis", [
    ((3, 4), 2, None), ((3, 4), 3, -1), ((3, 4), (1, 0, 2), 0), ((2, 3), (2, 1, 3, 0, 1, 1), None),
])
def test_repeat(shape, repeats, axis):
    x = rand(*shape, dtype="int16")
    same(jnp.repeat(x, repeats, axis), np.repeat(x, repeats, axis))


def test_repeat_errors():
    x = rand(3)
    raises_like(lambda: jnp.repeat(x, (1, 2)), lambda: np.repeat(x, (1, 2)))
    raises_like(lambda: jnp.repeat(x, -1), lambda: np.repeat(x, -1))
    # per-element counts with an axis out of range: NumPy's AxisError (was IndexError:
    # tuple index out of range); a negative axis in range counts from the end
    y = rand(3, 4)
    for axis in (2, -3):
        e = raises_like(lambda: jnp.repeat(y, [1, 0, 2], axis),
                        lambda: np.repeat(y, [1, 0, 2], axis))
        assert isinstance(e, np.exceptions.AxisError) and "out of bounds" in str(e)
    same(jnp.repeat(y, [1, 0, 2], -2), np.repeat(y, [1, 0, 2], -2))


@pytest.mark.parametrize("axis", [0, -1, 1, -2])
def test_axis_zero_of_a_zero_d_array_in_definitions(axis):
    """NumPy repeats a 0-d array as a 1-d one and squeezes it with axis 0 or -1."""
    x = np.array(rand(1)[0])
    for mine, ref in [(lambda a: jnp.repeat(a, 3, axis=axis), lambda a: np.repeat(a, 3, axis)),
                      (lambda a: jnp.squeeze(a, axis=axis), lambda a: np.squeeze(a, axis))]:
        if axis in (0, -1):
            same(jd.compute(mine)(x), ref(x))
        else:
            raises_like(lambda: jd.compute(mine)(x), lambda: ref(x))


@pytest.mark.parametrize("axes", [-1, -3, 0, 1])
def test_tensordot_axes_counts(axes):
    a, b = rand(2, 3), rand(3, 4)       # a negative count contracts nothing, as NumPy's
    same(jnp.tensordot(a, b, axes=axes), np.tensordot(a, b, axes=axes))


@pytest.mark.parametrize("axes", [(np.array([1]), np.array([0])), (range(1, 2), [0]),
                                  ([np.int64(1)], (np.int32(0),))])
def test_tensordot_axes_as_arrays_and_ranges(axes):
    """Each side of the axes pair is any sequence NumPy takes (an array of ints, a range),
    its NumPy integers too; an array of them was an unhashable static argument."""
    a, b = rand(3, 4), rand(4, 5)
    same(jnp.tensordot(a, b, axes), np.tensordot(a, b, axes))
    same(jd.compute(lambda A, B: jnp.tensordot(A, B, axes))(a, b), np.tensordot(a, b, axes))


def test_tensordot_axes_as_a_0d_array():
    """axes=np.array(2) is NumPy's axes=2 (it takes range(axes)); it raised 'axes must be
    an int or a pair' (found by review). A 0-d float array stays NumPy's TypeError."""
    a, b = rand(3, 4, 5), rand(4, 5, 6)
    for axes in (np.array(2), np.array(0), np.array(2, np.int8)):
        same(jnp.tensordot(a, b, axes), np.tensordot(a, b, axes))
    same(jd.compute(lambda A, B: jnp.tensordot(A, B, np.array(2)))(a, b), np.tensordot(a, b, 2))
    raises_like(lambda: jnp.tensordot(a, b, np.array(2.0)),
                lambda: np.tensordot(a, b, np.array(2.0)))


@pytest.mark.parametrize("shape, reps", [((3, 4), 2), ((3, 4), (2, 1)), ((3,), (2, 1, 3)),
                                         ((2, 1, 3), (2, 2)), ((3, 4), (0, 2))])
def test_tile(shape, reps):
    x = rand(*shape, dtype="bool")
    same(jnp.tile(x, reps), np.tile(x, reps))


def test_copy_and_astype():
    x = rand(3, 4)
    got = jnp.copy(x)
    same(got, x)
    assert not np.shares_memory(got, x)
    for dt in ("int8", "float32", "bool"):
        same(jnp.astype(x, dt), x.astype(dt))
    same(jnp.astype(np.abs(x), "uint8"), np.abs(x).astype("uint8"))
    y = rand(5, dtype="float32")
    assert jnp.astype(y, "float32", copy=False) is y


def test_copy_and_broadcast_to_take_subok():
    """np.copy's and np.broadcast_to's subok= keyword: jnp.copy(a, subok=True) and
    jnp.broadcast_to(a, shape, subok=True) were TypeErrors (unexpected keyword). A
    subclass (a masked array) is kept with subok=True and made a base ndarray
    without, as NumPy does; a plain array is copied by the kernel either way."""
    x = rand(3, 4)
    masked = np.ma.masked_array(x, rand(3, 4) > 0)
    for a in (masked, x):
        for subok in (False, True):
            got, want = jnp.copy(a, subok=subok), np.copy(a, subok=subok)
            assert type(got) is type(want)
            same(np.asarray(got), np.asarray(want))
            assert not np.shares_memory(got, a)
            got = jnp.broadcast_to(a[:1], (2, 4), subok=subok)
            want = np.broadcast_to(a[:1], (2, 4), subok=subok)
            assert type(got) is type(want)
            same(np.asarray(got), np.asarray(want))
    assert np.ma.getmask(jnp.copy(masked, subok=True)).tolist() == masked.mask.tolist()
    f = jd.compute(lambda X: jnp.broadcast_to(X, (2, 3, 4), subok=True) * 2.0)
    same(f(x), np.broadcast_to(x, (2, 3, 4)) * 2.0)


BIG = [
    lambda m, X, Y, I: m.pad(X, 8),       # a combined condition here once read garbage
    lambda m, X, Y, I: m.pad(X, ((3, 140), (17, 200)), "reflect"),
    lambda m, X, Y, I: m.concatenate([X, Y, X], 1),
    lambda m, X, Y, I: m.roll(X, (5, -77), (0, 1)),
    lambda m, X, Y, I: m.take(X, I, axis=1),
    lambda m, X, Y, I: m.repeat(X, 3, axis=1),
    lambda m, X, Y, I: m.tile(X, (2, 3)),
]


@pytest.mark.parametrize("case", range(len(BIG)))
def test_moving_ops_vectorised(case):
    """Shapes past several vector widths (the vector code paths)."""
    X, Y = rand(129, 128, dtype="float32"), rand(129, 37)
    I = rng.integers(-128, 128, (50, 3))
    same(BIG[case](jnp, X, Y, I), BIG[case](np, X, Y, I))


# -- each data-moving op inside a definition, fused with another ------------------------------
def test_moving_ops_in_definitions():
    a, b = rand(3, 4), rand(3, 2, dtype="float32")
    ind = np.array([[2, -1], [0, 1]])

    cases = [
        (lambda X, Y: jnp.exp(jnp.concatenate([X, Y], axis=1)),
         lambda X, Y: np.exp(np.concatenate([X, Y], axis=1))),
        (lambda X, Y: jnp.add(jnp.stack([X, X], axis=1), 1.5),
         lambda X, Y: np.stack([X, X], axis=1) + 1.5),
        (lambda X, Y: jnp.exp(jnp.hstack([Y, X])), lambda X, Y: np.exp(np.hstack([Y, X]))),
        (lambda X, Y: jnp.negative(jnp.vstack([jnp.ravel(Y), jnp.ravel(jnp.transpose(Y))])),
         lambda X, Y: -np.vstack([Y.ravel(), Y.T.ravel()])),
        (lambda X, Y: jnp.exp(jnp.pad(X, ((1, 0), (2, 3)), mode="reflect")),
         lambda X, Y: np.exp(np.pad(X, ((1, 0), (2, 3)), mode="reflect"))),
        (lambda X, Y: jnp.multiply(jnp.pad(Y, 1, constant_values=3.0), 2.0),
         lambda X, Y: np.pad(Y, 1, constant_values=3.0) * 2.0),
        (lambda X, Y: jnp.exp(jnp.roll(X, 3, axis=1)), lambda X, Y: np.exp(np.roll(X, 3, axis=1))),
        (lambda X, Y: jnp.exp(jnp.repeat(X, 2, axis=0)),
         lambda X, Y: np.exp(np.repeat(X, 2, axis=0))),
        (lambda X, Y: jnp.exp(jnp.repeat(X, (2, 0, 1), axis=0)),
         lambda X, Y: np.exp(np.repeat(X, (2, 0, 1), axis=0))),
        (lambda X, Y: jnp.exp(jnp.tile(Y, (2, 3))), lambda X, Y: np.exp(np.tile(Y, (2, 3)))),
        (lambda X, Y: jnp.exp(jnp.copy(X)), lambda X, Y: np.exp(X)),
        (lambda X, Y: jnp.add(jnp.astype(X, "int32"), 1), lambda X, Y: X.astype("int32") + 1),
    ]
    for fn, ref in cases:
        same(jd.compute(fn)(a, b), ref(a, b), tol=1e-6)

    @jd.compute
    def gather(X, I):
        return jnp.exp(jnp.take(X, I, axis=1))
    same(gather(a, ind), np.exp(np.take(a, ind, axis=1)))
    with pytest.raises(IndexError, match="outside"):        # the kernel's own check
        gather(a, np.array([[4]]))


# -- products --------------------------------------------------------------------------------
@pytest.mark.parametrize("sa, sb", [
    ((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,)),
    ((2, 3, 4), (4, 5)), ((2, 1, 3, 4), (5, 4, 2)), ((3, 4), (2, 4, 5)), ((1, 4), (4, 1)),
])
def test_matmul_shapes(sa, sb):
    a, b = rand(*sa), rand(*sb)
    got, ref = jnp.matmul(a, b), np.matmul(a, b)
    same(got, ref)
    assert type(got) is type(ref)


@pytest.mark.parametrize("da, db", [("float32", "float32"), ("int8", "int8"),
                                    ("int8", "uint8"), ("bool", "bool"), ("int32", "float32"),
                                    ("bool", "float64")])
def test_matmul_dtypes(da, db):
    a, b = rand(5, 7, dtype=da), rand(7, 3, dtype=db)
    with np.errstate(over="ignore"):
        ref = np.matmul(a, b)
    same(jnp.matmul(a, b), ref, tol=1e-5)


def test_matmul_errors():
    a = rand(2, 3)
    e = raises_like(lambda: jnp.matmul(a, rand(4, 2)), lambda: np.matmul(a, rand(4, 2)))
    assert str(e).startswith("matmul: Input operand 1 has a mismatch in its core dimension 0, "
                             "with gufunc signature (n?,k),(k,m?)->(n?,m?) (size 4 is "
                             "different from 3)")
    e = raises_like(lambda: jnp.matmul(2.0, a), lambda: np.matmul(2.0, a))
    assert "Input operand 0 does not have enough dimensions" in str(e)
    raises_like(lambda: jnp.matmul(rand(2, 2, 3), rand(3, 3, 2)),
                lambda: np.matmul(rand(2, 2, 3), rand(3, 3, 2)))


def test_matmul_out():
    a, b = rand(3, 4), rand(4, 2)
    out = np.empty((3, 2))
    assert jnp.matmul(a, b, out=out) is out
    same(out, a @ b)


def test_outer_and_take_out_follow_numpy():
    """outer's out= may be larger than the result (it broadcasts, as multiply's); take casts
    into its out= whatever the kinds (uint8 wraps as in NumPy)."""
    a, b = rand(3), rand(4)
    got, want = np.full((2, 3, 4), 7.0), np.full((2, 3, 4), 7.0)
    assert jnp.outer(a, b, out=got) is got
    same(got, np.outer(a, b, out=want))
    raises_like(lambda: jnp.outer(a, b, out=np.empty((3, 1))),
                lambda: np.outer(a, b, out=np.empty((3, 1))))
    x = np.array([300, -1, 7])
    for src, dt in ((x, np.uint8), (x, np.int16), (x + 0.5, np.int64), (x, np.float32),
                    (a, np.float16), ([1.5, 2.5, 3.5], np.int32)):
        got, want = np.zeros(2, dt), np.zeros(2, dt)
        try:
            np.take(src, [2, 0], out=want)
        except TypeError:
            raises_like(lambda: jnp.take(src, [2, 0], out=got),
                        lambda: np.take(src, [2, 0], out=want))
            continue
        assert jnp.take(src, [2, 0], out=got) is got
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("fn, sa, sb, extra", [
    ("dot", (4,), (4,), ()), ("dot", (3, 4), (4, 5), ()), ("dot", (2, 3, 4), (4,), ()),
    ("dot", (4,), (2, 4, 3), ()), ("dot", (2, 3, 4), (5, 4, 2), ()), ("dot", (3,), (), ()),
    ("vdot", (3, 4), (12,), ()), ("inner", (3, 4), (2, 4), ()), ("inner", (4,), (4,), ()),
    ("outer", (3,), (2, 2), ()), ("tensordot", (2, 3, 4), (3, 4, 5), ()),
    ("tensordot", (2, 3, 4), (4, 2), (((0, 2), (1, 0)),)), ("tensordot", (3, 4), (5,), (0,)),
])
def test_products(fn, sa, sb, extra):
    a, b = rand(*sa), rand(*sb) if sb else 2.5
    got, ref = getattr(jnp, fn)(a, b, *extra), getattr(np, fn)(a, b, *extra)
    same(got, ref)
    assert type(got) is type(ref)


def test_product_dtypes():
    a, b = rand(3, 4, dtype="int16"), rand(4, dtype="int8")
    same(jnp.dot(a, b), np.dot(a, b))
    x, y = rand(3, dtype="float32"), rand(3, dtype="float32")
    same(jnp.inner(x, y), np.inner(x, y), tol=1e-5)
    p, q = rand(3, dtype="bool"), rand(4, dtype="bool")
    same(jnp.outer(p, q), np.outer(p, q))


def test_product_errors():
    a = rand(2, 3)
    e = raises_like(lambda: jnp.dot(a, rand(4, 2)), lambda: np.dot(a, rand(4, 2)))
    assert str(e).startswith("shapes (2,3) and (4,2) not aligned: 3 (dim 1) != 4 (dim 0)")
    raises_like(lambda: jnp.inner(rand(3), rand(4)), lambda: np.inner(rand(3), rand(4)))
    raises_like(lambda: jnp.vdot(rand(3), rand(4)), lambda: np.vdot(rand(3), rand(4)))
    e = raises_like(lambda: jnp.tensordot(a, rand(4, 2), 1),
                    lambda: np.tensordot(a, rand(4, 2), 1))
    assert "shape-mismatch for sum" in str(e)


@pytest.mark.parametrize("sub, shapes", [
    ("ij,jk->ik", ((3, 4), (4, 5))), ("bij,bjk->bik", ((2, 3, 4), (2, 4, 5))),
    ("ii->i", ((4, 4),)), ("ij->", ((3, 4),)), ("i,i->", ((5,), (5,))), ("ij,jk", ((3, 4), (4, 2))),
    ("ij->ji", ((3, 4),)), ("ij", ((3, 4),)), ("ji", ((3, 4),)), ("ii", ((3, 3),)),
    ("i,j->ij", ((3,), (4,))), ("ijk,ik->j", ((2, 3, 4), (2, 4))), (" ij , jk -> ki ", ((2, 3), (3, 2))),
])
def test_einsum(sub, shapes):
    xs = [rand(*s) for s in shapes]
    got, ref = jnp.einsum(sub, *xs), np.einsum(sub, *xs)
    same(got, ref)


def test_one_operand_permutations_are_numpys_views():
    """einsum of one array that only reorders its axes ('ijk->kji', implicit 'kji', 'ij')
    is NumPy's view of it, as np.einsum returns (2.4 -> 0.7 us at 25 x 40); inside a
    definition it is computed; sums stay copies."""
    a = rand(2, 3, 4)
    for sub in ("ijk->kji", "kji", "ijk", "ijk->ijk", "jik->kij", "ijK->Kji", "Aij->ijA"):
        got, want = jnp.einsum(sub, a), np.einsum(sub, a)
        same(got, want)
        assert np.shares_memory(got, a) and got.strides == want.strides, sub
    same(jnp.einsum("ijk->ij", a), np.einsum("ijk->ij", a))
    for sub in ("ijk->kjl", "ij->ji"):
        raises_like(lambda: jnp.einsum(sub, a), lambda: np.einsum(sub, a))
    for sub in ("\u00e9jk", "ij\u00e9->\u00e9ji"):   # (labels are ASCII letters: a ValueError)
        for fn in (np.einsum, jnp.einsum):
            with pytest.raises(ValueError):
                fn(sub, a)

    @jd.compute
    def f(X):
        return jnp.einsum("ij->ji", X) * 2
    m = rand(3, 5)
    same(f(m), m.T * 2)


@pytest.mark.parametrize("sub, shapes", [
    ("ik,jk->ij", ((37, 19), (45, 19))), ("ki,jk->ij", ((19, 37), (45, 19))),
    ("bik,bjk->bij", ((3, 20, 16), (3, 33, 16))), ("ijk,lk->ijl", ((4, 9, 13), (21, 13))),
    ("ik,jk->ji", ((30, 7), (26, 7))), ("kj,ik->ij", ((5, 40), (33, 5))),
    ("ij,j->i", ((30, 40), (40,))), ("bij,bj->bi", ((3, 20, 24), (3, 24))),
    ("jik,lk->ilj", ((5, 7, 9), (11, 9))), ("ik,jk,->ij", ((6, 5), (7, 5), ())),
])
@pytest.mark.parametrize("dt", ["float64", "float32", "int32"])
def test_einsum_reading_an_operand_across_the_output_rows(sub, shapes, dt):
    """Contractions whose operand holds the output's last axis in another place than its
    last (B[j, k] of "ik,jk->ij") read a transposed view of it (jitdl.ops.linalg's
    _output_last): values, dtypes and every element written, at sizes off the register
    tile's multiples."""
    rng = np.random.default_rng(len(sub))
    xs = [(rng.standard_normal(s) * 3).astype(dt) for s in shapes]
    got, ref = jnp.einsum(sub, *xs), np.einsum(sub, *xs)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4 if dt == "float32" else 1e-12,
                               atol=1e-3 if dt == "float32" else 1e-10)


@pytest.mark.parametrize("sub, shapes", [
    ("...i", ((2, 3),)), ("i...->...", ((2, 3),)), ("...ij,...jk->...ik", ((2, 3, 4), (4, 5))),
    ("...ij,...jk", ((2, 3, 4), (1, 4, 5))), ("ij...,jk...->ik...", ((3, 4, 2), (4, 5, 2))),
    ("...,...", ((3,), (2, 3))), ("i...j,j...->i...", ((2, 3, 4), (4, 3))),
    ("a...a->...a", ((3, 2, 3),)), ("...", ((2, 3),)), ("...ij->...ji", ((2, 1, 3, 4),)),
    ("b...i,b...i->b...", ((2, 1, 3, 4), (2, 5, 1, 4))), ("...ii->...i", ((2, 3, 3),)),
    ("...ab,...bc->...ac", ((5, 1, 2, 3), (1, 6, 3, 2))), ("i...", ((4,),)),
])
def test_einsum_ellipsis(sub, shapes):
    xs = [rand(*s) for s in shapes]
    same(jnp.einsum(sub, *xs), np.einsum(sub, *xs))


def test_einsum_ellipsis_errors_and_casting():
    x, i = rand(2, 3, 4), rand(4, 2, dtype="int32")
    for sub, ops in [("...ij,...jk", (x, rand(3, 4, 5))), (".i", (x[0],)),
                     ("...i->i", (x,)), ("i...,...->", (x[0], rand(3)))]:
        raises_like(lambda: jnp.einsum(sub, *ops), lambda: np.einsum(sub, *ops))
    for kw in ({"dtype": "float32", "casting": "same_kind"}, {"dtype": "int32",
                                                             "casting": "unsafe"},
               {"casting": "safe", "dtype": "float64"}):
        same(jnp.einsum("...ij,jk", x, i, **kw), np.einsum("...ij,jk", x, i, **kw), 1e-5)
    for kw in ({"dtype": "float32"}, {"casting": "no"}, {"out": np.empty((2, 3, 2), "f4")}):
        e = raises_like(lambda: jnp.einsum("...ij,jk", x, i, **kw),
                        lambda: np.einsum("...ij,jk", x, i, **kw))
        assert "cast" in str(e)


def test_einsum_dtypes_and_errors():
    a, b = rand(3, 4, dtype="int8"), rand(4, 2, dtype="bool")
    same(jnp.einsum("ij,jk->ik", a, b), np.einsum("ij,jk->ik", a, b))
    p = rand(3, 4, dtype="bool")
    same(jnp.einsum("ij,jk", p, b), np.einsum("ij,jk", p, b))
    x = rand(2, 3)
    e = raises_like(lambda: jnp.einsum("ij,jk->ik", x, rand(4, 2)),
                    lambda: np.einsum("ij,jk->ik", x, rand(4, 2)))
    assert "Size of label 'j' for operand 1 (4) does not match previous terms (3)" in str(e)
    for sub, ops in [("ij,jk->il", (x, rand(3, 2))),
                     ("ijk", (x,)), ("i", (x,)), ("i1", (x,)),
                     ("ij->ii", (x,)), ("ii->i", (x,))]:
        e = raises_like(lambda: jnp.einsum(sub, *ops), lambda: np.einsum(sub, *ops))
        with pytest.raises(Exception) as ref:
            np.einsum(sub, *ops)
        assert str(e).split("\n")[0] == str(ref.value), (sub, str(e))
    # NumPy 2.4 says "more operands" where there are fewer, and "fewer" where more
    with pytest.raises(ValueError, match="fewer operands provided to einstein sum"):
        jnp.einsum("ij,jk", x)
    with pytest.raises(ValueError, match="more operands provided to einstein sum"):
        jnp.einsum("ij", x, x)


def test_einsum_sublist_form():
    """NumPy's einsum(op0, sublist0, op1, sublist1, [out]): ints 0-51 and Ellipsis, implicit
    output in NumPy's label order (0-25 before 26-51), eagerly and in a definition."""
    a, b, c = rand(3, 4), rand(4, 5), rand(2, 3, 4)
    for args in [(a, [0, 1], b, [1, 2], [0, 2]), (a, [0, 1], b, [1, 2]), (a, [30, 0]),
                 (a, [0, 30]), (c, [Ellipsis, 1], [1, Ellipsis]), (a, [5, 5 + 26], b, [31, 7]),
                 (c, [0, 1, 2], a, [1, 2], [0])]:
        same(jnp.einsum(*args), np.einsum(*args))
    f = jd.compute(lambda X, Y: jnp.einsum(X, [4, 1], Y, [1, 40]))
    same(f(a, b), np.einsum(a, [4, 1], b, [1, 40]))
    for bad in ([0, 60], [0, 1.0], [0, True], [0, -1], "ab"):
        raises_like(lambda: jnp.einsum(a, bad), lambda: np.einsum(a, bad))


def test_einsum_sublist_form_edges():
    """A lone int is not a sublist (NumPy's TypeError; it read as one label), an operand
    with no sublist is NumPy's ValueError, two ellipses in one list its ValueError, and
    a 0-d integer array is a label as in NumPy (found by review)."""
    a, v, c = rand(3, 4), rand(4), rand(2, 3, 4)
    for args in [(v, 0), (a, np.int64(0)), (a, np.array(0)), (a, [0, 1], 5), (a,),
                 (c, [Ellipsis, 1], [Ellipsis, Ellipsis]), (c, [Ellipsis, 0, Ellipsis])]:
        e = raises_like(lambda: jnp.einsum(*args), lambda: np.einsum(*args))
        with pytest.raises(Exception) as want:
            np.einsum(*args)
        assert str(want.value) in str(e)
    for args in [(a, [np.array(0), 1]), (a, (np.int8(1), 0)), (a, np.array([1, 0]), [0])]:
        same(jnp.einsum(*args), np.einsum(*args))


def test_einsum_order():
    """np.einsum's order= keyword ('C', 'F', 'A', 'K', None): jnp.einsum(..., order='C')
    was a TypeError (unexpected keyword). A new result is laid out as NumPy's, a permuted
    operand stays NumPy's view whatever the order, a bad order is NumPy's error; inside
    a definition the order has no layout to choose."""
    a, b = rand(3, 4), rand(4, 5)
    same(jnp.einsum("ij,jk->ik", a, np.asfortranarray(b), order="A"), a @ b)
    for order in ["C", "F", "A", "K", None, "f"]:
        for x in (a, np.asfortranarray(a)):
            for sub, ops in [("ij,jk->ik", (x, b)), ("ij->ji", (x,)), ("ij->i", (x,)),
                             ("ij,kj->ki", (x, x))]:
                got, want = jnp.einsum(sub, *ops, order=order), np.einsum(sub, *ops, order=order)
                same(got, want)
                if order not in ("K", None) or sub == "ij->ji":     # (K: nditer's choice)
                    assert (got.flags.c_contiguous, got.flags.f_contiguous) == \
                        (want.flags.c_contiguous, want.flags.f_contiguous), (sub, order)
    for bad in ["X", 1]:
        raises_like(lambda: jnp.einsum("ij", a, order=bad), lambda: np.einsum("ij", a, order=bad))
    f = jd.compute(lambda X, Y: jnp.einsum("ij,jk->ik", X, Y, order="F") + 1.0)
    same(f(a, b), a @ b + 1.0)


def test_products_in_definitions():
    a, w, bias = rand(3, 4), rand(4, 5), rand(5)
    v = rand(4)
    cases = [
        (lambda A, W, b: jnp.add(jnp.matmul(A, W), b), lambda A, W, b: A @ W + b),
        (lambda A, W, b: jnp.exp(jnp.dot(A, jnp.transpose(A))), lambda A, W, b: np.exp(A @ A.T)),
        (lambda A, W, b: jnp.add(jnp.vdot(A, A), 1.0), lambda A, W, b: np.vdot(A, A) + 1.0),
        (lambda A, W, b: jnp.exp(jnp.inner(A, A)), lambda A, W, b: np.exp(np.inner(A, A))),
        (lambda A, W, b: jnp.add(jnp.outer(b, b), 1.0), lambda A, W, b: np.outer(b, b) + 1.0),
        (lambda A, W, b: jnp.negative(jnp.tensordot(A, W, 1)), lambda A, W, b: -np.tensordot(A, W, 1)),
        (lambda A, W, b: jnp.add(jnp.einsum("ij,jk->ik", A, W), b),
         lambda A, W, b: np.einsum("ij,jk->ik", A, W) + b),
        (lambda A, W, b: jnp.exp(jnp.einsum("ij->j", A)), lambda A, W, b: np.exp(A.sum(0))),
    ]
    for fn, ref in cases:
        same(jd.compute(fn)(a, w, bias), ref(a, w, bias))

    @jd.compute
    def mv(A, x):
        return jnp.exp(jnp.matmul(A, x))
    same(mv(a, v), np.exp(a @ v))


_KEEP = {"root", "parallel", "vectorized", "unrolled", "schedule", "steps", "inline", "at"}


def _shape_of_schedule(text):
    """A schedule's text with its names replaced by their order of appearance (the .o/.i
    suffixes of split loops kept)."""
    names = {}

    def rename(m):
        w = m.group()
        suffix = m.start() > 0 and text[m.start() - 1] == "." and w in ("o", "i") and \
            not text[m.end():m.end() + 1] == "."
        return w if suffix or w in _KEEP else names.setdefault(w, f"n{len(names)}")
    return re.sub(r"[A-Za-z_]\w*", rename, text)


@pytest.mark.parametrize("n", [64, 96])
def test_matmul_schedule_is_the_hand_written_ones(n):
    a, b = rand(n, n, dtype="float32"), rand(n, n, dtype="float32")

    @jd.compute
    def hand(A, B):
        k = jd.reduce_axis(A.shape[1])
        return jd.tensor((A.shape[0], B.shape[1]), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k))
    built = eager._function("matmul", linalg.matmul, (), ("x1", "x2"))
    s1, s2 = str(built.schedule_of(a, b)), str(hand.schedule_of(a, b))
    assert "unrolled" in s1          # register-tiled
    assert _shape_of_schedule(s1) == _shape_of_schedule(s2), (s1, s2)


def test_matmul_bias_schedule_is_the_hand_written_ones():
    """The bias epilogue is tiled with the product, as for a hand-written definition."""
    a, bias = rand(64, 64, dtype="float32"), rand(64, dtype="float32")

    @jd.compute
    def built(A, B, b):
        return jnp.add(jnp.matmul(A, B), b)

    @jd.compute
    def hand(A, B, b):
        k = jd.reduce_axis(A.shape[1])
        C = jd.tensor((A.shape[0], B.shape[1]), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k))
        return jd.tensor(C.shape, lambda i, j: C[i, j] + b[j])
    s1, s2 = str(built.schedule_of(a, a, bias)), str(hand.schedule_of(a, a, bias))
    assert "at " in s1 and "unrolled" in s1
    assert _shape_of_schedule(s1) == _shape_of_schedule(s2), (s1, s2)
    same(built(a, a, bias), a @ a + bias, tol=1e-4)


# -- the namespace ---------------------------------------------------------------------------
@pytest.mark.parametrize("mod", [_manipulation, _linalg])
def test_status_lists_every_export(mod):
    assert set(mod.STATUS) == set(mod.__all__)
    for name in mod.__all__:
        fn = getattr(jnp, name)
        assert fn.__doc__ and fn.__doc__.strip(), name
        assert mod.STATUS[name].startswith(("done", "partial")), name


# -- symbolic extents: one kernel per pattern, not per shape -----------------------------------
def _shapes(count, ndim=2, lo=2, hi=40):
    """`count` distinct random shapes without dimensions of 0 or 1 (one size pattern)."""
    out = set()
    while len(out) < count:
        out.add(tuple(int(n) for n in rng.integers(lo, hi, ndim)))
    return sorted(out)


ANY_SIZE = [
    ("concatenate", lambda m, X, Y: m.concatenate([X, Y, X], axis=1)),
    ("concatenate", lambda m, X, Y: m.concatenate([X, Y], axis=None)),
    ("stack", lambda m, X, Y: m.stack([X, X], axis=1)),
    ("hstack", lambda m, X, Y: m.hstack([Y, X])),
    ("vstack", lambda m, X, Y: m.vstack([X, X])),
    ("pad", lambda m, X, Y: m.pad(X, ((1, 2), (3, 0)), constant_values=-1.5)),
    ("pad", lambda m, X, Y: m.pad(X, ((2, 1), (0, 3)), mode="edge")),
    ("pad", lambda m, X, Y: m.pad(X, ((1, 4), (5, 2)), mode="reflect")),
    ("pad", lambda m, X, Y: m.pad(X, ((3, 45), (1, 1)), mode="symmetric")),
    ("pad", lambda m, X, Y: m.pad(X, ((50, 2), (3, 1)), mode="wrap")),
    ("roll", lambda m, X, Y: m.roll(X, -3, axis=1)),
    ("roll", lambda m, X, Y: m.roll(X, (7, -50), axis=(0, 1))),
    ("roll", lambda m, X, Y: m.roll(X, -11)),
    ("take", lambda m, X, Y: m.take(X, np.array([[0, 1], [-2, -1]]), axis=1)),
    ("take", lambda m, X, Y: m.take(X, np.array([5, -90, 1000]), axis=0, mode="wrap")),
    ("take", lambda m, X, Y: m.take(X, np.array([-3, 1, 1000]), axis=1, mode="clip")),
    ("take", lambda m, X, Y: m.take(X, np.array([-3, 1, 3]))),
    ("repeat", lambda m, X, Y: m.repeat(X, 3, axis=1)),
    ("repeat", lambda m, X, Y: m.repeat(X, 2)),
    ("tile", lambda m, X, Y: m.tile(X, (2, 1, 3))),
]


@pytest.mark.parametrize("case", range(len(ANY_SIZE)))
@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_moving_ops_compile_once_per_pattern(case, dtype):
    """20 shapes of one size pattern: a kernel or two (another for the first call's
    pattern of Y), each result NumPy's."""
    name, fn = ANY_SIZE[case]
    eager.clear()
    for n, m in _shapes(20):
        x, y = rand(n, m, dtype=dtype), rand(n, m + 3, dtype=dtype)
        same(fn(jnp, x, y), fn(np, x, y))
    assert jnp.cache_info(name)["kernels"] <= 2, jnp.cache_info(name)


def test_moving_ops_size_one_and_empty_patterns():
    """Dimensions of 1 and 0 are other patterns (empty arrays compile per shape)."""
    for shape in [(1, 5), (5, 1), (1, 1), (0, 4), (3, 0)]:
        x = rand(*shape)
        for fn in ANY_SIZE:
            ref = None
            try:
                ref = fn[1](np, x, x)
            except Exception as e:          # NumPy's error (take from an empty axis...)
                with pytest.raises(type(e)):
                    fn[1](jnp, x, x)
            if ref is not None:
                same(fn[1](jnp, x, x), ref)


def test_moving_ops_errors_on_a_new_shape_are_numpys():
    """The first call with a new shape is traced concretely: NumPy's error, not a
    run-time mismatch of the shared kernel."""
    jnp.concatenate([rand(3, 4), rand(5, 4)])
    e = raises_like(lambda: jnp.concatenate([rand(3, 4), rand(5, 6)]),
                    lambda: np.concatenate([rand(3, 4), rand(5, 6)]))
    assert "along dimension 1, the array at index 0 has size 4" in str(e)
    jnp.stack([rand(3, 4), rand(3, 4)])
    raises_like(lambda: jnp.stack([rand(3, 4), rand(3, 5)]),
                lambda: np.stack([rand(3, 4), rand(3, 5)]))
    e = raises_like(lambda: jnp.take(rand(3, 7), np.array([0, 7]), axis=1),
                    lambda: np.take(rand(3, 7), np.array([0, 7]), axis=1))
    assert str(e) == "index 7 is out of bounds for axis 1 with size 7"


DYNAMIC = [
    lambda m, X, Y: m.exp(m.concatenate([X, Y], axis=0)),
    lambda m, X, Y: m.add(m.concatenate([m.exp(X), X], axis=1), 1.0),
    lambda m, X, Y: m.negative(m.concatenate([X, Y], axis=None)),
    lambda m, X, Y: m.multiply(m.stack([X, m.exp(X)], axis=2), 2.0),
    lambda m, X, Y: m.exp(m.vstack([X, Y])),
    lambda m, X, Y: m.exp(m.reshape(X, (-1,))),
    lambda m, X, Y: m.exp(m.reshape(m.transpose(X), (1, -1, 1))),
    lambda m, X, Y: m.exp(m.ravel(Y)),
    lambda m, X, Y: m.exp(m.pad(X, ((1, 2), (3, 0)), constant_values=2.0)),
    lambda m, X, Y: m.exp(m.pad(X, ((2, 7), (1, 3)), mode="edge")),
    lambda m, X, Y: m.exp(m.pad(X, ((1, 9), (4, 2)), mode="reflect")),
    lambda m, X, Y: m.exp(m.pad(X, ((9, 1), (2, 4)), mode="symmetric")),
    lambda m, X, Y: m.exp(m.pad(X, ((12, 3), (0, 5)), mode="wrap")),
    lambda m, X, Y: m.exp(m.roll(X, -3, axis=1)),
    lambda m, X, Y: m.exp(m.roll(X, (13, -2), axis=(0, 1))),
    lambda m, X, Y: m.exp(m.roll(X, -7)),
    lambda m, X, Y: m.exp(m.repeat(X, 3, axis=0)),
    lambda m, X, Y: m.exp(m.repeat(Y, 2)),
    lambda m, X, Y: m.exp(m.tile(X, (2, 3))),
    lambda m, X, Y: m.exp(m.tile(Y, (2, 1, 2))),
    lambda m, X, Y: m.exp(m.array_split(X, 3, axis=1)[2]),
    lambda m, X, Y: m.exp(m.split(X, (1, -2), axis=0)[1]),
    lambda m, X, Y: m.exp(m.split(Y, 2, axis=0)[1]),
    lambda m, X, Y: m.exp(m.flip(X, 0)),
]


@pytest.mark.parametrize("case", range(len(DYNAMIC)))
def test_moving_ops_in_dynamic_definitions(case):
    """Each op on symbolic extents, fused with elementwise ops: one kernel for every
    shape (X (n, m), Y (2n, m); n, m >= 2)."""
    fn = DYNAMIC[case]
    f = jd.compute(dynamic=True)(lambda X, Y: fn(jnp, X, Y))
    for n, m in [(4, 6), (7, 3), (12, 17), (2, 2)]:
        x, y = rand(n, m), rand(2 * n, m)
        same(f(x, y), fn(np, x, y))
    assert len(f.cache_info()["events"]) == 1


def test_take_in_dynamic_definitions():
    @jd.compute(dynamic=True)
    def gather(X, I):
        return jnp.exp(jnp.take(X, I, axis=1, mode="wrap"))

    @jd.compute(dynamic=True)
    def clipped(X, I):
        return jnp.add(jnp.take(X, I, axis=0, mode="clip"), 1.0)

    @jd.compute(dynamic=True)
    def flat(X, I):
        return jnp.negative(jnp.take(X, I))
    for n, m in [(4, 6), (7, 3), (12, 17)]:
        x, ind = rand(n, m), rng.integers(-40, 40, (3, 5))
        same(gather(x, ind), np.exp(np.take(x, ind, axis=1, mode="wrap")))
        same(clipped(x, ind), np.take(x, ind, axis=0, mode="clip") + 1.0)
        ok = rng.integers(-n * m, n * m, 7)
        same(flat(x, ok), -np.take(x, ok))
    assert all(len(f.cache_info()["events"]) == 1 for f in (gather, clipped, flat))
    with pytest.raises(IndexError, match="outside"):
        flat(rand(3, 4), np.array([12]))
    with pytest.raises(IndexError, match="non-empty take from an empty axes"):   # NumPy's
        clipped(rand(0, 4), np.array([0]))


def test_reshape_to_the_sizes_of_a_dynamic_definition():
    """A target shape made of the definition's own sizes (X.reshape(X.shape[0], -1), as
    a batch is flattened) keeps them as factors: one kernel for every size. jd.numpy took
    the shape for static ints and raised SymbolicValueError on X.shape[0]."""
    flat = jd.compute(dynamic=True)(lambda X: jnp.exp(X.reshape(X.shape[0], -1)))
    swap = jd.compute(dynamic=True)(lambda X: jnp.reshape(X, (X.shape[1], X.shape[0])) + 1)
    for n, m, k in [(2, 3, 4), (5, 1, 7), (13, 17, 3), (1, 6, 2), (4, 0, 3)]:
        x = rand(n, m, k)
        same(flat(x), np.exp(x.reshape(n, -1)))
        x2 = rand(n, m)
        same(swap(x2), x2.reshape(m, n) + 1)
    assert len(flat.cache_info()["events"]) == 3     # (the sizes of 1: two patterns)
    with pytest.raises(jd.errors.ShapeError, match="for every size of its symbolic"):
        jd.compute(dynamic=True)(lambda X: jnp.reshape(X, (X.shape[0], X.shape[0])))(
            rand(3, 3))


def test_broadcast_to_the_sizes_of_a_dynamic_definition():
    """jnp.broadcast_to(Y, X.shape) of dynamic X and Y: the sizes Y has must equal X's,
    checked at the call, also where the definition reads nothing of X but its shape
    (this raised SymbolicValueError on X.shape, then ShapeError 'cannot broadcast')."""
    only = jd.compute(dynamic=True)(lambda X, Y: jnp.broadcast_to(Y, X.shape) * 2.0)
    plus = jd.compute(dynamic=True)(lambda X, Y: jnp.broadcast_to(Y, X.shape) - X)
    for xs, ys in [((3, 4), (1, 4)), ((3, 4), (4,)), ((5, 7), (5, 1)), ((2, 9), (2, 9)),
                   ((6, 1), (1,)), ((0, 3), (3,))]:
        x, y = rand(*xs), rand(*ys)
        same(only(x, y), np.broadcast_to(y, xs) * 2.0)
        same(plus(x, y), np.broadcast_to(y, xs) - x)
    for f in (only, plus):
        with pytest.raises(jd.errors.ArgumentError, match="'Y' has size 5 in dimension 1"):
            f(rand(3, 4), rand(1, 5))
        with pytest.raises(jd.errors.ArgumentError, match="'Y' has size 2 in dimension 0"):
            f(rand(3, 4), rand(2, 4))
    with pytest.raises(jd.errors.ShapeError, match="cannot broadcast"):
        only(rand(3, 1), rand(1, 4))


def test_broadcast_to_a_number_of_a_symbolic_size():
    """jnp.broadcast_to(Y, (Y.shape[0], 4)) of a dynamic Y was refused ('cannot broadcast
    an array of shape (Y_n0, Y_n1) to shape (Y_n0, 4)'), where NumPy broadcasts a Y of 1
    or 4 columns: the symbolic size must be the number, checked by each read, NumPy's
    ValueError naming the sizes where it is not; also of a number to a symbolic size."""
    cols_line = sys._getframe().f_lineno + 1
    cols = jd.compute(dynamic=True)(lambda Y: jnp.broadcast_to(Y, (Y.shape[0], 4)))
    deep = jd.compute(dynamic=True)(lambda Y: jnp.broadcast_to(Y, (Y.shape[0], 4, 3)) * 2.0)
    wide = jd.compute(dynamic="X")(lambda X, Z: jnp.broadcast_to(Z, X.shape) + X)
    for ys in [(3, 4), (3, 1), (1, 4), (0, 4), (5, 4)]:
        y = rand(*ys)
        same(cols(y), np.broadcast_to(y, (ys[0], 4)))
    for ys in [(2, 4, 3), (3, 1, 3), (2, 4, 1), (3, 1, 1)]:
        y = rand(*ys)
        same(deep(y), np.broadcast_to(y, (ys[0], 4, 3)) * 2.0)
    z = rand(5)
    for xs in [(3, 5), (1, 5), (4, 5)]:
        x = rand(*xs)
        same(wide(x, z), np.broadcast_to(z, xs) + x)
    for f, arg, ys in [(cols, None, (3, 5)), (cols, None, (3, 2)), (deep, None, (2, 4, 5)),
                       (deep, None, (2, 3, 3)), (wide, z, (3, 7)), (wide, z, (3, 2))]:
        y = rand(*ys)
        e = raises_like(lambda: f(y) if arg is None else f(y, arg),
                        lambda: np.broadcast_to(y, (ys[0], 4) + (3,) * (f is deep))
                        if arg is None else np.broadcast_to(arg, ys))
        assert ("cannot broadcast an array of shape" if arg is None
                else f"'X' has size {ys[1]} in dimension 1 but argument 'Z'") in str(e), str(e)
    e = raises_like(lambda: cols(rand(3, 5)), lambda: np.broadcast_to(rand(3, 5), (3, 4)))
    assert e.message.endswith("to shape (Y_n0, 4) (Y_n0 = 3, Y_n1 = 5)"), str(e)
    assert e.loc is not None and e.loc.lineno == cols_line, str(e)    # the user's line


def test_broadcast_to_a_number_of_an_empty_symbolic_array_is_checked_at_the_call(tmp_path):
    """jnp.broadcast_to(Y, (Y.shape[0], 4)) of a dynamic Y (0, 5) returned an empty array
    where NumPy raises (5 cannot broadcast to 4): the sizes were checked by each read of Y,
    and nothing is read. The call checks Y_n1 == 4 once, before the kernel runs: a jitdl
    ArgumentShapeError (NumPy's ValueError) naming the sizes and the user's line; also of a
    loaded export."""
    line = sys._getframe().f_lineno + 1
    cols = jd.compute(dynamic=True)(lambda Y: jnp.broadcast_to(Y, (Y.shape[0], 4)) + 1.0)
    deep = jd.compute(dynamic=True)(lambda Y: jnp.broadcast_to(Y, (Y.shape[0], 4, 3)) * 3.0)
    for f, ys, target in [(cols, (0, 5), (0, 4)), (cols, (0, 2), (0, 4)),
                          (deep, (0, 4, 5), (0, 4, 3)), (deep, (0, 2, 3), (0, 4, 3))]:
        y = rand(*ys)
        e = raises_like(lambda: f(y), lambda: np.broadcast_to(y, target))
        assert isinstance(e, jd.errors.ArgumentShapeError), repr(e)
        assert "cannot broadcast an array of shape" in e.message, str(e)
        assert "Y_n0 = 0" in e.message and f"Y_n1 = {ys[1]}" in e.message, str(e)
        assert e.loc is not None and e.loc.lineno == line + (f is deep), str(e)
    for ys in [(0, 4), (3, 4), (0, 1), (2, 1)]:
        y = rand(*ys)
        same(cols(y), np.broadcast_to(y, (ys[0], 4)) + 1.0)
    path = tmp_path / "cols.jdx"
    cols.export(str(path), rand(3, 4))
    loaded = jd.load(str(path))
    y = rand(5, 4)
    same(loaded(y), y + 1.0)
    with pytest.raises(ValueError, match="cannot broadcast"):
        loaded(rand(0, 5))


def test_take_of_a_constant_position_of_a_symbolic_axis_is_checked():
    """jnp.take(X, 0, axis=0) of a dynamic X (0, 5), and jnp.take(X, 3) of an X (1, 0) or
    (1, 3), read outside X (garbage, no error) where NumPy raises IndexError: a constant
    index was never checked at run time, also where the axis it indexes is symbolic
    (no static proof covers it there). Values elsewhere as NumPy's."""
    first = jd.compute(dynamic=True)(lambda X: jnp.take(X, 0, axis=0) * 2.0)
    last = jd.compute(dynamic=True)(lambda X: jnp.take(X, -1, axis=0) + 1.0)
    third = jd.compute(dynamic=True)(lambda X: jnp.take(X, 2, axis=0) - 1.0)
    flat = jd.compute(dynamic=True)(lambda X: jnp.take(X, 3) * 3.0)
    col = jd.compute(dynamic=True)(lambda X: jnp.take(X, 1, axis=1) * 2.0)
    cases = [(first, lambda x: np.take(x, 0, axis=0) * 2.0),
             (last, lambda x: np.take(x, -1, axis=0) + 1.0),
             (third, lambda x: np.take(x, 2, axis=0) - 1.0),
             (flat, lambda x: np.take(x, 3) * 3.0),
             (col, lambda x: np.take(x, 1, axis=1) * 2.0)]
    for f, ref in cases:
        for shape in [(3, 5), (4, 7), (5, 3), (3, 2)]:
            x = rand(*shape)
            same(f(x), ref(x))
    # (each with something to compute: an empty result reads nothing)
    for f, ref, shape in [(first, cases[0][1], (0, 5)), (last, cases[1][1], (0, 5)),
                          (third, cases[2][1], (2, 5)), (third, cases[2][1], (0, 3)),
                          (flat, cases[3][1], (1, 0)), (flat, cases[3][1], (1, 3)),
                          (flat, cases[3][1], (0, 2)), (col, cases[4][1], (3, 0))]:
        x = rand(*shape)
        with pytest.raises(IndexError):
            ref(x)
        with pytest.raises(IndexError, match="outside|out of bounds"):
            f(x)


def test_take_from_an_empty_symbolic_axis_is_checked_at_the_call():
    """jnp.take(X, 0, axis=0) of a dynamic X (0, 0) returned an empty array where NumPy
    raises IndexError (and the static definition too): with no element to compute nothing
    is read, so no per-element check runs. The call checks the axis's length against the
    constant index once, as NumPy does, where the dimensions before the axis hold an
    element (take(X, 0, axis=1) of X (0, 0) is an empty result in NumPy too): a jitdl
    ArgumentIndexError (an IndexError) naming the size and the user's line."""
    line = sys._getframe().f_lineno + 1
    first = jd.compute(dynamic=True)(lambda X: jnp.take(X, 0, axis=0) + 2.0)
    last = jd.compute(dynamic=True)(lambda X: jnp.take(X, -2, axis=0) + 2.0)
    col = jd.compute(dynamic=True)(lambda X: jnp.take(X, 1, axis=1) + 2.0)
    flat = jd.compute(dynamic=True)(lambda X: jnp.take(X, 4) + 2.0)
    rows = jd.compute(dynamic=True)(lambda X: jnp.take(X, [0, 1], axis=0) + 2.0)
    for f, ref in [(first, lambda x: np.take(x, 0, axis=0) + 2.0),
                   (last, lambda x: np.take(x, -2, axis=0) + 2.0),
                   (col, lambda x: np.take(x, 1, axis=1) + 2.0),
                   (flat, lambda x: np.take(x, 4) + 2.0),
                   (rows, lambda x: np.take(x, [0, 1], axis=0) + 2.0)]:
        for shape in [(0, 0), (0, 3), (3, 0), (2, 0), (3, 5), (0, 2), (4, 2), (2, 3)]:
            x = rand(*shape)
            try:
                want = ref(x)
            except IndexError:
                with pytest.raises(IndexError) as e:
                    f(x)
                if isinstance(e.value, jd.errors.ArgumentIndexError):   # (its own line)
                    at = line + [first, last, col, flat, rows].index(f)
                    assert e.value.loc is not None and e.value.loc.lineno == at, str(e.value)
                continue
            same(f(x), want)
    with pytest.raises(jd.errors.ArgumentIndexError,
                       match=r"index 0 is out of bounds for axis 0 with size X_n0 \(X_n0 = 0\)"):
        first(rand(0, 0))


def test_diff_of_a_short_symbolic_axis_is_empty():
    """np.diff of an axis of 0 elements, or of n >= its length, is empty; in a dynamic
    definition its length was `X_n1 - 1`, an ArgumentShapeError ('= -1 ... must be
    >= 0') at such a call, while the static trace clamps it at 0."""
    once = jd.compute(dynamic=True)(lambda X: jnp.diff(X) * 2.0)
    third = jd.compute(dynamic=True)(lambda X: jnp.diff(X, n=3, axis=0) + 1.0)
    for shape in [(3, 0), (0, 4), (3, 5), (2, 3), (3, 3), (4, 7), (6, 2)]:
        x = rand(*shape)
        same(once(x), np.diff(x) * 2.0)
        same(third(x), np.diff(x, n=3, axis=0) + 1.0)
    assert len(once.cache_info()["events"]) == 1 and len(third.cache_info()["events"]) == 1
    assert "]!" not in once.lower(rand(3, 4))       # still proven, no check at the call


def test_dynamic_definition_errors():
    x = rand(6, 4)
    f = jd.compute(dynamic=True)(lambda X: jnp.reshape(X, (2, -1)))
    with pytest.raises(jd.errors.ShapeError, match="for every size of its symbolic"):
        f(x)
    f = jd.compute(dynamic=True)(lambda X: jnp.repeat(X, (1, 2, 3), axis=1))
    with pytest.raises(jd.errors.ShapeError, match="needs a static length"):
        f(x)
    f = jd.compute(dynamic=True)(lambda X: jnp.exp(jnp.split(X, 4, axis=0)[0]))
    y = rand(8, 3)
    same(f(y), np.exp(np.split(y, 4, axis=0)[0]))
    with pytest.raises(IndexError):                 # 6 rows do not split in 4
        f(x)
    g = jd.compute(dynamic=True)(lambda X, Y: jnp.concatenate([X, Y], axis=0))
    with pytest.raises(jd.errors.ArgumentError, match="shape mismatch"):
        g(rand(3, 4), rand(2, 5))
    with pytest.raises(jd.errors.ShapeError, match="must match exactly"):
        g(rand(3, 1), rand(2, 5))                   # a size 1 against a symbolic size
    p = jd.compute(dynamic=True)(lambda X: jnp.pad(X, 2, mode="edge"))
    y = rand(3, 4)
    same(p(y), np.pad(y, 2, mode="edge"))
    with pytest.raises(IndexError):                 # NumPy: can't extend empty axis
        p(rand(0, 4))


def test_take_from_a_static_empty_axis_is_numpys():
    """jnp.take(x, 1, axis=1) of x (0, 0) raised 'cannot do a non-empty take from an empty
    axes.' where NumPy gives an empty (0,) result: every take from an axis of length 0 was
    refused. NumPy raises only where the result has an element, or in mode 'raise' where
    the dimensions before the axis hold one; wrap and clip of a symbolic count of
    elements before a static empty axis are checked at the call."""
    for shape in [(0, 0), (0, 3), (2, 0), (2, 0, 3), (2, 0, 0), (0, 0, 2), (3, 0)]:
        x = rand(*shape)
        for ind in [0, -1, [1, 0], np.array([[1, 0]]), []]:
            for axis in range(-len(shape), len(shape)):
                for mode in ["raise", "wrap", "clip"]:
                    if mode == "wrap" and np.prod(shape[:axis % len(shape)]) \
                            and shape[axis] == 0 and np.size(ind):
                        continue    # (NumPy's wrap loops forever there)
                    try:
                        want = np.take(x, ind, axis=axis, mode=mode)
                    except IndexError:
                        with pytest.raises(IndexError):
                            jnp.take(x, ind, axis=axis, mode=mode)
                        continue
                    same(jnp.take(x, ind, axis=axis, mode=mode), want)
    clipped = jd.compute(dynamic=True)(
        lambda X: jnp.take(jnp.tile(X, (1, 0)), [1, 0], axis=1, mode="clip"))
    same(clipped(rand(0, 3)), np.zeros((0, 2)))
    with pytest.raises(IndexError, match="non-empty take from an empty axes"):
        clipped(rand(2, 3))


# a data-dependent read of a stage that is inlined: the stage's body may ignore the index (a
# broadcast or reshaped length-1 axis) or fold it into range (tile, pad's edge and wrap,
# roll); the read is checked against the stage's own extent all the same
FOLDING = {
    "broadcast_to": (lambda X, I: jnp.take(jnp.broadcast_to(X, (1, 1)), I, axis=0), (1,)),
    "reshape": (lambda X, I: jnp.take(jnp.reshape(X, (1, 1)), I, axis=1), (1,)),
    "expand_dims": (lambda X, I: jnp.take(jnp.expand_dims(X, 0), I, axis=0), (1,)),
    "tile": (lambda X, I: jnp.take(jnp.tile(X, 2), I, axis=0), (3,)),
    "pad_edge": (lambda X, I: jnp.take(jnp.pad(X, 1, mode="edge"), I, axis=0), (3,)),
    "pad_wrap": (lambda X, I: jnp.take(jnp.pad(X, 1, mode="wrap"), I, axis=0), (3,)),
    "roll": (lambda X, I: jnp.take(jnp.roll(X, 1), I, axis=0), (3,)),
}


@pytest.mark.parametrize("case", sorted(FOLDING))
@pytest.mark.parametrize("dynamic", [False, True])
def test_take_of_an_inlined_stage_checks_its_extent(case, dynamic):
    fn, shape = FOLDING[case]
    f = jd.compute(dynamic=dynamic)(lambda X, I: fn(X, I) * 2.0)
    x = rand(*shape)
    ref = {"broadcast_to": lambda: np.broadcast_to(x, (1, 1)), "reshape": lambda: x.reshape(1, 1),
           "expand_dims": lambda: x[None], "tile": lambda: np.tile(x, 2),
           "pad_edge": lambda: np.pad(x, 1, "edge"), "pad_wrap": lambda: np.pad(x, 1, "wrap"),
           "roll": lambda: np.roll(x, 1)}[case]()
    axis = 1 if case == "reshape" else 0
    n = ref.shape[axis]
    ok = np.array([n - 1, -n, 0])
    same(f(x, ok), np.take(ref, ok, axis=axis) * 2.0)
    for bad in (n, -n - 1, n + 3):
        with pytest.raises(IndexError):
            np.take(ref, [bad], axis=axis)
        with pytest.raises(IndexError, match="outside"):
            f(x, np.array([0, bad]))


def test_concatenate_loops_are_split_where_the_select_decides():
    """A serial loop over concatenate's output is split where `j < n1` stops holding for
    a whole vector and where it fails for all of one (tir/partition.py): the parts read
    one operand each, without the select; every size against NumPy, every element
    written."""
    @jd.compute(dynamic=True)
    def cat(A, B, C):
        return jnp.concatenate([A, B, C], axis=1)
    rng = np.random.default_rng(5)
    for rows in (1, 3):
        for n1, n2, n3 in [(1, 1, 1), (7, 9, 2), (8, 8, 8), (13, 1, 30), (64, 3, 5),
                           (2, 100, 1), (31, 33, 17)]:
            a, b, c = (rng.standard_normal((rows, n)).astype(np.float32)
                       for n in (n1, n2, n3))
            np.testing.assert_array_equal(cat(a, b, c), np.concatenate([a, b, c], axis=1))
    text = str(cat.lower(a, b, c))
    assert "= A[" in text and "= C[" in text      # parts that read one operand only


def test_a_concatenate_of_200_arrays_compiles():
    """concatenate chooses each element's operand with a balanced tree of selects: a
    chain, one select per operand, nested as deep as there are operands (200 arrays: a
    RecursionError here, "nests 400 levels deep" from jd.numpy's; 50 arrays of symbolic
    sizes took 20 s, the bounds proof narrowing by every condition around each read).
    200 pieces of 1 to 4 elements, in reverse order; every element against NumPy."""
    cuts = list(np.cumsum([k % 4 + 1 for k in range(199)]))
    cat = jd.compute(lambda X: jnp.concatenate(jnp.split(X, cuts)[::-1]))
    x = np.random.default_rng(10).standard_normal(cuts[-1] + 3)
    np.testing.assert_array_equal(cat(x), np.concatenate(np.split(x, cuts)[::-1]))


def test_a_concatenate_of_vectors_of_symbolic_sizes_simplifies_each_sum_once(monkeypatch):
    """The offsets of a dynamic concatenate are sums of the sizes before each operand,
    and the simplifier asks for the affine form of every node of them, bottom-up: each
    walked the whole sum below it again (30 vectors: 250000 forms asked for, a third of
    the lowering's time, growing with the cube of the count). Each node's form is worked
    out once per pass now (16 vectors, counted); every element against NumPy."""
    from jitdl.ir import analysis
    from jitdl.tir import simplify
    calls = []
    real = analysis.affine

    def counted(e):
        calls.append(None)
        return real(e)
    monkeypatch.setattr(analysis, "affine", counted)
    monkeypatch.setattr(simplify, "affine", counted)
    names = ", ".join(f"a{k}" for k in range(16))
    scope = {"jnp": jnp}
    exec(f"def cat({names}):\n    return jnp.concatenate([{names}])\n", scope)
    cat = jd.compute(dynamic=True)(scope["cat"])
    rng = np.random.default_rng(11)
    xs = [rng.standard_normal(k % 7 + 1) for k in range(16)]
    cat.lower(*xs, after="simplify_tails")
    assert len(calls) < 20000, len(calls)      # (55000 before, 8700 now)
    np.testing.assert_array_equal(cat(*xs), np.concatenate(xs))


def _dynamic_concatenate(n, axis=0):
    names = ", ".join(f"a{k}" for k in range(n))
    scope = {"jnp": jnp}
    exec(f"def cat({names}):\n    return jnp.concatenate([{names}], axis={axis})\n", scope)
    return jd.compute(dynamic=True)(scope["cat"])


def test_the_code_of_a_dynamic_concatenate_computes_each_offset_once():
    """The index into the k-th operand of a concatenate of symbolic sizes subtracts the
    k - 1 sizes before it, and each statement that read it emitted those subtractions
    again: the LLVM module grew with the square of the operands (24 vectors: 6400 adds
    and subtractions, 3.3 times more than at 12; code generation and LLVM's passes
    ~2/3 of a 60-vector compile). The sums of sizes alone are now gathered in each
    chain of + and - and computed once, in the entry block, each offset from the one
    before. Counted in the unoptimised module (1600 at 24 vectors now); every element
    against NumPy, 1-d and along axis 1 of 2-d, with an empty operand."""
    rng = np.random.default_rng(12)
    counts = {}
    for n in (12, 24):
        cat = _dynamic_concatenate(n)
        xs = [rng.standard_normal(rng.integers(1, 9)) for _ in range(n)]
        text = cat.llvm_ir(*xs, optimized=False)
        counts[n] = len(re.findall(r"= (?:add|sub) ", text))
        for _ in range(2):
            xs = [rng.standard_normal(rng.integers(1, 9)) for _ in range(n)]
            np.testing.assert_array_equal(cat(*xs), np.concatenate(xs))
    assert counts[24] < 3000 and counts[24] < 2.7 * counts[12], counts
    cat = _dynamic_concatenate(12, axis=1)
    for rows in (1, 3):
        xs = [rng.standard_normal((rows, rng.integers(0 if k == 5 else 1, 9)))
              for k in range(12)]
        np.testing.assert_array_equal(cat(*xs), np.concatenate(xs, axis=1))


def test_the_bounds_proof_of_a_dynamic_concatenate_does_not_narrow_each_size(monkeypatch):
    """Each select of a concatenate of symbolic sizes compares the index with a sum of
    the sizes before an operand, `i < n1 + ... + nk`, and the proof narrowed every size
    of it by that relation, each through chains of the facts over the sum of the others
    (analysis._chain): the proof grew with the cube of the operands (24 vectors: 4265
    chains, 3.8 times those at 12; an eager concatenate of 60 vectors, 16 of its 60 s).
    A size among more than two in a relation is no longer narrowed by it (the relation
    stays a fact, which is what proves the reads): 965 chains at 24 now. Every element
    against NumPy."""
    from jitdl.ir import analysis
    calls = []
    real = analysis._chain

    def counted(*args):
        calls.append(None)
        return real(*args)
    monkeypatch.setattr(analysis, "_chain", counted)
    rng = np.random.default_rng(13)
    counts = {}
    for n in (12, 24):
        cat = _dynamic_concatenate(n)
        xs = [rng.standard_normal(rng.integers(1, 9)) for _ in range(n)]
        calls.clear()
        cat.lower(*xs, after="simplify_tails")
        counts[n] = len(calls)
        np.testing.assert_array_equal(cat(*xs), np.concatenate(xs))
    assert counts[24] < 2000 and counts[24] < 3 * counts[12], counts


def test_the_simplifier_rebuilds_a_sum_of_sizes_once_not_at_each_of_its_nodes(monkeypatch):
    """The simplifier rebuilt the canonical form of every + - * node of an int64 sum,
    bottom-up, and a concatenate's offsets are sums of up to all its operands' sizes:
    each sum of k sizes was sorted and built again at each of its k nodes (24 vectors:
    7964 rebuilds, 3.5 times those at 12; 40 vectors: 20000 of 16 terms on average,
    most of simplify's time). A node whose every parent is such a node of an affine
    form is left to its parent's rebuild (the same form, so the same result): 756 at
    24 now. Every element against NumPy."""
    from jitdl.tir import simplify
    calls = []
    real = simplify._rebuild

    def counted(form):
        calls.append(None)
        return real(form)
    monkeypatch.setattr(simplify, "_rebuild", counted)
    rng = np.random.default_rng(14)
    counts = {}
    for n in (12, 24):
        cat = _dynamic_concatenate(n)
        xs = [rng.standard_normal(rng.integers(1, 9)) for _ in range(n)]
        calls.clear()
        cat.lower(*xs, after="simplify_tails")
        counts[n] = len(calls)
        np.testing.assert_array_equal(cat(*xs), np.concatenate(xs))
    assert counts[24] < 2000 and counts[24] < 2.5 * counts[12], counts


def test_the_size_function_of_a_concatenate_of_200_dynamic_arrays_compiles():
    """Of symbolic sizes (eager jd.numpy, dynamic=True), the output size of a concatenate
    of 200 arrays is a sum of 200 sizes, whose Python source (the kernel's size function)
    nested a parenthesis per term: a SyntaxError, "too many nested parentheses", after
    minutes of compiling. The size function of such a sum, and of a product, against
    Python's."""
    from jitdl.runtime.kernel import _tree_code
    total, product, sizes = ["n", 0], ["n", 0], list(range(3, 303))
    for k in range(1, 300):
        total = ["+" if k % 3 else "-", ["+", total, 1], ["n", k]]
        product = ["*", product, ["-", ["n", k], 1]]
    names = {f"n{k}": v for k, v in enumerate(sizes)}
    want = sizes[0] + sum(1 + (v if k % 3 else -v) for k, v in enumerate(sizes[1:], 1))
    assert eval(_tree_code(total), names) == want     # noqa: S307 - ints only
    assert eval(_tree_code(product), names) == sizes[0] * int(np.prod(
        [v - 1 for v in sizes[1:]], dtype=object))     # noqa: S307


@pytest.mark.parametrize("mode", ["edge", "reflect", "symmetric", "wrap"])
def test_pad_rows_copy_their_middle_with_contiguous_loads(mode):
    """A non-constant pad chooses its source index with `j < 0 ? low : j < n ? j : high`,
    which loop partitioning splits (tir/partition._choices): the bulk of a row reads x[j]
    as contiguous lanes, not a gather through a chosen index; also where the loop over
    the vectors is parallel (split in chunks, _chunked). Every element against NumPy, at
    widths narrower and wider than the axis, on 1-d to 3-d arrays and in a definition."""
    rng = np.random.default_rng(7)
    for shape in [(1,), (2,), (5,), (37,), (100003,), (3, 1), (4, 9), (300, 301), (2, 3, 70)]:
        x = rng.standard_normal(shape)
        for width in [1, 3, 8, ((0, 5),) + ((2, 0),) * (len(shape) - 1)]:
            got = jnp.pad(x, width, mode=mode)
            np.testing.assert_array_equal(got, np.pad(x, width, mode=mode))
    f = jd.compute(dynamic=True)(lambda X: jnp.pad(X, 3, mode=mode))
    for n in (1, 2, 3, 7, 40000):
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_array_equal(f(x), np.pad(x, 3, mode=mode))
    text = str(f.lower(x))
    assert re.search(r"X\[idx0_i \+ idx0_o \* \d+ - 3\]", text), text
    assert "_c in range" in text and text.count("X[select(") >= 2, text


def test_a_parallel_concatenate_of_vectors_is_split_per_chunk():
    """A 1-d concatenate above the parallel grain: its parallel loop runs in chunks, each
    split where the operand changes, so the bulk reads one operand with no select (the
    select had made every vector read both operands under masks: 5e6 + 5e6 float64 took
    60 ms against NumPy's 17 on a 2-core EPYC, 8.5 ms split)."""
    f = jd.compute(dynamic=True)(lambda A, B: jnp.concatenate([A, B]))
    rng = np.random.default_rng(8)
    for n1, n2 in [(1, 1), (50000, 3), (3, 70001), (65537, 65539)]:
        a, b = rng.standard_normal(n1), rng.standard_normal(n2)
        np.testing.assert_array_equal(f(a, b), np.concatenate([a, b]))
    text = str(f.lower(a, b))
    assert "_c in range" in text and re.search(r"= A\[[^\]]*\]\n", text), text


@pytest.mark.parametrize("threads", [1, 2])
def test_a_long_loop_of_elements_with_a_select_is_split_in_chunks(threads, monkeypatch):
    """A definition of static shapes whose one loop runs over elements (parallel, or
    vectorized on one thread) and chooses between operands or indices: the loop runs in
    chunks of 4096 elements, each split where the choice changes into plain loops that
    LLVM vectorises (a static concatenate of two 1e6 float64 took 20-32 ms on one
    thread, each element a branch; 1.5 ms split). Every element against NumPy, around
    the chunk boundaries."""
    monkeypatch.setenv("JITDL_NUM_THREADS", str(threads))
    rng = np.random.default_rng(9)
    cat = jd.compute(lambda A, B, C: jnp.concatenate([A, B, C]))
    for n1, n2, n3 in [(4096 * 20, 1, 4095), (70001, 4096, 3), (65536, 65536, 65536)]:
        a, b = rng.standard_normal(n1), rng.standard_normal(n2)
        c = rng.standard_normal(n3).astype(np.float32)
        np.testing.assert_array_equal(cat(a, b, c), np.concatenate([a, b, c]))
    text = str(cat.lower(a, b, c))
    assert "_c in range" in text and "= A[idx0]" in text, text
    # (a choice per row of a parallel loop over rows is a branch per row: no chunks,
    # which would leave threads idle)
    rows = jd.compute(lambda A, B: jnp.concatenate([A, B], axis=0))
    a, b = rng.standard_normal((300, 1000)), rng.standard_normal((2, 1000))
    np.testing.assert_array_equal(rows(a, b), np.concatenate([a, b]))
    assert "_c in range" not in str(rows.lower(a, b))
    for mode in ("reflect", "wrap"):
        pad = jd.compute(lambda X: jnp.pad(X, (5000, 3), mode=mode))
        for n in (131072, 131075):
            x = rng.standard_normal(n).astype(np.float32)
            np.testing.assert_array_equal(pad(x), np.pad(x, (5000, 3), mode=mode))
        assert "= X[idx0 - 5000]" in str(pad.lower(x))


def test_a_parallel_loop_of_whole_rows_is_not_chunked():
    """A static concatenate along axis 0 runs a parallel loop of rows whose body is one
    vector loop over a whole row: it stays parallel over its rows. Chunked in 256 rows
    (as a loop of single vectors is, _chunked), 100 + 100 rows of 20000 float64 were one
    chunk: one thread copied all of it (3.8 ms against 2.6 in parallel, 2-core EPYC)."""
    f = jd.compute(lambda A, B: jnp.concatenate([A, B], axis=0))
    rng = np.random.default_rng(9)
    for rows in [(100, 100), (3, 250), (256, 1)]:
        a, b = (rng.standard_normal((r, 20000)) for r in rows)
        np.testing.assert_array_equal(f(a, b), np.concatenate([a, b], axis=0))
    text = str(f.lower(a, b))
    assert "parallel idx0 in range(257)" in text and "_c in range" not in text, text
    # (a choice that varies along the row, pad's, with rows of many vectors: the loop
    # over rows stays parallel, and each row's long loop is split in chunks instead)
    g = jd.compute(lambda X: jnp.pad(X, ((0, 0), (3, 4)), mode="reflect"))
    x = rng.standard_normal((100, 20000))
    np.testing.assert_array_equal(g(x), np.pad(x, ((0, 0), (3, 4)), mode="reflect"))
    text = str(g.lower(x))
    assert "parallel idx0 in range(100)" in text and "= X[idx0 * 20000 + idx1 - 3]" in text, \
        text


def test_a_short_loop_of_elements_with_a_select_is_split(monkeypatch):
    """A static loop over fewer than 8192 elements (a whole row, or a 1-d array) that
    chooses between operands or indices was taken for a loop of a vector's lanes and kept
    its select: a gather per element (roll(x, 7) of 8000 float32 on one thread 1.5x
    NumPy's speed, 3.9x split; concatenate along rows of (50, 1000) 0.4-0.7x, 1.3x; a
    reflect pad of (50, 1000) 0.9-1.1x, 4.2-4.6x). Longer than a vector's widest loop of
    lanes it is split at the choice. Every element against NumPy, sizes around the split
    points and small primes; a loop of lanes keeps its select."""
    monkeypatch.setenv("JITDL_NUM_THREADS", "1")
    rng = np.random.default_rng(14)
    roll = jd.compute(lambda X: jnp.roll(X, 7))
    rows = jd.compute(lambda X: jnp.roll(X, -3, axis=1))
    cat = jd.compute(lambda A, B: jnp.concatenate([A, B], axis=1))
    pad = jd.compute(lambda X: jnp.pad(X, 3, mode="reflect"))
    for n in (65, 97, 1000, 4001, 8000):
        x = rng.standard_normal(n).astype(np.float32)
        m = rng.standard_normal((3, n))
        np.testing.assert_array_equal(roll(x), np.roll(x, 7))
        np.testing.assert_array_equal(rows(m), np.roll(m, -3, axis=1))
        np.testing.assert_array_equal(cat(m, m[:, :5]), np.concatenate([m, m[:, :5]], axis=1))
        np.testing.assert_array_equal(pad(m), np.pad(m, 3, mode="reflect"))
        for f, args in ((roll, (x,)), (rows, (m,)), (cat, (m, m[:, :5])), (pad, (m,))):
            text = str(f.lower(*args))
            assert re.search(r"idx\d_sel = ", text), text
    assert re.search(r"= X\[idx0 \* 8000 \+ idx1 \+ 3\]\n", str(rows.lower(m)))
    m = rng.standard_normal((3, 13))
    np.testing.assert_array_equal(rows(m), np.roll(m, -3, axis=1))
    assert "_sel = " not in str(rows.lower(m))


def test_compiling_data_movement_prints_nothing(tmp_path):
    """LLVM printed "warning: loop not vectorized" to the terminal when it compiled the
    reflect, symmetric and wrap pads (a loop with run-time checked reads marked for its
    vectoriser): a fresh process compiling these ops writes nothing to stderr."""
    import os
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import numpy as np, jitdl as jd
        jnp = jd.numpy
        rng = np.random.default_rng(0)
        for shape in [(2, 3), (4, 5, 6), (7,)]:
            a = rng.standard_normal(shape).astype(np.float32)
            for mode in ("constant", "edge", "reflect", "symmetric", "wrap"):
                assert np.array_equal(jnp.pad(a, 2, mode=mode), np.pad(a, 2, mode=mode))
            idx = rng.integers(0, shape[-1], 5)
            assert np.array_equal(jnp.take(a, idx, axis=-1), np.take(a, idx, axis=-1))
            assert np.array_equal(jnp.repeat(a, 2, axis=0), np.repeat(a, 2, axis=0))
            assert np.array_equal(jnp.tile(a, 2), np.tile(a, 2))
            assert np.array_equal(jnp.flip(a), np.flip(a))
        print("ok")
        """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=600, env={**os.environ, "JITDL_CACHE_DIR": str(tmp_path)})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    assert r.stderr == "", r.stderr


# -- tril, triu, diff, matrix_transpose, vecdot, isclose, allclose, array_equal -----------
_R = np.random.default_rng(77)
_A = _R.standard_normal((3, 4, 5))
_I8 = _R.integers(-100, 100, (6, 4)).astype(np.int8)
_B = _R.random((5, 7)) > 0.5
_V = _R.standard_normal(4)
_N = _A[0] + _R.standard_normal((4, 5)) * 1e-6
_N[0, :4] = [np.nan, np.inf, -np.inf, np.nan]
_M = _A[0].copy()
_M[0, :4] = [np.nan, np.inf, np.inf, 2.0]


@pytest.mark.parametrize("case", [
    lambda m: m.tril(_A), lambda m: m.triu(_A, -1), lambda m: m.tril(_A, 2), lambda m: m.tril(_V),
    lambda m: m.triu(_I8, 1), lambda m: m.tril(_B), lambda m: m.tril(np.zeros((0, 3))),
    lambda m: m.tril(_A, 1.5), lambda m: m.tril(_A, 0.5), lambda m: m.triu(_A, -1.5),
    lambda m: m.triu(_A, np.float32(1.7)), lambda m: m.tril(_A, -2.0),
    lambda m: m.astype(np.float32(3.7), np.int8), lambda m: m.astype(np.float64(-0.0), bool),
    lambda m: m.roll(_A, 2 ** 70), lambda m: m.roll(_A, (2 ** 70, -1), axis=(0, 2)),
    lambda m: m.isclose(np.arange(5), 2 ** 70), lambda m: m.isclose(-2 ** 64, _V),
    lambda m: m.diff(_A), lambda m: m.diff(_A, 2, axis=0), lambda m: m.diff(_I8, 3),
    lambda m: m.diff(_I8.astype(np.uint8)), lambda m: m.diff(_B), lambda m: m.diff(_B, axis=0),
    lambda m: m.diff(_V, prepend=0), lambda m: m.diff(_V, append=[1, 2]), lambda m: m.diff(_V, 5),
    lambda m: m.diff(_A, axis=1, prepend=_A[:, :1]), lambda m: m.diff(np.arange(1)),
    lambda m: m.matrix_transpose(_A), lambda m: m.vecdot(_A, _A[0]),
    lambda m: m.vecdot(_A, _A, axis=1), lambda m: m.vecdot(_I8, _I8),
    lambda m: m.isclose(_M, _N), lambda m: m.isclose(_M, _N, equal_nan=True),
    lambda m: m.isclose(_M.astype(np.float32), _N), lambda m: m.isclose(np.arange(5), 3),
    lambda m: m.isclose(_I8, 3.0), lambda m: m.isclose(1e-9, np.zeros(3, np.float32)),
    lambda m: m.isclose(_M, _N, rtol=0, atol=1e-3), lambda m: m.isclose(_M[:, None], _N[:1]),
    lambda m: m.allclose(_M, _N), lambda m: m.allclose(_M[1:], _N[1:]),
    lambda m: m.allclose(_M, _N, equal_nan=True), lambda m: m.array_equal(_N, _N),
    lambda m: m.array_equal(_N, _N, equal_nan=True), lambda m: m.array_equal(_N, _N[:3]),
    lambda m: m.array_equal(np.arange(3), [0, 1, 2]), lambda m: m.isclose(_M, _N, np.array(1e-3)),
])
def test_more_functions_are_numpys(case):
    want, got = case(np), case(jnp)
    assert type(got) is type(want), (type(got), type(want))
    same(got, want)


def test_vecdot_out_and_dtype():
    """vecdot is a NumPy ufunc: out= (cast by casting=) and dtype= as NumPy's."""
    a = _I8.astype(np.float32)
    for kw in ({"dtype": np.float64}, {"dtype": np.int32, "casting": "unsafe"},
               {"axis": 0, "dtype": np.float64}):
        same(jnp.vecdot(_I8, _I8, **kw), np.vecdot(_I8, _I8, **kw))
    for dt in (np.float32, np.float64):
        out = np.zeros(6, dt)
        assert jnp.vecdot(a, a, out=out) is out
        same(out, np.vecdot(a, a, out=np.zeros(6, dt)))
    with pytest.raises(TypeError):
        jnp.vecdot(a, a, out=np.zeros(6, np.int32))


def test_more_functions_errors_and_definitions():
    raises_like(lambda: jnp.diff(_V, -1), lambda: np.diff(_V, -1))
    raises_like(lambda: jnp.astype([1, 2], np.float32), lambda: np.astype([1, 2], np.float32))
    raises_like(lambda: jnp.tril(np.array(2.0)), lambda: np.tril(np.array(2.0)))
    raises_like(lambda: jnp.diff(np.float32(3)), lambda: np.diff(np.float32(3)))
    raises_like(lambda: jnp.diff(_A, axis=3), lambda: np.diff(_A, axis=3))
    raises_like(lambda: jnp.vecdot(_A, _A[0, :, :3]), lambda: np.vecdot(_A, _A[0, :, :3]))
    raises_like(lambda: jnp.matrix_transpose(_V), lambda: np.matrix_transpose(_V))
    # a core dimension of length 1 does not broadcast (einsum's would)
    for x, y in (([[1, 2]], [[3], [4]]), (np.ones((2, 1, 3)), np.ones((4, 1)))):
        raises_like(lambda: jnp.vecdot(x, y), lambda: np.vecdot(x, y),
                    match="(size 1 is different from")

    @jd.compute
    def f(X, Y):
        close = jnp.where(jnp.isclose(X, Y), 1.0, 0.0) + jnp.allclose(X, Y)
        return jnp.tril(X) @ jnp.triu(Y).T + jnp.diff(X, axis=0).sum() + close
    x, y = _A[0, :4, :4], _N[:, :4]
    same(f(x, y), np.tril(x) @ np.triu(y).T + np.diff(x, axis=0).sum()
         + np.where(np.isclose(x, y), 1.0, 0.0) + np.allclose(x, y))
    eager.clear()
    for n in range(3, 30):                  # one kernel per pattern, not per shape
        a = _R.standard_normal((n, 2 + n % 5))
        same(jnp.diff(a, axis=0), np.diff(a, axis=0))
        same(jnp.triu(a), np.triu(a))
        same(jnp.isclose(a, a + 1e-9), np.isclose(a, a + 1e-9))
    assert all(eager.cache_info(op)["kernels"] <= 2 for op in ("diff", "triu", "isclose"))


def test_arguments_numpy_takes_in_other_forms():
    """0-d operands of concatenate(axis=None) (weak Python numbers; arrays of any layout,
    flattened in C order), repeat and tile counts
    as 0-d arrays, floats and bools, take's indices as a list of floats or bools, an empty
    list, a literal list inside a definition; einsum's length-1 axes broadcast; dot's out=
    must be C-contiguous of the result's dtype; NumPy's errors for the rest."""
    x, a = np.arange(3), rand(3, 4)
    c31, c45, c13, c21, c32, c35 = rand(3, 1), rand(4, 5), rand(1, 3), rand(2, 1), rand(3, 2), \
        rand(3, 5)
    for case in (lambda m: m.concatenate([np.float32(1), np.float32(2)], axis=None),
                 lambda m: m.concatenate([np.float32(1), 2.0], axis=None),
                 lambda m: m.concatenate([np.ones(2, np.int8), 3], axis=None),
                 lambda m: m.concatenate([a.T, a[:, ::2], np.array(7.5, np.float32),
                                          (a > 0.5)[::-1]], axis=None),
                 lambda m: m.concatenate((c45.T, c31.astype(np.int16)), axis=None),
                 lambda m: m.repeat(x, np.array(2)), lambda m: m.repeat(x, 2.0),
                 lambda m: m.repeat(x, np.array([True, False, True])),
                 lambda m: m.repeat(x, [1.0, 2.0, 0.0]), lambda m: m.tile(x, np.array(2)),
                 lambda m: m.take(a, [1.7, 0.2]), lambda m: m.take(a, []),
                 lambda m: m.take(a, np.array([True, False])), lambda m: m.take(a, [True]),
                 lambda m: m.einsum("ij,jk->ik", c31, c45),
                 lambda m: m.einsum("ij,ij->ij", c13, c21)):
        same(case(jnp), case(np))
    for case in (lambda m: m.take(a, np.array([1.5])), lambda m: m.take(a, [1], mode="foo"),
                 lambda m: m.repeat(x, [[1, 2, 3]]), lambda m: m.repeat(x, [1, 2]),
                 lambda m: m.einsum("ij,jk", c32, c35),
                 lambda m: m.dot(a, a.T, out=np.zeros((3, 6))[:, :3]),
                 lambda m: m.dot(a, a.T, out=np.zeros((3, 3), np.float32))):
        raises_like(lambda: case(jnp), lambda: case(np))

    @jd.compute
    def f(X):
        return jnp.take(X, [2, 0, -1, 1], axis=1) * 2 + jnp.take(X, [[0, 5], [3, 1]]).sum()
    same(f(a), np.take(a, [2, 0, -1, 1], axis=1) * 2 + np.take(a, [[0, 5], [3, 1]]).sum())

    @jd.compute
    def g(X):
        return jnp.take(X, [0, 7], axis=1)
    with pytest.raises(IndexError):
        g(a)


def test_review_items_of_stop_30():
    a = rand(5000)
    o = np.full(4, 7.0)          # take(mode='raise') leaves out= alone when it raises
    with pytest.raises(IndexError):
        jnp.take(a, [1, 2, 9000, 3], out=o)
    same(o, np.full(4, 7.0))
    assert jnp.take(a, [1, 2, 4, 3], out=o) is o
    same(o, a[[1, 2, 4, 3]])
    x, y = rand(2, 3), rand(3, 4)
    same(jnp.tensordot(x, y, axes=np.int64(1)), np.tensordot(x, y, axes=np.int64(1)))
    for f in (lambda t: jnp.squeeze(t, axis=False), lambda t: jnp.repeat(t, 2, axis=False)):
        for t in (np.array(2.5), np.ones((1, 3))):
            with pytest.raises(TypeError, match="integer is required"):
                jd.compute(f)(t)
    i32 = np.arange(4, dtype=np.int32)
    raises_like(lambda: jnp.clip(i32, 1, 2, out=np.zeros(4, np.int32), casting="equiv"),
                lambda: np.clip(i32, 1, 2, out=np.zeros(4, np.int32), casting="equiv"))
    got = np.zeros(4, np.int32)
    jnp.clip(i32, np.int32(1), np.int32(2), out=got, casting="equiv")
    same(got, np.clip(i32, 1, 2))


def test_repeat_matrix_transpose_and_argmax_errors_read_as_numpys():
    """NumPy's words: a negative single count is a negative dimension, negative counts per
    element are negative repeats; matrix_transpose below 2-d says the installed NumPy's
    message; argmax / argmin of a 0-d array take it as 1-d (axis 0 or -1, and an
    AxisError of dimension 1)."""
    a = np.arange(6.0).reshape(2, 3)
    x = np.array(3.0)
    cases = [lambda m: m.repeat(a, -1), lambda m: m.repeat(a, [-2]),
             lambda m: m.repeat(a, [-1, 1, 1], axis=1), lambda m: m.matrix_transpose(a[0]),
             lambda m: m.matrix_transpose(x), lambda m: m.argmax(x, axis=1),
             lambda m: m.argmin(x, axis=-2)]
    for case in cases:
        with pytest.raises(ValueError) as want:
            case(np)
        with pytest.raises(type(want.value)) as got:
            case(jnp)
        assert str(want.value) in str(got.value)
    for axis in (0, -1):
        assert jnp.argmax(x, axis=axis) == np.argmax(x, axis=axis) == 0


def test_roll_and_python_int_overflow_errors_are_numpys_text():
    """roll with as many shifts as axes but not one of either is NumPy's broadcasting
    error, and a Python int out of an array's dtype's range starts with NumPy's sentence
    ('Python integer -1 out of bounds for uint8'); a float shift is truncated, as
    NumPy's roll takes int() of it. An int beyond int64 is NumPy's 'Python int too large
    to convert to C long', and a ragged list its ValueError."""
    b = rand(2, 3, 4)
    u = rand(5, dtype="uint8")
    for case in (lambda m: m.roll(b, (1, 2, 3), axis=(0, 2)),
                 lambda m: m.roll(b, np.ones((2, 2), np.int64)),
                 lambda m: m.roll(b, (1, 2), axis=(0, 1, 2)),
                 lambda m: m.add(u, -1), lambda m: m.maximum(rand(4, dtype="int8"), 1000),
                 lambda m: m.multiply(300, rand(4, dtype="int8")),
                 lambda m: m.add(rand(3, dtype="int64"), 2 ** 64),
                 lambda m: m.add(rand(3, dtype="int8"), -2 ** 70),
                 lambda m: m.sum([[1.5], [1.5, 2.5]])):
        with pytest.raises(Exception) as want:
            case(np)
        with pytest.raises(type(want.value)) as got:
            case(jnp)
        assert str(want.value) in str(got.value), (str(want.value), str(got.value))
    same(jnp.roll(b, (1, -2), axis=(0, 2)), np.roll(b, (1, -2), axis=(0, 2)))
    for shift, axis in ((1.5, None), (-1.5, 0), ((1.0, -2.7), (0, 2)), (np.float64(2), 1)):
        same(jnp.roll(b, shift, axis=axis), np.roll(b, shift, axis=axis))   # (int(shift))


def test_pieces_of_size_one_along_the_axis_share_a_concatenates_kernel():
    """A size of 1 along the concatenation axis stays symbolic in a dynamic concatenate's
    key (nothing broadcasts there): pieces of 1 to 3 elements in any pattern of ones take
    one kernel per op, rank and axis (each pattern compiled its own), served by its
    direct entry too; hstack, vstack and stack (whose operands have one shape) alike.
    Other dimensions of 1 must still match, with NumPy's error. Every element against
    NumPy's, on fresh inputs."""
    r = np.random.default_rng()
    eager.clear()
    for _ in range(6):
        ns = [int(n) for n in r.integers(1, 4, 4)]
        xs = [r.standard_normal(n) for n in ns]
        same(jnp.concatenate(xs), np.concatenate(xs))
        same(jnp.hstack(xs), np.hstack(xs))
        rows = [r.standard_normal((n, 2)) for n in ns]
        same(jnp.concatenate(rows), np.concatenate(rows))
        same(jnp.vstack(rows), np.vstack(rows))
        cols = [r.integers(-9, 9, (2, n)).astype(np.int32) for n in ns]
        same(jnp.concatenate(cols, axis=-1), np.concatenate(cols, axis=-1))
        same(jnp.hstack(cols), np.hstack(cols))
        same(jnp.concatenate(cols, axis=None), np.concatenate(cols, axis=None))
        same(jnp.concatenate(cols, axis=None, dtype=np.float64),
             np.concatenate(cols, axis=None, dtype=np.float64))
        same(jnp.stack(rows[0:1] * 3), np.stack(rows[0:1] * 3))
    info = {op: jnp.cache_info(op)["kernels"] for op in ("concatenate", "hstack", "vstack",
                                                          "stack")}
    # (concatenate: float vectors, rows along 0, int columns along -1, flattened int
    # columns (a join of int vectors), flattened to float64 (axis=None, dtype=))
    assert info == {"concatenate": 5, "hstack": 2, "vstack": 1, "stack": 1}, info
    for a, b, axis in (((1, 3), (2, 1), 0), ((1, 2), (3, 3), 1), ((2, 1), (2, 3), 0)):
        x, y = r.standard_normal(a), r.standard_normal(b)
        raises_like(lambda: jnp.concatenate([x, y], axis=axis),
                    lambda: np.concatenate([x, y], axis=axis), "must match exactly")
    for ns in ((0, 1, 2), (1, 0, 0, 3), (2, 1, 0)):
        xs = [r.standard_normal((n, 2)) for n in ns]
        same(jnp.concatenate(xs), np.concatenate(xs))
        same(jnp.concatenate(xs, axis=None), np.concatenate(xs, axis=None))


def test_empty_pieces_along_the_axis_share_a_concatenates_kernel():
    """A piece of 0 elements along the concatenation axis is served by the kernel of
    symbolic sizes there (it compiled one kernel per shape: empty operands kept kernels of
    their own), its direct entry too; an empty result, or a 0 in another dimension,
    is still NumPy's empty array. Every element against NumPy's, on fresh inputs."""
    r = np.random.default_rng()
    eager.clear()
    for _ in range(8):
        ns = [int(n) for n in r.integers(0, 4, 4)]
        ns[int(r.integers(0, 4))] += 1          # (a result with elements)
        xs = [r.standard_normal(n) for n in ns]
        same(jnp.concatenate(xs), np.concatenate(xs))
        rows = [r.integers(-9, 9, (n, 3)).astype(np.int32) for n in ns]
        same(jnp.concatenate(rows), np.concatenate(rows))
        same(jnp.vstack(rows), np.vstack(rows))
        same(jnp.concatenate(rows, axis=None), np.concatenate(rows, axis=None))
    info = {op: jnp.cache_info(op)["kernels"] for op in ("concatenate", "vstack")}
    # (concatenate: float vectors, int rows, flattened int rows (a join of int vectors))
    assert info == {"concatenate": 3, "vstack": 1}, info
    for shapes in (((0,), (0,)), ((0, 2), (0, 2)), ((2, 0), (3, 0))):
        xs = [r.standard_normal(s) for s in shapes]
        same(jnp.concatenate(xs), np.concatenate(xs))
    raises_like(lambda: jnp.concatenate([np.ones((0, 2)), np.ones((2, 3))]),
                lambda: np.concatenate([np.ones((0, 2)), np.ones((2, 3))]), "must match")


# ops of one array operand that broadcast it against nothing: (name, jd.numpy's call, NumPy's)
ONE_OPERAND = [
    ("copy", jnp.copy, np.copy),
    ("astype", lambda x: jnp.astype(x, np.float32), lambda x: x.astype(np.float32)),
    ("roll", lambda x: jnp.roll(x, 2, axis=-1), lambda x: np.roll(x, 2, axis=-1)),
    ("roll", lambda x: jnp.roll(x, -3), lambda x: np.roll(x, -3)),
    ("repeat", lambda x: jnp.repeat(x, 2, axis=0), lambda x: np.repeat(x, 2, axis=0)),
    ("repeat", lambda x: jnp.repeat(x, 3), lambda x: np.repeat(x, 3)),
    ("tril", lambda x: jnp.tril(x, -1), lambda x: np.tril(x, -1)),
    ("triu", jnp.triu, np.triu),
]


def test_sizes_of_one_share_the_kernel_of_an_op_of_one_operand():
    """copy, astype, roll, repeat, tril and triu broadcast their one array operand against
    nothing and decide nothing on a size of 1 of it: such a size stays symbolic in their
    dynamic kernels' key (builder.solid), so vectors and matrices of sizes 1, 2, 3 and 7 in
    random order take one kernel per call's rank (each pattern of ones compiled its own).
    Every element against NumPy's in float64 (float32 for astype), on fresh inputs; sizes
    0 along each axis too (NumPy's empty results, also after the kernel's direct entry
    served the others)."""
    r = np.random.default_rng()
    eager.clear()
    shapes = [(n,) for n in (1, 2, 7, 1, 3)] + [(m, n) for m in (1, 2, 7) for n in (1, 3, 7)]
    for k in r.permutation(len(shapes)):
        x = r.standard_normal(shapes[k])
        for _, op, ref in ONE_OPERAND:
            same(op(x), ref(x))
    info = {name: eager.cache_info(name)["kernels"] for name, _, _ in ONE_OPERAND}
    # (a kernel per rank, and per call for roll and repeat: two calls each)
    assert info == {"copy": 2, "astype": 2, "roll": 4, "repeat": 4, "tril": 2,
                    "triu": 2}, info
    for shape in ((0,), (0, 3), (3, 0), (1, 0), (0, 1), (2, 0, 3)):
        x = r.standard_normal(shape)
        for _, op, ref in ONE_OPERAND:
            same(op(x), ref(x))
    for shape in ((1, 1, 1), (2, 1, 7), (1, 7, 2), (7, 2, 1)):
        x = r.standard_normal(shape)
        for _, op, ref in ONE_OPERAND:
            same(op(x), ref(x))
    for n in (1, 2, 7):         # (diff: a length of 1 along its axis is NumPy's empty result)
        for shape in ((n, 2), (2, n), (1, n), (n, 1)):
            x = r.standard_normal(shape)
            for axis in (0, 1):
                same(jnp.diff(x, axis=axis), np.diff(x, axis=axis))
    assert eager.cache_info("diff")["kernels"] == 2     # (one per axis)


def test_sizes_of_one_share_a_takes_kernel():
    """take broadcasts neither the array nor the indices: a size of 1 of either stays
    symbolic in its dynamic kernel's key (builder.solid), so arrays of sizes 1 to 7 and
    indices of 1 to 3 in random order take one kernel per rank, axis and mode (each
    pattern of ones compiled its own). Every element against NumPy's in float64, on fresh
    inputs; an index out of range, or any index into an empty axis, is still NumPy's
    IndexError (after the kernel's direct entry served other sizes)."""
    r = np.random.default_rng()
    eager.clear()
    cases = [(n, k) for n in (1, 2, 3, 7) for k in (1, 2, 3)]
    for c in r.permutation(len(cases)):
        n, k = cases[c]
        a, m = r.standard_normal(n), r.standard_normal((int(r.integers(1, 4)), n))
        ind = r.integers(-n, n, k)
        same(jnp.take(a, ind), np.take(a, ind))
        same(jnp.take(m, ind, axis=-1), np.take(m, ind, axis=-1))
        far = r.integers(-9, 9, k)
        same(jnp.take(m, far, axis=1, mode="wrap"), np.take(m, far, axis=1, mode="wrap"))
        same(jnp.take(a, far, mode="clip"), np.take(a, far, mode="clip"))
    info = eager.cache_info("take")["kernels"]
    assert info == 4, info      # (axis None on vectors, -1 and 1 (wrap) on rows, clip)
    for n in (1, 2):
        a = r.standard_normal(n)
        for bad in (np.array([n]), np.array([0, -n - 1])):
            raises_like(lambda: jnp.take(a, bad), lambda: np.take(a, bad), "out of bounds")
    for mode in ("raise", "wrap", "clip"):
        raises_like(lambda: jnp.take(np.ones(0), np.array([0]), mode=mode),
                    lambda: np.take(np.ones(0), np.array([0]), mode=mode), "empty")
        same(jnp.take(np.ones(0), np.array([], np.int64), mode=mode),
             np.take(np.ones(0), np.array([], np.int64), mode=mode))
    for shape in ((1, 1), (1, 1, 1), (3, 1)):       # (axis=None over dimensions of 1)
        a = r.standard_normal(shape)
        same(jnp.take(a, np.array([0, -1])), np.take(a, np.array([0, -1])))
        raises_like(lambda: jnp.take(a, np.array([a.size])),
                    lambda: np.take(a, np.array([a.size])), "out of bounds")
