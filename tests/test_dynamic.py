"""Dynamic kernels (`@jd.compute(dynamic=...)`): one kernel per rank, size-1 pattern and
dtype, checked against NumPy in float64 on fresh random inputs over many sizes (0 and 1,
odd, below and above the vector width), with the compile count, the run-time shape
checks, the static proofs (no run-time checks in the lowered text) and the disk cache
across processes."""
from __future__ import annotations

import collections
import functools
import inspect
import itertools
import json
import logging
import math
import pprint
import re
import os
import subprocess
import string
import sys
import textwrap
import warnings

import numpy as np
import pytest

import jitdl as jd
from jitdl.errors import ArgumentError, DefinitionError, PerformanceWarning
from jitdl.target import get as get_target

RNG = np.random.default_rng(7)
SIZES = [0, 1, 2, 3, 5, 8, 17, 64, 101]


def kernels(f):
    """Kernels f has built or loaded in this process (a kernel from the disk cache, or
    one whose loop IR another test compiled, counts as well)."""
    return len(f.cache_info()["events"])


def rand(*shape):
    return RNG.standard_normal(shape)


def test_elementwise_one_kernel_for_every_size_of_a_pattern():
    @jd.compute(dynamic=True)
    def scale(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] * 2 + Y[i])
    for n, m in [(3, 5), (7, 9), (0, 4), (4, 0), (2, 17), (33, 65), (6, 2)]:
        x, y = rand(n, m), rand(n, m)
        np.testing.assert_allclose(scale(x, y), x * 2 + y)
    assert kernels(scale) == 1
    x, y = rand(1, 6), rand(1, 6)          # a dimension of size 1: another pattern
    np.testing.assert_allclose(scale(x, y), x * 2 + y)
    assert kernels(scale) == 2


def _broadcast(shape, idx):
    """The index of a broadcast operand: 0 in its dimensions of size 1 (the op library's
    rule; a dynamic argument's size-1 dimensions stay the constant 1)."""
    return tuple(0 if isinstance(d, int) and d == 1 else i for d, i in zip(shape, idx))


def test_broadcast_patterns_are_part_of_the_key():
    @jd.compute(dynamic=True)
    def badd(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] + Y[_broadcast(Y.shape, i)])
    for n, m in [(3, 5), (9, 2), (4, 31)]:
        for yshape in [(n, m), (1, m), (n, 1), (1, 1)]:
            x, y = rand(n, m), rand(*yshape)
            np.testing.assert_allclose(badd(x, y), x + y)
    assert kernels(badd) == 4


def test_runtime_shape_mismatch_names_both_arguments():
    @jd.compute(dynamic=True)
    def add(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] + Y[i])
    add(rand(3, 4), rand(3, 4))
    with pytest.raises(ArgumentError) as e:
        add(rand(3, 4), rand(3, 5))
    assert str(e.value).startswith(
        "add(): shape mismatch: argument 'X' has size 4 in dimension 1 but argument 'Y' "
        "has size 5 in dimension 1 (X (3, 4), Y (3, 5))")
    with pytest.raises(ArgumentError, match="'X' has size 2 in dimension 0"):
        add(rand(2, 4), rand(7, 4))
    with pytest.raises(ValueError, match="shape mismatch"):     # NumPy's class for shapes
        add(rand(2, 4), rand(7, 4))
    assert kernels(add) == 1


@pytest.mark.parametrize("n", SIZES)
def test_index_patterns(n):
    @jd.compute(dynamic=True)
    def patterns(X, Y):
        m, k = X.shape[0], Y.shape[0]
        cat = jd.tensor((m + k,), lambda i: jd.select(i < m, X[i], Y[i - m]), name="cat")
        flip = jd.tensor((m,), lambda i: X[m - 1 - i], name="flip")
        pad = jd.tensor((m + 2 * 3,), lambda i: jd.select((i >= 3) & (i < m + 3),
                                                          X[i - 3], -1.0), name="pad")
        rep = jd.tensor((3 * m,), lambda i: X[i // 3], name="rep")
        tile = jd.tensor((2 * m,), lambda i: X[i % m], name="tile")
        return cat, flip, pad, rep, tile
    for k in (0, 1, 6):
        x, y = rand(n), rand(k)
        cat, flip, pad, rep, tile = patterns(x, y)
        np.testing.assert_array_equal(cat, np.concatenate([x, y]))
        np.testing.assert_array_equal(flip, x[::-1])
        np.testing.assert_array_equal(pad, np.pad(x, 3, constant_values=-1.0))
        np.testing.assert_array_equal(rep, np.repeat(x, 3))
        np.testing.assert_array_equal(tile, np.tile(x, 2))
    text = patterns.lower(rand(max(n, 2)), rand(6))
    assert "]!" not in text and "select(" in text


def test_index_notation_and_generator_reductions():
    @jd.compute(dynamic=True)
    def mm(A, B):
        C[i, j] = sum(A[i, k] * B[k, j] for k in range(A.shape[1]))
        return C

    @jd.compute(dynamic=True)
    def double(X):
        Y[i, j] = X[i, j] * 2
        return Y
    for n, k, m in [(3, 4, 5), (17, 9, 33), (1, 2, 1), (0, 3, 2), (4, 0, 3)]:
        a, b = rand(n, k), rand(k, m)
        np.testing.assert_allclose(mm(a, b), a @ b, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(double(a), a * 2)
    assert kernels(mm) == 2 and kernels(double) == 2     # (1, 2, 1): another pattern
    with pytest.raises(ArgumentError, match="argument 'A' has size 4 in dimension 1 but "
                                            "argument 'B' has size 5 in dimension 0"):
        mm(rand(3, 4), rand(5, 2))


def test_transpose_and_take():
    @jd.compute(dynamic=True)
    def tr(X):
        n, m = X.shape
        return jd.tensor((m, n), lambda i, j: X[j, i])

    @jd.compute(dynamic=True)
    def take(X, ids):
        return jd.tensor((ids.shape[0], X.shape[1]), lambda i, j: X[ids[i], j])
    for n, m in [(2, 3), (17, 5), (0, 3), (8, 33)]:
        x = rand(n, m)
        np.testing.assert_array_equal(tr(x), x.T)
        if n:
            ids = RNG.integers(0, n, size=7)
            np.testing.assert_array_equal(take(x, ids), x[ids])
    assert kernels(tr) == 1 and kernels(take) == 1
    assert "]!" not in tr.lower(rand(3, 4))      # `X[...]!`: an index checked at run time
    assert "]!" in take.lower(rand(3, 4), np.array([0, 1]))
    with pytest.raises(IndexError, match=r"index `ids\[.*\]` into X is 5, outside "
                                         r"\[0, X_n0\) \(X_n0 = 5\)"):
        take(rand(5, 3), np.array([0, 5]))


def test_whole_array_argmax_of_a_flattened_or_shortened_array():
    """A 1-d argmax over a size that is an expression of the sizes (X_n0 * X_n1 of a
    flattened X, X_n0 - 1 of a diff) reads it in blocks too: the tail's read, at
    n // 512 * 512 + t, which the prover cannot place at 0 or more there, is checked at
    run time (it raised a DefinitionError)."""
    @jd.compute(dynamic=True)
    def flat(X):
        return jd.numpy.argmax(X.reshape(-1)), jd.numpy.argmin(jd.numpy.ravel(X))

    @jd.compute(dynamic=True)
    def diffs(X):
        return jd.numpy.argmax(jd.numpy.diff(X)), jd.numpy.argmin(jd.numpy.diff(X))
    for shape in [(2, 3), (3, 1500), (64, 64), (9, 513)]:
        x = rand(*shape)
        x.flat[-1] = 9.0
        assert [int(r) for r in flat(x)] == [np.argmax(x), np.argmin(x)]
        d = rand(shape[0] * shape[1])
        assert [int(r) for r in diffs(d)] == [np.argmax(np.diff(d)), np.argmin(np.diff(d))]
    assert kernels(flat) == 1 and kernels(diffs) == 1


def test_row_reductions_softmax_and_argmax():
    @jd.compute(dynamic=True)
    def softmax(X):
        n, m = X.shape
        k = jd.reduce_axis(m)
        mx = jd.tensor((n,), lambda i: jd.max(X[i, k], axis=k))
        e = jd.tensor((n, m), lambda i, j: jd.exp(X[i, j] - mx[i]))
        k2 = jd.reduce_axis(m)
        s = jd.tensor((n,), lambda i: jd.sum(e[i, k2], axis=k2))
        return jd.tensor((n, m), lambda i, j: e[i, j] / s[i])

    @jd.compute(dynamic=True)
    def stats(X):
        n, m = X.shape
        k, c = jd.reduce_axis(m), jd.reduce_axis(n)
        return (jd.tensor((n,), lambda i: jd.argmax(X[i, k], axis=k)),
                jd.tensor((m,), lambda j: jd.sum(X[c, j], axis=c)))
    for n, m in [(2, 3), (5, 17), (33, 8), (3, 100)]:
        x = rand(n, m)
        ref = np.exp(x - x.max(1, keepdims=True))
        np.testing.assert_allclose(softmax(x), ref / ref.sum(1, keepdims=True), rtol=1e-12)
        am, cols = stats(x)
        np.testing.assert_array_equal(am, x.argmax(1))
        np.testing.assert_allclose(cols, x.sum(0), rtol=1e-12, atol=1e-12)
    assert kernels(softmax) == 1 and kernels(stats) == 1
    assert stats(rand(0, 4))[1].tolist() == [0.0] * 4


def test_user_schedule_with_compute_at_on_symbolic_rows():
    @jd.compute(dynamic=True)
    def norm(X):
        n, m = X.shape
        k = jd.reduce_axis(m)
        s = jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="s")
        return jd.tensor((n, m), lambda i, j: X[i, j] / s[i], name="Y")

    @jd.schedule(norm)
    def _(s, cfg):
        i, j = s["Y"].axis
        s.compute_at(s["s"], s["Y"], i)
        s.vectorize(s.split(j, 4)[1])
    for n, m in [(3, 4), (9, 13), (2, 1)]:
        x = rand(n, m) + 3
        np.testing.assert_allclose(norm(x), x / x.sum(1, keepdims=True), rtol=1e-12)
    text = norm.lower(rand(3, 5))
    assert "vectorized" in text and "s_acc" in text and "]!" not in text


def test_only_named_parameters_are_dynamic():
    @jd.compute(dynamic=("X",))
    def mv(X, W):
        n, m = X.shape
        k = jd.reduce_axis(m)
        return jd.tensor((n,), lambda i: jd.sum(X[i, k] * W[k], axis=k))
    w = rand(4)
    for n in (2, 9, 40):
        x = rand(n, 4)
        np.testing.assert_allclose(mv(x, w), x @ w)
    assert kernels(mv) == 1
    x, w = rand(3, 5), rand(5)
    np.testing.assert_allclose(mv(x, w), x @ w)
    assert kernels(mv) == 2           # a new shape of W: a new kernel


def test_dynamic_in_some_dimensions_keeps_the_others_concrete(tmp_path):
    """dynamic={"X": 0}: the rows of X are symbolic, its row length stays the call's (a
    loop of known extent), so one kernel serves every count of rows of one length and
    another length compiles another; negative dimensions count from the end."""
    @jd.compute(dynamic={"X": 0})
    def rowsum(X):
        n, m = X.shape
        k = jd.reduce_axis(m)
        return jd.tensor((n,), lambda i: jd.sum(X[i, k] * X[i, k], axis=k))
    for n in (0, 3, 40, 257):
        x = rand(n, 24)
        np.testing.assert_allclose(rowsum(x), (x * x).sum(axis=1), rtol=1e-12)
    assert kernels(rowsum) == 1
    for x in (rand(7, 9), rand(1, 24)):     # (a size of 1 is part of the key, as always)
        np.testing.assert_allclose(rowsum(x), (x * x).sum(axis=1), rtol=1e-12)
    assert kernels(rowsum) == 3
    # (after the counts: with --target cuda the calls' kernels are the GPU's, and lower()
    # of NumPy arrays builds the CPU's loop IR besides)
    assert "X: float64[X_n0, 24]" in rowsum.lower(rand(5, 24))
    last = jd.compute(dynamic={"X": -1})(rowsum.pyfunc)
    assert "X: float64[6, X_n1]" in last.lower(rand(6, 30))
    with pytest.raises(ArgumentError, match=r"argument 'X' has 1 dimension.*dimension -2"):
        jd.compute(dynamic={"X": -2})(rowsum.pyfunc)(rand(6))
    # the dimensions given survive a copy and a pickle, and an exported file
    import cloudpickle
    for g in (rowsum.with_config(), cloudpickle.loads(cloudpickle.dumps(rowsum))):
        assert "X: float64[X_n0, 24]" in g.lower(rand(5, 24))
    path = tmp_path / "rowsum.jdx"
    rowsum.export(str(path), rand(4, 24))
    loaded = jd.load(str(path))
    for n in (2, 50):
        x = rand(n, 24)
        np.testing.assert_allclose(loaded(x), (x * x).sum(axis=1), rtol=1e-12)
    with pytest.raises(ArgumentError, match="no exported kernel"):
        loaded(rand(3, 25))


def test_dynamic_dimensions_agree_with_concrete_ones_at_the_call():
    """X's columns concrete, W symbolic: W's length must equal them, checked at the call."""
    @jd.compute(dynamic={"X": (0,), "W": True})
    def mv(X, W):
        n, m = X.shape
        k = jd.reduce_axis(m)
        return jd.tensor((n,), lambda i: jd.sum(X[i, k] * W[k], axis=k))
    for n in (2, 9):
        x, w = rand(n, 6), rand(6)
        np.testing.assert_allclose(mv(x, w), x @ w, rtol=1e-12)
    assert kernels(mv) == 1
    with pytest.raises(ArgumentError, match="mismatch"):
        mv(rand(3, 6), rand(7))


@pytest.mark.parametrize("bad", [{"X": "0"}, {"X": 1.0}, {"X": (0, None)}, {"X": False},
                                 {"Z": 0}, {"X": (0, True)}, {"X": np.bool_(True)}])
def test_dynamic_dimensions_that_are_not_ints_are_refused(bad):
    with pytest.raises(ArgumentError, match="dynamic"):
        jd.compute(dynamic=bad)(lambda X: X)


def test_dynamic_dimensions_may_be_numpy_integers():
    f = jd.compute(dynamic={"X": np.int64(0)})(lambda X: jd.numpy.sum(X, axis=1))
    assert f._dynamic_arg() == {"X": (0,)}
    x = rand(5, 3)
    np.testing.assert_allclose(f(x), x.sum(axis=1), rtol=1e-12)


def test_vectorised_main_part_and_serial_tail():
    @jd.compute(dynamic=True)
    def add(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] + Y[i])
    text = add.lower(rand(10), rand(10))
    assert "vectorized" in text and "if " in text and "]!" not in text
    main = text.split("vectorized", 1)[1].split("for", 1)[0]
    assert " < X_n0" not in main                    # no guard in the main part
    for n in SIZES + [1000, 4097]:
        x, y = rand(n), rand(n)
        np.testing.assert_array_equal(add(x, y), x + y)


def test_tail_of_a_split_runs_at_most_once_as_a_block():
    """The tail of a split by the vector width has at most one useful iteration: a guarded block, not a
    loop (LLVM cannot see that such a loop runs once, and unrolled it into pages); a
    tail whose guard fails for every iteration (the parts of an rfactor) is dropped."""
    @jd.compute(dynamic=True)
    def add(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] + Y[i])
    text = add.lower(rand(10), rand(10))
    v = get_target("cpu").lanes(8)                  # (4 float64 lanes on AVX2, 8 on AVX-512)
    assert f"if X_n0 // {v} < (X_n0 + {v - 1}) // {v}:\n      i0_o = X_n0 // {v}\n" in text, text
    assert f"for i0_o in range(X_n0 // {v}," not in text
    for n in SIZES + [4097]:
        x, y = rand(n), rand(n)
        np.testing.assert_array_equal(add(x, y), x + y)

    @jd.compute(dynamic=True)
    def total(X):
        k = jd.reduce_axis(X.shape[0])
        return jd.tensor((), lambda: jd.sum(X[k], axis=k))
    text = total.lower(rand(10))
    assert "if " not in text.split("else:")[0].split("parallel", 1)[1], text
    for n in SIZES + [4097]:
        x = rand(n)
        np.testing.assert_allclose(total(x), x.sum())


def test_the_tail_of_a_split_runs_to_the_size_not_the_factor():
    """A split of a symbolic extent by f: the partial last block's inner loop runs to
    n - jo*f. It ran f times under a guard, so a split by 2**31 (a factor past any size,
    as a static split allows) of a 5 x 7 array ran 2**31 iterations a row: a call that
    never returned (1.3 s a call with f = 10**6)."""
    @jd.compute(dynamic=True)
    def double(X):
        return jd.tensor(X.shape, lambda i, j: X[i, j] * 2, name="Y")

    @jd.schedule(double, target="cpu")
    def sched(s, cfg):
        s.split(s["Y"].axis[1], 2**31)
    x = rand(5, 7)
    text = double.lower(x)
    assert "for j_i in range(min(max(X_n1 - j_o * 2147483648, 0), 2147483648)):" in text, text
    assert "< X_n1:" not in text, text
    for shape in [(5, 7), (1, 1), (3, 0), (2, 100)]:
        x = rand(*shape)
        np.testing.assert_array_equal(double(x), x * 2)


def test_the_tail_of_a_split_of_a_split_runs_to_the_size_not_the_factor():
    """A split of a split's outer loop (k by 4, then k.o by 2**31): the tail's k.o.i ran
    from the end of its full blocks to the factor, each iteration under the guard
    `k_o_i + k_o_o * 2**31 < ceil(n / 4)` that fails from ceil(n / 4) on, so a row sum of
    a 5 x 7 array took 8 s a call; the tail now stops where its only guard fails for
    good."""
    @jd.compute(dynamic=True)
    def rowsum(X):
        Y[i] = sum(X[i, j] for j in range(X.shape[1]))
        return Y

    @jd.schedule(rowsum, target="cpu")
    def sched(s, cfg):
        ko, ki = s.split(s["Y"].reduce_axis[0], 4)
        s.split(ko, 2**31)
    x = rand(5, 7)
    text = rowsum.lower(x)
    tail = text[text.rindex("for j_o_i in range("):].split("\n")[0]
    assert "+ 2147483648 -" not in tail, text
    for shape in [(5, 7), (1, 1), (3, 0), (0, 3), (2, 100), (4, 9)]:
        x = rand(*shape)
        np.testing.assert_allclose(rowsum(x), x.sum(axis=1))


def test_tune_says_it_needs_concrete_shapes():
    @jd.compute(dynamic=True)
    def add(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] + Y[i])
    with pytest.raises(ArgumentError, match="tuning works on concrete shapes"):
        add.tune(rand(4), rand(4), trials=2)


def test_strided_inputs_and_out():
    @jd.compute(dynamic=True)
    def add(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] + Y[i])
    x, y = rand(6, 10), rand(10, 6)
    np.testing.assert_array_equal(add(x, y.T), x + y.T)
    out = np.empty((6, 10))
    assert add(x, x, out=out) is out
    np.testing.assert_array_equal(out, x + x)


MODULE = '''
import jitdl as jd

@jd.compute(dynamic=True)
def addmul(X, Y):
    return jd.tensor(X.shape, lambda *i: X[i] * Y[i] + X[i])
'''

CHILD = '''
import json, sys
import numpy as np
import dynmod
rng = np.random.default_rng(int(sys.argv[1]))
ok = True
for n in json.loads(sys.argv[2]):
    x, y = rng.standard_normal((n, 3)), rng.standard_normal((n, 3))
    ok &= bool(np.allclose(dynmod.addmul(x, y), x * y + x, rtol=1e-14, atol=1e-14))
events = dynmod.addmul.cache_info()["events"]
print("RESULT " + json.dumps({"ok": ok, "results": [e["result"] for e in events]}))
'''


def test_disk_cache_across_processes(tmp_path):
    (tmp_path / "dynmod.py").write_text(MODULE)
    (tmp_path / "child.py").write_text(CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITDL_")}
    env.update(JITDL_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()] + (
                   [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))

    def child(seed, sizes):
        p = subprocess.run([sys.executable, "child.py", str(seed), json.dumps(sizes)],
                           cwd=str(tmp_path), env=env, capture_output=True, text=True,
                           timeout=180)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout.split("RESULT ", 1)[1])
    first = child(1, [5, 17, 0])
    assert first == {"ok": True, "results": ["compiled"]}
    second = child(2, [9, 2, 1000])             # other sizes: the same kernel, from disk
    assert second["ok"] and second["results"][0].startswith("hit")


def test_export_and_load(tmp_path):
    @jd.compute(dynamic=True)
    def add(X, Y):
        return jd.tensor(X.shape, lambda *i: X[i] + Y[i])
    path = tmp_path / "add.jdx"
    add.export(str(path), rand(4, 5), rand(4, 5))
    loaded = jd.load(str(path))
    for n, m in [(2, 3), (7, 11)]:
        x, y = rand(n, m), rand(n, m)
        np.testing.assert_array_equal(loaded(x, y), x + y)


def test_an_export_serves_sizes_of_1_and_their_broadcasting(tmp_path):
    """A dynamic export held the example's size pattern only: a loaded export called with
    X of shape (1, n) (a batch of one) was 'no exported kernel for ... float64[1, None]',
    where the definition promises one kernel for every batch size. The export now holds
    each pattern of sizes 1, so broadcasting (X (1, n) + Y (m, n)) and a squeeze give
    NumPy's answer, as the function in this process does."""
    @jd.compute(dynamic=True)
    def add(X, Y):
        return X * 2 + Y
    @jd.compute(dynamic=True)
    def squeezed(X):
        return jd.numpy.squeeze(X) + 1
    add.export(str(tmp_path / "add.jdx"), rand(3, 5), rand(3, 5))
    squeezed.export(str(tmp_path / "sq.jdx"), rand(3, 5))
    g, s = jd.load(str(tmp_path / "add.jdx")), jd.load(str(tmp_path / "sq.jdx"))
    for xs, ys in [((1, 5), (1, 5)), ((1, 7), (4, 7)), ((4, 1), (4, 6)), ((6, 3), (1, 3)),
                   ((1, 1), (5, 2)), ((1, 1), (1, 1)), ((0, 3), (1, 3)), ((1, 0), (3, 0)),
                   ((13, 17), (13, 17))]:
        x, y = rand(*xs), rand(*ys)
        want = x * 2 + y
        got = np.full(want.shape, np.nan)
        assert g(x, y, out=got) is got
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(g(x, y), add(x, y))
        x1 = rand(*xs)
        np.testing.assert_array_equal(s(x1), np.squeeze(x1) + 1)
    with pytest.raises(jd.ArgumentError, match="shape mismatch"):
        g(rand(2, 5), rand(3, 5))
    # an example of size 1 serves the other sizes too
    add.export(str(tmp_path / "one.jdx"), rand(1, 4), rand(1, 4))
    x, y = rand(9, 4), rand(9, 4)
    np.testing.assert_array_equal(jd.load(str(tmp_path / "one.jdx"))(x, y), x * 2 + y)


def test_an_export_of_many_dynamic_dimensions_says_which_patterns_it_holds(
        tmp_path, monkeypatch):
    import jitdl.api
    monkeypatch.setattr(jitdl.api, "EXPORT_PATTERNS", 3)
    @jd.compute(dynamic=True)
    def add(X, Y):
        return X + Y
    with pytest.warns(PerformanceWarning, match=r"16 patterns of sizes 1.*first 3 .*dynamic=\{'X': 0\}"):
        add.export(str(tmp_path / "add.jdx"), rand(3, 5), rand(3, 5))
    g = jd.load(str(tmp_path / "add.jdx"))
    x, y = rand(1, 5), rand(4, 5)
    np.testing.assert_array_equal(g(x, y), x + y)       # (one dimension of size 1: kept)
    with pytest.raises(ArgumentError, match="no exported kernel"):
        g(rand(1, 1), rand(4, 5))


@pytest.mark.cpu_only     # (a schedule for target='cpu')
def test_a_split_knob_of_a_symbolic_loop(tmp_path):
    """cfg.split("ti", i) in the schedule of a dynamic definition was a SymbolicValueError
    from inside jitdl ('the condition `A_n0 > 8` is symbolic ... write a select'): the
    default factor was chosen from the extent. A symbolic extent now has the powers of two
    to 64 as options, 8 the default; the kernel (and its export) serves every size."""
    @jd.compute(dynamic=True)
    def matmul(A, B):
        n, k = A.shape
        _, m = B.shape
        C[i, j] = sum(A[i, r] * B[r, j] for r in range(k))
        return C

    @jd.schedule(matmul, target="cpu")
    def matmul_cpu(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        io, ii = s.split(i, cfg.split("ti", i))
        jo, ji = s.split(j, cfg.split("tj", j))
        s.reorder(io, jo, k, ii, ji)
        s.vectorize(ji)

    a, b = rand(13, 7), rand(7, 9)
    space = matmul.config_space(a, b)
    assert len(space) == 49 and space.knobs["ti"].options[0] == 8
    with pytest.raises(jd.ScheduleError, match="split factor of a loop of a size known"):
        matmul.with_config(ti=0)(a, b)
    tiled = matmul.with_config(ti=4, tj=2)
    tiled.export(str(tmp_path / "mm.jdx"), a, b)
    loaded = jd.load(str(tmp_path / "mm.jdx"))
    for n, k, m in [(13, 7, 9), (0, 3, 5), (1, 1, 1), (31, 1, 17), (97, 61, 3), (2, 5, 1)]:
        a, b = rand(n, k), rand(k, m)
        for f in (matmul, tiled, loaded):
            got = np.full((n, m), np.nan)
            f(a, b, out=got)
            np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)


def test_call_time_shape_and_out_errors_name_the_callers_line(tmp_path):
    """A dynamic kernel's 'shape mismatch' (and out= errors of any kernel) named no line,
    or `File "<string>"`: the generated per-call code's frame was taken for the user's.
    Each now names the line of the call, in this process and from a loaded export."""
    import inspect

    @jd.compute(dynamic=True)
    def both(X, Y):
        return X + Y * 3, X.sum(axis=1)
    x, y = rand(3, 5), rand(3, 5)
    both.export(str(tmp_path / "both.jdx"), x, y)
    for f in (both, jd.load(str(tmp_path / "both.jdx"))):
        for _ in range(2):          # (the first call and the compiled per-call path)
            with pytest.raises(ArgumentError, match="shape mismatch") as e:
                line = inspect.currentframe().f_lineno + 1
                f(x, rand(4, 5))
            assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)
            for out, what in (((np.empty((3, 6)), np.empty(3)), "expected shape"),
                              ((np.empty((3, 5)),), "must hold 2"),
                              (np.empty((3, 5)), "must be a tuple")):
                with pytest.raises(ArgumentError, match=what) as e:
                    line = inspect.currentframe().f_lineno + 1
                    f(x, y, out=out)
                assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)
        o, s = np.full((3, 5), np.nan), np.full(3, np.nan)
        f(x, y, out=(o, s))
        np.testing.assert_allclose(o, x + y * 3, rtol=1e-12)
        np.testing.assert_allclose(s, x.sum(axis=1), rtol=1e-12)


def test_an_exported_functions_binding_errors_say_what_a_functions_say(tmp_path):
    """g(x, Z=y) of a loaded export of `def add(X, Y)` said "missing a required argument:
    'Y'" (signature.bind's first complaint), where the function itself says the keyword
    'Z' is unknown; now both say the same words (api._binding_problem)."""
    @jd.compute(dynamic=True)
    def add(X, Y):
        return X + Y
    x = np.random.default_rng(4).standard_normal((3, 4))
    g = jd.load(add.export(str(tmp_path / "add.jdx"), x, x))
    for call, words in [(lambda f: f(x, Z=x), "got an unexpected keyword argument 'Z'"),
                        (lambda f: f(x, x, x), "takes 2 positional arguments but 3"),
                        (lambda f: f(x, X=x), "got two values for argument 'X'"),
                        (lambda f: f(Y=x), "is missing the argument 'X'")]:
        texts = []
        for f in (add, g):
            with pytest.raises(jd.ArgumentError) as e:
                call(f)
            texts.append(e.value.message)
        assert texts[0] == texts[1] and words in texts[1], texts


def test_a_loaded_exports_missing_kernel_error_lists_the_nearest_kernels(tmp_path):
    """A dynamic export holds a kernel per pattern of sizes 1 (16 for two matrices): the
    'no exported kernel' error listed them all, and took the first kernel differing in
    one argument as the nearest (int16[1, 4] for a call of int16[None, 1], not
    int16[None, 4]). It now lists the 8 nearest and how many more, the nearest being the
    one differing in fewest arguments, then dimensions and dtypes."""
    @jd.compute(dynamic=True)
    def add(X, Y):
        return X + Y
    i32 = np.ones((3, 4), np.int32)
    g = jd.load(add.export(str(tmp_path / "add.jdx"), i32, i32))
    with pytest.raises(ArgumentError) as e:
        g(np.ones((3, 1)), np.ones((1, 3), np.int32))
    text = e.value.message
    assert "argument 'X' is float64[None, 1], the nearest exported kernel takes " \
           "int32[None, 1];" in text, text
    assert text.endswith("; and 8 more") and text.count("(int32[") == 8, text
    assert text.split("the file holds: ")[1].startswith("(int32[None, 1], int32[1, None])")

    @jd.compute(dynamic={"X": 0})
    def rows(X, v):
        return X * v
    g = jd.load(rows.export(str(tmp_path / "rows.jdx"), np.ones((1, 4), np.int16),
                            np.int16(3)))
    with pytest.raises(ArgumentError, match=r"the nearest exported kernel takes "
                       r"int16\[None, 4\]; the file holds: \(int16\[1, 4\], int16\); "
                       r"\(int16\[None, 4\], int16\)\n"):
        g(np.ones((3, 1), np.int16), np.int16(3))
    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    np.testing.assert_array_equal(g(x, np.int16(3)), x * np.int16(3))


def test_a_loaded_export_says_why_the_definition_refused_a_pattern(tmp_path):
    """A pattern of sizes 1 the definition refuses at export (here squeeze(X, axis=0) of
    an X whose first dimension is not 1) has no kernel: the loaded function said only
    'no exported kernel', where the function itself names the definition's error. The
    export keeps each refusal, and the loaded function's error gives it."""
    @jd.compute(dynamic=True)
    def first_row(X):
        return jd.numpy.squeeze(X, axis=0) * 2
    x = rand(1, 5)
    g = jd.load(first_row.export(str(tmp_path / "row.jdx"), x))
    np.testing.assert_array_equal(g(x), x[0] * 2)
    x1 = rand(1, 1)
    np.testing.assert_array_equal(g(x1), x1[0] * 2)
    for f in (first_row, g):
        with pytest.raises(jd.JitdlError, match="cannot select an axis to squeeze out"):
            f(rand(3, 5))
    with pytest.raises(ArgumentError, match=r"no exported kernel for arguments "
                       r"\(float64\[None, None\]\): the definition refused these sizes "
                       r"at export \(ShapeError: cannot select an axis"):
        g(rand(3, 5))


def test_jd_numpy_stages_of_two_dynamic_arguments_agree_at_the_call():
    """An intermediate of one argument's size read with another argument at the same
    index: the two sizes must agree, checked at the call (this was refused: the bounds
    prover could not show idx < B_n0)."""
    import jitdl.numpy as jnp
    rng = np.random.default_rng(3)
    f = jd.compute(dynamic=True)(lambda A, B: jnp.sqrt(jnp.abs(A)) + B * 2)
    g = jd.compute(dynamic=True)(lambda A, B: jnp.abs(A) + jnp.abs(B))
    for n in (1, 7, 300):
        a, b = rng.uniform(-2, 2, n), rng.uniform(-2, 2, n)
        np.testing.assert_allclose(f(a, b), np.sqrt(np.abs(a)) + b * 2)
        np.testing.assert_allclose(g(a, b), np.abs(a) + np.abs(b))
    a2, row = rng.uniform(-2, 2, (4, 6)), rng.uniform(-2, 2, (1, 6))
    np.testing.assert_allclose(g(a2, row), np.abs(a2) + np.abs(row))
    with pytest.raises(jd.ArgumentError, match="shape mismatch"):
        f(np.ones(5), np.ones(6))


def test_fused_symbolic_index_is_put_back_together(rng):
    """A fused loop over a (n0, n1) dynamic array is taken apart into i = f // n1 and
    j = f % n1 and put back as the row-major index i * n1 + j; simplify joins that to f,
    so a GPU kernel indexes its arrays with f itself (no 64-bit division per element)."""
    @jd.compute(dynamic=True)
    def axpb(A, B):
        return jd.tensor(A.shape, lambda i, j: A[i, j] * 2.0 + B[i, j], name="C")
    x, y = rng.standard_normal((7, 13)), rng.standard_normal((7, 13))
    text = str(axpb.lower(x, y, target="cuda"))
    assert "%" not in text and "//" not in text.split("C[", 1)[1].split("\n")[0], text
    np.testing.assert_allclose(axpb(x, y), x * 2.0 + y)


def test_matmul_of_symbolic_sizes(rng):
    """jnp.matmul inside a dynamic definition: the contracted sizes are symbolic (X_n1,
    Y_n0); they are taken to agree and checked at the call (was a ShapeError at trace).
    Calls whose size-1 patterns lower to the same loop IR get their own kernels, quietly."""
    import warnings

    @jd.compute(dynamic=True)
    def mm(X, Y):
        return jd.numpy.matmul(X, Y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for a, b in [((5, 7), (7, 3)), ((9, 4), (4, 6)), ((2, 5, 4), (4, 3)), ((4,), (4, 3)),
                     ((5, 4), (4,)), ((5, 1), (1, 3))]:
            x, y = rng.standard_normal(a), rng.standard_normal(b)
            np.testing.assert_allclose(mm(x, y), np.matmul(x, y), rtol=1e-12)
        for a, b in [((9, 4), (5, 6)), ((5, 1), (4, 3)), ((5, 4), (1, 3))]:
            with pytest.raises(jd.ArgumentError, match="shape mismatch"):
                mm(rng.standard_normal(a), rng.standard_normal(b))


_jnp = jd.numpy
# (name, definition, NumPy's, operand shapes over the letters m, k, n, b: k is contracted)
_CONTRACTIONS = [
    ("einsum", lambda x, w: _jnp.einsum("ik,kj->ij", x, w), lambda x, w: x @ w, "mk,kn"),
    ("einsum_t", lambda x, w: _jnp.einsum("ik,jk->ij", x, w), lambda x, w: x @ w.T, "mk,nk"),
    ("einsum_batch", lambda x, w: _jnp.einsum("bik,bkj->bij", x, w), np.matmul, "bmk,bkn"),
    ("dot", lambda x, w: _jnp.dot(x, w), np.dot, "mk,kn"),
    ("dot_vector", lambda x, w: _jnp.dot(x, w), np.dot, "mk,k"),
    ("tensordot", lambda x, w: _jnp.tensordot(x, w, 1), lambda x, w: np.tensordot(x, w, 1),
     "mk,kn"),
    ("tensordot_two", lambda x, w: _jnp.tensordot(x, w, ([0, 2], [2, 0])),
     lambda x, w: np.tensordot(x, w, ([0, 2], [2, 0])), "bmk,knb"),
    ("inner", lambda x, w: _jnp.inner(x, w), np.inner, "mk,nk"),
    ("vdot", lambda x, w: _jnp.vdot(x, w), np.vdot, "k,k"),
    ("matmul_t", lambda x, w: _jnp.matmul(x, _jnp.transpose(w)), lambda x, w: x @ w.T, "mk,nk"),
    ("linear", lambda x, w: jd.nn.linear(x, w), lambda x, w: x @ w.T, "mk,nk"),
]


def _shapes(spec, **sizes):
    return [tuple(sizes[c] for c in part) for part in spec.split(",")]


@pytest.mark.parametrize("dynamic", [True, "x", "w"])
@pytest.mark.parametrize("name, f, ref, spec", _CONTRACTIONS, ids=[c[0] for c in _CONTRACTIONS])
def test_contractions_with_symbolic_sizes(rng, dynamic, name, f, ref, spec):
    """einsum, dot, tensordot, inner, vdot, linear and matmul of a transposed operand in
    a dynamic definition (all arguments, or one of them, dynamic): the contracted sizes
    are taken to agree and checked at the call, also where one side is a static
    argument's fixed size read through a transposed view (x @ W.T with x dynamic). Each
    raised "Size of label ... does not match" or could not prove its reads before. One
    kernel serves every size; a contracted size that disagrees is an error at the call."""
    g = jd.compute(dynamic=dynamic)(f)
    fixed = dict(m=5, k=7, n=3, b=2)
    for sizes in (fixed, dict(m=9, k=4, n=6, b=3), dict(m=33, k=65, n=17, b=2)):
        if dynamic != True:                                           # noqa: E712
            sizes = {**sizes, **{c: fixed[c] for c in spec.split(",")[dynamic == "x"]}}
        x, w = (rng.standard_normal(s) for s in _shapes(spec, **sizes))
        np.testing.assert_allclose(g(x, w), ref(x, w), rtol=1e-12, atol=1e-12)
    assert kernels(g) == 1
    for k in (6, 8):
        shapes = _shapes(spec, **fixed)
        bad = _shapes(spec, **{**fixed, "k": k})
        x, w = (rng.standard_normal(s) for s in (
            (shapes[0], bad[1]) if dynamic == "w" else (bad[0], shapes[1])))
        with pytest.raises(ValueError, match="shape mismatch"):
            g(x, w)


def test_vdot_of_flattened_symbolic_operands_says_why(rng):
    """vdot flattens its operands: two dynamic 2-D operands' sizes are products the call
    cannot check against each other, so the definition says so (not a proof failure)."""
    g = jd.compute(dynamic=True)(lambda x, w: _jnp.vdot(x, w))
    with pytest.raises(ValueError, match="vdot.*cannot be checked"):
        g(rng.standard_normal((3, 4)), rng.standard_normal((2, 6)))


def test_divmod_join_with_a_zero_size_divisor():
    """(x // n) * n + x % n is x only where n > 0: with n == 0 both parts are 0 (NumPy's
    integer division by zero), and the joined form keeps that."""
    @jd.compute(dynamic=True)
    def f(X, Y):
        n = X.shape[0]
        return jd.tensor(Y.shape, lambda j: (Y[j] // n) * n + Y[j] % n + (j // n) * n + j % n,
                         name="Z")
    y = np.arange(-4, 5, dtype=np.int64)
    j = np.arange(len(y))
    for nx in [0, 1, 3]:
        with np.errstate(all="ignore"):
            want = (y // nx) * nx + y % nx + j if nx else np.zeros_like(y)
        np.testing.assert_array_equal(f(np.ones(nx), y), want)


def test_sizes_that_must_agree_are_checked_when_a_pattern_makes_them_constant(rng):
    """X of pattern (1, n1, n2) with B (1, 1): range inference makes every size 1 (no
    size is left a kernel parameter), and B's sizes must still agree with X's."""
    @jd.compute(dynamic=True)
    def f(X, B):
        return jd.tensor(X.shape, lambda i, j, k: X[i, j, k] * 2.0 - B[j, k], name="Y")
    with pytest.raises(jd.ArgumentError, match="shape mismatch"):
        f(rng.standard_normal((1, 2, 5)), rng.standard_normal((1, 1)))
    x, b = rng.standard_normal((1, 1, 1)), rng.standard_normal((1, 1))
    np.testing.assert_allclose(f(x, b), x * 2.0 - b)


def test_column_reductions_split_their_last_block_inside_the_parallel_loop(rng):
    """A column sum over run-time sizes: blocks of columns run in parallel, and the last,
    partial block is split inside its own iteration (vector columns, then a scalar tail)
    rather than after the loop (where a block of every row ran on one thread). Checked
    over column counts around the block and vector widths, with big row counts."""
    @jd.compute(dynamic=True)
    def colsum(X):
        k = jd.reduce_axis(X.shape[0])
        return jd.tensor((X.shape[1],), lambda j: jd.sum(X[k, j], axis=k), name="S")
    text = colsum.lower(rng.standard_normal((300, 1000)))
    start = text.index("parallel")
    par = text[start:text.index("else:", start)].rstrip().split("\n")
    indent = len(text[:start].split("\n")[-1])
    assert [line for line in par if len(line) - len(line.lstrip()) <= indent] == [par[0]] \
        and "if X_n1 // 8 <" in "\n".join(par) and "vectorized" in "\n".join(par), text
    for rows, cols in [(2, 3), (1000, 255), (1000, 257), (97, 1000), (3, 4097), (50, 515),
                       (7, 9), (2000, 31)]:
        x = rng.standard_normal((rows, cols))
        np.testing.assert_allclose(colsum(x), x.sum(axis=0), rtol=1e-12, atol=1e-12)
    x = rng.standard_normal((600, 333)).astype(np.float32)
    np.testing.assert_allclose(jd.numpy.max(x, axis=0), x.max(axis=0))
    np.testing.assert_allclose(jd.numpy.mean(x, axis=0), x.astype(np.float64).mean(axis=0),
                               rtol=1e-6)


def test_the_serial_branch_for_small_sizes_reuses_the_parallel_body():
    """A dynamic kernel runs its loop on the thread team above the parallel grain and on
    the calling thread below it: both call one outlined body (two copies doubled LLVM's
    time), and both give NumPy's answer."""
    @jd.compute(dynamic=True)
    def ex(X):
        return jd.tensor(X.shape, lambda *i: jd.exp(X[i]) * 0.5)
    x = rand(300, 257)                       # above the grain: the thread team
    np.testing.assert_allclose(ex(x), np.exp(x) * 0.5, rtol=1e-13)
    for shape in [(3, 5), (1, 7), (2, 1), (40, 33)]:   # below it: the calling thread
        y = rand(*shape)
        np.testing.assert_allclose(ex(y), np.exp(y) * 0.5, rtol=1e-13)
    text = str(ex.llvm_ir(x, optimized=False))
    if "GOMP_parallel" in text:              # (a machine without libgomp runs serially)
        # (exp's reduction multiplies by 1 / ln 2 once in each copy of the vector body)
        assert len(re.findall(r"fmul <\d+ x double> [^\n]*0x3ff71547652b82fe", text)) == 1


def test_the_serial_branch_shares_the_parallel_body_after_select_splits():
    """Concatenate's select splits name their split points with lets, fresh in each
    branch: the serial branch is still the parallel one's loop (one copy in the LLVM
    module, not two)."""
    @jd.compute(dynamic=True)
    def cat(A, B, C):
        return jd.numpy.concatenate([A, B, C], axis=1)
    a, b, c = rand(300, 57), rand(300, 9), rand(300, 120)
    np.testing.assert_array_equal(cat(a, b, c), np.concatenate([a, b, c], axis=1))
    for n in (1, 3, 20):
        a, b, c = rand(n, 5), rand(n, 2), rand(n, 7)
        np.testing.assert_array_equal(cat(a, b, c), np.concatenate([a, b, c], axis=1))
    text = str(cat.lower(a, b, c))
    assert "_sel = " in text, text                    # (split points named by lets)
    ir = str(cat.llvm_ir(a, b, c, optimized=False))
    if "GOMP_parallel" in ir:              # (a machine without libgomp runs serially)
        main = ir.split("define void @\"jd_cat\"", 1)[1].split("\n}", 1)[0]
        assert "par1.chunk" in main and " phi " not in main    # no loop of its own


def test_llvm_keeps_one_copy_of_a_body_both_branches_call():
    """A small outlined body (a row sum's) called by the parallel and the serial branch
    stays one function: LLVM inlined it into both, then optimised and compiled it twice."""
    @jd.compute(dynamic=True)
    def rowsum(X):
        k = jd.reduce_axis(X.shape[1])
        return jd.tensor((X.shape[0],), lambda i: jd.sum(X[i, k], axis=k))
    for shape in [(300, 503), (3, 5)]:
        x = rand(*shape)
        np.testing.assert_allclose(rowsum(x), x.sum(axis=1), rtol=1e-10, atol=1e-12)
    optimized = str(rowsum.llvm_ir(x))
    if "GOMP_parallel" in optimized:
        assert re.search(r"define internal [^\n]*@jd_rowsum\.par1\.chunk", optimized)


# ----------------------------------------------------------- shifted and windowed indices

@jd.compute(dynamic=True)
def _diff(X):
    Y[i] = X[i + 1] - X[i]
    return Y


@jd.compute(dynamic=True)
def _flip(X):
    n = X.shape[0]
    Y[i] = X[n - 1 - i] * 2.0
    return Y


@jd.compute(dynamic=True)
def _shifted_sum(X, Z):
    Y[i] = X[i] + Z[i + 1]
    return Y


@jd.compute(dynamic=True)
def _two_steps(X):
    Y[i] = X[i + 2] + X[i]
    Z[i] = Y[i + 1] * Y[i]
    return Z


def test_shifted_indices_give_symbolic_ranges():
    """Tensor Comprehensions' rule over symbolic sizes: `Y[i] = X[i + 1] - X[i]` has
    X_n0 - 1 elements (np.diff), a stage read at i + 1 one fewer again, the least of
    several sizes where several bound an index; empty where nothing fits. One kernel for
    every size above 1 (sizes of 1 are their own pattern)."""
    for n in SIZES:
        X = rand(n)
        np.testing.assert_allclose(_diff(X), np.diff(X), rtol=1e-12)
        assert _diff(X).shape == (max(n - 1, 0),)
        np.testing.assert_allclose(_flip(X), X[::-1] * 2.0, rtol=1e-12)
        y = X[2:] + X[:-2]
        expected = y[1:] * y[:-1] if n >= 3 else np.zeros(0)
        np.testing.assert_allclose(_two_steps(X), expected, rtol=1e-12)
        assert _two_steps(X).shape == expected.shape
        for m in (0, 1, 4, 12, 102):
            Z = rand(m)
            k = max(min(n, m - 1), 0)
            got = _shifted_sum(X, Z)
            assert got.shape == (k,), (n, m, got.shape)
            np.testing.assert_allclose(got, X[:k] + Z[1:k + 1], rtol=1e-12)
    assert kernels(_diff) <= 3 and kernels(_flip) <= 3 and kernels(_two_steps) <= 3


@jd.compute(dynamic=True)
def _conv1d(X, W):
    R = W.shape[0]
    Y[i, j] = sum(X[i, j + r] * W[r] for r in range(R))
    return Y


@jd.compute(dynamic=True)
def _conv2d(X, W):
    KH, KW = W.shape
    Y[i, j] = sum(X[i + a, j + b] * W[a, b] for a in range(KH) for b in range(KW))
    return Y


@jd.compute(dynamic=True)
def _conv1d_declared(X, W):
    n, m = X.shape
    R = W.shape[0]
    Y = jd.tensor((n, m - R + 1))
    Y[i, j] = sum(X[i, j + r] * W[r] for r in range(R))
    return Y


def test_convolutions_over_symbolic_sizes():
    """A window of a dynamic size (range(W.shape[0])): the output's extent is inferred
    (X_n1 - W_n0 + 1, or none when the window is wider), and a declared one is proved in
    bounds by combining the two loops' facts (j + r <= X_n1 - 1). One kernel for all."""
    from numpy.lib.stride_tricks import sliding_window_view as windows
    for (a, b), r in (((5, 20), 3), ((4, 33), 5), ((3, 7), 7), ((2, 4), 6), ((0, 5), 2),
                      ((6, 9), 2)):
        X, W = rand(a, b), rand(r)
        width = max(b - r + 1, 0)
        ref = np.einsum("ijr,r->ij", windows(X, r, axis=1), W) if width else \
            np.zeros((a, 0))
        for f in (_conv1d, _conv1d_declared):
            if f is _conv1d_declared and b - r + 1 < 0:
                with pytest.raises(ArgumentError, match=r"dimension 1 of the output Y is "
                                   r"`.*X\.shape\[1\] - W\.shape\[0\].*` = -1 .*must be >= 0"):
                    f(X, W)
                continue
            got = f(X, W)
            assert got.shape == ref.shape, (f.name, got.shape, ref.shape)
            # (atol: a sum of a few O(1) products may cancel to near 0, where rtol alone
            # asks for more digits than the sum's order of terms keeps)
            np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-13)
    assert kernels(_conv1d) == kernels(_conv1d_declared) == 1
    for (h, w), (kh, kw) in (((8, 9), (3, 2)), ((5, 5), (5, 5)), ((4, 6), (2, 3)),
                             ((3, 3), (4, 2)), ((7, 4), (2, 4))):
        X, W = rand(h, w), rand(kh, kw)
        shape = (max(h - kh + 1, 0), max(w - kw + 1, 0))
        ref = np.einsum("ijab,ab->ij", windows(X, (kh, kw)), W) if min(shape) else \
            np.zeros(shape)
        got = _conv2d(X, W)
        assert got.shape == shape
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-13)
    assert kernels(_conv2d) == 1


def test_a_window_one_too_wide_is_refused():
    """The facts that prove a symbolic window in bounds do not prove one element more."""
    from jitdl.errors import DefinitionError

    @jd.compute(dynamic=True)
    def wide(X, W):
        n, m = X.shape
        R = W.shape[0]
        Y = jd.tensor((n, m - R + 2))
        Y[i, j] = sum(X[i, j + r] * W[r] for r in range(R))
        return Y

    @jd.compute(dynamic=True)
    def past_w(X, W):
        R = W.shape[0]
        Y[i, j] = sum(X[i, j + r] * W[r] for r in range(R + 1))
        return Y

    @jd.compute(dynamic=True)
    def shifted(X, W):
        R = W.shape[0]
        Y[i, j] = sum(X[i, j + r + 1] * W[r + 1] for r in range(R - 1))
        return Y
    with pytest.raises(DefinitionError, match=r"cannot prove index `j \+ r`"):
        wide(rand(3, 9), rand(3))
    with pytest.raises(DefinitionError, match=r"W\[r\]: cannot prove index `r`"):
        past_w(rand(3, 9), rand(3))
    X, W = rand(3, 9), rand(3)
    got = shifted(X, W)       # j + r + 1 <= 8 for r <= 1: j <= 6
    assert got.shape == (3, 7)
    ref = np.stack([[sum(X[i, j + r + 1] * W[r + 1] for r in range(2)) for j in range(7)]
                    for i in range(3)])
    np.testing.assert_allclose(got, ref, rtol=1e-12)


def _body_mixed(X, W, Z):
    Y[i] = X[i] * W[i] + Z[i + 1]
    return Y


def _body_two_ends(X, W, A):
    Y[i, j] = X[i + 1] + W[i + 2] + A[i + j]
    return Y


def _body_window(X, W):
    R = W.shape[0]
    Y[i, j] = sum(X[i, j + r] * W[r] for r in range(R))
    return Y


def _body_min_side(X, V):
    n, m = X.shape[0], V.shape[0]
    T = jd.tensor((jd.min(n, m // 2),))
    T[i] = X[i] * 2.0
    Z[i] = T[i + 1] - T[i]
    return Z


def test_symbolic_ranges_agree_with_the_static_ones():
    """Review cases: dimensions indexed whole next to a shifted access are still checked
    equal at the call (a size-1 W beside X of 5 is an error, not a result of 1 element);
    a window over a dimension of size 1 (an int in the kernel) is inferred; a size that is
    a min with a non-affine side keeps both sides; an index whose bound is the least of
    two different sizes is not used to infer another (an error, not a narrower result)."""
    from jitdl.errors import DefinitionError
    dyn, sta = jd.compute(_body_mixed, dynamic=True), jd.compute(_body_mixed)
    X, W, Z = rand(5), rand(1), rand(5)
    for f in (dyn, sta):
        with pytest.raises(ArgumentError, match="shape mismatch"):
            f(X, W, Z)
    for n, m in ((5, 5), (5, 4), (3, 9), (1, 1)):
        X, W, Z = rand(n), rand(n), rand(m)
        np.testing.assert_allclose(dyn(X, W, Z), sta(X, W, Z), rtol=1e-12)
        assert dyn(X, W, Z).shape == sta(X, W, Z).shape
    win, win_static = jd.compute(_body_window, dynamic=True), jd.compute(_body_window)
    for shape in ((3, 2), (3, 1), (4, 1), (2, 7)):
        X, W = rand(*shape), rand(3)
        assert win(X, W).shape == win_static(X, W).shape
        np.testing.assert_allclose(win(X, W), win_static(X, W), rtol=1e-12)
    X, V = rand(6), rand(9)
    np.testing.assert_allclose(jd.compute(_body_min_side, dynamic=True)(X, V),
                               jd.compute(_body_min_side)(X, V), rtol=1e-12)
    with pytest.raises(DefinitionError, match="cannot infer the range of index `j`"):
        jd.compute(_body_two_ends, dynamic=True)(rand(4), rand(3), rand(9))


def _body_strided(X, W):
    R = W.shape[0]
    Y[i] = sum(X[2 * i + r] * W[r] for r in range(R))
    return Y


def _body_pooled(X):
    Y[i, j] = max(X[i, 3 * j + r] for r in range(3))
    return Y


def _body_strided_twice(X, W):
    R = W.shape[0]
    T[i] = sum(X[2 * i + r] * W[r] for r in range(R))
    Y[i] = sum(T[2 * i + r + 1] for r in range(R - 1))
    return Y


def _body_strided_too_wide(X, W):
    n, R = X.shape[0], W.shape[0]
    Y = jd.tensor(((n - R + 1) // 2 + 1,))        # one too many where n - R is odd
    Y[i] = sum(X[2 * i + r] * W[r] for r in range(R))
    return Y


def _body_strided_declared(X, W):
    n, R = X.shape[0], W.shape[0]
    Y = jd.tensor(((n - R) // 2 + 1,))
    Y[i] = sum(X[2 * i + r] * W[r] for r in range(R))
    return Y


def test_strided_windows_over_symbolic_sizes():
    """`X[2 * i + r]` over range(W.shape[0]) has `(X_n0 - W_n0) // 2 + 1` elements (or
    none): one kernel for every size, the same shapes and values as the static kernels,
    nothing written past the output (an out= view of a larger array keeps its tail);
    strided stages chain, and a declared extent one too wide is refused: the prover takes
    `c * (a // c)` to lie in [a - c + 1, a]."""
    from jitdl.errors import DefinitionError
    pairs = [(jd.compute(b, dynamic=True), jd.compute(b))
             for b in (_body_strided, _body_strided_twice, _body_strided_declared)]
    for n, r in [(0, 1), (1, 1), (2, 3), (5, 2), (9, 3), (10, 3), (17, 4), (64, 5), (3, 7)]:
        X, W = rand(n), rand(r)
        for dyn, sta in pairs:
            try:
                want = sta(X, W)
            except DefinitionError:     # the static kernel of an empty window stage
                continue
            got = dyn(X, W)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12)
            big = np.full(got.size + 16, 7.0)
            dyn(X, W, out=big[:got.size])
            np.testing.assert_allclose(big[:got.size], want, rtol=1e-12)
            assert (big[got.size:] == 7.0).all()
    assert kernels(pairs[0][0]) <= 3
    pooled = jd.compute(_body_pooled, dynamic=True)
    for m in (0, 2, 3, 7, 31):
        X = rand(4, m)
        np.testing.assert_array_equal(pooled(X), X[:, :m // 3 * 3].reshape(4, -1, 3).max(-1))
    with pytest.raises(DefinitionError, match=r"cannot prove index `2 \* i \+ r`"):
        jd.compute(_body_strided_too_wide, dynamic=True)(rand(9), rand(3))


def _body_repeated(X):
    Y[i] = X[i // 3]
    return Y


def _body_halves(X, W):
    Y[i, j] = sum(X[i, (2 * j + r + 1) // 2] * W[r] for r in range(W.shape[0]))
    return Y


def test_floor_divided_indices_over_symbolic_sizes():
    """`X[i // 3]` bounds i by 3 * X_n0 over a symbolic size as over a fixed one, and so
    does a window read through a quotient, `(2 * j + r + 1) // 2` ((X_n1 * 2 - W_n0) // 2
    + 1 elements): the same shapes and values as the static kernels, one kernel (it was a
    'cannot infer the range' error for every dynamic call)."""
    from jitdl.errors import DefinitionError
    pairs = [(jd.compute(b, dynamic=True), jd.compute(b)) for b in (_body_repeated, _body_halves)]
    for n, m, r in [(0, 3, 1), (2, 0, 1), (3, 1, 2), (5, 4, 3), (2, 9, 5), (4, 17, 2)]:
        for (dyn, sta), args in zip(pairs, [(rand(m),), (rand(n, m), rand(r))]):
            try:
                want = sta(*args)
            except DefinitionError:     # the static kernel of an empty window stage
                continue
            got = dyn(*args)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-12)
            out = np.full(want.shape, np.nan)
            dyn(*args, out=out)
            np.testing.assert_allclose(out, want, rtol=1e-12)
    assert kernels(pairs[0][0]) <= 3            # (size-1 patterns are their own kernels)
    np.testing.assert_array_equal(pairs[0][0](np.arange(4.0)), np.repeat(np.arange(4.0), 3))


def test_an_index_no_loop_moves_is_checked_at_the_call():
    """`W[0]` or `W[W.shape[0] - 1]` into a dynamic dimension holds for every size but an
    empty one: it is checked where it is read (IndexError naming the read at a call with
    an empty W, as NumPy's w[0]), not refused for every size at definition; the loop that
    reads it stays vector code."""
    @jd.compute(dynamic=True)
    def ends(X, W):
        Y[i, j] = X[i, j] * W[0] + W[W.shape[0] - 1]
        return Y
    for n, m, r in [(3, 9, 4), (1, 17, 1), (5, 2, 2), (0, 4, 3), (2, 64, 7)]:
        X, W = rand(n, m), rand(r)
        np.testing.assert_allclose(ends(X, W), X * W[0] + W[-1], rtol=1e-12)
    assert kernels(ends) <= 3           # (size-1 patterns are their own kernels)
    with pytest.raises(IndexError, match=r"index `(0|W_n0 - 1)` into W is -?\d+, outside "
                                         r"\[0, W_n0\) \(W_n0 = 0\)"):
        ends(rand(3, 9), rand(0))
    np.testing.assert_array_equal(ends(rand(0, 9), rand(0)), np.empty((0, 9)))
    notes = [ln for ln in ends.llvm_ir(X, W, optimized=False).splitlines()
             if "jitdl: vectorized" in ln]
    assert notes and all("vector code" in ln for ln in notes), notes

    @jd.compute(dynamic=True)
    def last(X, W):
        Y[i] = X[i] * W[W.shape[0] - 1] + W[i]      # W's size is X's: checked equal
        return Y
    for n in (0, 1, 2, 7, 33):
        X, W = rand(n), rand(n)
        np.testing.assert_allclose(last(X, W), X * W[n - 1] + W if n else X, rtol=1e-12)

    @jd.compute(dynamic=True)
    def moved(X, W):
        Y[i] = X[i] * W[i]          # a loop moves it: still proven, or refused
        return Y
    with pytest.raises(ArgumentError):
        moved(rand(5), rand(4))


def _body_first_of_a_stage(X):
    T[i] = X[i + 2] * 2.0
    Y[j] = X[j] + T[0]
    return Y


def _body_last_of_a_strided_stage(X):
    T[i] = X[2 * i + 3] * 2.0
    Y[j] = X[j] + T[T.shape[0] - 1]
    return Y


def test_an_unmoved_index_into_an_inlined_stage_keeps_its_check():
    """`T[0]` of a stage T that is empty at some sizes is checked at the call; inlined,
    the read becomes `X[0 + 2]`, which is no longer the read the check was found by: it
    carries the check (it read X[2] past a 2-element X, or X[1] for T[-1], silently)."""
    first = jd.compute(_body_first_of_a_stage, dynamic=True)
    last = jd.compute(_body_last_of_a_strided_stage, dynamic=True)
    for n in (2, 3, 5, 9):
        big = np.full(n + 2, np.nan)
        big[1:-1] = rand(n)
        x = big[1:-1]                   # NaN on either side: a read outside shows
        for f, size, at in ((first, n - 2, 0), (last, max((n - 4) // 2 + 1, 0), -1)):
            if size <= 0:
                with pytest.raises(IndexError, match=r"into T is -?\d+, outside \[0, "):
                    f(x)
                continue
            t = x[2:] * 2.0 if f is first else x[3::2] * 2.0
            np.testing.assert_allclose(f(x), x + t[at], rtol=1e-12)


def _body_shared_read_in_an_arm(X, k: int):
    T = jd.tensor((X.shape[0] - 2,))

    def value(j):
        a = X[j + 2]            # one object, read in the select's arm and after it
        return jd.select(k > 0, a, 0.0) + a
    T[j] = value(j)
    Y[j] = X[j] + T[0]
    return Y


@pytest.mark.cpu_only
def test_an_inlined_stage_carries_its_check_on_the_read_every_evaluation_makes():
    """T's read `a` is one object, in a select's arm and on its own: substituted into the
    reader it stays one object, and the check of `T[0]` (T may be empty) goes on the read
    every evaluation makes, not on the first met (the arm, skipped for k <= 0: it read
    past a 2-element X)."""
    f = jd.compute(_body_shared_read_in_an_arm, dynamic=True)

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        s.compute_inline(s["T"])
    big = np.full(4, np.nan)
    big[1:3] = rand(2)
    for k in (1, 0):
        with pytest.raises(IndexError, match=r"into T is 0, outside \[0, "):
            f(big[1:3], k)
        x = rand(5)
        np.testing.assert_allclose(f(x, k), x + x[2] * (2.0 if k > 0 else 1.0), rtol=1e-12)


def _body_first_of_a_formula(X):
    T = jd.tensor((X.shape[0] - 2,))
    T[i] = i * 1.0 + 5.0
    Y[j] = X[j] + T[0]
    return Y


@pytest.mark.cpu_only
def test_an_unmoved_index_into_an_inlined_formula_is_refused():
    """`T[0]` of a stage that reads no array: stored, the read is checked at the call;
    inlined, no read is left to carry the check (it gave 5.0 for an empty T), so the
    definition is refused with the read named."""
    from jitdl.errors import DefinitionError
    stored = jd.compute(_body_first_of_a_formula, dynamic=True)
    x = rand(5)
    np.testing.assert_allclose(stored(x), x + 5.0, rtol=1e-12)
    with pytest.raises(IndexError, match="into T is 0"):
        stored(rand(2))
    inlined = jd.compute(_body_first_of_a_formula, dynamic=True)

    @jd.schedule(inlined, target="cpu")
    def sched(s, cfg):
        s.compute_inline(s["T"])
    with pytest.raises(DefinitionError, match=r"T\[0\]: cannot prove index `0` .* nor check "
                                              "it at the call"):
        inlined(x)


def test_a_shape_mismatch_found_while_tracing_prints_the_calls_sizes():
    """A mismatch found while tracing a call with some sizes symbolic printed the traced
    shapes, symbols and all (`X (X_n0, 4)`); it prints the call's sizes now."""
    @jd.compute(dynamic={"X": 0})
    def add(X, Y):
        Z[i, j] = X[i, j] + Y[i, j]
        return Z
    from jitdl.errors import ArgumentShapeError
    with pytest.raises(ArgumentShapeError) as e:
        add(np.ones((5, 4)), np.ones((5, 3)))
    assert "(Y (5, 3), X (5, 4))" in str(e.value) and "_n0" not in str(e.value)
    assert "Z[i, j] = X[i, j] + Y[i, j]" in str(e.value)        # (the user's line kept)


def _mean_rows(X):
    return X.sum(axis=1) / X.shape[1]


def _scaled_by_sizes(X):
    n, m = X.shape
    Y[i, j] = X[i, j] * (m * 0.5) - n + jd.select(X[i, j] > 0.5, X[i, j], m)
    return Y


def _normalised(X):
    return jd.tensor(X.shape, lambda i, j: X[i, j] / jd.sqrt(X.shape[1]) / X.size)


def _numpy_scalars_of_sizes(X):
    # NumPy's functions of Python numbers are NumPy scalars (strong): float64 here
    return X * jd.numpy.exp(X.shape[1] * 0.01) + jd.float64(X.shape[0]) \
        - jd.numpy.sqrt(X.shape[1])


@pytest.mark.parametrize("body,dtype", [(_mean_rows, np.float32), (_scaled_by_sizes, np.float32),
                                        (_normalised, np.float32),
                                        (_numpy_scalars_of_sizes, np.float64)])
def test_a_size_beside_a_float_is_a_python_number_as_in_a_static_trace(body, dtype):
    """A dynamic definition's sizes are the Python ints of a static trace: beside a float32
    tensor they take its dtype (NEP 50), so `X.sum(axis=1) / X.shape[1]` is float32 in both
    (it was float64 with dynamic=True: the size was a strong int64); jd.numpy's functions
    and jd.float64 of sizes are NumPy scalars in both, which make it float64."""
    dyn, sta = jd.compute(body, dynamic=True), jd.compute(body)
    for shape in [(3, 5), (4, 9), (2, 2)]:
        X = rand(*shape).astype(np.float32)
        want, got = sta(X), dyn(X)
        assert want.dtype == got.dtype == dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)
    # beside an integer tensor a size stays int64 (a static trace's Python int could
    # overflow the narrower type): the same values, a wider dtype
    X8 = (rand(3, 5) * 100).astype(np.int8)
    got = jd.compute(lambda X: X * X.shape[1], dynamic=True)(X8)
    np.testing.assert_array_equal(got, X8.astype(np.int64) * 5)


def test_numpy_scalar_types_of_a_symbolic_value_are_casts():
    """`np.float32(1.0 / np.sqrt(d))` of a dynamic size d, in the definition's own code, is
    jitdl's cast (NumPy's own raised 'setting an array element with a sequence'); of a
    number it is still NumPy's scalar, and jd.float32 and a function of that name that is
    not NumPy's are left alone."""
    @jd.compute(dynamic=True)
    def scaled(Q):
        n, d = Q.shape
        float64 = lambda v: v * 2            # noqa: E731 - not NumPy's: called as written
        return Q * np.float32(1.0 / np.sqrt(d)) + np.int8(3) + jd.float32(float64(n))
    for shape in [(3, 16), (2, 9), (1, 4)]:
        q = rand(*shape).astype(np.float32)
        got = scaled(q)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, q / np.sqrt(shape[1]) + 3 + 2 * shape[0], rtol=1e-6)


def _python_numbers_of_sizes(X):
    n = len(X)
    scale = 1.0 / math.sqrt(float(X.shape[1]))
    return X * scale + int(n) + len(X.shape)


def test_python_float_int_and_len_of_sizes_and_tensors():
    """float(d), int(d) of a dynamic size and len(X) of a tensor, in the definition's own
    code, are its sizes as the static trace's Python numbers (float32 stays float32); they
    raised SymbolicValueError ('used where Python needs a concrete number') and len(X)
    'object of type Tensor has no len()' with or without dynamic=. Of other values they
    are Python's, and a function of the user's named len is called as written."""
    dyn = jd.compute(_python_numbers_of_sizes, dynamic=True)
    sta = jd.compute(_python_numbers_of_sizes)
    for shape in [(3, 16), (5, 7), (1, 4), (6, 1)]:
        X = rand(*shape).astype(np.float32)
        want = X / np.sqrt(shape[1]) + shape[0] + 2
        for f in (dyn, sta):
            got = f(X)
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-6)

    @jd.compute(dynamic=True)
    def elements(X):
        Y[i] = float(X[i]) * 2 + int(X[i] * 3)         # int() truncates, as Python's
        return Y
    x = rand(9).astype(np.float32)
    got = elements(x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, x.astype(np.float64) * 2 + np.trunc(x * 3), rtol=1e-6)

    @jd.compute(dynamic=True)
    def own(X):
        len = lambda v: 7                    # noqa: E731 - not Python's: called as written
        return X * len(X) + float("0.5")
    np.testing.assert_allclose(own(x), x * 7 + 0.5, rtol=1e-6)
    with pytest.raises(TypeError, match="len"):
        jd.compute(lambda X: len(X[0]), dynamic=True)(rand(3))


def _body_prefix(X):
    n = X.shape[0]
    Y = jd.tensor((n,))
    Y[i] = sum(X[k] for k in range(i + 1))
    return Y


def _body_suffix_max(X):
    n = X.shape[0]
    Y = jd.tensor((n,))
    Y[i] = max(X[k] for k in range(i, n))
    return Y


def _body_band(X):
    n, m = X.shape
    Y = jd.tensor((n,))
    Y[i] = sum(X[i, k] for k in range(max(i - 1, 0), min(i + 2, m)))
    return Y


def _body_squares(X):
    Y = jd.tensor((X.shape[0],))
    Y[i] = sum(X[k] for k in range(i * i))
    return Y


def test_reduction_ranges_that_depend_on_an_index_over_symbolic_sizes():
    """`range(i + 1)`, `range(i, n)`, `range(max(i - 1, 0), min(i + 2, m))` in a dynamic
    definition: the reduction's rectangle is an expression of the sizes (its bounds were
    computed as numbers: SymbolicValueError 'the condition `1 * (X_n0 - 1) < 0`'), still
    proven in bounds; one kernel for every size."""
    refs = {_body_prefix: lambda x: np.cumsum(x),
            _body_suffix_max: lambda x: np.maximum.accumulate(x[::-1])[::-1]}
    for body, ref in refs.items():
        f = jd.compute(body, dynamic=True)
        for n in (0, 2, 3, 8, 33):
            x = rand(n)
            if n or body is _body_prefix:
                np.testing.assert_allclose(f(x), ref(x), rtol=1e-12)
        assert kernels(f) == 1 and "]!" not in f.lower(rand(5))
    band = jd.compute(_body_band, dynamic=True)
    for n, m in [(2, 3), (7, 5), (4, 9), (1, 6), (0, 3)]:
        x = rand(n, m)
        want = np.array([x[i, max(i - 1, 0):i + 2].sum() for i in range(n)]).reshape(n)
        np.testing.assert_allclose(band(x), want, rtol=1e-12)
    with pytest.raises(DefinitionError, match=r"cannot bound the range of reduction index "
                                              r"`k` \(range\(0, i \* i\)\) for every size"):
        jd.compute(_body_squares, dynamic=True)(rand(4))


def _body_asserts_equal_rows(X, Y):
    assert X.shape[0] == Y.shape[0] and X.ndim == 2, "X and Y: one row each"
    return X * 2.0


def _body_asserts_a_bound(X):
    assert X.shape[0] > 2
    return X * 2.0


def test_an_assert_of_equal_sizes_is_checked_at_the_call():
    """`assert X.shape[0] == Y.shape[0]` of dynamic X and Y (a common shape check) is
    checked at the call, where nothing else relates the two sizes (it raised
    SymbolicValueError 'has no Python truth value here; write a select'); other symbolic
    tests are refused by name, and concrete ones are Python's asserts."""
    f = jd.compute(_body_asserts_equal_rows, dynamic=True)
    for n in (2, 5, 40):
        x = rand(n, 3)
        np.testing.assert_array_equal(f(x, rand(n)), x * 2.0)
    assert kernels(f) == 1
    with pytest.raises(ArgumentError, match="argument 'X' has size 3 in dimension 0 but "
                                            "argument 'Y' has size 4 in dimension 0"):
        f(rand(3, 2), rand(4))
    with pytest.raises(DefinitionError, match="X and Y: one row each"):
        f(rand(3), rand(3))             # (X.ndim == 2 is False: the whole test is)
    with pytest.raises(DefinitionError, match=r"assert X_n0 > 2: the condition is symbolic"):
        jd.compute(_body_asserts_a_bound, dynamic=True)(rand(4))
    static = jd.compute(_body_asserts_a_bound)
    np.testing.assert_array_equal(static(np.ones(3)), np.full(3, 2.0))
    with pytest.raises(DefinitionError, match="AssertionError"):
        static(np.ones(2))


def _body_nested_ranges(X):
    n = X.shape[0]
    Y = jd.tensor((n,))
    Y[i] = sum(sum(X[k] for k in range(j + 1)) for j in range(i + 1))
    return Y


def _body_nested_ranges_bounded(X):
    n = X.shape[0]
    Y = jd.tensor((n,))
    Y[i] = sum(sum(X[k] for k in range(min(j + 1, n))) for j in range(i + 1))
    return Y


def _body_pairs(X):
    n, m = X.shape
    Y[i] = sum(X[i, k] * X[i, l] for k in range(m) for l in range(k + 1, m))
    return Y


def test_a_range_bounded_by_another_reductions_index_over_symbolic_sizes():
    """range(j + 1) inside a reduction over j, in a dynamic definition: j entered the
    inner reduction's rectangle as if it were a size, and the compile failed in the IR
    verifier ('variable j used outside its loop', a CompileError: a jitdl bug). j's
    rectangle [0, n) bounds it, by n (j itself is no size), as a static trace's does;
    min(j + 1, n) is bounded by n; range(k + 1, m) of a k in range(m) by m (that and
    range(j + 1) were "cannot bound the range of reduction index" here, and not in a
    static trace)."""
    for body in (_body_nested_ranges, _body_nested_ranges_bounded):
        f = jd.compute(body, dynamic=True)
        for n in (0, 1, 4, 7):
            x = rand(n)
            want = np.array([sum(x[:j + 1].sum() for j in range(i + 1)) for i in range(n)])
            np.testing.assert_allclose(f(x), want.reshape(n), rtol=1e-12)
    f = jd.compute(_body_pairs, dynamic=True)
    for shape in [(3, 5), (2, 0), (4, 1), (3, 2)]:
        x = rand(*shape)
        want = [sum(r[k] * r[l] for k in range(shape[1]) for l in range(k + 1, shape[1]))
                for r in x]
        np.testing.assert_allclose(f(x), np.reshape(want, shape[0]), rtol=1e-12, atol=1e-14)
    assert kernels(f) == 2          # (the size-1 pattern's own)


def _scaled_by_python_float(X, s, k):
    return X * float(s) + float(k) / 4


def test_python_float_of_a_scalar_argument_is_weak():
    """float(s) of a Python number passed as an argument is a Python float, weak beside a
    float32 array as s itself is: X * float(s) was float64 (the cast marked it strong),
    where NumPy and X * s give float32."""
    x = rand(5).astype(np.float32)
    for dyn in (False, True):
        f = jd.compute(_scaled_by_python_float, dynamic=dyn)
        for s, k in [(2.5, 3), (2, 7), (True, -1)]:
            got = f(x, s, k)
            want = x * float(s) + float(k) / 4
            assert got.dtype == want.dtype == np.float32, (dyn, s, k, got.dtype)
            np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_read_guarded_by_its_own_size_needs_no_agreement():
    """`Y[i] + (X[i] if i < X.shape[0] else 0)` over Y's extent: the guard keeps X's read in
    bounds, so X may be shorter than Y, as in a static trace. It was an ArgumentShapeError
    asking X and Y to agree (the agreement of bare indices did not see the guard). Read
    unguarded, they must still agree."""
    @jd.compute(dynamic=True)
    def padded(X, Y):
        return jd.tensor(Y.shape, lambda i: Y[i] + (X[i] if i < X.shape[0] else 0.0))

    @jd.compute(dynamic=True)
    def plain(X, Y):
        return jd.tensor(Y.shape, lambda i: Y[i] + X[i])
    rng = np.random.default_rng(5)
    for n, m in [(4, 13), (13, 13), (0, 3), (5, 0)]:
        x, y = rng.standard_normal(n), rng.standard_normal(m)
        want = y.copy()
        want[:min(n, m)] += x[:min(n, m)]
        np.testing.assert_allclose(padded(x, y), want, rtol=1e-12)
    with pytest.raises(jd.errors.ArgumentShapeError, match="argument 'Y' has size 13"):
        plain(rng.standard_normal(4), rng.standard_normal(13))


def _row_max(X):
    n, m = X.shape
    Y[i] = max(X[i, k] for k in range(m))
    return Y


def _row_min(X):
    n, m = X.shape
    Y[i] = min(X[i, k] for k in range(m))
    return Y


def _row_sum(X):
    n, m = X.shape
    Y[i] = sum(X[i, k] for k in range(m))
    return Y


def _row_argmax(X):
    n, m = X.shape
    k = jd.reduce_axis(m)
    return jd.tensor((n,), lambda i: jd.argmax(X[i, k], axis=k))


def _row_argmin(X):
    n, m = X.shape
    k = jd.reduce_axis(m)
    return jd.tensor((n,), lambda i: jd.argmin(X[i, k], axis=k))


def _row_max_te(X):
    n, m = X.shape
    k = jd.reduce_axis(m)
    return jd.tensor((n,), lambda i: jd.max(X[i, k], axis=k))


def _short_max(X):
    n, m = X.shape
    Y[i] = max(X[i, k] for k in range(m - 2))   # an expression of the size: empty for m <= 2
    return Y


_EMPTY_REDUCTIONS = [(_row_max, lambda x: x.max(1)), (_row_min, lambda x: x.min(1)),
                     (_row_argmax, lambda x: x.argmax(1)), (_row_argmin, lambda x: x.argmin(1)),
                     (_row_max_te, lambda x: x.max(1)),
                     (_short_max, lambda x: x[:, :-2].max(1))]


@pytest.mark.parametrize("fn, ref", _EMPTY_REDUCTIONS, ids=lambda v: getattr(v, "__name__", ""))
def test_reduction_without_identity_over_an_empty_symbolic_range_raises(fn, ref, tmp_path):
    """max/min/argmax/argmin written by hand over a symbolic range that is empty at the
    call gave the identity (-inf, inf, 0) for every row where NumPy, and the same
    definition with static sizes, raise: the call checks the extent once, before the kernel
    runs, with an ArgumentShapeError (a ValueError) naming the definition's line and the
    size; also where no row is computed ((0, 0)), also from the disk cache and an export.
    A sum over nothing stays 0."""
    import linecache
    first = fn.__code__.co_firstlineno + 1                  # (the line of the reduction)
    line = next(n for n in range(first, first + 9)
                if re.search(r"\b(max|min|argmax|argmin)\(", linecache.getline(__file__, n)))
    width = 2 if fn is _short_max else 0
    static = jd.compute(fn)
    with pytest.raises(DefinitionError, match="over an empty range has no identity"):
        static(rand(3, width))
    for f in (jd.compute(dynamic=True)(fn), jd.compute(dynamic=True)(fn)):  # (2nd: disk)
        for shape in [(3, 5), (4, 9), (0, 6), (2, 3 + width)]:
            x = rand(*shape)
            got = f(x)
            np.testing.assert_array_equal(got, ref(x))
        for shape in [(3, width), (0, width), (1, width), (5, min(width, 1))]:
            if fn is _short_max and shape[1] == 1:
                shape = (shape[0], 2)
            with pytest.raises(ValueError):
                ref(np.ones(shape))
            with pytest.raises(jd.errors.ArgumentShapeError,
                               match="over an empty range has no identity") as e:
                f(rand(*shape))
            assert e.value.loc is not None and e.value.loc.lineno == line, str(e.value)
            assert "(X_n1 = " in e.value.message, e.value.message
    f = jd.compute(dynamic=True)(fn)
    path = tmp_path / "f.jdx"
    f.export(str(path), rand(3, 5))
    loaded = jd.load(str(path))
    x = rand(6, 7)
    np.testing.assert_array_equal(loaded(x), ref(x))
    with pytest.raises(jd.errors.ArgumentShapeError, match="no identity"):
        loaded(rand(3, width))


def test_sum_over_an_empty_symbolic_range_is_zero():
    f = jd.compute(dynamic=True)(_row_sum)
    for shape in [(3, 0), (0, 0), (4, 7)]:
        x = rand(*shape)
        np.testing.assert_allclose(f(x), x.sum(1), rtol=1e-14)


def test_jd_numpy_max_of_a_symbolic_empty_axis_raises_where_the_output_is_empty_too():
    """jnp.max(X, axis=1) of a dynamic X (0, 0) gave an empty array (the run-time check of
    the empty axis rode on each output element, and there are none) where NumPy raises."""
    import jitdl.numpy as jnp
    for name in ("max", "min", "argmax", "argmin", "ptp"):
        op = getattr(jnp, name)
        f = jd.compute(dynamic=True)(lambda X: op(X, axis=1) * 2)
        x = rand(4, 6)
        np.testing.assert_array_equal(f(x), getattr(np, name)(x, axis=1) * 2)
        for shape in [(0, 0), (3, 0)]:
            with pytest.raises(ValueError) as ref:
                getattr(np, name)(np.ones(shape), axis=1)
            with pytest.raises(ValueError) as got:
                f(rand(*shape))
            assert str(ref.value) in str(got.value), (str(ref.value), str(got.value))
        np.testing.assert_array_equal(f(rand(0, 6)), np.zeros(0))


def _body_band_rows(X):
    n, m = X.shape
    Y = jd.tensor((n, m), name="Y")
    Y[i, j] = sum(X[i, k] for k in range(max(j - 1, 0), min(j + 2, m)))
    return Y


@pytest.mark.parametrize("blocked", [False, True])
def test_rfactor_of_a_range_bounded_by_a_min_over_symbolic_sizes(blocked):
    """rfactor of `range(max(j - 1, 0), min(j + 2, m))` in a dynamic definition: the
    part's guard `k_o * 2 + k_f < min(j + 2, X_n1)` bounds its read below X_n1, but the
    prover kept the min whole, and the definition was refused ('cannot prove index
    `k_o * 2 + k_f` ... inside [0, X_n1)'), pointing at the user's correct line."""
    f = jd.compute(_body_band_rows, dynamic=True)

    @jd.schedule(f, target="cpu")
    def _(s, cfg):
        Y = s["Y"]
        s.rfactor(Y, Y.reduce_axis[0], 2 if not blocked else 3, blocked=blocked)
    for n, m in [(7, 13), (1, 1), (3, 2), (0, 5), (4, 0), (5, 64), (7, 13)]:
        x = rand(n, m)
        want = np.array([[x[r, max(c - 1, 0):c + 2].sum() for c in range(m)]
                         for r in range(n)]).reshape(n, m)
        out = np.full((n, m), np.nan)
        assert f(x, out=out) is out
        np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)
    assert kernels(f) == 2              # (1, 1): another pattern
    assert "]!" not in f.lower(rand(3, 4))


def _dynamic_matmul():
    @jd.compute(dynamic=True)
    def matmul(A, B):
        n, k = A.shape
        _, m = B.shape
        C[i, j] = sum(A[i, r] * B[r, j] for r in range(k))
        return C
    return matmul


def test_rfactor_of_a_reduction_whose_other_operand_has_one_row():
    """rfactor of a dynamic matmul's reduction axis, called with B of one row: the kernel
    for that pattern takes A's columns as B's rows, the constant 1, but the proof of
    A[i, ko * f + kf] and B[ko * f + kf, j] narrowed by the guard as written (`... <
    A_n1`): a DefinitionError 'can read outside A ... guard it', for A (3, 1) @ B (1, 4)
    as for the mismatched A (3, 6) @ B (1, 4), where the unscheduled function says shape
    mismatch. The guard now narrows with the sizes the call checks equal put in too."""
    for factor in ("knob", 4):
        f = _dynamic_matmul()

        @jd.schedule(f, target="cpu")
        def sched(s, cfg):
            C = s["C"]
            (k,) = C.reduce_axis
            s.rfactor(C, k, cfg.split("tk", k) if factor == "knob" else factor)
        for n, k, m in [(3, 1, 4), (1, 1, 1), (5, 1, 9), (3, 6, 4), (2, 1, 1)]:
            a, b = rand(n, k), rand(k, m)
            got = np.full((n, m), np.nan)
            f(a, b, out=got)
            np.testing.assert_allclose(got, a @ b, rtol=1e-12, atol=1e-12)
        with pytest.raises(jd.errors.ArgumentShapeError) as e:
            line = inspect.currentframe().f_lineno + 1
            f(rand(3, 6), rand(1, 4))
        assert str(e.value).startswith(
            "matmul(): shape mismatch: argument 'A' has size 6 in dimension 1 but argument "
            "'B' has size 1 in dimension 0 (A (3, 6), B (1, 4))")
        assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)


@pytest.mark.cpu_only     # (a schedule for target='cpu')
def test_a_schedule_refusing_a_pattern_does_not_hide_the_calls_shape_mismatch():
    """A schedule that cannot serve a pattern of sizes (pack needs a concrete extent, B's
    columns are symbolic) raised its ScheduleError for a call whose shapes mismatch too,
    A (3, 6) @ B (1, 4), where the unscheduled function says shape mismatch: the kernel
    of that pattern takes A's columns as B's rows. The call's mismatch comes first,
    naming both arguments, their sizes and the caller's line; a call that agrees still
    gets the schedule's error."""
    f = _dynamic_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        s.pack("B", s["C"], 1, 4)
    for sa, sb in [((3, 6), (1, 4)), ((3, 1), (6, 4)), ((3, 6), (7, 4))]:
        with pytest.raises(jd.errors.ArgumentShapeError) as e:
            line = inspect.currentframe().f_lineno + 1
            f(rand(*sa), rand(*sb))
        assert str(e.value).startswith(
            f"matmul(): shape mismatch: argument 'A' has size {sa[1]} in dimension 1 but "
            f"argument 'B' has size {sb[0]} in dimension 0 (A {sa}, B {sb})")
        assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)
    with pytest.raises(jd.ScheduleError, match="pack needs a concrete extent"):
        f(rand(3, 1), rand(1, 4))
    a, b = rand(3, 6), rand(6, 1)           # (B's columns the constant 1: pack serves it)
    got = np.full((3, 1), np.nan)
    f(a, b, out=got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def test_run_time_index_and_overflow_errors_name_the_callers_line(tmp_path):
    """An index read from data out of range (`X[idx[i]]`, idx holding 7 for X of 5) was a
    plain IndexError with no line, and a Python int that overflows the dtype it meets was
    a ScalarOverflowError at the definition's line, from the function and from its
    loaded export alike: neither named the line that called. Both are at the caller's
    line now (still an IndexError and an OverflowError; the overflow names the
    definition's line in its text), the first call and the compiled per-call path."""
    def gather(X, idx):
        return jd.tensor(idx.shape, lambda i: X[idx[i]] * 2)

    def shift(X, s):
        return jd.tensor(X.shape, lambda i: X[i] + s)
    x, xi = rand(5), RNG.integers(-9, 9, 6).astype(np.int32)
    good, bad = np.array([4, 0, 2]), np.array([0, 7, 2])
    for dyn in (False, True):
        g, s = jd.compute(gather, dynamic=dyn), jd.compute(shift, dynamic=dyn)
        np.testing.assert_allclose(g(x, good), x[good] * 2)
        np.testing.assert_array_equal(s(xi, 3), xi + 3)
        lg = jd.load(g.export(str(tmp_path / f"g{dyn}.jdx"), x, good))
        ls = jd.load(s.export(str(tmp_path / f"s{dyn}.jdx"), xi, 3))
        np.testing.assert_allclose(lg(x, good), x[good] * 2)
        for f in (g, lg):
            for _ in range(2):
                with pytest.raises(IndexError, match=r"index `idx\[i\]` into X is 7") as e:
                    line = inspect.currentframe().f_lineno + 1
                    f(x, bad)
                assert isinstance(e.value, jd.JitdlError)
                assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)
        for f in (s, ls):
            for _ in range(2):
                with pytest.raises(OverflowError, match="out of bounds for int32") as e:
                    line = inspect.currentframe().f_lineno + 1
                    f(xi, 2 ** 40)
                assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)
                assert f'(the definition: File "{__file__}", line ' \
                       f'{shift.__code__.co_firstlineno + 1}: return jd.tensor(X.shape, ' \
                       'lambda i: X[i] + s))' in str(e.value)


def test_a_loaded_export_reports_a_mismatch_before_a_pattern_refused_at_export(tmp_path):
    """A pattern of sizes the schedule refused at export (pack of B needs B's columns
    concrete: only B of one column has a kernel) was the loaded function's 'the
    definition refused these sizes at export (ScheduleError ...)' for A (3, 6) @ B (5, 4)
    too, where the function says shape mismatch. The mismatch of sizes the exported
    kernels check equal now comes first, with the caller's line."""
    f = _dynamic_matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        s.pack("B", s["C"], 1, 4)
    a, b = rand(3, 6), rand(6, 1)
    g = jd.load(f.export(str(tmp_path / "mm.jdx"), a, b))
    got = np.full((3, 1), np.nan)
    g(a, b, out=got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)
    for h in (f, g):
        with pytest.raises(jd.errors.ArgumentShapeError) as e:
            line = inspect.currentframe().f_lineno + 1
            h(a, rand(5, 4))
        assert str(e.value).startswith(
            "matmul(): shape mismatch: argument 'A' has size 6 in dimension 1 but argument "
            "'B' has size 5 in dimension 0 (A (3, 6), B (5, 4))")
        assert (e.value.loc.filename, e.value.loc.lineno) == (__file__, line)
    with pytest.raises(ArgumentError, match="refused these sizes at export"):
        g(a, rand(6, 4))


def test_a_read_under_a_max_compared_with_itself_is_not_proven():
    """`(e <= e) & (i < e)` with e = max(n, m), one node: the prover narrowed `e <= e` as
    `e <= n` and `e <= m` (it took the max on the left for one on the right), so X[i] for
    i < max(n, m) counted as inside X of n: X (3,), Y (2000,) read X[3..1999] unchecked
    (garbage in the output). The definition is refused, as with static sizes; guarded by
    a min of the same sizes, it computes every element, as NumPy."""
    def over_max(X, Y):
        n, = X.shape
        m, = Y.shape
        e = jd.max(n, m)
        return jd.tensor((m,), lambda i: jd.select((e <= e) & (i < e), X[i], -1.0), name="O")

    def under_min(X, Y):
        n, = X.shape
        m, = Y.shape
        e = jd.min(n, m)
        return jd.tensor((m,), lambda i: jd.select((e >= e) & (i < e), X[i] + Y[i], -1.0),
                         name="O")
    f = jd.compute(over_max, dynamic=True)
    with pytest.raises(jd.DefinitionError, match=r"cannot prove index `i` of dimension 0"):
        f(rand(3), rand(2000))
    g = jd.compute(under_min, dynamic=True)
    for n, m in [(3, 2000), (7, 5), (0, 4), (1, 1), (13, 13), (5, 0)]:
        x, y = rand(n), rand(m)
        want = np.array([x[i] + y[i] if i < min(n, m) else -1.0 for i in range(m)])
        got = np.full(m, np.nan)
        assert g(x, y, out=got) is got
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert "]!" not in g.lower(rand(3), rand(5))


def _guarded_max(X):
    n, m = X.shape
    Y[i] = jd.select(m > 0, max(X[i, k] for k in range(m)), 0.0)
    return Y


def _guarded_argmin(X):
    n, m = X.shape
    k = jd.reduce_axis(m - 2)
    return jd.tensor((n,), lambda i: jd.select((m < 3) | (n == 0), -5,
                                               jd.argmin(X[i, k], axis=k)))


def _half_guarded_max(X):
    n, m = X.shape
    k = jd.reduce_axis(m)
    return jd.tensor((n,), lambda i: (lambda r: jd.select(m > 0, r, 0.0) + r)(
        jd.max(X[i, k], axis=k)))


@pytest.mark.parametrize("fn", [_guarded_max, _guarded_argmin, _half_guarded_max],
                         ids=lambda f: f.__name__)
def test_a_reduction_guarded_by_its_size_runs_where_the_guard_is_false(fn, tmp_path):
    """A max over a symbolic range in a select's arm taken only where the range is not
    empty (jd.select(m > 0, max(... for k in range(m)), 0.0), as the error of `if m > 0`
    tells one to write) was refused at every call of an empty range (f194e0d checked
    `m > 0` whatever the guard): the call checks `guard -> m > 0`. A use outside the
    guard still needs it whole. Also from a loaded export."""
    def ref(x):
        n, m = x.shape
        if fn is _guarded_max:
            return x.max(1) if m > 0 else np.zeros(n)
        if fn is _guarded_argmin:
            return x[:, :m - 2].argmin(1) if m >= 3 and n > 0 else np.full(n, -5)
        return 2 * x.max(1)
    f = jd.compute(dynamic=True)(fn)
    path = tmp_path / "f.jdx"
    f.export(str(path), rand(3, 5))
    loaded = jd.load(str(path))
    for g in (f, loaded):
        for shape in [(3, 4), (3, 0), (0, 0), (4, 2), (5, 7), (2, 3), (0, 5), (13, 11)]:
            x = rand(*shape)
            try:
                want = ref(x)
            except ValueError:
                with pytest.raises(jd.errors.ArgumentShapeError, match="no identity"):
                    g(x)
                assert fn is _half_guarded_max
                continue
            out = np.full(want.shape, np.nan if want.dtype.kind == "f" else -7, want.dtype)
            got = g(x, out=out) if g is f else g(x)
            np.testing.assert_array_equal(got, want)


def _written(g, x, want):
    """g(x) into an out= array filled with NaN (every element must be written)."""
    out = np.full(want.shape, np.nan)
    assert g(x, out=out) is out
    return out


def _folded_sum(X):
    n, m = X.shape
    Y[i] = jd.select(n > 1, sum(X[i, k] for k in range(m)), 0.0)
    return Y


def _folded_shift(X):
    n, = X.shape
    Y[i] = jd.select(n > 2, X[i + 2], X[i])
    return Y


@pytest.mark.parametrize("fn", [_folded_sum, _folded_shift], ids=lambda f: f.__name__)
def test_a_select_arm_dropped_by_a_constant_condition_still_bounds_the_indices(fn):
    """A select whose condition is constant at a size (n > 1 of n = 1: a static call, or a
    dynamic kernel's size-1 pattern) dropped its other arm before the index ranges were
    inferred: its accesses did not count, so `Y[i] = jd.select(n > 1, sum(X[i, k] ...),
    0.0)` of X (1, 3) could not infer i, and `jd.select(n > 2, X[i + 2], X[i])` of X (2,)
    ranged i over 2 where the dynamic kernel (which keeps the select) ranges it over
    n - 2 = 0. Every access counts (Tensor Comprehensions' rule): static and dynamic agree
    with NumPy over sizes 0, 1, 2, 3, 5."""
    def ref(x):
        if fn is _folded_sum:
            return x.sum(1) if x.shape[0] > 1 else np.zeros(x.shape[0])
        return x[2:] if len(x) > 2 else x[:0]
    shapes = ([(n, m) for n in (0, 1, 2, 3, 5) for m in (0, 1, 2, 3, 5)]
              if fn is _folded_sum else [(n,) for n in (0, 1, 2, 3, 5)])
    for g in (jd.compute(fn), jd.compute(dynamic=True)(fn)):
        for shape in shapes:
            x = rand(*shape)
            want = ref(x)
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12, atol=1e-12)


def _dead_max(X):
    n, m = X.shape
    Y[i] = jd.select(m > 2, max(X[i, k] for k in range(m - 2)), 0.0)
    return Y


def _dead_max_by_rows(X):
    n, m = X.shape
    Y[i] = jd.select(n > 1, max(X[i, k] for k in range(m)), 0.0)
    return Y


def _guarded_empty_max(X):
    n, m = X.shape
    Y[i] = jd.select(n > 1, max(X[i, k] for k in range(m - 1)), 0.0)
    return Y


def _dead_argmin_te(X):
    n, m = X.shape
    k = jd.reduce_axis(m - 1)
    return jd.tensor((n,), lambda i: jd.select((m > 1) & (n > 0), jd.argmin(X[i, k], axis=k),
                                               -5))


def _like_numpy_or_no_identity(g, x, ref, tol=0):
    """g(x) into an out= of NaN (or -7) is ref(x) (its dtype: out= checks it; within tol),
    or refused as having no identity where ref, NumPy's, raises ValueError (an empty
    max)."""
    try:
        want = ref(x)
    except ValueError:
        with pytest.raises((DefinitionError, jd.errors.ArgumentShapeError),
                           match="no identity"):
            g(x)
        return
    out = np.full(want.shape, np.nan if want.dtype.kind == "f" else -7, want.dtype)
    assert g(x, out=out) is out
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("fn", [_dead_max, _dead_max_by_rows, _guarded_empty_max,
                                _dead_argmin_te], ids=lambda f: f.__name__)
def test_a_max_over_an_empty_range_in_a_dead_arm_is_not_refused(fn):
    """A max (min, argmax, argmin) over a range empty at the call's sizes in a select's arm
    not taken there: jd.select(m > 2, max(X[i, k] for k in range(m - 2)), 0.0) of X (3, 1)
    was refused at the trace ('no identity'), statically and in the dynamic kernel's size-1
    pattern (m the constant 1), before the select (m > 2 False) dropped the arm; a
    symbolic range's call-time check (range(m) of jd.select(n > 1, ...) at X (1, 0)) stayed
    though its arm was dropped. Now the error is raised where the reduction is used
    unguarded, checked at the call where a condition on sizes guards it (range(m - 1) of m
    = 1 under n > 1), and nothing where no stage uses it. Static and dynamic against NumPy
    over sizes 0, 1, 2, 3, 5; where NumPy raises, both raise 'no identity'."""
    def ref(x):
        n, m = x.shape
        if fn is _dead_max:
            return x[:, :m - 2].max(1) if m > 2 else np.zeros(n)
        if fn is _dead_max_by_rows:
            return x.max(1) if n > 1 else np.zeros(n)
        if fn is _guarded_empty_max:
            return x[:, :max(m - 1, 0)].max(1) if n > 1 else np.zeros(n)
        return x[:, :m - 1].argmin(1) if m > 1 and n > 0 else np.full(n, -5)
    for g in (jd.compute(fn), jd.compute(dynamic=True)(fn)):
        for shape in [(n, m) for n in (0, 1, 2, 3, 5) for m in (0, 1, 2, 3, 5)]:
            _like_numpy_or_no_identity(g, rand(*shape), ref)


def _filtered_past_the_end(X):
    n, m = X.shape
    Y[i] = max(X[i, k] for k in range(m) if k > m)
    return Y


def _filtered_to_the_tail(X):
    n, m = X.shape
    Y[i] = min(X[i, k] for k in range(m) if k >= 3 and k < m + 1)
    return Y


def _filtered_on_sizes(X):
    n, m = X.shape
    Y[i] = jd.argmax(X[i, k] for k in range(m) if m < 3 or k == m - 4)
    return Y


def _filtered_in_a_dead_arm(X):
    n, m = X.shape
    Y[i] = jd.select(m > 3, max(X[i, k] for k in range(m) if k > 2), 0.0)
    return Y


def _filtered_te(X):
    n, m = X.shape
    k = jd.reduce_axis(m, name="k")
    return jd.tensor((n,), lambda i: jd.max(X[i, k], axis=k, where=k < m - 2), name="Y")


@pytest.mark.parametrize("fn", [_filtered_past_the_end, _filtered_to_the_tail,
                                _filtered_on_sizes, _filtered_in_a_dead_arm, _filtered_te],
                         ids=lambda f: f.__name__)
def test_a_max_whose_condition_selects_nothing_has_no_identity(fn):
    """A max (min, argmax) whose generator `if` or where= selects no point of its range
    (`if k > m` over range(m); `if k >= 3` of m = 3) gave the identity (-inf, inf, 0) for
    every row, where NumPy's max of the empty selection raises, as jitdl does for an
    empty range: now refused at the trace with constant sizes and checked at the call
    with symbolic ones, unless the reduction sits in an arm not taken at these sizes.
    Static and dynamic against NumPy over widths 0 to 6."""
    def ref(x):
        n, m = x.shape
        if fn is _filtered_past_the_end:
            return x[:, m + 1:].max(1)
        if fn is _filtered_to_the_tail:
            return x[:, 3:].min(1)
        if fn is _filtered_on_sizes:
            return x.argmax(1) if m < 3 else np.full(n, m - 4) if m >= 4 else \
                x[:, :0].argmax(1)
        if fn is _filtered_in_a_dead_arm:
            return x[:, 3:].max(1) if m > 3 else np.zeros(n)
        return x[:, :max(m - 2, 0)].max(1)
    for g in (jd.compute(fn), jd.compute(dynamic=True)(fn)):
        for m in range(7):
            _like_numpy_or_no_identity(g, rand(3, m), ref)


def test_a_max_whose_condition_reads_data_keeps_its_identity():
    """A condition on the data (or on another index) is not known before the kernel runs:
    a row it selects nothing of gets the identity, -inf, as before."""
    @jd.compute
    def f(X):
        n, m = X.shape
        Y[i] = max(X[i, k] for k in range(m) if X[i, k] > 0.5)
        return Y
    x = np.array([[0.1, 0.9, 0.7], [0.2, 0.3, 0.4]])
    np.testing.assert_array_equal(f(x), [0.9, -np.inf])


def _guarded_one(X, Y):
    n, = X.shape
    m, = Y.shape
    W[k] = X[k] + jd.select(k < m, Y[k], 0.0)
    return W


def _guarded_pair(X, Y, Z):
    n, = X.shape
    m, = Y.shape
    W[k] = jd.select(k < jd.min(n, m), X[k] * Y[k], 0.0) + Z[k]
    return W


def _guarded_each(X, Y, Z):
    n, = X.shape
    m, = Y.shape
    W[k] = jd.select(k < n, X[k], 0.0) + jd.select(k < m, Y[k], 0.0) + Z[k]
    return W


def _guarded_else(X, Y, Z):
    n, = X.shape
    m, = Y.shape
    W[k] = jd.select(k < jd.min(n, m), X[k] * Y[k], Z[k])
    return W


@pytest.mark.parametrize("fn", [_guarded_one, _guarded_pair, _guarded_each, _guarded_else],
                         ids=lambda f: f.__name__)
def test_a_bare_index_guarded_by_its_size_bounds_the_range_and_is_not_checked(fn):
    """A dimension indexed by a bare index under a guard comparing it with that
    dimension's size (Y[k] under k < m) was taken, in a dynamic kernel, for one the call
    checks equal to the others (check_shape_agreement skips a guarded one): its size
    could become the extent while the others were checked against it (X (2,), Y (3,),
    Z (4,) of `jd.select(k < jd.min(n, m), X[k] * Y[k], 0.0) + Z[k]`: 'shape mismatch' X
    against Z, where the static definition computes), or was left out (`X[k] +
    jd.select(k < m, Y[k], 0.0)` ranged k over n, past Y's m; a size-1 pattern ranged k
    over 1 with Z of 0 elements). Now it bounds the range as any access does (Tensor
    Comprehensions' rule: k < min(n, m, p)). Dynamic against NumPy over sizes 0, 1, 2, 3,
    5 and against the static definition where that computes (it takes `k < 2` of
    min(2, 3) as no guard of Y of 3, and refuses some of these calls)."""
    def ref(*xs):
        w = min(len(x) for x in xs)
        x, y = xs[0][:w], xs[1][:w]
        if fn is _guarded_one:
            return x + y
        if fn is _guarded_pair:
            return x * y + xs[2][:w]
        if fn is _guarded_each:
            return x + y + xs[2][:w]
        return x * y
    nargs = 2 if fn is _guarded_one else 3
    static, dynamic = jd.compute(fn), jd.compute(dynamic=True)(fn)
    for sizes in itertools.product((0, 1, 2, 3, 5), repeat=nargs):
        xs = [rand(s) for s in sizes]
        want = ref(*xs)
        got = _written(lambda *a, **k: dynamic(*xs, **k), None, want)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        try:
            np.testing.assert_allclose(static(*xs), want, rtol=1e-12, atol=1e-12)
        except jd.errors.ArgumentShapeError:
            pass


def _filtered_sum(X):
    n, m = X.shape
    Y[i] = sum(X[i, k] for k in range(m - 1) if m > 2)
    return Y


def _filtered_max(X):
    n, m = X.shape
    Y[i] = max(X[i, k] for k in range(m - 1) if m > 2)
    return Y


@pytest.mark.parametrize("fn", [_filtered_sum, _filtered_max], ids=lambda f: f.__name__)
def test_a_generator_filter_false_at_the_sizes_selects_no_element(fn):
    """A generator's filter on the sizes false at the call's (`sum(X[i, k] for k in
    range(m - 1) if m > 2)` of m = 2) was a constant False in a static trace (or a size-1
    pattern's), which jd.reduce refused ('the where= condition is always False') where
    the dynamic kernel, whose filter is symbolic, selects no element: the sum's 0. Now
    the constant filter stays and selects nothing. Static and dynamic against NumPy over
    sizes 0, 1, 2, 3, 5; a max over range(m - 1) empty (m <= 1), or whose filter selects
    nothing (m = 2: NumPy's max of an empty selection), raises 'no identity' in both."""
    def ref(x):
        n, m = x.shape
        part = x[:, :max(m - 1, 0)]
        if fn is _filtered_sum:
            return part.sum(1) if m > 2 else np.zeros(n)
        return part[:, :part.shape[1] if m > 2 else 0].max(1)
    for g in (jd.compute(fn), jd.compute(dynamic=True)(fn)):
        for shape in [(n, m) for n in (0, 1, 2, 3, 5) for m in (0, 1, 2, 3, 5)]:
            _like_numpy_or_no_identity(g, rand(*shape), ref, tol=1e-12)


def _select_rows(X, Z):
    n, m = X.shape
    Y[i, j] = X[i, j] * jd.select(Z.shape[0] > 1, Z[i, j], Z[0, j])
    return Y


def test_a_fixed_end_the_call_checks_nothing_against_keeps_the_symbolic_sizes():
    """An index bounded by a fixed size and by a dynamic argument's symbolic size it
    indexes whole (i of Z[i, j], Z of 1 row, and X[i, j]) took the fixed end alone,
    counting on the call to check X's size against it; the call checks a fixed size only
    against a read of it in the body that no guard relates to it, and Z[i, j] is in the
    arm that jd.select(Z.shape[0] > 1, ...) drops at the size-1 pattern: 'cannot prove
    index i inside [0, X_n0)' where the static definition computes min(n, 1) rows. The
    symbolic sizes now count where no such read exists. Dynamic and static against
    NumPy (both arms bound i: min(n, p) rows) over sizes 0, 1, 2, 3, 5."""
    static, dynamic = jd.compute(_select_rows), jd.compute(dynamic=True)(_select_rows)
    for n, m in itertools.product((0, 1, 2, 3, 5), repeat=2):
        for p in sorted({1, n}):
            x, z = rand(n, m), rand(p, m)
            r = min(n, p)
            want = x[:r] * (z[:r] if p > 1 else z[:1])
            for g in (static, dynamic):
                got = _written(lambda *a, **k: g(x, z, **k), None, want)
                np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _dropped_arm_other_size(X, Z, W):
    Y[i] = X[i] + jd.select(W.shape[0] > 1, Z[i], 0.0)
    return Y


def test_a_dropped_arms_bare_read_of_a_dynamic_size_bounds_the_range():
    """A bare read of a dynamic argument in a select's arm that a constant condition
    dropped (Z[i] of `X[i] + jd.select(W.shape[0] > 1, Z[i], 0.0)` at W's size-1 pattern)
    was taken by infer_ranges for one the call checks equal to the others, which
    check_shape_agreement does not (it sees only the kept body): i ranged over X's n,
    not min(n, p) as in the static definition (TC's rule, every access counts): X (3,),
    Z (2,) gave 3 elements. Now it bounds the range as a guarded read does. Static and
    dynamic against NumPy over sizes 0, 1, 2, 3, 5 (every element written)."""
    static, dynamic = jd.compute(_dropped_arm_other_size), \
        jd.compute(dynamic=True)(_dropped_arm_other_size)
    for n, p in itertools.product((0, 1, 2, 3, 5), repeat=2):
        x, z, w = rand(n), rand(p), rand(1)
        want = x[:min(n, p)]
        for g in (static, dynamic):
            np.testing.assert_allclose(_written(lambda *a, **k: g(x, z, w, **k), None, want),
                                       want, rtol=1e-12, atol=1e-12)


def _twin_max(X):
    n, m = X.shape
    Y[i] = jd.select(n > 1, max(X[i, k] for k in range(m)), 0.0) + max(X[i, k] for k in range(m))
    return Y


def _twin_max_guarded_later(X, W):
    n, m = X.shape
    Z[i] = max(X[i, k] for k in range(m)); Y[i] = Z[i] + jd.select(W.shape[0] > 1, max(X[i, k] for k in range(m)), 0.0)  # noqa: E702, E501
    return Y


@pytest.mark.parametrize("fn", [_twin_max, _twin_max_guarded_later], ids=lambda f: f.__name__)
def test_a_guarded_or_dropped_reductions_check_keeps_an_equal_one_a_stage_needs(fn):
    """Two user maxes over range(m) on one line record equal call-time checks (m > 0, one
    message, one source line), which require_size keeps once: at the size-1 pattern of
    n, `jd.select(n > 1, max(...), 0.0) + max(...)` dropped the first, and forgetting its
    check removed the second's, which the stage reads unguarded (X (1, 0) gave -inf where
    NumPy raises); a second under a guard (W.shape[0] > 1) replaced the check of a first
    an earlier stage reads unguarded by its guarded one (X (3, 0), W (0,): -inf). Static
    and dynamic against NumPy over sizes 0, 1, 2, 3, 5; 'no identity' where NumPy
    raises."""
    def ref(x, w):
        n, m = x.shape
        if fn is _twin_max:
            return (x.max(1) if n > 1 else np.zeros(n)) + x.max(1)
        return x.max(1) + (x.max(1) if len(w) > 1 else np.zeros(n))
    for g in (jd.compute(fn), jd.compute(dynamic=True)(fn)):
        for n, m, p in itertools.product((0, 1, 2, 3, 5), (0, 1, 2, 3, 5), (0, 2)):
            x, w = rand(n, m), rand(p)
            args = (x,) if fn is _twin_max else (x, w)
            if m == 0 and n > 0:
                with pytest.raises((DefinitionError, jd.errors.ArgumentShapeError),
                                   match="no identity"):
                    g(*args)
                continue
            if m == 0:
                continue        # (x.max(1) of (0, 0) raises in NumPy; jitdl: nothing to do)
            want = ref(x, w)
            np.testing.assert_allclose(_written(lambda *a, **k: g(*args, **k), None, want),
                                       want, rtol=1e-12, atol=1e-12)


def _same_shape_else(X, Y):
    Z[i] = X[i] if X.shape == Y.shape else Y[i] * 2
    return Z


def _size_in_set(X):
    Z[i] = X[i] * (2.0 if X.shape[0] in (3, 4) else 1.0) + (i in (0, 2)) + \
        (1.0 if X.shape not in [(5,)] else 3.0) + (4.0 if X.shape[0] in range(1, 9, 3) else 0)
    return Z


def _asserted_same_shape(X, Y):
    assert X.shape == Y.shape
    Z[i] = X[i] - Y[i]
    return Z


def test_sizes_compared_as_tuples_or_found_in_containers_are_conditions():
    """`X.shape == Y.shape` and `X.shape[0] in (3, 4)` of dynamic sizes (and `i in (0, 2)`
    of an index, static or dynamic) compared the symbolic values as Python objects (X_n0
    is not Y_n0): a False baked into the kernel for every size, a silently wrong answer
    (X (2,), Y (2,) of `X[i] if X.shape == Y.shape else Y[i] * 2` gave 2 * Y), and
    `assert X.shape == Y.shape` failed. Now a sequence comparison joins its elements'
    comparisons with `and`, `in` its equalities with `or`. Static and dynamic against
    NumPy over sizes 0, 1, 2, 3, 4, 5, 7."""
    def size_in_set(x):
        n = len(x)
        return (x * (2.0 if n in (3, 4) else 1.0) + np.isin(np.arange(n), (0, 2))
                + (1.0 if n != 5 else 3.0) + (4.0 if n in (1, 4, 7) else 0.0))
    for dyn in (False, True):
        same_shape = jd.compute(_same_shape_else, dynamic=dyn)
        size_in = jd.compute(_size_in_set, dynamic=dyn)
        asserted = jd.compute(_asserted_same_shape, dynamic=dyn)
        for n in (0, 1, 2, 3, 4, 5, 7):
            x, y = rand(n), rand(n)
            np.testing.assert_array_equal(_written(lambda *a, **k: same_shape(x, y, **k),
                                                   None, x), x)
            np.testing.assert_array_equal(_written(size_in, x, x), size_in_set(x))
            np.testing.assert_array_equal(asserted(x, y), x - y)
        x, y = rand(3), rand(1)
        np.testing.assert_array_equal(same_shape(x, y), y * 2)
        with pytest.raises((DefinitionError, ArgumentError)):    # (static: the assert's)
            asserted(rand(3), rand(4))


def _found_beside_non_numbers(X):
    n = X.shape[0]
    Z[i] = X[i] * (2.0 if n in (None, "a", 3) else 1.0) + (X.shape == (None,)) + \
        (1.0 if n not in ("b", (4,), 4) else 3.0) + (n in range(10**12)) + \
        (4.0 if n in range(7, 0, -2) else 0.0) + (i in range(5, -1, -2)) + \
        (8.0 if 3 in range(10**12) else 0.0) + (X[i] in range(3))
    return Z


def test_in_and_equality_beside_none_strings_and_huge_ranges_are_pythons():
    """`n in (None, 3)` of a dynamic size raised "NoneType value None cannot be used in a
    jitdl expression" (a str, "a", the same) where the static definition and Python say
    the size is no None; and `3 in range(10**12)` listed the range (a MemoryError; 10**6
    points took a second per trace), where Python's test is one comparison. Now a size
    or an index against None, a str or a tuple is Python's False, and a range is bounds
    and a modulus (a descending one too), never listed. Static and dynamic against
    NumPy over sizes 0, 1, 2, 3, 4, 5, 7, every element written."""
    def want(x):
        n, idx = len(x), np.arange(len(x))
        return (x * (2.0 if n == 3 else 1.0) + (1.0 if n != 4 else 3.0) + 1.0
                + (4.0 if n in (7, 5, 3, 1) else 0.0) + np.isin(idx, (5, 3, 1)) + 8.0
                + np.isin(x, (0.0, 1.0, 2.0)))
    for dyn in (False, True):
        g = jd.compute(_found_beside_non_numbers, dynamic=dyn)
        for n in (0, 1, 2, 3, 4, 5, 7):
            x = rand(n)
            x[:2] = (1.0, 2.5)[:n]          # (X[i] in range(3): 1.0 is, 2.5 is not)
            np.testing.assert_array_equal(_written(g, x, want(x)), want(x))


def _shape_ordered(X, Y):
    Z[i, j] = X[i, j] * (2.0 if X.shape < (4, 4) else 1.0) + (X.shape >= (3, 2)) + \
        (10.0 if X.shape <= (4,) else 0.0) + (100.0 if Y.shape > X.shape else 0.0) + \
        (X.shape[:1] < Y.shape)
    return Z


def test_sizes_ordered_as_tuples_are_pythons_lexicographic_order():
    """`X.shape < (4, 4)` of a dynamic X compared the first sizes alone (Python's tuple
    order took `X_n0 == 4` for False, X_n0 being no 4, and answered `X_n0 < 4`): X (4, 2)
    was not below (4, 4), silently, where the static definition and Python say it is.
    Now the first pair that differs decides, else the lengths, as in Python. Static and
    dynamic against Python's order over shapes around the bounds, every element
    written."""
    def want(x, y):
        s, t = x.shape, y.shape
        return (x * (2.0 if s < (4, 4) else 1.0) + (s >= (3, 2)) + (10.0 if s <= (4,) else 0.0)
                + (100.0 if t > s else 0.0) + (s[:1] < t))
    for dyn in (False, True):
        g = jd.compute(_shape_ordered, dynamic=dyn)
        for shape in ((4, 2), (4, 4), (4, 5), (3, 1), (3, 2), (3, 9), (5, 0), (1, 1)):
            for other in ((4, 3), (3,), (5, 2, 1)):
                x, y = rand(*shape), rand(*other)
                np.testing.assert_array_equal(
                    _written(lambda *a, **k: g(x, y, **k), None, want(x, y)), want(x, y))


def _filter_guarded_read(X, Y):
    n, = X.shape
    m, = Y.shape
    Z[i] = Y[i] + sum(X[k] * 2 for k in range(m) if k < n)
    return Z


def test_a_generator_filter_guards_a_read_of_another_size():
    """`Y[i] + sum(X[k] for k in range(m) if k < n)` (m = len(Y), n = len(X)): the filter
    keeps X[k] in bounds, as `X[k] if k < n else 0` would, so X and Y need not agree. The
    dynamic kernel asked them to ('shape mismatch: argument 'Y' has size 2 ... 'X' has
    size 0'), where the static definition computes: bare_uses took a filter for no
    guard. Static and dynamic against NumPy over sizes 0, 1, 2, 3, 5."""
    static, dynamic = jd.compute(_filter_guarded_read), \
        jd.compute(dynamic=True)(_filter_guarded_read)
    for n, m in itertools.product((0, 1, 2, 3, 5), repeat=2):
        x, y = rand(n), rand(m)
        want = y + 2 * x[:min(n, m)].sum()
        for g in (static, dynamic):
            got = _written(lambda *a, **k: g(x, y, **k), None, want)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def _scaled_by_longest(X):
    Z[i] = X[i] * max(X.shape) + min(X.shape)
    return Z


def test_python_max_of_a_one_dimensional_shape_is_its_size():
    """Python's max(X.shape) / min(X.shape) of a 1-d dynamic X: one symbolic size, which
    became jd.max(X_n0), 'jd.max(x) with one argument needs axis=' where the static
    definition computes. Now the one element, as Python's. Static and dynamic against
    NumPy over sizes 0, 1, 2, 3, 5."""
    for g in (jd.compute(_scaled_by_longest), jd.compute(dynamic=True)(_scaled_by_longest)):
        for n in (0, 1, 2, 3, 5):
            x = rand(n)
            np.testing.assert_allclose(_written(g, x, x), x * n + n, rtol=1e-12)


def _masked_prefix_sum(X):
    n, m = X.shape
    Z[i] = sum(X[i, k] for k in range(jd.min(i + 1, m)))
    return Z


def _masked_prefix_max(X):
    n, m = X.shape
    Z[i] = max(X[i, k] for k in range(jd.min(i + 1, m)))
    return Z


def _masked_lower_sum(X):
    n, m = X.shape
    Z[i] = sum(X[i, k] for k in range(i))
    return Z


def test_a_sum_over_a_masked_range_empty_at_every_index_is_zero():
    """sum(X[i, k] for k in range(jd.min(i + 1, m))) of m = 0: a range empty for every i,
    whose sum is 0 (NumPy's, and the dynamic kernel's), was refused by the static
    definition ('reduction index `k` has an empty range'), and so was range(i) of one
    row in both (a size-1 pattern). Now such a range selects nothing, as one empty at
    some indices does (range(i) at i = 0): a sum's 0, a max's -inf, static and dynamic
    alike. Against NumPy over sizes 0, 1, 2, 3, 5, every element written."""
    static, dynamic = jd.compute(_masked_prefix_sum), jd.compute(dynamic=True)(_masked_prefix_sum)
    for n, m in itertools.product((0, 1, 2, 3, 5), repeat=2):
        x = rand(n, m)
        want = np.array([x[i, :min(i + 1, m)].sum() for i in range(n)])
        for g in (static, dynamic):
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12, atol=1e-12)
    for g in (jd.compute(_masked_prefix_max), jd.compute(dynamic=True)(_masked_prefix_max)):
        np.testing.assert_array_equal(_written(g, rand(3, 0), np.zeros(3)), [-np.inf] * 3)
        x = rand(4, 3)
        want = np.array([x[i, :min(i + 1, 3)].max() for i in range(4)])
        np.testing.assert_array_equal(_written(g, x, want), want)
    for g in (jd.compute(_masked_lower_sum), jd.compute(dynamic=True)(_masked_lower_sum)):
        x = rand(1, 3)      # (one row: range(0); a dynamic kernel of more rows cannot
        #                    prove k < m, as a static one of n > m + 1 finds it outside)
        np.testing.assert_array_equal(_written(g, x, np.zeros(1)), np.zeros(1))


def _plus_row_dot(X, Y, W):
    Z[i] = X[i] + sum(Y[i, k] * W[k] for k in range(W.shape[0]))
    return Z


def test_an_argument_read_bare_inside_a_split_reduction_agrees_with_the_others():
    """`X[i] + sum(Y[i, k] * W[k] ...)`: i indexes X and Y whole, so their sizes must agree
    (DESIGN's shape agreement). The static definition computed min(len(X), len(Y)) rows
    (X (3,), Y (5, 2): 3 elements, silently), as the reduction became a stage of its own
    whose read of Y the agreement of the statement did not see; the dynamic kernel
    refused it. Now the stage's bare read counts as the statement's: both raise 'shape
    mismatch' naming X and Y, and agree with NumPy where the sizes agree."""
    static, dynamic = jd.compute(_plus_row_dot), jd.compute(dynamic=True)(_plus_row_dot)
    for n, p, r in itertools.product((0, 1, 2, 3, 5), (0, 1, 2, 3, 5), (0, 2)):
        x, y, w = rand(n), rand(p, r), rand(r)
        for g in (static, dynamic):
            if n != p:
                with pytest.raises(jd.errors.ArgumentShapeError,
                                   match=r"argument '[XY]' has size \d+ in dimension 0 but "
                                         r"argument '[XY]'"):
                    g(x, y, w)
                continue
            want = x + y @ w
            np.testing.assert_allclose(_written(lambda *a, **k: g(x, y, w, **k), None, want),
                                       want, rtol=1e-12, atol=1e-12)


_SCALES = {3: 2.0, 5: 4.0}


def _scale_by_size(X):
    n = X.shape[0]
    Z[i] = X[i] * {3: 2.0}.get(n, 1.0) + {(3,): 10.0, (4,): 20.0}.get(X.shape, 0.0) + \
        {0: 100.0, 2: 300.0}.get(i, -1.0) + {1.0: 1000.0}.get(X[i], 0.0)
    return Z


def _scale_required(X):
    Z[i] = X[i] * _SCALES[X.shape[0]]
    return Z


def test_a_dict_looked_up_with_a_size_an_index_or_an_element_selects_among_its_keys():
    """`{3: 2.0}.get(X.shape[0], 1.0)` in a dynamic definition hashed the size expression
    and missed every key: 1.0 for X of length 3, where the static definition (and
    Python) give 2.0, silently; `.get(i, ...)` of an index and `.get(X[i], ...)` of an
    element missed in static definitions too. Now a dict looked up with a symbolic key is
    a select over its keys; `d[n]` without a default checks at the call that the size
    is a key (static: the KeyError of the trace). Static and dynamic against NumPy over
    sizes 0-7, every element written."""
    def want(x):
        n = len(x)
        return (x * (2.0 if n == 3 else 1.0) + {3: 10.0, 4: 20.0}.get(n, 0.0)
                + np.where(np.arange(n) == 0, 100.0, np.where(np.arange(n) == 2, 300.0, -1.0))
                + np.where(x == 1.0, 1000.0, 0.0))
    for dyn in (False, True):
        g = jd.compute(_scale_by_size, dynamic=dyn)
        required = jd.compute(_scale_required, dynamic=dyn)
        for n in range(8):
            x = rand(n)
            x[1:2] = 1.0
            np.testing.assert_array_equal(_written(g, x, want(x)), want(x))
            if n in _SCALES:
                np.testing.assert_array_equal(_written(required, x, x), x * _SCALES[n])
            else:
                with pytest.raises((DefinitionError, jd.errors.ArgumentShapeError),
                                   match="KeyError"):
                    required(x)


def _index_key_required(X):
    Z[i] = X[i] * _SCALES[i]
    return Z


def _tuple_valued(X):
    Z[i] = X[i] * {3: (1, 2)}.get(X.shape[0], 1.0)
    return Z


def test_a_dict_lookup_that_cannot_select_is_an_error_naming_the_key():
    """A symbolic key without a default that the call cannot check (an index), or a dict
    whose values are no numbers, is an error at the user's line."""
    with pytest.raises(DefinitionError, match=r"symbolic key `i`.*give a default") as e:
        jd.compute(_index_key_required)(rand(3))
    assert "Z[i] = X[i] * _SCALES[i]" in str(e.value)
    with pytest.raises(DefinitionError, match=r"symbolic key `X_n0`.*the value at 3 is "
                                              r"tuple \(1, 2\)"):
        jd.compute(_tuple_valued, dynamic=True)(rand(3))


def _scale_of(n):
    return {3: 2.0}.get(n, 1.0)


def _size_in_helper(n):
    return jd.select(n in (3, 4), 2.0, 1.0)


def _sizes_as_objects(X, how: str):
    n = X.shape[0]
    c = {"dict": lambda: _scale_of(n), "in": lambda: _size_in_helper(n),
         "set": lambda: len({n, 3}), "hash": lambda: hash(n) % 5,
         "count": lambda: [3, 3, 4].count(n)}[how]()
    Z[i] = X[i] * c
    return Z


@pytest.mark.parametrize("how", ["dict", "in", "set", "hash", "count"])
def test_a_size_hashed_or_compared_as_an_object_in_a_helper_is_a_clear_error(how):
    """A dynamic size that a helper looked up in a dict (`{3: 2.0}.get(n, 1.0)`), found
    `in (3, 4)` or counted in a list, or that the definition put in a set or hashed, was
    taken as an object: X * 1.0 for X of length 3 (static: X * 2.0), `len({n, 3})` 2 for
    n = 3, silently. The capture can select by value only in the definition's own code:
    elsewhere it is now an error naming the size and the line; the static definition
    computes Python's answer."""
    def want(x):
        n = len(x)
        return x * {"dict": {3: 2.0}.get(n, 1.0), "in": 2.0 if n in (3, 4) else 1.0,
                    "set": len({n, 3}), "hash": hash(n) % 5, "count": [3, 3, 4].count(n)}[how]
    static = jd.compute(_sizes_as_objects, static=("how",))
    dynamic = jd.compute(_sizes_as_objects, static=("how",), dynamic=True)
    for n in (0, 2, 3, 4, 5):
        x = rand(n)
        np.testing.assert_array_equal(static(x, how), want(x))
        with pytest.raises(DefinitionError, match=r"`X_n0` is a dynamic size, a number only "
                                                  r"where the kernel runs, but is (hashed|"
                                                  r"compared with 3)") as e:
            dynamic(x, how)
        assert "File" in str(e.value) and __file__ in str(e.value)


@functools.lru_cache(maxsize=None)
def _cached_half(n):
    return n // 2 + 1


class _Scales:
    @functools.cache
    def twice(self, shape):
        return shape[0] * 2


_SCALER = _Scales()


def _memoised_sizes(X):
    n = X.shape[0]
    Z[i] = X[i] * _cached_half(n) + _SCALER.twice(X.shape) + 100 * _cached_half(n + 1)
    return Z


def test_a_size_passed_to_an_lru_cache_helper_is_memoised_by_the_expression():
    """A helper decorated with functools.lru_cache / cache, called with a dynamic size
    (`_cached_half(n)`, a method given X.shape), raised 'X_n0 ... is hashed' since the
    refusal of hashed sizes, where memoising by the expression gives the expression's
    value, as memoising by the number does in a static trace. The C code of a cache
    wrapper that the user's line calls keeps the structural hash; `{3: 2.0}.get(n)`,
    hash(n) and sets stay refused (the test above). Static and dynamic against NumPy
    over sizes 0-6, every element written."""
    for dyn in (False, True):
        g = jd.compute(_memoised_sizes, dynamic=dyn)
        for n in range(7):
            x = rand(n)
            want = x * (n // 2 + 1) + 2 * n + 100 * ((n + 1) // 2 + 1)
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)


def _typed_size(X):
    n = X.shape[0]
    Z[i] = X[i] * (2.0 if isinstance(n, int) else 1.0) + (10.0 if type(n) is int else 0.0) + \
        (100.0 if isinstance(n / 2, float) and not isinstance(n, (float, str)) else 0.0) + \
        (1000.0 if n is not None and type(X) is not int else 0.0)
    return Z


_THREE = 3


def _identical_size(X):
    Z[i] = X[i] * (2.0 if X.shape[0] is _THREE else 1.0)
    return Z


def test_isinstance_type_and_is_of_a_size_answer_as_in_a_static_trace():
    """`isinstance(X.shape[0], int)` and `type(n) is int` were False in a dynamic
    definition (the size is an expression), True in a static one: X * 1.0 against
    X * 2.0, silently; `X.shape[0] is 3` was False where the static trace's small int is
    3. Now isinstance and type see the Python number a static trace has (int for a size,
    float for `n / 2`), and `is` between a size and a number is an error that says to
    use ==. Static and dynamic against NumPy over sizes 0-5, every element written."""
    for dyn in (False, True):
        g = jd.compute(_typed_size, dynamic=dyn)
        for n in range(6):
            x = rand(n)
            np.testing.assert_allclose(_written(g, x, x), x * 2.0 + 1110.0, rtol=1e-12)
    with pytest.raises(DefinitionError, match=r"`X_n0 is 3`: `is` compares objects.*`==`"):
        jd.compute(_identical_size, dynamic=True)(rand(3))


def _identical_condition(X):
    big = X.shape[0] > 3
    Z[i] = X[i] * (2.0 if big is True else 1.0) + (10.0 if big is not False else 0.0)
    return Z


def _typed_condition(X):
    big = X.shape[0] > 3
    Z[i] = X[i] * (2.0 if isinstance(big, bool) else 1.0) + \
        (10.0 if type(big) is bool and isinstance(big, int) else 0.0)
    return Z


def test_isinstance_and_type_of_a_condition_of_sizes_say_bool():
    """`isinstance(big, bool)` and `type(big) is bool` of `big = X.shape[0] > 3` were
    False in a dynamic definition (an expression), True in a static one (Python's bool):
    X * 1.0 against X * 2.0, silently. They see the bool a static trace has now, as of a
    size its int. Static and dynamic against NumPy over sizes 0-5, every element
    written."""
    for dyn in (False, True):
        g = jd.compute(_typed_condition, dynamic=dyn)
        for n in range(6):
            x = rand(n)
            np.testing.assert_allclose(_written(g, x, x), x * 2.0 + 10.0, rtol=1e-12)


def test_is_of_a_condition_of_sizes_is_an_error():
    """`big is True` of `big = X.shape[0] > 3` was False for every size in a dynamic
    definition (the condition is an expression), True for X of length 5 in a static one,
    where it is Python's bool: X * 1.0 against X * 2.0, and `big is not False` True for
    every size, silently. Now `is` between a condition of sizes and a number is the error
    that says to compare with ==, as of a size; the static definition computes Python's."""
    g = jd.compute(_identical_condition)
    for n in (2, 5):
        x = rand(n)
        want = x * (2.0 if n > 3 else 1.0) + (10.0 if n > 3 else 0.0)
        np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)
    with pytest.raises(DefinitionError, match=r"`X_n0 > 3 is True`: `is` compares objects, "
                                              r"and the condition of dynamic sizes.*`==`"):
        jd.compute(_identical_condition, dynamic=True)(rand(5))


def _size_chosen_scale(X):
    n = X.shape[0]
    Z[i] = X[i] * (2.0 if n == 3 else 1.0) + {3: 10.0}.get(n, 0.5) + (n / 2 if n > 2 else 1.5)
    return Z


def test_a_python_float_chosen_by_sizes_stays_weak_in_a_dynamic_kernel():
    """`X * (2.0 if n == 3 else 1.0)` (n = X.shape[0]) of a float32 X is float32 in a
    static definition, where the conditional gives a Python float, but was float64 in a
    dynamic one: the select of the two floats was a strong float64 (jd.select's rule for
    element conditions). Now a select whose condition is made of sizes and whose arms
    are Python numbers (or sizes) is weak, as the static trace's float is; a dict lookup
    by size the same. Static and dynamic: the dtype and the values of NumPy's float64
    result, over sizes 0-5."""
    for dyn in (False, True):
        g = jd.compute(_size_chosen_scale, dynamic=dyn)
        for n in range(6):
            x = rand(n).astype(np.float32)
            want = (x.astype(np.float64) * (2.0 if n == 3 else 1.0) + (10.0 if n == 3 else 0.5)
                    + (n / 2 if n > 2 else 1.5))
            out = np.full(n, np.nan, np.float32)
            assert g(x, out=out) is out
            assert g(x).dtype == np.float32
            np.testing.assert_allclose(out, want, rtol=1e-6)


def _divmod_size(X):
    q, r = divmod(X.shape[0], 3)
    a, b = divmod(7, X.shape[0] + 1)
    Z[i] = X[i] * q + r + 10 * a + 100 * b
    return Z


def _size_as_list_index(X):
    Z[i] = X[i] * [1.0, 2.0, 3.0, 4.0, 5.0, 6.0][X.shape[0]]
    return Z


def test_divmod_of_a_size_and_a_size_where_python_needs_a_number():
    """divmod(X.shape[0], 3) in a dynamic definition raised "unsupported operand type(s)
    for divmod(): 'SizeVar' and 'int'" (static: Python's pair); now expressions have
    divmod (floor division and modulo, Python's pair). A size where Python needs a number
    at the trace (a list index) said it 'depends on a tensor element, an index or a scalar
    argument', which a size does not: the error now says it is a dynamic size and what to
    do. Static and dynamic against NumPy over sizes 0-7, every element written."""
    for dyn in (False, True):
        g = jd.compute(_divmod_size, dynamic=dyn)
        for n in range(8):
            x = rand(n)
            want = x * (n // 3) + n % 3 + 10 * (7 // (n + 1)) + 100 * (7 % (n + 1))
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)
    with pytest.raises(DefinitionError, match=r"`X_n0` is a dynamic size, a number only where "
                                              r"the kernel runs, but is used where Python "
                                              r"needs a concrete number.*list index"):
        jd.compute(_size_as_list_index, dynamic=True)(rand(3))


def _ones_in_shape(X):
    return X.shape.count(1) + (1 in X.shape) * 10 + (1 not in X.shape) * 100


def _scaled_by_ones(X):
    c = _ones_in_shape(X)
    Z[i, j] = X[i, j] * c
    return Z


def test_a_helper_counting_size_one_dimensions_keeps_pythons_answer():
    """`X.shape.count(1)` and `1 in X.shape` in a helper (C code comparing each size with
    1) have Python's answer in a dynamic definition, as a dynamic size is never 1
    (size-1 dimensions stay concrete); the check that refuses a size compared with a
    number by C code for the user raised here. Static and dynamic over shapes with and
    without size-1 dimensions."""
    for dyn in (False, True):
        g = jd.compute(_scaled_by_ones, dynamic=dyn)
        for shape in ((2, 3), (1, 3), (3, 1), (1, 1), (0, 2)):
            x = rand(*shape)
            c = shape.count(1) + (1 in shape) * 10 + (1 not in shape) * 100
            np.testing.assert_array_equal(_written(g, x, x), x * c)


def _and_or_values(X):
    n = X.shape[0]
    Z[i] = X[i] * (n and 2.0 or 1.0) + (n > 2 and 5.0) + 10 * (n - 3 or 7) + \
        100 * (X[i] * 0 or 3.0) + (1000.0 if n in {3: 1}.keys() or n in np.array([5]) else 0.0)
    return Z


def test_and_or_of_sizes_and_elements_give_pythons_values():
    """`and` / `or` with a symbolic operand were logical operations, a bool whatever the
    operands: `X * (n and 2.0 or 1.0)` of a dynamic size n gave X * 1.0 (static: X * 2.0
    for n > 0), `n > 2 and 5.0` True for 5.0, `n - 3 or 7` True; `X[i] * 0 or 3.0` True
    for 3.0 in static definitions too. Now two conditions still join logically, and other
    operands give Python's value (`b if a else a`, `a if a else b`) as a select. `n in
    d.keys()` (a dict view) and `n in np.array([5])` hashed or compared the expression in
    jitdl's own frame, a False for every size: they are searched as lists now. Static and
    dynamic against NumPy over sizes 0-6, every element written."""
    def want(x):
        n = len(x)
        return (x * (n and 2.0 or 1.0) + (n > 2 and 5.0) + 10 * (n - 3 or 7) + 300.0
                + (1000.0 if n in (3, 5) else 0.0))
    for dyn in (False, True):
        g = jd.compute(_and_or_values, dynamic=dyn)
        for n in range(7):
            x = rand(n)
            np.testing.assert_allclose(_written(g, x, want(x)), want(x), rtol=1e-12)


def _conditions_and_floats_of_sizes(X):
    n = X.shape[0]
    Z[i] = X[i] * (n == 3 and 2.0 or 1.0) + (n > 2 and 0.5) + (n > 3 or 0.25) + \
        (2.0 if n > 4 else n > 1)
    return Z


def test_and_or_of_a_size_condition_and_a_float_stay_weak():
    """`X * (n == 3 and 2.0 or 1.0)` (n = X.shape[0]) of a float32 X is float32 in a
    static definition (a Python float or bool), but was float64 in a dynamic one: the
    select `2.0 if n == 3 else (n == 3)` that `and` makes has a condition of sizes as an
    arm, which was taken for no Python number, so the select stayed a strong float64, and
    so did `n > 2 and 0.5`, `n > 3 or 0.25` and `2.0 if n > 4 else n > 1`. A condition of
    sizes is a Python bool in a static trace: weak now. Static and dynamic: float32 and
    NumPy's float64 values over sizes 0-6, every element written."""
    for dyn in (False, True):
        g = jd.compute(_conditions_and_floats_of_sizes, dynamic=dyn)
        for n in range(7):
            x = rand(n).astype(np.float32)
            want = (x.astype(np.float64) * (n == 3 and 2.0 or 1.0) + (n > 2 and 0.5)
                    + (n > 3 or 0.25) + (2.0 if n > 4 else n > 1))
            out = np.full(n, np.nan, np.float32)
            assert g(x, out=out) is out
            assert g(x).dtype == np.float32
            np.testing.assert_allclose(out, want, rtol=1e-6)


def _arange_of_size(X):
    Z[i] = X[i] * np.arange(X.shape[0]).sum()
    return Z


def test_a_size_compared_by_numpy_says_so():
    """np.arange(X.shape[0]) of a dynamic size: NumPy compares the size with 0 for the
    user's line; the error said the comparison came from `in` or list.count in a helper."""
    with pytest.raises(DefinitionError, match=r"`X_n0 - 0` is a dynamic size.*compared with "
                                              r"0 by code that needs a Python answer.*a NumPy "
                                              r"function"):
        jd.compute(_arange_of_size, dynamic=True)(rand(3))


def _text_of_a_size(X, how: str):
    n = X.shape[0]
    c = {"fstring": lambda: len(f"{n}"), "str": lambda: 2 if str(n) == "3" else 1,
         "format": lambda: len(format(n)), "percent": lambda: len("%s" % n),
         "int": lambda: int(str(n)), "repr": lambda: len(repr([n])),
         "template": lambda: len(string.Template("$n").substitute(n=n)),
         "textwrap": lambda: len(textwrap.shorten(str(n), 9)),
         "pformat": lambda: len(pprint.pformat(n)),
         "formatwarning": lambda: len(warnings.formatwarning(n, UserWarning, "f", 1))}[how]()
    Z[i] = X[i] * c
    return Z


_LOG = logging.getLogger(__name__)


def _shown_size(X):
    n = X.shape[0]
    print(n, X.shape)
    print(f"n = {n:>3}", str(n), "%s" % n)
    pprint.pprint(n)
    print(pprint.pformat(n))
    _LOG.debug(f"n = {n}")
    _LOG.warning("n = %s", n)
    Z[i] = X[i] * n
    return Z


@pytest.mark.parametrize("how", ["fstring", "str", "format", "percent", "int", "repr",
                                 "template", "textwrap", "pformat", "formatwarning"])
def test_the_text_of_a_size_is_refused_where_it_can_change_the_result(how):
    """The text of a dynamic size is its name (`X_n0`), where a static trace has the
    number's digits: `len(f"{n}")` was 4 for every size, `str(n) == "3"` False, silently
    (the static definition: Python's answers). Now taking it is an error naming the size
    and the line, except where the text only goes to print() or logging: the dynamic
    definition that prints its size computes NumPy's values (the next test)."""
    def want(x):
        n = len(x)
        return x * {"fstring": len(f"{n}"), "str": 2 if n == 3 else 1,
                    "format": len(str(n)), "percent": len(str(n)), "int": n,
                    "repr": len(repr([n])), "template": len(str(n)),
                    "textwrap": len(str(n)), "pformat": len(str(n)),
                    "formatwarning": len(warnings.formatwarning(n, UserWarning, "f", 1))}[how]
    static = jd.compute(_text_of_a_size, static=("how",))
    dynamic = jd.compute(_text_of_a_size, static=("how",), dynamic=True)
    for n in (0, 3, 12):
        x = rand(n)
        np.testing.assert_array_equal(static(x, how), want(x))
        with pytest.raises(DefinitionError, match=r"`X_n0` is a dynamic size, a number only "
                                                  r"where the kernel runs, but its text is "
                                                  r"taken") as e:
            dynamic(x, how)
        assert "File" in str(e.value) and __file__ in str(e.value)


def test_the_text_of_a_size_that_is_only_printed_or_logged_is_its_name(capsys):
    """print(n), print(f"n = {n}"), print(str(n)) and a logger's debug(f"...") of a
    dynamic size show its name and cannot change the result: the definition that prints
    and logs its size computes NumPy's values."""
    shown = jd.compute(_shown_size, dynamic=True)
    for n in (0, 3, 12):
        x = rand(n)
        np.testing.assert_allclose(_written(shown, x, x * n), x * n, rtol=1e-12)
    assert "X_n0 (X_n0,)\nn = X_n0 X_n0 X_n0\nX_n0\nX_n0\n" in capsys.readouterr().out


def _shown_by_a_local_print(X):
    n = X.shape[0]
    show = print
    show(f"n = {n}", str(n))
    Z[i] = X[i] * n
    return Z


def _logged_by_a_getlogger_call(X):
    n = X.shape[0]
    logging.getLogger(__name__).debug(f"n = {n}")
    logging.getLogger().info("n = {}".format(n))
    Z[i] = X[i] * n
    return Z


def test_the_text_of_a_size_logged_by_a_logger_got_in_the_call():
    """`logging.getLogger(__name__).debug(f"n = {n}")` only logs the size's text, as a
    logger's debug(f"...") does; it was refused: the callee, a method of a call's result,
    named no function."""
    logged = jd.compute(_logged_by_a_getlogger_call, dynamic=True)
    for n in (0, 3, 12):
        x = rand(n)
        np.testing.assert_allclose(_written(logged, x, x * n), x * n, rtol=1e-12)


def test_the_text_of_a_size_printed_by_a_local_name_for_print_is_its_name(capsys):
    """`show = print; show(f"n = {n}")` only shows the size's text, as print(f"...") does;
    it was refused: Python 3.11 puts a PUSH_NULL before a local callee's load, which the
    reading of the call's callee took for a call of another form."""
    shown = jd.compute(_shown_by_a_local_print, dynamic=True)
    for n in (0, 3, 12):
        x = rand(n)
        np.testing.assert_allclose(_written(shown, x, x * n), x * n, rtol=1e-12)
    assert "n = X_n0 X_n0" in capsys.readouterr().out


def _iterated_size(X):
    s = X.shape[0]
    for _ in range(16):
        s = s * s % 7 + 1
    Z[i] = X[i] * (2.0 if s == 3 else 1.0) + s
    return Z


def test_a_size_expression_that_shares_subtrees_is_walked_once_per_node(monkeypatch):
    """`s = s * s % 7 + 1` 16 times makes an expression of 64 nodes whose tree has 2^16
    leaves: a_size (each select of sizes), infer_ranges, unconditional_reads (the
    codegen's guarded selects), partition's _choices and the codegen's free variables
    walked it as a tree, ~35 s to trace and compile. Now they walk each node once: the
    whole compile visits a few thousand nodes (counted, capped at 50000 here, where the
    tree is millions), static and dynamic give NumPy's values over sizes 0-7."""
    from jitdl.ir import analysis, visit
    visits, children = [0], visit.expr_children

    def counted(e):
        visits[0] += 1
        assert visits[0] < 50000, "an expression DAG walked as a tree"
        return children(e)
    monkeypatch.setattr(visit, "expr_children", counted)
    monkeypatch.setattr(analysis, "expr_children", counted)
    for dyn in (False, True):
        g = jd.compute(_iterated_size, dynamic=dyn)
        for n in range(8):
            s = n
            for _ in range(16):
                s = s * s % 7 + 1
            x = rand(n)
            want = x * (2.0 if s == 3 else 1.0) + s
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)


def _int_chosen_by_sizes(X):
    n = X.shape[0]
    Z[i] = X[i] * (2 if n == 3 else 1) + (3 if n > 4 else n > 1) + {3: 4}.get(n, 5) + \
        (n > 2 and 6 or 7) + (n if n > 2 else 8) + 10 * isinstance(2 if n == 3 else 1, int)
    return Z


def test_a_python_int_chosen_by_sizes_stays_weak_beside_floats():
    """`X * (2 if n == 3 else 1)` (n = X.shape[0]) of a float32 X is float32 in a static
    definition, where the conditional gives a Python int, but was float64 in a dynamic
    one: the select of two ints of sizes was a strong int64 (only float selects were
    made weak), as were a dict of ints looked up by size, `n > 2 and 6 or 7` and `n if n
    > 2 else 8`; isinstance(2 if n == 3 else 1, int) was False. A choice among Python ints
    and sizes by a condition of sizes is now read as a size is (a Python int beside a
    float, int64 beside an integer array, as `X * n` is). Static and dynamic: float32 and
    NumPy's float64 values over sizes 0-6, every element written; float64 the same."""
    for dyn in (False, True):
        g = jd.compute(_int_chosen_by_sizes, dynamic=dyn)
        for n in range(7):
            want = (2 if n == 3 else 1), (3 if n > 4 else n > 1) + {3: 4}.get(n, 5) + \
                (n > 2 and 6 or 7) + (n if n > 2 else 8) + 10
            for dt in (np.float32, np.float64):
                x = rand(n).astype(dt)
                out = np.full(n, np.nan, dt)
                assert g(x, out=out) is out
                assert g(x).dtype == dt
                np.testing.assert_allclose(out, x.astype(np.float64) * want[0] + want[1],
                                           rtol=1e-6)


_COUNTS = collections.Counter([3, 3, 5])


def _dicts_of_sizes(X):
    n = X.shape[0]
    Z[i] = X[i] * _COUNTS[n] + {True: 2.0, False: 1.0}[n > 3] + \
        {False: 10.0, True: 20.0}[X[i] > 0]
    return Z


def _get_without_default(X):
    Z[i] = X[i] * ({3: 2.0}.get(X.shape[0]) or 1.0)
    return Z


def test_a_counter_and_a_dict_keyed_by_conditions_looked_up_by_size():
    """`Counter(...)[n]` of a dynamic size n ignored Counter's __missing__: a KeyError at
    the call for every size not counted (static: 0); `{True: a, False: b}[n > 3]` was
    refused ('cannot check before the kernel runs that it is one of the keys'), where a
    condition is always one of them. Now a dict's __missing__ gives the default and a
    condition needs no check. `{3: 2.0}.get(n)` gave 'NoneType value None cannot be used
    in a jitdl expression' for every size: it now says that the default is None and to
    give one. Static and dynamic against NumPy over sizes 0-6, every element written."""
    for dyn in (False, True):
        g = jd.compute(_dicts_of_sizes, dynamic=dyn)
        for n in range(7):
            x = rand(n)
            want = x * _COUNTS[n] + (2.0 if n > 3 else 1.0) + np.where(x > 0, 20.0, 10.0)
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)
    for n in (2, 3):        # (static: Python's None, then `or`)
        x = rand(n)
        np.testing.assert_array_equal(jd.compute(_get_without_default)(x),
                                      x * (2.0 if n == 3 else 1.0))
    with pytest.raises(DefinitionError, match=r"symbolic key `X_n0`.*the default is NoneType "
                                              r"None; give a default: `.get\(key, default\)`"):
        jd.compute(_get_without_default, dynamic=True)(rand(3))


class _Strict(dict):
    def __missing__(self, key):
        raise KeyError(f"no {key}")


_STRICT = _Strict({k: k * 1.5 + 1.0 for k in range(7)})


def _strict_dict_of_size(X):
    Z[i] = X[i] * _STRICT[X.shape[0]]
    return Z


def test_a_dict_whose_missing_raises_looked_up_by_size():
    """A dict subclass whose __missing__ raises (as dict's lookup does) has no default: it
    was called with the dynamic size while the definition was traced, so the dynamic
    definition raised its KeyError for every size, even one that is a key. Static and
    dynamic against NumPy over sizes 0-6, every element written."""
    for dyn in (False, True):
        g = jd.compute(_strict_dict_of_size, dynamic=dyn)
        for n in range(7):
            x = rand(n)
            want = x * (n * 1.5 + 1.0)
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)


def _pow_of_size(n):
    return pow(n, 3, 11)


def _modular_powers(X):
    n = X.shape[0]
    Z[i] = X[i] * pow(n, 2, 5) + pow(n + 100, 10, 7) + 10 * pow(n, 0, 3) + \
        100 * pow(n, 3, -4) + 1000 * _pow_of_size(n)
    return Z


def _inverse_pow(X):
    Z[i] = X[i] * pow(X.shape[0], -1, 5)
    return Z


def test_pow_of_a_size_with_a_modulus():
    """pow(n, 2, 5) of a dynamic size n raised "pow() takes 2 positional arguments but 3
    were given" (a helper's: "__pow__() takes 2..."); static: Python's modular power.
    Expressions now have Python's three-argument pow, square and multiply reduced by the
    modulus at each step (pow(n + 100, 10, 7) stays in int64); an exponent that is no
    Python int >= 0 is an error saying what jitdl takes. Static and dynamic against NumPy
    over sizes 0-8, 13 and 101, every element written."""
    for dyn in (False, True):
        g = jd.compute(_modular_powers, dynamic=dyn)
        for n in [*range(9), 13, 101]:
            x = rand(n)
            want = x * pow(n, 2, 5) + pow(n + 100, 10, 7) + 10 * pow(n, 0, 3) + \
                100 * pow(n, 3, -4) + 1000 * pow(n, 3, 11)
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)
    with pytest.raises(DefinitionError, match=r"pow\(X_n0, -1, 5\) of a symbolic value: "
                                              r"jitdl computes a modular power"):
        jd.compute(_inverse_pow, dynamic=True)(rand(3))


def _pow_without_modulus(X):
    n = X.shape[0]
    Z[i] = X[i] * pow(n, 2, None) + pow(2, n, mod=None)
    return Z


def test_pow_of_a_size_with_a_modulus_of_none():
    """pow(n, 2, None) is Python's n ** 2: the dynamic definition refused it ('jitdl
    computes a modular power ... a Python int modulus other than 0'). Static and dynamic
    against NumPy over sizes 0-8, every element written."""
    for dyn in (False, True):
        g = jd.compute(_pow_without_modulus, dynamic=dyn)
        for n in range(9):
            x = rand(n)
            want = x * n ** 2 + 2 ** n
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)


def _negative_powers_of_sizes(X):
    n = X.shape[0]
    Z[i] = X[i] * (n + 1) ** -1 + (n + 2) ** -2 + 2 ** n
    return Z


def test_a_size_to_a_negative_power_is_a_float():
    """`(n + 1) ** -1` of a dynamic size n is a Python float in a static definition
    (1 / (n + 1)) but was an int64 power in a dynamic one, 0 for every n > 0: X * (n + 1)
    ** -1 gave zeros, silently. An int of sizes to a negative Python int power is now a
    float of sizes (weak, as Python's float). Static and dynamic, float32 and float64:
    NumPy's dtype and values over sizes 0-8, every element written."""
    for dyn in (False, True):
        g = jd.compute(_negative_powers_of_sizes, dynamic=dyn)
        for n in range(9):
            for dt in (np.float32, np.float64):
                x = rand(n).astype(dt)
                want = x.astype(np.float64) * (n + 1) ** -1 + (n + 2) ** -2 + 2 ** n
                out = np.full(n, np.nan, dt)
                assert g(x, out=out) is out
                np.testing.assert_allclose(out, want, rtol=1e-6)


def _powers_by_exponents_of_sizes(X):
    n = X.shape[0]
    Z[i] = X[i] * 2 ** -n + 3 ** (2 - n) + (n + 1) ** (n // 2 - n) + 2 ** (n // 2)
    return Z


def test_an_int_to_a_power_of_sizes_that_may_be_negative_is_a_float():
    """`2 ** -n` and `3 ** (2 - n)` of a dynamic size n are Python floats in a static
    definition where the exponent is negative, but were int64 powers in a dynamic one: 0
    for every n > 0, silently. An int of sizes (or a Python int) to an exponent of sizes
    that may be negative is now a float of sizes; `2 ** (n // 2)` stays an int. Static and
    dynamic, float32 and float64: NumPy's dtype and values over sizes 0-8, every element
    written."""
    for dyn in (False, True):
        g = jd.compute(_powers_by_exponents_of_sizes, dynamic=dyn)
        for n in range(9):
            for dt in (np.float32, np.float64):
                x = rand(n).astype(dt)
                want = x.astype(np.float64) * 2 ** -n + 3 ** (2 - n) + \
                    (n + 1) ** (n // 2 - n) + 2 ** (n // 2)
                out = np.full(n, np.nan, dt)
                assert g(x, out=out) is out
                np.testing.assert_allclose(out, want, rtol=1e-6)


from numpy import sqrt         # noqa: E402 (a NumPy function by its bare name)

_NUMPY_OF_SIZES = {"sqrt": lambda n: np.sqrt(n), "maximum": lambda n: np.maximum(n, 3),
                   "abs": lambda n: np.abs(n - 3), "sign": lambda n: np.sign(n - 3),
                   "floor_divide": lambda n: np.floor_divide(n, 2),
                   "exp": lambda n: np.exp(n - 3), "bare sqrt": lambda n: sqrt(n + 1),
                   "round": lambda n: np.round(n / 2), "max": lambda n: np.max((n, 3)),
                   "sum of a list": lambda n: np.sum([n, 1]),
                   "square": lambda n: np.square(n), "hypot": lambda n: np.hypot(n, n + 1),
                   "logaddexp": lambda n: np.logaddexp(n, 1)}


def _numpy_function_of_a_size(X, how: str):
    n = X.shape[0]
    c = {"sqrt": lambda: np.sqrt(n), "maximum": lambda: np.maximum(n, 3),
         "abs": lambda: np.abs(n - 3), "sign": lambda: np.sign(n - 3),
         "floor_divide": lambda: np.floor_divide(n, 2), "exp": lambda: np.exp(n - 3),
         "bare sqrt": lambda: sqrt(n + 1), "round": lambda: np.round(n / 2),
         "max": lambda: np.max((n, 3)), "sum of a list": lambda: np.sum([n, 1]),
         "square": lambda: np.square(n), "hypot": lambda: np.hypot(n, n + 1),
         "logaddexp": lambda: np.logaddexp(n, 1)}[how]()
    Z[i] = X[i] * c
    return Z


def _ldexp_of_a_size(X):
    Z[i] = X[i] * np.ldexp(X.shape[0], 2)
    return Z


def test_a_numpy_ufunc_jitdl_lacks_of_a_size_says_so():
    """np.ldexp(n, 2) of a dynamic size n: NumPy said only 'operand type(s) all returned
    NotImplemented from __array_ufunc__'; now the error names the call and the line."""
    with pytest.raises(DefinitionError, match=r"np\.ldexp\(X_n0, 2\) of a symbolic value: "
                                              r".*has no ldexp") as e:
        jd.compute(_ldexp_of_a_size, dynamic=True)(rand(3))
    assert __file__ in str(e.value)


def _fmod_of_ints(X):
    Z[i] = np.fmod(X[i], 3) + np.fmod(X.shape[0] - 9, 4) + jd.fmod(X[i], -4)
    return Z


def test_fmod_of_ints_is_numpys():
    """np.fmod and jd.fmod of integers (an int array's elements, a size) built FMOD, which
    the code generators have for floats alone: 'CompileError: codegen: BinOp.FMOD on
    int64', static or dynamic. They now compute as jd.numpy.fmod does (the sign of the
    dividend): NumPy's values and dtype, int32 and int64, every element written."""
    for dt in (np.int32, np.int64):
        for dyn in (False, True):
            g = jd.compute(_fmod_of_ints, dynamic=dyn)
            for n in (0, 5, 11):
                x = np.random.default_rng(n).integers(-20, 20, n).astype(dt)
                want = np.fmod(x, 3) + np.fmod(n - 9, 4) + np.fmod(x, -4)
                out = np.full(n, -99, want.dtype)
                assert g(x, out=out) is out
                np.testing.assert_array_equal(out, want)
    # an element by an element: zero divisors (NumPy's 0) and negatives, small ints, bools
    x = np.array([7, -7, 7, -7, 5, -8, 0, 3, -128, 127])
    y = np.array([3, 3, -3, -3, 0, 4, 0, -1, -1, 2])
    for dx, dy in ((np.int8, np.int8), (np.int32, np.int64), (np.int8, np.uint8),
                   (np.bool_, np.bool_)):
        a = x.astype(dx) if dx is not np.bool_ else x > 0
        b = np.abs(y).astype(dy) if dy is np.uint8 else y.astype(dy) if dy is not np.bool_ \
            else y > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            want = np.fmod(a, b)
        for dyn in (False, True):
            out = np.full(len(x), 99, want.dtype)
            assert jd.compute(_fmod_of_elements, dynamic=dyn)(a, b, out=out) is out
            np.testing.assert_array_equal(out, want)


def _fmod_of_elements(X, Y):
    Z[i] = np.fmod(X[i], Y[i])
    return Z


@pytest.mark.parametrize("how", list(_NUMPY_OF_SIZES))
def test_numpy_functions_of_a_size_are_numpy_scalars(how):
    """np.sqrt(n), np.maximum(n, 3), np.exp(n - 3), sqrt(n + 1) of `from numpy import
    sqrt`... of a dynamic size n are NumPy scalars in a static definition (strong: times a
    float32 X, float64), but were read as the Python numbers a size's arithmetic gives in
    a dynamic one: float32. A NumPy ufunc of sizes and Python numbers alone is now strong
    (build.strong), as np.float64(n) is, whether the expression's __array_ufunc__ or
    the capture's intrinsic call builds it; NumPy's other functions (np.round, np.max) as
    its ufuncs, np.sum of a list holding a size too; np.square(n), np.hypot(n, n + 1) and
    np.logaddexp(n, 1) (no IR node of their own: jd.numpy's) were refused with NumPy's
    'NotImplemented' TypeError. Static and dynamic, float32 and float64:
    float64 results with NumPy's values over sizes 0-6, every element written."""
    for dyn in (False, True):
        g = jd.compute(_numpy_function_of_a_size, static=("how",), dynamic=dyn)
        for n in range(7):
            for dt in (np.float32, np.float64):
                x = rand(n).astype(dt)
                want = x * _NUMPY_OF_SIZES[how](n)
                assert want.dtype == np.float64
                out = np.full(n, np.nan)
                assert g(x, how, out=out) is out
                np.testing.assert_allclose(out, want, rtol=1e-6)


def _divided_by_a_size(X, how: str):
    n = X.shape[0]
    c = {"pow": lambda: (n - 3) ** -1, "div": lambda: 1 / (n - 3),
         "floordiv": lambda: 7 // (n - 3), "mod": lambda: (n + 4) % (3 - n),
         "guarded": lambda: 1 / (n - 3) if n != 3 else 0.5,
         "and": lambda: n != 3 and 7 // (n - 3) or 0.25}[how]()
    Z[i] = X[i] * c
    return Z


@pytest.mark.parametrize("how", ["pow", "div", "floordiv", "mod", "guarded", "and"])
def test_python_numbers_divided_by_a_size_that_is_0_raise_zero_division(how):
    """`(n - 3) ** -1`, `1 / (n - 3)`, `7 // (n - 3)` and `% (3 - n)` of a dynamic size n
    are Python numbers in a static trace, which raises ZeroDivisionError at n == 3; the
    dynamic kernel gave inf or 0 there, silently. The call now checks the divisor and
    raises an error naming ZeroDivisionError and the user's line; a division Python does
    not evaluate at n == 3 (an arm of `a if n != 3 else b`, the right of `and`) is not
    checked, and both give NumPy's values at every other size."""
    def want(x):
        n = len(x)
        return x * {"pow": lambda: (n - 3) ** -1, "div": lambda: 1 / (n - 3),
                    "floordiv": lambda: 7 // (n - 3), "mod": lambda: (n + 4) % (3 - n),
                    "guarded": lambda: 1 / (n - 3) if n != 3 else 0.5,
                    "and": lambda: n != 3 and 7 // (n - 3) or 0.25}[how]()
    static = jd.compute(_divided_by_a_size, static=("how",))
    dynamic = jd.compute(_divided_by_a_size, static=("how",), dynamic=True)
    for n in (0, 1, 2, 3, 4, 6):
        x = rand(n)
        if n == 3 and how not in ("guarded", "and"):
            with pytest.raises(DefinitionError, match="ZeroDivisionError"):
                static(x, how)
            with pytest.raises(jd.JitdlError, match=r"ZeroDivisionError: .*`(X_n0 - 3|3 - "
                                                    r"X_n0)` is 0 here") as e:
                dynamic(x, how)
            assert __file__ in str(e.value)
            continue
        for g in (static, dynamic):
            out = np.full(n, np.nan)
            assert g(x, how, out=out) is out
            np.testing.assert_allclose(out, want(x), rtol=1e-12)



def _size_to_a_power_of_sizes(X, base: int, exponent: int):
    n = X.shape[0]
    Z[i] = X[i] * (n - base) ** (n - exponent)
    return Z


def test_0_to_a_power_of_sizes_is_refused_only_where_the_power_is_negative():
    """`(n - 5) ** (n - 3)` of a dynamic size n is 0 ** 2 == 0 at n == 5, where the check
    of Python's ZeroDivisionError required n - 5 != 0 for any exponent that may be
    negative, and refused the call; `(n - 3) ** (n - 5)` (0 ** -2 at n == 3) still raises
    ZeroDivisionError there. Static and dynamic, NumPy's values at the other sizes 0-7."""
    static = jd.compute(_size_to_a_power_of_sizes, static=("base", "exponent"))
    dynamic = jd.compute(_size_to_a_power_of_sizes, static=("base", "exponent"), dynamic=True)
    for base, exponent in ((5, 3), (3, 5)):
        for n in range(8):
            x = rand(n)
            if n == base and n < exponent:
                with pytest.raises(DefinitionError, match="ZeroDivisionError"):
                    static(x, base, exponent)
                with pytest.raises(jd.JitdlError, match=r"ZeroDivisionError: 0\.0 cannot be "
                                                        r"raised to a negative power: `X_n0 - 3`"):
                    dynamic(x, base, exponent)
                continue
            want = x * (n - base) ** (n - exponent)
            for g in (static, dynamic):
                out = np.full(n, np.nan)
                assert g(x, base, exponent, out=out) is out
                np.testing.assert_allclose(out, want, rtol=1e-12)


def _numpy_divided_by_a_size(X, how: str):
    n = X.shape[0]
    c = {"true_divide": lambda: np.true_divide(7, n - 3),
         "floor_divide": lambda: np.floor_divide(7, n - 3),
         "remainder": lambda: np.remainder(n + 4, 3 - n)}[how]()
    Z[i] = X[i] * c
    return Z


@pytest.mark.parametrize("how", ["true_divide", "floor_divide", "remainder"])
def test_numpy_ufuncs_dividing_by_a_size_that_is_0_keep_numpys_values(how):
    """np.true_divide(7, n - 3) of a dynamic size n at n == 3 is NumPy's inf (0 for
    floor_divide and remainder) in a static trace, with a RuntimeWarning; the check of
    Python's ZeroDivisionError (for `7 / (n - 3)` as written) took the ufunc's division for
    Python's, as the user's frame stood at the same depth, and refused the call. Static
    and dynamic give NumPy's values over sizes 0-6, every element written."""
    static = jd.compute(_numpy_divided_by_a_size, static=("how",))
    dynamic = jd.compute(_numpy_divided_by_a_size, static=("how",), dynamic=True)
    for n in range(7):
        x = rand(n)
        with np.errstate(divide="ignore", invalid="ignore"):
            want = x * getattr(np, how)(*{"true_divide": (7, np.int64(n - 3)),
                                          "floor_divide": (7, np.int64(n - 3)),
                                          "remainder": (n + 4, np.int64(3 - n))}[how])
        for g in (static, dynamic):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                out = np.full(n, np.nan)
                assert g(x, how, out=out) is out
            np.testing.assert_allclose(out, want, rtol=1e-12)


def _iterated_size_40(X):
    s = X.shape[0]
    for _ in range(40):
        s = s * s % 7 + 1
    Z[i] = X[i] * (2.0 if s == 3 else 1.0) + s
    return Z


def test_a_size_expression_of_40_shared_steps_prints_each_step_once():
    """`s = s * s % 7 + 1` 40 times: an expression of 160 nodes whose tree has 2^40 leaves.
    Its canonical text (f.lower(), the cache key, the stored loop IR) printed the tree and
    ran out of memory from about 32 steps (50ca735 made the other walks linear). A large
    subexpression met more than once in one expression now prints once, as a `%k = ...`
    line before the statement using it, and as `%k` at each use: a text of a few
    kilobytes. Static and dynamic give NumPy's values over sizes 0-7."""
    dynamic = jd.compute(_iterated_size_40, dynamic=True)
    static = jd.compute(_iterated_size_40)
    for n in range(8):
        s = n
        for _ in range(40):
            s = s * s % 7 + 1
        x = rand(n)
        want = x * (2.0 if s == 3 else 1.0) + s
        for g in (static, dynamic):
            np.testing.assert_allclose(_written(g, x, want), want, rtol=1e-12)
    text = dynamic.lower(rand(5))
    assert len(text) < 50000 and "%1 = X_n0 * X_n0 % 7 + 1" not in text
    assert re.search(r"^ +%1 = ", text, re.M) and "select(%" in text


def _shared_steps_then(how):
    def g(X):   # (one name for both: the kernels differ only in their loop IR's text)
        n = X.shape[0]
        s = n
        for _ in range(6):
            s = s * s % 7 + 1
        Z[i] = X[i] * ({"grouped": lambda: (s + n) * n, "plain": lambda: s + n * n}[how]())
        return Z
    return g


def test_a_size_expression_beginning_with_a_named_step_keeps_its_parentheses():
    """`(s + n) * n` of a 6-step chain s: s's text begins with a named step (`%2 * %2 % 7
    + 1`), and the printer took any text beginning with `%` for a name, which needs no
    parentheses: it printed `%2 * %2 % 7 + 1 + X_n0 * X_n0`, the text of `s + n * n`, so
    that the two definitions (one name) shared the full cache key and one kernel, and the
    second gave the first's values, silently. Each now gives NumPy's over sizes 0-7."""
    grouped = jd.compute(_shared_steps_then("grouped"), dynamic=True)
    plain = jd.compute(_shared_steps_then("plain"), dynamic=True)
    assert grouped.lower(rand(5)) != plain.lower(rand(5))
    for n in range(8):
        s = n
        for _ in range(6):
            s = s * s % 7 + 1
        x = rand(n)
        for g, c in ((grouped, (s + n) * n), (plain, s + n * n)):
            np.testing.assert_allclose(_written(g, x, x * c), x * c, rtol=1e-12)

def _clamped_reads(X, Y):
    m = Y.shape[0]
    Z[i] = X[i] + Y[jd.min(i, m - 1)] * 2.0 + Y[jd.min(jd.max(i - 1, 0), m - 1)]
    return Z


def test_an_index_clamped_to_a_dynamic_size_is_checked_where_it_reads():
    """`Y[jd.min(i, m - 1)]` (m = Y.shape[0]) in a dynamic definition was refused ('cannot
    prove index ... for every size'): the clamp is inside Y wherever Y is not empty. As
    Tensor Comprehensions' rule has it, the access bounds no index (i ranges over X) and
    is checked: at run time where it reads, so that an empty Y with rows of X to compute
    raises IndexError naming Y (the static definition refuses that call), and otherwise
    both give NumPy's values, every element written."""
    def want(x, y):
        k = np.arange(len(x))
        return x + y[np.minimum(k, len(y) - 1)] * 2.0 + y[np.minimum(np.maximum(k - 1, 0),
                                                                     len(y) - 1)]
    static = jd.compute(_clamped_reads)
    dynamic = jd.compute(_clamped_reads, dynamic=True)
    for n, m in [(3, 2), (5, 7), (9, 1), (0, 0), (0, 3), (4, 4), (3, 0)]:
        x, y = rand(n), rand(m)
        if m == 0 and n > 0:
            with pytest.raises(DefinitionError, match=r"can read outside Y"):
                static(x, y)
            with pytest.raises(IndexError, match=r"into Y is -1, outside \[0, Y_n0\)"):
                dynamic(x, y)
            continue
        for g in (static, dynamic):
            out = np.full(n, np.nan)
            assert g(x, y, out=out) is out
            np.testing.assert_allclose(out, want(x, y), rtol=1e-12)


def _clamped_read_inlined(X, Y):
    m = Y.shape[0]
    T[i] = X[i] + Y[jd.min(i, m - 1)]
    Z[j] = T[j] * 2.0
    return Z


def test_an_index_clamped_to_a_dynamic_size_is_checked_where_an_inlined_stage_reads():
    """The clamped read `Y[jd.min(i, m - 1)]` of a stage T computed where Z reads it (Z[j]
    = T[j] * 2.0): the run-time check was found by the index's text, which inlining
    makes `min(j, Y_n0 - 1)`, so an empty Y with rows of X read Y[-1] silently. The
    inlined read is now checked: IndexError naming Y (the static definition refuses that
    call), and NumPy's values otherwise, every element written."""
    static = jd.compute(_clamped_read_inlined)
    dynamic = jd.compute(_clamped_read_inlined, dynamic=True)
    for n, m in [(3, 2), (5, 7), (9, 1), (0, 0), (0, 3), (3, 0)]:
        x, y = rand(n), rand(m)
        if m == 0 and n > 0:
            with pytest.raises(DefinitionError, match=r"can read outside Y"):
                static(x, y)
            with pytest.raises(IndexError, match=r"into Y is -1, outside \[0, Y_n0\)"):
                dynamic(x, y)
            continue
        want = (x + y[np.minimum(np.arange(n), m - 1)]) * 2.0
        for g in (static, dynamic):
            out = np.full(n, np.nan)
            assert g(x, y, out=out) is out
            np.testing.assert_allclose(out, want, rtol=1e-12)


_NO_RANGES_CHILD = '''
import numpy as np, jitdl as jd

def shown(X):
    n = X.shape[0]
    print("n =", n)
    print(f"n = {n}", str(n))
    Z[i] = X[i] * n
    return Z

def taken(X):
    n = X.shape[0]
    Z[i] = X[i] * len(f"{n}")
    return Z

x = np.arange(3.0)
np.testing.assert_array_equal(jd.compute(shown, dynamic=True)(x), x * 3)
try:
    jd.compute(taken, dynamic=True)(x)
except jd.DefinitionError as e:
    print("REFUSED" if "its text is taken" in str(e) else str(e))
'''


def test_a_size_printed_under_no_debug_ranges_is_its_name(tmp_path):
    """Under `python -X no_debug_ranges` (no column positions) print(n) and
    print(f"n = {n}") of a dynamic size were refused as text taken: the call that takes
    the text was found by columns alone. It is now found by following the stack: the
    prints show the size's name and compute X * n; len(f"{n}") is still refused."""
    (tmp_path / "child.py").write_text(_NO_RANGES_CHILD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JITDL_")}
    env.update(JITDL_CACHE_DIR=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()] + (
                   [os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])))
    p = subprocess.run([sys.executable, "-X", "no_debug_ranges", "child.py"],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True,
                       timeout=180)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines() == ["n = X_n0", "n = X_n0 X_n0", "REFUSED"]
