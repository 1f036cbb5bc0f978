"""jitdl's exceptions, and how they point at the user's source line."""
from __future__ import annotations

import functools
import linecache
import os
import sys
import warnings
from dataclasses import dataclass

import numpy as np

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
# the standard library's files (threading's, concurrent.futures'), which hold no user's
# line: a definition called by a thread's target; (not the packages installed under it)
_STDLIB_DIR = os.path.dirname(os.path.abspath(os.__file__)) + os.sep
_INSTALLED = tuple(_STDLIB_DIR + d + os.sep for d in ("site-packages", "dist-packages"))

# run-time checks whose failure is NumPy's ValueError, not an IndexError: the "tensor"
# each names is one of these, then NumPy's message in parentheses (a reduction with no
# identity over an empty symbolic axis; an integer power's exponent below 0; a symbolic
# size broadcast to a number, or a number to a symbolic size, that differ)
VALUE_CHECKS = ("the reduced axes (", "a negative exponent (", "a broadcast (")
NEGATIVE_POWER = VALUE_CHECKS[1] + "Integers to negative integer powers are not allowed.)"


def value_check_message(tensor):
    """NumPy's message where a failed run-time check naming `tensor` is a ValueError,
    else None."""
    for prefix in VALUE_CHECKS:
        if tensor.startswith(prefix) and tensor.endswith(")"):
            return tensor[len(prefix):-1]
    return None


@dataclass(frozen=True)
class SourceLoc:
    filename: str
    lineno: int
    col: int = -1

    def line(self) -> str:
        return linecache.getline(self.filename, self.lineno).rstrip("\n")

    def __str__(self):
        text = self.line()
        where = f'File "{self.filename}", line {self.lineno}'
        if not text.strip():
            return where
        stripped = text.lstrip()
        out = f"{where}\n    {stripped}"
        if self.col >= 0:
            caret = max(self.col - (len(text) - len(stripped)), 0)
            out += "\n    " + " " * caret + "^"
        return out


class JitdlError(Exception):
    """Base class of every error jitdl raises on purpose."""

    def __init__(self, message: str, loc: SourceLoc | None = None):
        self.message = message
        self.loc = loc
        super().__init__(_text(message, loc))


def _text(message, loc):
    return message + (f"\n  {loc}".replace("\n", "\n  ") if loc else "")


class DefinitionError(JitdlError):
    """A compute definition that cannot be compiled (bad index, unbounded axis, ...)."""


class DefinitionTypeError(DefinitionError, TypeError):
    """A TypeError raised while a definition is traced (a jd.numpy call with a bad
    dtype=, say): still the TypeError it was, as the same call on arrays raises."""


class DefinitionValueError(DefinitionError, ValueError):
    """A ValueError raised while a definition is traced (see DefinitionTypeError)."""


class DefinitionIndexError(DefinitionError, IndexError):
    """An IndexError raised while a definition is traced (see DefinitionTypeError)."""


class DefinitionAxisError(DefinitionError, np.exceptions.AxisError):
    """NumPy's AxisError raised while a definition is traced (see DefinitionTypeError)."""


def definition_error(e, message, loc=None):
    """The DefinitionError for exception e raised while a definition was traced, of the
    same class as e where it is NumPy's AxisError, a TypeError, ValueError or IndexError
    (and an instance of NumPy's subclass of it, such as a UFuncTypeError)."""
    for base, cls in ((np.exceptions.AxisError, DefinitionAxisError),
                      (TypeError, DefinitionTypeError), (ValueError, DefinitionValueError),
                      (IndexError, DefinitionIndexError)):
        if isinstance(e, base):
            return numpy_kind(cls, numpy_base(e, base))(message, loc)
    return DefinitionError(message, loc)


class ArgumentError(JitdlError, TypeError):
    """A call with arguments that do not fit the definition (dtype, rank, shape, count)."""


def _numpy_init(self, message, loc=None):
    self.message = message
    self.loc = loc
    Exception.__init__(self, _text(message, loc))


@functools.lru_cache(maxsize=None)
def numpy_kind(cls, numpy_cls):
    """jitdl's error class cls, made an instance of NumPy's exception class numpy_cls too
    (a UFuncTypeError, whose own constructor takes the ufunc and dtypes), for an error
    raised where NumPy raises numpy_cls: `except` clauses written for NumPy catch it."""
    if issubclass(cls, numpy_cls):
        return cls
    return type(cls.__name__, (cls, numpy_cls), {
        "__init__": _numpy_init, "__str__": Exception.__str__,
        "__reduce__": _numpy_kind_reduce, "__module__": cls.__module__})


def _numpy_kind_reduce(self):
    """Pickles an instance of a class numpy_kind made (no module attribute names it) as
    its two bases, rebuilt through numpy_kind's cache: the same class again."""
    cls, numpy_cls = type(self).__bases__[:2]
    return _numpy_kind_error, (cls, numpy_cls, self.args, dict(self.__dict__))


def _numpy_kind_error(cls, numpy_cls, args, state):
    kind = numpy_kind(cls, numpy_cls)
    e = BaseException.__new__(kind, *args)
    e.args = args
    e.__dict__.update(state)
    return e


def numpy_base(e, default):
    """NumPy's own exception class among e's classes (a UFuncTypeError, AxisError), else
    `default`."""
    return next((c for c in type(e).__mro__ if c.__module__.startswith("numpy")), default)


def _raised(f):
    try:
        f()
    except TypeError as e:
        return type(e)
    return TypeError


# NumPy's UFuncTypeError for a result that out= cannot take under casting=
OUTPUT_CASTING = _raised(lambda: np.add(1.5, 1.5, out=np.empty((), np.int8)))


class UnsupportedDtypeError(ArgumentError):
    """An array operand of a dtype jitdl does not compile (float16, complex, uint16/32/64,
    object, ...). jd.numpy's functions answer it with NumPy's own function."""


class ExpandedViewError(UnsupportedDtypeError):
    """An array operand that is a view far larger than its memory (np.broadcast_to,
    stride tricks), which a kernel would copy whole (jitdl's kernels read contiguous
    arrays): jd.numpy's functions answer it with NumPy's own function, which reads the
    view in place."""


class OutArgumentError(ArgumentError, ValueError):
    """An out= array of the wrong shape or read-only: an ArgumentError, and the ValueError
    NumPy raises there."""


class ArgumentShapeError(ArgumentError, ValueError):
    """Arguments whose sizes disagree (a dynamic kernel's sizes checked equal at the call,
    an output dimension that comes out negative): an ArgumentError, and the ValueError
    NumPy raises for shapes that do not fit."""


class ArgumentIndexError(ArgumentError, IndexError):
    """Arguments too small for a position the definition reads (a dynamic kernel's size
    checked at the call against a constant index): an ArgumentError, and the IndexError
    NumPy raises there."""


class ArgumentValueError(ArgumentError, ValueError):
    """An argument of the right type whose value is out of range (set_num_threads(0)):
    an ArgumentError, and the ValueError Python raises for such a value."""


class ScheduleError(JitdlError):
    """An illegal schedule primitive."""


class ScalarOverflowError(JitdlError, OverflowError):
    """A Python integer out of bounds for the integer dtype it meets (NumPy 2 raises
    OverflowError too): a literal in a definition, or a scalar argument at the call."""


class KernelIndexError(JitdlError, IndexError):
    """An index a kernel checks at run time (one read from data, `X[idx[i]]`) outside
    its dimension: NumPy's IndexError, at the caller's line."""


class KernelValueError(JitdlError, ValueError):
    """A run-time check whose failure is NumPy's ValueError (VALUE_CHECKS), at the
    caller's line."""


class AllocationError(JitdlError, MemoryError):
    """A kernel could not allocate an intermediate buffer (it names the buffer and size)."""


class CompileError(JitdlError):
    """Internal failure in lowering or code generation (a jitdl bug: please report)."""


class GPUScheduleError(ScheduleError, CompileError):
    """A GPU schedule that cannot become a kernel, found when its CUDA C is generated: a
    block over the device's threads, a grid over its blocks, shared memory over its
    limit, a thread extent that is not a constant, a barrier or a reduction across
    threads that not every thread reaches. A ScheduleError pointing at the user's
    schedule line that chose it (and, as it was first, a CompileError). `loops` and
    `buffers` name what it is about, for that line."""

    def __init__(self, message, loc=None, loops=(), buffers=()):
        super().__init__(message, loc)
        self.loops, self.buffers = tuple(loops), tuple(buffers)


class PerformanceWarning(UserWarning):
    """A kernel that runs correctly but far below what the hardware offers (a stage of a
    GPU schedule left on one thread)."""


def user_loc(skip_jitdl=True) -> SourceLoc | None:
    """The innermost stack frame outside the jitdl package: the user's line."""
    f, _ = user_frame(sys._getframe(1), skip_jitdl)
    return None if f is None else SourceLoc(f.f_code.co_filename, f.f_lineno)


def user_frame(f, skip_jitdl=True):
    """The first frame from f outward that is the user's (not jitdl's, nor one that hides
    itself from tracebacks, pytest's `__tracebackhide__ = True`: a wrapper, as the test
    harness that runs calls on the GPU), and how many frames out it is (a warning's
    stacklevel); (None, frames walked) if there is none. The standard library's frames are
    no user's either (threading's, where a thread's target is a definition)."""
    n = 0
    while f is not None:
        code = f.f_code
        fn = code.co_filename
        path = os.path.abspath(fn)
        if not (skip_jitdl and path.startswith(_PKG_DIR + os.sep)) \
                and not (path.startswith(_STDLIB_DIR) and not path.startswith(_INSTALLED)) \
                and not fn.startswith("<frozen") \
                and not ("__tracebackhide__" in code.co_varnames
                         and f.f_locals.get("__tracebackhide__")):
            return f, n
        f, n = f.f_back, n + 1
    return None, n


def warn(message, category):
    """warnings.warn shown at the user's line (the first frame outside jitdl)."""
    f, n = user_frame(sys._getframe(1))
    if f is not None:
        # warnings' stacklevel does not count the import system's frames (a warning at
        # `import jitdl`, of a setting): count the user's frame the way it does
        n -= _import_frames(sys._getframe(1), f)
    warnings.warn(message, category, stacklevel=2 + (n if f is not None else n - 1))


_FLOAT_ERRORS = {"divide": ("divide by zero", 1), "over": ("overflow", 2),
                 "under": ("underflow", 4), "invalid": ("invalid value", 8)}


def float_error(kind, where):
    """NumPy's report of a floating-point error of `kind` ('divide', 'over', 'under',
    'invalid') in its operation `where` ('divide', 'scalar divide'), as np.seterr says
    for it: a RuntimeWarning at the user's line, a FloatingPointError, a printed line,
    nothing, or a call to (or a line written by) np.seterrcall's object."""
    what, flag = _FLOAT_ERRORS[kind]
    message = f"{what} encountered in {where}"
    how = np.geterr()[kind]
    if how == "warn":
        warn(message, RuntimeWarning)
    elif how == "raise":
        raise FloatingPointError(message)
    elif how == "print":
        print(f"Warning: {message}", file=sys.stderr)
    elif how == "call":
        np.geterrcall()(what, flag)
    elif how == "log":
        np.geterrcall().write(f"Warning: {message}\n")


def _import_frames(f, stop):
    """How many of the frames from f out to stop are the import system's, which
    warnings.warn skips when it counts a stacklevel."""
    n = 0
    while f is not None and f is not stop:
        fn = f.f_code.co_filename
        n += "importlib" in fn and "_bootstrap" in fn
        f = f.f_back
    return n


class ShapeError(JitdlError, ValueError):
    """Shapes that do not fit an operation (broadcasting, reshape, concatenation): a
    ValueError, as NumPy raises."""


class AxisError(JitdlError, np.exceptions.AxisError):
    """An axis out of range or repeated: NumPy's AxisError (a ValueError and IndexError)."""
