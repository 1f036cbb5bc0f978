"""IR invariants, checked after lowering (and after every pass in tests)."""
from __future__ import annotations

from jitdl.errors import CompileError
from jitdl.ir.nodes import (Allocate, Binary, Compare, For, ForKind, IfThen, LetStmt, Load,
                            PrimFunc, Select, Seq, Store, Var, Buffer, ThreadReduce)
from jitdl.ir.visit import stmt_exprs, walk_unique


def verify(func: PrimFunc):
    """Every Var is bound, every Buffer declared, operand dtypes agree, no nested parallel."""
    bound = {p for p in func.params if isinstance(p, Var)}
    bufs = {p for p in func.params if isinstance(p, Buffer)}

    def fail(msg):
        raise CompileError(f"IR verifier ({func.name}): {msg}")

    def check_expr(e, scope, buffers):
        for n in walk_unique(e):
            if isinstance(n, Var) and n not in scope:
                fail(f"variable {n.name} used outside its loop")
            if isinstance(n, Load) and n.buffer not in buffers:
                fail(f"buffer {n.buffer.name} read outside its allocation")
            if isinstance(n, (Binary, Compare)) and n.a.dtype != n.b.dtype:
                fail(f"operands of {n} have dtypes {n.a.dtype} and {n.b.dtype}")
            if isinstance(n, Select) and (n.t.dtype != n.f.dtype or n.cond.dtype != "bool"):
                fail(f"select {n} is ill-typed")

    def rec(s, scope, buffers, in_parallel):
        for e in stmt_exprs(s):
            check_expr(e, scope, buffers)
        match s:
            case For():
                if s.kind == ForKind.PARALLEL and in_parallel:
                    fail(f"parallel loop {s.var.name} nested in another parallel loop")
                rec(s.body, scope | {s.var}, buffers, in_parallel or s.kind == ForKind.PARALLEL)
            case Store():
                if s.buffer not in buffers:
                    fail(f"buffer {s.buffer.name} written outside its allocation")
                if s.value.dtype != s.buffer.dtype:
                    fail(f"store of {s.value.dtype} into {s.buffer.name}: {s.buffer.dtype}")
            case Seq():
                for x in s.stmts:
                    rec(x, scope, buffers, in_parallel)
            case IfThen():
                rec(s.then, scope, buffers, in_parallel)
                if s.otherwise is not None:
                    rec(s.otherwise, scope, buffers, in_parallel)
            case Allocate():
                rec(s.body, scope, buffers | {s.buffer}, in_parallel)
            case ThreadReduce():
                if s.buffer not in buffers:
                    fail(f"buffer {s.buffer.name} combined outside its allocation")
            case LetStmt():
                rec(s.body, scope | {s.var}, buffers, in_parallel)
    rec(func.body, bound, bufs, False)
