"""A fuzzer of index-notation range inference: random statements against a brute force.

Each example is a random statement `Y[i(, j)] = body` whose accesses index a 2-d X and 1-d
W, V with `c*v + e*r + off` or `(c*v + e*r + off) // d` per dimension (v an output index,
r a reduction variable with an explicit range), some of them under a select branch or a
reduction filter. The statement is written to a module file (index notation needs
source) and called. The expected output shape comes from Tensor Comprehensions' rule,
computed by brute force: for each output index, the values t for which every access that
mentions it stays inside its tensor for every r; ranges must start at 0 (else the
definition is an error). Values are compared with the same body evaluated by Python.
"""
import importlib.util
import itertools
import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

import jitdl as jd
from jitdl.errors import DefinitionError

_DIR = tempfile.mkdtemp(prefix="jitdl-fuzz-inference-")
_EXTRA = int(os.environ.get("JITDL_FUZZ_EXAMPLES", "0"))
_WINDOW = range(-60, 61)


@st.composite
def statements(draw):
    out = ["i", "j"][:draw(st.integers(1, 2))]
    R = draw(st.sampled_from([None, 1, 2, 3]))
    shapes = {"X": (draw(st.integers(1, 9)), draw(st.integers(1, 9))),
              "W": (draw(st.integers(1, 12)),), "V": (draw(st.integers(1, 12)),)}

    def index(n):
        v = draw(st.sampled_from(out + [None]))
        c = draw(st.sampled_from([1, 1, 2, 3, -1])) if v else 0
        e = draw(st.sampled_from([0, 1, 2])) if R else 0
        off = draw(st.sampled_from([0, 0, 1, 2, 3, -1, -2]))
        if c < 0:
            off = n - 1 - draw(st.integers(0, 2))
        if v is None:                    # a constant index (or r only) inside the tensor
            e = e if e * ((R or 1) - 1) <= n - 1 else 0
            off = draw(st.integers(0, n - 1 - e * ((R or 1) - 1)))
        terms = ([f"{c} * {v}" if c != 1 else v] if v else []) + \
            ([f"{e} * r" if e != 1 else "r"] if e else []) + ([str(off)] if off else [])
        terms = terms or ["0"]
        text = " + ".join(terms)
        d = draw(st.sampled_from([None, None, 2, 3]))
        if d:
            text = f"({text}) // {d}"
        return text, v, c, e, off, d

    accesses = []
    for _ in range(draw(st.integers(2, 4))):
        name = draw(st.sampled_from(["X", "W", "V"]))
        dims = [index(n) for n in shapes[name]]
        accesses.append((name, dims))
    # every output index is the index of some dimension
    for v in out:
        if not any(d[1] == v for _, dims in accesses for d in dims):
            accesses.append(("W", [(v, v, 1, 0, 0, None)]))
    texts = [f"{n}[{', '.join(d[0] for d in dims)}]" for n, dims in accesses]
    guard = draw(st.sampled_from(["none", "select", "filter"]))
    head, rest = texts[0], texts[1:]
    if guard == "select" and len(rest) >= 2:
        expr = f"({rest[0]} if {head} > 0 else {rest[1]})" + "".join(f" * {t}" for t in rest[2:])
    else:
        expr = " * ".join([head] + rest)
    if R:
        cond = f" if {rest[0]} > 0.5" if guard == "filter" and rest else ""
        expr = f"sum({expr} for r in range({R}){cond})"
    return out, R, shapes, accesses, f"Y[{', '.join(out)}] = {expr}"


def _index_value(dim, point, r):
    _, v, c, e, off, d = dim
    x = (c * point[v] if v else 0) + e * r + off
    return x // d if d else x


def expected_extents(out, R, shapes, accesses):
    """{index: (lo, hi)} by brute force over a window of values."""
    rs = range(R) if R else [0]
    found = {v: [] for v in out}
    for name, dims in accesses:
        for n, dim in zip(shapes[name], dims):
            v = dim[1]
            if v is None:                  # constant (or r only): keep it inside
                assume(all(0 <= _index_value(dim, {}, r) < n for r in rs))
                continue
            ok = [t for t in _WINDOW
                  if all(0 <= _index_value(dim, {v: t}, r) < n for r in rs)]
            assume(ok)                     # a dimension no value fits: degenerate example
            found[v].append((min(ok), max(ok)))
    return {v: (max(c[0] for c in cons), min(c[1] for c in cons))
            for v, cons in found.items()}


def shapes_disagree(out, R, shapes, accesses, extents):
    """The shape agreement rule: a bare index over the full extent of one argument
    dimension must have the same extent in the dimensions of other arguments it is the
    index of (two dimensions of one argument may differ: a diagonal)."""
    full = {v: hi + 1 for v, (_, hi) in extents.items()}
    if R:
        full["r"] = R
    for v, n_full in full.items():
        uses = [(name, n) for name, dims in accesses for n, d in zip(shapes[name], dims)
                if d[0] == v]
        if any(n1 == n_full and t1 != t2 and n1 != n2
               for t1, n1 in uses for t2, n2 in uses):
            return True
    return False


def _load(source, n):
    path = os.path.join(_DIR, f"stmt{n}.py")
    with open(path, "w") as fh:
        fh.write(source)
    spec = importlib.util.spec_from_file_location(f"jitdl_fuzz_stmt{n}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.f


_count = itertools.count()


@settings(max_examples=_EXTRA or 60, deadline=None, derandomize=not _EXTRA,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(stmt=statements(), seed=st.integers(0, 2**32 - 1))
def test_fuzz_range_inference(stmt, seed):
    out, R, shapes, accesses, line = stmt
    extents = expected_extents(out, R, shapes, accesses)
    source = ("import jitdl as jd\n\n@jd.compute\ndef f(X, W, V):\n"
              f"    {line}\n    return Y\n")
    f = _load(source, next(_count))
    rng = np.random.default_rng(seed)
    X, W, V = (rng.standard_normal(shapes[k]) for k in "XWV")
    starts_late = [v for v, (lo, _) in extents.items() if lo > 0]
    if starts_late:
        event("starts late")
        with pytest.raises(DefinitionError, match="would start at"):
            f(X, W, V)
        return
    shape = tuple(max(extents[v][1] + 1, 0) for v in out)
    if 0 not in shape and shapes_disagree(out, R, shapes, accesses, extents):
        event("shapes disagree")
        with pytest.raises(jd.ArgumentError, match="shape mismatch"):
            f(X, W, V)
        return
    try:
        got = f(X, W, V)
    except Exception as e:
        raise AssertionError(f"{line}\nexpected shape {shape}, got {e!r}") from e
    assert got.shape == shape, f"{line}: shape {got.shape}, expected {shape}"
    event("empty" if 0 in shape else "compared")
    expected = np.empty(shape)
    env = {"X": X, "W": W, "V": V}
    for point in itertools.product(*(range(n) for n in shape)):
        env.update(zip(out, point))
        expected[point] = eval(line.split(" = ", 1)[1], env)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=line)
