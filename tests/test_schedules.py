"""Schedules change how loops run, never what they compute.

Each test builds a fresh compute function (a schedule is registered on a function), gives
it a schedule, and checks the results against NumPy on odd sizes (37, 29, 41 and primes)
so that non-dividing split factors leave tails. Where a primitive has a visible trace in
the loop IR (`f.lower`), that is checked too, so a silently ignored step fails.
"""
import numpy as np
import pytest

import jitdl as jd
from _check import check

F32, F64 = np.float32, np.float64


def normal(rng, shape, dtype=F64):
    return rng.standard_normal(shape).astype(dtype)


def make_matmul():
    @jd.compute
    def matmul(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")
    return matmul


def make_elementwise():
    @jd.compute
    def ew(X, b):
        return jd.tensor(X.shape, lambda i, j: jd.exp(X[i, j] * 0.5) + b[j], name="Y")
    return ew


def ew_ref(x, b):
    return np.exp(x * 0.5) + b[None, :]


def make_two_stage():
    @jd.compute
    def two_stage(X):
        n, m = X.shape
        tmp_stage = jd.tensor((n, m), lambda i, j: X[i, j] * X[i, j] + 1.0, name="tmp_stage")
        return jd.tensor((n, m), lambda i, j: jd.sqrt(tmp_stage[i, j]) - X[i, j], name="Y")
    return two_stage


def two_stage_ref(x):
    return np.sqrt(x * x + 1.0) - x


def make_softmax():
    @jd.compute
    def softmax(X):
        n, m = X.shape
        mx[i] = max(X[i, k] for k in range(m))
        e[i, j] = exp(X[i, j] - mx[i])
        s[i] = sum(e[i, k] for k in range(m))
        Y[i, j] = e[i, j] / s[i]
        return Y
    return softmax


def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


MM_TOL = (1e-12, 1e-12)


def mm_inputs(rng, M=37, K=29, N=41, dtype=F64):
    return normal(rng, (M, K), dtype), normal(rng, (K, N), dtype)


def lowered(f, *args):
    return str(f.lower(*args))


# ---------------------------------------------------------------------------------------
# the north-star matmul schedule with knobs
# ---------------------------------------------------------------------------------------

def test_north_star_matmul_schedule(rng):
    f = make_matmul()
    factors = []

    @jd.schedule(f, target="cpu")
    def matmul_cpu(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        ti, tj = cfg.split("ti", i), cfg.split("tj", j)
        factors.append((ti, tj))
        io, ii = s.split(i, ti)
        jo, ji = s.split(j, tj)
        s.reorder(io, jo, k, ii, ji)
        s.vectorize(ji)
        s.parallel(io)

    for M, K, N in [(64, 48, 40), (37, 29, 41), (1, 1, 1), (2, 131, 3)]:
        a, b = mm_inputs(rng, M, K, N, F32)
        check(f, (a, b), a.astype(F64) @ b.astype(F64), F32, 1e-4, 1e-4)
        ti, tj = factors[-1]
        assert isinstance(ti, int) and isinstance(tj, int)
        assert 1 <= ti <= max(M, 1) and 1 <= tj <= max(N, 1)
    assert factors, "the schedule function never ran"
    text = lowered(f, *mm_inputs(rng, 64, 48, 40, F32))
    assert "parallel" in text and "vectoriz" in text, text


@pytest.mark.parametrize("ti,tj", [(1, 1), (2, 3), (7, 8), (8, 16), (37, 41), (64, 64)])
def test_matmul_tiling_factors(rng, ti, tj):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        io, ii = s.split(i, ti)
        jo, ji = s.split(j, tj)
        s.reorder(io, jo, k, ii, ji)
        s.vectorize(ji)
        s.parallel(io)

    a, b = mm_inputs(rng)
    check(f, (a, b), a @ b, F64, *MM_TOL)


# ---------------------------------------------------------------------------------------
# each primitive
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("factor", [1, 4, 8, 37, 50])
def test_split_factor(rng, factor):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        s.split(i, factor)
        s.split(j, factor)

    x, b = normal(rng, (37, 23)), normal(rng, 23)
    check(f, (x, b), ew_ref(x, b), F64)
    if factor in (4, 8):
        assert f"range({factor})" in lowered(f, x, b)


@pytest.mark.parametrize("nparts", [1, 3, 4, 37])
def test_split_nparts(rng, nparts):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        io, ii = s.split(i, nparts=nparts)
        s.parallel(io)

    x, b = normal(rng, (37, 5)), normal(rng, 5)
    check(f, (x, b), ew_ref(x, b), F64)
    if nparts == 4:   # 37 in 4 parts of ceil(37/4) = 10: the 4 parts run in parallel,
        text = lowered(f, x, b)   # each its first 7 rows unguarded, then 3 guarded (split
        # at the parallel loop, the last part of 7 rows would run alone after the others)
        assert "parallel i_o in range(4)" in text and "range(7)" in text \
            and "range(7, 7 + 3)" in text, text


def test_split_of_reduce_axis(rng):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        ko, ki = s.split(k, 5)        # 29 = 5*5 + 4
        s.reorder(ko, i, j, ki)
        s.unroll(ki)

    a, b = mm_inputs(rng)
    check(f, (a, b), a @ b, F64, *MM_TOL)


@pytest.mark.parametrize("annotate", ["none", "parallel", "vectorize"])
def test_fuse(rng, annotate):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        fused = s.fuse(i, j)
        if annotate == "parallel":
            s.parallel(fused)
        elif annotate == "vectorize":
            s.vectorize(fused)

    x, b = normal(rng, (37, 41)), normal(rng, 41)
    check(f, (x, b), ew_ref(x, b), F64)
    assert f"range({37 * 41})" in lowered(f, x, b)


def test_fuse_then_split(rng):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        fo, fi = s.split(s.fuse(i, j), 16)
        s.parallel(fo)
        s.vectorize(fi)

    x, b = normal(rng, (7, 13)), normal(rng, 13)
    check(f, (x, b), ew_ref(x, b), F64)


def test_reorder_elementwise(rng):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        io, ii = s.split(i, 8)
        jo, ji = s.split(j, 3)
        s.reorder(ji, io, jo, ii)

    x, b = normal(rng, (37, 11)), normal(rng, 11)
    check(f, (x, b), ew_ref(x, b), F64)


def test_reorder_subset(rng):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        io, ii = s.split(i, 4)
        s.reorder(ii, io)             # only two of the three loops: j stays innermost

    x, b = normal(rng, (13, 6)), normal(rng, 6)
    check(f, (x, b), ew_ref(x, b), F64)


@pytest.mark.parametrize("order", ["kij", "ikj", "jki"])
def test_reorder_reduction_loops(rng, order):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        loops = {"i": i, "j": j, "k": k}
        s.reorder(*(loops[c] for c in order))

    a, b = mm_inputs(rng, 13, 7, 11)
    check(f, (a, b), a @ b, F64, *MM_TOL)


@pytest.mark.parametrize("dtype", [F32, F64, np.int32, np.uint8])
@pytest.mark.parametrize("factor", [4, 7, 16])
def test_vectorize_inner(rng, dtype, factor):
    @jd.compute
    def scale(X, Z):
        n, m = X.shape
        return jd.tensor((n, m), lambda i, j: X[i, j] * Z[i, j] + X[i, j], name="Y")

    @jd.schedule(scale, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        jo, ji = s.split(j, factor)
        s.vectorize(ji)

    if np.dtype(dtype).kind == "f":
        x, z = normal(rng, (5, 37), dtype), normal(rng, (5, 37), dtype)
        expected = x.astype(F64) * z + x
    else:
        x = rng.integers(0, 200, (5, 37)).astype(dtype)
        z = rng.integers(0, 200, (5, 37)).astype(dtype)
        expected = x * z + x          # wraps for uint8 like NumPy
    check(scale, (x, z), expected, dtype)
    assert "vectoriz" in lowered(scale, x, z)


def test_vectorize_whole_row(rng):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        s.vectorize(j)

    x, b = normal(rng, (3, 67)), normal(rng, 67)
    check(f, (x, b), ew_ref(x, b), F64)


def test_vectorize_reduction_stage_data_axis(rng):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        jo, ji = s.split(j, 8)
        s.reorder(i, jo, k, ji)
        s.vectorize(ji)

    a, b = mm_inputs(rng)
    check(f, (a, b), a @ b, F64, *MM_TOL)


@pytest.mark.parametrize("which", ["outer", "inner"])
def test_parallel(rng, which):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        s.parallel(i if which == "outer" else j)

    a, b = mm_inputs(rng)
    check(f, (a, b), a @ b, F64, *MM_TOL)
    assert "parallel" in lowered(f, a, b)


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_unroll(rng, factor):
    f = make_elementwise()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        jo, ji = s.split(j, factor)
        s.unroll(ji)
        s.unroll(i)

    x, b = normal(rng, (5, 23)), normal(rng, 23)
    check(f, (x, b), ew_ref(x, b), F64)


def test_compute_inline(rng):
    x = normal(rng, (9, 14))
    g = make_two_stage()

    @jd.schedule(g, target="cpu")
    def sched(s, cfg):
        s.compute_inline(s["tmp_stage"])

    check(g, (x,), two_stage_ref(x), F64)
    assert "tmp_stage" not in lowered(g, x)


def test_compute_root(rng):
    f = make_two_stage()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        s.compute_root(s["tmp_stage"])
        i, j = s["Y"].axis
        s.parallel(i)
        i2, j2 = s["tmp_stage"].axis
        jo, ji = s.split(j2, 4)
        s.vectorize(ji)

    x = normal(rng, (9, 14))
    check(f, (x,), two_stage_ref(x), F64)
    assert "tmp_stage" in lowered(f, x)


def test_compute_at(rng):
    f = make_two_stage()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        s.compute_at(s["tmp_stage"], s["Y"], i)

    x = normal(rng, (9, 14))
    check(f, (x,), two_stage_ref(x), F64)


def test_softmax_multi_stage_schedule(rng):
    f = make_softmax()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        s.compute_inline(s["e"])
        i, j = s["Y"].axis
        jo, ji = s.split(j, 8)
        s.vectorize(ji)
        s.parallel(i)
        (i2,) = s["mx"].axis
        s.parallel(i2)

    for shape in [(5, 37), (1, 1), (16, 64)]:
        x = normal(rng, shape, F32)
        check(f, (x,), softmax_ref(x.astype(F64)), F32, 2e-5, 1e-7)


def test_stencil_schedule(rng):
    @jd.compute
    def blur(X):
        Y[i, j] = (X[i, j] + X[i + 1, j] + X[i + 2, j] + X[i, j + 2] + X[i + 2, j + 2]) / 5.0
        return Y

    @jd.schedule(blur, target="cpu")
    def sched(s, cfg):
        i, j = s["Y"].axis
        io, ii = s.split(i, 4)
        jo, ji = s.split(j, 8)
        s.reorder(io, jo, ii, ji)
        s.vectorize(ji)
        s.parallel(io)

    x = normal(rng, (31, 43))
    expected = (x[:-2, :-2] + x[1:-1, :-2] + x[2:, :-2] + x[:-2, 2:] + x[2:, 2:]) / 5.0
    check(blur, (x,), expected, F64)


def test_masked_reduction_schedule(rng):
    @jd.compute
    def pos_rowsum(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k, where=X[i, k] > 0.0),
                         name="S")

    @jd.schedule(pos_rowsum, target="cpu")
    def sched(s, cfg):
        (i,) = s["S"].axis
        (k,) = s["S"].reduce_axis
        ko, ki = s.split(k, 6)
        s.unroll(ki)
        s.parallel(i)

    x = normal(rng, (11, 37))
    check(pos_rowsum, (x,), np.where(x > 0, x, 0).sum(axis=1), F64, 1e-12, 1e-13)


def test_schedule_reruns_per_shape(rng):
    f = make_matmul()
    extents = []

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        i, j = s["C"].axis
        extents.append(cfg.split("ti", i))
        io, ii = s.split(i, 4)
        s.parallel(io)

    for M in (3, 17, 40):
        a, b = mm_inputs(rng, M, 5, 6)
        check(f, (a, b), a @ b, F64, *MM_TOL)
    assert len(extents) >= 3


# ---------------------------------------------------------------------------------------
# illegal schedules
# ---------------------------------------------------------------------------------------

def expect_schedule_error(f, sched_body, args):
    with pytest.raises(jd.ScheduleError):
        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            sched_body(s)
        f(*args)


def test_vectorize_reduce_axis_is_illegal(rng):
    def body(s):
        (k,) = s["C"].reduce_axis
        s.vectorize(k)
    expect_schedule_error(make_matmul(), body, mm_inputs(rng, 4, 8, 4))


def test_parallel_reduce_axis_is_illegal(rng):
    def body(s):
        (k,) = s["C"].reduce_axis
        s.parallel(k)
    expect_schedule_error(make_matmul(), body, mm_inputs(rng, 4, 8, 4))


def test_parallel_split_reduce_axis_is_illegal(rng):
    def body(s):
        (k,) = s["C"].reduce_axis
        ko, ki = s.split(k, 2)
        s.parallel(ko)
    expect_schedule_error(make_matmul(), body, mm_inputs(rng, 4, 8, 4))


@pytest.mark.parametrize("factor", [0, -2])
def test_nonpositive_split_factor_is_illegal(rng, factor):
    def body(s):
        i, j = s["C"].axis
        s.split(i, factor)
    expect_schedule_error(make_matmul(), body, mm_inputs(rng, 4, 8, 4))


def test_zero_nparts_is_illegal(rng):
    def body(s):
        i, j = s["C"].axis
        s.split(i, nparts=0)
    expect_schedule_error(make_matmul(), body, mm_inputs(rng, 4, 8, 4))


def test_reorder_across_stages_is_illegal(rng):
    def body(s):
        i, j = s["Y"].axis
        ti, tj = s["tmp_stage"].axis
        s.reorder(j, ti)
    expect_schedule_error(make_two_stage(), body, (normal(rng, (4, 5)),))


def test_fuse_across_stages_is_illegal(rng):
    def body(s):
        i, j = s["Y"].axis
        ti, tj = s["tmp_stage"].axis
        s.fuse(i, tj)
    expect_schedule_error(make_two_stage(), body, (normal(rng, (4, 5)),))


def test_split_consumed_loop_is_illegal(rng):
    def body(s):
        i, j = s["C"].axis
        s.split(i, 2)
        s.split(i, 2)         # i no longer exists as a leaf loop
    expect_schedule_error(make_matmul(), body, mm_inputs(rng, 4, 8, 4))


def test_unknown_stage_name(rng):
    f = make_matmul()
    with pytest.raises((jd.ScheduleError, KeyError)) as ei:
        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            s["nope"]
        f(*mm_inputs(rng, 2, 2, 2))
    assert "nope" in str(ei.value)
