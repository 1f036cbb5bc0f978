"""pack, rfactor, compute_at, knobs, replay and partitioned tails, against NumPy."""
import json
import re

import numpy as np
import pytest

import jitdl as jd
from _check import check
from test_schedules import make_matmul, make_softmax, softmax_ref
from jitdl.schedule.schedule import Schedule

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def make_rowreduce(op):
    @jd.compute
    def red(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        return jd.tensor((n,), lambda i: op(X[i, k], axis=k), name="R")
    return red


@pytest.mark.parametrize("nparts, block, loops", [
    (4, 8, ["for i_o in range(4):", "for i_i in range(2):"]),
    (16, 8, ["for i_o in range(8):"]), (3, 8, None), (4, 5, None)])
def test_split_nparts_of_a_stage_computed_at_a_loop_parts_its_block(rng, nparts, block,
                                                                     loops):
    """split(B.i, nparts=4) of a stage computed at C's loop over blocks of 8 rows made
    its factor from the whole axis (64 / 4 = 16): one part of 16, guarded, in each block
    instead of TVM's 4 parts of 2 (TVM's GPU matmul splits its shared copies so, and
    got 6 + 2 columns of an 8-column block). The factor is now ceil(block / nparts)
    (parts of 1 where nparts passes the block; blocks it does not divide, a tail)."""
    f = make_chain()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C, B = s["C"], s["B"]
        io, ii = s.split(C.axis[0], block)
        s.compute_inline(s["A"])
        s.compute_at(B, C, io)
        s.split(B.axis[0], nparts=nparts)
    x = rng.standard_normal((64, 7))
    check(f, (x,), (x * 2.0 + 1.0) ** 2, F64, 1e-12)
    text = str(f.lower(x))
    assert "alloc B" in text and all(ln in text[text.index("alloc B"):]
                                     for ln in loops or ()), text


@pytest.mark.parametrize("shape", [(0, 7), (7, 0), (0, 0)])
@pytest.mark.parametrize("attached", [False, True])
def test_split_nparts_of_an_empty_axis(shape, attached):
    """split(nparts=4) of an axis of extent 0 (an empty array's) took the factor
    ceil(0 / 4) = 0: "split: 'factor' must be a positive int, got 0" for a schedule
    that gave no factor, and, of a stage computed at a loop, a ZeroDivisionError in
    lowering (its block's factor 0). Parts of 1, none run: an empty result."""
    f = make_chain()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C, B = s["C"], s["B"]
        io, _ = s.split(C.axis[0], 8)
        s.compute_inline(s["A"])
        if attached:
            s.compute_at(B, C, io)
        s.split(B.axis[0], nparts=4)
        s.split(B.axis[1], nparts=3)
    got = f(np.ones(shape))
    assert got.shape == shape and got.dtype == F64


def test_compute_inline_of_a_reduction_into_its_cast(rng):
    """jd.numpy.sum of float32 accumulates in float64 (stage T0) and casts (the output):
    compute_inline(T0) was refused ("a reduction and cannot be inlined"), so the cast
    stayed a pass of its own. The reader that only casts becomes the reduction, its
    accumulator stored cast; also split by rfactor (the parts stay float64). A reader
    that does more than cast, or a reduction accumulated in the output's memory, is
    refused."""
    x = rng.standard_normal((50, 37)).astype(F32)
    want = x.astype(np.float64).sum(axis=0)
    for parts in (None, 4):
        f = jd.compute(lambda X: jd.numpy.sum(X, axis=0))

        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            t, y = list(s.stages)
            s.compute_inline(s[t])
            assert list(s.stages) == [y] and len(s[y].reduce_axis) == 1
            if parts:
                s.rfactor(s[y], s[y].reduce_axis[0], parts)
        got = check(f, (x,), want, F32, 1e-6)
        np.testing.assert_array_equal(got, want.astype(F32))
        text = str(f.lower(x))
        assert "T0" not in text and "= float32(<lambda>_acc[0])" in text, text
        assert ("<lambda>_rf: float64[4, 37]" in text) == bool(parts), text

    g = jd.compute(lambda X: jd.numpy.sum(X, axis=0))

    @jd.schedule(g, target="cpu")
    def outside(s, cfg):
        t, y = list(s.stages)
        s.compute_inline(s[t])
        s.reorder(s[y].reduce_axis[0], s[y].axis[0])
    with pytest.raises(jd.ScheduleError, match=re.escape(
            "stage <lambda> accumulates in float64 and stores float32 (a reduction inlined "
            "into its cast): its reduction loops must stay inside all its data loops "
            "(loop order now: k0, idx0)")):
        g(x)

    h = jd.compute(lambda X: jd.numpy.sum(X, axis=0) * 2)     # (float64: no cast)

    @jd.schedule(h, target="cpu")
    def scaled(s, cfg):
        s.compute_inline(s[list(s.stages)[0]])
    with pytest.raises(jd.ScheduleError, match="T0 is a reduction and cannot be inlined"):
        h(x.astype(np.float64))


@pytest.mark.parametrize("factor", [8, 7, 32])
def test_pack_any_factor(rng, factor):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        P = s.pack("B", C, 1, factor)
        assert P.axis[0].name == "B_o"
        i, j = C.axis
        jo, ji = s.split(j, factor)
        (k,) = C.reduce_axis
        s.reorder(i, jo, k, ji)
    a, b = rng.standard_normal((13, 29)), rng.standard_normal((29, 45))
    check(f, (a, b), a @ b, F64)
    assert "B_pack" in str(f.lower(a, b))


def test_numpy_integer_factors(rng):
    # factors computed with NumPy (np.int64) are sizes like Python ints; floats and bools
    # are not
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        s.pack("B", C, 1, np.int64(8))
        i, j = C.axis
        (k,) = C.reduce_axis
        s.rfactor(C, k, np.int32(3))
        io, ii = s.split(i, np.int64(4))
        s.split(j, nparts=np.uint8(2))
        s.tile(io, ii, np.int16(2), np.int64(2))
    a, b = rng.standard_normal((13, 29)), rng.standard_normal((29, 45))
    check(f, (a, b), a @ b, F64)
    json.dumps(f.schedule_of(a, b).steps)                  # the steps stay JSON

    # (10**30, past int64, was an OverflowError at the call, not an error at the split)
    for bad in (np.float64(4.0), True, np.int64(0), 2.0, 10**30):
        g = make_matmul()

        @jd.schedule(g, target="cpu")
        def sched2(s, cfg):
            s.split(s["C"].axis[0], bad)
        with pytest.raises(jd.ScheduleError, match="must be a positive int"):
            g(a, b)


def test_a_schedule_that_is_not_a_function_of_s_and_cfg_is_refused_where_it_is_made():
    """@jd.schedule(f) of `def sched(s)` (or of something not callable) was taken; the
    first call then failed inside jitdl's compile with a bare TypeError ('sched() takes
    1 positional argument but 2 were given'). It is a ScheduleError at the decorator,
    naming the function's parameters; callables of (s, cfg) of any kind stay welcome."""
    f = make_matmul()
    with pytest.raises(jd.ScheduleError, match=r"@jd\.schedule\(matmul\): a schedule is a "
                       r"function of \(s, cfg\), the schedule and its knobs; got sched\(s\)"):
        @jd.schedule(f)
        def sched(s):
            pass
    with pytest.raises(jd.ScheduleError, match="got int 3, which is not callable"):
        jd.schedule(f)(3)

    class Sched:
        def __call__(self, s, cfg, extra=None):
            s.parallel(s["C"].axis[0])
    jd.schedule(f)(Sched())
    a, b = np.ones((4, 3)), np.ones((3, 5))
    check(f, (a, b), a @ b, np.float64)


def test_pack_errors(rng):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        s.pack("Z", s["C"], 1, 8)
    with pytest.raises(jd.ScheduleError, match="does not read a tensor named 'Z'"):
        f(np.ones((4, 4)), np.ones((4, 4)))


@pytest.mark.parametrize("op,ref", [(jd.sum, np.sum), (jd.max, np.max), (jd.min, np.min),
                                    (jd.prod, np.prod)])
@pytest.mark.parametrize("factor", [4, 5, 16])
def test_rfactor(rng, op, ref, factor):
    f = make_rowreduce(op)

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        R = s["R"]
        (k,) = R.reduce_axis
        rf = s.rfactor(R, k, factor)
        s.vectorize(rf.axis[0])
    x = rng.uniform(0.9, 1.1, (7, 53)) if ref is np.prod else rng.standard_normal((7, 53))
    check(f, (x,), ref(x, axis=1), F64, 1e-11)
    assert "R_rf" in str(f.lower(x))


def test_rfactor_errors():
    f = make_rowreduce(jd.sum)

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        R = s["R"]
        (i,) = R.axis
        s.rfactor(R, i, 4)
    with pytest.raises(jd.ScheduleError, match="not a reduction axis of R"):
        f(np.ones((3, 8)))


def _whole_sum3(dynamic):
    @jd.compute(dynamic=dynamic)
    def total(X):
        n0, n1, n2 = X.shape
        k0, k1, k2 = (jd.reduce_axis(n, name=f"k{d}") for d, n in enumerate(X.shape))
        return jd.tensor((), lambda: jd.sum(X[k0, k1, k2], axis=[k0, k1, k2]), name="S")
    return total


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("blocked", [False, True])
def test_rfactor_of_fused_reduction_axes(rng, dynamic, blocked):
    """rfactor(..., fuse=[...]) splits several reduction axes taken as one of their
    extents' product (row-major): parts that cross rows, an uneven last part, a symbolic
    shape; the step's JSON names the fused axes, and an rfactor without them is written
    as before (its recorded steps and keys unchanged)."""
    f = _whole_sum3(dynamic)

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        S = s["S"]
        k0, k1, k2 = S.reduce_axis
        s.rfactor(S, k0, 7, blocked=blocked, fuse=[k1, k2])
    if dynamic and blocked:         # (a part's start the bounds check cannot bound)
        with pytest.raises(jd.ScheduleError, match="use blocked=False"):
            f(rng.standard_normal((3, 4, 5)))
        return
    for shape in [(3, 4, 5), (1, 9, 2), (2, 1, 1)]:
        x = rng.standard_normal(shape)
        np.testing.assert_allclose(f(x), x.sum(), rtol=1e-12)
    steps = f.schedule_of(x).steps
    (rf,) = [st for st in steps if st["op"] == "rfactor"]
    assert rf["fuse"] == ["k1", "k2"] and rf["blocked"] == blocked
    from jitdl.schedule import steps as S
    assert "fuse" not in S.RFactor("S", "k0", 4).to_json()
    assert S.from_json(S.RFactor("S", "k0", 4, True, ("k1",)).to_json()).fuse == ("k1",)


def test_rfactor_fuse_errors(rng):
    x = rng.standard_normal((2, 3, 4))
    for fuse, message in [(lambda S: [S.reduce_axis[0]], "named twice"),
                          (lambda S: ["k1"], "must be reduction axes of S"),
                          (lambda S: [S.reduce_axis[1], S.reduce_axis[1]], "distinct")]:
        f = _whole_sum3(False)

        @jd.schedule(f, target="cpu")
        def sched(s, cfg, fuse=fuse):
            S = s["S"]
            s.rfactor(S, S.reduce_axis[0], 4, fuse=fuse(S))
        with pytest.raises(jd.ScheduleError, match=message):
            f(x)


def test_argument_errors_name_the_value_at_the_users_line():
    """Arguments a step's own checks refuse (pack's dim -1 or True, rfactor's fuse naming an
    axis twice) and a tensor that is no name (cache_read(3, ...)) are ScheduleErrors at the
    schedule's line naming the value given; they had no line (or the "<string>" file of
    the __init__ dataclasses write), and cache_read(3, ...) said `got None`."""
    x = np.ones((3, 4))
    cases = [(lambda s: s.pack("X", s["R"], -1, 4), "pack: 'dim' must be an int >= 0, got -1"),
             (lambda s: s.pack("X", s["R"], True, 4), "got True"),
             (lambda s: s.cache_read(3, [s["R"]]),
              "cache_read: argument 'tensor' must be a tensor's name (str) or a stage, got 3"),
             (lambda s: s.pack(None, s["R"], 0, 4), "got None"),
             (lambda s: s.rfactor(s["R"], s["R"].reduce_axis[0], 2, fuse=[s["R"].axis[0]] * 2),
              "distinct names"),
             # (a loop axis has a name too: the stage's primitives said "no stage named 'i'")
             (lambda s: s.compute_inline(s["R"].axis[0]),
              "compute_inline: argument 'stage' must be a stage (s[\"T\"]), got the loop "
              "axis R.i (a loop of stage 'R': s.compute_inline(s[\"R\"]))"),
             (lambda s: s.compute_root(s["R"].reduce_axis[0]), "got the loop axis R.k")]
    for step, text in cases:
        f = make_rowreduce(jd.sum)

        @jd.schedule(f, target="cpu")
        def sched(s, cfg, step=step):
            step(s)
        with pytest.raises(jd.ScheduleError) as e:
            f(x)
        assert text in e.value.message
        assert e.value.loc.filename == __file__, e.value
        assert "lambda s:" in e.value.loc.line(), e.value      # (the primitive's call)


@pytest.mark.parametrize("blocked", [False, True])
def test_rfactor_of_a_window_of_symbolic_extent(rng, blocked):
    """A dynamic window `X[i + r]` over `range(W.shape[0])`, its r split by rfactor: the
    bounds check proves the reads from the part's guard `r < W_n0` and i's extent. A
    blocked part's start, r_f * ceil(W_n0 / f), is no affine term, and the check could not
    prove `i + r_f * ceil(W_n0 / f) + r_o` inside X: a DefinitionError on the user's
    definition line for a correct schedule."""
    @jd.compute(dynamic=True)
    def conv1(X, W):
        Y[i] = sum(X[i + r] * W[r] for r in range(W.shape[0]))
        return Y

    @jd.schedule(conv1, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        s.rfactor(Y, Y.reduce_axis[0], 4, blocked=blocked)
    for n, m in [(19, 5), (9, 9), (30, 4), (6, 1)]:
        x, w = rng.standard_normal(n), rng.standard_normal(m)
        np.testing.assert_allclose(conv1(x, w), np.convolve(x, w[::-1], "valid"), rtol=1e-12)


def test_compute_at_split_consumer(rng):
    f = make_softmax()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        i, j = Y.axis
        io, ii = s.split(i, 4)              # 4 rows per iteration of io, with a tail
        s.compute_inline(s["e"])
        s.compute_at(s["mx"], Y, io)
        s.compute_at(s["s"], Y, io)
        s.parallel(io)
    x = rng.standard_normal((23, 17))
    check(f, (x,), softmax_ref(x), F64, 1e-12)
    text = str(f.lower(x))
    assert text.index("mx_acc") > text.index("parallel")     # inside the consumer's loop


@pytest.mark.parametrize("factors", [(4, 5), (3, 4), (8, 16), (1, 2)])
def test_a_block_computed_at_a_loop_can_be_split(rng, factors):
    """The loops of a stage computed at a consumer's loop split over the block (a factor
    that does not divide the block's extent, or exceeds it, leaves a guarded tail), then
    reorder, unroll and vectorize; every element is computed as NumPy does."""
    fi, fj = factors

    @jd.compute
    def rows(X, W):
        n, k = X.shape
        S[i, j] = sum(X[i, r] * W[r, j] for r in range(k))
        m[i] = max(S[i, j] for j in range(W.shape[1]))
        Y[i, j] = S[i, j] - m[i]
        return Y

    @jd.schedule(rows, target="cpu")
    def sched_rows(s, cfg):
        Y, S, m = s["Y"], s["S"], s["m"]
        io, ii = s.split(Y.axis[0], 4)
        s.compute_at(S, Y, io)
        s.compute_at(m, Y, io)
        si, sj = S.axis
        (r,) = S.reduce_axis
        sjo, sji = s.split(sj, fj)
        sio, sii = s.split(si, fi)
        s.reorder(sio, sjo, r, sii, sji)
        s.unroll(sii)
        s.vectorize(sji)
        s.parallel(io)
    x, w = rng.standard_normal((23, 13)), rng.standard_normal((13, 29))
    sv = x @ w
    check(rows, (x, w), sv - sv.max(1, keepdims=True), F64, 1e-12)
    assert rows.schedule_of(x, w).stages["S"].attach == "at"


def test_blocks_of_a_dynamic_definition_read_each_other(rng):
    """Stages computed at one loop of a definition with symbolic extents, each reading
    the one before over a whole symbolic axis: the range of such a read is below the
    size limit (it was compared as a symbolic value: found by review)."""
    @jd.compute(dynamic=True)
    def sm(X, W):
        n, k = X.shape
        S[i, j] = sum(X[i, r] * W[r, j] for r in range(k))
        m[i] = max(S[i, j] for j in range(W.shape[1]))
        e[i, j] = exp(S[i, j] - m[i])
        t[i] = sum(e[i, j] for j in range(W.shape[1]))
        Y[i, j] = e[i, j] / t[i]
        return Y

    @jd.schedule(sm, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        io, ii = s.split(Y.axis[0], 4)
        for name in "Smet":
            s.compute_at(s[name], Y, io)
        s.split(s["S"].axis[1], 3)
    for n, k, m in ((5, 3, 4), (9, 7, 11)):
        x, w = rng.standard_normal((n, k)), rng.standard_normal((k, m))
        sv = x @ w
        ev = np.exp(sv - sv.max(1, keepdims=True))
        check(sm, (x, w), ev / ev.sum(1, keepdims=True), F64, 1e-12)


def test_block_computed_at_a_serial_loop_runs_in_parallel(rng):
    # the blocks of the A+1 stage, one per 5 rows of C, each computed by all cores
    f = make_chain()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        io, ii = s.split(C.axis[0], 5)
        s.compute_inline(s["A"])
        s.compute_at(s["B"], C, io)
        s.parallel(s["B"].axis[0])
        s.parallel(ii)
    x = rng.standard_normal((23, 70))
    check(f, (x,), (x * 2.0 + 1.0) ** 2, F64, 1e-12)
    text = str(f.lower(x))
    assert text.index("for i_o") < text.index("parallel i_r") < text.index("parallel i_i")

    @jd.schedule(f, target="cpu")
    def parallel_first(s, cfg):     # the same, the block's loop made parallel first
        C = s["C"]
        io, ii = s.split(C.axis[0], 5)
        s.compute_inline(s["A"])
        s.parallel(s["B"].axis[0])
        s.compute_at(s["B"], C, io)
        s.parallel(ii)
    check(f, (x,), (x * 2.0 + 1.0) ** 2, F64, 1e-12)

    @jd.schedule(f, target="cpu")
    def nested(s, cfg):
        C = s["C"]
        io, ii = s.split(C.axis[0], 5)
        s.compute_at(s["B"], C, io)
        s.parallel(s["B"].axis[0])
        s.parallel(io)
    with pytest.raises(jd.ScheduleError, match="inside its parallel loop i.o"):
        f(x)


@pytest.mark.parametrize("case", ["other_stage_loop", "not_a_reader", "cycle", "split_after"])
def test_compute_at_errors(case):
    f = make_softmax()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y, S = s["Y"], s["s"]
        i, j = Y.axis
        if case == "other_stage_loop":
            s.compute_at(s["mx"], Y, S.axis[0])
        elif case == "not_a_reader":
            s.compute_at(Y, S, S.axis[0])
        elif case == "cycle":
            s.compute_inline(s["e"])
            s.compute_at(s["mx"], S, S.axis[0])
            s.compute_at(S, s["mx"], s["mx"].reduce_axis[0])
        else:
            s.compute_inline(s["e"])
            s.compute_at(s["mx"], Y, i)
            s.split(i, 2)
    expected = {"other_stage_loop": "is not a loop of Y",
                "not_a_reader": "s does not read Y",
                "cycle": "cycle|does not read",
                "split_after": "computed at loop i"}[case]
    with pytest.raises(jd.ScheduleError, match=expected):
        f(np.ones((3, 4)))


def test_auto_schedule_fuses_row_statistics(rng):
    f = make_softmax()
    x = rng.standard_normal((64, 300)).astype(np.float32)
    sched = f.schedule_of(x)
    assert sched.stages["mx"].attach == "at" and sched.stages["s"].attach == "at"
    check(f, (x,), softmax_ref(x.astype(np.float64)), F32, 1e-5, 1e-7)


@pytest.mark.parametrize("shape", [(67, 5), (130, 33), (1001, 3), (64, 2, 9), (13, 40)])
@pytest.mark.parametrize("dynamic", [False, True])
def test_auto_schedule_splits_column_reductions_by_rows(rng, shape, dynamic):
    """A reduction over axis 0 with the contiguous axis kept: the rows are split among the
    threads (an rfactor stage, interleaved parts, a partial last round) where there are
    many rows; every op against NumPy in float64, every output written."""
    x = rng.standard_normal(shape)
    b = x > 0.3
    for fn, ref, arg in [(jd.numpy.sum, np.sum, x), (jd.numpy.max, np.max, x),
                         (jd.numpy.min, np.min, x), (jd.numpy.prod, np.prod, 1 + x / 9),
                         (jd.numpy.mean, np.mean, x), (jd.numpy.var, np.var, x),
                         (jd.numpy.any, np.any, b), (jd.numpy.all, np.all, b)]:
        def definition(X):
            return fn(X, axis=0)
        f = jd.compute(definition, dynamic=dynamic)
        got, want = f(arg), ref(arg, axis=0)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=fn.__name__)
        split = "_rf" in str(f.lower(arg))
        assert split == (dynamic or shape[0] >= 64), (fn.__name__, split)


@pytest.mark.parametrize("shape,axis", [((1000, 37), 0), ((300, 1000), 0), ((100000, 10), 0),
                                        ((7, 9, 64), 0), ((3, 5), 0), ((7, 9, 64), 1),
                                        ((40, 3, 1000), 1), ((5, 6, 7, 8), 2)])
@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_column_reductions_stream_their_rows(rng, shape, axis, dynamic, n_threads):
    """A reduction over an axis other than the last keeps the contiguous axis innermost,
    under the reduction loop, and the axes before it outside: the input is read once, row
    after row (blocks of 256 columns read each row in pieces, and guarded scalar code did
    a narrow matrix's columns: 10000 x 1000 float32 took 18 ms on one thread, NumPy 4.6).
    On one thread, or with outer rows enough for the threads (X[i, k, j] summed over k),
    no partial results (rfactor) are made; every op against NumPy in float64. (mean and
    var end in a division: where an outer iteration's rows fit in half of L2 their
    register tiles are computed with it instead, see the next test.)"""
    from _passes import threads
    from jitdl.target.cpu import host
    x = rng.standard_normal(shape)
    b = x > 0.3
    with threads(n_threads):
        for fn, ref, arg in [(jd.numpy.sum, np.sum, x), (jd.numpy.max, np.max, x),
                             (jd.numpy.prod, np.prod, 1 + x / 9), (jd.numpy.mean, np.mean, x),
                             (jd.numpy.var, np.var, x), (jd.numpy.any, np.any, b)]:
            def definition(X):
                return fn(X, axis=axis)
            f = jd.compute(definition, dynamic=dynamic)
            got, want = f(arg), ref(arg, axis=axis)
            assert got.dtype == want.dtype and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=fn.__name__)
            outer = int(np.prod(shape[:axis]))
            if n_threads == 2 and not (axis and (dynamic or outer >= 4)):
                continue                       # (rows split among the threads: see above)
            sched = f.schedule_of(arg)
            red = [st for st in sched.stages.values()
                   if st.is_reduce and st.attach == "root" and st.tensor.ndim == len(shape) - 1]
            fused = fn in (jd.numpy.mean, jd.numpy.var) and not dynamic \
                and np.prod(shape[axis:]) * 8 <= host().l2_bytes // 2
            assert (red or fused) and "_rf" not in str(f.lower(arg)), fn.__name__
            for st in red:           # (outside the reduction: the axes before it, fused or not)
                kinds = [st.axes[n].reduce for n in st.leaves]
                outside = re.findall(r"idx\d+", " ".join(st.leaves[:kinds.index(True)]))
                assert sorted(set(outside)) == [f"idx{d}" for d in range(axis)] \
                    and not kinds[-1], (fn.__name__, st.leaves)


@pytest.mark.parametrize("n_threads", [1, 2])
def test_short_column_reductions_keep_registers(rng, n_threads):
    """Where an outer iteration's rows stay in L2, a column reduction with an epilogue (a
    float32 sum: float64 partial sums cast back) keeps register tiles computed with it:
    streamed, the partial sums of sum(X, axis=1) for X of (1000, 3, 1000) float32 went
    through a float64 buffer of the result's size and a second pass (2.4 -> 0.93 ms on one
    thread, 5x on two). Rows of up to three elements stay scalar code (100000 x 3 float64
    summed over axis 0: 106 -> 53 us). Against NumPy in float64."""
    from _passes import threads
    with threads(n_threads):
        for shape, axis, dt in [((100, 3, 100), 1, np.float32), ((40, 16, 100), 1, np.float32),
                                ((1000, 3), 0, np.float64), ((1000, 2), 0, np.float32)]:
            x = rng.standard_normal(shape).astype(dt)
            f = jd.compute(lambda X: jd.numpy.sum(X, axis=axis))
            got = f(x)
            assert got.dtype == dt
            np.testing.assert_allclose(got, x.astype(np.float64).sum(axis), rtol=1e-6,
                                       atol=1e-6)
            loops = str(f.lower(x))
            if n_threads == 2 and axis == 0:
                continue                        # (rows split among the threads)
            if axis:        # (tiles: partial sums in a local block, no global buffer)
                assert "(local)" in loops and "global" not in loops, loops
            else:
                assert "vectorized" not in loops, loops


@pytest.mark.parametrize("k,n", [(2000, 300), (64, 1000), (517, 33)])
@pytest.mark.parametrize("n_threads", [1, 2])
def test_vector_times_matrix_streams_the_matrix_rows(rng, k, n, n_threads):
    """v @ M (and dot, einsum) is a column reduction with a weight per row: the matrix is
    read row after row (split among the threads), not by register tiles walking down its
    columns (16 floats per 8 KB row: 2000 x 2000 float32 took 1.65 ms, NumPy 0.35; now
    about 0.5); against NumPy in float64."""
    from _passes import threads
    v, M = rng.standard_normal(k), rng.standard_normal((k, n))
    with threads(n_threads):
        for fn in (lambda a, b: jd.numpy.matmul(a, b), lambda a, b: jd.numpy.dot(a, b),
                   lambda a, b: jd.numpy.einsum("k,kn->n", a, b)):
            f = jd.compute(lambda a, b: fn(a, b))
            np.testing.assert_allclose(f(v, M), v @ M, rtol=1e-12, atol=1e-12)
            loops = str(f.lower(v, M))
            # (no register tile: what is unrolled is the rows read per pass, _split_rows)
            unrolled = [ln.split()[1] for ln in loops.splitlines() if "unrolled" in ln]
            assert "vectorized" in loops and all(u.startswith("k") for u in unrolled), loops


@pytest.mark.parametrize("n_threads", [1, 2])
def test_stencil_weights_keep_their_register_tiles(rng, n_threads):
    """A stencil's weights are read along reduction axes alone too (w of sum(X[j + k] *
    w[k]), W of a 2-d filter), but its reduction walks the columns, not rows: it keeps
    register tiles of outputs (as a column reduction, the 1-d convolution of 100000
    float32 by 5 weights took 263 us on two threads, 26 us tiled)."""
    from _passes import threads

    def conv1(X, w):
        k = jd.reduce_axis(w.shape[0], name="k")
        return jd.tensor((X.shape[0] - w.shape[0] + 1,),
                         lambda j: jd.sum(X[j + k] * w[k], axis=k))

    def conv2(X, W):
        p, q = jd.reduce_axis(W.shape[0], name="p"), jd.reduce_axis(W.shape[1], name="q")
        return jd.tensor((X.shape[0] - W.shape[0] + 1, X.shape[1] - W.shape[1] + 1),
                         lambda i, j: jd.sum(X[i + p, j + q] * W[p, q], axis=(p, q)))
    windows = np.lib.stride_tricks.sliding_window_view
    x, w = rng.standard_normal(1000), rng.standard_normal(5)
    x2, w2 = rng.standard_normal((40, 70)), rng.standard_normal((3, 3))
    with threads(n_threads):
        for fn, args, want in [(conv1, (x, w), windows(x, 5) @ w),
                               (conv2, (x2, w2), np.einsum("ijpq,pq->ij",
                                                           windows(x2, (3, 3)), w2))]:
            f = jd.compute(fn)
            np.testing.assert_allclose(f(*args), want, rtol=1e-12, atol=1e-12)
            assert "unrolled" in str(f.lower(*args)), f.lower(*args)

def test_matmul_k_blocks_and_their_packs_follow_the_parallel_knob(rng):
    """The default matmul blocks its reduction axis (L1-sized panels) and packs a block at
    a time on every core; the tuner's parallel=0 makes all of it serial."""
    f = make_matmul()
    a = rng.standard_normal((64, 1024)).astype(np.float32)
    b = rng.standard_normal((1024, 520)).astype(np.float32)
    want = a.astype(np.float64) @ b
    assert "C.parallel" in f.config_space(a, b)
    for par in (0, 4):
        g = f.with_config(**{"C.parallel": par})
        check(g, (a, b), want, F32, 1e-4, 1e-4)
        assert ("parallel" in str(g.lower(a, b))) == bool(par)


def test_a_pack_by_blocks_of_a_long_reduction_keeps_cache_sized_k_blocks(rng):
    """X.T @ X of a tall (100000, 64) X: the streamed operand is larger than the pack
    budget, so it is packed one block of k at a time; those blocks are L1-sized too, not
    the budget's (65536 steps, 4 MB panels per tile: 2.6x slower on one core)."""
    import re
    x = rng.standard_normal((100000, 64)).astype(np.float32)
    xt = np.ascontiguousarray(x.T)
    f = jd.compute(lambda A, B: jd.numpy.matmul(A, B))
    np.testing.assert_allclose(f(xt, x), xt.astype(np.float64) @ x, rtol=1e-4, atol=1e-2)
    loops = str(f.lower(xt, x))
    steps = [int(n) for n in re.findall(r"for k0_i in range\((\d+)\)", loops)]
    assert steps and max(steps) <= 1024, steps

def test_cfg_reorder_knob(rng):
    f = make_matmul()
    seen = []

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        order = cfg.reorder("order", [i, j, k])
        seen.append((len(cfg.space["order"]), [a.name for a in order]))
        s.reorder(*order)
    a, b = rng.standard_normal((9, 7)), rng.standard_normal((7, 5))
    check(f, (a, b), a @ b, F64)
    assert seen[-1] == (6, ["i", "j", "k"])             # the default: the given order
    g = f.with_config(order=[2, 0, 1])
    check(g, (a, b), a @ b, F64)
    assert seen[-1][1] == ["k", "i", "j"]


@pytest.mark.parametrize("M,K,N", [(37, 29, 41), (1, 70, 65), (66, 3, 33)])
@pytest.mark.parametrize("tile", [(32, 8), (16, 4), (8, 2)])
def test_auto_tiles_any_size(rng, M, K, N, tile):
    f = make_matmul().with_config(**{"C.tile_j": tile[0], "C.tile_i": tile[1]})
    a, b = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    check(f, (a, b), a @ b, F64, 1e-10)


def test_schedule_steps_replay_from_json(rng):
    f = make_softmax()
    x = rng.standard_normal((10, 12))
    steps = json.loads(json.dumps(f.schedule_of(x).steps))
    graph, _ = f._graph((x,))
    again = Schedule(graph.outputs).replay(steps)
    assert again.steps == steps
    assert repr(again) == repr(f.schedule_of(x))


def test_tune_searches_auto_knobs(rng):
    f = make_matmul()
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 96)).astype(np.float32)
    best, seconds = f.tune(a, b, trials=3)
    assert set(best) <= set(f.config_space(a, b).names) and seconds > 0
    check(f, (a, b), a.astype(np.float64) @ b, F32, 1e-4, 1e-4)


@pytest.mark.parametrize("M,N", [(16, 64), (13, 37)])
def test_cache_write_with_compute_at(rng, M, N):
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        CL = s.cache_write(C)
        i, j = C.axis
        io, ii = s.split(i, 4)
        jo, ji = s.split(j, 8)
        s.reorder(io, jo, ii, ji)
        ci, cj = CL.axis
        (k,) = CL.reduce_axis
        s.reorder(k, ci, cj)
        s.unroll(ci)
        s.compute_at(CL, C, jo)
        s.vectorize(ji)
    a, b = rng.standard_normal((M, 19)), rng.standard_normal((19, N))
    check(f, (a, b), a @ b, F64, 1e-11)
    text = str(f.lower(a, b))
    assert "C_local_l: float64[4, 8] (local)" in text      # a block-sized buffer


def test_cache_write_errors():
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        s.split(i, 2)
        s.cache_write(C)
    with pytest.raises(jd.ScheduleError, match="before other steps"):
        f(np.ones((4, 4)), np.ones((4, 4)))


def test_compute_at_with_a_reader_outside_is_refused():
    f = make_softmax()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        s.compute_inline(s["e"])
        s.compute_at(s["mx"], Y, Y.axis[0])        # but s, computed at the root, reads mx
    with pytest.raises(jd.ScheduleError, match="s also reads mx outside loop i of Y"):
        f(np.ones((3, 4)))


def test_compute_at_block_shared_by_stages_at_the_same_loop(rng):
    """e (a row of exp) is computed once per row and read by s and Y, both inside the row
    loop: its block must cover what all of them read."""
    f = make_softmax()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        i = Y.axis[0]
        for name in ("mx", "e", "s"):
            s.compute_at(s[name], Y, i)
    x = rng.standard_normal((9, 21))
    check(f, (x,), softmax_ref(x), F64, 1e-12)
    text = str(f.lower(x))
    assert "e_l: float64[1, 21] (local)" in text


def test_cache_read_block_copy(rng):
    @jd.compute
    def blur(X):
        n, m = X.shape
        Y[i, j] = (X[i, j] + X[i, j + 1] + X[i + 1, j] + X[i + 1, j + 1]) * 0.25
        return Y

    @jd.schedule(blur, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        XC = s.cache_read("X", [Y])
        i, j = Y.axis
        io, ii = s.split(i, 4)
        s.compute_at(XC, Y, io)          # rows 4*io .. 4*io + 4 (5 of them) per block
    x = rng.standard_normal((23, 17))
    ref = (x[:-1, :-1] + x[:-1, 1:] + x[1:, :-1] + x[1:, 1:]) * 0.25
    check(blur, (x,), ref, F64, 1e-12)
    assert "X_cache_l: float64[5, 17] (local)" in str(blur.lower(x))


def test_cache_read_errors():
    f = make_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        s.cache_read("Q", [s["C"]])
    with pytest.raises(jd.ScheduleError, match="reads a tensor named 'Q'"):
        f(np.ones((4, 4)), np.ones((4, 4)))


# ---------------------------------------------------------------- found by review: refused
# schedules get a ScheduleError, never a crash or a wrong answer

def make_chain():
    @jd.compute
    def chain(X):
        n, m = X.shape
        A[i, j] = X[i, j] * 2.0
        B[i, j] = A[i, j] + 1.0
        C[i, j] = B[i, j] * B[i, j]
        return C
    return chain


@pytest.mark.parametrize("case", ["double_rfactor", "argmin_reordered", "fuse_attached",
                                  "parallel_in_nested", "two_parallel", "at_inside_reduction"])
def test_refused_schedules(case):
    x3 = np.arange(2 * 6 * 3, dtype=np.float64).reshape(2, 6, 3) % 5
    if case == "double_rfactor":
        f, args, match = make_rowreduce(jd.sum), (np.ones((3, 8)),), "already has an rfactor"

        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            s.rfactor(s["R"], s["R"].reduce_axis[0], 4)
            s.rfactor(s["R"], s["R"].reduce_axis[0], 2)
    elif case == "argmin_reordered":
        @jd.compute
        def f(X):
            n, m, p = X.shape
            k, l = jd.reduce_axis(m, name="k"), jd.reduce_axis(p, name="l")
            return jd.tensor((n,), lambda i: jd.argmin(X[i, k, l], axis=[k, l]), name="Y")

        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            k, l = s["Y"].reduce_axis
            s.reorder(l, k)
        args, match = (x3,), "row-major order"
    elif case in ("fuse_attached", "parallel_in_nested", "two_parallel"):
        f, args = make_chain(), (np.ones((4, 5)),)

        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            if case == "fuse_attached":
                s.compute_at(s["B"], s["C"], s["C"].axis[0])
                s.fuse(*s["B"].axis)
            elif case == "parallel_in_nested":    # (nested compute_at itself runs)
                s.compute_at(s["A"], s["B"], s["B"].axis[0])
                s.compute_at(s["B"], s["C"], s["C"].axis[0])
                s.parallel(s["C"].axis[0])
                s.parallel(s["A"].axis[1])
            else:
                i, j = s["C"].axis
                s.parallel(i)
                s.parallel(j)
        match = {"fuse_attached": "cover the block",
                 "parallel_in_nested": "computed at loop i of C, inside its parallel loop i",
                 "two_parallel": "several parallel"}[case]
    else:
        @jd.compute
        def f(A, B):
            (M, K), (_, N) = A.shape, B.shape
            T[i, k] = A[i, k] * 2.0
            C[i, j] = sum(T[i, k] * B[k, j] for k in range(K))
            return C

        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            C = s["C"]
            i, j = C.axis
            (k,) = C.reduce_axis
            s.reorder(i, k, j)
            s.compute_at(s["T"], C, j)
        args, match = (np.ones((3, 4)), np.ones((4, 2))), "inside its reduction loops"
    with pytest.raises(jd.ScheduleError, match=match):
        f(*args)


def test_argmin_over_two_axes_first_on_ties(rng):
    @jd.compute
    def am(X):
        n, m, p = X.shape
        k, l = jd.reduce_axis(m, name="k"), jd.reduce_axis(p, name="l")
        return jd.tensor((n,), lambda i: jd.argmin(X[i, k, l], axis=[k, l]), name="Y")
    x = rng.integers(-3, 3, (5, 7, 3)).astype(np.int32)
    np.testing.assert_array_equal(am(x), np.argmin(x.reshape(5, -1), 1))


@pytest.mark.parametrize("at,later", [(False, False), (True, False), (False, True)])
def test_an_arg_reduction_reordered_inside_a_block_is_refused_at_the_reorder(at, later):
    """An argmin's reduction loops reordered (split k, then k.i outside k.o) is refused, so
    that ties still go to the first position; also where its stage is computed at a
    consumer's loop (a cache_write's copy at the output's column loop), where the order
    went unchecked and jnp.argmin(x, axis=0) of 0/1 values gave [4 6 6 0 0] for
    [1 1 1 0 0]. The error points at the reorder (it had no line); at the one that put
    the reduction loops out of order, not at a later reorder of the data loops (`later`,
    which it named)."""
    import inspect

    @jd.compute
    def am(X):
        n, m = X.shape
        k = jd.reduce_axis(n, name="k")
        return jd.tensor((m,), lambda j: jd.argmin(X[k, j], axis=k), name="Y")

    @jd.schedule(am, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        L = s.cache_write(Y)
        ko, ki = s.split(L.reduce_axis[0], 2)
        s.reorder(ki, ko)
        if at:
            s.compute_at(L, Y, Y.axis[0])
        if later:
            jo, ji = s.split(L.axis[0], 2)
            s.reorder(ji, jo)
    x = np.array([[1, 1, 1, 0, 0]] * 3 + [[0, 1, 1, 0, 0]] * 6, dtype=np.int32)
    with pytest.raises(jd.ScheduleError, match="row-major order") as e:
        am(x)
    lines, first = inspect.getsourcelines(sched)
    assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, first + 5), e.value


def test_narrowing_cast_in_an_index_is_not_proven():
    @jd.compute
    def f(X):
        Y = jd.tensor((51,))
        Y[i] = X[jd.int8(i + 100)]
        return Y
    with pytest.raises(jd.DefinitionError, match=r"ranges over \[-128, 127\]"):
        f(np.ones(151))


@pytest.mark.parametrize("M,K,N", [(37, 29, 41), (64, 70, 96), (1, 5, 33)])
def test_auto_schedule_fuses_bias_relu_epilogue(rng, M, K, N):
    @jd.compute
    def dense_relu(A, B, b):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        C = jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")
        return jd.tensor((M, N), lambda i, j: jd.max(C[i, j] + b[j], 0.0), name="D")
    a, bb, b = rng.standard_normal((M, K)), rng.standard_normal((K, N)), rng.standard_normal(N)
    check(dense_relu, (a, bb, b), np.maximum(a @ bb + b, 0), F64, 1e-11)
    sched = dense_relu.schedule_of(a, bb, b)
    if N >= 32:
        assert sched.stages["C"].attach == "at" and sched.stages["C"].attach_to[0] == "D"


@pytest.mark.parametrize("shape", [(3, 50, 70), (1, 7, 5), (4, 3, 2, 9)])
def test_compute_at_a_fused_loop_computes_one_row(shape):
    """A row statistic computed at a fused loop of its consumer (batch and row loops
    fused into one) covers the one row that iteration reads (f // n and f % n are one
    point each), not the whole tensor per iteration."""
    @jd.compute
    def sm(X):
        e = jd.numpy.exp(X - jd.numpy.max(X, axis=-1, keepdims=True))
        return e / jd.numpy.sum(e, axis=-1, keepdims=True)

    @jd.schedule(sm, target="cpu")
    def sched(s, cfg):
        names = list(s.stages)
        for n in names[:-1]:
            if not s.stages[n].is_reduce:
                s.compute_inline(s[n])
        *rows, last = s[names[-1]].axis
        f = s.fuse(*rows)
        for n in names[:-1]:
            if s.stages[n].is_reduce:
                s.compute_at(s[n], s[names[-1]], f)
        s.parallel(f)
        s.vectorize(last)

    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    text = str(sm.lower(x))
    row = ", ".join("1" for _ in shape[:-1])
    assert text.count(f"float32[{row}] (local)") >= 1 and \
        f"float64[{row}] (local)" in text, text
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(sm(x), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def halo_stencil(block_buffer, dynamic=False):
    """D[i] = C[i] + C[i + 1] + C[i + 2] with C = A @ B computed at D's parallel loop of
    32 rows: each iteration needs 34 rows of C."""
    @jd.compute(dynamic=dynamic)
    def stencil(A, B):
        C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
        D = jd.tensor((A.shape[0] - 2, B.shape[1]))
        D[i, j] = C[i, j] + C[i + 1, j] + C[i + 2, j]
        return D

    @jd.schedule(stencil, target="cpu")
    def sched(s, cfg):
        i, j = s["D"].axis
        io, ii = s.split(i, 32)
        s.parallel(io)
        ci, cj = s["C"].axis
        (ck,) = s["C"].reduce_axis
        s.reorder(ck, ci, cj)
        s.compute_at(s["C"], s["D"], io, block_buffer=block_buffer)
    return stencil


def test_overlapping_blocks_at_a_parallel_loop_are_refused(rng):
    """The review's case: C computed into its whole buffer (block_buffer=False), so two
    iterations initialised and accumulated rows 32-33 at once: wrong in 44 of 60 calls.
    That is refused now; the same block kept private (the default) runs right."""
    a = rng.standard_normal((66, 300)).astype(np.float32)
    b = rng.standard_normal((300, 64)).astype(np.float32)
    with pytest.raises(jd.ScheduleError, match="blocks of C .* overlap .*i: 34 from a "
                                               "step of 32"):
        halo_stencil(False)(a, b)
    c = a.astype(np.float64) @ b
    want = c[:-2] + c[1:-1] + c[2:]
    f = halo_stencil(True)
    for _ in range(20):
        np.testing.assert_allclose(f(a, b), want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("private", [False, True])
def test_blocks_read_through_a_division_at_a_parallel_loop(rng, private):
    """P[t // 7] read by a parallel loop's blocks of 18 elements: each block computes
    the few rows of P its elements divide into, a region that may share rows with the
    next block's (rows 2 and 3 raced when both accumulated them into P's buffer): refused
    there; kept private to each block (the default), it runs right."""
    x = rng.standard_normal((5, 3000))

    @jd.compute
    def f(X):
        k = jd.reduce_axis(3000, name="k")
        P = jd.tensor((5,), lambda i: jd.sum(X[i, k], axis=k), name="P")
        return jd.tensor((35,), lambda t: P[t // 7] * 2.0, name="Y")

    @jd.schedule(f, target="cpu")
    def _(s, cfg):
        (t,) = s["Y"].axis
        o, _ = s.split(t, 18)
        s.parallel(o)
        (i,), (k,) = s["P"].axis, s["P"].reduce_axis
        s.reorder(k, i)
        s.compute_at(s["P"], s["Y"], o, block_buffer=private)
    if not private:
        with pytest.raises(jd.ScheduleError, match="blocks of P .* overlap"):
            f(x)
        return
    for _ in range(5):
        np.testing.assert_allclose(f(x), np.repeat(x.sum(1), 7) * 2, rtol=1e-10)


def test_a_guard_reading_a_buffer_of_the_loop_does_not_bound_it(rng):
    """The review's case: a where-clause reading T, computed at the reduction loop k,
    made partition_loops bound k by `m - T_l[0]`, read before T_l existed (an IR
    verifier error); such a guard stays a guard."""
    @jd.compute(dynamic=True)
    def masked_rows(X, Y):
        n, m = X.shape
        T[i, k] = Y[i, k] * 2
        k = jd.reduce_axis(m, name="k")
        return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k, where=k + T[i, k] < m),
                         name="R")

    @jd.schedule(masked_rows, target="cpu")
    def sched(s, cfg):
        (k,) = s["R"].reduce_axis
        s.compute_at(s["T"], s["R"], k)

    x = rng.standard_normal((4, 37)).astype(np.float32)
    y = rng.integers(-3, 30, (4, 37)).astype(np.int64)
    want = np.where(np.arange(37)[None] + 2 * y < 37, x.astype(np.float64), 0).sum(1)
    np.testing.assert_allclose(masked_rows(x, y), want, rtol=1e-5, atol=1e-5)


def test_overlapping_blocks_of_dynamic_sizes_are_refused(rng):
    """The same stencil with sizes known only at the call: a block as wide as the whole
    symbolic row, moving by 0 along it, overlaps too (it raced in 36 of 60 calls)."""
    a = rng.standard_normal((66, 300)).astype(np.float32)
    b = rng.standard_normal((300, 64)).astype(np.float32)
    with pytest.raises(jd.ScheduleError, match="blocks of C .* overlap"):
        halo_stencil(False, dynamic=True)(a, b)


# ---------------------------------------------------------------- found by a schedule fuzzer

@pytest.mark.parametrize("block_buffer", [True, False])
def test_a_block_read_through_a_division_of_a_symbolic_loop_is_the_whole_row(rng,
                                                                           block_buffer):
    """T computed at Y's row loop, Y[i, j] reading T[i, j // 2] with j over the symbolic
    2 * m: the block of T was sized from the loop's stand-in bound divided by 2 (a row of
    2**39 + 1 elements), so every call raised AllocationError (4 TiB) for a 3 x 4 input,
    or (block_buffer=False) ran a guarded tail loop of 2**39 iterations per row: a hang.
    The block is the whole symbolic row."""
    @jd.compute(dynamic=True)
    def up(X):
        n, m = X.shape
        T = jd.tensor((n, m), lambda i, j: X[i, j] * 2.0, name="T")
        return jd.tensor((n, 2 * m), lambda i, j: T[i, j // 2], name="Y")

    @jd.schedule(up, target="cpu")
    def sched(s, cfg):
        s.compute_at(s["T"], s["Y"], s["Y"].axis[0], block_buffer=block_buffer)
    text = str(up.lower(rng.standard_normal((3, 4))))     # (before any call can hang)
    assert "549755813889" not in text
    assert ("T_l: float64[1, X_n1]" in text) == block_buffer
    for shape in ((3, 4), (5, 1), (1, 7)):
        x = rng.standard_normal(shape)
        check(up, (x,), np.repeat(x * 2.0, 2, axis=1), F64)


def test_pack_of_a_symbolic_extent_is_refused():
    """pack on a dynamic definition raised jitdl's internal SymbolicValueError (`B_n1 % 4`
    has no truth value), whose text told the user to write a select."""
    f = make_matmul()
    g = jd.compute(f.pyfunc, dynamic=True)

    @jd.schedule(g, target="cpu")
    def sched(s, cfg):
        s.pack("B", s["C"], 1, 4)
    with pytest.raises(jd.ScheduleError, match=r"pack: dimension 1 of B has the symbolic "
                                               r"extent B_n1") as e:
        g(np.ones((5, 6)), np.ones((6, 7)))
    assert e.value.loc is not None and "s.pack" in e.value.loc.line()


@pytest.mark.parametrize("case", ["parallel_in_nested", "two_parallel", "reader_outside",
                                  "inside_reduction", "parallel_inside_parallel"])
def test_schedule_errors_found_when_lowering_name_the_schedules_line(case):
    """Checks of the finished schedule (made when it is lowered, at the call) named no
    line, or the line of the call: they name the schedule's own line that made it so."""
    f = make_chain()
    x = np.ones((4, 5))

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        A, B, C = s["A"], s["B"], s["C"]
        if case == "parallel_in_nested":
            s.parallel(C.axis[0])
            s.compute_at(B, C, C.axis[0])
            s.compute_at(A, B, B.axis[0])
            s.parallel(A.axis[1])                                         # MARK
        elif case == "two_parallel":
            s.parallel(C.axis[0])
            s.parallel(C.axis[1])                                         # MARK
        elif case == "reader_outside":
            s.compute_at(A, C, C.axis[0])                                 # MARK
        elif case == "parallel_inside_parallel":
            s.parallel(C.axis[0])
            s.compute_at(B, C, C.axis[1])
            s.parallel(B.axis[0])                                         # MARK
    if case == "inside_reduction":
        x = np.ones((3, 8))

        @jd.compute
        def f(X):
            n, m = X.shape
            T[i, k] = X[i, k] * 2.0
            R[i] = sum(T[i, k] for k in range(m))
            return R

        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            (i,), (k,) = s["R"].axis, s["R"].reduce_axis
            s.reorder(k, i)
            s.compute_at(s["T"], s["R"], i)                               # MARK
    with pytest.raises(jd.ScheduleError) as e:
        f(x)
    assert e.value.loc is not None and e.value.loc.line().rstrip().endswith("# MARK"), \
        str(e.value)


@pytest.mark.parametrize("which", ["auto", "rfactor", "cache_read", "pack"])
def test_a_schedule_keeps_the_definitions_shape_agreements(which):
    """A[i, k] * B[k, j] makes B's rows A's columns: unscheduled, A (3, 10) with B (12, 5)
    is an ArgumentError. Where a schedule rewrote B[k, j] (rfactor's B[ko * 4 + kf, j],
    cache_read's B_cache[k, j], pack's B_pack[...]), and where the automatic schedule
    packs B (256 x 300 @ 310 x 256), the call ran and summed 10 (300) of B's rows."""
    f = make_matmul()
    if which != "auto":
        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            C = s["C"]
            if which == "rfactor":
                s.rfactor(C, C.reduce_axis[0], 4)
            elif which == "cache_read":
                s.cache_read("B", [C])
            else:
                s.pack("B", C, 1, 4)
        a, b = np.ones((3, 10)), np.ones((12, 5))
    else:
        a, b = np.ones((256, 300), np.float32), np.ones((310, 256), np.float32)
    with pytest.raises(jd.ArgumentError, match="shape mismatch"):
        f(a, b)
    b = np.ones((a.shape[1], b.shape[1]), b.dtype)
    np.testing.assert_allclose(f(a, b), a.astype(np.float64) @ b)


def test_rfactor_of_a_dynamic_contraction(rng):
    """rfactor of a dynamic matmul was a DefinitionError naming the definition's line
    (B[ko * 4 + kf, j] could not be proven inside B's rows: that B's rows are A's
    columns came only from the bare B[k, j] the rewrite replaced)."""
    f = make_matmul()
    g = jd.compute(f.pyfunc, dynamic=True)

    @jd.schedule(g, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        rf = s.rfactor(C, C.reduce_axis[0], 4)
        s.vectorize(rf.axis[0])
    for K in (1, 3, 4, 10, 33):
        a, b = rng.standard_normal((3, K)), rng.standard_normal((K, 5))
        check(g, (a, b), a @ b, F64, 1e-11)
    with pytest.raises(jd.ArgumentError, match="shape mismatch"):
        g(np.ones((3, 10)), np.ones((12, 5)))


@pytest.mark.parametrize("factor,blocked", [(2, False), (4, False), (7, False), (2, True),
                                            (3, True)])
def test_rfactor_of_a_reduction_read_at_an_offset(rng, factor, blocked):
    """A valid convolution, X[i, j + r]: rfactor by a factor that does not divide R was a
    DefinitionError naming the definition's line ("X[i, j + (r_o * 2 + r_f)] can read
    outside X"): its tail's guard `r_o * 2 + r_f < R` bounded r, not j + r."""
    @jd.compute
    def conv(X, Kw):
        n, m = X.shape
        r = jd.reduce_axis(Kw.shape[0], name="r")
        return jd.tensor((n, m - Kw.shape[0] + 1),
                         lambda i, j: jd.sum(X[i, j + r] * Kw[r], axis=r), name="Y")

    @jd.schedule(conv, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        rf = s.rfactor(Y, Y.reduce_axis[0], factor, blocked=blocked)
        s.vectorize(rf.axis[-1])
    x, k = rng.standard_normal((4, 9)), rng.standard_normal(5)
    want = np.stack([np.convolve(row, k[::-1], "valid") for row in x])
    check(conv, (x, k), want, F64, 1e-12)


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_copy_read_by_a_copy_computed_inside_its_loop(dynamic):
    """B copied at each k.o, and that copy copied again at each k.i (the shape of a GPU
    matmul's shared and register copies): the outer copy covers what the inner one reads
    at every k.i. A copy computed at a loop outside k.o would read the outer one where it
    does not exist: still refused."""
    def two_level(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        io, ii = s.split(i, 8)
        jo, ji = s.split(j, 16)
        ko, ki = s.split(k, 4)
        s.reorder(io, jo, ko, ki, ii, ji)
        s.parallel(io)
        outer = s.cache_read("B", [C], "global")
        s.compute_at(outer, C, ko)
        s.compute_at(s.cache_read(outer, [C], "global"), C, ki)
        s.vectorize(ji)
    f = jd.compute(make_matmul().pyfunc, dynamic=dynamic)
    jd.schedule(f, target="cpu")(two_level)
    rng = np.random.default_rng(7)
    for m, k, n in [(16, 8, 32), (37, 13, 29), (1, 1, 1), (5, 40, 3)]:
        a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
        check(f, (a, b), a @ b, np.float64)
    assert "B_cache_cache" in str(f.lower(a, b))

    def outside(s, cfg):
        C = s["C"]
        ko, ki = s.split(C.reduce_axis[0], 4)
        s.reorder(C.axis[0], ko, C.axis[1], ki)
        outer = s.cache_read("B", [C], "global")
        s.compute_at(outer, C, ko)
        s.compute_at(s.cache_read(outer, [C], "global"), C, C.axis[0])
    g = jd.compute(make_matmul().pyfunc)
    jd.schedule(g, target="cpu")(outside)
    with pytest.raises(jd.ScheduleError, match="also reads B_cache outside loop k.o of C"):
        g(a, b)


def _blur_chain():
    @jd.compute
    def blur(X):
        n, m = X.shape
        A = jd.tensor((n, m - 2), lambda i, j: X[i, j] + X[i, j + 1] + X[i, j + 2], name="A")
        B = jd.tensor((n - 2, m - 2), lambda i, j: A[i, j] + A[i + 1, j] + A[i + 2, j],
                      name="B")
        return jd.tensor((n - 2, m - 2), lambda i, j: B[i, j] * 2.0, name="Y")
    return blur


@pytest.mark.parametrize("how", ["serial", "parallel_y", "parallel_a", "whole_buffer"])
def test_compute_at_inside_a_stage_computed_at_a_loop(rng, how):
    """A computed at B's rows, B at Y's blocks of 8 rows (nested compute_at, as TVM's GPU
    tutorial's shared copies at a loop of C's local cache): it was refused ("nested
    compute_at is not supported yet"), and lowered, A's attach loop `i` (B's block loop
    `i.r` there) was not found. A loop of A run in parallel inside Y's parallel loop
    (the verifier's 'parallel loop nested in another parallel loop'), or A in its whole
    buffer there (blocks of different Y rows overlapping), are refused at the user's line."""
    import inspect
    f = _blur_chain()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y, B, A = s["Y"], s["B"], s["A"]
        io, ii = s.split(Y.axis[0], 8)
        if how != "serial":
            s.parallel(io)
        s.compute_at(B, Y, io)
        s.compute_at(A, B, B.axis[0], block_buffer=how != "whole_buffer")
        if how == "parallel_a":
            s.parallel(A.axis[1])
    _, first = inspect.getsourcelines(sched)
    x = rng.standard_normal((29, 17))
    a = x[:, :-2] + x[:, 1:-1] + x[:, 2:]
    want = 2 * (a[:-2] + a[1:-1] + a[2:])
    if how == "parallel_a":
        with pytest.raises(jd.ScheduleError, match=r"A is computed at loop i of B, which is "
                           r"computed at loop i.o of Y, inside its parallel loop i.o") as e:
            f(x)
        assert e.value.loc.lineno == first + 9
    elif how == "whole_buffer":
        with pytest.raises(jd.ScheduleError, match=r"A is computed into its whole buffer at "
                           r"loop i of B, which is computed inside parallel loop i.o of Y") \
                as e:
            f(x)
        assert e.value.loc.lineno == first + 7
    else:
        check(f, (x,), want, F64, 1e-12)
        text = str(f.lower(x))
        assert "alloc A_l: float64[3, 15] (local)" in text
        assert text.index("alloc B_l") < text.index("alloc A_l") < text.index("B_l[")
