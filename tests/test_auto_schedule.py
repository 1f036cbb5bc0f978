"""The automatic schedule, and a fallback that never shows a user an error about a
schedule they did not write.

Definitions are scheduled for several CPU targets (the host, an AVX-512 one with fixed
policies, a small-cache AVX2 one, an SSE one) and their results match NumPy in float64.
Kernels scheduled for another target than the host still run here: the target sizes the
schedule, code generation is for the host.
"""
import dataclasses
import logging

import numpy as np
import pytest

import jitdl as jd
from jitdl import pipeline
from jitdl.errors import DefinitionError, ScheduleError
from jitdl.ir.nodes import ForKind
from jitdl.runtime import engine
from jitdl.runtime.kernel import Kernel
from jitdl.schedule.schedule import Schedule
from jitdl.target import get
from _passes import fixed_cpu

F32, F64 = np.float32, np.float64
THREADS = 2


def targets():
    host, avx512 = get("cpu"), fixed_cpu()
    small = dataclasses.replace(avx512, vector_bytes=32, vector_registers=16, l1_bytes=32 << 10,
                                l2_bytes=256 << 10, l3_bytes=1 << 20)
    sse = dataclasses.replace(avx512, vector_bytes=16, vector_registers=16, l2_bytes=512 << 10,
                              l3_bytes=2 << 20, local_buffer_bytes=1024,
                              stack_buffer_bytes=256)
    return {"host": host, "avx512": avx512, "small": small, "sse": sse}


TARGETS = targets()


def lowered(f, args, target, threads=THREADS, **kw):
    args = f._args(tuple(args), {})
    graph = f._trace(f._specs(args))
    return pipeline.lower(graph, target, pipeline.Options(f.name, False, threads), **kw)


def run(low, target, args, threads=THREADS):
    art = pipeline.build(low, target, pipeline.Options(low.func.name, False, threads))
    return Kernel(art.signature, engine.Loaded(art.obj, art.signature.symbol))(tuple(args))


def normal(rng, *shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def normalised_matmul(A, B):
    """A row statistic read inside a register-tiled reduction."""
    nrm[i] = sum(A[i, k] * A[i, k] for k in range(A.shape[1]))
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1])) / nrm[i]
    return C


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# ---------------------------------------------------------------------------------------
# the fallback
# ---------------------------------------------------------------------------------------

def _refuse(name):
    def refuse(*args, **kwargs):
        raise ScheduleError(f"{name}: refused (test)")
    return refuse


def test_a_failing_automatic_schedule_falls_back(monkeypatch, rng, caplog):
    monkeypatch.setattr(Schedule, "compute_at", _refuse("compute_at"))
    x = normal(rng, 37, 300, dtype=F64)
    target = TARGETS["host"]
    with caplog.at_level(logging.DEBUG, logger="jitdl.schedule"):
        low = lowered(softmax, [x], target)
    assert low.auto_level == "no compute_at"
    assert not any(s["op"] == "compute_at" for s in low.schedule.steps)
    assert any("compute_at: refused (test)" in r.getMessage() and r.levelno == logging.DEBUG
               for r in caplog.records)
    np.testing.assert_allclose(run(low, target, [x]), np_softmax(x), rtol=1e-12)
    # the recorded steps are the fallback's: replayed, they give the same loop IR
    again = lowered(softmax, [x], target, steps=low.schedule.steps)
    assert str(again.func) == str(low.func)


def test_the_fallback_goes_down_to_the_default_loop_nests(monkeypatch, rng):
    a, b = normal(rng, 40, 30, dtype=F64), normal(rng, 30, 50, dtype=F64)
    target = TARGETS["avx512"]
    # no loop may be unrolled, vectorized or parallel: only inlining is left
    validate = Schedule.validate

    def serial_only(self):
        for st in self.stages.values():
            if any(la.kind != ForKind.SERIAL for la in st.axes.values()):
                raise ScheduleError(f"{st.tensor.name}: a loop that is not serial (test)")
        return validate(self)
    monkeypatch.setattr(Schedule, "validate", serial_only)
    low = lowered(matmul, [a, b], target)
    assert low.auto_level == "inline only"
    np.testing.assert_allclose(run(low, target, [a, b]), a @ b, rtol=1e-12)
    x = normal(rng, 20, 30, dtype=F64)
    monkeypatch.setattr(Schedule, "compute_inline", _refuse("compute_inline"))
    low = lowered(softmax, [x], target)
    assert low.auto_level == "default loop nests" and low.schedule.steps == []
    np.testing.assert_allclose(run(low, target, [x]), np_softmax(x), rtol=1e-12)


def test_an_error_inside_the_automatic_schedule_falls_back(monkeypatch, rng):
    """Not only ScheduleErrors: a bug in the automatic schedule's own code is not the
    user's error either, when the definition's own loop nests lower."""
    from jitdl.schedule import auto

    def broken(*args, **kwargs):
        raise KeyError("a bug (test)")
    monkeypatch.setattr(auto, "_register_tile", broken)
    a, b = normal(rng, 40, 30, dtype=F64), normal(rng, 30, 50, dtype=F64)
    low = lowered(matmul, [a, b], TARGETS["host"])
    assert low.auto_level == "no tiling"
    np.testing.assert_allclose(run(low, TARGETS["host"], [a, b]), a @ b, rtol=1e-12)


def test_the_call_path_records_and_replays_the_fallback(monkeypatch, rng):
    from jitdl.config import settings
    monkeypatch.setattr(settings, "cache", False)
    monkeypatch.setattr(Schedule, "unroll", _refuse("unroll"))   # no register tile
    f = jd.compute(matmul.pyfunc)
    a, b = normal(rng, 64, 48, dtype=F64), normal(rng, 48, 80, dtype=F64)
    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-12)
    sched = f.schedule_of(a, b)
    assert not any(s["op"] in ("unroll", "pack") for s in sched.steps)
    space = f.config_space(a, b)
    assert not any("tile" in name for name in space.names)   # the fallback's knobs
    with pytest.raises(ScheduleError, match="no knob named 'C.tile_j'"):
        f.with_config(**{"C.tile_j": 16})(a, b)
    low = lowered(f, [a, b], TARGETS["host"], threads=settings.num_threads)
    assert str(f.lower(a, b)) == str(low.func)


def test_knobs_of_the_full_schedule_replay(rng):
    """Without a failure, the knobs of the full automatic schedule apply as before."""
    f = jd.compute(matmul.pyfunc)
    a, b = normal(rng, 64, 48, dtype=F64), normal(rng, 48, 80, dtype=F64)
    space = f.config_space(a, b)
    assert "C.tile_j" in space.names and "C.tile_i" in space.names
    g = f.with_config(**{"C.tile_j": 8, "C.tile_i": 2})
    np.testing.assert_allclose(g(a, b), a @ b, rtol=1e-12)
    assert "range(8)" in str(g.lower(a, b))


def test_errors_in_a_users_schedule_still_raise(rng):
    f = jd.compute(softmax.pyfunc)

    @jd.schedule(f)
    def bad(s, cfg):
        s.compute_at(s["mx"], s["Y"], s["s"].axis[0])    # a loop of another stage

    with pytest.raises(ScheduleError, match="compute_at"):
        f(normal(rng, 8, 16))


def test_a_definitions_own_error_is_raised_as_before(rng):
    @jd.compute
    def shifted(X):
        Y = jd.tensor(X.shape)
        Y[i] = X[i + 1]
        return Y

    with pytest.raises(DefinitionError, match="X"):
        shifted(normal(rng, 10))


def test_a_row_statistic_inside_a_tiled_reduction(rng):
    """It raised "split: stage nrm is computed at loop i of C" from the automatic schedule
    (nrm computed in C's row loop, which the register tile then split)."""
    a, b = normal(rng, 100, 80, dtype=F64), normal(rng, 80, 120, dtype=F64)
    for target in TARGETS.values():
        low = lowered(normalised_matmul, [a, b], target)
        np.testing.assert_allclose(run(low, target, [a, b]),
                                   (a @ b) / (a * a).sum(1)[:, None], rtol=1e-12)
