"""Running a definition on symbolic inputs: source capture, the AST rewrite, and tracing."""
from __future__ import annotations

import ast
import inspect
import linecache
import os
import traceback
from dataclasses import dataclass

from jitdl.capture import runtime as jd_runtime
from jitdl.capture.transform import RewriteError, notation_names, rewrite
from jitdl.errors import (ArgumentError, DefinitionError, JitdlError, SourceLoc,
                           definition_error, numpy_base, numpy_kind)
from jitdl.ir import build
from jitdl.ir.nodes import Expr, IterVar, SizeVar, Var
from jitdl.ir.visit import expr_children
from jitdl.te import naming
from jitdl.te.graph import Graph
from jitdl.te import ops as te_ops
from jitdl.te.ops import make_stage, stages_of
from jitdl.te.tensor import Compute, Declared, Placeholder, Tensor

_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class Captured:
    """A user function ready to trace: rewritten when its source is available."""
    func: object
    original: object
    has_source: bool
    why_no_source: str = ""
    namespace: dict | None = None     # the rewritten function's globals
    source: str = ""                  # the definition read (source_text), "" if none
    notation: frozenset = frozenset()  # names only index notation binds (notation_names)

    def refresh(self):
        """Give the rewritten function the current values of the original's globals and
        closure cells: a trace reads them as they are now (DESIGN: globals are read when a
        specialisation is built), not as they were when the source was first captured."""
        ns = self.namespace
        if ns is None:
            return                        # the original function itself: it reads them live
        current = _namespace(self.original)
        current[self.func.__name__] = self.func
        for name in [n for n in ns if n not in current]:
            ns.pop(name, None)
        ns.update(current)


def _namespace(fn):
    """What the rewritten code of fn sees as globals: fn's globals and closure values
    (cells not bound yet left out), and the capture runtime as `__jd__`."""
    ns = dict(fn.__globals__)
    if fn.__closure__:
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
            try:
                ns[name] = cell.cell_contents
            except ValueError:            # an empty cell: not bound yet
                ns.pop(name, None)
    ns["__jd__"] = jd_runtime
    return ns


def _call(cap, values):
    """Call the captured function with one value per parameter, in order: keyword-only
    parameters by name."""
    params = list(inspect.signature(cap.original).parameters.values())
    pos = [v for p, v in zip(params, values) if p.kind != p.KEYWORD_ONLY]
    kw = {p.name: v for p, v in zip(params, values) if p.kind == p.KEYWORD_ONLY}
    with build.user_code():
        return cap.func(*pos, **kw)


def _last_line(code):
    """The last source line of a code object and the code objects nested in it."""
    last = max((ln for _, _, ln in code.co_lines() if ln is not None), default=0)
    for c in code.co_consts:
        if hasattr(c, "co_lines"):
            last = max(last, _last_line(c))
    return last


def _current_lines(filename, module_globals):
    """linecache's lines of a file, checked against the file first (it may have changed:
    a reload). Python 3.11's linecache reads an entry after testing that it is there, so a
    thread that drops a stale entry between the two makes another's read raise
    KeyError(filename); the second try finds the entry gone or fresh."""
    for attempt in range(3):
        try:
            linecache.checkcache(filename)
            return linecache.getlines(filename, module_globals)
        except KeyError:
            if attempt == 2:
                raise


def _definition(pyfunc):
    """(the function's def as an AST, its first line), or an error text. The block is
    cut by indentation from the file (inspect.getsourcelines tokenizes it, ~5 ms); where
    that does not parse to the function, inspect does it."""
    def parse(lines):
        # the def's own indentation off every line that has it (a line of a string may
        # start further left: textwrap.dedent would then remove nothing)
        head = next((ln for ln in lines if ln.strip()), "")
        pad = head[:len(head) - len(head.lstrip())]
        try:
            tree = ast.parse("".join(ln[len(pad):] if ln.startswith(pad) else ln
                                     for ln in lines))
        except SyntaxError:
            return None
        return next((n for n in tree.body if isinstance(n, (ast.FunctionDef,
                     ast.AsyncFunctionDef)) and n.name == pyfunc.__name__), None)
    code = getattr(pyfunc, "__code__", None)
    if code is not None:
        lines = _current_lines(code.co_filename, pyfunc.__globals__)
        first = code.co_firstlineno
        if 0 < first <= len(lines):
            def inside(k):            # a blank line, or one indented deeper than the def
                return not lines[k].strip() or \
                    len(lines[k]) - len(lines[k].lstrip()) > indent
            head = lines[first - 1]
            indent = len(head) - len(head.lstrip())
            # through the last line any code of the function is on, then to the end of
            # its block (closing brackets); lines in between may be anything (comments
            # at column 0, strings)
            end = max(_last_line(code), first)
            while end < len(lines) and inside(end):
                end += 1
            fdef = parse(lines[first - 1:end])
            if fdef is not None:
                return fdef, first
    try:
        lines, first = inspect.getsourcelines(pyfunc)
    except (OSError, TypeError) as e:
        return str(e), 0
    fdef = parse(lines)
    return (fdef, first) if fdef is not None else \
        ("its source is not a plain function definition", 0)


def source_text(pyfunc):
    """(the definition that capture reads now (the file's text, which can differ from the
    code Python compiled: a file edited since its import), as a text without positions
    or comments, and its notation_names); ("", frozenset()) where it has none."""
    fdef, _ = _definition(pyfunc)
    if isinstance(fdef, str):
        return "", frozenset()
    return ast.dump(fdef), notation_names(fdef)


def capture(pyfunc) -> Captured:
    fdef, first = _definition(pyfunc)
    if isinstance(fdef, str):
        return Captured(pyfunc, pyfunc, False, fdef)
    source, notation = ast.dump(fdef), notation_names(fdef)
    try:
        fdef = rewrite(fdef)
    except RewriteError as e:
        raise DefinitionError(f"{pyfunc.__name__}: {e}",
                              SourceLoc(pyfunc.__code__.co_filename, e.lineno + first - 1)) \
            from None
    module = ast.Module([fdef], [])
    ast.increment_lineno(module, first - 1)
    code = compile(module, pyfunc.__code__.co_filename, "exec")
    namespace = _namespace(pyfunc)
    exec(code, namespace)
    func = namespace[fdef.name]
    func.__defaults__ = pyfunc.__defaults__
    func.__kwdefaults__ = pyfunc.__kwdefaults__
    return Captured(func, pyfunc, True, namespace=namespace, source=source,
                    notation=notation)


def _user_frame_loc(tb, filename):
    loc = None
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == filename:
            loc = SourceLoc(filename, lineno)
    return loc


def _scalar_text(spec, value):
    """How a scalar argument was passed, for messages: `float 3.0`, or from its spec."""
    if value is not None:
        return f"{type(value).__name__} {value!r}" if type(value) in (bool, int, float) \
            else f"{type(value).__name__} {value}"
    return f"a Python {dict(bool='bool', int64='int', float64='float')[spec[1]]}" \
        if spec[2] else f"a {spec[1]} scalar"


def size_var(name, dim):
    """The int64 size of dimension `dim` of the dynamic argument `name`: the kernel takes
    it as a scalar parameter, filled from the array's shape at each call."""
    return SizeVar(f"{name}_n{dim}", "int64")


def trace(cap: Captured, specs, names, values=None) -> Graph:
    """Run the definition on placeholders. specs[i] is ('array', shape, dtype) (a None
    in a dynamic argument's shape is a size variable, `X_n0`, see size_var),
    ('scalar', dtype, weak) or ('static', value): a static argument is passed as the
    plain Python value. `values` (the call's arguments, when known) only make messages
    more precise."""
    params, call_args = [], []
    for n, (spec, name) in enumerate(zip(specs, names)):
        if spec[0] == "array":
            shape = tuple(size_var(name, d) if s is None else s
                          for d, s in enumerate(spec[1]))
            t = Tensor(name, shape, spec[2], Placeholder(n))
            params.append(t)
            call_args.append(t)
        elif spec[0] == "scalar":
            v = Var(name, spec[1], weak=spec[2])   # Python scalars are weak, NumPy's not
            params.append(v)
            call_args.append(v)
        else:
            call_args.append(spec[1])
    layout = tuple((spec[0], name) if spec[0] != "static" else ("static", name, spec[1])
                   for spec, name in zip(specs, names))
    fname = cap.original.__name__
    filename = cap.original.__code__.co_filename
    cap.refresh()
    try:
        with naming.scope(), jd_runtime.asserted_sizes() as equal_sizes, \
                te_ops.required_sizes() as required, jd_runtime.fortran_results() as fortran:
            result = _call(cap, call_args)
    except ArgumentError as e:
        if e.message.startswith(f"{fname}("):
            raise
        raise numpy_kind(ArgumentError, numpy_base(e, ArgumentError))(   # say whose
            f"{fname}(): {e.message}", e.loc) from None
    except JitdlError:
        raise
    except build.ScalarIndexError as e:
        loc = _user_frame_loc(e.__traceback__, filename)
        for n, (p, name) in enumerate(zip(call_args, names)):
            if p is e.expr and specs[n][0] == "scalar":
                raise ArgumentError(
                    f"{fname}(): argument '{name}' was passed a scalar "
                    f"({_scalar_text(specs[n], values[n] if values else None)}) but the "
                    f"definition indexes it like an array (`{name}[...]`): pass an array, "
                    f"or use `{name}` without an index", loc) from None
        raise DefinitionError(f"{fname}: {e}", loc) from None
    except NameError as e:
        if not cap.has_source:
            raise DefinitionError(
                f"{fname}: index notation (`Y[i, j] = ...`) needs the function's source, "
                f"which Python does not have here ({cap.why_no_source}): functions typed at "
                "the plain `python` prompt keep no source. Define it in a file, or in an "
                "IPython/Jupyter cell, or use the TE style `jd.tensor(shape, lambda i, j: "
                f"...)`, which works by tracing. (Python said: {e})") from None
        raise DefinitionError(f"{fname}: {type(e).__name__}: {e}",
                              _user_frame_loc(e.__traceback__, filename)) from e
    except Exception as e:
        called = ", ".join(
            f"{p.name}: {p.dtype}[{', '.join(map(str, p.shape))}]" if isinstance(p, Tensor)
            else f"{p.name}: {p.dtype} scalar" if isinstance(p, Var)
            else f"{name}={p!r}" for p, name in zip(call_args, names))
        loc = _user_frame_loc(e.__traceback__, filename)
        if isinstance(e, ValueError) and "unpack" in str(e):
            raise ArgumentError(
                f"{fname}(): an argument has the wrong number of dimensions for this "
                f"definition ({e}); called with {called}", loc) from None
        hint = f"; if it builds a very deep expression: {_TOO_DEEP}" \
            if isinstance(e, RecursionError) else f"; {_ARRAY_NOT_ARGUMENT}" \
            if isinstance(e, IndexError) and str(e).startswith("only integers, slices") \
            else ""
        raise definition_error(e, f"{fname}: {type(e).__name__}: {e} (called with "
                               f"{called}){hint}", loc) from e
    outs = list(result) if isinstance(result, (tuple, list)) else [result]
    if not outs:
        raise DefinitionError(f"{fname} returns nothing; return the output tensor(s)")
    for o in outs:
        if id(o) in fortran:
            _, name, loc = fortran[id(o)]
            raise ArgumentError(f"{fname}(): its result is {name}(..., order='F'), but a "
                                f"definition's kernel writes its results in C order; leave "
                                f"order= out and lay the result out after the call "
                                f"(np.asfortranarray)", loc)
    outputs = []
    for n, o in enumerate(outs):
        default = fname if len(outs) == 1 else f"{fname}_{n}"
        outputs.append(_as_output(o, default, fname))
    seen = set()
    for n, o in enumerate(outputs):
        if id(o) in seen:   # the same tensor returned twice: give the second its own copy
            outputs[n] = _copy_stage(o, f"{o.name}_{n}")
        seen.add(id(o))
    _unique_names(params, outputs)
    for t in stages_of(outputs):
        depth = expr_depth(t.op.body)
        if depth > MAX_BODY_DEPTH:
            raise DefinitionError(f"{fname}: the expression of {t.name} nests {depth} levels "
                                  f"deep; {_TOO_DEEP}", t.op.loc)
    return Graph(fname, tuple(params), tuple(outputs), layout, tuple(equal_sizes),
                 tuple(required))


# Levels of one stage's expression that every pass of the pipeline takes (each recurses
# once or more per level: 480 levels exceeded Python's recursion limit; a chain of stages,
# such as jd.numpy calls, is not limited, as the automatic schedule stores an inlined
# chain every schedule.auto._INLINE_MAX_DEPTH levels)
MAX_BODY_DEPTH = 300
# (NumPy's IndexError for an index that is a symbolic value)
_ARRAY_NOT_ARGUMENT = ("a NumPy array that is not an argument (a global, a closure value) "
                       "cannot be read at a definition's indices: pass it to the function "
                       "as an argument")
_TOO_DEEP = (f"jitdl compiles expressions up to {MAX_BODY_DEPTH} levels deep: compute a "
             "part of it as a tensor of its own (jd.tensor, index notation, or jd.numpy "
             "calls), which the compiler fuses back where that is safe")


def expr_depth(e):
    """Levels of the expression e (1: a leaf), without recursion."""
    depth, stack = {}, [(e, False)]
    while stack:
        n, done = stack.pop()
        if id(n) in depth:
            continue
        kids = expr_children(n)
        if done:
            depth[id(n)] = 1 + max((depth[id(k)] for k in kids), default=0)
        else:
            stack.append((n, True))
            stack.extend((k, False) for k in kids if id(k) not in depth)
    return depth[id(e)]


def too_deep(graph):
    """The DefinitionError for a pass that went past Python's recursion limit on graph's
    expressions within MAX_BODY_DEPTH (a chain of selects on an index takes some passes
    several calls a level): the depth and line of its deepest stage."""
    depth, t = max(((expr_depth(t.op.body), t) for t in stages_of(graph.outputs)),
                   key=lambda p: p[0])
    return DefinitionError(f"{graph.name}: the expression of {t.name} nests {depth} levels "
                           "deep, too deep for the compiler's passes (a chain of selects "
                           "takes some of them several calls a level): compute a part of "
                           "it as a tensor of its own (jd.tensor, index notation, or "
                           "jd.numpy calls), which the compiler fuses back where that is "
                           "safe", t.op.loc)


def inline(cap: Captured, args, fname):
    """Run a definition on the tensors and expressions of the definition being traced:
    its stages become part of that graph. Unnamed result stages take the function's name
    (and still take the name of a variable they are assigned to)."""
    filename = cap.original.__code__.co_filename
    cap.refresh()
    try:
        result = _call(cap, args)
    except JitdlError:
        raise
    except Exception as e:
        raise DefinitionError(f"{fname}: {type(e).__name__}: {e}",
                              _user_frame_loc(e.__traceback__, filename)) from e
    for o in (result if isinstance(result, tuple) else (result,)):
        if isinstance(o, Tensor) and isinstance(o.op, Declared):
            raise _never_filled(fname, o)
        if isinstance(o, Tensor) and isinstance(o.op, Compute) and o.auto_named:
            o.name = fname
    return result


def _unique_names(params, outputs):
    """Stage names are how schedules and buffers refer to stages: make them distinct."""
    taken = {p.name for p in params}
    for t in stages_of(outputs):
        name, n = t.name, 1
        while name in taken:
            name = f"{t.name}_{n}"
            n += 1
        t.name = name
        taken.add(name)


def _copy_stage(t, name):
    axes = tuple(IterVar(Var(f"i{d}"), 0, n) for d, n in enumerate(t.shape))
    return make_stage(name, axes, t[tuple(a.var for a in axes)] if axes else t[()], None)


def _never_filled(fname, t):
    return DefinitionError(f"{fname} returns {t.name}, which was declared with "
                           "jd.tensor(shape) but never filled")


def _as_output(o, default, fname):
    if isinstance(o, Tensor):
        if isinstance(o.op, Compute):
            if o.auto_named:
                o.name, o.auto_named = default, False
            return o
        if isinstance(o.op, Placeholder):
            return _copy_stage(o, default)
        raise _never_filled(fname, o)
    if isinstance(o, (Expr, IterVar, int, float, bool)):
        return make_stage(default, (), build.as_expr(o), None)
    raise DefinitionError(f"{fname} returns a {type(o).__name__}; return tensors "
                          "(or a tuple of them)")
