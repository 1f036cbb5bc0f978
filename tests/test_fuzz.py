"""A property-based fuzzer: random definitions under random legal schedules against a NumPy
reference interpreter.

A random expression tree over two matrices A (M, N), B (N, M), a vector b (N,), the index
variables and float constants is turned into a jitdl definition by tracing (`emit` walks
the tree at trace time and combines the symbolic values), and evaluated by `ref` with
NumPy on the same dtypes (NumPy 2 promotion: constants are weak Python floats, index
variables int64 arrays). `ref` also carries an error bound per element, and marks elements
whose value hinges on a rounding (a cast to int or a comparison within the error bound,
an integer overflow) as "don't care", so the comparison is tight but not flaky.
"""
import math
import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jitdl as jd

BINARY = ["+", "-", "*", "/", "max", "min"]
UNARY = ["abs", "exp", "f32", "i32"]
COMPARE = ["<", ">", "<=", ">="]
INT_CLAMP = 100.0
EXP_CLAMP = 5.0

# ---------------------------------------------------------------------------------------
# trees
# ---------------------------------------------------------------------------------------

_symbolic = st.sampled_from([("A",), ("B",), ("b",), ("i",), ("j",)])
leaves = st.one_of(      # two parts symbolic leaves to one part constants
    _symbolic, _symbolic,
    st.floats(-3, 3, allow_nan=False).map(lambda c: ("c", round(c, 3))),
)


def _extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(BINARY), children, children),
        st.tuples(st.sampled_from(UNARY), children),
        st.tuples(st.just("select"), st.sampled_from(COMPARE), children, children,
                  children, children),
    )


trees = st.recursive(leaves, _extend, max_leaves=10)


def const_value(op, args):
    """Evaluate an op whose arguments are all Python floats, in Python (trace-time)."""
    if op == "select":
        cmp, p, q, a, b = args
        return a if _compare(cmp, p, q) else b
    if op in UNARY:
        (x,) = args
        if op == "abs":
            return abs(x)
        if op == "exp":
            return math.exp(min(max(x, -EXP_CLAMP), EXP_CLAMP))
        return x     # a cast of a constant stays a (weak) constant: see fold()
    a, b = args
    return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
            "/": lambda: a / (abs(b) + 0.5), "max": lambda: max(a, b),
            "min": lambda: min(a, b)}[op]()


def fold(t):
    """Fold subtrees of constants into one constant, the way Python would at trace time
    (so that emit and ref never disagree about what is a weak Python scalar)."""
    op = t[0]
    if op in ("c", "A", "B", "b", "i", "j"):
        return t
    if op == "select":
        p, q, a, b = (fold(k) for k in t[2:])
        if p[0] == "c" and q[0] == "c":       # a Python bool at trace time: pick a branch
            return a if _compare(t[1], p[1], q[1]) else b
        return (op, t[1], p, q, a, b)
    kids = [fold(k) for k in t[1:]]
    if all(k[0] == "c" for k in kids):
        return ("c", const_value(op, [k[1] for k in kids]))
    return (op, *kids)


def uses(t, leaf):
    return t[0] == leaf or any(isinstance(k, tuple) and uses(k, leaf) for k in t[1:])


def _compare(cmp, p, q):
    return {"<": p < q, ">": p > q, "<=": p <= q, ">=": p >= q}[cmp]


# ---------------------------------------------------------------------------------------
# the jitdl side: runs at trace time on symbolic values
# ---------------------------------------------------------------------------------------

def _is_const(x):
    return isinstance(x, float)


def emit(t, env):
    op = t[0]
    if op == "c":
        return t[1]
    if op in env:
        return env[op]
    if op == "select":
        p, q, a, b = (emit(k, env) for k in t[2:])
        return jd.select(_compare(t[1], p, q), a, b)
    if op in UNARY:
        x = emit(t[1], env)
        if op == "abs":
            return jd.abs(x)
        if op == "exp":
            return jd.exp(jd.min(jd.max(x, -EXP_CLAMP), EXP_CLAMP))
        if op == "f32":
            return jd.float32(x)
        return jd.int32(jd.min(jd.max(x, -INT_CLAMP), INT_CLAMP))
    a, b = emit(t[1], env), emit(t[2], env)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        return a / ((abs(b) if _is_const(b) else jd.abs(b)) + 0.5)
    return (jd.max if op == "max" else jd.min)(a, b)


# ---------------------------------------------------------------------------------------
# the reference: (value, error bound, don't-care mask), NumPy semantics
# ---------------------------------------------------------------------------------------

def _eps(v):
    dt = np.result_type(v)
    return float(np.finfo(dt).eps) if dt.kind == "f" else 0.0


def _abs(v):
    return np.abs(np.asarray(v, dtype=np.float64))


def _int_overflow(v_exact, v):
    """Integer results that left their dtype's range (wrapped) are don't-care."""
    dt = np.result_type(v)
    if dt.kind not in "iu":
        return False
    return np.abs(v_exact) > np.iinfo(dt).max / 2


def ref(t, env):
    op = t[0]
    if op == "c":
        return t[1], 0.0, False
    if op in env:
        return env[op], 0.0, False
    if op == "select":
        (p, ep, up), (q, eq, uq), (a, ea, ua), (b, eb, ub) = (ref(k, env) for k in t[2:])
        cond = _compare(t[1], np.asarray(p), np.asarray(q))
        dt = np.result_type(a, b)
        v = np.where(cond, a, b).astype(dt)
        close = _abs(np.asarray(p, np.float64) - np.asarray(q, np.float64)) <= \
            4 * (np.asarray(ep) + eq)
        close &= (np.asarray(ep) + eq) > 0
        err = np.where(cond, ea, eb)
        return v, err, up | uq | np.where(cond, ua, ub) | close
    if op in UNARY:
        x, ex, ux = ref(t[1], env)
        if op == "abs":
            v = np.abs(x)
            return v, ex, ux | _int_overflow(_abs(x), v)
        if op == "exp":
            c = np.minimum(np.maximum(x, -EXP_CLAMP), EXP_CLAMP)
            v = np.exp(c)
            return v, v * ex + 8 * _eps(v) * _abs(v), ux
        if op == "f32":
            v = np.asarray(x).astype(np.float32)
            return v, ex + _abs(v) * _eps(v), ux
        c = np.minimum(np.maximum(x, -INT_CLAMP), INT_CLAMP)
        v = np.asarray(c).astype(np.int32)
        cf = np.asarray(c, dtype=np.float64)
        # truncation is discontinuous at every integer: near one, either side is fair
        edge = (np.asarray(ex) > 0) & (np.floor(cf + ex) != np.floor(cf - ex))
        return v, 0.0, ux | edge
    (a, ea, ua), (b, eb, ub) = ref(t[1], env), ref(t[2], env)
    u = ua | ub
    af, bf = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if op in ("+", "-"):
        v = a + b if op == "+" else a - b
        exact = af + bf if op == "+" else af - bf
        return v, ea + eb + 2 * _eps(v) * _abs(v), u | _int_overflow(exact, v)
    if op == "*":
        v = a * b
        err = ea * _abs(b) + eb * _abs(a) + ea * eb + 2 * _eps(v) * _abs(v)
        return v, err, u | _int_overflow(af * bf, v)
    if op == "/":
        d = abs(b) + 0.5 if isinstance(b, float) else np.abs(b) + 0.5   # keep weak scalars
        ed = eb + 2 * _eps(d) * _abs(d)
        v = a / d
        err = ea / _abs(d) + _abs(a) * ed / _abs(d) ** 2 + 2 * _eps(v) * _abs(v)
        return v, err, u
    v = np.maximum(a, b) if op == "max" else np.minimum(a, b)
    return v, np.asarray(ea) + eb, u


# ---------------------------------------------------------------------------------------
# building the definition and a random legal schedule
# ---------------------------------------------------------------------------------------

def make_elementwise(tree):
    @jd.compute
    def fuzz_ew(A, B, b):
        M, N = A.shape
        return jd.tensor(
            (M, N),
            lambda i, j: emit(tree, {"A": A[i, j], "B": B[j, i], "b": b[j], "i": i, "j": j}),
            name="Y")
    return fuzz_ew


def make_reduction(tree, axis):
    """Y[o] = sum over the other index of tree: axis 1 sums over j, axis 0 over i."""
    @jd.compute
    def fuzz_red(A, B, b):
        M, N = A.shape
        if axis == 1:
            k = jd.reduce_axis(N, name="k")
            return jd.tensor((M,), lambda i: jd.sum(
                emit(tree, {"A": A[i, k], "B": B[k, i], "b": b[k], "i": i, "j": k}), axis=k),
                name="Y")
        k = jd.reduce_axis(M, name="k")
        return jd.tensor((N,), lambda j: jd.sum(
            emit(tree, {"A": A[k, j], "B": B[j, k], "b": b[j], "i": k, "j": j}), axis=k),
            name="Y")
    return fuzz_red


@st.composite
def schedules(draw, n_data, n_reduce):
    """A list of steps: splits (factor or nparts), a reorder of all the loops, and loop
    annotations that are legal: vectorize the innermost loop if it is a data loop, parallel
    the outermost if it is a data loop, unroll anything."""
    loops = [("d", d) for d in range(n_data)] + [("r", r) for r in range(n_reduce)]
    steps, leaves = [], []
    for loop in loops:
        how = draw(st.sampled_from(["none", "factor", "nparts"]))
        if how == "none":
            leaves.append((loop, ""))
        else:
            steps.append(("split", loop, how, draw(st.integers(1, 9))))
            leaves += [(loop, "o"), (loop, "i")]
    order = draw(st.permutations(leaves))
    steps.append(("reorder", list(order)))
    annotated = set()
    if order[-1][0][0] == "d" and draw(st.booleans()):
        steps.append(("vectorize", order[-1]))
        annotated.add(order[-1])
    if order[0][0][0] == "d" and order[0] not in annotated and draw(st.booleans()):
        steps.append(("parallel", order[0]))
        annotated.add(order[0])
    for leaf in order:
        if leaf not in annotated and draw(st.integers(0, 3)) == 0:
            steps.append(("unroll", leaf))
    return steps


def apply_schedule(f, steps):
    @jd.schedule(f, target="cpu")
    def sched(s, cfg):
        Y = s["Y"]
        roots = {("d", n): ax for n, ax in enumerate(Y.axis)}
        roots.update({("r", n): ax for n, ax in enumerate(Y.reduce_axis)})
        handles = {(loop, ""): ax for loop, ax in roots.items()}
        for step in steps:
            if step[0] == "split":
                _, loop, how, n = step
                kw = {"nparts": n} if how == "nparts" else {}
                outer, inner = s.split(roots[loop], **kw) if kw else s.split(roots[loop], n)
                handles[(loop, "o")], handles[(loop, "i")] = outer, inner
            elif step[0] == "reorder":
                s.reorder(*(handles[leaf] for leaf in step[1]))
            else:
                getattr(s, step[0])(handles[step[1]])


# ---------------------------------------------------------------------------------------
# inputs and comparison
# ---------------------------------------------------------------------------------------

def inputs(seed, M, N):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((M, N)), rng.standard_normal((N, M)), rng.standard_normal(N))


def ref_env(A, B, b, M, N):
    return {"A": A, "B": B.T, "b": b[None, :], "i": np.arange(M, dtype=np.int64)[:, None],
            "j": np.arange(N, dtype=np.int64)[None, :]}


def compare(got, v, err, dont_care, tree, steps):
    v = np.asarray(v)
    assert got.dtype == v.dtype, (got.dtype, v.dtype, tree)
    assert got.shape == v.shape, (got.shape, v.shape)
    vf, gf = v.astype(np.float64), got.astype(np.float64)
    err = np.broadcast_to(np.asarray(err, np.float64), v.shape)
    care = ~np.broadcast_to(np.asarray(dont_care), v.shape) & np.isfinite(err)
    finite = np.isfinite(vf)
    bad = care & finite & ~(np.abs(gf - vf) <= 4 * err + 1e-300)
    bad |= care & ~finite & ~((gf == vf) | (np.isnan(gf) & np.isnan(vf)))
    if bad.any():
        idx = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{bad.sum()} of {bad.size} elements differ; first at {idx}: got {gf[idx]!r}, "
            f"expected {vf[idx]!r} +- {4 * err[idx]:.3g}\ntree={tree}\nschedule={steps}")


# ---------------------------------------------------------------------------------------
# the properties
# ---------------------------------------------------------------------------------------

# Deterministic by default (the suite must stay green on CI); JITDL_FUZZ_EXAMPLES=N runs N
# fresh random examples per property for a longer hunt.
_EXTRA = int(os.environ.get("JITDL_FUZZ_EXAMPLES", "0"))


def fuzz_settings(n):
    return settings(max_examples=_EXTRA or n, deadline=None, derandomize=not _EXTRA,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@fuzz_settings(60)
@given(tree=trees, M=st.integers(1, 40), N=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_fuzz_elementwise(tree, M, N, seed, data):
    tree = fold(tree)
    steps = data.draw(schedules(2, 0), label="schedule")
    A, B, b = inputs(seed, M, N)
    with np.errstate(all="ignore"):
        v, err, dont_care = ref(tree, ref_env(A, B, b, M, N))
    v = np.broadcast_to(np.asarray(v), (M, N))
    f = make_elementwise(tree)
    apply_schedule(f, steps)
    got = f(A, B, b)
    compare(got, v, err, dont_care, tree, steps)


@fuzz_settings(40)
@given(tree=trees, M=st.integers(1, 40), N=st.integers(1, 40), axis=st.sampled_from([0, 1]),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_fuzz_reduction(tree, M, N, axis, seed, data):
    tree = fold(tree)
    reduced = "j" if axis == 1 else "i"
    if tree[0] == "c" or not any(uses(tree, leaf) for leaf in
                                 (("A", "B", "b", "j") if axis == 1 else ("A", "B", "i"))):
        tree = ("+", tree, ("A",))    # make the body depend on the reduced index
    tree = fold(tree)
    steps = data.draw(schedules(1, 1), label="schedule")
    A, B, b = inputs(seed, M, N)
    with np.errstate(all="ignore"):
        v, err, dont_care = ref(tree, ref_env(A, B, b, M, N))
    v = np.broadcast_to(np.asarray(v), (M, N))
    err = np.broadcast_to(np.asarray(err, np.float64), (M, N))
    dont_care = np.broadcast_to(np.asarray(dont_care), (M, N))
    red_axis = 1 if reduced == "j" else 0
    total = v.sum(axis=red_axis, dtype=v.dtype)
    n_terms = v.shape[red_axis]
    # reassociation: each partial sum may round once more per term
    eps = float(np.finfo(v.dtype).eps) if v.dtype.kind == "f" else 0.0
    total_err = err.sum(axis=red_axis) + n_terms * eps * np.abs(v.astype(np.float64)).sum(
        axis=red_axis)
    if v.dtype.kind in "iu":
        exact = v.astype(np.float64).sum(axis=red_axis)
        over = np.abs(exact) > np.iinfo(v.dtype).max / 2
    else:
        over = False
    care_not = dont_care.any(axis=red_axis) | over
    f = make_reduction(tree, red_axis)
    apply_schedule(f, steps)
    got = f(A, B, b)
    compare(got, total, total_err, care_not, tree, steps)
