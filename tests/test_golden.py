"""Golden texts: the loop IR of a handful of kernels, compared exactly with tests/golden/*.txt.

A change to lowering, a pass or the printer shows up here as a diff to read. When the
change is intended, rewrite the files and review them with git diff:

    pytest tests/test_golden.py --update-golden

The automatic schedule runs for a fixed CPU target (tests/_passes.fixed_cpu) with a fixed
thread count, so the texts are the same in every process and on every machine.
"""
import difflib
from pathlib import Path

import numpy as np
import pytest

import jitdl as jd
from _passes import fixed_cpu, loop_ir, threads

GOLDEN = Path(__file__).parent / "golden"
F32 = np.float32


def matmul():
    @jd.compute
    def matmul(A, B):
        (M, K), (_, N) = A.shape, B.shape
        k = jd.reduce_axis(K, name="k")
        return jd.tensor((M, N), lambda i, j: jd.sum(A[i, k] * B[k, j], axis=k), name="C")
    return matmul


def matmul_scheduled():
    f = matmul()

    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        C = s["C"]
        i, j = C.axis
        (k,) = C.reduce_axis
        io, ii = s.split(i, 8)
        jo, ji = s.split(j, 16)
        s.reorder(io, jo, k, ii, ji)
        s.unroll(ii)
        s.vectorize(ji)
        s.parallel(io)
    return f


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
    N, C, H, Wd = X.shape
    F, _, KH, KW = W.shape
    P = jd.tensor((N, C, H + 2, Wd + 2))
    P[n, c, h, w] = X[n, c, h - 1, w - 1] if (h >= 1 and h <= H and w >= 1 and w <= Wd) else 0.0
    Y = jd.tensor((N, F, H, Wd))
    Y[n, f, y, x] = sum(P[n, c, y + r, x + s] * W[f, c, r, s]
                        for c in range(C) for r in range(KH) for s in range(KW))
    return Y


@jd.compute
def padded_stencil(X):
    n, m = X.shape
    Y = jd.tensor((n, m))
    Y[i, j] = (X[i, j] * 2.0 + (X[i - 1, j] if i >= 1 else 0.0)
               + (X[i, j + 1] if j + 1 < m else 0.0)) * 0.25
    return Y


def rowsum_rfactor():
    @jd.compute
    def rowsum(X):
        n, m = X.shape
        k = jd.reduce_axis(m, name="k")
        return jd.tensor((n,), lambda i: jd.sum(X[i, k], axis=k), name="R")

    @jd.schedule(rowsum, target="cpu")
    def sched(s, cfg):
        R = s["R"]
        (k,) = R.reduce_axis
        rf = s.rfactor(R, k, 8)
        s.vectorize(rf.axis[0])
    return rowsum


@jd.compute
def gather(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y


def _arrays(*shapes, dtype=F32):
    return tuple(np.zeros(s, dtype) for s in shapes)


CASES = {
    "matmul_auto": lambda: (matmul(), _arrays((64, 96), (96, 96))),
    "matmul_scheduled": lambda: (matmul_scheduled(), _arrays((37, 29), (29, 41))),
    "softmax_auto": lambda: (softmax, _arrays((64, 300))),
    "conv2d_auto": lambda: (conv2d, _arrays((1, 3, 12, 10), (4, 3, 3, 3))),
    "padded_stencil": lambda: (padded_stencil, _arrays((30, 45))),
    "rowsum_rfactor": lambda: (rowsum_rfactor(), _arrays((5, 100))),
    "gather": lambda: (gather, (np.zeros((10, 6), F32), np.zeros(13, np.int64))),
}


def check_golden(request, name, text, suffix=".txt", test="tests/test_golden.py",
                 what="the loop IR"):
    """text equals tests/golden/<name><suffix> (or, with --update-golden, is written
    there); `test` and `what` word the message (tests/test_cuda_codegen.py uses this too)."""
    path = GOLDEN / f"{name}{suffix}"
    text = text.rstrip("\n") + "\n"
    if request.config.getoption("--update-golden"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"no golden text {path}: run pytest {test} --update-golden")
    expected = path.read_text()
    if text != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), text.splitlines(True),
                                            f"golden/{name}{suffix}", "now"))
        pytest.fail(f"{what} of {name} changed (if on purpose: pytest "
                    f"{test} --update-golden, then review git diff):\n{diff}",
                    pytrace=False)


@pytest.mark.parametrize("name", list(CASES))
def test_golden_loop_ir(request, name):
    f, args = CASES[name]()
    with threads(4):
        text = loop_ir(f, args, fixed_cpu())
    check_golden(request, name, text)


def test_golden_matches_f_lower(request):
    """The text compared is what users see with f.lower (a schedule that does not depend
    on the thread count)."""
    f, args = CASES["matmul_scheduled"]()
    assert str(f.lower(*args)) == loop_ir(f, args)
