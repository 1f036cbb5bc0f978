"""Tensors and the operations that produce them: inputs, scalar parameters, compute stages."""
from __future__ import annotations

import importlib
import math
import sys
from dataclasses import dataclass, field

import numpy as np

from jitdl.errors import ArgumentError, DefinitionError, user_loc
from jitdl.ir import build
from jitdl.ir.nodes import Access, Expr, Reduce


@dataclass(eq=False)
class Placeholder:
    """An array argument of the definition."""
    arg_index: int


@dataclass(eq=False)
class Compute:
    """out[axes] = body, where body may be a top-level Reduce over extra axes."""
    axes: tuple          # of IterVar (data axes)
    body: Expr
    loc: object = None

    @property
    def reduce(self):
        return self.body if isinstance(self.body, Reduce) else None

    @property
    def reduce_axes(self):
        return self.body.axes if isinstance(self.body, Reduce) else ()


@dataclass(eq=False)
class Declared:
    """A tensor given a shape first (jd.tensor(shape)) and filled by index notation."""
    loc: object = None


@dataclass(eq=False, repr=False)
class Tensor:
    name: str
    shape: tuple
    dtype: str
    op: object = field(default=None)
    auto_named: bool = False        # named by jitdl, not the user: may take the variable's name

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        """The number of elements (an int, or an expression over symbolic extents)."""
        return math.prod(self.shape)

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        for x in idx:       # (before the count: X[::-1] of a 2-d X is a slice, not a rank)
            if isinstance(x, slice) or x is Ellipsis or x is None:
                raise DefinitionError(
                    f"{self.name}[...] takes one index expression per dimension; slices, "
                    "`...` and None are not supported in definitions", user_loc())
        if len(idx) != len(self.shape):
            if isinstance(self.op, Placeholder):     # the argument does not fit the use
                raise ArgumentError(
                    f"argument '{self.name}' was passed a {len(self.shape)}-d array (shape "
                    f"{self.shape}) but the definition indexes it with {len(idx)} "
                    f"index{'es' * (len(idx) != 1)}: pass an array of {len(idx)} "
                    f"dimension{'s' * (len(idx) != 1)}"
                    + (f" (or index all {len(self.shape)}: a partial index is not a row or a "
                       "slice inside a definition)" if len(idx) < len(self.shape) else ""),
                    user_loc())
            raise DefinitionError(
                f"{self.name} has {len(self.shape)} dimension(s) (shape {self.shape}) "
                f"but is indexed with {len(idx)}", user_loc())
        try:
            indices = [build.as_expr(x) for x in idx]
        except TypeError as e:
            raise DefinitionError(f"bad index for {self.name}: {e}", user_loc()) from None
        for x in indices:
            if x.dtype not in ("int8", "int16", "int32", "int64", "uint8", "bool"):
                raise DefinitionError(
                    f"index of {self.name} must be an integer, got {x.dtype} `{x}`", user_loc())
        return Access(self, tuple(build.cast(x, "int64") for x in indices), user_loc())

    def __setitem__(self, idx, value):
        raise DefinitionError(
            f"cannot assign into {self.name}: inputs are read-only, and index-notation "
            f"definitions (`Y[i, j] = ...`) create new tensors", user_loc())

    def __repr__(self):
        kind = type(self.op).__name__.lower() if self.op is not None else "tensor"
        return f"<jitdl {kind} {self.name}: {self.dtype}{list(self.shape)}>"

    __jitdl_whole__ = True      # (an element's operators give way to a tensor's: alpha * X)

    # Whole-tensor arithmetic and methods (`X + Y`, `np.exp(X)`, `X.T`, `X.sum(axis=1)`) are
    # jd.numpy's functions on the tensor, which add stages; where jitdl needs one element
    # (math.exp(X) in an element expression, jd.select(c, X, 0)) a tensor is an error.
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        fn = whole_function(ufunc.__name__) if method == "__call__" else None
        if fn is None:
            raise whole_tensor_error(ufunc.__name__ if method == "__call__"
                                     else f"{ufunc.__name__}.{method}", inputs)
        return fn(*inputs, **kwargs)

    def __array_function__(self, func, types, args, kwargs):    # np.dot(X, W), np.concatenate
        fn = whole_function(func.__name__)
        if fn is None:
            raise whole_tensor_error(func.__name__, args)
        return fn(*args, **kwargs)

    def __array__(self, *args, **kwargs):   # np.asarray(X): a tensor has no values yet
        raise DefinitionError(
            f"{self.name} is a tensor of the definition being traced: it has no values to "
            "make a NumPy array of; use jd.numpy's functions (or index notation) on it",
            user_loc())

    def __bool__(self):         # `if X.sum() > 0:` would always take the first branch
        raise DefinitionError(
            f"the truth value of the whole tensor {self.name} ({self.dtype}"
            f"{list(self.shape)}) is not known while the definition is traced: `if`, "
            "`while`, `and`/`or`/`not` and `assert` cannot test it; use jd.numpy.where(cond, "
            "a, b) (or `a if cond else b` on elements)", user_loc())

    def __float__(self):        # math.exp(X) where the call is not rewritten
        raise whole_tensor_error(None, (self,))

    def __jitdl_expr__(self):   # an element was needed: jd.select(c, X, 0), X[i] + Y ...
        raise whole_tensor_error(None, (self,))

    @property
    def T(self):
        return _whole("transpose", self)

    def __matmul__(self, other):
        return _whole("matmul", self, other, symbol="@")

    def __rmatmul__(self, other):
        return _whole("matmul", other, self, symbol="@")


# The op library's functions on whole tensors, by NumPy name; jd.numpy fills this when it
# is imported (this layer cannot import the op library, which is built on it).
WHOLE = {}


def whole_function(name):
    """The op library's function named `name` for whole tensors, or None; imports jd.numpy
    the first time (`import jitdl` leaves it for its first use, and a definition may reach
    `X + 2 * Y` before anything else has imported it)."""
    if not WHOLE:
        importlib.import_module("jitdl.numpy")
    return WHOLE.get(name)


def _whole(name, *args, symbol=None, **kwargs):
    fn = whole_function(name)
    if fn is None:
        raise whole_tensor_error(symbol or name, args, infix=symbol is not None)
    return fn(*args, **kwargs)


def _whole_op(symbol, name, reflected=False, unary=False):
    def method(self, *other):
        if unary:
            return _whole(name, self)
        args = (other[0], self) if reflected else (self, other[0])
        return _whole(name, *args, symbol=symbol)
    return method


for _sym, _name, _methods in (
        ("+", "add", ("add", "radd")), ("-", "subtract", ("sub", "rsub")),
        ("*", "multiply", ("mul", "rmul")), ("/", "divide", ("truediv", "rtruediv")),
        ("//", "floor_divide", ("floordiv", "rfloordiv")), ("%", "remainder", ("mod", "rmod")),
        ("**", "power", ("pow", "rpow")), ("&", "bitwise_and", ("and", "rand")),
        ("|", "bitwise_or", ("or", "ror")), ("^", "bitwise_xor", ("xor", "rxor")),
        ("<<", "left_shift", ("lshift", "rlshift")), (">>", "right_shift", ("rshift", "rrshift")),
        ("<", "less", ("lt",)), ("<=", "less_equal", ("le",)), (">", "greater", ("gt",)),
        (">=", "greater_equal", ("ge",))):
    for _n, _method in enumerate(_methods):
        setattr(Tensor, f"__{_method}__", _whole_op(_sym, _name, reflected=_n == 1))
for _sym, _name, _method in (("-", "negative", "neg"), ("~", "invert", "invert"),
                             ("abs", "absolute", "abs"), ("+", "positive", "pos")):
    setattr(Tensor, f"__{_method}__", _whole_op(_sym, _name, unary=True))


def _whole_method(name):
    def method(self, *args, **kwargs):
        return _whole(name, self, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"jd.numpy.{name} of this tensor (inside a definition)."
    return method


for _name in ("sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "all",
              "any", "astype", "ravel", "flatten", "squeeze", "clip", "round", "dot",
              "swapaxes", "repeat", "take", "ptp"):
    setattr(Tensor, _name, _whole_method(_name))


def _transpose(self, *axes):
    """jd.numpy.transpose of this tensor; like ndarray.transpose, the axes may come as
    one tuple or as separate ints (X.transpose(1, 0, 2))."""
    return _whole("transpose", self, axes[0] if len(axes) == 1 else axes or None)


def _reshape(self, *shape, **kwargs):
    """jd.numpy.reshape of this tensor; like ndarray.reshape, the shape may come as one
    tuple or as separate ints (X.reshape(2, -1))."""
    return _whole("reshape", self, shape[0] if len(shape) == 1 else shape, **kwargs)


Tensor.transpose, Tensor.reshape = _transpose, _reshape


def _whole_compare(symbol, name, identity):
    """`X == 0` on a whole tensor is jd.numpy's equal (it was a silent False before), and
    so is `X == alpha` or `alpha == X` with a scalar argument or expression, in helper
    functions too, which the capture does not rewrite (Python reflects `alpha == X` to
    the tensor). A tensor and another tensor compare element by element where the user's
    code (a helper) writes `==` while a definition is traced (an array or a list there is
    jd.numpy's error: arrays are the definition's parameters); `t in tensors`, in jitdl's
    code or the user's, compares by identity."""
    def method(self, other):
        if isinstance(other, (bool, int, float, np.generic, Expr)) or \
                isinstance(other, (Tensor, np.ndarray, list, tuple)) and \
                build.written_in_definition(sys._getframe(1)):
            return _whole(name, self, other, symbol=symbol)
        return identity(self, other)
    return method


# set after the class is made, so Tensor keeps object's hash
Tensor.__eq__ = _whole_compare("==", "equal", lambda a, b: a is b)
Tensor.__ne__ = _whole_compare("!=", "not_equal", lambda a, b: a is not b)


def _index_names(ndim):
    return list("ijklmn"[:ndim]) if ndim <= 6 else [f"i{d}" for d in range(ndim)]


def _show(x, element):
    """An argument of the offending call as the user wrote it, or indexed per element."""
    if isinstance(x, Tensor):
        if not element:
            return x.name
        idx = _index_names(x.ndim)
        return f"{x.name}[{', '.join(idx) if idx else '()'}]"
    if isinstance(x, (Expr, bool, int, float)):
        return repr(x)
    return "..."


REDUCTIONS = ("sum", "prod", "max", "min", "any", "all", "argmax", "argmin")


def whole_tensor_error(fn, args, infix=False, unary=False):
    """The error for a whole tensor where jitdl needs one element (`exp(X)`, `X + 1`):
    the call as written and the same call per element, in index notation and TE style.
    fn: the function's name or the operator; None when it is not known."""
    t = next(a for a in args if isinstance(a, Tensor))

    def call(element):
        shown = [_show(a, element) for a in args]
        if fn is None:
            return f"... {shown[0]} ..." if element else shown[0]
        if unary:
            return f"abs({shown[0]})" if fn == "abs" else f"{fn}{shown[0]}"
        if infix:
            return f" {fn} ".join(shown)
        return f"{fn}({', '.join(shown)})"
    idx = _index_names(t.ndim)
    elem = call(True)
    dims = ", ".join(map(str, t.shape))
    where = f"`{call(False)}`: " if fn is not None else ""
    if fn in REDUCTIONS and len(args) == 1:
        ranges = " ".join(f"for {i} in range({n})" for i, n in zip(idx, t.shape))
        return DefinitionError(
            f"{where}{t.name} is a whole tensor ({t.dtype}[{dims}]); a reduction takes an "
            f"element expression and the ranges of its indices: write "
            f"`s = {fn}({_show(t, True)} {ranges})`, or keep some indices: "
            f"`s[i] = {fn}(... for j in range(...))`", user_loc())
    if idx:
        how = (f"`Y[{', '.join(idx)}] = {elem}`, or "
               f"`jd.tensor({t.name}.shape, lambda {', '.join(idx)}: {elem})`")
    else:
        how = f"`jd.tensor((), lambda: {elem})`"
    return DefinitionError(
        f"{where}{t.name} is a whole tensor ({t.dtype}[{dims}]) where jitdl needs one "
        f"element: definitions work element by element. Write {how}", user_loc())

