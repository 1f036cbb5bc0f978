"""What the rewritten function calls at trace time (the `__jd__` namespace).

Each helper keeps Python's meaning for concrete values and builds IR for symbolic ones.
"""
from __future__ import annotations

import builtins
import math
import threading
from collections.abc import KeysView, ValuesView

import numpy as np

from jitdl.capture.infer import define_stage, pending_reduce_axes, pending_scope
from jitdl.errors import DefinitionError, user_loc
from jitdl.ir import build
from jitdl import dtypes
from jitdl.ir.nodes import (Access, BinOp, Binary, Cast, CmpOp, Compare, Const, Expr, IterVar,
                            ReduceOp, Select, SizeVar, Var)
from jitdl.ir.visit import walk_unique
from jitdl.te import naming, ops
from jitdl.te.tensor import Tensor, whole_function, whole_tensor_error

_CMPS = {"==": CmpOp.EQ, "!=": CmpOp.NE, "<": CmpOp.LT, "<=": CmpOp.LE, ">": CmpOp.GT,
         ">=": CmpOp.GE}


def symbolic(x) -> bool:
    return ops.is_expr(x)


def define(name, existing, index_names, fn, lineno):
    try:
        target = existing()
    except NameError:
        target = None
    if target is not None and not (isinstance(target, Tensor) and target.op is not None
                                   and type(target.op).__name__ == "Declared"):
        what = "an input" if isinstance(target, Tensor) and \
            type(target.op).__name__ == "Placeholder" else "already defined"
        raise DefinitionError(
            f"`{name}[{', '.join(index_names)}] = ...` assigns to {name}, which is {what}; "
            "index notation defines a new tensor (or fills one declared with "
            "jd.tensor(shape))", user_loc())
    return define_stage(name, target, index_names, fn)


def bind(name, value):
    if isinstance(value, Tensor) and value.auto_named:
        value.name, value.auto_named = name, False
    elif isinstance(value, IterVar) and naming.auto_named(value.var):
        object.__setattr__(value.var, "name", name)
    return value


def ifexp(cond, t, f):
    if symbolic(cond):
        with build.guarded_arm():
            a, b = t(), f()
        out = build.select(cond, a, b)
        if isinstance(out, Select) and build.a_size(cond) and \
                all(_python_number(x) for x in (a, b)):
            # (of sizes and Python numbers alone, a static trace has the Python number of
            # one arm: weak, so that `X * (2.0 if n == 3 else 1)` of a float32 X stays
            # float32 in a dynamic kernel too)
            out = build.python_choice(out, a, b)
        return out
    return t() if cond else f()


def _python_number(x):
    """x is a Python number in a static trace: one, or an expression of sizes and them
    (a condition of sizes too, a bool there: `n == 3 and 2.0 or 1.0`)."""
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic) or \
        isinstance(x, Expr) and (x.weak or build.python_type(x) is not None)


_asserted = threading.local()


class asserted_sizes:
    """The equal sizes a definition's asserts name (`assert X.shape[1] == W.shape[0]` of
    dynamic X and W), collected over one trace: the kernel checks them at the call."""

    def __enter__(self):
        self.saved = getattr(_asserted, "pairs", None)
        _asserted.pairs = []
        return _asserted.pairs

    def __exit__(self, *exc):
        _asserted.pairs = self.saved


_fortran = threading.local()


class fortran_results:
    """The tensors of one trace that a jd.numpy function was asked to lay out in Fortran
    order (order='F'), collected as {id: (tensor, function name, source location)}: a
    definition's kernel writes its results in C order, so the trace refuses such a
    tensor among its results (an intermediate one's layout is the compiler's)."""

    def __enter__(self):
        self.saved = getattr(_fortran, "asked", None)
        _fortran.asked = {}
        return _fortran.asked

    def __exit__(self, *exc):
        _fortran.asked = self.saved


def ask_fortran(t, name, loc):
    """Note that function `name` was asked for tensor t in Fortran order (at `loc`)."""
    asked = getattr(_fortran, "asked", None)
    if asked is not None:
        asked[id(t)] = (t, name, loc)     # (t kept: its id stays its own)


def assert_(test, msg):
    """Python's assert; of a symbolic test, equal sizes of dynamic arguments (and of
    several, joined by `and`) become checks at the call, which nothing else can decide."""
    if isinstance(test, Const):
        test = bool(test.value)     # (`n == m and X.ndim == 3` of a 2-d X: False)
    if not symbolic(test):
        if not test:
            raise AssertionError(*(() if msg is None else (msg(),)))
        return
    pairs = _equal_sizes(test)
    if pairs is None or getattr(_asserted, "pairs", None) is None:
        raise DefinitionError(
            f"assert {test}: the condition is symbolic (it depends on the sizes of dynamic "
            "arguments, on elements or on scalar arguments) and cannot be decided while "
            "tracing; only equal sizes of dynamic arguments (`X.shape[1] == W.shape[0]`, "
            "joined by `and`) are checked at the call", user_loc())
    _asserted.pairs.extend(pairs)


def _equal_sizes(test):
    """[(a, b)] of SizeVars that `test` says are equal, or None for any other test."""
    if isinstance(test, Binary) and test.op == BinOp.AND:
        a, b = _equal_sizes(test.a), _equal_sizes(test.b)
        return None if a is None or b is None else a + b
    if isinstance(test, Compare) and test.op == CmpOp.EQ and \
            isinstance(test.a, SizeVar) and isinstance(test.b, SizeVar):
        return [(test.a, test.b)]
    return None


def and_(*thunks):
    """`a and b and ...`: Python's, each operand evaluated only while the ones before are
    true; from a symbolic operand on, conditions (bools) are joined by a logical and, other
    values give Python's value (_joined)."""
    out = thunks[0]()
    for th in thunks[1:]:
        if not symbolic(out):
            if not out:
                return out
            out = th()
            continue
        with build.guarded_arm():
            b = th()
        out = _joined(BinOp.AND, out, b)
    return out


def or_(*thunks):
    """`a or b or ...`, as and_."""
    out = thunks[0]()
    for th in thunks[1:]:
        if not symbolic(out):
            if out:
                return out
            out = th()
            continue
        with build.guarded_arm():
            b = th()
        out = _joined(BinOp.OR, out, b)
    return out


def _is_bool(x):
    return isinstance(x, (bool, np.bool_)) or isinstance(x, Expr) and x.dtype == "bool"


def _joined(op, a, b):
    """`a and b` / `a or b` of a symbolic a: of two conditions the logical operation; else
    Python's value, `b if a else a` / `a if a else b` (`n and 2.0 or 1.0` of a size n is
    2.0 where n is not 0, `n > 2 and 5.0` is 5.0 or False), where a logical operation
    gave a bool (1.0, True) for every size, silently."""
    if _is_bool(a) and _is_bool(b):
        return build.logical(op, a, b)
    cond = build.truth(a)
    return ifexp(cond, lambda: b, lambda: a) if op == BinOp.AND else \
        ifexp(cond, lambda: a, lambda: b)


def not_(x):
    return build.logical_not(x) if symbolic(x) else not x


def _holds_symbolic(x) -> bool:
    """x is a tuple or list with a symbolic value in it, at any depth (X.shape of a
    dynamic X)."""
    return isinstance(x, (tuple, list)) and \
        any(symbolic(e) or _holds_symbolic(e) for e in x)


def _equal_sequences(a, b):
    """`a == b` of two tuples (or lists), one holding symbolic sizes (X.shape == Y.shape
    of dynamic X and Y): the elements' comparisons joined by `and`, as Python compares
    sequences. Python's own `==` there compared the sizes as objects (X_n0 is not Y_n0):
    a False baked into the kernel for every size."""
    if isinstance(a, tuple) != isinstance(b, tuple) or len(a) != len(b):
        return False
    return and_(*[lambda x=x, y=y: cmp("==", x, y) for x, y in zip(a, b)])


def _ordered_sequences(op, a, b):
    """`a < b` (<=, >, >=) of two tuples (or lists), one holding symbolic sizes (X.shape <
    (4, 4) of a dynamic X): Python's order, the first pair that differs decides, else the
    lengths. Python's own took `X_n0 == 4` for False (other objects) and answered `X_n0 <
    4` alone: X (4, 2) was not below (4, 4), silently."""
    n, strict = min(len(a), len(b)), op[0]

    def first(j, last):         # a[:j] == b[:j], then a[j] strict b[j] (or the lengths)
        return and_(*[lambda x=x, y=y: cmp("==", x, y) for x, y in zip(a[:j], b[:j])], last)
    return or_(*[lambda j=j: first(j, lambda: cmp(strict, a[j], b[j])) for j in range(n)],
               lambda: first(n, lambda: cmp(op, len(a), len(b))))


def _contains(box, x):
    """`x in box` where x or an element of a tuple, list or set box is symbolic (`n in (3,
    4)` of a dynamic size, `i in (0, 1)` of an index): the equalities joined by `or`.
    Python's `in` compared them as objects, a False whatever the sizes or the index."""
    if isinstance(box, (dict, KeysView, ValuesView)):
        box = list(box)     # (`n in d.keys()`: a view's own `in` hashed the expression)
    elif isinstance(box, np.ndarray):
        box = box.ravel().tolist()
    if isinstance(box, range):      # (never listed: `n in range(10**12)` is one test)
        if not symbolic(x):
            return False if isinstance(x, (tuple, list)) else x in box
        if box.step < 0:
            box = box[::-1]         # (the same points, ascending)
        whole = box.step == 1 and dtypes.is_int(build.as_expr(x).dtype)   # (2.5: not in)
        return and_(lambda: cmp(">=", x, box.start), lambda: cmp("<", x, box.stop),
                    lambda: whole or cmp("==", (x - box.start) % box.step, 0))
    if isinstance(box, (tuple, list, set, frozenset)) and \
            (symbolic(x) or _holds_symbolic(x) or _holds_symbolic(list(box))):
        return or_(*[lambda e=e: cmp("==", x, e) for e in box])
    return x in box


def item(box, key):
    """`box[key]` in the definition's own code. A dict looked up with a symbolic key (a
    dynamic size, X.shape of a dynamic X, an index, an element) is a select over its keys
    (_lookup): Python's lookup hashed the expression and missed every key, a KeyError, or
    a wrong value where the dict has a default."""
    if isinstance(box, dict) and box and (symbolic(key) or _holds_symbolic(key)):
        factory = getattr(box, "default_factory", None)
        if factory is not None:
            return _lookup(box, key, (factory(),), "[]")
        missing = getattr(type(box), "__missing__", None)
        if missing is not None:     # (collections.Counter's 0; a subclass's, of the key)
            try:
                default = (missing(box, key),)
            except Exception:       # (one that raises, KeyError(k): no default, as dict's)
                default = ()
            return _lookup(box, key, default, "[]")
        return _lookup(box, key, (), "[]")
    return box[key]


def get_of(box):
    """`box.get` in the definition's own code: of a dict, a get that takes a symbolic key
    as `item` does."""
    if not isinstance(box, dict):
        return box.get

    def get(key, default=None):
        if box and (symbolic(key) or _holds_symbolic(key)):
            return _lookup(box, key, (default,), ".get()")
        return box.get(key, default)
    return get


def _lookup(box, key, default, how):
    """The value of dict `box` at the symbolic `key`: `v1 if key == k1 else v2 if key ==
    k2 ... else default` (`default` a 1-tuple, or () for `box[key]`). Without a default
    the key must be one of the keys: a dynamic size is checked at the call (an
    ArgumentShapeError there where it is not); another symbolic key is refused here."""
    arms = []
    for k, v in box.items():
        same = cmp("==", key, k)
        if not symbolic(same):
            if same:
                return v
            continue
        arms.append((same, k, v))
    if not arms:
        if default:
            return default[0]
        raise KeyError(key)
    for what, v in [(f"the value at {k!r}", v) for _, k, v in arms] + \
            [("the default", d) for d in default]:
        if not (symbolic(v) or isinstance(v, (bool, int, float, np.generic))):
            raise DefinitionError(
                f"a dict looked up ({how}) with the symbolic key `{key}`: that selects "
                f"among its values where the kernel runs, so each value must be a number "
                f"or an expression; {what} is {type(v).__name__} {v!r}" +
                ("; give a default: `.get(key, default)`" if v is None and
                 what == "the default" else ""), user_loc())
    if not default:
        keys = [k for _, k, _ in arms]
        if isinstance(key, Expr) and key.dtype == "bool" and {False, True} <= set(keys):
            pass        # (a condition is one of the keys True, False: no check needed)
        elif not _require_key(key, keys):
            raise DefinitionError(
                f"a dict looked up ([]) with the symbolic key `{key}`: jitdl cannot check "
                f"before the kernel runs that it is one of the keys "
                f"({', '.join(map(repr, keys))}); give a default: `.get(key, default)`",
                user_loc())
        default = (arms.pop()[2],)      # (the last key's value: the check excludes others)
    out = default[0]
    for same, _, v in reversed(arms):
        out = ifexp(same, lambda v=v: v, lambda out=out: out)
    return out


def _require_key(key, keys):
    """Have the call check that the size expression `key` is one of the int `keys` (min
    over the keys of |key - k| == 0); False where the call cannot (key is no size)."""
    if not isinstance(key, Expr) or not all(
            isinstance(k, (int, float, np.integer, np.floating)) and float(k).is_integer()
            for k in keys):
        return False
    gap = None
    for k in keys:
        k = int(k)
        d = build.binary(BinOp.MAX, build.binary(BinOp.SUB, key, k),
                         build.binary(BinOp.SUB, k, key))
        gap = d if gap is None else build.binary(BinOp.MIN, gap, d)
    return ops.require_size(
        gap, "==", 0, f"KeyError: `{key}` is not a key of the dict looked up here (its keys: "
        f"{', '.join(str(int(k)) for k in keys)})", user_loc()) is not None


# (what a number never equals: a symbolic size or index against one is Python's False)
_NOT_NUMBERS = (type(None), str, bytes, tuple, list, dict, set, frozenset, range)


def cmp(op, a, b):
    if op in ("in", "not in"):
        found = _contains(b, a)
        return found if op == "in" else not_(found)
    if isinstance(a, Tensor) or isinstance(b, Tensor):     # whole tensors: jd.numpy's
        return tensor_compare(op, a, b)
    if op in ("==", "!=") and (_holds_symbolic(a) or _holds_symbolic(b)) and \
            isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        same = _equal_sequences(a, b)
        return same if op == "==" else not_(same)
    if op in ("<", "<=", ">", ">=") and (_holds_symbolic(a) or _holds_symbolic(b)) and \
            isinstance(a, (tuple, list)) and isinstance(a, tuple) == isinstance(b, tuple) \
            and isinstance(b, (tuple, list)):
        return _ordered_sequences(op, a, b)
    if op in ("==", "!=") and (symbolic(a) or symbolic(b)) and \
            isinstance(b if symbolic(a) else a, _NOT_NUMBERS):
        return op == "!="       # (n == None, n in (None, 3), X.shape == ("a",): Python's)
    if symbolic(a) or symbolic(b):
        return build.written_compare(_CMPS[op], a, b)
    return {"==": a == b, "!=": a != b}[op] if op in ("==", "!=") else \
        {"<": lambda: a < b, "<=": lambda: a <= b, ">": lambda: a > b,
         ">=": lambda: a >= b}[op]()


class Generator:
    """`expr for k in range(...) [if cond]` inside a reduction call; iterable as Python too."""

    def __init__(self, elt, names, ranges, cond):
        self.elt, self.names, self.ranges, self.cond = elt, names, ranges, cond

    def __iter__(self):  # plain Python semantics (trace-time loops over constants)
        def rec(vals):
            if len(vals) == len(self.names):
                if self.cond is None or self.cond(*vals):
                    yield self.elt(*vals)
                return
            for v in range(*self.ranges[len(vals)](*vals)):
                yield from rec(vals + [v])
        return rec([])

    def is_symbolic(self):
        try:
            args = [r for r in self.ranges[0]()]
        except Exception:
            return True
        if any(symbolic(a) for a in args):
            return True
        # concrete ranges: a reduction when the element is symbolic, or the filter reads
        # what Python cannot test while it iterates (an element, a scalar argument, an
        # outer index): `sum(1 for k in range(m) if X[i, k] > t)` counts
        own = [Var(n) for n in self.names]
        try:
            # (a reduction inside the probe registers its index-dependent range for the
            # probe's variables, which no stage has: kept apart, dropped)
            with pending_scope():
                probe = self.elt(*own)
                if symbolic(probe) or self.cond is None:
                    return symbolic(probe)
                test = self.cond(*own)
        except build.SymbolicValueError:
            return False
        mine = {id(v) for v in own}
        return symbolic(test) and any(isinstance(n, Access) or isinstance(n, Var) and
                                      id(n) not in mine for n in walk_unique(test))

    def reduce(self, op: ReduceOp, user=True):
        axes, values, conds = [], [], []
        for n, name in enumerate(self.names):
            args = self.ranges[n](*values)
            if len(args) == 1:
                lo, hi, step = 0, args[0], 1
            elif len(args) == 2:
                (lo, hi), step = args, 1
            else:
                lo, hi, step = args
            if symbolic(step) or step == 0:
                raise DefinitionError(f"range step of `{name}` must be a non-zero constant",
                                      user_loc())
            if not symbolic(lo) and step == 1 and _size_expr(hi):
                ext = build.cast(hi - int(lo) if int(lo) else hi, "int64")
                ax = IterVar(Var(name), int(lo), ext, reduce=True)   # a symbolic extent
                axes.append(ax)
                values.append(ax.var)
                continue
            if symbolic(lo) or symbolic(hi):
                if step != 1:
                    raise DefinitionError(
                        f"range of `{name}` with symbolic bounds must have step 1", user_loc())
                ax = IterVar(Var(name), 0, -1, reduce=True)   # rectangle found by infer
                register_pending(ax, lo, hi)
                axes.append(ax)
                values.append(ax.var)
                conds += [build.compare(CmpOp.GE, ax.var, lo), build.compare(CmpOp.LT, ax.var, hi)]
                continue
            r = range(int(lo), int(hi), int(step))
            if step == 1:
                ax = IterVar(Var(name), r.start, len(r), reduce=True)
                values.append(ax.var)
            else:
                ax = IterVar(Var(name), 0, len(r), reduce=True)
                values.append(ax.var * step + r.start)
            axes.append(ax)
        body = self.elt(*values)
        if self.cond is not None:
            conds.append(self.cond(*values))
        where = None
        for c in conds:
            where = c if where is None else build.logical(BinOp.AND, where, c)
        return ops.reduce(op, body, axes, where, user=user)


def _size_expr(e):
    """An int64 expression over the sizes of dynamic arguments only."""
    return isinstance(e, Expr) and dtypes.is_int(e.dtype) and all(
        isinstance(n, SizeVar) or not isinstance(n, (Var, Access)) for n in walk_unique(e))


def gen(elt, names, ranges, cond):
    return Generator(elt, names, ranges, cond)


def register_pending(ax, lo, hi):
    pending = pending_reduce_axes()
    if pending is None:
        raise DefinitionError("a range() with symbolic bounds is only supported in index "
                              "notation definitions", user_loc())
    pending.append((ax, build.as_expr(lo), build.as_expr(hi)))


_BUILTIN_REDUCERS = {"sum": ReduceOp.SUM, "max": ReduceOp.MAX, "min": ReduceOp.MIN,
                     "any": ReduceOp.ANY, "all": ReduceOp.ALL, "prod": ReduceOp.PROD,
                     "argmax": ReduceOp.ARGMAX, "argmin": ReduceOp.ARGMIN}


def _foreign_functions():
    out = {}
    for name in set(ops.INTRINSICS) | {"prod"}:
        for mod in (builtins, math, np):
            f = getattr(mod, name, None)
            if f is not None:
                out[id(f)] = (name, f)
    return out


_FOREIGN = _foreign_functions()


def _float(x):
    """float(v) of a symbolic value: float64, which beside a float array is as weak as
    the Python float of a static trace where v is made of sizes (`1.0 / float(d)`). Of a
    weak scalar argument (a Python number) it is a weak float, as Python's: X * float(s)
    of a float32 X is float32, as X * s is (a cast would make it strong, float64)."""
    if x.weak and not isinstance(x, Const):
        return x if x.dtype == "float64" else build.binary(BinOp.MUL, x, 1.0)
    return build.cast(x, "float64")


def _int(x):
    """int(v) of a symbolic value: an integer stays itself (a size is the Python int of a
    static trace), others are cast to int64, truncated as Python's int() truncates."""
    return x if x.dtype == "int64" else build.cast(x, "int64")


def _len(x):
    """len(X) of a tensor: its first dimension, symbolic in a dynamic definition."""
    if not x.shape:
        raise TypeError("len() of unsized object")      # (NumPy's, of a 0-d array)
    return x.shape[0]


def _type(x):
    """type(v) of a symbolic value: of a dynamic size the Python number's type, as in a
    static trace (`type(n) is int`)."""
    return build.python_type(x) or type(x)


# Python's builtins a definition's own code may call on a symbolic size or a tensor, where
# they would need a concrete number (`float(X.shape[1])`, `len(X)` in a dynamic definition)
PYTHON_BUILTINS = {"float": (builtins.float, Expr, _float), "int": (builtins.int, Expr, _int),
                   "len": (builtins.len, Tensor, _len), "type": (builtins.type, Expr, _type)}


def _isinstance(obj, classes):
    """isinstance() in the definition's own code: a dynamic size is an instance of what
    the Python number of a static trace is (`isinstance(X.shape[0], int)`), as well as
    of its own type."""
    py = build.python_type(obj)
    return (py is not None and issubclass(py, classes)) or isinstance(obj, classes)


def is_(a, b):
    """`a is b` in the definition's own code: Python's, except of a dynamic size and a
    number, whose identity a static trace's int has (`n is 3` of CPython's small ints)
    and an expression has not: an error that says to compare with ==."""
    for x, y in ((a, b), (b, a)):
        if build.python_type(x) is not None and \
                isinstance(y, (bool, int, float, np.generic)):
            what = "condition of dynamic sizes" if _size_condition(x) else "dynamic size"
            raise DefinitionError(
                f"`{a!r} is {b!r}`: `is` compares objects, and the {what} `{x}` is a "
                "number only where the kernel runs; compare values with `==`", user_loc())
    return a is b


def _size_condition(x):
    """x is a condition made of sizes (`X.shape[0] > 3`): a Python bool in a static trace,
    True or False by identity there (`big is True`)."""
    return isinstance(x, Expr) and x.dtype == "bool" and build.a_size(x)


def intrinsic(name, resolve):
    try:
        f = resolve()
    except NameError:
        f = None
    if name == "isinstance":
        return _isinstance if f is builtins.isinstance else (f or resolve())
    if name in PYTHON_BUILTINS:
        own, kind, traced = PYTHON_BUILTINS[name]
        if f is not own:
            return resolve() if f is None else f    # (the user's own function of that name)
        return lambda *a, **k: traced(a[0]) \
            if len(a) == 1 and not k and isinstance(a[0], kind) else f(*a, **k)
    if name in ops.CASTS:
        if f is None:
            return resolve()    # (the name's NameError, as Python raises it)
        if f is not getattr(np, name):
            return f            # (jd.float32, or a function of the user's of that name)
        # NumPy's scalar type: of a number a NumPy scalar, of a symbolic value jitdl's cast
        # (NumPy's own would say 'setting an array element with a sequence')
        return lambda *a, **k: ops.CASTS[name](*a, **k) \
            if len(a) == 1 and not k and symbolic(a[0]) else f(*a, **k)
    if f is not None:
        if getattr(f, "__module__", "") and str(getattr(f, "__module__", "")).startswith("jitdl"):
            return _jitdl_call(name, f)
        if id(f) not in _FOREIGN:
            return f
    return lambda *a, **k: _dispatch(name, f, a, k)


def _jitdl_call(name, f):
    def call(*args, **kwargs):
        if len(args) == 1 and isinstance(args[0], Generator) and name in _BUILTIN_REDUCERS:
            return args[0].reduce(_BUILTIN_REDUCERS[name])
        if id(f) in _OPS and any(isinstance(a, Tensor) for a in args):
            return _on_whole_tensors(name, f, args, kwargs)      # jd.exp(X)
        return f(*args, **kwargs)
    return call


_OPS = {id(f) for f in ops.INTRINSICS.values()}


# jd.*, math.* and np.* functions by the jd.numpy function they mean on a whole tensor
_NUMPY_NAME = {"atan": "arctan", "atan2": "arctan2", "pow": "power", "select": "where",
               "fabs": "absolute", "abs": "absolute", "round": "round", "rint": "rint"}
_BUILTIN = {id(f) for f in (builtins.sum, builtins.max, builtins.min, builtins.any,
                            builtins.all, builtins.round)}


def _on_whole_tensors(name, original, args, kwargs):
    """exp(X), np.maximum(X, 0), jd.select(X > 0, X, 0), np.sum(X, axis=1) on whole
    tensors: jd.numpy's function of that name. Python's builtins (sum(X), max(X)) stay an
    error: over a whole tensor they do not mean what NumPy's functions do."""
    if original in (ops.max, ops.min) and len(args) > 1:       # jd.max(X, Y): elementwise
        name = "maximum" if original is ops.max else "minimum"
    fn = None if id(original) in _BUILTIN else whole_function(_NUMPY_NAME.get(name, name))
    if fn is None:
        raise whole_tensor_error(name, args)
    return fn(*args, **kwargs)


def tensor_compare(op, a, b):
    """`X == Y`, `X < 0` on whole tensors (the capture rewrites comparisons to this)."""
    name = {"==": "equal", "!=": "not_equal", "<": "less", "<=": "less_equal",
            ">": "greater", ">=": "greater_equal"}[op]
    fn = whole_function(name)
    if fn is None:
        raise whole_tensor_error(op, (a, b), infix=True)
    return fn(a, b)


def _of_numpy(fn) -> bool:
    """fn is NumPy's (a ufunc, or a function such as np.round or np.sum), whose result
    of Python numbers is a NumPy scalar."""
    return isinstance(fn, np.ufunc) or \
        (getattr(fn, "__module__", None) or "").partition(".")[0] == "numpy"


def _reduction_with_start(name, args, kwargs):
    """Python's second argument of a reduction over a generator that is a reduction:
    sum(g, start) / sum(g, start=s) and math.prod(g, start=s) are start + sum and
    start * prod, max/min(g, default=d) is d where g selects nothing (an empty range, a
    filter no element passes). (Python's own would iterate the generator, unrolling it
    into one deep expression, or fail on its filter.) None: not one of these."""
    g, rest = args[0], args[1:]
    if name in ("sum", "prod") and len(rest) + len(kwargs) == 1 and \
            (rest or "start" in kwargs):
        start = rest[0] if rest else kwargs["start"]
        op = BinOp.ADD if name == "sum" else BinOp.MUL
        return build.binary(op, start, g.reduce(_BUILTIN_REDUCERS[name]))
    if name in ("max", "min") and not rest and set(kwargs) == {"default"}:
        some = Generator(lambda *v: True, g.names, g.ranges, g.cond).reduce(ReduceOp.ANY)
        if any(isinstance(a.extent, int) and a.extent == 0 for a in some.axes):
            best = _never_taken(g, name)        # (empty at these sizes)
        else:
            # (an empty selection is no error here: its identity is never taken)
            best = g.reduce(_BUILTIN_REDUCERS[name], user=False)
        return build.select(some, best, kwargs["default"])
    return None


def _never_taken(g, name):
    """For max/min(g, default=) over a range empty at these sizes, where the max has no
    identity: a reduction that has one (a sum; of bools any / all, as max / min of bools
    are), of the max's dtype and reads, so that the result's dtype and the ranges its
    reads bound are those at other sizes. Its value is never taken."""
    stand_in = g.reduce(ReduceOp.SUM, user=False)
    if isinstance(stand_in.body, Cast) and stand_in.body.value.dtype == "bool":
        return g.reduce(ReduceOp.ANY if name == "max" else ReduceOp.ALL, user=False)
    return stand_in


def _dispatch(name, original, args, kwargs):
    if any(isinstance(a, Tensor) for a in args):
        return _on_whole_tensors(name, original, args, kwargs)
    if len(args) == 1 and isinstance(args[0], Generator) and name in _BUILTIN_REDUCERS \
            and not kwargs:
        g = args[0]
        if g.is_symbolic():
            return g.reduce(_BUILTIN_REDUCERS[name])
        args = (list(g),) if original is not None else args
    if args and isinstance(args[0], Generator) and args[0].is_symbolic():
        out = _reduction_with_start(name, args, kwargs)
        if out is not None:
            return out
    if len(args) == 1 and isinstance(args[0], (list, tuple)) and name in ("max", "min") \
            and any(symbolic(a) for a in args[0]):
        args = tuple(args[0])
        if len(args) == 1:      # (max(X.shape) of a 1-d X: its one size, as Python's)
            return args[0]
    if name == "pow" and original is builtins.pow and len(args) + len(kwargs) == 3 and \
            any(symbolic(a) for a in (*args, *kwargs.values())):
        return build.modular_pow(*args, **kwargs)
    if any(symbolic(a) for a in args) or any(symbolic(v) for v in kwargs.values()):
        out = ops.INTRINSICS[name](*args, **kwargs)
        # (NumPy's ufunc or function of sizes and Python numbers is a NumPy scalar,
        # strong, in a static trace: np.exp(n - 3), np.round(n / 2) times a float32 X is
        # float64)
        return build.strong(out) if _of_numpy(original) else out
    if original is None:
        fn = ops.INTRINSICS[name]
        out = fn(*args, **kwargs)
        return out.value if hasattr(out, "value") else out
    out = original(*args, **kwargs)
    # (NumPy's function of a list holding sizes, np.sum([n, 1]), is a NumPy scalar in a
    # static trace too, as the symbolic arguments' above)
    return build.strong(out) if _of_numpy(original) and isinstance(out, Expr) and \
        build.python_type(out) is not None else out
