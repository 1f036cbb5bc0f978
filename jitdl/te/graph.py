"""A traced definition as a value: parameters, outputs, and functional rewrites.

Graphs are never changed in place once traced: a rewrite (a schedule's pack, cache_read,
cache_write, rfactor) returns new tensors for the stages it changes and for every stage
that reads them, sharing the rest, so one trace serves any number of schedules.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from jitdl.ir.nodes import Access
from jitdl.ir.visit import map_expr
from jitdl.te.ops import stages_of
from jitdl.te.tensor import Compute, Tensor


@dataclass(frozen=True)
class Graph:
    """A traced definition: its parameters (Tensors and scalar Vars) and its outputs."""
    name: str
    params: tuple
    outputs: tuple
    layout: tuple = ()     # per call argument: ("array" | "scalar" | "static", name)
    equal_sizes: tuple = ()     # (SizeVar, SizeVar) the definition asserts equal
    # (size expr, op, number, message, loc, error kind): conditions on symbolic sizes checked at the
    # call (jitdl.te.ops.require_size)
    required_sizes: tuple = ()

    @property
    def stages(self):
        """Compute stages, producers before consumers."""
        return stages_of(self.outputs)


def replace_ops(outputs, new_ops):
    """The graph under `outputs` with the ops of some stages replaced.

    new_ops maps a stage's name to its new Compute (whose accesses may name tensors of
    the old graph or new ones). Returns (new outputs, {name: new tensor}) covering every
    stage reachable from the new outputs."""
    memo = {}

    def tensor(t):
        got = memo.get(id(t))
        if got is not None:
            return got
        if not isinstance(t.op, Compute):
            memo[id(t)] = t
            return t
        op = new_ops.get(t.name, t.op)
        body = map_expr(op.body, access)
        if op is t.op and body is op.body:
            new = t
        else:
            new = Tensor(t.name, t.shape, t.dtype, Compute(op.axes, body, op.loc))
        memo[id(t)] = new
        return new

    def access(n):
        if isinstance(n, Access):
            t = tensor(n.tensor)
            if t is not n.tensor:       # (its run-time checks, `checked`, `carried`, stay)
                return dataclasses.replace(n, tensor=t)
        return None

    outs = tuple(tensor(t) for t in outputs)
    return outs, {t.name: t for t in stages_of(outs)}
