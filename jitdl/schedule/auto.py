"""The automatic schedule for definitions without @jd.schedule (target "cpu").

Rules, in order: inline injective intermediate stages into their consumers; order each
reduction so that the innermost loop is a contiguous data loop when one exists (else keep
a register accumulator); fuse outer data loops and run them in parallel when there is
enough work; vectorise the innermost contiguous data loop.
"""
from __future__ import annotations

from jitdl.ir.analysis import linear, reads_memory
from jitdl.ir.nodes import Access, ReduceOp, Select
from jitdl.ir.visit import walk_expr
from jitdl.schedule.schedule import Axis

PARALLEL_MIN_WORK = 1 << 15


def _innermost_contiguous(stage):
    """True when the last data axis walks every tensor it reads with stride 1: it appears
    with coefficient 1 in the last index only (e.g. B[k, j], P[c, y + ry, x + rx])."""
    op = stage.tensor.op
    if not op.axes:
        return False
    last = op.axes[-1].var
    uses = [a for a in walk_expr(op.body) if isinstance(a, Access)
            and any(last is v for i in a.indices for v in walk_expr(i))]

    def stride_one(acc):
        if any(last is v for i in acc.indices[:-1] for v in walk_expr(i)):
            return False
        form = linear(acc.indices[-1])
        return form is not None and form.get(last) == 1
    return bool(uses) and all(stride_one(a) for a in uses)


def _guarded_reads(stage):
    """A stage whose body selects between memory reads (padding): cheap to store once,
    costly to recompute inside a reduction's innermost loop."""
    return any(isinstance(n, Select) and (reads_memory(n.t) or reads_memory(n.f))
               for n in walk_expr(stage.tensor.op.body))


def _consumed_by_reduction(s, tensor):
    for st in s.stages.values():
        if st.is_reduce and any(isinstance(n, Access) and n.tensor is tensor
                                for n in walk_expr(st.tensor.op.body)):
            return True
    return False


def auto_schedule(s, num_threads):
    outputs = {id(t) for t in s.outputs}
    for name, st in s.stages.items():
        if not st.is_reduce and id(st.tensor) not in outputs and not (
                _guarded_reads(st) and _consumed_by_reduction(s, st.tensor)):
            s.compute_inline(s[name])
    for name, st in s.stages.items():
        if st.attach == "inline":
            continue
        op = st.tensor.op
        data = [a.name for a in op.axes]
        red = [a.name for a in op.reduce_axes]
        arg = st.tensor.op.reduce is not None and \
            st.tensor.op.reduce.op in (ReduceOp.ARGMAX, ReduceOp.ARGMIN)
        if red and data and not arg and _innermost_contiguous(st):
            # i, k, j: the reduction walks rows, the innermost loop streams along j
            s.reorder(*[Axis(name, n) for n in data[:-1] + red + data[-1:]])
        work = 1
        for a in st.axes.values():
            if a.name in data or a.name in red:
                work *= a.extent
        outer = [n for n in st.leaves if n in data]
        if num_threads > 1 and work >= PARALLEL_MIN_WORK and outer:
            # fuse leading data loops until there are enough parallel iterations
            lead = []
            for n in st.leaves:
                if n not in data:
                    break
                lead.append(n)
                ext = 1
                for m in lead:
                    ext *= st.axes[m].extent
                if ext >= 4 * num_threads:
                    break
            if len(lead) == len(data) and len(lead) > 1 and not red:
                lead = lead[:-1]    # keep the innermost loop for SIMD
            if lead:
                ax = s.fuse(*[Axis(name, n) for n in lead]) if len(lead) > 1 \
                    else Axis(name, lead[0])
                s.parallel(ax)
        inner = st.leaves[-1] if st.leaves else None
        if inner in data and st.axes[inner].kind.value == "for" and st.axes[inner].extent >= 4:
            s.vectorize(Axis(name, inner))
    return s
