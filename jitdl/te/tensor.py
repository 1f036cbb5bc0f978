"""Tensors and the operations that produce them: inputs, scalar parameters, compute stages."""
from __future__ import annotations

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

    def __getitem__(self, idx):
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            if isinstance(self.op, Placeholder):     # the argument does not fit the use
                raise ArgumentError(
                    f"argument '{self.name}' was passed a {len(self.shape)}-d array (shape "
                    f"{self.shape}) but the definition indexes it with {len(idx)} "
                    f"index{'es' * (len(idx) != 1)}: pass an array of {len(idx)} "
                    f"dimension{'s' * (len(idx) != 1)}", user_loc())
            raise DefinitionError(
                f"{self.name} has {len(self.shape)} dimension(s) (shape {self.shape}) "
                f"but is indexed with {len(idx)}", user_loc())
        for x in idx:
            if isinstance(x, slice) or x is Ellipsis or x is None:
                raise DefinitionError(
                    f"{self.name}[...] takes one index expression per dimension; slices, "
                    "`...` and None are not supported in definitions", user_loc())
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

    @property
    def T(self):
        raise DefinitionError("use index notation for transposes: Y[j, i] = X[i, j]", user_loc())

    # arithmetic and math on a whole tensor are not a definition: say what to write
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        raise whole_tensor_error(ufunc.__name__ if method == "__call__"
                                 else f"{ufunc.__name__}.{method}", inputs)

    def __float__(self):        # math.exp(X) where the call is not rewritten
        raise whole_tensor_error(None, (self,))

    def __jitdl_expr__(self):   # jd.exp(X), jd.max(X, 0.0), jd.select(c, X, 0) ...
        raise whole_tensor_error(None, (self,))

    def __matmul__(self, other):
        raise DefinitionError(
            f"`{self.name} @ ...`: {self.name} is a whole tensor; write the product by "
            f"index: `C[i, j] = sum(A[i, k] * B[k, j] for k in range(K))`", user_loc())

    __rmatmul__ = __matmul__


def _whole_op(symbol, reflected=False, unary=False):
    def method(self, *other):
        if unary:
            raise whole_tensor_error(symbol, (self,), unary=True)
        args = (other[0], self) if reflected else (self, other[0])
        raise whole_tensor_error(symbol, args, infix=True)
    return method


for _sym, _names in (("+", ("add", "radd")), ("-", ("sub", "rsub")), ("*", ("mul", "rmul")),
                     ("/", ("truediv", "rtruediv")), ("//", ("floordiv", "rfloordiv")),
                     ("%", ("mod", "rmod")), ("**", ("pow", "rpow")), ("&", ("and", "rand")),
                     ("|", ("or", "ror")), ("^", ("xor", "rxor")), ("<<", ("lshift", "rlshift")),
                     (">>", ("rshift", "rrshift")), ("<", ("lt",)), ("<=", ("le",)),
                     (">", ("gt",)), (">=", ("ge",))):
    for _n, _name in enumerate(_names):
        setattr(Tensor, f"__{_name}__", _whole_op(_sym, reflected=_n == 1))
for _sym, _name in (("-", "neg"), ("~", "invert"), ("abs", "abs")):
    setattr(Tensor, f"__{_name}__", _whole_op(_sym, unary=True))


def _whole_compare(symbol, identity):
    """`X == 0` on a whole tensor is an error (it was a silent False); tensors still
    compare by identity with anything that is not a number (`t in stages`)."""
    def method(self, other):
        if isinstance(other, (bool, int, float, np.generic)):
            raise whole_tensor_error(symbol, (self, other), infix=True)
        return identity(self, other)
    return method


# set after the class is made, so Tensor keeps object's hash
Tensor.__eq__ = _whole_compare("==", lambda a, b: a is b)
Tensor.__ne__ = _whole_compare("!=", lambda a, b: a is not b)


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

