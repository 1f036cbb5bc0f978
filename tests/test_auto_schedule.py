"""The automatic schedule: bounded temporaries, any row length, and a fallback that never
shows a user an error about a schedule they did not write.

Each definition is scheduled for several CPU targets (the host, an AVX-512 one with fixed
policies, a small-cache AVX2 one, an SSE one): the loop IR it compiles may hold at most a
given fraction of the bytes of the definition's own inputs and outputs in temporaries
(peak_temp_bytes, per thread inside parallel loops), and its results match NumPy in
float64. Kernels scheduled for another target than the host still run here: the target
sizes the schedule, code generation is for the host.
"""
import dataclasses
import logging
import math
import re

import numpy as np
import pytest

import jitdl as jd
from jitdl import pipeline
from jitdl.errors import DefinitionError, ScheduleError
from jitdl.ir.nodes import ForKind
from jitdl.runtime import engine
from jitdl.runtime.kernel import Kernel
from jitdl.schedule.schedule import Schedule, Split
from jitdl.target import get
from _passes import fixed_cpu, peak_temp_bytes

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


def io_bytes(args, out):
    outs = out if isinstance(out, tuple) else (out,)
    return sum(a.nbytes for a in args) + sum(o.nbytes for o in outs)


def normal(rng, *shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


# ---------------------------------------------------------------------------------------
# a battery of definitions
# ---------------------------------------------------------------------------------------

@jd.compute
def colsum(X):
    n, m = X.shape
    Y[j] = sum(X[i, j] for i in range(n))
    return Y


@jd.compute
def rowsum(X):
    n, m = X.shape
    Y[i] = sum(X[i, j] for j in range(m))
    return Y


@jd.compute
def matmul(A, B):
    (M, K), (_, N) = A.shape, B.shape
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")


@jd.compute
def first_rows_matmul(A, B):
    """Reads only the first 64 rows of B (and columns of A: a bare k over all of A's
    columns would be a shape agreement, B must have as many rows)."""
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(64))
    return C


@jd.compute
def outer_then_sum(a, b):
    T[i, j] = exp(a[i] * b[j])
    Z[i] = sum(T[i, j] for j in range(b.shape[0]))
    return Z


@jd.compute
def skinny_then_rowsum(A, B):
    T[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
    Z[i] = sum(T[i, j] for j in range(B.shape[1]))
    return Z


@jd.compute
def skinny_then_colmax(A, B):
    T[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
    Z[j] = max(T[i, j] for i in range(A.shape[0]))
    return Z


@jd.compute
def chain(X):
    T[i, j] = X[i, j] * 2.0 + 1.0
    Y[i, j] = sqrt(T[i, j] * T[i, j] + 1.0)
    return Y


@jd.compute
def transpose(X):
    Y[i, j] = X[j, i] * 3.0
    return Y


@jd.compute
def softmax(X):
    n, m = X.shape
    mx[i] = max(X[i, k] for k in range(m))
    e[i, j] = exp(X[i, j] - mx[i])
    s[i] = sum(e[i, k] for k in range(m))
    Y[i, j] = e[i, j] / s[i]
    return Y


@jd.compute
def conv2d(X, W):
    n, c, h, w = X.shape
    f, _, r, q = W.shape
    P = jd.tensor((n, c, h + 2, w + 2))
    P[b, ci, y, x] = X[b, ci, y - 1, x - 1] if (y >= 1 and y <= h and x >= 1 and x <= w) else 0.0
    Y = jd.tensor((n, f, h, w))
    Y[b, fo, y, x] = sum(P[b, ci, y + ry, x + rx] * W[fo, ci, ry, rx]
                         for ci in range(c) for ry in range(r) for rx in range(q))
    return Y


@jd.compute
def matmul_bias_relu(A, B, bias):
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
    D[i, j] = max(C[i, j] + bias[j], 0.0)
    return D


@jd.compute
def normalised_matmul(A, B):
    """A row statistic read inside a register-tiled reduction."""
    nrm[i] = sum(A[i, k] * A[i, k] for k in range(A.shape[1]))
    C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1])) / nrm[i]
    return C


@jd.compute
def centred_matmul(A, B):
    mx[i] = max(A[i, k] for k in range(A.shape[1]))
    C[i, j] = sum((A[i, k] - mx[i]) * B[k, j] for k in range(A.shape[1]))
    return C


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def np_conv2d(x, w):
    n, c, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, w.shape[0], h, wd))
    for r in range(3):
        for q in range(3):
            out += np.einsum("bchw,fc->bfhw", xp[:, :, r:r + h, q:q + wd], w[:, :, r, q])
    return out


# (name, function, argument shapes, NumPy reference in float64, the most bytes of
# temporaries as a fraction of the definition's inputs and outputs)
BATTERY = [
    # (its rows split among the threads: a row of partial sums per 16 rows at most)
    ("column sum", colsum, [(300, 200)], lambda x: x.sum(0), 1 / 16 + 0.01),
    ("row sum", rowsum, [(300, 200)], lambda x: x.sum(1), 0.01),
    ("matmul square", matmul, [(200, 160), (160, 170)], lambda a, b: a @ b, 0.6),
    ("matmul one row", matmul, [(1, 300), (300, 250)], lambda a, b: a @ b, 0.01),
    ("matmul skinny k", matmul, [(300, 4), (4, 280)], lambda a, b: a @ b, 0.01),
    ("matmul skinny n", matmul, [(300, 200), (200, 3)], lambda a, b: a @ b, 0.01),
    ("matmul few rows", matmul, [(8, 300), (300, 400)], lambda a, b: a @ b, 0.01),
    ("matmul odd", matmul, [(97, 131), (131, 75)], lambda a, b: a @ b, 0.6),
    ("outer product then sum", outer_then_sum, [(700,), (600,)],
     lambda a, b: np.exp(a[:, None] * b[None, :]).sum(1), 0.01),
    ("skinny matmul then row sum", skinny_then_rowsum, [(600, 3), (3, 500)],
     lambda a, b: (a @ b).sum(1), 0.5),
    ("skinny matmul then column max", skinny_then_colmax, [(600, 3), (3, 500)],
     lambda a, b: (a @ b).max(0), 0.5),
    ("two-stage elementwise", chain, [(300, 200)],
     lambda x: np.sqrt((2 * x + 1) ** 2 + 1.0), 0.01),
    ("transpose", transpose, [(150, 150)], lambda x: 3 * x.T, 0.01),
    ("softmax", softmax, [(64, 300)], np_softmax, 0.1),
    ("softmax wide rows", softmax, [(4, 50000)], np_softmax, 0.3),
    ("conv2d", conv2d, [(2, 4, 10, 18), (8, 4, 3, 3)], np_conv2d, 0.7),
    ("matmul + bias + relu", matmul_bias_relu, [(150, 100), (100, 130), (130,)],
     lambda a, b, c: np.maximum(a @ b + c, 0), 1.0),   # C whole (see _fuse_epilogue)
    ("row norm inside matmul", normalised_matmul, [(100, 80), (80, 120)],
     lambda a, b: (a @ b) / (a * a).sum(1)[:, None], 1.0),
    ("row max inside matmul", centred_matmul, [(100, 80), (80, 120)],
     lambda a, b: (a - a.max(1)[:, None]) @ b, 0.6),
]


@pytest.mark.parametrize("case", BATTERY, ids=[c[0] for c in BATTERY])
@pytest.mark.parametrize("tname", list(TARGETS))
def test_temporaries_stay_small_and_results_match(case, tname, rng):
    name, f, shapes, ref, fraction = case
    target = TARGETS[tname]
    args = [normal(rng, *s) for s in shapes]
    low = lowered(f, args, target)
    assert low.auto_level == "full", f"{name}: the automatic schedule fell back"
    out = run(low, target, args)
    expected = ref(*[a.astype(F64) for a in args])
    k = max(s[-1] for s in shapes)
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5 * np.sqrt(k))
    peak = peak_temp_bytes(low.func, THREADS)
    assert peak <= fraction * io_bytes(args, out), \
        f"{name} on {tname}: {peak} bytes of temporaries for {io_bytes(args, out)} of " \
        f"inputs and outputs\n{low.schedule}\n{low.func}"


def test_an_epilogue_is_a_pass_of_its_own_where_the_reduction_takes_l1_blocks(rng):
    """matmul + bias + relu: with a short reduction the epilogue runs on each register
    tile as it finishes (C computed at D's tile loop); with one long enough for the rule's
    L1 blocks of k, C keeps those blocks (a tile cannot finish its sum before the last
    block) and D reads the result in a pass after it. Both match NumPy."""
    for k, apart in ((96, False), (1536, True)):
        a, b, bias = normal(rng, 64, k), normal(rng, k, 96), normal(rng, 96)
        for tname, target in TARGETS.items():
            low = lowered(matmul_bias_relu, [a, b, bias], target)
            c = low.schedule.stages["C"]
            assert (c.attach == "root") == apart, (k, tname, low.schedule)
            if apart:
                assert any(isinstance(r, Split) and r.parent == "k" for r in c.relations), \
                    low.schedule
            np.testing.assert_allclose(run(low, target, [a, b, bias]),
                                       np.maximum(a @ b + bias, 0), rtol=2e-5,
                                       atol=2e-5 * np.sqrt(k))


@pytest.mark.parametrize("tname", list(TARGETS))
def test_a_few_rows_stream_rows_of_a_matrix_larger_than_l2(tname, rng):
    """(m, k) @ (k, n) with m at most two row tiles and B past the target's L2: the
    threads split the columns in blocks, each reading B's rows along their length a few
    steps at a time (the reduction split by _STREAM_K, the column blocks parallel, no
    pack); with many rows, register tiles as before. Odd sizes (a partial tile, a
    reduction that is no multiple of the steps) match NumPy."""
    target = TARGETS[tname]
    k = 1001
    n = max(1000, 3 * target.l2_bytes // (k * 4))
    for m, stream in ((5, True), (1, True), (64, False)):
        a, b = normal(rng, m, k), normal(rng, k, n)
        low = lowered(matmul, [a, b], target)
        c = low.schedule.stages["C"]
        split_k = [r for r in c.relations if isinstance(r, Split) and r.parent == "k"]
        assert bool(split_k and split_k[0].factor == 8 and "B_pack" not in
                    low.schedule.stages) == stream, (m, tname, low.schedule)
        np.testing.assert_allclose(run(low, target, [a, b]), a.astype(F64) @ b,
                                   rtol=2e-5, atol=2e-5 * np.sqrt(k))
    # B an inlined transpose (x @ W.T): its rows are W's columns, not streamed
    w = normal(rng, n, k)
    low = lowered(matmul_transposed, [normal(rng, 5, k), w], target)
    assert not any(isinstance(r, Split) and r.parent.startswith("k") and r.factor == 8
                   for r in low.schedule.stages["matmul"].relations), (tname, low.schedule)


@jd.compute
def matmul_of_transposes(A, B):
    return jd.numpy.matmul(A.T, B.T)


@jd.compute
def matmul_of_a_cast(A, B):
    return jd.numpy.matmul(A, B.astype(np.float32))


def test_a_few_rows_do_not_stream_an_operand_read_across_its_rows(rng):
    """A.T @ B.T with few rows and B past L2: the operand the tile reads along its columns
    is B.T, an inlined transpose whose every step reads B across its rows; streaming it
    would gather each element in an unrolled block (LLVM took 40-75 s on one such kernel),
    so it keeps register tiles, and matches NumPy. A cast of B is still streamed."""
    target = TARGETS["host"]
    a, b = normal(rng, 1001, 13), normal(rng, 701, 1001)
    low = lowered(matmul_of_transposes, [a, b], target)
    c = next(x for x in low.schedule.stages.values() if x.is_reduce)
    assert not any(isinstance(r, Split) and r.factor == 8 and r.parent.startswith("k")
                   for r in c.relations), low.schedule
    np.testing.assert_allclose(run(low, target, [a, b]), a.T.astype(F64) @ b.T,
                               rtol=2e-5, atol=2e-5 * np.sqrt(1001))
    a, b = normal(rng, 13, 1001), normal(rng, 1001, 701, dtype=F64)
    low = lowered(matmul_of_a_cast, [a, b], target)
    c = next(x for x in low.schedule.stages.values() if x.is_reduce)
    assert any(isinstance(r, Split) and r.factor == 8 and r.parent.startswith("k")
               for r in c.relations), low.schedule


def test_no_pack_where_each_element_is_read_once(rng):
    """A column sum reads each element of X once and a one-row matmul each element of B
    once: copying them into a packed layout first only costs."""
    for f, shapes in ((colsum, [(300, 200)]), (matmul, [(1, 300), (300, 250)]),
                      (matmul, [(300, 4), (4, 280)])):
        for target in TARGETS.values():
            low = lowered(f, [normal(rng, *s) for s in shapes], target, until="schedule")
            assert not any(st.get("op") == "pack" for st in low.schedule.steps), \
                low.schedule


def test_a_reused_operand_is_packed(rng):
    """The register tile's streamed operand, reread by every row block, is packed (the
    fast path of a matmul stays)."""
    a, b = normal(rng, 200, 160), normal(rng, 160, 170)
    for target in TARGETS.values():
        low = lowered(matmul, [a, b], target, until="schedule")
        assert "B_pack" in low.schedule.stages and \
            low.schedule.stages["B_pack"].attach == "root", low.schedule


@jd.compute
def matmul_transposed(A, B):
    return jd.numpy.matmul(A, jd.numpy.transpose(B))


@pytest.mark.parametrize("shape", [(256, 16, 256), (70, 5, 131), (200, 40, 90)])
def test_a_short_reduction_packs_an_operand_it_reads_transposed(shape, rng):
    """A @ B.T with a short reduction (k < 64): the transpose, an inlined stage, is
    packed, so that a tile row reads B's columns contiguously instead of gathering them
    (256x16 @ 16x256 float32 eager: 146 -> 29 us on one core); A @ B with the same short
    reduction reads B's rows in place."""
    m, k, n = shape
    a, b = normal(rng, m, k), normal(rng, n, k)
    for tname, target in TARGETS.items():
        low = lowered(matmul_transposed, [a, b], target)
        assert any(st.get("op") == "pack" for st in low.schedule.steps), low.schedule
        if tname == "host":
            np.testing.assert_allclose(run(low, target, [a, b]), a.astype(F64) @ b.T,
                                       rtol=1e-4, atol=1e-4 * np.sqrt(k))
        low = lowered(matmul, [a, np.ascontiguousarray(b.T)], target, until="schedule")
        assert not any(st.get("op") == "pack" for st in low.schedule.steps), low.schedule
    x = rng.standard_normal((m, k))
    w = rng.standard_normal((n, k))
    np.testing.assert_allclose(jd.numpy.matmul(x, w.T), x @ w.T, rtol=1e-12, atol=1e-12)


@jd.compute
def dense(A, B):
    """TVM's dense in index notation: B is read across the output's rows (B[j, k])."""
    C[i, j] = sum(A[i, k] * B[j, k] for k in range(A.shape[1]))
    return C


@pytest.mark.parametrize("shape", [(256, 16, 256), (100, 70, 90), (33, 300, 17),
                                   (300, 700, 500)])
def test_index_notation_dense_is_tiled_through_a_pack_that_transposes(shape, rng):
    """C[i, j] = sum(A[i, k] * B[j, k]) is register-tiled like A @ B: B is packed along its
    row dimension (B_pack[j / tj, k, tj], whole or one cache block at a time), so that a
    tile reads it contiguously; it kept a dot product per output element (256 x 16 by
    256 x 16 float32 on one core: 264 -> 37 us; 512^3: 9.0 -> 4.0 ms, NumPy 3.4-3.9)."""
    m, k, n = shape
    a, b = normal(rng, m, k), normal(rng, n, k)
    for tname, target in TARGETS.items():
        low = lowered(dense, [a, b], target)
        packs = [st for st in low.schedule.steps if st.get("op") == "pack"]
        assert any(p["tensor"] == "B" and p["dim"] == 0 for p in packs), low.schedule
        assert "unrolled" in str(low.func)
        if tname in ("host", "small", "sse"):
            np.testing.assert_allclose(run(low, target, [a, b]), a.astype(F64) @ b.T,
                                       rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_a_few_rows_read_a_transposed_operand_in_place(rng):
    """With fewer output rows than pay for one gather of B, dense keeps its dot products
    along the contiguous k (8 x 300 by 64 x 300: 12-15 us, 16-18 packed)."""
    a, b = normal(rng, 8, 300), normal(rng, 64, 300)
    low = lowered(dense, [a, b], TARGETS["host"])
    assert not any(st.get("op") == "pack" for st in low.schedule.steps), low.schedule
    np.testing.assert_allclose(run(low, TARGETS["host"], [a, b]), a.astype(F64) @ b.T,
                               rtol=1e-4, atol=1e-3)


@jd.compute
def tensordot_apart(A, B):
    return jd.numpy.tensordot(A, B, axes=([1, 3], [0, 2]))


@pytest.mark.parametrize("shapes", [((8, 10, 12, 14), (10, 16, 14)),
                                    ((3, 5, 7, 9), (5, 11, 9)), ((2, 3, 20, 4), (3, 40, 4))])
def test_a_transposed_view_of_one_panel_is_packed(shapes, rng):
    """tensordot over axes apart reads B (k, c, l) through a transposed view whose rows
    are one tile panel wide and whose rereads come from two data axes (the row axis has
    two tiles): it is packed all the same, where each tile row gathered B's columns
    (float32 (8, 10, 12, 14) with (10, 16, 14) on one core: 53 -> 18 us, NumPy 25-38)."""
    a, b = normal(rng, *shapes[0]), normal(rng, *shapes[1])
    ref = np.tensordot(a.astype(F64), b, axes=([1, 3], [0, 2]))
    for tname, target in TARGETS.items():
        low = lowered(tensordot_apart, [a, b], target)
        # (output rows narrower than a vector, 11 float32 on AVX-512, take no register tile)
        if tname == "host" and shapes[0][0] > 2 and shapes[1][1] >= target.lanes(4):
            assert any(st.get("op") == "pack" for st in low.schedule.steps), low.schedule
        if tname == "host":
            np.testing.assert_allclose(run(low, target, [a, b]), ref, rtol=1e-4, atol=1e-3)


@jd.compute
def quotient_matmul(P, s, V):
    Q[i, k] = P[i, k] / s[i]
    C[i, j] = sum(Q[i, k] * V[k, j] for k in range(P.shape[1]))
    return C


@pytest.mark.parametrize("shape", [(120, 96, 64), (70, 600, 40)])
def test_a_costly_broadcast_operand_is_packed(shape, rng):
    """An inlined operand with a division (attention's softmax(S) @ V), read once per
    column tile, is packed: each quotient is computed once, not once per tile."""
    m, k, n = shape
    p, s, v = normal(rng, m, k), normal(rng, m) + 4.0, normal(rng, k, n)
    ref = (p.astype(F64) / s[:, None]) @ v
    for tname, target in TARGETS.items():
        low = lowered(quotient_matmul, [p, s, v], target)
        assert "Q_pack" in low.schedule.stages, low.schedule
        body = str(low.func)
        assert " / " in body and not any(" / " in line for line in body.splitlines()
                                         if line.lstrip().startswith("C[")), body
        if tname == "host":
            np.testing.assert_allclose(run(low, target, [p, s, v]), ref, rtol=1e-4,
                                       atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("shape", [(300, 700, 500), (97, 20000, 130), (250, 100, 4000)])
def test_a_big_operand_is_packed_one_cache_sized_block_at_a_time(shape, rng):
    """An operand larger than the target's pack budget (from its cache sizes) is packed one
    block at a time, at the tile's block loop: the pack never takes more than the budget."""
    m, k, n = shape
    a, b = normal(rng, m, k), normal(rng, k, n)
    for tname in ("small", "sse"):
        target = TARGETS[tname]
        assert b.nbytes > target.pack_block_bytes
        low = lowered(matmul, [a, b], target)
        assert low.schedule.stages["B_pack"].attach == "at", low.schedule
        assert peak_temp_bytes(low.func, THREADS) <= target.pack_block_bytes
        np.testing.assert_allclose(run(low, target, [a, b]), a.astype(F64) @ b,
                                   rtol=1e-4, atol=1e-4 * np.sqrt(k))


# "small4": the small target with a 4-way L1 (8 KiB ways), whose 6-row tiles can fill a set
@pytest.mark.parametrize("shape,dtype,packed", [   # (packed for "avx512", "small", "small4")
    ((300, 1024, 1024), F32, (True, False, False)),      # 4 KiB pitches
    ((130, 512, 300), F64, (True, False, False)),
    ((300, 2048, 256), F32, (True, False, True)),         # 8 KiB
    ((200, 1025, 300), F64, (True, False, True)),         # 2 x 4 KiB + 8 bytes
    ((300, 1023, 512), F32, (True, False, False)),        # 4 KiB - 4 bytes
    ((300, 512, 512), F32, (False, False, False)),        # 2 KiB: 6 rows in each of 2 sets
    ((300, 1000, 1024), F32, (False, False, False)),
    ((2000, 2048, 256), F32, (True, False, False))])      # (small4: A's k block too big)
def test_rows_that_fill_an_l1_set_are_packed(shape, dtype, packed, rng):
    """A register tile's rows of A (the operand it broadcasts) are read in place a row
    pitch apart; rows whose offsets modulo an L1 way's bytes lie within a line of one
    another read the same sets at every reduction step, and where as many of them as
    the set has ways (12 rows of a 1024-, 1023- or 1025-wide float32 A on a 32 KiB, 8-way
    L1; 6 rows of a 2048-wide one on a 4-way L1) and the reduction takes L1 blocks, A is
    packed, per k block, and only then (a 2048^2 float32 matmul ran at 0.65x OpenBLAS on
    one Zen 4 core, 0.97x packed; 512^2, whose 12 rows fill two sets half each, was
    slower packed), where A's k block takes at most the pack budget."""
    m, k, n = shape
    a, b = normal(rng, m, k, dtype=dtype), normal(rng, k, n, dtype=dtype)
    small4 = dataclasses.replace(TARGETS["small"], l1_way_bytes=8 << 10)
    for tname, target, want in zip(("avx512", "small", "small4"),
                                   (TARGETS["avx512"], TARGETS["small"], small4), packed):
        low = lowered(matmul, [a, b], target)
        assert low.auto_level == "full", (tname, low.schedule)
        assert ("A_pack" in low.schedule.stages) == want, (tname, shape, low.schedule)
        if want:
            assert low.schedule.stages["A_pack"].attach == "at", low.schedule
            assert peak_temp_bytes(low.func, THREADS) <= 2 * target.pack_block_bytes
    low = lowered(matmul, [a, b], TARGETS["host"])
    tol = 1e-4 if dtype == F32 else 1e-10
    np.testing.assert_allclose(run(low, TARGETS["host"], [a, b]), a.astype(F64) @ b,
                               rtol=tol, atol=tol * np.sqrt(k))


@jd.compute
def matmul_of_columns(A, B):
    """A.T @ B written out: the tile's rows of A are A's adjacent columns."""
    C[i, j] = sum(A[k, i] * B[k, j] for k in range(A.shape[0]))
    return C


@pytest.mark.parametrize("shape", [(512, 512, 512), (1024, 300, 512), (256, 1024, 1024)])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_rows_within_a_line_of_one_another_are_not_packed(shape, dtype, rng):
    """A read as A[k, i]: the tile's rows are elements of one or two lines at each step
    (their values already lie together, as a pack would put them), not lines crowding
    a set, so A is read in place on every target, a 4-way L1 too."""
    k, m, n = shape
    a, b = normal(rng, k, m, dtype=dtype), normal(rng, k, n, dtype=dtype)
    small4 = dataclasses.replace(TARGETS["small"], l1_way_bytes=8 << 10)
    for tname, target in (("avx512", TARGETS["avx512"]), ("small", TARGETS["small"]),
                          ("small4", small4), ("host", TARGETS["host"])):
        low = lowered(matmul_of_columns, [a, b], target)
        assert low.auto_level == "full", (tname, low.schedule)
        assert "A_pack" not in low.schedule.stages, (tname, shape, low.schedule)
    tol = 1e-4 if dtype == F32 else 1e-10
    np.testing.assert_allclose(run(low, TARGETS["host"], [a, b]), a.T.astype(F64) @ b,
                               rtol=tol, atol=tol * np.sqrt(k))


def test_only_the_rows_a_reduction_reads_are_packed(rng):
    """B has 20000 rows, the reduction reads 64 of them: the pack copies those."""
    a, b = normal(rng, 300, 80), normal(rng, 20000, 200)
    for target in TARGETS.values():
        low = lowered(first_rows_matmul, [a, b], target)
        used = a.nbytes + b[:64].nbytes + 300 * 200 * 4
        assert peak_temp_bytes(low.func, THREADS) <= used, low.schedule
        np.testing.assert_allclose(run(low, target, [a, b]),
                                   a[:, :64].astype(F64) @ b[:64].astype(F64), rtol=1e-4,
                                   atol=1e-3)


@jd.compute
def batched_matmul(A, B):
    (Z, M, K), N = A.shape, B.shape[2]
    k = jd.reduce_axis(K, name="k")
    return jd.tensor((Z, M, N), lambda z, i, j: jd.sum(A[z, i, k] * B[z, k, j], axis=k),
                     name="C")


def _guarded_tiles(stmt, in_unrolled=False):
    """IfThen statements inside an unrolled loop or around one (a register tile's rows
    guarded one by one)."""
    from jitdl.ir.nodes import For, IfThen
    from jitdl.ir.visit import walk_stmt
    out = []
    for n in walk_stmt(stmt):
        if isinstance(n, IfThen) and (in_unrolled or any(
                isinstance(x, For) and x.kind == ForKind.UNROLLED for x in walk_stmt(n))):
            out.append(n)
    return out


@pytest.mark.parametrize("shape", [(2, 128, 128, 64), (2, 256, 96, 64), (4, 56, 64, 64),
                                   (3, 100, 40, 64), (2, 197, 50, 64), (1, 56, 64, 64),
                                   (1, 197, 50, 64), (2, 13, 64, 256), (1, 25, 64, 512)])
def test_register_tiles_have_no_guarded_rows(shape, rng):
    """A tile's rows divide the row count where a divisor of more than half the register
    budget's rows exists; where none does, the split with a tail is not fused into the
    parallel loop (partition_loops then peels the tail): no row of an unrolled tile is
    guarded. (2 x 128 x 128 @ 2 x 128 x 64 with 12-row tiles fused into a parallel loop:
    twice the time, its accumulators in memory.)"""
    b, n, k, m = shape
    a, w = normal(rng, b, n, k), normal(rng, b, k, m)
    ref = np.einsum("zik,zkj->zij", a.astype(F64), w.astype(F64))
    for tname, target in TARGETS.items():
        for f, args, want in [(batched_matmul, [a, w], ref), (matmul, [a[0], w[0]], ref[0])]:
            low = lowered(f, args, target)
            assert not _guarded_tiles(low.func.body), (tname, shape, low.func)
            if tname in ("host", "sse"):
                np.testing.assert_allclose(run(low, target, args), want, rtol=1e-4,
                                           atol=1e-4 * np.sqrt(k))


def test_pack_budget_comes_from_the_target_caches():
    t = fixed_cpu()
    assert t.pack_block_bytes == max(t.l2_bytes, t.l3_bytes // 2)
    bigger = dataclasses.replace(t, l3_bytes=t.l3_bytes * 2)
    assert bigger.pack_block_bytes == 2 * t.pack_block_bytes


def test_battery_through_the_call_path(rng):
    for name, f, shapes, ref, fraction in BATTERY[::3]:
        args = [normal(rng, *s, dtype=F64) for s in shapes]
        out = f(*args)
        np.testing.assert_allclose(out, ref(*args), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------------------
# softmax rows of any length
# ---------------------------------------------------------------------------------------

def _softmax_targets():
    avx512 = fixed_cpu()
    out = dict(TARGETS)
    for l2 in (256 << 10, 1 << 20, 1280 << 10, 2 << 20):
        out[f"avx512 L2 {l2 >> 10}K"] = dataclasses.replace(avx512, l2_bytes=l2, l1_bytes=48 << 10)
    out["avx512 big local buffers"] = dataclasses.replace(avx512, local_buffer_bytes=1 << 20,
                                                          stack_buffer_bytes=1 << 16)
    return out


@pytest.mark.parametrize("dtype", [F32, F64])
def test_softmax_rows_of_any_length_on_any_target(dtype):
    """Reported: rows of 32768 elements or more raised a ScheduleError about compute_at
    from the automatic schedule on an AVX-512 machine (its L2 decided whether e's rows were
    computed in Y's row loop). Every target and row length must schedule at the full level,
    with temporaries of a few rows at most."""
    for tname, target in _softmax_targets().items():
        for m in (1000, 32767, 32768, 32769, 65537, 131073, 300000):
            x = np.zeros((3, m), dtype)
            for threads in (1, THREADS):
                low = lowered(softmax, [x], target, threads)
                assert low.auto_level == "full", (tname, m)
                assert low.schedule.stages["e"].attach == "at", (tname, m, low.schedule)
                rows = (threads + 1) * m * x.itemsize + 4096
                assert peak_temp_bytes(low.func, threads) <= rows, (tname, m)


@pytest.mark.parametrize("dtype", [F32, F64])
def test_long_softmax_rows_compute_correctly(dtype, rng):
    x = (rng.standard_normal((3, 200003)) * 4).astype(dtype)
    for tname in ("host", "avx512", "small"):
        target = TARGETS[tname]
        low = lowered(softmax, [x], target)
        np.testing.assert_allclose(run(low, target, [x]), np_softmax(x.astype(F64)),
                                   rtol=1e-4 if dtype == F32 else 1e-12, atol=1e-12)
    np.testing.assert_allclose(softmax(x), np_softmax(x.astype(F64)),
                               rtol=1e-4 if dtype == F32 else 1e-12, atol=1e-12)


@jd.compute
def softmax_last(X):
    e = jd.numpy.exp(X - jd.numpy.max(X, axis=-1, keepdims=True))
    return e / jd.numpy.sum(e, axis=-1, keepdims=True)


@jd.compute
def layer_norm_last(X, w, b):
    mu = jd.numpy.mean(X, axis=-1, keepdims=True)
    var = jd.numpy.mean(jd.numpy.square(X - mu), axis=-1, keepdims=True)
    return (X - mu) / jd.numpy.sqrt(var + 1e-5) * w + b


def np_softmax_last(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def np_layer_norm(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(axis=-1, keepdims=True) + 1e-5) * w + b


@pytest.mark.parametrize("shape", [(2, 3, 150), (1, 4096, 160), (3, 5, 7, 9), (4, 1, 333),
                                   (2, 2, 70001), (1, 1, 1), (8, 64, 64)])
def test_row_statistics_of_higher_rank_inputs_are_computed_per_row(shape, rng):
    """Softmax and layer_norm over the last axis of (batch, seq, features): the row loops
    are fused into one (parallel) loop and the statistics computed inside it, one row
    at a time, as for a matrix (a (1, 4096, 1024) softmax took 2.7x a (4096, 1024) one,
    its statistics in serial passes over the whole input), where rows are long (16
    vectors or more: short rows stay in separate passes, which were faster)."""
    x = normal(rng, *shape)
    w, b = normal(rng, shape[-1]), normal(rng, shape[-1])
    for tname, target in TARGETS.items():
        for f, args, ref in ((softmax_last, [x], np_softmax_last(x.astype(F64))),
                             (layer_norm_last, [x, w, b], np_layer_norm(x.astype(F64), w, b))):
            low = lowered(f, args, target)
            assert low.auto_level == "full", (tname, low.schedule)
            rows = 1
            for d in shape[:-1]:
                rows *= d
            stats = [st for st in low.schedule.stages.values()
                     if st.is_reduce and st.attach != "inline"]
            if rows > 1 and shape[-1] >= 16 * target.lanes(4):
                assert stats and all(st.attach == "at" for st in stats), low.schedule
                if rows >= 2 * THREADS and rows * shape[-1] >= target.parallel_min_work:
                    assert any(n.kind == ForKind.PARALLEL and n.extent.value == rows
                               for n in _loops(low.func.body)), low.func
            peak = peak_temp_bytes(low.func, THREADS)
            per_row = (THREADS + 1) * shape[-1] * 8 + 4096 if shape[-1] >= 16 * \
                target.lanes(4) else 2 * rows * 8 + (THREADS + 1) * shape[-1] * 8 + 4096
            assert peak <= per_row, (tname, peak, low.func)
            if tname in ("host", "sse"):
                np.testing.assert_allclose(run(low, target, args), ref, rtol=2e-5, atol=2e-5)


def _loops(s):
    from jitdl.ir.nodes import For
    from jitdl.ir.visit import walk_stmt
    return [n for n in walk_stmt(s) if isinstance(n, For)]


def test_row_statistics_of_dynamic_higher_rank_inputs(rng):
    """The same through the eager ops, whose kernels take any size (symbolic extents)."""
    for shape in [(2, 3, 50), (1, 257, 64), (3, 1, 5, 9)]:
        x = normal(rng, *shape)
        w, b = normal(rng, shape[-1]), normal(rng, shape[-1])
        np.testing.assert_allclose(jd.nn.softmax(x, dim=-1), np_softmax_last(x.astype(F64)),
                                   rtol=2e-5, atol=1e-7)
        np.testing.assert_allclose(jd.nn.layer_norm(x, shape[-1:], w, b),
                                   np_layer_norm(x.astype(F64), w, b), rtol=2e-4, atol=2e-4)


@jd.compute(dynamic=True)
def attention_dynamic(Q, K, V):
    s = jnp.matmul(Q, jnp.swapaxes(K, -1, -2)) * 0.125
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), V)


def test_batched_attention_with_symbolic_sizes_keeps_the_full_schedule(rng, caplog):
    """Rows fused for their statistics in a definition with symbolic sizes: the matmul
    is ordered by its current loops (it named the unfused ones, and the schedule fell
    back a level: found by review)."""
    for n, m in ((5, 7), (37, 64)):
        q, k, v = normal(rng, 2, n, 16), normal(rng, 2, m, 16), normal(rng, 2, m, 8)
        with caplog.at_level(logging.DEBUG, logger="jitdl.schedule"):
            got = attention_dynamic(q, k, v)
        assert not [r for r in caplog.records if "failed" in r.getMessage()]
        np.testing.assert_allclose(got, np_attention(q.astype(F64), k, v), rtol=1e-5,
                                   atol=1e-5)


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
    # (large enough that every level below "inline only" has a parallel loop)
    a, b = normal(rng, 80, 60, dtype=F64), normal(rng, 60, 100, dtype=F64)
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
    (nrm computed in C's row loop, which the register tile then split); now nrm stays
    whole (one number per row) and C is tiled, at the full level."""
    a, b = normal(rng, 100, 80, dtype=F64), normal(rng, 80, 120, dtype=F64)
    for target in TARGETS.values():
        low = lowered(normalised_matmul, [a, b], target)
        assert low.auto_level == "full"
        np.testing.assert_allclose(run(low, target, [a, b]),
                                   (a @ b) / (a * a).sum(1)[:, None], rtol=1e-12)


# -- softmax weights divided after the sum; chains of reductions stay tiled ----------------
jnp = jd.numpy


@jd.compute
def weighted_rows(S, V):
    m[i] = max(S[i, k] for k in range(S.shape[1]))
    E[i, k] = exp(S[i, k] - m[i])
    z[i] = sum(E[i, k] for k in range(S.shape[1]))
    C[i, j] = sum(E[i, k] / z[i] * V[k, j] for k in range(S.shape[1]))
    return C


@jd.compute
def attention_jnp(Q, K, V):
    s = jnp.matmul(Q, jnp.transpose(K, (0, 2, 1))) * 0.125
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), V)


@jd.compute
def attention_nn(Q, K, V):
    return jd.nn.scaled_dot_product_attention(Q, K, V, is_causal=True)


@jd.compute
def unshifted_weights(S, V):          # exp(S) / sum(exp(S)): no max taken, may overflow
    e = jnp.exp(S)
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), V)


@jd.compute
def column_weights(S, V):             # divided by a column sum: not constant along k
    e = jnp.exp(S - jnp.max(S, axis=-1, keepdims=True))
    return jnp.matmul(e / jnp.sum(e, axis=0, keepdims=True), V)


def np_attention(q, k, v, causal=False):
    s = q @ np.swapaxes(k, -1, -2) * (0.125 if not causal else 1 / np.sqrt(q.shape[-1]))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], bool)), s, -np.inf)
    e = np.exp(s - s.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True)) @ v


def _dividend(low):
    return [n for n in low.schedule.stages if n.endswith("_dividend")]


def _sums_divide(low):
    """Some accumulation (`X[i] = X[i] + ...`) of the loop IR divides."""
    for line in str(low.func).splitlines():
        lhs, eq, rhs = line.strip().partition(" = ")
        if eq and rhs.startswith(lhs + " + ") and " / " in rhs:
            return True
    return False


SOFTMAX_WEIGHTED = [
    ("index notation", weighted_rows, [(70, 300), (300, 40)],
     lambda s, v: np_softmax(s) @ v),
    ("jd.numpy", attention_jnp, [(3, 50, 16), (3, 90, 16), (3, 90, 24)], np_attention),
    ("nn causal", attention_nn, [(2, 45, 16), (2, 45, 16), (2, 45, 20)],
     lambda q, k, v: np_attention(q, k, v, causal=True)),
]


@pytest.mark.parametrize("case", SOFTMAX_WEIGHTED, ids=[c[0] for c in SOFTMAX_WEIGHTED])
@pytest.mark.parametrize("tname", list(TARGETS))
def test_softmax_weights_are_divided_once_per_output(case, tname, rng):
    """softmax(S) @ V sums e * V and divides each output by its row's sum once (the
    division not once per term, and no copy of the quotients), at the full level."""
    name, f, shapes, ref = case
    target = TARGETS[tname]
    args = [normal(rng, *sh) for sh in shapes]
    low = lowered(f, args, target)
    assert low.auto_level == "full" and _dividend(low), low.schedule
    assert not _sums_divide(low), low.func
    np.testing.assert_allclose(run(low, target, args), ref(*[a.astype(F64) for a in args]),
                               rtol=1e-5, atol=1e-5)


@jd.compute
def attention_2d(Q, K, V):
    s = jnp.matmul(Q, jnp.transpose(K)) * 0.25
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return jnp.matmul(e / jnp.sum(e, axis=-1, keepdims=True), V)


@pytest.mark.parametrize("f, shapes, dtype", [
    (attention_jnp, [(3, 96, 16), (3, 96, 16), (3, 96, 16)], F32),
    (attention_jnp, [(2, 45, 20), (2, 77, 20), (2, 77, 36)], F32),   # tails everywhere
    (attention_jnp, [(2, 64, 24), (2, 50, 24), (2, 50, 40)], F64),
    (attention_2d, [(130, 16), (70, 16), (70, 48)], F32),
    (attention_nn, [(2, 45, 16), (2, 45, 16), (2, 45, 20)], F32),
], ids=["batched", "tails", "float64", "2-d", "nn causal"])
def test_attention_runs_one_block_of_rows_at_a_time(f, shapes, dtype, rng):
    """softmax(Q @ K^T) @ V: the scores, their row max, the exponentials and the row sums
    are all computed at the output's loop over blocks of tile rows, the scores register
    tiled inside the block, so no temporary holds all the scores; results as NumPy's."""
    args = [normal(rng, *sh, dtype=dtype) for sh in shapes]
    q, k, v = [a.astype(F64) for a in args]
    if f is attention_2d:
        ref = np_softmax(q @ k.T * 0.25) @ v
    else:
        ref = np_attention(q, k, v, causal=f is attention_nn)
    scores = math.prod(args[0].shape[:-1]) * args[1].shape[-2]
    for tname in ("host", "avx512", "sse"):      # (sse: block buffers on the heap)
        target = TARGETS[tname]
        low = lowered(f, args, target)
        sched = low.schedule
        out = sched.outputs[0].name
        at_rows = {n for n, st in sched.stages.items()
                   if st.attach == "at" and st.attach_to[0] == out}
        tiled = [n for n in at_rows if sched.stages[n].is_reduce and any(
            a.kind == ForKind.UNROLLED for a in sched.stages[n].axes.values())]
        assert low.auto_level == "full" and len(at_rows) >= 5 and len(tiled) == 2, sched
        assert len({sched.stages[n].attach_to[1] for n in at_rows}) == 1, sched
        rows = [r.factor for r in sched.stages[out].relations
                if getattr(r, "factor", None) and r.parent != sched.outputs[0].op.axes[-1].name]
        for n in tiled:         # tiles within the accumulators (24 x 32 on AVX-512 spilled,
            st = sched.stages[n]            # and took 8 s to compile), operands packed
            width = [r.factor for r in st.relations if getattr(r, "factor", None)
                     and r.parent == st.tensor.op.axes[-1].name]
            assert width[0] * rows[0] <= target.max_accumulators(
                np.dtype(dtype).itemsize), (n, sched)
        assert any(n.endswith("_pack") for n in sched.stages), sched
        allocs = re.findall(r"alloc (\w+): \w+\[([\d, ]+)\]", str(low.func))
        assert allocs and all(math.prod(map(int, shape.split(","))) < scores
                              for name, shape in allocs if not name.endswith("_pack")), allocs
        got = run(low, target, args)
        assert got.dtype == dtype and np.isfinite(got).all()
        tol = 1e-5 if dtype == F32 else 1e-12
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol)


@pytest.mark.parametrize("f", [quotient_matmul, unshifted_weights, column_weights])
def test_other_quotients_keep_their_division_inside_the_sum(f, rng):
    """(P / s) @ V for any s, or exp(S) without its row max, may overflow summed without
    the division where NumPy's does not: the division stays in the sum."""
    args = [normal(rng, 40, 60), normal(rng, 40) + 4.0, normal(rng, 60, 30)] \
        if f is quotient_matmul else [normal(rng, 40, 60), normal(rng, 60, 30)]
    low = lowered(f, args, TARGETS["host"])
    assert not _dividend(low), low.schedule
    with pytest.raises(ScheduleError, match="divide_after: .*softmax"):
        s = Schedule(f._trace(f._specs(f._args(tuple(args), {}))))
        s.divide_after(s.outputs[0].name)


def test_divide_after_replays_and_keeps_special_values(rng):
    """The step round-trips through JSON, replays on a fresh trace, and rows that are all
    -inf (fully masked) give NaN as NumPy's softmax does; +inf and NaN scores too."""
    s_arg, v = normal(rng, 12, 30, dtype=F64), normal(rng, 30, 8, dtype=F64)
    s_arg[3] = -np.inf
    s_arg[5, 7] = np.inf
    s_arg[8, 2] = np.nan
    s_arg[9, ::2] = -np.inf           # masked half a row: exact zeros in the weights
    f = jd.compute(weighted_rows.pyfunc)
    graph = f._trace(f._specs(f._args((s_arg, v), {})))
    sched = Schedule(graph)
    new = sched.divide_after(sched["C"])
    assert new.name == "C_dividend"
    again = Schedule(f._trace(f._specs(f._args((s_arg, v), {})))).replay(sched.steps)
    assert again.steps == sched.steps and "C_dividend" in again.stages
    with pytest.raises(ScheduleError, match="already divided"):
        sched.divide_after(sched["C"])
    with np.errstate(invalid="ignore"):
        want = np_softmax(s_arg) @ v
    got = f(s_arg, v)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(got[ok], want[ok], rtol=1e-12, atol=1e-12)
    assert np.isnan(want[3]).all() and np.isnan(want[5]).all() and not np.isnan(want[9]).any()


@jd.compute
def two_matmuls(Q, K, V):
    return jnp.matmul(jnp.matmul(Q, jnp.transpose(K, (0, 2, 1))) * 0.125, V)


@jd.compute
def exp_then_matmul(S, V):
    return jnp.matmul(jnp.exp(S - 1.0), V)


@pytest.mark.parametrize("f, shapes, ref", [
    (two_matmuls, [(4, 96, 32), (4, 96, 32), (4, 96, 32)],
     lambda q, k, v: (q @ np.swapaxes(k, -1, -2) * 0.125) @ v),
    (exp_then_matmul, [(4, 96, 300), (4, 300, 32)], lambda s, v: np.exp(s - 1.0) @ v),
])
def test_an_intermediate_feeding_a_register_tile_is_stored_whole(f, shapes, ref, rng):
    """A deep reduction (Q @ K^T) or a transcendental operand reread by a tiled reduction
    (exp(S) @ V) is computed whole at the root, larger than the definition's inputs and
    outputs though it is: computed one slice at a time inside its consumer it untiled
    both (the chain of matmuls ran 10x slower); the consumer is register tiled."""
    for tname, target in TARGETS.items():
        args = [normal(rng, *sh) for sh in shapes]
        low = lowered(f, args, target)
        out = low.schedule.outputs[0].name
        inter = [n for n, st in low.schedule.stages.items()
                 if n != out and st.attach == "root" and not n.endswith("_pack")]
        assert inter and low.schedule.stages[out].attach == "root", low.schedule
        assert any(a.kind == ForKind.UNROLLED for a in low.schedule.stages[out].axes.values()), \
            low.schedule
        np.testing.assert_allclose(run(low, target, args), ref(*[a.astype(F64) for a in args]),
                                   rtol=1e-4, atol=1e-4 * np.sqrt(shapes[0][-1]))


@jd.compute
def batched_matmul_relu(A, B):
    return jnp.maximum(jnp.matmul(A, B) * 0.5, 0.0)


def test_a_fused_batch_loop_computes_each_block_of_its_producer_once(rng):
    """(3, 50, 90) @ (3, 90, 24) then relu, on 2 threads: the epilogue's batch and row
    block loops are fused into one parallel loop. The matmul's block at it was the
    whole batch (the row index `f % 9 * 6 + i` was not seen as one block of 6 rows),
    computed by 9 iterations at once into the same memory: a race that gave wrong
    results in about 40% of calls. Now each iteration computes its own 6 rows."""
    a, b = normal(rng, 3, 50, 90), normal(rng, 3, 90, 24)
    ref = np.maximum(a.astype(F64) @ b * 0.5, 0)
    for tname, target in TARGETS.items():
        low = lowered(batched_matmul_relu, [a, b], target)
        assert "range(50)" not in str(low.func), low.func
        if tname == "host":
            art = pipeline.build(low, target, pipeline.Options(low.func.name, False, THREADS))
            kern = Kernel(art.signature, engine.Loaded(art.obj, art.signature.symbol))
            for _ in range(40):
                np.testing.assert_allclose(kern((a, b)), ref, rtol=1e-4, atol=1e-4)


@jd.compute
def sum_of_squares(X):
    return jnp.sum(X * X)


@jd.compute
def largest(X):
    return jnp.max(X)


@pytest.mark.parametrize("shape", [(700, 900), (3, 5, 40001), (300001,)])
def test_a_full_reduction_runs_on_every_core(shape, rng):
    """A reduction to one value of many elements: the threads reduce contiguous blocks
    (rfactor, blocked) that a short reduction then combines; NaN still wins in max."""
    x = normal(rng, *shape)
    for tname, target in TARGETS.items():
        low = lowered(sum_of_squares, [x], target)
        kinds = {a.kind for st in low.schedule.stages.values() for a in st.axes.values()}
        assert ForKind.PARALLEL in kinds and any(n.endswith("_rf")
                                                 for n in low.schedule.stages), low.schedule
        if tname == "host":
            np.testing.assert_allclose(run(low, target, [x]), (x.astype(F64) ** 2).sum(),
                                       rtol=1e-6)
    x.flat[x.size * 3 // 4] = np.nan
    assert np.isnan(largest(x))
    x.flat[x.size * 3 // 4] = 0.5
    assert largest(x) == x.max()


@jd.compute
def column_sums(X):
    return jnp.sum(X, axis=0)


@jd.compute
def row_times_matrix(a, B):
    return jnp.matmul(a, B)


@pytest.mark.parametrize("shape", [(640, 1003), (1000, 24), (664, 37), (2001, 300),
                                   (256, 130)])
def test_column_reductions_split_by_rows_read_several_rows_per_pass(shape, rng):
    """A column reduction over many rows split among the threads (each part streams its
    block of rows into a row of partial results) reads _STREAM_K rows per pass over that
    row where the parts are equal and the rows are long (16 vectors or more), and a tail
    of rows after; every column right, on every target, for sums and for the (1, K) @
    (K, N) product."""
    k, n = shape
    x = normal(rng, k, n, dtype=F64)
    a = normal(rng, 1, k, dtype=F64)
    for tname, target in TARGETS.items():
        for f, args, want in ((column_sums, [x], x.sum(axis=0)),
                              (row_times_matrix, [a, x], a @ x)):
            low = lowered(f, args, target)
            rf = [st for name, st in low.schedule.stages.items() if name.endswith("_rf")]
            assert rf, low.schedule
            unrolled = any(ax.kind == ForKind.UNROLLED for ax in rf[0].axes.values())
            long_rows = n >= 16 * target.lanes(8)
            assert unrolled == (k % 4 == 0 and long_rows), (tname, low.schedule)
            np.testing.assert_allclose(run(low, target, args), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("shape", [(2048, 2048), (640, 1003), (1000, 24), (664, 37),
                                   (2001, 300), (256, 130)])
def test_column_reductions_on_one_thread_read_several_rows_per_pass(shape, rng):
    """On one thread a column reduction streams its rows into one row of partial results;
    it reads _STREAM_K rows per pass over that row (each vector of partial results loaded
    and stored once for them) where the rows divide into such passes and are long (16
    vectors or more): (2048,) @ (2048, 2048) float64 on one Zen 4 core took 3.1 ms
    loading and storing every partial result per row, NumPy 1.8; now 1.8. Every column
    right, on every target, for sums and for the (1, K) @ (K, N) product."""
    k, n = shape
    x = normal(rng, k, n, dtype=F64)
    a = normal(rng, 1, k, dtype=F64)
    for tname, target in TARGETS.items():
        for f, args, want in ((column_sums, [x], x.sum(axis=0)),
                              (row_times_matrix, [a, x], a @ x)):
            low = lowered(f, args, target, threads=1)
            st = next(st for st in low.schedule.stages.values() if st.is_reduce)
            unrolled = any(ax.kind == ForKind.UNROLLED for ax in st.axes.values())
            long_rows = n >= 16 * target.lanes(8)
            assert unrolled == (k % 8 == 0 and long_rows), (tname, low.schedule)
            np.testing.assert_allclose(run(low, target, args, threads=1), want,
                                       rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n", [1, 7, 4099, 32768, 32771, 100003, 1_000_003])
def test_full_reductions_of_dynamic_arrays_at_any_size(n, rng):
    """jd.numpy's full reductions (one kernel for every size: the parts' bounds are
    computed at the call) against NumPy, on sizes that do not divide among the parts."""
    x = normal(rng, n)
    b = rng.integers(-3, 4, n)
    np.testing.assert_allclose(jnp.sum(x), x.astype(F64).sum(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(jnp.mean(x), x.astype(F64).mean(), rtol=1e-6, atol=1e-6)
    p = 1 + x * np.float32(1e-3)
    np.testing.assert_allclose(jnp.prod(p), p.astype(F64).prod(), rtol=1e-5)
    assert jnp.max(x) == x.max() and jnp.min(x) == x.min()
    assert jnp.sum(b) == b.sum() and jnp.any(b > 2) == (b > 2).any() \
        and jnp.all(b > -3) == (b > -3).all()
    m = normal(rng, 3, n)
    np.testing.assert_allclose(jnp.sum(m), m.astype(F64).sum(), rtol=1e-6, atol=1e-6)


@jd.compute
def shifted_by_another_max(S, Y, V):
    m[i] = max(Y[i, k] for k in range(Y.shape[1]))
    E[i, k] = exp(S[i, k] - m[i])
    z[i] = sum(E[i, k] for k in range(S.shape[1]))
    C[i, j] = sum(E[i, k] / z[i] * V[k, j] for k in range(S.shape[1]))
    return C


def test_weights_shifted_by_another_max_keep_their_division(rng):
    """exp(S - max(Y)) can exceed 1 (the review's case: S near 80, Y zero, V in the
    hundreds gave inf summed undivided, NumPy 149): only the max of the same row counts."""
    s_arg = (80 + rng.uniform(0, 1, (16, 256))).astype(F32)
    y = np.zeros((16, 8), F32)
    v = rng.uniform(100, 200, (256, 16)).astype(F32)
    low = lowered(shifted_by_another_max, [s_arg, y, v], TARGETS["host"])
    assert not _dividend(low), low.schedule
    e = np.exp(s_arg.astype(F64))
    want = (e / e.sum(1, keepdims=True)) @ v
    np.testing.assert_allclose(shifted_by_another_max(s_arg, y, v), want, rtol=1e-5)


@jd.compute
def skinny_chain(A, B, C):
    return jnp.matmul(jnp.matmul(A, B), C)


@jd.compute
def outer_exp_matmul(a, b, V):
    T[i, k] = exp(a[i] * b[k])
    C[i, j] = sum(T[i, k] * V[k, j] for k in range(b.shape[0]))
    return C


def test_intermediates_growing_faster_than_the_inputs_stay_in_slices(rng):
    """The review's cases: (A @ B) @ C with A @ B 4 deep and C 4 wide, and exp(a b^T) @ V
    of more than _WHOLE_MAX bytes, keep being computed a slice at a time (whole, they
    took n^2 bytes: 4.3 GB for n = 32768)."""
    args = [normal(rng, 2048, 4), normal(rng, 4, 2048), normal(rng, 2048, 4)]
    low = lowered(skinny_chain, args, TARGETS["host"])
    assert peak_temp_bytes(low.func, THREADS) <= 0.2 * io_bytes(args, np.empty((2048, 4), F32))
    np.testing.assert_allclose(run(low, TARGETS["host"], args),
                               (args[0].astype(F64) @ args[1]) @ args[2], rtol=1e-4, atol=1e-3)
    n = 9000                                   # T: 324 MB, above the 256 MiB bound
    big = [np.ones(n, F32), np.ones(n, F32), np.ones((n, 32), F32)]
    low = lowered(outer_exp_matmul, big, TARGETS["host"])       # (lowered, not run)
    assert peak_temp_bytes(low.func, THREADS) < 64 << 20, low.func


@pytest.mark.parametrize("shape", [(701, 900), (1, 200003), (3, 5, 40001)])
def test_every_part_of_a_full_reduction_runs_in_parallel(shape, rng):
    """The parts split the outermost axis that gives each part some work ((1, N): N),
    and a size that does not divide among them is handled inside each part: split, the
    last part ran alone after the parallel ones (the review: 1.5x slower)."""
    x = normal(rng, *shape)
    low = lowered(sum_of_squares, [x], TARGETS["host"])
    text = str(low.func)
    head = [line.strip() for line in text.splitlines() if "_f in range(" in line]
    assert len(head) == 1 and head[0].startswith("parallel"), text
    np.testing.assert_allclose(run(low, TARGETS["host"], [x]), (x.astype(F64) ** 2).sum(),
                               rtol=1e-6)


@jd.compute
def doubling_chain(x):
    y = x
    for _ in range(14):
        y = jnp.sin(y * 1.1) + jnp.cos(y + 0.5)
    return y


def test_a_chain_that_reads_each_step_twice_is_not_inlined_into_a_tree(rng):
    """Each step reads the previous one twice: inlined all the way, the expression would
    have 2^14 sines (12 steps never finished compiling). Stages whose expansion passes a
    bound are stored instead, and the result is NumPy's."""
    from jitdl.ir.nodes import Call, Intrin
    from jitdl.ir.visit import stmt_exprs, walk_expr, walk_stmt
    x = normal(rng, 1000)
    for tname in ("host", "sse"):
        low = lowered(doubling_chain, [x], TARGETS[tname])
        sines = sum(isinstance(n, Call) and n.fn == Intrin.SIN
                    for st in walk_stmt(low.func.body) for e in stmt_exprs(st)
                    for n in walk_expr(e))
        assert 14 <= sines <= 1024, sines
        ref = x.astype(F64)
        for _ in range(14):
            ref = np.sin(ref * 1.1) + np.cos(ref + 0.5)
        np.testing.assert_allclose(run(low, TARGETS[tname], [x]), ref, rtol=1e-4, atol=1e-5)


@jd.compute
def long_chain(x):
    y = x
    for _ in range(250):
        y = jnp.sin(y) * 0.5 + 0.1
    return y


def _depth(e):
    from jitdl.ir.visit import expr_children
    return 1 + max((_depth(c) for c in expr_children(e)), default=0)


@pytest.mark.parametrize("shape", [(999,), (7, 130)])
def test_a_long_chain_read_once_is_stored_in_pieces(shape, rng):
    """250 steps each read once: inlined whole, the expression nests 750 levels deep and
    lowering ran into Python's recursion limit (300 steps; 100 steps took a minute, the
    readers of each stage found again through the whole chain). Stages past a depth bound
    (240) are stored; every expression of the loop IR stays within it and the result is
    NumPy's, on the CPU and as CUDA source."""
    from jitdl.ir.visit import stmt_exprs, walk_stmt
    x = rng.uniform(-2, 2, shape)
    ref = x
    for _ in range(250):
        ref = np.sin(ref) * 0.5 + 0.1
    low = lowered(long_chain, [x], TARGETS["host"])
    deepest = max(_depth(e) for st in walk_stmt(low.func.body) for e in stmt_exprs(st))
    assert deepest <= 240 + 16, deepest
    np.testing.assert_allclose(run(low, TARGETS["host"], [x]), ref, rtol=1e-12, atol=1e-14)
    assert long_chain.cuda_source(x).count("sin(") == 250


def test_every_pack_option_applies_with_one_row_tiles(rng, caplog):
    """The pack knob offers the same options whatever tile_i is; with one-row tiles
    (tile_i=1) a pack of the broadcast operand is dropped, not an error that sent the
    schedule down two levels (found by review)."""
    args = [normal(rng, 2, 29, 16), normal(rng, 2, 37, 16), normal(rng, 2, 37, 24)]
    space = attention_jnp.config_space(*args)
    packs = space.knobs["matmul.pack"].options
    assert len(packs) == 4
    ref = np_attention(*[a.astype(F64) for a in args])
    for pack in packs:
        g = attention_jnp.with_config(**{"matmul.tile_i": 1, "matmul.pack": pack})
        with caplog.at_level(logging.DEBUG, logger="jitdl.schedule"):
            np.testing.assert_allclose(g(*args), ref, rtol=1e-5, atol=1e-5)
        assert not [r for r in caplog.records if "failed" in r.getMessage()], pack
