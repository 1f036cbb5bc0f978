"""Tensors and the operations that produce them: inputs, scalar parameters, compute stages."""
from __future__ import annotations

from dataclasses import dataclass, field

from jitdl.errors import DefinitionError, user_loc
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

    # arithmetic on a whole tensor is not a definition: say what to do
    def _whole(self, *_):
        raise DefinitionError(
            f"`{self.name}` is a whole tensor; jitdl definitions work element by element: "
            f"write e.g. `Y[i, j] = {self.name}[i, j] + ...` or use jd.tensor(shape, lambda ...)",
            user_loc())

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _whole
    __truediv__ = __rtruediv__ = __matmul__ = __rmatmul__ = __neg__ = _whole

