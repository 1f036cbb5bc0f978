"""The AST rewrite that lets plain Python spell tensor definitions.

It turns the parts of Python that cannot be overloaded into calls of jitdl.capture.runtime
(imported in the rewritten code as `__jd__`), which decide at trace time whether a value is
symbolic (build IR) or concrete (behave exactly as Python):

    Y[i, j] = e             ->  Y = __jd__.define('Y', lambda: Y, ('i', 'j'), lambda i, j: e, line)
    T = e                   ->  T = __jd__.bind('T', e)          (names unnamed stages)
    a if c else b           ->  __jd__.ifexp(c, lambda: a, lambda: b)
    a and b / a or b        ->  __jd__.and_(lambda: a, lambda: b) / __jd__.or_(...)
    not a                   ->  __jd__.not_(a)
    a == b, a < b < c       ->  __jd__.cmp('==', a, b), __jd__.and_(...)
    a in b                  ->  __jd__.cmp('in', a, b)
    f(x for k in range(n))  ->  f(__jd__.gen(...))                (reductions)
    exp(x), math.exp(x)     ->  __jd__.intrinsic('exp', lambda: exp)(x)
    float(n), len(X)        ->  __jd__.intrinsic('float', lambda: float)(n)
    isinstance(n, int)      ->  __jd__.intrinsic('isinstance', lambda: isinstance)(n, int)
    a is b                  ->  __jd__.is_(a, b)                  (a size is no number's identity)
    assert c, msg           ->  __jd__.assert_(c, lambda: msg)     (sizes: checked at the call)
    d[k], d.get(k, v)       ->  __jd__.item(d, k), __jd__.get_of(d)(k, v)   (symbolic keys)
"""
from __future__ import annotations

import ast
import collections

from jitdl.te.ops import CASTS, INTRINSICS

# (float, int, len: Python's builtins, which the definition's own code may call on a
# symbolic size or a tensor; jitdl.capture.runtime.PYTHON_BUILTINS)
_ROUTED = set(INTRINSICS) | {"prod"} | set(CASTS) | {"float", "int", "len", "type",
                                                       "isinstance"}
_CMP = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.In: "in", ast.NotIn: "not in"}


class RewriteError(Exception):
    """Python the rewrite cannot turn into a definition; `lineno` is the line in the
    parsed function (capture places it in the file)."""

    def __init__(self, message, lineno):
        super().__init__(message)
        self.lineno = lineno


def _distinct(names, node, what, hint):
    """Raise RewriteError where an index name comes twice (Python would refuse the
    lambda the rewrite makes of them: 'duplicate argument')."""
    twice = next((n for k, n in enumerate(names) if n in names[:k]), None)
    if twice is not None:
        raise RewriteError(f"{what} names the index `{twice}` twice; {hint}", node.lineno)


def _jd(attr):
    return ast.Attribute(ast.Name("__jd__", ast.Load()), attr, ast.Load())


def _call(attr, *args):
    return ast.Call(_jd(attr), list(args), [])


def _thunk(body, params=()):
    return ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg(p) for p in params],
                                    kwonlyargs=[], kw_defaults=[], defaults=[]), body)


def _const(v):
    return ast.Constant(v)


def _located(new, old):
    """Give every node of `new` that has no position the position of `old` (a node that
    has one was placed already, with all below it: the walk stops there)."""
    todo = [new]
    while todo:
        n = todo.pop()
        if "lineno" in n._attributes:
            if hasattr(n, "lineno"):
                continue
            ast.copy_location(n, old)
        todo.extend(ast.iter_child_nodes(n))
    return new


class _Rewriter(ast.NodeTransformer):
    def visit(self, node):
        new = super().visit(node)
        if new is not node and isinstance(new, ast.AST) and hasattr(node, "lineno"):
            _located(new, node)
        return new

    def visit_Assign(self, node):
        node = self.generic_visit(node)
        statement = index_statement(node)
        if statement is not None:
            name, ids = statement
            _distinct(ids, node, f"`{name}[{', '.join(ids)}] = ...`",
                      f"each dimension of the new tensor {name} needs an index of its "
                      f"own (a diagonal: `{name}[i, j] = ... if i == j else ...`)")
            value = _call("define", _const(name),
                          _thunk(ast.Name(name, ast.Load())),
                          ast.Tuple([_const(i) for i in ids], ast.Load()),
                          _thunk(node.value, ids),
                          _const(node.lineno))
            return ast.Assign([ast.Name(name, ast.Store())], value)
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            node.value = _call("bind", _const(node.targets[0].id), node.value)
        return node

    def visit_Assert(self, node):
        node = self.generic_visit(node)
        msg = _thunk(node.msg) if node.msg is not None else _const(None)
        call = ast.Expr(_call("assert_", node.test, msg))
        # (kept under __debug__, as Python drops an assert under -O)
        return ast.If(ast.Name("__debug__", ast.Load()), [call], [])

    def visit_IfExp(self, node):
        node = self.generic_visit(node)
        return _call("ifexp", node.test, _thunk(node.body), _thunk(node.orelse))

    def visit_BoolOp(self, node):
        node = self.generic_visit(node)
        fn = "and_" if isinstance(node.op, ast.And) else "or_"
        return _call(fn, *[_thunk(v) for v in node.values])

    def visit_UnaryOp(self, node):
        node = self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _call("not_", node.operand)
        return node

    def visit_Compare(self, node):
        node = self.generic_visit(node)
        if len(node.ops) == 1 and isinstance(node.ops[0], (ast.Is, ast.IsNot)):
            same = _call("is_", node.left, node.comparators[0])
            return same if isinstance(node.ops[0], ast.Is) else \
                ast.UnaryOp(ast.Not(), same)
        if not all(type(op) in _CMP for op in node.ops):
            return node
        operands = [node.left] + node.comparators
        pairs = [_call("cmp", _const(_CMP[type(op)]), a, b)
                 for op, a, b in zip(node.ops, operands, operands[1:])]
        if len(pairs) == 1:
            return pairs[0]
        return _call("and_", *[_thunk(p) for p in pairs])

    def visit_GeneratorExp(self, node):
        node = self.generic_visit(node)
        gens = node.generators
        ok = all(isinstance(g.target, ast.Name) and not g.is_async
                 and isinstance(g.iter, ast.Call) and isinstance(g.iter.func, ast.Name)
                 and g.iter.func.id == "range" and not g.iter.keywords for g in gens)
        if not ok:
            return node
        names = [g.target.id for g in gens]
        _distinct(names, node, "the generator",
                  "each is an axis of the reduction and needs a name of its own")
        ranges = [_thunk(ast.Tuple(list(g.iter.args), ast.Load()), names[:n])
                  for n, g in enumerate(gens)]
        conds = [c for g in gens for c in g.ifs]
        cond = None
        if conds:
            cond = conds[0] if len(conds) == 1 else _call("and_", *[_thunk(c) for c in conds])
        return _call("gen", _thunk(node.elt, names),
                     ast.Tuple([_const(n) for n in names], ast.Load()),
                     ast.Tuple(ranges, ast.Load()),
                     _const(None) if cond is None else _thunk(cond, names))

    def visit_Subscript(self, node):
        node = self.generic_visit(node)
        sl = node.slice
        if not isinstance(node.ctx, ast.Load) or isinstance(sl, ast.Slice) or \
                isinstance(sl, ast.Tuple) and any(isinstance(e, ast.Slice) for e in sl.elts):
            return node         # (a slice is no expression: it stays a subscript)
        return _call("item", node.value, sl)

    def visit_Call(self, node):
        node = self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "get":
            node.func = _call("get_of", f.value)
            return node
        name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
        if name in _ROUTED and not (isinstance(f, ast.Name) and f.id == "__jd__"):
            node.func = ast.Call(_jd("intrinsic"), [_const(name), _thunk(f)], [])
        return node


def index_statement(node):
    """(tensor name, index names) of an index-notation statement (`Y[i, j] = ...`: one
    target, a name subscripted by names), else None."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return None
    (target,) = node.targets
    if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
        sl = target.slice
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        if elts and all(isinstance(e, ast.Name) for e in elts):
            return target.value.id, [e.id for e in elts]
    return None


def notation_names(func_def) -> frozenset:
    """The names that the code Python compiles for func_def reads as globals and its
    rewritten code does not: the tensors index notation defines (the rewritten function's
    locals) and its indices where they are met nowhere but in the statements that index
    by them; not a name that is also an attribute, imported or declared `global`, and
    none where func_def holds a function or class of its own."""
    nodes = list(ast.walk(func_def))
    names, elsewhere, found = [], set(), []
    for node in nodes:
        match node:
            case ast.Name():
                names.append(node.id)
            case ast.Attribute():
                elsewhere.add(node.attr)
            case ast.alias():
                elsewhere.update((node.name.split(".")[0], node.asname or ""))
            case ast.Global() | ast.Nonlocal():
                elsewhere.update(node.names)
            case ast.FunctionDef() | ast.AsyncFunctionDef() | ast.ClassDef() \
                    if node is not func_def:
                return frozenset()
            case ast.Assign():
                statement = index_statement(node)
                if statement is not None:
                    found.append((node, statement))
    count = collections.Counter(names)
    inside = collections.Counter()
    for node, (_, ids) in found:
        inside.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in ids)
    defined = {name for _, (name, _) in found}
    return frozenset(({i for i in inside if inside[i] == count[i]} | defined) - elsewhere)


def rewrite(func_def: ast.FunctionDef) -> ast.FunctionDef:
    """Rewrite the body of one function definition (its decorators are dropped)."""
    func_def.decorator_list = []
    new = _Rewriter().visit(func_def)
    return ast.fix_missing_locations(new)
