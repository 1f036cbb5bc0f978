"""The `.fast` entry: a compiled kernel called as a Python builtin (METH_FASTCALL) that
reads data pointers and numbers from the argument objects; whatever it does not read
(strided inputs, errors to report) goes through the pointer entry as before."""
import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jitdl as jd
from jitdl.runtime.kernel import FAST_RESULTS, Kernel, Signature
from _check import assert_matches

FALLBACK, ERROR = FAST_RESULTS[1:]


@jd.compute
def add(X, Y):
    Z[i] = X[i] + Y[i]
    return Z


@jd.compute
def affine(X, a, n, flip):
    Z[i, j] = jd.where(flip, -1.0, 1.0) * a * X[i, j] + n
    return Z


@jd.compute
def gather(E, ids):
    Y[i, j] = E[ids[i], j]
    return Y


@jd.compute
def moments(X):
    m = X.shape[0]
    S[i] = sum(X[i, k] for k in range(m))
    Q[i] = sum(X[i, k] * X[i, k] for k in range(m))
    return S, Q


def test_arrays_only_kernel_runs_through_the_fast_entry(rng):
    x, y = rng.standard_normal(1000), rng.standard_normal(1000)
    k = add.kernel(x, y)
    assert k.fast and k.fastcall is not None
    assert k.run.__name__ == "run"                      # the specialised path
    out = np.full(1000, np.nan)
    assert k.fastcall((x, y), out) is None              # it ran: out holds the sum
    assert_matches(out, x + y, np.float64)
    for n in (1, 7, 1000):
        x, y = rng.standard_normal(n), rng.standard_normal(n)
        assert_matches(add(x, y), x + y, np.float64)


def test_scalars_are_read_by_the_fast_entry(rng):
    x = rng.standard_normal((5, 7))
    for a, n, flip in [(0.5, 3, False), (-2.25, -7, True), (np.float64(1.5), np.int64(2), True)]:
        k = affine.kernel(x, a, n, flip)
        assert k.fast
        out = np.full_like(x, np.nan)
        assert k.fastcall((x, a, n, flip), out) is None
        assert_matches(out, (-1.0 if flip else 1.0) * a * x + n, np.float64)
        assert_matches(affine(x, a, n, flip), (-1.0 if flip else 1.0) * a * x + n, np.float64)


def test_what_the_entry_does_not_read_falls_back(rng):
    x, y = rng.standard_normal(64), rng.standard_normal(64)
    k = add.kernel(x, y)
    out = np.empty(64)
    raw = np.zeros(64 * 8 + 1, np.uint8)
    unaligned = np.frombuffer(raw.data, np.float64, 64, offset=1)
    unaligned[:] = x
    for args in [(np.repeat(x, 2)[::2], y), (x, unaligned), [x, y], (x,), (x, y, y),
                 (x, list(y))]:
        assert k.fastcall(args, out) is FALLBACK, args
    assert k.fastcall((x, y), list(out)) is FALLBACK
    assert k.fastcall((x, y)) is FALLBACK
    # the call path copies strided and unaligned inputs, as before
    assert_matches(add(np.repeat(x, 2)[::2], y), x + y, np.float64)
    assert_matches(add(x, unaligned), x + x, np.float64)
    assert_matches(k.run([x, y]), x + y, np.float64)
    m = rng.standard_normal((9, 9))
    S, Q = moments(m.T)                                  # two outputs, strided input
    assert_matches(S, m.T.sum(1), np.float64)
    assert_matches(Q, (m.T ** 2).sum(1), np.float64)


def test_out_through_the_fast_entry(rng):
    x, y = rng.standard_normal(100), rng.standard_normal(100)
    out = np.full(100, np.nan)
    assert add(x, y, out=out) is out
    assert_matches(out, x + y, np.float64)
    assert add(x, y, out=x) is x                         # overlapping: computed aside
    assert_matches(x, out, np.float64)
    strided = np.full(200, np.nan)
    assert add(y, y, out=strided[::2]) is not None
    assert_matches(strided[::2], 2 * y, np.float64)
    assert np.isnan(strided[1::2]).all()


@jd.compute
def scale_shift(X, Y):
    T[i, j] = X[i, j] * 2.0
    Z[i, j] = T[i, j] + Y[j] - X[i, j] * X[i, j]
    return Z


@jd.compute
def reversed_sum(X, Y):
    n = X.shape[0]
    Z[i] = X[n - 1 - i] + Y[i]
    return Z


@jd.compute
def row_centered(X):
    m = X.shape[1]
    M[i] = sum(X[i, k] for k in range(m))
    Z[i, j] = X[i, j] - M[i]
    return Z


@pytest.mark.parametrize("fn, alias", [(scale_shift, [0]), (reversed_sum, [1]),
                                       (row_centered, []), (add, [0, 1])])
def test_out_over_an_input_is_the_answer_computed_aside(rng, fn, alias):
    """out= an input: an elementwise kernel (each element reads that input at its own
    position only) writes over it directly; any other is computed aside, then copied."""
    shapes = {scale_shift: [(7, 33), (33,)], reversed_sum: [(50,), (50,)],
              row_centered: [(7, 33)], add: [(50,), (50,)]}[fn]
    for _ in range(3):
        args = [rng.standard_normal(s) for s in shapes]
        want = fn(*[a.copy() for a in args])
        assert fn.kernel(*args).sig.alias == alias
        for j, a in enumerate(args):
            if a.shape != want.shape:
                continue
            given = [x.copy() for x in args]
            assert fn(*given, out=given[j]) is given[j]
            assert_matches(given[j], want, np.float64)


@jd.compute
def gather_plus(X, ids, E):
    Z[i] = X[i] + E[ids[i]]
    return Z


@jd.compute
def gather1(E, ids):
    Z[i] = E[ids[i]]
    return Z


def test_out_over_an_input_of_a_kernel_with_checks_is_computed_aside(rng):
    """A kernel whose run-time check can fail part way gets no in-place inputs: out= the
    index array must not hide the IndexError (the general path ran again over the
    half-written indices and found them valid), nor leave an input half written."""
    E = np.array([4, 3, 2, 1, 0], dtype=np.int64)
    for n, bad in ((4, 2), (1000, 999), (100000, 0)):
        ids = rng.integers(0, 5, n)
        ids[bad] = 7
        assert gather1.kernel(E, ids).sig.alias == []
        c = ids.copy()
        with pytest.raises(IndexError, match="is 7, outside"):
            gather1(E, c, out=c)
        x, ids2 = np.arange(float(n)), ids.copy()
        with pytest.raises(IndexError, match="is 7, outside"):
            gather_plus(x, ids2, E.astype(np.float64), out=x)
        np.testing.assert_array_equal(x, np.arange(float(n)))
        np.testing.assert_array_equal(ids2, ids)
    ids = rng.integers(0, 5, 50)
    x = rng.standard_normal(50)
    want = x + E[ids]
    assert gather_plus(x, ids, E.astype(np.float64), out=x) is x
    assert_matches(x, want, np.float64)


def test_kernel_errors_are_raised_through_the_fast_entry(rng):
    E = rng.standard_normal((10, 4))
    ids = np.array([3, 0, 9, 9])
    k = gather.kernel(E, ids)
    assert k.fast
    out = np.empty((4, 4))
    assert k.fastcall((E, ids), out) is None
    assert_matches(out, E[ids], np.float64)
    bad = np.array([1, 10, 2, 0])
    assert k.fastcall((E, bad), out) is ERROR
    with pytest.raises(IndexError, match=r"ids\[i\].* into E is 10, outside \[0, 10\)"):
        gather(E, bad)
    with pytest.raises(IndexError, match="is -1"):
        k.run((E, np.array([1, -1, 2, 0])))


@pytest.mark.cpu_only
def test_a_failed_allocation_is_raised_through_the_fast_entry(rng):
    @jd.compute
    def outer3(a, b, c):
        P[i, j, k] = a[i] * b[j] * c[k]
        S[i] = sum(P[i, j, k] for j in range(b.shape[0]) for k in range(c.shape[0]))
        return S

    @jd.schedule(outer3)
    def materialise(s, cfg):
        s.compute_root(s["P"])
    a, b, c = (rng.standard_normal(n) for n in (7, 5, 9))
    assert_matches(outer3(a, b, c), a * b.sum() * c.sum(), np.float64)
    a, b, c = (rng.standard_normal(100_000) for _ in range(3))   # P: 7.1 PiB
    k = outer3.kernel(a, b, c)
    assert k.fast and k.allocs
    assert k.fastcall((a, b, c), np.empty(100_000)) is ERROR
    with pytest.raises(jd.AllocationError, match=r"intermediate buffer P .*8000000000000000"):
        outer3(a, b, c)


def test_no_reference_leaks(rng):
    x, y = rng.standard_normal(50), rng.standard_normal(50)
    k = add.kernel(x, y)
    z = add(x, y)
    E, ids = rng.standard_normal((3, 2)), np.array([5, 0])
    g = gather.kernel(E, np.array([0, 1]))
    args = (x, y)
    before = [sys.getrefcount(v) for v in (x, y, args, z, FALLBACK, ERROR)]
    for _ in range(10000):
        k.fastcall(args, z)
        r = add(x, y)
    del r
    out = np.empty((2, 2))
    outcomes = set()
    for _ in range(10000):
        outcomes.add(id(k.fastcall((x[::2], x[::2]), z[:25])))
        outcomes.add(id(g.fastcall((E, ids), out)))
    assert outcomes == {id(FALLBACK), id(ERROR)}
    assert [sys.getrefcount(v) for v in (x, y, args, z, FALLBACK, ERROR)] == before
    r = add(x, y)
    assert sys.getrefcount(r) == 2                       # r and getrefcount's argument


def test_old_abi_kernels_run_through_the_pointer_entry(rng):
    x, y = rng.standard_normal(20), rng.standard_normal(20)
    k = add.kernel(x, y)
    sig = Signature.from_json({**k.sig.to_json(), "abi": 2})
    old = Kernel(sig, k.loaded)
    assert not old.fast and old.fastcall is None
    assert_matches(old.run((x, y)), x + y, np.float64)


def test_long_kernels_release_the_gil(rng):
    small, large = rng.standard_normal(100), rng.standard_normal(1 << 16)
    assert "PyEval_SaveThread" not in add.kernel(small, small).texts["llvm_ir"]
    assert "PyEval_SaveThread" in add.kernel(large, large).texts["llvm_ir"]
    assert_matches(add(large, large), 2 * large, np.float64)


FASTMOD = '''
import jitdl as jd

@jd.compute
def scaled_add(X, Y, a):
    Z[i] = X[i] + a * Y[i]
    return Z
'''

CHILD = textwrap.dedent('''\
    import json, sys
    import numpy as np
    import fastmod
    rng = np.random.default_rng(int(sys.argv[1]))
    x, y = rng.standard_normal(300), rng.standard_normal(300)
    z = fastmod.scaled_add(x, y, 1.5)
    k = fastmod.scaled_add.kernel(x, y, 1.5)
    ev = fastmod.scaled_add.cache_info()["events"][-1]
    print("RESULT " + json.dumps({"ok": bool(np.allclose(z, x + 1.5 * y, rtol=1e-12)),
                                  "fast": k.fast, "loaded": type(k.loaded).__name__,
                                  "result": ev["result"]}))
    ''')


@pytest.mark.parametrize("linker", ["ld", "0"])
def test_disk_cache_hit_in_another_process_uses_the_fast_entry(tmp_path, linker):
    if linker == "ld" and shutil.which("ld") is None:
        pytest.skip("no `ld`: cache entries carry no shared library here")
    (tmp_path / "fastmod.py").write_text(FASTMOD)
    (tmp_path / "child.py").write_text(CHILD)
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("JITDL_")}
    env.update(JITDL_CACHE_DIR=str(tmp_path / "cache"), JITDL_LINKER=linker,
               PYTHONPATH=str(tmp_path) + ":" + env.get("PYTHONPATH", ""))
    results = []
    for seed in (1, 2):
        p = subprocess.run([sys.executable, str(tmp_path / "child.py"), str(seed)],
                           cwd=str(tmp_path), env=env, capture_output=True, text=True,
                           timeout=120)
        assert p.returncode == 0, p.stderr
        results.append(json.loads(p.stdout.split("RESULT ", 1)[1]))
    first, second = results
    assert first["ok"] and second["ok"]
    assert first["result"] == "compiled" and second["result"] == "hit", results
    assert second["loaded"] == ("SharedLoaded" if linker == "ld" else "Loaded")
    assert first["fast"] and second["fast"], results


def test_exported_kernels_use_the_fast_entry(rng, tmp_path):
    x, y = rng.standard_normal(40), rng.standard_normal(40)
    path = tmp_path / "add.jdx"
    add.export(path, x, y)
    loaded = jd.load(path)
    k = next(iter(loaded._kernels.values()))
    assert k.fast
    assert_matches(loaded(x, y), x + y, np.float64)
    assert_matches(loaded(x[::-1], y), x[::-1] + y, np.float64)
