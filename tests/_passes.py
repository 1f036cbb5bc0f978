"""The loop IR of a definition after each pass, and running it on the reference interpreter.

The two things here that know jitdl's internals, so that a change there is fixed in one
place:
- `graph_and_schedule`: how a @jd.compute Function gets its TE graph and schedule;
- `PASSES` and `built`: the pass sequence of jitdl.lower.lower.lower() (build loop nests ->
  simplify -> partition_loops -> simplify -> verify). When the pipeline becomes a named
  list of passes, take the list from there instead.
"""
from contextlib import contextmanager
from unittest import mock

import numpy as np

from jitdl.api import _symbol
from jitdl.config import settings
from jitdl.ir.nodes import Buffer
from jitdl.lower import lower as _lower_module
from jitdl.tir.interpret import execute
from jitdl.tir.partition import partition_loops
from jitdl.tir.simplify import simplify
from jitdl.tir.verify import verify

PASSES = [("simplify", simplify), ("partition_loops", partition_loops),
          ("simplify", simplify)]


@contextmanager
def threads(n):
    """The automatic schedule parallelises by thread count: fix it for stable loop IR."""
    saved = settings.num_threads
    settings.num_threads = n
    try:
        yield
    finally:
        settings.num_threads = saved


def graph_and_schedule(f, args):
    """A fresh TE graph of f(*args) and the schedule f's call would compile it with (its
    @jd.schedule, else the automatic one). Fresh: some steps (rfactor, pack) rewrite the
    graph they are applied to."""
    graph, _ = f._graph(tuple(args))
    sched, _ = f._schedule(graph)
    return graph, sched


def built(graph, sched, name):
    """jitdl.lower.lower.lower() with its passes turned off: the loop nests as built."""
    off = mock.patch.multiple(_lower_module, simplify=lambda func: func,
                              partition_loops=lambda func: func, verify=lambda func: None)
    with off:
        return _lower_module.lower(graph, sched, name)


def pass_stages(f, args):
    """[(pass name, PrimFunc)] for f(*args): the built loop nests, then the function after
    each pass, each checked by the verifier. The last one must be what f compiles."""
    name = _symbol(f.name)
    graph, sched = graph_and_schedule(f, args)
    func = built(graph, sched, name).func
    stages = [("build", func)]
    for pass_name, run in PASSES:
        func = run(func)
        verify(func)
        stages.append((pass_name, func))
    official = _lower_module.lower(*graph_and_schedule(f, args), name).func
    assert str(official) == str(func), \
        "PASSES no longer reproduces lower(); update tests/_passes.py"
    return stages


def split_args(args):
    """The arrays and the scalars of a call, each in signature order (PrimFunc order)."""
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    scalars = [a for a in args if not isinstance(a, np.ndarray)]
    return arrays, scalars


def store_trace(run):
    """The stores of a traced run, floats by their bits (NaN == NaN), for equality."""
    return [(name, i, v.tobytes() if isinstance(v, np.floating) else v)
            for name, i, v in run.stores]


def interpret_stages(f, args, trace=True):
    """Run every stage of pass_stages(f, args) on the interpreter. Returns
    [(pass name, PrimFunc, Run)]; every output element was written in each, and (trace)
    each pass stored the same values at the same places in the same order as the built
    loop nests (the passes change loop structure and index arithmetic, never the work)."""
    arrays, scalars = split_args(args)
    out, first = [], None
    for name, func in pass_stages(f, args):
        run = execute(func, arrays, scalars, trace=trace)
        for buf, mask in zip([p for p in func.params if isinstance(p, Buffer)][len(arrays):],
                             run.written):
            assert mask.all(), f"after {name}: {(~mask).sum()} elements of {buf.name} " \
                               f"never written\n{func}"
        if trace:
            stores = store_trace(run)
            if first is None:
                first = stores
            else:
                assert stores == first, _first_difference(name, first, stores, func)
            run.stores = None
        out.append((name, func, run))
    return out


def _first_difference(name, a, b, func):
    for k, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return f"after {name}: store #{k} is {y}, the built loop nests stored {x}\n{func}"
    return f"after {name}: {len(b)} stores, the built loop nests made {len(a)}\n{func}"


def loop_ir(f, args):
    """The loop IR text f compiles for f(*args): what `f.lower(*args)` shows, without
    compiling it."""
    return str(_lower_module.lower(*graph_and_schedule(f, args), _symbol(f.name)).func)
