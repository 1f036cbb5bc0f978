"""Scalar types: the dtypes jitdl supports and NumPy 2 (NEP 50) promotion with weak Python scalars."""
from __future__ import annotations

import numpy as np

SUPPORTED = ("bool", "int8", "int16", "int32", "int64", "uint8", "float32", "float64")
FLOATS = ("float32", "float64")
INTS = ("int8", "int16", "int32", "int64", "uint8")
_names = {}     # a dtype as given (str, type, np.dtype) -> NumPy's name for it



def numpy_name(dtype) -> str:
    """NumPy's name of a dtype (supported or not), or a TypeError if it is not one."""
    cached = isinstance(dtype, (str, type, np.dtype))
    name = _names.get(dtype) if cached else None
    if name is None:
        try:
            name = np.dtype(dtype).name     # (NumPy's name lookup: microseconds)
        except TypeError:
            raise TypeError(f"{dtype!r} is not a dtype") from None
        if cached and len(_names) < 256:
            _names[dtype] = name
    return name


def normalize(dtype) -> str:
    """Return the canonical name of a supported dtype, or raise TypeError naming it."""
    name = numpy_name(dtype)
    if name not in SUPPORTED:
        raise TypeError(f"dtype {name} is not supported; supported: {', '.join(SUPPORTED)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOATS


def is_int(dtype: str) -> bool:
    return dtype in INTS


def is_signed(dtype: str) -> bool:
    return dtype in ("int8", "int16", "int32", "int64")


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def weak_kind_dtype(value) -> str:
    """The dtype a Python scalar stands for when it is weak (NEP 50)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int64"
    return "float64"
