"""The reference interpreter (jitdl.tir.interpret) as the oracle of the passes.

The loop IR of a definition is taken after each pass (tests/_passes.py: the built loop
nests, simplify, partition_loops, simplify, each verified) and run on the interpreter,
which raises on out-of-range accesses, reads of unwritten elements, unwritten outputs and
races between parallel iterations. Each result is compared with a NumPy float64 reference
and with the compiled kernel, and every pass must store exactly the values the built loop
nests store, at the same places, in the same order.

1. fixed definitions: matmul (automatic schedule, tiled, cache_write, pack, split
   reduction, int32), softmax, conv2d, stencils, masked, arg and any/all reductions, int
   and bool dtypes, rfactor, cache_read, gathers, scalars, 0-d and several outputs;
2. the fuzzer's random definitions and legal schedules (tests/test_fuzz.py), plus random
   two-stage pipelines (stencil of an elementwise stage; row statistics) under random
   splits, reorders, fuses, annotations, inline, compute_root and compute_at.
What the oracle found in lowering and the passes is kept as strict xfails.
Sizes are small: the interpreter runs some ten thousand loop iterations a second.
(tests/test_interpret_semantics.py tests the interpreter itself.)
"""
import numpy as np
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

import jitdl as jd
from _check import assert_matches
from _passes import interpret_stages, pass_stages
from jitdl.tir.interpret import ScopeError, interpret
from test_fuzz import (apply_schedule, compare, emit, fold, fuzz_settings, inputs,
                       make_elementwise, make_reduction, ref, ref_env, schedules, trees, uses)
from test_schedules import make_matmul, make_softmax, softmax_ref

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def tolerance(dtype, reduction=False):
    dtype = np.dtype(dtype)
    if dtype.kind != "f":
        return 0.0, 0.0
    if dtype == F32:
        return (2e-5, 1e-6) if reduction else (1e-6, 1e-7)
    return (1e-12, 1e-13) if reduction else (1e-15, 0.0)


def check_definition(f, args, expected, rtol=None, atol=None, reduction=True):
    """f(*args) and the interpreter on f's loop IR after every pass agree with `expected`
    (NumPy, float64) and with each other."""
    expected = expected if isinstance(expected, tuple) else (expected,)
    compiled = f(*args)
    compiled = compiled if isinstance(compiled, tuple) else (compiled,)
    assert len(compiled) == len(expected)
    tols = []
    for got, exp in zip(compiled, expected):
        r, a = tolerance(got.dtype, reduction)
        tols.append((r if rtol is None else rtol, a if atol is None else atol))
        assert_matches(got, exp, got.dtype, *tols[-1])
    stages = interpret_stages(f, args)
    for name, func, run in stages:
        for got, exp, comp, tol in zip(run.outputs, expected, compiled, tols):
            try:
                assert_matches(got, exp, comp.dtype, *tol)
                assert_matches(got, comp.astype(np.float64) if comp.dtype.kind == "f"
                               else comp, comp.dtype, *tol)
            except AssertionError as e:
                raise AssertionError(f"interpreted after {name}:\n{func}\n{e}") from None
    return stages


def normal(rng, shape, dtype=F64):
    return rng.standard_normal(shape).astype(dtype)


def f64(x):
    return np.asarray(x, dtype=np.float64)


# ---------------------------------------------------------------------------------------
# 1. fixed definitions after every pass
# ---------------------------------------------------------------------------------------

@jd.compute
def conv2d_s2p1(X, W):
    N, C, H, Wd = X.shape
    F, _, KH, KW = W.shape
    P = jd.tensor((N, C, H + 2, Wd + 2))
    P[n, c, h, w] = X[n, c, h - 1, w - 1] if (h >= 1 and h <= H and w >= 1 and w <= Wd) else 0.0
    OH = (H + 2 - KH) // 2 + 1
    OW = (Wd + 2 - KW) // 2 + 1
    Y = jd.tensor((N, F, OH, OW))
    Y[n, f, y, x] = sum(P[n, c, 2 * y + r, 2 * x + s] * W[f, c, r, s]
                        for c in range(C) for r in range(KH) for s in range(KW))
    return Y


def conv2d_ref(x, w, stride=2, pad=1):
    from numpy.lib.stride_tricks import sliding_window_view
    xp = np.pad(f64(x), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    win = sliding_window_view(xp, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncyxrs,fcrs->nfyx", win, f64(w))


def make_blur():
    @jd.compute
    def blur(X):
        Y[i, j] = (X[i, j] + X[i + 1, j] + X[i + 2, j] + X[i, j + 2] + X[i + 2, j + 2]) / 5.0
        return Y
    return blur


def blur_ref(x):
    return (x[:-2, :-2] + x[1:-1, :-2] + x[2:, :-2] + x[:-2, 2:] + x[2:, 2:]) / 5.0


def make_padded_blur():
    @jd.compute
    def padded_blur(X):
        n, m = X.shape
        Y = jd.tensor((n, m))
        Y[i, j] = (X[i, j] + (X[i - 1, j] if i >= 1 else 0.0) + (X[i, j + 1] if j + 1 < m
                                                                 else 0.0)) / 3.0
        return Y
    return padded_blur


def padded_blur_ref(x):
    up = np.vstack([np.zeros((1, x.shape[1])), x[:-1]])
    right = np.hstack([x[:, 1:], np.zeros((x.shape[0], 1))])
    return (x + up + right) / 3.0


@jd.compute
def pos_rowsum(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k, where=X[i, k] > 0.0), name="S")


@jd.compute
def arg_max_min(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    AM = jd.tensor((n,), lambda i: jd.argmax(X[i, k], axis=k), name="AM")
    AN = jd.tensor((n,), lambda i: jd.argmin(X[i, k], axis=k), name="AN")
    return AM, AN


@jd.compute
def wrap_uint8(A, B):
    Y[i, j] = A[i, j] * B[i, j] + A[i, j]
    return Y


@jd.compute
def floordiv_mod(X, Z):
    Q[i] = X[i] // Z[i]
    R[i] = X[i] % Z[i] + X[i] // -3
    return Q, R


@jd.compute
def any_all_rows(X):
    n, m = X.shape
    AY[i] = any(X[i, k] > 1.0 for k in range(m))
    AL[i] = all(X[i, k] > -1.0 for k in range(m))
    return AY, AL


@jd.compute
def bool_logic(X, Z):
    Y[i] = (X[i] & Z[i]) | ~X[i]
    return Y


@jd.compute
def embedding(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y


@jd.compute
def threshold(X, thr, fill):
    Y[i] = X[i] if X[i] > thr else fill
    return Y


@jd.compute
def dot(A, B):
    (n,) = A.shape
    k = jd.reduce_axis(n, name="k")
    return jd.tensor((), lambda: jd.sum(A[k] * B[k], axis=k), name="D")


@jd.compute
def cumsum(X):
    (n,) = X.shape
    Y = jd.tensor((n,))
    Y[i] = sum(X[k] for k in range(i + 1))
    return Y


@jd.compute
def centered(X):
    n, m = X.shape
    mean[i] = sum(X[i, k] for k in range(m)) / m
    Y[i, j] = X[i, j] - mean[i]
    return Y, mean


def make_rowreduce(op):
    @jd.compute
    def red(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        return jd.tensor((n,), lambda i: op(X[i, k], axis=k), name="R")
    return red


def schedule(f, body):
    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        body(s)
    return f


def _matmul_tiled(s):
    C = s["C"]
    i, j = C.axis
    (k,) = C.reduce_axis
    io, ii = s.split(i, 4)
    jo, ji = s.split(j, 3)
    s.reorder(io, jo, k, ii, ji)
    s.vectorize(ji)
    s.parallel(io)


def _matmul_cache_write(s):
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


def _matmul_pack(s):
    C = s["C"]
    s.pack("B", C, 1, 4)
    i, j = C.axis
    jo, ji = s.split(j, 4)
    (k,) = C.reduce_axis
    s.reorder(i, jo, k, ji)


def _matmul_split_k(s):
    C = s["C"]
    (k,) = C.reduce_axis
    ko, ki = s.split(k, 2)
    i, j = C.axis
    s.reorder(ko, i, j, ki)
    s.unroll(ki)


def _softmax_at_rows(s):
    Y = s["Y"]
    i = Y.axis[0]
    for name in ("mx", "e", "s"):
        s.compute_at(s[name], Y, i)


def _softmax_split_rows(s):
    Y = s["Y"]
    i, j = Y.axis
    io, ii = s.split(i, 2)
    s.compute_inline(s["e"])
    s.compute_at(s["mx"], Y, io)
    s.compute_at(s["s"], Y, io)
    s.parallel(io)


def _blur_tiled(s):
    i, j = s["Y"].axis
    io, ii = s.split(i, 4)
    jo, ji = s.split(j, 8)
    s.reorder(io, jo, ii, ji)
    s.vectorize(ji)
    s.parallel(io)


def _blur_cache_read(s):
    Y = s["Y"]
    XC = s.cache_read("X", [Y])
    i, j = Y.axis
    io, ii = s.split(i, 3)
    s.compute_at(XC, Y, io)


def _masked_split(s):
    (i,) = s["S"].axis
    (k,) = s["S"].reduce_axis
    ko, ki = s.split(k, 6)
    s.unroll(ki)
    s.parallel(i)


def _rfactor(factor):
    def body(s):
        R = s["R"]
        (k,) = R.reduce_axis
        rf = s.rfactor(R, k, factor)
        s.vectorize(rf.axis[0])
    return body


def _conv_tiled(s):
    Y = s["Y"]
    n, f, y, x = Y.axis
    xo, xi = s.split(x, 2)
    s.parallel(f)
    s.vectorize(xi)


def _mm_args(rng, M, K, N, dtype=F32):
    return normal(rng, (M, K), dtype), normal(rng, (K, N), dtype)


def _case(name, rng):
    """(function, arguments, NumPy float64 reference(s)) of one fixed case."""
    if name.startswith("matmul-"):
        how = name.split("-")[1]
        f = make_matmul()
        if how != "auto":
            schedule(f, {"tiled": _matmul_tiled, "cache_write": _matmul_cache_write,
                         "pack": _matmul_pack, "split_k": _matmul_split_k}[how])
        a, b = _mm_args(rng, 6, 5, 11) if how != "auto" else _mm_args(rng, 9, 5, 37)
        if how == "split_k":
            a, b = a.astype(F64), b.astype(F64)
        return f, (a, b), f64(a) @ f64(b)
    if name == "matmul_int32":
        f = make_matmul()
        a = np.random.default_rng(1).integers(-50, 50, (5, 6)).astype(np.int32)
        b = np.random.default_rng(2).integers(-50, 50, (6, 7)).astype(np.int32)
        return f, (a, b), a @ b
    if name.startswith("softmax"):
        f = make_softmax()
        how = name.split("-")[1]
        if how != "auto":
            schedule(f, {"at_rows": _softmax_at_rows, "split_rows": _softmax_split_rows}[how])
        x = normal(rng, (5, 7), F32)
        return f, (x,), softmax_ref(f64(x))
    if name.startswith("conv2d"):
        f = conv2d_s2p1
        if name == "conv2d-tiled":
            f = schedule(jd.compute(conv2d_s2p1.pyfunc), _conv_tiled)
        x, w = normal(rng, (1, 2, 5, 6)), normal(rng, (3, 2, 3, 3))
        return f, (x, w), conv2d_ref(x, w)
    if name.startswith("blur"):
        f = make_blur()
        schedule(f, _blur_tiled if name == "blur-tiled" else _blur_cache_read)
        x = normal(rng, (9, 13))
        return f, (x,), blur_ref(x)
    if name == "padded_blur":
        x = normal(rng, (5, 6), F32)
        return make_padded_blur(), (x,), padded_blur_ref(f64(x))
    if name == "masked_sum":
        f = schedule(jd.compute(pos_rowsum.pyfunc), _masked_split)
        x = normal(rng, (5, 13))
        return f, (x,), np.where(x > 0, x, 0).sum(axis=1)
    if name == "argmax":
        x = rng.integers(0, 4, (4, 9)).astype(np.int32)
        return arg_max_min, (x,), (np.argmax(x, 1), np.argmin(x, 1))
    if name == "argmax_float":
        x = normal(rng, (3, 8))
        x[1, 3] = np.nan
        return arg_max_min, (x,), (np.argmax(x, 1), np.argmin(x, 1))
    if name == "uint8_wrap":
        a = rng.integers(0, 256, (3, 7)).astype(np.uint8)
        b = rng.integers(0, 256, (3, 7)).astype(np.uint8)
        return wrap_uint8, (a, b), a * b + a
    if name == "int8_floordiv":
        x = rng.integers(-128, 128, 20).astype(np.int8)
        z = rng.choice([-7, -3, -1, 1, 2, 5], 20).astype(np.int8)
        with np.errstate(all="ignore"):
            return floordiv_mod, (x, z), (x // z, x % z + x // np.int8(-3))
    if name == "any_all":
        x = normal(rng, (8, 5))
        return any_all_rows, (x,), ((x > 1.0).any(1), (x > -1.0).all(1))
    if name == "bool_logic":
        x, z = rng.integers(0, 2, 9).astype(bool), rng.integers(0, 2, 9).astype(bool)
        return bool_logic, (x, z), (x & z) | ~x
    if name.startswith("rfactor"):
        op, factor = {"rfactor-sum": (jd.sum, 4), "rfactor-max": (jd.max, 5)}[name]
        f = schedule(make_rowreduce(op), _rfactor(factor))
        x = normal(rng, (3, 11))
        return f, (x,), (x.sum(1) if op is jd.sum else x.max(1))
    if name == "gather":
        e = normal(rng, (6, 4), F32)
        ids = rng.integers(0, 6, 5).astype(np.int64)
        return embedding, (e, ids), f64(e[ids])
    if name == "scalars":
        x = normal(rng, 9, F32)
        return threshold, (x, 0.25, -1.0), np.where(f64(x) > 0.25, f64(x), -1.0)
    if name == "dot_0d":
        a, b = normal(rng, 7), normal(rng, 7)
        return dot, (a, b), np.array(a @ b)
    if name == "cumsum":
        x = normal(rng, 9)
        return cumsum, (x,), np.cumsum(x)
    if name == "two_outputs":
        x = normal(rng, (4, 6), F32)
        m = f64(x).mean(1)
        return centered, (x,), (f64(x) - m[:, None], m)
    raise KeyError(name)


CASES = ["matmul-auto", "matmul-tiled", "matmul-cache_write", "matmul-pack",
         "matmul-split_k", "matmul_int32", "softmax-auto", "softmax-at_rows",
         "softmax-split_rows", "conv2d-auto", "conv2d-tiled", "blur-tiled",
         "blur-cache_read", "padded_blur", "masked_sum", "argmax", "argmax_float",
         "uint8_wrap", "int8_floordiv", "any_all", "bool_logic", "rfactor-sum",
         "rfactor-max", "gather", "scalars", "dot_0d", "cumsum", "two_outputs"]


@pytest.mark.parametrize("name", CASES)
def test_fixed_definition_after_every_pass(rng, name):
    f, args, expected = _case(name, rng)
    stages = check_definition(f, args, expected)
    assert [s[0] for s in stages] == ["lower", "simplify", "partition_loops", "simplify_tails"]


def test_gather_out_of_range_raises_like_the_kernel(rng):
    e = normal(rng, (6, 4), F32)
    ids = np.array([0, 5, 6, 1])
    with pytest.raises(IndexError, match=r"index `ids\[i\]` into E is 6, outside \[0, 6\)"):
        embedding(e, ids)
    for name, func in pass_stages(embedding, (e, ids)):
        with pytest.raises(IndexError, match=r"index `ids\[i\]` into E is 6, "
                                             r"outside \[0, 6\)"):
            interpret(func, [e, ids])


# ---------------------------------------------------------------------------------------
# 2. the fuzzer's random definitions and schedules, after every pass
# ---------------------------------------------------------------------------------------

def _fuzz_check(f, args, v, err, dont_care, tree, steps):
    compare(f(*args), v, err, dont_care, tree, steps)
    for name, func, run in interpret_stages(f, args):
        try:
            compare(run.outputs[0], v, err, dont_care, tree, steps)
        except AssertionError as e:
            raise AssertionError(f"interpreted after {name}:\n{func}\n{e}") from None


@fuzz_settings(40)
@given(tree=trees, M=st.integers(1, 9), N=st.integers(1, 9),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_fuzz_elementwise_after_every_pass(tree, M, N, seed, data):
    tree = fold(tree)
    steps = data.draw(schedules(2, 0), label="schedule")
    A, B, b = inputs(seed, M, N)
    with np.errstate(all="ignore"):
        v, err, dont_care = ref(tree, ref_env(A, B, b, M, N))
    v = np.broadcast_to(np.asarray(v), (M, N))
    f = make_elementwise(tree)
    apply_schedule(f, steps)
    _fuzz_check(f, (A, B, b), v, err, dont_care, tree, steps)


@fuzz_settings(30)
@given(tree=trees, M=st.integers(1, 8), N=st.integers(1, 8), axis=st.sampled_from([0, 1]),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_fuzz_reduction_after_every_pass(tree, M, N, axis, seed, data):
    tree = fold(tree)
    if tree[0] == "c" or not any(uses(tree, leaf) for leaf in
                                 (("A", "B", "b", "j") if axis == 1 else ("A", "B", "i"))):
        tree = fold(("+", tree, ("A",)))
    steps = data.draw(schedules(1, 1), label="schedule")
    A, B, b = inputs(seed, M, N)
    with np.errstate(all="ignore"):
        v, err, dont_care = ref(tree, ref_env(A, B, b, M, N))
    v = np.broadcast_to(np.asarray(v), (M, N))
    err = np.broadcast_to(np.asarray(err, np.float64), (M, N))
    dont_care = np.broadcast_to(np.asarray(dont_care), (M, N))
    total = v.sum(axis=axis, dtype=v.dtype)
    eps = float(np.finfo(v.dtype).eps) if v.dtype.kind == "f" else 0.0
    total_err = err.sum(axis=axis) + v.shape[axis] * eps * np.abs(
        v.astype(np.float64)).sum(axis=axis)
    over = False
    if v.dtype.kind in "iu":
        over = np.abs(v.astype(np.float64).sum(axis=axis)) > np.iinfo(v.dtype).max / 2
    f = make_reduction(tree, axis)
    apply_schedule(f, steps)
    _fuzz_check(f, (A, B, b), total, total_err, dont_care.any(axis=axis) | over, tree, steps)


# a two-stage pipeline: T = a random elementwise tree of X, Z, w; Y = a sum of shifted
# reads of T (a stencil), under random splits, reorders, fuses, annotations, and T inlined,
# computed at the root (with its own splits) or at any loop of Y (a block of T per
# iteration, in a block-sized local buffer or the whole one)

OFFSETS = [(di, dj) for di in range(3) for dj in range(3)]


def make_pipeline(tree, taps):
    @jd.compute
    def pipe(X, Z, w):
        P, Q = X.shape

        def stencil(i, j):
            acc = None
            for di, dj in taps:
                t = T[i + di, j + dj]
                acc = t if acc is None else acc + t
            return acc
        T = jd.tensor((P, Q), lambda i, j: emit(tree, {"A": X[i, j], "B": Z[i, j], "b": w[j],
                                                       "i": i, "j": j}), name="T")
        return jd.tensor((P - 2, Q - 2), stencil, name="Y")
    return pipe


@st.composite
def pipeline_schedules(draw):
    steps, leaves = [], []
    for ax in ("i", "j"):
        how = draw(st.sampled_from(["none", "factor", "nparts"]))
        if how == "none":
            leaves.append(ax)
        else:
            steps.append(("split", ax, how, draw(st.integers(1, 5))))
            leaves += [f"{ax}.o", f"{ax}.i"]
    order = list(draw(st.permutations(leaves)))
    steps.append(("reorder", order))
    if len(order) >= 2 and draw(st.integers(0, 3)) == 0:
        steps.append(("fuse", order[0], order[1]))
        order = [f"{order[0]}+{order[1]}"] + order[2:]
    mode = draw(st.sampled_from(["root", "inline", "at"]))
    shared = False
    if mode == "at":
        shared = not draw(st.booleans())
        steps.append(("compute_at", draw(st.sampled_from(order)), not shared))
    elif mode == "inline":
        steps.append(("inline",))
    if draw(st.booleans()):
        steps.append(("vectorize", "Y", order[-1]))
    # (T in its whole buffer inside a parallel loop races: test_known_bug_shared_block_race)
    if len(order) > 1 and not shared and draw(st.booleans()):
        steps.append(("parallel", "Y", order[0]))
    for leaf in order[1:-1]:
        if draw(st.integers(0, 3)) == 0:
            steps.append(("unroll", "Y", leaf))
    if mode == "root" and draw(st.booleans()):
        steps.append(("split_T", draw(st.integers(1, 4))))
    if mode != "inline" and draw(st.booleans()):
        steps.append(("vectorize", "T", "j"))
    return steps


def apply_pipeline_schedule(f, steps):
    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y, T = s["Y"], s["T"]
        h = dict(zip("ij", Y.axis))
        ht = dict(zip("ij", T.axis))
        for step in steps:
            match step:
                case ("split", ax, how, n):
                    kw = {"nparts": n} if how == "nparts" else {"factor": n}
                    h[f"{ax}.o"], h[f"{ax}.i"] = s.split(h[ax], **kw)
                case ("reorder", order):
                    s.reorder(*(h[n] for n in order))
                case ("fuse", a, b):
                    h[f"{a}+{b}"] = s.fuse(h[a], h[b])
                case ("compute_at", loop, block):
                    s.compute_at(T, Y, h[loop], block_buffer=block)
                case ("inline",):
                    s.compute_inline(T)
                case ("split_T", n):
                    ht["j.o"], ht["j"] = s.split(ht["j"], n)
                    s.parallel(ht["i"])
                case (prim, "Y", leaf):
                    getattr(s, prim)(h[leaf])
                case (prim, "T", leaf):
                    getattr(s, prim)(ht[leaf])


@fuzz_settings(40)
@given(tree=trees, taps=st.lists(st.sampled_from(OFFSETS), min_size=1, max_size=3, unique=True),
       M=st.integers(1, 7), N=st.integers(1, 7), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_fuzz_pipeline_after_every_pass(tree, taps, M, N, seed, data):
    tree = fold(tree)
    if not uses(tree, "A"):
        tree = fold(("+", tree, ("A",)))
    steps = data.draw(pipeline_schedules(), label="schedule")
    P, Q = M + 2, N + 2
    rng = np.random.default_rng(seed)
    X, Z, w = rng.standard_normal((P, Q)), rng.standard_normal((P, Q)), rng.standard_normal(Q)
    env = {"A": X, "B": Z, "b": w[None, :], "i": np.arange(P, dtype=np.int64)[:, None],
           "j": np.arange(Q, dtype=np.int64)[None, :]}
    with np.errstate(all="ignore"):
        t, t_err, t_dc = ref(tree, env)
    t = np.broadcast_to(np.asarray(t), (P, Q))
    t_err = np.broadcast_to(np.asarray(t_err, np.float64), (P, Q))
    t_dc = np.broadcast_to(np.asarray(t_dc), (P, Q))
    v, err, dc, exact = None, 0.0, False, 0.0
    for di, dj in taps:
        part = t[di:di + M, dj:dj + N]
        with np.errstate(all="ignore"):
            v = part if v is None else v + part
        exact = exact + part.astype(np.float64)
        err = err + t_err[di:di + M, dj:dj + N]
        dc = dc | t_dc[di:di + M, dj:dj + N]
    eps = float(np.finfo(v.dtype).eps) if v.dtype.kind == "f" else 0.0
    err = err + len(taps) * eps * np.abs(exact)
    if v.dtype.kind in "iu":
        dc = dc | (np.abs(exact) > np.iinfo(v.dtype).max / 2)
    f = make_pipeline(tree, taps)
    apply_pipeline_schedule(f, steps)
    try:
        f(X, Z, w)
    except jd.ScheduleError:
        reject()
    _fuzz_check(f, (X, Z, w), v, err, dc, tree, (taps, steps))


# row statistics: T = a random elementwise tree, S[i] = sum over a row of T, Y = T + S, under
# random schedules of Y, S computed at the root or at a loop of Y (split or not), its
# reduction split and unrolled, T inlined or computed at a loop of Y or of S

def make_rowstat(tree):
    @jd.compute
    def rowstat(X, Z, w):
        P, Q = X.shape
        k = jd.reduce_axis(Q, name="k")
        T = jd.tensor((P, Q), lambda i, j: emit(tree, {"A": X[i, j], "B": Z[i, j], "b": w[j],
                                                       "i": i, "j": j}), name="T")
        S = jd.tensor((P,), lambda i: jd.sum(T[i, k], axis=k), name="S")
        return jd.tensor((P, Q), lambda i, j: T[i, j] + S[i], name="Y")
    return rowstat


@st.composite
def rowstat_schedules(draw):
    steps, leaves = [], []
    for ax in ("i", "j"):
        how = draw(st.sampled_from(["none", "factor", "nparts"]))
        if how == "none":
            leaves.append(ax)
        else:
            steps.append(("split", ax, how, draw(st.integers(1, 4))))
            leaves += [f"{ax}.o", f"{ax}.i"]
    order = list(draw(st.permutations(leaves)))
    steps.append(("reorder", order))
    if draw(st.booleans()):
        steps.append(("split_k", draw(st.integers(1, 4)), draw(st.booleans())))
    s_at = draw(st.sampled_from([None] + order))
    if s_at is not None:
        steps.append(("S_at", s_at))
    t_mode = draw(st.sampled_from(["inline", "root", "at_Y", "at_S"]))
    if t_mode == "at_Y":
        steps.append(("T_at_Y", draw(st.sampled_from(order))))
    elif t_mode == "at_S":
        steps.append(("T_at_S",))
    elif t_mode == "inline":
        steps.append(("T_inline",))
    if draw(st.booleans()):
        steps.append(("parallel", order[0]))
    if draw(st.booleans()):
        steps.append(("vectorize", order[-1]))
    return steps


def apply_rowstat_schedule(f, steps):
    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y, S, T = s["Y"], s["S"], s["T"]
        h = dict(zip("ij", Y.axis))
        for step in steps:
            match step:
                case ("split", ax, how, n):
                    kw = {"nparts": n} if how == "nparts" else {"factor": n}
                    h[f"{ax}.o"], h[f"{ax}.i"] = s.split(h[ax], **kw)
                case ("reorder", order):
                    s.reorder(*(h[n] for n in order))
                case ("split_k", n, unroll):
                    ko, ki = s.split(S.reduce_axis[0], n)
                    if unroll:
                        s.unroll(ki)
                case ("S_at", loop):
                    s.compute_at(S, Y, h[loop])
                case ("T_at_Y", loop):
                    s.compute_at(T, Y, h[loop])
                case ("T_at_S",):
                    s.compute_at(T, S, S.axis[0])
                case ("T_inline",):
                    s.compute_inline(T)
                case (prim, leaf):
                    getattr(s, prim)(h[leaf])


@pytest.mark.cpu_only     # (CPU schedules: compute_at nests a GPU refuses)
@fuzz_settings(30)
@given(tree=trees, M=st.integers(1, 6), N=st.integers(1, 6), seed=st.integers(0, 2**32 - 1),
       data=st.data())
def test_fuzz_rowstat_after_every_pass(tree, M, N, seed, data):
    tree = fold(tree)
    if not uses(tree, "A"):
        tree = fold(("+", tree, ("A",)))
    steps = data.draw(rowstat_schedules(), label="schedule")
    rng = np.random.default_rng(seed)
    X, Z, w = rng.standard_normal((M, N)), rng.standard_normal((M, N)), rng.standard_normal(N)
    with np.errstate(all="ignore"):
        t, t_err, t_dc = ref(tree, ref_env(X, Z.T, w, M, N))
    t = np.broadcast_to(np.asarray(t), (M, N))
    t_err = np.broadcast_to(np.asarray(t_err, np.float64), (M, N))
    t_dc = np.broadcast_to(np.asarray(t_dc), (M, N))
    eps = float(np.finfo(t.dtype).eps) if t.dtype.kind == "f" else 0.0
    with np.errstate(all="ignore"):
        s = t.sum(axis=1, dtype=t.dtype)
        v = t + s[:, None]
    exact_s = t.astype(np.float64).sum(axis=1)
    s_err = t_err.sum(axis=1) + N * eps * np.abs(t.astype(np.float64)).sum(axis=1)
    err = t_err + s_err[:, None] + 2 * eps * np.abs(t.astype(np.float64) + exact_s[:, None])
    dc = t_dc | t_dc.any(axis=1)[:, None]
    if t.dtype.kind in "iu":
        big = np.iinfo(t.dtype).max / 2
        dc = dc | (np.abs(exact_s) > big)[:, None] | (np.abs(t + exact_s[:, None]) > big)
    f = make_rowstat(tree)
    apply_rowstat_schedule(f, steps)
    try:
        f(X, Z, w)
    except jd.ScheduleError:
        reject()
    _fuzz_check(f, (X, Z, w), v, err, dc, tree, steps)


# ---------------------------------------------------------------------------------------
# 3. what the oracle found: each a strict xfail, so that the fix turns it into a failure
# that asks for the marker to go
# ---------------------------------------------------------------------------------------

@jd.compute
def gather_rows(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y


@pytest.mark.parametrize("n_ids,split", [(1, None), (3, 8)], ids=["one_id", "split_tail"])
def test_checked_load_in_a_loop_of_extent_one(rng, n_ids, split):
    """simplify removes a loop of extent one by substituting its variable: also in the
    run-time index checks of a checked Load (it once left the dead variable there)."""
    f = jd.compute(gather_rows.pyfunc)
    if split:
        schedule(f, lambda s: s.split(s["Y"].axis[0], split))   # i.o has extent one
    e = normal(rng, (6, 2))
    ids = rng.integers(0, 6, n_ids)
    stages = pass_stages(f, (e, ids))
    for name, func in stages[1:]:
        try:
            interpret(func, [e, ids])
        except ScopeError as err:
            raise jd.CompileError(f"after {name}: {err}") from None
    assert_matches(f(e, ids), e[ids], F64)


@jd.compute
def blur_two_stage(X):
    n, m = X.shape
    T[i, j] = X[i, j] * 2.0
    Y[i, j] = T[i, j] + T[i + 1, j]
    return Y


def test_overlapping_shared_blocks_at_a_parallel_loop_are_refused(rng):
    """compute_at(..., block_buffer=False) at a loop inside a parallel loop let the
    iterations compute overlapping blocks (here the halo row) into one shared buffer,
    a race the interpreter's RaceError found; lowering refuses it now."""
    f = jd.compute(blur_two_stage.pyfunc)

    def sched(s):
        Y = s["Y"]
        io, ii = s.split(Y.axis[0], 2)
        s.compute_at(s["T"], Y, io, block_buffer=False)
        s.parallel(io)
    schedule(f, sched)
    x = normal(rng, (7, 3))
    with pytest.raises(jd.ScheduleError, match="blocks of T .* overlap"):
        check_definition(f, (x,), 2 * (x[:-1] + x[1:]))

