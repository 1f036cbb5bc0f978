"""The canonical text of every IR node: what golden tests, cache keys and f.lower() show."""
from __future__ import annotations

from jitdl.ir.nodes import (Access, Allocate, BinOp, Binary, Buffer, Call, Cast, Compare,
                            Const, For, ForKind, IfThen, LetStmt, Load, PrimFunc, Reduce,
                            Select, Seq, Store, UnOp, Unary, Var, ThreadReduce)
from jitdl.ir.visit import expr_children, stmt_exprs, walk_stmt, walk_unique

_PREC = {BinOp.OR: 1, BinOp.XOR: 2, BinOp.AND: 3, BinOp.SHL: 5, BinOp.SHR: 5,
         BinOp.ADD: 6, BinOp.SUB: 6, BinOp.MUL: 7, BinOp.DIV: 7, BinOp.FLOORDIV: 7,
         BinOp.MOD: 7, BinOp.POW: 9}
_CMP_PREC = 4


def _prec(e) -> int:
    if isinstance(e, Binary) and e.op in _PREC:
        return _PREC[e.op]
    if isinstance(e, Compare):
        return _CMP_PREC
    if isinstance(e, Unary):
        return 8
    return 10


def _paren(e, min_prec, memo) -> str:
    s = expr_text(e, memo)
    return f"({s})" if _prec(e) < min_prec and not _named(e, memo) else s


def _named(e, memo) -> bool:
    """e prints as its name `%k` (_Names), which needs no parentheses (a text that only
    starts with one, `%1 + 1`, does)."""
    names = memo.get("names")
    return names is not None and id(e) in names.named


# A subexpression met more than once (one object at several places: `v = v * v % 7 + 1`
# repeated) whose tree spans more than _NAMED nodes is printed once, as a line `%k = ...`
# before the first that uses it, and as `%k` at each use: in full its text would double
# with each such step (2^k copies of the first). Smaller ones print in full at each use.
_NAMED = 64


class _Names:
    """The subexpressions of `roots` that print as names (ids), and their lines so far.
    Met more than once means within one root: an expression stored by several statements
    (a loop's body and its tail's) prints in full in each, as any other."""

    def __init__(self, roots):
        shared, sizes = set(), {}
        for root in roots:
            uses = {}
            for n in walk_unique(root):
                for c in expr_children(n):
                    uses[id(c)] = uses.get(id(c), 0) + 1
            shared.update(k for k, u in uses.items() if u > 1)
            _tree_sizes(root, sizes)
        self.named = {k for k in shared if sizes[k] > _NAMED}
        self.lines = []


def _tree_sizes(root, sizes):
    """The number of nodes of each subexpression's tree (by id, into `sizes`), each node
    counted once per path: in the DAG's own time."""
    stack = [(root, False)]
    while stack:
        n, ready = stack.pop()
        if id(n) in sizes:
            continue
        if ready:
            sizes[id(n)] = 1 + sum(sizes[id(c)] for c in expr_children(n))
        else:
            stack.append((n, True))
            stack.extend((c, False) for c in expr_children(n) if id(c) not in sizes)


def _const(c: Const) -> str:
    v = c.value
    if c.dtype == "bool":
        return "True" if v else "False"
    if c.dtype in ("float32", "float64"):
        s = repr(float(v))
        return s if c.dtype == "float64" or c.weak else f"{s}f"
    return str(v) if c.dtype == "int64" else f"{v}:{c.dtype}"


def expr_text(e, memo=None) -> str:
    """e's text. `memo` (id -> text, over nodes that stay alive meanwhile) makes a
    subexpression that is one object at several places (`v = v * v + 1` repeated) printed
    once; a large one is named (_Names): e's text is then followed by ` where %1 = ...`."""
    if memo is None:
        memo = {"names": _Names([e])}
        text = expr_text(e, memo)
        lines = memo["names"].lines
        return f"{text} where {'; '.join(lines)}" if lines else text
    hit = memo.get(id(e))
    if hit is None:
        hit = _text(e, memo)
        names = memo.get("names")
        if names is not None and id(e) in names.named:
            names.lines.append(f"%{len(names.lines) + 1} = {hit}")
            hit = f"%{len(names.lines)}"
        memo[id(e)] = hit
    return hit


def _text(e, memo) -> str:
    match e:
        case Const():
            return _const(e)
        case Var():
            return e.name
        case Binary(op=op) if op in _PREC:
            p = _PREC[op]
            left = _paren(e.a, p, memo)
            right = _paren(e.b, p + 1, memo)
            sym = {BinOp.AND: "and", BinOp.OR: "or"}.get(op) if e.dtype == "bool" else None
            if op == BinOp.POW:
                return f"{_paren(e.a, p + 1, memo)} ** {_paren(e.b, p, memo)}"
            return f"{left} {sym or op.value} {right}"
        case Binary():
            return f"{e.op.value}({expr_text(e.a, memo)}, {expr_text(e.b, memo)})"
        case Compare():
            return f"{_paren(e.a, 5, memo)} {e.op.value} {_paren(e.b, 5, memo)}"
        case Unary(op=UnOp.NOT) if e.dtype == "bool":
            return f"not {_paren(e.a, 8, memo)}"
        case Unary():
            return f"{e.op.value}{_paren(e.a, 8, memo)}"
        case Call():
            return f"{e.fn.value}({', '.join(expr_text(a, memo) for a in e.args)})"
        case Select():
            parts = (expr_text(x, memo) for x in (e.cond, e.t, e.f))
            return f"select({', '.join(parts)})"
        case Cast():
            return f"{e.dtype}({expr_text(e.value, memo)})"
        case Access():
            return f"{e.tensor.name}[{', '.join(expr_text(i, memo) for i in e.indices)}]"
        case Reduce():
            axes = ", ".join(f"{a.name} in [{a.min}, {a.min + a.extent})" for a in e.axes)
            where = f", where={expr_text(e.where, memo)}" if e.where is not None else ""
            return f"{e.op.value}({expr_text(e.body, memo)} for {axes}{where})"
        case Load():
            mark = "!" if e.check else ""
            # the checks that ride on the read from a stage inlined into it: their index
            # is not the read's own (reads that check different indices print unlike)
            carried = [f"{name}[{text}] in [0, {n if isinstance(n, int) else expr_text(n)})"
                       for _, n, name, text in e.check or () if name != e.buffer.name]
            if carried:
                mark += "{" + "; ".join(carried) + "}"
            return f"{e.buffer.name}[{expr_text(e.index, memo)}]{mark}"
    raise TypeError(f"no text for {type(e).__name__}")


def _buf_decl(b: Buffer) -> str:
    return f"{b.name}: {b.dtype}[{', '.join(str(d) for d in b.shape)}]"


def stmt_lines(s, indent=0, memo=None) -> list[str]:
    """s's lines; `memo` as expr_text's, over a whole function (whose nodes it keeps).
    The lines naming large shared subexpressions come before the line that uses them."""
    if memo is None:
        memo = {"names": _Names([e for st in walk_stmt(s) for e in stmt_exprs(st)])}
    pad = "  " * indent
    match s:
        case For():
            named, (lo, ext) = _texts(memo, pad, s.min, s.extent)
            rng = f"range({ext})" if lo == "0" else f"range({lo}, {lo} + {ext})"
            head = f"{pad}{s.kind.value} {s.var.name} in {rng}:" if s.kind != ForKind.SERIAL \
                else f"{pad}for {s.var.name} in {rng}:"
            return named + [head] + stmt_lines(s.body, indent + 1, memo)
        case Store():
            named, (index, value) = _texts(memo, pad, s.index, s.value)
            return named + [f"{pad}{s.buffer.name}[{index}] = {value}"]
        case Seq():
            return [line for st in s.stmts for line in stmt_lines(st, indent, memo)]
        case IfThen():
            named, (cond,) = _texts(memo, pad, s.cond)
            out = named + [f"{pad}if {cond}:"] + stmt_lines(s.then, indent + 1, memo)
            if s.otherwise is not None:
                out += [f"{pad}else:"] + stmt_lines(s.otherwise, indent + 1, memo)
            return out
        case Allocate():
            return [f"{pad}alloc {_buf_decl(s.buffer)} ({s.buffer.scope})"] + \
                stmt_lines(s.body, indent, memo)
        case LetStmt():
            named, (value,) = _texts(memo, pad, s.value)
            return named + [f"{pad}{s.var.name} = {value}"] + stmt_lines(s.body, indent, memo)
        case ThreadReduce():
            return [f"{pad}{s.buffer.name}[0] = {s.op.value} over {s.kind.value} "
                    f"in range({s.extent})"]
    raise TypeError(f"no text for {type(s).__name__}")


def _texts(memo, pad, *es):
    """The texts of expressions es of one statement, after the lines naming the large
    shared subexpressions they meet first."""
    names = memo.get("names")
    done = len(names.lines) if names is not None else 0
    texts = [expr_text(e, memo) for e in es]
    return ([pad + line for line in names.lines[done:]] if names is not None else []), texts


def to_text(node) -> str:
    if isinstance(node, PrimFunc):
        params = ", ".join(_buf_decl(p) if isinstance(p, Buffer) else f"{p.name}: {p.dtype}"
                           for p in node.params)
        return "\n".join([f"def {node.name}({params}):"] + stmt_lines(node.body, 1))
    if isinstance(node, (For, Store, Seq, IfThen, Allocate, LetStmt)):
        return "\n".join(stmt_lines(node))
    return expr_text(node)
