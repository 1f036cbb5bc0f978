"""The loop IR of a definition after each pass, and running it on the reference interpreter.

The one place here that knows jitdl's internals: `pass_stages` takes the PrimFunc after
each loop-IR pass of jitdl.pipeline for the schedule a @jd.compute call compiles with.
"""
from contextlib import contextmanager

import numpy as np

from jitdl.config import settings
from jitdl.ir.nodes import Buffer
from jitdl.tir.interpret import execute
from jitdl.tir.verify import verify


@contextmanager
def threads(n):
    """The automatic schedule parallelises by thread count: fix it for stable loop IR."""
    saved = settings.num_threads
    settings.num_threads = n
    try:
        yield
    finally:
        settings.num_threads = saved


def _lowered(f, args):
    args = f._args(tuple(args), {})
    return f._lower(f._specs(args), f._configs.get(f._key(args)))


def pass_stages(f, args):
    """[(pass name, PrimFunc)] for f(*args): the loop nests as lowered, then the function
    after each loop-IR pass of the pipeline, each checked by the verifier. The last one is
    what f compiles."""
    stages = list(_lowered(f, args).funcs.items())
    for _, func in stages:
        verify(func)
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


def loop_ir(f, args, target=None):
    """The loop IR text f compiles for f(*args): what `f.lower(*args)` shows, without
    compiling it; for another target than the host, if given."""
    if target is None:
        return str(_lowered(f, args).func)
    from jitdl import pipeline
    args = f._args(tuple(args), {})
    specs = f._specs(args)
    low = pipeline.lower(f._trace(specs), target, f._options(),
                         **f._how(target, f._configs.get(f._key(args))))
    return str(low.func)


def fixed_cpu():
    """A CPU target with fixed policies (an AVX-512 machine with 4 cores, 32 KiB L1 and
    1 MiB L2): the automatic schedule's choices for it are the same on every host."""
    import dataclasses
    from jitdl.target import get
    return dataclasses.replace(get("cpu"), vector_bytes=64, vector_registers=32,
                               l1_bytes=32 << 10, l2_bytes=1 << 20, l3_bytes=32 << 20,
                               cores=4, l1_way_bytes=4096, cache_line_bytes=64)


def peak_temp_bytes(func, threads=1):
    """The most bytes of temporaries a PrimFunc holds at once: every buffer an Allocate
    makes, those inside a parallel loop once per thread; buffers allocated one after the
    other (a loop's main part and its tail) count once."""
    from jitdl import dtypes
    from jitdl.ir.nodes import Allocate, For, ForKind, IfThen, LetStmt, Seq

    def peak(s, copies):
        match s:
            case Allocate():
                size = s.buffer.size * dtypes.itemsize(s.buffer.dtype) * copies
                return size + peak(s.body, copies)
            case For():
                return peak(s.body, copies * (threads if s.kind == ForKind.PARALLEL else 1))
            case LetStmt():
                return peak(s.body, copies)
            case Seq():
                return max((peak(x, copies) for x in s.stmts), default=0)
            case IfThen():
                return max(peak(s.then, copies),
                           peak(s.otherwise, copies) if s.otherwise is not None else 0)
        return 0
    return peak(func.body, 1)
