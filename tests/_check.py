"""Helpers for differential tests against NumPy float64 references."""
import numpy as np

RTOL = {np.dtype(np.float32): 1e-5, np.dtype(np.float64): 1e-12}


def sentinels(dtype):
    """Two distinct fill values: an element left unwritten equals the reference for at most
    one of them, so running with both catches every unwritten element."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return [np.True_, np.False_]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return [dtype.type(info.max), dtype.type(info.min + 1)]
    return [dtype.type(np.nan), dtype.type(-12345.5)]


def assert_matches(got, expected, dtype, rtol=None, atol=0.0):
    """`got` has the expected dtype and shape, and matches `expected` (float64 reference,
    or exact for integers and booleans)."""
    dtype = np.dtype(dtype)
    assert isinstance(got, np.ndarray), f"expected a numpy array, got {type(got).__name__}"
    assert got.dtype == dtype, f"dtype {got.dtype}, expected {dtype}"
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"shape {got.shape}, expected {expected.shape}"
    if dtype.kind in "iub":
        np.testing.assert_array_equal(got, expected.astype(dtype))
    else:
        if rtol is None:
            rtol = RTOL[dtype]
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=rtol, atol=atol)


def check(f, args, expected, dtype, rtol=None, atol=0.0, out=True):
    """Call f(*args), compare with `expected`; then (out=True) call again with out= arrays
    prefilled with sentinels and check that every element was written and `out` returned."""
    got = f(*args)
    assert_matches(got, expected, dtype, rtol, atol)
    if out:
        for s in sentinels(dtype):
            buf = np.full(np.shape(expected), s, dtype=dtype)
            res = f(*args, out=buf)
            assert_matches(buf, expected, dtype, rtol, atol)
            if res is not None:
                assert_matches(np.asarray(res), expected, dtype, rtol, atol)
    return got
