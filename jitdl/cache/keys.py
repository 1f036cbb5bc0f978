"""Cache keys: digests of everything that can change a compiled kernel.

Two levels. The *fast key* is computed before any tracing, from the source text of the
definition and of everything it reads (helper functions, in this module or another, and
the values of globals and closure variables), the schedule function likewise, the knob
values, the argument signature, the target and the versions: a warm process that finds
it skips capture, lowering and LLVM. The *full key* digests the loop IR itself with the
codegen settings, target and versions: two sources that lower to the same loop IR share
one binary. No key ever contains an address or an id().
"""
from __future__ import annotations

import collections.abc
import dataclasses
import dis
import functools
import hashlib
import importlib.util
import inspect
import json
import logging
import mmap
import os
import sys
import sysconfig
import types
import warnings

import numpy as np

from jitdl._version import __version__

_JITDL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))



def digest(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else str(p).encode())
        h.update(b"\0")
    return h.hexdigest()


_ENV = {}


def environment(target) -> dict:
    """Versions, the target's own environment and the settings that change code
    generation (computed once per target; targets are frozen values)."""
    env = _ENV.get(target)
    if env is None:
        env = _ENV[target] = _environment(target)
    return env


def _environment(target) -> dict:
    import llvmlite
    import llvmlite.binding as llvm
    from jitdl.config import settings
    from jitdl.runtime import engine
    return {
        "jitdl": __version__,
        "llvmlite": llvmlite.__version__,
        "llvm": ".".join(map(str, llvm.llvm_version_info)),
        # (tracing asks NumPy for result types and casting rules: NumPy 2 promotes
        # Python and NumPy scalars otherwise than 1.x)
        "numpy": np.__version__,
        **target.environment(),
        "opt_level": settings.opt_level,
        "parallel": engine.parallel_available(),
        "python": sys.version.split()[0],
        "jitdl_files": _jitdl_stamp(),
    }


def _jitdl_stamp() -> str:
    """Size and modification time of every jitdl source file: a development checkout
    whose lowering or codegen changed does not reuse kernels built by the old code."""
    out = []
    for root, _, files in os.walk(_JITDL_DIR):
        for f in files:
            if f.endswith(".py"):
                st = os.stat(os.path.join(root, f))
                out.append(f"{root[len(_JITDL_DIR):]}/{f}:{st.st_size}:{st.st_mtime_ns}")
    return digest(*sorted(out))[:16]


_ABSENT = object()

_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])


def _is_library(obj) -> bool:
    """Code from the standard library, installed packages or jitdl itself: identified by
    name and version, not by its source."""
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        return True                 # builtins
    except OSError:
        return False                # a class of a `__main__` without a file (the REPL's)
    if not path:
        # a Python function with no file to read (the REPL's, `python -c`, exec): the
        # user's code, read by its code; anything else, by its name
        return not isinstance(obj, types.FunctionType)
    if path.startswith("<frozen "):
        return True                 # the standard library's frozen modules (os, codecs)
    return _library_file(path)


def _library_file(path) -> bool:
    """A file of jitdl, the standard library or an installed package."""
    path = os.path.realpath(path)
    return (path.startswith(_JITDL_DIR + os.sep) or path.startswith(_STDLIB + os.sep)
            or "site-packages" in path or "dist-packages" in path)


def code_text(code, first=None) -> str:
    """A stable digest of a code object and the code objects nested in it, with the lines
    of its instructions counted from the first line of the outermost (`first`): a function
    moved in its file, or to another file, keeps its digest, and the lines a kernel stores
    are placed where it is now (relative_locations, placed); one with lines inserted or
    removed inside it does not."""
    first = code.co_firstlineno if first is None else first
    consts = [code_text(c, first) if isinstance(c, types.CodeType) else _const_text(c)
              for c in code.co_consts]
    lines = [(start, end, None if ln is None else ln - first)
             for start, end, ln in code.co_lines()]
    return digest(code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars,
                  code.co_cellvars, code.co_argcount, code.co_kwonlyargcount, code.co_flags,
                  code.co_firstlineno - first, lines)


def _const_text(c) -> str:
    """A code constant (or a default value) as text: a set (`x in {"a", "b"}`) in an
    order of its members' texts, not its own, which follows the strings' hashes and so
    differs in each process (another key each time)."""
    if isinstance(c, (set, frozenset)):
        return f"{type(c).__name__}({sorted(_const_text(x) for x in c)})"
    if isinstance(c, tuple):        # (a list's repr: it may hold itself)
        return f"tuple({', '.join(_const_text(x) for x in c)})"
    return _stable_repr(c)


def _last_line(code):
    """The last source line of a code object and the code objects nested in it."""
    last = max((ln for _, _, ln in code.co_lines() if ln is not None), default=0)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            last = max(last, _last_line(c))
    return max(last, code.co_firstlineno)


def _names(code, top=True) -> set:
    """The names a function's code may read as globals, attributes or (its own free
    variables, `top`) closure cells; those free in nested code are the function's locals."""
    out = set(code.co_names) | (set(code.co_freevars) if top else set())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c, False)
    return out


def _strings(code) -> set:
    """The string constants of a code object and those nested in it that could name an
    attribute (`getattr(cfg, "SCALE")`), a global (`globals()["SCALE"]`), an environment
    variable or a module (`importlib.import_module("pkg.cfg")`)."""
    out = set()
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _strings(c)
        elif isinstance(c, str):    # (names or not: an environment variable's may be
            out.add(c)              # any, `os.environ["MY-SCALE"]`)
        elif isinstance(c, (tuple, frozenset)):     # (`for n in ("SCALE", "OFFSET")`,
            out |= _const_strings(c)               # `for n, w in (("SCALE", 2.0),)`)
    return out


def _const_strings(c) -> set:
    """The strings of a tuple or frozenset constant, nested ones' too."""
    out = set()
    for x in c:
        if isinstance(x, str):
            out.add(x)
        elif isinstance(x, (tuple, frozenset)):
            out |= _const_strings(x)
    return out


def _is_name(s) -> bool:
    return s.isidentifier() or all(p.isidentifier() for p in s.split("."))


_IMPORT_NAME = dis.opmap["IMPORT_NAME"]


def _imports(code, package=None) -> set:
    """The modules a code object and those nested in it import (`import kcfg` inside a
    helper), by absolute name: a relative import resolved in `package` (the function's
    module's: `from .kcfg import SCALE`, `from . import kcfg`), and the names it imports
    from a package as its submodules (`from pkg import kcfg`: pkg.kcfg, where it is one)."""
    out = set()
    if bytes([_IMPORT_NAME]) in code.co_code:       # (a cheap test before dis)
        ins = list(dis.get_instructions(code))
        for k, i in enumerate(ins):
            if i.opcode != _IMPORT_NAME or not isinstance(i.argval, str):
                continue
            # (IMPORT_NAME takes the level and the fromlist from the two constants
            # loaded before it)
            level, fromlist = [x.argval if x.opname.startswith("LOAD_") else None
                               for x in ins[max(k - 2, 0):k]] if k >= 2 else (0, None)
            name = i.argval
            if isinstance(level, int) and level > 0:
                try:
                    name = importlib.util.resolve_name("." * level + name, package)
                except (ImportError, ValueError, TypeError, AttributeError):
                    continue
            if name:
                out.add(name)
                if isinstance(fromlist, tuple):
                    out.update(f"{name}.{f}" for f in fromlist
                               if isinstance(f, str) and f.isidentifier())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _imports(c, package)
    return out


_LAZY = getattr(importlib.util, "_LazyModule", ())    # (a module LazyLoader has not loaded)


def _environ_readers():
    """os.environ and the functions that read it (os.getenv): read by the names of the
    variables the user's code names, not the whole environment."""
    return [x for x in (os.environ, getattr(os, "environb", None), os.getenv,
                        getattr(os, "getenvb", None)) if x is not None]


class _Walker:
    """Collects the text of a function and of everything it reads, recursively."""

    def __init__(self):
        self.seen = set()
        self.parts = []
        self.spans = []         # [file, first line, last line] of each function read
        self.modules = set()    # (module id, names) of the modules read (value)
        self.libraries = {}     # id -> (class, _is_library(class)), for this walk
        self.cut = False        # a value nested past what _container_text reads: the
        #                         parts do not cover it (fast_key: no fast key)
        self.names = set()      # the names and attribute strings of the user's functions
        #                         read: what they may read of a module they are given
        self.user_modules = {}  # id -> [name, module, the attributes read] (the user's)
        self.looked_up = set()  # the names looked up in sys.modules (finish)
        self.environ = False    # os.environ or os.getenv read: the variables named enter

    def is_library(self, cls) -> bool:
        """_is_library of a class, once per walk (a list of 20000 objects of one class:
        each asked the file system where its class is)."""
        hit = self.libraries.get(id(cls))
        if hit is None:
            hit = self.libraries[id(cls)] = (cls, _is_library(cls))
        return hit[1]

    def function(self, fn, names=None):
        """Read fn: its code, and what it reads of `names` (default: its code's names)."""
        key = (getattr(fn, "__module__", ""), getattr(fn, "__qualname__", ""))
        if id(fn) in self.seen:          # (ids only de-duplicate; they never enter a key)
            return
        self.seen.add(id(fn))
        # the compiled code, not the source text: no file reads, comments do not count
        # (but for the lines they move inside it: code_text), and the Python version is
        # part of the environment
        kwdefaults = [(k, _const_text(d)) for k, d in (fn.__kwdefaults__ or {}).items()]
        self.parts.append(f"def {key}: {code_text(fn.__code__)} "
                          f"defaults={[_const_text(d) for d in fn.__defaults__ or ()]} "
                          f"kwdefaults={kwdefaults}")
        names = _names(fn.__code__) if names is None else names
        strings = _strings(fn.__code__)
        self.names |= names | strings
        imports = _imports(fn.__code__, fn.__globals__.get("__package__"))
        if "import_module" in names or "__import__" in names:
            imports |= {x for x in strings if _is_name(x)}
        for m in sorted(imports):
            # a module it imports by name (the user's: read in finish()); one not
            # imported yet is imported by the trace only, after the key: no fast key
            self.names.add(m)
            if m not in sys.modules and _users_module_file(m):
                self.cut = True
        if vars(fn):            # its attributes (`helper.scale = 2.0`, read as such)
            self.parts.append(f"{key}.__dict__ = {_container_text(vars(fn), self, names)}")
        code = fn.__code__
        self.spans.append([code.co_filename, code.co_firstlineno, _last_line(code)])
        # default values are read like globals: a function's repr (`g=lambda v: v * c`)
        # has no content, and keyword-only ones are not in __defaults__
        for i, v in enumerate(fn.__defaults__ or ()):
            if not isinstance(v, (bool, int, float, str, type(None))):
                self.value(f"{key}.__defaults__[{i}]", v, names)
        for n, v in sorted((fn.__kwdefaults__ or {}).items()):
            self.value(f"{key}.__kwdefaults__[{n!r}]", v, names)
        cells = {}
        if fn.__closure__:
            for n, c in zip(fn.__code__.co_freevars, fn.__closure__):
                try:
                    cells[n] = c.cell_contents
                except ValueError:
                    pass
        glb = fn.__globals__
        for name in sorted(names):
            if name in cells:
                self.value(name, cells[name], names)
            elif name in glb:
                self.value(name, glb[name], names)
        if "globals" in names and "globals" not in glb:
            # `globals()["SCALE"]`: its module's globals, for the names and strings of
            # the user's functions (as a user's module is read; finish())
            module = self.user_modules.setdefault(
                id(glb), [f"{key[0]}.globals()", glb, set(names) - set(cells)])
            self.module_attributes(module, self.names)

    def module_attributes(self, module, names):
        """Read the attributes `names` of a user's module ([name, module, read]) that are
        not read yet (each once per key: modules that import each other are paths
        without end)."""
        name, v, read = module
        todo = set(names) - read
        read |= todo
        if isinstance(v, dict) or type(v) is types.ModuleType and "__getattr__" not in vars(v):
            # (only the names it holds: the words of a list of 200000 read beside it
            # are as many names, each a lookup with its warnings silenced: 20 s)
            todo = todo.intersection(v if isinstance(v, dict) else vars(v))
        else:
            todo = {a for a in todo if a.isidentifier()}
        for attr in sorted(todo):
            if not attr.startswith("__"):
                found = _module_attr(v, attr)
                if found is not _ABSENT:
                    self.value(f"{name}.{attr}", found, names)

    def finish(self):
        """Read the attributes of the user's modules named by functions read after them,
        and the user's modules named by a string or an import (`import_module("kcfg")`),
        until none is left; then the environment variables named, where os.environ or
        os.getenv was read."""
        while True:
            new = self.names - self.looked_up
            self.looked_up |= new
            for n in sorted(new.intersection(sys.modules)):
                m = sys.modules.get(n)
                if isinstance(m, _LAZY):
                    # not loaded yet (importlib.util.LazyLoader): any attribute loads it,
                    # running its code (a name that only matches, or raising); loaded
                    # by the trace only where read (the user's: no fast key)
                    spec = object.__getattribute__(m, "__dict__").get("__spec__")
                    origin = getattr(spec, "origin", None)
                    if origin and os.path.isfile(origin) and not _library_file(origin):
                        self.cut = True
                    continue
                if isinstance(m, types.ModuleType) and id(m) not in self.user_modules \
                        and not self.is_library(m):
                    self.value(f"<module {n}>", m, set())
            todo = [(m, self.names - m[2]) for m in self.user_modules.values()]
            todo = [(m, n) for m, n in todo if n]
            if not todo and not self.names - self.looked_up:
                break
            for m, n in todo:
                self.module_attributes(m, n)
        if self.environ:
            named = sorted((n, os.environ[n]) for n in self.names.intersection(os.environ))
            self.parts.append(f"environment {named}")
        return self

    def value(self, name, v, names):
        if any(v is x for x in _environ_readers()):
            self.parts.append(f"{name} = the environment")
            self.environ = True
            return
        wrapped = _attr(v, "__wrapped__")
        reads = None
        if isinstance(wrapped, types.FunctionType) and not isinstance(v, types.FunctionType):
            text, notation = definition_source(v)   # (a definition inlined: traced
            if text:                                # from its text)
                self.parts.append(f"{name} read as {digest(text)}")
                reads = _names(wrapped.__code__) - notation
            v = wrapped              # a @jd.compute function (or another wrapper): its code
        if isinstance(v, types.FunctionType):
            if _is_library(v):
                # factories make several functions with one qualname (jd.max, jd.min):
                # the name and the closure's values tell them apart
                cells = [_const_text(c.cell_contents) for c in (v.__closure__ or ())
                         if _has_contents(c)]
                self.parts.append(f"{name} = lib {v.__module__}.{v.__qualname__}:"
                                  f"{v.__name__} {cells} {_library_stamp(v)}")
                # a library's wrapper of the user's functions (functools.singledispatch:
                # the function it wraps and those registered; a decorator that keeps the
                # function in its closure): those functions, read as the user's
                held = [c.cell_contents for c in (v.__closure__ or ()) if _has_contents(c)]
                held += [wrapped] + [x for _, x in sorted(vars(v).items())]
                for n, x in enumerate(held):
                    if _holds_users_function(x):
                        self.value(f"{name}.<holds {n}>", x, names)
            else:
                self.function(v, reads)
        elif isinstance(v, types.ModuleType):
            self.parts.append(f"{name} = module {v.__name__}")
            # a library's three deep; the user's package to any depth (`pkg.a.b.c.SCALE`),
            # each module once per key for the attributes read (the names of the code):
            # modules of a package that import each other are paths without end (once
            # along a path only: 7 such modules, 96000 paths and 4 s at each first call)
            read = (id(v), frozenset(names))
            if not _is_library(v):
                # (the attributes any of the user's functions may read: a helper given
                # the module, `h(cfg, x)` reading mod.SCALE; getattr(cfg, "SCALE"); the
                # names of functions read later, in finish())
                module = self.user_modules.setdefault(id(v), [name, v, set()])
                self.module_attributes(module, names | self.names)
            elif name.count(".") < 3 and read not in self.modules:
                self.modules.add(read)
                for attr in sorted(names):
                    if not attr.startswith("__"):
                        found = _module_attr(v, attr)
                        if found is not _ABSENT:
                            self.value(f"{name}.{attr}", found, names)
        elif isinstance(v, (bool, int, float, complex, str, bytes, type(None))):
            self.parts.append(f"{name} = {v!r}")
            if isinstance(v, str):    # (a name to getattr, a module's, a variable's)
                self.names.add(v)
        elif isinstance(v, (tuple, list, frozenset, set, dict)):
            self.parts.append(f"{name} = {type(v).__name__} {_container_text(v, self, names)}")
        elif isinstance(v, np.ndarray):
            self.parts.append(f"{name} = array {v.dtype} {v.shape} {_array_text(v, self)}")
        elif isinstance(v, np.generic):
            self.parts.append(f"{name} = {v.dtype} {v!r}")
        elif isinstance(v, types.MethodType):
            self.parts.append(f"{name} = method")
            self.value(f"{name}.__self__", v.__self__, names)
            self.value(f"{name}.__func__", v.__func__, names)
        elif isinstance(v, functools.partial):
            self.parts.append(f"{name} = partial")
            self.value(f"{name}.func", v.func, names)
            self.value(f"{name}.args", v.args, names)
            self.value(f"{name}.keywords", dict(v.keywords), names)
        elif isinstance(v, type) and self.is_library(v):
            self.parts.append(f"{name} = class {v.__module__}.{v.__qualname__}")
        elif isinstance(v, type) and id(v) in self.seen:   # (read above: a class
            self.parts.append(f"{name} = class {v.__module__}.{v.__qualname__} (above)")
        elif isinstance(v, type):                        # attribute holding an instance)
            # its attributes and those it inherits from the user's classes, as a lookup
            # finds them (Cfg.scale set in Cfg's base), its methods read as functions
            self.seen.add(id(v))
            own = {}
            for c in reversed(v.__mro__):
                if not self.is_library(c):
                    own.update((k, x) for k, x in vars(c).items()
                               if not k.startswith("__") or isinstance(x, types.FunctionType))
            bases = [_stable_repr(c) for c in v.__mro__[1:]]
            self.parts.append(f"{name} = class {v.__module__}.{v.__qualname__} {bases} "
                              f"{_container_text(own, self, names)}")
        elif isinstance(v, _LOGGERS):
            self.parts.append(f"{name} = {_logger_text(v)}")
        else:
            t = type(v)
            state = _object_state(v)
            # (without attributes: a library's collection by its items, see norm)
            text = _container_text(state if state is not None else v, self, names)
            self.parts.append(f"{name} = <{t.__module__}.{t.__qualname__}> {text}")
            if not self.is_library(t):   # its class: attributes (H.factor where H has no
                self.value(f"{name}.__class__", t, names)   # own), methods and what they read


def _users_function(x) -> bool:
    return isinstance(x, types.FunctionType) and not _is_library(x)


def _holds_users_function(x) -> bool:
    """x is a function of the user's, or a mapping (singledispatch's registry) or a
    tuple, list or set (a library's `compose(*fns)` keeps its functions in a tuple) that
    holds one directly."""
    if isinstance(x, collections.abc.Mapping):
        return any(_users_function(y) for y in x.values())
    if isinstance(x, (tuple, list, set, frozenset)):
        return any(_users_function(y) for y in x)
    return _users_function(x)


def _attr(v, name, default=None):
    """v.name, or default where v has none: also where v's __getattr__ raises another
    error than AttributeError (a config forwarding to its dict: KeyError '__wrapped__'),
    which would make the key raise it at the user's first call."""
    try:
        return getattr(v, name, default)
    except Exception:
        return default


def _stable_repr(v) -> str:
    """A repr without memory addresses (a default repr names the type only)."""
    if isinstance(v, (types.FunctionType, types.BuiltinFunctionType, type)):
        return f"{getattr(v, '__module__', '')}.{getattr(v, '__qualname__', '')}"
    r = repr(v)
    return f"<{type(v).__module__}.{type(v).__qualname__}>" if " at 0x" in r else r


def _object_state(v):
    """An object's attributes: its __dict__ and the values of its __slots__ (None when it
    has neither)."""
    state = _attr(v, "__dict__")
    slots = {}
    for cls in type(v).__mro__:
        names = getattr(cls, "__slots__", ())
        for n in (names,) if isinstance(names, str) else names:
            if n not in ("__dict__", "__weakref__"):
                x = _attr(v, n, _ABSENT)
                if x is not _ABSENT:
                    slots[n] = x
    if not slots:
        return state
    return {**(state if isinstance(state, dict) else {}), **slots}


_PLAIN = (bool, int, float, str, type(None))
_BUILTIN_BASE = {dict: dict, list: list, tuple: tuple, set: set, frozenset: frozenset}


def _container_text(v, walker=None, names=frozenset()) -> str:
    """Contents of a container or an object's attributes, recursively and stably (arrays
    by digest, functions by their code, the attributes of objects of the user's classes:
    `cfg.tile.factor`); enough to notice any edit of a value. With a walker, a function in
    it (a partial, a bound method, a @jd.compute function) is read as a global is: what
    it reads, its closure's values (`{"act": lambda x: x * SCALE}`, `[make(2.0)]`), and
    a class or a module in it as a global one (`{"c": Cfg}`, `[cfg_module]`: Cfg.scale,
    cfg_module.SCALE; `names`, the attributes the function reads)."""
    path = {}           # id -> depth of the containers and objects being read (cycles)
    strings = []        # the strings read: names for the walker (once, at the end)
    done = {}           # (id, depth) -> [container, its text, its digest]: shared ones
    cycles = [0]        # cycles met so far
    library = _is_library if walker is None else walker.is_library

    def norm(x, depth=0):
        if type(x) in _PLAIN:   # (first: a table of a million numbers, 4 s of lookups)
            if type(x) is str:
                strings.append(x)     # (a name to getattr: `getattr(cfg, NAMES[k])`)
            return x
        if depth > 20:          # (not read: the key cannot see an edit there)
            if walker is not None:
                walker.cut = True
            return "..."
        if isinstance(x, _LOGGERS):
            return _logger_text(x)
        if walker is not None and (
                isinstance(x, (types.FunctionType, types.MethodType, functools.partial))
                or isinstance(_attr(x, "__wrapped__"), types.FunctionType)):
            walker.value("<in a value>", x, set())
            if not isinstance(x, types.FunctionType):
                return _stable_repr(type(x))
        if isinstance(x, (property, functools.cached_property)):   # (its functions)
            fns = [x.fget, x.fset, x.fdel] if isinstance(x, property) else [x.func]
            return {"<descriptor>": _stable_repr(type(x)),
                    "functions": [norm(f, depth + 1) for f in fns]}
        if walker is not None and isinstance(x, (type, types.ModuleType)):
            walker.value("<in a value>", x, names)
            return _stable_repr(x) if isinstance(x, type) else f"module {x.__name__}"
        if not isinstance(x, (dict, list, tuple, set, frozenset, np.ndarray, type,
                              types.FunctionType, bool, int, float, str, type(None))) \
                and id(x) not in path and not library(type(x)):
            state = _object_state(x)
            if state is not None:
                # (its class's attributes, as of a global object; once)
                if walker is not None and id(type(x)) not in walker.seen:
                    walker.value("<class of a value>", type(x), set())
                path[id(x)] = depth      # (a cycle back to x is not followed again)
                try:
                    # (its state at its own depth: a tree of objects is as deep as
                    # its objects, not twice as deep)
                    return {"<object>": _stable_repr(type(x)), "state": norm(state, depth)}
                finally:
                    del path[id(x)]
        base = _BUILTIN_BASE.get(type(x)) or next(
            (b for b in _BUILTIN_BASE if isinstance(x, b)), None)
        if base is not None and base is not type(x) and id(x) not in path:
            # a subclass of a builtin container (`class Cfg(dict)` given attributes,
            # a defaultdict): its items, and what its items do not show: its attributes,
            # a defaultdict's factory, its class (the user's: `__missing__`, properties)
            state = _object_state(x) or {}
            factory = x.default_factory if isinstance(x, collections.defaultdict) else None
            if walker is not None and not library(type(x)) and id(type(x)) not in walker.seen:
                walker.value("<class of a value>", type(x), set())
            path[id(x)] = depth
            try:
                return {"<subclass>": _stable_repr(type(x)), "items": norm(base(x), depth + 1),
                        "state": norm(state, depth + 1), "factory": norm(factory, depth + 1)}
            finally:
                del path[id(x)]
        if isinstance(x, (dict, list, tuple, set, frozenset)):
            if id(x) in path:    # (a list holding itself: where the cycle goes back to)
                cycles[0] += 1
                return {"<cycle>": depth - path[id(x)]}
            # a container met again at the same depth (`A = [B] * 4`, B = [C] * 4 ...)
            # is read once, and is there again as the digest of its text: read and
            # written out again each time, 10 such levels were 4**10 reads (a minute at
            # each process's first call), 20 never ended. (Only one with no cycle in
            # it, whose text the path does not change; x is kept with its text, so no
            # other object takes its id meanwhile.)
            hit = done.get((id(x), depth))
            if hit is not None:
                if hit[2] is None:
                    hit[2] = {"<same>": digest(json.dumps(hit[1], sort_keys=True,
                                                          default=str))}
                return hit[2]
            before = cycles[0]
            path[id(x)] = depth
            try:
                out = items(x, depth)
            finally:
                del path[id(x)]
            if cycles[0] == before:
                done[(id(x), depth)] = [x, out, None]
            return out
        if isinstance(x, np.ndarray):
            return f"array {x.dtype} {x.shape} {_array_text(x, walker)}"
        if isinstance(x, types.FunctionType):
            return f"function {x.__qualname__} {code_text(x.__code__)}"
        if isinstance(x, (bool, int, float, str, type(None))):
            return x
        text = repr(x)
        if " at 0x" in text or isinstance(x, mmap.mmap):
            # a buffer whose repr hides its bytes (a memoryview, a ctypes array, a mmap)
            try:
                with memoryview(x) as m:
                    return {"<buffer>": _stable_repr(type(x)), "format": m.format,
                            "shape": m.shape, "bytes": digest(m.tobytes())}
            except (TypeError, ValueError):
                pass
        if " at 0x" in text and id(x) not in path:
            # a library's object whose repr hides what it holds (a deque of the user's
            # objects, a SimpleNamespace holding one): its attributes, or its items
            if isinstance(x, collections.abc.Mapping):
                held = dict(x)
            elif isinstance(x, collections.abc.Collection) and \
                    not isinstance(x, (bytes, bytearray, memoryview)):
                held = list(x)
            else:
                held = _object_state(x)
            if held is not None:
                path[id(x)] = depth
                try:
                    return {"<library object>": _stable_repr(type(x)),
                            "holds": norm(held, depth + 1)}
                finally:
                    del path[id(x)]
        return _stable_repr(x) if " at 0x" in text else text

    def items(x, depth):
        if isinstance(x, dict):
            texts = [(_key_text(k), y) for k, y in x.items()]
            strings.extend(k for k in x if type(k) is str)  # (`for k in W: getattr(m, k)`)
            return {k: norm(y, depth + 1) for k, y in sorted(texts, key=lambda kv: kv[0])}
        if isinstance(x, (list, tuple)):
            return [norm(y, depth + 1) for y in x]
        # (a set in an order of its contents: the walker reads the functions and classes
        # met in this order, and a set's own order follows the strings' hashes, which
        # differ in each process: another key each time)
        members = x if walker is None else sorted(x, key=_container_text)
        return sorted(str(norm(y, depth + 1)) for y in members)
    text = digest(json.dumps(norm(v), sort_keys=True, default=str))
    if walker is not None:
        walker.names.update(strings)    # (names or not: each is only looked up)
    return text


_LOGGERS = (logging.Logger, logging.LoggerAdapter, logging.Manager, logging.PlaceHolder)


def _logger_text(x) -> str:
    """A logger by its name: its attributes hold every logger of the process (its
    manager's) and the levels it has been asked about, which differ with the modules
    imported and what was logged before the key (another key, though no value a kernel
    computes with is there)."""
    while isinstance(x, logging.LoggerAdapter):
        x = x.logger
    return f"<logger {getattr(x, 'name', type(x).__name__)}>"


def _key_text(k) -> str:
    """A dict key as text: a string as itself, anything else by its contents (a function
    or an object as a key was its str, with its address: another key in each process)."""
    if isinstance(k, str):
        return k
    return f"<{type(k).__module__}.{type(k).__qualname__}> {_container_text(k)}"


def _array_text(a, walker=None) -> str:
    """A digest of an array's contents: its bytes, or where it holds Python objects (dtype
    object, or a record with such a field), whose bytes are their addresses (another key
    in each process, none of their values), the objects as a container's."""
    if a.dtype.hasobject:
        return _container_text(a.tolist(), walker)
    return digest(np.ascontiguousarray(a).tobytes())


def _library_stamp(fn) -> str:
    """What changes when an installed library is upgraded: its version and the size and
    modification time of the file that defines the function."""
    top = (getattr(fn, "__module__", "") or "").split(".")[0]
    version = getattr(sys.modules.get(top), "__version__", "")
    try:
        st = os.stat(fn.__code__.co_filename)
        return f"{version} {st.st_size} {st.st_mtime_ns}"
    except (OSError, AttributeError):
        return str(version)


def _module_attr(module, attr):
    """module.attr, or _ABSENT where it has none: its own names first, then its
    __getattr__ (lazy submodules) with warnings silenced. A name the function reads that
    the module only warns about (`str` beside `np.float64`: NumPy's FutureWarning for
    `np.str`) is no warning at the user's compile, nor an error under -W error. A dict
    (a function's globals) by its items."""
    if isinstance(module, dict):
        return module.get(attr, _ABSENT)
    try:
        return vars(module)[attr]
    except KeyError:
        pass
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _attr(module, attr, _ABSENT)


def _users_module_file(name) -> bool:
    """An import of `name` (not imported yet) would load the user's file: found without
    importing anything (in a package not imported yet, the package's file)."""
    parent = name.rpartition(".")[0]
    while parent and parent not in sys.modules:
        name, parent = parent, parent.rpartition(".")[0]
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return False
    path = getattr(spec, "origin", None)
    return bool(path) and os.path.isfile(path) and not _library_file(path)


def _has_contents(cell):
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False


def code_digests(fn, whole=False):
    """(digest of fn's own source, digest of what it reads). fn may be any callable: a
    bound method, a functools.partial or an object with __call__ (a schedule) is read
    with the values it carries (its self, the partial's arguments). whole=True: a
    ValueError where some value it reads is nested too deep to be read (Walker.cut)."""
    w = _walk(fn)
    if whole and w.cut:
        raise ValueError("a value nested too deep to be read")
    own, deps = w.parts[0], w.parts[1:]
    return digest(own), digest(*deps)


def _walk(fn, names=None):
    w = _Walker()
    if isinstance(fn, types.FunctionType):
        w.function(fn, names)
    else:
        w.value("<callable>", fn, set())
    return w.finish()


def definition_source(func):
    """What the trace of a @jd.compute function reads of its definition (the captured
    text, or the file's now where it is not captured yet: capture.trace.source_text),
    and the names its code reads as globals that the trace does not (the targets and
    indices of index notation: Captured.notation); ("", frozenset()) for the op
    library's (its files are in the environment) and anything else."""
    pyfunc = getattr(func, "pyfunc", None)
    if not isinstance(pyfunc, types.FunctionType) or _is_library(pyfunc):
        return "", frozenset()
    captured = getattr(func, "_captured", None)
    if captured is not None:
        return getattr(captured, "source", ""), getattr(captured, "notation", frozenset())
    from jitdl.capture.trace import source_text
    return source_text(pyfunc)


def fast_key(func, specs, config, target):
    """The first-level key of one call signature (None where the definition or its
    schedule reads a value it cannot see whole: Walker.cut), its named parts, and the
    spans of the functions it read (the definition first; see relative_locations)."""
    from jitdl.config import settings
    text, notation = definition_source(func)
    w = _walk(func.pyfunc, _names(func.pyfunc.__code__) - notation)
    own, deps = digest(w.parts[0]), digest(*w.parts[1:])
    sched_fn = func._schedules.get(target.name)
    ws = _walk(sched_fn) if sched_fn is not None else None
    sched = digest(digest(ws.parts[0]), digest(*ws.parts[1:])) if ws else "auto"
    parts = {
        # the code Python compiled, and the text the trace reads (a file edited after
        # its import is traced as it is now: its kernel is not the compiled code's)
        "source": digest(own, text),
        "dependencies": deps,
        "schedule": sched,
        "config": digest(json.dumps(config or {}, sort_keys=True, default=repr)),
        "args": digest(json.dumps(specs)),
        # the automatic schedule depends on the thread count
        "options": digest(func.strict_fp, func.name, settings.num_threads,
                          *(["solid"] if getattr(func, "_solid", None) else [])),
        "environment": digest(json.dumps(environment(target), sort_keys=True)),
    }
    if w.cut or ws is not None and ws.cut:
        # a value read nested too deep to see (a list in a list ... 21 deep): an edit of
        # it would keep this key, so there is none; the full key (the loop IR, which
        # holds the values read) still finds a kernel made for what this trace reads
        return None, parts, w.spans
    return digest(*[f"{k}={v}" for k, v in sorted(parts.items())]), parts, w.spans


def full_key(loop_ir: str, strict_fp: bool, signature, target):
    """The second-level key: the loop IR, plus how the call's arguments map onto the
    kernel's parameters (the IR lists arrays before scalars)."""
    parts = {"loop_ir": digest(loop_ir), "options": digest(strict_fp),
             "signature": digest(json.dumps(signature, sort_keys=True)),
             "environment": digest(json.dumps(environment(target), sort_keys=True))}
    return digest(*[f"{k}={v}" for k, v in sorted(parts.items())]), parts



# Source locations. A kernel's signature names lines of the user's source (the call-time
# conditions on the sizes, Signature.required; the Python-int checks, int_checks). The
# fast key leaves out where a function is (it counts lines from the function's first), so
# one entry serves the definition moved in its file, or an identical one elsewhere (a
# notebook's cell run again): the alias of each fast key keeps the lines relative to the
# function that holds them, and a process that finds the alias places them in its own.

def _locations(sig) -> list:
    """[file, line] or None of each location sig stores: the conditions on the sizes, then
    the Python-int checks."""
    return [[r[5], r[6]] if r[5] else None for r in sig.required] + \
        [[c[4][0], c[4][1]] if c[4] else None for c in sig.int_checks]


def relative_locations(sig, spans) -> list:
    """sig's locations for an alias record: ["span", k, lines after the first of spans[k]]
    where one of the functions the key read holds the line (the innermost), else ["file",
    file, line] (a line of an installed library: its version is in the key); None where
    there is none."""
    out = []
    for loc in _locations(sig):
        if loc is None:
            out.append(None)
            continue
        file, line = loc
        holders = [(first, k) for k, (f, first, last) in enumerate(spans)
                   if f == file and first <= line <= last]
        if holders:
            first, k = max(holders, key=lambda h: (h[0], -h[1]))
            out.append(["span", k, line - first])
        else:
            out.append(["file", file, line])
    return out


def placed(sig, where, spans):
    """sig with the locations of an alias record (relative_locations) placed in this
    process's spans of the same key; None where the record has none that fit (an alias
    written by another version, or damaged)."""
    count = len(sig.required) + len(sig.int_checks)
    if not isinstance(where, list) or len(where) != count:
        return None
    locs = []
    for w in where:
        match w:
            case None:
                locs.append(None)
            case ["span", int(k), int(offset)] if 0 <= k < len(spans):
                locs.append([spans[k][0], spans[k][1] + offset])
            case ["file", str(file), int(line)]:
                locs.append([file, line])
            case _:
                return None
    return _located(sig, locs)


def with_locations_of(sig, required, int_checks):
    """sig (a stored kernel's) with the locations of another trace's checks of the same
    loop IR (pipeline.host_checks), or None where the checks differ in more than their
    locations."""
    other = dataclasses.replace(sig, required=_as_stored(required),
                                int_checks=_as_stored(int_checks))
    blank = [None] * (len(sig.required) + len(sig.int_checks))
    if len(other.required) != len(sig.required) or \
            len(other.int_checks) != len(sig.int_checks) or \
            _located(other, blank) != _located(sig, blank):
        return None
    return other


def _located(sig, locs):
    """sig with the locations _locations lists replaced by locs, its checks as lists (as
    a stored signature holds them)."""
    n = len(sig.required)
    required = [list(r[:5]) + list(loc or [None, None]) + list(r[7:])
                for r, loc in zip(sig.required, locs)]
    int_checks = [list(c[:4]) + [None if loc is None else list(loc)] + list(c[5:])
                  for c, loc in zip(sig.int_checks, locs[n:])]
    return dataclasses.replace(sig, required=_as_stored(required),
                               int_checks=_as_stored(int_checks))


def _as_stored(checks):
    """checks as a stored signature holds them (JSON's lists for tuples)."""
    return json.loads(json.dumps(checks))
